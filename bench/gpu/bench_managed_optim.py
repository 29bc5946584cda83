#!/usr/bin/env python3
"""Optimizer state in managed memory (issue 25 item 3): Adam's exp_avg and
exp_avg_sq for a stack of Linear layers (about 300M parameters by default)
kept three ways, the training step otherwise the same:

  device       the states in device memory (torch.optim.Adam as usual)
  managed      the states in adaptalloc managed memory (managed_empty, advised
               to prefer the host): prefetched to the GPU on the current
               stream before optimizer.step(), prefetched back to the host
               after it, so between steps they leave the device to the
               activations
  cpu_offload  the states and an fp32 master copy of the parameters on the
               host (pinned): gradients copied down, Adam stepped on the CPU,
               parameters copied back up

    python3 bench/gpu/bench_managed_optim.py [--params 300e6] [--reps 20]
                                             [--json out.json]

Each mode runs in a fresh process. Figures: the optimizer part of an
iteration ("step": prefetch in + step + prefetch out for managed; grad copy
+ CPU step + param copy for cpu_offload), the whole iteration (forward,
backward, step), median and [min, max] over the repetitions after warm-up;
and peak device memory as the driver reports it (torch.cuda.mem_get_info,
sampled after every phase, less what the process held before the model).

Safety: before anything is allocated the script reads mem_get_info and
scales the model down until its estimate (16 bytes a parameter: weights,
grads, two states; plus activations) is under a quarter of the free memory
(--budget); every figure stays far below free device memory, and the managed
pool's safety cap (never oversubscribe) stays on.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODES = ["device", "managed", "cpu_offload"]
MIB = 1 << 20


def med_range(xs):
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def plan(free_bytes, want_params, width, batch, budget):
    """(layers, params, estimate): the most layers of width x width (+ bias)
    up to want_params whose estimate fits budget * free_bytes."""
    per_layer = width * width + width
    layers = max(1, int(want_params // per_layer))
    act = 4 * batch * width * 4  # a few activations a layer, fp32

    def est(n):
        return 16 * n * per_layer + n * act + 256 * MIB

    while layers > 1 and est(layers) > budget * free_bytes:
        layers -= 1
    return layers, layers * per_layer, est(layers)


def child(args):
    import torch

    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.cuda.init()
    free0, total = torch.cuda.mem_get_info(dev)
    layers, nparams, est = plan(free0, args.params, args.width, args.batch, args.budget)
    if est > args.budget * free0:
        raise SystemExit("bench_managed_optim: even one layer (%d MiB) is over %.0f%% of the "
                         "device's %d MiB free; refusing" % (est // MIB, args.budget * 100,
                                                              free0 // MIB))
    base_used = total - free0
    peak = [0]

    def sample():
        torch.cuda.synchronize()
        f, t = torch.cuda.mem_get_info(dev)
        peak[0] = max(peak[0], (t - f) - base_used)

    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*mods).to(dev)
    params = [p for p in model.parameters()]
    x = torch.randn(args.batch, args.width, device=dev)

    def fwd_bwd():
        model.zero_grad(set_to_none=False)
        loss = model(x).pow(2).mean()
        loss.backward()
        return loss

    mode = args.child
    states = []
    if mode in ("device", "managed"):
        opt = torch.optim.Adam(params, lr=1e-4, foreach=True)
        fwd_bwd()
        opt.step()  # Adam makes its states (on the device) here
        if mode == "managed":
            import adaptalloc.torch as at
            for p in params:
                st = opt.state[p]
                for k in ("exp_avg", "exp_avg_sq"):
                    m = at.managed_empty(st[k].shape, st[k].dtype, device=0,
                                         advise={"preferred_location": "host"},
                                         prefetch=False)
                    m.copy_(st[k])
                    st[k] = m
                    states.append(m)
            torch.cuda.synchronize()
            for m in states:
                at.prefetch(m, "cpu")
            torch.cuda.empty_cache()  # the device copies of the states are gone

            def step():
                for m in states:
                    at.prefetch(m, 0)
                opt.step()
                sample()
                for m in states:
                    at.prefetch(m, "cpu")
        else:
            def step():
                opt.step()
                sample()
    elif mode == "cpu_offload":
        master = [p.detach().to("cpu").pin_memory().requires_grad_(True) for p in params]
        for mp in master:
            mp.grad = torch.zeros_like(mp).pin_memory()
        opt = torch.optim.Adam(master, lr=1e-4, foreach=True)

        def step():
            for p, mp in zip(params, master):
                mp.grad.copy_(p.grad, non_blocking=True)
            torch.cuda.synchronize()
            opt.step()
            for p, mp in zip(params, master):
                p.data.copy_(mp, non_blocking=True)
            sample()
    else:
        raise SystemExit("bench_managed_optim: unknown mode %r" % mode)

    sample()
    step_ms, iter_ms = [], []
    for i in range(args.warmup + args.reps):
        t0 = time.perf_counter()
        fwd_bwd()
        sample()
        t1 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if i >= args.warmup:
            step_ms.append((t2 - t1) * 1e3)
            iter_ms.append((t2 - t0) * 1e3)
    out = {"mode": mode, "layers": layers, "params": nparams,
           "state_bytes": 8 * nparams, "estimate_bytes": est,
           "free_at_start": free0, "total": total,
           "step_ms": med_range(step_ms), "iter_ms": med_range(iter_ms),
           "peak_device_bytes": peak[0],
           "torch_max_allocated": torch.cuda.max_memory_allocated(dev)}
    if mode == "managed":
        import adaptalloc
        pools = [p for p in adaptalloc.stats()["pools"] if p["backend"] == "managed"]
        out["managed_pools"] = [{k: p.get(k) for k in (
            "name", "bytes_reserved", "managed_device_bytes", "managed_host_bytes",
            "managed_unknown_bytes")} for p in pools]
    print("RESULT " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=float, default=300e6, help="parameters wanted (scaled "
                    "down to fit --budget of free memory)")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--budget", type=float, default=0.25,
                    help="the most of the device's free memory the model may take")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not 0 < args.budget <= 0.5:
        ap.error("--budget must be in (0, 0.5]: the benchmark never comes near free memory")
    if args.child:
        child(args)
        return
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            ap.error("unknown mode %r (known: %s)" % (m, ", ".join(MODES)))
    env = dict(os.environ, ADAPTALLOC_DB="off", ADAPTALLOC_HTTP="off")
    results = []
    for m in modes:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", m,
               "--params", str(args.params), "--width", str(args.width),
               "--batch", str(args.batch), "--reps", str(args.reps),
               "--warmup", str(args.warmup), "--budget", str(args.budget)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        if p.returncode != 0 or not line:
            sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
            raise SystemExit("bench_managed_optim: mode %s failed (exit %d)" % (m, p.returncode))
        r = json.loads(line[-1][len("RESULT "):])
        results.append(r)
        print("%-12s %4.0fM params  step %8.2f ms [%.2f, %.2f]  iter %8.2f ms  "
              "peak device %7.0f MiB" % (m, r["params"] / 1e6, r["step_ms"]["median"],
                                         r["step_ms"]["min"], r["step_ms"]["max"],
                                         r["iter_ms"]["median"],
                                         r["peak_device_bytes"] / MIB), flush=True)
    doc = {"benchmark": "managed_optim", "results": results}
    try:
        import torch
        doc["torch"] = torch.__version__
        doc["device"] = torch.cuda.get_device_name(0)
    except Exception:  # the children ran; the header is a nicety
        pass
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
