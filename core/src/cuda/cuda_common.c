/*
 * cuda_common.c — what both CUDA backends share: the pooled events and the
 * event ops, the counters (the device guard and the error mapping are
 * util's adaptalloc/internal/cuda_guard.h, shared with transfer/).
 *
 * Entry points: aa_cuda_device_count, aa_cuda_mem_info, aa_cuda_device_identity,
 * aa_backend_cuda_counts,
 * aa_pinned_device_ptr; internal aa__cuda_* (see cuda_internal.h).
 *
 * Events: every event is created with cudaEventDisableTiming (cheapest to
 * record and query) and lives on a per-device free list; a free in the pool
 * takes one from the list and gives it back after its query says done, so
 * the number created is bounded by the most outstanding at once, never one
 * per free.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

int aa_cuda_device_count(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n < 0 ? 0 : n;
}

int aa_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
  int prev = -1;
  size_t f = 0, t = 0;
  cudaError_t e;
  *free_bytes = 0;
  *total_bytes = 0;
  if (device < 0 || device >= aa_cuda_device_count())
    return AA_ENODEV;
  if (cudaGetDevice(&prev) != cudaSuccess)
    prev = -1;
  e = cudaSetDevice(device);
  if (e == cudaSuccess)
    e = cudaMemGetInfo(&f, &t);
  if (prev >= 0 && prev != device)
    (void)cudaSetDevice(prev);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return AA_EBACKEND;
  }
  *free_bytes = f;
  *total_bytes = t;
  return AA_OK;
}

int aa_cuda_device_identity(int device, aa_cuda_identity *out) {
  struct cudaDeviceProp prop;
  const unsigned char *u;
  cudaError_t e;

  if (out == NULL)
    return AA_EINVAL;
  memset(out, 0, sizeof *out);
  out->version = AA_CUDA_IDENTITY_VERSION;
  out->size = (uint32_t)sizeof *out;
  out->device = device;
  if (device < 0 || device >= aa_cuda_device_count())
    return AA_ENODEV;
  e = cudaGetDeviceProperties(&prop, device);
  if (e != cudaSuccess)
    return aa__cuda_err(e);
  u = (const unsigned char *)prop.uuid.bytes;
  snprintf(out->uuid, sizeof out->uuid,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
           u[13], u[14], u[15]);
  snprintf(out->pci_bus_id, sizeof out->pci_bus_id, "%08X:%02X:%02X.0",
           (unsigned)prop.pciDomainID, (unsigned)prop.pciBusID, (unsigned)prop.pciDeviceID);
  snprintf(out->name, sizeof out->name, "%.95s", prop.name);
  out->total_bytes = (uint64_t)prop.totalGlobalMem;
  return AA_OK;
}

/* ------------------------------------------------------------- event pool */

int aa__cuda_evpool_init(aa__cuda_evpool *p, int device) {
  memset(p, 0, sizeof *p);
  p->device = device;
  if (pthread_mutex_init(&p->lock, NULL) != 0)
    return AA_ENOMEM;
  return AA_OK;
}

static int evpool_take(aa__cuda_evpool *p, aa__cuda_event **out) {
  aa__cuda_event *e = NULL;
  int rc = AA_OK;
  int prev = -1;

  *out = NULL;
  pthread_mutex_lock(&p->lock);
  e = p->free;
  if (e) {
    p->free = e->next;
    p->nfree--;
  }
  pthread_mutex_unlock(&p->lock);
  if (e) {
    e->next = NULL;
    *out = e;
    return AA_OK;
  }

  e = calloc(1, sizeof *e);
  if (!e)
    return AA_ENOMEM;
  rc = aa__cuda_enter(p->device, &prev);
  if (rc != AA_OK)
    goto fail;
  rc = aa__cuda_err(cudaEventCreateWithFlags(&e->ev, cudaEventDisableTiming));
  aa__cuda_leave(p->device, prev);
  if (rc != AA_OK)
    goto fail;
  e->device = p->device;
  pthread_mutex_lock(&p->lock);
  e->all_next = p->all;
  p->all = e;
  p->created++;
  pthread_mutex_unlock(&p->lock);
  *out = e;
  return AA_OK;
fail:
  free(e);
  return rc;
}

void aa__cuda_evpool_put(aa__cuda_evpool *p, aa__cuda_event *e) {
  if (!e)
    return;
  pthread_mutex_lock(&p->lock);
  e->next = p->free;
  p->free = e;
  p->nfree++;
  pthread_mutex_unlock(&p->lock);
}

int aa__cuda_evpool_record(aa__cuda_evpool *p, cudaStream_t stream,
                           aa__cuda_event **out) {
  aa__cuda_event *e = NULL;
  int rc = evpool_take(p, &e);

  *out = NULL;
  if (rc != AA_OK)
    return rc;
  rc = aa__cuda_err(cudaEventRecord(e->ev, stream));
  if (rc != AA_OK) {
    aa__cuda_evpool_put(p, e);
    return rc;
  }
  *out = e;
  return AA_OK;
}

