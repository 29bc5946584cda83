/*
 * test_http_metrics.c — the Prometheus renderer (aa_http_render_metrics):
 * families with HELP and TYPE once each, labels and their escaping, exact
 * cumulative histogram buckets built from core's quarter-doubling buckets
 * (le inclusive, +Inf equal to _count), the approximate _sum, snapshots of a
 * real pool, and `promtool check metrics` when promtool is installed; the
 * JSON of GET /segments and GET /holders from real pools.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core_test.h" /* core: the host backend's test hooks */

#include "adaptalloc/core.h"
#include "adaptalloc/http.h"
#include "http_test.h" /* the server's internals */

static void init_pool(aa_pool_stats *st, const char *name, const char *backend,
                      int device) {
  memset(st, 0, sizeof *st);
  st->version = AA_STATS_VERSION;
  st->size = sizeof *st;
  snprintf(st->name, sizeof st->name, "%s", name);
  snprintf(st->backend, sizeof st->backend, "%s", backend);
  st->device = device;
  st->telemetry = 1;
}

/* The value of the sample whose line starts with prefix (-1 if none). */
static double sample(const char *text, const char *prefix) {
  const char *p = text;
  size_t n = strlen(prefix);
  while (p != NULL && *p != '\0') {
    if (strncmp(p, prefix, n) == 0 && p[n] == ' ')
      return strtod(p + n + 1, NULL);
    p = strchr(p, '\n');
    if (p != NULL)
      p++;
  }
  return -1;
}

static size_t count_lines(const char *text, const char *prefix) {
  size_t c = 0;
  const char *p = text;
  size_t n = strlen(prefix);
  while (p != NULL && *p != '\0') {
    if (strncmp(p, prefix, n) == 0)
      c++;
    p = strchr(p, '\n');
    if (p != NULL)
      p++;
  }
  return c;
}

static void promtool_check(const char *text) {
  const char *promtool = "/usr/bin/promtool";
  char path[] = "/tmp/aa_http_prom_XXXXXX";
  char cmd[256];
  int fd;
  int st;
  size_t len = strlen(text);
  if (access(promtool, X_OK) != 0) {
    print_message("promtool not installed: skipping promtool check metrics\n");
    return;
  }
  fd = mkstemp(path);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, len), (ssize_t)len);
  close(fd);
  snprintf(cmd, sizeof cmd, "%s check metrics < %s", promtool, path);
  st = system(cmd);
  unlink(path);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
    fail_msg("promtool check metrics failed on:\n%s", text);
}

