/*
 * test_store_oom.c — out-of-memory records in the store (schema 4): an
 * aa_oom_info queued with aa_store_oom lands in `ooms` with its JSON and is
 * read back by aa_store_ooms_json (run, pool, limit filters); a bad record
 * is refused and counted; a schema-3 database opens and gains the table
 * with its rows kept.
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

static void db_path(char *buf, size_t cap, const char *name) {
  snprintf(buf, cap, "/tmp/aa_store_oom_%d_%s.db", (int)getpid(), name);
  unlink(buf);
}

static void db_gone(const char *path) {
  char side[400];
  unlink(path);
  snprintf(side, sizeof side, "%s-wal", path);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", path);
  unlink(side);
}

static int64_t sql_int(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
  if (sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

static aa_store *open_store(const char *path) {
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.quiet = true;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  return st;
}

static aa_oom_info record(const char *pool, uint64_t request, uint64_t count) {
  aa_oom_info o;
  memset(&o, 0, sizeof o);
  o.version = AA_OOM_VERSION;
  o.size = sizeof o;
  snprintf(o.pool, sizeof o.pool, "%s", pool);
  o.request = request;
  o.count = count;
  o.bytes_reserved = 8u << 20;
  o.bytes_in_use = 6u << 20;
  o.limit_bytes = 8u << 20;
  o.segments = 2;
  o.nholes = 1;
  o.holes[0] = 1u << 20;
  return o;
}

static void test_store_oom_written_and_read(void **state) {
  (void)state;
  char path[300];
  db_path(path, sizeof path, "rw");
  aa_store *st = open_store(path);
  aa_store_run_info ri = {.model = "oomtest", .rank = -1};
  int64_t run = 0;
  assert_int_equal(aa_store_begin_run(st, &ri, &run), AA_OK);
  aa_oom_info a = record("host", 6u << 20, 1), b = record("device0", 1u << 30, 1);
  assert_int_equal(aa_store_oom(st, &a), AA_OK);
  assert_int_equal(aa_store_oom(st, &b), AA_OK);
  aa_oom_info bad = a;
  bad.size = 8;
  assert_int_equal(aa_store_oom(st, &bad), AA_EINVAL);
  assert_int_equal(aa_store_oom(st, NULL), AA_EINVAL);
  assert_int_equal(aa_store_flush(st, 5000), AA_OK);
  aa_store_stats ss;
  assert_int_equal(aa_store_stats_get(st, &ss), AA_OK);
  assert_int_equal(ss.ooms_written, 2);
  assert_int_equal(ss.ooms_dropped, 2);

  aa_store_query q;
  aa_store_query_init(&q);
  char *json = NULL;
  assert_int_equal(aa_store_ooms_json(aa_store_db_path(st), &q, &json), AA_OK);
  assert_non_null(json);
  assert_non_null(strstr(json, "\"count\":2"));
  assert_non_null(strstr(json, "\"pool\":\"host\",\"request\":6291456,\"record\":{\"version\":2"));
  assert_non_null(strstr(json, "\"holes\":[1048576]"));
  assert_true(strstr(json, "\"pool\":\"host\"") < strstr(json, "\"pool\":\"device0\""));
  free(json);
  q.pool = "device0";
  assert_int_equal(aa_store_ooms_json(aa_store_db_path(st), &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":1"));
  assert_null(strstr(json, "\"pool\":\"host\""));
  free(json);
  q.pool = NULL;
  q.limit = 1; /* the newest */
  assert_int_equal(aa_store_ooms_json(aa_store_db_path(st), &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":1"));
  assert_non_null(strstr(json, "\"pool\":\"device0\""));
  free(json);
  assert_int_equal(aa_store_ooms_json(aa_store_db_path(st), NULL, &json), AA_EINVAL);
  assert_null(json);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM ooms WHERE run_id IS NOT NULL"), 2);
  db_gone(path);
}

/* A schema-3 database (no ooms table) opens, is migrated, keeps its runs. */
static void test_store_oom_migrates_v3(void **state) {
  (void)state;
  char path[300];
  db_path(path, sizeof path, "v3");
  aa_store *st = open_store(path);
  aa_store_run_info ri = {.model = "old", .rank = -1};
  int64_t run = 0;
  assert_int_equal(aa_store_begin_run(st, &ri, &run), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  {
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DROP TABLE ooms; ALTER TABLE runs DROP COLUMN local_rank;"
                                      " ALTER TABLE runs DROP COLUMN world_size;"
                                      " ALTER TABLE runs DROP COLUMN ooms_written;"
                                      " ALTER TABLE runs DROP COLUMN ooms_dropped;"
                                      " ALTER TABLE trace_events DROP COLUMN frame;"
                                      " DROP TABLE trace_frames;"
                                      " ALTER TABLE runs DROP COLUMN events_evicted;"
                                      " PRAGMA user_version=3;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
  }
  assert_int_equal(sql_int(path, "SELECT count(*) FROM sqlite_master WHERE name='ooms'"), 0);
  st = open_store(path);
  assert_int_equal(sql_int(path, "PRAGMA user_version"), AA_STORE_SCHEMA_VERSION);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM sqlite_master WHERE name='ooms'"), 1);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM runs"), 1);
  aa_oom_info a = record("host", 4096, 3);
  assert_int_equal(aa_store_oom(st, &a), AA_OK); /* no current run: run NULL */
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM ooms WHERE run_id IS NULL"), 1);
  db_gone(path);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_oom_written_and_read),
      cmocka_unit_test(test_store_oom_migrates_v3),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
