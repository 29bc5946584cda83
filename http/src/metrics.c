/*
 * metrics.c — Prometheus text exposition (format 0.0.4) of pool snapshots.
 * Entry point: aa_http_render_metrics (public), aa__http_render_metrics_labeled.
 *
 * Every family is written once with its HELP and TYPE lines, then one sample
 * per pool (or per pool and size bucket). Labels: pool (the pool name),
 * backend ("host", "cuda", "pinned"...), device (the CUDA ordinal, "cpu" for
 * host memory), region (only on a region's pool: its name), the provider's
 * own (pool_labels: the process's rank and host, a GPU's UUID) and, on per-class
 * families, size_le: the classes are summed into fixed block-size buckets,
 * each bound inclusive and written as the request-size histogram writes its
 * le (1023, 4095, ... 67108863, +Inf: size_le="4095" and le="4095" are the
 * same bound). Per bucket, not cumulative: promtool refuses le itself on a
 * family that is not a histogram. Every bucket is always written, so the
 * series set does not change as the policy
 * loop adds and retires classes. With a carry (aa__metrics_carry, kept by
 * the server) the counters of a class that leaves the table stay in its
 * bucket, so per-bucket counters never go down. Time is written in seconds
 * (adaptalloc_backend_seconds_total from backend_ns,
 * adaptalloc_last_oom_timestamp_seconds from last_oom_unix_ms).
 *
 * The request-size histogram is rebuilt from core's quarter-doubling buckets
 * (aa_hist_bucket_lower): one Prometheus bucket per doubling, with an
 * inclusive integer bound le = 2^k - 1, so every count is exact. _sum is
 * approximate: each request counts as the midpoint of its core bucket (at
 * most about 12% off for any one request). _count is exact.
 * Names and meanings: docs/http.md.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"

typedef enum { GAUGE,
               COUNTER,
               SECONDS,  /* a counter of nanoseconds, written in seconds */
               GAUGE_NS, /* a gauge of nanoseconds, written in seconds */
               UNIX_MS   /* a gauge of Unix time in milliseconds, written in seconds */
} kind_t;

typedef struct {
  const char *name;
  const char *help;
  kind_t kind;
  size_t off; /* offset of a uint64_t (or uint32_t when u32) */
  bool u32;
} family_t;

#define PF(n, h, k, f) \
  { n, h, k, offsetof(aa_pool_stats, f), false }
#define PF32(n, h, k, f) \
  { n, h, k, offsetof(aa_pool_stats, f), true }
