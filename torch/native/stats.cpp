// stats.cpp — torch.cuda.memory_stats() and its resets for the native
// allocator: a device's figures are its device pool's plus its regions'
// pools' plus its private pools', summed and turned into PyTorch's
// DeviceStats by the one mapping the pluggable library uses too
// (torch/src/stats_map.c); here they are only copied into c10's types.
// Also cacheInfo (the largest free run) and stats_json for Python.
#include "native_internal.h"

#include <algorithm>

namespace adaptalloc_torch {

namespace {

// The largest run of free bytes inside one segment (cacheInfo).
struct FreeWalk {
  size_t run = 0, best = 0;
};
int free_entry(void *user, const aa_walk_entry *e) {
  auto *w = static_cast<FreeWalk *>(user);
  if (e->kind == AA_WALK_SEGMENT || (e->flags & AA_WALK_IN_USE)) {
    w->run = 0;
    return 0;
  }
  w->run += e->size;
  w->best = std::max(w->best, w->run);
  return 0;
}

// One c10 Stat from the mapping's figure.
Stat to_stat(const aa__torch_stat &v) {
  Stat s;
  s.current = v.current;
  s.peak = v.peak;
  s.allocated = v.allocated;
  s.freed = v.freed;
  return s;
}

// A StatArray (all, small pool, large pool) from the mapping's three.
template <class Array>
void to_array(Array &out, const aa__torch_stat (&in)[AA__TORCH_KINDS]) {
  out[static_cast<size_t>(StatType::AGGREGATE)] = to_stat(in[AA__TORCH_ALL]);
  out[static_cast<size_t>(StatType::SMALL_POOL)] = to_stat(in[AA__TORCH_SMALL]);
  out[static_cast<size_t>(StatType::LARGE_POOL)] = to_stat(in[AA__TORCH_LARGE]);
}

// The sums of device d's pools (its own, its regions', its private pools')
// into t, then `under_lock` with d.mu still held (the reset base is d's and
// is read or taken with the private pools' figures).
template <class F>
void device_sums(int device, Dev &d, aa_pool *main, aa__torch_sums &t, F &&under_lock) {
  (void)aa__torch_sums_add_pool(&t, main);
  each_named(device, [&](aa_pool *p) { (void)aa__torch_sums_add_pool(&t, p); });
  std::lock_guard<std::mutex> g(d.mu);
  for (PrivatePool *pp : private_pools(device))
    (void)aa__torch_sums_add_pool(&t, pp->pool);
  under_lock();
}

} // namespace

void AdaptAllocator::cacheInfo(c10::DeviceIndex device, size_t *largestBlock) {
  aa_pool *p = device_pool_if_made(device);
  FreeWalk w;
  if (p) {
    (void)aa_pool_walk(p, free_entry, &w);
    each_named(device, [&](aa_pool *q) {
      w.run = 0;
      (void)aa_pool_walk(q, free_entry, &w);
    });
  }
  *largestBlock = w.best;
}

DeviceStats AdaptAllocator::getDeviceStats(c10::DeviceIndex device) {
  DeviceStats s;
  aa_pool *main = device_pool_if_made(device);
  if (main == nullptr)
    return s;
  Dev &d = dev_at(device);
  aa__torch_sums t{};
  aa__torch_base b{};
  device_sums(device, d, main, t, [&] { b = d.base; });
  aa__torch_stats m;
  aa__torch_stats_map(&t, &b, &m);
  to_array(s.allocation, m.allocation);
  to_array(s.segment, m.segment);
  to_array(s.active, m.active);
  to_array(s.inactive_split, m.inactive_split);
  to_array(s.allocated_bytes, m.allocated_bytes);
  to_array(s.reserved_bytes, m.reserved_bytes);
  to_array(s.active_bytes, m.active_bytes);
  to_array(s.inactive_split_bytes, m.inactive_split_bytes);
  to_array(s.requested_bytes, m.requested_bytes);
  s.num_alloc_retries = m.num_alloc_retries;
  s.num_ooms = m.num_ooms;
  s.num_device_alloc = m.num_device_alloc;
  s.num_device_free = m.num_device_free;
  s.max_split_size = m.max_split_size;
  return s;
}

void AdaptAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  aa_pool *main = device_pool_if_made(device);
  if (main == nullptr)
    return;
  Dev &d = dev_at(device);
  aa__torch_sums t{};
  device_sums(device, d, main, t, [&] { aa__torch_base_take(&d.base, &t); });
}

void AdaptAllocator::resetPeakStats(c10::DeviceIndex device) {
  aa_pool *main = device_pool_if_made(device);
  if (main == nullptr)
    return;
  aa_pool_reset_peaks(main);
  Dev &d = dev_at(device);
  each_named(device, [](aa_pool *p) { aa_pool_reset_peaks(p); });
  std::lock_guard<std::mutex> g(d.mu);
  for (PrivatePool *pp : private_pools(device))
    aa_pool_reset_peaks(pp->pool);
}

std::string stats_json(int device) {
  aa_pool *p = device_pool_if_made(device);
  if (p == nullptr)
    return std::string();
  std::unique_ptr<aa_pool_stats> st(new aa_pool_stats);
  if (aa_pool_stats_get(p, st.get()) != AA_OK)
    return std::string();
  std::string out(4096, '\0');
  size_t n = aa_pool_stats_json(st.get(), &out[0], out.size());
  if (n >= out.size()) {
    out.assign(n + 1, '\0');
    n = aa_pool_stats_json(st.get(), &out[0], out.size());
  }
  out.resize(n);
  return out;
}

} // namespace adaptalloc_torch
