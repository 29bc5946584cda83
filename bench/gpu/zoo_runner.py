"""The GPU workload zoo (bench_zoo.py), one concern: running the runs -- a
server per mode that imports once and forks a child per run, or a fresh
interpreter per run, and the lockstep of a workload's modes.
"""
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import benchcpu  # bench/gpu/benchcpu.py; bench_zoo.py put bench/gpu on sys.path
import lockstep  # bench/gpu/lockstep.py
from zoo_child import CUDA_READY, WARM_ONLY, child
from zoo_modes import base_mode, mode_env
from zoo_workloads import preload

# the harness, which the runner starts again as a server (--server) or a run (--child)
ZOO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_zoo.py")


NATIVE_MISSING = "adaptalloc's native allocator is not available"
INIT_LIMIT_S = 45  # a forked run not past CUDA initialisation by then is killed


def serve(mode, workloads):
    """A server: imports once, then for each job line `workload steps capture
    result_path log_path timeout_s lockstep_prefix` (tab-separated; "-" for
    none) forks a child that runs it and answers `DONE rc`. Answers `READY`
    after the imports, or `ERROR why`."""
    out = sys.stdout
    try:
        benchcpu.pin_cpus()  # the imports too run where the measured children will
        preload(workloads)
        if base_mode(mode) == "native":
            import adaptalloc.torch as aat

            ok, why = aat.native_available()
            if not ok:
                raise RuntimeError("%s (%s); install the package first: pip install ."
                                   % (NATIVE_MISSING, why))
    except Exception as e:  # noqa: BLE001 - reported to the runner, which goes on
        out.write("ERROR %s: %s\n" % (type(e).__name__, str(e).replace("\n", " ")))
        out.flush()
        return
    out.write("READY\n")
    out.flush()
    for line in sys.stdin:
        w, steps, cap, result_path, log_path, timeout, turns = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            rc = 1
            try:
                fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                sys.stdout = os.fdopen(1, "w", buffering=1)
                sys.stderr = os.fdopen(2, "w", buffering=1)
                res = child(w, mode, cap if cap != "-" else None,
                            steps if steps == WARM_ONLY else int(steps) or None,
                            turns if turns != "-" else None)
                with open(result_path, "w") as f:
                    json.dump(res, f)
                rc = 0
            except BaseException:  # noqa: BLE001 - the child reports and exits
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(rc)
        t0 = time.time()
        deadline, ready_by = t0 + float(timeout), t0 + min(INIT_LIMIT_S, float(timeout))
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                break
            if ready_by and time.time() > ready_by:  # a fork stuck before CUDA came up
                ready_by = None
                if not os.path.exists(log_path):
                    deadline = 0
                else:
                    with open(log_path, errors="replace") as f:
                        if CUDA_READY not in f.read():
                            deadline = 0
            if time.time() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                rc = 124
                break
            time.sleep(0.02)
        out.write("DONE %d\n" % rc)
        out.flush()


