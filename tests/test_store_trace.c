/*
 * test_store_trace.c — the trace ring and aa_store_trace_foreach: events
 * pushed from several threads come back complete and in per-thread order;
 * a full ring drops and counts; events belong to the run current when they
 * were pushed; the callback can stop the walk; run selection and errors.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "adaptalloc/store.h"

static char g_dir[256];

static int setup_dir(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/aa-store-trace-XXXXXX");
  return mkdtemp(g_dir) != NULL ? 0 : -1;
}

static int teardown_dir(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void db_file(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "%s/%s", g_dir, name);
  unlink(buf);
}

static aa_store *open_store(const char *path, uint32_t ring) {
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.commit_interval_ms = 5;
  cfg.trace_capacity = ring;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  return st;
}

static int64_t begin(aa_store *st) {
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.model = "trace";
  info.rank = -1;
  int64_t id = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &id), AA_OK);
  return id;
}

#define THREADS 4
#define PER_THREAD 5000

typedef struct pusher {
  aa_store *st;
  uint64_t thread;
} pusher;

/* The op of a pusher's i-th event: alloc, failed alloc, free, and every
 * sixth a stream use ('u', record_stream), which the store keeps as any op. */
static char op_of(uint64_t i) {
  if (i % 6 == 5)
    return 'u';
  return i % 3 == 0 ? 'a' : (i % 3 == 1 ? 'x' : 'f');
}

static void *push_main(void *arg) {
  pusher *p = arg;
  aa_trace_fn fn = aa_store_trace_push; /* usable as a core trace callback */
  for (uint64_t i = 0; i < PER_THREAD; i++) {
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.time_ns = i * 10 + p->thread;
    ev.ptr = 0x7f0000000000ull + i * 512;
    ev.size = i % 3 == 2 ? 0 : 512 + i;
    ev.stream = p->thread * 2;
    ev.thread = p->thread;
    ev.op = op_of(i);
    fn(p->st, &ev);
  }
  return NULL;
}

typedef struct checker {
  uint64_t seen;
  uint64_t next[THREADS + 1];
  int bad;
  uint64_t stop_after;
} checker;

static int check_cb(void *user, const aa_trace_event *ev) {
  checker *c = user;
  c->seen++;
  uint64_t t = ev->thread;
  if (t < 1 || t > THREADS) {
    c->bad++;
    return 0;
  }
  uint64_t i = c->next[t]++;
  char op = op_of(i);
  if (ev->time_ns != i * 10 + t || ev->ptr != 0x7f0000000000ull + i * 512 ||
      ev->size != (i % 3 == 2 ? 0 : 512 + i) || ev->stream != t * 2 ||
      ev->op != op) {
    c->bad++;
  }
  if (c->stop_after != 0 && c->seen == c->stop_after) return 7;
  return 0;
}

static void test_store_trace_threads_round_trip(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "threads.db");
  aa_store *st = open_store(path, 0);
  int64_t run = begin(st);
  pthread_t th[THREADS];
  pusher ps[THREADS];
  for (int i = 0; i < THREADS; i++) {
    ps[i].st = st;
    ps[i].thread = (uint64_t)i + 1;
    assert_int_equal(pthread_create(&th[i], NULL, push_main, &ps[i]), 0);
  }
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  aa_store_stats s;
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.events_written, THREADS * PER_THREAD);
  assert_int_equal(s.events_dropped, 0);
  assert_int_equal(s.events_queued, 0);

  checker c;
  memset(&c, 0, sizeof c);
  assert_int_equal(aa_store_trace_foreach(path, run, check_cb, &c), AA_OK);
  assert_int_equal(c.seen, THREADS * PER_THREAD);
  assert_int_equal(c.bad, 0);
  for (int t = 1; t <= THREADS; t++) assert_int_equal(c.next[t], PER_THREAD);
  /* run 0 = the latest run, the same one. */
  memset(&c, 0, sizeof c);
  assert_int_equal(aa_store_trace_foreach(path, 0, check_cb, &c), AA_OK);
  assert_int_equal(c.seen, THREADS * PER_THREAD);
  /* The callback stops the walk and its value comes back. */
  memset(&c, 0, sizeof c);
  c.stop_after = 3;
  assert_int_equal(aa_store_trace_foreach(path, run, check_cb, &c), 7);
  assert_int_equal(c.seen, 3);
  assert_int_equal(aa_store_close(st), AA_OK);
}

