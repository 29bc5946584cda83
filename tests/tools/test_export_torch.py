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


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        csv = os.path.join(d, "t.csv")
        out = os.path.join(d, "snap.pickle")
        rows, live = make_trace(csv)
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
