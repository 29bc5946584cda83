/*
 * router.c — turns one parsed request into one response, with no I/O: the
 * state, the token and Host checks, the endpoint table and method checks,
 * the dashboard's assets; each endpoint (query validation, the calls into
 * the provider) is endpoints.c's, error documents and caches respond.c's.
 * Entry points: aa__http_state_init, aa__http_route, aa__http_token_equal.
 *
 * Order of checks for every request: body over the limit (413); for a
 * mutating method (anything but GET, HEAD, OPTIONS): the token when one is
 * set (401 missing, 403 wrong), else a loopback Host header (403; defeats
 * DNS rebinding); then the path (404) and the method (405 with Allow); then
 * the endpoint's own checks (400 on bad query values or bodies).
 *
 * Files: this one (state, access checks, the table, route), endpoints.c
 * (the endpoints), respond.c (responses, errors, caches); router.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "router.h"

#define ALLOW_GET "GET, HEAD"
#define ALLOW_POLICY "GET, HEAD, PUT, PATCH"

/* ------------------------------------------------------------ state */

/* The public config's defaults (the state's, beside its init). */
void aa_http_config_init(aa_http_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->version = AA_HTTP_CONFIG_VERSION;
  cfg->address = NULL;
  cfg->local_rank = -1;
  cfg->token = NULL;
  cfg->max_connections = 64;
  cfg->per_ip_connections = 32;
  cfg->timeout_s = 10;
  cfg->max_body = 64 * 1024;
  cfg->max_header = 16 * 1024;
  cfg->stats_cache_ms = 0;
}

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

/* ------------------------------------------------------------ access */

bool aa__http_canonical_loopback4(const char *h) {
  /* exactly four parts, each 0..255 in decimal without leading zeros, the
   * first 127: "127.0.0.1", "127.1.2.3". Not the forms inet_aton also reads
   * ("127.1", "127.000.0.1", "127.0000", "0x7f.0.0.1"): a check that lets
   * them pass has to agree with every resolver on what they mean. */
  int parts = 0;
  if (strncmp(h, "127.", 4) != 0)
    return false;
  while (*h != '\0') {
    unsigned v = 0;
    int nd = 0;
    while (h[nd] >= '0' && h[nd] <= '9' && nd < 4)
      v = v * 10u + (unsigned)(h[nd++] - '0');
    if (nd == 0 || nd > 3 || v > 255 || (nd > 1 && h[0] == '0'))
      return false;
    h += nd;
    parts++;
    if (*h == '.' && parts < 4)
      h++;
    else if (*h != '\0')
      return false;
  }
  return parts == 4;
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
  return aa__http_canonical_loopback4(h);
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

static const aa__web_asset *find_asset(const char *path) {
  size_t i;
  if (strcmp(path, "/") == 0 || strcmp(path, "/index.html") == 0)
    path = "/static/index.html";
  else if (strcmp(path, "/favicon.ico") == 0) /* where browsers ask for it */
    path = "/static/favicon.ico";
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
    {"/healthz", ALLOW_GET, aa__http_ep_healthz},
    {"/stats", ALLOW_GET, aa__http_ep_stats},
    {"/metrics", ALLOW_GET, aa__http_ep_metrics},
    {"/policy", ALLOW_POLICY, aa__http_ep_policy},
    {"/history", ALLOW_GET, aa__http_ep_history},
    {"/runs", ALLOW_GET, aa__http_ep_runs},
    {"/segments", ALLOW_GET, aa__http_ep_segments},
    {"/holders", ALLOW_GET, aa__http_ep_holders},
    {"/oom", ALLOW_GET, aa__http_ep_oom},
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
    aa__http_error_doc(r, req, 400, "malformed request", AA_EINVAL);
    return;
  }
  if (req->bad_head != NULL) {
    aa__http_error_doc(r, req, 400, req->bad_head, AA_EINVAL);
    return;
  }
  if (req->bad_framing) {
    /* Two lengths for one body is how requests get smuggled past proxies:
     * refuse rather than guess which one the client meant (RFC 9112 6.3). */
    aa__http_error_doc(r, req, 400, "more than one Content-Length header", AA_EINVAL);
    return;
  }
  if (req->body_too_large) {
    char text[96];
    snprintf(text, sizeof text, "request body over the limit of %zu bytes",
             st->cfg.max_body);
    aa__http_error_doc(r, req, 413, text, AA_ELIMIT);
    return;
  }
  if (!is_safe_method(req->method)) {
    if (st->token != NULL) {
      size_t tl;
      const char *t = bearer(req->authorization, &tl);
      if (t == NULL) {
        aa__http_error_doc(r, req, 401,
                           "this request changes state: send Authorization: Bearer "
                           "<ADAPTALLOC_TOKEN>",
                           AA_EPERM);
        r->www_authenticate = true;
        return;
      }
      if (!aa__http_token_equal(t, tl, st->token, st->token_len)) {
        aa__http_error_doc(r, req, 403, "wrong token", AA_EPERM);
        return;
      }
    } else if (!host_is_loopback(req->host)) {
      aa__http_error_doc(r, req, 403,
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
      aa__http_error_doc(r, req, 404, "not found", AA_ENOENT);
      return;
    }
    if (!aa__http_is_get(req->method)) {
      aa__http_error_doc(r, req, 405, "method not allowed", AA_EINVAL);
      r->allow = ALLOW_GET;
      return;
    }
    snprintf(r->etag, sizeof r->etag, "%s", asset->etag);
    r->cache_control = "no-cache";
    r->is_asset = true;
    if (aa__http_if_none_match_hits(req->if_none_match, asset->etag)) {
      aa__http_set_not_modified(r, asset->content_type, (char *)(uintptr_t)asset->data,
                                asset->size, true);
      return;
    }
    aa__http_set_static(r, 200, asset->content_type, (const char *)asset->data,
                        asset->size);
    return;
  }
  if (!method_allowed(rt->allow, req->method)) {
    aa__http_error_doc(r, req, 405, "method not allowed", AA_EINVAL);
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
  aa__http_error_doc(resp, &req, status, msg, aa_code);
  count_status(st, resp->status);
}

void aa__http_route(aa__http_state *st, const aa__http_req *req,
                    aa__http_resp *resp) {
  memset(resp, 0, sizeof *resp);
  resp->body_static = true;
  atomic_fetch_add(&st->requests, 1);
  route(st, req, resp);
  if (resp->status == 0)
    aa__http_error_doc(resp, req, 500, "no response", AA_EIO);
  if (resp->body == NULL)
    aa__http_set_static(resp, resp->status, resp->content_type ? resp->content_type : CT_JSON,
                        "", 0);
  count_status(st, resp->status);
}
