/*
 * test_store_trace_order.c — a trace recorded through the store from a host
 * pool shared by several threads is true: read back, every free of an
 * address comes before the next allocation of it (no allocate of a live
 * pointer, no free of a dead one), and the replay simulator accepts it with
 * AA_REPLAY_STOP. Threads hand blocks to each other so that one thread's
 * free is followed at once by another's allocation of the same block; the
 * order the threads reach the store's ring is not the order of their
 * operations, the core's sequence numbers are.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "adaptalloc/core.h"
#include "adaptalloc/replay.h"
#include "adaptalloc/store.h"

static char g_dir[256];

static int setup_dir(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/aa-trace-order-XXXXXX");
  return mkdtemp(g_dir) != NULL ? 0 : -1;
}

static int teardown_dir(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

#define THREADS 6
#define ITERS 30000
#define SLOTS 16

typedef struct shared {
  aa_pool *pool;
  _Atomic(void *) slot[SLOTS];
  _Atomic int free_errors;
} shared;

typedef struct worker {
  shared *sh;
  unsigned seed;
} worker;

static size_t pick_size(unsigned *seed) {
  unsigned r = (unsigned)rand_r(seed);
  /* mostly large blocks, which threads reuse from each other at once (the
   * large free list and its per-thread cache), some small ones */
  switch (r % 4) {
  case 0:
    return 512u + (r >> 4) % 8192u;
  case 1:
    return (1u << 20) + ((r >> 4) % 4u) * (256u << 10);
  default:
    return 3u << 20;
  }
}

/* Each thread allocates, swaps its block into a random shared slot and frees
 * what it took out: most frees are of another thread's block. */
static void *worker_main(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  for (int i = 0; i < ITERS; i++) {
    size_t size = pick_size(&w->seed);
    void *p = aa_alloc(sh->pool, size, NULL);
    if (p == NULL)
      continue;
    unsigned k = (unsigned)rand_r(&w->seed) % SLOTS;
    void *old = atomic_exchange(&sh->slot[k], p);
    /* size 0: free by address (the size belongs to whoever put it there) */
    if (old != NULL && aa_free(sh->pool, old, 0, NULL) != AA_OK)
      atomic_fetch_add(&sh->free_errors, 1);
  }
  return NULL;
}

/* Live addresses, open addressing. */
#define LIVE_CAP (1u << 16)
typedef struct checker {
  uint64_t live[LIVE_CAP];
  uint64_t events, allocs, frees, bad;
  uint64_t last_seq;
  int seq_backwards;
  char first_bad[160];
} checker;

static size_t live_find(checker *c, uint64_t p) {
  size_t h = (size_t)((p >> 9) * 0x9E3779B97F4A7C15ull >> 48) & (LIVE_CAP - 1);
  while (c->live[h] != 0 && c->live[h] != p)
    h = (h + 1) & (LIVE_CAP - 1);
  return h;
}

static void live_erase(checker *c, size_t h) {
  c->live[h] = 0;
  /* re-insert the rest of the cluster */
  for (size_t j = (h + 1) & (LIVE_CAP - 1); c->live[j] != 0; j = (j + 1) & (LIVE_CAP - 1)) {
    uint64_t v = c->live[j];
    c->live[j] = 0;
    c->live[live_find(c, v)] = v;
  }
}

static int check_cb(void *user, const aa_trace_event *ev) {
  checker *c = user;
  c->events++;
  if (ev->seq <= c->last_seq)
    c->seq_backwards++;
  c->last_seq = ev->seq;
  if (ev->op != 'a' && ev->op != 'f')
    return 0;
  size_t h = live_find(c, ev->ptr);
  bool live = c->live[h] == ev->ptr;
  if (ev->op == 'a') {
    c->allocs++;
    if (live) {
      if (c->bad++ == 0)
        snprintf(c->first_bad, sizeof c->first_bad, "event %llu: allocate of live 0x%llx",
                 (unsigned long long)c->events, (unsigned long long)ev->ptr);
    } else {
      c->live[h] = ev->ptr;
    }
  } else {
    c->frees++;
    if (!live) {
      if (c->bad++ == 0)
        snprintf(c->first_bad, sizeof c->first_bad, "event %llu: free of dead 0x%llx",
                 (unsigned long long)c->events, (unsigned long long)ev->ptr);
    } else {
      live_erase(c, h);
    }
  }
  return 0;
}

