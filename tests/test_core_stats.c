/*
 * test_core_stats.c — snapshots and telemetry: per-class numbers, the
 * request histogram and heavy hitters (also from exited threads, and with
 * more distinct sizes than a thread's size table holds, from live threads),
 * a snapshot's merge holding no lock an allocation takes, telemetry
 * switched off at run time, the trace callback, and aa_pool_stats_json
 * (valid JSON, escaped name, snprintf-style truncation).
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "adaptalloc/core.h"
#include "core_test.h" /* core: the snapshot's merge hook */

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
} fx;

static int setup_named(void **state, const char *name) {
  fx *f = calloc(1, sizeof *f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  cfg.name = name;
  assert_int_equal(aa_pool_new(&cfg, &f->p), AA_OK);
  *state = f;
  return 0;
}
static int setup(void **state) { return setup_named(state, "stats"); }

static int teardown(void **state) {
  fx *f = *state;
  aa_pool_destroy(f->p);
  aa_backend_destroy(f->b);
  free(f);
  return 0;
}

static uint64_t hist_total(const aa_pool_stats *st) {
  uint64_t t = 0;
  for (int i = 0; i < AA_HIST_BUCKETS; i++)
    t += st->hist[i];
  return t;
}

static void test_core_stats_header_and_classes(void **state) {
  fx *f = *state;
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.version, AA_STATS_VERSION);
  assert_int_equal(st.size, sizeof st);
  assert_string_equal(st.name, "stats");
  assert_string_equal(st.backend, "host");
  assert_int_equal(st.device, -1);
  assert_int_equal(st.telemetry, 1);
  assert_true(st.time_ns > 0);
  assert_true(st.class_count > 20);
  void *v[10];
  for (int i = 0; i < 10; i++)
    v[i] = aa_alloc(f->p, 700, NULL);
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  const aa_class_stats *c = NULL;
  for (uint32_t i = 0; i < st.class_count; i++)
    if (st.classes[i].block_size == 1024)
      c = &st.classes[i];
  assert_non_null(c);
  assert_int_equal(c->allocs, 10);
  assert_int_equal(c->blocks_in_use, 10);
  assert_int_equal(c->bytes_in_use, 10240);
  assert_int_equal(c->bytes_requested, 7000);
  assert_int_equal(c->slabs, 1);
  assert_int_equal(c->bytes_reserved, 2u << 20);
  assert_int_equal(c->blocks_free, 2048 - 10);
  assert_int_equal(c->misses, 1);
  assert_int_equal(c->hits, 9);
  assert_int_equal(st.bytes_in_use, 10240);
  assert_int_equal(st.backend_allocs, 1);
  for (int i = 0; i < 10; i++)
    aa_free(f->p, v[i], 700, NULL);
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  for (uint32_t i = 0; i < st.class_count; i++)
    if (st.classes[i].block_size == 1024)
      c = &st.classes[i];
  assert_int_equal(c->frees, 10);
  assert_int_equal(c->blocks_in_use, 0);
  assert_int_equal(c->peak_bytes_in_use >= 10240, 1);
  assert_int_equal(aa_pool_stats_get(NULL, &st), AA_EINVAL);
  assert_int_equal(aa_pool_stats_get(f->p, NULL), AA_EINVAL);
}

static void test_core_stats_hist_and_hh(void **state) {
  fx *f = *state;
  for (int i = 0; i < 1000; i++)
    aa_free(f->p, aa_alloc(f->p, 777, NULL), 777, NULL);
  for (int i = 0; i < 500; i++) {
    void *a = aa_alloc(f->p, 1234, NULL);
    void *b = aa_alloc(f->p, 100, NULL);
    aa_free(f->p, a, 0, NULL);
    aa_free(f->p, b, 0, NULL);
  }
  void *l = aa_alloc(f->p, 3u << 20, NULL);
  aa_free(f->p, l, 0, NULL);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(hist_total(&st), 2001);
  assert_int_equal(st.hist[aa_hist_bucket(777)], 1000);
  assert_int_equal(st.hist[aa_hist_bucket(1234)], 500);
  assert_int_equal(st.hist[aa_hist_bucket(3u << 20)], 1);
  assert_true(st.hh_count >= 3);
  assert_int_equal(st.hh[0].size, 777);
  assert_int_equal(st.hh[0].count, 1000);
  /* 1234 and 100 tie at 500: both next */
  assert_int_equal(st.hh[1].count, 500);
  assert_int_equal(st.hh[2].count, 500);
  assert_true(st.hh[1].size == 100 || st.hh[1].size == 1234);
}

