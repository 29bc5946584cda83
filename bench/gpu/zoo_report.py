"""The GPU workload zoo (bench_zoo.py), one concern: the report -- the runs
summarised per workload (peaks, step times, paired speed, CPU, device
calls) and printed as tables.

As a program, the utilisation table (issue #36) of one or more runs'
figures: bench_zoo.py --out JSON files, or logs holding its RESULT lines
(what a run that was cut short printed):

    python3 bench/gpu/zoo_report.py --util-table zoo.json [more.json bench.log ...]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a program too
import benchcpu  # noqa: E402 - bench/gpu/benchcpu.py
from zoo_modes import TORCH_MODES, base_mode, our_modes  # noqa: E402
from zoo_workloads import MIB  # noqa: E402


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


def phase_figures(r):
    """A phased run's figures (zoo_workloads.py's docstring; zoo_child.py's
    SERIES): per phase the driver's used memory at its last step and its
    most (MiB, less the CUDA context), the median step time (warm-up steps
    left out) and the device calls in it; and for a run with phases
    "before", "burst" and "after": held_mib, the used memory at the end of
    "after" less that at the end of "before" (what the burst left behind);
    half_back_s, the seconds from the burst's last step to the first step
    of "after" at which the burst's extra memory was half given back (None:
    never); trims and trimmed_mib in "after" and first_trim_s (seconds from
    the burst's last step; adaptalloc only); after_trim_step_ms, the median
    step time in "after" after the first trim."""
    ser = r["series"]
    t, used, trims, trimmed = ser["t_s"], ser["used_mib"], ser["trims"], ser["trimmed_mib"]
    n, warm = len(used), r.get("warm", 0)
    ms = list(r.get("warm_ms") or []) + list(r.get("step_ms") or [])
    calls = r.get("step_device_calls") or []
    bounds, ph = {}, {}
    for name, a, b in r["phases"]:
        b = min(b, n)
        if a >= b:
            continue
        bounds[name] = (a, b)
        st = ms[max(a, warm):b]
        c = calls[a:b]
        ph[name] = {"end_used_mib": used[b - 1], "max_used_mib": max(used[a:b]),
                    "step_ms": statistics.median(st) if st else None,
                    "device_calls": (None if not c or any(x is None for x in c)
                                     else sum(x[0] + x[1] for x in c))}
    out = {"phases": ph}
    if not all(k in ph for k in ("before", "burst", "after")):
        return out
    (a, b), t_end = bounds["after"], t[bounds["burst"][1] - 1]
    base, top = ph["before"]["end_used_mib"], ph["burst"]["max_used_mib"]
    out["held_mib"] = ph["after"]["end_used_mib"] - base
    out["half_back_s"] = next((t[k] - t_end for k in range(a, b)
                               if used[k] <= base + (top - base) / 2), None)
    out.update(trims=None, trimmed_mib=None, first_trim_s=None, after_trim_step_ms=None)
    if trims[b - 1] is not None:
        t0, m0 = trims[a - 1] or 0, trimmed[a - 1] or 0
        out["trims"], out["trimmed_mib"] = trims[b - 1] - t0, trimmed[b - 1] - m0
        k = next((k for k in range(a, b) if trims[k] > t0), None)
        if k is not None:
            out["first_trim_s"] = t[k] - t_end
            st = ms[k + 1:b]
            out["after_trim_step_ms"] = statistics.median(st) if st else None
    return out


def alloc_cpu(r):
    """A run's allocator CPU per measured step: (allocations + frees per
    step, us per allocation and free in that process, ms per step, share of
    the step time); None without the figures (runs before they existed)."""
    calls, cost, st = r.get("alloc_calls_measured"), r.get("alloc_cost_us"), r.get("step_ms")
    if calls is None or cost is None or not st:
        return None
    per_step = calls / len(st)
    ms = per_step / 2 * cost / 1e3
    return per_step, cost, ms, ms / statistics.median(st)


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
            ours = by_rep(runs[w][m])
            # against PyTorch's settings other than the default run beside it
            # (step k of the same repetition; in lockstep, the same turn)
            ratios[m]["paired_vs"] = {}
            for tm in (t for t in TORCH_MODES if t != "default" and t in modes):
                theirs = by_rep(runs[w][tm])
                v = []
                for rep in sorted(set(ours) & set(theirs)):
                    pr = benchcpu.paired(theirs[rep]["step_ms"], ours[rep]["step_ms"])
                    if pr:
                        v.append(statistics.median(pr))
                ratios[m]["paired_vs"][tm] = v
            if "default" not in modes:
                continue
            dflt = by_rep(runs[w]["default"])
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
        acpu = {m: [alloc_cpu(r) for r in runs[w][m] if alloc_cpu(r)] for m in modes}
        bk = {m: [r["backend_measured"] for r in runs[w][m] if r.get("backend_measured")]
              for m in our_modes(modes)}
        threads = {m: [[r["cpu_steps"]["main"], r["cpu_steps"]["others"]] for r in runs[w][m]
                       if r.get("cpu_steps")] for m in modes}
        phased = {m: [phase_figures(r) for r in runs[w][m] if r.get("series")] for m in modes}
        out[w] = {"peak_mib": peaks, "step_ms": steps, "cpu_us": cpu, "device_calls": calls,
                  "alloc_cpu": {m: v for m, v in acpu.items() if v},
                  "backend_measured": bk, "thread_cpu_s": threads, "ratios": ratios,
                  "phases": {m: v for m, v in phased.items() if v},
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


def print_phases(summary, modes):
    """The phased workloads' table (burst): memory after the burst per
    allocator, and adaptalloc's loop: its trims and its audit trail."""
    rows = [(w, m, v) for w, s in summary.items() for m in modes
            for v in [s.get("phases", {}).get(m)] if v]
    if not rows:
        return

    def col(v, key, nd=0, sub=None):
        x = [(f["phases"].get(sub, {}) if sub else f).get(key) for f in v]
        return med_range([y for y in x if y is not None], nd)

    print()
    print("memory after a burst: the driver's used memory (MiB, less the CUDA context) at the "
          "end of the phase before the burst, at its most in the burst and at the end of the "
          "phase after; held = end of after - end of before; half back = seconds from the "
          "burst's last step until half the burst's extra memory was given back ('-': never); "
          "the loop's trims in the phase after (MiB given back, the first's seconds after the "
          "burst); median step ms before the burst / after it / after the first trim; device "
          "calls in the phase after (the allocator's num_device_alloc + num_device_free); "
          "median [min, max] over the reps")
    cols = ["workload", "mode", "peak", "end of before", "burst's most", "end of after", "held",
            "half back, s", "trims after (MiB; first at s)", "step ms before / after / after trim",
            "device calls after"]
    print("| " + " | ".join(cols) + " |")
    print("|---" * len(cols) + "|")
    for w, m, v in rows:
        trims = col(v, "trims")
        if trims != "-":
            trims += f" ({col(v, 'trimmed_mib')}; {col(v, 'first_trim_s', 1)})"
        cells = [w, m, med_range(summary[w]["peak_mib"].get(m, [])),
                 col(v, "end_used_mib", 0, "before"), col(v, "max_used_mib", 0, "burst"),
                 col(v, "end_used_mib", 0, "after"), col(v, "held_mib"),
                 col(v, "half_back_s", 1), trims,
                 " / ".join([col(v, "step_ms", 2, "before"), col(v, "step_ms", 2, "after"),
                             col(v, "after_trim_step_ms", 2)]),
                 col(v, "device_calls", 0, "after")]
        print("| " + " | ".join(cells) + " |")
    for w, m, _ in rows:
        for r in summary[w]["extra"].get(m, []):
            ad = ((r.get("pool") or {}).get("adapt")) or {}
            if not ad:
                continue
            print(f"{w} {m} rep {(r.get('rep') or 0) + 1}: loop " + (
                "off" if not ad.get("enabled") else
                "%s steps, %s decisions: %s added, %s retired, %s grows, %s trims (%.1f MiB), "
                "%s rejected by replay" % (
                    ad.get("steps"), ad.get("decisions"), ad.get("classes_added"),
                    ad.get("classes_retired"), ad.get("grows"), ad.get("trims"),
                    (ad.get("bytes_trimmed") or 0) / MIB, ad.get("rejected_by_replay"))))
            for a in ad.get("audit") or []:
                pr, me = a.get("predicted"), a.get("measured")
                what = ("gave back %.1f MiB" % ((a.get("released") or 0) / MIB)
                        if a.get("kind") == "trim" else "%s B" % a.get("block_size"))
                print("  audit: pool %s step %s %s %s %s%s%s" % (
                    a.get("pool"), a.get("step"), a.get("kind"), what,
                    "applied" if a.get("applied") else "not applied",
                    "; replay %.1f -> %.1f MiB" % (pr["peak_reserved_before"] / MIB,
                                                   pr["peak_reserved_after"] / MIB) if pr else "",
                    "; measured %.1f -> %.1f MiB" % (me["reserved_before"] / MIB,
                                                     me["reserved_after"] / MIB) if me else ""))


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
    print_phases(summary, modes)
    print()
    print("step time, ms (median of each run's steps); median [min, max] over the reps; "
          "speed = default / ours: of the medians, and paired (median of step k's ratios "
          "in each rep; median [min, max] over the reps)")
    others = [t for t in TORCH_MODES if t != "default" and t in modes]
    cols = list(modes) + [f"{m} speed vs default" for m in ours] + \
        [f"{m} paired speed vs {t}" for m in ours for t in ["default"] + others]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, s in summary.items():
        cells = [med_range(s["step_ms"][m], 2) for m in modes]
        cells += [fmt(s["ratios"].get(m, {}).get("speed_vs_default"), 3, "x") for m in ours]
        for m in ours:
            r = s["ratios"].get(m, {})
            for v in [r.get("paired_speed")] + [r.get("paired_vs", {}).get(t) for t in others]:
                cells.append(med_range(v, 3) + "x" if v else "-")
        print(f"| {w} | " + " | ".join(cells) + " |")
    if any(s.get("alloc_cpu") for s in summary.values()):
        print()
        print("the allocator's own CPU per step: allocations + frees per measured step (its "
              "memory_stats), x the us one allocation and its free cost in the same process "
              "(torch.empty(4096) + del, less the same loop on zero-element tensors, after "
              "the steps) / 2 = ms per step (and the share of the step's median time); median "
              "over the reps")
        cols = [f"{m} calls/step, us/pair, ms/step (share)" for m in modes]
        print("| workload | " + " | ".join(cols) + " |")
        print("|---" * (1 + len(cols)) + "|")
        for w, s in summary.items():
            cells = []
            for m in modes:
                v = s.get("alloc_cpu", {}).get(m)
                if not v:
                    cells.append("-")
                    continue
                med = [statistics.median(x[k] for x in v) for k in range(4)]
                cells.append("%.0f, %.3f, %.3f (%.2f%%)" % (med[0], med[1], med[2],
                                                            100 * med[3]))
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


