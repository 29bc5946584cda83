/*
 * small_stats.c — the small path's figures: its classes' counters summed
 * over the live threads' bins, the dead threads' totals and the slots'
 * baselines (a slot's counts start at 0 when a new class moves in); the
 * stats call (aa__small_stats_get: per class, totals, and with `account`
 * its part of aa_pool_account_get), the bytes in use, the walk of the slabs
 * and the peak reset.
 *
 * The counters are read under tc_mu (the registry's lock keeps the threads'
 * bins alive), each class's figures under its own lock, one at a time.
 */
#include <string.h>

#include "small_internal.h"

/* ------------------------------------------------------------ sums */

typedef struct csum {
  uint64_t frees, hits, misses, req_add, req_sub;
} csum;

static void add_ccount(csum *s, const aa__ccount *c) {
  s->frees += aa__cget(&c->frees);
  s->hits += aa__cget(&c->hits);
  s->misses += aa__cget(&c->misses);
  s->req_add += aa__cget(&c->req_add);
  s->req_sub += aa__cget(&c->req_sub);
}

static void add_bin(csum *s, const aa__bin *b) {
  s->frees += aa__cget(&b->frees);
  s->hits += aa__cget(&b->hits);
  s->misses += aa__cget(&b->misses);
  s->req_add += aa__cget(&b->req_add);
  s->req_sub += aa__cget(&b->req_sub);
}

/* Per-slot sums since the slot's current class was activated. tc_mu held. */
static void slot_sums(aa_pool *pool, csum *out) {
  aa__small *sm = pool->small;
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    memset(&out[i], 0, sizeof out[i]);
    add_ccount(&out[i], &sm->dead[i]);
  }
  for (aa__tcache *tc = pool->tcaches; tc; tc = tc->next) {
    for (int i = 0; i < AA_MAX_CLASSES; i++)
      add_bin(&out[i], &tc->stc.bins[i]);
  }
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    const aa__cbase *b = &sm->base[i];
    out[i].frees -= b->frees;
    out[i].hits -= b->hits;
    out[i].misses -= b->misses;
    out[i].req_add -= b->req_add;
    out[i].req_sub -= b->req_sub;
  }
}

void aa__slot_rebase(aa_pool *pool, int slot) {
  aa__small *sm = pool->small;
  csum s[AA_MAX_CLASSES];
  pthread_mutex_lock(&pool->tc_mu);
  slot_sums(pool, s);
  aa__cbase *b = &sm->base[slot];
  sm->retired.frees += s[slot].frees;
  sm->retired.hits += s[slot].hits;
  sm->retired.misses += s[slot].misses;
  sm->retired.req_add += s[slot].req_add;
  sm->retired.req_sub += s[slot].req_sub;
  b->frees += s[slot].frees;
  b->hits += s[slot].hits;
  b->misses += s[slot].misses;
  b->req_add += s[slot].req_add;
  b->req_sub += s[slot].req_sub;
  pthread_mutex_unlock(&pool->tc_mu);
}

uint64_t aa__small_in_use(aa_pool *pool) {
  csum s[AA_MAX_CLASSES];
  uint64_t total = 0;
  pthread_mutex_lock(&pool->tc_mu);
  slot_sums(pool, s);
  pthread_mutex_unlock(&pool->tc_mu);
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->small->classes[i];
    if (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_EMPTY)
      continue;
    uint64_t allocs = s[i].hits + s[i].misses;
    if (allocs > s[i].frees)
      total += (allocs - s[i].frees) * atomic_load_explicit(&c->block_size, AA__RLX);
  }
  return total;
}

/* ------------------------------------------------------------ stats */

/* The counters under tc_mu, then each class under its mu (the allocating
 * threads wait for these sections: counters only). With `account`, the
 * blocks waiting for an event (c->npending) whose event is still pending
 * when asked now are holds; those whose events have completed, though the
 * pool has not looked yet, count as free slots (nothing is released or
 * recorded: the account changes nothing). The blocks in threads' bins count
 * as free from the user's free on (the counters say so). */
