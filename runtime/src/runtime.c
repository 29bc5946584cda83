/*
 * runtime.c — the runtime's top floor, its life and pools: the process's
 * default runtime (its storage is runtime_state.c's; started here on first
 * use, ended at exit) and the ones aa_runtime_new makes; the pools (one per CUDA device, one pinned, one
 * host) and the regions' pools created on first use, and the start/stop of
 * the optional services (runtime_services.c). Its configuration is
 * runtime_config.c's.
 *
 * Entry points: aa_runtime_init, aa_runtime_pool / aa_rt_pool,
 * aa_runtime_region_id, aa_runtime_region_pool, aa_runtime_shutdown,
 * aa_runtime_new, aa_runtime_destroy, the in-process aa_rt_stats_json /
 * aa_rt_policy_json / aa_rt_policy_update (they start the runtime, then ask
 * runtime_http.c's provider); rt_at_exit ends the default runtime's
 * store run in a process that exits without aa_runtime_shutdown (the one
 * thing kept for the default runtime alone: atexit takes no argument, and a
 * runtime made by aa_runtime_new is its owner's to destroy).
 * The hot path is aa_rt_pool(): one acquire load once the pool exists.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "adaptalloc/policy.h"
#include "adaptalloc/runtime.h"
#include "runtime_internal.h"
#include "adaptalloc/internal/util.h" /* aa__log_line */

_Static_assert(AA_RUNTIME_MAX_REGIONS == AA_POLICY_MAX_REGIONS,
               "a policy section for every region the runtime can have");

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
static const aa_runtime_config *rt_pending_cfg;

/* ------------------------------------------------------------ exit */

/* The end of a run at process exit. A process that never calls
 * aa_runtime_shutdown (PyTorch's: its allocator lives until the end) would
 * otherwise lose what is still in the trace ring and leave its run
 * unended. Registered with atexit() once the store holds a run; runs after
 * a Python interpreter's finalisation (which may still free blocks) and
 * before the process's threads stop. The pools are left alone: other
 * threads, and C++ destructors that run after this, may still allocate and
 * free. In a fork()ed child it does nothing (the run is the parent's and
 * so are the store's writer and the snapshot thread). */
static atomic_bool rt_exit_armed;
static pid_t rt_exit_pid;

static void rt_exit_disarm_in_child(void) {
  atomic_store(&rt_exit_armed, false);
}

/* The end of the run runs in a helper thread that the exiting thread waits
 * for, so that an exit() from a signal handler which interrupted this
 * thread inside an allocation (its trace callback under way, a pool's lock
 * held) cannot keep the process from ending: detaching the traces and the
 * last snapshots wait for that very frame. When the helper has not got past
 * them within AA__RT_FLUSH_STALL_MS the run is given up (said in one line)
 * and the exit goes on; a later aa_runtime_shutdown then does nothing (the
 * helper may still use the store). */
static pthread_mutex_t rt_exit_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rt_exit_cv = PTHREAD_COND_INITIALIZER;
static int rt_exit_stage; /* 1: traces detached, snapshots queued; 2: done */
static atomic_bool rt_exit_abandoned;

static void rt_exit_stage_set(int stage) {
  pthread_mutex_lock(&rt_exit_mu);
  rt_exit_stage = stage;
  pthread_cond_broadcast(&rt_exit_cv);
  pthread_mutex_unlock(&rt_exit_mu);
}

static void rt_exit_detached(void) { rt_exit_stage_set(1); }

static void *rt_exit_main(void *arg) {
  aa__rt_services_end_run(arg, AA__RT_EXIT_FLUSH_MAX_MS, rt_exit_detached);
  rt_exit_stage_set(2);
  return NULL;
}

/* Waits until the helper reached `stage` or ms passed; true if it did. */
static bool rt_exit_wait(int stage, uint32_t ms) {
  struct timespec until;
  bool reached;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += ms / 1000u;
  until.tv_nsec += (long)(ms % 1000u) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&rt_exit_mu);
  while (rt_exit_stage < stage) {
    if (pthread_cond_timedwait(&rt_exit_cv, &rt_exit_mu, &until) != 0)
      break;
  }
  reached = rt_exit_stage >= stage;
  pthread_mutex_unlock(&rt_exit_mu);
  return reached;
}

