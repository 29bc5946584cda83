/*
 * test_store_retention.c — the size and age limits: the database file stops
 * growing at max_bytes (oldest snapshots and trace events go first, their
 * per-class, histogram and heavy-hitter rows with them, and the file shrinks
 * back through incremental vacuum); rows older than max_age_s are deleted.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "adaptalloc/store.h"

static char g_dir[256];

static int setup_dir(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/aa-store-ret-XXXXXX");
  return mkdtemp(g_dir) != NULL ? 0 : -1;
}

static int teardown_dir(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void fill_stats(aa_pool_stats *p, uint64_t seed) {
  memset(p, 0, sizeof *p);
  p->version = AA_STATS_VERSION;
  p->size = sizeof *p;
  snprintf(p->name, sizeof p->name, "device0");
  snprintf(p->backend, sizeof p->backend, "cuda");
  p->allocs = seed;
  p->class_count = 64;
  for (uint32_t c = 0; c < 64; c++) {
    p->classes[c].block_size = 512u * (c + 1);
    p->classes[c].allocs = seed * 1000 + c;
    p->classes[c].bytes_in_use = seed * 100000 + c;
  }
  for (unsigned b = 0; b < AA_HIST_BUCKETS; b++) p->hist[b] = seed * 1000 + b;
  p->hh_count = AA_HH_MAX;
  for (uint32_t r = 0; r < AA_HH_MAX; r++) {
    p->hh[r].size = 4096 + r;
    p->hh[r].count = seed + r;
  }
}

static int64_t sql_int(sqlite3 *db, const char *sql) {
  sqlite3_stmt *s = NULL;
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(s), SQLITE_ROW);
  int64_t v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  return v;
}

static int64_t orphans(sqlite3 *db) {
  return sql_int(db,
                 "SELECT (SELECT count(*) FROM class_stats WHERE snapshot_id NOT IN"
                 "          (SELECT id FROM snapshots))"
                 "     + (SELECT count(*) FROM histograms WHERE snapshot_id NOT IN"
                 "          (SELECT id FROM snapshots))"
                 "     + (SELECT count(*) FROM heavy_hitters WHERE snapshot_id NOT IN"
                 "          (SELECT id FROM snapshots))");
}

static void push_events(aa_store *st, int n, uint64_t base) {
  for (int i = 0; i < n; i++) {
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = 'a';
    ev.time_ns = base + (uint64_t)i;
    ev.ptr = 0x7f0000000000ull + (uint64_t)i * 4096;
    ev.size = 4096;
    ev.thread = 1;
    aa_store_trace_push(st, &ev);
  }
}

static void test_store_retention_size_limit(void **state) {
  (void)state;
  char path[300];
  const uint64_t limit = 256 * 1024;
  snprintf(path, sizeof path, "%s/size.db", g_dir);
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.max_bytes = limit;
  cfg.commit_interval_ms = 5;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.rank = -1;
  int64_t run = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &run), AA_OK);

  aa_pool_stats p;
  uint64_t seed = 0;
  for (int round = 0; round < 10; round++) {
    for (int i = 0; i < 20; i++) {
      fill_stats(&p, ++seed);
      assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
    }
    push_events(st, 2000, (uint64_t)round * 2000);
    assert_int_equal(aa_store_flush(st, 0), AA_OK);
    aa_store_stats s;
    assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
    assert_true(s.db_bytes <= limit);
  }
  aa_store_stats s;
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.snapshots_written, 200);
  assert_int_equal(s.events_written, 20000);
  assert_true(s.rows_deleted > 0);
  assert_true(s.retention_runs >= 10);
  assert_int_equal(s.enabled, 1);
  assert_int_equal(aa_store_close(st), AA_OK);

  /* The file itself stayed near the limit (WAL checkpointed on close). */
  struct stat sb;
  assert_int_equal(stat(path, &sb), 0);
  assert_true((uint64_t)sb.st_size <= limit + 8 * 4096);

  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  int64_t kept = sql_int(db, "SELECT count(*) FROM snapshots");
  assert_true(kept > 0 && kept < 200);
  assert_int_equal(sql_int(db, "SELECT max(allocs) FROM snapshots"), 200); /* newest kept */
  assert_true(sql_int(db, "SELECT min(allocs) FROM snapshots") > 1);       /* oldest gone */
  int64_t events = sql_int(db, "SELECT count(*) FROM trace_events");
  assert_true(events > 0 && events < 20000);
  assert_int_equal(sql_int(db, "SELECT max(time_ns) FROM trace_events"), 19999);
  assert_int_equal(orphans(db), 0);
  assert_int_equal(sql_int(db, "SELECT count(*) FROM runs"), 1);
  assert_int_equal(sql_int(db, "PRAGMA freelist_count"), 0);
  sqlite3_close(db);
}

static void test_store_retention_age_limit(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/age.db", g_dir);
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.commit_interval_ms = 5;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.rank = -1;
  int64_t run = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &run), AA_OK);
  aa_pool_stats p;
  for (uint64_t i = 1; i <= 10; i++) {
    fill_stats(&p, i);
    assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  }
  assert_int_equal(aa_store_policy_change(st, "file", 0, 1, "start", "{}"), AA_OK);
  push_events(st, 100, 0);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  push_events(st, 50, 1000); /* a second batch, kept */
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);

  /* Age the first half of the data by three days. */
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db,
                                "UPDATE snapshots SET ts_ms = ts_ms - 259200000 WHERE allocs <= 5;"
                                "UPDATE policy_changes SET ts_ms = ts_ms - 259200000;"
                                /* the first 100 events, in however many
                                 * batches the writer drained them */
                                "UPDATE trace_batches SET ts_ms = ts_ms - 259200000"
                                " WHERE last_id <= (SELECT min(id) FROM trace_events) + 99;",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(db);

  cfg.max_age_s = 86400;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  aa_store_stats s;
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.rows_deleted, 5 + 1 + 100);
  assert_int_equal(aa_store_close(st), AA_OK);

  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  assert_int_equal(sql_int(db, "SELECT count(*) FROM snapshots"), 5);
  assert_int_equal(sql_int(db, "SELECT min(allocs) FROM snapshots"), 6);
  assert_int_equal(sql_int(db, "SELECT count(*) FROM policy_changes"), 0);
  assert_int_equal(sql_int(db, "SELECT count(*) FROM trace_events"), 50);
  assert_int_equal(sql_int(db, "SELECT min(time_ns) FROM trace_events"), 1000);
  assert_int_equal(sql_int(db, "SELECT count(*) FROM trace_batches"), 1);
  assert_int_equal(sql_int(db, "SELECT count(*) FROM class_stats"), 5 * 64);
  assert_int_equal(orphans(db), 0);
  sqlite3_close(db);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_retention_size_limit),
      cmocka_unit_test(test_store_retention_age_limit),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
