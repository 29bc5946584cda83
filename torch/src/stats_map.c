/*
 * stats_map.c — the one mapping from aa_pool_stats to torch.cuda.memory_stats()
 * figures (stats_map.h), shared by the native allocator (getDeviceStats,
 * torch/native/stats.cpp) and the pluggable library (aa_torch_stat,
 * torch/pluggable/aa_torch.c). Entry points: aa__torch_sums_add(_pool),
 * aa__torch_base_take, aa__torch_stats_map, aa__torch_stat_named.
 *
 * PyTorch's allocator splits blocks into a small pool (under 1 MiB) and a
 * large pool; adaptalloc's classes stand for the small pool and its large path
 * for the large one. "allocated"/"freed" counters count since the last
 * reset (the base); "current"/"peak" are the pools' own.
 */
#include "stats_map.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void aa__torch_sums_add(aa__torch_sums *t, const aa_pool_stats *st) {
  uint32_t i;
  t->in_use += st->bytes_in_use;
  t->requested += st->bytes_requested;
  t->reserved += st->bytes_reserved;
  t->peak_in_use += st->peak_bytes_in_use;
  t->peak_reserved += st->peak_bytes_reserved;
  t->limit += st->limit_bytes;
  t->allocs += st->allocs;
  t->frees += st->frees;
  t->backend_allocs += st->backend_allocs;
  t->backend_frees += st->backend_frees;
  t->ooms += st->ooms;
  t->retries += st->oom_retries;
  t->pending += st->pending_blocks;
  t->invalid_frees += st->invalid_frees;
  t->classes += st->class_count;
  t->large_in_use += st->large_bytes_in_use;
  t->large_reserved += st->large_bytes_reserved;
  t->large_segments += st->large_segments;
  t->large_allocs += st->large_allocs;
  for (i = 0; i < st->class_count && i < AA_MAX_CLASSES; i++) {
    const aa_class_stats *c = &st->classes[i];
    t->small_in_use += c->bytes_in_use;
    t->small_reserved += c->bytes_reserved;
    t->small_peak += c->peak_bytes_in_use;
    t->small_req += c->bytes_requested;
    t->slabs += c->slabs;
    t->free_blocks += c->blocks_free;
    t->small_live += c->blocks_in_use;
  }
}

int aa__torch_sums_add_pool(aa__torch_sums *t, aa_pool *pool) {
  /* about 20 KiB: on the heap, not on a Python thread's stack */
  aa_pool_stats *st = malloc(sizeof *st);
  int rc = AA_ENOMEM;
  if (st == NULL)
    goto out;
  rc = aa_pool_stats_get_opts(pool, st, AA_STATS_NO_SIZES);
  if (rc != AA_OK)
    goto out;
  aa__torch_sums_add(t, st);
out:
  free(st);
  return rc;
}

static uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

/* Frees of the large path: its allocations less its live blocks (the pool
 * counts frees as one figure). */
static uint64_t large_frees_of(const aa__torch_sums *t) {
  uint64_t live = minus(t->allocs, t->frees);
  uint64_t large_live = minus(live, t->small_live);
  return minus(t->large_allocs, large_live);
}

void aa__torch_base_take(aa__torch_base *b, const aa__torch_sums *t) {
  b->allocs = t->allocs;
  b->frees = t->frees;
  b->large_allocs = t->large_allocs;
  b->large_frees = large_frees_of(t);
  b->backend_allocs = t->backend_allocs;
  b->backend_frees = t->backend_frees;
  b->ooms = t->ooms;
  b->retries = t->retries;
}

static aa__torch_stat stat_of(uint64_t current, uint64_t peak, uint64_t allocated,
                              uint64_t freed) {
  aa__torch_stat s;
  s.current = (int64_t)current;
  s.peak = (int64_t)(peak > current ? peak : current);
  s.allocated = (int64_t)allocated;
  s.freed = (int64_t)freed;
  return s;
}

