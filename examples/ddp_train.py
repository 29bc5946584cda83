#!/usr/bin/env python3
"""A 2-GPU DDP run of a GPT-2-small-sized model with adaptalloc in every rank.

    torchrun --nproc_per_node=2 examples/ddp_train.py --steps 50 > with.log
    torchrun --nproc_per_node=2 examples/ddp_train.py --steps 50 --baseline > without.log
    python3 examples/ddp_train.py --compare with.log without.log

    # two ranks sharing GPU 0 over gloo, a small MLP (tests/gpu/test_ddp_ranks.py)
    torchrun --nproc_per_node=2 examples/ddp_train.py --backend gloo --one-gpu \
        --model mlp --deterministic --steps 10 --json 'out-rank{rank}.json'

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
  both runs, a different stream per rank); --model mlp: a small MLP
  (0.5 M parameters, a few MiB of GPU memory, no transformers) on random
  vectors and targets (MSE);
- polls its own /stats once mid-run (--poll-step) and prints its pool's
  bytes_reserved (the port is the one its server bound:
  adaptalloc.http_port());
- with --json PATH ({rank} -> RANK): writes its own record -- rank,
  local_rank, world_size, allocator, losses, peak reserved bytes, its
  server's port and its /stats fetched from it after the last step.

Rank 0 prints the loss of every step and, at the end, one line
`RESULT {json}` with the losses, so that the runs with and without the
plugin can be compared (--compare, which also prints each rank's peak).
Dropout is off so that the two runs differ only by the allocator (and by
non-deterministic CUDA kernels: expect agreement to a few 1e-3, not bit for
bit; --deterministic sets torch.use_deterministic_algorithms(True) and
CUBLAS_WORKSPACE_CONFIG, after which the runs agree to rounding).

NCCL_NVLS_ENABLE=0 is set before torch.distributed is imported (NVLink
multicast is not available on the lent machines).

Needs torch with CUDA, transformers (--model gpt2), two GPUs (or, with
--backend gloo --one-gpu, two ranks sharing GPU 0); --compare needs only
python3.
"""
import os

os.environ["NCCL_NVLS_ENABLE"] = "0"  # before torch.distributed is imported

import argparse
import json
import sys
import time
import urllib.error
import urllib.request

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=50, help="training steps (50)")
    p.add_argument("--baseline", action="store_true",
                   help="PyTorch's own caching allocator (no adaptalloc)")
    p.add_argument("--model", choices=("gpt2", "mlp"), default="gpt2",
                   help="gpt2: GPT-2 small (124 M parameters); mlp: a 0.5 M-parameter MLP, "
                        "a few MiB of GPU memory (gpt2)")
    p.add_argument("--batch", type=int, default=8,
                   help="sequences (gpt2) or vectors (mlp) per rank per step (8)")
    p.add_argument("--seq", type=int, default=512, help="tokens per sequence, gpt2 (512)")
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
    p.add_argument("--deterministic", action="store_true",
                   help="torch.use_deterministic_algorithms(True), CUBLAS_WORKSPACE_CONFIG "
                        "set when unset")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="each rank writes its record to PATH ({rank} -> RANK; the folder "
                        "must exist)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"),
                   help="compare the RESULT lines of two logs and exit")
    p.add_argument("--tolerance", type=float, default=5e-3,
                   help="--compare: largest relative loss difference accepted (5e-3)")
    args = p.parse_args(argv)
    for name in ("steps", "batch", "seq"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, not {getattr(args, name)}")
    if args.poll_step is not None and args.poll_step < 0:
        p.error(f"--poll-step must be 0 or more, not {args.poll_step}")
    if not 1 <= args.http_base <= 65535:
        p.error(f"--http-base must be a port (1..65535), not {args.http_base}")
    if args.tolerance < 0:
        p.error(f"--tolerance must be 0 or more, not {args.tolerance}")
    if args.json is not None:
        folder = os.path.dirname(os.path.abspath(args.json))
        if not os.path.isdir(folder):
            p.error(f"--json {args.json}: the folder {folder} does not exist")
    if args.compare and args.json:
        p.error("--json writes a training run's records; it does not go with --compare")
    return args


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


def loss_difference(la, lb):
    """(largest relative difference |a-b|/|b|, its step) of two loss lists of
    the same length."""
    worst, at = 0.0, 0
    for i, (x, y) in enumerate(zip(la, lb)):
        d = abs(x - y) / max(abs(y), 1e-12)
        if d > worst:
            worst, at = d, i
    return worst, at


def _mib(b):
    return "n/a" if b is None else f"{b / 2**20:.1f} MiB"


def compare(a_path, b_path, tol):
    a, b = read_result(a_path), read_result(b_path)
    la, lb = a["losses"], b["losses"]
    for path, r in ((a_path, a), (b_path, b)):
        peaks = r.get("peak_reserved_bytes") or []
        print(f"{path}: allocator {r['allocator']}, final loss {r['losses'][-1]:.6f}, "
              "peak reserved " + (", ".join(f"rank {i} {_mib(x)}" for i, x in enumerate(peaks))
                                   or "not recorded"))
    if len(la) != len(lb):
        print(f"different step counts: {len(la)} vs {len(lb)}")
        return 1
    worst, at = loss_difference(la, lb)
    print(f"largest relative difference {worst:.2e} at step {at} "
          f"(tolerance {tol:.1e})")
    ok = worst <= tol
    print("SAME LOSS" if ok else "LOSSES DIFFER")
    return 0 if ok else 1


# --------------------------------------------------------------- /stats

def fetch_stats(port):
    """GET /stats of the server on 127.0.0.1:port: (the answer, None) or
    (None, error text)."""
    url = f"http://127.0.0.1:{port}/stats"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read().decode()), None
    except (urllib.error.URLError, OSError, ValueError) as e:
        return None, f"{url}: {e}"