static const family_t pool_families[] = {
    PF("adaptalloc_in_use_bytes",
       "Bytes handed out to live allocations (block sizes, small and large).",
       GAUGE, bytes_in_use),
    PF("adaptalloc_requested_bytes",
       "Bytes asked for by live allocations (before rounding up to a class).",
       GAUGE, bytes_requested),
    PF("adaptalloc_reserved_bytes", "Bytes held from the backend.", GAUGE,
       bytes_reserved),
    PF("adaptalloc_peak_in_use_bytes", "Highest in-use bytes since start.",
       GAUGE, peak_bytes_in_use),
    PF("adaptalloc_peak_reserved_bytes", "Highest reserved bytes since start.",
       GAUGE, peak_bytes_reserved),
    PF("adaptalloc_limit_bytes", "Cap on reserved bytes (0 = none).", GAUGE,
       limit_bytes),
    PF("adaptalloc_large_in_use_bytes",
       "Bytes handed out by the large-allocation path.", GAUGE,
       large_bytes_in_use),
    PF("adaptalloc_large_reserved_bytes",
       "Bytes held by the large-allocation path.", GAUGE,
       large_bytes_reserved),
    PF("adaptalloc_large_segments", "Backend segments held by the large path.",
       GAUGE, large_segments),
    PF("adaptalloc_large_pages_mapped_total",
       "Pages mapped by the expandable large path.", COUNTER, large_pages_mapped),
    PF("adaptalloc_large_pages_unmapped_total",
       "Pages unmapped by the expandable large path.", COUNTER, large_pages_unmapped),
    PF("adaptalloc_pending_blocks",
       "Blocks freed and waiting for a stream event before reuse.", GAUGE,
       pending_blocks),
    PF32("adaptalloc_size_classes", "Size classes in the class table.", GAUGE,
         class_count),
    PF("adaptalloc_class_table_version",
       "Version of the class table (bumped by every change).", GAUGE,
       class_table_version),
    PF32("adaptalloc_telemetry_enabled",
         "1 when the histogram and heavy hitters are recorded.", GAUGE,
         telemetry),
    PF("adaptalloc_allocs_total", "Allocation calls.", COUNTER, allocs),
    PF("adaptalloc_frees_total", "Free calls.", COUNTER, frees),
    PF("adaptalloc_cache_hits_total",
       "Allocations served from a thread cache or a free list.", COUNTER,
       cache_hits),
    PF("adaptalloc_cache_misses_total", "Allocations that needed a new slab.",
       COUNTER, cache_misses),
    PF("adaptalloc_backend_allocs_total", "Backend allocation calls.", COUNTER,
       backend_allocs),
    PF("adaptalloc_backend_frees_total", "Backend free calls.", COUNTER,
       backend_frees),
    PF("adaptalloc_backend_failures_total", "Backend calls that failed.",
       COUNTER, backend_failures),
    PF("adaptalloc_ooms_total", "Allocation calls that returned NULL.",
       COUNTER, ooms),
    PF("adaptalloc_oom_retries_total",
       "Releases of cached memory followed by a retry.", COUNTER, oom_retries),
    PF("adaptalloc_last_oom_timestamp_seconds",
       "When an allocation call last returned NULL (Unix time; 0: never).", UNIX_MS,
       last_oom_unix_ms),
    PF("adaptalloc_invalid_frees_total",
       "Detected invalid frees (foreign, double, bad size, interior).",
       COUNTER, invalid_frees),
    PF("adaptalloc_large_allocs_total", "Allocations on the large path.",
       COUNTER, large_allocs),
    PF("adaptalloc_large_misses_total",
       "Large-path allocations that called the backend (a new segment or page maps).",
       COUNTER, large_misses),
    PF("adaptalloc_large_settled_total",
       "Free large chunks whose streams' work had completed, made usable on every stream "
       "and merged with their neighbours before the pool grew.",
       COUNTER, large_settled),
    PF("adaptalloc_large_stream_waits_total",
       "Free large chunks still pending on other streams that served a request by ordering "
       "its stream after them (cudaStreamWaitEvent) instead of new memory.",
       COUNTER, large_stream_waits),
    PF("adaptalloc_large_stitched_ranges",
       "Stitched ranges active now: free pages of holes mapped again side by side at a "
       "new address (policy large.stitch).",
       GAUGE, large_stitched_ranges),
    PF("adaptalloc_large_stitched_bytes",
       "Bytes of the active stitched ranges (the same memory as the holes they came from, "
       "not more reserved).",
       GAUGE, large_stitched_bytes),
    PF("adaptalloc_large_stitches_total", "Stitched ranges made.", COUNTER, large_stitches),
    PF("adaptalloc_large_stitch_hits_total",
       "Requests a kept stitched range served again, with no backend call.", COUNTER,
       large_stitch_hits),
    PF("adaptalloc_large_alias_maps_total",
       "Handles a stitched range mapped at its address (one backend map call each).", COUNTER,
       large_alias_maps),
    PF("adaptalloc_large_alias_runs_total",
       "Stitched ranges whose aliases were made in one backend call (one access grant each).",
       COUNTER, large_alias_runs),
    PF("adaptalloc_large_stitch_new_bytes_total",
       "Bytes mapped new for stitched ranges the holes left short (policy large.stitch_grow).",
       COUNTER, large_stitch_new_bytes),
    PF("adaptalloc_large_alias_seconds_total",
       "Time spent inside stitching's alias map and unmap calls (the pool's clock).", SECONDS,
       large_alias_ns),
    PF("adaptalloc_large_stitch_deferred_total",
       "Requests refused a new stitched range because stitching's time budget was spent "
       "(policy large.stitch_share): the request took new memory instead.",
       COUNTER, large_stitch_deferred),
    PF("adaptalloc_large_plan_state",
       "The learned plan's state (policy large.plan): 0 off, 1 learning, 2 waiting for the "
       "period's start, 3 active, 4 draining.",
       GAUGE, large_plan_state),
    PF("adaptalloc_large_plan_bytes",
       "Bytes of the learned plan's arena (blocks at their planned offsets).", GAUGE,
       large_plan_bytes),
    PF("adaptalloc_large_plan_saved_bytes",
       "Peak reserved bytes the adopted plan saves, by the replay of the window it was "
       "learned from.",
       GAUGE, large_plan_saved_bytes),
    PF("adaptalloc_large_plan_hits_total",
       "Large requests served at their planned offsets (no search, no backend call).",
       COUNTER, large_plan_hits),
    PF("adaptalloc_large_plan_misses_total",
       "Large requests the plan expected elsewhere or whose planned room was still taken.",
       COUNTER, large_plan_misses),
    PF("adaptalloc_large_plans_adopted_total", "Plans adopted.", COUNTER, large_plans_adopted),
    PF("adaptalloc_large_plans_dropped_total",
       "Plans dropped (the requests stopped matching, or a release).", COUNTER,
       large_plans_dropped),
    PF("adaptalloc_large_plans_stale_total",
       "Plans made on the planner thread and discarded: the requests had stopped repeating "
       "with their period before adoption.",
       COUNTER, large_plans_stale),
    PF("adaptalloc_large_plans_inline_total",
       "Plans made on the allocating thread because the planner thread could not be started.",
       COUNTER, large_plans_inline),
    PF("adaptalloc_large_plan_seconds", "The learned plan's last planning time.", GAUGE_NS,
       large_plan_ns),
    PF("adaptalloc_large_plan_stall_max_seconds",
       "The longest the allocating thread was held up by one plan (the window's copy when "
       "planned in the background).",
       GAUGE_NS, large_plan_stall_max_ns),
    PF("adaptalloc_backend_seconds_total",
       "Time spent inside backend alloc, free, map and unmap calls.", SECONDS,
       backend_ns),
    PF("adaptalloc_large_held_bytes",
       "Large blocks freed into threads' caches and held there now.", GAUGE,
       large_bytes_held),
    PF("adaptalloc_large_held_reclaims_total",
       "Held large blocks taken back from a thread's cache.", COUNTER,
       large_held_reclaims),
    PF("adaptalloc_stream_queries_total",
       "Stream idle queries made before recording an event for freed blocks.",
       COUNTER, stream_queries),
    PF("adaptalloc_stream_idle_total",
       "Stream queries that found the stream idle (no event needed).", COUNTER,
       stream_idle),
};

