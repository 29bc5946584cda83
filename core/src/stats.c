/*
 * stats.c — statistics snapshots: aa_pool_stats_get sums the per-thread
 * counters of live threads and the folded totals of dead ones
 * (aa_pool_stats_get_opts with AA_STATS_NO_SIZES: counters only, no
 * histogram or heavy hitters);
 * aa_pool_stats_json writes a snapshot as JSON by hand (docs/stats.md lists
 * every field); aa_pool_account_get splits the reserved bytes by where they
 * are (requested, rounding, slab free slots and tails, holes, stream holds,
 * thread caches); aa_hist_bucket / aa_hist_bucket_lower define the request-size
 * histogram (four buckets per doubling).
 *
 * Every figure comes from a subsystem's own stats call, each under its own
 * locks, held only to copy: the size sampler's tables
 * (aa__sampler_stats_get: copied under tc_mu alone, merged with no lock
 * held), the small path's counters and classes (aa__small_stats_get), the
 * large path's (aa__large_stats_get); the pool's own counters are atomics.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <string.h>

#include "core_internal.h"
#include "adaptalloc/internal/util.h"

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
  out->version = AA_STATS_VERSION;
  out->size = (uint32_t)sizeof *out;
  snprintf(out->name, sizeof out->name, "%s", pool->name);
  snprintf(out->backend, sizeof out->backend, "%s",
           pool->backend->name ? pool->backend->name : "custom");
  snprintf(out->region, sizeof out->region, "%s", pool->region);
  out->device = pool->backend->device;
  out->telemetry = atomic_load_explicit(&pool->telemetry, AA__RLX) ? 1 : 0;
  out->time_ns = aa_now_ns();

  /* The histogram and the exact sizes first (the sampler copies them under
   * tc_mu alone and merges them with no lock held). Not at all without
   * sizes. */
  if (sizes)
    aa__sampler_stats_get(pool, out->hist, out->hh, &out->hh_count);

  /* Then each subsystem's figures, each read under its own locks. */
  aa__small_stats small, *sm = &small;
  aa__small_stats_get(pool, false, sm);
  aa__large_stats lg;
  aa__large_stats_get(pool, false, &lg);
  out->class_table_version = sm->table_version;
  out->large_allocs = lg.allocs;
  out->large_misses = lg.misses;
  out->large_settled = lg.settled;
  out->large_stream_waits = lg.stream_waits;
  out->last_oom_unix_ms = atomic_load_explicit(&pool->last_oom_ms, memory_order_relaxed);
  out->class_count = sm->nclasses;
  memcpy(out->classes, sm->classes, sm->nclasses * sizeof sm->classes[0]);
  out->pending_blocks = sm->pending;

  out->bytes_in_use = sm->in_use + lg.in_use;
  out->bytes_requested = sm->req + lg.req;
  out->bytes_reserved = atomic_load(&pool->bytes_reserved);
  out->peak_bytes_in_use = atomic_load(&pool->peak_out_bytes);
  if (out->peak_bytes_in_use < out->bytes_in_use)
    out->peak_bytes_in_use = out->bytes_in_use;
  out->peak_bytes_reserved = atomic_load(&pool->peak_reserved);
  if (out->peak_bytes_reserved < out->bytes_reserved)
    out->peak_bytes_reserved = out->bytes_reserved;
  out->limit_bytes = atomic_load(&pool->limit);
  out->allocs = sm->allocs + lg.allocs;
  out->frees = sm->frees + lg.frees;
  out->cache_hits = sm->hits;
  out->cache_misses = sm->misses;
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
  out->large_plan_ns = lg.plan_ns;
  out->large_plan_stall_max_ns = lg.plan_stall_ns;
  out->large_plans_inline = lg.plans_inline;
  out->large_plans_stale = lg.plans_stale;
  out->large_alias_maps = lg.alias_maps;
  out->large_alias_unmaps = lg.alias_unmaps;
  out->large_alias_runs = lg.alias_runs;
  out->large_stitch_new_bytes = lg.stitch_new_bytes;
  out->large_alias_ns = lg.alias_ns;
  out->large_stitch_deferred = lg.stitch_deferred;
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

/* Sections as aa_pool_stats_get_opts takes them: the small path's part
 * (aa__small_stats_get: its counters under tc_mu, then each class under its
 * mu), then the large path's figures with its account of the free bytes
 * (aa__large_stats_get: the threads' held blocks and the free chunks read at
 * one moment under its lock; a chunk goes free only under it, and the
 * thread caches' lock-free hits move held and live blocks, whose bytes the
 * held counters give). The small blocks in threads' small caches count as
 * free from the user's free on (the counters say so), so they land in
 * slab_free with the central lists' free slots. Blocks waiting for an event
 * whose event is still pending when asked now land in stream_holds; those
 * whose events have completed, though the pool has not looked yet, in
 * slab_free, as the large path's chunks whose record_stream'd streams are
 * done land in holes (nothing is released or recorded: the account changes
 * nothing). */
int aa_pool_account_get(aa_pool *pool, aa_pool_account *out) {
  if (pool == NULL || out == NULL || out->version != AA_ACCOUNT_VERSION ||
      out->size != (uint32_t)sizeof *out)
    return AA_EINVAL;
  aa_pool_account a;
  memset(&a, 0, sizeof a);
  a.version = AA_ACCOUNT_VERSION;
  a.size = (uint32_t)sizeof a;

  /* the small path's part, then the large path's (each under its locks) */
  aa__small_stats small, *sm = &small;
  aa__small_stats_get(pool, true, sm);
  a.requested = sm->acc_requested;
  a.rounding = sm->acc_rounding;
  a.slab_free = sm->acc_slab_free;
  a.stream_holds = sm->acc_holds;
  a.slab_tails = sm->acc_tails;
  aa__large_stats lg;
  aa__large_stats_get(pool, true, &lg);
  uint64_t lq = lg.req < lg.in_use ? lg.req : lg.in_use;
  a.requested += lq;
  a.rounding += lg.in_use - lq;
  a.holes = lg.holes;
  a.stream_holds += lg.holds;
  a.thread_caches = lg.held;

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
  jw_u64(&w, "large_plan_ns", st->large_plan_ns);
  jw_u64(&w, "large_plan_stall_max_ns", st->large_plan_stall_max_ns);
  jw_u64(&w, "large_plans_inline", st->large_plans_inline);
  jw_u64(&w, "large_plans_stale", st->large_plans_stale);
  jw_u64(&w, "large_alias_maps", st->large_alias_maps);
  jw_u64(&w, "large_alias_unmaps", st->large_alias_unmaps);
  jw_u64(&w, "large_alias_runs", st->large_alias_runs);
  jw_u64(&w, "large_stitch_new_bytes", st->large_stitch_new_bytes);
  jw_u64(&w, "large_alias_ns", st->large_alias_ns);
  jw_u64(&w, "large_stitch_deferred", st->large_stitch_deferred);
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
