"""adaptalloc.torch, one concern: CPU tensors over adaptalloc's pinned
pool -- pinned_empty, pin, record_stream, mapped_empty.

It reads the C++ helpers (_ext, None when absent or switched off) from the
package, through _pkg.
"""
import math
import operator

from adaptalloc import _C
from adaptalloc import torch as _pkg  # the package: the state it holds is rebound at run time
from adaptalloc.torch import _need_cuda, _need_torch


def _shape(shape, what):
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError("adaptalloc.torch.%s: shape must be an int or a sequence of ints, "
                        "not %s" % (what, type(shape).__name__)) from None
    try:  # ints, or what has __index__ (as the C++ helper takes them); not 2.5
        shape = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError("adaptalloc.torch.%s: shape must be an int or a sequence of ints, "
                        "not %r" % (what, shape)) from None
    if any(d < 0 for d in shape):
        raise ValueError("adaptalloc.torch.%s: negative dimension in %s" % (what, shape))
    return shape


def _dtype(torch, dtype, what):
    if not isinstance(dtype, torch.dtype):
        raise TypeError("adaptalloc.torch.%s: dtype must be a torch.dtype, not %r"
                        % (what, dtype))
    return dtype


def _stream_handle(torch, stream):
    """The pool's handle of `stream` (None: the current stream): its
    cudaStream_t, except for a device's default stream, whose cudaStream_t
    is 0 on every device: _C.default_stream(device) names the device too."""
    if stream is None:
        dev = torch.cuda.current_device()
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        h = raw(dev) if raw is not None else torch.cuda.current_stream().cuda_stream
        return h if h != 0 else _C.default_stream(dev)
    if isinstance(stream, torch.cuda.Stream):
        h = stream.cuda_stream
        return h if h != 0 else _C.default_stream(stream.device.index)
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
    tensor's storage dies, and is handed out again only after the
    non_blocking copies torch made with it have completed, on whatever
    stream (copy tracking: the C++ helper built with CUDA, torch >= 2.9;
    _ext.copy_tracking()), and after `stream`'s work up to then when given.
    Without copy tracking: after `stream` (the current CUDA stream when None)
    has finished the work issued up to then; copies on other streams need
    record_stream(tensor, stream). docs/torch.md has the details."""
    _need_cuda("pinned_empty")
    ext = _pkg._ext
    if ext is not None:
        # One call into C++, which checks shape and dtype and, built with
        # CUDA, reads the current stream itself (CURRENT_STREAM).
        if stream is None and ext.CURRENT_STREAM:
            return ext.pinned_empty(shape, dtype)
        return ext.pinned_empty(shape, dtype,
                                _stream_handle(_need_torch("pinned_empty"), stream))
    torch = _need_torch("pinned_empty")
    return _pinned(torch, shape, dtype, stream, "pinned_empty")[1]


def serve_pinned(enable=True):
    """PyTorch's own pinned allocations -- torch.empty(pin_memory=True),
    Tensor.pin_memory(), DataLoader(pin_memory=True) -- from adaptalloc's
    pinned pool (enable=True) or from PyTorch's caching host allocator again
    (False); tensors made meanwhile keep their memory until they die.
    Reuse follows the copies torch makes, as with pinned_empty; when the pool
    cannot serve a request (its limit), PyTorch's allocator does. Needs the
    C++ helper built with CUDA and PyTorch >= 2.9. Returns the previous
    setting."""
    if not isinstance(enable, bool):
        raise TypeError("adaptalloc.torch.serve_pinned: enable must be True or False, not %r"
                        % (enable,))
    _need_cuda("serve_pinned")
    ext = _pkg._ext
    if ext is None or not hasattr(ext, "serve_pinned"):
        if not enable:
            return False
        raise RuntimeError(
            "adaptalloc.torch.serve_pinned: needs the C++ helper adaptalloc._torch_ext (%s)"
            % ("switched off by ADAPTALLOC_TORCH_EXT=0" if _pkg._ext_off else
               "built when torch is importable at install time: reinstall adaptalloc"))
    return ext.serve_pinned(enable)


def pin(tensor, *, stream=None):
    """A copy of CPU tensor `tensor` in adaptalloc's pinned pool (like
    tensor.pin_memory(), from the pool); see pinned_empty."""
    torch = _need_cuda("pin")
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
    torch = _need_cuda("mapped_empty")
    block, host, nbytes = _pinned(torch, shape, dtype, None, "mapped_empty")
    if nbytes == 0:
        return host, torch.empty(host.shape, dtype=host.dtype, device="cuda")
    dev = torch.as_tensor(_CudaView(block, nbytes), device="cuda")
    return host, dev.view(host.dtype).view(host.shape)
