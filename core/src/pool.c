/*
 * pool.c — pool life cycle over its subsystems (the config, its defaults
 * and the class ladder are config.c's; the small path is small.h's, the
 * large path large.h's, the size sampler sampler.h's).
 *
 * Entry points: aa_pool_new, aa_pool_destroy; aa_pool_release /
 * aa_pool_trim; the setters. Also the out-of-memory retry (aa__oom_retry:
 * release what the pool caches, then the caller tries once more), the one
 * for the small and the large path.
 */
#include <sched.h>
#include <string.h>

#include "core_internal.h"

/* ------------------------------------------------------------ life cycle */

int aa_pool_new(const aa_pool_config *cfg, aa_pool **out) {
  int rc = AA_EINVAL;
  aa_pool *pool = NULL;
  aa_pool_config c;
  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  if (cfg == NULL || cfg->version != AA_POOL_CONFIG_VERSION || cfg->backend == NULL ||
      cfg->backend->ops == NULL || cfg->backend->ops->alloc == NULL ||
      cfg->backend->ops->free == NULL)
    return AA_EINVAL;
  rc = aa__config_normalise(cfg, &c);
  if (rc != AA_OK)
    return rc;
  pool = calloc(1, sizeof *pool);
  if (pool == NULL)
    return AA_ENOMEM;
  pool->slot = -1; /* until aa__slot_acquire: a failed new holds no slot */
  pool->slot_ix = AA__MAX_POOL_SLOTS;
  snprintf(pool->name, sizeof pool->name, "%s", c.name ? c.name : "pool");
  c.name = pool->name;
  snprintf(pool->region, sizeof pool->region, "%s", c.region ? c.region : "");
  c.region = pool->region;
  pool->cfg = c;
  pool->backend = c.backend;
  pool->has_events = c.backend->ops->event_record != NULL && c.backend->ops->event_query != NULL;
  pthread_mutex_init(&pool->map_mu, NULL);
  pthread_mutex_init(&pool->tc_mu, NULL);
  pthread_mutex_init(&pool->set_mu, NULL);
  pthread_mutex_init(&pool->oom_mu, NULL);
  atomic_store(&pool->limit, c.limit_bytes);
  atomic_store(&pool->telemetry, c.telemetry);
  atomic_store(&pool->tflags, c.telemetry ? AA__TF_TELEMETRY : 0);
  atomic_store(&pool->epoch, 1);
  rc = AA_ENOMEM;
  if (aa__pm_init(&pool->map) != AA_OK)
    goto fail;
  /* the large path: an expandable mode without usable virtual memory falls
   * back to AA_LARGE_CACHE in pool->cfg */
  if (aa__large_new(pool) != AA_OK || aa__sampler_new(pool) != AA_OK)
    goto fail;
  rc = aa__small_new(pool); /* the default class table (AA_EINVAL: too many classes) */
  if (rc != AA_OK)
    goto fail;
  aa__slot_acquire(pool);
  *out = pool;
  return AA_OK;
fail:
  aa_pool_destroy(pool);
  return rc;
}

void aa_pool_destroy(aa_pool *pool) {
  if (pool == NULL)
    return;
  aa__pool_drop_tcaches(pool);
  aa__large_destroy(pool);
  aa__small_destroy(pool);
  aa__sampler_destroy(pool);
  aa__pm_fini(&pool->map);
  aa__trace_cb *t = pool->trace_all;
  while (t) {
    aa__trace_cb *o = t->older;
    free(t);
    t = o;
  }
  aa__tsample_free(pool);
  pthread_mutex_destroy(&pool->map_mu);
  pthread_mutex_destroy(&pool->tc_mu);
  pthread_mutex_destroy(&pool->set_mu);
  pthread_mutex_destroy(&pool->oom_mu);
  free(pool);
}

/* ------------------------------------------------------------ release */

bool aa__oom_retry(aa_pool *pool, bool *retried) {
  if (*retried)
    return false;
  *retried = true;
  atomic_fetch_add_explicit(&pool->oom_retries, 1, AA__RLX);
  aa__release_cached(pool, true);
  /* a sharer (aa_pool_share_limit): the owner's cache counts against the
   * same limit, and PyTorch's retry frees the device pool's cache for a
   * MemPool's request too (the backend was synchronized just now) */
  if (pool->limit_owner != NULL)
    aa__release_cached(pool->limit_owner, false);
  return true;
}

size_t aa__release_cached(aa_pool *pool, bool sync) {
  size_t r = 0;
  aa_backend *b = pool->backend;
  /* other threads give back the large blocks they hold at their next call */
  atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_release);
  if (sync && b->ops->synchronize)
    b->ops->synchronize(b);
  aa__tcache_flush_mine(pool);
  r += aa__small_release(pool, SIZE_MAX, false);
  r += aa__large_release(pool, SIZE_MAX, !sync); /* aa_pool_release: not an OOM retry */
  return r;
}

size_t aa_pool_release(aa_pool *pool) {
  if (pool == NULL)
    return 0;
  return aa__release_cached(pool, false);
}

void aa_pool_window_reset(aa_pool *pool) {
  if (pool == NULL)
    return;
  atomic_store(&pool->win_peak_out_bytes, atomic_load(&pool->out_bytes));
}

