/*
 * policy_json.c — policy to JSON text, and RFC 7386 merge patch.
 *
 * aa_policy_to_json writes every field explicitly with its own small writer
 * (not cJSON_Print, whose number printing may drop digits of integers above
 * 10^15): integers exactly, fractions in the shortest form that reads back to
 * the same double. aa_policy_merge_patch turns the base into a tree, merges
 * the patch tree into it (null deletes, objects merge, anything else
 * replaces) and validates the result as a whole document.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_model.h"

/* ------------------------------------------------------------ writer */

typedef struct sbuf {
  char *buf;
  size_t len;
  size_t cap;
  bool oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
  if (b->oom)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t ncap = b->cap ? b->cap : 4096;
    char *nb;
    while (b->len + n + 1 > ncap)
      ncap *= 2;
    nb = realloc(b->buf, ncap);
    if (nb == NULL) {
      b->oom = true;
      return;
    }
    b->buf = nb;
    b->cap = ncap;
  }
  memcpy(b->buf + b->len, s, n);
  b->len += n;
  b->buf[b->len] = '\0';
}

static void sb_printf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) {
    b->oom = true;
    return;
  }
  sb_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void sb_str(sbuf *b, const char *s) {
  sb_put(b, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      char e[2] = {'\\', (char)*p};
      sb_put(b, e, 2);
    } else if (*p < 0x20) {
      sb_printf(b, "\\u%04x", *p);
    } else {
      sb_put(b, (const char *)p, 1);
    }
  }
  sb_put(b, "\"", 1);
}

static void sb_u64(sbuf *b, uint64_t v) { sb_printf(b, "%llu", (unsigned long long)v); }

/* Shortest %g form that reads back as exactly d. */
static void sb_double(sbuf *b, double d) {
  char tmp[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, d);
    if (strtod(tmp, NULL) == d)
      break;
  }
  sb_put(b, tmp, strlen(tmp));
}

static void write_pool(sbuf *b, const aa__pool_policy *pp) {
  sb_printf(b, "{\n      \"slab_size\": ");
  sb_u64(b, pp->slab_size);
  sb_printf(b, ",\n      \"max_small\": ");
  sb_u64(b, pp->max_small);
  if (pp->classes_kind == AA__CLASSES_LADDER) {
    sb_printf(b, ",\n      \"classes\": {\"min\": ");
    sb_u64(b, pp->ladder_min);
    sb_printf(b, ", \"per_doubling\": %u}", pp->ladder_per_doubling);
  } else {
    sb_printf(b, ",\n      \"classes\": [");
    for (uint32_t i = 0; i < pp->n_explicit; i++) {
      const aa_class_spec *cs = &pp->explicit_classes[i];
      if (i > 0)
        sb_printf(b, ",");
      sb_printf(b, "\n        ");
      if (cs->cache_limit == 0 && cs->prefill == 0) {
        sb_u64(b, cs->block_size);
      } else {
        sb_printf(b, "{\"size\": ");
        sb_u64(b, cs->block_size);
        sb_printf(b, ", \"cache_limit\": %u, \"prefill\": %u}", cs->cache_limit,
                  cs->prefill);
      }
    }
    sb_printf(b, "\n      ]");
  }
  sb_printf(b, ",\n      \"tcache\": {\"blocks\": %u, \"bytes\": ",
            pp->tcache_blocks);
  sb_u64(b, pp->tcache_bytes);
  sb_printf(b, "},\n      \"large\": {\"mode\": \"%s\", \"cache_bytes\": ",
            aa_large_mode_name(pp->large_mode));
  sb_u64(b, pp->large_cache_bytes);
  sb_printf(b, "},\n      \"limit_bytes\": ");
  sb_u64(b, pp->limit_bytes);
  sb_printf(b, "\n    }");
}

