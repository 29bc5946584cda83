#!/usr/bin/env python3
"""Convert a PyTorch CUDA memory snapshot into an adaptalloc-replay CSV trace.

The snapshot is the pickle written by torch.cuda.memory._dump_snapshot() (or
a pickle of torch.cuda.memory._snapshot()) after recording history with
torch.cuda.memory._record_memory_history(). It holds only plain Python data
(dicts, lists, ints, strings), so this script needs no torch: it runs with a
bare python3 and unpickles with every class lookup refused (a snapshot from
an untrusted source cannot run code here).

Output: the RMM logging_resource_adaptor CSV format that adaptalloc-replay
reads (header Thread,Time,Action,Pointer,Size,Stream; see docs/replay.md).

Mapping of device_traces entries (per device, in order):
  alloc                          -> allocate
  free_requested                 -> deallocate   (the program's free; default)
  free_completed                 -> deallocate   with --free-event completed,
                                    or when no free_requested came first
  free (older torch)             -> deallocate
  oom                            -> allocate failure
  segment_*, snapshot, others    -> skipped (the allocator's own traffic)
A free of a block allocated before the trace window began cannot be replayed
and is dropped (counted on stderr) unless --keep-unmatched.

Untrusted input: the file is read whole up to --max-bytes (1 GiB by
default), its pickle opcodes are checked before anything is built (only the
opcodes of plain data are allowed: no globals, no object construction, no
out-of-band buffers; every counted length must fit in the file), and it is
then unpickled with every class lookup refused. Any malformed input gives
one line on stderr and exit 1, never a traceback. A pickle's memo lets a
small file name one list many times: the trace entries converted are bounded
by --max-entries (10,000,000 by default, about 500 MB of CSV; torch records
100,000 per device by default); a snapshot with more is refused (exit 1, one
line, nothing written).

Exit codes: 0 ok, 1 unreadable or malformed snapshot, 2 usage.
"""

import argparse
import io
import os
import pickle
import pickletools
import sys

MAX_BYTES = 1 << 30
MAX_ENTRIES = 10000000

# The opcodes of plain data: containers, numbers, strings, bytes, None and
# booleans, the memo, stack marks. Everything else (GLOBAL, STACK_GLOBAL,
# REDUCE, BUILD, INST, OBJ, NEWOBJ*, PERSID, EXT*, buffers) is refused.
_PLAIN_OPCODES = frozenset("""
    PROTO FRAME STOP MARK POP POP_MARK DUP
    NONE NEWTRUE NEWFALSE
    INT BININT BININT1 BININT2 LONG LONG1 LONG4 FLOAT BINFLOAT
    STRING BINSTRING SHORT_BINSTRING UNICODE SHORT_BINUNICODE BINUNICODE
    BINUNICODE8 BINBYTES SHORT_BINBYTES BINBYTES8
    EMPTY_DICT DICT SETITEM SETITEMS EMPTY_LIST LIST APPEND APPENDS
    EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_SET ADDITEMS FROZENSET
    PUT BINPUT LONG_BINPUT GET BINGET LONG_BINGET MEMOIZE
""".split())


class SnapshotError(Exception):
    """A snapshot that cannot be read; the message is one line."""


