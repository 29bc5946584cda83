/*
 * bench_steps.c — `adaptalloc-bench steps`: what the allocator itself costs
 * per training step, on the host backend with the default device policy's
 * shape (classes up to 16 KiB, one per doubling; every larger block on the
 * expandable large path, 2 MiB pages mapped on demand).
 *
 * The step is the GPU zoo's `moe` (bench/gpu/bench_zoo.py) as allocations:
 * a random token count n in 1024..16384, four layers of eight experts with
 * top-1 routing (each expert's batch a random share of n, so nearly every
 * large size is new), the forward's tensors (router logits, index, the
 * expert's input in fp32 and bf16, its weights cast to bf16, hidden and
 * ReLU outputs, the out-of-place index_add result), those autograd keeps
 * held to the backward, the backward's gradients in reverse order, one
 * temporary per weight for the optimiser (weights and AdamW's moments stay
 * allocated throughout), then the gradients freed
 * (zero_grad(set_to_none=True)). Sizes and order follow the PyTorch code;
 * the memory is never touched, so what is timed is the allocator's own
 * work: the calls, the large path's best fit, split and coalesce, and the
 * backend's page maps (here mprotect; on CUDA cuMemCreate + cuMemMap +
 * cuMemSetAccess, timed by bench/gpu/bench_vmm.py).
 *
 * Reported per measured step (the first --warm steps left out), median
 * [min, max] over --reps runs, each in a fresh pool: ns per aa_alloc and
 * per aa_free, calls, the microseconds inside them, pages mapped and
 * unmapped, the time inside backend calls (backend_ns), peak reserved.
 *
 * Entry point: bench_steps_main.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define D 1024 /* model width */
#define EXPERTS 8
#define LAYERS 4
#define MAX_LIVE 8192
#define MAX_REPS 100

typedef struct run {
  aa_pool *pool;
  void *p[MAX_LIVE];
  size_t sz[MAX_LIVE];
  int n;
  uint64_t seed;
  uint64_t t_alloc, t_free, n_alloc, n_free;
  int failed;
} run;

static unsigned rnd(run *r) {
  r->seed = r->seed * 6364136223846793005ull + 1442695040888963407ull;
  return (unsigned)(r->seed >> 33);
}

/* Allocates `size` bytes; returns its slot (-1 once an allocation failed). */
static int A(run *r, size_t size) {
  if (r->failed || r->n == MAX_LIVE) {
    r->failed = 1;
    return -1;
  }
  uint64_t t0 = aa_now_ns();
  void *p = aa_alloc(r->pool, size, NULL);
  r->t_alloc += aa_now_ns() - t0;
  r->n_alloc++;
  if (p == NULL) {
    r->failed = 1;
    return -1;
  }
  r->p[r->n] = p;
  r->sz[r->n] = size;
  return r->n++;
}

static void F(run *r, int i) {
  if (i < 0 || r->p[i] == NULL)
    return;
  uint64_t t0 = aa_now_ns();
  int rc = aa_free(r->pool, r->p[i], r->sz[i], NULL);
  r->t_free += aa_now_ns() - t0;
  r->n_free++;
  if (rc != AA_OK)
    r->failed = 1;
  r->p[i] = NULL;
}

