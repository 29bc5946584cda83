/*
 * small_tc.c — the small path's per-thread part (aa__stc, embedded in each
 * thread cache): one bin of free blocks per class slot, kept in line with
 * its class, flushed to the central lists, made room in when over the
 * thread's byte budget, folded into the small path's totals when the cache
 * goes. The registry of thread caches is tcache.c's.
 * Entry points: aa__stc_init, aa__stc_sync, aa__stc_flush, aa__stc_fold_dead;
 * aa__bin_sync and aa__bin_flush_n for alloc.c and free.c.
 */
#include <string.h>

#include "small_internal.h"

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
  tc->stc.cached_bytes -= (size_t)n * bin->bsize;
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

void aa__stc_init(aa_pool *pool, aa__tcache *tc) { tc->stc.max_bytes = pool->cfg.tcache_bytes; }

void aa__stc_sync(aa_pool *pool, aa__tcache *tc) {
  aa__stc *s = &tc->stc;
  s->sc_base = 0;
  s->sc_size = 0;
  s->sc_slab = NULL;
  s->sc_bin = NULL;
  for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
    aa__bin *bin = &s->bins[k];
    aa__class *c = &pool->small->classes[k];
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
}

void aa__stc_flush(aa_pool *pool, aa__tcache *tc) {
  for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
    aa__bin *bin = &tc->stc.bins[k];
    if (bin->n == 0)
      continue;
    aa__class *c = &pool->small->classes[k];
    pthread_mutex_lock(&c->mu);
    aa__bin_flush_n(pool, tc, bin, c, bin->n);
    pthread_mutex_unlock(&c->mu);
  }
}

/* Counters into the dead-thread totals; the bins' blocks are dropped (a
 * thread that exits flushed them first; a destroyed pool takes its slabs
 * back whole) and their arrays freed. tc_mu held. */
void aa__stc_fold_dead(aa_pool *pool, aa__tcache *tc) {
  for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
    aa__bin *b = &tc->stc.bins[k];
    aa__ccount *d = &pool->small->dead[k];
    aa__cadd(&d->frees, aa__cget(&b->frees));
    aa__cadd(&d->hits, aa__cget(&b->hits));
    aa__cadd(&d->misses, aa__cget(&b->misses));
    aa__cadd(&d->req_add, aa__cget(&b->req_add));
    aa__cadd(&d->req_sub, aa__cget(&b->req_sub));
    free(b->items);
    b->items = NULL;
    b->n = b->lim = b->cap = 0;
  }
  tc->stc.cached_bytes = 0;
}

/* The thread cache is over its byte budget: return blocks of every bin,
 * round robin, half of each bin, until half the budget is free. One lock per
 * class touched, many blocks per lock, instead of one lock per free. */
void aa__stc_make_room(aa_pool *pool, aa__tcache *tc) {
  aa__stc *s = &tc->stc;
  size_t target = s->max_bytes / 2;
  for (uint32_t step = 0; step < AA_MAX_CLASSES && s->cached_bytes > target; step++) {
    uint32_t k = (s->sweep + step) % AA_MAX_CLASSES;
    aa__bin *bin = &s->bins[k];
    if (bin->n == 0)
      continue;
    aa__class *c = &pool->small->classes[k];
    pthread_mutex_lock(&c->mu);
    aa__bin_flush_n(pool, tc, bin, c, (bin->n + 1) / 2);
    pthread_mutex_unlock(&c->mu);
  }
  s->sweep = (s->sweep + 7) % AA_MAX_CLASSES;
}
