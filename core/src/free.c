/*
 * free.c — the small path's free: aa_free (a bin push through the
 * one-entry slab cache, else the page map), the locked path with
 * stream-ordered reuse, misuse reports; aa_record_stream and its records;
 * aa_block_size, aa_pool_owns, aa_block_share (a live block's backend memory for another
 * process; its large-path part is large_ipc.c).
 */
#include "adaptalloc/cuda.h" /* AA_STREAM_HOST */
#include "small_internal.h"

/* ------------------------------------------------------------ free */

static void count_free(aa_pool *pool, aa__tcache *tc, uint32_t k, uint32_t rq) {
  if (tc) {
    aa__cadd(&tc->stc.bins[k].frees, 1);
    aa__cadd(&tc->stc.bins[k].req_sub, rq);
  } else {
    atomic_fetch_add_explicit(&pool->small->dead[k].frees, 1, AA__RLX);
    atomic_fetch_add_explicit(&pool->small->dead[k].req_sub, rq, AA__RLX);
  }
}

/* Takes the record_stream set of a small block (NULL if none). */
static aa__rsrec *rs_take(aa_pool *pool, const void *p) {
  size_t h = ((uintptr_t)p >> 9) & (AA__RS_BUCKETS - 1);
  pthread_mutex_lock(&pool->small->rs_mu);
  aa__rsrec **pp = &pool->small->rs[h];
  while (*pp && (*pp)->p != p)
    pp = &(*pp)->next;
  aa__rsrec *r = *pp;
  if (r)
    *pp = r->next;
  pthread_mutex_unlock(&pool->small->rs_mu);
  return r;
}

/* Records events for a freed record_stream'd block. Returns the number of
 * events (0: none needed, free as usual on *stream, which it may change:
 * aa__rec_free_stream). *evs owned by the caller. */
static uint32_t rs_events(aa_pool *pool, aa__rsrec *r, aa_stream *stream, void ***evs) {
  bool synced;
  *evs = NULL;
  if (r == NULL || !pool->has_events)
    return 0;
  aa_stream on = aa__rec_free_stream(r->s, r->n, *stream);
  if (on != *stream) {
    *stream = on;
    return 0;
  }
  return aa__stream_events(pool, r->s, r->n, *stream, NULL, evs, &synced);
}

static int free_slow(aa_pool *pool, aa__tcache *tc, aa__blk b, aa_stream stream, bool recorded) {
  aa__class *c = &pool->small->classes[b.s->cls];
  if (tc && !recorded && tc->stc.cached_bytes + b.s->block_size > tc->stc.max_bytes &&
      b.s->block_size <= tc->stc.max_bytes / 4)
    aa__stc_make_room(pool, tc);
  void **evs = NULL;
  uint32_t nev = 0;
  if (recorded) {
    aa__rsrec *r = rs_take(pool, aa__blk_ptr(b));
    nev = rs_events(pool, r, &stream, &evs);
    if (r) {
      free(r->s);
      free(r);
    }
  }
  pthread_mutex_lock(&c->mu);
  if (nev > 0) {
    if (c->nmulti == c->capmulti) {
      uint32_t cap = c->capmulti ? c->capmulti * 2 : 16;
      aa__multi *v = realloc(c->multi, (size_t)cap * sizeof *v);
      if (v == NULL) {
        /* no room to track it: wait for the streams instead */
        for (uint32_t i = 0; i < nev; i++)
          aa__event_release(pool, evs[i]);
        free(evs);
        nev = 0;
        if (pool->backend->ops->synchronize)
          pool->backend->ops->synchronize(pool->backend);
      } else {
        c->multi = v;
        c->capmulti = cap;
      }
    }
  }
  if (nev > 0) {
    aa__multi *m = &c->multi[c->nmulti++];
    m->b = b;
    m->ev = evs;
    m->nev = nev;
    b.s->nfree++;
    b.s->npending++;
    c->nfree++;
    c->npending++;
    atomic_fetch_sub_explicit(&pool->out_bytes, b.s->block_size, AA__RLX);
    pthread_mutex_unlock(&c->mu);
    return AA_OK;
  }
  if (tc && atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_ACTIVE) {
    aa__bin *bin = &tc->stc.bins[b.s->cls];
    aa__bin_sync(pool, tc, bin, c);
    if (bin->n > 0 && bin->stream != stream && bin->stream == AA_STREAM_HOST) {
      /* Pinned staging: the thread takes buffers on the host pseudo-stream
       * and puts them back on copy streams. Its cached host blocks stay (the
       * next get is a cache hit); this one waits in its stream's list. */
      aa__central_push(pool, c, &b, 1, stream);
      pthread_mutex_unlock(&c->mu);
      return AA_OK;
    }
    if (bin->n > 0 && bin->stream != stream)
      aa__bin_flush_n(pool, tc, bin, c, bin->n);
    if (bin->lim > 0) {
      if (bin->n >= bin->lim)
        aa__bin_flush_n(pool, tc, bin, c, (bin->n + 1) / 2);
      if (tc->stc.cached_bytes + bin->bsize > pool->cfg.tcache_bytes)
        aa__bin_flush_n(pool, tc, bin, c, bin->n);
      if (tc->stc.cached_bytes + bin->bsize <= pool->cfg.tcache_bytes && bin->n < bin->lim) {
        bin->items[bin->n++] = aa__blk_item(b);
        bin->stream = stream;
        tc->stc.cached_bytes += bin->bsize;
        pthread_mutex_unlock(&c->mu);
        return AA_OK;
      }
    }
  }
  aa__central_push(pool, c, &b, 1, stream);
  pthread_mutex_unlock(&c->mu);
  return AA_OK;
}

