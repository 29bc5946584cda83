/*
 * test_store_basic.c — the store's schema and round trips: migrations from an
 * empty file and re-open, a newer schema refused, config checks, snapshots
 * read back equal to what went in (SQL and JSON), history filters, the runs
 * list, the policy-change log, histogram_latest and queue-full drops.
 * Stats are built by hand: nothing here needs the core allocator.
 *
 * One concern, the store's schema and round trips (one ctest), kept in one
 * file though it runs past 600 lines; the cmocka table at its end lists
 * every case.
 */
#include <pthread.h>
#include <limits.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
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

/* ------------------------------------------------------------------ helpers */

static char g_dir[256];

static int setup_dir(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/aa-store-basic-XXXXXX");
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
  char side[PATH_MAX + 8];
  unlink(buf);
  snprintf(side, sizeof side, "%.*s-wal", PATH_MAX, buf);
  unlink(side);
  snprintf(side, sizeof side, "%.*s-shm", PATH_MAX, buf);
  unlink(side);
}

/* A synthetic snapshot: every counter derived from seed so that a round trip
 * can be checked field by field. */
static void fill_stats(aa_pool_stats *p, const char *name, uint64_t seed,
                       uint32_t classes, uint32_t hh) {
  memset(p, 0, sizeof *p);
  p->version = AA_STATS_VERSION;
  p->size = sizeof *p;
  snprintf(p->name, sizeof p->name, "%s", name);
  snprintf(p->backend, sizeof p->backend, "host");
  p->device = -1;
  p->telemetry = 1;
  p->time_ns = 1000000000ull + seed;
  p->class_table_version = seed + 1;
  uint64_t *f = &p->bytes_in_use;
  for (uint64_t *q = f; q <= &p->large_segments; q++) {
    *q = seed * 1000 + (uint64_t)(q - f);
  }
  p->class_count = classes;
  for (uint32_t c = 0; c < classes; c++) {
    aa_class_stats *cs = &p->classes[c];
    cs->block_size = 512u * (c + 1);
    cs->cache_limit = 32 + c;
    cs->prefill = c;
    cs->retiring = c % 2;
    uint64_t *g = &cs->slabs;
    for (uint64_t *q = g; q <= &cs->misses; q++) *q = seed + c * 100 + (uint64_t)(q - g);
  }
  for (unsigned b = 0; b < AA_HIST_BUCKETS; b += 3) p->hist[b] = seed + b;
  p->hh_count = hh;
  for (uint32_t r = 0; r < hh; r++) {
    p->hh[r].size = 1000 + r;
    p->hh[r].count = 500 - r + seed;
  }
}

static aa_store *open_store(const char *path, uint32_t queue_cap) {
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.commit_interval_ms = 10;
  if (queue_cap) cfg.queue_capacity = queue_cap;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  assert_non_null(st);
  return st;
}

static int64_t begin(aa_store *st, const char *model) {
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.model = model;
  info.rank = 3;
  info.policy_version = 7;
  info.config_json = "{\"trace\":0,\"db\":\"x.db\"}";
  int64_t id = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &id), AA_OK);
  assert_true(id > 0);
  return id;
}

static int64_t sql_int(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(s), SQLITE_ROW);
  int64_t v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

static void sql_text(const char *path, const char *sql, char *out, size_t cap) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(s), SQLITE_ROW);
  const unsigned char *t = sqlite3_column_text(s, 0);
  snprintf(out, cap, "%s", t != NULL ? (const char *)t : "(null)");
  sqlite3_finalize(s);
  sqlite3_close(db);
}

static void sql_exec(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(db);
}

/* Counts non-overlapping occurrences of needle. */
static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) n++;
  return n;
}

/* ------------------------------------------------------------------ schema */

static void test_store_migrates_empty_file(void **state) {
  (void)state;
  char path[300];
  char txt[64];
  db_file(path, sizeof path, "empty.db");
  aa_store *st = open_store(path, 0);
  assert_string_equal(aa_store_db_path(st), path);
  assert_int_equal(aa_store_close(st), AA_OK);

  assert_int_equal(sql_int(path, "PRAGMA user_version"), AA_STORE_SCHEMA_VERSION);
  sql_text(path, "PRAGMA journal_mode", txt, sizeof txt);
  assert_string_equal(txt, "wal");
  assert_int_equal(sql_int(path, "PRAGMA auto_vacuum"), 2); /* incremental */
  static const char *tables[] = {"meta", "runs", "snapshots", "class_stats",
                                 "histograms", "heavy_hitters", "policy_changes",
                                 "trace_events", "trace_batches"};
  for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='%s'",
             tables[i]);
    assert_int_equal(sql_int(path, sql), 1);
  }
  sql_text(path, "SELECT value FROM meta WHERE key='schema_version'", txt, sizeof txt);
  assert_int_equal(atoi(txt), AA_STORE_SCHEMA_VERSION);
  sql_text(path, "PRAGMA integrity_check", txt, sizeof txt);
  assert_string_equal(txt, "ok");
}

static void test_store_reopen_keeps_data(void **state) {
  (void)state;
  char path[300];
  aa_pool_stats p;
  db_file(path, sizeof path, "reopen.db");
  aa_store *st = open_store(path, 0);
  int64_t r1 = begin(st, "m1");
  fill_stats(&p, "host", 1, 2, 1);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);

  int64_t created = sql_int(path, "SELECT CAST(value AS INTEGER) FROM meta WHERE key='created_ms'");
  st = open_store(path, 0);
  int64_t r2 = begin(st, "m2");
  assert_true(r2 > r1);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM runs"), 2);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM snapshots"), 2);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM runs WHERE ended_ms IS NULL"), 0);
  assert_int_equal(sql_int(path, "SELECT CAST(value AS INTEGER) FROM meta WHERE key='created_ms'"),
                   created);
}

