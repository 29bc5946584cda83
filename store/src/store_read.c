/*
 * store_read.c — the readers: runs, snapshot history and the policy audit log
 * as JSON, trace events and the latest histogram for the replay tool.
 *
 * Every reader opens its own read-only connection for the call (WAL lets it
 * read while a writer commits) and closes it before returning. JSON is built
 * by SQLite's JSON functions, so strings are escaped by SQLite and stored
 * JSON documents (run config, policies) are embedded as JSON when valid.
 * Entry points: aa_store_runs_json, aa_store_history_json,
 * aa_store_policy_log_json, aa_store_ooms_json, aa_store_trace_foreach, aa_store_histogram_latest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store_internal.h"

#define AA__DETAIL_MAX_LIMIT 1000

/* In shared-cache memory databases a table lock held by the writer shows up
 * as SQLITE_LOCKED, which busy_timeout does not cover: retry for a while. */
static bool locked(int rc) {
  return (rc & 0xff) == SQLITE_LOCKED || (rc & 0xff) == SQLITE_BUSY;
}

static void nap(void) {
  struct timespec ts = {0, 1000000};
  nanosleep(&ts, NULL);
}

static int rd_prepare(sqlite3 *db, const char *sql, sqlite3_stmt **out) {
  int rc;
  for (int i = 0;; i++) {
    rc = sqlite3_prepare_v2(db, sql, -1, out, NULL);
    if (!locked(rc) || i >= 2000) break;
    nap();
  }
  return rc;
}

static int rd_step(sqlite3_stmt *s) {
  int rc;
  for (int i = 0;; i++) {
    rc = sqlite3_step(s);
    if (!locked(rc) || i >= 2000) break;
    sqlite3_reset(s);
    nap();
  }
  return rc;
}

/* Opens a reader's connection; close it with aa__store_db_close_ro(path,
 * db, *tidy) (store_schema.c), which removes the -wal and -shm files the
 * open made beside the database when nobody else has it open. */
static int rd_open(const char *path, sqlite3 **db, bool *tidy) {
  *db = NULL;
  *tidy = false;
  if (path == NULL || path[0] == '\0') return AA_EINVAL;
  int err = aa__store_db_open_ro(path, db, tidy);
  if (err == AA_OK && strncmp(path, "file:", 5) == 0 &&
      strstr(path, "mode=memory") != NULL) {
    sqlite3_exec(*db, "PRAGMA read_uncommitted=1", NULL, NULL, NULL);
  }
  return err;
}

/* The error for a failed SQLite call: never AA_OK. */
static int rd_sqlerr(int rc) {
  int err = aa__store_err_from_sqlite(rc);
  return err == AA_OK ? AA_EIO : err;
}

/* Resolves run_id (<= 0: the latest). *out = 0 when there are no runs.
 * AA_ENOENT for an explicit id that does not exist. */
static int resolve_run(sqlite3 *db, int64_t run_id, int64_t *out) {
  sqlite3_stmt *s = NULL;
  int err = AA_OK;
  *out = 0;
  int rc = rd_prepare(db,
                      run_id > 0 ? "SELECT id FROM runs WHERE id = ?1"
                                 : "SELECT max(id) FROM runs",
                      &s);
  if (rc != SQLITE_OK) goto sqlfail;
  if (run_id > 0) sqlite3_bind_int64(s, 1, run_id);
  rc = rd_step(s);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int64(s, 0);
  } else if (rc == SQLITE_DONE) {
    if (run_id > 0) err = AA_ENOENT;
  } else {
    goto sqlfail;
  }
  goto out;
sqlfail:
  err = rd_sqlerr(rc);
out:
  sqlite3_finalize(s);
  return err;
}

/* A read of one run: the database open for reading and the run resolved.
 * rd_run_open: AA_ENOENT when run_id names no run or (run_id <= 0) there is
 * none yet, with everything it opened closed again; else rd_run_close(r)
 * closes it. */
typedef struct {
  const char *path;
  sqlite3 *db;
  bool tidy;
  int64_t run;
} rd_run;

