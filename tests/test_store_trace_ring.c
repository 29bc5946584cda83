/*
 * test_store_trace_ring.c — the trace table as a bounded ring
 * (trace_max_events, aa_store_set_trace_bound): the newest rows kept, the
 * oldest deleted and counted per run and in the store's stats, a lowered
 * bound applied at once; and call stacks (aa_store_frames_id, 'c' events'
 * frame column, aa_store_frames_foreach): interned per run, read back.
 */
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
  snprintf(g_dir, sizeof g_dir, "/tmp/aa-store-ring-XXXXXX");
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

static aa_store *open_store(const char *path, uint64_t max_events) {
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.commit_interval_ms = 5;
  cfg.trace_max_events = max_events;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  return st;
}

static int64_t begin(aa_store *st) {
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.model = "ring";
  info.rank = -1;
  int64_t id = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &id), AA_OK);
  return id;
}

static int64_t sql_int(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
  if (sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

/* n events with seq first..first+n-1, allocations of distinct addresses */
static void push_n(aa_store *st, uint64_t first, uint64_t n) {
  for (uint64_t i = first; i < first + n; i++) {
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.time_ns = 1000 + i;
    ev.ptr = 0x10000 + i * 512;
    ev.size = 512;
    ev.thread = 1;
    ev.op = 'a';
    ev.seq = i;
    aa_store_trace_push(st, &ev);
    if (i % 20000 == 0)
      assert_int_equal(aa_store_flush(st, 0), AA_OK); /* never a full ring */
  }
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
}

typedef struct seqs {
  uint64_t n, lo, hi, frames, last_frame;
} seqs;

static int seq_cb(void *user, const aa_trace_event *ev) {
  seqs *s = user;
  if (s->n == 0 || ev->seq < s->lo)
    s->lo = ev->seq;
  if (ev->seq > s->hi)
    s->hi = ev->seq;
  s->n++;
  if (ev->op == 'c') {
    s->frames++;
    s->last_frame = ev->frame;
  }
  return 0;
}

static void test_store_trace_ring_keeps_newest(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "ring.db");
  aa_store *st = open_store(path, 10000);
  int64_t run = begin(st);
  push_n(st, 1, 50000);
  aa_store_stats ss;
  assert_int_equal(aa_store_stats_get(st, &ss), AA_OK);
  assert_int_equal(ss.events_written, 50000);
  assert_int_equal(ss.events_evicted, 40000);
  assert_int_equal(ss.trace_max_events, 10000);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM trace_events"), 10000);
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT events_evicted FROM runs WHERE id = %lld", (long long)run);
  assert_int_equal(sql_int(path, sql), 40000);
  /* the reader gets the newest 10000, in order */
  seqs s;
  memset(&s, 0, sizeof s);
  assert_int_equal(aa_store_trace_foreach(aa_store_db_path(st), run, seq_cb, &s), AA_OK);
  assert_int_equal(s.n, 10000);
  assert_int_equal(s.lo, 40001);
  assert_int_equal(s.hi, 50000);
  /* the stats JSON says it */
  char buf[1024];
  aa_store_stats_json(&ss, buf, sizeof buf);
  assert_non_null(strstr(buf, "\"events_evicted\":40000,\"trace_max_events\":10000"));

  /* a lower bound applies at once, with no new event */
  assert_int_equal(aa_store_set_trace_bound(st, 2500), AA_OK);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM trace_events"), 2500);
  assert_int_equal(aa_store_stats_get(st, &ss), AA_OK);
  assert_int_equal(ss.events_evicted, 47500);
  /* no bound: nothing more goes */
  assert_int_equal(aa_store_set_trace_bound(st, 0), AA_OK);
  push_n(st, 50001, 5000);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM trace_events"), 7500);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(sql_int(path, "PRAGMA integrity_check") == -1, 0);
}

/* Two runs in one table: the bound is the table's, each run's count of
 * what went is its own. */
static void test_store_trace_ring_two_runs(void **state) {
  (void)state;
  char path[300], sql[128];
  db_file(path, sizeof path, "two.db");
  aa_store *st = open_store(path, 3000);
  int64_t r1 = begin(st);
  push_n(st, 1, 2000);
  int64_t r2 = begin(st);
  push_n(st, 2001, 2000);
  snprintf(sql, sizeof sql, "SELECT events_evicted FROM runs WHERE id = %lld", (long long)r1);
  assert_int_equal(sql_int(path, sql), 1000);
  snprintf(sql, sizeof sql, "SELECT events_evicted FROM runs WHERE id = %lld", (long long)r2);
  assert_int_equal(sql_int(path, sql), 0);
  seqs s;
  memset(&s, 0, sizeof s);
  assert_int_equal(aa_store_trace_foreach(aa_store_db_path(st), r1, seq_cb, &s), AA_OK);
  assert_int_equal(s.n, 1000);
  assert_int_equal(s.lo, 1001);
  assert_int_equal(aa_store_close(st), AA_OK);
}

typedef struct fr {
  int n;
  uint64_t ids[8];
  char text[8][64];
} fr;

static int frames_cb(void *user, uint64_t id, const char *frames) {
  fr *f = user;
  if (f->n < 8) {
    f->ids[f->n] = id;
    snprintf(f->text[f->n], sizeof f->text[0], "%s", frames);
  }
  f->n++;
  return 0;
}

static void test_store_trace_ring_frames(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "frames.db");
  aa_store *st = open_store(path, 0);
  uint64_t id = 99;
  const char *a = "train.py:10:step\ntrain.py:40:main\n";
  const char *b = "model.py:7:forward\n";
  /* no run yet */
  assert_int_equal(aa_store_frames_id(st, a, strlen(a), &id), AA_ENOENT);
  assert_int_equal(id, 0);
  int64_t run = begin(st);
  assert_int_equal(aa_store_frames_id(st, a, strlen(a), &id), AA_OK);
  assert_int_equal(id, 1);
  uint64_t id2 = 0, id3 = 0;
  assert_int_equal(aa_store_frames_id(st, b, strlen(b), &id2), AA_OK);
  assert_int_equal(id2, 2);
  assert_int_equal(aa_store_frames_id(st, a, strlen(a), &id3), AA_OK);
  assert_int_equal(id3, 1); /* the same text, the same id */
  assert_int_equal(aa_store_frames_id(st, a, 0, &id3), AA_EINVAL);
  assert_int_equal(aa_store_frames_id(NULL, a, 1, &id3), AA_EINVAL);
  aa_trace_event ev;
  memset(&ev, 0, sizeof ev);
  ev.op = 'a';
  ev.ptr = 0x1000;
  ev.size = 64;
  ev.seq = 1;
  aa_store_trace_push(st, &ev);
  ev.op = 'c';
  ev.size = 0;
  ev.seq = 2;
  ev.frame = id2;
  aa_store_trace_push(st, &ev);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  seqs s;
  memset(&s, 0, sizeof s);
  assert_int_equal(aa_store_trace_foreach(aa_store_db_path(st), run, seq_cb, &s), AA_OK);
  assert_int_equal(s.n, 2);
  assert_int_equal(s.frames, 1);
  assert_int_equal(s.last_frame, id2);
  fr f;
  memset(&f, 0, sizeof f);
  assert_int_equal(aa_store_frames_foreach(aa_store_db_path(st), run, frames_cb, &f), AA_OK);
  assert_int_equal(f.n, 2);
  assert_int_equal(f.ids[0], 1);
  assert_string_equal(f.text[0], a);
  assert_string_equal(f.text[1], b);
  aa_store_stats ss;
  assert_int_equal(aa_store_stats_get(st, &ss), AA_OK);
  assert_int_equal(ss.frames_written, 2);
  assert_int_equal(ss.frames_dropped, 0);
  /* a new run numbers its own stacks from 1 */
  int64_t run2 = begin(st);
  assert_int_equal(aa_store_frames_id(st, b, strlen(b), &id), AA_OK);
  assert_int_equal(id, 1);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  memset(&f, 0, sizeof f);
  assert_int_equal(aa_store_frames_foreach(aa_store_db_path(st), run2, frames_cb, &f), AA_OK);
  assert_int_equal(f.n, 1);
  assert_string_equal(f.text[0], b);
  assert_int_equal(aa_store_frames_foreach(aa_store_db_path(st), 999, frames_cb, &f),
                   AA_ENOENT);
  assert_int_equal(aa_store_close(st), AA_OK);
}

/* A version-1 config (before trace_max_events) still opens. */
static void test_store_trace_ring_config_v1(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "v1.db");
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.version = 1;
  cfg.path = path;
  cfg.trace_max_events = 5; /* not read from a version-1 config */
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  aa_store_stats ss;
  assert_int_equal(aa_store_stats_get(st, &ss), AA_OK);
  assert_int_equal(ss.trace_max_events, 0);
  assert_int_equal(aa_store_close(st), AA_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_trace_ring_keeps_newest),
      cmocka_unit_test(test_store_trace_ring_two_runs),
      cmocka_unit_test(test_store_trace_ring_frames),
      cmocka_unit_test(test_store_trace_ring_config_v1),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
