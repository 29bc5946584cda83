/*
 * policy_parse.c — from bytes to a validated policy.
 *
 * Two stages. aa__policy_parse_tree: a pre-scan of the raw bytes (size limit,
 * NUL bytes, UTF-8, nesting depth — all before cJSON sees anything), cJSON's
 * length-bounded parser, a check for trailing bytes, and a whole-tree scan
 * for duplicate keys (cJSON keeps duplicates). aa__policy_from_tree: walks
 * the tree against the format in docs/policy.md — unknown keys, types,
 * integer ranges, fractions, then the rules that tie fields together — and
 * fills a policy from the defaults. Every error names the JSON path.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_model.h"

#define TWO_POW_53 9007199254740992.0
#define MAX_U53 ((uint64_t)9007199254740991ull) /* 2^53 - 1 */
#define GIB (1024ull * 1024ull * 1024ull)
#define MAX_CLASS (256ull * 1024ull * 1024ull) /* the core's largest max_small */
#define MIB (1024ull * 1024ull)
#define PATH_CAP 256

/* ------------------------------------------------------------ error helpers */

typedef struct vctx {
  char *err;
  size_t cap;
} vctx;

static int fail(vctx *v, const char *path, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static int fail(vctx *v, const char *path, const char *fmt, ...) {
  char msg[AA_POLICY_ERR_CAP];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  aa__errf(v->err, v->cap, "%s: %s", path[0] ? path : "(root)", msg);
  return AA_EINVAL;
}

/* A key made safe for a message: control bytes and '"' become '?', UTF-8
 * sequences (the document is valid UTF-8 by now) are kept whole, at most 48
 * bytes and never half a character. The message is escaped again when it
 * goes into a JSON error document. */
static void key_safe(char *dst, size_t cap, const char *key) {
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

static void path_key(char *dst, const char *parent, const char *key) {
  char k[64];
  key_safe(k, sizeof k, key);
  dst[0] = '\0';
  path_cat(dst, parent);
  if (parent[0] != '\0')
    path_cat(dst, ".");
  path_cat(dst, k);
}

static void path_index(char *dst, const char *parent, size_t i) {
  char idx[32];
  snprintf(idx, sizeof idx, "[%zu]", i);
  dst[0] = '\0';
  path_cat(dst, parent);
  path_cat(dst, idx);
}

static const char *type_name(const cJSON *item) {
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

static void fmt_num(char *dst, size_t cap, double d) {
  /* integral values below 1e21 print every digit: 2^64 is
   * 18446744073709551616, not 1.84467e+19 */
  if (isfinite(d) && floor(d) == d && fabs(d) < 1e21)
    snprintf(dst, cap, "%.0f", d);
  else
    snprintf(dst, cap, "%g", d);
}

/* ------------------------------------------------------------ pre-scan */

static size_t utf8_bad_at(const unsigned char *s, size_t len, bool *nul) {
  size_t i = 0;
  *nul = false;
  while (i < len) {
    unsigned char c = s[i];
    size_t need;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c == 0) {
      *nul = true;
      return i;
    }
    if (c < 0x80) {
      i++;
      continue;
    }
    if (c >= 0xc2 && c <= 0xdf) {
      need = 1;
    } else if (c == 0xe0) {
      need = 2;
      lo = 0xa0;
    } else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) {
      need = 2;
    } else if (c == 0xed) {
      need = 2;
      hi = 0x9f;
    } else if (c == 0xf0) {
      need = 3;
      lo = 0x90;
    } else if (c >= 0xf1 && c <= 0xf3) {
      need = 3;
    } else if (c == 0xf4) {
      need = 3;
      hi = 0x8f;
    } else {
      return i;
    }
    if (i + need >= len) /* truncated sequence */
      return i;
    if (s[i + 1] < lo || s[i + 1] > hi)
      return i;
    for (size_t k = 2; k <= need; k++) {
      if (s[i + k] < 0x80 || s[i + k] > 0xbf)
        return i;
    }
    i += need + 1;
  }
  return len;
}

static void line_col(const char *s, size_t off, unsigned *line, unsigned *col) {
  unsigned l = 1, c = 1;
  for (size_t i = 0; i < off; i++) {
    if (s[i] == '\n') {
      l++;
      c = 1;
    } else {
      c++;
    }
  }
  *line = l;
  *col = c;
}

static int prescan(const char *json, size_t len, char *err, size_t errcap) {
  const unsigned char *s = (const unsigned char *)json;
  bool nul = false;
  size_t bad;
  unsigned depth = 0;
  bool in_str = false;

  if (len == 0) {
    aa__errf(err, errcap, "(root): empty document");
    return AA_EPARSE;
  }
  if (len > AA_POLICY_MAX_BYTES) {
    aa__errf(err, errcap,
             "(root): document is %zu bytes, over the %u-byte limit", len,
             (unsigned)AA_POLICY_MAX_BYTES);
    return AA_EPARSE;
  }
  bad = utf8_bad_at(s, len, &nul);
  if (bad < len) {
    unsigned l, c;
    line_col(json, bad, &l, &c);
    if (nul)
      aa__errf(err, errcap,
               "(root): NUL byte at byte offset %zu (line %u, column %u)",
               bad, l, c);
    else
      aa__errf(err, errcap,
               "(root): invalid UTF-8 at byte offset %zu (line %u, column %u)",
               bad, l, c);
    return AA_EPARSE;
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char c = s[i];
    if (in_str) {
      if (c == '\\')
        i++;
      else if (c == '"')
        in_str = false;
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '{' || c == '[') {
      depth++;
      if (depth > AA_POLICY_MAX_DEPTH) {
        aa__errf(err, errcap,
                 "(root): nested deeper than %u levels (at byte offset %zu)",
                 (unsigned)AA_POLICY_MAX_DEPTH, i);
        return AA_EPARSE;
      }
    } else if ((c == '}' || c == ']') && depth > 0) {
      depth--;
    }
  }
  return AA_OK;
}

/* ------------------------------------------------------------ duplicates */

static int cmp_name(const void *a, const void *b) {
  const char *x = *(const char *const *)a;
  const char *y = *(const char *const *)b;
  return strcmp(x, y);
}

static int dup_scan(vctx *v, const cJSON *item, const char *path) {
  char child[PATH_CAP];
  size_t n = 0, i = 0;
  const cJSON *c;
  const char **names = NULL;
  int rc = AA_OK;

  if (!cJSON_IsObject(item) && !cJSON_IsArray(item))
    return AA_OK;
  for (c = item->child; c != NULL; c = c->next)
    n++;
  if (cJSON_IsObject(item) && n > 1) {
    names = malloc(n * sizeof *names);
    if (names == NULL) {
      aa__errf(v->err, v->cap, "(root): out of memory");
      return AA_ENOMEM;
    }
    for (c = item->child; c != NULL; c = c->next)
      names[i++] = c->string != NULL ? c->string : "";
    qsort(names, n, sizeof *names, cmp_name);
    for (i = 1; i < n; i++) {
      if (strcmp(names[i - 1], names[i]) == 0) {
        path_key(child, path, names[i]);
        rc = fail(v, child, "duplicate key");
        goto done;
      }
    }
  }
  i = 0;
  for (c = item->child; c != NULL; c = c->next, i++) {
    if (cJSON_IsObject(item))
      path_key(child, path, c->string != NULL ? c->string : "");
    else
      path_index(child, path, i);
    rc = dup_scan(v, c, child);
    if (rc != AA_OK)
      goto done;
  }
done:
  free(names);
  return rc;
}

int aa__policy_parse_tree(const char *json, size_t len, cJSON **out, char *err,
                          size_t errcap) {
  const char *end = NULL;
  const char *doc = json;
  size_t doc_len = len;
  cJSON *root = NULL;
  vctx v = {err, errcap};
  int rc;

  *out = NULL;
  rc = prescan(json, len, err, errcap);
  if (rc != AA_OK)
    return rc;
  /* A UTF-8 byte-order mark (some editors write one) is skipped. */
  if (len >= 3 && memcmp(json, "\xef\xbb\xbf", 3) == 0) {
    json += 3;
    len -= 3;
  }
  root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
  if (root == NULL) {
    unsigned l, c;
    size_t off = (end != NULL && end >= json && end <= json + len)
                     ? (size_t)(end - json)
                     : 0;
    line_col(json, off, &l, &c);
    aa__errf(err, errcap, "(root): malformed JSON at line %u, column %u",
             l, c);
    return AA_EPARSE;
  }
  if (end != NULL && end >= json && end <= json + len) {
    for (const char *q = end; q < json + len; q++) {
      if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
        unsigned l, c;
        line_col(json, (size_t)(q - json), &l, &c);
        aa__errf(err, errcap,
                 "(root): unexpected data after the document at line %u, "
                 "column %u",
                 l, c);
        cJSON_Delete(root);
        return AA_EPARSE;
      }
    }
  }
  /* What cJSON accepts but JSON is not (leading zeros, raw control bytes,
   * \u0000, a second byte-order mark): refused whole. */
  rc = aa__json_strict_check(doc, doc_len, AA_POLICY_MAX_DEPTH, err, errcap);
  if (rc != AA_OK) {
    cJSON_Delete(root);
    return rc;
  }
  rc = dup_scan(&v, root, "");
  if (rc != AA_OK) {
    cJSON_Delete(root);
    return rc;
  }
  *out = root;
  return AA_OK;
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
static int check_object(vctx *v, const cJSON *item, const char *path,
                        const char *const *keys) {
  char child[PATH_CAP];
  if (!cJSON_IsObject(item))
    return fail(v, path, "expected an object, got %s", type_name(item));
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
      path_key(child, path, k);
      if (best != NULL)
        return fail(v, child, "unknown key (did you mean \"%s\"?)", best);
      return fail(v, child, "unknown key");
    }
  }
  return AA_OK;
}

