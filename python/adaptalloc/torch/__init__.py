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

Per-kind regions (native allocator): ``with region("kv_cache"):`` sends the
thread's CUDA allocations to a named pool with its own policy section.
"""
import collections
import contextlib
import ctypes
import math
import os
import queue
import threading
import warnings

import adaptalloc
from adaptalloc import _C

try:
    import torch as _torch
    _TORCH_ERROR = None
    if not hasattr(_torch, "__version__"):  # e.g. the repository's own torch/ folder
        raise ImportError("'torch' here is %s, not PyTorch"
                          % (list(getattr(_torch, "__path__", [])) or _torch))
except ImportError as _e:  # the package works without torch; these do not
    _torch = None
    _TORCH_ERROR = _e

__all__ = ["install", "installed", "pluggable_library", "native_available",
           "pinned_empty", "pin", "record_stream", "pack", "Prefetcher", "mapped_empty",
           "region", "current_region"]

try:  # C++ helpers built against the torch present at install time
    from adaptalloc import _torch_ext as _ext
except ImportError:
    _ext = None
if os.environ.get("ADAPTALLOC_TORCH_EXT") == "0":  # the Python paths, for comparison
    _ext = None

_HERE = os.path.dirname(os.path.abspath(__file__))
_PKG = os.path.dirname(_HERE)
_lock = threading.Lock()
_mode = None            # None, "native" or "pluggable"
_pluggable = None       # the CUDAPluggableAllocator, kept alive
_plug_lib = None        # ctypes handle of its libadaptalloc_torch.so (regions)


def _need_torch(what):
    if _torch is None:
        raise ImportError("adaptalloc.torch.%s needs PyTorch (import torch failed: %s)"
                          % (what, _TORCH_ERROR))
    return _torch


def pluggable_library():
    """Path of libadaptalloc_torch.so in this package, or None when the
    package was built without CUDA."""
    p = os.path.join(_PKG, "libadaptalloc_torch.so")
    return p if os.path.exists(p) else None


def native_available():
    """(True, None) when the native allocator imports, else (False, why)."""
    try:
        from adaptalloc import _torch_native  # noqa: F401
    except ImportError as e:
        return False, str(e)
    return True, None


def installed():
    """"native", "pluggable", or None when install() has not run."""
    return _mode


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
    global _pluggable, _plug_lib
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
    _pluggable = alloc
    _plug_lib = lib


def install(*, model=None, policy=None, policy_dir=None, db=None, http=None, token=None,
            trace=None, native=True, record_stream=True):
    """Makes adaptalloc PyTorch's CUDA allocator. Call it before the first
    CUDA allocation. The keywords set the runtime's environment
    (ADAPTALLOC_MODEL, _POLICY, _POLICY_DIR, _DB, _HTTP, _TOKEN, _TRACE;
    db=False / http=False mean "off"); None leaves a variable as it is.

    native=True (default) uses the native allocator, with every torch.cuda
    memory call, OOM as torch.OutOfMemoryError and CUDA graphs; when it is
    not built for this torch, a RuntimeWarning says so and the pluggable
    fallback is used. native=False uses the pluggable fallback with every
    hook (init, empty_cache, memory fraction, record_stream).
    Returns "native" or "pluggable". A second call with the same choice
    returns it again; a different one raises."""
    global _mode
    for name, value in (("native", native), ("record_stream", record_stream)):
        if not isinstance(value, bool):
            raise TypeError("adaptalloc.torch.install: %s must be True or False, not %r"
                            % (name, value))
    torch = _need_torch("install")
    with _lock:
        if _mode is not None:
            if native == (_mode == "native"):
                return _mode
            raise RuntimeError("adaptalloc.torch.install: already installed as %s; the "
                               "allocator cannot change in a running process" % _mode)
        if not torch.cuda.is_available():
            raise RuntimeError("adaptalloc.torch.install: no CUDA device is available to "
                               "PyTorch (torch.cuda.is_available() is False)")
        _check_untouched(torch)
        saved = {k: os.environ.get(k) for k in adaptalloc.ENV.values()}
        saved["ADAPTALLOC_POLICY_DIR"] = os.environ.get("ADAPTALLOC_POLICY_DIR")
        adaptalloc.configure(model=model, policy=policy, policy_dir=policy_dir, db=db,
                             http=http, token=token, trace=trace)
        try:
            return _install_locked(torch, native, record_stream)
        except BaseException:
            if not adaptalloc.started():  # nothing read the environment yet: undo it
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            raise


def _install_locked(torch, native, record_stream):
    """install() past its checks, under _lock; sets _mode on success."""
    global _mode
    if native:
        ok, why = native_available()
        if ok:
            from adaptalloc import _torch_native
            _torch_native.install(torch.cuda.device_count())
            _mode = "native"
            return _mode
        warnings.warn("adaptalloc.torch: the native allocator is not available (%s); "
                      "using the CUDAPluggableAllocator fallback, with which "
                      "torch.cuda.memory_stats, CUDA graphs and "
                      "torch.compile(mode='reduce-overhead') do not work" % why,
                      RuntimeWarning, stacklevel=3)
    _install_pluggable(torch, record_stream)
    _mode = "pluggable"
    return _mode


# ------------------------------------------------------------- regions

_region_warned = False
_REGION_NAMES = {}      # region id -> name, of the regions made here


def _set_region(rid):
    """Sets this thread's region id in the installed allocator; returns the
    previous one, or None when no adaptalloc allocator is installed."""
    if _mode == "native":
        from adaptalloc import _torch_native
        return _torch_native.set_region(rid)
    if _mode == "pluggable":
        prev = ctypes.c_int(-1)
        if _plug_lib.aa_torch_set_region(rid, ctypes.byref(prev)) != 0:
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
    if _mode == "native":
        from adaptalloc import _torch_native
        rid = _torch_native.current_region()
    elif _mode == "pluggable":
        rid = _plug_lib.aa_torch_region()
    else:
        return None
    return None if rid < 0 else _REGION_NAMES.get(rid)


# ------------------------------------------------------------- pinned pool

def _shape(shape, what):
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError("adaptalloc.torch.%s: shape must be an int or a sequence of ints, "
                        "not %s" % (what, type(shape).__name__)) from None
    if any(d < 0 for d in shape):
        raise ValueError("adaptalloc.torch.%s: negative dimension in %s" % (what, shape))
    return shape


def _dtype(torch, dtype, what):
    if not isinstance(dtype, torch.dtype):
        raise TypeError("adaptalloc.torch.%s: dtype must be a torch.dtype, not %r"
                        % (what, dtype))
    return dtype


def _stream_handle(torch, stream):
    if stream is None:
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if raw is not None:
            return raw(torch.cuda.current_device())
        return torch.cuda.current_stream().cuda_stream
    if isinstance(stream, torch.cuda.Stream):
        return stream.cuda_stream
    raise TypeError("adaptalloc.torch: stream must be a torch.cuda.Stream or None, not %s"
                    % type(stream).__name__)


def _itemsize(torch, dtype):
    n = getattr(dtype, "itemsize", None)
    return n if n is not None else torch.empty((), dtype=dtype).element_size()


def _over_block(torch, block, numel, dtype, shape):
    """A tensor of `shape` over the first numel elements of a Block; the
    tensor's storage holds a reference to the block (torch.frombuffer)."""
    t = torch.frombuffer(block, dtype=dtype, count=numel)
    return t if len(shape) == 1 else t.view(shape)


