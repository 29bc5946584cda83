"""The GPU workload zoo (bench_zoo.py), one concern: one measured run in its
process -- the allocator installed, the workload's steps timed, peaks,
device calls and adaptalloc's pool figures collected.
"""
import json
import os
import sys
import threading
import time

import benchcpu  # bench/gpu/benchcpu.py; bench_zoo.py put bench/gpu on sys.path
import lockstep  # bench/gpu/lockstep.py
from zoo_modes import ROOT, base_mode
from zoo_workloads import BUILD, MIB


CUDA_READY = "bench_zoo: CUDA is ready in this run"
# `steps` of a run that does the workload's warm-up steps alone (its first
# pass): the harness's unmeasured JIT warm-up run (bench_zoo.py)
WARM_ONLY = "warm"


def _pool_summary(doc):
    """The device pools of adaptalloc's /stats (totals, large path, class
    table) and the loop's counters and audit: where the reserved bytes are."""
    keys = ("bytes_in_use", "bytes_requested", "bytes_reserved", "peak_bytes_in_use",
            "peak_bytes_reserved", "large_bytes_in_use", "large_bytes_reserved",
            "large_segments", "large_pages_mapped", "large_pages_unmapped", "large_bytes_held",
            "large_held_reclaims", "backend_allocs", "backend_frees", "backend_ns",
            "large_page_bytes", "large_stitches", "large_stitch_hits", "large_stitch_wakes",
            "large_alias_maps", "large_alias_unmaps", "large_alias_runs", "large_stitch_new_bytes",
            "large_alias_ns", "large_stitch_deferred",
            "large_plan_state",
            "large_plan_period", "large_plan_bytes", "large_plan_hits", "large_plan_misses",
            "large_plans_adopted", "large_plans_dropped", "large_plans_refused",
            "large_plan_saved_bytes")
    ckeys = ("block_size", "prefill", "slabs", "bytes_in_use", "bytes_reserved",
             "peak_bytes_in_use", "allocs", "misses")
    pools = []
    for p in doc.get("pools", []):
        if p.get("backend") != "cuda" and not str(p.get("name", "")).startswith("device"):
            continue  # the host and pinned pools
        d = {k: p.get(k) for k in keys}
        d.update(name=p.get("name"), backend=p.get("backend"),
                 classes=[{k: c.get(k) for k in ckeys} for c in p.get("classes", [])])
        pools.append(d)
    return {"pools": pools, "policy_version": doc.get("policy_version"),
            "adapt": doc.get("adapt") or {}}


# a phased run's time series, one value per step (after it): seconds since
# the first step's start; the driver's used memory less the CUDA context and
# the allocator's reserved bytes (MiB); adaptalloc's loop trims and bytes
# trimmed so far (native; None elsewhere)
SERIES = ("t_s", "used_mib", "reserved_mib", "trims", "trimmed_mib")


def _sample(series, torch, aa, t_s, used):
    """Appends one step's figures to a phased run's series (outside the
    timed part; aa: the adaptalloc module under native, else None)."""
    try:
        reserved = torch.cuda.memory_reserved() / MIB
    except (RuntimeError, AttributeError):
        reserved = None
    trims = trimmed = None
    if aa is not None:
        ad = aa.stats().get("adapt") or {}
        trims, trimmed = ad.get("trims"), ad.get("bytes_trimmed")
        trimmed = None if trimmed is None else trimmed / MIB
    for k, v in zip(SERIES, (round(t_s, 4), round(used / MIB, 1), reserved, trims, trimmed)):
        series[k].append(v)


def device_calls(torch):
    """[device allocations, device frees] so far by the allocator's own
    counters (torch.cuda.memory_stats: cudaMalloc/cudaFree for PyTorch's,
    page maps/unmaps and segments for adaptalloc's); None where it has none."""
    try:
        st = torch.cuda.memory_stats()
        return [st["num_device_alloc"], st["num_device_free"]]
    except (RuntimeError, KeyError):
        return None


# the figures "from the fifth step on" (issue #36: zero backend calls per step
# from the fifth step in a steady workload) are taken before step index
# FROM_STEP and after the last step
FROM_STEP = 4
# torch.cuda.memory_stats keys a run keeps at its end and over the steps from
# the fifth on: PyTorch's (cudaMalloc/cudaFree, the retries after a failed
# cudaMalloc that freed the cache, segments) and what adaptalloc's native
# allocator maps to them; a key the allocator lacks is left out
TORCH_STAT_KEYS = ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
                   "num_sync_all_streams", "segment.all.current", "segment.all.peak",
                   "segment.all.allocated", "segment.all.freed")


def torch_stats(torch):
    """TORCH_STAT_KEYS from torch.cuda.memory_stats() now ({} where it has
    none)."""
    try:
        st = torch.cuda.memory_stats()
    except (RuntimeError, AttributeError):
        return {}
    return {k: st[k] for k in TORCH_STAT_KEYS if isinstance(st.get(k), (int, float))}


