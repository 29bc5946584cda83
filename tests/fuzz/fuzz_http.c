/*
 * fuzz_http.c — the HTTP request handling without sockets: the input is read
 * as a request ("METHOD /path?query", header lines, a blank line, the body)
 * and answered by the router (aa__http_route) of two server states, one with
 * a token and one without, over an in-memory provider. Also feeds the first
 * line to the address parser, the whole input to the JSON escaper, to the
 * strict head check, and as a pipelined stream to the relay's framing.
 *
 * Invariants checked (abort on violation): every error answer is valid JSON
 * with "error" and "path"; /holders reaches its provider only with a pool
 * name and a top in range; the escaper's output is valid JSON; the policy
 * changes only on a 2xx answer to PUT/PATCH; nothing leaks (ASan).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cJSON.h>

#include "adaptalloc/http.h"
#include "http_test.h" /* the server's internals */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
  char *policy;
  uint64_t version;
} fprov;

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p != NULL) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

static int f_stats(void *u, const char *pool, char **out, size_t *len) {
  (void)u;
  if (pool != NULL && strcmp(pool, "host") != 0)
    return AA_ENOENT;
  *out = dup_n("{\"pools\":[]}", 12);
  *len = 12;
  return *out ? AA_OK : AA_ENOMEM;
}

/* GET /holders: the router passes a pool name of 1 to 31 bytes and a top
 * of 1 to AA_HTTP_HOLDERS_MAX, whatever the query said. */
static int f_holders(void *u, const char *pool, unsigned top, char **out, size_t *len) {
  (void)u;
  if (pool == NULL || pool[0] == '\0' || strlen(pool) > 31 || top < 1 ||
      top > AA_HTTP_HOLDERS_MAX)
    abort();
  if (strcmp(pool, "host") != 0)
    return AA_ENOENT;
  *out = dup_n("{\"pool\":\"host\",\"top_sizes\":[],\"largest\":[]}", 43);
  *len = 43;
  return *out ? AA_OK : AA_ENOMEM;
}

static int f_pool_stats(void *u, aa_pool_stats **out, size_t *n) {
  (void)u;
  *out = calloc(1, sizeof **out);
  if (*out == NULL)
    return AA_ENOMEM;
  (*out)->version = AA_STATS_VERSION;
  (*out)->size = sizeof **out;
  memcpy((*out)->name, "host", 5);
  memcpy((*out)->backend, "host", 5);
  (*out)->device = -1;
  (*out)->class_count = 1;
  (*out)->classes[0].block_size = 512;
  (*out)->hist[10] = 3;
  *n = 1;
  return AA_OK;
}

static int f_policy_get(void *u, char **json, size_t *len, uint64_t *v) {
  fprov *f = u;
  *json = dup_n(f->policy, strlen(f->policy));
  *len = strlen(f->policy);
  *v = f->version;
  return *json ? AA_OK : AA_ENOMEM;
}

static int f_change(void *u, const aa_http_policy_change *c, uint64_t *nv,
                    char *err, size_t errcap) {
  fprov *f = u;
  cJSON *doc = cJSON_ParseWithLength(c->body, c->len);
  char *text;
  if (doc == NULL) {
    snprintf(err, errcap, "malformed JSON");
    return AA_EPARSE;
  }
  if (!cJSON_IsObject(doc)) {
    cJSON_Delete(doc);
    snprintf(err, errcap, "$: must be an object");
    return AA_EINVAL;
  }
  if (c->has_if_match && c->if_match != f->version) {
    cJSON_Delete(doc);
    return AA_ESTALE;
  }
  text = cJSON_PrintUnformatted(doc);
  cJSON_Delete(doc);
  if (text == NULL)
    return AA_ENOMEM;
  free(f->policy);
  f->policy = text;
  f->version++;
  *nv = f->version;
  return AA_OK;
}

static int f_history(void *u, const aa_http_history_query *q, char **out,
                     size_t *len) {
  char buf[128];
  int n;
  (void)u;
  if (q->limit < 1 || q->limit > 10000)
    abort(); /* the router must have validated it */
  n = snprintf(buf, sizeof buf, "{\"since\":%lld,\"limit\":%lld,\"run\":%lld}",
               (long long)q->since, (long long)q->limit, (long long)q->run);
  *out = dup_n(buf, (size_t)n);
  *len = (size_t)n;
  return *out ? AA_OK : AA_ENOMEM;
}

static int f_runs(void *u, char **out, size_t *len) {
  (void)u;
  (void)out;
  (void)len;
  return AA_ENOTSUP;
}

/* Splits the next line (up to \n, without \r) off [*p, end). */
static bool next_line(const char **p, const char *end, const char **line,
                      size_t *n) {
  const char *s = *p;
  const char *e;
  if (s >= end)
    return false;
  e = memchr(s, '\n', (size_t)(end - s));
  if (e == NULL)
    e = end;
  *line = s;
  *n = (size_t)(e - s);
  if (*n > 0 && s[*n - 1] == '\r')
    (*n)--;
  *p = e < end ? e + 1 : end;
  return true;
}

