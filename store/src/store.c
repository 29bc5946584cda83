/*
 * store.c — the store handle's life cycle and the public calls that act on
 * the whole handle: configuration defaults and checks, open (connection,
 * statements, writer thread), flush, close, counters, and fork detection.
 * The queue and trace ring are store_queue.c's, the writer thread
 * store_writer.c's, retention store_retention.c's, the stats JSON
 * store_json.c's.
 *
 * Entry points: aa_store_open, aa_store_flush, aa_store_close,
 * aa_store_stats_get, aa_store_config_init.
 */
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store_internal.h"
#include "adaptalloc/internal/util.h" /* aa__log_line */

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
  if (strcmp(path, ":memory:") == 0)
    return true;
  /* SQLite would open these as something other than the file named (a URI
   * whose file is elsewhere, and a stray empty "file:x.db" from the
   * store's own create; the file without the slash): refused before
   * anything is created */
  if (strncmp(path, "file:", 5) == 0) {
    snprintf(msg, cap,
             "the database path \"%s\" is a URI (starts with \"file:\"); "
             "name the file itself (./file:... for a file so named)",
             path);
    return false;
  }
  if (path[n - 1] == '/') {
    snprintf(msg, cap,
             "the database path \"%s\" ends with '/' (a directory); name a "
             "file",
             path);
    return false;
  }
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
  if (in->version != 1 && in->version != AA_STORE_CONFIG_VERSION) {
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
  if (in->version == 1) { /* the fields before trace_max_events */
    memset(out, 0, sizeof *out);
    memcpy(out, in, offsetof(aa_store_config, trace_max_events));
    out->version = AA_STORE_CONFIG_VERSION;
  } else {
    *out = *in;
  }
  if (out->queue_capacity == 0) out->queue_capacity = 256;
  if (out->trace_capacity == 0) out->trace_capacity = 65536;
  out->trace_capacity = pow2_at_least(out->trace_capacity < 2 ? 2 : out->trace_capacity);
  if (out->commit_interval_ms == 0) out->commit_interval_ms = 100;
  if (out->busy_timeout_ms == 0) out->busy_timeout_ms = 5000;
  if (out->close_timeout_ms == 0) out->close_timeout_ms = 5000;
  if (out->retention_interval_ms == 0) out->retention_interval_ms = 10000;
  return AA_OK;
}

/* ------------------------------------------------------------------ public */

static void store_free(aa_store *st) {
  if (st == NULL) return;
  aa__store_stmts_finalize(&st->ws);
  if (st->db != NULL) sqlite3_close_v2(st->db);
  for (item *it = st->head; it != NULL;) {
    item *next = it->next;
    aa__store_item_free(it);
    it = next;
  }
  free(atomic_load(&st->ring));
  pthread_cond_destroy(&st->done);
  pthread_cond_destroy(&st->wake);
  pthread_mutex_destroy(&st->mu);
  pthread_mutex_destroy(&st->cut_mu);
  pthread_mutex_destroy(&st->frames_mu);
  free(st->frames_hash);
  free(st->frames_ids);
  free(st->reader_path);
  free(st->path);
  free(st);
}

int aa_store_open(const aa_store_config *cfg, aa_store **out) {
  char msg[1024] = "";
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
  pthread_mutex_init(&st->frames_mu, NULL);
  st->cut_seq = UINT64_MAX;
  pthread_condattr_init(&ca);
  ca_init = true;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&st->wake, &ca);
  pthread_cond_init(&st->done, &ca);
  st->cfg = c;
  atomic_store(&st->trace_bound, c.trace_max_events);
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
  int rc = aa__store_stmts_prepare(st);
  if (rc != SQLITE_OK) {
    aa__store_fault_message(&st->fault, st->db, rc, "preparing statements",
                            st->path, msg, sizeof msg);
    err = aa__store_err_from_sqlite(rc);
    goto out;
  }
  {
    int64_t used = 0;
    rc = aa__store_db_used_bytes(st, &used);
    if (rc != SQLITE_OK) {
      aa__store_fault_message(&st->fault, st->db, rc, "measuring the database",
                              st->path, msg, sizeof msg);
      err = aa__store_err_from_sqlite(rc);
      goto out;
    }
    atomic_store(&st->db_bytes, (uint64_t)(used > 0 ? used : 0));
  }
  atomic_store(&st->enabled, 1);
  if (pthread_create(&st->thread, NULL, aa__store_writer_main, st) != 0) {
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
      char line[sizeof msg + 96];
      snprintf(line, sizeof line, "store: cannot open: %s (%s); the store is off", msg,
               aa_errname(err));
      aa__log_line(line); /* escaped: the path may hold any byte */
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

int aa_store_set_retention(aa_store *st, uint64_t max_bytes, uint64_t max_age_s) {
  if (st == NULL) return AA_EINVAL;
  if (aa__store_forked_copy(st)) return AA_ECLOSED;
  atomic_store(&st->ret_bytes, max_bytes);
  atomic_store(&st->ret_age_s, max_age_s);
  atomic_store(&st->ret_changed, true);
  pthread_mutex_lock(&st->mu);
  aa__store_wake_writer(st);
  pthread_mutex_unlock(&st->mu);
  return AA_OK;
}

int aa_store_flush(aa_store *st, uint32_t timeout_ms) {
  int err = AA_OK;
  struct timespec ts;
  if (st == NULL) return AA_EINVAL;
  if (aa__store_forked_copy(st)) return AA_ECLOSED;
  if (timeout_ms > 0) aa__store_deadline_after(&ts, timeout_ms);
  pthread_mutex_lock(&st->mu);
  if (!aa__store_is_enabled(st)) goto disabled;
  uint64_t gen = ++st->flush_req;
  aa__store_wake_writer(st);
  while (st->flush_done < gen) {
    if (timeout_ms == 0) {
      pthread_cond_wait(&st->done, &st->mu);
    } else if (pthread_cond_timedwait(&st->done, &st->mu, &ts) == ETIMEDOUT) {
      if (st->flush_done < gen) err = AA_EAGAIN;
      break;
    }
  }
  if (err == AA_OK && !aa__store_is_enabled(st)) goto disabled;
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
  if (aa__store_forked_copy(st)) {
    /* The parent's handle: no writer thread here, and the parent's SQLite
     * connection must not be used or closed from this process. Free only
     * our memory (the connection's memory is leaked on purpose). */
    for (item *it = st->head; it != NULL;) {
      item *next = it->next;
      aa__store_item_free(it);
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
  aa__store_wake_writer(st);
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
  out->enabled = aa__store_is_enabled(st) ? 1u : 0u;
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
  out->ooms_written = atomic_load(&st->ooms_written);
  out->ooms_dropped = atomic_load(&st->ooms_dropped);
  uint64_t deq = atomic_load(&st->ring_deq);
  uint64_t enq = atomic_load(&st->ring_enq);
  out->events_queued = enq >= deq ? enq - deq : 0;
  out->events_written = atomic_load(&st->events_written);
  out->events_dropped = atomic_load(&st->events_dropped);
  out->transactions = atomic_load(&st->transactions);
  out->retention_runs = atomic_load(&st->retention_runs);
  out->rows_deleted = atomic_load(&st->rows_deleted);
  out->db_bytes = atomic_load(&st->db_bytes);
  out->events_evicted = atomic_load(&st->events_evicted);
  out->trace_max_events = atomic_load(&st->trace_bound);
  out->frames_written = atomic_load(&st->frames_written);
  out->frames_dropped = atomic_load(&st->frames_dropped);
  return AA_OK;
}
