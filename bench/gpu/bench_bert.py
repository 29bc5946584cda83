#!/usr/bin/env python3
"""Benchmark 3: BERT-base fp16 inference, adaptalloc vs PyTorch's default.

    python3 bench/gpu/bench_bert.py latency [--reps 3] [--load half-cuda|cuda-half] [--out r.json]
    python3 bench/gpu/bench_bert.py maxbatch [--cap-gib 2] [--out r.json]

latency: transformers.BertModel(BertConfig()) with random weights, fp16,
eval, sequence 128, batches 1, 32, 128. Each child process (ours or default,
alternating) builds the model, then per batch: 10 warm-up forwards, then 5
repetitions of 20 timed forwards (CUDA events); latency = median of the 5
per-forward means. Peak reserved after each batch (batches ascend, so the
running peak is that batch's): ours from our pool stats, default from
torch.cuda.max_memory_reserved().

maxbatch: the same model under a memory cap (ours: aa_torch_set_limit; the
default: torch.cuda.set_per_process_memory_fraction(cap/total)). Batches grow
by `--step` until a forward fails; the largest that ran is the answer. The
default raises torch.OutOfMemoryError; ours returns NULL to PyTorch, which
PyTorch does not check, so our child stops at the first batch where the
pool's `ooms` counter moves or CUDA reports an error, and the child is run
in a process of its own so that a poisoned CUDA context cannot matter.
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


def make_model(load="half-cuda"):
    """half-cuda: converted on the CPU, then moved (no fp32 copy on the GPU);
    cuda-half: the common idiom model.cuda().half(), where the fp32 weights
    pass through the GPU first (where the default allocator's 490 MB reserved
    against 318 MB allocated comes from)."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    m = BertModel(BertConfig())
    m = m.half().cuda() if load == "half-cuda" else m.cuda().half()
    return m.eval()


def child_latency(mode, batches, load):
    import torch

    tp = None
    if mode == "ours":
        import torch_pluggable as tp

        tp.install()
    model = make_model(load)
    out = {"mode": mode, "load": load, "batches": {}}
    with torch.inference_mode():
        for b in batches:
            ids = torch.randint(0, 30522, (b, 128), device="cuda")
            for _ in range(10):
                model(input_ids=ids)
            torch.cuda.synchronize()
            reps, cpu = [], []
            for _ in range(5):
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                t0 = time.perf_counter()
                for _ in range(20):
                    model(input_ids=ids)
                t1 = time.perf_counter()  # CPU time to issue (launch-bound if ~= GPU time)
                e1.record()
                e1.synchronize()
                reps.append(e0.elapsed_time(e1) / 20)
                cpu.append((t1 - t0) * 1e3 / 20)
            if tp:
                peak_res, peak_use = tp.stat("peak_reserved"), tp.stat("peak_in_use")
            else:
                peak_res = torch.cuda.max_memory_reserved()
                peak_use = torch.cuda.max_memory_allocated()
            out["batches"][str(b)] = {"ms": statistics.median(reps), "ms_reps": reps,
                                      "cpu_issue_ms": statistics.median(cpu),
                                      "peak_reserved": peak_res, "peak_in_use": peak_use}
            del ids
    print(json.dumps(out))


def child_maxbatch(mode, cap, start, step, stop):
    import torch

    tp = None
    if mode == "ours":
        import torch_pluggable as tp

        tp.install()  # before anything touches CUDA memory
        tp.set_limit(cap)
    else:
        _, total = torch.cuda.mem_get_info()
        torch.cuda.set_per_process_memory_fraction(cap / total)
    model = make_model()
    best = 0
    b = start
    with torch.inference_mode():
        while b <= stop:
            try:
                ids = torch.randint(0, 30522, (b, 128), device="cuda")
                before = tp.stat("ooms") if tp else 0
                y = model(input_ids=ids).last_hidden_state
                torch.cuda.synchronize()
                if tp and tp.stat("ooms") != before:
                    break
                del y, ids
            except Exception:  # noqa: BLE001 - OOM (default) or CUDA error (ours)
                break
            best = b
            print(json.dumps({"ok": b}), flush=True)
            b += step
    print(json.dumps({"mode": mode, "cap": cap, "max_batch": best}), flush=True)


