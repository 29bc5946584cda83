"""adaptalloc.torch, one concern: CUDA tensors in managed (unified) memory --
managed_empty, prefetch, managed_range_info.

A managed tensor is a block of a managed pool (the runtime's managed<d> pool,
or a region whose policy section says backend "managed"), seen by torch as a
CUDA tensor through __cuda_array_interface__; the block returns to its pool
when the tensor's storage dies. docs/cuda.md has the safety cap and its
limits.
"""
import math

import adaptalloc
from adaptalloc import _C
from adaptalloc.torch import _need_cuda, _need_torch
from adaptalloc.torch._pinned import _CudaView, _dtype, _itemsize, _shape, _stream_handle

_HOST = -1  # AA_MANAGED_HOST
_LOCATIONS = ("none", "device", "host")
_ADVICE = ("preferred_location", "accessed_by", "read_mostly")


def _device_index(torch, device, what, allow_cpu=False):
    """A CUDA ordinal from None (the current device), an int, 'cuda',
    'cuda:N' or a torch.device; -1 for 'cpu' when allow_cpu."""
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, bool):
        raise TypeError("adaptalloc.torch.%s: device must be an int, a str or a "
                        "torch.device, not bool" % what)
    if isinstance(device, int):
        dev = torch.device("cuda", device)
    elif isinstance(device, (str, torch.device)):
        try:
            dev = torch.device(device)
        except RuntimeError as e:
            raise ValueError("adaptalloc.torch.%s: %r is not a device (%s)"
                             % (what, device, e)) from None
    else:
        raise TypeError("adaptalloc.torch.%s: device must be an int, a str or a "
                        "torch.device, not %s" % (what, type(device).__name__))
    if dev.type == "cpu" and allow_cpu:
        return _HOST
    if dev.type != "cuda":
        raise ValueError("adaptalloc.torch.%s: %s is not a CUDA device%s"
                         % (what, dev, " or 'cpu'" if allow_cpu else ""))
    index = torch.cuda.current_device() if dev.index is None else dev.index
    n = torch.cuda.device_count()
    if not 0 <= index < n:
        raise ValueError("adaptalloc.torch.%s: cuda:%d is not there (%d CUDA device%s)"
                         % (what, index, n, "" if n == 1 else "s"))
    return index


def _advice(advise, what):
    """The advice as (preferred_location, accessed_by, read_mostly); None or
    {} is no advice. Unknown names and values are refused, naming them."""
    if advise is None:
        return None
    if not isinstance(advise, dict):
        raise TypeError("adaptalloc.torch.%s: advise must be a dict such as "
                        "{'preferred_location': 'device'}, not %s"
                        % (what, type(advise).__name__))
    for key in advise:
        if key not in _ADVICE:
            raise ValueError("adaptalloc.torch.%s: unknown advice %r (known: %s)"
                             % (what, key, ", ".join(_ADVICE)))
    out = []
    for key in ("preferred_location", "accessed_by"):
        v = advise.get(key, "none")
        if v not in _LOCATIONS:
            raise ValueError("adaptalloc.torch.%s: advise[%r] must be one of %s, not %r"
                             % (what, key, ", ".join(repr(x) for x in _LOCATIONS), v))
        out.append(v)
    rm = advise.get("read_mostly", False)
    if not isinstance(rm, bool):
        raise TypeError("adaptalloc.torch.%s: advise['read_mostly'] must be True or False, "
                        "not %r" % (what, rm))
    out.append(rm)
    if out == ["none", "none", False]:
        return None
    return tuple(out)


def managed_empty(shape, dtype=None, device=None, *, advise=None, prefetch=True,
                  region=None, stream=None):
    """An uninitialised CUDA tensor of `shape` and `dtype` (default float32)
    in managed (unified) memory on CUDA device `device` (None: the current
    one): a block of the runtime's managed pool for that device
    (managed<d>), or of region `region`'s pool when given, whose policy
    section must say backend "managed" (ValueError otherwise).

    advise: {'preferred_location': 'device'|'host'|'none', 'accessed_by':
    ..., 'read_mostly': bool} -- cudaMemAdvise for the tensor's pages, on top
    of what the pool's policy section gives every reservation (advice is per
    page: a small tensor shares pages with its neighbours in the pool).
    prefetch: move the pages to the device now, on `stream` (None: the
    current stream), so the first kernel does not fault them in.

    The pool refuses to reserve more managed memory than the device has free
    unless the policy section says allow_oversubscribe: true: a MemoryError
    whose message names the figures (requested, held, device free). The
    block returns to the pool when the tensor's storage dies, reused on
    other streams only after `stream`'s work up to then."""
    torch = _need_cuda("managed_empty")
    shape = _shape(shape, "managed_empty")
    dtype = _dtype(torch, torch.float32 if dtype is None else dtype, "managed_empty")
    dev = _device_index(torch, device, "managed_empty")
    advice = _advice(advise, "managed_empty")
    if not isinstance(prefetch, bool):
        raise TypeError("adaptalloc.torch.managed_empty: prefetch must be True or False, "
                        "not %r" % (prefetch,))
    rid = -1 if region is None else adaptalloc.region_id(region)
    numel = math.prod(shape)
    nbytes = numel * _itemsize(torch, dtype)
    if numel == 0:
        return torch.empty(shape, dtype=dtype, device=torch.device("cuda", dev))
    with torch.cuda.device(dev):
        s = _stream_handle(torch, stream)
        block = _C.Block("managed", nbytes, s, device=dev, region=rid)
        if advice is not None:
            _C.managed_advise(block.address, nbytes, dev, *advice)
        if prefetch:
            _C.managed_prefetch(block.address, nbytes, dev, s)
        t = torch.as_tensor(_CudaView(block, nbytes), device=torch.device("cuda", dev))
    return t.view(dtype).view(shape)


def _span(torch, tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("adaptalloc.torch.%s: expected a torch.Tensor, not %s"
                        % (what, type(tensor).__name__))
    st = tensor.untyped_storage()
    return st.data_ptr(), st.nbytes()


def prefetch(tensor, device, *, stream=None):
    """Moves the pages of a managed tensor's storage to CUDA `device` (an
    int, 'cuda', 'cuda:N', a torch.device) or to the host ('cpu'), in order
    on `stream` (None: the current stream of the tensor's device); returns
    at once (cudaMemPrefetchAsync). ValueError when the tensor is not in
    managed memory."""
    torch = _need_cuda("prefetch")
    addr, nbytes = _span(torch, tensor, "prefetch")
    loc = _device_index(torch, device, "prefetch", allow_cpu=True)
    if nbytes == 0:
        return
    home = tensor.device.index if tensor.device.type == "cuda" else None
    with torch.cuda.device(home if home is not None else torch.cuda.current_device()):
        _C.managed_prefetch(addr, nbytes, loc, _stream_handle(torch, stream))


def managed_range_info(tensor):
    """What the driver says of a managed tensor's storage
    (cudaMemRangeGetAttribute): {'preferred_location', 'last_prefetch_location':
    a CUDA ordinal, -1 for the host, None when unset or not the same for the
    whole storage; 'read_mostly': bool; 'accessed_by': [ordinals, -1 the host]}.
    ValueError when the tensor is not in managed memory."""
    torch = _need_torch("managed_range_info")
    addr, nbytes = _span(torch, tensor, "managed_range_info")
    if nbytes == 0:
        raise ValueError("adaptalloc.torch.managed_range_info: the tensor has no storage bytes")
    return _C.managed_range_info(addr, nbytes)
