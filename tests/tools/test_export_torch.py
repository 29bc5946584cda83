#!/usr/bin/env python3
"""test_tools_export_torch: `adaptalloc-replay export --format torch-snapshot`.

Standard library only (no torch): writes a CSV trace, exports it, and checks
the pickle the way PyTorch's memory_viz reads it: only the opcodes its
JavaScript unpickler knows, the snapshot's keys and entry fields, every alloc
ended by one free_requested and one free_completed, every block inside a
segment of its own, the blocks live at the end listed in "segments", and
tools/torch_snapshot_to_trace.py turning the pickle back into the same trace.
Usage: test_export_torch.py PATH/TO/adaptalloc-replay
"""
import json
import os
import pickle
import pickletools
import random
import sqlite3
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CONVERTER = os.path.join(HERE, "..", "..", "tools", "torch_snapshot_to_trace.py")

# What MemoryViz.js's unpickle() reads (torch/utils/viz/MemoryViz.js).
JS_OPCODES = {
    "PROTO", "FRAME", "STOP", "MARK", "APPEND", "APPENDS", "LIST", "TUPLE",
    "NEWTRUE", "NEWFALSE", "NONE", "BINGET", "LONG_BINGET", "BININT",
    "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "LONG1", "MEMOIZE",
    "BINPUT", "LONG_BINPUT", "SETITEMS", "SETITEM", "DICT",
    "SHORT_BINUNICODE", "BINUNICODE", "EMPTY_TUPLE", "TUPLE1", "TUPLE2",
    "TUPLE3", "BINFLOAT",
}

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def make_trace(path, n_events=6000, seed=7):
    """A trace with a few thousand events, two streams, one big block, one
    failed allocation and blocks left live at the end. Returns the rows."""
    rnd = random.Random(seed)
    live = {}
    rows = []
    next_addr = 0x7F0000000000
    t = 0
    while len(rows) < n_events:
        t += 1
        if live and (rnd.random() < 0.45 or len(live) > 300):
            addr = rnd.choice(sorted(live))
            size, stream = live.pop(addr)
            rows.append(("deallocate", addr, size, stream, t))
        else:
            size = rnd.choice([512, 4096, 65536, 3 << 20, 5000000000])
            stream = rnd.choice([0, 0x55AA00])
            addr = next_addr
            next_addr += max(size, 512)
            live[addr] = (size, stream)
            rows.append(("allocate", addr, size, stream, t))
    rows.append(("allocate failure", 0, 1 << 40, 0, t + 1))
    with open(path, "w") as f:
        f.write("Thread,Time,Action,Pointer,Size,Stream\n")
        for a, p, s, st, tt in rows:
            f.write("1,%dus,%s,0x%x,%d,0x%x\n" % (tt, a, p, s, st))
    return rows, live


def add_stream_uses(db):
    """Gives every allocation of the database's one run a stream use ('u'
    on stream 7) right after it, as the core's trace writes one for each
    aa_record_stream: sequence numbers doubled, the uses at the odd ones,
    in a trace batch of their own."""
    con = sqlite3.connect(db)
    run = con.execute("SELECT max(id) FROM runs").fetchone()[0]
    con.execute("UPDATE trace_events SET seq = seq * 2 WHERE run_id = ?", (run,))
    allocs = con.execute("SELECT time_ns, ptr, thread, seq FROM trace_events"
                         " WHERE run_id = ? AND op = 'a' ORDER BY seq", (run,)).fetchall()
    first = con.execute("SELECT max(id) FROM trace_events").fetchone()[0] + 1
    for k, (t, ptr, thread, seq) in enumerate(allocs):
        con.execute("INSERT INTO trace_events(id, run_id, time_ns, op, ptr, size, stream,"
                    " thread, seq) VALUES (?, ?, ?, 'u', ?, 0, 7, ?, ?)",
                    (first + k, run, t, ptr, thread, seq + 1))
    con.execute("INSERT INTO trace_batches(run_id, ts_ms, first_id, last_id, events)"
                " VALUES (?, 0, ?, ?, ?)", (run, first, first + len(allocs) - 1, len(allocs)))
    con.commit()
    con.close()
    check(len(allocs) > 0, "stream uses added")


