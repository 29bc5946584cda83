/*
 * runtime_services.c — the optional services the runtime starts: the store,
 * the snapshot ticker, the policy loop and the HTTP server (whose provider
 * callbacks are in runtime_http.c); the policy in force is
 * runtime_policy.c's. Each works on the runtime it is given (rt->svc: the
 * services' state).
 *
 * Each service that fails to start is logged once and left off; allocation
 * never depends on any of them.
 *
 * Locks, in the only order they nest:
 *   adapt loop's lock (held while it calls commit_proposal and
 *   on_loop_decision)
 *     -> rt->svc.policy_lock (the policy document, its version, the
 *        pools' overrides)
 * HTTP handlers take policy_lock and release it before calling into the
 * loop (aa_adapt_loop_set_params), so the order is never reversed.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/http.h"
#include "adaptalloc/policy.h"
#include "adaptalloc/store.h"
#include "runtime_internal.h"
#include "runtime_json.h" /* aa__buf */

/* The trace ring when ADAPTALLOC_TRACE=1: 512 Ki events (72 bytes each,
 * 36 MiB, allocated at the first event), about 2 s of the demo's events, so
 * that a writer held up by a checkpoint or a busy machine loses nothing. The
 * store's default, 64 Ki, lost 5% of a 20 s demo trace on a loaded 2-core
 * VM; a program that outruns the writer for longer still loses events and
 * says so at exit (note_trace_loss). */
#define AA__RT_TRACE_RING (1u << 19)

/* ------------------------------------------------------------------ loop */

/* Counts each decision the loop made (its proposal was committed by
 * commit_proposal). Runs in the loop thread with the loop's lock held. */
static void on_loop_decision(void *user, aa_pool *pool, const aa_adapt_decision *d) {
  aa_runtime *rt = user;
  (void)pool;
  atomic_fetch_add(&rt->svc.loop_decisions, 1);
  if (d->result != AA_OK)
    return;
  if (d->kind == AA_ADAPT_ADD_CLASS)
    atomic_fetch_add(&rt->svc.classes_added, 1);
  else if (d->kind == AA_ADAPT_RETIRE_CLASS)
    atomic_fetch_add(&rt->svc.classes_retired, 1);
}

/* The section a proposal for pool changes: a region's pool its region's
 * (made from pools.device when the policy has none), else its backend's. */
static void proposal_section(const aa_pool *pool, char *buf, size_t cap) {
  if (aa_pool_region(pool)[0] != '\0')
    snprintf(buf, cap, "regions.%s", aa_pool_region(pool));
  else
    snprintf(buf, cap, "%s", aa_policy_pool_kind(pool));
}

typedef struct proposal_arg {
  const aa_adapt_proposal *p;
  char section[48];
} proposal_arg;

/* build for a proposal: the policy in force with the section's class table
 * the proposal's. */
static int build_proposal(void *arg, const aa_policy *cur, aa_policy **out, char *err,
                          size_t errcap) {
  const proposal_arg *a = arg;
  return aa_policy_with_classes(cur, a->section, a->p->classes, a->p->n_classes, out, err,
                                errcap);
}

/* The loop's committer: a proposal's class table becomes a new policy
 * version through the one path (aa__rt_settings_commit, source "loop", the
 * decisions' reasons as the audit's), so every pool of that section gets
 * it with its overrides (the user's cap) in force; then the trim. Runs in
 * the loop thread with the loop's lock held (the order: loop's lock ->
 * policy_lock). */
