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
 * Entry points: aa__large_alloc, aa__large_free (here), aa__large_release
 * (large_seg.c), aa__ltc_alloc, aa__ltc_free, aa__ltc_flush (large_ltc.c).
 * Files: this one holds the path and the chunk structures it works on per
 * call: one concern, kept in one file so that they inline, though it runs
 * past 600 lines; segments, pages and trimming are large_seg.c's, the
 * AA_DEBUG 3 walk large_check.c's; large_internal.h lists what they share.
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

#define SPLIT_MIN ((size_t)64 << 10)

/* ------------------------------------------------------------ hash */

static int hash_grow(aa_pool *pool) {
  size_t cap = pool->large->hash_cap ? pool->large->hash_cap * 2 : 256;
  aa__chunk **v = calloc(cap, sizeof *v);
  if (v == NULL)
    return AA_ENOMEM;
  aa__chunk **old = pool->large->hash;
  size_t ocap = pool->large->hash_cap;
  pool->large->hash = v;
  pool->large->hash_cap = cap;
  for (size_t i = 0; i < ocap; i++) {
    aa__chunk *c = old[i];
    while (c) {
      aa__chunk *n = c->hnext;
      size_t h = aa__lg_hidx(pool, c->base);
      c->hnext = v[h];
      v[h] = c;
      c = n;
    }
  }
  free(old);
  return AA_OK;
}

static aa__chunk *hash_find(aa_pool *pool, uintptr_t base, bool remove);

static void hash_put(aa_pool *pool, aa__chunk *c) {
  aa__assert(pool->large->hash_n < pool->large->hash_cap); /* grown before the take */
  aa__assert(!c->free);
  aa__assert_internal(hash_find(pool, c->base, false) == NULL);
  size_t h = aa__lg_hidx(pool, c->base);
  c->hnext = pool->large->hash[h];
  pool->large->hash[h] = c;
  pool->large->hash_n++;
}

