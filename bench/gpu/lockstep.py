"""Lockstep: two or more benchmark processes take turns, one step each.

The machine's speed drifts over seconds (a virtual machine's CPU share), so
two runs measured one after the other differ by more than what they
compare. In lockstep the runs of one workload (one process per allocator)
are started together, build their models at the same time, and then run
their steps alternately, one process at a time: step k of every run lies
within a few hundred milliseconds of the others' step k, and no two steps
overlap on the CPU or the GPU. The order within a round alternates (A B,
then B A) so that neither run always goes first.

Protocol, over two FIFOs per run (PREFIX.go, PREFIX.done), one byte each:
the run writes "h" once it is ready for its first step; before each step
it waits for "g"; after the step it writes "d"; after its last step it
writes "x". The leader holds both FIFOs open read-write, so neither side
blocks on opening and a run that dies shows as a timeout, not a hang.
"""
import os
import select
import time


class Follower:
    """The run's side (in the measured process)."""

    def __init__(self, prefix):
        self.go = os.open(prefix + ".go", os.O_RDONLY)
        self.done = os.open(prefix + ".done", os.O_WRONLY)

    def ready(self):
        os.write(self.done, b"h")

    def before_step(self):
        """Blocks until the leader lets this run take its step."""
        while True:
            b = os.read(self.go, 1)
            if b == b"g":
                return
            if not b:
                raise RuntimeError("lockstep: the leader went away")

    def after_step(self):
        os.write(self.done, b"d")

    def finish(self):
        os.write(self.done, b"x")
        os.close(self.go)
        os.close(self.done)


class Leader:
    """The runner's side: makes the FIFOs, waits for every run to be ready,
    then lets them take turns until all have finished."""

    def __init__(self, tmpdir, names, timeout_s):
        self.names = list(names)
        self.timeout = timeout_s
        self.prefix = {n: os.path.join(tmpdir, "ls-%d-%s" % (os.getpid(), n.replace("@", "_")))
                       for n in self.names}
        self.fds = {}
        for n, p in self.prefix.items():
            for suffix in (".go", ".done"):
                if os.path.exists(p + suffix):
                    os.unlink(p + suffix)
                os.mkfifo(p + suffix)
            self.fds[n] = (os.open(p + ".go", os.O_RDWR), os.open(p + ".done", os.O_RDWR))
        self.state = {n: "starting" for n in self.names}  # -> ready, finished, failed
        self.steps = {n: 0 for n in self.names}

    def _read(self, n, timeout):
        fd = self.fds[n][1]
        r, _, _ = select.select([fd], [], [], timeout)
        return os.read(fd, 1) if r else b""

    def run(self, alive=lambda n: True):
        """Drives the runs to the end; returns {name: state}. `alive(name)`
        says whether a run's process still exists (checked while waiting)."""
        for n in self.names:  # each builds its model first
            self.state[n] = "ready" if self._wait(n, b"h", alive) else "failed"
        rnd = 0
        while any(s == "ready" for s in self.state.values()):
            order = self.names if rnd % 2 == 0 else self.names[::-1]
            for n in order:
                if self.state[n] != "ready":
                    continue
                os.write(self.fds[n][0], b"g")
                got = self._wait(n, b"dx", alive)
                if got == b"d":
                    self.steps[n] += 1
                elif got == b"x":  # it had finished: the "g" stays unread
                    self.state[n] = "finished"
                else:
                    self.state[n] = "failed"
            rnd += 1
        return dict(self.state)

    def _wait(self, n, want, alive):
        end = time.time() + self.timeout
        while time.time() < end:
            b = self._read(n, 0.5)
            if b and b in want:
                return b
            if not b and not alive(n):
                return None
        return None

    def close(self):
        for n, (g, d) in self.fds.items():
            os.close(g)
            os.close(d)
            for suffix in (".go", ".done"):
                try:
                    os.unlink(self.prefix[n] + suffix)
                except OSError:
                    pass
        self.fds = {}