# ------------------------------------------------------------ utilisation
# the utilisation table's columns, in this order where present: adaptalloc
# (native), with stitching (native@st: ADAPTALLOC_POLICY a policy with
# pools.device.large.stitch true), PyTorch's three settings; other modes
# found in the runs follow
UTIL_MODES = ("native", "native@st", "native@pl", "native@sp", "default", "expandable", "async")


def load_runs(paths):
    """{workload: {mode: [run]}} from bench_zoo.py --out JSON files and logs
    with its RESULT lines, merged; a run found twice (the same workload,
    mode, pid and repetition: a JSON and the log of the same call) counts
    once. Raises OSError or ValueError naming the file."""
    runs, seen = {}, set()

    def add(r, where):
        if not isinstance(r, dict) or "workload" not in r or "mode" not in r:
            raise ValueError(f"{where}: not a run's figures")
        key = (r["workload"], r["mode"], r.get("pid"), r.get("rep"))
        if key in seen:
            return
        seen.add(key)
        runs.setdefault(r["workload"], {}).setdefault(r["mode"], []).append(r)

    for p in paths:
        with open(p) as f:
            text = f.read()
        if text.lstrip().startswith("{"):
            try:
                doc = json.loads(text)
            except ValueError as e:
                raise ValueError(f"{p}: not JSON: {e}")
            for w, by_mode in (doc.get("runs") or {}).items():
                for m, rs in by_mode.items():
                    for r in rs:
                        add(r, p)
            continue
        for k, line in enumerate(text.splitlines(), 1):
            if line.startswith("RESULT {"):
                try:
                    add(json.loads(line[len("RESULT "):]), f"{p}: line {k}")
                except ValueError as e:
                    raise ValueError(f"{p}: line {k}: {e}")
    return runs