static void rt_at_exit(void) {
  aa_runtime *rt = aa__rt_default();
  struct timespec until;
  pthread_t helper;

  if (!atomic_exchange(&rt_exit_armed, false) || getpid() != rt_exit_pid)
    return;
  /* rt->lock keeps a shutdown from another thread out while the run ends;
   * never wait long for it (a thread may hold it creating a pool). */
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;
  if (pthread_mutex_timedlock(&rt->lock, &until) != 0) {
    aa__rt_log("store: run %lld was not ended at exit: the runtime was busy "
               "for over a second; its last trace events and snapshots are lost",
               (long long)aa_runtime_run_id());
    return;
  }
  if (rt->shut_down) {
    pthread_mutex_unlock(&rt->lock);
    return;
  }
  if (pthread_create(&helper, NULL, rt_exit_main, rt) != 0) {
    aa__rt_services_end_run(rt, AA__RT_EXIT_FLUSH_MAX_MS, NULL); /* here, then */
    pthread_mutex_unlock(&rt->lock);
    return;
  }
  if (!rt_exit_wait(1, AA__RT_FLUSH_STALL_MS)) {
    atomic_store(&rt_exit_abandoned, true);
    pthread_detach(helper);
    aa__rt_log("store: run %lld was not ended at exit: the pools stayed busy (exit() "
               "called from a signal handler during an allocation, or a thread holding "
               "a pool's lock); its last trace events and snapshots are lost",
               (long long)aa_runtime_run_id());
  } else if (!rt_exit_wait(2, AA__RT_EXIT_FLUSH_MAX_MS + AA__RT_FLUSH_STALL_MS)) {
    /* the helper's own wait for the writer is bounded; should it still be
     * held up, the exit does not wait for it */
    atomic_store(&rt_exit_abandoned, true);
    pthread_detach(helper);
    aa__rt_log("store: run %lld may be incomplete: its end was still being written "
               "when the exit went on",
               (long long)aa_runtime_run_id());
  } else {
    pthread_join(helper, NULL);
  }
  pthread_mutex_unlock(&rt->lock);
}

static void rt_arm_exit(void) {
  if (aa_runtime_run_id() <= 0)
    return; /* no store, no run: nothing to finish */
  rt_exit_pid = getpid();
  atomic_store(&rt_exit_armed, true);
  if (pthread_atfork(NULL, NULL, rt_exit_disarm_in_child) != 0 ||
      atexit(rt_at_exit) != 0) {
    atomic_store(&rt_exit_armed, false);
    aa__rt_log("store: cannot register the end of run %lld at exit; a "
               "process that ends without aa_runtime_shutdown leaves it "
               "unended and loses its last trace events",
               (long long)aa_runtime_run_id());
  }
}

static void rt_init_once(void) {
  aa_runtime *rt = aa__rt_default();
  aa__rt_default_config(rt, rt_pending_cfg);
  rt->started_ns = aa_now_ns();
  aa__rt_services_start(rt);
  rt_arm_exit();
  atomic_store_explicit(&rt->ready, 1, memory_order_release);
}

int aa_runtime_init(const aa_runtime_config *cfg) {
  aa_runtime *rt = aa__rt_default();
  if (aa__rt_config_check(cfg) != AA_OK)
    return AA_EINVAL;
  pthread_mutex_lock(&rt->lock);
  rt_pending_cfg = cfg;
  pthread_once(&rt_once, rt_init_once);
  rt_pending_cfg = NULL;
  pthread_mutex_unlock(&rt->lock);
  return AA_OK;
}

void aa__rt_ensure_started(aa_runtime *rt) {
  if (rt == aa__rt_default() && !atomic_load_explicit(&rt->ready, memory_order_acquire))
    (void)aa_runtime_init(NULL);
}

bool aa_runtime_started(void) {
  aa_runtime *rt = aa__rt_default();
  /* No lock: a shutdown may follow the answer either way (the callers
   * document that race); this is asked on every pinned tensor's free. */
  if (!atomic_load_explicit(&rt->ready, memory_order_acquire))
    return false;
  return !atomic_load_explicit(&rt->shut_down, memory_order_acquire);
}

static _Atomic(aa_pool *) *pool_slot(aa_runtime *rt, aa_backend_kind kind, int device) {
  switch (kind) {
  case AA_BACKEND_DEVICE:
    if (device < 0 || device >= AA_MAX_DEVICES)
      return NULL;
    return &rt->device_pools[device];
  case AA_BACKEND_PINNED:
    return &rt->pinned_pool;
  case AA_BACKEND_HOST:
    return &rt->host_pool;
  default:
    return NULL;
  }
}

