#!/usr/bin/env python3
"""The files the project's Python programs read and write, against hostile
input (issue #39, classes 1 to 3): standard library only, no torch, no
network (a stand-in Prometheus on 127.0.0.1).

    python3 tests/tools/test_tool_files.py [-k PATTERN]

- python/adaptalloc/_outfile.py, the one rule for outputs: never an input
  (./x, a symlink, a hard link), checked before any work, written through an
  exclusive temporary in the target's folder and renamed; bounded reads.
- tools/grafana_preview.py, tools/device/zoo_account.py and
  tools/memory_viz_image.py: an output that is an input refused (the input
  kept), and each bad input (not UTF-8, JSON of the wrong shape, /dev/zero,
  a missing or unwritable folder, /dev/full, nan as a time, a Prometheus
  answer that is HTML or has no data, a panel of absurd height, bad
  --limit-factors, a missing or empty --report) one line naming it, the
  documented exit code, no traceback and nothing written.
- tools/torch_snapshot_to_trace.py: reads in chunks (no reserve of the
  whole limit: a small snapshot under ulimit -v), and --max-entries bounds
  what a small pickle naming one list many times would write.
- adaptalloc.torch's OOM snapshot (_oom._write): a symlink planted at the
  old predictable temporary name is never followed.
"""
import http.server
import importlib.util
import json
import os
import pickle
import stat
import subprocess
import sys
import tempfile
import threading
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GRAFANA = os.path.join(ROOT, "tools", "grafana_preview.py")
ZOO = os.path.join(ROOT, "tools", "device", "zoo_account.py")
MEMVIZ = os.path.join(ROOT, "tools", "memory_viz_image.py")
CONVERTER = os.path.join(ROOT, "tools", "torch_snapshot_to_trace.py")
CDN = "https://cdn.jsdelivr.net/gh/pytorch/pytorch@main/torch/utils/viz/MemoryViz.js"
ROOT_USER = os.geteuid() == 0


def load_outfile():
    spec = importlib.util.spec_from_file_location(
        "aa_outfile_test", os.path.join(ROOT, "python", "adaptalloc", "_outfile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_oom():
    """adaptalloc.torch._oom without the compiled package: stand-in parent
    packages that only carry their folders."""
    for name, folder in (("adaptalloc", ""), ("adaptalloc.torch", "torch")):
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [os.path.join(ROOT, "python", "adaptalloc", folder)]
            sys.modules[name] = pkg
    import importlib
    return importlib.import_module("adaptalloc.torch._oom")


outfile = load_outfile()


def run(tool, *args, timeout=120):
    return subprocess.run([sys.executable, tool] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=timeout,
                          errors="replace")


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="aa-toolfiles-")

    def tearDown(self):
        for top, dirs, files in os.walk(self.dir, topdown=False):
            for d in dirs:
                p = os.path.join(top, d)
                os.chmod(p, 0o700) if not os.path.islink(p) else None
        subprocess.run(["rm", "-rf", self.dir])

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, data, mode="w"):
        p = self.path(name)
        with open(p, mode) as f:
            f.write(data)
        return p

    def listing(self):
        return sorted(os.listdir(self.dir))

    def refused(self, proc, code, prefix, *words):
        """Exit `code`, no traceback, the last stderr line a message naming
        every one of `words`."""
        err = proc.stderr.strip()
        self.assertEqual(proc.returncode, code, "exit %d: %s" % (proc.returncode, err))
        self.assertNotIn("Traceback", err)
        last = err.splitlines()[-1] if err else ""
        self.assertTrue(last.startswith(prefix), last)
        for w in words:
            self.assertIn(str(w), last)


# ------------------------------------------------------------- the shared rule

