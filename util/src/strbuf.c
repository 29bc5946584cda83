/*
 * strbuf.c — the one string builder (aa__buf: the server's responses, the
 * runtime's answers) and the one JSON string writer (aa__json_put) that every
 * module writing JSON uses, whatever its buffer. Entry points:
 * aa__buf_append, aa__buf_printf, aa__buf_json_str, aa__buf_take,
 * aa__json_put; and the one escaping rule of log lines (aa__log_escape,
 * aa__log_line), which every module that writes to stderr uses.
 *
 * An allocation failure marks the buffer failed; later appends do nothing and
 * aa__buf_take reports AA_ENOMEM, so callers check once at the end.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/common.h"
#include "adaptalloc/internal/util.h"

void aa__buf_init(aa__buf *b) { memset(b, 0, sizeof *b); }

void aa__buf_free(aa__buf *b) {
  free(b->data);
  aa__buf_init(b);
}

static bool buf_reserve(aa__buf *b, size_t extra) {
  size_t need;
  size_t cap;
  char *p;

  if (b->failed)
    return false;
  if (extra > SIZE_MAX / 2 - b->len) {
    b->failed = true;
    return false;
  }
  need = b->len + extra + 1;
  if (need <= b->cap)
    return true;
  cap = b->cap ? b->cap : 256;
  while (cap < need)
    cap *= 2;
  p = realloc(b->data, cap);
  if (p == NULL) {
    b->failed = true;
    return false;
  }
  b->data = p;
  b->cap = cap;
  return true;
}

bool aa__buf_reserve(aa__buf *b, size_t n) { return buf_reserve(b, n); }

void aa__buf_append(aa__buf *b, const char *s, size_t n) {
  if (!buf_reserve(b, n))
    return;
  if (n > 0)
    memcpy(b->data + b->len, s, n);
  b->len += n;
  b->data[b->len] = '\0';
}

void aa__buf_puts(aa__buf *b, const char *s) { aa__buf_append(b, s, strlen(s)); }

void aa__buf_vprintf(aa__buf *b, const char *fmt, va_list ap) {
  va_list again;
  int n;
  size_t room;

  if (!buf_reserve(b, 64))
    return;
  room = b->cap - b->len;
  va_copy(again, ap);
  n = vsnprintf(b->data + b->len, room, fmt, ap);
  if (n >= 0 && (size_t)n >= room && buf_reserve(b, (size_t)n))
    n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, again);
  va_end(again);
  if (n < 0)
    b->failed = true;
  if (b->failed) {
    if (b->data != NULL)
      b->data[b->len] = '\0';
    return;
  }
  b->len += (size_t)n;
}

void aa__buf_printf(aa__buf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  aa__buf_vprintf(b, fmt, ap);
  va_end(ap);
}

/* Length of a valid UTF-8 sequence starting at s (at most n bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
  size_t len;
  uint32_t cp;
  size_t i;

  if (s[0] < 0x80)
    return 1;
  if (s[0] >= 0xC2 && s[0] <= 0xDF) {
    len = 2;
    cp = s[0] & 0x1Fu;
  } else if (s[0] >= 0xE0 && s[0] <= 0xEF) {
    len = 3;
    cp = s[0] & 0x0Fu;
  } else if (s[0] >= 0xF0 && s[0] <= 0xF4) {
    len = 4;
    cp = s[0] & 0x07u;
  } else {
    return 0;
  }
  if (len > n)
    return 0;
  for (i = 1; i < len; i++) {
    if ((s[i] & 0xC0u) != 0x80u)
      return 0;
    cp = (cp << 6) | (s[i] & 0x3Fu);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
      cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return 0;
  return len;
}

void aa__errf(char *err, size_t errcap, const char *fmt, ...) {
  va_list ap;
  if (err == NULL || errcap == 0)
    return;
  va_start(ap, fmt);
  vsnprintf(err, errcap, fmt, ap);
  va_end(ap);
}

void aa__errcpy(char *err, size_t errcap, const char *msg) {
  size_t n, k;
  if (err == NULL || errcap == 0)
    return;
  n = msg != NULL ? strlen(msg) : 0;
  if (n >= errcap) {
    /* cut before the character that does not fit whole */
    n = errcap - 1;
    k = n;
    while (k > 0 && ((unsigned char)msg[k] & 0xc0) == 0x80)
      k--;
    n = k;
  }
  if (n > 0)
    memcpy(err, msg, n);
  err[n] = '\0';
}

