// bench/gpu/pair.cpp — benchmark 1: the cost of one alloc+free pair, timed
// in C++ (no Python in the loop), for four allocators:
//   0 adaptalloc       aa_torch_alloc / aa_torch_free (what PyTorch calls),
//                      passed in as function pointers from ctypes
//   1 cudaMalloc       cudaMalloc / cudaFree
//   2 cudaMallocAsync  cudaMallocAsync / cudaFreeAsync on one stream, the
//                      device's default pool with release threshold = max
//                      (warm: memory stays in the pool)
//   3 torch caching    c10::cuda::CUDACachingAllocator::raw_alloc / raw_delete
// Built as a plain shared library (extern "C", loaded with ctypes after
// `import torch`), so it needs only c10 headers and compiles in seconds:
//   g++ -O2 -shared -fPIC pair.cpp -I$TORCH/include -I$CUDA/include \
//       -L$TORCH/lib -lc10_cuda -lc10 -L$CUDA/lib64 -lcudart -o pair.so
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

typedef void *(*aa_alloc_fn)(size_t, int, void *);
typedef void (*aa_free_fn)(void *, size_t, int, void *);

static cudaStream_t g_stream = nullptr;

extern "C" int pair_setup(void) {
  if (cudaSetDevice(0) != cudaSuccess) return -1;
  if (cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking) != cudaSuccess) return -2;
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, 0) != cudaSuccess) return -3;
  uint64_t thr = UINT64_MAX;
  if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr) != cudaSuccess)
    return -4;
  return 0;
}

// Nanoseconds per pair, averaged over `iters` pairs of `size` bytes. Returns
// a negative value on failure.
extern "C" double pair_run(int method, size_t size, int iters, void *aa_alloc,
                           void *aa_free) {
  aa_alloc_fn aa_a = (aa_alloc_fn)aa_alloc;
  aa_free_fn aa_f = (aa_free_fn)aa_free;
  void *p = nullptr;
  // one warm-up pair outside the timing (fills pools/caches)
  for (int pass = 0; pass < 2; pass++) {
    int n = pass == 0 ? 1 : iters;
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) {
      switch (method) {
      case 0:
        p = aa_a(size, 0, g_stream);
        if (!p) return -1;
        aa_f(p, size, 0, g_stream);
        break;
      case 1:
        if (cudaMalloc(&p, size) != cudaSuccess) return -1;
        cudaFree(p);
        break;
      case 2:
        if (cudaMallocAsync(&p, size, g_stream) != cudaSuccess) return -1;
        cudaFreeAsync(p, g_stream);
        break;
      case 3:
        p = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(size, g_stream);
        if (!p) return -1;
        c10::cuda::CUDACachingAllocator::raw_delete(p);
        break;
      default:
        return -2;
      }
    }
    auto t1 = std::chrono::steady_clock::now();
    if (pass == 1)
      return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
  }
  return -3;
}

extern "C" int pair_sync(void) { return cudaStreamSynchronize(g_stream) == cudaSuccess ? 0 : -1; }