class Runner:
    """Runs (workload, mode) jobs: through a per-mode server's forks, or a
    fresh interpreter per run (--no-fork, or after a forked run failed)."""

    def __init__(self, modes, workloads, fork, runtime, timeout):
        self.tmp = tempfile.mkdtemp(prefix="aa-zoo-")
        self.runtime, self.timeout, self.fork = runtime, timeout, fork
        self.servers = {}
        self.n = 0
        if fork:
            for m in modes:  # started together: the imports overlap
                self.servers[m] = subprocess.Popen(
                    [sys.executable, ZOO, "--server", m,
                     "--workloads", ",".join(workloads)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                    env=mode_env(m, self.tmp, runtime), cwd=self.tmp)
        self.ready = {}
        self.unavailable = {}  # mode -> why its runs are not made

    def _server(self, mode):
        """The mode's server once it is ready, or None (then spawn)."""
        p = self.servers.get(mode)
        if p is None:
            return None
        if mode not in self.ready:
            line = "x"
            while line and not line.startswith(("READY", "ERROR")):  # skip stray prints
                line = p.stdout.readline()
            line = line.strip()
            self.ready[mode] = line == "READY"
            if line.startswith("ERROR") and NATIVE_MISSING in line:
                self.unavailable[mode] = line[6:]
            if not self.ready[mode]:
                print(f"  {mode}: server: {line or 'exited'}; a new interpreter per run",
                      flush=True)
        return p if self.ready[mode] else None

    def _start(self, p, workload, steps, capture, turns=None):
        """Sends a job to a server; returns (result path, log path)."""
        self.n += 1
        result = os.path.join(self.tmp, f"r{self.n}.json")
        log = os.path.join(self.tmp, f"r{self.n}.log")
        p.stdin.write("\t".join([workload, str(steps or 0), capture or "-", result, log,
                                 str(self.timeout), turns or "-"]) + "\n")
        p.stdin.flush()
        return result, log

    def _forked(self, p, workload, mode, steps, capture):
        result, log = self._start(p, workload, steps, capture)
        return self._finish(p, mode, result, log)

    def _finish(self, p, mode, result, log):
        r, _, _ = select.select([p.stdout], [], [], self.timeout + 30)
        line = p.stdout.readline().strip() if r else ""
        if line == "DONE 0" and os.path.exists(result):
            with open(result) as f:
                return json.load(f), None, False
        with open(log, errors="replace") if os.path.exists(log) else open(os.devnull) as f:
            text = f.read()
        if not line:  # the server is gone or stuck: no more forks for this mode
            self.ready[mode] = False
        # a fork that failed before CUDA was ready is retried in a new interpreter
        return None, f"{line or 'no answer from the server'}: {text[-1500:]}", \
            CUDA_READY not in text

    def _spawned(self, workload, mode, steps, capture):
        cmd = [sys.executable, ZOO, "--child", workload, mode]
        if steps:
            cmd += ["--steps", f"{workload}={steps}"]
        if capture:
            cmd += ["--capture", capture]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, cwd=self.tmp,
                               env=mode_env(mode, self.tmp, self.runtime), timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {self.timeout} s"
        if r.returncode != 0:
            return None, f"rc={r.returncode}: {r.stderr[-1500:]}"
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            return None, f"no result line: {r.stderr[-1500:]}"
        return json.loads(lines[-1]), None

    def warm_jit(self, workload, mode):
        """The JIT warm-up run: the workload's first pass once under `mode`,
        not measured (its figures are dropped), so that the kernels the
        driver compiles on first use are in its per-machine cache before any
        measured run (see bench_zoo.py). Returns its seconds, or None."""
        t0 = time.time()
        res = self.run(workload, mode, WARM_ONLY, measured=False)
        if res is None:
            print(f"  {workload:8s} JIT warm-up under {mode}: did not complete (above); the "
                  "measured runs go on", flush=True)
            return None
        took = time.time() - t0
        print(f"  {workload:8s} JIT warm-up under {mode} (first pass, not measured): steps "
              f"{', '.join(f'{x:.0f}' for x in res['step_ms'])} ms ({took:.1f} s)", flush=True)
        return took

    def run(self, workload, mode, steps=None, capture=None, rep=0, measured=True):
        t0 = time.time()
        if mode in self.unavailable:
            print(f"  {workload}/{mode}: not run ({self.unavailable[mode]})", flush=True)
            return None
        p = self._server(mode)
        if p is None and mode in self.unavailable:
            print(f"  {workload}/{mode}: not run ({self.unavailable[mode]})", flush=True)
            return None
        res, err, retry = None, None, True
        if p is not None:
            res, err, retry = self._forked(p, workload, mode, steps, capture)
            if res is None and retry:
                print(f"  {workload}/{mode}: forked run FAILED before CUDA was ready ({err}); "
                      "again in a new interpreter", flush=True)
        if res is None and retry:
            res, err = self._spawned(workload, mode, steps, capture)
            if res is not None and p is not None:
                self.ready[mode] = False  # the fork failed where a new process worked
        if res is None:
            print(f"  {workload}/{mode}: FAILED {err}", flush=True)
            return None
        return self._report(res, workload, mode, t0, rep) if measured else res

    def _report(self, res, workload, mode, t0, rep):
        res["process_s"] = time.time() - t0
        res["rep"] = rep
        print("RESULT " + json.dumps(res), flush=True)
        cal = res.get("calib", {})
        cpu = "  cpu %s us/op (before/after)" % "/".join(
            f"{cal[k]['torch_us']:.2f}" if "torch_us" in cal.get(k, {}) else "-"
            for k in ("before", "after"))
        if res.get("cpu_steps"):
            cpu += "  threads' CPU %.2f s main, %.2f s others" % (res["cpu_steps"]["main"],
                                                                res["cpu_steps"]["others"])
        print(f"  {workload:8s} {mode:10s} peak {res['peak_mib']:9.1f} MiB  step "
              f"{statistics.median(res['step_ms'] or res['warm_ms']):8.2f} ms{cpu}  "
              f"({res['process_s']:.1f} s)", flush=True)
        return res

    def run_lockstep(self, workload, modes, steps=None, rep=0):
        """Runs the workload under every mode at once, the steps taking turns
        (lockstep.py); {mode: figures} of the runs that succeeded."""
        t0 = time.time()
        jobs = {}
        for m in modes:
            p = self._server(m)
            if p is None:
                why = self.unavailable.get(m, "no server (lockstep needs the forking servers)")
                print(f"  {workload}/{m}: not run in lockstep ({why})", flush=True)
            else:
                jobs[m] = p
        lead = lockstep.Leader(self.tmp, list(jobs), self.timeout)
        try:
            files = {m: self._start(p, workload, steps, None, lead.prefix[m])
                     for m, p in jobs.items()}

            def alive(m):  # its server has not answered DONE yet
                r, _, _ = select.select([jobs[m].stdout], [], [], 0)
                return not r

            state = lead.run(alive)
            out = {}
            for m, p in jobs.items():
                res, err, _ = self._finish(p, m, *files[m])
                if res is None or state[m] != "finished":
                    print(f"  {workload}/{m}: lockstep run FAILED ({state[m]}; "
                          f"{err or 'it did not finish its steps'})", flush=True)
                    continue
                res["lockstep"] = [x for x in jobs]
                out[m] = self._report(res, workload, m, t0, rep)
            return out
        finally:
            lead.close()

    def close(self):
        for p in self.servers.values():
            try:
                p.stdin.close()
                p.wait(timeout=10)
            except Exception:  # noqa: BLE001 - best effort at exit
                p.kill()
