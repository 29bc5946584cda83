/*
 * endpoints.c — the router's endpoints, one function each (aa__http_ep_*):
 * /healthz, /stats, /metrics, /policy (GET, PUT, PATCH with If-Match),
 * /history, /runs, /segments, /holders; their query checks. The table that names
 * them is router.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "router.h"

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
    aa__http_error_doc(r, req, 400, "too many query parameters", AA_EINVAL);
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
      aa__http_error_doc(r, req, 400, text, AA_EINVAL);
      return false;
    }
    for (j = 0; j < i; j++) {
      if (strcmp(k, req->args[j].key) == 0) {
        snprintf(text, sizeof text, "query parameter '%.40s' given twice", k);
        aa__http_error_doc(r, req, 400, text, AA_EINVAL);
        return false;
      }
    }
  }
  return true;
}

/* ------------------------------------------------------------ endpoints */

/* The `pool` argument of /stats (optional), /segments and /holders
 * (required): a
 * pool name of 1 to 31 bytes. False after answering 400. */
static bool pool_arg(aa__http_resp *r, const aa__http_req *req, bool required,
                     const char **pool) {
  *pool = arg(req, "pool");
  if (*pool == NULL && !required)
    return true;
  if (*pool == NULL || (*pool)[0] == '\0' || strlen(*pool) > 31) {
    aa__http_error_doc(r, req, 400,
                       required ? "pool: a pool name of 1 to 31 bytes is needed"
                                : "pool: must be a pool name of 1 to 31 bytes",
                       AA_EINVAL);
    return false;
  }
  return true;
}

void aa__http_ep_healthz(aa__http_state *st, const aa__http_req *req,
                         aa__http_resp *r) {
  (void)st;
  (void)req;
  aa__http_set_static(r, 200, CT_TEXT, "ok\n", 3);
}

void aa__http_ep_stats(aa__http_state *st, const aa__http_req *req,
                       aa__http_resp *r) {
  static const char *const allowed[] = {"pool", NULL};
  const char *pool;
  char *out = NULL;
  size_t len = 0;
  int rc;

  if (!check_args(r, req, allowed) || !pool_arg(r, req, false, &pool))
    return;
  if (st->prov.stats_json == NULL) {
    aa__http_unavailable(r, req, "stats");
    return;
  }
  if (pool == NULL && aa__http_cache_hit(st, st->stats_cache, st->stats_cache_len,
                                         st->stats_cache_ns, r, CT_JSON))
    return;
  rc = st->prov.stats_json(st->prov.user, pool, &out, &len);
  if (rc != AA_OK || out == NULL) {
    free(out);
    if (rc == AA_ENOENT && pool != NULL) {
      char text[96];
      snprintf(text, sizeof text, "no pool named '%s'", pool);
      aa__http_error_doc(r, req, 404, text, AA_ENOENT);
      return;
    }
    aa__http_provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "stats", NULL);
    return;
  }
  if (pool == NULL)
    aa__http_cache_store(st, &st->stats_cache, &st->stats_cache_len,
                         &st->stats_cache_ns, out, len);
  aa__http_set_body(r, 200, CT_JSON, out, len);
}

/* The server's own families. The policy version and the runtime's counters
 * come from the provider's metrics_extra, which then writes build_info too
 * (with the model and rank the server does not know). */
