/*
 * runtime.c — the process-wide runtime: configuration from the environment,
 * the pools (one per CUDA device, one pinned, one host) and the regions'
 * pools created on first use, and the start/stop of the optional services
 * (runtime_services.c).
 *
 * Entry points: aa_runtime_init, aa_runtime_pool, aa_runtime_region_id,
 * aa_runtime_region_pool, aa_runtime_shutdown; rt_at_exit ends the store's
 * run of a process that exits without aa_runtime_shutdown.
 * The hot path is aa_runtime_pool(): one acquire load once the pool exists.
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

aa__runtime aa__rt;

static pthread_once_t rt_once = PTHREAD_ONCE_INIT;
/* Lock order: rt_lock (pool creation, init, shutdown) -> the services'
 * policy lock -> pools_lock (a leaf: held only to copy the pool list). */
static pthread_mutex_t rt_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static const aa_runtime_config *rt_pending_cfg;

void aa_runtime_config_init(aa_runtime_config *cfg) {
  memset(cfg, 0, sizeof(*cfg));
  cfg->version = AA_RUNTIME_CONFIG_VERSION;
  cfg->trace = -1;
}

void aa__rt_log(const char *fmt, ...) {
  va_list ap;
  char line[AA__LOG_LINE_MAX];
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  aa__log_line(line); /* every value it quotes escaped: one line, always */
}

static const char *pick(const char *explicit_value, const char *env_name,
                        const char *fallback) {
  const char *v = explicit_value;
  if (v == NULL || v[0] == '\0')
    v = getenv(env_name);
  if (v == NULL || v[0] == '\0')
    v = fallback;
  return v;
}

/* Copies the setting `name` into dst. A value that does not fit is never
 * cut short (a truncated token would be accepted by prefix, a truncated
 * path names a file the user never gave): dst stays empty, *refused is set
 * and one line names the setting, its length and the limit. */
static void copy_setting(char *dst, size_t cap, const char *src,
                         const char *name, bool *refused) {
  size_t n = src != NULL ? strlen(src) : 0;
  *refused = false;
  dst[0] = '\0';
  if (n >= cap) {
    *refused = true;
    aa__rt_log("%s is %zu bytes, over the limit of %zu bytes: refused", name,
               n, cap - 1);
    return;
  }
  if (n > 0)
    memcpy(dst, src, n + 1);
}

bool aa__rt_is_off(const char *v) { return v != NULL && strcasecmp(v, "off") == 0; }

int aa__rt_token_check(const char *token, char *why, size_t cap) {
  for (size_t i = 0; token[i] != '\0'; i++) {
    unsigned char c = (unsigned char)token[i];
    if (c > 0x20 && c < 0x7F)
      continue;
    snprintf(why, cap,
             "byte %zu of %zu is 0x%02x%s; a token is printable ASCII without "
             "spaces (0x21 to 0x7e), the bytes a client can send after "
             "\"Bearer \"",
             i + 1, strlen(token), c,
             c == '\n' && token[i + 1] == '\0' ? " (a trailing newline)"
             : c == '\r' || c == '\n'          ? " (a line break)"
             : c == ' '                        ? " (a space)"
             : c < 0x20 || c == 0x7F           ? " (a control byte)"
                                               : " (not ASCII)");
    return AA_EINVAL;
  }
  return AA_OK;
}

int aa__rt_model_check(const char *model, char *why, size_t cap) {
  size_t n = strlen(model);
  if (n == 0) {
    snprintf(why, cap, "it is empty");
    return AA_EINVAL;
  }
  if (model[0] == '.') {
    snprintf(why, cap, "it starts with a dot (\".\", \"..\" and hidden names "
                       "are not model names)");
    return AA_EINVAL;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)model[i];
    if (c == '/' || c == '\\') {
      snprintf(why, cap, "byte %zu is '%c' (a model name is a plain name: "
                         "no directory part)",
               i + 1, c);
      return AA_EINVAL;
    }
    if (c < 0x20 || c == 0x7F) {
      snprintf(why, cap, "byte %zu is the control byte 0x%02x", i + 1, c);
      return AA_EINVAL;
    }
  }
  return AA_OK;
}

