/*
 * policy_json.c — policy to JSON text, and RFC 7386 merge patch.
 *
 * aa_policy_to_json writes every field explicitly with the shared string
 * builder (adaptalloc/internal/util.h; not cJSON_Print, whose number printing may drop digits of integers above
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
#include "adaptalloc/internal/util.h"

/* ------------------------------------------------------------ writer */

static void sb_str(aa__buf *b, const char *s) { aa__buf_json_cstr(b, s); }

static void sb_u64(aa__buf *b, uint64_t v) { aa__buf_printf(b, "%llu", (unsigned long long)v); }

/* Shortest %g form that reads back as exactly d. */
static void sb_double(aa__buf *b, double d) {
  char tmp[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*g", prec, d);
    if (strtod(tmp, NULL) == d)
      break;
  }
  aa__buf_append(b, tmp, strlen(tmp));
}

/* base: the section a region starts from (pools.device), whose values its
 * keys written "only when set" are compared with; NULL for pools.device,
 * pinned and host, compared with the defaults. A region that turned off
 * what the device pool turned on (or set another share) kept the device's
 * value through a round trip before. */
static void write_pool(aa__buf *b, const aa__pool_policy *pp, const aa__pool_policy *base) {
  aa__buf_printf(b, "{\n      \"slab_size\": ");
  sb_u64(b, pp->slab_size);
  aa__buf_printf(b, ",\n      \"max_small\": ");
  sb_u64(b, pp->max_small);
  if (pp->classes_kind == AA__CLASSES_LADDER) {
    aa__buf_printf(b, ",\n      \"classes\": {\"min\": ");
    sb_u64(b, pp->ladder_min);
    aa__buf_printf(b, ", \"per_doubling\": %u}", pp->ladder_per_doubling);
  } else {
    aa__buf_printf(b, ",\n      \"classes\": [");
    for (uint32_t i = 0; i < pp->n_explicit; i++) {
      const aa_class_spec *cs = &pp->explicit_classes[i];
      if (i > 0)
        aa__buf_printf(b, ",");
      aa__buf_printf(b, "\n        ");
      if (cs->cache_limit == 0 && cs->prefill == 0) {
        sb_u64(b, cs->block_size);
      } else {
        aa__buf_printf(b, "{\"size\": ");
        sb_u64(b, cs->block_size);
        aa__buf_printf(b, ", \"cache_limit\": %u, \"prefill\": %u}", cs->cache_limit,
                       cs->prefill);
      }
    }
    aa__buf_printf(b, "\n      ]");
  }
  aa__buf_printf(b, ",\n      \"tcache\": {\"blocks\": %u, \"bytes\": ",
                 pp->tcache_blocks);
  sb_u64(b, pp->tcache_bytes);
  aa__buf_printf(b, "},\n      \"large\": {\"mode\": \"%s\", \"cache_bytes\": ",
                 aa_large_mode_name(pp->large_mode));
  sb_u64(b, pp->large_cache_bytes);
  /* written only when set: unlike the default, or a region's unlike its base */
#define SET(f, dflt) (base != NULL ? pp->f != base->f : pp->f != (dflt))
  if (SET(large_page_bytes, 0)) { /* a rare knob */
    aa__buf_printf(b, ", \"page_bytes\": ");
    sb_u64(b, pp->large_page_bytes);
  }
  /* always: its default differs between pools */
  aa__buf_printf(b, ", \"map_runs\": %s", pp->large_map_runs ? "true" : "false");
  if (SET(large_map_run_pages, AA_LARGE_MAP_RUN_MAX))
    aa__buf_printf(b, ", \"map_run_pages\": %llu", (unsigned long long)pp->large_map_run_pages);
  if (SET(large_map_run_min_bytes, 0)) {
    aa__buf_printf(b, ", \"map_run_min_bytes\": ");
    sb_u64(b, pp->large_map_run_min_bytes);
  }
  if (SET(large_stream_wait, true)) /* the default is on everywhere */
    aa__buf_printf(b, ", \"stream_wait\": %s", pp->large_stream_wait ? "true" : "false");
  if (SET(large_stitch, false)) /* off by default */
    aa__buf_printf(b, ", \"stitch\": %s", pp->large_stitch ? "true" : "false");
  if (SET(large_stitch_grow, false)) /* likewise (only with stitch) */
    aa__buf_printf(b, ", \"stitch_grow\": %s", pp->large_stitch_grow ? "true" : "false");
  if (SET(large_stitch_share, AA_DEFAULT_STITCH_SHARE)) {
    aa__buf_printf(b, ", \"stitch_share\": ");
    sb_double(b, pp->large_stitch_share);
  }
  if (SET(large_plan, false)) /* off by default */
    aa__buf_printf(b, ", \"plan\": %s", pp->large_plan ? "true" : "false");
#undef SET
  aa__buf_printf(b, "},\n      \"limit_bytes\": ");
  sb_u64(b, pp->limit_bytes);
  aa__buf_printf(b, ",\n      \"backend\": \"%s\"", pp->managed ? "managed" : "default");
  if (pp->managed) { /* advice and the cap mean something only here */
    aa__buf_printf(b,
                   ",\n      \"advise\": {\"preferred_location\": \"%s\", "
                   "\"accessed_by\": \"%s\", \"read_mostly\": %s}",
                   aa_managed_location_name(pp->advise_preferred),
                   aa_managed_location_name(pp->advise_accessed_by),
                   pp->advise_read_mostly ? "true" : "false");
    aa__buf_printf(b, ",\n      \"allow_oversubscribe\": %s",
                   pp->allow_oversubscribe ? "true" : "false");
  }
  aa__buf_printf(b, "\n    }");
}

