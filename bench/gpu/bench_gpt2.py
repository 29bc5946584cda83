#!/usr/bin/env python3
"""Benchmark 4: GPT-2-small training from config, adaptalloc vs default.

    python3 bench/gpu/bench_gpt2.py [--steps 200] [--out r.json]

transformers.GPT2LMHeadModel(GPT2Config()) (124M parameters, random init,
fp32 weights, bf16 autocast), AdamW lr 3e-4, batch 8, sequence length drawn
per step from {64, 128, 192, 256, 384, 512} with a fixed seed (the same
sequence of shapes and tokens in both runs). One child process per
allocator, ours first, then the default twice (the second default run gives
the run-to-run noise floor: some CUDA backward kernels use atomics). Reported: the loss curve (max |difference| between
the runs), step time, peak reserved, reserved memory sampled every 10 steps
(flat after warm-up?), and for ours the pool's /stats at the end (class
table size, which the policy loop changes) fetched from the embedded HTTP
server when ADAPTALLOC_HTTP is on.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples"))

SEQS = [64, 128, 192, 256, 384, 512]


def child(mode, steps, stats_out):
    import random

    import torch

    tp = None
    if mode == "ours":
        import torch_pluggable as tp

        tp.install()
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    rnd = random.Random(7)
    g = torch.Generator(device="cpu").manual_seed(7)
    losses, reserved, reserved_all, times = [], [], [], []
    classes0 = tp.stat("classes") if tp else 0  # pool exists: the model is on the GPU

    def res():
        return tp.stat("reserved") if tp else torch.cuda.memory_reserved()

    for step in range(steps):
        seq = rnd.choice(SEQS)
        ids = torch.randint(0, 50257, (8, seq), generator=g).cuda()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))  # .item() synchronises
        times.append(time.perf_counter() - t0)
        r_now = res()
        reserved_all.append(r_now)
        if step % 10 == 0:
            reserved.append(r_now)
    out = {"mode": mode, "losses": losses, "reserved": reserved, "reserved_all": reserved_all,
           "step_ms_median": statistics.median(times[10:]) * 1e3}
    if tp:
        out["peak_reserved"] = tp.stat("peak_reserved")
        out["peak_in_use"] = tp.stat("peak_in_use")
        out["classes_start"] = classes0
        out["classes_end"] = tp.stat("classes")
        port = 0
        try:
            import ctypes

            lib = tp.lib()
            lib.aa_runtime_http_port.restype = ctypes.c_int
            port = lib.aa_runtime_http_port()
        except Exception:  # noqa: BLE001 - runtime without the symbol
            port = 0
        out["http_port"] = port
        if port:
            import urllib.request

            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5).read()
                if stats_out:
                    with open(stats_out, "wb") as f:
                        f.write(body)
                out["stats_bytes"] = len(body)
            except Exception as e:  # noqa: BLE001
                out["stats_error"] = str(e)
    else:
        out["peak_reserved"] = torch.cuda.max_memory_reserved()
        out["peak_in_use"] = torch.cuda.max_memory_allocated()
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", default=None)
    ap.add_argument("--stats-out", default=None)
    ap.add_argument("--child", default=None)
    ap.add_argument("--runs", default="ours,default,default2")
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.steps, a.stats_out)
    res = {}
    for m in a.runs.split(","):
        env = dict(os.environ)
        if m == "ours":
            env.setdefault("ADAPTALLOC_HTTP", "127.0.0.1:0")
        cmd = [sys.executable, os.path.abspath(__file__), "--child", m.rstrip("2"),
               "--steps", str(a.steps)]
        if a.stats_out and m == "ours":
            cmd += ["--stats-out", a.stats_out]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
        if r.returncode != 0 or not lines:
            res[m] = {"error": f"rc={r.returncode}", "stderr": r.stderr[-3000:]}
            print(f"{m}: FAILED rc={r.returncode}\n{r.stderr[-3000:]}")
            continue
        res[m] = json.loads(lines[-1])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    if "losses" in res.get("ours", {}) and "losses" in res.get("default", {}):
        lo, ld = res["ours"]["losses"], res["default"]["losses"]
        diff = max(abs(x - y) for x, y in zip(lo, ld))
        res["max_loss_diff"] = diff
        for m in ("ours", "default"):
            r = res[m]
            tail = r["reserved"][3:] or r["reserved"]
            after = r["reserved_all"][20:] or r["reserved_all"]
            changes = sum(1 for x, y in zip(after, after[1:]) if x != y)
            print(f"{m:>8}: reserved from step 20 on: {min(after) / 2**20:.0f}..{max(after) / 2**20:.0f} MiB, "
                  f"changed {changes} times in {len(after)} steps")
            print(f"{m:>8}: step {r['step_ms_median']:.2f} ms, loss {r['losses'][0]:.3f} -> "
                  f"{r['losses'][-1]:.3f}, peak reserved {r['peak_reserved'] / 2**20:.0f} MiB, "
                  f"reserved after warm-up {min(tail) / 2**20:.0f}..{max(tail) / 2**20:.0f} MiB")
        print(f"max |loss ours - loss default| over {len(lo)} steps = {diff:.3g}")
        if "losses" in res.get("default2", {}):
            noise = max(abs(x - y) for x, y in zip(ld, res["default2"]["losses"]))
            res["max_loss_diff_default_vs_default"] = noise
            print(f"noise floor: max |loss default - loss default (2nd run)| = {noise:.3g}")
        print(f"peak reserved ratio ours/default = "
              f"{res['ours']['peak_reserved'] / res['default']['peak_reserved']:.3f}")
        if "classes_end" in res["ours"]:
            print(f"ours: size classes {res['ours']['classes_start']} -> {res['ours']['classes_end']}, "
                  f"http port {res['ours'].get('http_port')}, /stats bytes {res['ours'].get('stats_bytes')}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
