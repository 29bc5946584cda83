/*
 * sampler.c — the size sampler: what telemetry counts of each request's
 * size. Per thread (aa__smp, first in each thread cache) an exact-size
 * table of size words, a histogram of what it evicts and of sizes too large
 * for it, and a heavy-hitter table; per pool (struct aa__sampler) the totals
 * of threads that went. Its stats call (aa__sampler_stats_get) copies the
 * tables under tc_mu and merges the heavy hitters with no lock held.
 *
 * The hot path's count is inline in sampler.h (aa__smp_hit); the rest is
 * here: aa__smp_note (the table's slow cases), aa__smp_count, the folding of
 * a thread that goes, the stats call.
 */
#include <string.h>

#include "sampler_internal.h"
#include "test_hooks.h"

/* ------------------------------------------------------------ heavy hitters */

static void hh_add(aa__hh_slot *t, size_t nslots, uint64_t size, uint64_t count) {
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

/* Heavy hitters: an evicted size word goes in with its count; one of a
 * single request is sampled one in AA__HH_SAMPLE (counted as AA__HH_SAMPLE),
 * which keeps sizes that never repeat cheap. */
static inline void hh_note(aa__smp *s, uint64_t size, uint64_t n) {
  if (n > 1) {
    hh_add(s->hitters, AA__HH_SLOTS, size, n);
  } else if (--s->countdown == 0) {
    s->countdown = AA__HH_SAMPLE;
    hh_add(s->hitters, AA__HH_SLOTS, size, AA__HH_SAMPLE);
  }
}

/* ------------------------------------------------------------ the size table */

/* Replaces the size word *e by `fresh` and folds the old one into the
 * thread's histogram and heavy hitters. Owner only. The word is replaced
 * before the histogram grows, so a reader (bucket first, then runs) never
 * counts a request twice; it may miss some for a moment. */
static void sz_evict(aa__smp *s, _Atomic uint64_t *e, uint64_t fresh) {
  uint64_t w = atomic_load_explicit(e, AA__RLX);
  atomic_store_explicit(e, fresh, memory_order_release);
  uint64_t n = aa__run_count(w);
  if (n) {
    uint64_t size = aa__run_size(w);
    _Atomic uint64_t *h = &s->bucket[aa__hist_bucket((size_t)size)];
    atomic_store_explicit(h, atomic_load_explicit(h, AA__RLX) + n, memory_order_release);
    hh_note(s, size, n);
  }
}

/* A request whose size is not counted in its first slot h (see aa__sz_hash):
 * its count is full there, or it is in the pair slot, or it takes an empty
 * slot of the two, or it evicts the smaller count. Owner only. */
static void sz_note_slow(aa__smp *s, size_t h, uint64_t size) {
  _Atomic uint64_t *e = &s->runs[h];
  uint64_t w = atomic_load_explicit(e, AA__RLX);
  uint64_t fresh = aa__run_word(size, 1);
  if (aa__run_size(w) == size) {
    sz_evict(s, e, fresh); /* count full */
    return;
  }
  _Atomic uint64_t *f = &s->runs[h ^ 1u];
  uint64_t v = atomic_load_explicit(f, AA__RLX);
  if (aa__run_extends(v, size))
    aa__cadd(f, 1);
  else if (aa__run_size(v) == size)
    sz_evict(s, f, fresh);
  else if (aa__run_count(w) == 0)
    atomic_store_explicit(e, fresh, memory_order_release);
  else if (aa__run_count(v) == 0)
    atomic_store_explicit(f, fresh, memory_order_release);
  else
    sz_evict(s, aa__run_count(w) <= aa__run_count(v) ? e : f, fresh);
}

void aa__smp_note(aa__tcache *tc, size_t size) {
  aa__smp *s = aa__smp_of(tc);
  size_t h = aa__sz_hash(size);
  uint64_t w = atomic_load_explicit(&s->runs[h], AA__RLX);
  if (AA__LIKELY(aa__run_extends(w, size)))
    aa__cadd(&s->runs[h], 1);
  else
    sz_note_slow(s, h, size);
}

void aa__smp_count(aa_pool *pool, aa__tcache *tc, size_t size) {
  if (tc && size <= AA__SMP_RUN_SIZE_MAX) {
    aa__smp_note(tc, size);
  } else if (tc) {
    aa__smp *s = aa__smp_of(tc);
    aa__cadd(&s->bucket[aa__hist_bucket(size)], 1);
    hh_note(s, size, 1);
  } else {
    atomic_fetch_add_explicit(&pool->sampler->dead_hist[aa__hist_bucket(size)], 1, AA__RLX);
  }
}

void aa__smp_count_failed(aa__tcache *tc, size_t size) {
  if (tc)
    aa__cadd(&aa__smp_of(tc)->bucket[aa__hist_bucket(size)], 1);
}

/* ------------------------------------------------------------ threads */

void aa__smp_init(aa__tcache *tc) { aa__smp_of(tc)->countdown = AA__HH_SAMPLE; }

/* The size table, histogram and heavy hitters of a thread that goes into the
 * pool's totals. tc_mu held. */
void aa__smp_fold_dead(aa_pool *pool, aa__tcache *tc) {
  aa__sampler *d = pool->sampler;
  aa__smp *s = aa__smp_of(tc);
  for (uint32_t i = 0; i < AA__SZ_SLOTS; i++) {
    uint64_t w = atomic_load_explicit(&s->runs[i], AA__RLX);
    uint64_t n = aa__run_count(w);
    if (n == 0)
      continue;
    atomic_store_explicit(&s->runs[i], 0, AA__RLX);
    aa__cadd(&d->dead_hist[aa__hist_bucket((size_t)aa__run_size(w))], n);
    hh_add(d->dead_hh, AA__DEAD_HH_SLOTS, aa__run_size(w), n);
  }
  for (uint32_t i = 0; i < AA_HIST_BUCKETS; i++)
    aa__cadd(&d->dead_hist[i], aa__cget(&s->bucket[i]));
  for (size_t i = 0; i < AA__HH_SLOTS; i++) {
    uint64_t c = aa__cget(&s->hitters[i].count);
    if (c)
      hh_add(d->dead_hh, AA__DEAD_HH_SLOTS, aa__cget(&s->hitters[i].size), c);
  }
}

/* ------------------------------------------------------------ life cycle */

int aa__sampler_new(aa_pool *pool) {
  pool->sampler = calloc(1, sizeof *pool->sampler);
  return pool->sampler != NULL ? AA_OK : AA_ENOMEM;
}

void aa__sampler_destroy(aa_pool *pool) {
  free(pool->sampler);
  pool->sampler = NULL;
}

/* ------------------------------------------------------------ stats */

static int cmp_size(const void *a, const void *b) {
  uint64_t x = ((const aa_size_count *)a)->size, y = ((const aa_size_count *)b)->size;
  return x < y ? -1 : x > y;
}

static int cmp_count_desc(const void *a, const void *b) {
  const aa_size_count *x = a, *y = b;
  if (x->count != y->count)
    return x->count > y->count ? -1 : 1;
  return x->size < y->size ? -1 : x->size > y->size;
}

/* The exact-size entries a snapshot copies under tc_mu (the dead threads'
 * table, each live thread's heavy hitters and size table) and merges once no
 * lock is held: sorting them takes about a millisecond per thread, which an
 * allocating thread must never wait for. */
typedef struct hh_raw {
  aa_size_count *v;
  size_t n, cap;
} hh_raw;

#define HH_PER_THREAD ((size_t)AA__HH_SLOTS + AA__SZ_SLOTS)

static void raw_put(hh_raw *r, uint64_t size, uint64_t count) {
  if (r->n < r->cap) {
    r->v[r->n].size = size;
    r->v[r->n].count = count;
    r->n++;
  }
}

static void raw_hh(hh_raw *r, const aa__hh_slot *t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint64_t c = aa__cget(&t[i].count);
    if (c)
      raw_put(r, aa__cget(&t[i].size), c);
  }
}