#define CF(n, h, k, f) \
  { n, h, k, offsetof(aa_class_stats, f), false }
static const family_t class_families[] = {
    CF("adaptalloc_class_in_use_bytes", "Bytes of blocks in use, classes summed per block-size bucket.",
       GAUGE, bytes_in_use),
    CF("adaptalloc_class_requested_bytes",
       "Bytes asked for by live blocks (waste = in use - requested), per block-size bucket.",
       GAUGE, bytes_requested),
    CF("adaptalloc_class_reserved_bytes", "Bytes of slabs held, per block-size bucket.",
       GAUGE, bytes_reserved),
    CF("adaptalloc_class_slabs", "Slabs held, per block-size bucket.", GAUGE, slabs),
    CF("adaptalloc_class_free_blocks",
       "Carved free blocks (lists, caches, pending), per block-size bucket.", GAUGE,
       blocks_free),
    CF("adaptalloc_class_allocs_total", "Allocations served by classes, per block-size bucket (retired classes included).",
       COUNTER, allocs),
    CF("adaptalloc_class_frees_total", "Frees into classes, per block-size bucket (retired classes included).", COUNTER, frees),
    CF("adaptalloc_class_hits_total",
       "Allocations served without a new slab, per block-size bucket.", COUNTER, hits),
    CF("adaptalloc_class_misses_total",
       "Allocations that needed a new slab, per block-size bucket.", COUNTER, misses),
};

