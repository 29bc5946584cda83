/*
 * stats.c — statistics snapshots: aa_pool_stats_get sums the per-thread
 * counters of live threads and the folded totals of dead ones
 * (aa_pool_stats_get_opts with AA_STATS_NO_SIZES: counters only, no
 * histogram or heavy hitters);
 * aa_pool_stats_json writes a snapshot as JSON by hand (docs/stats.md lists
 * every field); aa_pool_account_get splits the reserved bytes by where they
 * are (requested, rounding, slab free slots and tails, holes, stream holds,
 * thread caches); aa_hist_bucket / aa_hist_bucket_lower define the request-size
 * histogram (four buckets per doubling). Heavy hitters are merged here from
 * the per-thread exact-size tables and heavy-hitter tables.
 *
 * A snapshot holds the locks the allocation paths take (tc_mu, the large
 * path's) only to copy: the tables under tc_mu alone, then the classes'
 * counters under tc_mu, then the large path's figures (aa__large_stats_get,
 * which takes its own lock); sorting and merging come after, no lock held.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "core_internal.h"
#include "adaptalloc/internal/util.h"
#include "test_hooks.h"

/* ------------------------------------------------------------ histogram */

unsigned aa_hist_bucket(size_t size) { return aa__hist_bucket(size); }

uint64_t aa_hist_bucket_lower(unsigned bucket) {
  if (bucket >= AA_HIST_BUCKETS)
    bucket = AA_HIST_BUCKETS - 1;
  if (bucket < 4)
    return bucket;
  unsigned l = bucket / 4u + 1u, m = bucket % 4u;
  return (uint64_t)(4u + m) << (l - 2u);
}

/* ------------------------------------------------------------ sums */

typedef struct csum {
  uint64_t frees, hits, misses, req_add, req_sub;
} csum;

static void add_ccount(csum *s, const aa__ccount *c) {
  s->frees += aa__cget(&c->frees);
  s->hits += aa__cget(&c->hits);
  s->misses += aa__cget(&c->misses);
  s->req_add += aa__cget(&c->req_add);
  s->req_sub += aa__cget(&c->req_sub);
}

static void add_bin(csum *s, const aa__bin *b) {
  s->frees += aa__cget(&b->frees);
  s->hits += aa__cget(&b->hits);
  s->misses += aa__cget(&b->misses);
  s->req_add += aa__cget(&b->req_add);
  s->req_sub += aa__cget(&b->req_sub);
}

/* Per-slot sums since the slot's current class was activated. tc_mu held. */
static void slot_sums(aa_pool *pool, csum *out) {
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    memset(&out[i], 0, sizeof out[i]);
    add_ccount(&out[i], &pool->dead[i]);
  }
  for (aa__tcache *tc = pool->tcaches; tc; tc = tc->next) {
    for (int i = 0; i < AA_MAX_CLASSES; i++)
      add_bin(&out[i], &tc->bins[i]);
  }
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    const aa__cbase *b = &pool->base[i];
    out[i].frees -= b->frees;
    out[i].hits -= b->hits;
    out[i].misses -= b->misses;
    out[i].req_add -= b->req_add;
    out[i].req_sub -= b->req_sub;
  }
}

void aa__slot_rebase(aa_pool *pool, int slot) {
  csum s[AA_MAX_CLASSES];
  pthread_mutex_lock(&pool->tc_mu);
  slot_sums(pool, s);
  aa__cbase *b = &pool->base[slot];
  pool->retired.frees += s[slot].frees;
  pool->retired.hits += s[slot].hits;
  pool->retired.misses += s[slot].misses;
  pool->retired.req_add += s[slot].req_add;
  pool->retired.req_sub += s[slot].req_sub;
  b->frees += s[slot].frees;
  b->hits += s[slot].hits;
  b->misses += s[slot].misses;
  b->req_add += s[slot].req_add;
  b->req_sub += s[slot].req_sub;
  pthread_mutex_unlock(&pool->tc_mu);
}

