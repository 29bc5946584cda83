/*
 * test_runtime_settings.c — one owner of each pool's settings, one path
 * (issue 35, item 2): the user's cap (aa_rt_pool_cap, what PyTorch's
 * set_per_process_memory_fraction calls) stays in force across a PATCH and
 * across a loop decision, combined with the policy's limit_bytes by the one
 * rule (the smallest set); tracing turned on and off by a PATCH takes effect
 * at once (events in the store, then none); a retention change takes effect
 * at once; a setting that cannot change on a live pool is refused with 409
 * naming it, and nothing changes.
 *
 * Runtimes made by aa_runtime_new run in this process; runtime_test.h gives
 * the test the loop (to step it) and the store (its counters).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/runtime.h"
#include "adaptalloc/store.h"
#include "runtime_test.h" /* the runtime's internals: its loop and store */

#define MIB (1024u * 1024u)

static char tmpdir[256];

/* A config that starts nothing but the policy and the loop: no store, no
 * server, no environment. */
static void quiet_config(aa_runtime_config *cfg) {
  aa_runtime_config_init(cfg);
  cfg->db = "off";
  cfg->http = "off";
  cfg->quiet = true;
  cfg->policy_dir = "/nonexistent-adaptalloc-policies";
}

static uint64_t pool_limit(aa_pool *pool) {
  aa_pool_stats *st = calloc(1, sizeof *st);
  uint64_t v;
  assert_non_null(st);
  assert_int_equal(aa_pool_stats_get_opts(pool, st, AA_STATS_NO_SIZES), AA_OK);
  v = st->limit_bytes;
  free(st);
  return v;
}

static uint64_t version_of(aa_runtime *rt) {
  char *doc = NULL;
  uint64_t v = 0;
  assert_int_equal(aa_rt_policy_json(rt, &doc, &v), AA_OK);
  free(doc);
  return v;
}

static int patch(aa_runtime *rt, const char *doc, char *err, size_t cap) {
  uint64_t v = 0;
  return aa_rt_policy_update(rt, doc, strlen(doc), true, "unit", 0, &v, err, cap);
}

/* Whether an allocation of size succeeds (and frees it). */
static bool fits(aa_pool *pool, size_t size) {
  void *p = aa_alloc(pool, size, NULL);
  if (p == NULL)
    return false;
  assert_int_equal(aa_free(pool, p, size, NULL), AA_OK);
  return true;
}

/* ------------------------------------------------------------- the cap */

/* A PATCH of something else leaves the user's cap in force; the policy's
 * limit and the cap combine by the one rule (the smallest set wins). */
