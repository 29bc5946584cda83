/*
 * store.c — the store handle, its queue, the trace ring and the writer thread.
 *
 * Owns aa_store: the bounded item queue (mutex + condition variables; the
 * mutex is held only for list operations, never across SQLite), the lock-free
 * trace ring (multi-producer, single consumer, one sequence number per slot),
 * the writer thread that alone uses the write connection, retention, and the
 * fault path that disables the store with one logged line.
 * Entry points: aa_store_open, aa_store_snapshot, aa_store_policy_change,
 * aa_store_trace_push, aa_store_flush, aa_store_close.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store_internal.h"
#include "strbuf.h"

#define AA__STORE_MAX_PATH 4096
#define AA__STORE_MAX_TEXT 4096
#define AA__STORE_MAX_JSON (1u << 20)

/* ------------------------------------------------------------------ types */

typedef enum item_kind {
  ITEM_SNAPSHOT = 1,
  ITEM_POLICY = 2,
  ITEM_END_RUN = 3
} item_kind;

typedef struct item {
  struct item *next;
  item_kind kind;
  int64_t run_id;
  int64_t ts_ms;
  /* ITEM_POLICY */
  char source[32];
  uint64_t old_version;
  uint64_t new_version;
  char *reason;
  char *policy;
  /* ITEM_SNAPSHOT: one element */
  aa_pool_stats snap[];
} item;

typedef struct begin_req {
  struct begin_req *next;
  const aa_store_run_info *info;
  bool done;
  int err;
  int64_t run_id;
} begin_req;

typedef struct ring_slot {
  _Atomic uint64_t seq;
  int64_t run_id; /* the run current when the event was pushed */
  aa_trace_event ev;
} ring_slot;

typedef struct ring {
  uint64_t mask;
  ring_slot slots[];
} ring;

typedef struct writer_stmts {
  sqlite3_stmt *ins_run;
  sqlite3_stmt *end_run;
  sqlite3_stmt *upd_run;
  sqlite3_stmt *ins_snap;
  sqlite3_stmt *ins_class;
  sqlite3_stmt *ins_hist;
  sqlite3_stmt *ins_hh;
  sqlite3_stmt *ins_policy;
  sqlite3_stmt *ins_trace;
  sqlite3_stmt *ins_batch;
} writer_stmts;

struct aa_store {
  aa_store_config cfg;
  char *path;        /* as given */
  char *reader_path; /* what readers open (the path, or a memory URI) */
  bool memory;
  sqlite3 *db; /* the writer's connection; the writer thread owns it */
  writer_stmts ws;
  aa__store_fault fault;

  pthread_t thread;
  bool thread_started;
  pthread_mutex_t mu;
  pthread_cond_t wake; /* the writer waits here */
  pthread_cond_t done; /* flush / begin_run waiters wait here */

  /* under mu */
  item *head, *tail;
  uint32_t queued;
  begin_req *begins;
  bool stop;
  uint64_t flush_req; /* flush generations asked for */
  uint64_t flush_done;

  uint64_t fork_gen; /* g_fork_gen at open */
  _Atomic int64_t run_id;
  _Atomic int enabled;
  _Atomic int last_error;
  char last_error_msg[256]; /* written once, before last_error is set */

  _Atomic(ring *) ring;
  uint32_t ring_cap;
  _Alignas(64) _Atomic uint64_t ring_enq;
  _Alignas(64) _Atomic uint64_t ring_deq;

  _Alignas(64) _Atomic uint64_t snapshots_queued;
  _Atomic uint64_t snapshots_written;
  _Atomic uint64_t snapshots_dropped;
  _Atomic uint64_t policy_written;
  _Atomic uint64_t policy_dropped;
  _Atomic uint64_t events_written;
  _Atomic uint64_t events_dropped;
  /* The first sequence number the current run's trace lost (cut_run's;
   * UINT64_MAX = none): its trace is complete below it. Drops are rare
   * (a full ring, a disabled store), so a lock is fine here. */
  pthread_mutex_t cut_mu;
  int64_t cut_run;
  uint64_t cut_seq;
  _Atomic uint64_t transactions;
  _Atomic uint64_t retention_runs;
  _Atomic uint64_t rows_deleted;
  _Atomic uint64_t db_bytes;

  /* writer-only */
  uint64_t last_retention_ns;
  uint64_t base_snap_written, base_snap_dropped; /* at begin of current run */
  uint64_t base_ev_written, base_ev_dropped;
  int64_t counted_run; /* the run whose counters the writer keeps updated */
};

static _Atomic uint64_t g_memory_counter;

/* Bumped in the child of every fork(). A handle opened in another
 * generation belongs to the parent: its writer thread does not exist here and
 * its SQLite connection must not be touched (SQLite forbids carrying a
 * connection across fork), so the child's copy is inert. */
static _Atomic uint64_t g_fork_gen;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) { atomic_fetch_add(&g_fork_gen, 1); }

static void atfork_register(void) {
  pthread_atfork(NULL, NULL, on_fork_child);
}

/* ------------------------------------------------------------------ small */

static void item_free(item *it) {
  if (it == NULL) return;
  free(it->reason);
  free(it->policy);
  free(it);
}

static void count_dropped(aa_store *st, const item *it) {
  if (it->kind == ITEM_SNAPSHOT) {
    atomic_fetch_add(&st->snapshots_dropped, 1);
  } else if (it->kind == ITEM_POLICY) {
    atomic_fetch_add(&st->policy_dropped, 1);
  }
}

static char *dup_bounded(const char *s, size_t max, bool *too_long) {
  size_t n = strnlen(s, max + 1);
  if (n > max) {
    *too_long = true;
    return NULL;
  }
  char *d = malloc(n + 1);
  if (d != NULL) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

static void deadline_after(struct timespec *ts, uint32_t ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec += 1;
    ts->tv_nsec -= 1000000000L;
  }
}

static bool forked_copy(const aa_store *st) {
  return atomic_load_explicit(&g_fork_gen, memory_order_relaxed) != st->fork_gen;
}

static bool is_enabled(const aa_store *st) {
  return atomic_load_explicit(&st->enabled, memory_order_acquire) != 0 &&
         !forked_copy(st);
}

/* The queue length at which the writer is woken early. */
static uint32_t wake_mark(const aa_store *st) {
  uint32_t half = st->cfg.queue_capacity / 2;
  return half > 0 ? half : 1;
}

static void store_log(const aa_store_config *cfg, const char *line) {
  if (cfg->quiet) return;
  fprintf(stderr, "adaptalloc: store: %s\n", line);
}

/* ------------------------------------------------------------------ config */

void aa_store_config_init(aa_store_config *cfg) {
  if (cfg == NULL) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->version = AA_STORE_CONFIG_VERSION;
  cfg->queue_capacity = 256;
  cfg->trace_capacity = 65536;
  cfg->commit_interval_ms = 100;
  cfg->busy_timeout_ms = 5000;
  cfg->close_timeout_ms = 5000;
  cfg->retention_interval_ms = 10000;
}

