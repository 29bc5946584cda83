#!/usr/bin/env python3
"""The GPU workload zoo: six training and inference shapes nobody tuned a
policy for, each under adaptalloc (default policy, runtime on) and PyTorch's
three allocator settings, each (workload, allocator) in a fresh process.

    python3 bench/gpu/bench_zoo.py [--reps 1] [--workloads a,b] [--modes m,n]
                                   [--out zoo.json] [--capture DIR]

Allocators (--modes):
  ours        adaptalloc through the CUDAPluggableAllocator plugin
              (examples/torch_pluggable.py), the default policy
              (ADAPTALLOC_MODEL unset, no policy file), the runtime and its
              policy loop on
  default     PyTorch's caching allocator as shipped
  expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  async       PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync

Workloads (random weights, fixed seeds, the same shapes for every allocator):
  kvgen    generation with a growing KV cache: a small Llama-style model
           (transformers LlamaConfig: 8 layers, hidden 1024, fp16) under HF
           generate, 64 new tokens, over mixed (batch, prompt length) pairs
  cnn      CNN training (a ResNet-style conv net, fp32, SGD) with a batch
           size cycling 32, 64, 128, 96, 48 (128x128 images)
  encoder  variable-length encoder fine-tuning: BERT-base classification,
           AdamW, bf16 autocast, batch 16, each batch padded to a random
           length in 32..512
  gpt2     GPT-2-small language-model training, AdamW, bf16 autocast, batch 8,
           a random sequence length in 64..512 per step
  moe      a mixture-of-experts stack (8 experts, top-1 routing, bf16
           autocast) trained on batches of a random token count: every
           expert's batch has a data-dependent size
  serve    BERT-base inference (fp16, no grad) on requests of a random batch
           (1..64) and length (16..512): a server's mix

Figures per run: peak device memory = the most of (total - free) from
torch.cuda.mem_get_info, polled every 2 ms by a thread and after every step,
minus the same figure taken after CUDA initialisation and before the first
allocation (the CUDA context), so every allocator is measured the same way
and what the driver sees is what counts; step time = wall time of each step
between torch.cuda.synchronize() calls, the first two steps excluded; the
median and range over the steps. With --reps > 1: medians and ranges over
the repetitions of each run's figures.

--capture DIR: instead of the zoo, runs each workload once under `default`
and `expandable` with torch.cuda.memory._record_memory_history and writes
DIR/<workload>-<mode>.pickle and DIR/<workload>-<mode>.json (the
allocator's own max_memory_reserved / max_memory_allocated): the trace and
the figures the replay's PyTorch model is checked against
(`adaptalloc-replay compare --policy torch:default ...`).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples"))

WORKLOADS = ["kvgen", "cnn", "encoder", "gpt2", "moe", "serve"]
MODES = ["ours", "default", "expandable", "async"]
CONF = {"expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}
MIB = 1 << 20


# ---------------------------------------------------------------- workloads

def wl_kvgen(torch, dev):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816,
                      num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4,
                      max_position_embeddings=2048)
    model = LlamaForCausalLM(cfg).half().to(dev).eval()
    pairs = [(1, 32), (8, 128), (4, 512), (16, 64), (2, 1024), (8, 256), (32, 32), (4, 768)]
    rnd = random.Random(1)

    def step(i):
        b, n = pairs[i % len(pairs)]
        ids = torch.randint(3, cfg.vocab_size, (b, n), generator=None, device=dev)
        # left padding of a random part of each row, as a batch of prompts
        mask = torch.ones(b, n, dtype=torch.long, device=dev)
        for r in range(b):
            pad = rnd.randrange(0, max(1, n // 4))
            if pad:
                mask[r, :pad] = 0
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=64,
                                 min_new_tokens=64, do_sample=False, pad_token_id=0)
        return int(out.shape[1])

    return step, 2 * len(pairs)


def wl_cnn(torch, dev):
    import torch.nn as nn

    torch.manual_seed(0)

    def block(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, 1, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    model = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                          block(64, 64, 1), block(64, 128, 2), block(128, 256, 2),
                          block(256, 512, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(512, 1000)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = [32, 64, 128, 96, 48]
    lossf = nn.CrossEntropyLoss()

    def step(i):
        b = batches[i % len(batches)]
        x = torch.randn(b, 3, 128, 128, device=dev)
        y = torch.randint(0, 1000, (b,), device=dev)
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        return b

    return step, 4 * len(batches)


def _bert(torch, dev, classify):
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    torch.manual_seed(0)
    cfg = BertConfig()
    return (BertForSequenceClassification(cfg) if classify else BertModel(cfg)).to(dev), cfg


def wl_encoder(torch, dev):
    model, cfg = _bert(torch, dev, True)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    rnd = random.Random(2)
    lens = [rnd.randrange(32, 513) for _ in range(24)]

    def step(i):
        n = lens[i % len(lens)]
        ids = torch.randint(0, cfg.vocab_size, (16, n), device=dev)
        labels = torch.randint(0, 2, (16,), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        return n

    return step, len(lens)


def wl_gpt2(torch, dev):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config()
    model = GPT2LMHeadModel(cfg).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    rnd = random.Random(3)
    lens = [rnd.choice([64, 128, 192, 256, 320, 384, 448, 512]) for _ in range(24)]

    def step(i):
        n = lens[i % len(lens)]
        ids = torch.randint(0, cfg.vocab_size, (8, n), device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return n

    return step, len(lens)


def wl_moe(torch, dev):
    import torch.nn as nn

    torch.manual_seed(0)
    d, experts, layers = 1024, 8, 4

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(d, experts)
            self.w1 = nn.ModuleList(nn.Linear(d, 4 * d) for _ in range(experts))
            self.w2 = nn.ModuleList(nn.Linear(4 * d, d) for _ in range(experts))

        def forward(self, x):
            e = self.router(x).argmax(-1)
            out = torch.zeros_like(x)
            for k in range(experts):
                idx = (e == k).nonzero(as_tuple=True)[0]
                if idx.numel() == 0:
                    continue
                h = self.w2[k](torch.relu(self.w1[k](x.index_select(0, idx))))
                out = out.index_add(0, idx, h)
            return x + out

    model = nn.Sequential(*[MoE() for _ in range(layers)]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    rnd = random.Random(4)
    counts = [rnd.randrange(1024, 16385) for _ in range(24)]

    def step(i):
        n = counts[i % len(counts)]
        x = torch.randn(n, d, device=dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        return n

    return step, len(counts)


def wl_serve(torch, dev):
    model, cfg = _bert(torch, dev, False)
    model = model.half().eval()
    rnd = random.Random(5)
    reqs = [(rnd.randrange(1, 65), rnd.randrange(16, 513)) for _ in range(60)]

    def step(i):
        b, n = reqs[i % len(reqs)]
        ids = torch.randint(0, cfg.vocab_size, (b, n), device=dev)
        with torch.inference_mode():
            h = model(input_ids=ids).last_hidden_state
        return int(h.shape[0])

    return step, len(reqs)


BUILD = {"kvgen": wl_kvgen, "cnn": wl_cnn, "encoder": wl_encoder, "gpt2": wl_gpt2,
         "moe": wl_moe, "serve": wl_serve}


# ---------------------------------------------------------------- child

def child(workload, mode, capture):
    import torch

    if mode == "ours":
        import torch_pluggable as tp

        tp.install()
    torch.cuda.init()
    dev = torch.device("cuda")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    base = total - free
    peak = [base]
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            f, t = torch.cuda.mem_get_info()
            if t - f > peak[0]:
                peak[0] = t - f
            time.sleep(0.002)

    if capture:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=1 << 24)
    th = threading.Thread(target=poll, daemon=True)
    th.start()
    step, n = BUILD[workload](torch, dev)
    times = []
    for i in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step(i)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
        f, t = torch.cuda.mem_get_info()
        peak[0] = max(peak[0], t - f)
    stop.set()
    th.join()
    res = {"workload": workload, "mode": mode, "steps": n,
           "peak_mib": (peak[0] - base) / MIB, "context_mib": base / MIB,
           "step_ms": times[2:] if len(times) > 2 else times}
    if mode == "ours":
        import torch_pluggable as tp

        res["pool"] = {k: tp.stat(k) for k in ("peak_reserved", "reserved", "in_use")}
    else:
        res["torch"] = {"max_reserved": torch.cuda.max_memory_reserved(),
                        "max_allocated": torch.cuda.max_memory_allocated()}
    if capture:
        import pickle

        snap = torch.cuda.memory._snapshot()
        entries = snap["device_traces"][torch.cuda.current_device()]
        with open(os.path.join(capture, f"{workload}-{mode}.pickle"), "wb") as f:
            pickle.dump({"device_traces": [entries], "segments": []}, f, protocol=4)
        torch.cuda.memory._record_memory_history(enabled=None)
        with open(os.path.join(capture, f"{workload}-{mode}.json"), "w") as f:
            json.dump({k: res[k] for k in ("workload", "mode", "steps", "peak_mib", "torch")}, f)
    print(json.dumps(res))


def run_child(workload, mode, capture=None, timeout=240):
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if mode in CONF:
        env["PYTORCH_CUDA_ALLOC_CONF"] = CONF[mode]
    env.setdefault("ADAPTALLOC_HTTP", "off")
    env.setdefault("ADAPTALLOC_DB", "off")
    env.pop("ADAPTALLOC_MODEL", None)
    env.pop("ADAPTALLOC_POLICY", None)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", workload, mode]
    if capture:
        cmd += ["--capture", capture]
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        print(f"  {workload}/{mode}: FAILED rc={r.returncode}: {r.stderr[-1500:]}", flush=True)
        return None
    res = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    res["process_s"] = time.time() - t0
    print("RESULT " + json.dumps(res), flush=True)
    print(f"  {workload:8s} {mode:10s} peak {res['peak_mib']:9.1f} MiB  step "
          f"{statistics.median(res['step_ms']):8.2f} ms  ({res['process_s']:.1f} s)", flush=True)
    return res


def fmt_range(v, nd=0):
    if not v:
        return "-"
    m = statistics.median(v)
    if len(v) == 1:
        return f"{m:.{nd}f}"
    return f"{m:.{nd}f} [{min(v):.{nd}f}, {max(v):.{nd}f}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", default=None)
    ap.add_argument("--capture", default=None)
    ap.add_argument("--child", nargs=2, default=None)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.capture)
        return
    wls = [w for w in args.workloads.split(",") if w]
    modes = [m for m in args.modes.split(",") if m]
    for w in wls:
        if w not in BUILD:
            sys.exit(f"bench_zoo: unknown workload {w!r} (one of {', '.join(WORKLOADS)})")
    for m in modes:
        if m not in MODES:
            sys.exit(f"bench_zoo: unknown mode {m!r} (one of {', '.join(MODES)})")
    if args.capture:
        os.makedirs(args.capture, exist_ok=True)
        for w in wls:
            for m in ("default", "expandable"):
                run_child(w, m, capture=args.capture)
        return
    runs = {w: {m: [] for m in modes} for w in wls}
    for rep in range(args.reps):
        for wi, w in enumerate(wls):
            k = (rep + wi) % len(modes)  # rotate the order between workloads and reps
            for m in modes[k:] + modes[:k]:
                r = run_child(w, m)
                if r is not None:
                    runs[w][m].append(r)
    out = {"reps": args.reps, "modes": modes, "workloads": {}}
    print()
    print("| workload | " + " | ".join(f"{m} peak MiB" for m in modes) +
          " | ours / best torch | " + " | ".join(f"{m} step ms" for m in modes) +
          " | ours speed vs default |")
    print("|---" * (2 * len(modes) + 3) + "|")
    for w in wls:
        peaks = {m: [r["peak_mib"] for r in runs[w][m]] for m in modes}
        steps = {m: [statistics.median(r["step_ms"]) for r in runs[w][m]] for m in modes}
        ranges = {m: [x for r in runs[w][m] for x in r["step_ms"]] for m in modes}
        torch_best = min((statistics.median(peaks[m]) for m in modes
                          if m != "ours" and peaks[m]), default=None)
        ours_peak = statistics.median(peaks["ours"]) if peaks.get("ours") else None
        ratio = ours_peak / torch_best if ours_peak and torch_best else None
        speed = (statistics.median(steps["default"]) / statistics.median(steps["ours"])
                 if steps.get("ours") and steps.get("default") else None)
        out["workloads"][w] = {"peak_mib": peaks, "step_ms_median": steps,
                               "step_ms_all": ranges, "ours_over_best_torch": ratio,
                               "ours_speed_vs_default": speed,
                               "extra": {m: [{k: r.get(k) for k in ("pool", "torch")}
                                             for r in runs[w][m]] for m in modes}}
        cells = [fmt_range(peaks[m]) for m in modes]
        tcells = []
        for m in modes:
            v = ranges[m]
            tcells.append(f"{statistics.median(v):.2f} [{min(v):.2f}, {max(v):.2f}]" if v else "-")
        rcell = f"{ratio:.3f}" if ratio else "-"
        scell = f"{speed:.3f}x" if speed else "-"
        print(f"| {w} | " + " | ".join(cells) + f" | {rcell} | " + " | ".join(tcells) +
              f" | {scell} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
