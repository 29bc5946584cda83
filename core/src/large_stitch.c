/*
 * large_stitch.c — stitched ranges of the expandable large path
 * (aa_pool_config.large_stitch): a large request that no free chunk fits,
 * while enough whole free pages lie in holes between live chunks, is served
 * by mapping those pages' handles (map_alias: no new memory) side by side at
 * a new address. The handles stay mapped where they were too.
 *
 * A range is a segment of its own (aa__seg.st set, on the large path's
 * `stitches` list, not on `segs`) covered by one chunk that is never split,
 * never binned: it serves one block at a time, a request of its size down
 * to 7/8 of it. A range is in one of two states:
 *   active   its parts in the holes are "lent" (not free, not live), so a
 *            page is never handed out through both addresses; its chunk is
 *            live or free;
 *   dormant  its parts are free chunks of their holes again, its aliases
 *            still mapped; its chunk is free and not handed out. Waking it
 *            (every part free again, usable on the request's stream) lends
 *            the parts again: no backend call.
 * So a loop whose peak needs the range and whose other phases need the
 * holes pays the map calls once: a request that nothing fits puts the free
 * active ranges to sleep (no call) and searches again; the next peak wakes
 * them. A dormant range whose pages a new range needs (work on its stream
 * may still use its address), or the least recently used beyond
 * AA__STITCH_MAX ranges (its address idle), is *retired*: its handles are
 * free for new ranges as if it were gone, its aliases stay, and a new range
 * that would map exactly its handles is that range, woken (no call): a loop
 * of peaks of different sizes from the same holes (the replay's phases
 * trace) pays each range's map calls once. Aliases are undone (the range
 * destroyed), once no work may use its address, on release, trim and the
 * OOM retry, when the page unmapper needs a dormant range's page, and least
 * recently used first beyond AA__STITCH_KEPT retired ranges.
 *
 * Stitching uses only free chunks usable on the request's stream with no
 * event of their own, and only whole handles (map runs) inside them:
 * cuMemMap maps a handle whole. A handle is mapped by any number of ranges
 * (its page record's `nalias`), held by at most one not retired (`nheld`),
 * lent by at most one at a time (a lent part is not free).
 * Entry points (large_internal.h): aa__lg_stitch_take, aa__lg_stitch_freed,
 * aa__lg_stitch_rest, aa__lg_stitch_retire_dormant, aa__lg_stitch_release,
 * aa__lg_stitch_page_gone, aa__lg_stitch_destroy. Under the large path's mu.
 */
#include <stdlib.h>
#include <string.h>

#include "large_internal.h"

/* The most stitched ranges at once, not counting the retired ones, of
 * which at most AA__STITCH_KEPT are kept; and the handles one range joins
 * (map calls paid once each). A retired range holds no pages, only its
 * aliases and address space, and revives with no call when a new range
 * would map exactly its handles: keeping 64 rather than 16 cut the
 * replay's alias calls by 8-40% with stitching and with new pages (serve
 * 2,073 -> 1,290, sidepipe 918 -> 552, moe 395 -> 264) at the same
 * reserved on every trace and delay; 128 or 256 saved no more, 32 and 48
 * less (BENCHMARKS.md, "More retired ranges kept"). */
#define AA__STITCH_MAX 16
#define AA__STITCH_KEPT 64
/* The most retired ranges at all: a retired range that work may still use
 * is not trimmed (its aliases wait for its address), so a dormant one that
 * is busy retires only below this (aa__lg_stitch_retire_dormant), twice
 * the kept ones so that the idle ones kept never block a busy one. The
 * replay's holes-k4096-s1 trace at --event-delay-us 5000 retires up to 34
 * at once (sidepipe and prefetch 18). */
#define AA__STITCH_RETIRED 128
#define AA__STITCH_PARTS 256
/* A free range serves a request down to this share of its size. */
#define AA__STITCH_FIT_NUM 7
#define AA__STITCH_FIT_DEN 8
/* A range of holes and new pages (large.stitch_grow, aa__lg_stitch_short)
 * only where the free pages it would take are at least a quarter of the
 * request: the replay's traces at a quarter saved 532 MiB over fourteen
 * traces against 442 with no bound, 358 at three eighths (BENCHMARKS.md,
 * "Stitching with new pages") */
#define AA__STITCH_GROW_DEN 4
/* Stitching's time budget: the alias calls' time a pool may spend at once
 * before the share (aa_pool_config.large_stitch_share) bounds them: a
 * loop's first steps make most of its ranges. At 50 ms the replay's
 * traces keep every figure of no bound (at 1% and 1 ms event delay too);
 * at 10 ms serve reserved 876 MiB against 706, sidepipe 1,134 against 890
 * (more than with no stitching: ranges made, then growth beside them). */
#define AA__STITCH_BURST_NS ((int64_t)50 * 1000 * 1000)

bool aa__lg_stitch_usable(const aa_pool *pool) {
  const aa_backend_ops *o = pool->backend->ops;
  return pool->large->vmm_page != 0 && o->map_alias != NULL && o->unmap_alias != NULL;
}

/* ------------------------------------------------------------ budget */

