"""adaptalloc.torch, one concern: install() -- making adaptalloc PyTorch's
CUDA allocator, native or through the CUDAPluggableAllocator fallback.

The state it sets (_mode, _pluggable, _plug_lib) lives in the package
(adaptalloc.torch) and is read and written there, through _pkg.
"""
import ctypes
import importlib.util
import json
import os
import threading
import warnings

import adaptalloc
from adaptalloc import torch as _pkg  # the package: the state it holds is rebound at run time
from adaptalloc.torch import _need_torch, _oom


_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.dirname(_HERE)
_lock = threading.Lock()     # held while install() decides and sets _pkg._mode


def pluggable_library():
    """Path of libadaptalloc_torch.so in this package, or None when the
    package was built without CUDA."""
    p = os.path.join(_PKG, "libadaptalloc_torch.so")
    return p if os.path.exists(p) else None


def _build_info():
    """What the package's build found and did (setup.py's BUILD_INFO, kept
    as adaptalloc/_build_info.json), or {} for a package built before it."""
    try:
        with open(os.path.join(_PKG, "_build_info.json")) as f:
            info = json.load(f)
        return info if isinstance(info, dict) else {}
    except (OSError, ValueError):
        return {}


_REINSTALL = "pip install --force-reinstall --no-deps <adaptalloc's source folder>"


def native_available():
    """(True, None) when the native allocator imports, else (False, why):
    the real cause, from what the build recorded (adaptalloc/_build_info.json:
    torch absent at build time, a CPU-only torch, no CUDA Toolkit, a
    compiler error) and what is here now (a torch other than the one it was
    built against), with what to do."""
    info = _build_info()
    built_for = info.get("torch")
    now = getattr(_pkg._torch, "__version__", None)
    if importlib.util.find_spec("adaptalloc._torch_native") is None:
        # not built, rather than broken: say why and what to do (the bare
        # ImportError read "cannot import name '_torch_native'")
        if info.get("native_why") or info.get("torch_error"):
            why = info.get("native_why") or info.get("torch_error")
            tail = (info.get("compiler_tail") or "").strip().splitlines()[:3]
            todo = ("install torch, then reinstall adaptalloc" if built_for is None and
                    not info.get("native_why") else "fix that, then reinstall adaptalloc")
            return False, ("this adaptalloc was installed without its native allocator: %s%s; "
                           "%s (%s)"
                           % (why, " (the compiler: %s)" % " | ".join(tail)
                              if tail else "", todo, _REINSTALL))
        return False, ("this adaptalloc was installed without its native allocator, which is "
                       "built only when torch with CUDA is importable at install time: "
                       "install torch, then reinstall adaptalloc")
    try:
        from adaptalloc import _torch_native  # noqa: F401
    except ImportError as e:
        if built_for and now and built_for != now:
            return False, ("adaptalloc._torch_native was built against torch %s and this is "
                           "torch %s (%s); reinstall adaptalloc for this torch (%s)"
                           % (built_for, now, e, _REINSTALL))
        return False, ("adaptalloc._torch_native does not load (%s); reinstall adaptalloc "
                       "after installing or upgrading torch (%s)" % (e, _REINSTALL))
    return True, None


def installed():
    """"native", "pluggable", or None when install() has not run."""
    return _pkg._mode


def _check_untouched(torch):
    """Raises when PyTorch's CUDA allocator already holds memory."""
    if not torch.cuda.is_initialized():
        return
    try:
        reserved = sum(torch.cuda.memory_reserved(d) for d in range(torch.cuda.device_count()))
    except RuntimeError as e:  # another pluggable allocator is in charge
        raise RuntimeError("adaptalloc.torch.install: another CUDA allocator is already "
                           "installed (%s)" % e) from None
    if reserved > 0:
        raise RuntimeError(
            "adaptalloc.torch.install() must run before the first CUDA allocation: "
            "PyTorch's allocator already reserved %d bytes. Call it at the top of the "
            "program, or run it as: python -m adaptalloc.torch script.py ARGS" % reserved)


def _install_pluggable(torch, record_stream):
    path = pluggable_library()
    if path is None:
        raise RuntimeError("adaptalloc.torch.install(native=False): this adaptalloc was built "
                           "without CUDA (no libadaptalloc_torch.so in %s); reinstall it on a "
                           "machine with the CUDA Toolkit" % _PKG)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, "aa_torch_alloc", "aa_torch_free")
    lib = ctypes.CDLL(path)
    lib.aa_torch_set_region.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    lib.aa_torch_set_region.restype = ctypes.c_int
    lib.aa_torch_region.argtypes = []
    lib.aa_torch_region.restype = ctypes.c_int
    inner = alloc.allocator()
    hooks = [("set_init_fn", "aa_torch_init"),
             ("set_reset_fn", "aa_torch_reset"),
             ("set_memory_fraction_fn", "aa_torch_memory_fraction")]
    if record_stream:
        hooks.append(("set_record_stream_fn", "aa_torch_record_stream"))
    for setter, symbol in hooks:
        set_fn = getattr(inner, setter, None)
        if set_fn is None:
            raise RuntimeError("adaptalloc.torch.install(native=False): this torch (%s) has no "
                               "CUDAPluggableAllocator.%s; use native=True"
                               % (torch.__version__, setter))
        set_fn(ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value)
    try:
        torch.cuda.memory.change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError("adaptalloc.torch.install: PyTorch refused the allocator (%s); "
                           "install() must run before the first CUDA allocation" % e) from None
    _pkg._pluggable = alloc
    _pkg._plug_lib = lib