static void server_metrics(aa__http_state *st, aa__buf *b) {
  if (st->prov.metrics_extra == NULL)
    aa__buf_printf(b,
                   "# HELP adaptalloc_build_info Version of adaptalloc.\n"
                   "# TYPE adaptalloc_build_info gauge\n"
                   "adaptalloc_build_info{version=\"%d.%d.%d\",model=\"\",rank=\"\"} 1\n",
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

void aa__http_ep_metrics(aa__http_state *st, const aa__http_req *req,
                         aa__http_resp *r) {
  aa_pool_stats *pools = NULL;
  aa_http_labels *labels = NULL; /* the provider's, per pool (NULL: none) */
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
    aa__http_unavailable(r, req, "metrics");
    goto done;
  }
  if (aa__http_cache_hit(st, st->metrics_cache, st->metrics_cache_len,
                         st->metrics_cache_ns, r, CT_PROM))
    goto done;
  rc = st->prov.pool_stats(st->prov.user, &pools, &n);
  if (rc != AA_OK) {
    aa__http_provider_error(r, req, rc, "metrics", NULL);
    goto done;
  }
  if (st->prov.pool_labels != NULL && n > 0) {
    labels = calloc(n, sizeof *labels);
    for (size_t i = 0; labels != NULL && i < n; i++)
      if (st->prov.pool_labels(st->prov.user, &pools[i], &labels[i]) != AA_OK)
        memset(&labels[i], 0, sizeof labels[i]);
  }
  rc = aa__http_render_metrics_labeled(pools, n, labels, st->metrics_carry, &text, &len);
  if (rc != AA_OK) {
    aa__http_set_oom(r);
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
    aa__http_set_oom(r);
    goto done;
  }
  aa__http_cache_store(st, &st->metrics_cache, &st->metrics_cache_len,
                       &st->metrics_cache_ns, out, out_len);
  aa__http_set_body(r, 200, CT_PROM, out, out_len);
done:
  aa__buf_free(&b);
  free(extra);
  free(text);
  free(labels);
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

bool aa__http_if_none_match_hits(const char *h, const char *etag) {
  size_t n = strlen(etag);

  if (h == NULL || n == 0)
    return false;
  if (strcmp(h, "*") == 0)
    return true;
  /* #entity-tag (RFC 9110 8.8.3, 13.1.2): [W/] "..." separated by commas
   * and optional white space; each compared whole, weakly (the W/ prefix
   * ignored), as If-None-Match asks. A list that does not parse matches
   * nothing: x"3"y is not "3". */
  for (;;) {
    const char *q, *tag;
    while (*h == ' ' || *h == '\t' || *h == ',')
      h++;
    if (*h == '\0')
      return false;
    if (h[0] == 'W' && h[1] == '/')
      h += 2;
    if (*h != '"')
      return false;
    q = strchr(h + 1, '"');
    if (q == NULL)
      return false;
    tag = h;
    h = q + 1;
    while (*h == ' ' || *h == '\t')
      h++;
    if (*h != ',' && *h != '\0')
      return false; /* x"3"y: not a list of tags at all */
    if ((size_t)(q + 1 - tag) == n && memcmp(tag, etag, n) == 0)
      return true;
  }
}

static void ep_policy_get(aa__http_state *st, const aa__http_req *req,
                          aa__http_resp *r) {
  char *json = NULL;
  size_t len = 0;
  uint64_t version = 0;
  int rc;

  if (st->prov.policy_get == NULL) {
    aa__http_unavailable(r, req, "policy");
    return;
  }
  rc = st->prov.policy_get(st->prov.user, &json, &len, &version);
  if (rc != AA_OK || json == NULL) {
    free(json);
    aa__http_provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "policy", NULL);
    return;
  }
  aa__http_set_etag(r, version);
  if (aa__http_if_none_match_hits(req->if_none_match, r->etag)) {
    aa__http_set_not_modified(r, CT_JSON, json, len, false);
    return;
  }
  aa__http_set_body(r, 200, CT_JSON, json, len);
}

static void ep_policy_change(aa__http_state *st, const aa__http_req *req,
                             aa__http_resp *r, bool patch) {
  aa_http_policy_change ch;
  uint64_t new_version = 0;
  bool unchanged = false;
  char *err = NULL; /* the body's size + 1 KiB: holds any message whole
                     * (aa_policy_parse: a message quotes a number of the
                     * body with every digit) */
  size_t errcap;
  int im;
  int rc;
  aa__buf b;
  char *body;
  size_t len;
  int (*fn)(void *, const aa_http_policy_change *, uint64_t *, char *, size_t) =
      patch ? st->prov.policy_patch : st->prov.policy_put;

  memset(&ch, 0, sizeof ch);
  if (fn == NULL) {
    aa__http_unavailable(r, req, patch ? "policy patch" : "policy update");
    return;
  }
  if (req->nargs > 0 || req->too_many_args) {
    aa__http_error_doc(r, req, 400, "/policy takes no query parameters", AA_EINVAL);
    return;
  }
  im = parse_if_match(req->if_match, &ch.if_match);
  if (im == -1) {
    aa__http_error_doc(r, req, 400,
                       "If-Match must be one version tag such as \"3\" (as in the "
                       "ETag of GET /policy) or *",
                       AA_EINVAL);
    return;
  }
  if (im == -2) {
    aa__http_error_doc(r, req, 412, "If-Match: a weak tag never matches the policy",
                       AA_ESTALE);
    return;
  }
  if (im == -3) {
    aa__http_error_doc(r, req, 412,
                       "If-Match: the tag does not match the policy's ETag byte for "
                       "byte (no leading zeros)",
                       AA_ESTALE);
    return;
  }
  ch.has_if_match = im == 1;
  if (req->body_len == 0) {
    aa__http_error_doc(r, req, 400,
                       patch ? "empty body: send a JSON merge patch (RFC 7386)"
                             : "empty body: send the whole policy as JSON",
                       AA_EPARSE);
    return;
  }
  ch.body = req->body;
  ch.len = req->body_len;
  ch.source = "http";
  ch.client = req->client != NULL ? req->client : "";
  ch.unchanged = &unchanged;
  errcap = req->body_len + 1024;
  err = malloc(errcap);
  if (err == NULL) {
    aa__http_set_oom(r);
    return;
  }
  err[0] = '\0';
  rc = fn(st->prov.user, &ch, &new_version, err, errcap);
  err[errcap - 1] = '\0';
  if (rc != AA_OK) {
    if (rc == AA_ESTALE && err[0] == '\0')
      snprintf(err, errcap,
               "the policy changed since version %llu; GET /policy and retry",
               (unsigned long long)ch.if_match);
    aa__http_provider_error(r, req, rc, "policy", err);
    free(err);
    return;
  }
  free(err);
  /* the same document as the policy in force changes nothing: no new
   * version, so no change counted and the caches stay */
  if (!unchanged) {
    atomic_fetch_add(&st->policy_changes, 1);
    aa__http_clear_caches(st);
  }
  aa__buf_init(&b);
  aa__buf_printf(&b, "{\"ok\":true,\"version\":%llu,\"changed\":%s}\n",
                 (unsigned long long)new_version, unchanged ? "false" : "true");
  if (aa__buf_take(&b, &body, &len) != AA_OK) {
    aa__http_set_oom(r);
    return;
  }
  aa__http_set_etag(r, new_version);
  aa__http_set_body(r, 200, CT_JSON, body, len);
}

void aa__http_ep_policy(aa__http_state *st, const aa__http_req *req,
                        aa__http_resp *r) {
  if (aa__http_is_get(req->method))
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
    aa__http_error_doc(r, req, 400, text, rc);
    return false;
  }
  return true;
}