/* The member `key` of obj (exact, case-sensitive) or NULL. */
static const cJSON *member(const cJSON *obj, const char *key) {
  for (const cJSON *c = obj->child; c != NULL; c = c->next) {
    if (c->string != NULL && strcmp(c->string, key) == 0)
      return c;
  }
  return NULL;
}

static int get_uint(vctx *v, const cJSON *item, const char *path, uint64_t lo,
                    uint64_t hi, uint64_t *out) {
  char num[40];
  double d;
  uint64_t u;
  if (!cJSON_IsNumber(item))
    return fail(v, path, "expected an integer, got %s", type_name(item));
  d = item->valuedouble;
  fmt_num(num, sizeof num, d);
  if (!isfinite(d))
    return fail(v, path, "%s is not a finite number", num);
  if (d < 0)
    return fail(v, path, "%s is negative", num);
  /* 2^53 itself is refused too: 2^53 + 1 reads as 2^53 in a double, so only
   * integers below 2^53 are known to be what the document said. */
  if (d >= TWO_POW_53)
    return fail(v, path, "%s is beyond 2^53 - 1, the largest exact integer", num);
  if (floor(d) != d)
    return fail(v, path, "%s is not an integer", num);
  u = (uint64_t)d;
  if (u < lo || u > hi)
    return fail(v, path, "%s is out of range [%llu, %llu]", num,
                (unsigned long long)lo, (unsigned long long)hi);
  *out = u;
  return AA_OK;
}

