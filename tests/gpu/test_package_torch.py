"""GPU tests of the installed adaptalloc package with PyTorch: install() on
both paths, the no-code launcher, and the pinned pool from Python (pinned
tensors, pack, Prefetcher, mapped memory).

    pip install --no-build-isolation .      # with torch present
    pytest tests/gpu/test_package_torch.py

Uses the Python running pytest (or ADAPTALLOC_TEST_PYTHON). Skips, with the
reason, without torch, without a CUDA device or without the package. Each
case runs in a fresh process: the allocator is chosen once per process.
"""
import json
import os
import subprocess
import sys
import textwrap

from gpu_common import PY, pytest, run_all, skip  # noqa: E402 - tests/gpu/gpu_common.py


def _probe():
    code = ("import json, torch, adaptalloc.torch as t; "
            "print(json.dumps([torch.cuda.is_available(), t.native_available()[0], "
            "t.pluggable_library() is not None]))")
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=os.path.expanduser("~") if os.path.isdir(os.path.expanduser("~"))
                       else "/")
    if p.returncode != 0:
        return None, (p.stderr.strip().splitlines() or ["?"])[-1]
    cuda, native, pluggable = json.loads(p.stdout.strip().splitlines()[-1])
    if not cuda:
        return None, "torch sees no CUDA device"
    return {"native": native, "pluggable": pluggable}, None


_INFO, _WHY = _probe()
if pytest is not None:
    pytestmark = pytest.mark.skipif(_INFO is None, reason="adaptalloc GPU tests: %s" % _WHY)


def run(code, tmp_path, env=None, args=(), timeout=300, module=False):
    e = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTALLOC_")}
    e.update({"ADAPTALLOC_DB": "off", "ADAPTALLOC_HTTP": "127.0.0.1:0", "ADAPTALLOC_QUIET": "1"})
    e.update(env or {})
    cmd = [PY] + (["-m", "adaptalloc.torch"] if module else ["-c", textwrap.dedent(code)])
    p = subprocess.run(cmd + list(args), cwd=str(tmp_path), env=e, capture_output=True,
                       text=True, timeout=timeout)
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    out = json.loads(lines[-1]) if p.returncode == 0 and lines else None
    return p, out


def pool(stats, name):
    for p in stats["pools"]:
        if p["name"] == name:
            return p
    return None


# ------------------------------------------------------------------ install

def test_pluggable_install_sets_every_hook(tmp_path):
    if not _INFO["pluggable"]:
        skip("package built without libadaptalloc_torch.so")
    p, d = run("""
        import json, torch, adaptalloc, adaptalloc.torch as aat
        mode = aat.install(native=False, model="plug")
        x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        y = (x * 2).sum().item()
        s1 = adaptalloc.stats()
        del x
        torch.cuda.empty_cache()                       # reset hook
        s2 = adaptalloc.stats()
        torch.cuda.set_per_process_memory_fraction(0.5)  # memory fraction hook
        s3 = adaptalloc.stats()
        total = torch.cuda.get_device_properties(0).total_memory
        print(json.dumps({"mode": mode, "y": y, "model": s1["model"],
                          "d1": aat_pool(s1), "d2": aat_pool(s2), "d3": aat_pool(s3),
                          "total": total, "again": aat.install(native=False)}))
    """.replace("aat_pool(", "(lambda s: [q for q in s['pools'] if q['name']=='device0'][0])("),
        tmp_path)
    assert p.returncode == 0, p.stderr
    assert d["mode"] == "pluggable" and d["again"] == "pluggable"
    assert d["y"] == float(sum(range(1 << 20)) * 2)
    assert d["model"] == "plug"
    assert d["d1"]["allocs"] >= 2 and d["d1"]["bytes_reserved"] >= 4 << 20
    assert d["d2"]["bytes_reserved"] < d["d1"]["bytes_reserved"]
    assert d["d3"]["limit_bytes"] == int(0.5 * d["total"])


