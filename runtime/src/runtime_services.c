/*
 * runtime_services.c — the optional services the runtime starts: the policy
 * in force (file or built-in default), the store, the snapshot ticker, the
 * policy loop and the HTTP server (whose provider callbacks live here).
 *
 * Each service that fails to start is logged once and left off; allocation
 * never depends on any of them.
 *
 * Locks, in the only order they nest:
 *   adapt loop's lock (held while it calls on_loop_decision)
 *     -> svc.policy_lock (the policy document, its version)
 * HTTP handlers take policy_lock and release it before calling into the
 * loop (aa_adapt_loop_set_params), so the order is never reversed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/http.h"
#include "adaptalloc/policy.h"
#include "adaptalloc/store.h"
#include "runtime_internal.h"
#include "runtime_json.h"

typedef struct rt_services {
  pthread_mutex_t policy_lock;
  aa_policy *policy;      /* in force; guarded by policy_lock */
  char policy_source[32]; /* "file", "default", "http", "loop" */

  aa_store *store;        /* NULL when off */
  char store_path[1100];
  int64_t run_id;

  aa_adapt_loop *loop;    /* NULL when off */
  aa_http *http;          /* NULL when off */
  atomic_int http_port;

  pthread_t ticker;
  bool ticker_running;
  pthread_mutex_t ticker_lock;
  pthread_cond_t ticker_cond;
  bool ticker_stop;
  atomic_uint snapshot_interval_ms;
  atomic_bool histogram_on;

  atomic_uint_fast64_t classes_added;
  atomic_uint_fast64_t classes_retired;
  atomic_uint_fast64_t loop_decisions;
  atomic_uint_fast64_t policy_changes;
  atomic_uint_fast64_t policy_rejects;
} rt_services;

static rt_services svc = {
    .policy_lock = PTHREAD_MUTEX_INITIALIZER,
    .ticker_lock = PTHREAD_MUTEX_INITIALIZER,
    .ticker_cond = PTHREAD_COND_INITIALIZER,
};

static bool is_off(const char *v) { return strcmp(v, "off") == 0; }

/* ------------------------------------------------------------------ policy */

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Loads the start-up policy: ADAPTALLOC_POLICY, else
 * ADAPTALLOC_POLICY_DIR/<model>.json when it exists, else the built-in
 * default. A file that does not load is reported and the default is used. */
static void load_start_policy(void) {
  char path[1300];
  char err[512];
  aa_policy *p = NULL;
  int rc;

  path[0] = '\0';
  if (aa__rt.policy_refused) {
    aa__rt_log("policy: the policy path is refused (see above); using the "
               "built-in default policy");
  } else if (aa__rt.policy_path[0] != '\0') {
    snprintf(path, sizeof(path), "%s", aa__rt.policy_path);
  } else {
    snprintf(path, sizeof(path), "%s/%s.json", aa__rt.policy_dir, aa__rt.model);
    if (!file_exists(path))
      path[0] = '\0';
  }
  if (path[0] != '\0') {
    err[0] = '\0';
    rc = aa_policy_load_file(path, &p, err, sizeof(err));
    if (rc != AA_OK) {
      /* err already names the file, the JSON path and the rule. */
      aa__rt_log("policy: %s; using the built-in default policy",
                 err[0] ? err : aa_strerror(rc));
      p = NULL;
    } else {
      snprintf(svc.policy_source, sizeof(svc.policy_source), "file");
      if (!aa__rt.quiet)
        aa__rt_log("policy: %s (model %s)", path, aa__rt.model);
    }
  }
  if (p == NULL) {
    rc = aa_policy_default(&p);
    if (rc != AA_OK) {
      aa__rt_log("policy: cannot build the default policy: %s", aa_strerror(rc));
      return;
    }
    snprintf(svc.policy_source, sizeof(svc.policy_source), "default");
  }
  aa_policy_set_version(p, 1);
  svc.policy = p;
}

int aa__rt_pool_config(const char *kind, aa_pool_config *cfg) {
  int rc = AA_OK;
  pthread_mutex_lock(&svc.policy_lock);
  if (svc.policy != NULL) {
    rc = aa_policy_pool_config(svc.policy, kind, cfg, NULL, 0, NULL);
    if (rc == AA_ERANGE)
      rc = AA_OK; /* we asked for cfg only; classes come with apply */
  }
  pthread_mutex_unlock(&svc.policy_lock);
  if (rc != AA_OK) {
    aa__rt_log("policy: pool %s: %s; using the defaults", kind, aa_strerror(rc));
    rc = AA_OK;
  }
  return rc;
}

/* Reads the policy's telemetry settings into the runtime's atomics. Called
 * with policy_lock held. */
static void adopt_telemetry(const aa_policy *p) {
  aa_telemetry_params t;
  aa_policy_telemetry_params(p, &t);
  atomic_store(&svc.snapshot_interval_ms,
               t.snapshot_interval_ms ? t.snapshot_interval_ms : 1000);
  /* The core delivers trace events only while a pool's telemetry is on, so
   * tracing keeps it on even when the policy turns the histogram off. */
  atomic_store(&svc.histogram_on, t.histogram || t.trace || aa__rt.trace);
}

