/*
 * large_stitch.c — stitched ranges of the expandable large path
 * (aa_pool_config.large_stitch): a large request that no free chunk fits,
 * while enough whole free pages lie in holes between live chunks, is served
 * by mapping those pages' handles (map_alias: no new memory) side by side at
 * a new address. The handles stay mapped where they were too; the origin
 * parts they cover are "lent" (not free, not live) while the stitched range
 * lives, so a page is never handed out through both addresses.
 *
 * A stitched range is a segment of its own (aa__seg.st set, on the large
 * path's `stitches` list, not on `segs`) covered by one chunk that is never
 * split, never binned: it serves one block at a time, a request of its size
 * or a little less (a loop's next iteration asking the same again), so the
 * map calls are paid once. A free range is dissolved (its aliases undone,
 * its origin parts free again and merged) on release, trim and the OOM
 * retry, when a request that nothing fits needs its pages for a larger
 * stitch, and, least recently used first, when AA__STITCH_MAX ranges exist.
 *
 * Stitching uses only free chunks usable on the request's stream with no
 * event of their own (their work is done or was on that stream), and only
 * whole handles (map runs) inside them: cuMemMap maps a handle whole.
 * Entry points (large_internal.h): aa__lg_stitch_take, aa__lg_stitch_freed,
 * aa__lg_stitch_dissolve_free, aa__lg_stitch_destroy. Under the large
 * path's mu.
 */
#include <stdlib.h>
#include <string.h>

#include "large_internal.h"

/* The most stitched ranges at once, and the handles one range joins (map
 * calls paid once each). */
#define AA__STITCH_MAX 16
#define AA__STITCH_PARTS 256
/* A free range serves a request down to this share of its size. */
#define AA__STITCH_FIT_NUM 7
#define AA__STITCH_FIT_DEN 8

bool aa__lg_stitch_usable(const aa_pool *pool) {
  const aa_backend_ops *o = pool->backend->ops;
  return pool->large->vmm_page != 0 && o->map_alias != NULL && o->unmap_alias != NULL;
}

/* ------------------------------------------------------------ dissolve */

/* Whether free range s may be dissolved now: its chunk free, no event
 * pending (its parts go back usable everywhere). */
