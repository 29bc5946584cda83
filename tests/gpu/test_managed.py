#!/usr/bin/env python3
"""GPU tests of managed (unified) memory: adaptalloc.torch.managed_empty,
prefetch, managed_range_info, the safety cap, and a region whose policy
section says backend "managed".

    pytest -q tests/gpu/test_managed.py          (after pip install . with torch)

Run it in a pytest process of its own (the native allocator is installed
when this module is imported, before the first CUDA allocation, when it is
built; the tests that route through it skip otherwise). Without torch or a
GPU the whole module is skipped with the reason.

Every allocation here stays far below the device's free memory. The one
request larger than free memory is the cap's refusal test: the backend
refuses it before anything is allocated (and the test checks that free
memory did not move).
"""
import ctypes
import os
import re
import struct

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

MIB = 1 << 20
DEV = 0
HOST = -1

_native, _why = at.native_available()
if _native:
    at.install(http=False, db=False)
# before any managed pool exists: the loop off (its trims would move the
# figures between two reads), a managed region with advice
adaptalloc.patch_policy({"adapt": {"enabled": False},
                         "pools": {"regions": {"optstate": {
                             "backend": "managed",
                             "advise": {"preferred_location": "device",
                                        "accessed_by": "host"}}}}})


def _pool(name):
    for p in adaptalloc.stats()["pools"]:
        if p["name"] == name:
            return p
    return None


def _host_floats(t, n):
    """The first n float32 of a managed tensor, read by the CPU directly."""
    raw = ctypes.string_at(t.data_ptr(), 4 * n)
    return list(struct.unpack("%df" % n, raw))


def test_managed_tensor_holds_data_on_the_gpu_and_on_the_host():
    x = at.managed_empty((1024, 1024), torch.float32, device=DEV)
    assert x.is_cuda and x.device.index == DEV
    assert x.shape == (1024, 1024) and x.dtype == torch.float32
    info = at.managed_range_info(x)
    assert info["last_prefetch_location"] == DEV  # prefetch=True by default
    x.fill_(3.0)
    y = x * 2  # a kernel reads managed memory
    torch.cuda.synchronize()
    assert x.sum().item() == 3.0 * 1024 * 1024
    assert y[1023, 1023].item() == 6.0

    at.prefetch(x, "cpu")
    torch.cuda.synchronize()
    assert at.managed_range_info(x)["last_prefetch_location"] == HOST
    assert _host_floats(x, 4) == [3.0] * 4  # read on the host, no copy

    s = torch.cuda.Stream()
    at.prefetch(x, DEV, stream=s)
    s.synchronize()
    assert at.managed_range_info(x)["last_prefetch_location"] == DEV
    assert x.sum().item() == 3.0 * 1024 * 1024
    pool = _pool("managed%d" % DEV)
    assert pool is not None and pool["backend"] == "managed"
    assert pool["managed_device_bytes"] >= x.numel() * 4
    del x, y


