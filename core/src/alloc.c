/*
 * alloc.c — the small path's allocation: aa_alloc, its thread-cache hit, the
 * refill from the central lists (small_alloc_slow); requests above
 * max_small go to the large path (large.h), and each request is counted by
 * the size sampler (sampler.h: its hot count inline).
 *
 * The fast path (a tcache hit) takes no lock and does no atomic
 * read-modify-write: the tcache is found through one initial-exec TLS
 * pointer, counters are relaxed load+store, block state is a relaxed byte
 * store. Everything else goes through the *_slow functions under the class
 * mutex.
 */
#include "small_internal.h"

/* ------------------------------------------------------------ request telemetry */

static inline void telemetry_alloc(aa_pool *pool, aa__tcache *tc, void *p, size_t size,
                                   aa_stream s) {
  aa__smp_count(pool, tc, size);
  if (AA__UNLIKELY(atomic_load_explicit(&pool->tflags, AA__RLX) & AA__TF_TRACE))
    aa__trace(pool, 'a', p, size, s);
}

/* ------------------------------------------------------------ alloc */

static inline void mark_used(aa__blk b, size_t size) {
  atomic_store_explicit(&b.s->meta[b.idx], AA__M_USED | (uint32_t)size, AA__RLX);
}

static void count_alloc(aa_pool *pool, aa__tcache *tc, uint32_t k, size_t size, bool hit) {
  if (tc) {
    aa__bin *bin = &tc->stc.bins[k];
    aa__cadd(hit ? &bin->hits : &bin->misses, 1);
    aa__cadd(&bin->req_add, size);
  } else {
    aa__ccount *d = &pool->small->dead[k];
    atomic_fetch_add_explicit(hit ? &d->hits : &d->misses, 1, AA__RLX);
    atomic_fetch_add_explicit(&d->req_add, size, AA__RLX);
  }
}

#define REFILL_MAX 128 /* blocks moved into a bin at once */

static void *small_alloc_slow(aa_pool *pool, size_t size, aa_stream stream) {
  aa__tcache *tc = aa__tcache_get(pool);
  bool retried = false;
  if (tc && tc->epoch != atomic_load_explicit(&pool->epoch, AA__RLX))
    aa__tcache_sync(tc);
  for (;;) {
    uint32_t k =
        atomic_load_explicit(&pool->small->size2cls[(size - 1) >> 9], memory_order_acquire);
    aa__class *c = &pool->small->classes[k];
    pthread_mutex_lock(&c->mu);
    if (atomic_load_explicit(&c->state, AA__RLX) != AA__CLS_ACTIVE ||
        atomic_load_explicit(&c->block_size, AA__RLX) < size) {
      /* retired under us: the table was rewritten first, look again */
      pthread_mutex_unlock(&c->mu);
      continue;
    }
    size_t bs = atomic_load_explicit(&c->block_size, AA__RLX);
    aa__bin *bin = tc ? &tc->stc.bins[k] : NULL;
    aa__blk buf[REFILL_MAX];
    uint32_t want = 1;
    if (bin) {
      aa__bin_sync(pool, tc, bin, c);
      if (bin->n > 0 && bin->stream == stream) {
        /* e.g. the fast path was skipped for an epoch change */
        aa__bitem it = bin->items[--bin->n];
        tc->stc.cached_bytes -= bs;
        pthread_mutex_unlock(&c->mu);
        atomic_store_explicit(it.m, AA__M_USED | (uint32_t)size, AA__RLX);
        count_alloc(pool, tc, k, size, true);
        return it.p;
      }
      aa__bin_flush_n(pool, tc, bin, c, bin->n);
      if (bin->lim > 1) {
        want = bin->lim / 2;
        size_t room = pool->cfg.tcache_bytes > tc->stc.cached_bytes
                          ? (pool->cfg.tcache_bytes - tc->stc.cached_bytes) / bs
                          : 0;
        if (want > room + 1)
          want = (uint32_t)room + 1;
        if (want > REFILL_MAX)
          want = REFILL_MAX;
        if (want < 1)
          want = 1;
      }
    }
    bool hit = true;
    uint32_t got = aa__central_pop(pool, c, stream, buf, want);
    if (got == 0) {
      hit = false;
      int rc = aa__carve(pool, c);
      if (rc != AA_OK) {
        pthread_mutex_unlock(&c->mu);
        if (aa__oom_retry(pool, &retried))
          continue;
        aa__oom_fail(pool, size, stream);
        return NULL;
      }
      got = aa__central_pop(pool, c, stream, buf, want);
      aa__assert(got > 0);
    }
    uint64_t out = c->nslabs * c->nblocks - c->nfree;
    if (out > c->peak_out)
      c->peak_out = out;
    uint32_t pf = atomic_load_explicit(&c->prefill, AA__RLX);
    if (pf && c->nfree - c->npending < pf)
      (void)aa__carve(pool, c); /* best effort: keep `prefill` blocks ahead */
    aa__blk b = buf[got - 1];
    if (got > 1) {
      for (uint32_t i = 0; i + 1 < got; i++)
        bin->items[i] = aa__blk_item(buf[i]);
      bin->n = got - 1;
      bin->stream = stream;
      tc->stc.cached_bytes += (size_t)(got - 1) * bs;
    }
    pthread_mutex_unlock(&c->mu);
    uint64_t ob = atomic_fetch_add_explicit(&pool->out_bytes, (uint64_t)got * bs, AA__RLX) +
                  (uint64_t)got * bs;
    aa__atomic_max(&pool->peak_out_bytes, ob);
    aa__atomic_max(&pool->win_peak_out_bytes, ob);
    mark_used(b, size);
    count_alloc(pool, tc, k, size, hit);
    return aa__blk_ptr(b);
  }
}

