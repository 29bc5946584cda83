/*
 * addr.c — the listen-address parser (the ADAPTALLOC_HTTP grammar), the
 * LOCAL_RANK reader, the strict integer parser used for query arguments and
 * a client's address as text. Entry points: aa_http_parse_address,
 * aa_http_local_rank_from_env, aa__http_parse_i64, aa__http_addr_text. Pure
 * functions apart from the getenv in the second.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_internal.h"

#define RANK_SUFFIX "+rank"

static void set_err(char *err, size_t errcap, const char *spec,
                    const char *what) {
  if (err != NULL && errcap > 0)
    snprintf(err, errcap, "bad address '%.80s': %s", spec, what);
}

int aa__http_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out) {
  const char *p = s;
  bool neg = false;
  uint64_t v = 0;
  uint64_t limit;

  *out = 0;
  if (s == NULL || *s == '\0')
    return AA_EINVAL;
  if (*p == '-') {
    /* no sign where only non-negative values are valid: "-0" is refused
     * like "-5" (and "+5" is refused below like any non-digit) */
    if (min >= 0)
      return AA_EINVAL;
    neg = true;
    p++;
  }
  if (*p == '\0')
    return AA_EINVAL;
  limit = neg ? (uint64_t)INT64_MAX + 1u : (uint64_t)INT64_MAX;
  for (; *p != '\0'; p++) {
    unsigned d;
    if (*p < '0' || *p > '9')
      return AA_EINVAL;
    d = (unsigned)(*p - '0');
    if (v > (limit - d) / 10u)
      return AA_ERANGE;
    v = v * 10u + d;
  }
  if (neg) {
    int64_t sv = v == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)v;
    if (sv < min || sv > max)
      return AA_ERANGE;
    *out = sv;
  } else {
    if ((int64_t)v < min || (int64_t)v > max)
      return AA_ERANGE;
    *out = (int64_t)v;
  }
  return AA_OK;
}

static bool parse_port(const char *s, size_t n, uint16_t *out) {
  unsigned v = 0;
  size_t i;

  if (n == 0 || n > 5)
    return false;
  for (i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10u + (unsigned)(s[i] - '0');
  }
  if (v > 65535u)
    return false;
  *out = (uint16_t)v;
  return true;
}

static bool ipv4_loopback(const struct in_addr *a) {
  return (ntohl(a->s_addr) >> 24) == 127u;
}

