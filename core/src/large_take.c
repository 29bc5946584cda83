/*
 * large_take.c — the path's placement: where a request above max_small is
 * served (aa__lg_take): a parked exact repeat, best fit in the request's
 * region, the free memory of other threads' caches and of settled streams,
 * stream-ordered reuse, stitched ranges, the plan's arena (asked through
 * aa__large.yield, the one way up), a new segment or new pages. The design
 * is large.c's opening comment; the floors large_internal.h's. Under
 * pool->large->mu.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/cuda.h" /* AA_STREAM_HOST */
#include "large_internal.h"

#define SPLIT_MIN ((size_t)64 << 10)

/* Whether free neighbours a (lower) and b may merge as their streams go,
 * parking and rooms aside. */
static inline bool merge_state_ok(const aa__chunk *a, const aa__chunk *b) {
  if (!a->free || !b->free || a->nxev > 0 || b->nxev > 0)
    return false;
  return a->any || b->any || a->stream == b->stream;
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
    if (aa__lg_beside_free(pool, c)) {
      if (beside == AA__LARGE_PARK)
        beside = i;
      continue;
    }
    aa__lg_park_unlist(pool, i); /* an exact hole of its own: what best fit takes */
    c->parked = 0;
    return c;
  }
  if (beside == AA__LARGE_PARK || exact_hole(pool, need, stream))
    return NULL;
  aa__chunk *c = pool->large->park[beside]; /* no exact hole elsewhere */
  aa__lg_park_unlist(pool, beside);
  c->parked = 0;
  return c;
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
  for (unsigned b = aa__lg_next_bin(pool, 0); b < AA__LARGE_BINS; b = aa__lg_next_bin(pool, b + 1)) {
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      if (c->any || (c->nxev == 0 && c->ev == NULL))
        continue;
      if (c->nxev > 0) {
        if (!aa__lg_xev_done(pool, c))
          continue;
        changed = true; /* a chunk freed on c->stream now: its neighbours there merge */
      }
      if (c->ev != NULL)
        changed |= aa__lg_ev_done(pool, c);
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
  for (unsigned b = aa__lg_next_bin(pool, 0); b < AA__LARGE_BINS; b = aa__lg_next_bin(pool, b + 1)) {
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      aa__assert_internal(c->free && !c->parked);
      if (c->any)
        continue;
      bool done;
      if (!aa__lg_xev_done(pool, c)) /* record_stream's streams, then c->stream's rule */
        continue;
      if (c->ev != NULL) {
        done = aa__lg_ev_done(pool, c);
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
          aa__lg_usable_everywhere(pool, c);
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
  for (unsigned b = aa__lg_next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = aa__lg_next_bin(pool, b + 1)) {
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
  for (unsigned b = aa__lg_next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = aa__lg_next_bin(pool, b + 1)) {
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
  for (unsigned b = aa__lg_next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = aa__lg_next_bin(pool, b + 1)) {
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
  for (unsigned b = aa__lg_next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = aa__lg_next_bin(pool, b + 1)) {
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
      for (aa__chunk *z = a; z && z->free && !z->parked && (z == a || !z->prev->room || !aa__lg_room_kept(pool, z->prev, z));
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
  for (unsigned b = aa__lg_next_bin(pool, aa__lg_bin_of(need)); b < AA__LARGE_BINS;
       b = aa__lg_next_bin(pool, b + 1)) {
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
  if (*yielded || pool->large->yield == NULL || !pool->large->yield->can(pool, need, stream, true))
    return false;
  *yielded = true;
  pool->large->yield->give(pool);
  return true;
}

/* Stitching with new pages (expandable): a request that the holes leave
 * short of a stitched range gets the shortfall mapped as new pages at the
 * start of the free end it would grow into, then a range of the holes and
 * those pages (the caller asks aa__lg_stitch_take again), so that the pool
 * grows by what the holes lack, not by the request. Only where the free
 * end's pages below its segment's high-water mark are all mapped (the new
 * pages are the next ones), not in a room, not while a dissolved arena's
 * pages are due to move (unmap_credit), not for more pages than plain
 * growth there would map, and under a limit only within it. The bytes
 * mapped; 0 when nothing was (nothing changed). */
static size_t stitch_premap(aa_pool *pool, size_t need, aa_stream stream) {
  if (pool->large->unmap_credit > 0)
    return 0; /* the growth would move free pages here, not map new ones */
  aa__chunk *g = find_fit(pool, need, stream, false);
  if (g == NULL || g->ev != NULL || g->nxev > 0 || g->room)
    return 0;
  size_t shortb = aa__lg_stitch_short(pool, need, stream, g);
  if (shortb == 0)
    return 0;
  aa__seg *s = g->seg;
  size_t ps = pool->large->vmm_page;
  uintptr_t top = s->h.base + s->hwm * ps, end = g->base + g->size;
  if (end <= top || g->base > top)
    return 0; /* not the free end: pages given back inside it */
  if (top > g->base && aa__lg_unmapped_under(pool, g, top - g->base, 0) > 0)
    return 0;
  if (shortb / ps >= aa__lg_unmapped_under(pool, g, need, SIZE_MAX))
    return 0; /* no fewer new pages than placing it here (the free end's
               * mapped start, in runs shared with its neighbour, counts
               * there and not as whole handles) */
  size_t len = top + shortb - g->base;
  if (len + SPLIT_MIN > g->size)
    return 0; /* the reservation's end: plain growth decides */
  size_t lim = atomic_load_explicit(&pool->limit, AA__RLX);
  if (lim != 0 && atomic_load_explicit(&pool->bytes_reserved, AA__RLX) + shortb > lim)
    return 0; /* under a limit the pages would come from the holes */
  if (!aa__lg_stitch_budget_ok(pool))
    return 0; /* the range's alias calls over the time budget: plain growth */
  aa__lg_bin_remove(pool, g);
  split(pool, g, len);
  if (g->size != len) { /* no chunk record for the rest: nothing mapped */
    aa__lg_bin_insert(pool, g);
    return 0;
  }
  g->free = 0; /* taken while mapping, as aa__lg_take's own growth */
  int rc = aa__lg_ensure_mapped(pool, g);
  g->free = 1;
  aa__lg_coalesce_insert(pool, g);
  return rc == AA_OK ? shortb : 0;
}

aa__chunk *aa__lg_take(aa_pool *pool, aa__tcache *tc, size_t size, size_t need, aa_stream stream,
                       bool *retry) {
  bool passthrough = pool->cfg.large_mode == AA_LARGE_PASSTHROUGH;
  bool vmm = pool->large->vmm_page != 0;
  bool reclaimed = false;
  bool fresh = false;    /* a new segment was made for this request */
  bool waited = false;   /* c came from wait_fit: c->stream == stream */
  bool stitched = false; /* c is a stitched range's (whole, never split) */
  int stitch_pass = 0;   /* 1: free ranges asleep; 2: dormant ones retired; 3: new pages mapped */
  size_t premapped = 0;  /* stitch_pass 3: the new pages' bytes */
  bool yielded = false;  /* the plan's arena was given to the path for this request */
  int other = 0;         /* 1: the backend refused, the other region's memory next; 2: taken */
  uint64_t maps0 = pool->large->vmm_maps;
  *retry = false;
  pool->large->stitch_refused = false; /* a deferral is counted once a request */
  if (!passthrough && pool->large->stream_wait)
    process_events(pool);
  for (;;) {
    if (pool->large->hash_n >= pool->large->hash_cap && aa__lg_hash_grow(pool) != AA_OK)
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
          if (stitched && premapped > 0) /* counted once a range has them */
            pool->large->stitch_new_bytes += premapped;
          if (c == NULL && stitch_pass < 2 && aa__lg_stitch_retire_dormant(pool) > 0) {
            stitch_pass = 2;
            reclaimed = false;
            continue;
          }
          /* ...and, the holes too few, a range of them and new pages (the
           * plan's arena first, as for any growth: a plan never costs
           * memory) */
          if (c == NULL && stitch_pass < 3 && pool->large->stitch_grow &&
              (yielded || pool->large->yield == NULL ||
               !pool->large->yield->can(pool, need, stream, false)) &&
              (premapped = stitch_premap(pool, need, stream)) > 0) {
            stitch_pass = 3;
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
    if (!yielded && pool->large->yield != NULL && pool->large->yield->can(pool, need, stream, false) &&
        (c == NULL || (vmm && !stitched && aa__lg_unmapped_under(pool, c, need, 0) > 0))) {
      yielded = true;
      waited = false; /* c goes back: the next one is found afresh */
      if (c != NULL && !stitched)
        aa__lg_coalesce_insert(pool, c); /* back first: the arena's room may merge with it */
      pool->large->yield->give(pool);
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
    aa__lg_hash_put(pool, c);
    if (fresh || pool->large->vmm_maps != maps0)
      pool->large->misses++; /* the backend was called for it: a miss (docs/stats.md) */
    uint64_t st = aa__lg_st_next_live(atomic_load_explicit(&c->state, AA__RLX));
    atomic_store_explicit(&c->state, st, AA__RLX);
    return c;
  }
}
