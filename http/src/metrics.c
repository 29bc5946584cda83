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
 *   {pool="..",backend="..",device=".."
 * built once per pool and render. */
typedef struct {
  char text[192];
  size_t len;
} labels_t;

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
  n = snprintf(l->text, sizeof l->text, "{pool=\"%s\",backend=\"%s\",device=\"%s\"",
               name, backend, device);
  l->len = n < 0 ? 0 : (size_t)n < sizeof l->text ? (size_t)n : sizeof l->text - 1;
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
  aa__buf b;
  labels_t *labels = NULL;
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
    if (labels == NULL)
      return AA_ENOMEM;
  }
  for (p = 0; p < n; p++) {
    make_labels(&labels[p], &pools[p]);
    hint += (60 + 9 * (size_t)class_count(&pools[p])) * (labels[p].len + 48);
  }
  (void)aa__buf_reserve(&b, hint); /* a failure shows in aa__buf_take */

  for (f = 0; f < sizeof pool_families / sizeof pool_families[0]; f++) {
    const family_t *fam = &pool_families[f];
    size_t nl = strlen(fam->name);
    family_head(&b, fam->name, fam->help,
                fam->kind == COUNTER ? "counter" : "gauge");
    for (p = 0; p < n; p++)
      sample_line(&b, fam->name, nl, &labels[p], NULL, 0,
                  field(&pools[p], fam));
  }
  for (f = 0; f < sizeof class_families / sizeof class_families[0]; f++) {
    const family_t *fam = &class_families[f];
    size_t nl = strlen(fam->name);
    family_head(&b, fam->name, fam->help,
                fam->kind == COUNTER ? "counter" : "gauge");
    for (p = 0; p < n; p++) {
      uint32_t c;
      for (c = 0; c < class_count(&pools[p]); c++) {
        const aa_class_stats *cs = &pools[p].classes[c];
        sample_line(&b, fam->name, nl, &labels[p], ",class=\"",
                    cs->block_size, field(cs, fam));
      }
    }
  }
  render_hist(&b, pools, labels, n);
  free(labels);
  rc = aa__buf_take(&b, out, len);
  return rc;
}
