/*
 * large.c — requests above max_small.
 *
 * AA_LARGE_CACHE: segments (backend regions rounded up to 2 MiB) are cut
 * into chunks kept in address order per segment. Free chunks sit in size
 * bins (about four per doubling); allocation is best-fit within the first
 * bin that has a fit, splitting off the rest; free coalesces with free
 * neighbours whose stream state is compatible. Segments that are wholly free
 * go back to the backend once the cached bytes exceed large_cache_bytes.
 * AA_LARGE_PASSTHROUGH: one segment per request, returned at free.
 * AA_LARGE_EXPANDABLE: one segment is an address-space reservation (256 GiB
 * unless a request needs more) cut the same way, but its pages (the
 * backend's map granularity, 2 MiB on CUDA) are mapped only while a live
 * chunk or the cache needs them. Free neighbours always coalesce, since the
 * address space is contiguous; under a limit, on out-of-memory, on release
 * and trim and above large_cache_bytes, the whole pages inside free chunks
 * whose work has completed are unmapped (oldest-freed first), so memory
 * stranded in holes moves to where it is needed.
 *
 * Regions: requests of at most AA__LARGE_SMALL_MAX bytes are placed in
 * segments of their own (aa__seg.small_reqs; in expandable mode a second
 * reservation), apart from larger ones, so that a small block outliving
 * the large one cut before it does not leave a hole at each end of a run
 * of freed large blocks (docs/core.md, "Placement"); a small request takes
 * a hole between live large blocks before its own region grows
 * (find_fit_other).
 * Rooms (room_open): in expandable mode a mid-size request (1-10 MiB) cut
 * from the free end right after a live block at least six times its size
 * opens a 20 MiB room there for the mid-size requests that follow, which
 * larger requests pass over, so that blocks of that size outliving the
 * large ones beside them lie together instead of one at the end of each
 * large block's hole.
 * Parking (park_take/park): a chunk freed whole waits, unmerged, for an
 * exact-size request on its stream (one beside free memory only while no
 * exact hole of the size lies elsewhere). The per-thread large-block cache
 * (aa__ltc_*, large_ltc.c): a thread's free of a block it allocated, and its
 * next same-size request, without the lock; the chunk's `state` word,
 * changed only by compare-and-swap, settles races with other threads.
 *
 * Live chunks are found from their address through a hash table; the page
 * map gives the segment. Everything here runs under pool->large->mu but the
 * thread cache's hits.
 * Entry points: aa__large_alloc, aa__large_free, aa__large_release (here),
 * aa__ltc_alloc, aa__ltc_free (large_ltc.c), aa__ltc_flush (here).
 * Files, in floors that call only downward (large_internal.h lists them and
 * what they share; the ctest test_layers_large checks them): the chunk
 * structures (large_chunk.c; the hash and bins inline in the header), the
 * stitched ranges (large_stitch.c), segments and pages (large_seg.c), the
 * give-back of a block (large_give.c), the thread cache (large_ltc.c),
 * placement (large_take.c), the plan (large_plan.c), and on top the entry
 * points here, large_ipc.c and the AA_DEBUG 3 walk (large_check.c).
 *
 * Invariants, asserted by AA_DEBUG tier (core_internal.h): 1, cheap, where
 * a chunk changes hands (split, merge, bins, the hash, state words); 2,
 * internal, the lookups behind them (a chunk's bin, a hashed base, the
 * neighbours left unmerged); 3, expensive, aa__lg_check after every locked
 * alloc and free: each segment's chunks tile it in address order, every
 * free unparked chunk is in the bin of its size, the bins bitmap is set
 * exactly for the non-empty bins, the free bytes add up, the hash holds
 * exactly the chunks that are not free, and rooms lie only in expandable
 * segments of the larger requests' region.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/cuda.h" /* AA_STREAM_HOST */
#include "large_internal.h"

/* The thread cache's flush (large_ltc.c's blocks, given back here: the
 * full walk after it, AA_DEBUG 3, is a floor above the cache's). */
