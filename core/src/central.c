/*
 * central.c — the shared side of the small path: block lists, the per-class central free lists with stream-ordered reuse, and slabs
 * (carving, release, prefill, retirement). Everything here runs under the
 * class's mutex (c->mu) unless it says otherwise; the thread-cache side is
 * tcache.c's, aa_alloc alloc.c's and aa_free free.c's.
 *
 * Entry points: aa__central_push, aa__central_take, aa__central_pop,
 * aa__carve; aa__class_release, aa__class_prefill, aa__class_destroy,
 * aa__retire_check.
 */
#include <stdlib.h>
#include <string.h>

#include "small_internal.h"

/* ------------------------------------------------------------ block lists */

static int blist_reserve(aa__blist *l, uint32_t need) {
  if (need <= l->cap)
    return AA_OK;
  uint32_t cap = l->cap ? l->cap : 64;
  while (cap < need)
    cap *= 2;
  aa__blk *v = realloc(l->v, (size_t)cap * sizeof *v);
  if (v == NULL)
    return AA_ENOMEM;
  l->v = v;
  l->cap = cap;
  return AA_OK;
}

static void blist_free(aa__blist *l) {
  free(l->v);
  l->v = NULL;
  l->n = l->cap = 0;
}

static void blist_filter_dying(aa__blist *l) {
  uint32_t j = 0;
  for (uint32_t i = 0; i < l->n; i++) {
    if (l->v[i].s->dying == 0)
      l->v[j++] = l->v[i];
  }
  l->n = j;
}

/* ------------------------------------------------------------ invariants */

#if AA_DEBUG >= 3
static uint64_t count_list(const aa__blist *l, uint64_t *bad) {
  for (uint32_t i = 0; i < l->n; i++) {
    const aa__blk *b = &l->v[i];
    if (b->idx >= b->s->nblocks || atomic_load_explicit(&b->s->meta[b->idx], AA__RLX) != 0)
      (*bad)++;
  }
  return l->n;
}

/* Full walk of a class (AA_DEBUG 3): the counts agree with the lists and
 * every listed block is free. Under c->mu. */
static void class_check(const aa__class *c) {
  uint64_t nfree = 0, npend = 0, nslabs = 0, bad = 0, listed = 0, pending = 0;
  for (const aa__slab *s = c->slabs; s; s = s->next) {
    nslabs++;
    nfree += s->nfree;
    npend += s->npending;
    aa__assert(s->nfree <= s->nblocks && s->npending <= s->nfree);
  }
  listed += count_list(&c->any, &bad);
  for (uint32_t i = 0; i < c->nsl; i++) {
    listed += count_list(&c->sl[i].fresh, &bad);
    pending += count_list(&c->sl[i].infl, &bad);
  }
  for (uint32_t i = 0; i < c->nmulti; i++) {
    const aa__blk *b = &c->multi[i].b;
    if (atomic_load_explicit(&b->s->meta[b->idx], AA__RLX) != 0)
      bad++;
    pending++;
  }
  aa__assert(nslabs == c->nslabs);
  aa__assert(nfree == c->nfree && npend == c->npending);
  aa__assert(listed + pending == c->nfree && pending == c->npending);
  aa__assert(bad == 0);
}
#define CLASS_CHECK(c) class_check(c)
#else
#define CLASS_CHECK(c) ((void)0)
#endif

/* ------------------------------------------------------------ central lists */

static aa__slist *slist_find(aa__class *c, aa_stream s) {
  for (uint32_t i = 0; i < c->nsl; i++) {
    if (c->sl[i].stream == s)
      return &c->sl[i];
  }
  return NULL;
}

static aa__slist *slist_get(aa__class *c, aa_stream s) {
  aa__slist *l = slist_find(c, s);
  if (l)
    return l;
  /* reuse an idle slot */
  for (uint32_t i = 0; i < c->nsl; i++) {
    l = &c->sl[i];
    if (l->fresh.n == 0 && l->infl.n == 0 && l->ev == NULL) {
      l->stream = s;
      return l;
    }
  }
  if (c->nsl == c->capsl) {
    uint32_t cap = c->capsl ? c->capsl * 2 : 4;
    aa__slist *v = realloc(c->sl, (size_t)cap * sizeof *v);
    if (v == NULL)
      return NULL;
    c->sl = v;
    c->capsl = cap;
  }
  l = &c->sl[c->nsl++];
  memset(l, 0, sizeof *l);
  l->stream = s;
  return l;
}

