// allocator.cpp — adaptalloc as PyTorch's CUDA allocator: a thin
// implementation of c10::cuda::CUDACachingAllocator::CUDAAllocator in which
// every allocator action goes through adaptalloc's C API (aa_alloc, aa_free,
// aa_record_stream, aa_pool_stats_get, aa_pool_walk, ...). This file: the
// allocator's state (g_dev, g_alloc), install, its life cycle, limits
// (setMemoryFraction), empty_cache, getBaseAllocation and the rest of the
// interface. The other concerns have a file each (native_internal.h lists
// what each defines): alloc.cpp the hot path, stats.cpp memory_stats,
// snapshot.cpp snapshots and history (history.cpp the rings), graph_pools.cpp
// private pools and checkpoints, regions.cpp named regions, module.cpp the
// Python module.
//
// Pools. Each device's tensors come from the runtime's device pool
// (aa_runtime_pool(AA_BACKEND_DEVICE, d)): the pool the policy loop adapts,
// the store records and GET /stats shows. Private pools (graph_pools.cpp)
// and region pools (regions.cpp) are aa_pools of their own on the same
// device backend. The device layer (torch/src/devices.h) owns all three
// and finds the pool that holds a pointer (getBaseAllocation, ipc.cpp).
//
// CUDA IPC (shareIpcHandle, getIpcDevPtr) is ipc.cpp's; trace trackers are
// tracker.cpp's. What stays unsupported raises c10::Error naming adaptalloc:
// MemPools made with another allocator and restoring a CUDA-graph-tree
// checkpoint whose blocks were freed since. See docs/torch.md.
#include "native_internal.h"

#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <algorithm>
#include <stdexcept>