/* More distinct sizes than the per-thread size table holds: the histogram
 * stays exact bucket by bucket, and a hot size counted from the start keeps
 * its slot and its exact count. */
static void test_core_stats_many_sizes_exact(void **state) {
  fx *f = *state;
  static uint64_t want[AA_HIST_BUCKETS];
  memset(want, 0, sizeof want);
  const size_t hot = 4000;
  uint64_t total = 0;
#define REQ(sz)                                           \
  do {                                                    \
    size_t s_ = (sz);                                     \
    void *p_ = aa_alloc(f->p, s_, NULL);                  \
    assert_non_null(p_);                                  \
    assert_int_equal(aa_free(f->p, p_, s_, NULL), AA_OK); \
    want[aa_hist_bucket(s_)]++;                           \
    total++;                                              \
  } while (0)
  for (int i = 0; i < 10; i++)
    REQ(hot);
  for (size_t s = 1; s <= 20000; s++) {
    if (s != hot)
      REQ(s);
    REQ(hot);
  }
  for (size_t s = 1; s <= 3000; s++) {
    if (s != hot)
      REQ(s);
  }
#undef REQ
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(hist_total(&st), total);
  for (int i = 0; i < AA_HIST_BUCKETS; i++)
    assert_int_equal(st.hist[i], want[i]);
  assert_true(st.hh_count >= 1);
  assert_int_equal(st.hh[0].size, hot);
  assert_int_equal(st.hh[0].count, 20010);
}

static void *hist_thread(void *arg) {
  aa_pool *p = arg;
  for (int i = 0; i < 300; i++)
    aa_free(p, aa_alloc(p, 4321, NULL), 0, NULL);
  return NULL;
}

static void test_core_stats_dead_threads_fold(void **state) {
  fx *f = *state;
  pthread_t t[3];
  for (int i = 0; i < 3; i++)
    pthread_create(&t[i], NULL, hist_thread, f->p);
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.allocs, 900);
  assert_int_equal(st.frees, 900);
  assert_int_equal(st.hist[aa_hist_bucket(4321)], 900);
  assert_int_equal(st.hh[0].size, 4321);
  assert_int_equal(st.hh[0].count, 900);
}

/* Threads alive while the snapshot is taken: each one's histogram, size
 * table and heavy hitters are counted (copied under the thread-list lock,
 * merged after it). */
enum { LIVE_THREADS = 5 };
typedef struct live_arg {
  aa_pool *p;
  size_t own;
  pthread_barrier_t *counted, *snapped;
} live_arg;

static void *live_thread(void *arg) {
  live_arg *a = arg;
  for (int i = 0; i < 300; i++)
    aa_free(a->p, aa_alloc(a->p, 4321, NULL), 0, NULL);
  for (int i = 0; i < 200; i++)
    aa_free(a->p, aa_alloc(a->p, a->own, NULL), 0, NULL);
  pthread_barrier_wait(a->counted);
  pthread_barrier_wait(a->snapped); /* alive until the snapshot is taken */
  return NULL;
}

static void test_core_stats_live_threads_hh(void **state) {
  fx *f = *state;
  pthread_barrier_t counted, snapped;
  pthread_t t[LIVE_THREADS];
  live_arg a[LIVE_THREADS];
  pthread_barrier_init(&counted, NULL, LIVE_THREADS + 1);
  pthread_barrier_init(&snapped, NULL, LIVE_THREADS + 1);
  for (int i = 0; i < LIVE_THREADS; i++) {
    a[i] = (live_arg){f->p, 9000 + 8 * (size_t)i, &counted, &snapped};
    assert_int_equal(pthread_create(&t[i], NULL, live_thread, &a[i]), 0);
  }
  pthread_barrier_wait(&counted);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  pthread_barrier_wait(&snapped);
  for (int i = 0; i < LIVE_THREADS; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&counted);
  pthread_barrier_destroy(&snapped);

  assert_int_equal(hist_total(&st), LIVE_THREADS * 500);
  assert_int_equal(st.hist[aa_hist_bucket(4321)], LIVE_THREADS * 300);
  assert_int_equal(st.hh_count, 1 + LIVE_THREADS);
  assert_int_equal(st.hh[0].size, 4321);
  assert_int_equal(st.hh[0].count, LIVE_THREADS * 300);
  for (int i = 1; i <= LIVE_THREADS; i++) {
    assert_int_equal(st.hh[i].count, 200);
    /* ties sort by size */
    assert_int_equal(st.hh[i].size, 9000 + 8 * (size_t)(i - 1));
  }
}

