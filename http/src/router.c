/*
 * router.c — turns one parsed request into one response, with no I/O: the
 * endpoint table, method and token checks, query validation, the calls into
 * the provider, error documents, the /stats and /metrics cache.
 * Entry points: aa__http_state_init, aa__http_route, aa__http_token_equal.
 *
 * Order of checks for every request: body over the limit (413); for a
 * mutating method (anything but GET, HEAD, OPTIONS): the token when one is
 * set (401 missing, 403 wrong), else a loopback Host header (403; defeats
 * DNS rebinding); then the path (404) and the method (405 with Allow); then
 * the endpoint's own checks (400 on bad query values or bodies).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_internal.h"

#define CT_JSON "application/json"
#define CT_TEXT "text/plain; charset=utf-8"
#define CT_PROM "text/plain; version=0.0.4; charset=utf-8"

#define ALLOW_GET "GET, HEAD"
#define ALLOW_POLICY "GET, HEAD, PUT, PATCH"

static const char oom_body[] = "{\"error\":\"out of memory\"}";

/* ------------------------------------------------------------ state */

int aa__http_state_init(aa__http_state *st, const aa_http_config *cfg,
                        const aa_http_provider *prov) {
  int rc = AA_OK;

  memset(st, 0, sizeof *st);
  if (cfg != NULL)
    st->cfg = *cfg;
  else
    aa_http_config_init(&st->cfg);
  st->cfg.address = NULL; /* not kept: the caller's string */
  st->cfg.token = NULL;
  if (prov != NULL)
    st->prov = *prov;
  if (cfg != NULL && cfg->token != NULL && cfg->token[0] != '\0') {
    st->token_len = strlen(cfg->token);
    st->token = malloc(st->token_len + 1);
    if (st->token == NULL) {
      st->token_len = 0;
      rc = AA_ENOMEM;
      goto done;
    }
    memcpy(st->token, cfg->token, st->token_len + 1);
  }
  /* Without it /metrics still works; a retired class's counters then leave
   * their bucket. */
  st->metrics_carry = aa__metrics_carry_new();
done:
  return rc;
}

void aa__http_state_fini(aa__http_state *st) {
  if (st->token != NULL) {
    /* wipe the secret before giving the memory back */
    volatile char *p = st->token;
    size_t i;
    for (i = 0; i < st->token_len; i++)
      p[i] = 0;
  }
  free(st->token);
  free(st->stats_cache);
  free(st->metrics_cache);
  aa__metrics_carry_free(st->metrics_carry);
  memset(st, 0, sizeof *st);
}

void aa__http_resp_free(aa__http_resp *r) {
  if (!r->body_static)
    free(r->body);
  r->body = NULL;
  r->len = 0;
}

bool aa__http_token_equal(const char *given, size_t given_len,
                          const char *expected, size_t expected_len) {
  volatile unsigned char diff = 0;
  size_t i;

  diff |= (unsigned char)(given_len != expected_len);
  for (i = 0; i < expected_len; i++) {
    unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
    diff |= (unsigned char)(g ^ (unsigned char)expected[i]);
  }
  return diff == 0;
}

/* ------------------------------------------------------------ responses */

static void set_body(aa__http_resp *r, int status, const char *type,
                     char *body, size_t len) {
  r->status = status;
  r->content_type = type;
  r->body = body;
  r->len = len;
  r->body_static = false;
}

static void set_static(aa__http_resp *r, int status, const char *type,
                       const char *body, size_t len) {
  r->status = status;
  r->content_type = type;
  r->body = (char *)(uintptr_t)body; /* never written, never freed */
  r->len = len;
  r->body_static = true;
}

static void set_oom(aa__http_resp *r) {
  aa__http_resp_free(r);
  set_static(r, 500, CT_JSON, oom_body, sizeof oom_body - 1);
}

static size_t bounded_len(const char *s, size_t max) {
  size_t n = 0;
  while (n < max && s[n] != '\0')
    n++;
  return n;
}

