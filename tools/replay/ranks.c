/*
 * ranks.c — adaptalloc-replay ranks (cmd_ranks): sets several ranks'
 * request-size histograms side by side and flags the rank whose histogram
 * is far from the others'. Run rows and labels come from dbs.c.
 *
 * Everything is read through the store's readers (aa_store_trace_foreach,
 * aa_store_histogram_latest); docs/multi-gpu.md defines the distance.
 */
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/store.h"
#include "replay_tool.h"

/* ------------------------------------------------------------------ ranks */

/* Exact request sizes counted from a trace: open addressing, size 0 is the
 * empty slot (a zero-byte request is counted in zero_count). */
typedef struct size_map {
  uint64_t *size;
  uint64_t *count;
  size_t cap, used;
  uint64_t zero_count;
} size_map;

static uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

static int size_map_grow(size_map *m) {
  size_t ncap = m->cap == 0 ? 1024 : m->cap * 2, i;
  uint64_t *ns = calloc(ncap, sizeof *ns), *nc = calloc(ncap, sizeof *nc);

  if (ns == NULL || nc == NULL) {
    free(ns);
    free(nc);
    return AA_ENOMEM;
  }
  for (i = 0; i < m->cap; i++) {
    size_t j;
    if (m->size[i] == 0)
      continue;
    j = mix64(m->size[i]) & (ncap - 1);
    while (ns[j] != 0)
      j = (j + 1) & (ncap - 1);
    ns[j] = m->size[i];
    nc[j] = m->count[i];
  }
  free(m->size);
  free(m->count);
  m->size = ns;
  m->count = nc;
  m->cap = ncap;
  return AA_OK;
}

static int size_map_add(size_map *m, uint64_t size) {
  size_t j;

  if (size == 0) {
    m->zero_count++;
    return AA_OK;
  }
  if ((m->used + 1) * 2 > m->cap && size_map_grow(m) != AA_OK)
    return AA_ENOMEM;
  for (j = mix64(size) & (m->cap - 1); m->size[j] != 0 && m->size[j] != size;
       j = (j + 1) & (m->cap - 1))
    ;
  if (m->size[j] == 0) {
    m->size[j] = size;
    m->used++;
  }
  m->count[j]++;
  return AA_OK;
}

static void size_map_free(size_map *m) {
  free(m->size);
  free(m->count);
  memset(m, 0, sizeof *m);
}

/* One entry of a rank's top list: an exact size (upper == size) or a bucket
 * (size = its lower bound, upper = the last size in it). */
typedef struct top_entry {
  uint64_t size, upper, count;
} top_entry;

typedef struct rank_info {
  const char *path;
  db_meta meta;
  const char *source; /* "trace" or "snapshot" */
  uint64_t hist[AA_HIST_BUCKETS];
  uint64_t total;
  double p[AA_HIST_BUCKETS]; /* normalised */
  top_entry *top;
  size_t ntop;
  double distance; /* to the median rank */
  bool differs;
  char label[64]; /* db_label */
} rank_info;

typedef struct hist_ctx {
  rank_info *ri;
  size_map map;
  int rc;
  uint64_t index;
  char why[256]; /* a bad event's or row's message */
} hist_ctx;

static int hist_cb(void *user, const aa_trace_event *ev) {
  hist_ctx *h = user;
  aa_replay_event e;

  if (ev->op == 'c')
    return 0; /* a call stack, not a request */
  h->rc = trace_event_of(ev, ++h->index, &e, h->why, sizeof h->why);
  if (h->rc != AA_OK)
    return 1;
  if (ev->op != 'a' && ev->op != 'x')
    return 0;
  h->ri->hist[aa_hist_bucket((size_t)ev->size)]++;
  if (size_map_add(&h->map, ev->size) != AA_OK) {
    h->rc = AA_ENOMEM;
    return 1;
  }
  return 0;
}

static int cmp_top(const void *a, const void *b) {
  const top_entry *x = a, *y = b;
  if (x->count != y->count)
    return x->count > y->count ? -1 : 1;
  return x->size < y->size ? -1 : x->size > y->size;
}

static uint64_t bucket_upper(unsigned b) {
  if (b + 1 >= AA_HIST_BUCKETS)
    return UINT64_MAX;
  return aa_hist_bucket_lower(b + 1) - 1;
}