/* Schema 3: a region's snapshot records its region, others NULL; a schema-2
 * file gains the column on open and keeps its rows. */
static void test_store_region_column(void **state) {
  (void)state;
  char path[300], txt[64];
  aa_pool_stats p;
  db_file(path, sizeof path, "region.db");
  aa_store *st = open_store(path, 0);
  begin(st, "m");
  fill_stats(&p, "host", 1, 1, 0);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  fill_stats(&p, "host:kv_cache", 2, 1, 0);
  snprintf(p.region, sizeof p.region, "kv_cache");
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  sql_text(path, "SELECT region FROM snapshots WHERE pool='host:kv_cache'", txt, sizeof txt);
  assert_string_equal(txt, "kv_cache");
  assert_int_equal(sql_int(path, "SELECT count(*) FROM snapshots WHERE region IS NULL"), 1);

  /* back to schema 2, then opened again: migrated, rows kept */
  {
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "DROP VIEW latest_snapshots;"
                                  "ALTER TABLE snapshots DROP COLUMN region;"
                                  "CREATE VIEW latest_snapshots AS SELECT s.* FROM snapshots s"
                                  " WHERE s.id = (SELECT max(id) FROM snapshots t"
                                  " WHERE t.run_id = s.run_id AND t.pool = s.pool);"
                                  "DROP TABLE ooms;"
                                  "ALTER TABLE runs DROP COLUMN local_rank;"
                                  "ALTER TABLE runs DROP COLUMN world_size;"
                                  "ALTER TABLE runs DROP COLUMN ooms_written;"
                                  "ALTER TABLE runs DROP COLUMN ooms_dropped;"
                                  "ALTER TABLE trace_events DROP COLUMN frame;"
                                  "DROP TABLE trace_frames;"
                                  "ALTER TABLE runs DROP COLUMN events_evicted;"
                                  "PRAGMA user_version=2;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
  }
  st = open_store(path, 0);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(sql_int(path, "PRAGMA user_version"), AA_STORE_SCHEMA_VERSION);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM snapshots WHERE region IS NULL"), 2);
}

/* Schema 5: a run row carries its rank, local rank and world size; a
 * schema-4 file is migrated (its rows keep NULL there) and read before
 * that (readers never migrate) with null for both. */
static void test_store_run_ranks_and_v4_migration(void **state) {
  (void)state;
  char path[300];
  char *json = NULL;
  aa_store_run_info info = {.model = "ranked", .rank = 5, .local_rank = 1, .world_size = 8};
  aa_store_run_info none = {.model = "single", .rank = -1, .local_rank = -1, .world_size = 0};
  int64_t id = 0;
  db_file(path, sizeof path, "ranks.db");
  aa_store *st = open_store(path, 0);
  assert_int_equal(aa_store_begin_run(st, &info, &id), AA_OK);
  assert_int_equal(aa_store_begin_run(st, &none, &id), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(sql_int(path, "SELECT rank FROM runs WHERE model='ranked'"), 5);
  assert_int_equal(sql_int(path, "SELECT local_rank FROM runs WHERE model='ranked'"), 1);
  assert_int_equal(sql_int(path, "SELECT world_size FROM runs WHERE model='ranked'"), 8);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM runs WHERE model='single' AND rank IS NULL"
                                 " AND local_rank IS NULL AND world_size IS NULL"),
                   1);
  assert_int_equal(aa_store_runs_json(path, 10, &json), AA_OK);
  assert_non_null(strstr(json, "\"rank\":5,\"local_rank\":1,\"world_size\":8"));
  assert_non_null(strstr(json, "\"rank\":null,\"local_rank\":null,\"world_size\":null"));
  free(json);

  /* back to schema 4: read as it is, then opened: migrated, rows kept */
  sql_exec(path, "ALTER TABLE runs DROP COLUMN local_rank;"
                 "ALTER TABLE runs DROP COLUMN world_size;"
                 "ALTER TABLE runs DROP COLUMN ooms_written;"
                 "ALTER TABLE runs DROP COLUMN ooms_dropped;"
                 "ALTER TABLE trace_events DROP COLUMN frame;"
                 "DROP TABLE trace_frames;"
                 "ALTER TABLE runs DROP COLUMN events_evicted;"
                 "PRAGMA user_version=4;");
  assert_int_equal(sql_int(path, "SELECT count(*) FROM pragma_table_info('runs')"
                                 " WHERE name IN ('local_rank', 'world_size')"),
                   0);
  assert_int_equal(aa_store_runs_json(path, 10, &json), AA_OK);
  assert_non_null(strstr(json, "\"rank\":5,\"local_rank\":null,\"world_size\":null"));
  free(json);
  assert_int_equal(sql_int(path, "PRAGMA user_version"), 4); /* the reader changed nothing */
  st = open_store(path, 0);
  assert_int_equal(sql_int(path, "PRAGMA user_version"), AA_STORE_SCHEMA_VERSION);
  info.model = "after";
  info.local_rank = 0;
  assert_int_equal(aa_store_begin_run(st, &info, &id), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM runs"), 3);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM runs WHERE local_rank IS NULL"), 2);
  assert_int_equal(sql_int(path, "SELECT local_rank FROM runs WHERE model='after'"), 0);
  assert_int_equal(sql_int(path, "SELECT world_size FROM runs WHERE model='after'"), 8);
}

