/*
 * test_http_keepalive.c — the abuse suite for requests after the first on a
 * connection: kept-alive requests sent one after the other (each after the
 * answer to the one before), and pipelined requests sent in one packet. Every
 * head is checked on its raw bytes before libmicrohttpd parses it, so what is
 * refused on a connection's first request is refused on its second and third:
 * a raw NUL inside Authorization, If-Match, Host or any other header value
 * (libmicrohttpd would cut the value at the NUL and accept the rest), a bare
 * CR, obsolete line folding, a space before ':', an over-long header name,
 * a NUL in the target, an unsupported version. Each refused request changes
 * nothing, is answered 400 (JSON) after the answers to the requests before
 * it, and ends the connection; the same request without the bad byte is
 * accepted (so each case can fail).
 *
 * The client reads answers one at a time by their Content-Length.
 *
 * One concern, the requests after a connection's first (one ctest), kept in
 * one file though it runs past 600 lines; the cmocka table at its end lists
 * every case.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem, strcasestr */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cJSON.h>
#include <cmocka.h>

#include "adaptalloc/http.h"

#define TOKEN "s3cret-token"
#define INITIAL_POLICY "{\"name\":\"test\"}"

/* ------------------------------------------------------------ fake provider */

typedef struct fake {
  pthread_mutex_t mu;
  char policy[256];
  uint64_t version;
} fake;

static int fake_stats(void *user, const char *pool, char **out, size_t *len) {
  (void)user;
  (void)pool;
  *out = strdup("{\"pools\":[]}");
  *len = *out != NULL ? strlen(*out) : 0;
  return *out != NULL ? AA_OK : AA_ENOMEM;
}

static int fake_get(void *user, char **json, size_t *len, uint64_t *version) {
  fake *f = user;
  pthread_mutex_lock(&f->mu);
  *json = strdup(f->policy);
  *version = f->version;
  pthread_mutex_unlock(&f->mu);
  *len = *json != NULL ? strlen(*json) : 0;
  return *json != NULL ? AA_OK : AA_ENOMEM;
}

/* Takes a body of at most 255 bytes that starts with '{' as the new policy;
 * honours If-Match. */
static int fake_put(void *user, const aa_http_policy_change *ch, uint64_t *nv,
                    char *err, size_t errcap) {
  fake *f = user;
  int rc = AA_OK;
  pthread_mutex_lock(&f->mu);
  if (ch->len == 0 || ch->body[0] != '{') {
    snprintf(err, errcap, "not an object");
    rc = AA_EPARSE;
  } else if (ch->has_if_match && ch->if_match != f->version) {
    snprintf(err, errcap, "stale");
    rc = AA_ESTALE;
  } else if (ch->len >= sizeof f->policy) {
    snprintf(err, errcap, "too long for the fake");
    rc = AA_EINVAL;
  } else {
    memcpy(f->policy, ch->body, ch->len);
    f->policy[ch->len] = '\0';
    *nv = ++f->version;
  }
  pthread_mutex_unlock(&f->mu);
  return rc;
}

typedef struct fixture {
  fake f;
  aa_http *srv;
  int port;
} fixture;

static int start(void **state, const char *token) {
  fixture *fx = calloc(1, sizeof *fx);
  aa_http_config cfg;
  aa_http_provider p;
  char err[512];
  if (fx == NULL)
    return -1;
  pthread_mutex_init(&fx->f.mu, NULL);
  snprintf(fx->f.policy, sizeof fx->f.policy, "%s", INITIAL_POLICY);
  fx->f.version = 1;
  aa_http_config_init(&cfg);
  cfg.address = "127.0.0.1:0";
  cfg.token = token;
  cfg.timeout_s = 3;
  memset(&p, 0, sizeof p);
  p.version = AA_HTTP_PROVIDER_VERSION;
  p.user = &fx->f;
  p.stats_json = fake_stats;
  p.policy_get = fake_get;
  p.policy_put = fake_put;
  p.policy_patch = fake_put;
  if (aa_http_new(&cfg, &p, &fx->srv, err, sizeof err) != AA_OK) {
    fprintf(stderr, "aa_http_new: %s\n", err);
    free(fx);
    return -1;
  }
  fx->port = aa_http_port(fx->srv);
  *state = fx;
  return 0;
}

static int setup(void **state) { return start(state, NULL); }
static int setup_token(void **state) { return start(state, TOKEN); }