static aa__chunk *hash_find(aa_pool *pool, uintptr_t base, bool remove) {
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

/* ------------------------------------------------------------ free bins */

void aa__lg_bin_insert(aa_pool *pool, aa__chunk *c) {
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

void aa__lg_bin_remove(aa_pool *pool, aa__chunk *c) {
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
static unsigned next_bin(const aa_pool *pool, unsigned b) {
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

/* Chunk records are recycled, and never freed while the pool lives: a
 * thread's large-block cache may still name one (its stale entry then fails
 * the compare-and-swap on `state`, whose generation survives the reuse).
 * Recycling also saves a calloc and a free per split and merge. */
aa__chunk *aa__lg_chunk_get(aa_pool *pool) {
  aa__chunk *c = pool->large->spare;
  if (c == NULL)
    return calloc(1, sizeof *c);
  pool->large->spare = c->fnext;
  pool->large->nspare--;
  uint64_t st = atomic_load_explicit(&c->state, AA__RLX);
  /* every field but `state`: a stale holder's compare-and-swap may read it
   * at any time, so it changes only atomically */
  const size_t at = offsetof(aa__chunk, state), after = at + sizeof c->state;
  memset(c, 0, at);
  memset((char *)c + after, 0, sizeof *c - after);
  atomic_store_explicit(&c->state, aa__lg_st_phase(st, AA__CH_FREE), AA__RLX);
  return c;
}

void aa__lg_chunk_put(aa_pool *pool, aa__chunk *c) {
  c->fnext = pool->large->spare;
  pool->large->spare = c;
  pool->large->nspare++;
}

/* Parking: a large chunk freed whole goes to a short list instead of being
 * coalesced at once, so an allocation of the same size on the same stream
 * (a loop's next iteration) takes it back without a split, a merge or a
 * bin search. Everything that looks at free chunks as a whole unparks
 * first.
 *
 * A parked chunk beside free memory is taken back only when no free chunk
 * elsewhere is an exact hole of the request's size (park_take); else the
 * request goes to best fit, with the parked chunks merged first. Before,
 * the newest parked chunk of the size was taken whatever lay around it: a
 * training trace's second step took a 12 MiB block out of what would have
 * been a 72 MiB free run while an exact 12 MiB hole lay elsewhere, and its
 * 250 MiB logits found no room (bench/replay/train_trace.py: peak reserved
 * 3766 MiB, 3716 with this; the replay's model of PyTorch's expandable
 * segments 3742). A chunk that goes into the bins beside a parked one
 * merges it (aa__lg_coalesce_insert). */
static void park_drop(aa_pool *pool, unsigned i) {
  memmove(&pool->large->park[i], &pool->large->park[i + 1], (pool->large->npark - i - 1) * sizeof *pool->large->park);
  pool->large->npark--;
}

void aa__lg_unpark_all(aa_pool *pool) {
  while (pool->large->npark > 0) { /* oldest first; a merge may unlist a neighbour */
    aa__chunk *c = pool->large->park[0];
    park_drop(pool, 0);
    c->parked = 0;
    aa__lg_coalesce_insert(pool, c);
  }
}

/* Whether free chunk a, a room's free part (room_open), and free memory b
 * above it that is no room stay apart: while some of a's pages are
 * unmapped. Merged, the chunk would start with them, and the next request
 * cut from it would map them while the mapped memory above lay idle (a
 * freed activation after a room of kept blocks). A room's free part merges
 * with free memory below it, and once mapped with any. Out of line: the
 * merge tests below ask it only of a room. */
__attribute__((noinline)) static bool room_kept(const aa_pool *pool, const aa__chunk *a,
                                                const aa__chunk *b) {
  return !b->room && pool->large->vmm_page != 0 && !aa__lg_prefix_mapped(pool, a, a->size);
}

/* Whether free neighbours a (lower) and b may merge as their streams go,
 * parking and rooms aside. */
static inline bool merge_state_ok(const aa__chunk *a, const aa__chunk *b) {
  if (!a->free || !b->free || a->nxev > 0 || b->nxev > 0)
    return false;
  return a->any || b->any || a->stream == b->stream;
}

/* Whether free neighbours a (lower) and b could merge were neither parked.
 * (merge_state_ok's tests written out: GCC did not inline it here, 2% more
 * instructions a call in the replay.) */
static inline bool merge_ok_unparked(const aa_pool *pool, const aa__chunk *a, const aa__chunk *b) {
  if (!a->free || !b->free || a->nxev > 0 || b->nxev > 0 || (a->room && room_kept(pool, a, b)))
    return false;
  return a->any || b->any || a->stream == b->stream;
}

/* Whether parked chunk c would merge with a free neighbour. */
static bool beside_free(const aa_pool *pool, const aa__chunk *c) {
  return (c->prev != NULL && merge_ok_unparked(pool, c->prev, c)) ||
         (c->next != NULL && merge_ok_unparked(pool, c, c->next));
}

static bool prefix_held(const aa_pool *pool, const aa__chunk *c, size_t n, bool touched);

/* Whether a free chunk in the bins is an exact hole of `need` bytes that
 * best fit would take on `stream` (its region, its pages held). */
static bool exact_hole(aa_pool *pool, size_t need, aa_stream stream) {
  bool touched = atomic_load_explicit(&pool->limit, AA__RLX) == 0, small = aa__lg_small(need);
  for (aa__chunk *c = pool->large->bins[aa__lg_bin_of(need)]; c; c = c->fnext) {
    if (c->size == need && c->seg->small_reqs == small && prefix_held(pool, c, need, touched) &&
        aa__lg_usable(pool, c, stream))
      return true;
  }
  return false;
}

static aa__chunk *park_take(aa_pool *pool, size_t need, aa_stream stream) {
  unsigned beside = AA__LARGE_PARK;                 /* the newest fitting one beside free memory */
  for (unsigned i = pool->large->npark; i-- > 0;) { /* newest first */
    aa__chunk *c = pool->large->park[i];
    if (c->size != need || c->seg->small_reqs != aa__lg_small(need) || !aa__lg_usable(pool, c, stream))
      continue;
    if (beside_free(pool, c)) {
      if (beside == AA__LARGE_PARK)
        beside = i;
      continue;
    }
    park_drop(pool, i); /* an exact hole of its own: what best fit takes */
    c->parked = 0;
    return c;
  }
  if (beside == AA__LARGE_PARK || exact_hole(pool, need, stream))
    return NULL;
  aa__chunk *c = pool->large->park[beside]; /* no exact hole elsewhere */
  park_drop(pool, beside);
  c->parked = 0;
  return c;
}

/* Neighbour n of a chunk becoming free, if it is parked (in the park list:
 * aa__lg_carve marks its pieces parked without listing them) and could
 * merge with it: out of the list and into its bin, so that it merges. */
static void unpark_neighbour(aa_pool *pool, aa__chunk *n) {
  for (unsigned i = 0; i < pool->large->npark; i++) {
    if (pool->large->park[i] == n) {
      park_drop(pool, i);
      n->parked = 0;
      aa__lg_bin_insert(pool, n);
      return;
    }
  }
}

static void park(aa_pool *pool, aa__chunk *c) {
  c->parked = 1; /* first: the chunk unparked below must not merge into it */
  if (pool->large->npark == AA__LARGE_PARK) {
    aa__chunk *old = pool->large->park[0];
    park_drop(pool, 0);
    old->parked = 0;
    aa__lg_coalesce_insert(pool, old);
  }
  pool->large->park[pool->large->npark++] = c;
}

/* Whether a free chunk may be handed out on `stream` now: first the events
 * of its record_stream'd streams (xev) must have completed; then its own
 * stream takes it at once, and another stream when its freeing stream is
 * idle (no event needed) or the event on that stream (ev: recorded at the
 * free for a record_stream'd chunk, else lazily here; one event covers the
 * chunk) has completed. A chunk found usable everywhere here is
 * not merged with its neighbours (the caller is walking the bins): settle
 * merges such chunks on the way to growing. */
/* Whether the events of c's record_stream'd streams (xev) have all
 * completed, releasing them; from then on c is a chunk freed on c->stream. */
static bool xev_done(aa_pool *pool, aa__chunk *c) {
  if (c->nxev == 0)
    return true;
  if (!aa__events_done(pool, c->xev, &c->nxev))
    return false;
  free(c->xev);
  c->xev = NULL;
  return true;
}

/* Free chunk c's work on its freeing stream has completed: usable on every
 * stream; its free neighbours merge with it at the next request
 * (process_events). */
static void usable_everywhere(aa_pool *pool, aa__chunk *c) {
  c->any = 1;
  pool->large->merge_due = true;
}

/* Whether the event free chunk c holds on its freeing stream (ev) has
 * completed; then it is released and c is usable everywhere. */
static bool ev_done(aa_pool *pool, aa__chunk *c) {
  uint32_t one = 1;
  if (!aa__events_done(pool, &c->ev, &one))
    return false;
  c->ev = NULL;
  usable_everywhere(pool, c);
  return true;
}

/* "Usable on any stream?": aa__lg_usable asked on a stream no caller has,
 * so that a chunk freed on any real stream records its event and is tested
 * on it. (aa_stream)-1 was used before and is AA_STREAM_HOST: a chunk freed
 * on the host pseudo-stream answered "usable on your own stream", never
 * became usable anywhere, and was never released, trimmed or unmapped. */
static const char anywhere_tag;
#define ANYWHERE ((aa_stream)(uintptr_t)&anywhere_tag)

bool aa__lg_usable_anywhere(aa_pool *pool, aa__chunk *c) {
  return !pool->has_events || (aa__lg_usable(pool, c, ANYWHERE) && c->any);
}

bool aa__lg_events_done(aa_pool *pool, aa__chunk *c) {
  return xev_done(pool, c) && (c->ev == NULL || ev_done(pool, c));
}

bool aa__lg_usable(aa_pool *pool, aa__chunk *c, aa_stream stream) {
  aa_backend *b = pool->backend;
  if (!xev_done(pool, c))
    return false;
  if (c->any || c->stream == stream)
    return true;
  if (c->ev == NULL && aa__stream_idle(pool, c->stream)) {
    usable_everywhere(pool, c); /* freed before the query: its work has completed */
    return true;
  }
  if (c->ev == NULL && b->ops->event_record(b, c->stream, &c->ev) != AA_OK) {
    c->ev = NULL;
    return false;
  }
  return ev_done(pool, c);
}

/* Before each request, as PyTorch's allocator asks its outstanding events at
 * every allocation: the events that free chunks already hold (their
 * record_stream'd streams', and one recorded on the freeing stream for
 * another stream's use) are asked once, with no event recorded and no
 * stream queried here. A chunk whose events have all completed is a plain
 * free chunk again (usable on every stream when the freeing stream's event
 * was among them), and, when any changed so or a bin walk made chunks usable
 * everywhere since (large_merge_due), free neighbours that may merge
 * (aa__lg_merge_ok) do. Before, such chunks stayed in the pieces each
 * stream's frees had left until the pool was about to grow (settle), and
 * best fit placed a step's small input at the start of the longest piece,
 * so that its large tensor found no mapped room: in a pattern that repeats,
 * reserved memory grew cycle after cycle when the pool started fragmented
 * (adaptalloc-bench streams sidepipe --after 250: 158 -> 234 MiB over 6
 * cycles; with this, 150 from the first; fresh 116 -> 102, ddp --busy
 * 3252 -> 3084, fsdp --busy 2186 -> 2050). The walk is over free chunks
 * only; the merge pass over the segments' chunks runs only when something
 * changed. Only where stream-ordered reuse is on (the device pools by
 * default): with PyTorch's rule instead a layer's pending weights cannot be
 * reused by the next gather, and holes merged anew each step hold more
 * (fsdp --busy --no-stream-wait 5700 -> 7568 MiB with it). Called with
 * large->mu held. */
static void process_events(aa_pool *pool) {
  bool changed = pool->large->merge_due;
  for (unsigned b = next_bin(pool, 0); b < AA__LARGE_BINS; b = next_bin(pool, b + 1)) {
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      if (c->any || (c->nxev == 0 && c->ev == NULL))
        continue;
      if (c->nxev > 0) {
        if (!xev_done(pool, c))
          continue;
        changed = true; /* a chunk freed on c->stream now: its neighbours there merge */
      }
      if (c->ev != NULL)
        changed |= ev_done(pool, c);
    }
  }
  if (!changed)
    return;
  pool->large->merge_due = false;
  for (aa__seg *s = pool->large->segs; s; s = s->next) {
    for (aa__chunk *c = s->first; c; c = c->next) {
      if (!c->free || c->parked || c->next == NULL || !aa__lg_merge_ok(pool, c, c->next))
        continue;
      aa__lg_bin_remove(pool, c); /* the run after c into c, back in its bin once */
      do
        aa__lg_absorb(pool, c, c->next);
      while (c->next && (aa__lg_merge_ok(pool, c, c->next) ||
                         (aa__lg_room_end(c) && aa__lg_merge_ok(pool, c, c->next))));
      (void)aa__lg_room_end(c); /* also where the run ends the segment */
      aa__lg_bin_insert(pool, c);
    }
  }
}

/* Merges free chunk `first` (in its bin) with the free neighbours after it
 * until it is `total` bytes, back in the bins; returns the chunks absorbed.
 * The caller checked that they may merge (settle: all usable everywhere;
 * wait_run: all usable on one stream). */
static size_t merge_run(aa_pool *pool, aa__chunk *first, size_t total) {
  size_t n = 0;
  aa__lg_bin_remove(pool, first);
  while (first->size < total) {
    aa__lg_absorb(pool, first, first->next);
    n++;
  }
  (void)aa__lg_room_end(first); /* the run was a room's every chunk */
  aa__lg_bin_insert(pool, first);
  return n;
}

/* Before the pool grows: every free chunk still tied to a stream (freed on
 * it, or waiting for record_stream's events) whose work has completed is
 * made usable on every stream, and the run of such free neighbours that
 * best fits a `need`-byte request merges, so that memory freed on a side
 * stream serves the request instead of new memory. PyTorch queries its
 * outstanding events at every allocation; this asks only on the way to
 * growing: one query per pending event and one per stream that holds free
 * chunks (answers kept for the pass). Returns the chunks merged; `settled`
 * adds the chunks made usable. */
static size_t settle(aa_pool *pool, size_t need, uint64_t *settled) {
  enum { NSTREAMS = 8 };
  aa_stream seen[NSTREAMS];
  bool idle[NSTREAMS];
  unsigned nseen = 0;
  uint64_t n = 0;
  for (unsigned b = next_bin(pool, 0); b < AA__LARGE_BINS; b = next_bin(pool, b + 1)) {
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      aa__assert_internal(c->free && !c->parked);
      if (c->any)
        continue;
      bool done;
      if (!xev_done(pool, c)) /* record_stream's streams, then c->stream's rule */
        continue;
      if (c->ev != NULL) {
        done = ev_done(pool, c);
      } else {
        unsigned i = 0;
        while (i < nseen && seen[i] != c->stream)
          i++;
        if (i == nseen) {
          if (nseen == NSTREAMS)
            continue; /* more streams than one pass asks about */
          seen[nseen] = c->stream;
          idle[nseen++] = aa__stream_idle(pool, c->stream);
        }
        done = idle[i];
        if (done) /* freed before the answer: its work has completed */
          usable_everywhere(pool, c);
      }
      n += done;
    }
  }
  *settled += n;
  /* (aa__lg_usable makes chunks usable everywhere too, without merging
   * them: their runs count as well.) Merge only the run of free neighbours usable everywhere that serves the
   * request best (the smallest whose sum fits); the others keep their
   * places, so a pattern that repeats finds its holes again next time
   * (merging every run cut a repeating FSDP-like step's holes anew each
   * step: adaptalloc-bench streams fsdp --busy) */
  aa__chunk *best = NULL;
  size_t best_size = 0;
  for (aa__seg *s = pool->large->segs; s; s = s->next) {
    if (s->small_reqs != aa__lg_small(need))
      continue; /* the request's region only */
    for (aa__chunk *c = s->first; c;) {
      size_t sum = c->size;
      aa__chunk *e = c;
      while (e->next && aa__lg_merge_ok(pool, e, e->next) && e->any && e->next->any) {
        e = e->next;
        sum += e->size;
      }
      if (e != c && c->free && c->any && sum >= need && (best == NULL || sum < best_size)) {
        best = c;
        best_size = sum;
      }
      c = e->next;
    }
  }
  if (best == NULL)
    return 0;
  return merge_run(pool, best, best_size);
}

/* Whether the first `n` bytes of free chunk `c` lie in memory the pool has:
 * always without virtual memory; expandable, pages mapped now or, when
 * `touched` (no limit), mapped once (aa__lg_prefix_touched). The one test
 * of find_fit_mapped, wait_fit and wait_run. */
static bool prefix_held(const aa_pool *pool, const aa__chunk *c, size_t n, bool touched) {
  return pool->large->vmm_page == 0 ||
         (touched ? aa__lg_prefix_touched(pool, c, n) : aa__lg_prefix_mapped(pool, c, n));
}

/* Expandable: best fit among the free chunks whose pages are all mapped or,
 * without a limit, were all mapped once (below the segment's high-water
 * mark, and not given back by an explicit release since: aa__seg.forgot),
 * so that placement is what it would have been had nothing been
 * unmapped. Until something is unmapped the two are the same. After a trim,
 * a release or an out-of-memory retry, a rule that preferred pages mapped
 * now put a request into a larger mapped hole instead of the unmapped one
 * that fits it, and the next larger request mapped new pages: on a GPT-2
 * trace one trim of 414 MiB raised peak reserved from 7888 to 8568 MiB,
 * depending on when in the step it came (BENCHMARKS.md, section 6). Placed
 * as if nothing had been unmapped, the pool maps at most the pages it would
 * have kept mapped, at every moment. Under a limit pages that are mapped now
 * come first: memory there moves between holes, and moving costs calls. */
static aa__chunk *find_fit_mapped(aa_pool *pool, size_t need, aa_stream stream) {
  bool touched = atomic_load_explicit(&pool->limit, AA__RLX) == 0;
  bool small = aa__lg_small(need);
  bool large = need > AA__LARGE_MID_MAX; /* rooms are the mid-size requests' (room_open) */
  for (unsigned b = next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = next_bin(pool, b + 1)) {
    aa__chunk *best = NULL;
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      if (c->size >= need && (best == NULL || c->size < best->size) && c->seg->small_reqs == small &&
          !(large && c->room) && prefix_held(pool, c, need, touched) &&
          aa__lg_usable(pool, c, stream))
        best = c;
    }
    if (best)
      return best;
  }
  return NULL;
}

/* Expandable, when find_fit_mapped found nothing: the free chunk that needs
 * the fewest pages mapped, the smallest of those. Without a limit only a
 * chunk that reaches past its segment's high-water mark is left; under one,
 * plain best fit by size would map new pages while mapped ones lie idle in
 * holes of another size, and move them later (a GPT-2 trace under a limit
 * 2-6% above its peak in use: 7-10% fewer page maps and unmaps). Scans
 * every fitting free chunk, but only on the way to mapping at least one
 * page, which costs more than the scan. */
static aa__chunk *find_fit_fewest_maps(aa_pool *pool, size_t need, aa_stream stream) {
  aa__chunk *best = NULL;
  size_t best_new = 0;
  bool small = aa__lg_small(need);
  bool large = need > AA__LARGE_MID_MAX;
  for (unsigned b = next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = next_bin(pool, b + 1)) {
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      if (c->size < need || c->seg->small_reqs != small)
        continue;
      size_t n = aa__lg_unmapped_under(pool, c, need, best ? best_new : SIZE_MAX);
      if (best != NULL && (n > best_new || (n == best_new && c->size >= best->size)))
        continue;
      if (large && c->room && n > 0)
        continue; /* a room's mapped memory before new pages, not its unmapped pages */
      if (!aa__lg_usable(pool, c, stream))
        continue;
      best = c;
      best_new = n;
    }
  }
  return best;
}

