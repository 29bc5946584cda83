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
 *
 * Live chunks are found from their address through a hash table; the page
 * map gives the segment. Everything here runs under pool->large_mu.
 * Entry points: aa__large_alloc, aa__large_free, aa__large_release.
 */
#include <string.h>

#include "core_internal.h"

#define SPLIT_MIN ((size_t)64 << 10)

static bool merge_ok(const aa__chunk *a, const aa__chunk *b);
static void absorb(aa_pool *pool, aa__chunk *a, aa__chunk *b);

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static unsigned bin_of(size_t size) {
  unsigned b = aa_hist_bucket(size);
  b = b > 44 ? b - 44 : 0;
  return b < AA__LARGE_BINS ? b : AA__LARGE_BINS - 1;
}

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

static void hash_put(aa_pool *pool, aa__chunk *c) {
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
    *pp = c->hnext;
    c->hnext = NULL;
    pool->lhash_n--;
  }
  return c;
}

/* ------------------------------------------------------------ free bins */

static void bin_insert(aa_pool *pool, aa__chunk *c) {
  unsigned b = bin_of(c->size);
  c->fprev = NULL;
  c->fnext = pool->lbins[b];
  if (c->fnext)
    c->fnext->fprev = c;
  pool->lbins[b] = c;
  pool->large_free_bytes += c->size;
}

static void bin_remove(aa_pool *pool, aa__chunk *c) {
  if (c->fprev)
    c->fprev->fnext = c->fnext;
  else
    pool->lbins[bin_of(c->size)] = c->fnext;
  if (c->fnext)
    c->fnext->fprev = c->fprev;
  c->fnext = c->fprev = NULL;
  pool->large_free_bytes -= c->size;
}