static int get_u32(vctx *v, const cJSON *item, const char *path, uint32_t lo,
                   uint32_t hi, uint32_t *out) {
  uint64_t u = 0;
  int rc = get_uint(v, item, path, lo, hi, &u);
  if (rc == AA_OK)
    *out = (uint32_t)u;
  return rc;
}

static int get_frac(vctx *v, const cJSON *item, const char *path, bool lo_open,
                    bool hi_open, double *out) {
  char num[40];
  double d;
  if (!cJSON_IsNumber(item))
    return fail(v, path, "expected a number, got %s", type_name(item));
  d = item->valuedouble;
  fmt_num(num, sizeof num, d);
  if (!isfinite(d) || d < 0 || d > 1 || (lo_open && d == 0) ||
      (hi_open && d == 1))
    return fail(v, path, "%s is out of range %s0, 1%s", num, lo_open ? "(" : "[",
                hi_open ? ")" : "]");
  *out = d;
  return AA_OK;
}

static int get_bool(vctx *v, const cJSON *item, const char *path, bool *out) {
  if (!cJSON_IsBool(item))
    return fail(v, path, "expected true or false, got %s", type_name(item));
  *out = cJSON_IsTrue(item) != 0;
  return AA_OK;
}

static int get_string(vctx *v, const cJSON *item, const char *path, char *dst,
                      size_t cap) {
  size_t n;
  if (!cJSON_IsString(item) || item->valuestring == NULL)
    return fail(v, path, "expected a string, got %s", type_name(item));
  n = strlen(item->valuestring);
  if (n >= cap)
    return fail(v, path, "string of %zu bytes is longer than %zu", n, cap - 1);
  memcpy(dst, item->valuestring, n + 1);
  return AA_OK;
}

/* Convenience: look up key; absent leaves *out alone and *present false. */
#define FIELD(obj, key, pathbuf, parent) \
  (path_key((pathbuf), (parent), (key)), member((obj), (key)))

/* Optional members: absent leaves *out alone and returns AA_OK. */
static int opt_uint(vctx *v, const cJSON *obj, const char *parent,
                    const char *key, uint64_t lo, uint64_t hi, uint64_t *out) {
  char p[PATH_CAP];
  const cJSON *it = FIELD(obj, key, p, parent);
  return it == NULL ? AA_OK : get_uint(v, it, p, lo, hi, out);
}

static int opt_u32(vctx *v, const cJSON *obj, const char *parent,
                   const char *key, uint32_t lo, uint32_t hi, uint32_t *out) {
  char p[PATH_CAP];
  const cJSON *it = FIELD(obj, key, p, parent);
  return it == NULL ? AA_OK : get_u32(v, it, p, lo, hi, out);
}

static int opt_frac(vctx *v, const cJSON *obj, const char *parent,
                    const char *key, bool lo_open, bool hi_open, double *out) {
  char p[PATH_CAP];
  const cJSON *it = FIELD(obj, key, p, parent);
  return it == NULL ? AA_OK : get_frac(v, it, p, lo_open, hi_open, out);
}