static int commit_proposal(void *user, aa_adapt_proposal *p) {
  aa_runtime *rt = user;
  aa__rt_change c;
  proposal_arg a;
  aa__buf reason;
  char err[AA_POLICY_ERR_CAP + 128] = "";
  int rc = AA_OK;

  if (p->n_classes > 0) {
    memset(&c, 0, sizeof(c));
    a.p = p;
    proposal_section(p->pool, a.section, sizeof(a.section));
    aa__buf_init(&reason);
    for (size_t k = 0; k < p->n_decisions; k++) {
      const aa_adapt_decision *d = &p->decisions[k];
      if (d->result != AA_OK || d->kind == AA_ADAPT_TRIM)
        continue;
      aa__buf_printf(&reason, "%s%s on %s: %s", reason.len ? "; " : "",
                     aa_adapt_kind_name(d->kind), aa_pool_name(p->pool), d->reason);
    }
    c.build = build_proposal;
    c.arg = &a;
    c.source = "loop";
    c.reason = reason.data != NULL ? reason.data : "loop proposal";
    rc = aa__rt_settings_commit(rt, &c, NULL, NULL, err, sizeof(err));
    if (rc != AA_OK && !rt->quiet)
      aa__rt_log("adapt: the loop's proposal for pool %s is refused: %s",
                 aa_pool_name(p->pool), err[0] ? err : aa_strerror(rc));
    aa__buf_free(&reason);
  }
  if (p->trim)
    p->released = aa_pool_trim(p->pool, p->trim_keep);
  return rc;
}

static void start_loop(aa_runtime *rt) {
  aa_adapt_loop_config cfg;
  int rc;

  aa_adapt_loop_config_init(&cfg);
  pthread_mutex_lock(&rt->svc.policy_lock);
  aa_policy_adapt_params(rt->svc.policy, &cfg.params);
  pthread_mutex_unlock(&rt->svc.policy_lock);
  cfg.on_decision = on_loop_decision;
  cfg.commit = commit_proposal;
  cfg.user = rt;
  rc = aa_adapt_loop_new(&cfg, &rt->svc.loop);
  if (rc == AA_OK)
    rc = aa_adapt_loop_start(rt->svc.loop);
  if (rc != AA_OK) {
    aa__rt_log("adapt: the policy loop is off: %s", aa_strerror(rc));
    aa_adapt_loop_destroy(rt->svc.loop);
    rt->svc.loop = NULL;
  }
}

/* ------------------------------------------------------------------ store */