uint64_t aa__pool_in_use(aa_pool *pool) {
  csum s[AA_MAX_CLASSES];
  uint64_t total = 0;
  pthread_mutex_lock(&pool->tc_mu);
  slot_sums(pool, s);
  pthread_mutex_unlock(&pool->tc_mu);
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->classes[i];
    if (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_EMPTY)
      continue;
    uint64_t allocs = s[i].hits + s[i].misses;
    if (allocs > s[i].frees)
      total += (allocs - s[i].frees) * atomic_load_explicit(&c->block_size, AA__RLX);
  }
  return total + aa__large_in_use(pool);
}

/* ------------------------------------------------------------ heavy hitters */

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
  size_t n = pool->dead_hh != NULL ? pool->dead_hh_n : 0;
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
    hist[i] = aa__cget(&pool->dead_hist[i]);
  if (pool->dead_hh != NULL)
    raw_hh(raw, pool->dead_hh, pool->dead_hh_n);
  for (aa__tcache *tc = pool->tcaches; tc; tc = tc->next) {
    for (int i = 0; i < AA_HIST_BUCKETS; i++)
      hist[i] += atomic_load_explicit(&tc->hist[i], memory_order_acquire);
    /* the size table (read after the histogram: see sz_evict) */
    for (uint32_t k = 0; k < AA__SZ_SLOTS; k++) {
      uint64_t w = atomic_load_explicit(&tc->sz[k], memory_order_acquire);
      if (aa__run_count(w)) {
        hist[aa_hist_bucket((size_t)aa__run_size(w))] += aa__run_count(w);
        raw_put(raw, aa__run_size(w), aa__run_count(w));
      }
    }
    raw_hh(raw, tc->hh, AA__HH_SLOTS);
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

/* ------------------------------------------------------------ snapshot */

int aa_pool_stats_get(aa_pool *pool, aa_pool_stats *out) {
  return aa_pool_stats_get_opts(pool, out, 0);
}

int aa_pool_stats_get_opts(aa_pool *pool, aa_pool_stats *out, unsigned opts) {
  if (out == NULL)
    return AA_EINVAL;
  memset(out, 0, sizeof *out);
  if (pool == NULL || (opts & ~(unsigned)AA_STATS_NO_SIZES) != 0)
    return AA_EINVAL;
  bool sizes = (opts & AA_STATS_NO_SIZES) == 0;
  csum s[AA_MAX_CLASSES];
  out->version = AA_STATS_VERSION;
  out->size = (uint32_t)sizeof *out;
  snprintf(out->name, sizeof out->name, "%s", pool->name);
  snprintf(out->backend, sizeof out->backend, "%s",
           pool->backend->name ? pool->backend->name : "custom");
  snprintf(out->region, sizeof out->region, "%s", pool->region);
  out->device = pool->backend->device;
  out->telemetry = atomic_load_explicit(&pool->telemetry, AA__RLX) ? 1 : 0;
  out->time_ns = aa_now_ns();
  out->class_table_version = atomic_load_explicit(&pool->table_version, memory_order_acquire);

  /* The histogram and the exact sizes first, under tc_mu alone; merged
   * below once no lock is held. Not at all without sizes. */
  hh_raw raw = {NULL, 0, 0};
  if (sizes)
    copy_tables(pool, out->hist, &raw);

  /* The small classes' counters under tc_mu, then the large path's
   * figures (it takes its own lock, then tc_mu). Counters only: the
   * allocating threads wait for these sections. */
  pthread_mutex_lock(&pool->tc_mu);
  slot_sums(pool, s);
  csum ret = {pool->retired.frees, pool->retired.hits, pool->retired.misses,
              pool->retired.req_add, pool->retired.req_sub};
  pthread_mutex_unlock(&pool->tc_mu);
  aa__large_stats lg;
  aa__large_stats_get(pool, false, &lg);
  out->large_allocs = lg.allocs;
  out->large_misses = lg.misses;
  out->large_settled = lg.settled;
  out->large_stream_waits = lg.stream_waits;
  out->last_oom_unix_ms = atomic_load_explicit(&pool->last_oom_ms, memory_order_relaxed);

  if (sizes)
    out->hh_count = merge_hh(&raw, out->hh);
  free(raw.v);

  uint64_t small_in_use = 0, small_req = 0;
  uint64_t allocs = ret.hits + ret.misses, frees = ret.frees;
  uint64_t hits = ret.hits, misses = ret.misses;
  uint32_t nc = 0;
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->classes[i];
    aa_class_stats cs;
    memset(&cs, 0, sizeof cs);
    pthread_mutex_lock(&c->mu);
    uint32_t state = atomic_load_explicit(&c->state, AA__RLX);
    cs.block_size = atomic_load_explicit(&c->block_size, AA__RLX);
    cs.cache_limit = atomic_load_explicit(&c->cache_limit, AA__RLX);
    cs.prefill = atomic_load_explicit(&c->prefill, AA__RLX);
    cs.retiring = state == AA__CLS_RETIRING;
    cs.slabs = c->nslabs;
    uint64_t carved = c->nslabs * c->nblocks;
    uint64_t peak_out = c->peak_out;
    out->pending_blocks += c->npending;
    pthread_mutex_unlock(&c->mu);
    cs.allocs = s[i].hits + s[i].misses;
    cs.frees = s[i].frees;
    cs.hits = s[i].hits;
    cs.misses = s[i].misses;
    allocs += cs.allocs;
    frees += cs.frees;
    hits += cs.hits;
    misses += cs.misses;
    if (state == AA__CLS_EMPTY)
      continue;
    uint64_t live = cs.allocs > cs.frees ? cs.allocs - cs.frees : 0;
    if (live > carved)
      live = carved; /* counters read while others run */
    cs.blocks_in_use = live;
    cs.blocks_free = carved - live;
    cs.bytes_in_use = live * cs.block_size;
    cs.bytes_requested = s[i].req_add > s[i].req_sub ? s[i].req_add - s[i].req_sub : 0;
    cs.bytes_reserved = cs.slabs * pool->cfg.slab_size;
    cs.peak_bytes_in_use = peak_out * cs.block_size;
    if (cs.peak_bytes_in_use < cs.bytes_in_use)
      cs.peak_bytes_in_use = cs.bytes_in_use;
    small_in_use += cs.bytes_in_use;
    small_req += cs.bytes_requested;
    /* ascending block size; a retiring class sorts before an active twin */
    uint32_t j = nc++;
    while (j > 0 && out->classes[j - 1].block_size > cs.block_size) {
      out->classes[j] = out->classes[j - 1];
      j--;
    }
    out->classes[j] = cs;
  }
  out->class_count = nc;

  out->bytes_in_use = small_in_use + lg.in_use;
  out->bytes_requested = small_req + lg.req;
  out->bytes_reserved = atomic_load(&pool->bytes_reserved);
  out->peak_bytes_in_use = atomic_load(&pool->peak_out_bytes);
  if (out->peak_bytes_in_use < out->bytes_in_use)
    out->peak_bytes_in_use = out->bytes_in_use;
  out->peak_bytes_reserved = atomic_load(&pool->peak_reserved);
  if (out->peak_bytes_reserved < out->bytes_reserved)
    out->peak_bytes_reserved = out->bytes_reserved;
  out->limit_bytes = atomic_load(&pool->limit);
  out->allocs = allocs + out->large_allocs;
  out->frees = frees + lg.frees;
  out->cache_hits = hits;
  out->cache_misses = misses;
  out->backend_allocs = atomic_load(&pool->backend_allocs);
  out->backend_frees = atomic_load(&pool->backend_frees);
  out->backend_failures = atomic_load(&pool->backend_failures);
  out->backend_ns = atomic_load(&pool->backend_ns);
  out->large_page_bytes = lg.page_bytes;
  out->ooms = atomic_load(&pool->ooms);
  out->oom_retries = atomic_load(&pool->oom_retries);
  out->invalid_frees = atomic_load(&pool->invalid_frees);
  out->large_bytes_in_use = lg.in_use;
  out->large_bytes_reserved = lg.reserved;
  out->large_segments = lg.segments;
  out->large_pages_mapped = lg.pages_mapped;
  out->large_pages_unmapped = lg.pages_unmapped;
  out->large_bytes_held = lg.held;
  out->large_held_reclaims = lg.held_reclaims;
  out->large_stitched_ranges = lg.stitched_ranges;
  out->large_stitched_bytes = lg.stitched_bytes;
  out->large_stitches = lg.stitches;
  out->large_stitch_hits = lg.stitch_hits;
  out->large_stitch_dissolved = lg.stitch_dissolved;
  out->large_stitch_dormant = lg.stitch_dormant;
  out->large_stitch_rests = lg.stitch_rests;
  out->large_stitch_wakes = lg.stitch_wakes;
  out->large_plan_state = lg.plan_state;
  out->large_plan_period = lg.plan_period;
  out->large_plan_bytes = lg.plan_bytes;
  out->large_plan_live_bytes = lg.plan_live;
  out->large_plan_hits = lg.plan_hits;
  out->large_plan_misses = lg.plan_misses;
  out->large_plans_adopted = lg.plans_adopted;
  out->large_plans_dropped = lg.plans_dropped;
  out->large_plans_refused = lg.plans_refused;
  out->large_plan_saved_bytes = lg.plan_saved;
  out->large_alias_maps = lg.alias_maps;
  out->large_alias_unmaps = lg.alias_unmaps;
  out->stream_queries = atomic_load_explicit(&pool->stream_queries, AA__RLX);
  out->stream_idle = atomic_load_explicit(&pool->stream_idle, AA__RLX);
  out->window_peak_bytes_in_use = atomic_load(&pool->win_peak_out_bytes);
  if (out->window_peak_bytes_in_use < out->bytes_in_use)
    out->window_peak_bytes_in_use = out->bytes_in_use;
  if (pool->backend->ops->residency != NULL) {
    /* no pool lock is held here: the backend asks the driver */
    aa_backend_residency r = {0, 0, 0};
    if (pool->backend->ops->residency(pool->backend, &r) == AA_OK) {
      out->managed_device_bytes = r.device_bytes;
      out->managed_host_bytes = r.host_bytes;
      out->managed_unknown_bytes = r.unknown_bytes;
    }
  }
  return AA_OK;
}

