/*
 * cuda_managed.c — the CUDA managed-memory (unified memory) backend: slabs
 * and large segments from cudaMallocManaged, advised as configured
 * (cudaMemAdvise), prefetched on demand (aa_managed_prefetch), with the
 * safety cap checked before every reservation, and where its bytes are for
 * the pool's stats (the residency op).
 *
 * Entry points: aa_backend_managed_new (destroyed by aa_backend_destroy),
 * aa_managed_prefetch, aa_managed_advise, aa_managed_range_info,
 * aa_managed_last_refusal, aa_backend_is_managed.
 *
 * The backend is a CUDA device backend to everything else (kind
 * AA_BACKEND_DEVICE, the device's event pool, aa_backend_cuda_counts):
 * blocks are used by kernels on the device's streams like device memory.
 * It keeps the list of its reservations (a handful: slabs and segments) so
 * that the cap knows what it holds, prefetch can check a range is its own,
 * and residency can ask the driver about each.
 *
 * The cap (managed_cap.c has the arithmetic): reservations are made one at
 * a time under the backend's lock, each after cudaMemGetInfo on its device,
 * so two threads cannot both fit in the same free memory.
 *
 * CUDA 13 changed cudaMemAdvise and cudaMemPrefetchAsync to take a
 * cudaMemLocation (and prefetch a flags word); CUDART_VERSION picks the form.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "managed_cap.h"

/* Residency queries: each reservation is resolved down to 1/64 of itself
 * (at least 2 MiB), and one call asks the driver at most this many times;
 * what is left is counted unknown. */
#define MG_MIN_GRAIN ((size_t)2 << 20)
#define MG_QUERY_BUDGET 1024u

typedef struct mg_range {
  uintptr_t base;
  size_t size;
} mg_range;

typedef struct mg_backend {
  aa__cuda_backend cb; /* first: the event ops and counters see a CUDA backend */
  aa_managed_config cfg;
  pthread_mutex_t mu; /* ranges, refusal; held across a reservation */
  mg_range *ranges;
  size_t n, cap;
  uint64_t held;
  aa_managed_refusal refusal;
} mg_backend;

static const aa_backend_ops mg_ops;

bool aa_backend_is_managed(const aa_backend *b) {
  return b != NULL && b->ops == &mg_ops && b->ctx != NULL;
}

/* ------------------------------------------------------ driver calls */

/* A device ordinal, or cudaCpuDeviceId, as the toolkit's advise and
 * prefetch want it. */
#if CUDART_VERSION >= 13000
static struct cudaMemLocation mg_loc(int dev) {
  struct cudaMemLocation loc;
  memset(&loc, 0, sizeof loc);
  if (dev == cudaCpuDeviceId) {
    loc.type = cudaMemLocationTypeHost;
    loc.id = 0;
  } else {
    loc.type = cudaMemLocationTypeDevice;
    loc.id = dev;
  }
  return loc;
}
#endif

static cudaError_t mg_advise1(const void *p, size_t n, enum cudaMemoryAdvise a,
                              int dev) {
#if CUDART_VERSION >= 13000
  return cudaMemAdvise(p, n, a, mg_loc(dev));
#else
  return cudaMemAdvise(p, n, a, dev);
#endif
}

static cudaError_t mg_prefetch1(const void *p, size_t n, int dev,
                                cudaStream_t s) {
#if CUDART_VERSION >= 13000
  return cudaMemPrefetchAsync(p, n, mg_loc(dev), 0, s);
#else
  return cudaMemPrefetchAsync(p, n, dev, s);
#endif
}

static int loc_ordinal(aa_managed_location loc, int device) {
  return loc == AA_MANAGED_LOC_HOST ? cudaCpuDeviceId : device;
}

/* The advice of cfg for [p, p + n); NONE and false leave advice alone. */
static int mg_apply_advice(const aa_managed_config *cfg, const void *p,
                           size_t n) {
  int rc = AA_OK;
  if (cfg->preferred_location != AA_MANAGED_LOC_NONE)
    rc = aa__cuda_err(mg_advise1(p, n, cudaMemAdviseSetPreferredLocation,
                                 loc_ordinal(cfg->preferred_location, cfg->device)));
  if (rc == AA_OK && cfg->accessed_by != AA_MANAGED_LOC_NONE)
    rc = aa__cuda_err(mg_advise1(p, n, cudaMemAdviseSetAccessedBy,
                                 loc_ordinal(cfg->accessed_by, cfg->device)));
  if (rc == AA_OK && cfg->read_mostly)
    rc = aa__cuda_err(mg_advise1(p, n, cudaMemAdviseSetReadMostly, cfg->device));
  return rc;
}

