/*
 * inspect.c — looking at a pool from outside: the peak reset
 * (aa_pool_reset_peaks) and the segment/block walk (aa_pool_walk) that
 * snapshots are built from, and its large-path part alone
 * (aa_pool_walk_large, for the server's segment map). Nothing here is on an
 * allocation path.
 */
#include "core_internal.h"

void aa_pool_reset_peaks(aa_pool *pool) {
  if (pool == NULL)
    return;
  /* Readers report max(peak, current) (stats.c), so 0 reads as "now". */
  atomic_store(&pool->peak_out_bytes, 0);
  atomic_store(&pool->peak_reserved, 0);
  aa__small_reset_peaks(pool);
}

int aa_pool_walk_large(aa_pool *pool, aa_walk_fn fn, void *user) {
  if (pool == NULL || fn == NULL)
    return AA_EINVAL;
  return aa__large_walk(pool, fn, user);
}

int aa_pool_walk(aa_pool *pool, aa_walk_fn fn, void *user) {
  if (pool == NULL || fn == NULL)
    return AA_EINVAL;
  int rc = aa__small_walk(pool, fn, user);
  return rc ? rc : aa_pool_walk_large(pool, fn, user);
}