static void test_runtime_settings_cap_survives_patch(void **state) {
  aa_runtime_config cfg;
  aa_runtime *rt = NULL, *other = NULL;
  aa_pool *host, *foreign;
  char err[512] = "";
  uint64_t v0;
  (void)state;

  quiet_config(&cfg);
  assert_int_equal(aa_runtime_new(&cfg, &rt), AA_OK);
  host = aa_rt_pool(rt, AA_BACKEND_HOST, -1);
  assert_non_null(host);
  assert_int_equal(pool_limit(host), 0);
  v0 = version_of(rt);

  /* the cap: one change, one new version */
  assert_int_equal(aa_rt_pool_cap(rt, host, 8 * MIB, "torch"), AA_OK);
  assert_int_equal(pool_limit(host), 8 * MIB);
  assert_int_equal(aa_rt_pool_cap_get(rt, host), 8 * MIB);
  assert_int_equal(version_of(rt), v0 + 1);
  assert_false(fits(host, 12 * MIB)); /* 1.5x the cap */
  /* /stats shows it */
  {
    char *json = NULL;
    size_t len = 0;
    assert_int_equal(aa_rt_stats_json(rt, &json, &len), AA_OK);
    assert_non_null(strstr(json, "\"overrides\":[{\"pool\":\"host\",\"user_limit\":8388608}]"));
    free(json);
  }
  /* the same cap again changes nothing */
  assert_int_equal(aa_rt_pool_cap(rt, host, 8 * MIB, "torch"), AA_OK);
  assert_int_equal(version_of(rt), v0 + 1);

  /* a PATCH of something else: the cap stays (it was lost: issue 35) */
  assert_int_equal(patch(rt, "{\"adapt\":{\"interval_ms\":700}}", err, sizeof err), AA_OK);
  assert_int_equal(version_of(rt), v0 + 2);
  assert_int_equal(pool_limit(host), 8 * MIB);
  assert_false(fits(host, 12 * MIB));

  /* the rule: the smallest of limit_bytes and the cap */
  assert_int_equal(
      patch(rt, "{\"pools\":{\"host\":{\"limit_bytes\":4194304}}}", err, sizeof err), AA_OK);
  assert_int_equal(pool_limit(host), 4 * MIB);
  assert_int_equal(
      patch(rt, "{\"pools\":{\"host\":{\"limit_bytes\":67108864}}}", err, sizeof err), AA_OK);
  assert_int_equal(pool_limit(host), 8 * MIB);
  assert_int_equal(patch(rt, "{\"pools\":{\"host\":{\"limit_bytes\":0}}}", err, sizeof err),
                   AA_OK);
  assert_int_equal(pool_limit(host), 8 * MIB);

  /* a whole document (PUT) keeps it too */
  {
    char *doc = NULL;
    uint64_t v = 0, nv = 0;
    assert_int_equal(aa_rt_policy_json(rt, &doc, &v), AA_OK);
    assert_int_equal(
        aa_rt_policy_update(rt, "{\"adapt\":{\"interval_ms\":900}}", 29, true, "unit", 0, &nv,
                            err, sizeof err),
        AA_OK);
    assert_int_equal(aa_rt_policy_update(rt, doc, strlen(doc), false, "unit", 0, &nv, err,
                                         sizeof err),
                     AA_OK);
    free(doc);
    assert_int_equal(pool_limit(host), 8 * MIB);
  }

  /* removed: the policy's limit (none) is in force again */
  assert_int_equal(aa_rt_pool_cap(rt, host, 0, "torch"), AA_OK);
  assert_int_equal(pool_limit(host), 0);
  assert_true(fits(host, 12 * MIB));

  /* a pool that is not the runtime's is not its to cap */
  quiet_config(&cfg);
  assert_int_equal(aa_runtime_new(&cfg, &other), AA_OK);
  foreign = aa_rt_pool(other, AA_BACKEND_HOST, -1);
  assert_non_null(foreign);
  assert_int_equal(aa_rt_pool_cap(rt, foreign, MIB, "torch"), AA_ENOENT);
  assert_int_equal(pool_limit(foreign), 0);
  assert_int_equal(aa_rt_pool_cap(rt, NULL, MIB, "torch"), AA_EINVAL);
  aa_runtime_destroy(other);
  aa_runtime_destroy(rt);
}

#define HOT 4600 /* served by the 8 KiB class of the default host ladder */
#define HOT_N 1000

static bool has_class(aa_pool *pool, size_t size) {
  aa_class_spec cl[AA_MAX_CLASSES];
  size_t n = 0;
  assert_int_equal(aa_pool_classes(pool, cl, AA_MAX_CLASSES, &n, NULL), AA_OK);
  for (size_t i = 0; i < n && i < AA_MAX_CLASSES; i++) {
    if (cl[i].block_size == size)
      return true;
  }
  return false;
}

/* A loop decision goes through the same path as a PATCH: it becomes a new
 * policy version (source loop) and the user's cap stays in force. */