/* ------------------------------------------------ size buckets and carry */

#define NBUCKETS 10 /* 1 KiB * 4^k for k = 0..8, then +Inf */
#define NCOUNTERS 4 /* allocs, frees, hits, misses */

/* The bucket of a block size: the first upper bound 1024 * 4^k - 1 at or
 * above it (inclusive, the request-size histogram's convention: "1023" holds
 * the blocks below 1 KiB). */
static unsigned size_bucket(uint64_t block_size) {
  unsigned b = 0;
  uint64_t le = 1023;
  while (b + 1 < NBUCKETS && block_size > le) {
    b++;
    le = le * 4 + 3;
  }
  return b;
}

static const char *bucket_label(unsigned b) {
  static const char *const names[NBUCKETS] = {
      "1023", "4095", "16383", "65535", "262143",
      "1048575", "4194303", "16777215", "67108863", "+Inf"};
  return names[b];
}

static void class_counters(const aa_class_stats *cs, uint64_t c[NCOUNTERS]) {
  c[0] = cs->allocs;
  c[1] = cs->frees;
  c[2] = cs->hits;
  c[3] = cs->misses;
}

/* Which carry slot a counter family uses, -1 for gauges. */
static int counter_index(size_t off) {
  if (off == offsetof(aa_class_stats, allocs))
    return 0;
  if (off == offsetof(aa_class_stats, frees))
    return 1;
  if (off == offsetof(aa_class_stats, hits))
    return 2;
  if (off == offsetof(aa_class_stats, misses))
    return 3;
  return -1;
}

typedef struct {
  uint64_t block_size;
  uint64_t c[NCOUNTERS];
  bool retiring;
  bool claimed;
} seen_t;

typedef struct {
  char name[32];
  char backend[16];
  int32_t device;
  size_t nseen;
  seen_t seen[AA_MAX_CLASSES];
  uint64_t carry[NBUCKETS][NCOUNTERS];
} carry_pool_t;

struct aa__metrics_carry {
  size_t npools;
  carry_pool_t pools[AA__METRICS_CARRY_POOLS];
};

aa__metrics_carry *aa__metrics_carry_new(void) {
  return calloc(1, sizeof(aa__metrics_carry));
}

void aa__metrics_carry_free(aa__metrics_carry *c) { free(c); }

static carry_pool_t *carry_find(aa__metrics_carry *c, const aa_pool_stats *st) {
  size_t i;
  carry_pool_t *cp;
  for (i = 0; i < c->npools; i++) {
    cp = &c->pools[i];
    if (cp->device == st->device &&
        strncmp(cp->name, st->name, sizeof cp->name) == 0 &&
        strncmp(cp->backend, st->backend, sizeof cp->backend) == 0)
      return cp;
  }
  if (c->npools == AA__METRICS_CARRY_POOLS)
    return NULL; /* more pools than slots: those go without a carry */
  cp = &c->pools[c->npools++];
  memset(cp, 0, sizeof *cp);
  memcpy(cp->name, st->name, sizeof cp->name);
  memcpy(cp->backend, st->backend, sizeof cp->backend);
  cp->device = st->device;
  return cp;
}