class _NoGlobals(pickle.Unpickler):
    """Unpickler that refuses every class or function reference."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(
            "refusing to load %s.%s: a memory snapshot holds only plain data"
            % (module, name))


def _check_opcodes(data):
    """Walks the opcodes without building anything; raises SnapshotError."""
    strings = []  # the last two strings pushed (STACK_GLOBAL's operands)
    try:
        for op, arg, pos in pickletools.genops(io.BytesIO(data)):
            if isinstance(arg, str):
                strings = (strings + [arg])[-2:]
            if op.name in ("GLOBAL", "STACK_GLOBAL", "INST"):
                if op.name == "STACK_GLOBAL" and len(strings) == 2:
                    what = "%s.%s" % (strings[0], strings[1])
                else:
                    what = str(arg).replace(" ", ".", 1)
                raise SnapshotError(
                    "refusing to load %s: a memory snapshot holds only plain "
                    "data" % what)
            if op.name not in _PLAIN_OPCODES:
                raise SnapshotError(
                    "pickle opcode %s at byte %d is not plain data (a memory "
                    "snapshot holds only dicts, lists, numbers and strings)"
                    % (op.name, pos if pos is not None else -1))
    except SnapshotError:
        raise
    except Exception as exc:  # genops: ValueError and friends on bad input
        raise SnapshotError("not a valid pickle: %s" % _one_line(exc))


def _one_line(exc):
    text = str(exc).splitlines()[0] if str(exc) else ""
    if isinstance(exc, ValueError) and text:
        return text  # our own messages, already plain
    return "%s%s" % (type(exc).__name__, (": " + text) if text else "")


def load_snapshot(path, max_bytes=MAX_BYTES):
    """Reads and unpickles a snapshot; raises SnapshotError or OSError."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_size > max_bytes:
            raise SnapshotError("the file is %d bytes, over --max-bytes %d"
                                % (st.st_size, max_bytes))
        data = outfile._read_bounded(f, max_bytes)  # in chunks: no reserve
    if len(data) > max_bytes:
        raise SnapshotError("the file is over --max-bytes %d" % max_bytes)
    if not data:
        raise SnapshotError("empty file")
    _check_opcodes(data)
    try:
        return _NoGlobals(io.BytesIO(data)).load()
    except Exception as exc:  # malformed stacks, unhashable keys, ...
        raise SnapshotError("malformed pickle: %s" % _one_line(exc))


