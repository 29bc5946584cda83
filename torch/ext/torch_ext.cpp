// torch_ext.cpp — adaptalloc._torch_ext, the tensor side of adaptalloc.torch's
// pinned-pool helpers, built when torch is importable at install time.
// Python could do the same with torch.frombuffer and views, at a few
// microseconds of interpreter and dispatcher work per tensor; here a tensor
// over a pool block is one at::for_blob, and pack's device views are built
// straight from the storage.
//
// Everything goes through adaptalloc._C, the one module that binds the
// library's staging buffers, packer and runtime: its C API table
// (python/src/adaptalloc_capi.h, the capsule adaptalloc._C._C_API, taken at
// import) wraps aa_staging_get/put, aa_record_stream, aa_packer_* under _C's
// rules (nothing touches a pool after adaptalloc.shutdown()). This module is
// the tensor side only and does not link libadaptalloc; nothing here
// allocates or copies by itself.
//   pinned_empty(shape, dtype=None, stream=None) -> Tensor
//       CPU tensor over aa_staging_get(runtime pinned pool); its deleter
//       returns the block with aa_staging_put. shape: an int or a sequence
//       of ints (torch.Size, tuple, list); dtype: a torch.dtype (None:
//       float32); stream: a raw cudaStream_t as an int, or None. Which
//       streams a block waits for before its reuse:
//       - tracked copies (copy_tracking() True: built with CUDA's headers,
//         AA_TORCH_EXT_CUDA, against a torch with at::setHostAllocator):
//         the streams of the non_blocking copies torch made from or into the
//         tensor, as for torch's own pinned memory (Tensor.copy_ tells the
//         CUDA host allocator, at::HostAllocator::record_event; CopyTracker
//         below sits in front of torch's and records these uses in the pool,
//         aa_record_stream), plus `stream` when given. A tensor no copy used
//         goes back on the host pseudo-stream: reused at once, no CUDA call.
//       - otherwise: `stream`, or the current CUDA stream when None (only
//         when CURRENT_STREAM is True).
//       A plain CPython fast-call function, not a pybind11 one: it is called
//       per tensor, and pybind11's overload dispatch and std::vector
//       conversion cost about as much as the pool's get and put together.
//   pack(packer: int, tensors: list[Tensor], device: int, copy_stream: int,
//        wait_stream: int) -> (list[Tensor], base) | int
//       aa_packer_add_many of the CPU tensors (made contiguous), one device
//       allocation `base`, aa_packer_flush on copy_stream, aa_packer_wait on
//       wait_stream when it differs, and the device views of base. When they
//       do not fit the packer: the bytes they need (nothing packed).
//   CURRENT_STREAM: bool, whether pinned_empty can read the current stream.
//   copy_tracking() -> bool: whether the copies torch makes are tracked (see
//       pinned_empty; True once the first pinned_empty installed the tracker).
//   serve_pinned(on: bool) -> bool: with copy tracking, whether torch's own
//       pinned allocations (torch.empty(pin_memory=True), Tensor.pin_memory(),
//       DataLoader(pin_memory=True)) come from the pinned pool; returns the
//       previous setting. Raises RuntimeError when there is no tracker.
#include <torch/extension.h>
#include <torch/version.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>
#ifndef AA_TORCH_EXT_CUDA
#define AA_TORCH_EXT_CUDA 0 // setup.py defines it to 1 when it builds with CUDA
#endif
#if AA_TORCH_EXT_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif
// at::setHostAllocator (torch >= 2.9): the CUDA host allocator can be put
// behind another, which is told of every non_blocking copy.
#if AA_TORCH_EXT_CUDA && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9))
#include <ATen/core/CachingHostAllocator.h>
#define AA_COPY_TRACKING 1
#else
#define AA_COPY_TRACKING 0
#endif

#include <Python.h>

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h" // AA_STREAM_HOST, aa_stream_of (inline)
#include "adaptalloc/transfer.h"
#include "adaptalloc_capi.h"

namespace py = pybind11;

