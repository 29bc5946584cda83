/*
 * policy_fields.c — the policy parser's helpers: error messages that name
 * the JSON path (aa__pv_fail), paths made safe for a message, type names,
 * the unknown-key check with its "did you mean", and the typed readers of
 * a member (integers, fractions, booleans, strings; optional or not).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_parse.h"

#define TWO_POW_53 9007199254740992.0

/* ------------------------------------------------------------ error helpers */

int aa__pv_fail(vctx *v, const char *path, const char *fmt, ...) {
  va_list ap;
  if (v->err == NULL)
    return AA_EINVAL;
  aa__buf_printf(v->err, "%s: ", path[0] ? path : "(root)");
  va_start(ap, fmt);
  aa__buf_vprintf(v->err, fmt, ap);
  va_end(ap);
  return AA_EINVAL;
}

/* A key made safe for a message: control bytes and '"' become '?', UTF-8
 * sequences (the document is valid UTF-8 by now) are kept whole, at most 48
 * bytes and never half a character. The message is escaped again when it
 * goes into a JSON error document. */
void aa__pv_key_safe(char *dst, size_t cap, const char *key) {
  size_t j = 0, i = 0;
  while (key[i] != '\0' && i < 48) {
    unsigned char c = (unsigned char)key[i];
    size_t n = c < 0x80 ? 1 : c >= 0xf0 ? 4
                          : c >= 0xe0   ? 3
                                        : 2;
    size_t k;
    if (j + n >= cap || i + n > 48)
      break;
    if (n == 1) {
      dst[j++] = (c >= 0x20 && c != 0x7f && c != '"') ? (char)c : '?';
      i++;
      continue;
    }
    for (k = 1; k < n; k++)
      if (((unsigned char)key[i + k] & 0xc0) != 0x80)
        break;
    if (k < n) { /* not UTF-8 after all: one '?' for the byte */
      dst[j++] = '?';
      i++;
      continue;
    }
    memcpy(dst + j, key + i, n);
    j += n;
    i += n;
  }
  dst[j] = '\0';
}

/* Appends src to dst (capacity PATH_CAP), truncating. */
static void path_cat(char *dst, const char *src) {
  size_t n = strlen(dst), m = strlen(src);
  if (n + m >= PATH_CAP)
    m = PATH_CAP - 1 - n;
  memcpy(dst + n, src, m);
  dst[n + m] = '\0';
}

void aa__pv_path_key(char *dst, const char *parent, const char *key) {
  char k[64];
  aa__pv_key_safe(k, sizeof k, key);
  dst[0] = '\0';
  path_cat(dst, parent);
  if (parent[0] != '\0')
    path_cat(dst, ".");
  path_cat(dst, k);
}

void aa__pv_path_index(char *dst, const char *parent, size_t i) {
  char idx[32];
  snprintf(idx, sizeof idx, "[%zu]", i);
  dst[0] = '\0';
  path_cat(dst, parent);
  path_cat(dst, idx);
}

const char *aa__pv_type_name(const cJSON *item) {
  if (cJSON_IsObject(item))
    return "an object";
  if (cJSON_IsArray(item))
    return "an array";
  if (cJSON_IsString(item))
    return "a string";
  if (cJSON_IsNumber(item))
    return "a number";
  if (cJSON_IsBool(item))
    return "a boolean";
  if (cJSON_IsNull(item))
    return "null";
  return "an invalid value";
}

/* A number for a message: its text as the document wrote it (every digit,
 * however many: 12345678901234567890 stays itself, not the double's
 * 12345678901234567168), written into *tmp only when the item has no text
 * (a tree not parsed from a document: then the double, integral values below
 * 1e21 with every digit). */
static const char *num_text(const cJSON *item, char *tmp, size_t cap) {
  const char *t = aa__json_number_text(item);
  double d = item->valuedouble;
  if (t != NULL)
    return t;
  if (isfinite(d) && floor(d) == d && fabs(d) < 1e21)
    snprintf(tmp, cap, "%.0f", d);
  else
    snprintf(tmp, cap, "%g", d);
  return tmp;
}

/* Whether a JSON number's text is an integer exactly: 1.0, 1e3 and 1.5e1
 * are; 1.0000000000000000001, which a double reads as 1, is not. */
