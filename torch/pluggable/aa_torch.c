/*
 * aa_torch.c — libadaptalloc_torch.so, the PyTorch plugin: the C functions
 * torch.cuda.memory.CUDAPluggableAllocator calls, and its optional hooks.
 *
 * Entry points (declared in adaptalloc/torch_plugin.h, torch/include/):
 *   aa_torch_alloc / aa_torch_free      alloc_fn / free_fn
 *   aa_torch_init                       set_init_fn            void(int)
 *   aa_torch_reset                      set_reset_fn           void(void)
 *   aa_torch_memory_fraction            set_memory_fraction_fn void(double,int)
 *   aa_torch_record_stream              set_record_stream_fn   void(void*,stream)
 *   aa_torch_set_limit, aa_torch_stat, aa_torch_stats_json   for ctypes users
 *     (aa_torch_stat: a torch.cuda.memory_stats() figure by its key, or a
 *     short name, through the mapping the native allocator uses too,
 *     torch/src/stats_map.c)
 *   aa_torch_set_region, aa_torch_region   the calling thread's region (ctypes)
 *
 * An adapter over the device layer (torch/src/devices.h, aa__dl_default):
 * the device's pool (the runtime's aa_runtime_pool(AA_BACKEND_DEVICE,
 * device), which starts the store, the policy loop and the HTTP server on
 * first use), its region pools, and the pool that holds a pointer. The hot
 * path is the layer's acquire load of the pool and aa_alloc / aa_free; no
 * lock and no CUDA call of ours.
 *
 * Regions (adaptalloc.torch.region): a thread-local region id sends the
 * thread's allocations to that region's pool on the device
 * (aa__dl_region_pool). free_fn gets only the pointer and the device:
 * aa__dl_free_pool answers with the device pool and no lookup while the
 * device has no other pool, and once it has, with the pool that holds the
 * pointer (the layer's owner table: one probe and one page-map lookup).
 *
 * PyTorch does not check the pointer alloc_fn returns: NULL (out of memory
 * after the pool released its cache and retried) reaches torch as a tensor
 * without storage. We print one line to stderr for each such failure so the
 * cause is visible; `ooms` in /stats counts them.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "adaptalloc/core.h"
#include "adaptalloc/torch_plugin.h"
#include "adaptalloc/runtime.h"
#include "torch_internal.h" /* devices.h, stats_map.h */

#define AA_TORCH_MAX_DEVICES AA__DL_MAX_DEVICES

static _Thread_local int t_region = -1; /* aa_runtime_region_id, -1: none */

static aa_pool *pool_for(int device) { return aa__dl_pool(aa__dl_default(), device); }

/* The pool already made for a device, without creating one. */
static aa_pool *pool_if_made(int device) {
  return aa__dl_pool_if_made(aa__dl_default(), device);
}

void *aa_torch_alloc(size_t size, int device, aa_stream stream) {
  aa_pool *p = pool_for(device);
  void *ptr;
  if (!p) {
    fprintf(stderr, "adaptalloc: no pool for CUDA device %d (no GPU or no CUDA)\n",
            device);
    return NULL;
  }
  if (t_region >= 0) {
    p = aa__dl_region_pool(aa__dl_default(), device, t_region);
    if (!p) {
      fprintf(stderr, "adaptalloc: no pool for region %s on CUDA device %d\n",
              aa_runtime_region_name(t_region), device);
      return NULL;
    }
  }
  ptr = aa_alloc(p, size, stream);
  if (!ptr)
    fprintf(stderr, "adaptalloc: out of memory on device %d allocating %zu bytes (pool %s)\n",
            device, size, aa_pool_name(p));
  return ptr;
}

void aa_torch_free(void *ptr, size_t size, int device, aa_stream stream) {
  aa_pool *p;
  if (!ptr || device < 0 || device >= AA_TORCH_MAX_DEVICES)
    return;
  p = aa__dl_free_pool(aa__dl_default(), device, ptr);
  if (p)
    (void)aa_free(p, ptr, size, stream);
}

int aa_torch_region(void) { return t_region; }

int aa_torch_set_region(int id, int *prev) {
  if (id != -1 && aa_runtime_region_name(id) == NULL)
    return AA_EINVAL;
  if (prev)
    *prev = t_region;
  t_region = id;
  return AA_OK;
}

void aa_torch_init(int device_count) {
  (void)device_count; /* pools are made lazily, per device, on first use */
  (void)aa_runtime_init(NULL);
}

