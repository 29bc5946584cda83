#!/usr/bin/env python3
"""Record the benchmarks' allocation traces under PyTorch's default allocator.

    python3 bench/gpu/capture_traces.py bert    --load half-cuda --out DIR
    python3 bench/gpu/capture_traces.py bert    --load cuda-half --out DIR
    python3 bench/gpu/capture_traces.py maxbatch --batches 512:1024:32 --out DIR
    python3 bench/gpu/capture_traces.py gpt2    --steps 200 --out DIR

Each workload is the one its benchmark runs (bench_bert.py, bench_gpt2.py),
recorded with torch.cuda.memory._record_memory_history (no stack frames).
Written into DIR: one snapshot pickle per trace (convert each with
tools/torch_snapshot_to_trace.py, then replay it with `adaptalloc-replay`),
and <workload>.json with the default allocator's own figures for the same
run (peak reserved and allocated per phase), which is what a replay of the
trace under one of our policies is compared with.

bert: the model built on the CPU, then moved (`--load half-cuda`: .half()
then .cuda(), as bench_bert.py does; `--load cuda-half`: .cuda() then
.half(), the common idiom, where the fp32 weights pass through the GPU).
Then per batch (1, 32, 128; seq 128): 10 warm-up forwards and 20 more.
One snapshot per batch, cumulative (load + every batch up to this one),
matching bench_bert.py's running peak.
maxbatch: load (half-cuda), then one forward per batch size; one snapshot
per batch size holding the load and that forward only.
gpt2: GPT2LMHeadModel(GPT2Config()), AdamW, bf16 autocast, batch 8,
sequence lengths from bench_gpt2.py's seeded choice, --steps steps.
"""
import argparse
import json
import os
import pickle
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def start_recording(torch):
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                             max_entries=1 << 24)


def traces(torch):
    snap = torch.cuda.memory._snapshot()
    return snap["device_traces"][torch.cuda.current_device()]


def dump(entries, path):
    with open(path, "wb") as f:
        pickle.dump({"device_traces": [entries], "segments": []}, f, protocol=4)


def figures(torch):
    return {"reserved": torch.cuda.memory_reserved(),
            "peak_reserved": torch.cuda.max_memory_reserved(),
            "allocated": torch.cuda.memory_allocated(),
            "peak_allocated": torch.cuda.max_memory_allocated()}


def load_bert(torch, how):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    m = BertModel(BertConfig())
    m = m.half().cuda() if how == "half-cuda" else m.cuda().half()
    return m.eval()


def bert(a, torch):
    start_recording(torch)
    model = load_bert(torch, a.load)
    out = {"load": a.load, "after_load": figures(torch), "batches": {}}
    with torch.inference_mode():
        for b in (1, 32, 128):
            ids = torch.randint(0, 30522, (b, 128), device="cuda")
            for _ in range(30):
                model(input_ids=ids)
            torch.cuda.synchronize()
            del ids
            out["batches"][str(b)] = figures(torch)
            name = f"bert_{a.load}_b{b}.pickle"
            dump(traces(torch), os.path.join(a.out, name))
            out["batches"][str(b)]["snapshot"] = name
    return out


def maxbatch(a, torch):
    lo, hi, step = (int(x) for x in a.batches.split(":"))
    start_recording(torch)
    model = load_bert(torch, "half-cuda")
    load = traces(torch)
    out = {"after_load": figures(torch), "batches": {}}
    with torch.inference_mode():
        for b in range(lo, hi + 1, step):
            n0 = len(traces(torch))
            torch.cuda.reset_peak_memory_stats()
            ids = torch.randint(0, 30522, (b, 128), device="cuda")
            y = model(input_ids=ids).last_hidden_state
            torch.cuda.synchronize()
            del y, ids
            f = figures(torch)
            t = traces(torch)
            name = f"maxbatch_b{b}.pickle"
            dump(load + t[n0:], os.path.join(a.out, name))
            f["snapshot"] = name
            out["batches"][str(b)] = f
    return out


def gpt2(a, torch):
    import random

    from bench_gpt2 import SEQS
    from transformers import GPT2Config, GPT2LMHeadModel

    start_recording(torch)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config()).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    rnd = random.Random(7)
    g = torch.Generator(device="cpu").manual_seed(7)
    reserved, seqs = [], []
    for _ in range(a.steps):
        seq = rnd.choice(SEQS)
        seqs.append(seq)
        ids = torch.randint(0, 50257, (8, seq), generator=g).cuda()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        float(loss.item())
        reserved.append(torch.cuda.memory_reserved())
    name = f"gpt2_{a.steps}.pickle"
    dump(traces(torch), os.path.join(a.out, name))
    out = figures(torch)
    out.update({"steps": a.steps, "seqs": seqs, "reserved_per_step": reserved, "snapshot": name})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["bert", "maxbatch", "gpt2"])
    ap.add_argument("--load", choices=["half-cuda", "cuda-half"], default="half-cuda")
    ap.add_argument("--batches", default="512:1024:32")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch

    os.makedirs(a.out, exist_ok=True)
    res = {"bert": bert, "maxbatch": maxbatch, "gpt2": gpt2}[a.what](a, torch)
    tag = a.what + (f"_{a.load}" if a.what == "bert" else "")
    with open(os.path.join(a.out, tag + ".json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps({k: v for k, v in res.items() if k not in ("reserved_per_step", "seqs")}))


if __name__ == "__main__":
    main()
