/*
 * request.c — libmicrohttpd's request callbacks (server.c starts the daemon
 * with them): each request is collected into an aa__http_req (query
 * arguments, the headers that matter without trailing white space, a body
 * bounded by max_body), its head is checked again on libmicrohttpd's parsed
 * view (every request of a kept-alive connection), the router answers, and
 * the answer is sent with the headers every response carries. The path and
 * query are percent-decoded here too, keeping "%00". Entry points:
 * aa__http_on_request, aa__http_on_completed, aa__http_on_connection,
 * aa__http_unescape (server_internal.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "server_internal.h"

/* Per-request state, freed by on_completed. */
typedef struct conn_ctx {
  aa__buf body;
  bool too_large;
  size_t discarded;
  aa__http_req req; /* args collected here */
  /* header values without the white space after them (libmicrohttpd keeps
   * it; RFC 9110 5.5: it is not part of the value) */
  char host[320], authorization[320], if_match[64], if_none_match[64];
} conn_ctx;

static aa__mhd_result collect_arg(void *cls, enum MHD_ValueKind kind,
                                  const char *key, const char *value) {
  aa__http_req *req = cls;
  (void)kind;
  if (req->nargs >= AA__HTTP_MAX_ARGS) {
    req->too_many_args = true;
    return MHD_NO;
  }
  req->args[req->nargs].key = key != NULL ? key : "";
  req->args[req->nargs].value = value;
  req->nargs++;
  return MHD_YES;
}

static void add_header(struct MHD_Response *r, const char *k, const char *v) {
  /* MHD_add_response_header only fails on bad characters or no memory; the
   * values here are ours */
  (void)MHD_add_response_header(r, k, v);
}

static aa__mhd_result send_response(struct MHD_Connection *c,
                                    aa__http_resp *resp) {
  struct MHD_Response *r;
  aa__mhd_result ret;
  char num[16];

  if (resp->body_static) {
    r = MHD_create_response_from_buffer(resp->len, resp->body,
                                        MHD_RESPMEM_PERSISTENT);
  } else {
    r = MHD_create_response_from_buffer(resp->len, resp->body,
                                        MHD_RESPMEM_MUST_FREE);
    if (r != NULL) {
      resp->body = NULL; /* MHD frees it now */
      resp->len = 0;
    }
  }
  if (r == NULL) {
    aa__http_resp_free(resp);
    return MHD_NO;
  }
  if (resp->content_type != NULL)
    add_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, resp->content_type);
  add_header(r, MHD_HTTP_HEADER_CACHE_CONTROL,
             resp->cache_control != NULL ? resp->cache_control : "no-store");
  add_header(r, "X-Content-Type-Options", "nosniff");
  if (resp->etag[0] != '\0')
    add_header(r, MHD_HTTP_HEADER_ETAG, resp->etag);
  if (resp->allow != NULL)
    add_header(r, MHD_HTTP_HEADER_ALLOW, resp->allow);
  if (resp->close)
    add_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  if (resp->www_authenticate)
    add_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
               "Bearer realm=\"adaptalloc\"");
  if (resp->retry_after != 0) {
    snprintf(num, sizeof num, "%u", resp->retry_after);
    add_header(r, MHD_HTTP_HEADER_RETRY_AFTER, num);
  }
  if (resp->is_asset) {
    add_header(r, "Content-Security-Policy",
               "default-src 'self'; script-src 'self'; style-src 'self'; "
               "img-src 'self' data:; connect-src 'self'; "
               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    add_header(r, "Referrer-Policy", "no-referrer");
    add_header(r, "X-Frame-Options", "DENY");
  }
  ret = MHD_queue_response(c, (unsigned)resp->status, r);
  MHD_destroy_response(r);
  aa__http_resp_free(resp);
  return ret;
}

static const char *client_address(struct MHD_Connection *c, char *buf,
                                  size_t cap) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  aa__http_addr_text(ci != NULL ? ci->client_addr : NULL, buf, cap);
  return buf;
}

/* v without trailing spaces and tabs: v itself, or a copy in buf (v when it
 * does not fit: such a value is refused on its length anyway). */