static int first_ptr_cb(void *user, const aa_trace_event *ev) {
  *(uint64_t *)user = ev->ptr;
  return 1; /* stop at the first */
}

/* Feeds the store's events to the replay simulator. */
typedef struct sim_feed {
  aa_replay_sim *sim;
  aa_replay_event batch[256];
  size_t n;
  uint64_t index;
  int rc;
} sim_feed;

static int sim_cb(void *user, const aa_trace_event *ev) {
  sim_feed *f = user;
  aa_replay_event *e = &f->batch[f->n++];
  memset(e, 0, sizeof *e);
  e->time_ns = ev->time_ns;
  e->ptr = ev->ptr;
  e->size = ev->size;
  e->stream = ev->stream;
  e->thread = ev->thread;
  e->line = ++f->index;
  e->op = ev->op;
  if (f->n == 256) {
    f->rc = aa_replay_sim_feed(f->sim, f->batch, f->n);
    f->n = 0;
    if (f->rc != AA_OK)
      return 1;
  }
  return 0;
}

static void test_store_trace_order_threads_replay(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/order.db", g_dir);
  aa_store_config scfg;
  aa_store_config_init(&scfg);
  scfg.path = path;
  scfg.commit_interval_ms = 5;
  scfg.trace_capacity = 1u << 20; /* large enough that nothing is dropped */
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&scfg, &st), AA_OK);
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.model = "order";
  info.rank = -1;
  int64_t run = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &run), AA_OK);

  aa_backend *b = NULL;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config pcfg;
  aa_pool_config_init(&pcfg);
  pcfg.backend = b;
  pcfg.name = "host";
  aa_pool *pool = NULL;
  assert_int_equal(aa_pool_new(&pcfg, &pool), AA_OK);
  aa_pool_set_telemetry(pool, true);
  aa_pool_set_trace(pool, aa_store_trace_push, st);

  shared *sh = calloc(1, sizeof *sh);
  assert_non_null(sh);
  sh->pool = pool;
  pthread_t th[THREADS];
  worker w[THREADS];
  for (int i = 0; i < THREADS; i++) {
    w[i].sh = sh;
    w[i].seed = 1234u + (unsigned)i;
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  for (int k = 0; k < SLOTS; k++) {
    void *p = atomic_load(&sh->slot[k]);
    if (p != NULL)
      assert_int_equal(aa_free(pool, p, 0, NULL), AA_OK);
  }
  assert_int_equal(atomic_load(&sh->free_errors), 0);
  aa_pool_set_trace(pool, NULL, NULL);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  aa_store_stats ss;
  assert_int_equal(aa_store_stats_get(st, &ss), AA_OK);
  assert_int_equal(ss.events_dropped, 0);
  assert_true(ss.events_written >= 2u * THREADS * (ITERS / 2));

  checker *c = calloc(1, sizeof *c);
  assert_non_null(c);
  assert_int_equal(aa_store_trace_foreach(path, run, check_cb, c), AA_OK);
  if (c->bad != 0)
    print_error("%llu ordering errors; first: %s\n", (unsigned long long)c->bad, c->first_bad);
  assert_int_equal(c->bad, 0);
  assert_int_equal(c->seq_backwards, 0);
  assert_int_equal(c->events, ss.events_written);
  assert_int_equal(c->allocs, c->frees); /* everything was freed */
  uint64_t lost = 1, cut = 1;
  assert_int_equal(aa_store_trace_lost(path, run, NULL, &lost, &cut), AA_OK);
  assert_int_equal(lost, 0);
  assert_int_equal(cut, 0);

  /* The simulator accepts it, stopping at the first bad event. */
  aa_replay_config rc;
  aa_replay_config_init(&rc);
  rc.on_error = AA_REPLAY_STOP;
  rc.position_name = "event";
  char err[256] = "";
  sim_feed *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(aa_replay_sim_new(&rc, &f->sim, err, sizeof err), AA_OK);
  assert_int_equal(aa_store_trace_foreach(path, run, sim_cb, f), AA_OK);
  if (f->rc == AA_OK && f->n > 0)
    f->rc = aa_replay_sim_feed(f->sim, f->batch, f->n);
  if (f->rc != AA_OK)
    print_error("replay: %s\n", aa_replay_sim_error(f->sim));
  assert_int_equal(f->rc, AA_OK);
  aa_replay_result res;
  aa_replay_sim_result(f->sim, &res);
  assert_int_equal(res.live_at_end, 0);
  assert_int_equal(res.allocs, c->allocs);
  aa_replay_sim_free(f->sim);

  free(f);
  free(c);
  free(sh);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
  assert_int_equal(aa_store_close(st), AA_OK);
}

