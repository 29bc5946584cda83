"""adaptalloc.torch, one concern: per-kind regions -- region(name), the
thread's region in the installed allocator (native or pluggable).

It reads the installed state (_mode, _plug_lib) from the package, through _pkg.
"""
import contextlib
import ctypes
import threading
import warnings

import adaptalloc
from adaptalloc import torch as _pkg  # the package: the state it holds is rebound at run time


_region_warned = False
_REGION_NAMES = {}      # region id -> name, of the regions made here


def _set_region(rid):
    """Sets this thread's region id in the installed allocator; returns the
    previous one, or None when no adaptalloc allocator is installed."""
    if _pkg._mode == "native":
        from adaptalloc import _torch_native
        return _torch_native.set_region(rid)
    if _pkg._mode == "pluggable":
        prev = ctypes.c_int(-1)
        if _pkg._plug_lib.aa_torch_set_region(rid, ctypes.byref(prev)) != 0:
            raise ValueError("adaptalloc: %d is not a region id" % rid)
        return prev.value
    return None


class region(contextlib.ContextDecorator):
    """region(name): inside ``with region("kv_cache"):`` (or a function
    decorated with ``@region("kv_cache")``) the CUDA allocations this thread
    makes come from region name's pool: its own policy section
    (pools.regions.<name>: classes, large path, limit_bytes), its own stats
    (adaptalloc.region_stats(), /stats, /metrics label region) and its own
    out-of-memory limit. Blocks go back to the region's pool whenever and on
    whatever thread their tensors die. Regions nest (the inner one wins, the
    outer one is back on exit) and are per thread: autograd's backward
    threads and DataLoader workers do not inherit them. Inside a CUDA graph
    capture (torch.cuda.graph, use_mem_pool) the graph's private pool wins.

    The name is checked now: 1 to 20 ASCII letters, digits, '_' and '-',
    starting with a letter (ValueError otherwise); at most 16 names per
    process (adaptalloc.AdaptallocError beyond). Both allocators route
    (install(), native or pluggable); before install() PyTorch's own
    allocator serves the allocations and a RuntimeWarning says so once.
    Inside a CUDA graph capture the pluggable allocator cannot work at all
    (docs/torch.md), regions or not.
    """

    def __init__(self, name):
        self.name = name
        self._id = adaptalloc.region_id(name)
        _REGION_NAMES[self._id] = name
        self._saved = threading.local()

    def __enter__(self):
        global _region_warned
        stack = getattr(self._saved, "stack", None)
        if stack is None:
            stack = self._saved.stack = []
        prev = _set_region(self._id)
        stack.append(prev)
        if prev is None and not _region_warned:
            _region_warned = True
            warnings.warn("adaptalloc.torch.region(%r): adaptalloc.torch.install() has not "
                          "run, so PyTorch's own allocator serves these allocations"
                          % (self.name,), RuntimeWarning, stacklevel=2)
        return self

    def __exit__(self, *exc):
        prev = self._saved.stack.pop()
        if prev is not None:
            _set_region(prev)
        return False

    def __repr__(self):
        return "adaptalloc.torch.region(%r)" % (self.name,)


def current_region():
    """The name of the region this thread allocates into, or None."""
    rid = _region_id()
    return None if rid is None else _REGION_NAMES.get(rid)



def _region_id():
    """The calling thread's region id in the installed allocator, or None."""
    if _pkg._mode == "native":
        from adaptalloc import _torch_native
        rid = _torch_native.current_region()
    elif _pkg._mode == "pluggable":
        rid = _pkg._plug_lib.aa_torch_region()
    else:
        return None
    return rid if rid >= 0 else None
