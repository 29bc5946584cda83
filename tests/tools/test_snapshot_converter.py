#!/usr/bin/env python3
"""tools/torch_snapshot_to_trace.py against hostile snapshot pickles.

Every malformed input must end with exit status 1 and exactly one line on
stderr (no traceback), whatever the pickle does: refer to a class, build an
object, underflow the stack, announce a huge length, use an unhashable key,
or hold entries of the wrong types. A good snapshot converts. Runs with the
standard library only (no torch, no pytest): `python3 THIS_FILE`.
"""
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "..", "tools", "torch_snapshot_to_trace.py")


def good_snapshot():
    return {"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 0x7f0000000000, "size": 4096,
         "stream": 0, "time_us": 1000},
        {"action": "free_requested", "addr": 0x7f0000000000, "size": 4096,
         "stream": 0, "time_us": 2000},
        {"action": "free_completed", "addr": 0x7f0000000000, "size": 4096,
         "stream": 0, "time_us": 2100},
        {"action": "oom", "size": 1 << 40, "stream": 0, "time_us": 3000},
    ]]}


def entry(**kw):
    e = {"action": "alloc", "addr": 4096, "size": 512, "stream": 0}
    e.update(kw)
    return pickle.dumps({"device_traces": [[e]]}, protocol=4)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


# name -> raw bytes of a hostile or broken "snapshot"
CASES = {
    "global os.system": pickle.dumps(Evil(), protocol=4),
    "global in protocol 0": b"cos\nsystem\n(S'echo pwned'\ntR.",
    "BUILD on a list": b"\x80\x04]\x94}\x94b.",
    "REDUCE without a callable": b"\x80\x04]\x94)R.",
    "stack underflow (APPEND on nothing)": b"\x80\x04a.",
    "SETITEM on nothing": b"\x80\x04s.",
    "truncated": pickle.dumps(good_snapshot(), protocol=4)[:40],
    "no STOP": pickle.dumps(good_snapshot(), protocol=4)[:-1],
    "BINBYTES8 of 2^62 bytes": b"\x80\x04\x8e" + struct.pack("<Q", 1 << 62) + b".",
    "BINUNICODE8 of 2^40 bytes": b"\x80\x04\x8d" + struct.pack("<Q", 1 << 40) + b".",
    "LONG4 of 2^31 - 1 bytes": b"\x80\x04\x8b" + struct.pack("<i", 2**31 - 1) + b".",
    "unhashable dict key": b"\x80\x04}\x94]\x94K\x01s.",
    "memo GET of nothing": b"\x80\x04h\x05.",
    "not a pickle": b"this is not a pickle at all\n",
    "empty file": b"",
    "top level is a list": pickle.dumps([1, 2, 3], protocol=4),
    "device_traces is a dict": pickle.dumps({"device_traces": {"a": 1}}),
    "a trace is a string": pickle.dumps({"device_traces": ["abc"]}),
    "an entry is a number": pickle.dumps({"device_traces": [[5]]}),
    "action is a list": entry(action=["alloc"]),
    "addr is a string": entry(addr="0x1000"),
    "addr is True": entry(addr=True),
    "size is negative": entry(size=-1),
    "size is 2^70": entry(size=1 << 70),
    "stream is a float": entry(stream=1.5),
    "10000 nested lists": b"\x80\x04" + b"]" * 10000 + b"a" * 9999 + b".",
}


def run(path, *extra):
    return subprocess.run([sys.executable, TOOL, path, "-o", os.devnull] +
                          list(extra), capture_output=True, text=True,
                          timeout=120)


