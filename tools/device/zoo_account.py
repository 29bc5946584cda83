#!/usr/bin/env python3
"""Where the reserved bytes go, from each zoo workload's own trace (issue #24
item 2; tools/device/zoo-account.sh runs it on the GPU machine).

Collect (after the traced runs):
  zoo_account.py --db TRACES.db --runs zoo_trace.json --replay ADAPTALLOC_REPLAY
                 --policy policies/default.json --delays-us 0,1000,... --out account.json
  finds each run's trace in the store by its process id, and replays it under
  the policy at each stream-event delay (adaptalloc-replay run --json),
  keeping the result and the pool's account at two moments: when the bytes
  in use first reach their peak (account_at_peak_in_use: `run` replays the
  trace a second time for it) and when reserved first reaches its peak
  (account_at_peak).
Report (anywhere, standard library only):
  zoo_account.py --report account.json
  two tables, one row per workload: the GPU run's peak reserved / allocated,
  then, for the delay whose replayed peak reserved is nearest the GPU's, the
  account (MiB and share of what was reserved then) at peak in use -- the
  moment that explains reserved / allocated: the reserved bytes not in use
  when the allocated bytes peak -- and at peak reserved; then every delay's
  peak. A file collected before the account at peak in use existed shows
  "-" in the first table.
"""
import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

MIB = 1 << 20
PARTS = ("requested", "rounding", "slab_free", "slab_tails", "holes", "stream_holds",
         "thread_caches", "other")


def run_ids(db, runs):
    """{workload: (run id, events written, events dropped)} by process id."""
    con = sqlite3.connect(db)
    out = {}
    try:
        for w, by_mode in runs.items():
            for rs in by_mode.values():
                for r in rs:
                    row = con.execute("SELECT id, events_written, events_dropped FROM runs"
                                      " WHERE pid = ? ORDER BY id DESC", (r.get("pid", -1),)
                                      ).fetchone()
                    if row is None:
                        print(f"zoo_account: {w}: no run of pid {r.get('pid')} in {db}",
                              file=sys.stderr)
                        continue
                    out[w] = (row[0], row[1], row[2], r)
    finally:
        con.close()
    return out


def collect(a):
    runs = json.load(open(a.runs))["runs"]
    delays = [int(x) for x in a.delays_us.split(",") if x != ""]
    doc = {"policy": a.policy, "delays_us": delays, "workloads": {}}
    for w, (rid, written, dropped, r) in run_ids(a.db, runs).items():
        entry = {"run_id": rid, "events_written": written, "events_dropped": dropped,
                 "gpu": {"peak_mib": r.get("peak_mib"), "torch": r.get("torch"),
                         "steps": r.get("steps"),
                         "step_ms_median": (sorted(r["step_ms"])[len(r["step_ms"]) // 2]
                                            if r.get("step_ms") else None)},
                 "replays": {}}
        for d in delays:
            cmd = [a.replay, "run", "--db", a.db, "--run", str(rid), "--policy", a.policy,
                   "--event-delay-us", str(d), "--json", "--no-progress"]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                entry["replays"][str(d)] = {"error": p.stderr.strip()[-500:]}
                print(f"zoo_account: {w} delay {d}: {p.stderr.strip()[-300:]}", file=sys.stderr)
                continue
            j = json.loads(p.stdout)
            entry["replays"][str(d)] = {
                "result": j.get("result"),
                "account_at_peak": j.get("account_at_peak"),
                "account_at_peak_in_use": j.get("account_at_peak_in_use"),
                "account_at_peak_in_use_why": j.get("account_at_peak_in_use_why"),
                "warnings": p.stderr.strip()[-500:]}
            res = j.get("result", {})
            print(f"{w:9s} delay {d:>7d} us: peak reserved {res.get('peak_reserved', 0) / MIB:8.1f}"
                  f" MiB, in use {res.get('peak_in_use', 0) / MIB:8.1f}", flush=True)
        base = (entry["replays"].get("0") or {}).get("result") or {}
        entry["limits"] = limit_replays(a, w, rid, base.get("peak_in_use"))
        doc["workloads"][w] = entry
    doc["limit_factors"] = [float(x) for x in a.limit_factors.split(",") if x != ""]
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)


def limit_replays(a, w, rid, in_use):
    """What closing the holes would cost: the trace replayed (stream events
    at once) with the device pool's limit_bytes at each factor x the
    replay's own peak in use (`in_use`, the delay-0 replay's: a trace may
    hold a run's pinned blocks too, which the GPU's max_memory_allocated
    does not count), so that the pool moves free pages into the request
    (unmapping pages of free chunks, page by page) before it grows: its peak
    reserved, failures and backend calls. {factor: figures}."""
    out = {}
    factors = [float(x) for x in a.limit_factors.split(",") if x != ""]
    if not in_use or not factors:
        return out
    pol = json.load(open(a.policy))
    pol.pop("$schema", None)
    for f in factors:
        pol["pools"]["device"]["limit_bytes"] = int(in_use * f)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(pol, fh)
            path = fh.name
        try:
            p = subprocess.run([a.replay, "run", "--db", a.db, "--run", str(rid), "--policy",
                                path, "--json", "--no-progress"], capture_output=True, text=True)
        finally:
            os.unlink(path)
        if p.returncode != 0:
            out[str(f)] = {"error": p.stderr.strip()[-500:]}
            continue
        res = json.loads(p.stdout)["result"]
        out[str(f)] = {k: res[k] for k in ("peak_reserved", "peak_in_use", "failures",
                                           "backend_allocs", "backend_frees")}
        print(f"{w:9s} limit {f:.2f}x in use: peak reserved "
              f"{res['peak_reserved'] / MIB:8.1f} MiB, {res['failures']} failures, "
              f"{res['backend_allocs']} + {res['backend_frees']} backend calls", flush=True)
    return out


