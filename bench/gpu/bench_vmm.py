#!/usr/bin/env python3
"""What mapping device memory costs: the CUDA driver's virtual-memory calls
as adaptalloc's expandable large path makes them, against larger runs and
against cuMemAlloc (what cudaMalloc, and so PyTorch's default allocator,
pays per segment).

    python3 bench/gpu/bench_vmm.py [--mib 520] [--reps 3] [--run-pages 8] [--out vmm.json]

Each case backs --mib MiB of a fresh address reservation and gives it back,
--reps times (median [min, max], us):
  page        per 2 MiB granule: cuMemCreate + cuMemMap + cuMemSetAccess
              (the core's dev_map, core/src/cuda/cuda_device.c), then per
              granule cuMemUnmap + cuMemRelease
  page_1acc   per granule cuMemCreate + cuMemMap, then ONE cuMemSetAccess
              over the whole range (how PyTorch's expandable segments map)
  run20       20 MiB handles (PyTorch's expandable large-pool step): create
              + map each, one cuMemSetAccess over the range
  one         a single handle of the whole size
  memalloc    cuMemAlloc + cuMemFree of 20 MiB pieces (cudaMalloc's cost)
  alias       stitching's cost: 2 MiB handles already made and mapped at
              one address, mapped again side by side at a second one, a
              cuMemMap + cuMemSetAccess each (map_alias), then a cuMemUnmap
              each (unmap_alias); only the second address timed
  alias_run   the same with one cuMemSetAccess per range of --run-pages
              handles (map_alias_run, a stitched range made in one call)
Per case: us per 2 MiB of memory made usable, and of memory given back, so
the rows compare directly. The driver calls go through ctypes to libcuda in
the CUDA context torch made current; nothing else runs on the GPU.
"""
import argparse
import ctypes
import json
import statistics
import sys
import time

MIB = 1 << 20
GRAN = 2 * MIB


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", AllocFlags)]


