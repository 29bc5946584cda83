"""adaptalloc command line: a running job's state and policy over its HTTP
server (docs/operating.md "The command line"). Standard library only, and
no import of the native library: it runs from a source tree as
``python3 python/adaptalloc/cli.py`` as well as ``python -m adaptalloc`` or
the installed ``adaptalloc`` script.

    adaptalloc status                       pools at a glance
    adaptalloc top [--interval S]           live view (curses; --once: one frame)
    adaptalloc policy get                   the policy in force (JSON)
    adaptalloc policy patch DOC|@FILE|-     merge patch (RFC 7386)
    adaptalloc policy put FILE|-            replace the policy (complete)
    adaptalloc snapshot [-o FILE]           stats, policy, segments, OOMs: one JSON
    adaptalloc trace --seconds N [--sample N] [--min-bytes B] [--max-events N] [--wait]
                                            trace the next N seconds into the job's store
    adaptalloc trace --off | --status       end it now; what is traced
    adaptalloc holders [--pool NAME] [--top N]
                                            who holds the job's memory now: live sizes
                                            and largest live blocks (GET /holders)
    adaptalloc holders --db FILE [--top N]  the same at the end of a stored trace, with
                                            bytes by call stack

The job: --url (http://HOST:PORT, HOST:PORT or PORT; default $ADAPTALLOC_URL,
else 127.0.0.1:9100), --rank R adds R to the port (ADAPTALLOC_HTTP's
"+rank": rank R of a job on one host listens on 9100 + R).

The token (mutating requests only; reads need none): --token-file FILE, else
$ADAPTALLOC_TOKEN (unless "off"), else, for a loopback URL, the file the job
wrote at start: $XDG_RUNTIME_DIR/adaptalloc/<port>.token when
XDG_RUNTIME_DIR is an absolute path, else /tmp/adaptalloc-<uid>/<port>.token
(docs/security.md "The token file").

Exit codes: 0 done; 1 the server refused (4xx other than 401/403, 5xx;
its message is printed); 2 usage, or a file named on the command line that
cannot be read (@FILE, a policy not UTF-8 or not JSON) or written (snapshot
-o: an input such as a token file, a missing folder, /dev/full); 3 the job
cannot be reached (or answered something that is not its JSON); 4 refused
for want of the right token (401/403), or a token that cannot be one (a
token file that cannot be read, over 4096 bytes, or a token with a space, a
newline or a control character); 5 not supported by this server. Errors are
one line on stderr.

Files: snapshot -o follows adaptalloc's one rule for outputs
(_outfile.py): never an input (the token files count as inputs), checked
before any request, written through an exclusive temporary in the target's
folder and renamed (a device such as /dev/null is written in place). Every
file read is bounded: a policy document 16 MiB, a token file 4096 bytes.
"""
import argparse
import json
import os
import shutil
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

try:
    from . import _outfile as outfile  # the package: python -m adaptalloc, adaptalloc
except ImportError:  # python3 python/adaptalloc/cli.py: the file beside this one
    import importlib.util as _ilu
    _spec = _ilu.spec_from_file_location(
        "aa_outfile", os.path.join(os.path.dirname(os.path.realpath(__file__)), "_outfile.py"))
    outfile = _ilu.module_from_spec(_spec)
    _spec.loader.exec_module(outfile)

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_AUTH, EXIT_UNSUPPORTED = range(6)
DEFAULT_URL = "127.0.0.1:9100"
MAX_DOC_BYTES = 16 << 20    # a policy document (@FILE, -)
MAX_TOKEN_BYTES = 4096      # a token file
PROG = "adaptalloc"


class CliError(Exception):
    """One line for stderr and an exit code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------ the job

def base_url(url, rank=None):
    """http://host:port from URL, HOST:PORT or PORT, the port plus rank."""
    url = (url or os.environ.get("ADAPTALLOC_URL") or DEFAULT_URL).strip()
    if url.isdigit():
        url = "127.0.0.1:" + url
    if "://" not in url:
        url = "http://" + url
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http":
        raise CliError("--url %r: only http:// (the job serves no TLS; use an SSH tunnel)" % url,
                       EXIT_USAGE)
    try:
        port = u.port or 9100
    except ValueError:
        raise CliError("--url %r: the port is not a number from 0 to 65535" % url,
                       EXIT_USAGE) from None
    host = u.hostname or "127.0.0.1"
    if rank:
        port += rank
        if port > 65535:
            raise CliError("--rank %d: port %d is past 65535" % (rank, port), EXIT_USAGE)
    if ":" in host:
        host = "[%s]" % host
    return "http://%s:%d" % (host, port)


