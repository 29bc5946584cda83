// allocator.cpp — adaptalloc as PyTorch's CUDA allocator: a thin
// implementation of c10::cuda::CUDACachingAllocator::CUDAAllocator in which
// every allocator action goes through adaptalloc's C API (aa_alloc, aa_free,
// aa_record_stream, aa_pool_stats_get, aa_pool_walk, ...).
// One concern, PyTorch's allocator interface over the C API, kept in one
// file though it runs past 600 lines: its pools, graph checkpoints and stats
// share one set of private structures.
//
// Pools. Each device's tensors come from the runtime's device pool
// (aa_runtime_pool(AA_BACKEND_DEVICE, d)): the pool the policy loop adapts,
// the store records and GET /stats shows. Each private pool PyTorch asks for
// (a CUDA graph's capture pool, a torch.cuda.MemPool) is an aa_pool of its
// own over the same device backend, made on the first beginAllocateToPool or
// createOrIncrefPool of its id and destroyed when its use count is back to 0
// and its last block is freed (or at the next empty_cache).
//
// Named regions (adaptalloc.torch.region("kv_cache")): a thread-local id
// (set_region) sends that thread's allocations to the runtime's pool of that
// region on the device (aa_runtime_region_pool), cached per device. An open
// beginAllocateToPool whose filter takes the stream (a capture, use_mem_pool)
// wins over the region. The block's Ctx names its pool, so the free needs
// nothing more; the device's stats are the device pool's plus its private
// pools' plus its regions' pools'.
//
// Hot path. allocate() is aa_alloc on the current stream plus one small host
// record (Ctx) that travels as the DataPtr's context: pointer, requested
// size, pool and stream. The deleter frees with exactly those; there is no
// lock and no map on this path. Only while some beginAllocateToPool region
// is open on the device (graph capture, use_mem_pool) does an allocation
// take the device's mutex to ask the regions' filters where it belongs, and
// then the pool call runs in relaxed stream-capture mode, so that a backend
// call (cudaMalloc, an event query of an earlier event) is legal while
// another stream captures. The CUDA backend never records an event on a
// capturing stream (core/src/cuda), so nothing illegal reaches a capture.
//
// Memory history (torch.cuda.memory._record_memory_history) is history.cpp's:
// the lines marked "history:" here hand it each allocation, free and OOM.
//
// What stays unsupported raises c10::Error naming adaptalloc: CUDA IPC
// (shareIpcHandle, getIpcDevPtr), MemPools made
// with another allocator, use_on_oom and no_split pools, and restoring a
// CUDA-graph-tree checkpoint whose blocks were freed since. See docs/torch.md.
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
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "adaptalloc/core.h"
#include "adaptalloc/runtime.h"

