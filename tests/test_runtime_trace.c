/*
 * test_runtime_trace.c — bounded live diagnostics (issue 38, item 3) in the
 * runtime: a PATCH turns a sampled trace on (1 in N, sizes above a
 * threshold) whose frees follow its allocations; a timed trace
 * (telemetry.trace_seconds) ends by itself, through the one settings path
 * (an audit entry of source "trace-timer"), with the time left in /stats;
 * call stacks attached to traced blocks reach the store; the store's bound
 * (trace_max_events) is put in force live; settings that cannot apply are
 * refused (409) and change nothing; GET /holders names a live block's stack
 * while a sampled trace keeps it (null once evicted, or with tracing off).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "adaptalloc/runtime.h"
#include "adaptalloc/store.h"
#include "loopback_get.h"

static char tmpdir[256];

static int setup_dir(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa-rt-trace-XXXXXX");
  return mkdtemp(tmpdir) != NULL ? 0 : -1;
}

static int teardown_dir(void **state) {
  (void)state;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

#if AA_TEST_WITH_STORE
/* A runtime over a fresh database tmpdir/NAME.db, serving HTTP on `http`
 * ("off": none). */
static aa_runtime *start_http(const char *name, char *db, size_t cap, const char *http) {
  aa_runtime_config cfg;
  aa_runtime *rt = NULL;
  snprintf(db, cap, "%s/%s.db", tmpdir, name);
  aa_runtime_config_init(&cfg);
  cfg.db = db;
  cfg.http = http;
  cfg.quiet = true;
  cfg.policy_dir = "/nonexistent-adaptalloc-policies";
  assert_int_equal(aa_runtime_new(&cfg, &rt), AA_OK);
  return rt;
}

static aa_runtime *start(const char *name, char *db, size_t cap) {
  return start_http(name, db, cap, "off");
}

/* GET path from rt's server (loopback); the whole answer into buf. */
static void http_get(aa_runtime *rt, const char *path, char *buf, size_t cap) {
  loopback_get(aa_rt_http_port(rt), path, buf, cap);
}

static int patch(aa_runtime *rt, const char *doc, char *err, size_t cap) {
  uint64_t v = 0;
  return aa_rt_policy_update(rt, doc, strlen(doc), true, "unit", 0, &v, err, cap);
}

__attribute__((noinline)) static char *stats(aa_runtime *rt) {
  char *json = NULL;
  size_t len = 0;
  assert_int_equal(aa_rt_stats_json(rt, &json, &len), AA_OK);
  return json;
}

typedef struct seen {
  uint64_t a, f, c, small_a, big_a, last_frame;
  uint64_t frames_ptr;
} seen;

static int count_cb(void *user, const aa_trace_event *ev) {
  seen *s = user;
  if (ev->op == 'a') {
    s->a++;
    if (ev->size >= 65536)
      s->big_a++;
    else
      s->small_a++;
  } else if (ev->op == 'f') {
    s->f++;
  } else if (ev->op == 'c') {
    s->c++;
    s->last_frame = ev->frame;
    s->frames_ptr = ev->ptr;
  }
  return 0;
}

typedef struct ftext {
  int n;
  char text[256];
} ftext;

static int frames_cb(void *user, uint64_t id, const char *frames) {
  ftext *f = user;
  (void)id;
  f->n++;
  snprintf(f->text, sizeof f->text, "%s", frames);
  return 0;
}
#endif

/* 1 in 50 small requests, every one of 64 KiB and more: the trace holds
 * about that, and each traced allocation's free. */
static void test_runtime_trace_sampled_patch(void **state) {
#if AA_TEST_WITH_STORE
  char db[300], err[512] = "";
  (void)state;
  aa_runtime *rt = start("sampled", db, sizeof db);
  aa_pool *host = aa_rt_pool(rt, AA_BACKEND_HOST, -1);
  assert_non_null(host);
  int64_t run = aa_rt_run_id(rt);
  assert_int_equal(patch(rt,
                         "{\"telemetry\":{\"trace\":true,\"trace_sample\":50,"
                         "\"trace_min_bytes\":65536}}",
                         err, sizeof err),
                   AA_OK);
  char *js = stats(rt);
  assert_non_null(strstr(js, "\"trace\":{\"on\":true,\"whole_run\":false,\"available\":true,"
                             "\"sample\":50,\"min_bytes\":65536,\"seconds\":0,"
                             "\"remaining_ms\":null"));
  free(js);
  for (int i = 0; i < 20000; i++) {
    void *p = aa_alloc(host, 700, NULL);
    assert_non_null(p);
    aa_free(host, p, 0, NULL);
  }
  for (int i = 0; i < 30; i++) {
    void *p = aa_alloc(host, 100000, NULL);
    aa_free(host, p, 0, NULL);
  }
  js = stats(rt);
  assert_non_null(strstr(js, "\"sampled\":{\"traced\":"));
  free(js);
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace\":false}}", err, sizeof err), AA_OK);
  aa_runtime_destroy(rt);
  seen s;
  memset(&s, 0, sizeof s);
  assert_int_equal(aa_store_trace_foreach(db, run, count_cb, &s), AA_OK);
  print_message("sampled: %llu small, %llu large allocations, %llu frees\n",
                (unsigned long long)s.small_a, (unsigned long long)s.big_a,
                (unsigned long long)s.f);
  assert_int_equal(s.big_a, 30);
  assert_true(s.small_a > 250 && s.small_a < 600); /* 400 expected */
  assert_int_equal(s.f, s.a);