/* A snapshot without sizes (AA_STATS_NO_SIZES) agrees with the full one on
 * every field but the histogram and the heavy hitters, which it leaves
 * zero; here with live threads holding blocks of small and large sizes in
 * their caches and in use, and a dead thread's folded totals. */
enum { LIGHT_THREADS = 4 };
typedef struct light_arg {
  aa_pool *p;
  size_t own;
  void *held[64];
  pthread_barrier_t *counted, *snapped;
} light_arg;

static void *light_thread(void *arg) {
  light_arg *a = arg;
  for (int i = 0; i < 200; i++)
    aa_free(a->p, aa_alloc(a->p, 700 + (size_t)i * 3, NULL), 0, NULL);
  for (int i = 0; i < 64; i++) /* checked on the test's thread */
    a->held[i] = aa_alloc(a->p, i % 8 == 0 ? (size_t)3 << 20 : a->own + (size_t)i, NULL);
  if (a->counted == NULL)
    return NULL; /* the dead thread: its blocks stay in use, freed later */
  pthread_barrier_wait(a->counted);
  pthread_barrier_wait(a->snapped); /* alive until both snapshots are taken */
  for (int i = 0; i < 64; i++)
    aa_free(a->p, a->held[i], 0, NULL);
  return NULL;
}

static void test_core_stats_light_agrees(void **state) {
  fx *f = *state;
  pthread_barrier_t counted, snapped;
  pthread_t t[LIGHT_THREADS], dead;
  light_arg a[LIGHT_THREADS], d;
  aa_pool_stats *full = calloc(1, sizeof *full);
  aa_pool_stats *light = calloc(1, sizeof *light);
  assert_non_null(full);
  assert_non_null(light);

  d = (light_arg){.p = f->p, .own = 50000};
  assert_int_equal(pthread_create(&dead, NULL, light_thread, &d), 0);
  pthread_join(dead, NULL);
  for (int j = 0; j < 64; j++)
    assert_non_null(d.held[j]);
  pthread_barrier_init(&counted, NULL, LIGHT_THREADS + 1);
  pthread_barrier_init(&snapped, NULL, LIGHT_THREADS + 1);
  for (int i = 0; i < LIGHT_THREADS; i++) {
    a[i] = (light_arg){.p = f->p, .own = 2000 + 100 * (size_t)i, .counted = &counted, .snapped = &snapped};
    assert_int_equal(pthread_create(&t[i], NULL, light_thread, &a[i]), 0);
  }
  pthread_barrier_wait(&counted);
  int got_full = aa_pool_stats_get(f->p, full);
  int got_light = aa_pool_stats_get_opts(f->p, light, AA_STATS_NO_SIZES);
  bool all_held = true;
  for (int i = 0; i < LIGHT_THREADS; i++)
    for (int j = 0; j < 64; j++)
      all_held = all_held && a[i].held[j] != NULL;
  pthread_barrier_wait(&snapped);
  for (int i = 0; i < LIGHT_THREADS; i++)
    pthread_join(t[i], NULL);
  pthread_barrier_destroy(&counted);
  pthread_barrier_destroy(&snapped);
  assert_true(all_held);
  assert_int_equal(got_full, AA_OK);
  assert_int_equal(got_light, AA_OK);

  /* the full one has sizes; the light one none */
  assert_int_equal(hist_total(full), (LIGHT_THREADS + 1) * (200 + 64));
  assert_true(full->hh_count > 0);
  assert_int_equal(hist_total(light), 0);
  assert_int_equal(light->hh_count, 0);
  for (int i = 0; i < AA_HH_MAX; i++) {
    assert_int_equal(light->hh[i].size, 0);
    assert_int_equal(light->hh[i].count, 0);
  }
  /* everything else, byte for byte (the time apart) */
  assert_true(light->time_ns >= full->time_ns);
  assert_true(light->allocs > 0 && light->large_allocs > 0 && light->class_count > 0);
  full->time_ns = light->time_ns = 0;
  memset(full->hist, 0, sizeof full->hist);
  memset(full->hh, 0, sizeof full->hh);
  full->hh_count = 0;
  assert_memory_equal(full, light, sizeof *full);

  /* the dead thread's blocks */
  for (int i = 0; i < 64; i++)
    aa_free(f->p, d.held[i], 0, NULL);
  /* option bits it does not know are refused, the snapshot zeroed */
  memset(light, 0xab, sizeof *light);
  assert_int_equal(aa_pool_stats_get_opts(f->p, light, 2), AA_EINVAL);
  assert_int_equal(light->version, 0);
  assert_int_equal(aa_pool_stats_get_opts(NULL, light, 0), AA_EINVAL);
  assert_int_equal(aa_pool_stats_get_opts(f->p, NULL, AA_STATS_NO_SIZES), AA_EINVAL);
  free(full);
  free(light);
}

