/*
 * test_adapt_burst.c — the policy loop's trim after a burst, loop on against
 * loop off: the host replay of the zoo's `burst` workload
 * (bench/gpu/zoo_workloads.py, BENCHMARKS.md "Loop on against loop off on
 * the GPU"). A server's prefill on a Llama-style model (8 layers, hidden
 * 1024, fp16): short requests, a burst of long-context requests that take
 * GiBs for a few intervals, then short requests again. PyTorch's caching
 * allocator (and adaptalloc with the loop off) keeps the burst's memory
 * reserved for the rest of the run; the loop's trim gives it back once the
 * burst has left its window of recent peaks (AA_ADAPT_PEAK_INTERVALS), with
 * no empty_cache and without re-mapping churn in the phase after.
 *
 * Two pools made from the default policy's "device" section (the pool the
 * GPU run measures: slabs up to 16 KiB, the expandable large path with map
 * runs), over the host backend, get the same requests in the same order;
 * each has a loop with the policy's adapt section, enabled on one and
 * disabled on the other, stepped in this thread every STEPS_PER_INTERVAL
 * requests (one loop interval). The pools differ only by what the loop did.
 * The host backend maps pages PROT_NONE -> read/write and never touches
 * them, so the burst's GiBs are address space, not memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/replay.h"
#include "adaptalloc/policy.h"

#define MIB ((uint64_t)1 << 20)
#define STEPS_PER_INTERVAL 8 /* requests per loop interval */
#define BEFORE_INTERVALS 10  /* short requests */
#define BURST_INTERVALS 3    /* long-context requests */
#define AFTER_INTERVALS 40   /* short requests again */
#define INTERVALS (BEFORE_INTERVALS + BURST_INTERVALS + AFTER_INTERVALS)
#define SETTLE_INTERVALS 10 /* the last intervals, in which nothing is mapped */

/* The model: the zoo workload's LlamaConfig, fp16. */
#define LAYERS 8
#define HIDDEN 1024
#define KV_HIDDEN 256 /* 4 key-value heads of 64 */
#define INTER 2816
#define HEADS 16
#define VOCAB 32000
#define HALF 2

static double mib(uint64_t b) { return (double)b / (double)MIB; }

typedef struct side {
  aa_backend *be;
  aa_pool *pool;
  aa_adapt_loop *loop;
  void *weights[4 + LAYERS * 9];
  size_t wsize[4 + LAYERS * 9];
  size_t nw;
} side;

static void *take(aa_pool *pool, size_t size) {
  void *p = aa_alloc(pool, size, NULL);
  assert_non_null(p);
  return p;
}

/* The weights, held for the whole run: embeddings, the head, per layer the
 * attention and MLP matrices and two norms (2 KiB each: small blocks). */
static void weights_alloc(side *sd) {
  size_t per_layer[9] = {(size_t)HIDDEN * HIDDEN * HALF, (size_t)KV_HIDDEN * HIDDEN * HALF,
                         (size_t)KV_HIDDEN * HIDDEN * HALF, (size_t)HIDDEN * HIDDEN * HALF,
                         (size_t)INTER * HIDDEN * HALF, (size_t)INTER * HIDDEN * HALF,
                         (size_t)HIDDEN * INTER * HALF, (size_t)HIDDEN * HALF,
                         (size_t)HIDDEN * HALF};
  sd->nw = 0;
  sd->wsize[sd->nw++] = (size_t)VOCAB * HIDDEN * HALF; /* embeddings */
  sd->wsize[sd->nw++] = (size_t)VOCAB * HIDDEN * HALF; /* lm head */
  sd->wsize[sd->nw++] = (size_t)HIDDEN * HALF;         /* final norm */
  sd->wsize[sd->nw++] = 64 * HALF;                     /* rotary inverse frequencies */
  for (int l = 0; l < LAYERS; l++)
    for (int k = 0; k < 9; k++)
      sd->wsize[sd->nw++] = per_layer[k];
  for (size_t i = 0; i < sd->nw; i++)
    sd->weights[i] = take(sd->pool, sd->wsize[i]);
}