static void ev_release(aa_pool *pool, void *ev) {
  if (ev && pool->backend->ops->event_release)
    pool->backend->ops->event_release(pool->backend, ev);
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

static void seg_unlink_free(aa_pool *pool, aa__seg *s) {
  aa__chunk *c = s->first;
  aa__pm_remove(pool, &s->h);
  if (s->prev)
    s->prev->next = s->next;
  else
    pool->segs = s->next;
  if (s->next)
    s->next->prev = s->prev;
  pool->large_reserved -= s->h.end - s->h.base;
  pool->nsegs--;
  aa__backend_free(pool, (void *)s->h.base, s->h.end - s->h.base);
  while (c) {
    aa__chunk *n = c->next;
    ev_release(pool, c->ev);
    for (uint32_t i = 0; i < c->nxev; i++)
      ev_release(pool, c->xev[i]);
    free(c->xev);
    free(c->xs);
    free(c);
    c = n;
  }
  free(s);
}

/* A wholly free segment that can go back now (its chunk usable anywhere). */
static bool seg_releasable(aa_pool *pool, aa__seg *s) {
  aa__chunk *c = s->first;
  if (!c->free || c->next != NULL)
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
  return released;
}

static void enforce_bound(aa_pool *pool) {
  size_t bound = pool->cfg.large_cache_bytes;
  if (bound == 0 || pool->large_free_bytes <= bound)
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
  c->seg = s;
  c->base = s->h.base;
  c->size = segsize;
  c->free = 1;
  c->any = 1;
  s->first = c;
  s->next = pool->segs;
  if (pool->segs)
    pool->segs->prev = s;
  pool->segs = s;
  pool->large_reserved += segsize;
  pool->nsegs++;
  return c;
fail:
  if (mem)
    aa__backend_free(pool, mem, segsize);
  free(c);
  free(s);
  return NULL;
}

/* Best fit among free chunks usable on `stream`. */
static aa__chunk *find_fit(aa_pool *pool, size_t need, aa_stream stream) {
  for (unsigned b = bin_of(need); b < AA__LARGE_BINS; b++) {
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
  if (c->size - need < SPLIT_MIN)
    return;
  aa__chunk *r = calloc(1, sizeof *r);
  if (r == NULL)
    return; /* keep it whole */
  r->seg = c->seg;
  r->base = c->base + need;
  r->size = c->size - need;
  r->free = 1;
  r->any = c->any;
  r->stream = c->stream;
  r->ev = c->ev; /* recorded after the whole was freed: covers the rest */
  c->ev = NULL;
  c->size = need;
  r->prev = c;
  r->next = c->next;
  if (c->next)
    c->next->prev = r;
  c->next = r;
  bin_insert(pool, r);
}

void *aa__large_alloc(aa_pool *pool, size_t size, aa_stream stream) {
  size_t need = round_up(size, AA__LARGE_ALIGN);
  bool passthrough = pool->cfg.large_mode == AA_LARGE_PASSTHROUGH;
  bool retried = false;
  void *p = NULL;
  if (need < size) /* overflow */
    goto oom;
  pthread_mutex_lock(&pool->large_mu);
  for (;;) {
    if (pool->lhash_n >= pool->lhash_cap && hash_grow(pool) != AA_OK)
      break;
    aa__chunk *c = passthrough ? NULL : find_fit(pool, need, stream);
    if (c) {
      bin_remove(pool, c);
    } else {
      int rc = AA_OK;
      size_t segsize = passthrough ? round_up(need, AA__GRANULE) : round_up(need, AA__LARGE_SEG);
      if (segsize < need)
        break;
      c = seg_new(pool, segsize, &rc);
      if (c == NULL) {
        if (retried)
          break;
        retried = true;
        pthread_mutex_unlock(&pool->large_mu);
        atomic_fetch_add_explicit(&pool->oom_retries, 1, AA__RLX);
        aa__release_cached(pool, true);
        pthread_mutex_lock(&pool->large_mu);
        continue;
      }
      c->stream = stream;
    }
    if (!passthrough)
      split(pool, c, need);
    ev_release(pool, c->ev);
    c->ev = NULL;
    c->free = 0;
    c->any = 0;
    c->req = size;
    hash_put(pool, c);
    pool->large_in_use += c->size;
    pool->large_req += size;
    pool->large_allocs++;
    p = (void *)c->base;
    uint64_t ob = atomic_fetch_add_explicit(&pool->out_bytes, c->size, AA__RLX) + c->size;
    aa__atomic_max(&pool->peak_out_bytes, ob);
    break;
  }
  pthread_mutex_unlock(&pool->large_mu);
  if (p)
    return p;
oom:
  atomic_fetch_add_explicit(&pool->ooms, 1, AA__RLX);
  return NULL;
}

/* Whether free neighbours a (lower) and b can merge; sets the merged state. */
static bool merge_ok(const aa__chunk *a, const aa__chunk *b) {
  if (!a->free || !b->free || a->nxev > 0 || b->nxev > 0)
    return false;
  if (a->any || b->any)
    return true;
  return a->stream == b->stream;
}

/* Merges b (free, in bins) into a (free, out of bins). */
static void absorb(aa_pool *pool, aa__chunk *a, aa__chunk *b) {
  bin_remove(pool, b);
  if (!(a->any && b->any)) {
    aa_stream s = a->any ? b->stream : a->stream;
    ev_release(pool, a->ev);
    ev_release(pool, b->ev);
    a->ev = NULL;
    a->any = 0;
    a->stream = s;
  } else {
    ev_release(pool, b->ev);
  }
  a->size += b->size;
  a->next = b->next;
  if (b->next)
    b->next->prev = a;
  free(b);
}

static aa__chunk *find_container(aa__seg *seg, uintptr_t p) {
  for (aa__chunk *c = seg->first; c; c = c->next) {
    if (p >= c->base && p < c->base + c->size)
      return c;
  }
  return NULL;
}

int aa__large_free(aa_pool *pool, aa__seg *seg, void *ptr, size_t size, aa_stream stream) {
  aa_backend *b = pool->backend;
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
  if (size != 0 && size != c->req) {
    what = AA_MISUSE_BAD_SIZE;
    msg = "size differs from the size allocated";
    goto bad;
  }
  hash_find(pool, p, true);
  pool->large_in_use -= c->size;
  pool->large_req -= c->req;
  pool->large_frees++;
  atomic_fetch_sub_explicit(&pool->out_bytes, c->size, AA__RLX);
  if (pool->cfg.large_mode == AA_LARGE_PASSTHROUGH) {
    free(c->xs);
    c->xs = NULL;
    c->nxs = 0;
    c->free = 1;
    seg_unlink_free(pool, seg);
    pthread_mutex_unlock(&pool->large_mu);
    return AA_OK;
  }
  c->free = 1;
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
        ev_release(pool, ev[i]);
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
  if (c->next && merge_ok(c, c->next))
    absorb(pool, c, c->next);
  if (c->prev && merge_ok(c->prev, c)) {
    aa__chunk *a = c->prev;
    bin_remove(pool, a);
    bin_insert(pool, c);
    absorb(pool, a, c);
    c = a;
  }
  bin_insert(pool, c);
  enforce_bound(pool);
  pthread_mutex_unlock(&pool->large_mu);
  return AA_OK;
bad:
  pthread_mutex_unlock(&pool->large_mu);
  aa__misuse(pool, what, ptr, size, msg);
  return AA_EINVAL;
}

size_t aa__large_block_size(aa_pool *pool, aa__seg *seg, const void *ptr) {
  size_t r = 0;
  pthread_mutex_lock(&pool->large_mu);
  aa__chunk *c = hash_find(pool, (uintptr_t)ptr, false);
  if (c == NULL)
    c = find_container(seg, (uintptr_t)ptr);
  if (c && !c->free)
    r = c->size;
  pthread_mutex_unlock(&pool->large_mu);
  return r;
}

int aa__large_record(aa_pool *pool, aa__seg *seg, void *ptr, aa_stream stream) {
  int rc = AA_OK;
  (void)seg;
  pthread_mutex_lock(&pool->large_mu);
  aa__chunk *c = hash_find(pool, (uintptr_t)ptr, false);
  if (c == NULL) {
    rc = AA_EINVAL;
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
  c->xs[c->nxs++] = stream;
out:
  pthread_mutex_unlock(&pool->large_mu);
  return rc;
}

void aa__large_destroy(aa_pool *pool) {
  while (pool->segs) {
    aa__seg *s = pool->segs;
    for (aa__chunk *c = s->first; c; c = c->next) {
      if (c->free)
        bin_remove(pool, c);
    }
    seg_unlink_free(pool, s);
  }
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