/* The allocator never waits for a snapshot's merge: while a reader is
 * inside it (the hook holds it there), this thread's large request, which
 * takes the large path's lock and, growing the pool, the thread-list lock,
 * and a new thread's first request, which registers its cache, complete.
 * Before the merge ran under both locks: the request then waited until the
 * hook gave up (hook_timeout_s) and the test fails. */
typedef struct merge_wait {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool in_merge, done, saw_done;
  int calls;
} merge_wait;

static const int hook_timeout_s = 5;

static void on_merge(void *user) {
  merge_wait *w = user;
  struct timespec until;
  pthread_mutex_lock(&w->mu);
  w->calls++;
  w->in_merge = true;
  pthread_cond_broadcast(&w->cv);
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += hook_timeout_s;
  while (!w->done) {
    if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0)
      break;
  }
  w->saw_done = w->done;
  pthread_mutex_unlock(&w->mu);
}

static void *snapshot_thread(void *arg) {
  aa_pool *p = arg;
  aa_pool_stats *st = malloc(sizeof *st);
  if (st != NULL)
    (void)aa_pool_stats_get(p, st);
  free(st);
  return NULL;
}

static void *first_request_thread(void *arg) {
  aa_pool *p = arg;
  void *q = aa_alloc(p, 2048, NULL);
  if (q != NULL)
    aa_free(p, q, 2048, NULL);
  return q;
}

static void test_core_stats_merge_holds_no_lock(void **state) {
  fx *f = *state;
  merge_wait w = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  pthread_t reader, newcomer;
  void *got = NULL;
  struct timespec until;

  for (int i = 0; i < 100; i++) /* something to merge */
    aa_free(f->p, aa_alloc(f->p, 1000 + (size_t)i, NULL), 0, NULL);
  aa_test_stats_merge_hook(on_merge, &w);
  assert_int_equal(pthread_create(&reader, NULL, snapshot_thread, f->p), 0);
  pthread_mutex_lock(&w.mu);
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  while (!w.in_merge && pthread_cond_timedwait(&w.cv, &w.mu, &until) == 0) {
  }
  bool in_merge = w.in_merge;
  pthread_mutex_unlock(&w.mu);
  assert_true(in_merge);

  /* the reader is in its merge now */
  void *big = aa_alloc(f->p, 8u << 20, NULL); /* large path, grows the pool */
  assert_non_null(big);
  assert_int_equal(aa_free(f->p, big, 8u << 20, NULL), AA_OK);
  assert_int_equal(pthread_create(&newcomer, NULL, first_request_thread, f->p), 0);
  pthread_join(newcomer, &got);
  assert_non_null(got);

  pthread_mutex_lock(&w.mu);
  w.done = true;
  pthread_cond_broadcast(&w.cv);
  pthread_mutex_unlock(&w.mu);
  pthread_join(reader, NULL);
  aa_test_stats_merge_hook(NULL, NULL);
  assert_int_equal(w.calls, 1);
  assert_true(w.saw_done); /* false: the requests waited for the merge */
}

static void test_core_stats_telemetry_off(void **state) {
  fx *f = *state;
  aa_pool_set_telemetry(f->p, false);
  for (int i = 0; i < 100; i++)
    aa_free(f->p, aa_alloc(f->p, 2000, NULL), 0, NULL);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.telemetry, 0);
  assert_int_equal(hist_total(&st), 0);
  assert_int_equal(st.hh_count, 0);
  assert_int_equal(st.allocs, 100); /* plain counters keep counting */
  aa_pool_set_telemetry(f->p, true);
  for (int i = 0; i < 10; i++)
    aa_free(f->p, aa_alloc(f->p, 2000, NULL), 0, NULL);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(hist_total(&st), 10);
}

