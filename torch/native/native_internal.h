// native_internal.h — private to torch/native: what the native allocator's
// files share. The design is allocator.cpp's header comment and docs/torch.md
// ("The native allocator").
//
// Glossary: a device (Dev, one per CUDA ordinal, g_dev) has pools, which the
// device layer (torch/src/devices.h, aa__dl_default) owns: the runtime's
// device pool, the pools of named regions (made on first use) and private
// pools (a CUDA graph's or a torch.cuda.MemPool's: the layer's record, with
// the use count and the live-block count of the rule that keeps a pool,
// plus this allocator's PrivatePool, the record's user pointer). A block
// handed to PyTorch has one host record (Ctx), the DataPtr's context,
// naming its pool. An open beginAllocateToPool (Region, Dev::open) routes a
// stream's allocations to a private pool.
//
// Locking: Dev::mu guards a device's private pools (made, counted and
// destroyed under it; the layer's own mutex is taken inside), open regions,
// fraction and stats base; the plain allocation and free take no lock (the
// layer's pool slots and Dev::regions are atomics). The hot path's helpers
// are inline here (dev_at, device_pool, named_pool, maybe_relaxed) so that
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
#include "devices.h"
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

// A private pool: the device layer's record (its aa_pool, use count and
// live-block count) and what only this allocator needs. Everything in it is
// under its device's mutex (Dev::mu): private pools are used while
// capturing or inside use_mem_pool, never on the plain allocation path.
struct PrivatePool {
  MempoolId_t id;
  int device = 0;
  aa__dl_private *rec = nullptr; // the layer's; its user pointer is this
  aa_pool *pool = nullptr;       // aa__dl_private_pool(rec), kept at hand
  // the live blocks; live_add / live_erase keep the layer's count in step
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
  // MemPool(no_split=True) is the layer's (aa__dl_private_no_split; setNoSplit
  // makes the aa_pool again with aa__dl_private_remake)
};

struct Region { // an open beginAllocateToPool
  MempoolId_t id;
  std::function<bool(cudaStream_t)> filter;
  PrivatePool *pool;
};

struct Dev {
  std::atomic<int> regions{0}; // open beginAllocateToPool regions
  std::mutex mu;               // private pools, region list, fraction, base
  std::vector<Region> open;
  std::atomic<int> oom_pools{0}; // private pools with use_on_oom
  double fraction = 1.0;
  aa__torch_base base{}; // what resetAccumulatedStats subtracts
};

extern Dev *const g_dev; // allocator.cpp: kMaxDevices of them, never destroyed

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

// The device layer (torch/src/devices.h): made at the first call; raises
// when it cannot be made (out of host memory).
static inline aa__dl *dl() {
  aa__dl *l = aa__dl_default();
  TORCH_CHECK(l != nullptr, "adaptalloc: out of host memory for the device layer");
  return l;
}

static inline aa_pool *device_pool(int device) {
  (void)dev_at(device);
  // The layer asks the runtime once (it makes each pool once under its own
  // lock) and reads its slot afterwards.
  aa_pool *p = aa__dl_pool(dl(), device);
  TORCH_CHECK(
      p != nullptr, cat(
                        "adaptalloc: no pool for CUDA device ",
                        device,
                        " (no such GPU, or adaptalloc was built without CUDA)"));
  return p;
}

static inline aa_pool *device_pool_if_made(int device) {
  if (device < 0 || device >= kMaxDevices)
    return nullptr;
  return aa__dl_pool_if_made(aa__dl_default(), device);
}

// Region id's pool on the device, made by the runtime on first use.
static inline aa_pool *named_pool(int device, int id) {
  (void)dev_at(device);
  aa_pool *p = aa__dl_region_pool(dl(), device, id);
  TORCH_CHECK(
      p != nullptr,
      cat("adaptalloc: no pool for region ", aa_runtime_region_name(id),
          " on CUDA device ", device, " (at most ", AA_RUNTIME_MAX_REGION_POOLS,
          " region pools in a process; the log says why)"));
  return p;
}

// Calls f(pool) for each region pool made on the device.
template <class F>
static void each_named(int device, F &&f) {
  for (int i = 0; i < kMaxNamed; i++) {
    aa_pool *p = aa__dl_region_pool_if_made(aa__dl_default(), device, i);
    if (p)
      f(p);
  }
}

// Private pools through the layer (each under d.mu, where they are made
// and destroyed). MempoolId_t is the layer's opaque 128-bit id.
static inline aa__dl_id to_dl_id(MempoolId_t id) {
  aa__dl_id out;
  out.first = static_cast<uint64_t>(id.first);
  out.second = static_cast<uint64_t>(id.second);
  return out;
}

// Private pool `id` on the device, or nullptr.
static inline PrivatePool *find_private(int device, MempoolId_t id) {
  aa__dl_private *rec = aa__dl_private_find(aa__dl_default(), device, to_dl_id(id));
  return rec != nullptr ? static_cast<PrivatePool *>(aa__dl_private_user(rec)) : nullptr;
}

// The device's private pools, in id order (as a std::map of MempoolId_t).
static inline std::vector<PrivatePool *> private_pools(int device) {
  std::vector<PrivatePool *> out;
  aa__dl *l = aa__dl_default();
  size_t n = aa__dl_private_list(l, device, nullptr, 0);
  if (n == 0)
    return out;
  std::vector<aa__dl_private *> recs(n);
  n = aa__dl_private_list(l, device, recs.data(), recs.size());
  for (size_t i = 0; i < n && i < recs.size(); i++) {
    auto *pp = static_cast<PrivatePool *>(aa__dl_private_user(recs[i]));
    if (pp != nullptr)
      out.push_back(pp);
  }
  return out;
}

// A block enters or leaves pp's live set; the layer counts it (a private
// pool stays while it is used or while blocks are live: aa__dl_private_idle).
static inline void live_add(PrivatePool *pp, Ctx *c) {
  pp->live.insert(c);
  (void)aa__dl_private_blocks(pp->rec, 1);
}
static inline void live_erase(PrivatePool *pp, Ctx *c) {
  if (pp->live.erase(c) != 0)
    (void)aa__dl_private_blocks(pp->rec, -1);
}

// graph_pools.cpp (each under d.mu)
PrivatePool *create_or_incref(Dev &d, int device, MempoolId_t id);
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

extern std::shared_ptr<AdaptAllocator> &g_alloc; // allocator.cpp: never destroyed

#pragma GCC visibility pop

} // namespace adaptalloc_torch
