/*
 * large_seg.c — the large path's memory: segments (made, linked, settled,
 * released whole), the expandable reservation's pages (mapped on demand,
 * unmapped from completed free chunks, oldest-freed first), and release and
 * trimming against large_cache_bytes. Under pool->large->mu. Above the
 * chunks and the stitched ranges (a page unmapped takes a dormant range's
 * alias of it first); what the caches and the plan give back before a
 * release is large.c's aa__large_release.
 */
#include <stdlib.h>
#include <string.h>

#include "large_internal.h"

/* ------------------------------------------------------------ pages */

#define VMM_VA ((size_t)256 << 30)
/* The small requests' region (large.c): 32 GiB of address space, a page
 * table of 128 KiB on the host; another is made if it fills. */
#define VMM_VA_SMALL ((size_t)32 << 30)

/* The most pages one mapping covers (vmm_runs): 32 MiB of 2 MiB pages, about
 * PyTorch's 20 MiB handle. A run goes back only whole, so a longer one could
 * strand nearly all of itself under one small live block at a real
 * out-of-memory; 16 pages bound that to 30 MiB and still map a 1 GiB
 * request in 32 calls instead of 512. A request of at least vmm_run_min
 * bytes takes runs of at most vmm_run_pages (large_map_run_pages): smaller
 * handles in the large blocks, whose holes a stitched range then maps. */
#define MAP_RUN_PAGES AA_LARGE_MAP_RUN_MAX

/* A mapping is one backend handle behind pages [first, first + n) of a
 * reservation: one page, or (pool->large->vmm_runs) a run of the unmapped pages one
 * request needed, at most MAP_RUN_PAGES (vmm_run_pages for a large request), mapped by one call (a CUDA map call
 * costs about the same for 2 MiB as for 20). Every page of the run points at the same record,
 * whose span covers the run; the run is unmapped whole, once no live chunk
 * needs any of its pages. */
static void run_of(const aa_pool *pool, const aa__seg *s, size_t i, size_t *r0, size_t *r1) {
  const aa__seg *pg = s->pages[i];
  *r0 = (pg->h.base - s->h.base) / pool->large->vmm_page;
  *r1 = (pg->h.end - s->h.base) / pool->large->vmm_page;
}

/* Unmaps the mapping that page i belongs to; returns its bytes. */
static size_t page_unmap(aa_pool *pool, aa__seg *s, size_t i) {
  aa__seg *pg = s->pages[i];
  aa__lg_stitch_page_gone(pool, pg); /* a dormant range's alias of it goes first */
  size_t r0, r1;
  run_of(pool, s, i, &r0, &r1);
  size_t len = pg->h.end - pg->h.base;
  aa__pm_remove(pool, &pg->h);
  aa__backend_unmap(pool, (void *)pg->h.base, len, pg->handle);
  free(pg);
  for (size_t k = r0; k < r1; k++)
    s->pages[k] = NULL;
  if (pool->large->vmm_forget) { /* an explicit release: these pages are not "touched" now */
    if (s->forgot == NULL)
      s->forgot = calloc(s->npages, 1); /* without it: touched, as before */
    for (size_t k = r0; s->forgot != NULL && k < r1; k++) {
      s->nforgot += !s->forgot[k];
      s->forgot[k] = 1;
    }
  }
  s->mapped -= r1 - r0;
  pool->large->reserved -= len;
  pool->large->vmm_unmaps += r1 - r0;
  return len;
}

/* Maps pages [i, i + n) of s (all unmapped) with one backend call. */
static int run_map(aa_pool *pool, aa__seg *s, size_t i, size_t n) {
  size_t ps = pool->large->vmm_page, len = n * ps;
  uintptr_t a = s->h.base + i * ps;
  aa__assert(n > 0 && i + n <= s->npages);
  aa__seg *pg = calloc(1, sizeof *pg);
  if (pg == NULL)
    return AA_ENOMEM;
  int rc = aa__backend_map(pool, (void *)a, len, &pg->handle);
  if (rc != AA_OK) {
    free(pg);
    return rc;
  }
  pg->h.base = a;
  pg->h.end = a + len;
  pg->h.kind = AA__SPAN_LARGE;
  pg->owner = s;
  rc = aa__pm_insert(pool, &pg->h);
  if (rc != AA_OK) {
    aa__backend_unmap(pool, (void *)a, len, pg->handle);
    free(pg);
    return rc;
  }
  for (size_t k = i; k < i + n; k++) {
    aa__assert(s->pages[k] == NULL);
    s->pages[k] = pg;
    if (s->nforgot > 0 && s->forgot[k]) {
      s->forgot[k] = 0;
      s->nforgot--;
    }
  }
  s->mapped += n;
  if (i + n > s->hwm)
    s->hwm = i + n;
  pool->large->reserved += len;
  pool->large->vmm_maps += n;
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
  size_t ps = pool->large->vmm_page;
  uintptr_t sb = c->seg->h.base;
  *i0 = (c->base - sb + ps - 1) / ps;
  *i1 = (c->base + c->size - sb) / ps;
  if (*i1 > c->seg->hwm)
    *i1 = c->seg->hwm;
}

