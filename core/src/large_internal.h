/*
 * large_internal.h — what the large path's files share (requests above
 * max_small; large.c's opening comment has the design). Everything here
 * runs under pool->large->mu unless it says otherwise.
 *
 * Files (each shared function below sits under the file that defines it):
 *   large.c        the entry points (aa__large_*: alloc, free, size,
 *                  record_stream, release, new, destroy, stats, walk) and
 *                  the design (its opening comment)
 *   large_chunk.c  chunk records, the park list, merging free neighbours,
 *                  a free chunk's events and usability on a stream, the
 *                  count of a block handed out, the carve of an arena (the
 *                  hash and bins are inline below)
 *   large_stitch.c stitched ranges: free pages in holes mapped again side by
 *                  side at a new address
 *   large_seg.c    segments and the expandable reservation's pages: made,
 *                  mapped, unmapped, released; the cache bound
 *   large_give.c   a block given back to the path: counts, events, its
 *                  place (a range's chunk, parked, or merged into the bins)
 *   large_ltc.c    the per-thread large-block cache (aa__ltc_*, lock-free)
 *   large_take.c   placement: where a request is served (best fit, settling,
 *                  stream-ordered reuse, stitching, new memory)
 *   large_plan.c   a placement learned from the first steps: the requests'
 *                  period found, offsets planned from lifetimes (on the
 *                  pool's planner thread, from a copy of the window),
 *                  served from one arena chunk
 *   large_ipc.c    a block's share handle (CUDA IPC)
 *   large_check.c  the full invariant walk (AA_DEBUG 3)
 *
 * Layers, bottom first: a file calls its own floor and the floors below,
 * never one above (tools/check-layers.sh reads this list and the large
 * path's object files: the ctest test_layers_large). The pages (segments,
 * the reservation, stitched ranges) sit over the chunks; the give-back
 * over the pages; the thread cache over the give-back; placement over the
 * cache; the plan over placement, which asks the plan for its arena only
 * through aa__large.yield:
 *   layer 0 chunk: large_chunk.c
 *   layer 1 stitch: large_stitch.c
 *   layer 2 seg: large_seg.c
 *   layer 3 give: large_give.c
 *   layer 4 ltc: large_ltc.c
 *   layer 5 take: large_take.c
 *   layer 6 plan: large_plan.c
 *   layer 7 entry: large.c large_ipc.c large_check.c
 *
 * Shared names are aa__lg_<what>; the entry points the rest of core calls
 * (aa__large_*, aa__ltc_*) are in large.h. No file outside large*.c
 * includes this header (tools/check-layers.sh).
 */
#ifndef AA_LARGE_INTERNAL_H
#define AA_LARGE_INTERNAL_H

#include "core_internal.h"

#define AA__LARGE_ALIGN ((size_t)4096)
#define AA__LARGE_SEG ((size_t)2 << 20) /* segments rounded to 2 MiB */
#define AA__LARGE_BINS 96
#define AA__LARGE_PARK 4 /* large chunks parked at free for exact reuse */
/* Requests of at most this many bytes (rounded) are placed in segments of
 * their own, apart from larger ones (large.c, "Regions"; docs/core.md,
 * "Placement"): PyTorch's small-pool bound. */
#define AA__LARGE_SMALL_MAX ((size_t)1 << 20)
/* Rooms (large_take.c room_open; docs/core.md, "Placement"), expandable mode:
 * a request above AA__LARGE_SMALL_MAX and at most AA__LARGE_MID_MAX bytes
 * (PyTorch's 1-10 MiB class) cut from the free end of the reservation
 * right after a live block at least AA__LARGE_ROOM_RATIO times its size
 * opens a room of AA__LARGE_ROOM bytes (PyTorch's segment for that class)
 * for the mid-size requests that follow; larger ones pass over it. */
#define AA__LARGE_MID_MAX ((size_t)10 << 20)
#define AA__LARGE_ROOM ((size_t)20 << 20)
#define AA__LARGE_ROOM_RATIO 6

typedef struct aa__chunk aa__chunk;
/* A segment: one backend region cut into chunks. An expandable segment
 * (AA_LARGE_EXPANDABLE) is an address-space reservation whose pages are
 * mapped on demand: `pages` has one entry per page, NULL while unmapped, else
 * that page's own record, an aa__seg whose span (in the page map) covers the
 * page, with `owner` the reservation and `handle` the backend's. */
