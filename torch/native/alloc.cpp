// alloc.cpp — the native allocator's hot path: allocate() and the DataPtr's
// deleter, each one aa_alloc / aa_free on the block's pool plus one small
// host record (Ctx) that travels as the DataPtr's context: pointer,
// requested size, pool and stream. The deleter frees with exactly those;
// there is no lock and no map on this path. Only while some
// beginAllocateToPool region is open on the device (graph capture,
// use_mem_pool) does an allocation take the device's mutex to ask the
// regions' filters where it belongs (route, graph_pools.cpp), and then the
// pool call runs in relaxed stream-capture mode, so that a backend call
// (cudaMalloc, an event query of an earlier event) is legal while another
// stream captures. The CUDA backend never records an event on a capturing
// stream (core/src/cuda), so nothing illegal reaches a capture.
//
// Also here: raw_alloc / raw_delete (a map of their records, off the tensor
// path), recordStream, and out_of_memory (the observers, the history's OOM
// entry, torch.OutOfMemoryError's message). Memory history is history.cpp's:
// the lines marked "history:" hand it each allocation, free and OOM.
#include "native_internal.h"

#include <new>

namespace adaptalloc_torch {

c10::DataPtr AdaptAllocator::allocate(size_t n) {
  c10::DeviceIndex device = 0;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  if (n == 0)
    return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CUDA, device));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  Ctx *c = alloc_ctx(device, n, stream);
  if (history_.on()) // history:
    history_.record(History::Action::ALLOC, device, reinterpret_cast<size_t>(c->ptr), n, stream,
                    c->pool);
  if (tracking()) // trackers:
    track(History::Action::ALLOC, device, reinterpret_cast<size_t>(c->ptr), n, stream);
  return c10::DataPtr(
      c->ptr, c, &deleter, c10::Device(c10::DeviceType::CUDA, device));
}

c10::DeleterFnPtr AdaptAllocator::raw_deleter() const {
  return &deleter;
}

inline Ctx *AdaptAllocator::alloc_ctx(int device, size_t n, cudaStream_t stream) {
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
            live_add(priv, c);
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
  if (p == nullptr) {
    if (d.oom_pools.load(std::memory_order_relaxed) > 0) {
      Ctx *c = alloc_on_oom_pool(d, device, n, stream);
      if (c)
        return c;
    }
    out_of_memory(device, n, pool);
  }
  return make_ctx(d, Ctx{p, n, pool, stream, nullptr, device, false});
}

// MemPool(use_on_oom=True), PyTorch's meaning: a request the device pool
// cannot serve is served from such a pool's memory (its cached blocks,
// then new memory under the pool's own rules) before out of memory is
// raised. The block belongs to that pool (freed back to it, counted in it).
Ctx *AdaptAllocator::alloc_on_oom_pool(Dev &d, int device, size_t n, cudaStream_t stream) {
  std::lock_guard<std::mutex> g(d.mu);
  for (PrivatePool *pp : private_pools(device)) {
    if (!pp->use_on_oom)
      continue;
    // only what the pool holds already: capped at its reserved bytes for
    // the call (a private pool has no limit of its own)
    aa_pool_stats st;
    if (aa_pool_stats_get_opts(pp->pool, &st, AA_STATS_NO_SIZES) != AA_OK ||
        st.bytes_reserved == 0)
      continue;
    aa_pool_set_limit(pp->pool, static_cast<size_t>(st.bytes_reserved));
    void *p = maybe_relaxed(d, [&] { return aa_alloc(pp->pool, n, stream); });
    aa_pool_set_limit(pp->pool, 0);
    if (p == nullptr)
      continue;
    Ctx *c = make_ctx(d, Ctx{p, n, pp->pool, stream, pp, device, false});
    try {
      live_add(pp, c);
    } catch (...) {
      maybe_relaxed(d, [&] { return aa_free(c->pool, c->ptr, c->size, c->stream); });
      delete c;
      throw;
    }
    return c;
  }
  return nullptr;
}

// The host record of a block just allocated; when it cannot be made, the
// block goes back to its pool before the error is raised.
inline Ctx *AdaptAllocator::make_ctx(const Dev &d, const Ctx &v) {
  Ctx *c = new (std::nothrow) Ctx(v);
  if (c == nullptr) {
    maybe_relaxed(d, [&] { return aa_free(v.pool, v.ptr, v.size, v.stream); });
    TORCH_CHECK(false, "adaptalloc: out of host memory for a block's record");
  }
  return c;
}

