"""adaptalloc: an adaptive GPU and pinned-host memory allocator.

The Python layer over libadaptalloc (bundled in this package). The runtime
(pools, SQLite store, policy loop, HTTP server) starts on first use with the
configuration ``configure()`` gave it (a C call: the ADAPTALLOC_* environment
with the keywords on top), else with the ADAPTALLOC_* environment.

    import adaptalloc
    adaptalloc.start(model="bert-base", http="127.0.0.1:0", db="off")
    adaptalloc.stats()["pools"]          # what GET /stats answers
    adaptalloc.patch_policy({"adapt": {"interval_ms": 500}})
    adaptalloc.http_address()            # "127.0.0.1:41234"

For PyTorch: ``import adaptalloc.torch; adaptalloc.torch.install()``
(docs/torch.md).
"""
# The modules this one uses are imported under underscore names, so that the
# public namespace (dir(adaptalloc)) is __all__ and the subpackages alone.
import json as _json
import os as _os
import sys as _sys


def _running_the_cli():
    """True while ``python -m adaptalloc`` imports this package on its way
    to __main__ (the command line, which never loads the native library):
    runpy has set sys.argv[0] to "-m" and the command named this package."""
    if _sys.argv[:1] != ["-m"]:
        return False
    orig = list(getattr(_sys, "orig_argv", []))
    for i, a in enumerate(orig):
        if a == "-m":
            return orig[i + 1:i + 2] == [__name__]
        if a == "-m" + __name__:
            return True
        if a.startswith("-m"):
            return False
    return False


try:
    from . import _C
except ImportError:
    # Without the built extension only `python -m adaptalloc` goes on (the
    # API below is then unusable, and nothing calls it); `import adaptalloc`
    # raises as it always did.
    if not _running_the_cli():
        raise
    _C = None

__all__ = [
    "AdaptallocError", "PolicyError", "PolicyConflict", "ENV", "configure", "start",
    "started", "shutdown", "stats", "region_stats", "region_id", "policy", "policy_version",
    "set_policy", "patch_policy", "trace", "trace_off",
    "http_address", "http_port", "url", "token_file", "run_id", "policy_dir", "cuda_device_count", "Block",
]

__version__ = "0.1.0"


class AdaptallocError(RuntimeError):
    """The runtime cannot do what was asked (started already, shut down...)."""


class PolicyError(ValueError):
    """A policy document was refused; the message names the field and rule."""


class PolicyConflict(AdaptallocError):
    """set_policy(if_match=N) while another version is in force."""


#: Block(kind, size, stream=None): one block of the runtime's "host" or
#: "pinned" pool as a writable buffer (memoryview(b), numpy.frombuffer(b));
#: returned to the pool when it dies. Pinned blocks are reused only after the
#: work `stream` had at that moment has completed (set_last_use,
#: record_stream); b.address, b.size, b.capacity, b.device_address.
Block = _C.Block if _C is not None else None

# keyword -> the environment variable the runtime reads for it when no keyword
# sets it (README "Environment")
ENV = {
    "model": "ADAPTALLOC_MODEL",
    "policy": "ADAPTALLOC_POLICY",
    "policy_dir": "ADAPTALLOC_POLICY_DIR",
    "db": "ADAPTALLOC_DB",
    "http": "ADAPTALLOC_HTTP",
    "token": "ADAPTALLOC_TOKEN",
    "trace": "ADAPTALLOC_TRACE",
    "quiet": "ADAPTALLOC_QUIET",
}

_HERE = _os.path.dirname(_os.path.abspath(__file__))


def policy_dir():
    """The directory of the policies shipped with the package."""
    return _os.path.join(_HERE, "policies")


def _env_value(key, value):
    """The setting's string (as its environment variable would hold it) for
    one keyword, or a clear error."""
    if key in ("trace", "quiet"):
        if isinstance(value, bool) or (type(value) is int and value in (0, 1)):
            return "1" if value else "0"
        raise TypeError("adaptalloc: %s= must be True or False, not %r" % (key, value))
    if key in ("db", "http") and value is False:
        return "off"
    if isinstance(value, _os.PathLike):
        value = _os.fspath(value)
    if not isinstance(value, str):
        raise TypeError("adaptalloc: %s= must be a string%s, not %s" % (
            key, " or False" if key in ("db", "http") else "", type(value).__name__))
    if value == "" or "\0" in value:
        raise ValueError("adaptalloc: %s= must be a non-empty string without NUL" % key)
    if key == "policy" and not _os.path.isfile(value):
        raise ValueError("adaptalloc: policy=%r: no such file" % value)
    if key == "policy_dir" and not _os.path.isdir(value):
        raise ValueError("adaptalloc: policy_dir=%r: no such directory" % value)
    if key == "http" and value != "off" and ":" not in value:
        raise ValueError("adaptalloc: http=%r: expected HOST:PORT (port 0 picks one) or "
                         "'off'" % value)
    return value


# What configure() gave the runtime so far: environment variable name ->
# value (the keywords' values, as _env_value spells them). The runtime takes
# the environment for the others, when configure() runs.
_configured = {}