typedef struct aa__seg {
  aa__span h;
  aa__chunk *first;
  struct aa__seg *next, *prev;
  struct aa__seg *owner; /* page records only */
  struct aa__stitch *st; /* a stitched range (large_stitch.c), else NULL */
  /* page records only: the stitched ranges that map this handle again
   * (nalias), and of them those not retired (nheld: a new range takes no
   * handle a held range maps; at most one range lends it at a time) */
  uint32_t nalias, nheld;
  void *handle;               /* page records only */
  struct aa__seg **pages;     /* expandable segments only */
  size_t npages, mapped, hwm; /* hwm: no page at or above it is mapped */
  /* the region (large.c): chunks here serve requests of at most
   * AA__LARGE_SMALL_MAX bytes only, or (false) larger ones only */
  bool small_reqs;
  /* expandable: pages below hwm that an explicit release (aa_pool_release,
   * PyTorch's empty_cache) unmapped and nothing has mapped since: not
   * "touched" (aa__lg_prefix_touched), so that placement after it prefers
   * pages mapped now over re-mapping what the user gave back. NULL until
   * the first such page; nforgot counts them. */
  uint8_t *forgot;
  size_t nforgot;
} aa__seg;

struct aa__chunk {
  aa__seg *seg;
  uintptr_t base;
  size_t size;
  size_t req;
  aa__chunk *prev, *next;   /* address order within the segment */
  aa__chunk *fnext, *fprev; /* free bin list */
  aa__chunk *hnext;         /* live-chunk hash chain */
  int free;
  unsigned bin; /* free: the bin it is in */
  int parked;   /* free: in pool->large->park, not in a bin */
  /* free or live: part of a room for mid-size requests (large_take.c
   * room_open); kept by a split, and by a merge only when both parts are */
  int room;
  /* (generation << 2) | AA__CH_FREE, _LIVE, _HELD (in a thread's large
   * cache) or _CLAIM (its owner's lock-free free is checking it). Every
   * change of phase out of LIVE or HELD is a compare-and-swap, so an owner's
   * lock-free free and another thread's locked free of the same block (or
   * its taking a held block back) cannot both win; the generation makes a
   * stale thread-cache entry fail its CAS. Chunk records are recycled, never
   * freed, while the pool lives. */
  _Atomic uint64_t state;
  int any;           /* free: usable on every stream */
  aa_stream stream;  /* free: the stream it was freed on */
  uint64_t freed_at; /* free: pool->large->frees when it was freed (age order) */
  void *ev;          /* free, !any: event recorded on stream, or NULL */
  void **xev;        /* free: record_stream events, all must complete */
  uint32_t nxev;
  aa_stream *xs; /* live: record_stream'd extra streams */
  uint32_t nxs;
  aa_stream held_stream; /* held: the stream its holder freed it on */
  /* live: taken by stream-ordered reuse (large_take.c order_after): `stream`, the
   * one it was handed to, was ordered after its earlier uses on other
   * streams, so a free on another stream (the host's included) is ordered
   * after them only through `stream`'s work: an event there, as for a
   * record_stream'd stream */
  int waited;
  /* not free, not live: an origin part whose handles stitched range `lent`
   * maps (large_stitch.c); free again when that range is dissolved */
  struct aa__seg *lent;
  uint64_t born; /* live: the large path's allocation sequence number (large_plan.c) */
};

/* A stitched range's parts: one handle each (origin page record pg, mapped
 * again at `at`), and the lent origin chunk it lies in. */
typedef struct aa__stitch_part {
  aa__seg *pg;
  aa__chunk *from;
  uintptr_t at;
  size_t len;
} aa__stitch_part;

typedef struct aa__stitch {
  aa__stitch_part *parts;
  size_t nparts;    /* each mapped at its address, the range in the page map */
  bool dormant;     /* parts free in their holes again, aliases kept */
  bool retired;     /* dormant, its handles free for new ranges: it serves
                     * again only as a new range of exactly its handles */
  uint64_t used_at; /* the large path's stitch_clock at its last take or free */
} aa__stitch;

/* What placement (large_take.c, a floor below the plan) asks of the plan
 * before the pool grows: whether its arena has free room the request could
 * take (refused: the backend refused new memory), and its drop, the arena
 * made the path's chunks. large_plan.c's aa__lg_plan_can_yield and
 * aa__lg_plan_yield, set as aa__large.yield with the plan's state. */
typedef struct aa__lg_yield {
  bool (*can)(const aa_pool *pool, size_t need, aa_stream stream, bool refused);
  void (*give)(aa_pool *pool);
} aa__lg_yield;

/* The large path's state: one per pool (pool->large), made by
 * aa__large_new. Everything below `mu` is read and written under it, but
 * the atomics, which threads' lock-free paths and stats readers touch. */