int aa__cuda_event_query(const aa__cuda_event *e) {
  cudaError_t r;
  if (!e)
    return AA_OK;
  r = cudaEventQuery(e->ev);
  if (r == cudaSuccess)
    return AA_OK;
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return AA_EAGAIN;
  }
  return aa__cuda_err(r);
}

void aa__cuda_evpool_fini(aa__cuda_evpool *p) {
  aa__cuda_event *e = p->all;
  while (e) {
    aa__cuda_event *n = e->all_next;
    /* Errors here (cudaErrorCudartUnloading at process exit) are harmless. */
    if (cudaEventDestroy(e->ev) != cudaSuccess)
      (void)cudaGetLastError();
    free(e);
    e = n;
  }
  p->all = NULL;
  p->free = NULL;
  p->nfree = 0;
  pthread_mutex_destroy(&p->lock);
}

/* ------------------------------------------------------------- event ops */

aa__cuda_backend *aa__cuda_from(const aa_backend *b) {
  aa__cuda_backend *cb;
  if (!b || !b->ctx)
    return NULL;
  if (b->kind != AA_BACKEND_DEVICE && b->kind != AA_BACKEND_PINNED)
    return NULL;
  cb = (aa__cuda_backend *)b->ctx;
  if (cb->magic != AA__CUDA_MAGIC)
    return NULL;
  return cb;
}

/* Which event pool serves events recorded on `stream` (sdev: the device of
 * an aa_stream_default handle, else -1). */
static int pool_for_stream(aa__cuda_backend *cb, cudaStream_t stream, int sdev,
                           aa__cuda_evpool **out) {
  int dev = 0;
  *out = NULL;
  if (cb->base.kind == AA_BACKEND_DEVICE) {
    /* another device's default stream: an event of this device cannot be
     * recorded there */
    if (sdev >= 0 && sdev != cb->evpools[0].device)
      return AA_EINVAL;
    *out = &cb->evpools[0];
    return AA_OK;
  }
  /* Pinned memory is used from streams of any device. */
  if (sdev >= 0) {
    dev = sdev;
  } else if (stream == NULL) {
    cudaError_t e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
      return aa__cuda_err(e);
  } else {
    cudaError_t e = cudaStreamGetDevice(stream, &dev);
    if (e != cudaSuccess)
      return aa__cuda_err(e);
  }
  if (dev < 0 || dev >= cb->ndev)
    return AA_ENODEV;
  *out = &cb->evpools[dev];
  return AA_OK;
}

/* Whether `s` is being captured into a CUDA graph. cudaStreamIsCapturing is
 * legal during a capture. */
static bool stream_capturing(cudaStream_t s) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return st != cudaStreamCaptureStatusNone;
}

int aa__cuda_op_event_record(aa_backend *b, aa_stream stream, void **out) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  aa__cuda_evpool *p = NULL;
  aa__cuda_event *e = NULL;
  int prev = -1;
  int sdev;
  cudaStream_t cs = aa__cuda_stream(stream, &sdev);
  int rc;

  *out = NULL;
  if (stream == AA_STREAM_HOST)
    return AA_OK; /* no GPU work to wait for */
  /* A stream under CUDA graph capture: an event recorded there would become
   * a node of the graph, and querying it is illegal. Refuse; the caller keeps
   * the blocks on their own stream until the capture has ended. (The legacy
   * default stream is never captured.) */
  if (cs != NULL && stream_capturing(cs))
    return AA_EAGAIN;
  rc = pool_for_stream(cb, cs, sdev, &p);
  if (rc != AA_OK)
    return rc;
  /* The legacy default stream (NULL, or aa_stream_default(d)) and
   * cudaStreamPerThread mean "of the current device": make the event's
   * device current so that a device-1 pool used from a thread on device 0
   * records on device 1's stream. */
  rc = aa__cuda_enter(p->device, &prev);
  if (rc != AA_OK)
    return rc;
  rc = aa__cuda_evpool_record(p, cs, &e);
  aa__cuda_leave(p->device, prev);
  if (rc != AA_OK)
    return rc;
  atomic_fetch_add_explicit(&cb->events_recorded, 1, memory_order_relaxed);
  *out = e;
  return AA_OK;
}

int aa__cuda_op_stream_query(aa_backend *b, aa_stream stream) {
  cudaError_t e;
  int sdev, prev = -1, rc;
  cudaStream_t cs = aa__cuda_stream(stream, &sdev);
  (void)b;
  if (stream == AA_STREAM_HOST)
    return AA_OK; /* no GPU work */
  /* querying a capturing stream is illegal (and ends the capture): the
   * caller records an event instead, which is refused the same way */
  if (cs != NULL && stream_capturing(cs))
    return AA_EAGAIN;
  /* The legacy default stream (NULL) is the current device's, as for
   * aa__cuda_op_event_record; aa_stream_default(d) is device d's. */
  rc = aa__cuda_enter_for(sdev, &prev);
  if (rc != AA_OK)
    return rc;
  e = cudaStreamQuery(cs);
  aa__cuda_leave(sdev, prev);
  if (e == cudaSuccess)
    return AA_OK;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return AA_EAGAIN;
  }
  return aa__cuda_err(e);
}