static const char *without_ows(const char *v, char *buf, size_t cap) {
  size_t n;
  if (v == NULL)
    return NULL;
  n = strlen(v);
  if (n == 0 || (v[n - 1] != ' ' && v[n - 1] != '\t'))
    return v;
  while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
    n--;
  if (n >= cap)
    return v;
  memcpy(buf, v, n);
  buf[n] = '\0';
  return buf;
}

static void fill_request(struct MHD_Connection *c, conn_ctx *ctx,
                         const char *url, const char *method) {
  aa__http_req *req = &ctx->req;
  req->method = method;
  req->path = url;
  req->authorization = without_ows(
      MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"),
      ctx->authorization, sizeof ctx->authorization);
  req->if_match = without_ows(
      MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-Match"),
      ctx->if_match, sizeof ctx->if_match);
  req->if_none_match = without_ows(
      MHD_lookup_connection_value(c, MHD_HEADER_KIND, "If-None-Match"),
      ctx->if_none_match, sizeof ctx->if_none_match);
  req->host =
      without_ows(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host"),
                  ctx->host, sizeof ctx->host);
  req->body = ctx->body.data;
  req->body_len = ctx->body.len;
  req->body_too_large = ctx->too_large;
}

static aa__mhd_result answer(aa_http *srv, struct MHD_Connection *c,
                             conn_ctx *ctx, const char *url,
                             const char *method) {
  aa__http_resp resp;
  char client[64];

  fill_request(c, ctx, url, method);
  ctx->req.client = client_address(c, client, sizeof client);
  aa__http_route(&srv->st, &ctx->req, &resp);
  /* a refused framing or head: the rest of the connection cannot be
   * trusted, close it after the answer */
  if (ctx->req.bad_head != NULL || ctx->too_large ||
      aa__intake_must_close(srv->intake, c))
    resp.close = true;
  return send_response(c, &resp);
}

/* What libmicrohttpd's parsed view of a head shows. The first request on a
 * connection was checked on its raw bytes (intake.c, head.c); this check
 * applies the rules it can see to every request, kept-alive ones included. */
typedef struct head_view {
  unsigned hosts, lengths, encodings;
  bool nul;      /* a value with a NUL inside (libmicrohttpd would cut it) */
  bool bad_name; /* an empty name or one with a space or control byte */
  bool bad_host;
  bool bad_te; /* Transfer-Encoding other than "chunked" alone */
} head_view;

static aa__mhd_result view_header(void *cls, enum MHD_ValueKind kind,
                                  const char *key, size_t key_size,
                                  const char *value, size_t value_size) {
  head_view *v = cls;
  (void)kind;
  if (key == NULL || key_size == 0 || strlen(key) != key_size) {
    v->bad_name = true;
    return MHD_YES;
  }
  for (size_t i = 0; i < key_size; i++)
    if ((unsigned char)key[i] <= 0x20 || (unsigned char)key[i] == 0x7f)
      v->bad_name = true;
  if (value != NULL && strlen(value) != value_size)
    v->nul = true;
  while (value != NULL && value_size > 0 &&
         (value[value_size - 1] == ' ' || value[value_size - 1] == '\t'))
    value_size--; /* white space after a value is not part of it */
  if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) {
    char name[256];
    v->hosts++;
    if (value == NULL ||
        !aa__http_host_split(value, value_size, name, sizeof name))
      v->bad_host = true;
  } else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
    v->lengths++;
  } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
    v->encodings++;
    if (value == NULL || value_size != 7 ||
        strncasecmp(value, "chunked", 7) != 0)
      v->bad_te = true;
  }
  return MHD_YES;
}

/* The reason to refuse the head, or NULL. */
static const char *check_view(struct MHD_Connection *c, const char *version) {
  head_view v;
  memset(&v, 0, sizeof v);
  MHD_get_connection_values_n(c, MHD_HEADER_KIND, view_header, &v);
  if (v.nul)
    return "a NUL byte in a header value";
  if (v.bad_name)
    return "a header name with a space or a byte not allowed in a name";
  if (v.hosts > 1)
    return "more than one Host header";
  if (v.hosts == 0 && version != NULL &&
      strcmp(version, MHD_HTTP_VERSION_1_1) == 0)
    return "no Host header (HTTP/1.1 requires one)";
  if (v.bad_host)
    return "malformed Host header (a name or [IPv6 address], then at most "
           "\":port\")";
  if (v.lengths > 1)
    return "more than one Content-Length header";
  if (v.encodings > 0 && v.lengths > 0)
    return "both Content-Length and Transfer-Encoding (RFC 9112 6.3: one "
           "framing only)";
  if (v.encodings > 1 || v.bad_te)
    return "Transfer-Encoding: only \"chunked\" alone is accepted";
  return NULL;
}