def pool_of(body, device):
    """The pool device<N> of a /stats answer, or None."""
    for pool in body.get("pools", []):
        if pool.get("name") == f"device{device}":
            return pool
    return None


# --------------------------------------------------------------- training

def build_model(args, torch):
    """(model on the CPU, a function step -> (inputs, targets) on the CPU,
    a function (model, inputs, targets) -> loss)."""
    gen = torch.Generator(device="cpu")
    gen.manual_seed(args.seed + 1000003 * int(os.environ.get("RANK", "0")))
    if args.model == "mlp":
        # 0.5 M parameters: with AdamW's two states and the gradients about
        # 8 MiB, activations a few KiB per vector
        model = torch.nn.Sequential(
            torch.nn.Linear(256, 1024), torch.nn.ReLU(),
            torch.nn.Linear(1024, 256), torch.nn.ReLU(),
            torch.nn.Linear(256, 10))

        # targets from a fixed linear teacher (the same on every rank), so
        # that the loss falls: random targets leave nothing to learn
        teacher = torch.randn(256, 10, generator=torch.Generator().manual_seed(args.seed))
        teacher /= 16.0  # targets of about unit variance

        def batch(step):
            x = torch.randn(args.batch, 256, generator=gen)
            return x, x @ teacher

        def loss_of(m, x, y):  # MSE: no kernel of it is non-deterministic
            return torch.nn.functional.mse_loss(m(x), y)
        return model, batch, loss_of

    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_positions=max(1024, args.seq), n_embd=768, n_layer=12,
                     n_head=12, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)

    def batch(step):
        x = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=gen)
        return x, x

    def loss_of(m, x, y):
        return m(input_ids=x, labels=y).loss
    return model, batch, loss_of