void aa__json_put(aa__put_fn put, void *sink, const char *s, size_t n) {
  const unsigned char *u = (const unsigned char *)s;
  size_t i = 0;
  size_t run;

  put(sink, "\"", 1);
  while (i < n) {
    unsigned char c = u[i];
    size_t k;
    if (c == '"' || c == '\\') {
      put(sink, "\\", 1);
      put(sink, (const char *)&u[i], 1);
      i++;
      continue;
    }
    if (c < 0x20 || c == 0x7F) {
      static const char hex[] = "0123456789abcdef";
      char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      switch (c) {
      case '\n': put(sink, "\\n", 2); break;
      case '\r': put(sink, "\\r", 2); break;
      case '\t': put(sink, "\\t", 2); break;
      default: put(sink, e, 6); break;
      }
      i++;
      continue;
    }
    k = utf8_seq(u + i, n - i);
    if (k == 0) {
      put(sink, "\\ufffd", 6);
      i++;
      continue;
    }
    /* copy a run of plain bytes in one call */
    run = k;
    while (i + run < n) {
      unsigned char d = u[i + run];
      size_t k2;
      if (d == '"' || d == '\\' || d < 0x20 || d == 0x7F)
        break;
      k2 = utf8_seq(u + i + run, n - i - run);
      if (k2 == 0)
        break;
      run += k2;
    }
    put(sink, (const char *)u + i, run);
    i += run;
  }
  put(sink, "\"", 1);
}

static void buf_put(void *sink, const char *s, size_t n) {
  aa__buf_append(sink, s, n);
}

void aa__buf_json_str(aa__buf *b, const char *s, size_t n) {
  aa__json_put(buf_put, b, s, n);
}

void aa__buf_json_cstr(aa__buf *b, const char *s) {
  if (s == NULL)
    aa__buf_append(b, "null", 4);
  else
    aa__buf_json_str(b, s, strlen(s));
}

int aa__buf_take(aa__buf *b, char **out, size_t *len) {
  *out = NULL;
  if (len != NULL)
    *len = 0;
  if (b->failed) {
    aa__buf_free(b);
    return AA_ENOMEM;
  }
  if (b->data == NULL) {
    b->data = malloc(1);
    if (b->data == NULL)
      return AA_ENOMEM;
    b->data[0] = '\0';
  }
  *out = b->data;
  if (len != NULL)
    *len = b->len;
  aa__buf_init(b);
  return AA_OK;
}

/* ------------------------------------------------------------------ log */

size_t aa__log_escape(const char *s, char *out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *u = (const unsigned char *)s;
  size_t n = strlen(s), i = 0, w = 0;

  if (cap == 0)
    return 0;
  while (i < n) {
    char e[16];
    size_t elen = 0, k = utf8_seq(u + i, n - i);
    unsigned char c = u[i];
    /* C1 controls (U+0080..U+009F: CSI is U+009B) act as escapes on some
     * terminals: written as their bytes, like an invalid byte */
    if (k == 2 && c == 0xC2 && u[i + 1] < 0xA0)
      k = 0;
    if (c == '\\') {
      memcpy(e, "\\\\", 2);
      elen = 2;
      k = 1;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      e[0] = '\\';
      e[1] = c == '\n' ? 'n' : c == '\r' ? 'r'
                                         : 't';
      elen = 2;
      k = 1;
    } else if (c < 0x20 || c == 0x7F || k == 0) {
      e[0] = '\\';
      e[1] = 'x';
      e[2] = hex[c >> 4];
      e[3] = hex[c & 15];
      elen = 4;
      k = 1;
    } else {
      memcpy(e, u + i, k);
      elen = k;
    }
    if (w + elen >= cap)
      break; /* never half an escape or half a character */
    memcpy(out + w, e, elen);
    w += elen;
    i += k;
  }
  out[w] = '\0';
  return w;
}

void aa__log_line(const char *line) {
  char small[AA__LOG_LINE_MAX];
  char *esc = small;
  size_t n, cap = sizeof small;
  size_t len = strlen(line);
  /* every byte escapes to at most 4: a line of any length fits whole (a
   * message may quote a number of any length); the stack for short ones */
  if (len <= (SIZE_MAX - 14) / 4 && 4 * len + 14 > cap) {
    char *big = malloc(4 * len + 14);
    if (big != NULL) {
      esc = big;
      cap = 4 * len + 14;
    }
  }
  memcpy(esc, "adaptalloc: ", 12);
  n = 12 + aa__log_escape(line, esc + 12, cap - 13);
  esc[n++] = '\n';
  fwrite(esc, 1, n, stderr);
  if (esc != small)
    free(esc);
}