/* The large path with the out-of-memory retry: when a backend call refused,
 * the pool releases what it caches and the request runs once more. */
static void *large_alloc(aa_pool *pool, aa__tcache *tc, size_t size, aa_stream stream) {
  bool retry = false, retried = false;
  void *p = aa__large_alloc(pool, tc, size, stream, &retry);
  if (p == NULL && retry && aa__oom_retry(pool, &retried))
    p = aa__large_alloc(pool, tc, size, stream, &retry);
  if (p == NULL)
    aa__oom_fail(pool, size, stream);
  return p;
}

/* Everything but a thread-cache hit: NULL pool, size 0, the large path, a
 * miss; then telemetry. */
__attribute__((noinline)) static void *alloc_slow(aa_pool *pool, size_t size, aa_stream stream) {
  void *p = NULL;
  aa__tcache *tc = NULL;
  if (pool == NULL)
    return NULL;
  if (size == 0)
    size = 1;
  if (size <= pool->cfg.max_small) {
    p = small_alloc_slow(pool, size, stream);
  } else {
    tc = aa__tcache_get(pool);
    if (tc != NULL && pool->cfg.large_mode != AA_LARGE_PASSTHROUGH)
      p = aa__ltc_alloc(pool, tc, size, stream);
    if (p == NULL)
      p = large_alloc(pool, tc, size, stream);
  }
  if (atomic_load_explicit(&pool->tflags, AA__RLX) & AA__TF_TELEMETRY) {
    if (tc == NULL)
      tc = aa__tcache_get(pool);
    if (p) {
      telemetry_alloc(pool, tc, p, size, stream);
    } else {
      aa__smp_count_failed(tc, size);
      if (atomic_load_explicit(&pool->tflags, AA__RLX) & AA__TF_TRACE)
        aa__trace(pool, 'x', NULL, size, stream);
    }
  }
  return p;
}

/* A hit whose size is not in its first size-table slot (telemetry on, no
 * trace). Returns p so that aa_alloc reaches it by a tail call and keeps
 * nothing live. */
__attribute__((noinline)) static void *alloc_hit_sz_slow(aa__tcache *tc, void *p, size_t size) {
  aa__smp_note(tc, size);
  return p;
}

/* A hit while a trace callback is set: it is called with telemetry on
 * (a trace without telemetry records nothing on the hit path). */
__attribute__((noinline)) static void *alloc_hit_telemetry(aa_pool *pool, aa__tcache *tc, void *p,
                                                           size_t size, aa_stream stream) {
  uint32_t tf = atomic_load_explicit(&pool->tflags, AA__RLX);
  if (tf & AA__TF_TELEMETRY) {
    aa__smp_note(tc, size);
    if (tf & AA__TF_TRACE)
      aa__trace(pool, 'a', p, size, stream);
  }
  return p;
}

void *aa_alloc(aa_pool *pool, size_t size, aa_stream stream) {
  /* size - 1 wraps for 0, which takes the slow path */
  if (AA__LIKELY(pool != NULL && size - 1 < pool->cfg.max_small)) {
    aa__tcache *tc = aa__tl_tc[pool->slot_ix];
    if (AA__LIKELY(tc != NULL && tc->epoch == atomic_load_explicit(&pool->epoch, AA__RLX))) {
      uint32_t k = atomic_load_explicit(&pool->small->size2cls[(size - 1) >> 9], AA__RLX);
      aa__bin *bin = &tc->stc.bins[k];
      uint32_t n = bin->n;
      size_t bs = bin->bsize;
      if (AA__LIKELY(n != 0 && bin->stream == stream && size <= bs)) {
        aa__bitem it = bin->items[n - 1];
        bin->n = n - 1;
        tc->stc.cached_bytes -= bs;
        aa__cadd(&bin->hits, 1);
        aa__cadd(&bin->req_add, size);
        atomic_store_explicit(it.m, AA__M_USED | (uint32_t)size, AA__RLX);
        void *p = it.p;
        /* one subtract, two branches on its flags: tflags 0 = off,
         * 1 = telemetry, more = a trace callback is set */
        int tf = (int)atomic_load_explicit(&pool->tflags, AA__RLX) - AA__TF_TELEMETRY;
        if (AA__LIKELY(tf < 0))
          return p;
        if (AA__UNLIKELY(tf != 0))
          return alloc_hit_telemetry(pool, tc, p, size, stream);
        /* the common case: the size already counted in its first slot */
        if (AA__LIKELY(aa__smp_hit(tc, size)))
          return p;
        return alloc_hit_sz_slow(tc, p, size); /* a tail call */
      }
    }
  }
  return alloc_slow(pool, size, stream);
}