def main(argv):
    args = parse_args(argv)
    if args.compare:
        return compare(args.compare[0], args.compare[1], args.tolerance)

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    http = os.environ.get("ADAPTALLOC_HTTP") or f"127.0.0.1:{args.http_base}+rank"
    db = os.environ.get("ADAPTALLOC_DB") or "./adaptalloc-rank{rank}.db"
    if args.deterministic:  # before cuBLAS starts
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

    import torch

    if args.deterministic:
        # warn_only: an op without a deterministic kernel warns, not raises
        torch.use_deterministic_algorithms(True, warn_only=True)
    aa = None
    if not args.baseline:
        # Before any CUDA allocation of this process (set_device included).
        import adaptalloc as aa
        import adaptalloc.torch as aat

        mode = aat.install(http=http, db=db, model=os.environ.get("ADAPTALLOC_MODEL") or
                           f"{args.model}-ddp", native=not args.pluggable)
        allocator = "adaptalloc-" + mode
    else:
        allocator = "pytorch"

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

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
    model, batch, loss_of = build_model(args, torch)
    model = DDP(model.to(device), device_ids=[gpu])
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    poll_step = args.poll_step if args.poll_step is not None else args.steps // 2
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    nparams = sum(p.numel() for p in model.parameters())
    if rank == 0:
        shape = f"{args.batch}x{args.seq}" if args.model == "gpt2" else f"{args.batch}x256"
        print(f"world {world}, backend {args.backend}, allocator {allocator}, {args.model} "
              f"{nparams / 1e6:.2f} M parameters, batch {shape} per rank, {args.dtype}",
              flush=True)

    def my_port():  # the port this rank's server bound (0: off or not started)
        return aa.http_port() if aa is not None else 0

    losses = []
    t0 = time.time()
    for step in range(args.steps):
        x, y = batch(step)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with amp:
            loss = loss_of(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss = loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG if args.backend == "nccl"
                        else dist.ReduceOp.SUM)
        if args.backend == "gloo":  # gloo has no AVG
            loss /= world
        losses.append(float(loss))
        if rank == 0:
            print(f"step {step:4d}  loss {losses[-1]:.6f}", flush=True)
        if step == poll_step:
            if args.baseline:
                print(f"rank {rank}: baseline run, no adaptalloc server to poll",
                      flush=True)
            else:
                port = my_port()
                body, err = fetch_stats(port) if port else (None, "the server is off")
                pool = pool_of(body, torch.cuda.current_device()) if body else None
                if pool is None:
                    print(f"rank {rank}: /stats did not answer with pool device"
                          f"{torch.cuda.current_device()}: {err or 'not in the answer'}",
                          flush=True)
                else:
                    reserved = pool["bytes_reserved"]
                    print(f"rank {rank}: /stats on port {port}: pool "
                          f"device{torch.cuda.current_device()} bytes_reserved "
                          f"{reserved} ({reserved / 2**30:.2f} GiB), run_id "
                          f"{body.get('run_id')}", flush=True)
    torch.cuda.synchronize()
    wall = time.time() - t0
    stats, stats_error, port = None, None, my_port()
    if aa is not None:
        stats, stats_error = fetch_stats(port) if port else (None, "the server is off")
    if args.baseline or not args.pluggable:
        # PyTorch's, or the native allocator's through the same call
        peak = torch.cuda.max_memory_reserved(device)
    else:  # the fallback's own figure (torch.cuda's are not kept by it)
        pool = pool_of(aa.stats(), torch.cuda.current_device())
        peak = pool["peak_bytes_reserved"] if pool else None
    peaks = [None] * world
    dist.all_gather_object(peaks, peak)
    if args.json:
        record = {"rank": rank, "local_rank": local_rank, "world_size": world,
                  "allocator": allocator, "model": args.model, "backend": args.backend,
                  "device": torch.cuda.current_device(), "steps": args.steps,
                  "seed": args.seed, "losses": losses, "peak_reserved_bytes": peak,
                  "http_port": port, "run_id": aa.run_id() if aa is not None else None,
                  "stats": stats, "stats_error": stats_error}
        with open(args.json.replace("{rank}", str(rank)), "w", encoding="utf-8") as f:
            json.dump(record, f)
    if rank == 0:
        print("RESULT " + json.dumps({
            "allocator": allocator, "model": args.model, "world": world,
            "steps": args.steps, "batch": args.batch, "seq": args.seq,
            "dtype": args.dtype, "seed": args.seed, "wall_s": round(wall, 3),
            "peak_reserved_bytes": peaks, "losses": losses}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
