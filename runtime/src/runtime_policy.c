/*
 * runtime_policy.c — the owner of every pool's settings: the policy in
 * force (the start-up file or the built-in default) and the pools' named
 * overrides (the user's cap), combined by one rule (aa_policy_limit_rule,
 * docs/policy.md "A pool's settings"); each pool's settings when it is
 * made; and the one transactional path every change takes
 * (aa__rt_settings_commit): HTTP PUT/PATCH, Python, the user's cap
 * (aa_rt_pool_cap, PyTorch's set_per_process_memory_fraction) and the
 * loop's proposals (runtime_services.c) all change every live pool or none,
 * put the telemetry in force on the live services, bump the version and log
 * once. Each works on the runtime it is given; the services' state
 * (rt->svc) is runtime_services.c's.
 *
 * Lock: rt->svc.policy_lock guards the document, its version and the
 * overrides (the order with the loop's lock is in runtime_services.c).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/policy.h"
#include "adaptalloc/store.h"
#include "runtime_internal.h"
#include "runtime_json.h" /* aa__buf */

/* ------------------------------------------------------------------ policy */

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Loads the start-up policy: ADAPTALLOC_POLICY, else
 * ADAPTALLOC_POLICY_DIR/<model>.json when it exists, else the built-in
 * default. A file that does not load, or is not a complete policy, is
 * reported and the default is used. */
void aa__rt_load_start_policy(aa_runtime *rt) {
  char path[1300];
  char *err = NULL; /* malloc'd: whole, however long the number it quotes */
  aa_policy *p = NULL;
  int rc;

  path[0] = '\0';
  if (rt->policy_refused) {
    aa__rt_log("policy: the policy path is refused (see above); using the "
               "built-in default policy");
  } else if (rt->policy_path[0] != '\0') {
    snprintf(path, sizeof(path), "%s", rt->policy_path);
  } else {
    /* ADAPTALLOC_POLICY_DIR, else every folder policies are installed in */
    char dirs[8][AA__RT_PATH_MAX];
    char tried[2048] = "";
    size_t nd = 1;
    bool found = false;
    if (rt->policy_dir[0] != '\0')
      snprintf(dirs[0], sizeof dirs[0], "%s", rt->policy_dir);
    else
      nd = aa__rt_policy_dirs(dirs, 8);
    for (size_t i = 0; i < nd && !found; i++) {
      size_t used = strlen(tried);
      snprintf(path, sizeof(path), "%s/%s.json", dirs[i], rt->model);
      found = file_exists(path);
      if (used < sizeof tried)
        snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", path);
    }
    if (!found) {
      /* A model named on purpose that has no policy is a likely typo. */
      if (strcmp(rt->model, "default") != 0)
        aa__rt_log("policy: no policy for model %s (looked for %s: none exists); using the "
                   "built-in default policy",
                   rt->model, tried);
      else if (!rt->quiet)
        aa__rt_log("policy: the built-in default (model default; looked for %s)", tried);
      path[0] = '\0';
    }
  }
  if (path[0] != '\0') {
    /* A start-up file is put in force whole, so it must be complete
     * (aa_policy_load_file_complete_msg), as a PUT must. */
    rc = aa_policy_load_file_complete_msg(path, &p, &err);
    if (rc != AA_OK) {
      /* err already names the file, the JSON path and the rule (or the
       * parts an incomplete file leaves out). */
      aa__rt_log("policy: %s; using the built-in default policy",
                 err != NULL && err[0] ? err : aa_strerror(rc));
      free(err);
      p = NULL;
    } else {
      snprintf(rt->svc.policy_source, sizeof(rt->svc.policy_source), "file");
      if (!rt->quiet)
        aa__rt_log("policy: %s (model %s)", path, rt->model);
    }
  }
  if (p == NULL) {
    rc = aa_policy_default(&p);
    if (rc != AA_OK) {
      aa__rt_log("policy: cannot build the default policy: %s", aa_strerror(rc));
      return;
    }
    snprintf(rt->svc.policy_source, sizeof(rt->svc.policy_source), "default");
  }
  aa_policy_set_version(p, 1);
  rt->svc.policy = p;
}