/* One training step; the parameters sit in slots [0, params). */
static void moe_step(run *r, int params) {
  const size_t d = D, w = 4 * D * D;
  int saved[LAYERS][EXPERTS][5];
  size_t nks[LAYERS][EXPERTS];
  r->n = params;
  size_t n = 1024 + rnd(r) % 15361;
  int x = A(r, n * d * 4), cur = x;
  for (int l = 0; l < LAYERS; l++) {
    int logits = A(r, n * EXPERTS * 2), route = A(r, n * 8), out = A(r, n * d * 4);
    unsigned share[EXPERTS], tot = 0;
    for (int k = 0; k < EXPERTS; k++) {
      share[k] = 1 + rnd(r) % 100;
      tot += share[k];
    }
    for (int k = 0; k < EXPERTS; k++) {
      size_t nk = n * share[k] / tot ? n * share[k] / tot : 1;
      int mask = A(r, n), idx = A(r, nk * 8), xs = A(r, nk * d * 4), xb = A(r, nk * d * 2);
      int w1 = A(r, w * 2), h1 = A(r, nk * 4 * d * 2), act = A(r, nk * 4 * d * 2);
      int w2 = A(r, w * 2), h2 = A(r, nk * d * 2), hf = A(r, nk * d * 4);
      int added = A(r, n * d * 4); /* out.index_add(...) is out of place */
      F(r, out);
      out = added;
      F(r, mask), F(r, xs), F(r, h2), F(r, hf), F(r, h1);
      int keep[5] = {idx, xb, w1, act, w2};
      memcpy(saved[l][k], keep, sizeof keep);
      nks[l][k] = nk;
    }
    int next = A(r, n * d * 4); /* x + out */
    F(r, out), F(r, logits), F(r, route);
    if (cur != x)
      F(r, cur);
    cur = next;
  }
  int g = A(r, n * d * 4);
  for (int l = LAYERS - 1; l >= 0; l--) {
    int gx = A(r, n * d * 4);
    for (int k = EXPERTS - 1; k >= 0; k--) {
      int *s = saved[l][k];
      size_t nk = nks[l][k];
      int go = A(r, nk * d * 4), gh2 = A(r, nk * d * 2);
      (void)A(r, w * 4); /* w2's gradient, to the optimiser */
      int gact = A(r, nk * 4 * d * 2);
      F(r, s[4]), F(r, go), F(r, gh2);
      (void)A(r, w * 4); /* w1's gradient */
      int gxb = A(r, nk * d * 2);
      F(r, s[3]), F(r, gact), F(r, s[2]), F(r, s[1]);
      int gxs = A(r, nk * d * 4);
      F(r, gxb);
      int gsum = A(r, n * d * 4);
      F(r, gx), F(r, gxs), F(r, s[0]);
      gx = gsum;
    }
    F(r, g);
    g = gx;
  }
  F(r, g), F(r, cur), F(r, x);
  int end = r->n;
  for (int i = params; i < end; i++) { /* the optimiser: one temporary per gradient */
    if (r->p[i] != NULL && r->sz[i] == w * 4)
      F(r, A(r, w * 4));
  }
  for (int i = params; i < end; i++)
    F(r, i);
}

typedef struct result {
  double alloc_ns, free_ns, calls, us, maps, unmaps, backend_us, peak_mib;
} result;

static int one_run(int steps, int warm, uint64_t seed, result *out) {
  aa_backend *b = NULL;
  run *r = calloc(1, sizeof *r);
  if (r == NULL || aa_backend_host_new(&b) != AA_OK) {
    free(r);
    return AA_ENOMEM;
  }
  aa_pool_config c;
  aa_pool_config_init(&c);
  c.backend = b;
  c.name = "steps";
  c.max_small = 16384; /* the default device policy's shape */
  c.classes_per_doubling = 1;
  c.tcache_bytes = AA_DEFAULT_TCACHE_BYTES;
  c.large_mode = AA_LARGE_EXPANDABLE;
  c.large_map_runs = 1; /* pools.device.large.map_runs */
  int rc = aa_pool_new(&c, &r->pool);
  if (rc != AA_OK) {
    aa_backend_destroy(b);
    free(r);
    return rc;
  }
  r->seed = seed;
  for (int i = 0; i < LAYERS * EXPERTS * 2 * 3; i++) /* fp32 weights, AdamW's two moments */
    (void)A(r, (size_t)4 * D * D * 4);
  int params = r->n;
  aa_pool_stats s0, s1;
  memset(&s0, 0, sizeof s0);
  for (int i = 0; i < steps + warm && !r->failed; i++) {
    if (i == warm) {
      r->t_alloc = r->t_free = r->n_alloc = r->n_free = 0;
      (void)aa_pool_stats_get(r->pool, &s0);
    }
    moe_step(r, params);
  }
  (void)aa_pool_stats_get(r->pool, &s1);
  rc = r->failed ? AA_ENOMEM : AA_OK;
  if (rc == AA_OK) {
    out->alloc_ns = r->n_alloc ? (double)r->t_alloc / (double)r->n_alloc : 0;
    out->free_ns = r->n_free ? (double)r->t_free / (double)r->n_free : 0;
    out->calls = (double)(r->n_alloc + r->n_free) / steps;
    out->us = (double)(r->t_alloc + r->t_free) / 1e3 / steps;
    out->maps = (double)(s1.large_pages_mapped - s0.large_pages_mapped) / steps;
    out->unmaps = (double)(s1.large_pages_unmapped - s0.large_pages_unmapped) / steps;
    out->backend_us = (double)(s1.backend_ns - s0.backend_ns) / 1e3 / steps;
    out->peak_mib = (double)s1.peak_bytes_reserved / (1 << 20);
  }
  aa_pool_destroy(r->pool);
  aa_backend_destroy(b);
  free(r);
  return rc;
}