static int teardown(void **state) {
  fixture *fx = *state;
  aa_http_destroy(fx->srv);
  pthread_mutex_destroy(&fx->f.mu);
  free(fx);
  return 0;
}

static uint64_t version_now(fixture *fx) {
  uint64_t v;
  pthread_mutex_lock(&fx->f.mu);
  v = fx->f.version;
  pthread_mutex_unlock(&fx->f.mu);
  return v;
}

/* ------------------------------------------------------------ client */

typedef struct conn {
  int fd;
  char buf[1 << 18];
  size_t len;
} conn;

typedef struct answer {
  int status;
  char head[2048];
  char body[4096];
  size_t body_len;
} answer;

static conn *conn_open(int port) {
  struct sockaddr_in a;
  conn *c = calloc(1, sizeof *c);
  assert_non_null(c);
  c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(c->fd >= 0);
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(c->fd, (struct sockaddr *)&a, sizeof a), 0);
  return c;
}

static void conn_close(conn *c) {
  close(c->fd);
  free(c);
}

static void conn_send(conn *c, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    assert_true(w > 0);
    p += w;
    n -= (size_t)w;
  }
}

/* More bytes into c->buf; false at EOF, on an error, or after 5 s. */
static bool conn_fill(conn *c) {
  struct pollfd pf = {c->fd, POLLIN, 0};
  ssize_t n;
  if (c->len == sizeof c->buf || poll(&pf, 1, 5000) <= 0)
    return false;
  n = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
  if (n <= 0)
    return false;
  c->len += (size_t)n;
  return true;
}

/* The next answer on c (head, then Content-Length bytes of body); status 0
 * when the connection ended first. */
static void next_answer(conn *c, answer *a) {
  char *end;
  size_t hl, cl = 0;
  const char *p;
  memset(a, 0, sizeof *a);
  for (;;) {
    end = c->len > 0 ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
    if (end != NULL)
      break;
    if (!conn_fill(c))
      return;
  }
  hl = (size_t)(end - c->buf) + 4;
  assert_true(hl < sizeof a->head);
  memcpy(a->head, c->buf, hl);
  a->head[hl] = '\0';
  p = strcasestr(a->head, "\r\nContent-Length:");
  if (p != NULL)
    cl = strtoul(p + 17, NULL, 10);
  assert_true(cl < sizeof a->body);
  while (c->len < hl + cl)
    if (!conn_fill(c))
      return;
  memcpy(a->body, c->buf + hl, cl);
  a->body[cl] = '\0';
  a->body_len = cl;
  memmove(c->buf, c->buf + hl + cl, c->len - hl - cl);
  c->len -= hl + cl;
  if (strncmp(a->head, "HTTP/1.", 7) == 0)
    a->status = atoi(a->head + 9);
}

/* The server ends the connection: nothing more arrives, then EOF. */
static void expect_end(conn *c) {
  while (conn_fill(c))
    ;
  if (c->len != 0)
    fail_msg("bytes after the last answer: %.*s", (int)c->len, c->buf);
}

/* A JSON error document whose "error" contains needle (when not NULL), or
 * whose "path" is what follows "path=" in needle. */
static void expect_error(const answer *a, int status, const char *needle) {
  cJSON *doc;
  const cJSON *e;
  if (a->status != status)
    fail_msg("expected %d, got %d: %s%s", status, a->status, a->head, a->body);
  assert_non_null(strcasestr(a->head, "Content-Type: application/json"));
  doc = cJSON_ParseWithLength(a->body, a->body_len);
  if (doc == NULL)
    fail_msg("the error is not JSON: %s", a->body);
  e = cJSON_GetObjectItemCaseSensitive(doc, "error");
  assert_true(cJSON_IsString(e));
  if (needle != NULL && strncmp(needle, "path=", 5) == 0) {
    /* "path=/x": the document's "path" is /x */
    const cJSON *pth = cJSON_GetObjectItemCaseSensitive(doc, "path");
    if (!cJSON_IsString(pth) || strcmp(pth->valuestring, needle + 5) != 0)
      fail_msg("error '%s' has path '%s', not '%s'", e->valuestring,
               cJSON_IsString(pth) ? pth->valuestring : "(none)", needle + 5);
  } else if (needle != NULL && strstr(e->valuestring, needle) == NULL)
    fail_msg("error '%s' lacks '%s'", e->valuestring, needle);
  cJSON_Delete(doc);
}

static const char GET_OK[] = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