void aa__ltc_flush(aa_pool *pool, aa__tcache *tc) {
  if (tc->ltc.nheld == 0)
    return;
  pthread_mutex_lock(&pool->large->mu);
  while (tc->ltc.nheld > 0)
    aa__lg_ltc_drop_locked(pool, tc, tc->ltc.nheld - 1);
  LARGE_CHECK(pool);
  pthread_mutex_unlock(&pool->large->mu);
}

void *aa__large_alloc(aa_pool *pool, aa__tcache *tc, size_t size, aa_stream stream,
                      bool *retry) {
  size_t need = aa__lg_round_up(size, AA__LARGE_ALIGN);
  void *p = NULL;
  *retry = false;
  if (need < size) /* overflow */
    return NULL;
  pthread_mutex_lock(&pool->large->mu);
  /* A size the thread's cache could not serve: what it holds merges back
   * first, and what other threads have held idle since the last look (a
   * held block is for its holder's next same-size request, not for a phase
   * in which only others allocate). Before the pool takes more memory every
   * held block comes back (aa__lg_take). */
  while (tc != NULL && tc->ltc.nheld > 0)
    aa__lg_ltc_drop_locked(pool, tc, tc->ltc.nheld - 1);
  (void)aa__lg_ltc_reclaim(pool, tc, false);
  uint64_t seq = 0;
  if (pool->large->plan_on) {
    /* the learned placement (large_plan.c) sees every request: served at
     * its planned offset, or by the path below and recorded */
    seq = ++pool->large->alloc_seq;
    p = aa__lg_plan_alloc(pool, size, stream, seq);
    if (p != NULL)
      goto out;
  }
  aa__chunk *c = aa__lg_take(pool, tc, size, need, stream, retry);
  if (c != NULL) {
    aa__lg_count_out(pool, c->size, size);
    p = (void *)c->base;
    c->born = seq;
    if (pool->large->plan_on) /* its frees take the locked path, which the plan sees */
      aa__lg_plan_note(pool, 0, size, stream, seq);
    else if (tc != NULL && pool->cfg.large_mode != AA_LARGE_PASSTHROUGH)
      aa__lg_ltc_note(tc, p, c, atomic_load_explicit(&c->state, AA__RLX));
  }
out:
  LARGE_CHECK(pool);
  pthread_mutex_unlock(&pool->large->mu);
  return p;
}

static aa__chunk *find_container(aa__seg *seg, uintptr_t p) {
  for (aa__chunk *c = seg->first; c; c = c->next) {
    if (p >= c->base && p < c->base + c->size)
      return c;
  }
  return NULL;
}

