/*
 * replay_csv.c — the RMM logging_resource_adaptor CSV reader (and writer).
 *
 * Entry points: aa_replay_csv_parse (a buffer), aa_replay_csv_parse_file (a
 * mapped file or stdin), aa_replay_csv_format (one line out).
 *
 * Hand-rolled for speed: memchr finds each line end, fields are split and
 * numbers converted in one pass without sscanf/strtoull, events are handed
 * to the sink in batches of BATCH. What is accepted is documented in
 * docs/replay.md "CSV" and in replay.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replay_internal.h"

#define BATCH 1024
#define MAX_COLS 32
#define PROGRESS_EVERY 64 /* batches between progress calls */

enum col {
  COL_IGNORE = 0,
  COL_THREAD,
  COL_TIME,
  COL_ACTION,
  COL_POINTER,
  COL_SIZE,
  COL_STREAM
};

static const char *const col_names[] = {"", "Thread", "Time", "Action",
                                        "Pointer", "Size", "Stream"};

typedef struct csv_state {
  unsigned char cols[MAX_COLS];
  unsigned ncols;
  bool default_layout; /* exactly Thread,Time,Action,Pointer,Size,Stream */
  bool have_header;
  const char *header; /* the header line, to skip repeats of it */
  size_t header_len;
} csv_state;

/* ---------------------------------------------------------------- numbers */

static inline int hexdig(unsigned char c) {
  unsigned lc;

  if ((unsigned)(c - '0') < 10u)
    return c - '0';
  lc = (unsigned)c | 0x20u;
  if (lc - 'a' < 6u)
    return (int)(lc - 'a') + 10;
  return -1;
}