namespace {

// adaptalloc._C's C API, set once at import (PYBIND11_MODULE below) before
// any function here can run; never cleared.
const aa_py_capi *g_api = nullptr;

aa_pool *pinned_pool() {
  aa_pool *pool = g_api->pinned_pool();
  if (pool == nullptr)
    throw std::runtime_error(g_api->live()
                                 ? "adaptalloc: no pinned pool in this process (no CUDA or no GPU)"
                                 : "adaptalloc: the runtime was shut down in this process");
  return pool;
}

// ------------------------------------------------------------ pinned_empty

constexpr const char *kPE = "adaptalloc.torch.pinned_empty: ";

// What the deleter of a pinned tensor's storage needs: the block, its size
// and pool, and the stream whose work must finish before its reuse.
struct PinnedBlock {
  aa_pool *pool;
  void *ptr;
  size_t size;
  aa_stream stream;
};

void pinned_block_put(void *ctx) {
  auto *b = static_cast<PinnedBlock *>(ctx);
  // After a shutdown the pool is gone: staging_put returns nothing to it.
  g_api->staging_put(b->pool, b->ptr, b->size, b->stream);
  delete b;
}

// ------------------------------------------------------------ copy tracking

// The pinned pool of the tracker (set once, with it; never cleared: after a
// shutdown g_api->live() is false and nothing touches it).
std::atomic<aa_pool *> g_tracked_pool{nullptr};

// Blocks a copy captured into a CUDA graph used: every replay of the graph
// reads or writes them again, so they never go back to the pool (PyTorch
// keeps such blocks for the graph). g_nkept: how many, so that a deleter
// looks at the set only when there is one. The set is never destroyed: a
// tensor may die during the interpreter's exit, after static destructors.
std::mutex g_kept_mu;
std::unordered_set<void *> &g_kept = *new std::unordered_set<void *>;
std::atomic<size_t> g_nkept{0};

// Whether `blk` was kept, forgetting it.
bool kept_take(void *blk) {
  if (g_nkept.load(std::memory_order_acquire) == 0)
    return false;
  std::lock_guard<std::mutex> g(g_kept_mu);
  if (g_kept.erase(blk) == 0)
    return false;
  g_nkept.fetch_sub(1, std::memory_order_release);
  return true;
}

// Set in a fork()ed child: the parent's pool is not served there (torch's
// own allocator answers, and refuses CUDA there as it always did).
std::atomic<bool> g_forked{false};

// The deleter of a tracked tensor: ctx is the block itself. Its uses were
// recorded in the pool (aa_record_stream), so it goes back on the host
// pseudo-stream and the pool waits for exactly those streams; a block a
// captured copy used stays out of the pool for good.
void tracked_block_put(void *ctx) {
  if (kept_take(ctx))
    return;
  aa_pool *pool = g_tracked_pool.load(std::memory_order_acquire);
  if (pool != nullptr)
    g_api->staging_put(pool, ctx, 0, AA_STREAM_HOST); // nothing after a shutdown
}

#if AA_COPY_TRACKING
// Sits in front of torch's CUDA host allocator (at::getHostAllocator(kCUDA)),
// forwarding everything to it but record_event for the blocks of our tracked
// tensors: their storage's context is the block's address, a block of the
// pinned pool (torch's own contexts are its heap records, never in the
// pool). Copy.cu calls record_event(ptr, ctx, stream) after each
// non_blocking copy between a pinned host tensor and the GPU. While serving
// (serve_pinned), allocate() hands out pool blocks made the same way, so
// torch's pinned tensors follow the same rule; when the pool cannot (at its
// limit, out of pinned memory, shut down) torch's allocator serves.
class CopyTrackerBase : public at::HostAllocator {
public:
  explicit CopyTrackerBase(at::HostAllocator *next) : next_(next) {}

