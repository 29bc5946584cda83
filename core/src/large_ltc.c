/*
 * large_ltc.c — the per-thread large-block cache: a thread's free of a
 * block it allocated, and its next same-size request on the same stream,
 * without the lock; the chunk's state word, changed only by
 * compare-and-swap, settles races with other threads' locked frees and with
 * a thread that takes held blocks back.
 *
 * Held memory serves only its holder, which may not call again for a long
 * time: PyTorch runs backward on a thread of its own, so the main thread's
 * block sits idle through backward and the autograd thread's through the
 * optimizer step and the next forward (a two-thread replay of a BERT
 * fine-tuning trace: 20 MiB more reserved at the peak than one thread).
 * So a thread's locked request takes back the blocks other threads hold
 * idle (aa__lg_ltc_reclaim): a block still held, unchanged, at the second
 * such walk (threads allocating side by side reuse theirs in between and
 * keep them); and every held block before the pool takes more memory, and
 * on a release. Each thread publishes the chunks it holds (lpub); the
 * taker moves a HELD chunk to FREE by compare-and-swap; the holder finds its
 * entry stale (its own CAS fails) and forgets it. A free being checked is
 * in phase CLAIM, which no other thread moves on.
 * Entry points: aa__ltc_alloc, aa__ltc_free (and aa__lg_ltc_drop_locked,
 * aa__lg_ltc_reclaim for the locked path; aa__ltc_flush is large.c's, after
 * which the full walk runs, AA_DEBUG 3: large_check.c is a floor above).
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

/* Publishes the held chunks for other threads (aa__lg_ltc_reclaim). */
static void ltc_publish(aa_pool *pool, aa__tcache *tc) {
  for (uint32_t i = 0; i < AA__LTC_N; i++)
    atomic_store_explicit(&tc->ltc.pub[i], i < tc->ltc.nheld ? tc->ltc.held[i].c : NULL,
                          memory_order_release);
  /* a load first: the line stays shared while the flag is already up */
  if (tc->ltc.nheld > 0 && atomic_load_explicit(&pool->large->ltc_published, AA__RLX) == 0)
    atomic_store_explicit(&pool->large->ltc_published, 1, AA__RLX);
}

/* Takes held entry i out of the thread's cache and its counters. */
static struct aa__ltc_held ltc_take(aa_pool *pool, aa__tcache *tc, uint32_t i) {
  struct aa__ltc_held h = tc->ltc.held[i];
  memmove(&tc->ltc.held[i], &tc->ltc.held[i + 1], (tc->ltc.nheld - i - 1) * sizeof tc->ltc.held[0]);
  tc->ltc.nheld--;
  ltc_publish(pool, tc);
  tc->ltc.held_bytes -= h.size;
  aa__cadd(&tc->ltc.held_block, (uint64_t)0 - h.size);
  aa__cadd(&tc->ltc.held_req, (uint64_t)0 - h.req);
  return h;
}

/* Held entry i was taken back by another thread: forgets it, and the
 * taker's note of it. */
static void ltc_forget(aa_pool *pool, aa__tcache *tc, uint32_t i) {
  struct aa__ltc_held h = ltc_take(pool, tc, i);
  atomic_fetch_sub_explicit(&pool->large->ltc_taken_block, h.size, AA__RLX);
  atomic_fetch_sub_explicit(&pool->large->ltc_taken_req, h.req, AA__RLX);
}

/* Gives held entry i back to the pool. Under large->mu. */
void aa__lg_ltc_drop_locked(aa_pool *pool, aa__tcache *tc, uint32_t i) {
  aa__assert(i < tc->ltc.nheld);
  aa__assert((tc->ltc.held[i].state & 3) == AA__CH_HELD);
  uint64_t st = tc->ltc.held[i].state;
  aa__chunk *c = tc->ltc.held[i].c;
  aa_stream stream = tc->ltc.held[i].stream;
  /* fails only when another thread took it back (under this same lock) */
  if (atomic_compare_exchange_strong_explicit(&c->state, &st, aa__lg_st_phase(st, AA__CH_FREE),
                                              memory_order_acq_rel, memory_order_acquire)) {
    (void)ltc_take(pool, tc, i);
    aa__lg_release_chunk(pool, c, stream, false);
  } else {
    ltc_forget(pool, tc, i);
  }
}

