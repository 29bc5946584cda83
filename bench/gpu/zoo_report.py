"""The GPU workload zoo (bench_zoo.py), one concern: the report -- the runs
summarised per workload (peaks, step times, paired speed, CPU, device
calls) and printed as tables.
"""
import statistics

import benchcpu  # bench/gpu/benchcpu.py; bench_zoo.py put bench/gpu on sys.path
from zoo_modes import TORCH_MODES, our_modes
from zoo_workloads import MIB


def med_range(v, nd=0):
    if not v:
        return "-"
    m = statistics.median(v)
    if len(v) == 1:
        return f"{m:.{nd}f}"
    return f"{m:.{nd}f} [{min(v):.{nd}f}, {max(v):.{nd}f}]"


def run_cpu_us(r):
    """A run's process speed: us per small torch CPU op, the mean of its
    calibrations before and after the steps (None for a run without)."""
    v = [c["torch_us"] for c in (r.get("calib") or {}).values() if "torch_us" in c]
    return sum(v) / len(v) if v else None


def run_device_calls(r):
    """A run's device allocations + frees over its measured steps (None for
    a run without the counts)."""
    v = r.get("step_device_calls")
    if not v:
        return None
    v = v[r.get("warm", 0):]
    return None if not v or any(x is None for x in v) else sum(a + b for a, b in v)


def quiet_steps(r):
    """Per measured step: True where the run made no device call (no page
    map, no cudaMalloc) in it; [] without the counts."""
    v = (r.get("step_device_calls") or [])[r.get("warm", 0):]
    return [c is not None and c[0] + c[1] == 0 for c in v]


def by_rep(rs):
    """{repetition: run} (runs of an older JSON without "rep": in order)."""
    return {r.get("rep", i): r for i, r in enumerate(rs)}


def summarise(runs, modes, wls):
    """Per workload: each mode's peaks, median step times and CPU
    calibration over the reps, and adaptalloc's ratios to PyTorch's: of the
    medians, and paired (step k against the default's step k of the same
    repetition)."""
    out = {}
    for w in wls:
        peaks = {m: [r["peak_mib"] for r in runs[w][m]] for m in modes}
        steps = {m: [statistics.median(r["step_ms"] or r["warm_ms"]) for r in runs[w][m]]
                 for m in modes}
        cpu = {m: [c for c in map(run_cpu_us, runs[w][m]) if c is not None] for m in modes}
        calls = {m: [c for c in map(run_device_calls, runs[w][m]) if c is not None]
                 for m in modes}
        med_peak = {m: statistics.median(v) for m, v in peaks.items() if v}
        med_step = {m: statistics.median(v) for m, v in steps.items() if v}
        torch_peaks = {m: v for m, v in med_peak.items() if m in TORCH_MODES}
        best = min(torch_peaks, key=torch_peaks.get) if torch_peaks else None
        ratios = {}
        for m in our_modes(modes):
            if m not in med_peak:
                continue
            ratios[m] = {
                "peak_vs_default": (med_peak[m] / med_peak["default"]
                                    if "default" in med_peak else None),
                "peak_vs_best": med_peak[m] / torch_peaks[best] if best else None,
                "best": best,
                "speed_vs_default": (med_step["default"] / med_step[m]
                                     if "default" in med_step and med_step[m] else None),
                "paired_speed": [], "paired_all": None, "cpu_vs_default": [],
                "paired_quiet": []}
            if "default" not in modes:
                continue
            ours, dflt = by_rep(runs[w][m]), by_rep(runs[w]["default"])
            pooled = []
            for rep in sorted(set(ours) & set(dflt)):
                pr = benchcpu.paired(dflt[rep]["step_ms"], ours[rep]["step_ms"])
                if pr:
                    ratios[m]["paired_speed"].append(statistics.median(pr))
                    pooled += pr
                    quiet = [x for x, c in zip(pr, quiet_steps(ours[rep])) if c]
                    if quiet:
                        ratios[m]["paired_quiet"].append(statistics.median(quiet))
                a, b = run_cpu_us(ours[rep]), run_cpu_us(dflt[rep])
                if a and b:
                    ratios[m]["cpu_vs_default"].append(a / b)
            ratios[m]["paired_all"] = statistics.median(pooled) if pooled else None
        bk = {m: [r["backend_measured"] for r in runs[w][m] if r.get("backend_measured")]
              for m in our_modes(modes)}
        threads = {m: [[r["cpu_steps"]["main"], r["cpu_steps"]["others"]] for r in runs[w][m]
                       if r.get("cpu_steps")] for m in modes}
        out[w] = {"peak_mib": peaks, "step_ms": steps, "cpu_us": cpu, "device_calls": calls,
                  "backend_measured": bk, "thread_cpu_s": threads, "ratios": ratios,
                  "extra": {m: [{k: r.get(k) for k in ("pool", "torch", "phase_s",
                                                       "process_s", "calib", "cpus", "rep",
                                                       "backend_measured", "peak_source")}
                                for r in runs[w][m]] for m in modes}}
    return out