void aa_store_query_init(aa_store_query *q) {
  if (q == NULL) return;
  memset(q, 0, sizeof *q);
  q->version = AA_STORE_QUERY_VERSION;
  q->limit = 100;
}

static uint32_t pow2_at_least(uint32_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

/* SQLite opens a file by its absolute name and refuses (SQLITE_CANTOPEN)
 * one longer than its VFS's mxPathname (512 on Unix). Checked before any
 * file is created, so a refused path leaves nothing behind and the message
 * names the real cause. */
static bool path_fits(const char *path, char *msg, size_t cap) {
  size_t n = strnlen(path, AA__STORE_MAX_PATH);
  size_t abs_len = n;
  sqlite3_vfs *vfs = sqlite3_vfs_find(NULL);
  size_t limit = vfs != NULL && vfs->mxPathname > 0 ? (size_t)vfs->mxPathname
                                                    : 512;
  char cwd[AA__STORE_MAX_PATH];

  if (n >= AA__STORE_MAX_PATH) {
    snprintf(msg, cap, "the database path is over the limit of %d bytes",
             AA__STORE_MAX_PATH - 1);
    return false;
  }
  if (strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0)
    return true;
  if (path[0] != '/' && getcwd(cwd, sizeof cwd) != NULL)
    abs_len = strlen(cwd) + 1 + n;
  if (abs_len >= limit) {
    snprintf(msg, cap,
             "the database path is %zu bytes%s, over SQLite's limit of %zu "
             "bytes for a file name; use a shorter path",
             abs_len, path[0] != '/' ? " as an absolute path" : "",
             limit - 1);
    return false;
  }
  return true;
}

static int config_check(const aa_store_config *in, aa_store_config *out,
                        char *msg, size_t cap) {
  if (in == NULL) {
    snprintf(msg, cap, "config is NULL");
    return AA_EINVAL;
  }
  if (in->version != AA_STORE_CONFIG_VERSION) {
    snprintf(msg, cap, "config version %u, expected %u", in->version,
             AA_STORE_CONFIG_VERSION);
    return AA_EINVAL;
  }
  if (in->path == NULL || in->path[0] == '\0') {
    snprintf(msg, cap, "config path is empty");
    return AA_EINVAL;
  }
  if (!path_fits(in->path, msg, cap))
    return AA_EINVAL;
  if (in->queue_capacity > (1u << 20)) {
    snprintf(msg, cap, "queue_capacity %u is over 1048576", in->queue_capacity);
    return AA_EINVAL;
  }
  if (in->trace_capacity > (1u << 24)) {
    snprintf(msg, cap, "trace_capacity %u is over 16777216", in->trace_capacity);
    return AA_EINVAL;
  }
  *out = *in;
  if (out->queue_capacity == 0) out->queue_capacity = 256;
  if (out->trace_capacity == 0) out->trace_capacity = 65536;
  out->trace_capacity = pow2_at_least(out->trace_capacity < 2 ? 2 : out->trace_capacity);
  if (out->commit_interval_ms == 0) out->commit_interval_ms = 100;
  if (out->busy_timeout_ms == 0) out->busy_timeout_ms = 5000;
  if (out->close_timeout_ms == 0) out->close_timeout_ms = 5000;
  if (out->retention_interval_ms == 0) out->retention_interval_ms = 10000;
  return AA_OK;
}

/* ------------------------------------------------------------------ writer */

/* Steps a write statement through the fault counter and resets it. Returns
 * SQLITE_OK on success. */
static int w_step(aa_store *st, sqlite3_stmt *stmt) {
  int rc = aa__store_step(stmt, &st->fault);
  int rrc = sqlite3_reset(stmt);
  if (rc == SQLITE_DONE || rc == SQLITE_ROW) return SQLITE_OK;
  if (rc == AA__STORE_FAULT_RC && rrc == SQLITE_OK) return rc;
  return rc;
}

static int w_exec(aa_store *st, const char *sql) {
  return aa__store_exec(st->db, &st->fault, sql);
}

static int w_prepare(aa_store *st, const char *sql, sqlite3_stmt **out) {
  return sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, out,
                            NULL);
}

static void stmts_finalize(writer_stmts *ws) {
  sqlite3_finalize(ws->ins_run);
  sqlite3_finalize(ws->end_run);
  sqlite3_finalize(ws->upd_run);
  sqlite3_finalize(ws->ins_snap);
  sqlite3_finalize(ws->ins_class);
  sqlite3_finalize(ws->ins_hist);
  sqlite3_finalize(ws->ins_hh);
  sqlite3_finalize(ws->ins_policy);
  sqlite3_finalize(ws->ins_trace);
  sqlite3_finalize(ws->ins_batch);
  memset(ws, 0, sizeof *ws);
}