size_t aa_pool_trim(aa_pool *pool, size_t keep_bytes) {
  if (pool == NULL)
    return 0;
  size_t r = 0;
  atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_release);
  aa__tcache_flush_mine(pool); /* what this thread holds counts as in use until then */
  uint64_t in_use = aa__small_in_use(pool) + aa__large_in_use(pool);
  uint64_t reserved = atomic_load(&pool->bytes_reserved);
  if (reserved <= in_use + keep_bytes)
    return 0;
  size_t excess = (size_t)(reserved - in_use - keep_bytes);
  r += aa__large_release(pool, excess, false);
  if (r < excess)
    r += aa__small_release(pool, excess - r, true);
  return r;
}

/* ------------------------------------------------------------ setters */

/* Recomputes the hot-path flags. Under set_mu. */
static void update_tflags(aa_pool *pool) {
  uint32_t f = atomic_load(&pool->telemetry) ? AA__TF_TELEMETRY : 0;
  if (atomic_load(&pool->trace) != NULL)
    f |= AA__TF_TRACE;
  atomic_store_explicit(&pool->tflags, f, memory_order_release);
}

void aa_pool_set_telemetry(aa_pool *pool, bool on) {
  if (pool == NULL)
    return;
  pthread_mutex_lock(&pool->set_mu);
  atomic_store_explicit(&pool->telemetry, on, AA__RLX);
  update_tflags(pool);
  pthread_mutex_unlock(&pool->set_mu);
}

void aa_pool_set_trace(aa_pool *pool, aa_trace_fn fn, void *user) {
  if (pool == NULL)
    return;
  /* Records are never freed before the pool (a racing allocator may hold
   * one); an identical (fn, user) pair reuses its record, so the chain stays
   * as long as the number of distinct callbacks ever set. */
  pthread_mutex_lock(&pool->set_mu);
  aa__trace_cb *t = NULL;
  if (fn != NULL) {
    for (t = pool->trace_all; t; t = t->older) {
      if (t->fn == fn && t->user == user)
        break;
    }
    if (t == NULL) {
      t = calloc(1, sizeof *t);
      if (t) {
        t->fn = fn;
        t->user = user;
        t->older = pool->trace_all;
        pool->trace_all = t;
      }
    }
  }
  aa__trace_cb *old = atomic_exchange_explicit(&pool->trace, t, memory_order_seq_cst);
  update_tflags(pool);
  pthread_mutex_unlock(&pool->set_mu);
  /* Callbacks already under way through the old record finish before the
   * caller may free what the old record's user points to. */
  if (old != NULL && old != t) {
    while (atomic_load_explicit(&old->inflight, memory_order_seq_cst) != 0)
      sched_yield();
  }
}

/* Sampling's table and rule change only while no callback is set (none
 * under way: set_trace waited for them); one change at a time. */
static pthread_mutex_t g_sample_mu = PTHREAD_MUTEX_INITIALIZER;

int aa_pool_set_trace_sampled(aa_pool *pool, aa_trace_fn fn, void *user, uint32_t every,
                              uint64_t min_bytes) {
  if (pool == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(&g_sample_mu);
  aa_pool_set_trace(pool, NULL, NULL);
  int rc = aa__tsample_configure(pool, every, min_bytes);
  /* on failure the rule in force stays, and so does tracing off */
  if (rc == AA_OK && fn != NULL)
    aa_pool_set_trace(pool, fn, user);
  pthread_mutex_unlock(&g_sample_mu);
  return rc;
}

void aa_pool_set_limit(aa_pool *pool, size_t limit_bytes) {
  if (pool)
    atomic_store(&pool->limit, limit_bytes);
}

int aa_pool_share_limit(aa_pool *pool, aa_pool *owner) {
  /* one level: an owner shares no other pool's limit, a sharer owns none;
   * and from the first reservation on, so that every byte counted on the
   * owner is one the sharer will give back through it */
  if (pool == NULL || owner == NULL || pool == owner || pool->limit_owner != NULL ||
      atomic_load(&pool->sharers) != 0 || owner->limit_owner != NULL ||
      atomic_load(&pool->bytes_reserved) != 0)
    return AA_EINVAL;
  atomic_fetch_add(&owner->sharers, 1);
  pool->limit_owner = owner;
  return AA_OK;
}

uint64_t aa_pool_sharers_reserved(aa_pool *pool) {
  return pool != NULL ? atomic_load(&pool->sharers_reserved) : 0;
}

aa_pool *aa_pool_limit_owner(aa_pool *pool) { return pool != NULL ? pool->limit_owner : NULL; }

void aa_pool_set_map_runs(aa_pool *pool, bool on) {
  if (pool != NULL)
    aa__large_set_map_runs(pool, on);
}

/* Stream-ordered reuse asked for (`on`); used only where possible: the
 * backend records events and offers stream_wait. */
void aa_pool_set_stream_wait(aa_pool *pool, bool on) {
  if (pool != NULL)
    aa__large_set_stream_wait(pool, on);
}

void aa_pool_set_clock(aa_pool *pool, uint64_t (*now)(void *user), void *user) {
  if (pool != NULL)
    aa__large_set_clock(pool, now, user);
}

const char *aa_pool_name(const aa_pool *pool) { return pool ? pool->name : ""; }

const char *aa_pool_region(const aa_pool *pool) { return pool ? pool->region : ""; }

aa_backend *aa_pool_backend(const aa_pool *pool) { return pool ? pool->backend : NULL; }
