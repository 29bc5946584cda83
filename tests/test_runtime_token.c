/*
 * test_runtime_token.c — mutations need a credential by default: with no
 * ADAPTALLOC_TOKEN the runtime makes a token, writes it to a file only its
 * user can read (mode 0600 in a 0700 directory) and refuses every mutating
 * request without it (401, nothing changes), as another local user without
 * the file would be refused; with the file's token the change goes through;
 * reads stay open. ADAPTALLOC_TOKEN=off is the loopback opt-out (no file,
 * mutations open) and is refused off loopback. The file goes when the
 * runtime stops; a stale one of the same port is replaced.
 *
 * Runtimes of their own (aa_runtime_new), so no fork is needed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/runtime.h"
#include "token_auth.h"

static char tmpdir[256];

/* One request with Connection: close and `extra` headers; the status. */
static int http(int port, const char *method, const char *path, const char *extra,
                const char *body) {
  struct sockaddr_in sa;
  char req[4096], resp[512];
  int fd, n, status = -1;
  ssize_t got = 0, r;

  fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  memset(&sa, 0, sizeof(sa));
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  n = snprintf(req, sizeof(req),
               "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s"
               "Content-Type: application/merge-patch+json\r\nContent-Length: %zu\r\n\r\n%s",
               method, path, extra ? extra : "", body ? strlen(body) : 0, body ? body : "");
  assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
  while (got < (ssize_t)sizeof(resp) - 1 &&
         (r = recv(fd, resp + got, sizeof(resp) - 1 - (size_t)got, 0)) > 0)
    got += r;
  resp[got] = '\0';
  if (sscanf(resp, "HTTP/1.%*d %d", &status) != 1)
    status = -1;
  close(fd);
  return status;
}

static aa_runtime *start(const char *http_addr, const char *token) {
  aa_runtime_config cfg;
  aa_runtime *rt = NULL;
  aa_runtime_config_init(&cfg);
  cfg.db = "off";
  cfg.http = http_addr;
  cfg.token = token;
  cfg.quiet = true;
  assert_int_equal(aa_runtime_new(&cfg, &rt), AA_OK);
  return rt;
}

static uint64_t version(aa_runtime *rt) {
  char *doc = NULL;
  uint64_t v = 0;
  assert_int_equal(aa_rt_policy_json(rt, &doc, &v), AA_OK);
  free(doc);
  return v;
}

static const char PATCH[] = "{\"pools\":{\"host\":{\"limit_bytes\":268435456}}}";

