/*
 * bench_cases.c — `adaptalloc-bench host`'s workloads and their timed loops
 * (bench_host.c runs them and reports): the case table, each thread's batch
 * plan (sizes and free orders from a fixed seed), and one measurement of a
 * case on one allocator, by the wall clock and the thread's CPU time.
 * Entry points: bench_cases[], bench_plan_init, bench_run_pair,
 * bench_run_batch_case (bench.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

const bench_case bench_cases[] = {
    {"pair_64", CASE_PAIR, 64, 1, 2000000},
    {"pair_512", CASE_PAIR, 512, 1, 2000000},
    {"pair_4096", CASE_PAIR, 4096, 1, 2000000},
    {"pair_65536", CASE_PAIR, 65536, 1, 2000000},
    {"batch_mixed", CASE_BATCH, 0, 1, 200000},
    {"batch_mixed_2t", CASE_BATCH, 0, 2, 200000},
};
_Static_assert(sizeof bench_cases / sizeof bench_cases[0] == N_CASES,
               "N_CASES (bench.h) counts the cases");

/* ------------------------------------------------------------ randomness */

static uint64_t rng_next(uint64_t *s) {
  /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void bench_plan_init(batch_plan *p, uint64_t seed) {
  uint64_t s = seed;
  int i;
  int k;
  memset(p, 0, sizeof *p);
  for (i = 0; i < BATCH_N; i++) {
    /* log-uniform in [16, 256 KiB): 4 .. 18 bits, fractional part from rng */
    double bits = 4.0 + 14.0 * (double)(rng_next(&s) >> 11) / 9007199254740992.0;
    double v = 1.0;
    int whole = (int)bits;
    double frac = bits - whole;
    int b;
    for (b = 0; b < whole; b++) {
      v *= 2.0;
    }
    v *= 1.0 + frac; /* a piecewise-linear 2^frac: good enough here */
    p->sizes[i] = (size_t)v;
  }
  for (k = 0; k < BATCH_PERMS; k++) {
    for (i = 0; i < BATCH_N; i++) {
      p->perm[k][i] = (uint16_t)i;
    }
    for (i = BATCH_N - 1; i > 0; i--) {
      int j = (int)(rng_next(&s) % (uint64_t)(i + 1));
      uint16_t t = p->perm[k][i];
      p->perm[k][i] = p->perm[k][j];
      p->perm[k][j] = t;
    }
  }
}

/* ------------------------------------------------------------ timed loops */

/* Each loop is written out per allocator kind so that what is timed is the
 * call a real caller makes, through a function pointer held in a local. */

#define PAIR_LOOP(ALLOC, FREE)            \
  do {                                    \
    for (uint64_t i_ = 0; i_ < n; i_++) { \
      void *p_ = (ALLOC);                 \
      if (p_ == NULL) {                   \
        failed = true;                    \
        break;                            \
      }                                   \
      BENCH_SINK(p_);                     \
      FREE;                               \
    }                                     \
  } while (0)

static uint64_t cpu_now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
    return 0;
  }
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Returns the time taken; {0, 0} on allocation failure. */
timing bench_run_pair(const bench_allocator *a, size_t size, uint64_t n) {
  bool failed = false;
  timing t = {0, 0};
  uint64_t w0;
  uint64_t c0;

  w0 = aa_now_ns();
  c0 = cpu_now_ns();
  switch (a->kind) {
  case BENCH_AA: {
    aa_pool *pool = a->pool;
    bench_aa_alloc_fn al = a->aa_alloc_fn;
    bench_aa_free_fn fr = a->aa_free_fn;
    PAIR_LOOP(al(pool, size, NULL), fr(pool, p_, size, NULL));
    break;
  }
  case BENCH_LIBC:
  case BENCH_MI: {
    bench_malloc_fn al = a->malloc_fn;
    bench_free_fn fr = a->free_fn;
    PAIR_LOOP(al(size), fr(p_));
    break;
  }
  case BENCH_JE: {
    bench_mallocx_fn al = a->mallocx_fn;
    bench_sdallocx_fn fr = a->sdallocx_fn;
    PAIR_LOOP(al(size, 0), fr(p_, size, 0));
    break;
  }
  }
  if (!failed) {
    t.cpu = cpu_now_ns() - c0;
    t.wall = aa_now_ns() - w0;
  }
  return t;
}

