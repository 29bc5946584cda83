// tracker.cpp — allocator trace trackers (attachAllocatorTraceTracker: what
// ProcessGroupNCCL attaches to register segments with NCCL when
// TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1, and what a user may attach
// to watch the allocator). Entry points: AdaptAllocator::
// attachAllocatorTraceTracker, AdaptAllocator::track (alloc.cpp calls it for
// each allocation and free while a tracker is attached; emptyCache after
// releasing).
//
// Each tracker gets PyTorch's TraceEntry: ALLOC when a block is handed out,
// FREE_REQUESTED and FREE_COMPLETED when it is freed (the pool takes it back
// at once, as the memory history records it), and the segments: a segment is
// a backend allocation (a slab, a cache-path segment: SEGMENT_ALLOC and
// SEGMENT_FREE) or a mapped run of the expandable path or a stitched range
// (SEGMENT_MAP and SEGMENT_UNMAP), as aa_pool_walk shows them. The core makes
// its backend calls itself (the policy loop's trims on its own thread too),
// so segments are found by comparing the device's segments with the last
// look, taken whenever its pools' backend-call counters moved: before an
// allocation's ALLOC (so a new segment is announced before a block in it),
// after a free, after empty_cache. A segment that changed (a run that grew
// or merged) is announced unmapped as it was and mapped as it is. A trim of
// the loop is seen at the next allocation or free of the device, after the
// memory went back (PyTorch's own tracker hears of an unmap before it).
// Nothing of this runs while no tracker is attached (one relaxed load).
#include "native_internal.h"

namespace adaptalloc_torch {

namespace {

struct SegWalk {
  std::map<size_t, std::pair<size_t, bool>> *out; // address -> size, mapped (not malloc'd)
};

int seg_entry(void *user, const aa_walk_entry *e) {
  if (e->kind != AA_WALK_SEGMENT)
    return 0;
  auto *w = static_cast<SegWalk *>(user);
  try {
    bool mapped = (e->flags & (AA_WALK_EXPANDABLE | AA_WALK_STITCHED)) != 0;
    (*w->out)[static_cast<size_t>(e->address)] = {static_cast<size_t>(e->size), mapped};
  } catch (...) {
    return 1;
  }
  return 0;
}

// Calls f(pool) for every pool of the device: its device pool, regions' and
// private pools.
template <class F>
void each_pool(int dev, F &&f) {
  aa_pool *main = device_pool_if_made(dev);
  if (main == nullptr)
    return;
  f(main);
  Dev &d = g_dev[dev];
  each_named(dev, f);
  std::lock_guard<std::mutex> g(d.mu);
  for (PrivatePool *pp : private_pools(dev))
    f(pp->pool);
}

} // namespace

void AdaptAllocator::attachAllocatorTraceTracker(CCA::AllocatorTraceTracker tracker) {
  std::lock_guard<std::mutex> g(trk_mu_);
  trackers_.push_back(std::move(tracker));
  if (!tracking_.load(std::memory_order_relaxed)) {
    // the segments already there are the start: a tracker attached late
    // hears of them as PyTorch's does (ProcessGroupNCCL registers the
    // existing ones itself through the snapshot)
    for (int dev = 0; dev < kMaxDevices; dev++)
      segs_[dev].seen = false;
  }
  tracking_.store(true, std::memory_order_release);
}

// Under trk_mu_: the device's segment changes since the last look, as entries.
void AdaptAllocator::segment_diff(int dev, std::vector<CCA::TraceEntry> &out) {
  uint64_t calls = 0;
  each_pool(dev, [&](aa_pool *p) {
    aa_pool_stats st;
    if (aa_pool_stats_get_opts(p, &st, AA_STATS_NO_SIZES) == AA_OK)
      calls += st.backend_allocs * 3 + st.backend_frees;
  });
  SegState &s = segs_[dev];
  if (s.seen && calls == s.calls)
    return;
  std::map<size_t, std::pair<size_t, bool>> now;
  SegWalk w{&now};
  each_pool(dev, [&](aa_pool *p) { (void)aa_pool_walk(p, seg_entry, &w); });
  const auto t = c10::getApproximateTime();
  auto emit = [&](CCA::TraceEntry::Action a, size_t addr, size_t size) {
    out.emplace_back(a, static_cast<c10::DeviceIndex>(dev), addr, size, nullptr,
                     MempoolId_t{0, 0}, t);
  };
  if (s.seen) {
    for (auto &kv : s.segs) {
      auto it = now.find(kv.first);
      if (it == now.end() || it->second != kv.second)
        emit(kv.second.second ? CCA::TraceEntry::SEGMENT_UNMAP : CCA::TraceEntry::SEGMENT_FREE,
             kv.first, kv.second.first);
    }
  }
  for (auto &kv : now) {
    auto it = s.segs.find(kv.first);
    if (!s.seen || it == s.segs.end() || it->second != kv.second)
      emit(kv.second.second ? CCA::TraceEntry::SEGMENT_MAP : CCA::TraceEntry::SEGMENT_ALLOC,
           kv.first, kv.second.first);
  }
  s.segs.swap(now);
  s.calls = calls;
  s.seen = true;
}

void AdaptAllocator::track(History::Action action, int device, size_t addr, size_t size,
                           cudaStream_t stream) {
  std::vector<CCA::TraceEntry> entries;
  std::vector<CCA::AllocatorTraceTracker> ts;
  {
    std::lock_guard<std::mutex> g(trk_mu_);
    ts = trackers_;
    bool is_free = action == CCA::TraceEntry::FREE_REQUESTED ||
                   action == CCA::TraceEntry::FREE_COMPLETED;
    if (!is_free && action != CCA::TraceEntry::SNAPSHOT)
      segment_diff(device, entries);
    if (action != CCA::TraceEntry::SNAPSHOT)
      entries.emplace_back(action, static_cast<c10::DeviceIndex>(device), addr, size, stream,
                           MempoolId_t{0, 0}, c10::getApproximateTime());
    if (action == CCA::TraceEntry::FREE_COMPLETED || action == CCA::TraceEntry::SNAPSHOT)
      segment_diff(device, entries);
  }
  for (const auto &e : entries) {
    for (auto &t : ts)
      t(e);
  }
}

} // namespace adaptalloc_torch