/* Every alias call is timed by the pool's clock and paid from tokens that
 * accrue at the share of the time passed (at most a burst ahead): a loop
 * whose ranges are made again every step (sizes that change, streams
 * behind the host) stops paying alias calls beyond its share, and its
 * requests grow the pool as without stitching; one that makes its ranges
 * once never meets the bound. On an H200 a side-stream pipeline with 6 ms
 * steps and 34 alias calls a step ran at 0.64x with large.stitch_grow
 * (16 retired ranges kept then; BENCHMARKS.md, "Stitching's time budget"). */

static uint64_t now_ns(const aa__large *L) {
  return L->clock != NULL ? L->clock(L->clock_user) : aa_now_ns();
}

/* The time since t0 went into alias calls. */
static void budget_spend(aa__large *L, uint64_t t0) {
  uint64_t t = now_ns(L), d = t > t0 ? t - t0 : 0;
  L->alias_ns += d;
  L->stitch_tokens -= (double)d;
  if (L->stitch_tokens < -(double)AA__STITCH_BURST_NS)
    L->stitch_tokens = -(double)AA__STITCH_BURST_NS; /* a release's many calls, a clock gone
                                                      * wild: a debt repaid within a burst's time */
}

/* The tokens refilled for the time passed; whether any are left. */
static bool budget_left(aa__large *L) {
  if (L->stitch_share >= 1.0)
    return true;
  uint64_t t = now_ns(L);
  if (!L->stitch_budget_started) {
    L->stitch_budget_started = true;
    L->stitch_budget_at = t;
  } else if (t > L->stitch_budget_at) {
    double add = (double)(t - L->stitch_budget_at) * L->stitch_share;
    L->stitch_tokens += add;
    if (L->stitch_tokens > (double)AA__STITCH_BURST_NS)
      L->stitch_tokens = (double)AA__STITCH_BURST_NS;
    L->stitch_budget_at = t;
  }
  return L->stitch_tokens > 0;
}

bool aa__lg_stitch_budget_ok(aa_pool *pool) {
  aa__large *L = pool->large;
  if (budget_left(L))
    return true;
  if (!L->stitch_refused) {
    L->stitch_refused = true;
    L->stitch_deferred++;
  }
  return false;
}

void aa__lg_stitch_budget_init(aa__large *L, double share) {
  L->stitch_share = share;
  L->stitch_tokens = (double)AA__STITCH_BURST_NS;
}

/* ------------------------------------------------------------ states */

/* Whether free active range s may give its parts back: its chunk free,
 * its record_stream'd streams' events done (usable on its own stream).
 * The parts then are what the chunk is: freed on its stream (usable there
 * at once, elsewhere once that stream's work is done, as any free chunk),
 * or usable everywhere. The event on its own stream (recorded at the free,
 * aa__lg_stitch_freed) need not have completed: it stays with the chunk
 * for address_idle. */
static bool work_done(aa_pool *pool, aa__seg *s) {
  return s->first->free && aa__lg_usable(pool, s->first, s->first->stream);
}

/* Whether no work may still use range s's address: its chunk usable on
 * every stream. Its aliases are undone only then, as the expandable path
 * unmaps only pages of chunks whose work has completed. */
static bool address_idle(aa_pool *pool, aa__seg *s) {
  return s->first->free && aa__lg_usable_anywhere(pool, s->first);
}

/* Active range s's lent parts back to their holes as free chunks, merged
 * with their free neighbours (the range's work is done). */
static void give_back(aa_pool *pool, aa__seg *s) {
  aa__large *L = pool->large;
  aa__stitch *st = s->st;
  for (size_t i = 0; i < st->nparts; i++) {
    aa__chunk *o = st->parts[i].from;
    st->parts[i].from = NULL;
    if (o == NULL || o->lent == NULL)
      continue; /* never lent (a failed make), or given back with an earlier part */
    aa__assert(o->lent == s && !o->free);
    o->lent = NULL;
    o->free = 1;
    /* the range's stream state (its work done: usable everywhere; a range
     * undone as it was made: as its parts were) */
    o->any = s->first->any;
    o->stream = s->first->stream;
    o->ev = NULL;
    o->freed_at = L->frees;
    aa__lg_coalesce_insert(pool, o);
  }
}

static void unlink_range(aa_pool *pool, aa__seg *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    pool->large->stitches = s->next;
  if (s->next)
    s->next->prev = s->prev;
  s->next = s->prev = NULL;
}

/* Range s first on the list, as the newest. */
static void link_range(aa_pool *pool, aa__seg *s) {
  aa__large *L = pool->large;
  s->next = L->stitches;
  if (L->stitches)
    L->stitches->prev = s;
  L->stitches = s;
}

/* Destroys range s: its parts back to their holes when active and
 * `give`, its aliases undone, page map, address space; its chunk record to
 * the spares. Without `give` (the pool is being destroyed) lent parts stay
 * as they are. */
/* Undoes the aliases of parts[0..n), last first, timed for the budget:
 * their pages no longer mapped there, and held no more where `held` (a
 * range not retired). */