def _configure_c(settings):
    """Hands settings (environment variable name -> string) to the C runtime
    (_C.configure: the environment with these on top)."""
    kw = {}
    for key, name in ENV.items():
        v = settings.get(name)
        if v is None:
            continue
        kw[key] = v == "1" if key in ("trace", "quiet") else v
    _C.configure(**kw)


def configure(**overrides):
    """Configures the runtime from keywords (model, policy, policy_dir, db,
    http, token, trace, quiet; None leaves one alone; db=False and
    http=False mean "off") through a C call (_C.configure): the runtime starts
    with the ADAPTALLOC_* environment as it is now, with every keyword given
    to configure() so far on top. The environment is not changed. Must run
    before the runtime starts: afterwards only the values in force are
    accepted. Also points policy_dir at the packaged policies when neither it
    nor ADAPTALLOC_POLICY_DIR is set and ./policies does not exist. Returns
    the settings it changed, by environment variable name."""
    unknown = sorted(set(overrides) - set(ENV))
    if unknown:
        raise TypeError("adaptalloc: unknown keyword(s) %s; known: %s" % (
            ", ".join(unknown), ", ".join(sorted(ENV))))
    wanted = {}
    for key, value in overrides.items():
        if value is not None:
            wanted[ENV[key]] = _env_value(key, value)
    if started():
        # in force: what configure() gave, else the environment it started with
        def in_force(name):
            if name in _configured:
                return _configured[name]
            v = _os.environ.get(name)
            if name == "ADAPTALLOC_QUIET":  # quiet when set at all
                return "1" if v is not None else "0"
            return v
        changed = {k: v for k, v in wanted.items() if in_force(k) != v}
        if changed:
            raise AdaptallocError(
                "adaptalloc: the runtime already started; %s cannot change now (set it "
                "before the first allocation or adaptalloc.start())" % ", ".join(sorted(changed)))
        return {}
    if ("ADAPTALLOC_POLICY_DIR" not in wanted and "ADAPTALLOC_POLICY_DIR" not in _configured
            and not _os.environ.get("ADAPTALLOC_POLICY_DIR")
            and not _os.path.isdir("policies") and _os.path.isdir(policy_dir())):
        wanted["ADAPTALLOC_POLICY_DIR"] = policy_dir()
    settings = dict(_configured)
    settings.update(wanted)
    try:
        _configure_c(settings)
    except RuntimeError as e:  # it started meanwhile (another thread's allocation)
        raise AdaptallocError(str(e)) from None
    _configured.clear()
    _configured.update(settings)
    return wanted


def started():
    """Whether the runtime has started in this process (by start(), a stats
    call or the first allocation)."""
    return _C.started()


def start(**overrides):
    """configure(**overrides), then starts the runtime (idempotent)."""
    configure(**overrides)
    _C.start()


def _ensure():
    if not started():
        start()


def shutdown():
    """Stops the server, the loop and the store (flushing it) and destroys the
    pools. Everything allocated from them is invalid after this; it cannot be
    started again in this process. Refused while adaptalloc is PyTorch's CUDA
    allocator (adaptalloc.torch.install()): PyTorch keeps allocating from and
    freeing into these pools until the process ends. Not needed to keep the
    telemetry: a process that exits without it (returning, sys.exit) ends its
    store run at exit, its trace written out (docs/store.md)."""
    import sys
    t = sys.modules.get("adaptalloc.torch")
    mode = t.installed() if t is not None else None
    if mode is not None:
        raise AdaptallocError(
            "adaptalloc.shutdown: adaptalloc is PyTorch's CUDA allocator (%s) in this process; "
            "its pools live until the process ends" % mode)
    _C.shutdown()


def stats():
    """The runtime's /stats document as a dict: model, policy_version,
    run_id, pools (one dict per pool: name, bytes_in_use, bytes_reserved,
    peaks, classes, histogram...), adapt, store."""
    _ensure()
    return _json.loads(_C.stats_json())


def region_stats():
    """Per region (adaptalloc.torch.region, pools.regions in the policy): a dict
    name -> {"pools": [the region's pool dicts of stats(), one per device or
    backend], "bytes_in_use", "bytes_reserved", "peak_bytes_in_use",
    "limit_bytes", "allocs", "ooms": sums over those pools}. A region appears
    once a pool was made for it (its first allocation)."""
    out = {}
    for p in stats()["pools"]:
        name = p.get("region")
        if not name:
            continue
        r = out.setdefault(name, {"pools": [], "bytes_in_use": 0, "bytes_reserved": 0,
                                  "peak_bytes_in_use": 0, "limit_bytes": 0, "allocs": 0,
                                  "ooms": 0})
        r["pools"].append(p)
        for k in ("bytes_in_use", "bytes_reserved", "peak_bytes_in_use", "limit_bytes",
                  "allocs", "ooms"):
            r[k] += p[k]
    return out


def region_id(name):
    """The id of region `name` (registered on first use; at most 16 names a
    process). ValueError for a name that is not 1 to 20 ASCII letters, digits,
    '_' and '-' starting with a letter; AdaptallocError past 16 names."""
    try:
        return _C.region_id(name)
    except RuntimeError as e:
        raise AdaptallocError(str(e)) from None