namespace adaptalloc_torch {
namespace {

namespace CCA = c10::cuda::CUDACachingAllocator;
using c10::MempoolId_t;
using c10::CachingAllocator::Stat;
using c10::CachingAllocator::StatType;
using c10::CachingDeviceAllocator::DeviceStats;

constexpr int kMaxDevices = 64;
constexpr int kMaxNamed = AA_RUNTIME_MAX_REGIONS;

// The region (aa_runtime_region_id) this thread allocates into; -1: none.
thread_local int t_named = -1;

// Messages are built here, without iostreams: a toolchain that links parts of
// libstdc++ statically leaves this module's stream locale unusable (PyTorch's
// multi-argument TORCH_CHECK and format_size use ostringstream). Every
// TORCH_CHECK below therefore gets one ready string.
std::string piece(const char *s) {
  return s ? std::string(s) : std::string("(null)");
}
std::string piece(const std::string &s) {
  return s;
}
std::string piece(const void *p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}
std::string piece(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}
template <class T>
typename std::enable_if<std::is_integral<T>::value, std::string>::type piece(T v) {
  return std::to_string(v);
}
template <class... A>
std::string cat(const A &...a) {
  std::string out;
  int unused[] = {0, (out += piece(a), 0)...};
  (void)unused;
  return out;
}

// "1.50 GiB": PyTorch's format_size, without a stream.
std::string size_str(uint64_t n) {
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
constexpr MempoolId_t kDefaultPool{0, 0};

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
};

struct Region { // an open beginAllocateToPool
  MempoolId_t id;
  std::function<bool(cudaStream_t)> filter;
  PrivatePool *pool;
};

// What resetAccumulatedStats subtracts.
struct Base {
  uint64_t allocs = 0, frees = 0, backend_allocs = 0, backend_frees = 0;
  uint64_t large_allocs = 0, large_frees = 0;
  uint64_t ooms = 0, retries = 0;
};

struct Dev {
  std::atomic<aa_pool *> pool{nullptr};
  std::atomic<aa_pool *> named[kMaxNamed]{};  // regions' pools, made on first use
  std::atomic<int> regions{0};                // open beginAllocateToPool regions
  std::mutex mu;                              // pools, region list, released pools, fraction, base
  std::map<MempoolId_t, PrivatePool *> pools; // use_count > 0, or blocks live
  std::vector<Region> open;
  double fraction = 1.0;
  Base base;
};

Dev g_dev[kMaxDevices];

void deleter(void *ctx);

// Runs f with the calling thread in relaxed stream-capture mode when a
// region is open on the device (a capture may be under way), else plainly.
template <class F>
auto maybe_relaxed(const Dev &d, F &&f) -> decltype(f()) {
  if (d.regions.load(std::memory_order_relaxed) == 0)
    return f();
  c10::cuda::CUDAStreamCaptureModeGuard g(cudaStreamCaptureModeRelaxed);
  return f();
}

Dev &dev_at(int device) {
  TORCH_CHECK(
      device >= 0 && device < kMaxDevices,
      cat("adaptalloc: CUDA device ", device, " out of range (0..", kMaxDevices - 1, ")"));
  return g_dev[device];
}

aa_pool *device_pool(int device) {
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

aa_pool *device_pool_if_made(int device) {
  if (device < 0 || device >= kMaxDevices)
    return nullptr;
  return g_dev[device].pool.load(std::memory_order_acquire);
}

// Region id's pool on the device, made by the runtime on first use.
aa_pool *named_pool(int device, int id) {
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
void each_named(const Dev &d, F &&f) {
  for (int i = 0; i < kMaxNamed; i++) {
    aa_pool *p = d.named[i].load(std::memory_order_acquire);
    if (p)
      f(p);
  }
}

// Under d.mu.
PrivatePool *create_or_incref(Dev &d, int device, MempoolId_t id) {
  auto it = d.pools.find(id);
  if (it != d.pools.end()) {
    it->second->use_count++;
    return it->second;
  }
  aa_pool *main = device_pool(device);
  // The device policy's slab and class ladder (a graph pool made with the
  // core's defaults, classes to 1 MiB in slabs of their own, took a third
  // more device memory than PyTorch's graph pool), but the cache path for
  // large blocks: a capture's memory stays mapped while the graph lives,
  // and no limit (set_per_process_memory_fraction caps the device pool).
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  (void)aa_runtime_pool_config(AA_BACKEND_DEVICE, &cfg);
  cfg.large_mode = AA_LARGE_CACHE;
  cfg.large_cache_bytes = 0;
  cfg.limit_bytes = 0;
  cfg.region = nullptr;
  // Small slabs: each class of a private pool holds one slab at least, and
  // in a graph's pool most classes hold a few blocks, so 2 MiB slabs left
  // 10 MiB of a BERT b1 capture's pool empty (48 MiB against PyTorch's 42);
  // 64 KiB slabs (at least four blocks of the largest class, never more
  // than the policy's slab) made it 42. A capture allocates once, so the
  // extra slab refills cost nothing that matters.
  size_t slab = size_t(64) << 10;
  while (slab < cfg.max_small * 4 && slab < cfg.slab_size)
    slab *= 2;
  cfg.slab_size = std::min(slab, cfg.slab_size);
  char name[32];
  std::snprintf(name, sizeof name, "cuda%d.pool%llu.%llu", device,
                static_cast<unsigned long long>(id.first),
                static_cast<unsigned long long>(id.second));
  cfg.name = name;
  cfg.backend = aa_pool_backend(main);
  aa_pool *p = nullptr;
  int rc = aa_pool_new(&cfg, &p);
  if (rc != AA_OK) { // a policy the core refuses here: its defaults
    aa_pool_config_init(&cfg);
    cfg.name = name;
    cfg.backend = aa_pool_backend(main);
    rc = aa_pool_new(&cfg, &p);
  }
  TORCH_CHECK(
      rc == AA_OK,
      cat("adaptalloc: cannot make a private pool on device ", device, ": ", aa_strerror(rc)));
  auto *pp = new PrivatePool();
  pp->id = id;
  pp->device = device;
  pp->pool = p;
  pp->use_count = 1;
  d.pools.emplace(id, pp);
  return pp;
}

// Destroys a private pool nobody uses any more, once no block of it is live
// and no capture can be under way (the synchronize). Under d.mu. Returns
// whether it was destroyed.
bool maybe_destroy(Dev &d, PrivatePool *pp) {
  if (pp->use_count > 0 || !pp->live.empty() ||
      d.regions.load(std::memory_order_relaxed) > 0)
    return false;
  {
    c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(pp->device));
    // Graph replays may still read this memory.
    C10_CUDA_CHECK(cudaDeviceSynchronize());
  }
  d.pools.erase(pp->id);
  aa_pool_destroy(pp->pool);
  for (auto &z : pp->zombies)
    delete z.second;
  delete pp;
  return true;
}

// Under d.mu: the pool of the innermost open region whose filter takes
// `stream`, or nullptr.
PrivatePool *route(Dev &d, cudaStream_t stream) {
  for (auto it = d.open.rbegin(); it != d.open.rend(); ++it) {
    if (it->filter(stream))
      return it->pool;
  }
  return nullptr;
}

struct Totals {
  uint64_t in_use = 0, requested = 0, reserved = 0, peak_in_use = 0,
           peak_reserved = 0, limit = 0;
  uint64_t allocs = 0, frees = 0, backend_allocs = 0, backend_frees = 0;
  uint64_t ooms = 0, retries = 0, pending = 0;
  uint64_t small_in_use = 0, small_reserved = 0, small_peak = 0;
  uint64_t small_req = 0;
  uint64_t large_in_use = 0, large_reserved = 0;
  uint64_t slabs = 0, large_segments = 0, free_blocks = 0;
  uint64_t small_live = 0, large_allocs = 0;
};

// Counters only: the request-size histogram and heavy hitters are not read
// here, so the snapshot skips them (their merge costs hundreds of microseconds per
// allocating thread, on every torch.cuda.memory_stats call).
void add_stats(aa_pool *p, Totals &t) {
  std::unique_ptr<aa_pool_stats> st(new aa_pool_stats);
  if (aa_pool_stats_get_opts(p, st.get(), AA_STATS_NO_SIZES) != AA_OK)
    return;
  t.in_use += st->bytes_in_use;
  t.requested += st->bytes_requested;
  t.reserved += st->bytes_reserved;
  t.peak_in_use += st->peak_bytes_in_use;
  t.peak_reserved += st->peak_bytes_reserved;
  t.limit += st->limit_bytes;
  t.allocs += st->allocs;
  t.frees += st->frees;
  t.backend_allocs += st->backend_allocs;
  t.backend_frees += st->backend_frees;
  t.ooms += st->ooms;
  t.retries += st->oom_retries;
  t.pending += st->pending_blocks;
  t.large_in_use += st->large_bytes_in_use;
  t.large_reserved += st->large_bytes_reserved;
  t.large_segments += st->large_segments;
  t.large_allocs += st->large_allocs;
  for (uint32_t i = 0; i < st->class_count; i++) {
    const aa_class_stats &c = st->classes[i];
    t.small_in_use += c.bytes_in_use;
    t.small_reserved += c.bytes_reserved;
    t.small_peak += c.peak_bytes_in_use;
    t.small_req += c.bytes_requested;
    t.slabs += c.slabs;
    t.free_blocks += c.blocks_free;
    t.small_live += c.blocks_in_use;
  }
}

// Frees of the large path: its allocations less its live blocks (the pool
// counts frees as one figure).
uint64_t large_frees_of(const Totals &t) {
  uint64_t live = t.allocs > t.frees ? t.allocs - t.frees : 0;
  uint64_t large_live = live > t.small_live ? live - t.small_live : 0;
  return t.large_allocs > large_live ? t.large_allocs - large_live : 0;
}

int64_t i64(uint64_t v) {
  return static_cast<int64_t>(v);
}
uint64_t minus(uint64_t a, uint64_t b) {
  return a > b ? a - b : 0;
}

Stat stat_of(uint64_t current, uint64_t peak, uint64_t allocated, uint64_t freed) {
  Stat s;
  s.current = i64(current);
  s.peak = i64(std::max(peak, current));
  s.allocated = i64(allocated);
  s.freed = i64(freed);
  return s;
}

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

struct CheckpointState : CCA::AllocatorState {
  int device = 0;
  MempoolId_t id;
  struct Block {
    void *ptr;
    size_t size;
    cudaStream_t stream;
  };
  std::vector<Block> live;
  ~CheckpointState() override;
};

// Unpins the state's blocks; zombies nobody lists any more go back to the
// pool (if the pool still exists).
CheckpointState::~CheckpointState() {
  Dev &d = g_dev[device];
  std::lock_guard<std::mutex> g(d.mu);
  auto it = d.pools.find(id);
  if (it == d.pools.end())
    return;
  PrivatePool *pp = it->second;
  for (const Block &b : live) {
    auto p = pp->pinned.find(b.ptr);
    if (p == pp->pinned.end() || --p->second > 0)
      continue;
    pp->pinned.erase(p);
    auto z = pp->zombies.find(b.ptr);
    if (z != pp->zombies.end()) {
      Ctx *c = z->second;
      pp->zombies.erase(z);
      maybe_relaxed(d, [&] { return aa_free(c->pool, c->ptr, c->size, c->stream); });
      delete c;
    }
  }
}

class AdaptAllocator final : public CCA::CUDAAllocator {
public:
  // ------------------------------------------------------------ allocation
  c10::DataPtr allocate(size_t n) override {
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    if (n == 0)
      return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CUDA, device));
    cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
    Ctx *c = alloc_ctx(device, n, stream);
    if (history_.on()) // history:
      history_.record(History::Action::ALLOC, device, reinterpret_cast<size_t>(c->ptr), n, stream);
    return c10::DataPtr(
        c->ptr, c, &deleter, c10::Device(c10::DeviceType::CUDA, device));
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &deleter;
  }

