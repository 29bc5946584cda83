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
 *
 * Files: this one (the walk, aa__policy_from_tree), policy_tree.c (the
 * first stage, aa__policy_parse_tree), policy_fields.c (messages and
 * typed readers); policy_parse.h.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_parse.h"

#define MAX_U53 ((uint64_t)9007199254740991ull) /* 2^53 - 1 */
#define GIB (1024ull * 1024ull * 1024ull)
#define MAX_CLASS (256ull * 1024ull * 1024ull) /* the core's largest max_small */
#define MIB (1024ull * 1024ull)

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
    rc = aa__pv_check_object(v, cl, path, ladder_keys);
    if (rc != AA_OK)
      return rc;
    pp->classes_kind = AA__CLASSES_LADDER;
    it = FIELD(cl, "min", p1, path);
    if (it != NULL) {
      rc = aa__pv_get_uint(v, it, p1, AA_BLOCK_ALIGN, MAX_CLASS, &pp->ladder_min);
      if (rc != AA_OK)
        return rc;
      if (pp->ladder_min % AA_BLOCK_ALIGN != 0)
        return aa__pv_fail(v, p1, "%llu is not a multiple of %u",
                           (unsigned long long)pp->ladder_min, AA_BLOCK_ALIGN);
    }
    it = FIELD(cl, "max", p1, path);
    if (it != NULL) {
      rc = aa__pv_get_uint(v, it, p1, AA_BLOCK_ALIGN, MAX_CLASS, ladder_max);
      if (rc != AA_OK)
        return rc;
      if (*ladder_max % AA_BLOCK_ALIGN != 0)
        return aa__pv_fail(v, p1, "%llu is not a multiple of %u",
                           (unsigned long long)*ladder_max, AA_BLOCK_ALIGN);
      *have_ladder_max = true;
    }
    it = FIELD(cl, "per_doubling", p1, path);
    if (it != NULL) {
      rc = aa__pv_get_u32(v, it, p1, 1, 16, &pp->ladder_per_doubling);
      if (rc != AA_OK)
        return rc;
    }
    return AA_OK;
  }
  if (!cJSON_IsArray(cl))
    return aa__pv_fail(v, path,
                       "expected an array of block sizes or a ladder object "
                       "{min, max, per_doubling}, got %s",
                       aa__pv_type_name(cl));
  {
    size_t n = 0, i = 0;
    uint64_t prev = 0;
    for (it = cl->child; it != NULL; it = it->next)
      n++;
    if (n == 0)
      return aa__pv_fail(v, path, "the class list is empty");
    if (n > AA_MAX_CLASSES)
      return aa__pv_fail(v, path, "%zu classes, more than %u", n, AA_MAX_CLASSES);
    pp->classes_kind = AA__CLASSES_EXPLICIT;
    pp->n_explicit = (uint32_t)n;
    for (it = cl->child; it != NULL; it = it->next, i++) {
      aa_class_spec *cs = &pp->explicit_classes[i];
      const char *sizepath;
      const cJSON *sz;
      uint64_t u = 0;
      memset(cs, 0, sizeof *cs);
      aa__pv_path_index(p1, path, i);
      if (cJSON_IsNumber(it)) {
        sz = it;
        sizepath = p1;
      } else if (cJSON_IsObject(it)) {
        const cJSON *f;
        rc = aa__pv_check_object(v, it, p1, entry_keys);
        if (rc != AA_OK)
          return rc;
        sz = FIELD(it, "size", p2, p1);
        if (sz == NULL)
          return aa__pv_fail(v, p1, "missing required key \"size\"");
        f = FIELD(it, "cache_limit", p2, p1);
        if (f != NULL) {
          rc = aa__pv_get_u32(v, f, p2, 0, 65536, &cs->cache_limit);
          if (rc != AA_OK)
            return rc;
        }
        f = FIELD(it, "prefill", p2, p1);
        if (f != NULL) {
          rc = aa__pv_get_u32(v, f, p2, 0, 1u << 20, &cs->prefill);
          if (rc != AA_OK)
            return rc;
        }
        aa__pv_path_key(p2, p1, "size");
        sizepath = p2;
      } else {
        return aa__pv_fail(v, p1,
                           "expected a block size or a {size, cache_limit, prefill} "
                           "object, got %s",
                           aa__pv_type_name(it));
      }
      rc = aa__pv_get_uint(v, sz, sizepath, AA_BLOCK_ALIGN, MAX_CLASS, &u);
      if (rc != AA_OK)
        return rc;
      if (u % AA_BLOCK_ALIGN != 0)
        return aa__pv_fail(v, sizepath, "%llu is not a multiple of %u",
                           (unsigned long long)u, AA_BLOCK_ALIGN);
      if (u <= prev)
        return aa__pv_fail(v, sizepath,
                           "%llu is not larger than the previous class %llu (classes "
                           "must be strictly ascending)",
                           (unsigned long long)u, (unsigned long long)prev);
      cs->block_size = (size_t)u;
      prev = u;
    }
  }
  return AA_OK;
}