/* One request's prefill of b sequences of n tokens, as an eager forward
 * allocates it: ids and mask; per layer the norm, q/k/v, the attention
 * scores and probabilities (b x heads x n x n), the attention output, the
 * MLP's gate, up and activation, and the new hidden state (the old one
 * freed); the logits last. Everything is freed when the request is done. */
static void request(aa_pool *pool, size_t b, size_t n) {
  size_t tok = b * n;
  void *ids = take(pool, tok * 8), *mask = take(pool, tok * 8);
  void *h = take(pool, tok * HIDDEN * HALF);
  for (int l = 0; l < LAYERS; l++) {
    void *x = take(pool, tok * HIDDEN * HALF);
    void *q = take(pool, tok * HIDDEN * HALF);
    void *k = take(pool, tok * KV_HIDDEN * HALF);
    void *v = take(pool, tok * KV_HIDDEN * HALF);
    void *s = take(pool, b * HEADS * n * n * HALF);
    void *pr = take(pool, b * HEADS * n * n * HALF);
    aa_free(pool, s, 0, NULL);
    void *o = take(pool, tok * HIDDEN * HALF);
    aa_free(pool, pr, 0, NULL);
    aa_free(pool, q, 0, NULL);
    aa_free(pool, k, 0, NULL);
    aa_free(pool, v, 0, NULL);
    void *g = take(pool, tok * INTER * HALF);
    void *u = take(pool, tok * INTER * HALF);
    void *a = take(pool, tok * INTER * HALF);
    aa_free(pool, g, 0, NULL);
    aa_free(pool, u, 0, NULL);
    void *h2 = take(pool, tok * HIDDEN * HALF);
    aa_free(pool, a, 0, NULL);
    aa_free(pool, o, 0, NULL);
    aa_free(pool, x, 0, NULL);
    aa_free(pool, h, 0, NULL);
    h = h2;
  }
  void *logits = take(pool, tok * VOCAB * HALF);
  aa_free(pool, h, 0, NULL);
  aa_free(pool, logits, 0, NULL);
  aa_free(pool, mask, 0, NULL);
  aa_free(pool, ids, 0, NULL);
}

/* The default policy's device pool over the host backend, with a loop over
 * it (the policy's adapt section, enabled or not) and the weights in it. */
static void side_open(const aa_policy *p, bool loop_on, side *sd) {
  aa_pool_config cfg;
  aa_adapt_loop_config lcfg;
  memset(sd, 0, sizeof *sd);
  assert_int_equal(aa_backend_host_new(&sd->be), AA_OK);
  aa_pool_config_init(&cfg);
  assert_int_equal(aa_policy_pool_config(p, "device", &cfg, NULL, 0, NULL), AA_OK);
  cfg.name = "device";
  cfg.backend = sd->be;
  assert_int_equal(cfg.large_mode, AA_LARGE_EXPANDABLE); /* the GPU run's large path */
  assert_int_equal(cfg.large_cache_bytes, 0);            /* no bound: what is freed stays */
  assert_int_equal(aa_pool_new(&cfg, &sd->pool), AA_OK);
  assert_int_equal(aa_policy_apply(p, "device", sd->pool), AA_OK);
  aa_pool_set_telemetry(sd->pool, true);
  aa_adapt_loop_config_init(&lcfg);
  lcfg.verify = aa_replay_adapt_verify;
  aa_policy_adapt_params(p, &lcfg.params);
  assert_true(lcfg.params.enabled); /* the default policy has the loop on */
  lcfg.params.enabled = loop_on;
  assert_int_equal(aa_adapt_loop_new(&lcfg, &sd->loop), AA_OK);
  assert_int_equal(aa_adapt_loop_add_pool(sd->loop, sd->pool), AA_OK);
  weights_alloc(sd);
}

