#!/usr/bin/env python3
"""Two DDP ranks on one GPU over gloo, with and without adaptalloc
(issue #25 item 4): per-rank ports and databases, per-rank /stats, and the
same losses as PyTorch's own allocator.

    pip install --no-build-isolation .      # with torch present
    pytest -v -s tests/gpu/test_ddp_ranks.py  (or: python3 tests/gpu/test_ddp_ranks.py)

Each run is `python -m torch.distributed.run --nproc_per_node=2 --standalone
examples/ddp_train.py --backend gloo --one-gpu --model mlp --deterministic`:
both ranks share GPU 0 and train a 0.5 M-parameter MLP (a few MiB of GPU
memory each: the GPU may be shared), each writing its record (--json: its
losses, its peak, its port and its own /stats fetched from its own server
after the last step). The adaptalloc run serves rank r on 127.0.0.1:BASE+r
(BASE and BASE+1 found free) and writes aa-rank{rank}.db in a temporary
folder; the reference run is the same command with --baseline.

Uses the Python running the tests (or ADAPTALLOC_TEST_PYTHON). Skips, with
the reason, without torch, torch.distributed with gloo, a CUDA device or the
installed adaptalloc package.
"""
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile

from gpu_common import PY, pytest, run_all, skip  # noqa: E402 - tests/gpu/gpu_common.py
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "ddp_train.py")
STEPS = 10
WORLD = 2
# Relative loss difference accepted between the adaptalloc and the reference
# run. Both runs start from the same seed with the same batches, run with
# torch.use_deterministic_algorithms(True) and CUBLAS_WORKSPACE_CONFIG set,
# and gloo's allreduce of two ranks adds the same two CPU copies in the same
# order, so the same kernels see the same numbers: the losses are expected to
# be bit for bit equal. The allocator changes only addresses; the one way
# that could change a result is a kernel chosen by pointer alignment (both
# allocators hand out blocks aligned to at least 512 bytes), which would
# reorder fp32 sums: a few ulps (1.2e-7 each) per reduction, over 10 steps of
# a 3-layer MLP well under 1e-5. Anything above it is a different
# computation (wrong data, a block reused while in use), not rounding.
REL_TOL = 1e-5
PEAK_LIMIT = 512 << 20   # each rank's peak reserved; the run needs a few MiB