static int config_check(const aa_managed_config *cfg) {
  if (cfg == NULL || cfg->version != AA_MANAGED_CONFIG_VERSION ||
      cfg->size != sizeof *cfg)
    return AA_EINVAL;
  if (cfg->device < 0 || cfg->device >= AA_MAX_DEVICES)
    return AA_EINVAL;
  if ((unsigned)cfg->preferred_location > AA_MANAGED_LOC_HOST ||
      (unsigned)cfg->accessed_by > AA_MANAGED_LOC_HOST)
    return AA_EINVAL;
  return AA_OK;
}

/* Whether [p, p + n) is managed memory (both ends). */
static bool is_managed_ptr(const void *p, size_t n) {
  struct cudaPointerAttributes a;
  const char *last = (const char *)p + n - 1;
  memset(&a, 0, sizeof a);
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (a.type != cudaMemoryTypeManaged)
    return false;
  memset(&a, 0, sizeof a);
  if (cudaPointerGetAttributes(&a, last) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeManaged;
}

/* ------------------------------------------------------ residency */

typedef struct mg_where {
  aa_backend_residency r;
  uint64_t prefetched_device; /* last prefetched to the device (the cap's) */
  unsigned budget;
} mg_where;

static int range_attr(const void *p, size_t n, enum cudaMemRangeAttribute a) {
  int v = cudaInvalidDeviceId;
  if (cudaMemRangeGetAttribute(&v, sizeof v, a, p, n) != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaInvalidDeviceId;
  }
  return v;
}

/* Counts [base, base + n) into w: by its last prefetch location when the
 * whole range has one; split in two while larger than grain; at the grain,
 * by its preferred location (never prefetched, or mixed). */
static void where_range(mg_where *w, int device, uintptr_t base, size_t n,
                        size_t grain) {
  const void *p = (const void *)base;
  int loc;
  if (w->budget == 0) {
    w->r.unknown_bytes += n;
    return;
  }
  w->budget--;
  loc = range_attr(p, n, cudaMemRangeAttributeLastPrefetchLocation);
  if (loc == device) {
    w->r.device_bytes += n;
    w->prefetched_device += n;
    return;
  }
  if (loc == cudaCpuDeviceId) {
    w->r.host_bytes += n;
    return;
  }
  if (n > grain) {
    size_t half = (n / 2 + grain - 1) / grain * grain;
    if (half >= n)
      half = n - grain;
    where_range(w, device, base, half, grain);
    where_range(w, device, base + half, n - half, grain);
    return;
  }
  if (w->budget == 0) {
    w->r.unknown_bytes += n;
    return;
  }
  w->budget--;
  loc = range_attr(p, n, cudaMemRangeAttributePreferredLocation);
  if (loc == device)
    w->r.device_bytes += n;
  else if (loc == cudaCpuDeviceId)
    w->r.host_bytes += n;
  else
    w->r.unknown_bytes += n;
}

/* Over every reservation; mg->mu held. */
static void where_all_locked(mg_backend *mg, mg_where *w) {
  memset(w, 0, sizeof *w);
  w->budget = MG_QUERY_BUDGET;
  for (size_t i = 0; i < mg->n; i++) {
    size_t grain = mg->ranges[i].size / 64;
    if (grain < MG_MIN_GRAIN)
      grain = MG_MIN_GRAIN;
    where_range(w, mg->cfg.device, mg->ranges[i].base, mg->ranges[i].size, grain);
  }
}

static int mg_residency(aa_backend *b, aa_backend_residency *out) {
  mg_backend *mg = (mg_backend *)b->ctx;
  mg_where w;
  int prev = -1;
  int rc = aa__cuda_enter(mg->cfg.device, &prev);
  memset(out, 0, sizeof *out);
  if (rc != AA_OK)
    return rc;
  pthread_mutex_lock(&mg->mu);
  where_all_locked(mg, &w);
  pthread_mutex_unlock(&mg->mu);
  aa__cuda_leave(mg->cfg.device, prev);
  *out = w.r;
  return AA_OK;
}

/* ------------------------------------------------------ the backend ops */

/* The cap for one reservation of `size` bytes; mg->mu held, the device
 * current. AA_OK, or AA_ELIMIT with the refusal recorded. */
static int cap_check_locked(mg_backend *mg, size_t size) {
  aa__managed_cap c;
  mg_where w;
  size_t f = 0, t = 0;
  char msg[sizeof mg->refusal.message];
  int rc;

  if (mg->cfg.allow_oversubscribe)
    return AA_OK; /* no driver queries: the cap is off */
  rc = aa__cuda_err(cudaMemGetInfo(&f, &t));
  if (rc != AA_OK)
    return rc;
  where_all_locked(mg, &w);
  memset(&c, 0, sizeof c);
  c.requested = size;
  c.held = mg->held;
  c.held_on_device = w.prefetched_device;
  c.device_free = f;
  c.device = mg->cfg.device;
  c.allow_oversubscribe = mg->cfg.allow_oversubscribe;
  rc = aa__managed_cap_check(&c, msg, sizeof msg);
  if (rc == AA_OK)
    return AA_OK;
  mg->refusal.count++;
  mg->refusal.device = c.device;
  mg->refusal.requested = c.requested;
  mg->refusal.held = c.held;
  mg->refusal.held_on_device =
      c.held_on_device < c.held ? c.held_on_device : c.held;
  mg->refusal.device_free = c.device_free;
  snprintf(mg->refusal.message, sizeof mg->refusal.message, "%s", msg);
  return rc;
}

static int ranges_add_locked(mg_backend *mg, void *p, size_t size) {
  if (mg->n == mg->cap) {
    size_t ncap = mg->cap ? mg->cap * 2 : 16;
    mg_range *r = realloc(mg->ranges, ncap * sizeof *r);
    if (r == NULL)
      return AA_ENOMEM;
    mg->ranges = r;
    mg->cap = ncap;
  }
  mg->ranges[mg->n].base = (uintptr_t)p;
  mg->ranges[mg->n].size = size;
  mg->n++;
  mg->held += size;
  return AA_OK;
}

static void ranges_remove_locked(mg_backend *mg, void *p) {
  for (size_t i = 0; i < mg->n; i++) {
    if (mg->ranges[i].base == (uintptr_t)p) {
      mg->held -= mg->ranges[i].size;
      mg->ranges[i] = mg->ranges[mg->n - 1];
      mg->n--;
      return;
    }
  }
}

/* Whether [p, p + n) lies inside one reservation; mg->mu held. */
static bool ranges_cover_locked(const mg_backend *mg, const void *p, size_t n) {
  uintptr_t a = (uintptr_t)p;
  for (size_t i = 0; i < mg->n; i++) {
    const mg_range *r = &mg->ranges[i];
    if (a >= r->base && a - r->base <= r->size && n <= r->size - (a - r->base))
      return true;
  }
  return false;
}

static int mg_alloc(aa_backend *b, size_t size, void **out) {
  mg_backend *mg = (mg_backend *)b->ctx;
  void *p = NULL;
  int prev = -1;
  int rc;

  *out = NULL;
  if (size == 0)
    return AA_EINVAL;
  pthread_mutex_lock(&mg->mu);
  rc = aa__cuda_enter(mg->cfg.device, &prev);
  if (rc != AA_OK)
    goto unlock;
  rc = cap_check_locked(mg, size);
  if (rc == AA_OK)
    rc = aa__cuda_err(cudaMallocManaged(&p, size, cudaMemAttachGlobal));
  if (rc == AA_OK && ((uintptr_t)p & 4095u) != 0)
    rc = AA_EBACKEND; /* never seen: managed memory is page-aligned */
  if (rc == AA_OK)
    rc = mg_apply_advice(&mg->cfg, p, size);
  if (rc == AA_OK)
    rc = ranges_add_locked(mg, p, size);
  if (rc != AA_OK && p != NULL) {
    if (cudaFree(p) != cudaSuccess)
      (void)cudaGetLastError();
    p = NULL;
  }
  aa__cuda_leave(mg->cfg.device, prev);
unlock:
  pthread_mutex_unlock(&mg->mu);
  if (aa__cuda_count_alloc(&mg->cb, rc, size) != AA_OK)
    return rc;
  *out = p;
  return AA_OK;
}

static void mg_free(aa_backend *b, void *ptr, size_t size) {
  mg_backend *mg = (mg_backend *)b->ctx;
  int prev = -1;
  if (ptr == NULL)
    return;
  pthread_mutex_lock(&mg->mu);
  ranges_remove_locked(mg, ptr);
  pthread_mutex_unlock(&mg->mu);
  if (aa__cuda_enter(mg->cfg.device, &prev) == AA_OK) {
    /* cudaFree synchronises the device: no kernel still uses the memory */
    if (cudaFree(ptr) != cudaSuccess)
      (void)cudaGetLastError();
    aa__cuda_leave(mg->cfg.device, prev);
  }
  atomic_fetch_add_explicit(&mg->cb.frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&mg->cb.bytes_mapped, size, memory_order_relaxed);
}

static int mg_synchronize(aa_backend *b) {
  int prev = -1;
  int rc = aa__cuda_enter(b->device, &prev);
  if (rc != AA_OK)
    return rc;
  rc = aa__cuda_err(cudaDeviceSynchronize());
  aa__cuda_leave(b->device, prev);
  return rc;
}

static void mg_destroy(aa_backend *b) {
  mg_backend *mg;
  if (b == NULL)
    return;
  mg = (mg_backend *)b->ctx;
  aa__cuda_evpool_fini(&mg->cb.evpools[0]);
  for (size_t i = 0; i < mg->n; i++) {
    if (cudaFree((void *)mg->ranges[i].base) != cudaSuccess)
      (void)cudaGetLastError();
  }
  free(mg->ranges);
  pthread_mutex_destroy(&mg->mu);
  pthread_mutex_destroy(&mg->cb.mis_lock);
  mg->cb.magic = 0;
  free(mg);
}

static const aa_backend_ops mg_ops = {
    .alloc = mg_alloc,
    .free = mg_free,
    .event_record = aa__cuda_op_event_record,
    .event_query = aa__cuda_op_event_query,
    .event_release = aa__cuda_op_event_release,
    /* no stream_wait: the host reads and writes managed memory directly (a
     * buffer filled before its copy is queued, Python's buffer view), so a
     * block must not be handed out while a copy or kernel on another stream
     * may still use it: a stream ordered after that work does not order
     * the host (large_take.c wait_fit) */
    .synchronize = mg_synchronize,
    .destroy = mg_destroy,
    .residency = mg_residency,
};

int aa_backend_managed_new(const aa_managed_config *cfg, aa_backend **out) {
  mg_backend *mg = NULL;
  int managed = 0;
  int rc;

  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  rc = config_check(cfg);
  if (rc != AA_OK)
    return rc;
  if (cfg->device >= aa_cuda_device_count())
    return AA_ENODEV;
  if (cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, cfg->device) !=
          cudaSuccess ||
      !managed) {
    (void)cudaGetLastError();
    return AA_ENODEV;
  }
  mg = calloc(1, sizeof *mg);
  if (mg == NULL)
    return AA_ENOMEM;
  mg->cfg = *cfg;
  mg->cb.magic = AA__CUDA_MAGIC;
  mg->cb.ndev = 1;
  atomic_init(&mg->cb.vm_granularity, (size_t)0);
  mg->refusal.version = AA_MANAGED_REFUSAL_VERSION;
  mg->refusal.size = (uint32_t)sizeof mg->refusal;
  mg->refusal.device = cfg->device;
  rc = aa__cuda_evpool_init(&mg->cb.evpools[0], cfg->device);
  if (rc != AA_OK)
    goto fail_mg;
  if (pthread_mutex_init(&mg->cb.mis_lock, NULL) != 0) {
    rc = AA_ENOMEM;
    goto fail_ev;
  }
  if (pthread_mutex_init(&mg->mu, NULL) != 0) {
    rc = AA_ENOMEM;
    goto fail_mis;
  }
  mg->cb.base.ops = &mg_ops;
  mg->cb.base.ctx = mg;
  mg->cb.base.kind = AA_BACKEND_DEVICE;
  mg->cb.base.device = cfg->device;
  mg->cb.base.name = "managed";
  *out = &mg->cb.base;
  return AA_OK;

fail_mis:
  pthread_mutex_destroy(&mg->cb.mis_lock);
fail_ev:
  aa__cuda_evpool_fini(&mg->cb.evpools[0]);
fail_mg:
  free(mg);
  return rc;
}