/* Decimal digits only. Returns false on empty, non-digit or overflow. */
static bool parse_dec(const char *s, const char *e, uint64_t *out) {
  uint64_t v = 0;

  if (s == e)
    return false;
  for (; s < e; s++) {
    unsigned d = (unsigned)(unsigned char)*s - '0';
    if (d > 9)
      return false;
    if (v > (UINT64_MAX - d) / 10)
      return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

static bool parse_hex_digits(const char *s, const char *e, uint64_t *out) {
  uint64_t v = 0;

  if (s == e || e - s > 16)
    return false;
  for (; s < e; s++) {
    int d = hexdig((unsigned char)*s);
    if (d < 0)
      return false;
    v = (v << 4) | (uint64_t)d;
  }
  *out = v;
  return true;
}

/* Decimal, or hex with a 0x prefix. */
static bool parse_num(const char *s, const char *e, uint64_t *out) {
  if (e - s > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    return parse_hex_digits(s + 2, e, out);
  return parse_dec(s, e, out);
}

/* An id (pointer, stream): 0x-hex, decimal, bare hex digits, or "(nil)". */
static bool parse_id(const char *s, const char *e, uint64_t *out) {
  if (e - s > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    return parse_hex_digits(s + 2, e, out);
  if (parse_dec(s, e, out))
    return true;
  if (e - s == 5 && memcmp(s, "(nil)", 5) == 0) {
    *out = 0;
    return true;
  }
  return parse_hex_digits(s, e, out);
}

/* Fraction digits after the point as nanoseconds (beyond 9 digits ignored). */
static bool parse_frac_ns(const char *s, const char *e, uint64_t *out) {
  uint64_t v = 0;
  int n = 0;

  if (s == e)
    return false;
  for (; s < e; s++) {
    unsigned d = (unsigned)(unsigned char)*s - '0';
    if (d > 9)
      return false;
    if (n < 9) {
      v = v * 10 + d;
      n++;
    }
  }
  for (; n < 9; n++)
    v *= 10;
  *out = v;
  return true;
}

static bool mul_add(uint64_t a, uint64_t m, uint64_t b, uint64_t *out) {
  if (a > (UINT64_MAX - b) / m)
    return false;
  *out = a * m + b;
  return true;
}

/* Time: "S[.f]", "HH:MM:SS[.f]", "Nns", "Nus". */
static bool parse_time(const char *s, const char *e, uint64_t *out) {
  const char *p;
  const char *dot = NULL;
  const char *c1 = NULL;
  const char *c2 = NULL;
  uint64_t sec = 0, frac = 0, h, m;

  if (e - s > 2 && e[-1] == 's' && (e[-2] == 'n' || e[-2] == 'u')) {
    uint64_t v;
    if (!parse_dec(s, e - 2, &v))
      return false;
    if (e[-2] == 'n') {
      *out = v;
      return true;
    }
    return mul_add(v, 1000, 0, out);
  }
  for (p = s; p < e; p++) {
    if (*p == '.') {
      if (dot != NULL)
        return false;
      dot = p;
    } else if (*p == ':') {
      if (dot != NULL || c2 != NULL)
        return false;
      if (c1 == NULL)
        c1 = p;
      else
        c2 = p;
    }
  }
  if (dot != NULL && !parse_frac_ns(dot + 1, e, &frac))
    return false;
  if (dot == NULL)
    dot = e;
  if (c1 == NULL) {
    if (!parse_dec(s, dot, &sec))
      return false;
  } else {
    if (c2 == NULL || !parse_dec(s, c1, &h) || !parse_dec(c1 + 1, c2, &m) ||
        !parse_dec(c2 + 1, dot, &sec) || m > 59 || sec > 60 || h > 1000000)
      return false;
    sec += h * 3600 + m * 60;
  }
  return mul_add(sec, 1000000000ull, frac, out);
}

/* ---------------------------------------------------------------- fields */

static inline bool is_space(char c) { return c == ' ' || c == '\t'; }

/* Trims spaces and one level of double quotes. False for a quote problem. */
static bool clean_field(const char **ps, const char **pe) {
  const char *s = *ps, *e = *pe;

  while (s < e && is_space(*s))
    s++;
  while (e > s && is_space(e[-1]))
    e--;
  if (s < e && *s == '"') {
    if (e - s < 2 || e[-1] != '"' || memchr(s + 1, '"', (size_t)(e - s - 2)))
      return false;
    s++;
    e--;
  } else if (s < e && memchr(s, '"', (size_t)(e - s)) != NULL) {
    return false;
  }
  *ps = s;
  *pe = e;
  return true;
}

static bool eq_nocase(const char *s, const char *e, const char *lit) {
  size_t n = strlen(lit);
  size_t i;

  if ((size_t)(e - s) != n)
    return false;
  for (i = 0; i < n; i++) {
    char a = s[i], b = lit[i];
    if (a >= 'A' && a <= 'Z')
      a = (char)(a - 'A' + 'a');
    if (b >= 'A' && b <= 'Z')
      b = (char)(b - 'A' + 'a');
    if (a != b)
      return false;
  }
  return true;
}

static void set_default_cols(csv_state *st) {
  static const unsigned char def[] = {COL_THREAD,  COL_TIME, COL_ACTION,
                                      COL_POINTER, COL_SIZE, COL_STREAM};
  memcpy(st->cols, def, sizeof def);
  st->ncols = 6;
  st->default_layout = true;
}

/* A header line: names the columns. */
static int parse_header(csv_state *st, const char *s, const char *e,
                        char *msg, size_t msgcap) {
  unsigned n = 0, seen = 0, c;
  const char *f = s;
  char q[48];

  memset(st->cols, 0, sizeof st->cols);
  st->default_layout = false;
  for (;;) {
    const char *fe = memchr(f, ',', (size_t)(e - f));
    const char *fs = f;
    unsigned which = COL_IGNORE;
    if (fe == NULL)
      fe = e;
    f = fe;
    if (n == MAX_COLS) {
      snprintf(msg, msgcap, "header has more than %d columns", MAX_COLS);
      return AA_EPARSE;
    }
    if (!clean_field(&fs, &fe)) {
      aa__replay_quote(fs, (size_t)(fe - fs), q, sizeof q);
      snprintf(msg, msgcap, "header column %u: bad quoting in '%s'", n + 1, q);
      return AA_EPARSE;
    }
    for (c = COL_THREAD; c <= COL_STREAM; c++) {
      if (eq_nocase(fs, fe, col_names[c]))
        which = c;
    }
    if (which != COL_IGNORE) {
      if (seen & (1u << which)) {
        snprintf(msg, msgcap, "header names column %s twice", col_names[which]);
        return AA_EPARSE;
      }
      seen |= 1u << which;
    }
    st->cols[n++] = (unsigned char)which;
    if (f == e)
      break;
    f++; /* past the comma */
  }
  st->ncols = n;
  st->default_layout = n == 6;
  for (c = 0; c < n && c < 6; c++) {
    if (st->cols[c] != (unsigned char)(COL_THREAD + c))
      st->default_layout = false;
  }
  if (!(seen & (1u << COL_ACTION)) || !(seen & (1u << COL_POINTER)) ||
      !(seen & (1u << COL_SIZE))) {
    snprintf(msg, msgcap, "header lacks column %s",
             !(seen & (1u << COL_ACTION))    ? "Action"
             : !(seen & (1u << COL_POINTER)) ? "Pointer"
                                             : "Size");
    return AA_EPARSE;
  }
  return AA_OK;
}

/* Parses one data line into *ev. Returns AA_OK, or AA_EPARSE with a message
 * and *unknown_action set when that was the problem. */
static int parse_line(const csv_state *st, const char *s, const char *e,
                      aa_replay_event *ev, bool *unknown_action, char *msg,
                      size_t msgcap) {
  unsigned i = 0;
  const char *f = s;
  char q[48];
  bool have_action = false;

  ev->time_ns = 0;
  ev->ptr = 0;
  ev->size = 0;
  ev->stream = 0;
  ev->thread = 0;
  for (;;) {
    const char *fs = f;
    const char *fe = memchr(f, ',', (size_t)(e - f));
    bool ok = true;
    unsigned c;
    if (fe == NULL)
      fe = e;
    f = fe;
    if (i >= st->ncols) {
      unsigned n = i + 1;
      while (f < e) {
        f = memchr(f + 1, ',', (size_t)(e - f - 1));
        if (f == NULL)
          f = e;
        n++;
      }
      snprintf(msg, msgcap, "expected %u fields, got %u", st->ncols, n);
      return AA_EPARSE;
    }
    c = st->cols[i];
    if (c != COL_IGNORE && !clean_field(&fs, &fe)) {
      aa__replay_quote(fs, (size_t)(fe - fs), q, sizeof q);
      snprintf(msg, msgcap, "%s: bad quoting in '%s'", col_names[c], q);
      return AA_EPARSE;
    }
    switch (c) {
    case COL_THREAD:
      ok = parse_id(fs, fe, &ev->thread);
      break;
    case COL_TIME:
      ok = parse_time(fs, fe, &ev->time_ns);
      break;
    case COL_POINTER:
      ok = parse_id(fs, fe, &ev->ptr);
      break;
    case COL_SIZE:
      ok = parse_num(fs, fe, &ev->size);
      break;
    case COL_STREAM:
      ok = parse_id(fs, fe, &ev->stream);
      break;
    case COL_ACTION: {
      size_t n = (size_t)(fe - fs);
      have_action = true;
      if (n == 8 && memcmp(fs, "allocate", 8) == 0)
        ev->op = 'a';
      else if (n == 10 && memcmp(fs, "deallocate", 10) == 0)
        ev->op = 'f';
      else if (n == 16 && memcmp(fs, "allocate failure", 16) == 0)
        ev->op = 'x';
      else if (eq_nocase(fs, fe, "allocate"))
        ev->op = 'a';
      else if (eq_nocase(fs, fe, "deallocate"))
        ev->op = 'f';
      else if (eq_nocase(fs, fe, "allocate failure"))
        ev->op = 'x';
      else {
        aa__replay_quote(fs, n, q, sizeof q);
        snprintf(msg, msgcap, "unknown Action '%s' (expected allocate, "
                 "deallocate or allocate failure)", q);
        *unknown_action = true;
        return AA_EPARSE;
      }
      break;
    }
    default:
      break;
    }
    if (!ok) {
      aa__replay_quote(fs, (size_t)(fe - fs), q, sizeof q);
      snprintf(msg, msgcap, "%s: '%s' is not a %s", col_names[c], q,
               c == COL_TIME ? "time (seconds[.fraction], HH:MM:SS[.fraction], "
                               "Nns or Nus)"
               : c == COL_SIZE ? "size (decimal or 0x-hex, below 2^64)"
                               : "number or pointer");
      return AA_EPARSE;
    }
    i++;
    if (f == e)
      break;
    f++; /* past the comma */
  }
  if (i != st->ncols || !have_action) {
    snprintf(msg, msgcap, "expected %u fields, got %u", st->ncols, i);
    return AA_EPARSE;
  }
  return AA_OK;
}

/* Whether a line looks like a header: its first field starts with a letter. */
static bool looks_like_header(const char *s, const char *e) {
  while (s < e && (is_space(*s) || *s == '"'))
    s++;
  return s < e && ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'));
}

/* ---------------------------------------------------------------- fast path */

/* The fast path parses a plain line (no quotes, no spaces, the usual number
 * forms) in one pass without looking for the line end first. Anything else
 * returns false and the line goes through parse_line, which accepts every
 * documented form and writes the error messages. */

static inline bool fast_dec(const char **pp, const char *e, uint64_t *out) {
  const char *p = *pp;
  uint64_t v = 0;
  int n = 0;

  while (p < e && (unsigned)(*p - '0') < 10u && n < 19) {
    v = v * 10 + (uint64_t)(*p - '0');
    p++;
    n++;
  }
  if (n == 0 || (p < e && (unsigned)(*p - '0') < 10u))
    return false;
  *pp = p;
  *out = v;
  return true;
}

static inline bool fast_hex(const char **pp, const char *e, uint64_t *out) {
  const char *p = *pp;
  uint64_t v = 0;
  int n = 0, d;

  if (e - p < 3 || p[0] != '0' || p[1] != 'x')
    return false;
  p += 2;
  while (p < e && n <= 16) {
    d = hexdig((unsigned char)*p);
    if (d < 0)
      break;
    v = (v << 4) | (uint64_t)d;
    p++;
    n++;
  }
  if (n == 0 || n > 16)
    return false;
  *pp = p;
  *out = v;
  return true;
}

static inline bool fast_id(const char **pp, const char *e, uint64_t *out) {
  if (e - *pp >= 2 && (*pp)[0] == '0' && (*pp)[1] == 'x')
    return fast_hex(pp, e, out);
  return fast_dec(pp, e, out);
}

/* "S", "S.F", "H:M:S" or "H:M:S.F" with up to 9 fraction digits. */
static inline bool fast_time(const char **pp, const char *e, uint64_t *out) {
  const char *p = *pp;
  uint64_t a, m, sec, frac = 0;
  int n = 0;

  if (!fast_dec(&p, e, &a))
    return false;
  if (p < e && *p == ':') {
    p++;
    if (!fast_dec(&p, e, &m) || p >= e || *p != ':' || m > 59)
      return false;
    p++;
    if (!fast_dec(&p, e, &sec) || sec > 60 || a > 1000000)
      return false;
    sec += a * 3600 + m * 60;
  } else {
    sec = a;
  }
  if (p < e && *p == '.') {
    p++;
    while (p < e && (unsigned)(*p - '0') < 10u && n < 9) {
      frac = frac * 10 + (uint64_t)(*p - '0');
      p++;
      n++;
    }
    if (n == 0 || (p < e && (unsigned)(*p - '0') < 10u))
      return false;
    for (; n < 9; n++)
      frac *= 10;
  }
  if (sec > (UINT64_MAX - frac) / 1000000000ull)
    return false;
  *out = sec * 1000000000ull + frac;
  *pp = p;
  return true;
}

static inline bool fast_action(const char **pp, const char *e, char *op) {
  const char *p = *pp;

  if (e - p >= 10 && memcmp(p, "deallocate", 10) == 0) {
    *op = 'f';
    *pp = p + 10;
    return true;
  }
  if (e - p >= 8 && memcmp(p, "allocate", 8) == 0) {
    if (e - p >= 16 && memcmp(p + 8, " failure", 8) == 0) {
      *op = 'x';
      *pp = p + 16;
    } else {
      *op = 'a';
      *pp = p + 8;
    }
    return true;
  }
  return false;
}

static inline bool fast_eol(const char *p, const char *e, const char **next) {
  if (p < e && *p == '\r')
    p++;
  if (p < e) {
    if (*p != '\n')
      return false;
    p++;
  }
  *next = p;
  return true;
}

static inline bool fast_comma(const char **pp, const char *e) {
  if (*pp >= e || **pp != ',')
    return false;
  (*pp)++;
  return true;
}

/* The usual Thread,Time,Action,Pointer,Size,Stream order, straight-line. */
static inline bool fast_line_default(const char *p, const char *e,
                                     aa_replay_event *ev, const char **next) {
  return fast_id(&p, e, &ev->thread) && fast_comma(&p, e) &&
         fast_time(&p, e, &ev->time_ns) && fast_comma(&p, e) &&
         fast_action(&p, e, &ev->op) && fast_comma(&p, e) &&
         fast_id(&p, e, &ev->ptr) && fast_comma(&p, e) &&
         fast_id(&p, e, &ev->size) && fast_comma(&p, e) &&
         fast_id(&p, e, &ev->stream) && fast_eol(p, e, next);
}

/* On success *next is the start of the following line. */
static bool fast_line(const csv_state *st, const char *p, const char *e,
                      aa_replay_event *ev, const char **next) {
  unsigned i;
  bool ok = true;

  if (AA__LIKELY(st->default_layout))
    return fast_line_default(p, e, ev, next);

  ev->time_ns = 0;
  ev->ptr = 0;
  ev->size = 0;
  ev->stream = 0;
  ev->thread = 0;
  ev->op = 0;
  for (i = 0; i < st->ncols; i++) {
    if (i > 0) {
      if (p >= e || *p != ',')
        return false;
      p++;
    }
    switch (st->cols[i]) {
    case COL_THREAD:
      ok = fast_id(&p, e, &ev->thread);
      break;
    case COL_TIME:
      ok = fast_time(&p, e, &ev->time_ns);
      break;
    case COL_ACTION:
      ok = fast_action(&p, e, &ev->op);
      break;
    case COL_POINTER:
      ok = fast_id(&p, e, &ev->ptr);
      break;
    case COL_SIZE:
      ok = fast_id(&p, e, &ev->size);
      break;
    case COL_STREAM:
      ok = fast_id(&p, e, &ev->stream);
      break;
    default:
      return false; /* ignored columns: the general path skips them */
    }
    if (!ok)
      return false;
  }
  if (ev->op == 0)
    return false;
  return fast_eol(p, e, next);
}

/* ---------------------------------------------------------------- parse */

int aa_replay_csv_parse(const char *buf, size_t len,
                        const aa_replay_csv_options *opt, aa_replay_sink sink,
                        void *user, aa_replay_diag *diag, char *err,
                        size_t errcap) {
  aa_replay_event *batch = NULL;
  size_t nb = 0, batches = 0;
  const char *p = buf;
  const char *end = buf + len;
  uint64_t line = 0;
  csv_state st;
  bool first = true;
  aa_replay_on_error mode = opt != NULL ? opt->on_error : AA_REPLAY_STOP;
  char msg[AA_REPLAY_ERR_CAP];
  char full[AA_REPLAY_ERR_CAP + 32];
  int rc = AA_OK;

  if (err != NULL && errcap > 0)
    err[0] = '\0';
  if ((buf == NULL && len > 0) || sink == NULL) {
    aa__replay_errf(err, errcap, "aa_replay_csv_parse: NULL argument");
    return AA_EINVAL;
  }
  memset(&st, 0, sizeof st);
  set_default_cols(&st);
  batch = malloc(BATCH * sizeof *batch);
  if (batch == NULL) {
    rc = AA_ENOMEM;
    aa__replay_errf(err, errcap, "out of memory");
    goto out;
  }
  while (p < end) {
    const char *nl;
    const char *le;
    const char *ls;
    const char *t;
    bool unknown = false;
    int lrc;

    if (AA__LIKELY(!first) && fast_line(&st, p, end, &batch[nb], &nl)) {
      line++;
      p = nl;
      batch[nb].line = line;
      nb++;
      if (nb == BATCH) {
        rc = sink(user, batch, nb);
        nb = 0;
        if (rc != AA_OK)
          goto out;
        if (opt != NULL && opt->progress != NULL &&
            ++batches % PROGRESS_EVERY == 0)
          opt->progress(opt->progress_user, (uint64_t)(p - buf), len);
      }
      continue;
    }
    nl = memchr(p, '\n', (size_t)(end - p));
    le = nl != NULL ? nl : end;
    ls = p;
    line++;
    p = nl != NULL ? nl + 1 : end;
    if (le > ls && le[-1] == '\r')
      le--;
    t = ls;
    while (t < le && is_space(*t))
      t++;
    if (t == le || *t == '#')
      continue;
    if (first) {
      first = false;
      if (looks_like_header(ls, le)) {
        lrc = parse_header(&st, ls, le, msg, sizeof msg);
        if (lrc != AA_OK) {
          /* A broken header cannot be skipped: the columns are unknown. */
          aa__replay_errf(err, errcap, "line %llu: %s",
                          (unsigned long long)line, msg);
          if (diag != NULL) {
            diag->malformed++;
            snprintf(full, sizeof full, "line %llu: %s",
                     (unsigned long long)line, msg);
            aa__replay_diag_note(diag, line, full);
          }
          rc = lrc;
          goto out;
        }
        st.have_header = true;
        st.header = ls;
        st.header_len = (size_t)(le - ls);
        continue;
      }
    }
    lrc = parse_line(&st, ls, le, &batch[nb], &unknown, msg, sizeof msg);
    if (AA__UNLIKELY(lrc != AA_OK)) {
      if (st.have_header && (size_t)(le - ls) == st.header_len &&
          memcmp(ls, st.header, st.header_len) == 0)
        continue; /* a repeated header (concatenated logs) */
      snprintf(full, sizeof full, "line %llu: %s", (unsigned long long)line,
               msg);
      if (diag != NULL) {
        if (unknown)
          diag->unknown_action++;
        else
          diag->malformed++;
        aa__replay_diag_note(diag, line, full);
      }
      if (mode == AA_REPLAY_STOP) {
        aa__replay_errf(err, errcap, "%s", full);
        rc = AA_EPARSE;
        goto out;
      }
      continue;
    }
    batch[nb].line = line;
    nb++;
    if (nb == BATCH) {
      rc = sink(user, batch, nb);
      nb = 0;
      if (rc != AA_OK)
        goto out;
      if (opt != NULL && opt->progress != NULL &&
          ++batches % PROGRESS_EVERY == 0)
        opt->progress(opt->progress_user, (uint64_t)(p - buf), len);
    }
  }
  if (nb > 0) {
    rc = sink(user, batch, nb);
    if (rc != AA_OK)
      goto out;
  }
  if (opt != NULL && opt->progress != NULL)
    opt->progress(opt->progress_user, len, len);
out:
  free(batch);
  return rc;
}

/* Reads all of a stream into a malloc'd buffer. */
static int slurp_fd(int fd, char **out, size_t *outlen) {
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);

  *out = NULL;
  *outlen = 0;
  if (b == NULL)
    return AA_ENOMEM;
  for (;;) {
    ssize_t r;
    if (n == cap) {
      char *nbuf = realloc(b, cap * 2);
      if (nbuf == NULL) {
        free(b);
        return AA_ENOMEM;
      }
      b = nbuf;
      cap *= 2;
    }
    r = read(fd, b + n, cap - n);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      free(b);
      return AA_EIO;
    }
    if (r == 0)
      break;
    n += (size_t)r;
  }
  *out = b;
  *outlen = n;
  return AA_OK;
}

int aa_replay_csv_parse_file(const char *path, const aa_replay_csv_options *opt,
                             aa_replay_sink sink, void *user,
                             aa_replay_diag *diag, char *err, size_t errcap) {
  int fd = -1;
  char *heap = NULL;
  void *map = MAP_FAILED;
  size_t len = 0;
  struct stat sb;
  int rc;

  if (path == NULL || sink == NULL) {
    aa__replay_errf(err, errcap, "aa_replay_csv_parse_file: NULL argument");
    return AA_EINVAL;
  }
  if (strcmp(path, "-") == 0) {
    rc = slurp_fd(0, &heap, &len);
    if (rc != AA_OK) {
      aa__replay_errf(err, errcap, "stdin: %s", strerror(errno));
      goto out;
    }
    rc = aa_replay_csv_parse(heap, len, opt, sink, user, diag, err, errcap);
    goto out;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &sb) != 0) {
    aa__replay_errf(err, errcap, "%s: %s", path, strerror(errno));
    rc = AA_EIO;
    goto out;
  }
  if (S_ISDIR(sb.st_mode)) {
    aa__replay_errf(err, errcap, "%s: is a directory", path);
    rc = AA_EIO;
    goto out;
  }
  if (S_ISREG(sb.st_mode) && sb.st_size > 0) {
    len = (size_t)sb.st_size;
    map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      aa__replay_errf(err, errcap, "%s: %s", path, strerror(errno));
      rc = AA_EIO;
      goto out;
    }
    (void)madvise(map, len, MADV_SEQUENTIAL);
    rc = aa_replay_csv_parse(map, len, opt, sink, user, diag, err, errcap);
  } else {
    rc = slurp_fd(fd, &heap, &len); /* a pipe, or an empty file */
    if (rc != AA_OK) {
      aa__replay_errf(err, errcap, "%s: %s", path, strerror(errno));
      goto out;
    }
    rc = aa_replay_csv_parse(heap, len, opt, sink, user, diag, err, errcap);
  }
out:
  if (map != MAP_FAILED)
    munmap(map, len);
  free(heap);
  if (fd >= 0)
    close(fd);
  return rc;
}

size_t aa_replay_csv_format(const aa_replay_event *ev, char *buf, size_t cap) {
  const char *action = ev->op == 'a'   ? "allocate"
                       : ev->op == 'f' ? "deallocate"
                                       : "allocate failure";
  int n = snprintf(buf, cap, "%llu,%llu.%09llu,%s,0x%llx,%llu,0x%llx\n",
                   (unsigned long long)ev->thread,
                   (unsigned long long)(ev->time_ns / 1000000000ull),
                   (unsigned long long)(ev->time_ns % 1000000000ull), action,
                   (unsigned long long)ev->ptr, (unsigned long long)ev->size,
                   (unsigned long long)ev->stream);
  return n < 0 ? 0 : (size_t)n;
}
