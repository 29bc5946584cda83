/*
 * test_runtime_instances.c — the runtime as an object: two runtimes made by
 * aa_runtime_new in one process, each with its own configuration, pools,
 * policy, store and server, working independently of each other and of the
 * default runtime; the configuration read from the environment in one place
 * (aa_runtime_config_from_env) and given to the default runtime by
 * aa_runtime_configure; the ranks in /stats and in the store's run row.
 *
 * Runtimes made by aa_runtime_new run in this process; scenarios on the
 * default runtime (started once per process) run in a forked child.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/runtime.h"
#if AA_TEST_WITH_STORE
#include <sqlite3.h>
#endif

#include "child_check.h" /* CHECK: a failed check ends the forked child */

static char tmpdir[256];

static void clear_env(void) {
  static const char *const names[] = {
      "ADAPTALLOC_MODEL", "ADAPTALLOC_POLICY", "ADAPTALLOC_POLICY_DIR", "ADAPTALLOC_DB",
      "ADAPTALLOC_HTTP", "ADAPTALLOC_TOKEN", "ADAPTALLOC_TRACE", "ADAPTALLOC_QUIET",
      "RANK", "LOCAL_RANK", "WORLD_SIZE"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    unsetenv(names[i]);
}

/* A config that starts nothing but the policy: no store, no server. */
static void quiet_config(aa_runtime_config *cfg) {
  aa_runtime_config_init(cfg);
  cfg->db = "off";
  cfg->http = "off";
  cfg->quiet = true;
  cfg->policy_dir = "/nonexistent-adaptalloc-policies";
}

/* GET path on 127.0.0.1:port; the body (malloc'd) or NULL. */
static char *http_get(int port, const char *path) {
  struct sockaddr_in sa;
  char req[256], *buf = NULL, *body = NULL;
  size_t len = 0, cap = 0;
  int fd = socket(AF_INET, SOCK_STREAM, 0), n;
  if (fd < 0)
    return NULL;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
    goto out;
  n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
               path);
  if (write(fd, req, (size_t)n) != n)
    goto out;
  for (;;) {
    ssize_t r;
    if (cap - len < 4096) {
      char *nb = realloc(buf, cap + 65536);
      if (nb == NULL)
        goto out;
      buf = nb;
      cap += 65536;
    }
    r = read(fd, buf + len, cap - len - 1);
    if (r <= 0)
      break;
    len += (size_t)r;
  }
  if (buf != NULL) {
    char *b;
    buf[len] = '\0';
    b = strstr(buf, "\r\n\r\n");
    body = b != NULL ? strdup(b + 4) : NULL;
  }
out:
  free(buf);
  close(fd);
  return body;
}

/* Removes a database and the -wal and -shm files beside it. */
static void db_gone(const char *db) {
  char p[320];
  unlink(db);
  snprintf(p, sizeof p, "%s-wal", db);
  unlink(p);
  snprintf(p, sizeof p, "%s-shm", db);
  unlink(p);
}

static char *stats_of(aa_runtime *rt) {
  char *json = NULL;
  size_t len = 0;
  assert_int_equal(aa_rt_stats_json(rt, &json, &len), AA_OK);
  assert_non_null(json);
  assert_int_equal(strlen(json), len);
  return json;
}

static void exercise(aa_pool *pool, unsigned char fill) {
  void *p[32];
  for (int i = 0; i < 32; i++) {
    p[i] = aa_alloc(pool, 512 + (size_t)i * 64, NULL);
    assert_non_null(p[i]);
    memset(p[i], fill, 512 + (size_t)i * 64);
  }
  for (int i = 0; i < 32; i++) {
    assert_int_equal(((unsigned char *)p[i])[511], fill);
    assert_int_equal(aa_free(pool, p[i], 512 + (size_t)i * 64, NULL), AA_OK);
  }
}

#if AA_TEST_WITH_STORE
/* The one integer `sql` selects in db (-1 for NULL, -2 on error). */
static int64_t sql_int(const char *db, const char *sql) {
  sqlite3 *h = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -2;
  if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_type(s, 0) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(h);
  return v;
}
#endif