/* ------------------------------------------------------ the public calls */

int aa_managed_prefetch(const aa_backend *b, const void *ptr, size_t size,
                        int device, aa_stream stream) {
  int rc = AA_OK;
  if (ptr == NULL || size == 0 || stream == AA_STREAM_HOST)
    return AA_EINVAL;
  if (device != AA_MANAGED_HOST &&
      (device < 0 || device >= aa_cuda_device_count()))
    return AA_EINVAL;
  if (b != NULL) {
    mg_backend *mg;
    if (!aa_backend_is_managed(b))
      return AA_EINVAL;
    mg = (mg_backend *)b->ctx;
    pthread_mutex_lock(&mg->mu);
    if (!ranges_cover_locked(mg, ptr, size))
      rc = AA_EINVAL;
    pthread_mutex_unlock(&mg->mu);
    if (rc != AA_OK)
      return rc;
  } else if (!is_managed_ptr(ptr, size)) {
    return AA_EINVAL;
  }
  {
    int sdev, prev = -1;
    cudaStream_t cs = aa__cuda_stream(stream, &sdev);
    rc = aa__cuda_enter_for(sdev, &prev);
    if (rc != AA_OK)
      return rc;
    rc = aa__cuda_err(mg_prefetch1(ptr, size, device == AA_MANAGED_HOST ? cudaCpuDeviceId : device, cs));
    aa__cuda_leave(sdev, prev);
    return rc;
  }
}

