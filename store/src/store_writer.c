/*
 * store_writer.c — the writer thread, the only user of the write
 * connection: its prepared statements, the SQL inserts of runs, snapshots,
 * policy changes and trace events (one transaction per cycle), and the
 * fault path that disables the store with one logged line.
 *
 * Entry point: aa__store_writer_main (started by aa_store_open); also
 * aa__store_stmts_prepare / aa__store_stmts_finalize, aa__store_w_exec,
 * aa__store_writer_fail, aa__store_wake_writer.
 */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store_internal.h"
#include "adaptalloc/internal/util.h" /* aa__log_line */

static void store_log(const aa_store_config *cfg, const char *line) {
  char full[AA__LOG_LINE_MAX];
  if (cfg->quiet) return;
  snprintf(full, sizeof full, "store: %s", line);
  aa__log_line(full); /* escaped: lines quote paths */
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

int aa__store_w_exec(aa_store *st, const char *sql) {
  return aa__store_exec(st->db, &st->fault, sql);
}

static int w_prepare(aa_store *st, const char *sql, sqlite3_stmt **out) {
  return sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, out,
                            NULL);
}

void aa__store_stmts_finalize(writer_stmts *ws) {
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
  sqlite3_finalize(ws->ins_oom);
  sqlite3_finalize(ws->ins_frames);
  memset(ws, 0, sizeof *ws);
}

int aa__store_stmts_prepare(aa_store *st) {
  writer_stmts *ws = &st->ws;
  int rc;
#define PREP(field, sql)               \
  rc = w_prepare(st, sql, &ws->field); \
  if (rc != SQLITE_OK) goto out;
  PREP(ins_run,
       "INSERT INTO runs(model, started_ms, pid, host, rank, policy_version,"
       " config, library_version, mono_origin_ns, local_rank, world_size)"
       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)")
  PREP(end_run, "UPDATE runs SET ended_ms = ?2 WHERE id = ?1 AND ended_ms IS NULL")
  PREP(upd_run,
       "UPDATE runs SET snapshots_written = ?2, snapshots_dropped = ?3,"
       " events_written = ?4, events_dropped = ?5, ooms_written = ?7, ooms_dropped = ?8,"
       " trace_cut_seq = min(coalesce(trace_cut_seq, ?6), coalesce(?6, trace_cut_seq))"
       " WHERE id = ?1")
  PREP(ins_snap,
       "INSERT INTO snapshots(run_id, ts_ms, time_ns, pool, backend, device,"
       " telemetry, class_table_version, bytes_in_use, bytes_requested,"
       " bytes_reserved, peak_bytes_in_use, peak_bytes_reserved, limit_bytes,"
       " allocs, frees, cache_hits, cache_misses, backend_allocs,"
       " backend_frees, backend_failures, ooms, oom_retries, invalid_frees,"
       " pending_blocks, large_allocs, large_bytes_in_use,"
       " large_bytes_reserved, large_segments, class_count, hh_count, region)"
       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14,"
       " ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27,"
       " ?28, ?29, ?30, ?31, ?32)")
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
       "INSERT INTO trace_events(run_id, time_ns, op, ptr, size, stream, thread, seq, frame)"
       " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)")
  PREP(ins_frames,
       "INSERT OR REPLACE INTO trace_frames(run_id, id, frames) VALUES (?1, ?2, ?3)")
  PREP(ins_batch,
       "INSERT INTO trace_batches(run_id, ts_ms, first_id, last_id, events)"
       " VALUES (?1, ?2, ?3, ?4, ?5)")
  PREP(ins_oom,
       "INSERT INTO ooms(run_id, ts_ms, pool, request, bytes_reserved, bytes_in_use,"
       " limit_bytes, record) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)")
#undef PREP
out:
  return rc;
}

#define BIND_U64(stmt, i, v) sqlite3_bind_int64((stmt), (i), (sqlite3_int64)(v))

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

