/*
 * alloc.c — the small-block paths: aa_alloc, aa_free, aa_record_stream,
 * aa_block_size; thread caches (tcaches) and the thread registry; per-class
 * central free lists with stream-ordered reuse; slab carving and release.
 *
 * Fast paths (a tcache hit) take no lock and do no atomic read-modify-write:
 * the tcache is found through one initial-exec TLS pointer, counters are
 * relaxed load+store, block state is a relaxed byte store. Everything else
 * goes through the *_slow functions under the class mutex.
 */
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core_internal.h"

/* ------------------------------------------------------------ registry */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static bool g_key_ok;
static aa_pool *g_slots[AA__MAX_POOL_SLOTS];
static _Atomic uint64_t g_pool_ids;

/* This thread's cache of each pool slot (the last entry stays NULL: pools
 * without a slot). A cache whose pool was destroyed stays here, marked dead,
 * until this thread replaces or frees it. */
static _Thread_local aa__tcache *tl_tc[AA__MAX_POOL_SLOTS + 1]
    __attribute__((tls_model("initial-exec")));
static _Thread_local bool tl_keyed __attribute__((tls_model("initial-exec")));
static _Thread_local uint64_t tl_tid __attribute__((tls_model("initial-exec")));

static void thread_exit(void *arg);

static void once_init(void) { g_key_ok = pthread_key_create(&g_key, thread_exit) == 0; }

uint64_t aa__thread_id(void) {
  if (AA__UNLIKELY(tl_tid == 0))
    tl_tid = (uint64_t)syscall(SYS_gettid);
  return tl_tid;
}

void aa__slot_acquire(aa_pool *pool) {
  pthread_once(&g_once, once_init);
  pool->slot = -1;
  pool->slot_ix = AA__MAX_POOL_SLOTS;
  pool->id = atomic_fetch_add(&g_pool_ids, 1) + 1;
  if (!g_key_ok)
    return;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < AA__MAX_POOL_SLOTS; i++) {
    if (g_slots[i] == NULL) {
      g_slots[i] = pool;
      pool->slot = i;
      pool->slot_ix = i;
      break;
    }
  }
  pthread_mutex_unlock(&g_mu);
}

/* ------------------------------------------------------------ block pointers */

static inline void *blk_ptr(aa__blk b) {
  return (void *)(b.s->h.base + (uintptr_t)b.idx * b.s->block_size);
}

/* ------------------------------------------------------------ tcaches */

static uint32_t bin_limit(aa_pool *pool, aa__class *c) {
  if (atomic_load_explicit(&c->state, AA__RLX) != AA__CLS_ACTIVE)
    return 0;
  uint32_t lim = atomic_load_explicit(&c->cache_limit, AA__RLX);
  if (lim == 0)
    lim = pool->cfg.tcache_blocks;
  size_t bs = atomic_load_explicit(&c->block_size, AA__RLX);
  size_t by = pool->cfg.tcache_bytes / bs;
  if (by < lim)
    lim = (uint32_t)by;
  return lim;
}

static inline aa__blk item_blk(const aa_pool *pool, aa__bitem it) {
  aa__slab *s = aa__slab_of(pool, it.m);
  return (aa__blk){s, (uint32_t)(it.m - s->meta)};
}

static inline aa__bitem blk_item(aa__blk b) {
  return (aa__bitem){blk_ptr(b), &b.s->meta[b.idx]};
}

/* Returns the bin's blocks [0, n) to the central lists. Under c->mu. */
static void bin_flush_n(aa_pool *pool, aa__tcache *tc, aa__bin *bin, aa__class *c, uint32_t n) {
  if (n == 0)
    return;
  aa__blk tmp[64];
  for (uint32_t done = 0; done < n;) {
    uint32_t k = n - done < 64 ? n - done : 64;
    for (uint32_t i = 0; i < k; i++)
      tmp[i] = item_blk(pool, bin->items[done + i]);
    aa__central_push(pool, c, tmp, k, bin->stream);
    done += k;
  }
  memmove(bin->items, bin->items + n, (size_t)(bin->n - n) * sizeof *bin->items);
  bin->n -= n;
  tc->cached_bytes -= (size_t)n * bin->bsize;
}