int aa__rt_pool_config(aa_runtime *rt, const char *kind, const char *region,
                       aa_pool_config *cfg) {
  char section[48] = "";
  int rc = AA_OK;
  pthread_mutex_lock(&rt->svc.policy_lock);
  if (rt->svc.policy != NULL) {
    aa_policy_section_for(rt->svc.policy, kind, region, section, sizeof(section));
    rc = aa_policy_pool_config(rt->svc.policy, section, cfg, NULL, 0, NULL);
    if (rc == AA_ERANGE)
      rc = AA_OK; /* we asked for cfg only; classes come with apply */
  }
  pthread_mutex_unlock(&rt->svc.policy_lock);
  if (rc != AA_OK) {
    aa__rt_log("policy: pool %s: %s; using the defaults", section, aa_strerror(rc));
    rc = AA_OK;
  }
  return rc;
}

int aa__rt_pool_backend(aa_runtime *rt, const char *region, bool *managed,
                        aa_managed_config *mc) {
  char section[48] = "";
  int rc = AA_OK;
  *managed = false;
  aa_managed_config_init(mc);
  pthread_mutex_lock(&rt->svc.policy_lock);
  if (rt->svc.policy != NULL) {
    aa_policy_section_for(rt->svc.policy, "device", region, section, sizeof(section));
    rc = aa_policy_pool_backend(rt->svc.policy, section, managed, mc);
  }
  pthread_mutex_unlock(&rt->svc.policy_lock);
  return rc;
}

/* Reads the policy's telemetry settings into the runtime's atomics. Called
 * with policy_lock held. */
void aa__rt_adopt_telemetry(aa_runtime *rt, const aa_policy *p) {
  aa_telemetry_params t;
  aa_policy_telemetry_params(p, &t);
  atomic_store(&rt->svc.snapshot_interval_ms,
               t.snapshot_interval_ms ? t.snapshot_interval_ms : 1000);
  /* The core delivers trace events only while a pool's telemetry is on, so
   * tracing keeps it on even when the policy turns the histogram off. */
  atomic_store(&rt->svc.histogram_on,
               t.histogram || t.trace || rt->trace || atomic_load(&rt->svc.tracing));
}

/* Whether the runtime can write a trace now: a store and a run going on. */
static bool can_trace(aa_runtime *rt) {
  return rt->svc.store != NULL && !atomic_load(&rt->svc.run_ended);
}

/* Called with rt_lock held, as aa__rt_services_end_run is at exit, and
 * policy_lock, as every change of tracing is: a pool made while the pools
 * trace traces too; one made after the run ended does not (its events would
 * belong to no run). */
static void trace_on(aa_runtime *rt, aa_pool *pool) {
  if (can_trace(rt) && atomic_load(&rt->svc.tracing) &&
      aa_pool_set_trace_sampled(pool, aa_store_trace_push, rt->svc.store,
                                atomic_load(&rt->svc.trace_every),
                                atomic_load(&rt->svc.trace_min_bytes)) != AA_OK)
    aa__rt_log("trace: pool %s: no memory for the sample's table; it is not traced",
               aa_pool_name(pool));
}

_Static_assert(AA_ADAPT_LOOP_MAX_POOLS >= AA_RT_MAX_POOLS,
               "the loop must be able to watch every pool the runtime makes");

void aa__rt_pool_created(aa_runtime *rt, aa_pool *pool) {
  char section[48] = "";
  int rc = AA_OK;

  pthread_mutex_lock(&rt->svc.policy_lock);
  if (rt->svc.policy != NULL) {
    aa_policy_pool_section(rt->svc.policy, pool, section, sizeof(section));
    rc = aa_policy_apply(rt->svc.policy, section, pool);
  }
  aa_pool_set_telemetry(pool, atomic_load(&rt->svc.histogram_on));
  trace_on(rt, pool);
  pthread_mutex_unlock(&rt->svc.policy_lock);
  if (rc != AA_OK)
    aa__rt_log("policy: cannot apply the %s classes to pool %s: %s", section,
               aa_pool_name(pool), aa_strerror(rc));
  aa__rt_oom_watch(rt, pool);
  /* A region's section starts from pools.device (docs/policy.md), so the
   * loop, which records its changes in that section, adapts only the device
   * pools of regions: a region pool on the host keeps its policy's table
   * (recorded there, its classes would bring pools.device's settings, limit
   * included, to the host pool at the next policy change). */
  if (rt->svc.loop != NULL && (aa_pool_region(pool)[0] == '\0' ||
                               strcmp(aa_policy_pool_kind(pool), "device") == 0)) {
    rc = aa_adapt_loop_add_pool(rt->svc.loop, pool);
    if (rc != AA_OK)
      aa__rt_log("adapt: cannot watch pool %s: %s", aa_pool_name(pool),
                 aa_strerror(rc));
  }
}