static int rd_run_open(const char *path, int64_t run_id, rd_run *r) {
  r->path = path;
  r->run = 0;
  int err = rd_open(path, &r->db, &r->tidy);
  if (err != AA_OK) return err;
  err = resolve_run(r->db, run_id, &r->run);
  if (err == AA_OK && r->run == 0) err = AA_ENOENT;
  if (err != AA_OK) {
    aa__store_db_close_ro(path, r->db, r->tidy);
    r->db = NULL;
  }
  return err;
}

static void rd_run_close(rd_run *r) {
  aa__store_db_close_ro(r->path, r->db, r->tidy);
  r->db = NULL;
}

/* *has: whether table has a column of that name (an older schema may not). */
static int rd_has_column(sqlite3 *db, const char *table, const char *col, bool *has) {
  sqlite3_stmt *s = NULL;
  *has = false;
  int rc = rd_prepare(db, "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2", &s);
  if (rc == SQLITE_OK) {
    sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, col, -1, SQLITE_STATIC);
    rc = rd_step(s);
    *has = rc == SQLITE_ROW && sqlite3_column_int64(s, 0) > 0;
  }
  sqlite3_finalize(s);
  return rc == SQLITE_ROW ? AA_OK : rd_sqlerr(rc);
}

/* Runs a query whose single row, single column is the JSON text. */
static int json_result(sqlite3_stmt *s, char **json) {
  int rc = rd_step(s);
  if (rc != SQLITE_ROW) return rd_sqlerr(rc);
  const unsigned char *t = sqlite3_column_text(s, 0);
  int n = sqlite3_column_bytes(s, 0);
  if (t == NULL) return AA_EIO;
  char *out = malloc((size_t)n + 1);
  if (out == NULL) return AA_ENOMEM;
  memcpy(out, t, (size_t)n);
  out[n] = '\0';
  *json = out;
  return AA_OK;
}

static int query_check(const aa_store_query *q, char **json) {
  if (json == NULL) return AA_EINVAL;
  *json = NULL;
  if (q == NULL || q->version != AA_STORE_QUERY_VERSION) return AA_EINVAL;
  if (q->limit > AA_STORE_QUERY_MAX_LIMIT) return AA_ERANGE;
  if (q->detail && q->limit > AA__DETAIL_MAX_LIMIT) return AA_ERANGE;
  if (q->pool != NULL && strlen(q->pool) >= 32) return AA_EINVAL;
  return AA_OK;
}

#define JSON_OR_TEXT(col) \
  "CASE WHEN " col " IS NULL THEN NULL WHEN json_valid(" col ") THEN json(" col ") ELSE " col " END"

int aa_store_runs_json(const char *db_path, uint32_t limit, char **json) {
  sqlite3 *db = NULL;
  bool tidy = false;
  sqlite3_stmt *s = NULL;
  int err = AA_OK;
  if (json == NULL) return AA_EINVAL;
  *json = NULL;
  if (limit > AA_STORE_QUERY_MAX_LIMIT) return AA_ERANGE;
  if (limit == 0) limit = 100;
  err = rd_open(db_path, &db, &tidy);
  if (err != AA_OK) goto out;
  /* %s: the ranks; local_rank and world_size are schema 5's, an older file
   * (read here, never migrated) says null */
  static const char fmt[] =
      "SELECT json_object('runs', json(coalesce(json_group_array(json(j)), '[]')))"
      " FROM (SELECT json_object("
      "  'id', id, 'model', model, 'started_ms', started_ms,"
      "  'ended_ms', ended_ms, 'pid', pid, 'host', host, 'rank', rank, %s,"
      "  'policy_version', policy_version, 'library_version', library_version,"
      "  'mono_origin_ns', mono_origin_ns,"
      "  'config', " JSON_OR_TEXT("config") ","
                                            "  'snapshots', (SELECT count(*) FROM snapshots s WHERE s.run_id = r.id),"
                                            "  'pools', (SELECT json_group_array(pool) FROM"
                                            "            (SELECT DISTINCT pool FROM snapshots s WHERE s.run_id = r.id"
                                            "             ORDER BY pool)),"
                                            "  'snapshots_written', snapshots_written,"
                                            "  'snapshots_dropped', snapshots_dropped,"
                                            "  'events_written', events_written, 'events_dropped', events_dropped,"
                                            "  'policy_changes', (SELECT count(*) FROM policy_changes p"
                                            "                     WHERE p.run_id = r.id)"
                                            " ) AS j FROM runs r ORDER BY id DESC LIMIT ?1)";
  /* the newest columns first, then those of older schemas (5, then 4) */
  static const char *const cols[] = {
      "'local_rank', local_rank, 'world_size', world_size,"
      " 'ooms_written', ooms_written, 'ooms_dropped', ooms_dropped",
      "'local_rank', local_rank, 'world_size', world_size,"
      " 'ooms_written', NULL, 'ooms_dropped', NULL",
      "'local_rank', NULL, 'world_size', NULL, 'ooms_written', NULL, 'ooms_dropped', NULL"};
  char sql[sizeof fmt + 160];
  int rc = SQLITE_ERROR;
  for (size_t i = 0; i < sizeof cols / sizeof cols[0] && rc != SQLITE_OK; i++) {
    snprintf(sql, sizeof sql, fmt, cols[i]);
    rc = rd_prepare(db, sql, &s);
  }
  if (rc != SQLITE_OK) {
    err = rd_sqlerr(rc);
    goto out;
  }
  sqlite3_bind_int64(s, 1, limit);
  err = json_result(s, json);
out:
  sqlite3_finalize(s);
  aa__store_db_close_ro(db_path, db, tidy);
  return err;
}

