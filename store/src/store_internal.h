/*
 * store_internal.h — what the store's source files share.
 *
 * Glossary:
 *   store      one aa_store: a write connection owned by the writer thread,
 *              a mutex-protected bounded queue of items and a lock-free trace
 *              ring.
 *   item       one queued unit of work for the writer: a snapshot copy, a
 *              policy change, an out-of-memory record, the end of a run.
 *   ring       the bounded multi-producer single-consumer trace ring (one slot
 *              per aa_trace_event, sequence-numbered per slot).
 *   migration  one step of the schema list in store_schema.c; step i brings
 *              PRAGMA user_version from i-1 to i.
 *
 * Files: store.c (handle life cycle: open, flush, close, counters),
 * store_queue.c (item queue, trace ring), store_writer.c (writer thread, SQL
 * inserts, faults), store_retention.c (retention), store_json.c (stats
 * JSON), store_schema.c (migrations, connection setup), store_sqlite.c
 * (exec/step through the fault counter, error mapping), store_read.c
 * (readers).
 */
#ifndef AA_STORE_INTERNAL_H
#define AA_STORE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "adaptalloc/internal/debug.h" /* util/: tiered assertions */
#include "adaptalloc/store.h"

/* Counts SQLite calls for fault injection; shared by the writer's calls and
 * the open path. `remaining` 0 = disarmed; when it reaches 1 the call fails. */
typedef struct aa__store_fault {
  _Atomic uint64_t remaining;
  _Atomic bool fired; /* an injected fault has fired */
} aa__store_fault;

#define AA__STORE_MAX_PATH 4096
#define AA__STORE_MAX_TEXT 4096
#define AA__STORE_MAX_JSON (1u << 20)
/* the frames table: twice AA_STORE_MAX_FRAMES slots, a power of two */
#define AA__STORE_FRAMES_SLOTS (2u * AA_STORE_MAX_FRAMES)

/* ------------------------------------------------- types (all files) */

typedef enum item_kind {
  ITEM_SNAPSHOT = 1,
  ITEM_POLICY = 2,
  ITEM_END_RUN = 3,
  ITEM_OOM = 4,
  ITEM_FRAMES = 5
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
  /* ITEM_OOM */
  aa_oom_info oom;
  /* ITEM_FRAMES: a call stack's id in its run and its text (`reason`) */
  uint64_t frame_id;
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
  sqlite3_stmt *ins_oom;
  sqlite3_stmt *ins_frames;
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

  /* retention bounds asked for since open (aa_store_set_retention): the
   * writer takes them into cfg (which it alone reads after open) at its
   * next cycle */
  _Atomic uint64_t ret_bytes, ret_age_s;
  atomic_bool ret_changed;
  /* the trace table's bound (aa_store_set_trace_bound), taken by the
   * writer into cfg.trace_max_events at its next cycle */
  _Atomic uint64_t trace_bound;
  atomic_bool trace_bound_changed;

  /* call stacks interned in the current run (aa_store_frames_id): their
   * 64-bit hashes (0: empty slot) and ids, under frames_mu */
  pthread_mutex_t frames_mu;
  int64_t frames_run;
  uint64_t frames_n;
  uint64_t *frames_hash; /* AA__STORE_FRAMES_SLOTS, made at first use */
  uint64_t *frames_ids;

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
  _Atomic uint64_t ooms_written;
  _Atomic uint64_t ooms_dropped;
  _Atomic uint64_t events_evicted;
  _Atomic uint64_t frames_written;
  _Atomic uint64_t frames_dropped;
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
  uint64_t base_oom_written, base_oom_dropped;
  int64_t counted_run;      /* the run whose counters the writer keeps updated */
  bool trace_bound_pending; /* a new bound not yet applied */
};

/* ------------------------------------------------------ store_sqlite.c */

/* Returns true when this call must fail (and disarms). */
bool aa__store_fault_hit(aa__store_fault *f);

/* Writes "<what> failed on <path>: <reason> (<SQLITE_CODE>)" into msg. */
void aa__store_fault_message(const aa__store_fault *f, sqlite3 *db, int rc,
                             const char *what, const char *path, char *msg,
                             size_t cap);

/* sqlite3_exec / sqlite3_step through the fault counter (fault may be NULL). */
int aa__store_exec(sqlite3 *db, aa__store_fault *fault, const char *sql);
int aa__store_step(sqlite3_stmt *stmt, aa__store_fault *fault);

