/*
 * tcache.c — the thread registry and the thread caches (tcaches): pool
 * slots, one tcache per (thread, pool) found through an initial-exec TLS
 * array, made, kept in line with the pool's epoch, flushed and retired when
 * its thread exits or its pool is destroyed. Each part of a cache is its
 * subsystem's (the small path's bins, small.h; the large path's cache,
 * large.h; the sampler's tables, sampler.h): this file only calls them.
 * Main entry points: aa__tcache_get, aa__tcache_sync, aa__tcache_flush_all.
 */
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core_internal.h"

/* ------------------------------------------------------------ registry */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static bool g_key_ok;
static aa_pool *g_slots[AA__MAX_POOL_SLOTS];
static _Atomic uint64_t g_pool_ids;

/* This thread's cache of each pool slot (the last entry stays NULL: pools
 * without a slot). A cache whose pool was destroyed stays here, marked dead,
 * until this thread replaces or frees it. */
_Thread_local aa__tcache *aa__tl_tc[AA__MAX_POOL_SLOTS + 1]
    __attribute__((tls_model("initial-exec")));
static _Thread_local bool tl_keyed __attribute__((tls_model("initial-exec")));
static _Thread_local uint64_t tl_tid __attribute__((tls_model("initial-exec")));

static void thread_exit(void *arg);

static void once_init(void) { g_key_ok = pthread_key_create(&g_key, thread_exit) == 0; }

uint64_t aa__thread_id(void) {
  if (AA__UNLIKELY(tl_tid == 0))
    tl_tid = (uint64_t)syscall(SYS_gettid);
  return tl_tid;
}

void aa__slot_acquire(aa_pool *pool) {
  pthread_once(&g_once, once_init);
  pool->slot = -1;
  pool->slot_ix = AA__MAX_POOL_SLOTS;
  pool->id = atomic_fetch_add(&g_pool_ids, 1) + 1;
  if (!g_key_ok)
    return;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < AA__MAX_POOL_SLOTS; i++) {
    if (g_slots[i] == NULL) {
      g_slots[i] = pool;
      pool->slot = i;
      pool->slot_ix = i;
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
}

/* ------------------------------------------------------------ tcaches */

void aa__tcache_sync(aa__tcache *tc) {
  aa_pool *pool = tc->pool;
  uint32_t ep = atomic_load_explicit(&pool->epoch, memory_order_acquire);
  aa__stc_sync(pool, tc);
  tc->epoch = ep;
}

void aa__tcache_flush_all(aa__tcache *tc) {
  aa__ltc_flush(tc->pool, tc);
  aa__stc_flush(tc->pool, tc);
}

/* Folds a tcache's counters into the pool's dead-thread totals, unlinks and
 * frees it. Caller holds g_mu (or is destroying the pool); bins are empty. */
static void tcache_retire(aa__tcache *tc, bool flush) {
  aa_pool *pool = tc->pool;
  if (flush)
    aa__tcache_flush_all(tc);
  pthread_mutex_lock(&pool->tc_mu);
  aa__smp_fold_dead(pool, tc);
  aa__stc_fold_dead(pool, tc);
  aa__ltc_fold_dead(pool, tc);
  if (tc->prev)
    tc->prev->next = tc->next;
  else
    pool->tcaches = tc->next;
  if (tc->next)
    tc->next->prev = tc->prev;
  pthread_mutex_unlock(&pool->tc_mu);
  if (flush) {
    free(tc); /* the owner is exiting */
  } else {
    /* pool destroy: the owner may still point at it (its bins are empty
     * and closed: aa__stc_fold_dead) */
    tc->epoch = 0;
    aa__ltc_forget_all(tc); /* the pool's destroy took every chunk back */
    tc->pool = NULL;
    atomic_store_explicit(&tc->dead, 1, AA__RLX);
  }
}

static void thread_exit(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < AA__MAX_POOL_SLOTS; i++) {
    aa__tcache *tc = aa__tl_tc[i];
    aa__tl_tc[i] = NULL;
    if (tc == NULL)
      continue;
    if (atomic_load_explicit(&tc->dead, AA__RLX))
      free(tc); /* its pool is gone */
    else
      tcache_retire(tc, true);
  }
  pthread_mutex_unlock(&g_mu);
  tl_keyed = false;
}

/* The calling thread's live cache of this pool, or NULL; never makes one. */
aa__tcache *aa__tcache_mine(aa_pool *pool) {
  if (pool->slot < 0)
    return NULL;
  aa__tcache *tc = aa__tl_tc[pool->slot];
  return tc && !atomic_load_explicit(&tc->dead, AA__RLX) ? tc : NULL;
}

aa__tcache *aa__tcache_get(aa_pool *pool) {
  if (pool->slot < 0)
    return NULL;
  aa__tcache *tc = aa__tl_tc[pool->slot];
  if (tc && !atomic_load_explicit(&tc->dead, AA__RLX))
    return tc;
  if (tc) {
    /* left over from a destroyed pool that had this slot */
    pthread_mutex_lock(&g_mu);
    aa__tl_tc[pool->slot] = NULL;
    free(tc);
    pthread_mutex_unlock(&g_mu);
  }
  if (!tl_keyed) {
    /* the key's value only makes the exit destructor run */
    if (pthread_setspecific(g_key, (void *)&tl_keyed) != 0)
      return NULL;
    tl_keyed = true;
  }
  tc = calloc(1, sizeof *tc);
  if (tc == NULL)
    return NULL;
  tc->pool = pool;
  tc->tid = aa__thread_id();
  tc->epoch = atomic_load_explicit(&pool->epoch, memory_order_acquire);
  aa__stc_init(pool, tc);
  aa__smp_init(tc);
  pthread_mutex_lock(&g_mu);
  pthread_mutex_lock(&pool->tc_mu);
  tc->next = pool->tcaches;
  if (pool->tcaches)
    pool->tcaches->prev = tc;
  pool->tcaches = tc;
  pthread_mutex_unlock(&pool->tc_mu);
  aa__tl_tc[pool->slot] = tc;
  pthread_mutex_unlock(&g_mu);
  return tc;
}

/* Pool destroy: empties every tcache of the pool and marks it dead; the
 * struct itself stays until its thread replaces or frees it (another
 * thread's TLS cannot be cleared from here). Epoch 0 never matches a pool,
 * so the fast paths never use a dead cache. No flush: the slabs are about to
 * go. */
void aa__pool_drop_tcaches(aa_pool *pool) {
  pthread_mutex_lock(&g_mu);
  while (pool->tcaches)
    tcache_retire(pool->tcaches, false);
  if (pool->slot >= 0)
    g_slots[pool->slot] = NULL;
  pthread_mutex_unlock(&g_mu);
}

/* Flushes the calling thread's cache of this pool (aa_pool_release). */
void aa__tcache_flush_mine(aa_pool *pool) {
  aa__tcache *tc = aa__tcache_mine(pool);
  if (tc)
    aa__tcache_flush_all(tc);
}