  Ctx *alloc_ctx(int device, size_t n, cudaStream_t stream) {
    Dev &d = dev_at(device);
    // the device pool first: the stats and the rest start from it
    aa_pool *pool = device_pool(device);
    if (t_named >= 0)
      pool = named_pool(device, t_named);
    if (d.regions.load(std::memory_order_relaxed) > 0) {
      aa_pool *failed = nullptr;
      {
        std::lock_guard<std::mutex> g(d.mu);
        PrivatePool *priv = route(d, stream);
        if (priv) {
          void *p = maybe_relaxed(d, [&] { return aa_alloc(priv->pool, n, stream); });
          if (p) {
            Ctx *c = make_ctx(d, Ctx{p, n, priv->pool, stream, priv, device, false});
            try {
              priv->live.insert(c);
            } catch (...) {
              maybe_relaxed(d, [&] { return aa_free(c->pool, c->ptr, c->size, c->stream); });
              delete c;
              throw;
            }
            return c;
          }
          failed = priv->pool;
        }
      }
      // (OOM observers run without our lock: they may take a snapshot)
      if (failed)
        out_of_memory(device, n, failed);
    }
    void *p = maybe_relaxed(d, [&] { return aa_alloc(pool, n, stream); });
    if (p == nullptr)
      out_of_memory(device, n, pool);
    return make_ctx(d, Ctx{p, n, pool, stream, nullptr, device, false});
  }

  // The host record of a block just allocated; when it cannot be made, the
  // block goes back to its pool before the error is raised.
  static Ctx *make_ctx(const Dev &d, const Ctx &v) {
    Ctx *c = new (std::nothrow) Ctx(v);
    if (c == nullptr) {
      maybe_relaxed(d, [&] { return aa_free(v.pool, v.ptr, v.size, v.stream); });
      TORCH_CHECK(false, "adaptalloc: out of host memory for a block's record");
    }
    return c;
  }