static void check_error_doc(const aa__http_resp *r) {
  cJSON *doc;
  if (r->status < 400)
    return;
  if (r->content_type == NULL || strcmp(r->content_type, "application/json") != 0)
    abort();
  doc = cJSON_ParseWithLength(r->body, r->len);
  if (doc == NULL || !cJSON_IsString(cJSON_GetObjectItem(doc, "error")))
    abort();
  if (strcmp(r->body, "{\"error\":\"out of memory\"}") != 0 &&
      !cJSON_IsString(cJSON_GetObjectItem(doc, "path")))
    abort();
  cJSON_Delete(doc);
}

static void run_one(const char *token, const uint8_t *data, size_t size) {
  aa_http_config cfg;
  aa_http_provider prov;
  aa__http_state st;
  aa__http_req req;
  aa__http_resp resp;
  fprov f;
  const char *p = (const char *)data;
  const char *end = p + size;
  const char *line;
  size_t n;
  char *method = NULL;
  char *path = NULL;
  char *query = NULL;
  char *hdrs[32];
  size_t nh = 0;
  char *body = NULL;
  uint64_t v0;

  memset(&req, 0, sizeof req);
  memset(&prov, 0, sizeof prov);
  f.policy = dup_n("{}", 2);
  f.version = 1;
  if (f.policy == NULL)
    return;
  prov.version = AA_HTTP_PROVIDER_VERSION;
  prov.user = &f;
  prov.stats_json = f_stats;
  prov.pool_stats = f_pool_stats;
  prov.policy_get = f_policy_get;
  prov.policy_put = f_change;
  prov.policy_patch = f_change;
  prov.history_json = f_history;
  prov.runs_json = f_runs;
  prov.holders_json = f_holders;
  aa_http_config_init(&cfg);
  cfg.token = token;
  cfg.stats_cache_ms = size % 2 ? 1000 : 0;
  if (aa__http_state_init(&st, &cfg, &prov) != AA_OK) {
    free(f.policy);
    return;
  }

  /* request line */
  if (next_line(&p, end, &line, &n)) {
    const char *sp = memchr(line, ' ', n);
    size_t ml = sp ? (size_t)(sp - line) : n;
    method = dup_n(line, ml);
    if (sp != NULL) {
      const char *u = sp + 1;
      size_t ul = n - ml - 1;
      const char *q = memchr(u, '?', ul);
      size_t pl = q ? (size_t)(q - u) : ul;
      path = dup_n(u, pl);
      if (q != NULL)
        query = dup_n(q + 1, ul - pl - 1);
    } else {
      path = dup_n("/", 1);
    }
  }
  if (method == NULL || path == NULL)
    goto done;
  req.method = method;
  req.path = strlen(path) == 0 ? "/" : path;
  /* query: k=v&k2=v2 (raw, undecoded) */
  if (query != NULL) {
    char *save = NULL;
    char *tok = strtok_r(query, "&", &save);
    while (tok != NULL) {
      char *eq = strchr(tok, '=');
      if (req.nargs == AA__HTTP_MAX_ARGS) {
        req.too_many_args = true;
        break;
      }
      if (eq != NULL)
        *eq = '\0';
      req.args[req.nargs].key = tok;
      req.args[req.nargs].value = eq ? eq + 1 : NULL;
      req.nargs++;
      tok = strtok_r(NULL, "&", &save);
    }
  }
  /* headers */
  while (nh < 32 && next_line(&p, end, &line, &n) && n > 0) {
    const char *colon = memchr(line, ':', n);
    size_t kl;
    const char *val;
    if (colon == NULL)
      continue;
    kl = (size_t)(colon - line);
    val = colon + 1;
    while (val < line + n && *val == ' ')
      val++;
    hdrs[nh] = dup_n(val, (size_t)(line + n - val));
    if (hdrs[nh] == NULL)
      break;
    if (kl == 13 && strncasecmp(line, "Authorization", 13) == 0)
      req.authorization = hdrs[nh];
    else if (kl == 8 && strncasecmp(line, "If-Match", 8) == 0)
      req.if_match = hdrs[nh];
    else if (kl == 13 && strncasecmp(line, "If-None-Match", 13) == 0)
      req.if_none_match = hdrs[nh];
    else if (kl == 4 && strncasecmp(line, "Host", 4) == 0)
      req.host = hdrs[nh];
    nh++;
  }
  body = dup_n(p, (size_t)(end - p));
  req.body = body;
  req.body_len = body ? (size_t)(end - p) : 0;
  req.body_too_large = req.body_len > 4096 && (size & 4) != 0;
  req.client = "127.0.0.1";

  v0 = f.version;
  aa__http_route(&st, &req, &resp);
  if (resp.status < 100 || resp.status > 599)
    abort();
  check_error_doc(&resp);
  if (f.version != v0 && !(resp.status == 200 &&
                           (strcmp(method, "PUT") == 0 ||
                            strcmp(method, "PATCH") == 0)))
    abort();
  aa__http_resp_free(&resp);
  /* once more: the cache path */
  aa__http_route(&st, &req, &resp);
  check_error_doc(&resp);
  aa__http_resp_free(&resp);

done:
  while (nh > 0)
    free(hdrs[--nh]);
  free(body);
  free(query);
  free(path);
  free(method);
  aa__http_state_fini(&st);
  free(f.policy);
}