static int stmts_prepare(aa_store *st) {
  writer_stmts *ws = &st->ws;
  int rc;
#define PREP(field, sql)                  \
  rc = w_prepare(st, sql, &ws->field);    \
  if (rc != SQLITE_OK) goto out;
  PREP(ins_run,
       "INSERT INTO runs(model, started_ms, pid, host, rank, policy_version,"
       " config, library_version, mono_origin_ns)"
       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")
  PREP(end_run, "UPDATE runs SET ended_ms = ?2 WHERE id = ?1 AND ended_ms IS NULL")
  PREP(upd_run,
       "UPDATE runs SET snapshots_written = ?2, snapshots_dropped = ?3,"
       " events_written = ?4, events_dropped = ?5, trace_cut_seq = ?6 WHERE id = ?1")
  PREP(ins_snap,
       "INSERT INTO snapshots(run_id, ts_ms, time_ns, pool, backend, device,"
       " telemetry, class_table_version, bytes_in_use, bytes_requested,"
       " bytes_reserved, peak_bytes_in_use, peak_bytes_reserved, limit_bytes,"
       " allocs, frees, cache_hits, cache_misses, backend_allocs,"
       " backend_frees, backend_failures, ooms, oom_retries, invalid_frees,"
       " pending_blocks, large_allocs, large_bytes_in_use,"
       " large_bytes_reserved, large_segments, class_count, hh_count)"
       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
       " ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27,"
       " ?28, ?29, ?30, ?31)")
  PREP(ins_class,
       "INSERT INTO class_stats(snapshot_id, idx, block_size, cache_limit,"
       " prefill, retiring, slabs, blocks_in_use, blocks_free, bytes_in_use,"
       " bytes_requested, bytes_reserved, peak_bytes_in_use, allocs, frees,"
       " hits, misses) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11,"
       " ?12, ?13, ?14, ?15, ?16, ?17)")
  PREP(ins_hist,
       "INSERT INTO histograms(snapshot_id, bucket, lower_bytes, count)"
       " VALUES (?1, ?2, ?3, ?4)")
  PREP(ins_hh,
       "INSERT INTO heavy_hitters(snapshot_id, rank, size, count)"
       " VALUES (?1, ?2, ?3, ?4)")
  PREP(ins_policy,
       "INSERT INTO policy_changes(run_id, ts_ms, source, old_version,"
       " new_version, reason, policy) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")
  PREP(ins_trace,
       "INSERT INTO trace_events(run_id, time_ns, op, ptr, size, stream, thread, seq)"
       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")
  PREP(ins_batch,
       "INSERT INTO trace_batches(run_id, ts_ms, first_id, last_id, events)"
       " VALUES (?1, ?2, ?3, ?4, ?5)")
#undef PREP
out:
  return rc;
}

#define BIND_U64(stmt, i, v) sqlite3_bind_int64((stmt), (i), (sqlite3_int64)(v))

/* Disables the store after a SQLite failure: one log line, error recorded,
 * transaction rolled back. The caller counts what it was writing as dropped. */
static void writer_fail(aa_store *st, int rc, const char *what) {
  char msg[sizeof st->last_error_msg];
  char reason[200];
  aa__store_fault_message(&st->fault, st->db, rc, what, st->path, reason,
                          sizeof reason);
  snprintf(msg, sizeof msg,
           "disabled: %s; later snapshots and trace events are dropped",
           reason);
  if (sqlite3_get_autocommit(st->db) == 0) {
    sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
  }
  if (atomic_load(&st->last_error) == AA_OK) {
    memcpy(st->last_error_msg, msg, sizeof msg);
    int err = aa__store_err_from_sqlite(rc);
    if (err == AA_OK) err = AA_EIO;
    atomic_store_explicit(&st->last_error, err, memory_order_release);
    store_log(&st->cfg, msg);
  }
  atomic_store_explicit(&st->enabled, 0, memory_order_release);
}

static int write_begin_run(aa_store *st, begin_req *req) {
  const aa_store_run_info *in = req->info;
  sqlite3_stmt *s = st->ws.ins_run;
  char host[256] = "";
  char libver[32];
  int64_t prev = atomic_load(&st->run_id);
  int64_t now = aa__store_wall_ms();
  int rc = w_exec(st, "BEGIN IMMEDIATE");
  if (rc != SQLITE_OK) goto fail;
  if (prev > 0) {
    sqlite3_bind_int64(st->ws.end_run, 1, prev);
    sqlite3_bind_int64(st->ws.end_run, 2, now);
    rc = w_step(st, st->ws.end_run);
    if (rc != SQLITE_OK) goto fail;
  }
  if (in->host != NULL) {
    snprintf(host, sizeof host, "%s", in->host);
  } else if (gethostname(host, sizeof host - 1) != 0) {
    snprintf(host, sizeof host, "unknown");
  }
  host[sizeof host - 1] = '\0';
  snprintf(libver, sizeof libver, "%d.%d.%d", AA_VERSION_MAJOR,
           AA_VERSION_MINOR, AA_VERSION_PATCH);
  sqlite3_bind_text(s, 1, in->model != NULL ? in->model : "default", -1,
                    SQLITE_TRANSIENT);
  sqlite3_bind_int64(s, 2, now);
  sqlite3_bind_int64(s, 3, in->pid != 0 ? in->pid : (int64_t)getpid());
  sqlite3_bind_text(s, 4, host, -1, SQLITE_TRANSIENT);
  if (in->rank >= 0) {
    sqlite3_bind_int(s, 5, in->rank);
  } else {
    sqlite3_bind_null(s, 5);
  }
  BIND_U64(s, 6, in->policy_version);
  if (in->config_json != NULL) {
    sqlite3_bind_text(s, 7, in->config_json, -1, SQLITE_TRANSIENT);
  } else {
    sqlite3_bind_null(s, 7);
  }
  sqlite3_bind_text(s, 8, libver, -1, SQLITE_TRANSIENT);
  BIND_U64(s, 9, aa_now_ns());
  rc = w_step(st, s);
  sqlite3_clear_bindings(s);
  if (rc != SQLITE_OK) goto fail;
  req->run_id = sqlite3_last_insert_rowid(st->db);
  rc = w_exec(st, "COMMIT");
  if (rc != SQLITE_OK) goto fail;
  atomic_fetch_add(&st->transactions, 1);
  st->counted_run = req->run_id;
  st->base_snap_written = atomic_load(&st->snapshots_written);
  st->base_snap_dropped = atomic_load(&st->snapshots_dropped);
  st->base_ev_written = atomic_load(&st->events_written);
  st->base_ev_dropped = atomic_load(&st->events_dropped);
  req->err = AA_OK;
  return SQLITE_OK;
fail:
  req->run_id = 0;
  writer_fail(st, rc, "starting a run");
  req->err = atomic_load(&st->last_error);
  return rc;
}

static int write_snapshot(aa_store *st, const item *it) {
  const aa_pool_stats *p = &it->snap[0];
  writer_stmts *ws = &st->ws;
  sqlite3_stmt *s = ws->ins_snap;
  int i = 1;
  sqlite3_bind_int64(s, i++, it->run_id);
  sqlite3_bind_int64(s, i++, it->ts_ms);
  BIND_U64(s, i++, p->time_ns);
  sqlite3_bind_text(s, i++, p->name, -1, SQLITE_STATIC);
  sqlite3_bind_text(s, i++, p->backend, -1, SQLITE_STATIC);
  sqlite3_bind_int(s, i++, p->device);
  sqlite3_bind_int(s, i++, (int)p->telemetry);
  BIND_U64(s, i++, p->class_table_version);
  BIND_U64(s, i++, p->bytes_in_use);
  BIND_U64(s, i++, p->bytes_requested);
  BIND_U64(s, i++, p->bytes_reserved);
  BIND_U64(s, i++, p->peak_bytes_in_use);
  BIND_U64(s, i++, p->peak_bytes_reserved);
  BIND_U64(s, i++, p->limit_bytes);
  BIND_U64(s, i++, p->allocs);
  BIND_U64(s, i++, p->frees);
  BIND_U64(s, i++, p->cache_hits);
  BIND_U64(s, i++, p->cache_misses);
  BIND_U64(s, i++, p->backend_allocs);
  BIND_U64(s, i++, p->backend_frees);
  BIND_U64(s, i++, p->backend_failures);
  BIND_U64(s, i++, p->ooms);
  BIND_U64(s, i++, p->oom_retries);
  BIND_U64(s, i++, p->invalid_frees);
  BIND_U64(s, i++, p->pending_blocks);
  BIND_U64(s, i++, p->large_allocs);
  BIND_U64(s, i++, p->large_bytes_in_use);
  BIND_U64(s, i++, p->large_bytes_reserved);
  BIND_U64(s, i++, p->large_segments);
  BIND_U64(s, i++, p->class_count);
  BIND_U64(s, i++, p->hh_count);
  int rc = w_step(st, s);
  if (rc != SQLITE_OK) goto out;
  sqlite3_int64 sid = sqlite3_last_insert_rowid(st->db);

  for (uint32_t c = 0; c < p->class_count; c++) {
    const aa_class_stats *cs = &p->classes[c];
    sqlite3_stmt *k = ws->ins_class;
    int j = 1;
    sqlite3_bind_int64(k, j++, sid);
    sqlite3_bind_int(k, j++, (int)c);
    BIND_U64(k, j++, cs->block_size);
    BIND_U64(k, j++, cs->cache_limit);
    BIND_U64(k, j++, cs->prefill);
    BIND_U64(k, j++, cs->retiring);
    BIND_U64(k, j++, cs->slabs);
    BIND_U64(k, j++, cs->blocks_in_use);
    BIND_U64(k, j++, cs->blocks_free);
    BIND_U64(k, j++, cs->bytes_in_use);
    BIND_U64(k, j++, cs->bytes_requested);
    BIND_U64(k, j++, cs->bytes_reserved);
    BIND_U64(k, j++, cs->peak_bytes_in_use);
    BIND_U64(k, j++, cs->allocs);
    BIND_U64(k, j++, cs->frees);
    BIND_U64(k, j++, cs->hits);
    BIND_U64(k, j++, cs->misses);
    rc = w_step(st, k);
    if (rc != SQLITE_OK) goto out;
  }
  for (unsigned b = 0; b < AA_HIST_BUCKETS; b++) {
    if (p->hist[b] == 0) continue;
    sqlite3_stmt *h = ws->ins_hist;
    sqlite3_bind_int64(h, 1, sid);
    sqlite3_bind_int(h, 2, (int)b);
    BIND_U64(h, 3, aa_hist_bucket_lower(b));
    BIND_U64(h, 4, p->hist[b]);
    rc = w_step(st, h);
    if (rc != SQLITE_OK) goto out;
  }
  for (uint32_t r = 0; r < p->hh_count; r++) {
    sqlite3_stmt *h = ws->ins_hh;
    sqlite3_bind_int64(h, 1, sid);
    sqlite3_bind_int(h, 2, (int)r);
    BIND_U64(h, 3, p->hh[r].size);
    BIND_U64(h, 4, p->hh[r].count);
    rc = w_step(st, h);
    if (rc != SQLITE_OK) goto out;
  }
out:
  sqlite3_clear_bindings(s); /* the pool name is bound SQLITE_STATIC */
  return rc;
}

static int write_policy(aa_store *st, const item *it) {
  sqlite3_stmt *s = st->ws.ins_policy;
  if (it->run_id > 0) {
    sqlite3_bind_int64(s, 1, it->run_id);
  } else {
    sqlite3_bind_null(s, 1);
  }
  sqlite3_bind_int64(s, 2, it->ts_ms);
  sqlite3_bind_text(s, 3, it->source, -1, SQLITE_STATIC);
  BIND_U64(s, 4, it->old_version);
  BIND_U64(s, 5, it->new_version);
  sqlite3_bind_text(s, 6, it->reason != NULL ? it->reason : "", -1,
                    SQLITE_STATIC);
  if (it->policy != NULL) {
    sqlite3_bind_text(s, 7, it->policy, -1, SQLITE_STATIC);
  } else {
    sqlite3_bind_null(s, 7);
  }
  int rc = w_step(st, s);
  sqlite3_clear_bindings(s);
  return rc;
}

static int write_end_run(aa_store *st, const item *it) {
  sqlite3_bind_int64(st->ws.end_run, 1, it->run_id);
  sqlite3_bind_int64(st->ws.end_run, 2, it->ts_ms);
  return w_step(st, st->ws.end_run);
}

/* Counts a trace event of `run` that will not be stored; its sequence
 * number bounds the part of the run's trace that is complete. */
static void trace_lost(aa_store *st, int64_t run, const aa_trace_event *ev) {
  atomic_fetch_add_explicit(&st->events_dropped, 1, memory_order_relaxed);
  if (run <= 0 || ev->seq == 0) return;
  pthread_mutex_lock(&st->cut_mu);
  if (st->cut_run != run) {
    st->cut_run = run;
    st->cut_seq = ev->seq;
  } else if (ev->seq < st->cut_seq) {
    st->cut_seq = ev->seq;
  }
  pthread_mutex_unlock(&st->cut_mu);
}

/* The first sequence number run's trace lost, UINT64_MAX when none. */
static uint64_t trace_cut_of(aa_store *st, int64_t run) {
  pthread_mutex_lock(&st->cut_mu);
  uint64_t cut = st->cut_run == run ? st->cut_seq : UINT64_MAX;
  pthread_mutex_unlock(&st->cut_mu);
  return cut;
}

/* Takes one published event out of the ring; false when the next slot is
 * empty or not yet published. Single consumer: the writer. */
static bool ring_pop(aa_store *st, ring *r, aa_trace_event *ev,
                     int64_t *run_id) {
  uint64_t pos = atomic_load_explicit(&st->ring_deq, memory_order_relaxed);
  ring_slot *slot = &r->slots[pos & r->mask];
  uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
  if (seq != pos + 1) return false;
  *ev = slot->ev;
  *run_id = slot->run_id;
  atomic_store_explicit(&slot->seq, pos + r->mask + 1, memory_order_release);
  atomic_store_explicit(&st->ring_deq, pos + 1, memory_order_release);
  return true;
}

/* Records the batch [first, last] of run in trace_batches. */
static int write_batch(aa_store *st, int64_t run, sqlite3_int64 first,
                       sqlite3_int64 last) {
  sqlite3_stmt *b = st->ws.ins_batch;
  sqlite3_bind_int64(b, 1, run);
  sqlite3_bind_int64(b, 2, aa__store_wall_ms());
  sqlite3_bind_int64(b, 3, first);
  sqlite3_bind_int64(b, 4, last);
  sqlite3_bind_int64(b, 5, last - first + 1);
  return w_step(st, b);
}

/* Writes the trace events pushed so far (up to the enqueue position seen at
 * entry) into the open transaction, with one trace_batches row per run in
 * it. *n gets how many rows were inserted (on failure: including the one
 * that failed). */
static int write_trace(aa_store *st, uint64_t *n) {
  ring *r = atomic_load_explicit(&st->ring, memory_order_acquire);
  int rc = SQLITE_OK;
  int64_t run = 0, batch_run = 0;
  *n = 0;
  if (r == NULL) return rc;
  uint64_t end = atomic_load_explicit(&st->ring_enq, memory_order_acquire);
  sqlite3_int64 first = 0, last = 0;
  unsigned spins = 0;
  aa_trace_event ev;
  while (atomic_load_explicit(&st->ring_deq, memory_order_relaxed) < end) {
    if (!ring_pop(st, r, &ev, &run)) {
      /* A producer has claimed the slot and is copying into it. */
      if (++spins > 10000) break;
      sched_yield();
      continue;
    }
    if (run <= 0) {
      atomic_fetch_add(&st->events_dropped, 1);
      continue;
    }
    if (run != batch_run && first != 0) {
      rc = write_batch(st, batch_run, first, last);
      if (rc != SQLITE_OK) return rc;
      first = 0;
    }
    batch_run = run;
    (*n)++;
    sqlite3_stmt *s = st->ws.ins_trace;
    char op[2] = {ev.op, '\0'};
    sqlite3_bind_int64(s, 1, run);
    BIND_U64(s, 2, ev.time_ns);
    sqlite3_bind_text(s, 3, op, 1, SQLITE_TRANSIENT);
    BIND_U64(s, 4, ev.ptr);
    BIND_U64(s, 5, ev.size);
    BIND_U64(s, 6, ev.stream);
    BIND_U64(s, 7, ev.thread);
    if (ev.seq != 0) {
      BIND_U64(s, 8, ev.seq);
    } else {
      sqlite3_bind_null(s, 8);
    }
    rc = w_step(st, s);
    if (rc != SQLITE_OK) return rc;
    last = sqlite3_last_insert_rowid(st->db);
    if (first == 0) first = last;
  }
  if (first != 0) rc = write_batch(st, batch_run, first, last);
  return rc;
}

/* Throws away what is in the ring (after a fault), counting it as dropped. */
static void drain_trace_dropped(aa_store *st) {
  ring *r = atomic_load_explicit(&st->ring, memory_order_acquire);
  aa_trace_event ev;
  int64_t run;
  if (r == NULL) return;
  while (ring_pop(st, r, &ev, &run)) atomic_fetch_add(&st->events_dropped, 1);
}

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

static int db_used_bytes(aa_store *st, int64_t *used) {
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

static int retention(aa_store *st) {
  uint64_t deleted = 0;
  int64_t used = 0;
  const char *what = "applying retention";
  int rc = SQLITE_OK;

  if (st->cfg.max_age_s > 0) {
    int64_t cutoff = aa__store_wall_ms() - (int64_t)st->cfg.max_age_s * 1000;
    int64_t last = 0;
    bool null = true;
    rc = w_exec(st, "BEGIN IMMEDIATE");
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
    rc = w_exec(st, "COMMIT");
    if (rc != SQLITE_OK) goto fail;
  }

  rc = db_used_bytes(st, &used);
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
      rc = w_exec(st, "BEGIN IMMEDIATE");
      if (rc != SQLITE_OK) goto fail;
      rc = trim_oldest(st, "trace_events", frac, &deleted);
      if (rc != SQLITE_OK) goto fail;
      rc = trim_oldest(st, "snapshots", frac, &deleted);
      if (rc != SQLITE_OK) goto fail;
      rc = w_exec(st, "COMMIT");
      if (rc != SQLITE_OK) goto fail;
      rc = db_used_bytes(st, &used);
      if (rc != SQLITE_OK) goto fail;
      if (deleted == before) break; /* nothing left to delete */
    }
  }
  if (deleted > 0) {
    what = "vacuuming";
    rc = w_exec(st, "PRAGMA incremental_vacuum");
    if (rc != SQLITE_OK) goto fail;
    if (!st->memory) {
      what = "checkpointing";
      rc = w_exec(st, "PRAGMA wal_checkpoint(TRUNCATE)");
      if (rc != SQLITE_OK) goto fail;
    }
    atomic_fetch_add(&st->rows_deleted, deleted);
  }
  atomic_store(&st->db_bytes, (uint64_t)(used > 0 ? used : 0));
  atomic_fetch_add(&st->retention_runs, 1);
  return SQLITE_OK;
fail:
  writer_fail(st, rc, what);
  return rc;
}

/* ------------------------------------------------------------------ the loop */

static void wake_writer(aa_store *st) { pthread_cond_signal(&st->wake); }

/* One writer cycle: begin-run requests, the queued items, the trace ring, in
 * one transaction; then retention when due. */
static void writer_cycle(aa_store *st, item *list, begin_req *begins,
                         bool flush) {
  int rc = SQLITE_OK;
  const char *what = "writing";
  uint64_t snaps = 0, pols = 0, evs = 0;

  for (begin_req *b = begins; b != NULL; b = b->next) {
    if (!is_enabled(st)) {
      b->err = atomic_load(&st->last_error);
      continue;
    }
    if (write_begin_run(st, b) == SQLITE_OK) {
      atomic_store(&st->run_id, b->run_id);
    }
  }
  if (!is_enabled(st)) goto dropped;

  bool have_ring = atomic_load_explicit(&st->ring, memory_order_acquire) !=
                       NULL &&
                   atomic_load(&st->ring_deq) != atomic_load(&st->ring_enq);
  if (list == NULL && !have_ring) goto maintenance;

  what = "starting a transaction";
  rc = w_exec(st, "BEGIN IMMEDIATE");
  if (rc != SQLITE_OK) goto fail;
  for (item *it = list; it != NULL; it = it->next) {
    if (it->kind == ITEM_SNAPSHOT) {
      what = "writing a snapshot";
      rc = write_snapshot(st, it);
      snaps++;
    } else if (it->kind == ITEM_POLICY) {
      what = "writing a policy change";
      rc = write_policy(st, it);
      pols++;
    } else {
      what = "ending a run";
      rc = write_end_run(st, it);
    }
    if (rc != SQLITE_OK) goto fail;
  }
  what = "writing trace events";
  rc = write_trace(st, &evs);
  if (rc != SQLITE_OK) goto fail;
  int64_t run = st->counted_run;
  if (run > 0) {
    sqlite3_stmt *u = st->ws.upd_run;
    sqlite3_bind_int64(u, 1, run);
    BIND_U64(u, 2, atomic_load(&st->snapshots_written) + snaps - st->base_snap_written);
    BIND_U64(u, 3, atomic_load(&st->snapshots_dropped) - st->base_snap_dropped);
    BIND_U64(u, 4, atomic_load(&st->events_written) + evs - st->base_ev_written);
    BIND_U64(u, 5, atomic_load(&st->events_dropped) - st->base_ev_dropped);
    uint64_t cut = trace_cut_of(st, run);
    if (cut != UINT64_MAX) {
      BIND_U64(u, 6, cut);
    } else {
      sqlite3_bind_null(u, 6);
    }
    what = "updating the run";
    rc = w_step(st, u);
    if (rc != SQLITE_OK) goto fail;
  }
  what = "committing";
  rc = w_exec(st, "COMMIT");
  if (rc != SQLITE_OK) goto fail;
  atomic_fetch_add(&st->transactions, 1);
  atomic_fetch_add(&st->snapshots_written, snaps);
  atomic_fetch_add(&st->policy_written, pols);
  atomic_fetch_add(&st->events_written, evs);
  goto maintenance;

fail:
  writer_fail(st, rc, what);
  /* What was in the failed transaction is lost. */
  atomic_fetch_add(&st->events_dropped, evs);
  goto dropped;

maintenance:
  if (st->cfg.max_bytes > 0 || st->cfg.max_age_s > 0) {
    uint64_t now = aa_now_ns();
    if (flush || st->last_retention_ns == 0 ||
        now - st->last_retention_ns >=
            (uint64_t)st->cfg.retention_interval_ms * 1000000u) {
      st->last_retention_ns = now;
      retention(st);
    }
  }
  if (!is_enabled(st)) drain_trace_dropped(st);
  for (item *it = list; it != NULL;) {
    item *next = it->next;
    item_free(it);
    it = next;
  }
  return;

dropped:
  for (item *it = list; it != NULL;) {
    item *next = it->next;
    count_dropped(st, it);
    item_free(it);
    it = next;
  }
  drain_trace_dropped(st);
}

static void *writer_main(void *arg) {
  aa_store *st = arg;
  pthread_mutex_lock(&st->mu);
  for (;;) {
    bool work = st->stop || st->begins != NULL ||
                st->flush_req != st->flush_done ||
                st->queued >= wake_mark(st);
    if (!work) {
      struct timespec ts;
      deadline_after(&ts, st->cfg.commit_interval_ms);
      pthread_cond_timedwait(&st->wake, &st->mu, &ts);
    }
    item *list = st->head;
    begin_req *begins = st->begins;
    uint64_t gen = st->flush_req;
    bool stop = st->stop;
    st->head = st->tail = NULL;
    st->queued = 0;
    st->begins = NULL;
    atomic_store(&st->snapshots_queued, 0);
    pthread_mutex_unlock(&st->mu);

    writer_cycle(st, list, begins, gen != st->flush_done);

    pthread_mutex_lock(&st->mu);
    for (begin_req *b = begins; b != NULL; b = b->next) b->done = true;
    st->flush_done = gen;
    pthread_cond_broadcast(&st->done);
    if (stop) break;
  }
  pthread_mutex_unlock(&st->mu);
  return NULL;
}

/* ------------------------------------------------------------------ public */

static void store_free(aa_store *st) {
  if (st == NULL) return;
  stmts_finalize(&st->ws);
  if (st->db != NULL) sqlite3_close_v2(st->db);
  for (item *it = st->head; it != NULL;) {
    item *next = it->next;
    item_free(it);
    it = next;
  }
  free(atomic_load(&st->ring));
  pthread_cond_destroy(&st->done);
  pthread_cond_destroy(&st->wake);
  pthread_mutex_destroy(&st->mu);
  pthread_mutex_destroy(&st->cut_mu);
  free(st->reader_path);
  free(st->path);
  free(st);
}

int aa_store_open(const aa_store_config *cfg, aa_store **out) {
  char msg[320] = "";
  aa_store *st = NULL;
  aa_store_config c;
  pthread_condattr_t ca;
  bool ca_init = false;
  int err = AA_OK;

  if (out == NULL) {
    snprintf(msg, sizeof msg, "cannot open: out is NULL");
    err = AA_EINVAL;
    goto out;
  }
  *out = NULL;
  err = config_check(cfg, &c, msg, sizeof msg);
  if (err != AA_OK) goto out;

  st = calloc(1, sizeof *st);
  if (st == NULL) {
    err = AA_ENOMEM;
    goto out;
  }
  pthread_mutex_init(&st->mu, NULL);
  pthread_mutex_init(&st->cut_mu, NULL);
  st->cut_seq = UINT64_MAX;
  pthread_condattr_init(&ca);
  ca_init = true;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&st->wake, &ca);
  pthread_cond_init(&st->done, &ca);
  st->cfg = c;
  st->path = strdup(c.path);
  st->memory = strcmp(c.path, ":memory:") == 0;
  if (st->memory) {
    char uri[96];
    snprintf(uri, sizeof uri, "file:adaptalloc-mem-%ld-%llu?mode=memory&cache=shared",
             (long)getpid(),
             (unsigned long long)atomic_fetch_add(&g_memory_counter, 1));
    st->reader_path = strdup(uri);
  } else {
    st->reader_path = strdup(c.path);
  }
  st->cfg.path = st->path;
  st->ring_cap = c.trace_capacity;
  pthread_once(&g_atfork_once, atfork_register);
  st->fork_gen = atomic_load(&g_fork_gen);
  atomic_store(&st->fault.remaining, c.fault_nth);
  if (st->path == NULL || st->reader_path == NULL) {
    err = AA_ENOMEM;
    goto out;
  }

  err = aa__store_db_open_rw(st->memory ? st->reader_path : st->path,
                             st->memory, c.busy_timeout_ms, &st->fault,
                             &st->db, msg, sizeof msg);
  if (err != AA_OK) goto out;
  int rc = stmts_prepare(st);
  if (rc != SQLITE_OK) {
    aa__store_fault_message(&st->fault, st->db, rc, "preparing statements",
                            st->path, msg, sizeof msg);
    err = aa__store_err_from_sqlite(rc);
    goto out;
  }
  {
    int64_t used = 0;
    rc = db_used_bytes(st, &used);
    if (rc != SQLITE_OK) {
      aa__store_fault_message(&st->fault, st->db, rc, "measuring the database",
                              st->path, msg, sizeof msg);
      err = aa__store_err_from_sqlite(rc);
      goto out;
    }
    atomic_store(&st->db_bytes, (uint64_t)(used > 0 ? used : 0));
  }
  atomic_store(&st->enabled, 1);
  if (pthread_create(&st->thread, NULL, writer_main, st) != 0) {
    snprintf(msg, sizeof msg, "cannot start the writer thread for %s", st->path);
    err = AA_ENOMEM;
    goto out;
  }
  st->thread_started = true;

out:
  if (ca_init) pthread_condattr_destroy(&ca);
  if (err != AA_OK) {
    if (msg[0] == '\0') snprintf(msg, sizeof msg, "%s", aa_strerror(err));
    if (!(cfg != NULL && cfg->quiet)) {
      fprintf(stderr, "adaptalloc: store: cannot open: %s (%s); the store is off\n",
              msg, aa_errname(err));
    }
    if (st != NULL) {
      st->thread_started = false;
      store_free(st);
    }
  } else {
    *out = st;
  }
  return err;
}