def install(*, model=None, policy=None, policy_dir=None, db=None, http=None, token=None,
            trace=None, native=True, record_stream=True, oom_snapshot=None):
    """Makes adaptalloc PyTorch's CUDA allocator. Call it before the first
    CUDA allocation. The keywords configure the runtime as
    adaptalloc.configure() does (over ADAPTALLOC_MODEL, _POLICY, _POLICY_DIR,
    _DB, _HTTP, _TOKEN, _TRACE; db=False / http=False mean "off"); None
    leaves a setting as it is.

    native=True (default) uses the native allocator, with every torch.cuda
    memory call, OOM as torch.OutOfMemoryError and CUDA graphs; when it is
    not built for this torch, a RuntimeWarning says so and the pluggable
    fallback is used. native=False uses the pluggable fallback with every
    hook (init, empty_cache, memory fraction, record_stream).
    oom_snapshot (default: ADAPTALLOC_OOM_SNAPSHOT, else none): a file path
    ({rank}, {pid} expanded; its folder must exist and be writable) where,
    at every CUDA out-of-memory error, PyTorch's memory snapshot of the
    native allocator is written before torch.OutOfMemoryError is raised
    (adaptalloc/torch/_oom.py); it needs the native allocator.
    Returns "native" or "pluggable". A second call with the same choice
    returns it again; a different one raises."""
    for name, value in (("native", native), ("record_stream", record_stream)):
        if not isinstance(value, bool):
            raise TypeError("adaptalloc.torch.install: %s must be True or False, not %r"
                            % (name, value))
    torch = _need_torch("install")
    with _lock:
        if _pkg._mode is not None:
            if native == (_pkg._mode == "native"):
                return _pkg._mode
            raise RuntimeError("adaptalloc.torch.install: already installed as %s; the "
                               "allocator cannot change in a running process" % _pkg._mode)
        if not torch.cuda.is_available():
            raise RuntimeError("adaptalloc.torch.install: no CUDA device is available to "
                               "PyTorch (torch.cuda.is_available() is False)")
        _check_untouched(torch)
        # a bad path is refused before anything changes
        snap, snap_from_env = _oom.prepare(oom_snapshot)
        if snap is not None and not native:
            if not snap_from_env:
                raise ValueError("adaptalloc.torch.install: oom_snapshot needs the native "
                                 "allocator (native=True); the pluggable fallback has no "
                                 "snapshots")
            warnings.warn("adaptalloc.torch: %s=%s is not used: the pluggable fallback has "
                          "no snapshots" % (_oom.ENV, snap), RuntimeWarning, stacklevel=2)
            snap = None
        if snap is not None:
            _oom.check_torch(torch)
        saved = dict(adaptalloc._configured)
        adaptalloc.configure(model=model, policy=policy, policy_dir=policy_dir, db=db,
                             http=http, token=token, trace=trace)
        try:
            mode = _install_locked(torch, native, record_stream)
            if snap is not None:
                if mode == "native":
                    _oom.attach(torch, snap)
                else:
                    warnings.warn("adaptalloc.torch: oom_snapshot %s is not written: the "
                                  "native allocator is not available" % snap,
                                  RuntimeWarning, stacklevel=2)
            return mode
        except BaseException:
            if not adaptalloc.started():  # nothing took the configuration yet: undo it
                adaptalloc._configured.clear()
                adaptalloc._configured.update(saved)
                adaptalloc._configure_c(saved)
            raise


def _install_locked(torch, native, record_stream):
    """install() past its checks, under _lock; sets _mode on success."""
    if native:
        ok, why = native_available()
        if ok:
            from adaptalloc import _torch_native
            _torch_native.install(torch.cuda.device_count())
            _pkg._mode = "native"
            # PyTorch's allocator settings: one line naming what is done
            # with each, now and at each _set_allocator_settings (_settings)
            from adaptalloc.torch import _settings
            _settings.install_hooks(torch)
            return _pkg._mode
        warnings.warn("adaptalloc.torch: the native allocator is not available (%s); "
                      "using the CUDAPluggableAllocator fallback, with which "
                      "torch.cuda.memory_stats, CUDA graphs and "
                      "torch.compile(mode='reduce-overhead') do not work" % why,
                      RuntimeWarning, stacklevel=3)
    _install_pluggable(torch, record_stream)
    _pkg._mode = "pluggable"
    return _pkg._mode
