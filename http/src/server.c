/*
 * server.c — the server's life cycle: binds the listening socket itself (so
 * that "address in use" is a clear error, never a silent other port), hands
 * it to the intake (intake.c), and starts libmicrohttpd without a thread of
 * its own (external mode, epoll): the intake's thread runs it, with the
 * request callbacks of request.c, which collect each request, let the
 * router answer and send the response.
 * Entry points: aa_http_new, aa_http_destroy, aa_http_port.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_internal.h"

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
      /* node_exporter is named only for its port, 9100 */
      snprintf(what, sizeof what,
               "address already in use (another process listens on port %u%s). "
               "Set ADAPTALLOC_HTTP to another port, port 0 for any free one, or off",
               (unsigned)a->port, a->port == 9100 ? "; 9100 is also node_exporter's default" : "");
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
  /* no thread, no listening socket: the intake's thread calls MHD_run when
   * libmicrohttpd's epoll set (watched by the intake's) has events */
  flags = MHD_USE_NO_LISTEN_SOCKET | MHD_USE_EPOLL | MHD_USE_TURBO;
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
      flags, 0, NULL, NULL, aa__http_on_request, srv, MHD_OPTION_CONNECTION_LIMIT,
      c.max_connections * 2 + 16, MHD_OPTION_CONNECTION_TIMEOUT,
      (c.timeout_s > 0 ? c.timeout_s : 10u) + 2u,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool_mem,
      MHD_OPTION_NOTIFY_COMPLETED, aa__http_on_completed, srv,
      MHD_OPTION_NOTIFY_CONNECTION, aa__http_on_connection, srv,
      MHD_OPTION_UNESCAPE_CALLBACK, aa__http_unescape, NULL,
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