/* Sends `before` good GETs then `bad` (n bytes) on one connection, one after
 * the other (each after its answer) or all in one send; expects the GETs
 * answered 200, `bad` answered with status (JSON, error containing needle),
 * then the end of the connection. */
static void later_refused(fixture *fx, unsigned before, const char *bad,
                          size_t n, bool pipelined, int status,
                          const char *needle) {
  conn *c = conn_open(fx->port);
  answer a;
  if (pipelined) {
    char *all = malloc(before * strlen(GET_OK) + n);
    size_t len = 0;
    assert_non_null(all);
    for (unsigned i = 0; i < before; i++) {
      memcpy(all + len, GET_OK, strlen(GET_OK));
      len += strlen(GET_OK);
    }
    memcpy(all + len, bad, n);
    conn_send(c, all, len + n);
    free(all);
    for (unsigned i = 0; i < before; i++) {
      next_answer(c, &a);
      assert_int_equal(a.status, 200);
      assert_memory_equal(a.body, "ok", 2);
    }
  } else {
    for (unsigned i = 0; i < before; i++) {
      conn_send(c, GET_OK, strlen(GET_OK));
      next_answer(c, &a);
      assert_int_equal(a.status, 200);
      assert_memory_equal(a.body, "ok", 2);
    }
    conn_send(c, bad, n);
  }
  next_answer(c, &a);
  expect_error(&a, status, needle);
  assert_non_null(strcasestr(a.head, "Connection: close"));
  expect_end(c);
  conn_close(c);
}

/* Sends one request on a fresh connection; its status. */
static int one_request(fixture *fx, const char *req, size_t n) {
  conn *c = conn_open(fx->port);
  answer a;
  conn_send(c, req, n);
  next_answer(c, &a);
  conn_close(c);
  return a.status;
}

/* ------------------------------------------------------------ tests */

/* A PUT that the server accepts (right token, If-Match of the version in
 * force, loopback Host), with `junk` after a NUL in the value of header
 * `which` (NULL: no NUL). Returns its length (it holds NUL bytes). */
static size_t put_with_nul(char *out, size_t cap, const char *which,
                           const char *junk) {
  static const char *const names[] = {"Host", "Authorization", "If-Match",
                                      "Content-Type"};
  static const char *const values[] = {"127.0.0.1", ("Bearer " TOKEN), "\"1\"",
                                       "application/json"};
  size_t len = 0;
  int n = snprintf(out, cap, "PUT /policy HTTP/1.1\r\n");
  len = (size_t)n;
  for (size_t i = 0; i < 4; i++) {
    n = snprintf(out + len, cap - len, "%s: %s", names[i], values[i]);
    len += (size_t)n;
    if (which != NULL && strcmp(which, names[i]) == 0) {
      out[len++] = '\0';
      n = snprintf(out + len, cap - len, "%s", junk);
      len += (size_t)n;
    }
    n = snprintf(out + len, cap - len, "\r\n");
    len += (size_t)n;
  }
  n = snprintf(out + len, cap - len,
               "Content-Length: 13\r\n\r\n{\"changed\":1}");
  len += (size_t)n;
  assert_true(len < cap);
  return len;
}

static void test_http_keepalive_nul_in_later_requests(void **state) {
  fixture *fx = *state;
  static const struct {
    const char *header;
    const char *junk;
  } cases[] = {
      {"Authorization", "junk"},
      {"If-Match", "\"999\""},
      {"Host", ".evil.example"},
      {"Content-Type", "; charset=evil"},
  };
  char req[512];
  char needle[64];
  size_t n;

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    n = put_with_nul(req, sizeof req, cases[i].header, cases[i].junk);
    snprintf(needle, sizeof needle, "NUL byte in the value of header '%s'",
             cases[i].header);
    for (unsigned before = 1; before <= 2; before++) {
      later_refused(fx, before, req, n, false, 400, needle);
      later_refused(fx, before, req, n, true, 400, needle);
    }
    assert_int_equal(version_now(fx), 1);
  }
  /* the same request without the NUL is accepted, second on a kept-alive
   * connection too: the refusals above are the NUL's doing */
  n = put_with_nul(req, sizeof req, NULL, NULL);
  {
    conn *c = conn_open(fx->port);
    answer a;
    conn_send(c, GET_OK, strlen(GET_OK));
    next_answer(c, &a);
    assert_int_equal(a.status, 200);
    conn_send(c, req, n);
    next_answer(c, &a);
    if (a.status != 200)
      fail_msg("the control PUT: %s%s", a.head, a.body);
    conn_close(c);
  }
  assert_int_equal(version_now(fx), 2);
}