#ifndef AA_INSTALLED_POLICY_DIR
#define AA_INSTALLED_POLICY_DIR ""
#endif

static bool is_dir(const char *path) {
  struct stat st;
  return path[0] != '\0' && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

const char *aa__rt_default_policy_dir(const char *local, const char *installed) {
  if (is_dir(local) || installed == NULL || !is_dir(installed))
    return local;
  return installed;
}

static void rt_read_config(const aa_runtime_config *cfg) {
  aa_runtime_config empty;
  char why[256];
  bool refused;
  if (cfg == NULL) {
    aa_runtime_config_init(&empty);
    cfg = &empty;
  }
  copy_setting(aa__rt.model, sizeof(aa__rt.model),
               pick(cfg->model, "ADAPTALLOC_MODEL", "default"),
               "ADAPTALLOC_MODEL", &refused);
  if (!refused && aa__rt_model_check(aa__rt.model, why, sizeof(why)) != AA_OK) {
    /* the name is not echoed whole here: the log line escapes it anyway,
     * but a name that is a path is not worth repeating */
    aa__rt_log("ADAPTALLOC_MODEL is not a plain name: %s; a model name has "
               "no '/' or '\\', does not start with a dot and holds no control "
               "byte: refused, the model is \"default\"",
               why);
    refused = true;
  }
  if (refused)
    snprintf(aa__rt.model, sizeof(aa__rt.model), "default");
  copy_setting(aa__rt.policy_path, sizeof(aa__rt.policy_path),
               pick(cfg->policy_path, "ADAPTALLOC_POLICY", ""),
               "ADAPTALLOC_POLICY", &aa__rt.policy_refused);
  copy_setting(aa__rt.policy_dir, sizeof(aa__rt.policy_dir),
               pick(cfg->policy_dir, "ADAPTALLOC_POLICY_DIR",
                    aa__rt_default_policy_dir("./policies",
                                              AA_INSTALLED_POLICY_DIR)),
               "ADAPTALLOC_POLICY_DIR", &refused);
  aa__rt.policy_refused = aa__rt.policy_refused || refused;
  copy_setting(aa__rt.db, sizeof(aa__rt.db),
               pick(cfg->db, "ADAPTALLOC_DB", "./adaptalloc.db"),
               "ADAPTALLOC_DB", &aa__rt.db_refused);
  copy_setting(aa__rt.http, sizeof(aa__rt.http),
               pick(cfg->http, "ADAPTALLOC_HTTP", "127.0.0.1:9100"),
               "ADAPTALLOC_HTTP", &aa__rt.http_refused);
  copy_setting(aa__rt.token, sizeof(aa__rt.token),
               pick(cfg->token, "ADAPTALLOC_TOKEN", ""), "ADAPTALLOC_TOKEN",
               &refused);
  /* a token that cannot be held whole keeps the server off: serving with a
   * shorter one (or none) would accept what the operator never set */
  aa__rt.http_refused = aa__rt.http_refused || refused;
  /* a token no client can send (a trailing newline from `$(cat file)`, a
   * control byte) keeps it off too: served, it would make the policy
   * unchangeable while telemetry stayed open, and serving without it would
   * open the policy to every client. The token itself is never logged. */
  if (!refused && aa__rt_token_check(aa__rt.token, why, sizeof(why)) != AA_OK) {
    aa__rt_log("ADAPTALLOC_TOKEN is refused: %s; the server stays off", why);
    explicit_bzero(aa__rt.token, sizeof(aa__rt.token));
    aa__rt.http_refused = true;
  }
  if (cfg->trace >= 0) {
    aa__rt.trace = cfg->trace != 0;
  } else {
    const char *t = getenv("ADAPTALLOC_TRACE");
    aa__rt.trace = t != NULL && strcmp(t, "1") == 0;
    if (t != NULL && t[0] != '\0' && !aa__rt.trace && strcmp(t, "0") != 0 &&
        !aa__rt_is_off(t))
      aa__rt_log("ADAPTALLOC_TRACE is \"%s\": expected 1 (on), or 0 or off; "
                 "tracing stays off",
                 t);
  }
  aa__rt.quiet = cfg->quiet;
  if (getenv("ADAPTALLOC_QUIET") != NULL)
    aa__rt.quiet = true;
}

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
  (void)arg;
  aa__rt_services_end_run(AA__RT_EXIT_FLUSH_MAX_MS, rt_exit_detached);
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
  struct timespec until;
  pthread_t helper;

  if (!atomic_exchange(&rt_exit_armed, false) || getpid() != rt_exit_pid)
    return;
  /* rt_lock keeps a shutdown from another thread out while the run ends;
   * never wait long for it (a thread may hold it creating a pool). */
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 1;
  if (pthread_mutex_timedlock(&rt_lock, &until) != 0) {
    aa__rt_log("store: run %lld was not ended at exit: the runtime was busy "
               "for over a second; its last trace events and snapshots are lost",
               (long long)aa_runtime_run_id());
    return;
  }
  if (aa__rt.shut_down) {
    pthread_mutex_unlock(&rt_lock);
    return;
  }
  if (pthread_create(&helper, NULL, rt_exit_main, NULL) != 0) {
    aa__rt_services_end_run(AA__RT_EXIT_FLUSH_MAX_MS, NULL); /* here, then */
    pthread_mutex_unlock(&rt_lock);
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
  pthread_mutex_unlock(&rt_lock);
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
  rt_read_config(rt_pending_cfg);
  aa__rt.started_ns = aa_now_ns();
  aa__rt_services_start();
  rt_arm_exit();
  atomic_store_explicit(&aa__rt.ready, 1, memory_order_release);
}

int aa_runtime_init(const aa_runtime_config *cfg) {
  if (cfg != NULL && cfg->version != AA_RUNTIME_CONFIG_VERSION)
    return AA_EINVAL;
  pthread_mutex_lock(&rt_lock);
  rt_pending_cfg = cfg;
  pthread_once(&rt_once, rt_init_once);
  rt_pending_cfg = NULL;
  pthread_mutex_unlock(&rt_lock);
  return AA_OK;
}

bool aa_runtime_started(void) {
  /* No lock: a shutdown may follow the answer either way (the callers
   * document that race); this is asked on every pinned tensor's free. */
  if (!atomic_load_explicit(&aa__rt.ready, memory_order_acquire))
    return false;
  return !atomic_load_explicit(&aa__rt.shut_down, memory_order_acquire);
}

static _Atomic(aa_pool *) *pool_slot(aa_backend_kind kind, int device) {
  switch (kind) {
  case AA_BACKEND_DEVICE:
    if (device < 0 || device >= AA_MAX_DEVICES)
      return NULL;
    return &aa__rt.device_pools[device];
  case AA_BACKEND_PINNED:
    return &aa__rt.pinned_pool;
  case AA_BACKEND_HOST:
    return &aa__rt.host_pool;
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
static _Atomic(aa_pool *) rt_managed_pools[AA_MAX_DEVICES];
static bool rt_managed_failed_logged;

static int rt_make_managed(aa_backend_kind kind, int device, const char *region,
                           bool force, aa_backend **backend) {
  aa_managed_config mc;
  bool managed = false;
  int rc;

  *backend = NULL;
  if (kind != AA_BACKEND_DEVICE)
    return AA_OK;
  if (aa__rt_pool_backend(region, &managed, &mc) != AA_OK)
    managed = false; /* logged by aa__rt_pool_config; mc has the defaults */
  if (!managed && !force)
    return AA_OK;
  mc.device = device;
  rc = aa_backend_managed_new(&mc, backend);
  if (rc != AA_OK && !rt_managed_failed_logged) {
    rt_managed_failed_logged = true;
    aa__rt_log("cannot create a managed-memory backend (device %d%s%s): %s", device,
               region != NULL ? ", region " : "", region != NULL ? region : "",
               aa_strerror(rc));
  }
  return rc;
}

/* Creates the pool for (kind, device) over `shared` (a backend of another
 * pool: a region's pool uses its backend pool's), or over a new backend when
 * shared is NULL or the policy makes it managed (force_managed: always).
 * region: NULL, or the region the pool serves. Called with rt_lock held. */
static aa_pool *rt_create_pool(aa_backend_kind kind, int device, aa_backend *shared,
                               const char *region, bool force_managed) {
  aa_backend *backend = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  char name[32];
  int rc;

  rc = rt_make_managed(kind, device, region, force_managed, &backend);
  if (rc != AA_OK)
    return NULL;
  if (backend != NULL) {
    shared = NULL; /* the new managed backend serves this pool */
  } else if (shared == NULL) {
    if (aa__rt.failed[kind][device < 0 ? 0 : device])
      return NULL; /* tried before and it cannot be had; do not retry per call */
    rc = rt_make_backend(kind, device, &backend);
    if (rc != AA_OK) {
      aa__rt.failed[kind][device < 0 ? 0 : device] = true;
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
  rc = aa__rt_pool_config(aa_policy_kind_name(kind), region, &cfg);
  if (rc != AA_OK)
    goto done;
  rc = aa_pool_new(&cfg, &pool);
  if (rc != AA_OK) {
    aa__rt_log("cannot create pool %s: %s", name, aa_strerror(rc));
    goto done;
  }
  aa__rt_pool_created(pool);
  if (backend != NULL)
    aa__rt.backends[aa__rt.nbackends++] = backend;
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
  return aa__rt_pool_config(aa_policy_kind_name(kind), NULL, cfg);
}

aa_pool *aa_runtime_pool(aa_backend_kind kind, int device) {
  _Atomic(aa_pool *) *slot = pool_slot(kind, device);
  aa_pool *pool;

  if (slot == NULL)
    return NULL;
  pool = atomic_load_explicit(slot, memory_order_acquire);
  if (pool != NULL)
    return pool;
  if (!atomic_load_explicit(&aa__rt.ready, memory_order_acquire))
    aa_runtime_init(NULL);
  pthread_mutex_lock(&rt_lock);
  pool = atomic_load_explicit(slot, memory_order_relaxed);
  if (pool == NULL && !aa__rt.shut_down) {
    pool = rt_create_pool(kind, device, NULL, NULL, false);
    if (pool != NULL) {
      pthread_mutex_lock(&pools_lock);
      aa__rt.pools[aa__rt.npools++] = pool;
      pthread_mutex_unlock(&pools_lock);
      atomic_store_explicit(slot, pool, memory_order_release);
    }
  }
  pthread_mutex_unlock(&rt_lock);
  return pool;
}

aa_pool *aa_runtime_managed_pool(int device) {
  _Atomic(aa_pool *) *slot;
  aa_pool *pool;

  if (device < 0 || device >= AA_MAX_DEVICES)
    return NULL;
  slot = &rt_managed_pools[device];
  pool = atomic_load_explicit(slot, memory_order_acquire);
  if (pool != NULL)
    return pool;
  if (!atomic_load_explicit(&aa__rt.ready, memory_order_acquire))
    aa_runtime_init(NULL);
  pthread_mutex_lock(&rt_lock);
  pool = atomic_load_explicit(slot, memory_order_relaxed);
  if (pool == NULL && !aa__rt.shut_down) {
    pool = rt_create_pool(AA_BACKEND_DEVICE, device, NULL, NULL, true);
    if (pool != NULL) {
      pthread_mutex_lock(&pools_lock);
      aa__rt.pools[aa__rt.npools++] = pool;
      pthread_mutex_unlock(&pools_lock);
      atomic_store_explicit(slot, pool, memory_order_release);
    }
  }
  pthread_mutex_unlock(&rt_lock);
  return pool;
}

/* ------------------------------------------------------------------ regions */

int aa_runtime_region_id(const char *name, int *id, char *err, size_t errcap) {
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
  pthread_mutex_lock(&rt_lock);
  n = atomic_load_explicit(&aa__rt.nregions, memory_order_relaxed);
  for (int i = 0; i < n; i++) {
    if (strcmp(aa__rt.regions[i].name, name) == 0) {
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
  snprintf(aa__rt.regions[n].name, sizeof(aa__rt.regions[n].name), "%s", name);
  atomic_store_explicit(&aa__rt.nregions, n + 1, memory_order_release);
  *id = n;
unlock:
  pthread_mutex_unlock(&rt_lock);
  return rc;
}

const char *aa_runtime_region_name(int id) {
  if (id < 0 || id >= atomic_load_explicit(&aa__rt.nregions, memory_order_acquire))
    return NULL;
  return aa__rt.regions[id].name;
}

aa_pool *aa_runtime_region_pool(int id, aa_backend_kind kind, int device) {
  _Atomic(aa_pool *) *slot;
  aa__rt_region *r;
  aa_pool *pool, *base;

  if (aa_runtime_region_name(id) == NULL)
    return NULL;
  r = &aa__rt.regions[id];
  if (kind == AA_BACKEND_DEVICE && device >= 0 && device < AA_MAX_DEVICES)
    slot = &r->device[device];
  else if (kind == AA_BACKEND_HOST)
    slot = &r->host;
  else
    return NULL;
  pool = atomic_load_explicit(slot, memory_order_acquire);
  if (pool != NULL)
    return pool;
  /* the backend's own pool first (it takes rt_lock itself): the region's
   * pool shares its backend */
  base = aa_runtime_pool(kind, device);
  if (base == NULL)
    return NULL;
  pthread_mutex_lock(&rt_lock);
  pool = atomic_load_explicit(slot, memory_order_relaxed);
  if (pool == NULL && !aa__rt.shut_down) {
    if (aa__rt.nregion_pools >= AA_RUNTIME_MAX_REGION_POOLS) {
      if (!aa__rt.region_pools_full_logged)
        aa__rt_log("region %s: %d region pools exist, the most there can be; "
                   "its allocations fail",
                   r->name, AA_RUNTIME_MAX_REGION_POOLS);
      aa__rt.region_pools_full_logged = true;
    } else {
      pool = rt_create_pool(kind, device, aa_pool_backend(base), r->name, false);
    }
    if (pool != NULL) {
      aa__rt.nregion_pools++;
      pthread_mutex_lock(&pools_lock);
      aa__rt.pools[aa__rt.npools++] = pool;
      pthread_mutex_unlock(&pools_lock);
      atomic_store_explicit(slot, pool, memory_order_release);
    }
  }
  pthread_mutex_unlock(&rt_lock);
  return pool;
}

size_t aa__rt_pools_snapshot(aa_pool **out, size_t cap) {
  size_t n;
  pthread_mutex_lock(&pools_lock);
  n = aa__rt.npools < cap ? aa__rt.npools : cap;
  memcpy(out, aa__rt.pools, n * sizeof(*out));
  pthread_mutex_unlock(&pools_lock);
  return n;
}

void aa_runtime_shutdown(void) {
  size_t i;
  if (!atomic_load_explicit(&aa__rt.ready, memory_order_acquire))
    return;
  pthread_mutex_lock(&rt_lock);
  if (aa__rt.shut_down || atomic_load(&rt_exit_abandoned)) {
    pthread_mutex_unlock(&rt_lock);
    return;
  }
  aa__rt.shut_down = true;
  pthread_mutex_unlock(&rt_lock);

  aa__rt_services_stop(); /* server, loop, snapshots, store — before pools go */

  pthread_mutex_lock(&rt_lock);
  for (i = 0; i < AA_MAX_DEVICES; i++)
    atomic_store(&aa__rt.device_pools[i], NULL);
  atomic_store(&aa__rt.pinned_pool, NULL);
  atomic_store(&aa__rt.host_pool, NULL);
  for (i = 0; i < AA_MAX_DEVICES; i++)
    atomic_store(&rt_managed_pools[i], NULL);
  for (i = 0; i < AA_RUNTIME_MAX_REGIONS; i++) {
    for (size_t d = 0; d < AA_MAX_DEVICES; d++)
      atomic_store(&aa__rt.regions[i].device[d], NULL);
    atomic_store(&aa__rt.regions[i].host, NULL);
  }
  aa__rt.nregion_pools = 0;
  pthread_mutex_lock(&pools_lock);
  for (i = aa__rt.npools; i-- > 0;)
    aa_pool_destroy(aa__rt.pools[i]);
  aa__rt.npools = 0;
  pthread_mutex_unlock(&pools_lock);
  for (i = aa__rt.nbackends; i-- > 0;)
    aa_backend_destroy(aa__rt.backends[i]);
  aa__rt.nbackends = 0;
  pthread_mutex_unlock(&rt_lock);
}