static int opt_bool(vctx *v, const cJSON *obj, const char *parent,
                    const char *key, bool *out) {
  char p[PATH_CAP];
  const cJSON *it = FIELD(obj, key, p, parent);
  return it == NULL ? AA_OK : get_bool(v, it, p, out);
}

/* ------------------------------------------------------------ sections */

static int classes_from(vctx *v, const cJSON *cl, const char *path,
                        aa__pool_policy *pp, bool *have_ladder_max,
                        uint64_t *ladder_max) {
  static const char *const ladder_keys[] = {"min", "max", "per_doubling", NULL};
  static const char *const entry_keys[] = {"size", "cache_limit", "prefill", NULL};
  char p1[PATH_CAP], p2[PATH_CAP];
  const cJSON *it;
  int rc;

  *have_ladder_max = false;
  if (cJSON_IsObject(cl)) {
    rc = check_object(v, cl, path, ladder_keys);
    if (rc != AA_OK)
      return rc;
    pp->classes_kind = AA__CLASSES_LADDER;
    it = FIELD(cl, "min", p1, path);
    if (it != NULL) {
      rc = get_uint(v, it, p1, AA_BLOCK_ALIGN, MAX_CLASS, &pp->ladder_min);
      if (rc != AA_OK)
        return rc;
      if (pp->ladder_min % AA_BLOCK_ALIGN != 0)
        return fail(v, p1, "%llu is not a multiple of %u",
                    (unsigned long long)pp->ladder_min, AA_BLOCK_ALIGN);
    }
    it = FIELD(cl, "max", p1, path);
    if (it != NULL) {
      rc = get_uint(v, it, p1, AA_BLOCK_ALIGN, MAX_CLASS, ladder_max);
      if (rc != AA_OK)
        return rc;
      if (*ladder_max % AA_BLOCK_ALIGN != 0)
        return fail(v, p1, "%llu is not a multiple of %u",
                    (unsigned long long)*ladder_max, AA_BLOCK_ALIGN);
      *have_ladder_max = true;
    }
    it = FIELD(cl, "per_doubling", p1, path);
    if (it != NULL) {
      rc = get_u32(v, it, p1, 1, 16, &pp->ladder_per_doubling);
      if (rc != AA_OK)
        return rc;
    }
    return AA_OK;
  }
  if (!cJSON_IsArray(cl))
    return fail(v, path,
                "expected an array of block sizes or a ladder object "
                "{min, max, per_doubling}, got %s",
                type_name(cl));
  {
    size_t n = 0, i = 0;
    uint64_t prev = 0;
    for (it = cl->child; it != NULL; it = it->next)
      n++;
    if (n == 0)
      return fail(v, path, "the class list is empty");
    if (n > AA_MAX_CLASSES)
      return fail(v, path, "%zu classes, more than %u", n, AA_MAX_CLASSES);
    pp->classes_kind = AA__CLASSES_EXPLICIT;
    pp->n_explicit = (uint32_t)n;
    for (it = cl->child; it != NULL; it = it->next, i++) {
      aa_class_spec *cs = &pp->explicit_classes[i];
      const char *sizepath;
      const cJSON *sz;
      uint64_t u = 0;
      memset(cs, 0, sizeof *cs);
      path_index(p1, path, i);
      if (cJSON_IsNumber(it)) {
        sz = it;
        sizepath = p1;
      } else if (cJSON_IsObject(it)) {
        const cJSON *f;
        rc = check_object(v, it, p1, entry_keys);
        if (rc != AA_OK)
          return rc;
        sz = FIELD(it, "size", p2, p1);
        if (sz == NULL)
          return fail(v, p1, "missing required key \"size\"");
        f = FIELD(it, "cache_limit", p2, p1);
        if (f != NULL) {
          rc = get_u32(v, f, p2, 0, 65536, &cs->cache_limit);
          if (rc != AA_OK)
            return rc;
        }
        f = FIELD(it, "prefill", p2, p1);
        if (f != NULL) {
          rc = get_u32(v, f, p2, 0, 1u << 20, &cs->prefill);
          if (rc != AA_OK)
            return rc;
        }
        path_key(p2, p1, "size");
        sizepath = p2;
      } else {
        return fail(v, p1,
                    "expected a block size or a {size, cache_limit, prefill} "
                    "object, got %s",
                    type_name(it));
      }
      rc = get_uint(v, sz, sizepath, AA_BLOCK_ALIGN, MAX_CLASS, &u);
      if (rc != AA_OK)
        return rc;
      if (u % AA_BLOCK_ALIGN != 0)
        return fail(v, sizepath, "%llu is not a multiple of %u",
                    (unsigned long long)u, AA_BLOCK_ALIGN);
      if (u <= prev)
        return fail(v, sizepath,
                    "%llu is not larger than the previous class %llu (classes "
                    "must be strictly ascending)",
                    (unsigned long long)u, (unsigned long long)prev);
      cs->block_size = (size_t)u;
      prev = u;
    }
  }
  return AA_OK;
}

