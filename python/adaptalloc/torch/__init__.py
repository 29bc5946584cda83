"""adaptalloc for PyTorch.

One line, before the first CUDA allocation of the process:

    import adaptalloc.torch
    adaptalloc.torch.install()            # model=, policy=, db=, http= ...

or, without touching the script: ``python -m adaptalloc.torch train.py ARGS``.

install() makes adaptalloc PyTorch's CUDA allocator: the native allocator
(adaptalloc._torch_native, built against the torch present at install time)
when there is one, else the CUDAPluggableAllocator fallback
(libadaptalloc_torch.so, shipped in this package) with every hook set.

The pinned pool from Python (docs/torch.md):
    pinned_empty(shape, dtype)   CPU tensor over a pinned-pool block
    pin(tensor)                  a pinned copy of a CPU tensor
    pack(tensors, device)        many small host tensors -> one copy
    Prefetcher(loader, device)   batches packed and copied on a side stream
    mapped_empty(shape, dtype)   host and CUDA tensors over the same memory
    serve_pinned()               torch's own pinned memory from the pool

Managed (unified) memory (docs/cuda.md):
    managed_empty(shape, dtype, device, advise=, prefetch=)   CUDA tensor in
                                 managed memory, from a managed pool
    prefetch(tensor, device|'cpu')   move its pages (cudaMemPrefetchAsync)
    managed_range_info(tensor)   the driver's advice and prefetch location

Per-kind regions (native allocator): ``with region("kv_cache"):`` sends the
thread's CUDA allocations to a named pool with its own policy section.

This file, one concern: the package's face. It holds the process-wide state
the modules read through it (_mode, _pluggable, _plug_lib, _ext; tests and
benchmarks set them here) and re-exports the public names. Each concern is a
module of its own: _install (install, the pluggable fallback), _regions,
_pinned (the pinned pool's tensors), _pack, _prefetch (Prefetcher and its
staging thread), _managed (managed-memory tensors).
"""
import os

try:
    import torch as _torch
    _TORCH_ERROR = None
    if not hasattr(_torch, "__version__"):  # e.g. the repository's own torch/ folder
        raise ImportError("'torch' here is %s, not PyTorch"
                          % (list(getattr(_torch, "__path__", [])) or _torch))
except ImportError as _e:  # the package works without torch; these do not
    _torch = None
    _TORCH_ERROR = _e

__all__ = ["install", "installed", "pluggable_library", "native_available", "CUDAUnavailableError",
           "pinned_empty", "pin", "record_stream", "pack", "Prefetcher", "mapped_empty",
           "serve_pinned", "region", "current_region", "managed_empty", "prefetch",
           "managed_range_info"]

try:  # C++ helpers built against the torch present at install time
    from adaptalloc import _torch_ext as _ext
except ImportError:
    _ext = None
_ext_off = os.environ.get("ADAPTALLOC_TORCH_EXT") == "0"
if _ext_off:  # the Python paths, for comparison
    _ext = None

_mode = None            # None, "native" or "pluggable"
_pluggable = None       # the CUDAPluggableAllocator, kept alive
_plug_lib = None        # ctypes handle of its libadaptalloc_torch.so (regions)


def _need_torch(what):
    if _torch is None:
        raise ImportError("adaptalloc.torch.%s needs PyTorch (import torch failed: %s)"
                          % (what, _TORCH_ERROR))
    return _torch


class CUDAUnavailableError(RuntimeError):
    """A helper that needs CUDA (pinned_empty, pin, mapped_empty, pack,
    Prefetcher, serve_pinned, managed_empty, prefetch) was called where it
    cannot have it: torch built without CUDA, no GPU visible, or adaptalloc
    built without the CUDA Toolkit. The message says which and what to do."""


_cuda_ok = False  # once a helper found CUDA usable, later calls skip the check


def _cuda_missing(torch):
    """Why CUDA cannot serve adaptalloc.torch here, or None."""
    if getattr(getattr(torch, "version", None), "cuda", None) is None:
        return ("this torch (%s) is built without CUDA, a CPU-only build: install a CUDA "
                "build of torch" % getattr(torch, "__version__", "?"))
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as e:  # a driver that does not load
        return "torch.cuda cannot be used (%s)" % e
    if count == 0:
        vis = os.environ.get("CUDA_VISIBLE_DEVICES")
        return ("no CUDA device is visible to torch (CUDA_VISIBLE_DEVICES=%r; no GPU, or a "
                "driver that does not load: see nvidia-smi)" % vis if vis is not None else
                "no CUDA device is visible to torch (no GPU, or a driver that does not load: "
                "see nvidia-smi)")
    if not os.path.exists(os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "libadaptalloc_torch.so")):
        return ("this adaptalloc was built without CUDA (no CUDA Toolkit at install time): "
                "reinstall it where /usr/local/cuda exists")
    return None


def _need_cuda(what):
    """torch, once CUDA is known to serve; else ImportError without torch,
    CUDAUnavailableError naming why without CUDA."""
    global _cuda_ok
    torch = _need_torch(what)
    if not _cuda_ok:
        why = _cuda_missing(torch)
        if why is not None:
            raise CUDAUnavailableError("adaptalloc.torch.%s needs CUDA: %s" % (what, why))
        _cuda_ok = True
    return torch


# The modules import _need_torch and the state above from this package: they
# come after it.
from adaptalloc.torch._install import (  # noqa: E402
    install, installed, native_available, pluggable_library)
from adaptalloc.torch._regions import current_region, region  # noqa: E402
from adaptalloc.torch._pinned import (  # noqa: E402
    mapped_empty, pin, pinned_empty, record_stream, serve_pinned)
from adaptalloc.torch._pack import pack  # noqa: E402
from adaptalloc.torch._prefetch import Prefetcher  # noqa: E402
from adaptalloc.torch._managed import (  # noqa: E402
    managed_empty, managed_range_info, prefetch)