  at::DataPtr allocate(size_t n) override {
    aa_pool *pool = g_tracked_pool.load(std::memory_order_acquire);
    if (n > 0 && serve_.load(std::memory_order_relaxed) && pool != nullptr &&
        !g_forked.load(std::memory_order_relaxed) && g_api->live()) {
      void *p = g_api->staging_get(pool, n);
      if (p != nullptr)
        return at::DataPtr(p, p, &tracked_block_put, c10::Device(c10::kCPU));
    }
    return next_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return next_->raw_deleter(); }
  void copy_data(void *dst, const void *src, std::size_t n) const override {
    next_->copy_data(dst, src, n);
  }
  bool record_event(void *ptr, void *ctx, c10::Stream stream) override {
    aa_pool *pool = g_tracked_pool.load(std::memory_order_acquire);
    if (pool == nullptr || !g_api->live() ||
        stream.device_type() != c10::DeviceType::CUDA)
      return next_->record_event(ptr, ctx, stream);
    // The block: the storage's context for our tensors and their views; else
    // the copy's address when a block of ours starts there (a tensor over a
    // pool tensor's memory with a storage of its own: torch.from_numpy of
    // its .numpy(), torch.frombuffer, DLPack), as torch's own allocator
    // falls back on the address.
    void *blk = ctx != nullptr && g_api->block_size(pool, ctx) != 0 ? ctx : ptr;
    if (blk == nullptr || g_api->block_size(pool, blk) == 0)
      return next_->record_event(ptr, ctx, stream);
    cudaStream_t cs = c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream).stream();
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cs, &cap) != cudaSuccess)
      (void)cudaGetLastError();
    else if (cap != cudaStreamCaptureStatusNone && blk == ctx && keep(blk))
      return true; // a graph's copy of our tensor: the block is the graph's for good
    // a device's default stream is 0 on every device: aa_stream_of names it
    int rc = g_api->record(pool, blk, aa_stream_of(cs, static_cast<int>(stream.device_index())));
    if (rc == AA_EINVAL) // not a live block of ours after all
      return next_->record_event(ptr, ctx, stream);
    if (rc != AA_OK) {
      // Cannot remember the use (no memory): wait for the copy instead, so
      // that the block is safe whenever it dies (on the stream's own device:
      // a default stream is NULL to CUDA, the current device's)
      c10::cuda::CUDAGuard guard(stream.device_index());
      (void)cudaStreamSynchronize(cs);
    }
    return true;
  }
  // torch.cuda's empty_cache of pinned memory: the pool gives back what it
  // caches too (what it serves and pinned_empty's).
  void empty_cache() override {
    next_->empty_cache();
    aa_pool *pool = g_tracked_pool.load(std::memory_order_acquire);
    if (pool != nullptr)
      g_api->release(pool); // nothing after a shutdown
  }
  at::HostStats get_stats() override { return next_->get_stats(); }
  void reset_accumulated_stats() override { next_->reset_accumulated_stats(); }
  void reset_peak_stats() override { next_->reset_peak_stats(); }

  bool serve(bool on) { return serve_.exchange(on, std::memory_order_relaxed); }

protected:
  at::HostAllocator *next_;
  std::atomic<bool> serve_{false};

private:
  // Keeps a live block of the pool out of it for good (false: no memory to
  // remember it; then the use is recorded as any other).
  static bool keep(void *blk) {
    try {
      std::lock_guard<std::mutex> g(g_kept_mu);
      if (g_kept.insert(blk).second)
        g_nkept.fetch_add(1, std::memory_order_release);
      return true;
    } catch (const std::exception &) {
      return false;
    }
  }
};

// Torch versions whose CUDA graphs give a capture's pinned allocations a
// pool of their own (pytorch#167507) call begin_allocate_to_pool,
// end_allocate_to_pool and release_pool on the host allocator at every
// capture, and at::HostAllocator's versions throw "Not implemented": each
// hook torch has is forwarded, found by its signature (a torch without it,
// or with another signature, gets nothing, as before).
template <class A, class = void>
struct BeginHook { using type = void; };
template <class A>
struct BeginHook<A, std::void_t<decltype(&A::begin_allocate_to_pool)>> {
  using type = decltype(&A::begin_allocate_to_pool);
};
template <class A, class = void>
struct EndHook { using type = void; };
template <class A>
struct EndHook<A, std::void_t<decltype(&A::end_allocate_to_pool)>> {
  using type = decltype(&A::end_allocate_to_pool);
};
template <class A, class = void>
struct ReleaseHook { using type = void; };
template <class A>
struct ReleaseHook<A, std::void_t<decltype(&A::release_pool)>> {
  using type = decltype(&A::release_pool);
};

