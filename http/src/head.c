/*
 * head.c — the strict check of a request's head (request line and header
 * lines) on its raw bytes, before libmicrohttpd parses it. libmicrohttpd
 * hands header values to the handler as C strings (a NUL cuts them short),
 * tolerates "X-A : 1", answers some errors with HTML and waits on framings
 * it does not support; this check refuses all of those with a status and a
 * reason that the server sends as a JSON error document.
 * Entry points: aa__http_head_check, aa__http_host_split,
 * aa__http_chunk_line. No I/O, no allocation: the fuzzer drives it directly.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "http_internal.h"

/* RFC 9110 5.6.2 tchar */
static bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
    return true;
  return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* Refusal: fills the verdict and returns 1 (the head is decided). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static int
refuse(aa__http_head *h, int status, const char *fmt, ...) {
  va_list ap;
  h->status = status;
  va_start(ap, fmt);
  vsnprintf(h->why, sizeof h->why, fmt, ap);
  va_end(ap);
  return 1;
}

bool aa__http_host_split(const char *host, size_t len, char *name,
                         size_t cap) {
  size_t i = 0, end;
  if (cap == 0)
    return false;
  name[0] = '\0';
  if (len == 0)
    return false;
  if (host[0] == '[') {
    const char *rb = memchr(host, ']', len);
    if (rb == NULL)
      return false;
    end = (size_t)(rb - host);
    for (i = 1; i < end; i++) {
      unsigned char c = (unsigned char)host[i];
      if (!(is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
            c == ':' || c == '.'))
        return false;
    }
    if (end - 1 >= cap || end == 1)
      return false;
    memcpy(name, host + 1, end - 1);
    name[end - 1] = '\0';
    i = end + 1; /* after ']': nothing, or ":port" */
  } else {
    for (i = 0; i < len && host[i] != ':'; i++) {
      unsigned char c = (unsigned char)host[i];
      if (!(is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            c == '-' || c == '.' || c == '_'))
        return false;
    }
    if (i == 0 || i >= cap)
      return false;
    memcpy(name, host, i);
    name[i] = '\0';
  }
  if (i == len)
    return true;
  if (host[i] != ':')
    return false; /* "[::1]evil.example" */
  i++;
  if (i == len || len - i > 5)
    return false;
  for (; i < len; i++)
    if (!is_digit((unsigned char)host[i]))
      return false;
  return true;
}

/* The value of a header line without the optional white space around it. */
static void trim(const char **v, size_t *n) {
  while (*n > 0 && (**v == ' ' || **v == '\t')) {
    (*v)++;
    (*n)--;
  }
  while (*n > 0 && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t'))
    (*n)--;
}

/* Next line [p, *eol) ending in LF (CR before it dropped). NULL: no LF yet. */
static const char *line_end(const char *p, const char *end, size_t *len) {
  const char *lf = memchr(p, '\n', (size_t)(end - p));
  if (lf == NULL)
    return NULL;
  *len = (size_t)(lf - p);
  if (*len > 0 && p[*len - 1] == '\r')
    (*len)--;
  return lf + 1;
}

static int request_line(const char *p, size_t n, const aa__http_head_limits *lim,
                        aa__http_head *h) {
  size_t i = 0, m, t0, tn, k, args;
  const char *ver;

  for (i = 0; i < n && is_tchar((unsigned char)p[i]); i++)
    ;
  m = i;
  if (m == 0 || m > 32 || i >= n || p[i] != ' ')
    return refuse(h, 400, "malformed request line (method)");
  i++;
  t0 = i;
  for (; i < n && p[i] != ' '; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '\0')
      return refuse(h, 400, "a NUL byte in the request target");
    if (c < 0x21 || c > 0x7e)
      return refuse(h, 400,
                    "a byte that is not allowed in the request target "
                    "(control, non-ASCII or a bare CR)");
  }
  tn = i - t0;
  if (tn > lim->max_target)
    return refuse(h, 414, "the request target is over the limit of %zu bytes",
                  lim->max_target);
  {
    size_t q = 0;
    while (q < tn && q < sizeof h->path - 1 && p[t0 + q] != '?') {
      h->path[q] = p[t0 + q];
      q++;
    }
    h->path[q] = '\0';
  }
  if (tn == 0 || (p[t0] != '/' && !(tn == 1 && p[t0] == '*')))
    return refuse(h, 400, "the request target must be a path such as /stats");
  {
    const char *qm = memchr(p + t0, '?', tn);
    args = 0;
    if (qm != NULL) {
      args = 1;
      for (k = (size_t)(qm - p) + 1; k < t0 + tn; k++)
        if (p[k] == '&')
          args++;
    }
    if (args > lim->max_args)
      return refuse(h, 400, "too many query parameters (at most %u)",
                    lim->max_args);
  }
  if (i >= n || p[i] != ' ')
    return refuse(h, 400, "malformed request line (no HTTP version)");
  ver = p + i + 1;
  if (n - (size_t)(ver - p) != 8 || memcmp(ver, "HTTP/", 5) != 0 ||
      !is_digit((unsigned char)ver[5]) || ver[6] != '.' ||
      !is_digit((unsigned char)ver[7]))
    return refuse(h, 400, "malformed request line (HTTP version)");
  if (ver[5] != '1' || (ver[7] != '0' && ver[7] != '1')) {
    char v[9];
    memcpy(v, ver, 8);
    v[8] = '\0';
    h->status = 505;
    snprintf(h->why, sizeof h->why,
             "%s is not supported: this server speaks HTTP/1.1 (and 1.0)", v);
    return 1;
  }
  h->http10 = ver[7] == '0';
  return 0;
}