void aa_torch_reset(void) {
  int d;
  for (d = 0; d < AA_TORCH_MAX_DEVICES; d++) {
    aa_pool *p = pool_if_made(d);
    if (p)
      (void)aa_pool_release(p);
    for (int i = 0; p && i < AA_RUNTIME_MAX_REGIONS; i++) {
      aa_pool *r = aa__dl_region_pool_if_made(aa__dl_default(), d, i);
      if (r)
        (void)aa_pool_release(r);
    }
  }
}

/* The user's cap (memory fraction, aa_torch_set_limit): an override of the
 * pool's settings through the runtime's one path, so that no later policy
 * change (PATCH, the loop) drops it; a pool the runtime does not run gets
 * the limit directly. */
static void cap_pool(aa_pool *p, size_t bytes) {
  if (aa_runtime_pool_cap(p, bytes, "torch") != AA_OK)
    aa_pool_set_limit(p, bytes);
}

void aa_torch_memory_fraction(double fraction, int device) {
  aa_pool *p;
  size_t free_b = 0, total_b = 0;
  int prev = -1;
  cudaError_t e;

  if (!(fraction >= 0.0 && fraction <= 1.0)) {
    fprintf(stderr, "adaptalloc: memory fraction %g out of [0, 1], ignored\n",
            fraction);
    return;
  }
  p = pool_for(device);
  if (!p)
    return;
  if (cudaGetDevice(&prev) != cudaSuccess) {
    (void)cudaGetLastError();
    prev = -1;
  }
  if (prev != device && cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  e = cudaMemGetInfo(&free_b, &total_b);
  if (e != cudaSuccess)
    (void)cudaGetLastError();
  if (prev >= 0 && prev != device && cudaSetDevice(prev) != cudaSuccess)
    (void)cudaGetLastError();
  if (e != cudaSuccess)
    return;
  /* fraction 1.0 means "the whole card", which is no cap at all. */
  cap_pool(p, fraction >= 1.0 ? 0 : (size_t)(fraction * (double)total_b));
}

void aa_torch_record_stream(void *ptr, aa_stream stream) {
  aa_pool *p;
  if (!ptr)
    return;
  /* the pool of whichever device holds it; a pointer that is no live block
   * of it is refused by aa_record_stream (ignored, as before) */
  p = aa__dl_owner(aa__dl_default(), ptr, NULL);
  if (p)
    (void)aa_record_stream(p, ptr, stream);
}

int aa_torch_set_limit(int device, size_t bytes) {
  aa_pool *p = pool_for(device);
  if (!p)
    return AA_ENODEV;
  cap_pool(p, bytes);
  return AA_OK;
}

/* Figures by name through the one mapping (torch/src/stats_map.c), over the
 * device's pools: its own and its regions', as torch.cuda.memory_stats()
 * shows them under the native allocator. */
uint64_t aa_torch_stat(int device, const char *name) {
  aa__torch_sums own, t;
  aa__torch_stats s;
  aa_pool *p = pool_if_made(device);
  int64_t v = 0;
  int i;
  if (!p || !name)
    return 0;
  memset(&own, 0, sizeof own);
  if (aa__torch_sums_add_pool(&own, p) != AA_OK)
    return 0;
  /* memory_stats' figures: the device pool and its regions' pools, as the
   * native allocator counts them (a region whose snapshot fails is left
   * out); the names PyTorch has no figure for (limit, classes, pending,
   * invalid_frees) stay the device pool's own, as aa_torch_set_limit sets
   * that pool's limit */
  t = own;
  for (i = 0; i < AA_RUNTIME_MAX_REGIONS; i++) {
    aa_pool *r = aa__dl_region_pool_if_made(aa__dl_default(), device, i);
    if (r)
      (void)aa__torch_sums_add_pool(&t, r);
  }
  aa__torch_stats_map(&t, NULL, &s);
  if (aa__torch_stat_named(&s, &own, name, &v) != AA_OK)
    return 0;
  return (uint64_t)v;
}

static aa_pool_stats g_stats_buf; /* ~20 KiB: static, guarded by g_stats_mu */
static pthread_mutex_t g_stats_mu = PTHREAD_MUTEX_INITIALIZER;

static void stats_lock(void) { pthread_mutex_lock(&g_stats_mu); }
static void stats_unlock(void) { pthread_mutex_unlock(&g_stats_mu); }

size_t aa_torch_stats_json(int device, char *buf, size_t cap) {
  aa_pool *p = pool_if_made(device);
  size_t n = 0;
  if (!p)
    return 0;
  stats_lock();
  if (aa_pool_stats_get(p, &g_stats_buf) == AA_OK)
    n = aa_pool_stats_json(&g_stats_buf, buf, cap);
  stats_unlock();
  return n;
}