typedef struct tr {
  int a, f, x, u;
  uint64_t last_ptr, last_size, last_stream;
} tr;

static void on_trace(void *user, const aa_trace_event *ev) {
  tr *t = user;
  if (ev->op == 'a')
    t->a++;
  else if (ev->op == 'f')
    t->f++;
  else if (ev->op == 'x')
    t->x++;
  else if (ev->op == 'u')
    t->u++;
  t->last_ptr = ev->ptr;
  t->last_size = ev->size;
  t->last_stream = ev->stream;
  assert_true(ev->time_ns > 0);
  assert_true(ev->thread != 0);
}

static void test_core_stats_trace(void **state) {
  fx *f = *state;
  tr t;
  memset(&t, 0, sizeof t);
  aa_pool_set_trace(f->p, on_trace, &t);
  void *p = aa_alloc(f->p, 555, (aa_stream)(uintptr_t)7);
  assert_int_equal(t.a, 1);
  assert_int_equal(t.last_ptr, (uint64_t)(uintptr_t)p);
  assert_int_equal(t.last_size, 555);
  aa_free(f->p, p, 555, (aa_stream)(uintptr_t)7);
  assert_int_equal(t.f, 1);
  void *q = aa_alloc(f->p, 555, (aa_stream)(uintptr_t)7);
  aa_free(f->p, q, 0, (aa_stream)(uintptr_t)7);
  void *l = aa_alloc(f->p, 5u << 20, NULL);
  /* a recorded stream use is an event 'u': the block, that stream; a
   * refused one (not a live block) is none */
  assert_int_equal(aa_record_stream(f->p, l, (aa_stream)(uintptr_t)9), AA_OK);
  assert_int_equal(t.u, 1);
  assert_int_equal(t.last_ptr, (uint64_t)(uintptr_t)l);
  assert_int_equal(t.last_size, 0);
  assert_int_equal(t.last_stream, 9);
  assert_int_equal(aa_record_stream(f->p, (char *)l + 64, (aa_stream)(uintptr_t)9), AA_EINVAL);
  assert_int_equal(t.u, 1);
  aa_free(f->p, l, 0, NULL);
  assert_int_equal(t.a, 3);
  assert_int_equal(t.f, 3);
  aa_pool_set_limit(f->p, 1);
  assert_null(aa_alloc(f->p, 9u << 20, NULL)); /* more than the cached 6 MiB */
  assert_int_equal(t.x, 1);
  aa_pool_set_limit(f->p, 0);
  /* telemetry off silences the trace */
  aa_pool_set_telemetry(f->p, false);
  aa_free(f->p, aa_alloc(f->p, 555, NULL), 0, NULL);
  assert_int_equal(t.a, 3);
  aa_pool_set_telemetry(f->p, true);
  aa_pool_set_trace(f->p, NULL, NULL);
  aa_free(f->p, aa_alloc(f->p, 555, NULL), 0, NULL);
  assert_int_equal(t.a, 3);
  /* setting it again reuses the record */
  for (int i = 0; i < 100; i++) {
    aa_pool_set_trace(f->p, on_trace, &t);
    aa_pool_set_trace(f->p, NULL, NULL);
  }
}

/* aa_pool_set_trace returns only once callbacks through the record it
 * replaces have returned: the runtime closes the store (the callback's user)
 * right after switching the trace off. Callbacks that dawdle check that
 * their user is still alive; the main thread retires each user as soon as
 * set_trace returns. */
typedef struct live_user {
  _Atomic int alive;
} live_user;

static _Atomic int g_dead_calls, g_stop_tracing;
static _Atomic uint64_t g_traced;

