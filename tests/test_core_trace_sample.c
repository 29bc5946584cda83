/*
 * test_core_trace_sample.c — sampled tracing (aa_pool_set_trace_sampled,
 * core/src/telemetry.c): one in N allocations, sizes above a threshold, a
 * sampled block's free, uses and frames traced exactly when its allocation
 * was, across threads, the table's bound, and frames ('c' events).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
} fx;

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  cfg.name = "sample";
  assert_int_equal(aa_pool_new(&cfg, &f->p), AA_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  aa_pool_destroy(f->p);
  aa_backend_destroy(f->b);
  free(f);
  return 0;
}

/* The events, kept (a mutex: several threads deliver). */
#define MAXEV 400000
typedef struct rec {
  pthread_mutex_t mu;
  size_t n;
  aa_trace_event ev[MAXEV];
} rec;

static void on_trace(void *user, const aa_trace_event *ev) {
  rec *r = user;
  pthread_mutex_lock(&r->mu);
  if (r->n < MAXEV)
    r->ev[r->n++] = *ev;
  pthread_mutex_unlock(&r->mu);
}

static rec *rec_new(void) {
  rec *r = calloc(1, sizeof *r);
  assert_non_null(r);
  pthread_mutex_init(&r->mu, NULL);
  return r;
}

static void rec_free(rec *r) {
  pthread_mutex_destroy(&r->mu);
  free(r);
}

static size_t count_op(const rec *r, char op) {
  size_t n = 0;
  for (size_t i = 0; i < r->n; i++)
    n += r->ev[i].op == op;
  return n;
}

