/*
 * json_strict.c — the strict JSON check every JSON input passes before cJSON
 * sees it (policy documents and merge patches over HTTP, policy files,
 * histogram files). cJSON is lenient: it reads "0100" as 100, keeps raw
 * control bytes inside strings and cuts a string at an escaped NUL ("a\u0000b"
 * becomes "a", the key "adapt\u0000" becomes "adapt"). This scanner accepts
 * exactly the grammar of RFC 8259 on bytes already known to be valid UTF-8,
 * plus one leading byte-order mark, and refuses:
 *   - numbers with a leading zero, a bare sign, '.', or exponent;
 *   - raw bytes below 0x20 inside strings (TAB included);
 *   - escapes other than \" \\ \/ \b \f \n \r \t \uXXXX, the escape \u0000,
 *     and UTF-16 surrogates that do not pair;
 *   - a second byte-order mark, or one anywhere but the very start;
 *   - nesting deeper than max_depth; anything after the one value;
 *   - integers of 22 digits or more (quoted with every digit).
 * On the way it lists every number token (offset, length) for the caller,
 * so that messages quote numbers as written: cJSON keeps only a double.
 * Entry point: aa__json_strict_check.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/common.h"
#include "adaptalloc/internal/util.h"

typedef struct scan {
  const unsigned char *s;
  size_t len;
  size_t i;
  unsigned depth;
  unsigned max_depth;
  const char *why;          /* static text of the first problem */
  size_t at;                /* its byte offset */
  size_t int_from, int_len; /* the over-long integer (why == TOO_LONG_INT) */
  aa__json_numbers *nums;   /* where number tokens go (NULL: nowhere) */
  bool nomem;               /* a token could not be listed */
} scan;

/* Integers of this many digits or more are 1e21 or more: beyond every
 * field's range (2^53 - 1 at most), and beyond what a double prints with
 * every digit; refused here with their digits, before cJSON reads one as
 * inf ("inf is not a finite number" named neither the value nor the rule). */
#define INT_DIGITS_MAX 22
static const char TOO_LONG_INT[] = "an integer out of range";

static bool stop(scan *c, const char *why) {
  if (c->why == NULL) {
    c->why = why;
    c->at = c->i;
  }
  return false;
}

static void ws(scan *c) {
  while (c->i < c->len && (c->s[c->i] == ' ' || c->s[c->i] == '\t' ||
                           c->s[c->i] == '\n' || c->s[c->i] == '\r'))
    c->i++;
}

static int hex4(const unsigned char *p) {
  int v = 0;
  for (int k = 0; k < 4; k++) {
    unsigned char h = p[k];
    v <<= 4;
    if (h >= '0' && h <= '9')
      v |= h - '0';
    else if (h >= 'a' && h <= 'f')
      v |= h - 'a' + 10;
    else if (h >= 'A' && h <= 'F')
      v |= h - 'A' + 10;
    else
      return -1;
  }
  return v;
}

static bool string(scan *c) {
  c->i++; /* the opening quote */
  while (c->i < c->len) {
    unsigned char ch = c->s[c->i];
    if (ch == '"') {
      c->i++;
      return true;
    }
    if (ch < 0x20)
      return stop(c, "a raw control byte inside a string (write it as an "
                     "escape such as \\t or \\u0001)");
    if (ch != '\\') {
      c->i++;
      continue;
    }
    if (c->i + 1 >= c->len)
      return stop(c, "an unterminated string");
    ch = c->s[c->i + 1];
    if (strchr("\"\\/bfnrt", ch) != NULL && ch != '\0') {
      c->i += 2;
      continue;
    }
    if (ch != 'u')
      return stop(c, "an invalid escape in a string");
    if (c->i + 6 > c->len)
      return stop(c, "a truncated \\u escape");
    {
      int u = hex4(c->s + c->i + 2);
      if (u < 0)
        return stop(c, "a \\u escape without four hex digits");
      if (u == 0)
        return stop(c, "the escape \\u0000 (a NUL) inside a string or key");
      if (u >= 0xdc00 && u <= 0xdfff)
        return stop(c, "a lone low surrogate escape");
      if (u >= 0xd800 && u <= 0xdbff) {
        int lo = c->i + 12 <= c->len && c->s[c->i + 6] == '\\' &&
                         c->s[c->i + 7] == 'u'
                     ? hex4(c->s + c->i + 8)
                     : -1;
        if (lo < 0xdc00 || lo > 0xdfff)
          return stop(c, "a high surrogate escape without its low half");
        c->i += 6;
      }
      c->i += 6;
    }
  }
  return stop(c, "an unterminated string");
}

