// graph_pools.cpp — the native allocator's private pools: each pool PyTorch
// asks for (a CUDA graph's capture pool, a torch.cuda.MemPool) is a private
// pool of the device layer (torch/src/devices.h: an aa_pool of its own over
// the device's backend, its use count and live blocks), made on the first
// beginAllocateToPool or createOrIncrefPool of its id and destroyed when the
// layer's rule lets it go (use count back to 0, last block freed) and no
// region is open (or at the next empty_cache). This file adds what is
// PyTorch's: MempoolId_t, the regions, checkpoints, the PrivatePool beside
// each record. An open beginAllocateToPool whose filter takes the stream
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
#include <new>

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
  PrivatePool *pp = find_private(device, id);
  if (pp == nullptr)
    return;
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

// Under d.mu. The layer makes the aa_pool (the device policy's slab and
// class ladder, the cache path for large blocks, no limit: devices.c,
// make_private) or finds the record and raises its use count.
PrivatePool *create_or_incref(Dev &d, int device, MempoolId_t id) {
  (void)d;
  (void)device_pool(device); // raises naming the device when it has none
  aa__dl_private *rec = nullptr;
  int rc = aa__dl_private_ref(dl(), device, to_dl_id(id), &rec);
  TORCH_CHECK(
      rc == AA_OK,
      cat("adaptalloc: cannot make a private pool on device ", device, ": ", aa_strerror(rc)));
  auto *pp = static_cast<PrivatePool *>(aa__dl_private_user(rec));
  if (pp != nullptr)
    return pp; // there already: its use count raised
  pp = new (std::nothrow) PrivatePool();
  if (pp == nullptr) {
    (void)aa__dl_private_unref(rec);
    (void)aa__dl_private_destroy(dl(), rec);
    TORCH_CHECK(false, "adaptalloc: out of host memory for a private pool's record");
  }
  pp->id = id;
  pp->device = device;
  pp->rec = rec;
  pp->pool = aa__dl_private_pool(rec);
  aa__dl_private_set_user(rec, pp);
  return pp;
}

// Destroys a private pool nobody uses any more, once no block of it is live
// and no capture can be under way (the synchronize). Under d.mu. Returns
// whether it was destroyed.
bool maybe_destroy(Dev &d, PrivatePool *pp) {
  if (!aa__dl_private_idle(pp->rec) || d.regions.load(std::memory_order_relaxed) > 0)
    return false;
  {
    c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(pp->device));
    // Graph replays may still read this memory.
    C10_CUDA_CHECK(cudaDeviceSynchronize());
  }
  if (pp->use_on_oom)
    d.oom_pools.fetch_sub(1, std::memory_order_relaxed);
  (void)aa__dl_private_destroy(dl(), pp->rec); // idle: out of the list, its aa_pool destroyed
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
  PrivatePool *pp = find_private(device, mempool_id);
  if (pp == nullptr)
    return;                               // already gone (graph reset after empty_cache)
  if (aa__dl_private_unref(pp->rec) == 0) // never below 0
    (void)maybe_destroy(d, pp);
}

int AdaptAllocator::getPoolUseCount(c10::DeviceIndex device, MempoolId_t mempool_id) {
  Dev &d = dev_at(device);
  std::lock_guard<std::mutex> g(d.mu);
  PrivatePool *pp = find_private(device, mempool_id);
  return pp == nullptr ? 0 : aa__dl_private_use_count(pp->rec);
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
  PrivatePool *pp = find_private(device, mempool_id);
  TORCH_CHECK(pp != nullptr,
              cat("adaptalloc: setUseOnOOM: no pool (", mempool_id.first, ", ",
                  mempool_id.second, ") on device ", static_cast<int>(device)));
  if (pp->use_on_oom != use_on_oom)
    d.oom_pools.fetch_add(use_on_oom ? 1 : -1, std::memory_order_relaxed);
  pp->use_on_oom = use_on_oom;
}

// PyTorch calls it right after making the MemPool: the pool holds no block
// yet, and is made again with large blocks straight from the backend.
void AdaptAllocator::setNoSplit(c10::DeviceIndex device, MempoolId_t mempool_id) {
  Dev &d = dev_at(device);
  std::lock_guard<std::mutex> g(d.mu);
  PrivatePool *pp = find_private(device, mempool_id);
  TORCH_CHECK(pp != nullptr,
              cat("adaptalloc: setNoSplit: no pool (", mempool_id.first, ", ",
                  mempool_id.second, ") on device ", static_cast<int>(device)));
  if (aa__dl_private_no_split(pp->rec))
    return;
  TORCH_CHECK(pp->live.empty() && pp->zombies.empty(),
              "adaptalloc: setNoSplit: the pool already holds blocks");
  // the layer makes the new pool first and destroys the old one after
  int rc = aa__dl_private_remake(dl(), pp->rec, true);
  TORCH_CHECK(rc == AA_OK, cat("adaptalloc: cannot make a private pool on device ",
                               static_cast<int>(device), ": ", aa_strerror(rc)));
  pp->pool = aa__dl_private_pool(pp->rec);
}

bool AdaptAllocator::checkPoolLiveAllocations(
    c10::DeviceIndex device,
    MempoolId_t mempool_id,
    const std::unordered_set<void *> &expected_live_allocations) {
  Dev &d = dev_at(device);
  std::lock_guard<std::mutex> g(d.mu);
  PrivatePool *pp = find_private(device, mempool_id);
  if (pp == nullptr)
    return expected_live_allocations.empty();
  const auto &live = pp->live;
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
  PrivatePool *pp = find_private(device, id);
  TORCH_CHECK(
      pp != nullptr,
      cat("adaptalloc: getCheckpointState: no pool (", id.first, ", ", id.second, ") on device ", static_cast<int>(device)));
  auto st = std::make_shared<CheckpointState>();
  st->device = device;
  st->id = id;
  for (Ctx *c : pp->live) {
    st->live.push_back({c->ptr, c->size, c->stream});
    pp->pinned[c->ptr]++;
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
  PrivatePool *pp = find_private(device, st->id);
  TORCH_CHECK(pp != nullptr, "adaptalloc: setCheckpointPoolState: pool is gone");
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
    live_erase(pp, c);
    if (keep.count(c->ptr)) {
      auto *n = new Ctx(*c);
      c->dead = true; // its holder's deleter only drops the record
      live_add(pp, n);
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
    live_add(pp, c);
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
  return static_cast<int>(aa__dl_private_list(aa__dl_default(), device, nullptr, 0));
}

} // namespace adaptalloc_torch
