"""The GPU benchmarks' harness, without a GPU: CPU lists, the choice of the
GPU-local CPUs from sysfs, pinning, the calibration's figures, the zoo's run
order and its paired ratios and tables (bench/gpu/benchcpu.py,
bench/gpu/bench_zoo.py)."""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "gpu"))

import benchcpu  # noqa: E402
import lockstep  # noqa: E402,F401
import bench_zoo  # noqa: E402


def test_cpulist_round_trip():
    assert benchcpu.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert benchcpu.format_cpulist({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11"
    assert benchcpu.format_cpulist({5}) == "5"
    for bad in ("", "x", "3-1", "1-", "-2", "1,,a"):
        with pytest.raises(ValueError):
            benchcpu.parse_cpulist(bad)


def test_sysfs_form_of_nvidia_smi_bus_id():
    assert benchcpu.sysfs_pci("00000000:9A:00.0") == "0000:9a:00.0"


def test_gpu_local_cpus_from_sysfs(tmp_path):
    allowed = os.sched_getaffinity(0)
    one = min(allowed)
    dev = tmp_path / "0000:18:00.0"
    dev.mkdir()
    (dev / "local_cpulist").write_text(f"{one},100000-100003\n")
    cpus, why = benchcpu.gpu_local_cpus("0000:18:00.0", sysfs=str(tmp_path))
    assert cpus == {one}  # only the CPUs this process may use
    assert "local to the GPU at 0000:18:00.0" in why
    cpus, why = benchcpu.gpu_local_cpus("0000:19:00.0", sysfs=str(tmp_path))
    assert cpus == allowed and "no local_cpulist" in why
    (dev / "local_cpulist").write_text("100000-100003\n")  # none of them ours
    cpus, _ = benchcpu.gpu_local_cpus("0000:18:00.0", sysfs=str(tmp_path))
    assert cpus == allowed


def test_choose_and_pin(monkeypatch):
    allowed = os.sched_getaffinity(0)
    assert benchcpu.choose_cpus("none") == (None, "not pinned")
    assert benchcpu.choose_cpus("all")[0] == allowed
    with pytest.raises(ValueError):
        benchcpu.choose_cpus(str(max(allowed) + 1000))
    one = min(allowed)
    monkeypatch.setenv(benchcpu.ENV_CPUS, str(one))
    try:
        assert benchcpu.pin_cpus() == [one]
        assert os.sched_getaffinity(0) == {one}
    finally:
        os.sched_setaffinity(0, allowed)


def test_calibrate_without_torch():
    c = benchcpu.calibrate(reps=3)
    assert set(c) == {"py_ms"} and c["py_ms"] > 0


def test_paired():
    assert benchcpu.paired([2.0, 4.0, 3.0], [1.0, 4.0, 6.0]) == [2.0, 1.0, 0.5]
    assert benchcpu.paired([1.0], [1.0, 2.0]) == []  # different steps: no pairs
    assert benchcpu.paired([], []) == []


def test_plan_interleaves_modes_within_each_rep():
    runs = list(bench_zoo.plan(3, ["moe", "gpt2"], ["native", "default"]))
    assert len(runs) == 12
    assert [r for r, _, _ in runs] == sorted(r for r, _, _ in runs)  # rep 1 before rep 2
    for rep in range(3):
        for w in ("moe", "gpt2"):
            got = [(i, m) for i, (r, ww, m) in enumerate(runs) if r == rep and ww == w]
            assert sorted(m for _, m in got) == ["default", "native"]
            assert got[1][0] == got[0][0] + 1  # one after the other
    firsts = [m for (r, w, m), prev in zip(runs, [None] + runs) if prev is None or prev[1] != w]
    assert "native" in firsts and "default" in firsts  # no mode always first


def _run(mode, rep, steps, cpu_us):
    return {"workload": "moe", "mode": mode, "rep": rep, "peak_mib": 100.0,
            "step_ms": steps, "warm_ms": [],
            "cpu_steps": {"main": 2.0 * cpu_us, "others": 0.5, "threads": []},
            "calib": {"before": {"py_ms": 5.0, "torch_us": cpu_us},
                      "after": {"py_ms": 5.0, "torch_us": cpu_us}}}


def test_jit_warm_up_steps_and_mode():
    assert bench_zoo.parse_steps("smoke=warm,kvgen=3") == {"smoke": "warm", "kvgen": 3}
    with pytest.raises(SystemExit, match="WORKLOAD=warm"):
        bench_zoo.parse_steps("kvgen=warmer")
    assert bench_zoo.jit_warm_mode(["native", "default", "async"]) == "default"
    assert bench_zoo.jit_warm_mode(["native", "expandable"]) == "native"


def test_dry_run_lists_one_jit_warm_up_per_workload(capsys, monkeypatch):
    argv = ["bench_zoo.py", "--dry-run", "--cpus", "none", "--workloads", "kvgen,cnn",
            "--modes", "native,default", "--reps", "2"]
    monkeypatch.setattr(sys, "argv", argv)
    bench_zoo.main()
    lines = capsys.readouterr().out.splitlines()
    assert [ln.strip() for ln in lines if "JIT" in ln] == [
        "kvgen JIT warm-up under default (first pass, not measured)",
        "cnn JIT warm-up under default (first pass, not measured)"]
    assert lines.index("  kvgen JIT warm-up under default (first pass, not measured)") < \
        lines.index("  rep 1 kvgen native")
    monkeypatch.setattr(sys, "argv", argv + ["--no-jit-warm"])
    bench_zoo.main()
    assert "JIT" not in capsys.readouterr().out


def test_summary_pairs_steps_within_a_rep(capsys):
    # rep 0: native 2x slower on every step, on a CPU 2x slower; rep 1 equal;
    # rep 2 has no default run, so no pair
    runs = {"moe": {
        "native": [_run("native", 0, [20.0, 40.0, 60.0], 2.0),
                   _run("native", 1, [10.0, 20.0, 30.0], 1.0),
                   _run("native", 2, [10.0, 20.0, 30.0], 1.0)],
        "default": [_run("default", 1, [10.0, 20.0, 30.0], 1.0),
                    _run("default", 0, [10.0, 20.0, 30.0], 1.0)]}}
    s = bench_zoo.summarise(runs, ["native", "default"], ["moe"])["moe"]
    r = s["ratios"]["native"]
    assert r["paired_speed"] == [0.5, 1.0]
    assert r["paired_all"] == pytest.approx(0.75)
    assert r["cpu_vs_default"] == [2.0, 1.0]
    assert s["cpu_us"]["native"] == [2.0, 1.0, 1.0]
    assert r["speed_vs_default"] == pytest.approx(1.0)  # medians 20 and 20
    bench_zoo.print_tables({"moe": s}, ["native", "default"])
    out = capsys.readouterr().out
    assert "| native paired speed vs default |" in out
    assert "0.750 [0.500, 1.000]x" in out
    assert ("| moe | 1.000 [1.000, 2.000] | 1.000 [1.000, 1.000] | 1.500 [1.000, 2.000] "
            "| 2.00/0.50 | 2.00/0.50 |") in out


def test_paired_speed_against_each_pytorch_setting_and_allocator_cpu(capsys):
    # native 2x faster than expandable on each step, equal to the default;
    # 1000 allocations + frees over 4 steps of 10 ms at 2 us a pair: 0.25 ms
    # a step (2.5%)
    def run(mode, steps, **kw):
        return dict(_run(mode, 0, steps, 1.0), **kw)
    runs = {"moe": {
        "native": [run("native", [10.0] * 4, alloc_calls_measured=1000, alloc_cost_us=2.0)],
        "default": [run("default", [10.0] * 4)],
        "expandable": [run("expandable", [20.0] * 4, alloc_calls_measured=None,
                           alloc_cost_us=1.0)]}}
    modes = ["native", "default", "expandable"]
    s = bench_zoo.summarise(runs, modes, ["moe"])["moe"]
    assert s["ratios"]["native"]["paired_vs"] == {"expandable": [2.0]}
    assert s["alloc_cpu"] == {"native": [(250.0, 2.0, 0.25, 0.025)]}
    bench_zoo.print_tables({"moe": s}, modes)
    out = capsys.readouterr().out
    assert ("| native paired speed vs default | native paired speed vs expandable |") in out
    assert "| 1.000x | 2.000x |" in out
    assert "| moe | 250, 2.000, 0.250 (2.50%) | - | - |" in out


def test_summary_of_runs_without_calibration():
    old = {"moe": {"native": [{"peak_mib": 1.0, "step_ms": [2.0], "warm_ms": []}],
                   "default": [{"peak_mib": 1.0, "step_ms": [1.0], "warm_ms": []}]}}
    s = bench_zoo.summarise(old, ["native", "default"], ["moe"])["moe"]
    assert s["ratios"]["native"]["paired_speed"] == [0.5]
    assert s["ratios"]["native"]["cpu_vs_default"] == []
    assert s["cpu_us"]["native"] == []


def test_device_calls_count_the_measured_steps_only(capsys):
    r = {"peak_mib": 1.0, "step_ms": [1.0, 1.0], "warm_ms": [5.0], "warm": 1,
         "step_device_calls": [[100, 0], [2, 1], [0, 3]]}
    assert bench_zoo.run_device_calls(r) == 6  # the warm-up step's 100 left out
    assert bench_zoo.run_device_calls({"step_device_calls": [None, [1, 1]]}) is None
    assert bench_zoo.run_device_calls({}) is None
    runs = {"gpt2": {"native": [r], "default": [dict(r, step_device_calls=[[1, 0], [0, 0],
                                                                          [0, 0]])]}}
    s = bench_zoo.summarise(runs, ["native", "default"], ["gpt2"])
    assert s["gpt2"]["device_calls"] == {"native": [6], "default": [0]}
    bench_zoo.print_tables(s, ["native", "default"])
    assert "| gpt2 | 6 | 0 |" in capsys.readouterr().out


def test_backend_time_of_native_runs_is_tabled(capsys):
    bm = {"backend_ms": 12.5, "pages_mapped": 40, "pages_unmapped": 3, "backend_calls": 43,
          "step_ms_total": 250.0}
    runs = {"moe": {"native": [{"peak_mib": 1.0, "step_ms": [1.0], "warm_ms": [],
                                "step_device_calls": [[40, 3]], "backend_measured": bm}],
                    "default": [{"peak_mib": 1.0, "step_ms": [1.0], "warm_ms": [],
                                 "step_device_calls": [[2, 0]]}]}}
    s = bench_zoo.summarise(runs, ["native", "default"], ["moe"])
    assert s["moe"]["backend_measured"] == {"native": [bm]}
    bench_zoo.print_tables(s, ["native", "default"])
    assert "| moe | 43 | 2 | 12.5 (40/3, 5.0%) | - |" in capsys.readouterr().out
    doc = {"pools": [{"name": "device0", "backend": "cuda", "backend_ns": 2500000,
                      "large_pages_mapped": 5, "large_pages_unmapped": 1,
                      "backend_allocs": 6, "backend_frees": 1},
                     {"name": "host", "backend": "host", "backend_ns": 10 ** 9}]}
    assert bench_zoo._backend_counts(doc) == {"backend_ms": 2.5, "pages_mapped": 5,
                                              "pages_unmapped": 1, "backend_calls": 7,
                                              "alias_calls": 0, "stream_waits": 0}
    doc["pools"][0].update(large_alias_maps=4, large_alias_unmaps=3)  # stitching's calls
    assert bench_zoo._backend_counts(doc)["alias_calls"] == 7
    doc["pools"][0]["large_stream_waits"] = 9  # cross-stream reuse: counted, not a backend call
    doc["pools"][1]["large_stream_waits"] = 5  # the host pool's are not the device's
    got = bench_zoo._backend_counts(doc)
    assert got["stream_waits"] == 9 and got["backend_calls"] == 7


def test_thread_cpu_sees_a_busy_thread():
    import threading
    import time

    before = benchcpu.thread_cpu()
    assert os.getpid() in before  # the main thread
    spun, release = threading.Event(), threading.Event()

    def spin():  # 0.3 s of CPU (the main thread waits meanwhile), then stay alive
        end = time.process_time() + 0.3
        while time.process_time() < end:
            pass
        spun.set()
        release.wait(30)

    th = threading.Thread(target=spin)
    th.start()
    try:
        assert spun.wait(60)
        got = benchcpu.cpu_between(before, benchcpu.thread_cpu())
    finally:
        release.set()
        th.join()
    assert got["others"] >= 0.2 and got["threads"][0][1] >= 0.2
    assert 0 <= got["main"] < 0.2
    fake_before = {1: ("python3", 1.0), 2: ("worker", 0.5)}
    fake_after = {1: ("python3", 3.0), 2: ("worker", 2.5), 3: ("new", 0.25)}
    assert benchcpu.cpu_between(fake_before, fake_after, main_tid=1) == {
        "main": 2.0, "others": 2.25, "threads": [["worker", 2.0], ["new", 0.25]]}


def test_native_variants_run_as_native_with_their_environment(monkeypatch, capsys):
    m, env = bench_zoo.parse_variant("tr:ADAPTALLOC_TRACE=1,ADAPTALLOC_DB=/x/t.db")
    assert (m, env) == ("native@tr", {"ADAPTALLOC_TRACE": "1", "ADAPTALLOC_DB": "/x/t.db"})
    monkeypatch.setitem(bench_zoo.VARIANTS, m, env)
    monkeypatch.setenv("ADAPTALLOC_POLICY", "/somewhere/else.json")
    e = bench_zoo.mode_env("native@tr", "/tmp/zoo", "full")
    assert e["ADAPTALLOC_TRACE"] == "1" and e["ADAPTALLOC_DB"] == "/x/t.db"
    assert e["ADAPTALLOC_HTTP"] == "127.0.0.1:0"  # the runtime as native's
    assert "ADAPTALLOC_POLICY" not in e and "PYTORCH_CUDA_ALLOC_CONF" not in e
    assert "ADAPTALLOC_TRACE" not in bench_zoo.mode_env("native", "/tmp/zoo", "full")
    # each variant its own store (lockstep runs them at the same time)
    assert bench_zoo.mode_env("native", "/tmp/zoo", "full")["ADAPTALLOC_DB"] == "/tmp/zoo/zoo.db"
    monkeypatch.setitem(bench_zoo.VARIANTS, "native@p16", {"ADAPTALLOC_POLICY": "/p.json"})
    assert bench_zoo.mode_env("native@p16", "/tmp/zoo", "full")["ADAPTALLOC_DB"] == \
        "/tmp/zoo/zoo-p16.db"
    runs = {"encoder": {"native": [_run("native", 0, [10.0, 10.0], 1.0)],
                        "native@tr": [_run("native@tr", 0, [10.0, 10.0], 1.0)],
                        "expandable": [_run("expandable", 0, [10.0, 10.0], 1.0)]}}
    runs["encoder"]["native@tr"][0]["peak_mib"] = 90.0
    runs["encoder"]["expandable"][0]["peak_mib"] = 100.0
    modes = ["native", "native@tr", "expandable"]
    s = bench_zoo.summarise(runs, modes, ["encoder"])
    assert s["encoder"]["ratios"]["native@tr"]["peak_vs_best"] == pytest.approx(0.9)
    bench_zoo.print_tables(s, modes)
    assert "native@tr / best of PyTorch" in capsys.readouterr().out
    for bad in ("tr", "t r:A=1", "tr:A", "tr:1A=2", "tr:"):
        with pytest.raises(SystemExit):
            bench_zoo.parse_variant(bad)


def test_paired_speed_over_steps_without_device_calls():
    # native is 2x slower only on the step where it mapped pages
    nat = {"rep": 0, "peak_mib": 1.0, "warm": 1, "warm_ms": [9.0], "step_ms": [20.0, 10.0, 10.0],
           "step_device_calls": [[50, 0], [8, 0], [0, 0], [0, 0]]}
    dfl = {"rep": 0, "peak_mib": 1.0, "warm": 1, "warm_ms": [9.0], "step_ms": [10.0, 10.0, 10.0],
           "step_device_calls": [[9, 0], [0, 0], [0, 0], [0, 0]]}
    assert bench_zoo.quiet_steps(nat) == [False, True, True]
    s = bench_zoo.summarise({"moe": {"native": [nat], "default": [dfl]}}, ["native", "default"],
                            ["moe"])
    r = s["moe"]["ratios"]["native"]
    assert r["paired_speed"] == [1.0] and r["paired_quiet"] == [1.0]
    nat["step_ms"] = [20.0, 20.0, 10.0]
    s = bench_zoo.summarise({"moe": {"native": [nat], "default": [dfl]}}, ["native", "default"],
                            ["moe"])
    assert s["moe"]["ratios"]["native"]["paired_quiet"] == [0.75]


def test_lockstep_runs_take_turns_without_overlap(tmp_path):
    import lockstep
    import time

    names = ["native", "default"]
    lead = lockstep.Leader(str(tmp_path), names, timeout_s=20)
    log = tmp_path / "log"
    pids = {}
    for i, n in enumerate(names):
        pid = os.fork()
        if pid == 0:  # a run: builds (the second one slower), then 4 steps
            code = 1
            try:
                f = lockstep.Follower(lead.prefix[n])
                time.sleep(0.05 * (i + 1))
                f.ready()
                for k in range(4):
                    f.before_step()
                    with open(log, "a") as out:
                        out.write(f"{n} {k} start {time.monotonic():.6f}\n")
                    time.sleep(0.02)
                    with open(log, "a") as out:
                        out.write(f"{n} {k} end {time.monotonic():.6f}\n")
                    f.after_step()
                f.finish()
                code = 0
            finally:
                os._exit(code)
        pids[n] = pid
    try:
        state = lead.run(alive=lambda n: os.waitpid(pids[n], os.WNOHANG) == (0, 0))
    finally:
        lead.close()
        for pid in pids.values():
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    assert state == {"native": "finished", "default": "finished"}
    assert lead.steps == {"native": 4, "default": 4}
    ev = [ln.split() for ln in log.read_text().splitlines()]
    # strictly alternating start/end: no two steps overlap
    assert [e[2] for e in ev] == ["start", "end"] * 8
    starts = [(e[0], int(e[1])) for e in ev if e[2] == "start"]
    # rounds alternate the order: A B, B A, A B, B A
    assert starts == [("native", 0), ("default", 0), ("default", 1), ("native", 1),
                      ("native", 2), ("default", 2), ("default", 3), ("native", 3)]


def test_lockstep_a_run_that_dies_fails_without_hanging(tmp_path):
    import lockstep

    lead = lockstep.Leader(str(tmp_path), ["a", "b"], timeout_s=5)
    pids = {}
    for n in ("a", "b"):
        pid = os.fork()
        if pid == 0:
            f = lockstep.Follower(lead.prefix[n])
            f.ready()
            f.before_step()
            if n == "b":
                os._exit(3)  # dies in its first step
            f.after_step()
            f.finish()
            os._exit(0)
        pids[n] = pid

    def alive(n):
        return os.waitpid(pids[n], os.WNOHANG) == (0, 0)

    try:
        state = lead.run(alive=alive)
    finally:
        lead.close()
        for pid in pids.values():
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    assert state == {"a": "finished", "b": "failed"}


FAKE_TORCH = '''
"""A stand-in for torch with just what bench_zoo's smoke workload and its
harness call, for running the zoo's runner without a GPU."""
import time
uint8 = "uint8"
_state = {"allocs": 0}


class device:
    def __init__(self, kind):
        self.kind = kind


class _T:
    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n

    def add_(self, x):
        return self


def empty(n, dtype=None, device=None):
    _state["allocs"] += 1
    time.sleep(0.002)
    return _T(n)


def zeros(n):
    return _T(n)


class _Props:
    pci_domain_id, pci_bus_id, pci_device_id = 0, 6, 0


class cuda:
    @staticmethod
    def init():
        pass

    @staticmethod
    def synchronize():
        pass

    @staticmethod
    def mem_get_info():
        return (90 << 30, 100 << 30)

    @staticmethod
    def memory_stats():
        return {"num_device_alloc": _state["allocs"], "num_device_free": 0}

    @staticmethod
    def max_memory_reserved():
        return 64 << 20

    @staticmethod
    def max_memory_allocated():
        return 32 << 20

    @staticmethod
    def get_device_properties(i):
        return _Props()
'''


@pytest.mark.parametrize("lockstep", [False, True])
def test_zoo_runner_end_to_end_with_a_stand_in_torch(tmp_path, lockstep):
    import json
    import subprocess

    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / "torch.py").write_text(FAKE_TORCH)
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "fake"))
    out = tmp_path / "zoo.json"
    cmd = [sys.executable, os.path.join(ROOT, "bench", "gpu", "bench_zoo.py"), "--workloads",
           "smoke", "--modes", "default,expandable", "--reps", "2", "--cpus", "all",
           "--timeout-s", "60", "--out", str(out)] + (["--lockstep"] if lockstep else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(tmp_path),
                       timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads(out.read_text())
    runs = doc["runs"]["smoke"]
    assert [len(runs[m]) for m in ("default", "expandable")] == [2, 2], r.stdout
    for m in ("default", "expandable"):
        for x in runs[m]:
            assert len(x["step_ms"]) == 3 and len(x["warm_ms"]) == 1
            assert x["calib"]["before"]["torch_us"] > 0 and x["cpus"]
            assert x["step_device_calls"] == [[1, 0]] * 4
            if lockstep:
                assert x["lockstep"] == ["default", "expandable"] or \
                    x["lockstep"] == ["expandable", "default"]
                assert x["peak_source"] == "max_memory_reserved" and x["peak_mib"] == 64.0
            else:
                assert "lockstep" not in x and x["peak_mib"] == 0.0
    assert sorted(x["rep"] for x in runs["default"]) == [0, 1]
    assert "process speed" in r.stdout and "device calls" in r.stdout
    # one unmeasured first pass (smoke: 1 warm-up step) before the workload's runs
    warm = [ln for ln in r.stdout.splitlines() if "JIT warm-up" in ln]
    assert len(warm) == 1 and "under default (first pass, not measured): steps" in warm[0]
    assert r.stdout.index("JIT warm-up") < r.stdout.index("RESULT ")
    assert "," not in warm[0].split("steps")[1].split("ms")[0], warm[0]  # one step
    if lockstep:
        assert "peak reserved, MiB: the allocators' own max_memory_reserved" in r.stdout


# The stand-in torch, its used memory set by the workload (_state["used"]).
FAKE_TORCH_MEM = FAKE_TORCH + '''
_state["used"] = 0
cuda.mem_get_info = staticmethod(lambda: ((100 << 30) - _state["used"], 100 << 30))
cuda.memory_reserved = staticmethod(lambda: _state["used"])
'''

PHASED_CHILD = '''
import json, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import torch
import zoo_child, zoo_workloads


def build(torch, dev):
    """before 0-5, burst 6-8 (3 GiB used), after 9-19: 1 GiB held to step
    13, 512 MiB from step 14 on (a trim, under the fake adaptalloc)."""
    def step(i):
        torch._state["used"] = (3072 if 6 <= i < 9 else 1024 if i < 14 else 512) << 20
        if i < 6:
            torch._state["used"] = 512 << 20
        torch._state["trims"] = 1 if i >= 14 else 0
        return i

    step.phases = zoo_workloads.phase_bounds((("before", 6), ("burst", 3), ("after", 11)))
    step.pace_s = 0.05
    return step, 20, 2


zoo_workloads.BUILD["phased"] = build
print(json.dumps(zoo_child.child("phased", sys.argv[3], None)))
'''

# adaptalloc beside FAKE_TORCH_MEM: the loop's trims as the workload sets them
FAKE_ADAPTALLOC = '''
import sys


def stats():
    torch = sys.modules["torch"]  # (the name torch here is adaptalloc.torch)
    t = torch._state.get("trims", 0)
    return {"pools": [{"name": "device0", "backend": "cuda",
                       "bytes_reserved": torch._state["used"]}],
            "adapt": {"enabled": True, "steps": 20, "trims": t,
                      "bytes_trimmed": t * (512 << 20), "audit": []}}
'''


@pytest.mark.parametrize("mode", ["default", "native"])
def test_phased_run_is_paced_and_its_memory_after_the_burst_tabled(tmp_path, capsys, mode):
    import subprocess

    (tmp_path / "fake" / "adaptalloc").mkdir(parents=True)
    (tmp_path / "fake" / "torch.py").write_text(FAKE_TORCH_MEM)
    (tmp_path / "fake" / "adaptalloc" / "__init__.py").write_text(FAKE_ADAPTALLOC)
    (tmp_path / "fake" / "adaptalloc" / "torch.py").write_text("def install():\n"
                                                               "    return 'native'\n")
    (tmp_path / "child.py").write_text(PHASED_CHILD)
    r = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(tmp_path / "fake"),
                        os.path.join(ROOT, "bench", "gpu"), mode], capture_output=True,
                       text=True, env=dict(os.environ, PYTHONPATH=""), timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    ser = res["series"]
    assert res["phases"] == [["before", 0, 6], ["burst", 6, 9], ["after", 9, 20]]
    assert all(len(ser[k]) == 20 for k in ("t_s", "used_mib", "reserved_mib", "trims"))
    # step i's figures are taken after it: i + 1 arrivals (the last unwaited) apart
    assert ser["t_s"][19] >= 19 * 0.05 - 0.01 and ser["t_s"][19] < 19 * 0.05 + 1.0
    assert ser["used_mib"][5] == 512 and ser["used_mib"][7] == 3072
    assert ser["used_mib"][13] == 1024 and ser["used_mib"][19] == 512
    assert len(res["step_ms"]) == 18 and max(res["step_ms"]) < 50  # the waits are not timed
    # the counters over the steps from the fifth on (zoo_child.FROM_STEP): 16 of 20
    fs = res["from_step"]
    assert fs["step"] == 5 and fs["steps"] == 16
    assert fs["torch_stats"] == {"num_device_alloc": 0, "num_device_free": 0}
    assert res["torch_stats"] == {"num_device_alloc": 0, "num_device_free": 0}
    if mode == "native":
        assert fs["backend"]["backend_calls"] == 0 and fs["backend"]["alias_calls"] == 0
    else:
        assert fs["backend"] is None
    f = bench_zoo.phase_figures(res)
    assert f["phases"]["before"]["end_used_mib"] == 512
    assert f["phases"]["burst"]["max_used_mib"] == 3072
    assert f["held_mib"] == 0
    # half of the burst's extra (2560 MiB) back: at 1024 MiB (step 9) already
    assert f["half_back_s"] == pytest.approx(ser["t_s"][9] - ser["t_s"][8])
    if mode == "default":
        assert ser["trims"] == [None] * 20  # not adaptalloc: no loop
        assert f["trims"] is None and f["first_trim_s"] is None
    else:  # the trim seen at step 14
        assert ser["trims"] == [0] * 14 + [1] * 6 and ser["trimmed_mib"][19] == 512
        assert f["trims"] == 1 and f["trimmed_mib"] == 512
        assert f["first_trim_s"] == pytest.approx(ser["t_s"][14] - ser["t_s"][8])
        assert res["pool"]["adapt"]["trims"] == 1
    s = bench_zoo.summarise({"phased": {mode: [res]}}, [mode], ["phased"])
    bench_zoo.print_tables(s, [mode])
    out = capsys.readouterr().out
    assert "memory after a burst" in out
    assert f"| phased | {mode} | " in out and "| 512 | 3072 | 512 | 0 |" in out


