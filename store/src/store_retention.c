/*
 * store_retention.c — keeping the database within max_age_s and max_bytes:
 * deleting rows older than the age limit, then the oldest rows until the
 * file is under 3/4 of the size limit, incremental vacuum and a WAL
 * checkpoint, and the size measurement. Runs on the writer thread only.
 *
 * Entry points: aa__store_retention; aa__store_trace_bound (the trace
 * table as a ring of trace_max_events rows); aa__store_db_used_bytes.
 */
#include <stdio.h>
#include <string.h>

#include "store_internal.h"

/* ------------------------------------------------------------------ retention */

static int q_int(aa_store *st, const char *sql, int64_t arg, bool has_arg,
                 int64_t *out, bool *is_null) {
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
  if (rc != SQLITE_OK) goto out;
  if (has_arg) sqlite3_bind_int64(s, 1, arg);
  rc = aa__store_step(s, &st->fault);
  if (rc == SQLITE_ROW) {
    if (is_null != NULL) *is_null = sqlite3_column_type(s, 0) == SQLITE_NULL;
    *out = sqlite3_column_int64(s, 0);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    if (is_null != NULL) *is_null = true;
    *out = 0;
    rc = SQLITE_OK;
  }
out:
  sqlite3_finalize(s);
  return rc;
}

static int exec_changes(aa_store *st, const char *sql, int64_t arg,
                        uint64_t *deleted) {
  sqlite3_stmt *s = NULL;
  int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
  if (rc != SQLITE_OK) goto out;
  sqlite3_bind_int64(s, 1, arg);
  rc = aa__store_step(s, &st->fault);
  if (rc == SQLITE_DONE || rc == SQLITE_ROW) {
    rc = SQLITE_OK;
    *deleted += (uint64_t)sqlite3_changes64(st->db);
  }
out:
  sqlite3_finalize(s);
  return rc;
}

int aa__store_db_used_bytes(aa_store *st, int64_t *used) {
  int64_t pages = 0, freel = 0, psize = 0;
  int rc = q_int(st, "PRAGMA page_count", 0, false, &pages, NULL);
  if (rc == SQLITE_OK) rc = q_int(st, "PRAGMA freelist_count", 0, false, &freel, NULL);
  if (rc == SQLITE_OK) rc = q_int(st, "PRAGMA page_size", 0, false, &psize, NULL);
  *used = (pages - freel) * psize;
  return rc;
}

/* Deletes the oldest `frac` of the rows of a table by id. */
static int trim_oldest(aa_store *st, const char *table, double frac,
                       uint64_t *deleted) {
  char sql[160];
  int64_t lo = 0, hi = 0;
  bool null = true;
  snprintf(sql, sizeof sql, "SELECT min(id) FROM %s", table);
  int rc = q_int(st, sql, 0, false, &lo, &null);
  if (rc != SQLITE_OK || null) return rc;
  snprintf(sql, sizeof sql, "SELECT max(id) FROM %s", table);
  rc = q_int(st, sql, 0, false, &hi, &null);
  if (rc != SQLITE_OK || null) return rc;
  int64_t span = hi - lo + 1;
  int64_t cut = lo + (int64_t)((double)span * frac + 0.999);
  if (cut <= lo) cut = lo + 1;
  snprintf(sql, sizeof sql, "DELETE FROM %s WHERE id < ?1", table);
  rc = exec_changes(st, sql, cut, deleted);
  if (rc == SQLITE_OK && strcmp(table, "trace_events") == 0) {
    uint64_t ignored = 0;
    rc = exec_changes(st, "DELETE FROM trace_batches WHERE last_id < ?1", cut,
                      &ignored);
  }
  return rc;
}