/* Best fit among free chunks usable on `stream`; with `have`, only where
 * the pool needs no new memory for it (expandable: find_fit_mapped's chunks,
 * mapped now or, without a limit, once). */
static aa__chunk *find_fit(aa_pool *pool, size_t need, aa_stream stream, bool have) {
  if (pool->large->vmm_page != 0) {
    aa__chunk *c = find_fit_mapped(pool, need, stream);
    if (c || have)
      return c;
    return find_fit_fewest_maps(pool, need, stream);
  }
  bool small = aa__lg_small(need);
  for (unsigned b = next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = next_bin(pool, b + 1)) {
    aa__chunk *best = NULL;
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      if (c->size >= need && (best == NULL || c->size < best->size) && c->seg->small_reqs == small &&
          aa__lg_usable(pool, c, stream))
        best = c;
    }
    if (best)
      return best;
  }
  return NULL;
}

/* The best-fitting free chunk of the other region than the one `need`
 * belongs to (aa__lg_small), its pages mapped now; `between`: only one
 * that lies between two blocks still in use. Two callers in aa__lg_take:
 *
 * - between: a small request that its own region cannot
 *   serve without new memory takes a hole of the larger requests' region
 *   (not beside a free chunk, so no freed neighbour's room is cut: the hole
 *   is memory held anyway). Without it, the moe step of `adaptalloc-bench
 *   steps` reserved about 0.3% more than with one region (its router logits
 *   and expert indices, 16 KiB-1 MiB, mapped pages of their own while holes
 *   among the experts' tensors stayed free); the tail where the large
 *   blocks are cut one after another, where a small block outliving its
 *   neighbour pins a hole, is not between two live blocks. It runs only
 *   when the region's own search found nothing, before the growth path's
 *   settle and waits (after them, it sent every such request through those
 *   scans: 5% more instructions a call on that step).
 * - any: the backend refused new memory (a pool at its
 *   cap), before the out-of-memory path (tried once, after a segment or a
 *   page map was refused). The regions keep requests apart while memory can
 *   grow; under a cap, memory free in one is the request's. Without it, a
 *   cache-mode pool with 8 MiB free at the end of a large block's segment
 *   failed a 600 KiB request (the retry releases only wholly free segments;
 *   test_core_place_capped_cache). */