inline void AdaptAllocator::free_ctx(Ctx *c) {
  if (history_.on()) { // history: the pool takes the block back at once
    history_.record(History::Action::FREE_REQUESTED, c->device,
                    reinterpret_cast<size_t>(c->ptr), c->size, c->stream);
    history_.record(History::Action::FREE_COMPLETED, c->device,
                    reinterpret_cast<size_t>(c->ptr), c->size, c->stream);
  }
  if (tracking()) { // trackers: FREE_COMPLETED also looks at the segments after
    struct After {
      AdaptAllocator *a;
      int dev;
      size_t p, n;
      cudaStream_t s;
      ~After() {
        try {
          a->track(History::Action::FREE_COMPLETED, dev, p, n, s);
        } catch (...) {
          // a deleter must not throw: a tracker's failure is dropped
        }
      }
    };
    track(History::Action::FREE_REQUESTED, c->device, reinterpret_cast<size_t>(c->ptr), c->size,
          c->stream);
    After after{this, c->device, reinterpret_cast<size_t>(c->ptr), c->size, c->stream};
    free_ctx_now(c);
    return;
  }
  free_ctx_now(c);
}

inline void AdaptAllocator::free_ctx_now(Ctx *c) {
  Dev &d = g_dev[c->device];
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
  live_erase(pp, c);
  if (!free_private(d, pp, c))
    return;                           // a zombie now
  if (aa__dl_private_idle(pp->rec)) { // use count 0, no live block
    try {
      maybe_destroy(d, pp);
    } catch (const std::exception &) {
      // a deleter must not throw: the pool stays for empty_cache
    }
  }
}

void AdaptAllocator::out_of_memory(int device, size_t n, aa_pool *pool) {
  aa__torch_sums t{};
  (void)aa__torch_sums_add_pool(&t, pool);
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
  // A private pool's limit is the device pool's, which it shares (with the
  // device's other CUDA-graph and MemPool pools): that one is shown.
  aa_pool *owner = aa_pool_limit_owner(pool);
  aa__torch_sums ls = t; // the limit's pool: this one, or the device pool it shares
  if (owner != nullptr) {
    ls = aa__torch_sums{};
    (void)aa__torch_sums_add_pool(&ls, owner);
  }
  uint64_t shared = aa_pool_sharers_reserved(owner != nullptr ? owner : pool);
  std::vector<CCA::OutOfMemoryObserver> obs;
  {
    std::lock_guard<std::mutex> g(obs_mu_);
    obs = observers_;
  }
  // as PyTorch's allocator calls them: the request, the most the device
  // (or the limit) allows, the device's free bytes
  for (auto &o : obs)
    o(device, n, ls.limit ? static_cast<size_t>(ls.limit) : total_b, free_b);
  std::string limit =
      ls.limit ? size_str(ls.limit) : std::string("none (the whole device)");
  if (ls.limit && owner != nullptr)
    limit += cat(" (the device pool's, ", aa_pool_name(owner), ")");
  if (ls.limit && shared != 0) // the device's private pools count against it
    limit += cat(", of which CUDA-graph and MemPool pools hold ", size_str(shared));
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

void *AdaptAllocator::raw_alloc(size_t nbytes) {
  c10::DeviceIndex device = 0;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  return raw_alloc_with_stream(
      nbytes, c10::cuda::getCurrentCUDAStream(device).stream());
}

void *AdaptAllocator::raw_alloc_with_stream(size_t nbytes, cudaStream_t stream) {
  if (nbytes == 0)
    return nullptr;
  c10::DeviceIndex device = 0;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  Ctx *c = alloc_ctx(device, nbytes, stream);
  if (history_.on()) // history:
    history_.record(History::Action::ALLOC, device, reinterpret_cast<size_t>(c->ptr), nbytes,
                    stream, c->pool);
  if (tracking()) // trackers:
    track(History::Action::ALLOC, device, reinterpret_cast<size_t>(c->ptr), nbytes, stream);
  try {
    std::lock_guard<std::mutex> g(raw_mu_);
    raw_[c->ptr] = c;
  } catch (...) {
    free_ctx(c);
    throw;
  }
  return c->ptr;
}

void AdaptAllocator::raw_delete(void *ptr) {
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
bool AdaptAllocator::raw_delete_private(void *ptr) {
  for (int dev = 0; dev < kMaxDevices; dev++) {
    if (device_pool_if_made(dev) == nullptr)
      continue;
    Dev &d = g_dev[dev];
    std::lock_guard<std::mutex> g(d.mu);
    for (PrivatePool *pp : private_pools(dev)) {
      for (Ctx *c : pp->live) {
        if (c->ptr != ptr)
          continue;
        live_erase(pp, c);
        auto *n = new Ctx(*c);
        c->dead = true; // should its holder's deleter still run, it only drops c
        (void)free_private(d, pp, n);
        return true;
      }
    }
  }
  return false;
}

void AdaptAllocator::recordStream(const c10::DataPtr &ptr, c10::cuda::CUDAStream stream) {
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

} // namespace adaptalloc_torch