static void test_runtime_settings_cap_survives_loop(void **state) {
  aa_runtime_config cfg;
  aa_runtime *rt = NULL;
  aa_pool *host;
  void **live = calloc(HOT_N, sizeof *live);
  char err[512] = "", *doc = NULL;
  uint64_t v0, v = 0;
  bool added = false;
  (void)state;

  assert_non_null(live);
  quiet_config(&cfg);
  assert_int_equal(aa_runtime_new(&cfg, &rt), AA_OK);
  assert_non_null(rt->svc.loop);
  /* the test steps the loop itself */
  assert_int_equal(patch(rt, "{\"adapt\":{\"interval_ms\":3600000}}", err, sizeof err), AA_OK);
  host = aa_rt_pool(rt, AA_BACKEND_HOST, -1);
  assert_non_null(host);
  assert_int_equal(aa_rt_pool_cap(rt, host, 64 * MIB, "torch"), AA_OK);
  v0 = version_of(rt);
  assert_false(has_class(host, 4608));

  for (int step = 0; step < 4 && !added; step++) {
    for (size_t i = 0; i < HOT_N; i++) {
      live[i] = aa_alloc(host, HOT, NULL);
      assert_non_null(live[i]);
    }
    assert_true(aa_adapt_loop_step(rt->svc.loop) >= 0);
    for (size_t i = 0; i < HOT_N; i++)
      assert_int_equal(aa_free(host, live[i], HOT, NULL), AA_OK);
    added = has_class(host, 4608);
  }
  assert_true(added);
  /* one new version for the loop's proposal, recorded in the policy */
  assert_true(version_of(rt) > v0);
  assert_int_equal(aa_rt_policy_json(rt, &doc, &v), AA_OK);
  assert_non_null(strstr(doc, "4608"));
  free(doc);
  /* the cap is in force (a loop decision installed as a policy dropped it) */
  assert_int_equal(pool_limit(host), 64 * MIB);
  assert_int_equal(aa_rt_pool_cap_get(rt, host), 64 * MIB);
  assert_false(fits(host, 96 * MIB));
  free(live);
  aa_runtime_destroy(rt);
}

/* ------------------------------------------------------------- telemetry */

#if AA_TEST_WITH_STORE
typedef struct sizes_seen {
  uint64_t a, b, c;
} sizes_seen;

static int count_sizes(void *user, const aa_trace_event *ev) {
  sizes_seen *s = user;
  if (ev->size == 1111)
    s->a++;
  else if (ev->size == 2222)
    s->b++;
  else if (ev->size == 3333)
    s->c++;
  return 0;
}

static void churn(aa_pool *pool, size_t size) {
  for (int i = 0; i < 10; i++)
    assert_true(fits(pool, size));
}
#endif

/* PATCH telemetry.trace on writes every event to the store from then on,
 * off stops it (it answered changed and wrote nothing: issue 35). */
static void test_runtime_settings_trace_live(void **state) {
#if AA_TEST_WITH_STORE
  aa_runtime_config cfg;
  aa_runtime *rt = NULL;
  aa_pool *host;
  char db[300], err[512] = "";
  sizes_seen seen = {0, 0, 0};
  int64_t run;
  (void)state;

  snprintf(db, sizeof db, "%s/trace.db", tmpdir);
  quiet_config(&cfg);
  cfg.db = db;
  assert_int_equal(aa_runtime_new(&cfg, &rt), AA_OK);
  host = aa_rt_pool(rt, AA_BACKEND_HOST, -1);
  assert_non_null(host);
  run = aa_rt_run_id(rt);
  assert_true(run > 0);

  churn(host, 1111); /* not traced */
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace\":true}}", err, sizeof err), AA_OK);
  churn(host, 2222); /* traced */
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace\":false}}", err, sizeof err), AA_OK);
  churn(host, 3333);      /* not traced */
  aa_runtime_destroy(rt); /* ends the run, the writer flushed */

  assert_int_equal(aa_store_trace_foreach(db, run, count_sizes, &seen), AA_OK);
  print_message("trace: %llu / %llu / %llu events of the three sizes\n",
                (unsigned long long)seen.a, (unsigned long long)seen.b,
                (unsigned long long)seen.c);
  assert_int_equal(seen.a, 0);
  assert_int_equal(seen.b, 20); /* 10 allocations and 10 frees */
  assert_int_equal(seen.c, 0);
#else
  (void)state;
  skip();
#endif
}

/* A retention change applies to the open store at once (it was read only
 * when the store opened: issue 35). */