static void test_store_refuses_newer_schema(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "newer.db");
  aa_store *st = open_store(path, 0);
  assert_int_equal(aa_store_close(st), AA_OK);
  sql_exec(path, "PRAGMA user_version=99");

  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.quiet = true;
  st = (aa_store *)&cfg; /* must be cleared */
  assert_int_equal(aa_store_open(&cfg, &st), AA_ESTALE);
  assert_null(st);
  /* Readers refuse it too, and the file is untouched. */
  char *json = (char *)"x";
  assert_int_equal(aa_store_runs_json(path, 0, &json), AA_ESTALE);
  assert_null(json);
  assert_int_equal(sql_int(path, "PRAGMA user_version"), 99);
}

static void test_store_rejects_bad_config(void **state) {
  (void)state;
  aa_store_config cfg;
  aa_store *st = NULL;
  char path[300];
  assert_int_equal(aa_store_open(NULL, &st), AA_EINVAL);
  aa_store_config_init(&cfg);
  cfg.quiet = true;
  assert_int_equal(aa_store_open(&cfg, NULL), AA_EINVAL);
  assert_int_equal(aa_store_open(&cfg, &st), AA_EINVAL); /* no path */
  cfg.path = "";
  assert_int_equal(aa_store_open(&cfg, &st), AA_EINVAL);
  cfg.path = ":memory:";
  cfg.version = 99;
  assert_int_equal(aa_store_open(&cfg, &st), AA_EINVAL);
  cfg.version = AA_STORE_CONFIG_VERSION;
  cfg.queue_capacity = 1u << 30;
  assert_int_equal(aa_store_open(&cfg, &st), AA_EINVAL);
  assert_null(st);
  /* Not a database. */
  db_file(path, sizeof path, "garbage.db");
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  for (int i = 0; i < 200; i++) fputs("this is not sqlite\n", f);
  fclose(f);
  cfg.queue_capacity = 0;
  cfg.path = path;
  assert_int_equal(aa_store_open(&cfg, &st), AA_ECORRUPT);
  assert_null(st);
  char *json = NULL;
  assert_int_equal(aa_store_runs_json(path, 0, &json), AA_ENOENT);
  /* Missing file for the readers. */
  assert_int_equal(aa_store_runs_json("/nonexistent/dir/x.db", 0, &json), AA_ENOENT);
  assert_int_equal(aa_store_runs_json(NULL, 0, &json), AA_EINVAL);
  /* Bad arguments to the writers change nothing. */
  st = open_store(":memory:", 0);
  int64_t id = 5;
  assert_int_equal(aa_store_begin_run(st, NULL, &id), AA_EINVAL);
  assert_int_equal(id, 0);
  aa_pool_stats p;
  fill_stats(&p, "host", 1, 1, 1);
  assert_int_equal(aa_store_snapshot(st, &p), AA_ENOENT); /* no run yet */
  begin(st, "m");
  p.version = 42;
  assert_int_equal(aa_store_snapshot(st, &p), AA_EINVAL);
  fill_stats(&p, "host", 1, 1, 1);
  p.class_count = AA_MAX_CLASSES + 1;
  assert_int_equal(aa_store_snapshot(st, &p), AA_EINVAL);
  assert_int_equal(aa_store_snapshot(st, NULL), AA_EINVAL);
  assert_int_equal(aa_store_policy_change(st, "", 1, 2, NULL, NULL), AA_EINVAL);
  assert_int_equal(aa_store_policy_change(st, "Bad Source", 1, 2, NULL, NULL), AA_EINVAL);
  assert_int_equal(aa_store_policy_change(st, NULL, 1, 2, NULL, NULL), AA_EINVAL);
  assert_int_equal(aa_store_policy_change(st, "abcdefghijabcdefghijabcdefghijab", 1, 2, NULL, NULL),
                   AA_EINVAL);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  aa_store_stats s;
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.snapshots_written, 0);
  assert_int_equal(s.snapshots_dropped, 4);
  assert_int_equal(s.policy_changes_dropped, 4);
  assert_int_equal(s.enabled, 1);
  assert_int_equal(aa_store_close(st), AA_OK);
}

/* Reads a whole file into a malloc'd buffer (for byte-for-byte checks). */
static unsigned char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  long n;
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  n = ftell(f);
  assert_true(n >= 0);
  rewind(f);
  buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* A newer schema in a rollback-journal file is refused before anything in
 * it changes: the file is byte-identical afterwards (no switch to WAL) and
 * no -wal file appears. */
static void test_store_newer_schema_left_byte_identical(void **state) {
  (void)state;
  char path[300], side[320];
  db_file(path, sizeof path, "newer-rollback.db");
  sql_exec(path, "PRAGMA journal_mode=DELETE; CREATE TABLE meta(key TEXT);"
                 "INSERT INTO meta VALUES ('future'); PRAGMA user_version=99;");
  size_t before_len = 0, after_len = 0;
  unsigned char *before = slurp(path, &before_len);
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.quiet = true;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_ESTALE);
  assert_null(st);
  unsigned char *after = slurp(path, &after_len);
  assert_int_equal(before_len, after_len);
  assert_memory_equal(before, after, before_len);
  snprintf(side, sizeof side, "%s-wal", path);
  assert_int_not_equal(access(side, F_OK), 0);
  free(before);
  free(after);
}

