/*
 * bench_streams.c — `adaptalloc-bench streams`: host replicas of the GPU
 * zoo's side-stream workloads (bench/gpu/zoo_workloads.py), so that what the
 * large path holds for them can be measured, and compared before and after
 * a change, without a GPU. The allocations and frees of one step each, on an
 * expandable host pool (the device pools' large mode) with two streams of
 * the host backend's test hooks: "busy" holds a stream's events pending, as
 * a GPU that runs behind the CPU does.
 *
 *   sidepipe  a batch copied and transformed on a side stream (uint8 input,
 *             two float tensors), handed to the compute stream with
 *             record_stream, a compute-stream tensor beside it; six shapes
 *             cycling; --busy: both streams busy until the step's end
 *   fsdp      eight layers' weights gathered on a side stream one layer
 *             ahead (a temporary half, the whole), used on the compute stream
 *             (record_stream) and freed after the layer, forward and
 *             backward, with activations on the compute stream; --busy: the
 *             GPU a whole step behind
 *   ddp       six MLP blocks' activations and gradients on the compute
 *             stream, the gradients flattened per bucket (32 MiB) and
 *             "reduced" on a communication stream (record_stream), freed at
 *             the next step's zero_grad; --busy: the GPU a whole step behind
 *
 * --per-stream gives the side stream a pool of its own (PyTorch's
 * expandable segments: one per stream, blocks never cross streams) and
 * PyTorch's rule for pending blocks (no stream waits): a reference.
 *
 * Prints, per cycle, the pool's reserved and peak in-use bytes, the large
 * path's settled chunks, stream waits (large_stream_wait; off with
 * --no-stream-wait) and page maps. The figures are the allocator's own
 * (no timing): the same run gives the same numbers.
 *
 * Entry point: bench_streams_main.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "test_hooks.h" /* core/src: busy streams of the host backend */

#define SIDE ((aa_stream)(uintptr_t)0x1000)
#define CUR ((aa_stream)(uintptr_t)0x2000)
#define MIB (1024.0 * 1024.0)

typedef struct run {
  aa_backend *b;
  aa_pool *p;
  aa_pool *side; /* --per-stream: the side stream's own pool (else NULL) */
  bool busy;
  uint64_t failed;
} run;

/* The pool serving blocks allocated on `s`: with --per-stream each stream
 * has its own (PyTorch's expandable segments: one segment per stream, blocks
 * never cross streams). */
static aa_pool *pool_of(run *r, aa_stream s) { return r->side != NULL && s == SIDE ? r->side : r->p; }

static void *take(run *r, size_t n, aa_stream s) {
  void *p = aa_alloc(pool_of(r, s), n, s);
  if (p == NULL)
    r->failed++;
  return p;
}

static void give(run *r, void *p, size_t n, aa_stream s) {
  if (p != NULL)
    (void)aa_free(pool_of(r, s), p, n, s);
}

/* record_stream(`use`) on block `p` allocated on stream `s`. */
static void use_on(run *r, void *p, aa_stream s, aa_stream use) {
  if (p != NULL)
    (void)aa_record_stream(pool_of(r, s), p, use);
}

static void streams_busy(run *r, bool busy) {
  if (r->busy) {
    (void)aa_backend_host_stream_busy(r->b, SIDE, busy);
    (void)aa_backend_host_stream_busy(r->b, CUR, busy);
  }
}

static void report(run *r, const char *what, int cycle) {
  aa_pool_stats st, sd;
  if (aa_pool_stats_get_opts(r->p, &st, AA_STATS_NO_SIZES) != AA_OK)
    return;
  if (r->side != NULL) { /* two pools: the sums (peak: the sum of peaks) */
    if (aa_pool_stats_get_opts(r->side, &sd, AA_STATS_NO_SIZES) != AA_OK)
      return;
    st.bytes_reserved += sd.bytes_reserved;
    st.peak_bytes_in_use += sd.peak_bytes_in_use;
    st.large_settled += sd.large_settled;
    st.large_stream_waits += sd.large_stream_waits;
    st.large_pages_mapped += sd.large_pages_mapped;
  }
  printf("%-8s cycle %2d  reserved %8.1f MiB  peak in use %8.1f MiB  settled %6llu  "
         "stream waits %6llu  page maps %6llu\n",
         what, cycle, (double)st.bytes_reserved / MIB, (double)st.peak_bytes_in_use / MIB,
         (unsigned long long)st.large_settled, (unsigned long long)st.large_stream_waits,
         (unsigned long long)st.large_pages_mapped);
}