/* ------------------------------------------------------------- instances */

/* Two runtimes, different models, databases, servers and ranks: their pools,
 * policies, /stats, servers and store runs are their own. The default
 * runtime never starts. */
static void test_runtime_two_instances_independent(void **state) {
  aa_runtime_config ca, cb;
  aa_runtime *a = NULL, *b = NULL;
  char dba[300], dbb[300], addr[64], err[256];
  char *sa, *sb, *body;
  uint64_t va = 0, vb = 0, nv = 0;
  aa_pool *pa, *pb;
  const char *patch = "{\"adapt\": {\"interval_ms\": 1500}}";
  (void)state;

  clear_env();
  setenv("ADAPTALLOC_MODEL", "from-env", 1); /* aa_runtime_new does not read it */
  snprintf(dba, sizeof dba, "%s/a.db", tmpdir);
  snprintf(dbb, sizeof dbb, "%s/b.db", tmpdir);
  quiet_config(&ca);
  ca.model = "alpha";
  ca.db = dba;
  ca.http = "127.0.0.1:0";
  ca.rank = 1;
  ca.local_rank = 0;
  ca.world_size = 2;
  quiet_config(&cb);
  cb.model = "beta";
  cb.db = dbb;
  assert_int_equal(aa_runtime_new(&ca, &a), AA_OK);
  assert_int_equal(aa_runtime_new(&cb, &b), AA_OK);
  assert_non_null(a);
  assert_non_null(b);
  assert_ptr_not_equal(a, b);
  assert_false(aa_runtime_started()); /* the default runtime is another */

  pa = aa_rt_pool(a, AA_BACKEND_HOST, -1);
  pb = aa_rt_pool(b, AA_BACKEND_HOST, -1);
  assert_non_null(pa);
  assert_non_null(pb);
  assert_ptr_not_equal(pa, pb);
  assert_ptr_equal(aa_rt_pool(a, AA_BACKEND_HOST, -1), pa); /* made once */
  exercise(pa, 0xA5);
  exercise(pb, 0x5B);

  sa = stats_of(a);
  sb = stats_of(b);
  assert_non_null(strstr(sa, "\"model\":\"alpha\""));
  assert_non_null(strstr(sb, "\"model\":\"beta\""));
  assert_null(strstr(sa, "from-env"));
  assert_non_null(strstr(sa, "\"rank\":1,\"local_rank\":0,\"world_size\":2"));
  assert_non_null(strstr(sb, "\"rank\":null,\"local_rank\":null,\"world_size\":null"));
  free(sa);
  free(sb);

  /* the server: a's on a port of its own, b's off */
  assert_true(aa_rt_http_port(a) > 0);
  assert_int_equal(aa_rt_http_port(b), 0);
  assert_int_equal(aa_rt_http_address(a, addr, sizeof addr), AA_OK);
  assert_non_null(strstr(addr, "127.0.0.1:"));
  assert_int_equal(aa_rt_http_address(b, addr, sizeof addr), AA_ENOTSUP);
  body = http_get(aa_rt_http_port(a), "/stats");
  assert_non_null(body);
  assert_non_null(strstr(body, "\"model\":\"alpha\""));
  assert_non_null(strstr(body, "\"world_size\":2"));
  free(body);

  /* a policy change on a leaves b's policy alone */
  assert_int_equal(aa_rt_policy_update(a, patch, strlen(patch), true, "unit", 0, &nv, err,
                                       sizeof err),
                   AA_OK);
  assert_int_equal(nv, 2);
  {
    char *doc = NULL;
    assert_int_equal(aa_rt_policy_json(a, &doc, &va), AA_OK);
    free(doc);
    assert_int_equal(aa_rt_policy_json(b, &doc, &vb), AA_OK);
    free(doc);
  }
  assert_int_equal(va, 2);
  assert_int_equal(vb, 1);

#if AA_TEST_WITH_STORE
  /* each its own database and run (the first run of each file) */
  assert_int_equal(aa_rt_run_id(a), 1);
  assert_int_equal(aa_rt_run_id(b), 1);
#endif
  aa_runtime_destroy(a);
  aa_runtime_destroy(b);
  aa_runtime_destroy(NULL);
  assert_false(aa_runtime_started());
#if AA_TEST_WITH_STORE
  /* each run row ended, with its runtime's model and ranks */
  assert_int_equal(sql_int(dba, "SELECT count(*) FROM runs WHERE model = 'alpha' AND "
                                "ended_ms IS NOT NULL"),
                   1);
  assert_int_equal(sql_int(dba, "SELECT rank FROM runs"), 1);
  assert_int_equal(sql_int(dba, "SELECT local_rank FROM runs"), 0);
  assert_int_equal(sql_int(dba, "SELECT world_size FROM runs"), 2);
  assert_int_equal(sql_int(dba, "SELECT count(*) FROM policy_changes WHERE source = 'unit'"), 1);
  assert_int_equal(sql_int(dbb, "SELECT count(*) FROM runs WHERE model = 'beta' AND "
                                "ended_ms IS NOT NULL"),
                   1);
  assert_int_equal(sql_int(dbb, "SELECT rank FROM runs"), -1); /* NULL */
  assert_int_equal(sql_int(dbb, "SELECT world_size FROM runs"), -1);
  assert_int_equal(sql_int(dbb, "SELECT count(*) FROM policy_changes WHERE source = 'unit'"), 0);
  assert_int_equal(sql_int(dbb, "SELECT count(*) FROM snapshots WHERE pool = 'host'"),
                   sql_int(dbb, "SELECT count(*) FROM snapshots"));
#endif
  db_gone(dba);
  db_gone(dbb);
  unsetenv("ADAPTALLOC_MODEL");
}