def policy():
    """The policy in force as a dict; its version is policy()["version"]
    when the document carries one, else see policy_version()."""
    _ensure()
    doc, _version = _C.policy_json()
    return _json.loads(doc)


def policy_version():
    """The version of the policy in force (1 at start, +1 per change)."""
    _ensure()
    return _C.policy_json()[1]


def _document(doc, what):
    if isinstance(doc, (bytes, bytearray)):
        try:
            doc = bytes(doc).decode("utf-8")
        except UnicodeDecodeError as e:
            raise PolicyError("adaptalloc.%s: the document is not UTF-8 (%s)" % (what, e)) from None
    if isinstance(doc, dict):
        return _json.dumps(doc)
    if isinstance(doc, str):
        return doc
    raise TypeError("adaptalloc.%s: the policy must be a dict or a JSON string, not %s"
                    % (what, type(doc).__name__))


def _update(doc, patch, if_match, what):
    text = _document(doc, what)
    if if_match is not None and (isinstance(if_match, bool) or not isinstance(if_match, int)
                                 or if_match < 1):
        raise TypeError("adaptalloc.%s: if_match must be a version number >= 1, not %r"
                        % (what, if_match))
    if "\0" in text:
        raise PolicyError("adaptalloc.%s: the document contains a NUL character" % what)
    _ensure()
    rc, version, message = _C.policy_update(text, patch, if_match or 0, "python")
    if rc == _C.OK:
        return version
    if rc in (_C.EPARSE, _C.EINVAL, _C.ERANGE, _C.ECONFLICT):
        # ECONFLICT: a setting that cannot change while the runtime lives
        # (HTTP 409); the message names it
        raise PolicyError("adaptalloc.%s: %s" % (what, message))
    if rc == _C.ESTALE:
        raise PolicyConflict("adaptalloc.%s: %s" % (what, message))
    raise AdaptallocError("adaptalloc.%s: %s (%s)" % (what, message, _C.strerror(rc)[0]))


def set_policy(doc, *, if_match=None):
    """Replaces the policy in force with `doc` (a dict or JSON text, the
    policies/schema.json format), as PUT /policy does: validated, applied to
    every pool, logged to the store. `doc` must be complete (pools.device,
    pools.pinned, pools.host, adapt and telemetry present; a part left out
    would go back to its defaults): use patch_policy to change part. Returns the new version (the version in
    force, unchanged, when `doc` equals the policy in force). Raises
    PolicyError (a ValueError) naming the problem; nothing changes then."""
    return _update(doc, False, if_match, "set_policy")


def patch_policy(patch, *, if_match=None):
    """Merges `patch` (RFC 7386 merge patch, a dict or JSON text) into the
    policy in force, as PATCH /policy does. Returns the new version (the
    version in force, unchanged, when the patch changes nothing, e.g. {})."""
    return _update(patch, True, if_match, "patch_policy")


def trace(seconds=0, *, sample=None, min_bytes=None, max_events=None):
    """Turns live tracing on for `seconds` (0: until trace_off()): one
    allocation in `sample` on average (default 1: every one), and/or every
    allocation of at least `min_bytes` (given alone: only those), into the
    store, whose trace table keeps the newest `max_events` events when given.
    A traced block's free follows it; the trace ends by itself after
    `seconds` (stats()["trace"]["remaining_ms"]). Goes through the policy
    (telemetry.trace*), as PATCH /policy and `adaptalloc trace` do. Returns
    the policy version. PolicyError when it cannot apply (no store:
    ADAPTALLOC_DB=off; ADAPTALLOC_TRACE=1 traces the whole run)."""
    from .cli import trace_patch
    return _update(trace_patch(seconds, sample, min_bytes, max_events), True, None, "trace")


def trace_off():
    """Ends live tracing now. Returns the policy version."""
    from .cli import trace_patch
    return _update(trace_patch(off=True), True, None, "trace_off")


def http_port():
    """The HTTP server's port, 0 when it is off or not started."""
    return _C.http_port()


def http_address():
    """The HTTP server's bound address ("127.0.0.1:9100"), None when off."""
    return _C.http_address()


def url():
    """http://ADDRESS/ of the dashboard, None when the server is off."""
    addr = http_address()
    return None if addr is None else "http://%s/" % addr


def token_file():
    """The file holding the token this process's server made because no
    ADAPTALLOC_TOKEN was set (mode 0600; docs/security.md "The token file"):
    other processes of this user send its first line as "Authorization:
    Bearer ..." to change the policy over HTTP (the adaptalloc command line
    reads it by itself). None when the server is off or not started, a token
    was set (or is "off"), or the file could not be written. This process
    needs no token: set_policy and patch_policy are in-process calls."""
    return _C.token_file()


def run_id():
    """The store's run id for this process (0 when the store is off)."""
    return _C.run_id()


def cuda_device_count():
    """CUDA devices usable by libadaptalloc (0 without CUDA or a GPU)."""
    return _C.cuda_device_count()