/* Unmaps the mappings wholly inside free chunk c's interior until `want`
 * bytes are back; a run that reaches outside it (under a live chunk, or
 * past the chunk) stays. dry: counts those bytes, unmaps nothing. */
static size_t unmap_interior(aa_pool *pool, aa__chunk *c, size_t want, bool dry) {
  aa__seg *s = c->seg;
  size_t got = 0, i0, i1, r0, r1;
  interior(pool, c, &i0, &i1);
  for (size_t i = i0; i < i1 && got < want; i++) {
    if (s->pages[i] == NULL)
      continue;
    run_of(pool, s, i, &r0, &r1);
    if (r0 >= i0 && r1 <= i1)
      got += dry ? (r1 - r0) * pool->large->vmm_page : page_unmap(pool, s, i);
    i = r1 - 1;
  }
  return got;
}

static bool has_interior_mapped(const aa_pool *pool, const aa__chunk *c) {
  size_t i0, i1, r0, r1;
  interior(pool, c, &i0, &i1);
  for (size_t i = i0; i < i1; i++) {
    if (c->seg->pages[i] == NULL)
      continue;
    run_of(pool, c->seg, i, &r0, &r1);
    if (r0 >= i0 && r1 <= i1)
      return true;
    i = r1 - 1;
  }
  return false;
}

