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
 * Parking (park_take/park): a chunk freed whole waits, unmerged, for an
 * exact-size request on its stream. The per-thread large-block cache
 * (aa__ltc_*, at the end): a thread's free of a block it allocated, and its
 * next same-size request, without the lock; the chunk's `state` word,
 * changed only by compare-and-swap, settles races with other threads.
 *
 * Live chunks are found from their address through a hash table; the page
 * map gives the segment. Everything here runs under pool->large_mu but the
 * thread cache's hits.
 * Entry points: aa__large_alloc, aa__large_free, aa__large_release,
 * aa__ltc_alloc, aa__ltc_free, aa__ltc_flush.
 *
 * Invariants, asserted by AA_DEBUG tier (core_internal.h): 1, cheap, where
 * a chunk changes hands (split, merge, bins, the hash, state words); 2,
 * internal, the lookups behind them (a chunk's bin, a hashed base, the
 * neighbours left unmerged); 3, expensive, large_check after every locked
 * alloc and free: each segment's chunks tile it in address order, every
 * free unparked chunk is in the bin of its size, the bins bitmap is set
 * exactly for the non-empty bins, the free bytes add up, and the hash holds
 * exactly the chunks that are not free.
 */
#include <stdlib.h>
#include <string.h>

#include "core_internal.h"

#define SPLIT_MIN ((size_t)64 << 10)

static bool merge_ok(const aa__chunk *a, const aa__chunk *b);
static void absorb(aa_pool *pool, aa__chunk *a, aa__chunk *b);
static void coalesce_insert(aa_pool *pool, aa__chunk *c);
static void ltc_drop_locked(aa_pool *pool, aa__tcache *tc, uint32_t i);

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* A chunk's state word with its phase (AA__CH_*) replaced, and the word of
 * its next allocation (a new generation, live). */
static uint64_t st_phase(uint64_t st, uint64_t phase) {
  aa__assert(phase == AA__CH_FREE || phase == AA__CH_LIVE || phase == AA__CH_HELD);
  return (st & ~(uint64_t)3) | phase;
}
static uint64_t st_next_live(uint64_t st) {
  aa__assert_internal((st & 3) != AA__CH_LIVE); /* a new life starts from free or held */
  return (((st >> 2) + 1) << 2) | AA__CH_LIVE;
}

static unsigned bin_of(size_t size) {
  unsigned b = aa_hist_bucket(size);
  b = b > 44 ? b - 44 : 0;
  return b < AA__LARGE_BINS ? b : AA__LARGE_BINS - 1;
}

/* ------------------------------------------------------------ invariants */

#if AA_DEBUG >= 3
static size_t hidx(const aa_pool *pool, uintptr_t base);

/* Full walk of the large path's structures (AA_DEBUG 3). Under large_mu. */
static void large_check(aa_pool *pool) {
  size_t free_in_segs = 0, live = 0, free_bytes = 0, in_bins = 0, hashed = 0;
  for (aa__seg *s = pool->segs; s; s = s->next) {
    aa__assert(s->next == NULL || s->next->prev == s);
    aa__assert(s->owner == NULL && s->first != NULL && s->first->base == s->h.base);
    uintptr_t end = s->h.base;
    for (aa__chunk *c = s->first; c; c = c->next) {
      aa__assert(c->seg == s && c->base == end && c->size > 0);
      aa__assert(c->next == NULL || c->next->prev == c);
      end = c->base + c->size;
      uint64_t phase = atomic_load_explicit(&c->state, AA__RLX) & 3;
      if (c->free) {
        aa__assert(phase == AA__CH_FREE);
        if (!c->parked) {
          free_in_segs++;
          aa__assert(c->bin == bin_of(c->size));
        }
      } else {
        live++;
      }
    }
    aa__assert(end == s->h.end);
  }
  for (unsigned b = 0; b < AA__LARGE_BINS; b++) {
    bool bit = (pool->lbin_mask[b / 64] >> (b % 64)) & 1;
    aa__assert(bit == (pool->lbins[b] != NULL));
    for (aa__chunk *c = pool->lbins[b]; c; c = c->fnext) {
      aa__assert(c->free && !c->parked && c->bin == b);
      aa__assert(c->fprev != NULL ? c->fprev->fnext == c : pool->lbins[b] == c);
      free_bytes += c->size;
      in_bins++;
    }
  }
  for (unsigned i = 0; i < pool->npark; i++)
    aa__assert(pool->lpark[i]->free && pool->lpark[i]->parked);
  for (size_t i = 0; i < pool->lhash_cap; i++) {
    for (aa__chunk *c = pool->lhash[i]; c; c = c->hnext) {
      aa__assert(!c->free && hidx(pool, c->base) == i);
      hashed++;
    }
  }
  aa__assert(free_bytes == pool->large_free_bytes);
  aa__assert(in_bins == free_in_segs);
  aa__assert(hashed == pool->lhash_n && hashed == live);
}
#define LARGE_CHECK(pool) large_check(pool)
#else
#define LARGE_CHECK(pool) ((void)0)
#endif

/* ------------------------------------------------------------ hash */

static size_t hidx(const aa_pool *pool, uintptr_t base) {
  return (size_t)(((uint64_t)base >> 12) * 0x9E3779B97F4A7C15ull >> 20) & (pool->lhash_cap - 1);
}

