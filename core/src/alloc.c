/*
 * alloc.c — the small-block allocation path: aa_alloc, its thread-cache
 * hit, the refill from the central lists (aa__small_alloc_slow), the large
 * path's entry, and counting each request (size table, heavy hitters).
 *
 * The fast path (a tcache hit) takes no lock and does no atomic
 * read-modify-write: the tcache is found through one initial-exec TLS
 * pointer, counters are relaxed load+store, block state is a relaxed byte
 * store. Everything else goes through the *_slow functions under the class
 * mutex.
 */
#include "core_internal.h"

/* ------------------------------------------------------------ request telemetry */

/* Heavy hitters: an evicted size word goes in with its count; one of a
 * single request is sampled one in AA__HH_SAMPLE (counted as AA__HH_SAMPLE),
 * which keeps sizes that never repeat cheap. */
static inline void hh_note(aa__tcache *tc, uint64_t size, uint64_t n) {
  if (n > 1) {
    aa__hh_add(tc->hh, AA__HH_SLOTS, size, n);
  } else if (--tc->hh_countdown == 0) {
    tc->hh_countdown = AA__HH_SAMPLE;
    aa__hh_add(tc->hh, AA__HH_SLOTS, size, AA__HH_SAMPLE);
  }
}

/* Replaces the size word *e by `fresh` and folds the old one into the
 * thread's histogram and heavy hitters. Owner only. The word is replaced
 * before the histogram grows, so a reader (hist first, then sz) never
 * counts a request twice; it may miss some for a moment. */
static void sz_evict(aa__tcache *tc, _Atomic uint64_t *e, uint64_t fresh) {
  uint64_t w = atomic_load_explicit(e, AA__RLX);
  atomic_store_explicit(e, fresh, memory_order_release);
  uint64_t n = aa__run_count(w);
  if (n) {
    uint64_t size = aa__run_size(w);
    _Atomic uint64_t *h = &tc->hist[aa__hist_bucket((size_t)size)];
    atomic_store_explicit(h, atomic_load_explicit(h, AA__RLX) + n, memory_order_release);
    hh_note(tc, size, n);
  }
}

/* A request whose size is not counted in its first slot h (see aa__sz_hash):
 * its count is full there, or it is in the pair slot, or it takes an empty
 * slot of the two, or it evicts the smaller count. Owner only. */
static void sz_note_slow(aa__tcache *tc, size_t h, uint64_t size) {
  _Atomic uint64_t *e = &tc->sz[h];
  uint64_t w = atomic_load_explicit(e, AA__RLX);
  uint64_t fresh = aa__run_word(size, 1);
  if (aa__run_size(w) == size) {
    sz_evict(tc, e, fresh); /* count full */
    return;
  }
  _Atomic uint64_t *f = &tc->sz[h ^ 1u];
  uint64_t v = atomic_load_explicit(f, AA__RLX);
  if (aa__run_extends(v, size))
    aa__cadd(f, 1);
  else if (aa__run_size(v) == size)
    sz_evict(tc, f, fresh);
  else if (aa__run_count(w) == 0)
    atomic_store_explicit(e, fresh, memory_order_release);
  else if (aa__run_count(v) == 0)
    atomic_store_explicit(f, fresh, memory_order_release);
  else
    sz_evict(tc, aa__run_count(w) <= aa__run_count(v) ? e : f, fresh);
}

/* Counts one request of `size` (<= AA__M_SIZE) in the size table. */
static inline void sz_note(aa__tcache *tc, size_t size) {
  size_t h = aa__sz_hash(size);
  uint64_t w = atomic_load_explicit(&tc->sz[h], AA__RLX);
  if (AA__LIKELY(aa__run_extends(w, size)))
    aa__cadd(&tc->sz[h], 1);
  else
    sz_note_slow(tc, h, size);
}

static inline void telemetry_alloc(aa_pool *pool, aa__tcache *tc, void *p, size_t size,
                                   aa_stream s) {
  if (tc && size <= AA__M_SIZE) {
    sz_note(tc, size);
  } else if (tc) {
    aa__cadd(&tc->hist[aa__hist_bucket(size)], 1);
    hh_note(tc, size, 1);
  } else {
    atomic_fetch_add_explicit(&pool->dead_hist[aa__hist_bucket(size)], 1, AA__RLX);
  }
  if (AA__UNLIKELY(atomic_load_explicit(&pool->tflags, AA__RLX) & AA__TF_TRACE))
    aa__trace(pool, 'a', p, size, s);
}

/* ------------------------------------------------------------ alloc */

static inline void mark_used(aa__blk b, size_t size) {
  atomic_store_explicit(&b.s->meta[b.idx], AA__M_USED | (uint32_t)size, AA__RLX);
}