/* ---------------------------------------------------------------- settings */

/* The overrides of pool (none set: zeros). policy_lock held. */
static aa_pool_overrides overrides_of(const aa_runtime *rt, const aa_pool *pool) {
  aa_pool_overrides ov;
  memset(&ov, 0, sizeof ov);
  for (size_t i = 0; i < rt->svc.nov; i++) {
    if (rt->svc.ov_pools[i] == pool)
      ov = rt->svc.ov[i];
  }
  return ov;
}

/* Sets pool's overrides. policy_lock held; cannot fail (one slot per
 * pool the runtime has, AA_RT_MAX_POOLS). */
static void overrides_set(aa_runtime *rt, aa_pool *pool, const aa_pool_overrides *ov) {
  size_t i = 0;
  while (i < rt->svc.nov && rt->svc.ov_pools[i] != pool)
    i++;
  if (i == AA_RT_MAX_POOLS)
    return; /* not reached: every pool of rt has a slot */
  if (i == rt->svc.nov) {
    rt->svc.ov_pools[i] = pool;
    rt->svc.nov++;
  }
  rt->svc.ov[i] = *ov;
}

/* The telemetry settings that act on live services, against what this run
 * can do: a change that could not take effect is refused (AA_ECONFLICT,
 * err names the setting), never answered as a change. policy_lock held. */
static int check_telemetry(aa_runtime *rt, const aa_telemetry_params *cur,
                           const aa_telemetry_params *next, char *err, size_t errcap) {
  if (next->trace != cur->trace && !can_trace(rt)) {
    snprintf(err, errcap,
             "telemetry.trace: the store is off in this run (ADAPTALLOC_DB), so "
             "there is nothing to write a trace to; it cannot change while the "
             "runtime lives");
    return AA_ECONFLICT;
  }
  if (cur->trace && !next->trace && rt->trace) {
    snprintf(err, errcap,
             "telemetry.trace: ADAPTALLOC_TRACE=1 traces this whole run; it "
             "cannot be turned off while the runtime lives");
    return AA_ECONFLICT;
  }
  if (rt->trace && (next->trace_sample != 1 || next->trace_min_bytes != 0 || next->trace_seconds != 0) &&
      (next->trace_sample != cur->trace_sample || next->trace_min_bytes != cur->trace_min_bytes ||
       next->trace_seconds != cur->trace_seconds)) {
    snprintf(err, errcap,
             "telemetry.%s: ADAPTALLOC_TRACE=1 traces every event of this whole run; a "
             "sample or a time limit cannot apply while the runtime lives",
             next->trace_seconds != cur->trace_seconds ? "trace_seconds" : "trace_sample");
    return AA_ECONFLICT;
  }
  if (next->trace_max_events != cur->trace_max_events && rt->svc.store == NULL) {
    snprintf(err, errcap,
             "telemetry.trace_max_events: the store is off in this run (ADAPTALLOC_DB), so "
             "there is no trace to bound; it cannot change while the runtime lives");
    return AA_ECONFLICT;
  }
  if ((next->retention_bytes != cur->retention_bytes ||
       next->retention_age_s != cur->retention_age_s) &&
      rt->svc.store == NULL) {
    snprintf(err, errcap,
             "telemetry.%s: the store is off in this run (ADAPTALLOC_DB), so "
             "there is nothing to keep within it; it cannot change while the "
             "runtime lives",
             next->retention_bytes != cur->retention_bytes ? "retention.max_bytes"
                                                           : "retention.max_age_s");
    return AA_ECONFLICT;
  }
  return AA_OK;
}

/* Puts the telemetry of `t` in force on the live services: the snapshot
 * interval and the histogram (aa__rt_adopt_telemetry), tracing on or off
 * on every pool, the store's retention. policy_lock held. */