def is_loopback(base):
    host = urllib.parse.urlsplit(base).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def default_token_file(port):
    """Where the job on `port` wrote its token (the runtime's rule)."""
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg.startswith("/"):
        return os.path.join(xdg, "adaptalloc", "%d.token" % port)
    return "/tmp/adaptalloc-%d/%d.token" % (os.geteuid(), port)


def find_token(base, token_file=None):
    """(token, where) for a mutating request; token None when there is none."""
    if token_file:
        return read_token_file(token_file, explicit=True), token_file
    env = os.environ.get("ADAPTALLOC_TOKEN")
    if env and env.lower() != "off":
        return check_token(env, "ADAPTALLOC_TOKEN"), "ADAPTALLOC_TOKEN"
    if not is_loopback(base):
        return None, None  # a job elsewhere wrote its file on its own host
    path = default_token_file(urllib.parse.urlsplit(base).port)
    return read_token_file(path, explicit=False), path


def check_token(token, where):
    """token if it can go in an Authorization header (visible ASCII, no
    space), else CliError (exit 4) naming where it came from."""
    for i, c in enumerate(token):
        if not "!" <= c <= "~":
            raise CliError("the token from %s holds %r at offset %d (a token is visible ASCII: "
                           "no space, newline or control character); set it to the token alone"
                           % (where, c, i), EXIT_AUTH)
    return token