  void free_ctx(Ctx *c) {
    Dev &d = g_dev[c->device];
    if (history_.on()) { // history: the pool takes the block back at once
      history_.record(History::Action::FREE_REQUESTED, c->device,
                      reinterpret_cast<size_t>(c->ptr), c->size, c->stream);
      history_.record(History::Action::FREE_COMPLETED, c->device,
                      reinterpret_cast<size_t>(c->ptr), c->size, c->stream);
    }
    if (c->priv == nullptr) {
      maybe_relaxed(d, [&] { return aa_free(c->pool, c->ptr, c->size, c->stream); });
      delete c;
      return;
    }
    std::lock_guard<std::mutex> g(d.mu);
    if (c->dead) {
      delete c;
      return;
    }
    PrivatePool *pp = c->priv;
    pp->live.erase(c);
    if (!free_private(d, pp, c))
      return; // a zombie now
    if (pp->use_count == 0 && pp->live.empty()) {
      try {
        maybe_destroy(d, pp);
      } catch (const std::exception &) {
        // a deleter must not throw: the pool stays for empty_cache
      }
    }
  }

  // A private block no longer live: back to its pool, or kept as a zombie
  // while a checkpoint lists it. Returns false when kept (c still ours).
  // Under d.mu; c is out of pp->live.
  static bool free_private(Dev &d, PrivatePool *pp, Ctx *c) {
    if (pp->pinned.count(c->ptr)) {
      pp->zombies[c->ptr] = c;
      return false;
    }
    maybe_relaxed(d, [&] { return aa_free(c->pool, c->ptr, c->size, c->stream); });
    delete c;
    return true;
  }

  [[noreturn]] void out_of_memory(int device, size_t n, aa_pool *pool) {
    Totals t;
    add_stats(pool, t);
    size_t free_b = 0, total_b = 0;
    {
      Dev &d = g_dev[device];
      maybe_relaxed(d, [&] {
        c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
        if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
          (void)cudaGetLastError();
        return 0;
      });
    }
    if (history_.on()) // history: addr is the device's free bytes, as PyTorch's
      history_.record(History::Action::OOM, device, free_b, n, nullptr);
    std::vector<CCA::OutOfMemoryObserver> obs;
    {
      std::lock_guard<std::mutex> g(obs_mu_);
      obs = observers_;
    }
    // as PyTorch's allocator calls them: the request, the most the device
    // (or the limit) allows, the device's free bytes
    for (auto &o : obs)
      o(device, n, t.limit ? static_cast<size_t>(t.limit) : total_b, free_b);
    std::string limit =
        t.limit ? size_str(t.limit) : std::string("none (the whole device)");
    const char *region = aa_pool_region(pool);
    std::string how = region[0] != '\0'
                          ? cat("the policy's pools.regions.", region,
                                ".limit_bytes sets region ", region, "'s limit.")
                          : std::string("torch.cuda.set_per_process_memory_fraction "
                                        "sets the limit.");
    TORCH_CHECK_WITH(
        OutOfMemoryError, false,
        cat("adaptalloc: CUDA out of memory on device ", device,
            " (pool ", aa_pool_name(pool), "): tried to allocate ", size_str(n),
            "; limit ", limit,
            ", in use ", size_str(t.in_use),
            ", reserved ", size_str(t.reserved),
            "; the device has ", size_str(free_b), " free of ", size_str(total_b),
            ". The pool released its cached memory and retried once. Free tensors "
            "(or lower the batch size) and retry; ",
            how));
  }

  void *raw_alloc(size_t nbytes) override {
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    return raw_alloc_with_stream(
        nbytes, c10::cuda::getCurrentCUDAStream(device).stream());
  }

  void *raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) override {
    if (nbytes == 0)
      return nullptr;
    c10::DeviceIndex device = 0;
    C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
    Ctx *c = alloc_ctx(device, nbytes, stream);
    if (history_.on()) // history:
      history_.record(History::Action::ALLOC, device, reinterpret_cast<size_t>(c->ptr), nbytes, stream);
    try {
      std::lock_guard<std::mutex> g(raw_mu_);
      raw_[c->ptr] = c;
    } catch (...) {
      free_ctx(c);
      throw;
    }
    return c->ptr;
  }

  void raw_delete(void *ptr) override {
    if (ptr == nullptr)
      return;
    Ctx *c = nullptr;
    {
      std::lock_guard<std::mutex> g(raw_mu_);
      auto it = raw_.find(ptr);
      if (it == raw_.end() && raw_delete_private(ptr))
        return;
      TORCH_CHECK(
          it != raw_.end(),
          cat("adaptalloc: raw_delete of ", ptr, ", which raw_alloc did not return"));
      c = it->second;
      raw_.erase(it);
    }
    free_ctx(c);
  }

  // A live block of a private pool whose tensor's deleter was taken away
  // (CUDA-graph trees free such blocks by pointer after a checkpoint
  // restore). Returns whether ptr was one.
  static bool raw_delete_private(void *ptr) {
    for (int dev = 0; dev < kMaxDevices; dev++) {
      if (device_pool_if_made(dev) == nullptr)
        continue;
      Dev &d = g_dev[dev];
      std::lock_guard<std::mutex> g(d.mu);
      for (auto &kv : d.pools) {
        PrivatePool *pp = kv.second;
        for (Ctx *c : pp->live) {
          if (c->ptr != ptr)
            continue;
          pp->live.erase(c);
          auto *n = new Ctx(*c);
          c->dead = true; // should its holder's deleter still run, it only drops c
          (void)free_private(d, pp, n);
          return true;
        }
      }
    }
    return false;
  }