static int pool_from(vctx *v, const cJSON *obj, const char *path,
                     aa__pool_policy *pp) {
  static const char *const keys[] = {"slab_size", "max_small", "classes",
                                     "tcache", "large", "limit_bytes",
                                     NULL};
  static const char *const tkeys[] = {"blocks", "bytes", NULL};
  static const char *const lkeys[] = {"mode", "cache_bytes", NULL};
  char p1[PATH_CAP], p2[PATH_CAP];
  const cJSON *it, *f;
  bool have_slab = false, have_max = false, have_lmax = false;
  uint64_t lmax = 0;
  int rc;

  rc = check_object(v, obj, path, keys);
  if (rc != AA_OK)
    return rc;
  it = FIELD(obj, "slab_size", p1, path);
  if (it != NULL) {
    rc = get_uint(v, it, p1, 64 * 1024, GIB, &pp->slab_size);
    if (rc != AA_OK)
      return rc;
    if (pp->slab_size % (64 * 1024) != 0)
      return fail(v, p1, "%llu is not a multiple of 65536",
                  (unsigned long long)pp->slab_size);
    have_slab = true;
  }
  it = FIELD(obj, "max_small", p1, path);
  if (it != NULL) {
    rc = get_uint(v, it, p1, AA_BLOCK_ALIGN, MAX_CLASS, &pp->max_small);
    if (rc != AA_OK)
      return rc;
    if (pp->max_small % AA_BLOCK_ALIGN != 0)
      return fail(v, p1, "%llu is not a multiple of %u",
                  (unsigned long long)pp->max_small, AA_BLOCK_ALIGN);
    have_max = true;
  }
  it = FIELD(obj, "limit_bytes", p1, path);
  if (it != NULL) {
    rc = get_uint(v, it, p1, 0, MAX_U53, &pp->limit_bytes);
    if (rc != AA_OK)
      return rc;
  }
  it = FIELD(obj, "tcache", p1, path);
  if (it != NULL) {
    rc = check_object(v, it, p1, tkeys);
    if (rc != AA_OK)
      return rc;
    f = FIELD(it, "blocks", p2, p1);
    if (f != NULL) {
      rc = get_u32(v, f, p2, 0, 65536, &pp->tcache_blocks);
      if (rc != AA_OK)
        return rc;
    }
    f = FIELD(it, "bytes", p2, p1);
    if (f != NULL) {
      rc = get_uint(v, f, p2, 0, GIB, &pp->tcache_bytes);
      if (rc != AA_OK)
        return rc;
    }
  }
  it = FIELD(obj, "large", p1, path);
  if (it != NULL) {
    rc = check_object(v, it, p1, lkeys);
    if (rc != AA_OK)
      return rc;
    f = FIELD(it, "mode", p2, p1);
    if (f != NULL) {
      if (!cJSON_IsString(f) || f->valuestring == NULL)
        return fail(v, p2, "expected a string, got %s", type_name(f));
      if (strcmp(f->valuestring, "cache") == 0) {
        pp->large_mode = AA_LARGE_CACHE;
      } else if (strcmp(f->valuestring, "passthrough") == 0) {
        pp->large_mode = AA_LARGE_PASSTHROUGH;
      } else if (strcmp(f->valuestring, "expandable") == 0) {
        pp->large_mode = AA_LARGE_EXPANDABLE;
      } else {
        char k[64];
        key_safe(k, sizeof k, f->valuestring);
        return fail(v, p2, "\"%s\" is not one of \"cache\", \"passthrough\", \"expandable\"",
                    k);
      }
    }
    f = FIELD(it, "cache_bytes", p2, p1);
    if (f != NULL) {
      rc = get_uint(v, f, p2, 0, MAX_U53, &pp->large_cache_bytes);
      if (rc != AA_OK)
        return rc;
    }
  }
  it = FIELD(obj, "classes", p1, path);
  if (it != NULL) {
    rc = classes_from(v, it, p1, pp, &have_lmax, &lmax);
    if (rc != AA_OK)
      return rc;
  }

  /* Rules that tie the fields together. */
  path_key(p1, path, "classes");
  if (pp->classes_kind == AA__CLASSES_EXPLICIT) {
    uint64_t last = pp->explicit_classes[pp->n_explicit - 1].block_size;
    if (have_max && last != pp->max_small) {
      path_index(p2, p1, pp->n_explicit - 1);
      return fail(v, p2,
                  "the largest class %llu is not max_small %llu (they must be "
                  "equal)",
                  (unsigned long long)last, (unsigned long long)pp->max_small);
    }
    pp->max_small = last;
    have_max = true;
  } else {
    size_t count;
    if (have_lmax) {
      if (have_max && lmax != pp->max_small) {
        path_key(p2, p1, "max");
        return fail(v, p2,
                    "%llu is not max_small %llu (the ladder's top class is "
                    "max_small)",
                    (unsigned long long)lmax, (unsigned long long)pp->max_small);
      }
      pp->max_small = lmax;
      have_max = true;
    }
    if (pp->ladder_min > pp->max_small) {
      path_key(p2, p1, "min");
      return fail(v, p2, "%llu is larger than max_small %llu",
                  (unsigned long long)pp->ladder_min,
                  (unsigned long long)pp->max_small);
    }
    count = aa__ladder_expand(pp->ladder_min, pp->max_small,
                              pp->ladder_per_doubling, NULL, 0);
    if (count > AA_MAX_CLASSES)
      return fail(v, p1, "the ladder has %zu classes, more than %u", count,
                  AA_MAX_CLASSES);
  }
  if (pp->max_small > pp->slab_size) {
    if (have_slab) {
      path_key(p2, path, "slab_size");
      return fail(v, p2, "%llu is smaller than the largest class %llu",
                  (unsigned long long)pp->slab_size,
                  (unsigned long long)pp->max_small);
    }
    path_key(p2, path, "max_small");
    return fail(v, p2, "%llu is larger than slab_size %llu",
                (unsigned long long)pp->max_small,
                (unsigned long long)pp->slab_size);
  }
  if (pp->limit_bytes != 0 && pp->limit_bytes < pp->slab_size) {
    path_key(p2, path, "limit_bytes");
    return fail(v, p2, "%llu is below one slab (slab_size %llu)",
                (unsigned long long)pp->limit_bytes,
                (unsigned long long)pp->slab_size);
  }
  if (pp->classes_kind == AA__CLASSES_EXPLICIT && pp->limit_bytes != 0) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < pp->n_explicit; i++) {
      const aa_class_spec *cs = &pp->explicit_classes[i];
      total += (uint64_t)cs->prefill * cs->block_size;
      if (total > pp->limit_bytes) {
        char p3[PATH_CAP];
        path_index(p2, p1, i);
        path_key(p3, p2, "prefill");
        return fail(v, p3,
                    "prefill brings the pool's prefilled bytes to %llu, over "
                    "limit_bytes %llu",
                    (unsigned long long)total,
                    (unsigned long long)pp->limit_bytes);
      }
    }
  }
  return AA_OK;
}