static bool digits(scan *c) {
  size_t from = c->i;
  while (c->i < c->len && c->s[c->i] >= '0' && c->s[c->i] <= '9')
    c->i++;
  return c->i > from;
}

static void note_number(scan *c, size_t from) {
  aa__json_numbers *ns = c->nums;
  if (ns == NULL || c->nomem)
    return;
  if (ns->n == ns->cap) {
    size_t cap = ns->cap ? ns->cap * 2 : 64;
    struct aa__json_token *at = realloc(ns->at, cap * sizeof *at);
    if (at == NULL) {
      c->nomem = true;
      return;
    }
    ns->at = at;
    ns->cap = cap;
  }
  ns->at[ns->n].off = from;
  ns->at[ns->n].len = c->i - from;
  ns->n++;
}

static bool number(scan *c) {
  size_t start = c->i;
  if (c->s[c->i] == '-')
    c->i++;
  if (c->i >= c->len || c->s[c->i] < '0' || c->s[c->i] > '9')
    return stop(c, "a number without digits");
  if (c->s[c->i] == '0') {
    c->i++;
    if (c->i < c->len && c->s[c->i] >= '0' && c->s[c->i] <= '9')
      return stop(c, "a number with a leading zero");
  } else {
    size_t from = c->i;
    digits(c);
    if (c->i - from >= INT_DIGITS_MAX &&
        !(c->i < c->len && (c->s[c->i] == '.' || c->s[c->i] == 'e' || c->s[c->i] == 'E'))) {
      c->int_from = from > 0 && c->s[from - 1] == '-' ? from - 1 : from;
      c->int_len = c->i - c->int_from;
      c->i = c->int_from;
      return stop(c, TOO_LONG_INT);
    }
  }
  if (c->i < c->len && c->s[c->i] == '.') {
    c->i++;
    if (!digits(c))
      return stop(c, "a number without digits after '.'");
  }
  if (c->i < c->len && (c->s[c->i] == 'e' || c->s[c->i] == 'E')) {
    c->i++;
    if (c->i < c->len && (c->s[c->i] == '+' || c->s[c->i] == '-'))
      c->i++;
    if (!digits(c))
      return stop(c, "a number without digits in its exponent");
  }
  note_number(c, start);
  return true;
}

static bool literal(scan *c, const char *word) {
  size_t n = strlen(word);
  if (c->len - c->i < n || memcmp(c->s + c->i, word, n) != 0)
    return stop(c, "an invalid value (not an object, array, string, number, "
                   "true, false or null)");
  c->i += n;
  return true;
}

static bool value(scan *c);

static bool members(scan *c, bool object) {
  char close = object ? '}' : ']';
  if (++c->depth > c->max_depth)
    return stop(c, "nesting deeper than the limit");
  c->i++; /* the opening bracket */
  ws(c);
  if (c->i < c->len && c->s[c->i] == (unsigned char)close) {
    c->i++;
    c->depth--;
    return true;
  }
  for (;;) {
    if (object) {
      if (c->i >= c->len || c->s[c->i] != '"')
        return stop(c, "an object key that is not a string");
      if (!string(c))
        return false;
      ws(c);
      if (c->i >= c->len || c->s[c->i] != ':')
        return stop(c, "a missing ':' after an object key");
      c->i++;
      ws(c);
    }
    if (!value(c))
      return false;
    ws(c);
    if (c->i < c->len && c->s[c->i] == ',') {
      c->i++;
      ws(c);
      continue;
    }
    if (c->i < c->len && c->s[c->i] == (unsigned char)close) {
      c->i++;
      c->depth--;
      return true;
    }
    return stop(c, object ? "a missing ',' or '}' in an object"
                          : "a missing ',' or ']' in an array");
  }
}

