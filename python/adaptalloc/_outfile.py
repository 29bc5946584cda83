"""adaptalloc's one rule for the files its programs write, and the bounded
reads of the files they take in: the Python side of util/src/outfile.c.

Standard library only, and no import of the package (the tools under tools/
load this file by its path: tools_import() below; adaptalloc.torch imports
it as adaptalloc._outfile), so it works without the compiled _C.

Outputs:
  check_output(path, inputs, what)  before any work: refuses an output that
      is one of the inputs (by file identity: ./x, a symlink onto it and a
      hard link all count), a folder, a dangling symlink, a missing or
      unwritable folder. Raises FileError.
  replacing(path)  a context manager: a temporary file created exclusively
      (O_EXCL, a random name) in the target's folder (a symlink's target's:
      the link stays a link) with the target's mode, renamed over the target
      when the block ends without an error, removed otherwise, so a failure
      leaves the old output as it was and creates nothing. A non-regular
      target (/dev/null, /dev/full, a FIFO) is written in place.
      follow=False (a file written unattended into a shared folder: the OOM
      snapshot): a symlink at the path is replaced, never followed, and
      nothing is written in place.
  write_all([(path, data), ...])  several outputs, all or none: every
      temporary written and synced before the first rename.

Inputs:
  read_input(path, what, limit)  the bytes of a file, at most `limit` (a
      device such as /dev/zero or a runaway file is refused, not read into
      memory); read_text and load_json on top: UTF-8 and JSON checked, each
      problem one FileError naming the file.

Every FileError's message is one line naming the file and what is wrong.
"""
import json
import math
import os
import stat
import tempfile

__all__ = ["FileError", "check_output", "replacing", "write_all", "read_input",
           "read_text", "load_json", "json_kind", "finite"]


class FileError(Exception):
    """A file that cannot be read or written as asked; str() is one line."""


def _same(a, b):
    return a.st_dev == b.st_dev and a.st_ino == b.st_ino


def _strerror(exc):
    return exc.strerror or str(exc)


def _target(path):
    """The file a write to path replaces: a symlink's target (so the link
    stays a link), else path itself."""
    return os.path.realpath(path) if os.path.lexists(path) else path


def check_output(path, inputs=(), what="--out", dash_is_stdout=False):
    """Refuses, before any work, an output that would destroy an input or
    cannot be written (FileError). `inputs`: paths (None skipped; "-" is
    stdin); `what`: how the user named the output (an option);
    dash_is_stdout: the program writes "-" to stdout (else "-" is a file)."""
    if path is None or path == "":
        raise FileError("%s: the output path is empty" % what)
    if "\0" in path:
        raise FileError("%s %r: a path holds no NUL byte" % (what, path))
    if path == "-" and dash_is_stdout:
        try:
            ost = os.fstat(1)
        except OSError:
            return
    else:
        try:
            ost = os.stat(path)
        except FileNotFoundError:
            ost = None
            if os.path.islink(path):
                raise FileError("%s %s is a symlink to a missing file; name the file itself"
                                % (what, path))
        except OSError as e:
            raise FileError("%s %s: %s" % (what, path, _strerror(e)))
    if ost is not None and stat.S_ISDIR(ost.st_mode):
        raise FileError("%s %s is a folder; name a file" % (what, path))
    # only a regular file is lost by being overwritten (/dev/null on both
    # sides is no conflict)
    if ost is not None and stat.S_ISREG(ost.st_mode):
        for inp in inputs:
            if inp is None:
                continue
            try:
                ist = os.fstat(0) if inp == "-" else os.stat(inp)
            except OSError:
                continue  # the input's reader names that problem
            if _same(ist, ost):
                raise FileError("%s %s is the input %s (the same file); writing it would "
                                "destroy the input: name another output"
                                % (what, "(stdout)" if path == "-" and dash_is_stdout else path,
                                   "(stdin)" if inp == "-" else inp))
    if (path == "-" and dash_is_stdout) or (ost is not None and not stat.S_ISREG(ost.st_mode)):
        return  # written in place
    folder = os.path.dirname(_target(path)) or "."
    if not os.path.isdir(folder):
        raise FileError("%s %s: its folder %s does not exist" % (what, path, folder))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise FileError("%s %s: its folder %s is not writable" % (what, path, folder))