static aa__chunk *find_fit_other(aa_pool *pool, size_t need, aa_stream stream, bool between) {
  bool small = aa__lg_small(need);
  for (unsigned b = next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = next_bin(pool, b + 1)) {
    aa__chunk *best = NULL;
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      if (c->size < need || (best != NULL && c->size >= best->size) || c->seg->small_reqs == small)
        continue;
      if (between && (c->prev == NULL || c->next == NULL || c->prev->free || c->next->free))
        continue;
      if (prefix_held(pool, c, need, false) && aa__lg_usable(pool, c, stream))
        best = c;
    }
    if (best != NULL)
      return best;
  }
  return NULL;
}

/* Orders `stream` after the pending last uses of free chunk `c`: the events
 * of its record_stream'd streams and, when `stream` is not the one it was
 * freed on, an event on that one (recorded now when none was: it covers the
 * free). On success c is a chunk freed on `stream` whose old events are
 * released, counted in large_stream_waits, with an event recorded on
 * `stream` after the waits (ev): what is split off it, or c itself if it
 * goes back unused, serves another stream only once that event completes.
 * An event c held from before the waits is released, not kept: recorded on
 * c->stream before `stream` waited for the record_stream'd streams, it does
 * not cover their work (a remainder handed to a third stream when it
 * completed raced with them). On failure (a stream that cannot wait now, an
 * event that cannot be made) some waits may have been issued, harmless: c
 * is unchanged but for a recorded event. */
static bool order_after(aa_pool *pool, aa__chunk *c, aa_stream stream) {
  aa_backend *b = pool->backend;
  bool other = !c->any && c->stream != stream;
  if (other && c->ev == NULL && b->ops->event_record(b, c->stream, &c->ev) != AA_OK) {
    c->ev = NULL;
    return false;
  }
  for (uint32_t i = 0; i < c->nxev; i++) {
    if (b->ops->stream_wait(b, stream, c->xev[i]) != AA_OK)
      return false;
  }
  if (other && c->ev != NULL && b->ops->stream_wait(b, stream, c->ev) != AA_OK)
    return false;
  for (uint32_t i = 0; i < c->nxev; i++)
    aa__event_release(pool, c->xev[i]);
  free(c->xev);
  c->xev = NULL;
  c->nxev = 0;
  aa__event_release(pool, c->ev);
  c->ev = NULL;
  c->any = 0;
  c->stream = stream;
  /* after the waits: completes only once what they wait for has (without
   * it, c->stream's idleness says so, stream_query counting the waits) */
  if (b->ops->event_record(b, stream, &c->ev) != AA_OK)
    c->ev = NULL;
  pool->large->stream_waits++;
  return true;
}

/* wait_fit, when no single free chunk fits: the smallest run of free
 * neighbours (each usable on `stream` now, or once `stream` is ordered
 * after its pending uses; the last one may reach past the pages the pool
 * has, the request's part of it not) that fits `need`, merged into one
 * chunk freed on `stream`. A block freed with record_stream'd streams still
 * pending cannot merge (aa__lg_merge_ok), so a step whose blocks are
 * record_stream'd on a side stream and freed while that stream's work is
 * queued (DDP's gradients: adaptalloc-bench streams ddp --busy) leaves each
 * of them a hole of its own between free neighbours, and the pool grew
 * beside runs of them larger than the request. Scans every free chunk's
 * run, but only on the way to growing. Returns the merged chunk still in
 * its bin, or NULL (nothing fits, or a stream cannot wait: the members
 * ordered before it stay ordered, harmless). */