def test_phase_figures_of_a_trimming_run():
    """A native run whose loop trims twice in the phase after the burst: the
    trims counted from the phase's start, the first one's time from the
    burst's last step, the step time after it."""
    t = [0.1 * i for i in range(10)]
    r = {"warm": 1, "warm_ms": [9.0], "step_ms": [1.0] * 4 + [5.0] + [2.0] * 4,
         "phases": [["before", 0, 3], ["burst", 3, 5], ["after", 5, 10]],
         "step_device_calls": [[1, 0]] * 5 + [[0, 0]] * 3 + [[0, 1], [2, 0]],
         "series": {"t_s": t, "used_mib": [400, 400, 400, 2400, 2400, 2400, 2400, 600, 600, 650],
                    "reserved_mib": [None] * 10, "trims": [0, 0, 0, 0, 1, 1, 1, 2, 3, 3],
                    "trimmed_mib": [0, 0, 0, 0, 8, 8, 8, 1808, 1858, 1858]}}
    f = bench_zoo.phase_figures(r)
    assert f["held_mib"] == 250
    assert f["half_back_s"] == pytest.approx(t[7] - t[4])
    assert f["trims"] == 2 and f["trimmed_mib"] == 1850
    assert f["first_trim_s"] == pytest.approx(t[7] - t[4])
    assert f["after_trim_step_ms"] == 2.0
    assert f["phases"]["before"]["step_ms"] == 1.0  # the warm-up step left out
    assert f["phases"]["after"]["device_calls"] == 3
    assert f["phases"]["burst"]["device_calls"] == 2