typedef struct aa__large aa__large;
struct aa__large {
  pthread_mutex_t mu;
  aa__seg *segs;
  aa__chunk *bins[AA__LARGE_BINS];
  uint64_t bin_mask[(AA__LARGE_BINS + 63) / 64]; /* bins that are not empty */
  aa__chunk *park[AA__LARGE_PARK];               /* freed whole, coalescing deferred (oldest first) */
  unsigned npark;
  aa__chunk *spare; /* recycled chunk records */
  size_t nspare;
  aa__chunk **hash; /* live chunks by base address */
  size_t hash_cap, hash_n;
  uint64_t in_use, reserved, free_bytes, nsegs;
  size_t vmm_page;               /* expandable: the mapping granularity */
  bool vmm_runs;                 /* expandable: a request's unmapped pages in one map call */
  size_t vmm_run_pages;          /* a run's most pages for a request of at least... */
  size_t vmm_run_min;            /* ...this many bytes (large_map_run_pages, _min_bytes) */
  bool vmm_forget;               /* an explicit release is unmapping */
  uint64_t vmm_maps, vmm_unmaps; /* pages mapped and unmapped so far */
  uint64_t req;
  uint64_t allocs, frees;
  uint64_t misses;       /* large allocations that called the backend (a segment, page maps) */
  uint64_t settled;      /* free chunks whose streams' work had completed, made usable
                          * everywhere on the way to growing (large_take.c settle) */
  uint64_t stream_waits; /* pending free chunks reused by a stream_wait (large_take.c) */
  bool stream_wait;      /* large_stream_wait on and the backend has stream_wait */
  bool merge_due;        /* free chunks were made usable everywhere without merging
                          * (aa__lg_usable in a bin walk): large_take.c process_events
                          * merges them at the next request */
  /* stitching (large_stitch.c): on when asked and the backend maps aliases */
  bool stitch_on;
  bool stitch_grow;      /* large_stitch 2: a range of holes and new pages (stitch_premap) */
  aa__seg *stitches;     /* stitched ranges, newest first */
  size_t nstitch;        /* ranges, active and dormant */
  size_t ndormant;       /* of which dormant */
  size_t nretired;       /* of which retired */
  uint64_t stitch_bytes; /* the active ones' bytes (the same memory as their lent parts) */
  uint64_t stitches_made, stitch_hits, stitch_dissolved, stitch_rests, stitch_wakes;
  uint64_t alias_maps, alias_unmaps, stitch_clock;
  uint64_t alias_runs;       /* ranges mapped with one map_alias_run call */
  uint64_t stitch_new_bytes; /* bytes mapped new for ranges the holes left short (stitch_premap) */
  /* stitching's time budget (large_stitch.c, "budget"): the alias calls'
   * share of the clock's time; tokens in ns, spent by each call's time and
   * refilled at stitch_share of the time passed, up to AA__STITCH_BURST_NS
   * (negative: overspent); budget_at: the clock at the last refill */
  double stitch_share;
  double stitch_tokens;
  uint64_t stitch_budget_at;
  bool stitch_budget_started; /* stitch_budget_at read from the clock */
  bool stitch_refused;        /* the request under way was refused a range (counted once) */
  uint64_t alias_ns;          /* time inside alias calls, by the clock */
  uint64_t stitch_deferred;   /* requests refused a new range: the budget spent */
  /* the clock (aa_pool_set_clock); NULL: aa_now_ns */
  uint64_t (*clock)(void *user);
  void *clock_user;
  /* the learned placement (large_plan.c): on when asked (not passthrough);
   * the state, made at the first request; allocations numbered */
  bool plan_on;
  struct aa__plan *plan;
  /* set by the plan (large_plan.c) with its state: the one way placement
   * calls up into it; NULL without a plan */
  const aa__lg_yield *yield;
  /* the plan's arena chunk, NULL when none: a live chunk never counted in
   * use (large_give.c gives it back without taking it off the counts) */
  const aa__chunk *arena;
  uint64_t alloc_seq;
  /* expandable: while the plan maps its arena, the offsets (from the
   * arena's base) where a map run must end, so that the room around any
   * block of the plan is whole runs (aa__lg_ensure_mapped); NULL otherwise */
  const size_t *map_cuts;
  size_t map_ncuts;
  /* expandable: bytes of free pages the path may still unmap to map a
   * request's new pages instead of growing: the free room of an arena
   * dissolved around live blocks (large_plan.c dissolve), used up once */
  uint64_t unmap_credit;
  /* exited threads' lock-free counts */
  _Atomic uint64_t dead_allocs, dead_frees;
  /* held blocks other threads took back (aa__lg_ltc_reclaim), until their
   * holders drop the stale entries; and how many were taken back */
  _Atomic uint64_t ltc_taken_block, ltc_taken_req, ltc_reclaims;
  /* 1: a thread published a held block since the last reclaim walk (set
   * with a load-then-store by holders, cleared by the walk) */
  _Atomic uint32_t ltc_published;
};