/* Brings a bin in line with its class slot. Under c->mu. */
static void bin_sync(aa_pool *pool, aa__tcache *tc, aa__bin *bin, aa__class *c) {
  uint32_t gen = atomic_load_explicit(&c->gen, memory_order_acquire);
  if (bin->gen == gen)
    return;
  bin_flush_n(pool, tc, bin, c, bin->n);
  uint32_t lim = bin_limit(pool, c);
  if (lim > bin->cap) {
    aa__bitem *v = realloc(bin->items, (size_t)lim * sizeof *v);
    if (v == NULL) {
      lim = bin->cap;
    } else {
      bin->items = v;
      bin->cap = lim;
    }
  }
  bin->lim = lim;
  bin->bsize = atomic_load_explicit(&c->block_size, AA__RLX);
  bin->gen = gen;
}

static void tcache_sync(aa__tcache *tc) {
  aa_pool *pool = tc->pool;
  uint32_t ep = atomic_load_explicit(&pool->epoch, memory_order_acquire);
  tc->sc_base = 0;
  tc->sc_size = 0;
  tc->sc_slab = NULL;
  tc->sc_bin = NULL;
  for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
    aa__bin *bin = &tc->bins[k];
    aa__class *c = &pool->classes[k];
    if (bin->gen == atomic_load_explicit(&c->gen, memory_order_acquire))
      continue;
    if (bin->n > 0) {
      pthread_mutex_lock(&c->mu);
      bin_sync(pool, tc, bin, c);
      pthread_mutex_unlock(&c->mu);
    } else {
      /* empty: the fast paths check no gen, so close the bin (a free then
       * takes the slow path, whose bin_sync reopens it) */
      bin->lim = 0;
    }
  }
  tc->epoch = ep;
}

void aa__tcache_flush_all(aa__tcache *tc) {
  aa_pool *pool = tc->pool;
  aa__ltc_flush(pool, tc);
  for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
    aa__bin *bin = &tc->bins[k];
    if (bin->n == 0)
      continue;
    aa__class *c = &pool->classes[k];
    pthread_mutex_lock(&c->mu);
    bin_flush_n(pool, tc, bin, c, bin->n);
    pthread_mutex_unlock(&c->mu);
  }
}

static void fold_hh(aa_pool *pool, const aa__hh_slot *t, size_t n);
static void fold_sz(aa_pool *pool, aa__tcache *tc);

/* Folds a tcache's counters into the pool's dead-thread totals, unlinks and
 * frees it. Caller holds g_mu (or is destroying the pool); bins are empty. */
static void tcache_retire(aa__tcache *tc, bool flush) {
  aa_pool *pool = tc->pool;
  if (flush)
    aa__tcache_flush_all(tc);
  pthread_mutex_lock(&pool->tc_mu);
  fold_sz(pool, tc);
  for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
    aa__bin *b = &tc->bins[k];
    aa__ccount *d = &pool->dead[k];
    aa__cadd(&d->frees, aa__cget(&b->frees));
    aa__cadd(&d->hits, aa__cget(&b->hits));
    aa__cadd(&d->misses, aa__cget(&b->misses));
    aa__cadd(&d->req_add, aa__cget(&b->req_add));
    aa__cadd(&d->req_sub, aa__cget(&b->req_sub));
    free(b->items);
  }
  for (uint32_t i = 0; i < AA_HIST_BUCKETS; i++)
    aa__cadd(&pool->dead_hist[i], aa__cget(&tc->hist[i]));
  atomic_fetch_add_explicit(&pool->dead_large_allocs, aa__cget(&tc->large_allocs), AA__RLX);
  atomic_fetch_add_explicit(&pool->dead_large_frees, aa__cget(&tc->large_frees), AA__RLX);
  fold_hh(pool, tc->hh, AA__HH_SLOTS);
  if (tc->prev)
    tc->prev->next = tc->next;
  else
    pool->tcaches = tc->next;
  if (tc->next)
    tc->next->prev = tc->prev;
  pthread_mutex_unlock(&pool->tc_mu);
  if (flush) {
    free(tc); /* the owner is exiting */
  } else {
    /* pool destroy: the owner may still point at it */
    for (uint32_t k = 0; k < AA_MAX_CLASSES; k++) {
      tc->bins[k].items = NULL;
      tc->bins[k].n = tc->bins[k].lim = tc->bins[k].cap = 0;
    }
    tc->epoch = 0;
    tc->nlheld = 0; /* the pool's destroy took every chunk back */
    tc->lheld_bytes = 0;
    memset(tc->llive, 0, sizeof tc->llive);
    tc->pool = NULL;
    atomic_store_explicit(&tc->dead, 1, AA__RLX);
  }
}

