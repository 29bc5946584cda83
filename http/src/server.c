/*
 * server.c — the libmicrohttpd glue: binds the listening socket itself (so
 * that "address in use" is a clear error, never a silent other port), starts
 * the daemon on its internal polling thread (epoll, else poll; never
 * select), collects each request (headers, query, a bounded body) into an
 * aa__http_req, lets the router answer, and sends the response.
 * Entry points: aa_http_new, aa_http_destroy, aa_http_port.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_internal.h"
#include "intake.h"

#if MHD_VERSION < 0x00097002
typedef int aa__mhd_result;
#else
typedef enum MHD_Result aa__mhd_result;
#endif

struct aa_http {
  aa__http_state st;
  aa__intake *intake; /* the front door: owns the listening socket */
  struct MHD_Daemon *daemon;
  int port;
  char bound[64];
};

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

/* ------------------------------------------------------------ requests */

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
  buf[0] = '\0';
  if (ci == NULL || ci->client_addr == NULL)
    return buf;
  if (ci->client_addr->sa_family == AF_INET) {
    const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)
                                      ci->client_addr;
    inet_ntop(AF_INET, &a->sin_addr, buf, (socklen_t)cap);
  } else if (ci->client_addr->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)(const void *)
                                       ci->client_addr;
    inet_ntop(AF_INET6, &a->sin6_addr, buf, (socklen_t)cap);
  }
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

static aa__mhd_result on_request(void *cls, struct MHD_Connection *c,
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
static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
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

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
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

static void on_connection(void *cls, struct MHD_Connection *c,
                          void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  aa_http *srv = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED)
    aa__intake_conn_started(srv->intake, c, socket_context);
  else
    aa__intake_conn_closed(srv->intake, socket_context);
}

/* ------------------------------------------------------------ socket */

static void fmt_err(char *err, size_t errcap, const char *spec,
                    const char *what) {
  if (err != NULL && errcap > 0)
    snprintf(err, errcap, "ADAPTALLOC_HTTP=%.80s: %s", spec, what);
}

/* Creates, binds and listens. Returns the fd or a negative aa_err. */
static int bind_listen(const aa_http_addr *a, const char *spec, int *port,
                       char *err, size_t errcap) {
  struct sockaddr_storage ss;
  socklen_t sl;
  int fd;
  int one = 1;
  int rc;
  char what[256];

  memset(&ss, 0, sizeof ss);
  if (a->ipv6) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    s6->sin6_family = AF_INET6;
    s6->sin6_port = htons(a->port);
    inet_pton(AF_INET6, a->host, &s6->sin6_addr);
    sl = sizeof *s6;
  } else {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons(a->port);
    inet_pton(AF_INET, a->host, &s4->sin_addr);
    sl = sizeof *s4;
  }
  fd = socket(a->ipv6 ? AF_INET6 : AF_INET,
              SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(what, sizeof what, "socket: %s", strerror(errno));
    fmt_err(err, errcap, spec, what);
    return AA_EIO;
  }
  /* SO_REUSEADDR lets a restarted process bind while old connections sit in
   * TIME_WAIT; on Linux it never lets two processes listen on one port */
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (a->ipv6)
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&ss, sl) != 0) {
    int e = errno;
    if (e == EADDRINUSE) {
      snprintf(what, sizeof what,
               "address already in use (another process listens on port %u; "
               "9100 is also node_exporter's default). Set ADAPTALLOC_HTTP to "
               "another port, port 0 for any free one, or off",
               (unsigned)a->port);
      rc = AA_EBUSY;
    } else if (e == EACCES) {
      snprintf(what, sizeof what,
               "permission denied binding port %u (ports below 1024 need "
               "privileges)",
               (unsigned)a->port);
      rc = AA_EPERM;
    } else if (e == EADDRNOTAVAIL) {
      snprintf(what, sizeof what, "address %s is not on this host", a->host);
      rc = AA_EINVAL;
    } else {
      snprintf(what, sizeof what, "bind: %s", strerror(e));
      rc = AA_EIO;
    }
    fmt_err(err, errcap, spec, what);
    close(fd);
    return rc;
  }
  if (listen(fd, 64) != 0) {
    snprintf(what, sizeof what, "listen: %s", strerror(errno));
    fmt_err(err, errcap, spec, what);
    close(fd);
    return AA_EIO;
  }
  sl = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
    snprintf(what, sizeof what, "getsockname: %s", strerror(errno));
    fmt_err(err, errcap, spec, what);
    close(fd);
    return AA_EIO;
  }
  *port = ss.ss_family == AF_INET6
              ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
              : ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return fd;
}

/* ------------------------------------------------------------ lifecycle */

