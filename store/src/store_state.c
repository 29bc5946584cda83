/*
 * store_state.c — the store's bottom floor: small accessors of the handle's
 * state that every other file of store/ may call (none of them calls back
 * up): the fork generation (a handle opened before a fork is inert in the
 * child), whether the store is enabled, deadlines, waking the writer, and
 * the writer connection's exec and fault path (one logged line, the store
 * disabled).
 *
 * Entry points: aa__store_fork_gen, aa__store_forked_copy,
 * aa__store_is_enabled, aa__store_deadline_after, aa__store_wake_writer,
 * aa__store_w_exec, aa__store_writer_fail.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "store_internal.h"
#include "adaptalloc/internal/util.h" /* aa__log_line */

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

uint64_t aa__store_fork_gen(void) {
  pthread_once(&g_atfork_once, atfork_register);
  return atomic_load(&g_fork_gen);
}

void aa__store_deadline_after(struct timespec *ts, uint32_t ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec += 1;
    ts->tv_nsec -= 1000000000L;
  }
}

bool aa__store_forked_copy(const aa_store *st) {
  return atomic_load_explicit(&g_fork_gen, memory_order_relaxed) != st->fork_gen;
}

bool aa__store_is_enabled(const aa_store *st) {
  return atomic_load_explicit(&st->enabled, memory_order_acquire) != 0 &&
         !aa__store_forked_copy(st);
}

void aa__store_wake_writer(aa_store *st) { pthread_cond_signal(&st->wake); }

static void store_log(const aa_store_config *cfg, const char *line) {
  char full[AA__LOG_LINE_MAX];
  if (cfg->quiet) return;
  snprintf(full, sizeof full, "store: %s", line);
  aa__log_line(full); /* escaped: lines quote paths */
}

/* ------------------------------------------------------------------ writer's */

int aa__store_w_exec(aa_store *st, const char *sql) {
  return aa__store_exec(st->db, &st->fault, sql);
}

/* Disables the store after a SQLite failure: one log line, error recorded,
 * transaction rolled back. The caller counts what it was writing as dropped. */
void aa__store_writer_fail(aa_store *st, int rc, const char *what) {
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
