#!/usr/bin/env python3
"""The utilisation table from committed traces, on any CPU (issue #36 item 5):
each trace replayed through the real core on the simulated backend
(adaptalloc-replay compare) under the default policy, the same with
stitching on (pools.device.large.stitch), with the learned plan
(large.plan), with both, with stitching that also maps new pages
(large.stitch_grow), and the replay's models of
PyTorch's caching allocator and of its expandable segments; per trace the
replay's peak reserved, peak in use and utilisation (peak in use / peak
reserved, what max_memory_allocated / max_memory_reserved measures on the
GPU), the holes at the peak in use, and the backend calls.

    python3 bench/replay/util_table.py [TRACE_OR_DIR ...] [--replay PATH]
                                       [--no-torch] [--event-delay-us N]
                                       [--json OUT]

Inputs: RMM-format CSV traces (adaptalloc-replay's --csv), gzipped or not
(NAME.csv.gz, NAME.csv); a folder stands for the traces in it; default
bench/replay/traces/. A trace recorded on the GPU by tools/device/util-run.sh
(WORKLOAD-default.csv.gz) has its run's figures beside it
(WORKLOAD-default.json: steps, max_memory_reserved / max_memory_allocated
under PyTorch's default allocator): the table then gives backend calls per
step and the GPU's own utilisation under the default beside the replay's
model of it. --event-delay-us N: each stream event completes N us of
trace time after it is recorded, as on a GPU whose stream runs behind the
host (adaptalloc-replay's option; 0, at once, by default). A synthetic trace: python3 bench/replay/holes_trace.py.
The replay: --replay, else $AA_REPLAY, else the newest
build*/tools/adaptalloc-replay of this tree (cmake --build BUILD).
Exit status: 0; 1 when a trace could not be replayed or none was found;
2 for a --json output that is one of the inputs or cannot be written.
"""
import argparse
import glob
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIB = 1 << 20
# the policies, in the order of the table: label -> what `compare` is given
ADAPTALLOC = ("default", "stitch", "plan", "stitch+plan", "stitch+grow")
# the device pool's large-path keys each adaptalloc variant turns on
VARIANT_KEYS = {"stitch": ("stitch",), "plan": ("plan",), "stitch+plan": ("stitch", "plan"),
                "stitch+grow": ("stitch", "stitch_grow")}
TORCH = ("torch:default", "torch:expandable")


