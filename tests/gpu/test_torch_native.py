#!/usr/bin/env python3
"""GPU tests of the native PyTorch allocator (adaptalloc._torch_native).

    pytest tests/gpu/test_torch_native.py       (after pip install .)

The allocator must be installed before the process's first CUDA allocation,
so this module installs it when it is imported and every test runs in that
one process (the OOM test checks that the same process trains on). The
default-allocator reference run and the install-too-late check run in child
processes (`python3 test_torch_native.py child NAME`). Without torch, CUDA
or the extension the whole module is skipped with the reason. A development
build of the extension is found through AA_TORCH_NATIVE_PATH (the folder
holding _torch_native*.so) instead of the installed package.
"""
import copy
import io
import json
import os
import pickle
import subprocess
import sys

os.environ.setdefault("ADAPTALLOC_DB", "off")
os.environ.setdefault("ADAPTALLOC_HTTP", "off")

HERE = os.path.abspath(__file__)


def _show(res):
    """A child's figures whole in an assertion's message (pytest shortens a
    dict's repr, and the figures are what a failure on a GPU is read from)."""
    return json.dumps(res, sort_keys=True)


def _load_native():
    path = os.environ.get("AA_TORCH_NATIVE_PATH")
    if path:
        sys.path.insert(0, path)
        import _torch_native as m  # noqa: E402
        return m
    from adaptalloc import _torch_native as m  # noqa: E402
    return m