static void telemetry_live(aa_runtime *rt, aa_pool *const *pools, size_t n,
                           const aa_telemetry_params *was, const aa_telemetry_params *t) {
  bool on = can_trace(rt) && (rt->trace || t->trace);
  bool was_on = atomic_load(&rt->svc.tracing);
  uint32_t every = rt->trace ? 1 : t->trace_sample;
  uint64_t min_bytes = rt->trace ? 0 : t->trace_min_bytes;
  bool resample = on && was_on &&
                  (every != atomic_load(&rt->svc.trace_every) ||
                   min_bytes != atomic_load(&rt->svc.trace_min_bytes));
  atomic_store(&rt->svc.trace_every, every);
  atomic_store(&rt->svc.trace_min_bytes, min_bytes);
  if (on != was_on || resample) {
    /* set_trace waits for the pushes under way, so after it no event of a
     * pool turned off reaches the ring; a new sample starts clean (its
     * blocks' frees follow them, those of the old sample are not traced) */
    for (size_t i = 0; i < n; i++) {
      if (!on) {
        aa_pool_set_trace(pools[i], NULL, NULL);
      } else if (aa_pool_set_trace_sampled(pools[i], aa_store_trace_push, rt->svc.store, every,
                                           min_bytes) != AA_OK) {
        aa__rt_log("trace: pool %s: no memory for the sample's table; it is not traced",
                   aa_pool_name(pools[i]));
      }
    }
    atomic_store(&rt->svc.tracing, on);
    if (on)
      atomic_store(&rt->svc.traced, true);
  }
  /* a timed trace ends trace_seconds after it was turned on, or after the
   * time was changed while it runs */
  if (!on) {
    atomic_store(&rt->svc.trace_deadline_ns, 0);
  } else if (!was_on || t->trace_seconds != was->trace_seconds || resample) {
    uint64_t now = aa_now_ns();
    if (!was_on)
      atomic_store(&rt->svc.trace_began_ns, now);
    atomic_store(&rt->svc.trace_deadline_ns,
                 t->trace_seconds ? now + (uint64_t)t->trace_seconds * 1000000000ull : 0);
    if (t->trace_seconds && rt->svc.ticker_running) {
      /* the ticker sleeps until then at most */
      pthread_mutex_lock(&rt->svc.ticker_lock);
      pthread_cond_signal(&rt->svc.ticker_cond);
      pthread_mutex_unlock(&rt->svc.ticker_lock);
    }
  }
  if (rt->svc.store != NULL && was->trace_max_events != t->trace_max_events)
    (void)aa_store_set_trace_bound(rt->svc.store, t->trace_max_events);
  if (rt->svc.store != NULL && (was->retention_bytes != t->retention_bytes ||
                                was->retention_age_s != t->retention_age_s))
    (void)aa_store_set_retention(rt->svc.store, t->retention_bytes, t->retention_age_s);
  aa__rt_adopt_telemetry(rt, rt->svc.policy);
  for (size_t i = 0; i < n; i++)
    aa_pool_set_telemetry(pools[i], atomic_load(&rt->svc.histogram_on));
}

/* The one transactional path for a pool's settings (docs/runtime.md, "One
 * path"). Under policy_lock: the next policy is built from the one in force
 * (c->build; none: it stays), the overrides are those in force with c's on
 * top; a result equal to what is in force is no change (nothing applied or
 * logged, the version stays). Else every live pool is prepared with its
 * section of the next policy and its overrides (aa_policy_change_prepare_ov:
 * all or none), the telemetry is checked against the live services, and
 * only then is anything written: the pools, the overrides, the policy with
 * the version bumped once, the telemetry, one audit entry. */