static void test_runtime_token_default_needs_the_file(void **state) {
  char path[1200], dir[1200], auth[400], token[300];
  struct stat st;
  aa_runtime *rt;
  int port;
  (void)state;

  rt = start("127.0.0.1:0", NULL);
  port = aa_rt_http_port(rt);
  assert_true(port > 0);
  assert_int_equal(aa_rt_token_file(rt, path, sizeof(path)), AA_OK);
  snprintf(dir, sizeof(dir), "%s/adaptalloc/%d.token", tmpdir, port);
  assert_string_equal(path, dir);

  /* only the job's user can read it: 0600, in a 0700 directory */
  assert_int_equal(lstat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(st.st_uid, geteuid());
  snprintf(dir, sizeof(dir), "%s/adaptalloc", tmpdir);
  assert_int_equal(lstat(dir, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0700);
  assert_true(aa_test_read_token(rt, token, sizeof(token)));
  assert_int_equal(strlen(token), 64); /* 32 random bytes, hex */

  /* reads stay open */
  assert_int_equal(http(port, "GET", "/stats", NULL, NULL), 200);
  assert_int_equal(http(port, "GET", "/policy", NULL, NULL), 200);

  /* another user, without the file: refused, nothing changes */
  assert_int_equal(version(rt), 1);
  assert_int_equal(http(port, "PATCH", "/policy", NULL, PATCH), 401);
  assert_int_equal(http(port, "PUT", "/policy", NULL, PATCH), 401);
  assert_int_equal(http(port, "POST", "/policy", NULL, PATCH), 401);
  assert_int_equal(http(port, "DELETE", "/policy", NULL, NULL), 401);
  assert_int_equal(http(port, "PATCH", "/policy", "Authorization: Bearer 0123\r\n", PATCH), 403);
  assert_int_equal(version(rt), 1);

  /* with the file's token it works */
  assert_true(aa_test_auth_header(rt, auth, sizeof(auth)));
  assert_int_equal(http(port, "PATCH", "/policy", auth, PATCH), 200);
  assert_int_equal(version(rt), 2);

  aa_runtime_destroy(rt);
  /* the file goes with the server */
  assert_int_equal(lstat(path, &st), -1);
  assert_int_equal(errno, ENOENT);
}

/* Two runtimes: each its own token and file; a stale file of the port is
 * replaced, never read. */
static void test_runtime_token_each_job_its_own(void **state) {
  char p1[1200], p2[1200], t1[300], t2[300];
  aa_runtime *a, *b;
  (void)state;
  a = start("127.0.0.1:0", NULL);
  b = start("127.0.0.1:0", NULL);
  assert_int_equal(aa_rt_token_file(a, p1, sizeof(p1)), AA_OK);
  assert_int_equal(aa_rt_token_file(b, p2, sizeof(p2)), AA_OK);
  assert_string_not_equal(p1, p2);
  assert_true(aa_test_read_token(a, t1, sizeof(t1)));
  assert_true(aa_test_read_token(b, t2, sizeof(t2)));
  assert_string_not_equal(t1, t2);
  /* a's token does not open b */
  {
    char auth[400];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", t1);
    assert_int_equal(http(aa_rt_http_port(b), "PATCH", "/policy", auth, PATCH), 403);
  }
  aa_runtime_destroy(a);
  aa_runtime_destroy(b);
}

static void test_runtime_token_stale_file_replaced(void **state) {
  char path[1200], stale[1200], token[300];
  struct stat st;
  aa_runtime *rt;
  int fd, port;
  (void)state;
  /* find a free port, leave a stale file for it, then listen there */
  rt = start("127.0.0.1:0", "off");
  port = aa_rt_http_port(rt);
  aa_runtime_destroy(rt);
  snprintf(stale, sizeof(stale), "%s/adaptalloc/%d.token", tmpdir, port);
  fd = open(stale, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  assert_true(fd >= 0);
  assert_int_equal(write(fd, "stale\n", 6), 6);
  close(fd);
  snprintf(path, sizeof(path), "127.0.0.1:%d", port);
  rt = start(path, NULL);
  if (aa_rt_http_port(rt) != port) { /* someone took the port meanwhile */
    aa_runtime_destroy(rt);
    unlink(stale);
    skip();
  }
  assert_true(aa_test_read_token(rt, token, sizeof(token)));
  assert_string_not_equal(token, "stale");
  assert_int_equal(lstat(stale, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  aa_runtime_destroy(rt);
}

/* ADAPTALLOC_TOKEN=off: loopback's opt-out (no token, no file, mutations
 * open to local users, loopback Host only); a set token: no file either. */
static void test_runtime_token_off_and_set(void **state) {
  char path[1200];
  aa_runtime *rt;
  int port;
  (void)state;
  rt = start("127.0.0.1:0", "OFF");
  port = aa_rt_http_port(rt);
  assert_true(port > 0);
  assert_int_equal(aa_rt_token_file(rt, path, sizeof(path)), AA_ENOTSUP);
  assert_int_equal(http(port, "PATCH", "/policy", NULL, PATCH), 200);
  aa_runtime_destroy(rt);

  rt = start("127.0.0.1:0", "my-own-token");
  port = aa_rt_http_port(rt);
  assert_int_equal(aa_rt_token_file(rt, path, sizeof(path)), AA_ENOTSUP);
  assert_int_equal(http(port, "PATCH", "/policy", NULL, PATCH), 401);
  assert_int_equal(http(port, "PATCH", "/policy", "Authorization: Bearer my-own-token\r\n", PATCH),
                   200);
  aa_runtime_destroy(rt);

  /* off loopback, "off" is no token: the server stays off */
  rt = start("0.0.0.0:0", "off");
  assert_int_equal(aa_rt_http_port(rt), 0);
  aa_runtime_destroy(rt);
}

/* A token directory others can enter is not used: the server serves reads
 * only (no file, so no client can change the policy over HTTP). */
static void test_runtime_token_unsafe_directory(void **state) {
  char dir[600], path[1200];
  aa_runtime *rt;
  int port;
  (void)state;
  snprintf(dir, sizeof(dir), "%s/open", tmpdir);
  assert_int_equal(mkdir(dir, 0700), 0);
  snprintf(path, sizeof(path), "%s/adaptalloc", dir);
  assert_int_equal(mkdir(path, 0755), 0);
  assert_int_equal(chmod(path, 0755), 0);
  setenv("XDG_RUNTIME_DIR", dir, 1);
  rt = start("127.0.0.1:0", NULL);
  setenv("XDG_RUNTIME_DIR", tmpdir, 1);
  port = aa_rt_http_port(rt);
  assert_true(port > 0);
  assert_int_equal(aa_rt_token_file(rt, path, sizeof(path)), AA_ENOTSUP);
  assert_int_equal(http(port, "GET", "/stats", NULL, NULL), 200);
  assert_int_equal(http(port, "PATCH", "/policy", NULL, PATCH), 401);
  aa_runtime_destroy(rt);
}

static int setup(void **state) {
  (void)state;
  snprintf(tmpdir, sizeof(tmpdir), "/tmp/aa-token-XXXXXX");
  if (mkdtemp(tmpdir) == NULL)
    return -1;
  setenv("XDG_RUNTIME_DIR", tmpdir, 1);
  return 0;
}

static int teardown(void **state) {
  char cmd[400];
  (void)state;
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_token_default_needs_the_file),
      cmocka_unit_test(test_runtime_token_each_job_its_own),
      cmocka_unit_test(test_runtime_token_stale_file_replaced),
      cmocka_unit_test(test_runtime_token_off_and_set),
      cmocka_unit_test(test_runtime_token_unsafe_directory),
  };
  if (!AA_TEST_WITH_HTTP) {
    printf("no HTTP server in this build: nothing to test\n");
    return 0;
  }
  return cmocka_run_group_tests(tests, setup, teardown);
}
