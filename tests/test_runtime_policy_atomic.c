/*
 * test_runtime_policy_atomic.c — a policy change through the runtime's real
 * paths (PUT and PATCH /policy, aa_runtime_policy_update) reaches every live
 * pool or none.
 *
 * The runtime makes three pools on the host backend, in this order: "host",
 * "host:kv" and "host:scores" (regions). Each refused document changes the
 * first two (a new class table, a new limit) and asks the last for what it
 * cannot take (a prefill of 1 TiB, a slab size fixed while the pool is
 * live). After each refusal every pool's class table and stats, every block's
 * bytes, the policy (GET /policy body and ETag, aa_runtime_policy_json) and
 * the store's audit log are exactly as before. A valid change before and
 * after shows the paths do change pools, and fixes the audit log's order:
 * after the start-up policy's entry (0->1) come 1->2 and 2->3, nothing
 * between.
 *
 * The runtime is a process-wide singleton, so the scenario runs in a forked
 * child; CHECK failures exit non-zero.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>
#include <cmocka.h>

#include "adaptalloc/runtime.h"
#include "adaptalloc/store.h"

#include "child_check.h" /* CHECK: a failed check ends the forked child */
#include "token_auth.h"

static char tmpdir[256];

/* The policy in force at start: kv with a limit, scores with 1 MiB blocks
 * in 2 MiB slabs; the loop off, so the version moves only when we ask.
 * Each whole document is complete (docs/policy.md). */
#define HEAD                                                                                  \
  "{\"name\":\"atomic\",\"telemetry\":{},\"adapt\":{\"enabled\":false,\"prefill_max_bytes\":" \
  "4398046511104},\"pools\":{\"device\":{},\"pinned\":{},"
static const char CUR[] = HEAD "\"host\":{\"classes\":{\"min\":512,\"per_doubling\":1}},"
                               "\"regions\":{\"kv\":{\"limit_bytes\":67108864},"
                               "\"scores\":{\"slab_size\":2097152,\"max_small\":1048576,"
                               "\"classes\":{\"min\":4096,\"per_doubling\":1}}}}}";
/* A valid change of kv's limit only (1 -> 2). */
static const char FIRST[] = HEAD "\"host\":{\"classes\":{\"min\":512,\"per_doubling\":1}},"
                                 "\"regions\":{\"kv\":{\"limit_bytes\":100663296},"
                                 "\"scores\":{\"slab_size\":2097152,\"max_small\":1048576,"
                                 "\"classes\":{\"min\":4096,\"per_doubling\":1}}}}}";
/* host and kv change; scores asks for 2^20 blocks of 1 MiB. */
static const char PREFILL[] = HEAD "\"host\":{\"classes\":{\"min\":512,\"per_doubling\":2}},"
                                   "\"regions\":{\"kv\":{\"limit_bytes\":134217728},"
                                   "\"scores\":{\"slab_size\":2097152,\"max_small\":1048576,"
                                   "\"classes\":[4096,65536,{\"size\":1048576,"
                                   "\"prefill\":1048576}]}}}}";
/* host and kv change; scores' slab_size changes (fixed while live). */
static const char FIXED[] = HEAD "\"host\":{\"classes\":{\"min\":512,\"per_doubling\":2}},"
                                 "\"regions\":{\"kv\":{\"limit_bytes\":134217728},"
                                 "\"scores\":{\"slab_size\":4194304,\"max_small\":1048576,"
                                 "\"classes\":{\"min\":4096,\"per_doubling\":1}}}}}";
/* The same as a merge patch over FIRST. */
static const char PATCH_PREFILL[] =
    "{\"pools\":{\"host\":{\"classes\":{\"per_doubling\":2}},"
    "\"regions\":{\"kv\":{\"limit_bytes\":134217728},"
    "\"scores\":{\"classes\":[4096,{\"size\":1048576,\"prefill\":1048576}]}}}}";