static void start_store(aa_runtime *rt) {
  aa_store_config cfg;
  aa_store_run_info info;
  aa_telemetry_params t;
  aa__buf conf;
  char *json;
  int rc;

  if (rt->db_refused) {
    aa__rt_log("store: ADAPTALLOC_DB is refused (see above); the store is off");
    return;
  }
  if (aa__rt_is_off(rt->db))
    return;
  if (rt->db[0] != '\0' && (isspace((unsigned char)rt->db[0]) ||
                            isspace((unsigned char)rt->db[strlen(rt->db) - 1]))) {
    /* " off" or "off " would create a file of that name: refused, as
     * ADAPTALLOC_HTTP refuses " off" and ADAPTALLOC_TRACE "OFF " */
    aa__rt_log("store: ADAPTALLOC_DB=\"%s\" begins or ends with white space; "
               "write off to turn the store off, or name the file without it; "
               "the store is off",
               rt->db);
    return;
  }
  if (!aa__rt_expand_rank(rt->db, rt->local_rank >= 0 ? rt->local_rank : rt->rank,
                          rt->svc.store_path, sizeof(rt->svc.store_path))) {
    aa__rt_log("store: ADAPTALLOC_DB with {rank} expanded is over the limit "
               "of %zu bytes; the store is off",
               sizeof(rt->svc.store_path) - 1);
    return;
  }
  aa_store_config_init(&cfg);
  cfg.path = rt->svc.store_path;
  pthread_mutex_lock(&rt->svc.policy_lock);
  aa_policy_telemetry_params(rt->svc.policy, &t);
  pthread_mutex_unlock(&rt->svc.policy_lock);
  cfg.max_bytes = t.retention_bytes;
  cfg.max_age_s = t.retention_age_s;
  cfg.trace_max_events = t.trace_max_events;
  /* the ring is allocated at the first event, so a run that never traces
   * pays nothing for it; tracing may be turned on later (PATCH /policy) */
  cfg.trace_capacity = AA__RT_TRACE_RING;
  rc = aa_store_open(&cfg, &rt->svc.store);
  if (rc != AA_OK) {
    /* aa_store_open logged the cause in one line. */
    rt->svc.store = NULL;
    return;
  }
  atomic_store(&rt->svc.trace_every, rt->trace ? 1u : t.trace_sample);
  atomic_store(&rt->svc.trace_min_bytes, rt->trace ? 0 : t.trace_min_bytes);
  if (rt->trace || t.trace) {
    uint64_t now = aa_now_ns();
    atomic_store(&rt->svc.tracing, true);
    atomic_store(&rt->svc.traced, true);
    atomic_store(&rt->svc.trace_began_ns, now);
    if (!rt->trace && t.trace_seconds)
      atomic_store(&rt->svc.trace_deadline_ns, now + (uint64_t)t.trace_seconds * 1000000000ull);
  }
  aa__buf_init(&conf);
  aa__buf_printf(&conf, "{\"model\":");
  aa__buf_json_cstr(&conf, rt->model);
  aa__buf_printf(&conf, ",\"http\":");
  aa__buf_json_cstr(&conf, rt->http);
  aa__buf_printf(&conf, ",\"trace\":%s,\"policy_source\":",
                 atomic_load(&rt->svc.tracing) ? "true" : "false");
  aa__buf_json_cstr(&conf, rt->svc.policy_source);
  aa__buf_printf(&conf, "}");
  memset(&info, 0, sizeof(info));
  info.model = rt->model;
  info.rank = rt->rank;
  info.local_rank = rt->local_rank;
  info.world_size = rt->world_size;
  info.policy_version = 1;
  info.config_json = conf.data;
  rc = aa_store_begin_run(rt->svc.store, &info, &rt->svc.run_id);
  aa__buf_free(&conf);
  if (rc != AA_OK) {
    aa__rt_log("store: cannot begin a run: %s; store off", aa_strerror(rc));
    aa_store_close(rt->svc.store);
    rt->svc.store = NULL;
    rt->svc.run_id = 0;
    return;
  }
  pthread_mutex_lock(&rt->svc.policy_lock);
  json = aa_policy_to_json(rt->svc.policy);
  aa_store_policy_change(rt->svc.store, rt->svc.policy_source, 0, 1,
                         "policy in force at start", json);
  pthread_mutex_unlock(&rt->svc.policy_lock);
  free(json);
  if (!rt->quiet)
    aa__rt_log("store: %s (run %lld%s)", rt->svc.store_path, (long long)rt->svc.run_id,
               atomic_load(&rt->svc.tracing) ? ", tracing every event" : "");
}

static void snapshot_all(aa_runtime *rt) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  aa_pool_stats *st;
  size_t n, i;

  aa__rt_oom_drain(rt, rt->svc.store);
  if (rt->svc.store == NULL)
    return;
  st = malloc(sizeof(*st));
  if (st == NULL)
    return;
  n = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS);
  for (i = 0; i < n; i++) {
    if (aa_pool_stats_get(pools[i], st) == AA_OK)
      aa_store_snapshot(rt->svc.store, st);
  }
  free(st);
}

static void *ticker_main(void *arg) {
  aa_runtime *rt = arg;
  pthread_mutex_lock(&rt->svc.ticker_lock);
  while (!rt->svc.ticker_stop) {
    struct timespec ts;
    unsigned ms = atomic_load(&rt->svc.snapshot_interval_ms);
    uint64_t due = aa__rt_trace_due_in(rt); /* a timed trace ends on time */
    if (due != UINT64_MAX && due / 1000000 < ms)
      ms = (unsigned)(due / 1000000) + 1;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&rt->svc.ticker_cond, &rt->svc.ticker_lock, &ts);
    if (rt->svc.ticker_stop)
      break;
    pthread_mutex_unlock(&rt->svc.ticker_lock);
    aa__rt_trace_expire(rt);
    snapshot_all(rt);
    pthread_mutex_lock(&rt->svc.ticker_lock);
  }
  pthread_mutex_unlock(&rt->svc.ticker_lock);
  return NULL;
}

