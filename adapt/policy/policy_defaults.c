/*
 * policy_defaults.c — the policy model's bottom floor, which the parser,
 * the writer, the API (policy.c) and the apply all stand on: the pool
 * names, a policy's defaults (core's AA_DEFAULT_*), the ladder (core's
 * aa_class_ladder), the adapt and telemetry defaults, the region name rule
 * and the section accessors. Whole functions moved from policy.c, whose
 * parse called down into policy_parse.c while policy_parse.c called back up
 * for these.
 *
 * Entry points: aa__policy_defaults, aa__ladder_expand,
 * aa_adapt_params_default, aa_telemetry_params_default,
 * aa_policy_region_name_check, aa_policy_has_region, aa__policy_section,
 * aa__policy_pool_index, aa__policy_pool_names.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy_model.h"

const char *const aa__policy_pool_names[AA__POLICY_POOLS] = {"device", "pinned",
                                                             "host"};

int aa__policy_pool_index(const char *pool) {
  if (pool == NULL)
    return -1;
  for (int i = 0; i < AA__POLICY_POOLS; i++) {
    if (strcmp(pool, aa__policy_pool_names[i]) == 0)
      return i;
  }
  return -1;
}

int aa_policy_region_name_check(const char *name, char *err, size_t errcap) {
  size_t n;
  if (err != NULL && errcap > 0)
    err[0] = '\0';
  if (name == NULL || name[0] == '\0') {
    aa__errf(err, errcap, "a region name is empty");
    return AA_EINVAL;
  }
  n = strnlen(name, AA_REGION_NAME_MAX + 1);
  if (n > AA_REGION_NAME_MAX) {
    aa__errf(err, errcap, "a region name is at most %d bytes",
             AA_REGION_NAME_MAX);
    return AA_EINVAL;
  }
  if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z'))) {
    aa__errf(err, errcap, "a region name starts with an ASCII letter");
    return AA_EINVAL;
  }
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9') || c == '_' || c == '-')) {
      aa__errf(err, errcap,
               "a region name holds only ASCII letters, digits, '_' and '-' "
               "(byte %zu is not one)",
               i);
      return AA_EINVAL;
    }
  }
  return AA_OK;
}

static const aa__region_policy *find_region(const aa_policy *p,
                                            const char *name) {
  for (uint32_t i = 0; i < p->n_regions; i++) {
    if (strcmp(p->regions[i].name, name) == 0)
      return &p->regions[i];
  }
  return NULL;
}

bool aa_policy_has_region(const aa_policy *p, const char *name) {
  return p != NULL && name != NULL && find_region(p, name) != NULL;
}

int aa__policy_section(const aa_policy *p, const char *pool,
                       const aa__pool_policy **out) {
  const aa__region_policy *r;
  int idx = aa__policy_pool_index(pool);
  *out = NULL;
  if (p == NULL || pool == NULL)
    return AA_EINVAL;
  if (idx >= 0) {
    *out = &p->pools[idx];
    return AA_OK;
  }
  if (strncmp(pool, "regions.", 8) != 0 ||
      aa_policy_region_name_check(pool + 8, NULL, 0) != AA_OK)
    return AA_EINVAL;
  r = find_region(p, pool + 8);
  if (r == NULL)
    return AA_ENOENT;
  *out = &r->pool;
  return AA_OK;
}

void aa_adapt_params_default(aa_adapt_params *out) {
  if (out == NULL)
    return;
  memset(out, 0, sizeof *out);
  out->enabled = true;
  out->interval_ms = 1000;
  out->max_classes = 64;
  out->max_adds_per_interval = 4;
  out->min_requests = 64;
  out->hot_fraction = 0.05;
  out->waste_threshold = 0.10;
  out->miss_rate_threshold = 0.10;
  out->prefill_max_bytes = 64u * 1024u * 1024u;
  out->cold_intervals = 10;
  out->trim_threshold_bytes = 256u * 1024u * 1024u;
  out->min_class_age = 5;
  out->readd_cooldown = 20;
  out->grow_cooldown = 5;
  out->trim_cooldown = 5;
}

void aa_telemetry_params_default(aa_telemetry_params *out) {
  if (out == NULL)
    return;
  memset(out, 0, sizeof *out);
  out->snapshot_interval_ms = 1000;
  out->trace = false;
  out->histogram = true;
  out->retention_bytes = 1024u * 1024u * 1024u;
  out->retention_age_s = 7u * 24u * 3600u;
  out->trace_sample = 1;
  out->trace_min_bytes = 0;
  out->trace_seconds = 0;
  out->trace_max_events = 0;
}

void aa__policy_defaults(aa_policy *p) {
  memset(p, 0, sizeof *p);
  for (int i = 0; i < AA__POLICY_POOLS; i++) {
    aa__pool_policy *pp = &p->pools[i];
    pp->slab_size = AA_DEFAULT_SLAB_SIZE;
    pp->max_small = AA_DEFAULT_MAX_SMALL;
    pp->classes_kind = AA__CLASSES_LADDER;
    pp->ladder_min = AA_DEFAULT_MIN_BLOCK;
    pp->ladder_per_doubling = AA_DEFAULT_PER_DOUBLING;
    /* Device and host: slabs only up to 16 KiB, one class per doubling (the
     * loop adds exact classes for the hot sizes), everything larger on the
     * expandable path. Classes up to 1 MiB in 2 MiB slabs strand partly
     * filled slabs of every mid-size class whenever the sizes move (a KV
     * cache growing, a batch size cycling): in replays of the GPU zoo's
     * traces and the demo's this cut peak reserved from 580 to 454 MiB
     * (generation; PyTorch 496, expandable segments 470), 1592 to 1438 MiB
     * (CNN; PyTorch 2708 and 1486) and 792 to 434 MiB (demo, host pool;
     * 399 MiB in use). Pinned memory has no virtual-memory interface: it
     * keeps the 1 MiB ladder and the cache path. pools[1] is "pinned". */
    if (i != 1) {
      pp->max_small = AA__POLICY_DEF_MAX_SMALL;
      pp->ladder_per_doubling = AA__POLICY_DEF_PER_DOUBLING;
    }
    pp->tcache_blocks = AA_DEFAULT_TCACHE_BLOCKS;
    /* Cached host blocks are plentiful memory; device and pinned ones are
     * scarce (the core makes the same split). pools[2] is "host". */
    pp->tcache_bytes = i == 2 ? AA_DEFAULT_TCACHE_BYTES_HOST : AA_DEFAULT_TCACHE_BYTES;
    /* Device and host memory: the expandable large path (pages mapped on
     * demand, no memory stranded in holes); pinned memory has no
     * virtual-memory interface. */
    pp->large_mode = i == 1 ? AA_LARGE_CACHE : AA_LARGE_EXPANDABLE;
    pp->large_cache_bytes = 0;
    pp->large_page_bytes = 0;
    /* Device memory: a request's unmapped pages in one map call per 16
     * (a CUDA map costs about 40 us for 2 MiB or 32); pools[0] is "device". */
    pp->large_map_runs = i == 0;
    pp->large_map_run_pages = AA_LARGE_MAP_RUN_MAX; /* every request: runs of 16 */
    pp->large_stitch_share = AA_DEFAULT_STITCH_SHARE;
    pp->large_map_run_min_bytes = 0;
    /* Every pool: a pending block reused by a stream's wait before new memory */
    pp->large_stream_wait = true;
    pp->limit_bytes = 0;
  }
  aa_adapt_params_default(&p->adapt);
  aa_telemetry_params_default(&p->telemetry);
}

size_t aa__ladder_expand(uint64_t min, uint64_t max, uint32_t per_doubling,
                         aa_class_spec *out, size_t cap) {
  size_t sizes[AA_MAX_CLASSES];
  size_t n = aa_class_ladder((size_t)min, (size_t)max, per_doubling, sizes,
                             AA_MAX_CLASSES);
  for (size_t i = 0; i < n && i < cap && i < AA_MAX_CLASSES; i++)
    out[i] = (aa_class_spec){sizes[i], 0, 0};
  return n;
}