static aa__chunk *wait_run(aa_pool *pool, size_t need, aa_stream stream, bool touched) {
  aa__chunk *best = NULL;
  size_t best_size = 0;
  for (aa__seg *s = pool->large->segs; s; s = s->next) {
    if (s->small_reqs != aa__lg_small(need))
      continue; /* the request's region only */
    for (aa__chunk *a = s->first; a; a = a->next) {
      size_t w = 0;
      for (aa__chunk *z = a; z && z->free && !z->parked && (z == a || !z->prev->room || !room_kept(pool, z->prev, z));
           z = z->next) {
        if (w + z->size >= need) { /* the window a..z, two or more chunks */
          if (z != a && (best == NULL || w + z->size < best_size) &&
              prefix_held(pool, z, need - w, touched)) {
            best = a;
            best_size = w + z->size;
          }
          break;
        }
        if (!prefix_held(pool, z, z->size, touched))
          break;
        w += z->size;
      }
    }
  }
  if (best == NULL)
    return NULL;
  size_t sum = 0;
  for (aa__chunk *c = best; sum < best_size; c = c->next) {
    sum += c->size;
    bool ready = c->nxev == 0 && (c->any || c->stream == stream);
    if (!ready && !order_after(pool, c, stream))
      return NULL;
  }
  (void)merge_run(pool, best, best_size);
  return best;
}

/* On the way to growing, when no free chunk is usable on `stream` now (and
 * settle merged nothing): the best-fitting free chunk whose last uses on
 * other streams are still pending, with `stream` ordered after them
 * (order_after) instead of new memory: a stream-ordered reuse, as
 * cudaMallocAsync's pools make it, where PyTorch's caching allocator maps
 * or allocates more while the events are pending (the CPU runs ahead of the
 * GPU, so a block freed a few kernels ago is pending for most of a step:
 * FSDP-like gathers, adaptalloc-bench streams fsdp --busy). The chunks
 * considered are those find_fit would take but for their streams
 * (expandable: pages mapped now or, without a limit, once); chunks still
 * waiting for record_stream'd events do not merge, so each is taken alone,
 * and when none fits alone, the smallest fitting run of free neighbours
 * is ordered and merged (wait_run).
 * `stream` waits on the GPU for work that is already queued ahead of it;
 * the host never blocks. Returns the chunk still in its bin, or NULL. */
static aa__chunk *wait_fit(aa_pool *pool, size_t need, aa_stream stream) {
  bool touched = atomic_load_explicit(&pool->limit, AA__RLX) == 0;
  bool small = aa__lg_small(need);
  for (unsigned b = next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = next_bin(pool, b + 1)) {
    aa__chunk *best = NULL;
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      if (c->size < need || (best != NULL && c->size >= best->size) || c->any || c->seg->small_reqs != small ||
          (c->stream == stream && c->nxev == 0))
        continue; /* too small, no better, or not held by another stream */
      if (!prefix_held(pool, c, need, touched))
        continue;
      best = c;
    }
    if (best != NULL && order_after(pool, best, stream))
      return best;
    if (best != NULL)
      return NULL; /* the stream cannot wait now: the pool grows as before */
  }
  return wait_run(pool, need, stream, touched);
}

/* Cuts `c` (free, out of the bins) to `need`, putting the rest back.
 * Inlined into aa__lg_take, as when it was its one caller (room_open is
 * the other). */
static inline __attribute__((always_inline)) void split(aa_pool *pool, aa__chunk *c, size_t need) {
  aa__assert(c->free && !c->parked && need > 0 && need <= c->size);
  aa__assert_internal(c->fnext == NULL && c->fprev == NULL);
  if (c->size - need < SPLIT_MIN)
    return;
  aa__chunk *r = aa__lg_chunk_get(pool);
  if (r == NULL)
    return; /* keep it whole */
  r->seg = c->seg;
  r->base = c->base + need;
  r->size = c->size - need;
  r->free = 1;
  r->any = c->any;
  r->stream = c->stream;
  r->freed_at = c->freed_at;
  r->room = c->room;
  r->ev = c->ev; /* recorded after the whole was freed: covers the rest */
  c->ev = NULL;
  c->size = need;
  r->prev = c;
  r->next = c->next;
  if (c->next)
    c->next->prev = r;
  c->next = r;
  aa__assert(c->base + c->size == r->base);
  aa__assert_internal(r->next == NULL || r->base + r->size == r->next->base);
  aa__lg_bin_insert(pool, r);
}

/* Rooms. Best fit cuts a block that needs fresh memory from the free end
 * of the reservation, right after the block before it. A mid-size block
 * (1-10 MiB) cut so after a large one that it outlives ends that block's
 * hole: a step that allocates 34 pairs of a 15.4 MiB activation and a
 * 1.5 MiB tensor kept past it, then frees the activations, left 34 holes
 * of 15.4 MiB between the kept tensors; the next phase's 16 MiB buffers fit
 * none and mapped 128 MiB more (bench/replay/holes_trace.py --keep-kib
 * 1536: 966 MiB reserved for 837 in use; the replay's model of PyTorch's
 * allocator, whose 1-10 MiB requests share 20 MiB segments, 896). Requests
 * of at most 1 MiB have a region of their own for this; one for 1-10 MiB
 * put a training trace's weights and gradients apart from its activations
 * and cost it 6% (BENCHMARKS.md section 14). Instead, a mid-size request
 * whose chunk is the free end (the segment's last chunk), right after a
 * live block at least AA__LARGE_ROOM_RATIO times its size, opens a room
 * there: AA__LARGE_ROOM bytes (to a page boundary) flagged `room`, the
 * block at its start. The mid-size requests that follow fill it by best
 * fit. A larger request passes over rooms (find_fit_mapped), so it is cut
 * after the room and the step's activations lie side by side (844 MiB);
 * only on the way to new pages does it take a room's free memory, and only
 * where mapped (find_fit_fewest_maps). A room costs address space, not
 * memory: its free pages stay unmapped until a mid-size block needs them.
 * It is one no more once no block is left in it (aa__lg_coalesce_insert)
 * or it is merged with other free memory (aa__lg_absorb), which its free
 * part is not while it has unmapped pages and that memory lies above it
 * (room_kept). A mid-size request that does not fit a room lying
 * at the free end is cut from the room's free part merged with the end
 * (the block at the room's free start), so that no partial page is left
 * between the room and the block after it (a room for a layer's weights
 * raised a training trace's peak by a page); merged with memory that is no
 * room, the room ends there. The bound of six: at four,
 * 2.25 MiB gradients cut after 12 MiB activations opened rooms and a
 * training trace's peak rose (train_trace.py --vary-seq: 5774 -> 5800
 * MiB); from five to eight only the holes traces changed in the replay
 * lab. c: the free end (out of the bins), which the request takes on
 * `stream`; returns the chunk it takes instead, or c. */