/* A runtime made and destroyed, then another on the same database: the
 * second is a new run of that file. Destroy frees everything (ASan). */
static void test_runtime_instance_destroy_then_new(void **state) {
  aa_runtime_config c;
  aa_runtime *rt = NULL;
  char db[300];
  (void)state;
  clear_env();
  snprintf(db, sizeof db, "%s/again.db", tmpdir);
  quiet_config(&c);
  c.db = db;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(aa_runtime_new(&c, &rt), AA_OK);
    exercise(aa_rt_pool(rt, AA_BACKEND_HOST, -1), (unsigned char)i);
#if AA_TEST_WITH_STORE
    assert_int_equal(aa_rt_run_id(rt), i + 1);
#endif
    aa_runtime_destroy(rt);
  }
  db_gone(db);
}

/* A refused setting in a runtime's config is refused as in the
 * environment: a token no client can send keeps the server off, a model
 * that is a path becomes "default"; the runtime is still made. */
static void test_runtime_instance_settings_refused(void **state) {
  aa_runtime_config c;
  aa_runtime *rt = NULL;
  char *s;
  (void)state;
  clear_env();
  quiet_config(&c);
  c.http = "127.0.0.1:0";
  c.token = "secret\n";
  c.model = "../up";
  assert_int_equal(aa_runtime_new(&c, &rt), AA_OK);
  assert_int_equal(aa_rt_http_port(rt), 0);
  s = stats_of(rt);
  assert_non_null(strstr(s, "\"model\":\"default\""));
  free(s);
  aa_runtime_destroy(rt);
}