def from_step_figures(n, at, end):
    """The figures over the steps from the fifth on (FROM_STEP; None for a
    run of no more steps): {"step": 5, "steps": how many, "torch_stats":
    the counters' increase (TORCH_STAT_KEYS: the *.current and *.peak keys
    as they were at the end), "backend": the device pools' increase
    (_backend_counts; adaptalloc only, else None)}; `at` and `end`:
    {"torch": torch_stats(), "backend": _backend_counts() or None}."""
    if n <= FROM_STEP or at is None or end is None:
        return None
    ts = {}
    for k, v in end["torch"].items():
        if k.endswith((".current", ".peak")):
            ts[k] = v
        elif k in at["torch"]:
            ts[k] = v - at["torch"][k]
    bk = None
    if at.get("backend") is not None and end.get("backend") is not None:
        bk = {k: end["backend"][k] - at["backend"][k] for k in end["backend"]}
    return {"step": FROM_STEP + 1, "steps": n - FROM_STEP, "torch_stats": ts, "backend": bk}


def alloc_calls(torch):
    """Allocations + frees so far by the allocator's own counters
    (memory_stats' allocation.all.allocated / freed, which adaptalloc's
    native allocator maps too); None where it has none."""
    try:
        st = torch.cuda.memory_stats()
        return st["allocation.all.allocated"] + st["allocation.all.freed"]
    except (RuntimeError, KeyError):
        return None


def alloc_cost_us(torch, dev, n=20000, budget_s=0.05):
    """The allocator's own CPU cost of one allocation and its free in this
    process, us: a loop of torch.empty(4096 floats) + del, less the same loop
    of zero-element tensors (whose allocator call returns at once), best of
    three (bench_native.py's loops, in miniature; up to n iterations, fewer
    where one takes long, so each loop lasts about budget_s). Multiplied by a step's
    allocations it is what the allocator costs the step."""
    def loop(k):
        t0 = time.perf_counter()
        for _ in range(n):
            x = torch.empty(k, device=dev)
            del x
        return (time.perf_counter() - t0) / n * 1e6

    t0 = time.perf_counter()
    for _ in range(100):  # the block cached, the code warm
        x = torch.empty(4096, device=dev)
        del x
    per = (time.perf_counter() - t0) / 100
    n = max(100, min(n, int(budget_s / max(per, 1e-9))))  # each loop about budget_s at most
    best = min(loop(4096) - loop(0) for _ in range(3))
    return max(best, 0.0)


def _backend_counts(doc):
    """adaptalloc's device pools, summed: time in backend calls (ms; 0 from
    a library without the figure), page maps and unmaps, backend calls,
    stitching's alias calls, and the cross-stream waits (a free chunk still
    pending on another stream served once the request's stream was ordered
    after that work: a cudaStreamWaitEvent, no backend call)."""
    out = {"backend_ms": 0.0, "pages_mapped": 0, "pages_unmapped": 0, "backend_calls": 0,
           "alias_calls": 0, "stream_waits": 0}
    for p in doc.get("pools", []):
        if p.get("backend") != "cuda" and not str(p.get("name", "")).startswith("device"):
            continue
        out["backend_ms"] += p.get("backend_ns", 0) / 1e6
        out["pages_mapped"] += p.get("large_pages_mapped", 0)
        out["pages_unmapped"] += p.get("large_pages_unmapped", 0)
        out["backend_calls"] += p.get("backend_allocs", 0) + p.get("backend_frees", 0)
        # stitching's alias map/unmap calls (cuMemMap of an existing handle):
        # device calls too, though PyTorch's num_device_alloc does not count them
        out["alias_calls"] += p.get("large_alias_maps", 0) + p.get("large_alias_unmaps", 0)
        out["stream_waits"] += p.get("large_stream_waits", 0)
    return out