def _pinned(torch, shape, dtype, stream, what):
    shape = _shape(shape, what)
    dtype = _dtype(torch, torch.float32 if dtype is None else dtype, what)
    numel = math.prod(shape)
    nbytes = numel * _itemsize(torch, dtype)
    block = _C.Block("pinned", max(nbytes, 1), _stream_handle(torch, stream))
    if numel == 0:
        return block, torch.empty(shape, dtype=dtype), 0
    return block, _over_block(torch, block, numel, dtype, shape), nbytes


def pinned_empty(shape, dtype=None, *, stream=None):
    """An uninitialised CPU tensor whose storage is a block of adaptalloc's
    pinned pool (is_pinned() is True). The block returns to the pool when the
    tensor's storage dies, and is handed out again only after `stream` (the
    current CUDA stream when None) has finished the work issued up to then,
    so a non_blocking copy from it on that stream is safe. Copies on other
    streams: record_stream(tensor, stream)."""
    torch = _need_torch("pinned_empty")
    if _ext is not None:
        if isinstance(shape, int):
            shape = [shape]
        elif not isinstance(shape, (list, tuple, torch.Size)):
            shape = _shape(shape, "pinned_empty")
        return _ext.pinned_empty(shape, torch.float32 if dtype is None else dtype,
                                 _stream_handle(torch, stream))
    return _pinned(torch, shape, dtype, stream, "pinned_empty")[1]