/* {"error": msg, "path": path[, "code": "AA_..."]} */
static void error_doc(aa__http_resp *r, const aa__http_req *req, int status,
                      const char *msg, int aa_code) {
  aa__buf b;
  char *body;
  size_t len;
  const char *path = req->path != NULL ? req->path : "";

  aa__http_resp_free(r);
  aa__buf_init(&b);
  aa__buf_puts(&b, "{\"error\":");
  aa__buf_json_str(&b, msg, bounded_len(msg, 1024));
  aa__buf_puts(&b, ",\"path\":");
  aa__buf_json_str(&b, path, bounded_len(path, 256));
  if (aa_code != 0) {
    aa__buf_puts(&b, ",\"code\":");
    aa__buf_json_str(&b, aa_errname(aa_code), strlen(aa_errname(aa_code)));
  }
  aa__buf_puts(&b, "}\n");
  if (aa__buf_take(&b, &body, &len) != AA_OK) {
    set_oom(r);
    r->status = status;
    return;
  }
  set_body(r, status, CT_JSON, body, len);
}

static int status_of(int err) {
  switch (err) {
  case AA_EPARSE:
  case AA_EINVAL:
  case AA_ERANGE:
    return 400;
  case AA_ENOENT:
    return 404;
  case AA_ESTALE:
    return 412;
  case AA_EPERM:
    return 403;
  case AA_ENOTSUP:
  case AA_ECLOSED:
  case AA_EBUSY:
  case AA_EAGAIN:
    return 503;
  default:
    return 500;
  }
}

/* A provider error: its message when it gave one, else aa_strerror. */
static void provider_error(aa__http_resp *r, const aa__http_req *req, int err,
                           const char *what, const char *msg) {
  char text[1200];
  int status = status_of(err);

  if (msg != NULL && msg[0] != '\0')
    snprintf(text, sizeof text, "%s", msg);
  else if (err == AA_ENOTSUP || err == AA_ECLOSED)
    snprintf(text, sizeof text, "%s not available (%s)", what,
             aa_strerror(err));
  else
    snprintf(text, sizeof text, "%s: %s", what, aa_strerror(err));
  error_doc(r, req, status, text, err);
  if (err == AA_EBUSY || err == AA_EAGAIN)
    r->retry_after = 1;
}

static void unavailable(aa__http_resp *r, const aa__http_req *req,
                        const char *what) {
  char text[128];
  snprintf(text, sizeof text, "%s not available in this process", what);
  error_doc(r, req, 503, text, AA_ENOTSUP);
}

/* ------------------------------------------------------------ helpers */

static const char *arg(const aa__http_req *req, const char *key) {
  size_t i;
  for (i = 0; i < req->nargs; i++)
    if (strcmp(req->args[i].key, key) == 0)
      return req->args[i].value != NULL ? req->args[i].value : "";
  return NULL;
}

/* 400 unless every argument is in allowed (NULL-terminated) and none
 * repeats. Returns true when the request may go on. */
static bool check_args(aa__http_resp *r, const aa__http_req *req,
                       const char *const *allowed) {
  size_t i;
  size_t j;
  char text[160];

  if (req->too_many_args) {
    error_doc(r, req, 400, "too many query parameters", AA_EINVAL);
    return false;
  }
  for (i = 0; i < req->nargs; i++) {
    const char *k = req->args[i].key;
    bool ok = false;
    for (j = 0; allowed[j] != NULL; j++)
      if (strcmp(k, allowed[j]) == 0)
        ok = true;
    if (!ok) {
      snprintf(text, sizeof text, "unknown query parameter '%.40s'", k);
      error_doc(r, req, 400, text, AA_EINVAL);
      return false;
    }
    for (j = 0; j < i; j++) {
      if (strcmp(k, req->args[j].key) == 0) {
        snprintf(text, sizeof text, "query parameter '%.40s' given twice", k);
        error_doc(r, req, 400, text, AA_EINVAL);
        return false;
      }
    }
  }
  return true;
}