static void sidepipe(run *r, int cycles) {
  static const size_t shapes[6][4] = {{64, 3, 224, 224}, {32, 3, 320, 320}, {96, 3, 160, 160}, {48, 3, 256, 256}, {128, 3, 128, 128}, {16, 3, 448, 448}};
  for (int c = 0; c < cycles; c++) {
    for (int k = 0; k < 6; k++) {
      size_t n = shapes[k][0] * shapes[k][1] * shapes[k][2] * shapes[k][3];
      void *raw = take(r, n, SIDE);
      void *x = take(r, n * 4, SIDE);
      void *y = take(r, n * 4, SIDE);
      give(r, raw, n, SIDE);
      use_on(r, x, SIDE, CUR);
      use_on(r, y, SIDE, CUR);
      streams_busy(r, true);
      void *w = take(r, (size_t)16 << 20, CUR);
      streams_busy(r, false);
      give(r, x, n * 4, SIDE);
      give(r, y, n * 4, SIDE);
      give(r, w, (size_t)16 << 20, CUR);
    }
    report(r, "sidepipe", c);
  }
}

/* One layer's weights gathered on the side stream: a temporary half, then
 * the whole. */
static void *gather(run *r, size_t whole) {
  void *tmp = take(r, whole / 2, SIDE);
  void *full = take(r, whole, SIDE);
  give(r, tmp, whole / 2, SIDE);
  return full;
}

static void fsdp(run *r, int cycles) {
  enum { L = 8 };
  const size_t d = 2048, whole = 8 * d * d * 4 + 5 * d * 4;
  static const size_t counts[6] = {1024, 8192, 3000, 6000, 2048, 7000};
  void *shard[L];
  for (int k = 0; k < L; k++)
    shard[k] = take(r, whole / 2, CUR);
  for (int c = 0; c < cycles; c++) {
    size_t n = counts[c % 6], act = n * d * 4, hid = n * 4 * d * 4;
    void *acts[L + 1];
    streams_busy(r, true);
    acts[0] = take(r, act, CUR);
    void *next = gather(r, whole);
    for (int k = 0; k < L; k++) { /* forward */
      void *full = next;
      use_on(r, full, SIDE, CUR);
      if (k + 1 < L)
        next = gather(r, whole);
      void *h = take(r, hid, CUR);
      void *g = take(r, hid, CUR);
      acts[k + 1] = take(r, act, CUR);
      give(r, h, hid, CUR);
      give(r, g, hid, CUR);
      give(r, full, whole, SIDE);
    }
    next = gather(r, whole);
    for (int k = L; k-- > 0;) { /* backward: gathered again */
      void *full = next;
      use_on(r, full, SIDE, CUR);
      if (k > 0)
        next = gather(r, whole);
      void *w = take(r, whole, CUR);
      void *h = take(r, hid, CUR);
      void *g = take(r, act, CUR);
      void *flat = take(r, whole, CUR);
      give(r, h, hid, CUR);
      give(r, w, whole, CUR);
      give(r, flat, whole, CUR);
      give(r, acts[k + 1], act, CUR);
      give(r, g, act, CUR);
      give(r, full, whole, SIDE);
    }
    give(r, acts[0], act, CUR);
    streams_busy(r, false);
    report(r, "fsdp", c);
  }
  for (int k = 0; k < L; k++)
    give(r, shard[k], whole / 2, CUR);
}

/* DDP-like (wl_ddp): six blocks Linear(1024, 4096) GELU Linear(4096, 1024)
 * trained on the workload's twelve batch sizes. Per step, on the compute
 * stream: the batch, the previous step's gradients freed (zero_grad with
 * set_to_none; they were record_stream'd on the communication stream), the
 * forward's saved activations, the backward's temporaries and the new
 * gradients (the weight gradients stolen by AccumulateGrad, no copy); then
 * per bucket (one block's four gradients, 32 MiB + 20 KiB, last block first)
 * on the communication stream: the gradients record_stream'd there, the
 * flattened bucket and its roll allocated and freed there; the batch freed at
 * the step's end. Biases (4 and 16 KiB) take the small path. */
enum { DDP_BLOCKS = 6 };

typedef struct ddp_grads {
  void *w1, *b1, *w2, *b2;
} ddp_grads;