#else
  (void)state;
  skip();
#endif
}

/* trace_seconds: the trace ends by itself; /stats shows the time left;
 * the policy says trace false after; the audit names the timer. */
static void test_runtime_trace_timed(void **state) {
#if AA_TEST_WITH_STORE
  char db[300], err[512] = "";
  (void)state;
  aa_runtime *rt = start("timed", db, sizeof db);
  aa_pool *host = aa_rt_pool(rt, AA_BACKEND_HOST, -1);
  int64_t run = aa_rt_run_id(rt);
  assert_int_equal(
      patch(rt, "{\"telemetry\":{\"trace\":true,\"trace_seconds\":1}}", err, sizeof err), AA_OK);
  char *js = stats(rt);
  char *at = strstr(js, "\"remaining_ms\":");
  assert_non_null(at);
  long left = strtol(at + strlen("\"remaining_ms\":"), NULL, 10);
  assert_true(left > 0 && left <= 1000);
  free(js);
  void *p = aa_alloc(host, 4000, NULL);
  aa_free(host, p, 0, NULL);
  /* ends within the second plus the ticker's slack */
  bool ended = false;
  for (int i = 0; i < 60 && !ended; i++) {
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    js = stats(rt);
    ended = strstr(js, "\"trace\":{\"on\":false") != NULL;
    free(js);
  }
  assert_true(ended);
  char *doc = NULL;
  uint64_t v = 0;
  assert_int_equal(aa_rt_policy_json(rt, &doc, &v), AA_OK);
  assert_non_null(strstr(doc, "\"trace\": false"));
  free(doc);
  p = aa_alloc(host, 5000, NULL); /* not traced */
  aa_free(host, p, 0, NULL);
  aa_runtime_destroy(rt);
  seen s;
  memset(&s, 0, sizeof s);
  assert_int_equal(aa_store_trace_foreach(db, run, count_cb, &s), AA_OK);
  assert_int_equal(s.a, 1);
  aa_store_query q;
  char *log = NULL;
  aa_store_query_init(&q);
  q.run_id = run;
  assert_int_equal(aa_store_policy_log_json(db, &q, &log), AA_OK);
  assert_non_null(strstr(log, "\"source\":\"trace-timer\""));
  free(log);
#else
  (void)state;
  skip();
#endif
}

/* A call stack attached to a traced block reaches the store; an untraced
 * block's is refused (AA_ENOENT) and gathering it can be skipped. */
static void test_runtime_trace_frames(void **state) {
#if AA_TEST_WITH_STORE
  char db[300], err[512] = "";
  (void)state;
  aa_runtime *rt = start("frames", db, sizeof db);
  aa_pool *host = aa_rt_pool(rt, AA_BACKEND_HOST, -1);
  int64_t run = aa_rt_run_id(rt);
  void *before = aa_alloc(host, 300000, NULL);
  assert_false(aa_rt_trace_wants(rt, host, before));
  assert_int_equal(patch(rt,
                         "{\"telemetry\":{\"trace\":true,\"trace_sample\":0,"
                         "\"trace_min_bytes\":200000}}",
                         err, sizeof err),
                   AA_OK);
  void *big = aa_alloc(host, 250000, NULL), *small = aa_alloc(host, 1000, NULL);
  const char *stack = "train.py:42:step\ntrain.py:90:<module>\n";
  assert_true(aa_rt_trace_wants(rt, host, big));
  assert_false(aa_rt_trace_wants(rt, host, small));
  assert_int_equal(aa_rt_trace_frames(rt, host, big, stack, strlen(stack)), AA_OK);
  assert_int_equal(aa_rt_trace_frames(rt, host, small, stack, strlen(stack)), AA_ENOENT);
  assert_int_equal(aa_rt_trace_frames(rt, host, before, stack, strlen(stack)), AA_ENOENT);
  assert_int_equal(aa_rt_trace_frames(rt, host, big, stack, 0), AA_EINVAL);
  aa_free(host, big, 0, NULL);
  aa_free(host, small, 0, NULL);
  aa_free(host, before, 0, NULL);
  aa_runtime_destroy(rt);
  seen s;
  memset(&s, 0, sizeof s);
  assert_int_equal(aa_store_trace_foreach(db, run, count_cb, &s), AA_OK);
  assert_int_equal(s.a, 1);
  assert_int_equal(s.f, 1);
  assert_int_equal(s.c, 1);
  assert_int_equal(s.frames_ptr, (uint64_t)(uintptr_t)big);
  ftext f;
  memset(&f, 0, sizeof f);
  assert_int_equal(aa_store_frames_foreach(db, run, frames_cb, &f), AA_OK);
  assert_int_equal(f.n, 1);
  assert_string_equal(f.text, stack);
#else
  (void)state;
  skip();
#endif
}