static bool host_is_loopback(const char *host) {
  char h[256];

  if (host == NULL)
    return true; /* HTTP/1.0 without Host: not a browser */
  /* "[::1]evil.example", "127.0.0.1:x", "localhost.evil" are not loopback */
  if (!aa__http_host_split(host, strlen(host), h, sizeof h))
    return false;
  if (strcmp(h, "::1") == 0 || strcasecmp(h, "localhost") == 0)
    return true;
  if (strncmp(h, "127.", 4) == 0) {
    size_t i;
    for (i = 4; h[i] != '\0'; i++)
      if ((h[i] < '0' || h[i] > '9') && h[i] != '.')
        return false;
    return true;
  }
  return false;
}

/* "Bearer <token>" -> the token (not NUL-terminated), or NULL. */
static const char *bearer(const char *auth, size_t *len) {
  const char *p;
  const char *e;

  *len = 0;
  if (auth == NULL || strncasecmp(auth, "Bearer", 6) != 0)
    return NULL;
  p = auth + 6;
  if (*p != ' ' && *p != '\t')
    return NULL;
  while (*p == ' ' || *p == '\t')
    p++;
  e = p + strlen(p);
  while (e > p && (e[-1] == ' ' || e[-1] == '\t'))
    e--;
  if (e == p)
    return NULL;
  *len = (size_t)(e - p);
  return p;
}

static bool is_safe_method(const char *m) {
  return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0 ||
         strcmp(m, "OPTIONS") == 0;
}

static bool is_get(const char *m) {
  return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
}

static void set_etag(aa__http_resp *r, uint64_t version) {
  snprintf(r->etag, sizeof r->etag, "\"%llu\"", (unsigned long long)version);
}

static void clear_caches(aa__http_state *st) {
  free(st->stats_cache);
  st->stats_cache = NULL;
  st->stats_cache_len = 0;
  free(st->metrics_cache);
  st->metrics_cache = NULL;
  st->metrics_cache_len = 0;
}

/* Serves body from a cache slot when fresh. */
static bool cache_hit(const aa__http_state *st, const char *cache,
                      size_t len, uint64_t at_ns, aa__http_resp *r,
                      const char *type) {
  char *copy;
  if (st->cfg.stats_cache_ms == 0 || cache == NULL)
    return false;
  if (aa_now_ns() - at_ns > (uint64_t)st->cfg.stats_cache_ms * 1000000u)
    return false;
  copy = malloc(len + 1);
  if (copy == NULL)
    return false;
  memcpy(copy, cache, len + 1);
  set_body(r, 200, type, copy, len);
  return true;
}

static void cache_store(const aa__http_state *st, char **slot, size_t *slot_len,
                        uint64_t *slot_ns, const char *body, size_t len) {
  char *copy;
  if (st->cfg.stats_cache_ms == 0)
    return;
  copy = malloc(len + 1);
  if (copy == NULL)
    return;
  memcpy(copy, body, len);
  copy[len] = '\0';
  free(*slot);
  *slot = copy;
  *slot_len = len;
  *slot_ns = aa_now_ns();
}

/* ------------------------------------------------------------ endpoints */

static void ep_healthz(aa__http_state *st, const aa__http_req *req,
                       aa__http_resp *r) {
  (void)st;
  (void)req;
  set_static(r, 200, CT_TEXT, "ok\n", 3);
}