static inline size_t aa__lg_round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* A chunk's phase, the low two bits of its state word. CLAIM: its owner's
 * lock-free free is checking it (only that thread moves it on); HELD: in a
 * thread's large cache, where another thread may take it back. */
enum { AA__CH_FREE = 0,
       AA__CH_LIVE = 1,
       AA__CH_HELD = 2,
       AA__CH_CLAIM = 3 };

/* A chunk's state word with its phase (AA__CH_*) replaced, and the word of
 * its next allocation (a new generation, live). */
static inline uint64_t aa__lg_st_phase(uint64_t st, uint64_t phase) {
  aa__assert(phase <= AA__CH_CLAIM);
  return (st & ~(uint64_t)3) | phase;
}
static inline uint64_t aa__lg_st_next_live(uint64_t st) {
  aa__assert_internal((st & 3) != AA__CH_LIVE); /* a new life starts from free or held */
  return (((st >> 2) + 1) << 2) | AA__CH_LIVE;
}

/* The free bin of a chunk size. */
static inline unsigned aa__lg_bin_of(size_t size) {
  unsigned b = aa__hist_bucket(size);
  b = b > 44 ? b - 44 : 0;
  return b < AA__LARGE_BINS ? b : AA__LARGE_BINS - 1;
}

/* The live-chunk hash's slot of a base address. */
static inline size_t aa__lg_hidx(const aa_pool *pool, uintptr_t base) {
  return (size_t)(((uint64_t)base >> 12) * 0x9E3779B97F4A7C15ull >> 20) & (pool->large->hash_cap - 1);
}

/* ------------------------------------------------------------ hash, bins
 * (large_chunk.c's floor, inline: the hot path's every request and free) */
/* The live chunk at base, or NULL; taken out of the hash with `remove`. */
static inline aa__chunk *aa__lg_hash_find(aa_pool *pool, uintptr_t base, bool remove) {
  if (pool->large->hash_cap == 0)
    return NULL;
  aa__chunk **pp = &pool->large->hash[aa__lg_hidx(pool, base)];
  while (*pp && (*pp)->base != base)
    pp = &(*pp)->hnext;
  aa__chunk *c = *pp;
  if (c && remove) {
    aa__assert(pool->large->hash_n > 0);
    *pp = c->hnext;
    c->hnext = NULL;
    pool->large->hash_n--;
  }
  return c;
}

/* Live chunk c into the hash (grown beforehand: aa__lg_hash_grow). */
static inline void aa__lg_hash_put(aa_pool *pool, aa__chunk *c) {
  aa__assert(pool->large->hash_n < pool->large->hash_cap); /* grown before the take */
  aa__assert(!c->free);
  aa__assert_internal(aa__lg_hash_find(pool, c->base, false) == NULL);
  size_t h = aa__lg_hidx(pool, c->base);
  c->hnext = pool->large->hash[h];
  pool->large->hash[h] = c;
  pool->large->hash_n++;
}

/* Free bins: insert and remove a free chunk (not parked). */
static inline void aa__lg_bin_insert(aa_pool *pool, aa__chunk *c) {
  aa__assert(c->free && !c->parked && c->size > 0);
  aa__assert_internal(c->fnext == NULL && c->fprev == NULL &&
                      pool->large->bins[aa__lg_bin_of(c->size)] != c);
  unsigned b = aa__lg_bin_of(c->size);
  c->bin = b;
  c->fprev = NULL;
  c->fnext = pool->large->bins[b];
  if (c->fnext)
    c->fnext->fprev = c;
  pool->large->bins[b] = c;
  pool->large->bin_mask[b / 64] |= (uint64_t)1 << (b % 64);
  pool->large->free_bytes += c->size;
}

static inline void aa__lg_bin_remove(aa_pool *pool, aa__chunk *c) {
  unsigned b = c->bin;
  aa__assert(c->free && b < AA__LARGE_BINS && pool->large->free_bytes >= c->size);
  aa__assert(pool->large->bin_mask[b / 64] & ((uint64_t)1 << (b % 64)));
  aa__assert_internal(b == aa__lg_bin_of(c->size));
  aa__assert_internal(c->fprev != NULL ? c->fprev->fnext == c : pool->large->bins[b] == c);
  aa__assert_internal(c->fnext == NULL || c->fnext->fprev == c);
  if (c->fprev)
    c->fprev->fnext = c->fnext;
  else if ((pool->large->bins[b] = c->fnext) == NULL)
    pool->large->bin_mask[b / 64] &= ~((uint64_t)1 << (b % 64));
  if (c->fnext)
    c->fnext->fprev = c->fprev;
  c->fnext = c->fprev = NULL;
  pool->large->free_bytes -= c->size;
}

