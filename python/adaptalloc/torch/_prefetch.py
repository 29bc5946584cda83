"""adaptalloc.torch, one concern: Prefetcher -- a loader's batches packed
and copied to the GPU on a side stream, by its staging thread or inline.
"""
import collections
import queue
import threading

from adaptalloc import _C
from adaptalloc.torch import _need_cuda
from adaptalloc.torch._pack import _PACK_MIN_CAPACITY
from adaptalloc.torch._regions import _region_id, _set_region


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
        torch = _need_cuda("Prefetcher")
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
        torch = _need_cuda("Prefetcher")
        dev = self.device
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if self.stream is not None and self.stream.device != dev:
            # the copies run with `dev` current: another device's stream (its
            # default stream above all, 0 to CUDA) would be the wrong queue
            raise ValueError("adaptalloc.torch.Prefetcher: stream is on %s, not on the target %s"
                             % (self.stream.device, dev))
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
                    err, nxt = nxt, None
                    try:
                        raise err
                    finally:
                        err = None  # see _background
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
                    try:
                        raise val
                    finally:
                        # No cycle frame -> error -> traceback -> frame: its
                        # garbage (marks' CUDA events, staged batches) would
                        # wait for the cyclic GC, which may run first in a
                        # DataLoader worker forked later, where freeing a
                        # CUDA event aborts the worker.
                        val = None
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