static bool counts_at_least(const uint64_t now[NCOUNTERS],
                            const uint64_t before[NCOUNTERS]) {
  int k;
  for (k = 0; k < NCOUNTERS; k++)
    if (now[k] < before[k])
      return false;
  return true;
}

/* Claims the class of the last render that cs continues: same block size,
 * counters not lower; a retiring class prefers a retiring one (its active
 * twin is a new class). Returns false for a class that is new. */
static bool claim(carry_pool_t *cp, const aa_class_stats *cs, bool want_retiring) {
  uint64_t now[NCOUNTERS];
  size_t i;
  int pass;
  class_counters(cs, now);
  for (pass = 0; pass < 2; pass++) {
    for (i = 0; i < cp->nseen; i++) {
      seen_t *s = &cp->seen[i];
      if (s->claimed || s->block_size != cs->block_size ||
          (pass == 0 && s->retiring != want_retiring) ||
          !counts_at_least(now, s->c))
        continue;
      s->claimed = true;
      return true;
    }
  }
  return false;
}

/* Moves the counters of the classes that left the table (or started over
 * at 0) since the last render into their bucket's carry, then remembers this
 * render's classes. What a class counted between the last scrape and its
 * end is not seen (a retiring class takes no new allocations; only frees of
 * its draining blocks can be missed). */
static void carry_update(carry_pool_t *cp, const aa_pool_stats *st, uint32_t nc) {
  size_t i;
  uint32_t c;
  int k;
  for (i = 0; i < cp->nseen; i++)
    cp->seen[i].claimed = false;
  for (c = 0; c < nc; c++)
    if (st->classes[c].retiring)
      (void)claim(cp, &st->classes[c], true);
  for (c = 0; c < nc; c++)
    if (!st->classes[c].retiring)
      (void)claim(cp, &st->classes[c], false);
  for (i = 0; i < cp->nseen; i++) {
    const seen_t *s = &cp->seen[i];
    unsigned b;
    if (s->claimed)
      continue;
    b = size_bucket(s->block_size);
    for (k = 0; k < NCOUNTERS; k++)
      cp->carry[b][k] += s->c[k];
  }
  for (c = 0; c < nc; c++) {
    seen_t *s = &cp->seen[c];
    s->block_size = st->classes[c].block_size;
    s->retiring = st->classes[c].retiring != 0;
    s->claimed = false;
    class_counters(&st->classes[c], s->c);
  }
  cp->nseen = nc;
}

static uint64_t field(const void *base, const family_t *f) {
  const unsigned char *p = (const unsigned char *)base + f->off;
  if (f->u32) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
  {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
  }
}

/* Appends v in decimal. */
static void put_u64(aa__buf *b, uint64_t v) {
  char tmp[24];
  size_t i = sizeof tmp;
  do {
    tmp[--i] = (char)('0' + v % 10u);
    v /= 10u;
  } while (v != 0);
  aa__buf_append(b, tmp + i, sizeof tmp - i);
}

/* Escapes a label value (\\, \", \n; other control bytes become '_') into
 * out (cap bytes, NUL-terminated); reads at most max bytes of s. */
static void label_value(char *out, size_t cap, const char *s, size_t max) {
  size_t o = 0;
  size_t i;
  for (i = 0; i < max && s[i] != '\0' && o + 3 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\\' || c == '"' || c == '\n') {
      out[o++] = '\\';
      out[o++] = c == '\n' ? 'n' : (char)c;
    } else {
      out[o++] = c < 0x20 || c == 0x7F ? '_' : (char)c;
    }
  }
  out[o] = '\0';
}

/* The label set of a pool, without the closing brace:
 *   {pool="..",backend="..",device=".."[,region=".."]
 * built once per pool and render. */
typedef struct {
  char text[192 + AA_HTTP_MAX_LABELS * (32 + 2 * 128 + 4)];
  size_t len;
} labels_t;