/* host and kv change; scores takes a smaller table (2 -> 3). */
static const char LAST[] = HEAD "\"host\":{\"classes\":{\"min\":512,\"per_doubling\":2}},"
                                "\"regions\":{\"kv\":{\"limit_bytes\":134217728},"
                                "\"scores\":{\"slab_size\":2097152,\"max_small\":1048576,"
                                "\"classes\":[4096,65536,1048576]}}}}";

/* ================================================================ client */

typedef struct reply {
  int status; /* -1 when none came back */
  long long etag;
  char *body; /* malloc'd, NUL-terminated */
} reply;

static int connect_port(int port) {
  struct sockaddr_in sa;
  struct timeval tv = {10, 0};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* One request with Connection: close; reads until the server closes. */
static void http(int port, const char *method, const char *path, const char *body,
                 reply *out) {
  size_t blen = body ? strlen(body) : 0, len = 0, cap = 1 << 16;
  char head[1024], auth[400] = "";
  char *buf = malloc(cap);
  const char *e;
  int fd = connect_port(port);
  int n;

  memset(out, 0, sizeof(*out));
  out->status = -1;
  out->etag = -1;
  CHECK(fd >= 0 && buf != NULL);
  /* the token the runtime made (none set), from its file */
  if (strcmp(method, "GET") != 0)
    CHECK(aa_test_auth_header(NULL, auth, sizeof(auth)));
  n = snprintf(head, sizeof(head),
               "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
               "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
               method, path, auth, blen);
  CHECK(send(fd, head, (size_t)n, MSG_NOSIGNAL) == n);
  CHECK(blen == 0 || send(fd, body, blen, MSG_NOSIGNAL) == (ssize_t)blen);
  for (;;) {
    ssize_t r;
    if (cap - len < 4096) {
      char *nb = realloc(buf, cap * 2);
      CHECK(nb != NULL);
      buf = nb;
      cap *= 2;
    }
    r = recv(fd, buf + len, cap - len - 1, 0);
    if (r <= 0)
      break;
    len += (size_t)r;
  }
  close(fd);
  buf[len] = '\0';
  if (sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1)
    out->status = -1;
  e = strstr(buf, "\r\nETag: \"");
  if (e != NULL)
    out->etag = strtoll(e + 9, NULL, 10);
  e = strstr(buf, "\r\n\r\n");
  out->body = strdup(e ? e + 4 : "");
  free(buf);
}

/* ================================================================ state */

enum { NPOOLS = 3,
       NBLK = 10 };

typedef struct pool_state {
  aa_class_spec cls[AA_MAX_CLASSES];
  size_t ncls;
  aa_pool_stats *st;
} pool_state;

typedef struct world {
  int port;
  aa_pool *pools[NPOOLS];
  void *blk[NPOOLS][NBLK];
  size_t sz[NBLK];
  pool_state was[NPOOLS];
  char *policy; /* aa_runtime_policy_json */
  uint64_t version;
  char *http_policy; /* GET /policy body */
  long long etag;
  char *log; /* the store's audit log of this run, with documents */
} world;

static void pool_state_take(pool_state *s, aa_pool *pool) {
  s->st = calloc(1, sizeof(*s->st));
  CHECK(s->st != NULL);
  CHECK(aa_pool_classes(pool, s->cls, AA_MAX_CLASSES, &s->ncls, NULL) == AA_OK);
  CHECK(aa_pool_stats_get(pool, s->st) == AA_OK);
}

/* The audit log of this run (policy changes with their documents). */
static char *audit_log(void) {
  aa_store_query q;
  char db[512];
  char *json = NULL;
  if (!AA_TEST_WITH_STORE)
    return strdup("");
  snprintf(db, sizeof(db), "%s/atomic.db", tmpdir);
  aa_store_query_init(&q);
  q.run_id = aa_runtime_run_id();
  q.detail = true;
  CHECK(aa_store_policy_log_json(db, &q, &json) == AA_OK && json != NULL);
  return json;
}

/* Waits (at most 10 s) until the audit log has `count` changes (the first
 * is the start-up policy's, 0 -> 1). */
static void audit_wait(int count) {
  if (!AA_TEST_WITH_STORE)
    return;
  for (int t = 0; t < 200; t++) {
    char *log = audit_log();
    cJSON *root = cJSON_Parse(log);
    cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "changes");
    int n = cJSON_IsArray(c) ? cJSON_GetArraySize(c) : -1;
    cJSON_Delete(root);
    if (n > count)
      fprintf(stderr, "audit log: %s\n", log);
    free(log);
    if (n == count)
      return;
    CHECK(n < count);
    usleep(50 * 1000);
  }
  CHECK(!"the audit log did not reach the expected count");
}