static void test_http_metrics_families_and_labels(void **state) {
  aa_pool_stats p[2];
  char *text = NULL;
  size_t len = 0;
  (void)state;
  init_pool(&p[0], "device0", "cuda", 0);
  init_pool(&p[1], "we\"ird\\name\n", "host", -1);
  p[0].bytes_in_use = 123456;
  p[0].allocs = 77;
  p[0].backend_ns = 1500000001;
  p[0].large_misses = 4;
  p[0].large_plan_ns = 250000000;
  p[0].large_plan_stall_max_ns = 120000;
  p[0].large_alias_maps = 9;
  p[0].large_alias_runs = 2;
  p[0].large_stitch_new_bytes = 6291456;
  p[0].large_alias_ns = 1500000000;
  p[0].large_stitch_deferred = 4;
  p[0].ooms = 3;
  p[0].last_oom_unix_ms = 1764930000042;
  p[0].class_count = 2;
  p[0].classes[0].block_size = 512;
  p[0].classes[0].hits = 5;
  p[0].classes[1].block_size = 1024;
  p[0].classes[1].slabs = 3;
  assert_int_equal(aa_http_render_metrics(p, 2, &text, &len), AA_OK);
  assert_non_null(text);
  assert_int_equal(strlen(text), len);
  /* one HELP and one TYPE per family */
  assert_int_equal(count_lines(text, "# TYPE adaptalloc_in_use_bytes "), 1);
  assert_int_equal(count_lines(text, "# HELP adaptalloc_in_use_bytes "), 1);
  assert_int_equal(count_lines(text, "adaptalloc_in_use_bytes{"), 2);
  assert_true(sample(text, "adaptalloc_in_use_bytes{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 123456);
  assert_true(sample(text, "adaptalloc_allocs_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 77);
  /* time in seconds, as a counter; the large path's misses */
  assert_non_null(strstr(text, "# TYPE adaptalloc_backend_seconds_total counter\n"));
  assert_non_null(strstr(text, "adaptalloc_backend_seconds_total{pool=\"device0\","
                               "backend=\"cuda\",device=\"0\"} 1.500000001\n"));
  assert_true(sample(text, "adaptalloc_large_misses_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 4);
  /* stitching: handles aliased, and the ranges made in one call each */
  assert_true(sample(text, "adaptalloc_large_alias_maps_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 9);
  assert_non_null(strstr(text, "# TYPE adaptalloc_large_alias_runs_total counter\n"));
  assert_true(sample(text, "adaptalloc_large_alias_runs_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 2);
  assert_non_null(strstr(text, "# TYPE adaptalloc_large_stitch_new_bytes_total counter\n"));
  assert_true(sample(text, "adaptalloc_large_stitch_new_bytes_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 6291456);
  /* stitching's time budget: its calls' time in seconds, the ranges deferred */
  assert_non_null(strstr(text, "# TYPE adaptalloc_large_alias_seconds_total counter\n"));
  assert_true(sample(text, "adaptalloc_large_alias_seconds_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 1.5);
  assert_non_null(strstr(text, "# TYPE adaptalloc_large_stitch_deferred_total counter\n"));
  assert_true(sample(text, "adaptalloc_large_stitch_deferred_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 4);
  /* the learned plan's planning time and stall: gauges in seconds */
  assert_non_null(strstr(text, "# TYPE adaptalloc_large_plan_seconds gauge\n"));
  assert_non_null(strstr(text, "adaptalloc_large_plan_seconds{pool=\"device0\","
                               "backend=\"cuda\",device=\"0\"} 0.250000000\n"));
  assert_non_null(strstr(text, "# TYPE adaptalloc_large_plan_stall_max_seconds gauge\n"));
  assert_non_null(strstr(text, "adaptalloc_large_plan_stall_max_seconds{pool=\"device0\","
                               "backend=\"cuda\",device=\"0\"} 0.000120000\n"));
  /* out of memory: the count per pool, and when the last one was, a gauge
   * of Unix time in seconds (0: never) */
  assert_true(sample(text, "adaptalloc_ooms_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 3);
  assert_non_null(strstr(text, "# TYPE adaptalloc_last_oom_timestamp_seconds gauge\n"));
  assert_non_null(strstr(text, "adaptalloc_last_oom_timestamp_seconds{pool=\"device0\","
                               "backend=\"cuda\",device=\"0\"} 1764930000.042\n"));
  assert_non_null(strstr(text, "adaptalloc_last_oom_timestamp_seconds{pool=\"we\\\"ird\\\\name"
                               "\\n\",backend=\"host\",device=\"cpu\"} 0.000\n"));
  /* escaping: quote, backslash, newline */
  assert_non_null(strstr(text, "pool=\"we\\\"ird\\\\name\\n\",backend=\"host\","
                               "device=\"cpu\""));
  /* per-class samples: every fixed size bucket of every pool, whatever the
   * class table holds, bounds inclusive and written like the request-size
   * histogram's le: 512 is in size_le="1023", 1024 in size_le="4095" */
  assert_int_equal(count_lines(text, "adaptalloc_class_slabs{"), 2 * 10);
  assert_true(sample(text, "adaptalloc_class_slabs{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\",size_le=\"1023\"}") == 0);
  assert_true(sample(text, "adaptalloc_class_slabs{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\",size_le=\"4095\"}") == 3);
  assert_true(sample(text, "adaptalloc_class_hits_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\",size_le=\"1023\"}") == 5);
  assert_true(sample(text, "adaptalloc_class_hits_total{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\",size_le=\"+Inf\"}") == 0);
  assert_true(sample(text, "adaptalloc_class_slabs{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\",size_le=\"+Inf\"}") == 0);
  assert_null(strstr(text, "size_le=\"1024\""));
  assert_null(strstr(text, "class=\""));
  /* counters end in _total, gauges do not */
  assert_non_null(strstr(text, "# TYPE adaptalloc_cache_hits_total counter\n"));
  assert_non_null(strstr(text, "# TYPE adaptalloc_reserved_bytes gauge\n"));
  promtool_check(text);
  free(text);
}

/* A region's pool carries a region label after the three others; a backend's
 * own pool has none (its series keep their label set). */
static void test_http_metrics_region_label(void **state) {
  aa_pool_stats p[2];
  char *text = NULL;
  size_t len = 0;
  (void)state;
  init_pool(&p[0], "device0", "cuda", 0);
  init_pool(&p[1], "device0:kv_cache", "cuda", 0);
  snprintf(p[1].region, sizeof p[1].region, "kv_cache");
  p[0].bytes_reserved = 4096;
  p[1].bytes_reserved = 8192;
  assert_int_equal(aa_http_render_metrics(p, 2, &text, &len), AA_OK);
  assert_true(sample(text, "adaptalloc_reserved_bytes{pool=\"device0\","
                           "backend=\"cuda\",device=\"0\"}") == 4096);
  assert_true(sample(text, "adaptalloc_reserved_bytes{pool=\"device0:kv_cache\","
                           "backend=\"cuda\",device=\"0\",region=\"kv_cache\"}") == 8192);
  assert_non_null(strstr(text, "region=\"kv_cache\",size_le=\"1023\"}"));
  assert_int_equal(count_lines(text, "adaptalloc_reserved_bytes{"), 2);
  promtool_check(text);
  free(text);
}

static void test_http_metrics_histogram_exact(void **state) {
  aa_pool_stats p;
  char *text = NULL;
  size_t len = 0;
  static const size_t sizes[] = {1, 3, 511, 512, 513, 1023, 1024, 3000, 4096,
                                 65535, 65536, 1u << 20, (1u << 20) + 1,
                                 (size_t)1 << 33};
  size_t i;
  uint64_t want_le_1023 = 0;
  uint64_t want_le_65535 = 0;
  double prev = -1;
  const char *line;
  const char *pfx = "adaptalloc_request_size_bytes_bucket{pool=\"h\","
                    "backend=\"host\",device=\"cpu\",le=\"";
  (void)state;
  init_pool(&p, "h", "host", -1);
  for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    p.hist[aa_hist_bucket(sizes[i])] += 10;
    if (sizes[i] <= 1023)
      want_le_1023 += 10;
    if (sizes[i] <= 65535)
      want_le_65535 += 10;
  }
  assert_int_equal(aa_http_render_metrics(&p, 1, &text, &len), AA_OK);
  {
    char key[256];
    snprintf(key, sizeof key, "%s1023\"}", pfx);
    assert_true(sample(text, key) == (double)want_le_1023);
    snprintf(key, sizeof key, "%s65535\"}", pfx);
    assert_true(sample(text, key) == (double)want_le_65535);
    snprintf(key, sizeof key, "%s511\"}", pfx);
    assert_true(sample(text, key) == 30); /* 1, 3, 511 */
    snprintf(key, sizeof key, "%s+Inf\"}", pfx);
    assert_true(sample(text, key) == 10.0 * (double)(sizeof sizes / sizeof sizes[0]));
  }
  assert_true(sample(text, "adaptalloc_request_size_bytes_count{pool=\"h\","
                           "backend=\"host\",device=\"cpu\"}") ==
              10.0 * (double)(sizeof sizes / sizeof sizes[0]));
  /* cumulative: never decreasing */
  for (line = strstr(text, pfx); line != NULL; line = strstr(line + 1, pfx)) {
    const char *v = strchr(line, '}');
    double d = strtod(v + 2, NULL);
    assert_true(d >= prev);
    prev = d;
  }
  /* the sum is approximate but close: every request within its bucket */
  {
    double exact = 0;
    double sum = sample(text, "adaptalloc_request_size_bytes_sum{pool=\"h\","
                              "backend=\"host\",device=\"cpu\"}");
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
      exact += 10.0 * (double)sizes[i];
    assert_true(sum > exact * 0.85 && sum < exact * 1.15);
  }
  promtool_check(text);
  free(text);
}

static void test_http_metrics_edge_cases(void **state) {
  aa_pool_stats *p;
  char *text = (char *)"x";
  size_t len = 9;
  (void)state;
  /* no pools: still valid exposition (HELP/TYPE only) */
  assert_int_equal(aa_http_render_metrics(NULL, 0, &text, &len), AA_OK);
  assert_non_null(text);
  assert_null(strstr(text, "{"));
  promtool_check(text);
  free(text);
  assert_int_equal(aa_http_render_metrics(NULL, 1, &text, &len), AA_EINVAL);
  assert_null(text);
  assert_int_equal(len, 0);
  assert_int_equal(aa_http_render_metrics(NULL, 0, NULL, NULL), AA_EINVAL);
  /* garbage counts are clamped, names without NUL are bounded */
  p = calloc(1, sizeof *p);
  assert_non_null(p);
  memset(p->name, 'n', sizeof p->name);
  memset(p->backend, 'b', sizeof p->backend);
  p->class_count = 100000;
  p->hist[AA_HIST_BUCKETS - 1] = UINT64_MAX / 4;
  assert_int_equal(aa_http_render_metrics(p, 1, &text, &len), AA_OK);
  assert_int_equal(count_lines(text, "adaptalloc_class_slabs{"), 10);
  free(text);
  free(p);
}

static void set_label(aa_http_labels *l, const char *name, const char *value) {
  snprintf(l->name[l->n], sizeof l->name[0], "%s", name);
  snprintf(l->value[l->n], sizeof l->value[0], "%s", value);
  l->n++;
}

/* A provider's labels go on every series of their pool, after the server's
 * own, escaped; a name that is not a label name, is reserved or is the
 * server's own, an empty value and a second use of a name are left out. */
static void test_http_metrics_provider_labels(void **state) {
  aa_pool_stats *p = calloc(2, sizeof *p);
  aa_http_labels *l = calloc(2, sizeof *l);
  char *text = NULL;
  size_t len = 0;
  const char *want = "{pool=\"device0\",backend=\"cuda\",device=\"0\",rank=\"3\","
                     "host=\"n\\\"7\",gpu_uuid=\"GPU-0a1b\",pci_bus_id=\"00000000:3B:00.0\"";
  (void)state;
  assert_non_null(p);
  assert_non_null(l);
  init_pool(&p[0], "device0", "cuda", 0);
  init_pool(&p[1], "host", "host", -1);
  p[0].bytes_reserved = 4096;
  set_label(&l[0], "rank", "3");
  set_label(&l[0], "host", "n\"7");
  set_label(&l[0], "__x", "no");
  set_label(&l[0], "pool", "no");
  set_label(&l[0], "1bad", "no");
  set_label(&l[0], "gpu_uuid", "GPU-0a1b");
  set_label(&l[0], "empty", "");
  set_label(&l[0], "rank", "4");
  set_label(&l[1], "rank", "3");
  assert_int_equal(aa__http_render_metrics_labeled(p, 2, l, NULL, &text, &len), AA_OK);
  assert_null(strstr(text, "\"no\""));
  assert_null(strstr(text, "empty="));
  assert_null(strstr(text, "rank=\"4\""));
  assert_null(strstr(text, "pci_bus_id")); /* not set yet: see below */
  assert_true(sample(text, "adaptalloc_reserved_bytes{pool=\"host\",backend=\"host\","
                           "device=\"cpu\",rank=\"3\"}") == 0);
  free(text);
  l[0].n = 4; /* rank, host and the two refused */
  set_label(&l[0], "gpu_uuid", "GPU-0a1b");
  set_label(&l[0], "pci_bus_id", "00000000:3B:00.0");
  assert_int_equal(aa__http_render_metrics_labeled(p, 2, l, NULL, &text, &len), AA_OK);
  {
    char line[512];
    snprintf(line, sizeof line, "adaptalloc_reserved_bytes%s}", want);
    assert_true(sample(text, line) == 4096);
    snprintf(line, sizeof line, "adaptalloc_class_slabs%s,size_le=\"4095\"}", want);
    assert_true(sample(text, line) == 0);
    snprintf(line, sizeof line, "adaptalloc_request_size_bytes_bucket%s,le=\"+Inf\"}", want);
    assert_true(sample(text, line) == 0);
  }
  promtool_check(text);
  free(text);
  free(l);
  free(p);
}

static void test_http_metrics_real_pool(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  aa_pool_stats *st;
  void *ptrs[64];
  char *text = NULL;
  size_t len = 0;
  int i;
  (void)state;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = "host";
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  for (i = 0; i < 64; i++) {
    ptrs[i] = aa_alloc(pool, (size_t)(100 + i * 700), NULL);
    assert_non_null(ptrs[i]);
  }
  for (i = 0; i < 32; i++)
    assert_int_equal(aa_free(pool, ptrs[i], 0, NULL), AA_OK);
  st = malloc(sizeof *st);
  assert_non_null(st);
  assert_int_equal(aa_pool_stats_get(pool, st), AA_OK);
  assert_int_equal(aa_http_render_metrics(st, 1, &text, &len), AA_OK);
  assert_true(sample(text, "adaptalloc_allocs_total{pool=\"host\","
                           "backend=\"host\",device=\"cpu\"}") == 64);
  assert_true(sample(text, "adaptalloc_frees_total{pool=\"host\","
                           "backend=\"host\",device=\"cpu\"}") == 32);
  assert_true(sample(text, "adaptalloc_request_size_bytes_count{pool=\"host\","
                           "backend=\"host\",device=\"cpu\"}") == 64);
  assert_true(count_lines(text, "adaptalloc_class_in_use_bytes{") >= 10);
  promtool_check(text);
  free(text);
  free(st);
  for (i = 32; i < 64; i++)
    aa_free(pool, ptrs[i], 0, NULL);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

/* Sample lines (not comments) of a text, and a copy of their names and
 * labels without the values, one a line, for comparing series sets. */
static size_t series_of(const char *text, char *names, size_t cap) {
  size_t n = 0, o = 0;
  const char *p = text;
  while (*p != '\0') {
    const char *eol = strchr(p, '\n');
    const char *sp;
    size_t l = eol ? (size_t)(eol - p) : strlen(p);
    if (p[0] != '#' && l > 0) {
      n++;
      sp = memchr(p, ' ', l);
      if (sp != NULL && names != NULL && o + (size_t)(sp - p) + 2 < cap) {
        memcpy(names + o, p, (size_t)(sp - p));
        o += (size_t)(sp - p);
        names[o++] = '\n';
      }
    }
    p += l + (eol ? 1 : 0);
  }
  if (names != NULL)
    names[o] = '\0';
  return n;
}

/* A pool with 100 classes renders as many series as one with 3; a class
 * that retires keeps its counts in its bucket through the server's carry
 * (and loses them without it: the carry is what keeps the counter). */
static void test_http_metrics_bounded_and_stable(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  aa_pool_stats *st;
  aa__metrics_carry *carry;
  aa_class_spec spec;
  char *t1 = NULL, *t2 = NULL, *t3 = NULL, *tsmall = NULL;
  char *n1, *n2;
  size_t len, i, nseries;
  void *p;
  const char *key = "adaptalloc_class_allocs_total{pool=\"many\",backend=\"host\","
                    "device=\"cpu\",size_le=\"4095\"}";
  double before, after, stateless;
  (void)state;

  st = malloc(sizeof *st);
  n1 = malloc(1 << 20);
  n2 = malloc(1 << 20);
  carry = aa__metrics_carry_new();
  assert_non_null(st);
  assert_non_null(n1);
  assert_non_null(n2);
  assert_non_null(carry);
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = "many";
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  /* fill the table up to 100 classes (multiples of 512 up to 1 MiB) */
  memset(&spec, 0, sizeof spec);
  for (spec.block_size = 512; spec.block_size <= ((size_t)1 << 20);
       spec.block_size += 512) {
    assert_int_equal(aa_pool_stats_get(pool, st), AA_OK);
    if (st->class_count >= 100)
      break;
    (void)aa_pool_class_add(pool, &spec); /* AA_EEXIST for the ladder's own */
  }
  assert_int_equal(aa_pool_stats_get(pool, st), AA_OK);
  assert_int_equal(st->class_count, 100);
  /* one allocation in each class */
  for (i = 0; i < st->class_count; i++) {
    p = aa_alloc(pool, st->classes[i].block_size, NULL);
    assert_non_null(p);
    assert_int_equal(aa_free(pool, p, 0, NULL), AA_OK);
  }
  assert_int_equal(aa_pool_stats_get(pool, st), AA_OK);
  assert_int_equal(aa__http_render_metrics_carry(st, 1, carry, &t1, &len), AA_OK);
  nseries = series_of(t1, n1, 1 << 20);
  assert_int_equal(count_lines(t1, "adaptalloc_class_allocs_total{"), 10);
  before = sample(t1, key);
  assert_true(before >= 3); /* 1024 .. 3584 live in this bucket */

  /* retire 3072 (drained: its one block was freed) and allocate from 3584 */
  (void)aa_pool_release(pool);
  assert_int_equal(aa_pool_class_retire(pool, 3072), AA_OK);
  (void)aa_pool_release(pool);
  p = aa_alloc(pool, 3584, NULL);
  assert_non_null(p);
  assert_int_equal(aa_free(pool, p, 0, NULL), AA_OK);
  assert_int_equal(aa_pool_stats_get(pool, st), AA_OK);
  for (i = 0; i < st->class_count; i++)
    assert_true(st->classes[i].block_size != 3072); /* gone from the table */
  assert_int_equal(aa__http_render_metrics_carry(st, 1, carry, &t2, &len), AA_OK);
  assert_int_equal(aa_http_render_metrics(st, 1, &t3, &len), AA_OK);
  /* the same series, no more, no fewer */
  assert_int_equal(series_of(t2, n2, 1 << 20), nseries);
  assert_string_equal(n1, n2);
  after = sample(t2, key);
  stateless = sample(t3, key);
  assert_true(after == before + 1); /* 3072's count stayed, 3584's grew */
  assert_true(stateless == before); /* without the carry: -1 +1 */

  /* a pool with its default ladder only: the same number of series */
  {
    aa_pool_stats *one = calloc(1, sizeof *one);
    assert_non_null(one);
    memcpy(one, st, sizeof *one);
    one->class_count = 3;
    assert_int_equal(aa_http_render_metrics(one, 1, &tsmall, &len), AA_OK);
    assert_int_equal(series_of(tsmall, NULL, 0), nseries);
    free(one);
  }
  promtool_check(t2);
  free(t1);
  free(t2);
  free(t3);
  free(tsmall);
  free(n1);
  free(n2);
  free(st);
  aa__metrics_carry_free(carry);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

/* With stitching: the stitched range is a segment of its own marked
 * "stitched", the pages it maps again are pieces marked 2 (lent), and
 * "bytes" counts that memory once (the sum of the other segments). */
static void test_http_segments_json_stitched(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  void *hole[3], *keep[3], *x;
  char *json = NULL;
  size_t len = 0;
  (void)state;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  assert_int_equal(aa_backend_host_aliasable(b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = "st";
  cfg.large_mode = AA_LARGE_EXPANDABLE;
  cfg.large_stitch = 1;
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  for (int i = 0; i < 3; i++) {
    hole[i] = aa_alloc(pool, (size_t)6 << 20, NULL);
    keep[i] = aa_alloc(pool, (size_t)3 << 20, NULL);
    assert_non_null(hole[i]);
    assert_non_null(keep[i]);
  }
  for (int i = 0; i < 3; i++)
    assert_int_equal(aa_free(pool, hole[i], 0, NULL), AA_OK);
  x = aa_alloc(pool, (size_t)10 << 20, NULL);
  assert_non_null(x);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(pool, &st), AA_OK);
  assert_int_equal(st.large_stitched_ranges, 1);
  assert_int_equal(aa_http_segments_json(pool, &json, &len), AA_OK);
  assert_non_null(strstr(json, "\"stitched\":true"));
  assert_non_null(strstr(json, ",2]"));
  const char *p = strstr(json, "\"bytes\":");
  assert_non_null(p);
  assert_int_equal(strtoull(p + 8, NULL, 10), st.large_bytes_reserved);
  free(json);
  assert_int_equal(aa_free(pool, x, 0, NULL), AA_OK);
  for (int i = 0; i < 3; i++)
    assert_int_equal(aa_free(pool, keep[i], 0, NULL), AA_OK);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

/* A pool in expandable mode places requests of at most 1 MiB in a
 * reservation of their own: its runs say "small_requests":true, the larger
 * requests' false, so that the dashboard draws each reservation as a row. */
static void test_http_segments_json_small_region(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  char *json = NULL;
  size_t len = 0;
  (void)state;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = "two";
  cfg.max_small = 16 << 10;
  cfg.large_mode = AA_LARGE_EXPANDABLE;
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  void *big = aa_alloc(pool, (size_t)8 << 20, NULL);
  void *mid = aa_alloc(pool, (size_t)600 << 10, NULL);
  assert_non_null(big);
  assert_non_null(mid);
  assert_int_equal(aa_http_segments_json(pool, &json, &len), AA_OK);
  assert_non_null(strstr(json, "\"expandable\":true,\"stitched\":false,\"small_requests\":true"));
  assert_non_null(strstr(json, "\"expandable\":true,\"stitched\":false,\"small_requests\":false"));
  free(json);
  assert_int_equal(aa_free(pool, big, 0, NULL), AA_OK);
  assert_int_equal(aa_free(pool, mid, 0, NULL), AA_OK);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

/* GET /segments' JSON from a real pool: large segments only, pieces that
 * tile each segment, used bytes that add up, freed blocks shown free. */
static void test_http_segments_json(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  void *big[4], *small;
  char *json = NULL;
  size_t len = 0, i;
  const char *p;
  unsigned long long seg_total = 0, piece_total = 0, used_pieces = 0;
  unsigned long long used_bytes = 0, count = 0;
  (void)state;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = "seg";
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  for (i = 0; i < 4; i++) {
    big[i] = aa_alloc(pool, (size_t)(2 + i) << 20, NULL);
    assert_non_null(big[i]);
  }
  small = aa_alloc(pool, 4096, NULL); /* a slab: not listed */
  assert_non_null(small);
  assert_int_equal(aa_free(pool, big[1], 0, NULL), AA_OK);
  assert_int_equal(aa_http_segments_json(pool, &json, &len), AA_OK);
  assert_int_equal(strlen(json), len);
  assert_non_null(strstr(json, "{\"pool\":\"seg\","));
  assert_non_null(strstr(json, "\"truncated\":false"));
  p = strstr(json, "\"segment_count\":");
  assert_non_null(p);
  count = strtoull(p + 16, NULL, 10);
  assert_true(count >= 1);
  p = strstr(json, "\"used_bytes\":");
  used_bytes = strtoull(p + 13, NULL, 10);
  /* 2 + 4 + 5 MiB in use (the 3 MiB block was freed), rounded up to pages */
  assert_true(used_bytes >= (11ull << 20) && used_bytes < (12ull << 20));
  for (p = json; (p = strstr(p, "\"size\":")) != NULL; p++)
    seg_total += strtoull(p + 7, NULL, 10);
  for (p = json; (p = strstr(p, "\"pieces\":[")) != NULL;) {
    p += 10;
    while (*p == '[') {
      char *e;
      unsigned long long sz = strtoull(p + 1, &e, 10);
      int used = (int)strtol(e + 1, &e, 10);
      piece_total += sz;
      if (used)
        used_pieces += sz;
      p = e + 1;
      if (*p == ',')
        p++;
    }
  }
  assert_true(piece_total == seg_total); /* pieces tile the segments */
  assert_true(used_pieces == used_bytes);
  /* no heap address is served: segments are named by their place */
  assert_null(strstr(json, "address"));
  assert_null(strstr(json, "0x"));
  assert_non_null(strstr(json, "\"segments\":[{\"id\":0,"));
  {
    char hex[32];
    snprintf(hex, sizeof hex, "%llx", (unsigned long long)(uintptr_t)big[0]);
    hex[8] = '\0'; /* its high digits appear nowhere, in any form */
    assert_null(strstr(json, hex));
  }
  free(json);
  assert_int_equal(aa_http_segments_json(NULL, &json, &len), AA_EINVAL);
  assert_null(json);
  for (i = 0; i < 4; i++)
    if (i != 1)
      aa_free(pool, big[i], 0, NULL);
  aa_free(pool, small, 0, NULL);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

static unsigned long long field_u(const char *json, const char *key) {
  const char *p = strstr(json, key);
  assert_non_null(p);
  return strtoull(p + strlen(key), NULL, 10);
}

static size_t count_of(const char *json, const char *needle) {
  size_t n = 0;
  const char *p;
  for (p = json; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

/* GET /holders' JSON from a real pool: the requested sizes that hold the
 * most bytes, the largest live blocks first with their kind, freed blocks
 * gone, at most `top` rows each, no address served. */
static void test_http_holders_json(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  void *big[3], *small[20], *odd[7];
  char *json = NULL;
  size_t len = 0, i;
  const char *p;
  (void)state;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = "hold";
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  big[0] = aa_alloc(pool, 5u << 20, NULL);
  big[1] = aa_alloc(pool, 5u << 20, NULL);
  big[2] = aa_alloc(pool, 2u << 20, NULL);
  for (i = 0; i < 3; i++)
    assert_non_null(big[i]);
  for (i = 0; i < 20; i++)
    assert_non_null(small[i] = aa_alloc(pool, 4096, NULL));
  for (i = 0; i < 7; i++)
    assert_non_null(odd[i] = aa_alloc(pool, 1000, NULL));
  assert_int_equal(aa_free(pool, small[19], 0, NULL), AA_OK); /* gone */

  assert_int_equal(aa_http_holders_json(pool, 3, &json, &len), AA_OK);
  assert_int_equal(strlen(json), len);
  assert_non_null(strstr(json, "{\"pool\":\"hold\",\"top\":3,"));
  assert_int_equal(field_u(json, "\"live_blocks\":"), 3 + 19 + 7);
  assert_true(field_u(json, "\"live_bytes\":") >= (12ull << 20) + 19 * 4096 + 7 * 1000);
  assert_int_equal(field_u(json, "\"requested_bytes\":"),
                   (12ull << 20) + 19 * 4096 + 7 * 1000);
  assert_int_equal(field_u(json, "\"distinct_sizes\":"), 4);
  assert_non_null(strstr(json, "\"other\":{\"blocks\":0,\"bytes\":0}"));
  /* sizes: 5 MiB (two blocks), 2 MiB, then 4096 (19 blocks); 1000 cut */
  p = strstr(json, "\"top_sizes\":[");
  assert_non_null(p);
  assert_true(strncmp(p + 13, "{\"size\":5242880,\"blocks\":2,\"bytes\":", 35) == 0);
  assert_non_null(strstr(p, "{\"size\":2097152,\"blocks\":1,"));
  assert_non_null(strstr(p, "{\"size\":4096,\"blocks\":19,\"bytes\":"));
  assert_null(strstr(p, "{\"size\":1000,"));
  /* largest: the two 5 MiB blocks, then the 2 MiB one, of the large path */
  p = strstr(json, "\"largest\":[");
  assert_non_null(p);
  assert_int_equal(count_of(p, "{\"offset\":"), 3);
  assert_int_equal(count_of(p, "\"requested\":5242880,\"kind\":\"large\""), 2);
  assert_non_null(strstr(p, "\"requested\":2097152,\"kind\":\"large\",\"stitched\":false,"
                            "\"frames\":null,\"frames_evicted\":false}]}"));
  /* no heap address is served */
  assert_null(strstr(json, "address"));
  assert_null(strstr(json, "0x"));
  {
    char hex[32];
    snprintf(hex, sizeof hex, "%llx", (unsigned long long)(uintptr_t)big[0]);
    hex[8] = '\0';
    assert_null(strstr(json, hex));
  }
  free(json);
  json = NULL;

  /* top 1: one row each */
  assert_int_equal(aa_http_holders_json(pool, 1, &json, &len), AA_OK);
  assert_int_equal(count_of(json, "{\"offset\":"), 1);
  assert_int_equal(count_of(json, "{\"size\":"), 1);
  free(json);
  json = NULL;

  /* only slab blocks left: the largest are the slab's */
  for (i = 0; i < 3; i++)
    assert_int_equal(aa_free(pool, big[i], 0, NULL), AA_OK);
  assert_int_equal(aa_http_holders_json(pool, AA_HTTP_HOLDERS_MAX, &json, &len), AA_OK);
  assert_int_equal(field_u(json, "\"live_blocks\":"), 19 + 7);
  assert_int_equal(count_of(json, "{\"offset\":"), 19 + 7);
  assert_int_equal(count_of(json, "\"kind\":\"slab\""), 19 + 7);
  assert_non_null(strstr(json, "\"largest\":[{\"offset\":"));
  assert_non_null(strstr(json, ",\"requested\":4096,\"kind\":\"slab\""));
  free(json);
  json = NULL;

  /* bad arguments */
  assert_int_equal(aa_http_holders_json(NULL, 10, &json, &len), AA_EINVAL);
  assert_null(json);
  assert_int_equal(aa_http_holders_json(pool, 0, &json, &len), AA_EINVAL);
  assert_int_equal(aa_http_holders_json(pool, AA_HTTP_HOLDERS_MAX + 1, &json, &len),
                   AA_EINVAL);
  assert_null(json);
  assert_int_equal(len, 0);
  for (i = 0; i < 19; i++)
    aa_free(pool, small[i], 0, NULL);
  for (i = 0; i < 7; i++)
    aa_free(pool, odd[i], 0, NULL);
  /* an empty pool: nothing live */
  assert_int_equal(aa_http_holders_json(pool, 10, &json, &len), AA_OK);
  assert_non_null(strstr(json, "\"live_blocks\":0,\"live_bytes\":0,"));
  assert_non_null(strstr(json, "\"top_sizes\":[]"));
  assert_non_null(strstr(json, "\"largest\":[]}"));
  free(json);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_http_metrics_families_and_labels),
      cmocka_unit_test(test_http_metrics_histogram_exact),
      cmocka_unit_test(test_http_metrics_region_label),
      cmocka_unit_test(test_http_metrics_edge_cases),
      cmocka_unit_test(test_http_metrics_real_pool),
      cmocka_unit_test(test_http_metrics_bounded_and_stable),
      cmocka_unit_test(test_http_metrics_provider_labels),
      cmocka_unit_test(test_http_segments_json),
      cmocka_unit_test(test_http_segments_json_stitched),
      cmocka_unit_test(test_http_segments_json_small_region),
      cmocka_unit_test(test_http_holders_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