/* Requests pipelined in one packet are answered in order, bodies included;
 * a refused one ends the connection after the answers before it, and what
 * follows it is never applied. */
static void test_http_keepalive_pipelined_one_packet(void **state) {
  fixture *fx = *state;
  char req[1024];
  size_t len = 0;
  conn *c;
  answer a;
  static const char put2[] =
      "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Authorization: Bearer " TOKEN "\r\nContent-Length: 9\r\n\r\n{\"v\":2.0}";
  static const char get_pol[] = "GET /policy HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

  /* GET, PUT with a body, GET: all answered, in order */
  c = conn_open(fx->port);
  memcpy(req, GET_OK, strlen(GET_OK));
  len = strlen(GET_OK);
  memcpy(req + len, put2, strlen(put2));
  len += strlen(put2);
  memcpy(req + len, get_pol, strlen(get_pol));
  len += strlen(get_pol);
  conn_send(c, req, len);
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  next_answer(c, &a);
  if (a.status != 200)
    fail_msg("pipelined PUT: %s%s", a.head, a.body);
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  assert_non_null(strstr(a.body, "2.0"));
  conn_close(c);
  assert_int_equal(version_now(fx), 2);

  /* GET, a PUT with a NUL in its token, a good PUT: 200, 400, the end */
  len = 0;
  memcpy(req, GET_OK, strlen(GET_OK));
  len = strlen(GET_OK);
  len += put_with_nul(req + len, sizeof req - len, "Authorization", "x");
  memcpy(req + len, put2, strlen(put2));
  len += strlen(put2);
  c = conn_open(fx->port);
  conn_send(c, req, len);
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  next_answer(c, &a);
  expect_error(&a, 400, "NUL");
  expect_end(c);
  conn_close(c);
  assert_int_equal(version_now(fx), 2);

  /* a body that looks like a request is a body, not a request: the PUT's
   * JSON is refused (400 from the router) and nothing inside it runs */
  {
    static const char inner[] =
        "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}";
    int k = snprintf(req, sizeof req,
                     "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Authorization: Bearer " TOKEN
                     "\r\nContent-Length: %zu\r\n\r\n%s",
                     sizeof inner - 1, inner);
    c = conn_open(fx->port);
    conn_send(c, req, (size_t)k);
    conn_send(c, GET_OK, strlen(GET_OK));
    next_answer(c, &a);
    expect_error(&a, 400, NULL);
    next_answer(c, &a);
    assert_int_equal(a.status, 200);
    assert_memory_equal(a.body, "ok", 2);
    conn_close(c);
  }
  assert_int_equal(version_now(fx), 2);
}