static void ddp(run *r, int cycles) {
  const size_t d = 1024, w = 4 * d * d * 4, b1 = 4 * d * 4, b2 = d * 4, flat = 2 * w + b1 + b2;
  static const size_t counts[12] = {11449, 3368, 9994, 6334, 2651, 2055,
                                    4433, 11656, 9752, 8161, 7280, 2406};
  ddp_grads param[DDP_BLOCKS], grad[DDP_BLOCKS];
  for (int k = 0; k < DDP_BLOCKS; k++) { /* the model, on the compute stream */
    param[k].w1 = take(r, w, CUR);
    param[k].b1 = take(r, b1, CUR);
    param[k].w2 = take(r, w, CUR);
    param[k].b2 = take(r, b2, CUR);
  }
  memset(grad, 0, sizeof grad);
  for (int c = 0; c < cycles; c++) {
    size_t n = counts[c % 12], a = n * d * 4, h = n * 4 * d * 4;
    void *in[DDP_BLOCKS + 1], *h1[DDP_BLOCKS], *g1[DDP_BLOCKS];
    streams_busy(r, true);
    void *x = take(r, a, CUR);
    in[0] = x;
    for (int k = 0; k < DDP_BLOCKS; k++) { /* zero_grad(set_to_none=True) */
      give(r, grad[k].w1, w, CUR);
      give(r, grad[k].b1, b1, CUR);
      give(r, grad[k].w2, w, CUR);
      give(r, grad[k].b2, b2, CUR);
    }
    memset(grad, 0, sizeof grad);
    for (int k = 0; k < DDP_BLOCKS; k++) { /* forward: everything saved */
      h1[k] = take(r, h, CUR);
      g1[k] = take(r, h, CUR);
      in[k + 1] = take(r, a, CUR);
    }
    void *z = take(r, a, CUR); /* pow(2), freed once mean() has it */
    give(r, z, a, CUR);
    /* backward: mean's gradient, pow's (self.pow(1), 2 * that, grad * that) */
    void *gz = take(r, a, CUR);
    void *t1 = take(r, a, CUR);
    void *t2 = take(r, a, CUR);
    give(r, t1, a, CUR);
    void *gy = take(r, a, CUR);
    give(r, t2, a, CUR);
    give(r, gz, a, CUR);
    give(r, in[DDP_BLOCKS], a, CUR); /* pow's saved input */
    for (int k = DDP_BLOCKS; k-- > 0;) {
      void *gg = take(r, h, CUR); /* second Linear: input, weight, bias grads */
      grad[k].w2 = take(r, w, CUR);
      grad[k].b2 = take(r, b2, CUR);
      give(r, gy, a, CUR);
      give(r, g1[k], h, CUR);
      void *gh = take(r, h, CUR); /* GELU */
      give(r, gg, h, CUR);
      give(r, h1[k], h, CUR);
      gy = k > 0 ? take(r, a, CUR) : NULL; /* first Linear; x needs no grad */
      grad[k].w1 = take(r, w, CUR);
      grad[k].b1 = take(r, b1, CUR);
      give(r, gh, h, CUR);
      if (k > 0)
        give(r, in[k], a, CUR);
    }
    for (int k = DDP_BLOCKS; k-- > 0;) { /* the buckets, on the comm stream */
      use_on(r, grad[k].b2, CUR, SIDE);
      use_on(r, grad[k].w2, CUR, SIDE);
      use_on(r, grad[k].b1, CUR, SIDE);
      use_on(r, grad[k].w1, CUR, SIDE);
      void *f = take(r, flat, SIDE);
      void *roll = take(r, flat, SIDE);
      give(r, roll, flat, SIDE);
      give(r, f, flat, SIDE);
    }
    give(r, x, a, CUR);
    streams_busy(r, false);
    report(r, "ddp", c);
  }
  for (int k = 0; k < DDP_BLOCKS; k++) {
    give(r, grad[k].w1, w, CUR);
    give(r, grad[k].b1, b1, CUR);
    give(r, grad[k].w2, w, CUR);
    give(r, grad[k].b2, b2, CUR);
    give(r, param[k].w1, w, CUR);
    give(r, param[k].b1, b1, CUR);
    give(r, param[k].w2, w, CUR);
    give(r, param[k].b2, b2, CUR);
  }
}

/* A pool that served something else first: blocks of assorted sizes, about
 * `mib` MiB in all, some kept, the rest freed, then aa_pool_release (PyTorch's
 * empty_cache) gives back what it can, as a test run after others finds the
 * pool. Returns the blocks kept, for the caller to free at the end. */
static int prelude(run *r, int mib, void **kept, size_t *kept_n, int cap) {
  size_t total = (size_t)mib << 20, sum = 0;
  int n = 0, nk = 0;
  void *v[512];
  size_t sz[512];
  uint32_t x = 12345;
  while (sum < total && n < 512) {
    x = x * 1103515245u + 12345u;
    size_t b = ((size_t)(x >> 8) % (24u << 20)) + (32u << 10);
    v[n] = take(r, b, CUR);
    sz[n++] = b;
    sum += b;
  }
  for (int i = 0; i < n; i++) {
    if (i % 7 == 3 && nk < cap) { /* every seventh stays live */
      kept[nk] = v[i];
      kept_n[nk++] = sz[i];
    } else {
      give(r, v[i], sz[i], CUR);
    }
  }
  (void)aa_pool_release(r->p);
  return nk;
}