static size_t vmm_unmap_free(aa_pool *pool, size_t want, const aa__chunk *skip) {
  size_t got = 0, n = 0, cap = 0;
  aa__chunk **v = NULL;
  aa__lg_unpark_all(pool);
  for (aa__seg *s = pool->large->segs; s; s = s->next) {
    if (s->pages == NULL || s->mapped == 0)
      continue;
    for (aa__chunk *c = s->first; c; c = c->next) {
      if (!c->free || c == skip || !has_interior_mapped(pool, c))
        continue;
      if (!aa__lg_usable_anywhere(pool, c))
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
    got += unmap_interior(pool, v[i], want - got, false);
  free(v);
  return got;
}

/* Maps every page under `c` (free, out of the bins), first unmapping as many
 * pages from completed free chunks elsewhere as it needs. */
int aa__lg_ensure_mapped(aa_pool *pool, aa__chunk *c) {
  aa__seg *s = c->seg;
  size_t ps = pool->large->vmm_page, i0, i1, k = 0;
  aa__lg_pages_under(pool, c, c->size, &i0, &i1);
  if (aa__lg_range_mapped(s, i0, i1))
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
  } else if (pool->large->unmap_credit > 0) {
    /* an arena dissolved around live blocks left its free room between
     * them: its pages move here rather than the pool growing, once */
    uint64_t want = pool->large->unmap_credit < k * ps ? pool->large->unmap_credit : k * ps;
    size_t got = vmm_unmap_free(pool, (size_t)want, c);
    pool->large->unmap_credit = got < want ? 0 : pool->large->unmap_credit - got;
  }
  /* Without a limit, each run of unmapped pages in one call (vmm_runs); under
   * one, page by page, so that pages can move between chunks later. */
  bool runs = pool->large->vmm_runs && lim == 0;
  size_t run_max = c->size >= pool->large->vmm_run_min ? pool->large->vmm_run_pages : MAP_RUN_PAGES;
  /* With stitching, a page the chunk shares with a neighbour is a handle of
   * its own, so that the whole pages inside the chunk are whole handles a
   * stitched range can map again once it is a hole (cuMemMap maps a handle
   * whole); runs stay inside [cut_lo, cut_hi). */
  size_t ps_ = pool->large->vmm_page, cut_lo = i0, cut_hi = i1;
  if (pool->large->stitch_on) {
    cut_lo = (c->base - s->h.base) % ps_ != 0 ? i0 + 1 : i0;
    cut_hi = (c->base + c->size - s->h.base) % ps_ != 0 ? i1 - 1 : i1;
  }
  /* the plan's arena: a run ends at each page that holds a planned block's
   * edge, and that page is a run of its own, so that the room around the
   * blocks live when the arena is dissolved is whole runs (unmap_credit) */
  bool *cut = NULL;
  if (runs && pool->large->map_ncuts > 0 && i1 > i0)
    cut = calloc(i1 - i0 + 1, sizeof *cut);
  for (size_t m = 0; cut != NULL && m < pool->large->map_ncuts; m++) {
    uintptr_t x = c->base + pool->large->map_cuts[m];
    size_t p = (x - s->h.base) / ps_;
    if (p >= i0 && p <= i1)
      cut[p - i0] = true;
    if ((x - s->h.base) % ps_ != 0 && p + 1 >= i0 && p + 1 <= i1)
      cut[p + 1 - i0] = true;
  }
  for (size_t i = i0; i < i1;) {
    if (s->pages[i] != NULL) {
      i++;
      continue;
    }
    size_t j = i + 1;
    while (runs && j < i1 && s->pages[j] == NULL && j - i < run_max && j != cut_lo &&
           j != cut_hi && (cut == NULL || !cut[j - i0]))
      j++;
    int rc = run_map(pool, s, i, j - i);
    if (rc != AA_OK) {
      free(cut);
      return rc;
    }
    i = j;
  }
  free(cut);
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
  s->next = pool->large->segs;
  if (pool->large->segs)
    pool->large->segs->prev = s;
  pool->large->segs = s;
  pool->large->nsegs++;
}

/* A reservation of at least `need` bytes with one free, unmapped chunk. */
aa__chunk *aa__lg_vseg_new(aa_pool *pool, size_t need, bool small, int *rc) {
  aa_backend *b = pool->backend;
  size_t ps = pool->large->vmm_page;
  size_t size = aa__lg_round_up(need, ps);
  void *mem = NULL;
  if (size < need) {
    *rc = AA_ENOMEM;
    return NULL;
  }
  if (size < (small ? VMM_VA_SMALL : VMM_VA))
    size = small ? VMM_VA_SMALL : VMM_VA;
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
    if (half < aa__lg_round_up(need, ps))
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
  s->small_reqs = small;
  seg_link(pool, s, c);
  return c;
}

/* ------------------------------------------------------------ segments */

void aa__lg_seg_unlink_free(aa_pool *pool, aa__seg *s) {
  aa__chunk *c = s->first;
  if (s->pages != NULL) { /* expandable: unmap what is mapped, drop the reservation */
    for (size_t i = 0; i < s->hwm; i++) {
      if (s->pages[i] != NULL)
        (void)page_unmap(pool, s, i);
    }
    pool->backend->ops->va_release(pool->backend, (void *)s->h.base, s->h.end - s->h.base);
    free(s->pages);
    s->pages = NULL;
    free(s->forgot);
    s->forgot = NULL;
  } else {
    aa__pm_remove(pool, &s->h);
    pool->large->reserved -= s->h.end - s->h.base;
    aa__backend_free(pool, (void *)s->h.base, s->h.end - s->h.base);
  }
  if (s->prev)
    s->prev->next = s->next;
  else
    pool->large->segs = s->next;
  if (s->next)
    s->next->prev = s->prev;
  pool->large->nsegs--;
  while (c) {
    aa__chunk *n = c->next;
    aa__event_release(pool, c->ev);
    for (uint32_t i = 0; i < c->nxev; i++)
      aa__event_release(pool, c->xev[i]);
    free(c->xev);
    free(c->xs);
    aa__lg_chunk_put(pool, c);
    c = n;
  }
  free(s);
}

/* A wholly free segment that can go back now (its chunk usable anywhere). */
static bool seg_releasable(aa_pool *pool, aa__seg *s) {
  aa__chunk *c = s->first;
  if (s->pages != NULL || !c->free || c->next != NULL)
    return false;
  return aa__lg_usable_anywhere(pool, c);
}

/* Free chunks whose events completed become usable anywhere and merge with
 * their free neighbours, so that a segment freed piecewise on several
 * streams can go back whole. */
static void seg_settle(aa_pool *pool, aa__seg *s) {
  for (aa__chunk *c = s->first; c; c = c->next) {
    if (c->free && !c->any && pool->has_events)
      (void)aa__lg_usable_anywhere(pool, c);
  }
  aa__chunk *c = s->first;
  while (c) {
    aa__chunk *n = c->next;
    if (n && aa__lg_merge_ok(pool, c, n) && c->any == n->any) {
      aa__lg_bin_remove(pool, c);
      aa__lg_absorb(pool, c, n);
      aa__lg_bin_insert(pool, c);
      continue; /* try the new neighbour */
    }
    if (c->free && !c->parked && aa__lg_room_end(c))
      continue; /* a room emptied here (its blocks' events done): try again */
    c = n;
  }
}

/* The mapped runs wholly inside [lo, hi) of s, in bytes. */
static size_t runs_inside(const aa_pool *pool, const aa__seg *s, uintptr_t lo, uintptr_t hi) {
  size_t ps = pool->large->vmm_page, got = 0, r0, r1;
  size_t i0 = (lo - s->h.base + ps - 1) / ps, i1 = (hi - s->h.base) / ps;
  if (i1 > s->hwm)
    i1 = s->hwm;
  for (size_t i = i0; i < i1; i++) {
    if (s->pages[i] == NULL)
      continue;
    run_of(pool, s, i, &r0, &r1);
    if (r0 >= i0 && r1 <= i1)
      got += (r1 - r0) * ps;
    i = r1 - 1;
  }
  return got;
}

/* Whether free chunk c's work has completed. most: asked changing nothing
 * (no event recorded or released, c not made usable anywhere), a chunk
 * with no event yet on a stream that cannot be asked counts as done. */
static bool work_done(aa_pool *pool, aa__chunk *c, bool most) {
  if (!most)
    return aa__lg_usable_anywhere(pool, c);
  if (!pool->has_events || c->any)
    return true;
  for (uint32_t i = 0; i < c->nxev; i++) {
    if (aa__event_pending(pool, c->xev[i]))
      return false;
  }
  return !aa__event_pending(pool, c->ev);
}

size_t aa__lg_releasable(aa_pool *pool, bool most) {
  /* no parked chunk merged (a plan refused after the question had moved
   * the placement that followed: sidepipe, events 1 ms late, 1,104 ->
   * 1,156 MiB with no plan adopted); free neighbours whose work is done
   * count as merged, as the release would merge them */
  size_t got = 0;
  for (aa__seg *s = pool->large->segs; s; s = s->next) {
    if (s->pages == NULL) { /* a fixed segment goes whole, when wholly free */
      aa__chunk *c = s->first;
      while (c != NULL && c->free && work_done(pool, c, most))
        c = c->next;
      got += c == NULL ? s->h.end - s->h.base : 0;
      continue;
    }
    for (aa__chunk *c = s->first; c && s->mapped > 0;) {
      if (!c->free || !work_done(pool, c, most)) {
        c = c->next;
        continue;
      }
      aa__chunk *e = c;
      while (e->next != NULL && e->next->free && work_done(pool, e->next, most))
        e = e->next;
      got += runs_inside(pool, s, c->base, e->base + e->size);
      c = e->next;
    }
  }
  return got;
}

void aa__lg_forget_unmapped(aa_pool *pool) {
  /* the pages of every mapping unmapped since, below hwm (as page_unmap
   * marks them under an explicit release) */
  for (aa__seg *s = pool->large->segs; s; s = s->next) {
    if (s->pages == NULL || s->mapped == s->hwm)
      continue;
    for (size_t k = 0; k < s->hwm; k++) {
      if (s->pages[k] != NULL)
        continue;
      if (s->forgot == NULL)
        s->forgot = calloc(s->npages, 1);
      if (s->forgot == NULL)
        return; /* touched, as before */
      s->nforgot += !s->forgot[k];
      s->forgot[k] = 1;
    }
  }
}

size_t aa__lg_release_locked(aa_pool *pool, size_t want) {
  size_t released = 0;
  aa__lg_unpark_all(pool);
  aa__seg *s = pool->large->segs;
  while (s && released < want) {
    aa__seg *n = s->next;
    if (s->first->next != NULL)
      seg_settle(pool, s);
    if (seg_releasable(pool, s)) {
      size_t sz = s->h.end - s->h.base;
      aa__lg_bin_remove(pool, s->first);
      aa__lg_seg_unlink_free(pool, s);
      released += sz;
    }
    s = n;
  }
  if (pool->large->vmm_page != 0 && released < want) /* every reservation at once */
    released += vmm_unmap_free(pool, want - released, NULL);
  return released;
}

void aa__lg_enforce_bound(aa_pool *pool) {
  size_t bound = pool->cfg.large_cache_bytes;
  if (pool->large->vmm_page != 0) {
    uint64_t cached = pool->large->reserved - pool->large->in_use;
    if (bound != 0 && pool->large->reserved > pool->large->in_use && cached > bound)
      vmm_unmap_free(pool, cached - bound, NULL);
    return;
  }
  if (bound == 0)
    return;
  aa__lg_unpark_all(pool);
  if (pool->large->free_bytes <= bound)
    return;
  aa__lg_release_locked(pool, pool->large->free_bytes - bound);
}

/* Makes a segment of `segsize` bytes with one free chunk; NULL on failure. */
aa__chunk *aa__lg_seg_new(aa_pool *pool, size_t segsize, bool small, int *rc) {
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
  s->small_reqs = small;
  seg_link(pool, s, c);
  pool->large->reserved += segsize;
  return c;
fail:
  if (mem)
    aa__backend_free(pool, mem, segsize);
  free(c);
  free(s);
  return NULL;
}