const char *aa_store_db_path(const aa_store *st) {
  return st != NULL ? st->reader_path : NULL;
}

int64_t aa_store_run_id(const aa_store *st) {
  return st != NULL ? atomic_load(&((aa_store *)st)->run_id) : 0;
}

void aa_store_fail_nth(aa_store *st, uint64_t n) {
  if (st == NULL) return;
  atomic_store(&st->fault.remaining, n);
}

int aa_store_begin_run(aa_store *st, const aa_store_run_info *info,
                       int64_t *run_id) {
  int err = AA_OK;
  begin_req req;
  if (run_id != NULL) *run_id = 0;
  if (st == NULL || info == NULL || run_id == NULL) return AA_EINVAL;
  if ((info->model != NULL && strnlen(info->model, AA__STORE_MAX_TEXT + 1) > AA__STORE_MAX_TEXT) ||
      (info->host != NULL && strnlen(info->host, AA__STORE_MAX_TEXT + 1) > AA__STORE_MAX_TEXT) ||
      (info->config_json != NULL &&
       strnlen(info->config_json, AA__STORE_MAX_JSON + 1) > AA__STORE_MAX_JSON)) {
    return AA_EINVAL;
  }
  if (forked_copy(st)) return AA_ECLOSED; /* the mutex may be held by a
                                             thread of the parent */
  memset(&req, 0, sizeof req);
  req.info = info;
  pthread_mutex_lock(&st->mu);
  if (!is_enabled(st) || st->stop) {
    err = AA_ECLOSED;
    goto unlock;
  }
  req.next = st->begins;
  st->begins = &req;
  wake_writer(st);
  while (!req.done) pthread_cond_wait(&st->done, &st->mu);
  err = req.err;
  if (err == AA_OK) *run_id = req.run_id;
unlock:
  pthread_mutex_unlock(&st->mu);
  return err;
}