int aa__large_free(aa_pool *pool, struct aa__span *sp, void *ptr, size_t size, aa_stream stream) {
  aa__seg *seg = (aa__seg *)sp; /* a large span is a segment's (or page's) header */
  if (seg != NULL && seg->owner != NULL)
    seg = seg->owner; /* a page of an expandable segment */
  aa_misuse what = 0;
  const char *msg = NULL;
  uintptr_t p = (uintptr_t)ptr;
  pthread_mutex_lock(&pool->large->mu);
  /* a block at its planned offset (the arena's own chunk is never the user's) */
  if (pool->large->plan != NULL && aa__lg_plan_owns(pool, p)) {
    int rc = aa__lg_plan_free(pool, p, size, stream, &what, &msg);
    if (rc != AA_OK)
      goto bad;
    LARGE_CHECK(pool);
    pthread_mutex_unlock(&pool->large->mu);
    return AA_OK;
  }
  aa__chunk *c = aa__lg_hash_find(pool, p, false);
  if (c == NULL) {
    aa__chunk *in = find_container(seg, p);
    if (in && (in->free || (in->lent != NULL && p == in->base))) { /* lent: a free chunk's
                                                                      * pages a stitched
                                                                      * range maps */
      what = AA_MISUSE_DOUBLE_FREE;
      msg = "large block already free";
    } else if (in) {
      what = AA_MISUSE_INTERIOR;
      msg = "pointer inside a large block, not at its start";
    } else {
      what = AA_MISUSE_FOREIGN;
      msg = "pointer not owned by this pool";
    }
    goto bad;
  }
  uint64_t st = atomic_load_explicit(&c->state, memory_order_acquire);
  if ((st & 3) != AA__CH_LIVE) {
    what = AA_MISUSE_DOUBLE_FREE;
    msg = "large block already free (held in a thread's cache)";
    goto bad;
  }
  if (size != 0 && size != c->req) {
    what = AA_MISUSE_BAD_SIZE;
    msg = "size differs from the size allocated";
    goto bad;
  }
  /* against the owner's lock-free free of the same block (a double free
   * racing in two threads): one of the two wins */
  if (!atomic_compare_exchange_strong_explicit(&c->state, &st, aa__lg_st_phase(st, AA__CH_FREE),
                                               memory_order_acq_rel, memory_order_acquire)) {
    what = AA_MISUSE_DOUBLE_FREE;
    msg = "large block freed twice at once";
    goto bad;
  }
  size_t creq = c->req;
  uint64_t born = c->born;
  aa__lg_release_chunk(pool, c, stream, true);
  if (pool->large->plan_on)
    aa__lg_plan_note(pool, 1, creq, stream, born);
  LARGE_CHECK(pool);
  pthread_mutex_unlock(&pool->large->mu);
  return AA_OK;
bad:
  pthread_mutex_unlock(&pool->large->mu);
  aa__misuse(pool, what, ptr, size, msg);
  return AA_EINVAL;
}

size_t aa__large_block_size(aa_pool *pool, struct aa__span *sp, const void *ptr) {
  aa__seg *seg = (aa__seg *)sp; /* a large span is a segment's (or page's) header */
  if (seg != NULL && seg->owner != NULL)
    seg = seg->owner; /* a page of an expandable segment */
  size_t r = 0;
  pthread_mutex_lock(&pool->large->mu);
  if (pool->large->plan != NULL && aa__lg_plan_owns(pool, (uintptr_t)ptr)) {
    r = aa__lg_plan_block_size(pool, (uintptr_t)ptr);
    pthread_mutex_unlock(&pool->large->mu);
    return r;
  }
  aa__chunk *c = aa__lg_hash_find(pool, (uintptr_t)ptr, false);
  if (c == NULL)
    c = find_container(seg, (uintptr_t)ptr);
  if (c && !c->free && (atomic_load_explicit(&c->state, AA__RLX) & 3) == AA__CH_LIVE)
    r = c->size;
  pthread_mutex_unlock(&pool->large->mu);
  return r;
}

int aa__large_record(aa_pool *pool, struct aa__span *sp, void *ptr, aa_stream stream) {
  aa__seg *seg = (aa__seg *)sp; /* a large span is a segment's (or page's) header */
  if (seg != NULL && seg->owner != NULL)
    seg = seg->owner; /* a page of an expandable segment */
  int rc = AA_OK;
  (void)seg;
  pthread_mutex_lock(&pool->large->mu);
  if (pool->large->plan != NULL && aa__lg_plan_owns(pool, (uintptr_t)ptr)) {
    rc = aa__lg_plan_record(pool, (uintptr_t)ptr, stream);
    goto out;
  }
  aa__chunk *c = aa__lg_hash_find(pool, (uintptr_t)ptr, false);
  if (c == NULL) {
    rc = AA_EINVAL;
    goto out;
  }
  if ((atomic_load_explicit(&c->state, AA__RLX) & 3) != AA__CH_LIVE) {
    rc = AA_EINVAL; /* freed: held in a thread's cache */
    goto out;
  }
  if (!pool->has_events)
    goto out;
  for (uint32_t i = 0; i < c->nxs; i++) {
    if (c->xs[i] == stream)
      goto out;
  }
  aa_stream *v = realloc(c->xs, (size_t)(c->nxs + 1) * sizeof *v);
  if (v == NULL) {
    rc = AA_ENOMEM;
    goto out;
  }
  c->xs = v;
  c->xs[c->nxs] = stream;
  __atomic_store_n(&c->nxs, c->nxs + 1, __ATOMIC_RELAXED); /* read by aa__ltc_free */
out:
  pthread_mutex_unlock(&pool->large->mu);
  return rc;
}