static int cmp_region(const void *a, const void *b) {
  return strcmp(((const aa__region_policy *)a)->name,
                ((const aa__region_policy *)b)->name);
}

/* pools.regions: {"<name>": a pool section, ...}. Each section starts from
 * pools.device as parsed (so it only says what differs); one that sets
 * max_small but not classes over an explicit inherited table gets the default
 * ladder up to its max_small. Sorted by name afterwards. */
static int regions_from(vctx *v, const cJSON *obj, const char *path,
                        aa_policy *p) {
  char p1[PATH_CAP], why[AA_POLICY_ERR_CAP];
  size_t n = 0;
  int rc;

  if (!cJSON_IsObject(obj))
    return fail(v, path, "expected an object of region sections, got %s",
                type_name(obj));
  for (const cJSON *c = obj->child; c != NULL; c = c->next)
    n++;
  if (n > AA_POLICY_MAX_REGIONS)
    return fail(v, path, "%zu regions, more than %d", n, AA_POLICY_MAX_REGIONS);
  for (const cJSON *c = obj->child; c != NULL; c = c->next) {
    const char *k = c->string != NULL ? c->string : "";
    aa__region_policy *r = &p->regions[p->n_regions];
    path_key(p1, path, k);
    if (aa_policy_region_name_check(k, why, sizeof why) != AA_OK)
      return fail(v, p1, "not a region name: %s", why);
    if (!cJSON_IsObject(c))
      return fail(v, p1, "expected an object, got %s", type_name(c));
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", k);
    r->pool = p->pools[0];
    if (member(c, "max_small") != NULL && member(c, "classes") == NULL &&
        r->pool.classes_kind == AA__CLASSES_EXPLICIT) {
      r->pool.classes_kind = AA__CLASSES_LADDER;
      r->pool.n_explicit = 0;
      r->pool.ladder_min = AA_DEFAULT_MIN_BLOCK;
      r->pool.ladder_per_doubling = AA__POLICY_DEF_PER_DOUBLING;
    }
    rc = pool_from(v, c, p1, &r->pool);
    if (rc != AA_OK)
      return rc;
    p->n_regions++;
  }
  qsort(p->regions, p->n_regions, sizeof p->regions[0], cmp_region);
  return AA_OK;
}