#define SNAP_FIELDS                                                          \
  "'id', s.id, 'run', s.run_id, 'ts_ms', s.ts_ms, 'time_ns', s.time_ns,"     \
  " 'pool', s.pool, 'backend', s.backend, 'device', s.device,"               \
  " 'telemetry', s.telemetry, 'class_table_version', s.class_table_version," \
  " 'bytes_in_use', s.bytes_in_use, 'bytes_requested', s.bytes_requested,"   \
  " 'bytes_reserved', s.bytes_reserved,"                                     \
  " 'peak_bytes_in_use', s.peak_bytes_in_use,"                               \
  " 'peak_bytes_reserved', s.peak_bytes_reserved,"                           \
  " 'limit_bytes', s.limit_bytes, 'allocs', s.allocs, 'frees', s.frees,"     \
  " 'cache_hits', s.cache_hits, 'cache_misses', s.cache_misses,"             \
  " 'backend_allocs', s.backend_allocs, 'backend_frees', s.backend_frees,"   \
  " 'backend_failures', s.backend_failures, 'ooms', s.ooms,"                 \
  " 'oom_retries', s.oom_retries, 'invalid_frees', s.invalid_frees,"         \
  " 'pending_blocks', s.pending_blocks, 'large_allocs', s.large_allocs,"     \
  " 'large_bytes_in_use', s.large_bytes_in_use,"                             \
  " 'large_bytes_reserved', s.large_bytes_reserved,"                         \
  " 'large_segments', s.large_segments, 'class_count', s.class_count,"       \
  " 'hh_count', s.hh_count"

#define SNAP_DETAIL                                                           \
  ", 'classes', (SELECT json_group_array(json_object("                        \
  "    'block_size', c.block_size, 'cache_limit', c.cache_limit,"             \
  "    'prefill', c.prefill, 'retiring', c.retiring, 'slabs', c.slabs,"       \
  "    'blocks_in_use', c.blocks_in_use, 'blocks_free', c.blocks_free,"       \
  "    'bytes_in_use', c.bytes_in_use, 'bytes_requested', c.bytes_requested," \
  "    'bytes_reserved', c.bytes_reserved,"                                   \
  "    'peak_bytes_in_use', c.peak_bytes_in_use, 'allocs', c.allocs,"         \
  "    'frees', c.frees, 'hits', c.hits, 'misses', c.misses))"                \
  "  FROM (SELECT * FROM class_stats c WHERE c.snapshot_id = s.id"            \
  "        ORDER BY c.idx) c),"                                               \
  " 'hist', (SELECT json_group_array(json_object('bucket', h.bucket,"         \
  "    'lower', h.lower_bytes, 'count', h.count))"                            \
  "  FROM (SELECT * FROM histograms h WHERE h.snapshot_id = s.id"             \
  "        ORDER BY h.bucket) h),"                                            \
  " 'hh', (SELECT json_group_array(json_object('size', x.size,"               \
  "    'count', x.count))"                                                    \
  "  FROM (SELECT * FROM heavy_hitters x WHERE x.snapshot_id = s.id"          \
  "        ORDER BY x.rank) x)"