def test_phase_table_lists_the_loops_audit_with_its_trims(capsys):
    t = [0.1 * i for i in range(6)]
    r = {"warm": 0, "warm_ms": [], "step_ms": [1.0] * 6, "peak_mib": 2048.0, "rep": 0,
         "phases": [["before", 0, 2], ["burst", 2, 3], ["after", 3, 6]],
         "series": {"t_s": t, "used_mib": [300, 300, 2048, 2048, 500, 500],
                    "reserved_mib": [None] * 6, "trims": [0, 0, 0, 0, 1, 1],
                    "trimmed_mib": [0, 0, 0, 0, 1548, 1548]},
         "pool": {"adapt": {"enabled": True, "steps": 30, "decisions": 2, "classes_added": 0,
                            "classes_retired": 0, "grows": 0, "trims": 1,
                            "bytes_trimmed": 1548 << 20, "rejected_by_replay": 1, "audit": [
                                {"pool": "device0", "step": 3, "kind": "add_class",
                                 "block_size": 3072, "applied": False,
                                 "predicted": {"peak_reserved_before": 10 << 20,
                                               "peak_reserved_after": 16 << 20},
                                 "measured": None},
                                {"pool": "device0", "step": 20, "kind": "trim", "block_size": 0,
                                 "applied": True, "released": 1548 << 20, "predicted": None,
                                 "measured": {"reserved_before": 2048 << 20,
                                              "reserved_after": 500 << 20}}]}}}
    off = dict(r, pool={"adapt": {"enabled": False}},
               series=dict(r["series"], used_mib=[300, 300, 2048, 2048, 2048, 2048],
                           trims=[None] * 6, trimmed_mib=[None] * 6))
    modes = ["native", "native@off"]
    s = bench_zoo.summarise({"burst": {"native": [r], "native@off": [off]}}, modes, ["burst"])
    bench_zoo.print_tables(s, modes)
    out = capsys.readouterr().out
    assert "| burst | native | 2048 | 300 | 2048 | 500 | 200 | 0.2 | 1 (1548; 0.2) |" in out
    assert "| burst | native@off | 2048 | 300 | 2048 | 2048 | 1748 | - | - |" in out
    assert "burst native rep 1: loop 30 steps, 2 decisions" in out
    assert "1 trims (1548.0 MiB), 1 rejected by replay" in out
    assert "audit: pool device0 step 3 add_class 3072 B not applied; replay 10.0 -> 16.0" in out
    assert ("audit: pool device0 step 20 trim gave back 1548.0 MiB applied; measured "
            "2048.0 -> 500.0 MiB") in out
    assert "burst native@off rep 1: loop off" in out