/* Entries a copy of the tables may need now. tc_mu held. */
static size_t raw_need(const aa_pool *pool) {
  size_t n = AA__DEAD_HH_SLOTS;
  for (const aa__tcache *tc = pool->tcaches; tc; tc = tc->next)
    n += HH_PER_THREAD;
  return n;
}

/* Copies the request histogram (every live thread's, its size table folded
 * in, and the dead threads') into hist and the exact-size entries into *raw,
 * under tc_mu alone (it keeps the threads' tables alive). The buffer is
 * allocated with no lock held and sized again should threads have come in
 * meanwhile; after three tries (or without memory) what does not fit is left
 * out of the heavy hitters only, never out of the histogram. */
static void copy_tables(aa_pool *pool, uint64_t *hist, hh_raw *raw) {
  bool locked = false;
  for (int round = 0; round < 3 && !locked; round++) {
    pthread_mutex_lock(&pool->tc_mu);
    size_t need = raw_need(pool);
    if (need <= raw->cap) {
      locked = true;
      break;
    }
    pthread_mutex_unlock(&pool->tc_mu);
    free(raw->v);
    raw->cap = need + 4 * HH_PER_THREAD; /* a few threads may register meanwhile */
    raw->v = malloc(raw->cap * sizeof *raw->v);
    if (raw->v == NULL)
      raw->cap = 0;
  }
  if (!locked)
    pthread_mutex_lock(&pool->tc_mu);
  for (int i = 0; i < AA_HIST_BUCKETS; i++)
    hist[i] = aa__cget(&pool->sampler->dead_hist[i]);
  raw_hh(raw, pool->sampler->dead_hh, AA__DEAD_HH_SLOTS);
  for (aa__tcache *tc = pool->tcaches; tc; tc = tc->next) {
    aa__smp *s = aa__smp_of(tc);
    for (int i = 0; i < AA_HIST_BUCKETS; i++)
      hist[i] += atomic_load_explicit(&s->bucket[i], memory_order_acquire);
    /* the size table (read after the histogram: see sz_evict) */
    for (uint32_t k = 0; k < AA__SZ_SLOTS; k++) {
      uint64_t w = atomic_load_explicit(&s->runs[k], memory_order_acquire);
      if (aa__run_count(w)) {
        hist[aa__hist_bucket((size_t)aa__run_size(w))] += aa__run_count(w);
        raw_put(raw, aa__run_size(w), aa__run_count(w));
      }
    }
    raw_hh(raw, s->hitters, AA__HH_SLOTS);
  }
  pthread_mutex_unlock(&pool->tc_mu);
}