/* GET /holders names each largest live block's stack while a sampled trace
 * keeps it: the frames as a list of lines; a stack the runtime no longer
 * keeps (its slot taken by a newer one) is null with frames_evicted; a
 * trace of every event keeps no table (null); tracing off, null. */
static void test_runtime_trace_holders_frames(void **state) {
#if AA_TEST_WITH_STORE && AA_TEST_WITH_HTTP
  static char resp[1 << 20];
  char db[300], err[512] = "", path[128], one[64];
  (void)state;
  aa_runtime *rt = start_http("holders", db, sizeof db, "127.0.0.1:0");
  aa_pool *host = aa_rt_pool(rt, AA_BACKEND_HOST, -1);
  snprintf(path, sizeof path, "/holders?pool=%s&top=3", aa_pool_name(host));
  assert_int_equal(patch(rt,
                         "{\"telemetry\":{\"trace\":true,\"trace_sample\":0,"
                         "\"trace_min_bytes\":4000000}}",
                         err, sizeof err),
                   AA_OK);
  /* the three largest live blocks: a (a stack), b (a stack, later
   * evicted), c (none) */
  void *a = aa_alloc(host, 6000000, NULL), *b = aa_alloc(host, 5000000, NULL);
  void *c = aa_alloc(host, 4500000, NULL);
  const char *sa = "train.py:42:step\ntrain.py:90:<module>\n", *sb = "model.py:7:\"fwd\"";
  assert_int_equal(aa_rt_trace_frames(rt, host, b, sb, strlen(sb)), AA_OK); /* id 1 */
  assert_int_equal(aa_rt_trace_frames(rt, host, a, sa, strlen(sa)), AA_OK); /* id 2 */
  http_get(rt, path, resp, sizeof resp);
  assert_non_null(strstr(resp, "\"requested\":6000000,"));
  assert_non_null(strstr(resp, "\"frames\":[\"train.py:42:step\",\"train.py:90:<module>\"],"
                               "\"frames_evicted\":false}"));
  assert_non_null(strstr(resp, "\"frames\":[\"model.py:7:\\\"fwd\\\"\"],\"frames_evicted\":false}"));
  assert_non_null(strstr(resp, "\"frames\":null,\"frames_evicted\":false}]}")); /* c */

  /* 4095 newer distinct stacks (ids 3 .. 4097) on c: id 4097 takes b's
   * slot (id 1), so b's stack is gone; c's last one (4097) and a's stay */
  for (int i = 0; i < 4095; i++) {
    int rc;
    snprintf(one, sizeof one, "gen.py:%d:loop", i);
    /* the store's queue full (AA_ELIMIT, no id handed out): its writer
     * catches up */
    while ((rc = aa_rt_trace_frames(rt, host, c, one, strlen(one))) == AA_ELIMIT)
      usleep(1000);
    assert_int_equal(rc, AA_OK);
  }
  http_get(rt, path, resp, sizeof resp);
  assert_non_null(strstr(resp, "\"frames\":[\"train.py:42:step\",\"train.py:90:<module>\"],"));
  assert_null(strstr(resp, "model.py"));
  assert_non_null(strstr(resp, "\"requested\":5000000,\"kind\":\"large\","
                               "\"stitched\":false,\"frames\":null,\"frames_evicted\":true}"));
  assert_non_null(strstr(resp, "\"frames\":[\"gen.py:4094:loop\"],\"frames_evicted\":false}]}"));

  /* tracing off: the table no longer follows frees, so nothing is named */
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace\":false}}", err, sizeof err), AA_OK);
  http_get(rt, path, resp, sizeof resp);
  assert_null(strstr(resp, "train.py"));
  assert_null(strstr(resp, "\"frames_evicted\":true"));
  assert_non_null(strstr(resp, "\"frames\":null,\"frames_evicted\":false}]}"));

  /* every event: no table, so no stack per live block */
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace\":true,\"trace_sample\":1,"
                             "\"trace_min_bytes\":0}}",
                         err, sizeof err),
                   AA_OK);
  void *d = aa_alloc(host, 7000000, NULL);
  assert_int_equal(aa_rt_trace_frames(rt, host, d, sa, strlen(sa)), AA_OK);
  http_get(rt, path, resp, sizeof resp);
  assert_non_null(strstr(resp, "\"requested\":7000000,"));
  assert_null(strstr(resp, "train.py"));
  aa_free(host, a, 0, NULL);
  aa_free(host, b, 0, NULL);
  aa_free(host, c, 0, NULL);
  aa_free(host, d, 0, NULL);
  aa_runtime_destroy(rt);