static void on_trace_slow(void *user, const aa_trace_event *ev) {
  live_user *u = user;
  (void)ev;
  if ((atomic_fetch_add(&g_traced, 1) & 7) == 0) {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
  if (atomic_load(&u->alive) != 1)
    atomic_fetch_add(&g_dead_calls, 1);
}

static void *trace_worker(void *arg) {
  aa_pool *p = arg;
  while (!atomic_load(&g_stop_tracing))
    aa_free(p, aa_alloc(p, 700, NULL), 700, NULL);
  return NULL;
}

static void test_core_stats_trace_switch_waits(void **state) {
  fx *f = *state;
  /* ROUNDS switches at least; more, up to MAX_ROUNDS, until a worker has
   * been traced at all (on a loaded machine the workers may not run inside
   * the first 200 windows of 0.1 ms). */
  enum { WORKERS = 3,
         ROUNDS = 200,
         MAX_ROUNDS = 20000 };
  static live_user users[MAX_ROUNDS];
  pthread_t th[WORKERS];
  atomic_store(&g_stop_tracing, 0);
  atomic_store(&g_dead_calls, 0);
  for (int i = 0; i < WORKERS; i++)
    assert_int_equal(pthread_create(&th[i], NULL, trace_worker, f->p), 0);
  for (int r = 0; r < MAX_ROUNDS && (r < ROUNDS || atomic_load(&g_traced) == 0); r++) {
    atomic_store(&users[r].alive, 1);
    aa_pool_set_trace(f->p, on_trace_slow, &users[r]);
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
    aa_pool_set_trace(f->p, NULL, NULL);
    atomic_store(&users[r].alive, 0); /* what closing the store amounts to */
  }
  atomic_store(&g_stop_tracing, 1);
  for (int i = 0; i < WORKERS; i++)
    pthread_join(th[i], NULL);
  assert_true(atomic_load(&g_traced) > 0);
  assert_int_equal(atomic_load(&g_dead_calls), 0);
}

/* The two hit rates: a small-path hit rate over the small allocations, and
 * an overall one over every allocation in which a large allocation that
 * called the backend (a new segment, page maps) is a miss and one served
 * from memory the pool held is a hit (docs/stats.md). */
static void test_core_stats_hit_rates(void **state) {
  fx *f = *state;
  aa_pool_stats st;
  char buf[65536];
  void *l;
  int i;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.large_misses, 0);
  assert_int_equal(aa_pool_stats_json(&st, buf, sizeof buf) < sizeof buf, 1);
  assert_non_null(strstr(buf, "\"small_hit_rate\":null,\"overall_hit_rate\":null"));
  l = aa_alloc(f->p, 3u << 20, NULL); /* the first: the backend is called */
  assert_non_null(l);
  assert_int_equal(aa_free(f->p, l, 0, NULL), AA_OK);
  for (i = 0; i < 3; i++) { /* the same size again: served from the pool */
    l = aa_alloc(f->p, 3u << 20, NULL);
    assert_non_null(l);
    assert_int_equal(aa_free(f->p, l, 0, NULL), AA_OK);
  }
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.large_allocs, 4);
  assert_int_equal(st.large_misses, 1);
  assert_int_equal(st.cache_hits + st.cache_misses, 0);
  assert_int_equal(aa_pool_stats_json(&st, buf, sizeof buf) < sizeof buf, 1);
  assert_non_null(strstr(buf, "\"large_misses\":1,"));
  assert_non_null(strstr(buf, "\"small_hit_rate\":null,\"overall_hit_rate\":0.750000"));
  /* small allocations: one miss (a new slab), three hits */
  for (i = 0; i < 4; i++) {
    void *s = aa_alloc(f->p, 1000, NULL);
    assert_non_null(s);
    assert_int_equal(aa_free(f->p, s, 0, NULL), AA_OK);
  }
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.cache_misses, 1);
  assert_int_equal(st.cache_hits, 3);
  assert_int_equal(aa_pool_stats_json(&st, buf, sizeof buf) < sizeof buf, 1);
  /* small: 3 of 4; overall: 8 allocations, 2 misses */
  assert_non_null(strstr(buf, "\"small_hit_rate\":0.750000,\"overall_hit_rate\":0.750000"));
  l = aa_alloc(f->p, 9u << 20, NULL); /* larger than anything held: a miss */
  assert_non_null(l);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.large_misses, 2);
  assert_int_equal(aa_free(f->p, l, 0, NULL), AA_OK);
}