/* Appends an item; takes ownership of it in every case. */
static int enqueue(aa_store *st, item *it, bool need_run) {
  int err = AA_OK;
  if (forked_copy(st)) {
    err = AA_ECLOSED;
    goto dropped;
  }
  pthread_mutex_lock(&st->mu);
  if (!is_enabled(st) || st->stop) {
    err = AA_ECLOSED;
    goto unlock;
  }
  it->run_id = atomic_load(&st->run_id);
  if (need_run && it->run_id <= 0) {
    err = AA_ENOENT;
    goto unlock;
  }
  if (st->queued >= st->cfg.queue_capacity) {
    err = AA_ELIMIT;
    goto unlock;
  }
  it->next = NULL;
  if (st->tail != NULL) {
    st->tail->next = it;
  } else {
    st->head = it;
  }
  st->tail = it;
  st->queued++;
  if (it->kind == ITEM_SNAPSHOT) atomic_fetch_add(&st->snapshots_queued, 1);
  if (st->queued >= wake_mark(st)) wake_writer(st);
  if (it->kind == ITEM_END_RUN) atomic_store(&st->run_id, 0);
  it = NULL;
unlock:
  pthread_mutex_unlock(&st->mu);
dropped:
  if (it != NULL) {
    count_dropped(st, it);
    item_free(it);
  }
  return err;
}