  // ------------------------------------------------------------ lifecycle
  void init(int device_count) override {
    TORCH_CHECK(
        device_count <= kMaxDevices,
        cat("adaptalloc: ", device_count, " CUDA devices; at most ", kMaxDevices, " are supported"));
    (void)aa_runtime_init(nullptr);
    initialized_.store(true);
  }
  bool initialized() override {
    return initialized_.load();
  }
  void enable(bool value) override {
    enabled_ = value;
  }
  bool isEnabled() const override {
    return enabled_;
  }
  std::string name() override {
    return "adaptalloc";
  }
  void copy_data(void *dest, const void *src, std::size_t count) const override {
    C10_CUDA_CHECK(cudaMemcpy(dest, src, count, cudaMemcpyDeviceToDevice));
  }

  // ------------------------------------------------------------ limits
  double getMemoryFraction(c10::DeviceIndex device) override {
    Dev &d = dev_at(device);
    std::lock_guard<std::mutex> g(d.mu);
    return d.fraction;
  }

  void setMemoryFraction(double fraction, c10::DeviceIndex device) override {
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
    aa_pool_set_limit(
        p,
        fraction >= 1.0
            ? 0
            : std::max<size_t>(
                  1, static_cast<size_t>(fraction * static_cast<double>(total_b))));
  }