/* An explicit release, a trim or an out-of-memory retry: the caches, the
 * plan and the stitched ranges give back first, then the segments and
 * pages (large_seg.c). */
size_t aa__large_release(aa_pool *pool, size_t want, bool forget) {
  pthread_mutex_lock(&pool->large->mu);
  /* what other threads hold goes back too (the caller flushed its own): on
   * out-of-memory it is what the retry needs */
  (void)aa__lg_ltc_reclaim(pool, NULL, true);
  /* an explicit release or an out-of-memory retry (everything asked for;
   * a trim asks for its excess) takes an idle plan's arena too, first: it
   * may lie in a stitched range */
  if (want == SIZE_MAX)
    aa__lg_plan_release(pool);
  /* stitched ranges that are free give their pages back to the holes first
   * (their aliases undone), which can then be unmapped */
  (void)aa__lg_stitch_release(pool);
  pool->large->vmm_forget = forget;
  size_t r = aa__lg_release_locked(pool, want);
  pool->large->vmm_forget = false;
  pthread_mutex_unlock(&pool->large->mu);
  return r;
}

/* ------------------------------------------------------------ life cycle */

static bool stream_wait_usable(const aa_pool *pool, bool on) {
  return on && pool->has_events && pool->backend->ops->stream_wait != NULL;
}

int aa__large_new(aa_pool *pool) {
  aa__large *L = calloc(1, sizeof *L);
  if (L == NULL)
    return AA_ENOMEM;
  pthread_mutex_init(&L->mu, NULL);
  const aa_pool_config *c = &pool->cfg;
  L->stream_wait = stream_wait_usable(pool, c->large_stream_wait >= 0);
  if (c->large_mode == AA_LARGE_EXPANDABLE) {
    const aa_backend_ops *o = pool->backend->ops;
    size_t g = o->map_granularity && o->va_reserve && o->va_release && o->map && o->unmap
                   ? o->map_granularity(pool->backend)
                   : 0;
    if (g == 0 || g % AA__GRANULE != 0 || (g & (g - 1)) != 0) {
      pool->cfg.large_mode = AA_LARGE_CACHE; /* no usable virtual memory */
    } else {
      /* both powers of two: the larger is a multiple of the other */
      L->vmm_page = c->large_page_bytes > g ? c->large_page_bytes : g;
      L->vmm_runs = c->large_map_runs > 0; /* the default policy asks for device memory */
      L->vmm_run_pages = c->large_map_run_pages > 0 ? (size_t)c->large_map_run_pages
                                                    : AA_LARGE_MAP_RUN_MAX;
      L->vmm_run_min = c->large_map_run_min_bytes;
    }
  }
  pool->large = L;
  L->stitch_on = c->large_mode == AA_LARGE_EXPANDABLE && c->large_stitch > 0 &&
                 aa__lg_stitch_usable(pool);
  L->stitch_grow = L->stitch_on && c->large_stitch > 1;
  aa__lg_stitch_budget_init(L, c->large_stitch_share);
  L->plan_on = aa__lg_plan_usable(pool);
  return AA_OK;
}

void aa__large_destroy(aa_pool *pool) {
  if (pool->large == NULL)
    return;
  aa__lg_plan_destroy(pool);   /* its arena is a live chunk: it goes with its segment */
  aa__lg_stitch_destroy(pool); /* while the handles it aliases are mapped */
  aa__lg_unpark_all(pool);
  while (pool->large->segs) {
    aa__seg *s = pool->large->segs;
    for (aa__chunk *c = s->first; c; c = c->next) {
      if (c->free)
        aa__lg_bin_remove(pool, c);
    }
    aa__lg_seg_unlink_free(pool, s);
  }
  while (pool->large->spare) {
    aa__chunk *n = pool->large->spare->fnext;
    free(pool->large->spare);
    pool->large->spare = n;
  }
  pool->large->nspare = 0;
  free(pool->large->hash);
  pthread_mutex_destroy(&pool->large->mu);
  free(pool->large);
  pool->large = NULL;
}