namespace adaptalloc_torch {

// Never destroyed (allocated once, at load): a DataPtr may be freed after
// this library's static destructors ran, at the process's exit, by
// PyTorch's own statics (the CUDA IPC limbo of blocks a consumer still
// held, which logs "Producer process has been terminated before all
// shared CUDA tensors released" and then frees them). A destroyed
// allocator there corrupted the heap.
Dev *const g_dev = new Dev[kMaxDevices];

std::shared_ptr<AdaptAllocator> &g_alloc = *new std::shared_ptr<AdaptAllocator>();
static std::mutex g_install_mu;

void AdaptAllocator::init(int device_count) {
  TORCH_CHECK(
      device_count <= kMaxDevices,
      cat("adaptalloc: ", device_count, " CUDA devices; at most ", kMaxDevices, " are supported"));
  (void)aa_runtime_init(nullptr);
  initialized_.store(true);
}

bool AdaptAllocator::initialized() {
  return initialized_.load();
}

void AdaptAllocator::enable(bool value) {
  enabled_ = value;
}

bool AdaptAllocator::isEnabled() const {
  return enabled_;
}

std::string AdaptAllocator::name() {
  return "adaptalloc";
}

void AdaptAllocator::copy_data(void *dest, const void *src, std::size_t count) const {
  C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
}

// The user's cap (set_per_process_memory_fraction, set_limit): an override
// of the pool's settings through the runtime's one path, so that no later
// policy change (PATCH, the loop) drops it; a pool the runtime does not run
// (it is not started) gets the limit directly.
static void cap_pool(aa_pool *p, size_t bytes) {
  if (aa_runtime_pool_cap(p, bytes, "torch") != AA_OK)
    aa_pool_set_limit(p, bytes);
}

double AdaptAllocator::getMemoryFraction(c10::DeviceIndex device) {
  Dev &d = dev_at(device);
  std::lock_guard<std::mutex> g(d.mu);
  return d.fraction;
}

void AdaptAllocator::setMemoryFraction(double fraction, c10::DeviceIndex device) {
  TORCH_CHECK(
      fraction >= 0.0 && fraction <= 1.0,
      cat("adaptalloc: memory fraction ", fraction, " is not in [0, 1]"));
  Dev &d = dev_at(device);
  aa_pool *p = device_pool(device);
  size_t free_b = 0, total_b = 0;
  {
    c10::cuda::CUDAGuard g(device);
    C10_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  }
  std::lock_guard<std::mutex> g(d.mu);
  d.fraction = fraction;
  // 1.0 is the whole card: no cap at all.
  cap_pool(
      p,
      fraction >= 1.0
          ? 0
          : std::max<size_t>(
                1, static_cast<size_t>(fraction * static_cast<double>(total_b))));
}

void AdaptAllocator::emptyCache(MempoolId_t mempool_id) {
  for (int dev = 0; dev < kMaxDevices; dev++) {
    aa_pool *main = device_pool_if_made(dev);
    if (main == nullptr)
      continue;
    Dev &d = g_dev[dev];
    std::lock_guard<std::mutex> g(d.mu);
    // Never while a region is open: a capture may be under way, and
    // returning memory synchronizes.
    if (d.regions.load(std::memory_order_relaxed) > 0)
      continue;
    if (mempool_id == kDefaultPool) {
      (void)aa_pool_release(main);
      each_named(dev, [](aa_pool *p) { (void)aa_pool_release(p); });
    }
    std::vector<PrivatePool *> pps;
    for (PrivatePool *pp : private_pools(dev)) {
      if (mempool_id == kDefaultPool || pp->id == mempool_id)
        pps.push_back(pp);
    }
    for (PrivatePool *pp : pps) {
      if (!maybe_destroy(d, pp))
        (void)aa_pool_release(pp->pool);
    }
  }
  if (tracking_.load(std::memory_order_acquire)) { // trackers: the segments released
    for (int dev = 0; dev < kMaxDevices; dev++) {
      if (device_pool_if_made(dev) != nullptr)
        track(CCA::TraceEntry::SNAPSHOT, dev, 0, 0, nullptr);
    }
  }
}

std::vector<CCA::StreamSegmentSize> AdaptAllocator::getExpandableSegmentSizes(
    c10::DeviceIndex /*device*/) {
  return {}; // no PyTorch expandable segments to register with NCCL
}

void *AdaptAllocator::getBaseAllocation(void *ptr, size_t *size) {
  // the pool whose memory holds ptr, on any device (the layer's owner
  // lookup: device, region and private pools)
  aa_pool *owner = aa__dl_owner(aa__dl_default(), ptr, nullptr);
  size_t n = owner != nullptr ? aa_block_size(owner, ptr) : 0;
  if (n) {
    if (size)
      *size = n;
    return ptr; // a block is its own allocation
  }
  TORCH_CHECK(false, cat("adaptalloc: getBaseAllocation: ", ptr, " is not ours"));
  return nullptr;
}

void AdaptAllocator::attachOutOfMemoryObserver(CCA::OutOfMemoryObserver observer) {
  std::lock_guard<std::mutex> g(obs_mu_);
  observers_.push_back(std::move(observer));
}

void AdaptAllocator::enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) {
  c10::cuda::CUDAGuard g(dev);
  cudaError_t e = cudaDeviceEnablePeerAccess(dev_to_access, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return;
  }
  C10_CUDA_CHECK(e);
}

cudaError_t AdaptAllocator::memcpyAsync(
    void *dst,
    int dstDevice,
    const void *src,
    int srcDevice,
    size_t count,
    cudaStream_t stream,
    bool p2p_enabled) {
  // Pages of the expandable path are cuMemMap'd: without peer access
  // they need the peer copy.
  if (p2p_enabled || dstDevice == srcDevice)
    return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
  return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
}

void install(int device_count) {
  std::lock_guard<std::mutex> g(g_install_mu);
  if (g_alloc && CCA::get() == g_alloc.get())
    return;
  if (device_count < 0 || device_count > kMaxDevices)
    throw std::runtime_error(
        "adaptalloc: device_count " + std::to_string(device_count) +
        " is not in [0, " + std::to_string(kMaxDevices) + "]");
  CCA::CUDAAllocator *cur = CCA::get();
  if (cur != nullptr && cur->initialized())
    throw std::runtime_error(
        "adaptalloc: cannot install: PyTorch's CUDA allocator (" + cur->name() +
        ") is already initialized, i.e. CUDA memory was already allocated in "
        "this process. Install adaptalloc before the first CUDA tensor (or "
        "run the script with `python -m adaptalloc.torch script.py`).");
  auto a = std::make_shared<AdaptAllocator>();
  g_alloc = a; // before it can hand out a DataPtr
  torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(a);
}

bool is_installed() {
  std::lock_guard<std::mutex> g(g_install_mu);
  return g_alloc != nullptr && CCA::get() == g_alloc.get();
}

void set_limit(int device, size_t bytes) { cap_pool(device_pool(device), bytes); }

} // namespace adaptalloc_torch