/* Bad arguments change nothing: AA_EINVAL, *out NULL. */
static void test_runtime_new_bad_config(void **state) {
  aa_runtime_config c;
  aa_runtime *rt = (aa_runtime *)&c; /* not NULL: must be cleared */
  (void)state;
  quiet_config(&c);
  assert_int_equal(aa_runtime_new(&c, NULL), AA_EINVAL);
  c.size = 8;
  assert_int_equal(aa_runtime_new(&c, &rt), AA_EINVAL);
  assert_null(rt);
  quiet_config(&c);
  c.version = 1;
  rt = (aa_runtime *)&c;
  assert_int_equal(aa_runtime_new(&c, &rt), AA_EINVAL);
  assert_null(rt);
  quiet_config(&c);
  c.world_size = 0;
  assert_int_equal(aa_runtime_new(&c, &rt), AA_EINVAL);
  quiet_config(&c);
  c.trace = 2;
  assert_int_equal(aa_runtime_new(&c, &rt), AA_EINVAL);
  quiet_config(&c);
  c.rank = -7;
  assert_int_equal(aa_runtime_new(&c, &rt), AA_EINVAL);
  assert_null(rt);
  assert_null(aa_rt_pool(NULL, AA_BACKEND_HOST, -1));
  assert_int_equal(aa_rt_http_port(NULL), 0);
  assert_int_equal(aa_rt_run_id(NULL), 0);
  assert_int_equal(aa_rt_stats_json(NULL, &(char *){NULL}, &(size_t){0}), AA_EINVAL);
  /* the default runtime's init takes the same check */
  quiet_config(&c);
  c.version = 1;
  assert_int_equal(aa_runtime_init(&c), AA_EINVAL);
  assert_false(aa_runtime_started());
}

/* ------------------------------------------------------------- environment */

static void test_runtime_config_from_env(void **state) {
  aa_runtime_config c;
  (void)state;
  clear_env();
  assert_int_equal(aa_runtime_config_from_env(NULL), AA_EINVAL);
  assert_int_equal(aa_runtime_config_from_env(&c), AA_OK);
  assert_int_equal(c.size, sizeof c);
  assert_int_equal(c.version, AA_RUNTIME_CONFIG_VERSION);
  assert_null(c.model);
  assert_null(c.policy_path);
  assert_null(c.policy_dir);
  assert_null(c.db);
  assert_null(c.http);
  assert_null(c.token);
  assert_int_equal(c.trace, -1);
  assert_false(c.quiet);
  assert_int_equal(c.rank, -1);
  assert_int_equal(c.local_rank, -1);
  assert_int_equal(c.world_size, -1);

  setenv("ADAPTALLOC_MODEL", "bert", 1);
  setenv("ADAPTALLOC_POLICY", "/p.json", 1);
  setenv("ADAPTALLOC_POLICY_DIR", "/pd", 1);
  setenv("ADAPTALLOC_DB", "/tmp/r{rank}.db", 1);
  setenv("ADAPTALLOC_HTTP", "OFF", 1);
  setenv("ADAPTALLOC_TOKEN", "tok", 1);
  setenv("ADAPTALLOC_TRACE", "1", 1);
  setenv("ADAPTALLOC_QUIET", "", 1); /* set at all: quiet */
  setenv("RANK", "7", 1);
  setenv("LOCAL_RANK", "3", 1);
  setenv("WORLD_SIZE", "8", 1);
  assert_int_equal(aa_runtime_config_from_env(&c), AA_OK);
  assert_string_equal(c.model, "bert");
  assert_string_equal(c.policy_path, "/p.json");
  assert_string_equal(c.policy_dir, "/pd");
  assert_string_equal(c.db, "/tmp/r{rank}.db"); /* expanded when a runtime takes it */
  assert_string_equal(c.http, "OFF");
  assert_string_equal(c.token, "tok");
  assert_int_equal(c.trace, 1);
  assert_true(c.quiet);
  assert_int_equal(c.rank, 7);
  assert_int_equal(c.local_rank, 3);
  assert_int_equal(c.world_size, 8);

  /* ADAPTALLOC_TRACE: 0 and off (any case) are off, anything else is off and said */
  {
    const char *off[] = {"0", "off", "OFF", "yes", "2"};
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++) {
      setenv("ADAPTALLOC_TRACE", off[i], 1);
      assert_int_equal(aa_runtime_config_from_env(&c), AA_OK);
      assert_int_equal(c.trace, 0);
    }
  }
  /* an empty variable is an unset one */
  setenv("ADAPTALLOC_TRACE", "", 1);
  setenv("ADAPTALLOC_MODEL", "", 1);
  assert_int_equal(aa_runtime_config_from_env(&c), AA_OK);
  assert_int_equal(c.trace, -1);
  assert_null(c.model);
  /* ranks that are not numbers in range are said and left unset */
  {
    const char *bad_rank[] = {"3x", "-1", " 3", "+3", "1073741825", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_rank / sizeof bad_rank[0]; i++) {
      setenv("RANK", bad_rank[i], 1);
      assert_int_equal(aa_runtime_config_from_env(&c), AA_OK);
      assert_int_equal(c.rank, -1);
    }
  }
  setenv("RANK", "0", 1);
  setenv("LOCAL_RANK", "65536", 1); /* over the "+rank" port bound */
  setenv("WORLD_SIZE", "0", 1);     /* a world has a rank at least */
  assert_int_equal(aa_runtime_config_from_env(&c), AA_OK);
  assert_int_equal(c.rank, 0);
  assert_int_equal(c.local_rank, -1);
  assert_int_equal(c.world_size, -1);
  setenv("LOCAL_RANK", "65535", 1);
  assert_int_equal(aa_runtime_config_from_env(&c), AA_OK);
  assert_int_equal(c.local_rank, 65535);
  clear_env();
}