static int free_odd(aa_pool *pool, void *ptr, size_t size, aa_stream stream, aa__span *sp);

/* A free that the fast path did not take (nothing changed yet): checks
 * again, then the locked path. */
__attribute__((noinline)) static int free_rest(aa_pool *pool, void *ptr, size_t size,
                                               aa_stream stream) {
  uintptr_t p = (uintptr_t)ptr;
  aa__span *sp = aa__pm_lookup(&pool->map, p);
  if (sp == NULL || sp->kind != AA__SPAN_SLAB)
    return free_odd(pool, ptr, size, stream, sp);
  aa__slab *s = (aa__slab *)sp;
  uintptr_t off = p - s->h.base;
  uint32_t idx = aa__slab_index(s, off);
  if (idx >= s->nblocks || (uintptr_t)idx * s->block_size != off)
    return free_odd(pool, ptr, size, stream, sp);
  uint32_t m = atomic_load_explicit(&s->meta[idx], AA__RLX);
  uint32_t rq = m & AA__M_SIZE;
  if ((m & AA__M_USED) == 0 || (size != 0 && size != rq))
    return free_odd(pool, ptr, size, stream, sp);
  atomic_store_explicit(&s->meta[idx], 0, AA__RLX);
  aa__blk b = {s, idx};
  aa__tcache *tc = aa__tcache_get(pool);
  if (tc && tc->epoch != atomic_load_explicit(&pool->epoch, AA__RLX))
    aa__tcache_sync(tc);
  count_free(pool, tc, b.s->cls, rq);
  free_slow(pool, tc, b, stream, (m & AA__M_REC) != 0);
  return AA_OK;
}