def read_token_file(path, explicit):
    """The token in the file's first line (at most MAX_TOKEN_BYTES read);
    None when the job's default file is missing."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TOKEN_BYTES + 1)
    except FileNotFoundError:
        if explicit:
            raise CliError("token file %s: no such file" % path, EXIT_USAGE) from None
        return None
    except OSError as e:
        raise CliError("token file %s: %s" % (path, e.strerror or e), EXIT_AUTH) from None
    if len(data) > MAX_TOKEN_BYTES:
        raise CliError("token file %s is over %d bytes: not a token file"
                       % (path, MAX_TOKEN_BYTES), EXIT_AUTH)
    lines = data.splitlines()
    token = lines[0].strip(b" \t") if lines else b""
    if not token:
        return None
    return check_token(token.decode("latin-1"), "token file %s" % path)


def request(base, method, path, body=None, headers=None, token=None, timeout=10.0):
    """(status, headers, body bytes); CliError when the job cannot be reached."""
    h = {"Accept": "application/json"}
    h.update(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    data = body.encode("utf-8") if isinstance(body, str) else body
    req = urllib.request.Request(base + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()
    except urllib.error.URLError as e:
        raise CliError("%s: cannot reach the job: %s" % (base, reason_text(e.reason)),
                       EXIT_UNREACHABLE) from None
    except (OSError, ValueError) as e:  # timeouts, resets, a non-HTTP answer
        raise CliError("%s: cannot reach the job: %s" % (base, reason_text(e)),
                       EXIT_UNREACHABLE) from None


def reason_text(r):
    return getattr(r, "strerror", None) or str(r) or type(r).__name__


def error_text(body):
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and "error" in doc:
            return str(doc["error"])
    except ValueError:
        pass
    return body.decode("utf-8", "replace").strip()[:300] or "(no message)"


def get_json(base, path):
    status, _h, body = request(base, "GET", path)
    if status != 200:
        raise CliError("GET %s: %d %s" % (path, status, error_text(body)),
                       EXIT_AUTH if status in (401, 403) else EXIT_REFUSED)
    try:
        return json.loads(body)
    except ValueError:
        raise CliError("GET %s: the answer is not JSON (is %s an adaptalloc job?)"
                       % (path, base), EXIT_UNREACHABLE) from None


def mutate(base, method, path, body, ctype, token_file=None, if_match=None):
    token, where = find_token(base, token_file)
    headers = {"Content-Type": ctype}
    if if_match is not None:
        headers["If-Match"] = '"%d"' % if_match
    status, _h, answer = request(base, method, path, body, headers, token)
    if status in (401, 403):
        if token is None and where is None:
            hint = ("no token for a job on another host: set ADAPTALLOC_TOKEN or pass "
                    "--token-file")
        elif token is None:
            hint = ("no token found (%s: no such file; --token-file, ADAPTALLOC_TOKEN; the job "
                    "names its token file in its start-up line, another user's is not readable)"
                    % where)
        else:
            hint = "the token from %s is not this job's" % where
        raise CliError("%s %s: %d %s; %s" % (method, path, status, error_text(answer), hint),
                       EXIT_AUTH)
    if status >= 300:
        raise CliError("%s %s: %d %s" % (method, path, status, error_text(answer)),
                       EXIT_REFUSED)
    try:
        return json.loads(answer)
    except ValueError:
        return {}


# ------------------------------------------------------------------ text

def fmt_bytes(n):
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024
    return "%d B" % n


def fmt_pct(x):
    return "-" if x is None else "%.1f%%" % (100.0 * x)


def pool_line(p):
    return "%-16s %-8s in use %10s  reserved %10s  peak %10s  hit %6s  allocs %10d  ooms %d" % (
        p.get("name", "?")[:16], p.get("backend", "?")[:8], fmt_bytes(p.get("bytes_in_use")),
        fmt_bytes(p.get("bytes_reserved")), fmt_bytes(p.get("peak_bytes_reserved")),
        fmt_pct(p.get("overall_hit_rate")), p.get("allocs", 0), p.get("ooms", 0))


def status_text(base, st):
    lines = ["%s  model %s  policy version %s%s" % (
        base, st.get("model", "?"), st.get("policy_version", "?"),
        ("  pid %s" % st["pid"]) if "pid" in st else "")]
    for p in st.get("pools", []):
        lines.append(pool_line(p))
    a = st.get("adapt")
    if isinstance(a, dict):
        lines.append("loop %s: step %s, %s rejected by replay" % (
            "on" if a.get("enabled") else "off", a.get("steps", 0), a.get("rejected_by_replay", 0)))
    oom = st.get("last_oom")
    if oom:
        lines.append("last OOM: pool %s, %s asked" % (oom.get("pool", "?"),
                                                      fmt_bytes(oom.get("size", 0))))
    return "\n".join(lines)


def top_lines(base, st, pool_index=0, width=120, classes=12, sizes=8):
    """The top view as lines: every pool, then the selected pool's classes
    (most in use first) and its most frequent request sizes."""
    pools = st.get("pools", [])
    out = ["adaptalloc top  %s  model %s  policy v%s  %s" % (
        base, st.get("model", "?"), st.get("policy_version", "?"), time.strftime("%H:%M:%S")),
        ""]
    for i, p in enumerate(pools):
        out.append(("> " if i == pool_index else "  ") + pool_line(p))
    if pools:
        p = pools[pool_index % len(pools)]
        out += ["", "classes of %s (most in use first)" % p.get("name"),
                "  %10s %6s %11s %11s %10s %10s %7s" % ("block", "slabs", "in use", "reserved",
                                                         "hits", "misses", "waste")]
        cls = sorted(p.get("classes", []), key=lambda k: -(k.get("bytes_in_use") or 0))
        for k in cls[:classes]:
            u = k.get("bytes_in_use") or 0
            w = max(0, u - (k.get("bytes_requested") or 0)) / u if u else None
            out.append("  %10s %6d %11s %11s %10d %10d %7s%s" % (
                fmt_bytes(k.get("block_size")), k.get("slabs", 0), fmt_bytes(u),
                fmt_bytes(k.get("bytes_reserved")), k.get("hits", 0), k.get("misses", 0),
                fmt_pct(w), " (retiring)" if k.get("retiring") else ""))
        out += ["", "top request sizes of %s" % p.get("name")]
        for h in (p.get("hh") or [])[:sizes]:
            out.append("  %10s x %d" % (fmt_bytes(h.get("size")), h.get("count", 0)))
        out += ["", "q quits, p / tab next pool"]
    return [line[:width] for line in out]


# ------------------------------------------------------------------ commands

def cmd_status(args, base):
    st = get_json(base, "/stats")
    print(json.dumps(st, indent=2) if args.json else status_text(base, st))
    return EXIT_OK


def cmd_top(args, base):
    if args.once or not sys.stdout.isatty():
        # one frame: cut to the terminal's width when there is one, whole
        # lines into a pipe or a file
        width = shutil.get_terminal_size((1 << 16, 0)).columns if sys.stdout.isatty() else 1 << 16
        print("\n".join(top_lines(base, get_json(base, "/stats"), width=width)))
        return EXIT_OK
    import curses

    def loop(scr):
        curses.curs_set(0)
        scr.timeout(int(args.interval * 1000))
        sel, err = 0, None
        while True:
            try:
                st = get_json(base, "/stats")
                err = None
            except CliError as e:
                st, err = {"pools": []}, str(e)
            h, w = scr.getmaxyx()
            scr.erase()
            lines = top_lines(base, st, sel, w - 1)
            if err:
                lines = [err[:w - 1]] + lines
            for y, line in enumerate(lines[:h]):
                scr.addstr(y, 0, line)
            scr.refresh()
            c = scr.getch()
            if c in (ord("q"), ord("Q"), 27):
                return
            if c in (ord("p"), 9) and st.get("pools"):
                sel = (sel + 1) % len(st["pools"])

    try:
        curses.wrapper(loop)
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def read_doc(spec, what):
    """The document of `spec`: JSON text, @FILE, FILE (for put) or - (stdin);
    files read up to MAX_DOC_BYTES and checked as UTF-8 (CliError, exit 2)."""
    try:
        if spec == "-":
            data = outfile._read_bounded(sys.stdin.buffer, MAX_DOC_BYTES)
            if len(data) > MAX_DOC_BYTES:
                raise CliError("policy %s: stdin is over %d bytes: refused"
                               % (what, MAX_DOC_BYTES), EXIT_USAGE)
            text = data.decode("utf-8")
        elif spec.startswith("@") or (what == "put" and not spec.lstrip().startswith("{")):
            path = spec[1:] if spec.startswith("@") else spec
            text = outfile.read_text(path, "policy %s" % what, MAX_DOC_BYTES)
        else:
            text = spec
            text.encode("utf-8")  # an argument that is not UTF-8 (surrogates)
    except outfile.FileError as e:
        raise CliError(str(e), EXIT_USAGE) from None
    except OSError as e:
        raise CliError("policy %s: %s" % (what, e.strerror or e), EXIT_USAGE) from None
    except UnicodeError:
        raise CliError("policy %s: the document is not UTF-8 text" % what, EXIT_USAGE) from None
    try:
        json.loads(text)
    except ValueError as e:
        raise CliError("policy %s: the document is not JSON (%s)" % (what, e), EXIT_USAGE) from None
    return text


def cmd_policy(args, base):
    if args.policy_cmd == "get":
        print(json.dumps(get_json(base, "/policy"), indent=2))
        return EXIT_OK
    if args.policy_cmd == "patch":
        doc = read_doc(args.doc, "patch")
        ans = mutate(base, "PATCH", "/policy", doc, "application/merge-patch+json",
                     args.token_file, args.if_match)
    else:
        doc = read_doc(args.file, "put")
        ans = mutate(base, "PUT", "/policy", doc, "application/json", args.token_file,
                     args.if_match)
    v = ans.get("version", "?")
    print("version %s in force%s" % (v, "" if ans.get("changed", True) else " (nothing changed)"))
    return EXIT_OK


def token_files(args, base):
    """The token files this command may read: inputs an output must not
    replace (--token-file, the job's default file for its port)."""
    return [args.token_file, default_token_file(urllib.parse.urlsplit(base).port)]


def cmd_snapshot(args, base):
    if args.output not in (None, "-"):
        try:  # before any request: never an input, a folder that takes it
            outfile.check_output(args.output, token_files(args, base), "snapshot -o")
        except outfile.FileError as e:
            raise CliError(str(e), EXIT_USAGE) from None
    st = get_json(base, "/stats")
    snap = {"url": base, "time_unix_ms": int(time.time() * 1000), "stats": st,
            "policy": get_json(base, "/policy"), "segments": {}, "oom": None}
    for p in st.get("pools", []):
        name = p.get("name")
        try:
            snap["segments"][name] = get_json(base, "/segments?pool=" + urllib.parse.quote(name))
        except CliError as e:
            if e.code == EXIT_UNREACHABLE:
                raise
            snap["segments"][name] = None
    try:
        snap["oom"] = get_json(base, "/oom")
    except CliError as e:
        if e.code == EXIT_UNREACHABLE:
            raise
    text = json.dumps(snap, indent=1) + "\n"
    if args.output in (None, "-"):
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except OSError as e:
            raise CliError("snapshot: cannot write stdout: %s" % (e.strerror or e),
                           EXIT_USAGE) from None
    else:
        try:
            with outfile.replacing(args.output) as out:
                out.file.write(text)
        except outfile.FileError as e:
            raise CliError("snapshot: %s" % e, EXIT_USAGE) from None
        except OSError as e:
            raise CliError("snapshot: cannot write %s: %s" % (args.output, e.strerror or e),
                           EXIT_USAGE) from None
        print("%s: %d pools" % (args.output, len(st.get("pools", []))), file=sys.stderr)
    return EXIT_OK


def trace_patch(seconds=None, sample=None, min_bytes=None, max_events=None, off=False):
    """The merge patch that turns a live trace on (or off): the one rule the
    CLI and adaptalloc.trace() share (docs/operating.md "Tracing a live job").
    min_bytes alone traces only sizes of at least min_bytes (trace_sample 0)."""
    if off:
        return {"telemetry": {"trace": False}}
    t = {"trace": True, "trace_seconds": int(seconds or 0)}
    if sample is None:
        sample = 0 if min_bytes else 1
    t["trace_sample"] = int(sample)
    t["trace_min_bytes"] = int(min_bytes or 0)
    if max_events is not None:
        t["trace_max_events"] = int(max_events)
    return {"telemetry": t}


def trace_text(tr):
    """One line about /stats' trace object."""
    if not tr:
        return "this job reports no trace state (an older adaptalloc)"
    if not tr.get("on"):
        return "tracing is off" + ("" if tr.get("available", True) else
                                   " (no store in this run: ADAPTALLOC_DB=off)")
    what = "every event" if tr.get("sample") == 1 and not tr.get("min_bytes") else (
        "%s%s" % ("1 in %d allocations" % tr["sample"] if tr.get("sample") else "",
                  ("%severy allocation of %s or more" % (" and " if tr.get("sample") else "",
                                                         fmt_bytes(tr["min_bytes"])))
                  if tr.get("min_bytes") else ""))
    left = tr.get("remaining_ms")
    when = ("until turned off" if left is None else "%.1f s left" % (left / 1000.0))
    s = "tracing %s, %s" % (what, when)
    sm = tr.get("sampled")
    if sm:
        s += "; %d traced, %d live" % (sm.get("traced", 0), sm.get("live", 0))
    if tr.get("max_events"):
        s += "; the store keeps the newest %d events" % tr["max_events"]
    return s


def cmd_trace(args, base):
    if args.off:
        if args.seconds is not None or args.sample is not None or args.min_bytes is not None:
            raise CliError("trace --off takes no --seconds, --sample or --min-bytes", EXIT_USAGE)
        doc = trace_patch(off=True)
    elif args.status:
        st = get_json(base, "/stats")
        print(json.dumps(st.get("trace"), indent=2) if args.json else trace_text(st.get("trace")))
        return EXIT_OK
    else:
        if args.seconds is None:
            raise CliError("trace needs --seconds N (0: until `trace --off`), --off or --status",
                           EXIT_USAGE)
        if args.seconds < 0 or args.seconds > 2592000:
            raise CliError("--seconds %d: 0 to 2592000 (30 days)" % args.seconds, EXIT_USAGE)
        if args.sample is not None and (args.sample < 0 or args.sample > 1000000000):
            raise CliError("--sample %d: 0 to 1000000000 (1: every event)" % args.sample,
                           EXIT_USAGE)
        if args.sample == 0 and not args.min_bytes:
            raise CliError("--sample 0 traces nothing by count: give --min-bytes", EXIT_USAGE)
        if args.min_bytes is not None and args.min_bytes < 0:
            raise CliError("--min-bytes must be >= 0", EXIT_USAGE)
        doc = trace_patch(args.seconds, args.sample, args.min_bytes, args.max_events)
    st = get_json(base, "/stats")
    if "trace" not in st:
        raise CliError("this job's server has no live tracing (an adaptalloc before it); start "
                       "it with ADAPTALLOC_TRACE=1 instead", EXIT_UNSUPPORTED)
    ans = mutate(base, "PATCH", "/policy", json.dumps(doc), "application/merge-patch+json",
                 args.token_file)
    tr = get_json(base, "/stats").get("trace")
    if not ans.get("changed", True) and not args.off:
        print("nothing changed: %s" % trace_text(tr))
    else:
        print("version %s in force: %s" % (ans.get("version", "?"), trace_text(tr)))
    if args.wait and not args.off and args.seconds:
        deadline = time.monotonic() + args.seconds + 5
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(0.05, deadline - time.monotonic())))
            tr = get_json(base, "/stats").get("trace") or {}
            if not tr.get("on"):
                print("the trace ended")
                return EXIT_OK
        raise CliError("the trace did not end within %d s" % (args.seconds + 5), EXIT_REFUSED)
    return EXIT_OK


