/*
 * stats_map.h — private to torch/: the one mapping from adaptalloc's pool
 * stats (aa_pool_stats) to the figures of torch.cuda.memory_stats(). Both
 * PyTorch paths use it: the native allocator's getDeviceStats
 * (torch/native/stats.cpp) copies aa__torch_stats into PyTorch's DeviceStats
 * field by field, and the pluggable library's aa_torch_stat
 * (torch/pluggable/aa_torch.c) answers a figure by name with
 * aa__torch_stat_named. Which pool field fills which figure is decided here
 * and nowhere else.
 *
 * Three steps, all plain C, no locks, no allocation except in
 * aa__torch_sums_add_pool:
 *   1. aa__torch_sums_add(_pool): sum a device's pools' counters (the
 *      device pool, its region pools, its private pools) into one
 *      aa__torch_sums.
 *   2. aa__torch_base_take: what torch.cuda.reset_accumulated_memory_stats
 *      keeps, to subtract from the "allocated"/"freed" counters later.
 *   3. aa__torch_stats_map: the sums less the base as PyTorch's DeviceStats
 *      (StatArray index order: all, small_pool, large_pool).
 * Ownership: every struct is a value the caller owns; nothing here keeps a
 * pointer it was given.
 */
#ifndef AA_TORCH_STATS_MAP_H
#define AA_TORCH_STATS_MAP_H

#include <stdint.h>

#include "adaptalloc/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A device's pools summed (aa_pool_stats fields, class rows summed). */
typedef struct aa__torch_sums {
  uint64_t in_use, requested, reserved, peak_in_use, peak_reserved, limit;
  uint64_t allocs, frees, backend_allocs, backend_frees;
  uint64_t ooms, retries, pending, invalid_frees, classes;
  uint64_t small_in_use, small_reserved, small_peak, small_req;
  uint64_t large_in_use, large_reserved;
  uint64_t slabs, large_segments, free_blocks;
  uint64_t small_live, large_allocs;
} aa__torch_sums;

/* The accumulated counters when they were last reset. */
typedef struct aa__torch_base {
  uint64_t allocs, frees, backend_allocs, backend_frees;
  uint64_t large_allocs, large_frees;
  uint64_t ooms, retries;
} aa__torch_base;

/* c10::CachingAllocator::Stat. */
typedef struct aa__torch_stat {
  int64_t current, peak, allocated, freed;
} aa__torch_stat;

/* c10::CachingAllocator::StatType, in its order. */
enum { AA__TORCH_ALL = 0,
       AA__TORCH_SMALL = 1,
       AA__TORCH_LARGE = 2,
       AA__TORCH_KINDS = 3 };

/* c10::CachingDeviceAllocator::DeviceStats (memory_stats' keys are these
 * names: "allocated_bytes.all.current", "num_ooms", ...). */
typedef struct aa__torch_stats {
  aa__torch_stat allocation[AA__TORCH_KINDS];
  aa__torch_stat segment[AA__TORCH_KINDS];
  aa__torch_stat active[AA__TORCH_KINDS];
  aa__torch_stat inactive_split[AA__TORCH_KINDS];
  aa__torch_stat allocated_bytes[AA__TORCH_KINDS];
  aa__torch_stat reserved_bytes[AA__TORCH_KINDS];
  aa__torch_stat active_bytes[AA__TORCH_KINDS];
  aa__torch_stat inactive_split_bytes[AA__TORCH_KINDS];
  aa__torch_stat requested_bytes[AA__TORCH_KINDS];
  aa__torch_stat oversize_allocations;
  aa__torch_stat oversize_segments;
  int64_t num_alloc_retries;
  int64_t num_ooms;
  int64_t num_sync_all_streams;
  int64_t num_device_alloc;
  int64_t num_device_free;
  int64_t max_split_size; /* INT64_MAX: adaptalloc splits blocks of any size */
} aa__torch_stats;

/* Adds one snapshot to t (t starts zeroed by the caller). */
void aa__torch_sums_add(aa__torch_sums *t, const aa_pool_stats *st);
/* Takes pool's counters (aa_pool_stats_get_opts with AA_STATS_NO_SIZES: the
 * histogram and heavy-hitter merge are not read here) and adds them to t.
 * AA_ENOMEM (no room for the snapshot) or the pool's error leave t as it
 * was. */
int aa__torch_sums_add_pool(aa__torch_sums *t, aa_pool *pool);
/* What resetAccumulatedStats keeps: the counters now. */
void aa__torch_base_take(aa__torch_base *b, const aa__torch_sums *t);
/* PyTorch's figures from the sums less the base (b NULL: nothing reset). */
void aa__torch_stats_map(const aa__torch_sums *t, const aa__torch_base *b,
                         aa__torch_stats *out);

/* One figure by name: a memory_stats() key ("allocated_bytes.all.current",
 * "segment.large_pool.peak", "num_ooms", ...) or one of the pluggable
 * library's short names (aa_torch_stat: "in_use", "reserved", "peak_in_use",
 * "peak_reserved", "requested", "allocs", "frees", "ooms", "oom_retries",
 * "backend_allocs", "backend_frees" — each the memory_stats figure it names —
 * and "pending", "limit", "classes", "invalid_frees", which PyTorch has no
 * figure for, read from `t`: the caller passes the sums it means for those,
 * aa_torch_stat the device pool's own). AA_EINVAL with *out 0 for a name it
 * does not know. */
int aa__torch_stat_named(const aa__torch_stats *s, const aa__torch_sums *t, const char *name,
                         int64_t *out);

#ifdef __cplusplus
}
#endif
#endif /* AA_TORCH_STATS_MAP_H */