static int rt_make_backend(aa_backend_kind kind, int device, aa_backend **out) {
  switch (kind) {
  case AA_BACKEND_DEVICE:
    return aa_backend_cuda_new(device, out);
  case AA_BACKEND_PINNED:
    return aa_backend_pinned_new(out);
  case AA_BACKEND_HOST:
    return aa_backend_host_new(out);
  default:
    *out = NULL;
    return AA_EINVAL;
  }
}

/* Managed memory (docs/cuda.md): a device pool whose policy section says
 * backend "managed" gets a managed backend of its own (a region's pool too:
 * its own cap accounting and advice), and aa_runtime_managed_pool's pools
 * always do. *backend is NULL when the pool is not managed. */
static int rt_make_managed(aa_runtime *rt, aa_backend_kind kind, int device, const char *region,
                           bool force, aa_backend **backend) {
  aa_managed_config mc;
  bool managed = false;
  int rc;

  *backend = NULL;
  if (kind != AA_BACKEND_DEVICE)
    return AA_OK;
  if (aa__rt_pool_backend(rt, region, &managed, &mc) != AA_OK)
    managed = false; /* logged by aa__rt_pool_config; mc has the defaults */
  if (!managed && !force)
    return AA_OK;
  mc.device = device;
  rc = aa_backend_managed_new(&mc, backend);
  if (rc != AA_OK && !rt->managed_failed_logged) {
    rt->managed_failed_logged = true;
    aa__rt_log("cannot create a managed-memory backend (device %d%s%s): %s", device,
               region != NULL ? ", region " : "", region != NULL ? region : "",
               aa_strerror(rc));
  }
  return rc;
}

/* Creates the pool for (kind, device) over `shared` (a backend of another
 * pool: a region's pool uses its backend pool's), or over a new backend when
 * shared is NULL or the policy makes it managed (force_managed: always).
 * region: NULL, or the region the pool serves. Called with rt->lock held. */
static aa_pool *rt_create_pool(aa_runtime *rt, aa_backend_kind kind, int device,
                               aa_backend *shared, const char *region, bool force_managed) {
  aa_backend *backend = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  char name[32];
  int rc;

  rc = rt_make_managed(rt, kind, device, region, force_managed, &backend);
  if (rc != AA_OK)
    return NULL;
  if (backend != NULL) {
    shared = NULL; /* the new managed backend serves this pool */
  } else if (shared == NULL) {
    if (rt->failed[kind][device < 0 ? 0 : device])
      return NULL; /* tried before and it cannot be had; do not retry per call */
    rc = rt_make_backend(kind, device, &backend);
    if (rc != AA_OK) {
      rt->failed[kind][device < 0 ? 0 : device] = true;
      aa__rt_log("cannot create the %s backend (device %d): %s",
                 aa_policy_kind_name(kind), device, aa_strerror(rc));
      goto done;
    }
  }
  aa_pool_config_init(&cfg);
  if (force_managed)
    snprintf(name, sizeof(name), "managed%d", device);
  else if (kind == AA_BACKEND_DEVICE)
    snprintf(name, sizeof(name), "device%d", device);
  else
    snprintf(name, sizeof(name), "%s", aa_policy_kind_name(kind));
  if (region != NULL) {
    /* "device63:" and a name of AA_REGION_NAME_MAX bytes fit in 31 */
    size_t n = strlen(name);
    snprintf(name + n, sizeof(name) - n, ":%s", region);
  }
  cfg.name = name;
  cfg.region = region;
  cfg.backend = shared != NULL ? shared : backend;
  rc = aa__rt_pool_config(rt, aa_policy_kind_name(kind), region, &cfg);
  if (rc != AA_OK)
    goto done;
  rc = aa_pool_new(&cfg, &pool);
  if (rc != AA_OK) {
    aa__rt_log("cannot create pool %s: %s", name, aa_strerror(rc));
    goto done;
  }
  aa__rt_pool_created(rt, pool);
  if (backend != NULL)
    rt->backends[rt->nbackends++] = backend;
  backend = NULL;
done:
  if (backend != NULL)
    aa_backend_destroy(backend);
  return pool;
}

int aa_runtime_pool_config(aa_backend_kind kind, aa_pool_config *cfg) {
  if (cfg == NULL || (kind != AA_BACKEND_DEVICE && kind != AA_BACKEND_PINNED &&
                      kind != AA_BACKEND_HOST))
    return AA_EINVAL;
  return aa__rt_pool_config(aa__rt_default(), aa_policy_kind_name(kind), NULL, cfg);
}

