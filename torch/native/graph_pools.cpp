// graph_pools.cpp — the native allocator's private pools: each pool PyTorch
// asks for (a CUDA graph's capture pool, a torch.cuda.MemPool) is an aa_pool
// of its own over the device's backend, made on the first
// beginAllocateToPool or createOrIncrefPool of its id and destroyed when its
// use count is back to 0 and its last block is freed (or at the next
// empty_cache). An open beginAllocateToPool whose filter takes the stream
// routes allocations to it (route, called by alloc.cpp). Checkpoints
// (getCheckpointState, setCheckpointPoolState: CUDA-graph trees) pin the
// blocks they list; a pinned block freed by its tensor is kept as a zombie
// until the checkpoint is restored or dropped. Everything here is under the
// device's mutex (Dev::mu). Restoring a checkpoint whose blocks were freed
// since raises c10::Error. MemPool options: use_on_oom (alloc.cpp lends the
// pool's memory to the device pool's failing requests) and no_split (the
// pool's large blocks straight from the backend, PASSTHROUGH).
#include "native_internal.h"

#include <algorithm>

namespace adaptalloc_torch {

namespace {

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

} // namespace

// A private pool's aa_pool on the device (PrivatePool::pool).
aa_pool *make_private_pool(int device, MempoolId_t id, bool no_split) {
  aa_pool *main = device_pool(device);
  // The device policy's slab and class ladder (a graph pool made with the
  // core's defaults, classes to 1 MiB in slabs of their own, took a third
  // more device memory than PyTorch's graph pool), but the cache path for
  // large blocks: a capture's memory stays mapped while the graph lives,
  // and no limit (set_per_process_memory_fraction caps the device pool).
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  (void)aa_runtime_pool_config(AA_BACKEND_DEVICE, &cfg);
  // no_split (MemPool(no_split=True)): every large block its own backend
  // allocation, never a part of a cached segment (PyTorch's meaning: NCCL's
  // symmetric memory registers each block as its own segment)
  cfg.large_mode = no_split ? AA_LARGE_PASSTHROUGH : AA_LARGE_CACHE;
  cfg.large_stitch = 0; // no stitched ranges in a private pool (a capture's pool)
  cfg.large_plan = 0;   // nor a learned plan: a capture replays fixed addresses
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
    if (no_split)
      cfg.large_mode = AA_LARGE_PASSTHROUGH;
    rc = aa_pool_new(&cfg, &p);
  }
  TORCH_CHECK(
      rc == AA_OK,
      cat("adaptalloc: cannot make a private pool on device ", device, ": ", aa_strerror(rc)));
  return p;
}

// Under d.mu.
PrivatePool *create_or_incref(Dev &d, int device, MempoolId_t id) {
  auto it = d.pools.find(id);
  if (it != d.pools.end()) {
    it->second->use_count++;
    return it->second;
  }
  aa_pool *p = make_private_pool(device, id, false);
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
  if (pp->use_on_oom)
    d.oom_pools.fetch_sub(1, std::memory_order_relaxed);
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

// A private block no longer live: back to its pool, or kept as a zombie
// while a checkpoint lists it. Returns false when kept (c still ours).
// Under d.mu; c is out of pp->live.
bool AdaptAllocator::free_private(Dev &d, PrivatePool *pp, Ctx *c) {
  if (pp->pinned.count(c->ptr)) {
    pp->zombies[c->ptr] = c;
    return false;
  }
  maybe_relaxed(d, [&] { return aa_free(c->pool, c->ptr, c->size, c->stream); });
  delete c;
  return true;
}

void AdaptAllocator::beginAllocateToPool(
    c10::DeviceIndex device,
    MempoolId_t mempool_id,
    std::function<bool(cudaStream_t)> filter) {
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

void AdaptAllocator::endAllocateToPool(c10::DeviceIndex device, MempoolId_t mempool_id) {
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

void AdaptAllocator::releasePool(c10::DeviceIndex device, MempoolId_t mempool_id) {
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

int AdaptAllocator::getPoolUseCount(c10::DeviceIndex device, MempoolId_t mempool_id) {
  Dev &d = dev_at(device);
  std::lock_guard<std::mutex> g(d.mu);
  auto it = d.pools.find(mempool_id);
  return it == d.pools.end() ? 0 : it->second->use_count;
}

void AdaptAllocator::createOrIncrefPool(
    c10::DeviceIndex device,
    MempoolId_t mempool_id,
    std::shared_ptr<CCA::CUDAAllocator> allocator) {
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

void AdaptAllocator::setUseOnOOM(c10::DeviceIndex device, MempoolId_t mempool_id,
                                 bool use_on_oom) {
  Dev &d = dev_at(device);
  std::lock_guard<std::mutex> g(d.mu);
  auto it = d.pools.find(mempool_id);
  TORCH_CHECK(it != d.pools.end(),
              cat("adaptalloc: setUseOnOOM: no pool (", mempool_id.first, ", ",
                  mempool_id.second, ") on device ", static_cast<int>(device)));
  PrivatePool *pp = it->second;
  if (pp->use_on_oom != use_on_oom)
    d.oom_pools.fetch_add(use_on_oom ? 1 : -1, std::memory_order_relaxed);
  pp->use_on_oom = use_on_oom;
}

// PyTorch calls it right after making the MemPool: the pool holds no block
// yet, and is made again with large blocks straight from the backend.
void AdaptAllocator::setNoSplit(c10::DeviceIndex device, MempoolId_t mempool_id) {
  Dev &d = dev_at(device);
  std::lock_guard<std::mutex> g(d.mu);
  auto it = d.pools.find(mempool_id);
  TORCH_CHECK(it != d.pools.end(),
              cat("adaptalloc: setNoSplit: no pool (", mempool_id.first, ", ",
                  mempool_id.second, ") on device ", static_cast<int>(device)));
  PrivatePool *pp = it->second;
  if (pp->no_split)
    return;
  TORCH_CHECK(pp->live.empty() && pp->zombies.empty(),
              "adaptalloc: setNoSplit: the pool already holds blocks");
  aa_pool *fresh = make_private_pool(device, mempool_id, true);
  aa_pool_destroy(pp->pool);
  pp->pool = fresh;
  pp->no_split = true;
}

bool AdaptAllocator::checkPoolLiveAllocations(
    c10::DeviceIndex device,
    MempoolId_t mempool_id,
    const std::unordered_set<void *> &expected_live_allocations) {
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

std::shared_ptr<CCA::AllocatorState> AdaptAllocator::getCheckpointState(
    c10::DeviceIndex device,
    MempoolId_t id) {
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

CCA::CheckpointDelta AdaptAllocator::setCheckpointPoolState(
    c10::DeviceIndex device,
    std::shared_ptr<CCA::AllocatorState> pps) {
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

int private_pool_count(int device) {
  if (device < 0 || device >= kMaxDevices)
    return 0;
  Dev &d = g_dev[device];
  std::lock_guard<std::mutex> g(d.mu);
  return static_cast<int>(d.pools.size());
}

} // namespace adaptalloc_torch
