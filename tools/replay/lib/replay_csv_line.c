/*
 * replay_csv_line.c — the CSV reader's general path: numbers in every
 * documented form (decimal, 0x-hex, times as seconds, HH:MM:SS, Nns, Nus),
 * quoted and spaced fields, the header line, and a data line field by
 * field with a message naming what is wrong. The reader (replay_csv.c)
 * comes here for headers and for lines the fast path does not take.
 */
#include <string.h>

#include "replay_csv.h"

static const char *const col_names[] = {"", "Thread", "Time", "Action",
                                        "Pointer", "Size", "Stream"};

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
  if (parse_num(s, e, out))
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

/* Trims spaces and one level of double quotes. False for a quote problem. */
static bool clean_field(const char **ps, const char **pe) {
  const char *s = *ps, *e = *pe;

  while (s < e && aa__csv_is_space(*s))
    s++;
  while (e > s && aa__csv_is_space(e[-1]))
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

void aa__csv_set_default_cols(csv_state *st) {
  static const unsigned char def[] = {COL_THREAD, COL_TIME, COL_ACTION,
                                      COL_POINTER, COL_SIZE, COL_STREAM};
  memcpy(st->cols, def, sizeof def);
  st->ncols = 6;
  st->default_layout = true;
}

/* A header line: names the columns. */
int aa__csv_parse_header(csv_state *st, const char *s, const char *e,
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
int aa__csv_parse_line(const csv_state *st, const char *s, const char *e,
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
                              "deallocate or allocate failure)",
                 q);
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
               c == COL_TIME   ? "time (seconds[.fraction], HH:MM:SS[.fraction], "
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
  return aa_replay_event_check(ev, msg, msgcap); /* the rules of every reader */
}

/* Whether a line looks like a header: its first field starts with a letter. */
bool aa__csv_looks_like_header(const char *s, const char *e) {
  while (s < e && (aa__csv_is_space(*s) || *s == '"'))
    s++;
  return s < e && ((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'));
}