/* NULL, foreign and large pointers, and every misuse. */
__attribute__((noinline)) static int free_odd(aa_pool *pool, void *ptr, size_t size,
                                              aa_stream stream, aa__span *sp) {
  if (ptr == NULL)
    return AA_OK;
  if (pool == NULL)
    return AA_EINVAL;
  if (sp == NULL) {
    aa__misuse(pool, AA_MISUSE_FOREIGN, ptr, size, "pointer not owned by this pool");
    return AA_EINVAL;
  }
  if (sp->kind != AA__SPAN_SLAB) {
    aa__tcache *tc = aa__tcache_mine(pool);
    return tc != NULL && aa__ltc_free(pool, tc, ptr, size, stream)
               ? AA_OK
               : aa__large_free(pool, sp, ptr, size, stream);
  }
  aa__slab *s = (aa__slab *)sp;
  uintptr_t off = (uintptr_t)ptr - s->h.base;
  uint32_t idx = aa__slab_index(s, off);
  if (idx >= s->nblocks) {
    aa__misuse(pool, AA_MISUSE_FOREIGN, ptr, size, "pointer in a slab's unused tail");
  } else if ((uintptr_t)idx * s->block_size != off) {
    aa__misuse(pool, AA_MISUSE_INTERIOR, ptr, size, "pointer inside a block, not at its start");
  } else if ((atomic_load_explicit(&s->meta[idx], AA__RLX) & AA__M_USED) == 0) {
    aa__misuse(pool, AA_MISUSE_DOUBLE_FREE, ptr, size, "block already free");
  } else {
    aa__misuse(pool, AA_MISUSE_BAD_SIZE, ptr, size, "size differs from the size allocated");
  }
  return AA_EINVAL;
}

/* The free fast path once the slab is known: validates the pointer against
 * the slab and its metadata word, pushes the block into the bin. `fill`:
 * the slab came from the page map; put it in the slab cache once the
 * pointer proved to be a live block of it. */
static inline __attribute__((always_inline)) int
free_in_slab(aa_pool *pool, aa__tcache *tc, aa__slab *s, aa__bin *bin, void *ptr, size_t size,
             aa_stream stream, bool fill) {
  uintptr_t off = (uintptr_t)ptr - s->h.base;
  /* index and exactness from one multiply: with this magic (2^42/d rounded
   * up, d = block_size/512 < 2^20, off/512 < 2^21) the fraction is below the
   * magic iff off/512 is a multiple of d */
  uint64_t prod = (uint64_t)(off >> 9) * s->div_magic;
  uint32_t idx = (uint32_t)(prod >> 42);
  if (AA__UNLIKELY(idx >= s->nblocks || (off & 511) != 0 ||
                   (prod & (((uint64_t)1 << 42) - 1)) >= s->div_magic))
    return free_odd(pool, ptr, size, stream, &s->h);
  aa__assert_internal((uintptr_t)idx * s->block_size == off);
  _Atomic uint32_t *mp = &s->meta[idx];
  uint32_t m = atomic_load_explicit(mp, AA__RLX);
  uint32_t rq = m & AA__M_SIZE;
  /* m == USED|rq: in use, not record_stream'd */
  if (AA__UNLIKELY((m & AA__M_USED) == 0 || (size != 0 && size != rq)))
    return free_odd(pool, ptr, size, stream, &s->h);
  if (AA__UNLIKELY((m & AA__M_REC) != 0))
    return free_rest(pool, ptr, size, stream);
  if (fill) {
    bin = &tc->stc.bins[s->cls];
    tc->stc.sc_base = s->h.base;
    tc->stc.sc_size = s->h.end - s->h.base;
    tc->stc.sc_slab = s;
    tc->stc.sc_bin = bin;
  }
  uint32_t n = bin->n;
  size_t cached = tc->stc.cached_bytes + bin->bsize;
  if (AA__UNLIKELY(!(n < bin->lim && bin->stream == stream && cached <= tc->stc.max_bytes)))
    return free_rest(pool, ptr, size, stream);
  /* all plain loads and stores first, the atomic ones after (the compiler
   * reloads plain fields across an atomic store) */
  bin->n = n + 1;
  tc->stc.cached_bytes = cached;
  bin->items[n] = (aa__bitem){ptr, mp};
  aa__cadd(&bin->frees, 1);
  aa__cadd(&bin->req_sub, rq);
  atomic_store_explicit(mp, 0, AA__RLX);
  return AA_OK;
}

/* A free outside the cached slab: the page map finds the span. */
__attribute__((noinline)) static int free_lookup(aa_pool *pool, aa__tcache *tc, void *ptr,
                                                 size_t size, aa_stream stream) {
  aa__span *sp = aa__pm_lookup(&pool->map, (uintptr_t)ptr);
  if (AA__UNLIKELY(sp == NULL || sp->kind != AA__SPAN_SLAB))
    return free_odd(pool, ptr, size, stream, sp);
  return free_in_slab(pool, tc, (aa__slab *)sp, NULL, ptr, size, stream, true);
}

