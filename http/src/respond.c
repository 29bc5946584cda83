/*
 * respond.c — the router's responses: a body (owned or static), the 500 of
 * out of memory, error documents ({"error", "path"} and the code), a
 * provider's error mapped to its status, 503 while a part is off, the
 * ETag of a policy version, and the cache of the last /stats and /metrics.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "router.h"

static const char oom_body[] = "{\"error\":\"out of memory\"}";

/* ------------------------------------------------------------ responses */

void aa__http_set_body(aa__http_resp *r, int status, const char *type,
                       char *body, size_t len) {
  r->status = status;
  r->content_type = type;
  r->body = body;
  r->len = len;
  r->body_static = false;
}

void aa__http_set_static(aa__http_resp *r, int status, const char *type,
                         const char *body, size_t len) {
  r->status = status;
  r->content_type = type;
  r->body = (char *)(uintptr_t)body; /* never written, never freed */
  r->len = len;
  r->body_static = true;
}

void aa__http_set_not_modified(aa__http_resp *r, const char *type, char *body_200, size_t len,
                               bool body_static) {
  /* libmicrohttpd sends no body with a 304 but says the length of the one it
   * holds: holding the 200's makes that the 200's length */
  if (body_static)
    aa__http_set_static(r, 304, type, body_200, len);
  else
    aa__http_set_body(r, 304, type, body_200, len);
}

void aa__http_set_oom(aa__http_resp *r) {
  aa__http_resp_free(r);
  aa__http_set_static(r, 500, CT_JSON, oom_body, sizeof oom_body - 1);
}

static size_t bounded_len(const char *s, size_t max) {
  size_t n = 0;
  while (n < max && s[n] != '\0')
    n++;
  return n;
}

/* {"error": msg, "path": path[, "code": "AA_..."]}; msg cut at msg_max
 * bytes. */
static void error_doc(aa__http_resp *r, const aa__http_req *req, int status,
                      const char *msg, size_t msg_max, int aa_code) {
  aa__buf b;
  char *body;
  size_t len;
  const char *path = req->path != NULL ? req->path : "";

  aa__http_resp_free(r);
  aa__buf_init(&b);
  aa__buf_puts(&b, "{\"error\":");
  aa__buf_json_str(&b, msg, bounded_len(msg, msg_max));
  aa__buf_puts(&b, ",\"path\":");
  aa__buf_json_str(&b, path, bounded_len(path, 256));
  if (aa_code != 0) {
    aa__buf_puts(&b, ",\"code\":");
    aa__buf_json_str(&b, aa_errname(aa_code), strlen(aa_errname(aa_code)));
  }
  aa__buf_puts(&b, "}\n");
  if (aa__buf_take(&b, &body, &len) != AA_OK) {
    aa__http_set_oom(r);
    r->status = status;
    return;
  }
  aa__http_set_body(r, status, CT_JSON, body, len);
}

void aa__http_error_doc(aa__http_resp *r, const aa__http_req *req, int status,
                        const char *msg, int aa_code) {
  error_doc(r, req, status, msg, 1024, aa_code);
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
  case AA_ECONFLICT:
    return 409;
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

/* A provider error: its message when it gave one, whole (a policy message
 * quotes a number of the body with every digit; the provider's buffer, the
 * body's size + 1 KiB, bounds it), else aa_strerror. */
void aa__http_provider_error(aa__http_resp *r, const aa__http_req *req, int err,
                             const char *what, const char *msg) {
  char text[1200];
  int status = status_of(err);

  if (msg != NULL && msg[0] != '\0') {
    error_doc(r, req, status, msg, SIZE_MAX, err);
    if (err == AA_EBUSY || err == AA_EAGAIN)
      r->retry_after = 1;
    return;
  }
  if (err == AA_ENOTSUP || err == AA_ECLOSED)
    snprintf(text, sizeof text, "%s not available (%s)", what,
             aa_strerror(err));
  else
    snprintf(text, sizeof text, "%s: %s", what, aa_strerror(err));
  aa__http_error_doc(r, req, status, text, err);
  if (err == AA_EBUSY || err == AA_EAGAIN)
    r->retry_after = 1;
}

void aa__http_unavailable(aa__http_resp *r, const aa__http_req *req,
                          const char *what) {
  char text[128];
  snprintf(text, sizeof text, "%s not available in this process", what);
  aa__http_error_doc(r, req, 503, text, AA_ENOTSUP);
}

void aa__http_set_etag(aa__http_resp *r, uint64_t version) {
  snprintf(r->etag, sizeof r->etag, "\"%llu\"", (unsigned long long)version);
}

void aa__http_clear_caches(aa__http_state *st) {
  free(st->stats_cache);
  st->stats_cache = NULL;
  st->stats_cache_len = 0;
  free(st->metrics_cache);
  st->metrics_cache = NULL;
  st->metrics_cache_len = 0;
}

/* Serves body from a cache slot when fresh. */
bool aa__http_cache_hit(const aa__http_state *st, const char *cache,
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
  aa__http_set_body(r, 200, type, copy, len);
  return true;
}

void aa__http_cache_store(const aa__http_state *st, char **slot, size_t *slot_len,
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

/* (moved from router.c: respond.c sits below the router and the
 * endpoints, which both use these) */
bool aa__http_is_get(const char *m) {
  return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
}

void aa__http_resp_free(aa__http_resp *r) {
  if (!r->body_static)
    free(r->body);
  r->body = NULL;
  r->len = 0;
}