static void unalias_parts(aa_pool *pool, aa__stitch_part *parts, size_t n, bool held) {
  aa_backend *b = pool->backend;
  aa__large *L = pool->large;
  uint64_t t0 = now_ns(L);
  for (size_t i = n; i-- > 0;) {
    aa__stitch_part *pt = &parts[i];
    b->ops->unmap_alias(b, (void *)pt->at, pt->len, pt->pg->handle);
    aa__assert(pt->pg->nalias > 0 && (!held || pt->pg->nheld > 0));
    pt->pg->nalias--;
    pt->pg->nheld -= held;
  }
  budget_spend(L, t0);
  L->alias_unmaps += n;
}

static void range_destroy(aa_pool *pool, aa__seg *s, bool give) {
  aa__large *L = pool->large;
  aa_backend *b = pool->backend;
  aa__stitch *st = s->st;
  size_t size = s->h.end - s->h.base;
  if (!st->dormant) {
    if (give)
      give_back(pool, s);
    L->stitch_bytes -= size;
  } else {
    L->ndormant--;
    L->nretired -= st->retired;
  }
  unalias_parts(pool, st->parts, st->nparts, !st->retired);
  aa__pm_remove(pool, &s->h);
  b->ops->va_release(b, (void *)s->h.base, size);
  unlink_range(pool, s);
  L->nstitch--;
  L->stitch_dissolved++;
  aa__chunk *c = s->first; /* its events and streams go with it */
  aa__event_release(pool, c->ev);
  for (uint32_t i = 0; i < c->nxev; i++)
    aa__event_release(pool, c->xev[i]);
  free(c->xev);
  free(c->xs);
  aa__lg_chunk_put(pool, c);
  free(st->parts);
  free(st);
  free(s);
}

/* Free active range s whose work is done goes to sleep: parts back to the
 * holes, aliases kept. */
/* Active range s dormant: its parts back in their holes, its aliases kept. */
static void to_dormant(aa_pool *pool, aa__seg *s) {
  give_back(pool, s);
  s->st->dormant = true;
  pool->large->stitch_bytes -= s->h.end - s->h.base;
  pool->large->ndormant++;
}

static void rest(aa_pool *pool, aa__seg *s) {
  to_dormant(pool, s);
  pool->large->stitch_rests++;
}

size_t aa__lg_stitch_rest(aa_pool *pool) {
  size_t got = 0;
  for (aa__seg *s = pool->large->stitches; s; s = s->next) {
    if (!s->st->dormant && work_done(pool, s)) {
      got += s->h.end - s->h.base;
      rest(pool, s);
    }
  }
  return got;
}

/* The least recently used retired range whose address is idle (that may
 * be destroyed), or NULL. */
static aa__seg *lru_retired(aa_pool *pool) {
  aa__seg *best = NULL;
  for (aa__seg *s = pool->large->stitches; s; s = s->next) {
    if (s->st->retired && (best == NULL || s->st->used_at < best->st->used_at) &&
        address_idle(pool, s))
      best = s;
  }
  return best;
}

/* Destroys the least recently used retired ranges beyond AA__STITCH_KEPT,
 * of those whose address is idle: one that work may still use stays (its
 * aliases with it) until a later trim finds it idle. */
static void trim_retired(aa_pool *pool) {
  while (pool->large->nretired > AA__STITCH_KEPT) {
    aa__seg *s = lru_retired(pool);
    if (s == NULL)
      return;
    range_destroy(pool, s, true);
  }
}

/* Retires range s, dormant or free with its work done: parts back to their
 * holes, its handles free for new ranges (as though it were destroyed),
 * its aliases kept. Its address need not be idle: its parts went back as
 * chunks freed on its stream (give_back), which a new range lends on that
 * stream at once and on another once that stream's work is done, as any
 * hole; only undoing its aliases waits for the address (lru_retired,
 * aa__lg_stitch_release). The caller trims the retired ones. */
static void retire(aa_pool *pool, aa__seg *s) {
  aa__large *L = pool->large;
  aa__assert(!s->st->retired && (s->st->dormant || work_done(pool, s)));
  if (!s->st->dormant)
    rest(pool, s);
  for (size_t i = 0; i < s->st->nparts; i++) {
    aa__assert(s->st->parts[i].pg->nheld > 0);
    s->st->parts[i].pg->nheld--;
  }
  s->st->retired = true;
  L->nretired++;
}

/* Every dormant range retires, its address idle or not: on a GPU the host
 * runs ahead of the stream, and a range freed a step ago whose event has
 * not completed yet held its pages from every new range, so that the pool
 * mapped new ones (the replay's H100 traces at --event-delay-us 5000:
 * offload 1,696 -> 1,724 MiB against 1,616 with no delay, sidepipe 1,040
 * -> 1,244; with the rule 1,616 and 1,088). A busy one retires only below
 * AA__STITCH_RETIRED retired ones (the least recently used idle ones
 * destroyed to make room): the trim destroys only idle ones, so that a
 * loop far ahead of its stream, retiring each range it stitched for the
 * next, kept every one with its aliases and address space until the
 * stream caught up (test_core_stitch retired_bounded_while_busy); at the
 * bound it stays dormant, its pages held, as before the rule. */