def test_no_prefetch_and_advice_as_the_driver_reports_it():
    # larger than any block the earlier tests freed: the pool reserves a new
    # range, which nothing has prefetched yet (a reused block keeps the
    # driver's record of its last prefetch, as the first test's did on the
    # H100: last_prefetch_location 0 for prefetch=False); should the pool have
    # placed it in memory it held (no growth) the test says so and skips
    before = _pool("managed%d" % DEV)
    held = before["bytes_reserved"] if before else 0
    x = at.managed_empty(48 * MIB, torch.uint8, device="cuda:%d" % DEV, prefetch=False,
                         advise={"preferred_location": "host", "read_mostly": True,
                                 "accessed_by": "device"})
    fresh = _pool("managed%d" % DEV)["bytes_reserved"] >= held + 48 * MIB
    info = at.managed_range_info(x)
    assert info["preferred_location"] == HOST
    assert info["read_mostly"] is True
    assert DEV in info["accessed_by"]
    x.zero_()
    torch.cuda.synchronize()
    assert x.sum().item() == 0
    if not fresh:
        pytest.skip("advice checked; the managed pool served 48 MiB from memory it held, "
                    "whose last prefetch location is an earlier block's (run the file alone)")
    assert info["last_prefetch_location"] is None


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown advice 'prefered_location'"):
        at.managed_empty(16, advise={"prefered_location": "device"})
    with pytest.raises(ValueError, match=r"advise\['accessed_by'\] must be one of"):
        at.managed_empty(16, advise={"accessed_by": "gpu"})
    with pytest.raises(TypeError, match="read_mostly"):
        at.managed_empty(16, advise={"read_mostly": 1})
    with pytest.raises(ValueError, match="not a CUDA device"):
        at.managed_empty(16, device="cpu")
    with pytest.raises(ValueError, match="is not there"):
        at.managed_empty(16, device=torch.cuda.device_count())
    with pytest.raises(ValueError, match="not managed memory"):
        at.prefetch(torch.empty(16, device="cuda"), DEV)  # device memory
    with pytest.raises(ValueError, match="not managed memory"):
        at.prefetch(torch.zeros(16), "cpu")  # host memory
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        at.prefetch([1, 2], DEV)
    with pytest.raises(ValueError, match="not managed memory"):
        at.managed_range_info(torch.zeros(16))
    z = at.managed_empty((0, 3), torch.float16)
    assert z.shape == (0, 3) and z.is_cuda


def test_the_cap_refuses_more_than_free_device_memory_naming_the_figures():
    free_before, total = torch.cuda.mem_get_info(DEV)
    ask = free_before + free_before // 2 + 64 * MIB  # refused before any allocation
    with pytest.raises(MemoryError) as ei:
        at.managed_empty(ask, torch.uint8, device=DEV)
    msg = str(ei.value)
    m = re.search(r"device (\d+): managed reservation of (\d+) bytes refused: the backend "
                  r"holds (\d+) bytes \((\d+) last prefetched to the device\) and the "
                  r"device has (\d+) bytes free; allow_oversubscribe is false", msg)
    assert m is not None, msg
    dev, req, held, on_dev, free = (int(g) for g in m.groups())
    assert dev == DEV and req >= ask
    assert held + req > free + on_dev
    assert free <= total
    assert "allow_oversubscribe: true" in msg and "hang" in msg
    free_after, _ = torch.cuda.mem_get_info(DEV)
    assert abs(free_after - free_before) < 256 * MIB  # nothing was reserved
    # the pool still serves what fits
    y = at.managed_empty(MIB, torch.uint8, device=DEV)
    y.fill_(1)
    torch.cuda.synchronize()
    assert y.sum().item() == MIB


def test_a_region_with_backend_managed_from_the_policy():
    x = at.managed_empty((256, 1024), torch.float32, device=DEV, region="optstate")
    info = at.managed_range_info(x)
    assert info["preferred_location"] == DEV  # the section's advice
    assert HOST in info["accessed_by"]
    x.fill_(1.5)
    torch.cuda.synchronize()
    assert x.sum().item() == 1.5 * 256 * 1024
    pool = _pool("device%d:optstate" % DEV)
    assert pool is not None and pool["backend"] == "managed" and pool["region"] == "optstate"
    assert pool["managed_device_bytes"] >= x.numel() * 4
    # a region whose section is not managed is refused, naming it
    with pytest.raises(ValueError, match='region plain is not managed memory'):
        at.managed_empty(16, region="plain")


@pytest.mark.skipif(not _native, reason="the native allocator is not built (%s)" % _why)
def test_the_native_allocator_routes_a_managed_region():
    with at.region("optstate"):
        x = torch.empty(8 * MIB, dtype=torch.uint8, device="cuda")
    info = at.managed_range_info(x)  # ValueError if it were device memory
    assert info["preferred_location"] == DEV
    x.fill_(2)
    torch.cuda.synchronize()
    assert x.sum().item() == 2 * 8 * MIB
    y = torch.empty(MIB, dtype=torch.uint8, device="cuda")  # outside: device memory
    with pytest.raises(ValueError, match="not managed memory"):
        at.managed_range_info(y)