def limit_figures(summary, w, m):
    """(peak reserved MiB, peak allocated MiB, reserved / allocated) of each
    of mode m's runs of workload w: the allocator's own max_memory_reserved
    and max_memory_allocated (the floor no allocator can go under)."""
    out = []
    for r in summary[w]["extra"].get(m, []):
        t = r.get("torch") or {}
        if t.get("max_reserved") and t.get("max_allocated"):
            out.append((t["max_reserved"] / MIB, t["max_allocated"] / MIB,
                        t["max_reserved"] / t["max_allocated"]))
    return out


def print_limit(summary, modes):
    """The distance to the limit: per workload and allocator, peak reserved,
    peak allocated and their ratio; and whether adaptalloc's driver peak is
    3% under the best PyTorch setting where that setting's reserved is more
    than 3% over its allocated (issue #24's targets)."""
    print()
    print("distance to the limit: peak reserved / peak allocated (MiB, the allocator's own "
          "max_memory_reserved and max_memory_allocated), ratio reserved / allocated; "
          "median over the reps. target: adaptalloc's ratio <= 1.03; where the best PyTorch "
          "setting's ratio is > 1.03, adaptalloc's driver peak <= 0.97x that setting's")
    cols = [f"{m} reserved / allocated (ratio)" for m in modes] + ["targets"]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells, notes = [], []
        ratio = {}
        for m in modes:
            v = limit_figures(summary, w, m)
            if not v:
                cells.append("-")
                continue
            res, alloc, rr = (statistics.median(x[i] for x in v) for i in range(3))
            ratio[m] = rr
            cells.append(f"{res:.0f} / {alloc:.0f} ({rr:.3f})")
        for m in our_modes(modes):
            r = s["ratios"].get(m, {})
            best = r.get("best")
            ok = [f"{m}: ratio {'met' if ratio.get(m, 9) <= 1.03 else 'missed'}"]
            if best and ratio.get(best, 0) > 1.03 and r.get("peak_vs_best") is not None:
                ok.append("peak vs %s %.3f (%s)" % (best, r["peak_vs_best"],
                                                    "met" if r["peak_vs_best"] <= 0.97
                                                    else "missed"))
            notes.append(", ".join(ok))
        cells.append("; ".join(notes) or "-")
        print(f"| {w} | " + " | ".join(cells) + " |")