size_t aa__lg_stitch_retire_dormant(aa_pool *pool) {
  aa__large *L = pool->large;
  size_t n = 0;
  for (aa__seg *s = L->stitches, *nx; s; s = nx) {
    nx = s->next;
    if (!s->st->dormant || s->st->retired)
      continue;
    if (L->nretired >= AA__STITCH_RETIRED && !address_idle(pool, s)) {
      for (aa__seg *old; L->nretired >= AA__STITCH_RETIRED && (old = lru_retired(pool));)
        range_destroy(pool, old, true); /* retired, so not s */
      nx = s->next;
      if (L->nretired >= AA__STITCH_RETIRED)
        continue; /* every retired one busy too: s stays dormant */
    }
    retire(pool, s);
    n++;
  }
  trim_retired(pool);
  return n;
}

size_t aa__lg_stitch_release(aa_pool *pool) {
  size_t got = 0;
  for (aa__seg *s = pool->large->stitches, *nx; s; s = nx) {
    nx = s->next;
    bool dormant = s->st->dormant;
    if ((dormant || work_done(pool, s)) && address_idle(pool, s)) {
      got += dormant ? 0 : s->h.end - s->h.base;
      range_destroy(pool, s, true);
    }
  }
  return got;
}

/* Whether range s maps page record pg. */
static bool maps_page(const aa__seg *s, const aa__seg *pg) {
  for (size_t i = 0; i < s->st->nparts; i++) {
    if (s->st->parts[i].pg == pg)
      return true;
  }
  return false;
}

void aa__lg_stitch_page_gone(aa_pool *pool, aa__seg *pg) {
  /* a page is unmapped only from a free chunk whose work has completed
   * (usable everywhere): the ranges that map it are dormant (an active
   * one's part is lent), and the part went back with each one's stream,
   * so that stream's work, which used the alias, is done too */
  for (aa__seg *s = pool->large->stitches, *nx; s && pg->nalias > 0; s = nx) {
    nx = s->next;
    if (!maps_page(s, pg))
      continue;
    aa__assert(s->st->dormant);
    range_destroy(pool, s, true);
  }
  aa__assert(pg->nalias == 0);
}

void aa__lg_stitch_destroy(aa_pool *pool) {
  while (pool->large->stitches)
    range_destroy(pool, pool->large->stitches, false);
}

/* The least recently used range not retired that may retire (dormant, or
 * free with its work done, its address idle), or NULL. */
static aa__seg *lru_free(aa_pool *pool) {
  aa__seg *best = NULL;
  for (aa__seg *s = pool->large->stitches; s; s = s->next) {
    if ((best == NULL || s->st->used_at < best->st->used_at) && !s->st->retired &&
        (s->st->dormant || work_done(pool, s)) && address_idle(pool, s))
      best = s;
  }
  return best;
}

/* ------------------------------------------------------------ make */

/* Whole handles of one free chunk to lend: pages [i0, i1) of its segment,
 * the first run of mapped handles wholly inside it. */
typedef struct cand {
  aa__chunk *c;
  size_t i0, i1;
} cand;

/* The first contiguous run of whole mapped handles inside free chunk c,
 * up to `want` bytes; false when none. */
static bool whole_handles(const aa_pool *pool, const aa__chunk *c, size_t want, size_t *i0,
                          size_t *i1) {
  const aa__seg *s = c->seg;
  size_t ps = pool->large->vmm_page;
  uintptr_t sb = s->h.base;
  size_t lo = (c->base - sb + ps - 1) / ps, hi = (c->base + c->size - sb) / ps;
  if (hi > s->hwm)
    hi = s->hwm;
  size_t a = SIZE_MAX, e = 0;
  for (size_t i = lo; i < hi;) {
    const aa__seg *pg = s->pages[i];
    if (pg == NULL) {
      if (a != SIZE_MAX)
        break;
      i++;
      continue;
    }
    size_t r0 = (pg->h.base - sb) / ps, r1 = (pg->h.end - sb) / ps;
    if (r0 < lo || r1 > hi || pg->nheld > 0) { /* reaches outside the chunk, or
                                                 * a held range's: not lendable */
      if (a != SIZE_MAX)
        break;
      i = r1;
      continue;
    }
    if (a == SIZE_MAX)
      a = r0;
    e = r1;
    i = r1;
    if ((e - a) * ps >= want)
      break;
  }
  if (a == SIZE_MAX)
    return false;
  *i0 = a;
  *i1 = e;
  return true;
}

/* Cuts free chunk c (out of the bins) at address `at` (inside it): c keeps
 * the lower part, the upper part is returned, free and out of the bins,
 * with c's stream state. NULL when memory is short. */
static aa__chunk *cut(aa_pool *pool, aa__chunk *c, uintptr_t at) {
  aa__assert(c->free && at > c->base && at < c->base + c->size && c->ev == NULL);
  aa__chunk *r = aa__lg_chunk_get(pool);
  if (r == NULL)
    return NULL;
  r->seg = c->seg;
  r->base = at;
  r->size = c->base + c->size - at;
  r->free = 1;
  r->any = c->any;
  r->stream = c->stream;
  r->freed_at = c->freed_at;
  r->room = c->room;
  c->size = at - c->base;
  r->prev = c;
  r->next = c->next;
  if (c->next)
    c->next->prev = r;
  c->next = r;
  return r;
}