/* Paths SQLite cannot open (over its 512-byte file-name limit, or over the
 * store's own) are refused up front with AA_EINVAL: no file is created at
 * the path or at any shortened form of it. */
static void test_store_overlong_path_refused_no_file(void **state) {
  (void)state;
  char *path = malloc(5000);
  char target[300];
  size_t n;
  aa_store_config cfg;
  aa_store *st = NULL;
  assert_non_null(path);
  snprintf(target, sizeof target, "%s/long.db", g_dir);
  unlink(target);
  /* "<dir>/././.../long.db" names <dir>/long.db, in 600 and 4200 bytes */
  for (size_t want = 600; want <= 4200; want += 3600) {
    n = (size_t)snprintf(path, 5000, "%s", g_dir);
    while (n + 2 < want - 8)
      n += (size_t)snprintf(path + n, 5000 - n, "/.");
    snprintf(path + n, 5000 - n, "/long.db");
    aa_store_config_init(&cfg);
    cfg.path = path;
    cfg.quiet = true;
    assert_int_equal(aa_store_open(&cfg, &st), AA_EINVAL);
    assert_null(st);
    assert_int_not_equal(access(target, F_OK), 0);
  }
  free(path);
}

/* A database whose pages are damaged is named corrupt (AA_ECORRUPT, "data is
 * corrupt"), not an input/output error. */
static void test_store_corrupt_database_named(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "corrupt.db");
  aa_store *st = open_store(path, 0);
  begin(st, "m");
  assert_int_equal(aa_store_close(st), AA_OK);
  /* damage the schema page after the 100-byte header */
  FILE *f = fopen(path, "r+b");
  assert_non_null(f);
  assert_int_equal(fseek(f, 100, SEEK_SET), 0);
  for (int i = 0; i < 300; i++) fputc(0xA5, f);
  fclose(f);
  char *json = NULL;
  assert_int_equal(aa_store_runs_json(path, 0, &json), AA_ECORRUPT);
  assert_null(json);
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.quiet = true;
  assert_int_equal(aa_store_open(&cfg, &st), AA_ECORRUPT);
  assert_string_equal(aa_strerror(AA_ECORRUPT), "data is corrupt");
}

/* ------------------------------------------------------------------ round trip */

/* A file that is someone else's database is refused before anything in it
 * changes (not even the journal mode). */
static void test_store_foreign_database_untouched(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "foreign.db");
  sql_exec(path, "CREATE TABLE runs(x TEXT); INSERT INTO runs VALUES ('mine');");
  char txt[32];
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.quiet = true;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_EEXIST);
  assert_null(st);
  assert_int_equal(sql_int(path, "PRAGMA user_version"), 0);
  sql_text(path, "PRAGMA journal_mode", txt, sizeof txt);
  assert_string_equal(txt, "delete");
  assert_int_equal(sql_int(path, "SELECT count(*) FROM sqlite_master WHERE type='table'"), 1);
  sql_text(path, "SELECT x FROM runs", txt, sizeof txt);
  assert_string_equal(txt, "mine");
}