/* Shared by history and the policy log: the WHERE clause binds ?1 all runs,
 * ?2 run, ?3 since_ms, ?4 after_id, ?5 limit, ?6 pool. */
static int run_list_query(const char *db_path, const aa_store_query *q,
                          const char *head, const char *fields,
                          const char *tail, char **json) {
  sqlite3 *db = NULL;
  bool tidy = false;
  sqlite3_stmt *s = NULL;
  char *sql = NULL;
  int64_t run = 0;
  int err = rd_open(db_path, &db, &tidy);
  if (err != AA_OK) goto out;
  if (!q->all_runs) {
    err = resolve_run(db, q->run_id, &run);
    if (err != AA_OK) goto out;
  }
  size_t nh = strlen(head), nf = strlen(fields), nt = strlen(tail);
  sql = malloc(nh + nf + nt + 1);
  if (sql == NULL) {
    err = AA_ENOMEM;
    goto out;
  }
  memcpy(sql, head, nh);
  memcpy(sql + nh, fields, nf);
  memcpy(sql + nh + nf, tail, nt + 1);
  int rc = rd_prepare(db, sql, &s);
  if (rc != SQLITE_OK) {
    err = rd_sqlerr(rc);
    goto out;
  }
  sqlite3_bind_int(s, 1, q->all_runs ? 1 : 0);
  if (q->all_runs || run == 0) {
    sqlite3_bind_null(s, 2);
  } else {
    sqlite3_bind_int64(s, 2, run);
  }
  sqlite3_bind_int64(s, 3, q->since_ms);
  sqlite3_bind_int64(s, 4, q->after_id);
  sqlite3_bind_int64(s, 5, q->limit == 0 ? 100 : q->limit);
  if (q->pool != NULL) {
    sqlite3_bind_text(s, 6, q->pool, -1, SQLITE_STATIC);
  } else {
    sqlite3_bind_null(s, 6);
  }
  /* ?7 only in the snapshot query: elsewhere SQLITE_RANGE, harmless */
  sqlite3_bind_int64(s, 7, q->step_ms);
  err = json_result(s, json);
out:
  sqlite3_finalize(s);
  free(sql);
  aa__store_db_close_ro(db_path, db, tidy);
  return err;
}

int aa_store_history_json(const char *db_path, const aa_store_query *q,
                          char **json) {
  int err = query_check(q, json);
  if (err != AA_OK) return err;
  static const char head[] =
      "SELECT json_object('run', ?2, 'count', count(*),"
      " 'snapshots', json(coalesce(json_group_array(json(j)), '[]')))"
      " FROM (SELECT id, j FROM (SELECT s.id AS id, json_object(";
  static const char tail[] =
      ") AS j FROM snapshots s"
      "   WHERE (?1 OR s.run_id = ?2) AND s.ts_ms >= ?3 AND s.id > ?4"
      "     AND (?6 IS NULL OR s.pool = ?6)"
      /* step: the row with the most reserved per pool and slice of time
       * (SQLite gives a bare column the row of the max() aggregate) */
      "     AND (?7 <= 0 OR s.id IN (SELECT id FROM (SELECT id,"
      "       max(bytes_reserved) FROM snapshots WHERE (?1 OR run_id = ?2)"
      "       AND ts_ms >= ?3 AND id > ?4 AND (?6 IS NULL OR pool = ?6)"
      "       GROUP BY pool, ts_ms / ?7)))"
      "   ORDER BY s.id DESC LIMIT ?5) ORDER BY id ASC)";
  return run_list_query(db_path, q, head,
                        q->detail ? SNAP_FIELDS SNAP_DETAIL : SNAP_FIELDS,
                        tail, json);
}