static void start_ticker(aa_runtime *rt) {
  if (rt->svc.store == NULL)
    return;
  rt->svc.ticker_stop = false;
  if (pthread_create(&rt->svc.ticker, NULL, ticker_main, rt) != 0) {
    aa__rt_log("store: cannot start the snapshot thread: %s", strerror(errno));
    return;
  }
  rt->svc.ticker_running = true;
}

static void stop_ticker(aa_runtime *rt) {
  if (!rt->svc.ticker_running)
    return;
  pthread_mutex_lock(&rt->svc.ticker_lock);
  rt->svc.ticker_stop = true;
  pthread_cond_signal(&rt->svc.ticker_cond);
  pthread_mutex_unlock(&rt->svc.ticker_lock);
  pthread_join(rt->svc.ticker, NULL);
  rt->svc.ticker_running = false;
}

/* Once no pool traces any more and the writer had its chance: a trace that
 * lost events (the writer fell behind and the ring was full, or the store
 * failed) replays only up to its first loss, so say so now, not when someone
 * replays it. Printed even when quiet: it is about data the user asked for. */
static void note_trace_loss(aa_runtime *rt) {
  aa_store_stats ss;

  if (!atomic_load(&rt->svc.traced) || aa_store_stats_get(rt->svc.store, &ss) != AA_OK ||
      ss.events_dropped == 0)
    return;
  aa__rt_log("store: the trace of run %lld is incomplete: %llu events were dropped "
             "(the store's writer fell behind and its ring was full, or the store failed); "
             "adaptalloc-replay replays the events before the first loss only",
             (long long)rt->svc.run_id, (unsigned long long)ss.events_dropped);
}

/* What the writer has done so far: transactions committed, and events
 * still in the ring (which only shrinks once no pool traces). */
static void writer_progress(aa_runtime *rt, uint64_t *transactions, uint64_t *queued) {
  aa_store_stats ss;
  *transactions = 0;
  *queued = 0;
  if (aa_store_stats_get(rt->svc.store, &ss) == AA_OK) {
    *transactions = ss.transactions;
    *queued = ss.events_queued;
  }
}

/* Waits for the writer to commit what was queued before the call: as long
 * as it takes with limit_ms 0 (aa_store_close joins the writer anyway);
 * else until limit_ms after start_ns, or AA__RT_FLUSH_STALL_MS without
 * progress, when it returns AA_EAGAIN. Otherwise aa_store_flush's result. */
static int flush_run(aa_runtime *rt, uint64_t start_ns, uint32_t limit_ms) {
  uint64_t moved = aa_now_ns(), tx, queued, tx2, queued2, now;
  int rc;

  if (limit_ms == 0)
    return aa_store_flush(rt->svc.store, 0);
  writer_progress(rt, &tx, &queued);
  for (;;) {
    rc = aa_store_flush(rt->svc.store, 250);
    if (rc != AA_EAGAIN)
      return rc;
    now = aa_now_ns();
    writer_progress(rt, &tx2, &queued2);
    if (tx2 != tx || queued2 < queued) {
      moved = now;
      tx = tx2;
      queued = queued2;
    }
    if (now - moved >= (uint64_t)AA__RT_FLUSH_STALL_MS * 1000000u ||
        now - start_ns >= (uint64_t)limit_ms * 1000000u)
      return AA_EAGAIN;
  }
}