static void trace_on(aa_pool *pool) {
  if (svc.store != NULL && aa__rt.trace)
    aa_pool_set_trace(pool, aa_store_trace_push, svc.store);
}

void aa__rt_pool_created(aa_pool *pool, const char *kind) {
  int rc = AA_OK;

  pthread_mutex_lock(&svc.policy_lock);
  if (svc.policy != NULL)
    rc = aa_policy_apply(svc.policy, kind, pool);
  pthread_mutex_unlock(&svc.policy_lock);
  if (rc != AA_OK)
    aa__rt_log("policy: cannot apply the %s classes to pool %s: %s", kind,
               aa_pool_name(pool), aa_strerror(rc));
  aa_pool_set_telemetry(pool, atomic_load(&svc.histogram_on));
  trace_on(pool);
  if (svc.loop != NULL) {
    rc = aa_adapt_loop_add_pool(svc.loop, pool);
    if (rc != AA_OK)
      aa__rt_log("adapt: cannot watch pool %s: %s", aa_pool_name(pool),
                 aa_strerror(rc));
  }
}

static const char *pool_kind(const aa_pool *pool) {
  const aa_backend *b = aa_pool_backend(pool);
  if (b == NULL)
    return "host";
  switch (b->kind) {
  case AA_BACKEND_DEVICE:
    return "device";
  case AA_BACKEND_PINNED:
    return "pinned";
  default:
    return "host";
  }
}

/* Applies a validated policy to every live pool, in the pool list's order.
 * Each pool's change is all-or-nothing; at the first pool that refuses it
 * stops, and *changed says how many pools (from the first) took the new
 * tables. Called with policy_lock held. */
static int apply_to_pools(const aa_policy *p, size_t *changed, char *err,
                          size_t errcap) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  size_t n = aa__rt_pools_snapshot(pools, AA_RT_MAX_POOLS);
  size_t i;
  int rc;

  *changed = 0;

  /* Refuse up front what cannot apply to a live pool (fixed at creation). */
  for (i = 0; i < n; i++) {
    aa_pool_config cur, want;
    aa_pool_config_init(&cur);
    aa_pool_config_init(&want);
    rc = aa_policy_pool_config(svc.policy, pool_kind(pools[i]), &cur, NULL, 0, NULL);
    if (rc != AA_OK && rc != AA_ERANGE)
      continue;
    rc = aa_policy_pool_config(p, pool_kind(pools[i]), &want, NULL, 0, NULL);
    if (rc != AA_OK && rc != AA_ERANGE)
      continue;
    if (cur.max_small != want.max_small || cur.slab_size != want.slab_size) {
      snprintf(err, errcap,
               "pools.%s: slab_size and max_small are fixed while pool %s is "
               "live (%zu/%zu in force, %zu/%zu asked); restart to change them",
               pool_kind(pools[i]), aa_pool_name(pools[i]), cur.slab_size,
               cur.max_small, want.slab_size, want.max_small);
      return AA_EINVAL;
    }
  }
  for (i = 0; i < n; i++) {
    rc = aa_policy_apply(p, pool_kind(pools[i]), pools[i]);
    if (rc == AA_OK)
      *changed = i + 1;
    if (rc != AA_OK) {
      snprintf(err, errcap, "pools.%s: the pool %s refused the class table: %s",
               pool_kind(pools[i]), aa_pool_name(pools[i]), aa_strerror(rc));
      return rc;
    }
    aa_pool_set_telemetry(pools[i], atomic_load(&svc.histogram_on));
  }
  return AA_OK;
}

/* Installs `next` (validated) as the policy in force: applies it, bumps the
 * version, logs the change to the store. Takes ownership of next. */
static int install_policy(aa_policy *next, const char *source,
                          const char *reason, bool has_if_match,
                          uint64_t if_match, uint64_t *new_version, char *err,
                          size_t errcap) {
  aa_adapt_params params;
  uint64_t old_version;
  size_t changed = 0;
  char *json = NULL;
  int rc;

  memset(&params, 0, sizeof(params));
  pthread_mutex_lock(&svc.policy_lock);
  old_version = svc.policy ? aa_policy_version(svc.policy) : 0;
  if (has_if_match && if_match != old_version) {
    snprintf(err, errcap, "policy version %llu is in force, not %llu",
             (unsigned long long)old_version, (unsigned long long)if_match);
    rc = AA_ESTALE;
    goto unlock;
  }
  rc = apply_to_pools(next, &changed, err, errcap);
  if (rc != AA_OK) {
    /* Only pools that took the new tables before the refusal get the old
     * ones back; the rest were never touched. */
    if (svc.policy != NULL && changed > 0) {
      aa_pool *pools[AA_RT_MAX_POOLS];
      size_t n = aa__rt_pools_snapshot(pools, AA_RT_MAX_POOLS), i;
      for (i = 0; i < changed && i < n; i++)
        aa_policy_apply(svc.policy, pool_kind(pools[i]), pools[i]);
    }
    goto unlock;
  }
  aa_policy_set_version(next, old_version + 1);
  aa_policy_free(svc.policy);
  svc.policy = next;
  next = NULL;
  snprintf(svc.policy_source, sizeof(svc.policy_source), "%s", source);
  adopt_telemetry(svc.policy);
  aa_policy_adapt_params(svc.policy, &params);
  json = aa_policy_to_json(svc.policy);
  if (svc.store != NULL)
    aa_store_policy_change(svc.store, source, old_version, old_version + 1,
                           reason, json);
  atomic_fetch_add(&svc.policy_changes, 1);
  if (new_version != NULL)
    *new_version = old_version + 1;
unlock:
  pthread_mutex_unlock(&svc.policy_lock);
  if (rc == AA_OK && svc.loop != NULL) {
    int prc = aa_adapt_loop_set_params(svc.loop, &params);
    if (prc != AA_OK)
      aa__rt_log("adapt: new parameters refused: %s", aa_strerror(prc));
  }
  if (rc != AA_OK)
    atomic_fetch_add(&svc.policy_rejects, 1);
  free(json);
  aa_policy_free(next);
  return rc;
}