/* Undoes cut(pool, c, at) that returned r (r out of the bins). */
static void uncut(aa_pool *pool, aa__chunk *c, aa__chunk *r) {
  aa__assert(c->next == r && r->free);
  c->size += r->size;
  c->next = r->next;
  if (r->next)
    r->next->prev = c;
  aa__lg_chunk_put(pool, r);
}

/* Lends pages [i0, i1) of free chunk c (in the bins) to range s: the part
 * before and after go back to the bins, the middle becomes lent. Returns
 * the lent chunk, or NULL (nothing changed) when memory is short. */
static aa__chunk *lend(aa_pool *pool, aa__chunk *c, size_t i0, size_t i1, aa__seg *s) {
  size_t ps = pool->large->vmm_page;
  uintptr_t a = c->seg->h.base + i0 * ps, e = c->seg->h.base + i1 * ps;
  aa__chunk *mid = c, *tail = NULL;
  aa__lg_bin_remove(pool, c);
  if (a > c->base) {
    mid = cut(pool, c, a);
    if (mid == NULL) {
      aa__lg_bin_insert(pool, c);
      return NULL;
    }
  }
  if (e < mid->base + mid->size) {
    tail = cut(pool, mid, e);
    if (tail == NULL) { /* undo the first cut */
      if (mid != c)
        uncut(pool, c, mid);
      aa__lg_bin_insert(pool, c);
      return NULL;
    }
    aa__lg_bin_insert(pool, tail);
  }
  if (mid != c)
    aa__lg_bin_insert(pool, c);
  mid->free = 0;
  mid->lent = s;
  return mid;
}

/* The free chunk of origin segment o that holds part pt's pages whole, if
 * it may be lent for a request on `stream` (unparked, no events, usable
 * there), else NULL. A walk of o's chunks: only on the way to growing. */
static aa__chunk *part_home(aa_pool *pool, const aa__stitch_part *pt, aa_stream stream) {
  const aa__seg *pg = pt->pg;
  aa__seg *o = pg->owner;
  for (aa__chunk *c = o->first; c; c = c->next) {
    if (c->base + c->size <= pg->h.base)
      continue;
    bool whole = c->base <= pg->h.base && pg->h.end <= c->base + c->size;
    if (!whole || !c->free || c->parked || c->lent != NULL || c->nxev > 0)
      return NULL;
    /* usable there (its freeing stream's work done, asked as find_fit
     * asks), and no event of its own left pending */
    if (!aa__lg_usable(pool, c, stream) || c->ev != NULL)
      return NULL;
    return c;
  }
  return NULL;
}

/* Lends each part of range s (active, its parts' `from` NULL) from the free
 * chunk that holds it; false when one cannot be (then the parts lent so far
 * stay lent: the caller destroys or puts the range to sleep). */
static bool lend_parts(aa_pool *pool, aa__seg *s) {
  size_t ps = pool->large->vmm_page;
  for (size_t i = 0; i < s->st->nparts; i++) {
    aa__stitch_part *pt = &s->st->parts[i];
    aa__seg *o = pt->pg->owner;
    aa__chunk *home = part_home(pool, pt, s->first->stream);
    if (home == NULL)
      return false;
    size_t i0 = (pt->pg->h.base - o->h.base) / ps, i1 = (pt->pg->h.end - o->h.base) / ps;
    aa__chunk *mid = lend(pool, home, i0, i1, s);
    if (mid == NULL)
      return false;
    pt->from = mid;
  }
  return true;
}

/* Dormant range s active again for a request on `stream` (`any`: its
 * parts all usable everywhere): its chunk's stream state, the counts, its
 * parts lent. False when a cut fails (memory short): the caller undoes it. */
static bool to_active(aa_pool *pool, aa__seg *s, aa_stream stream, bool any) {
  s->first->any = any;
  s->first->stream = stream;
  s->st->dormant = false;
  pool->large->ndormant--;
  pool->large->stitch_bytes += s->h.end - s->h.base;
  return lend_parts(pool, s);
}

/* Whether dormant range s can wake for a request on `stream`: every
 * part's pages free in one chunk usable there; *any: all usable everywhere. */
static bool can_wake(aa_pool *pool, const aa__seg *s, aa_stream stream, bool *any) {
  *any = true;
  for (size_t i = 0; i < s->st->nparts; i++) {
    const aa__chunk *home = part_home(pool, &s->st->parts[i], stream);
    if (home == NULL)
      return false;
    *any &= home->any != 0;
  }
  return true;
}

/* Wakes dormant range s for a request on `stream`: its parts lent again.
 * No backend call. False (still dormant) when it cannot. */
