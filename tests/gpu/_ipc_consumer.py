"""The consumer process of test_torch_native.py's CUDA IPC tests, started
with torch.multiprocessing's spawn context by the producer (a child of the
test): on adaptalloc (mode "adaptalloc", installed before its first CUDA
allocation) or on PyTorch's own allocator (mode "default"). Protocol over
two queues: it gets the tensor, reports its sum and writes element 0; on
"check" it reports whether the rest still holds the producer's value (the
producer has freed its tensor and allocated over its pool meanwhile); on
"release" it drops the tensor and says so."""
import os
import sys


def consume(q, r, mode, native_path):
    import torch
    if mode == "adaptalloc":
        if native_path:
            sys.path.insert(0, native_path)
            import _torch_native as m
        else:
            from adaptalloc import _torch_native as m
        m.install(torch.cuda.device_count())
    try:
        x = q.get()
        total = int(x.sum(dtype=torch.int64))
        x[0] = 42
        torch.cuda.synchronize()
        r.put(("got", total, x.numel(), torch.cuda.memory.get_allocator_backend()))
        while True:
            cmd = q.get()
            if cmd == "check":
                rest_ok = bool((x[1:] == 7).all()) and int(x[0]) == 42
                r.put(("check", rest_ok))
            elif cmd == "release":
                del x
                torch.cuda.synchronize()
                r.put(("released", os.getpid()))
                return
    except Exception as e:  # reported, not swallowed: the producer fails on it
        r.put(("error", "%s: %s" % (type(e).__name__, e)))