def add_frames(db):
    """Gives every allocation of 64 KiB of the database's one run a call
    stack, as the runtime stores them (aa_rt_trace_frames: a row of
    trace_frames and a 'c' event after the allocation). Returns
    {address of the allocation's nth occurrence: stack text} by event order
    and the run's time range."""
    con = sqlite3.connect(db)
    run = con.execute("SELECT max(id) FROM runs").fetchone()[0]
    con.execute("UPDATE trace_events SET seq = seq * 2 WHERE run_id = ?", (run,))
    rows = con.execute("SELECT seq, time_ns, ptr FROM trace_events WHERE run_id = ? AND op = 'a'"
                       " AND size = 65536 ORDER BY seq", (run,)).fetchall()
    stacks = ["train.py:%d:step\nmodel.py:7:forward\n" % (10 + k % 3) for k in range(3)]
    for k, text in enumerate(stacks):
        con.execute("INSERT INTO trace_frames(run_id, id, frames) VALUES (?, ?, ?)",
                    (run, k + 1, text))
    first = None
    for i, (seq, t, ptr) in enumerate(rows):
        cur = con.execute("INSERT INTO trace_events(run_id, time_ns, op, ptr, size, stream, thread,"
                          " seq, frame) VALUES (?, ?, 'c', ?, 0, 0, 1, ?, ?)",
                          (run, t, ptr, seq + 1, i % 3 + 1))
        first = first or cur.lastrowid
    last = con.execute("SELECT max(id) FROM trace_events").fetchone()[0]
    con.execute("INSERT INTO trace_batches(run_id, ts_ms, first_id, last_id, events)"
                " VALUES (?, 0, ?, ?, ?)", (run, first, last, last - first + 1))
    lo, hi = con.execute("SELECT min(time_ns), max(time_ns) FROM trace_events WHERE run_id = ?",
                         (run,)).fetchone()
    # a clock origin, as a live run has: started at Unix 1796223937 s
    con.execute("UPDATE runs SET started_ms = 1796223937000, mono_origin_ns = ? WHERE id = ?",
                (lo, run))
    con.commit()
    con.close()
    return len(rows), stacks, lo, hi