__attribute__((noinline)) static aa__chunk *room_open(aa_pool *pool, aa__chunk *c, size_t need,
                                                      aa_stream stream) {
  aa__assert(c->free && c->next == NULL && !c->parked);
  aa__chunk *a = c->prev;
  if (a != NULL && a->room && !a->parked && merge_state_ok(a, c) && aa__lg_usable(pool, a, stream)) {
    /* a room at the free end: its free part and the end merge, the block
     * at its start, and the room ends (aa__lg_absorb); the merged chunk is
     * usable on `stream`, as both parts are. Not from a parked room chunk (c came from
     * park_take, at the end of a reservation, its neighbour parked too):
     * that one is in no bin and still in the park list. */
    aa__lg_bin_remove(pool, a);
    aa__lg_bin_insert(pool, c);
    aa__lg_absorb(pool, a, c);
    return a;
  }
  if (a == NULL || a->free || a->size / AA__LARGE_ROOM_RATIO < need)
    return c;
  size_t ps = pool->large->vmm_page;
  uintptr_t sb = c->seg->h.base;
  size_t len = (size_t)(sb + aa__lg_round_up(c->base - sb + AA__LARGE_ROOM, ps) - c->base);
  if (c->size < len + SPLIT_MIN)
    return c;          /* the reservation's last room: plain best fit */
  split(pool, c, len); /* the rest, the new free end, is no room */
  c->room = 1;         /* the caller's split cuts the block from it, the rest stays a room */
  return c;
}

/* The backend refused new memory for a request: a plan that has not
 * yielded yet for it (a small request's region grows by its own pages
 * while the plan holds) yields now, its arena's free room the request's
 * before the other region's and the out-of-memory path. */
static bool plan_yield_refused(aa_pool *pool, bool *yielded, size_t need, aa_stream stream) {
  if (*yielded || pool->large->plan == NULL || !aa__lg_plan_can_yield(pool, need, stream, true))
    return false;
  *yielded = true;
  aa__lg_plan_yield(pool);
  return true;
}

aa__chunk *aa__lg_take(aa_pool *pool, aa__tcache *tc, size_t size, size_t need, aa_stream stream,
                       bool *retry) {
  bool passthrough = pool->cfg.large_mode == AA_LARGE_PASSTHROUGH;
  bool vmm = pool->large->vmm_page != 0;
  bool reclaimed = false;
  bool fresh = false;    /* a new segment was made for this request */
  bool waited = false;   /* c came from wait_fit: c->stream == stream */
  bool stitched = false; /* c is a stitched range's (whole, never split) */
  int stitch_pass = 0;   /* 1: free ranges put to sleep; 2: dormant ones destroyed */
  bool yielded = false;  /* the plan's arena was given to the path for this request */
  int other = 0;         /* 1: the backend refused, the other region's memory next; 2: taken */
  uint64_t maps0 = pool->large->vmm_maps;
  *retry = false;
  if (!passthrough && pool->large->stream_wait)
    process_events(pool);
  for (;;) {
    if (pool->large->hash_n >= pool->large->hash_cap && hash_grow(pool) != AA_OK)
      return NULL;
    aa__chunk *c = NULL;
    if (other == 1) { /* the backend refused new memory: the other region's free memory */
      other = 2;
      c = find_fit_other(pool, need, stream, false);
      if (c == NULL) {
        *retry = true; /* releasing caches may help */
        return NULL;
      }
      aa__lg_bin_remove(pool, c);
      waited = stitched = false;
    } else if (!passthrough) {
      c = park_take(pool, need, stream);
    }
    if (c == NULL && !passthrough) {
      aa__lg_unpark_all(pool); /* parked chunks serve exact repeats; else they merge */
      c = find_fit(pool, need, stream, !reclaimed);
      /* a small request takes a hole between live blocks of the large
       * ones' region before its own region grows (find_fit_other) */
      if (c == NULL && !reclaimed && aa__lg_small(need))
        c = find_fit_other(pool, need, stream, true);
      if (c == NULL && !reclaimed) {
        /* nothing fits in what the pool has (expandable: below the
         * high-water mark, find_fit_mapped): the blocks other threads'
         * caches hold come back before it grows (large_ltc.c) */
        reclaimed = true;
        /* ...and the chunks whose streams' work has completed merge */
        size_t back = aa__lg_ltc_reclaim(pool, tc, true);
        if (settle(pool, need, &pool->large->settled) + back > 0)
          continue;
        /* ...and, still nothing, a chunk whose other streams' work is
         * pending serves once `stream` is ordered after it */
        c = pool->large->stream_wait && stream != AA_STREAM_HOST ? wait_fit(pool, need, stream) : NULL;
        waited = c != NULL;
        /* ...and, still nothing, stitching (large_stitch.c): first the free
         * stitched ranges sleep (their pages back in the holes they came
         * from, no call) and the search starts again, so that a request the
         * old holes fit finds them; then a range of about this size (kept,
         * or dormant and woken: no call) or a new one from whole free pages
         * in holes; failing that, once, the dormant ranges retire (their
         * pages free for a new range, which is one of them again when it
         * would map exactly its handles) and the search starts again */
        if (c == NULL && pool->large->stitch_on) {
          if (stitch_pass == 0) {
            stitch_pass = 1;
            if (aa__lg_stitch_rest(pool) > 0) {
              reclaimed = false;
              continue;
            }
          }
          /* the chunk the pool would map new pages under for it: the
           * only one with unmapped pages a new range may take pages of */
          c = aa__lg_stitch_take(pool, need, stream, find_fit(pool, need, stream, false));
          stitched = c != NULL;
          if (c == NULL && stitch_pass < 2 && aa__lg_stitch_retire_dormant(pool) > 0) {
            stitch_pass = 2;
            reclaimed = false;
            continue;
          }
        }
        if (c == NULL && vmm)
          c = find_fit(pool, need, stream, false);
      }
      if (c && !stitched)
        aa__lg_bin_remove(pool, c);
    }
    /* new memory for a request the plan does not serve, while the plan's
     * arena has free room: the arena becomes the path's chunks first
     * (large_plan.c), so that a plan never costs memory */
    if (!yielded && pool->large->plan != NULL && aa__lg_plan_can_yield(pool, need, stream, false) &&
        (c == NULL || (vmm && !stitched && aa__lg_unmapped_under(pool, c, need, 0) > 0))) {
      yielded = true;
      waited = false; /* c goes back: the next one is found afresh */
      if (c != NULL && !stitched)
        aa__lg_coalesce_insert(pool, c); /* back first: the arena's room may merge with it */
      aa__lg_plan_yield(pool);
      reclaimed = false;
      continue;
    }
    if (c == NULL) {
      int rc = AA_OK;
      size_t segsize = passthrough ? aa__lg_round_up(need, AA__GRANULE)
                                   : aa__lg_round_up(need, AA__LARGE_SEG);
      if (segsize < need)
        return NULL;
      bool small = !passthrough && aa__lg_small(need);
      c = vmm ? aa__lg_vseg_new(pool, need, small, &rc) : aa__lg_seg_new(pool, segsize, small, &rc);
      if (c == NULL && !passthrough && other == 0) {
        if (plan_yield_refused(pool, &yielded, need, stream)) {
          reclaimed = false;
          continue;
        }
        other = 1;
        continue;
      }
      if (c == NULL) {
        *retry = true; /* the backend refused: releasing caches may help */
        return NULL;
      }
      c->stream = stream;
      fresh = true;
    }
    if (aa__lg_mid(need) && c->next == NULL && vmm && !stitched && !c->room && !c->seg->small_reqs)
      c = room_open(pool, c, need, stream); /* the free end: a room for mid-size requests */
    if (!passthrough && !stitched)
      split(pool, c, need);
    if (vmm && !stitched) {
      c->free = 0; /* taken: nothing unparked while mapping may merge into it */
      int rc = aa__lg_ensure_mapped(pool, c);
      if (rc != AA_OK) {
        c->free = 1;
        aa__lg_coalesce_insert(pool, c); /* back where it was taken from */
        if (other == 0) {
          waited = false;
          if (plan_yield_refused(pool, &yielded, need, stream)) {
            reclaimed = false;
            continue;
          }
          other = 1;
          continue;
        }
        *retry = true; /* the backend refused: releasing caches may help */
        return NULL;
      }
    }
    aa__event_release(pool, c->ev);
    c->ev = NULL;
    c->free = 0;
    c->any = 0;
    c->waited = waited;
    if (waited)
      c->stream = stream;
    c->req = size;
    hash_put(pool, c);
    if (fresh || pool->large->vmm_maps != maps0)
      pool->large->misses++; /* the backend was called for it: a miss (docs/stats.md) */
    uint64_t st = aa__lg_st_next_live(atomic_load_explicit(&c->state, AA__RLX));
    atomic_store_explicit(&c->state, st, AA__RLX);
    return c;
  }
}