static bool wake(aa_pool *pool, aa__seg *s, aa_stream stream) {
  bool any;
  if (!can_wake(pool, s, stream, &any))
    return false;
  aa__chunk *c = s->first;
  /* its state from the free (its event there may still be pending: a
   * range rests once its record_stream'd work is done, work_done) */
  bool any0 = c->any;
  aa_stream stream0 = c->stream;
  if (!to_active(pool, s, stream, any)) { /* memory short for a cut: back to sleep */
    to_dormant(pool, s);
    c->any = any0; /* not 1: address_idle would undo its aliases under pending work */
    c->stream = stream0;
    return false;
  }
  pool->large->stitch_wakes++;
  return true;
}

/* The retired range that maps exactly the handles of candidates v[0, nv)
 * (nparts of them), in order, or NULL. */
static aa__seg *retired_same(aa_pool *pool, const cand *v, size_t nv, size_t nparts) {
  size_t ps = pool->large->vmm_page;
  for (aa__seg *s = pool->large->stitches; s; s = s->next) {
    if (!s->st->retired || s->st->nparts != nparts)
      continue;
    size_t m = 0;
    bool same = true;
    for (size_t k = 0; k < nv && same; k++) {
      const aa__seg *o = v[k].c->seg;
      for (size_t i = v[k].i0; i < v[k].i1 && same; i = (o->pages[i]->h.end - o->h.base) / ps)
        same = s->st->parts[m++].pg == o->pages[i];
    }
    if (same)
      return s;
  }
  return NULL;
}

/* Retired range s serves a request on `stream` again, as the new range
 * that would map exactly its handles (all free, usable there; `any`: all
 * usable everywhere): held again, first on the list as a new range is,
 * its parts lent. No backend call. False when a cut fails (memory short):
 * s is destroyed, as a new range is then, or, while work may still use its
 * address, retired again. */
static bool revive(aa_pool *pool, aa__seg *s, aa_stream stream, bool any) {
  aa__large *L = pool->large;
  aa__chunk *c = s->first;
  bool any0 = c->any;
  aa_stream stream0 = c->stream;
  for (size_t i = 0; i < s->st->nparts; i++)
    s->st->parts[i].pg->nheld++;
  s->st->retired = false;
  L->nretired--;
  unlink_range(pool, s);
  link_range(pool, s);
  c->freed_at = L->frees;
  if (!to_active(pool, s, stream, any)) { /* memory short for a cut */
    to_dormant(pool, s);
    c->any = any0; /* its state from the free, for address_idle */
    c->stream = stream0;
    if (address_idle(pool, s)) {
      range_destroy(pool, s, true); /* as a new range is then */
      return false;
    }
    /* work may still use its address: retired again, as it was */
    for (size_t i = 0; i < s->st->nparts; i++)
      s->st->parts[i].pg->nheld--;
    s->st->retired = true;
    L->nretired++;
    return false;
  }
  L->stitch_wakes++;
  L->stitch_hits++;
  return true;
}

/* One part of a new range mapped at its address: its page held. */
static void part_mapped(aa__large *L, aa__stitch_part *pt) {
  aa__assert(pt->pg->nheld == 0);
  pt->pg->nalias++;
  pt->pg->nheld++;
  L->alias_maps++;
}

/* Maps a new range's parts[0..n) at their addresses (side by side): in one
 * map_alias_run call where the backend offers it (on CUDA one access grant
 * for the range, not one per handle), else handle by handle. *mapped: the
 * parts mapped, all of them or, on failure, those the caller undoes. */
static bool map_parts_untimed(aa_pool *pool, aa__stitch_part *parts, size_t n, size_t *mapped) {
  aa_backend *b = pool->backend;
  aa__large *L = pool->large;
  *mapped = 0;
  if (b->ops->map_alias_run != NULL && n > 1) {
    void *hs[AA__STITCH_PARTS];
    size_t lens[AA__STITCH_PARTS];
    aa__assert(n <= AA__STITCH_PARTS);
    for (size_t i = 0; i < n; i++) {
      hs[i] = parts[i].pg->handle;
      lens[i] = parts[i].len;
    }
    if (b->ops->map_alias_run(b, (void *)parts[0].at, hs, lens, n) != AA_OK)
      return false; /* nothing of it mapped */
    for (; *mapped < n; (*mapped)++)
      part_mapped(L, &parts[*mapped]);
    L->alias_runs++;
    return true;
  }
  for (; *mapped < n; (*mapped)++) {
    aa__stitch_part *pt = &parts[*mapped];
    if (b->ops->map_alias(b, (void *)pt->at, pt->len, pt->pg->handle) != AA_OK)
      return false;
    part_mapped(L, pt);
  }
  return true;
}

static bool map_parts(aa_pool *pool, aa__stitch_part *parts, size_t n, size_t *mapped) {
  uint64_t t0 = now_ns(pool->large);
  bool ok = map_parts_untimed(pool, parts, n, mapped);
  budget_spend(pool->large, t0);
  return ok;
}

/* The whole free handles a new range of `want` bytes on `stream` would
 * map: the holes, smallest bins first (the pieces least likely to serve
 * anything else), and of the free chunks with unmapped pages under them
 * only `grow` (range_new). With v NULL only counted (*got, *nv, *nparts;
 * *holes, when asked, the bytes of the chunks other than grow); else *v
 * gets the candidates (the caller frees it). false when memory is short for
 * the list. */
