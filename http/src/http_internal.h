/*
 * http_internal.h — what the files of http/ share.
 *
 * Glossary:
 *   server    aa_http: the libmicrohttpd daemon (server.c) around a state.
 *   state     aa__http_state: config, token, provider, counters, the /stats
 *             cache. Usable without any socket (the fuzzer drives it).
 *   request   aa__http_req: method, decoded path, query arguments, the few
 *             headers that matter, the body. Filled by request.c from MHD, or
 *             by the fuzzer from bytes.
 *   response  aa__http_resp: status, type, body, the extra headers.
 *   router    aa__http_route (router.c): request -> response, no I/O; its
 *             endpoints are endpoints.c's, its responses respond.c's
 *             (router.h).
 *   buffer    aa__buf: a growable byte string (util/src/strbuf.c).
 *   asset     an embedded web/ file (aa_web_assets.c, generated at configure
 *             time by cmake/AAEmbed.cmake).
 *
 * Layers, bottom first: a file uses what its own layer and the layers below
 * define, never what a higher layer defines (tools/check-layers.sh reads
 * this list and the object files: the ctest test_layers_http). No I/O in
 * the first four; the connection's files above them; the life cycle on top:
 *   layer 0 base:      addr.c head.c holders.c metrics.c segments.c
 *                      __/web/aa_web_assets.c (generated: CMake's name for it)
 *   layer 1 respond:   respond.c
 *   layer 2 endpoints: endpoints.c
 *   layer 3 router:    router.c
 *   layer 4 close:     intake_close.c
 *   layer 5 relay:     relay.c intake_room.c intake_mhd.c
 *   layer 6 intake:    intake.c request.c
 *   layer 7 server:    server.c
 */
#ifndef AA_HTTP_INTERNAL_H
#define AA_HTTP_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/http.h"

#include "adaptalloc/internal/util.h" /* util/: aa__buf, the JSON string writer */

/* ------------------------------------------------------------ assets */

typedef struct aa__web_asset {
  const char *path;         /* "/static/app.js" (index.html is also "/") */
  const char *content_type; /* "text/javascript; charset=utf-8" */
  const char *etag;         /* "\"<16 hex of SHA-256>\"" */
  const unsigned char *data;
  size_t size;
} aa__web_asset;

extern const aa__web_asset aa__web_assets[];
extern const size_t aa__web_asset_count;

/* ------------------------------------------------------------ request */

#define AA__HTTP_MAX_ARGS 16

typedef struct aa__http_arg {
  const char *key;
  const char *value; /* NULL for "?key" without '=' */
} aa__http_arg;

typedef struct aa__http_req {
  const char *method; /* "GET" ... */
  const char *path;   /* decoded, without the query */
  aa__http_arg args[AA__HTTP_MAX_ARGS];
  size_t nargs;
  bool too_many_args;
  const char *authorization; /* header values, NULL when absent */
  const char *if_match;
  const char *if_none_match;
  const char *host;
  const char *body; /* not NUL-terminated */
  size_t body_len;
  bool body_too_large;  /* over the limit: answer 413 */
  bool bad_framing;     /* several Content-Length headers: answer 400 */
  const char *bad_head; /* a head refused on libmicrohttpd's parsed view
                                (static reason): answer 400 */
  const char *client;   /* "127.0.0.1" */
} aa__http_req;

/* ------------------------------------------------------------ head (head.c) */

#define AA__HTTP_PATH_CAP 128 /* a head's path as error documents quote it */

typedef struct aa__http_head_limits {
  size_t max_head;     /* request line + headers, bytes */
  size_t max_target;   /* the request target, bytes */
  unsigned max_args;   /* query parameters */
  unsigned max_fields; /* header lines, each Cookie pair counted as one */
} aa__http_head_limits;

/* Header fields a head may carry (libmicrohttpd keeps a record for each
 * header and each Cookie pair in its per-connection memory). */
#define AA__HTTP_MAX_FIELDS 100

typedef struct aa__http_head {
  int status;                   /* 0: acceptable; else the 4xx/505 to answer */
  char why[200];                /* the reason, for the error document */
  char path[AA__HTTP_PATH_CAP]; /* the target's path (printable ASCII), for the document */
  size_t len;                   /* bytes of the head, the blank line included */
  bool http10;
  bool chunked;            /* Transfer-Encoding: chunked (acceptable heads) */
  uint64_t content_length; /* the body's bytes when Content-Length is given */
} aa__http_head;

/* Checks a request head on its raw bytes (buf, len: what has arrived so
 * far). 0: not complete yet, and nothing wrong so far (len < max_head);
 * 1: decided, h->status 0 (acceptable) or the status to answer with h->why.
 * Refuses: a malformed request line, versions other than HTTP/1.0 and 1.1
 * (505), a target over max_target (414) or with NUL/control bytes, more than
 * max_args query parameters, more than max_fields header fields (431),
 * header lines with an empty name, a space or
 * other non-token byte in the name, white space before ':', obsolete line
 * folding, NUL or control bytes in a value, a bare CR; zero (HTTP/1.1) or
 * several Host headers or a malformed one ("[::1]evil.example"); several
 * Content-Length headers or a non-numeric one; Transfer-Encoding with
 * Content-Length, in HTTP/1.0, or other than "chunked" alone; a head over
 * max_head (431). */