def test_native_install_or_clear_fallback(tmp_path):
    p, d = run("""
        import json, warnings, torch, adaptalloc, adaptalloc.torch as aat
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            mode = aat.install()
        x = torch.randn(1000, 1000, device="cuda")
        y = float((x @ x).sum().item())
        print(json.dumps({"mode": mode, "warn": [str(i.message) for i in w],
                          "native": aat.native_available(),
                          "dev": [q["allocs"] for q in adaptalloc.stats()["pools"]
                                  if q["name"] == "device0"]}))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    if _INFO["native"]:
        assert d["mode"] == "native" and not d["warn"]
    else:
        assert d["mode"] == "pluggable"
        assert any("native allocator is not available" in m for m in d["warn"])
    assert d["dev"] and d["dev"][0] >= 1


def test_oom_snapshot_is_written_and_training_goes_on(tmp_path):
    """install(oom_snapshot=...): an out-of-memory error (a request over the
    memory fraction's cap) writes PyTorch's snapshot pickle to the path
    ({rank} expanded) before torch.OutOfMemoryError reaches the program, which
    trains on; a folder that does not exist is refused at install."""
    if not _INFO["native"]:
        skip("the native allocator is not built here")
    p, d = run("""
        import json, os, pickle, torch, adaptalloc.torch as aat
        try:
            aat.install(oom_snapshot="missing-folder/oom.pickle")
            bad = None
        except ValueError as e:
            bad = str(e)
        aat.install(oom_snapshot="oom-{rank}.pickle")
        torch.cuda.memory._record_memory_history(max_entries=10000)
        x = torch.ones(1 << 20, device="cuda")
        torch.cuda.set_per_process_memory_fraction(
            (256 << 20) / torch.cuda.get_device_properties(0).total_memory)
        try:
            torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
            oom = False
        except torch.OutOfMemoryError:
            oom = True
        torch.cuda.memory._record_memory_history(enabled=None)
        y = float((x * 2).sum().item())
        with open("oom-0.pickle", "rb") as f:
            snap = pickle.load(f)
        from adaptalloc.torch import _oom
        print(json.dumps({"bad": bad, "oom": oom, "y": y, "keys": sorted(snap),
                          "trace": len(snap["device_traces"][0]),
                          "actions": sorted({e["action"] for e in snap["device_traces"][0]}),
                          "stats": _oom.stats(), "tmp": [n for n in os.listdir(".")
                                                         if ".tmp." in n]}))
    """, tmp_path, env={"RANK": "0"})
    assert p.returncode == 0, p.stderr
    assert d["bad"] and "does not exist" in d["bad"]
    assert d["oom"] and d["y"] == 2.0 * (1 << 20)
    assert "segments" in d["keys"] and "device_traces" in d["keys"]
    assert d["trace"] > 0 and "oom" in d["actions"], d["actions"]
    assert d["stats"]["written"] == 1 and d["stats"]["failed"] == 0
    assert d["tmp"] == []
    assert "snapshot written to" in p.stderr


def test_install_after_a_cuda_allocation_is_refused(tmp_path):
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        x = torch.ones(10, device="cuda")
        try:
            aat.install()
            print(json.dumps(None))
        except RuntimeError as e:
            print(json.dumps(str(e)))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert d and "before the first CUDA allocation" in d and "python -m adaptalloc.torch" in d


def test_stats_and_metrics_name_the_gpu_and_its_headroom(tmp_path):
    """After install() and a CUDA allocation: /stats "devices" has the card's
    UUID (torch's), its PCI bus id, total as cudaMemGetInfo says, free,
    this process's reserved and the rest as non-allocator memory; /metrics
    has the adaptalloc_device_* series and gpu_uuid/pci_bus_id on device0's
    series; the host in adaptalloc_info."""
    p, d = run("""
        import json, urllib.request, torch, adaptalloc, adaptalloc.torch as aat
        aat.install()
        x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        free, total = torch.cuda.mem_get_info()
        props = torch.cuda.get_device_properties(0)
        url = adaptalloc.url()
        st = json.load(urllib.request.urlopen(url + "stats", timeout=10))
        text = urllib.request.urlopen(url + "metrics", timeout=10).read().decode()
        print(json.dumps({"devices": st["devices"], "host": st["host"],
                          "uuid": str(getattr(props, "uuid", "")), "total": total,
                          "free": free, "reserved": torch.cuda.memory_reserved(0),
                          "metrics": [l for l in text.splitlines()
                                      if l.startswith(("adaptalloc_device_",
                                                       "adaptalloc_reserved_bytes{",
                                                       "adaptalloc_info{"))]}))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    dev = d["devices"]
    assert len(dev) == 1 and dev[0]["device"] == 0, dev
    g = dev[0]
    assert g["gpu_uuid"].startswith("GPU-") and len(g["gpu_uuid"]) == 40, g
    if d["uuid"]:  # torch's _CudaDeviceProperties.uuid: the same digits, no "GPU-"
        assert g["gpu_uuid"][4:] == d["uuid"].replace("GPU-", ""), (g, d["uuid"])
    assert len(g["pci_bus_id"]) == 16 and g["pci_bus_id"][8] == ":", g
    assert g["total_bytes"] == d["total"], (g, d["total"])
    assert g["reserved_bytes"] >= 256 << 20
    assert g["used_bytes"] == g["total_bytes"] - g["free_bytes"]
    assert g["non_allocator_bytes"] == max(0, g["used_bytes"] - g["reserved_bytes"])
    m = d["metrics"]
    assert any(l.startswith('adaptalloc_device_total_bytes{device="0",gpu_uuid="%s",'
                            'pci_bus_id="%s"' % (g["gpu_uuid"], g["pci_bus_id"])) for l in m), m
    assert any(l.startswith("adaptalloc_device_nonallocator_bytes{") for l in m), m
    assert any('pool="device0"' in l and 'gpu_uuid="%s"' % g["gpu_uuid"] in l for l in m), m
    assert any(l.startswith("adaptalloc_info{") and 'host="%s"' % d["host"] in l for l in m), m


def test_launcher_runs_an_unmodified_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import json, sys, torch, adaptalloc, adaptalloc.torch as aat
        m = torch.nn.Linear(64, 64).cuda()
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(3):
            loss = m(torch.randn(32, 64, device="cuda")).pow(2).mean()
            opt.zero_grad(); loss.backward(); opt.step()
        dev = [q for q in adaptalloc.stats()["pools"] if q["name"] == "device0"][0]
        print(json.dumps({"argv": sys.argv, "mode": aat.installed(),
                          "model": adaptalloc.stats()["model"], "allocs": dev["allocs"]}))
    """))
    p, d = run(None, tmp_path, module=True,
               args=("--model", "launched", str(script), "--epochs", "3"))
    assert p.returncode == 0, p.stderr
    assert d["argv"] == [str(script), "--epochs", "3"]
    assert d["mode"] in ("native", "pluggable") and d["model"] == "launched"
    assert d["allocs"] > 0


def test_prefill_beyond_device_memory_is_refused(tmp_path):
    # A device pool with classes up to 1 MiB; then a policy asking four of
    # them to prefill 2^20 blocks each (about 1.9 TiB): refused before
    # anything is reserved, naming the device's free memory; the policy in
    # force and the device's memory stay as they were.
    pol = tmp_path / "big.json"
    pol.write_text(json.dumps({
        "name": "big", "adapt": {"enabled": False}, "telemetry": {},
        "pools": {"device": {"slab_size": 2097152, "max_small": 1048576,
                             "classes": {"min": 512, "per_doubling": 4}},
                  "pinned": {}, "host": {}}}))
    p, d = run("""
        import json, torch, adaptalloc, adaptalloc.torch as aat
        aat.install()
        x = torch.ones(1 << 20, device="cuda")
        torch.cuda.synchronize()
        v0 = adaptalloc.policy_version()
        free0 = torch.cuda.mem_get_info()[0]
        huge = {"adapt": {"prefill_max_bytes": 1 << 52}, "pools": {"device": {"classes": [
            {"size": s, "prefill": 1 << 20} for s in (131072, 262144, 524288, 1048576)]}}}
        try:
            adaptalloc.patch_policy(huge)
            err = None
        except adaptalloc.PolicyError as e:
            err = str(e)
        free1 = torch.cuda.mem_get_info()[0]
        print(json.dumps({"err": err, "taken": free0 - free1, "v0": v0,
                          "v1": adaptalloc.policy_version(), "x": float(x.sum())}))
    """, tmp_path, env={"ADAPTALLOC_POLICY": str(pol)})
    assert p.returncode == 0, p.stderr
    assert d["err"] and "prefill" in d["err"] and "device's free memory" in d["err"], d
    assert d["v1"] == d["v0"]
    assert d["taken"] < 64 << 20, d
    assert d["x"] == float(1 << 20)


# -------------------------------------------------------------- pinned pool

EXT_MODES = ({}, {"ADAPTALLOC_TORCH_EXT": "0"})  # C++ helpers, then the Python paths


def test_pinned_empty_is_pinned_pooled_and_returned(tmp_path):
    for env in EXT_MODES:
        _pinned_case(tmp_path, env)


def _pinned_case(tmp_path, env):
    p, d = run("""
        import gc, json, threading, torch, adaptalloc, adaptalloc.torch as aat
        def pinned():
            return [q for q in adaptalloc.stats()["pools"] if q["name"] == "pinned"][0]
        t = aat.pinned_empty((256, 1024), torch.float16)
        t.copy_(torch.randn(256, 1024).half())
        g = t.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        same = bool(torch.equal(g.cpu(), t))
        during = pinned()["bytes_in_use"]
        addr = t.data_ptr()
        del t; gc.collect()
        after = pinned()["bytes_in_use"]
        # freed in another thread
        u = aat.pin(torch.arange(4096, dtype=torch.int64))
        ok_pin = u.is_pinned() and bool(torch.equal(u, torch.arange(4096)))
        mid = pinned()["bytes_in_use"]
        box = [u]; del u
        th = threading.Thread(target=box.clear); th.start(); th.join(); gc.collect()
        end = pinned()["bytes_in_use"]
        z = aat.pinned_empty(0, torch.float32)
        print(json.dumps({"same": same, "during": during, "after": after, "mid": mid,
                          "end": end, "ok_pin": ok_pin, "zero": list(z.shape),
                          "pinned_flag": bool(aat.pinned_empty(8).is_pinned()),
                          "ext": aat._ext is not None}))
    """, tmp_path, env=env)
    assert p.returncode == 0, (env, p.stderr)
    if env:
        assert d["ext"] is False
    assert d["same"] and d["ok_pin"] and d["pinned_flag"], env
    assert d["during"] >= 256 * 1024 * 2 and d["after"] < d["during"]
    assert d["mid"] >= 4096 * 8 and d["end"] < d["mid"]
    assert d["zero"] == [0]


_PINNED_SHARE = """
import json, sys, torch, torch.multiprocessing as mp, adaptalloc, adaptalloc.torch as aat

def consumer(q, back):
    t = q.get()
    s = int(t.sum().item())
    t[0] = -1                                    # seen by the producer: shared memory
    back.put({"sum": s, "pinned_in_consumer": bool(t.is_pinned())})

def in_use():
    return [p for p in adaptalloc.stats()["pools"] if p["name"] == "pinned"][0]["bytes_in_use"]

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    t = aat.pinned_empty(1 << 20, torch.int32)      # 4 MiB from the pinned pool
    t.copy_(torch.arange(1 << 20, dtype=torch.int32))
    before = in_use()
    q, back = ctx.Queue(), ctx.Queue()
    c = ctx.Process(target=consumer, args=(q, back))
    c.start()
    q.put(t)                                         # moved into shared memory here
    got = back.get(timeout=120)
    c.join(120)
    after = in_use()
    print(json.dumps(dict(got, consumer_exit=c.exitcode, write_seen=int(t[0].item()) == -1,
                          rest_intact=bool(torch.equal(t[1:], torch.arange(1, 1 << 20,
                                                                           dtype=torch.int32))),
                          before=before, after=after,
                          pinned_after_put=bool(t.is_pinned()))))
"""


def test_pinned_tensor_shared_through_torch_multiprocessing(tmp_path):
    """Issue 37: a pinned tensor from adaptalloc's pool on a torch.multiprocessing
    queue (spawn) behaves as one from PyTorch's pinned allocator: PyTorch moves
    it into shared memory (a copy, no longer pinned), the consumer reads and
    writes it, and the pool gets its block back (not leaked, no crash)."""
    script = tmp_path / "share_pinned.py"
    script.write_text(_PINNED_SHARE)
    e = {k: v for k, v in os.environ.items() if not k.startswith("ADAPTALLOC_")}
    e.update({"ADAPTALLOC_DB": "off", "ADAPTALLOC_HTTP": "off", "ADAPTALLOC_QUIET": "1"})
    p = subprocess.run([PY, str(script)], cwd=str(tmp_path), env=e, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    d = json.loads([l for l in p.stdout.splitlines() if l.strip()][-1])
    n = 1 << 20
    assert d["consumer_exit"] == 0 and d["sum"] == n * (n - 1) // 2, d
    assert d["write_seen"] and d["rest_intact"], d
    assert d["before"] >= 4 * n and d["after"] <= d["before"] - 4 * n, d


def test_pinned_block_is_not_reused_before_its_copy_completes(tmp_path):
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        n = 1 << 20
        s = torch.cuda.Stream()
        bad = 0
        for round_ in range(20):
            dst = torch.empty(n, dtype=torch.int32, device="cuda")
            src = aat.pinned_empty(n, torch.int32, stream=s)
            src.fill_(round_)
            with torch.cuda.stream(s):
                torch.cuda._sleep(20_000_000)          # the copy starts late
                dst.copy_(src, non_blocking=True)
            del src                                     # dies while the copy waits
            nxt = aat.pinned_empty(n, torch.int32, stream=s)
            nxt.fill_(-1)                               # would corrupt dst if reused
            s.synchronize()
            bad += int((dst != round_).sum().item() > 0)
            del nxt
        print(json.dumps({"bad": bad}))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert d["bad"] == 0


def test_pinned_copies_torch_makes_are_tracked_on_every_stream(tmp_path):
    """With copy tracking (the C++ helper built with CUDA), a block waits for
    the streams of the non_blocking copies torch made with its tensor, not
    for the stream current when it was made: a copy on a side stream that is
    not current keeps its block from reuse, a tensor no copy used is reused
    at once even while the current stream is busy, and torch's own pinned
    memory behaves as before behind the tracker."""
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        n, side = 1 << 20, torch.cuda.Stream()
        first = aat.pinned_empty(4)                     # installs the tracker
        tracking = aat._ext is not None and aat._ext.copy_tracking()
        del first
        bad = 0
        for r in range(10):
            dst = torch.empty(n, dtype=torch.int32, device="cuda")
            src = aat.pinned_empty(n, torch.int32)      # made on the default stream
            src.fill_(r)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(20_000_000)           # the copy starts late
                dst.copy_(src, non_blocking=True)       # on a stream not current at creation
            addr = src.data_ptr()
            del src
            nxt = aat.pinned_empty(n, torch.int32)
            bad += int(nxt.data_ptr() == addr)
            nxt.fill_(-1)                               # would corrupt dst if reused
            side.synchronize()
            bad += int((dst != r).sum().item() > 0)
            del nxt
        # no copy used it: reused at once though the current stream is busy
        torch.cuda._sleep(50_000_000)
        a = aat.pinned_empty(n, torch.int32); addr = a.data_ptr(); del a
        b = aat.pinned_empty(n, torch.int32)
        reused = b.data_ptr() == addr
        busy = not torch.cuda.current_stream().query()
        torch.cuda.synchronize()
        # torch's own pinned memory behind the tracker
        h = torch.empty(n, dtype=torch.int32, pin_memory=True).fill_(7)
        g = h.to("cuda", non_blocking=True)
        torch.cuda.synchronize()
        own = bool(h.is_pinned()) and bool((g == 7).all().item())
        stats = torch.cuda.host_memory_stats() if hasattr(torch.cuda, "host_memory_stats") else {}
        print(json.dumps({"tracking": tracking, "bad": bad, "reused": reused, "busy": busy,
                          "own": own, "stats": isinstance(stats, dict)}))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert d["own"] and d["stats"], d
    if not d["tracking"]:
        skip("copy tracking needs the C++ helper built with CUDA and torch >= 2.9")
    assert d["bad"] == 0, d
    assert d["reused"] and d["busy"], d


def test_pinned_copy_tracker_keeps_cuda_graphs_and_tracks_aliases(tmp_path):
    """Behind the copy tracker a CUDA graph is still captured and replayed
    (torch versions whose graphs call the host allocator's pool hooks at
    every capture: at::HostAllocator's own versions throw "Not implemented",
    so the tracker forwards them), and a non_blocking copy through a tensor
    over a pool tensor's memory with a storage of its own (DLPack: its
    storage's context is not the block) keeps the block from reuse until
    the copy has completed (the tracker falls back on the copy's address,
    as torch's own host allocator does)."""
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        from torch.utils.dlpack import from_dlpack
        first = aat.pinned_empty(4)                     # installs the tracker
        tracking = aat._ext is not None and aat._ext.copy_tracking()
        del first
        x = torch.zeros(8, device="cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = x + 1                                   # warm-up off the capture
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        err = None
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                y = x + 1
            x.fill_(2)
            g.replay()
            torch.cuda.synchronize()
            graph = bool((y == 3).all().item())
        except Exception as e:                          # "Not implemented for ..."
            graph, err = False, repr(e)
        n, bad = 1 << 20, 0
        for r in range(5):
            dst = torch.empty(n, dtype=torch.int32, device="cuda")
            src = aat.pinned_empty(n, torch.int32)
            src.fill_(r)
            alias = from_dlpack(src)                    # its own storage, same memory
            addr = src.data_ptr()
            del src                                     # alias keeps the block alive
            torch.cuda._sleep(20_000_000)               # the copy starts late
            dst.copy_(alias, non_blocking=True)
            del alias                                   # the block goes back now
            nxt = aat.pinned_empty(n, torch.int32)
            bad += int(nxt.data_ptr() == addr)
            nxt.fill_(-1)                               # would corrupt dst if reused
            torch.cuda.synchronize()
            bad += int((dst != r).sum().item() > 0)
            del nxt
        print(json.dumps({"tracking": tracking, "graph": graph, "err": err, "bad": bad}))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert d["graph"], d
    if not d["tracking"]:
        skip("copy tracking needs the C++ helper built with CUDA and torch >= 2.9")
    assert d["bad"] == 0, d


def test_pinned_block_a_captured_copy_uses_is_never_reused(tmp_path):
    """A copy captured into a CUDA graph reads its pool tensor's block again
    at every replay: with copy tracking the block stays the graph's after
    the tensor dies (before, it was reused once the capture's stream was
    idle, and a replay copied whatever the next tensor held)."""
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        first = aat.pinned_empty(4)                     # installs the tracker
        tracking = aat._ext is not None and aat._ext.copy_tracking()
        del first
        n = 1 << 16
        src = aat.pinned_empty(n, torch.int32)
        src.fill_(5)
        dst = torch.zeros(n, dtype=torch.int32, device="cuda")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        addr = src.data_ptr()
        del src
        torch.cuda.synchronize()                        # every stream idle
        held, reused = [], 0
        for _ in range(8):
            t = aat.pinned_empty(n, torch.int32)
            t.fill_(-1)
            reused += int(t.data_ptr() == addr)
            held.append(t)
        dst.zero_()
        g.replay()
        torch.cuda.synchronize()
        print(json.dumps({"tracking": tracking, "reused": reused,
                          "replayed": bool((dst == 5).all().item())}))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    if not d["tracking"]:
        skip("copy tracking needs the C++ helper built with CUDA and torch >= 2.9")
    assert d["reused"] == 0 and d["replayed"], d

def test_serve_pinned_gives_torch_pinned_memory_from_the_pool(tmp_path):
    """serve_pinned(): torch.empty(pin_memory=True), Tensor.pin_memory() and
    DataLoader(pin_memory=True) take pool blocks (pinned, data intact), a
    served block is not reused under a delayed copy on a side stream, and
    serve_pinned(False) gives the next ones back to PyTorch's allocator."""
    p, d = run("""
        import json, torch, adaptalloc, adaptalloc.torch as aat
        from torch.utils.data import DataLoader, TensorDataset
        def in_use():
            return [q for q in adaptalloc.stats()["pools"]
                    if q["name"] == "pinned"][0]["bytes_in_use"]
        try:
            prev = aat.serve_pinned(True)
        except RuntimeError as e:
            print(json.dumps({"skip": str(e)}))
            raise SystemExit(0)
        n = 1 << 20
        before = in_use()
        t = torch.empty(n, dtype=torch.int32, pin_memory=True)
        u = torch.arange(4096).pin_memory()
        during = in_use()
        ok = bool(t.is_pinned()) and bool(u.is_pinned()) and bool(torch.equal(u, torch.arange(4096)))
        side, bad = torch.cuda.Stream(), 0
        for r in range(10):
            dst = torch.empty(n, dtype=torch.int32, device="cuda")
            src = torch.empty(n, dtype=torch.int32, pin_memory=True).fill_(r)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(20_000_000)           # the copy starts late
                dst.copy_(src, non_blocking=True)
            addr = src.data_ptr()
            del src
            nxt = torch.empty(n, dtype=torch.int32, pin_memory=True)
            bad += int(nxt.data_ptr() == addr)
            nxt.fill_(-1)                               # would corrupt dst if reused
            side.synchronize()
            bad += int((dst != r).sum().item() > 0)
            del nxt
        data = torch.arange(64 * 32, dtype=torch.float32).view(64, 32)
        got, dl_pinned, dl_in_pool = [], True, True
        for (b,) in DataLoader(TensorDataset(data), batch_size=16, num_workers=2,
                               pin_memory=True):
            held = in_use()
            dl_pinned &= bool(b.is_pinned())
            dl_in_pool &= held >= b.numel() * 4
            got.append(b.cuda(non_blocking=True))
        torch.cuda.synchronize()
        same = bool(torch.equal(torch.cat(got).cpu(), data))
        del t, u, got, b
        torch.cuda.empty_cache()
        was_on = aat.serve_pinned(False)
        base = in_use()
        w = torch.empty(n, dtype=torch.int32, pin_memory=True)
        theirs = in_use() == base and bool(w.is_pinned())
        print(json.dumps({"prev": prev, "grew": during - before, "ok": ok, "bad": bad,
                          "dl_pinned": dl_pinned, "dl_in_pool": dl_in_pool, "same": same,
                          "was_on": was_on, "theirs": theirs}))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    if "skip" in d:
        skip(d["skip"])
    assert d["prev"] is False and d["was_on"] is True, d
    assert d["grew"] >= (1 << 22) + 4096 * 8, d
    assert d["ok"] and d["bad"] == 0, d
    assert d["dl_pinned"] and d["dl_in_pool"] and d["same"], d
    assert d["theirs"], d


def test_pinned_empty_checks_its_arguments_and_follows_the_current_stream(tmp_path):
    for env in EXT_MODES:
        _pinned_args_case(tmp_path, env)


def _pinned_args_case(tmp_path, env):
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        errs = []
        for args, kw in [((2.5,), {}), (((2, -1),), {}), (("ab",), {}),
                         ((4, "float"), {}), ((4,), {"stream": 5})]:
            try:
                aat.pinned_empty(*args, **kw)
                errs.append(None)
            except (TypeError, ValueError) as e:
                errs.append(type(e).__name__)
        # before any other CUDA use in this process: is_pinned() holds only
        # once torch.cuda is initialised, which pinned_empty must see to
        made = [aat.pinned_empty(s, torch.float16)
                for s in (3, (2, 3), [4], torch.Size([2, 2]), (), range(2, 4))]
        shapes = [list(t.shape) for t in made]
        pinned = [t.is_pinned() for t in made]
        ok = all(pinned) and all(t.dtype == torch.float16 for t in made)
        # No stream given: the current one. The block dies while a copy from
        # it waits on a side stream made current; the next block must not be it.
        n, s, bad = 1 << 20, torch.cuda.Stream(), 0
        for r in range(10):
            dst = torch.empty(n, dtype=torch.int32, device="cuda")
            with torch.cuda.stream(s):
                src = aat.pinned_empty(n, torch.int32)
                src.fill_(r)
                torch.cuda._sleep(20_000_000)           # the copy starts late
                dst.copy_(src, non_blocking=True)
                del src
                nxt = aat.pinned_empty(n, torch.int32)
            nxt.fill_(-1)                               # would corrupt dst if reused
            s.synchronize()
            bad += int((dst != r).sum().item() > 0)
            del nxt
        print(json.dumps({"errs": errs, "shapes": shapes, "ok": ok, "bad": bad, "pinned": pinned,
                          "ext": aat._ext is not None,
                          "current": getattr(aat._ext, "CURRENT_STREAM", None)}))
    """, tmp_path, env=env)
    assert p.returncode == 0, (env, p.stderr)
    assert d["errs"] == ["TypeError", "ValueError", "TypeError", "TypeError", "TypeError"], (env, d)
    assert d["shapes"] == [[3], [2, 3], [4], [2, 2], [], [2, 3]], (env, d)
    assert d["ok"] and d["bad"] == 0, (env, d)
    if env:
        assert d["ext"] is False
    else:  # built with CUDA's headers: C++ reads the current stream
        assert d["ext"] and d["current"] is True, d


def test_pack_is_bit_identical(tmp_path):
    for env in EXT_MODES:
        _pack_case(tmp_path, env)


def _pack_case(tmp_path, env):
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        g = torch.Generator().manual_seed(0)
        ts = []
        for i in range(300):
            shape = (int(torch.randint(1, 50, (1,), generator=g)), 3)
            dt = [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bfloat16][i % 5]
            ts.append((torch.randn(shape, generator=g) * 100).to(dt))
        ts.append(torch.randn(8, 8).t())                  # not contiguous
        ts.append(torch.empty(0))
        out = aat.pack(ts, "cuda")
        ok = all(o.device.type == "cuda" and o.dtype == t.dtype and o.shape == t.shape
                 and torch.equal(o.cpu(), t) for o, t in zip(out, ts))
        s = torch.cuda.Stream()
        out2 = aat.pack(ts[:10], "cuda", stream=s)
        ok2 = all(torch.equal(o.cpu(), t) for o, t in zip(out2, ts[:10]))
        errs = []
        for bad in (lambda: aat.pack(ts[0], "cuda"), lambda: aat.pack([1], "cuda"),
                    lambda: aat.pack([ts[0].cuda()], "cuda"), lambda: aat.pack(ts, "cpu")):
            try:
                bad(); errs.append(None)
            except (TypeError, ValueError) as e:
                errs.append(type(e).__name__)
        big = [torch.full((1 << 20,), i, dtype=torch.int32) for i in range(40)]  # > 16 MiB
        ok3 = all(bool((o == i).all()) for i, o in enumerate(aat.pack(big, "cuda")))
        print(json.dumps({"ok": ok, "ok2": ok2, "ok3": ok3, "errs": errs,
                          "ext": aat._ext is not None}))
    """, tmp_path, env=env)
    assert p.returncode == 0, (env, p.stderr)
    assert d["ok3"], env
    if env:
        assert d["ext"] is False
    assert d["ok"] and d["ok2"], env
    assert d["errs"] == ["TypeError", "TypeError", "ValueError", "ValueError"], env


def test_prefetcher_with_dataloader_workers(tmp_path):
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        from torch.utils.data import DataLoader, TensorDataset
        x = torch.randn(512, 3, 8, 8).to(torch.bfloat16)
        y = torch.arange(512)
        dl = DataLoader(TensorDataset(x, y), batch_size=64, num_workers=2)
        res = {}
        for bg in (True, False):
            seen, ok = 0, True
            for (bx, by), (cx, cy) in zip(aat.Prefetcher(dl, "cuda", background=bg), dl):
                ok &= bx.is_cuda and by.is_cuda
                ok &= bool(torch.equal(bx.cpu(), cx)) and bool(torch.equal(by.cpu(), cy))
                seen += 1
            d = [{"a": torch.ones(3), "b": [torch.zeros(2), 5], "c": torch.empty(0, 4)},
                 ("no tensors", 7)]
            m, n = list(aat.Prefetcher(d, "cuda", background=bg))
            ok2 = (m["a"].is_cuda and m["b"][0].is_cuda and m["b"][1] == 5
                   and m["c"].is_cuda and tuple(m["c"].shape) == (0, 4)
                   and bool(torch.equal(m["a"].cpu(), torch.ones(3))) and n == ("no tensors", 7))
            res[str(bg)] = {"seen": seen, "ok": bool(ok), "ok2": bool(ok2)}
        try:
            aat.Prefetcher(dl, "cuda", background=1)
            res["bad"] = None
        except TypeError:
            res["bad"] = "TypeError"
        print(json.dumps(res))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    want = {"seen": 8, "ok": True, "ok2": True}
    assert d == {"True": want, "False": want, "bad": "TypeError"}


def test_prefetcher_under_slow_compute_is_bit_identical(tmp_path):
    # The compute stream sleeps before reading each batch, so copies of later
    # batches, pinned buffers and device blocks would be reused under it if
    # anything were out of stream order; nothing synchronizes in the loop.
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        from torch.utils.data import DataLoader, Dataset
        class Rows(Dataset):
            def __len__(self): return 24 * 16
            def __getitem__(self, i):
                g = torch.Generator().manual_seed(i)
                return torch.randint(-2**31, 2**31 - 1, (65536,), dtype=torch.int32,
                                     generator=g), i
        dl = DataLoader(Rows(), batch_size=16, num_workers=2)   # 4 MiB a batch
        res = {}
        for bg in (True, False):
            kept = []
            for x, i in aat.Prefetcher(dl, "cuda", background=bg):
                torch.cuda._sleep(5_000_000)
                kept.append((x.clone(), i.clone()))
            torch.cuda.synchronize()
            bad = sum(int(not (torch.equal(a.cpu(), cx) and torch.equal(b.cpu(), ci)))
                      for (a, b), (cx, ci) in zip(kept, dl))
            res[str(bg)] = {"n": len(kept), "bad": bad}
        print(json.dumps(res))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert d == {"True": {"n": 24, "bad": 0}, "False": {"n": 24, "bad": 0}}


def test_prefetcher_early_exit_errors_and_threads(tmp_path):
    p, d = run("""
        import json, threading, time, torch, adaptalloc.torch as aat
        from torch.utils.data import DataLoader, TensorDataset
        def threads():
            return sum(t.name == "adaptalloc-prefetch" for t in threading.enumerate())
        x = torch.arange(64 * 1000, dtype=torch.float32).view(64, 1000)
        dl = DataLoader(TensorDataset(x), batch_size=4, num_workers=2)
        res = {}
        for bg in (True, False):
            pf = aat.Prefetcher(dl, "cuda", background=bg)
            for k, (b,) in enumerate(pf):
                if k == 2:
                    break
            del b
            again = [b.cpu() for (b,) in pf]           # a new iteration after the break
            ok = len(again) == 16 and bool(torch.equal(torch.cat(again), x))
            def broken():
                yield [torch.ones(2)]
                yield [torch.ones(2)]
                raise ValueError("loader failed")
            err, got = None, 0
            try:
                for _ in aat.Prefetcher(broken(), "cuda", background=bg):
                    got += 1
            except ValueError as e:
                err = str(e)
            res[str(bg)] = {"ok": ok, "err": err, "got": got}
        t0 = time.time()
        while threads() and time.time() - t0 < 10:
            time.sleep(0.05)
        res["threads_left"] = threads()
        print(json.dumps(res))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    want = {"ok": True, "err": "loader failed", "got": 2}
    assert d == {"True": want, "False": want, "threads_left": 0}


def test_prefetcher_allocates_in_the_region_of_the_loop(tmp_path):
    p, d = run("""
        import json, torch, adaptalloc, adaptalloc.torch as aat
        mode = aat.install()
        batches = [[torch.full((1 << 20,), i, dtype=torch.float32)] for i in range(6)]
        with aat.region("inputs"):
            vals = [float(b[0][0].item()) for b in aat.Prefetcher(batches, "cuda")]
        r = adaptalloc.region_stats().get("inputs", {})
        print(json.dumps({"mode": mode, "vals": vals, "allocs": r.get("allocs", 0)}))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert d["vals"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert d["allocs"] >= 6, d


def test_mapped_empty_is_zero_copy(tmp_path):
    p, d = run("""
        import json, torch, adaptalloc.torch as aat
        h, g = aat.mapped_empty((1000,), torch.float32)
        h.copy_(torch.arange(1000, dtype=torch.float32))
        torch.cuda.synchronize()
        first = float(g.sum().item())
        h[0] = 1e6                                  # seen by the GPU without a copy
        second = float(g.sum().item())
        print(json.dumps({"dev": str(g.device), "pinned": h.is_pinned(),
                          "first": first, "second": second}))
    """, tmp_path)
    assert p.returncode == 0, p.stderr
    assert d["dev"].startswith("cuda") and d["pinned"]
    assert d["first"] == float(sum(range(1000)))
    assert d["second"] == d["first"] + 1e6


if __name__ == "__main__":  # without pytest: one line a test, 1 on a failure
    sys.exit(run_all(globals(), "adaptalloc GPU tests", None if _INFO is not None else _WHY,
                     with_tmp=True))
