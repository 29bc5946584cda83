/*
 * cuda_pinned.c — the CUDA pinned (page-locked) host-memory backend.
 *
 * Entry point: aa_backend_pinned_new(&b); destroyed by aa_backend_destroy.
 *
 * Each backend alloc is one arena from cudaHostAlloc(portable | mapped): the
 * pool above carves it into blocks, so cudaHostAlloc (about a millisecond a
 * call) is paid per slab or large segment, never per request. Portable makes
 * the memory pinned for every device's context; mapped gives it a device
 * address for zero-copy reads (aa_pinned_device_ptr).
 *
 * Events: pinned memory is used by copies on streams of any device, so there
 * is one event pool per device and an event is recorded with the pool of the
 * stream's own device (cudaStreamGetDevice). AA_STREAM_HOST records nothing.
 * Before it records one, the pool asks whether the stream is idle
 * (cudaStreamQuery, stream_query): a staging buffer put back on a stream
 * with no work left is reused with one query and no event.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

static int pin_alloc(aa_backend *b, size_t size, void **out) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  void *p = NULL;
  int rc;

  *out = NULL;
  if (size == 0)
    return AA_EINVAL;
  rc = aa__cuda_err(cudaHostAlloc(&p, size,
                                  cudaHostAllocPortable | cudaHostAllocMapped));
  if (aa__cuda_count_alloc(cb, rc, size) != AA_OK)
    return rc;
  *out = p;
  return AA_OK;
}

static void pin_free(aa_backend *b, void *ptr, size_t size) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  if (!ptr)
    return;
  /* cudaFreeHost synchronises the device(s) using it. */
  if (cudaFreeHost(ptr) != cudaSuccess)
    (void)cudaGetLastError();
  atomic_fetch_add_explicit(&cb->frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&cb->bytes_mapped, size, memory_order_relaxed);
}

static int pin_synchronize(aa_backend *b) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  int i;
  int rc = AA_OK;
  for (i = 0; i < cb->ndev; i++) {
    int prev = -1;
    int r = aa__cuda_enter(i, &prev);
    if (r == AA_OK) {
      r = aa__cuda_err(cudaDeviceSynchronize());
      aa__cuda_leave(i, prev);
    }
    if (r != AA_OK && rc == AA_OK)
      rc = r;
  }
  return rc;
}

static void pin_destroy(aa_backend *b) {
  aa__cuda_backend *cb;
  int i;
  if (!b)
    return;
  cb = (aa__cuda_backend *)b->ctx;
  for (i = 0; i < cb->ndev; i++)
    aa__cuda_evpool_fini(&cb->evpools[i]);
  pthread_mutex_destroy(&cb->mis_lock);
  cb->magic = 0;
  free(cb);
}

static const aa_backend_ops pin_ops = {
    .alloc = pin_alloc,
    .free = pin_free,
    .event_record = aa__cuda_op_event_record,
    .event_query = aa__cuda_op_event_query,
    .event_release = aa__cuda_op_event_release,
    /* no stream_wait: the host reads and writes pinned memory directly (a
     * buffer filled before its copy is queued, Python's buffer view), so a
     * block must not be handed out while a copy or kernel on another stream
     * may still use it: a stream ordered after that work does not order
     * the host (large_take.c wait_fit) */
    .synchronize = pin_synchronize,
    .destroy = pin_destroy,
    .stream_query = aa__cuda_op_stream_query,
};

int aa_backend_pinned_new(aa_backend **out) {
  aa__cuda_backend *cb = NULL;
  int n, i;
  int rc = AA_OK;

  if (!out)
    return AA_EINVAL;
  *out = NULL;
  n = aa_cuda_device_count();
  if (n <= 0)
    return AA_ENODEV;
  if (n > AA_MAX_DEVICES)
    n = AA_MAX_DEVICES;
  cb = calloc(1, sizeof *cb);
  if (!cb)
    return AA_ENOMEM;
  cb->magic = AA__CUDA_MAGIC;
  for (i = 0; i < n; i++) {
    rc = aa__cuda_evpool_init(&cb->evpools[i], i);
    if (rc != AA_OK)
      goto fail_ev;
    cb->ndev = i + 1;
  }
  if (pthread_mutex_init(&cb->mis_lock, NULL) != 0) {
    rc = AA_ENOMEM;
    goto fail_ev;
  }
  cb->base.ops = &pin_ops;
  cb->base.ctx = cb;
  cb->base.kind = AA_BACKEND_PINNED;
  cb->base.device = -1;
  cb->base.name = "pinned";
  *out = &cb->base;
  return AA_OK;

fail_ev:
  for (i = 0; i < cb->ndev; i++)
    aa__cuda_evpool_fini(&cb->evpools[i]);
  free(cb);
  return rc;
}