static void usage(FILE *f) {
  fprintf(f, "usage: adaptalloc-bench streams [sidepipe|fsdp|ddp] [--busy] [--no-stream-wait]\n"
             "                                [--per-stream] [--cycles N] [--after MIB]\n"
             "  host replicas of the GPU zoo's side-stream workloads on an expandable\n"
             "  host pool: reserved and peak in use per cycle (no timing)\n"
             "  --busy      both streams busy through each step (a GPU behind the CPU)\n"
             "  --no-stream-wait  large_stream_wait off: pending blocks wait for their\n"
             "              streams' work (PyTorch's rule) instead of ordering the\n"
             "              requesting stream after it\n"
             "  --per-stream  a pool per stream with PyTorch's rule (no stream waits):\n"
             "              what PyTorch's expandable segments keep apart (a reference)\n"
             "  --cycles N  cycles to run (default 6, 1..1000)\n"
             "  --after MIB first serve about MIB MiB of assorted blocks, keep every\n"
             "              seventh, free the rest and release the cache (empty_cache):\n"
             "              the pool a test finds after others (default 0, 0..65536)\n");
}

int bench_streams_main(int argc, char **argv) {
  const char *which = "sidepipe";
  int cycles = 6;
  bool no_wait = false, per_stream = false;
  int after = 0;
  run r;
  aa_pool_config cfg;
  memset(&r, 0, sizeof r);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return 0;
    } else if (strcmp(argv[i], "--busy") == 0) {
      r.busy = true;
    } else if (strcmp(argv[i], "--no-stream-wait") == 0) {
      no_wait = true;
    } else if (strcmp(argv[i], "--per-stream") == 0) {
      per_stream = true;
    } else if (strcmp(argv[i], "--after") == 0 && i + 1 < argc) {
      if (!bench_arg_int("streams", "--after", argv[++i], 0, 65536, &after))
        return 2;
    } else if (strcmp(argv[i], "--cycles") == 0 && i + 1 < argc) {
      if (!bench_arg_int("streams", "--cycles", argv[++i], 1, 1000, &cycles))
        return 2;
    } else if (strcmp(argv[i], "sidepipe") == 0 || strcmp(argv[i], "fsdp") == 0 ||
               strcmp(argv[i], "ddp") == 0) {
      which = argv[i];
    } else {
      fprintf(stderr, "adaptalloc-bench streams: unknown argument '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  if (aa_backend_host_new(&r.b) != AA_OK) {
    fprintf(stderr, "adaptalloc-bench streams: cannot create the host backend\n");
    return 1;
  }
  aa_pool_config_init(&cfg);
  cfg.backend = r.b;
  cfg.large_mode = AA_LARGE_EXPANDABLE; /* the default policy's device pools */
  cfg.max_small = 16384;
  cfg.large_stream_wait = no_wait || per_stream ? -1 : 0;
  if (aa_pool_new(&cfg, &r.p) != AA_OK) {
    fprintf(stderr, "adaptalloc-bench streams: cannot create the pool\n");
    aa_backend_destroy(r.b);
    return 1;
  }
  if (per_stream && aa_pool_new(&cfg, &r.side) != AA_OK) {
    fprintf(stderr, "adaptalloc-bench streams: cannot create the side stream's pool\n");
    aa_pool_destroy(r.p);
    aa_backend_destroy(r.b);
    return 1;
  }
  void *kept[128];
  size_t kept_n[128];
  int nk = after > 0 ? prelude(&r, after, kept, kept_n, 128) : 0;
  if (strcmp(which, "fsdp") == 0)
    fsdp(&r, cycles);
  else if (strcmp(which, "ddp") == 0)
    ddp(&r, cycles);
  else
    sidepipe(&r, cycles);
  for (int i = 0; i < nk; i++)
    give(&r, kept[i], kept_n[i], CUR);
  if (r.side != NULL)
    aa_pool_destroy(r.side);
  aa_pool_destroy(r.p);
  aa_backend_destroy(r.b);
  if (r.failed > 0) {
    fprintf(stderr, "adaptalloc-bench streams: %llu allocations failed\n",
            (unsigned long long)r.failed);
    return 1;
  }
  return 0;
}
