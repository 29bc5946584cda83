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
 * Pools are the runtime's (aa_runtime_pool(AA_BACKEND_DEVICE, device)), which
 * starts the store, the policy loop and the HTTP server on first use. The hot
 * path is one relaxed atomic load of the cached pool pointer and aa_alloc /
 * aa_free; no lock and no CUDA call of ours.
 *
 * Regions (adaptalloc.torch.region): a thread-local region id sends the
 * thread's allocations to that region's pool on the device
 * (aa_runtime_region_pool). free_fn gets only the pointer and the device, so
 * once a device has region pools a free whose block the device pool does not
 * hold looks it up in them (one page-map lookup per pool); before that the
 * free path is as it was.
 *
 * PyTorch does not check the pointer alloc_fn returns: NULL (out of memory
 * after the pool released its cache and retried) reaches torch as a tensor
 * without storage. We print one line to stderr for each such failure so the
 * cause is visible; `ooms` in /stats counts them.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>

#include "adaptalloc/core.h"
#include "adaptalloc/torch_plugin.h"
#include "adaptalloc/runtime.h"
#include "stats_map.h"

#define AA_TORCH_MAX_DEVICES 64

static _Atomic(aa_pool *) g_pools[AA_TORCH_MAX_DEVICES];
static _Atomic(aa_pool *) g_region_pools[AA_TORCH_MAX_DEVICES][AA_RUNTIME_MAX_REGIONS];
static atomic_int g_nregion_pools[AA_TORCH_MAX_DEVICES]; /* made so far, per device */
static _Thread_local int t_region = -1;                  /* aa_runtime_region_id, -1: none */

static aa_pool *pool_for(int device) {
  aa_pool *p;
  if (device < 0 || device >= AA_TORCH_MAX_DEVICES)
    return NULL;
  p = atomic_load_explicit(&g_pools[device], memory_order_acquire);
  if (p)
    return p;
  /* The runtime creates each pool once (it holds its own lock); racing
   * threads get the same pointer. */
  p = aa_runtime_pool(AA_BACKEND_DEVICE, device);
  if (p)
    atomic_store_explicit(&g_pools[device], p, memory_order_release);
  return p;
}

/* The pool already made for a device, without creating one. */
static aa_pool *pool_if_made(int device) {
  if (device < 0 || device >= AA_TORCH_MAX_DEVICES)
    return NULL;
  return atomic_load_explicit(&g_pools[device], memory_order_acquire);
}

/* Region id's pool on the device, made on first use (the device's own pool
 * exists by then). */
static aa_pool *region_pool_for(int device, int id) {
  aa_pool *p = atomic_load_explicit(&g_region_pools[device][id], memory_order_acquire);
  aa_pool *none = NULL;
  if (p)
    return p;
  p = aa_runtime_region_pool(id, AA_BACKEND_DEVICE, device);
  if (p && atomic_compare_exchange_strong(&g_region_pools[device][id], &none, p))
    atomic_fetch_add(&g_nregion_pools[device], 1);
  return p;
}

/* The pool that holds ptr on the device: its own pool, or a region's. */
static aa_pool *owner_of(int device, const void *ptr) {
  aa_pool *p = pool_if_made(device);
  int i;
  if (!p || atomic_load_explicit(&g_nregion_pools[device], memory_order_acquire) == 0 ||
      aa_block_size(p, ptr) != 0)
    return p;
  for (i = 0; i < AA_RUNTIME_MAX_REGIONS; i++) {
    aa_pool *r = atomic_load_explicit(&g_region_pools[device][i], memory_order_acquire);
    if (r && aa_block_size(r, ptr) != 0)
      return r;
  }
  return p; /* not ours: aa_free reports it */
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
    p = region_pool_for(device, t_region);
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
  p = owner_of(device, ptr);
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
      aa_pool *r = atomic_load_explicit(&g_region_pools[d][i], memory_order_acquire);
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
  int d;
  if (!ptr)
    return;
  for (d = 0; d < AA_TORCH_MAX_DEVICES; d++) {
    aa_pool *p = owner_of(d, ptr);
    if (p && aa_block_size(p, ptr) != 0) {
      (void)aa_record_stream(p, ptr, stream);
      return;
    }
  }
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
    aa_pool *r = atomic_load_explicit(&g_region_pools[device][i], memory_order_acquire);
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