  void emptyCache(MempoolId_t mempool_id) override {
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
        each_named(d, [](aa_pool *p) { (void)aa_pool_release(p); });
      }
      std::vector<PrivatePool *> pps;
      for (auto &kv : d.pools) {
        if (mempool_id == kDefaultPool || kv.first == mempool_id)
          pps.push_back(kv.second);
      }
      for (PrivatePool *pp : pps) {
        if (!maybe_destroy(d, pp))
          (void)aa_pool_release(pp->pool);
      }
    }
  }

  void cacheInfo(c10::DeviceIndex device, size_t *largestBlock) override {
    aa_pool *p = device_pool_if_made(device);
    FreeWalk w;
    if (p) {
      (void)aa_pool_walk(p, free_entry, &w);
      each_named(g_dev[device], [&](aa_pool *q) {
        w.run = 0;
        (void)aa_pool_walk(q, free_entry, &w);
      });
    }
    *largestBlock = w.best;
  }

  std::vector<CCA::StreamSegmentSize> getExpandableSegmentSizes(
      c10::DeviceIndex /*device*/) override {
    return {}; // no PyTorch expandable segments to register with NCCL
  }

  void *getBaseAllocation(void *ptr, size_t *size) override {
    for (int dev = 0; dev < kMaxDevices; dev++) {
      aa_pool *main = device_pool_if_made(dev);
      if (main == nullptr)
        continue;
      size_t n = aa_block_size(main, ptr);
      if (n == 0)
        each_named(g_dev[dev], [&](aa_pool *q) {
          if (n == 0)
            n = aa_block_size(q, ptr);
        });
      if (n == 0) {
        Dev &d = g_dev[dev];
        std::lock_guard<std::mutex> g(d.mu);
        for (auto &kv : d.pools) {
          n = aa_block_size(kv.second->pool, ptr);
          if (n)
            break;
        }
      }
      if (n) {
        if (size)
          *size = n;
        return ptr; // a block is its own allocation
      }
    }
    TORCH_CHECK(false, cat("adaptalloc: getBaseAllocation: ", ptr, " is not ours"));
    return nullptr;
  }

  void recordStream(const c10::DataPtr &ptr, c10::cuda::CUDAStream stream)
      override {
    if (ptr.get() == nullptr || ptr.get_deleter() != &deleter)
      return; // not ours (from_blob, an empty tensor)
    auto *c = static_cast<Ctx *>(ptr.get_context());
    Dev &d = g_dev[c->device];
    if (c->priv) {
      std::lock_guard<std::mutex> g(d.mu);
      if (!c->dead)
        (void)aa_record_stream(c->pool, c->ptr, stream.stream());
      return;
    }
    (void)aa_record_stream(c->pool, c->ptr, stream.stream());
  }

  // ------------------------------------------------------------ stats
  DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    DeviceStats s;
    aa_pool *main = device_pool_if_made(device);
    if (main == nullptr)
      return s;
    Dev &d = dev_at(device);
    Totals t;
    Base b;
    add_stats(main, t);
    each_named(d, [&](aa_pool *p) { add_stats(p, t); });
    {
      std::lock_guard<std::mutex> g(d.mu);
      for (auto &kv : d.pools)
        add_stats(kv.second->pool, t);
      b = d.base;
    }
    const auto A = static_cast<size_t>(StatType::AGGREGATE);
    const auto S = static_cast<size_t>(StatType::SMALL_POOL);
    const auto L = static_cast<size_t>(StatType::LARGE_POOL);
    uint64_t live = minus(t.allocs, t.frees);
    uint64_t segs = t.slabs + t.large_segments;
    s.allocation[A] = stat_of(live, live, minus(t.allocs, b.allocs), minus(t.frees, b.frees));
    s.active[A] = s.allocation[A];
    // Per pool kind: the large path's allocations, the rest are the classes'
    // (retired classes included); freed = allocated - live, as in PyTorch.
    uint64_t large_live = minus(live, t.small_live);
    uint64_t large_frees = large_frees_of(t);
    s.allocation[S] = stat_of(
        t.small_live,
        t.small_live,
        minus(minus(t.allocs, t.large_allocs), minus(b.allocs, b.large_allocs)),
        minus(minus(t.frees, large_frees), minus(b.frees, b.large_frees)));
    s.allocation[L] = stat_of(
        large_live,
        large_live,
        minus(t.large_allocs, b.large_allocs),
        minus(large_frees, b.large_frees));
    s.active[S] = s.allocation[S];
    s.active[L] = s.allocation[L];
    s.segment[A] = stat_of(
        segs,
        segs,
        minus(t.backend_allocs, b.backend_allocs),
        minus(t.backend_frees, b.backend_frees));
    s.segment[S] = stat_of(t.slabs, t.slabs, 0, 0);
    s.segment[L] = stat_of(t.large_segments, t.large_segments, 0, 0);
    s.allocated_bytes[A] = stat_of(t.in_use, t.peak_in_use, 0, 0);
    s.allocated_bytes[S] = stat_of(t.small_in_use, t.small_peak, 0, 0);
    s.allocated_bytes[L] = stat_of(t.large_in_use, t.large_in_use, 0, 0);
    s.active_bytes = s.allocated_bytes;
    s.reserved_bytes[A] = stat_of(t.reserved, t.peak_reserved, 0, 0);
    s.reserved_bytes[S] = stat_of(t.small_reserved, t.small_reserved, 0, 0);
    s.reserved_bytes[L] = stat_of(t.large_reserved, t.large_reserved, 0, 0);
    s.requested_bytes[A] = stat_of(t.requested, t.requested, 0, 0);
    s.requested_bytes[S] = stat_of(t.small_req, t.small_req, 0, 0);
    s.requested_bytes[L] =
        stat_of(minus(t.requested, t.small_req), minus(t.requested, t.small_req), 0, 0);
    // Free memory held in segments: cached blocks of the classes and free
    // space of the large path.
    uint64_t idle = minus(t.reserved, t.in_use);
    s.inactive_split_bytes[A] = stat_of(idle, idle, 0, 0);
    s.inactive_split_bytes[S] = stat_of(
        minus(t.small_reserved, t.small_in_use), minus(t.small_reserved, t.small_in_use), 0, 0);
    s.inactive_split_bytes[L] = stat_of(
        minus(t.large_reserved, t.large_in_use), minus(t.large_reserved, t.large_in_use), 0, 0);
    s.inactive_split[A] = stat_of(t.free_blocks, t.free_blocks, 0, 0);
    s.inactive_split[S] = s.inactive_split[A];
    s.num_alloc_retries = i64(minus(t.retries, b.retries));
    s.num_ooms = i64(minus(t.ooms, b.ooms));
    s.num_device_alloc = i64(minus(t.backend_allocs, b.backend_allocs));
    s.num_device_free = i64(minus(t.backend_frees, b.backend_frees));
    s.max_split_size = std::numeric_limits<int64_t>::max();
    return s;
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    aa_pool *main = device_pool_if_made(device);
    if (main == nullptr)
      return;
    Dev &d = dev_at(device);
    Totals t;
    add_stats(main, t);
    each_named(d, [&](aa_pool *p) { add_stats(p, t); });
    std::lock_guard<std::mutex> g(d.mu);
    for (auto &kv : d.pools)
      add_stats(kv.second->pool, t);
    d.base.allocs = t.allocs;
    d.base.frees = t.frees;
    d.base.large_allocs = t.large_allocs;
    d.base.large_frees = large_frees_of(t);
    d.base.backend_allocs = t.backend_allocs;
    d.base.backend_frees = t.backend_frees;
    d.base.ooms = t.ooms;
    d.base.retries = t.retries;
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    aa_pool *main = device_pool_if_made(device);
    if (main == nullptr)
      return;
    aa_pool_reset_peaks(main);
    Dev &d = dev_at(device);
    each_named(d, [](aa_pool *p) { aa_pool_reset_peaks(p); });
    std::lock_guard<std::mutex> g(d.mu);
    for (auto &kv : d.pools)
      aa_pool_reset_peaks(kv.second->pool);
  }

  CCA::SnapshotInfo snapshot(MempoolId_t mempool_id, bool /*include_traces*/)
      override {
    CCA::SnapshotInfo info;
    for (int dev = 0; dev < kMaxDevices; dev++) {
      aa_pool *main = device_pool_if_made(dev);
      if (main == nullptr)
        continue;
      if (mempool_id == kDefaultPool) {
        SnapWalk w{&info.segments, dev, kDefaultPool};
        (void)aa_pool_walk(main, snap_entry, &w);
        TORCH_CHECK(!w.failed, "adaptalloc: snapshot: out of host memory walking the pool");
        each_named(g_dev[dev], [&](aa_pool *q) {
          SnapWalk wn{&info.segments, dev, kDefaultPool};
          (void)aa_pool_walk(q, snap_entry, &wn);
          TORCH_CHECK(!wn.failed, "adaptalloc: snapshot: out of host memory walking the pool");
        });
      }
      Dev &d = g_dev[dev];
      std::lock_guard<std::mutex> g(d.mu);
      for (auto &kv : d.pools) {
        if (mempool_id != kDefaultPool && kv.first != mempool_id)
          continue;
        SnapWalk w{&info.segments, dev, kv.first};
        (void)aa_pool_walk(kv.second->pool, snap_entry, &w);
        TORCH_CHECK(!w.failed, "adaptalloc: snapshot: out of host memory walking the pool");
      }
    }
    info.device_traces = history_.traces(static_cast<size_t>(c10::cuda::device_count())); // history:
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

  // ------------------------------------------------------------ private pools
  void beginAllocateToPool(
      c10::DeviceIndex device,
      MempoolId_t mempool_id,
      std::function<bool(cudaStream_t)> filter) override {
    Dev &d = dev_at(device);
    std::lock_guard<std::mutex> g(d.mu);
    for (const Region &r : d.open) {
      TORCH_CHECK(
          r.id != mempool_id,
          cat("adaptalloc: beginAllocateToPool: already allocating to pool (", mempool_id.first, ", ", mempool_id.second, ")"));
    }
    PrivatePool *pp = create_or_incref(d, device, mempool_id);
    d.open.push_back(Region{mempool_id, std::move(filter), pp});
    d.regions.fetch_add(1, std::memory_order_relaxed);
  }

  void endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id)
      override {
    Dev &d = dev_at(device);
    std::lock_guard<std::mutex> g(d.mu);
    for (auto it = d.open.begin(); it != d.open.end(); ++it) {
      if (it->id == mempool_id) {
        d.open.erase(it);
        d.regions.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
    }
    TORCH_CHECK(
        false, cat(
                   "adaptalloc: endAllocateToPool: pool (",
                   mempool_id.first,
                   ", ",
                   mempool_id.second,
                   ") is not being allocated to"));
  }

  void releasePool(c10::DeviceIndex device, MempoolId_t mempool_id) override {
    Dev &d = dev_at(device);
    std::lock_guard<std::mutex> g(d.mu);
    auto it = d.pools.find(mempool_id);
    if (it == d.pools.end())
      return; // already gone (graph reset after empty_cache)
    PrivatePool *pp = it->second;
    if (pp->use_count > 0)
      pp->use_count--;
    if (pp->use_count == 0)
      (void)maybe_destroy(d, pp);
  }

  int getPoolUseCount(c10::DeviceIndex device, MempoolId_t mempool_id)
      override {
    Dev &d = dev_at(device);
    std::lock_guard<std::mutex> g(d.mu);
    auto it = d.pools.find(mempool_id);
    return it == d.pools.end() ? 0 : it->second->use_count;
  }

  void createOrIncrefPool(
      c10::DeviceIndex device,
      MempoolId_t mempool_id,
      std::shared_ptr<CCA::CUDAAllocator> allocator) override {
    TORCH_CHECK(
        allocator == nullptr || allocator.get() == this,
        cat("adaptalloc: a torch.cuda.MemPool with its own allocator (",
            allocator ? allocator->name() : std::string(),
            ") is not supported while adaptalloc is PyTorch's allocator; make the "
            "MemPool without one"));
    Dev &d = dev_at(device);
    std::lock_guard<std::mutex> g(d.mu);
    (void)create_or_incref(d, device, mempool_id);
  }

  void setUseOnOOM(c10::DeviceIndex /*device*/, MempoolId_t /*id*/, bool use_on_oom)
      override {
    TORCH_CHECK(
        !use_on_oom,
        "adaptalloc: MemPool(use_on_oom=True) is not supported: a pool's "
        "memory is not lent to others on out of memory");
  }

  void setNoSplit(c10::DeviceIndex /*device*/, MempoolId_t /*id*/) override {
    TORCH_CHECK(false, "adaptalloc: MemPool(no_split=True) is not supported");
  }

  bool checkPoolLiveAllocations(
      c10::DeviceIndex device,
      MempoolId_t mempool_id,
      const std::unordered_set<void *> &expected_live_allocations) override {
    Dev &d = dev_at(device);
    std::lock_guard<std::mutex> g(d.mu);
    auto it = d.pools.find(mempool_id);
    if (it == d.pools.end())
      return expected_live_allocations.empty();
    const auto &live = it->second->live;
    if (live.size() != expected_live_allocations.size())
      return false;
    for (Ctx *c : live) {
      if (!expected_live_allocations.count(c->ptr))
        return false;
    }
    return true;
  }

  std::shared_ptr<CCA::AllocatorState> getCheckpointState(
      c10::DeviceIndex device,
      MempoolId_t id) override {
    Dev &d = dev_at(device);
    std::lock_guard<std::mutex> g(d.mu);
    auto it = d.pools.find(id);
    TORCH_CHECK(
        it != d.pools.end(),
        cat("adaptalloc: getCheckpointState: no pool (", id.first, ", ", id.second, ") on device ", static_cast<int>(device)));
    auto st = std::make_shared<CheckpointState>();
    st->device = device;
    st->id = id;
    for (Ctx *c : it->second->live) {
      st->live.push_back({c->ptr, c->size, c->stream});
      it->second->pinned[c->ptr]++;
    }
    return st;
  }

  CCA::CheckpointDelta setCheckpointPoolState(
      c10::DeviceIndex device,
      std::shared_ptr<CCA::AllocatorState> pps) override {
    auto st = std::dynamic_pointer_cast<CheckpointState>(pps);
    TORCH_CHECK(st != nullptr, "adaptalloc: setCheckpointPoolState: not our state");
    Dev &d = dev_at(device);
    std::lock_guard<std::mutex> g(d.mu);
    auto it = d.pools.find(st->id);
    TORCH_CHECK(it != d.pools.end(), "adaptalloc: setCheckpointPoolState: pool is gone");
    PrivatePool *pp = it->second;
    std::unordered_map<void *, Ctx *> now;
    for (Ctx *c : pp->live)
      now[c->ptr] = c;
    for (const auto &b : st->live) {
      // pinned since the state was taken: live now, or kept as a zombie
      TORCH_CHECK(
          now.count(b.ptr) || pp->zombies.count(b.ptr),
          cat("adaptalloc: setCheckpointPoolState: block ", b.ptr, " of the checkpoint is lost"));
    }
    // PyTorch's semantics: every block allocated now is freed, every block
    // of the checkpoint is allocated again (a pointer may be in both lists).
    CCA::CheckpointDelta delta;
    std::unordered_set<void *> keep;
    for (const auto &b : st->live)
      keep.insert(b.ptr);
    std::vector<Ctx *> cur(pp->live.begin(), pp->live.end());
    for (Ctx *c : cur) {
      delta.ptrs_freed.push_back(c->ptr);
      pp->live.erase(c);
      if (keep.count(c->ptr)) {
        auto *n = new Ctx(*c);
        c->dead = true; // its holder's deleter only drops the record
        pp->live.insert(n);
        delta.dataptrs_allocd.emplace_back(
            n->ptr, n, &deleter, c10::Device(c10::DeviceType::CUDA, device));
      } else {
        auto *n = new Ctx(*c); // the holder keeps c; the pool frees n
        c->dead = true;
        (void)free_private(d, pp, n);
      }
    }
    for (const auto &b : st->live) {
      auto z = pp->zombies.find(b.ptr);
      if (z == pp->zombies.end())
        continue;
      Ctx *c = z->second; // owned by us since its tensor died
      pp->zombies.erase(z);
      pp->live.insert(c);
      delta.dataptrs_allocd.emplace_back(
          c->ptr, c, &deleter, c10::Device(c10::DeviceType::CUDA, device));
    }
    return delta;
  }

  // ------------------------------------------------------------ the rest
  std::shared_ptr<void> getIpcDevPtr(std::string /*handle*/) override {
    TORCH_CHECK(
        false,
        "adaptalloc: CUDA IPC (opening a CUDA tensor shared by another "
        "process) is not supported by the adaptalloc allocator");
    return nullptr;
  }
  CCA::ShareableHandle shareIpcHandle(void * /*ptr*/) override {
    TORCH_CHECK(
        false,
        "adaptalloc: CUDA IPC (sharing a CUDA tensor with another process, "
        "e.g. through torch.multiprocessing) is not supported by the "
        "adaptalloc allocator");
    return {};
  }

  bool isHistoryEnabled() override { // history:
    return history_.on();
  }
  void recordHistory(
      bool enabled,
      CCA::CreateContextFn context_recorder,
      size_t alloc_trace_max_entries,
      CCA::RecordContext when,
      bool clearHistory,
      const std::vector<std::string> &skip_actions) override { // history:
    history_.configure(enabled, context_recorder, alloc_trace_max_entries, when,
                       clearHistory, skip_actions);
  }

  void attachOutOfMemoryObserver(CCA::OutOfMemoryObserver observer) override {
    std::lock_guard<std::mutex> g(obs_mu_);
    observers_.push_back(std::move(observer));
  }
  void attachAllocatorTraceTracker(CCA::AllocatorTraceTracker /*tracker*/)
      override {
    TORCH_CHECK(
        false,
        "adaptalloc: allocator trace trackers are not supported by the "
        "adaptalloc allocator (it keeps no PyTorch trace entries)");
  }

  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access)
      override {
    c10::cuda::CUDAGuard g(dev);
    cudaError_t e = cudaDeviceEnablePeerAccess(dev_to_access, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();
      return;
    }
    C10_CUDA_CHECK(e);
  }

  cudaError_t memcpyAsync(
      void *dst,
      int dstDevice,
      const void *src,
      int srcDevice,
      size_t count,
      cudaStream_t stream,
      bool p2p_enabled) override {
    // Pages of the expandable path are cuMemMap'd: without peer access
    // they need the peer copy.
    if (p2p_enabled || dstDevice == srcDevice)
      return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
    return cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, count, stream);
  }