class OutfileRule(Base):
    def test_output_that_is_an_input_refused(self):
        src = self.write("in.json", "{}")
        os.symlink("in.json", self.path("link.json"))
        os.link(src, self.path("hard.json"))
        for out in (src, os.path.join(self.dir, ".", "in.json"), self.path("link.json"),
                    self.path("hard.json")):
            with self.subTest(out=out):
                with self.assertRaises(outfile.FileError) as cm:
                    outfile.check_output(out, [src], "--out")
                self.assertIn("the same file", str(cm.exception))

    def test_unwritable_places_refused_before_work(self):
        os.mkdir(self.path("d"))
        os.symlink("gone", self.path("dangling"))
        cases = {"folder": self.path("d"), "dangling": self.path("dangling"),
                 "missing folder": self.path("nope/x"), "empty": ""}
        if not ROOT_USER:
            os.mkdir(self.path("ro"), 0o500)
            cases["unwritable"] = self.path("ro/x")
        for name, out in cases.items():
            with self.subTest(name=name):
                with self.assertRaises(outfile.FileError):
                    outfile.check_output(out, [], "--out")

    def test_replacing_keeps_link_mode_and_leaves_no_temporary(self):
        target = self.write("t.txt", "old")
        os.chmod(target, 0o640)
        os.symlink("t.txt", self.path("l.txt"))
        with outfile.replacing(self.path("l.txt")) as out:
            self.assertEqual(os.path.dirname(out.name), self.dir)
            # the extension kept: chromium picks the screenshot's format by it
            self.assertTrue(out.name.endswith(".txt"), out.name)
            out.file.write("new")
        self.assertTrue(os.path.islink(self.path("l.txt")))
        with open(target) as f:
            self.assertEqual(f.read(), "new")
        self.assertEqual(stat.S_IMODE(os.stat(target).st_mode), 0o640)
        with self.assertRaises(RuntimeError):
            with outfile.replacing(target) as out:
                out.file.write("half")
                raise RuntimeError("stop")
        with open(target) as f:
            self.assertEqual(f.read(), "new")
        self.assertEqual(self.listing(), ["l.txt", "t.txt"])

    def test_temporary_is_exclusive(self):
        """A planted link at any name the old code used is not followed."""
        victim = self.write("victim", "keep")
        target = self.path("out.pickle")
        for name in ("out.pickle.tmp.%d" % os.getpid(), "out.pickle.tmp"):
            os.symlink(victim, self.path(name))
        outfile.write_all([(target, b"data")], binary=True)
        with open(victim) as f:
            self.assertEqual(f.read(), "keep")
        with open(target, "rb") as f:
            self.assertEqual(f.read(), b"data")

    def test_write_all_is_all_or_none(self):
        a = self.write("a", "old a")
        with self.assertRaises(outfile.FileError):
            outfile.write_all([(a, "new a"), ("/dev/full", "x" * 100000)])
        with open(a) as f:
            self.assertEqual(f.read(), "old a")
        self.assertEqual(self.listing(), ["a"])

    def test_bounded_reads(self):
        bad = self.write("bad", b"\xffabc", "wb")
        for path, kind, words in ((bad, None, "not UTF-8"), ("/dev/zero", None, "over"),
                                  (self.write("l", "[1]"), dict, "a list"),
                                  (self.write("e", ""), None, "empty"),
                                  (self.write("n", "NaN"), None, "not JSON"),
                                  (self.write("deep", "[" * 100000), None, "JSON"),
                                  (self.dir, None, "folder"), (self.path("no"), None, "No such")):
            with self.subTest(path=path):
                with self.assertRaises(outfile.FileError) as cm:
                    outfile.load_json(path, "--x", 1 << 20, kind)
                self.assertIn(words, str(cm.exception))
                self.assertEqual(len(str(cm.exception).splitlines()), 1)


    def test_bounded_read_reserves_nothing_up_front(self):
        # a 1 GiB limit under a 900 MB address space: a small file reads
        small = self.write("small", b"x" * 127, "wb")
        code = ("import resource, importlib.util as u, sys\n"
                "spec = u.spec_from_file_location('o', sys.argv[1])\n"
                "o = u.module_from_spec(spec); spec.loader.exec_module(o)\n"
                "resource.setrlimit(resource.RLIMIT_AS, (900 << 20, 900 << 20))\n"
                "print(len(o.read_input(sys.argv[2], '--x', 1 << 30)))\n")
        r = subprocess.run([sys.executable, "-c", code,
                            os.path.join(ROOT, "python", "adaptalloc", "_outfile.py"), small],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "127"), r.stderr)