/* The first non-empty bin at or above b, or AA__LARGE_BINS. */
static inline unsigned aa__lg_next_bin(const aa_pool *pool, unsigned b) {
  while (b < AA__LARGE_BINS) {
    uint64_t m = pool->large->bin_mask[b / 64] >> (b % 64);
    if (m != 0) {
      aa__assert_internal(pool->large->bins[b + (unsigned)__builtin_ctzll(m)] != NULL);
      return b + (unsigned)__builtin_ctzll(m);
    }
    b = (b / 64 + 1) * 64;
  }
  return AA__LARGE_BINS;
}

/* The thread cache's slot of a block this thread was handed. */
static inline size_t aa__lg_ltc_slot(const void *p) {
  return (size_t)(((uint64_t)(uintptr_t)p >> 12) * 0x9E3779B97F4A7C15ull >> 32) % AA__LTC_N;
}

/* Remembers a block this thread was handed, for a lock-free free of it. */
static inline void aa__lg_ltc_note(aa__tcache *tc, void *p, aa__chunk *c, uint64_t state) {
  struct aa__ltc_live *l = &tc->ltc.live[aa__lg_ltc_slot(p)];
  l->p = p;
  l->c = c;
  l->state = state;
}

/* The pages under the first `len` bytes of chunk c. */
static inline void aa__lg_pages_under(const aa_pool *pool, const aa__chunk *c, size_t len, size_t *i0,
                                      size_t *i1) {
  size_t ps = pool->large->vmm_page;
  uintptr_t sb = c->seg->h.base;
  *i0 = (c->base - sb) / ps;
  *i1 = (c->base + len - 1 - sb) / ps + 1;
}

/* Whether pages [i0, i1) of s are all mapped. */
static inline bool aa__lg_range_mapped(const aa__seg *s, size_t i0, size_t i1) {
  if (i1 > s->hwm)
    return false;
  if (s->mapped == s->hwm)
    return true; /* no page below the high-water mark is unmapped */
  for (size_t i = i0; i < i1; i++) {
    if (s->pages[i] == NULL)
      return false;
  }
  return true;
}

/* How many pages under the first `need` bytes of chunk c (expandable) are
 * not mapped; the count stops once past `cap`. */
static inline size_t aa__lg_unmapped_under(const aa_pool *pool, const aa__chunk *c, size_t need,
                                           size_t cap) {
  const aa__seg *s = c->seg;
  size_t i0, i1;
  aa__lg_pages_under(pool, c, need, &i0, &i1);
  size_t top = i1 < s->hwm ? i1 : s->hwm; /* none at or above hwm is mapped */
  size_t n = i1 - (i0 > top ? i0 : top);
  if (i0 < top && s->mapped != s->hwm) {
    for (size_t i = i0; i < top && n <= cap; i++)
      n += s->pages[i] == NULL;
  }
  return n;
}

/* Whether the first `need` bytes of free chunk c (expandable) lie below its
 * segment's high-water mark: pages that were mapped once (chunks are cut
 * from the reservation's low end up), mapped now or not. */
static inline bool aa__lg_prefix_touched(const aa_pool *pool, const aa__chunk *c, size_t need) {
  size_t i0, i1;
  const aa__seg *s = c->seg;
  aa__lg_pages_under(pool, c, need, &i0, &i1);
  if (i1 > s->hwm)
    return false;
  for (size_t i = i0; s->nforgot > 0 && i < i1; i++) {
    if (s->forgot[i])
      return false; /* given back by an explicit release since it was mapped */
  }
  return true;
}

/* The region a request of `need` bytes (rounded) is placed in: whether it
 * is one of the small ones (aa__seg.small_reqs). */
static inline bool aa__lg_small(size_t need) { return need <= AA__LARGE_SMALL_MAX; }

/* Whether a request of `need` bytes (rounded) is a mid-size one, which
 * may open a room (large_take.c room_open). */
static inline bool aa__lg_mid(size_t need) {
  return need > AA__LARGE_SMALL_MAX && need <= AA__LARGE_MID_MAX;
}

/* Free chunk c, flagged `room`, is a room with no block left in it when
 * neither neighbour is part of a room: it becomes memory like any other
 * (large_take.c room_open), and the caller tries its neighbours again. Asked
 * wherever free chunks merge: aa__lg_coalesce_insert, and the merges of
 * chunks whose streams' work completed (process_events, merge_run,
 * seg_settle), where a room emptied while one of its blocks waited for
 * an event ends too (else it stayed a room for good: its free part with
 * unmapped pages never merged with the free memory above it, and larger
 * requests passed over it). */
static inline bool aa__lg_room_end(aa__chunk *c) {
  if (!c->room || (c->prev != NULL && c->prev->room) || (c->next != NULL && c->next->room))
    return false;
  c->room = 0;
  return true;
}