static void test_store_snapshot_round_trip(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "roundtrip.db");
  aa_store *st = open_store(path, 0);
  int64_t run = begin(st, "bert-base");
  aa_pool_stats in;
  fill_stats(&in, "device0", 42, 5, 4);
  in.bytes_reserved = UINT64_MAX - 5; /* survives the int64 column */
  assert_int_equal(aa_store_snapshot(st, &in), AA_OK);
  assert_int_equal(aa_store_flush(st, 10000), AA_OK);

  /* Read back with plain SQL, field by field. */
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_prepare_v2(db,
                                      "SELECT run_id, time_ns, pool, backend, device, telemetry,"
                                      " class_table_version, bytes_in_use, bytes_requested, bytes_reserved,"
                                      " peak_bytes_in_use, peak_bytes_reserved, limit_bytes, allocs, frees,"
                                      " cache_hits, cache_misses, backend_allocs, backend_frees,"
                                      " backend_failures, ooms, oom_retries, invalid_frees, pending_blocks,"
                                      " large_allocs, large_bytes_in_use, large_bytes_reserved,"
                                      " large_segments, class_count, hh_count, id FROM snapshots",
                                      -1, &s, NULL),
                   SQLITE_OK);
  assert_int_equal(sqlite3_step(s), SQLITE_ROW);
  assert_int_equal(sqlite3_column_int64(s, 0), run);
  assert_int_equal((uint64_t)sqlite3_column_int64(s, 1), in.time_ns);
  assert_string_equal((const char *)sqlite3_column_text(s, 2), "device0");
  assert_string_equal((const char *)sqlite3_column_text(s, 3), "host");
  assert_int_equal(sqlite3_column_int(s, 4), -1);
  assert_int_equal(sqlite3_column_int(s, 5), 1);
  assert_int_equal((uint64_t)sqlite3_column_int64(s, 6), in.class_table_version);
  const uint64_t *f = &in.bytes_in_use;
  for (int i = 0; i <= (int)(&in.large_segments - f); i++) {
    assert_int_equal((uint64_t)sqlite3_column_int64(s, 7 + i), f[i]);
  }
  assert_int_equal(sqlite3_column_int(s, 28), 5);
  assert_int_equal(sqlite3_column_int(s, 29), 4);
  int64_t sid = sqlite3_column_int64(s, 30);
  assert_int_equal(sqlite3_step(s), SQLITE_DONE);
  sqlite3_finalize(s);

  assert_int_equal(sqlite3_prepare_v2(db,
                                      "SELECT idx, block_size, cache_limit, prefill, retiring, slabs,"
                                      " blocks_in_use, blocks_free, bytes_in_use, bytes_requested,"
                                      " bytes_reserved, peak_bytes_in_use, allocs, frees, hits, misses"
                                      " FROM class_stats WHERE snapshot_id = ?1 ORDER BY idx",
                                      -1, &s, NULL),
                   SQLITE_OK);
  sqlite3_bind_int64(s, 1, sid);
  for (uint32_t c = 0; c < 5; c++) {
    const aa_class_stats *cs = &in.classes[c];
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), (int)c);
    assert_int_equal((uint64_t)sqlite3_column_int64(s, 1), cs->block_size);
    assert_int_equal((uint64_t)sqlite3_column_int64(s, 2), cs->cache_limit);
    assert_int_equal((uint64_t)sqlite3_column_int64(s, 3), cs->prefill);
    assert_int_equal((uint64_t)sqlite3_column_int64(s, 4), cs->retiring);
    const uint64_t *g = &cs->slabs;
    for (int i = 0; i <= (int)(&cs->misses - g); i++) {
      assert_int_equal((uint64_t)sqlite3_column_int64(s, 5 + i), g[i]);
    }
  }
  assert_int_equal(sqlite3_step(s), SQLITE_DONE);
  sqlite3_finalize(s);

  assert_int_equal(sqlite3_prepare_v2(db,
                                      "SELECT bucket, lower_bytes, count FROM histograms WHERE snapshot_id = ?1"
                                      " ORDER BY bucket",
                                      -1, &s, NULL),
                   SQLITE_OK);
  sqlite3_bind_int64(s, 1, sid);
  for (unsigned b = 0; b < AA_HIST_BUCKETS; b++) {
    if (in.hist[b] == 0) continue;
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), (int)b);
    assert_int_equal((uint64_t)sqlite3_column_int64(s, 1), aa_hist_bucket_lower(b));
    assert_int_equal((uint64_t)sqlite3_column_int64(s, 2), in.hist[b]);
  }
  assert_int_equal(sqlite3_step(s), SQLITE_DONE); /* sparse: zero buckets absent */
  sqlite3_finalize(s);

  assert_int_equal(sqlite3_prepare_v2(db,
                                      "SELECT rank, size, count FROM heavy_hitters WHERE snapshot_id = ?1"
                                      " ORDER BY rank",
                                      -1, &s, NULL),
                   SQLITE_OK);
  sqlite3_bind_int64(s, 1, sid);
  for (uint32_t r = 0; r < 4; r++) {
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), (int)r);
    assert_int_equal((uint64_t)sqlite3_column_int64(s, 1), in.hh[r].size);
    assert_int_equal((uint64_t)sqlite3_column_int64(s, 2), in.hh[r].count);
  }
  assert_int_equal(sqlite3_step(s), SQLITE_DONE);
  sqlite3_finalize(s);
  sqlite3_close(db);

  /* The JSON reader shows the same values. */
  aa_store_query q;
  aa_store_query_init(&q);
  q.detail = true;
  char *json = NULL;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  char want[128];
  snprintf(want, sizeof want, "\"run\":%lld,\"count\":1,", (long long)run);
  assert_non_null(strstr(json, want));
  snprintf(want, sizeof want, "\"allocs\":%llu,", (unsigned long long)in.allocs);
  assert_non_null(strstr(json, want));
  snprintf(want, sizeof want, "\"bytes_reserved\":%lld,", (long long)(int64_t)in.bytes_reserved);
  assert_non_null(strstr(json, want));
  assert_non_null(strstr(json, "\"pool\":\"device0\""));
  assert_int_equal(count_of(json, "\"block_size\":"), 5);
  assert_int_equal(count_of(json, "\"bucket\":"), (AA_HIST_BUCKETS + 2) / 3);
  assert_non_null(strstr(json, "{\"size\":1000,\"count\":542}"));
  free(json);
  /* Without detail, no per-class rows. */
  q.detail = false;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_null(strstr(json, "\"classes\""));
  free(json);
  assert_int_equal(aa_store_close(st), AA_OK);
}

/* ------------------------------------------------------------------ readers */