static void test_runtime_settings_retention_live(void **state) {
#if AA_TEST_WITH_STORE
  aa_runtime_config cfg;
  aa_runtime *rt = NULL;
  aa_store_stats ss;
  char db[300], err[512] = "";
  int spins = 0;
  (void)state;

  snprintf(db, sizeof db, "%s/retention.db", tmpdir);
  quiet_config(&cfg);
  cfg.db = db;
  assert_int_equal(aa_runtime_new(&cfg, &rt), AA_OK);
  assert_non_null(aa_rt_pool(rt, AA_BACKEND_HOST, -1));
  assert_non_null(rt->svc.store);
  assert_int_equal(
      patch(rt, "{\"telemetry\":{\"snapshot_interval_ms\":100}}", err, sizeof err), AA_OK);
  usleep(1500 * 1000); /* snapshots and policy changes over a second old */
  assert_int_equal(aa_store_flush(rt->svc.store, 0), AA_OK);
  assert_int_equal(aa_store_stats_get(rt->svc.store, &ss), AA_OK);
  assert_int_equal(ss.rows_deleted, 0); /* the default keeps 7 days */

  assert_int_equal(patch(rt, "{\"telemetry\":{\"retention\":{\"max_age_s\":1}}}", err, sizeof err),
                   AA_OK);
  do {
    usleep(50 * 1000);
    assert_int_equal(aa_store_stats_get(rt->svc.store, &ss), AA_OK);
  } while (ss.rows_deleted == 0 && ++spins < 100);
  print_message("retention: %llu rows deleted after %d ms\n",
                (unsigned long long)ss.rows_deleted, spins * 50);
  assert_true(ss.rows_deleted > 0);
  aa_runtime_destroy(rt);
#else
  (void)state;
  skip();
#endif
}

/* ------------------------------------------------------------- refusals */

/* An HTTP request on 127.0.0.1:port: the status, the body (malloc'd) in
 * *body. */
/* The token the tests' runtimes are given (mutations need one). */
#define TEST_TOKEN "settings-test-token-0123456789abcdef"

static int http_req(int port, const char *method, const char *path, const char *payload,
                    char **body) {
  struct sockaddr_in sa;
  char head[512], *buf = NULL, *b;
  size_t len = 0, cap = 0;
  int fd = socket(AF_INET, SOCK_STREAM, 0), n, status = -1;
  *body = NULL;
  assert_true(fd >= 0);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  n = snprintf(head, sizeof head,
               "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
               "Authorization: Bearer " TEST_TOKEN "\r\n"
               "Content-Type: application/merge-patch+json\r\nContent-Length: %zu\r\n\r\n",
               method, path, payload != NULL ? strlen(payload) : 0);
  assert_int_equal(write(fd, head, (size_t)n), n);
  if (payload != NULL)
    assert_int_equal(write(fd, payload, strlen(payload)), (ssize_t)strlen(payload));
  for (;;) {
    ssize_t r;
    if (cap - len < 4096) {
      buf = realloc(buf, cap + 65536);
      assert_non_null(buf);
      cap += 65536;
    }
    r = read(fd, buf + len, cap - len - 1);
    if (r <= 0)
      break;
    len += (size_t)r;
  }
  close(fd);
  buf[len] = '\0';
  if (sscanf(buf, "HTTP/1.1 %d", &status) != 1)
    status = -1;
  b = strstr(buf, "\r\n\r\n");
  *body = strdup(b != NULL ? b + 4 : "");
  free(buf);
  return status;
}

/* A setting fixed while its pool lives: 409 naming it, nothing changes;
 * tracing without a store: 409 naming it, never "changed": true. */