def _probe():
    code = r"""
import json
def out(why): print(json.dumps(why)); raise SystemExit(0)
try:
    import torch
except ImportError as e: out("no torch (%s)" % e)
if not torch.cuda.is_available(): out("torch sees no CUDA device")
import torch.distributed as dist
if not dist.is_available(): out("this torch has no torch.distributed")
if not dist.is_gloo_available(): out("this torch.distributed has no gloo backend")
try:
    import torch.distributed.run
except ImportError as e: out("no torch.distributed.run (%s)" % e)
try:
    import adaptalloc.torch as t
except ImportError as e: out("the adaptalloc package is not installed (%s)" % e)
if not t.native_available()[0] and t.pluggable_library() is None:
    out("adaptalloc has neither its native allocator nor the pluggable library")
out(None)
"""
    try:
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120,
                           cwd=tempfile.gettempdir())
    except (OSError, subprocess.TimeoutExpired) as e:
        return "%s does not run: %s" % (PY, e)
    if p.returncode != 0 or not p.stdout.strip():
        return "the probe failed: %s" % ((p.stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(p.stdout.strip().splitlines()[-1])


_WHY = _probe()
if pytest is not None:
    pytestmark = pytest.mark.skipif(_WHY is not None, reason="DDP ranks test: %s" % _WHY)


def free_port_pair():
    """A port BASE such that BASE and BASE+1 are both free on 127.0.0.1 now."""
    for _ in range(50):
        a = socket.socket()
        b = socket.socket()
        try:
            a.bind(("127.0.0.1", 0))
            base = a.getsockname()[1]
            if base >= 65535:
                continue
            try:
                b.bind(("127.0.0.1", base + 1))
            except OSError:
                continue
            return base
        finally:
            a.close()
            b.close()
    raise RuntimeError("no two consecutive free ports on 127.0.0.1 in 50 tries")


def run_ranks(folder, tag, extra, env_extra):
    """Runs the example in two ranks; returns (process, [record of rank 0, 1])."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ADAPTALLOC_") and k not in
           ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    env.update({"OMP_NUM_THREADS": "1", "ADAPTALLOC_QUIET": "1"})
    env.update(env_extra)
    out = os.path.join(folder, tag + "-rank{rank}.json")
    cmd = [PY, "-m", "torch.distributed.run", "--nproc_per_node=%d" % WORLD, "--standalone",
           EXAMPLE, "--backend", "gloo", "--one-gpu", "--model", "mlp", "--deterministic",
           "--steps", str(STEPS), "--batch", "32", "--seed", "7", "--lr", "3e-3",
           "--json", out] + extra
    p = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, "%s run failed (rc %d):\n%s\n%s" % (
        tag, p.returncode, p.stdout[-3000:], p.stderr[-5000:])
    recs = []
    for r in range(WORLD):
        with open(out.replace("{rank}", str(r)), encoding="utf-8") as f:
            recs.append(json.load(f))
    return p, recs


_RUNS = {}


def runs():
    """Both runs, made once for every test of this module."""
    if _WHY is not None:
        skip("DDP ranks test: %s" % _WHY)
    if not _RUNS:
        folder = tempfile.mkdtemp(prefix="aa-ddp-ranks-")
        base = free_port_pair()
        _, ours = run_ranks(folder, "adaptalloc", ["--http-base", str(base)],
                            {"ADAPTALLOC_DB": os.path.join(folder, "aa-rank{rank}.db")})
        _, ref = run_ranks(folder, "reference", ["--baseline"], {})
        _RUNS.update(folder=folder, base=base, ours=ours, ref=ref)
        print("\nDDP ranks (gloo, one GPU): peak reserved adaptalloc %s, pytorch %s" % (
            ["%.1f MiB" % (r["peak_reserved_bytes"] / 2**20) for r in ours],
            ["%.1f MiB" % (r["peak_reserved_bytes"] / 2**20) for r in ref]))
    return _RUNS


# ------------------------------------------------------------------ tests

def test_each_rank_serves_its_own_stats():
    d = runs()
    for r, rec in enumerate(d["ours"]):
        assert rec["allocator"].startswith("adaptalloc-"), rec["allocator"]
        assert (rec["rank"], rec["local_rank"], rec["world_size"]) == (r, r, WORLD)
        assert rec["http_port"] == d["base"] + r, (r, rec["http_port"], d["base"])
        assert rec["stats_error"] is None, rec["stats_error"]
        st = rec["stats"]
        assert (st["rank"], st["local_rank"], st["world_size"]) == (r, r, WORLD), st
        assert st["run_id"] == rec["run_id"] and st["run_id"] > 0, (st["run_id"], rec["run_id"])
        pools = {p["name"]: p for p in st["pools"]}
        assert "device0" in pools, sorted(pools)   # --one-gpu: both ranks on GPU 0
        assert pools["device0"]["device"] == 0
        assert pools["device0"]["allocs"] > 0 and pools["device0"]["peak_bytes_reserved"] > 0
        for name, p in pools.items():  # every other GPU pool names its device
            if name.startswith("device"):
                assert p["device"] == int(name[len("device"):]), p
    # two processes, two servers
    assert d["ours"][0]["stats"]["pid"] != d["ours"][1]["stats"]["pid"]


def test_each_rank_writes_its_own_database():
    d = runs()
    dbs = sorted(f for f in os.listdir(d["folder"]) if f.endswith(".db"))
    assert dbs == ["aa-rank0.db", "aa-rank1.db"], dbs   # {rank} expanded, nothing else
    for r, rec in enumerate(d["ours"]):
        con = sqlite3.connect("file:%s?mode=ro" % os.path.join(d["folder"], "aa-rank%d.db" % r),
                              uri=True)
        try:
            rows = con.execute("SELECT id, rank, local_rank, world_size, model, pid "
                               "FROM runs").fetchall()
        finally:
            con.close()
        assert len(rows) == 1, rows
        run_id, rank, local_rank, world, model, pid = rows[0]
        assert (rank, local_rank, world) == (r, r, WORLD), rows[0]
        assert run_id == rec["run_id"] and model == "mlp-ddp", rows[0]
        assert pid == rec["stats"]["pid"], (pid, rec["stats"]["pid"])


def test_losses_match_pytorch_allocator():
    d = runs()
    ours, ref = d["ours"], d["ref"]
    assert [r["allocator"] for r in ref] == ["pytorch"] * WORLD
    for r in range(WORLD):
        assert len(ours[r]["losses"]) == len(ref[r]["losses"]) == STEPS
        # the loss is allreduced: every rank holds the same figure
        assert ours[r]["losses"] == ours[0]["losses"] and ref[r]["losses"] == ref[0]["losses"]
        for rec in (ours[r], ref[r]):
            assert 0 < rec["peak_reserved_bytes"] < PEAK_LIMIT, rec["peak_reserved_bytes"]
    la, lb = ours[0]["losses"], ref[0]["losses"]
    worst, at = 0.0, 0
    for i, (x, y) in enumerate(zip(la, lb)):
        assert x == x and y == y, (i, x, y)   # no NaN
        rel = abs(x - y) / max(abs(y), 1e-12)
        if rel > worst:
            worst, at = rel, i
    print("\nDDP ranks: largest relative loss difference %.3e at step %d (%s; tolerance %.0e)"
          % (worst, at, "bit for bit" if la == lb else "not bit for bit", REL_TOL))
    assert worst <= REL_TOL, "step %d: adaptalloc %r, pytorch %r" % (at, la[at], lb[at])
    # it trained: the mlp learns a fixed linear teacher (ddp_train.py), so
    # the last steps' mean loss is well under the first steps'
    assert sum(la[-3:]) < 0.9 * sum(la[:3]), la


if __name__ == "__main__":  # without pytest: one line a test, 1 on a failure
    sys.exit(run_all(globals(), "DDP ranks test", _WHY))
