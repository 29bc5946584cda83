/*
 * policy_tree.c — the first stage of the policy parser: a pre-scan of the
 * raw bytes (size limit, NUL bytes, UTF-8, nesting depth, all before cJSON
 * sees anything), cJSON's length-bounded parser, a check for trailing
 * bytes, and a whole-tree scan for duplicate keys (cJSON keeps them).
 * Entry point: aa__policy_parse_tree.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy_parse.h"

/* ------------------------------------------------------------ pre-scan */

/* Appends to err when there is one (err may be NULL). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void
err_add(aa__buf *err, const char *fmt, ...) {
  va_list ap;
  if (err == NULL)
    return;
  va_start(ap, fmt);
  aa__buf_vprintf(err, fmt, ap);
  va_end(ap);
}

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

static int prescan(const char *json, size_t len, aa__buf *err) {
  const unsigned char *s = (const unsigned char *)json;
  bool nul = false;
  size_t bad;
  unsigned depth = 0;
  bool in_str = false;

  if (len == 0) {
    err_add(err, "(root): empty document");
    return AA_EPARSE;
  }
  if (len > AA_POLICY_MAX_BYTES) {
    err_add(err,
            "(root): document is %zu bytes, over the %u-byte limit", len,
            (unsigned)AA_POLICY_MAX_BYTES);
    return AA_EPARSE;
  }
  bad = utf8_bad_at(s, len, &nul);
  if (bad < len) {
    unsigned l, c;
    line_col(json, bad, &l, &c);
    if (nul)
      err_add(err,
              "(root): NUL byte at byte offset %zu (line %u, column %u)",
              bad, l, c);
    else
      err_add(err,
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
        err_add(err,
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
      err_add(v->err, "(root): out of memory");
      return AA_ENOMEM;
    }
    for (c = item->child; c != NULL; c = c->next)
      names[i++] = c->string != NULL ? c->string : "";
    qsort(names, n, sizeof *names, cmp_name);
    for (i = 1; i < n; i++) {
      if (strcmp(names[i - 1], names[i]) == 0) {
        aa__pv_path_key(child, path, names[i]);
        rc = aa__pv_fail(v, child, "duplicate key");
        goto done;
      }
    }
  }
  i = 0;
  for (c = item->child; c != NULL; c = c->next, i++) {
    if (cJSON_IsObject(item))
      aa__pv_path_key(child, path, c->string != NULL ? c->string : "");
    else
      aa__pv_path_index(child, path, i);
    rc = dup_scan(v, c, child);
    if (rc != AA_OK)
      goto done;
  }
done:
  free(names);
  return rc;
}

int aa__policy_parse_tree(const char *json, size_t len, cJSON **out, aa__buf *err) {
  const char *end = NULL;
  const char *doc = json;
  size_t doc_len = len;
  cJSON *root = NULL;
  aa__json_numbers nums;
  vctx v = {err};
  int rc;

  *out = NULL;
  memset(&nums, 0, sizeof nums);
  rc = prescan(json, len, err);
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
    err_add(err, "(root): malformed JSON at line %u, column %u", l, c);
    rc = AA_EPARSE;
    goto done;
  }
  if (end != NULL && end >= json && end <= json + len) {
    for (const char *q = end; q < json + len; q++) {
      if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
        unsigned l, c;
        line_col(json, (size_t)(q - json), &l, &c);
        err_add(err,
                "(root): unexpected data after the document at line %u, "
                "column %u",
                l, c);
        rc = AA_EPARSE;
        goto done;
      }
    }
  }
  /* What cJSON accepts but JSON is not (leading zeros, raw control bytes,
   * \u0000, a second byte-order mark): refused whole. The same scan lists
   * the number tokens, whose texts the tree then keeps. */
  rc = aa__json_strict_check(doc, doc_len, AA_POLICY_MAX_DEPTH, SIZE_MAX, err, &nums);
  if (rc != AA_OK)
    goto done;
  rc = aa__json_text_attach(root, doc, &nums);
  if (rc != AA_OK) {
    err_add(err, "(root): out of memory");
    goto done;
  }
  rc = dup_scan(&v, root, "");
  if (rc != AA_OK)
    goto done;
  *out = root;
  root = NULL;
done:
  aa__json_numbers_free(&nums);
  cJSON_Delete(root);
  return rc;
}