# ------------------------------------------------------------- torch converter

def run_limited(tool, *args, address_space=900 << 20):
    """run() under an address-space limit (ulimit -v)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    return subprocess.run([sys.executable, tool] + [str(a) for a in args], capture_output=True,
                          text=True, timeout=120, errors="replace", preexec_fn=limit)


class TorchConverter(Base):
    """tools/torch_snapshot_to_trace.py: reads in chunks (a small snapshot
    under a small address space), and bounds what it writes (--max-entries):
    a small pickle that names one list many times is refused."""

    def snapshot(self, traces):
        p = self.path("snap.pickle")
        with open(p, "wb") as f:
            pickle.dump({"segments": [], "device_traces": traces}, f)
        return p

    def test_small_snapshot_under_a_small_address_space(self):
        snap = self.snapshot([[{"action": "alloc", "addr": 16, "size": 512, "stream": 0}]])
        r = run_limited(CONVERTER, snap, "-o", self.path("t.csv"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("t.csv")) as f:
            self.assertEqual(len(f.read().splitlines()), 2)

    def test_entries_bounded(self):
        one = [{"action": "alloc", "addr": 16 * i, "size": 512} for i in range(1000)]
        for traces, extra in (([one] * 10, ("--max-entries", "5000")),
                              ([one] * 20000, ())):  # 20 M entries: over the default
            with self.subTest(extra=extra):
                snap = self.snapshot(traces)
                self.assertLess(os.path.getsize(snap), 100000)
                before = self.listing()
                r = run(CONVERTER, snap, "-o", self.path("t.csv"), *extra)
                self.refused(r, 1, "torch_snapshot_to_trace: ", "--max-entries")
                self.assertEqual(self.listing(), before)
        r = run(CONVERTER, self.snapshot([one]), "--max-entries", "0")
        self.refused(r, 2, "", "--max-entries")


class OomSnapshot(Base):
    """adaptalloc.torch writes its OOM snapshot without following a link
    planted at a predictable name (issue #39 class 3)."""

    def fake_torch(self, with_snapshot=True):
        memory = types.SimpleNamespace()
        if with_snapshot:
            memory._snapshot = lambda: {"segments": [], "device_traces": [[]]}

        def dump(name):
            with open(name, "wb") as f:
                pickle.dump({"segments": ["old torch"]}, f)
        memory._dump_snapshot = dump
        return types.SimpleNamespace(cuda=types.SimpleNamespace(memory=memory))

    def test_planted_link_not_followed(self):
        oom = load_oom()
        victim = self.write("victim.txt", "precious")
        path = self.path("oom-0.pickle")
        os.symlink(victim, "%s.tmp.%d" % (path, os.getpid()))
        for with_snapshot in (True, False):
            with self.subTest(with_snapshot=with_snapshot):
                oom._write(self.fake_torch(with_snapshot), path)
                with open(victim) as f:
                    self.assertEqual(f.read(), "precious")
                with open(path, "rb") as f:
                    self.assertIsInstance(pickle.load(f), dict)
        self.assertEqual(self.listing(), ["oom-0.pickle", "oom-0.pickle.tmp.%d" % os.getpid(),
                                          "victim.txt"])

    def test_link_at_the_snapshot_name_replaced_not_followed(self):
        oom = load_oom()
        victim = self.write("victim.txt", "precious")
        path = self.path("oom-0.pickle")
        os.symlink(victim, path)
        oom._write(self.fake_torch(), path)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious")
        self.assertFalse(os.path.islink(path))
        with open(path, "rb") as f:
            self.assertIsInstance(pickle.load(f), dict)

    def test_failure_leaves_old_snapshot(self):
        oom = load_oom()
        path = self.write("oom.pickle", b"old", "wb")
        torch = self.fake_torch()

        def boom():
            raise RuntimeError("no snapshot")
        torch.cuda.memory._snapshot = boom
        with self.assertRaises(RuntimeError):
            oom._write(torch, path)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"old")
        self.assertEqual(self.listing(), ["oom.pickle"])