def _time_field(entry, index):
    t = entry.get("time_us")
    if isinstance(t, int) and t >= 0:
        return "%d.%06d" % (t // 1000000, t % 1000000)
    return "%dus" % index  # no clock in this torch version: keep the order


def convert(snap, out, device="all", free_event="requested",
            keep_unmatched=False, max_entries=MAX_ENTRIES):
    """Writes the CSV to `out`; returns a dict of counts. ValueError for a
    snapshot with more than max_entries trace entries (all devices)."""
    if not isinstance(snap, dict) or "device_traces" not in snap:
        raise ValueError("no device_traces in the snapshot: record it after "
                         "torch.cuda.memory._record_memory_history()")
    traces = snap["device_traces"]
    if not isinstance(traces, list):
        raise ValueError("device_traces is not a list")
    if device != "all" and not 0 <= device < len(traces):
        present = [i for i, t in enumerate(traces) if isinstance(t, list) and t]
        raise ValueError("--device %d: the snapshot has no such device; devices "
                         "present (with trace entries): %s (of %d traced)" %
                         (device, ", ".join(str(i) for i in present) or "none",
                          len(traces)))
    counts = {"allocate": 0, "deallocate": 0, "allocate failure": 0,
              "skipped": 0, "unmatched_frees": 0, "devices": 0}
    # counted before any is converted: a pickle can name one list many times
    seen = sum(len(t) for d, t in enumerate(traces)
               if isinstance(t, list) and (device == "all" or d == device))
    if seen > max_entries:
        raise ValueError("%d trace entries, over --max-entries %d (a pickle can name "
                         "one list many times): refused" % (seen, max_entries))
    out.write("Thread,Time,Action,Pointer,Size,Stream\n")
    for dev, trace in enumerate(traces):
        if device != "all" and dev != device:
            continue
        if not isinstance(trace, list):
            raise ValueError("device_traces[%d] is not a list" % dev)
        if trace:
            counts["devices"] += 1
        live = {}        # addr -> size of blocks allocated in the window
        requested = set()  # addrs whose free_requested was written
        for i, e in enumerate(trace):
            if not isinstance(e, dict) or "action" not in e:
                raise ValueError("device_traces[%d][%d] is not an entry" %
                                 (dev, i))
            action = e["action"]
            if not isinstance(action, str):
                raise ValueError("device_traces[%d][%d]: action is not a "
                                 "string" % (dev, i))
            addr = e.get("addr", 0)
            size = e.get("size", 0)
            stream = e.get("stream", 0)
            if not all(isinstance(v, int) and not isinstance(v, bool) and
                       0 <= v < (1 << 64) for v in (addr, size, stream)):
                raise ValueError("device_traces[%d][%d]: addr, size and "
                                 "stream must be integers from 0 to 2^64 - 1"
                                 % (dev, i))
            kind = None
            if action == "alloc":
                kind = "allocate"
                live[addr] = size
                requested.discard(addr)
            elif action in ("free_requested", "free_completed", "free"):
                explicit = (action == "free" or
                            (action == "free_requested") ==
                            (free_event == "requested"))
                late = (action == "free_completed" and
                        free_event == "requested" and
                        addr in live and addr not in requested)
                if not (explicit or late):
                    counts["skipped"] += 1
                    continue
                if addr not in live:
                    if not keep_unmatched:
                        counts["unmatched_frees"] += 1
                        continue
                else:
                    alloc_size = live.pop(addr)
                    if size == 0:
                        size = alloc_size
                if action == "free_requested":
                    requested.add(addr)
                kind = "deallocate"
            elif action == "oom":
                kind = "allocate failure"
                addr = 0
            else:
                counts["skipped"] += 1
                continue
            out.write("%d,%s,%s,0x%x,%d,0x%x\n" %
                      (dev, _time_field(e, i), kind, addr, size, stream))
            counts[kind] += 1
    return counts


def _outfile():
    """adaptalloc's one rule for outputs (python/adaptalloc/_outfile.py),
    loaded by its path: the tool needs no installed package."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python",
                        "adaptalloc", "_outfile.py")
    spec = importlib.util.spec_from_file_location("aa_outfile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


outfile = _outfile()


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Convert a torch.cuda.memory snapshot pickle into an "
                    "adaptalloc-replay CSV trace.")
    ap.add_argument("snapshot", help="pickle from torch.cuda.memory."
                    "_dump_snapshot()")
    ap.add_argument("-o", "--output", default="-",
                    help="CSV file to write (default: stdout)")
    ap.add_argument("--device", default="all",
                    help="device index to convert, or 'all' (default)")
    ap.add_argument("--free-event", choices=("requested", "completed"),
                    default="requested",
                    help="which event is the free: the program's "
                         "free_requested (default) or the allocator's "
                         "free_completed")
    ap.add_argument("--keep-unmatched", action="store_true",
                    help="keep frees of blocks allocated before the window")
    ap.add_argument("--max-bytes", type=int, default=MAX_BYTES,
                    help="refuse a snapshot file larger than this "
                         "(default 1 GiB)")
    ap.add_argument("--max-entries", type=int, default=MAX_ENTRIES,
                    help="refuse a snapshot with more trace entries than "
                         "this, all devices together (default 10,000,000)")
    args = ap.parse_args(argv)
    if args.max_bytes <= 0:
        ap.error("--max-bytes: %d is not a positive byte count" % args.max_bytes)
    if args.max_entries <= 0:
        ap.error("--max-entries: %d is not a positive count" % args.max_entries)
    device = args.device
    if device != "all":
        try:
            device = int(device)
        except ValueError:
            ap.error("--device: %r is not an index or 'all'" % args.device)
        if device < 0:
            ap.error("--device: %d is not an index (0, 1, ...) or 'all'" % device)
    try:
        outfile.check_output(args.output, [args.snapshot], "-o", dash_is_stdout=True)
    except outfile.FileError as exc:
        ap.error(str(exc))
    try:
        snap = load_snapshot(args.snapshot, args.max_bytes)
    except (OSError, SnapshotError) as exc:
        print("torch_snapshot_to_trace: %s: %s" % (args.snapshot, exc),
              file=sys.stderr)
        return 1
    buf = io.StringIO()
    try:
        counts = convert(snap, buf, device, args.free_event,
                         args.keep_unmatched, args.max_entries)
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        print("torch_snapshot_to_trace: %s: %s" % (args.snapshot,
                                                   _one_line(exc)),
              file=sys.stderr)
        return 1
    try:
        if args.output == "-":
            sys.stdout.write(buf.getvalue())
        else:
            outfile.write_all([(args.output, buf.getvalue())])
    except outfile.FileError as exc:
        print("torch_snapshot_to_trace: %s" % exc, file=sys.stderr)
        return 1
    except OSError as exc:
        print("torch_snapshot_to_trace: %s: %s" % (args.output, exc),
              file=sys.stderr)
        return 1
    print("torch_snapshot_to_trace: %d device(s): %d allocate, %d deallocate, "
          "%d allocate failure; %d entries skipped, %d unmatched frees dropped"
          % (counts["devices"], counts["allocate"], counts["deallocate"],
             counts["allocate failure"], counts["skipped"],
             counts["unmatched_frees"]), file=sys.stderr)
    if counts["devices"] > 1:
        print("torch_snapshot_to_trace: note: %d devices merged into one trace "
              "(one pool replays them all); --device N picks one" %
              counts["devices"], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
