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

Exit 0 done (a replay that failed is kept in the file as its error), 2 bad
input or usage: an unreadable, non-UTF-8, non-JSON or wrongly shaped --runs,
--policy or --report (over 64 MiB refused unread), a --db that is not a
store, bad --delays-us or --limit-factors (positive finite factors), an
--out that is an input (the database, directly or through a link) or cannot
be written, or a file of its journal (<db>-wal, -shm, -journal), a pid past
2^63 or a "step_ms" that is not a list of numbers. Each is one line naming
the file or option, said before any replay runs; the tables printed after
collecting come from the account in memory, never read back from --out (a
device such as /dev/stdout or /dev/null is written in place); the account is written whole or not at all (a temporary renamed
into place: python/adaptalloc/_outfile.py, the rule every program of the
project follows), and --report prints nothing unless the whole file reads.
"""
import argparse
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile

MIB = 1 << 20
JSON_MAX_BYTES = 64 << 20


def _outfile():
    """adaptalloc's one rule for outputs and bounded inputs
    (python/adaptalloc/_outfile.py), loaded by its path: the tool needs no
    installed package."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "python",
                        "adaptalloc", "_outfile.py")
    spec = importlib.util.spec_from_file_location("aa_outfile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


outfile = _outfile()


class InputError(Exception):
    """Bad input or usage: the message names the file or option."""
PARTS = ("requested", "rounding", "slab_free", "slab_tails", "holes", "stream_holds",
         "thread_caches", "other")


def run_ids(db, runs):
    """{workload: (run id, events written, events dropped)} by process id."""
    con = sqlite3.connect("file:%s?mode=ro" % urlquote(db), uri=True)
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


def urlquote(path):
    import urllib.parse
    return urllib.parse.quote(os.path.abspath(path))


def parse_list(text, what, conv, ok, want):
    """A comma-separated list (empty items skipped), each conv()-ed and ok()."""
    out = []
    for x in text.split(","):
        if x.strip() == "":
            continue
        try:
            v = conv(x)
        except ValueError:
            v = None
        if v is None or not ok(v):
            raise InputError("%s: %r is not %s" % (what, x, want))
        out.append(v)
    return out


def check_collect(a):
    """Everything collect reads, checked before the first replay:
    (runs, delays, factors, policy)."""
    # the database's journal files are inputs too: SQLite reads <db>-wal,
    # -shm, -journal by name, so a new file there would be taken for one
    journals = [a.db + sfx for sfx in ("-wal", "-shm", "-journal")]
    for j in journals:
        if os.path.realpath(a.out) == os.path.realpath(j):
            raise InputError("--out %s is the database's %s file (SQLite reads it with %s): "
                             "name another output" % (a.out, j[len(a.db):], a.db))
    outfile.check_output(a.out, [a.db, a.runs, a.policy, a.replay] + journals, "--out")
    delays = parse_list(a.delays_us, "--delays-us", int, lambda v: 0 <= v <= 10 ** 12,
                        "a delay in microseconds (0 to 10^12)")
    factors = parse_list(a.limit_factors, "--limit-factors", float,
                         lambda v: math.isfinite(v) and 0 < v <= 1000,
                         "a positive finite factor (at most 1000)")
    runs = outfile.load_json(a.runs, "--runs", JSON_MAX_BYTES, dict).get("runs")
    if not isinstance(runs, dict) or not all(
            isinstance(m, dict) and all(isinstance(rs, list) and
                                        all(isinstance(r, dict) for r in rs)
                                        for rs in m.values()) for m in runs.values()):
        raise InputError("--runs %s: \"runs\" is not {workload: {mode: [run objects]}}"
                         % a.runs)
    for w, m in runs.items():
        for rs in m.values():
            for r in rs:
                pid = r.get("pid", -1)
                if not isinstance(pid, int) or isinstance(pid, bool):
                    raise InputError("--runs %s: workload %r: a run's pid is not a number"
                                     % (a.runs, w))
                if not -(1 << 63) <= pid < (1 << 63):
                    raise InputError("--runs %s: workload %r: pid %d is not a process id "
                                     "(over 2^63)" % (a.runs, w, pid))
                steps = r.get("step_ms")
                if steps is not None and not (
                        isinstance(steps, list) and
                        all(isinstance(v, (int, float)) and not isinstance(v, bool) and
                            math.isfinite(v) for v in steps)):
                    raise InputError("--runs %s: workload %r: \"step_ms\" is not a list of "
                                     "numbers (milliseconds per step)" % (a.runs, w))
    policy = outfile.load_json(a.policy, "--policy", JSON_MAX_BYTES, dict)
    if factors and not isinstance((policy.get("pools") or {}).get("device"), dict):
        raise InputError("--policy %s has no pools.device object to set limit_bytes in"
                         % a.policy)
    if not os.path.isfile(a.db):
        raise InputError("--db %s: %s" % (a.db, "not a regular file" if os.path.exists(a.db)
                                          else "no such file"))
    try:
        con = sqlite3.connect("file:%s?mode=ro" % urlquote(a.db), uri=True)
        try:
            con.execute("SELECT id, events_written, events_dropped, pid FROM runs LIMIT 1")
        finally:
            con.close()
    except sqlite3.Error as e:
        raise InputError("--db %s is not an adaptalloc store: %s" % (a.db, e))
    if not os.access(a.replay, os.X_OK) or os.path.isdir(a.replay):
        raise InputError("--replay %s is not an executable program" % a.replay)
    return runs, delays, factors, policy


def replay_json(cmd):
    """Runs adaptalloc-replay ... --json: (its document, None) or (None, why)."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    except OSError as e:
        return None, "cannot run %s: %s" % (cmd[0], e.strerror or e)
    if p.returncode != 0:
        return None, p.stderr.strip()[-500:] or "exit %d" % p.returncode
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return None, "its output is not JSON: %r" % p.stdout[:200]
    if not isinstance(doc, dict) or not isinstance(doc.get("result"), dict):
        return None, "its output has no \"result\" object"
    return doc, p.stderr.strip()[-500:]


def collect(a):
    runs, delays, factors, policy = check_collect(a)
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
            j, why = replay_json(cmd)
            if j is None:
                entry["replays"][str(d)] = {"error": why}
                print(f"zoo_account: {w} delay {d}: {why[-300:]}", file=sys.stderr)
                continue
            entry["replays"][str(d)] = {
                "result": j.get("result"),
                "account_at_peak": j.get("account_at_peak"),
                "account_at_peak_in_use": j.get("account_at_peak_in_use"),
                "account_at_peak_in_use_why": j.get("account_at_peak_in_use_why"),
                "warnings": why}
            res = j.get("result", {})
            print(f"{w:9s} delay {d:>7d} us: peak reserved {res.get('peak_reserved', 0) / MIB:8.1f}"
                  f" MiB, in use {res.get('peak_in_use', 0) / MIB:8.1f}", flush=True)
        base = (entry["replays"].get("0") or {}).get("result") or {}
        entry["limits"] = limit_replays(a, w, rid, base.get("peak_in_use"), factors, policy)
        doc["workloads"][w] = entry
    doc["limit_factors"] = factors
    outfile.write_all([(a.out, json.dumps(doc, indent=1))])
    return doc


def limit_replays(a, w, rid, in_use, factors, pol):
    """What closing the holes would cost: the trace replayed (stream events
    at once) with the device pool's limit_bytes at each factor x the
    replay's own peak in use (`in_use`, the delay-0 replay's: a trace may
    hold a run's pinned blocks too, which the GPU's max_memory_allocated
    does not count), so that the pool moves free pages into the request
    (unmapping pages of free chunks, page by page) before it grows: its peak
    reserved, failures and backend calls. {factor: figures}."""
    out = {}
    if not in_use or not factors:
        return out
    pol = json.loads(json.dumps(pol))
    pol.pop("$schema", None)
    for f in factors:
        pol["pools"]["device"]["limit_bytes"] = int(in_use * f)
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(pol, fh)
            path = fh.name
        try:
            j, why = replay_json([a.replay, "run", "--db", a.db, "--run", str(rid), "--policy",
                                  path, "--json", "--no-progress"])
        finally:
            os.unlink(path)
        res = j["result"] if j is not None else {}
        if j is None or not all(isinstance(res.get(k), (int, float)) for k in
                                ("peak_reserved", "peak_in_use", "failures",
                                 "backend_allocs", "backend_frees")):
            out[str(f)] = {"error": why if j is None else "the result lacks a figure"}
            continue
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


def check_account(path, doc):
    """The account file's shape, as report reads it (InputError otherwise)."""
    def want(cond, where):
        if not cond:
            raise InputError("--report %s: %s" % (path, where))
    ws = doc.get("workloads")
    want(isinstance(ws, dict), "\"workloads\" is not an object")
    want(isinstance(doc.get("delays_us"), list), "\"delays_us\" is not a list")
    want(isinstance(doc.get("limit_factors", []), (list, type(None))),
         "\"limit_factors\" is not a list")
    for w, e in ws.items():
        want(isinstance(e, dict) and isinstance(e.get("replays"), dict) and
             isinstance(e.get("gpu"), dict), "workload %r has no \"replays\" and \"gpu\" "
             "objects" % w)
        want(all(isinstance(r, dict) for r in e["replays"].values()),
             "workload %r: a replay is not an object" % w)
        want(isinstance(e.get("limits", {}), (dict, type(None))),
             "workload %r: \"limits\" is not an object" % w)


def report(path, doc=None):
    """Prints the tables of an account file (or of `doc`, the account just
    collected into `path`: never read back from --out, which may be a device
    such as /dev/stdout); nothing when it cannot be read whole (InputError)."""
    import contextlib
    import io
    if doc is None:
        doc = outfile.load_json(path, "--report", JSON_MAX_BYTES, dict)
    check_account(path, doc)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            tables(doc)
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError,
            IndexError) as e:
        raise InputError("--report %s: a figure the tables need is missing or not a number "
                         "(%s: %s)" % (path, type(e).__name__, e))
    sys.stdout.write(buf.getvalue())


def tables(doc):
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
    if a.report is None:
        missing = [k for k in ("db", "runs", "replay", "out") if getattr(a, k) is None]
        if missing:
            ap.error("collecting needs " + ", ".join("--" + k for k in missing))
    elif a.report == "":
        ap.error("--report: the path is empty")
    try:
        if a.report:
            report(a.report)
            return 0
        report(a.out, collect(a))
    except (InputError, outfile.FileError) as e:
        print("zoo_account: %s" % e, file=sys.stderr)
        return 2
    except sqlite3.Error as e:
        print("zoo_account: --db %s: %s" % (a.db, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
