#!/usr/bin/env python3
"""The pinned pool from Python against what PyTorch users do today
(BENCHMARKS.md "Pinned memory from Python"). Needs a GPU, torch and the
installed adaptalloc package (pip install --no-build-isolation .).

    python3 bench/gpu/bench_py_pinned.py [--reps N] [--json FILE] [--only alloc,pack,loader]

alloc   adaptalloc.torch.pinned_empty + free (C++ helper; _python: the Python
        path)  vs  torch.empty(pin_memory=True)
        + free (PyTorch's caching host allocator)  vs  cudaHostAlloc +
        cudaFreeHost, per size; microseconds per pair.
pack    4096 CPU tensors of 4 KiB to the GPU: adaptalloc.torch.pack (one copy)
        vs a loop of .to("cuda", non_blocking=True) from pinned tensors and
        from pageable ones; milliseconds per batch, synchronized.
loader  an input-bound training loop (a small CNN on bf16 images made on
        the CPU by DataLoader workers): Prefetcher(loader) vs
        DataLoader(pin_memory=True) with .to(non_blocking=True); steps/s.

Every repetition runs every variant (order alternating); the summary gives
the median and [min, max] over repetitions and the ratios of the medians.
"""
import argparse
import ctypes
import json
import statistics
import sys
import time

import torch

import adaptalloc.torch as aat


def med(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def cudart():
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.cudaHostAlloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t,
                                      ctypes.c_uint]
        lib.cudaFreeHost.argtypes = [ctypes.c_void_p]
        return lib
    raise RuntimeError("no libcudart found")


def bench_alloc(reps, iters=2000):
    rt = cudart()
    out = {}
    for size in (4 << 10, 1 << 20, 16 << 20):
        n = size // 4
        it = iters if size <= (1 << 20) else iters // 10
        res = {"adaptalloc": [], "adaptalloc_python": [], "torch_pinned": [],
               "cudaHostAlloc": []}

        def ours():
            for _ in range(it):
                t = aat.pinned_empty((n,), torch.float32)
                del t

        def ours_py():
            saved, aat._ext = aat._ext, None
            try:
                ours()
            finally:
                aat._ext = saved

        def theirs():
            for _ in range(it):
                t = torch.empty((n,), dtype=torch.float32, pin_memory=True)
                del t

        def raw():
            p = ctypes.c_void_p()
            for _ in range(max(it // 20, 5)):
                if rt.cudaHostAlloc(ctypes.byref(p), size, 0) != 0:
                    raise RuntimeError("cudaHostAlloc failed")
                rt.cudaFreeHost(p)
            return max(it // 20, 5)

        ours(); theirs()  # warm both caches
        for r in range(reps):
            order = [("adaptalloc", ours), ("adaptalloc_python", ours_py),
                     ("torch_pinned", theirs), ("cudaHostAlloc", raw)]
            if r % 2:
                order.reverse()
            for name, fn in order:
                t0 = time.perf_counter()
                k = fn()
                dt = time.perf_counter() - t0
                res[name].append(dt / (k or it) * 1e6)
        out[str(size)] = {k: med(v) for k, v in res.items()}
        m = out[str(size)]
        m["ratio_torch_over_ours"] = m["torch_pinned"]["median"] / m["adaptalloc"]["median"]
        m["ratio_cudaHostAlloc_over_ours"] = (m["cudaHostAlloc"]["median"]
                                              / m["adaptalloc"]["median"])
    return out


def bench_pack(reps, count=4096, nbytes=4096):
    g = torch.Generator().manual_seed(0)
    pageable = [torch.randint(0, 255, (nbytes,), dtype=torch.uint8, generator=g)
                for _ in range(count)]
    pinned = [t.pin_memory() for t in pageable]
    res = {"pack": [], "pack_python": [], "loop_pinned": [], "loop_pageable": []}

    def ours():
        return aat.pack(pageable, "cuda")

    def ours_py():
        saved, aat._ext = aat._ext, None
        try:
            return aat.pack(pageable, "cuda")
        finally:
            aat._ext = saved

    def loop_pinned():
        return [t.to("cuda", non_blocking=True) for t in pinned]

    def loop_pageable():
        return [t.to("cuda", non_blocking=True) for t in pageable]

    for fn in (ours, ours_py, loop_pinned, loop_pageable):
        fn(); torch.cuda.synchronize()
    check = ours()
    torch.cuda.synchronize()
    assert all(torch.equal(a.cpu(), b) for a, b in zip(check[:64], pageable[:64]))
    for r in range(reps):
        order = [("pack", ours), ("pack_python", ours_py), ("loop_pinned", loop_pinned),
                 ("loop_pageable", loop_pageable)]
        if r % 2:
            order.reverse()
        for name, fn in order:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            outs = fn()
            torch.cuda.synchronize()
            res[name].append((time.perf_counter() - t0) * 1e3)
            del outs
    out = {k: med(v) for k, v in res.items()}
    out["ratio_loop_pinned_over_pack"] = out["loop_pinned"]["median"] / out["pack"]["median"]
    out["ratio_loop_pageable_over_pack"] = out["loop_pageable"]["median"] / out["pack"]["median"]
    return out


class Images(torch.utils.data.Dataset):
    """bf16 images made on the CPU (decode/augment stand-in)."""

    def __init__(self, n, shape):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.rand(self.shape, generator=g).to(torch.bfloat16), i % 10


def bench_loader(reps, steps=60, batch=128, shape=(3, 128, 128), workers=6):
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
    ).cuda().to(torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ds = Images(steps * batch, shape)

    def train(batches):
        n = 0
        for x, y in batches:
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            n += 1
        torch.cuda.synchronize()
        return n

    def plain():
        dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers,
                                         pin_memory=True)
        return train((x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True))
                     for x, y in dl)

    def ours():
        dl = torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers)
        return train(aat.Prefetcher(dl, "cuda"))

    plain(); ours()
    res = {"prefetcher": [], "dataloader_pin_memory": []}
    for r in range(reps):
        order = [("prefetcher", ours), ("dataloader_pin_memory", plain)]
        if r % 2:
            order.reverse()
        for name, fn in order:
            t0 = time.perf_counter()
            n = fn()
            res[name].append(n / (time.perf_counter() - t0))
    out = {k: med(v) for k, v in res.items()}
    out["ratio_steps_per_s"] = (out["prefetcher"]["median"]
                                / out["dataloader_pin_memory"]["median"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", default="alloc,pack,loader")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_py_pinned: no CUDA device", file=sys.stderr)
        return 2
    res = {"torch": torch.__version__, "reps": a.reps, "ext": aat._ext is not None}
    parts = a.only.split(",")
    if "alloc" in parts:
        res["alloc_us"] = bench_alloc(a.reps)
    if "pack" in parts:
        res["pack_ms"] = bench_pack(a.reps)
    if "loader" in parts:
        res["loader_steps_per_s"] = bench_loader(max(a.reps // 2, 2))
    text = json.dumps(res, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