/* A full ring loses events: what is read back is the complete prefix below
 * the first sequence number lost, never a trace with holes. */
static void test_store_trace_order_cut_at_first_loss(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/cut.db", g_dir);
  aa_store_config scfg;
  aa_store_config_init(&scfg);
  scfg.path = path;
  scfg.commit_interval_ms = 5;
  scfg.trace_capacity = 64;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&scfg, &st), AA_OK);
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.model = "cut";
  info.rank = -1;
  int64_t run = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &run), AA_OK);
  /* The write lock held elsewhere: the writer cannot drain the 64-slot
   * ring. Pushed out of order (40 .. 1, then 41 .. 1000): 1 .. 64 fit,
   * 65 on are lost. */
  sqlite3 *blocker = NULL;
  assert_int_equal(sqlite3_open(path, &blocker), SQLITE_OK);
  assert_int_equal(sqlite3_exec(blocker, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  for (uint64_t s = 40; s >= 1; s--) {
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = 'a';
    ev.ptr = 0x10000 + s * 512;
    ev.size = 512;
    ev.seq = s;
    aa_store_trace_push(st, &ev);
  }
  for (uint64_t s = 41; s <= 1000; s++) {
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = 'a';
    ev.ptr = 0x10000 + s * 512;
    ev.size = 512;
    ev.seq = s;
    aa_store_trace_push(st, &ev);
  }
  assert_int_equal(sqlite3_exec(blocker, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(blocker);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  aa_store_stats ss;
  assert_int_equal(aa_store_stats_get(st, &ss), AA_OK);
  assert_int_equal(ss.events_dropped, 1000 - 64);
  assert_int_equal(ss.events_written, 64);
  checker *c = calloc(1, sizeof *c);
  assert_non_null(c);
  assert_int_equal(aa_store_trace_foreach(path, run, check_cb, c), AA_OK);
  /* in order, from 1, without a gap */
  assert_int_equal(c->seq_backwards, 0);
  assert_int_equal(c->last_seq, c->events);
  assert_int_equal(c->bad, 0);
  assert_int_equal(c->events, 64);
  uint64_t written = 0, dropped = 0, cut = 0;
  assert_int_equal(aa_store_trace_lost(path, run, &written, &dropped, &cut), AA_OK);
  assert_int_equal(written, 64);
  assert_int_equal(dropped, 1000 - 64);
  assert_int_equal(cut, 65);
  assert_int_equal(aa_store_trace_lost(path, run + 5, NULL, NULL, NULL), AA_ENOENT);
  free(c);
  assert_int_equal(aa_store_close(st), AA_OK);
}

/* A database written before schema 2 (no seq, no trace_cut_seq) is read
 * in write order, and aa_store_trace_lost says nothing was cut. */
static void test_store_trace_order_old_schema(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/old.db", g_dir);
  aa_store_config scfg;
  aa_store_config_init(&scfg);
  scfg.path = path;
  scfg.commit_interval_ms = 5;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&scfg, &st), AA_OK);
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.model = "old";
  info.rank = -1;
  int64_t run = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &run), AA_OK);
  /* pushed with seq in reverse: schema 2 would read them reversed */
  for (uint64_t i = 0; i < 10; i++) {
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = 'a';
    ev.ptr = 0x1000 + i * 512;
    ev.size = 512;
    ev.seq = 100 - i;
    aa_store_trace_push(st, &ev);
  }
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  /* make it a schema-1 file */
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "ALTER TABLE trace_events DROP COLUMN seq;"
                                    "ALTER TABLE runs DROP COLUMN trace_cut_seq;"
                                    "ALTER TABLE trace_events DROP COLUMN frame;"
                                    "DROP TABLE trace_frames;"
                                    "ALTER TABLE runs DROP COLUMN events_evicted;"
                                    "PRAGMA user_version=1;",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(db);
  checker *c = calloc(1, sizeof *c);
  assert_non_null(c);
  assert_int_equal(aa_store_trace_foreach(path, run, check_cb, c), AA_OK);
  assert_int_equal(c->events, 10);
  assert_int_equal(c->bad, 0);
  free(c);
  uint64_t written = 0, cut = 7;
  assert_int_equal(aa_store_trace_lost(path, run, &written, NULL, &cut), AA_OK);
  assert_int_equal(written, 10);
  assert_int_equal(cut, 0);
  /* in write order: the first pointer first */
  uint64_t first = 0;
  assert_int_equal(aa_store_trace_foreach(path, run, first_ptr_cb, &first), 1);
  assert_int_equal(first, 0x1000);
}