int aa_store_policy_log_json(const char *db_path, const aa_store_query *q,
                             char **json) {
  int err = query_check(q, json);
  if (err != AA_OK) return err;
  static const char head[] =
      "SELECT json_object('run', ?2, 'count', count(*),"
      " 'changes', json(coalesce(json_group_array(json(j)), '[]')))"
      " FROM (SELECT id, j FROM (SELECT p.id AS id, json_object(";
  static const char tail[] =
      ") AS j FROM policy_changes p"
      "   WHERE (?1 OR p.run_id IS ?2) AND p.ts_ms >= ?3 AND p.id > ?4"
      "   ORDER BY p.id DESC LIMIT ?5) ORDER BY id ASC)";
  static const char base[] =
      "'id', p.id, 'run', p.run_id, 'ts_ms', p.ts_ms, 'source', p.source,"
      " 'old_version', p.old_version, 'new_version', p.new_version,"
      " 'reason', p.reason";
  static const char detail[] =
      "'id', p.id, 'run', p.run_id, 'ts_ms', p.ts_ms, 'source', p.source,"
      " 'old_version', p.old_version, 'new_version', p.new_version,"
      " 'reason', p.reason, 'policy', " JSON_OR_TEXT("p.policy");
  return run_list_query(db_path, q, head, q->detail ? detail : base, tail,
                        json);
}

int aa_store_ooms_json(const char *db_path, const aa_store_query *q, char **json) {
  int err = query_check(q, json);
  if (err != AA_OK) return err;
  static const char head[] =
      "SELECT json_object('run', ?2, 'count', count(*),"
      " 'ooms', json(coalesce(json_group_array(json(j)), '[]')))"
      " FROM (SELECT id, j FROM (SELECT o.id AS id, json_object(";
  static const char fields[] =
      "'id', o.id, 'run', o.run_id, 'ts_ms', o.ts_ms, 'pool', o.pool,"
      " 'request', o.request, 'record', " JSON_OR_TEXT("o.record");
  static const char tail[] =
      ") AS j FROM ooms o"
      "   WHERE (?1 OR o.run_id IS ?2) AND o.ts_ms >= ?3 AND o.id > ?4"
      "     AND (?6 IS NULL OR o.pool = ?6)"
      "   ORDER BY o.id DESC LIMIT ?5) ORDER BY id ASC)";
  return run_list_query(db_path, q, head, fields, tail, json);
}

/* A trace row holds what the store wrote: integers in the number columns
 * (seq may be NULL in rows of schema 1), one character as the op. AA_OK, or
 * AA_EPARSE with msg naming the row, the column and what it holds. */
static int check_trace_row(sqlite3_stmt *s, char *msg, size_t cap) {
  static const char *const names[] = {"time_ns", "op", "ptr", "size", "stream", "thread", "seq"};
  for (int c = 0; c < 7; c++) {
    int t = sqlite3_column_type(s, c);
    const char *kind = NULL;
    if (c == 1) {
      if (t != SQLITE_TEXT || sqlite3_column_bytes(s, 1) != 1)
        kind = "not one character";
    } else if (t != SQLITE_INTEGER && !(c == 6 && t == SQLITE_NULL)) {
      kind = t == SQLITE_TEXT    ? "text"
             : t == SQLITE_FLOAT ? "a real number"
             : t == SQLITE_BLOB  ? "a blob"
                                 : "null";
    }
    if (kind == NULL)
      continue;
    if (msg != NULL && cap > 0) {
      const unsigned char *v = sqlite3_column_text(s, c);
      char shown[44];
      size_t n = 0;
      for (; v != NULL && v[n] != '\0' && n < 40; n++)
        shown[n] = v[n] >= 0x20 && v[n] < 0x7f ? (char)v[n] : '?';
      shown[n] = '\0';
      snprintf(msg, cap,
               "trace row %lld: %s is %s ('%s'), not what the store writes (an integer%s): "
               "the row was not written by adaptalloc",
               (long long)sqlite3_column_int64(s, 7), names[c], kind, shown,
               c == 1 ? " code, one character" : "");
    }
    return AA_EPARSE;
  }
  return AA_OK;
}

int aa_store_trace_foreach(const char *db_path, int64_t run_id,
                           aa_store_trace_cb cb, void *user) {
  return aa_store_trace_read(db_path, run_id, cb, user, NULL, 0);
}

