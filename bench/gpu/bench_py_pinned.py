#!/usr/bin/env python3
"""The pinned pool from Python against what PyTorch users do today
(BENCHMARKS.md "Pinned memory from Python"). Needs a GPU, torch and the
installed adaptalloc package (pip install --no-build-isolation .).

    python3 bench/gpu/bench_py_pinned.py [--reps N] [--json FILE] [--only alloc,pack,loader]
        [--loader-cases h2d,workers]

alloc   adaptalloc.torch.pinned_empty + free (C++ helper; _python: the Python
        path)  vs  torch.empty(pin_memory=True)
        + free (PyTorch's caching host allocator; and the same served by the
        pool, serve_pinned)  vs  cudaHostAlloc +
        cudaFreeHost, per size; microseconds per pair. Beside them a plain
        (pageable) torch.empty of the same shape + free: what any CPU tensor
        made through torch's Python binding and dispatcher costs ("over
        torch.empty": each pinned variant's pair minus it; pinned_empty's
        C++ helper skips the dispatcher, so it can be negative).
pack    4096 CPU tensors of 4 KiB to the GPU: adaptalloc.torch.pack (one copy)
        vs a loop of .to("cuda", non_blocking=True) from pinned tensors and
        from pageable ones; milliseconds per batch, synchronized.
loader  training a small CNN on bf16 images from DataLoader workers, two
        cases: "workers" (the workers making images bound the loop) and
        "h2d" (cheap crops of a pre-made pool, 77 MB batches: the host-to-
        device path bounds it). Variants: Prefetcher(loader) (background
        thread), Prefetcher(background=False), DataLoader(pin_memory=True)
        with .to(non_blocking=True), pageable .to(), and the workers alone
        (no training); steps/s. Also what bounds each case: compute alone,
        one batch's copy from pinned and from pageable memory.

Every repetition runs every variant (order alternating); the summary gives
the median and [min, max] over repetitions and the ratios of the medians:
a compact table on stdout, everything with --json FILE.
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
    # torch.empty(pin_memory=True) served by the pool (serve_pinned), when it can be
    served = aat._ext is not None and hasattr(aat._ext, "serve_pinned")
    if served:
        try:
            aat.serve_pinned(True)
            aat.serve_pinned(False)
        except RuntimeError:
            served = False
    for size in (4 << 10, 1 << 20, 16 << 20):
        n = size // 4
        it = iters if size <= (1 << 20) else iters // 10
        res = {"adaptalloc": [], "adaptalloc_python": [], "torch_pinned": [],
               "cudaHostAlloc": [], "floor_torch_empty": []}
        if served:
            res["torch_pinned_served"] = []

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

        def theirs_served():
            aat.serve_pinned(True)
            try:
                theirs()
            finally:
                aat.serve_pinned(False)

        def floor():
            for _ in range(it):
                t = torch.empty((n,), dtype=torch.float32)
                del t

        def raw():
            p = ctypes.c_void_p()
            for _ in range(max(it // 20, 5)):
                if rt.cudaHostAlloc(ctypes.byref(p), size, 0) != 0:
                    raise RuntimeError("cudaHostAlloc failed")
                rt.cudaFreeHost(p)
            return max(it // 20, 5)

        ours(); theirs(); floor()  # warm the caches
        for r in range(reps):
            order = [("adaptalloc", ours), ("adaptalloc_python", ours_py),
                     ("torch_pinned", theirs), ("cudaHostAlloc", raw),
                     ("floor_torch_empty", floor)]
            if served:
                order.append(("torch_pinned_served", theirs_served))
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
        if served:
            m["ratio_torch_over_served"] = (m["torch_pinned"]["median"]
                                            / m["torch_pinned_served"]["median"])
        m["ratio_cudaHostAlloc_over_ours"] = (m["cudaHostAlloc"]["median"]
                                              / m["adaptalloc"]["median"])
        fl = m["floor_torch_empty"]["median"]
        m["over_floor_us"] = {"adaptalloc": m["adaptalloc"]["median"] - fl,
                              "torch_pinned": m["torch_pinned"]["median"] - fl}
        # PyTorch's pair over the floor divided by ours: the gain on what a
        # pinned allocator can change
        m["ratio_torch_over_ours_above_floor"] = (
            m["over_floor_us"]["torch_pinned"] / m["over_floor_us"]["adaptalloc"]
            if m["over_floor_us"]["adaptalloc"] > 0 else None)
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
    """bf16 images made on the CPU (decode/augment stand-in): the workers'
    work bounds the loop ("workers" case)."""

    def __init__(self, n, shape):
        self.n, self.shape = n, shape

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.rand(self.shape, generator=g).to(torch.bfloat16), i % 10


class Crops(torch.utils.data.Dataset):
    """bf16 images cut from a pool made once: a size x size crop at an offset
    that depends on the index (a random-crop augmentation, as a view), so
    collate's stack into shared memory is the workers' only copy ("h2d"
    case: cheap to make, large to move)."""

    def __init__(self, n, pool, size):
        self.n, self.pool, self.size = n, pool, size
        self.dy = pool.shape[2] - size + 1
        self.dx = pool.shape[3] - size + 1

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        y, x = (i * 7) % self.dy, (i * 13) % self.dx
        img = self.pool[i % self.pool.shape[0], :, y:y + self.size, x:x + self.size]
        return img, i % 10


LOADER_CASES = {
    # name: (what it is, batch, workers, steps)
    "workers": ("worker-bound: 128 x 3x128x128 bf16 (12.6 MB) a batch, each image made by "
                "torch.rand in 6 workers", 128, 6, 60),
    "h2d": ("input-bound on the host-to-device path: 256 x 3x224x224 bf16 (77.1 MB) a batch, "
            "crops of a pre-made pool in 8 workers", 256, 8, 100),
}
SKIP = 5  # steps before the clock starts (workers starting, first batches)


def small_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10),
    ).cuda().to(torch.bfloat16)


def bench_loader_case(name, reps):
    what, batch, workers, steps = LOADER_CASES[name]
    if name == "workers":
        ds = Images(steps * batch, (3, 128, 128))
    else:
        g = torch.Generator().manual_seed(0)
        ds = Crops(steps * batch, torch.rand(64, 3, 240, 240, generator=g).to(torch.bfloat16),
                   224)
    model = small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x, y):
        loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def timed(batches, train=True):
        n, t0 = 0, None
        for x, y in batches:
            if train:
                step(x, y)
            n += 1
            if n == SKIP:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
        torch.cuda.synchronize()
        return (n - SKIP) / (time.perf_counter() - t0)

    def loader(pin):
        return torch.utils.data.DataLoader(ds, batch_size=batch, num_workers=workers,
                                           pin_memory=pin)

    variants = {
        "prefetcher": lambda: timed(aat.Prefetcher(loader(False), "cuda")),
        "prefetcher_inline": lambda: timed(aat.Prefetcher(loader(False), "cuda",
                                                          background=False)),
        "dataloader_pin_memory": lambda: timed(
            (x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True))
            for x, y in loader(True)),
        "pageable_to": lambda: timed((x.to("cuda"), y.to("cuda")) for x, y in loader(False)),
        "workers_alone": lambda: timed(loader(False), train=False),
    }
    for fn in variants.values():  # warm-up: cuDNN, allocators, pinned caches
        fn()
    res = {k: [] for k in variants}
    for r in range(reps):
        order = list(variants.items())
        if r % 2:
            order.reverse()
        for k, fn in order:
            res[k].append(fn())
    x0 = ds[0][0]
    out = {"what": what, "batch_bytes": batch * x0.numel() * x0.element_size(),
           "steps_per_s": {k: med(v) for k, v in res.items()}}
    # What bounds the loop: compute alone on a batch already on the GPU, and
    # one batch's host-to-device copy from pinned and from pageable memory.
    xs = torch.stack([ds[i][0] for i in range(batch)])
    ys = torch.tensor([ds[i][1] for i in range(batch)])
    xd, yd = xs.cuda(), ys.cuda()
    out["compute_alone_steps_per_s"] = timed(((xd, yd) for _ in range(SKIP + 40)))
    pinned = xs.pin_memory()
    for src, key in ((pinned, "copy_pinned_ms"), (xs, "copy_pageable_ms")):
        ts = []
        for _ in range(7):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            xd.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
        out[key] = med(ts)
    ref = out["steps_per_s"]["dataloader_pin_memory"]["median"]
    out["ratio_over_dataloader_pin_memory"] = {
        k: v["median"] / ref for k, v in out["steps_per_s"].items() if k != "workers_alone"}
    return out


def rng(m, fmt="%.1f"):
    return (fmt + " [" + fmt + ", " + fmt + "]") % (m["median"], m["min"], m["max"])


def table(res, header=True):
    """The compact summary of the parts in `res`, for stdout."""
    lines = []
    if header:
        lines.append("bench_py_pinned: torch %s, %d repetitions, C++ helper %s, copy tracking %s; "
                     "median [min, max]"
                     % (res["torch"], res["reps"], "on" if res["ext"] else "off",
                        res.get("copy_tracking")))
    if "alloc_us" in res:
        lines.append("alloc+free (us per pair)      adaptalloc           python path          "
                     "torch pin_memory     cudaHostAlloc        pageable torch.empty "
                     "torch/ours  over torch.empty: ours, torch")
        for size, m in res["alloc_us"].items():
            fl = m.get("floor_torch_empty")
            over = m.get("over_floor_us")
            lines.append("  %-27s %-20s %-20s %-20s %-20s %-20s %.2fx       %s" % (
                "%d KiB" % (int(size) >> 10), rng(m["adaptalloc"], "%.2f"),
                rng(m["adaptalloc_python"], "%.2f"), rng(m["torch_pinned"], "%.2f"),
                rng(m["cudaHostAlloc"], "%.1f"), rng(fl, "%.2f") if fl else "-",
                m["ratio_torch_over_ours"],
                "%.2f, %.2f" % (over["adaptalloc"], over["torch_pinned"]) if over else "-"))
            if "torch_pinned_served" in m:
                lines.append("    torch.empty(pin_memory=True) served by the pool (serve_pinned): "
                             "%s us, %.2fx PyTorch's" % (rng(m["torch_pinned_served"], "%.2f"),
                                                         m["ratio_torch_over_served"]))
    if "pack_ms" in res:
        m = res["pack_ms"]
        lines.append("4096 x 4 KiB to the GPU (ms): pack %s, pack_python %s, loop pinned %s, "
                     "loop pageable %s; loop/pack %.1fx, %.1fx" % (
                         rng(m["pack"], "%.2f"), rng(m["pack_python"], "%.2f"),
                         rng(m["loop_pinned"], "%.2f"), rng(m["loop_pageable"], "%.2f"),
                         m["ratio_loop_pinned_over_pack"], m["ratio_loop_pageable_over_pack"]))
    for name, c in res.get("loader", {}).items():
        lines.append("loader %s: %s" % (name, c["what"]))
        lines.append("  %-24s %-26s %s" % ("variant", "steps/s", "x dataloader_pin_memory"))
        for k, m in c["steps_per_s"].items():
            ratio = c["ratio_over_dataloader_pin_memory"].get(k)
            lines.append("  %-24s %-26s %s" % (k, rng(m), "%.2fx" % ratio if ratio else
                                                "(batches/s, no training)"))
        lines.append("  bounds: compute alone %.0f steps/s; one batch's copy %s ms pinned, "
                     "%s ms pageable" % (c["compute_alone_steps_per_s"],
                                         rng(c["copy_pinned_ms"], "%.2f"),
                                         rng(c["copy_pageable_ms"], "%.2f")))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", default=None)
    ap.add_argument("--only", "--parts", dest="only", default="alloc,pack,loader",
                    help="comma-separated parts: alloc, pack, loader")
    ap.add_argument("--loader-cases", default="h2d,workers",
                    help="comma-separated loader cases: " + ", ".join(LOADER_CASES))
    a = ap.parse_args()
    parts = a.only.split(",")
    cases = a.loader_cases.split(",")
    for p in parts:
        if p not in ("alloc", "pack", "loader"):
            ap.error("unknown part %r (alloc, pack, loader)" % p)
    for c in cases:
        if c not in LOADER_CASES:
            ap.error("unknown loader case %r (%s)" % (c, ", ".join(LOADER_CASES)))
    if a.reps < 1:
        ap.error("--reps must be >= 1")
    if not torch.cuda.is_available():
        print("bench_py_pinned: no CUDA device", file=sys.stderr)
        return 2
    meta = {"torch": torch.__version__, "reps": a.reps, "ext": aat._ext is not None}
    if aat._ext is not None and hasattr(aat._ext, "copy_tracking"):
        aat.pinned_empty(1)  # the first one installs the tracker (the tensor dies at once)
        meta["copy_tracking"] = aat._ext.copy_tracking()
    res = dict(meta)
    t0 = time.perf_counter()
    header = [True]

    def emit(part):
        """Prints a finished part's table and rewrites the JSON, so what
        finished is kept if a later part is cut short."""
        print(table(dict(meta, **part), header=header[0]), flush=True)
        header[0] = False
        res["seconds"] = time.perf_counter() - t0
        if a.json:
            with open(a.json, "w") as f:
                f.write(json.dumps(res, indent=1))

    if "alloc" in parts:
        res["alloc_us"] = bench_alloc(a.reps)
        emit({"alloc_us": res["alloc_us"]})
    if "pack" in parts:
        res["pack_ms"] = bench_pack(a.reps)
        emit({"pack_ms": res["pack_ms"]})
    if "loader" in parts:
        res["loader"] = {}
        for name in cases:
            res["loader"][name] = bench_loader_case(name, a.reps)
            emit({"loader": {name: res["loader"][name]}})
    print("bench_py_pinned: %.0f s" % (time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
