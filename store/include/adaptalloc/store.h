/*
 * adaptalloc/store.h — the SQLite telemetry store.
 *
 * One aa_store handle owns one database file and one writer thread. Callers
 * enqueue copies of pool stats snapshots, policy changes and trace events;
 * the writer thread, the only owner of the write connection, commits them in
 * batched transactions. Nothing here ever waits on SQLite in the caller's
 * thread except aa_store_open, aa_store_begin_run, aa_store_flush and
 * aa_store_close: what cannot be queued is counted as dropped.
 *
 * The readers (aa_store_runs_json, aa_store_history_json, ...) take a database
 * path and open their own read-only connection for the duration of the call,
 * so they are safe to call from any thread while a writer (in this process or
 * another) is writing: the database is in WAL mode.
 *
 * Faults: any SQLite error in the writer (full disk, read-only file, a lock
 * held past busy_timeout_ms, corruption, ...) disables the store: exactly one
 * line starting "adaptalloc: store:" goes to stderr, aa_store_stats reports
 * enabled = false with the error, and every later enqueue is counted as
 * dropped. The caller keeps working.
 *
 * The schema is documented table by table in docs/store.md.
 *
 * Built with -DAA_WITH_STORE=OFF every function returns AA_ENOTSUP (void
 * functions do nothing).
 */
#ifndef ADAPTALLOC_STORE_H
#define ADAPTALLOC_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/common.h"
#include "adaptalloc/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The newest schema version (PRAGMA user_version) this library writes and
 * reads. A database with a higher user_version is refused (AA_ESTALE). */
#define AA_STORE_SCHEMA_VERSION 7

typedef struct aa_store aa_store;

/* ------------------------------------------------------------------ config */

#define AA_STORE_CONFIG_VERSION 2 /* 2: trace_max_events; 1 is read too */

typedef struct aa_store_config {
  uint32_t version;               /* AA_STORE_CONFIG_VERSION */
  const char *path;               /* database file, or ":memory:"; copied. Required */
  uint32_t queue_capacity;        /* snapshots + policy changes waiting (default 256) */
  uint32_t trace_capacity;        /* trace ring slots, rounded up to a power of two
                                (default 65536); the ring is allocated on the
                                first aa_store_trace_push */
  uint32_t commit_interval_ms;    /* the writer commits at least this often when
                                  there is work (default 100) */
  uint32_t busy_timeout_ms;       /* how long a write waits on another process's
                                lock before the store gives up (default 5000) */
  uint32_t close_timeout_ms;      /* how long aa_store_close waits for the queue to
                                be written (default 5000) */
  uint64_t max_bytes;             /* retention: database size limit (0 = none) */
  uint64_t max_age_s;             /* retention: drop data older than this (0 = none) */
  uint32_t retention_interval_ms; /* how often retention runs (default 10000) */
  bool quiet;                     /* no log line at all, even on faults (tests) */
  uint64_t fault_nth;             /* testing: the nth SQLite call made by the store
                                (open included, 1 = the first) fails as if the
                                disk were full; 0 = off */
  /* version 2 */
  uint64_t trace_max_events; /* the trace table as a ring: at most this many
                                rows of trace_events (every run's), the oldest
                                deleted after each commit and counted in
                                events_evicted (0 = no bound but retention's) */
} aa_store_config;

/* Fills in the defaults above (path NULL). */
AA_EXTERN void aa_store_config_init(aa_store_config *cfg);

/* ------------------------------------------------------------------ lifecycle */

/* Opens (creating if needed) the database at cfg->path, applies pending
 * schema migrations in one transaction, sets WAL mode, synchronous=NORMAL and
 * the busy timeout, and starts the writer thread. *out is owned by the caller:
 * aa_store_close. On failure *out is NULL, one "adaptalloc: store:" line is
 * logged (unless quiet) and the return is:
 *   AA_EINVAL   bad config (NULL, wrong version, empty path)
 *   AA_ESTALE   the database was written by a newer adaptalloc (user_version
 *               greater than AA_STORE_SCHEMA_VERSION)
 *   AA_EEXIST   the file is some other database (tables, no schema version);
 *               it is left untouched
 *   AA_EPERM    the file or its directory is read-only
 *   AA_EBUSY    another process holds a lock past busy_timeout_ms
 *   AA_EIO      any other SQLite failure (not a database, disk full, ...)
 *   AA_ENOMEM   out of memory, or the writer thread could not start */
