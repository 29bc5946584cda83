#!/usr/bin/env python3
"""bench/replay/util_table.py, the utilisation table from committed traces,
on the CPU (standard library only, no torch): the committed synthetic trace
replayed under the default policy, with stitching, and the replay's models of
PyTorch's allocator; a GPU run's figures beside a trace; a --json output
that is an input refused; no replay program, no trace.

    python3 tests/tools/test_util_table.py PATH/TO/adaptalloc-replay
"""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "bench", "replay", "util_table.py")
TRACE = os.path.join(ROOT, "bench", "replay", "traces", "holes-j64-s1.csv.gz")
# the same with long-lived tensors of 1.5 MiB: above the small requests'
# bound, they lie together in rooms (docs/core.md, "Placement")
ROOMS = os.path.join(ROOT, "bench", "replay", "traces", "holes-k1536-s1.csv.gz")
# and of 4 MiB, which open no room: the holes stay, and stitching closes them
HOLES = os.path.join(ROOT, "bench", "replay", "traces", "holes-k4096-s1.csv.gz")


def run(*args, env=None):
    return subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True,
                          timeout=240, env=env)


def row(out, first):
    """The cells of the first table row starting with `| first |`."""
    for line in out.splitlines():
        if line.startswith(f"| {first} |"):
            return [c.strip() for c in line.strip("|").split("|")]
    raise AssertionError(f"no row {first!r} in:\n{out}")