static void thread_exit(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < AA__MAX_POOL_SLOTS; i++) {
    aa__tcache *tc = tl_tc[i];
    tl_tc[i] = NULL;
    if (tc == NULL)
      continue;
    if (atomic_load_explicit(&tc->dead, AA__RLX))
      free(tc); /* its pool is gone */
    else
      tcache_retire(tc, true);
  }
  pthread_mutex_unlock(&g_mu);
  tl_keyed = false;
}

/* The calling thread's live cache of this pool, or NULL; never makes one. */
static aa__tcache *tcache_mine(aa_pool *pool) {
  if (pool->slot < 0)
    return NULL;
  aa__tcache *tc = tl_tc[pool->slot];
  return tc && !atomic_load_explicit(&tc->dead, AA__RLX) ? tc : NULL;
}

aa__tcache *aa__tcache_get(aa_pool *pool) {
  if (pool->slot < 0)
    return NULL;
  aa__tcache *tc = tl_tc[pool->slot];
  if (tc && !atomic_load_explicit(&tc->dead, AA__RLX))
    return tc;
  if (tc) {
    /* left over from a destroyed pool that had this slot */
    pthread_mutex_lock(&g_mu);
    tl_tc[pool->slot] = NULL;
    free(tc);
    pthread_mutex_unlock(&g_mu);
  }
  if (!tl_keyed) {
    /* the key's value only makes the exit destructor run */
    if (pthread_setspecific(g_key, (void *)&tl_keyed) != 0)
      return NULL;
    tl_keyed = true;
  }
  tc = calloc(1, sizeof *tc);
  if (tc == NULL)
    return NULL;
  tc->pool = pool;
  tc->tid = aa__thread_id();
  tc->epoch = atomic_load_explicit(&pool->epoch, memory_order_acquire);
  tc->max_bytes = pool->cfg.tcache_bytes;
  tc->hh_countdown = AA__HH_SAMPLE;
  pthread_mutex_lock(&g_mu);
  pthread_mutex_lock(&pool->tc_mu);
  tc->next = pool->tcaches;
  if (pool->tcaches)
    pool->tcaches->prev = tc;
  pool->tcaches = tc;
  pthread_mutex_unlock(&pool->tc_mu);
  tl_tc[pool->slot] = tc;
  pthread_mutex_unlock(&g_mu);
  return tc;
}

/* Pool destroy: empties every tcache of the pool and marks it dead; the
 * struct itself stays until its thread replaces or frees it (another
 * thread's TLS cannot be cleared from here). Epoch 0 never matches a pool,
 * so the fast paths never use a dead cache. No flush: the slabs are about to
 * go. */
void aa__pool_drop_tcaches(aa_pool *pool) {
  pthread_mutex_lock(&g_mu);
  while (pool->tcaches) {
    aa__tcache *tc = pool->tcaches;
    for (uint32_t k = 0; k < AA_MAX_CLASSES; k++)
      tc->bins[k].n = 0;
    tcache_retire(tc, false);
  }
  if (pool->slot >= 0)
    g_slots[pool->slot] = NULL;
  pthread_mutex_unlock(&g_mu);
}

/* ------------------------------------------------------------ telemetry */

void aa__hh_add(aa__hh_slot *t, size_t nslots, uint64_t size, uint64_t count) {
  size_t mask = nslots - 1;
  size_t h = (size_t)((size * 0x9E3779B97F4A7C15ull) >> 40) & mask;
  aa__hh_slot *a = &t[h], *b = &t[h ^ 1];
  uint64_t as = aa__cget(&a->size), bs = aa__cget(&b->size);
  uint64_t ac = aa__cget(&a->count), bc = aa__cget(&b->count);
  if (as == size && ac > 0) {
    atomic_store_explicit(&a->count, ac + count, AA__RLX);
  } else if (bs == size && bc > 0) {
    atomic_store_explicit(&b->count, bc + count, AA__RLX);
  } else if (ac == 0) {
    atomic_store_explicit(&a->size, size, AA__RLX);
    atomic_store_explicit(&a->count, count, AA__RLX);
  } else if (bc == 0) {
    atomic_store_explicit(&b->size, size, AA__RLX);
    atomic_store_explicit(&b->count, count, AA__RLX);
  } else {
    /* both taken by other sizes: decay the smaller (Misra-Gries style);
     * a size that keeps coming takes the slot over */
    aa__hh_slot *m = ac <= bc ? a : b;
    uint64_t mc = ac <= bc ? ac : bc;
    if (mc <= count) {
      atomic_store_explicit(&m->size, size, AA__RLX);
      atomic_store_explicit(&m->count, count - mc + 1, AA__RLX);
    } else {
      atomic_store_explicit(&m->count, mc - count, AA__RLX);
    }
  }
}