template <class Base, class M>
class WithBegin : public Base {
public:
  using Base::Base;
};
template <class Base, class C, class Id, class Filter>
class WithBegin<Base, void (C::*)(Id, Filter)> : public Base {
public:
  using Base::Base;
  void begin_allocate_to_pool(Id id, Filter filter) override {
    this->next_->begin_allocate_to_pool(id, std::move(filter));
  }
};
template <class Base, class M>
class WithEnd : public Base {
public:
  using Base::Base;
};
template <class Base, class C, class Id>
class WithEnd<Base, void (C::*)(Id)> : public Base {
public:
  using Base::Base;
  void end_allocate_to_pool(Id id) override { this->next_->end_allocate_to_pool(id); }
};
template <class Base, class M>
class WithRelease : public Base {
public:
  using Base::Base;
};
template <class Base, class C, class Id>
class WithRelease<Base, void (C::*)(Id)> : public Base {
public:
  using Base::Base;
  void release_pool(Id id) override { this->next_->release_pool(id); }
};

using CopyTracker = WithRelease<
    WithEnd<WithBegin<CopyTrackerBase, BeginHook<at::HostAllocator>::type>,
            EndHook<at::HostAllocator>::type>,
    ReleaseHook<at::HostAllocator>::type>;

// Installed once (under the GIL), never freed: torch keeps a raw pointer.
// torch replaces an allocator by one of equal or higher priority: at 255
// only a later registration at 255 displaces it (copy_tracking() checks
// that it is in place at every call).
CopyTracker *g_tracker = nullptr;

bool g_tracker_tried = false;

// Tried once per process; when torch has no CUDA host allocator to put it
// in front of, pinned_empty keeps the current-stream rule (no error).
void install_copy_tracker(aa_pool *pool) {
  if (g_tracker_tried)
    return;
  g_tracker_tried = true;
  try {
    at::HostAllocator *cur = at::getHostAllocator(at::kCUDA);
    if (cur == nullptr)
      return;
    g_tracked_pool.store(pool, std::memory_order_release);
    g_tracker = new CopyTracker(cur);
    at::setHostAllocator(at::kCUDA, g_tracker, 255);
  } catch (const std::exception &) {
    // no tracker: copy_tracking() is false
  }
}

bool copy_tracking() {
  return g_tracker != nullptr && at::getHostAllocator(at::kCUDA) == g_tracker &&
         g_tracked_pool.load(std::memory_order_relaxed) != nullptr;
}

bool tracker_serve(bool on) { return g_tracker->serve(on); }
#else
void install_copy_tracker(aa_pool * /*pool*/) {}
bool copy_tracking() { return false; }
bool tracker_serve(bool /*on*/) { return false; }
#endif

// Whether torch.cuda._lazy_init() has run in this process (under the GIL;
// cleared in a forked child). Python's path ran it through
// torch.cuda.current_device(); without it torch says a pool tensor is not
// pinned (is_pinned() checks that CUDA was initialised), and a forked
// DataLoader worker would use the parent's pool instead of torch's "Cannot
// re-initialize CUDA in forked subprocess".
bool g_cuda_ready = false;

void cuda_ready_after_fork() {
  g_cuda_ready = false;
  g_forked.store(true, std::memory_order_relaxed);
}

bool cuda_lazy_init() {
  if (g_cuda_ready)
    return true;
  PyObject *mod = PyImport_ImportModule("torch.cuda");
  if (mod == nullptr)
    return false;
  PyObject *r = PyObject_CallMethod(mod, "_lazy_init", nullptr);
  Py_DECREF(mod);
  if (r == nullptr)
    return false;
  Py_DECREF(r);
  g_cuda_ready = true;
  return true;
}

// One dimension: an int or an object with __index__ (not a float). Sets a
// Python error and returns false when it is not one.
bool dim_of(PyObject *o, Py_ssize_t at, int64_t *out) {
  long long v;
  if (PyLong_Check(o)) {
    v = PyLong_AsLongLong(o);
  } else if (PyIndex_Check(o)) {
    PyObject *i = PyNumber_Index(o);
    if (i == nullptr)
      return false;
    v = PyLong_AsLongLong(i);
    Py_DECREF(i);
  } else {
    PyErr_Format(PyExc_TypeError, "%sshape must be an int or a sequence of ints; item %zd is %s",
                 kPE, at, Py_TYPE(o)->tp_name);
    return false;
  }
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "%sdimension %zd is too large", kPE, at);
    return false;
  }
  if (v < 0) {
    PyErr_Format(PyExc_ValueError, "%snegative dimension %lld at %zd", kPE, v, at);
    return false;
  }
  *out = static_cast<int64_t>(v);
  return true;
}