class SnapshotConverter(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="aa-snapshot-")

    def tearDown(self):
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def assert_one_line_refusal(self, name, proc):
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(proc.returncode, 1,
                         "%s: exit %d, stderr: %s" % (name, proc.returncode,
                                                      proc.stderr))
        self.assertNotIn("Traceback", proc.stderr, name)
        self.assertEqual(len(lines), 1, "%s: %r" % (name, proc.stderr))
        self.assertTrue(lines[0].startswith("torch_snapshot_to_trace: "),
                        "%s: %r" % (name, lines[0]))

    def test_good_snapshot_converts(self):
        path = self.write("good.pickle", pickle.dumps(good_snapshot()))
        out = os.path.join(self.dir, "out.csv")
        proc = subprocess.run([sys.executable, TOOL, path, "-o", out],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(out) as f:
            rows = f.read().splitlines()
        self.assertEqual(rows[0], "Thread,Time,Action,Pointer,Size,Stream")
        self.assertEqual(rows[1], "0,0.001000,allocate,0x7f0000000000,4096,0x0")
        self.assertEqual(rows[2],
                         "0,0.002000,deallocate,0x7f0000000000,4096,0x0")
        self.assertEqual(rows[3].split(",")[2], "allocate failure")
        self.assertEqual(len(rows), 4)

    def test_hostile_pickles_give_one_line(self):
        for i, (name, data) in enumerate(sorted(CASES.items())):
            with self.subTest(name=name):
                path = self.write("case%d.pickle" % i, data)
                proc = run(path)
                self.assert_one_line_refusal(name, proc)
                self.assertNotIn("pwned", proc.stdout + proc.stderr)

    def test_size_bound(self):
        path = self.write("big.pickle", pickle.dumps(good_snapshot()))
        proc = run(path, "--max-bytes", "100")
        self.assert_one_line_refusal("over --max-bytes", proc)
        self.assertIn("--max-bytes", proc.stderr)

    def test_missing_file_and_directory(self):
        self.assert_one_line_refusal(
            "missing", run(os.path.join(self.dir, "nope.pickle")))
        self.assert_one_line_refusal("a directory", run(self.dir))

    def test_output_is_input_refused(self):
        data = pickle.dumps(good_snapshot())
        path = self.write("in.pickle", data)
        os.symlink("in.pickle", os.path.join(self.dir, "link.pickle"))
        os.link(path, os.path.join(self.dir, "hard.pickle"))
        for out in (path, os.path.join(self.dir, ".", "in.pickle"),
                    os.path.join(self.dir, "link.pickle"),
                    os.path.join(self.dir, "hard.pickle")):
            with self.subTest(out=out):
                proc = subprocess.run([sys.executable, TOOL, path, "-o", out],
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn("the same file", proc.stderr)
                with open(path, "rb") as f:
                    self.assertEqual(f.read(), data)

    def test_output_replaced_whole_or_not_at_all(self):
        path = self.write("in.pickle", pickle.dumps(good_snapshot()))
        out = self.write("old.csv", b"old contents\n")
        os.chmod(out, 0o640)
        bad = self.write("bad.pickle", b"not a pickle")
        proc = subprocess.run([sys.executable, TOOL, bad, "-o", out],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 1)
        with open(out, "rb") as f:
            self.assertEqual(f.read(), b"old contents\n")
        proc = subprocess.run([sys.executable, TOOL, path, "-o", out],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(out) as f:
            self.assertTrue(f.read().startswith("Thread,Time,Action"))
        self.assertEqual(os.stat(out).st_mode & 0o777, 0o640)
        self.assertEqual(sorted(os.listdir(self.dir)),
                         ["bad.pickle", "in.pickle", "old.csv"])

    def test_usage_errors(self):
        path = self.write("in.pickle", pickle.dumps(good_snapshot()))
        for extra in (["--max-bytes", "-1"], ["--max-bytes", "0"],
                      ["--device", "-3"],
                      ["-o", os.path.join(self.dir, "missing-dir", "x.csv")]):
            with self.subTest(extra=extra):
                proc = subprocess.run([sys.executable, TOOL, path] + extra,
                                      capture_output=True, text=True, timeout=60)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertNotIn("Traceback", proc.stderr)

    def test_device_not_present_names_the_devices(self):
        path = self.write("in.pickle", pickle.dumps(good_snapshot()))
        proc = run(path, "--device", "99")
        self.assert_one_line_refusal("--device 99", proc)
        self.assertIn("devices present (with trace entries): 0", proc.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
