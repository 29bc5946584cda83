#!/usr/bin/env python3
"""GPU tests of per-kind regions (adaptalloc.torch.region) on the native
PyTorch allocator.

    pytest tests/gpu/test_regions.py            (after pip install . with torch)

Run it in a pytest process of its own (the allocator is installed when this
module is imported, before the first CUDA allocation). Without torch, CUDA or
the native extension the whole module is skipped with the reason.
"""
import gc
import json
import os
import subprocess
import sys
import threading
import urllib.request

os.environ.setdefault("ADAPTALLOC_DB", "off")

import pytest  # noqa: E402

try:
    import torch
except Exception as e:  # CI: no torch
    pytest.skip("torch is not importable (%s): GPU tests skipped" % e, allow_module_level=True)
if getattr(torch, "__file__", None) is None:  # only the repository's torch/ folder
    pytest.skip("torch is not installed: GPU tests skipped", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: GPU tests skipped", allow_module_level=True)

import adaptalloc  # noqa: E402
import adaptalloc.torch as at  # noqa: E402

_ok, _why = at.native_available()
if not _ok:
    pytest.skip("adaptalloc._torch_native is not built (%s): pip install . with torch and "
                "CUDA" % _why, allow_module_level=True)

MIB = 1 << 20
CAP = 64 * MIB
at.install(http="127.0.0.1:0", db=False)
# before any region pool exists: the capped region's section, the loop off
# (its trims would move the reserved figures between two reads)
adaptalloc.patch_policy({"adapt": {"enabled": False},
                         "pools": {"regions": {"capped": {"limit_bytes": CAP}}}})
from adaptalloc import _torch_native as native  # noqa: E402

DEV = 0


def _device_pools():
    """The runtime's pools on device 0 (the device pool and the regions')."""
    return [p for p in adaptalloc.stats()["pools"]
            if p["device"] == DEV and p["backend"] != "pinned"]


def _device_pool_in_use():
    """Bytes in use in device 0's own pool (0 before its first allocation)."""
    own = [p for p in _device_pools() if p["region"] is None]
    return own[0]["bytes_in_use"] if own else 0


def _region(name):
    return adaptalloc.region_stats().get(name, {"bytes_in_use": 0, "pools": []})


def test_allocations_inside_go_to_the_region_and_back_on_free():
    torch.cuda.synchronize()
    before = _region("kv_cache")["bytes_in_use"]
    dev_before = _device_pool_in_use()
    with at.region("kv_cache"):
        assert at.current_region() == "kv_cache"
        x = torch.empty(8 * MIB, dtype=torch.uint8, device="cuda")
    y = torch.empty(4 * MIB, dtype=torch.uint8, device="cuda")
    assert at.current_region() is None
    r = _region("kv_cache")
    assert r["bytes_in_use"] >= before + 8 * MIB
    assert [p["name"] for p in r["pools"]] == ["device0:kv_cache"]
    dev = [p for p in _device_pools() if p["region"] is None][0]
    assert dev["bytes_in_use"] >= dev_before + 4 * MIB
    assert dev["bytes_in_use"] < dev_before + 8 * MIB  # x is not in it
    del x  # freed outside the region: back to the region's pool
    assert _region("kv_cache")["bytes_in_use"] == before
    del y


def test_region_stats_add_up_to_the_device_totals():
    # Private pools (CUDA graphs of tests run before this one in the same
    # process) are in PyTorch's figures but are no runtime pool: compare
    # what changes, which they do not.
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    pools = _device_pools()
    base_alloc = torch.cuda.memory_allocated(DEV) - sum(p["bytes_in_use"] for p in pools)
    base_res = torch.cuda.memory_reserved(DEV) - sum(p["bytes_reserved"] for p in pools)
    keep = []
    for name, n in (("q", 3), ("k", 5), ("v", 7), ("scores", 11)):
        with at.region(name):
            keep += [torch.empty(n * 100_000 + i, dtype=torch.uint8, device="cuda")
                     for i in range(20)]
    keep += [torch.empty(123_457, dtype=torch.uint8, device="cuda") for _ in range(10)]
    torch.cuda.synchronize()
    pools = _device_pools()
    regions = adaptalloc.region_stats()
    for name in ("q", "k", "v", "scores"):
        assert regions[name]["bytes_in_use"] > 0, name
    in_use = sum(p["bytes_in_use"] for p in pools)
    reserved = sum(p["bytes_reserved"] for p in pools)
    # PyTorch's view of the device is the sum of the pools
    assert torch.cuda.memory_allocated(DEV) - base_alloc == in_use
    assert torch.cuda.memory_reserved(DEV) - base_res == reserved
    own = [p for p in pools if p["region"] is None][0]
    assert own["bytes_in_use"] + sum(r["bytes_in_use"] for r in regions.values()) == in_use
    del keep
    torch.cuda.synchronize()
    assert (torch.cuda.memory_allocated(DEV) - base_alloc ==
            sum(p["bytes_in_use"] for p in _device_pools()))


def test_region_limit_is_out_of_memory_for_that_region_only():
    with at.region("capped"):
        small = torch.empty(MIB, dtype=torch.uint8, device="cuda")
        with pytest.raises(torch.OutOfMemoryError) as ei:
            torch.empty(2 * CAP, dtype=torch.uint8, device="cuda")
        msg = str(ei.value)
        # still usable below its limit
        again = torch.empty(MIB, dtype=torch.uint8, device="cuda")
    assert "device0:capped" in msg and "pools.regions.capped.limit_bytes" in msg, msg
    r = _region("capped")
    assert r["limit_bytes"] == CAP and r["ooms"] >= 1
    # the out-of-memory record (/stats last_oom, GET /oom): the region's
    # pool, the request, its limit, what was live (the 1 MiB tensor)
    last = adaptalloc.stats()["last_oom"]
    assert last["pool"] == "device0:capped" and last["request"] >= 2 * CAP, last
    assert last["limit_bytes"] == CAP and last["live_sizes"], last
    capped = [p for p in r["pools"] if p["name"] == "device0:capped"][0]
    assert capped["last_oom_unix_ms"] == last["unix_ms"] > 0, (capped, last)
    # the same request outside the region, and in another region, succeeds
    big = torch.empty(2 * CAP, dtype=torch.uint8, device="cuda")
    with at.region("uncapped"):
        big2 = torch.empty(2 * CAP, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_stats(DEV)["num_ooms"] >= 1
    del small, again, big, big2


def test_nesting_threads_and_decorator():
    seen = {}

    @at.region("decorated")
    def make():
        seen["in_decorated"] = at.current_region()
        return torch.empty(MIB, dtype=torch.uint8, device="cuda")

    def other_thread():
        seen["thread"] = at.current_region()
        seen["t"] = torch.empty(2 * MIB, dtype=torch.uint8, device="cuda")

    outer = at.region("outer")
    with outer:
        with at.region("inner"):
            assert at.current_region() == "inner"
            a = torch.empty(MIB, dtype=torch.uint8, device="cuda")
            th = threading.Thread(target=other_thread)
            th.start()
            th.join()
        assert at.current_region() == "outer"
        with outer:  # the same object re-entered
            assert at.current_region() == "outer"
        assert at.current_region() == "outer"
        b = make()
        assert at.current_region() == "outer"
    assert at.current_region() is None
    assert seen["in_decorated"] == "decorated" and seen["thread"] is None
    r = adaptalloc.region_stats()
    assert r["inner"]["bytes_in_use"] >= MIB
    assert r["decorated"]["bytes_in_use"] >= MIB
    # the other thread's tensor is in the device pool: no region grew by 2 MiB
    assert all(v["bytes_in_use"] < 2 * MIB for k, v in r.items() if k in ("inner", "outer"))
    del a, b, seen["t"]


def test_cuda_graph_private_pool_wins_inside_a_region():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 64)).cuda().eval()
    static_in = torch.randn(32, 64, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with at.region("graphed"):
        eager_before = _region("graphed")["bytes_in_use"]
        with torch.no_grad(), torch.cuda.graph(g):
            static_out = model(static_in)
        during = _region("graphed")["bytes_in_use"]
        with torch.no_grad():
            ref_in_region = model(static_in)  # eager: the region again
    assert native.private_pool_count(DEV) >= 1
    # The capture's blocks went to the graph's pool. What torch.cuda.graph
    # allocates before the capture opens its pool (the CUDA generator's seed
    # and offset, 2 x 512 B) comes from the region like any other allocation
    # made in it; the model's activations (32 x 256 floats, 32 KiB) do not.
    assert during - eager_before <= 4096, (eager_before, during)
    assert _region("graphed")["bytes_in_use"] > during
    for i in range(3):
        x = torch.randn(32, 64, device="cuda") * (i + 1)
        static_in.copy_(x)
        g.replay()
        with torch.no_grad():
            torch.testing.assert_close(static_out, model(x))
    del g, static_out, ref_in_region
    torch.cuda.synchronize()


def test_bad_names_are_refused_before_anything_changes():
    n = len(adaptalloc.region_stats())
    for bad in ("", "kv cache", "1st", "x" * 21, "kv.cache"):
        with pytest.raises(ValueError, match="region"):
            at.region(bad)
    with pytest.raises(TypeError):
        at.region(None)
    assert len(adaptalloc.region_stats()) == n
    assert at.current_region() is None


def test_metrics_and_stats_show_the_region():
    with at.region("kv_cache"):
        x = torch.empty(MIB, dtype=torch.uint8, device="cuda")
    base = adaptalloc.url()
    assert base is not None
    text = urllib.request.urlopen(base + "metrics", timeout=10).read().decode()
    assert 'pool="device0:kv_cache",backend="cuda",device="0",region="kv_cache"' in text
    doc = json.loads(urllib.request.urlopen(base + "stats?pool=device0:kv_cache",
                                            timeout=10).read())
    assert doc["pools"][0]["region"] == "kv_cache"
    del x


_PLUGGABLE_CHILD = r"""
import json, torch, adaptalloc, adaptalloc.torch as at
at.install(native=False, db=False, http=False)
adaptalloc.patch_policy({"pools": {"regions": {"capped": {"limit_bytes": 64 << 20}}}})
MIB = 1 << 20
out = {}
with at.region("kv_cache"):
    out["current"] = at.current_region()
    x = torch.ones(8 * MIB, dtype=torch.uint8, device="cuda")
y = torch.ones(4 * MIB, dtype=torch.uint8, device="cuda")
out["after"] = at.current_region()
out["kv_in_use"] = adaptalloc.region_stats()["kv_cache"]["bytes_in_use"]
out["sum"] = int((x.sum() + y.sum()).item())
del x  # the free finds the region's pool by address
torch.cuda.synchronize()
out["kv_after_free"] = adaptalloc.region_stats()["kv_cache"]["bytes_in_use"]
with at.region("capped"):
    small = torch.ones(MIB, dtype=torch.uint8, device="cuda")
out["capped_in_use"] = adaptalloc.region_stats()["capped"]["bytes_in_use"]
del small, y
torch.cuda.synchronize()
out["capped_after_free"] = adaptalloc.region_stats()["capped"]["bytes_in_use"]
out["invalid_frees"] = sum(p["invalid_frees"] for p in adaptalloc.stats()["pools"])
print(json.dumps(out))
"""


def test_pluggable_allocator_routes_and_frees_by_address(tmp_path):
    # the pluggable allocator in a process of its own (one allocator a process)
    env = dict(os.environ, ADAPTALLOC_QUIET="1")
    r = subprocess.run([sys.executable, "-c", _PLUGGABLE_CHILD], env=env, cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    d = json.loads(r.stdout.strip().splitlines()[-1])
    assert d["current"] == "kv_cache" and d["after"] is None
    assert d["kv_in_use"] >= 8 * MIB and d["kv_after_free"] == 0
    assert d["sum"] == 12 * MIB
    assert d["capped_in_use"] >= MIB and d["capped_after_free"] == 0
    assert d["invalid_frees"] == 0