static void ep_stats(aa__http_state *st, const aa__http_req *req,
                     aa__http_resp *r) {
  static const char *const allowed[] = {"pool", NULL};
  const char *pool;
  char *out = NULL;
  size_t len = 0;
  int rc;

  if (!check_args(r, req, allowed))
    return;
  pool = arg(req, "pool");
  if (pool != NULL && (pool[0] == '\0' || strlen(pool) > 31)) {
    error_doc(r, req, 400, "pool: must be a pool name of 1 to 31 bytes",
              AA_EINVAL);
    return;
  }
  if (st->prov.stats_json == NULL) {
    unavailable(r, req, "stats");
    return;
  }
  if (pool == NULL && cache_hit(st, st->stats_cache, st->stats_cache_len,
                                st->stats_cache_ns, r, CT_JSON))
    return;
  rc = st->prov.stats_json(st->prov.user, pool, &out, &len);
  if (rc != AA_OK || out == NULL) {
    free(out);
    if (rc == AA_ENOENT && pool != NULL) {
      char text[96];
      snprintf(text, sizeof text, "no pool named '%s'", pool);
      error_doc(r, req, 404, text, AA_ENOENT);
      return;
    }
    provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "stats", NULL);
    return;
  }
  if (pool == NULL)
    cache_store(st, &st->stats_cache, &st->stats_cache_len,
                &st->stats_cache_ns, out, len);
  set_body(r, 200, CT_JSON, out, len);
}

/* The server's own families. The policy version and the runtime's counters
 * come from the provider's metrics_extra. */
static void server_metrics(aa__http_state *st, aa__buf *b) {
  aa__buf_printf(b,
                 "# HELP adaptalloc_build_info Version of adaptalloc.\n"
                 "# TYPE adaptalloc_build_info gauge\n"
                 "adaptalloc_build_info{version=\"%d.%d.%d\"} 1\n",
                 AA_VERSION_MAJOR, AA_VERSION_MINOR, AA_VERSION_PATCH);
  aa__buf_printf(
      b,
      "# HELP adaptalloc_http_requests_total HTTP requests answered, by status "
      "class.\n"
      "# TYPE adaptalloc_http_requests_total counter\n"
      "adaptalloc_http_requests_total{code=\"2xx\"} %llu\n"
      "adaptalloc_http_requests_total{code=\"3xx\"} %llu\n"
      "adaptalloc_http_requests_total{code=\"4xx\"} %llu\n"
      "adaptalloc_http_requests_total{code=\"5xx\"} %llu\n",
      (unsigned long long)atomic_load(&st->status_2xx),
      (unsigned long long)atomic_load(&st->status_3xx),
      (unsigned long long)atomic_load(&st->status_4xx),
      (unsigned long long)atomic_load(&st->status_5xx));
  aa__buf_printf(b,
                 "# HELP adaptalloc_http_policy_changes_total Policy changes "
                 "accepted over HTTP.\n"
                 "# TYPE adaptalloc_http_policy_changes_total counter\n"
                 "adaptalloc_http_policy_changes_total %llu\n",
                 (unsigned long long)atomic_load(&st->policy_changes));
}

static void ep_metrics(aa__http_state *st, const aa__http_req *req,
                       aa__http_resp *r) {
  aa_pool_stats *pools = NULL;
  size_t n = 0;
  char *text = NULL;
  size_t len = 0;
  char *extra = NULL;
  size_t extra_len = 0;
  char *out = NULL;
  size_t out_len = 0;
  aa__buf b;
  int rc;

  aa__buf_init(&b);
  if (st->prov.pool_stats == NULL) {
    unavailable(r, req, "metrics");
    goto done;
  }
  if (cache_hit(st, st->metrics_cache, st->metrics_cache_len,
                st->metrics_cache_ns, r, CT_PROM))
    goto done;
  rc = st->prov.pool_stats(st->prov.user, &pools, &n);
  if (rc != AA_OK) {
    provider_error(r, req, rc, "metrics", NULL);
    goto done;
  }
  rc = aa__http_render_metrics_carry(pools, n, st->metrics_carry, &text, &len);
  if (rc != AA_OK) {
    set_oom(r);
    goto done;
  }
  aa__buf_append(&b, text, len);
  server_metrics(st, &b);
  if (st->prov.metrics_extra != NULL &&
      st->prov.metrics_extra(st->prov.user, &extra, &extra_len) == AA_OK &&
      extra != NULL) {
    aa__buf_append(&b, extra, extra_len);
    if (extra_len > 0 && extra[extra_len - 1] != '\n')
      aa__buf_puts(&b, "\n");
  }
  if (aa__buf_take(&b, &out, &out_len) != AA_OK) {
    set_oom(r);
    goto done;
  }
  cache_store(st, &st->metrics_cache, &st->metrics_cache_len,
              &st->metrics_cache_ns, out, out_len);
  set_body(r, 200, CT_PROM, out, out_len);
done:
  aa__buf_free(&b);
  free(extra);
  free(text);
  free(pools);
}

