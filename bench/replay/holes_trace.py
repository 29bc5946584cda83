#!/usr/bin/env python3
"""A synthetic trace with the holes the zoo's MoE run showed (BENCHMARKS.md,
section on stitching): each step, expert activations of a data-dependent size
(about 15.4 MiB) live between small long-lived tensors and are freed before
the combine phase, whose 16 MiB buffers fit none of the holes they leave.

    python3 bench/replay/holes_trace.py [--steps N] [--seed S] > holes.csv
    adaptalloc-replay compare --csv holes.csv --policy base.json --policy stitch.json

Writes an RMM-format CSV (the replay's --csv input) on stdout. The sizes are
drawn from a seeded generator, so a run is the same for everyone.
"""
import argparse
import random
import sys

MiB = 1 << 20


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--experts", type=int, default=34)
    ap.add_argument("--jitter", type=int, default=64,
                    help="activation sizes vary by up to this many 4 KiB pages a step")
    ap.add_argument("--keep-jitter", type=int, default=64,
                    help="the small long-lived tensors vary over this many 4 KiB pages "
                         "(0 with --jitter 0: every step the same, the learned plan's case)")
    ap.add_argument("--keep-kib", type=int, default=600,
                    help="the small long-lived tensors' size in KiB (600: at most 1 MiB, which "
                         "the large path places apart from the activations; above 1 MiB they "
                         "share the activations' region: up to a sixth of an activation they "
                         "lie together in rooms, larger ones leave the holes between them)")
    ap.add_argument("--event-us", type=float, default=1.0,
                    help="microseconds between two events (1: the trace's clock as before; "
                         "40: about 6 ms a step, a side-stream pipeline's, for stitching's "
                         "time budget)")
    a = ap.parse_args()
    if a.event_us <= 0:
        sys.exit("holes_trace: --event-us must be above 0")
    if a.steps < 1 or a.experts < 1 or a.jitter < 0 or a.keep_jitter < 0 or a.keep_kib < 1:
        sys.exit("holes_trace: --steps and --experts must be at least 1, --jitter and "
                 "--keep-jitter at least 0, --keep-kib at least 1")
    rng = random.Random(a.seed)
    t = 0
    nxt = [0x7f0000000000]
    live = {}
    out = sys.stdout
    out.write("Thread,Time,Action,Pointer,Size,Stream\n")

    def ev(action, p, size):
        nonlocal t
        t += int(a.event_us * 1000)
        out.write("1,%d.%09d,%s,0x%x,%d,0x0\n" % (t // 10**9, t % 10**9, action, p, size))

    def alloc(size):
        p = nxt[0]
        nxt[0] += (size + 0xFFFFF) & ~0xFFFFF
        live[p] = size
        ev("allocate", p, size)
        return p

    def free(p):
        ev("deallocate", p, live.pop(p))

    weights = [alloc(64 * MiB) for _ in range(4)]
    for _ in range(a.steps):
        acts, keep = [], []
        for _ in range(a.experts):
            acts.append(alloc(int(15.4 * MiB) + rng.randint(-a.jitter, a.jitter) * 4096))
            keep.append(alloc(a.keep_kib * 1024 + (rng.randrange(0, a.keep_jitter) if a.keep_jitter else 0) * 4096))
        for p in acts:
            free(p)
        comb = [alloc(16 * MiB) for _ in range(a.experts // 4)]
        for p in comb:
            free(p)
        for p in keep:
            free(p)
    for p in weights:
        free(p)


if __name__ == "__main__":
    main()