/* Why the slab cache is safe: a legitimate free targets a live block, and a
 * slab with a live block is never released; a slab is released (its range
 * unmapped, perhaps reused by a new slab) only after the epoch moved, and
 * whoever frees a block of the range's next owner got that block after the
 * move, so this thread sees the new epoch and goes the slow way, which
 * empties the cache. */
static inline __attribute__((always_inline)) int free_any(aa_pool *pool, void *ptr, size_t size,
                                                          aa_stream stream) {
  aa__tcache *tc = aa__tl_tc[pool->slot_ix];
  if (AA__UNLIKELY(tc == NULL || tc->epoch != atomic_load_explicit(&pool->epoch, AA__RLX)))
    return free_rest(pool, ptr, size, stream);
  if (AA__UNLIKELY((uintptr_t)ptr - tc->stc.sc_base >= tc->stc.sc_size))
    return free_lookup(pool, tc, ptr, size, stream);
  return free_in_slab(pool, tc, tc->stc.sc_slab, tc->stc.sc_bin, ptr, size, stream, false);
}

/* A free while a trace callback is set (with telemetry on): the sequence
 * number is taken before any path can hand the block to another thread,
 * the event is delivered once the free succeeded. */
__attribute__((noinline)) static int free_traced(aa_pool *pool, void *ptr, size_t size,
                                                 aa_stream stream) {
  bool claimed;                                             /* sampled tracing: the block left the traced set */
  uint64_t seq = aa__trace_free_begin(pool, ptr, &claimed); /* 0: not traced */
  int rc = free_any(pool, ptr, size, stream);
  if (rc == AA_OK && ptr != NULL && seq != 0)
    aa__trace_at(pool, 'f', ptr, size, stream, seq);
  else if (rc != AA_OK && claimed)
    aa__trace_free_undo(pool, ptr);
  return rc;
}

int aa_free(aa_pool *pool, void *ptr, size_t size, aa_stream stream) {
  if (AA__UNLIKELY(pool == NULL))
    return free_odd(pool, ptr, size, stream, NULL);
  if (AA__UNLIKELY(atomic_load_explicit(&pool->tflags, AA__RLX) ==
                   (AA__TF_TELEMETRY | AA__TF_TRACE)))
    return free_traced(pool, ptr, size, stream);
  return free_any(pool, ptr, size, stream);
}

/* ------------------------------------------------------------ others */

static int record_stream(aa_pool *pool, void *ptr, aa_stream stream) {
  uintptr_t p = (uintptr_t)ptr;
  aa__span *sp = aa__pm_lookup(&pool->map, p);
  if (sp == NULL)
    return AA_EINVAL;
  if (sp->kind != AA__SPAN_SLAB)
    return aa__large_record(pool, sp, ptr, stream);
  aa__slab *s = (aa__slab *)sp;
  uintptr_t off = p - s->h.base;
  uint32_t idx = aa__slab_index(s, off);
  if (idx >= s->nblocks || (uintptr_t)idx * s->block_size != off)
    return AA_EINVAL;
  if ((atomic_load_explicit(&s->meta[idx], AA__RLX) & AA__M_USED) == 0)
    return AA_EINVAL;
  if (!pool->has_events)
    return AA_OK;
  int rc = AA_OK;
  size_t h = (p >> 9) & (AA__RS_BUCKETS - 1);
  pthread_mutex_lock(&pool->small->rs_mu);
  aa__rsrec *r = pool->small->rs[h];
  while (r && r->p != ptr)
    r = r->next;
  if (r == NULL) {
    r = calloc(1, sizeof *r);
    if (r == NULL) {
      rc = AA_ENOMEM;
      goto out;
    }
    r->p = ptr;
    r->next = pool->small->rs[h];
    pool->small->rs[h] = r;
  }
  for (uint32_t i = 0; i < r->n; i++) {
    if (r->s[i] == stream)
      goto out;
  }
  aa_stream *v = realloc(r->s, (size_t)(r->n + 1) * sizeof *v);
  if (v == NULL) {
    rc = AA_ENOMEM;
    goto out;
  }
  r->s = v;
  r->s[r->n++] = stream;
  atomic_store_explicit(&s->meta[idx], atomic_load_explicit(&s->meta[idx], AA__RLX) | AA__M_REC,
                        AA__RLX);
out:
  pthread_mutex_unlock(&pool->small->rs_mu);
  return rc;
}