/* Maps a SQLite result code to an aa_err. */
int aa__store_err_from_sqlite(int rc);

/* Symbolic name of a primary SQLite code ("SQLITE_FULL"). */
const char *aa__store_sqlite_code_name(int rc);

/* The SQL result code that an injected fault pretends to be. */
#define AA__STORE_FAULT_RC SQLITE_FULL

/* Wall clock, Unix epoch milliseconds. */
int64_t aa__store_wall_ms(void);

/* ------------------------------------------------------ store_schema.c */

/* Opens a connection and brings it to a usable state: busy timeout, WAL,
 * synchronous=NORMAL, foreign keys, incremental auto-vacuum on a new file,
 * migrations. On failure returns an aa_err, writes a one-line reason into
 * msg (without the log prefix) and *out is NULL. `uri` is true for the
 * in-memory shared-cache URI (no WAL there). */
int aa__store_db_open_rw(const char *path, bool uri, uint32_t busy_timeout_ms,
                         aa__store_fault *fault, sqlite3 **out, char *msg,
                         size_t msg_cap);

/* Opens a read-only connection for a reader and checks the schema version.
 * Errors as for the public readers. *tidy is set when the -wal and -shm
 * files beside path appeared during the open (a read-only connection to a
 * WAL database makes them when they are missing, and cannot remove them):
 * pass it to aa__store_db_close_ro. */
int aa__store_db_open_ro(const char *path, sqlite3 **out, bool *tidy);

/* Closes a connection of aa__store_db_open_ro (NULL is fine); with tidy,
 * removes the -wal and -shm files it made, the way SQLite does: a
 * read-write connection opened and closed, whose close deletes them only
 * when no other connection (a live writer, another reader) has the database
 * open. */
void aa__store_db_close_ro(const char *path, sqlite3 *db, bool tidy);

/* ------------------------------------------------------------ store.c */

/* Sets *ts to ms milliseconds from now on CLOCK_MONOTONIC. */
void aa__store_deadline_after(struct timespec *ts, uint32_t ms);
/* True in a forked child for a handle opened by the parent (inert there). */
bool aa__store_forked_copy(const aa_store *st);
/* True while the store is enabled (no fault) and not a forked copy. */
bool aa__store_is_enabled(const aa_store *st);

/* ------------------------------------------------------- store_queue.c */

void aa__store_item_free(item *it);
/* Counts an item that will not be written as dropped. */
void aa__store_count_dropped(aa_store *st, const item *it);
/* The items of the list from head (for the queue's assertions). */
uint32_t aa__store_list_length(const item *head);
/* The queue length at which the writer is woken early. */
uint32_t aa__store_wake_mark(const aa_store *st);
/* The first sequence number run's trace lost, UINT64_MAX when none. */
uint64_t aa__store_trace_cut_of(aa_store *st, int64_t run);
int64_t aa__store_trace_cut(aa_store *st, uint64_t *seq);
/* Takes one published event out of the ring; false when the next slot is
 * empty or not yet published. Single consumer: the writer. */
bool aa__store_ring_pop(aa_store *st, ring *r, aa_trace_event *ev,
                        int64_t *run_id);

/* ------------------------------------------------------ store_writer.c */

int aa__store_w_exec(aa_store *st, const char *sql);
void aa__store_stmts_finalize(writer_stmts *ws);
int aa__store_stmts_prepare(aa_store *st);
/* Disables the store after a SQLite failure: one log line, error recorded,
 * transaction rolled back. */
void aa__store_writer_fail(aa_store *st, int rc, const char *what);
void aa__store_wake_writer(aa_store *st);
/* The writer thread's body (arg: the aa_store). */
void *aa__store_writer_main(void *arg);

/* --------------------------------------------------- store_retention.c */

/* Pages in use times page size (SQLITE_OK or a SQLite code). */
int aa__store_db_used_bytes(aa_store *st, int64_t *used);
/* One retention pass; disables the store on failure. */
int aa__store_retention(aa_store *st);
/* The trace table's bound (cfg.trace_max_events): deletes the oldest rows
 * beyond it, counting them per run (runs.events_evicted) and in
 * events_evicted. Inside the writer's transaction; a SQLite code. */
int aa__store_trace_bound(aa_store *st);

#endif /* AA_STORE_INTERNAL_H */
