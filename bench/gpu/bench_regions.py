#!/usr/bin/env python3
"""Regions on the GPU: KV-cache generation with the KV cache in a region of
its own (and with Q/K/V, scores and the cache each in one) against the same
run in one pool, and against PyTorch's allocator (default and
expandable_segments), side by side.

    python3 bench/gpu/bench_regions.py [--reps 3] [--json out.json]

The workload is examples/torch_regions.py's decoder (8 layers, d 1024, fp16)
generating 64 tokens for a cycle of (batch, prompt) pairs, its KV cache
growing one token a step through torch.cat, as Hugging Face's DynamicCache
does. Each mode and repetition is a fresh process. Figures: peak device
memory as the driver reports it (torch.cuda.mem_get_info, polled every 2 ms
and after every batch, less what the process held before the model),
tokens/s over the whole cycle (after one warm-up batch), and for
adaptalloc's modes the regions' peaks. Medians and [min, max] over the reps;
ratios against "ours" (one pool) and against PyTorch's default.

Modes: default, expandable (PyTorch), ours (adaptalloc's native allocator,
one pool), ours-kv (the KV cache in region kv_cache), ours-all (qkv, scores
and kv_cache regions), and two with a tight large-path cache (free mapped
pages above 4 MiB are unmapped at once, large.cache_bytes): ours-tight (one
pool, pools.device) and ours-kv-tight (the KV cache region's section only).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)
from zoo_report import med_range  # noqa: E402  (the zoo's "median [min, max]")

MODES = ["default", "expandable", "ours", "ours-kv", "ours-all", "ours-tight", "ours-kv-tight"]
TIGHT = {"large": {"cache_bytes": 4 << 20}}
PAIRS = [(1, 32), (8, 128), (4, 512), (16, 64), (2, 1024), (8, 256), (32, 32), (4, 768)]
NEW = 64
MIB = 1 << 20


def child(mode):
    import torch

    if mode.startswith("ours"):
        import adaptalloc
        import adaptalloc.torch as at

        at.install(db=False, http=False)
        if mode == "ours-tight":
            adaptalloc.patch_policy({"pools": {"device": TIGHT}})
        elif mode == "ours-kv-tight":
            adaptalloc.patch_policy({"pools": {"regions": {"kv_cache": TIGHT}}})
    torch.cuda.init()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    base = total - free
    peak = [base]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            f, t = torch.cuda.mem_get_info()
            peak[0] = max(peak[0], t - f)
            time.sleep(0.002)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    from torch_regions import TinyDecoder

    torch.manual_seed(0)
    model = TinyDecoder().half().cuda().eval()
    if mode in ("ours-kv", "ours-all", "ours-kv-tight"):
        names = ("qkv", "scores", "kv_cache") if mode == "ours-all" else ("kv_cache",)
        for n in names:
            model.regions[n] = at.region(n)
    gen = torch.Generator(device="cpu").manual_seed(1)

    def batch(b, n):
        ids = torch.randint(3, 32000, (b, n), generator=gen).cuda()
        model.generate(ids, NEW)
        torch.cuda.synchronize()
        f, t = torch.cuda.mem_get_info()
        peak[0] = max(peak[0], t - f)

    batch(*PAIRS[0])  # warm-up: kernels, cuBLAS workspaces
    t0 = time.perf_counter()
    tokens = 0
    for b, n in PAIRS:
        batch(b, n)
        tokens += b * NEW
    dt = time.perf_counter() - t0
    stop.set()
    th.join()
    res = {"mode": mode, "peak_mib": (peak[0] - base) / MIB, "tokens_per_s": tokens / dt,
           "max_allocated_mib": torch.cuda.max_memory_allocated() / MIB,
           "max_reserved_mib": torch.cuda.max_memory_reserved() / MIB}
    if mode.startswith("ours"):
        res["regions"] = {k: {"peak_in_use_mib": v["peak_bytes_in_use"] / MIB,
                              "reserved_mib": v["bytes_reserved"] / MIB}
                          for k, v in adaptalloc.region_stats().items()}
    print(json.dumps(res))


def run_child(mode, timeout=600):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if mode == "expandable":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    env.pop("ADAPTALLOC_POLICY", None)
    env.pop("ADAPTALLOC_MODEL", None)
    env.setdefault("ADAPTALLOC_QUIET", "1")
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode],
                       capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        print(f"  {mode}: FAILED rc={r.returncode}: {r.stderr[-2000:]}", flush=True)
        return None
    res = json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])
    print("RESULT " + json.dumps(res), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", help="write every result and the summary here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r} (one of {', '.join(MODES)})")
    runs = {m: [] for m in modes}
    for rep in range(args.reps):  # modes interleaved, so drift hits all alike
        for m in modes:
            res = run_child(m)
            if res:
                runs[m].append(res)
    peak = {m: [r["peak_mib"] for r in runs[m]] for m in modes}
    tps = {m: [r["tokens_per_s"] for r in runs[m]] for m in modes}
    print()
    print("| mode | peak device MiB (driver) | tokens/s | peak vs ours | tokens/s vs ours "
          "| peak vs PyTorch default |")
    print("|---|---:|---:|---:|---:|---:|")
    summary = {}
    for m in modes:
        if not peak[m]:
            print(f"| {m} | failed | | | | |")
            continue
        pm, tm = statistics.median(peak[m]), statistics.median(tps[m])

        def ratio(a, b):
            return f"{a / b:.3f}" if b else "-"

        ours_p = statistics.median(peak["ours"]) if peak.get("ours") else 0
        ours_t = statistics.median(tps["ours"]) if tps.get("ours") else 0
        def_p = statistics.median(peak["default"]) if peak.get("default") else 0
        print(f"| {m} | {med_range(peak[m])} | {med_range(tps[m])} | {ratio(pm, ours_p)} "
              f"| {ratio(tm, ours_t)} | {ratio(pm, def_p)} |")
        summary[m] = {"peak_mib_median": pm, "tokens_per_s_median": tm,
                      "peak_mib": peak[m], "tokens_per_s": tps[m]}
    for m in modes:
        if m.startswith("ours-") and runs[m]:
            regs = runs[m][-1].get("regions", {})
            print(f"{m} (last rep): " + ", ".join(
                f"{k} peak in use {v['peak_in_use_mib']:.0f} MiB" for k, v in sorted(regs.items())))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": summary, "reps": args.reps,
                       "pairs": PAIRS, "new_tokens": NEW}, f, indent=1)


if __name__ == "__main__":
    main()