static void fold_hh(aa_pool *pool, const aa__hh_slot *t, size_t n) {
  if (pool->dead_hh == NULL)
    return;
  for (size_t i = 0; i < n; i++) {
    uint64_t c = aa__cget(&t[i].count);
    if (c)
      aa__hh_add(pool->dead_hh, pool->dead_hh_n, aa__cget(&t[i].size), c);
  }
}

/* The size table of a dying thread into the dead totals. tc_mu held. */
static void fold_sz(aa_pool *pool, aa__tcache *tc) {
  for (uint32_t i = 0; i < AA__SZ_SLOTS; i++) {
    uint64_t w = atomic_load_explicit(&tc->sz[i], AA__RLX);
    uint64_t n = aa__run_count(w);
    if (n == 0)
      continue;
    atomic_store_explicit(&tc->sz[i], 0, AA__RLX);
    aa__cadd(&pool->dead_hist[aa__hist_bucket((size_t)aa__run_size(w))], n);
    if (pool->dead_hh)
      aa__hh_add(pool->dead_hh, pool->dead_hh_n, aa__run_size(w), n);
  }
}

/* One counter for every pool: a thread may move a block between pools'
 * traces only through the caller, and one order is simpler to merge. The
 * read-modify-writes of one atomic are totally ordered consistently with
 * happens-before, so a free's number (taken before the block is published)
 * is below that of the allocation that takes the block afterwards. */
static _Atomic uint64_t g_trace_seq;

uint64_t aa__trace_seq_next(void) {
  return atomic_fetch_add_explicit(&g_trace_seq, 1, memory_order_acq_rel) + 1;
}

void aa__trace(aa_pool *pool, char op, const void *p, size_t size, aa_stream s) {
  aa__trace_at(pool, op, p, size, s, aa__trace_seq_next());
}

void aa__trace_at(aa_pool *pool, char op, const void *p, size_t size, aa_stream s, uint64_t seq) {
  aa__trace_cb *t = atomic_load_explicit(&pool->trace, memory_order_acquire);
  if (t == NULL || t->fn == NULL)
    return;
  /* Announce the call, then check the record is still the one in force:
   * with both sides sequentially consistent, either aa_pool_set_trace sees
   * this call in flight and waits for it, or this sees the new record and
   * skips (its user may be gone once set_trace returned). */
  atomic_fetch_add_explicit(&t->inflight, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&pool->trace, memory_order_seq_cst) != t) {
    atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_release);
    return;
  }
  aa_trace_event ev;
  memset(&ev, 0, sizeof ev);
  ev.seq = seq;
  ev.time_ns = aa_now_ns();
  ev.ptr = (uint64_t)(uintptr_t)p;
  ev.size = size;
  ev.stream = (uint64_t)(uintptr_t)s;
  ev.thread = aa__thread_id();
  ev.op = op;
  t->fn(t->user, &ev);
  atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_release);
}

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
    tcache_sync(tc);
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
      bin_sync(pool, tc, bin, c);
      if (bin->n > 0 && bin->stream == stream) {
        /* e.g. the fast path was skipped for an epoch change */
        aa__bitem it = bin->items[--bin->n];
        tc->cached_bytes -= bs;
        pthread_mutex_unlock(&c->mu);
        atomic_store_explicit(it.m, AA__M_USED | (uint32_t)size, AA__RLX);
        count_alloc(pool, tc, k, size, true);
        return it.p;
      }
      bin_flush_n(pool, tc, bin, c, bin->n);
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
        atomic_fetch_add_explicit(&pool->ooms, 1, AA__RLX);
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
        bin->items[i] = blk_item(buf[i]);
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
    return blk_ptr(b);
  }
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
      p = aa__large_alloc(pool, tc, size, stream);
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
    aa__tcache *tc = tl_tc[pool->slot_ix];
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