/* A location of the advice: "none", "device" or "host". */
static int location_from(vctx *v, const cJSON *it, const char *path,
                         aa_managed_location *out) {
  static const aa_managed_location locs[] = {AA_MANAGED_LOC_NONE, AA_MANAGED_LOC_DEVICE,
                                             AA_MANAGED_LOC_HOST};
  char k[64];
  if (!cJSON_IsString(it) || it->valuestring == NULL)
    return aa__pv_fail(v, path, "expected \"none\", \"device\" or \"host\", got %s",
                       aa__pv_type_name(it));
  for (size_t i = 0; i < sizeof locs / sizeof locs[0]; i++) {
    if (strcmp(it->valuestring, aa_managed_location_name(locs[i])) == 0) {
      *out = locs[i];
      return AA_OK;
    }
  }
  aa__pv_key_safe(k, sizeof k, it->valuestring);
  return aa__pv_fail(v, path, "\"%s\" is not one of \"none\", \"device\", \"host\"", k);
}

/* backend, advise and allow_oversubscribe of a pool section. managed_ok:
 * the section may select managed memory (pools.device, regions). A section
 * that says backend "default" drops advice it inherited (a region from
 * pools.device); advice or allow_oversubscribe on a section whose backend is
 * not "managed" is refused, as it would do nothing. */
static int backend_from(vctx *v, const cJSON *obj, const char *path,
                        aa__pool_policy *pp, bool managed_ok) {
  static const char *const akeys[] = {"preferred_location", "accessed_by",
                                      "read_mostly", NULL};
  char p1[PATH_CAP], p2[PATH_CAP];
  const cJSON *it, *adv, *f;
  int rc;

  it = FIELD(obj, "backend", p1, path);
  if (it != NULL) {
    char k[64];
    if (!cJSON_IsString(it) || it->valuestring == NULL)
      return aa__pv_fail(v, p1, "expected \"default\" or \"managed\", got %s",
                         aa__pv_type_name(it));
    if (strcmp(it->valuestring, "managed") == 0) {
      if (!managed_ok)
        return aa__pv_fail(v, p1,
                           "\"managed\" is for pools.device and pools.regions.<name> "
                           "only (managed memory is device memory the driver may move)");
      pp->managed = true;
    } else if (strcmp(it->valuestring, "default") == 0) {
      pp->managed = false;
      pp->advise_preferred = AA_MANAGED_LOC_NONE;
      pp->advise_accessed_by = AA_MANAGED_LOC_NONE;
      pp->advise_read_mostly = false;
      pp->allow_oversubscribe = false;
    } else {
      aa__pv_key_safe(k, sizeof k, it->valuestring);
      return aa__pv_fail(v, p1, "\"%s\" is not one of \"default\", \"managed\"", k);
    }
  }
  adv = FIELD(obj, "advise", p1, path);
  if (adv != NULL) {
    rc = aa__pv_check_object(v, adv, p1, akeys);
    if (rc != AA_OK)
      return rc;
    f = FIELD(adv, "preferred_location", p2, p1);
    if (f != NULL) {
      rc = location_from(v, f, p2, &pp->advise_preferred);
      if (rc != AA_OK)
        return rc;
    }
    f = FIELD(adv, "accessed_by", p2, p1);
    if (f != NULL) {
      rc = location_from(v, f, p2, &pp->advise_accessed_by);
      if (rc != AA_OK)
        return rc;
    }
    rc = aa__pv_opt_bool(v, adv, p1, "read_mostly", &pp->advise_read_mostly);
    if (rc != AA_OK)
      return rc;
  }
  rc = aa__pv_opt_bool(v, obj, path, "allow_oversubscribe", &pp->allow_oversubscribe);
  if (rc != AA_OK)
    return rc;
  if (!pp->managed) {
    if (adv != NULL && (pp->advise_preferred != AA_MANAGED_LOC_NONE ||
                        pp->advise_accessed_by != AA_MANAGED_LOC_NONE ||
                        pp->advise_read_mostly))
      return aa__pv_fail(v, p1, "advice applies only to backend \"managed\" (this "
                                "section's backend is \"default\")");
    if (pp->allow_oversubscribe) {
      aa__pv_path_key(p2, path, "allow_oversubscribe");
      return aa__pv_fail(v, p2, "applies only to backend \"managed\" (this "
                                "section's backend is \"default\")");
    }
  }
  return AA_OK;
}