int aa_http_parse_address(const char *spec, int local_rank, aa_http_addr *out,
                          char *err, size_t errcap) {
  aa_http_addr a;
  char work[128];
  size_t n;
  const char *host;
  size_t host_len;
  const char *port;
  size_t port_len;
  char hostbuf[64];
  int rc = AA_EINVAL;

  memset(&a, 0, sizeof a);
  if (out != NULL)
    memset(out, 0, sizeof *out);
  if (err != NULL && errcap > 0)
    err[0] = '\0';
  if (spec == NULL || out == NULL) {
    if (err != NULL && errcap > 0)
      snprintf(err, errcap, "bad address: NULL");
    goto done;
  }
  if (strcasecmp(spec, "off") == 0) {
    a.off = true;
    rc = AA_OK;
    goto done;
  }
  n = strlen(spec);
  if (n == 0) {
    set_err(err, errcap, spec, "empty (use 'off' to disable the server)");
    goto done;
  }
  if (n >= sizeof work) {
    set_err(err, errcap, spec, "too long");
    goto done;
  }
  memcpy(work, spec, n + 1);
  if (n > strlen(RANK_SUFFIX) &&
      strcasecmp(work + n - strlen(RANK_SUFFIX), RANK_SUFFIX) == 0) {
    a.plus_rank = true;
    n -= strlen(RANK_SUFFIX);
    work[n] = '\0';
  }
  if (strchr(work, '+') != NULL) {
    set_err(err, errcap, spec, "only '+rank' may follow the port");
    goto done;
  }

  if (work[0] == '[') {
    char *close = strchr(work, ']');
    if (close == NULL) {
      set_err(err, errcap, spec, "missing ']' after the IPv6 address");
      goto done;
    }
    host = work + 1;
    host_len = (size_t)(close - host);
    if (close[1] != ':') {
      set_err(err, errcap, spec, "missing ':port' after ']'");
      goto done;
    }
    port = close + 2;
    port_len = strlen(port);
    a.ipv6 = true;
  } else {
    char *colon = strrchr(work, ':');
    if (colon == NULL) {
      host = "";
      host_len = 0;
      port = work;
      port_len = n;
    } else {
      if (memchr(work, ':', (size_t)(colon - work)) != NULL) {
        set_err(err, errcap, spec,
                "an IPv6 address needs brackets, as in [::1]:9100");
        goto done;
      }
      host = work;
      host_len = (size_t)(colon - work);
      port = colon + 1;
      port_len = strlen(port);
    }
  }
  if (!parse_port(port, port_len, &a.port)) {
    set_err(err, errcap, spec, "the port must be a number from 0 to 65535");
    goto done;
  }
  if (host_len >= sizeof hostbuf) {
    set_err(err, errcap, spec, "host too long");
    goto done;
  }
  memcpy(hostbuf, host, host_len);
  hostbuf[host_len] = '\0';

  if (a.ipv6) {
    struct in6_addr in6;
    if (inet_pton(AF_INET6, hostbuf, &in6) != 1) {
      set_err(err, errcap, spec, "not an IPv6 address literal");
      goto done;
    }
    if (inet_ntop(AF_INET6, &in6, a.host, sizeof a.host) == NULL) {
      set_err(err, errcap, spec, "not an IPv6 address literal");
      goto done;
    }
    if (IN6_IS_ADDR_LOOPBACK(&in6)) {
      a.loopback = true;
    } else if (IN6_IS_ADDR_V4MAPPED(&in6)) {
      struct in_addr v4;
      memcpy(&v4.s_addr, &in6.s6_addr[12], 4);
      a.loopback = ipv4_loopback(&v4);
    }
  } else {
    struct in_addr in4;
    if (hostbuf[0] == '\0' || strcasecmp(hostbuf, "localhost") == 0)
      snprintf(hostbuf, sizeof hostbuf, "127.0.0.1");
    if (inet_pton(AF_INET, hostbuf, &in4) != 1) {
      set_err(err, errcap, spec,
              "the host must be an IPv4 literal, [IPv6] or localhost");
      goto done;
    }
    if (inet_ntop(AF_INET, &in4, a.host, sizeof a.host) == NULL) {
      set_err(err, errcap, spec, "bad IPv4 address");
      goto done;
    }
    a.loopback = ipv4_loopback(&in4);
  }

  if (a.plus_rank && a.port != 0) {
    int rank = local_rank < 0 ? 0 : local_rank;
    if (rank > 65535 || (unsigned)a.port + (unsigned)rank > 65535u) {
      char what[96];
      snprintf(what, sizeof what, "port %u + rank %d is above 65535",
               (unsigned)a.port, rank);
      set_err(err, errcap, spec, what);
      goto done;
    }
    a.port = (uint16_t)(a.port + rank);
  }
  rc = AA_OK;

done:
  if (rc == AA_OK && out != NULL)
    *out = a;
  return rc;
}

int aa_http_local_rank_from_env(int *rank) {
  const char *s = getenv("LOCAL_RANK");
  int64_t v;

  *rank = -1;
  if (s == NULL || *s == '\0')
    return AA_OK;
  if (aa__http_parse_i64(s, 0, 65535, &v) != AA_OK)
    return AA_EINVAL;
  *rank = (int)v;
  return AA_OK;
}

void aa__http_addr_text(const struct sockaddr *sa, char *out, size_t cap) {
  out[0] = '\0';
  if (sa == NULL)
    return;
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr,
              out, (socklen_t)cap);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6,
              &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, out,
              (socklen_t)cap);
}