bool aa__lg_carve(aa_pool *pool, aa__chunk *c, aa__lg_piece *v, size_t n, aa_stream stream) {
  aa__large *L = pool->large;
  size_t want = 2 * n + 1, got = 0, nlive = 0;
  for (size_t i = 0; i < n; i++)
    nlive += v[i].live != 0;
  while (L->hash_n + nlive >= L->hash_cap) {
    if (hash_grow(pool) != AA_OK)
      return false;
  }
  aa__chunk **rec = malloc(want * sizeof *rec);
  if (rec == NULL)
    return false;
  for (; got < want; got++) {
    rec[got] = aa__lg_chunk_get(pool);
    if (rec[got] == NULL) {
      while (got > 0)
        aa__lg_chunk_put(pool, rec[--got]);
      free(rec);
      return false;
    }
  }
  aa__chunk *h = hash_find(pool, c->base, true);
  aa__assert(h == c);
  (void)h;
  /* the new chunks in address order: gaps free (parked until binned, so
   * that none merges with one not yet binned), pieces as given */
  aa__chunk *first = NULL, *last = NULL;
  size_t used = 0;
  uintptr_t at = c->base, end = c->base + c->size;
  for (size_t i = 0; i <= n; i++) {
    uintptr_t b = i < n ? v[i].base : end;
    aa__assert(b >= at && b <= end);
    for (int part = 0; part < 2; part++) {
      uintptr_t lo = part == 0 ? at : b, hi = part == 0 ? b : i < n ? b + v[i].size
                                                                    : b;
      if (hi <= lo)
        continue;
      aa__chunk *r = rec[used++];
      r->seg = c->seg;
      r->base = lo;
      r->size = (size_t)(hi - lo);
      r->prev = last;
      if (last)
        last->next = r;
      else
        first = r;
      last = r;
      if (part == 1 && v[i].live) {
        r->req = v[i].req;
        r->born = v[i].born;
        r->xs = v[i].xs;
        r->nxs = v[i].nxs;
        r->stream = stream;
        uint64_t st = aa__lg_st_next_live(atomic_load_explicit(&r->state, AA__RLX));
        atomic_store_explicit(&r->state, st, AA__RLX);
        hash_put(pool, r);
      } else {
        r->free = 1;
        r->parked = 1;
        r->freed_at = L->frees;
        r->stream = part == 1 ? v[i].stream : stream;
        r->any = !pool->has_events;
        if (part == 1) {
          r->ev = v[i].ev;
          r->xev = v[i].nxev > 0 ? v[i].xev : NULL; /* the path frees it with its last event */
          r->nxev = v[i].nxev;
          if (v[i].nxev == 0)
            free(v[i].xev); /* emptied while the room waited for its own event */
        }
      }
    }
    if (i < n)
      at = v[i].base + v[i].size;
  }
  aa__assert(first != NULL);
  first->prev = c->prev;
  if (c->prev)
    c->prev->next = first;
  else
    c->seg->first = first;
  last->next = c->next;
  if (c->next)
    c->next->prev = last;
  for (size_t i = used; i < want; i++)
    aa__lg_chunk_put(pool, rec[i]);
  free(rec);
  c->next = c->prev = NULL;
  aa__lg_chunk_put(pool, c);
  for (aa__chunk *r = first, *stop = last->next; r != stop;) {
    aa__chunk *nx = r->next;
    if (r->free && r->parked) {
      r->parked = 0;
      aa__lg_coalesce_insert(pool, r);
    }
    r = nx;
  }
  return true;
}