static int count_cb(void *user, const aa_trace_event *ev) {
  (void)ev;
  (*(uint64_t *)user)++;
  return 0;
}

static void push_n(aa_store *st, int n, uint64_t base) {
  for (int i = 0; i < n; i++) {
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = 'a';
    ev.ptr = base + (uint64_t)i;
    ev.size = 4096;
    aa_store_trace_push(st, &ev);
  }
}

static void test_store_trace_full_ring_drops(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "full.db");
  aa_store *st = open_store(path, 64);
  int64_t run = begin(st);
  /* Hold the write lock elsewhere so the writer cannot drain. */
  sqlite3 *blocker = NULL;
  assert_int_equal(sqlite3_open(path, &blocker), SQLITE_OK);
  assert_int_equal(sqlite3_exec(blocker, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  push_n(st, 1000, 0x1000);
  aa_store_stats s;
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_true(s.events_dropped >= 1000 - 2 * 64);
  assert_true(s.events_queued <= 64);
  assert_int_equal(sqlite3_exec(blocker, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(blocker);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.events_written + s.events_dropped, 1000);
  uint64_t n = 0;
  assert_int_equal(aa_store_trace_foreach(path, run, count_cb, &n), AA_OK);
  assert_int_equal(n, s.events_written);
  assert_int_equal(aa_store_close(st), AA_OK);
}

static void test_store_trace_runs_and_errors(void **state) {
  (void)state;
  char path[300];
  uint64_t n = 0;
  db_file(path, sizeof path, "runs.db");
  aa_store *st = open_store(path, 0);
  /* Before any run: dropped. */
  push_n(st, 5, 0);
  aa_store_trace_push(NULL, NULL); /* no-op */
  aa_store_trace_push(st, NULL);   /* no-op */
  aa_store_stats s;
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.events_dropped, 5);
  int64_t r1 = begin(st);
  push_n(st, 10, 0);
  int64_t r2 = begin(st); /* no flush in between */
  push_n(st, 20, 100);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  assert_int_equal(aa_store_trace_foreach(path, r1, count_cb, &n), AA_OK);
  assert_int_equal(n, 10);
  n = 0;
  assert_int_equal(aa_store_trace_foreach(path, r2, count_cb, &n), AA_OK);
  assert_int_equal(n, 20);
  /* A run without events is fine; a missing run is not. */
  int64_t r3 = begin(st);
  n = 0;
  assert_int_equal(aa_store_trace_foreach(path, 0, count_cb, &n), AA_OK);
  assert_int_equal(n, 0);
  assert_int_equal(aa_store_trace_foreach(path, r3 + 10, count_cb, &n), AA_ENOENT);
  assert_int_equal(aa_store_trace_foreach(path, r1, NULL, &n), AA_EINVAL);
  assert_int_equal(aa_store_trace_foreach("/nonexistent/x.db", 0, count_cb, &n), AA_ENOENT);
  /* After end_run events are dropped until the next run. */
  assert_int_equal(aa_store_end_run(st), AA_OK);
  assert_int_equal(aa_store_end_run(st), AA_ENOENT);
  push_n(st, 3, 0);
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.events_dropped, 8);
  assert_int_equal(s.run_id, 0);
  assert_int_equal(aa_store_close(st), AA_OK);

  /* trace_batches maps every stored event to a write time. */
  sqlite3 *db = NULL;
  sqlite3_stmt *q = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_prepare_v2(db,
                                      "SELECT (SELECT sum(events) FROM trace_batches),"
                                      " (SELECT count(*) FROM trace_events),"
                                      " (SELECT count(*) FROM trace_events t WHERE NOT EXISTS"
                                      "   (SELECT 1 FROM trace_batches b WHERE t.id BETWEEN b.first_id AND b.last_id))",
                                      -1, &q, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(q), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int64(q, 0), 30);
  assert_int_equal(sqlite3_column_int64(q, 1), 30);
  assert_int_equal(sqlite3_column_int64(q, 2), 0);
  sqlite3_finalize(q);
  sqlite3_close(db);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_trace_threads_round_trip),
      cmocka_unit_test(test_store_trace_full_ring_drops),
      cmocka_unit_test(test_store_trace_runs_and_errors),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