void aa__http_ep_history(aa__http_state *st, const aa__http_req *req,
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
    aa__http_unavailable(r, req, "history (store)");
    return;
  }
  rc = st->prov.history_json(st->prov.user, &q, &out, &len);
  if (rc != AA_OK || out == NULL) {
    char msg[96];
    free(out);
    msg[0] = '\0';
    if (rc == AA_ENOTSUP)
      snprintf(msg, sizeof msg, "store disabled");
    else if (rc == AA_ENOENT && q.run > 0) /* said "no such entry" */
      snprintf(msg, sizeof msg, "run: the store has no run %lld (GET /runs lists them)",
               (long long)q.run);
    aa__http_provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "history (store)", msg);
    return;
  }
  aa__http_set_body(r, 200, CT_JSON, out, len);
}

void aa__http_ep_runs(aa__http_state *st, const aa__http_req *req,
                      aa__http_resp *r) {
  static const char *const allowed[] = {NULL};
  char *out = NULL;
  size_t len = 0;
  int rc;

  if (!check_args(r, req, allowed))
    return;
  if (st->prov.runs_json == NULL) {
    aa__http_unavailable(r, req, "runs (store)");
    return;
  }
  rc = st->prov.runs_json(st->prov.user, &out, &len);
  if (rc != AA_OK || out == NULL) {
    free(out);
    aa__http_provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "runs (store)",
                            rc == AA_ENOTSUP ? "store disabled" : NULL);
    return;
  }
  aa__http_set_body(r, 200, CT_JSON, out, len);
}