def holders(db, run=None, top=10):
    """Who holds the memory at the end of a stored trace (the store's
    trace_events and trace_frames, sqlite3 of the standard library): the
    live blocks replayed in sequence order, then the live sizes by bytes
    held and the largest live blocks with their call stacks. A sampled trace
    answers for its sample."""
    import sqlite3
    if not os.path.isfile(db):
        raise CliError("%s: no such database" % db, EXIT_USAGE)
    # a read-only connection makes the -wal and -shm files when missing and
    # cannot remove them: then a read-write open and close does, as the
    # store's readers do (SQLite removes them only when no one else has the
    # database open)
    had_wal = os.path.exists(db + "-wal")
    try:
        con = sqlite3.connect("file:%s?mode=ro" % urllib.parse.quote(db), uri=True)
        if run is None:
            run = con.execute("SELECT max(id) FROM runs").fetchone()[0]
        if run is None:
            raise CliError("%s: no run" % db, EXIT_USAGE)
        cols = {r[1] for r in con.execute("PRAGMA table_info(trace_events)")}
        frame_col = "frame" if "frame" in cols else "NULL"
        rows = con.execute("SELECT op, ptr, size, %s FROM trace_events WHERE run_id = ? "
                           "ORDER BY seq, id" % frame_col, (run,))
        live = {}
        for op, ptr, size, frame in rows:
            if op == "a" and ptr:
                live[ptr] = [size, None]
            elif op == "f":
                live.pop(ptr, None)
            elif op == "c" and ptr in live:
                live[ptr][1] = frame
        stacks = {}
        if "frame" in cols:
            stacks = dict(con.execute("SELECT id, frames FROM trace_frames WHERE run_id = ?",
                                      (run,)))
        con.close()
        if not had_wal and os.path.exists(db + "-wal") and os.access(db, os.W_OK):
            tidy = sqlite3.connect(db)
            tidy.execute("SELECT count(*) FROM sqlite_master").fetchone()
            tidy.close()
    except sqlite3.Error as e:
        raise CliError("%s: %s" % (db, e), EXIT_USAGE) from None
    by_size = {}
    for size, _f in live.values():
        n, b = by_size.get(size, (0, 0))
        by_size[size] = (n + 1, b + size)
    sizes = sorted(by_size.items(), key=lambda kv: -kv[1][1])[:top]
    largest = sorted(live.items(), key=lambda kv: -kv[1][0])[:top]
    by_stack = {}
    for size, f in live.values():
        if f:
            n, b = by_stack.get(f, (0, 0))
            by_stack[f] = (n + 1, b + size)
    return {
        "run": run, "live_blocks": len(live), "live_bytes": sum(s for s, _ in live.values()),
        "top_sizes": [{"size": s, "blocks": n, "bytes": b} for s, (n, b) in sizes],
        "largest": [{"ptr": "0x%x" % p, "size": s, "frames": stacks.get(f, "").splitlines()}
                    for p, (s, f) in largest],
        "by_stack": [{"frames": stacks.get(f, "").splitlines(), "blocks": n, "bytes": b}
                     for f, (n, b) in sorted(by_stack.items(), key=lambda kv: -kv[1][1])[:top]],
    }