/* If-Match: "*" (any), "\"N\"" (version N). Returns 1 with *v set, 0 for
 * "*" or absent, -1 when malformed, -2 for a weak tag, -3 for a number with
 * leading zeros (neither ever matches). */
static int parse_if_match(const char *h, uint64_t *v) {
  const char *p = h;
  const char *q;
  char num[24];
  size_t n;
  int64_t iv;

  *v = 0;
  if (h == NULL)
    return 0;
  while (*p == ' ' || *p == '\t')
    p++;
  if (p[0] == '*') {
    p++;
    while (*p == ' ' || *p == '\t')
      p++;
    return *p == '\0' ? 0 : -1;
  }
  if (p[0] == 'W' && p[1] == '/')
    return -2;
  if (*p != '"')
    return -1;
  p++;
  q = strchr(p, '"');
  if (q == NULL)
    return -1;
  n = (size_t)(q - p);
  if (n == 0 || n >= sizeof num)
    return -1;
  memcpy(num, p, n);
  num[n] = '\0';
  q++;
  while (*q == ' ' || *q == '\t')
    q++;
  if (*q != '\0')
    return -1;
  if (aa__http_parse_i64(num, 0, INT64_MAX, &iv) != AA_OK)
    return -1;
  /* strong comparison is byte for byte: the ETag is written without leading
   * zeros, so "01" is another tag (it never matches) */
  if (n > 1 && num[0] == '0')
    return -3;
  *v = (uint64_t)iv;
  return 1;
}

static bool if_none_match_hits(const char *h, const char *etag) {
  const char *p;
  size_t n = strlen(etag);

  if (h == NULL || n == 0)
    return false;
  if (strcmp(h, "*") == 0)
    return true;
  /* a list of tags; weak comparison is right for If-None-Match */
  p = strstr(h, etag);
  return p != NULL;
}

static void ep_policy_get(aa__http_state *st, const aa__http_req *req,
                          aa__http_resp *r) {
  char *json = NULL;
  size_t len = 0;
  uint64_t version = 0;
  int rc;

  if (st->prov.policy_get == NULL) {
    unavailable(r, req, "policy");
    return;
  }
  rc = st->prov.policy_get(st->prov.user, &json, &len, &version);
  if (rc != AA_OK || json == NULL) {
    free(json);
    provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "policy", NULL);
    return;
  }
  set_etag(r, version);
  if (if_none_match_hits(req->if_none_match, r->etag)) {
    free(json);
    set_static(r, 304, CT_JSON, "", 0);
    return;
  }
  set_body(r, 200, CT_JSON, json, len);
}