static int hash_grow(aa_pool *pool) {
  size_t cap = pool->lhash_cap ? pool->lhash_cap * 2 : 256;
  aa__chunk **v = calloc(cap, sizeof *v);
  if (v == NULL)
    return AA_ENOMEM;
  aa__chunk **old = pool->lhash;
  size_t ocap = pool->lhash_cap;
  pool->lhash = v;
  pool->lhash_cap = cap;
  for (size_t i = 0; i < ocap; i++) {
    aa__chunk *c = old[i];
    while (c) {
      aa__chunk *n = c->hnext;
      size_t h = hidx(pool, c->base);
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
  aa__assert(pool->lhash_n < pool->lhash_cap); /* grown before the take */
  aa__assert(!c->free);
  aa__assert_internal(hash_find(pool, c->base, false) == NULL);
  size_t h = hidx(pool, c->base);
  c->hnext = pool->lhash[h];
  pool->lhash[h] = c;
  pool->lhash_n++;
}

static aa__chunk *hash_find(aa_pool *pool, uintptr_t base, bool remove) {
  if (pool->lhash_cap == 0)
    return NULL;
  aa__chunk **pp = &pool->lhash[hidx(pool, base)];
  while (*pp && (*pp)->base != base)
    pp = &(*pp)->hnext;
  aa__chunk *c = *pp;
  if (c && remove) {
    aa__assert(pool->lhash_n > 0);
    *pp = c->hnext;
    c->hnext = NULL;
    pool->lhash_n--;
  }
  return c;
}

/* ------------------------------------------------------------ free bins */

static void bin_insert(aa_pool *pool, aa__chunk *c) {
  aa__assert(c->free && !c->parked && c->size > 0);
  aa__assert_internal(c->fnext == NULL && c->fprev == NULL && pool->lbins[bin_of(c->size)] != c);
  unsigned b = bin_of(c->size);
  c->bin = b;
  c->fprev = NULL;
  c->fnext = pool->lbins[b];
  if (c->fnext)
    c->fnext->fprev = c;
  pool->lbins[b] = c;
  pool->lbin_mask[b / 64] |= (uint64_t)1 << (b % 64);
  pool->large_free_bytes += c->size;
}

static void bin_remove(aa_pool *pool, aa__chunk *c) {
  unsigned b = c->bin;
  aa__assert(c->free && b < AA__LARGE_BINS && pool->large_free_bytes >= c->size);
  aa__assert(pool->lbin_mask[b / 64] & ((uint64_t)1 << (b % 64)));
  aa__assert_internal(b == bin_of(c->size));
  aa__assert_internal(c->fprev != NULL ? c->fprev->fnext == c : pool->lbins[b] == c);
  aa__assert_internal(c->fnext == NULL || c->fnext->fprev == c);
  if (c->fprev)
    c->fprev->fnext = c->fnext;
  else if ((pool->lbins[b] = c->fnext) == NULL)
    pool->lbin_mask[b / 64] &= ~((uint64_t)1 << (b % 64));
  if (c->fnext)
    c->fnext->fprev = c->fprev;
  c->fnext = c->fprev = NULL;
  pool->large_free_bytes -= c->size;
}

/* The first non-empty bin at or above b, or AA__LARGE_BINS. */
static unsigned next_bin(const aa_pool *pool, unsigned b) {
  while (b < AA__LARGE_BINS) {
    uint64_t m = pool->lbin_mask[b / 64] >> (b % 64);
    if (m != 0) {
      aa__assert_internal(pool->lbins[b + (unsigned)__builtin_ctzll(m)] != NULL);
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
static aa__chunk *chunk_get(aa_pool *pool) {
  aa__chunk *c = pool->lspare;
  if (c == NULL)
    return calloc(1, sizeof *c);
  pool->lspare = c->fnext;
  pool->nlspare--;
  uint64_t st = atomic_load_explicit(&c->state, AA__RLX);
  memset(c, 0, sizeof *c);
  atomic_store_explicit(&c->state, st_phase(st, AA__CH_FREE), AA__RLX);
  return c;
}

static void chunk_put(aa_pool *pool, aa__chunk *c) {
  c->fnext = pool->lspare;
  pool->lspare = c;
  pool->nlspare++;
}

/* ------------------------------------------------------------ thread cache */

static size_t ltc_slot(const void *p) {
  return (size_t)(((uint64_t)(uintptr_t)p >> 12) * 0x9E3779B97F4A7C15ull >> 32) % AA__LTC_N;
}

/* Remembers a block this thread was handed, for a lock-free free of it. */
static void ltc_note(aa__tcache *tc, void *p, aa__chunk *c, uint64_t state) {
  struct aa__ltc_live *l = &tc->llive[ltc_slot(p)];
  l->p = p;
  l->c = c;
  l->state = state;
}

/* Parking: a large chunk freed whole goes to a short list instead of being
 * coalesced at once, so an allocation of the same size on the same stream
 * (a loop's next iteration) takes it back without a split, a merge or a
 * bin search. Everything that looks at free chunks as a whole unparks
 * first. */
static void unpark_all(aa_pool *pool) {
  for (unsigned i = 0; i < pool->npark; i++) {
    aa__chunk *c = pool->lpark[i];
    c->parked = 0;
    coalesce_insert(pool, c);
  }
  pool->npark = 0;
}

static void park_drop(aa_pool *pool, unsigned i) {
  memmove(&pool->lpark[i], &pool->lpark[i + 1], (pool->npark - i - 1) * sizeof *pool->lpark);
  pool->npark--;
}

static aa__chunk *park_take(aa_pool *pool, size_t need, aa_stream stream) {
  for (unsigned i = pool->npark; i-- > 0;) { /* newest first */
    aa__chunk *c = pool->lpark[i];
    if (c->size == need && (c->any || c->stream == stream)) {
      park_drop(pool, i);
      c->parked = 0;
      return c;
    }
  }
  return NULL;
}

static void park(aa_pool *pool, aa__chunk *c) {
  c->parked = 1; /* first: the chunk unparked below must not merge into it */
  if (pool->npark == AA__LARGE_PARK) {
    aa__chunk *old = pool->lpark[0];
    park_drop(pool, 0);
    old->parked = 0;
    coalesce_insert(pool, old);
  }
  pool->lpark[pool->npark++] = c;
}

/* Whether a free chunk may be handed out on `stream` now; records the event
 * on the freeing stream lazily (one event covers the chunk). */
static bool usable(aa_pool *pool, aa__chunk *c, aa_stream stream) {
  aa_backend *b = pool->backend;
  if (c->nxev > 0) {
    if (!aa__events_done(pool, c->xev, &c->nxev))
      return false;
    free(c->xev);
    c->xev = NULL;
    c->any = 1;
  }
  if (c->any || c->stream == stream)
    return true;
  if (c->ev == NULL && b->ops->event_record(b, c->stream, &c->ev) != AA_OK) {
    c->ev = NULL;
    return false;
  }
  uint32_t one = 1;
  if (aa__events_done(pool, &c->ev, &one)) {
    c->ev = NULL;
    c->any = 1;
    return true;
  }
  return false;
}

/* ------------------------------------------------------------ segments */

/* ------------------------------------------------------------ pages */

#define VMM_VA ((size_t)256 << 30)

static void page_unmap(aa_pool *pool, aa__seg *s, size_t i) {
  aa__seg *pg = s->pages[i];
  size_t ps = pool->vmm_page;
  aa__pm_remove(pool, &pg->h);
  aa__backend_unmap(pool, (void *)pg->h.base, ps, pg->handle);
  free(pg);
  s->pages[i] = NULL;
  s->mapped--;
  pool->large_reserved -= ps;
  pool->vmm_unmaps++;
}

static int page_map(aa_pool *pool, aa__seg *s, size_t i) {
  size_t ps = pool->vmm_page;
  uintptr_t a = s->h.base + i * ps;
  aa__seg *pg = calloc(1, sizeof *pg);
  if (pg == NULL)
    return AA_ENOMEM;
  int rc = aa__backend_map(pool, (void *)a, ps, &pg->handle);
  if (rc != AA_OK) {
    free(pg);
    return rc;
  }
  pg->h.base = a;
  pg->h.end = a + ps;
  pg->h.kind = AA__SPAN_LARGE;
  pg->owner = s;
  rc = aa__pm_insert(pool, &pg->h);
  if (rc != AA_OK) {
    aa__backend_unmap(pool, (void *)a, ps, pg->handle);
    free(pg);
    return rc;
  }
  s->pages[i] = pg;
  s->mapped++;
  if (i + 1 > s->hwm)
    s->hwm = i + 1;
  pool->large_reserved += ps;
  pool->vmm_maps++;
  return AA_OK;
}

/* Unmaps whole pages inside free chunks whose work has completed (other
 * than `skip`) until `want` bytes are unmapped, the longest-free chunks
 * first (those freed recently are the likeliest to be wanted again soon);
 * returns the bytes. */
static int by_freed_at(const void *a, const void *b) {
  uint64_t x = (*(aa__chunk *const *)a)->freed_at, y = (*(aa__chunk *const *)b)->freed_at;
  return x < y ? -1 : x > y;
}

/* The pages wholly inside chunk c, below its segment's high-water mark. */
static void interior(const aa_pool *pool, const aa__chunk *c, size_t *i0, size_t *i1) {
  size_t ps = pool->vmm_page;
  uintptr_t sb = c->seg->h.base;
  *i0 = (c->base - sb + ps - 1) / ps;
  *i1 = (c->base + c->size - sb) / ps;
  if (*i1 > c->seg->hwm)
    *i1 = c->seg->hwm;
}

static size_t unmap_interior(aa_pool *pool, aa__chunk *c, size_t want) {
  aa__seg *s = c->seg;
  size_t ps = pool->vmm_page, got = 0, i0, i1;
  interior(pool, c, &i0, &i1);
  for (size_t i = i0; i < i1 && got < want; i++) {
    if (s->pages[i] != NULL) {
      page_unmap(pool, s, i);
      got += ps;
    }
  }
  return got;
}

static bool has_interior_mapped(const aa_pool *pool, const aa__chunk *c) {
  size_t i0, i1;
  interior(pool, c, &i0, &i1);
  for (size_t i = i0; i < i1; i++) {
    if (c->seg->pages[i] != NULL)
      return true;
  }
  return false;
}

static size_t vmm_unmap_free(aa_pool *pool, size_t want, const aa__chunk *skip) {
  size_t got = 0, n = 0, cap = 0;
  aa__chunk **v = NULL;
  unpark_all(pool);
  for (aa__seg *s = pool->segs; s; s = s->next) {
    if (s->pages == NULL || s->mapped == 0)
      continue;
    for (aa__chunk *c = s->first; c; c = c->next) {
      if (!c->free || c == skip || !has_interior_mapped(pool, c))
        continue;
      if (pool->has_events && !(usable(pool, c, (aa_stream)(uintptr_t)-1) && c->any))
        continue;
      if (n == cap) {
        size_t nc = cap ? cap * 2 : 64;
        aa__chunk **nv = realloc(v, nc * sizeof *nv);
        if (nv == NULL)
          break; /* unmap what is listed */
        v = nv;
        cap = nc;
      }
      v[n++] = c;
    }
  }
  if (n > 1)
    qsort(v, n, sizeof *v, by_freed_at);
  for (size_t i = 0; i < n && got < want; i++)
    got += unmap_interior(pool, v[i], want - got);
  free(v);
  return got;
}

/* The pages under the first `len` bytes of chunk c. */
static void pages_under(const aa_pool *pool, const aa__chunk *c, size_t len, size_t *i0,
                        size_t *i1) {
  size_t ps = pool->vmm_page;
  uintptr_t sb = c->seg->h.base;
  *i0 = (c->base - sb) / ps;
  *i1 = (c->base + len - 1 - sb) / ps + 1;
}

/* Whether pages [i0, i1) of s are all mapped. */
static bool range_mapped(const aa__seg *s, size_t i0, size_t i1) {
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

/* Maps every page under `c` (free, out of the bins), first unmapping as many
 * pages from completed free chunks elsewhere as it needs. */
static int ensure_mapped(aa_pool *pool, aa__chunk *c) {
  aa__seg *s = c->seg;
  size_t ps = pool->vmm_page, i0, i1, k = 0;
  pages_under(pool, c, c->size, &i0, &i1);
  if (range_mapped(s, i0, i1))
    return AA_OK;
  for (size_t i = i0; i < i1; i++)
    k += s->pages[i] == NULL;
  if (k == 0)
    return AA_OK;
  /* Under a limit, pages stranded in completed free chunks move here before
   * the limit refuses new memory (cheaper than the OOM path's synchronise
   * and release). Without one, memory is mapped: unmapping eagerly would
   * make each iteration of a loop map again what the last one unmapped
   * (replays of BERT and GPT-2 traces: 5,500-361,000 page maps against
   * 130-4,300 without, BENCHMARKS.md). */
  size_t lim = atomic_load_explicit(&pool->limit, AA__RLX);
  uint64_t after = atomic_load_explicit(&pool->bytes_reserved, AA__RLX) + (uint64_t)k * ps;
  if (lim != 0 && after > lim) {
    uint64_t over = after - lim;
    (void)vmm_unmap_free(pool, over < k * ps ? over : k * ps, c);
  }
  for (size_t i = i0; i < i1; i++) {
    if (s->pages[i] == NULL) {
      int rc = page_map(pool, s, i);
      if (rc != AA_OK)
        return rc;
    }
  }
  return AA_OK;
}

/* Puts new segment s, covered by one free chunk c, on the pool's list. */
static void seg_link(aa_pool *pool, aa__seg *s, aa__chunk *c) {
  c->seg = s;
  c->base = s->h.base;
  c->size = s->h.end - s->h.base;
  c->free = 1;
  c->any = 1;
  s->first = c;
  s->next = pool->segs;
  if (pool->segs)
    pool->segs->prev = s;
  pool->segs = s;
  pool->nsegs++;
}

/* A reservation of at least `need` bytes with one free, unmapped chunk. */
static aa__chunk *vseg_new(aa_pool *pool, size_t need, int *rc) {
  aa_backend *b = pool->backend;
  size_t ps = pool->vmm_page;
  size_t size = round_up(need, ps);
  void *mem = NULL;
  if (size < need) {
    *rc = AA_ENOMEM;
    return NULL;
  }
  if (size < VMM_VA)
    size = VMM_VA;
  aa__seg *s = calloc(1, sizeof *s);
  aa__chunk *c = calloc(1, sizeof *c);
  *rc = s && c ? AA_OK : AA_ENOMEM;
  if (*rc == AA_OK) {
    s->npages = size / ps;
    s->pages = calloc(s->npages, sizeof *s->pages);
    *rc = s->pages ? AA_OK : AA_ENOMEM;
  }
  /* less address space when the backend refuses a big reservation */
  while (*rc == AA_OK && (*rc = b->ops->va_reserve(b, size, &mem)) != AA_OK) {
    size_t half = size / 2 / ps * ps;
    if (half < round_up(need, ps))
      break;
    size = half;
    *rc = AA_OK;
  }
  if (*rc != AA_OK) {
    atomic_fetch_add_explicit(&pool->backend_failures, 1, AA__RLX);
    if (s)
      free(s->pages);
    free(s);
    free(c);
    return NULL;
  }
  s->npages = size / ps;
  s->h.base = (uintptr_t)mem;
  s->h.end = (uintptr_t)mem + size;
  s->h.kind = AA__SPAN_LARGE;
  seg_link(pool, s, c);
  return c;
}

/* ------------------------------------------------------------ segments */

static void seg_unlink_free(aa_pool *pool, aa__seg *s) {
  aa__chunk *c = s->first;
  if (s->pages != NULL) { /* expandable: unmap what is mapped, drop the reservation */
    for (size_t i = 0; i < s->hwm; i++) {
      if (s->pages[i] != NULL)
        page_unmap(pool, s, i);
    }
    pool->backend->ops->va_release(pool->backend, (void *)s->h.base, s->h.end - s->h.base);
    free(s->pages);
    s->pages = NULL;
  } else {
    aa__pm_remove(pool, &s->h);
    pool->large_reserved -= s->h.end - s->h.base;
    aa__backend_free(pool, (void *)s->h.base, s->h.end - s->h.base);
  }
  if (s->prev)
    s->prev->next = s->next;
  else
    pool->segs = s->next;
  if (s->next)
    s->next->prev = s->prev;
  pool->nsegs--;
  while (c) {
    aa__chunk *n = c->next;
    aa__event_release(pool, c->ev);
    for (uint32_t i = 0; i < c->nxev; i++)
      aa__event_release(pool, c->xev[i]);
    free(c->xev);
    free(c->xs);
    chunk_put(pool, c);
    c = n;
  }
  free(s);
}

/* A wholly free segment that can go back now (its chunk usable anywhere). */
static bool seg_releasable(aa_pool *pool, aa__seg *s) {
  aa__chunk *c = s->first;
  if (s->pages != NULL || !c->free || c->next != NULL)
    return false;
  if (!pool->has_events)
    return true;
  return usable(pool, c, (aa_stream)(uintptr_t)-1) && c->any;
}

/* Free chunks whose events completed become usable anywhere and merge with
 * their free neighbours, so that a segment freed piecewise on several
 * streams can go back whole. */
static void seg_settle(aa_pool *pool, aa__seg *s) {
  for (aa__chunk *c = s->first; c; c = c->next) {
    if (c->free && !c->any && pool->has_events)
      (void)usable(pool, c, (aa_stream)(uintptr_t)-1);
  }
  aa__chunk *c = s->first;
  while (c) {
    aa__chunk *n = c->next;
    if (n && merge_ok(c, n) && c->any == n->any) {
      bin_remove(pool, c);
      absorb(pool, c, n);
      bin_insert(pool, c);
      continue; /* try the new neighbour */
    }
    c = n;
  }
}

static size_t release_locked(aa_pool *pool, size_t want) {
  size_t released = 0;
  unpark_all(pool);
  aa__seg *s = pool->segs;
  while (s && released < want) {
    aa__seg *n = s->next;
    if (s->first->next != NULL)
      seg_settle(pool, s);
    if (seg_releasable(pool, s)) {
      size_t sz = s->h.end - s->h.base;
      bin_remove(pool, s->first);
      seg_unlink_free(pool, s);
      released += sz;
    }
    s = n;
  }
  if (pool->vmm_page != 0 && released < want) /* every reservation at once */
    released += vmm_unmap_free(pool, want - released, NULL);
  return released;
}

static void enforce_bound(aa_pool *pool) {
  size_t bound = pool->cfg.large_cache_bytes;
  if (pool->vmm_page != 0) {
    uint64_t cached = pool->large_reserved - pool->large_in_use;
    if (bound != 0 && pool->large_reserved > pool->large_in_use && cached > bound)
      vmm_unmap_free(pool, cached - bound, NULL);
    return;
  }
  if (bound == 0)
    return;
  unpark_all(pool);
  if (pool->large_free_bytes <= bound)
    return;
  release_locked(pool, pool->large_free_bytes - bound);
}

size_t aa__large_release(aa_pool *pool, size_t want) {
  pthread_mutex_lock(&pool->large_mu);
  size_t r = release_locked(pool, want);
  pthread_mutex_unlock(&pool->large_mu);
  return r;
}

/* Makes a segment of `segsize` bytes with one free chunk; NULL on failure. */
static aa__chunk *seg_new(aa_pool *pool, size_t segsize, int *rc) {
  void *mem = NULL;
  aa__seg *s = calloc(1, sizeof *s);
  aa__chunk *c = calloc(1, sizeof *c);
  if (s == NULL || c == NULL) {
    *rc = AA_ENOMEM;
    goto fail;
  }
  *rc = aa__backend_alloc(pool, segsize, &mem);
  if (*rc != AA_OK)
    goto fail;
  s->h.base = (uintptr_t)mem;
  s->h.end = (uintptr_t)mem + segsize;
  s->h.kind = AA__SPAN_LARGE;
  *rc = aa__pm_insert(pool, &s->h);
  if (*rc != AA_OK)
    goto fail;
  seg_link(pool, s, c);
  pool->large_reserved += segsize;
  return c;
fail:
  if (mem)
    aa__backend_free(pool, mem, segsize);
  free(c);
  free(s);
  return NULL;
}

/* Whether the first `need` bytes of free chunk c (expandable) are mapped. */
static bool prefix_mapped(const aa_pool *pool, const aa__chunk *c, size_t need) {
  size_t i0, i1;
  pages_under(pool, c, need, &i0, &i1);
  return range_mapped(c->seg, i0, i1);
}

/* Expandable: best fit among free chunks whose memory is already mapped,
 * else best fit among all (mapping what it lacks). */
static aa__chunk *find_fit_mapped(aa_pool *pool, size_t need, aa_stream stream) {
  for (unsigned b = next_bin(pool, bin_of(need)); b < AA__LARGE_BINS; b = next_bin(pool, b + 1)) {
    aa__chunk *best = NULL;
    for (aa__chunk *c = pool->lbins[b]; c; c = c->fnext) {
      if (c->size >= need && (best == NULL || c->size < best->size) &&
          prefix_mapped(pool, c, need) && usable(pool, c, stream))
        best = c;
    }
    if (best)
      return best;
  }
  return NULL;
}

/* Best fit among free chunks usable on `stream`. */
static aa__chunk *find_fit(aa_pool *pool, size_t need, aa_stream stream) {
  if (pool->vmm_page != 0) {
    aa__chunk *c = find_fit_mapped(pool, need, stream);
    if (c)
      return c;
  }
  for (unsigned b = next_bin(pool, bin_of(need)); b < AA__LARGE_BINS; b = next_bin(pool, b + 1)) {
    aa__chunk *best = NULL;
    for (aa__chunk *c = pool->lbins[b]; c; c = c->fnext) {
      if (c->size >= need && (best == NULL || c->size < best->size) && usable(pool, c, stream))
        best = c;
    }
    if (best)
      return best;
  }
  return NULL;
}

/* Cuts `c` (free, out of the bins) to `need`, putting the rest back. */
static void split(aa_pool *pool, aa__chunk *c, size_t need) {
  aa__assert(c->free && !c->parked && need > 0 && need <= c->size);
  aa__assert_internal(c->fnext == NULL && c->fprev == NULL);
  if (c->size - need < SPLIT_MIN)
    return;
  aa__chunk *r = chunk_get(pool);
  if (r == NULL)
    return; /* keep it whole */
  r->seg = c->seg;
  r->base = c->base + need;
  r->size = c->size - need;
  r->free = 1;
  r->any = c->any;
  r->stream = c->stream;
  r->freed_at = c->freed_at;
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
  bin_insert(pool, r);
}

/* aa__oom_retry under large_mu (dropped while the pool releases). */
static bool oom_retry(aa_pool *pool, bool *retried) {
  bool again;
  if (*retried)
    return false;
  pthread_mutex_unlock(&pool->large_mu);
  again = aa__oom_retry(pool, retried);
  pthread_mutex_lock(&pool->large_mu);
  return again;
}

void *aa__large_alloc(aa_pool *pool, aa__tcache *tc, size_t size, aa_stream stream) {
  size_t need = round_up(size, AA__LARGE_ALIGN);
  bool passthrough = pool->cfg.large_mode == AA_LARGE_PASSTHROUGH;
  bool vmm = pool->vmm_page != 0;
  bool retried = false;
  void *p = NULL;
  if (need < size) /* overflow */
    goto oom;
  pthread_mutex_lock(&pool->large_mu);
  /* A size the thread's cache could not serve: what it holds merges back
   * first, so held blocks never make the pool take more memory. */
  while (tc != NULL && tc->nlheld > 0)
    ltc_drop_locked(pool, tc, tc->nlheld - 1);
  for (;;) {
    if (pool->lhash_n >= pool->lhash_cap && hash_grow(pool) != AA_OK)
      break;
    aa__chunk *c = passthrough ? NULL : park_take(pool, need, stream);
    if (c == NULL && !passthrough) {
      unpark_all(pool); /* parked chunks serve exact repeats; else they merge */
      c = find_fit(pool, need, stream);
      if (c)
        bin_remove(pool, c);
    }
    if (c == NULL) {
      int rc = AA_OK;
      size_t segsize = passthrough ? round_up(need, AA__GRANULE) : round_up(need, AA__LARGE_SEG);
      if (segsize < need)
        break;
      c = vmm ? vseg_new(pool, need, &rc) : seg_new(pool, segsize, &rc);
      if (c == NULL) {
        if (!oom_retry(pool, &retried))
          break;
        continue;
      }
      c->stream = stream;
    }
    if (!passthrough)
      split(pool, c, need);
    if (vmm) {
      c->free = 0; /* taken: nothing unparked while mapping may merge into it */
      int rc = ensure_mapped(pool, c);
      if (rc != AA_OK) {
        c->free = 1;
        coalesce_insert(pool, c); /* back where it was taken from */
        if (!oom_retry(pool, &retried))
          break;
        continue;
      }
    }
    aa__event_release(pool, c->ev);
    c->ev = NULL;
    c->free = 0;
    c->any = 0;
    c->req = size;
    hash_put(pool, c);
    pool->large_in_use += c->size;
    pool->large_req += size;
    pool->large_allocs++;
    p = (void *)c->base;
    uint64_t st = st_next_live(atomic_load_explicit(&c->state, AA__RLX));
    atomic_store_explicit(&c->state, st, AA__RLX);
    if (tc != NULL && !passthrough)
      ltc_note(tc, p, c, st);
    uint64_t ob = atomic_fetch_add_explicit(&pool->out_bytes, c->size, AA__RLX) + c->size;
    aa__atomic_max(&pool->peak_out_bytes, ob);
    aa__atomic_max(&pool->win_peak_out_bytes, ob);
    break;
  }
  LARGE_CHECK(pool);
  pthread_mutex_unlock(&pool->large_mu);
  if (p)
    return p;
oom:
  atomic_fetch_add_explicit(&pool->ooms, 1, AA__RLX);
  return NULL;
}

/* Whether free neighbours a (lower) and b can merge; sets the merged state. */
static bool merge_ok(const aa__chunk *a, const aa__chunk *b) {
  if (!a->free || !b->free || a->parked || b->parked || a->nxev > 0 || b->nxev > 0)
    return false;
  if (a->any || b->any)
    return true;
  return a->stream == b->stream;
}

/* Merges b (free, in bins) into a (free, out of bins). */
static void absorb(aa_pool *pool, aa__chunk *a, aa__chunk *b) {
  aa__assert(a->next == b && b->prev == a && a->seg == b->seg);
  aa__assert(a->base + a->size == b->base && a->free && b->free);
  bin_remove(pool, b);
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
  a->size += b->size;
  a->next = b->next;
  if (b->next)
    b->next->prev = a;
  chunk_put(pool, b);
}

/* Puts free chunk `c` (out of the bins) into them, merged with whichever
 * free neighbours it may merge with. */
static void coalesce_insert(aa_pool *pool, aa__chunk *c) {
  if (c->next && merge_ok(c, c->next))
    absorb(pool, c, c->next);
  if (c->prev && merge_ok(c->prev, c)) {
    aa__chunk *a = c->prev;
    bin_remove(pool, a);
    bin_insert(pool, c);
    absorb(pool, a, c);
    c = a;
  }
  /* what is left unmerged may not merge: stream state or parking says so */
  aa__assert_internal(c->next == NULL || !merge_ok(c, c->next));
  aa__assert_internal(c->prev == NULL || !merge_ok(c->prev, c));
  bin_insert(pool, c);
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
 * thread cache's flush was counted when the user freed it). Under large_mu. */
static void release_chunk(aa_pool *pool, aa__chunk *c, aa_stream stream, bool counted) {
  aa_backend *b = pool->backend;
  aa__assert(!c->free && (atomic_load_explicit(&c->state, AA__RLX) & 3) == AA__CH_FREE);
  aa__assert(pool->large_in_use >= c->size && pool->large_req >= c->req);
  aa__chunk *h = hash_find(pool, c->base, true);
  aa__assert(h == c);
  (void)h;
  pool->large_in_use -= c->size;
  pool->large_req -= c->req;
  if (counted)
    pool->large_frees++;
  atomic_fetch_sub_explicit(&pool->out_bytes, c->size, AA__RLX);
  if (pool->cfg.large_mode == AA_LARGE_PASSTHROUGH) {
    free(c->xs);
    c->xs = NULL;
    c->nxs = 0;
    c->free = 1;
    seg_unlink_free(pool, c->seg);
    return;
  }
  c->free = 1;
  c->freed_at = pool->large_frees;
  c->stream = stream;
  c->any = !pool->has_events;
  c->ev = NULL;
  if (c->nxs > 0 && pool->has_events) {
    void **ev = calloc((size_t)c->nxs + 1, sizeof *ev);
    uint32_t n = 0;
    bool failed = ev == NULL;
    for (uint32_t i = 0; i < c->nxs && !failed; i++) {
      if (c->xs[i] == stream)
        continue;
      if (b->ops->event_record(b, c->xs[i], &ev[n]) == AA_OK)
        n++;
      else
        failed = true;
    }
    if (!failed && n > 0) {
      if (b->ops->event_record(b, stream, &ev[n]) == AA_OK)
        n++;
      else
        failed = true;
    }
    if (failed) {
      for (uint32_t i = 0; i < n; i++)
        aa__event_release(pool, ev[i]);
      free(ev);
      if (b->ops->synchronize)
        b->ops->synchronize(b);
      c->any = 1;
    } else if (n == 0) {
      free(ev);
    } else {
      c->xev = ev;
      c->nxev = n;
    }
  }
  free(c->xs);
  c->xs = NULL;
  c->nxs = 0;
  if (c->nxev == 0)
    park(pool, c);
  else
    coalesce_insert(pool, c);
  enforce_bound(pool);
}

int aa__large_free(aa_pool *pool, aa__seg *seg, void *ptr, size_t size, aa_stream stream) {
  if (seg != NULL && seg->owner != NULL)
    seg = seg->owner; /* a page of an expandable segment */
  aa_misuse what = 0;
  const char *msg = NULL;
  uintptr_t p = (uintptr_t)ptr;
  pthread_mutex_lock(&pool->large_mu);
  aa__chunk *c = hash_find(pool, p, false);
  if (c == NULL) {
    aa__chunk *in = find_container(seg, p);
    if (in && in->free) {
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
  if (!atomic_compare_exchange_strong_explicit(&c->state, &st, st_phase(st, AA__CH_FREE),
                                               memory_order_acq_rel, memory_order_acquire)) {
    what = AA_MISUSE_DOUBLE_FREE;
    msg = "large block freed twice at once";
    goto bad;
  }
  release_chunk(pool, c, stream, true);
  LARGE_CHECK(pool);
  pthread_mutex_unlock(&pool->large_mu);
  return AA_OK;
bad:
  pthread_mutex_unlock(&pool->large_mu);
  aa__misuse(pool, what, ptr, size, msg);
  return AA_EINVAL;
}

size_t aa__large_block_size(aa_pool *pool, aa__seg *seg, const void *ptr) {
  if (seg != NULL && seg->owner != NULL)
    seg = seg->owner; /* a page of an expandable segment */
  size_t r = 0;
  pthread_mutex_lock(&pool->large_mu);
  aa__chunk *c = hash_find(pool, (uintptr_t)ptr, false);
  if (c == NULL)
    c = find_container(seg, (uintptr_t)ptr);
  if (c && !c->free && (atomic_load_explicit(&c->state, AA__RLX) & 3) == AA__CH_LIVE)
    r = c->size;
  pthread_mutex_unlock(&pool->large_mu);
  return r;
}

int aa__large_record(aa_pool *pool, aa__seg *seg, void *ptr, aa_stream stream) {
  if (seg != NULL && seg->owner != NULL)
    seg = seg->owner; /* a page of an expandable segment */
  int rc = AA_OK;
  (void)seg;
  pthread_mutex_lock(&pool->large_mu);
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
  pthread_mutex_unlock(&pool->large_mu);
  return rc;
}

void aa__large_destroy(aa_pool *pool) {
  unpark_all(pool);
  while (pool->segs) {
    aa__seg *s = pool->segs;
    for (aa__chunk *c = s->first; c; c = c->next) {
      if (c->free)
        bin_remove(pool, c);
    }
    seg_unlink_free(pool, s);
  }
  while (pool->lspare) {
    aa__chunk *n = pool->lspare->fnext;
    free(pool->lspare);
    pool->lspare = n;
  }
  pool->nlspare = 0;
  free(pool->lhash);
  pool->lhash = NULL;
  pool->lhash_cap = pool->lhash_n = 0;
}

void aa__large_stats(aa_pool *pool, uint64_t *in_use, uint64_t *reserved, uint64_t *segs,
                     uint64_t *req) {
  pthread_mutex_lock(&pool->large_mu);
  *in_use = pool->large_in_use;
  *reserved = pool->large_reserved;
  *segs = pool->nsegs;
  *req = pool->large_req;
  pthread_mutex_unlock(&pool->large_mu);
}

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
static void ltc_drop_locked(aa_pool *pool, aa__tcache *tc, uint32_t i) {
  aa__assert(i < tc->nlheld);
  struct aa__ltc_held h = ltc_take(tc, i);
  aa__assert((h.state & 3) == AA__CH_HELD);
  uint64_t st = h.state;
  /* only this thread moves a held chunk on, so this cannot fail */
  if (atomic_compare_exchange_strong_explicit(&h.c->state, &st, st_phase(st, AA__CH_FREE),
                                              memory_order_acq_rel, memory_order_acquire))
    release_chunk(pool, h.c, h.stream, false);
}

void aa__ltc_flush(aa_pool *pool, aa__tcache *tc) {
  if (tc->nlheld == 0)
    return;
  pthread_mutex_lock(&pool->large_mu);
  while (tc->nlheld > 0)
    ltc_drop_locked(pool, tc, tc->nlheld - 1);
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
    uint64_t live = st_next_live(st);
    if (!atomic_compare_exchange_strong_explicit(&tc->lheld[i].c->state, &st, live,
                                                 memory_order_acq_rel, memory_order_acquire))
      return NULL; /* cannot happen: only this thread moves a held chunk */
    struct aa__ltc_held h = ltc_take(tc, i);
    aa__cadd(&tc->large_allocs, 1);
    ltc_note(tc, h.p, h.c, live);
    return h.p;
  }
  return NULL;
}

bool aa__ltc_free(aa_pool *pool, aa__tcache *tc, void *p, size_t size, aa_stream stream) {
  struct aa__ltc_live *l = &tc->llive[ltc_slot(p)];
  if (l->p != p)
    return false;
  aa__chunk *c = l->c;
  uint64_t st = l->state;
  l->p = NULL;
  ltc_sync(pool, tc);
  size_t cap = ltc_cap(pool);
  /* The CAS first: only once it succeeds is c this thread's to read (a
   * stale entry's chunk may be free or someone else's by now). */
  uint64_t held = st_phase(st, AA__CH_HELD);
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
      ltc_drop_locked(pool, tc, 0); /* the oldest */
    pthread_mutex_unlock(&pool->large_mu);
  }
  tc->lheld[tc->nlheld++] = (struct aa__ltc_held){p, c, held, c->req, stream};
  tc->lheld_bytes += c->size;
  aa__cadd(&tc->lheld_block, c->size);
  aa__cadd(&tc->lheld_req, c->req);
  aa__cadd(&tc->large_frees, 1);
  return true;
}