def live_holders(base, pool=None, top=10):
    """Who holds the job's memory now: GET /holders of each pool (or of
    `pool`), the server's documents as they are (docs/http.md "GET
    /holders"): {"url": base, "pools": [doc, ...]}."""
    if pool is not None:
        names = [pool]
    else:
        names = [p.get("name") for p in get_json(base, "/stats").get("pools", [])
                 if p.get("name")]
    docs = []
    for name in names:
        docs.append(get_json(base, "/holders?pool=%s&top=%d"
                             % (urllib.parse.quote(name, safe=""), top)))
    return {"url": base, "pools": docs}


def live_holders_text(h):
    out = []
    for d in h["pools"]:
        out.append("pool %s: %d blocks live, %s held (%s requested), now (walk %d us)"
                   % (d.get("pool"), d.get("live_blocks", 0), fmt_bytes(d.get("live_bytes")),
                      fmt_bytes(d.get("requested_bytes")), d.get("walk_us", 0)))
        out.append("live sizes by bytes held (bytes requested):")
        for e in d.get("top_sizes", []):
            out.append("  %12d x %-6d %s" % (e["size"], e["blocks"], fmt_bytes(e["bytes"])))
        other = d.get("other") or {}
        if other.get("blocks"):
            out.append("  %12s x %-6d %s" % ("other sizes", other["blocks"],
                                             fmt_bytes(other.get("bytes"))))
        out.append("largest live blocks (offset from the pool's lowest segment):")
        for e in d.get("largest", []):
            frames = e.get("frames")
            out.append("  +%-14d %10s  %-7s %s" % (
                e["offset"], fmt_bytes(e["size"]), e.get("kind", "?"),
                " <- ".join(frames[:4]) if frames
                else "(stack evicted)" if e.get("frames_evicted") else "(no stack)"))
        out.append("")
    if any(d.get("largest") for d in h["pools"]) and not any(
            e.get("frames") for d in h["pools"] for e in d.get("largest", [])):
        out.append("stacks: only while a sampled trace with stacks is on; or ask "
                   "`adaptalloc holders --db` (docs/operating.md \"Who holds the memory\")")
    return "\n".join(out).rstrip("\n")