# ------------------------------------------------------------- grafana_preview

class Prom(http.server.BaseHTTPRequestHandler):
    mode = "ok"

    def do_GET(self):
        if self.mode == "html":
            body, ctype = b"<html><body>nginx</body></html>", "text/html"
        elif self.mode == "nodata":
            body, ctype = b'{"status":"success"}', "application/json"
        elif self.mode in ("huge", "-huge"):
            v = "1e308" if self.mode == "huge" else "-1e308"
            body = json.dumps({"status": "success", "data": {
                "resultType": "matrix", "result": [
                    {"metric": {"__name__": "up", "rank": "0"},
                     "values": [[1000.0, v], [1030.0, "2"]]}]}}).encode()
            ctype = "application/json"
        elif self.mode == "list":
            body, ctype = b'[1,2]', "application/json"
        elif self.mode == "badseries":
            body = json.dumps({"status": "success", "data": {
                "resultType": "matrix", "result": [{"metric": 3, "values": "x"}]}}).encode()
            ctype = "application/json"
        else:
            body = json.dumps({"status": "success", "data": {
                "resultType": "matrix", "result": [
                    {"metric": {"__name__": "up", "rank": "0"},
                     "values": [[1000.0, "1"], [1030.0, "2"]]}]}}).encode()
            ctype = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def dashboard(**panel):
    p = {"id": 1, "title": "Up", "type": "timeseries",
         "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8},
         "targets": [{"refId": "A", "expr": "up", "legendFormat": "{{rank}}"}]}
    p.update(panel)
    return {"title": "T", "uid": "u", "time": {"from": "now-5m", "to": "now"},
            "panels": [p]}


