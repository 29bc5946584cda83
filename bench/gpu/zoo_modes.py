"""The GPU workload zoo (bench_zoo.py), one concern: the allocator modes and
the environment a run gets under each (PyTorch's setting, adaptalloc's
runtime, --native-variant overrides).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


MODES = ["native", "pluggable", "default", "expandable", "async"]
DEFAULT_MODES = ["native", "default", "expandable", "async"]
TORCH_MODES = ("default", "expandable", "async")
OURS = ("native", "pluggable")
VARIANTS = {}  # "native@NAME" -> {VAR: VAL} (--native-variant; the runner's process only)
CONF = {"expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}


def names(prog, text, known, what):
    """A comma-separated option (--modes, --workloads) of `prog`: its names,
    each one of `known`; exits naming an empty list or an unknown name."""
    got = [x for x in (text or "").split(",") if x]
    if not got:
        sys.exit(f"{prog}: --{what} is empty (one or more of {', '.join(known)})")
    for x in got:
        if x not in known:
            sys.exit(f"{prog}: unknown {what[:-1]} {x!r} (one of {', '.join(known)})")
    return got


def base_mode(mode):
    """native@NAME runs as native (with its environment overrides)."""
    return mode.split("@", 1)[0]


def our_modes(modes):
    return [m for m in modes if base_mode(m) in OURS]


def parse_variant(text):
    """`NAME:VAR=VAL,VAR=VAL` -> ("native@NAME", {VAR: VAL}); exits naming
    what is wrong."""
    name, colon, assigns = text.partition(":")
    if not colon or not name or not all(ch.isalnum() or ch in "_-" for ch in name):
        sys.exit(f"bench_zoo: --native-variant {text!r}: not NAME:VAR=VAL[,VAR=VAL...] "
                 "(NAME of letters, digits, _ and -)")
    env = {}
    for a in filter(None, assigns.split(",")):
        k, eq, v = a.partition("=")
        if not eq or not k or not all(ch.isalnum() or ch == "_" for ch in k) or k[0].isdigit():
            sys.exit(f"bench_zoo: --native-variant {text!r}: {a!r} is not VAR=VAL")
        env[k] = v
    if not env:
        sys.exit(f"bench_zoo: --native-variant {text!r}: no VAR=VAL")
    return "native@" + name, env


def mode_env(mode, tmp, runtime):
    """The environment of a run under `mode` (PyTorch's setting, adaptalloc's
    runtime: no model, no policy file, so the default policy)."""
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    variant, mode = mode, base_mode(mode)
    if mode in CONF:
        env["PYTORCH_CUDA_ALLOC_CONF"] = CONF[mode]
    for k in ("ADAPTALLOC_MODEL", "ADAPTALLOC_POLICY", "ADAPTALLOC_POLICY_DIR"):
        env.pop(k, None)
    if mode == "native" and runtime == "full":
        # a store of its own per variant: in --lockstep they run at the same time
        env["ADAPTALLOC_DB"] = os.path.join(tmp, "zoo%s.db" % variant[len(mode):].replace("@", "-"))
        env["ADAPTALLOC_HTTP"] = "127.0.0.1:0"
    else:
        env["ADAPTALLOC_DB"] = "off"
        env["ADAPTALLOC_HTTP"] = "off"
    env["ADAPTALLOC_QUIET"] = "1"
    # torch.cuda.is_available()/device_count() through NVML, not cuInit: a
    # server that imports transformers must not initialise CUDA before forking
    env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    # the repository's torch/ folder must not shadow PyTorch
    env["PYTHONPATH"] = os.pathsep.join(p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                        if p and os.path.abspath(p) != ROOT)
    env.update(VARIANTS.get(variant, {}))
    return env