AA_EXTERN int aa_store_open(const aa_store_config *cfg, aa_store **out);

/* Waits up to cfg->close_timeout_ms for the queue and the trace ring to be
 * written, ends the current run (sets ended_ms), stops the writer and frees
 * everything. Returns AA_OK, AA_EAGAIN when the timeout expired (what was not
 * written is lost), or the store's error when it was disabled. The handle is
 * freed in every case. NULL returns AA_OK. No other call on the handle may be
 * in flight or made afterwards; unregister the trace sink first. */
AA_EXTERN int aa_store_close(aa_store *st);

/* The path that readers should use for this store's data: cfg->path for a
 * file, a "file:...?mode=memory&cache=shared" URI for ":memory:" (valid while
 * the store is open). Owned by the store. */
AA_EXTERN const char *aa_store_db_path(const aa_store *st);

/* ------------------------------------------------------------------ runs */

typedef struct aa_store_run_info {
  const char *model;       /* ADAPTALLOC_MODEL; NULL = "default" */
  const char *host;        /* NULL = gethostname() */
  int64_t pid;             /* 0 = getpid() */
  int32_t rank;            /* distributed rank; -1 = none (stored NULL) */
  uint64_t policy_version; /* version of the policy in force at start */
  const char *config_json; /* free-form JSON describing the configuration
                              (environment, options); NULL = none. Stored as
                              given; shown as JSON by the readers when valid */
  int32_t local_rank;      /* rank on this host; -1 = none (stored NULL).
                              0 in a zeroed struct: set -1 when unknown */
  int32_t world_size;      /* ranks in the job; 0 or -1 = none (stored NULL) */
} aa_store_run_info;

/* Inserts a run row and makes it the current run: later snapshots and trace
 * events belong to it. Waits for the writer (at most busy_timeout_ms plus a
 * commit). A previous current run is ended first. *run_id gets the id (> 0);
 * on failure it is 0. Strings are copied. AA_EINVAL for NULL st/info/run_id
 * or strings over 4 KiB (config_json over 1 MiB); AA_ECLOSED when the store
 * is disabled. */
AA_EXTERN int aa_store_begin_run(aa_store *st, const aa_store_run_info *info,
                                 int64_t *run_id);

/* Ends the current run (ended_ms = now, written in order after its queued
 * snapshots). Later snapshots are refused until the next begin_run. AA_ENOENT
 * when there is no current run. Never blocks. */
AA_EXTERN int aa_store_end_run(aa_store *st);

/* The current run id, 0 when none. */
AA_EXTERN int64_t aa_store_run_id(const aa_store *st);

/* ------------------------------------------------------------------ writing */

/* Enqueues a copy of one pool's snapshot for the current run (call once per
 * pool per interval). Never blocks. Returns AA_OK when queued; otherwise the
 * snapshot is counted in snapshots_dropped and the return says why:
 *   AA_EINVAL   NULL arguments, stats->version != AA_STATS_VERSION, stats->size
 *               != sizeof(aa_pool_stats), class_count > AA_MAX_CLASSES or
 *               hh_count > AA_HH_MAX
 *   AA_ENOENT   no current run (call aa_store_begin_run first)
 *   AA_ELIMIT   the queue is full (queue_capacity)
 *   AA_ECLOSED  the store is disabled after a fault
 *   AA_ENOMEM   no memory for the copy */
AA_EXTERN int aa_store_snapshot(aa_store *st, const aa_pool_stats *stats);

