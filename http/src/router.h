/*
 * router.h — what the router's files share (http/src/):
 *   router.c     the request as a whole: state, access checks (token,
 *                loopback Host), the endpoint table, method checks, assets
 *   endpoints.c  one function per endpoint (aa__http_ep_*), query checks
 *   respond.c    responses: bodies, error documents, provider errors, the
 *                ETag, the /stats and /metrics cache
 * Each shared function below sits under the file that defines it.
 */
#ifndef AA_HTTP_ROUTER_H
#define AA_HTTP_ROUTER_H

#include "http_internal.h"

#define CT_JSON "application/json"
#define CT_TEXT "text/plain; charset=utf-8"
#define CT_PROM "text/plain; version=0.0.4; charset=utf-8"

/* endpoints.c: the handlers of the endpoint table; whether an If-None-Match
 * header names etag (also for assets). */
void aa__http_ep_healthz(aa__http_state *st, const aa__http_req *req, aa__http_resp *r);
void aa__http_ep_stats(aa__http_state *st, const aa__http_req *req, aa__http_resp *r);
void aa__http_ep_metrics(aa__http_state *st, const aa__http_req *req, aa__http_resp *r);
void aa__http_ep_policy(aa__http_state *st, const aa__http_req *req, aa__http_resp *r);
void aa__http_ep_history(aa__http_state *st, const aa__http_req *req, aa__http_resp *r);
void aa__http_ep_runs(aa__http_state *st, const aa__http_req *req, aa__http_resp *r);
void aa__http_ep_oom(aa__http_state *st, const aa__http_req *req, aa__http_resp *r);
void aa__http_ep_segments(aa__http_state *st, const aa__http_req *req, aa__http_resp *r);
void aa__http_ep_holders(aa__http_state *st, const aa__http_req *req, aa__http_resp *r);
bool aa__http_if_none_match_hits(const char *h, const char *etag);
/* Whether h (a Host name, port removed) is 127.a.b.c in canonical dotted
 * decimal (router.c). */
bool aa__http_canonical_loopback4(const char *h);

/* respond.c: GET or HEAD; and the rest below */
bool aa__http_is_get(const char *m);
/* Sets a response's body: owned (malloc'd, freed with the response) or
 * static; 500 with a static body for out of memory. */
void aa__http_set_body(aa__http_resp *r, int status, const char *type, char *body, size_t len);
void aa__http_set_static(aa__http_resp *r, int status, const char *type, const char *body,
                         size_t len);
void aa__http_set_oom(aa__http_resp *r);
/* 304 Not Modified with the 200's body (owned or static, as set_body and
 * set_static): the server sends no body with a 304 and says the 200's
 * Content-Length, never 0 (RFC 9110 8.6: a 304 carries the selected
 * representation's length or none). */
void aa__http_set_not_modified(aa__http_resp *r, const char *type, char *body_200, size_t len,
                               bool body_static);
/* An error document {"error": msg, "path": path[, "code": "AA_..."]}. */
void aa__http_error_doc(aa__http_resp *r, const aa__http_req *req, int status, const char *msg,
                        int aa_code);
/* A provider's error as its status and document (its message when it gave
 * one, else aa_strerror); a 503 for a part not in this process. */
void aa__http_provider_error(aa__http_resp *r, const aa__http_req *req, int err, const char *what,
                             const char *msg);
void aa__http_unavailable(aa__http_resp *r, const aa__http_req *req, const char *what);
/* The ETag of a policy version. */
void aa__http_set_etag(aa__http_resp *r, uint64_t version);
/* The /stats and /metrics cache: drop both, serve a fresh slot, store one. */
void aa__http_clear_caches(aa__http_state *st);
bool aa__http_cache_hit(const aa__http_state *st, const char *cache, size_t len, uint64_t at_ns,
                        aa__http_resp *r, const char *type);
void aa__http_cache_store(const aa__http_state *st, char **slot, size_t *slot_len,
                          uint64_t *slot_ns, const char *body, size_t len);

#endif /* AA_HTTP_ROUTER_H */
