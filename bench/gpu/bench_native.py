#!/usr/bin/env python3
"""The native PyTorch allocator against PyTorch's three settings.

    python3 bench/gpu/bench_native.py [--reps 3] [--modes native,default,expandable,async]
                                      [--out result.json]

Modes, each in a process of its own (an allocator is chosen once per
process): native (adaptalloc.torch's native allocator, ADAPTALLOC_MODEL as
given), default (PyTorch's caching allocator), expandable
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), async
(PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync). Repetitions are
interleaved: rep 1 runs every mode, then rep 2, ... Each child measures:

  loops      us per iteration from Python, 20000 iterations after a warm-up:
             torch.empty(128) (freed at once), torch.randn(128), 50 tensors
             of mixed sizes (64 B .. 4 MiB) made then freed, torch.empty of
             64 MiB. And the floor of each loop: the same Python work with
             nothing for any allocator to do (zero-byte tensors, for which
             torch makes the tensor and the allocator returns at once; for
             randn, normal_() into a tensor made beforehand, the same kernel
             without the allocation). loop - floor is what the allocator
             costs; the table shows it as "alloc/..." rows.
  bert       BERT-base fp16 inference, sequence 128, batches 1, 32, 128: ms
             per forward (CUDA events, median of 5 x 20), the running peak of
             torch.cuda.max_memory_reserved() (the allocator's own figure) and
             the device memory in use by the driver's figure (total - free
             from torch.cuda.mem_get_info, less the same figure after CUDA
             initialisation) after the batch's runs: the same measure for
             every allocator, cudaMallocAsync's pool included
  graph      BERT b1 captured in a CUDA graph: ms per replay, and the device
             memory (driver's figure) the capture added, from a state with
             the cache emptied (torch.cuda.graph empties it on entry)

Every child is pinned, before CUDA is initialised, to one CPU set, the same
for all modes (--cpus: by default the CPUs local to the GPU, all where that
cannot be read), and times a fixed CPU job (bench/gpu/benchcpu.py: a
pure-Python loop, ms, and small torch CPU ops, us per op) before and after
its measurements: the calib/* rows, so a reader sees how fast each process
ran (the machine's CPU speed can differ by up to 2x between processes).

The parent prints medians with [min, max] over repetitions and each mode's
ratio to default. The native path is found as the installed package
(adaptalloc._torch_native) or, for a development build, AA_TORCH_NATIVE_PATH.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchcpu  # noqa: E402 - bench/gpu/benchcpu.py, beside this file

MODES = {"native": None, "default": None,
         "expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}
MIXED = [64 << (i % 17) for i in range(50)]  # 64 B .. 4 MiB, deterministic


def _native():
    p = os.environ.get("AA_TORCH_NATIVE_PATH")
    if p:
        sys.path.insert(0, p)
        import _torch_native as m
        return m
    from adaptalloc import _torch_native as m
    return m


def _us(fn, n):
    import torch
    for _ in range(n // 10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e6 / n


def child(mode, parts):
    cpus = benchcpu.pin_cpus()  # before CUDA: the driver's threads inherit it
    import torch
    if mode == "native":
        _native().install(torch.cuda.device_count())
    dev = torch.device("cuda")
    torch.cuda.init()
    torch.cuda.synchronize()
    base = _used()
    torch.empty(1, device=dev)
    out = {"mode": mode, "loops": {}, "bert": {}, "graph": {},
           "cpus": benchcpu.format_cpulist(cpus), "calib": {}}
    out["calib"]["before"] = benchcpu.calibrate(torch)

    def mixed():
        xs = [torch.empty(s, dtype=torch.uint8, device=dev) for s in MIXED]
        del xs

    if "loops" in parts:
        _loops(out, dev, mixed)
    if "bert" in parts or "graph" in parts:
        _bert(out, dev, parts, base)
    out["calib"]["after"] = benchcpu.calibrate(torch)
    print(json.dumps(out))


def _used():
    """Device memory in use, the driver's figure (bytes)."""
    import torch
    free, total = torch.cuda.mem_get_info()
    return total - free


def _loops(out, dev, mixed):
    import torch
    out["loops"]["empty128"] = _us(lambda: torch.empty(128, device=dev), 20000)
    out["loops"]["randn128"] = _us(lambda: torch.randn(128, device=dev), 20000)
    out["loops"]["mixed50"] = _us(mixed, 2000)
    out["loops"]["large64m"] = _us(lambda: torch.empty(64 << 20, dtype=torch.uint8, device=dev),
                                   5000)
    # The floors: the same loops with no allocation work.
    buf = torch.empty(128, device=dev)

    def mixed0():
        xs = [torch.empty(0, dtype=torch.uint8, device=dev) for _ in MIXED]
        del xs

    out["loops"]["floor_empty128"] = _us(lambda: torch.empty(0, device=dev), 20000)
    out["loops"]["floor_randn128"] = _us(lambda: buf.normal_(), 20000)
    out["loops"]["floor_mixed50"] = _us(mixed0, 2000)
    out["loops"]["floor_large64m"] = _us(lambda: torch.empty(0, dtype=torch.uint8, device=dev),
                                         5000)