def child(workload, mode, capture, steps=None, turns=None):
    """One run in this (fresh) process; returns its figures as a dict.
    turns: a lockstep FIFO prefix (--lockstep): each step waits its turn."""
    t_start = time.perf_counter()
    cpus = benchcpu.pin_cpus()  # before CUDA: the driver's threads inherit it
    follower = lockstep.Follower(turns) if turns else None
    import torch

    mode, variant = base_mode(mode), mode
    if mode == "native":
        import adaptalloc
        import adaptalloc.torch as aat

        got = aat.install()
        if got != "native":
            raise RuntimeError(f"adaptalloc.torch.install() gave {got!r}, not the native "
                               "allocator")
    elif mode == "pluggable":
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        import torch_pluggable as tp

        tp.install()
    torch.cuda.init()
    dev = torch.device("cuda")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    base = total - free
    print(CUDA_READY, file=sys.stderr, flush=True)
    calib_before = benchcpu.calibrate(torch)
    peak = [base]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            f, t = torch.cuda.mem_get_info()
            if t - f > peak[0]:
                peak[0] = t - f
            time.sleep(0.002)

    if capture:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=1 << 24)
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    t_init = time.perf_counter()
    step, n, warm = BUILD[workload](torch, dev)
    if steps == WARM_ONLY:
        n = warm
    elif steps:
        n = steps
    warm = warm if n > warm else 0
    t_built = time.perf_counter()
    times = []
    calls = [device_calls(torch)]
    backend = {}
    # a workload with phases: a time series per step, requests paced
    # (zoo_workloads.py's docstring); not in lockstep, whose turns pace it
    phases = getattr(step, "phases", None)
    pace = 0 if follower else getattr(step, "pace_s", 0) or 0
    series = {k: [] for k in SERIES} if phases else None
    t_first = None
    cpu0 = benchcpu.thread_cpu()
    if follower:
        torch.cuda.synchronize()
        follower.ready()
    for i in range(n):
        if follower:
            follower.before_step()
        if i == warm:  # outside the timed part
            backend["calls0"] = alloc_calls(torch)
            if mode == "native":
                backend["start"] = _backend_counts(adaptalloc.stats())
        if i == FROM_STEP:  # outside the timed part too
            backend["at5"] = {"torch": torch_stats(torch),
                              "backend": (_backend_counts(adaptalloc.stats())
                                          if mode == "native" else None)}
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if t_first is None:
            t_first = t0
        step(i)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        f, t = torch.cuda.mem_get_info()
        peak[0] = max(peak[0], t - f)
        calls.append(device_calls(torch))  # outside the timed part
        if series is not None:
            _sample(series, torch, adaptalloc if mode == "native" else None,
                    time.perf_counter() - t_first, t - f - base)
        if follower:
            follower.after_step()
        if pace:  # until the next request's arrival
            wait = t_first + (i + 1) * pace - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
    if follower:
        follower.finish()
    cpu_steps = benchcpu.cpu_between(cpu0, benchcpu.thread_cpu())
    calls_end = alloc_calls(torch)
    stats_end = {"torch": torch_stats(torch),  # right after the steps, before anything else
                 "backend": _backend_counts(adaptalloc.stats()) if mode == "native" else None}
    stop.set()
    th.join()
    t_steps = time.perf_counter() - t_built
    calib_after = benchcpu.calibrate(torch)
    # after the steps and their peak: what one allocation costs this process
    cost_us = None if pace else alloc_cost_us(torch, dev)
    props = torch.cuda.get_device_properties(0)
    res = {"workload": workload, "mode": variant, "pid": os.getpid(), "steps": n, "warm": warm,
           "peak_mib": (peak[0] - base) / MIB, "context_mib": base / MIB,
           "step_ms": times[warm:], "warm_ms": times[:warm],
           "phase_s": {"init": t_init - t_start, "build": t_built - t_init,
                       "steps": t_steps},
           "cpus": benchcpu.format_cpulist(cpus),
           "gpu_pci": "%04x:%02x:%02x.0" % (getattr(props, "pci_domain_id", 0),
                                          getattr(props, "pci_bus_id", 0),
                                          getattr(props, "pci_device_id", 0)),
           "calib": {"before": calib_before, "after": calib_after},
           "cpu_steps": cpu_steps,
           "alloc_calls_measured": (None if backend.get("calls0") is None or calls_end is None
                                    else calls_end - backend["calls0"]),
           "alloc_cost_us": cost_us,
           "step_device_calls": [None if a is None or b is None else [y - x for x, y in zip(a, b)]
                                 for a, b in zip(calls, calls[1:])],
           "torch_stats": stats_end["torch"],
           "from_step": from_step_figures(n, backend.get("at5"), stats_end)}
    if series is not None:
        res["phases"] = [list(x) for x in phases]
        res["pace_s"] = pace
        res["series"] = series
    if mode == "pluggable":
        res["pool"] = {k: tp.stat(k) for k in ("peak_reserved", "reserved", "in_use")}
    else:
        try:  # the allocator's own figures, beside the driver's
            res["torch"] = {"max_reserved": torch.cuda.max_memory_reserved(),
                            "max_allocated": torch.cuda.max_memory_allocated()}
        except RuntimeError as e:
            res["torch"] = {"error": str(e)}
    if follower:  # the driver's figure counted the other runs too: the allocator's own
        res["peak_mib"] = res.get("torch", {}).get("max_reserved", 0) / MIB
        res["peak_source"] = "max_memory_reserved"
    if mode == "native":
        doc = adaptalloc.stats()
        res["pool"] = _pool_summary(doc)
        if "start" in backend:  # the device pools' backend calls over the measured steps
            end = _backend_counts(doc)
            res["backend_measured"] = {k: end[k] - backend["start"][k] for k in end}
            res["backend_measured"]["step_ms_total"] = sum(res["step_ms"])
    if capture:
        import pickle

        snap = torch.cuda.memory._snapshot()
        entries = snap["device_traces"][torch.cuda.current_device()]
        with open(os.path.join(capture, f"{workload}-{mode}.pickle"), "wb") as f:
            pickle.dump({"device_traces": [entries], "segments": []}, f, protocol=4)
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(os.path.join(capture, f"{workload}-{mode}.json"), "w") as f:
            json.dump({k: res[k] for k in ("workload", "mode", "steps", "peak_mib", "torch")}, f)
    return res