def run_util(r):
    """A run's (driver peak MiB, max_memory_reserved MiB,
    max_memory_allocated MiB, utilisation = allocated / reserved); None for
    a figure the run lacks."""
    t = r.get("torch") or {}
    res, alloc = t.get("max_reserved"), t.get("max_allocated")
    peak = r.get("peak_mib") if r.get("peak_source") is None else None  # lockstep: not the driver's
    return (peak, res / MIB if res else None, alloc / MIB if alloc else None,
            alloc / res if res and alloc else None)


def run_calls_from5(r):
    """A run's backend calls per step from the fifth step on: (calls per step,
    alias calls per step or None, source, cross-stream waits per step or
    None). adaptalloc's runs count their device pools' own backend calls
    (creates, maps, unmaps, frees) plus stitching's alias map and unmap
    calls, and apart from them the waits of stream-ordered reuse
    (cudaStreamWaitEvent, no backend call; runs recorded before the figure
    have none); PyTorch's count cudaMalloc + cudaFree (num_device_alloc +
    num_device_free; page maps for expandable segments). None where the run
    has neither."""
    fs = r.get("from_step") or {}
    n = fs.get("steps")
    bk = fs.get("backend")
    if n and bk:
        alias = bk.get("alias_calls", 0)
        waits = bk.get("stream_waits")
        return ((bk.get("backend_calls", 0) + alias) / n, alias / n, "pool",
                None if waits is None else waits / n)
    ts = fs.get("torch_stats") or {}
    if n and "num_device_alloc" in ts and "num_device_free" in ts:
        return (ts["num_device_alloc"] + ts["num_device_free"]) / n, None, "memory_stats", None
    v = (r.get("step_device_calls") or [])[4:]  # runs before "from_step" was kept
    if v and all(x is not None for x in v):
        return sum(a + b for a, b in v) / len(v), None, "memory_stats", None
    return None