static void test_store_history_filters(void **state) {
  (void)state;
  char path[300];
  char *json = NULL;
  aa_pool_stats p;
  db_file(path, sizeof path, "history.db");
  aa_store *st = open_store(path, 0);
  int64_t r1 = begin(st, "m");
  for (int i = 1; i <= 6; i++) {
    fill_stats(&p, i % 2 ? "host" : "pinned", (uint64_t)i, 1, 0);
    assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  }
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  int64_t r2 = begin(st, "m");
  for (int i = 7; i <= 10; i++) {
    fill_stats(&p, "host", (uint64_t)i, 1, 0);
    assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  }
  assert_int_equal(aa_store_flush(st, 0), AA_OK);

  aa_store_query q;
  aa_store_query_init(&q);
  /* Default: the latest run. */
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":4,"));
  assert_int_equal(count_of(json, "\"allocs\":"), 4);
  free(json);
  /* An explicit run. */
  q.run_id = r1;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":6,"));
  free(json);
  /* Pool filter. */
  q.pool = "pinned";
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":3,"));
  assert_null(strstr(json, "\"pool\":\"host\""));
  free(json);
  q.pool = NULL;
  /* Limit keeps the newest, returned oldest first. */
  q.limit = 2;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":2,"));
  char *a5 = strstr(json, "\"allocs\":5006,");
  char *a6 = strstr(json, "\"allocs\":6006,");
  assert_non_null(a5);
  assert_non_null(a6);
  assert_true(a5 < a6);
  free(json);
  /* All runs, after_id as a cursor. */
  q.limit = 0;
  q.all_runs = true;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"run\":null,\"count\":10,"));
  free(json);
  q.after_id = sql_int(path, "SELECT min(id) FROM snapshots") + 7;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":2,"));
  free(json);
  q.after_id = 0;
  /* since: everything was written just now; a future bound gives nothing. */
  q.since_ms = sql_int(path, "SELECT max(ts_ms) FROM snapshots") + 1000;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":0,\"snapshots\":[]"));
  free(json);
  q.since_ms = sql_int(path, "SELECT min(ts_ms) FROM snapshots");
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":10,"));
  free(json);
  /* step: per pool and slice of time, the snapshot with the most reserved
   * (run 1: host seeds 1, 3, 5 and pinned 2, 4, 6; reserved grows with it) */
  q.since_ms = 0;
  q.all_runs = false;
  q.run_id = r1;
  q.step_ms = INT64_C(1) << 40;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":2,"));
  assert_non_null(strstr(json, "\"allocs\":5006,"));
  assert_non_null(strstr(json, "\"allocs\":6006,"));
  assert_null(strstr(json, "\"allocs\":1006,"));
  free(json);
  q.step_ms = 1; /* a slice per millisecond at most: at least the two */
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_true(count_of(json, "\"allocs\":") >= 2);
  free(json);
  q.step_ms = 0;
  /* Bad queries. */
  q.run_id = r2 + 100;
  q.all_runs = false;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_ENOENT);
  assert_null(json);
  q.run_id = 0;
  q.limit = AA_STORE_QUERY_MAX_LIMIT + 1;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_ERANGE);
  q.limit = 0;
  q.version = 0;
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_EINVAL);
  assert_int_equal(aa_store_history_json(path, NULL, &json), AA_EINVAL);
  assert_int_equal(aa_store_close(st), AA_OK);
}

static void test_store_runs_and_policy_log(void **state) {
  (void)state;
  char path[300];
  char *json = NULL;
  aa_pool_stats p;
  db_file(path, sizeof path, "runs.db");
  aa_store *st = open_store(path, 0);
  int64_t r1 = begin(st, "gpt \"small\"");
  assert_int_equal(aa_store_policy_change(st, "file", 0, 1, "loaded policies/gpt.json",
                                          "{\"pools\":{\"device\":{\"slab_size\":2097152}}}"),
                   AA_OK);
  assert_int_equal(aa_store_policy_change(st, "loop", 1, 2, "add class 1536: waste 31%",
                                          "not json at all"),
                   AA_OK);
  fill_stats(&p, "host", 1, 0, 0);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  int64_t r2 = begin(st, "second");
  assert_int_equal(aa_store_policy_change(st, "http", 2, 3, NULL, NULL), AA_OK);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);

  assert_int_equal(aa_store_runs_json(path, 0, &json), AA_OK);
  char *first = strstr(json, "\"model\":\"second\"");
  char *second = strstr(json, "\"model\":\"gpt \\\"small\\\"\"");
  assert_non_null(first);
  assert_non_null(second);
  assert_true(first < second); /* newest first */
  assert_non_null(strstr(json, "\"rank\":3"));
  assert_non_null(strstr(json, "\"policy_version\":7"));
  assert_non_null(strstr(json, "\"config\":{\"trace\":0,\"db\":\"x.db\"}"));
  assert_non_null(strstr(json, "\"pools\":[\"host\"]"));
  assert_int_equal(count_of(json, "\"ended_ms\":null"), 1); /* r1 ended at begin of r2 */
  free(json);
  assert_int_equal(aa_store_runs_json(path, 1, &json), AA_OK);
  assert_int_equal(count_of(json, "\"id\":"), 1);
  free(json);

  aa_store_query q;
  aa_store_query_init(&q);
  q.run_id = r1;
  q.detail = true;
  assert_int_equal(aa_store_policy_log_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":2,"));
  assert_non_null(strstr(json, "\"source\":\"file\",\"old_version\":0,\"new_version\":1"));
  assert_non_null(strstr(json, "\"policy\":{\"pools\":{\"device\":{\"slab_size\":2097152}}}"));
  assert_non_null(strstr(json, "\"policy\":\"not json at all\""));
  assert_non_null(strstr(json, "\"reason\":\"add class 1536: waste 31%\""));
  assert_true(strstr(json, "\"source\":\"file\"") < strstr(json, "\"source\":\"loop\""));
  free(json);
  q.run_id = 0; /* latest */
  q.detail = false;
  assert_int_equal(aa_store_policy_log_json(path, &q, &json), AA_OK);
  char want[64];
  snprintf(want, sizeof want, "\"run\":%lld,\"count\":1,", (long long)r2);
  assert_non_null(strstr(json, want));
  assert_non_null(strstr(json, "\"reason\":\"\""));
  assert_null(strstr(json, "\"policy\""));
  free(json);
  q.all_runs = true;
  assert_int_equal(aa_store_policy_log_json(path, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":3,"));
  free(json);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM runs WHERE ended_ms IS NULL"), 0);
}