def bounded(tool, d, csv, rows):
    """--max-entries, --last-seconds, --since/--until and call stacks."""
    db = os.path.join(d, "b.db")
    r = subprocess.run([tool, "import", csv, "-o", db], capture_output=True, text=True)
    check(r.returncode == 0, "import (%s)" % r.stderr)
    n_with, stacks, lo, hi = add_frames(db)
    out = os.path.join(d, "b.pickle")

    def export(*extra):
        if os.path.exists(out):
            os.remove(out)
        r = subprocess.run([tool, "export", "--format", "torch-snapshot", "--db", db, "-o", out,
                            "--json"] + list(extra), capture_output=True, text=True)
        check(r.returncode == 0, "export %s (%s)" % (" ".join(extra), r.stderr))
        return (pickle.load(open(out, "rb")), json.loads(r.stdout)) if r.returncode == 0 else ({}, {})

    whole, js = export()
    entries = whole["device_traces"][0]
    # time_us on the epoch clock, as PyTorch's snapshots (the run's origin:
    # started_ms at mono_origin_ns = lo); ns_of gives the trace's clock back
    epoch_us = 1796223937000 * 1000
    ns_of = lambda us: (us - epoch_us) * 1000 + lo
    check(entries and all(e["time_us"] >= epoch_us for e in entries) and
          ns_of(entries[-1]["time_us"]) // 1000 == hi // 1000,
          "time_us: microseconds since the Unix epoch (%d .. %d)"
          % (entries[0]["time_us"], entries[-1]["time_us"]))
    with_frames = [e for e in entries if e["action"] == "alloc" and e["frames"]]
    check(len(with_frames) == n_with and js["with_frames"] == n_with,
          "every 64 KiB allocation carries its stack (%d of %d)" % (len(with_frames), n_with))
    f0 = with_frames[0]["frames"]
    check(f0 == [{"filename": "train.py", "line": 10, "name": "step"},
                 {"filename": "model.py", "line": 7, "name": "forward"}],
          "frames as memory_viz reads them: %s" % f0)
    live_framed = [s for s in whole["segments"] if s["blocks"][0]["frames"]]
    check(all(s["total_size"] == 65536 for s in live_framed) and live_framed,
          "live blocks keep their stacks in segments (%d)" % len(live_framed))

    # the newest 1000 entries: whole events, the last ones, frames kept
    part, js = export("--max-entries", "1000")
    pe = part["device_traces"][0]
    check(len(pe) <= 1000 and len(pe) > 990, "--max-entries 1000 keeps about 1000 (%d)" % len(pe))
    strip = lambda es: [(e["action"], e["addr"], e["size"], e["time_us"]) for e in es]
    check(strip(pe) == strip(entries[len(entries) - len(pe):]), "the newest entries, in order")
    check(js["left_out"] == len(entries) - len(pe), "left_out counts them (%s)" % js["left_out"])
    check(part["segments"] == whole["segments"], "the live blocks at the end are the same")
    check(sum(1 for e in pe if e["action"] == "alloc" and e["frames"]) > 0, "stacks in the newest")
    # memory_viz's invariants hold: a free of a block allocated before the
    # window keeps its size, each alloc in its segment
    segs = {}
    for e in pe:
        if e["action"] == "segment_alloc":
            segs[e["addr"]] = e["size"]
        elif e["action"] == "alloc":
            check(segs.get(e["addr"]) == e["size"], "alloc inside its segment")
    # the last 2 ms of the trace (the CSV's times are microseconds 1..N)
    span_us = (hi - lo) // 1000
    last, js = export("--last-seconds", "0.002")
    le = last["device_traces"][0]
    check(le and all(ns_of(e["time_us"]) >= hi - 2000000 for e in le),
          "--last-seconds: only the end (%d entries)" % len(le))
    # a wall-clock window: 1 ms to 3 ms after the run's start
    since = "%.3f" % (1796223937 + 0.001)
    until = "2026-12-02T16:05:37.003+01:00"  # 1796223937.003
    win, js = export("--since", since, "--until", until)
    we = win["device_traces"][0]
    check(we and all(lo + 1000000 <= ns_of(e["time_us"]) <= lo + 3000000 for e in we),
          "--since/--until: the window only (%d entries, span %d us)" % (len(we), span_us))
    live_at_until = {}
    for a, p_, s_, st_, t_ in rows:
        if t_ * 1000 > lo + 3000000:
            break
        if a == "allocate":
            live_at_until[p_] = s_
        elif a == "deallocate":
            live_at_until.pop(p_, None)
    check({s["address"] for s in win["segments"]} == set(live_at_until),
          "segments: the blocks live at --until (%d, %d)" % (len(win["segments"]), len(live_at_until)))
    # refusals
    r = subprocess.run([tool, "export", "--format", "torch-snapshot", csv, "-o", out, "--since", "1"],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "wall" in r.stderr, "--since on a CSV refused (%s)" % r.stderr)
    r = subprocess.run([tool, "export", "--db", db, "-o", out, "--max-entries", "5"],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "torch-snapshot" in r.stderr, "--max-entries needs torch-snapshot")
    r = subprocess.run([tool, "export", "--format", "torch-snapshot", "--db", db, "-o", out,
                        "--since", "2026-13-01T00:00"], capture_output=True, text=True)
    check(r.returncode == 2 and "no such date" in r.stderr, "a bad time named (%s)" % r.stderr)
    # who holds the memory: the CLI's answer from the same store agrees with
    # the export's live blocks and names their stacks
    cli = os.path.join(HERE, "..", "..", "python", "adaptalloc", "cli.py")
    r = subprocess.run([sys.executable, cli, "holders", "--db", db, "--json", "--top", "100000"],
                       capture_output=True, text=True)
    check(r.returncode == 0, "adaptalloc holders (%s)" % r.stderr)
    h = json.loads(r.stdout) if r.returncode == 0 else {}
    check(h.get("live_blocks") == len(whole["segments"]), "holders: the live blocks")
    framed = [b for b in h.get("largest", []) if b["frames"]]
    check(len(framed) == len(live_framed) and framed[0]["frames"][1] == "model.py:7:forward",
          "holders: the live blocks' stacks (%d, %d)" % (len(framed), len(live_framed)))
    check(sum(s["bytes"] for s in h.get("by_stack", [])) == 65536 * len(live_framed),
          "holders: bytes by stack")
    os.remove(db)
    if os.path.exists(out):
        os.remove(out)


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        csv = os.path.join(d, "t.csv")
        out = os.path.join(d, "snap.pickle")
        rows, live = make_trace(csv)
        bounded(tool, d, csv, rows)
        r = subprocess.run([tool, "export", "--format", "torch-snapshot", csv,
                            "-o", out, "--json"], capture_output=True, text=True)
        check(r.returncode == 0, "export exits 0 (%d: %s)" % (r.returncode, r.stderr))
        data = open(out, "rb").read()
        ops = {op.name for op, _, _ in pickletools.genops(data)}
        check(ops <= JS_OPCODES, "only memory_viz's opcodes: extra %s" % (ops - JS_OPCODES))
        snap = pickle.loads(data)
        check(set(snap) >= {"segments", "device_traces"}, "snapshot keys %s" % list(snap))
        traces = snap["device_traces"]
        check(len(traces) == 1, "one device")
        entries = traces[0]
        for e in entries:
            if set(e) < {"action", "addr", "size", "stream", "time_us", "frames"}:
                check(False, "entry fields %s" % e)
                break
        allocs = [e for e in entries if e["action"] == "alloc"]
        n_alloc = sum(1 for r_ in rows if r_[0] == "allocate")
        n_free = sum(1 for r_ in rows if r_[0] == "deallocate")
        check(len(allocs) == n_alloc, "one alloc per allocate (%d, %d)" % (len(allocs), n_alloc))
        for act in ("free_requested", "free_completed", "segment_free"):
            k = sum(1 for e in entries if e["action"] == act)
            check(k == n_free, "%s per deallocate (%d, %d)" % (act, k, n_free))
        ooms = [e for e in entries if e["action"] == "oom"]
        check(len(ooms) == 1 and ooms[0]["size"] == 1 << 40, "the failed allocation is an oom")
        # Replayed in order: every alloc lies in a live segment, every
        # free_completed ends a live alloc of the same size.
        segs, blocks = {}, {}
        for e in entries:
            a = e["action"]
            if a == "segment_alloc":
                check(e["addr"] not in segs, "segment twice at %x" % e["addr"])
                segs[e["addr"]] = e["size"]
            elif a == "alloc":
                check(segs.get(e["addr"]) == e["size"], "alloc inside its segment")
                blocks[e["addr"]] = e["size"]
            elif a == "free_completed":
                check(blocks.pop(e["addr"], None) == e["size"], "free of a live block")
            elif a == "segment_free":
                check(segs.pop(e["addr"], None) == e["size"], "segment_free of a live one")
        check(blocks == {a: s for a, (s, _) in live.items()}, "live at the end as the trace says")
        segments = snap["segments"]
        check(len(segments) == len(live), "segments: the live blocks (%d, %d)" % (len(segments), len(live)))
        for s in segments:
            b = s["blocks"]
            check(len(b) == 1 and b[0]["state"] == "active_allocated" and
                  b[0]["size"] == s["total_size"] == live[s["address"]][0],
                  "segment of one live block at %x" % s["address"])
        check([s["address"] for s in segments] == sorted(live), "segments by address")
        big = [e for e in allocs if e["size"] == 5000000000]
        check(len(big) > 0, "sizes above 32 bits survive")
        # Back to a trace with the project's converter: the same events.
        r = subprocess.run([sys.executable, CONVERTER, out], capture_output=True, text=True)
        check(r.returncode == 0, "converter reads the export (%s)" % r.stderr)
        back = [l.split(",") for l in r.stdout.strip().splitlines()[1:]]
        want = [(a, p, s) for a, p, s, _, _ in rows]
        got = [(l[2], int(l[3], 16), int(l[4])) for l in back]
        check(got == want, "round trip through torch_snapshot_to_trace.py")
        # A stored trace gives the same pickle as its CSV.
        db = os.path.join(d, "t.db")
        r = subprocess.run([tool, "import", csv, "-o", db], capture_output=True, text=True)
        check(r.returncode == 0, "import (%s)" % r.stderr)
        out_db = os.path.join(d, "db.pickle")
        r = subprocess.run([tool, "export", "--format", "torch-snapshot", "--db", db,
                            "-o", out_db], capture_output=True, text=True)
        check(r.returncode == 0, "export --db (%s)" % r.stderr)
        from_db = pickle.load(open(out_db, "rb"))
        strip = lambda es: [(e["action"], e["addr"], e["size"], e["stream"]) for e in es]
        check(strip(from_db["device_traces"][0]) == strip(entries), "store trace exports as its CSV")
        check(from_db["segments"] == segments, "same segments from the store")
        # A run's stream uses (op 'u', record_stream) after every allocation:
        # the snapshot has no entry for them, the CSV export leaves them out,
        # and the replay takes them.
        def replay(extra=()):
            r = subprocess.run([tool, "run", "--db", db, "--event-delay-us", "1000", "--json"]
                               + list(extra), capture_output=True, text=True)
            check(r.returncode == 0, "run --db (%s)" % r.stderr)
            return json.loads(r.stdout)["result"] if r.returncode == 0 else {}
        before = replay()
        add_stream_uses(db)
        os.remove(out_db)
        r = subprocess.run([tool, "export", "--format", "torch-snapshot", "--db", db,
                            "-o", out_db], capture_output=True, text=True)
        check(r.returncode == 0, "export --db with stream uses (%s)" % r.stderr)
        with_uses = pickle.load(open(out_db, "rb"))
        check(strip(with_uses["device_traces"][0]) == strip(entries), "stream uses add no entry")
        out_csv = os.path.join(d, "back.csv")
        r = subprocess.run([tool, "export", "--db", db, "-o", out_csv], capture_output=True, text=True)
        check(r.returncode == 0, "export --db to CSV (%s)" % r.stderr)
        csv_rows = open(out_csv).read().splitlines()
        check(len(csv_rows) == 1 + len(rows), "CSV export: one line per alloc/free/failure, none "
              "for a use (%d lines, %d events)" % (len(csv_rows), len(rows)))
        after = replay()
        check(after.get("event_records", 0) > before.get("event_records", 0),
              "the replay records the uses' events at the frees (%s, %s)"
              % (before.get("event_records"), after.get("event_records")))
        os.remove(out_csv)
        os.remove(db)
        os.remove(out_db)
        # Bad input: exit 1, nothing written, an existing output kept.
        bad = os.path.join(d, "bad.csv")
        with open(bad, "w") as f:
            f.write("Thread,Time,Action,Pointer,Size,Stream\n1,1us,allocate,0x10,nope,0\n")
        with open(out, "wb") as f:
            f.write(b"keep")
        r = subprocess.run([tool, "export", "--format", "torch-snapshot", bad, "-o", out],
                           capture_output=True, text=True)
        check(r.returncode == 1 and "line 2" in r.stderr, "bad input exits 1 naming the line (%s)" % r.stderr)
        check(open(out, "rb").read() == b"keep", "a failed export leaves the old file")
        check(sorted(os.listdir(d)) == ["bad.csv", "snap.pickle", "t.csv"], "no temp file left: %s" % os.listdir(d))
        r = subprocess.run([tool, "run", "--format", "torch-snapshot", csv], capture_output=True, text=True)
        check(r.returncode == 2 and "--format goes with export" in r.stderr, "--format only with export")
        r = subprocess.run([tool, "export", "--format", "json", csv, "-o", out], capture_output=True, text=True)
        check(r.returncode == 2 and "'json' is not csv or torch-snapshot" in r.stderr, "unknown format named")
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