/* Test hook (test_hooks.h): called between the copy of the tables and their
 * merge, with no lock held. */
static void (*_Atomic g_merge_hook)(void *user);
static void *_Atomic g_merge_hook_user;

void aa_test_stats_merge_hook(void (*fn)(void *user), void *user) {
  atomic_store(&g_merge_hook_user, user);
  atomic_store(&g_merge_hook, fn);
}

/* The heaviest AA_HH_MAX exact sizes of raw (one entry per size, counts
 * summed) into out; sorts raw in place. No lock held. */
static uint32_t merge_hh(hh_raw *raw, aa_size_count *out) {
  void (*hook)(void *) = atomic_load(&g_merge_hook);
  if (hook != NULL)
    hook(atomic_load(&g_merge_hook_user));
  aa_size_count *v = raw->v;
  size_t k = raw->n;
  if (k == 0)
    return 0;
  qsort(v, k, sizeof *v, cmp_size);
  size_t m = 0;
  for (size_t i = 0; i < k; i++) {
    if (m > 0 && v[m - 1].size == v[i].size)
      v[m - 1].count += v[i].count;
    else
      v[m++] = v[i];
  }
  qsort(v, m, sizeof *v, cmp_count_desc);
  uint32_t n = (uint32_t)(m < AA_HH_MAX ? m : AA_HH_MAX);
  memcpy(out, v, n * sizeof *v);
  return n;
}

void aa__sampler_stats_get(aa_pool *pool, uint64_t *hist, aa_size_count *hh, uint32_t *hh_count) {
  hh_raw raw = {NULL, 0, 0};
  copy_tables(pool, hist, &raw);
  *hh_count = merge_hh(&raw, hh);
  free(raw.v);
}