int aa_store_trace_read(const char *db_path, int64_t run_id, aa_store_trace_cb cb,
                        void *user, char *msg, size_t cap) {
  rd_run r;
  sqlite3_stmt *s = NULL;
  bool has_seq = false, has_frame = false;
  int rc = SQLITE_OK;
  if (msg != NULL && cap > 0) msg[0] = '\0';
  if (cb == NULL) return AA_EINVAL;
  int err = rd_run_open(db_path, run_id, &r);
  if (err != AA_OK) return err;
  /* seq is schema 2's, frame schema 7's: an older file reads as NULL */
  err = rd_has_column(r.db, "trace_events", "seq", &has_seq);
  if (err == AA_OK) err = rd_has_column(r.db, "trace_events", "frame", &has_frame);
  if (err != AA_OK) goto out;
  /* trace_batches gives the id range of the run's events; the range scan
   * on the rowid skips other runs' rows without an index on trace_events.
   * Schema 2 on: the events in the core's sequence order (the write order
   * is the order threads reached the ring, not that of their operations),
   * only those below the first one the run lost (a full ring), so that what
   * is read is a complete prefix of the run. A seq that is not an integer
   * passes the filter so that check_trace_row refuses its row by id (text
   * compares above every number: the filter would drop it unseen). */
  char sql[1024];
  snprintf(sql, sizeof sql,
           "SELECT time_ns, op, ptr, size, stream, thread, %s, id, %s"
           " FROM trace_events"
           " WHERE id BETWEEN"
           "   (SELECT min(first_id) FROM trace_batches WHERE run_id = ?1)"
           "   AND (SELECT max(last_id) FROM trace_batches WHERE run_id = ?1)"
           "  AND run_id = ?1%s",
           has_seq ? "seq" : "NULL", has_frame ? "frame" : "NULL",
           has_seq ? "  AND (seq IS NULL OR typeof(seq) <> 'integer' OR seq < coalesce("
                     "         (SELECT trace_cut_seq FROM runs WHERE id = ?1), seq + 1))"
                     " ORDER BY seq, id"
                   : " ORDER BY id");
  rc = rd_prepare(r.db, sql, &s);
  if (rc != SQLITE_OK) goto sqlfail;
  sqlite3_bind_int64(s, 1, r.run);
  while ((rc = rd_step(s)) == SQLITE_ROW) {
    err = check_trace_row(s, msg, cap);
    if (err != AA_OK) goto out;
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.time_ns = (uint64_t)sqlite3_column_int64(s, 0);
    const unsigned char *op = sqlite3_column_text(s, 1);
    ev.op = op != NULL ? (char)op[0] : '?';
    ev.ptr = (uint64_t)sqlite3_column_int64(s, 2);
    ev.size = (uint64_t)sqlite3_column_int64(s, 3);
    ev.stream = (uint64_t)sqlite3_column_int64(s, 4);
    ev.thread = (uint64_t)sqlite3_column_int64(s, 5);
    ev.seq = (uint64_t)sqlite3_column_int64(s, 6);
    ev.frame = (uint64_t)sqlite3_column_int64(s, 8);
    err = cb(user, &ev);
    if (err != 0) goto out;
  }
sqlfail:
  if (rc != SQLITE_DONE) err = rd_sqlerr(rc);
out:
  sqlite3_finalize(s);
  rd_run_close(&r);
  return err;
}

int aa_store_frames_foreach(const char *db_path, int64_t run_id, aa_store_frames_cb cb,
                            void *user) {
  rd_run r;
  sqlite3_stmt *s = NULL;
  bool has = false;
  int rc = SQLITE_DONE;
  if (db_path == NULL || cb == NULL) return AA_EINVAL;
  int err = rd_run_open(db_path, run_id, &r);
  if (err != AA_OK) return err;
  /* a database older than schema 7 has no call stacks: none to visit */
  err = rd_has_column(r.db, "trace_frames", "frames", &has);
  if (err != AA_OK || !has) goto out;
  rc = rd_prepare(r.db, "SELECT id, frames FROM trace_frames WHERE run_id = ?1 ORDER BY id", &s);
  if (rc != SQLITE_OK) goto sqlfail;
  sqlite3_bind_int64(s, 1, r.run);
  while ((rc = rd_step(s)) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(s, 1);
    err = cb(user, (uint64_t)sqlite3_column_int64(s, 0), t != NULL ? (const char *)t : "");
    if (err != 0) goto out;
  }
sqlfail:
  if (rc != SQLITE_DONE) err = rd_sqlerr(rc);
out:
  sqlite3_finalize(s);
  rd_run_close(&r);
  return err;
}