void aa__rt_services_end_run(aa_runtime *rt, uint32_t limit_ms,
                             void (*detached)(void)) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  aa_store_stats ss;
  uint64_t start = aa_now_ns();
  size_t n, i;
  int rc;

  if (rt->svc.store == NULL || atomic_exchange(&rt->svc.run_ended, true))
    return;
  stop_ticker(rt);
  /* After this no event reaches the ring: set_trace waits for pushes under
   * way, so what the run traced is all in the ring now. */
  n = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS);
  for (i = 0; i < n; i++)
    aa_pool_set_trace(pools[i], NULL, NULL);
  snapshot_all(rt); /* the final state of every pool */
  if (detached != NULL)
    detached();
  if (aa_store_end_run(rt->svc.store) == AA_ELIMIT) {
    /* the queue is full (snapshots): let the writer take it, then end */
    (void)flush_run(rt, start, limit_ms);
    (void)aa_store_end_run(rt->svc.store);
  }
  rc = flush_run(rt, start, limit_ms);
  if (rc == AA_EAGAIN && aa_store_stats_get(rt->svc.store, &ss) == AA_OK) {
    /* The writer is stuck (another process keeps the database locked, a
     * disk too slow): what it has not committed is lost; say so, never
     * wait longer. */
    double waited = (double)(aa_now_ns() - start) / 1e9;
    if (atomic_load(&rt->svc.traced))
      aa__rt_log("store: the trace of run %lld is incomplete: the store's writer had not "
                 "finished after %.1f s at exit (the wait ends after %u s without progress "
                 "or %u s in all); the events it had not committed (%llu still in the "
                 "ring) are lost, and the run's row may not count them or its end",
                 (long long)rt->svc.run_id, waited, AA__RT_FLUSH_STALL_MS / 1000,
                 limit_ms / 1000, (unsigned long long)ss.events_queued);
    else
      aa__rt_log("store: run %lld may be incomplete: the store's writer had not finished "
                 "after %.1f s at exit; its last snapshots and its end may be lost",
                 (long long)rt->svc.run_id, waited);
    return;
  }
  note_trace_loss(rt);
}

/* ------------------------------------------------------------------ start/stop */

void aa__rt_services_start(aa_runtime *rt) {
  atomic_store(&rt->svc.snapshot_interval_ms, 1000);
  atomic_store(&rt->svc.histogram_on, true);
  atomic_store(&rt->svc.tracing, false);
  atomic_store(&rt->svc.traced, false);
  rt->svc.nov = 0;
  aa__rt_load_start_policy(rt);
  if (rt->svc.policy != NULL) {
    aa__rt_adopt_telemetry(rt, rt->svc.policy);
    aa_adapt_params ap;
    aa_policy_adapt_params(rt->svc.policy, &ap);
    if (ap.enabled)
      start_loop(rt);
  }
  start_store(rt);
  start_ticker(rt);
  aa__rt_start_http(rt);
}

void aa__rt_services_stop(aa_runtime *rt) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  size_t n, i;

  aa_http_destroy(rt->svc.http);
  rt->svc.http = NULL;
  aa__rt_token_file_remove(rt);
  atomic_store(&rt->svc.http_port, 0);
  aa_adapt_loop_destroy(rt->svc.loop);
  rt->svc.loop = NULL;
  stop_ticker(rt);
  n = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS);
  for (i = 0; i < n; i++)
    aa_pool_set_trace(pools[i], NULL, NULL);
  if (rt->svc.store != NULL) {
    /* a no-op when the run already ended (at exit, from another thread);
     * waits as long as the writer needs, as aa_store_close's join does */
    aa__rt_services_end_run(rt, 0, NULL);
    aa_store_close(rt->svc.store);
    rt->svc.store = NULL;
  }
  pthread_mutex_lock(&rt->svc.policy_lock);
  aa_policy_free(rt->svc.policy);
  rt->svc.policy = NULL;
  rt->svc.nov = 0; /* the pools go too */
  atomic_store(&rt->svc.tracing, false);
  pthread_mutex_unlock(&rt->svc.policy_lock);
}