static bool collect(aa_pool *pool, size_t want, aa_stream stream, const aa__chunk *grow, cand **pv,
                    size_t *pnv, size_t *pgot, size_t *pnparts, bool *pall_any, size_t *pholes) {
  aa__large *L = pool->large;
  size_t ps = L->vmm_page;
  cand *v = NULL;
  size_t nv = 0, capv = 0, got = 0, nparts = 0, holes = 0;
  bool all_any = true;

  for (unsigned bn = 0; bn < AA__LARGE_BINS && got < want; bn++) {
    for (aa__chunk *c = L->bins[bn]; c && got < want; c = c->fnext) {
      size_t i0, i1;
      if (c->seg->pages == NULL || c->nxev > 0 || c->size < ps)
        continue;
      /* usable on `stream` (a hole freed on another stream once that
       * stream's work is done: asked as find_fit asks), no event pending */
      if (!aa__lg_usable(pool, c, stream) || c->ev != NULL)
        continue;
      if (c != grow && aa__lg_unmapped_under(pool, c, c->size, 0) > 0)
        continue; /* another free end: its pages are that growth's */
      if (!whole_handles(pool, c, want - got, &i0, &i1))
        continue;
      size_t np = 0;
      for (size_t i = i0; i < i1; i = (c->seg->pages[i]->h.end - c->seg->h.base) / ps)
        np++;
      if (nparts + np > AA__STITCH_PARTS)
        continue;
      if (pv != NULL && nv == capv) {
        size_t nc = capv ? capv * 2 : 16;
        cand *nvv = realloc(v, nc * sizeof *nvv);
        if (nvv == NULL) {
          free(v);
          return false;
        }
        v = nvv;
        capv = nc;
      }
      if (pv != NULL)
        v[nv] = (cand){c, i0, i1};
      nv++;
      got += (i1 - i0) * ps;
      if (c != grow)
        holes += (i1 - i0) * ps;
      nparts += np;
      all_any &= c->any != 0;
    }
  }
  if (pv != NULL)
    *pv = v;
  *pnv = nv;
  *pgot = got;
  *pnparts = nparts;
  if (pall_any != NULL)
    *pall_any = all_any;
  if (pholes != NULL)
    *pholes = holes;
  return true;
}

/* A new free range of at least `need` bytes from whole free handles usable
 * on `stream`, its chunk returned (not binned); NULL when the holes do not
 * hold enough, at the bound, or a backend call failed (nothing changed).
 * Of the free chunks with unmapped pages under them (a segment's free end,
 * where the pool grows, or pages given back), only `grow` lends: the one
 * the pool would map new pages under for this request. Another one's
 * mapped pages serve the next request that grows there with fewer new
 * pages; lent, that request maps new ones (the replay's kvgen trace: a
 * range took 4 MiB of the small requests' free end, 458 MiB reserved
 * against 456 without stitching; 456 with this rule). */
static aa__chunk *range_new(aa_pool *pool, size_t need, aa_stream stream, const aa__chunk *grow) {
  aa__large *L = pool->large;
  aa_backend *b = pool->backend;
  size_t ps = L->vmm_page;
  size_t want = aa__lg_round_up(need, ps);
  cand *v = NULL;
  size_t nv = 0, got = 0, nparts = 0;
  aa__seg *s = NULL;
  aa__chunk *sc = NULL;
  void *base = NULL;
  size_t mapped = 0;
  bool all_any = true;

  if (L->nstitch - L->nretired >= AA__STITCH_MAX) {
    /* no range retired for one that the budget would refuse: the kept
     * ones serve later with no call, and a trim's unmaps cost time too */
    if (!aa__lg_stitch_budget_ok(pool))
      return NULL;
    aa__seg *old = lru_free(pool);
    if (old == NULL)
      return NULL;
    retire(pool, old);
    trim_retired(pool);
  }
  if (!collect(pool, want, stream, grow, &v, &nv, &got, &nparts, &all_any, NULL))
    goto fail;
  if (got < want || nv < 2)
    goto fail; /* one chunk's handles alone: find_fit's business */
  s = retired_same(pool, v, nv, nparts);
  if (s != NULL) { /* a retired range maps exactly these: it wakes */
    free(v);
    return revive(pool, s, stream, all_any) ? s->first : NULL;
  }
  if (!aa__lg_stitch_budget_ok(pool))
    goto fail; /* its alias calls over the time budget: the pool grows instead */
  s = calloc(1, sizeof *s);
  if (s != NULL)
    s->st = calloc(1, sizeof *s->st);
  if (s == NULL || s->st == NULL)
    goto fail;
  s->st->parts = calloc(nparts, sizeof *s->st->parts);
  sc = aa__lg_chunk_get(pool);
  if (s->st->parts == NULL || sc == NULL)
    goto fail;
  if (b->ops->va_reserve(b, got, &base) != AA_OK) {
    base = NULL;
    goto fail;
  }
  /* the aliases, in order */
  size_t off = 0, np = 0;
  for (size_t k = 0; k < nv; k++) {
    aa__seg *o = v[k].c->seg;
    for (size_t i = v[k].i0; i < v[k].i1;) {
      aa__seg *pg = o->pages[i];
      size_t len = pg->h.end - pg->h.base;
      aa__stitch_part *pt = &s->st->parts[np++];
      pt->pg = pg;
      pt->at = (uintptr_t)base + off;
      pt->len = len;
      off += len;
      i += len / ps;
    }
  }
  aa__assert(off == got && np == nparts);
  if (!map_parts(pool, s->st->parts, nparts, &mapped))
    goto fail;
  s->h.base = (uintptr_t)base;
  s->h.end = (uintptr_t)base + got;
  s->h.kind = AA__SPAN_LARGE;
  if (aa__pm_insert(pool, &s->h) != AA_OK)
    goto fail;
  /* the range exists: linked, active, its chunk free; a cut that fails
   * (memory short) destroys it, the parts lent so far given back */
  s->st->nparts = nparts;
  sc->seg = s;
  sc->base = s->h.base;
  sc->size = got;
  sc->free = 1;
  sc->any = all_any;
  sc->stream = stream;
  sc->freed_at = L->frees;
  s->first = sc;
  link_range(pool, s);
  L->nstitch++;
  L->stitch_bytes += got;
  free(v);
  v = NULL;
  if (!lend_parts(pool, s)) {
    range_destroy(pool, s, true);
    return NULL;
  }
  L->stitches_made++;
  return sc;
fail:
  if (mapped > 0)
    unalias_parts(pool, s->st->parts, mapped, true);
  if (base != NULL)
    b->ops->va_release(b, base, got);
  if (sc != NULL)
    aa__lg_chunk_put(pool, sc);
  if (s != NULL && s->st != NULL)
    free(s->st->parts);
  if (s != NULL)
    free(s->st);
  free(s);
  free(v);
  return NULL;
}

