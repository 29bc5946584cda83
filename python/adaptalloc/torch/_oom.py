"""adaptalloc.torch's out-of-memory snapshot, one concern: on the native
allocator, at every CUDA out-of-memory error, PyTorch's memory snapshot
(torch.cuda.memory._dump_snapshot: segments, blocks and, while
torch.cuda.memory._record_memory_history is on, the trace with stacks) is
written to a configured path before torch.OutOfMemoryError reaches the
program, so that the state at the failure can be opened in memory_viz
(pytorch.org/memory_viz) afterwards. The runtime's own record of the same
failure is at GET /oom, in /stats "last_oom" and in the store's ooms table.

The path is install(oom_snapshot=...) or ADAPTALLOC_OOM_SNAPSHOT, with
{rank} (LOCAL_RANK, else RANK, else 0) and {pid} expanded; its folder must
exist and be writable when install() runs. Each out-of-memory error writes
the file anew through a temporary created exclusively (a random name, O_EXCL:
a link planted in a shared run folder is never followed) in the file's
folder and renamed into place (a link at the snapshot's own name is
replaced, not followed), so a failure never leaves half a pickle
(adaptalloc._outfile, the rule every program of the project follows); a
snapshot that cannot be written is reported on stderr and never hides the
out-of-memory error itself.
"""
import os
import pickle
import sys
import threading

from .._outfile import replacing

ENV = "ADAPTALLOC_OOM_SNAPSHOT"

_lock = threading.Lock()
_state = {"path": None, "written": 0, "failed": 0}


def resolve(path):
    """The snapshot path with {rank} and {pid} expanded, made absolute.
    Raises TypeError or ValueError naming what is wrong."""
    if not isinstance(path, str):
        raise TypeError("adaptalloc.torch: oom_snapshot must be a path (str), not %r" % (path,))
    if path == "" or "\0" in path:
        raise ValueError("adaptalloc.torch: oom_snapshot must be a non-empty path without NUL "
                         "bytes, not %r" % (path,))
    rank = os.environ.get("LOCAL_RANK") or os.environ.get("RANK") or "0"
    if not rank.isdigit():
        rank = "0"
    full = os.path.abspath(path.replace("{rank}", rank).replace("{pid}", str(os.getpid())))
    folder = os.path.dirname(full)
    if os.path.isdir(full):
        raise ValueError("adaptalloc.torch: oom_snapshot %r is a folder; name a file in it, "
                         "e.g. %r" % (path, os.path.join(path, "oom-{rank}.pickle")))
    if not os.path.isdir(folder):
        raise ValueError("adaptalloc.torch: oom_snapshot %r: its folder %r does not exist"
                         % (path, folder))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError("adaptalloc.torch: oom_snapshot %r: its folder %r is not writable"
                         % (path, folder))
    return full


def _write(torch, path):
    """torch's snapshot pickled into `path` through an exclusive temporary
    (what torch.cuda.memory._dump_snapshot writes, without its plain open of
    a name)."""
    with replacing(path, binary=True, follow=False) as out:
        snapshot = getattr(torch.cuda.memory, "_snapshot", None)
        if snapshot is not None:
            pickle.dump(snapshot(), out.file)
        else:  # an older torch: it writes the temporary by its name
            out.file.close()
            torch.cuda.memory._dump_snapshot(out.name)


def _say(text):
    try:
        print(text, file=sys.stderr, flush=True)
    except BaseException:  # noqa: BLE001 - stderr closed: nothing to say it on
        pass


def _observer(torch):
    def on_oom(device, alloc, device_total, device_free):
        # called by the native allocator without its locks, before it raises
        # torch.OutOfMemoryError (alloc: the request); nothing here may raise
        # into it, or the program would see this error instead of that one
        try:
            with _lock:
                path = _state["path"]
                if path is None:
                    return
                try:
                    _write(torch, path)
                    _state["written"] += 1
                    ok, why = True, None
                except BaseException as e:  # noqa: BLE001 - reported, never raised
                    _state["failed"] += 1
                    ok, why = False, e
            if ok:
                _say("adaptalloc: out of memory on device %d (%d bytes requested, %d free): "
                     "snapshot written to %s (open it in pytorch.org/memory_viz)"
                     % (device, alloc, device_free, path))
            else:
                _say("adaptalloc: out of memory on device %d: the snapshot %s could not be "
                     "written: %s" % (device, path, why))
        except BaseException:  # noqa: BLE001 - see above
            pass
    return on_oom


def prepare(path):
    """install()'s check before the allocator changes: (the resolved path of
    oom_snapshot, or of ADAPTALLOC_OOM_SNAPSHOT when it is None; whether it
    came from the environment), or (None, False) when neither asks for one.
    Raises TypeError or ValueError naming what is wrong."""
    from_env = path is None
    if from_env:
        path = os.environ.get(ENV)
        if path is None or path == "":
            return None, False
    return resolve(path), from_env


def check_torch(torch):
    """Raises RuntimeError when this torch has no out-of-memory observer."""
    if not hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
        raise RuntimeError("adaptalloc.torch: oom_snapshot needs torch's out-of-memory "
                           "observer (torch._C._cuda_attach_out_of_memory_observer), which "
                           "this torch %s lacks" % getattr(torch, "__version__", "?"))


def attach(torch, path):
    """After the native allocator is installed: its out-of-memory observer
    writes the snapshot to `path` (from prepare). The path is set once the
    observer is attached, so stats() never names a path nothing writes."""
    torch._C._cuda_attach_out_of_memory_observer(_observer(torch))
    with _lock:
        _state["path"] = path


def stats():
    """{"path", "written", "failed"}: where snapshots go and how many were
    written or failed (path None: none configured)."""
    with _lock:
        return dict(_state)