// The shape: an int, or a sequence of ints (torch.Size, tuple, list or any
// iterable). Sets a Python error and returns false otherwise.
bool shape_of(PyObject *o, c10::SmallVector<int64_t, 8> *dims) {
  if (PyLong_Check(o) || (!PySequence_Check(o) && PyIndex_Check(o))) {
    int64_t d;
    if (!dim_of(o, 0, &d))
      return false;
    dims->push_back(d);
    return true;
  }
  // A tuple (an exact tuple is only increfed): an item's __index__ cannot
  // change it under the loop, as it could a list.
  PyObject *seq = PySequence_Tuple(o);
  if (seq == nullptr) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%sshape must be an int or a sequence of ints, not %s", kPE,
                 Py_TYPE(o)->tp_name);
    return false;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(seq);
  bool ok = true;
  for (Py_ssize_t i = 0; i < n && ok; i++) {
    int64_t d;
    ok = dim_of(PyTuple_GET_ITEM(seq, i), i, &d);
    if (ok)
      dims->push_back(d);
  }
  Py_DECREF(seq);
  return ok;
}

// The raw stream handle `o` (an int) to put the block back on; None (or
// absent) leaves *given false: the current stream, read later.
bool stream_arg(PyObject *o, aa_stream *out, bool *given) {
  *given = false;
  if (o == nullptr || o == Py_None)
    return true;
  if (!PyLong_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%sstream must be a raw stream handle (int) or None, not %s",
                 kPE, Py_TYPE(o)->tp_name);
    return false;
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred())
    return false;
  *out = reinterpret_cast<aa_stream>(static_cast<uintptr_t>(v));
  *given = true;
  return true;
}

// The current CUDA stream of the current device (what
// torch.cuda.current_stream() names; its default stream as
// aa_stream_default(device)). Throws c10::Error when CUDA fails.
bool current_stream(aa_stream *out) {
#if AA_TORCH_EXT_CUDA
  c10::cuda::CUDAStream st = c10::cuda::getCurrentCUDAStream();
  // the default stream is 0 on every device: aa_stream_of names the device,
  // so that the pinned pool, used from every device, orders a block after
  // the right device's queue
  *out = aa_stream_of(st.stream(), static_cast<int>(st.device_index()));
  return true;
#else
  (void)out;
  PyErr_Format(PyExc_RuntimeError,
               "%sthis build cannot read the current CUDA stream (built without CUDA's "
               "headers): pass the stream",
               kPE);
  return false;
#endif
}