def cmd_holders(args, base):
    if args.top < 1 or (args.db is None and args.top > 100):
        raise CliError("--top %d: must be from 1%s" % (args.top, "" if args.db else " to 100"),
                       EXIT_USAGE)
    if args.db is None:
        if args.run is not None:
            raise CliError("--run: only with --db (a stored trace)", EXIT_USAGE)
        h = live_holders(base, args.pool, args.top)
        print(json.dumps(h, indent=2) if args.json else live_holders_text(h))
        return EXIT_OK
    if args.pool is not None:
        raise CliError("--pool: only against a job (without --db)", EXIT_USAGE)
    h = holders(args.db, args.run, args.top)
    if args.json:
        print(json.dumps(h, indent=2))
        return EXIT_OK
    print("run %s: %d blocks live, %s, at the end of the trace"
          % (h["run"], h["live_blocks"], fmt_bytes(h["live_bytes"])))
    print("live sizes by bytes held:")
    for e in h["top_sizes"]:
        print("  %12s x %-6d %s" % (fmt_bytes(e["size"]), e["blocks"], fmt_bytes(e["bytes"])))
    print("largest live blocks:")
    for e in h["largest"]:
        print("  %s %s  %s" % (e["ptr"], fmt_bytes(e["size"]),
                               " <- ".join(e["frames"][:4]) or "(no stack)"))
    if h["by_stack"]:
        print("bytes held by call stack:")
        for e in h["by_stack"]:
            print("  %s in %d blocks: %s" % (fmt_bytes(e["bytes"]), e["blocks"],
                                              " <- ".join(e["frames"][:4])))
    return EXIT_OK


