// snapshot.cpp — torch.cuda.memory._snapshot() for the native allocator:
// every pool of every device (the device pool, its regions' pools, its
// private pools) walked with aa_pool_walk into PyTorch's SegmentInfo list,
// with the memory history's traces (history.cpp) and the allocator's
// settings; and the two history hooks (isHistoryEnabled, recordHistory),
// which hand torch.cuda.memory._record_memory_history to History.
#include "native_internal.h"

#include <limits>

namespace adaptalloc_torch {

namespace {

// aa_pool_walk into PyTorch's SegmentInfo list.
struct SnapWalk {
  std::vector<c10::CachingDeviceAllocator::SegmentInfo> *out;
  int device;
  MempoolId_t owner;
  bool failed = false; // the callback caught an exception
};

int snap_entry_impl(SnapWalk *w, const aa_walk_entry *e);

// The callback aa_pool_walk runs under the pool's lock, between C frames: no
// exception may leave it (it would skip the unlock). A failure (bad_alloc)
// stops the walk instead; snapshot() then raises, the lock released.
int snap_entry(void *user, const aa_walk_entry *e) {
  auto *w = static_cast<SnapWalk *>(user);
  try {
    return snap_entry_impl(w, e);
  } catch (...) {
    w->failed = true;
    return 1;
  }
}

int snap_entry_impl(SnapWalk *w, const aa_walk_entry *e) {
  if (e->kind == AA_WALK_SEGMENT) {
    c10::CachingDeviceAllocator::SegmentInfo s;
    s.device = static_cast<c10::DeviceIndex>(w->device);
    s.address = static_cast<size_t>(e->address);
    s.total_size = e->size;
    s.is_large = (e->flags & AA_WALK_LARGE) != 0;
    s.is_expandable = (e->flags & AA_WALK_EXPANDABLE) != 0;
    s.owner_private_pool_id = w->owner;
    w->out->push_back(std::move(s));
    return 0;
  }
  if (w->out->empty())
    return 0;
  if ((e->flags & AA_WALK_LENT) != 0) {
    // Free pages a stitched range maps again (docs/core.md, "Stitching"):
    // shown there, as that range's segment, so they are cut out of this one
    // (the segments' sizes add up to what is reserved, once).
    auto &cut = w->out->back();
    const size_t end = cut.address + cut.total_size;
    const size_t resume = static_cast<size_t>(e->address) + e->size;
    c10::CachingDeviceAllocator::SegmentInfo rest;
    rest.device = cut.device;
    rest.address = resume;
    rest.total_size = end > resume ? end - resume : 0;
    rest.is_large = cut.is_large;
    rest.is_expandable = cut.is_expandable;
    rest.owner_private_pool_id = cut.owner_private_pool_id;
    cut.total_size = static_cast<size_t>(e->address) - cut.address;
    if (cut.total_size == 0 && cut.blocks.empty())
      w->out->pop_back();
    if (rest.total_size > 0)
      w->out->push_back(std::move(rest));
    return 0;
  }
  auto &seg = w->out->back();
  bool used = (e->flags & AA_WALK_IN_USE) != 0;
  if (used) {
    seg.allocated_size += e->size;
    seg.active_size += e->size;
    seg.requested_size += e->requested;
  }
  // Adjacent free blocks read as one inactive block, as PyTorch's do.
  if (!used && !seg.blocks.empty() && !seg.blocks.back().allocated) {
    seg.blocks.back().size += e->size;
    return 0;
  }
  c10::CachingDeviceAllocator::BlockInfo b;
  b.size = e->size;
  b.requested_size = used ? e->requested : 0;
  b.allocated = used;
  b.active = used;
  seg.blocks.push_back(std::move(b));
  return 0;
}

} // namespace

CCA::SnapshotInfo AdaptAllocator::snapshot(MempoolId_t mempool_id, bool /*include_traces*/) {
  CCA::SnapshotInfo info;
  for (int dev = 0; dev < kMaxDevices; dev++) {
    aa_pool *main = device_pool_if_made(dev);
    if (main == nullptr)
      continue;
    if (mempool_id == kDefaultPool) {
      SnapWalk w{&info.segments, dev, kDefaultPool};
      (void)aa_pool_walk(main, snap_entry, &w);
      TORCH_CHECK(!w.failed, "adaptalloc: snapshot: out of host memory walking the pool");
      each_named(dev, [&](aa_pool *q) {
        SnapWalk wn{&info.segments, dev, kDefaultPool};
        (void)aa_pool_walk(q, snap_entry, &wn);
        TORCH_CHECK(!wn.failed, "adaptalloc: snapshot: out of host memory walking the pool");
      });
    }
    Dev &d = g_dev[dev];
    std::lock_guard<std::mutex> g(d.mu);
    for (PrivatePool *pp : private_pools(dev)) {
      if (mempool_id != kDefaultPool && pp->id != mempool_id)
        continue;
      SnapWalk w{&info.segments, dev, pp->id};
      (void)aa_pool_walk(pp->pool, snap_entry, &w);
      TORCH_CHECK(!w.failed, "adaptalloc: snapshot: out of host memory walking the pool");
    }
  }
  info.device_traces = history_.traces(static_cast<size_t>(c10::cuda::device_count())); // history:
  info.external_annotations = history_.annotations();
  info.config_metadata.garbage_collection_threshold = 0.0;
  info.config_metadata.max_split_size = std::numeric_limits<size_t>::max();
  info.config_metadata.pinned_num_register_threads = 0;
  info.config_metadata.expandable_segments = false;
  info.config_metadata.release_lock_on_malloc = false;
  info.config_metadata.pinned_use_host_register = false;
  info.config_metadata.graph_capture_record_stream_reuse = false;
  info.config_metadata.last_allocator_settings = "adaptalloc";
  return info;
}

bool AdaptAllocator::isHistoryEnabled() { // history:
  return history_.on();
}

// record_function's annotations (torch.profiler.record_function and the
// memory history's phase names in memory_viz), kept while recording.
void AdaptAllocator::recordAnnotation(const std::vector<std::pair<std::string, std::string>> &md) {
  if (!history_.on())
    return;
  c10::DeviceIndex device = 0;
  if (c10::cuda::GetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  history_.annotate(device, md);
}

void AdaptAllocator::recordHistory(
    bool enabled,
    CCA::CreateContextFn context_recorder,
    size_t alloc_trace_max_entries,
    CCA::RecordContext when,
    bool clearHistory,
    const std::vector<std::string> &skip_actions) { // history:
  history_.configure(enabled, context_recorder, alloc_trace_max_entries, when,
                     clearHistory, skip_actions);
}

} // namespace adaptalloc_torch