void aa__large_set_map_runs(aa_pool *pool, bool on) {
  if (pool->large->vmm_page == 0)
    return;
  pthread_mutex_lock(&pool->large->mu); /* read under it by aa__lg_ensure_mapped */
  pool->large->vmm_runs = on;
  pthread_mutex_unlock(&pool->large->mu);
}

void aa__large_set_stream_wait(aa_pool *pool, bool on) {
  pthread_mutex_lock(&pool->large->mu); /* read under it by aa__large_alloc */
  pool->large->stream_wait = stream_wait_usable(pool, on);
  pthread_mutex_unlock(&pool->large->mu);
}

void aa__large_set_clock(aa_pool *pool, uint64_t (*now)(void *user), void *user) {
  pthread_mutex_lock(&pool->large->mu); /* read under it by large_stitch.c */
  pool->large->clock = now;
  pool->large->clock_user = user;
  pool->large->stitch_budget_started = false; /* another clock: the refill starts again */
  pthread_mutex_unlock(&pool->large->mu);
}

/* The mapped bytes of free chunk c: all of it but in an expandable
 * segment, where only the parts on mapped pages are reserved. */
static uint64_t chunk_mapped(const aa_pool *pool, const aa__chunk *c) {
  const aa__seg *s = c->seg;
  if (s->pages == NULL)
    return c->size;
  size_t ps = pool->large->vmm_page, i0, i1;
  uint64_t n = 0;
  aa__lg_pages_under(pool, c, c->size, &i0, &i1);
  for (size_t i = i0; i < i1 && i < s->hwm; i++) {
    if (s->pages[i] == NULL)
      continue;
    uintptr_t lo = s->h.base + i * ps, hi = lo + ps;
    if (lo < c->base)
      lo = c->base;
    if (hi > c->base + c->size)
      hi = c->base + c->size;
    n += hi - lo;
  }
  return n;
}

/* Whether some record_stream'd stream's event of free chunk c is pending
 * (asked, nothing released: an account changes nothing). */
static bool xev_pending(aa_pool *pool, const aa__chunk *c) {
  for (uint32_t i = 0; i < c->nxev; i++) {
    if (aa__event_pending(pool, c->xev[i]))
      return true;
  }
  return false;
}

#if AA_DEBUG >= 3
/* The free chunks' mapped bytes by a walk over every chunk (the check of
 * the identity free_account relies on). */
static uint64_t free_mapped_walk(aa_pool *pool) {
  uint64_t held;
  uint64_t n = aa__lg_plan_room(pool, &held); /* the plan's arena: a live chunk, not in use */
  for (const aa__seg *s = pool->large->segs; s; s = s->next) {
    for (const aa__chunk *c = s->first; c; c = c->next)
      n += c->free ? chunk_mapped(pool, c) : 0;
  }
  /* an active stitched range's free chunk is its lent parts' memory (a
   * dormant one's parts are free chunks above) */
  for (const aa__seg *s = pool->large->stitches; s; s = s->next)
    n += !s->st->dormant && s->first->free ? s->first->size : 0;
  return n;
}
#endif

/* Chunks tile their segments and a chunk that is not free (live, held) is
 * mapped whole, so the free chunks' mapped bytes are what is reserved less
 * what is not free (expandable segments' pages shared by a free and a live
 * chunk included): no walk over every chunk, which the replay's account at
 * each new peak would pay hundreds of times. Only the free chunks with
 * record_stream'd events are looked at (never parked: they are in bins). */