size_t aa__lg_ltc_reclaim(aa_pool *pool, const aa__tcache *self, bool all) {
  size_t got = 0;
  bool left = false;
  if (!all) {
    /* nothing published or left since the last walk (a missed flag only
     * defers this to the walk before the pool grows, which waits) */
    if (atomic_load_explicit(&pool->large->ltc_published, AA__RLX) == 0 ||
        pthread_mutex_trylock(&pool->tc_mu) != 0)
      return 0;
  } else {
    pthread_mutex_lock(&pool->tc_mu);
  }
  atomic_store_explicit(&pool->large->ltc_published, 0, AA__RLX);
  for (aa__tcache *tc = pool->tcaches; tc; tc = tc->next) {
    if (tc == self)
      continue;
    for (uint32_t i = 0; i < AA__LTC_N; i++) {
      aa__chunk *c = atomic_load_explicit(&tc->ltc.pub[i], memory_order_acquire);
      if (c == NULL)
        continue;
      /* Records are never freed while the pool lives, so a stale pointer
       * is safe to look at; only a chunk held now (by whichever thread)
       * moves, and then its holder's entry fails its own CAS. The
       * generation in the word tells a block held since the last walk
       * from one reused and held again. */
      uint64_t st = atomic_load_explicit(&c->state, memory_order_acquire);
      if ((st & 3) != AA__CH_HELD)
        continue;
      if (!all && (tc->ltc.seen_c[i] != c || tc->ltc.seen[i] != st)) {
        tc->ltc.seen_c[i] = c; /* first seen: taken if still so at the next walk */
        tc->ltc.seen[i] = st;
        left = true;
        continue;
      }
      size_t csz = c->size, creq = c->req;
      atomic_fetch_add_explicit(&pool->large->ltc_taken_block, csz, AA__RLX);
      atomic_fetch_add_explicit(&pool->large->ltc_taken_req, creq, AA__RLX);
      if (!atomic_compare_exchange_strong_explicit(&c->state, &st, aa__lg_st_phase(st, AA__CH_FREE),
                                                   memory_order_acq_rel, memory_order_acquire)) {
        atomic_fetch_sub_explicit(&pool->large->ltc_taken_block, csz, AA__RLX);
        atomic_fetch_sub_explicit(&pool->large->ltc_taken_req, creq, AA__RLX);
        continue;
      }
      atomic_fetch_add_explicit(&pool->large->ltc_reclaims, 1, AA__RLX);
      got += c->size;
      aa__lg_release_chunk(pool, c, c->held_stream, false);
    }
  }
  if (left) /* the next walk looks again */
    atomic_store_explicit(&pool->large->ltc_published, 1, AA__RLX);
  pthread_mutex_unlock(&pool->tc_mu);
  return got;
}

/* A release (or a class change) since this thread last looked: what it
 * holds goes back first (as aa__ltc_flush, large.c, gives it back; the
 * full walk, AA_DEBUG 3, is the entry floor's). */
static void ltc_sync(aa_pool *pool, aa__tcache *tc) {
  uint32_t ep = atomic_load_explicit(&pool->epoch, memory_order_acquire);
  if (tc->ltc.epoch != ep) {
    if (tc->ltc.nheld > 0) {
      pthread_mutex_lock(&pool->large->mu);
      while (tc->ltc.nheld > 0)
        aa__lg_ltc_drop_locked(pool, tc, tc->ltc.nheld - 1);
      pthread_mutex_unlock(&pool->large->mu);
    }
    tc->ltc.epoch = ep;
  }
}