int aa__rt_settings_commit(aa_runtime *rt, const aa__rt_change *c, uint64_t *new_version,
                           bool *unchanged, char *err, size_t errcap) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  aa_pool_overrides ov[AA_RT_MAX_POOLS];
  aa_policy_change *ch = NULL;
  aa_policy *next = NULL;
  aa_adapt_params params, was_params;
  aa_telemetry_params was_t, t;
  uint64_t old_version;
  bool same = false, params_changed = false;
  char *json = NULL;
  size_t n = 0;
  int rc;

  memset(&params, 0, sizeof(params));
  if (unchanged != NULL)
    *unchanged = false;
  pthread_mutex_lock(&rt->svc.policy_lock);
  if (rt->svc.policy == NULL) {
    snprintf(err, errcap, "no policy in force (the runtime is not running)");
    rc = AA_ENOTSUP;
    goto unlock;
  }
  old_version = aa_policy_version(rt->svc.policy);
  if (c->has_if_match && c->if_match != old_version) {
    snprintf(err, errcap, "policy version %llu is in force, not %llu",
             (unsigned long long)old_version, (unsigned long long)c->if_match);
    rc = AA_ESTALE;
    goto unlock;
  }
  if (c->build != NULL) {
    rc = c->build(c->arg, rt->svc.policy, &next, err, errcap);
  } else {
    next = aa_policy_clone(rt->svc.policy);
    rc = next != NULL ? AA_OK : AA_ENOMEM;
  }
  if (rc != AA_OK)
    goto unlock;
  n = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS);
  for (size_t i = 0; i < n; i++) {
    ov[i] = overrides_of(rt, pools[i]);
    if (c->pool == pools[i])
      ov[i] = c->ov;
  }
  same = aa_policy_equal(rt->svc.policy, next) &&
         (c->pool == NULL || overrides_of(rt, c->pool).user_limit == c->ov.user_limit);
  if (same) {
    rc = AA_OK;
    if (unchanged != NULL)
      *unchanged = true;
    if (new_version != NULL)
      *new_version = old_version;
    goto unlock;
  }
  aa_policy_telemetry_params(rt->svc.policy, &was_t);
  aa_policy_telemetry_params(next, &t);
  rc = check_telemetry(rt, &was_t, &t, err, errcap);
  if (rc != AA_OK)
    goto unlock;
  rc = aa_policy_change_prepare_ov(rt->svc.policy, next, pools, ov, n, &ch, err, errcap);
  if (rc != AA_OK)
    goto unlock; /* no pool changed */
  /* nothing can fail from here on */
  aa_policy_change_commit(ch);
  if (c->pool != NULL)
    overrides_set(rt, c->pool, &c->ov);
  aa_policy_adapt_params(rt->svc.policy, &was_params);
  aa_policy_set_version(next, old_version + 1);
  aa_policy_free(rt->svc.policy);
  rt->svc.policy = next;
  next = NULL;
  snprintf(rt->svc.policy_source, sizeof(rt->svc.policy_source), "%s", c->source);
  telemetry_live(rt, pools, n, &was_t, &t);
  aa_policy_adapt_params(rt->svc.policy, &params);
  params_changed = memcmp(&params, &was_params, sizeof(params)) != 0;
  json = aa_policy_to_json(rt->svc.policy);
  if (rt->svc.store != NULL)
    aa_store_policy_change(rt->svc.store, c->source, old_version, old_version + 1,
                           c->reason, json);
  atomic_fetch_add(&rt->svc.policy_changes, 1);
  if (new_version != NULL)
    *new_version = old_version + 1;
unlock:
  pthread_mutex_unlock(&rt->svc.policy_lock);
  /* the loop's own proposals never change its parameters, so this is never
   * reached from the loop's thread (which holds the loop's lock) */
  if (rc == AA_OK && params_changed && rt->svc.loop != NULL) {
    int prc = aa_adapt_loop_set_params(rt->svc.loop, &params);
    if (prc != AA_OK)
      aa__rt_log("adapt: new parameters refused: %s", aa_strerror(prc));
  }
  if (rc != AA_OK)
    atomic_fetch_add(&rt->svc.policy_rejects, 1);
  free(json);
  aa_policy_free(next);
  return rc;
}

/* build for a whole policy: the one the caller made (arg: its aa_policy **,
 * taken over). */
static int build_given(void *arg, const aa_policy *cur, aa_policy **out, char *err,
                       size_t errcap) {
  aa_policy **given = arg;
  (void)cur;
  (void)err;
  (void)errcap;
  *out = *given;
  *given = NULL;
  return AA_OK;
}

int aa__rt_install_policy(aa_runtime *rt, aa_policy *next, const char *source,
                          const char *reason, bool has_if_match,
                          uint64_t if_match, uint64_t *new_version,
                          bool *unchanged, char *err, size_t errcap) {
  aa__rt_change c;
  int rc;
  memset(&c, 0, sizeof(c));
  c.build = build_given;
  c.arg = &next;
  c.source = source;
  c.reason = reason;
  c.has_if_match = has_if_match;
  c.if_match = if_match;
  rc = aa__rt_settings_commit(rt, &c, new_version, unchanged, err, errcap);
  aa_policy_free(next);
  return rc;
}

/* ---------------------------------------------------------------- the user's cap */

/* Whether pool is one of rt's. */
static bool owns_pool(aa_runtime *rt, const aa_pool *pool) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  size_t n = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS);
  for (size_t i = 0; i < n; i++) {
    if (pools[i] == pool)
      return true;
  }
  return false;
}

