#!/usr/bin/env python3
"""Benchmark 2: the seed's allocation scenarios from Python, adaptalloc vs
PyTorch's default caching allocator.

    python3 bench/gpu/bench_scenarios.py [--reps 5] [--out result.json]

The allocator can be chosen only once per process, so each repetition runs
two child processes, ours then default (order alternating between
repetitions). Each child runs every scenario after a warm-up and prints
microseconds per iteration:
  empty128   x = torch.empty(128, device='cuda'); del x        (20000 iters)
  randn128   x = torch.randn(128, device='cuda'); del x        (20000 iters)
  mixed50    50 tensors of mixed sizes (512 B .. 8 MiB, fixed seed)
             allocated, then all freed                          (400 iters)
  large      64 MiB, 256 MiB, 1 GiB tensors allocated+freed     (200 iters)
Timing: time.perf_counter around the loop, torch.cuda.synchronize() before
and after. Ratio = ours / default per repetition; median and range.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

SCEN = ["empty128", "randn128", "mixed50", "large"]


def child(mode):
    import torch

    if mode == "ours":
        import torch_pluggable as tp

        tp.install()
    dev = torch.device("cuda")
    rnd = random.Random(42)
    mixed = [rnd.choice([512, 1024, 4096, 16384, 65536, 262144, 1 << 20, 3 << 20, 8 << 20])
             + rnd.randrange(0, 4096) for _ in range(50)]
    out = {}

    def timeit(name, fn, iters, inner):
        fn(max(1, iters // 10))  # warm-up: fills the caches
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(iters)
        torch.cuda.synchronize()
        out[name] = (time.perf_counter() - t0) / (iters * inner) * 1e6

    def empty128(n):
        for _ in range(n):
            x = torch.empty(128, device=dev)
            del x

    def randn128(n):
        for _ in range(n):
            x = torch.randn(128, device=dev)
            del x

    def mixed50(n):
        for _ in range(n):
            xs = [torch.empty(s, dtype=torch.uint8, device=dev) for s in mixed]
            del xs

    def large(n):
        for _ in range(n):
            for s in (64 << 20, 256 << 20, 1 << 30):
                x = torch.empty(s, dtype=torch.uint8, device=dev)
                del x

    timeit("empty128", empty128, 20000, 1)
    timeit("randn128", randn128, 20000, 1)
    timeit("mixed50", mixed50, 400, 1)
    timeit("large", large, 200, 1)
    if mode == "ours":
        import torch_pluggable as tp

        out["_stats"] = {k: tp.stat(k) for k in ("allocs", "backend_allocs", "reserved",
                                                "peak_reserved", "ooms")}
    else:
        out["_stats"] = {"reserved": torch.cuda.memory_reserved(),
                         "peak_reserved": torch.cuda.max_memory_reserved()}
    print(json.dumps(out))


def run_child(mode):
    env = dict(os.environ)
    env.setdefault("ADAPTALLOC_HTTP", "off")
    env.setdefault("ADAPTALLOC_DB", "off")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode],
                       capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"child {mode} failed rc={r.returncode}: {r.stderr[-3000:]}")
    return json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    runs = {"ours": [], "default": []}
    for rep in range(args.reps):
        order = ["ours", "default"] if rep % 2 == 0 else ["default", "ours"]
        for m in order:
            runs[m].append(run_child(m))
    out = {"reps": args.reps, "scenarios": {}}
    print(f"{'scenario':>10} {'ours us/it':>22} {'default us/it':>22} {'ratio ours/def':>26}")
    for s in SCEN:
        o = [r[s] for r in runs["ours"]]
        d = [r[s] for r in runs["default"]]
        ratios = [a / b for a, b in zip(o, d)]
        out["scenarios"][s] = {"ours": o, "default": d, "ratio": ratios,
                               "ratio_median": statistics.median(ratios)}
        print(f"{s:>10} {statistics.median(o):10.3f} [{min(o):.3f},{max(o):.3f}] "
              f"{statistics.median(d):10.3f} [{min(d):.3f},{max(d):.3f}] "
              f"{statistics.median(ratios):8.3f} [{min(ratios):.3f},{max(ratios):.3f}]")
    out["stats_ours_last"] = runs["ours"][-1]["_stats"]
    out["stats_default_last"] = runs["default"][-1]["_stats"]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