int aa__store_retention(aa_store *st) {
  uint64_t deleted = 0;
  int64_t used = 0;
  const char *what = "applying retention";
  int rc = SQLITE_OK;

  if (st->cfg.max_age_s > 0) {
    int64_t cutoff = aa__store_wall_ms() - (int64_t)st->cfg.max_age_s * 1000;
    int64_t last = 0;
    bool null = true;
    rc = aa__store_w_exec(st, "BEGIN IMMEDIATE");
    if (rc != SQLITE_OK) goto fail;
    rc = exec_changes(st, "DELETE FROM snapshots WHERE ts_ms < ?1", cutoff,
                      &deleted);
    if (rc != SQLITE_OK) goto fail;
    rc = exec_changes(st, "DELETE FROM policy_changes WHERE ts_ms < ?1",
                      cutoff, &deleted);
    if (rc != SQLITE_OK) goto fail;
    rc = q_int(st, "SELECT max(last_id) FROM trace_batches WHERE ts_ms < ?1",
               cutoff, true, &last, &null);
    if (rc != SQLITE_OK) goto fail;
    if (!null) {
      rc = exec_changes(st, "DELETE FROM trace_events WHERE id <= ?1", last,
                        &deleted);
      if (rc != SQLITE_OK) goto fail;
      uint64_t ignored = 0;
      rc = exec_changes(st, "DELETE FROM trace_batches WHERE last_id <= ?1",
                        last, &ignored);
      if (rc != SQLITE_OK) goto fail;
    }
    rc = aa__store_w_exec(st, "COMMIT");
    if (rc != SQLITE_OK) goto fail;
  }

  rc = aa__store_db_used_bytes(st, &used);
  if (rc != SQLITE_OK) goto fail;
  if (st->cfg.max_bytes > 0 && (uint64_t)used > st->cfg.max_bytes) {
    /* Trim to 3/4 of the limit so that retention does not run on every
     * commit once the database is full. */
    double target = (double)st->cfg.max_bytes * 0.75;
    for (int pass = 0; pass < 4 && (uint64_t)used > st->cfg.max_bytes * 3 / 4;
         pass++) {
      double frac = ((double)used - target) / (double)used;
      if (frac < 0.01) frac = 0.01;
      uint64_t before = deleted;
      rc = aa__store_w_exec(st, "BEGIN IMMEDIATE");
      if (rc != SQLITE_OK) goto fail;
      rc = trim_oldest(st, "trace_events", frac, &deleted);
      if (rc != SQLITE_OK) goto fail;
      rc = trim_oldest(st, "snapshots", frac, &deleted);
      if (rc != SQLITE_OK) goto fail;
      rc = aa__store_w_exec(st, "COMMIT");
      if (rc != SQLITE_OK) goto fail;
      rc = aa__store_db_used_bytes(st, &used);
      if (rc != SQLITE_OK) goto fail;
      if (deleted == before) break; /* nothing left to delete */
    }
  }
  if (deleted > 0) {
    what = "vacuuming";
    rc = aa__store_w_exec(st, "PRAGMA incremental_vacuum");
    if (rc != SQLITE_OK) goto fail;
    if (!st->memory) {
      what = "checkpointing";
      rc = aa__store_w_exec(st, "PRAGMA wal_checkpoint(TRUNCATE)");
      if (rc != SQLITE_OK) goto fail;
    }
    atomic_fetch_add(&st->rows_deleted, deleted);
  }
  atomic_store(&st->db_bytes, (uint64_t)(used > 0 ? used : 0));
  atomic_fetch_add(&st->retention_runs, 1);
  return SQLITE_OK;
fail:
  aa__store_writer_fail(st, rc, what);
  return rc;
}

/* ------------------------------------------------------------------ the trace's bound */

/* The trace table's rows are ids min..max with no gap: rows are appended
 * with increasing ids and deleted only from the oldest (here, and by
 * retention, which deletes ids below a cut), so max - min + 1 counts them
 * in two index lookups. Rows beyond the bound are deleted oldest first,
 * each run's count added to its events_evicted. */
int aa__store_trace_bound(aa_store *st) {
  int64_t lo = 0, hi = 0;
  bool null = true;
  uint64_t evicted = 0;
  sqlite3_stmt *s = NULL;
  int rc = q_int(st, "SELECT min(id) FROM trace_events", 0, false, &lo, &null);
  if (rc != SQLITE_OK || null) return rc;
  rc = q_int(st, "SELECT max(id) FROM trace_events", 0, false, &hi, &null);
  if (rc != SQLITE_OK || null) return rc;
  uint64_t rows = (uint64_t)(hi - lo + 1), max = st->cfg.trace_max_events;
  if (max == 0 || rows <= max) return SQLITE_OK;
  int64_t cut = hi - (int64_t)max + 1; /* ids below it go */
  rc = sqlite3_prepare_v2(st->db,
                          "SELECT run_id, count(*) FROM trace_events WHERE id < ?1 GROUP BY run_id",
                          -1, &s, NULL);
  if (rc != SQLITE_OK) goto out;
  sqlite3_bind_int64(s, 1, cut);
  for (;;) {
    rc = aa__store_step(s, &st->fault);
    if (rc != SQLITE_ROW) break;
    char sql[160];
    int64_t run = sqlite3_column_int64(s, 0), n = sqlite3_column_int64(s, 1);
    snprintf(sql, sizeof sql,
             "UPDATE runs SET events_evicted = events_evicted + %lld WHERE id = %lld",
             (long long)n, (long long)run);
    rc = aa__store_w_exec(st, sql);
    if (rc != SQLITE_OK) goto out;
  }
  if (rc != SQLITE_DONE) goto out;
  sqlite3_finalize(s);
  s = NULL;
  rc = exec_changes(st, "DELETE FROM trace_events WHERE id < ?1", cut, &evicted);
  if (rc != SQLITE_OK) goto out;
  uint64_t ignored = 0;
  rc = exec_changes(st, "DELETE FROM trace_batches WHERE last_id < ?1", cut, &ignored);
  if (rc != SQLITE_OK) goto out;
  /* a batch the cut runs through starts at the cut now */
  rc = exec_changes(st, "UPDATE trace_batches SET first_id = ?1 WHERE first_id < ?1", cut,
                    &ignored);
  if (rc != SQLITE_OK) goto out;
  atomic_fetch_add(&st->events_evicted, evicted);
out:
  sqlite3_finalize(s);
  return rc;
}
