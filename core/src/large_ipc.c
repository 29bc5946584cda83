/*
 * large_ipc.c — sharing a large block with another process: the backend
 * memory under a live chunk, as aa_block_share (free.c) hands it to the
 * caller. Three shapes:
 *   cache path     the chunk's segment, one backend allocation (no handle);
 *   expandable     the page records under the chunk, one piece per map
 *                  handle (a run of pages mapped by one call is one handle);
 *   stitched range the range's parts, each a handle of a hole mapped again
 *                  here (the same handle as the hole's page record).
 * A handle is mapped whole, so a piece may reach beyond the chunk; the
 * consumer maps all of it and uses the chunk's bytes only.
 *
 * Entry point (large.h): aa__large_share. Nothing here changes the large
 * path's state: the chunk stays live while its owner holds it, and a live
 * chunk's pages are never unmapped, lent or released, so the description
 * stays true until the owner frees the block.
 */
#include "large_internal.h"

/* Appends one piece; counts past cap without writing. */
static void put(aa_share_piece *v, size_t cap, size_t *n, uintptr_t addr, size_t size,
                void *handle) {
  if (*n < cap) {
    v[*n].addr = (void *)addr;
    v[*n].size = size;
    v[*n].handle = handle;
  }
  (*n)++;
}

int aa__large_share(aa_pool *pool, struct aa__span *sp, const void *ptr, aa_share_piece *pieces,
                    size_t cap, size_t *n, void **block) {
  aa__seg *seg = (aa__seg *)sp; /* a large span is a segment's (or page's) header */
  uintptr_t p = (uintptr_t)ptr;
  int rc = AA_OK;
  *n = 0;
  *block = NULL;
  if (seg->owner != NULL)
    seg = seg->owner; /* a page of an expandable segment */
  pthread_mutex_lock(&pool->large->mu);
  aa__chunk *c = NULL;
  for (aa__chunk *k = seg->first; k != NULL; k = k->next) {
    if (p >= k->base && p < k->base + k->size) {
      c = k;
      break;
    }
  }
  if (c == NULL || c->free || (atomic_load_explicit(&c->state, AA__RLX) & 3) != AA__CH_LIVE) {
    rc = AA_EINVAL; /* free, lent to a stitched range, or held in a thread's cache */
    goto out;
  }
  uintptr_t cb = c->base;
  size_t cs = c->size;
  if (aa__lg_plan_is_arena(pool, c) && !aa__lg_plan_block_of(pool, p, &cb, &cs)) {
    rc = AA_EINVAL; /* room of the plan's arena that no block holds */
    goto out;
  }
  *block = (void *)cb;
  if (seg->st != NULL) {
    const aa__stitch *st = seg->st;
    for (size_t i = 0; i < st->nparts; i++) {
      const aa__stitch_part *pt = &st->parts[i];
      if (pt->at + pt->len > cb && pt->at < cb + cs)
        put(pieces, cap, n, pt->at, pt->len, pt->pg->handle);
    }
  } else if (seg->pages != NULL) {
    size_t ps = pool->large->vmm_page;
    size_t i0 = (cb - seg->h.base) / ps, i1 = (cb + cs - 1 - seg->h.base) / ps + 1;
    const aa__seg *last = NULL;
    for (size_t i = i0; i < i1; i++) {
      const aa__seg *pg = seg->pages[i];
      aa__assert(pg != NULL); /* a live chunk's pages are mapped */
      if (pg == NULL) {
        rc = AA_EINVAL;
        goto out;
      }
      if (pg != last)
        put(pieces, cap, n, pg->h.base, (size_t)(pg->h.end - pg->h.base), pg->handle);
      last = pg;
    }
  } else {
    put(pieces, cap, n, seg->h.base, (size_t)(seg->h.end - seg->h.base), NULL);
  }
  if (*n > cap)
    rc = AA_ERANGE;
out:
  pthread_mutex_unlock(&pool->large->mu);
  return rc;
}
