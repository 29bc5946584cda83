/*
 * cuda_device.c — the CUDA device-memory backend: slabs and large segments
 * from cudaMalloc, stream events from the pooled event list, synchronize =
 * cudaDeviceSynchronize on the backend's device.
 *
 * Entry point: aa_backend_cuda_new(device, &b); destroyed by
 * aa_backend_destroy(b) through ops->destroy.
 *
 * Every call that touches CUDA state makes the backend's device current and
 * restores the caller's device afterwards, so a pool for device 1 used from a
 * thread whose current device is 0 neither fails nor changes that thread.
 * cudaErrorMemoryAllocation becomes AA_ENOMEM with the runtime's last error
 * cleared (PyTorch checks cudaGetLastError after kernels and would otherwise
 * report our handled OOM as its own failure).
 *
 * cudaFree is used, not cudaFreeAsync: the pool gives memory back only when
 * it holds no live block, but kernels on the freeing stream may still read
 * it; cudaFree's implicit device synchronisation is what makes that safe.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

/* cudaMalloc returned memory below the 4 KiB alignment the core needs (seen
 * only for small sizes, which the pool does not ask for by default): make a
 * larger allocation and hand out its first aligned address. */
static int alloc_aligned_slow(aa__cuda_backend *cb, size_t size, void **out) {
  void *raw = NULL;
  uintptr_t a;
  int rc = aa__cuda_err(cudaMalloc(&raw, size + 4096));
  if (rc != AA_OK)
    return rc;
  a = ((uintptr_t)raw + 4095u) & ~(uintptr_t)4095u;
  pthread_mutex_lock(&cb->mis_lock);
  if (cb->nmis == cb->capmis) {
    size_t ncap = cb->capmis ? cb->capmis * 2 : 16;
    struct aa__cuda_misaligned *n = realloc(cb->mis, ncap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&cb->mis_lock);
      if (cudaFree(raw) != cudaSuccess)
        (void)cudaGetLastError();
      return AA_ENOMEM;
    }
    cb->mis = n;
    cb->capmis = ncap;
  }
  cb->mis[cb->nmis].aligned = (void *)a;
  cb->mis[cb->nmis].raw = raw;
  cb->nmis++;
  pthread_mutex_unlock(&cb->mis_lock);
  *out = (void *)a;
  return AA_OK;
}

/* The raw pointer behind an aligned one made by alloc_aligned_slow (removed
 * from the table), or ptr itself. */
static void *mis_take(aa__cuda_backend *cb, void *ptr) {
  void *raw = ptr;
  size_t i;
  /* Backend frees are rare (a slab or segment going back): a lock is fine. */
  pthread_mutex_lock(&cb->mis_lock);
  for (i = 0; i < cb->nmis; i++) {
    if (cb->mis[i].aligned == ptr) {
      raw = cb->mis[i].raw;
      cb->mis[i] = cb->mis[cb->nmis - 1];
      cb->nmis--;
      break;
    }
  }
  pthread_mutex_unlock(&cb->mis_lock);
  return raw;
}

static int dev_alloc(aa_backend *b, size_t size, void **out) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  void *p = NULL;
  int prev = -1;
  int rc;

  *out = NULL;
  if (size == 0)
    return AA_EINVAL;
  rc = aa__cuda_enter(b->device, &prev);
  if (rc != AA_OK)
    goto done;
  rc = aa__cuda_err(cudaMalloc(&p, size));
  if (rc == AA_OK && ((uintptr_t)p & 4095u) != 0) {
    if (cudaFree(p) != cudaSuccess)
      (void)cudaGetLastError();
    p = NULL;
    rc = alloc_aligned_slow(cb, size, &p);
  }
  aa__cuda_leave(b->device, prev);
done:
  if (rc != AA_OK) {
    atomic_fetch_add_explicit(&cb->failures, 1, memory_order_relaxed);
    if (rc == AA_ENOMEM)
      atomic_fetch_add_explicit(&cb->ooms, 1, memory_order_relaxed);
    return rc;
  }
  atomic_fetch_add_explicit(&cb->allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&cb->bytes_mapped, size, memory_order_relaxed);
  *out = p;
  return AA_OK;
}

static void dev_free(aa_backend *b, void *ptr, size_t size) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  int prev = -1;
  if (!ptr)
    return;
  ptr = mis_take(cb, ptr);
  if (aa__cuda_enter(b->device, &prev) == AA_OK) {
    /* cudaErrorCudartUnloading at exit is harmless; clear any error. */
    if (cudaFree(ptr) != cudaSuccess)
      (void)cudaGetLastError();
    aa__cuda_leave(b->device, prev);
  }
  atomic_fetch_add_explicit(&cb->frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&cb->bytes_mapped, size, memory_order_relaxed);
}

static int dev_synchronize(aa_backend *b) {
  int prev = -1;
  int rc = aa__cuda_enter(b->device, &prev);
  if (rc != AA_OK)
    return rc;
  rc = aa__cuda_err(cudaDeviceSynchronize());
  aa__cuda_leave(b->device, prev);
  return rc;
}

static void dev_destroy(aa_backend *b) {
  aa__cuda_backend *cb;
  size_t i;
  if (!b)
    return;
  cb = (aa__cuda_backend *)b->ctx;
  aa__cuda_evpool_fini(&cb->evpools[0]);
  for (i = 0; i < cb->nmis; i++) {
    if (cudaFree(cb->mis[i].raw) != cudaSuccess)
      (void)cudaGetLastError();
  }
  free(cb->mis);
  pthread_mutex_destroy(&cb->mis_lock);
  cb->magic = 0;
  free(cb);
}

static const aa_backend_ops dev_ops = {
    .alloc = dev_alloc,
    .free = dev_free,
    .event_record = aa__cuda_op_event_record,
    .event_query = aa__cuda_op_event_query,
    .event_release = aa__cuda_op_event_release,
    .synchronize = dev_synchronize,
    .destroy = dev_destroy,
};

int aa_backend_cuda_new(int device, aa_backend **out) {
  aa__cuda_backend *cb = NULL;
  int n;
  int rc = AA_OK;

  if (!out)
    return AA_EINVAL;
  *out = NULL;
  if (device < 0 || device >= AA__CUDA_MAX_DEVICES)
    return AA_EINVAL;
  n = aa_cuda_device_count();
  if (device >= n)
    return AA_ENODEV;
  cb = calloc(1, sizeof *cb);
  if (!cb)
    return AA_ENOMEM;
  cb->magic = AA__CUDA_MAGIC;
  cb->ndev = 1;
  rc = aa__cuda_evpool_init(&cb->evpools[0], device);
  if (rc != AA_OK)
    goto fail_cb;
  if (pthread_mutex_init(&cb->mis_lock, NULL) != 0) {
    rc = AA_ENOMEM;
    goto fail_ev;
  }
  cb->base.ops = &dev_ops;
  cb->base.ctx = cb;
  cb->base.kind = AA_BACKEND_DEVICE;
  cb->base.device = device;
  cb->base.name = "cuda";
  *out = &cb->base;
  return AA_OK;

fail_ev:
  aa__cuda_evpool_fini(&cb->evpools[0]);
fail_cb:
  free(cb);
  return rc;
}