static bool text_is_integer(const char *t, bool *nonzero) {
  const char *p = t;
  size_t trailing_zeros = 0, frac = 0;
  bool any_nonzero = false, in_frac = false;
  long long exp = 0;
  if (*p == '-')
    p++;
  for (; (*p >= '0' && *p <= '9') || *p == '.'; p++) {
    if (*p == '.') {
      in_frac = true;
      continue;
    }
    if (in_frac)
      frac++;
    if (*p == '0') {
      trailing_zeros++;
    } else {
      trailing_zeros = 0;
      any_nonzero = true;
    }
  }
  if (*p == 'e' || *p == 'E') {
    int sign = 1;
    p++;
    if (*p == '+' || *p == '-')
      sign = *p++ == '-' ? -1 : 1;
    for (; *p >= '0' && *p <= '9'; p++)
      if (exp < 1000000000LL)
        exp = exp * 10 + (*p - '0');
    exp *= sign;
  }
  *nonzero = any_nonzero;
  if (!any_nonzero)
    return true; /* zero, however written */
  /* value = digits x 10^(exp - frac); integral when the zeros at the end
   * of the digits make up for a negative power */
  return exp - (long long)frac + (long long)trailing_zeros >= 0;
}

/* ------------------------------------------------------------ field helpers */