private:
  std::atomic<bool> initialized_{false};
  bool enabled_ = true;
  std::mutex raw_mu_;
  std::unordered_map<void *, Ctx *> raw_;
  std::mutex obs_mu_;
  std::vector<CCA::OutOfMemoryObserver> observers_;
  History history_; // history: _record_memory_history's state and entries
};

std::shared_ptr<AdaptAllocator> g_alloc;
std::mutex g_install_mu;

void deleter(void *ctx) {
  // The allocator outlives every DataPtr: it is never uninstalled. This runs
  // in DataPtr's destructor, where an exception ends the process: a failure
  // (a CUDA error switching the capture mode) is reported, the block kept.
  try {
    g_alloc->free_ctx(static_cast<Ctx *>(ctx));
  } catch (const std::exception &e) {
    std::fprintf(stderr, "adaptalloc: freeing a CUDA block failed (%s); it stays allocated\n",
                 e.what());
  } catch (...) {
    std::fprintf(stderr, "adaptalloc: freeing a CUDA block failed; it stays allocated\n");
  }
}

} // namespace

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

int private_pool_count(int device) {
  if (device < 0 || device >= kMaxDevices)
    return 0;
  Dev &d = g_dev[device];
  std::lock_guard<std::mutex> g(d.mu);
  return static_cast<int>(d.pools.size());
}

void set_limit(int device, size_t bytes) {
  aa_pool_set_limit(device_pool(device), bytes);
}

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