static void ep_policy_change(aa__http_state *st, const aa__http_req *req,
                             aa__http_resp *r, bool patch) {
  aa_http_policy_change ch;
  uint64_t new_version = 0;
  char err[1024];
  int im;
  int rc;
  aa__buf b;
  char *body;
  size_t len;
  int (*fn)(void *, const aa_http_policy_change *, uint64_t *, char *, size_t) =
      patch ? st->prov.policy_patch : st->prov.policy_put;

  memset(&ch, 0, sizeof ch);
  if (fn == NULL) {
    unavailable(r, req, patch ? "policy patch" : "policy update");
    return;
  }
  if (req->nargs > 0 || req->too_many_args) {
    error_doc(r, req, 400, "/policy takes no query parameters", AA_EINVAL);
    return;
  }
  im = parse_if_match(req->if_match, &ch.if_match);
  if (im == -1) {
    error_doc(r, req, 400,
              "If-Match must be one version tag such as \"3\" (as in the "
              "ETag of GET /policy) or *",
              AA_EINVAL);
    return;
  }
  if (im == -2) {
    error_doc(r, req, 412, "If-Match: a weak tag never matches the policy",
              AA_ESTALE);
    return;
  }
  if (im == -3) {
    error_doc(r, req, 412,
              "If-Match: the tag does not match the policy's ETag byte for "
              "byte (no leading zeros)",
              AA_ESTALE);
    return;
  }
  ch.has_if_match = im == 1;
  if (req->body_len == 0) {
    error_doc(r, req, 400,
              patch ? "empty body: send a JSON merge patch (RFC 7386)"
                    : "empty body: send the whole policy as JSON",
              AA_EPARSE);
    return;
  }
  ch.body = req->body;
  ch.len = req->body_len;
  ch.source = "http";
  ch.client = req->client != NULL ? req->client : "";
  err[0] = '\0';
  rc = fn(st->prov.user, &ch, &new_version, err, sizeof err);
  err[sizeof err - 1] = '\0';
  if (rc != AA_OK) {
    if (rc == AA_ESTALE && err[0] == '\0')
      snprintf(err, sizeof err,
               "the policy changed since version %llu; GET /policy and retry",
               (unsigned long long)ch.if_match);
    provider_error(r, req, rc, "policy", err);
    return;
  }
  atomic_fetch_add(&st->policy_changes, 1);
  clear_caches(st);
  aa__buf_init(&b);
  aa__buf_printf(&b, "{\"ok\":true,\"version\":%llu}\n",
                 (unsigned long long)new_version);
  if (aa__buf_take(&b, &body, &len) != AA_OK) {
    set_oom(r);
    return;
  }
  set_etag(r, new_version);
  set_body(r, 200, CT_JSON, body, len);
}

static void ep_policy(aa__http_state *st, const aa__http_req *req,
                      aa__http_resp *r) {
  if (is_get(req->method))
    ep_policy_get(st, req, r);
  else if (strcmp(req->method, "PUT") == 0)
    ep_policy_change(st, req, r, false);
  else
    ep_policy_change(st, req, r, true);
}

static bool query_int(aa__http_resp *r, const aa__http_req *req,
                      const char *key, int64_t min, int64_t max, int64_t *out,
                      const char *rule) {
  const char *v = arg(req, key);
  char text[200];
  int rc;

  if (v == NULL)
    return true;
  rc = aa__http_parse_i64(v, min, max, out);
  if (rc != AA_OK) {
    snprintf(text, sizeof text, "%s: '%.32s' is not %s", key, v, rule);
    error_doc(r, req, 400, text, rc);
    return false;
  }
  return true;
}

static void ep_history(aa__http_state *st, const aa__http_req *req,
                       aa__http_resp *r) {
  static const char *const allowed[] = {"since", "limit", "run", "step",
                                        "policies", NULL};
  aa_http_history_query q;
  int64_t policies = 0;
  char *out = NULL;
  size_t len = 0;
  int rc;

  memset(&q, 0, sizeof q);
  q.since = -1;
  q.limit = 100;
  q.run = -1;
  q.step = -1;
  if (!check_args(r, req, allowed))
    return;
  if (!query_int(r, req, "since", 0, INT64_MAX, &q.since,
                 "a time in Unix milliseconds (an integer >= 0)") ||
      !query_int(r, req, "limit", 1, 10000, &q.limit,
                 "an integer from 1 to 10000") ||
      !query_int(r, req, "run", 1, INT64_MAX, &q.run,
                 "a run id (an integer >= 1)") ||
      !query_int(r, req, "step", 1, INT64_C(31536000000), &q.step,
                 "a slice of time in milliseconds (1 to a year)") ||
      !query_int(r, req, "policies", 0, 1, &policies, "0 or 1"))
    return;
  q.policies = policies == 1;
  if (st->prov.history_json == NULL) {
    unavailable(r, req, "history (store)");
    return;
  }
  rc = st->prov.history_json(st->prov.user, &q, &out, &len);
  if (rc != AA_OK || out == NULL) {
    free(out);
    provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "history (store)",
                   rc == AA_ENOTSUP ? "store disabled" : NULL);
    return;
  }
  set_body(r, 200, CT_JSON, out, len);
}