class GrafanaPreview(Base):
    @classmethod
    def setUpClass(cls):
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Prom)
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.url = "http://127.0.0.1:%d" % cls.server.server_address[1]

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def setUp(self):
        super().setUp()
        Prom.mode = "ok"
        self.dash = self.write("dash.json", json.dumps(dashboard()))

    def preview(self, *extra, dash=None, out=None):
        args = ["--prometheus", self.url, "--dashboard", dash or self.dash,
                "--out", out or self.path("page.html"), "--scrape-interval", "15s",
                "--now", "1060", "--from", "1000", "--to", "1060"]
        return run(GRAFANA, *(args + list(extra)))

    def assert_nothing_written(self, before):
        self.assertEqual(self.listing(), before)
        with open(self.dash) as f:
            self.assertEqual(json.load(f), dashboard())

    def test_good_preview(self):
        r = self.preview("--report", self.path("r.json"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("r.json")) as f:
            self.assertEqual(json.load(f)["panels"][0]["targets"][0]["series"][0]["points"], 2)
        self.assertEqual(self.listing(), ["dash.json", "page.html", "r.json"])

    def test_output_is_the_dashboard(self):
        os.symlink("dash.json", self.path("link.json"))
        self.write("page.html", "old page")
        os.link(self.path("page.html"), self.path("hard.html"))
        before = self.listing()
        for extra, out in (((), self.dash), ((), self.path("link.json")),
                           (("--report", self.dash), None),
                           (("--report", self.path("link.json")), None),
                           (("--report", self.path("page.html")), None),
                           (("--report", self.path("hard.html")), None)):
            with self.subTest(extra=extra, out=out):
                r = self.preview(*extra, out=out)
                self.refused(r, 2, "grafana_preview: ")
                self.assert_nothing_written(before)
                with open(self.path("page.html")) as f:
                    self.assertEqual(f.read(), "old page")

    def test_bad_dashboards(self):
        p = dashboard()["panels"][0]
        cases = {
            "not UTF-8": (b'{"title": "\xff"}', "not UTF-8"),
            "a list": (b"[1, 2]", "a list"),
            "wrapped list": (json.dumps({"dashboard": [1]}).encode(), "not an object"),
            "panel a string": (json.dumps({"panels": ["x"]}).encode(), "not an object"),
            "panel a list": (json.dumps({"panels": [[p]]}).encode(), "not an object"),
            "targets a dict": (json.dumps(dashboard(targets={"a": 1})).encode(), "targets"),
            "target a string": (json.dumps(dashboard(targets=["up"])).encode(), "target"),
            "fieldConfig a list": (json.dumps(dashboard(fieldConfig=[])).encode(),
                                   "fieldConfig"),
            "absurd height": (json.dumps(dashboard(gridPos={"x": 0, "y": 0, "w": 1,
                                                            "h": 10 ** 9})).encode(),
                              "taller"),
            "templating a list": (json.dumps(dict(dashboard(), templating=[1])).encode(),
                                  "templating"),
            "variable a string": (json.dumps(dict(dashboard(),
                                                  templating={"list": ["v"]})).encode(),
                                  "templating"),
            "time a string": (json.dumps(dict(dashboard(), time="now")).encode(), "time"),
            "nan in JSON": (b'{"panels": NaN}', "not JSON"),
            "min and max absurd": (json.dumps(dashboard(fieldConfig={"defaults": {
                "min": -1e308, "max": 1e308}})).encode(), "beyond"),
            "row panel a string": (json.dumps({"panels": [
                {"type": "row", "title": "R", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1},
                 "panels": ["x"]}]}).encode(), "not an object"),
            "row panel a number": (json.dumps({"panels": [
                {"type": "row", "title": "R", "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1},
                 "panels": [3]}]}).encode(), "not an object"),
            "no gridPos": (json.dumps({"panels": [
                {"id": 1, "title": "Up", "type": "timeseries", "targets": []}]}).encode(),
                           "gridPos"),
            "row without gridPos": (json.dumps({"panels": [
                {"type": "row", "title": "R", "panels": [
                    {"title": "in", "type": "timeseries"}]}]}).encode(), "gridPos"),
            "empty": (b"", "empty"),
        }
        for name, (data, words) in cases.items():
            with self.subTest(name=name):
                d = self.write("bad.json", data, "wb")
                before = self.listing()
                r = self.preview(dash=d)
                self.refused(r, 2, "grafana_preview: ", words)
                self.assertEqual(self.listing(), before)
        r = self.preview(dash="/dev/zero")
        self.refused(r, 2, "grafana_preview: ", "/dev/zero", "over")

    def test_bad_times(self):
        before = self.listing()
        for opt, val, words in (("--from", "nan", "nan"), ("--to", "inf", "inf"),
                                ("--from", "-inf", "-inf"), ("--to", "1e300", "1e300"),
                                ("--now", "nan", "nan"), ("--now", "1e300", "1970"),
                                ("--from", "now-99999999d", "1970")):
            with self.subTest(opt=opt, val=val):
                r = self.preview("%s=%s" % (opt, val))
                self.refused(r, 2, "grafana_preview: ", words)
                self.assert_nothing_written(before)

    def test_bad_output_places(self):
        before = self.listing()
        cases = [(self.path("nope/page.html"), "does not exist"),
                 (self.dir, "folder")]
        if not ROOT_USER:
            os.mkdir(self.path("ro"), 0o500)
            before = self.listing()
            cases.append((self.path("ro/page.html"), "not writable"))
        for out, words in cases:
            with self.subTest(out=out):
                self.refused(self.preview(out=out), 2, "grafana_preview: ", words)
                self.assertEqual(self.listing(), before)
        r = self.preview(out="/dev/full")
        self.refused(r, 2, "grafana_preview: ", "/dev/full")
        r = self.preview("--report", "/dev/full")
        self.refused(r, 2, "grafana_preview: ", "/dev/full")
        self.assertEqual(self.listing(), before)  # the page is not left without its report

    def test_samples_beyond_an_axis_refused(self):
        for mode in ("huge", "-huge"):
            with self.subTest(mode=mode):
                Prom.mode = mode
                before = self.listing()
                r = self.preview("--report", self.path("r.json"))
                self.refused(r, 2, "grafana_preview: ", "1e+308", "beyond")
                self.assertEqual(self.listing(), before)

    def test_prometheus_answers_that_are_not_prometheus(self):
        for mode, words in (("html", "not JSON"), ("nodata", "no \"data\""),
                            ("list", "a list"), ("badseries", "shape")):
            with self.subTest(mode=mode):
                Prom.mode = mode
                r = self.preview("--report", self.path("r.json"))
                # a query that failed: exit 1 (documented), the page says so
                self.refused(r, 1, "grafana_preview: ", words)
        Prom.mode = "html"
        r = run(GRAFANA, "--prometheus", self.url, "--dashboard", self.dash,
                "--out", self.path("p2.html"), "--now", "1060")
        self.refused(r, 1, "grafana_preview: ", "not JSON")
        self.assertFalse(os.path.exists(self.path("p2.html")))