static void test_store_histogram_latest(void **state) {
  (void)state;
  char path[300];
  uint64_t h[AA_HIST_BUCKETS];
  aa_pool_stats p;
  db_file(path, sizeof path, "hist.db");
  aa_store *st = open_store(path, 0);
  int64_t r1 = begin(st, "m");
  fill_stats(&p, "host", 1, 0, 0);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  memset(p.hist, 0, sizeof p.hist);
  p.hist[10] = 100;
  p.hist[20] = 5;
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK); /* latest of host */
  fill_stats(&p, "pinned", 1, 0, 0);
  memset(p.hist, 0, sizeof p.hist);
  p.hist[10] = 1;
  p.hist[191] = 7;
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);

  assert_int_equal(aa_store_histogram_latest(path, r1, "host", h), AA_OK);
  assert_int_equal(h[10], 100);
  assert_int_equal(h[20], 5);
  assert_int_equal(h[0], 0);
  assert_int_equal(h[191], 0);
  assert_int_equal(aa_store_histogram_latest(path, 0, NULL, h), AA_OK);
  assert_int_equal(h[10], 101);
  assert_int_equal(h[20], 5);
  assert_int_equal(h[191], 7);
  assert_int_equal(h[3], 0); /* the first host snapshot is not the latest */
  assert_int_equal(aa_store_histogram_latest(path, -1, "pinned", h), AA_OK);
  assert_int_equal(h[10], 1);
  assert_int_equal(aa_store_histogram_latest(path, r1, "device7", h), AA_ENOENT);
  assert_int_equal(h[10], 0);
  assert_int_equal(aa_store_histogram_latest(path, r1 + 5, NULL, h), AA_ENOENT);
  begin(st, "empty run");
  assert_int_equal(aa_store_histogram_latest(path, 0, NULL, h), AA_ENOENT);
  assert_int_equal(aa_store_histogram_latest(path, 0, NULL, NULL), AA_EINVAL);
  assert_int_equal(aa_store_close(st), AA_OK);
}

static void test_store_memory_database(void **state) {
  (void)state;
  aa_store *st = open_store(":memory:", 0);
  const char *rp = aa_store_db_path(st);
  assert_non_null(rp);
  assert_int_equal(strncmp(rp, "file:", 5), 0);
  begin(st, "mem");
  aa_pool_stats p;
  fill_stats(&p, "host", 3, 2, 2);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  char *json = NULL;
  aa_store_query q;
  aa_store_query_init(&q);
  assert_int_equal(aa_store_history_json(rp, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":1,"));
  free(json);
  assert_int_equal(aa_store_runs_json(rp, 0, &json), AA_OK);
  assert_non_null(strstr(json, "\"model\":\"mem\""));
  free(json);
  assert_int_equal(aa_store_close(st), AA_OK);
}

/* The writer is held on another connection's write lock while the queue
 * fills: what does not fit is dropped, counted, and the caller never waits. */
static void test_store_queue_full_drops(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "full.db");
  aa_store *st = open_store(path, 8);
  begin(st, "m");
  sqlite3 *blocker = NULL;
  assert_int_equal(sqlite3_open(path, &blocker), SQLITE_OK);
  assert_int_equal(sqlite3_exec(blocker, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);

  aa_pool_stats p;
  fill_stats(&p, "host", 1, 1, 1);
  int ok = 0, full = 0;
  for (int i = 0; i < 100; i++) {
    int rc = aa_store_snapshot(st, &p);
    if (rc == AA_OK) ok++;
    if (rc == AA_ELIMIT) full++;
  }
  assert_int_equal(ok + full, 100);
  assert_true(ok <= 16);
  assert_true(full >= 84);
  aa_store_stats s;
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.snapshots_dropped, (uint64_t)full);

  assert_int_equal(sqlite3_exec(blocker, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
  sqlite3_close(blocker);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.snapshots_written, (uint64_t)ok);
  assert_int_equal(s.snapshots_queued, 0);
  assert_int_equal(s.enabled, 1);
  char buf[1024];
  size_t n = aa_store_stats_json(&s, buf, sizeof buf);
  assert_true(n < sizeof buf);
  assert_non_null(strstr(buf, "\"enabled\":true"));
  char want[64];
  snprintf(want, sizeof want, "\"snapshots_dropped\":%d,", full);
  assert_non_null(strstr(buf, want));
  assert_int_equal(aa_store_stats_json(&s, buf, 10), n); /* truncation reports the need */
  assert_int_equal(strlen(buf), 9);
  assert_int_equal(aa_store_close(st), AA_OK);
  /* The per-run counters made it into the runs row. */
  char sql[128];
  snprintf(sql, sizeof sql, "SELECT snapshots_dropped FROM runs");
  assert_int_equal(sql_int(path, sql), full);
  assert_int_equal(sql_int(path, "SELECT snapshots_written FROM runs"), ok);
}

/* Readers run on their own connections while the writer commits. */
typedef struct reader_ctx {
  const char *path;
  _Atomic int stop;
  _Atomic int calls;
  int errors;
  int went_back;
} reader_ctx;

static void *reader_main(void *arg) {
  reader_ctx *c = arg;
  int last = 0;
  while (!atomic_load(&c->stop)) {
    aa_store_query q;
    aa_store_query_init(&q);
    q.limit = 1000;
    char *json = NULL;
    int rc = aa_store_history_json(c->path, &q, &json);
    c->calls++;
    if (rc != AA_OK) {
      c->errors++;
      continue;
    }
    const char *k = strstr(json, "\"count\":");
    int n = k != NULL ? atoi(k + 8) : -1;
    if (n < last) c->went_back++;
    last = n;
    free(json);
    rc = aa_store_runs_json(c->path, 0, &json);
    if (rc != AA_OK) c->errors++;
    free(json);
    uint64_t h[AA_HIST_BUCKETS];
    rc = aa_store_histogram_latest(c->path, 0, NULL, h);
    if (rc != AA_OK && rc != AA_ENOENT) c->errors++;
  }
  return NULL;
}