/* ------------------------------------------------------------ account */

/* Sections as aa_pool_stats_get_opts takes them: tc_mu for the classes'
 * counters, then the large path's figures with its account of the free
 * bytes (aa__large_stats_get: the threads' held blocks and the free chunks
 * read at one moment under its lock; a chunk goes free only under it, and
 * the thread caches' lock-free hits move held and live blocks, whose bytes
 * the held counters give), then each class under its mu. The small
 * blocks in threads' small caches count as free from the user's free on
 * (the counters say so), so they land in slab_free with the central lists'
 * free slots. Blocks waiting for an event (c->npending) whose event is
 * still pending when asked now land in stream_holds; those whose events
 * have completed, though the pool has not looked yet, in slab_free, as the
 * large path's chunks whose record_stream'd streams are done land in holes
 * (nothing is released or recorded: the account changes nothing). */
int aa_pool_account_get(aa_pool *pool, aa_pool_account *out) {
  if (pool == NULL || out == NULL || out->version != AA_ACCOUNT_VERSION ||
      out->size != (uint32_t)sizeof *out)
    return AA_EINVAL;
  aa_pool_account a;
  memset(&a, 0, sizeof a);
  a.version = AA_ACCOUNT_VERSION;
  a.size = (uint32_t)sizeof a;
  csum s[AA_MAX_CLASSES];

  pthread_mutex_lock(&pool->tc_mu);
  slot_sums(pool, s);
  pthread_mutex_unlock(&pool->tc_mu);
  aa__large_stats lg;
  aa__large_stats_get(pool, true, &lg);
  uint64_t lq = lg.req < lg.in_use ? lg.req : lg.in_use;
  a.requested = lq;
  a.rounding = lg.in_use - lq;
  a.holes = lg.holes;
  a.stream_holds = lg.holds;
  a.thread_caches = lg.held;

  size_t slab_size = pool->cfg.slab_size;
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->classes[i];
    pthread_mutex_lock(&c->mu);
    uint32_t state = atomic_load_explicit(&c->state, AA__RLX);
    uint64_t bs = atomic_load_explicit(&c->block_size, AA__RLX);
    uint64_t nslabs = c->nslabs, nblocks = c->nblocks;
    uint64_t pending = c->npending > 0 ? aa__central_held_now(pool, c) : 0;
    pthread_mutex_unlock(&c->mu);
    if (state == AA__CLS_EMPTY || nslabs == 0)
      continue;
    uint64_t carved = nslabs * nblocks;
    uint64_t allocs = s[i].hits + s[i].misses;
    uint64_t live = allocs > s[i].frees ? allocs - s[i].frees : 0;
    if (live > carved)
      live = carved; /* counters read while others run */
    if (pending > carved - live)
      pending = carved - live;
    uint64_t req = s[i].req_add > s[i].req_sub ? s[i].req_add - s[i].req_sub : 0;
    if (req > live * bs)
      req = live * bs;
    a.requested += req;
    a.rounding += live * bs - req;
    a.slab_free += (carved - live - pending) * bs;
    a.stream_holds += pending * bs;
    a.slab_tails += nslabs * (slab_size - nblocks * bs);
  }

  uint64_t sum = a.requested + a.rounding + a.slab_free + a.slab_tails + a.holes +
                 a.stream_holds + a.thread_caches;
  uint64_t reserved = atomic_load(&pool->bytes_reserved);
  a.other = reserved > sum ? reserved - sum : 0;
  a.bytes_reserved = sum + a.other;
  *out = a;
  return AA_OK;
}