static bool dissolvable(aa_pool *pool, aa__seg *s) {
  aa__chunk *c = s->first;
  if (!c->free)
    return false;
  if (c->nxev > 0) { /* record_stream'd streams' events: all must be done */
    if (!aa__events_done(pool, c->xev, &c->nxev))
      return false;
    free(c->xev);
    c->xev = NULL;
  }
  if (c->any || !pool->has_events)
    return true;
  if (c->ev != NULL) {
    uint32_t one = 1;
    if (!aa__events_done(pool, &c->ev, &one))
      return false;
    c->ev = NULL;
    return true;
  }
  return aa__stream_idle(pool, c->stream);
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

/* Undoes range s: aliases, page map, address space; its chunk record back
 * to the spares. With `give_back`, its origin parts become free chunks again
 * (merged with their neighbours); without (the pool is being destroyed),
 * they stay as they are. */
static void range_undo(aa_pool *pool, aa__seg *s, bool give_back) {
  aa__large *L = pool->large;
  aa_backend *b = pool->backend;
  aa__stitch *st = s->st;
  size_t size = s->h.end - s->h.base;
  for (size_t i = st->nparts; i-- > 0;)
    b->ops->unmap_alias(b, (void *)st->parts[i].at, st->parts[i].len, st->parts[i].pg->handle);
  L->alias_unmaps += st->nparts;
  aa__pm_remove(pool, &s->h);
  b->ops->va_release(b, (void *)s->h.base, size);
  for (size_t i = 0; give_back && i < st->nparts; i++) {
    aa__chunk *o = st->parts[i].from;
    if (o == NULL || o->lent == NULL)
      continue; /* never lent (a failed make), or given back with an earlier part */
    aa__assert(o->lent == s && !o->free);
    o->lent = NULL;
    o->free = 1;
    o->any = 1;
    o->ev = NULL;
    o->freed_at = L->frees;
    aa__lg_coalesce_insert(pool, o);
  }
  unlink_range(pool, s);
  L->nstitch--;
  L->stitch_bytes -= size;
  aa__lg_chunk_put(pool, s->first);
  free(st->parts);
  free(st);
  free(s);
}

size_t aa__lg_stitch_dissolve_free(aa_pool *pool) {
  size_t got = 0;
  for (aa__seg *s = pool->large->stitches, *n; s; s = n) {
    n = s->next;
    if (dissolvable(pool, s)) {
      got += s->h.end - s->h.base;
      pool->large->stitch_dissolved++;
      range_undo(pool, s, true);
    }
  }
  return got;
}

void aa__lg_stitch_destroy(aa_pool *pool) {
  while (pool->large->stitches)
    range_undo(pool, pool->large->stitches, false);
}

/* The least recently used free range that may be dissolved, or NULL. */
static aa__seg *lru_free(aa_pool *pool) {
  aa__seg *best = NULL;
  for (aa__seg *s = pool->large->stitches; s; s = s->next) {
    if (s->first->free && (best == NULL || s->st->used_at < best->st->used_at) &&
        dissolvable(pool, s))
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
    if (r0 < lo || r1 > hi) { /* reaches outside the chunk: not lendable */
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

/* A new free range of at least `need` bytes from whole free handles usable
 * on `stream`, its chunk returned (not binned); NULL when the holes do not
 * hold enough, at the bound, or a backend call failed (nothing changed). */
static aa__chunk *range_new(aa_pool *pool, size_t need, aa_stream stream) {
  aa__large *L = pool->large;
  aa_backend *b = pool->backend;
  size_t ps = L->vmm_page;
  size_t want = aa__lg_round_up(need, ps);
  cand *v = NULL;
  size_t nv = 0, capv = 0, got = 0, nparts = 0;
  aa__seg *s = NULL;
  aa__chunk *sc = NULL;
  void *base = NULL;
  size_t mapped = 0;
  bool all_any = true;

  if (L->nstitch >= AA__STITCH_MAX) {
    aa__seg *old = lru_free(pool);
    if (old == NULL)
      return NULL;
    L->stitch_dissolved++;
    range_undo(pool, old, true);
  }
  /* the holes, smallest bins first: the pieces least likely to serve
   * anything else */
  for (unsigned bn = 0; bn < AA__LARGE_BINS && got < want; bn++) {
    for (aa__chunk *c = L->bins[bn]; c && got < want; c = c->fnext) {
      size_t i0, i1;
      if (c->seg->pages == NULL || c->nxev > 0 || c->ev != NULL || c->size < ps)
        continue;
      if (!(c->any || c->stream == stream))
        continue;
      if (!whole_handles(pool, c, want - got, &i0, &i1))
        continue;
      size_t np = 0;
      for (size_t i = i0; i < i1; i = (c->seg->pages[i]->h.end - c->seg->h.base) / ps)
        np++;
      if (nparts + np > AA__STITCH_PARTS)
        continue;
      if (nv == capv) {
        size_t nc = capv ? capv * 2 : 16;
        cand *nvv = realloc(v, nc * sizeof *nvv);
        if (nvv == NULL)
          goto fail;
        v = nvv;
        capv = nc;
      }
      v[nv++] = (cand){c, i0, i1};
      got += (i1 - i0) * ps;
      nparts += np;
      all_any &= c->any != 0;
    }
  }
  if (got < want || nv < 2)
    goto fail; /* one chunk's handles alone: find_fit's business */
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
  size_t off = 0;
  for (size_t k = 0; k < nv; k++) {
    aa__seg *o = v[k].c->seg;
    for (size_t i = v[k].i0; i < v[k].i1;) {
      aa__seg *pg = o->pages[i];
      size_t len = pg->h.end - pg->h.base;
      aa__stitch_part *pt = &s->st->parts[mapped];
      pt->pg = pg;
      pt->at = (uintptr_t)base + off;
      pt->len = len;
      if (b->ops->map_alias(b, (void *)pt->at, len, pg->handle) != AA_OK)
        goto fail;
      mapped++;
      off += len;
      i += len / ps;
    }
  }
  aa__assert(off == got && mapped == nparts);
  s->h.base = (uintptr_t)base;
  s->h.end = (uintptr_t)base + got;
  s->h.kind = AA__SPAN_LARGE;
  if (aa__pm_insert(pool, &s->h) != AA_OK)
    goto fail;
  /* the range exists: linked, its chunk free; a cut that fails (memory
   * short) undoes it whole, the parts lent so far given back */
  s->st->nparts = nparts;
  sc->seg = s;
  sc->base = s->h.base;
  sc->size = got;
  sc->free = 1;
  sc->any = all_any;
  sc->stream = stream;
  sc->freed_at = L->frees;
  s->first = sc;
  s->next = L->stitches;
  if (L->stitches)
    L->stitches->prev = s;
  L->stitches = s;
  L->nstitch++;
  L->stitch_bytes += got;
  size_t p = 0;
  for (size_t k = 0; k < nv; k++) {
    aa__seg *o = v[k].c->seg;
    aa__chunk *mid = lend(pool, v[k].c, v[k].i0, v[k].i1, s);
    if (mid == NULL) {
      free(v);
      range_undo(pool, s, true);
      return NULL;
    }
    for (size_t i = v[k].i0; i < v[k].i1; i = (o->pages[i]->h.end - o->h.base) / ps)
      s->st->parts[p++].from = mid;
  }
  aa__assert(p == nparts);
  L->stitches_made++;
  L->alias_maps += nparts;
  free(v);
  return sc;
fail:
  for (size_t i = mapped; i-- > 0;)
    b->ops->unmap_alias(b, (void *)s->st->parts[i].at, s->st->parts[i].len,
                        s->st->parts[i].pg->handle);
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

aa__chunk *aa__lg_stitch_take(aa_pool *pool, size_t need, aa_stream stream) {
  aa__large *L = pool->large;
  aa__seg *best = NULL;
  /* a free range of about this size first: a loop's next iteration */
  for (aa__seg *s = L->stitches; s; s = s->next) {
    aa__chunk *c = s->first;
    size_t sz = c->size;
    if (!c->free || sz < need || need < sz / AA__STITCH_FIT_DEN * AA__STITCH_FIT_NUM)
      continue;
    if (best != NULL && sz >= best->first->size)
      continue;
    if (!aa__lg_usable(pool, c, stream))
      continue;
    best = s;
  }
  aa__chunk *c = best ? best->first : range_new(pool, need, stream);
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
}