static void ep_runs(aa__http_state *st, const aa__http_req *req,
                    aa__http_resp *r) {
  static const char *const allowed[] = {NULL};
  char *out = NULL;
  size_t len = 0;
  int rc;

  if (!check_args(r, req, allowed))
    return;
  if (st->prov.runs_json == NULL) {
    unavailable(r, req, "runs (store)");
    return;
  }
  rc = st->prov.runs_json(st->prov.user, &out, &len);
  if (rc != AA_OK || out == NULL) {
    free(out);
    provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "runs (store)",
                   rc == AA_ENOTSUP ? "store disabled" : NULL);
    return;
  }
  set_body(r, 200, CT_JSON, out, len);
}

static void ep_segments(aa__http_state *st, const aa__http_req *req,
                        aa__http_resp *r) {
  static const char *const allowed[] = {"pool", NULL};
  const char *pool;
  char *out = NULL;
  size_t len = 0;
  int rc;

  if (!check_args(r, req, allowed))
    return;
  pool = arg(req, "pool");
  if (pool == NULL || pool[0] == '\0' || strlen(pool) > 31) {
    error_doc(r, req, 400, "pool: a pool name of 1 to 31 bytes is needed",
              AA_EINVAL);
    return;
  }
  if (st->prov.segments_json == NULL) {
    unavailable(r, req, "segments");
    return;
  }
  rc = st->prov.segments_json(st->prov.user, pool, &out, &len);
  if (rc != AA_OK || out == NULL) {
    free(out);
    if (rc == AA_ENOENT) {
      char text[96];
      snprintf(text, sizeof text, "no pool named '%s'", pool);
      error_doc(r, req, 404, text, AA_ENOENT);
      return;
    }
    provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "segments", NULL);
    return;
  }
  set_body(r, 200, CT_JSON, out, len);
}

static const aa__web_asset *find_asset(const char *path) {
  size_t i;
  if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0)
    path = "/static/index.html";
  for (i = 0; i < aa__web_asset_count; i++)
    if (strcmp(aa__web_assets[i].path, path) == 0)
      return &aa__web_assets[i];
  return NULL;
}

/* ------------------------------------------------------------ table */

typedef void (*handler_fn)(aa__http_state *, const aa__http_req *,
                           aa__http_resp *);

typedef struct {
  const char *path;
  const char *allow;
  handler_fn fn;
} route_t;

static const route_t routes[] = {
    {"/healthz", ALLOW_GET, ep_healthz},
    {"/stats", ALLOW_GET, ep_stats},
    {"/metrics", ALLOW_GET, ep_metrics},
    {"/policy", ALLOW_POLICY, ep_policy},
    {"/history", ALLOW_GET, ep_history},
    {"/runs", ALLOW_GET, ep_runs},
    {"/segments", ALLOW_GET, ep_segments},
};

static bool method_allowed(const char *allow, const char *method) {
  size_t n = strlen(method);
  const char *p = allow;
  if (n == 0)
    return false; /* strstr would find "" everywhere */
  for (p = strstr(p, method); p != NULL; p = strstr(p, method)) {
    bool start = p == allow || p[-1] == ' ';
    bool end = p[n] == '\0' || p[n] == ',';
    if (start && end)
      return true;
    p += n;
  }
  return false;
}

static void count_status(aa__http_state *st, int status) {
  if (status < 300)
    atomic_fetch_add(&st->status_2xx, 1);
  else if (status < 400)
    atomic_fetch_add(&st->status_3xx, 1);
  else if (status < 500)
    atomic_fetch_add(&st->status_4xx, 1);
  else
    atomic_fetch_add(&st->status_5xx, 1);
}