typedef struct begin_arg {
  aa_store *st;
  int64_t run;
  int rc;
} begin_arg;

static void *begin_main(void *arg) {
  begin_arg *a = arg;
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.model = "next";
  info.rank = -1;
  a->rc = aa_store_begin_run(a->st, &info, &a->run);
  return NULL;
}

static void push_seq(aa_store *st, uint64_t s) {
  aa_trace_event ev;
  memset(&ev, 0, sizeof ev);
  ev.op = 'a';
  ev.ptr = 0x10000 + s * 512;
  ev.size = 512;
  ev.seq = s;
  aa_store_trace_push(st, &ev);
}

/* A run that loses events just before the next run begins (in the writer
 * cycle that starts the next run) still records its cut: its trace reads
 * back as the prefix below the first loss, not with holes. */
static void test_store_trace_order_cut_before_next_run(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/cutnext.db", g_dir);
  aa_store_config scfg;
  aa_store_config_init(&scfg);
  scfg.path = path;
  scfg.commit_interval_ms = 60000; /* the writer wakes on requests only */
  scfg.trace_capacity = 64;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&scfg, &st), AA_OK);
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.model = "first";
  info.rank = -1;
  int64_t run = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &run), AA_OK);
  sqlite3 *blocker = NULL;
  assert_int_equal(sqlite3_open(path, &blocker), SQLITE_OK);
  assert_int_equal(sqlite3_exec(blocker, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  /* below half the ring: no early wake */
  for (uint64_t s = 1; s <= 20; s++)
    push_seq(st, s);
  /* the next run's begin holds the writer on the lock, the first run still
   * current: 21 .. 64 fit, 65 on are the first run's losses */
  begin_arg ba = {st, 0, -1};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, begin_main, &ba), 0);
  usleep(50000);
  for (uint64_t s = 21; s <= 200; s++)
    push_seq(st, s);
  assert_int_equal(sqlite3_exec(blocker, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(blocker);
  pthread_join(th, NULL);
  assert_int_equal(ba.rc, AA_OK);
  assert_true(ba.run > run);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  uint64_t cut = 0;
  assert_int_equal(aa_store_trace_lost(path, run, NULL, NULL, &cut), AA_OK);
  assert_int_equal(cut, 65);
  checker *c = calloc(1, sizeof *c);
  assert_non_null(c);
  assert_int_equal(aa_store_trace_foreach(path, run, check_cb, c), AA_OK);
  assert_int_equal(c->events, 64);
  assert_int_equal(c->last_seq, 64);
  free(c);
  assert_int_equal(aa_store_close(st), AA_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_trace_order_threads_replay),
      cmocka_unit_test(test_store_trace_order_cut_at_first_loss),
      cmocka_unit_test(test_store_trace_order_cut_before_next_run),
      cmocka_unit_test(test_store_trace_order_old_schema),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