/* Moves a completed in-flight batch to `any`. */
static void infl_to_any(aa__class *c, aa__slist *l) {
  for (uint32_t i = 0; i < l->infl.n; i++) {
    l->infl.v[i].s->npending--;
    c->any.v[c->any.n++] = l->infl.v[i];
  }
  c->npending -= l->infl.n;
  l->infl.n = 0;
}

/* Moves a stream's fresh blocks to `any` (its stream is idle). */
static void fresh_to_any(aa__class *c, aa__slist *l) {
  for (uint32_t i = 0; i < l->fresh.n; i++)
    c->any.v[c->any.n++] = l->fresh.v[i];
  l->fresh.n = 0;
}

/* Polls pending batches and record_stream'd blocks; with `start`, first asks
 * whether each other stream holding blocks is idle (then all its blocks,
 * fresh and in flight, go to `any` with no event), else records an event on
 * every stream that has fresh blocks and no batch in flight. */
static void poll_pending(aa_pool *pool, aa__class *c, aa_stream except, bool start) {
  aa_backend *b = pool->backend;
  for (uint32_t i = 0; i < c->nsl; i++) {
    aa__slist *l = &c->sl[i];
    if (start && l->stream != except && (l->fresh.n > 0 || l->ev != NULL) &&
        aa__stream_idle(pool, l->stream)) {
      /* every block here was freed before the query: the work before
       * each free has completed */
      aa__event_release(pool, l->ev);
      l->ev = NULL;
      infl_to_any(c, l);
      fresh_to_any(c, l);
      continue;
    }
    if (l->ev == NULL && start && l->fresh.n > 0 && l->stream != except && l->infl.n == 0) {
      void *ev = NULL;
      if (b->ops->event_record(b, l->stream, &ev) == AA_OK) {
        aa__blist t = l->infl;
        l->infl = l->fresh;
        l->fresh = t;
        l->ev = ev;
        for (uint32_t j = 0; j < l->infl.n; j++)
          l->infl.v[j].s->npending++;
        c->npending += l->infl.n;
      }
    }
    if (l->ev != NULL) {
      uint32_t one = 1;
      if (aa__events_done(pool, &l->ev, &one)) {
        l->ev = NULL;
        infl_to_any(c, l);
      }
    }
  }
  uint32_t j = 0;
  for (uint32_t i = 0; i < c->nmulti; i++) {
    aa__multi *m = &c->multi[i];
    if (aa__events_done(pool, m->ev, &m->nev)) {
      free(m->ev);
      m->b.s->npending--;
      c->npending--;
      c->any.v[c->any.n++] = m->b;
    } else {
      c->multi[j++] = *m;
    }
  }
  c->nmulti = j;
}

uint64_t aa__central_held_now(aa_pool *pool, const aa__class *c) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < c->nsl; i++) {
    if (c->sl[i].infl.n > 0 && aa__event_pending(pool, c->sl[i].ev))
      n += c->sl[i].infl.n;
  }
  for (uint32_t i = 0; i < c->nmulti; i++) {
    for (uint32_t k = 0; k < c->multi[i].nev; k++) {
      if (aa__event_pending(pool, c->multi[i].ev[k])) {
        n++;
        break;
      }
    }
  }
  return n;
}

/* Pushes blocks freed on `stream` into the central lists. Under c->mu. */
void aa__central_push(aa_pool *pool, aa__class *c, const aa__blk *v, uint32_t n,
                      aa_stream stream) {
  aa__blist *dst = &c->any;
  if (pool->has_events) {
    aa__slist *l = slist_get(c, stream);
    if (l && blist_reserve(&l->fresh, l->fresh.n + n) == AA_OK) {
      dst = &l->fresh;
    } else if (pool->backend->ops->synchronize) {
      /* no memory for a list: make the blocks safe everywhere instead */
      pool->backend->ops->synchronize(pool->backend);
    }
  }
  for (uint32_t i = 0; i < n; i++) {
    v[i].s->nfree++;
    dst->v[dst->n++] = v[i];
  }
  c->nfree += n;
  aa__assert_internal(c->nfree <= c->nslabs * c->nblocks);
  atomic_fetch_sub_explicit(&pool->out_bytes, (uint64_t)n * v[0].s->block_size, AA__RLX);
  if (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_RETIRING)
    aa__retire_check(pool, c);
  CLASS_CHECK(c);
}