# ---- bench/gpu/bench_maxbatch.py: the search, and the harness on a fake torch

import bench_maxbatch  # noqa: E402

FAKE_TORCH_DIR = os.path.join(ROOT, "tests", "python", "faketorch")  # torch + adaptalloc


def _probe_until(limit, seen):
    def probe(size):
        seen.append(size)
        return size <= limit
    return probe


def test_maxbatch_search_doubles_then_bisects():
    seen = []
    r = bench_maxbatch.search(_probe_until(864, seen), 128, 32, 16384)
    assert r == {"best": 864, "fail": 896, "complete": True, "at_max": False, "stopped": False}
    assert seen[:4] == [128, 256, 512, 1024]  # doubling, then bisection between 512 and 1024
    assert all(s % 32 == 0 for s in seen) and len(seen) == 4 + 4


def test_maxbatch_search_edges():
    # nothing fits: bisects below the start down to the step
    assert bench_maxbatch.search(lambda s: False, 16, 4, 100)["best"] == 0
    # everything fits: stops at the maximum, flagged
    r = bench_maxbatch.search(lambda s: True, 1, 1, 5)
    assert r["best"] == 5 and r["at_max"] and r["fail"] is None and r["complete"]
    # a start off the grid is rounded up to it
    seen = []
    bench_maxbatch.search(_probe_until(50, seen), 10, 4, 100)
    assert seen[0] == 12
    # a stopped probe (budget, error) ends the search with what it had
    r = bench_maxbatch.search(lambda s: True if s < 64 else None, 16, 8, 4096)
    assert r["best"] == 32 and r["stopped"] and not r["complete"]
    with pytest.raises(ValueError):
        bench_maxbatch.search(lambda s: True, 1, 8, 4)