/* ------------------------------------------------------------ free */

static void count_free(aa_pool *pool, aa__tcache *tc, uint32_t k, uint32_t rq) {
  if (tc) {
    aa__cadd(&tc->bins[k].frees, 1);
    aa__cadd(&tc->bins[k].req_sub, rq);
  } else {
    atomic_fetch_add_explicit(&pool->dead[k].frees, 1, AA__RLX);
    atomic_fetch_add_explicit(&pool->dead[k].req_sub, rq, AA__RLX);
  }
}

/* Takes the record_stream set of a small block (NULL if none). */
static aa__rsrec *rs_take(aa_pool *pool, const void *p) {
  size_t h = ((uintptr_t)p >> 9) & (AA__RS_BUCKETS - 1);
  pthread_mutex_lock(&pool->rs_mu);
  aa__rsrec **pp = &pool->rs[h];
  while (*pp && (*pp)->p != p)
    pp = &(*pp)->next;
  aa__rsrec *r = *pp;
  if (r)
    *pp = r->next;
  pthread_mutex_unlock(&pool->rs_mu);
  return r;
}

/* Records events for a freed record_stream'd block. Returns the number of
 * events (0: none needed, free as usual). *evs owned by the caller. */
static uint32_t rs_events(aa_pool *pool, aa__rsrec *r, aa_stream stream, void ***evs) {
  aa_backend *b = pool->backend;
  *evs = NULL;
  if (r == NULL || !pool->has_events)
    return 0;
  void **ev = calloc((size_t)r->n + 1, sizeof *ev);
  uint32_t n = 0;
  bool failed = ev == NULL;
  for (uint32_t i = 0; i <= r->n && !failed; i++) {
    aa_stream s = i < r->n ? r->s[i] : stream;
    if (i < r->n && s == stream)
      continue;
    if (i == r->n && n == 0)
      break; /* every extra stream was the free stream itself */
    if (b->ops->event_record(b, s, &ev[n]) == AA_OK)
      n++;
    else
      failed = true;
  }
  if (failed) {
    /* cannot track it: wait for all work instead */
    for (uint32_t i = 0; i < n; i++)
      aa__event_release(pool, ev[i]);
    free(ev);
    if (b->ops->synchronize)
      b->ops->synchronize(b);
    return 0;
  }
  if (n == 0) {
    free(ev);
    return 0;
  }
  *evs = ev;
  return n;
}

/* The thread cache is over its byte budget: return blocks of every bin,
 * round robin, half of each bin, until half the budget is free. One lock per
 * class touched, many blocks per lock, instead of one lock per free. */
static void tcache_make_room(aa_pool *pool, aa__tcache *tc) {
  size_t target = tc->max_bytes / 2;
  for (uint32_t step = 0; step < AA_MAX_CLASSES && tc->cached_bytes > target; step++) {
    uint32_t k = (tc->sweep + step) % AA_MAX_CLASSES;
    aa__bin *bin = &tc->bins[k];
    if (bin->n == 0)
      continue;
    aa__class *c = &pool->classes[k];
    pthread_mutex_lock(&c->mu);
    bin_flush_n(pool, tc, bin, c, (bin->n + 1) / 2);
    pthread_mutex_unlock(&c->mu);
  }
  tc->sweep = (tc->sweep + 7) % AA_MAX_CLASSES;
}