def pin(tensor, *, stream=None):
    """A copy of CPU tensor `tensor` in adaptalloc's pinned pool (like
    tensor.pin_memory(), from the pool); see pinned_empty."""
    torch = _need_torch("pin")
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("adaptalloc.torch.pin: expected a torch.Tensor, not %s"
                        % type(tensor).__name__)
    if tensor.device.type != "cpu":
        raise ValueError("adaptalloc.torch.pin: the tensor is on %s; only CPU tensors can "
                         "be pinned" % tensor.device)
    out = pinned_empty(tensor.shape, tensor.dtype, stream=stream)
    out.copy_(tensor)
    return out


def record_stream(tensor, stream):
    """A tensor from pinned_empty/pin/mapped_empty is also used by a copy on
    `stream`: its block is reused only after that stream's work up to the
    tensor's death has completed (Tensor.record_stream's meaning)."""
    torch = _need_torch("record_stream")
    _C.pinned_record_stream(tensor.untyped_storage().data_ptr(),
                            _stream_handle(torch, stream))


class _CudaView:
    """__cuda_array_interface__ over the device address of a pinned block;
    keeps the block alive as long as the CUDA tensor made from it."""

    def __init__(self, block, nbytes):
        self._block = block
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (block.device_address, False),
            "strides": None, "version": 2}


def mapped_empty(shape, dtype=None):
    """(host, device): a CPU tensor and a CUDA tensor over the same mapped
    pinned memory (zero-copy). Kernels read the host's writes directly over
    the bus; use it for small data read once. The memory returns to the pool
    when both tensors are gone."""
    torch = _need_torch("mapped_empty")
    block, host, nbytes = _pinned(torch, shape, dtype, None, "mapped_empty")
    if nbytes == 0:
        return host, torch.empty(host.shape, dtype=host.dtype, device="cuda")
    dev = torch.as_tensor(_CudaView(block, nbytes), device="cuda")
    return host, dev.view(host.dtype).view(host.shape)


# ------------------------------------------------------------------ packing

_PACK_MIN_CAPACITY = 16 << 20
_packers = threading.local()


def _packer(device_index, need):
    """This thread's packer for a device, at least `need` bytes a buffer."""
    table = getattr(_packers, "table", None)
    if table is None:
        table = _packers.table = {}
    pk = table.get(device_index)
    if pk is None or pk.capacity < need:
        if pk is not None:
            pk.close()
        cap = _PACK_MIN_CAPACITY
        while cap < need:
            cap *= 2
        pk = table[device_index] = _C.Packer(cap)
    return pk