def nearest(entry):
    """The delay whose replayed peak reserved is nearest the GPU run's."""
    gpu = (entry["gpu"].get("torch") or {}).get("max_reserved")
    best = None
    for d, rep in entry["replays"].items():
        res = rep.get("result")
        if not res:
            continue
        gap = abs(res["peak_reserved"] - gpu) if gpu else int(d)
        if best is None or gap < best[0]:
            best = (gap, d)
    return best[1] if best else None


def gpu_cell(e):
    t = e["gpu"].get("torch") or {}
    res_g, all_g = t.get("max_reserved"), t.get("max_allocated")
    return ("%.0f / %.0f (%.3f)" % (res_g / MIB, all_g / MIB, res_g / all_g)
            if res_g and all_g else "-")


def account_table(doc, key, what):
    """One row per workload: the account under `key` of the nearest delay's replay."""
    cols = ["GPU reserved / allocated (ratio)", "delay us", what] + \
        [p.replace("_", " ") for p in PARTS]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, e in doc["workloads"].items():
        gpu = gpu_cell(e)
        d = nearest(e)
        acct = e["replays"][d].get(key) if d is not None else None
        if not acct:
            print(f"| {w} | {gpu} | {d if d is not None else '-'} |" + " - |" * (len(cols) - 2))
            continue
        total = acct.get("bytes_reserved") or 1
        inuse = acct.get("requested", 0) + acct.get("rounding", 0)
        cells = [gpu, d, "%.0f / %.0f (%.3f)" % (total / MIB, inuse / MIB,
                                                 total / inuse if inuse else 0.0)]
        cells += ["%.1f (%.1f%%)" % (acct.get(p, 0) / MIB, 100.0 * acct.get(p, 0) / total)
                  for p in PARTS]
        print(f"| {w} | " + " | ".join(cells) + " |")


def report(path):
    doc = json.load(open(path))
    print("the replay of each run's own trace under the default policy at the stream-event"
          " delay whose peak reserved is nearest the GPU run's; GPU: the run's"
          " max_memory_reserved / max_memory_allocated; each part in MiB (share of what"
          " the replay had reserved at that moment)")
    print()
    print("at peak in use (the event where the replay's in-use bytes first reach their"
          " maximum: what reserved / allocated measures):")
    account_table(doc, "account_at_peak_in_use", "replay reserved / in use then (ratio)")
    print()
    print("at peak reserved (the event where the replay's reserved bytes first reach their"
          " maximum):")
    account_table(doc, "account_at_peak", "replay reserved / in use then (ratio)")
    print()
    print("replayed peak reserved, MiB, at each stream-event delay (us); the trace's events"
          " (written / dropped: a run that dropped events is replayed up to its first loss)")
    delays = [str(d) for d in doc["delays_us"]]
    print("| workload | events | " + " | ".join(delays) + " |")
    print("|---" * (2 + len(delays)) + "|")
    for w, e in doc["workloads"].items():
        cells = ["%s / %s" % (e.get("events_written"), e.get("events_dropped"))]
        for d in delays:
            res = (e["replays"].get(d) or {}).get("result")
            cells.append("%.0f" % (res["peak_reserved"] / MIB) if res else "-")
        print(f"| {w} | " + " | ".join(cells) + " |")
    factors = doc.get("limit_factors") or []
    if not factors:
        return
    print()
    print("what closing the holes costs: the same trace (stream events at once) with the"
          " device pool's limit_bytes at F x the replay's own peak in use (the pool then"
          " moves free pages, page by page, before it grows); peak reserved MiB (/ peak in"
          " use), failed allocations, backend calls (maps + unmaps); first column: no limit")
    cols = ["no limit"] + ["limit %.2fx" % f for f in factors]
    print("| workload | " + " | ".join(cols) + " |")
    print("|---" * (1 + len(cols)) + "|")
    for w, e in doc["workloads"].items():
        res = (e["replays"].get("0") or {}).get("result")
        cells = ["%.0f (%.3f), 0, %d" % (res["peak_reserved"] / MIB,
                                         res["peak_reserved"] / res["peak_in_use"],
                                         res["backend_allocs"] + res["backend_frees"])
                 if res else "-"]
        for f in factors:
            x = (e.get("limits") or {}).get(str(f))
            cells.append("%.0f (%.3f), %d, %d" % (x["peak_reserved"] / MIB,
                                                  x["peak_reserved"] / x["peak_in_use"],
                                                  x["failures"],
                                                  x["backend_allocs"] + x["backend_frees"])
                         if x and "peak_reserved" in x else "-")
        print(f"| {w} | " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--report", metavar="ACCOUNT_JSON")
    ap.add_argument("--db")
    ap.add_argument("--runs")
    ap.add_argument("--replay")
    ap.add_argument("--policy", default="policies/default.json")
    ap.add_argument("--delays-us", default="0,1000,10000,50000,200000")
    ap.add_argument("--limit-factors", default="1.03,1.05",
                    help="replay each trace under a limit of F x its replay's peak in use too "
                    "(comma-separated; '' for none)")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.report:
        report(a.report)
        return 0
    missing = [k for k in ("db", "runs", "replay", "out") if getattr(a, k) is None]
    if missing:
        ap.error("collecting needs " + ", ".join("--" + k for k in missing))
    collect(a)
    report(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