// pinned_empty's work; C++ exceptions are pinned_empty's to turn into
// Python ones.
PyObject *pinned_empty_impl(PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 3) {
    PyErr_Format(PyExc_TypeError, "%stakes (shape, dtype=None, stream=None), %zd arguments given",
                 kPE, nargs);
    return nullptr;
  }
  at::ScalarType st = at::kFloat;
  if (nargs >= 2 && args[1] != Py_None) {
    if (!THPDtype_Check(args[1])) {
      PyErr_Format(PyExc_TypeError, "%sdtype must be a torch.dtype, not %s", kPE,
                   Py_TYPE(args[1])->tp_name);
      return nullptr;
    }
    st = reinterpret_cast<THPDtype *>(args[1])->scalar_type;
  }
  c10::SmallVector<int64_t, 8> dims;
  if (!shape_of(args[0], &dims))
    return nullptr;
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(numel, d, &numel)) {
      PyErr_Format(PyExc_ValueError, "%sthe shape has too many elements", kPE);
      return nullptr;
    }
  }
  size_t nbytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel), c10::elementSize(st), &nbytes)) {
    PyErr_Format(PyExc_ValueError, "%sthe tensor is too large", kPE);
    return nullptr;
  }
  size_t size = nbytes ? nbytes : 1;
  aa_stream s = nullptr;
  bool given = false;
  if (!stream_arg(nargs >= 3 ? args[2] : nullptr, &s, &given))
    return nullptr;
  if (!cuda_lazy_init())
    return nullptr;
  aa_pool *pool = pinned_pool();
  install_copy_tracker(pool);
  // Tracked: the block is the storage's context and its uses are recorded
  // in the pool. Else a PinnedBlock carries the stream it goes back on.
  bool tracked = copy_tracking() && pool == g_tracked_pool.load(std::memory_order_relaxed);
  if (!tracked && !given && !current_stream(&s))
    return nullptr;
  void *p = g_api->staging_get(pool, size);
  if (p == nullptr) {
    PyErr_Format(PyExc_MemoryError, "adaptalloc: out of pinned memory allocating %zu bytes", size);
    return nullptr;
  }
  void *ctx = p;
  c10::DeleterFnPtr put = &tracked_block_put;
  if (tracked) {
    // A stream given: a use recorded now (its work up to the tensor's death).
    int rc = given && s != AA_STREAM_HOST ? g_api->record(pool, p, s) : AA_OK;
    if (rc != AA_OK) {
      g_api->staging_put(pool, p, 0, AA_STREAM_HOST); // never handed out
      PyErr_Format(PyExc_MemoryError, "%scannot record stream %p for the block: %s", kPE,
                   static_cast<void *>(s), g_api->strerror(rc));
      return nullptr;
    }
  } else {
    ctx = new (std::nothrow) PinnedBlock{pool, p, size, s};
    if (ctx == nullptr) {
      g_api->staging_put(pool, p, size, AA_STREAM_HOST); // never handed out
      return PyErr_NoMemory();
    }
    put = &pinned_block_put;
  }
  // From .context() on, the tensor maker owns ctx, then the storage; on an
  // exception the maker runs `put`, which gives the block back.
  at::Tensor t = at::for_blob(p, c10::IntArrayRef(dims.data(), dims.size()))
                     .context(ctx, put)
                     .target_device(c10::Device(c10::kCPU))
                     .options(at::TensorOptions().dtype(st).device(at::kCPU))
                     .make_tensor();
  return THPVariable_Wrap(std::move(t));
}