def _pack(torch, tensors, device, stream, wait):
    if not isinstance(tensors, (list, tuple)):
        raise TypeError("adaptalloc.torch.pack: expected a list or tuple of tensors, not %s"
                        % type(tensors).__name__)
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError("adaptalloc.torch.pack: device must be a CUDA device, not %s" % device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if stream is not None and not isinstance(stream, torch.cuda.Stream):
        raise TypeError("adaptalloc.torch.pack: stream must be a torch.cuda.Stream or None")
    if _ext is not None:
        with torch.cuda.device(device):
            current = torch.cuda.current_stream(device)
            copy_stream = current if stream is None else stream
            cs = copy_stream.cuda_stream
            ws = current.cuda_stream if wait else cs
            pk = _packer(device.index, 1)
            try:
                res = _ext.pack(pk.handle, tensors, device.index, cs, ws)
            except TypeError:
                res = None  # not all tensors: the checks below name the item
            if isinstance(res, int):
                pk = _packer(device.index, res)
                res = _ext.pack(pk.handle, tensors, device.index, cs, ws)
            if res is not None:
                return res
    srcs = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError("adaptalloc.torch.pack: item %d is a %s, not a tensor"
                            % (i, type(t).__name__))
        if t.device.type != "cpu":
            raise ValueError("adaptalloc.torch.pack: item %d is on %s; pack takes CPU tensors"
                             % (i, t.device))
        srcs.append(t if t.is_contiguous() else t.contiguous())
    align = _C.PACKER_ALIGN
    need = sum((t.numel() * t.element_size() + align - 1) // align * align for t in srcs)
    with torch.cuda.device(device):
        current = torch.cuda.current_stream(device)
        copy_stream = current if stream is None else stream
        items = [(t.data_ptr(), t.numel() * t.element_size()) for t in srcs if t.numel() > 0]
        pk = _packer(device.index, max(need, 1))
        offsets = pk.add_many(items) if items else []
        if offsets is None:  # cannot happen: capacity >= need
            raise RuntimeError("adaptalloc.torch.pack: the batch did not fit the packer")
        used = pk.used()
        base = torch.empty(max(used, 1), dtype=torch.uint8, device=device)
        if used:
            pk.flush(base.data_ptr(), copy_stream.cuda_stream)
        if wait and copy_stream != current:
            pk.wait(current.cuda_stream)
    out, k = [], 0
    for t in srcs:
        n = t.numel() * t.element_size()
        if n == 0:
            out.append(torch.empty(t.shape, dtype=t.dtype, device=device))
            continue
        off = offsets[k]
        k += 1
        out.append(base[off:off + n].view(t.dtype).view(t.shape))
    return out, base


def pack(tensors, device="cuda", stream=None):
    """Copies CPU tensors to `device` with ONE copy: they are packed into a
    pinned buffer of adaptalloc's pinned pool and sent with one
    cudaMemcpyAsync on `stream` (the current stream when None); the current
    stream waits for it on the GPU, the CPU does not. Returns device tensors
    with the same shapes and dtypes: views of one device allocation (it is
    freed when all of them are). Each thread has a double-buffered packer per
    device, so the next batch packs while the last one copies."""
    torch = _need_torch("pack")
    out, _base = _pack(torch, tensors, device, stream, wait=True)
    return out


def _collect(torch, obj, found):
    if isinstance(obj, torch.Tensor):
        if obj.device.type == "cpu":
            found.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _collect(torch, v, found)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _collect(torch, v, found)


def _rebuild(torch, obj, it):
    if isinstance(obj, torch.Tensor):
        return next(it) if obj.device.type == "cpu" else obj
    if isinstance(obj, dict):
        return type(obj)((k, _rebuild(torch, v, it)) for k, v in obj.items())
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(_rebuild(torch, v, it) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_rebuild(torch, v, it) for v in obj)
    return obj


_PREFETCH_LEAD = 2      # batch j is staged once the compute of batch j-3 has finished
_PREFETCH_JOIN_S = 60.0  # how long an iteration left early waits for its thread


def _region_id():
    """The calling thread's region id in the installed allocator, or None."""
    if _mode == "native":
        from adaptalloc import _torch_native
        rid = _torch_native.current_region()
    elif _mode == "pluggable":
        rid = _plug_lib.aa_torch_region()
    else:
        return None
    return rid if rid >= 0 else None


_spare_packers = []     # a packer of an ended Prefetcher iteration, for the next one
_spare_lock = threading.Lock()


class _PackerSlot:
    """The packer of one Prefetcher iteration: the spare one when there is
    one (a new iteration per epoch is the usual loop), else made, and grown
    on demand. Used by one thread at a time; kept as the spare when the
    iteration ends with nothing half-packed in it."""

    def __init__(self):
        with _spare_lock:
            self.pk = _spare_packers.pop() if _spare_packers else None

    def packer(self, need):
        pk = self.pk
        if pk is None or pk.capacity < need:
            self.pk = None
            if pk is not None:
                pk.close()      # waits for its copies in flight
            cap = _PACK_MIN_CAPACITY
            while cap < need:
                cap *= 2
            self.pk = pk = _C.Packer(cap)
        return pk

    def release(self):
        pk, self.pk = self.pk, None
        if pk is None:
            return
        try:
            clean = pk.used() == 0
        except Exception:       # the runtime shut down: nothing to keep
            return
        if clean:
            with _spare_lock:
                if not _spare_packers:
                    _spare_packers.append(pk)
                    return
        pk.close()


def _stage(torch, batch, device, side, slot):
    """Packs the CPU tensors of `batch` into a pinned packer buffer (one CPU
    copy), copies them to `device` with one cudaMemcpyAsync on stream `side`
    into one allocation made on `side`, and records an event after the copy.
    Returns (the batch with device tensors, that allocation, the event); the
    allocation and event are None when the batch holds no CPU tensor."""
    found = []
    _collect(torch, batch, found)
    if not found:
        return batch, None, None
    srcs = [t if t.is_contiguous() else t.contiguous() for t in found]
    sizes = [t.numel() * t.element_size() for t in srcs]
    items = [(t.data_ptr(), n) for t, n in zip(srcs, sizes) if n > 0]
    align = _C.PACKER_ALIGN
    need = sum((n + align - 1) // align * align for n in sizes)
    base = ready = None
    offsets = []
    if items:
        pk = slot.packer(need)
        offsets = pk.add_many(items)    # waits only for this buffer's copy two batches ago
        if offsets is None:             # cannot happen: the slot sized it for `need`
            raise RuntimeError("adaptalloc.torch.Prefetcher: the batch (%d bytes) did not fit "
                               "the packer (%d bytes)" % (need, pk.capacity))
        with torch.cuda.stream(side):   # freed in side's order after the copy, unless used
            base = torch.empty(pk.used(), dtype=torch.uint8, device=device)
        pk.flush(base.data_ptr(), side.cuda_stream)
        ready = torch.cuda.Event()
        ready.record(side)
    moved, k = [], 0
    for t, n in zip(srcs, sizes):
        if n == 0:
            moved.append(torch.empty(t.shape, dtype=t.dtype, device=device))
            continue
        off = offsets[k]
        k += 1
        moved.append(base[off:off + n].view(t.dtype).view(t.shape))
    return _rebuild(torch, batch, iter(moved)), base, ready


def _hand_over(torch, device, staged, marks):
    """Makes the current stream wait (on the GPU) for a staged batch's copy
    and records the mark that lets batch j+LEAD be staged; returns the batch."""
    batch, base, ready = staged
    cur = torch.cuda.current_stream(device)
    mark = torch.cuda.Event(blocking=True)    # waited on by sleeping, not spinning
    mark.record(cur)            # the compute queued before this batch
    marks.append(mark)
    if ready is not None:
        cur.wait_event(ready)
        base.record_stream(cur)  # allocated on the side stream, used on this one
    return batch


def _put(q, stop, item):
    """q.put(item) unless `stop` is set first; True when put."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


class _Marks:
    """The hand-over marks, from the consuming thread to the staging thread."""

    def __init__(self):
        self.q = queue.Queue()

    def append(self, mark):
        self.q.put(mark)

    def wait_oldest(self, stop):
        """Blocks until the oldest mark's work completed; False when stopped."""
        while not stop.is_set():
            try:
                mark = self.q.get(timeout=0.1)
            except queue.Empty:
                continue
            if mark is None:
                return False
            mark.synchronize()
            return True
        return False


def _produce(torch, it, device, side, slot, out, marks, stop, region):
    """The staging thread of Prefetcher(background=True)."""
    try:
        with torch.cuda.device(device):
            if region is not None:
                _set_region(region)
            staged = 0
            while not stop.is_set():
                try:
                    batch = next(it)
                except StopIteration:
                    _put(out, stop, ("end", None))
                    return
                if staged >= _PREFETCH_LEAD and not marks.wait_oldest(stop):
                    return
                item = _stage(torch, batch, device, side, slot)
                del batch
                staged += 1
                if not _put(out, stop, ("batch", item)):
                    return
    except BaseException as e:  # noqa: B902 (handed to the consuming thread)
        _put(out, stop, ("error", e))
    finally:
        it = None
        slot.release()


class Prefetcher:
    """Wraps a loader (e.g. torch.utils.data.DataLoader, workers included):
    while the model computes on batch i, batch i+1's CPU tensors are packed
    into pinned memory and copied to `device` on a side stream; the compute
    stream waits for that copy on the GPU only. Yields the loader's batches
    (tensors, lists, tuples, dicts, namedtuples) with every CPU tensor
    replaced by a device tensor; other values pass through.

    background=True (default): a thread of the Prefetcher takes the batches
    from the loader, packs them (the one CPU copy, from the worker's shared
    memory straight into a pinned buffer) and issues their copies, so the
    training thread only hands them over. background=False does that work
    on the training thread, before it hands over the previous batch.
    Either way batch j is staged only once the GPU has finished the work the
    training thread had queued before it received batch j-2, so at most
    about four batches' device memory is held, however far the CPU runs
    ahead. The device memory comes from the region (adaptalloc.torch.region)
    in force where the iteration starts."""

    def __init__(self, loader, device="cuda", stream=None, *, background=True):
        torch = _need_torch("Prefetcher")
        self.loader = loader
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError("adaptalloc.torch.Prefetcher: device must be CUDA, not %s"
                             % self.device)
        if stream is not None and not isinstance(stream, torch.cuda.Stream):
            raise TypeError("adaptalloc.torch.Prefetcher: stream must be a torch.cuda.Stream")
        if not isinstance(background, bool):
            raise TypeError("adaptalloc.torch.Prefetcher: background must be True or False, "
                            "not %r" % (background,))
        self.stream = stream
        self.background = background

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        torch = _need_torch("Prefetcher")
        dev = self.device
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        side = self.stream or torch.cuda.Stream(dev)
        if self.background:
            yield from self._background(torch, dev, side)
        else:
            yield from self._inline(torch, dev, side)

    def _inline(self, torch, dev, side):
        slot = _PackerSlot()
        marks = collections.deque()
        it = iter(self.loader)
        staged = 0

        def advance():
            """The next staged batch, None at the end, or the loader's error
            (raised when its turn comes, as the background thread does)."""
            nonlocal staged
            try:
                batch = next(it)
                if staged >= _PREFETCH_LEAD:
                    marks.popleft().synchronize()   # leaves the last batch's work queued
                staged += 1
                return _stage(torch, batch, dev, side, slot)
            except StopIteration:
                return None
            except Exception as e:  # noqa: B902
                return e

        try:
            nxt = advance()
            while nxt is not None:
                if isinstance(nxt, Exception):
                    raise nxt
                batch = _hand_over(torch, dev, nxt, marks)
                nxt = None
                nxt = advance()
                yield batch
                batch = None
        finally:
            slot.release()

    def _background(self, torch, dev, side):
        out = queue.Queue(maxsize=1)
        marks = _Marks()
        stop = threading.Event()
        th = threading.Thread(
            target=_produce, name="adaptalloc-prefetch", daemon=True,
            args=(torch, iter(self.loader), dev, side, _PackerSlot(), out, marks, stop,
                  _region_id()))
        th.start()
        done = False
        try:
            while True:
                kind, val = out.get()
                if kind == "end":
                    done = True
                    return
                if kind == "error":
                    done = True
                    raise val
                batch = _hand_over(torch, dev, val, marks)
                val = None
                yield batch
                batch = None
        finally:
            # Staged batches nobody takes are freed in the side stream's
            # order, after their copies: dropping them is safe.
            stop.set()
            marks.append(None)
            try:
                out.get_nowait()        # a thread waiting to put sees `stop` next
            except queue.Empty:
                pass
            # Also after a break: the thread ends after the batch it is taking
            # from the loader, and drops the loader's iterator (a DataLoader
            # shuts its workers down then), before the caller goes on, e.g.
            # to start the next epoch's workers. Bounded, for a loader that
            # hangs: the thread is a daemon.
            th.join(None if done else _PREFETCH_JOIN_S)