def _outfile():
    """adaptalloc's one rule for outputs (python/adaptalloc/_outfile.py),
    loaded by its path: no installed package needed."""
    import importlib.util
    path = os.path.join(ROOT, "python", "adaptalloc", "_outfile.py")
    spec = importlib.util.spec_from_file_location("aa_outfile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def find_replay(given):
    """The adaptalloc-replay program: given, $AA_REPLAY, or the newest build's."""
    if given or os.environ.get("AA_REPLAY"):
        return given or os.environ["AA_REPLAY"]
    found = [p for p in glob.glob(os.path.join(ROOT, "build*", "tools", "adaptalloc-replay"))
             if os.access(p, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


def find_traces(args):
    """[(name, path)] of the traces named or in the folders named."""
    out = []
    for a in args:
        if os.path.isdir(a):
            names = sorted(n for n in os.listdir(a) if n.endswith((".csv", ".csv.gz")))
            out += [os.path.join(a, n) for n in names]
        else:
            out.append(a)
    return [(os.path.basename(p).rsplit(".csv", 1)[0], p) for p in out]


def variant_policy(path, keys):
    """policies/default.json with the device pool's large.KEY true for each
    of keys (stitch, stitch_grow, plan), at path."""
    with open(os.path.join(ROOT, "policies", "default.json")) as f:
        p = json.load(f)
    for k in keys:
        p["pools"]["device"]["large"][k] = True
    p["name"] = "default-" + "-".join(keys)
    p.pop("$schema", None)
    with open(path, "w") as f:
        json.dump(p, f)


def stitch_policy(path):
    """policies/default.json with stitching on in the device pool, at path."""
    variant_policy(path, ("stitch",))


def sidecar(path):
    """The GPU run's figures beside a trace (NAME.json), or {}."""
    side = path.rsplit(".csv", 1)[0] + ".json"
    try:
        with open(side) as f:
            doc = json.load(f)
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def replay(prog, csv, policies, tmp, delay_us=0):
    """adaptalloc-replay compare --json on a trace (a gzipped one unpacked
    into tmp first: the account at peak in use takes a second pass, which a
    pipe cannot give); {label: run} in the order of policies, and the events."""
    if csv.endswith(".gz"):
        plain = os.path.join(tmp, "trace.csv")
        with gzip.open(csv, "rb") as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst)
        csv = plain
    cmd = [prog, "compare", "--csv", csv, "--json", "--on-error", "count", "--no-progress"]
    if delay_us:
        cmd += ["--event-delay-us", str(delay_us)]
    cmd += [p for _, p in policies]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("adaptalloc-replay exited %d: %s" % (r.returncode,
                                                               r.stderr.strip()[-800:]))
    doc = json.loads(r.stdout)
    runs = doc.get("runs") or []
    if len(runs) != len(policies):
        raise RuntimeError("adaptalloc-replay gave %d runs for %d policies"
                           % (len(runs), len(policies)))
    return {label: run for (label, _), run in zip(policies, runs)}, doc.get("events")


def figures(run):
    """One policy's figures from its replay: MiB, utilisation, calls."""
    res = run.get("result") or {}
    acc = run.get("account_at_peak_in_use") or {}
    reserved, in_use = res.get("peak_reserved") or 0, res.get("peak_in_use") or 0
    errors = res.get("input_errors") or {}
    return {"reserved_mib": reserved / MIB, "in_use_mib": in_use / MIB,
            "requested_mib": (res.get("peak_requested") or 0) / MIB,
            "util": in_use / reserved if reserved else None,
            "util_requested": (res.get("peak_requested") or 0) / reserved if reserved else None,
            "holes_mib": acc["holes"] / MIB if "holes" in acc else None,
            "backend_calls": res.get("backend_calls"),
            "alias_calls": (res.get("alias_maps") or 0) + (res.get("alias_unmaps") or 0),
            "sim_backend_us": res.get("sim_backend_us"),
            "stitches": res.get("stitches"),
            "plan_hits": res.get("plan_hits"),
            "plans_adopted": res.get("plans_adopted"),
            "input_errors": sum(v for k, v in errors.items()
                                if isinstance(v, int) and k not in ("first_line",))}


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def per_step(total, steps, each, whole):
    """A per-step cell: '-' without a figure, each(steps) with the GPU run's
    steps, else `whole` (the figure over the whole trace)."""
    if total is None:
        return "-"
    return each(steps) if steps else whole


def print_table(rows, labels, out=sys.stdout):
    """rows: [(name, events, sidecar, {label: figures})]."""
    def say(line=""):
        out.write(line + "\n")

    ours = [x for x in labels if x in ADAPTALLOC]
    torch = [x for x in labels if x in TORCH]
    say("Utilisation from the replay (peak in use / peak reserved; the real core on the "
        "simulated backend, PyTorch's allocator as the replay models it), and peak reserved "
        "against the best of the models of PyTorch's settings; backend calls per step over "
        "the whole trace (steps from the GPU run's figures beside the trace; '-' without).")
    say()
    cols = (["events", "steps"] + [f"util {x}" for x in labels] +
            (["GPU util, default"] if any(s for _, _, s, _ in rows) else []) +
            (["stitch / default reserved"] if "stitch" in labels and "default" in labels
             else []) +
            [f"{x} / best model" for x in ours if torch] +
            [f"holes at peak in use, {x} MiB" for x in ours] +
            [f"backend calls / step {x} (alias)" for x in ours] +
            [f"simulated backend ms / step {x}" for x in ours])
    say("| trace | " + " | ".join(cols) + " |")
    say("|---|" + "---:|" * len(cols))
    for name, events, side, fig in rows:
        steps = side.get("steps")
        cells = [fmt(events, ","), fmt(steps, "d")]
        cells += [fmt(fig[x]["util"], ".3f") for x in labels]
        if "GPU util, default" in cols:
            t = side.get("torch") or {}
            cells.append(fmt(t["max_allocated"] / t["max_reserved"]
                             if t.get("max_reserved") and t.get("max_allocated") else None,
                             ".3f"))
        if "stitch / default reserved" in cols:
            d = fig["default"]["reserved_mib"]
            cells.append(fmt(fig["stitch"]["reserved_mib"] / d if d else None, ".3f"))
        if torch:
            best = min(fig[x]["reserved_mib"] for x in torch)
            cells += [fmt(fig[x]["reserved_mib"] / best if best else None, ".3f") for x in ours]
        cells += [fmt(fig[x]["holes_mib"], ",.1f") for x in ours]
        for x in ours:
            c, a = fig[x]["backend_calls"], fig[x]["alias_calls"]
            cells.append(per_step(c, steps, lambda n: f"{(c + a) / n:.2f} ({a / n:.2f})",
                                  f"{c + a} ({a}) in all" if c is not None else ""))
        for x in ours:
            us = fig[x]["sim_backend_us"]
            cells.append(per_step(us, steps, lambda n: f"{us / 1000.0 / n:.3f}",
                                  f"{us / 1000.0:.1f} in all" if us is not None else ""))
        say(f"| {name} | " + " | ".join(cells) + " |")
    say()
    say("Per trace and policy (MiB): peak reserved, peak in use (blocks), peak requested, "
        "utilisation against each, holes at peak in use (free large-path chunks between live "
        "blocks), backend calls (alias map/unmap calls apart), stitched ranges made, requests "
        "served at their planned offsets, input "
        "errors counted (--on-error count).")
    say()
    cols = ["trace", "policy", "reserved", "in use", "requested", "util", "requested / reserved",
            "holes", "backend calls", "alias calls", "stitches", "plan hits", "input errors"]
    say("| " + " | ".join(cols) + " |")
    say("|---|---|" + "---:|" * (len(cols) - 2))
    for name, _, _, fig in rows:
        for x in labels:
            f = fig[x]
            say(f"| {name} | {x} | {f['reserved_mib']:,.1f} | {f['in_use_mib']:,.1f} | "
                f"{f['requested_mib']:,.1f} | {fmt(f['util'], '.3f')} | "
                f"{fmt(f['util_requested'], '.3f')} | {fmt(f['holes_mib'], ',.1f')} | "
                f"{fmt(f['backend_calls'], 'd')} | {f['alias_calls']} | "
                f"{fmt(f['stitches'], 'd')} | {fmt(f.get('plan_hits'), 'd')} | "
                f"{f['input_errors']} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("traces", nargs="*", help="traces (.csv, .csv.gz) or folders of them "
                    "(default bench/replay/traces)")
    ap.add_argument("--replay", default=None, help="the adaptalloc-replay program")
    ap.add_argument("--no-torch", action="store_true",
                    help="leave out the replay's models of PyTorch's allocator")
    ap.add_argument("--event-delay-us", type=int, default=0, metavar="N",
                    help="stream events complete N us of trace time after they are "
                         "recorded (a GPU behind the host); default 0: at once")
    ap.add_argument("--json", default=None, metavar="OUT", help="also write the figures here")
    args = ap.parse_args(argv)
    prog = find_replay(args.replay)
    if not prog or not os.access(prog, os.X_OK):
        print("util_table: no adaptalloc-replay (build it: cmake -S . -B build && cmake --build "
              "build --target adaptalloc-replay; or --replay PATH)", file=sys.stderr)
        return 1
    traces = find_traces(args.traces or [os.path.join(ROOT, "bench", "replay", "traces")])
    if not traces:
        print("util_table: no traces (.csv, .csv.gz) in " +
              ", ".join(args.traces or ["bench/replay/traces"]), file=sys.stderr)
        return 1
    outfile = _outfile()
    if args.json:
        try:  # never an input, its folder writable: before any work
            outfile.check_output(args.json, [p for _, p in traces], "--json")
        except outfile.FileError as e:
            print(f"util_table: {e}", file=sys.stderr)
            return 2
    rows, failed = [], 0
    with tempfile.TemporaryDirectory(prefix="aa-util-") as tmp:
        policies = [("default", "default")]
        for label in ADAPTALLOC[1:]:
            path = os.path.join(tmp, label.replace("+", "-") + ".json")
            variant_policy(path, VARIANT_KEYS[label])
            policies.append((label, path))
        if not args.no_torch:
            policies += [(x, x) for x in TORCH]
        for name, path in traces:
            try:
                runs, events = replay(prog, path, policies, tmp, args.event_delay_us)
            except (OSError, ValueError, RuntimeError) as e:
                print(f"util_table: {path}: {e}", file=sys.stderr)
                failed += 1
                continue
            rows.append((name, events, sidecar(path),
                         {label: figures(run) for label, run in runs.items()}))
    labels = [label for label, _ in policies]
    if rows:
        print_table(rows, labels)
    if args.json:
        try:
            outfile.write_all([(args.json, json.dumps(
                [{"trace": n, "events": e, "gpu": s, "replay": fig} for n, e, s, fig in rows],
                indent=1) + "\n")])
        except (outfile.FileError, OSError) as e:
            print(f"util_table: {e}", file=sys.stderr)
            return 1
    return 1 if failed or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