void aa__lg_count_out(aa_pool *pool, size_t size, size_t req) {
  pool->large->in_use += size;
  pool->large->req += req;
  pool->large->allocs++;
  uint64_t ob = atomic_fetch_add_explicit(&pool->out_bytes, size, AA__RLX) + size;
  aa__atomic_max(&pool->peak_out_bytes, ob);
  aa__atomic_max(&pool->win_peak_out_bytes, ob);
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

/* Whether free neighbours a (lower) and b can merge: parking, record_stream
 * events, streams and rooms (room_kept) allow it. */
bool aa__lg_merge_ok(const aa_pool *pool, const aa__chunk *a, const aa__chunk *b) {
  if (!a->free || !b->free || a->parked || b->parked || a->nxev > 0 || b->nxev > 0 ||
      (a->room && room_kept(pool, a, b)))
    return false;
  if (a->any || b->any)
    return true;
  return a->stream == b->stream;
}

/* Merges b (free, in bins) into a (free, out of bins). */
void aa__lg_absorb(aa_pool *pool, aa__chunk *a, aa__chunk *b) {
  aa__assert(a->next == b && b->prev == a && a->seg == b->seg);
  aa__assert(a->base + a->size == b->base && a->free && b->free);
  aa__lg_bin_remove(pool, b);
  if (!(a->any && b->any)) {
    aa_stream s = a->any ? b->stream : a->stream;
    aa__event_release(pool, a->ev);
    aa__event_release(pool, b->ev);
    a->ev = NULL;
    a->any = 0;
    a->stream = s;
  } else {
    aa__event_release(pool, b->ev);
  }
  if (b->freed_at > a->freed_at)
    a->freed_at = b->freed_at;
  a->room &= b->room; /* a room merged with other memory is a room no more */
  a->size += b->size;
  a->next = b->next;
  if (b->next)
    b->next->prev = a;
  aa__lg_chunk_put(pool, b);
}

/* Puts free chunk `c` (out of the bins) into them, merged with whichever
 * free neighbours it may merge with. */
void aa__lg_coalesce_insert(aa_pool *pool, aa__chunk *c) {
  /* Until nothing merges: a neighbour that could not merge with the last
   * one may with the merged chunk (aa__lg_usable makes a free chunk usable
   * anywhere without merging it, and a merge gives the result the stream of
   * its part that was not), so one step each way can leave a pair that
   * merges. Each pass merges two chunks into one: it ends. */
  if (pool->large->npark > 0) { /* a parked neighbour merges now (park) */
    if (c->next && c->next->parked && merge_ok_unparked(pool, c, c->next))
      unpark_neighbour(pool, c->next);
    if (c->prev && c->prev->parked && merge_ok_unparked(pool, c->prev, c))
      unpark_neighbour(pool, c->prev);
  }
  for (;;) {
    if (c->next && aa__lg_merge_ok(pool, c, c->next)) {
      aa__lg_absorb(pool, c, c->next);
      continue;
    }
    if (c->prev && aa__lg_merge_ok(pool, c->prev, c)) {
      aa__chunk *a = c->prev;
      aa__lg_bin_remove(pool, a);
      aa__lg_bin_insert(pool, c);
      aa__lg_absorb(pool, a, c);
      c = a;
      continue;
    }
    if (aa__lg_room_end(c))
      continue; /* a room with no block in it: memory like any other (room_open) */
    break;
  }
  /* what is left unmerged may not merge: stream state or parking says so */
  aa__assert_internal(c->next == NULL || !aa__lg_merge_ok(pool, c, c->next));
  aa__assert_internal(c->prev == NULL || !aa__lg_merge_ok(pool, c->prev, c));
  aa__lg_bin_insert(pool, c);
}

static aa__chunk *find_container(aa__seg *seg, uintptr_t p) {
  for (aa__chunk *c = seg->first; c; c = c->next) {
    if (p >= c->base && p < c->base + c->size)
      return c;
  }
  return NULL;
}

/* Gives a chunk (live or held, its state already moved to free) back:
 * accounting, record_stream events, parking. `counted`: a user's free (a
 * thread cache's flush was counted when the user freed it). Under large->mu. */
void aa__lg_release_chunk(aa_pool *pool, aa__chunk *c, aa_stream stream, bool counted) {
  aa__assert(!c->free && (atomic_load_explicit(&c->state, AA__RLX) & 3) == AA__CH_FREE);
  aa__chunk *h = hash_find(pool, c->base, true);
  aa__assert(h == c);
  (void)h;
  if (!aa__lg_plan_is_arena(pool, c)) { /* the plan's arena was never counted in use */
    aa__assert(pool->large->in_use >= c->size && pool->large->req >= c->req);
    pool->large->in_use -= c->size;
    pool->large->req -= c->req;
    atomic_fetch_sub_explicit(&pool->out_bytes, c->size, AA__RLX);
  }
  if (counted)
    pool->large->frees++;
  if (pool->cfg.large_mode == AA_LARGE_PASSTHROUGH) {
    free(c->xs);
    c->xs = NULL;
    c->nxs = 0;
    c->free = 1;
    aa__lg_seg_unlink_free(pool, c->seg);
    return;
  }
  if (c->waited && pool->has_events && stream != c->stream) {
    /* handed out ordered after other streams' pending work (order_after)
     * and freed elsewhere: that work is behind c->stream's, which counts as
     * a record_stream'd stream (an event there), so that the block is not
     * taken on the free's stream, or anywhere once it is idle (the host
     * pseudo-stream at once), while it is still running */
    bool have = false;
    for (uint32_t i = 0; i < c->nxs && !have; i++)
      have = c->xs[i] == c->stream;
    aa_stream *v = have ? c->xs : realloc(c->xs, (size_t)(c->nxs + 1) * sizeof *v);
    if (v == NULL) {
      aa_backend *b = pool->backend; /* cannot track it: wait for all work */
      if (b->ops->synchronize)
        b->ops->synchronize(b);
    } else if (!have) {
      c->xs = v;
      c->xs[c->nxs++] = c->stream;
    }
  }
  c->waited = 0;
  if (pool->has_events)
    stream = aa__rec_free_stream(c->xs, c->nxs, stream);
  c->free = 1;
  c->freed_at = pool->large->frees;
  c->stream = stream;
  c->any = !pool->has_events;
  c->ev = NULL;
  if (c->nxs > 0 && pool->has_events) {
    void **ev;
    bool synced;
    /* Events on the other streams (xev): once they are done, a block freed
     * on `stream`, reused there at once as PyTorch reuses it. And one on
     * `stream` itself (ev, which aa__lg_usable would otherwise record
     * lazily): with both done it serves every stream, with no wait for the
     * work `stream` is given after this free. */
    uint32_t n = aa__stream_events(pool, c->xs, c->nxs, stream, &c->ev, &ev, &synced);
    if (synced)
      c->any = 1; /* the device was synchronized: usable on any stream */
    c->xev = ev;
    c->nxev = n;
  }
  free(c->xs);
  c->xs = NULL;
  c->nxs = 0;
  if (c->seg->st != NULL) {
    aa__lg_stitch_freed(pool, c); /* a stitched range keeps its one chunk */
    return;
  }
  if (c->nxev == 0)
    park(pool, c);
  else
    aa__lg_coalesce_insert(pool, c);
  aa__lg_enforce_bound(pool);
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
  aa__chunk *c = hash_find(pool, p, false);
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
  aa__chunk *c = hash_find(pool, (uintptr_t)ptr, false);
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
  aa__chunk *c = hash_find(pool, (uintptr_t)ptr, false);
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
    }
  }
  pool->large = L;
  L->stitch_on = c->large_mode == AA_LARGE_EXPANDABLE && c->large_stitch > 0 &&
                 aa__lg_stitch_usable(pool);
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
  for (unsigned b = next_bin(pool, 0); b < AA__LARGE_BINS; b = next_bin(pool, b + 1)) {
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