/* Edit distance of two short strings, capped (for "did you mean"). */
static unsigned edit_distance(const char *a, const char *b) {
  unsigned row[65];
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64)
    return 99;
  for (size_t j = 0; j <= lb; j++)
    row[j] = (unsigned)j;
  for (size_t i = 1; i <= la; i++) {
    unsigned diag = row[0];
    row[0] = (unsigned)i;
    for (size_t j = 1; j <= lb; j++) {
      unsigned up = row[j];
      unsigned best = diag + (a[i - 1] == b[j - 1] ? 0u : 1u);
      if (up + 1 < best)
        best = up + 1;
      if (row[j - 1] + 1 < best)
        best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

/* item must be an object whose keys are all in `keys` (NULL-terminated). */
int aa__pv_check_object(vctx *v, const cJSON *item, const char *path,
                        const char *const *keys) {
  char child[PATH_CAP];
  if (!cJSON_IsObject(item))
    return aa__pv_fail(v, path, "expected an object, got %s", aa__pv_type_name(item));
  for (const cJSON *c = item->child; c != NULL; c = c->next) {
    const char *k = c->string != NULL ? c->string : "";
    bool known = false;
    const char *best = NULL;
    unsigned bestd = 3;
    for (size_t i = 0; keys[i] != NULL; i++) {
      unsigned d;
      if (strcmp(k, keys[i]) == 0) {
        known = true;
        break;
      }
      d = edit_distance(k, keys[i]);
      if (d < bestd) {
        bestd = d;
        best = keys[i];
      }
    }
    if (!known) {
      aa__pv_path_key(child, path, k);
      if (best != NULL)
        return aa__pv_fail(v, child, "unknown key (did you mean \"%s\"?)", best);
      return aa__pv_fail(v, child, "unknown key");
    }
  }
  return AA_OK;
}

/* The member `key` of obj (exact, case-sensitive) or NULL. */
const cJSON *aa__pv_member(const cJSON *obj, const char *key) {
  for (const cJSON *c = obj->child; c != NULL; c = c->next) {
    if (c->string != NULL && strcmp(c->string, key) == 0)
      return c;
  }
  return NULL;
}

int aa__pv_get_uint(vctx *v, const cJSON *item, const char *path, uint64_t lo,
                    uint64_t hi, uint64_t *out) {
  char tmp[40];
  const char *num, *text;
  bool integer, negative;
  double d;
  uint64_t u;
  if (!cJSON_IsNumber(item))
    return aa__pv_fail(v, path, "expected an integer, got %s", aa__pv_type_name(item));
  d = item->valuedouble;
  text = aa__json_number_text(item);
  num = num_text(item, tmp, sizeof tmp);
  if (text != NULL) {
    bool nonzero = false;
    integer = text_is_integer(text, &nonzero);
    negative = text[0] == '-' && nonzero; /* -0 is 0; -1e-400 is negative */
  } else {
    integer = floor(d) == d;
    negative = d < 0;
  }
  /* A JSON number is never infinite: one too large for a double (1e400, a
   * 400-digit integer) reads as inf, and the two rules below name it by its
   * sign, quoting its text. */
  if (negative)
    return aa__pv_fail(v, path, "%s is negative", num);
  /* 2^53 itself is refused too: 2^53 + 1 reads as 2^53 in a double, so only
   * integers below 2^53 are known to be what the document said. */
  if (d >= TWO_POW_53)
    return aa__pv_fail(v, path, "%s is beyond 2^53 - 1, the largest exact integer", num);
  if (!isfinite(d))
    return aa__pv_fail(v, path, "%s is not a finite number", num);
  /* the text decides: 1.0000000000000000001 reads as the double 1 */
  if (!integer || floor(d) != d)
    return aa__pv_fail(v, path, "%s is not an integer", num);
  u = (uint64_t)d;
  if (u < lo || u > hi)
    return aa__pv_fail(v, path, "%s is out of range [%llu, %llu]", num,
                       (unsigned long long)lo, (unsigned long long)hi);
  *out = u;
  return AA_OK;
}

int aa__pv_get_u32(vctx *v, const cJSON *item, const char *path, uint32_t lo,
                   uint32_t hi, uint32_t *out) {
  uint64_t u = 0;
  int rc = aa__pv_get_uint(v, item, path, lo, hi, &u);
  if (rc == AA_OK)
    *out = (uint32_t)u;
  return rc;
}

static int get_frac(vctx *v, const cJSON *item, const char *path, bool lo_open,
                    bool hi_open, double *out) {
  char tmp[40];
  const char *num;
  double d;
  if (!cJSON_IsNumber(item))
    return aa__pv_fail(v, path, "expected a number, got %s", aa__pv_type_name(item));
  d = item->valuedouble;
  num = num_text(item, tmp, sizeof tmp);
  if (!isfinite(d) || d < 0 || d > 1 || (lo_open && d == 0) ||
      (hi_open && d == 1))
    return aa__pv_fail(v, path, "%s is out of range %s0, 1%s", num, lo_open ? "(" : "[",
                       hi_open ? ")" : "]");
  *out = d;
  return AA_OK;
}

static int get_bool(vctx *v, const cJSON *item, const char *path, bool *out) {
  if (!cJSON_IsBool(item))
    return aa__pv_fail(v, path, "expected true or false, got %s", aa__pv_type_name(item));
  *out = cJSON_IsTrue(item) != 0;
  return AA_OK;
}

int aa__pv_get_string(vctx *v, const cJSON *item, const char *path, char *dst,
                      size_t cap) {
  size_t n;
  if (!cJSON_IsString(item) || item->valuestring == NULL)
    return aa__pv_fail(v, path, "expected a string, got %s", aa__pv_type_name(item));
  n = strlen(item->valuestring);
  if (n >= cap)
    return aa__pv_fail(v, path, "string of %zu bytes is longer than %zu", n, cap - 1);
  memcpy(dst, item->valuestring, n + 1);
  return AA_OK;
}

/* Optional members: absent leaves *out alone and returns AA_OK. */
int aa__pv_opt_uint(vctx *v, const cJSON *obj, const char *parent,
                    const char *key, uint64_t lo, uint64_t hi, uint64_t *out) {
  char p[PATH_CAP];
  const cJSON *it = FIELD(obj, key, p, parent);
  return it == NULL ? AA_OK : aa__pv_get_uint(v, it, p, lo, hi, out);
}

int aa__pv_opt_u32(vctx *v, const cJSON *obj, const char *parent,
                   const char *key, uint32_t lo, uint32_t hi, uint32_t *out) {
  char p[PATH_CAP];
  const cJSON *it = FIELD(obj, key, p, parent);
  return it == NULL ? AA_OK : aa__pv_get_u32(v, it, p, lo, hi, out);
}

int aa__pv_opt_frac(vctx *v, const cJSON *obj, const char *parent,
                    const char *key, bool lo_open, bool hi_open, double *out) {
  char p[PATH_CAP];
  const cJSON *it = FIELD(obj, key, p, parent);
  return it == NULL ? AA_OK : get_frac(v, it, p, lo_open, hi_open, out);
}

int aa__pv_opt_bool(vctx *v, const cJSON *obj, const char *parent,
                    const char *key, bool *out) {
  char p[PATH_CAP];
  const cJSON *it = FIELD(obj, key, p, parent);
  return it == NULL ? AA_OK : get_bool(v, it, p, out);
}