uint32_t aa__central_take(aa__class *c, aa__blist *l, aa__blk *out, uint32_t want) {
  uint32_t k = 0;
  while (k < want && l->n > 0) {
    aa__blk b = l->v[--l->n];
    aa__assert_internal(b.s->nfree > 0);
    aa__assert_internal(atomic_load_explicit(&b.s->meta[b.idx], AA__RLX) == 0);
    b.s->nfree--;
    out[k++] = b;
  }
  c->nfree -= k;
  return k;
}

/* Takes up to `want` blocks usable on `stream`. Under c->mu. */
uint32_t aa__central_pop(aa_pool *pool, aa__class *c, aa_stream stream, aa__blk *out,
                         uint32_t want) {
  uint32_t got = 0;
  aa__slist *l = pool->has_events ? slist_find(c, stream) : NULL;
  if (l) {
    got += aa__central_take(c, &l->fresh, out + got, want - got);
    if (got < want && l->infl.n > 0) {
      uint32_t k = aa__central_take(c, &l->infl, out + got, want - got);
      for (uint32_t i = 0; i < k; i++)
        out[got + i].s->npending--;
      c->npending -= k;
      got += k;
      if (l->infl.n == 0 && l->ev) {
        aa__event_release(pool, l->ev);
        l->ev = NULL;
      }
    }
  }
  if (got < want)
    got += aa__central_take(c, &c->any, out + got, want - got);
  if (got == 0 && pool->has_events && (c->nsl > 0 || c->nmulti > 0)) {
    poll_pending(pool, c, stream, true);
    got += aa__central_take(c, &c->any, out + got, want - got);
  }
  CLASS_CHECK(c);
  return got;
}

/* ------------------------------------------------------------ slabs */

static void slab_free_header(aa__slab *s) { free(s); }

/* Carves one new slab into the class's `any` list. Under c->mu. */
int aa__carve(aa_pool *pool, aa__class *c) {
  size_t bs = atomic_load_explicit(&c->block_size, AA__RLX);
  size_t slab_size = pool->cfg.slab_size;
  uint32_t nb = c->nblocks;
  aa__slab *s = NULL;
  void *mem = NULL;
  int rc = blist_reserve(&c->any, (uint32_t)((c->nslabs + 1) * nb));
  if (rc != AA_OK)
    goto fail;
  s = aligned_alloc(pool->small->hdr_align, pool->small->hdr_align);
  if (s == NULL) {
    rc = AA_ENOMEM;
    goto fail;
  }
  memset(s, 0, sizeof *s + (size_t)nb * sizeof s->meta[0]);
  rc = aa__backend_alloc(pool, slab_size, &mem);
  if (rc != AA_OK)
    goto fail;
  s->h.base = (uintptr_t)mem;
  s->h.end = (uintptr_t)mem + slab_size;
  s->h.kind = AA__SPAN_SLAB;
  s->cls = (uint32_t)(c - pool->small->classes);
  s->nblocks = nb;
  s->block_size = bs;
  s->div_magic = c->div_magic;
  rc = aa__pm_insert(pool, &s->h);
  if (rc != AA_OK)
    goto fail;
  s->next = c->slabs;
  if (c->slabs)
    c->slabs->prev = s;
  c->slabs = s;
  c->nslabs++;
  for (uint32_t i = nb; i-- > 0;) {
    c->any.v[c->any.n++] = (aa__blk){s, i};
  }
  s->nfree = nb;
  c->nfree += nb;
  return AA_OK;
fail:
  if (mem)
    aa__backend_free(pool, mem, slab_size);
  free(s);
  return rc;
}

/* Releases slabs whose blocks are all free and none pending, up to `want`
 * bytes, keeping `prefill` free blocks if asked. Under c->mu. */