void aa__torch_stats_map(const aa__torch_sums *t, const aa__torch_base *base,
                         aa__torch_stats *s) {
  static const aa__torch_base none;
  const aa__torch_base *b = base ? base : &none;
  const int A = AA__TORCH_ALL, S = AA__TORCH_SMALL, L = AA__TORCH_LARGE;
  uint64_t live = minus(t->allocs, t->frees);
  uint64_t segs = t->slabs + t->large_segments;
  /* Per pool kind: the large path's allocations, the rest are the classes'
   * (retired classes included); freed = allocated - live, as in PyTorch. */
  uint64_t large_live = minus(live, t->small_live);
  uint64_t large_frees = large_frees_of(t);
  uint64_t idle = minus(t->reserved, t->in_use);
  uint64_t small_idle = minus(t->small_reserved, t->small_in_use);
  uint64_t large_idle = minus(t->large_reserved, t->large_in_use);
  uint64_t large_req = minus(t->requested, t->small_req);

  memset(s, 0, sizeof *s);
  s->allocation[A] = stat_of(live, live, minus(t->allocs, b->allocs), minus(t->frees, b->frees));
  s->allocation[S] =
      stat_of(t->small_live, t->small_live,
              minus(minus(t->allocs, t->large_allocs), minus(b->allocs, b->large_allocs)),
              minus(minus(t->frees, large_frees), minus(b->frees, b->large_frees)));
  s->allocation[L] = stat_of(large_live, large_live, minus(t->large_allocs, b->large_allocs),
                             minus(large_frees, b->large_frees));
  memcpy(s->active, s->allocation, sizeof s->active);
  s->segment[A] = stat_of(segs, segs, minus(t->backend_allocs, b->backend_allocs),
                          minus(t->backend_frees, b->backend_frees));
  s->segment[S] = stat_of(t->slabs, t->slabs, 0, 0);
  s->segment[L] = stat_of(t->large_segments, t->large_segments, 0, 0);
  s->allocated_bytes[A] = stat_of(t->in_use, t->peak_in_use, 0, 0);
  s->allocated_bytes[S] = stat_of(t->small_in_use, t->small_peak, 0, 0);
  s->allocated_bytes[L] = stat_of(t->large_in_use, t->large_in_use, 0, 0);
  memcpy(s->active_bytes, s->allocated_bytes, sizeof s->active_bytes);
  s->reserved_bytes[A] = stat_of(t->reserved, t->peak_reserved, 0, 0);
  s->reserved_bytes[S] = stat_of(t->small_reserved, t->small_reserved, 0, 0);
  s->reserved_bytes[L] = stat_of(t->large_reserved, t->large_reserved, 0, 0);
  s->requested_bytes[A] = stat_of(t->requested, t->requested, 0, 0);
  s->requested_bytes[S] = stat_of(t->small_req, t->small_req, 0, 0);
  s->requested_bytes[L] = stat_of(large_req, large_req, 0, 0);
  /* Free memory held in segments: cached blocks of the classes and free
   * space of the large path. */
  s->inactive_split_bytes[A] = stat_of(idle, idle, 0, 0);
  s->inactive_split_bytes[S] = stat_of(small_idle, small_idle, 0, 0);
  s->inactive_split_bytes[L] = stat_of(large_idle, large_idle, 0, 0);
  s->inactive_split[A] = stat_of(t->free_blocks, t->free_blocks, 0, 0);
  s->inactive_split[S] = s->inactive_split[A];
  s->num_alloc_retries = (int64_t)minus(t->retries, b->retries);
  s->num_ooms = (int64_t)minus(t->ooms, b->ooms);
  s->num_device_alloc = (int64_t)minus(t->backend_allocs, b->backend_allocs);
  s->num_device_free = (int64_t)minus(t->backend_frees, b->backend_frees);
  s->max_split_size = INT64_MAX;
}

/* ------------------------------------------------------------ by name */

/* A figure's name and where aa__torch_stats keeps it. */
typedef struct named_off {
  const char *name;
  size_t off;
} named_off;

#define AA__OFF(f) offsetof(aa__torch_stats, f)
static const named_off stat_arrays[] = {
    {"allocation", AA__OFF(allocation)},
    {"segment", AA__OFF(segment)},
    {"active", AA__OFF(active)},
    {"inactive_split", AA__OFF(inactive_split)},
    {"allocated_bytes", AA__OFF(allocated_bytes)},
    {"reserved_bytes", AA__OFF(reserved_bytes)},
    {"active_bytes", AA__OFF(active_bytes)},
    {"inactive_split_bytes", AA__OFF(inactive_split_bytes)},
    {"requested_bytes", AA__OFF(requested_bytes)},
    {"oversize_allocations", AA__OFF(oversize_allocations)},
    {"oversize_segments", AA__OFF(oversize_segments)},
};
static const named_off scalars[] = {
    {"num_alloc_retries", AA__OFF(num_alloc_retries)},
    {"num_ooms", AA__OFF(num_ooms)},
    {"num_sync_all_streams", AA__OFF(num_sync_all_streams)},
    {"num_device_alloc", AA__OFF(num_device_alloc)},
    {"num_device_free", AA__OFF(num_device_free)},
    {"max_split_size", AA__OFF(max_split_size)},
};
#undef AA__OFF