int aa_managed_advise(const void *ptr, size_t size,
                      const aa_managed_config *cfg) {
  int rc = config_check(cfg);
  if (rc != AA_OK || ptr == NULL || size == 0)
    return AA_EINVAL;
  if (cfg->device >= aa_cuda_device_count())
    return AA_EINVAL;
  if (!is_managed_ptr(ptr, size))
    return AA_EINVAL;
  return mg_apply_advice(cfg, ptr, size);
}

int aa_managed_range_info(const void *ptr, size_t size, aa_managed_range *out) {
  int acc[8];
  int rm = 0;
  if (out == NULL)
    return AA_EINVAL;
  memset(out, 0, sizeof *out);
  out->version = AA_MANAGED_RANGE_VERSION;
  out->size = (uint32_t)sizeof *out;
  out->preferred_location = AA_MANAGED_UNSET;
  out->last_prefetch_location = AA_MANAGED_UNSET;
  if (ptr == NULL || size == 0 || !is_managed_ptr(ptr, size))
    return AA_EINVAL;
  out->preferred_location =
      range_attr(ptr, size, cudaMemRangeAttributePreferredLocation);
  out->last_prefetch_location =
      range_attr(ptr, size, cudaMemRangeAttributeLastPrefetchLocation);
  if (cudaMemRangeGetAttribute(&rm, sizeof rm, cudaMemRangeAttributeReadMostly,
                               ptr, size) != cudaSuccess) {
    (void)cudaGetLastError();
    rm = 0;
  }
  out->read_mostly = rm ? 1 : 0;
  for (size_t i = 0; i < 8; i++)
    acc[i] = cudaInvalidDeviceId;
  if (cudaMemRangeGetAttribute(acc, sizeof acc, cudaMemRangeAttributeAccessedBy,
                               ptr, size) != cudaSuccess) {
    (void)cudaGetLastError();
  } else {
    for (size_t i = 0; i < 8; i++) {
      if (acc[i] != cudaInvalidDeviceId)
        out->accessed_by[out->n_accessed_by++] = acc[i];
    }
  }
  return AA_OK;
}

int aa_managed_last_refusal(const aa_backend *b, aa_managed_refusal *out) {
  mg_backend *mg;
  int rc;
  if (out == NULL)
    return AA_EINVAL;
  memset(out, 0, sizeof *out);
  out->version = AA_MANAGED_REFUSAL_VERSION;
  out->size = (uint32_t)sizeof *out;
  if (!aa_backend_is_managed(b))
    return AA_EINVAL;
  mg = (mg_backend *)b->ctx;
  pthread_mutex_lock(&mg->mu);
  *out = mg->refusal;
  rc = mg->refusal.count > 0 ? AA_OK : AA_ENOENT;
  pthread_mutex_unlock(&mg->mu);
  return rc;
}