static void fuzz_address_and_escape(const uint8_t *data, size_t size) {
  char spec[160];
  size_t n = size < sizeof spec - 1 ? size : sizeof spec - 1;
  const char *nl;
  aa_http_addr a;
  char err[128];
  aa__buf b;
  char *out = NULL;
  size_t len = 0;
  cJSON *doc;

  memcpy(spec, data, n);
  spec[n] = '\0';
  nl = strchr(spec, '\n');
  if (nl != NULL)
    spec[nl - spec] = '\0';
  if (aa_http_parse_address(spec, (int)(size % 8) - 1, &a, err, sizeof err) ==
      AA_OK) {
    if (!a.off && a.host[0] == '\0')
      abort();
  } else if (err[0] == '\0') {
    abort();
  }
  aa__buf_init(&b);
  aa__buf_json_str(&b, (const char *)data, size);
  if (aa__buf_take(&b, &out, &len) != AA_OK)
    return;
  doc = cJSON_ParseWithLength(out, len);
  if (doc == NULL || !cJSON_IsString(doc))
    abort();
  cJSON_Delete(doc);
  free(out);
}

/* The strict head check on the raw bytes (as the intake thread peeks them):
 * a decision is either acceptance of a head that ends in a blank line
 * within the input, or one of the statuses the server answers with a
 * reason; a prefix never reads past its length. */
static void fuzz_head(const uint8_t *data, size_t size) {
  aa__http_head_limits lim = {16 * 1024, 8 * 1024, AA__HTTP_MAX_ARGS,
                              AA__HTTP_MAX_FIELDS};
  aa__http_head h;
  size_t cut[2] = {size / 2, size};
  for (int k = 0; k < 2; k++) {
    char *copy = dup_n((const char *)data, cut[k]); /* exact-size for ASan */
    if (copy == NULL)
      return;
    if (aa__http_head_check(copy, cut[k], &lim, &h) == 1) {
      if (h.status == 0) {
        if (h.len < 2 || h.len > cut[k] || copy[h.len - 1] != '\n')
          abort();
      } else if (h.status != 400 && h.status != 414 && h.status != 431 &&
                 h.status != 505) {
        abort();
      } else if (h.why[0] == '\0' || memchr(h.why, '\0', sizeof h.why) == NULL) {
        abort();
      }
    }
    free(copy);
  }
}

/* A kept-alive connection's bytes as the intake relays them: head after
 * head, each checked whole before it goes, then passed with exactly the
 * body its Content-Length announces; a chunked body ends the walk (that
 * request is the connection's last). The walk only moves forward and never
 * past the input; an accepted head never announces both framings. */
static void fuzz_stream(const uint8_t *data, size_t size) {
  aa__http_head_limits lim = {16 * 1024, 8 * 1024, AA__HTTP_MAX_ARGS,
                              AA__HTTP_MAX_FIELDS};
  char *copy = dup_n((const char *)data, size);
  size_t off = 0;
  if (copy == NULL)
    return;
  while (off < size) {
    aa__http_head h;
    if (aa__http_head_check(copy + off, size - off, &lim, &h) == 0 ||
        h.status != 0)
      break; /* waits for more, or refused: nothing after it goes */
    if (h.len < 2 || h.len > size - off)
      abort();
    if (h.chunked && h.content_length != 0)
      abort();
    if (h.chunked) {
      off += h.len;
      break; /* its chunks: below; nothing after them is relayed */
    }
    if (h.content_length > size - off - h.len)
      break;
    off += h.len + (size_t)h.content_length;
  }
  /* a chunked body as the relay checks it: size line (1..16 hex digits,
   * extensions of printable bytes, CRLF), data, CRLF; a refusal has a reason
   * and a status of 400 or 413; a line is never longer than what arrived */
  while (off < size) {
    uint64_t sz;
    size_t len;
    char why[200];
    int r;
    why[0] = '\0';
    r = aa__http_chunk_line(copy + off, size - off, 1u << 20, &sz, &len, why,
                            sizeof why);
    if (r == 0)
      break;
    if (r != 1) {
      if ((r != 400 && r != 413) || why[0] == '\0')
        abort();
      break;
    }
    if (len < 3 || len > size - off || copy[off + len - 1] != '\n' ||
        sz > (1u << 20))
      abort();
    off += len;
    if (sz == 0 || sz + 2 > size - off ||
        memcmp(copy + off + sz, "\r\n", 2) != 0)
      break;
    off += (size_t)sz + 2;
  }
  free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 256 * 1024)
    return 0;
  fuzz_head(data, size);
  fuzz_stream(data, size);
  fuzz_address_and_escape(data, size);
  run_one(NULL, data, size);
  run_one("fuzz-token", data, size);
  return 0;
}