static int adapt_from(vctx *v, const cJSON *obj, const char *path,
                      aa_adapt_params *a) {
  static const char *const keys[] = {"enabled",
                                     "interval_ms",
                                     "max_classes",
                                     "max_adds_per_interval",
                                     "min_requests",
                                     "hot_fraction",
                                     "waste_threshold",
                                     "miss_rate_threshold",
                                     "prefill_max_bytes",
                                     "cold_intervals",
                                     "trim_threshold_bytes",
                                     "hysteresis",
                                     NULL};
  static const char *const hkeys[] = {"min_class_age", "readd_cooldown",
                                      "grow_cooldown", "trim_cooldown", NULL};
  char p1[PATH_CAP];
  const cJSON *it;
  int rc;

  rc = check_object(v, obj, path, keys);
  if (rc == AA_OK)
    rc = opt_bool(v, obj, path, "enabled", &a->enabled);
  if (rc == AA_OK)
    rc = opt_u32(v, obj, path, "interval_ms", 10, 3600000, &a->interval_ms);
  if (rc == AA_OK)
    rc = opt_u32(v, obj, path, "max_classes", 1, AA_MAX_CLASSES,
                 &a->max_classes);
  if (rc == AA_OK)
    rc = opt_u32(v, obj, path, "max_adds_per_interval", 0, AA_MAX_CLASSES,
                 &a->max_adds_per_interval);
  if (rc == AA_OK)
    rc = opt_uint(v, obj, path, "min_requests", 1, MAX_U53, &a->min_requests);
  if (rc == AA_OK)
    rc = opt_frac(v, obj, path, "hot_fraction", true, false, &a->hot_fraction);
  if (rc == AA_OK)
    rc = opt_frac(v, obj, path, "waste_threshold", false, true,
                  &a->waste_threshold);
  if (rc == AA_OK)
    rc = opt_frac(v, obj, path, "miss_rate_threshold", true, false,
                  &a->miss_rate_threshold);
  if (rc == AA_OK)
    rc = opt_uint(v, obj, path, "prefill_max_bytes", 0, MAX_U53,
                  &a->prefill_max_bytes);
  if (rc == AA_OK)
    rc = opt_u32(v, obj, path, "cold_intervals", 1, 1000000,
                 &a->cold_intervals);
  if (rc == AA_OK)
    rc = opt_uint(v, obj, path, "trim_threshold_bytes", 0, MAX_U53,
                  &a->trim_threshold_bytes);
  if (rc != AA_OK)
    return rc;
  it = FIELD(obj, "hysteresis", p1, path);
  if (it != NULL) {
    rc = check_object(v, it, p1, hkeys);
    if (rc == AA_OK)
      rc = opt_u32(v, it, p1, "min_class_age", 0, 1000000, &a->min_class_age);
    if (rc == AA_OK)
      rc = opt_u32(v, it, p1, "readd_cooldown", 0, 1000000, &a->readd_cooldown);
    if (rc == AA_OK)
      rc = opt_u32(v, it, p1, "grow_cooldown", 0, 1000000, &a->grow_cooldown);
    if (rc == AA_OK)
      rc = opt_u32(v, it, p1, "trim_cooldown", 0, 1000000, &a->trim_cooldown);
  }
  return rc;
}

static int telemetry_from(vctx *v, const cJSON *obj, const char *path,
                          aa_telemetry_params *t) {
  static const char *const keys[] = {"snapshot_interval_ms", "trace",
                                     "histogram", "retention", NULL};
  static const char *const rkeys[] = {"max_bytes", "max_age_s", NULL};
  char p1[PATH_CAP], p2[PATH_CAP];
  const cJSON *it, *f;
  int rc;

  rc = check_object(v, obj, path, keys);
  if (rc == AA_OK)
    rc = opt_u32(v, obj, path, "snapshot_interval_ms", 100, 86400000,
                 &t->snapshot_interval_ms);
  if (rc == AA_OK)
    rc = opt_bool(v, obj, path, "trace", &t->trace);
  if (rc == AA_OK)
    rc = opt_bool(v, obj, path, "histogram", &t->histogram);
  if (rc != AA_OK)
    return rc;
  it = FIELD(obj, "retention", p1, path);
  if (it != NULL) {
    rc = check_object(v, it, p1, rkeys);
    if (rc != AA_OK)
      return rc;
    f = FIELD(it, "max_bytes", p2, p1);
    if (f != NULL) {
      rc = get_uint(v, f, p2, 0, MAX_U53, &t->retention_bytes);
      if (rc != AA_OK)
        return rc;
      if (t->retention_bytes != 0 && t->retention_bytes < MIB)
        return fail(v, p2, "%llu is below the 1 MiB minimum (0 means no bound)",
                    (unsigned long long)t->retention_bytes);
    }
    rc = opt_uint(v, it, p1, "max_age_s", 0, 10ull * 366 * 24 * 3600,
                  &t->retention_age_s);
  }
  return rc;
}