def main():
    replay = sys.argv[1]
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        # the committed trace: its small long-lived tensors placed apart from
        # the activations (docs/core.md, "Placement"), the default reserves no
        # more than the replay's models of PyTorch's allocator, and stitching
        # no more than the default
        js = os.path.join(tmp, "u.json")
        r = run("--replay", replay, TRACE, "--json", js)
        check(r.returncode == 0, f"committed trace: rc {r.returncode}: {r.stderr}")
        doc = json.load(open(js))[0]
        d, s = doc["replay"]["default"], doc["replay"]["stitch"]
        check(doc["trace"] == "holes-j64-s1" and doc["events"] > 0, "trace name, events")
        best = min(doc["replay"]["torch:default"]["reserved_mib"],
                   doc["replay"]["torch:expandable"]["reserved_mib"])
        check(d["reserved_mib"] <= best and s["reserved_mib"] <= d["reserved_mib"],
              f"default {d['reserved_mib']}, stitch {s['reserved_mib']}, best model {best}")
        check(d["util"] >= 0.98, f"default's utilisation {d['util']}")
        # the same with 1.5 MiB long-lived tensors: the default at or under
        # the better model too (before the rooms, 966 MiB against 896)
        js3 = os.path.join(tmp, "k.json")
        r3 = run("--replay", replay, ROOMS, "--json", js3)
        check(r3.returncode == 0, f"rooms trace: rc {r3.returncode}: {r3.stderr}")
        kd = json.load(open(js3))[0]["replay"]
        kbest = min(kd["torch:default"]["reserved_mib"], kd["torch:expandable"]["reserved_mib"])
        check(kd["default"]["reserved_mib"] <= kbest and kd["default"]["util"] >= 0.98,
              f"rooms: default {kd['default']['reserved_mib']} "
              f"(util {kd['default']['util']}), best model {kbest}")
        # the trace whose holes stay: stitching raises utilisation and lowers reserved
        js2 = os.path.join(tmp, "h.json")
        r2 = run("--replay", replay, HOLES, "--json", js2)
        check(r2.returncode == 0, f"holes trace: rc {r2.returncode}: {r2.stderr}")
        hd = json.load(open(js2))[0]["replay"]
        hdef, hst = hd["default"], hd["stitch"]
        check(hst["util"] > hdef["util"] and hst["reserved_mib"] < hdef["reserved_mib"],
              f"stitching: util {hdef['util']} -> {hst['util']}, reserved "
              f"{hdef['reserved_mib']} -> {hst['reserved_mib']}")
        check(hst["alias_calls"] > 0 and hdef["alias_calls"] == 0 and hst["stitches"] > 0,
              "alias calls and stitches only with stitching")
        check(hst["holes_mib"] < hdef["holes_mib"], "holes at peak in use fewer with stitching")
        # the cost model prices the aliases: past the backend calls' 43 us
        # each, 24 (undone) to 36 us (mapped) per alias call
        extra = hst["sim_backend_us"] - 43.0 * hst["backend_calls"]
        check(hst["alias_calls"] > 0
              and 24.0 * hst["alias_calls"] - 0.01 <= extra <= 36.0 * hst["alias_calls"] + 0.01
              and abs(hdef["sim_backend_us"] - 43.0 * hdef["backend_calls"]) < 0.01,
              f"simulated backend time {hdef['sim_backend_us']} -> {hst['sim_backend_us']}, "
              f"calls {hst['backend_calls']}, alias calls {hst['alias_calls']}")
        check(set(doc["replay"]) == {"default", "stitch", "plan", "stitch+plan", "stitch+grow",
                                     "torch:default", "torch:expandable"}, "seven policies")
        pl, sp = doc["replay"]["plan"], doc["replay"]["stitch+plan"]
        check(pl["plans_adopted"] is not None and sp["plan_hits"] is not None,
              "the plan's figures")
        cells = row(r.stdout, "holes-j64-s1")
        check(cells[3] == f"{d['util']:.3f}" and cells[4] == f"{s['util']:.3f}",
              f"table's util cells: {cells}")
        check(row(r.stdout, "holes-j64-s1 | stitch")[1] == "stitch", "detail row")
        # a GPU run's figures beside a trace: steps and the GPU's utilisation
        shutil.copy(TRACE, os.path.join(tmp, "w-default.csv.gz"))
        with open(os.path.join(tmp, "w-default.json"), "w") as f:
            json.dump({"workload": "w", "mode": "default", "steps": 20,
                       "torch": {"max_reserved": 1000 << 20, "max_allocated": 800 << 20}}, f)
        r = run("--replay", replay, "--no-torch", tmp)
        cells = row(r.stdout, "w-default")
        # five utilisation cells (one per policy), then the GPU's
        check(r.returncode == 0 and cells[2] == "20" and cells[8] == "0.800",
              f"sidecar: rc {r.returncode}, cells {cells}: {r.stderr}")
        check("torch:default" not in r.stdout, "--no-torch")
        # five policies: their calls per step, then their simulated backend ms per step
        check(cells[-6].endswith(")") and "in all" not in cells[-6], f"calls per step: {cells}")
        check(all(float(c) >= 0.0 for c in cells[-5:]), f"simulated ms per step, numbers: {cells}")
        # a plain CSV replays the same as its gzip
        plain = os.path.join(tmp, "plain.csv")
        with gzip.open(TRACE, "rb") as a, open(plain, "wb") as b:
            shutil.copyfileobj(a, b)
        r = run("--replay", replay, plain, "--json", os.path.join(tmp, "p.json"))
        p = json.load(open(os.path.join(tmp, "p.json")))[0]["replay"]
        check(r.returncode == 0 and p["stitch"] == s and p["default"] == d, "plain CSV")
        # refusals
        r = run("--replay", replay, TRACE, "--json", TRACE)
        check(r.returncode == 2 and "util_table: " in r.stderr, f"--json onto the input: {r}")
        r = run("--replay", os.path.join(tmp, "nothing"), TRACE)
        check(r.returncode == 1 and "no adaptalloc-replay" in r.stderr, f"no replay: {r}")
        os.makedirs(os.path.join(tmp, "empty"))
        r = run("--replay", replay, os.path.join(tmp, "empty"))
        check(r.returncode == 1 and "no traces" in r.stderr, f"no traces: {r}")
        bad = os.path.join(tmp, "bad.csv")
        with open(bad, "w") as f:
            f.write("Thread,Time,Action\n1,2\n")
        r = run("--replay", replay, bad, TRACE)
        check(r.returncode == 1 and "bad.csv" in r.stderr and "| holes-j64-s1 |" in r.stdout,
              f"a trace that does not replay: the others still tabled: {r}")
    for f in failures:
        print("FAIL:", f)
    print("test_util_table: %s" % ("FAILED" if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