int aa_store_end_run(aa_store *st) {
  if (st == NULL) return AA_EINVAL;
  item *it = calloc(1, sizeof *it);
  if (it == NULL) return AA_ENOMEM;
  it->kind = ITEM_END_RUN;
  it->ts_ms = aa__store_wall_ms();
  return enqueue(st, it, true);
}

int aa_store_snapshot(aa_store *st, const aa_pool_stats *stats) {
  if (st == NULL) return AA_EINVAL;
  if (stats == NULL || stats->version != AA_STATS_VERSION ||
      stats->size != sizeof(aa_pool_stats) ||
      stats->class_count > AA_MAX_CLASSES || stats->hh_count > AA_HH_MAX) {
    atomic_fetch_add(&st->snapshots_dropped, 1);
    return AA_EINVAL;
  }
  if (!is_enabled(st)) {
    atomic_fetch_add(&st->snapshots_dropped, 1);
    return AA_ECLOSED;
  }
  item *it = malloc(sizeof *it + sizeof(aa_pool_stats));
  if (it == NULL) {
    atomic_fetch_add(&st->snapshots_dropped, 1);
    return AA_ENOMEM;
  }
  memset(it, 0, sizeof *it);
  it->kind = ITEM_SNAPSHOT;
  it->ts_ms = aa__store_wall_ms();
  memcpy(&it->snap[0], stats, sizeof *stats);
  it->snap[0].name[sizeof it->snap[0].name - 1] = '\0';
  it->snap[0].backend[sizeof it->snap[0].backend - 1] = '\0';
  return enqueue(st, it, true);
}