/* Enqueues one entry of the policy-change audit log for the current run (or
 * run NULL when there is none). source: what changed it, lower-case letters,
 * digits, '_' or '-', 1..31 characters ("file", "http", "loop", "env",
 * "default", "api"). reason: free text, may be NULL; policy_json: the new
 * policy document, may be NULL. Strings are copied (reason at most 4 KiB,
 * policy_json at most 1 MiB, else AA_EINVAL). Never blocks; failures as for
 * aa_store_snapshot, counted in policy_changes_dropped. */
AA_EXTERN int aa_store_policy_change(aa_store *st, const char *source,
                                     uint64_t old_version, uint64_t new_version,
                                     const char *reason,
                                     const char *policy_json);

/* Enqueues a copy of an out-of-memory record (aa_oom_info, from a pool's
 * OOM observer) for the current run (or run NULL when there is none); the
 * writer stores it as a row of `ooms` with the record as JSON. Never blocks:
 * callable from the observer. Failures as for aa_store_snapshot (AA_EINVAL
 * also for a record of another version or size), counted in ooms_dropped. */
AA_EXTERN int aa_store_oom(aa_store *st, const aa_oom_info *info);

/* Counts n out-of-memory records its caller lost before they reached the
 * store (the runtime keeps a bounded list of them between two ticks) in
 * ooms_dropped, so that every record is stored or counted: in
 * aa_store_stats, /stats, /metrics and the run's row. Never blocks; st NULL
 * or n 0: nothing. */
AA_EXTERN void aa_store_ooms_lost(aa_store *st, uint64_t n);

/* The trace sink: copies the event into a bounded lock-free ring drained by
 * the writer thread. Never blocks, never allocates after the first call; a
 * full ring, a disabled store or no current run counts the event in
 * events_dropped. Callable from any number of threads. Its signature is that
 * of aa_trace_fn, so it can be registered directly:
 *   aa_pool_set_trace(pool, aa_store_trace_push, st);
 * `store` is an aa_store *; NULL is a no-op. */
AA_EXTERN void aa_store_trace_push(void *store, const aa_trace_event *ev);

/* Changes the trace table's bound (cfg's trace_max_events; 0 = none): the
 * writer applies it at its next cycle. AA_OK, AA_EINVAL for NULL,
 * AA_ECLOSED in a forked child. */
AA_EXTERN int aa_store_set_trace_bound(aa_store *st, uint64_t max_events);

/* Call stacks for the trace (docs/store.md "trace_frames"): the id of the
 * text `frames` (len bytes, at most AA_STORE_MAX_FRAMES_BYTES; any text: one
 * frame a line, "file:line:function", innermost first, is what the export
 * expects) in the current run, the same id for the same text (interned by
 * its 64-bit hash), queued to be written as a row of trace_frames the first
 * time. Pass the id to aa_pool_trace_frame. Never blocks on SQLite; takes a
 * mutex. At most AA_STORE_MAX_FRAMES distinct texts a run: beyond, and when
 * the queue is full, AA_ELIMIT (counted in frames_dropped). AA_EINVAL (NULL
 * or empty or too long), AA_ENOENT (no current run), AA_ECLOSED, AA_ENOMEM;
 * *id is 0 on failure. */
#define AA_STORE_MAX_FRAMES 65536
#define AA_STORE_MAX_FRAMES_BYTES 65536
AA_EXTERN int aa_store_frames_id(aa_store *st, const char *frames, size_t len, uint64_t *id);

/* Changes the retention bounds of an open store (cfg's max_bytes and
 * max_age_s; 0 = none): the writer applies them at its next cycle, at once
 * (not at the next retention_interval_ms). AA_OK, AA_EINVAL for NULL,
 * AA_ECLOSED in a forked child. */
AA_EXTERN int aa_store_set_retention(aa_store *st, uint64_t max_bytes,
                                     uint64_t max_age_s);

/* Waits until everything enqueued (and every trace event pushed) before the
 * call is committed, and retention has been applied if limits are set.
 * timeout_ms 0 waits forever. Returns AA_OK, AA_EAGAIN on timeout, or the
 * store's error (< 0) when it is disabled. */