def _run_fake(monkeypatch, tmp_path, capsys, *args):
    monkeypatch.setenv("PYTHONPATH", FAKE_TORCH_DIR)
    out = tmp_path / "mb.json"
    monkeypatch.setattr(sys, "argv", ["bench_maxbatch.py", "--workloads", "smoke",
                                      "--out", str(out)] + list(args))
    rc = bench_maxbatch.main()
    with open(out) as f:
        return rc, json.load(f), capsys.readouterr().out


def test_maxbatch_harness_on_fake_torch(monkeypatch, tmp_path, capsys):
    # the fake device checks the cap (0.25 GiB) against reserved bytes; a step
    # holds size + size/2 MiB, so 168 fits (252 MiB) and 176 (264) does not
    rc, doc, out = _run_fake(monkeypatch, tmp_path, capsys)
    assert rc == 0
    runs = doc["workloads"]["smoke"]["runs"]
    assert runs["native"]["pool_limit"] == [1 << 28]  # the fraction reached the pool
    for m in ("native", "default", "expandable"):
        assert runs[m]["result"]["best"] == 168 and runs[m]["result"]["fail"] == 176
        assert runs[m]["cap"] == 1 << 28
        ok = [p for p in runs[m]["probes"] if p["ok"]]
        assert ok and all(p["non_allocator"] == 500 << 20 for p in ok)
    # the uncapped run measured the largest size and the next
    assert [p["size"] for p in runs["floor"]["probes"]] == [168, 176]
    rows = {r["workload"]: r for r in doc["summary"]}
    d = rows["smoke"]["modes"]["default"]
    assert d["at_limit"] is True and d["next_uncapped_peak_allocated"] == 264 << 20
    assert d["peak_allocated"] == 252 << 20 and not d["reserved_over_cap"]
    assert d["next_extrapolated_peak_allocated"] == 264 << 20 and d["at_limit_extrapolated"]
    assert ("| smoke (the harness's check) (two tensors) | MiB | 0.25 GiB | 168 | 168 | 168 "
            "| 1.000 | yes (176 allocates 264 MiB uncapped, 264 MiB extrapolated) |") in out


