/*
 * config.c — a pool's configuration: the defaults (aa_pool_config_init, from
 * AA_DEFAULT_* in core.h), their validation (aa__config_normalise), the one
 * class ladder (aa_class_ladder, also the policy module's) and the large
 * modes' names. Entry points: aa_pool_config_init, aa_class_ladder,
 * aa_large_mode_name.
 */
#include <string.h>

#include "core_internal.h"

const char *aa_large_mode_name(aa_large_mode mode) {
  switch (mode) {
  case AA_LARGE_CACHE:
    return "cache";
  case AA_LARGE_PASSTHROUGH:
    return "passthrough";
  case AA_LARGE_EXPANDABLE:
    return "expandable";
  }
  return "?";
}

void aa_pool_config_init(aa_pool_config *cfg) {
  if (cfg == NULL)
    return;
  memset(cfg, 0, sizeof *cfg);
  cfg->version = AA_POOL_CONFIG_VERSION;
  cfg->name = "pool";
  cfg->slab_size = AA_DEFAULT_SLAB_SIZE;
  cfg->min_block = AA_DEFAULT_MIN_BLOCK;
  cfg->max_small = AA_DEFAULT_MAX_SMALL;
  cfg->classes_per_doubling = AA_DEFAULT_PER_DOUBLING;
  cfg->tcache_blocks = AA_DEFAULT_TCACHE_BLOCKS;
  cfg->tcache_bytes = 0; /* by backend, see aa__config_normalise */
  cfg->large_mode = AA_LARGE_CACHE;
  cfg->large_cache_bytes = 0;
  cfg->limit_bytes = 0;
  cfg->telemetry = true;
}

#define MAX_SLAB ((size_t)1 << 30)
#define MAX_SMALL_LIMIT ((size_t)256 << 20)

int aa__config_normalise(const aa_pool_config *in, aa_pool_config *c) {
  *c = *in;
  if (c->slab_size == 0)
    c->slab_size = AA_DEFAULT_SLAB_SIZE;
  if (c->min_block == 0)
    c->min_block = AA_DEFAULT_MIN_BLOCK;
  if (c->max_small == 0)
    c->max_small = AA_DEFAULT_MAX_SMALL;
  if (c->classes_per_doubling == 0)
    c->classes_per_doubling = AA_DEFAULT_PER_DOUBLING;
  /* Thread caches hold memory nobody else can use. Plain host memory is
   * cheap: 64 MiB a thread keeps mixed batches out of the central lists
   * (4 MiB overflowed and cost 2x in batch_mixed_2t). Device, pinned and
   * custom (e.g. simulated device) memory is scarce: 4 MiB. */
  if (c->tcache_bytes == 0)
    c->tcache_bytes = c->backend->kind == AA_BACKEND_HOST ? AA_DEFAULT_TCACHE_BYTES_HOST
                                                          : AA_DEFAULT_TCACHE_BYTES;
  if (c->slab_size % AA__GRANULE != 0 || c->slab_size > MAX_SLAB)
    return AA_EINVAL;
  if (c->min_block % AA_BLOCK_ALIGN != 0 || c->max_small % AA_BLOCK_ALIGN != 0 ||
      c->min_block > c->max_small || c->max_small > c->slab_size ||
      c->max_small > MAX_SMALL_LIMIT)
    return AA_EINVAL;
  if (c->classes_per_doubling > 16 || c->tcache_blocks > 65536)
    return AA_EINVAL;
  if (c->large_mode != AA_LARGE_CACHE && c->large_mode != AA_LARGE_PASSTHROUGH &&
      c->large_mode != AA_LARGE_EXPANDABLE)
    return AA_EINVAL;
  if (c->region != NULL && strlen(c->region) > AA_REGION_NAME_MAX)
    return AA_EINVAL;
  if (c->large_page_bytes != 0 &&
      (c->large_page_bytes < AA_LARGE_PAGE_MIN || c->large_page_bytes > AA_LARGE_PAGE_MAX ||
       (c->large_page_bytes & (c->large_page_bytes - 1)) != 0))
    return AA_EINVAL;
  if (c->large_map_run_pages < 0 || c->large_map_run_pages > AA_LARGE_MAP_RUN_MAX)
    return AA_EINVAL;
  /* written so that a NaN fails too */
  if (!(c->large_stitch_share >= 0.0 && c->large_stitch_share <= 1.0))
    return AA_EINVAL;
  if (c->large_stitch_share == 0.0)
    c->large_stitch_share = AA_DEFAULT_STITCH_SHARE;
  return AA_OK;
}

static size_t round_up_align(size_t v) {
  return (v + AA_BLOCK_ALIGN - 1) / AA_BLOCK_ALIGN * AA_BLOCK_ALIGN;
}

size_t aa_class_ladder(size_t min_block, size_t max_small, uint32_t per_doubling,
                       size_t *out, size_t cap) {
  size_t n = 0;
  size_t prev;
  size_t first = round_up_align(min_block < AA_BLOCK_ALIGN ? AA_BLOCK_ALIGN : min_block);
  if (per_doubling == 0 || first > max_small || (out == NULL && cap > 0))
    return 0;
  if (n < cap)
    out[n] = first;
  n++;
  prev = first;
  for (size_t base = AA_BLOCK_ALIGN; base < max_small; base *= 2) {
    for (uint32_t j = 0; j < per_doubling; j++) {
      size_t s = round_up_align(base + (size_t)j * base / per_doubling);
      if (s <= prev || s >= max_small)
        continue;
      if (n < cap)
        out[n] = s;
      n++;
      prev = s;
    }
  }
  if (max_small > prev) {
    if (n < cap)
      out[n] = max_small;
    n++;
  }
  return n;
}

/* The pool's table: the ladder of its config; EINVAL over AA_MAX_CLASSES. */
int aa__config_ladder(const aa_pool_config *c, size_t *out, size_t *n) {
  *n = aa_class_ladder(c->min_block, c->max_small, c->classes_per_doubling, out,
                       AA_MAX_CLASSES);
  return *n == 0 || *n > AA_MAX_CLASSES ? AA_EINVAL : AA_OK;
}