/* Whether the first `need` bytes of free chunk c (expandable) are mapped. */
static inline bool aa__lg_prefix_mapped(const aa_pool *pool, const aa__chunk *c, size_t need) {
  size_t i0, i1;
  aa__lg_pages_under(pool, c, need, &i0, &i1);
  return aa__lg_range_mapped(c->seg, i0, i1);
}

/* large_chunk.c */
/* Doubles the live-chunk hash (AA_ENOMEM: unchanged). */
int aa__lg_hash_grow(aa_pool *pool);
/* A chunk record from the spare list (or new; NULL when memory is short),
 * every field cleared but its state word's generation, phase FREE. */
aa__chunk *aa__lg_chunk_get(aa_pool *pool);
/* A chunk record back to the spare list (records are never freed while the
 * pool lives). */
void aa__lg_chunk_put(aa_pool *pool, aa__chunk *c);
/* The park list: chunk c (free, out of the bins) parked, the oldest
 * unparked into the bins when the list is full; entry i taken off the list
 * (the chunk's flag is the caller's); every parked chunk back into the bins
 * (merged where it may); whether parked chunk c would merge with a free
 * neighbour. */
void aa__lg_park(aa_pool *pool, aa__chunk *c);
void aa__lg_park_unlist(aa_pool *pool, unsigned i);
void aa__lg_unpark_all(aa_pool *pool);
bool aa__lg_beside_free(const aa_pool *pool, const aa__chunk *c);
/* Puts free chunk c (out of the bins) into them, merged with whichever free
 * neighbours it may merge with. */
void aa__lg_coalesce_insert(aa_pool *pool, aa__chunk *c);
/* Whether a free chunk may be handed out on `stream` now. */
bool aa__lg_usable(aa_pool *pool, aa__chunk *c, aa_stream stream);
/* Whether free chunk c may be handed out on every stream now (no events:
 * always; else its freeing stream's work done, asked as aa__lg_usable asks:
 * an event recorded and queried, kept for later calls). */
bool aa__lg_usable_anywhere(aa_pool *pool, aa__chunk *c);
/* Whether the events free chunk c holds (its record_stream'd streams', and
 * one on its freeing stream) have all completed, releasing them; with the
 * last, c is usable everywhere. */
bool aa__lg_events_done(aa_pool *pool, aa__chunk *c);
/* The parts of that: whether c's record_stream'd streams' events (xev) have
 * completed (released then); whether its freeing stream's event (ev) has
 * (released, c usable everywhere then); c usable on every stream, its free
 * neighbours merging at the next request (large_take.c process_events). */
bool aa__lg_xev_done(aa_pool *pool, aa__chunk *c);
bool aa__lg_ev_done(aa_pool *pool, aa__chunk *c);
void aa__lg_usable_everywhere(aa_pool *pool, aa__chunk *c);
/* Whether free chunk a, a room's free part, and the free memory b above it
 * that is no room stay apart (while some of a's pages are unmapped). */
bool aa__lg_room_kept(const aa_pool *pool, const aa__chunk *a, const aa__chunk *b);
/* Whether free neighbours a (lower) and b can merge; merges b (free, in
 * bins) into a (free, out of bins). */
bool aa__lg_merge_ok(const aa_pool *pool, const aa__chunk *a, const aa__chunk *b);
void aa__lg_absorb(aa_pool *pool, aa__chunk *a, aa__chunk *b);
/* A piece of a chunk being carved (aa__lg_carve): a live block (req, born,
 * its record_stream'd streams) or a freed one waiting for events (stream,
 * ev, xev); arrays are taken over. */
typedef struct aa__lg_piece {
  uintptr_t base;
  size_t size;
  int live;
  size_t req;
  uint64_t born;
  aa_stream *xs;
  uint32_t nxs;
  aa_stream stream;
  void *ev;
  void **xev;
  uint32_t nxev;
} aa__lg_piece;
/* Replaces live chunk c (the plan's arena: never counted in use) by chunks:
 * the pieces v[0..n) (sorted, inside c, not overlapping) and, between them,
 * free chunks freed on `stream`, merged and binned. The live pieces count
 * in use already. false when chunk records or the hash cannot grow (nothing
 * changed then). */
bool aa__lg_carve(aa_pool *pool, aa__chunk *c, aa__lg_piece *v, size_t n, aa_stream stream);
/* Counts a block handed out to a user (in_use, req, allocs, the pool's
 * bytes out and peaks). */
void aa__lg_count_out(aa_pool *pool, size_t size, size_t req);