/* Fills ri->top with the `top` most frequent entries of the map (exact) or
 * of the histogram (buckets). */
static int make_top(rank_info *ri, const size_map *map, size_t top) {
  size_t n = 0, i;
  top_entry *all;

  if (map != NULL) {
    all = calloc(map->used + 1, sizeof *all);
    if (all == NULL)
      return AA_ENOMEM;
    for (i = 0; i < map->cap; i++)
      if (map->size[i] != 0) {
        all[n].size = all[n].upper = map->size[i];
        all[n++].count = map->count[i];
      }
    if (map->zero_count > 0) {
      all[n].size = all[n].upper = 0;
      all[n++].count = map->zero_count;
    }
  } else {
    all = calloc(AA_HIST_BUCKETS, sizeof *all);
    if (all == NULL)
      return AA_ENOMEM;
    for (i = 0; i < AA_HIST_BUCKETS; i++)
      if (ri->hist[i] > 0) {
        all[n].size = aa_hist_bucket_lower((unsigned)i);
        all[n].upper = bucket_upper((unsigned)i);
        all[n++].count = ri->hist[i];
      }
  }
  qsort(all, n, sizeof *all, cmp_top);
  ri->top = all;
  ri->ntop = n < top ? n : top;
  return AA_OK;
}

/* Reads one database's histogram: from its trace unless from_histogram or
 * the run has no trace, else from its latest snapshots. */
static int read_rank(rank_info *ri, int64_t run_id, const char *hist_pool,
                     bool from_histogram, size_t top, char *err,
                     size_t errcap) {
  int rc = db_meta_read(ri->path, run_id, &ri->meta, err, errcap);
  hist_ctx h;

  if (rc != AA_OK)
    return rc;
  memset(&h, 0, sizeof h);
  h.ri = ri;
  if (!from_histogram && ri->meta.events_written > 0) {
    ri->source = "trace";
    rc = aa_store_trace_read(ri->path, ri->meta.run_id, hist_cb, &h, h.why, sizeof h.why);
    if (h.rc != AA_OK)
      rc = h.rc;
    if (rc != AA_OK && h.why[0] != '\0') {
      snprintf(err, errcap, "%s: run %lld: %s", ri->path, (long long)ri->meta.run_id, h.why);
      goto out;
    }
    if (rc != AA_OK) {
      snprintf(err, errcap, "%s: cannot read run %lld's trace: %s", ri->path,
               (long long)ri->meta.run_id, meta_store_err(rc));
      goto out;
    }
  } else {
    ri->source = "snapshot";
    rc = aa_store_histogram_latest(ri->path, ri->meta.run_id, hist_pool,
                                   ri->hist);
    if (rc != AA_OK) {
      snprintf(err, errcap, "%s: run %lld has %s%s%s", ri->path,
               (long long)ri->meta.run_id,
               rc == AA_ENOENT ? "no trace and no snapshot" : "an unreadable "
                                                              "histogram",
               hist_pool != NULL && rc == AA_ENOENT ? " of pool " : "",
               hist_pool != NULL && rc == AA_ENOENT ? hist_pool : "");
      goto out;
    }
  }
  {
    size_t i;
    ri->total = 0;
    for (i = 0; i < AA_HIST_BUCKETS; i++)
      ri->total += ri->hist[i];
    if (ri->total == 0) {
      snprintf(err, errcap, "%s: run %lld recorded no requests", ri->path,
               (long long)ri->meta.run_id);
      rc = AA_ENOENT;
      goto out;
    }
    for (i = 0; i < AA_HIST_BUCKETS; i++)
      ri->p[i] = (double)ri->hist[i] / (double)ri->total;
  }
  rc = make_top(ri, strcmp(ri->source, "trace") == 0 ? &h.map : NULL, top);
  if (rc != AA_OK)
    snprintf(err, errcap, "out of memory");
out:
  size_map_free(&h.map);
  return rc;
}

/* Half the L1 distance of two normalised histograms: 0 the same shape, 1 no
 * bucket in common. */