# ------------------------------------------------------------- zoo_account

FAKE_REPLAY = """#!/bin/sh
echo "$@" >> "%s"
echo '{"result": {"peak_reserved": 4194304, "peak_in_use": 2097152, "failures": 0,
  "backend_allocs": 2, "backend_frees": 0}}'
"""


class ZooAccount(Base):
    def setUp(self):
        super().setUp()
        import sqlite3
        self.db = self.path("traces.db")
        con = sqlite3.connect(self.db)
        con.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, pid INTEGER, "
                    "events_written INTEGER, events_dropped INTEGER)")
        con.execute("INSERT INTO runs VALUES (1, 42, 10, 0)")
        con.commit()
        con.close()
        with open(self.db, "rb") as f:
            self.db_bytes = f.read()
        self.runs = self.write("runs.json", json.dumps(
            {"runs": {"bert": {"native": [{"pid": 42, "peak_mib": 1}]}}}))
        self.policy = self.write("policy.json", json.dumps(
            {"pools": {"device": {"slab_size": 2097152}}}))
        self.calls = self.path("calls.log")
        self.replay = self.write("replay.sh", FAKE_REPLAY % self.calls)
        os.chmod(self.replay, 0o755)

    def collect(self, *extra, out=None):
        return run(ZOO, "--db", self.db, "--runs", self.runs, "--replay", self.replay,
                   "--policy", self.policy, "--delays-us", "0,1000",
                   "--out", out or self.path("account.json"), *extra)

    def assert_db_kept(self):
        with open(self.db, "rb") as f:
            self.assertEqual(f.read(), self.db_bytes)

    def test_good_collect_and_report(self):
        r = self.collect()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| bert |", r.stdout)
        r = run(ZOO, "--report", self.path("account.json"))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_out_is_the_database(self):
        os.symlink("traces.db", self.path("link.db"))
        for out in (self.db, self.path("link.db"), os.path.join(self.dir, ".", "traces.db")):
            with self.subTest(out=out):
                r = self.collect(out=out)
                self.refused(r, 2, "zoo_account: ", "the same file")
                self.assert_db_kept()
                self.assertFalse(os.path.exists(self.calls), "a replay ran")

    def test_out_is_a_journal_of_the_database(self):
        for sfx in ("-wal", "-shm", "-journal"):
            with self.subTest(sfx=sfx):
                r = self.collect(out=self.db + sfx)
                self.refused(r, 2, "zoo_account: ", sfx)
                self.assertFalse(os.path.exists(self.db + sfx))
                self.assertFalse(os.path.exists(self.calls), "a replay ran")
                self.assert_db_kept()

    def test_out_a_device_tables_from_memory(self):
        # /dev/null: the tables still print (not read back: "--report /dev/null is empty")
        r = self.collect(out="/dev/null")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("| bert |", r.stdout)
        self.assertNotIn("--report", r.stderr)
        # /dev/stdout into a pipe: the account then the tables, no reading back (a hang)
        os.unlink(self.calls)
        r = run(ZOO, "--db", self.db, "--runs", self.runs, "--replay", self.replay,
                "--policy", self.policy, "--delays-us", "0", "--out", "/dev/stdout",
                timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('"workloads"', r.stdout)
        self.assertIn("| bert |", r.stdout)

    def test_bad_runs_one_line_before_any_replay(self):
        for run_, words in (({"pid": 99999999999999999999999}, "2^63"),
                            ({"pid": 42, "step_ms": 5}, "step_ms"),
                            ({"pid": 42, "step_ms": [1, "a"]}, "step_ms"),
                            ({"pid": 42, "step_ms": [True]}, "step_ms")):
            with self.subTest(run=run_):
                self.write("runs.json", json.dumps({"runs": {"bert": {"native": [run_]}}}))
                r = self.collect()
                self.refused(r, 2, "zoo_account: ", words)
                self.assertFalse(os.path.exists(self.calls), "a replay ran")
                self.assertFalse(os.path.exists(self.path("account.json")))

    def test_bad_arguments_refused_before_any_replay(self):
        cases = [(("--limit-factors", "1.03,abc"), "abc"), (("--limit-factors", "nan"), "nan"),
                 (("--limit-factors", "inf"), "inf"), (("--limit-factors", "-1"), "-1"),
                 (("--limit-factors", "0"), "'0'"), (("--delays-us", "1,x"), "'x'"),
                 (("--delays-us", "-5"), "-5")]
        for extra, words in cases:
            with self.subTest(extra=extra):
                r = self.collect(*extra)
                self.refused(r, 2, "zoo_account: ", words)
                self.assertFalse(os.path.exists(self.calls), "a replay ran")
                self.assertFalse(os.path.exists(self.path("account.json")))
        for name, data, words in (("runs", b"\xff", "not UTF-8"), ("runs", b"[]", "a list"),
                                  ("runs", b'{"runs": [1]}', "runs"),
                                  ("policy", b"{", "not JSON")):
            with self.subTest(name=name, data=data):
                self.write(name + ".bad", data, "wb")
                args = {"runs": self.runs, "policy": self.policy}
                args[name] = self.path(name + ".bad")
                r = run(ZOO, "--db", self.db, "--runs", args["runs"], "--replay", self.replay,
                        "--policy", args["policy"], "--out", self.path("account.json"))
                self.refused(r, 2, "zoo_account: ", words)
                self.assertFalse(os.path.exists(self.calls), "a replay ran")
        notdb = self.write("notdb", "hello")
        r = run(ZOO, "--db", notdb, "--runs", self.runs, "--replay", self.replay,
                "--policy", self.policy, "--out", self.path("account.json"))
        self.refused(r, 2, "zoo_account: ", "notdb")
        self.assertFalse(os.path.exists(self.calls), "a replay ran")

    def test_bad_output_places(self):
        for out, words in ((self.path("nope/a.json"), "does not exist"),
                           (self.dir, "folder")):
            with self.subTest(out=out):
                self.refused(self.collect(out=out), 2, "zoo_account: ", words)
                self.assertFalse(os.path.exists(self.calls), "a replay ran")
        r = self.collect(out="/dev/full")
        self.refused(r, 2, "zoo_account: ", "/dev/full")

    def test_bad_reports(self):
        cases = {"missing": (None, "No such file"), "empty": (b"", "empty"),
                 "not UTF-8": (b"\xfe\xff", "not UTF-8"), "a list": (b"[]", "a list"),
                 "no workloads": (b"{}", "workloads"),
                 "workload a list": (b'{"delays_us": [], "workloads": {"a": []}}', "'a'"),
                 "figure a string": (json.dumps({
                     "delays_us": [0], "limit_factors": [], "workloads": {"a": {
                         "gpu": {}, "replays": {"0": {"result": {"peak_reserved": "x"}}}}}})
                     .encode(), "figure")}
        for name, (data, words) in cases.items():
            with self.subTest(name=name):
                path = self.path("report.json")
                if data is not None:
                    self.write("report.json", data, "wb")
                r = run(ZOO, "--report", path)
                self.refused(r, 2, "zoo_account: ", words)
                self.assertEqual(r.stdout, "", "partial output")
                if data is not None:
                    os.unlink(path)
        self.refused(run(ZOO, "--report", "/dev/zero"), 2, "zoo_account: ", "over")
        self.refused(run(ZOO, "--report", self.dir), 2, "zoo_account: ", "folder")


# ------------------------------------------------------------- memory_viz_image

class MemoryVizImage(Base):
    def setUp(self):
        super().setUp()
        self.html = self.write("t.html", '<html><head></head><script type="module">\n'
                               'import {add_local_files} from "%s"\n'
                               'add_local_files([], "x")</script></html>' % CDN)
        self.js = self.write("MemoryViz.js", "export function add_local_files() {}\n")

    def test_out_is_an_input(self):
        os.symlink("t.html", self.path("link.html"))
        os.symlink("MemoryViz.js", self.path("link.js"))
        os.mkdir(self.path("sub"))
        page = self.write("sub/t.png", "<html>not a png</html>")  # the default --out's input
        cases = [("--out", self.html), ("--out", self.path("link.html")),
                 ("--out", self.js), ("--out", self.path("link.js"))]
        for opt, out in cases:
            with self.subTest(out=out):
                r = run(MEMVIZ, "--png", self.html, "--viz-js", self.js, opt, out)
                self.refused(r, 2, "memory_viz_image: ", "the same file")
        # without --viz-js the MemoryViz.js beside the HTML is an input too
        for out in (self.js, self.path("link.js")):
            with self.subTest(out=out, viz_js=None):
                r = run(MEMVIZ, "--png", self.html, "--out", out)
                self.refused(r, 2, "memory_viz_image: ", "the same file")
                with open(self.js) as f:
                    self.assertEqual(f.read(), "export function add_local_files() {}\n")
        r = run(MEMVIZ, "--png", page)  # default out: sub/t.png itself
        self.refused(r, 2, "memory_viz_image: ", "the same file")
        with open(self.html) as f:
            self.assertIn("add_local_files", f.read())
        with open(page) as f:
            self.assertEqual(f.read(), "<html>not a png</html>")

    def test_bad_inputs_and_places(self):
        bad = self.write("bad.html", b"<html>\xff</html>", "wb")
        badjs = self.write("bad.js", b"\xc3(", "wb")
        cases = [(("--png", bad, "--out", self.path("o.png")), "not UTF-8"),
                 (("--png", self.html, "--viz-js", badjs, "--out", self.path("o.png")),
                  "not UTF-8"),
                 (("--png", "/dev/zero", "--out", self.path("o.png")), "not a regular file"),
                 (("--png", self.html, "--viz-js", "/dev/zero", "--out", self.path("o.png")),
                  "not a regular file"),
                 (("--png", self.html, "--out", self.path("nope/o.png")), "does not exist"),
                 (("--png", self.html, "--out", self.dir), "folder")]
        if not ROOT_USER:
            os.mkdir(self.path("ro"), 0o500)
            cases.append((("--png", self.html, "--out", self.path("ro/o.png")), "not writable"))
        before = self.listing()
        for args, words in cases:
            with self.subTest(args=args):
                r = run(MEMVIZ, *args)
                self.refused(r, 2, "memory_viz_image: ", words)
                self.assertEqual(self.listing(), before)


if __name__ == "__main__":
    unittest.main(verbosity=1)