static void test_core_stats_json_valid(void **state) {
  fx *f = *state;
  void *a = aa_alloc(f->p, 1000, NULL);
  void *l = aa_alloc(f->p, 3u << 20, NULL);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  size_t need = aa_pool_stats_json(&st, NULL, 0);
  assert_true(need > 100);
  char *buf = malloc(need + 1);
  assert_int_equal(aa_pool_stats_json(&st, buf, need + 1), need);
  assert_int_equal(strlen(buf), need);
  cJSON *j = cJSON_Parse(buf);
  assert_non_null(j);
  assert_string_equal(cJSON_GetObjectItem(j, "name")->valuestring, "stats");
  assert_string_equal(cJSON_GetObjectItem(j, "backend")->valuestring, "host");
  assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "telemetry")));
  assert_int_equal(cJSON_GetObjectItem(j, "allocs")->valuedouble, 2);
  assert_int_equal(cJSON_GetObjectItem(j, "large_allocs")->valuedouble, 1);
  assert_int_equal(cJSON_GetObjectItem(j, "bytes_in_use")->valuedouble, (double)st.bytes_in_use);
  static const char *keys[] = {"version", "device", "time_ns", "class_table_version",
                               "bytes_requested", "bytes_reserved", "peak_bytes_in_use",
                               "peak_bytes_reserved", "limit_bytes", "frees", "cache_hits",
                               "cache_misses", "backend_allocs", "backend_frees",
                               "backend_failures", "ooms", "oom_retries", "invalid_frees",
                               "pending_blocks", "large_bytes_in_use", "large_bytes_reserved",
                               "large_segments", "class_count"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    assert_true(cJSON_IsNumber(cJSON_GetObjectItem(j, keys[i])));
  cJSON *classes = cJSON_GetObjectItem(j, "classes");
  assert_true(cJSON_IsArray(classes));
  assert_int_equal(cJSON_GetArraySize(classes), st.class_count);
  cJSON *c0 = cJSON_GetArrayItem(classes, 0);
  assert_int_equal(cJSON_GetObjectItem(c0, "block_size")->valuedouble, 512);
  assert_true(cJSON_IsBool(cJSON_GetObjectItem(c0, "retiring")));
  cJSON *hist = cJSON_GetObjectItem(j, "hist");
  assert_int_equal(cJSON_GetArraySize(hist), 2);
  cJSON *h0 = cJSON_GetArrayItem(hist, 0);
  assert_int_equal(cJSON_GetObjectItem(h0, "bucket")->valuedouble, aa_hist_bucket(1000));
  assert_int_equal(cJSON_GetObjectItem(h0, "lower")->valuedouble,
                   aa_hist_bucket_lower(aa_hist_bucket(1000)));
  assert_int_equal(cJSON_GetObjectItem(h0, "count")->valuedouble, 1);
  cJSON *hh = cJSON_GetObjectItem(j, "hh");
  assert_int_equal(cJSON_GetArraySize(hh), 2);
  cJSON_Delete(j);
  /* truncation: like snprintf */
  char small[40];
  memset(small, 'x', sizeof small);
  assert_int_equal(aa_pool_stats_json(&st, small, sizeof small), need);
  assert_int_equal(strlen(small), sizeof small - 1);
  assert_int_equal(strncmp(small, buf, sizeof small - 1), 0);
  char one[1] = {'x'};
  assert_int_equal(aa_pool_stats_json(&st, one, 1), need);
  assert_int_equal(one[0], 0);
  free(buf);
  aa_free(f->p, a, 0, NULL);
  aa_free(f->p, l, 0, NULL);
}

static int setup_odd(void **state) { return setup_named(state, "we\"ird\\na\nme\t\x01"); }

static void test_core_stats_json_escapes_name(void **state) {
  fx *f = *state;
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  char buf[65536];
  size_t n = aa_pool_stats_json(&st, buf, sizeof buf);
  assert_true(n < sizeof buf);
  cJSON *j = cJSON_Parse(buf);
  assert_non_null(j);
  assert_string_equal(cJSON_GetObjectItem(j, "name")->valuestring, "we\"ird\\na\nme\t\x01");
  cJSON_Delete(j);
  /* a name longer than the field is cut, still valid */
  aa_pool_stats st2 = st;
  memset(st2.name, 'n', sizeof st2.name); /* no NUL at all */
  n = aa_pool_stats_json(&st2, buf, sizeof buf);
  j = cJSON_Parse(buf);
  assert_non_null(j);
  assert_int_equal(strlen(cJSON_GetObjectItem(j, "name")->valuestring), sizeof st2.name);
  cJSON_Delete(j);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_core_stats_header_and_classes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_hist_and_hh, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_many_sizes_exact, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_dead_threads_fold, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_live_threads_hh, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_light_agrees, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_merge_holds_no_lock, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_telemetry_off, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_trace, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_trace_switch_waits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_hit_rates, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_json_valid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stats_json_escapes_name, setup_odd, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