static int free_slow(aa_pool *pool, aa__tcache *tc, aa__blk b, aa_stream stream, bool recorded) {
  aa__class *c = &pool->classes[b.s->cls];
  if (tc && !recorded && tc->cached_bytes + b.s->block_size > tc->max_bytes &&
      b.s->block_size <= tc->max_bytes / 4)
    tcache_make_room(pool, tc);
  void **evs = NULL;
  uint32_t nev = 0;
  if (recorded) {
    aa__rsrec *r = rs_take(pool, blk_ptr(b));
    nev = rs_events(pool, r, stream, &evs);
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
    aa__bin *bin = &tc->bins[b.s->cls];
    bin_sync(pool, tc, bin, c);
    if (bin->n > 0 && bin->stream != stream)
      bin_flush_n(pool, tc, bin, c, bin->n);
    if (bin->lim > 0) {
      if (bin->n >= bin->lim)
        bin_flush_n(pool, tc, bin, c, (bin->n + 1) / 2);
      if (tc->cached_bytes + bin->bsize > pool->cfg.tcache_bytes)
        bin_flush_n(pool, tc, bin, c, bin->n);
      if (tc->cached_bytes + bin->bsize <= pool->cfg.tcache_bytes && bin->n < bin->lim) {
        bin->items[bin->n++] = blk_item(b);
        bin->stream = stream;
        tc->cached_bytes += bin->bsize;
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
    tcache_sync(tc);
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
    aa__tcache *tc = tcache_mine(pool);
    return tc != NULL && aa__ltc_free(pool, tc, ptr, size, stream)
               ? AA_OK
               : aa__large_free(pool, (aa__seg *)sp, ptr, size, stream);
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
    bin = &tc->bins[s->cls];
    tc->sc_base = s->h.base;
    tc->sc_size = s->h.end - s->h.base;
    tc->sc_slab = s;
    tc->sc_bin = bin;
  }
  uint32_t n = bin->n;
  size_t cached = tc->cached_bytes + bin->bsize;
  if (AA__UNLIKELY(!(n < bin->lim && bin->stream == stream && cached <= tc->max_bytes)))
    return free_rest(pool, ptr, size, stream);
  /* all plain loads and stores first, the atomic ones after (the compiler
   * reloads plain fields across an atomic store) */
  bin->n = n + 1;
  tc->cached_bytes = cached;
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
  aa__tcache *tc = tl_tc[pool->slot_ix];
  if (AA__UNLIKELY(tc == NULL || tc->epoch != atomic_load_explicit(&pool->epoch, AA__RLX)))
    return free_rest(pool, ptr, size, stream);
  if (AA__UNLIKELY((uintptr_t)ptr - tc->sc_base >= tc->sc_size))
    return free_lookup(pool, tc, ptr, size, stream);
  return free_in_slab(pool, tc, tc->sc_slab, tc->sc_bin, ptr, size, stream, false);
}

/* A free while a trace callback is set (with telemetry on): the sequence
 * number is taken before any path can hand the block to another thread,
 * the event is delivered once the free succeeded. */
__attribute__((noinline)) static int free_traced(aa_pool *pool, void *ptr, size_t size,
                                                 aa_stream stream) {
  uint64_t seq = aa__trace_seq_next();
  int rc = free_any(pool, ptr, size, stream);
  if (rc == AA_OK && ptr != NULL)
    aa__trace_at(pool, 'f', ptr, size, stream, seq);
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

int aa_record_stream(aa_pool *pool, void *ptr, aa_stream stream) {
  if (pool == NULL || ptr == NULL)
    return AA_EINVAL;
  uintptr_t p = (uintptr_t)ptr;
  aa__span *sp = aa__pm_lookup(&pool->map, p);
  if (sp == NULL)
    return AA_EINVAL;
  if (sp->kind != AA__SPAN_SLAB)
    return aa__large_record(pool, (aa__seg *)sp, ptr, stream);
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
  pthread_mutex_lock(&pool->rs_mu);
  aa__rsrec *r = pool->rs[h];
  while (r && r->p != ptr)
    r = r->next;
  if (r == NULL) {
    r = calloc(1, sizeof *r);
    if (r == NULL) {
      rc = AA_ENOMEM;
      goto out;
    }
    r->p = ptr;
    r->next = pool->rs[h];
    pool->rs[h] = r;
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
  pthread_mutex_unlock(&pool->rs_mu);
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
    return aa__large_block_size(pool, (aa__seg *)sp, ptr);
  aa__slab *s = (aa__slab *)sp;
  uint32_t idx = aa__slab_index(s, p - s->h.base);
  if (idx >= s->nblocks)
    return 0;
  return s->block_size;
}

/* Frees record_stream records at destroy. */
void aa__rs_destroy(aa_pool *pool) {
  if (pool->rs == NULL)
    return;
  for (size_t i = 0; i < AA__RS_BUCKETS; i++) {
    aa__rsrec *r = pool->rs[i];
    while (r) {
      aa__rsrec *n = r->next;
      free(r->s);
      free(r);
      r = n;
    }
  }
  free(pool->rs);
  pool->rs = NULL;
}

/* Flushes the calling thread's cache of this pool (aa_pool_release). */
void aa__tcache_flush_mine(aa_pool *pool) {
  aa__tcache *tc = tcache_mine(pool);
  if (tc)
    aa__tcache_flush_all(tc);
}