int aa__cuda_op_stream_wait(aa_backend *b, aa_stream stream, void *event) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  const aa__cuda_event *e = (const aa__cuda_event *)event;
  int prev = -1;
  int sdev, dev;
  cudaStream_t cs = aa__cuda_stream(stream, &sdev);
  int rc;
  if (e == NULL)
    return AA_EINVAL;
  if (stream == AA_STREAM_HOST)
    return AA_EAGAIN; /* the host has no queue to order: it would block */
  /* Under capture a wait on an event recorded outside the graph would be a
   * dependency the graph cannot hold: refuse, as for event_record. */
  if (cs != NULL && stream_capturing(cs))
    return AA_EAGAIN;
  /* The legacy default stream (NULL) is the current device's: a device
   * pool's device made current, as aa__cuda_op_event_record does; pinned
   * memory is used from any device's streams, so the caller's device there
   * (the event may be another device's: a wait across devices is legal),
   * and for aa_stream_default(d) device d. */
  if (cb->base.kind == AA_BACKEND_PINNED) {
    dev = sdev;
  } else {
    if (sdev >= 0 && sdev != cb->evpools[0].device)
      return AA_EINVAL; /* another device's default stream */
    dev = cb->evpools[0].device;
  }
  rc = aa__cuda_enter_for(dev, &prev);
  if (rc != AA_OK)
    return rc;
  rc = aa__cuda_err(cudaStreamWaitEvent(cs, e->ev, 0));
  aa__cuda_leave(dev, prev);
  return rc;
}

int aa__cuda_op_event_query(aa_backend *b, void *event) {
  (void)b;
  return aa__cuda_event_query((const aa__cuda_event *)event);
}

void aa__cuda_op_event_release(aa_backend *b, void *event) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  aa__cuda_event *e = (aa__cuda_event *)event;
  if (!e)
    return;
  if (cb->base.kind == AA_BACKEND_DEVICE)
    aa__cuda_evpool_put(&cb->evpools[0], e);
  else if (e->device >= 0 && e->device < cb->ndev)
    aa__cuda_evpool_put(&cb->evpools[e->device], e);
}

/* ------------------------------------------------------------- counters */

int aa_backend_cuda_counts(const aa_backend *b, aa_cuda_counts *out) {
  aa__cuda_backend *cb = aa__cuda_from(b);
  int i;
  if (!out)
    return AA_EINVAL;
  memset(out, 0, sizeof *out);
  out->version = AA_CUDA_COUNTS_VERSION;
  out->size = (uint32_t)sizeof *out;
  if (!cb)
    return AA_EINVAL;
  out->allocs = atomic_load(&cb->allocs);
  out->frees = atomic_load(&cb->frees);
  out->failures = atomic_load(&cb->failures);
  out->ooms = atomic_load(&cb->ooms);
  out->bytes_mapped = atomic_load(&cb->bytes_mapped);
  out->events_recorded = atomic_load(&cb->events_recorded);
  for (i = 0; i < cb->ndev; i++) {
    aa__cuda_evpool *p = &cb->evpools[i];
    pthread_mutex_lock(&p->lock);
    out->events_created += p->created;
    out->events_free += p->nfree;
    pthread_mutex_unlock(&p->lock);
  }
  return AA_OK;
}

int aa_pinned_device_ptr(const void *host, void **dev_out) {
  struct cudaPointerAttributes attr;
  cudaError_t e;
  void *d = NULL;

  if (dev_out)
    *dev_out = NULL;
  if (!host || !dev_out)
    return AA_EINVAL;
  memset(&attr, 0, sizeof attr);
  e = cudaPointerGetAttributes(&attr, host);
  if (e != cudaSuccess)
    return aa__cuda_err(e);
  if (attr.type != cudaMemoryTypeHost)
    return AA_EINVAL;
  /* For an interior pointer, cudaHostGetDevicePointer wants the exact
   * pointer cudaHostAlloc returned only on old drivers; attr.devicePointer
   * is already offset correctly. Prefer it, fall back to the call. */
  d = attr.devicePointer;
  if (!d) {
    e = cudaHostGetDevicePointer(&d, (void *)(uintptr_t)host, 0);
    if (e != cudaSuccess)
      return aa__cuda_err(e);
  }
  *dev_out = d;
  return AA_OK;
}

int aa__cuda_count_alloc(aa__cuda_backend *cb, int rc, size_t size) {
  if (rc != AA_OK) {
    atomic_fetch_add_explicit(&cb->failures, 1, memory_order_relaxed);
    if (rc == AA_ENOMEM)
      atomic_fetch_add_explicit(&cb->ooms, 1, memory_order_relaxed);
    return rc;
  }
  atomic_fetch_add_explicit(&cb->allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&cb->bytes_mapped, size, memory_order_relaxed);
  return AA_OK;
}
