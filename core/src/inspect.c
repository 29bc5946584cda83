/*
 * inspect.c — looking at a pool from outside: the peak reset
 * (aa_pool_reset_peaks) and the segment/block walk (aa_pool_walk) that
 * snapshots are built from, and its large-path part alone
 * (aa_pool_walk_large, for the server's segment map). Nothing here is on an
 * allocation path.
 */
#include <string.h>

#include "core_internal.h"

void aa_pool_reset_peaks(aa_pool *pool) {
  if (pool == NULL)
    return;
  /* Readers report max(peak, current) (stats.c), so 0 reads as "now". */
  atomic_store(&pool->peak_out_bytes, 0);
  atomic_store(&pool->peak_reserved, 0);
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->classes[i];
    pthread_mutex_lock(&c->mu);
    c->peak_out = 0;
    pthread_mutex_unlock(&c->mu);
  }
}

/* One slab: the segment, then each block, then the tail the blocks do not
 * fill (free). Under c->mu. */
static int walk_slab(const aa__slab *s, aa_walk_fn fn, void *user) {
  size_t ssize = (size_t)(s->h.end - s->h.base);
  int rc = aa__walk_emit(fn, user, AA_WALK_SEGMENT, 0, s->h.base, ssize, 0, s->block_size);
  for (uint32_t i = 0; rc == 0 && i < s->nblocks; i++) {
    uint32_t m = atomic_load_explicit(&s->meta[i], AA__RLX);
    bool used = (m & AA__M_USED) != 0;
    rc = aa__walk_emit(fn, user, AA_WALK_BLOCK, used ? AA_WALK_IN_USE : 0,
                       s->h.base + (uintptr_t)i * s->block_size, s->block_size,
                       used ? (size_t)(m & AA__M_SIZE) : 0, 0);
  }
  size_t carved = (size_t)s->nblocks * s->block_size;
  if (rc == 0 && carved < ssize)
    rc = aa__walk_emit(fn, user, AA_WALK_BLOCK, 0, s->h.base + carved, ssize - carved, 0, 0);
  return rc;
}

int aa_pool_walk_large(aa_pool *pool, aa_walk_fn fn, void *user) {
  if (pool == NULL || fn == NULL)
    return AA_EINVAL;
  return aa__large_walk(pool, fn, user);
}

int aa_pool_walk(aa_pool *pool, aa_walk_fn fn, void *user) {
  if (pool == NULL || fn == NULL)
    return AA_EINVAL;
  int rc = 0;
  for (int i = 0; rc == 0 && i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->classes[i];
    pthread_mutex_lock(&c->mu);
    for (const aa__slab *s = c->slabs; rc == 0 && s; s = s->next)
      rc = walk_slab(s, fn, user);
    pthread_mutex_unlock(&c->mu);
  }
  return rc ? rc : aa_pool_walk_large(pool, fn, user);
}