static void test_runtime_settings_conflict_409(void **state) {
  aa_runtime_config cfg;
  aa_runtime *rt = NULL;
  aa_pool *host;
  char err[512] = "", *body = NULL;
  uint64_t v0;
  int port, status;
  (void)state;

  quiet_config(&cfg);
  cfg.http = AA_TEST_WITH_HTTP ? "127.0.0.1:0" : "off";
  cfg.token = TEST_TOKEN;
  assert_int_equal(aa_runtime_new(&cfg, &rt), AA_OK);
  host = aa_rt_pool(rt, AA_BACKEND_HOST, -1);
  assert_non_null(host);
  assert_int_equal(aa_rt_pool_cap(rt, host, 32 * MIB, "torch"), AA_OK);
  v0 = version_of(rt);

  /* in process: AA_ECONFLICT naming the setting */
  assert_int_equal(
      patch(rt, "{\"adapt\":{\"interval_ms\":800},\"pools\":{\"host\":{\"slab_size\":4194304}}}",
            err, sizeof err),
      AA_ECONFLICT);
  assert_non_null(strstr(err, "slab_size"));
  assert_int_equal(patch(rt, "{\"pools\":{\"host\":{\"large\":{\"stitch\":true}}}}", err,
                         sizeof err),
                   AA_ECONFLICT);
  assert_non_null(strstr(err, "large.stitch"));
  assert_int_equal(patch(rt, "{\"pools\":{\"host\":{\"large\":{\"stitch_share\":0.5}}}}", err,
                         sizeof err),
                   AA_ECONFLICT);
  assert_non_null(strstr(err, "large.stitch_share"));
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace\":true}}", err, sizeof err),
                   AA_ECONFLICT);
  assert_non_null(strstr(err, "telemetry.trace"));
  assert_int_equal(patch(rt, "{\"telemetry\":{\"retention\":{\"max_bytes\":1048576}}}", err, sizeof err),
                   AA_ECONFLICT);
  assert_non_null(strstr(err, "telemetry.retention.max_bytes"));
  assert_int_equal(version_of(rt), v0);
  assert_int_equal(pool_limit(host), 32 * MIB);

  if (AA_TEST_WITH_HTTP) {
    port = aa_rt_http_port(rt);
    assert_true(port > 0);
    status = http_req(port, "PATCH", "/policy",
                      "{\"adapt\":{\"interval_ms\":800},\"pools\":{\"host\":{\"slab_size\":"
                      "4194304}}}",
                      &body);
    print_message("PATCH slab_size: %d %s\n", status, body);
    assert_int_equal(status, 409);
    assert_non_null(strstr(body, "slab_size is fixed"));
    assert_non_null(strstr(body, "AA_ECONFLICT"));
    free(body);
    status = http_req(port, "PATCH", "/policy", "{\"pools\":{\"host\":{\"large\":{\"mode\":"
                                                "\"passthrough\"}}}}",
                      &body);
    assert_int_equal(status, 409);
    assert_non_null(strstr(body, "large.mode"));
    free(body);
    status = http_req(port, "PATCH", "/policy", "{\"telemetry\":{\"trace\":true}}", &body);
    assert_int_equal(status, 409);
    assert_non_null(strstr(body, "telemetry.trace"));
    assert_null(strstr(body, "\"changed\""));
    free(body);
    /* nothing changed: the version, the interval, the cap */
    status = http_req(port, "GET", "/policy", NULL, &body);
    assert_int_equal(status, 200);
    assert_null(strstr(body, "\"interval_ms\": 800"));
    free(body);
    assert_int_equal(version_of(rt), v0);
    assert_int_equal(pool_limit(host), 32 * MIB);
    /* one that can change answers 200 and changed */
    status = http_req(port, "PATCH", "/policy", "{\"adapt\":{\"interval_ms\":800}}", &body);
    assert_int_equal(status, 200);
    assert_non_null(strstr(body, "\"changed\":true"));
    free(body);
    assert_int_equal(version_of(rt), v0 + 1);
    assert_int_equal(pool_limit(host), 32 * MIB);
  }
  aa_runtime_destroy(rt);
}

static int setup_dir(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa_settings_XXXXXX");
  return mkdtemp(tmpdir) != NULL ? 0 : -1;
}

static int teardown_dir(void **state) {
  char cmd[300];
  (void)state;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_settings_cap_survives_patch),
      cmocka_unit_test(test_runtime_settings_cap_survives_loop),
      cmocka_unit_test(test_runtime_settings_trace_live),
      cmocka_unit_test(test_runtime_settings_retention_live),
      cmocka_unit_test(test_runtime_settings_conflict_409),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