static bool value(scan *c) {
  if (c->i >= c->len)
    return stop(c, "a missing value");
  switch (c->s[c->i]) {
  case '{':
    return members(c, true);
  case '[':
    return members(c, false);
  case '"':
    return string(c);
  case 't':
    return literal(c, "true");
  case 'f':
    return literal(c, "false");
  case 'n':
    return literal(c, "null");
  default:
    if (c->s[c->i] == '-' || (c->s[c->i] >= '0' && c->s[c->i] <= '9'))
      return number(c);
    if (c->len - c->i >= 3 && memcmp(c->s + c->i, "\xef\xbb\xbf", 3) == 0)
      return stop(c, "a byte-order mark after the start of the document");
    return stop(c, "an invalid value (not an object, array, string, number, "
                   "true, false or null)");
  }
}

void aa__json_numbers_free(aa__json_numbers *nums) {
  if (nums == NULL)
    return;
  free(nums->at);
  memset(nums, 0, sizeof *nums);
}

void aa__buf_number(aa__buf *b, const char *s, size_t n, size_t quote_max) {
  if (n <= quote_max) {
    aa__buf_append(b, s, n);
    return;
  }
  aa__buf_append(b, s, 40);
  aa__buf_puts(b, "...");
  aa__buf_append(b, s + n - 8, 8);
  aa__buf_printf(b, " (%zu characters)", n);
}

int aa__json_strict_check(const char *json, size_t len, unsigned max_depth,
                          size_t quote_max, aa__buf *err, aa__json_numbers *nums) {
  scan c;
  unsigned line = 1, col = 1;

  memset(&c, 0, sizeof c);
  c.s = (const unsigned char *)json;
  c.len = len;
  c.max_depth = max_depth;
  c.nums = nums;
  if (nums != NULL)
    memset(nums, 0, sizeof *nums);
  if (len >= 3 && memcmp(json, "\xef\xbb\xbf", 3) == 0)
    c.i = 3; /* one byte-order mark (some editors write one) */
  ws(&c);
  if (value(&c)) {
    ws(&c);
    if (c.i < c.len) {
      if (c.len - c.i >= 3 && memcmp(c.s + c.i, "\xef\xbb\xbf", 3) == 0)
        stop(&c, "a byte-order mark after the start of the document");
      else
        stop(&c, "unexpected data after the document");
    }
  }
  if (c.why == NULL && c.nomem) {
    aa__json_numbers_free(nums);
    if (err != NULL)
      aa__buf_puts(err, "(root): out of memory");
    return AA_ENOMEM;
  }
  if (c.why == NULL)
    return AA_OK;
  aa__json_numbers_free(nums);
  for (size_t k = 0; k < c.at && k < len; k++) {
    if (json[k] == '\n') {
      line++;
      col = 1;
    } else if (((unsigned char)json[k] & 0xc0) != 0x80) {
      col++; /* columns count characters, not UTF-8 continuation bytes */
    }
  }
  if (err == NULL)
    return AA_EPARSE;
  if (c.why == TOO_LONG_INT) {
    /* every digit up to quote_max (SIZE_MAX for policies: the message is
     * as long as the number) */
    aa__buf_puts(err, "(root): the integer ");
    aa__buf_number(err, json + c.int_from, c.int_len, quote_max);
    aa__buf_printf(err,
                   " at line %u, column %u is out of range (no field takes one "
                   "over 2^53 - 1)",
                   line, col);
  } else if (strcmp(c.why, "nesting deeper than the limit") == 0) {
    aa__buf_printf(err, "(root): nested deeper than %u levels (at line %u, column %u)",
                   max_depth, line, col);
  } else {
    aa__buf_printf(err, "(root): not strict JSON: %s at line %u, column %u", c.why,
                   line, col);
  }
  return AA_EPARSE;
}
