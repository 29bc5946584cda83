/*
 * runtime_services.c — the optional services the runtime starts: the policy
 * in force (file or built-in default), the store, the snapshot ticker, the
 * policy loop and the HTTP server (whose provider callbacks are in
 * runtime_http.c).
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

#define svc aa__rt_svc /* the services' state (runtime_internal.h) */

aa__rt_services aa__rt_svc = {
    .policy_lock = PTHREAD_MUTEX_INITIALIZER,
    .ticker_lock = PTHREAD_MUTEX_INITIALIZER,
    .ticker_cond = PTHREAD_COND_INITIALIZER,
};

bool aa__rt_is_off(const char *v) { return strcmp(v, "off") == 0; }

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
    if (!file_exists(path)) {
      /* A model named on purpose that has no policy is a likely typo. */
      if (strcmp(aa__rt.model, "default") != 0)
        aa__rt_log("policy: no policy for model %s (%s does not exist); using the "
                   "built-in default policy",
                   aa__rt.model, path);
      path[0] = '\0';
    }
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

/* The section for a pool of backend `kind` serving `region` (NULL: none). */
static const char *section_of(const aa_policy *p, const char *kind,
                              const char *region, char *buf, size_t cap) {
  if (region != NULL && region[0] != '\0' && aa_policy_has_region(p, region)) {
    snprintf(buf, cap, "regions.%s", region);
    return buf;
  }
  snprintf(buf, cap, "%s", kind);
  return buf;
}

