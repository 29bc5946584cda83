"""The no-code path: run an unmodified script or module with adaptalloc
installed (``python -m adaptalloc.torch [options] script.py ARGS`` or
``python -m adaptalloc.torch [options] -m module ARGS``).

Kept free of torch so its argument handling is testable anywhere; the
installer (adaptalloc.torch.install) is passed in.
"""
import os
import runpy
import sys

USAGE = """usage: python -m adaptalloc.torch [options] script.py [args...]
       python -m adaptalloc.torch [options] -m module [args...]

Runs the script (or module) as __main__ with adaptalloc as PyTorch's CUDA
allocator, installed before the script's first line. Options:
  --model NAME        ADAPTALLOC_MODEL (policy file and run name)
  --policy FILE       ADAPTALLOC_POLICY
  --policy-dir DIR    ADAPTALLOC_POLICY_DIR
  --db PATH|off       ADAPTALLOC_DB
  --http HOST:PORT|off  ADAPTALLOC_HTTP
  --trace             ADAPTALLOC_TRACE=1
  --no-native         use the CUDAPluggableAllocator fallback
  --require-gpu       without a usable GPU, fail (exit 2) instead of running
                      the script on PyTorch's own allocator (also
                      ADAPTALLOC_REQUIRE_GPU=1)
  -h, --help          this text
Options may also be written --name=value."""

_VALUED = {"--model": "model", "--policy": "policy", "--policy-dir": "policy_dir",
           "--db": "db", "--http": "http"}


class UsageError(Exception):
    pass


class InstallError(Exception):
    """The installer cannot run here (e.g. torch is missing)."""


class NoDevice(Exception):
    """No GPU adaptalloc can serve (the reason is the message): the script
    runs on PyTorch's own allocator, or, with --require-gpu, does not run."""


def parse(argv):
    """argv (without the program name) -> (install keywords, kind, target,
    target's argv). kind is "script" or "module"."""
    opts = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            raise UsageError(None)
        if a == "-m":
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name")
            return opts, "module", argv[i + 1], [argv[i + 1]] + argv[i + 2:]
        if a == "--":
            i += 1
            break
        if not a.startswith("-"):
            break
        name, eq, value = a.partition("=")
        if name in _VALUED:
            if not eq:
                if i + 1 >= len(argv):
                    raise UsageError("%s needs a value" % name)
                i += 1
                value = argv[i]
            if value == "":
                raise UsageError("%s needs a non-empty value" % name)
            opts[_VALUED[name]] = value
        elif name == "--trace" and not eq:
            opts["trace"] = True
        elif name == "--no-native" and not eq:
            opts["native"] = False
        elif name == "--require-gpu" and not eq:
            opts["require_gpu"] = True
        else:
            raise UsageError("unknown option %s" % a)
        i += 1
    if i >= len(argv):
        raise UsageError("no script given")
    script = argv[i]
    if not os.path.isfile(script):
        raise UsageError("%s: no such file" % script)
    return opts, "script", script, argv[i:]


def main(argv, install, prog="python -m adaptalloc.torch"):
    """Parses argv, calls install(**keywords), then runs the target as
    __main__ with sys.argv set to what it would see without us. install may
    raise NoDevice: then one line says so and the target runs on PyTorch's
    own allocator (exit 2 instead with --require-gpu or
    ADAPTALLOC_REQUIRE_GPU=1). Returns an exit status for usage errors;
    otherwise what the script does (including SystemExit) propagates."""
    try:
        opts, kind, target, targv = parse(argv)
    except UsageError as e:
        if e.args[0] is None:
            print(USAGE)
            return 0
        print("%s: %s\n%s" % (prog, e.args[0], USAGE), file=sys.stderr)
        return 2
    require = opts.pop("require_gpu", False) or os.environ.get("ADAPTALLOC_REQUIRE_GPU") == "1"
    try:
        install(**opts)
    except InstallError as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 2
    except NoDevice as e:
        if require:
            print("%s: %s; not running %s (--require-gpu or ADAPTALLOC_REQUIRE_GPU=1)"
                  % (prog, e, target), file=sys.stderr)
            return 2
        # one line, then the script as it would run without us
        print("%s: %s; running %s on PyTorch's own allocator, without adaptalloc "
              "(--require-gpu makes this an error)" % (prog, e, target), file=sys.stderr)
    sys.argv = list(targv)
    if kind == "module":
        sys.path.insert(0, os.getcwd())
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
        runpy.run_path(target, run_name="__main__")
    return 0