static void count_alloc(aa_pool *pool, aa__tcache *tc, uint32_t k, size_t size, bool hit) {
  if (tc) {
    aa__bin *bin = &tc->bins[k];
    aa__cadd(hit ? &bin->hits : &bin->misses, 1);
    aa__cadd(&bin->req_add, size);
  } else {
    aa__ccount *d = &pool->dead[k];
    atomic_fetch_add_explicit(hit ? &d->hits : &d->misses, 1, AA__RLX);
    atomic_fetch_add_explicit(&d->req_add, size, AA__RLX);
  }
}

#define REFILL_MAX 128 /* blocks moved into a bin at once */

void *aa__small_alloc_slow(aa_pool *pool, size_t size, aa_stream stream) {
  aa__tcache *tc = aa__tcache_get(pool);
  bool retried = false;
  if (tc && tc->epoch != atomic_load_explicit(&pool->epoch, AA__RLX))
    aa__tcache_sync(tc);
  for (;;) {
    uint32_t k = atomic_load_explicit(&pool->size2cls[(size - 1) >> 9], memory_order_acquire);
    aa__class *c = &pool->classes[k];
    pthread_mutex_lock(&c->mu);
    if (atomic_load_explicit(&c->state, AA__RLX) != AA__CLS_ACTIVE ||
        atomic_load_explicit(&c->block_size, AA__RLX) < size) {
      /* retired under us: the table was rewritten first, look again */
      pthread_mutex_unlock(&c->mu);
      continue;
    }
    size_t bs = atomic_load_explicit(&c->block_size, AA__RLX);
    aa__bin *bin = tc ? &tc->bins[k] : NULL;
    aa__blk buf[REFILL_MAX];
    uint32_t want = 1;
    if (bin) {
      aa__bin_sync(pool, tc, bin, c);
      if (bin->n > 0 && bin->stream == stream) {
        /* e.g. the fast path was skipped for an epoch change */
        aa__bitem it = bin->items[--bin->n];
        tc->cached_bytes -= bs;
        pthread_mutex_unlock(&c->mu);
        atomic_store_explicit(it.m, AA__M_USED | (uint32_t)size, AA__RLX);
        count_alloc(pool, tc, k, size, true);
        return it.p;
      }
      aa__bin_flush_n(pool, tc, bin, c, bin->n);
      if (bin->lim > 1) {
        want = bin->lim / 2;
        size_t room = pool->cfg.tcache_bytes > tc->cached_bytes
                          ? (pool->cfg.tcache_bytes - tc->cached_bytes) / bs
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
      tc->cached_bytes += (size_t)(got - 1) * bs;
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
    p = aa__small_alloc_slow(pool, size, stream);
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
      if (tc)
        aa__cadd(&tc->hist[aa__hist_bucket(size)], 1);
      if (atomic_load_explicit(&pool->tflags, AA__RLX) & AA__TF_TRACE)
        aa__trace(pool, 'x', NULL, size, stream);
    }
  }
  return p;
}

/* A hit whose size is not in its first size-table slot (telemetry on, no
 * trace). Returns p so that aa_alloc reaches it by a tail call and keeps
 * nothing live. */
__attribute__((noinline)) static void *alloc_hit_sz_slow(aa__tcache *tc, size_t h, void *p,
                                                         size_t size) {
  sz_note_slow(tc, h, size);
  return p;
}

/* A hit while a trace callback is set: it is called with telemetry on
 * (a trace without telemetry records nothing on the hit path). */
__attribute__((noinline)) static void *alloc_hit_telemetry(aa_pool *pool, aa__tcache *tc, void *p,
                                                           size_t size, aa_stream stream) {
  uint32_t tf = atomic_load_explicit(&pool->tflags, AA__RLX);
  if (tf & AA__TF_TELEMETRY) {
    sz_note(tc, size);
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
      uint32_t k = atomic_load_explicit(&pool->size2cls[(size - 1) >> 9], AA__RLX);
      aa__bin *bin = &tc->bins[k];
      uint32_t n = bin->n;
      size_t bs = bin->bsize;
      if (AA__LIKELY(n != 0 && bin->stream == stream && size <= bs)) {
        aa__bitem it = bin->items[n - 1];
        bin->n = n - 1;
        tc->cached_bytes -= bs;
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
        size_t h = aa__sz_hash(size);
        if (AA__LIKELY(aa__run_extends_at(&tc->sz[h], size)))
          aa__cadd(&tc->sz[h], 1);
        else
          return alloc_hit_sz_slow(tc, h, p, size); /* a tail call */
        return p;
      }
    }
  }
  return alloc_slow(pool, size, stream);
}