#else
  (void)state;
  skip();
#endif
}

/* trace_max_events bounds the store's trace live; refusals change nothing. */
static void test_runtime_trace_bound_and_refusals(void **state) {
#if AA_TEST_WITH_STORE
  char db[300], err[512] = "";
  (void)state;
  aa_runtime *rt = start("bound", db, sizeof db);
  aa_pool *host = aa_rt_pool(rt, AA_BACKEND_HOST, -1);
  assert_int_equal(
      patch(rt, "{\"telemetry\":{\"trace\":true,\"trace_max_events\":1000}}", err, sizeof err),
      AA_OK);
  for (int i = 0; i < 5000; i++) {
    void *p = aa_alloc(host, 900, NULL);
    aa_free(host, p, 0, NULL);
  }
  char *js = stats(rt);
  assert_non_null(strstr(js, "\"max_events\":1000"));
  free(js);
  /* 0 by count needs a size: refused as invalid, nothing changes */
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace_sample\":0}}", err, sizeof err),
                   AA_EINVAL);
  assert_non_null(strstr(err, "trace_min_bytes"));
  aa_runtime_destroy(rt);
  char sql[800];
  snprintf(sql, sizeof sql, "sqlite3 '%s' 'SELECT count(*) FROM trace_events' > %s/n.txt", db,
           tmpdir);
  if (system(sql) == 0) {
    char path[300], line[64] = "";
    snprintf(path, sizeof path, "%s/n.txt", tmpdir);
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    assert_non_null(fgets(line, sizeof line, fp));
    fclose(fp);
    assert_true(atol(line) <= 1000);
  }

  /* the store off: trace settings that need it are refused, 409 */
  aa_runtime_config cfg;
  aa_runtime_config_init(&cfg);
  cfg.db = "off";
  cfg.http = "off";
  cfg.quiet = true;
  cfg.policy_dir = "/nonexistent-adaptalloc-policies";
  assert_int_equal(aa_runtime_new(&cfg, &rt), AA_OK);
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace_max_events\":5}}", err, sizeof err),
                   AA_ECONFLICT);
  assert_non_null(strstr(err, "trace_max_events"));
  js = stats(rt);
  assert_non_null(strstr(js, "\"trace\":{\"on\":false,\"whole_run\":false,\"available\":false"));
  free(js);
  aa_runtime_destroy(rt);

  /* ADAPTALLOC_TRACE=1: every event of the run, no sample, no timer */
  aa_runtime_config_init(&cfg);
  snprintf(db, sizeof db, "%s/whole.db", tmpdir);
  cfg.db = db;
  cfg.http = "off";
  cfg.quiet = true;
  cfg.trace = 1;
  cfg.policy_dir = "/nonexistent-adaptalloc-policies";
  assert_int_equal(aa_runtime_new(&cfg, &rt), AA_OK);
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace_sample\":10}}", err, sizeof err),
                   AA_ECONFLICT);
  assert_int_equal(patch(rt, "{\"telemetry\":{\"trace_seconds\":10}}", err, sizeof err),
                   AA_ECONFLICT);
  assert_non_null(strstr(err, "trace_seconds"));
  aa_runtime_destroy(rt);
#else
  (void)state;
  skip();
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_trace_sampled_patch),
      cmocka_unit_test(test_runtime_trace_timed),
      cmocka_unit_test(test_runtime_trace_frames),
      cmocka_unit_test(test_runtime_trace_holders_frames),
      cmocka_unit_test(test_runtime_trace_bound_and_refusals),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