/* The pool in `slot`, made on first use (kind, device; force_managed: over
 * a managed backend whatever the policy says) and listed in rt->pools. */
static aa_pool *rt_slot_pool(aa_runtime *rt, _Atomic(aa_pool *) *slot, aa_backend_kind kind,
                             int device, bool force_managed) {
  aa_pool *pool = atomic_load_explicit(slot, memory_order_acquire);
  if (pool != NULL)
    return pool;
  aa__rt_ensure_started(rt);
  pthread_mutex_lock(&rt->lock);
  pool = atomic_load_explicit(slot, memory_order_relaxed);
  if (pool == NULL && !rt->shut_down) {
    pool = rt_create_pool(rt, kind, device, NULL, NULL, force_managed);
    if (pool != NULL) {
      pthread_mutex_lock(&rt->pools_lock);
      rt->pools[rt->npools++] = pool;
      pthread_mutex_unlock(&rt->pools_lock);
      atomic_store_explicit(slot, pool, memory_order_release);
    }
  }
  pthread_mutex_unlock(&rt->lock);
  return pool;
}

aa_pool *aa_rt_pool(aa_runtime *rt, aa_backend_kind kind, int device) {
  _Atomic(aa_pool *) *slot = rt != NULL ? pool_slot(rt, kind, device) : NULL;
  return slot != NULL ? rt_slot_pool(rt, slot, kind, device, false) : NULL;
}

aa_pool *aa_rt_managed_pool(aa_runtime *rt, int device) {
  if (rt == NULL || device < 0 || device >= AA_MAX_DEVICES)
    return NULL;
  return rt_slot_pool(rt, &rt->managed_pools[device], AA_BACKEND_DEVICE, device, true);
}

/* ------------------------------------------------------------------ regions */

aa_pool *aa_runtime_pool(aa_backend_kind kind, int device) {
  return aa_rt_pool(aa__rt_default(), kind, device);
}

aa_pool *aa_runtime_managed_pool(int device) {
  return aa_rt_managed_pool(aa__rt_default(), device);
}

int aa_runtime_region_id(const char *name, int *id, char *err, size_t errcap) {
  aa_runtime *rt = aa__rt_default();
  char why[AA_POLICY_ERR_CAP];
  int n, rc = AA_OK;

  if (err != NULL && errcap > 0)
    err[0] = '\0';
  if (id == NULL)
    return AA_EINVAL;
  *id = -1;
  if (aa_policy_region_name_check(name, why, sizeof(why)) != AA_OK) {
    /* the name itself is not echoed: it may hold any byte */
    if (err != NULL && errcap > 0)
      snprintf(err, errcap, "not a region name: %s", why);
    return AA_EINVAL;
  }
  pthread_mutex_lock(&rt->lock);
  n = atomic_load_explicit(&rt->nregions, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    if (strcmp(rt->regions[i].name, name) == 0) {
      *id = i;
      goto unlock;
    }
  }
  if (n >= AA_RUNTIME_MAX_REGIONS) {
    if (err != NULL && errcap > 0)
      snprintf(err, errcap,
               "region \"%s\": this process has %d regions already, the "
               "most it can have",
               name, AA_RUNTIME_MAX_REGIONS);
    rc = AA_ELIMIT;
    goto unlock;
  }
  snprintf(rt->regions[n].name, sizeof(rt->regions[n].name), "%s", name);
  atomic_store_explicit(&rt->nregions, n + 1, memory_order_release);
  *id = n;
unlock:
  pthread_mutex_unlock(&rt->lock);
  return rc;
}

const char *aa_runtime_region_name(int id) {
  aa_runtime *rt = aa__rt_default();
  if (id < 0 || id >= atomic_load_explicit(&rt->nregions, memory_order_acquire))
    return NULL;
  return rt->regions[id].name;
}