/* The other head rules on the second and third request of a connection. */
static void test_http_keepalive_later_heads_strict(void **state) {
  fixture *fx = *state;
  static const struct {
    const char *req;
    int status;
    const char *needle;
  } cases[] = {
      {"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\rb\r\n\r\n", 400,
       "bare CR"},
      {"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\r\n b\r\n\r\n", 400,
       "folding"},
      {"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A : 1\r\n\r\n", 400,
       "space"},
      {"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n: x\r\n\r\n", 400,
       "empty name"},
      {"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-\x01: 1\r\n\r\n", 400,
       "name"},
      {"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: \x7f\r\n\r\n", 400,
       "control"},
      {"GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505, "HTTP/2.0"},
      {"GET /healthz HTTP/1.1\r\n\r\n", 400, "no Host"},
      {"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: 127.0.0.1\r\n\r\n",
       400, "more than one Host"},
      {"GET /healthz HTTP/1.1\r\nHost: [::1]evil.example\r\n\r\n", 400, "Host"},
      {"PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
       "Content-Length: 2\r\n\r\n{}",
       400, "Content-Length"},
      {"PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: "
       "identity\r\nContent-Length: 2\r\n\r\n{}",
       400, "Transfer-Encoding"},
      {"GET /healthz?a&b&c&d&e&f&g&h&i&j&k&l&m&n&o&p&q HTTP/1.1\r\n"
       "Host: 127.0.0.1\r\n\r\n",
       400, "query parameters"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t n = strlen(cases[i].req);
    for (unsigned before = 1; before <= 2; before++) {
      later_refused(fx, before, cases[i].req, n, false, cases[i].status,
                    cases[i].needle);
      later_refused(fx, before, cases[i].req, n, true, cases[i].status,
                    cases[i].needle);
    }
  }
  /* a NUL in the target of a later request (raw bytes: strlen stops) */
  {
    static const char t[] = "GET /healthz\0.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    later_refused(fx, 1, t, sizeof t - 1, false, 400, "NUL");
    later_refused(fx, 2, t, sizeof t - 1, true, 400, "NUL");
  }
  assert_int_equal(version_now(fx), 1);
  /* the server still answers */
  assert_int_equal(one_request(fx, GET_OK, strlen(GET_OK)), 200);
}

/* Long header names: one that fits in the head limit is a header like any
 * other (first or later request); one that does not is 431 (JSON), later
 * requests included. */
static void test_http_keepalive_long_header_names(void **state) {
  fixture *fx = *state;
  size_t big = 20000, fits = 4000;
  char *req = malloc(big + 256);
  int n;
  assert_non_null(req);
  n = snprintf(req, 256, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  memset(req + n, 'N', fits);
  n += (int)fits;
  n += snprintf(req + n, 64, ": 1\r\n\r\n");
  assert_int_equal(one_request(fx, req, (size_t)n), 200);
  {
    conn *c = conn_open(fx->port);
    answer a;
    conn_send(c, GET_OK, strlen(GET_OK));
    next_answer(c, &a);
    assert_int_equal(a.status, 200);
    conn_send(c, req, (size_t)n);
    next_answer(c, &a);
    assert_int_equal(a.status, 200);
    conn_close(c);
  }
  n = snprintf(req, 256, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  memset(req + n, 'N', big);
  n += (int)big;
  n += snprintf(req + n, 64, ": 1\r\n\r\n");
  later_refused(fx, 1, req, (size_t)n, false, 431, "over the limit");
  later_refused(fx, 2, req, (size_t)n, true, 431, "over the limit");
  free(req);
  assert_int_equal(one_request(fx, GET_OK, strlen(GET_OK)), 200);
}

/* Builds a GET with Host, `xh` headers X-<i> whose values are `pad` bytes
 * each, and a Cookie of `pairs` pairs when pairs > 0: 1 + xh + pairs header
 * fields as the limit counts them. Returns its length. */
static size_t many_fields(char *out, size_t cap, unsigned xh, size_t pad,
                          unsigned pairs) {
  size_t n = (size_t)snprintf(out, cap,
                              "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  for (unsigned i = 0; i < xh; i++) {
    n += (size_t)snprintf(out + n, cap - n, "X-%u: ", i);
    assert_true(n + pad + 64 < cap);
    memset(out + n, 'v', pad);
    n += pad;
    n += (size_t)snprintf(out + n, cap - n, "\r\n");
  }
  if (pairs > 0) {
    n += (size_t)snprintf(out + n, cap - n, "Cookie: ");
    for (unsigned i = 0; i < pairs; i++)
      n += (size_t)snprintf(out + n, cap - n, "%sc%u=1", i ? "; " : "", i);
    n += (size_t)snprintf(out + n, cap - n, "\r\n");
  }
  n += (size_t)snprintf(out + n, cap - n, "\r\n");
  assert_true(n < cap);
  return n;
}

/* Header fields: up to 100 (each Cookie pair counting as one) are served,
 * first request or later, even when they fill the 16 KiB head; one more is a
 * 431 in JSON, not libmicrohttpd's HTML "too big" (its per-connection memory
 * holds any head the check accepts). */
static void test_http_keepalive_header_field_limit(void **state) {
  fixture *fx = *state;
  static char req[20000];
  size_t n;
  static const struct {
    unsigned xh; /* with Host: xh + 1 fields, plus the Cookie pairs */
    size_t pad;
    unsigned pairs;
    int status;
  } cases[] = {
      {99, 1, 0, 200},
      {99, 150, 0, 200},
      {9, 1, 90, 200},
      {100, 1, 0, 431},
      {299, 1, 0, 431},
      {5, 1, 95, 431},
      {0, 1, 150, 431},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    n = many_fields(req, sizeof req, cases[i].xh, cases[i].pad,
                    cases[i].pairs);
    if (cases[i].status == 200) {
      conn *c = conn_open(fx->port);
      answer a;
      for (int k = 0; k < 2; k++) { /* first and second on the connection */
        conn_send(c, req, n);
        next_answer(c, &a);
        if (a.status != 200)
          fail_msg("case %zu (%zu bytes), request %d: %s%s", i, n, k + 1,
                   a.head, a.body);
      }
      conn_close(c);
    } else {
      conn *c = conn_open(fx->port);
      answer a;
      conn_send(c, req, n);
      next_answer(c, &a);
      expect_error(&a, 431, "header fields");
      conn_close(c);
      later_refused(fx, 1, req, n, false, 431, "header fields");
      later_refused(fx, 2, req, n, true, 431, "header fields");
    }
  }
  /* one Cookie value of 15 KiB (libmicrohttpd copies it) */
  n = (size_t)snprintf(req, sizeof req,
                       "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: a=");
  memset(req + n, 'c', 15000);
  n += 15000;
  n += (size_t)snprintf(req + n, sizeof req - n, "\r\n\r\n");
  assert_int_equal(one_request(fx, req, n), 200);
}

/* HTTP/1.0 with "Connection: keep-alive" keeps the connection, and its later
 * heads are checked like any other. */
static void test_http_keepalive_http10(void **state) {
  fixture *fx = *state;
  static const char get10[] =
      "GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
  static const char bad10[] = "GET /healthz HTTP/1.0\r\nConnection: keep-alive"
                              "\r\nX-A: 1\0junk\r\n\r\n";
  conn *c = conn_open(fx->port);
  answer a;
  conn_send(c, get10, strlen(get10));
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  assert_non_null(strcasestr(a.head, "Connection: Keep-Alive"));
  conn_send(c, get10, strlen(get10));
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  conn_send(c, bad10, sizeof bad10 - 1);
  next_answer(c, &a);
  expect_error(&a, 400, "NUL");
  expect_end(c);
  conn_close(c);
  /* without keep-alive an HTTP/1.0 connection ends after its answer */
  c = conn_open(fx->port);
  conn_send(c, "GET /healthz HTTP/1.0\r\n\r\n", 25);
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  expect_end(c);
  conn_close(c);
}

/* A chunked request is the connection's last: its answer says
 * "Connection: close" and what was pipelined after it is not parsed. */
static void test_http_keepalive_chunked_is_last(void **state) {
  fixture *fx = *state;
  static const char req[] =
      "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked"
      "\r\n\r\n7\r\n{\"c\":1}\r\n0\r\n\r\n"
      "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: 1\0\r\n"
      "Content-Length: 7\r\n\r\n{\"d\":1}";
  conn *c = conn_open(fx->port);
  answer a;
  conn_send(c, GET_OK, strlen(GET_OK));
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  conn_send(c, req, sizeof req - 1);
  next_answer(c, &a);
  if (a.status != 200)
    fail_msg("chunked PUT: %s%s", a.head, a.body);
  assert_non_null(strcasestr(a.head, "Connection: close"));
  expect_end(c);
  conn_close(c);
  assert_int_equal(version_now(fx), 2);
  pthread_mutex_lock(&fx->f.mu);
  assert_string_equal(fx->f.policy, "{\"c\":1}");
  pthread_mutex_unlock(&fx->f.mu);
}

/* A chunked body is checked chunk by chunk: a malformed size line, data not
 * followed by CRLF, a chunk over the limit, trailer fields are answered in
 * JSON (400/413) by the server, never by libmicrohttpd in HTML, first
 * request or later; good chunks (with extensions) are applied. */
static void test_http_keepalive_chunked_framing(void **state) {
  fixture *fx = *state;
  static const char head[] = "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n";
  static const struct {
    const char *body;
    int status;
    const char *needle;
  } bad[] = {
      {"zz\r\n{}\r\n0\r\n\r\n", 400, "chunk size"},
      {"2 \r\n{}\r\n0\r\n\r\n", 400, "chunk-size line"},
      {"2\n{}\r\n0\r\n\r\n", 400, "chunk-size line"},
      {"2\r\n{}XX0\r\n\r\n", 400, "not followed by CRLF"},
      {"ffffffffffffffffff\r\n", 413, "16 hex digits"},
      {"ffffffff\r\n", 413, "a chunk of"},
      {"2;a=\x01\r\n{}\r\n0\r\n\r\n", 400, "chunk extension"},
      {"2\r\n{}\r\n0\r\nX-T: 1\r\n\r\n", 400, "trailer"},
      {"2;aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
       "\r\n{}\r\n0\r\n\r\n",
       400, "over 256"},
  };
  char req[1024];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int n = snprintf(req, sizeof req, "%s%s", head, bad[i].body);
    for (unsigned before = 0; before <= 1; before++)
      later_refused(fx, before, req, (size_t)n, false, bad[i].status,
                    bad[i].needle);
    later_refused(fx, 2, req, (size_t)n, true, bad[i].status, bad[i].needle);
    /* the error document names the request path, not "" */
    later_refused(fx, 0, req, (size_t)n, false, bad[i].status, "path=/policy");
    later_refused(fx, 1, req, (size_t)n, false, bad[i].status, "path=/policy");
  }
  assert_int_equal(version_now(fx), 1);
  /* good chunks, an extension included: applied, and the connection ends */
  {
    static const char good[] =
        "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Transfer-Encoding: chunked\r\n\r\n3;x=\"1\"\r\n{\"g\r\n4\r\n\":1}"
        "\r\n0\r\n\r\n";
    conn *c = conn_open(fx->port);
    answer a;
    conn_send(c, GET_OK, strlen(GET_OK));
    next_answer(c, &a);
    assert_int_equal(a.status, 200);
    conn_send(c, good, sizeof good - 1);
    next_answer(c, &a);
    if (a.status != 200)
      fail_msg("good chunks: %s%s", a.head, a.body);
    assert_non_null(strcasestr(a.head, "Connection: close"));
    expect_end(c);
    conn_close(c);
  }
  assert_int_equal(version_now(fx), 2);
  pthread_mutex_lock(&fx->f.mu);
  assert_string_equal(fx->f.policy, "{\"g\":1}");
  pthread_mutex_unlock(&fx->f.mu);
}

/* White space after a header value is not part of it (RFC 9110 5.5): Host
 * and If-Match with trailing spaces or tabs are read as without them, first
 * request or later (libmicrohttpd keeps the white space). On the framing
 * headers, where libmicrohttpd would read "7 " as malformed and "chunked "
 * as not chunked (its body then parsed as the next request), it is refused
 * in JSON, so that the check and libmicrohttpd never disagree on where a
 * request ends. */
static void test_http_keepalive_trailing_ows(void **state) {
  fixture *fx = *state;
  static const char get[] =
      "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1 \t\r\n\r\n";
  static const char put[] = "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1 \r\n"
                            "If-Match: \"1\" \r\nContent-Length: 7\r\n\r\n"
                            "{\"t\":1}";
  static const char chunked[] =
      "PUT /policy HTTP/1.1\r\nHost: localhost\t\r\nIf-Match: \"2\"\t\r\n"
      "Transfer-Encoding: chunked\r\n\r\n7\r\n{\"t\":2}\r\n0\r\n\r\n";
  static const char cl_ws[] = "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Content-Length: 7 \r\n\r\n{\"t\":3}";
  static const char te_ws[] =
      "PUT /policy HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Transfer-Encoding: chunked\t\r\n\r\n7\r\n{\"t\":3}\r\n0\r\n\r\n";
  conn *c = conn_open(fx->port);
  answer a;
  conn_send(c, get, sizeof get - 1);
  next_answer(c, &a);
  if (a.status != 200)
    fail_msg("GET: %s%s", a.head, a.body);
  conn_send(c, get, sizeof get - 1);
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  conn_send(c, put, sizeof put - 1);
  next_answer(c, &a);
  if (a.status != 200)
    fail_msg("PUT: %s%s", a.head, a.body);
  conn_send(c, chunked, sizeof chunked - 1);
  next_answer(c, &a);
  if (a.status != 200)
    fail_msg("chunked PUT: %s%s", a.head, a.body);
  conn_close(c);
  assert_int_equal(version_now(fx), 3);
  assert_int_equal(one_request(fx, put, sizeof put - 1), 412); /* stale */
  for (unsigned before = 0; before <= 1; before++) {
    later_refused(fx, before, cl_ws, sizeof cl_ws - 1, false, 400,
                  "white space after the value of Content-Length");
    later_refused(fx, before, te_ws, sizeof te_ws - 1, true, 400,
                  "white space after the value of Transfer-Encoding");
  }
  assert_int_equal(version_now(fx), 3);
}

/* A later head that trickles past the deadline (timeout_s, 3 s here, from
 * the answer before it) is answered 408 in JSON, like a first one; an idle
 * kept-alive connection is closed at the deadline without a word. */
static void test_http_keepalive_later_head_deadline(void **state) {
  fixture *fx = *state;
  conn *c = conn_open(fx->port);
  conn *idle = conn_open(fx->port);
  answer a;
  conn_send(c, GET_OK, strlen(GET_OK));
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  conn_send(idle, GET_OK, strlen(GET_OK));
  next_answer(idle, &a);
  assert_int_equal(a.status, 200);
  conn_send(c, "GET /healthz HTTP/1.1\r\nHo", 25);
  next_answer(c, &a); /* conn_fill waits up to 5 s for each read */
  expect_error(&a, 408, "did not arrive within 3 s");
  expect_end(c);
  conn_close(c);
  expect_end(idle);
  conn_close(idle);
  assert_int_equal(one_request(fx, GET_OK, strlen(GET_OK)), 200);
}

/* A client that pipelines requests with large answers and does not read
 * for a while, then a refused one: every answer arrives whole and in order,
 * the refusal last (it waits in the queue behind them, never cut short by
 * a full send buffer), then the end. */
static void test_http_keepalive_refusal_behind_large_answers(void **state) {
  fixture *fx = *state;
  enum { N = 60 };
  static const char get[] =
      "GET /static/app.js HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  static const char bad[] =
      "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: 1\0x\r\n\r\n";
  size_t cap = 64u << 20, len = 0, off = 0;
  char *all = malloc(cap);
  char *req = malloc(N * sizeof get + sizeof bad);
  size_t rl = 0;
  int fd, oks = 0, last = 0;
  const char *last_body = NULL;
  struct sockaddr_in sa;
  assert_non_null(all);
  assert_non_null(req);
  for (int i = 0; i < N; i++) {
    memcpy(req + rl, get, sizeof get - 1);
    rl += sizeof get - 1;
  }
  memcpy(req + rl, bad, sizeof bad - 1);
  rl += sizeof bad - 1;
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)fx->port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  assert_int_equal(send(fd, req, rl, MSG_NOSIGNAL), (ssize_t)rl);
  usleep(300 * 1000); /* the answers pile up in every buffer on the way */
  for (;;) {
    struct pollfd pf = {fd, POLLIN, 0};
    ssize_t n;
    if (poll(&pf, 1, 5000) <= 0 || len == cap)
      break;
    n = recv(fd, all + len, cap - len, 0);
    if (n <= 0)
      break;
    len += (size_t)n;
  }
  close(fd);
  while (off < len) { /* walk the answers by their Content-Length */
    char *end = memmem(all + off, len - off, "\r\n\r\n", 4);
    const char *cl;
    size_t hl, bl;
    assert_non_null(end);
    hl = (size_t)(end - (all + off)) + 4;
    *end = '\0';
    cl = strcasestr(all + off, "\r\nContent-Length:");
    assert_non_null(cl);
    bl = strtoul(cl + 17, NULL, 10);
    last = atoi(all + off + 9);
    if (last == 200)
      oks++;
    last_body = all + off + hl;
    assert_true(off + hl + bl <= len);
    off += hl + bl;
  }
  assert_int_equal(oks, N);
  assert_int_equal(last, 400);
  assert_non_null(last_body);
  assert_non_null(strstr(last_body, "NUL"));
  free(req);
  free(all);
}

/* A client that sends its requests and shuts its side gets every answer,
 * then the end; one that shuts it inside a later head gets a 400. */
static void test_http_keepalive_half_closed(void **state) {
  fixture *fx = *state;
  conn *c = conn_open(fx->port);
  answer a;
  conn_send(c, GET_OK, strlen(GET_OK));
  conn_send(c, GET_OK, strlen(GET_OK));
  shutdown(c->fd, SHUT_WR);
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  expect_end(c);
  conn_close(c);

  c = conn_open(fx->port);
  conn_send(c, GET_OK, strlen(GET_OK));
  conn_send(c, "GET /healthz HTTP/1.1\r\nHo", 25);
  shutdown(c->fd, SHUT_WR);
  next_answer(c, &a);
  assert_int_equal(a.status, 200);
  next_answer(c, &a);
  expect_error(&a, 400, "closed its side");
  expect_end(c);
  conn_close(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_http_keepalive_nul_in_later_requests,
                                      setup_token, teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_pipelined_one_packet,
                                      setup_token, teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_later_heads_strict,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_long_header_names,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_header_field_limit,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_http10, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_chunked_is_last, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_chunked_framing,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_trailing_ows, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_later_head_deadline,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          test_http_keepalive_refusal_behind_large_answers, setup, teardown),
      cmocka_unit_test_setup_teardown(test_http_keepalive_half_closed, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