/* ------------------------------------------------------------ entry points */

size_t aa__lg_stitch_short(aa_pool *pool, size_t need, aa_stream stream, const aa__chunk *grow) {
  aa__large *L = pool->large;
  size_t want = aa__lg_round_up(need, L->vmm_page);
  size_t nv, got, nparts, holes;
  if (grow == NULL)
    return 0;
  if (L->nstitch - L->nretired >= AA__STITCH_MAX && lru_free(pool) == NULL)
    return 0; /* no range can be made */
  (void)collect(pool, want, stream, grow, NULL, &nv, &got, &nparts, NULL, &holes);
  /* at least one hole besides grow's pages (else it is plain growth), and
   * the new pages' handles too (one a page at most) within the bound */
  if (holes == 0 || got >= want || nparts + (want - got) / L->vmm_page > AA__STITCH_PARTS ||
      got < want / AA__STITCH_GROW_DEN)
    return 0;
  return want - got;
}

aa__chunk *aa__lg_stitch_take(aa_pool *pool, size_t need, aa_stream stream,
                              const aa__chunk *grow) {
  aa__large *L = pool->large;
  aa__seg *best = NULL;
  /* a range of about this size first (a loop's next iteration): a free
   * active one, else a dormant one that can wake; the smallest that fits */
  for (int dormant = 0; dormant < 2 && best == NULL; dormant++) {
    for (aa__seg *s = L->stitches; s; s = s->next) {
      aa__chunk *c = s->first;
      size_t sz = c->size;
      bool any;
      if (s->st->dormant != (dormant == 1) || s->st->retired || !c->free || sz < need ||
          need < sz / AA__STITCH_FIT_DEN * AA__STITCH_FIT_NUM)
        continue;
      if (best != NULL && sz >= best->first->size)
        continue;
      if (dormant ? can_wake(pool, s, stream, &any) : aa__lg_usable(pool, c, stream))
        best = s;
    }
  }
  if (best != NULL && best->st->dormant && !wake(pool, best, stream))
    best = NULL;
  aa__chunk *c = best ? best->first : range_new(pool, need, stream, grow);
  if (c == NULL)
    return NULL;
  if (best != NULL)
    L->stitch_hits++;
  c->seg->st->used_at = ++L->stitch_clock;
  return c;
}

void aa__lg_stitch_freed(aa_pool *pool, aa__chunk *c) {
  aa__assert(c->free && c->seg->st != NULL && c->seg->first == c && c->next == NULL);
  c->seg->st->used_at = ++pool->large->stitch_clock;
  /* The event on the freeing stream now, not when address_idle first asks
   * (as a hole's is, lazily): asked then, on a GPU whose stream runs behind
   * the host, an event recorded then is still pending behind the work
   * queued since, and a dormant range that a new range needs the pages of
   * could not go (the pool grew instead: the replay's --event-delay-us 1000
   * on the H100 traces, phases 3,650 -> 3,854 MiB). One record per free of
   * a range's block. (record_stream'd: recorded with its streams'.) */
  aa_backend *b = pool->backend;
  if (pool->has_events && !c->any && c->ev == NULL && c->nxev == 0 &&
      b->ops->event_record(b, c->stream, &c->ev) != AA_OK)
    c->ev = NULL; /* recorded lazily when asked, as before */
}