aa_pool *aa_runtime_region_pool(int id, aa_backend_kind kind, int device) {
  aa_runtime *rt = aa__rt_default();
  _Atomic(aa_pool *) *slot;
  aa__rt_region *r;
  aa_pool *pool, *base;

  if (aa_runtime_region_name(id) == NULL)
    return NULL;
  r = &rt->regions[id];
  if (kind == AA_BACKEND_DEVICE && device >= 0 && device < AA_MAX_DEVICES)
    slot = &r->device[device];
  else if (kind == AA_BACKEND_HOST)
    slot = &r->host;
  else
    return NULL;
  pool = atomic_load_explicit(slot, memory_order_acquire);
  if (pool != NULL)
    return pool;
  /* the backend's own pool first (it takes rt->lock itself): the region's
   * pool shares its backend */
  base = aa_rt_pool(rt, kind, device);
  if (base == NULL)
    return NULL;
  pthread_mutex_lock(&rt->lock);
  pool = atomic_load_explicit(slot, memory_order_relaxed);
  if (pool == NULL && !rt->shut_down) {
    if (rt->nregion_pools >= AA_RUNTIME_MAX_REGION_POOLS) {
      if (!rt->region_pools_full_logged)
        aa__rt_log("region %s: %d region pools exist, the most there can be; "
                   "its allocations fail",
                   r->name, AA_RUNTIME_MAX_REGION_POOLS);
      rt->region_pools_full_logged = true;
    } else {
      pool = rt_create_pool(rt, kind, device, aa_pool_backend(base), r->name, false);
    }
    if (pool != NULL) {
      rt->nregion_pools++;
      pthread_mutex_lock(&rt->pools_lock);
      rt->pools[rt->npools++] = pool;
      pthread_mutex_unlock(&rt->pools_lock);
      atomic_store_explicit(slot, pool, memory_order_release);
    }
  }
  pthread_mutex_unlock(&rt->lock);
  return pool;
}

/* Stops rt's services and destroys its pools and backends; rt->shut_down
 * was set by the caller. */
static void rt_stop(aa_runtime *rt) {
  size_t i;

  aa__rt_services_stop(rt); /* server, loop, snapshots, store — before pools go */
  aa__rt_stacks_clear(rt);  /* no /holders and no trace after the services */

  pthread_mutex_lock(&rt->lock);
  for (i = 0; i < AA_MAX_DEVICES; i++)
    atomic_store(&rt->device_pools[i], NULL);
  atomic_store(&rt->pinned_pool, NULL);
  atomic_store(&rt->host_pool, NULL);
  for (i = 0; i < AA_MAX_DEVICES; i++)
    atomic_store(&rt->managed_pools[i], NULL);
  for (i = 0; i < AA_RUNTIME_MAX_REGIONS; i++) {
    for (size_t d = 0; d < AA_MAX_DEVICES; d++)
      atomic_store(&rt->regions[i].device[d], NULL);
    atomic_store(&rt->regions[i].host, NULL);
  }
  rt->nregion_pools = 0;
  pthread_mutex_lock(&rt->pools_lock);
  for (i = rt->npools; i-- > 0;)
    aa_pool_destroy(rt->pools[i]);
  rt->npools = 0;
  pthread_mutex_unlock(&rt->pools_lock);
  for (i = rt->nbackends; i-- > 0;)
    aa_backend_destroy(rt->backends[i]);
  rt->nbackends = 0;
  pthread_mutex_unlock(&rt->lock);
}

void aa_runtime_shutdown(void) {
  aa_runtime *rt = aa__rt_default();
  if (!atomic_load_explicit(&rt->ready, memory_order_acquire))
    return;
  pthread_mutex_lock(&rt->lock);
  if (rt->shut_down || atomic_load(&rt_exit_abandoned)) {
    pthread_mutex_unlock(&rt->lock);
    return;
  }
  rt->shut_down = true;
  pthread_mutex_unlock(&rt->lock);
  rt_stop(rt);
}

/* ------------------------------------------------------------ instances */

int aa_runtime_new(const aa_runtime_config *cfg, aa_runtime **out) {
  aa_runtime *rt = NULL;
  int rc = AA_EINVAL;
  int inited = 0; /* how many of the five locks below exist */

  if (out == NULL)
    goto done;
  *out = NULL;
  if (aa__rt_config_check(cfg) != AA_OK)
    goto done;
  rc = AA_ENOMEM;
  rt = calloc(1, sizeof(*rt));
  if (rt == NULL)
    goto done;
  if (pthread_mutex_init(&rt->lock, NULL) != 0)
    goto done;
  inited++;
  if (pthread_mutex_init(&rt->pools_lock, NULL) != 0)
    goto done;
  inited++;
  if (pthread_mutex_init(&rt->svc.policy_lock, NULL) != 0)
    goto done;
  inited++;
  if (pthread_mutex_init(&rt->svc.ticker_lock, NULL) != 0)
    goto done;
  inited++;
  if (pthread_cond_init(&rt->svc.ticker_cond, NULL) != 0)
    goto done;
  inited++;
  if (pthread_mutex_init(&rt->oom.mu, NULL) != 0)
    goto done;
  inited++;
  if (pthread_mutex_init(&rt->stacks.mu, NULL) != 0)
    goto done;
  inited++;
  aa__rt_apply_config(rt, cfg);
  rt->started_ns = aa_now_ns();
  aa__rt_services_start(rt);
  atomic_store_explicit(&rt->ready, 1, memory_order_release);
  *out = rt;
  rt = NULL;
  rc = AA_OK;
done:
  if (rt != NULL) {
    if (inited > 6)
      pthread_mutex_destroy(&rt->stacks.mu);
    if (inited > 5)
      pthread_mutex_destroy(&rt->oom.mu);
    if (inited > 4)
      pthread_cond_destroy(&rt->svc.ticker_cond);
    if (inited > 3)
      pthread_mutex_destroy(&rt->svc.ticker_lock);
    if (inited > 2)
      pthread_mutex_destroy(&rt->svc.policy_lock);
    if (inited > 1)
      pthread_mutex_destroy(&rt->pools_lock);
    if (inited > 0)
      pthread_mutex_destroy(&rt->lock);
    free(rt);
  }
  return rc;
}

