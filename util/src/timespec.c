/*
 * timespec.c — a point in time from a command line: Unix seconds or an ISO
 * 8601 date and time (timespec.h). Entry point: aa__parse_time.
 */
#include <stdbool.h>
#include <stdio.h>

#include "adaptalloc/common.h"
#include "adaptalloc/internal/timespec.h"

typedef struct cur {
  const char *s;
  size_t i, n;
} cur;

static bool at_digit(const cur *c) { return c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9'; }

/* Exactly `width` digits. */
static bool digits(cur *c, int width, int *out) {
  int v = 0;
  for (int k = 0; k < width; k++) {
    if (!at_digit(c))
      return false;
    v = v * 10 + (c->s[c->i++] - '0');
  }
  *out = v;
  return true;
}

static bool lit(cur *c, char ch) {
  if (c->i < c->n && c->s[c->i] == ch) {
    c->i++;
    return true;
  }
  return false;
}

/* Fraction after '.': milliseconds (digits past the third are read and
 * dropped, at most 9). */
static bool fraction(cur *c, int64_t *ms) {
  int k = 0;
  int64_t v = 0;
  if (!at_digit(c))
    return false;
  while (at_digit(c)) {
    if (k == 9)
      return false;
    if (k < 3)
      v = v * 10 + (c->s[c->i] - '0');
    c->i++;
    k++;
  }
  while (k < 3) {
    v *= 10;
    k++;
  }
  *ms = v;
  return true;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; Howard Hinnant's
 * days_from_civil). */
static int64_t days_from_civil(int y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m) {
  static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : d[m - 1];
}

static int fail(char *why, size_t cap, const char *msg, int64_t *out) {
  if (why != NULL && cap > 0)
    snprintf(why, cap, "%s", msg);
  *out = 0;
  return AA_EINVAL;
}

int aa__parse_time(const char *s, size_t len, int64_t *unix_ms, char *why, size_t cap) {
  cur c = {s, 0, len};
  int64_t frac = 0;
  int64_t dummy;
  if (unix_ms == NULL)
    unix_ms = &dummy;
  if (s == NULL || len == 0)
    return fail(why, cap, "empty", unix_ms);
  /* Unix seconds: digits only, an optional fraction */
  size_t k = 0;
  while (k < len && s[k] >= '0' && s[k] <= '9')
    k++;
  if (k > 0 && (k == len || s[k] == '.') && k <= 12) { /* 9999-12-31 is 12 digits */
    int64_t sec = 0;
    for (size_t j = 0; j < k; j++)
      sec = sec * 10 + (s[j] - '0');
    c.i = k;
    if (lit(&c, '.') && !fraction(&c, &frac))
      return fail(why, cap, "a fraction of a second needs 1 to 9 digits", unix_ms);
    if (c.i != len)
      return fail(why, cap, "Unix seconds are digits and an optional fraction", unix_ms);
    if (sec > 253402300799LL) /* 9999-12-31T23:59:59Z */
      return fail(why, cap, "after the year 9999", unix_ms);
    *unix_ms = sec * 1000 + frac;
    return AA_OK;
  }
  int y, mo, d, h, mi, se = 0;
  if (!digits(&c, 4, &y) || !lit(&c, '-') || !digits(&c, 2, &mo) || !lit(&c, '-') ||
      !digits(&c, 2, &d))
    return fail(why, cap,
                "neither Unix seconds nor a date and time (YYYY-MM-DDTHH:MM[:SS[.fff]][Z|+HH:MM])",
                unix_ms);
  if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo))
    return fail(why, cap, "no such date (years 1970 to 9999)", unix_ms);
  if (!(lit(&c, 'T') || lit(&c, 't') || lit(&c, ' ')) || !digits(&c, 2, &h) || !lit(&c, ':') ||
      !digits(&c, 2, &mi))
    return fail(why, cap, "the date needs a time: THH:MM[:SS]", unix_ms);
  if (lit(&c, ':')) {
    if (!digits(&c, 2, &se))
      return fail(why, cap, "seconds are two digits", unix_ms);
    if (lit(&c, '.') && !fraction(&c, &frac))
      return fail(why, cap, "a fraction of a second needs 1 to 9 digits", unix_ms);
  }
  if (h > 23 || mi > 59 || se > 59)
    return fail(why, cap, "no such time of day", unix_ms);
  int64_t off_min = 0;
  if (lit(&c, 'Z') || lit(&c, 'z')) {
    /* UTC */
  } else if (c.i < c.n && (c.s[c.i] == '+' || c.s[c.i] == '-')) {
    int sign = c.s[c.i++] == '-' ? -1 : 1, oh, om = 0;
    if (!digits(&c, 2, &oh))
      return fail(why, cap, "a zone offset is +HH:MM", unix_ms);
    if (lit(&c, ':') ? !digits(&c, 2, &om) : (at_digit(&c) && !digits(&c, 2, &om)))
      return fail(why, cap, "a zone offset is +HH:MM", unix_ms);
    if (oh > 23 || om > 59)
      return fail(why, cap, "no such zone offset", unix_ms);
    off_min = sign * (oh * 60 + om);
  }
  if (c.i != c.n)
    return fail(why, cap, "text after the time", unix_ms);
  int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se - off_min * 60;
  if (secs < 0)
    return fail(why, cap, "before 1970", unix_ms);
  *unix_ms = secs * 1000 + frac;
  return AA_OK;
}