PyObject *pinned_empty(PyObject * /*self*/, PyObject *const *args, Py_ssize_t nargs) {
  try {
    return pinned_empty_impl(args, nargs);
  } catch (const c10::Error &e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  } catch (const std::bad_alloc &) {
    PyErr_NoMemory();
  } catch (const std::exception &e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyMethodDef fast_methods[] = {
    {"pinned_empty", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(pinned_empty)),
     METH_FASTCALL,
     "pinned_empty(shape, dtype=None, stream=None): a CPU tensor over a pinned-pool block"},
    {nullptr, nullptr, 0, nullptr}};

// serve_pinned(on): the tracker in place first (torch.cuda initialised,
// the pinned pool made), then its allocate() switched. Under the GIL.
bool serve_pinned(bool on) {
  if (!on && !copy_tracking())
    return false; // nothing to switch off
  if (!cuda_lazy_init())
    throw py::error_already_set();
  install_copy_tracker(pinned_pool());
  if (!copy_tracking())
    throw std::runtime_error(
        "adaptalloc.torch.serve_pinned: PyTorch's CUDA host allocator cannot be served from "
        "the pool here (it needs the C++ helper built with CUDA's headers and PyTorch 2.9 or "
        "later, and adaptalloc's tracker in front of torch's host allocator)");
  return tracker_serve(on);
}

py::object pack(uint64_t packer, const std::vector<at::Tensor> &tensors, int64_t device,
                uint64_t copy_stream, uint64_t wait_stream) {
  aa_packer *pk = reinterpret_cast<aa_packer *>(static_cast<uintptr_t>(packer));
  if (pk == nullptr)
    throw py::value_error("adaptalloc: no packer");
  size_t count = tensors.size();
  std::vector<at::Tensor> srcs;
  std::vector<const void *> src;
  std::vector<size_t> len, off(count, 0), idx;
  size_t need = 0;
  srcs.reserve(count);
  src.reserve(count);
  len.reserve(count);
  for (size_t i = 0; i < count; i++) {
    const at::Tensor &t = tensors[i];
    if (!t.device().is_cpu())
      throw py::value_error("adaptalloc.torch.pack: item " + std::to_string(i) + " is on " +
                            t.device().str() + "; pack takes CPU tensors");
    srcs.push_back(t.contiguous());
    size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    if (n == 0)
      continue;
    src.push_back(srcs.back().data_ptr());
    len.push_back(n);
    idx.push_back(i);
    need += (n + AA_PACKER_ALIGN - 1) / AA_PACKER_ALIGN * AA_PACKER_ALIGN;
  }
  std::vector<size_t> packed_off(src.size(), 0);
  int rc = AA_OK;
  if (!src.empty()) {
    py::gil_scoped_release nogil;
    rc = g_api->pack(pk, src.data(), len.data(), src.size(), packed_off.data());
  }
  if (rc == AA_ELIMIT)
    return py::int_(need); // the caller makes a larger packer and calls again
  if (rc != AA_OK)
    throw std::runtime_error(std::string("adaptalloc: pack: ") + g_api->strerror(rc));
  for (size_t k = 0; k < idx.size(); k++)
    off[idx[k]] = packed_off[k];
  size_t used = g_api->packed(pk);
  at::Tensor base = at::empty({static_cast<int64_t>(used ? used : 1)},
                              at::TensorOptions().dtype(at::kByte).device(
                                  at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device))));
  if (used) {
    aa_stream cs = reinterpret_cast<aa_stream>(static_cast<uintptr_t>(copy_stream));
    rc = g_api->flush(pk, base.data_ptr(), cs);
    if (rc == AA_OK && wait_stream != copy_stream)
      rc = g_api->wait(pk, reinterpret_cast<aa_stream>(static_cast<uintptr_t>(wait_stream)));
    if (rc != AA_OK)
      throw std::runtime_error(std::string("adaptalloc: pack copy: ") + g_api->strerror(rc));
  }
  std::vector<at::Tensor> out;
  out.reserve(count);
  for (size_t i = 0; i < count; i++) {
    const at::Tensor &t = srcs[i];
    at::ScalarType st = t.scalar_type();
    if (t.numel() == 0) {
      out.push_back(at::empty(t.sizes(), base.options().dtype(st)));
      continue;
    }
    // A view of base's storage: one TensorImpl, no dispatcher round trips.
    at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(base.storage()), base.key_set(), caffe2::TypeMeta::fromScalarType(st));
    v.unsafeGetTensorImpl()->set_storage_offset(
        static_cast<int64_t>(off[i] / c10::elementSize(st)));
    v.unsafeGetTensorImpl()->set_sizes_contiguous(t.sizes());
    out.push_back(std::move(v));
  }
  return py::make_tuple(py::cast(out), base);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "adaptalloc's pinned-pool tensors and packed copies (see adaptalloc.torch)";
  // adaptalloc._C's C API (imports adaptalloc._C): an ImportError when it is
  // missing or of another build, so that adaptalloc.torch falls back to its
  // Python paths as without this module
  g_api = static_cast<const aa_py_capi *>(PyCapsule_Import(AA_PY_CAPI_NAME, 0));
  if (g_api == nullptr || g_api->version != AA_PY_CAPI_VERSION ||
      g_api->size < sizeof(aa_py_capi)) {
    g_api = nullptr;
    PyErr_Clear();
    PyErr_SetString(PyExc_ImportError,
                    "adaptalloc._torch_ext: adaptalloc._C's C API (" AA_PY_CAPI_NAME
                    ") is missing or of another build: reinstall adaptalloc");
    throw py::error_already_set();
  }
  if (PyModule_AddFunctions(m.ptr(), fast_methods) != 0)
    throw py::error_already_set();
  (void)pthread_atfork(nullptr, nullptr, cuda_ready_after_fork);
  m.attr("CURRENT_STREAM") = py::bool_(AA_TORCH_EXT_CUDA != 0);
  m.def("copy_tracking", &copy_tracking,
        "whether torch's non_blocking copies of pinned_empty tensors are tracked");
  m.def("serve_pinned", &serve_pinned, py::arg("on"),
        "torch's own pinned allocations from the pinned pool (on) or from torch's (off); "
        "returns the previous setting");
  m.def("pack", &pack, py::arg("packer"), py::arg("tensors"), py::arg("device"),
        py::arg("copy_stream"), py::arg("wait_stream"));
}
