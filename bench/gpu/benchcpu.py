"""CPU placement and speed of a GPU benchmark's processes, shared by
bench_zoo.py and bench_native.py.

A workload bound by Python and kernel launches runs as fast as the CPU its
process gets, and on a virtual machine that speed can differ by up to 2x
between processes. So every measured process
  - is pinned to one CPU set, the same for every allocator: by default the
    CPUs local to the GPU (/sys/bus/pci/devices/<bus id>/local_cpulist), all
    CPUs where that cannot be read (pin_cpus(), before CUDA is initialised,
    so the driver's threads inherit it);
  - times a fixed CPU loop before and after its measurements (calibrate()):
    a pure-Python loop (ms) and a loop of small torch CPU operations (us per
    op, the dispatcher work every kernel launch pays), so a reader sees how
    fast the process ran, apart from anything the allocator does.
thread_cpu()/cpu_between() give the CPU time each thread of the process
used (a runtime's own threads against the main thread), paired() the
per-step ratios of two runs of a seeded workload.

Nothing here touches CUDA: pin_cpus and gpu_local_cpus use nvidia-smi and
sysfs only, so a server may call them before it forks its children.
"""
import os
import statistics
import subprocess
import time

ENV_CPUS = "AA_BENCH_CPUS"  # the CPU list the parent chose; children apply it


def parse_cpulist(text):
    """`0-3,8,10-11` -> {0, 1, 2, 3, 8, 10, 11}; ValueError naming the bad item."""
    cpus = set()
    for item in (text or "").strip().split(","):
        item = item.strip()
        if not item:
            continue
        lo, dash, hi = item.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"{item!r} is not a CPU number or range N-M")
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a:
            raise ValueError(f"{item!r}: the range ends before it starts")
        cpus.update(range(a, b + 1))
    if not cpus:
        raise ValueError(f"{text!r} names no CPU")
    return cpus


def format_cpulist(cpus):
    """{0, 1, 2, 3, 8} -> `0-3,8`."""
    out, run = [], []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def sysfs_pci(bus_id):
    """nvidia-smi's `00000000:18:00.0` -> sysfs's `0000:18:00.0` (lower case)."""
    dom, _, rest = bus_id.strip().partition(":")
    return f"{dom[-4:]}:{rest}".lower()


def gpu_pci_bus_id(index=None):
    """The PCI bus id (sysfs form) of the GPU CUDA will call device 0, by
    nvidia-smi (no CUDA initialisation); None where it cannot be told."""
    if index is None:
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        index = vis if vis else "0"
    try:
        r = subprocess.run(["nvidia-smi", "-i", str(index), "--query-gpu=pci.bus_id",
                            "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    line = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""
    return sysfs_pci(line) if line.count(":") == 2 else None


def gpu_local_cpus(bus_id=None, sysfs="/sys/bus/pci/devices"):
    """(cpus, where they came from): the GPU's local CPUs that this process
    may use, or all the CPUs it may use."""
    allowed = os.sched_getaffinity(0)
    bus_id = bus_id or gpu_pci_bus_id()
    if bus_id:
        path = os.path.join(sysfs, bus_id, "local_cpulist")
        try:
            with open(path) as f:
                local = parse_cpulist(f.read()) & allowed
            if local:
                return local, f"local to the GPU at {bus_id}"
        except (OSError, ValueError):
            pass
        return allowed, f"all (no local_cpulist for the GPU at {bus_id})"
    return allowed, "all (the GPU's PCI bus id is unknown)"


def choose_cpus(spec):
    """The CPU set for a run: `gpu` (local to the GPU), `all`, `none` (no
    pinning: None) or an explicit list `0-7`. Returns (cpus or None, why)."""
    if spec == "none":
        return None, "not pinned"
    if spec == "all":
        return os.sched_getaffinity(0), "all"
    if spec == "gpu":
        return gpu_local_cpus()
    cpus = parse_cpulist(spec)
    bad = cpus - os.sched_getaffinity(0)
    if bad:
        raise ValueError(f"CPUs {format_cpulist(bad)} are not available to this process")
    return cpus, "given"


def pin_cpus(cpus=None):
    """Pins the calling thread (and every thread it starts later, the CUDA
    driver's included) to `cpus`, or to the list in $AA_BENCH_CPUS; returns
    the set now in force (sorted list) for the run's record."""
    if cpus is None:
        text = os.environ.get(ENV_CPUS)
        cpus = parse_cpulist(text) if text else None
    if cpus:
        os.sched_setaffinity(0, cpus)
    return sorted(os.sched_getaffinity(0))


def calibrate(torch=None, reps=5):
    """Times a fixed CPU job: `py_ms`, a pure-Python loop (ms, median of
    `reps`), and with torch given `torch_us`, small torch CPU operations (us
    per op, median of `reps` runs of 2000). Lower is a faster process."""
    def py():
        s = 0
        for i in range(200000):
            s += i * i
        return s

    out = {}
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        py()
        t.append((time.perf_counter() - t0) * 1e3)
    out["py_ms"] = statistics.median(t)
    if torch is not None:
        x = torch.zeros(16)
        for _ in range(200):
            x.add_(1.0)
        t = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(2000):
                x.add_(1.0)
            t.append((time.perf_counter() - t0) * 1e6 / 2000)
        out["torch_us"] = statistics.median(t)
    return out


def thread_cpu():
    """{thread id: (name, CPU seconds so far)} of this process's threads, from
    /proc/self/task (Linux; {} elsewhere)."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for t in tids:
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                st = f.read()
            with open(f"/proc/self/task/{t}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # the thread ended
        fields = st[st.rindex(")") + 2:].split()  # after "pid (comm) "
        out[int(t)] = (name, (int(fields[11]) + int(fields[12])) / tick)  # utime + stime
    return out


def cpu_between(before, after, main_tid=None):
    """CPU seconds each thread used between two thread_cpu() readings:
    {"main": the main thread's, "others": the rest summed, "threads": the
    busiest others [[name, seconds], ...] (at most 5)}."""
    main_tid = main_tid or os.getpid()
    used = {t: (n, c - before.get(t, (n, 0.0))[1]) for t, (n, c) in after.items()}
    others = sorted(((c, n) for t, (n, c) in used.items() if t != main_tid), reverse=True)
    return {"main": used.get(main_tid, ("", 0.0))[1], "others": sum(c for c, _ in others),
            "threads": [[n, c] for c, n in others[:5] if c > 0]}


def paired(base, other):
    """Per-step ratios base[k] / other[k] of two runs of the same seeded
    steps (for step times: other's speed relative to base); [] if the runs
    differ in length."""
    if not base or not other or len(base) != len(other):
        return []
    return [b / o for b, o in zip(base, other) if o > 0]