/* ------------------------------------------------------------------ loop */

/* Records a decision the loop applied: a new policy version whose class
 * table for that pool kind is the pool's live table, and an audit entry with
 * the loop's reason. Runs in the loop thread with the loop's lock held. */
static void on_loop_decision(void *user, aa_pool *pool, const aa_adapt_decision *d) {
  aa_class_spec specs[AA_MAX_CLASSES];
  size_t n = 0, i;
  aa__buf patch;
  aa_policy *next = NULL;
  char err[256];
  char reason[AA_ADAPT_REASON_CAP + 64];
  (void)user;

  atomic_fetch_add(&svc.loop_decisions, 1);
  if (d->result != AA_OK)
    return;
  if (d->kind == AA_ADAPT_ADD_CLASS)
    atomic_fetch_add(&svc.classes_added, 1);
  else if (d->kind == AA_ADAPT_RETIRE_CLASS)
    atomic_fetch_add(&svc.classes_retired, 1);
  if (d->kind == AA_ADAPT_TRIM)
    return; /* trimming changes no policy */
  if (aa_pool_classes(pool, specs, AA_MAX_CLASSES, &n, NULL) != AA_OK)
    return;

  aa__buf_init(&patch);
  aa__buf_printf(&patch, "{\"pools\":{\"%s\":{\"classes\":[", pool_kind(pool));
  for (i = 0; i < n && i < AA_MAX_CLASSES; i++)
    aa__buf_printf(&patch, "%s{\"size\":%zu,\"cache_limit\":%u,\"prefill\":%u}",
                      i ? "," : "", specs[i].block_size, specs[i].cache_limit,
                      specs[i].prefill);
  aa__buf_printf(&patch, "]}}}");
  snprintf(reason, sizeof(reason), "%s on %s: %s", aa_adapt_kind_name(d->kind),
           aa_pool_name(pool), d->reason);

  pthread_mutex_lock(&svc.policy_lock);
  if (svc.policy != NULL && patch.data != NULL &&
      aa_policy_merge_patch(svc.policy, patch.data, patch.len, &next, err,
                            sizeof(err)) == AA_OK) {
    uint64_t v = aa_policy_version(svc.policy);
    char *json;
    aa_policy_set_version(next, v + 1);
    aa_policy_free(svc.policy);
    svc.policy = next;
    snprintf(svc.policy_source, sizeof(svc.policy_source), "loop");
    json = aa_policy_to_json(svc.policy);
    if (svc.store != NULL)
      aa_store_policy_change(svc.store, "loop", v, v + 1, reason, json);
    free(json);
    atomic_fetch_add(&svc.policy_changes, 1);
  }
  pthread_mutex_unlock(&svc.policy_lock);
  aa__buf_free(&patch);
}

static void start_loop(void) {
  aa_adapt_loop_config cfg;
  int rc;

  aa_adapt_loop_config_init(&cfg);
  pthread_mutex_lock(&svc.policy_lock);
  aa_policy_adapt_params(svc.policy, &cfg.params);
  pthread_mutex_unlock(&svc.policy_lock);
  cfg.on_decision = on_loop_decision;
  rc = aa_adapt_loop_new(&cfg, &svc.loop);
  if (rc == AA_OK)
    rc = aa_adapt_loop_start(svc.loop);
  if (rc != AA_OK) {
    aa__rt_log("adapt: the policy loop is off: %s", aa_strerror(rc));
    aa_adapt_loop_destroy(svc.loop);
    svc.loop = NULL;
  }
}

/* ------------------------------------------------------------------ store */

/* ADAPTALLOC_DB may hold "{rank}": replaced by LOCAL_RANK (or RANK, else 0)
 * so that ranks on one host write distinct files. False when the result
 * does not fit in cap (out is then empty: never a shortened path). */
static bool expand_rank(const char *in, char *out, size_t cap) {
  const char *rank = getenv("LOCAL_RANK");
  const char *at = strstr(in, "{rank}");
  if (rank == NULL || rank[0] == '\0')
    rank = getenv("RANK");
  if (rank == NULL || rank[0] == '\0')
    rank = "0";
  int n;
  if (at == NULL)
    n = snprintf(out, cap, "%s", in);
  else
    n = snprintf(out, cap, "%.*s%s%s", (int)(at - in), in, rank, at + 6);
  if (n < 0 || (size_t)n >= cap) {
    out[0] = '\0';
    return false;
  }
  return true;
}