static void side_close(side *sd) {
  for (size_t i = 0; i < sd->nw; i++)
    aa_free(sd->pool, sd->weights[i], sd->wsize[i], NULL);
  aa_adapt_loop_destroy(sd->loop);
  aa_pool_destroy(sd->pool);
  aa_backend_destroy(sd->be);
}

/* A short request: batch 1..4, 32..256 tokens; a long-context one: batch 8,
 * 1536..2048 tokens (the zoo's burst). Seeded, the same for both sides. */
static void next_request(uint64_t *rng, bool burst, size_t *b, size_t *n) {
  *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
  uint32_t r = (uint32_t)(*rng >> 33);
  if (burst) {
    *b = 8;
    *n = 1536 + (r % 9) * 64;
  } else {
    *b = 1 + r % 4;
    *n = 32 + ((r >> 8) % 8) * 32;
  }
}

typedef struct series {
  uint64_t reserved[INTERVALS];     /* at each interval's end, after the loop's step */
  uint64_t peak_in_use[INTERVALS];  /* most in use during the interval */
  uint64_t pages_mapped[INTERVALS]; /* cumulative */
  uint64_t trims[INTERVALS];        /* cumulative */
} series;

typedef struct outcome {
  series on, off;
  aa_adapt_counters con, coff;
  aa_pool_stats *son, *soff;                /* at the end */
  aa_adapt_audit audit[AA_ADAPT_AUDIT_MAX]; /* the loop's, on the loop-on side */
  size_t naudit;
} outcome;

/* Runs the phases (burst_intervals long-context intervals between the short
 * ones) on both sides under policy p. */
static void run_on_off(const aa_policy *p, int burst_intervals, outcome *out) {
  side on, off;
  uint64_t rng = 0x6275727374ull; /* "burst" */
  memset(out, 0, sizeof *out);
  out->son = malloc(sizeof *out->son);
  out->soff = malloc(sizeof *out->soff);
  assert_non_null(out->son);
  assert_non_null(out->soff);
  side_open(p, true, &on);
  side_open(p, false, &off);
  for (int i = 0; i < INTERVALS; i++) {
    bool burst = i >= BEFORE_INTERVALS && i < BEFORE_INTERVALS + burst_intervals;
    for (int s = 0; s < STEPS_PER_INTERVAL; s++) {
      size_t b, n;
      next_request(&rng, burst, &b, &n);
      request(on.pool, b, n);
      request(off.pool, b, n);
    }
    assert_int_equal(aa_pool_stats_get_opts(on.pool, out->son, AA_STATS_NO_SIZES), AA_OK);
    assert_int_equal(aa_pool_stats_get_opts(off.pool, out->soff, AA_STATS_NO_SIZES), AA_OK);
    out->on.peak_in_use[i] = out->son->window_peak_bytes_in_use;
    out->off.peak_in_use[i] = out->soff->window_peak_bytes_in_use;
    assert_true(aa_adapt_loop_step(on.loop) >= 0);
    assert_int_equal(aa_adapt_loop_step(off.loop), 0);
    assert_int_equal(aa_pool_stats_get_opts(on.pool, out->son, AA_STATS_NO_SIZES), AA_OK);
    assert_int_equal(aa_pool_stats_get_opts(off.pool, out->soff, AA_STATS_NO_SIZES), AA_OK);
    aa_adapt_loop_counters(on.loop, &out->con);
    aa_adapt_loop_counters(off.loop, &out->coff);
    out->on.reserved[i] = out->son->bytes_reserved;
    out->off.reserved[i] = out->soff->bytes_reserved;
    out->on.pages_mapped[i] = out->son->large_pages_mapped;
    out->off.pages_mapped[i] = out->soff->large_pages_mapped;
    out->on.trims[i] = out->con.trims;
    out->off.trims[i] = out->coff.trims;
  }
  for (int i = 0; i < INTERVALS; i++)
    print_message("interval %2d %-6s in use (peak) %7.1f MiB  reserved on %7.1f off %7.1f MiB  "
                  "pages mapped on %4llu off %4llu  trims %llu\n",
                  i, i < BEFORE_INTERVALS ? "before" : i < BEFORE_INTERVALS + burst_intervals ? "burst"
                                                                                              : "after",
                  mib(out->on.peak_in_use[i]), mib(out->on.reserved[i]),
                  mib(out->off.reserved[i]), (unsigned long long)out->on.pages_mapped[i],
                  (unsigned long long)out->off.pages_mapped[i],
                  (unsigned long long)out->on.trims[i]);
  print_message("loop on: %llu trims, %.1f MiB given back, peak reserved %.1f MiB; loop off: "
                "%llu trims, peak reserved %.1f MiB\n",
                (unsigned long long)out->con.trims, mib(out->con.bytes_trimmed),
                mib(out->son->peak_bytes_reserved), (unsigned long long)out->coff.trims,
                mib(out->soff->peak_bytes_reserved));
  /* the same requests reached both pools */
  assert_int_equal(out->son->allocs, out->soff->allocs);
  assert_int_equal(
      aa_adapt_loop_audit(on.loop, on.pool, out->audit, AA_ADAPT_AUDIT_MAX, &out->naudit), AA_OK);
  for (size_t k = 0; k < out->naudit; k++)
    print_message("audit: step %llu %s %llu B %s, released %.1f MiB, reserved %.1f -> %.1f MiB\n",
                  (unsigned long long)out->audit[k].step, aa_adapt_kind_name(out->audit[k].kind),
                  (unsigned long long)out->audit[k].block_size,
                  out->audit[k].result == AA_OK ? "applied" : "not applied",
                  mib(out->audit[k].released), mib(out->audit[k].measured_reserved_before),
                  mib(out->audit[k].measured_reserved_after));
  side_close(&on);
  side_close(&off);
}

