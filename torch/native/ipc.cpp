// ipc.cpp — CUDA IPC for the native allocator: sharing a block with another
// process (shareIpcHandle, what torch.multiprocessing calls through
// Storage._share_cuda_) and opening one shared by another process
// (getIpcDevPtr). Entry points: AdaptAllocator::shareIpcHandle,
// AdaptAllocator::getIpcDevPtr.
//
// The handle is PyTorch's own wire format (a version byte, then a type),
// so that a consumer on PyTorch's allocator opens ours and we open
// PyTorch's:
//   'c'  a cudaMalloc allocation (a slab, a cache-path segment):
//        cudaIpcGetMemHandle of the allocation's start; the offset is the
//        block's distance from it.
//   'e'  mapped pages (the expandable path, a stitched range) whose map
//        handles are all of one size: a header {pid, handle size, count}
//        and one POSIX descriptor per handle (aa_backend_export_fd; the
//        backend keeps each open while the handle is mapped), which the
//        consumer copies with pidfd_getfd and imports.
//   'a'  adaptalloc's own: mapped pages whose handles differ in size (a
//        block coalesced across map calls): {pid, count} then
//        {descriptor, size} per handle. PyTorch's allocator cannot map
//        handles of different sizes, so only an adaptalloc consumer opens
//        it (its message says so).
// Nothing is pinned here: PyTorch's CUDA IPC keeps the producer's DataPtr
// (our block) alive in its CudaIPCSentData until every consumer let go of
// the tensor (torch/csrc/CudaIPCTypes.cpp), so the pool neither reuses the
// block nor unmaps its pages meanwhile (a live block's memory is never
// given back: aa_block_share's contract).
//
// Consumer side: one mapping per distinct handle string, kept while any
// tensor from it lives (a weak_ptr cache, as cudaIpcOpenMemHandle opens a
// handle once per process), closed by the shared_ptr's deleter.
#include "native_internal.h"

#include "adaptalloc/cuda.h"

#include <cstring>
#include <unistd.h>

