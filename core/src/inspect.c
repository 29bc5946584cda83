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

static int emit(aa_walk_fn fn, void *user, uint32_t kind, uint32_t flags, uintptr_t addr,
                size_t size, size_t req, size_t bs) {
  aa_walk_entry e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.flags = flags;
  e.address = addr;
  e.size = size;
  e.requested = req;
  e.block_size = bs;
  return fn(user, &e);
}

/* One slab: the segment, then each block, then the tail the blocks do not
 * fill (free). Under c->mu. */
static int walk_slab(const aa__slab *s, aa_walk_fn fn, void *user) {
  size_t ssize = (size_t)(s->h.end - s->h.base);
  int rc = emit(fn, user, AA_WALK_SEGMENT, 0, s->h.base, ssize, 0, s->block_size);
  for (uint32_t i = 0; rc == 0 && i < s->nblocks; i++) {
    uint32_t m = atomic_load_explicit(&s->meta[i], AA__RLX);
    bool used = (m & AA__M_USED) != 0;
    rc = emit(fn, user, AA_WALK_BLOCK, used ? AA_WALK_IN_USE : 0,
              s->h.base + (uintptr_t)i * s->block_size, s->block_size,
              used ? (size_t)(m & AA__M_SIZE) : 0, 0);
  }
  size_t carved = (size_t)s->nblocks * s->block_size;
  if (rc == 0 && carved < ssize)
    rc = emit(fn, user, AA_WALK_BLOCK, 0, s->h.base + carved, ssize - carved, 0, 0);
  return rc;
}

static bool chunk_in_use(const aa__chunk *c) {
  return !c->free && (atomic_load_explicit(&c->state, AA__RLX) & 3) == AA__CH_LIVE;
}

/* The blocks of segment s that fall in [lo, hi). Under large_mu. */
static int walk_chunks(const aa__seg *s, uintptr_t lo, uintptr_t hi, aa_walk_fn fn,
                       void *user) {
  int rc = 0;
  for (const aa__chunk *c = s->first; rc == 0 && c; c = c->next) {
    uintptr_t a = c->base > lo ? c->base : lo;
    uintptr_t b = c->base + c->size < hi ? c->base + c->size : hi;
    if (a >= b)
      continue;
    bool used = chunk_in_use(c);
    rc = emit(fn, user, AA_WALK_BLOCK, used ? AA_WALK_IN_USE : 0, a, (size_t)(b - a),
              used ? c->req : 0, 0);
  }
  return rc;
}

/* A large segment; an expandable one as one segment per run of mapped
 * pages (what is reserved from the device), its blocks clipped to the run. */
static int walk_seg(const aa_pool *pool, const aa__seg *s, aa_walk_fn fn, void *user) {
  if (s->pages == NULL) {
    int rc = emit(fn, user, AA_WALK_SEGMENT, AA_WALK_LARGE, s->h.base,
                  (size_t)(s->h.end - s->h.base), 0, 0);
    return rc ? rc : walk_chunks(s, s->h.base, s->h.end, fn, user);
  }
  size_t ps = pool->vmm_page;
  for (size_t i = 0; i < s->npages;) {
    if (s->pages[i] == NULL) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < s->npages && s->pages[j] != NULL)
      j++;
    uintptr_t lo = s->h.base + i * ps, hi = s->h.base + j * ps;
    int rc = emit(fn, user, AA_WALK_SEGMENT, AA_WALK_LARGE | AA_WALK_EXPANDABLE, lo,
                  (size_t)(hi - lo), 0, 0);
    if (rc == 0)
      rc = walk_chunks(s, lo, hi, fn, user);
    if (rc)
      return rc;
    i = j;
  }
  return 0;
}

int aa_pool_walk_large(aa_pool *pool, aa_walk_fn fn, void *user) {
  if (pool == NULL || fn == NULL)
    return AA_EINVAL;
  int rc = 0;
  pthread_mutex_lock(&pool->large_mu);
  for (const aa__seg *s = pool->segs; rc == 0 && s; s = s->next)
    rc = walk_seg(pool, s, fn, user);
  pthread_mutex_unlock(&pool->large_mu);
  return rc;
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
