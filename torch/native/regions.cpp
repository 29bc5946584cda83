// regions.cpp — named regions (adaptalloc.torch.region("kv_cache")) in the
// native allocator: a thread-local region id (set_region) sends that
// thread's allocations to the runtime's pool of that region on the device
// (aa_runtime_region_pool, through the device layer: named_pool in
// native_internal.h, aa__dl_region_pool; alloc.cpp reads t_named). An open beginAllocateToPool whose filter
// takes the stream (a capture, use_mem_pool) wins over the region. The
// block's Ctx names its pool, so the free needs nothing more; the device's
// stats are the device pool's plus its private pools' plus its regions'
// pools' (stats.cpp).
#include "native_internal.h"

namespace adaptalloc_torch {

__thread int t_named = -1;

int set_region(int id) {
  TORCH_CHECK(
      id == -1 || (id >= 0 && id < kMaxNamed && aa_runtime_region_name(id) != nullptr),
      cat("adaptalloc: set_region: ", id, " is not a region id (adaptalloc._C.region_id)"));
  int prev = t_named;
  t_named = id;
  return prev;
}

int current_region() {
  return t_named;
}

} // namespace adaptalloc_torch