static int pool_from(vctx *v, const cJSON *obj, const char *path,
                     aa__pool_policy *pp, bool managed_ok) {
  static const char *const keys[] = {"slab_size", "max_small", "classes",
                                     "tcache", "large", "limit_bytes",
                                     "backend", "advise", "allow_oversubscribe",
                                     NULL};
  static const char *const tkeys[] = {"blocks", "bytes", NULL};
  static const char *const lkeys[] = {"mode", "cache_bytes", "page_bytes", "map_runs",
                                      "map_run_pages", "map_run_min_bytes", "stream_wait",
                                      "stitch", "stitch_grow", "stitch_share", "plan", NULL};
  char p1[PATH_CAP], p2[PATH_CAP];
  const cJSON *it, *f;
  bool have_slab = false, have_max = false, have_lmax = false;
  uint64_t lmax = 0;
  int rc;

  rc = aa__pv_check_object(v, obj, path, keys);
  if (rc != AA_OK)
    return rc;
  rc = backend_from(v, obj, path, pp, managed_ok);
  if (rc != AA_OK)
    return rc;
  it = FIELD(obj, "slab_size", p1, path);
  if (it != NULL) {
    rc = aa__pv_get_uint(v, it, p1, 64 * 1024, GIB, &pp->slab_size);
    if (rc != AA_OK)
      return rc;
    if (pp->slab_size % (64 * 1024) != 0)
      return aa__pv_fail(v, p1, "%llu is not a multiple of 65536",
                         (unsigned long long)pp->slab_size);
    have_slab = true;
  }
  it = FIELD(obj, "max_small", p1, path);
  if (it != NULL) {
    rc = aa__pv_get_uint(v, it, p1, AA_BLOCK_ALIGN, MAX_CLASS, &pp->max_small);
    if (rc != AA_OK)
      return rc;
    if (pp->max_small % AA_BLOCK_ALIGN != 0)
      return aa__pv_fail(v, p1, "%llu is not a multiple of %u",
                         (unsigned long long)pp->max_small, AA_BLOCK_ALIGN);
    have_max = true;
  }
  it = FIELD(obj, "limit_bytes", p1, path);
  if (it != NULL) {
    rc = aa__pv_get_uint(v, it, p1, 0, MAX_U53, &pp->limit_bytes);
    if (rc != AA_OK)
      return rc;
  }
  it = FIELD(obj, "tcache", p1, path);
  if (it != NULL) {
    rc = aa__pv_check_object(v, it, p1, tkeys);
    if (rc != AA_OK)
      return rc;
    f = FIELD(it, "blocks", p2, p1);
    if (f != NULL) {
      rc = aa__pv_get_u32(v, f, p2, 0, 65536, &pp->tcache_blocks);
      if (rc != AA_OK)
        return rc;
    }
    f = FIELD(it, "bytes", p2, p1);
    if (f != NULL) {
      rc = aa__pv_get_uint(v, f, p2, 0, GIB, &pp->tcache_bytes);
      if (rc != AA_OK)
        return rc;
    }
  }
  it = FIELD(obj, "large", p1, path);
  if (it != NULL) {
    rc = aa__pv_check_object(v, it, p1, lkeys);
    if (rc != AA_OK)
      return rc;
    f = FIELD(it, "mode", p2, p1);
    if (f != NULL) {
      if (!cJSON_IsString(f) || f->valuestring == NULL)
        return aa__pv_fail(v, p2, "expected a string, got %s", aa__pv_type_name(f));
      if (strcmp(f->valuestring, "cache") == 0) {
        pp->large_mode = AA_LARGE_CACHE;
      } else if (strcmp(f->valuestring, "passthrough") == 0) {
        pp->large_mode = AA_LARGE_PASSTHROUGH;
      } else if (strcmp(f->valuestring, "expandable") == 0) {
        pp->large_mode = AA_LARGE_EXPANDABLE;
      } else {
        char k[64];
        aa__pv_key_safe(k, sizeof k, f->valuestring);
        return aa__pv_fail(v, p2, "\"%s\" is not one of \"cache\", \"passthrough\", \"expandable\"",
                           k);
      }
    }
    f = FIELD(it, "cache_bytes", p2, p1);
    if (f != NULL) {
      rc = aa__pv_get_uint(v, f, p2, 0, MAX_U53, &pp->large_cache_bytes);
      if (rc != AA_OK)
        return rc;
    }
    f = FIELD(it, "page_bytes", p2, p1);
    if (f != NULL) {
      rc = aa__pv_get_uint(v, f, p2, 0, AA_LARGE_PAGE_MAX, &pp->large_page_bytes);
      if (rc != AA_OK)
        return rc;
      uint64_t pb = pp->large_page_bytes;
      if (pb != 0 && (pb < AA_LARGE_PAGE_MIN || (pb & (pb - 1)) != 0))
        return aa__pv_fail(v, p2, "%llu is not 0 or a power of two from %llu to %llu",
                           (unsigned long long)pb, (unsigned long long)AA_LARGE_PAGE_MIN,
                           (unsigned long long)AA_LARGE_PAGE_MAX);
    }
    rc = aa__pv_opt_bool(v, it, p1, "map_runs", &pp->large_map_runs);
    if (rc != AA_OK)
      return rc;
    rc = aa__pv_opt_uint(v, it, p1, "map_run_pages", 1, AA_LARGE_MAP_RUN_MAX,
                         &pp->large_map_run_pages);
    if (rc != AA_OK)
      return rc;
    rc = aa__pv_opt_uint(v, it, p1, "map_run_min_bytes", 0, MAX_U53,
                         &pp->large_map_run_min_bytes);
    if (rc != AA_OK)
      return rc;
    rc = aa__pv_opt_bool(v, it, p1, "stream_wait", &pp->large_stream_wait);
    if (rc != AA_OK)
      return rc;
    rc = aa__pv_opt_bool(v, it, p1, "stitch", &pp->large_stitch);
    if (rc != AA_OK)
      return rc;
    rc = aa__pv_opt_bool(v, it, p1, "stitch_grow", &pp->large_stitch_grow);
    if (rc != AA_OK)
      return rc;
    if (pp->large_stitch_grow && !pp->large_stitch) {
      aa__pv_path_key(p2, p1, "stitch_grow");
      return aa__pv_fail(v, p2, "needs large.stitch true (it widens stitching: a range of the "
                                "holes and new pages)");
    }
    rc = aa__pv_opt_frac(v, it, p1, "stitch_share", true, false, &pp->large_stitch_share);
    if (rc != AA_OK)
      return rc;
    rc = aa__pv_opt_bool(v, it, p1, "plan", &pp->large_plan);
    if (rc != AA_OK)
      return rc;
  }
  it = FIELD(obj, "classes", p1, path);
  if (it != NULL) {
    rc = classes_from(v, it, p1, pp, &have_lmax, &lmax);
    if (rc != AA_OK)
      return rc;
  }

  /* Rules that tie the fields together. */
  aa__pv_path_key(p1, path, "classes");
  if (pp->classes_kind == AA__CLASSES_EXPLICIT) {
    uint64_t last = pp->explicit_classes[pp->n_explicit - 1].block_size;
    if (have_max && last != pp->max_small) {
      aa__pv_path_index(p2, p1, pp->n_explicit - 1);
      return aa__pv_fail(v, p2,
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
        aa__pv_path_key(p2, p1, "max");
        return aa__pv_fail(v, p2,
                           "%llu is not max_small %llu (the ladder's top class is "
                           "max_small)",
                           (unsigned long long)lmax, (unsigned long long)pp->max_small);
      }
      pp->max_small = lmax;
      have_max = true;
    }
    if (pp->ladder_min > pp->max_small) {
      aa__pv_path_key(p2, p1, "min");
      return aa__pv_fail(v, p2, "%llu is larger than max_small %llu",
                         (unsigned long long)pp->ladder_min,
                         (unsigned long long)pp->max_small);
    }
    count = aa__ladder_expand(pp->ladder_min, pp->max_small,
                              pp->ladder_per_doubling, NULL, 0);
    if (count > AA_MAX_CLASSES)
      return aa__pv_fail(v, p1, "the ladder has %zu classes, more than %u", count,
                         AA_MAX_CLASSES);
  }
  if (pp->max_small > pp->slab_size) {
    if (have_slab) {
      aa__pv_path_key(p2, path, "slab_size");
      return aa__pv_fail(v, p2, "%llu is smaller than the largest class %llu",
                         (unsigned long long)pp->slab_size,
                         (unsigned long long)pp->max_small);
    }
    aa__pv_path_key(p2, path, "max_small");
    return aa__pv_fail(v, p2, "%llu is larger than slab_size %llu",
                       (unsigned long long)pp->max_small,
                       (unsigned long long)pp->slab_size);
  }
  if (pp->limit_bytes != 0 && pp->limit_bytes < pp->slab_size) {
    aa__pv_path_key(p2, path, "limit_bytes");
    return aa__pv_fail(v, p2, "%llu is below one slab (slab_size %llu)",
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
        aa__pv_path_index(p2, p1, i);
        aa__pv_path_key(p3, p2, "prefill");
        return aa__pv_fail(v, p3,
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
    return aa__pv_fail(v, path, "expected an object of region sections, got %s",
                       aa__pv_type_name(obj));
  for (const cJSON *c = obj->child; c != NULL; c = c->next)
    n++;
  if (n > AA_POLICY_MAX_REGIONS)
    return aa__pv_fail(v, path, "%zu regions, more than %d", n, AA_POLICY_MAX_REGIONS);
  for (const cJSON *c = obj->child; c != NULL; c = c->next) {
    const char *k = c->string != NULL ? c->string : "";
    aa__region_policy *r = &p->regions[p->n_regions];
    aa__pv_path_key(p1, path, k);
    if (aa_policy_region_name_check(k, why, sizeof why) != AA_OK)
      return aa__pv_fail(v, p1, "not a region name: %s", why);
    if (!cJSON_IsObject(c))
      return aa__pv_fail(v, p1, "expected an object, got %s", aa__pv_type_name(c));
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", k);
    r->pool = p->pools[0];
    if (aa__pv_member(c, "max_small") != NULL && aa__pv_member(c, "classes") == NULL &&
        r->pool.classes_kind == AA__CLASSES_EXPLICIT) {
      r->pool.classes_kind = AA__CLASSES_LADDER;
      r->pool.n_explicit = 0;
      r->pool.ladder_min = AA_DEFAULT_MIN_BLOCK;
      r->pool.ladder_per_doubling = AA__POLICY_DEF_PER_DOUBLING;
    }
    rc = pool_from(v, c, p1, &r->pool, true);
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

  rc = aa__pv_check_object(v, obj, path, keys);
  if (rc == AA_OK)
    rc = aa__pv_opt_bool(v, obj, path, "enabled", &a->enabled);
  if (rc == AA_OK)
    rc = aa__pv_opt_u32(v, obj, path, "interval_ms", 10, 3600000, &a->interval_ms);
  if (rc == AA_OK)
    rc = aa__pv_opt_u32(v, obj, path, "max_classes", 1, AA_MAX_CLASSES,
                        &a->max_classes);
  if (rc == AA_OK)
    rc = aa__pv_opt_u32(v, obj, path, "max_adds_per_interval", 0, AA_MAX_CLASSES,
                        &a->max_adds_per_interval);
  if (rc == AA_OK)
    rc = aa__pv_opt_uint(v, obj, path, "min_requests", 1, MAX_U53, &a->min_requests);
  if (rc == AA_OK)
    rc = aa__pv_opt_frac(v, obj, path, "hot_fraction", true, false, &a->hot_fraction);
  if (rc == AA_OK)
    rc = aa__pv_opt_frac(v, obj, path, "waste_threshold", false, true,
                         &a->waste_threshold);
  if (rc == AA_OK)
    rc = aa__pv_opt_frac(v, obj, path, "miss_rate_threshold", true, false,
                         &a->miss_rate_threshold);
  if (rc == AA_OK)
    rc = aa__pv_opt_uint(v, obj, path, "prefill_max_bytes", 0, MAX_U53,
                         &a->prefill_max_bytes);
  if (rc == AA_OK)
    rc = aa__pv_opt_u32(v, obj, path, "cold_intervals", 1, 1000000,
                        &a->cold_intervals);
  if (rc == AA_OK)
    rc = aa__pv_opt_uint(v, obj, path, "trim_threshold_bytes", 0, MAX_U53,
                         &a->trim_threshold_bytes);
  if (rc != AA_OK)
    return rc;
  it = FIELD(obj, "hysteresis", p1, path);
  if (it != NULL) {
    rc = aa__pv_check_object(v, it, p1, hkeys);
    if (rc == AA_OK)
      rc = aa__pv_opt_u32(v, it, p1, "min_class_age", 0, 1000000, &a->min_class_age);
    if (rc == AA_OK)
      rc = aa__pv_opt_u32(v, it, p1, "readd_cooldown", 0, 1000000, &a->readd_cooldown);
    if (rc == AA_OK)
      rc = aa__pv_opt_u32(v, it, p1, "grow_cooldown", 0, 1000000, &a->grow_cooldown);
    if (rc == AA_OK)
      rc = aa__pv_opt_u32(v, it, p1, "trim_cooldown", 0, 1000000, &a->trim_cooldown);
  }
  return rc;
}

static int telemetry_from(vctx *v, const cJSON *obj, const char *path,
                          aa_telemetry_params *t) {
  static const char *const keys[] = {"snapshot_interval_ms", "trace",
                                     "histogram", "retention", "trace_sample",
                                     "trace_min_bytes", "trace_seconds",
                                     "trace_max_events", NULL};
  static const char *const rkeys[] = {"max_bytes", "max_age_s", NULL};
  char p1[PATH_CAP], p2[PATH_CAP];
  const cJSON *it, *f;
  int rc;

  rc = aa__pv_check_object(v, obj, path, keys);
  if (rc == AA_OK)
    rc = aa__pv_opt_u32(v, obj, path, "snapshot_interval_ms", 100, 86400000,
                        &t->snapshot_interval_ms);
  if (rc == AA_OK)
    rc = aa__pv_opt_bool(v, obj, path, "trace", &t->trace);
  if (rc == AA_OK)
    rc = aa__pv_opt_bool(v, obj, path, "histogram", &t->histogram);
  if (rc == AA_OK)
    rc = aa__pv_opt_u32(v, obj, path, "trace_sample", 0, 1000000000, &t->trace_sample);
  if (rc == AA_OK)
    rc = aa__pv_opt_uint(v, obj, path, "trace_min_bytes", 0, MAX_U53, &t->trace_min_bytes);
  if (rc == AA_OK)
    rc = aa__pv_opt_u32(v, obj, path, "trace_seconds", 0, 30u * 24u * 3600u, &t->trace_seconds);
  if (rc == AA_OK)
    rc = aa__pv_opt_uint(v, obj, path, "trace_max_events", 0, MAX_U53, &t->trace_max_events);
  if (rc == AA_OK && t->trace_sample == 0 && t->trace_min_bytes == 0)
    rc = aa__pv_fail(v, path,
                     "trace_sample 0 (none by count) needs trace_min_bytes above 0: "
                     "else nothing would be traced");
  if (rc != AA_OK)
    return rc;
  it = FIELD(obj, "retention", p1, path);
  if (it != NULL) {
    rc = aa__pv_check_object(v, it, p1, rkeys);
    if (rc != AA_OK)
      return rc;
    f = FIELD(it, "max_bytes", p2, p1);
    if (f != NULL) {
      rc = aa__pv_get_uint(v, f, p2, 0, MAX_U53, &t->retention_bytes);
      if (rc != AA_OK)
        return rc;
      if (t->retention_bytes != 0 && t->retention_bytes < MIB)
        return aa__pv_fail(v, p2, "%llu is below the 1 MiB minimum (0 means no bound)",
                           (unsigned long long)t->retention_bytes);
    }
    rc = aa__pv_opt_uint(v, it, p1, "max_age_s", 0, 10ull * 366 * 24 * 3600,
                         &t->retention_age_s);
  }
  return rc;
}

int aa__policy_from_tree(const cJSON *root, aa_policy *out, aa__buf *err) {
  static const char *const keys[] = {"$schema", "version", "name",
                                     "description", "pools", "adapt",
                                     "telemetry", NULL};
  static const char *const pkeys[] = {"device", "pinned", "host", "regions",
                                      NULL};
  char p1[PATH_CAP], p2[PATH_CAP];
  const cJSON *it, *f;
  vctx v = {err};
  aa_policy *p = out;
  int rc;

  aa__policy_defaults(p);
  rc = aa__pv_check_object(&v, root, "", keys);
  if (rc != AA_OK)
    goto done;
  it = FIELD(root, "$schema", p1, "");
  if (it != NULL && !cJSON_IsString(it)) {
    rc = aa__pv_fail(&v, p1, "expected a string, got %s", aa__pv_type_name(it));
    goto done;
  }
  it = FIELD(root, "version", p1, "");
  if (it != NULL) {
    rc = aa__pv_get_uint(&v, it, p1, 0, MAX_U53, &p->version);
    if (rc != AA_OK)
      goto done;
  }
  it = FIELD(root, "name", p1, "");
  if (it != NULL) {
    rc = aa__pv_get_string(&v, it, p1, p->name, sizeof p->name);
    if (rc != AA_OK)
      goto done;
  }
  it = FIELD(root, "description", p1, "");
  if (it != NULL) {
    rc = aa__pv_get_string(&v, it, p1, p->description, sizeof p->description);
    if (rc != AA_OK)
      goto done;
  }
  it = FIELD(root, "pools", p1, "");
  if (it != NULL) {
    rc = aa__pv_check_object(&v, it, p1, pkeys);
    if (rc != AA_OK)
      goto done;
    for (int i = 0; i < AA__POLICY_POOLS; i++) {
      f = FIELD(it, aa__policy_pool_names[i], p2, p1);
      if (f == NULL)
        continue;
      rc = pool_from(&v, f, p2, &p->pools[i], i == 0); /* pools[0]: device */
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
    rc = aa__pv_fail(&v, "adapt.enabled",
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
        aa__pv_path_index(p2, p1, k);
        aa__pv_path_key(p3, p2, "prefill");
        rc = aa__pv_fail(&v, p3,
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