static void outcome_free(outcome *o) {
  free(o->son);
  free(o->soff);
}

/* The burst: the loop trims once the burst's peak has left its window and
 * gives the burst's memory back; with the loop off the pool holds it to the
 * end. Peak reserved is the burst's on both sides. */
static void test_adapt_burst_trim_gives_back_after_burst(void **state) {
  aa_policy *p = NULL;
  aa_adapt_params ap;
  outcome o;
  int first_after = BEFORE_INTERVALS + BURST_INTERVALS; /* the first short interval */
  int trim_at = -1;
  uint64_t before_peak = 0, after_peak = 0, burst_peak = 0;
  (void)state;
  assert_int_equal(aa_policy_default(&p), AA_OK);
  aa_policy_adapt_params(p, &ap);
  assert_true(ap.trim_threshold_bytes > 0);
  run_on_off(p, BURST_INTERVALS, &o);

  for (int i = 0; i < INTERVALS; i++) {
    uint64_t *peak = i < BEFORE_INTERVALS ? &before_peak : i < first_after ? &burst_peak
                                                                           : &after_peak;
    if (o.on.peak_in_use[i] > *peak)
      *peak = o.on.peak_in_use[i];
    if (trim_at < 0 && o.on.trims[i] > 0)
      trim_at = i;
  }
  /* the workload is what it claims: the burst needs GiBs, far above the
   * short requests' peak plus the trim threshold */
  assert_true(burst_peak > after_peak + 4 * ap.trim_threshold_bytes);
  assert_true(burst_peak > before_peak + 4 * ap.trim_threshold_bytes);

  /* loop off: no decision, the burst's memory held to the end */
  assert_int_equal(o.coff.decisions, 0);
  assert_int_equal(o.coff.trims, 0);
  assert_true(o.off.reserved[INTERVALS - 1] >= burst_peak);

  /* loop on: nothing trimmed before the burst's peak left the window of
   * recent peaks (a trim then would give back what the burst still uses),
   * then a trim within the trim cooldown of that */
  assert_true(trim_at >= first_after + AA_ADAPT_PEAK_INTERVALS - 1);
  assert_true(trim_at <= first_after + AA_ADAPT_PEAK_INTERVALS + (int)ap.trim_cooldown);
  assert_true(o.con.trims >= 1);
  assert_true(o.con.bytes_trimmed >= burst_peak - after_peak - ap.trim_threshold_bytes);
  /* ... which leaves the recent peak plus at most the threshold reserved,
   * and stays so to the end */
  for (int i = trim_at; i < INTERVALS; i++)
    assert_true(o.on.reserved[i] <= after_peak + ap.trim_threshold_bytes);
  assert_true(o.on.reserved[INTERVALS - 1] + (burst_peak - after_peak) / 2 <
              o.off.reserved[INTERVALS - 1]);
  /* until then, loop on and off are the same pool: the same reserved bytes */
  for (int i = 0; i < trim_at; i++)
    assert_true(o.on.reserved[i] == o.off.reserved[i]);

  /* the audit has the trim: at its step (the loop's steps count from 1), the
   * bytes it gave back, the burst's reserved bytes before it and, measured
   * AA_ADAPT_MEASURE_STEPS steps later, the trimmed pool's */
  {
    const aa_adapt_audit *t = NULL;
    for (size_t k = 0; k < o.naudit && t == NULL; k++)
      if (o.audit[k].kind == AA_ADAPT_TRIM)
        t = &o.audit[k];
    assert_non_null(t);
    assert_int_equal(t->step, (uint64_t)trim_at + 1);
    assert_int_equal(t->result, AA_OK);
    assert_int_equal(t->released, o.on.reserved[trim_at - 1] - o.on.reserved[trim_at]);
    assert_int_equal(t->measured, 1);
    assert_int_equal(t->measured_reserved_before, o.on.reserved[trim_at - 1]);
    assert_int_equal(t->measured_reserved_after,
                     o.on.reserved[trim_at + AA_ADAPT_MEASURE_STEPS - 1]);
  }

  /* the peak is the burst's, on both sides: the trim cannot lower it */
  assert_true(o.son->peak_bytes_reserved == o.soff->peak_bytes_reserved);

  /* no re-mapping churn after the trim: the short requests fit in what the
   * trim kept, so the last SETTLE_INTERVALS intervals map nothing (and the
   * off side, holding everything, maps nothing after the burst either) */
  assert_true(INTERVALS - SETTLE_INTERVALS > trim_at);
  assert_int_equal(o.on.pages_mapped[INTERVALS - 1],
                   o.on.pages_mapped[INTERVALS - SETTLE_INTERVALS - 1]);
  assert_int_equal(o.off.pages_mapped[INTERVALS - 1], o.off.pages_mapped[first_after]);
  print_message("trim at interval %d (%d after the burst); reserved at the end on %.1f MiB, off "
                "%.1f MiB; pages mapped after the trim %llu\n",
                trim_at, trim_at - first_after + 1, mib(o.on.reserved[INTERVALS - 1]),
                mib(o.off.reserved[INTERVALS - 1]),
                (unsigned long long)(o.on.pages_mapped[INTERVALS - 1] -
                                     o.on.pages_mapped[trim_at]));
  outcome_free(&o);
  aa_policy_free(p);
}

/* Where the loop cannot help it changes nothing: the same short requests
 * without a burst leave nothing above the threshold to trim; the pools stay
 * the same, interval by interval. */
static void test_adapt_burst_no_burst_no_trim(void **state) {
  aa_policy *p = NULL;
  outcome o;
  (void)state;
  assert_int_equal(aa_policy_default(&p), AA_OK);
  run_on_off(p, 0, &o);
  assert_int_equal(o.con.trims, 0);
  assert_int_equal(o.con.bytes_trimmed, 0);
  for (int i = 0; i < INTERVALS; i++)
    assert_true(o.on.reserved[i] == o.off.reserved[i]);
  assert_true(o.son->peak_bytes_reserved == o.soff->peak_bytes_reserved);
  outcome_free(&o);
  aa_policy_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adapt_burst_trim_gives_back_after_burst),
      cmocka_unit_test(test_adapt_burst_no_burst_no_trim),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