/* ------------------------------------------------------------ JSON */

typedef struct jw {
  char *buf;
  size_t cap, len;
} jw;

static void jw_raw(jw *w, const char *s, size_t n) {
  if (w->len < w->cap) {
    size_t room = w->cap - w->len;
    memcpy(w->buf + w->len, s, n < room ? n : room);
  }
  w->len += n;
}

static void jw_fmt(jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jw_fmt(jw *w, const char *fmt, ...) {
  char tmp[128];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n > 0)
    jw_raw(w, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void jw_put(void *w, const char *s, size_t n) { jw_raw(w, s, n); }

static void jw_str(jw *w, const char *s) { aa__json_put(jw_put, w, s, strlen(s)); }

static void jw_u64(jw *w, const char *key, uint64_t v) { jw_fmt(w, ",\"%s\":%" PRIu64, key, v); }

/* ,"key":num/den with 6 decimals, or null when den is 0 (nothing counted). */
static void jw_rate(jw *w, const char *key, uint64_t num, uint64_t den) {
  if (den == 0)
    jw_fmt(w, ",\"%s\":null", key);
  else
    jw_fmt(w, ",\"%s\":%.6f", key, (double)num / (double)den);
}

size_t aa_pool_stats_json(const aa_pool_stats *st, char *buf, size_t cap) {
  jw w = {buf, cap, 0};
  if (buf == NULL)
    w.cap = 0;
  else if (cap > 0)
    w.cap = cap - 1; /* room for the NUL */
  if (st == NULL) {
    jw_raw(&w, "null", 4);
    goto done;
  }
  /* name and backend are fixed-size arrays: never read past them */
  char name[sizeof st->name + 1], backend[sizeof st->backend + 1];
  char region[sizeof st->region + 1];
  memcpy(name, st->name, sizeof st->name);
  name[sizeof st->name] = 0;
  memcpy(backend, st->backend, sizeof st->backend);
  backend[sizeof st->backend] = 0;
  memcpy(region, st->region, sizeof st->region);
  region[sizeof st->region] = 0;
  jw_fmt(&w, "{\"version\":%" PRIu32 ",\"name\":", st->version);
  jw_str(&w, name);
  jw_raw(&w, ",\"backend\":", 11);
  jw_str(&w, backend);
  if (region[0] != '\0') {
    jw_raw(&w, ",\"region\":", 10);
    jw_str(&w, region);
  } else {
    jw_raw(&w, ",\"region\":null", 14);
  }
  jw_fmt(&w, ",\"device\":%" PRId32 ",\"telemetry\":%s", st->device,
         st->telemetry ? "true" : "false");
  jw_u64(&w, "time_ns", st->time_ns);
  jw_u64(&w, "class_table_version", st->class_table_version);
  jw_u64(&w, "bytes_in_use", st->bytes_in_use);
  jw_u64(&w, "bytes_requested", st->bytes_requested);
  jw_u64(&w, "bytes_reserved", st->bytes_reserved);
  jw_u64(&w, "peak_bytes_in_use", st->peak_bytes_in_use);
  jw_u64(&w, "peak_bytes_reserved", st->peak_bytes_reserved);
  jw_u64(&w, "limit_bytes", st->limit_bytes);
  jw_u64(&w, "allocs", st->allocs);
  jw_u64(&w, "frees", st->frees);
  jw_u64(&w, "cache_hits", st->cache_hits);
  jw_u64(&w, "cache_misses", st->cache_misses);
  jw_u64(&w, "backend_allocs", st->backend_allocs);
  jw_u64(&w, "backend_frees", st->backend_frees);
  jw_u64(&w, "backend_failures", st->backend_failures);
  jw_u64(&w, "ooms", st->ooms);
  jw_u64(&w, "oom_retries", st->oom_retries);
  jw_u64(&w, "invalid_frees", st->invalid_frees);
  jw_u64(&w, "pending_blocks", st->pending_blocks);
  jw_u64(&w, "large_allocs", st->large_allocs);
  jw_u64(&w, "large_misses", st->large_misses);
  jw_u64(&w, "large_settled", st->large_settled);
  jw_u64(&w, "large_stream_waits", st->large_stream_waits);
  jw_u64(&w, "last_oom_unix_ms", st->last_oom_unix_ms);
  jw_rate(&w, "small_hit_rate", st->cache_hits, st->cache_hits + st->cache_misses);
  jw_rate(&w, "overall_hit_rate",
          st->allocs - (st->cache_misses + st->large_misses < st->allocs
                            ? st->cache_misses + st->large_misses
                            : st->allocs),
          st->allocs);
  jw_u64(&w, "large_bytes_in_use", st->large_bytes_in_use);
  jw_u64(&w, "large_bytes_reserved", st->large_bytes_reserved);
  jw_u64(&w, "large_segments", st->large_segments);
  jw_u64(&w, "window_peak_bytes_in_use", st->window_peak_bytes_in_use);
  jw_u64(&w, "large_pages_mapped", st->large_pages_mapped);
  jw_u64(&w, "large_pages_unmapped", st->large_pages_unmapped);
  jw_u64(&w, "backend_ns", st->backend_ns);
  jw_u64(&w, "large_page_bytes", st->large_page_bytes);
  jw_u64(&w, "large_bytes_held", st->large_bytes_held);
  jw_u64(&w, "large_held_reclaims", st->large_held_reclaims);
  jw_u64(&w, "large_stitched_ranges", st->large_stitched_ranges);
  jw_u64(&w, "large_stitched_bytes", st->large_stitched_bytes);
  jw_u64(&w, "large_stitches", st->large_stitches);
  jw_u64(&w, "large_stitch_hits", st->large_stitch_hits);
  jw_u64(&w, "large_stitch_dissolved", st->large_stitch_dissolved);
  jw_u64(&w, "large_stitch_dormant", st->large_stitch_dormant);
  jw_u64(&w, "large_stitch_rests", st->large_stitch_rests);
  jw_u64(&w, "large_stitch_wakes", st->large_stitch_wakes);
  jw_u64(&w, "large_plan_state", st->large_plan_state);
  jw_u64(&w, "large_plan_period", st->large_plan_period);
  jw_u64(&w, "large_plan_bytes", st->large_plan_bytes);
  jw_u64(&w, "large_plan_live_bytes", st->large_plan_live_bytes);
  jw_u64(&w, "large_plan_hits", st->large_plan_hits);
  jw_u64(&w, "large_plan_misses", st->large_plan_misses);
  jw_u64(&w, "large_plans_adopted", st->large_plans_adopted);
  jw_u64(&w, "large_plans_dropped", st->large_plans_dropped);
  jw_u64(&w, "large_plans_refused", st->large_plans_refused);
  jw_u64(&w, "large_plan_saved_bytes", st->large_plan_saved_bytes);
  jw_u64(&w, "large_alias_maps", st->large_alias_maps);
  jw_u64(&w, "large_alias_unmaps", st->large_alias_unmaps);
  jw_u64(&w, "stream_queries", st->stream_queries);
  jw_u64(&w, "stream_idle", st->stream_idle);
  jw_u64(&w, "managed_device_bytes", st->managed_device_bytes);
  jw_u64(&w, "managed_host_bytes", st->managed_host_bytes);
  jw_u64(&w, "managed_unknown_bytes", st->managed_unknown_bytes);
  uint32_t nc = st->class_count < AA_MAX_CLASSES ? st->class_count : AA_MAX_CLASSES;
  jw_fmt(&w, ",\"class_count\":%" PRIu32 ",\"classes\":[", nc);
  for (uint32_t i = 0; i < nc; i++) {
    const aa_class_stats *c = &st->classes[i];
    jw_fmt(&w, "%s{\"block_size\":%" PRIu64, i ? "," : "", c->block_size);
    jw_u64(&w, "cache_limit", c->cache_limit);
    jw_u64(&w, "prefill", c->prefill);
    jw_fmt(&w, ",\"retiring\":%s", c->retiring ? "true" : "false");
    jw_u64(&w, "slabs", c->slabs);
    jw_u64(&w, "blocks_in_use", c->blocks_in_use);
    jw_u64(&w, "blocks_free", c->blocks_free);
    jw_u64(&w, "bytes_in_use", c->bytes_in_use);
    jw_u64(&w, "bytes_requested", c->bytes_requested);
    jw_u64(&w, "bytes_reserved", c->bytes_reserved);
    jw_u64(&w, "peak_bytes_in_use", c->peak_bytes_in_use);
    jw_u64(&w, "allocs", c->allocs);
    jw_u64(&w, "frees", c->frees);
    jw_u64(&w, "hits", c->hits);
    jw_u64(&w, "misses", c->misses);
    jw_raw(&w, "}", 1);
  }
  jw_raw(&w, "],\"hist\":[", 10);
  bool first = true;
  for (unsigned i = 0; i < AA_HIST_BUCKETS; i++) {
    if (st->hist[i] == 0)
      continue;
    jw_fmt(&w, "%s{\"bucket\":%u,\"lower\":%" PRIu64 ",\"count\":%" PRIu64 "}", first ? "" : ",",
           i, aa_hist_bucket_lower(i), st->hist[i]);
    first = false;
  }
  uint32_t nh = st->hh_count < AA_HH_MAX ? st->hh_count : AA_HH_MAX;
  jw_raw(&w, "],\"hh\":[", 8);
  for (uint32_t i = 0; i < nh; i++) {
    jw_fmt(&w, "%s{\"size\":%" PRIu64 ",\"count\":%" PRIu64 "}", i ? "," : "", st->hh[i].size,
           st->hh[i].count);
  }
  jw_raw(&w, "]}", 2);
done:
  if (buf != NULL && cap > 0)
    buf[w.len < w.cap ? w.len : w.cap] = 0;
  return w.len;
}
