/*
 * test_runtime_oom.c — the runtime's out-of-memory records (runtime_oom.c):
 * a runtime host pool driven to OOM gives aa_runtime_last_oom the record and
 * the store's `ooms` table a row at the next tick; the allocation's result
 * is NULL and the pool works on; GET /oom serves the record, with ?limit=
 * the stored ones too, and refuses a bad query with 400.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "adaptalloc/runtime.h"
#include "adaptalloc/store.h"
#include "metrics_sample.h"
#include "loopback_get.h"

#define MiB ((size_t)1 << 20)

static char g_db[256];

/* A 1 MiB block live, then a 16 MiB request over the 4 MiB limit. */
static void drive(void) {
  aa_pool *pool = aa_runtime_pool(AA_BACKEND_HOST, 0);
  assert_non_null(pool);
  aa_pool_set_limit(pool, 4 * MiB);
  void *live = aa_alloc(pool, 1 * MiB, NULL);
  assert_non_null(live);
  assert_null(aa_alloc(pool, 16 * MiB, NULL));
  void *p = aa_alloc(pool, 2 * MiB, NULL); /* works on under the limit */
  assert_non_null(p);
  assert_int_equal(aa_free(pool, p, 0, NULL), AA_OK);
  assert_int_equal(aa_free(pool, live, 0, NULL), AA_OK);
}

/* GET path from the runtime's server; the whole answer into buf. */
static void http_get(const char *path, char *buf, size_t cap) {
  loopback_get(runtime_http_port(), path, buf, cap);
}