static int env_rank(void) {
  const char *r = getenv("RANK");
  if (r == NULL || r[0] == '\0')
    return -1;
  return atoi(r);
}

static void start_store(void) {
  aa_store_config cfg;
  aa_store_run_info info;
  aa_telemetry_params t;
  aa__buf conf;
  char *json;
  int rc;

  if (aa__rt.db_refused) {
    aa__rt_log("store: ADAPTALLOC_DB is refused (see above); the store is off");
    return;
  }
  if (is_off(aa__rt.db))
    return;
  if (!expand_rank(aa__rt.db, svc.store_path, sizeof(svc.store_path))) {
    aa__rt_log("store: ADAPTALLOC_DB with {rank} expanded is over the limit "
               "of %zu bytes; the store is off",
               sizeof(svc.store_path) - 1);
    return;
  }
  aa_store_config_init(&cfg);
  cfg.path = svc.store_path;
  pthread_mutex_lock(&svc.policy_lock);
  aa_policy_telemetry_params(svc.policy, &t);
  pthread_mutex_unlock(&svc.policy_lock);
  cfg.max_bytes = t.retention_bytes;
  cfg.max_age_s = t.retention_age_s;
  if (t.trace)
    aa__rt.trace = true;
  rc = aa_store_open(&cfg, &svc.store);
  if (rc != AA_OK) {
    /* aa_store_open logged the cause in one line. */
    svc.store = NULL;
    return;
  }
  aa__buf_init(&conf);
  aa__buf_printf(&conf, "{\"model\":");
  aa__buf_json_cstr(&conf, aa__rt.model);
  aa__buf_printf(&conf, ",\"http\":");
  aa__buf_json_cstr(&conf, aa__rt.http);
  aa__buf_printf(&conf, ",\"trace\":%s,\"policy_source\":", aa__rt.trace ? "true" : "false");
  aa__buf_json_cstr(&conf, svc.policy_source);
  aa__buf_printf(&conf, "}");
  memset(&info, 0, sizeof(info));
  info.model = aa__rt.model;
  info.rank = env_rank();
  info.policy_version = 1;
  info.config_json = conf.data;
  rc = aa_store_begin_run(svc.store, &info, &svc.run_id);
  aa__buf_free(&conf);
  if (rc != AA_OK) {
    aa__rt_log("store: cannot begin a run: %s; store off", aa_strerror(rc));
    aa_store_close(svc.store);
    svc.store = NULL;
    svc.run_id = 0;
    return;
  }
  pthread_mutex_lock(&svc.policy_lock);
  json = aa_policy_to_json(svc.policy);
  aa_store_policy_change(svc.store, svc.policy_source, 0, 1,
                         "policy in force at start", json);
  pthread_mutex_unlock(&svc.policy_lock);
  free(json);
  if (!aa__rt.quiet)
    aa__rt_log("store: %s (run %lld%s)", svc.store_path, (long long)svc.run_id,
               aa__rt.trace ? ", tracing every event" : "");
}

static void snapshot_all(void) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  aa_pool_stats *st;
  size_t n, i;

  if (svc.store == NULL)
    return;
  st = malloc(sizeof(*st));
  if (st == NULL)
    return;
  n = aa__rt_pools_snapshot(pools, AA_RT_MAX_POOLS);
  for (i = 0; i < n; i++) {
    if (aa_pool_stats_get(pools[i], st) == AA_OK)
      aa_store_snapshot(svc.store, st);
  }
  free(st);
}

static void *ticker_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&svc.ticker_lock);
  while (!svc.ticker_stop) {
    struct timespec ts;
    unsigned ms = atomic_load(&svc.snapshot_interval_ms);
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&svc.ticker_cond, &svc.ticker_lock, &ts);
    if (svc.ticker_stop)
      break;
    pthread_mutex_unlock(&svc.ticker_lock);
    snapshot_all();
    pthread_mutex_lock(&svc.ticker_lock);
  }
  pthread_mutex_unlock(&svc.ticker_lock);
  return NULL;
}

static void start_ticker(void) {
  if (svc.store == NULL)
    return;
  svc.ticker_stop = false;
  if (pthread_create(&svc.ticker, NULL, ticker_main, NULL) != 0) {
    aa__rt_log("store: cannot start the snapshot thread: %s", strerror(errno));
    return;
  }
  svc.ticker_running = true;
}

static void stop_ticker(void) {
  if (!svc.ticker_running)
    return;
  pthread_mutex_lock(&svc.ticker_lock);
  svc.ticker_stop = true;
  pthread_cond_signal(&svc.ticker_cond);
  pthread_mutex_unlock(&svc.ticker_lock);
  pthread_join(svc.ticker, NULL);
  svc.ticker_running = false;
}

/* ------------------------------------------------------------------ http */

static int prov_pool_stats(void *user, aa_pool_stats **out, size_t *n) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  size_t np = aa__rt_pools_snapshot(pools, AA_RT_MAX_POOLS), i, k = 0;
  aa_pool_stats *arr;
  (void)user;

  *out = NULL;
  *n = 0;
  arr = calloc(np ? np : 1, sizeof(*arr));
  if (arr == NULL)
    return AA_ENOMEM;
  for (i = 0; i < np; i++)
    if (aa_pool_stats_get(pools[i], &arr[k]) == AA_OK)
      k++;
  *out = arr;
  *n = k;
  return AA_OK;
}

