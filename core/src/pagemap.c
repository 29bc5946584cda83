/*
 * pagemap.c — the pool's address -> span map that makes free O(1).
 *
 * Two levels keyed by address >> 16 (64 KiB granules): a root of 2^18 leaf
 * pointers inside the pool (calloc'd, so untouched parts cost no memory) and
 * leaves of 2^14 entries allocated on first use and kept until the pool dies
 * (the slots holding one are listed, so destroy frees just those).
 * Every span (slab or large segment) is a multiple of 64 KiB long, so a
 * granule meets at most two spans: `lo`, the one covering the granule's first
 * byte (up to offset lo_end), and `hi`, one starting inside it (at hi_start).
 * Writers hold pool->map_mu; readers (aa_free) use acquire loads and no lock:
 * an offset is stored before the pointer that it belongs to. Entry points: aa__pm_insert, aa__pm_remove;
 * the lookup is inline in core_internal.h.
 */
#include <string.h>

#include "core_internal.h"

#define LEAF_N ((size_t)1 << AA__LEAF_BITS)
#define ROOT_N ((size_t)1 << AA__ROOT_BITS)

int aa__pm_init(aa__pagemap *m) {
  (void)m; /* the root is part of the (zeroed) pool */
  return AA_OK;
}

void aa__pm_fini(aa__pagemap *m) {
  for (size_t i = 0; i < m->nused; i++) {
    _Atomic(aa__pm_entry *) *slot = &m->root[m->used[i]];
    free(atomic_load_explicit(slot, AA__RLX));
    atomic_store_explicit(slot, NULL, AA__RLX);
  }
  free(m->used);
  m->used = NULL;
  m->nused = m->capused = 0;
}

/* The entry of granule g, allocating its leaf if `create`. Under map_mu. */
static aa__pm_entry *entry_of(aa__pagemap *m, uintptr_t g, bool create) {
  _Atomic(aa__pm_entry *) *slot = &m->root[g >> AA__LEAF_BITS];
  aa__pm_entry *leaf = atomic_load_explicit(slot, AA__RLX);
  if (leaf == NULL) {
    if (!create)
      return NULL;
    if (m->nused == m->capused) {
      size_t cap = m->capused ? m->capused * 2 : 16;
      uint32_t *v = realloc(m->used, cap * sizeof *v);
      if (v == NULL)
        return NULL;
      m->used = v;
      m->capused = cap;
    }
    leaf = calloc(LEAF_N, sizeof *leaf);
    if (leaf == NULL)
      return NULL;
    m->used[m->nused++] = (uint32_t)(g >> AA__LEAF_BITS);
    atomic_store_explicit(slot, leaf, memory_order_release);
  }
  return &leaf[g & (LEAF_N - 1)];
}

static void clear_range(aa__pagemap *m, aa__span *s, uintptr_t g0, uintptr_t g1) {
  for (uintptr_t g = g0; g < g1; g++) {
    aa__pm_entry *e = entry_of(m, g, false);
    if (e == NULL)
      continue;
    if (atomic_load_explicit(&e->lo, AA__RLX) == s)
      atomic_store_explicit(&e->lo, NULL, memory_order_release);
    if (atomic_load_explicit(&e->hi, AA__RLX) == s)
      atomic_store_explicit(&e->hi, NULL, memory_order_release);
  }
}

int aa__pm_insert(aa_pool *pool, aa__span *s) {
  aa__pagemap *m = &pool->map;
  int rc = AA_OK;
  if (s->end <= s->base || (s->end >> AA__ADDR_BITS) != 0 ||
      (s->end - s->base) % AA__GRANULE != 0)
    return AA_ERANGE;
  uintptr_t g0 = s->base >> AA__GRANULE_SHIFT;
  uintptr_t g1 = ((s->end - 1) >> AA__GRANULE_SHIFT) + 1;
  pthread_mutex_lock(&pool->map_mu);
  for (uintptr_t g = g0; g < g1; g++) {
    aa__pm_entry *e = entry_of(m, g, true);
    if (e == NULL) {
      clear_range(m, s, g0, g);
      rc = AA_ENOMEM;
      goto out;
    }
    uintptr_t gstart = g << AA__GRANULE_SHIFT;
    if (gstart >= s->base) {
      uintptr_t left = s->end - gstart;
      atomic_store_explicit(&e->lo_end, (uint32_t)(left < AA__GRANULE ? left : AA__GRANULE),
                            AA__RLX);
      atomic_store_explicit(&e->lo, s, memory_order_release);
    } else {
      atomic_store_explicit(&e->hi_start, (uint32_t)(s->base - gstart), AA__RLX);
      atomic_store_explicit(&e->hi, s, memory_order_release);
    }
  }
out:
  pthread_mutex_unlock(&pool->map_mu);
  return rc;
}

void aa__pm_remove(aa_pool *pool, aa__span *s) {
  uintptr_t g0 = s->base >> AA__GRANULE_SHIFT;
  uintptr_t g1 = ((s->end - 1) >> AA__GRANULE_SHIFT) + 1;
  pthread_mutex_lock(&pool->map_mu);
  clear_range(&pool->map, s, g0, g1);
  pthread_mutex_unlock(&pool->map_mu);
}
