/*
 * tcache.c — the thread registry and the thread caches (tcaches): pool
 * slots, one tcache per (thread, pool) found through an initial-exec TLS
 * array, bins kept in line with their class slots, flushing to the central
 * lists, retiring a cache when its thread exits or its pool is destroyed.
 * Main entry points: aa__tcache_get, aa__tcache_sync, aa__bin_sync.
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

static uint32_t bin_limit(aa_pool *pool, aa__class *c) {
  if (atomic_load_explicit(&c->state, AA__RLX) != AA__CLS_ACTIVE)
    return 0;
  uint32_t lim = atomic_load_explicit(&c->cache_limit, AA__RLX);
  if (lim == 0)
    lim = pool->cfg.tcache_blocks;
  size_t bs = atomic_load_explicit(&c->block_size, AA__RLX);
  size_t by = pool->cfg.tcache_bytes / bs;
  if (by < lim)
    lim = (uint32_t)by;
  return lim;
}

/* Returns the bin's blocks [0, n) to the central lists. Under c->mu. */
void aa__bin_flush_n(aa_pool *pool, aa__tcache *tc, aa__bin *bin, aa__class *c, uint32_t n) {
  if (n == 0)
    return;
  aa__blk tmp[64];
  for (uint32_t done = 0; done < n;) {
    uint32_t k = n - done < 64 ? n - done : 64;
    for (uint32_t i = 0; i < k; i++)
      tmp[i] = aa__item_blk(pool, bin->items[done + i]);
    aa__central_push(pool, c, tmp, k, bin->stream);
    done += k;
  }
  memmove(bin->items, bin->items + n, (size_t)(bin->n - n) * sizeof *bin->items);
  bin->n -= n;
  tc->cached_bytes -= (size_t)n * bin->bsize;
}

/* Brings a bin in line with its class slot. Under c->mu. */
void aa__bin_sync(aa_pool *pool, aa__tcache *tc, aa__bin *bin, aa__class *c) {
  uint32_t gen = atomic_load_explicit(&c->gen, memory_order_acquire);
  if (bin->gen == gen)
    return;
  aa__bin_flush_n(pool, tc, bin, c, bin->n);
  uint32_t lim = bin_limit(pool, c);
  if (lim > bin->cap) {
    aa__bitem *v = realloc(bin->items, (size_t)lim * sizeof *v);
    if (v == NULL) {
      lim = bin->cap;
    } else {
      bin->items = v;
      bin->cap = lim;
    }
  }
  bin->lim = lim;
  bin->bsize = atomic_load_explicit(&c->block_size, AA__RLX);
  bin->gen = gen;
}

void aa__tcache_sync(aa__tcache *tc) {
  aa_pool *pool = tc->pool;
  uint32_t ep = atomic_load_explicit(&pool->epoch, memory_order_acquire);
  tc->sc_base = 0;
  tc->sc_size = 0;
  tc->sc_slab = NULL;
  tc->sc_bin = NULL;
  for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
    aa__bin *bin = &tc->bins[k];
    aa__class *c = &pool->classes[k];
    if (bin->gen == atomic_load_explicit(&c->gen, memory_order_acquire))
      continue;
    if (bin->n > 0) {
      pthread_mutex_lock(&c->mu);
      aa__bin_sync(pool, tc, bin, c);
      pthread_mutex_unlock(&c->mu);
    } else {
      /* empty: the fast paths check no gen, so close the bin (a free then
       * takes the slow path, whose aa__bin_sync reopens it) */
      bin->lim = 0;
    }
  }
  tc->epoch = ep;
}

void aa__tcache_flush_all(aa__tcache *tc) {
  aa_pool *pool = tc->pool;
  aa__ltc_flush(pool, tc);
  for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
    aa__bin *bin = &tc->bins[k];
    if (bin->n == 0)
      continue;
    aa__class *c = &pool->classes[k];
    pthread_mutex_lock(&c->mu);
    aa__bin_flush_n(pool, tc, bin, c, bin->n);
    pthread_mutex_unlock(&c->mu);
  }
}

/* Folds a tcache's counters into the pool's dead-thread totals, unlinks and
 * frees it. Caller holds g_mu (or is destroying the pool); bins are empty. */
static void tcache_retire(aa__tcache *tc, bool flush) {
  aa_pool *pool = tc->pool;
  if (flush)
    aa__tcache_flush_all(tc);
  pthread_mutex_lock(&pool->tc_mu);
  aa__fold_sz(pool, tc);
  for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
    aa__bin *b = &tc->bins[k];
    aa__ccount *d = &pool->dead[k];
    aa__cadd(&d->frees, aa__cget(&b->frees));
    aa__cadd(&d->hits, aa__cget(&b->hits));
    aa__cadd(&d->misses, aa__cget(&b->misses));
    aa__cadd(&d->req_add, aa__cget(&b->req_add));
    aa__cadd(&d->req_sub, aa__cget(&b->req_sub));
    free(b->items);
  }
  for (uint32_t i = 0; i < AA_HIST_BUCKETS; i++)
    aa__cadd(&pool->dead_hist[i], aa__cget(&tc->hist[i]));
  aa__ltc_fold_dead(pool, tc);
  aa__fold_hh(pool, tc->hh, AA__HH_SLOTS);
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
    /* pool destroy: the owner may still point at it */
    for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
      tc->bins[k].items = NULL;
      tc->bins[k].n = tc->bins[k].lim = tc->bins[k].cap = 0;
    }
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
  tc->max_bytes = pool->cfg.tcache_bytes;
  tc->hh_countdown = AA__HH_SAMPLE;
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
  while (pool->tcaches) {
    aa__tcache *tc = pool->tcaches;
    for (uint32_t k = 0; k < AA_MAX_CLASSES; k++)
      tc->bins[k].n = 0;
    tcache_retire(tc, false);
  }
  if (pool->slot >= 0)
    g_slots[pool->slot] = NULL;
  pthread_mutex_unlock(&g_mu);
}

/* The thread cache is over its byte budget: return blocks of every bin,
 * round robin, half of each bin, until half the budget is free. One lock per
 * class touched, many blocks per lock, instead of one lock per free. */
void aa__tcache_make_room(aa_pool *pool, aa__tcache *tc) {
  size_t target = tc->max_bytes / 2;
  for (uint32_t step = 0; step < AA_MAX_CLASSES && tc->cached_bytes > target; step++) {
    uint32_t k = (tc->sweep + step) % AA_MAX_CLASSES;
    aa__bin *bin = &tc->bins[k];
    if (bin->n == 0)
      continue;
    aa__class *c = &pool->classes[k];
    pthread_mutex_lock(&c->mu);
    aa__bin_flush_n(pool, tc, bin, c, (bin->n + 1) / 2);
    pthread_mutex_unlock(&c->mu);
  }
  tc->sweep = (tc->sweep + 7) % AA_MAX_CLASSES;
}

/* Flushes the calling thread's cache of this pool (aa_pool_release). */
void aa__tcache_flush_mine(aa_pool *pool) {
  aa__tcache *tc = aa__tcache_mine(pool);
  if (tc)
    aa__tcache_flush_all(tc);
}