aa__mhd_result aa__http_on_request(void *cls, struct MHD_Connection *c,
                                   const char *url, const char *method,
                                   const char *version, const char *upload_data,
                                   size_t *upload_data_size, void **req_cls) {
  aa_http *srv = cls;
  conn_ctx *ctx = *req_cls;

  if (ctx == NULL) {
    const char *cl;
    const char *bad;
    ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
      return MHD_NO;
    aa__buf_init(&ctx->body);
    *req_cls = ctx;
    aa__intake_request_begun(srv->intake, c);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_arg,
                              &ctx->req);
    bad = check_view(c, version);
    if (bad != NULL) {
      /* answered before any body is read; the connection is closed */
      ctx->req.bad_head = bad;
      return answer(srv, c, ctx, url, method);
    }
    cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL) {
      int64_t v;
      if (aa__http_parse_i64(cl, 0, INT64_MAX, &v) != AA_OK ||
          (uint64_t)v > srv->st.cfg.max_body) {
        /* answer before the body is read (no 100 Continue is sent); MHD
         * closes the connection after the response */
        ctx->too_large = true;
        return answer(srv, c, ctx, url, method);
      }
    }
    return MHD_YES;
  }
  if (*upload_data_size != 0) {
    size_t n = *upload_data_size;
    if (!ctx->too_large && ctx->body.len + n > srv->st.cfg.max_body) {
      ctx->too_large = true;
      aa__buf_free(&ctx->body);
    }
    if (ctx->too_large) {
      /* chunked body over the limit: drop what comes, answer 413 at the
       * end, give up on clients that keep sending far beyond it */
      ctx->discarded += n;
      if (ctx->discarded > 4 * srv->st.cfg.max_body + 65536)
        return MHD_NO;
    } else {
      aa__buf_append(&ctx->body, upload_data, n);
      if (ctx->body.failed)
        return MHD_NO;
    }
    *upload_data_size = 0;
    return MHD_YES;
  }
  return answer(srv, c, ctx, url, method);
}

/* Percent-decoding of the path and the query (in place). Unlike MHD's own,
 * "%00" stays as the three characters: a NUL must not cut a path short
 * ("/static/app.js%00.html" is not "/static/app.js"). Malformed escapes stay
 * as they are. */
size_t aa__http_unescape(void *cls, struct MHD_Connection *c, char *s) {
  char *w = s;
  const char *r = s;
  (void)cls;
  (void)c;
  while (*r != '\0') {
    int hi = r[0] == '%' ? aa__http_hexval((unsigned char)r[1]) : -1;
    int lo = hi >= 0 ? aa__http_hexval((unsigned char)r[2]) : -1;
    if (hi >= 0 && lo >= 0 && (hi | lo) != 0) {
      *w++ = (char)(hi * 16 + lo);
      r += 3;
    } else {
      *w++ = *r++;
    }
  }
  *w = '\0';
  return (size_t)(w - s);
}

void aa__http_on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                           enum MHD_RequestTerminationCode toe) {
  aa_http *srv = cls;
  conn_ctx *ctx = *req_cls;
  (void)toe;
  aa__intake_request_done(srv->intake, c);
  if (ctx == NULL)
    return;
  aa__buf_free(&ctx->body);
  free(ctx);
  *req_cls = NULL;
}

void aa__http_on_connection(void *cls, struct MHD_Connection *c,
                            void **socket_context,
                            enum MHD_ConnectionNotificationCode code) {
  aa_http *srv = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED)
    aa__intake_conn_started(srv->intake, c, socket_context);
  else
    aa__intake_conn_closed(srv->intake, socket_context);
}