static size_t class_release_locked(aa_pool *pool, aa__class *c, size_t want, bool keep_prefill) {
  size_t slab_size = pool->cfg.slab_size;
  size_t released = 0;
  uint64_t keep = keep_prefill ? atomic_load_explicit(&c->prefill, AA__RLX) : 0;
  uint32_t ndying = 0;
  if (c->nsl > 0 || c->nmulti > 0)
    poll_pending(pool, c, NULL, false);
  uint64_t nfree = c->nfree;
  for (aa__slab *s = c->slabs; s && released < want; s = s->next) {
    if (s->nfree == s->nblocks && s->npending == 0 && nfree - s->nblocks >= keep) {
      s->dying = 1;
      ndying++;
      nfree -= s->nblocks;
      released += slab_size;
    }
  }
  if (ndying == 0)
    return 0;
  blist_filter_dying(&c->any);
  for (uint32_t i = 0; i < c->nsl; i++)
    blist_filter_dying(&c->sl[i].fresh);
  /* thread caches may hold one of these slabs in their slab cache: the
   * epoch moves before any header is freed (see aa_free) */
  atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_release);
  aa__slab *s = c->slabs;
  while (s) {
    aa__slab *next = s->next;
    if (s->dying) {
      if (s->prev)
        s->prev->next = s->next;
      else
        c->slabs = s->next;
      if (s->next)
        s->next->prev = s->prev;
      c->nslabs--;
      c->nfree -= s->nblocks;
      aa__pm_remove(pool, &s->h);
      aa__backend_free(pool, (void *)s->h.base, slab_size);
      slab_free_header(s);
    }
    s = next;
  }
  CLASS_CHECK(c);
  return released;
}

void aa__retire_check(aa_pool *pool, aa__class *c) {
  bool any_empty = false;
  for (aa__slab *s = c->slabs; s; s = s->next) {
    if (s->nfree == s->nblocks && s->npending == 0) {
      any_empty = true;
      break;
    }
  }
  if (any_empty || c->npending > 0)
    class_release_locked(pool, c, SIZE_MAX, false);
  if (c->nslabs == 0 && atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_RETIRING) {
    /* drained: the slot can be reused */
    for (uint32_t i = 0; i < c->nsl; i++) {
      aa__event_release(pool, c->sl[i].ev);
      blist_free(&c->sl[i].fresh);
      blist_free(&c->sl[i].infl);
    }
    free(c->sl);
    c->sl = NULL;
    c->nsl = c->capsl = 0;
    blist_free(&c->any);
    atomic_store_explicit(&c->state, AA__CLS_EMPTY, memory_order_release);
    atomic_fetch_add_explicit(&c->gen, 1, memory_order_release);
  }
}

size_t aa__class_release(aa_pool *pool, aa__class *c, size_t want, bool keep_prefill) {
  pthread_mutex_lock(&c->mu);
  size_t r = 0;
  if (atomic_load_explicit(&c->state, AA__RLX) != AA__CLS_EMPTY) {
    r = class_release_locked(pool, c, want, keep_prefill);
    if (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_RETIRING)
      aa__retire_check(pool, c);
  }
  pthread_mutex_unlock(&c->mu);
  return r;
}

int aa__class_prefill(aa_pool *pool, aa__class *c) {
  int rc = AA_OK;
  pthread_mutex_lock(&c->mu);
  uint32_t want = atomic_load_explicit(&c->prefill, AA__RLX);
  while (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_ACTIVE &&
         c->nfree - c->npending < want) {
    rc = aa__carve(pool, c);
    if (rc != AA_OK)
      break;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* Frees everything of a class at pool destroy (no locks needed). */
void aa__class_destroy(aa_pool *pool, aa__class *c) {
  aa__slab *s = c->slabs;
  while (s) {
    aa__slab *next = s->next;
    aa__pm_remove(pool, &s->h);
    aa__backend_free(pool, (void *)s->h.base, pool->cfg.slab_size);
    slab_free_header(s);
    s = next;
  }
  c->slabs = NULL;
  for (uint32_t i = 0; i < c->nsl; i++) {
    aa__event_release(pool, c->sl[i].ev);
    blist_free(&c->sl[i].fresh);
    blist_free(&c->sl[i].infl);
  }
  free(c->sl);
  for (uint32_t i = 0; i < c->nmulti; i++) {
    for (uint32_t j = 0; j < c->multi[i].nev; j++)
      aa__event_release(pool, c->multi[i].ev[j]);
    free(c->multi[i].ev);
  }
  free(c->multi);
  blist_free(&c->any);
  pthread_mutex_destroy(&c->mu);
}