def print_tables(summary, modes):
    def fmt(x, nd=3, suffix=""):
        return f"{x:.{nd}f}{suffix}" if x is not None else "-"

    ours = our_modes(modes)
    print()
    if any(r.get("peak_source") for s in summary.values() for v in s.get("extra", {}).values()
           for r in v):
        print("peak reserved, MiB: the allocators' own max_memory_reserved (lockstep runs "
              "share the device, so the driver's figure would count both); median [min, max] "
              "over the reps")
    else:
        print("peak device memory, MiB (driver: total - free, less the CUDA context); "
              "median [min, max] over the reps")
    cols = list(modes) + [f"{m} / {x}" for m in ours for x in ("default", "best of PyTorch")]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells = [med_range(s["peak_mib"][m]) for m in modes]
        for m in ours:
            r = s["ratios"].get(m, {})
            best = f" ({r['best']})" if r.get("best") else ""
            cells += [fmt(r.get("peak_vs_default")), fmt(r.get("peak_vs_best")) + best]
        print(f"| {w} | " + " | ".join(cells) + " |")
    print_limit(summary, modes)
    print()
    print("step time, ms (median of each run's steps); median [min, max] over the reps; "
          "speed = default / ours: of the medians, and paired (median of step k's ratios "
          "in each rep; median [min, max] over the reps)")
    cols = list(modes) + [f"{m} speed vs default" for m in ours] + \
        [f"{m} paired speed vs default" for m in ours]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells = [med_range(s["step_ms"][m], 2) for m in modes]
        cells += [fmt(s["ratios"].get(m, {}).get("speed_vs_default"), 3, "x") for m in ours]
        for m in ours:
            v = s["ratios"].get(m, {}).get("paired_speed") or []
            cells.append(med_range(v, 3) + "x" if v else "-")
        print(f"| {w} | " + " | ".join(cells) + " |")
    print()
    print("process speed: us per small torch CPU op (each run's mean of its calibrations "
          "before and after the steps; lower is faster); median [min, max] over the reps; "
          "ours / default: median of the same rep's ratios (above 1: ours ran on a slower CPU)")
    print("and the CPU seconds the process's threads used during the steps: main thread / "
          "all others (autograd's, the memory poll, a runtime's own), median over the reps")
    cols = list(modes) + [f"{m} / default" for m in ours] + [f"{m} CPU s main/others"
                                                             for m in modes]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells = [med_range(s["cpu_us"][m], 3) for m in modes]
        for m in ours:
            v = s["ratios"].get(m, {}).get("cpu_vs_default") or []
            cells.append(med_range(v, 3) if v else "-")
        for m in modes:
            v = s.get("thread_cpu_s", {}).get(m) or []
            cells.append("%.2f/%.2f" % (statistics.median(x[0] for x in v),
                                        statistics.median(x[1] for x in v)) if v else "-")
        print(f"| {w} | " + " | ".join(cells) + " |")
    if not any(v for s in summary.values() for v in s.get("device_calls", {}).values()):
        return
    print()
    print("device calls over the measured steps (the allocator's own num_device_alloc + "
          "num_device_free: cudaMalloc/cudaFree, adaptalloc's page maps/unmaps and segments); "
          "median [min, max] over the reps")
    print("and adaptalloc's time inside its backend calls over the measured steps (ms; "
          "pages mapped / unmapped; and as a share of the run's summed step time)")
    print("and the paired speed over only the steps in which adaptalloc made no device call "
          "(median over the reps of each rep's median; '-' where every step made one)")
    cols = list(modes) + [f"{m} backend ms (maps/unmaps, share)" for m in ours] + \
        [f"{m} paired speed, steps without device calls" for m in ours]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells = [med_range(s.get("device_calls", {}).get(m, [])) for m in modes]
        for m in ours:
            v = s.get("backend_measured", {}).get(m) or []
            if not v:
                cells.append("-")
                continue
            ms = [x["backend_ms"] for x in v]
            share = [x["backend_ms"] / x["step_ms_total"] for x in v if x.get("step_ms_total")]
            cells.append(med_range(ms, 1) + " (%s/%s%s)" % (
                med_range([x["pages_mapped"] for x in v]),
                med_range([x["pages_unmapped"] for x in v]),
                ", " + med_range([100 * x for x in share], 1) + "%" if share else ""))
        for m in ours:
            v = s["ratios"].get(m, {}).get("paired_quiet") or []
            cells.append(med_range(v, 3) + "x" if v else "-")
        print(f"| {w} | " + " | ".join(cells) + " |")