def run(args_list, timeout=600):
    env = dict(os.environ)
    env.setdefault("ADAPTALLOC_HTTP", "off")
    env.setdefault("ADAPTALLOC_DB", "off")
    r = subprocess.run([sys.executable, os.path.abspath(__file__)] + args_list,
                       capture_output=True, text=True, env=env, timeout=timeout)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    return r.returncode, lines, r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["latency", "maxbatch", "child-latency", "child-maxbatch"])
    ap.add_argument("--mode", default="ours")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--cap-gib", type=float, default=2.0)
    ap.add_argument("--start", type=int, default=64)
    ap.add_argument("--step", type=int, default=64)
    ap.add_argument("--stop", type=int, default=8192)
    ap.add_argument("--modes", default="ours,default",
                    help="which allocators to run (latency/maxbatch)")
    ap.add_argument("--load", choices=["half-cuda", "cuda-half"], default="half-cuda",
                    help="how the model reaches the GPU (see make_model)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    modes = a.modes.split(",")
    batches = [int(x) for x in a.batches.split(",")]
    cap = int(a.cap_gib * (1 << 30))
    if a.what == "child-latency":
        return child_latency(a.mode, batches, a.load)
    if a.what == "child-maxbatch":
        return child_maxbatch(a.mode, cap, a.start, a.step, a.stop)

    result = {}
    if a.what == "latency":
        runs = {m: [] for m in modes}
        for rep in range(a.reps):
            for m in (modes if rep % 2 == 0 else modes[::-1]):
                rc, lines, err = run(["child-latency", "--mode", m, "--batches", a.batches,
                                      "--load", a.load])
                if rc != 0 or not lines:
                    raise RuntimeError(f"{m} failed rc={rc}: {err[-3000:]}")
                runs[m].append(json.loads(lines[-1]))
        result = {"runs": runs, "summary": {}, "load": a.load,
                  "policy": os.environ.get("ADAPTALLOC_MODEL", "default")}
        if len(modes) == 1:
            for b in batches:
                v = [r["batches"][str(b)] for r in runs[modes[0]]]
                print(f"{modes[0]} batch {b}: ms {[round(x['ms'], 3) for x in v]} peak reserved MiB "
                      f"{[x['peak_reserved'] >> 20 for x in v]} peak in use MiB "
                      f"{[x['peak_in_use'] >> 20 for x in v]}")
            batches = []
        print(f"{'batch':>6} {'ours ms':>20} {'default ms':>20} {'ratio':>8} "
              f"{'peak res ours MiB':>18} {'default MiB':>12} {'ratio':>6}")
        for b in batches:
            k = str(b)
            o = [r["batches"][k]["ms"] for r in runs["ours"]]
            d = [r["batches"][k]["ms"] for r in runs["default"]]
            ro = [r["batches"][k]["peak_reserved"] for r in runs["ours"]]
            rd = [r["batches"][k]["peak_reserved"] for r in runs["default"]]
            lat_ratio = statistics.median(o) / statistics.median(d)
            mem_ratio = statistics.median(ro) / statistics.median(rd)
            result["summary"][k] = {"ours_ms": o, "default_ms": d, "lat_ratio": lat_ratio,
                                    "peak_res_ours": ro, "peak_res_default": rd,
                                    "mem_ratio": mem_ratio,
                                    "peak_in_use_ours": [r["batches"][k]["peak_in_use"] for r in runs["ours"]],
                                    "peak_in_use_default": [r["batches"][k]["peak_in_use"] for r in runs["default"]]}
            co = statistics.median(r["batches"][k]["cpu_issue_ms"] for r in runs["ours"])
            cd = statistics.median(r["batches"][k]["cpu_issue_ms"] for r in runs["default"])
            result["summary"][k]["cpu_issue_ms_ours"] = co
            result["summary"][k]["cpu_issue_ms_default"] = cd
            print(f"{b:>6} {statistics.median(o):8.3f} [{min(o):.3f},{max(o):.3f}] "
                  f"{statistics.median(d):8.3f} [{min(d):.3f},{max(d):.3f}] {lat_ratio:8.3f} "
                  f"{statistics.median(ro) / 2**20:18.1f} {statistics.median(rd) / 2**20:12.1f} "
                  f"{mem_ratio:6.3f}   cpu issue ms ours {co:.3f} default {cd:.3f}")
    else:
        for m in modes[::-1]:
            rc, lines, err = run(["child-maxbatch", "--mode", m, "--cap-gib", str(a.cap_gib),
                                  "--start", str(a.start), "--step", str(a.step),
                                  "--stop", str(a.stop)])
            oks = [json.loads(l)["ok"] for l in lines if '"ok"' in l]
            best = max(oks) if oks else 0
            result[m] = {"max_batch": best, "rc": rc, "stderr_tail": err[-600:]}
            print(f"{m:>8}: max batch {best} under {a.cap_gib} GiB (rc={rc})", flush=True)
        if "default" in result and "ours" in result and result["default"]["max_batch"]:
            result["ratio"] = result["ours"]["max_batch"] / result["default"]["max_batch"]
            print(f"ratio ours/default = {result['ratio']:.3f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