namespace adaptalloc_torch {

namespace {

constexpr char kVersion = 2; // PyTorch's SHAREABLE_HANDLE_VERSION
constexpr char kMalloc = 'c';
constexpr char kExpandable = 'e';
constexpr char kOwn = 'a';
constexpr size_t kIpcHandleSize = sizeof(cudaIpcMemHandle_t); // 64

// PyTorch's expandable-segment header (pid padded to 8 bytes, zeroed).
struct ShareHeader {
  pid_t pid;
  size_t segment_size;
  size_t num_handles;
};
struct OwnHeader {
  pid_t pid;
  size_t num_handles;
};
struct OwnPiece {
  int fd;
  size_t size;
};

std::mutex g_ipc_mu;
// never destroyed: a mapping's deleter may run at exit, after this
// library's static destructors (allocator.cpp's g_alloc says why)
auto &g_opened = *new std::unordered_map<std::string, std::weak_ptr<void>>();

template <class T>
void put(std::string &s, const T &v) {
  s.append(reinterpret_cast<const char *>(&v), sizeof v);
}

template <class T>
T take(const std::string &s, size_t &at) {
  TORCH_CHECK(at + sizeof(T) <= s.size(), "adaptalloc: getIpcDevPtr: the handle is truncated");
  T v;
  std::memcpy(&v, s.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

// The pool whose live block holds ptr, on any device, and the device (the
// device layer's owner lookup; nullptr when ptr is no live block of ours).
aa_pool *owner_of(void *ptr, int *device) {
  aa_pool *p = aa__dl_owner(aa__dl_default(), ptr, device);
  return p != nullptr && aa_block_size(p, ptr) != 0 ? p : nullptr;
}

std::shared_ptr<void> open_malloc(const std::string &h, size_t at, int device) {
  TORCH_CHECK(at + kIpcHandleSize <= h.size(), "adaptalloc: getIpcDevPtr: the handle is truncated");
  cudaIpcMemHandle_t mh;
  std::memcpy(&mh, h.data() + at, kIpcHandleSize);
  void *p = nullptr;
  c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
  C10_CUDA_CHECK(cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess));
  return std::shared_ptr<void>(p, [device](void *q) {
    c10::cuda::CUDAGuard g2(static_cast<c10::DeviceIndex>(device));
    if (cudaIpcCloseMemHandle(q) != cudaSuccess)
      (void)cudaGetLastError(); // a deleter must not throw (process exit)
  });
}

std::shared_ptr<void> open_fds(int pid, const std::vector<int> &fds, const std::vector<size_t> &sizes,
                               int device) {
  aa_cuda_import *im = nullptr;
  void *base = nullptr;
  int rc = aa_cuda_ipc_import(device, pid, fds.data(), sizes.data(), fds.size(), &im, &base);
  TORCH_CHECK(
      rc == AA_OK,
      cat("adaptalloc: getIpcDevPtr: cannot map the ", fds.size(),
          " memory handle(s) shared by process ", pid, ": ", aa_strerror(rc),
          rc == AA_EPERM     ? " (taking a descriptor of another process with pidfd_getfd needs "
                               "ptrace access to it: same user, and kernel.yama.ptrace_scope 0 or "
                               "CAP_SYS_PTRACE)"
          : rc == AA_ENOTSUP ? " (the kernel lacks pidfd_getfd, Linux 5.6, or the driver "
                               "the VMM export entry points)"
                             : ""));
  return std::shared_ptr<void>(base, [im](void *) { aa_cuda_ipc_close(im); });
}

} // namespace

CCA::ShareableHandle AdaptAllocator::shareIpcHandle(void *ptr) {
  int device = 0;
  aa_pool *pool = owner_of(ptr, &device);
  TORCH_CHECK(pool != nullptr,
              cat("adaptalloc: shareIpcHandle: ", ptr, " is no live block of adaptalloc's"));
  std::vector<aa_share_piece> v(8);
  size_t n = 0;
  void *block = nullptr;
  int rc = aa_block_share(pool, ptr, v.data(), v.size(), &n, &block);
  if (rc == AA_ERANGE) {
    v.resize(n);
    rc = aa_block_share(pool, ptr, v.data(), v.size(), &n, &block);
  }
  TORCH_CHECK(rc == AA_OK,
              cat("adaptalloc: shareIpcHandle: cannot describe the block at ", ptr, ": ",
                  aa_strerror(rc)));
  v.resize(n);
  CCA::ShareableHandle out;
  std::string &s = out.handle;
  s.push_back(kVersion);
  if (v[0].handle == nullptr) { // one cudaMalloc allocation
    void *base = nullptr;
    size_t size = 0;
    // the allocation's own start (the slab may sit past an alignment pad)
    if (aa_cuda_alloc_base(v[0].addr, &base, &size) != AA_OK)
      base = v[0].addr;
    cudaIpcMemHandle_t mh;
    c10::cuda::CUDAGuard g(static_cast<c10::DeviceIndex>(device));
    C10_CUDA_CHECK(cudaIpcGetMemHandle(&mh, base));
    s.push_back(kMalloc);
    s.append(reinterpret_cast<const char *>(&mh), kIpcHandleSize);
    out.offset = static_cast<char *>(ptr) - static_cast<char *>(base);
    return out;
  }
  bool uniform = true;
  for (const aa_share_piece &q : v)
    uniform = uniform && q.size == v[0].size;
  std::vector<int> fds(n, -1);
  for (size_t i = 0; i < n; i++) {
    rc = aa_backend_export_fd(aa_pool_backend(pool), v[i].handle, &fds[i]);
    TORCH_CHECK(
        rc == AA_OK,
        cat("adaptalloc: shareIpcHandle: the driver gave no shareable handle for the block at ",
            ptr, " (", aa_strerror(rc),
            "): this driver refused POSIX-descriptor handles for mapped memory, so the "
            "expandable path's blocks cannot be shared; a policy with "
            "pools.device.large.mode \"cache\" shares through cudaIpcGetMemHandle instead"));
  }
  if (uniform) {
    ShareHeader h{};
    std::memset(&h, 0, sizeof h); // the padding too: equal handles compare equal
    h.pid = getpid();
    h.segment_size = v[0].size;
    h.num_handles = n;
    s.push_back(kExpandable);
    put(s, h);
    for (int fd : fds)
      put(s, fd);
  } else {
    OwnHeader h{};
    std::memset(&h, 0, sizeof h);
    h.pid = getpid();
    h.num_handles = n;
    s.push_back(kOwn);
    put(s, h);
    for (size_t i = 0; i < n; i++) {
      OwnPiece p{};
      std::memset(&p, 0, sizeof p);
      p.fd = fds[i];
      p.size = v[i].size;
      put(s, p);
    }
  }
  out.offset = static_cast<char *>(ptr) - static_cast<char *>(v[0].addr);
  return out;
}

std::shared_ptr<void> AdaptAllocator::getIpcDevPtr(std::string handle) {
  c10::DeviceIndex device = 0;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  std::lock_guard<std::mutex> g(g_ipc_mu);
  auto it = g_opened.find(handle);
  if (it != g_opened.end()) {
    if (auto p = it->second.lock())
      return p;
    g_opened.erase(it);
  }
  size_t at = 0;
  char type = kMalloc; // a bare 64-byte handle: an old PyTorch's cudaMalloc one
  if (handle.size() != kIpcHandleSize) {
    TORCH_CHECK(handle.size() >= 2, "adaptalloc: getIpcDevPtr: the handle is truncated");
    TORCH_CHECK(handle[0] <= kVersion,
                "adaptalloc: getIpcDevPtr: the handle comes from a newer PyTorch than "
                "adaptalloc knows");
    type = handle[1];
    at = 2;
  }
  std::shared_ptr<void> p;
  if (type == kMalloc) {
    p = open_malloc(handle, at, device);
  } else if (type == kExpandable) {
    ShareHeader h = take<ShareHeader>(handle, at);
    TORCH_CHECK(h.num_handles > 0 && h.num_handles < (1u << 20) && h.segment_size > 0,
                "adaptalloc: getIpcDevPtr: a malformed expandable-segment handle");
    std::vector<int> fds;
    std::vector<size_t> sizes(h.num_handles, h.segment_size);
    for (size_t i = 0; i < h.num_handles; i++)
      fds.push_back(take<int>(handle, at));
    p = open_fds(h.pid, fds, sizes, device);
  } else if (type == kOwn) {
    OwnHeader h = take<OwnHeader>(handle, at);
    TORCH_CHECK(h.num_handles > 0 && h.num_handles < (1u << 20),
                "adaptalloc: getIpcDevPtr: a malformed handle");
    std::vector<int> fds;
    std::vector<size_t> sizes;
    for (size_t i = 0; i < h.num_handles; i++) {
      OwnPiece q = take<OwnPiece>(handle, at);
      fds.push_back(q.fd);
      sizes.push_back(q.size);
    }
    p = open_fds(h.pid, fds, sizes, device);
  } else {
    TORCH_CHECK(false, cat("adaptalloc: getIpcDevPtr: unknown handle type ",
                           static_cast<int>(type), " (the fabric handles of a multi-node "
                                                   "NVLink system are not read)"));
  }
  g_opened[handle] = p;
  return p;
}

} // namespace adaptalloc_torch