static double half_l1(const double *a, const double *b) {
  double s = 0.0;
  size_t i;

  for (i = 0; i < AA_HIST_BUCKETS; i++)
    s += a[i] > b[i] ? a[i] - b[i] : b[i] - a[i];
  return s / 2.0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The element-wise median of the ranks' normalised histograms, renormalised:
 * with three or more ranks one odd rank does not move it. */
static int median_hist(const rank_info *ri, size_t n, double *out) {
  double *col = malloc(n * sizeof *col), sum = 0.0;
  size_t b, i;

  if (col == NULL)
    return AA_ENOMEM;
  for (b = 0; b < AA_HIST_BUCKETS; b++) {
    for (i = 0; i < n; i++)
      col[i] = ri[i].p[b];
    qsort(col, n, sizeof *col, cmp_double);
    out[b] = n % 2 == 1 ? col[n / 2] : (col[n / 2 - 1] + col[n / 2]) / 2.0;
    sum += out[b];
  }
  for (b = 0; b < AA_HIST_BUCKETS; b++)
    out[b] = sum > 0 ? out[b] / sum : 0.0;
  free(col);
  return AA_OK;
}

static void fmt_top(char *buf, size_t cap, const top_entry *t) {
  char a[32], b[32];

  if (t->upper == t->size) {
    snprintf(buf, cap, "%llu", (unsigned long long)t->size);
  } else {
    snprintf(a, sizeof a, "%llu", (unsigned long long)t->size);
    if (t->upper == UINT64_MAX)
      snprintf(b, sizeof b, "max");
    else
      snprintf(b, sizeof b, "%llu", (unsigned long long)t->upper);
    snprintf(buf, cap, "%s-%s", a, b);
  }
}

static void print_ranks_json(const rank_info *ri, size_t n, double **pair,
                             double threshold) {
  size_t i, j;
  bool first = true;

  printf("{\"command\":\"ranks\",\"threshold\":%.6g,\"databases\":[",
         threshold);
  for (i = 0; i < n; i++) {
    const rank_info *r = &ri[i];
    printf("%s{\"path\":", i > 0 ? "," : "");
    print_json_string(stdout, r->path);
    printf(",\"run\":%lld,\"rank\":", (long long)r->meta.run_id);
    if (r->meta.rank >= 0)
      printf("%lld", (long long)r->meta.rank);
    else
      printf("null");
    printf(",\"model\":");
    print_json_string(stdout, r->meta.model);
    printf(",\"host\":");
    print_json_string(stdout, r->meta.host);
    printf(",\"source\":\"%s\",\"requests\":%llu,\"distance\":%.6f,"
           "\"differs\":%s,\"top\":[",
           r->source,
           (unsigned long long)r->total, r->distance,
           r->differs ? "true" : "false");
    for (j = 0; j < r->ntop; j++)
      printf("%s{\"size\":%llu,\"upper\":%llu,\"exact\":%s,\"count\":%llu,"
             "\"share\":%.6f}",
             j > 0 ? "," : "",
             (unsigned long long)r->top[j].size,
             (unsigned long long)r->top[j].upper,
             r->top[j].upper == r->top[j].size ? "true" : "false",
             (unsigned long long)r->top[j].count,
             (double)r->top[j].count / (double)r->total);
    printf("]}");
  }
  printf("],\"pairwise\":[");
  for (i = 0; i < n; i++) {
    printf("%s[", i > 0 ? "," : "");
    for (j = 0; j < n; j++)
      printf("%s%.6f", j > 0 ? "," : "", pair[i][j]);
    printf("]");
  }
  printf("],\"differing\":[");
  for (i = 0; i < n; i++)
    if (ri[i].differs) {
      printf("%s%zu", first ? "" : ",", i);
      first = false;
    }
  printf("]}\n");
}

#define RANKS_MATRIX_MAX 32 /* wider pairwise matrices only in --json */

static void print_ranks_text(const rank_info *ri, size_t n, double **pair,
                             double threshold) {
  size_t i, j, nd = 0;

  for (i = 0; i < n; i++) {
    const rank_info *r = &ri[i];
    bool same = strcmp(r->label, base_of(r->path)) == 0;
    char rk[32];

    if (r->meta.rank >= 0)
      snprintf(rk, sizeof rk, "%lld", (long long)r->meta.rank);
    else
      snprintf(rk, sizeof rk, "none");
    printf("%s%s%s  run %lld  rank %s  model %s%s%s  (%s, %llu requests)\n",
           r->label, same ? "" : "  ", same ? "" : r->path,
           (long long)r->meta.run_id, rk,
           r->meta.model[0] != '\0' ? r->meta.model : "-",
           r->meta.host[0] != '\0' ? "  host " : "", r->meta.host, r->source,
           (unsigned long long)r->total);
    printf("  distance to the median rank %.3f%s\n", r->distance,
           r->differs ? "  <-- DIFFERS" : "");
    printf("  top sizes:");
    for (j = 0; j < r->ntop; j++) {
      char sz[64];
      fmt_top(sz, sizeof sz, &r->top[j]);
      printf("%s %s B %.1f %%", j > 0 ? "," : "", sz,
             100.0 * (double)r->top[j].count / (double)r->total);
    }
    printf("\n\n");
  }
  if (n <= RANKS_MATRIX_MAX) {
    printf("pairwise distance (half the L1 distance of the normalised "
           "histograms: 0 same shape, 1 nothing in common)\n%-12s",
           "");
    for (j = 0; j < n; j++)
      printf(" %10.10s", ri[j].label);
    printf("\n");
    for (i = 0; i < n; i++) {
      printf("%-12.12s", ri[i].label);
      for (j = 0; j < n; j++)
        printf(" %10.3f", pair[i][j]);
      printf("\n");
    }
  } else {
    printf("(pairwise distances of more than %d databases: see --json)\n",
           RANKS_MATRIX_MAX);
  }
  for (i = 0; i < n; i++)
    nd += ri[i].differs;
  if (nd == 0) {
    printf("\nno rank differs from the median rank by more than %.3f\n",
           threshold);
  } else {
    printf("\n%zu of %zu differ from the median rank by more than %.3f:", nd,
           n, threshold);
    for (i = 0; i < n; i++)
      if (ri[i].differs)
        printf(" %s (%s run %lld, %.3f)", ri[i].label, ri[i].path,
               (long long)ri[i].meta.run_id, ri[i].distance);
    printf("\n");
    if (n == 2)
      printf("(with two databases the median is their mean: which one is odd "
             "cannot be told; add a third rank)\n");
  }
}

int cmd_ranks(const char *const *dbs, const int64_t *runs, size_t n,
              const char *hist_pool, bool from_histogram, size_t top,
              double threshold, bool json) {
  rank_info *ri = NULL;
  double **pair = NULL, med[AA_HIST_BUCKETS];
  char err[1024];
  size_t i, j;
  int rc = EXIT_OK;

  ri = calloc(n, sizeof *ri);
  pair = calloc(n, sizeof *pair);
  if (ri == NULL || pair == NULL)
    goto oom;
  for (i = 0; i < n; i++) {
    pair[i] = calloc(n, sizeof **pair);
    if (pair[i] == NULL)
      goto oom;
  }
  for (i = 0; i < n; i++) {
    int r;
    ri[i].path = dbs[i];
    r = read_rank(&ri[i], runs[i], hist_pool, from_histogram, top, err,
                  sizeof err);
    if (r != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s\n", err);
      rc = r == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
      goto out;
    }
    db_label(ri[i].path, &ri[i].meta, ri[i].label, sizeof ri[i].label);
  }
  if (median_hist(ri, n, med) != AA_OK)
    goto oom;
  for (i = 0; i < n; i++) {
    ri[i].distance = half_l1(ri[i].p, med);
    ri[i].differs = n > 1 && ri[i].distance > threshold;
    for (j = 0; j < n; j++)
      pair[i][j] = i == j ? 0.0 : half_l1(ri[i].p, ri[j].p);
  }
  if (json)
    print_ranks_json(ri, n, pair, threshold);
  else
    print_ranks_text(ri, n, pair, threshold);
  goto out;
oom:
  fprintf(stderr, "adaptalloc-replay: out of memory\n");
  rc = EXIT_INTERNAL;
out:
  if (pair != NULL)
    for (i = 0; i < n; i++)
      free(pair[i]);
  free(pair);
  if (ri != NULL)
    for (i = 0; i < n; i++)
      free(ri[i].top);
  free(ri);
  return rc;
}