void aa__http_ep_oom(aa__http_state *st, const aa__http_req *req, aa__http_resp *r) {
  static const char *const allowed[] = {"limit", NULL};
  int64_t limit = 0;
  char *out = NULL;
  size_t len = 0;
  int rc;

  if (!check_args(r, req, allowed))
    return;
  if (!query_int(r, req, "limit", 1, 10000, &limit, "an integer from 1 to 10000"))
    return;
  if (st->prov.oom_json == NULL) {
    aa__http_unavailable(r, req, "oom");
    return;
  }
  rc = st->prov.oom_json(st->prov.user, limit, &out, &len);
  if (rc != AA_OK || out == NULL) {
    free(out);
    aa__http_provider_error(r, req, rc != AA_OK ? rc : AA_EIO, "oom",
                            rc == AA_ENOTSUP ? "store disabled" : NULL);
    return;
  }
  aa__http_set_body(r, 200, CT_JSON, out, len);
}

/* The answer of a provider that renders one pool's JSON (segments,
 * holders): 200 with `out` (taken), 404 naming an unknown pool, or the
 * provider's error. */
static void pool_answer(aa__http_resp *r, const aa__http_req *req, const char *pool,
                        const char *what, int rc, char *out, size_t len) {
  if (rc == AA_OK && out != NULL) {
    aa__http_set_body(r, 200, CT_JSON, out, len);
    return;
  }
  free(out);
  if (rc == AA_ENOENT) {
    char text[96];
    snprintf(text, sizeof text, "no pool named '%s'", pool);
    aa__http_error_doc(r, req, 404, text, AA_ENOENT);
    return;
  }
  aa__http_provider_error(r, req, rc != AA_OK ? rc : AA_EIO, what, NULL);
}

void aa__http_ep_segments(aa__http_state *st, const aa__http_req *req,
                          aa__http_resp *r) {
  static const char *const allowed[] = {"pool", NULL};
  const char *pool;
  char *out = NULL;
  size_t len = 0;
  int rc;

  if (!check_args(r, req, allowed) || !pool_arg(r, req, true, &pool))
    return;
  if (st->prov.segments_json == NULL) {
    aa__http_unavailable(r, req, "segments");
    return;
  }
  rc = st->prov.segments_json(st->prov.user, pool, &out, &len);
  pool_answer(r, req, pool, "segments", rc, out, len);
}

void aa__http_ep_holders(aa__http_state *st, const aa__http_req *req,
                         aa__http_resp *r) {
  static const char *const allowed[] = {"pool", "top", NULL};
  const char *pool;
  int64_t top = 10;
  char *out = NULL;
  size_t len = 0;
  int rc;

  if (!check_args(r, req, allowed) || !pool_arg(r, req, true, &pool))
    return;
  if (!query_int(r, req, "top", 1, AA_HTTP_HOLDERS_MAX, &top, "an integer from 1 to 100"))
    return;
  if (st->prov.holders_json == NULL) {
    aa__http_unavailable(r, req, "holders");
    return;
  }
  rc = st->prov.holders_json(st->prov.user, pool, (unsigned)top, &out, &len);
  pool_answer(r, req, pool, "holders", rc, out, len);
}
