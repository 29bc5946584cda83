/*
 * large_chunk.c — the large path's bottom floor: the chunk structures every
 * other part of it works on. Chunk records (recycled, never freed while the
 * pool lives), the live-chunk hash's growth, the park list (chunks freed
 * whole, waiting unmerged for an exact repeat), merging free neighbours,
 * a free chunk's events and usability on a stream, the count of a block
 * handed out, and the carve of the plan's arena into chunks. The hash and
 * bin operations themselves are inline in large_internal.h. Calls nothing
 * else of the large path (its floors: large_internal.h). Under
 * pool->large->mu.
 */
#include <stdlib.h>
#include <string.h>

#include "large_internal.h"
#include "test_hooks.h"

/* ------------------------------------------------------------ hash */

int aa__lg_hash_grow(aa_pool *pool) {
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

/* Chunk records are recycled, and never freed while the pool lives: a
 * thread's large-block cache may still name one (its stale entry then fails
 * the compare-and-swap on `state`, whose generation survives the reuse).
 * Recycling also saves a calloc and a free per split and merge. */
/* Test hook (test_hooks.h): while not 0, the count of chunk records asked
 * for until one is refused (a cut of a stitched range's part, a split:
 * their memory-short paths). */
static _Atomic uint64_t g_chunk_fail;

void aa_test_chunk_fail_nth(uint64_t n) { atomic_store(&g_chunk_fail, n); }

/* Whether the hook refuses this record: its count reached. */
static bool chunk_fail_now(void) {
  uint64_t n = atomic_load_explicit(&g_chunk_fail, AA__RLX);
  while (n != 0 && !atomic_compare_exchange_weak(&g_chunk_fail, &n, n - 1))
    ;
  return n == 1;
}

aa__chunk *aa__lg_chunk_get(aa_pool *pool) {
  if (atomic_load_explicit(&g_chunk_fail, AA__RLX) != 0 && chunk_fail_now())
    return NULL;
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
void aa__lg_park_unlist(aa_pool *pool, unsigned i) {
  memmove(&pool->large->park[i], &pool->large->park[i + 1], (pool->large->npark - i - 1) * sizeof *pool->large->park);
  pool->large->npark--;
}

void aa__lg_unpark_all(aa_pool *pool) {
  while (pool->large->npark > 0) { /* oldest first; a merge may unlist a neighbour */
    aa__chunk *c = pool->large->park[0];
    aa__lg_park_unlist(pool, 0);
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
__attribute__((noinline)) bool aa__lg_room_kept(const aa_pool *pool, const aa__chunk *a,
                                                const aa__chunk *b) {
  return !b->room && pool->large->vmm_page != 0 && !aa__lg_prefix_mapped(pool, a, a->size);
}

/* Whether free neighbours a (lower) and b could merge were neither parked.
 * (merge_state_ok's tests written out: GCC did not inline it here, 2% more
 * instructions a call in the replay.) */
static inline bool merge_ok_unparked(const aa_pool *pool, const aa__chunk *a, const aa__chunk *b) {
  if (!a->free || !b->free || a->nxev > 0 || b->nxev > 0 || (a->room && aa__lg_room_kept(pool, a, b)))
    return false;
  return a->any || b->any || a->stream == b->stream;
}

/* Whether parked chunk c would merge with a free neighbour. */
bool aa__lg_beside_free(const aa_pool *pool, const aa__chunk *c) {
  return (c->prev != NULL && merge_ok_unparked(pool, c->prev, c)) ||
         (c->next != NULL && merge_ok_unparked(pool, c, c->next));
}

/* Neighbour n of a chunk becoming free, if it is parked (in the park list:
 * aa__lg_carve marks its pieces parked without listing them) and could
 * merge with it: out of the list and into its bin, so that it merges. */
static void unpark_neighbour(aa_pool *pool, aa__chunk *n) {
  for (unsigned i = 0; i < pool->large->npark; i++) {
    if (pool->large->park[i] == n) {
      aa__lg_park_unlist(pool, i);
      n->parked = 0;
      aa__lg_bin_insert(pool, n);
      return;
    }
  }
}

void aa__lg_park(aa_pool *pool, aa__chunk *c) {
  c->parked = 1; /* first: the chunk unparked below must not merge into it */
  if (pool->large->npark == AA__LARGE_PARK) {
    aa__chunk *old = pool->large->park[0];
    aa__lg_park_unlist(pool, 0);
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
bool aa__lg_xev_done(aa_pool *pool, aa__chunk *c) {
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
void aa__lg_usable_everywhere(aa_pool *pool, aa__chunk *c) {
  c->any = 1;
  pool->large->merge_due = true;
}

/* Whether the event free chunk c holds on its freeing stream (ev) has
 * completed; then it is released and c is usable everywhere. */
bool aa__lg_ev_done(aa_pool *pool, aa__chunk *c) {
  uint32_t one = 1;
  if (!aa__events_done(pool, &c->ev, &one))
    return false;
  c->ev = NULL;
  aa__lg_usable_everywhere(pool, c);
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
  return aa__lg_xev_done(pool, c) && (c->ev == NULL || aa__lg_ev_done(pool, c));
}

bool aa__lg_usable(aa_pool *pool, aa__chunk *c, aa_stream stream) {
  aa_backend *b = pool->backend;
  if (!aa__lg_xev_done(pool, c))
    return false;
  if (c->any || c->stream == stream)
    return true;
  if (c->ev == NULL && aa__stream_idle(pool, c->stream)) {
    aa__lg_usable_everywhere(pool, c); /* freed before the query: its work has completed */
    return true;
  }
  if (c->ev == NULL && b->ops->event_record(b, c->stream, &c->ev) != AA_OK) {
    c->ev = NULL;
    return false;
  }
  return aa__lg_ev_done(pool, c);
}

/* Whether free neighbours a (lower) and b can merge: parking, record_stream
 * events, streams and rooms (room_kept) allow it. */
bool aa__lg_merge_ok(const aa_pool *pool, const aa__chunk *a, const aa__chunk *b) {
  if (!a->free || !b->free || a->parked || b->parked || a->nxev > 0 || b->nxev > 0 ||
      (a->room && aa__lg_room_kept(pool, a, b)))
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

void aa__lg_count_out(aa_pool *pool, size_t size, size_t req) {
  pool->large->in_use += size;
  pool->large->req += req;
  pool->large->allocs++;
  uint64_t ob = atomic_fetch_add_explicit(&pool->out_bytes, size, AA__RLX) + size;
  aa__atomic_max(&pool->peak_out_bytes, ob);
  aa__atomic_max(&pool->win_peak_out_bytes, ob);
}

bool aa__lg_carve(aa_pool *pool, aa__chunk *c, aa__lg_piece *v, size_t n, aa_stream stream) {
  aa__large *L = pool->large;
  size_t want = 2 * n + 1, got = 0, nlive = 0;
  for (size_t i = 0; i < n; i++)
    nlive += v[i].live != 0;
  while (L->hash_n + nlive >= L->hash_cap) {
    if (aa__lg_hash_grow(pool) != AA_OK)
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
  aa__chunk *h = aa__lg_hash_find(pool, c->base, true);
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
        aa__lg_hash_put(pool, r);
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