int aa__http_head_check(const char *buf, size_t len,
                        const aa__http_head_limits *lim, aa__http_head *h);

/* The value of a hex digit (either case), -1 for any other byte. */
int aa__http_hexval(int c);

/* A chunk-size line of a chunked body (p, n: what has arrived): 1 to 16
 * hex digits, then optionally ';' and extensions of printable bytes, then
 * CRLF. 0: not complete yet; 1: the chunk's *size and the line's *len (CRLF
 * included); else the status to answer (400 malformed, 413 over max_size)
 * with the reason in why. */
int aa__http_chunk_line(const char *p, size_t n, uint64_t max_size,
                        uint64_t *size, size_t *len, char *why, size_t cap);

/* Splits a Host value (len bytes, not NUL-terminated) into its host name
 * (without brackets for IPv6) in name; false when it is not "name",
 * "name:port", "[v6]" or "[v6]:port" with a port of 1-5 digits. */
bool aa__http_host_split(const char *host, size_t len, char *name, size_t cap);

/* ------------------------------------------------------------ response */

#define AA__HTTP_MAX_HEADERS 6

typedef struct aa__http_resp {
  int status;
  const char *content_type; /* static string */
  char *body;               /* malloc'd unless body_static */
  size_t len;
  bool body_static;          /* body points at constant data */
  char etag[48];             /* "" = none */
  const char *allow;         /* Allow header for 405 (static) */
  bool www_authenticate;     /* 401 */
  unsigned retry_after;      /* seconds, 0 = none */
  const char *cache_control; /* static string, NULL = "no-store" */
  bool is_asset;             /* a dashboard file (gets its CSP header) */
  bool close;                /* Connection: close, then close */
} aa__http_resp;

/* Frees a response's body unless it is static (respond.c). */
void aa__http_resp_free(aa__http_resp *r);

/* ------------------------------------------------------ metrics (metrics.c) */

/* What /metrics remembers between renders so that a per-bucket counter keeps
 * the counts of a class the policy loop retired (metrics.c). One render at a
 * time per carry (the server renders from its one thread, the intake's). */
#define AA__METRICS_CARRY_POOLS 32
typedef struct aa__metrics_carry aa__metrics_carry;
aa__metrics_carry *aa__metrics_carry_new(void); /* NULL: out of memory */
void aa__metrics_carry_free(aa__metrics_carry *c);
/* aa_http_render_metrics with a carry (NULL: none, like the public one). */
int aa__http_render_metrics_carry(const aa_pool_stats *pools, size_t n,
                                  aa__metrics_carry *carry, char **out,
                                  size_t *len);
/* The same with labels[p] (labels may be NULL: none) added to every series
 * of pools[p] (aa_http_labels: names checked, values escaped here). */
int aa__http_render_metrics_labeled(const aa_pool_stats *pools, size_t n,
                                    const aa_http_labels *labels,
                                    aa__metrics_carry *carry, char **out,
                                    size_t *len);

/* ------------------------------------------------- state, router (router.c) */

typedef struct aa__http_state {
  aa_http_config cfg;
  char *token; /* NULL when none; owned */
  size_t token_len;
  aa_http_provider prov;
  int port; /* bound port, for the error text and Host checks */

  /* Cache of the last /stats (no filter) and /metrics answers; touched only
   * from the server's one thread (the intake's). */
  char *stats_cache;
  size_t stats_cache_len;
  uint64_t stats_cache_ns;
  char *metrics_cache;
  size_t metrics_cache_len;
  uint64_t metrics_cache_ns;
  aa__metrics_carry *metrics_carry; /* NULL: counters without the carry */

  _Atomic uint64_t requests;
  _Atomic uint64_t status_2xx;
  _Atomic uint64_t status_3xx;
  _Atomic uint64_t status_4xx;
  _Atomic uint64_t status_5xx;
  _Atomic uint64_t policy_changes;
} aa__http_state;

/* Copies cfg (defaults when NULL) and prov into *st. AA_ENOMEM. */
int aa__http_state_init(aa__http_state *st, const aa_http_config *cfg,
                        const aa_http_provider *prov);
void aa__http_state_fini(aa__http_state *st);

/* Answers one request. Never fails: out of memory gives a 500
 * with a static body. The caller frees resp with aa__http_resp_free. */
void aa__http_route(aa__http_state *st, const aa__http_req *req,
                    aa__http_resp *resp);

/* An error document as the router writes it (counted like any answer), for
 * requests refused before they reach the router. */
void aa__http_error_resp(aa__http_state *st, const char *path, int status,
                         const char *msg, int aa_code, aa__http_resp *resp);

/* Constant-time comparison of a presented token with the expected one; the
 * time depends only on the expected token's length. */
bool aa__http_token_equal(const char *given, size_t given_len,
                          const char *expected, size_t expected_len);

/* ------------------------------------------------------------ addr.c */

/* Parses a decimal int64 in [min, max] (no sign for non-negative ranges, no
 * spaces, no trailing bytes). AA_EINVAL / AA_ERANGE. */
int aa__http_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* An IPv4 or IPv6 address as text in out ("" for another family or NULL).
 * The one writer for the intake's table and the request's client. */
struct sockaddr;
void aa__http_addr_text(const struct sockaddr *sa, char *out, size_t cap);

#endif /* AA_HTTP_INTERNAL_H */