AA_EXTERN int aa_store_flush(aa_store *st, uint32_t timeout_ms);

/* Testing: from now, the nth SQLite call made by the writer (1 = the next)
 * fails as if the disk were full, which disables the store. 0 disarms. */
AA_EXTERN void aa_store_fail_nth(aa_store *st, uint64_t n);

/* ------------------------------------------------------------------ stats */

#define AA_STORE_STATS_VERSION 1

typedef struct aa_store_stats {
  uint32_t version;           /* AA_STORE_STATS_VERSION */
  uint32_t size;              /* sizeof(aa_store_stats) */
  uint32_t enabled;           /* 1 while writing, 0 after a fault or close */
  int32_t last_error;         /* aa_err of the fault that disabled it, AA_OK if none */
  char last_error_msg[256];   /* the logged line without the prefix, "" if none */
  int64_t run_id;             /* current run, 0 when none */
  uint64_t snapshots_queued;  /* waiting in the queue now */
  uint64_t snapshots_written; /* committed */
  uint64_t snapshots_dropped; /* refused: full queue, disabled, no run, bad input */
  uint64_t policy_changes_written;
  uint64_t policy_changes_dropped;
  uint64_t events_queued; /* in the trace ring now */
  uint64_t events_written;
  uint64_t events_dropped;
  uint64_t transactions;     /* write transactions committed */
  uint64_t retention_runs;   /* retention passes done */
  uint64_t rows_deleted;     /* snapshots + trace events + policy changes
                                  deleted by retention */
  uint64_t db_bytes;         /* database size at the last retention pass or
                                  open: pages in use times page size */
  uint64_t ooms_written;     /* out-of-memory records committed */
  uint64_t ooms_dropped;     /* ... refused (as snapshots_dropped) or lost,
                              aa_store_ooms_lost's included */
  uint64_t events_evicted;   /* trace rows deleted by the trace bound
                              (trace_max_events), oldest first */
  uint64_t trace_max_events; /* the bound in force (0 = none) */
  uint64_t frames_written;   /* rows of trace_frames committed */
  uint64_t frames_dropped;   /* call stacks refused (aa_store_frames_id) */
} aa_store_stats;

/* Fills *out (version and size set). Never blocks on the writer. AA_EINVAL on
 * NULL. */
AA_EXTERN int aa_store_stats_get(const aa_store *st, aa_store_stats *out);

/* Writes the stats as one JSON object (field names as in the struct) into buf,
 * NUL-terminated; returns the length the whole object needs, like snprintf. */
AA_EXTERN size_t aa_store_stats_json(const aa_store_stats *s, char *buf,
                                     size_t cap);

/* ------------------------------------------------------------------ readers */

/* Readers return AA_OK and a malloc'd NUL-terminated JSON text in *json that
 * the caller frees with free(); on failure *json is NULL and the return is
 * AA_EINVAL (bad arguments), AA_ENOENT (no such file, not an adaptalloc
 * database, or an explicit run id that does not exist), AA_ESTALE (newer
 * schema), AA_ENOMEM or AA_EIO. The JSON shapes are in docs/store.md. */

/* {"runs":[{run}, ...]}, newest first, at most `limit` (0 = 100). */
AA_EXTERN int aa_store_runs_json(const char *db_path, uint32_t limit,
                                 char **json);

#define AA_STORE_QUERY_VERSION 1
#define AA_STORE_QUERY_MAX_LIMIT 10000

typedef struct aa_store_query {
  uint32_t version; /* AA_STORE_QUERY_VERSION */
  int64_t run_id;   /* > 0 that run; <= 0 the latest run */
  bool all_runs;    /* ignore run_id, every run */
  int64_t since_ms; /* only rows with ts_ms >= since_ms (Unix ms; 0 = any) */
  int64_t after_id; /* only rows with id > after_id (a cursor; 0 = any) */
  uint32_t limit;   /* the newest `limit` matching rows (0 = 100, at most
                        AA_STORE_QUERY_MAX_LIMIT), returned oldest first */
  const char *pool; /* snapshots only: one pool by name; NULL = all */
  bool detail;      /* snapshots: add classes, histogram and heavy hitters;
                        policy log: add the policy documents */
  int64_t step_ms;  /* snapshots: > 0 keeps, per pool and step_ms-long slice
                        of time, only the snapshot with the most bytes
                        reserved (a day of one-second snapshots in a few
                        thousand rows, peaks kept); <= 0 keeps every one */
} aa_store_query;

