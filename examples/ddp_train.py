#!/usr/bin/env python3
"""A 2-GPU DDP run of a GPT-2-small-sized model with adaptalloc in every rank.

    torchrun --nproc_per_node=2 examples/ddp_train.py --steps 50 > with.log
    torchrun --nproc_per_node=2 examples/ddp_train.py --steps 50 --baseline > without.log
    python3 examples/ddp_train.py --compare with.log without.log

Each rank (one process per GPU, as torchrun starts them):

- makes adaptalloc PyTorch's CUDA allocator with
  `adaptalloc.torch.install()` (the native allocator of `pip install .`;
  --pluggable: the CUDAPluggableAllocator fallback of
  examples/torch_pluggable.py) before any CUDA allocation, unless --baseline;
- serves its own /stats on 127.0.0.1:9100+LOCAL_RANK and writes
  ./adaptalloc-rank{rank}.db, through install()'s keywords unless
  ADAPTALLOC_HTTP / ADAPTALLOC_DB are set: see docs/multi-gpu.md;
- trains GPT2LMHeadModel(GPT2Config()) -- 124 M parameters, random weights,
  nothing downloaded -- with AdamW under DistributedDataParallel over NCCL,
  on random token batches drawn from a seeded generator (the same batches in
  both runs, a different stream per rank);
- polls its own /stats once mid-run (--poll-step) and prints its pool's
  bytes_reserved.

Rank 0 prints the loss of every step and, at the end, one line
`RESULT {json}` with the losses, so that the runs with and without the
plugin can be compared (--compare). Dropout is off so that the two runs
differ only by the allocator (and by non-deterministic CUDA kernels: expect
agreement to a few 1e-3, not bit for bit).

NCCL_NVLS_ENABLE=0 is set before torch.distributed is imported (NVLink
multicast is not available on the lent machines).

Needs torch with CUDA, transformers, two GPUs (or, with --backend gloo
--one-gpu, two ranks sharing GPU 0); --compare needs only python3.
"""
import os

os.environ["NCCL_NVLS_ENABLE"] = "0"  # before torch.distributed is imported

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

_HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=50, help="training steps (50)")
    p.add_argument("--baseline", action="store_true",
                   help="PyTorch's own caching allocator (no adaptalloc)")
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step (8)")
    p.add_argument("--seq", type=int, default=512, help="tokens per sequence (512)")
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate (3e-4)")
    p.add_argument("--seed", type=int, default=1234, help="weights and data seed (1234)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                   help="fp32, or bf16 autocast (fp32)")
    p.add_argument("--poll-step", type=int, default=None,
                   help="step after which each rank reads its /stats (steps/2)")
    p.add_argument("--http-base", type=int, default=9100,
                   help="base port of the ranks' servers (9100: rank r on 9100+r)")
    p.add_argument("--pluggable", action="store_true",
                   help="the CUDAPluggableAllocator fallback instead of the native allocator")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                   help="torch.distributed backend (nccl)")
    p.add_argument("--one-gpu", action="store_true",
                   help="every rank on GPU 0 (with --backend gloo: two ranks on one GPU)")
    p.add_argument("--lib", default=None,
                   help="path of libadaptalloc_torch.so (default: $AA_TORCH_LIB, "
                        "build/torch/pluggable/ ...)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="compare the RESULT lines of two logs and exit")
    p.add_argument("--tolerance", type=float, default=5e-3,
                   help="--compare: largest relative loss difference accepted (5e-3)")
    return p.parse_args(argv)


# --------------------------------------------------------------- compare

def read_result(path):
    """The last `RESULT {...}` line of a log."""
    res = None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("RESULT "):
                res = json.loads(line[len("RESULT "):])
    if res is None:
        raise SystemExit(f"{path}: no RESULT line (did rank 0 finish?)")
    return res


def compare(a_path, b_path, tol):
    a, b = read_result(a_path), read_result(b_path)
    la, lb = a["losses"], b["losses"]
    if len(la) != len(lb):
        print(f"different step counts: {len(la)} vs {len(lb)}")
        return 1
    worst, at = 0.0, 0
    for i, (x, y) in enumerate(zip(la, lb)):
        d = abs(x - y) / max(abs(y), 1e-12)
        if d > worst:
            worst, at = d, i
    print(f"{a_path}: allocator {a['allocator']}, final loss {la[-1]:.6f}")
    print(f"{b_path}: allocator {b['allocator']}, final loss {lb[-1]:.6f}")
    print(f"largest relative difference {worst:.2e} at step {at} "
          f"(tolerance {tol:.1e})")
    ok = worst <= tol
    print("SAME LOSS" if ok else "LOSSES DIFFER")
    return 0 if ok else 1


# --------------------------------------------------------------- /stats

def poll_stats(port, device):
    """GET /stats of this rank's server; (bytes_reserved of pool device<N>,
    the whole answer) or (None, error text)."""
    url = f"http://127.0.0.1:{port}/stats"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.loads(r.read().decode())
    except (urllib.error.URLError, OSError, ValueError) as e:
        return None, f"{url}: {e}"
    for pool in body.get("pools", []):
        if pool.get("name") == f"device{device}":
            return pool.get("bytes_reserved"), body
    return None, f"{url}: no pool device{device} in the answer"


# --------------------------------------------------------------- training

def main(argv):
    args = parse_args(argv)
    if args.compare:
        return compare(args.compare[0], args.compare[1], args.tolerance)

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    http = os.environ.get("ADAPTALLOC_HTTP") or f"127.0.0.1:{args.http_base}+rank"
    db = os.environ.get("ADAPTALLOC_DB") or "./adaptalloc-rank{rank}.db"
    if args.lib:
        os.environ["AA_TORCH_LIB"] = args.lib

    import torch

    if not args.baseline:
        # Before any CUDA allocation of this process (set_device included).
        import adaptalloc.torch as aat

        mode = aat.install(http=http, db=db, model=os.environ.get("ADAPTALLOC_MODEL") or
                           "gpt2-small-ddp", native=not args.pluggable)
        allocator = "adaptalloc-" + mode
    else:
        allocator = "pytorch"

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from transformers import GPT2Config, GPT2LMHeadModel

    gpu = 0 if args.one_gpu else local_rank
    torch.cuda.set_device(gpu)
    device = torch.device("cuda", gpu)
    if args.backend == "gloo":
        dist.init_process_group("gloo")
    else:
        try:
            dist.init_process_group("nccl", device_id=device)
        except TypeError:  # torch before 2.3 has no device_id
            dist.init_process_group("nccl")

    torch.manual_seed(args.seed)  # the same weights on every rank and run
    cfg = GPT2Config(n_positions=max(1024, args.seq), n_embd=768, n_layer=12,
                     n_head=12, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).to(device)
    model = DDP(model, device_ids=[gpu])
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(args.seed + 1000003 * rank)
    poll_step = args.poll_step if args.poll_step is not None else args.steps // 2
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    nparams = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"world {world}, allocator {allocator}, GPT-2 {nparams / 1e6:.1f} M "
              f"parameters, batch {args.batch}x{args.seq} per rank, {args.dtype}",
              flush=True)

    losses = []
    t0 = time.time()
    for step in range(args.steps):
        x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=gen)
        x = x.to(device, non_blocking=True)
        with amp:
            out = model(input_ids=x, labels=x)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        opt.step()
        loss = out.loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)  # the mean over ranks
        losses.append(float(loss))
        if rank == 0:
            print(f"step {step:4d}  loss {losses[-1]:.6f}", flush=True)
        if step == poll_step:
            if args.baseline:
                print(f"rank {rank}: baseline run, no adaptalloc server to poll",
                      flush=True)
            else:
                port = args.http_base + local_rank
                reserved, body = poll_stats(port, torch.cuda.current_device())
                if reserved is None:
                    print(f"rank {rank}: /stats did not answer: {body}", flush=True)
                else:
                    print(f"rank {rank}: /stats on port {port}: pool "
                          f"device{torch.cuda.current_device()} bytes_reserved "
                          f"{reserved} ({reserved / 2**30:.2f} GiB), run_id "
                          f"{body.get('run_id')}", flush=True)
    torch.cuda.synchronize()
    wall = time.time() - t0
    peak = None
    if not args.baseline and args.pluggable:
        sys.path.insert(0, _HERE)
        import torch_pluggable  # the fallback's own figure

        peak = torch_pluggable.stat("peak_reserved", torch.cuda.current_device())
    else:  # PyTorch's, or the native allocator's through the same call
        peak = torch.cuda.max_memory_reserved(device)
    peaks = [None] * world
    dist.all_gather_object(peaks, peak)
    if rank == 0:
        print("RESULT " + json.dumps({
            "allocator": allocator, "world": world, "steps": args.steps,
            "batch": args.batch, "seq": args.seq, "dtype": args.dtype,
            "seed": args.seed, "wall_s": round(wall, 3),
            "peak_reserved_bytes": peaks, "losses": losses}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