static void row(const char *name, const result *v, int n, size_t off, const char *unit) {
  double x[MAX_REPS];
  for (int i = 0; i < n; i++)
    memcpy(&x[i], (const char *)&v[i] + off, sizeof(double));
  bench_summary s = bench_summarise(x, n);
  printf("  %-34s %10.1f [%.1f, %.1f] %s\n", name, s.median, s.min, s.max, unit);
}

static void usage(FILE *f) {
  fprintf(f, "usage: adaptalloc-bench steps [--steps N] [--warm N] [--reps N]\n"
             "  the GPU zoo's moe training step as allocations, on a host pool shaped like\n"
             "  the default device policy: the allocator's own cost per step (bench_steps.c)\n"
             "  --steps N  measured steps per run (default 100)\n"
             "  --warm N   steps before them, left out (default 4)\n"
             "  --reps N   runs, each in a fresh pool (default 5, at most 100)\n");
}

int bench_steps_main(int argc, char **argv) {
  int steps = 100, warm = 4, reps = 5;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    int ok = strcmp(a, "--steps") == 0  ? bench_arg_int("steps", a, v, 1, 100000, &steps)
             : strcmp(a, "--warm") == 0 ? bench_arg_int("steps", a, v, 0, 100000, &warm)
             : strcmp(a, "--reps") == 0 ? bench_arg_int("steps", a, v, 1, MAX_REPS, &reps)
                                        : -1;
    if (ok == -1) {
      fprintf(stderr, "adaptalloc-bench steps: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
    if (!ok)
      return 2;
    i++;
  }
  result v[MAX_REPS];
  for (int i = 0; i < reps; i++) {
    int rc = one_run(steps, warm, 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1), &v[i]);
    if (rc != AA_OK) {
      fprintf(stderr, "adaptalloc-bench steps: run %d failed: %s\n", i + 1, aa_strerror(rc));
      return 1;
    }
  }
  printf("moe step on a host pool (default device policy's shape), %d steps after %d, "
         "%d runs: median [min, max]\n",
         steps, warm, reps);
  row("aa_alloc", v, reps, offsetof(result, alloc_ns), "ns per call");
  row("aa_free", v, reps, offsetof(result, free_ns), "ns per call");
  row("calls per step", v, reps, offsetof(result, calls), "");
  row("time in aa_alloc + aa_free", v, reps, offsetof(result, us), "us per step");
  row("pages mapped", v, reps, offsetof(result, maps), "per step");
  row("pages unmapped", v, reps, offsetof(result, unmaps), "per step");
  row("time in backend calls", v, reps, offsetof(result, backend_us), "us per step");
  row("peak reserved", v, reps, offsetof(result, peak_mib), "MiB");
  return 0;
}