/* large_stitch.c */
/* Whether the pool's backend and mode allow stitching. */
bool aa__lg_stitch_usable(const aa_pool *pool);
/* A free stitched range's chunk (not binned, not split) for a `need`-byte
 * request on `stream`: an active one of about that size, else a dormant one
 * woken (no backend call), else a new one made from whole free handles in
 * holes; NULL when none. `grow`: the free chunk the pool would map new
 * pages under for the request (find_fit's, or NULL), the only chunk with
 * unmapped pages a new range may take pages of. */
aa__chunk *aa__lg_stitch_take(aa_pool *pool, size_t need, aa_stream stream,
                              const aa__chunk *grow);
/* The bytes a new range for a `need`-byte request on `stream` lacks: what
 * the whole free handles in holes (and `grow`'s mapped ones) leave short of
 * it, to be mapped as new pages under `grow` first (aa__lg_take), so that
 * the pool grows by the shortfall, not the request. 0 when a range can be
 * made without new pages, when no hole would join it, or when none can be
 * made at all. */
size_t aa__lg_stitch_short(aa_pool *pool, size_t need, aa_stream stream, const aa__chunk *grow);
/* Whether stitching's time budget allows a new range's alias calls now
 * (aa_pool_config.large_stitch_share); when not, counts the request under
 * way deferred, once however often it asks (aa__lg_take clears
 * stitch_refused at each request). */
bool aa__lg_stitch_budget_ok(aa_pool *pool);
/* The budget at its start: share of the time (>= 1: no bound), a burst of tokens. */
void aa__lg_stitch_budget_init(aa__large *L, double share);
/* A stitched range's chunk was freed (aa__lg_release_chunk): it stays. */
void aa__lg_stitch_freed(aa_pool *pool, aa__chunk *c);
/* Puts every free active range whose work is done to sleep (its parts free
 * in their holes, aliases kept); returns the bytes given back. */
size_t aa__lg_stitch_rest(aa_pool *pool);
/* Retires the dormant ranges (their handles free for new ranges, their
 * aliases kept): every one whose address is idle, and one that work may
 * still use while the retired ones are under their bound (an idle retired
 * one destroyed to make room); returns how many. */
size_t aa__lg_stitch_retire_dormant(aa_pool *pool);
/* Destroys every dormant range and every free active one whose work is
 * done (release, trim, OOM retry); returns the active bytes given back. */
size_t aa__lg_stitch_release(aa_pool *pool);
/* Page record pg is being unmapped: the dormant ranges aliasing it go. */
void aa__lg_stitch_page_gone(aa_pool *pool, aa__seg *pg);
/* Destroys every range (pool destroy; the origin parts stay lent). */
void aa__lg_stitch_destroy(aa_pool *pool);

/* large_seg.c */
/* Gives back what the large path caches, up to `want` bytes: wholly free
 * segments, the free pages of an expandable reservation. */
size_t aa__lg_release_locked(aa_pool *pool, size_t want);
/* What aa__lg_release_locked(pool, SIZE_MAX) would give back now (free
 * stitched ranges apart), changing nothing but events asked. */
size_t aa__lg_releasable(aa_pool *pool, bool most);
/* Expandable: every page below a reservation's high-water mark that is
 * unmapped now is no longer "touched" (aa__seg.forgot), as after an
 * explicit release: placement prefers the pages mapped now over mapping
 * those again. */
void aa__lg_forget_unmapped(aa_pool *pool);
/* Maps every page under `c` (free, out of the bins; expandable). */
int aa__lg_ensure_mapped(aa_pool *pool, aa__chunk *c);
/* A new segment with one free chunk: of `segsize` bytes, or an expandable
 * reservation of at least `need`, of the small requests' region or not
 * (aa__seg.small_reqs); NULL with *rc set on failure. */
aa__chunk *aa__lg_seg_new(aa_pool *pool, size_t segsize, bool small, int *rc);
aa__chunk *aa__lg_vseg_new(aa_pool *pool, size_t need, bool small, int *rc);
/* Gives a segment back to the backend and its chunk records to the spares. */
void aa__lg_seg_unlink_free(aa_pool *pool, aa__seg *s);
/* Releases or unmaps cached memory above large_cache_bytes. */
void aa__lg_enforce_bound(aa_pool *pool);

/* large_give.c */
/* Gives a chunk (live or held, its state already moved to free) back:
 * accounting, record_stream events, parking. `counted`: a user's free (a
 * thread cache's flush was counted when the user freed it). */
void aa__lg_release_chunk(aa_pool *pool, aa__chunk *c, aa_stream stream, bool counted);

/* large_ltc.c */
/* Gives held entry i back to the pool. */
void aa__lg_ltc_drop_locked(aa_pool *pool, aa__tcache *tc, uint32_t i);
/* Takes back the blocks other threads' caches hold (their owners may not
 * call again for long: an autograd thread between backward passes); returns
 * the bytes. With `all`, every held block (waits for tc_mu); without, only
 * blocks held unchanged since the last walk, and only when tc_mu is free
 * now (a stats reader may hold it a while). Takes tc_mu after large->mu. */
