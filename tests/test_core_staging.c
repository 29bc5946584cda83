/*
 * test_core_staging.c — the pinned staging pattern on the host backend: a
 * buffer is taken on the host pseudo-stream (aa_staging_get allocates on
 * AA_STREAM_HOST) and put back on the stream of the copy that reads it
 * (aa_staging_put frees on that stream). The pool asks the backend whether
 * that stream is idle (stream_query) before it records an event; the host
 * backend simulates a stream's outstanding work with
 * aa_backend_host_stream_busy. Checked: a buffer never comes back while its
 * stream is busy (another idle stream does not count), it comes back before
 * the pool takes new memory once the stream is idle, a whole batch is
 * released by one query, concurrent threads never get one buffer twice, the
 * stats count the queries, and no event leaks.
 *
 * The calls are aa_alloc(..., AA_STREAM_HOST) and aa_free(..., stream),
 * which is all aa_staging_get / aa_staging_put do on a pinned pool (they
 * need the CUDA pinned backend; this runs without CUDA).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h" /* AA_STREAM_HOST */
#include "core_test.h"       /* core: the host backend's test hooks */

#define S1 ((aa_stream)(uintptr_t)0x1000)
#define S2 ((aa_stream)(uintptr_t)0x2000)

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
} fx;

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.name = "staging";
  cfg.backend = f->b;
  assert_int_equal(aa_pool_new(&cfg, &f->p), AA_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.bytes_in_use, 0);
  /* every query the backend answered was the pool's, and counted */
  assert_int_equal(st.stream_queries, aa_backend_host_stream_queries(f->b));
  assert_true(st.stream_idle <= st.stream_queries);
  aa_pool_destroy(f->p);
  uint64_t mapped, rec, outstanding;
  aa_backend_host_counts(f->b, NULL, NULL, &mapped);
  aa_backend_host_event_counts(f->b, &rec, &outstanding);
  assert_int_equal(mapped, 0);
  assert_int_equal(outstanding, 0);
  aa_backend_destroy(f->b);
  free(f);
  return 0;
}

static void *get(fx *f, size_t n) { return aa_alloc(f->p, n, AA_STREAM_HOST); }

static void put(fx *f, void *p, size_t n, aa_stream s) {
  assert_int_equal(aa_free(f->p, p, n, s), AA_OK);
}

static uint64_t backend_allocs(fx *f) {
  uint64_t a;
  aa_backend_host_counts(f->b, &a, NULL, NULL);
  return a;
}

static uint64_t events_recorded(fx *f) {
  uint64_t r;
  aa_backend_host_event_counts(f->b, &r, NULL);
  return r;
}

/* small (a slab of many), small (two a slab), large */
static const size_t SIZES[] = {4096, (size_t)1 << 20, (size_t)3 << 20};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])
#define HOLD 64 /* buffers a round keeps */

/* A buffer put back on a busy stream is never handed out again, while
 * another stream's buffers (idle) are; once its stream is idle it comes back
 * before the pool takes new memory. */
static void test_core_staging_busy_stream_blocks_reuse(void **state) {
  fx *f = *state;
  for (size_t si = 0; si < NSIZES; si++) {
    size_t n = SIZES[si];
    void *held[HOLD];
    void *p = get(f, n);
    assert_non_null(p);
    assert_int_equal(aa_backend_host_stream_busy(f->b, S1, true), AA_OK);
    put(f, p, n, S1);
    /* S2 stays idle: its buffers cycle, p never shows up */
    for (int i = 0; i < HOLD; i++) {
      void *q = get(f, n);
      assert_non_null(q);
      assert_ptr_not_equal(q, p);
      put(f, q, n, S2);
      held[i] = get(f, n);
      assert_non_null(held[i]);
      assert_ptr_not_equal(held[i], p);
    }
    for (int i = 0; i < HOLD; i++)
      put(f, held[i], n, AA_STREAM_HOST);
    /* S1's work completes: p is usable, and comes back before new memory */
    assert_int_equal(aa_backend_host_stream_busy(f->b, S1, false), AA_OK);
    uint64_t a0 = backend_allocs(f);
    int found = -1, k = 0;
    void **all = calloc(4096, sizeof *all);
    assert_non_null(all);
    for (; k < 4096 && found < 0; k++) {
      all[k] = get(f, n);
      assert_non_null(all[k]);
      if (all[k] == p)
        found = k;
    }
    assert_true(found >= 0);
    assert_int_equal(backend_allocs(f), a0);
    for (int i = 0; i < k; i++)
      put(f, all[i], n, AA_STREAM_HOST);
    free(all);
  }
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_true(st.stream_idle > 0);
  assert_int_equal(st.pending_blocks, 0);
}