static int write_begin_run(aa_store *st, begin_req *req) {
  const aa_store_run_info *in = req->info;
  sqlite3_stmt *s = st->ws.ins_run;
  char host[256] = "";
  char libver[32];
  int64_t prev = atomic_load(&st->run_id);
  int64_t now = aa__store_wall_ms();
  int rc = aa__store_w_exec(st, "BEGIN IMMEDIATE");
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
  if (in->local_rank >= 0) {
    sqlite3_bind_int(s, 10, in->local_rank);
  } else {
    sqlite3_bind_null(s, 10);
  }
  if (in->world_size > 0) {
    sqlite3_bind_int(s, 11, in->world_size);
  } else {
    sqlite3_bind_null(s, 11);
  }
  rc = w_step(st, s);
  sqlite3_clear_bindings(s);
  if (rc != SQLITE_OK) goto fail;
  req->run_id = sqlite3_last_insert_rowid(st->db);
  rc = aa__store_w_exec(st, "COMMIT");
  if (rc != SQLITE_OK) goto fail;
  atomic_fetch_add(&st->transactions, 1);
  st->counted_run = req->run_id;
  st->base_snap_written = atomic_load(&st->snapshots_written);
  st->base_snap_dropped = atomic_load(&st->snapshots_dropped);
  st->base_ev_written = atomic_load(&st->events_written);
  st->base_ev_dropped = atomic_load(&st->events_dropped);
  st->base_oom_written = atomic_load(&st->ooms_written);
  st->base_oom_dropped = atomic_load(&st->ooms_dropped);
  req->err = AA_OK;
  return SQLITE_OK;
fail:
  req->run_id = 0;
  aa__store_writer_fail(st, rc, "starting a run");
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
  if (p->region[0] != '\0')
    sqlite3_bind_text(s, i++, p->region, (int)strnlen(p->region, sizeof p->region),
                      SQLITE_STATIC);
  else
    sqlite3_bind_null(s, i++);
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

static int write_frames(aa_store *st, const item *it) {
  sqlite3_stmt *s = st->ws.ins_frames;
  sqlite3_bind_int64(s, 1, it->run_id);
  BIND_U64(s, 2, it->frame_id);
  sqlite3_bind_text(s, 3, it->reason, -1, SQLITE_STATIC);
  return w_step(st, s);
}

static int write_oom(aa_store *st, const item *it) {
  sqlite3_stmt *s = st->ws.ins_oom;
  const aa_oom_info *o = &it->oom;
  char rec[4096];
  size_t n = aa_oom_info_json(o, rec, sizeof rec);
  if (n >= sizeof rec)
    return SQLITE_TOOBIG; /* AA_OOM_TOP bounds the record well below this */
  if (it->run_id > 0) {
    sqlite3_bind_int64(s, 1, it->run_id);
  } else {
    sqlite3_bind_null(s, 1);
  }
  sqlite3_bind_int64(s, 2, it->ts_ms);
  sqlite3_bind_text(s, 3, o->pool, -1, SQLITE_STATIC);
  BIND_U64(s, 4, o->request);
  BIND_U64(s, 5, o->bytes_reserved);
  BIND_U64(s, 6, o->bytes_in_use);
  BIND_U64(s, 7, o->limit_bytes);
  sqlite3_bind_text(s, 8, rec, (int)n, SQLITE_STATIC);
  int rc = w_step(st, s);
  sqlite3_clear_bindings(s);
  return rc;
}

static int write_end_run(aa_store *st, const item *it) {
  sqlite3_bind_int64(st->ws.end_run, 1, it->run_id);
  sqlite3_bind_int64(st->ws.end_run, 2, it->ts_ms);
  return w_step(st, st->ws.end_run);
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
    if (!aa__store_ring_pop(st, r, &ev, &run)) {
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
    if (ev.frame != 0) {
      BIND_U64(s, 9, ev.frame);
    } else {
      sqlite3_bind_null(s, 9);
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
  while (aa__store_ring_pop(st, r, &ev, &run)) atomic_fetch_add(&st->events_dropped, 1);
}

/* ------------------------------------------------------------------ the loop */

void aa__store_wake_writer(aa_store *st) { pthread_cond_signal(&st->wake); }

/* One writer cycle: begin-run requests, the queued items, the trace ring, in
 * one transaction; then retention when due. */
static void writer_cycle(aa_store *st, item *list, begin_req *begins,
                         bool flush) {
  int rc = SQLITE_OK;
  const char *what = "writing";
  uint64_t snaps = 0, pols = 0, ooms = 0, evs = 0, frames = 0;

  for (begin_req *b = begins; b != NULL; b = b->next) {
    if (!aa__store_is_enabled(st)) {
      b->err = atomic_load(&st->last_error);
      continue;
    }
    if (write_begin_run(st, b) == SQLITE_OK) {
      atomic_store(&st->run_id, b->run_id);
    }
  }
  if (!aa__store_is_enabled(st)) goto dropped;

  bool have_ring = atomic_load_explicit(&st->ring, memory_order_acquire) !=
                       NULL &&
                   atomic_load(&st->ring_deq) != atomic_load(&st->ring_enq);
  /* a new, smaller bound applies at once, without waiting for an event */
  if (atomic_load(&st->trace_bound_changed)) st->trace_bound_pending = true;
  if (list == NULL && !have_ring && !st->trace_bound_pending) goto maintenance;

  what = "starting a transaction";
  rc = aa__store_w_exec(st, "BEGIN IMMEDIATE");
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
    } else if (it->kind == ITEM_OOM) {
      what = "writing an out-of-memory record";
      rc = write_oom(st, it);
      ooms++;
    } else if (it->kind == ITEM_FRAMES) {
      what = "writing a call stack";
      rc = write_frames(st, it);
      frames++;
    } else {
      aa__assert_internal(it->kind == ITEM_END_RUN);
      what = "ending a run";
      rc = write_end_run(st, it);
    }
    if (rc != SQLITE_OK) goto fail;
  }
  what = "writing trace events";
  rc = write_trace(st, &evs);
  if (rc != SQLITE_OK) goto fail;
  if (atomic_exchange(&st->trace_bound_changed, false))
    st->cfg.trace_max_events = atomic_load(&st->trace_bound);
  if (st->cfg.trace_max_events > 0 && (evs > 0 || st->trace_bound_pending)) {
    what = "keeping the trace within its bound";
    rc = aa__store_trace_bound(st);
    if (rc != SQLITE_OK) goto fail;
    st->trace_bound_pending = false;
  }
  int64_t run = st->counted_run;
  if (run > 0) {
    sqlite3_stmt *u = st->ws.upd_run;
    sqlite3_bind_int64(u, 1, run);
    BIND_U64(u, 2, atomic_load(&st->snapshots_written) + snaps - st->base_snap_written);
    BIND_U64(u, 3, atomic_load(&st->snapshots_dropped) - st->base_snap_dropped);
    BIND_U64(u, 4, atomic_load(&st->events_written) + evs - st->base_ev_written);
    BIND_U64(u, 5, atomic_load(&st->events_dropped) - st->base_ev_dropped);
    BIND_U64(u, 7, atomic_load(&st->ooms_written) + ooms - st->base_oom_written);
    BIND_U64(u, 8, atomic_load(&st->ooms_dropped) - st->base_oom_dropped);
    uint64_t cut = aa__store_trace_cut_of(st, run);
    if (cut != UINT64_MAX) {
      BIND_U64(u, 6, cut);
    } else {
      sqlite3_bind_null(u, 6);
    }
    what = "updating the run";
    rc = w_step(st, u);
    if (rc != SQLITE_OK) goto fail;
  }
  /* A run that lost events just before the next one began: its cut is
   * written here, the run update above being the new run's. A cut only
   * ever goes down (the first loss wins). */
  uint64_t cut_seq = UINT64_MAX;
  int64_t cut_run = aa__store_trace_cut(st, &cut_seq);
  if (cut_run > 0 && cut_run != run && cut_seq != UINT64_MAX) {
    char sql[160];
    snprintf(sql, sizeof sql,
             "UPDATE runs SET trace_cut_seq = min(coalesce(trace_cut_seq, %lld), %lld)"
             " WHERE id = %lld",
             (long long)cut_seq, (long long)cut_seq, (long long)cut_run);
    what = "updating a run's trace cut";
    rc = aa__store_w_exec(st, sql);
    if (rc != SQLITE_OK) goto fail;
  }
  what = "committing";
  rc = aa__store_w_exec(st, "COMMIT");
  if (rc != SQLITE_OK) goto fail;
  atomic_fetch_add(&st->transactions, 1);
  atomic_fetch_add(&st->snapshots_written, snaps);
  atomic_fetch_add(&st->policy_written, pols);
  atomic_fetch_add(&st->ooms_written, ooms);
  atomic_fetch_add(&st->events_written, evs);
  atomic_fetch_add(&st->frames_written, frames);
  goto maintenance;

fail:
  aa__store_writer_fail(st, rc, what);
  /* What was in the failed transaction is lost. */
  atomic_fetch_add(&st->events_dropped, evs);
  atomic_fetch_add(&st->frames_dropped, frames);
  goto dropped;

maintenance:
  if (atomic_exchange(&st->ret_changed, false)) {
    /* new bounds (aa_store_set_retention) apply at once */
    st->cfg.max_bytes = atomic_load(&st->ret_bytes);
    st->cfg.max_age_s = atomic_load(&st->ret_age_s);
    st->last_retention_ns = 0;
  }
  if (st->cfg.max_bytes > 0 || st->cfg.max_age_s > 0) {
    uint64_t now = aa_now_ns();
    if (flush || st->last_retention_ns == 0 ||
        now - st->last_retention_ns >=
            (uint64_t)st->cfg.retention_interval_ms * 1000000u) {
      st->last_retention_ns = now;
      aa__store_retention(st);
    }
  }
  if (!aa__store_is_enabled(st)) drain_trace_dropped(st);
  for (item *it = list; it != NULL;) {
    item *next = it->next;
    aa__store_item_free(it);
    it = next;
  }
  return;

dropped:
  for (item *it = list; it != NULL;) {
    item *next = it->next;
    aa__store_count_dropped(st, it);
    aa__store_item_free(it);
    it = next;
  }
  drain_trace_dropped(st);
}

void *aa__store_writer_main(void *arg) {
  aa_store *st = arg;
  pthread_mutex_lock(&st->mu);
  for (;;) {
    bool work = st->stop || st->begins != NULL ||
                st->flush_req != st->flush_done ||
                st->queued >= aa__store_wake_mark(st);
    if (!work) {
      struct timespec ts;
      aa__store_deadline_after(&ts, st->cfg.commit_interval_ms);
      pthread_cond_timedwait(&st->wake, &st->mu, &ts);
    }
    item *list = st->head;
    /* the writer takes every queued item: none is lost */
    aa__assert_internal(aa__store_list_length(list) == st->queued);
    aa__assert_internal(st->queued == 0 || st->tail->next == NULL);
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