int aa_rt_pool_cap(aa_runtime *rt, aa_pool *pool, size_t bytes, const char *source) {
  aa__rt_change c;
  char err[AA_POLICY_ERR_CAP + 128] = "";
  char reason[160];
  int rc;

  if (rt == NULL || pool == NULL)
    return AA_EINVAL;
  if (atomic_load(&rt->ready) == 0 || atomic_load(&rt->shut_down))
    return AA_ECLOSED;
  if (!owns_pool(rt, pool))
    return AA_ENOENT;
  memset(&c, 0, sizeof(c));
  c.pool = pool;
  c.ov.user_limit = bytes;
  c.source = source != NULL && source[0] != '\0' ? source : "api";
  if (bytes != 0)
    snprintf(reason, sizeof(reason), "the user's cap on pool %s: %zu bytes",
             aa_pool_name(pool), bytes);
  else
    snprintf(reason, sizeof(reason), "the user's cap on pool %s removed",
             aa_pool_name(pool));
  c.reason = reason;
  rc = aa__rt_settings_commit(rt, &c, NULL, NULL, err, sizeof(err));
  if (rc != AA_OK)
    aa__rt_log("policy: the cap on pool %s is refused: %s", aa_pool_name(pool),
               err[0] ? err : aa_strerror(rc));
  return rc;
}

int aa_runtime_pool_cap(aa_pool *pool, size_t bytes, const char *source) {
  return aa_rt_pool_cap(aa__rt_default(), pool, bytes, source);
}

size_t aa_rt_pool_cap_get(aa_runtime *rt, const aa_pool *pool) {
  aa_pool_overrides ov;
  if (rt == NULL || pool == NULL)
    return 0;
  pthread_mutex_lock(&rt->svc.policy_lock);
  ov = overrides_of(rt, pool);
  pthread_mutex_unlock(&rt->svc.policy_lock);
  return ov.user_limit;
}

void aa__rt_overrides_json(aa_runtime *rt, aa__buf *sb) {
  size_t shown = 0;
  aa__buf_printf(sb, ",\"overrides\":[");
  pthread_mutex_lock(&rt->svc.policy_lock);
  for (size_t i = 0; i < rt->svc.nov; i++) {
    if (rt->svc.ov[i].user_limit == 0)
      continue;
    aa__buf_printf(sb, "%s{\"pool\":", shown++ ? "," : "");
    aa__buf_json_cstr(sb, aa_pool_name(rt->svc.ov_pools[i]));
    aa__buf_printf(sb, ",\"user_limit\":%zu}", rt->svc.ov[i].user_limit);
  }
  pthread_mutex_unlock(&rt->svc.policy_lock);
  aa__buf_printf(sb, "]");
}

/* ---------------------------------------------------------------- live tracing */

uint64_t aa__rt_trace_due_in(aa_runtime *rt) {
  uint64_t d = atomic_load(&rt->svc.trace_deadline_ns), now = aa_now_ns();
  if (d == 0)
    return UINT64_MAX;
  return d > now ? d - now : 0;
}

/* build: the policy in force with tracing off. */
static int build_trace_off(void *arg, const aa_policy *cur, aa_policy **out, char *err,
                           size_t errcap) {
  (void)arg;
  return aa_policy_merge_patch(cur, "{\"telemetry\":{\"trace\":false}}",
                               strlen("{\"telemetry\":{\"trace\":false}}"), out, err, errcap);
}

void aa__rt_trace_expire(aa_runtime *rt) {
  aa__rt_change c;
  char err[AA_POLICY_ERR_CAP + 128] = "";
  char reason[96];
  uint64_t d = atomic_load(&rt->svc.trace_deadline_ns);
  if (d == 0 || aa_now_ns() < d)
    return;
  uint64_t began = atomic_load(&rt->svc.trace_began_ns);
  snprintf(reason, sizeof reason, "the timed trace ended after %.1f s",
           (double)(aa_now_ns() - began) / 1e9);
  memset(&c, 0, sizeof c);
  c.build = build_trace_off;
  c.source = "trace-timer";
  c.reason = reason;
  int rc = aa__rt_settings_commit(rt, &c, NULL, NULL, err, sizeof err);
  if (rc != AA_OK) {
    aa__rt_log("trace: the timed trace could not end: %s", err[0] ? err : aa_strerror(rc));
    /* not again every tick: it ends when tracing is turned off */
    atomic_store(&rt->svc.trace_deadline_ns, 0);
  } else if (!rt->quiet) {
    aa__rt_log("trace: %s", reason);
  }
}

