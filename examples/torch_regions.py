#!/usr/bin/env python3
"""Per-kind regions: a small decoder generating text with a KV cache, its
attention's Q/K/V projections, its scores (and softmax) and its KV cache each
in a region of their own, as the seed's AttentionMemoryManager has a pool per
kind of tensor.

    python examples/torch_regions.py                   # needs a GPU and the package
    python examples/torch_regions.py --no-regions      # the same run, one pool

Each region is a pool with its own policy section (pools.regions.<name>),
stats (adaptalloc.region_stats(), /stats, /metrics label region) and limit.
The example gives the KV cache a limit and the scores an exact class table,
then prints what each region holds. bench/gpu/bench_regions.py measures the
same decoder with and without regions against PyTorch's allocator.
"""
import argparse
import contextlib
import math
import time

import torch

import adaptalloc
import adaptalloc.torch as at


class TinyDecoder(torch.nn.Module):
    """A decoder-only transformer (pre-norm, multi-head attention, GELU MLP)
    whose generate() keeps a KV cache that grows by one token per step, the
    way Hugging Face's DynamicCache does (torch.cat per layer and step).

    regions: None (every tensor from the device pool) or a dict with the
    keys "qkv", "scores" and "kv_cache" mapping to context managers
    (adaptalloc.torch.region objects): the Q/K/V projections, the attention
    scores and softmax, and the cache's tensors are made inside them."""

    def __init__(self, vocab=32000, d=1024, heads=16, layers=8, mlp=2816):
        super().__init__()
        self.d, self.heads, self.hd = d, heads, d // heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.norm1 = torch.nn.ModuleList(torch.nn.LayerNorm(d) for _ in range(layers))
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(d, 3 * d, bias=False)
                                       for _ in range(layers))
        self.proj = torch.nn.ModuleList(torch.nn.Linear(d, d, bias=False) for _ in range(layers))
        self.norm2 = torch.nn.ModuleList(torch.nn.LayerNorm(d) for _ in range(layers))
        self.up = torch.nn.ModuleList(torch.nn.Linear(d, mlp, bias=False) for _ in range(layers))
        self.down = torch.nn.ModuleList(torch.nn.Linear(mlp, d, bias=False)
                                        for _ in range(layers))
        self.out = torch.nn.Linear(d, vocab, bias=False)
        none = contextlib.nullcontext()
        self.regions = {"qkv": none, "scores": none, "kv_cache": none}

    def _attend(self, i, x, cache):
        b, n, _ = x.shape
        R = self.regions
        with R["qkv"]:
            q, k, v = self.qkv[i](self.norm1[i](x)).split(self.d, dim=-1)
            q = q.view(b, n, self.heads, self.hd).transpose(1, 2)
            k = k.view(b, n, self.heads, self.hd).transpose(1, 2)
            v = v.view(b, n, self.heads, self.hd).transpose(1, 2)
        with R["kv_cache"]:
            if cache[i] is None:
                cache[i] = (k.contiguous(), v.contiguous())
            else:
                cache[i] = (torch.cat([cache[i][0], k], dim=2),
                            torch.cat([cache[i][1], v], dim=2))
        kk, vv = cache[i]
        with R["scores"]:
            s = (q @ kk.transpose(-1, -2)) * (1.0 / math.sqrt(self.hd))
            if n > 1:  # the prompt: causal
                s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device)
                                  .triu(1), float("-inf"))
            p = torch.softmax(s.float(), dim=-1).to(x.dtype)
            del s
        o = (p @ vv).transpose(1, 2).reshape(b, n, self.d)
        del p
        return self.proj[i](o)

    def forward(self, ids, cache):
        x = self.emb(ids)
        for i in range(len(self.qkv)):
            x = x + self._attend(i, x, cache)
            x = x + self.down[i](torch.nn.functional.gelu(self.up[i](self.norm2[i](x))))
        return self.out(x[:, -1])

    @torch.inference_mode()
    def generate(self, ids, new_tokens):
        cache = [None] * len(self.qkv)
        logits = self(ids, cache)
        out = [ids]
        for _ in range(new_tokens):
            nxt = logits.argmax(-1, keepdim=True)
            out.append(nxt)
            logits = self(nxt, cache)
        del cache
        return torch.cat(out, dim=1)


def use_regions(model):
    """Puts the model's Q/K/V, scores and KV cache each in its region."""
    model.regions = {name: at.region(name) for name in ("qkv", "scores", "kv_cache")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-regions", action="store_true", help="every tensor in the device pool")
    ap.add_argument("--kv-limit-mib", type=int, default=4096,
                    help="the KV cache region's limit (pools.regions.kv_cache.limit_bytes)")
    ap.add_argument("--http", default="127.0.0.1:0", help="ADAPTALLOC_HTTP ('off': none)")
    args = ap.parse_args()

    at.install(http=args.http, db=False)
    # The regions' policy sections, before their first allocation (a policy
    # file per model can say the same: docs/policy.md, pools.regions).
    adaptalloc.patch_policy({"pools": {"regions": {
        "kv_cache": {"limit_bytes": args.kv_limit_mib << 20},
        "scores": {"large": {"mode": "expandable"}},
        "qkv": {},
    }}})
    torch.manual_seed(0)
    model = TinyDecoder().half().cuda().eval()
    if not args.no_regions:
        use_regions(model)

    t0 = time.perf_counter()
    tokens = 0
    for b, n in [(1, 32), (8, 128), (4, 512), (16, 64), (2, 1024), (8, 256)]:
        ids = torch.randint(3, 32000, (b, n), device="cuda")
        model.generate(ids, 64)
        tokens += b * 64
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"{tokens} tokens in {dt:.2f} s ({tokens / dt:.0f} tokens/s); "
          f"peak allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB, "
          f"reserved {torch.cuda.max_memory_reserved() / 2**20:.0f} MiB")
    for name, r in sorted(adaptalloc.region_stats().items()):
        print(f"  region {name:9s} peak in use {r['peak_bytes_in_use'] / 2**20:8.1f} MiB, "
              f"reserved now {r['bytes_reserved'] / 2**20:8.1f} MiB, allocations {r['allocs']}, "
              f"limit {r['limit_bytes'] / 2**20:.0f} MiB")
    if adaptalloc.url():
        print(f"dashboard: {adaptalloc.url()}  (per-region rows; /metrics has a region label)")


if __name__ == "__main__":
    main()