def _med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def util_summary(runs):
    """{workload: {mode: figures}}: the medians over a mode's runs of each
    run_util figure, of run_calls_from5, and of the allocator's retries and
    segments (torch_stats at the end: num_alloc_retries, segment.all.peak,
    segment.all.allocated); plus per workload "best": PyTorch's setting of
    the lowest driver peak and that peak."""
    out = {}
    for w, by_mode in runs.items():
        figs = {}
        for m, rs in by_mode.items():
            if not rs:
                continue
            u = [run_util(r) for r in rs]
            c = [run_calls_from5(r) for r in rs]
            ts = [r.get("torch_stats") or {} for r in rs]
            figs[m] = {"reps": len(rs),
                       "peak_mib": _med(x[0] for x in u), "reserved_mib": _med(x[1] for x in u),
                       "allocated_mib": _med(x[2] for x in u), "util": _med(x[3] for x in u),
                       "calls_per_step": _med(x[0] for x in c if x),
                       "alias_per_step": _med(x[1] for x in c if x),
                       "waits_per_step": _med(x[3] for x in c if x),
                       "calls_source": next((x[2] for x in c if x), None),
                       "retries": _med(t.get("num_alloc_retries") for t in ts),
                       "segments_peak": _med(t.get("segment.all.peak") for t in ts),
                       "segments_made": _med(t.get("segment.all.allocated") for t in ts)}
        torch_peaks = {m: f["peak_mib"] for m, f in figs.items()
                       if m in TORCH_MODES and f["peak_mib"] is not None}
        best = min(torch_peaks, key=torch_peaks.get) if torch_peaks else None
        out[w] = {"modes": figs, "best": best,
                  "best_peak_mib": torch_peaks[best] if best else None}
    return out


def util_modes(summary):
    """The modes of the table: UTIL_MODES first, then the others found."""
    found = {m for s in summary.values() for m in s["modes"]}
    return [m for m in UTIL_MODES if m in found] + sorted(found - set(UTIL_MODES))