void *aa__ltc_alloc(aa_pool *pool, aa__tcache *tc, size_t size, aa_stream stream) {
  if (tc->ltc.nheld == 0)
    return NULL;
  ltc_sync(pool, tc);
  for (uint32_t i = tc->ltc.nheld; i-- > 0;) { /* newest first */
    if (tc->ltc.held[i].req != size || tc->ltc.held[i].stream != stream)
      continue;
    uint64_t st = tc->ltc.held[i].state;
    uint64_t live = aa__lg_st_next_live(st);
    if (!atomic_compare_exchange_strong_explicit(&tc->ltc.held[i].c->state, &st, live,
                                                 memory_order_acq_rel, memory_order_acquire)) {
      ltc_forget(pool, tc, i); /* another thread took it back */
      continue;
    }
    struct aa__ltc_held h = ltc_take(pool, tc, i);
    aa__cadd(&tc->ltc.allocs, 1);
    aa__lg_ltc_note(tc, h.p, h.c, live);
    return h.p;
  }
  return NULL;
}

bool aa__ltc_free(aa_pool *pool, aa__tcache *tc, void *p, size_t size, aa_stream stream) {
  struct aa__ltc_live *l = &tc->ltc.live[aa__lg_ltc_slot(p)];
  if (l->p != p)
    return false;
  aa__chunk *c = l->c;
  uint64_t st = l->state;
  l->p = NULL;
  ltc_sync(pool, tc);
  size_t cap = ltc_cap(pool);
  /* The CAS first: only once it succeeds is c this thread's to read (a
   * stale entry's chunk may be free or someone else's by now). CLAIM: no
   * other thread moves it on while this one checks it. */
  uint64_t claim = aa__lg_st_phase(st, AA__CH_CLAIM);
  if (!atomic_compare_exchange_strong_explicit(&c->state, &st, claim, memory_order_acq_rel,
                                               memory_order_acquire))
    return false; /* freed or reused since: the locked path decides */
  if ((size != 0 && size != c->req) || c->size > cap ||
      __atomic_load_n(&c->nxs, __ATOMIC_RELAXED) != 0 || (c->waited && c->stream != stream) ||
      c->seg->st != NULL) {
    /* a misuse to report, too big to hold, record_stream'd, taken by
     * stream-ordered reuse and freed on another stream (its earlier uses
     * are behind c->stream's work: aa__lg_release_chunk), or a stitched
     * range's (freed now, its event recorded at the free and its parts
     * free to go back to their holes: aa__lg_stitch_freed): undo */
    atomic_store_explicit(&c->state, st, memory_order_release);
    return false;
  }
  if (tc->ltc.nheld == AA__LTC_N || tc->ltc.held_bytes + c->size > cap) {
    pthread_mutex_lock(&pool->large->mu);
    while (tc->ltc.nheld > 0 && (tc->ltc.nheld == AA__LTC_N || tc->ltc.held_bytes + c->size > cap))
      aa__lg_ltc_drop_locked(pool, tc, 0); /* the oldest */
    pthread_mutex_unlock(&pool->large->mu);
  }
  uint64_t held = aa__lg_st_phase(st, AA__CH_HELD);
  c->held_stream = stream;
  tc->ltc.held[tc->ltc.nheld++] = (struct aa__ltc_held){p, c, held, c->req, c->size, stream};
  tc->ltc.held_bytes += c->size;
  aa__cadd(&tc->ltc.held_block, c->size);
  aa__cadd(&tc->ltc.held_req, c->req);
  aa__cadd(&tc->ltc.frees, 1);
  atomic_store_explicit(&c->state, held, memory_order_release); /* now others may take it */
  ltc_publish(pool, tc);
  return true;
}

void aa__ltc_fold_dead(aa_pool *pool, aa__tcache *tc) {
  atomic_fetch_add_explicit(&pool->large->dead_allocs, aa__cget(&tc->ltc.allocs), AA__RLX);
  atomic_fetch_add_explicit(&pool->large->dead_frees, aa__cget(&tc->ltc.frees), AA__RLX);
}

void aa__ltc_forget_all(aa__tcache *tc) {
  tc->ltc.nheld = 0;
  for (uint32_t i = 0; i < AA__LTC_N; i++)
    atomic_store_explicit(&tc->ltc.pub[i], NULL, AA__RLX);
  tc->ltc.held_bytes = 0;
  memset(tc->ltc.live, 0, sizeof tc->ltc.live);
}