/* A request line still arriving that can already never be valid: a method
 * byte that is no token character, a method over 32 bytes, a NUL or control
 * byte in the target. */
static bool partial_line_bad(const char *p, size_t n, aa__http_head *h) {
  size_t i = 0;
  while (i < n && is_tchar((unsigned char)p[i]))
    i++;
  if (i > 32 || (i < n && p[i] != ' ') || (i == 0 && n > 0)) {
    refuse(h, 400, "malformed request line (method)");
    return true;
  }
  for (i++; i < n && p[i] != ' '; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '\0') {
      refuse(h, 400, "a NUL byte in the request target");
      return true;
    }
    if (c != '\r' && (c < 0x21 || c > 0x7e)) {
      refuse(h, 400, "a byte that is not allowed in the request target "
                     "(control, non-ASCII or a bare CR)");
      return true;
    }
  }
  return false;
}

int aa__http_head_check(const char *buf, size_t len,
                        const aa__http_head_limits *lim, aa__http_head *h) {
  const char *p = buf, *end = buf + len, *next;
  size_t n;
  unsigned hosts = 0, lengths = 0, encodings = 0, fields = 0;
  const char *host = NULL, *clen = NULL, *te = NULL;
  size_t host_n = 0, clen_n = 0, te_n = 0;
  bool have_line = false;

  memset(h, 0, sizeof *h);
  /* RFC 9112 2.2: empty lines before the request line are ignored */
  while (p < end && (*p == '\r' || *p == '\n')) {
    if (*p == '\r' && (p + 1 >= end || p[1] != '\n'))
      break;
    p += *p == '\r' ? 2 : 1;
  }
  for (;;) {
    next = line_end(p, end, &n);
    if (next == NULL) {
      if (!have_line && partial_line_bad(p, (size_t)(end - p), h))
        return 1; /* e.g. a TLS handshake: no need to wait for a line end */
      if (!have_line && (size_t)(end - p) > lim->max_target + 64)
        return refuse(h, 414, "the request target is over the limit of %zu bytes",
                      lim->max_target);
      if (len >= lim->max_head)
        return refuse(h, 431,
                      "the request line and headers are over the limit of %zu "
                      "bytes",
                      lim->max_head);
      return 0; /* wait for more */
    }
    if (memchr(p, '\r', n) != NULL)
      return refuse(h, 400, "a bare CR in the request head");
    if (!have_line) {
      if (request_line(p, n, lim, h) != 0)
        return 1;
      have_line = true;
      p = next;
      continue;
    }
    if (n == 0) {
      h->len = (size_t)(next - buf);
      break;
    }
    if (p[0] == ' ' || p[0] == '\t')
      return refuse(h, 400,
                    "a header line starts with white space (obsolete line "
                    "folding is not accepted)");
    {
      size_t k = 0;
      char name[48];
      const char *v;
      size_t vn;
      bool trailing_ws;
      while (k < n && is_tchar((unsigned char)p[k]))
        k++;
      if (k == 0)
        return refuse(h, 400, "a header with an empty name");
      if (k == n || p[k] != ':')
        return refuse(h, 400,
                      "a header name with a space or a byte not allowed in a "
                      "name (\"Name: value\", no space before ':')");
      snprintf(name, sizeof name, "%.*s", (int)(k < 40 ? k : 40), p);
      v = p + k + 1;
      vn = n - k - 1;
      for (size_t j = 0; j < vn; j++) {
        unsigned char c = (unsigned char)v[j];
        if (c == '\0')
          return refuse(h, 400, "a NUL byte in the value of header '%s'", name);
        if ((c < 0x20 && c != '\t') || c == 0x7f)
          return refuse(h, 400, "a control byte in the value of header '%s'",
                        name);
      }
      /* libmicrohttpd reads the framing headers' values with the white
       * space after them (Content-Length "7 " is malformed to it, and
       * Transfer-Encoding "chunked " is not chunked): refused, so that
       * both read the same framing */
      trailing_ws = vn > 0 && (v[vn - 1] == ' ' || v[vn - 1] == '\t');
      trim(&v, &vn);
      fields++;
      if (k == 6 && strncasecmp(p, "Cookie", 6) == 0)
        for (size_t j = 0; j < vn; j++)
          fields += v[j] == ';';
      if (fields > lim->max_fields)
        return refuse(h, 431,
                      "more than %u header fields (each Cookie pair counts "
                      "as one)",
                      lim->max_fields);
      if (k == 4 && strncasecmp(p, "Host", 4) == 0) {
        hosts++;
        host = v;
        host_n = vn;
      } else if (k == 14 && strncasecmp(p, "Content-Length", 14) == 0) {
        if (trailing_ws)
          return refuse(h, 400,
                        "white space after the value of Content-Length");
        lengths++;
        clen = v;
        clen_n = vn;
      } else if (k == 17 && strncasecmp(p, "Transfer-Encoding", 17) == 0) {
        if (trailing_ws)
          return refuse(h, 400,
                        "white space after the value of Transfer-Encoding");
        encodings++;
        te = v;
        te_n = vn;
      }
    }
    p = next;
  }
  if (hosts > 1)
    return refuse(h, 400, "more than one Host header");
  if (hosts == 0 && !h->http10)
    return refuse(h, 400, "no Host header (HTTP/1.1 requires one)");
  if (hosts == 1) {
    char name[256];
    if (!aa__http_host_split(host, host_n, name, sizeof name))
      return refuse(h, 400,
                    "malformed Host header (a name or [IPv6 address], then "
                    "at most \":port\")");
  }
  if (lengths > 1)
    return refuse(h, 400, "more than one Content-Length header");
  if (lengths == 1) {
    size_t j;
    for (j = 0; j < clen_n && is_digit((unsigned char)clen[j]); j++)
      ;
    if (clen_n == 0 || j != clen_n || clen_n > 18)
      return refuse(h, 400, "Content-Length is not a decimal number");
    for (j = 0; j < clen_n; j++)
      h->content_length = h->content_length * 10 + (uint64_t)(clen[j] - '0');
  }
  if (encodings > 0) {
    if (lengths > 0)
      return refuse(h, 400,
                    "both Content-Length and Transfer-Encoding (RFC 9112 6.3: "
                    "one framing only)");
    if (h->http10)
      return refuse(h, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (encodings > 1 || te_n != 7 || strncasecmp(te, "chunked", 7) != 0)
      return refuse(h, 400,
                    "Transfer-Encoding: only \"chunked\" alone is accepted");
    h->chunked = true;
  }
  h->status = 0;
  return 1;
}

int aa__http_hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

int aa__http_chunk_line(const char *p, size_t n, uint64_t max_size,
                        uint64_t *size, size_t *len, char *why, size_t cap) {
  size_t i = 0;
  uint64_t v = 0;
  *size = 0;
  *len = 0;
  for (; i < n && aa__http_hexval((unsigned char)p[i]) >= 0; i++) {
    if (i == 16) {
      snprintf(why, cap, "a chunk size of more than 16 hex digits");
      return 413;
    }
    v = v * 16 + (uint64_t)aa__http_hexval((unsigned char)p[i]);
  }
  if (i == n)
    return 0; /* more digits may come */
  if (i == 0) {
    snprintf(why, cap, "malformed chunk size (hex digits expected)");
    return 400;
  }
  if (p[i] == ';') {
    for (; i < n && p[i] != '\r'; i++) {
      unsigned char c = (unsigned char)p[i];
      if ((c < 0x20 && c != '\t') || c == 0x7f) {
        snprintf(why, cap, "a NUL or control byte in a chunk extension");
        return 400;
      }
    }
  }
  if (i == n || (p[i] == '\r' && i + 1 == n))
    return 0;
  if (p[i] != '\r' || p[i + 1] != '\n') {
    snprintf(why, cap,
             "malformed chunk-size line (hex digits, optional ;extensions, "
             "CRLF)");
    return 400;
  }
  if (v > max_size) {
    snprintf(why, cap, "a chunk of %llu bytes (at most %llu)",
             (unsigned long long)v, (unsigned long long)max_size);
    return 413;
  }
  *size = v;
  *len = i + 2;
  return 1;
}