static size_t count_of(const char *hay, const char *needle) {
  size_t n = 0;
  for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle))
    n++;
  return n;
}

/* A refused RANK, LOCAL_RANK or WORLD_SIZE is said once a process, however
 * often the environment is read (a caller's aa_runtime_config_from_env, as
 * adaptalloc.configure() and adaptalloc-demo do, then the default runtime's
 * start); a new refused value is said again (issue #39 class 7). */
static void scenario_refused_rank_said_once(void) {
  aa_runtime_config c;
  char path[512], text[8192];
  int saved, fd;
  size_t n;
  FILE *f;

  setenv("ADAPTALLOC_DB", "off", 1);
  setenv("ADAPTALLOC_HTTP", "off", 1);
  setenv("RANK", "3x", 1);
  setenv("LOCAL_RANK", "70000", 1);
  setenv("WORLD_SIZE", "0w", 1); /* values the parent never said */
  setenv("ADAPTALLOC_TRACE", "yes please", 1);
  snprintf(path, sizeof path, "%s/said-once.err", tmpdir);
  fflush(stderr);
  saved = dup(2);
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2);
  close(fd);
  CHECK(aa_runtime_config_from_env(&c) == AA_OK && c.rank == -1);
  CHECK(aa_runtime_config_from_env(&c) == AA_OK && c.local_rank == -1);
  CHECK(aa_runtime_init(NULL) == AA_OK);
  setenv("RANK", "4y", 1);
  CHECK(aa_runtime_config_from_env(&c) == AA_OK && c.world_size == -1);
  aa_runtime_shutdown();
  fflush(stderr);
  CHECK(dup2(saved, 2) == 2);
  close(saved);
  f = fopen(path, "r");
  CHECK(f != NULL);
  n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  unlink(path);
  text[n] = '\0';
  if (count_of(text, "\"3x\"") != 1 || count_of(text, "\"70000\"") != 1 ||
      count_of(text, "WORLD_SIZE is") != 1 || count_of(text, "\"4y\"") != 1 ||
      count_of(text, "ADAPTALLOC_TRACE is") != 1) {
    fprintf(stderr, "each refusal once, the new RANK once more; said:\n%s", text);
    _exit(1);
  }
}