static bool source_ok(const char *s) {
  size_t n = 0;
  if (s == NULL) return false;
  for (; s[n] != '\0'; n++) {
    char ch = s[n];
    if (n >= 31) return false;
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
          ch == '-')) {
      return false;
    }
  }
  return n > 0;
}

int aa_store_policy_change(aa_store *st, const char *source,
                           uint64_t old_version, uint64_t new_version,
                           const char *reason, const char *policy_json) {
  int err = AA_OK;
  bool too_long = false;
  item *it = NULL;
  if (st == NULL) return AA_EINVAL;
  if (!source_ok(source)) {
    err = AA_EINVAL;
    goto fail;
  }
  if (!is_enabled(st)) {
    err = AA_ECLOSED;
    goto fail;
  }
  it = calloc(1, sizeof *it);
  if (it == NULL) {
    err = AA_ENOMEM;
    goto fail;
  }
  it->kind = ITEM_POLICY;
  it->ts_ms = aa__store_wall_ms();
  snprintf(it->source, sizeof it->source, "%s", source);
  it->old_version = old_version;
  it->new_version = new_version;
  if (reason != NULL) {
    it->reason = dup_bounded(reason, AA__STORE_MAX_TEXT, &too_long);
    if (it->reason == NULL) {
      err = too_long ? AA_EINVAL : AA_ENOMEM;
      goto fail;
    }
  }
  if (policy_json != NULL) {
    it->policy = dup_bounded(policy_json, AA__STORE_MAX_JSON, &too_long);
    if (it->policy == NULL) {
      err = too_long ? AA_EINVAL : AA_ENOMEM;
      goto fail;
    }
  }
  return enqueue(st, it, false);
fail:
  item_free(it);
  atomic_fetch_add(&st->policy_dropped, 1);
  return err;
}

static ring *ring_get(aa_store *st) {
  ring *r = atomic_load_explicit(&st->ring, memory_order_acquire);
  if (r != NULL) return r;
  ring *fresh = malloc(sizeof *fresh + (size_t)st->ring_cap * sizeof(ring_slot));
  if (fresh == NULL) return NULL;
  fresh->mask = st->ring_cap - 1;
  for (uint64_t i = 0; i < st->ring_cap; i++) {
    atomic_init(&fresh->slots[i].seq, i);
  }
  ring *expected = NULL;
  if (atomic_compare_exchange_strong_explicit(&st->ring, &expected, fresh,
                                              memory_order_acq_rel,
                                              memory_order_acquire)) {
    return fresh;
  }
  free(fresh);
  return expected;
}

void aa_store_trace_push(void *store, const aa_trace_event *ev) {
  aa_store *st = store;
  if (st == NULL || ev == NULL) return;
  int64_t run = atomic_load_explicit(&st->run_id, memory_order_relaxed);
  if (!is_enabled(st) || run <= 0) {
    trace_lost(st, run, ev);
    return;
  }
  ring *r = ring_get(st);
  if (r == NULL) {
    trace_lost(st, run, ev);
    return;
  }
  uint64_t pos = atomic_load_explicit(&st->ring_enq, memory_order_relaxed);
  ring_slot *slot;
  for (;;) {
    slot = &r->slots[pos & r->mask];
    uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
    int64_t diff = (int64_t)(seq - pos);
    if (diff == 0) {
      if (atomic_compare_exchange_weak_explicit(&st->ring_enq, &pos, pos + 1,
                                                memory_order_relaxed,
                                                memory_order_relaxed)) {
        break;
      }
    } else if (diff < 0) {
      trace_lost(st, run, ev);
      return; /* full */
    } else {
      pos = atomic_load_explicit(&st->ring_enq, memory_order_relaxed);
    }
  }
  slot->ev = *ev;
  slot->run_id = run;
  atomic_store_explicit(&slot->seq, pos + 1, memory_order_release);
  /* Wake the writer early when the ring is half full. */
  uint64_t deq = atomic_load_explicit(&st->ring_deq, memory_order_relaxed);
  if (pos + 1 - deq == (uint64_t)st->ring_cap / 2) wake_writer(st);
}