static void route(aa__http_state *st, const aa__http_req *req,
                  aa__http_resp *r) {
  const route_t *rt = NULL;
  const aa__web_asset *asset;
  size_t i;

  if (req->method == NULL || req->path == NULL) {
    error_doc(r, req, 400, "malformed request", AA_EINVAL);
    return;
  }
  if (req->bad_head != NULL) {
    error_doc(r, req, 400, req->bad_head, AA_EINVAL);
    return;
  }
  if (req->bad_framing) {
    /* Two lengths for one body is how requests get smuggled past proxies:
     * refuse rather than guess which one the client meant (RFC 9112 6.3). */
    error_doc(r, req, 400, "more than one Content-Length header", AA_EINVAL);
    return;
  }
  if (req->body_too_large) {
    char text[96];
    snprintf(text, sizeof text, "request body over the limit of %zu bytes",
             st->cfg.max_body);
    error_doc(r, req, 413, text, AA_ELIMIT);
    return;
  }
  if (!is_safe_method(req->method)) {
    if (st->token != NULL) {
      size_t tl;
      const char *t = bearer(req->authorization, &tl);
      if (t == NULL) {
        error_doc(r, req, 401,
                  "this request changes state: send Authorization: Bearer "
                  "<ADAPTALLOC_TOKEN>",
                  AA_EPERM);
        r->www_authenticate = true;
        return;
      }
      if (!aa__http_token_equal(t, tl, st->token, st->token_len)) {
        error_doc(r, req, 403, "wrong token", AA_EPERM);
        return;
      }
    } else if (!host_is_loopback(req->host)) {
      error_doc(r, req, 403,
                "without ADAPTALLOC_TOKEN, changes are accepted only with a "
                "loopback Host header (127.0.0.1, [::1], localhost)",
                AA_EPERM);
      return;
    }
  }
  for (i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (strcmp(routes[i].path, req->path) == 0)
      rt = &routes[i];
  if (rt == NULL) {
    asset = find_asset(req->path);
    if (asset == NULL) {
      error_doc(r, req, 404, "not found", AA_ENOENT);
      return;
    }
    if (!is_get(req->method)) {
      error_doc(r, req, 405, "method not allowed", AA_EINVAL);
      r->allow = ALLOW_GET;
      return;
    }
    snprintf(r->etag, sizeof r->etag, "%s", asset->etag);
    r->cache_control = "no-cache";
    r->is_asset = true;
    if (if_none_match_hits(req->if_none_match, asset->etag)) {
      set_static(r, 304, asset->content_type, "", 0);
      return;
    }
    set_static(r, 200, asset->content_type, (const char *)asset->data,
               asset->size);
    return;
  }
  if (!method_allowed(rt->allow, req->method)) {
    error_doc(r, req, 405, "method not allowed", AA_EINVAL);
    r->allow = rt->allow;
    return;
  }
  rt->fn(st, req, r);
}

void aa__http_error_resp(aa__http_state *st, const char *path, int status,
                         const char *msg, int aa_code, aa__http_resp *resp) {
  aa__http_req req;
  memset(&req, 0, sizeof req);
  req.path = path;
  memset(resp, 0, sizeof *resp);
  resp->body_static = true;
  atomic_fetch_add(&st->requests, 1);
  error_doc(resp, &req, status, msg, aa_code);
  count_status(st, resp->status);
}

void aa__http_route(aa__http_state *st, const aa__http_req *req,
                    aa__http_resp *resp) {
  memset(resp, 0, sizeof *resp);
  resp->body_static = true;
  atomic_fetch_add(&st->requests, 1);
  route(st, req, resp);
  if (resp->status == 0)
    error_doc(resp, req, 500, "no response", AA_EIO);
  if (resp->body == NULL)
    set_static(resp, resp->status, resp->content_type ? resp->content_type : CT_JSON,
               "", 0);
  count_status(st, resp->status);
}