int aa__policy_from_tree(const cJSON *root, aa_policy *out, char *err,
                         size_t errcap) {
  static const char *const keys[] = {"$schema", "version", "name",
                                     "description", "pools", "adapt",
                                     "telemetry", NULL};
  static const char *const pkeys[] = {"device", "pinned", "host", "regions",
                                      NULL};
  char p1[PATH_CAP], p2[PATH_CAP];
  const cJSON *it, *f;
  vctx v = {err, errcap};
  aa_policy *p = out;
  int rc;

  aa__policy_defaults(p);
  rc = check_object(&v, root, "", keys);
  if (rc != AA_OK)
    goto done;
  it = FIELD(root, "$schema", p1, "");
  if (it != NULL && !cJSON_IsString(it)) {
    rc = fail(&v, p1, "expected a string, got %s", type_name(it));
    goto done;
  }
  it = FIELD(root, "version", p1, "");
  if (it != NULL) {
    rc = get_uint(&v, it, p1, 0, MAX_U53, &p->version);
    if (rc != AA_OK)
      goto done;
  }
  it = FIELD(root, "name", p1, "");
  if (it != NULL) {
    rc = get_string(&v, it, p1, p->name, sizeof p->name);
    if (rc != AA_OK)
      goto done;
  }
  it = FIELD(root, "description", p1, "");
  if (it != NULL) {
    rc = get_string(&v, it, p1, p->description, sizeof p->description);
    if (rc != AA_OK)
      goto done;
  }
  it = FIELD(root, "pools", p1, "");
  if (it != NULL) {
    rc = check_object(&v, it, p1, pkeys);
    if (rc != AA_OK)
      goto done;
    for (int i = 0; i < AA__POLICY_POOLS; i++) {
      f = FIELD(it, aa__policy_pool_names[i], p2, p1);
      if (f == NULL)
        continue;
      rc = pool_from(&v, f, p2, &p->pools[i]);
      if (rc != AA_OK)
        goto done;
    }
    /* after pools.device: a region section starts from it */
    f = FIELD(it, "regions", p2, p1);
    if (f != NULL) {
      rc = regions_from(&v, f, p2, p);
      if (rc != AA_OK)
        goto done;
    }
  }
  it = FIELD(root, "adapt", p1, "");
  if (it != NULL) {
    rc = adapt_from(&v, it, p1, &p->adapt);
    if (rc != AA_OK)
      goto done;
  }
  it = FIELD(root, "telemetry", p1, "");
  if (it != NULL) {
    rc = telemetry_from(&v, it, p1, &p->telemetry);
    if (rc != AA_OK)
      goto done;
  }
  if (p->adapt.enabled && !p->telemetry.histogram) {
    rc = fail(&v, "adapt.enabled",
              "the loop needs telemetry.histogram (heavy hitters) to be true");
    goto done;
  }
  /* What a policy may prefill is bounded like what the loop may: by
   * adapt.prefill_max_bytes per pool (limit_bytes was checked above; the
   * memory the machine has is checked where the policy is applied). */
  for (uint32_t i = 0; i < AA__POLICY_POOLS + p->n_regions; i++) {
    const aa__pool_policy *pp = i < AA__POLICY_POOLS
                                    ? &p->pools[i]
                                    : &p->regions[i - AA__POLICY_POOLS].pool;
    uint64_t total = 0;
    if (pp->classes_kind != AA__CLASSES_EXPLICIT)
      continue;
    for (uint32_t k = 0; k < pp->n_explicit; k++) {
      total += (uint64_t)pp->explicit_classes[k].prefill *
               pp->explicit_classes[k].block_size;
      if (total > p->adapt.prefill_max_bytes) {
        char p3[PATH_CAP];
        if (i < AA__POLICY_POOLS)
          snprintf(p1, sizeof p1, "pools.%s.classes", aa__policy_pool_names[i]);
        else
          snprintf(p1, sizeof p1, "pools.regions.%s.classes",
                   p->regions[i - AA__POLICY_POOLS].name);
        path_index(p2, p1, k);
        path_key(p3, p2, "prefill");
        rc = fail(&v, p3,
                  "prefill brings the pool's prefilled bytes to %llu, over "
                  "adapt.prefill_max_bytes %llu (the most a policy or the "
                  "loop may prefill in one pool)",
                  (unsigned long long)total,
                  (unsigned long long)p->adapt.prefill_max_bytes);
        goto done;
      }
    }
  }
done:
  if (rc != AA_OK)
    aa__policy_defaults(p);
  return rc;
}
