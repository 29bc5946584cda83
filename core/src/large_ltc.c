/*
 * large_ltc.c — the per-thread large-block cache: a thread's free of a
 * block it allocated, and its next same-size request on the same stream,
 * without the lock; the chunk's state word, changed only by
 * compare-and-swap, settles races with other threads' locked frees.
 * Entry points: aa__ltc_alloc, aa__ltc_free, aa__ltc_flush.
 */
#include <stdlib.h>
#include <string.h>

#include "large_internal.h"

/* ------------------------------------------------------------ thread cache */

/* The most a thread holds: under a limit, a sixteenth of it; under a cache
 * bound, a quarter of that. */
static size_t ltc_cap(const aa_pool *pool) {
  size_t lim = atomic_load_explicit(&((aa_pool *)pool)->limit, AA__RLX);
  size_t cap = lim != 0 && lim / 16 < AA__LTC_MAX_BYTES ? lim / 16 : AA__LTC_MAX_BYTES;
  size_t bound = pool->cfg.large_cache_bytes; /* a cache bound covers held blocks too */
  return bound != 0 && bound / 4 < cap ? bound / 4 : cap;
}

/* Takes held entry i out of the thread's cache and its counters. */
static struct aa__ltc_held ltc_take(aa__tcache *tc, uint32_t i) {
  struct aa__ltc_held h = tc->lheld[i];
  memmove(&tc->lheld[i], &tc->lheld[i + 1], (tc->nlheld - i - 1) * sizeof tc->lheld[0]);
  tc->nlheld--;
  tc->lheld_bytes -= h.c->size;
  aa__cadd(&tc->lheld_block, (uint64_t)0 - h.c->size);
  aa__cadd(&tc->lheld_req, (uint64_t)0 - h.req);
  return h;
}

/* Gives held entry i back to the pool. Under large_mu. */
void aa__lg_ltc_drop_locked(aa_pool *pool, aa__tcache *tc, uint32_t i) {
  aa__assert(i < tc->nlheld);
  struct aa__ltc_held h = ltc_take(tc, i);
  aa__assert((h.state & 3) == AA__CH_HELD);
  uint64_t st = h.state;
  /* only this thread moves a held chunk on, so this cannot fail */
  if (atomic_compare_exchange_strong_explicit(&h.c->state, &st, aa__lg_st_phase(st, AA__CH_FREE),
                                              memory_order_acq_rel, memory_order_acquire))
    aa__lg_release_chunk(pool, h.c, h.stream, false);
}

void aa__ltc_flush(aa_pool *pool, aa__tcache *tc) {
  if (tc->nlheld == 0)
    return;
  pthread_mutex_lock(&pool->large_mu);
  while (tc->nlheld > 0)
    aa__lg_ltc_drop_locked(pool, tc, tc->nlheld - 1);
  LARGE_CHECK(pool);
  pthread_mutex_unlock(&pool->large_mu);
}

/* A release (or a class change) since this thread last looked: what it
 * holds goes back first. */
static void ltc_sync(aa_pool *pool, aa__tcache *tc) {
  uint32_t ep = atomic_load_explicit(&pool->epoch, memory_order_acquire);
  if (tc->ltc_epoch != ep) {
    aa__ltc_flush(pool, tc);
    tc->ltc_epoch = ep;
  }
}

void *aa__ltc_alloc(aa_pool *pool, aa__tcache *tc, size_t size, aa_stream stream) {
  if (tc->nlheld == 0)
    return NULL;
  ltc_sync(pool, tc);
  for (uint32_t i = tc->nlheld; i-- > 0;) { /* newest first */
    if (tc->lheld[i].req != size || tc->lheld[i].stream != stream)
      continue;
    uint64_t st = tc->lheld[i].state;
    uint64_t live = aa__lg_st_next_live(st);
    if (!atomic_compare_exchange_strong_explicit(&tc->lheld[i].c->state, &st, live,
                                                 memory_order_acq_rel, memory_order_acquire))
      return NULL; /* cannot happen: only this thread moves a held chunk */
    struct aa__ltc_held h = ltc_take(tc, i);
    aa__cadd(&tc->large_allocs, 1);
    aa__lg_ltc_note(tc, h.p, h.c, live);
    return h.p;
  }
  return NULL;
}

bool aa__ltc_free(aa_pool *pool, aa__tcache *tc, void *p, size_t size, aa_stream stream) {
  struct aa__ltc_live *l = &tc->llive[aa__lg_ltc_slot(p)];
  if (l->p != p)
    return false;
  aa__chunk *c = l->c;
  uint64_t st = l->state;
  l->p = NULL;
  ltc_sync(pool, tc);
  size_t cap = ltc_cap(pool);
  /* The CAS first: only once it succeeds is c this thread's to read (a
   * stale entry's chunk may be free or someone else's by now). */
  uint64_t held = aa__lg_st_phase(st, AA__CH_HELD);
  if (!atomic_compare_exchange_strong_explicit(&c->state, &st, held, memory_order_acq_rel,
                                               memory_order_acquire))
    return false; /* freed or reused since: the locked path decides */
  if ((size != 0 && size != c->req) || c->size > cap ||
      __atomic_load_n(&c->nxs, __ATOMIC_RELAXED) != 0) {
    /* a misuse to report, too big to hold, or record_stream'd: undo */
    atomic_store_explicit(&c->state, st, memory_order_release);
    return false;
  }
  if (tc->nlheld == AA__LTC_N || tc->lheld_bytes + c->size > cap) {
    pthread_mutex_lock(&pool->large_mu);
    while (tc->nlheld > 0 && (tc->nlheld == AA__LTC_N || tc->lheld_bytes + c->size > cap))
      aa__lg_ltc_drop_locked(pool, tc, 0); /* the oldest */
    pthread_mutex_unlock(&pool->large_mu);
  }
  tc->lheld[tc->nlheld++] = (struct aa__ltc_held){p, c, held, c->req, stream};
  tc->lheld_bytes += c->size;
  aa__cadd(&tc->lheld_block, c->size);
  aa__cadd(&tc->lheld_req, c->req);
  aa__cadd(&tc->large_frees, 1);
  return true;
}