/* The pluggable library's short names: the memory_stats key each stands
 * for, or (key NULL) the sums' field PyTorch has no figure for. */
#define AA__SUM(f) offsetof(aa__torch_sums, f)
static const struct {
  const char *name;
  const char *key;
  size_t sum;
} short_names[] = {
    {"in_use", "allocated_bytes.all.current", 0},
    {"reserved", "reserved_bytes.all.current", 0},
    {"peak_in_use", "allocated_bytes.all.peak", 0},
    {"peak_reserved", "reserved_bytes.all.peak", 0},
    {"requested", "requested_bytes.all.current", 0},
    {"allocs", "allocation.all.allocated", 0},
    {"frees", "allocation.all.freed", 0},
    {"ooms", "num_ooms", 0},
    {"oom_retries", "num_alloc_retries", 0},
    {"backend_allocs", "num_device_alloc", 0},
    {"backend_frees", "num_device_free", 0},
    {"pending", NULL, AA__SUM(pending)},
    {"limit", NULL, AA__SUM(limit)},
    {"classes", NULL, AA__SUM(classes)},
    {"invalid_frees", NULL, AA__SUM(invalid_frees)},
};
#undef AA__SUM

#define AA__COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* "<array>.<all|small_pool|large_pool>.<current|peak|allocated|freed>",
 * "oversize_*.<field>" or a scalar. */
static int by_key(const aa__torch_stats *s, const char *key, int64_t *out) {
  static const char *const kinds[] = {"all", "small_pool", "large_pool"};
  static const char *const fields[] = {"current", "peak", "allocated", "freed"};
  const char *base = (const char *)s;
  size_t i, k, f;
  for (i = 0; i < AA__COUNT(scalars); i++) {
    if (strcmp(key, scalars[i].name) == 0) {
      *out = *(const int64_t *)(const void *)(base + scalars[i].off);
      return AA_OK;
    }
  }
  for (i = 0; i < AA__COUNT(stat_arrays); i++) {
    size_t n = strlen(stat_arrays[i].name);
    const aa__torch_stat *arr = (const aa__torch_stat *)(const void *)(base + stat_arrays[i].off);
    /* the two oversize figures are one Stat, not an array per kind */
    int single = strncmp(stat_arrays[i].name, "oversize_", 9) == 0;
    const char *rest;
    if (strncmp(key, stat_arrays[i].name, n) != 0 || key[n] != '.')
      continue;
    rest = key + n + 1;
    k = 0;
    if (!single) {
      for (k = 0; k < AA__COUNT(kinds); k++) {
        size_t kn = strlen(kinds[k]);
        if (strncmp(rest, kinds[k], kn) == 0 && rest[kn] == '.')
          break;
      }
      if (k == AA__COUNT(kinds))
        return AA_EINVAL;
      rest += strlen(kinds[k]) + 1;
    }
    for (f = 0; f < AA__COUNT(fields); f++) {
      if (strcmp(rest, fields[f]) == 0) {
        const aa__torch_stat *st = &arr[k];
        *out = f == 0 ? st->current : f == 1 ? st->peak
                                  : f == 2   ? st->allocated
                                             : st->freed;
        return AA_OK;
      }
    }
    return AA_EINVAL;
  }
  return AA_EINVAL;
}

int aa__torch_stat_named(const aa__torch_stats *s, const aa__torch_sums *t, const char *name,
                         int64_t *out) {
  size_t i;
  int rc = AA_EINVAL;
  *out = 0;
  if (name == NULL)
    goto out;
  for (i = 0; i < AA__COUNT(short_names); i++) {
    if (strcmp(name, short_names[i].name) != 0)
      continue;
    if (short_names[i].key) {
      rc = by_key(s, short_names[i].key, out);
    } else {
      *out = (int64_t) * (const uint64_t *)(const void *)((const char *)t + short_names[i].sum);
      rc = AA_OK;
    }
    goto out;
  }
  rc = by_key(s, name, out);
out:
  if (rc != AA_OK)
    *out = 0;
  return rc;
}