void aa_runtime_destroy(aa_runtime *rt) {
  if (rt == NULL)
    return;
  if (rt->is_default) {
    aa_runtime_shutdown(); /* the default one lives in static storage */
    return;
  }
  pthread_mutex_lock(&rt->lock);
  rt->shut_down = true;
  pthread_mutex_unlock(&rt->lock);
  rt_stop(rt);
  pthread_mutex_destroy(&rt->stacks.mu);
  pthread_mutex_destroy(&rt->oom.mu);
  pthread_cond_destroy(&rt->svc.ticker_cond);
  pthread_mutex_destroy(&rt->svc.ticker_lock);
  pthread_mutex_destroy(&rt->svc.policy_lock);
  pthread_mutex_destroy(&rt->pools_lock);
  pthread_mutex_destroy(&rt->lock);
  free(rt);
}

/* ------------------------------------------------------------ in-process calls */

/* /stats and /policy without the server (moved whole from runtime_http.c:
 * they start the runtime first, which only the top floor may do). */
int aa_rt_stats_json(aa_runtime *rt, char **out, size_t *len) {
  if (rt == NULL || out == NULL || len == NULL)
    return AA_EINVAL;
  *out = NULL;
  *len = 0;
  aa__rt_ensure_started(rt);
  return aa__rt_prov_stats_json(rt, out, len);
}

int aa_runtime_stats_json(char **out, size_t *len) {
  return aa_rt_stats_json(aa__rt_default(), out, len);
}

int aa_rt_policy_json(aa_runtime *rt, char **out, uint64_t *version) {
  size_t len = 0;
  uint64_t v = 0;
  int rc;
  if (rt == NULL || out == NULL)
    return AA_EINVAL;
  *out = NULL;
  aa__rt_ensure_started(rt);
  rc = aa__rt_prov_policy_get(rt, out, &len, &v);
  if (rc == AA_OK && version != NULL)
    *version = v;
  return rc;
}

int aa_runtime_policy_json(char **out, uint64_t *version) {
  return aa_rt_policy_json(aa__rt_default(), out, version);
}

int aa_rt_policy_update(aa_runtime *rt, const char *json, size_t len, bool patch,
                        const char *source, uint64_t if_match,
                        uint64_t *new_version, char *err, size_t errcap) {
  aa_http_policy_change c;
  char errbuf[512];

  if (err == NULL || errcap == 0) {
    err = errbuf;
    errcap = sizeof(errbuf);
  }
  err[0] = '\0';
  if (rt == NULL || json == NULL) {
    snprintf(err, errcap, rt == NULL ? "no runtime given" : "no policy document given");
    return AA_EINVAL;
  }
  aa__rt_ensure_started(rt);
  memset(&c, 0, sizeof(c));
  c.body = json;
  c.len = len;
  c.has_if_match = if_match > 0;
  c.if_match = if_match;
  c.source = source != NULL && source[0] != '\0' ? source : "api";
  c.client = "in-process";
  /* A /stats answer the server cached may show the old policy version for
   * up to its cache time (100 ms). */
  return aa__rt_prov_policy_change(rt, &c, patch, new_version, err, errcap);
}

int aa_runtime_policy_update(const char *json, size_t len, bool patch,
                             const char *source, uint64_t if_match,
                             uint64_t *new_version, char *err, size_t errcap) {
  return aa_rt_policy_update(aa__rt_default(), json, len, patch, source, if_match,
                             new_version, err, errcap);
}
