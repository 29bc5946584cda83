/*
 * runtime_policy.c — the policy in force: the start-up policy (file or
 * built-in default), each pool's settings and classes from it when the pool
 * is made, the check that a policy fits the machine, and installing a new
 * policy on every live pool (from HTTP, Python or the loop). Each works on
 * the runtime it is given; the services' state (rt->svc) is
 * runtime_services.c's.
 *
 * Lock: rt->svc.policy_lock guards the document and its version (the order
 * with the loop's lock is in runtime_services.c).
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
    snprintf(path, sizeof(path), "%s/%s.json", rt->policy_dir, rt->model);
    if (!file_exists(path)) {
      /* A model named on purpose that has no policy is a likely typo. */
      if (strcmp(rt->model, "default") != 0)
        aa__rt_log("policy: no policy for model %s (%s does not exist); using the "
                   "built-in default policy",
                   rt->model, path);
      else if (!rt->quiet)
        aa__rt_log("policy: the built-in default (model default; no %s)", path);
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
  atomic_store(&rt->svc.histogram_on, t.histogram || t.trace || rt->trace);
}

/* Called with rt_lock held, as aa__rt_services_end_run is at exit: a pool
 * made after the run ended does not trace (its events would belong to no
 * run). */
static void trace_on(aa_runtime *rt, aa_pool *pool) {
  if (rt->svc.store != NULL && rt->trace && !atomic_load(&rt->svc.run_ended))
    aa_pool_set_trace(pool, aa_store_trace_push, rt->svc.store);
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
  pthread_mutex_unlock(&rt->svc.policy_lock);
  if (rc != AA_OK)
    aa__rt_log("policy: cannot apply the %s classes to pool %s: %s", section,
               aa_pool_name(pool), aa_strerror(rc));
  aa_pool_set_telemetry(pool, atomic_load(&rt->svc.histogram_on));
  trace_on(rt, pool);
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

/* Changes every live pool to `next` or none (aa_policy_change_prepare /
 * _commit), then sets their telemetry. Called with policy_lock held, which
 * serialises policy changes and keeps a pool made meanwhile waiting in
 * aa__rt_pool_created until the new policy is in force. */
static int apply_to_pools(aa_runtime *rt, const aa_policy *next, char *err,
                          size_t errcap) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  size_t n = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS);
  aa_policy_change *ch = NULL;
  int rc = aa_policy_change_prepare(rt->svc.policy, next, pools, n, &ch, err, errcap);
  if (rc != AA_OK)
    return rc;
  aa_policy_change_commit(ch);
  for (size_t i = 0; i < n; i++)
    aa_pool_set_telemetry(pools[i], atomic_load(&rt->svc.histogram_on));
  return AA_OK;
}

/* Installs `next` (validated) as the policy in force: applies it, bumps the
 * version, logs the change to the store. Takes ownership of next. A policy
 * equal to the one in force (PUT of the same document, PATCH {} or of the
 * values in force) is no change: nothing is applied or logged and the
 * version stays, so PUT and PATCH are idempotent. */
int aa__rt_install_policy(aa_runtime *rt, aa_policy *next, const char *source,
                          const char *reason, bool has_if_match,
                          uint64_t if_match, uint64_t *new_version,
                          bool *unchanged, char *err, size_t errcap) {
  aa_adapt_params params;
  uint64_t old_version;
  bool same = false;
  char *json = NULL;
  int rc;

  memset(&params, 0, sizeof(params));
  if (unchanged != NULL)
    *unchanged = false;
  pthread_mutex_lock(&rt->svc.policy_lock);
  old_version = rt->svc.policy ? aa_policy_version(rt->svc.policy) : 0;
  if (has_if_match && if_match != old_version) {
    snprintf(err, errcap, "policy version %llu is in force, not %llu",
             (unsigned long long)old_version, (unsigned long long)if_match);
    rc = AA_ESTALE;
    goto unlock;
  }
  if (rt->svc.policy != NULL && aa_policy_equal(rt->svc.policy, next)) {
    same = true;
    rc = AA_OK;
    if (unchanged != NULL)
      *unchanged = true;
    if (new_version != NULL)
      *new_version = old_version;
    goto unlock;
  }
  rc = apply_to_pools(rt, next, err, errcap);
  if (rc != AA_OK)
    goto unlock; /* no pool changed */
  aa_policy_set_version(next, old_version + 1);
  aa_policy_free(rt->svc.policy);
  rt->svc.policy = next;
  next = NULL;
  snprintf(rt->svc.policy_source, sizeof(rt->svc.policy_source), "%s", source);
  aa__rt_adopt_telemetry(rt, rt->svc.policy);
  aa_policy_adapt_params(rt->svc.policy, &params);
  json = aa_policy_to_json(rt->svc.policy);
  if (rt->svc.store != NULL)
    aa_store_policy_change(rt->svc.store, source, old_version, old_version + 1,
                           reason, json);
  atomic_fetch_add(&rt->svc.policy_changes, 1);
  if (new_version != NULL)
    *new_version = old_version + 1;
unlock:
  pthread_mutex_unlock(&rt->svc.policy_lock);
  if (rc == AA_OK && !same && rt->svc.loop != NULL) {
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