def test_maxbatch_one_process_per_probe(monkeypatch, tmp_path, capsys):
    rc, doc, _ = _run_fake(monkeypatch, tmp_path, capsys, "--modes", "default",
                           "--probe-process", "--no-limit-check")
    r = doc["workloads"]["smoke"]["runs"]["default"]
    assert rc == 0 and r["per_probe_process"] and r["result"]["best"] == 168
    assert "floor" not in doc["workloads"]["smoke"]["runs"]


def test_maxbatch_budget_stops_with_a_lower_bound(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("FAKETORCH_SLEEP", "0.3")  # each synchronize: 0.3 s
    monkeypatch.setattr(bench_maxbatch, "START_FLOOR_S", 0.5)
    rc, doc, out = _run_fake(monkeypatch, tmp_path, capsys, "--modes", "default,expandable",
                             "--budget-s", "2")
    runs = doc["workloads"]["smoke"]["runs"]
    res = runs["default"]["result"]
    assert not res["complete"] and res["best"] < 168  # stopped with what it had
    assert runs["expandable"] is None and "smoke/expandable" in doc["skipped"]
    assert "(partial)" in out


def test_maxbatch_native_must_be_the_native_allocator(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("FAKE_ADAPTALLOC_INSTALL", "pluggable")
    rc, doc, out = _run_fake(monkeypatch, tmp_path, capsys, "--modes", "native,default",
                             "--no-limit-check")
    assert rc == 1 and "FAILED: smoke/native" in out
    assert "gave 'pluggable', not the native allocator" in \
        doc["workloads"]["smoke"]["runs"]["native"]["stderr_tail"]
    assert doc["workloads"]["smoke"]["runs"]["default"]["result"]["best"] == 168


def test_maxbatch_killed_child_keeps_its_probes(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("FAKETORCH_SLEEP", "0.4")
    rc, doc, out = _run_fake(monkeypatch, tmp_path, capsys, "--modes", "default",
                             "--no-limit-check", "--budget-s", "0", "--timeout-s", "1.8")
    r = doc["workloads"]["smoke"]["runs"]["default"]
    assert rc == 1 and r["rc"] == 124 and "FAILED: smoke/default (rc 124)" in out
    # what its probes said before the kill (how many depends on the machine's load)
    assert not r["result"]["complete"] and r["result"]["best"] < 168
    assert r["result"]["best"] == max([p["size"] for p in r["probes"] if p["ok"]], default=0)


def test_maxbatch_failed_child_is_an_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("FAKETORCH_FAIL_INIT", "1")
    rc, doc, out = _run_fake(monkeypatch, tmp_path, capsys, "--modes", "default",
                             "--no-limit-check")
    assert rc == 1 and "FAILED: smoke/default" in out
    assert doc["workloads"]["smoke"]["runs"]["default"]["rc"] != 0


def test_maxbatch_bad_arguments(monkeypatch):
    for args in (["--workloads", "resnet"], ["--modes", "async"], ["--cap-gib", "bert=x"],
                 ["--step", "nope=4"], ["--step", "gpt2=0"], ["--step", "gpt2=100000"]):
        monkeypatch.setattr(sys, "argv", ["bench_maxbatch.py"] + args)
        with pytest.raises(SystemExit) as e:
            bench_maxbatch.main()
        assert "bench_maxbatch:" in str(e.value)


def _util_run(w, m, peak, res, alloc, calls=None, rep=0, pid=1, **extra):
    r = {"workload": w, "mode": m, "rep": rep, "pid": pid, "peak_mib": peak,
         "torch": {"max_reserved": res * MIB, "max_allocated": alloc * MIB},
         "step_device_calls": [[9, 9]] * 4 + [[1, 0]] * 6, "warm": 2}
    if calls is not None:
        r["from_step"] = {"step": 5, "steps": 6, "torch_stats": {}, "backend": calls}
    r.update(extra)
    return r


MIB = 1 << 20


def test_util_table_from_json_and_result_lines(tmp_path):
    """zoo_report.py --util-table: the driver peak, reserved, allocated,
    utilisation, the ratio to the best PyTorch setting, backend calls per
    step from the fifth step (the pool's counters with the alias calls for
    adaptalloc, num_device_alloc + free for PyTorch), retries and segments;
    a run found in both a JSON and a log counts once; the runs of a log
    whose JSON was never written are read from its RESULT lines."""
    import subprocess

    import zoo_report

    nat = _util_run("moe", "native", 5700, 5500, 5250,
                    {"backend_calls": 12, "alias_calls": 0, "pages_mapped": 3,
                     "stream_waits": 9})
    st = _util_run("moe", "native@st", 5600, 5400, 5250,
                   {"backend_calls": 0, "alias_calls": 6, "pages_mapped": 0})
    dfl = _util_run("moe", "default", 6900, 6700, 5250,
                    torch_stats={"num_alloc_retries": 2, "segment.all.peak": 40,
                                 "segment.all.allocated": 55})
    exp = _util_run("moe", "expandable", 5800, 5580, 5250)
    doc = {"modes": ["native", "native@st", "default", "expandable"],
           "runs": {"moe": {"native": [nat], "native@st": [st], "default": [dfl],
                            "expandable": [exp]}}}
    (tmp_path / "zoo.json").write_text(json.dumps(doc))
    # a second call's log: gpt2 (only there) and moe's native again (a duplicate)
    g = _util_run("gpt2", "default", 9000, 8900, 7300, pid=7)
    (tmp_path / "bench.log").write_text("  moe native peak ...\nRESULT " + json.dumps(nat) +
                                        "\nRESULT " + json.dumps(g) + "\nnoise\n")
    runs = zoo_report.load_runs([str(tmp_path / "zoo.json"), str(tmp_path / "bench.log")])
    assert list(runs) == ["moe", "gpt2"] and len(runs["moe"]["native"]) == 1
    s = zoo_report.util_summary(runs)
    assert s["moe"]["best"] == "expandable" and s["moe"]["best_peak_mib"] == 5800
    assert s["moe"]["modes"]["native@st"]["calls_per_step"] == 1.0
    assert s["moe"]["modes"]["native@st"]["alias_per_step"] == 1.0
    assert s["moe"]["modes"]["native"]["calls_per_step"] == 2.0
    assert s["moe"]["modes"]["native"]["waits_per_step"] == 1.5  # not among the calls
    assert s["moe"]["modes"]["native@st"]["waits_per_step"] is None  # a run without the figure
    assert s["moe"]["modes"]["default"]["calls_per_step"] == 1.0  # steps 5+ of step_device_calls
    assert s["moe"]["modes"]["default"]["util"] == pytest.approx(5250 / 6700)
    assert zoo_report.util_modes(s) == ["native", "native@st", "default", "expandable"]
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu", "zoo_report.py"),
                        "--util-table", str(tmp_path / "zoo.json"), str(tmp_path / "bench.log"),
                        "--json", str(tmp_path / "util.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert ("| moe | 5,700 | 5,600 | 6,900 | 5,800 | expandable 5,800 | 0.983 | 0.966 | "
            "0.955 | 0.972 | 0.784 | 0.941 |") in out, out
    assert "| moe | native@st | 1 | 5,600 | 5,400 | 5,250 | 0.972 | 1.00 (1.00) | - | - | - |" in out
    assert "| moe | native | 1 | 5,700 | 5,500 | 5,250 | 0.955 | 2.00 (0.00) | 1.50 | - | - |" in out
    assert "| moe | default | 1 | 6,900 | 6,700 | 5,250 | 0.784 | 1.00 | - | 2 | 40 / 55 |" in out
    assert "| gpt2 | - | - | 9,000 | - | default 9,000 | - | - | - | - | 0.820 | - |" in out
    assert json.loads((tmp_path / "util.json").read_text())["gpt2"]["best"] == "default"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu", "zoo_report.py"),
                        "--util-table", str(tmp_path / "nothing.json")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "zoo_report: " in r.stderr


def test_new_workloads_are_registered_apart_from_the_ten():
    import zoo_workloads

    assert zoo_workloads.NEW_WORKLOADS == ["phases", "shapes", "offload", "vit"]
    assert not set(zoo_workloads.NEW_WORKLOADS) & set(zoo_workloads.WORKLOADS)
    assert all(w in zoo_workloads.BUILD for w in zoo_workloads.NEW_WORKLOADS)
    b = zoo_workloads.shapes_batches()
    assert b == zoo_workloads.shapes_batches()  # seeded
    assert len({n for n, _ in b}) > 12  # the padded length hardly repeats
    for n, lens in b:
        assert 16 <= n <= 1536 and len(lens) * n <= 4096 or len(lens) == 1
        assert all(n // 2 <= x <= n for x in lens)
