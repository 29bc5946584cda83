// native_internal.h — private to torch/native: what the native allocator's
// files share. The design is allocator.cpp's header comment and docs/torch.md
// ("The native allocator").
//
// Glossary: a device (Dev, one per CUDA ordinal, g_dev) has pools: the
// runtime's device pool, the pools of named regions (Dev::named, made on
// first use) and private pools (PrivatePool: a CUDA graph's or a
// torch.cuda.MemPool's, Dev::pools). A block handed to PyTorch has one host
// record (Ctx), the DataPtr's context, naming its pool. An open
// beginAllocateToPool (Region, Dev::open) routes a stream's allocations to a
// private pool.
//
// Locking: Dev::mu guards a device's private pools, open regions, fraction
// and stats base; the plain allocation and free take no lock (they read
// Dev::pool, Dev::named and Dev::regions, atomics). The hot path's helpers are
// inline here (dev_at, device_pool, named_pool, maybe_relaxed) so that
// alloc.cpp compiles them into allocate() as one file did.
//
// Who defines what (the class's members are grouped the same way below):
//   allocator.cpp    g_dev, g_alloc, install, is_installed, set_limit; the
//                    life cycle, limits, empty_cache, peers
//   ipc.cpp          CUDA IPC: shareIpcHandle, getIpcDevPtr
//   tracker.cpp      trace trackers: attachAllocatorTraceTracker, track,
//                    segment_diff
//   alloc.cpp        deleter; allocate, alloc_ctx, free_ctx, raw alloc/delete,
//                    out_of_memory, recordStream
//   graph_pools.cpp  create_or_incref, maybe_destroy, route, private_pool_count;
//                    beginAllocateToPool .. setCheckpointPoolState
//   stats.cpp        stats_json; getDeviceStats, reset*Stats, cacheInfo
//   snapshot.cpp     snapshot, the history hooks (history.cpp keeps the rings)
//   regions.cpp      t_named, set_region, current_region
#pragma once

#include "allocator.h"
#include "history.h"

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "adaptalloc/core.h"
#include "adaptalloc/runtime.h"
#include "stats_map.h"