/* Whether name may be added to a pool's label set: a Prometheus label name,
 * not reserved ("__"), not one the server writes itself. */
static bool extra_name_ok(const char *name, size_t max) {
  static const char *const own[] = {"pool", "backend", "device", "region", "size_le", "le"};
  size_t i;
  size_t len = strnlen(name, max);
  if (len == 0 || len == max || (name[0] == '_' && name[1] == '_'))
    return false;
  for (i = 0; i < len; i++) {
    char c = name[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && (i == 0 || c < '0' || c > '9'))
      return false;
  }
  for (i = 0; i < sizeof own / sizeof own[0]; i++)
    if (strcmp(name, own[i]) == 0)
      return false;
  return true;
}

/* Appends ,name="value" for each usable pair of x (a name seen before in x
 * is skipped: a label once). */
static void add_extra_labels(labels_t *l, const aa_http_labels *x) {
  size_t i;
  size_t k;
  size_t n = x->n < AA_HTTP_MAX_LABELS ? x->n : AA_HTTP_MAX_LABELS;
  for (i = 0; i < n; i++) {
    char value[sizeof x->value[0] * 2 + 4];
    bool dup = false;
    int w;
    if (!extra_name_ok(x->name[i], sizeof x->name[i]) || x->value[i][0] == '\0')
      continue;
    for (k = 0; k < i && !dup; k++)
      dup = strncmp(x->name[k], x->name[i], sizeof x->name[i]) == 0;
    if (dup)
      continue;
    label_value(value, sizeof value, x->value[i], sizeof x->value[i]);
    w = snprintf(l->text + l->len, sizeof l->text - l->len, ",%s=\"%s\"", x->name[i], value);
    if (w < 0 || (size_t)w >= sizeof l->text - l->len)
      break; /* cannot happen: text holds every label at its largest */
    l->len += (size_t)w;
  }
}

static void make_labels(labels_t *l, const aa_pool_stats *st) {
  char name[sizeof st->name * 2 + 4];
  char backend[sizeof st->backend * 2 + 4];
  char device[16];
  int n;
  label_value(name, sizeof name, st->name, sizeof st->name);
  label_value(backend, sizeof backend, st->backend, sizeof st->backend);
  if (st->device >= 0)
    snprintf(device, sizeof device, "%d", (int)st->device);
  else
    snprintf(device, sizeof device, "cpu");
  if (st->region[0] != '\0') {
    char region[sizeof st->region * 2 + 4];
    label_value(region, sizeof region, st->region, sizeof st->region);
    n = snprintf(l->text, sizeof l->text,
                 "{pool=\"%s\",backend=\"%s\",device=\"%s\",region=\"%s\"", name,
                 backend, device, region);
  } else {
    n = snprintf(l->text, sizeof l->text, "{pool=\"%s\",backend=\"%s\",device=\"%s\"",
                 name, backend, device);
  }
  l->len = n < 0 ? 0 : (size_t)n < sizeof l->text ? (size_t)n
                                                  : sizeof l->text - 1;
}

/* name{labels,size_le="bucket"} value\n */
static void bucket_line(aa__buf *b, const char *name, size_t name_len,
                        const labels_t *l, unsigned bucket, uint64_t value) {
  aa__buf_append(b, name, name_len);
  aa__buf_append(b, l->text, l->len);
  aa__buf_puts(b, ",size_le=\"");
  aa__buf_puts(b, bucket_label(bucket));
  aa__buf_append(b, "\"} ", 3);
  put_u64(b, value);
  aa__buf_append(b, "\n", 1);
}

/* name{labels[,key="kval"]} value\n */
static void sample_line(aa__buf *b, const char *name, size_t name_len,
                        const labels_t *l, const char *key, uint64_t kval,
                        uint64_t value) {
  aa__buf_append(b, name, name_len);
  aa__buf_append(b, l->text, l->len);
  if (key != NULL) {
    aa__buf_puts(b, key);
    put_u64(b, kval);
    aa__buf_append(b, "\"", 1);
  }
  aa__buf_append(b, "} ", 2);
  put_u64(b, value);
  aa__buf_append(b, "\n", 1);
}