static void append_pool_json(aa__buf *sb, const aa_pool_stats *st) {
  size_t need = aa_pool_stats_json(st, NULL, 0);
  if (!aa__buf_reserve(sb, need + 1))
    return;
  aa_pool_stats_json(st, sb->data + sb->len, need + 1);
  sb->len += need;
}

/* The loop's audit of class-table changes, every pool (or the one named):
 * what the replay of the interval predicted before the change, and the
 * pool's reserved bytes at the change and AA_ADAPT_MEASURE_STEPS steps
 * later (null until then, and for a change that was not applied). */
static void append_audit_json(aa__buf *sb, const char *only) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  aa_adapt_audit au[AA_ADAPT_AUDIT_MAX];
  size_t np = aa__rt_pools_snapshot(pools, AA_RT_MAX_POOLS), na, shown = 0;
  for (size_t i = 0; i < np; i++) {
    const char *name = aa_pool_name(pools[i]);
    if (only != NULL && strcmp(name, only) != 0)
      continue;
    if (aa_adapt_loop_audit(svc.loop, pools[i], au, AA_ADAPT_AUDIT_MAX, &na) != AA_OK)
      continue;
    for (size_t k = 0; k < na; k++) {
      const aa_adapt_audit *a = &au[k];
      aa__buf_printf(sb, "%s{\"pool\":", shown++ ? "," : "");
      aa__buf_json_cstr(sb, name);
      aa__buf_printf(sb, ",\"step\":%llu,\"kind\":\"%s\",\"block_size\":%llu,"
                         "\"applied\":%s,\"predicted\":",
                     (unsigned long long)a->step, aa_adapt_kind_name(a->kind),
                     (unsigned long long)a->block_size, a->result == AA_OK ? "true" : "false");
      if (a->verified)
        aa__buf_printf(sb, "{\"peak_reserved_before\":%llu,\"peak_reserved_after\":%llu,"
                           "\"backend_calls_before\":%llu,\"backend_calls_after\":%llu}",
                       (unsigned long long)a->predicted_reserved_before,
                       (unsigned long long)a->predicted_reserved_after,
                       (unsigned long long)a->predicted_calls_before,
                       (unsigned long long)a->predicted_calls_after);
      else
        aa__buf_printf(sb, "null");
      aa__buf_printf(sb, ",\"measured\":");
      if (a->measured)
        aa__buf_printf(sb, "{\"reserved_before\":%llu,\"reserved_after\":%llu,"
                           "\"after_steps\":%d}",
                       (unsigned long long)a->measured_reserved_before,
                       (unsigned long long)a->measured_reserved_after, AA_ADAPT_MEASURE_STEPS);
      else
        aa__buf_printf(sb, "null");
      aa__buf_printf(sb, "}");
    }
  }
}

static int prov_stats_json(void *user, const char *pool, char **out, size_t *len) {
  aa_pool_stats *arr = NULL;
  size_t n = 0, i, shown = 0;
  aa__buf sb;
  aa_adapt_counters lc;
  uint64_t version;
  char buf[2048];
  int rc;

  *out = NULL;
  *len = 0;
  rc = prov_pool_stats(user, &arr, &n);
  if (rc != AA_OK)
    return rc;
  if (pool != NULL) {
    for (i = 0; i < n; i++)
      if (strcmp(arr[i].name, pool) == 0)
        break;
    if (i == n) {
      free(arr);
      return AA_ENOENT;
    }
  }
  pthread_mutex_lock(&svc.policy_lock);
  version = svc.policy ? aa_policy_version(svc.policy) : 0;
  pthread_mutex_unlock(&svc.policy_lock);

  aa__buf_init(&sb);
  aa__buf_printf(&sb, "{\"version\":1,\"model\":");
  aa__buf_json_cstr(&sb, aa__rt.model);
  aa__buf_printf(&sb, ",\"pid\":%ld,\"uptime_s\":%.3f,\"policy_version\":%llu,"
                    "\"policy_source\":", (long)getpid(),
                    (double)(aa_now_ns() - aa__rt.started_ns) / 1e9,
                    (unsigned long long)version);
  aa__buf_json_cstr(&sb, svc.policy_source);
  aa__buf_printf(&sb, ",\"run_id\":%lld,\"pools\":[", (long long)svc.run_id);
  for (i = 0; i < n; i++) {
    if (pool != NULL && strcmp(arr[i].name, pool) != 0)
      continue;
    if (shown++)
      aa__buf_printf(&sb, ",");
    append_pool_json(&sb, &arr[i]);
  }
  aa__buf_printf(&sb, "],\"adapt\":");
  if (svc.loop != NULL) {
    aa_adapt_loop_counters(svc.loop, &lc);
    aa__buf_printf(&sb, "{\"enabled\":true,\"steps\":%llu,\"decisions\":%llu,"
                      "\"classes_added\":%llu,\"classes_retired\":%llu,\"grows\":%llu,"
                      "\"trims\":%llu,\"bytes_trimmed\":%llu,\"apply_failures\":%llu,"
                      "\"rejected_by_replay\":%llu,\"audit\":[",
                      (unsigned long long)lc.steps, (unsigned long long)lc.decisions,
                      (unsigned long long)lc.classes_added,
                      (unsigned long long)lc.classes_retired,
                      (unsigned long long)lc.grows, (unsigned long long)lc.trims,
                      (unsigned long long)lc.bytes_trimmed,
                      (unsigned long long)lc.apply_failures,
                      (unsigned long long)lc.rejected);
    append_audit_json(&sb, pool);
    aa__buf_printf(&sb, "]}");
  } else {
    aa__buf_printf(&sb, "{\"enabled\":false}");
  }
  aa__buf_printf(&sb, ",\"store\":");
  if (svc.store != NULL) {
    aa_store_stats ss;
    aa_store_stats_get(svc.store, &ss);
    aa_store_stats_json(&ss, buf, sizeof(buf));
    aa__buf_printf(&sb, "%s", buf);
  } else {
    aa__buf_printf(&sb, "{\"enabled\":0,\"path\":null}");
  }
  aa__buf_printf(&sb, ",\"policy_changes\":%llu,\"policy_rejects\":%llu}",
                    (unsigned long long)atomic_load(&svc.policy_changes),
                    (unsigned long long)atomic_load(&svc.policy_rejects));
  free(arr);
  if (sb.failed) {
    aa__buf_free(&sb);
    return AA_ENOMEM;
  }
  *out = sb.data;
  *len = sb.len;
  return AA_OK;
}