namespace adaptalloc_torch {

// Hidden (the module exports only its PyInit): g_dev and t_named are then
// reached as directly from the other files as from their own.
#pragma GCC visibility push(hidden)

namespace CCA = c10::cuda::CUDACachingAllocator;
using c10::MempoolId_t;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

inline constexpr int kMaxDevices = 64;
inline constexpr int kMaxNamed = AA_RUNTIME_MAX_REGIONS;

// The region (aa_runtime_region_id) this thread allocates into; -1: none.
// regions.cpp. __thread, not thread_local: no TLS wrapper call on the hot
// path (an extern thread_local may have a dynamic initializer).
extern __thread int t_named;

// Messages are built here, without iostreams: a toolchain that links parts of
// libstdc++ statically leaves this module's stream locale unusable (PyTorch's
// multi-argument TORCH_CHECK and format_size use ostringstream). Every
// TORCH_CHECK below therefore gets one ready string.
inline std::string piece(const char *s) {
  return s ? std::string(s) : std::string("(null)");
}
inline std::string piece(const std::string &s) {
  return s;
}
inline std::string piece(const void *p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}
inline std::string piece(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
template <class T>
typename std::enable_if<std::is_integral<T>::value, std::string>::type piece(T v) {
  return std::to_string(v);
}
template <class... A>
inline std::string cat(const A &...a) {
  std::string out;
  int unused[] = {0, (out += piece(a), 0)...};
  (void)unused;
  return out;
}

// "1.50 GiB": PyTorch's format_size, without a stream.
inline std::string size_str(uint64_t n) {
  char b[48];
  if (n <= 1024)
    std::snprintf(b, sizeof b, "%llu bytes", static_cast<unsigned long long>(n));
  else if (n <= (1ull << 20))
    std::snprintf(b, sizeof b, "%.2f KiB", static_cast<double>(n) / 1024.0);
  else if (n <= (1ull << 30))
    std::snprintf(b, sizeof b, "%.2f MiB", static_cast<double>(n) / 1048576.0);
  else
    std::snprintf(b, sizeof b, "%.2f GiB", static_cast<double>(n) / 1073741824.0);
  return b;
}
inline constexpr MempoolId_t kDefaultPool{0, 0};

struct PrivatePool;

// The DataPtr context: everything the free needs.
struct Ctx {
  void *ptr;
  size_t size; // as asked for (aa_free checks it against the block)
  aa_pool *pool;
  cudaStream_t stream; // the allocation stream
  PrivatePool *priv;   // nullptr: the device pool
  int device;
  bool dead; // private pools only, under Dev::mu: a checkpoint restore took
             // the block over (or freed it); the deleter only drops the record
};

// A private pool. Everything in it is under its device's mutex (Dev::mu):
// private pools are used while capturing or inside use_mem_pool, never on
// the plain allocation path.
struct PrivatePool {
  MempoolId_t id;
  int device = 0;
  aa_pool *pool = nullptr;
  int use_count = 0;
  std::unordered_set<Ctx *> live;
  // Blocks some outstanding checkpoint (getCheckpointState) lists, with the
  // number of such checkpoints. One of them freed by its tensor is not
  // returned to the pool but kept as a zombie, so that restoring the
  // checkpoint (setCheckpointPoolState) can hand it out again at the same
  // address; it is freed for real when no checkpoint lists it any more.
  std::unordered_map<void *, int> pinned;
  std::unordered_map<void *, Ctx *> zombies;
  // MemPool(use_on_oom=True): the device pool's allocations that fail take
  // this pool's memory before raising (alloc.cpp)
  bool use_on_oom = false;
  // MemPool(no_split=True): every block its own backend allocation
  // (graph_pools.cpp makes the aa_pool so)
  bool no_split = false;
};

struct Region { // an open beginAllocateToPool
  MempoolId_t id;
  std::function<bool(cudaStream_t)> filter;
  PrivatePool *pool;
};

struct Dev {
  std::atomic<aa_pool *> pool{nullptr};
  std::atomic<aa_pool *> named[kMaxNamed]{};  // regions' pools, made on first use
  std::atomic<int> regions{0};                // open beginAllocateToPool regions
  std::mutex mu;                              // pools, region list, released pools, fraction, base
  std::map<MempoolId_t, PrivatePool *> pools; // use_count > 0, or blocks live
  std::vector<Region> open;
  std::atomic<int> oom_pools{0}; // private pools with use_on_oom
  double fraction = 1.0;
  aa__torch_base base{}; // what resetAccumulatedStats subtracts
};

extern Dev g_dev[kMaxDevices]; // allocator.cpp

void deleter(void *ctx); // alloc.cpp

// Runs f with the calling thread in relaxed stream-capture mode when a
// region is open on the device (a capture may be under way), else plainly.
template <class F>
static auto maybe_relaxed(const Dev &d, F &&f) -> decltype(f()) {
  if (d.regions.load(std::memory_order_relaxed) == 0)
    return f();
  c10::cuda::CUDAStreamCaptureModeGuard g(cudaStreamCaptureModeRelaxed);
  return f();
}

static inline Dev &dev_at(int device) {
  TORCH_CHECK(
      device >= 0 && device < kMaxDevices,
      cat("adaptalloc: CUDA device ", device, " out of range (0..", kMaxDevices - 1, ")"));
  return g_dev[device];
}

static inline aa_pool *device_pool(int device) {
  Dev &d = dev_at(device);
  aa_pool *p = d.pool.load(std::memory_order_acquire);
  if (p)
    return p;
  // The runtime makes each pool once under its own lock.
  p = aa_runtime_pool(AA_BACKEND_DEVICE, device);
  TORCH_CHECK(
      p != nullptr, cat(
                        "adaptalloc: no pool for CUDA device ",
                        device,
                        " (no such GPU, or adaptalloc was built without CUDA)"));
  d.pool.store(p, std::memory_order_release);
  return p;
}

static inline aa_pool *device_pool_if_made(int device) {
  if (device < 0 || device >= kMaxDevices)
    return nullptr;
  return g_dev[device].pool.load(std::memory_order_acquire);
}

// Region id's pool on the device, made by the runtime on first use.
static inline aa_pool *named_pool(int device, int id) {
  Dev &d = dev_at(device);
  aa_pool *p = d.named[id].load(std::memory_order_acquire);
  if (p)
    return p;
  p = aa_runtime_region_pool(id, AA_BACKEND_DEVICE, device);
  TORCH_CHECK(
      p != nullptr,
      cat("adaptalloc: no pool for region ", aa_runtime_region_name(id),
          " on CUDA device ", device, " (at most ", AA_RUNTIME_MAX_REGION_POOLS,
          " region pools in a process; the log says why)"));
  d.named[id].store(p, std::memory_order_release);
  return p;
}

// Calls f(pool) for each region pool made on the device.
template <class F>
static void each_named(const Dev &d, F &&f) {
  for (int i = 0; i < kMaxNamed; i++) {
    aa_pool *p = d.named[i].load(std::memory_order_acquire);
    if (p)
      f(p);
  }
}

// graph_pools.cpp (each under d.mu)
PrivatePool *create_or_incref(Dev &d, int device, MempoolId_t id);
// A private pool's aa_pool (no_split: large blocks straight from the backend).
aa_pool *make_private_pool(int device, MempoolId_t id, bool no_split);
bool maybe_destroy(Dev &d, PrivatePool *pp);
PrivatePool *route(Dev &d, cudaStream_t stream);

class AdaptAllocator final : public CCA::CUDAAllocator {
public:
  // alloc.cpp: allocation and free (the hot path), raw allocations, out of memory
  c10::DataPtr allocate(size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override;
  // inline, as when they were defined in the class: only alloc.cpp calls
  // them, and the compiler weighs them for inlining into allocate() and
  // deleter() as before the split. Defined in alloc.cpp alone: a call from
  // any other file does not link (move the definition here first)
  inline Ctx *alloc_ctx(int device, size_t n, cudaStream_t stream);
  static inline Ctx *make_ctx(const Dev &d, const Ctx &v);
  inline void free_ctx(Ctx *c);
  inline void free_ctx_now(Ctx *c); // free_ctx past history and trackers
  [[noreturn]] void out_of_memory(int device, size_t n, aa_pool *pool);
  // A use_on_oom private pool's block for a request the device pool
  // refused, or nullptr (under no lock; takes d.mu).
  Ctx *alloc_on_oom_pool(Dev &d, int device, size_t n, cudaStream_t stream);
  void *raw_alloc(size_t nbytes) override;
  void *raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void *ptr) override;
  static bool raw_delete_private(void *ptr);
  void recordStream(const c10::DataPtr &ptr, c10::cuda::CUDAStream stream)
      override;

  // graph_pools.cpp: private pools (CUDA graphs, torch.cuda.MemPool) and their checkpoints
  static bool free_private(Dev &d, PrivatePool *pp, Ctx *c);
  void beginAllocateToPool(
      c10::DeviceIndex device,
      MempoolId_t mempool_id,
      std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id)
      override;
  void releasePool(c10::DeviceIndex device, MempoolId_t mempool_id) override;
  int getPoolUseCount(c10::DeviceIndex device, MempoolId_t mempool_id)
      override;
  void createOrIncrefPool(
      c10::DeviceIndex device,
      MempoolId_t mempool_id,
      std::shared_ptr<CCA::CUDAAllocator> allocator) override;
  void setUseOnOOM(c10::DeviceIndex device, MempoolId_t mempool_id, bool use_on_oom)
      override;
  void setNoSplit(c10::DeviceIndex device, MempoolId_t mempool_id) override;
  bool checkPoolLiveAllocations(
      c10::DeviceIndex device,
      MempoolId_t mempool_id,
      const std::unordered_set<void *> &expected_live_allocations) override;
  std::shared_ptr<CCA::AllocatorState> getCheckpointState(
      c10::DeviceIndex device,
      MempoolId_t id) override;
  CCA::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device,
      std::shared_ptr<CCA::AllocatorState> pps) override;

  // stats.cpp: stats (memory_stats through torch/src/stats_map.c, resets, cacheInfo)
  void cacheInfo(c10::DeviceIndex device, size_t *largestBlock) override;
  DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;

  // snapshot.cpp: snapshots (torch.cuda.memory._snapshot) and the memory history hooks
  CCA::SnapshotInfo snapshot(MempoolId_t mempool_id, bool /*include_traces*/)
      override;
  bool isHistoryEnabled() override;
  void recordAnnotation(const std::vector<std::pair<std::string, std::string>> &md) override;
  void recordHistory(
      bool enabled,
      CCA::CreateContextFn context_recorder,
      size_t alloc_trace_max_entries,
      CCA::RecordContext when,
      bool clearHistory,
      const std::vector<std::string> &skip_actions) override;

  // allocator.cpp: life cycle, limits, empty_cache, the rest of the interface
  void init(int device_count) override;
  bool initialized() override;
  void enable(bool value) override;
  bool isEnabled() const override;
  std::string name() override;
  void copy_data(void *dest, const void *src, std::size_t count) const override;
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  void emptyCache(MempoolId_t mempool_id) override;
  std::vector<CCA::StreamSegmentSize> getExpandableSegmentSizes(
      c10::DeviceIndex /*device*/) override;
  void *getBaseAllocation(void *ptr, size_t *size) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  CCA::ShareableHandle shareIpcHandle(void *ptr) override;
  void attachOutOfMemoryObserver(CCA::OutOfMemoryObserver observer) override;
  // tracker.cpp: trace trackers
  void attachAllocatorTraceTracker(CCA::AllocatorTraceTracker tracker) override;
  bool tracking() const { return tracking_.load(std::memory_order_relaxed); }
  // Tells the trackers of one action (SNAPSHOT: only the segments' changes).
  void track(History::Action action, int device, size_t addr, size_t size,
             cudaStream_t stream);
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access)
      override;
  cudaError_t memcpyAsync(
      void *dst,
      int dstDevice,
      const void *src,
      int srcDevice,
      size_t count,
      cudaStream_t stream,
      bool p2p_enabled) override;

private:
  std::atomic<bool> initialized_{false};
  bool enabled_ = true;
  std::mutex raw_mu_;
  std::unordered_map<void *, Ctx *> raw_;
  std::mutex obs_mu_;
  std::vector<CCA::OutOfMemoryObserver> observers_;
  History history_; // history: _record_memory_history's state and entries
  // trackers (tracker.cpp): the attached ones, and each device's segments
  // as last seen with its pools' backend-call count then
  struct SegState {
    std::map<size_t, std::pair<size_t, bool>> segs;
    uint64_t calls = 0;
    bool seen = false;
  };
  void segment_diff(int dev, std::vector<CCA::TraceEntry> &out);
  std::atomic<bool> tracking_{false};
  std::mutex trk_mu_; // trackers_, segs_
  std::vector<CCA::AllocatorTraceTracker> trackers_;
  SegState segs_[kMaxDevices];
};

extern std::shared_ptr<AdaptAllocator> g_alloc; // allocator.cpp

#pragma GCC visibility pop

} // namespace adaptalloc_torch