int aa__rt_pool_config(const char *kind, const char *region,
                       aa_pool_config *cfg) {
  char section[48] = "";
  int rc = AA_OK;
  pthread_mutex_lock(&svc.policy_lock);
  if (svc.policy != NULL) {
    section_of(svc.policy, kind, region, section, sizeof(section));
    rc = aa_policy_pool_config(svc.policy, section, cfg, NULL, 0, NULL);
    if (rc == AA_ERANGE)
      rc = AA_OK; /* we asked for cfg only; classes come with apply */
  }
  pthread_mutex_unlock(&svc.policy_lock);
  if (rc != AA_OK) {
    aa__rt_log("policy: pool %s: %s; using the defaults", section, aa_strerror(rc));
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

_Static_assert(AA_ADAPT_LOOP_MAX_POOLS >= AA_RT_MAX_POOLS,
               "the loop must be able to watch every pool the runtime makes");

static const char *pool_kind(const aa_pool *pool);

void aa__rt_pool_created(aa_pool *pool) {
  char section[48] = "";
  int rc = AA_OK;

  pthread_mutex_lock(&svc.policy_lock);
  if (svc.policy != NULL) {
    aa__rt_pool_section(svc.policy, pool, section, sizeof(section));
    rc = aa_policy_apply(svc.policy, section, pool);
  }
  pthread_mutex_unlock(&svc.policy_lock);
  if (rc != AA_OK)
    aa__rt_log("policy: cannot apply the %s classes to pool %s: %s", section,
               aa_pool_name(pool), aa_strerror(rc));
  aa_pool_set_telemetry(pool, atomic_load(&svc.histogram_on));
  trace_on(pool);
  /* A region's section starts from pools.device (docs/policy.md), so the
   * loop, which records its changes in that section, adapts only the device
   * pools of regions: a region pool on the host keeps its policy's table
   * (recorded there, its classes would bring pools.device's settings, limit
   * included, to the host pool at the next policy change). */
  if (svc.loop != NULL && (aa_pool_region(pool)[0] == '\0' ||
                           strcmp(pool_kind(pool), "device") == 0)) {
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

const char *aa__rt_pool_section(const aa_policy *p, const aa_pool *pool,
                                char *buf, size_t cap) {
  return section_of(p, pool_kind(pool), aa_pool_region(pool), buf, cap);
}

/* Bytes the machine can still give pool `st` (device: the GPU's free
 * memory; host and pinned: the available physical memory), plus what the
 * pool already holds (a prefill may reuse it). 0 when unknown. */
static uint64_t machine_room(const aa_pool_stats *st, const char **what) {
  size_t f = 0, t = 0;
  if (strcmp(st->backend, "host") != 0 && strcmp(st->backend, "pinned") != 0 &&
      st->device >= 0) {
    *what = "the device's free memory";
    if (aa_cuda_mem_info(st->device, &f, &t) != AA_OK)
      return 0;
    return (uint64_t)f + st->bytes_reserved;
  }
  *what = "the available physical memory";
  {
    long pages = sysconf(_SC_AVPHYS_PAGES);
    long psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0)
      return 0;
    return (uint64_t)pages * (uint64_t)psz + st->bytes_reserved;
  }
}

/* Refuses (AA_EINVAL, err names the bound) a policy whose prefill for pool
 * the machine cannot give. */
static int check_fits(const aa_policy *p, aa_pool *pool, char *err,
                      size_t errcap) {
  aa_class_spec want[AA_MAX_CLASSES];
  size_t nw = 0;
  aa_pool_stats *st = NULL;
  uint64_t prefill = 0, room;
  const char *what = "";
  char kind[48];
  int rc = AA_OK;

  aa__rt_pool_section(p, pool, kind, sizeof(kind));
  if (aa_policy_pool_config(p, kind, NULL, want, AA_MAX_CLASSES, &nw) != AA_OK)
    return AA_OK; /* the apply reports it */
  st = malloc(sizeof *st);
  if (st == NULL || aa_pool_stats_get(pool, st) != AA_OK)
    goto out;
  for (size_t i = 0; i < nw; i++)
    prefill += (uint64_t)want[i].prefill * want[i].block_size;
  room = machine_room(st, &what);
  if (room != 0 && prefill > room) {
    snprintf(err, errcap,
             "pools.%s.classes: the prefill asks for %llu bytes, more than "
             "%s (%llu bytes, counting what pool %s holds)",
             kind, (unsigned long long)prefill, what, (unsigned long long)room,
             aa_pool_name(pool));
    rc = AA_EINVAL;
  }
out:
  free(st);
  return rc;
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
    char cur_sec[48], want_sec[48];
    aa_pool_config_init(&cur);
    aa_pool_config_init(&want);
    aa__rt_pool_section(svc.policy, pools[i], cur_sec, sizeof(cur_sec));
    aa__rt_pool_section(p, pools[i], want_sec, sizeof(want_sec));
    rc = aa_policy_pool_config(svc.policy, cur_sec, &cur, NULL, 0, NULL);
    if (rc != AA_OK && rc != AA_ERANGE)
      continue;
    rc = aa_policy_pool_config(p, want_sec, &want, NULL, 0, NULL);
    if (rc != AA_OK && rc != AA_ERANGE)
      continue;
    if (cur.max_small != want.max_small || cur.slab_size != want.slab_size) {
      snprintf(err, errcap,
               "pools.%s: slab_size and max_small are fixed while pool %s is "
               "live (%zu/%zu in force, %zu/%zu asked); restart to change them",
               want_sec, aa_pool_name(pools[i]), cur.slab_size,
               cur.max_small, want.slab_size, want.max_small);
      return AA_EINVAL;
    }
    rc = check_fits(p, pools[i], err, errcap);
    if (rc != AA_OK)
      return rc;
  }
  for (i = 0; i < n; i++) {
    char sec[48];
    aa__rt_pool_section(p, pools[i], sec, sizeof(sec));
    rc = aa_policy_apply(p, sec, pools[i]);
    if (rc == AA_OK)
      *changed = i + 1;
    if (rc != AA_OK) {
      snprintf(err, errcap, "pools.%s: the pool %s refused the class table: %s",
               sec, aa_pool_name(pools[i]),
               rc == AA_ELIMIT ? "no free class slot (AA_MAX_CLASSES) for a "
                                 "new size while retired classes drain"
                               : aa_strerror(rc));
      /* a table the pool cannot hold is the request's problem (4xx) */
      return rc == AA_ELIMIT ? AA_EINVAL : rc;
    }
    aa_pool_set_telemetry(pools[i], atomic_load(&svc.histogram_on));
  }
  return AA_OK;
}

/* Installs `next` (validated) as the policy in force: applies it, bumps the
 * version, logs the change to the store. Takes ownership of next. */
int aa__rt_install_policy(aa_policy *next, const char *source,
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
      for (i = 0; i < changed && i < n; i++) {
        char sec[48];
        aa__rt_pool_section(svc.policy, pools[i], sec, sizeof(sec));
        aa_policy_apply(svc.policy, sec, pools[i]);
      }
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
  /* a region's pool: its section (made now if the policy has none; it
   * starts from pools.device) */
  if (aa_pool_region(pool)[0] != '\0')
    aa__buf_printf(&patch, "{\"pools\":{\"regions\":{\"%s\":{\"classes\":[",
                   aa_pool_region(pool));
  else
    aa__buf_printf(&patch, "{\"pools\":{\"%s\":{\"classes\":[", pool_kind(pool));
  for (i = 0; i < n && i < AA_MAX_CLASSES; i++)
    aa__buf_printf(&patch, "%s{\"size\":%zu,\"cache_limit\":%u,\"prefill\":%u}",
                   i ? "," : "", specs[i].block_size, specs[i].cache_limit,
                   specs[i].prefill);
  aa__buf_printf(&patch, aa_pool_region(pool)[0] != '\0' ? "]}}}}" : "]}}}");
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

int aa__rt_env_rank(void) {
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
  if (aa__rt_is_off(aa__rt.db))
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
  info.rank = aa__rt_env_rank();
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
  aa__rt_start_http();
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