void aa__rt_trace_json(aa_runtime *rt, aa__buf *sb) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  aa_telemetry_params t;
  uint64_t traced = 0, skipped = 0, live = 0, full = 0;
  bool on = atomic_load(&rt->svc.tracing);
  pthread_mutex_lock(&rt->svc.policy_lock);
  aa_policy_telemetry_params(rt->svc.policy, &t);
  pthread_mutex_unlock(&rt->svc.policy_lock);
  size_t n = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS);
  for (size_t i = 0; on && i < n; i++) {
    uint64_t a, b, c, d;
    aa_pool_trace_sample_counts(pools[i], &a, &b, &c, &d);
    traced += a;
    skipped += b;
    live += c;
    full += d;
  }
  uint64_t due = aa__rt_trace_due_in(rt);
  uint32_t every = atomic_load(&rt->svc.trace_every);
  uint64_t min_bytes = atomic_load(&rt->svc.trace_min_bytes);
  bool sampled = on && !(every == 1 && min_bytes == 0);
  aa__buf_printf(sb, ",\"trace\":{\"on\":%s,\"whole_run\":%s,\"available\":%s", on ? "true" : "false",
                 rt->trace ? "true" : "false", can_trace(rt) ? "true" : "false");
  aa__buf_printf(sb, ",\"sample\":%u,\"min_bytes\":%llu,\"seconds\":%u", on ? every : t.trace_sample,
                 (unsigned long long)(on ? min_bytes : t.trace_min_bytes), t.trace_seconds);
  if (on && due != UINT64_MAX)
    aa__buf_printf(sb, ",\"remaining_ms\":%llu", (unsigned long long)(due / 1000000));
  else
    aa__buf_printf(sb, ",\"remaining_ms\":null");
  if (on)
    aa__buf_printf(sb, ",\"running_ms\":%llu",
                   (unsigned long long)((aa_now_ns() - atomic_load(&rt->svc.trace_began_ns)) /
                                        1000000));
  else
    aa__buf_printf(sb, ",\"running_ms\":null");
  aa__buf_printf(sb, ",\"max_events\":%llu", (unsigned long long)t.trace_max_events);
  if (sampled)
    aa__buf_printf(sb,
                   ",\"sampled\":{\"traced\":%llu,\"skipped\":%llu,\"live\":%llu,"
                   "\"table_full\":%llu}",
                   (unsigned long long)traced, (unsigned long long)skipped,
                   (unsigned long long)live, (unsigned long long)full);
  else
    aa__buf_printf(sb, ",\"sampled\":null");
  aa__buf_printf(sb, "}");
}

bool aa_rt_trace_wants(aa_runtime *rt, aa_pool *pool, const void *ptr) {
  return rt != NULL && atomic_load(&rt->svc.tracing) && aa_pool_trace_wants(pool, ptr);
}

int aa_rt_trace_frames(aa_runtime *rt, aa_pool *pool, const void *ptr, const char *frames,
                       size_t len) {
  uint64_t id = 0;
  if (rt == NULL || pool == NULL || ptr == NULL || frames == NULL || len == 0)
    return AA_EINVAL;
  if (rt->svc.store == NULL || !can_trace(rt))
    return AA_ECLOSED;
  if (!aa_rt_trace_wants(rt, pool, ptr))
    return AA_ENOENT;
  int rc = aa_store_frames_id(rt->svc.store, frames, len, &id);
  if (rc != AA_OK)
    return rc == AA_ENOENT ? AA_ECLOSED : rc;
  /* A sampled trace keeps the id beside the block (a trace of every event
   * keeps no table): keep its text too, before the id is there to be read,
   * for GET /holders. Not kept (no memory): the block reads as evicted. */
  if (!(atomic_load(&rt->svc.trace_every) == 1 && atomic_load(&rt->svc.trace_min_bytes) == 0))
    (void)aa__rt_stacks_put(rt, rt->svc.run_id, id, frames, len);
  return aa_pool_trace_frame(pool, ptr, id);
}

bool aa_runtime_trace_wants(aa_pool *pool, const void *ptr) {
  return aa_rt_trace_wants(aa__rt_default(), pool, ptr);
}

int aa_runtime_trace_frames(aa_pool *pool, const void *ptr, const char *frames, size_t len) {
  return aa_rt_trace_frames(aa__rt_default(), pool, ptr, frames, len);
}