int aa_http_new(const aa_http_config *cfg, const aa_http_provider *prov,
                aa_http **out, char *err, size_t errcap) {
  aa_http_config c;
  aa_http_addr addr;
  aa_http *srv = NULL;
  const char *spec;
  char perr[256];
  int fd = -1;
  int rc;
  unsigned flags;
  size_t pool_mem;

  if (out != NULL)
    *out = NULL;
  if (err != NULL && errcap > 0)
    err[0] = '\0';
  if (out == NULL || prov == NULL) {
    if (err != NULL && errcap > 0)
      snprintf(err, errcap, "aa_http_new: NULL argument");
    rc = AA_EINVAL;
    goto fail;
  }
  if (cfg != NULL) {
    c = *cfg;
  } else {
    aa_http_config_init(&c);
  }
  if (c.version != AA_HTTP_CONFIG_VERSION || prov->version != AA_HTTP_PROVIDER_VERSION) {
    if (err != NULL && errcap > 0)
      snprintf(err, errcap, "aa_http_new: config or provider version mismatch");
    rc = AA_EINVAL;
    goto fail;
  }
  if (c.max_body == 0 || c.max_header < 1024 || c.max_connections == 0) {
    if (err != NULL && errcap > 0)
      snprintf(err, errcap,
               "aa_http_new: max_body, max_connections must be > 0 and "
               "max_header >= 1024");
    rc = AA_EINVAL;
    goto fail;
  }
  spec = c.address != NULL ? c.address : "127.0.0.1:9100";
  rc = aa_http_parse_address(spec, c.local_rank, &addr, perr, sizeof perr);
  if (rc != AA_OK) {
    fmt_err(err, errcap, spec, perr);
    goto fail;
  }
  if (addr.off) {
    fmt_err(err, errcap, spec, "the server is off");
    rc = AA_ENOENT;
    goto fail;
  }
  if (!addr.loopback && (c.token == NULL || c.token[0] == '\0')) {
    fmt_err(err, errcap, spec,
            "refusing to listen on a non-loopback address without "
            "ADAPTALLOC_TOKEN (anyone who can reach it could change the "
            "policy); set a token or listen on 127.0.0.1");
    rc = AA_EPERM;
    goto fail;
  }

  srv = calloc(1, sizeof *srv);
  if (srv == NULL) {
    rc = AA_ENOMEM;
    fmt_err(err, errcap, spec, "out of memory");
    goto fail;
  }
  rc = aa__http_state_init(&srv->st, &c, prov);
  if (rc != AA_OK) {
    fmt_err(err, errcap, spec, "out of memory");
    goto fail_srv;
  }
  fd = bind_listen(&addr, spec, &srv->port, err, errcap);
  if (fd < 0) {
    rc = fd;
    goto fail_state;
  }
  srv->st.port = srv->port;
  if (addr.ipv6)
    snprintf(srv->bound, sizeof srv->bound, "[%s]:%d", addr.host, srv->port);
  else
    snprintf(srv->bound, sizeof srv->bound, "%s:%d", addr.host, srv->port);

  /* the intake thread owns the listening socket and hands libmicrohttpd
   * each connection whose first head passed the strict check */
  rc = aa__intake_new(&srv->st, &c, fd, &srv->intake);
  fd = -1; /* the intake owns it now, even on failure */
  if (rc != AA_OK) {
    fmt_err(err, errcap, spec, "cannot start the connection intake");
    goto fail_state;
  }
  flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_NO_LISTEN_SOCKET |
          MHD_USE_ITC;
  if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES)
    flags |= MHD_USE_EPOLL | MHD_USE_TURBO;
  else
    flags |= MHD_USE_POLL;
  /* libmicrohttpd's memory for one connection holds the head as read
   * (max_header), a copy of a Cookie value (at most max_header), a record
   * for each header field, Cookie pair and query argument, and the answer's
   * head: any head the intake accepts fits, so libmicrohttpd never answers
   * "too big" itself (in HTML) */
  pool_mem = 2 * (size_t)(c.max_header < 4096 ? 4096 : c.max_header) +
             (AA__HTTP_MAX_FIELDS + AA__HTTP_MAX_ARGS) * 128 + 8192;
  /* the limits per client and in all are the intake's; libmicrohttpd's own
   * limit only has to hold connections that are being shut down too. The
   * deadlines are the intake's as well (it answers a head that came too
   * slowly with 408): libmicrohttpd's timeout is only a backstop */
  srv->daemon = MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, srv, MHD_OPTION_CONNECTION_LIMIT,
      c.max_connections * 2 + 16, MHD_OPTION_CONNECTION_TIMEOUT,
      (c.timeout_s > 0 ? c.timeout_s : 10u) + 2u,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool_mem,
      MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
      MHD_OPTION_NOTIFY_CONNECTION, on_connection, srv,
      MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
      MHD_OPTION_STRICT_FOR_CLIENT, 1, MHD_OPTION_END);
  if (srv->daemon == NULL) {
    fmt_err(err, errcap, spec, "libmicrohttpd failed to start");
    rc = AA_EIO;
    goto fail_state;
  }
  rc = aa__intake_start(srv->intake, srv->daemon);
  if (rc != AA_OK) {
    fmt_err(err, errcap, spec, "cannot start the connection intake thread");
    MHD_stop_daemon(srv->daemon);
    srv->daemon = NULL;
    goto fail_state;
  }
  *out = srv;
  return AA_OK;

fail_state:
  aa__intake_free(srv->intake);
  aa__http_state_fini(&srv->st);
fail_srv:
  free(srv);
fail:
  return rc;
}

void aa_http_destroy(aa_http *srv) {
  if (srv == NULL)
    return;
  aa__intake_stop(srv->intake); /* no new connections; closes its own */
  if (srv->daemon != NULL)
    MHD_stop_daemon(srv->daemon); /* joins its thread, closes its sockets */
  aa__intake_free(srv->intake);
  aa__http_state_fini(&srv->st);
  free(srv);
}

int aa_http_port(const aa_http *srv) { return srv != NULL ? srv->port : 0; }

const char *aa_http_bound_address(const aa_http *srv) {
  return srv != NULL ? srv->bound : "";
}

void aa_http_get_counters(const aa_http *srv, aa_http_counters *out) {
  memset(out, 0, sizeof *out);
  if (srv == NULL)
    return;
  out->requests = atomic_load(&srv->st.requests);
  out->status_2xx = atomic_load(&srv->st.status_2xx);
  out->status_3xx = atomic_load(&srv->st.status_3xx);
  out->status_4xx = atomic_load(&srv->st.status_4xx);
  out->status_5xx = atomic_load(&srv->st.status_5xx);
  out->policy_changes = atomic_load(&srv->st.policy_changes);
}