/* One buffer in a get/put loop on an idle stream (pinned_empty + free): it
 * is reused every time, with no event recorded and no new memory, for a
 * small class with few blocks a slab and for the large path. */
static void test_core_staging_idle_loop_needs_no_event(void **state) {
  fx *f = *state;
  for (size_t si = 0; si < NSIZES; si++) {
    size_t n = SIZES[si];
    void *w = get(f, n);
    put(f, w, n, S1); /* warm */
    uint64_t a0 = backend_allocs(f), e0 = events_recorded(f);
    aa_pool_stats s0, s1;
    aa_pool_stats_get(f->p, &s0);
    for (int i = 0; i < 1000; i++) {
      void *p = get(f, n);
      assert_non_null(p);
      put(f, p, n, S1);
    }
    aa_pool_stats_get(f->p, &s1);
    assert_int_equal(backend_allocs(f), a0);
    assert_int_equal(events_recorded(f), e0);
    /* at most one query a pair, and every query found the stream idle */
    assert_true(s1.stream_queries - s0.stream_queries <= 1000);
    assert_int_equal(s1.stream_queries - s0.stream_queries, s1.stream_idle - s0.stream_idle);
  }
}

/* A batch put back on a busy stream (its event recorded, pending) is
 * released together by the first query that finds the stream idle; the
 * event goes back to the backend. */
static void test_core_staging_batch_released_together(void **state) {
  fx *f = *state;
  enum { NB = 24 };
  const size_t n = 64 << 10;
  void *batch[NB], *other[NB];
  for (int i = 0; i < NB; i++)
    batch[i] = get(f, n);
  assert_int_equal(aa_backend_host_stream_busy(f->b, S1, true), AA_OK);
  for (int i = 0; i < NB; i++)
    put(f, batch[i], n, S1);
  /* the pool runs dry of everything else: it records an event for the
   * batch and, the stream busy, takes new memory */
  uint64_t e0 = events_recorded(f);
  int taken = 0;
  for (int i = 0; i < NB; i++) {
    other[i] = get(f, n);
    for (int j = 0; j < NB; j++)
      taken += other[i] == batch[j];
  }
  assert_int_equal(taken, 0);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  /* the slab's last blocks may still be free: ask until the lists ran dry */
  void *more[512];
  int nmore = 0;
  while (events_recorded(f) == e0 && nmore < 512) {
    more[nmore] = get(f, n);
    for (int j = 0; j < NB; j++)
      assert_ptr_not_equal(more[nmore], batch[j]);
    nmore++;
  }
  assert_true(events_recorded(f) > e0);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.pending_blocks, NB);
  /* the stream finishes: one query makes the whole batch usable */
  assert_int_equal(aa_backend_host_stream_busy(f->b, S1, false), AA_OK);
  uint64_t q0 = aa_backend_host_stream_queries(f->b), a0 = backend_allocs(f);
  void *back[256];
  int from_batch = 0, nback = 0;
  /* what else is free goes first; then the batch, all of it, before any
   * new memory */
  while (from_batch < NB && nback < 256) {
    back[nback] = get(f, n);
    for (int j = 0; j < NB; j++)
      from_batch += back[nback] == batch[j];
    nback++;
  }
  assert_int_equal(from_batch, NB);
  assert_int_equal(backend_allocs(f), a0);
  assert_int_equal(aa_backend_host_stream_queries(f->b) - q0, 1);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.pending_blocks, 0);
  for (int i = 0; i < nback; i++)
    put(f, back[i], n, AA_STREAM_HOST);
  for (int i = 0; i < NB; i++)
    put(f, other[i], n, AA_STREAM_HOST);
  for (int i = 0; i < nmore; i++)
    put(f, more[i], n, AA_STREAM_HOST);
}

/* While events are held (no stream's work completes), the query never says
 * idle: the held-events path of test_core_stream is unchanged. */
static void test_core_staging_held_events_win(void **state) {
  fx *f = *state;
  const size_t n = (size_t)3 << 20;
  void *p = get(f, n);
  aa_backend_host_hold_events(f->b, true);
  put(f, p, n, S1);
  void *q = get(f, n);
  assert_ptr_not_equal(q, p);
  aa_backend_host_hold_events(f->b, false);
  void *r = get(f, n);
  assert_ptr_equal(r, p);
  put(f, q, n, AA_STREAM_HOST);
  put(f, r, n, AA_STREAM_HOST);
}