#define BATCH_LOOP(ALLOC, FREE)                             \
  do {                                                      \
    for (uint64_t b_ = 0; b_ < batches && !failed; b_++) {  \
      const uint16_t *perm_ = plan->perm[b_ % BATCH_PERMS]; \
      for (int i_ = 0; i_ < BATCH_N; i_++) {                \
        size_t sz_ = plan->sizes[i_];                       \
        void *p_ = (ALLOC);                                 \
        if (p_ == NULL) {                                   \
          failed = true;                                    \
        }                                                   \
        BENCH_SINK(p_);                                     \
        plan->ptrs[i_] = p_;                                \
      }                                                     \
      for (int j_ = 0; j_ < BATCH_N; j_++) {                \
        int k_ = perm_[j_];                                 \
        size_t sz_ = plan->sizes[k_];                       \
        void *p_ = plan->ptrs[k_];                          \
        if (p_ != NULL) {                                   \
          FREE;                                             \
        }                                                   \
      }                                                     \
    }                                                       \
  } while (0)

/* Runs `batches` batches of the plan; returns false on allocation failure. */
static bool run_batches(const bench_allocator *a, batch_plan *plan, uint64_t batches) {
  bool failed = false;
  switch (a->kind) {
  case BENCH_AA: {
    aa_pool *pool = a->pool;
    bench_aa_alloc_fn al = a->aa_alloc_fn;
    bench_aa_free_fn fr = a->aa_free_fn;
    BATCH_LOOP(al(pool, sz_, NULL), fr(pool, p_, sz_, NULL));
    break;
  }
  case BENCH_LIBC:
  case BENCH_MI: {
    bench_malloc_fn al = a->malloc_fn;
    bench_free_fn fr = a->free_fn;
    BATCH_LOOP(al(sz_), ((void)sz_, fr(p_)));
    break;
  }
  case BENCH_JE: {
    bench_mallocx_fn al = a->mallocx_fn;
    bench_sdallocx_fn fr = a->sdallocx_fn;
    BATCH_LOOP(al(sz_, 0), fr(p_, sz_, 0));
    break;
  }
  }
  return !failed;
}

typedef struct batch_thread {
  const bench_allocator *a;
  batch_plan *plan;
  uint64_t batches;
  pthread_barrier_t *barrier;
  uint64_t t0;
  uint64_t t1;
  uint64_t cpu;
  bool ok;
} batch_thread;

static void *batch_thread_main(void *arg) {
  batch_thread *t = arg;
  uint64_t c0;
  pthread_barrier_wait(t->barrier);
  t->t0 = aa_now_ns();
  c0 = cpu_now_ns();
  t->ok = run_batches(t->a, t->plan, t->batches);
  t->cpu = cpu_now_ns() - c0;
  t->t1 = aa_now_ns();
  return NULL;
}

timing bench_run_batch_case(const bench_allocator *a, batch_plan *plans, int threads,
                            uint64_t batches) {
  pthread_t tid[MAX_THREADS];
  batch_thread bt[MAX_THREADS];
  pthread_barrier_t barrier;
  timing t = {0, 0};
  uint64_t t0 = UINT64_MAX;
  uint64_t t1 = 0;
  uint64_t cpu = 0;
  bool ok = true;
  int started = 0;
  int i;

  if (threads == 1) {
    uint64_t w0 = aa_now_ns();
    uint64_t c0 = cpu_now_ns();
    if (run_batches(a, &plans[0], batches)) {
      t.cpu = cpu_now_ns() - c0;
      t.wall = aa_now_ns() - w0;
    }
    return t;
  }
  if (pthread_barrier_init(&barrier, NULL, (unsigned)threads) != 0) {
    return t;
  }
  for (i = 0; i < threads; i++) {
    bt[i].a = a;
    bt[i].plan = &plans[i];
    bt[i].batches = batches;
    bt[i].barrier = &barrier;
    bt[i].ok = false;
    if (pthread_create(&tid[i], NULL, batch_thread_main, &bt[i]) != 0) {
      ok = false;
      break;
    }
    started++;
  }
  if (!ok) {
    /* The started threads wait on the barrier forever; this is a benchmark
     * tool, so give up loudly rather than leave them hanging silently. */
    fprintf(stderr, "bench: pthread_create failed\n");
    exit(1);
  }
  for (i = 0; i < started; i++) {
    pthread_join(tid[i], NULL);
    ok = ok && bt[i].ok;
    if (bt[i].t0 < t0) {
      t0 = bt[i].t0;
    }
    if (bt[i].t1 > t1) {
      t1 = bt[i].t1;
    }
    cpu += bt[i].cpu;
  }
  pthread_barrier_destroy(&barrier);
  if (ok) {
    t.wall = t1 - t0;
    t.cpu = cpu / (uint64_t)started;
  }
  return t;
}
