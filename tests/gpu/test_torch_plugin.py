#!/usr/bin/env python3
"""GPU tests of libadaptalloc_torch.so (run on a machine with a GPU).

    python3 tests/gpu/test_torch_plugin.py            # all tests
    python3 tests/gpu/test_torch_plugin.py NAME...    # some
    pytest tests/gpu/test_torch_plugin.py             # also works

A pluggable allocator can be set only once per process, before any CUDA
allocation, so every case runs in a child process of its own
(`... child CASE`) and the parent compares results. Prints one line per test
and exits non-zero if any failed. Skips (exit 0) when there is no GPU.

Cases:
  same_outputs       a model trained 5 steps gives bit-identical outputs
                     and gradients with adaptalloc and with PyTorch's default
  record_stream      producer stream / consumer stream with record_stream:
                     no block is reused while the consumer still reads it
                     (data checked); a control run without the hook shows the
                     test can see the bug
  empty_cache        torch.cuda.empty_cache returns memory to the device
  memory_fraction    set_per_process_memory_fraction caps the pool
  mempool            torch.cuda.MemPool + use_mem_pool routes segments to us
  stats_json         our stats are complete when torch.cuda.memory_stats raises
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))


# ------------------------------------------------------------------ children

def _model_run(out_path, ours):
    import torch
    import torch_pluggable as tp

    if ours:
        tp.install()
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device="cpu").manual_seed(1)
    outs = []
    for step in range(5):
        seq = 16 + 8 * step  # varying shapes: different block sizes each step
        x = torch.randn(8, seq, 256, generator=g).cuda()
        y = model(x).mean(dim=1)
        loss = (y ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        outs.append(y.detach().cpu())
    grads = [p.grad.detach().cpu() for p in model.parameters()]
    torch.save({"outs": outs, "grads": grads}, out_path)
    if ours:
        print(json.dumps({"allocs": tp.stat("allocs"), "frees": tp.stat("frees"),
                          "invalid_frees": tp.stat("invalid_frees")}))


def _record_stream_run(hook):
    """Consumer on the main stream reads x late (after a GPU sleep); x is freed
    right after, and the producer stream immediately allocates and overwrites.
    With record_stream honoured, x's block is not reused until the consumer
    has read it."""
    import torch
    import torch_pluggable as tp

    tp.install(record_stream=hook)
    n = 1 << 18  # 1 MiB of float32: a slab class block
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    results = []
    keep = []
    for i in range(40):
        with torch.cuda.stream(side):
            x = torch.full((n,), float(i), device="cuda")
        main.wait_stream(side)
        torch.cuda._sleep(2_000_000)  # ~1 ms on main: the consumer reads late
        results.append(x * 1.0)  # consumer on main
        x.record_stream(main)
        del x
        with torch.cuda.stream(side):
            z = torch.full((n,), -1.0, device="cuda")  # would take x's block
            keep.append(z)
    torch.cuda.synchronize()
    bad = sum(1 for i, r in enumerate(results) if not bool((r == float(i)).all()))
    print(json.dumps({"bad": bad, "total": len(results),
                      "pending_max": tp.stat("pending")}))


def _empty_cache_run():
    import torch
    import torch_pluggable as tp

    tp.install()
    free0, total = torch.cuda.mem_get_info()
    xs = [torch.empty(s, dtype=torch.uint8, device="cuda")
          for s in [512, 4096, 70000, 1 << 20, 3 << 20, 64 << 20, 256 << 20] * 4]
    del xs
    torch.cuda.synchronize()
    reserved_before = tp.stat("reserved")
    free1, _ = torch.cuda.mem_get_info()
    torch.cuda.empty_cache()
    free2, _ = torch.cuda.mem_get_info()
    print(json.dumps({"reserved_before": reserved_before,
                      "reserved_after": tp.stat("reserved"),
                      "in_use": tp.stat("in_use"),
                      "free_delta": free2 - free1, "free0": free0, "free2": free2}))


def _memory_fraction_run():
    import torch
    import torch_pluggable as tp

    tp.install()
    _, total = torch.cuda.mem_get_info()
    torch.cuda.set_per_process_memory_fraction(0.02)  # ~2.8 GiB on an H200
    limit = tp.stat("limit")
    ok = torch.empty(int(total * 0.01), dtype=torch.uint8, device="cuda")
    del ok
    # Over the cap: the pool must refuse (aa_torch_alloc returns NULL). We
    # check the counter directly instead of letting torch touch a NULL tensor.
    lib = tp.lib()
    import ctypes

    lib.aa_torch_alloc.restype = ctypes.c_void_p
    lib.aa_torch_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    p = lib.aa_torch_alloc(int(total * 0.05), 0, None)
    print(json.dumps({"limit": limit, "total": total, "refused": p is None or p == 0,
                      "ooms": tp.stat("ooms")}))


def _mempool_run():
    import torch
    import torch_pluggable as tp

    pool = torch.cuda.MemPool(tp.allocator().allocator())
    with torch.cuda.use_mem_pool(pool):
        a = torch.randn(1000, device="cuda")
        b = torch.randn(3000, 3000, device="cuda")
    c = torch.randn(1000, device="cuda")  # outside: PyTorch's own segments
    s = float((a.sum() + b.sum() + c.sum()).item())
    st = tp.stats_json() or {}
    print(json.dumps({"allocs": tp.stat("allocs"), "in_use": tp.stat("in_use"),
                      "sum_finite": s == s, "hh": st.get("heavy_hitters", st.get("hh"))}))
    del a, b, pool


def _stats_json_run():
    import torch
    import torch_pluggable as tp

    tp.install()
    x = torch.randn(1 << 20, device="cuda")
    raised = False
    try:
        torch.cuda.memory_stats()
    except Exception:  # noqa: BLE001 - PyTorch raises RuntimeError here
        raised = True
    st = tp.stats_json()
    print(json.dumps({"torch_raised": raised, "have_stats": st is not None,
                      "keys": sorted(st.keys())[:40] if st else [],
                      "in_use": tp.stat("in_use"),
                      "json_in_use": st.get("bytes_in_use") if st else None,
                      # memory_stats keys, through the mapping the native
                      # allocator uses too (torch/src/stats_map.c)
                      "figures": {k: tp.stat(k) for k in (
                          "allocated_bytes.all.current", "allocation.all.current",
                          "allocation.large_pool.current", "reserved_bytes.all.current",
                          "requested_bytes.all.current")},
                      "reserved": tp.stat("reserved"),
                      "unknown": tp.stat("allocated_bytes.every.current")}))
    del x


CHILDREN = {
    "model_ours": lambda a: _model_run(a[0], True),
    "model_default": lambda a: _model_run(a[0], False),
    "record_stream_hook": lambda a: _record_stream_run(True),
    "record_stream_nohook": lambda a: _record_stream_run(False),
    "empty_cache": lambda a: _empty_cache_run(),
    "memory_fraction": lambda a: _memory_fraction_run(),
    "mempool": lambda a: _mempool_run(),
    "stats_json": lambda a: _stats_json_run(),
}


# ------------------------------------------------------------------ parent

def child(case, *args, timeout=300, wrap=None):
    cmd = [sys.executable, os.path.abspath(__file__), "child", case, *args]
    if wrap:
        cmd = wrap + cmd
    env = dict(os.environ, ADAPTALLOC_HTTP=os.environ.get("ADAPTALLOC_HTTP", "off"),
               ADAPTALLOC_DB=os.environ.get("ADAPTALLOC_DB", "off"),
               CUBLAS_WORKSPACE_CONFIG=":4096:8")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    last = [l for l in r.stdout.splitlines() if l.startswith("{")]
    data = json.loads(last[-1]) if last else None
    return r.returncode, data, r.stdout + r.stderr


def test_same_outputs():
    import torch

    with tempfile.TemporaryDirectory() as d:
        pa, pb = os.path.join(d, "a.pt"), os.path.join(d, "b.pt")
        rc1, info, log1 = child("model_ours", pa)
        rc2, _, log2 = child("model_default", pb)
        assert rc1 == 0, log1
        assert rc2 == 0, log2
        a, b = torch.load(pa), torch.load(pb)
        for x, y in zip(a["outs"] + a["grads"], b["outs"] + b["grads"]):
            assert torch.equal(x, y), f"max diff {(x - y).abs().max()}"
        assert info["invalid_frees"] == 0, info
        return f"5 steps, {len(a['grads'])} grads bit-identical; ours allocs={info['allocs']}"


def test_record_stream():
    rc, info, log = child("record_stream_hook")
    assert rc == 0, log
    assert info["bad"] == 0, info
    rc2, ctl, log2 = child("record_stream_nohook")
    ctl_s = f"control without hook: {ctl['bad']}/{ctl['total']} corrupted" if ctl else \
        f"control crashed rc={rc2}"
    return f"{info['total']} rounds, 0 corrupted; {ctl_s}"


def test_record_stream_memcheck():
    tool = "compute-sanitizer"
    if os.environ.get("AA_GPU_MEMCHECK_PY", "0") != "1":
        return "SKIP: set AA_GPU_MEMCHECK_PY=1 (python under memcheck is slow)"
    if subprocess.run(["which", tool], capture_output=True).returncode != 0:
        return "SKIP: compute-sanitizer not found"
    rc, info, log = child("record_stream_hook",
                          timeout=int(os.environ.get("AA_GPU_MEMCHECK_TIMEOUT", "150")),
                          wrap=[tool, "--tool", "memcheck", "--report-api-errors", "no",
                                "--error-exitcode", "3"])
    assert rc == 0, log[-3000:]
    assert info["bad"] == 0, info
    summary = [l for l in log.splitlines() if "ERROR SUMMARY" in l]
    return summary[-1].strip() if summary else "memcheck ran"


def test_empty_cache():
    rc, info, log = child("empty_cache")
    assert rc == 0, log
    assert info["reserved_before"] > (256 << 20), info
    assert info["reserved_after"] <= info["in_use"] + (64 << 20), info
    assert info["free_delta"] > (256 << 20), info
    return (f"reserved {info['reserved_before'] >> 20} MiB -> {info['reserved_after'] >> 20} MiB, "
            f"device free +{info['free_delta'] >> 20} MiB")


def test_memory_fraction():
    rc, info, log = child("memory_fraction")
    assert rc == 0, log
    want = int(info["total"] * 0.02)
    assert abs(info["limit"] - want) <= (1 << 20), info
    assert info["refused"], info
    return f"limit {info['limit'] >> 20} MiB (0.02 x total), over-cap request refused"


def test_mempool():
    rc, info, log = child("mempool")
    assert rc == 0, log
    assert info["allocs"] >= 1, info
    assert info["sum_finite"], info
    return f"segment requests seen: {info['allocs']}; heavy hitters {info['hh']}"


def test_stats_json():
    rc, info, log = child("stats_json")
    assert rc == 0, log
    assert info["have_stats"], info
    assert info["in_use"] >= (4 << 20), info
    fig = info["figures"]
    # the mapping's figure against the pool's own JSON (no region here)
    assert fig["allocated_bytes.all.current"] == info["json_in_use"], info
    assert fig["reserved_bytes.all.current"] == info["reserved"], info
    assert fig["allocation.all.current"] >= 1 and fig["allocation.large_pool.current"] >= 1, info
    assert fig["requested_bytes.all.current"] >= (4 << 20), info
    assert info["unknown"] == 0, info
    return f"torch.cuda.memory_stats raised={info['torch_raised']}; ours has {len(info['keys'])} keys"


TESTS = [test_same_outputs, test_record_stream, test_empty_cache, test_memory_fraction,
         test_mempool, test_stats_json, test_record_stream_memcheck]


def main(argv):
    if len(argv) >= 2 and argv[0] == "child":
        CHILDREN[argv[1]](argv[2:])
        return 0
    import torch

    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    want = set(argv)
    failed = 0
    for t in TESTS:
        if want and t.__name__ not in want and t.__name__[5:] not in want:
            continue
        try:
            msg = t()
            print(f"PASS {t.__name__}: {msg}", flush=True)
        except Exception as e:  # noqa: BLE001 - report every failure and go on
            failed += 1
            print(f"FAIL {t.__name__}: {str(e)[-4000:]}", flush=True)
    print(f"{'FAILED' if failed else 'OK'}: {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