static void free_account(aa_pool *pool, uint64_t *holes, uint64_t *holds) {
  uint64_t held = 0;
  for (unsigned b = aa__lg_next_bin(pool, 0); b < AA__LARGE_BINS; b = aa__lg_next_bin(pool, b + 1)) {
    for (const aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      if (c->nxev > 0 && xev_pending(pool, c))
        held += chunk_mapped(pool, c);
    }
  }
  /* the plan's arena: rooms freed that wait for events are held, the rest
   * holes (a live chunk: reserved, not counted in use) */
  uint64_t room_held;
  (void)aa__lg_plan_room(pool, &room_held);
  held += room_held;
  aa__assert(pool->large->reserved >= pool->large->in_use);
  uint64_t free_mapped = pool->large->reserved - pool->large->in_use;
#if AA_DEBUG >= 3
  aa__assert(free_mapped == free_mapped_walk(pool));
#endif
  aa__assert(held <= free_mapped);
  *holds = held;
  *holes = free_mapped - held;
}

/* ------------------------------------------------------------ stats */

uint64_t aa__large_in_use(aa_pool *pool) {
  pthread_mutex_lock(&pool->large->mu);
  uint64_t n = pool->large->in_use;
  pthread_mutex_unlock(&pool->large->mu);
  return n;
}

/* The large path's mu, then tc_mu (the order of aa__lg_ltc_reclaim): the
 * threads' held bytes, the blocks others took back and the totals are read
 * at one moment, so a reclaim cannot fall between them (a live block would
 * read as free). Counters only but for the account's walk of the free bins:
 * the allocating threads wait for this section. */
void aa__large_stats_get(aa_pool *pool, bool account, aa__large_stats *out) {
  aa__large *L = pool->large;
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&L->mu);
  pthread_mutex_lock(&pool->tc_mu);
  uint64_t allocs = atomic_load(&L->dead_allocs), frees = atomic_load(&L->dead_frees);
  uint64_t hb = 0, hr = 0;
  for (aa__tcache *tc = pool->tcaches; tc; tc = tc->next) {
    allocs += aa__cget(&tc->ltc.allocs);
    frees += aa__cget(&tc->ltc.frees);
    hb += aa__cget(&tc->ltc.held_block);
    hr += aa__cget(&tc->ltc.held_req);
  }
  /* what threads were given less what other threads took back (modulo
   * 2^64, read while threads run) */
  uint64_t held = hb - atomic_load_explicit(&L->ltc_taken_block, AA__RLX);
  uint64_t held_req = hr - atomic_load_explicit(&L->ltc_taken_req, AA__RLX);
  uint64_t in_use = L->in_use, req = L->req;
  out->reserved = L->reserved;
  out->segments = L->nsegs;
  out->allocs = L->allocs + allocs;
  out->frees = L->frees + frees;
  out->misses = L->misses;
  out->settled = L->settled;
  out->stream_waits = L->stream_waits;
  out->pages_mapped = L->vmm_maps;
  out->pages_unmapped = L->vmm_unmaps;
  out->page_bytes = L->vmm_page;
  out->stitched_ranges = L->nstitch - L->ndormant;
  out->stitch_dormant = L->ndormant;
  out->stitch_rests = L->stitch_rests;
  out->stitch_wakes = L->stitch_wakes;
  out->stitched_bytes = L->stitch_bytes;
  out->stitches = L->stitches_made;
  out->stitch_hits = L->stitch_hits;
  out->stitch_dissolved = L->stitch_dissolved;
  out->alias_maps = L->alias_maps;
  out->alias_unmaps = L->alias_unmaps;
  out->alias_runs = L->alias_runs;
  out->stitch_new_bytes = L->stitch_new_bytes;
  out->alias_ns = L->alias_ns;
  out->stitch_deferred = L->stitch_deferred;
  aa__lg_plan_stats(pool, out);
  if (account)
    free_account(pool, &out->holes, &out->holds);
  pthread_mutex_unlock(&pool->tc_mu);
  pthread_mutex_unlock(&L->mu);
  out->held_reclaims = atomic_load_explicit(&L->ltc_reclaims, AA__RLX);
  /* the held blocks are freed, not in use (held clamped to what is) */
  if (held > in_use)
    held = in_use;
  out->held = held;
  out->in_use = in_use - held;
  out->req = req > held_req ? req - held_req : 0;
}