static void readers_while_writing(const char *path) {
  aa_store *st = open_store(path, 0);
  begin(st, "concurrent");
  reader_ctx c;
  memset(&c, 0, sizeof c);
  c.path = aa_store_db_path(st);
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, reader_main, &c), 0);
  aa_pool_stats p;
  for (int i = 1; i <= 300; i++) {
    fill_stats(&p, "host", (uint64_t)i, 4, 2);
    assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
    if (i % 20 == 0) {
      assert_int_equal(aa_store_flush(st, 0), AA_OK);
      /* Let the reader finish a pass between batches (at most 2 s), so
       * reads and writes interleave however the scheduler runs us. */
      int seen = atomic_load(&c.calls);
      for (int w = 0; w < 2000 && atomic_load(&c.calls) == seen; w++)
        usleep(1000);
    }
  }
  atomic_store(&c.stop, 1);
  pthread_join(th, NULL);
  assert_true(c.calls > 0);
  assert_int_equal(c.errors, 0);
  assert_int_equal(c.went_back, 0);
  aa_store_stats s;
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.snapshots_written, 300);
  assert_int_equal(aa_store_close(st), AA_OK);
}

static void test_store_readers_while_writing(void **state) {
  (void)state;
  char path[300];
  db_file(path, sizeof path, "concurrent.db");
  readers_while_writing(path);
  readers_while_writing(":memory:");
}

/* Whether path's -wal or -shm file exists. */
static bool side_files(const char *path) {
  char side[PATH_MAX + 8];
  snprintf(side, sizeof side, "%.*s-wal", PATH_MAX, path);
  if (access(side, F_OK) == 0) return true;
  snprintf(side, sizeof side, "%.*s-shm", PATH_MAX, path);
  return access(side, F_OK) == 0;
}

/* The readers (what adaptalloc-replay and /history use) leave no -wal or
 * -shm file beside a database nobody else has open, on success and on
 * refusal; beside a live writer's database they read what it commits and
 * leave its files alone. */
static void test_store_readers_leave_no_wal_files(void **state) {
  (void)state;
  char path[300];
  char *json = NULL;
  uint64_t h[AA_HIST_BUCKETS];
  uint64_t w = 0, d = 0, cut = 0;
  aa_pool_stats p;
  aa_store_query q;
  db_file(path, sizeof path, "tidy.db");

  aa_store *st = open_store(path, 0);
  begin(st, "tidy");
  fill_stats(&p, "host", 1, 2, 1);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_false(side_files(path)); /* the writer's close removes them */

  assert_int_equal(aa_store_runs_json(path, 0, &json), AA_OK);
  assert_non_null(strstr(json, "\"model\":\"tidy\""));
  free(json);
  assert_false(side_files(path));
  aa_store_query_init(&q);
  assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
  assert_int_equal(count_of(json, "\"pool\":\"host\""), 1);
  free(json);
  assert_int_equal(aa_store_policy_log_json(path, &q, &json), AA_OK);
  free(json);
  assert_int_equal(aa_store_histogram_latest(path, 0, NULL, h), AA_OK);
  assert_int_equal(aa_store_trace_lost(path, 0, &w, &d, &cut), AA_OK);
  assert_false(side_files(path));

  /* a live writer: the readers see each commit; its files stay its own */
  st = open_store(path, 0);
  begin(st, "tidy-live");
  for (int i = 2; i <= 3; i++) {
    fill_stats(&p, "host", (uint64_t)i, 2, 1);
    assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
    assert_int_equal(aa_store_flush(st, 0), AA_OK);
    assert_true(side_files(path));
    aa_store_query_init(&q);
    q.all_runs = true;
    q.limit = 100;
    assert_int_equal(aa_store_history_json(path, &q, &json), AA_OK);
    assert_int_equal(count_of(json, "\"pool\":\"host\""), i);
    free(json);
    assert_true(side_files(path));
  }
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_false(side_files(path));

  /* refused (not an adaptalloc database), and tidy all the same */
  char other[300];
  db_file(other, sizeof other, "foreign-wal.db");
  sql_exec(other, "PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES(1);");
  assert_false(side_files(other));
  assert_int_equal(aa_store_runs_json(other, 0, &json), AA_ENOENT);
  assert_null(json);
  assert_false(side_files(other));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_migrates_empty_file),
      cmocka_unit_test(test_store_reopen_keeps_data),
      cmocka_unit_test(test_store_refuses_newer_schema),
      cmocka_unit_test(test_store_region_column),
      cmocka_unit_test(test_store_run_ranks_and_v4_migration),
      cmocka_unit_test(test_store_rejects_bad_config),
      cmocka_unit_test(test_store_newer_schema_left_byte_identical),
      cmocka_unit_test(test_store_overlong_path_refused_no_file),
      cmocka_unit_test(test_store_corrupt_database_named),
      cmocka_unit_test(test_store_foreign_database_untouched),
      cmocka_unit_test(test_store_snapshot_round_trip),
      cmocka_unit_test(test_store_history_filters),
      cmocka_unit_test(test_store_runs_and_policy_log),
      cmocka_unit_test(test_store_histogram_latest),
      cmocka_unit_test(test_store_memory_database),
      cmocka_unit_test(test_store_queue_full_drops),
      cmocka_unit_test(test_store_readers_while_writing),
      cmocka_unit_test(test_store_readers_leave_no_wal_files),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
