"""adaptalloc.torch, one concern: pack() -- many CPU tensors to the GPU with
one copy through a per-thread double-buffered packer.

It reads the C++ helpers (_ext, None when absent or switched off) from the
package, through _pkg.
"""
import threading

from adaptalloc import _C
from adaptalloc import torch as _pkg  # the package: the state it holds is rebound at run time
from adaptalloc.torch import _need_cuda


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
    if stream is not None and stream.device != device:
        # the copy runs on `device`'s current device: another device's
        # stream (its default stream above all, 0 to CUDA) would be the wrong queue
        raise ValueError("adaptalloc.torch.pack: stream is on %s, not on the target %s"
                         % (stream.device, device))
    if _pkg._ext is not None:
        with torch.cuda.device(device):
            current = torch.cuda.current_stream(device)
            copy_stream = current if stream is None else stream
            cs = copy_stream.cuda_stream
            ws = current.cuda_stream if wait else cs
            pk = _packer(device.index, 1)
            try:
                res = _pkg._ext.pack(pk.handle, tensors, device.index, cs, ws)
            except TypeError:
                res = None  # not all tensors: the checks below name the item
            if isinstance(res, int):
                pk = _packer(device.index, res)
                res = _pkg._ext.pack(pk.handle, tensors, device.index, cs, ws)
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
    torch = _need_cuda("pack")
    out, _base = _pack(torch, tensors, device, stream, wait=True)
    return out