def _train(steps=5):
    """A small training loop with changing shapes; returns outputs and
    final parameters on the CPU."""
    import torch
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(128, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device="cpu").manual_seed(1)
    outs = []
    for step in range(steps):
        x = torch.randn(8, 16 + 8 * step, 128, generator=g).cuda()
        y = model(x).mean(dim=1)
        loss = (y ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        outs.append(y.detach().cpu())
    return outs, [p.detach().cpu() for p in model.parameters()]


def _child(name, out):
    import torch
    if name == "reference":
        torch.save(_train(), out)
    elif name == "late_install":
        torch.zeros(1, device="cuda")
        try:
            _load_native().install(torch.cuda.device_count())
        except RuntimeError as e:
            print(json.dumps({"raised": str(e)}))
            return
        print(json.dumps({"raised": None}))
    elif name == "traced":  # ADAPTALLOC_TRACE=1 in the environment
        _load_native().install(torch.cuda.device_count())
        _train(3)
    elif name == "traced_frames":  # ADAPTALLOC_DB set, no ADAPTALLOC_TRACE
        _load_native().install(torch.cuda.device_count())
        import adaptalloc
        torch.cuda.memory._record_memory_history(stacks="python")
        # a live, sampled, timed trace: 1 in 4 allocations and every one of
        # 1 MiB or more, for 30 s (ended here before)
        adaptalloc.trace(30, sample=4, min_bytes=1 << 20)
        _train(3)
        held = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # live at the end
        adaptalloc.trace_off()
        torch.cuda.memory._record_memory_history(enabled=None)
        print(json.dumps({"held": held.data_ptr()}))
    elif name == "compile":
        _load_native().install(torch.cuda.device_count())
        _compile_reduce_overhead()
    elif name == "oom":
        _load_native().install(torch.cuda.device_count())
        _oom_then_train()
    elif name == "cap_patch":
        _load_native().install(torch.cuda.device_count())
        _cap_survives_patch()
    elif name == "stream_wait":
        m = _load_native()
        m.install(torch.cuda.device_count())
        _stream_wait_reuse(m)
    elif name == "stitch":  # ADAPTALLOC_POLICY: a policy with large.stitch on
        m = _load_native()
        m.install(torch.cuda.device_count())
        _stitch(m)
    elif name == "stitch_grow":  # large.stitch and large.stitch_grow on
        m = _load_native()
        m.install(torch.cuda.device_count())
        _stitch(m, 24)
    elif name in ("stitch_streams", "stitch_graph", "stitch_oom"):  # large.stitch on
        m = _load_native()
        m.install(torch.cuda.device_count())
        {"stitch_streams": _stitch_streams, "stitch_graph": _stitch_graph,
         "stitch_oom": _stitch_oom}[name](m)
    elif name == "plan_change":  # large.plan on: the loop, then other shapes
        m = _load_native()
        m.install(torch.cuda.device_count())
        _plan_change(m, out)
    elif name == "plan_change_ref":
        _plan_change(None, out)
    elif name == "plan":  # ADAPTALLOC_POLICY: a policy with large.plan on
        m = _load_native()
        m.install(torch.cuda.device_count())
        _plan(m, out)
    elif name == "plan_ref":
        _plan(None, out)
    elif name == "plan_trace":  # the plan's loop under PyTorch's allocator, recorded
        # (tools/torch_snapshot_to_trace.py makes it a trace the replay runs
        # with the plan on: the test's loop studied on a CPU)
        torch.cuda.memory._record_memory_history(max_entries=1 << 20)
        _plan_steps(40, side_every=3)
        torch.cuda.memory._dump_snapshot(out)
    elif name.startswith("ipc_"):  # ipc_<consumer mode>_<bytes>
        _, mode, nbytes = name.split("_")
        _load_native().install(torch.cuda.device_count())
        _ipc_producer(mode, int(nbytes))
    elif name == "cap_loop":
        _load_native().install(torch.cuda.device_count())
        _cap_survives_loop()
    elif name == "mempool_oom":
        _load_native().install(torch.cuda.device_count())
        _mempool_use_on_oom()
    elif name == "exit_shared":
        _load_native().install(torch.cuda.device_count())
        _exit_with_shared_blocks()
    elif name == "settings":  # PYTORCH_CUDA_ALLOC_CONF in the environment
        import adaptalloc.torch
        adaptalloc.torch.install()
        _settings_applied()


def _plan_steps(steps, side_every=0, then=0, then_batch=24, at_switch=None):
    """A fixed-shape training loop (the learned plan's case): a small
    transformer, AdamW, `steps` steps; every side_every-th step a copy of the
    activations goes through a side stream (record_stream); then `then`
    steps more at batch then_batch (every activation another size: a plan
    learned on the first shapes stops matching; at_switch() is called just
    before the first of them). Returns the losses and the final parameters
    on the CPU."""
    import torch
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(layer, torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device="cpu").manual_seed(1)
    xs = [torch.randn(16, 128, 256, generator=g) for _ in range(4)]
    xs2 = [torch.randn(then_batch, 128, 256, generator=g) for _ in range(4)] if then else []
    side = torch.cuda.Stream()
    losses = []
    for step in range(steps + then):
        if step == steps and at_switch is not None:
            at_switch()
        x = (xs[step % 4] if step < steps else xs2[step % 4]).cuda()
        y = model(x)
        if side_every and step % side_every == 0:
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                z = (y.detach() * 2).sum()
            y.record_stream(side)
            z.record_stream(torch.cuda.current_stream())
        loss = (y.mean(dim=1) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    torch.cuda.synchronize()
    return losses, [p.detach().cpu() for p in model.parameters()]


def _plan(m, out):
    """test_plan_same_training_and_adopted's child: the loop above; under
    adaptalloc, the pool's plan figures printed as JSON."""
    import torch
    # 80 steps: the plan is made on the pool's planner thread and adopted at
    # the first period's start after it is back, some steps after the period
    # was found (16 were enough when it was planned on the allocating
    # thread). The loop makes ~185 large-path events a step, and a window
    # that does not repeat yet is looked at after 512, 1,024, 2,048, 4,096
    # and then every 4,096 events: 40 steps left the last look at step 22,
    # and one H100 run of 40 ended still learning (another adopted)
    torch.save(_plan_steps(80, side_every=3), out)
    if m is not None:
        st = json.loads(m.stats_json(0))
        pool = st  # stats_json(device): that device's pool, one object
        print(json.dumps({k: pool.get(k) for k in (
            "large_plan_state", "large_plan_period", "large_plan_bytes", "large_plan_hits",
            "large_plan_misses", "large_plans_adopted", "large_plans_dropped",
            "large_plans_refused", "peak_bytes_reserved", "peak_bytes_in_use")}))


def _stitch(m, n_mib=10):
    """test_stitched_range_data_and_snapshot's child: three 6 MiB holes
    between live 3 MiB tensors, then a 10 MiB tensor that no hole fits
    (n_mib: of another size), written by kernels on a side stream; prints
    what happened as JSON."""
    import torch
    mib = 1 << 20
    u8 = dict(dtype=torch.uint8, device="cuda")
    keeps = _holes()
    reserved0 = torch.cuda.memory_reserved()
    side = torch.cuda.Stream()
    steps = {}  # reserved after each step: where it grew, when it does
    with torch.cuda.stream(side):
        x = torch.empty(n_mib * mib, **u8)
        steps["alloc"] = torch.cuda.memory_reserved()
        x.fill_(7)
        steps["fill"] = torch.cuda.memory_reserved()
        s1 = int(x.sum(dtype=torch.int64))
        steps["sum"] = torch.cuda.memory_reserved()
    side.synchronize()
    st = json.loads(m.stats_json(0))
    # reserved as the stitched tensor was made and written: the sum above
    # then makes an int64 copy of it (80 MiB) that needs new memory anyway
    reserved1 = steps["fill"]
    snap = torch.cuda.memory._snapshot()
    reserved_snap = torch.cuda.memory_reserved()  # what the snapshot's segments add up to
    # the segments as (size MiB, stream, [(block KiB, state)...]): shown when
    # an assertion fails
    seg_view = [(sg["total_size"] >> 20, sg["stream"] != 0,
                 [(b["size"] >> 10, b["state"][:6]) for b in sg["blocks"]][:12])
                for sg in snap["segments"]]
    seg_total = sum(sg["total_size"] for sg in snap["segments"])
    tiles_ok = all(sum(b["size"] for b in sg["blocks"]) == sg["total_size"]
                   for sg in snap["segments"])
    keeps_ok = _keeps_ok(keeps)
    x.record_stream(torch.cuda.current_stream())
    del x
    y = torch.empty(n_mib * mib, **u8)  # the kept range again, or its pages
    y.fill_(9)
    s2 = int(y.sum(dtype=torch.int64))
    print(json.dumps({"reserved0": reserved0, "reserved1": reserved1,
                      "stitches": st.get("large_stitches"), "sum1": s1, "sum2": s2,
                      "keeps_ok": keeps_ok, "seg_total": seg_total, "tiles_ok": tiles_ok,
                      "reserved_snap": reserved_snap, "steps": steps,
                      "segments": seg_view,
                      "large": {k: v for k, v in st.items() if k.startswith("large_")}}))


def _holes():
    """Three 6 MiB holes between live 3 MiB tensors (filled with 40, 41,
    42), the device synchronized: a 10 MiB request then fits no hole, and
    with large.stitch on is served from the holes' pages. Returns the live
    tensors."""
    import torch
    mib = 1 << 20
    u8 = dict(dtype=torch.uint8, device="cuda")
    holes, keeps = [], []
    for i in range(3):
        holes.append(torch.empty(6 * mib, **u8))
        keeps.append(torch.full((3 * mib,), 40 + i, **u8))
    del holes
    torch.cuda.synchronize()
    return keeps


def _keeps_ok(keeps):
    """Whether _holes' live tensors hold what they were filled with (checked
    on the CPU: no device memory asked, so it holds under a cap too)."""
    return all(bool((k.cpu() == 40 + i).all()) for i, k in enumerate(keeps))


def _all_equal(t, v):
    """Whether every byte of device tensor t is v, checked on the CPU."""
    return bool((t.cpu() == v).all())


def _warm_kernels():
    """Every kernel the stream children launch, launched once: a first
    launch loads its module, which may wait for the device and end a
    torch.cuda._sleep early."""
    import torch
    t = torch.full((1024,), 3, dtype=torch.uint8, device="cuda")
    t.sum(dtype=torch.int64)
    t.fill_(7)
    bool((t == 7).all())
    torch.cuda._sleep(1000)
    del t
    torch.cuda.synchronize()


def _stitch_streams(m):
    """test_stitched_range_record_stream_and_side_streams's child: a
    stitched 10 MiB tensor written on a side stream, read on the current
    stream behind a long kernel (record_stream) and freed while that read
    is queued; the side stream then asks for the holes' sizes and the
    range's size again and writes them at once. The read must see the
    stitched tensor's data, each new tensor its own, and the live tensors
    beside the holes theirs. Prints what happened as JSON."""
    import torch
    mib = 1 << 20
    u8 = dict(dtype=torch.uint8, device="cuda")
    _warm_kernels()
    keeps = _holes()
    st0 = json.loads(m.stats_json(0))
    side = torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        x = torch.empty(10 * mib, **u8)
        x.fill_(7)
    st1 = json.loads(m.stats_json(0))
    cur.wait_stream(side)
    x.record_stream(cur)
    torch.cuda._sleep(500_000_000)  # the current stream busy for a while
    total = x.sum(dtype=torch.int64)  # queued behind the sleep
    del x
    with torch.cuda.stream(side):
        ys = [torch.empty(6 * mib, **u8) for _ in range(3)]
        z = torch.empty(10 * mib, **u8)
        pending = not cur.query()  # the read still queued when they were taken
        for i, y in enumerate(ys):
            y.fill_(1 + i)
        z.fill_(9)
    torch.cuda.synchronize()
    ys_ok = all(_all_equal(y, 1 + i) for i, y in enumerate(ys))
    z_ok = _all_equal(z, 9)
    del ys, z
    torch.cuda.synchronize()
    # the holes are back: a stitched request on the current stream, with the
    # range's stream idle, must find memory without growing much
    reserved = torch.cuda.memory_reserved()
    w = torch.full((10 * mib,), 5, **u8)
    w_ok = _all_equal(w, 5)
    st2 = json.loads(m.stats_json(0))
    print(json.dumps({"pending": pending, "read_ok": int(total) == 7 * 10 * mib,
                      "ys_ok": ys_ok, "z_ok": z_ok, "w_ok": w_ok, "keeps_ok": _keeps_ok(keeps),
                      "stitched": st1["large_stitches"] - st0["large_stitches"],
                      "grown_last": torch.cuda.memory_reserved() - reserved,
                      "large": {k: v for k, v in st2.items() if k.startswith("large_")}}))


def _stitch_graph(m):
    """test_stitch_refused_under_graph_capture's child: with the holes of
    _holes in the device pool, a CUDA graph captures a step that allocates
    10 MiB tensors (the capture's private pool serves them: no alias is
    mapped under capture), its replays match eager, and after the capture
    the device pool still stitches. The capture is begun and ended by hand:
    torch.cuda.graph empties the cache first, which would give the holes'
    pages back before the capture. Prints what happened as JSON."""
    import torch
    mib = 1 << 20
    n = 10 * mib // 4
    static_in = torch.full((n,), 1.0, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            (static_in * 2 + 1).sum()  # warm up on a side stream
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the warm-up's free memory given back: only the holes stay
    keeps = _holes()
    st0 = json.loads(m.stats_json(0))
    g = torch.cuda.CUDAGraph()
    cap = torch.cuda.Stream()
    cap.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(cap):
        g.capture_begin()
        a = static_in * 2 + 1      # 10 MiB: no hole fits it
        b = a * a                  # 10 MiB more
        static_out = b.sum()
        g.capture_end()
    torch.cuda.current_stream().wait_stream(cap)
    st1 = json.loads(m.stats_json(0))
    replays_ok = True
    for i in range(4):  # no eager request here: the stitch after the capture is x's
        static_in.fill_(float(i))
        g.replay()
        ref = float(n * (2 * i + 1) ** 2)
        replays_ok &= abs(float(static_out) - ref) <= 1e-4 * ref
    del g, a, b, static_out
    torch.cuda.synchronize()
    st2 = json.loads(m.stats_json(0))
    x = torch.full((10 * mib,), 3, dtype=torch.uint8, device="cuda")  # eager: stitched
    x_ok = _all_equal(x, 3)
    st3 = json.loads(m.stats_json(0))
    print(json.dumps({"replays_ok": replays_ok, "x_ok": x_ok, "keeps_ok": _keeps_ok(keeps),
                      "private_pools": m.private_pool_count(0),
                      # the device pool's pages (holes included) all still there
                      # after the capture
                      "holes_kept": st1["large_bytes_reserved"] >= st0["large_bytes_reserved"] > 0,
                      "alias_under_capture": st1["large_alias_maps"] - st0["large_alias_maps"],
                      "stitches_under_capture": st1["large_stitches"] - st0["large_stitches"],
                      "stitches_after": st3["large_stitches"] - st2["large_stitches"],
                      "hits_after": st3["large_stitch_hits"] - st2["large_stitch_hits"]}))


def _stitch_oom(m):
    """test_stitch_before_oom_and_recovery's child: under a memory-fraction
    cap a little above what the pool holds, a request that no hole fits is
    served by stitching instead of failing; a request past the cap raises
    torch.OutOfMemoryError (the out-of-memory retry undoes the stitched
    ranges and gives free pages back); then a 10 MiB request fits under the
    cap again and training goes on, data intact. Prints what happened as
    JSON."""
    import torch
    mib = 1 << 20
    u8 = dict(dtype=torch.uint8, device="cuda")
    keeps = _holes()
    total_mem = torch.cuda.get_device_properties(0).total_memory
    reserved0 = torch.cuda.memory_reserved()
    cap = reserved0 + 4 * mib  # room for two pages, not for 10 MiB
    torch.cuda.set_per_process_memory_fraction(cap / total_mem, 0)
    res = {"reserved0": reserved0, "cap": cap}
    stitches0 = json.loads(m.stats_json(0))["large_stitches"]
    try:
        x = torch.full((10 * mib,), 7, **u8)
        res["stitched_ok"] = _all_equal(x, 7)
        del x
    except torch.OutOfMemoryError as e:
        res["stitched_ok"] = False
        res["first_oom"] = str(e)
    res["reserved_after_stitch"] = torch.cuda.memory_reserved()
    res["stitched"] = json.loads(m.stats_json(0))["large_stitches"] - stitches0
    try:
        torch.empty(64 * mib, **u8)
        res["caught"] = False
    except torch.OutOfMemoryError as e:
        res["caught"] = True
        res["msg"] = str(e)
    res["keeps_ok_after_oom"] = _keeps_ok(keeps)
    try:  # the retry gave the holes' pages back: the request maps new ones, under the cap
        y = torch.full((10 * mib,), 9, **u8)
        res["again_ok"] = _all_equal(y, 9)
        del y
    except torch.OutOfMemoryError as e:
        res["again_ok"] = False
        res["again_oom"] = str(e)
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    outs, _ = _train(steps=3)
    res["trained"] = all(bool(torch.isfinite(o).all()) for o in outs)
    res["keeps_ok"] = _keeps_ok(keeps)
    st = json.loads(m.stats_json(0))
    res["large"] = {k: v for k, v in st.items() if k.startswith("large_")}
    res["num_ooms"] = torch.cuda.memory_stats()["num_ooms"]
    print(json.dumps(res))


def _plan_change(m, out):
    """test_plan_dropped_when_shapes_change's child: the plan's loop for 80
    steps, then 30 at another batch; under adaptalloc, the pool's plan
    figures printed as JSON."""
    import torch
    keys = ("large_plan_state", "large_plan_hits", "large_plan_misses", "large_plans_adopted",
            "large_plans_dropped", "peak_bytes_reserved", "peak_bytes_in_use")
    before = {}

    def at_switch():  # the plan's figures when the batch changes
        if m is not None:
            st = json.loads(m.stats_json(0))
            before.update({k: st.get(k) for k in keys})

    torch.save(_plan_steps(80, side_every=3, then=30, at_switch=at_switch), out)
    if m is not None:
        st = json.loads(m.stats_json(0))
        print(json.dumps({"before": before, **{k: st.get(k) for k in keys}}))


def _stream_wait_reuse(m):
    """test_stream_wait_reuse_keeps_pending_reads_intact's child: prints
    what happened as JSON."""
    import torch
    n = 48 << 20  # floats: 192 MiB, the large path
    side = torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    # every kernel below launched once first: a first launch loads its
    # module, which may wait for the device and end the sleep early
    with torch.cuda.stream(side):
        t = torch.full((1024,), 3.0, device="cuda")
    t.sum(dtype=torch.float64)
    t.fill_(7.0)
    bool((t == 7.0).all())
    torch.cuda._sleep(1000)
    del t
    torch.cuda.synchronize()
    waits0 = json.loads(m.stats_json(0))["large_stream_waits"]
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        a = torch.full((n,), 3.0, device="cuda")
    cur.wait_stream(side)
    a.record_stream(cur)
    torch.cuda._sleep(500_000_000)  # the current stream busy for a while
    total = a.sum(dtype=torch.float64)
    ptr = a.data_ptr()
    reserved = torch.cuda.memory_reserved()
    del a
    with torch.cuda.stream(side):
        b = torch.empty((n,), device="cuda")
        pending = not cur.query()  # the read still queued when b was taken
        b.fill_(7.0)
    torch.cuda.synchronize()
    print(json.dumps({"pending": pending, "same_block": b.data_ptr() == ptr,
                      "grown": torch.cuda.memory_reserved() - reserved,
                      "waits": json.loads(m.stats_json(0))["large_stream_waits"] - waits0,
                      "read_ok": total.item() == 3.0 * n,
                      "write_ok": bool((b == 7.0).all())}))


def _compile_reduce_overhead():
    """torch.compile(mode="reduce-overhead") of a transformer block at three
    batch sizes matches eager (CUDA-graph trees on our private pools)."""
    import torch
    torch.manual_seed(0)
    block = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                             dropout=0.0, batch_first=True).cuda().eval()
    compiled = torch.compile(block, mode="reduce-overhead", dynamic=False)
    checked = 0
    with torch.no_grad():
        for bs in (2, 4, 8):
            for rep in range(3):
                x = torch.randn(bs, 16, 64, device="cuda")
                got = compiled(x).clone()
                torch.testing.assert_close(got, block(x), rtol=1e-3, atol=1e-3)
                checked += 1
    print(json.dumps({"checked": checked}))


def _cap_survives_patch():
    """issue 35: set_per_process_memory_fraction's cap stays in force across
    a policy change (it was dropped: every change set each pool's limit from
    the policy alone). Prints what happened as JSON."""
    import torch
    import adaptalloc
    torch.ones(1, device="cuda")
    frac = 0.02
    torch.cuda.set_per_process_memory_fraction(frac, 0)
    cap = int(frac * torch.cuda.get_device_properties(0).total_memory)

    def refused():  # 1.5x the cap
        try:
            x = torch.empty(int(cap * 1.5), dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            return True
        del x
        return False

    res = {"before": refused()}
    v0 = adaptalloc.policy_version()
    res["patched"] = adaptalloc.patch_policy({"adapt": {"interval_ms": 700}}) > v0
    res["after_patch"] = refused()
    adaptalloc.patch_policy({"pools": {"device": {"limit_bytes": 0}}})
    res["after_limit_patch"] = refused()
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    res["after_release"] = not refused()
    print(json.dumps(res))


def _ipc_producer(mode, nbytes):
    """The IPC tests' producer (on adaptalloc): shares a tensor with a
    consumer process (spawn; on adaptalloc or PyTorch's allocator), which
    reads it and writes element 0; frees its own tensor while the consumer
    still holds it and allocates over the pool, the consumer's data intact;
    the block goes back only after the consumer let go. Prints JSON."""
    import torch
    import torch.multiprocessing as mp
    sys.path.insert(0, os.path.dirname(HERE))
    import _ipc_consumer
    ctx = mp.get_context("spawn")
    q, r = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_ipc_consumer.consume,
                    args=(q, r, mode, os.environ.get("AA_TORCH_NATIVE_PATH", "")))
    p.start()
    res = {}
    t = torch.full((nbytes,), 7, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    ptr = t.data_ptr()
    q.put(t)
    got = r.get(timeout=120)
    if got[0] == "error":
        print(json.dumps({"error": got[1]}))
        p.join(30)
        return
    res["sum_ok"] = got[1] == 7 * nbytes
    torch.cuda.synchronize()
    res["write_seen"] = int(t[0]) == 42
    del t
    torch.cuda.ipc_collect()
    res["held_while_shared"] = torch.cuda.memory_allocated() == base
    fill = [torch.full((nbytes,), 9, dtype=torch.uint8, device="cuda") for _ in range(3)]
    res["not_reused"] = all(f.data_ptr() != ptr for f in fill)
    torch.cuda.synchronize()
    q.put("check")
    res["consumer_data_intact"] = r.get(timeout=120)[1]
    del fill
    q.put("release")
    res["released"] = r.get(timeout=120)[0] == "released"
    p.join(60)
    res["consumer_exit"] = p.exitcode
    for _ in range(50):
        torch.cuda.ipc_collect()
        if torch.cuda.memory_allocated() <= base - nbytes:
            break
        import time
        time.sleep(0.1)
    res["freed_after_release"] = torch.cuda.memory_allocated() <= base - nbytes
    again = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    res["reusable"] = again.data_ptr() != 0
    print(json.dumps(res))


def _cap_survives_loop():
    """The memory-fraction cap stays in force after the policy loop applied
    a decision of its own (a hot size's exact class). Prints JSON."""
    import time
    import torch
    import adaptalloc
    torch.ones(1, device="cuda")
    frac = 0.02
    torch.cuda.set_per_process_memory_fraction(frac, 0)
    cap = int(frac * torch.cuda.get_device_properties(0).total_memory)

    def refused():
        try:
            x = torch.empty(int(cap * 1.5), dtype=torch.uint8, device="cuda")
        except torch.OutOfMemoryError:
            return True
        del x
        return False

    res = {"before": refused()}
    adaptalloc.patch_policy({"adapt": {"interval_ms": 200}})
    d0 = adaptalloc.stats()["adapt"]["decisions"]
    deadline = time.time() + 60
    keep = []
    while time.time() < deadline:
        # one hot size that no class fits well: the loop adds a class for it
        # (2600 B in the 4 KiB class, 36% waste; its exact class is 3072 B,
        # a multiple of the 512 B alignment: 1700 B would round to 2048 B,
        # the class that serves it already, and give the loop nothing to do)
        xs = [torch.empty(2600, dtype=torch.uint8, device="cuda") for _ in range(2000)]
        keep = xs[:10]
        del xs
        time.sleep(0.05)
        if adaptalloc.stats()["adapt"]["decisions"] > d0:
            break
    res["decided"] = adaptalloc.stats()["adapt"]["decisions"] > d0
    if not res["decided"]:  # what the loop saw (shown when the test fails)
        a = adaptalloc.stats()["adapt"]
        res["adapt"] = {k: a.get(k) for k in ("enabled", "steps", "decisions",
                                                "rejected_by_replay", "apply_failures")}
    res["after_loop"] = refused()
    del keep
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    print(json.dumps(res))


def _exit_with_shared_blocks():
    """test_exit_with_shared_blocks_in_limbo's child: blocks shared through
    CUDA IPC (a slab block, an expandable one) that no consumer released,
    freed here: PyTorch keeps them in its limbo and frees them in its own
    static destructor, after this process's other statics are gone."""
    import torch
    kept = []
    for n in (4096, 64 << 20):
        x = torch.ones(n, dtype=torch.uint8, device="cuda")
        kept.append(x.untyped_storage()._share_cuda_())
        del x
    torch.cuda.synchronize()
    print(json.dumps({"shared": len(kept)}))


def _mempool_use_on_oom():
    """MemPool(use_on_oom=True): an allocation of the default pool that the
    cap refuses is served from the MemPool's free memory; a pool without
    the option lends nothing. Prints JSON."""
    import torch
    torch.ones(1, device="cuda")
    mib = 1 << 20
    pool = torch.cuda.MemPool(use_on_oom=True)
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(64 * mib, dtype=torch.uint8, device="cuda")
    xp = x.data_ptr()
    del x  # the pool keeps the memory cached
    torch.cuda.synchronize()
    used = torch.cuda.memory_reserved()
    torch.cuda.set_per_process_memory_fraction(
        (used + 16 * mib) / torch.cuda.get_device_properties(0).total_memory, 0)
    # what the MemPool holds before the refused request (shown when an
    # assertion fails)
    res = {"pool_bytes": sum(s["total_size"] for s in torch.cuda.memory._snapshot()["segments"]
                             if tuple(s["segment_pool_id"]) == tuple(pool.id)),
           "reserved": used}
    try:
        y = torch.empty(48 * mib, dtype=torch.uint8, device="cuda")  # over the cap
        segs = [s for s in torch.cuda.memory._snapshot()["segments"]
                if tuple(s["segment_pool_id"]) == tuple(pool.id)]
        res["served"] = True
        res["from_pool"] = any(s["address"] <= y.data_ptr() < s["address"] + s["total_size"]
                               for s in segs)
        res["same_memory"] = xp <= y.data_ptr() < xp + 64 * mib
        y.fill_(3)
        # both ends read back to the host: a reduction over y would take
        # device memory the cap refuses (an int64 sum copies it to 384 MiB)
        head, tail = y[:mib].cpu(), y[-mib:].cpu()
        res["data_ok"] = bool((head == 3).all()) and bool((tail == 3).all())
        del y
    except torch.OutOfMemoryError as e:
        res["served"] = False
        res["msg"] = str(e)
    # a MemPool without the option, the lending one gone: the cap lifted
    # while it takes its memory (it counts against the cap, as under
    # PyTorch's allocator), then the same cap over what is held now; a
    # request its cached 64 MiB would fit is refused, not lent
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    del pool
    torch.cuda.empty_cache()
    plain = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(plain):
        z = torch.empty(64 * mib, dtype=torch.uint8, device="cuda")
    del z
    torch.cuda.synchronize()
    used = torch.cuda.memory_reserved()
    torch.cuda.set_per_process_memory_fraction(
        (used + 16 * mib) / torch.cuda.get_device_properties(0).total_memory, 0)
    try:
        torch.empty(48 * mib, dtype=torch.uint8, device="cuda")
        res["plain_refused"] = False
    except torch.OutOfMemoryError as e:
        res["plain_refused"] = True
        res["plain_msg"] = str(e)
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    print(json.dumps(res))


def _settings_applied():
    """PYTORCH_CUDA_ALLOC_CONF under adaptalloc (the line is on stderr) and
    a later _set_allocator_settings. Prints JSON."""
    import torch
    import adaptalloc
    torch.ones(1, device="cuda")
    res = {"fraction": torch.cuda.get_per_process_memory_fraction(0),
           "mode": adaptalloc.policy()["pools"]["device"]["large"]["mode"]}
    # the pool holds memory now: its mode is fixed, the rounding is not
    torch.cuda.memory._set_allocator_settings("expandable_segments:True,roundup_power2_divisions:8")
    dev = adaptalloc.policy()["pools"]["device"]
    res["mode_after"] = dev["large"]["mode"]
    res["per_doubling_after"] = dev.get("classes", {}).get("per_doubling")
    print(json.dumps(res))


def _oom_then_train():
    """OOM past a memory-fraction cap is torch.OutOfMemoryError, and the same
    process then trains on."""
    import torch
    torch.ones(1, device="cuda")
    torch.cuda.set_per_process_memory_fraction(0.02, 0)
    cap = int(0.02 * torch.cuda.get_device_properties(0).total_memory)
    res = {"caught": False, "msg": ""}
    try:
        torch.empty(cap + (1 << 30), dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        res["caught"] = True
        res["msg"] = str(e)
    res["num_ooms"] = torch.cuda.memory_stats()["num_ooms"]
    outs, _ = _train(steps=3)
    res["trained"] = all(bool(torch.isfinite(o).all()) for o in outs)
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    print(json.dumps(res))


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "child":
    _child(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    sys.exit(0)

import pytest  # noqa: E402

try:
    import torch
except Exception as e:  # CI: no torch
    pytest.skip("torch is not importable (%s): GPU tests skipped" % e, allow_module_level=True)
if getattr(torch, "__file__", None) is None:  # only the repository's torch/ folder
    pytest.skip("torch is not installed: GPU tests skipped", allow_module_level=True)
if not torch.cuda.is_available():
    pytest.skip("no CUDA device: GPU tests skipped", allow_module_level=True)
try:
    native = _load_native()
except Exception as e:
    pytest.skip("adaptalloc._torch_native is not built (%s): pip install . with torch "
                "and CUDA" % e, allow_module_level=True)

native.install(torch.cuda.device_count())
DEV = 0


def _stats():
    return json.loads(native.stats_json(DEV))


def _run_child(name, tmp_path, **env_over):
    out = str(tmp_path / ("%s.pt" % name))
    env = dict(os.environ)
    env.update(env_over)
    r = subprocess.run([sys.executable, HERE, "child", name, out], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return out, r.stdout


def test_installed():
    assert native.is_installed()
    x = torch.ones(10, device="cuda")
    st = _stats()
    assert st["allocs"] >= 1
    del x


def test_same_outputs_as_default_allocator(tmp_path):
    out, _ = _run_child("reference", tmp_path)
    ref_outs, ref_params = torch.load(out)
    outs, params = _train()
    for a, b in zip(outs, ref_outs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(params, ref_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_install_after_cuda_init_raises(tmp_path):
    _, stdout = _run_child("late_install", tmp_path)
    res = json.loads(stdout.strip().splitlines()[-1])
    assert res["raised"] and "adaptalloc" in res["raised"] and "already" in res["raised"]


def test_memory_allocated_is_rounded_live_sizes():
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    # sizes that are block sizes of any class ladder (multiples of 512 that
    # are powers of two) or page multiples of the large path
    sizes = [512, 4096, 64 << 10, 8 << 20, 32 << 20]
    xs = [torch.empty(s, dtype=torch.uint8, device="cuda") for s in sizes]
    assert torch.cuda.memory_allocated() - base == sum(sizes)
    odd = torch.empty(1000, dtype=torch.uint8, device="cuda")  # rounded up
    grew = torch.cuda.memory_allocated() - base - sum(sizes)
    assert 1000 <= grew <= 1024 + 512
    del xs, odd
    assert torch.cuda.memory_allocated() == base
    st = torch.cuda.memory_stats()
    assert st["allocated_bytes.all.current"] == base


def test_peaks_reset_and_agree_with_stats():
    big = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    peak = torch.cuda.max_memory_allocated()
    assert peak >= 256 << 20
    del big
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated()
    assert torch.cuda.max_memory_reserved() == torch.cuda.memory_reserved()
    st = _stats()
    assert torch.cuda.memory_allocated() == st["bytes_in_use"]
    assert torch.cuda.memory_reserved() == st["bytes_reserved"]
    assert torch.cuda.max_memory_allocated() == st["peak_bytes_in_use"]
    x = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
    assert torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated() >= 16 << 20
    del x
    torch.cuda.reset_accumulated_memory_stats()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == 0


def test_memory_summary_prints():
    x = torch.empty(1 << 20, device="cuda")
    s = torch.cuda.memory_summary()
    assert "Allocated memory" in s and "GPU reserved memory" in s
    print(s)
    del x


def test_snapshot_loads_in_memory_viz(tmp_path):
    from torch.cuda import _memory_viz
    keep = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (700, 3 << 20, 40 << 20)]
    snap = torch.cuda.memory._snapshot()
    assert snap["segments"], "no segments"
    live = {t.data_ptr() for t in keep}
    seen = set()
    total = 0
    for seg in snap["segments"]:
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated":
                seen.add(addr)
            addr += b["size"]
        total += seg["total_size"]
    assert live <= seen
    assert total == torch.cuda.memory_reserved()
    path = str(tmp_path / "snap.pickle")
    torch.cuda.memory._dump_snapshot(path)
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    text = _memory_viz.segsum(loaded)
    assert "segments" in text.lower()
    html = _memory_viz.segment_plot(loaded)
    assert "<html" in html.lower() or "<!doctype" in html.lower() or len(html) > 1000
    del keep


def test_memory_fraction_survives_a_policy_patch(tmp_path):
    _, stdout = _run_child("cap_patch", tmp_path)
    res = json.loads(stdout.strip().splitlines()[-1])
    assert res == {"before": True, "patched": True, "after_patch": True,
                   "after_limit_patch": True, "after_release": True}, res


def test_oom_is_catchable_and_training_goes_on(tmp_path):
    # in a child of its own: an allocator that crashes on OOM must not take
    # the other tests with it
    _, stdout = _run_child("oom", tmp_path)
    res = json.loads(stdout.strip().splitlines()[-1])
    assert res["caught"], _show(res)
    assert "adaptalloc" in res["msg"] and "device 0" in res["msg"] and "limit" in res["msg"]
    assert res["num_ooms"] >= 1
    assert res["trained"]


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                               torch.nn.Linear(256, 64)).cuda()


def test_cuda_graph_capture_and_replays_match_eager():
    model = _mlp().eval()
    static_in = torch.randn(32, 64, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s), torch.no_grad():
        for _ in range(3):
            model(static_in)  # warm up on a side stream
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        static_out = model(static_in)
    assert native.private_pool_count(DEV) >= 1
    for i in range(5):
        x = torch.randn(32, 64, device="cuda") * (i + 1)
        static_in.copy_(x)
        g.replay()
        with torch.no_grad():
            ref = model(x)
        torch.testing.assert_close(static_out, ref)
    del g, static_out
    torch.cuda.synchronize()


def test_make_graphed_callables_training_step():
    eager = _mlp()
    graphed = copy.deepcopy(eager)
    x0 = torch.randn(16, 64, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(graphed, (x0,))
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_g = torch.optim.SGD(graphed.parameters(), lr=0.1)
    g = torch.Generator(device="cpu").manual_seed(3)
    for _ in range(4):
        x = torch.randn(16, 64, generator=g).cuda().requires_grad_(True)
        for m, opt in ((eager, opt_e), (graphed, opt_g)):
            opt.zero_grad(set_to_none=True)
            m(x).pow(2).mean().backward()
            opt.step()
    for a, b in zip(eager.parameters(), graphed.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_compile_reduce_overhead_transformer_block(tmp_path):
    # in a child: inductor's worker processes and CUDA-graph trees stay there
    _, stdout = _run_child("compile", tmp_path)
    res = json.loads(stdout.strip().splitlines()[-1])
    assert res["checked"] == 9, _show(res)


def test_record_stream_keeps_block_until_consumer_done():
    n = 1 << 18
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    results, keep = [], []
    for i in range(40):
        with torch.cuda.stream(side):
            x = torch.full((n,), float(i), device="cuda")
        main.wait_stream(side)
        torch.cuda._sleep(2_000_000)  # the consumer on main reads late
        results.append(x * 1.0)
        x.record_stream(main)
        del x
        with torch.cuda.stream(side):
            keep.append(torch.full((n,), -1.0, device="cuda"))  # would take x's block
    torch.cuda.synchronize()
    bad = [i for i, r in enumerate(results) if not bool((r == float(i)).all())]
    assert bad == []


def _side_stream_cycles(cycles, shapes, host, sums):
    """The side-stream input pipeline (issue #24): each batch copied from
    pinned memory and transformed on a second stream, handed to the current
    stream with wait_stream + record_stream, used there, freed; sizes cycle
    over `shapes`. Returns the reserved bytes after each cycle; checks every
    batch's data on the device."""
    side = torch.cuda.Stream()
    cur = torch.cuda.current_stream()
    after = []
    for _ in range(cycles):
        for k in range(len(shapes)):
            side.wait_stream(cur)
            with torch.cuda.stream(side):
                raw = host[k].to("cuda", non_blocking=True)
                x = raw.float().mul_(2.0)
                y = torch.empty_like(x).copy_(x)
                del raw
            cur.wait_stream(side)
            x.record_stream(cur)  # (a loop variable would keep y alive into the next batch)
            y.record_stream(cur)
            w = torch.empty(4 << 20, device="cuda")  # compute-stream work meanwhile
            w.normal_()
            got = int(y.sum(dtype=torch.float64).item())
            assert got == 2 * sums[k], (k, got, 2 * sums[k])
            del x, y, w
        torch.cuda.synchronize()
        after.append(torch.cuda.memory_reserved())
    return after


def test_side_stream_reuse_data_and_peak():
    """Blocks used on the current stream but allocated and freed on a side
    stream come back once that work is done, before the pool grows: the
    pattern repeats, so after the first cycle the pool takes no more memory,
    and what the pattern adds to reserved memory stays within what PyTorch's
    expandable segments hold for it (1.47x its allocated bytes on the H200,
    the zoo's sidepipe: BENCHMARKS.md section 11). The earlier tests' live
    tensors keep some pages mapped after empty_cache: the figures are
    counted from there. Failed on the H100 at 9685629 (BENCHMARKS.md
    section 11, "Open: the GPU side-stream test fails"); its cause, free
    pieces left apart until the pool grew, is fixed since on the host
    (large_take.c process_events: adaptalloc-bench streams sidepipe --after 250
    steady at 150 MiB; test_core_stream_repeating_pattern_steady), not yet
    re-run on a GPU."""
    shapes = [(64, 3, 224, 224), (32, 3, 320, 320), (96, 3, 160, 160), (48, 3, 256, 256),
              (128, 3, 128, 128), (16, 3, 448, 448)]
    g = torch.Generator().manual_seed(3)
    host = [torch.randint(0, 255, s, dtype=torch.uint8, generator=g).pin_memory() for s in shapes]
    sums = [int(h.sum(dtype=torch.int64)) for h in host]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base_res, base_alloc = torch.cuda.memory_reserved(), torch.cuda.memory_allocated()
    after = _side_stream_cycles(5, shapes, host, sums)
    peak_res = torch.cuda.max_memory_reserved() - base_res
    peak_alloc = torch.cuda.max_memory_allocated() - base_alloc
    print("\nside stream: base reserved %d / allocated %d MiB; the pattern's peak reserved %d / "
          "allocated %d MiB (%.3f); reserved after each cycle %s MiB"
          % (base_res >> 20, base_alloc >> 20, peak_res >> 20, peak_alloc >> 20,
             peak_res / max(peak_alloc, 1), [a >> 20 for a in after]))
    # steady state: nothing new after the first cycle
    assert max(after[1:]) <= after[0], after
    # no more than expandable segments' ratio on this pattern, a page of slack
    assert peak_res <= 1.47 * peak_alloc + (2 << 20), (peak_res, peak_alloc)


def test_stream_wait_reuse_keeps_pending_reads_intact(tmp_path):
    """Stream-ordered reuse (policy large.stream_wait, on by default), in a
    fresh process: a block allocated on a side stream, read on the current
    stream behind a long kernel (record_stream) and freed serves the side
    stream's next request of its size while that read is still queued,
    because the side stream waits for it on the GPU; the side stream then
    overwrites it. The read must see the old data and the pool must not
    grow. With large.stream_wait false (PyTorch's rule) the same request
    takes new memory instead."""
    _, out = _run_child("stream_wait", tmp_path)
    on = json.loads(out.strip().splitlines()[-1])
    assert on["pending"], ("the read finished before the reuse: lengthen the sleep", on)
    assert on["same_block"] and on["grown"] == 0 and on["waits"] >= 1, on
    assert on["read_ok"] and on["write_ok"], on
    pol = json.load(open(os.path.join(os.path.dirname(HERE), "..", "..", "policies",
                                      "default.json")))
    for sec in pol["pools"].values():
        if isinstance(sec, dict) and "large" in sec:
            sec["large"]["stream_wait"] = False
    pol.pop("$schema", None)
    path = tmp_path / "nowait.json"
    path.write_text(json.dumps(pol))
    _, out = _run_child("stream_wait", tmp_path, ADAPTALLOC_POLICY=str(path))
    off = json.loads(out.strip().splitlines()[-1])
    assert not off["same_block"] and off["grown"] > 0 and off["waits"] == 0, off
    assert off["read_ok"] and off["write_ok"], off


def test_stitched_range_data_and_snapshot(tmp_path):
    """large.stitch on: a request that no hole fits is served from the
    holes' pages (reserved does not grow), kernels' writes through the
    stitched address are right, the live tensors beside the holes keep
    theirs, and the snapshot's segments add up to what is reserved."""
    _, stdout = _run_child("stitch", tmp_path, ADAPTALLOC_POLICY=_stitch_policy(tmp_path))
    res = json.loads(stdout.strip().splitlines()[-1])
    mib = 1 << 20
    assert res["stitches"] >= 1, _show(res)
    assert res["reserved1"] == res["reserved0"], _show(res)
    assert res["sum1"] == 7 * 10 * mib and res["sum2"] == 9 * 10 * mib, _show(res)
    assert res["keeps_ok"], _show(res)
    assert res["seg_total"] == res["reserved_snap"] and res["tiles_ok"], _show(res)


def test_stitched_range_with_new_pages(tmp_path):
    """large.stitch_grow on: a 24 MiB request that the holes' whole pages
    (12-16 MiB) leave short is served by a range of those pages and new
    ones; reserved grows by the new ones only (not by the request), the
    kernels' writes through the range read back, and the live tensors
    beside the holes keep theirs."""
    pol = _device_large_policy(tmp_path, "stitch", also=("stitch_grow",))
    _, stdout = _run_child("stitch_grow", tmp_path, ADAPTALLOC_POLICY=pol)
    res = json.loads(stdout.strip().splitlines()[-1])
    mib = 1 << 20
    new = res["large"]["large_stitch_new_bytes"]
    assert res["stitches"] >= 1, _show(res)
    assert 0 < new < 24 * mib and res["reserved1"] - res["reserved0"] == new, _show(res)
    assert res["sum1"] == 7 * 24 * mib and res["sum2"] == 9 * 24 * mib, _show(res)
    assert res["keeps_ok"], _show(res)
    assert res["seg_total"] == res["reserved_snap"] and res["tiles_ok"], _show(res)


def _device_large_policy(tmp_path, key, loop=True, also=()):
    """The default policy with the device pool's large.KEY on (and each key
    of `also`; with loop False the adapt loop off, so that no trim lands
    between a child's readings), as a file; its path."""
    pol = json.load(open(os.path.join(os.path.dirname(HERE), "..", "..", "policies",
                                      "default.json")))
    for k in (key,) + tuple(also):
        pol["pools"]["device"]["large"][k] = True
    if not loop:
        pol["adapt"]["enabled"] = False
    path = tmp_path / ("%s%s.json" % (key, "" if loop else "-noloop"))
    path.write_text(json.dumps(pol))
    return str(path)


def _stitch_policy(tmp_path, loop=True):
    return _device_large_policy(tmp_path, "stitch", loop)


def test_stitched_range_record_stream_and_side_streams(tmp_path):
    """A stitched tensor written on a side stream, read on another stream
    (record_stream) and freed while the read is queued: the side stream's
    next requests for the holes' sizes and the range's size, written at
    once, must not reach the pages under the pending read, and every
    tensor keeps its own data."""
    res = _child_json("stitch_streams", tmp_path,
                      ADAPTALLOC_POLICY=_stitch_policy(tmp_path, loop=False))
    assert res["pending"], ("the read finished before the requests: lengthen the sleep",
                            _show(res))
    assert res["stitched"] >= 1, _show(res)
    assert res["read_ok"], _show(res)
    assert res["ys_ok"] and res["z_ok"] and res["w_ok"] and res["keeps_ok"], _show(res)
    assert res["grown_last"] == 0, _show(res)  # the freed requests' memory serves w


def test_stitch_refused_under_graph_capture(tmp_path):
    """Under CUDA graph capture the device pool, its holes kept, maps no
    alias (the capture's requests go to its private pool, which is made
    with stitching off: torch/src/devices.c), the graph's replays match
    eager, and the device pool stitches after the capture."""
    res = _child_json("stitch_graph", tmp_path,
                      ADAPTALLOC_POLICY=_stitch_policy(tmp_path, loop=False))
    assert res["holes_kept"], ("the holes were given back before the capture", _show(res))
    assert res["alias_under_capture"] == 0 and res["stitches_under_capture"] == 0, _show(res)
    assert res["replays_ok"] and res["x_ok"] and res["keeps_ok"], _show(res)
    assert res["stitches_after"] + res["hits_after"] >= 1, _show(res)


def test_stitch_before_oom_and_recovery(tmp_path):
    """Under a cap that leaves no room for a 10 MiB request, stitching
    serves it from the holes instead of failing; a request past the cap is
    torch.OutOfMemoryError; afterwards a 10 MiB request fits under the cap
    again, the live tensors are intact and training goes on."""
    res = _child_json("stitch_oom", tmp_path,
                      ADAPTALLOC_POLICY=_stitch_policy(tmp_path, loop=False))
    assert res["stitched_ok"] and res["stitched"] == 1, _show(res)
    assert res["reserved_after_stitch"] <= res["cap"], _show(res)
    assert res["caught"] and "adaptalloc" in res["msg"], _show(res)
    assert res["keeps_ok_after_oom"] and res["again_ok"], _show(res)
    assert res["trained"] and res["keeps_ok"], _show(res)
    assert res["num_ooms"] >= 1, _show(res)


def _plan_against_pytorch(tmp_path, child):
    """Runs `child` (plan or plan_change) under PyTorch's allocator and under
    adaptalloc with large.plan on; asserts that both computed the same
    losses and weights; returns adaptalloc's plan figures."""
    ref, _ = _run_child(child + "_ref", tmp_path, PYTORCH_CUDA_ALLOC_CONF="")
    path = _device_large_policy(tmp_path, "plan")
    (tmp_path / "sub").mkdir()
    out, stdout = _run_child(child, tmp_path / "sub", ADAPTALLOC_POLICY=path)
    ref_losses, ref_params = torch.load(ref)
    losses, params = torch.load(out)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-5, atol=1e-6)
    for a, b in zip(params, ref_params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    return json.loads(stdout.strip().splitlines()[-1])


def test_plan_dropped_when_shapes_change(tmp_path):
    """large.plan on: the plan learned on a fixed-shape loop stops matching
    when the batch changes; it is dropped, and the training computes what
    it computes under PyTorch's allocator throughout."""
    res = _plan_against_pytorch(tmp_path, "plan_change")
    b = res["before"]
    assert b["large_plans_adopted"] >= 1, ("no plan before the batch changed", _show(res))
    assert res["large_plans_dropped"] > b["large_plans_dropped"], _show(res)


def test_plan_same_training_and_adopted(tmp_path):
    """large.plan on: a fixed-shape training loop (with a side stream's
    record_stream every third step) computes what it computes under
    PyTorch's allocator, and the pool learned a plan and served from it."""
    res = _plan_against_pytorch(tmp_path, "plan")
    assert res["large_plans_adopted"] >= 1 and res["large_plan_hits"] > 0, _show(res)


def test_cudnn_benchmark_conv_net():
    old = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10)).cuda()
        opt = torch.optim.SGD(net.parameters(), lr=0.01)
        for bs, hw in ((8, 32), (16, 64), (8, 32)):
            x = torch.randn(bs, 3, hw, hw, device="cuda")
            loss = net(x).logsumexp(dim=1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            assert torch.isfinite(loss)
    finally:
        torch.backends.cudnn.benchmark = old


def test_mempool_gets_its_own_pool():
    before = native.private_pool_count(DEV)
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
    y = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
    assert native.private_pool_count(DEV) == before + 1
    segs = [s for s in torch.cuda.memory._snapshot()["segments"]
            if tuple(s["segment_pool_id"]) == tuple(pool.id)]
    assert segs
    assert any(s["address"] <= x.data_ptr() < s["address"] + s["total_size"] for s in segs)
    assert not any(s["address"] <= y.data_ptr() < s["address"] + s["total_size"] for s in segs)
    del x, y
    del pool
    torch.cuda.empty_cache()
    assert native.private_pool_count(DEV) == before


def test_private_pool_small_classes_take_small_slabs():
    # Graph and MemPool pools hold a few blocks per class: each class's
    # slab is 64 KiB (the default policy's classes reach 16 KiB), not the
    # device pool's 2 MiB, or a capture's pool holds megabytes of empty slabs.
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        xs = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (700, 1500, 3000, 6000)]
    segs = [s for s in torch.cuda.memory._snapshot()["segments"]
            if tuple(s["segment_pool_id"]) == tuple(pool.id)]
    assert segs
    for x in xs:
        seg = [s for s in segs if s["address"] <= x.data_ptr() < s["address"] + s["total_size"]]
        assert len(seg) == 1
        assert seg[0]["total_size"] == 64 << 10
    assert sum(s["total_size"] for s in segs) <= 4 * (64 << 10)
    del xs
    del pool
    torch.cuda.empty_cache()


def _history_snapshot(tmp_path, steps=3, **kw):
    """Records history over a small training loop on the native path and
    returns the snapshot _dump_snapshot wrote, loaded."""
    torch.cuda.memory._record_memory_history(max_entries=200000, **kw)
    try:
        _train(steps)
        path = str(tmp_path / "history.pickle")
        torch.cuda.memory._dump_snapshot(path)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    with open(path, "rb") as f:
        return pickle.load(f)


def _check_balanced(entries):
    """Every free_completed of a block allocated in the trace ends that alloc,
    with its size; a block is never allocated twice without a free between.
    Frees of blocks from before the trace are allowed (a few). Returns the
    addresses still live at the end."""
    live, before = {}, 0
    for e in entries:
        if e["action"] == "alloc":
            assert e["addr"] not in live, e
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            if e["addr"] in live:
                assert live.pop(e["addr"]) == e["size"], e
            else:
                before += 1
    assert before <= 50, "%d frees of unknown blocks" % before
    return live


def test_record_memory_history_round_trips_through_memory_viz(tmp_path):
    from torch.cuda import _memory_viz
    snap = _history_snapshot(tmp_path, stacks="python")
    entries = snap["device_traces"][DEV]
    actions = [e["action"] for e in entries]
    n_alloc = actions.count("alloc")
    assert n_alloc > 100, actions[:20]
    assert actions.count("free_requested") == actions.count("free_completed")
    assert actions.count("free_completed") > n_alloc // 2
    live = _check_balanced(entries)
    assert len(live) < n_alloc
    for e in entries:
        assert set(e) >= {"action", "addr", "size", "stream", "time_us", "frames"}
    times = [e["time_us"] for e in entries]
    assert times == sorted(times) and times[0] > 1e15  # microseconds since the epoch
    # stacks="python": allocations made from Python carry its frames, this
    # file's among them (the backward pass's thread has no Python frames)
    framed = [e for e in entries if e["action"] == "alloc" and e["frames"]]
    assert len(framed) > 10
    assert any("test_torch_native.py" in f["filename"] for e in framed for f in e["frames"])
    html = _memory_viz.trace_plot(snap)
    assert "Active Memory Timeline" in html and len(html) > 10000
    (tmp_path / "timeline.html").write_text(html)
    text = _memory_viz.trace(snap)
    assert "entries" in text


def test_record_memory_history_off_clear_and_skip(tmp_path):
    torch.cuda.memory._record_memory_history(enabled=None)
    before = [len(t) for t in torch.cuda.memory._snapshot()["device_traces"]]
    x = torch.empty(1 << 20, device="cuda")
    del x
    after = [len(t) for t in torch.cuda.memory._snapshot()["device_traces"]]
    assert after == before, "entries recorded while off"
    snap = _history_snapshot(tmp_path, steps=1, stacks="python")
    assert snap["device_traces"][DEV]
    # a bounded ring keeps the newest entries
    torch.cuda.memory._record_memory_history(max_entries=10)
    try:
        ys = [torch.empty(4096 * (i + 1), device="cuda") for i in range(20)]
        entries = torch.cuda.memory._snapshot()["device_traces"][DEV]
        assert len(entries) == 10
        assert entries[-1]["action"] == "alloc" and entries[-1]["addr"] == ys[-1].data_ptr()
        del ys
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def _replay_bin():
    cand = [os.environ.get("AA_REPLAY_BIN", "")]
    root = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
    cand += [os.path.join(root, d, "tools", "adaptalloc-replay")
             for d in ("build-device", "build-h", "build")]
    for c in cand:
        if c and os.access(c, os.X_OK):
            return c
    pytest.skip("adaptalloc-replay not built (AA_REPLAY_BIN=...)")


def test_export_torch_snapshot_of_a_traced_run_renders(tmp_path):
    from torch.cuda import _memory_viz
    tool = _replay_bin()
    db = str(tmp_path / "run.db")
    env = dict(os.environ, ADAPTALLOC_TRACE="1", ADAPTALLOC_DB=db, ADAPTALLOC_HTTP="off")
    r = subprocess.run([sys.executable, HERE, "child", "traced", str(tmp_path / "x.pt")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    out = str(tmp_path / "export.pickle")
    r = subprocess.run([tool, "export", "--format", "torch-snapshot", "--db", db, "-o", out,
                        "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["allocs"] > 100
    with open(out, "rb") as f:
        snap = pickle.load(f)
    entries = snap["device_traces"][0]
    live = _check_balanced(entries)
    assert len(live) == summary["live_at_end"]
    html = _memory_viz.trace_plot(snap)
    assert "Active Memory Timeline" in html and len(html) > 10000


def _child_json(name, tmp_path, **env):
    _, stdout = _run_child(name, tmp_path, **env)
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("consumer", ["adaptalloc", "default"])
@pytest.mark.parametrize("nbytes", [4096, 64 << 20])  # a slab block; the expandable path
def test_ipc_share_with_a_spawned_consumer(tmp_path, consumer, nbytes):
    res = _child_json("ipc_%s_%d" % (consumer, nbytes), tmp_path)
    assert "error" not in res, _show(res)
    assert res == dict(res, sum_ok=True, write_seen=True, held_while_shared=True,
                       not_reused=True, consumer_data_intact=True, released=True,
                       consumer_exit=0, freed_after_release=True, reusable=True), res


def test_ipc_share_an_interior_tensor_and_reopen_twice():
    # a view's storage is the block; two shares of one storage: one mapping
    x = torch.arange(1 << 20, dtype=torch.int32, device="cuda")
    st = x[100:].untyped_storage()
    h1 = st._share_cuda_()
    h2 = st._share_cuda_()
    assert h1[1] == h2[1]  # the same handle bytes
    assert isinstance(h1[3], int)


def test_trace_tracker_sees_allocs_frees_and_segments():
    native._tracker_attach()
    native._tracker_entries()
    torch.cuda.empty_cache()
    native._tracker_entries()
    x = torch.empty(40 << 20, dtype=torch.uint8, device="cuda")  # new pages: a segment
    ptr = x.data_ptr()
    del x
    torch.cuda.empty_cache()
    e = native._tracker_entries()
    acts = [a for a, _, _ in e]
    assert ("alloc", ptr, 40 << 20) in e, e[:20]
    assert ("free_requested", ptr, 40 << 20) in e and ("free_completed", ptr, 40 << 20) in e
    assert acts.index("alloc") < acts.index("free_completed")
    maps = [x for x in e if x[0] in ("segment_map", "segment_alloc")]
    unmaps = [x for x in e if x[0] in ("segment_unmap", "segment_free")]
    assert any(a <= ptr < a + n for _, a, n in maps), e
    assert maps and unmaps
    # every segment announced mapped before the block in it
    first_map = min(i for i, x in enumerate(e) if x in maps and x[1] <= ptr < x[1] + x[2])
    assert first_map < acts.index("alloc")


def test_mempool_no_split_blocks_are_their_own_segments():
    pool = torch.cuda.MemPool(no_split=True)
    with torch.cuda.use_mem_pool(pool):
        xs = [torch.empty(n, dtype=torch.uint8, device="cuda") for n in (6 << 20, 10 << 20)]
    segs = [s for s in torch.cuda.memory._snapshot()["segments"]
            if tuple(s["segment_pool_id"]) == tuple(pool.id) and s["segment_type"] == "large"]
    for x in xs:
        mine = [s for s in segs if s["address"] <= x.data_ptr() < s["address"] + s["total_size"]]
        assert len(mine) == 1
        assert [b["state"] for b in mine[0]["blocks"]].count("active_allocated") == 1
        assert mine[0]["address"] == x.data_ptr()
    del xs
    del pool
    torch.cuda.empty_cache()


def test_mempool_use_on_oom_lends_its_memory(tmp_path):
    res = _child_json("mempool_oom", tmp_path)
    assert res.get("served"), _show(res)
    assert res == dict(res, from_pool=True, same_memory=True, data_ok=True,
                       plain_refused=True), _show(res)
    # the message names what the MemPool holds of the limit
    assert "MemPool pools hold 64.00 MiB" in res["plain_msg"], res["plain_msg"]


def test_allocator_settings_line_and_mapping(tmp_path):
    conf = "expandable_segments:False,max_split_size_mb:64,garbage_collection_threshold:0.8"
    out = str(tmp_path / "settings.pt")
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf)
    r = subprocess.run([sys.executable, HERE, "child", "settings", out], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("adaptalloc: PYTORCH_CUDA_ALLOC_CONF:")]
    assert len(lines) == 1, r.stderr
    for key, status in (("expandable_segments:False", "translated"),
                        ("max_split_size_mb:64", "ignored"),
                        ("garbage_collection_threshold:0.8", "translated")):
        assert "%s %s" % (key, status) in lines[0], lines[0]
    # at _set_allocator_settings the device pool is live: its large mode is
    # fixed (refused, with the reason and what to do instead), the rounding
    # applies
    assert res["mode"] == "cache" and res["mode_after"] == "cache", (res, r.stderr[-3000:])
    assert res["per_doubling_after"] == 8, (res, r.stderr[-3000:])
    later = [ln for ln in r.stderr.splitlines()
             if ln.startswith("adaptalloc: _set_allocator_settings: ")]
    assert len(later) == 1, r.stderr
    assert "expandable_segments:True refused (" in later[0], later
    assert "large.mode is fixed" in later[0], later
    assert "PYTORCH_CUDA_ALLOC_CONF" in later[0], later
    assert "roundup_power2_divisions:8 translated" in later[0], later


def test_record_function_annotations_in_history(tmp_path):
    torch.cuda.memory._record_memory_history(max_entries=100000)
    try:
        with torch.profiler.record_function("aa_phase_one"):
            x = torch.empty(1 << 20, device="cuda")
        with torch.profiler.record_function("aa_phase_two"):
            y = torch.empty(1 << 20, device="cuda")
        path = str(tmp_path / "ann.pickle")
        torch.cuda.memory._dump_snapshot(path)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    del x, y
    with open(path, "rb") as f:
        snap = pickle.load(f)
    ann = snap.get("external_annotations", [])
    text = repr(ann)
    assert "aa_phase_one" in text and "aa_phase_two" in text, ann[:10]


def test_memory_fraction_survives_a_loop_decision(tmp_path):
    res = _child_json("cap_loop", tmp_path)
    assert res == {"before": True, "decided": True, "after_loop": True}, _show(res)

def test_live_trace_stores_python_frames(tmp_path):
    """Issue 38 item 3 on the native path: a live sampled trace with
    _record_memory_history(stacks="python") stores the traced allocations'
    Python frames; the bounded export carries them to memory_viz, and
    `adaptalloc holders` names this file as the holder of the 64 MiB block."""
    from torch.cuda import _memory_viz
    tool = _replay_bin()
    db = str(tmp_path / "frames.db")
    env = dict(os.environ, ADAPTALLOC_DB=db, ADAPTALLOC_HTTP="off")
    env.pop("ADAPTALLOC_TRACE", None)
    r = subprocess.run([sys.executable, HERE, "child", "traced_frames", str(tmp_path / "x.pt")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    held = json.loads(r.stdout.strip().splitlines()[-1])["held"]
    import sqlite3
    con = sqlite3.connect(db)
    n_frames = con.execute("SELECT count(*) FROM trace_frames").fetchone()[0]
    n_c = con.execute("SELECT count(*) FROM trace_events WHERE op = 'c'").fetchone()[0]
    n_a = con.execute("SELECT count(*) FROM trace_events WHERE op = 'a'").fetchone()[0]
    con.close()
    assert n_frames > 0 and n_c > 0 and n_c <= n_a, (n_frames, n_c, n_a)
    out = str(tmp_path / "bounded.pickle")
    r = subprocess.run([tool, "export", "--format", "torch-snapshot", "--db", db, "-o", out,
                        "--max-entries", "2000", "--json"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["entries"] <= 2000 and summary["with_frames"] > 0, summary
    with open(out, "rb") as f:
        snap = pickle.load(f)
    framed = [e for e in snap["device_traces"][0] if e["action"] == "alloc" and e["frames"]]
    assert any("test_torch_native.py" in f["filename"] for e in framed for f in e["frames"])
    html = _memory_viz.trace_plot(snap)
    assert "Active Memory Timeline" in html
    cli = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "python",
                       "adaptalloc", "cli.py")
    r = subprocess.run([sys.executable, cli, "holders", "--db", db, "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    h = json.loads(r.stdout)
    big = [b for b in h["largest"] if int(b["ptr"], 16) == held]
    assert big and big[0]["size"] == 64 << 20, h["largest"][:3]
    assert any("test_torch_native.py" in f for f in big[0]["frames"]), big[0]


def test_exit_with_shared_blocks_in_limbo(tmp_path):
    """A producer that exits while its shared blocks are unreleased: PyTorch
    warns, then frees them from its static destructor, which calls the
    allocator after the extension's own statics were destroyed (once
    "corrupted double-linked list" and SIGABRT). The process must end
    cleanly."""
    env = dict(os.environ)
    r = subprocess.run([sys.executable, HERE, "child", "exit_shared", str(tmp_path / "x.pt")],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert "corrupted" not in r.stderr and "adaptalloc: freeing" not in r.stderr, r.stderr[-3000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"shared": 2}, r.stdout


def test_unsupported_features_raise_clearly():
    """What stays unsupported raises naming adaptalloc (CUDA IPC, once
    refused here, is supported: the IPC tests above): a MemPool made with an
    allocator of its own. The pluggable allocator's functions are never
    called, so libc's malloc and free serve as its pair."""
    other = torch.cuda.memory.CUDAPluggableAllocator("libc.so.6", "malloc", "free")
    with pytest.raises(RuntimeError, match="adaptalloc: a torch.cuda.MemPool with its own allocator"):
        torch.cuda.MemPool(other.allocator())