/* Threads take and return buffers on their own streams while another
 * thread marks the streams busy and idle: no buffer is ever held by two
 * threads at once (each stamps its buffers and checks the stamp before
 * returning them). Run under TSan by CI. */
enum { NT = 4,
       ITERS = 4000,
       LIVE = 4 };

typedef struct worker {
  fx *f;
  int id;
  aa_stream s;
  int bad;
  _Atomic int *stop;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  void *live[LIVE] = {0};
  size_t sz[LIVE] = {0};
  uint64_t rng = 0x9E3779B97F4A7C15ull * (uint64_t)(w->id + 1);
  for (int i = 0; i < ITERS; i++) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    int k = (int)(rng % LIVE);
    if (live[k]) {
      uint64_t stamp;
      memcpy(&stamp, live[k], sizeof stamp);
      if (stamp != ((uint64_t)w->id << 32 | (uint64_t)k))
        w->bad++;
      if (aa_free(w->f->p, live[k], sz[k], w->s) != AA_OK)
        w->bad++;
      live[k] = NULL;
    }
    sz[k] = SIZES[(rng >> 8) % NSIZES];
    live[k] = aa_alloc(w->f->p, sz[k], AA_STREAM_HOST);
    if (live[k] == NULL) {
      w->bad++;
      continue;
    }
    uint64_t stamp = (uint64_t)w->id << 32 | (uint64_t)k;
    memcpy(live[k], &stamp, sizeof stamp);
  }
  for (int k = 0; k < LIVE; k++) {
    if (live[k])
      (void)aa_free(w->f->p, live[k], sz[k], w->s);
  }
  return NULL;
}

static void *toggle(void *arg) {
  worker *w = arg;
  uint64_t rng = 12345;
  while (!atomic_load(w->stop)) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    aa_stream s = (aa_stream)(uintptr_t)(0x1000 * (1 + rng % NT));
    if (aa_backend_host_stream_busy(w->f->b, s, (rng >> 20) & 1) != AA_OK)
      w->bad++;
  }
  return NULL;
}

static void test_core_staging_threads(void **state) {
  fx *f = *state;
  _Atomic int stop = 0;
  worker ws[NT + 1];
  pthread_t th[NT + 1];
  for (int i = 0; i <= NT; i++) {
    ws[i] = (worker){f, i, (aa_stream)(uintptr_t)(0x1000 * (i + 1)), 0, &stop};
  }
  assert_int_equal(pthread_create(&th[NT], NULL, toggle, &ws[NT]), 0);
  for (int i = 0; i < NT; i++)
    assert_int_equal(pthread_create(&th[i], NULL, work, &ws[i]), 0);
  for (int i = 0; i < NT; i++)
    assert_int_equal(pthread_join(th[i], NULL), 0);
  atomic_store(&stop, 1);
  assert_int_equal(pthread_join(th[NT], NULL), 0);
  for (int i = 0; i <= NT; i++)
    assert_int_equal(ws[i].bad, 0);
  for (int i = 0; i < NT; i++)
    assert_int_equal(aa_backend_host_stream_busy(f->b, ws[i].s, false), AA_OK);
  aa_pool_release(f->p); /* polls what is still pending */
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.bytes_in_use, 0);
  assert_true(st.stream_queries > 0);
}

/* The host backend's busy hook: bad backends and too many streams. */
static void test_core_staging_busy_hook_limits(void **state) {
  fx *f = *state;
  for (uintptr_t i = 1; i <= 8; i++)
    assert_int_equal(aa_backend_host_stream_busy(f->b, (aa_stream)(i << 12), true), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(f->b, (aa_stream)(uintptr_t)(9 << 12), true),
                   AA_ELIMIT);
  assert_int_equal(aa_backend_host_stream_busy(f->b, (aa_stream)(uintptr_t)(1 << 12), true), AA_OK);
  for (uintptr_t i = 1; i <= 8; i++)
    assert_int_equal(aa_backend_host_stream_busy(f->b, (aa_stream)(i << 12), false), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(NULL, S1, true), AA_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_core_staging_busy_stream_blocks_reuse, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_staging_idle_loop_needs_no_event, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_staging_batch_released_together, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_staging_held_events_win, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_staging_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_staging_busy_hook_limits, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