/* A Prometheus label value: \\, \" and \n escaped, other control bytes '_'. */
static void prom_label(char *out, size_t cap, const char *s) {
  size_t o = 0;
  for (; *s != '\0' && o + 3 < cap; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\\' || c == '"' || c == '\n') {
      out[o++] = '\\';
      out[o++] = c == '\n' ? 'n' : (char)c;
    } else {
      out[o++] = c < 0x20 || c == 0x7F ? '_' : (char)c;
    }
  }
  out[o] = '\0';
}

static int prov_metrics_extra(void *user, char **out, size_t *len) {
  aa__buf sb;
  uint64_t version;
  char model[sizeof aa__rt.model * 2];
  char rank[16];
  int r = env_rank();
  (void)user;

  pthread_mutex_lock(&svc.policy_lock);
  version = svc.policy ? aa_policy_version(svc.policy) : 0;
  pthread_mutex_unlock(&svc.policy_lock);
  aa__buf_init(&sb);
  prom_label(model, sizeof model, aa__rt.model);
  if (r >= 0)
    snprintf(rank, sizeof rank, "%d", r);
  else
    rank[0] = '\0';
  /* One series per process: joins the pool series to the run in the store
   * (run), the policy file (model) and the build (version). */
  aa__buf_printf(&sb,
      "# HELP adaptalloc_info The run this process is: model, store run id, rank, version.\n"
      "# TYPE adaptalloc_info gauge\n"
      "adaptalloc_info{model=\"%s\",run=\"%lld\",rank=\"%s\",version=\"%d.%d.%d\"} 1\n",
      model, (long long)svc.run_id, rank, AA_VERSION_MAJOR, AA_VERSION_MINOR,
      AA_VERSION_PATCH);
  aa__buf_printf(&sb,
      "# HELP adaptalloc_policy_version Version of the policy in force.\n"
      "# TYPE adaptalloc_policy_version gauge\n"
      "adaptalloc_policy_version %llu\n"
      "# HELP adaptalloc_policy_changes_total Policy changes applied (file, http, loop).\n"
      "# TYPE adaptalloc_policy_changes_total counter\n"
      "adaptalloc_policy_changes_total %llu\n"
      "# HELP adaptalloc_policy_rejects_total Policy changes refused.\n"
      "# TYPE adaptalloc_policy_rejects_total counter\n"
      "adaptalloc_policy_rejects_total %llu\n"
      "# HELP adaptalloc_adapt_classes_added_total Size classes the policy loop added.\n"
      "# TYPE adaptalloc_adapt_classes_added_total counter\n"
      "adaptalloc_adapt_classes_added_total %llu\n"
      "# HELP adaptalloc_adapt_classes_retired_total Size classes the policy loop retired.\n"
      "# TYPE adaptalloc_adapt_classes_retired_total counter\n"
      "adaptalloc_adapt_classes_retired_total %llu\n",
      (unsigned long long)version,
      (unsigned long long)atomic_load(&svc.policy_changes),
      (unsigned long long)atomic_load(&svc.policy_rejects),
      (unsigned long long)atomic_load(&svc.classes_added),
      (unsigned long long)atomic_load(&svc.classes_retired));
  if (svc.store != NULL) {
    aa_store_stats ss;
    aa_store_stats_get(svc.store, &ss);
    aa__buf_printf(&sb,
        "# HELP adaptalloc_store_enabled 1 while the store writes, 0 after a fault.\n"
        "# TYPE adaptalloc_store_enabled gauge\n"
        "adaptalloc_store_enabled %u\n"
        "# HELP adaptalloc_store_snapshots_dropped_total Snapshots the store could not queue.\n"
        "# TYPE adaptalloc_store_snapshots_dropped_total counter\n"
        "adaptalloc_store_snapshots_dropped_total %llu\n"
        "# HELP adaptalloc_store_events_dropped_total Trace events the store could not queue.\n"
        "# TYPE adaptalloc_store_events_dropped_total counter\n"
        "adaptalloc_store_events_dropped_total %llu\n",
        ss.enabled, (unsigned long long)ss.snapshots_dropped,
        (unsigned long long)ss.events_dropped);
  }
  if (sb.failed) {
    aa__buf_free(&sb);
    return AA_ENOMEM;
  }
  *out = sb.data;
  *len = sb.len;
  return AA_OK;
}