static void family_head(aa__buf *b, const char *name, const char *help,
                        const char *type) {
  aa__buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static uint32_t class_count(const aa_pool_stats *st) {
  return st->class_count > AA_MAX_CLASSES ? AA_MAX_CLASSES : st->class_count;
}

/* Bucket boundaries: for each power of two P from 512 B to 1 TiB, the first
 * core bucket whose lower bound is >= P. Returns how many (deduplicated,
 * ascending) core bucket indices went into idx. */
static size_t hist_edges(unsigned *idx, size_t cap) {
  size_t n = 0;
  unsigned j = 1;
  uint64_t p;

  for (p = 512; p <= (1ull << 40) && n < cap; p *= 2) {
    while (j < AA_HIST_BUCKETS && aa_hist_bucket_lower(j) < p)
      j++;
    if (j >= AA_HIST_BUCKETS)
      break;
    if (n == 0 || idx[n - 1] != j)
      idx[n++] = j;
  }
  return n;
}

static void render_hist(aa__buf *b, const aa_pool_stats *pools,
                        const labels_t *labels, size_t n) {
  static const char bucket[] = "adaptalloc_request_size_bytes_bucket";
  static const char sum_name[] = "adaptalloc_request_size_bytes_sum";
  static const char count_name[] = "adaptalloc_request_size_bytes_count";
  unsigned edges[64];
  size_t ne = hist_edges(edges, 64);
  size_t p;

  family_head(b, "adaptalloc_request_size_bytes",
              "Requested allocation sizes since start (le inclusive; _sum "
              "approximate: bucket midpoints).",
              "histogram");
  for (p = 0; p < n; p++) {
    const aa_pool_stats *st = &pools[p];
    uint64_t cum = 0;
    uint64_t total = 0;
    double sum = 0.0;
    unsigned i = 0;
    size_t e;

    for (e = 0; e < ne; e++) {
      for (; i < edges[e]; i++)
        cum += st->hist[i];
      sample_line(b, bucket, sizeof bucket - 1, &labels[p], ",le=\"",
                  aa_hist_bucket_lower(edges[e]) - 1, cum);
    }
    for (i = 0; i < AA_HIST_BUCKETS; i++) {
      uint64_t lo;
      uint64_t hi;
      if (st->hist[i] == 0)
        continue;
      lo = aa_hist_bucket_lower(i);
      hi = i + 1 < AA_HIST_BUCKETS ? aa_hist_bucket_lower(i + 1) : lo + 1;
      total += st->hist[i];
      sum += (double)st->hist[i] * ((double)lo + (double)(hi - 1 - lo) / 2.0);
    }
    aa__buf_append(b, bucket, sizeof bucket - 1);
    aa__buf_append(b, labels[p].text, labels[p].len);
    aa__buf_puts(b, ",le=\"+Inf\"} ");
    put_u64(b, total);
    aa__buf_append(b, "\n", 1);
    aa__buf_append(b, sum_name, sizeof sum_name - 1);
    aa__buf_append(b, labels[p].text, labels[p].len);
    aa__buf_printf(b, "} %.0f\n", isfinite(sum) ? floor(sum) : 0.0);
    sample_line(b, count_name, sizeof count_name - 1, &labels[p], NULL, 0,
                total);
  }
}

int aa_http_render_metrics(const aa_pool_stats *pools, size_t n, char **out,
                           size_t *len) {
  return aa__http_render_metrics_carry(pools, n, NULL, out, len);
}

int aa__http_render_metrics_carry(const aa_pool_stats *pools, size_t n,
                                  aa__metrics_carry *carry, char **out,
                                  size_t *len) {
  return aa__http_render_metrics_labeled(pools, n, NULL, carry, out, len);
}

int aa__http_render_metrics_labeled(const aa_pool_stats *pools, size_t n,
                                    const aa_http_labels *extra,
                                    aa__metrics_carry *carry, char **out,
                                    size_t *len) {
  aa__buf b;
  labels_t *labels = NULL;
  carry_pool_t **cps = NULL;
  size_t hint = 8192;
  size_t f;
  size_t p;
  int rc;

  if (out != NULL)
    *out = NULL;
  if (len != NULL)
    *len = 0;
  if (out == NULL || (pools == NULL && n > 0))
    return AA_EINVAL;
  aa__buf_init(&b);
  if (n > 0) {
    labels = calloc(n, sizeof *labels);
    cps = calloc(n, sizeof *cps);
    if (labels == NULL || cps == NULL) {
      free(labels);
      free(cps);
      return AA_ENOMEM;
    }
  }
  for (p = 0; p < n; p++) {
    make_labels(&labels[p], &pools[p]);
    if (extra != NULL)
      add_extra_labels(&labels[p], &extra[p]);
    hint += (60 + 9 * NBUCKETS) * (labels[p].len + 48);
    if (carry != NULL) {
      cps[p] = carry_find(carry, &pools[p]);
      if (cps[p] != NULL)
        carry_update(cps[p], &pools[p], class_count(&pools[p]));
    }
  }
  (void)aa__buf_reserve(&b, hint); /* a failure shows in aa__buf_take */

  for (f = 0; f < sizeof pool_families / sizeof pool_families[0]; f++) {
    const family_t *fam = &pool_families[f];
    size_t nl = strlen(fam->name);
    family_head(&b, fam->name, fam->help,
                fam->kind == GAUGE || fam->kind == GAUGE_NS || fam->kind == UNIX_MS ? "gauge"
                                                                                    : "counter");
    for (p = 0; p < n; p++) {
      uint64_t v = field(&pools[p], fam);
      if (fam->kind != SECONDS && fam->kind != GAUGE_NS && fam->kind != UNIX_MS) {
        sample_line(&b, fam->name, nl, &labels[p], NULL, 0, v);
        continue;
      }
      aa__buf_append(&b, fam->name, nl);
      aa__buf_append(&b, labels[p].text, labels[p].len);
      if (fam->kind == SECONDS || fam->kind == GAUGE_NS)
        aa__buf_printf(&b, "} %llu.%09llu\n", (unsigned long long)(v / 1000000000u),
                       (unsigned long long)(v % 1000000000u));
      else
        aa__buf_printf(&b, "} %llu.%03llu\n", (unsigned long long)(v / 1000u),
                       (unsigned long long)(v % 1000u));
    }
  }
  for (f = 0; f < sizeof class_families / sizeof class_families[0]; f++) {
    const family_t *fam = &class_families[f];
    size_t nl = strlen(fam->name);
    int ci = counter_index(fam->off);
    family_head(&b, fam->name, fam->help,
                fam->kind == COUNTER ? "counter" : "gauge");
    for (p = 0; p < n; p++) {
      uint64_t sum[NBUCKETS];
      uint32_t c;
      unsigned k;
      memset(sum, 0, sizeof sum);
      for (c = 0; c < class_count(&pools[p]); c++) {
        const aa_class_stats *cs = &pools[p].classes[c];
        sum[size_bucket(cs->block_size)] += field(cs, fam);
      }
      for (k = 0; k < NBUCKETS; k++) {
        if (ci >= 0 && cps[p] != NULL)
          sum[k] += cps[p]->carry[k][ci];
        bucket_line(&b, fam->name, nl, &labels[p], k, sum[k]);
      }
    }
  }
  render_hist(&b, pools, labels, n);
  free(labels);
  free(cps);
  rc = aa__buf_take(&b, out, len);
  return rc;
}