char *aa_policy_to_json(const aa_policy *p) {
  aa__buf b;
  char *out;
  const aa_adapt_params *a;
  const aa_telemetry_params *t;

  if (p == NULL)
    return NULL;
  aa__buf_init(&b);
  a = &p->adapt;
  t = &p->telemetry;
  aa__buf_printf(&b, "{\n  \"version\": ");
  sb_u64(&b, p->version);
  if (p->name[0] != '\0') {
    aa__buf_printf(&b, ",\n  \"name\": ");
    sb_str(&b, p->name);
  }
  if (p->description[0] != '\0') {
    aa__buf_printf(&b, ",\n  \"description\": ");
    sb_str(&b, p->description);
  }
  aa__buf_printf(&b, ",\n  \"pools\": {");
  for (int i = 0; i < AA__POLICY_POOLS; i++) {
    aa__buf_printf(&b, "%s\n    \"%s\": ", i ? "," : "", aa__policy_pool_names[i]);
    write_pool(&b, &p->pools[i], NULL);
  }
  if (p->n_regions > 0) {
    aa__buf_printf(&b, ",\n    \"regions\": {");
    for (uint32_t i = 0; i < p->n_regions; i++) {
      aa__buf_printf(&b, "%s\n    ", i ? "," : "");
      sb_str(&b, p->regions[i].name);
      aa__buf_printf(&b, ": ");
      write_pool(&b, &p->regions[i].pool, &p->pools[0]); /* a region starts from pools.device */
    }
    aa__buf_printf(&b, "\n    }");
  }
  aa__buf_printf(&b, "\n  },\n  \"adapt\": {\n    \"enabled\": %s",
                 a->enabled ? "true" : "false");
  aa__buf_printf(&b, ",\n    \"interval_ms\": %u", a->interval_ms);
  aa__buf_printf(&b, ",\n    \"max_classes\": %u", a->max_classes);
  aa__buf_printf(&b, ",\n    \"max_adds_per_interval\": %u", a->max_adds_per_interval);
  aa__buf_printf(&b, ",\n    \"min_requests\": ");
  sb_u64(&b, a->min_requests);
  aa__buf_printf(&b, ",\n    \"hot_fraction\": ");
  sb_double(&b, a->hot_fraction);
  aa__buf_printf(&b, ",\n    \"waste_threshold\": ");
  sb_double(&b, a->waste_threshold);
  aa__buf_printf(&b, ",\n    \"miss_rate_threshold\": ");
  sb_double(&b, a->miss_rate_threshold);
  aa__buf_printf(&b, ",\n    \"prefill_max_bytes\": ");
  sb_u64(&b, a->prefill_max_bytes);
  aa__buf_printf(&b, ",\n    \"cold_intervals\": %u", a->cold_intervals);
  aa__buf_printf(&b, ",\n    \"trim_threshold_bytes\": ");
  sb_u64(&b, a->trim_threshold_bytes);
  aa__buf_printf(&b,
                 ",\n    \"hysteresis\": {\"min_class_age\": %u, \"readd_cooldown\": "
                 "%u, \"grow_cooldown\": %u, \"trim_cooldown\": %u}",
                 a->min_class_age, a->readd_cooldown, a->grow_cooldown,
                 a->trim_cooldown);
  aa__buf_printf(&b, "\n  },\n  \"telemetry\": {\n    \"snapshot_interval_ms\": %u",
                 t->snapshot_interval_ms);
  aa__buf_printf(&b, ",\n    \"trace\": %s", t->trace ? "true" : "false");
  aa__buf_printf(&b, ",\n    \"histogram\": %s", t->histogram ? "true" : "false");
  aa__buf_printf(&b, ",\n    \"retention\": {\"max_bytes\": ");
  sb_u64(&b, t->retention_bytes);
  aa__buf_printf(&b, ", \"max_age_s\": ");
  sb_u64(&b, t->retention_age_s);
  aa__buf_printf(&b, "},\n    \"trace_sample\": %u", t->trace_sample);
  aa__buf_printf(&b, ",\n    \"trace_min_bytes\": ");
  sb_u64(&b, t->trace_min_bytes);
  aa__buf_printf(&b, ",\n    \"trace_seconds\": %u", t->trace_seconds);
  aa__buf_printf(&b, ",\n    \"trace_max_events\": ");
  sb_u64(&b, t->trace_max_events);
  aa__buf_printf(&b, "\n  }\n}\n");
  if (aa__buf_take(&b, &out, NULL) != AA_OK)
    return NULL;
  return out;
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

static int merge_patch(const aa_policy *base, const char *patch, size_t len,
                       aa_policy **out, aa__buf *err) {
  char *base_json = NULL;
  cJSON *target = NULL, *ptree = NULL;
  aa_policy *p = NULL;
  int rc;

  if (out == NULL) {
    aa__buf_puts(err, "(root): no output pointer given");
    return AA_EINVAL;
  }
  *out = NULL;
  if (base == NULL || patch == NULL) {
    aa__buf_puts(err, "(root): no base policy or patch given");
    return AA_EINVAL;
  }
  rc = aa__policy_parse_tree(patch, len, &ptree, err);
  if (rc != AA_OK)
    goto done;
  base_json = aa_policy_to_json(base);
  if (base_json != NULL)
    target = cJSON_Parse(base_json);
  if (target == NULL) {
    aa__buf_puts(err, "(root): out of memory");
    rc = AA_ENOMEM;
    goto done;
  }
  target = aa__json_merge_patch(target, ptree);
  p = malloc(sizeof *p);
  if (target == NULL || p == NULL) {
    aa__buf_puts(err, "(root): out of memory");
    rc = AA_ENOMEM;
    goto done;
  }
  rc = aa__policy_from_tree(target, p, err);
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

int aa_policy_merge_patch_msg(const aa_policy *base, const char *patch,
                              size_t len, aa_policy **out, char **errmsg) {
  aa__buf b;
  int rc;

  if (errmsg != NULL)
    *errmsg = NULL;
  aa__buf_init(&b);
  rc = merge_patch(base, patch, len, out, &b);
  if (rc != AA_OK && errmsg != NULL && aa__buf_take(&b, errmsg, NULL) != AA_OK)
    *errmsg = NULL;
  aa__buf_free(&b);
  return rc;
}

int aa_policy_merge_patch(const aa_policy *base, const char *patch, size_t len,
                          aa_policy **out, char *err, size_t errcap) {
  aa__buf b;
  int rc;

  aa__errcpy(err, errcap, "");
  aa__buf_init(&b);
  rc = merge_patch(base, patch, len, out, &b);
  if (rc != AA_OK)
    aa__errcpy(err, errcap, b.failed ? "(root): out of memory" : b.data != NULL ? b.data
                                                                                : "");
  aa__buf_free(&b);
  return rc;
}