# ------------------------------------------------------------------ main

def parser():
    ap = argparse.ArgumentParser(
        prog=PROG, description="A running adaptalloc job's state and policy over its HTTP server.",
        epilog="exit codes: 0 done, 1 refused by the server, 2 usage (or a file that cannot be "
               "read or written), 3 job unreachable, 4 token missing, wrong or unreadable, "
               "5 not supported by this server")
    ap.add_argument("--url", help="the job: http://HOST:PORT, HOST:PORT or PORT "
                                  "(default $ADAPTALLOC_URL, else %s)" % DEFAULT_URL)
    ap.add_argument("--rank", type=int, default=0, help="add RANK to the port (one job per rank)")
    ap.add_argument("--token-file", help="the job's token file (default: the file it wrote)")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    sub.required = True
    s = sub.add_parser("status", help="pools at a glance")
    s.add_argument("--json", action="store_true", help="the whole /stats document")
    s.set_defaults(fn=cmd_status)
    t = sub.add_parser("top", help="live view of pools, classes and top sizes")
    t.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes")
    t.add_argument("--once", action="store_true", help="print one frame and exit")
    t.set_defaults(fn=cmd_top)
    p = sub.add_parser("policy", help="get, patch or put the policy")
    ps = p.add_subparsers(dest="policy_cmd", metavar="get|patch|put")
    ps.required = True
    ps.add_parser("get", help="the policy in force")
    pp = ps.add_parser("patch", help="merge patch: JSON text, @FILE or -")
    pp.add_argument("doc")
    pp.add_argument("--if-match", type=int, help="only if this version is in force")
    pu = ps.add_parser("put", help="replace the policy: FILE or -")
    pu.add_argument("file")
    pu.add_argument("--if-match", type=int, help="only if this version is in force")
    p.set_defaults(fn=cmd_policy)
    n = sub.add_parser("snapshot", help="stats, policy, segments and OOMs as one JSON document")
    n.add_argument("-o", "--output", help="write to FILE (default stdout)")
    n.set_defaults(fn=cmd_snapshot)
    r = sub.add_parser("trace", help="trace the next N seconds into the job's store, sampled")
    r.add_argument("--seconds", type=int,
                   help="turn tracing on for N seconds (0: until trace --off)")
    r.add_argument("--sample", type=int,
                   help="trace one allocation in N on average (default 1: all; 0: by size only)")
    r.add_argument("--min-bytes", type=int,
                   help="also trace every allocation of at least B bytes (alone: only those)")
    r.add_argument("--max-events", type=int,
                   help="the store keeps the newest N trace events (0: no bound)")
    r.add_argument("--wait", action="store_true", help="return when the trace has ended")
    r.add_argument("--off", action="store_true", help="turn tracing off now")
    r.add_argument("--status", action="store_true", help="say what is traced now")
    r.add_argument("--json", action="store_true", help="--status: the /stats trace object")
    r.set_defaults(fn=cmd_trace)
    h = sub.add_parser("holders", help="who holds the memory: the job now, or the end of a "
                                       "stored trace (--db)")
    h.add_argument("--db", help="a store (ADAPTALLOC_DB): the end of its trace, with stacks "
                                "(default: ask the job)")
    h.add_argument("--pool", help="the job's pool (default: every pool)")
    h.add_argument("--run", type=int, help="the run (default: the latest)")
    h.add_argument("--top", type=int, default=10,
                   help="rows per list (default 10; at most 100 from a job)")
    h.add_argument("--json", action="store_true", help="as JSON")
    h.set_defaults(fn=cmd_holders)
    return ap


def main(argv=None):
    args = parser().parse_args(argv)  # usage errors: exit 2 with argparse's line
    if args.rank < 0:
        print("%s: --rank must be >= 0" % PROG, file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.fn(args, base_url(args.url, args.rank))
    except CliError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