static void take_world(world *w) {
  reply r;
  for (int p = 0; p < NPOOLS; p++)
    pool_state_take(&w->was[p], w->pools[p]);
  CHECK(aa_runtime_policy_json(&w->policy, &w->version) == AA_OK);
  if (AA_TEST_WITH_HTTP) {
    http(w->port, "GET", "/policy", NULL, &r);
    CHECK(r.status == 200);
    w->http_policy = r.body;
    w->etag = r.etag;
  }
  w->log = audit_log();
}

static void drop_world(world *w) {
  for (int p = 0; p < NPOOLS; p++)
    free(w->was[p].st);
  free(w->policy);
  free(w->http_policy);
  free(w->log);
}

static int moved(const char *when, const char *pool, const char *what, unsigned long long a,
                 unsigned long long b) {
  fprintf(stderr, "%s: pool %s: %s moved %llu -> %llu\n", when, pool, what, a, b);
  return 1;
}

/* Everything taken by take_world is as it was. */
static void check_unchanged(world *w, const char *when) {
  int bad = 0;
  char *now_policy = NULL, *log;
  uint64_t v = 0;

  for (int p = 0; p < NPOOLS; p++) {
    pool_state now;
    const pool_state *was = &w->was[p];
    const char *name = aa_pool_name(w->pools[p]);
    pool_state_take(&now, w->pools[p]);
    if (now.ncls != was->ncls || memcmp(now.cls, was->cls, now.ncls * sizeof(now.cls[0])) != 0)
      bad += moved(when, name, "class table (count)", was->ncls, now.ncls);
#define SAME(f)                \
  if (now.st->f != was->st->f) \
    bad += moved(when, name, #f, (unsigned long long)was->st->f, (unsigned long long)now.st->f);
    SAME(limit_bytes)
    SAME(class_table_version)
    SAME(class_count)
    SAME(large_page_bytes)
    SAME(bytes_in_use)
    SAME(bytes_requested)
    SAME(bytes_reserved)
    SAME(allocs)
    SAME(frees)
    SAME(backend_allocs)
    SAME(backend_frees)
    SAME(invalid_frees)
    SAME(ooms)
#undef SAME
    for (uint32_t c = 0; c < now.st->class_count && c < was->st->class_count; c++)
      if (memcmp(&now.st->classes[c], &was->st->classes[c], sizeof(now.st->classes[c])) != 0)
        bad += moved(when, name, "a class's stats (index)", c, c);
    for (int i = 0; i < NBLK; i++) {
      const unsigned char *b = w->blk[p][i];
      if (b[0] != (unsigned char)(0x40 + p) || b[w->sz[i] - 1] != (unsigned char)(0x40 + p))
        bad += moved(when, name, "block bytes (block)", (unsigned long long)i, 0);
    }
    free(now.st);
  }
  CHECK(aa_runtime_policy_json(&now_policy, &v) == AA_OK);
  if (v != w->version || strcmp(now_policy, w->policy) != 0) {
    fprintf(stderr, "%s: the policy moved (version %llu -> %llu)\n", when,
            (unsigned long long)w->version, (unsigned long long)v);
    bad++;
  }
  free(now_policy);
  if (AA_TEST_WITH_HTTP) {
    reply r;
    http(w->port, "GET", "/policy", NULL, &r);
    if (r.status != 200 || r.etag != w->etag || strcmp(r.body, w->http_policy) != 0) {
      fprintf(stderr, "%s: GET /policy moved (ETag %lld -> %lld)\n", when, w->etag, r.etag);
      bad++;
    }
    free(r.body);
  }
  log = audit_log();
  if (strcmp(log, w->log) != 0) {
    fprintf(stderr, "%s: the audit log moved:\n%s\n", when, log);
    bad++;
  }
  free(log);
  CHECK(bad == 0);
}

/* ================================================================ scenario */

static void scenario(void) {
  static const size_t sizes[NBLK] = {100, 700, 3000, 4096, 9000, 16384, 20000, 70000,
                                     1u << 20, 3u << 20};
  char err[512];
  int kv = -1, scores = -1;
  uint64_t v = 0;
  world w;
  int rc;

  memset(&w, 0, sizeof(w));
  CHECK(aa_runtime_region_id("kv", &kv, NULL, 0) == AA_OK);
  CHECK(aa_runtime_region_id("scores", &scores, NULL, 0) == AA_OK);
  w.pools[0] = aa_runtime_pool(AA_BACKEND_HOST, -1);
  w.pools[1] = aa_runtime_region_pool(kv, AA_BACKEND_HOST, -1);
  w.pools[2] = aa_runtime_region_pool(scores, AA_BACKEND_HOST, -1);
  CHECK(w.pools[0] != NULL && w.pools[1] != NULL && w.pools[2] != NULL);
  CHECK(strcmp(aa_pool_name(w.pools[2]), "host:scores") == 0);
  if (AA_TEST_WITH_HTTP) {
    w.port = aa_runtime_http_port();
    CHECK(w.port > 0);
  }
  for (int p = 0; p < NPOOLS; p++) {
    for (int i = 0; i < NBLK; i++) {
      w.sz[i] = sizes[i];
      w.blk[p][i] = aa_alloc(w.pools[p], sizes[i], NULL);
      CHECK(w.blk[p][i] != NULL);
      memset(w.blk[p][i], 0x40 + p, sizes[i]);
    }
  }

  /* a valid change first: version 2, the audit log's first entry */
  rc = aa_runtime_policy_update(FIRST, strlen(FIRST), false, "unit", 0, &v, err, sizeof(err));
  CHECK(rc == AA_OK && v == 2);
  audit_wait(2);
  take_world(&w);
  CHECK(w.version == 2 && w.was[1].st->limit_bytes == 100663296);

  /* aa_runtime_policy_update, whole documents and a merge patch */
  rc = aa_runtime_policy_update(PREFILL, strlen(PREFILL), false, "unit", 0, &v, err,
                                sizeof(err));
  CHECK(rc == AA_EINVAL);
  CHECK(strstr(err, "pools.regions.scores.classes: the prefill asks for") != NULL);
  CHECK(strstr(err, "host:scores") != NULL);
  check_unchanged(&w, "aa_runtime_policy_update (prefill)");
  rc = aa_runtime_policy_update(FIXED, strlen(FIXED), false, "unit", 0, &v, err, sizeof(err));
  CHECK(rc == AA_ECONFLICT); /* fixed while the pool lives: HTTP 409 */
  CHECK(strstr(err, "pools.regions.scores: slab_size is fixed") != NULL);
  check_unchanged(&w, "aa_runtime_policy_update (fixed)");
  rc = aa_runtime_policy_update(PATCH_PREFILL, strlen(PATCH_PREFILL), true, "unit", 0, &v, err,
                                sizeof(err));
  CHECK(rc == AA_EINVAL);
  CHECK(strstr(err, "pools.regions.scores.classes: the prefill asks for") != NULL);
  check_unchanged(&w, "aa_runtime_policy_update (patch)");

  /* the same through HTTP */
  if (AA_TEST_WITH_HTTP) {
    reply r;
    http(w.port, "PUT", "/policy", PREFILL, &r);
    CHECK(r.status == 400 && strstr(r.body, "the prefill asks for") != NULL);
    free(r.body);
    check_unchanged(&w, "PUT /policy (prefill)");
    http(w.port, "PUT", "/policy", FIXED, &r);
    CHECK(r.status == 409 && strstr(r.body, "slab_size is fixed") != NULL);
    free(r.body);
    check_unchanged(&w, "PUT /policy (fixed)");
    http(w.port, "PATCH", "/policy", PATCH_PREFILL, &r);
    CHECK(r.status == 400 && strstr(r.body, "the prefill asks for") != NULL);
    free(r.body);
    check_unchanged(&w, "PATCH /policy (prefill)");
  }

  /* a valid change last: every pool changes, version 3, the log's second
   * entry right after the first */
  if (AA_TEST_WITH_HTTP) {
    reply r;
    http(w.port, "PUT", "/policy", LAST, &r);
    CHECK(r.status == 200);
    free(r.body);
  } else {
    CHECK(aa_runtime_policy_update(LAST, strlen(LAST), false, "unit", 0, &v, err,
                                   sizeof(err)) == AA_OK);
  }
  {
    char *doc = NULL;
    aa_class_spec cls[AA_MAX_CLASSES];
    size_t n = 0;
    aa_pool_stats *st = calloc(1, sizeof(*st));
    CHECK(st != NULL);
    CHECK(aa_runtime_policy_json(&doc, &v) == AA_OK && v == 3);
    free(doc);
    CHECK(aa_pool_classes(w.pools[0], cls, AA_MAX_CLASSES, &n, NULL) == AA_OK);
    CHECK(n > w.was[0].ncls);
    CHECK(aa_pool_stats_get(w.pools[1], st) == AA_OK && st->limit_bytes == 134217728);
    CHECK(aa_pool_classes(w.pools[2], cls, AA_MAX_CLASSES, &n, NULL) == AA_OK && n == 3);
    free(st);
  }
  audit_wait(3);
  if (AA_TEST_WITH_STORE) {
    char *log = audit_log();
    cJSON *root = cJSON_Parse(log);
    cJSON *ch = cJSON_GetObjectItemCaseSensitive(root, "changes");
    CHECK(cJSON_GetArraySize(ch) == 3);
    for (int i = 0; i < 3; i++) {
      cJSON *e = cJSON_GetArrayItem(ch, i);
      cJSON *from = cJSON_GetObjectItemCaseSensitive(e, "old_version");
      cJSON *to = cJSON_GetObjectItemCaseSensitive(e, "new_version");
      if (!cJSON_IsNumber(from) || !cJSON_IsNumber(to) || (int)from->valuedouble != i)
        fprintf(stderr, "audit log: %s\n", log);
      CHECK(cJSON_IsNumber(from) && (int)from->valuedouble == i);
      CHECK(cJSON_IsNumber(to) && (int)to->valuedouble == i + 1);
    }
    cJSON_Delete(root);
    free(log);
  }
  for (int p = 0; p < NPOOLS; p++)
    for (int i = 0; i < NBLK; i++)
      CHECK(aa_free(w.pools[p], w.blk[p][i], w.sz[i], NULL) == AA_OK);
  drop_world(&w);
}

static void test_runtime_policy_atomic_refused_late(void **state) {
  char path[512];
  int status = 0;
  pid_t pid;
  FILE *f;
  (void)state;

  snprintf(path, sizeof(path), "%s/atomic-policy.json", tmpdir);
  f = fopen(path, "w");
  assert_non_null(f);
  fputs(CUR, f);
  fclose(f);
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    char db[512];
    snprintf(db, sizeof(db), "%s/atomic.db", tmpdir);
    setenv("ADAPTALLOC_QUIET", "1", 1);
    setenv("ADAPTALLOC_DB", AA_TEST_WITH_STORE ? db : "off", 1);
    setenv("ADAPTALLOC_HTTP", AA_TEST_WITH_HTTP ? "127.0.0.1:0" : "off", 1);
    setenv("ADAPTALLOC_POLICY", path, 1);
    unsetenv("ADAPTALLOC_TOKEN");
    setenv("XDG_RUNTIME_DIR", tmpdir, 1); /* the token file's directory */
    unsetenv("ADAPTALLOC_MODEL");
    unsetenv("ADAPTALLOC_TRACE");
    scenario();
    aa_runtime_shutdown();
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/aa-policy-atomic-XXXXXX");
  return mkdtemp(tmpdir) != NULL ? 0 : -1;
}

static int teardown(void **state) {
  char cmd[300];
  (void)state;
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_policy_atomic_refused_late),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