void aa__small_stats_get(aa_pool *pool, bool account, aa__small_stats *out) {
  aa__small *sm = pool->small;
  csum s[AA_MAX_CLASSES];
  memset(out, 0, sizeof *out);
  out->table_version = atomic_load_explicit(&sm->table_version, memory_order_acquire);
  pthread_mutex_lock(&pool->tc_mu);
  slot_sums(pool, s);
  csum ret = {sm->retired.frees, sm->retired.hits, sm->retired.misses, sm->retired.req_add,
              sm->retired.req_sub};
  pthread_mutex_unlock(&pool->tc_mu);

  out->allocs = ret.hits + ret.misses;
  out->frees = ret.frees;
  out->hits = ret.hits;
  out->misses = ret.misses;
  size_t slab_size = pool->cfg.slab_size;
  uint32_t nc = 0;
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &sm->classes[i];
    aa_class_stats cs;
    memset(&cs, 0, sizeof cs);
    pthread_mutex_lock(&c->mu);
    uint32_t state = atomic_load_explicit(&c->state, AA__RLX);
    cs.block_size = atomic_load_explicit(&c->block_size, AA__RLX);
    cs.cache_limit = atomic_load_explicit(&c->cache_limit, AA__RLX);
    cs.prefill = atomic_load_explicit(&c->prefill, AA__RLX);
    cs.retiring = state == AA__CLS_RETIRING;
    cs.slabs = c->nslabs;
    uint64_t nblocks = c->nblocks;
    uint64_t carved = c->nslabs * c->nblocks;
    uint64_t peak_out = c->peak_out;
    out->pending += c->npending;
    uint64_t held = account && c->npending > 0 ? aa__central_held_now(pool, c) : 0;
    pthread_mutex_unlock(&c->mu);
    cs.allocs = s[i].hits + s[i].misses;
    cs.frees = s[i].frees;
    cs.hits = s[i].hits;
    cs.misses = s[i].misses;
    out->allocs += cs.allocs;
    out->frees += cs.frees;
    out->hits += cs.hits;
    out->misses += cs.misses;
    if (state == AA__CLS_EMPTY)
      continue;
    uint64_t live = cs.allocs > cs.frees ? cs.allocs - cs.frees : 0;
    if (live > carved)
      live = carved; /* counters read while others run */
    cs.blocks_in_use = live;
    cs.blocks_free = carved - live;
    cs.bytes_in_use = live * cs.block_size;
    cs.bytes_requested = s[i].req_add > s[i].req_sub ? s[i].req_add - s[i].req_sub : 0;
    cs.bytes_reserved = cs.slabs * slab_size;
    cs.peak_bytes_in_use = peak_out * cs.block_size;
    if (cs.peak_bytes_in_use < cs.bytes_in_use)
      cs.peak_bytes_in_use = cs.bytes_in_use;
    out->in_use += cs.bytes_in_use;
    out->req += cs.bytes_requested;
    if (account && cs.slabs > 0) {
      uint64_t bs = cs.block_size;
      if (held > carved - live)
        held = carved - live;
      uint64_t req = cs.bytes_requested < live * bs ? cs.bytes_requested : live * bs;
      out->acc_requested += req;
      out->acc_rounding += live * bs - req;
      out->acc_slab_free += (carved - live - held) * bs;
      out->acc_holds += held * bs;
      out->acc_tails += cs.slabs * (slab_size - nblocks * bs);
    }
    /* ascending block size; a retiring class sorts before an active twin */
    uint32_t j = nc++;
    while (j > 0 && out->classes[j - 1].block_size > cs.block_size) {
      out->classes[j] = out->classes[j - 1];
      j--;
    }
    out->classes[j] = cs;
  }
  out->nclasses = nc;
}

/* ------------------------------------------------------------ walk, peaks */

void aa__small_reset_peaks(aa_pool *pool) {
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->small->classes[i];
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

int aa__small_walk(aa_pool *pool, aa_walk_fn fn, void *user) {
  int rc = 0;
  for (int i = 0; rc == 0 && i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->small->classes[i];
    pthread_mutex_lock(&c->mu);
    for (const aa__slab *s = c->slabs; rc == 0 && s; s = s->next)
      rc = walk_slab(s, fn, user);
    pthread_mutex_unlock(&c->mu);
  }
  return rc;
}
