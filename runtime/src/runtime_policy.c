/*
 * runtime_policy.c — the policy in force: the start-up policy (file or
 * built-in default), each pool's settings and classes from it when the pool
 * is made, the check that a policy fits the machine, and installing a new
 * policy on every live pool (from HTTP, Python or the loop). The services'
 * state it shares (svc) is runtime_services.c's.
 *
 * Lock: svc.policy_lock guards the document and its version (the order
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

#define svc aa__rt_svc /* the services' state (runtime_internal.h) */

/* ------------------------------------------------------------------ policy */

static bool file_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Loads the start-up policy: ADAPTALLOC_POLICY, else
 * ADAPTALLOC_POLICY_DIR/<model>.json when it exists, else the built-in
 * default. A file that does not load is reported and the default is used. */
void aa__rt_load_start_policy(void) {
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
      else if (!aa__rt.quiet)
        aa__rt_log("policy: the built-in default (model default; no %s)", path);
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
void aa__rt_adopt_telemetry(const aa_policy *p) {
  aa_telemetry_params t;
  aa_policy_telemetry_params(p, &t);
  atomic_store(&svc.snapshot_interval_ms,
               t.snapshot_interval_ms ? t.snapshot_interval_ms : 1000);
  /* The core delivers trace events only while a pool's telemetry is on, so
   * tracing keeps it on even when the policy turns the histogram off. */
  atomic_store(&svc.histogram_on, t.histogram || t.trace || aa__rt.trace);
}

/* Called with rt_lock held, as aa__rt_services_end_run is at exit: a pool
 * made after the run ended does not trace (its events would belong to no
 * run). */
static void trace_on(aa_pool *pool) {
  if (svc.store != NULL && aa__rt.trace && !atomic_load(&svc.run_ended))
    aa_pool_set_trace(pool, aa_store_trace_push, svc.store);
}

_Static_assert(AA_ADAPT_LOOP_MAX_POOLS >= AA_RT_MAX_POOLS,
               "the loop must be able to watch every pool the runtime makes");

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
  aa__rt_oom_watch(pool);
  /* A region's section starts from pools.device (docs/policy.md), so the
   * loop, which records its changes in that section, adapts only the device
   * pools of regions: a region pool on the host keeps its policy's table
   * (recorded there, its classes would bring pools.device's settings, limit
   * included, to the host pool at the next policy change). */
  if (svc.loop != NULL && (aa_pool_region(pool)[0] == '\0' ||
                           strcmp(aa__rt_pool_kind(pool), "device") == 0)) {
    rc = aa_adapt_loop_add_pool(svc.loop, pool);
    if (rc != AA_OK)
      aa__rt_log("adapt: cannot watch pool %s: %s", aa_pool_name(pool),
                 aa_strerror(rc));
  }
}

const char *aa__rt_pool_kind(const aa_pool *pool) {
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
  return section_of(p, aa__rt_pool_kind(pool), aa_pool_region(pool), buf, cap);
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

/* The settings a pool takes at creation and keeps: a policy that changes
 * one of them for a live pool is refused whole (applying only the class
 * table and the limit would report a change that did not happen). Returns
 * the first that differs, with both values, or NULL. The thread-cache
 * bounds are not among them: they are read when a pool is made, and a
 * region's pool that loses its section takes its backend's, whose bounds
 * differ (docs/policy.md). */
static const char *fixed_changed(const aa_pool_config *cur, const aa_pool_config *want,
                                 size_t *was, size_t *asked) {
  const struct {
    const char *name;
    size_t cur, want;
  } f[] = {
      {"slab_size", cur->slab_size, want->slab_size},
      {"max_small", cur->max_small, want->max_small},
      {"large.mode", (size_t)cur->large_mode, (size_t)want->large_mode},
      {"large.cache_bytes", cur->large_cache_bytes, want->large_cache_bytes},
      {"large.page_bytes", cur->large_page_bytes, want->large_page_bytes},
  };
  for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
    if (f[k].cur != f[k].want) {
      *was = f[k].cur;
      *asked = f[k].want;
      return f[k].name;
    }
  }
  return NULL;
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
    size_t was = 0, asked = 0;
    const char *fixed = fixed_changed(&cur, &want, &was, &asked);
    if (fixed != NULL && strcmp(fixed, "large.mode") == 0) {
      /* the policy file's names, not the enum's numbers */
      snprintf(err, errcap,
               "pools.%s: %s is fixed while pool %s is live (\"%s\" in force, "
               "\"%s\" asked); restart to change it",
               want_sec, fixed, aa_pool_name(pools[i]), aa_large_mode_name((aa_large_mode)was),
               aa_large_mode_name((aa_large_mode)asked));
      return AA_EINVAL;
    }
    if (fixed != NULL) {
      snprintf(err, errcap,
               "pools.%s: %s is fixed while pool %s is live (%zu in force, %zu "
               "asked); restart to change it",
               want_sec, fixed, aa_pool_name(pools[i]), was, asked);
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
 * version, logs the change to the store. Takes ownership of next. A policy
 * equal to the one in force (PUT of the same document, PATCH {} or of the
 * values in force) is no change: nothing is applied or logged and the
 * version stays, so PUT and PATCH are idempotent. */
int aa__rt_install_policy(aa_policy *next, const char *source,
                          const char *reason, bool has_if_match,
                          uint64_t if_match, uint64_t *new_version,
                          bool *unchanged, char *err, size_t errcap) {
  aa_adapt_params params;
  uint64_t old_version;
  size_t changed = 0;
  bool same = false;
  char *json = NULL;
  int rc;

  memset(&params, 0, sizeof(params));
  if (unchanged != NULL)
    *unchanged = false;
  pthread_mutex_lock(&svc.policy_lock);
  old_version = svc.policy ? aa_policy_version(svc.policy) : 0;
  if (has_if_match && if_match != old_version) {
    snprintf(err, errcap, "policy version %llu is in force, not %llu",
             (unsigned long long)old_version, (unsigned long long)if_match);
    rc = AA_ESTALE;
    goto unlock;
  }
  if (svc.policy != NULL && aa_policy_equal(svc.policy, next)) {
    same = true;
    rc = AA_OK;
    if (unchanged != NULL)
      *unchanged = true;
    if (new_version != NULL)
      *new_version = old_version;
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
  aa__rt_adopt_telemetry(svc.policy);
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
  if (rc == AA_OK && !same && svc.loop != NULL) {
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