static int by_seq(const void *a, const void *b) {
  const aa_trace_event *x = a, *y = b;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Every free follows an allocation of its address, every allocation is
 * freed at most once: the sample is a consistent trace by itself. Returns
 * the blocks left live. */
static size_t check_consistent(rec *r) {
  qsort(r->ev, r->n, sizeof r->ev[0], by_seq);
  /* a small open set of live addresses */
  size_t cap = 1u << 20, live = 0;
  uint64_t *set = calloc(cap, sizeof *set);
  assert_non_null(set);
  for (size_t i = 0; i < r->n; i++) {
    const aa_trace_event *e = &r->ev[i];
    if (e->op != 'a' && e->op != 'f' && e->op != 'u' && e->op != 'c')
      continue;
    size_t h = (size_t)((e->ptr * 0x9E3779B97F4A7C15ull) >> 40) & (cap - 1);
    while (set[h] != 0 && set[h] != e->ptr && set[h] != 1)
      h = (h + 1) & (cap - 1);
    if (e->op == 'a') {
      size_t j = h;
      while (set[j] != 0 && set[j] != e->ptr) /* not live twice */
        j = (j + 1) & (cap - 1);
      assert_int_not_equal(set[j], e->ptr);
      set[h] = e->ptr;
      live++;
      continue;
    }
    size_t j = h;
    while (set[j] != 0 && set[j] != e->ptr)
      j = (j + 1) & (cap - 1);
    assert_int_equal(set[j], e->ptr); /* 'f', 'u', 'c' of a traced block */
    if (e->op == 'f') {
      set[j] = 1;
      live--;
    }
  }
  free(set);
  return live;
}

static void test_core_trace_sample_one_in_n(void **state) {
  fx *f = *state;
  rec *r = rec_new();
  assert_int_equal(aa_pool_set_trace_sampled(f->p, on_trace, r, 100, 0), AA_OK);
  for (int i = 0; i < 100000; i++) {
    void *p = aa_alloc(f->p, 64 + (size_t)(i % 7) * 100, NULL);
    assert_non_null(p);
    assert_int_equal(aa_free(f->p, p, 0, NULL), AA_OK);
  }
  aa_pool_set_trace(f->p, NULL, NULL);
  size_t a = count_op(r, 'a');
  /* 1000 expected; the countdown's spread keeps it well within 25% */
  assert_true(a > 750 && a < 1250);
  assert_int_equal(count_op(r, 'f'), a);
  uint64_t traced, skipped, live, full;
  aa_pool_trace_sample_counts(f->p, &traced, &skipped, &live, &full);
  assert_int_equal(traced, a);
  assert_int_equal(traced + skipped, 100000);
  assert_int_equal(live, 0);
  assert_int_equal(full, 0);
  assert_int_equal(check_consistent(r), 0);
  rec_free(r);
}

/* A loop of exactly N allocations is not always sampled at the same place
 * (a plain every-Nth counter would only ever see one of its sizes). */
static void test_core_trace_sample_not_phase_locked(void **state) {
  fx *f = *state;
  rec *r = rec_new();
  assert_int_equal(aa_pool_set_trace_sampled(f->p, on_trace, r, 8, 0), AA_OK);
  for (int i = 0; i < 8000; i++) {
    void *p = aa_alloc(f->p, 512 * (size_t)(1 + i % 8), NULL);
    aa_free(f->p, p, 0, NULL);
  }
  aa_pool_set_trace(f->p, NULL, NULL);
  int seen[8] = {0};
  for (size_t i = 0; i < r->n; i++)
    if (r->ev[i].op == 'a')
      seen[r->ev[i].size / 512 - 1] = 1;
  for (int k = 0; k < 8; k++)
    assert_int_equal(seen[k], 1);
  rec_free(r);
}

static void test_core_trace_sample_min_bytes(void **state) {
  fx *f = *state;
  rec *r = rec_new();
  /* sizes only: every 0 */
  assert_int_equal(aa_pool_set_trace_sampled(f->p, on_trace, r, 0, 1 << 20), AA_OK);
  void *big[4], *small[50];
  for (int i = 0; i < 4; i++)
    big[i] = aa_alloc(f->p, (size_t)(1 << 20) + (size_t)i * 4096, NULL);
  for (int i = 0; i < 50; i++)
    small[i] = aa_alloc(f->p, 1000, NULL);
  assert_true(aa_pool_trace_wants(f->p, big[0]));
  assert_false(aa_pool_trace_wants(f->p, small[0]));
  for (int i = 0; i < 4; i++)
    aa_free(f->p, big[i], 0, NULL);
  for (int i = 0; i < 50; i++)
    aa_free(f->p, small[i], 0, NULL);
  /* a failed allocation of a sampled size is traced, others not */
  assert_null(aa_alloc(f->p, (size_t)1 << 62, NULL));
  aa_pool_set_trace(f->p, NULL, NULL);
  assert_int_equal(count_op(r, 'a'), 4);
  assert_int_equal(count_op(r, 'f'), 4);
  assert_int_equal(count_op(r, 'x'), 1);
  for (size_t i = 0; i < r->n; i++)
    if (r->ev[i].op == 'a')
      assert_true(r->ev[i].size >= (1u << 20));
  rec_free(r);
}

/* Blocks allocated before sampling began are not in it: their frees are
 * not traced; every 1 with no threshold traces everything again. */
static void test_core_trace_sample_starts_clean(void **state) {
  fx *f = *state;
  rec *r = rec_new();
  void *before = aa_alloc(f->p, 3 << 20, NULL);
  assert_int_equal(aa_pool_set_trace_sampled(f->p, on_trace, r, 0, 1), AA_OK);
  void *after = aa_alloc(f->p, 3 << 20, NULL);
  aa_free(f->p, before, 0, NULL);
  aa_free(f->p, after, 0, NULL);
  assert_int_equal(count_op(r, 'a'), 1);
  assert_int_equal(count_op(r, 'f'), 1);
  assert_int_equal(check_consistent(r), 0);
  r->n = 0;
  assert_int_equal(aa_pool_set_trace_sampled(f->p, on_trace, r, 1, 0), AA_OK);
  void *p = aa_alloc(f->p, 100, NULL);
  aa_free(f->p, p, 0, NULL);
  aa_pool_set_trace(f->p, NULL, NULL);
  assert_int_equal(count_op(r, 'a'), 1);
  assert_int_equal(count_op(r, 'f'), 1);
  rec_free(r);
}

/* Frames: a 'c' event for a traced block only, numbered between its
 * allocation and its free. */
static void test_core_trace_sample_frames(void **state) {
  fx *f = *state;
  rec *r = rec_new();
  assert_int_equal(aa_pool_set_trace_sampled(f->p, on_trace, r, 0, 4096), AA_OK);
  void *a = aa_alloc(f->p, 8192, NULL), *b = aa_alloc(f->p, 100, NULL);
  assert_int_equal(aa_pool_trace_frame(f->p, a, 7), AA_OK);
  assert_int_equal(aa_pool_trace_frame(f->p, b, 8), AA_ENOENT);
  assert_int_equal(aa_pool_trace_frame(f->p, a, 0), AA_EINVAL);
  assert_int_equal(aa_pool_trace_frame(NULL, a, 1), AA_EINVAL);
  /* the id is kept beside the block while it lives, and goes with it */
  assert_int_equal(aa_pool_trace_frame_of(f->p, a), 7);
  assert_int_equal(aa_pool_trace_frame_of(f->p, b), 0);
  assert_int_equal(aa_pool_trace_frame_of(NULL, a), 0);
  aa_free(f->p, a, 0, NULL);
  assert_int_equal(aa_pool_trace_frame_of(f->p, a), 0);
  aa_free(f->p, b, 0, NULL);
  void *again = aa_alloc(f->p, 8192, NULL); /* traced again, no frame yet */
  assert_true(aa_pool_trace_wants(f->p, again));
  assert_int_equal(aa_pool_trace_frame_of(f->p, again), 0);
  aa_free(f->p, again, 0, NULL);
  aa_pool_set_trace(f->p, NULL, NULL);
  assert_int_equal(count_op(r, 'c'), 1);
  qsort(r->ev, r->n, sizeof r->ev[0], by_seq);
  assert_int_equal(r->n, 5);
  assert_int_equal(r->ev[0].op, 'a');
  assert_int_equal(r->ev[1].op, 'c');
  assert_int_equal(r->ev[1].frame, 7);
  assert_int_equal(r->ev[1].ptr, (uint64_t)(uintptr_t)a);
  assert_int_equal(r->ev[2].op, 'f');
  /* no trace at all: nothing wanted */
  void *c = aa_alloc(f->p, 8192, NULL);
  assert_false(aa_pool_trace_wants(f->p, c));
  assert_int_equal(aa_pool_trace_frame(f->p, c, 9), AA_ENOENT);
  aa_free(f->p, c, 0, NULL);
  rec_free(r);
}

/* More live sampled blocks than the table holds: the rest is not traced,
 * counted, and what is traced stays consistent. */
static void test_core_trace_sample_table_full(void **state) {
  fx *f = *state;
  rec *r = rec_new();
  enum { N = AA_TRACE_SAMPLE_SLOTS + 20000 };
  void **v = calloc(N, sizeof *v);
  assert_non_null(v);
  assert_int_equal(aa_pool_set_trace_sampled(f->p, on_trace, r, 0, 1), AA_OK);
  for (size_t i = 0; i < N; i++)
    v[i] = aa_alloc(f->p, 512, NULL);
  uint64_t traced, live, full;
  aa_pool_trace_sample_counts(f->p, &traced, NULL, &live, &full);
  assert_true(full >= 20000);
  assert_int_equal(traced + full, N);
  assert_int_equal(live, traced);
  for (size_t i = 0; i < N; i++)
    aa_free(f->p, v[i], 0, NULL);
  aa_pool_trace_sample_counts(f->p, NULL, NULL, &live, NULL);
  assert_int_equal(live, 0);
  aa_pool_set_trace(f->p, NULL, NULL);
  assert_int_equal(count_op(r, 'f'), traced);
  assert_int_equal(check_consistent(r), 0);
  free(v);
  rec_free(r);
}

/* Blocks allocated on one thread and freed on another, with the pool's
 * caches moving blocks between threads: every traced free matches a traced
 * allocation, in sequence order. */
typedef struct xq {
  pthread_mutex_t mu;
  void *slot[256];
  size_t n;
  int done;
} xq;

typedef struct targ {
  fx *f;
  xq *q;
  int id;
} targ;

/* a frame id that names its block, so a stale one would show */
static uint64_t frame_for(const void *p) { return (((uintptr_t)p >> 4) & 0x7fffffffu) | 1u; }

static void *producer(void *arg) {
  targ *t = arg;
  for (int i = 0; i < 40000; i++) {
    void *p = aa_alloc(t->f->p, 256 + (size_t)((i * 37 + t->id) % 16) * 512, NULL);
    assert_non_null(p);
    if (aa_pool_trace_wants(t->f->p, p))
      assert_int_equal(aa_pool_trace_frame(t->f->p, p, frame_for(p)), AA_OK);
    if (i % 2 == 0) {
      aa_free(t->f->p, p, 0, NULL);
      continue;
    }
    for (;;) {
      pthread_mutex_lock(&t->q->mu);
      if (t->q->n < 256) {
        t->q->slot[t->q->n++] = p;
        pthread_mutex_unlock(&t->q->mu);
        break;
      }
      pthread_mutex_unlock(&t->q->mu);
    }
  }
  return NULL;
}

static void *consumer(void *arg) {
  targ *t = arg;
  for (;;) {
    void *p = NULL;
    int done;
    pthread_mutex_lock(&t->q->mu);
    if (t->q->n > 0)
      p = t->q->slot[--t->q->n];
    done = t->q->done;
    pthread_mutex_unlock(&t->q->mu);
    if (p != NULL) {
      /* the producer's frame, or none (not sampled): never another block's */
      uint64_t fr = aa_pool_trace_frame_of(t->f->p, p);
      assert_true(fr == 0 || fr == frame_for(p));
      aa_free(t->f->p, p, 0, NULL);
    } else if (done)
      return NULL;
  }
}

static void test_core_trace_sample_threads(void **state) {
  fx *f = *state;
  rec *r = rec_new();
  xq q;
  memset(&q, 0, sizeof q);
  pthread_mutex_init(&q.mu, NULL);
  assert_int_equal(aa_pool_set_trace_sampled(f->p, on_trace, r, 5, 6000), AA_OK);
  pthread_t pr[3], co[2];
  targ ta[5];
  for (int i = 0; i < 3; i++) {
    ta[i] = (targ){f, &q, i};
    pthread_create(&pr[i], NULL, producer, &ta[i]);
  }
  for (int i = 0; i < 2; i++) {
    ta[3 + i] = (targ){f, &q, 3 + i};
    pthread_create(&co[i], NULL, consumer, &ta[3 + i]);
  }
  for (int i = 0; i < 3; i++)
    pthread_join(pr[i], NULL);
  pthread_mutex_lock(&q.mu);
  q.done = 1;
  pthread_mutex_unlock(&q.mu);
  for (int i = 0; i < 2; i++)
    pthread_join(co[i], NULL);
  aa_pool_set_trace(f->p, NULL, NULL);
  assert_true(count_op(r, 'a') > 120000 / 5 / 2);
  assert_int_equal(count_op(r, 'a'), count_op(r, 'f'));
  assert_int_equal(check_consistent(r), 0);
  pthread_mutex_destroy(&q.mu);
  rec_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_core_trace_sample_one_in_n, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_trace_sample_not_phase_locked, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_trace_sample_min_bytes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_trace_sample_starts_clean, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_trace_sample_frames, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_trace_sample_table_full, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_trace_sample_threads, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