def _bert(out, dev, parts, base):
    import torch
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    model = BertModel(BertConfig()).half().cuda().eval()
    with torch.inference_mode():
        for b in ((1, 32, 128) if "bert" in parts else ()):
            ids = torch.randint(0, 30522, (b, 128), device=dev)
            for _ in range(10):
                model(input_ids=ids)
            torch.cuda.synchronize()
            reps = []
            for _ in range(5):
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(20):
                    model(input_ids=ids)
                e1.record()
                e1.synchronize()
                reps.append(e0.elapsed_time(e1) / 20)
            out["bert"][str(b)] = {"ms": statistics.median(reps),
                                   "peak_reserved": torch.cuda.max_memory_reserved(),
                                   "device_used": _used() - base}
            del ids
    if "graph" not in parts:
        return
    # BERT b1 as a CUDA graph
    ids = torch.randint(0, 30522, (1, 128), device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(input_ids=ids)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = _used()
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        model(input_ids=ids)
    torch.cuda.synchronize()
    pool = _used() - before
    # The capture's pool as the allocator reports it: its segments (size,
    # bytes allocated in it, blocks), to see where the driver's figure goes.
    segs = []
    for s in torch.cuda.memory_snapshot():
        if tuple(s.get("segment_pool_id", (0, 0))) != (0, 0):
            segs.append([s["total_size"], s["allocated_size"], len(s["blocks"])])
    segs.sort(reverse=True)
    for _ in range(10):
        g.replay()
    reps = []
    for _ in range(5):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(50):
            g.replay()
        e1.record()
        e1.synchronize()
        reps.append(e0.elapsed_time(e1) / 50)
    out["graph"] = {"ms": statistics.median(reps), "pool_bytes": pool, "segments": segs}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--modes", default="native,default,expandable,async")
    ap.add_argument("--out")
    ap.add_argument("--child")
    ap.add_argument("--parts", default="loops,bert,graph",
                    help="what to measure: loops, bert, graph (comma-separated)")
    ap.add_argument("--cpus", default="gpu",
                    help="the CPU set every child is pinned to: gpu (the CPUs local to the "
                         "GPU, else all; the default), all, none (not pinned) or a list "
                         "such as 0-7")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.parts.split(","))
        return
    modes = a.modes.split(",")
    for m in modes:
        if m not in MODES:
            sys.exit(f"bench_native: unknown mode {m!r} (one of {', '.join(MODES)})")
    try:
        cpus, why = benchcpu.choose_cpus(a.cpus)
    except ValueError as e:
        sys.exit(f"bench_native: --cpus {a.cpus}: {e}")
    if cpus:  # inherited by every child, which applies it again
        os.environ[benchcpu.ENV_CPUS] = benchcpu.format_cpulist(cpus)
        benchcpu.pin_cpus(cpus)
    else:
        os.environ.pop(benchcpu.ENV_CPUS, None)
    print(f"bench_native: CPUs {benchcpu.format_cpulist(cpus) if cpus else '-'} ({why})",
          flush=True)
    runs = {m: [] for m in modes}
    for rep in range(a.reps):
        for m in modes:
            env = dict(os.environ)
            env.setdefault("ADAPTALLOC_DB", "off")
            env.setdefault("ADAPTALLOC_HTTP", "off")
            env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
            if MODES[m]:
                env["PYTORCH_CUDA_ALLOC_CONF"] = MODES[m]
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", m,
                                "--parts", a.parts],
                               env=env, capture_output=True, text=True, timeout=600)
            lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
            if r.returncode != 0 or not lines:
                print(f"{m} rep {rep}: failed rc={r.returncode}\n{r.stderr[-2000:]}")
                continue
            runs[m].append(json.loads(lines[-1]))
            print(f"rep {rep} {m}: {lines[-1]}", flush=True)
    rows = []
    loops = ("empty128", "randn128", "mixed50", "large64m")
    # what the allocator costs per loop: the loop less its floor
    for m in modes:
        for r in runs[m]:
            for k in loops:
                if k in r["loops"] and "floor_" + k in r["loops"]:
                    r["loops"]["alloc_" + k] = r["loops"][k] - r["loops"]["floor_" + k]
    keys = ([("loops", k, None) for k in loops] +
            [("loops", "floor_" + k, None) for k in loops] +
            [("loops", "alloc_" + k, None) for k in loops] +
            [("bert", b, "ms") for b in ("1", "32", "128")] +
            [("bert", b, "peak_reserved") for b in ("1", "32", "128")] +
            [("bert", b, "device_used") for b in ("1", "32", "128")] +
            [("graph", None, "ms"), ("graph", None, "pool_bytes")] +
            [("calib", w, f) for f in ("torch_us", "py_ms") for w in ("before", "after")])
    summary = {}
    for sec, k, f in keys:
        name = "/".join(x for x in (sec, k, f) if x)
        summary[name] = {}
        for m in modes:
            vals = []
            for r in runs[m]:
                v = r.get(sec, {}).get(k) if k is not None else r.get(sec, {})
                if v is not None and v != {}:
                    vals.append(v[f] if f else v)
            if vals:
                summary[name][m] = {"median": statistics.median(vals), "min": min(vals),
                                    "max": max(vals), "all": vals}
        d = summary[name].get("default", {}).get("median")
        for m in modes:
            if m in summary[name] and d:
                summary[name][m]["ratio_to_default"] = summary[name][m]["median"] / d
        rows.append(name)
    print(f"{'measure':<26}" + "".join(f"{m:>34}" for m in modes))
    for name in rows:
        cells = []
        for m in modes:
            s = summary[name].get(m)
            if not s:
                cells.append(f"{'-':>34}")
                continue
            scale = 1 / 2**20 if ("peak" in name or "pool" in name or "used" in name) else 1
            cells.append(f"{s['median'] * scale:10.3f} [{s['min'] * scale:8.3f},"
                         f"{s['max'] * scale:8.3f}] x{s.get('ratio_to_default', 0):.2f}")
        print(f"{name:<26}" + "".join(f"{c:>34}" for c in cells))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"reps": a.reps, "modes": modes, "summary": summary, "runs": runs}, f,
                      indent=1)


if __name__ == "__main__":
    main()