class Access(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


U64 = ctypes.c_uint64
SZ = ctypes.c_size_t


class Driver:
    def __init__(self, device):
        cu = ctypes.CDLL("libcuda.so.1")
        self.cu = cu
        for name, args in {
            "cuMemAddressReserve": [ctypes.POINTER(U64), SZ, SZ, U64, ctypes.c_ulonglong],
            "cuMemAddressFree": [U64, SZ],
            "cuMemCreate": [ctypes.POINTER(U64), SZ, ctypes.POINTER(Prop), ctypes.c_ulonglong],
            "cuMemRelease": [U64],
            "cuMemMap": [U64, SZ, SZ, U64, ctypes.c_ulonglong],
            "cuMemUnmap": [U64, SZ],
            "cuMemSetAccess": [U64, SZ, ctypes.POINTER(Access), SZ],
            "cuMemAlloc_v2": [ctypes.POINTER(U64), SZ],
            "cuMemFree_v2": [U64],
        }.items():
            f = getattr(cu, name)
            f.argtypes = args
            f.restype = ctypes.c_int
        self.prop = Prop()
        self.prop.type = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
        self.prop.location.type = 1  # CU_MEM_LOCATION_TYPE_DEVICE
        self.prop.location.id = device
        self.acc = Access()
        self.acc.location.type = 1
        self.acc.location.id = device
        self.acc.flags = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE

    def ok(self, name, *a):
        r = getattr(self.cu, name)(*a)
        if r != 0:
            raise RuntimeError(f"{name} failed: CUresult {r}")

    def reserve(self, size):
        p = U64()
        self.ok("cuMemAddressReserve", ctypes.byref(p), size, GRAN, 0, 0)
        return p.value

    def create(self, size):
        h = U64()
        self.ok("cuMemCreate", ctypes.byref(h), size, ctypes.byref(self.prop), 0)
        return h.value

    def map(self, addr, size, h):
        self.ok("cuMemMap", addr, size, 0, h, 0)

    def access(self, addr, size):
        self.ok("cuMemSetAccess", addr, size, ctypes.byref(self.acc), 1)


def vmm_case(d, total, piece, one_access):
    """Backs `total` bytes in handles of `piece` bytes; returns (us to map,
    us to unmap) of the whole."""
    base = d.reserve(total)
    try:
        t0 = time.perf_counter()
        hs = []
        for off in range(0, total, piece):
            h = d.create(piece)
            d.map(base + off, piece, h)
            if not one_access:
                d.access(base + off, piece)
            hs.append((off, h))
        if one_access:
            d.access(base, total)
        t1 = time.perf_counter()
        for off, h in hs:
            d.ok("cuMemUnmap", base + off, piece)
            d.ok("cuMemRelease", h)
        t2 = time.perf_counter()
    finally:
        d.ok("cuMemAddressFree", base, total)
    return (t1 - t0) * 1e6, (t2 - t1) * 1e6


def alias_case(d, total, per_range):
    """2 MiB handles made and mapped at one address (not timed), then
    mapped again at a second reservation: per_range 1 sets the access per
    handle, else once per `per_range` handles. Returns (us to map the
    aliases, us to unmap them)."""
    first = d.reserve(total)
    second = d.reserve(total)
    hs = []
    try:
        for off in range(0, total, GRAN):
            h = d.create(GRAN)
            hs.append(h)
            d.map(first + off, GRAN, h)
        d.access(first, total)
        t0 = time.perf_counter()
        step = per_range * GRAN
        for r in range(0, total, step):
            n = min(step, total - r)
            for off in range(r, r + n, GRAN):
                d.map(second + off, GRAN, hs[off // GRAN])
                if per_range == 1:
                    d.access(second + off, GRAN)
            if per_range > 1:
                d.access(second + r, n)
        t1 = time.perf_counter()
        for off in range(0, total, GRAN):
            d.ok("cuMemUnmap", second + off, GRAN)
        t2 = time.perf_counter()
        for i, h in enumerate(hs):
            d.ok("cuMemUnmap", first + i * GRAN, GRAN)
            d.ok("cuMemRelease", h)
    finally:
        d.ok("cuMemAddressFree", second, total)
        d.ok("cuMemAddressFree", first, total)
    return (t1 - t0) * 1e6, (t2 - t1) * 1e6


def memalloc_case(d, total, piece):
    t0 = time.perf_counter()
    ps = []
    for _ in range(0, total, piece):
        p = U64()
        d.ok("cuMemAlloc_v2", ctypes.byref(p), piece)
        ps.append(p.value)
    t1 = time.perf_counter()
    for p in ps:
        d.ok("cuMemFree_v2", p)
    t2 = time.perf_counter()
    return (t1 - t0) * 1e6, (t2 - t1) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=520, help="memory per case (a multiple of 20; default 520)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--run-pages", type=int, default=8,
                    help="handles per range in the alias_run case (default 8)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    total = a.mib * MIB
    if a.mib <= 0 or total % (20 * MIB) or a.reps < 1 or a.run_pages < 2:
        sys.exit("bench_vmm: --mib must be a positive multiple of 20, --reps at least 1, "
                 "--run-pages at least 2")
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")  # the primary context, current on this thread
    torch.cuda.synchronize()
    d = Driver(torch.cuda.current_device())
    cases = {"page": lambda: vmm_case(d, total, GRAN, False),
             "page_1acc": lambda: vmm_case(d, total, GRAN, True),
             "run20": lambda: vmm_case(d, total, 20 * MIB, True),
             "one": lambda: vmm_case(d, total, total, True),
             "memalloc": lambda: memalloc_case(d, total, 20 * MIB),
             "alias": lambda: alias_case(d, total, 1),
             "alias_run": lambda: alias_case(d, total, a.run_pages)}
    for f in cases.values():  # warm the driver's paths once
        f()
    res = {k: {"map": [], "unmap": []} for k in cases}
    for _ in range(a.reps):
        for k, f in cases.items():  # interleaved
            m, u = f()
            res[k]["map"].append(m)
            res[k]["unmap"].append(u)
    pages = total // GRAN
    print(f"bench_vmm: {a.mib} MiB per case, {a.reps} reps; us per 2 MiB, "
          "median [min, max]")
    print("| case | make usable | give back |")
    print("|---|---:|---:|")
    for k, v in res.items():
        cells = []
        for what in ("map", "unmap"):
            x = [t / pages for t in v[what]]
            cells.append(f"{statistics.median(x):.2f} [{min(x):.2f}, {max(x):.2f}]")
        print(f"| {k} | {cells[0]} | {cells[1]} |")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"mib": a.mib, "reps": a.reps, "us": res}, f, indent=1)


if __name__ == "__main__":
    main()
