#!/usr/bin/env python3
"""A synthetic trace of a transformer's training loop, shaped as PyTorch
allocates for it (fp32, AdamW, gradients set to None each step): weights and
optimizer state that live for the run, per layer the activations autograd
saves, transient buffers (attention scores before softmax, the logits'
gradient), parameter gradients made in the backward pass and freed at the
next step's zero_grad, and the optimizer's temporaries.

    python3 bench/replay/train_trace.py [--steps N] [--layers L] [--eval-every K]
                                        [--vary-seq] [--seed S] > train.csv
    adaptalloc-replay compare --csv train.csv --policy default --policy plan.json

--eval-every K: every Kth step is followed by an evaluation pass at twice
the batch (no saved activations): phases that alternate. --vary-seq: each
step's sequence length is drawn from a seeded set (shapes that change every
step). Writes an RMM-format CSV (the replay's --csv input) on stdout; the
same arguments give the same trace.
"""
import argparse
import random
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=16000)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--vary-seq", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if min(a.steps, a.layers, a.batch, a.seq, a.hidden, a.heads, a.vocab) < 1 or a.eval_every < 0:
        sys.exit("train_trace: sizes and counts must be at least 1, --eval-every at least 0")
    rng = random.Random(a.seed)
    out = sys.stdout
    out.write("Thread,Time,Action,Pointer,Size,Stream\n")
    clock = [0]
    nxt = [0x7f0000000000]
    live = {}

    def ev(action, p, size):
        clock[0] += 1000
        t = clock[0]
        out.write("1,%d.%09d,%s,0x%x,%d,0x0\n" % (t // 10**9, t % 10**9, action, p, size))

    def alloc(nbytes):
        size = (nbytes + 511) // 512 * 512  # PyTorch's rounding
        p = nxt[0]
        nxt[0] += (size + 0xFFFFF) & ~0xFFFFF
        live[p] = size
        ev("allocate", p, size)
        return p

    def free(p):
        ev("deallocate", p, live.pop(p))

    H, V, L = a.hidden, a.vocab, a.layers
    shapes = [("qkv", 3 * H * H), ("o", H * H), ("up", 4 * H * H), ("down", 4 * H * H),
              ("ln1", 2 * H), ("ln2", 2 * H)]
    weights = [alloc(4 * V * H)] + [alloc(4 * n) for _ in range(L) for _, n in shapes]
    params = [4 * V * H] + [4 * n for _ in range(L) for _, n in shapes]
    state = []
    grads = []

    def forward(B, S, train):
        """The forward pass; the saved activations per layer (train), the
        logits."""
        saved = []
        x = alloc(4 * B * S * H)  # the embedding's output
        for _ in range(L):
            keep = []
            ln = alloc(4 * B * S * H)
            qkv = alloc(4 * 3 * B * S * H)
            scores = alloc(4 * B * a.heads * S * S)
            probs = alloc(4 * B * a.heads * S * S)
            free(scores)
            att = alloc(4 * B * S * H)
            o = alloc(4 * B * S * H)
            x2 = alloc(4 * B * S * H)  # the residual
            ln2 = alloc(4 * B * S * H)
            up = alloc(4 * 4 * B * S * H)
            act = alloc(4 * 4 * B * S * H)
            down = alloc(4 * B * S * H)
            x3 = alloc(4 * B * S * H)
            if train:
                keep = [ln, qkv, probs, att, o, ln2, up, act, down, x]
                free(x2)
            else:
                for p in (x, ln, qkv, probs, att, o, x2, ln2, up, act, down):
                    free(p)
            saved.append(keep)
            x = x3
        logits = alloc(4 * B * S * V)
        if not train:
            free(x)
        return saved, x, logits

    for step in range(a.steps):
        B = a.batch
        S = rng.choice([128, 256, 384, 512, 768]) if a.vary_seq else a.seq
        for g in grads:  # zero_grad(set_to_none=True)
            free(g)
        grads = []
        saved, x, logits = forward(B, S, True)
        dlogits = alloc(4 * B * S * V)
        free(logits)
        dx = alloc(4 * B * S * H)
        free(dlogits)
        free(x)
        for layer in reversed(saved):  # backward: gradients made, activations freed
            for _, n in shapes:
                grads.append(alloc(4 * n))
            tmp = alloc(4 * 4 * B * S * H)
            dprobs = alloc(4 * B * a.heads * S * S)
            free(dprobs)
            free(tmp)
            for p in layer:
                free(p)
            ndx = alloc(4 * B * S * H)
            free(dx)
            dx = ndx
        grads.append(alloc(4 * V * H))  # the embedding's
        free(dx)
        if not state:  # AdamW's state, made at the first step
            state = [alloc(n) for n in params for _ in range(2)]
        for n in params:  # the optimizer's temporaries
            t = alloc(n)
            free(t)
        if a.eval_every and (step + 1) % a.eval_every == 0:
            _, _, lg = forward(2 * B, S, False)
            free(lg)
    for p in grads + state + weights:
        free(p)


if __name__ == "__main__":
    main()