static int run_child(void (*scenario)(void)) {
  int status = 0;
  pid_t pid;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    clear_env();
    scenario();
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* aa_runtime_configure: the default runtime starts with that config, not
 * the environment; after the start it is refused and changes nothing. */
static void scenario_configure_default(void) {
  aa_runtime_config c;
  char *json = NULL;
  size_t len = 0;
  setenv("ADAPTALLOC_MODEL", "from-env", 1);
  setenv("ADAPTALLOC_DB", "off", 1);
  setenv("ADAPTALLOC_HTTP", "off", 1);
  setenv("ADAPTALLOC_QUIET", "1", 1);
  setenv("RANK", "4", 1);
  CHECK(aa_runtime_config_from_env(&c) == AA_OK); /* the environment as the base */
  c.model = "configured";
  c.world_size = 6;
  c.version = 1;
  CHECK(aa_runtime_configure(&c) == AA_EINVAL);
  CHECK(aa_runtime_configure(NULL) == AA_EINVAL);
  c.version = AA_RUNTIME_CONFIG_VERSION;
  CHECK(aa_runtime_configure(&c) == AA_OK);
  /* the copy is the runtime's: the caller's strings and environment may go */
  setenv("ADAPTALLOC_MODEL", "changed-after", 1);
  setenv("ADAPTALLOC_HTTP", "127.0.0.1:0", 1);
  CHECK(!aa_runtime_started());
  CHECK(aa_runtime_stats_json(&json, &len) == AA_OK); /* starts it */
  CHECK(aa_runtime_started());
  CHECK(strstr(json, "\"model\":\"configured\"") != NULL);
  CHECK(strstr(json, "\"rank\":4,\"local_rank\":null,\"world_size\":6") != NULL);
  CHECK(aa_runtime_http_port() == 0);
  free(json);
  c.model = "too-late";
  CHECK(aa_runtime_configure(&c) == AA_EBUSY);
  CHECK(aa_runtime_stats_json(&json, &len) == AA_OK);
  CHECK(strstr(json, "\"model\":\"configured\"") != NULL);
  free(json);
  aa_runtime_shutdown();
}

static void test_runtime_refused_rank_said_once(void **state) {
  (void)state;
  assert_int_equal(run_child(scenario_refused_rank_said_once), 0);
}

static void test_runtime_configure_default(void **state) {
  (void)state;
  assert_int_equal(run_child(scenario_configure_default), 0);
}

/* Without aa_runtime_configure the default runtime reads the environment,
 * once: the ranks come from RANK, LOCAL_RANK and WORLD_SIZE; aa_runtime_init's
 * set fields win over it. */
static void scenario_default_from_env(void) {
  aa_runtime_config over;
  char *json = NULL;
  size_t len = 0;
  setenv("ADAPTALLOC_MODEL", "envmodel", 1);
  setenv("ADAPTALLOC_DB", "off", 1);
  setenv("ADAPTALLOC_HTTP", "off", 1);
  setenv("ADAPTALLOC_QUIET", "1", 1);
  setenv("RANK", "5", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("WORLD_SIZE", "8", 1);
  aa_runtime_config_init(&over);
  over.local_rank = 2;
  CHECK(aa_runtime_init(&over) == AA_OK);
  setenv("RANK", "9", 1); /* read once: later changes do nothing */
  CHECK(aa_runtime_stats_json(&json, &len) == AA_OK);
  CHECK(strstr(json, "\"model\":\"envmodel\"") != NULL);
  CHECK(strstr(json, "\"rank\":5,\"local_rank\":2,\"world_size\":8") != NULL);
  free(json);
  aa_runtime_shutdown();
}

static void test_runtime_default_from_env(void **state) {
  (void)state;
  assert_int_equal(run_child(scenario_default_from_env), 0);
}

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof tmpdir, "/tmp/aa-rtinst-XXXXXX");
  return mkdtemp(tmpdir) != NULL ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  return rmdir(tmpdir) == 0 ? 0 : -1; /* every file removed */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_two_instances_independent),
      cmocka_unit_test(test_runtime_instance_destroy_then_new),
      cmocka_unit_test(test_runtime_instance_settings_refused),
      cmocka_unit_test(test_runtime_new_bad_config),
      cmocka_unit_test(test_runtime_config_from_env),
      cmocka_unit_test(test_runtime_refused_rank_said_once),
      cmocka_unit_test(test_runtime_configure_default),
      cmocka_unit_test(test_runtime_default_from_env),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
