/*
 * base_backend.c — every backend call of a pool, with its accounting: the
 * pool's limit (limit_bytes), the reserved bytes and their peak, the call
 * and failure counters and the time spent inside the backend.
 *
 * Entry points: aa__backend_alloc, aa__backend_free, aa__backend_map,
 * aa__backend_unmap; aa_backend_export_fd (a map handle's descriptor).
 */
#include "core_internal.h"

/* Whether size more bytes would pass the limit of the pool, or of the pool
 * it shares its limit with (aa_pool_share_limit): each counts its own
 * reserved bytes and those of the pools that share its limit. */
static bool over_limit_of(aa_pool *p, size_t size) {
  size_t lim = atomic_load_explicit(&p->limit, AA__RLX);
  if (lim == 0)
    return false;
  uint64_t held = atomic_load_explicit(&p->bytes_reserved, AA__RLX) +
                  atomic_load_explicit(&p->sharers_reserved, AA__RLX);
  return held + size > lim;
}

static bool over_limit(aa_pool *pool, size_t size) {
  return over_limit_of(pool, size) ||
         (pool->limit_owner != NULL && over_limit_of(pool->limit_owner, size));
}

/* The reserved bytes changed by delta (two's complement for a decrease):
 * the pool's, its peak, and the count its limit's owner keeps. */
static void reserved_add(aa_pool *pool, uint64_t delta) {
  uint64_t r = atomic_fetch_add_explicit(&pool->bytes_reserved, delta, AA__RLX) + delta;
  if (delta < ((uint64_t)1 << 63))
    aa__atomic_max(&pool->peak_reserved, r);
  if (pool->limit_owner != NULL)
    atomic_fetch_add_explicit(&pool->limit_owner->sharers_reserved, delta, AA__RLX);
}

/* Every backend call of a pool goes through the four functions below, which
 * count it and the wall time spent in it (backend_ns: what a page map or a
 * cudaMalloc costs the thread that asked, next to a clock read's ~20 ns). */
static inline void backend_time(aa_pool *pool, uint64_t t0) {
  atomic_fetch_add_explicit(&pool->backend_ns, aa_now_ns() - t0, AA__RLX);
}

int aa__backend_alloc(aa_pool *pool, size_t size, void **out) {
  *out = NULL;
  if (over_limit(pool, size))
    return AA_ELIMIT;
  uint64_t t0 = aa_now_ns();
  int rc = pool->backend->ops->alloc(pool->backend, size, out);
  backend_time(pool, t0);
  if (rc != AA_OK || *out == NULL) {
    *out = NULL;
    atomic_fetch_add_explicit(&pool->backend_failures, 1, AA__RLX);
    return rc != AA_OK ? rc : AA_EBACKEND;
  }
  atomic_fetch_add_explicit(&pool->backend_allocs, 1, AA__RLX);
  reserved_add(pool, size);
  return AA_OK;
}

void aa__backend_free(aa_pool *pool, void *p, size_t size) {
  uint64_t t0 = aa_now_ns();
  pool->backend->ops->free(pool->backend, p, size);
  backend_time(pool, t0);
  atomic_fetch_add_explicit(&pool->backend_frees, 1, AA__RLX);
  reserved_add(pool, (uint64_t)0 - size);
}

int aa__backend_map(aa_pool *pool, void *addr, size_t size, void **handle) {
  *handle = NULL;
  if (over_limit(pool, size))
    return AA_ELIMIT;
  uint64_t t0 = aa_now_ns();
  int rc = pool->backend->ops->map(pool->backend, addr, size, handle);
  backend_time(pool, t0);
  if (rc != AA_OK) {
    atomic_fetch_add_explicit(&pool->backend_failures, 1, AA__RLX);
    return rc;
  }
  atomic_fetch_add_explicit(&pool->backend_allocs, 1, AA__RLX);
  reserved_add(pool, size);
  return AA_OK;
}

void aa__backend_unmap(aa_pool *pool, void *addr, size_t size, void *handle) {
  uint64_t t0 = aa_now_ns();
  pool->backend->ops->unmap(pool->backend, addr, size, handle);
  backend_time(pool, t0);
  atomic_fetch_add_explicit(&pool->backend_frees, 1, AA__RLX);
  reserved_add(pool, (uint64_t)0 - size);
}

int aa_backend_export_fd(aa_backend *b, void *handle, int *fd) {
  if (fd != NULL)
    *fd = -1;
  if (b == NULL || b->ops == NULL || handle == NULL || fd == NULL)
    return AA_EINVAL;
  if (b->ops->export_fd == NULL)
    return AA_ENOTSUP;
  return b->ops->export_fd(b, handle, fd);
}