/* While a trace callback is set (with telemetry on), a use that was
 * recorded is an event 'u' (the block, the stream): the replay needs it to
 * hold the block for that stream's work after the free, as the pool does.
 * A pool whose backend has no events records nothing, so traces nothing.
 * Its number comes after the block's allocation and before its free, which
 * the caller, owning the block, has not made yet. */
int aa_record_stream(aa_pool *pool, void *ptr, aa_stream stream) {
  if (pool == NULL || ptr == NULL)
    return AA_EINVAL;
  int rc = record_stream(pool, ptr, stream);
  if (rc == AA_OK && pool->has_events &&
      AA__UNLIKELY(atomic_load_explicit(&pool->tflags, AA__RLX) ==
                   (AA__TF_TELEMETRY | AA__TF_TRACE)))
    aa__trace(pool, 'u', ptr, 0, stream);
  return rc;
}

size_t aa_block_size(aa_pool *pool, const void *ptr) {
  if (pool == NULL || ptr == NULL)
    return 0;
  uintptr_t p = (uintptr_t)ptr;
  aa__span *sp = aa__pm_lookup(&pool->map, p);
  if (sp == NULL)
    return 0;
  if (sp->kind != AA__SPAN_SLAB)
    return aa__large_block_size(pool, sp, ptr);
  aa__slab *s = (aa__slab *)sp;
  uint32_t idx = aa__slab_index(s, p - s->h.base);
  if (idx >= s->nblocks)
    return 0;
  return s->block_size;
}

bool aa_pool_owns(const aa_pool *pool, const void *ptr) {
  if (pool == NULL || ptr == NULL)
    return false;
  return aa__pm_lookup(&pool->map, (uintptr_t)ptr) != NULL;
}

int aa_block_share(aa_pool *pool, const void *ptr, aa_share_piece *pieces, size_t cap,
                   size_t *n, void **block) {
  if (n == NULL || block == NULL)
    return AA_EINVAL;
  *n = 0;
  *block = NULL;
  if (pool == NULL || ptr == NULL || (pieces == NULL && cap > 0))
    return AA_EINVAL;
  uintptr_t p = (uintptr_t)ptr;
  aa__span *sp = aa__pm_lookup(&pool->map, p);
  if (sp == NULL)
    return AA_EINVAL;
  if (sp->kind != AA__SPAN_SLAB)
    return aa__large_share(pool, sp, ptr, pieces, cap, n, block);
  /* A slab is one backend allocation: the whole of it is the one piece. */
  aa__slab *s = (aa__slab *)sp;
  uint32_t idx = aa__slab_index(s, p - s->h.base);
  if (idx >= s->nblocks ||
      (atomic_load_explicit(&s->meta[idx], AA__RLX) & AA__M_USED) == 0)
    return AA_EINVAL;
  *n = 1;
  *block = (void *)(s->h.base + (uintptr_t)idx * s->block_size);
  if (cap == 0)
    return AA_ERANGE;
  pieces[0].addr = (void *)s->h.base;
  pieces[0].size = (size_t)(s->h.end - s->h.base);
  pieces[0].handle = NULL;
  return AA_OK;
}

/* Frees record_stream records at destroy. */
void aa__rs_destroy(aa_pool *pool) {
  for (size_t i = 0; i < AA__RS_BUCKETS; i++) {
    aa__rsrec *r = pool->small->rs[i];
    while (r) {
      aa__rsrec *n = r->next;
      free(r->s);
      free(r);
      r = n;
    }
    pool->small->rs[i] = NULL;
  }
}