static int prov_policy_get(void *user, char **json, size_t *len, uint64_t *version) {
  (void)user;
  *json = NULL;
  *len = 0;
  pthread_mutex_lock(&svc.policy_lock);
  if (svc.policy != NULL) {
    *json = aa_policy_to_json(svc.policy);
    *version = aa_policy_version(svc.policy);
  }
  pthread_mutex_unlock(&svc.policy_lock);
  if (*json == NULL)
    return svc.policy == NULL ? AA_ENOTSUP : AA_ENOMEM;
  *len = strlen(*json);
  return AA_OK;
}

static int prov_policy_change(const aa_http_policy_change *c, bool patch,
                              uint64_t *new_version, char *err, size_t errcap) {
  aa_policy *next = NULL;
  char reason[160];
  int rc;

  if (patch) {
    pthread_mutex_lock(&svc.policy_lock);
    rc = svc.policy ? aa_policy_merge_patch(svc.policy, c->body, c->len, &next,
                                            err, errcap)
                    : AA_ENOTSUP;
    pthread_mutex_unlock(&svc.policy_lock);
  } else {
    rc = aa_policy_parse(c->body, c->len, &next, err, errcap);
  }
  if (rc != AA_OK) {
    atomic_fetch_add(&svc.policy_rejects, 1);
    return rc;
  }
  snprintf(reason, sizeof(reason), "%s /policy from %s", patch ? "PATCH" : "PUT",
           c->client ? c->client : "?");
  return install_policy(next, c->source ? c->source : "http", reason,
                        c->has_if_match, c->if_match, new_version, err, errcap);
}

static int prov_policy_put(void *user, const aa_http_policy_change *c,
                           uint64_t *new_version, char *err, size_t errcap) {
  (void)user;
  return prov_policy_change(c, false, new_version, err, errcap);
}

static int prov_policy_patch(void *user, const aa_http_policy_change *c,
                             uint64_t *new_version, char *err, size_t errcap) {
  (void)user;
  return prov_policy_change(c, true, new_version, err, errcap);
}

static int prov_history_json(void *user, const aa_http_history_query *q,
                             char **out, size_t *len) {
  aa_store_query sq;
  char *snaps = NULL, *changes = NULL;
  int rc;
  (void)user;

  *out = NULL;
  *len = 0;
  if (svc.store == NULL)
    return AA_ENOTSUP;
  aa_store_query_init(&sq);
  sq.run_id = q->run > 0 ? q->run : svc.run_id;
  sq.since_ms = q->since > 0 ? q->since : 0;
  sq.limit = q->limit > 0 ? (uint32_t)q->limit : 100;
  sq.step_ms = q->step > 0 ? q->step : 0;
  rc = aa_store_history_json(aa_store_db_path(svc.store), &sq, &snaps);
  if (rc == AA_OK) {
    /* policies=1: each change with its document (at most 1000 of them) */
    sq.detail = q->policies;
    if (sq.detail && sq.limit > 1000)
      sq.limit = 1000;
    rc = aa_store_policy_log_json(aa_store_db_path(svc.store), &sq, &changes);
  }
  if (rc == AA_OK)
    rc = aa__rt_merge_history(snaps, changes, out, len);
  free(snaps);
  free(changes);
  return rc;
}

static int prov_segments_json(void *user, const char *pool, char **out,
                              size_t *len) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  size_t n = aa__rt_pools_snapshot(pools, AA_RT_MAX_POOLS), i;
  (void)user;

  for (i = 0; i < n; i++)
    if (strcmp(aa_pool_name(pools[i]), pool) == 0)
      return aa_http_segments_json(pools[i], out, len);
  return AA_ENOENT;
}

static int prov_runs_json(void *user, char **out, size_t *len) {
  int rc;
  (void)user;
  *out = NULL;
  *len = 0;
  if (svc.store == NULL)
    return AA_ENOTSUP;
  rc = aa_store_runs_json(aa_store_db_path(svc.store), 100, out);
  if (rc == AA_OK)
    *len = strlen(*out);
  return rc;
}