int aa_store_trace_lost(const char *db_path, int64_t run_id, uint64_t *written,
                        uint64_t *dropped, uint64_t *cut_seq) {
  rd_run r;
  sqlite3_stmt *s = NULL;
  bool has_cut = false;
  if (written != NULL) *written = 0;
  if (dropped != NULL) *dropped = 0;
  if (cut_seq != NULL) *cut_seq = 0;
  int err = rd_run_open(db_path, run_id, &r);
  if (err != AA_OK) return err;
  /* trace_cut_seq is schema 2's; an older file has nothing to say. */
  err = rd_has_column(r.db, "runs", "trace_cut_seq", &has_cut);
  if (err != AA_OK) goto out;
  int rc = rd_prepare(r.db,
                      has_cut ? "SELECT events_written, events_dropped, trace_cut_seq"
                                " FROM runs WHERE id = ?1"
                              : "SELECT events_written, events_dropped, NULL"
                                " FROM runs WHERE id = ?1",
                      &s);
  if (rc == SQLITE_OK) {
    sqlite3_bind_int64(s, 1, r.run);
    rc = rd_step(s);
  }
  if (rc != SQLITE_ROW) {
    err = rd_sqlerr(rc);
    goto out;
  }
  if (written != NULL) *written = (uint64_t)sqlite3_column_int64(s, 0);
  if (dropped != NULL) *dropped = (uint64_t)sqlite3_column_int64(s, 1);
  if (cut_seq != NULL) *cut_seq = (uint64_t)sqlite3_column_int64(s, 2);
out:
  sqlite3_finalize(s);
  rd_run_close(&r);
  return err;
}

int aa_store_histogram_latest(const char *db_path, int64_t run_id,
                              const char *pool_name,
                              uint64_t hist[AA_HIST_BUCKETS]) {
  rd_run r;
  sqlite3_stmt *s = NULL;
  int64_t snaps = 0;
  if (hist == NULL) return AA_EINVAL;
  memset(hist, 0, sizeof(uint64_t) * AA_HIST_BUCKETS);
  int err = rd_run_open(db_path, run_id, &r);
  if (err != AA_OK) return err;
  /* Which snapshots: the latest one of the pool, or of every pool. */
  static const char one[] =
      "WITH pick AS (SELECT max(id) AS id FROM snapshots"
      "              WHERE run_id = ?1 AND pool = ?2)";
  static const char all[] =
      "WITH pick AS (SELECT max(id) AS id FROM snapshots"
      "              WHERE run_id = ?1 GROUP BY pool)";
  char sql[512];
  snprintf(sql, sizeof sql,
           "%s SELECT -1, count(*) FROM pick WHERE id IS NOT NULL"
           " UNION ALL SELECT h.bucket, sum(h.count) FROM histograms h"
           " WHERE h.snapshot_id IN (SELECT id FROM pick) GROUP BY h.bucket",
           pool_name != NULL ? one : all);
  int rc = rd_prepare(r.db, sql, &s);
  if (rc != SQLITE_OK) goto sqlfail;
  sqlite3_bind_int64(s, 1, r.run);
  if (pool_name != NULL) sqlite3_bind_text(s, 2, pool_name, -1, SQLITE_STATIC);
  while ((rc = rd_step(s)) == SQLITE_ROW) {
    int64_t b = sqlite3_column_int64(s, 0);
    int64_t v = sqlite3_column_int64(s, 1);
    if (b < 0) {
      snaps = v;
    } else if (b < AA_HIST_BUCKETS) {
      hist[b] += (uint64_t)v;
    }
  }
sqlfail:
  if (rc != SQLITE_DONE) {
    err = rd_sqlerr(rc);
  } else if (snaps == 0) {
    err = AA_ENOENT;
  }
  if (err != AA_OK) memset(hist, 0, sizeof(uint64_t) * AA_HIST_BUCKETS);
  sqlite3_finalize(s);
  rd_run_close(&r);
  return err;
}
