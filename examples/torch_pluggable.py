#!/usr/bin/env python3
"""adaptalloc inside PyTorch: the two ways to use libadaptalloc_torch.so.

Mode 1, the whole process (every CUDA tensor comes from adaptalloc). It must
happen before the first CUDA allocation of the process:

    import torch, torch_pluggable
    torch_pluggable.install()            # or the three lines below
    # alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "aa_torch_alloc", "aa_torch_free")
    # torch.cuda.memory.change_current_allocator(alloc)

Mode 2, a region (PyTorch's caching allocator stays in charge and asks
adaptalloc for whole segments while the region is active):

    pool = torch.cuda.MemPool(torch_pluggable.allocator().allocator())
    with torch.cuda.use_mem_pool(pool):
        x = torch.randn(1024, device="cuda")

In mode 2 adaptalloc sees PyTorch's segment requests (2 MiB for small
tensors, 20 MiB for mid-sized ones, larger ones rounded to 2 MiB), so the
size histogram in /stats shows those sizes, not tensor sizes.

With a pluggable allocator torch.cuda.memory_stats() raises; use
`curl localhost:9100/stats` (ADAPTALLOC_HTTP) or stat() below.

Run:  python3 examples/torch_pluggable.py [process|mempool]
The library is found from $AA_TORCH_LIB, else build-device/ or build/.
"""
import ctypes
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)

_alloc = None
_lib = None


def lib_path():
    """Path of libadaptalloc_torch.so."""
    env = os.environ.get("AA_TORCH_LIB")
    if env:
        return env
    for b in ("build-device", "build", "build-cuda"):
        p = os.path.join(_ROOT, b, "torch", "libadaptalloc_torch.so")
        if os.path.exists(p):
            return p
    raise FileNotFoundError("libadaptalloc_torch.so not found: set AA_TORCH_LIB")


def lib():
    """The plugin loaded with ctypes (the same handle PyTorch uses)."""
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL(lib_path())
        _lib.aa_torch_stat.restype = ctypes.c_uint64
        _lib.aa_torch_stat.argtypes = [ctypes.c_int, ctypes.c_char_p]
        _lib.aa_torch_set_limit.restype = ctypes.c_int
        _lib.aa_torch_set_limit.argtypes = [ctypes.c_int, ctypes.c_size_t]
        _lib.aa_torch_stats_json.restype = ctypes.c_size_t
        _lib.aa_torch_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    return _lib


def allocator(hooks=True, record_stream=True):
    """A CUDAPluggableAllocator over adaptalloc, with its optional hooks."""
    global _alloc
    import torch

    if _alloc is not None:
        return _alloc
    path = lib_path()
    a = torch.cuda.memory.CUDAPluggableAllocator(path, "aa_torch_alloc", "aa_torch_free")
    if hooks:
        l = lib()
        inner = a.allocator()
        setters = [("set_init_fn", "aa_torch_init"),
                   ("set_reset_fn", "aa_torch_reset"),
                   ("set_memory_fraction_fn", "aa_torch_memory_fraction")]
        if record_stream:
            setters.append(("set_record_stream_fn", "aa_torch_record_stream"))
        for setter, sym in setters:
            fn = ctypes.cast(getattr(l, sym), ctypes.c_void_p).value
            getattr(inner, setter)(fn)
    _alloc = a
    return a


def install(hooks=True, record_stream=True):
    """Makes adaptalloc the allocator of every CUDA tensor in this process."""
    import torch

    a = allocator(hooks=hooks, record_stream=record_stream)
    torch.cuda.memory.change_current_allocator(a)
    return a


def stat(name, device=0):
    """One figure of the device's pools by name: a torch.cuda.memory_stats()
    key ("allocated_bytes.all.current", ...) or a short name (in_use,
    reserved, peak_reserved, ...; adaptalloc/torch_plugin.h); 0 when unknown."""
    return int(lib().aa_torch_stat(device, name.encode()))


def stats_json(device=0):
    import json

    n = lib().aa_torch_stats_json(device, None, 0)
    if n == 0:
        return None
    buf = ctypes.create_string_buffer(n + 1)
    lib().aa_torch_stats_json(device, buf, n + 1)
    return json.loads(buf.value.decode())


def set_limit(nbytes, device=0):
    return lib().aa_torch_set_limit(device, nbytes)


def _demo_process():
    import torch

    install()
    x = torch.randn(4096, 4096, device="cuda")
    y = x @ x
    torch.cuda.synchronize()
    print("mode 1 (whole process): y.sum() =", float(y.sum()))
    print("  in_use", stat("in_use"), "reserved", stat("reserved"),
          "allocs", stat("allocs"))
    del x, y
    torch.cuda.empty_cache()  # -> aa_torch_reset -> aa_pool_release
    print("  after empty_cache: reserved", stat("reserved"))


def _demo_mempool():
    import torch

    pool = torch.cuda.MemPool(allocator().allocator())
    with torch.cuda.use_mem_pool(pool):
        x = torch.randn(4096, 4096, device="cuda")
    y = x @ x  # outside the region: PyTorch's own pool
    torch.cuda.synchronize()
    print("mode 2 (MemPool region): y.sum() =", float(y.sum()))
    print("  adaptalloc saw", stat("allocs"), "segment request(s), reserved",
          stat("reserved"))
    del x
    del pool


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "process"
    if mode == "process":
        _demo_process()
    elif mode == "mempool":
        _demo_mempool()
    else:
        sys.exit("usage: torch_pluggable.py [process|mempool]")