static void start_http(void) {
  aa_http_config cfg;
  aa_http_provider prov;
  char err[512];
  int rank = -1;
  int rc;

  if (aa__rt.http_refused) {
    aa__rt_log("http: a setting is refused (see above); the server is off, "
               "the allocator keeps working");
    return;
  }
  if (is_off(aa__rt.http))
    return;
  aa_http_config_init(&cfg);
  cfg.address = aa__rt.http;
  cfg.token = aa__rt.token[0] ? aa__rt.token : NULL;
  if (aa_http_local_rank_from_env(&rank) != AA_OK)
    aa__rt_log("http: LOCAL_RANK is not a rank number; using rank 0");
  cfg.local_rank = rank;
  /* /stats and /metrics answers may be reused for 100 ms: a dashboard or a
   * scraper flood then costs the process one stats copy per 100 ms, not one
   * per request (docs/http.md, BENCHMARKS.md "HTTP load"). A policy change
   * clears the cache. */
  cfg.stats_cache_ms = 100;
  memset(&prov, 0, sizeof(prov));
  prov.version = AA_HTTP_PROVIDER_VERSION;
  prov.stats_json = prov_stats_json;
  prov.pool_stats = prov_pool_stats;
  prov.metrics_extra = prov_metrics_extra;
  prov.policy_get = prov_policy_get;
  prov.policy_put = prov_policy_put;
  prov.policy_patch = prov_policy_patch;
  prov.history_json = prov_history_json;
  prov.segments_json = prov_segments_json;
  prov.runs_json = prov_runs_json;
  err[0] = '\0';
  rc = aa_http_new(&cfg, &prov, &svc.http, err, sizeof(err));
  if (rc != AA_OK) {
    if (rc != AA_ENOTSUP)
      aa__rt_log("http: %s; the server is off, the allocator keeps working",
                 err[0] ? err : aa_strerror(rc));
    svc.http = NULL;
    return;
  }
  atomic_store(&svc.http_port, aa_http_port(svc.http));
  if (!aa__rt.quiet)
    aa__rt_log("http: serving on http://%s/", aa_http_bound_address(svc.http));
}

int aa_runtime_http_port(void) { return atomic_load(&svc.http_port); }

int aa_runtime_http_address(char *buf, size_t cap) {
  const char *addr;
  int n;
  if (buf == NULL || cap == 0)
    return AA_EINVAL;
  buf[0] = '\0';
  if (svc.http == NULL || atomic_load(&svc.http_port) == 0)
    return AA_ENOTSUP;
  addr = aa_http_bound_address(svc.http);
  if (addr == NULL)
    return AA_ENOTSUP;
  n = snprintf(buf, cap, "%s", addr);
  if (n < 0 || (size_t)n >= cap) {
    buf[0] = '\0';
    return AA_ERANGE;
  }
  return AA_OK;
}

static void ensure_started(void) {
  if (!atomic_load_explicit(&aa__rt.ready, memory_order_acquire))
    (void)aa_runtime_init(NULL);
}

int aa_runtime_stats_json(char **out, size_t *len) {
  if (out == NULL || len == NULL)
    return AA_EINVAL;
  *out = NULL;
  *len = 0;
  ensure_started();
  return prov_stats_json(NULL, NULL, out, len);
}

int aa_runtime_policy_json(char **out, uint64_t *version) {
  size_t len = 0;
  uint64_t v = 0;
  int rc;
  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  ensure_started();
  rc = prov_policy_get(NULL, out, &len, &v);
  if (rc == AA_OK && version != NULL)
    *version = v;
  return rc;
}

int aa_runtime_policy_update(const char *json, size_t len, bool patch,
                             const char *source, uint64_t if_match,
                             uint64_t *new_version, char *err, size_t errcap) {
  aa_http_policy_change c;
  char errbuf[512];

  if (err == NULL || errcap == 0) {
    err = errbuf;
    errcap = sizeof(errbuf);
  }
  err[0] = '\0';
  if (json == NULL) {
    snprintf(err, errcap, "no policy document given");
    return AA_EINVAL;
  }
  ensure_started();
  memset(&c, 0, sizeof(c));
  c.body = json;
  c.len = len;
  c.has_if_match = if_match > 0;
  c.if_match = if_match;
  c.source = source != NULL && source[0] != '\0' ? source : "api";
  c.client = "in-process";
  /* A /stats answer the server cached may show the old policy version for
   * up to its cache time (100 ms). */
  return prov_policy_change(&c, patch, new_version, err, errcap);
}

int64_t aa_runtime_run_id(void) { return svc.run_id; }

/* ------------------------------------------------------------------ start/stop */

void aa__rt_services_start(void) {
  atomic_store(&svc.snapshot_interval_ms, 1000);
  atomic_store(&svc.histogram_on, true);
  load_start_policy();
  if (svc.policy != NULL) {
    adopt_telemetry(svc.policy);
    aa_adapt_params ap;
    aa_policy_adapt_params(svc.policy, &ap);
    if (ap.enabled)
      start_loop();
  }
  start_store();
  start_ticker();
  start_http();
}

void aa__rt_services_stop(void) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  size_t n, i;

  aa_http_destroy(svc.http);
  svc.http = NULL;
  atomic_store(&svc.http_port, 0);
  aa_adapt_loop_destroy(svc.loop);
  svc.loop = NULL;
  stop_ticker();
  n = aa__rt_pools_snapshot(pools, AA_RT_MAX_POOLS);
  for (i = 0; i < n; i++)
    aa_pool_set_trace(pools[i], NULL, NULL);
  if (svc.store != NULL) {
    snapshot_all(); /* the final state of every pool */
    aa_store_close(svc.store);
    svc.store = NULL;
  }
  pthread_mutex_lock(&svc.policy_lock);
  aa_policy_free(svc.policy);
  svc.policy = NULL;
  pthread_mutex_unlock(&svc.policy_lock);
}
