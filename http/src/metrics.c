/*
 * metrics.c — Prometheus text exposition (format 0.0.4) of pool snapshots.
 * Entry point: aa_http_render_metrics (public), aa__http_metric_labels.
 *
 * Every family is written once with its HELP and TYPE lines, then one sample
 * per pool (or per pool and class). Labels: pool (the pool name), backend
 * ("host", "cuda", "pinned"...), device (the CUDA ordinal, "cpu" for host
 * memory) and, on per-class families, class (the block size in bytes).
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

typedef enum { GAUGE, COUNTER } kind_t;

typedef struct {
  const char *name;
  const char *help;
  kind_t kind;
  size_t off; /* offset of a uint64_t (or uint32_t when u32) */
  bool u32;
} family_t;

#define PF(n, h, k, f) {n, h, k, offsetof(aa_pool_stats, f), false}
#define PF32(n, h, k, f) {n, h, k, offsetof(aa_pool_stats, f), true}
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
    PF("adaptalloc_invalid_frees_total",
       "Detected invalid frees (foreign, double, bad size, interior).",
       COUNTER, invalid_frees),
    PF("adaptalloc_large_allocs_total", "Allocations on the large path.",
       COUNTER, large_allocs),
};

#define CF(n, h, k, f) {n, h, k, offsetof(aa_class_stats, f), false}
static const family_t class_families[] = {
    CF("adaptalloc_class_in_use_bytes", "Bytes of blocks in use in a class.",
       GAUGE, bytes_in_use),
    CF("adaptalloc_class_requested_bytes",
       "Bytes asked for by live blocks of a class (waste = in use - requested).",
       GAUGE, bytes_requested),
    CF("adaptalloc_class_reserved_bytes", "Bytes of slabs held by a class.",
       GAUGE, bytes_reserved),
    CF("adaptalloc_class_slabs", "Slabs held by a class.", GAUGE, slabs),
    CF("adaptalloc_class_free_blocks",
       "Carved free blocks of a class (lists, caches, pending).", GAUGE,
       blocks_free),
    CF("adaptalloc_class_allocs_total", "Allocations served by a class.",
       COUNTER, allocs),
    CF("adaptalloc_class_frees_total", "Frees into a class.", COUNTER, frees),
    CF("adaptalloc_class_hits_total",
       "Allocations of a class served without a new slab.", COUNTER, hits),
    CF("adaptalloc_class_misses_total",
       "Allocations of a class that needed a new slab.", COUNTER, misses),
};

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

static void label_value(aa__buf *b, const char *s, size_t max) {
  size_t i;
  for (i = 0; i < max && s[i] != '\0'; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\\')
      aa__buf_puts(b, "\\\\");
    else if (c == '"')
      aa__buf_puts(b, "\\\"");
    else if (c == '\n')
      aa__buf_puts(b, "\\n");
    else if (c < 0x20 || c == 0x7F)
      aa__buf_puts(b, "_");
    else
      aa__buf_append(b, (const char *)&c, 1);
  }
}

/* {pool="..",backend="..",device=".."  (no closing brace) */
static void labels_open(aa__buf *b, const aa_pool_stats *st) {
  aa__buf_puts(b, "{pool=\"");
  label_value(b, st->name, sizeof st->name);
  aa__buf_puts(b, "\",backend=\"");
  label_value(b, st->backend, sizeof st->backend);
  if (st->device >= 0)
    aa__buf_printf(b, "\",device=\"%d\"", (int)st->device);
  else
    aa__buf_puts(b, "\",device=\"cpu\"");
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

static void render_hist(aa__buf *b, const aa_pool_stats *pools, size_t n) {
  const char *name = "adaptalloc_request_size_bytes";
  unsigned edges[64];
  size_t ne = hist_edges(edges, 64);
  size_t p;

  family_head(b, name,
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
      aa__buf_printf(b, "%s_bucket", name);
      labels_open(b, st);
      aa__buf_printf(b, ",le=\"%llu\"} %llu\n",
                     (unsigned long long)(aa_hist_bucket_lower(edges[e]) - 1),
                     (unsigned long long)cum);
    }
    for (i = 0; i < AA_HIST_BUCKETS; i++) {
      uint64_t lo = aa_hist_bucket_lower(i);
      uint64_t hi = i + 1 < AA_HIST_BUCKETS ? aa_hist_bucket_lower(i + 1) : lo + 1;
      total += st->hist[i];
      if (st->hist[i] != 0)
        sum += (double)st->hist[i] * ((double)lo + (double)(hi - 1 - lo) / 2.0);
    }
    aa__buf_printf(b, "%s_bucket", name);
    labels_open(b, st);
    aa__buf_printf(b, ",le=\"+Inf\"} %llu\n", (unsigned long long)total);
    aa__buf_printf(b, "%s_sum", name);
    labels_open(b, st);
    aa__buf_printf(b, "} %.0f\n", isfinite(sum) ? floor(sum) : 0.0);
    aa__buf_printf(b, "%s_count", name);
    labels_open(b, st);
    aa__buf_printf(b, "} %llu\n", (unsigned long long)total);
  }
}

int aa_http_render_metrics(const aa_pool_stats *pools, size_t n, char **out,
                           size_t *len) {
  aa__buf b;
  size_t f;
  size_t p;

  if (out != NULL)
    *out = NULL;
  if (len != NULL)
    *len = 0;
  if (out == NULL || (pools == NULL && n > 0))
    return AA_EINVAL;
  aa__buf_init(&b);

  for (f = 0; f < sizeof pool_families / sizeof pool_families[0]; f++) {
    const family_t *fam = &pool_families[f];
    family_head(&b, fam->name, fam->help,
                fam->kind == COUNTER ? "counter" : "gauge");
    for (p = 0; p < n; p++) {
      aa__buf_puts(&b, fam->name);
      labels_open(&b, &pools[p]);
      aa__buf_printf(&b, "} %llu\n",
                     (unsigned long long)field(&pools[p], fam));
    }
  }
  for (f = 0; f < sizeof class_families / sizeof class_families[0]; f++) {
    const family_t *fam = &class_families[f];
    family_head(&b, fam->name, fam->help,
                fam->kind == COUNTER ? "counter" : "gauge");
    for (p = 0; p < n; p++) {
      uint32_t c;
      for (c = 0; c < class_count(&pools[p]); c++) {
        const aa_class_stats *cs = &pools[p].classes[c];
        aa__buf_puts(&b, fam->name);
        labels_open(&b, &pools[p]);
        aa__buf_printf(&b, ",class=\"%llu\"} %llu\n",
                       (unsigned long long)cs->block_size,
                       (unsigned long long)field(cs, fam));
      }
    }
  }
  render_hist(&b, pools, n);
  return aa__buf_take(&b, out, len);
}