static void test_runtime_oom_recorded(void **state) {
  (void)state;
  aa_oom_info o;
  uint64_t total = 99;
  assert_int_equal(aa_runtime_last_oom(&o, &total), AA_ENOENT);
  assert_int_equal(total, 0);
  char *json = NULL;
  size_t len = 0;
  assert_int_equal(aa_runtime_oom_json(&json, &len), AA_OK);
  assert_string_equal(json, "{\"count\":0,\"last\":null}");
  free(json);
  static char resp[1 << 20];
  /* before any: /stats says null, the metric 0 */
  (void)aa_runtime_pool(AA_BACKEND_HOST, 0);
  http_get("/stats", resp, sizeof resp);
  assert_non_null(strstr(resp, ",\"last_oom\":null}"));
  assert_non_null(strstr(resp, "\"ooms\":0,"));
  assert_non_null(strstr(resp, "\"last_oom_unix_ms\":0"));
  http_get("/metrics", resp, sizeof resp);
  char v[64];
  assert_string_equal(sample_value(resp,
                                   "adaptalloc_last_oom_timestamp_seconds{pool=\"host\","
                                   "backend=\"host\",device=\"cpu\"",
                                   v, sizeof v),
                      "0.000");

  drive();
  assert_int_equal(aa_runtime_last_oom(&o, &total), AA_OK);
  assert_int_equal(total, 1);
  assert_int_equal(o.request, 16 * MiB);
  assert_int_equal(o.limit_bytes, 4 * MiB);
  assert_string_equal(o.pool, "host");
  assert_int_equal(aa_runtime_oom_json(&json, &len), AA_OK);
  assert_int_equal(strlen(json), len);
  assert_non_null(strstr(json, "{\"count\":1,\"last\":{\"version\":2,\"pool\":\"host\""));
  /* what was live: the 1 MiB block; the request; the segments */
  assert_int_equal(o.nlive, 1);
  assert_int_equal(o.live[0].size, 1 * MiB);
  assert_int_equal(o.live[0].count, 1);
  assert_true(o.segments >= 1);
  assert_non_null(strstr(json, "\"live_sizes\":[{\"size\":1048576,\"count\":1}]"));
  free(json);

  /* /stats: the pool's count and time, the record as "last_oom" */
  char want[128];
  usleep(150 * 1000); /* past the server's 100 ms /stats cache */
  http_get("/stats", resp, sizeof resp);
  assert_non_null(strstr(resp, "200 OK"));
  assert_non_null(strstr(resp, "\"ooms\":1,"));
  snprintf(want, sizeof want, "\"last_oom_unix_ms\":%llu", (unsigned long long)o.unix_ms);
  assert_non_null(strstr(resp, want));
  assert_non_null(strstr(resp, ",\"last_oom\":{\"version\":2,\"pool\":\"host\""));
  assert_non_null(strstr(resp, "\"request\":16777216,"));
  assert_non_null(strstr(resp, "\"live_sizes\":[{\"size\":1048576,\"count\":1}]}}"));
  http_get("/stats?pool=host", resp, sizeof resp);
  assert_non_null(strstr(resp, ",\"last_oom\":{\"version\":2,\"pool\":\"host\""));
  /* /metrics: the count per pool, the time in seconds */
  http_get("/metrics", resp, sizeof resp);
  assert_string_equal(sample_value(resp,
                                   "adaptalloc_ooms_total{pool=\"host\",backend=\"host\","
                                   "device=\"cpu\"",
                                   v, sizeof v),
                      "1");
  snprintf(want, sizeof want, "%llu.%03llu", (unsigned long long)(o.unix_ms / 1000),
           (unsigned long long)(o.unix_ms % 1000));
  assert_string_equal(sample_value(resp,
                                   "adaptalloc_last_oom_timestamp_seconds{pool=\"host\","
                                   "backend=\"host\",device=\"cpu\"",
                                   v, sizeof v),
                      want);

  http_get("/oom", resp, sizeof resp);
  assert_non_null(strstr(resp, "200 OK"));
  assert_non_null(strstr(resp, "{\"count\":1,\"last\":{\"version\":2"));
  assert_null(strstr(resp, "\"stored\""));
  http_get("/oom?limit=0", resp, sizeof resp);
  assert_non_null(strstr(resp, " 400 "));
  http_get("/oom?bogus=1", resp, sizeof resp);
  assert_non_null(strstr(resp, " 400 "));
  http_get("/oom?limit=5", resp, sizeof resp);
  assert_non_null(strstr(resp, "200 OK"));
  assert_non_null(strstr(resp, ",\"stored\":{\"run\":"));

  /* a storm: more records between two ticks than the runtime keeps; each
   * is stored or counted (issue #39 class 5) */
  aa_pool *pool = aa_runtime_pool(AA_BACKEND_HOST, 0);
  for (int i = 0; i < 200; i++)
    assert_null(aa_alloc(pool, 16 * MiB, NULL));
  assert_int_equal(aa_runtime_last_oom(&o, &total), AA_OK);
  assert_int_equal(total, 201);
  http_get("/metrics", resp, sizeof resp);
  assert_non_null(strstr(resp, "\nadaptalloc_store_ooms_dropped_total{"));
  assert_non_null(strstr(resp, "\nadaptalloc_store_ooms_written_total{"));
  http_get("/stats", resp, sizeof resp);
  assert_non_null(strstr(resp, "\"ooms_dropped\":"));

  aa_runtime_shutdown(); /* the final tick hands the record to the store */
  aa_store_query q;
  aa_store_query_init(&q);
  assert_int_equal(aa_store_ooms_json(g_db, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"request\":16777216"));
  free(json);
  /* the run's row: written + dropped = every record the pools reported */
  assert_int_equal(aa_store_runs_json(g_db, 1, &json), AA_OK);
  const char *w = strstr(json, "\"ooms_written\":");
  const char *d = strstr(json, "\"ooms_dropped\":");
  if (w == NULL || d == NULL)
    fail_msg("the run row has no ooms_written/ooms_dropped: %s", json);
  unsigned long long written = strtoull(w + strlen("\"ooms_written\":"), NULL, 10);
  unsigned long long dropped = strtoull(d + strlen("\"ooms_dropped\":"), NULL, 10);
  if (written + dropped != 201 || dropped == 0)
    fail_msg("%llu written + %llu dropped, of 201 records", written, dropped);
  free(json);
}

int main(void) {
  snprintf(g_db, sizeof g_db, "/tmp/aa_runtime_oom_%d.db", (int)getpid());
  unlink(g_db);
  setenv("ADAPTALLOC_QUIET", "1", 1);
  setenv("ADAPTALLOC_HTTP", "127.0.0.1:0", 1);
  setenv("ADAPTALLOC_DB", g_db, 1);
  unsetenv("ADAPTALLOC_POLICY");
  setenv("ADAPTALLOC_POLICY_DIR", "/nonexistent-adaptalloc-policies", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_oom_recorded),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char side[300];
  unlink(g_db);
  snprintf(side, sizeof side, "%s-wal", g_db);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", g_db);
  unlink(side);
  return rc;
}