size_t aa__lg_ltc_reclaim(aa_pool *pool, const aa__tcache *self, bool all);

/* large_take.c */
/* The path's own take of a chunk for `size` bytes (`need` rounded) on
 * `stream`: best fit, parking, settling, stream-ordered reuse, stitching,
 * new memory; the chunk comes back live (hashed, its state word a new
 * generation) but uncounted: in_use, req, allocs and the pool's bytes out
 * are the caller's. NULL when nothing could be had (*retry: a backend call
 * refused). tc: the calling thread's cache (its held blocks merge first), or
 * NULL. */
aa__chunk *aa__lg_take(aa_pool *pool, aa__tcache *tc, size_t size, size_t need, aa_stream stream,
                       bool *retry);

/* large_plan.c */
/* Whether the pool may plan (large_plan asked, not passthrough). */
bool aa__lg_plan_usable(const aa_pool *pool);
/* A request (size bytes, allocation number seq) on `stream`: served at its
 * planned offset when the plan expects it there and the room is free, else
 * NULL (the path serves it; aa__lg_plan_note records it). Collects a plan
 * the planner thread finished; activates a plan waiting for its period's
 * start (a release of what the path caches and the arena's take). */
void *aa__lg_plan_alloc(aa_pool *pool, size_t size, aa_stream stream, uint64_t seq);
/* Records a request the path served (req bytes asked for) or a free of a
 * chunk (born: its allocation number); learning looks for the period every
 * so many events, and plans (hands a copy of the window to the planner
 * thread, or plans here: AA_LARGE_PLAN_SYNC). kind: 0 alloc, 1 free. */
void aa__lg_plan_note(aa_pool *pool, int kind, size_t req, aa_stream stream, uint64_t seq);
/* Whether p lies in the plan's arena (the calls below then answer for it). */
bool aa__lg_plan_owns(const aa_pool *pool, uintptr_t p);
/* A free, a size and a record_stream of a pointer in the arena (misuse
 * reported by the caller from *what / *msg when AA_EINVAL). */
int aa__lg_plan_free(aa_pool *pool, uintptr_t p, size_t size, aa_stream stream, aa_misuse *what,
                     const char **msg);
size_t aa__lg_plan_block_size(aa_pool *pool, uintptr_t p);
int aa__lg_plan_record(aa_pool *pool, uintptr_t p, aa_stream stream);
/* The block of the arena holding p: its start and bytes (false: none). */
bool aa__lg_plan_block_of(const aa_pool *pool, uintptr_t p, uintptr_t *base, size_t *size);
/* Whether chunk c is the plan's arena, and its blocks walked in [lo, hi). */
bool aa__lg_plan_is_arena(const aa_pool *pool, const aa__chunk *c);
int aa__lg_plan_walk(const aa_pool *pool, uintptr_t lo, uintptr_t hi, aa_walk_fn fn, void *user);
/* The path is about to take new memory for a request the plan does not
 * serve (refused: the backend refused it): whether the plan is active with
 * free room in its arena that the request could take, and then its drop,
 * the arena made the path's chunks (or drained). */
bool aa__lg_plan_can_yield(const aa_pool *pool, size_t need, aa_stream stream, bool refused);
void aa__lg_plan_yield(aa_pool *pool);
/* An explicit release or an out-of-memory retry: an active plan with no
 * live block gives its arena back (it is learned again). */
void aa__lg_plan_release(aa_pool *pool);
/* The arena's bytes no planned block holds (reserved, not in use: the
 * account's), and in *held those of them waiting for stream work (events
 * asked, nothing released). 0 with no arena. */
uint64_t aa__lg_plan_room(aa_pool *pool, uint64_t *held);
/* The plan's figures into out. */
void aa__lg_plan_stats(const aa_pool *pool, aa__large_stats *out);
#if AA_DEBUG >= 3
/* The plan's full walk (large_check.c's): live table, bitmap, counts. */
void aa__lg_plan_check(aa_pool *pool);
#endif
/* Frees the plan (pool destroy: every block goes with the pool); stops and
 * joins its planner thread first, cancelling a planning under way. */
void aa__lg_plan_destroy(aa_pool *pool);

/* large_check.c */
#if AA_DEBUG >= 3
/* Full walk of the large path's structures. */
void aa__lg_check(aa_pool *pool);
#define LARGE_CHECK(pool) aa__lg_check(pool)
#else
#define LARGE_CHECK(pool) ((void)0)
#endif

#endif /* AA_LARGE_INTERNAL_H */