def print_util_table(summary, out=None):
    """The utilisation table as markdown: per workload each mode's driver
    peak, its ratio to the best PyTorch setting, and utilisation; then per
    workload and mode the figures behind them."""
    out = out or sys.stdout
    modes = util_modes(summary)
    ours = [m for m in modes if base_mode(m) in ("native", "pluggable")]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    def say(line=""):
        out.write(line + "\n")

    say("Peak device memory (MiB, the driver's: total - free, less the CUDA context), its "
        "ratio to the best (lowest) of PyTorch's settings, and utilisation (max_memory_allocated "
        "/ max_memory_reserved, the allocator's own); median over the repetitions.")
    say()
    cols = ([f"{m} MiB" for m in modes] + ["best PyTorch"] + [f"{m} / best" for m in ours] +
            [f"util {m}" for m in modes])
    say("| workload | " + " | ".join(cols) + " |")
    say("|---|" + "---:|" * len(cols))
    for w, s in summary.items():
        fm, best = s["modes"], s["best_peak_mib"]
        cells = [f(fm.get(m, {}).get("peak_mib"), ",.0f") for m in modes]
        cells.append(f"{s['best']} {best:,.0f}" if best is not None else "-")
        for m in ours:
            p = fm.get(m, {}).get("peak_mib")
            cells.append(f(p / best if p is not None and best else None, ".3f"))
        cells += [f(fm.get(m, {}).get("util"), ".3f") for m in modes]
        say(f"| {w} | " + " | ".join(cells) + " |")
    say()
    say("Per workload and allocator: the driver's peak, max_memory_reserved and "
        "max_memory_allocated (MiB), utilisation; backend calls per step from the fifth step "
        "on (adaptalloc: its device pools' backend calls plus stitching's alias map/unmap "
        "calls, the alias calls in brackets; PyTorch: cudaMalloc + cudaFree, or page maps "
        "and unmaps under expandable segments); adaptalloc's cross-stream waits per step "
        "from the fifth step on (stream-ordered reuse: a cudaStreamWaitEvent, no backend "
        "call); and at the run's end the allocator's "
        "num_alloc_retries and segments (segment.all.peak / segment.all.allocated); "
        "median over the repetitions.")
    say()
    cols = ["workload", "mode", "reps", "peak MiB", "reserved MiB", "allocated MiB", "util",
            "backend calls / step, steps 5+ (alias)", "stream waits / step, steps 5+",
            "alloc retries", "segments peak / made"]
    say("| " + " | ".join(cols) + " |")
    say("|---|---|" + "---:|" * (len(cols) - 2))
    for w, s in summary.items():
        for m in modes:
            x = s["modes"].get(m)
            if not x:
                continue
            calls = f(x["calls_per_step"], ".2f")
            if x["alias_per_step"] is not None:
                calls += f" ({x['alias_per_step']:.2f})"
            seg = "-"
            if x["segments_peak"] is not None or x["segments_made"] is not None:
                seg = f"{f(x['segments_peak'], '.0f')} / {f(x['segments_made'], '.0f')}"
            say(f"| {w} | {m} | {x['reps']} | {f(x['peak_mib'], ',.0f')} | "
                f"{f(x['reserved_mib'], ',.0f')} | {f(x['allocated_mib'], ',.0f')} | "
                f"{f(x['util'], '.3f')} | {calls} | {f(x['waits_per_step'], '.2f')} | "
                f"{f(x['retries'], '.0f')} | {seg} |")


def _outfile():
    """adaptalloc's one rule for outputs (python/adaptalloc/_outfile.py),
    loaded by its path: no installed package needed."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "python", "adaptalloc", "_outfile.py")
    spec = importlib.util.spec_from_file_location("aa_outfile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None):
    ap = argparse.ArgumentParser(description="The zoo's utilisation table (issue #36) from "
                                 "bench_zoo.py --out files or logs with its RESULT lines.")
    ap.add_argument("--util-table", nargs="+", required=True, metavar="FILE",
                    help="bench_zoo.py --out JSON files and/or logs holding RESULT lines")
    ap.add_argument("--json", default=None, metavar="OUT",
                    help="also write the table's figures as JSON here")
    args = ap.parse_args(argv)
    outfile = _outfile()
    if args.json:
        try:  # never an input, its folder writable: before any work
            outfile.check_output(args.json, args.util_table, "--json")
        except outfile.FileError as e:
            print(f"zoo_report: {e}", file=sys.stderr)
            return 2
    try:
        runs = load_runs(args.util_table)
    except (OSError, ValueError) as e:
        print(f"zoo_report: {e}", file=sys.stderr)
        return 1
    if not runs:
        print("zoo_report: no runs in " + ", ".join(args.util_table), file=sys.stderr)
        return 1
    summary = util_summary(runs)
    print_util_table(summary)
    if args.json:
        try:
            outfile.write_all([(args.json, json.dumps(summary, indent=1) + "\n")])
        except (outfile.FileError, OSError) as e:
            print(f"zoo_report: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