class _Out:
    """One output being written: .file (open for writing), .tmp (the
    temporary's path, None when written in place), .path."""

    def __init__(self, path, binary, new_mode, follow=True):
        self.path = path
        self.tmp = None
        self.file = None
        self.target = path
        mode = "wb" if binary else "w"
        enc = None if binary else "utf-8"
        try:
            st = os.stat(path) if follow else os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as e:
            raise FileError("cannot write %s: %s" % (path, _strerror(e)))
        if st is not None and not follow and not stat.S_ISREG(st.st_mode):
            st = None  # a link (or a device) at the name: replaced, not followed
        try:
            if st is not None and not stat.S_ISREG(st.st_mode):
                self.file = open(path, mode, encoding=enc)  # /dev/null, a FIFO
                return
            self.target = _target(path) if follow else path
            folder = os.path.dirname(self.target) or "."
            # the target's extension kept: a program that writes the
            # temporary by its name may pick the format by it (chromium)
            fd, self.tmp = tempfile.mkstemp(prefix="." + os.path.basename(self.target) + ".",
                                            suffix=os.path.splitext(self.target)[1], dir=folder)
        except OSError as e:
            raise FileError("cannot write %s: %s" % (path, _strerror(e)))
        try:
            if st is not None:
                perm = stat.S_IMODE(st.st_mode)
            else:
                um = os.umask(0)
                os.umask(um)
                perm = new_mode & ~um
            os.fchmod(fd, perm)
            self.file = os.fdopen(fd, mode, encoding=enc)
        except OSError as e:
            os.close(fd)
            self.abort()
            raise FileError("cannot write %s: %s" % (path, _strerror(e)))

    def finish(self):
        """Flushes and syncs (the temporary); FileError on a write error."""
        f, self.file = self.file, None
        try:
            if f.closed:  # a program wrote the temporary by its name
                if self.tmp is not None:
                    fd = os.open(self.tmp, os.O_RDONLY | os.O_NOFOLLOW)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
                return
            f.flush()
            if self.tmp is not None:
                os.fsync(f.fileno())
            f.close()
        except OSError as e:
            try:
                f.close()
            except OSError:
                pass
            self.abort()
            raise FileError("cannot write %s: %s" % (self.path, _strerror(e)))

    def commit(self):
        if self.tmp is None:
            return
        try:
            os.replace(self.tmp, self.target)
        except OSError as e:
            self.abort()
            raise FileError("cannot write %s: %s" % (self.path, _strerror(e)))
        self.tmp = None

    def abort(self):
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
            self.file = None
        if self.tmp is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None


class replacing:
    """with replacing(path) as out: write out.file (or have a program write
    the file named out.name); renamed over path when the block ends without
    an error. binary: bytes; new_mode: a new file's mode under the umask."""

    def __init__(self, path, binary=False, new_mode=0o666, follow=True):
        self._args = (path, binary, new_mode, follow)
        self._out = None

    def __enter__(self):
        self._out = _Out(*self._args)
        return self

    @property
    def file(self):
        return self._out.file

    @property
    def name(self):
        """The path to write: the temporary, or the target written in place."""
        return self._out.tmp if self._out.tmp is not None else self._out.path

    def __exit__(self, kind, value, tb):
        if kind is not None:
            self._out.abort()
            return False
        self._out.finish()
        self._out.commit()
        return False


def write_all(outputs, binary=False, new_mode=0o666):
    """Writes each (path, data) through its own temporary; renames them all
    only once every one is written and synced (FileError naming the first
    that failed; nothing is then replaced)."""
    done = []
    try:
        for path, data in outputs:
            out = _Out(path, binary, new_mode)
            done.append(out)
            try:
                out.file.write(data)
            except OSError as e:
                raise FileError("cannot write %s: %s" % (path, _strerror(e)))
            out.finish()
    except BaseException:
        for out in done:
            out.abort()
        raise
    for out in done:
        out.commit()


def _read_bounded(f, limit, chunk=1 << 20):
    """At most limit + 1 bytes of the open binary file f, read in chunks:
    memory grows with what the file holds, never reserved for the whole
    limit up front (a 100-byte file under a small address-space limit)."""
    parts = []
    left = limit + 1
    while left > 0:
        part = f.read(min(chunk, left))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def read_input(path, what, limit):
    """The bytes of the file `path`, at most `limit` of them (FileError
    beyond, and for a folder or an unreadable file). `what`: how the user
    named it (an option)."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISDIR(st.st_mode):
                raise FileError("%s %s is a folder; name a file" % (what, path))
            data = _read_bounded(f, limit)
    except FileError:
        raise
    except IsADirectoryError:
        raise FileError("%s %s is a folder; name a file" % (what, path))
    except OSError as e:
        raise FileError("cannot read %s %s: %s" % (what, path, _strerror(e)))
    except MemoryError:
        raise FileError("%s %s: out of memory reading it" % (what, path))
    if len(data) > limit:
        raise FileError("%s %s is over %d bytes (%s): refused" % (
            what, path, limit, "not a regular file" if not stat.S_ISREG(st.st_mode)
            else "larger than a file of this kind can be"))
    return data


def read_text(path, what, limit):
    """read_input decoded as UTF-8 (FileError naming the first bad byte)."""
    data = read_input(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileError("%s %s is not UTF-8 text (byte 0x%02x at offset %d)"
                        % (what, path, data[e.start], e.start))


def _no_constant(name):
    raise ValueError("%s is not a JSON number" % name)


def load_json(path, what, limit, kind=None):
    """read_text parsed as strict JSON (NaN and Infinity refused); `kind`
    (dict or list): the type the document must be. FileError otherwise."""
    text = read_text(path, what, limit)
    if text.strip() == "":
        raise FileError("%s %s is empty: not JSON" % (what, path))
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except ValueError as e:
        raise FileError("%s %s is not JSON: %s" % (what, path, str(e).splitlines()[0]))
    except RecursionError:
        raise FileError("%s %s is not JSON this reader takes: nested too deep" % (what, path))
    if kind is not None and not isinstance(doc, kind):
        raise FileError("%s %s: the document is %s, not %s" % (
            what, path, json_kind(doc), json_kind(kind())))
    return doc


def json_kind(v):
    """The JSON name of v's type, for messages."""
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, (int, float)):
        return "a number"
    return "null"


def finite(text, what):
    """float(text), refusing what is not a finite number (nan, inf): a bound
    of time or size must be one. ValueError naming `what`."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ValueError("%s %r is not a number" % (what, text))
    if not math.isfinite(v):
        raise ValueError("%s %r is not a finite number" % (what, text))
    return v