char *aa_policy_to_json(const aa_policy *p) {
  sbuf b = {NULL, 0, 0, false};
  const aa_adapt_params *a;
  const aa_telemetry_params *t;

  if (p == NULL)
    return NULL;
  a = &p->adapt;
  t = &p->telemetry;
  sb_printf(&b, "{\n  \"version\": ");
  sb_u64(&b, p->version);
  if (p->name[0] != '\0') {
    sb_printf(&b, ",\n  \"name\": ");
    sb_str(&b, p->name);
  }
  if (p->description[0] != '\0') {
    sb_printf(&b, ",\n  \"description\": ");
    sb_str(&b, p->description);
  }
  sb_printf(&b, ",\n  \"pools\": {");
  for (int i = 0; i < AA__POLICY_POOLS; i++) {
    sb_printf(&b, "%s\n    \"%s\": ", i ? "," : "", aa__policy_pool_names[i]);
    write_pool(&b, &p->pools[i]);
  }
  sb_printf(&b, "\n  },\n  \"adapt\": {\n    \"enabled\": %s",
            a->enabled ? "true" : "false");
  sb_printf(&b, ",\n    \"interval_ms\": %u", a->interval_ms);
  sb_printf(&b, ",\n    \"max_classes\": %u", a->max_classes);
  sb_printf(&b, ",\n    \"max_adds_per_interval\": %u", a->max_adds_per_interval);
  sb_printf(&b, ",\n    \"min_requests\": ");
  sb_u64(&b, a->min_requests);
  sb_printf(&b, ",\n    \"hot_fraction\": ");
  sb_double(&b, a->hot_fraction);
  sb_printf(&b, ",\n    \"waste_threshold\": ");
  sb_double(&b, a->waste_threshold);
  sb_printf(&b, ",\n    \"miss_rate_threshold\": ");
  sb_double(&b, a->miss_rate_threshold);
  sb_printf(&b, ",\n    \"prefill_max_bytes\": ");
  sb_u64(&b, a->prefill_max_bytes);
  sb_printf(&b, ",\n    \"cold_intervals\": %u", a->cold_intervals);
  sb_printf(&b, ",\n    \"trim_threshold_bytes\": ");
  sb_u64(&b, a->trim_threshold_bytes);
  sb_printf(&b,
            ",\n    \"hysteresis\": {\"min_class_age\": %u, \"readd_cooldown\": "
            "%u, \"grow_cooldown\": %u, \"trim_cooldown\": %u}",
            a->min_class_age, a->readd_cooldown, a->grow_cooldown,
            a->trim_cooldown);
  sb_printf(&b, "\n  },\n  \"telemetry\": {\n    \"snapshot_interval_ms\": %u",
            t->snapshot_interval_ms);
  sb_printf(&b, ",\n    \"trace\": %s", t->trace ? "true" : "false");
  sb_printf(&b, ",\n    \"histogram\": %s", t->histogram ? "true" : "false");
  sb_printf(&b, ",\n    \"retention\": {\"max_bytes\": ");
  sb_u64(&b, t->retention_bytes);
  sb_printf(&b, ", \"max_age_s\": ");
  sb_u64(&b, t->retention_age_s);
  sb_printf(&b, "}\n  }\n}\n");
  if (b.oom) {
    free(b.buf);
    return NULL;
  }
  return b.buf;
}

/* ------------------------------------------------------------ merge patch */

cJSON *aa__json_merge_patch(cJSON *target, const cJSON *patch) {
  if (!cJSON_IsObject(patch)) {
    cJSON_Delete(target);
    return cJSON_Duplicate(patch, 1);
  }
  if (target == NULL || !cJSON_IsObject(target)) {
    cJSON_Delete(target);
    target = cJSON_CreateObject();
    if (target == NULL)
      return NULL;
  }
  for (const cJSON *m = patch->child; m != NULL; m = m->next) {
    cJSON *old, *nv;
    if (m->string == NULL)
      continue;
    if (cJSON_IsNull(m)) {
      cJSON_DeleteItemFromObjectCaseSensitive(target, m->string);
      continue;
    }
    old = cJSON_DetachItemFromObjectCaseSensitive(target, m->string);
    nv = aa__json_merge_patch(old, m);
    if (nv == NULL) {
      cJSON_Delete(target);
      return NULL;
    }
    if (!cJSON_AddItemToObject(target, m->string, nv)) {
      cJSON_Delete(nv);
      cJSON_Delete(target);
      return NULL;
    }
  }
  return target;
}

int aa_policy_merge_patch(const aa_policy *base, const char *patch, size_t len,
                          aa_policy **out, char *err, size_t errcap) {
  char *base_json = NULL;
  cJSON *target = NULL, *ptree = NULL;
  aa_policy *p = NULL;
  int rc;

  if (err != NULL && errcap > 0)
    err[0] = '\0';
  if (out == NULL) {
    aa__policy_errf(err, errcap, "(root): no output pointer given");
    return AA_EINVAL;
  }
  *out = NULL;
  if (base == NULL || patch == NULL) {
    aa__policy_errf(err, errcap, "(root): no base policy or patch given");
    return AA_EINVAL;
  }
  rc = aa__policy_parse_tree(patch, len, &ptree, err, errcap);
  if (rc != AA_OK)
    goto done;
  base_json = aa_policy_to_json(base);
  if (base_json != NULL)
    target = cJSON_Parse(base_json);
  if (target == NULL) {
    aa__policy_errf(err, errcap, "(root): out of memory");
    rc = AA_ENOMEM;
    goto done;
  }
  target = aa__json_merge_patch(target, ptree);
  p = malloc(sizeof *p);
  if (target == NULL || p == NULL) {
    aa__policy_errf(err, errcap, "(root): out of memory");
    rc = AA_ENOMEM;
    goto done;
  }
  rc = aa__policy_from_tree(target, p, err, errcap);
  if (rc != AA_OK)
    goto done;
  *out = p;
  p = NULL;
done:
  free(p);
  cJSON_Delete(target);
  cJSON_Delete(ptree);
  free(base_json);
  return rc;
}