/* ------------------------------------------------------------ walk */

static bool chunk_in_use(const aa__chunk *c) {
  return !c->free && (atomic_load_explicit(&c->state, AA__RLX) & 3) == AA__CH_LIVE;
}

/* The blocks of segment s that fall in [lo, hi). Under the large path's mu. */
static int walk_chunks(const aa_pool *pool, const aa__seg *s, uintptr_t lo, uintptr_t hi,
                       aa_walk_fn fn, void *user) {
  int rc = 0;
  for (const aa__chunk *c = s->first; rc == 0 && c; c = c->next) {
    uintptr_t a = c->base > lo ? c->base : lo;
    uintptr_t b = c->base + c->size < hi ? c->base + c->size : hi;
    if (a >= b)
      continue;
    if (aa__lg_plan_is_arena(pool, c)) { /* its blocks at their planned offsets */
      rc = aa__lg_plan_walk(pool, a, b, fn, user);
      continue;
    }
    bool used = chunk_in_use(c);
    uint32_t fl = used ? AA_WALK_IN_USE : c->lent != NULL ? AA_WALK_LENT
                                                          : 0;
    rc = aa__walk_emit(fn, user, AA_WALK_BLOCK, fl, a, (size_t)(b - a), used ? c->req : 0, 0);
  }
  return rc;
}

/* A large segment; an expandable one as one segment per run of mapped
 * pages (what is reserved from the device), its blocks clipped to the run. */
static int walk_seg(const aa_pool *pool, const aa__seg *s, aa_walk_fn fn, void *user) {
  uint32_t region = s->small_reqs ? AA_WALK_SMALL_REQS : 0;
  if (s->pages == NULL) {
    int rc = aa__walk_emit(fn, user, AA_WALK_SEGMENT, AA_WALK_LARGE | region, s->h.base,
                           (size_t)(s->h.end - s->h.base), 0, 0);
    return rc ? rc : walk_chunks(pool, s, s->h.base, s->h.end, fn, user);
  }
  size_t ps = pool->large->vmm_page;
  for (size_t i = 0; i < s->npages;) {
    if (s->pages[i] == NULL) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < s->npages && s->pages[j] != NULL)
      j++;
    uintptr_t lo = s->h.base + i * ps, hi = s->h.base + j * ps;
    int rc = aa__walk_emit(fn, user, AA_WALK_SEGMENT, AA_WALK_LARGE | AA_WALK_EXPANDABLE | region, lo,
                           (size_t)(hi - lo), 0, 0);
    if (rc == 0)
      rc = walk_chunks(pool, s, lo, hi, fn, user);
    if (rc)
      return rc;
    i = j;
  }
  return 0;
}

int aa__large_walk(aa_pool *pool, aa_walk_fn fn, void *user) {
  int rc = 0;
  pthread_mutex_lock(&pool->large->mu);
  for (const aa__seg *s = pool->large->segs; rc == 0 && s; s = s->next)
    rc = walk_seg(pool, s, fn, user);
  for (const aa__seg *s = pool->large->stitches; rc == 0 && s; s = s->next) {
    if (s->st->dormant)
      continue; /* its pages are free blocks of their holes now */
    rc = aa__walk_emit(fn, user, AA_WALK_SEGMENT, AA_WALK_LARGE | AA_WALK_STITCHED, s->h.base,
                       (size_t)(s->h.end - s->h.base), 0, 0);
    if (rc == 0)
      rc = walk_chunks(pool, s, s->h.base, s->h.end, fn, user);
  }
  pthread_mutex_unlock(&pool->large->mu);
  return rc;
}