/* Fills in the defaults (latest run, no filters, limit 100, no detail). */
AA_EXTERN void aa_store_query_init(aa_store_query *q);

/* Snapshots: {"run":N|null,"count":K,"snapshots":[...]} */
AA_EXTERN int aa_store_history_json(const char *db_path, const aa_store_query *q,
                                    char **json);

/* The policy-change audit log: {"run":N|null,"count":K,"changes":[...]} */
AA_EXTERN int aa_store_policy_log_json(const char *db_path,
                                       const aa_store_query *q, char **json);

/* Out-of-memory records: {"run":N|null,"count":K,"ooms":[{"id","run",
 * "ts_ms","pool","request","record":{aa_oom_info as JSON}}, ...]}, oldest
 * first. Honours run_id, all_runs, since_ms, after_id, limit and pool. */
AA_EXTERN int aa_store_ooms_json(const char *db_path, const aa_store_query *q, char **json);

/* For the replay tool. run_id <= 0 means the latest run.
 *
 * Calls cb for each trace event of the run in the order of the operations
 * (the events' seq; write order for rows without one), up to the first event
 * the run lost, so what is delivered is complete; a nonzero return from cb
 * stops the walk and is returned. Returns AA_OK when every event was
 * delivered (also when the run has none), AA_ENOENT when there is no such
 * run, AA_EPARSE at a row the store never wrote (a number column that
 * holds text, a real number or a blob, an op that is not one character:
 * the row is not delivered), or another error as for the JSON readers. */
typedef int (*aa_store_trace_cb)(void *user, const aa_trace_event *ev); /* nonzero return stops */
AA_EXTERN int aa_store_trace_foreach(const char *db_path, int64_t run_id,
                                     aa_store_trace_cb cb, void *user);
/* aa_store_trace_foreach saying why it stopped at a bad row: msg (cap
 * bytes, may be NULL) names the row's id, the column and what it holds. */
AA_EXTERN int aa_store_trace_read(const char *db_path, int64_t run_id, aa_store_trace_cb cb,
                                  void *user, char *msg, size_t cap);

/* How complete the run's trace is: *written events stored, *dropped events
 * lost (a full ring, a disabled store), *cut_seq the first lost sequence
 * number (aa_store_trace_foreach stops below it; 0 = nothing lost or an old
 * database). Any out pointer may be NULL. AA_ENOENT when there is no run. */
AA_EXTERN int aa_store_trace_lost(const char *db_path, int64_t run_id, uint64_t *written,
                                  uint64_t *dropped, uint64_t *cut_seq);

/* Calls cb for each call stack of the run's trace (trace_frames: the id
 * that 'c' events carry in aa_trace_event.frame, and the text), by id.
 * Returns AA_OK (also when there are none, or the database predates them),
 * the callback's nonzero value, AA_ENOENT when there is no such run, or an
 * error as for the JSON readers. */
typedef int (*aa_store_frames_cb)(void *user, uint64_t id, const char *frames);
AA_EXTERN int aa_store_frames_foreach(const char *db_path, int64_t run_id,
                                      aa_store_frames_cb cb, void *user);

/* The request-size histogram of the run's latest snapshot of pool_name, or
 * with pool_name NULL the sum over every pool of each pool's latest snapshot.
 * hist is cleared first. AA_ENOENT when the run or the pool has no snapshot. */
AA_EXTERN int aa_store_histogram_latest(const char *db_path, int64_t run_id,
                                        const char *pool_name,
                                        uint64_t hist[AA_HIST_BUCKETS]);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_STORE_H */
