#!/usr/bin/env python3
"""Benchmark 1: alloc+free pair cost, timed in C++ (bench/gpu/pair.cpp).

    python3 bench/gpu/bench_pair.py [--reps 7] [--out result.json]

adaptalloc (aa_torch_alloc/aa_torch_free, the plugin's entry points) against
cudaMalloc/cudaFree, cudaMallocAsync/cudaFreeAsync (warm default pool,
release threshold = max) and PyTorch's caching allocator
(raw_alloc_with_stream/raw_delete). Methods are interleaved inside every
repetition; we report the median and range over repetitions of the mean
ns/pair of each repetition.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

METHODS = ["adaptalloc", "cudaMalloc", "cudaMallocAsync", "torch_caching"]
SIZES = [512, 4096, 65536, 1 << 20, 8 << 20, 64 << 20]


def build_pair(out_dir):
    """Compiles pair.cpp with g++ against torch's c10 (a few seconds)."""
    import torch
    from torch.utils import cpp_extension

    so = os.path.join(out_dir, "pair.so")
    src = os.path.join(HERE, "pair.cpp")
    if os.path.exists(so) and os.path.getmtime(so) > os.path.getmtime(src):
        return so
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    cmd = ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", src,
           "-D_GLIBCXX_USE_CXX11_ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI)]
    for inc in cpp_extension.include_paths() + [os.path.join(cuda, "include")]:
        cmd += ["-I", inc]
    for libdir in cpp_extension.library_paths() + [os.path.join(cuda, "lib64")]:
        cmd += ["-L", libdir, "-Wl,-rpath," + libdir]
    cmd += ["-lc10_cuda", "-lc10", "-lcudart", "-o", so]
    subprocess.run(cmd, check=True)
    return so


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--out", default=None)
    ap.add_argument("--build-dir", default=os.environ.get("AA_BENCH_BUILD", "/tmp/aa-bench"))
    args = ap.parse_args()
    os.makedirs(args.build_dir, exist_ok=True)

    import torch
    import torch_pluggable as tp

    torch.cuda.init()
    torch.empty(1, device="cuda")  # initialise PyTorch's caching allocator
    pair = ctypes.CDLL(build_pair(args.build_dir))
    pair.pair_run.restype = ctypes.c_double
    pair.pair_run.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int,
                              ctypes.c_void_p, ctypes.c_void_p]
    assert pair.pair_setup() == 0
    lib = tp.lib()
    a_fn = ctypes.cast(lib.aa_torch_alloc, ctypes.c_void_p).value
    f_fn = ctypes.cast(lib.aa_torch_free, ctypes.c_void_p).value

    res = {m: {s: [] for s in SIZES} for m in METHODS}
    for rep in range(args.reps):
        for s in SIZES:
            for mi, m in enumerate(METHODS):
                iters = 200 if m == "cudaMalloc" else 20000
                ns = pair.pair_run(mi, s, iters, a_fn, f_fn)
                pair.pair_sync()
                res[m][s].append(ns)
    out = {"reps": args.reps, "sizes": SIZES, "ns_per_pair": {}}
    print(f"{'size':>10} " + " ".join(f"{m:>26}" for m in METHODS) + "   async/ours")
    for s in SIZES:
        row = []
        meds = {}
        for m in METHODS:
            v = res[m][s]
            med = statistics.median(v)
            meds[m] = med
            out["ns_per_pair"].setdefault(m, {})[str(s)] = {"median": med, "min": min(v),
                                                            "max": max(v), "all": v}
            row.append(f"{med:10.1f} [{min(v):7.1f},{max(v):7.1f}]")
        ratio = meds["cudaMallocAsync"] / meds["adaptalloc"] if meds["adaptalloc"] > 0 else 0
        print(f"{s:>10} " + " ".join(f"{r:>26}" for r in row) + f"   {ratio:8.1f}x")
        out.setdefault("async_over_ours", {})[str(s)] = ratio
        out.setdefault("torch_over_ours", {})[str(s)] = meds["torch_caching"] / meds["adaptalloc"]
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