int aa_store_flush(aa_store *st, uint32_t timeout_ms) {
  int err = AA_OK;
  struct timespec ts;
  if (st == NULL) return AA_EINVAL;
  if (forked_copy(st)) return AA_ECLOSED;
  if (timeout_ms > 0) deadline_after(&ts, timeout_ms);
  pthread_mutex_lock(&st->mu);
  if (!is_enabled(st)) goto disabled;
  uint64_t gen = ++st->flush_req;
  wake_writer(st);
  while (st->flush_done < gen) {
    if (timeout_ms == 0) {
      pthread_cond_wait(&st->done, &st->mu);
    } else if (pthread_cond_timedwait(&st->done, &st->mu, &ts) == ETIMEDOUT) {
      if (st->flush_done < gen) err = AA_EAGAIN;
      break;
    }
  }
  if (err == AA_OK && !is_enabled(st)) goto disabled;
  goto unlock;
disabled:
  err = atomic_load_explicit(&st->last_error, memory_order_acquire);
  if (err == AA_OK) err = AA_ECLOSED;
unlock:
  pthread_mutex_unlock(&st->mu);
  return err;
}

int aa_store_close(aa_store *st) {
  int err = AA_OK;
  if (st == NULL) return AA_OK;
  if (forked_copy(st)) {
    /* The parent's handle: no writer thread here, and the parent's SQLite
     * connection must not be used or closed from this process. Free only
     * our memory (the connection's memory is leaked on purpose). */
    for (item *it = st->head; it != NULL;) {
      item *next = it->next;
      item_free(it);
      it = next;
    }
    free(atomic_load(&st->ring));
    free(st->reader_path);
    free(st->path);
    free(st);
    return AA_ECLOSED;
  }
  if (atomic_load(&st->run_id) > 0) aa_store_end_run(st);
  err = aa_store_flush(st, st->cfg.close_timeout_ms);
  pthread_mutex_lock(&st->mu);
  st->stop = true;
  wake_writer(st);
  pthread_mutex_unlock(&st->mu);
  if (st->thread_started) pthread_join(st->thread, NULL);
  /* Items that the writer did not reach (timeout) are lost. */
  store_free(st);
  return err;
}

int aa_store_stats_get(const aa_store *cst, aa_store_stats *out) {
  aa_store *st = (aa_store *)cst; /* atomics are read, never written */
  if (st == NULL || out == NULL) return AA_EINVAL;
  memset(out, 0, sizeof *out);
  out->version = AA_STORE_STATS_VERSION;
  out->size = sizeof *out;
  out->enabled = is_enabled(st) ? 1u : 0u;
  out->last_error = atomic_load_explicit(&st->last_error, memory_order_acquire);
  if (out->last_error != AA_OK) {
    memcpy(out->last_error_msg, st->last_error_msg, sizeof out->last_error_msg);
    out->last_error_msg[sizeof out->last_error_msg - 1] = '\0';
  }
  out->run_id = atomic_load(&st->run_id);
  out->snapshots_queued = atomic_load(&st->snapshots_queued);
  out->snapshots_written = atomic_load(&st->snapshots_written);
  out->snapshots_dropped = atomic_load(&st->snapshots_dropped);
  out->policy_changes_written = atomic_load(&st->policy_written);
  out->policy_changes_dropped = atomic_load(&st->policy_dropped);
  uint64_t deq = atomic_load(&st->ring_deq);
  uint64_t enq = atomic_load(&st->ring_enq);
  out->events_queued = enq >= deq ? enq - deq : 0;
  out->events_written = atomic_load(&st->events_written);
  out->events_dropped = atomic_load(&st->events_dropped);
  out->transactions = atomic_load(&st->transactions);
  out->retention_runs = atomic_load(&st->retention_runs);
  out->rows_deleted = atomic_load(&st->rows_deleted);
  out->db_bytes = atomic_load(&st->db_bytes);
  return AA_OK;
}

/* A fixed buffer that counts what does not fit (snprintf's contract). */
typedef struct fixed_sink {
  char *buf;
  size_t cap;
  size_t len;
} fixed_sink;

static void fixed_put(void *sink, const char *s, size_t n) {
  fixed_sink *f = sink;
  for (size_t i = 0; i < n; i++, f->len++)
    if (f->len + 1 < f->cap) f->buf[f->len] = s[i];
}

/* Appends s as a JSON string (the one writer, core/src/strbuf.h) to buf at
 * *len. */
static void json_str(char *buf, size_t cap, size_t *len, const char *s) {
  fixed_sink f = {buf, cap, *len};
  aa__json_put(fixed_put, &f, s, strlen(s));
  *len = f.len;
}

size_t aa_store_stats_json(const aa_store_stats *s, char *buf, size_t cap) {
  size_t len = 0;
  char tmp[1];
  if (buf == NULL || cap == 0) {
    buf = tmp;
    cap = 1;
  }
  if (s == NULL) {
    buf[0] = '\0';
    return 0;
  }
#define APPEND(...)                                                         \
  do {                                                                      \
    int k = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, \
                     __VA_ARGS__);                                          \
    if (k > 0) len += (size_t)k;                                            \
  } while (0)
  APPEND("{\"enabled\":%s,\"last_error\":\"%s\",\"last_error_msg\":",
         s->enabled ? "true" : "false",
         s->last_error != AA_OK ? aa_errname(s->last_error) : "");
  json_str(buf, cap, &len, s->last_error_msg);
  APPEND(",\"run_id\":%lld,\"snapshots_queued\":%llu,\"snapshots_written\":%llu,"
         "\"snapshots_dropped\":%llu,\"policy_changes_written\":%llu,"
         "\"policy_changes_dropped\":%llu,\"events_queued\":%llu,"
         "\"events_written\":%llu,\"events_dropped\":%llu,"
         "\"transactions\":%llu,\"retention_runs\":%llu,"
         "\"rows_deleted\":%llu,\"db_bytes\":%llu}",
         (long long)s->run_id, (unsigned long long)s->snapshots_queued,
         (unsigned long long)s->snapshots_written,
         (unsigned long long)s->snapshots_dropped,
         (unsigned long long)s->policy_changes_written,
         (unsigned long long)s->policy_changes_dropped,
         (unsigned long long)s->events_queued,
         (unsigned long long)s->events_written,
         (unsigned long long)s->events_dropped,
         (unsigned long long)s->transactions,
         (unsigned long long)s->retention_runs,
         (unsigned long long)s->rows_deleted,
         (unsigned long long)s->db_bytes);
#undef APPEND
  if (len < cap) {
    buf[len] = '\0';
  } else {
    buf[cap - 1] = '\0';
  }
  return len;
}
