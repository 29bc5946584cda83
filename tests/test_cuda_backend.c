/*
 * test_cuda_backend.c — the CUDA device backend and a pool over it:
 * argument checks (run everywhere), then on a GPU: alloc/free alignment,
 * out-of-memory as AA_ENOMEM with the CUDA error cleared, the caller's
 * current device left alone, pooled events, pending events while a stream is
 * held by a host callback, and stream-ordered reuse in a pool; the
 * virtual-memory ops (granularity, reserve, map/unmap with the data checked,
 * a remap in the middle, the failure paths, a thread with no CUDA state).
 *
 * Without a GPU (CI) every GPU test calls cmocka's skip() after printing why.
 *
 * One concern, the CUDA device backend (one ctest), kept in one file though
 * it runs past 600 lines; the cmocka table at its end lists every case.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cuda_runtime.h>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"

static int have_gpu(void) {
  static int n = -1;
  if (n < 0) {
    n = aa_cuda_device_count();
    if (n == 0)
      print_message("[  SKIP    ] no CUDA device visible: GPU tests skipped\n");
  }
  return n > 0;
}

#define NEED_GPU()     \
  do {                 \
    if (!have_gpu()) { \
      skip();          \
      return;          \
    }                  \
  } while (0)

/* A stream held busy by a host callback that spins until released. */
typedef struct gate {
  volatile int open;
} gate;

static void CUDART_CB gate_fn(void *user) {
  gate *g = user;
  while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE))
    ;
}

static void gate_close(gate *g, cudaStream_t s) {
  g->open = 0;
  assert_int_equal(cudaLaunchHostFunc(s, gate_fn, g), cudaSuccess);
}

static void gate_open(gate *g) { __atomic_store_n(&g->open, 1, __ATOMIC_RELEASE); }

/* ------------------------------------------------------------------ tests */

static void test_cuda_backend_bad_arguments(void **state) {
  aa_backend *b = (aa_backend *)0x1;
  int n = aa_cuda_device_count();
  aa_cuda_counts c;
  (void)state;
  assert_true(n >= 0);
  assert_int_equal(aa_backend_cuda_new(-1, &b), AA_EINVAL);
  assert_null(b);
  b = (aa_backend *)0x1;
  assert_int_equal(aa_backend_cuda_new(n, &b), AA_ENODEV);
  assert_null(b);
  assert_int_equal(aa_backend_cuda_new(0, NULL), AA_EINVAL);
  assert_int_equal(aa_backend_cuda_counts(NULL, &c), AA_EINVAL);
  assert_int_equal(c.version, AA_CUDA_COUNTS_VERSION);
  assert_int_equal(aa_backend_cuda_counts(NULL, NULL), AA_EINVAL);
}

/* A device's identity: the UUID and bus id in the forms DCGM and nvidia-smi
 * write, the card's memory; a device that is not there is AA_ENODEV with the
 * struct zeroed, its version and size set. */
static void test_cuda_backend_device_identity(void **state) {
  aa_cuda_identity id;
  size_t f = 0, t = 0;
  int n = aa_cuda_device_count();
  (void)state;
  assert_int_equal(aa_cuda_device_identity(0, NULL), AA_EINVAL);
  assert_int_equal(aa_cuda_device_identity(n, &id), AA_ENODEV);
  assert_int_equal(id.version, AA_CUDA_IDENTITY_VERSION);
  assert_int_equal(id.size, sizeof id);
  assert_string_equal(id.uuid, "");
  assert_int_equal(aa_cuda_device_identity(-1, &id), AA_ENODEV);
  NEED_GPU();
  assert_int_equal(aa_cuda_device_identity(0, &id), AA_OK);
  print_message("device 0: %s %s %s\n", id.name, id.uuid, id.pci_bus_id);
  assert_int_equal(strlen(id.uuid), 40);
  assert_memory_equal(id.uuid, "GPU-", 4);
  assert_int_equal(id.uuid[12], '-');
  assert_int_equal(id.uuid[27], '-');
  assert_int_equal(strlen(id.pci_bus_id), 16); /* "00000000:00:06.0" */
  assert_int_equal(id.pci_bus_id[8], ':');
  assert_int_equal(id.pci_bus_id[11], ':');
  assert_int_equal(id.pci_bus_id[14], '.');
  assert_true(id.name[0] != '\0');
  assert_int_equal(aa_cuda_mem_info(0, &f, &t), AA_OK);
  assert_true(id.total_bytes >= t);
}

static void test_cuda_backend_alloc_free(void **state) {
  aa_backend *b = NULL;
  aa_cuda_counts c;
  void *p = NULL, *q = NULL;
  unsigned char host[64];
  (void)state;
  NEED_GPU();
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  assert_non_null(b);
  assert_int_equal(b->kind, AA_BACKEND_DEVICE);
  assert_int_equal(b->device, 0);
  assert_string_equal(b->name, "cuda");
  assert_int_equal(b->ops->alloc(b, 2u << 20, &p), AA_OK);
  assert_non_null(p);
  assert_int_equal((uintptr_t)p & 4095u, 0);
  assert_int_equal(b->ops->alloc(b, 4096, &q), AA_OK);
  assert_int_equal((uintptr_t)q & 4095u, 0);
  /* It is real device memory. */
  assert_int_equal(cudaMemset(p, 0xab, 64), cudaSuccess);
  assert_int_equal(cudaMemcpy(host, p, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  assert_int_equal(host[0], 0xab);
  assert_int_equal(host[63], 0xab);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.allocs, 2);
  assert_int_equal(c.bytes_mapped, (2u << 20) + 4096);
  b->ops->free(b, q, 4096);
  b->ops->free(b, p, 2u << 20);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.frees, 2);
  assert_int_equal(c.bytes_mapped, 0);
  assert_int_equal(b->ops->alloc(b, 0, &p), AA_EINVAL);
  assert_null(p);
  assert_int_equal(b->ops->synchronize(b), AA_OK);
  aa_backend_destroy(b);
}

static void test_cuda_backend_oom_is_enomem(void **state) {
  aa_backend *b = NULL;
  aa_cuda_counts c;
  void *p = (void *)0x1;
  (void)state;
  NEED_GPU();
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  /* 1 PiB: no GPU has it. */
  assert_int_equal(b->ops->alloc(b, (size_t)1 << 50, &p), AA_ENOMEM);
  assert_null(p);
  /* The error is cleared so that PyTorch does not see it later. */
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.ooms, 1);
  assert_int_equal(c.failures, 1);
  assert_int_equal(c.bytes_mapped, 0);
  aa_backend_destroy(b);
}

static void test_cuda_backend_keeps_current_device(void **state) {
  int n, last, cur = -1;
  aa_backend *b = NULL;
  void *p = NULL;
  (void)state;
  NEED_GPU();
  n = aa_cuda_device_count();
  last = n - 1;
  assert_int_equal(cudaSetDevice(0), cudaSuccess);
  assert_int_equal(aa_backend_cuda_new(last, &b), AA_OK);
  assert_int_equal(b->ops->alloc(b, 2u << 20, &p), AA_OK);
  assert_int_equal(cudaGetDevice(&cur), cudaSuccess);
  assert_int_equal(cur, 0);
  {
    struct cudaPointerAttributes a;
    assert_int_equal(cudaPointerGetAttributes(&a, p), cudaSuccess);
    assert_int_equal(a.device, last);
  }
  b->ops->free(b, p, 2u << 20);
  assert_int_equal(b->ops->synchronize(b), AA_OK);
  assert_int_equal(cudaGetDevice(&cur), cudaSuccess);
  assert_int_equal(cur, 0);
  aa_backend_destroy(b);
}

static void test_cuda_backend_events_pooled(void **state) {
  aa_backend *b = NULL;
  aa_cuda_counts c;
  cudaStream_t s;
  int i;
  (void)state;
  NEED_GPU();
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  for (i = 0; i < 1000; i++) {
    void *ev = NULL;
    assert_int_equal(b->ops->event_record(b, s, &ev), AA_OK);
    assert_non_null(ev);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_int_equal(b->ops->event_query(b, ev), AA_OK);
    b->ops->event_release(b, ev);
  }
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.events_recorded, 1000);
  assert_int_equal(c.events_created, 1); /* one event, reused 1000 times */
  assert_int_equal(c.events_free, 1);
  /* The host pseudo-stream records nothing. */
  {
    void *ev = (void *)0x1;
    assert_int_equal(b->ops->event_record(b, AA_STREAM_HOST, &ev), AA_OK);
    assert_null(ev);
    assert_int_equal(b->ops->event_query(b, NULL), AA_OK);
    b->ops->event_release(b, NULL);
  }
  assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
  aa_backend_destroy(b);
}

static void test_cuda_backend_event_pending(void **state) {
  aa_backend *b = NULL;
  cudaStream_t s;
  gate g;
  void *ev = NULL;
  (void)state;
  NEED_GPU();
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  gate_close(&g, s);
  assert_int_equal(b->ops->event_record(b, s, &ev), AA_OK);
  assert_int_equal(b->ops->event_query(b, ev), AA_EAGAIN);
  assert_int_equal(cudaGetLastError(), cudaSuccess); /* NotReady is not an error */
  gate_open(&g);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
  assert_int_equal(b->ops->event_query(b, ev), AA_OK);
  b->ops->event_release(b, ev);
  assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
  aa_backend_destroy(b);
}

/* A pool over the device backend: a block freed on s1 while s1 still has
 * work queued is reused on s1 at once but not on s2 until that work is done. */
static void test_cuda_pool_cross_stream_reuse(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  cudaStream_t s1, s2;
  gate g;
  void *p, *q, *r;
  int i;
  (void)state;
  NEED_GPU();
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.name = "test-cuda";
  cfg.backend = b;
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  assert_int_equal(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  assert_int_equal(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);

  p = aa_alloc(pool, 4096, s1);
  assert_non_null(p);
  gate_close(&g, s1); /* s1 "still uses" p */
  assert_int_equal(aa_free(pool, p, 4096, s1), AA_OK);
  /* Other stream: must not get p while s1's work is pending. Try several
   * allocations so that a LIFO free list would hand it out. */
  {
    void *got[8];
    for (i = 0; i < 8; i++) {
      got[i] = aa_alloc(pool, 4096, s2);
      assert_non_null(got[i]);
      assert_ptr_not_equal(got[i], p);
    }
    for (i = 0; i < 8; i++)
      assert_int_equal(aa_free(pool, got[i], 4096, s2), AA_OK);
  }
  /* Same stream: stream order makes immediate reuse safe. */
  q = aa_alloc(pool, 4096, s1);
  assert_non_null(q);
  assert_int_equal(aa_free(pool, q, 4096, s1), AA_OK);
  gate_open(&g);
  assert_int_equal(cudaStreamSynchronize(s1), cudaSuccess);
  r = aa_alloc(pool, 4096, s2);
  assert_non_null(r);
  assert_int_equal(aa_free(pool, r, 4096, s2), AA_OK);

  assert_int_equal(cudaStreamSynchronize(s2), cudaSuccess);
  aa_pool_destroy(pool);
  assert_int_equal(cudaStreamDestroy(s1), cudaSuccess);
  assert_int_equal(cudaStreamDestroy(s2), cudaSuccess);
  aa_backend_destroy(b);
}

/* Over the limit the pool gives NULL, not a crash, and the CUDA error state
 * stays clean; after freeing, allocation works again. */
static void test_cuda_pool_limit_and_release(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  aa_cuda_counts c;
  void *big;
  (void)state;
  NEED_GPU();
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.name = "test-cuda-limit";
  cfg.backend = b;
  cfg.limit_bytes = 64u << 20;
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  big = aa_alloc(pool, 48u << 20, NULL);
  assert_non_null(big);
  assert_null(aa_alloc(pool, 48u << 20, NULL));
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  assert_int_equal(aa_free(pool, big, 48u << 20, NULL), AA_OK);
  big = aa_alloc(pool, 48u << 20, NULL);
  assert_non_null(big);
  assert_int_equal(aa_free(pool, big, 48u << 20, NULL), AA_OK);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  (void)aa_pool_release(pool);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.bytes_mapped, 0); /* empty_cache gave it all back */
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

/* The device really runs out: with most of the GPU taken by a hog, a pool
 * holding ~1 GiB of cached (free) slabs and segments must give them back and
 * retry when a new large request does not fit. */
static void test_cuda_pool_oom_releases_cache(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  aa_pool_stats *st = NULL;
  size_t free_b = 0, total_b = 0;
  void *hog = NULL, *big = NULL, *seg;
  void *blocks[600];
  int i;
  (void)state;
  NEED_GPU();
  assert_int_equal(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  if (free_b < ((size_t)4 << 30) ||
      cudaMalloc(&hog, free_b - ((size_t)3 << 29)) != cudaSuccess) { /* leave 1.5 GiB */
    (void)cudaGetLastError();
    print_message("[  SKIP    ] cannot take most of the device memory\n");
    skip();
    return;
  }
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.name = "test-cuda-oom";
  cfg.backend = b;
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  for (i = 0; i < 600; i++) {
    blocks[i] = aa_alloc(pool, 1u << 20, NULL);
    assert_non_null(blocks[i]);
  }
  seg = aa_alloc(pool, (size_t)512 << 20, NULL);
  assert_non_null(seg);
  for (i = 0; i < 600; i++)
    assert_int_equal(aa_free(pool, blocks[i], 1u << 20, NULL), AA_OK);
  assert_int_equal(aa_free(pool, seg, (size_t)512 << 20, NULL), AA_OK);
  /* ~1.1 GiB cached, ~0.4 GiB left on the device: 1 GiB only fits after
   * the cache goes back. */
  big = aa_alloc(pool, (size_t)1 << 30, NULL);
  assert_non_null(big);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  st = malloc(sizeof *st);
  assert_non_null(st);
  assert_int_equal(aa_pool_stats_get(pool, st), AA_OK);
  assert_true(st->oom_retries >= 1);
  assert_int_equal(st->ooms, 0);
  free(st);
  assert_int_equal(aa_free(pool, big, (size_t)1 << 30, NULL), AA_OK);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
  assert_int_equal(cudaFree(hog), cudaSuccess);
}

/* ------------------------------------------------------- virtual memory */

static int is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* Makes device 0's backend and returns its mapping granularity; when
 * virtual memory is unusable on this GPU, gives the backend back and skips
 * the test (cmocka's skip does not return). */
static size_t vm_backend_or_skip(aa_backend **b) {
  assert_int_equal(aa_backend_cuda_new(0, b), AA_OK);
  size_t g = (*b)->ops->map_granularity(*b);
  if (g == 0) {
    print_message("[  SKIP    ] no CUDA virtual memory on device 0\n");
    aa_backend_destroy(*b);
    *b = NULL;
    skip();
  }
  return g;
}

/* Fills one granule at p with a pattern made of `seed`, through a memset
 * then a host-to-device copy, and reads it back. */
static void vm_fill_check(void *p, size_t g, unsigned seed, unsigned char *buf) {
  size_t i;
  assert_int_equal(cudaMemset(p, (int)(seed & 0xff), g), cudaSuccess);
  assert_int_equal(cudaMemcpy(buf, p, g, cudaMemcpyDeviceToHost), cudaSuccess);
  assert_int_equal(buf[0], seed & 0xff);
  assert_int_equal(buf[g / 2], seed & 0xff);
  assert_int_equal(buf[g - 1], seed & 0xff);
  for (i = 0; i < g; i++)
    buf[i] = (unsigned char)(i * 31u + seed);
  assert_int_equal(cudaMemcpy(p, buf, g, cudaMemcpyHostToDevice), cudaSuccess);
  memset(buf, 0, g);
  assert_int_equal(cudaMemcpy(buf, p, g, cudaMemcpyDeviceToHost), cudaSuccess);
  for (i = 0; i < g; i++) {
    if (buf[i] != (unsigned char)(i * 31u + seed))
      fail_msg("byte %zu of the page (seed %u): %u", i, seed, buf[i]);
  }
}

/* The pattern vm_fill_check left is still there. */
static void vm_check(const void *p, size_t g, unsigned seed, unsigned char *buf) {
  size_t i;
  memset(buf, 0, g);
  assert_int_equal(cudaMemcpy(buf, p, g, cudaMemcpyDeviceToHost), cudaSuccess);
  for (i = 0; i < g; i++) {
    if (buf[i] != (unsigned char)(i * 31u + seed))
      fail_msg("byte %zu of the page (seed %u): %u", i, seed, buf[i]);
  }
}

static void test_cuda_backend_vm_granularity(void **state) {
  aa_backend *b = NULL, *pin = NULL;
  size_t g;
  (void)state;
  NEED_GPU();
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  assert_non_null(b->ops->map_granularity);
  assert_non_null(b->ops->va_reserve);
  assert_non_null(b->ops->va_release);
  assert_non_null(b->ops->map);
  assert_non_null(b->ops->unmap);
  g = b->ops->map_granularity(b);
  print_message("[  INFO    ] device 0 mapping granularity: %zu KiB\n", g >> 10);
  if (g != 0) {
    assert_true(is_pow2(g));
    assert_true(g >= ((size_t)64 << 10));
    assert_int_equal(g % ((size_t)64 << 10), 0);
  }
  assert_int_equal(b->ops->map_granularity(b), g); /* cached, same answer */
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  aa_backend_destroy(b);
  /* Pinned host memory has no virtual-memory ops. */
  assert_int_equal(aa_backend_pinned_new(&pin), AA_OK);
  assert_null(pin->ops->map_granularity);
  assert_null(pin->ops->va_reserve);
  assert_null(pin->ops->va_release);
  assert_null(pin->ops->map);
  assert_null(pin->ops->unmap);
  aa_backend_destroy(pin);
}

/* Reserve 64 MiB, map granules 0, 1 and 5, check the data in each, unmap the
 * middle one and map it again, check all three, give everything back. */
static void test_cuda_backend_vm_map_unmap(void **state) {
  static const size_t at[3] = {0, 1, 5};
  aa_backend *b = NULL;
  aa_cuda_counts c;
  size_t g, va = (size_t)64 << 20;
  unsigned char *base = NULL, *buf = NULL;
  void *h[3] = {NULL, NULL, NULL};
  int i, cur = -1;
  (void)state;
  NEED_GPU();
  g = vm_backend_or_skip(&b);
  if (va < 8 * g)
    va = 8 * g;
  buf = malloc(g);
  assert_non_null(buf);
  assert_int_equal(b->ops->va_reserve(b, va, (void **)&base), AA_OK);
  assert_non_null(base);
  assert_int_equal((uintptr_t)base % g, 0);
  for (i = 0; i < 3; i++) {
    assert_int_equal(b->ops->map(b, base + at[i] * g, g, &h[i]), AA_OK);
    assert_non_null(h[i]);
  }
  {
    struct cudaPointerAttributes a;
    assert_int_equal(cudaPointerGetAttributes(&a, base + 5 * g), cudaSuccess);
    assert_int_equal(a.type, cudaMemoryTypeDevice);
    assert_int_equal(a.device, 0);
  }
  for (i = 0; i < 3; i++)
    vm_fill_check(base + at[i] * g, g, 0x40u + (unsigned)i, buf);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.allocs, 3);
  assert_int_equal(c.bytes_mapped, 3 * g);

  /* The middle one goes back and comes again; its neighbours keep data. */
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  b->ops->unmap(b, base + g, g, h[1]);
  h[1] = NULL;
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.frees, 1);
  assert_int_equal(c.bytes_mapped, 2 * g);
  vm_check(base, g, 0x40u, buf);
  vm_check(base + 5 * g, g, 0x42u, buf);
  assert_int_equal(b->ops->map(b, base + g, g, &h[1]), AA_OK);
  assert_non_null(h[1]);
  vm_fill_check(base + g, g, 0x77u, buf);
  vm_check(base, g, 0x40u, buf);
  vm_check(base + 5 * g, g, 0x42u, buf);

  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  for (i = 0; i < 3; i++)
    b->ops->unmap(b, base + at[i] * g, g, h[i]);
  b->ops->va_release(b, base, va);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.allocs, 4);
  assert_int_equal(c.frees, 4);
  assert_int_equal(c.failures, 0);
  assert_int_equal(c.bytes_mapped, 0);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  assert_int_equal(cudaGetDevice(&cur), cudaSuccess);
  assert_int_equal(cur, 0);
  free(buf);
  aa_backend_destroy(b);
}

/* map_alias: one handle at a second address (another reservation): data
 * written through either is read through the other, on the device; the
 * alias undone leaves the first mapping and its data; no new memory. */
static void test_cuda_backend_vm_alias(void **state) {
  aa_backend *b = NULL;
  aa_cuda_counts c;
  size_t g;
  unsigned char *r1 = NULL, *r2 = NULL, *buf = NULL;
  void *h = NULL;
  (void)state;
  NEED_GPU();
  g = vm_backend_or_skip(&b);
  assert_non_null(b->ops->map_alias);
  assert_non_null(b->ops->unmap_alias);
  buf = malloc(g);
  assert_non_null(buf);
  assert_int_equal(b->ops->va_reserve(b, 2 * g, (void **)&r1), AA_OK);
  assert_int_equal(b->ops->va_reserve(b, 2 * g, (void **)&r2), AA_OK);
  assert_int_equal(b->ops->map(b, r1 + g, g, &h), AA_OK);
  assert_int_equal(b->ops->map_alias(b, r2, g, h), AA_OK);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.allocs, 1); /* the alias made no memory */
  assert_int_equal(c.bytes_mapped, g);
  vm_fill_check(r1 + g, g, 0x21u, buf);
  vm_check(r2, g, 0x21u, buf); /* the same bytes at the second address */
  vm_fill_check(r2, g, 0x5Eu, buf);
  vm_check(r1 + g, g, 0x5Eu, buf);
  assert_int_equal(b->ops->map_alias(b, r2 + 1, g, h), AA_EINVAL);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  b->ops->unmap_alias(b, r2, g, h);
  vm_check(r1 + g, g, 0x5Eu, buf); /* the first mapping keeps its data */
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  b->ops->unmap(b, r1 + g, g, h);
  b->ops->va_release(b, r2, 2 * g);
  b->ops->va_release(b, r1, 2 * g);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.bytes_mapped, 0);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  free(buf);
  aa_backend_destroy(b);
}

/* map_alias_run: three handles (mapped apart, the middle one at another
 * reservation) side by side at a new address in one call, one access grant
 * for the range: every page reads and writes through both addresses, a
 * kernel writes the range whole (one cudaMemset across the handles), and
 * bad arguments change nothing. */
static void test_cuda_backend_vm_alias_run(void **state) {
  aa_backend *b = NULL;
  aa_cuda_counts c;
  size_t g;
  unsigned char *r1 = NULL, *r2 = NULL, *r3 = NULL, *buf = NULL;
  void *h[3] = {NULL, NULL, NULL};
  size_t sz[3];
  (void)state;
  NEED_GPU();
  g = vm_backend_or_skip(&b);
  assert_non_null(b->ops->map_alias_run);
  buf = malloc(g);
  assert_non_null(buf);
  assert_int_equal(b->ops->va_reserve(b, 4 * g, (void **)&r1), AA_OK);
  assert_int_equal(b->ops->va_reserve(b, 2 * g, (void **)&r2), AA_OK);
  assert_int_equal(b->ops->va_reserve(b, 3 * g, (void **)&r3), AA_OK);
  assert_int_equal(b->ops->map(b, r1, g, &h[0]), AA_OK);
  assert_int_equal(b->ops->map(b, r2 + g, g, &h[1]), AA_OK);
  assert_int_equal(b->ops->map(b, r1 + 3 * g, g, &h[2]), AA_OK);
  for (int i = 0; i < 3; i++)
    sz[i] = g;
  /* bad arguments: nothing mapped (a valid call at the same place works) */
  assert_int_equal(b->ops->map_alias_run(b, r3 + 1, h, sz, 3), AA_EINVAL);
  assert_int_equal(b->ops->map_alias_run(b, r3, h, sz, 0), AA_EINVAL);
  void *bad[3] = {h[0], NULL, h[2]};
  assert_int_equal(b->ops->map_alias_run(b, r3, bad, sz, 3), AA_EINVAL);
  assert_int_equal(b->ops->map_alias_run(b, r3, h, sz, 3), AA_OK);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.allocs, 3); /* the aliases made no memory */
  assert_int_equal(c.bytes_mapped, 3 * g);
  vm_fill_check(r1, g, 0x11u, buf);
  vm_fill_check(r2 + g, g, 0x22u, buf);
  vm_fill_check(r1 + 3 * g, g, 0x33u, buf);
  vm_check(r3, g, 0x11u, buf); /* each handle at its place in the range */
  vm_check(r3 + g, g, 0x22u, buf);
  vm_check(r3 + 2 * g, g, 0x33u, buf);
  vm_fill_check(r3 + g, g, 0x44u, buf); /* and writable through it */
  vm_check(r2 + g, g, 0x44u, buf);
  assert_int_equal(cudaMemset(r3, 0x5A, 3 * g), cudaSuccess); /* across the handles */
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  unsigned char probe[3];
  assert_int_equal(cudaMemcpy(&probe[0], r1 + g - 1, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  assert_int_equal(cudaMemcpy(&probe[1], r2 + g, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  assert_int_equal(cudaMemcpy(&probe[2], r1 + 3 * g, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 3; i++)
    assert_int_equal(probe[i], 0x5A);
  /* mapping the same place again fails and leaves the range as it was */
  assert_true(b->ops->map_alias_run(b, r3, h, sz, 3) != AA_OK);
  vm_fill_check(r3 + 2 * g, g, 0x66u, buf);
  vm_check(r1 + 3 * g, g, 0x66u, buf);
  for (int i = 0; i < 3; i++)
    b->ops->unmap_alias(b, r3 + (size_t)i * g, g, h[i]);
  vm_check(r1 + 3 * g, g, 0x66u, buf); /* the first mappings keep their data */
  /* a failure at the last handle (its place already mapped) undoes the
   * two mapped before it: they map again, and the alias in the way stays */
  assert_int_equal(b->ops->map_alias(b, r3 + 2 * g, g, h[2]), AA_OK);
  assert_true(b->ops->map_alias_run(b, r3, h, sz, 3) != AA_OK);
  assert_int_equal(b->ops->map_alias_run(b, r3, h, sz, 2), AA_OK);
  vm_check(r3 + 2 * g, g, 0x66u, buf);
  vm_fill_check(r3, g, 0x77u, buf);
  vm_check(r1, g, 0x77u, buf);
  for (int i = 0; i < 3; i++)
    b->ops->unmap_alias(b, r3 + (size_t)i * g, g, h[i]);
  b->ops->unmap(b, r1, g, h[0]);
  b->ops->unmap(b, r2 + g, g, h[1]);
  b->ops->unmap(b, r1 + 3 * g, g, h[2]);
  b->ops->va_release(b, r3, 3 * g);
  b->ops->va_release(b, r2, 2 * g);
  b->ops->va_release(b, r1, 4 * g);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.bytes_mapped, 0);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  free(buf);
  aa_backend_destroy(b);
}

/* A stitched range on the device: holes' pages serve a request no hole
 * fits with no new memory (level 1; level 2, large.stitch_grow: with new
 * pages for what the holes lack, and only those); a kernel's writes
 * (cudaMemset on a side stream) through the stitched address read back,
 * and the live blocks beside the holes keep theirs. */
static void pool_stitch_case(int level, size_t req_mib) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  aa_pool_stats st;
  cudaStream_t s1 = NULL;
  char *hole[3], *keep[3], *p;
  unsigned char *buf;
  size_t mib = (size_t)1 << 20, n = req_mib * ((size_t)1 << 20);
  NEED_GPU();
  if (vm_backend_or_skip(&b) != ((size_t)2 << 20)) {
    aa_backend_destroy(b);
    skip(); /* the layout below assumes 2 MiB pages */
  }
  aa_pool_config_init(&cfg);
  cfg.name = "test-cuda-stitch";
  cfg.backend = b;
  cfg.large_mode = AA_LARGE_EXPANDABLE;
  cfg.large_stitch = level;
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  for (int i = 0; i < 3; i++) {
    hole[i] = aa_alloc(pool, 6 * mib, NULL);
    keep[i] = aa_alloc(pool, 3 * mib, NULL);
    assert_non_null(hole[i]);
    assert_non_null(keep[i]);
    assert_int_equal(cudaMemset(keep[i], 0x30 + i, 3 * mib), cudaSuccess);
  }
  for (int i = 0; i < 3; i++)
    assert_int_equal(aa_free(pool, hole[i], 6 * mib, NULL), AA_OK);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(aa_pool_stats_get(pool, &st), AA_OK);
  uint64_t reserved = st.large_bytes_reserved;
  assert_int_equal(cudaStreamCreate(&s1), cudaSuccess);
  p = aa_alloc(pool, n, (aa_stream)s1);
  assert_non_null(p);
  assert_int_equal(aa_pool_stats_get(pool, &st), AA_OK);
  /* level 1: no new memory; level 2: only what the holes lack */
  assert_int_equal(st.large_bytes_reserved, reserved + st.large_stitch_new_bytes);
  assert_true(level == 2 ? st.large_stitch_new_bytes > 0 && st.large_stitch_new_bytes < n
                         : st.large_stitch_new_bytes == 0);
  assert_int_equal(st.large_stitches, 1);
  assert_int_equal(cudaMemsetAsync(p, 0x6B, n, s1), cudaSuccess);
  assert_int_equal(cudaStreamSynchronize(s1), cudaSuccess);
  buf = malloc(n);
  assert_non_null(buf);
  assert_int_equal(cudaMemcpy(buf, p, n, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < n; i += 4096)
    assert_int_equal(buf[i], 0x6B);
  assert_int_equal(buf[n - 1], 0x6B);
  for (int i = 0; i < 3; i++) { /* the live blocks beside the holes untouched */
    assert_int_equal(cudaMemcpy(buf, keep[i], 3 * mib, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(buf[0], 0x30 + i);
    assert_int_equal(buf[3 * mib - 1], 0x30 + i);
  }
  assert_int_equal(aa_free(pool, p, n, (aa_stream)s1), AA_OK);
  assert_int_equal(cudaStreamSynchronize(s1), cudaSuccess);
  for (int i = 0; i < 3; i++)
    assert_int_equal(aa_free(pool, keep[i], 3 * mib, NULL), AA_OK);
  (void)aa_pool_release(pool);
  assert_int_equal(aa_pool_stats_get(pool, &st), AA_OK);
  assert_int_equal(st.large_stitched_ranges, 0);
  assert_int_equal(st.large_alias_maps, st.large_alias_unmaps);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  free(buf);
  assert_int_equal(cudaStreamDestroy(s1), cudaSuccess);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

static void test_cuda_pool_stitch(void **state) {
  (void)state;
  pool_stitch_case(1, 10);
}

/* large_stitch 2 (policy large.stitch_grow): a 24 MiB request that the
 * holes' 12-16 MiB of whole pages leave short, served by a range of those
 * pages and new ones; the pool grows by the new ones only. */
static void test_cuda_pool_stitch_grow(void **state) {
  (void)state;
  pool_stitch_case(2, 24);
}

/* Bad requests fail and map nothing: a misaligned address or size is
 * refused before the driver is asked; mapping over a mapped granule fails in
 * the driver, which must give its new memory back and leave the old
 * mapping and its data alone. */
static void test_cuda_backend_vm_map_failures(void **state) {
  aa_backend *b = NULL;
  aa_cuda_counts c;
  size_t g, va, free0 = 0, free1 = 0, total = 0;
  unsigned char *base = NULL, *buf = NULL;
  void *h0 = NULL, *h1 = NULL, *hx = (void *)0x1;
  int rc;
  (void)state;
  NEED_GPU();
  g = vm_backend_or_skip(&b);
  va = 4 * g;
  buf = malloc(g);
  assert_non_null(buf);
  /* The reservation size must be a multiple of the granularity. */
  {
    void *p = (void *)0x1;
    assert_int_equal(b->ops->va_reserve(b, g + 4096, &p), AA_EINVAL);
    assert_null(p);
  }
  assert_int_equal(b->ops->va_reserve(b, va, (void **)&base), AA_OK);

  assert_int_equal(b->ops->map(b, base + 4096, g, &hx), AA_EINVAL);
  assert_null(hx);
  hx = (void *)0x1;
  assert_int_equal(b->ops->map(b, base, 4096, &hx), AA_EINVAL);
  assert_null(hx);
  hx = (void *)0x1;
  assert_int_equal(b->ops->map(b, NULL, g, &hx), AA_EINVAL);
  assert_null(hx);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.allocs, 0);
  assert_int_equal(c.bytes_mapped, 0);
  /* Nothing was mapped in the first two granules: both map now. */
  assert_int_equal(b->ops->map(b, base, g, &h0), AA_OK);
  assert_int_equal(b->ops->map(b, base + g, g, &h1), AA_OK);
  vm_fill_check(base, g, 0x5au, buf);

  /* Over a mapped granule: the driver refuses, nothing leaks. */
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(cudaMemGetInfo(&free0, &total), cudaSuccess);
  hx = (void *)0x1;
  rc = b->ops->map(b, base, g, &hx);
  assert_true(rc < 0);
  assert_int_not_equal(rc, AA_ENOMEM);
  assert_null(hx);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  assert_int_equal(cudaMemGetInfo(&free1, &total), cudaSuccess);
  assert_int_equal(free1, free0); /* the new granule went back */
  vm_check(base, g, 0x5au, buf);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.allocs, 2);
  assert_int_equal(c.failures, 1);
  assert_int_equal(c.ooms, 0);
  assert_int_equal(c.bytes_mapped, 2 * g);

  /* Out of device memory is AA_ENOMEM: more than any GPU has, in one
   * reservation that the driver may refuse first. */
  {
    unsigned char *huge = NULL;
    void *hh = (void *)0x1;
    size_t hsz = (size_t)1 << 40; /* 1 TiB */
    hsz -= hsz % g;
    if (b->ops->va_reserve(b, hsz, (void **)&huge) == AA_OK) {
      assert_int_equal(b->ops->map(b, huge, hsz, &hh), AA_ENOMEM);
      assert_null(hh);
      b->ops->va_release(b, huge, hsz);
      assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
      assert_int_equal(c.ooms, 1);
      assert_int_equal(c.failures, 2);
      assert_int_equal(c.bytes_mapped, 2 * g);
    } else {
      print_message("[  INFO    ] 1 TiB of address space refused: OOM map not tried\n");
    }
  }

  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  b->ops->unmap(b, base, g, h0);
  b->ops->unmap(b, base + g, g, h1);
  b->ops->va_release(b, base, va);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.bytes_mapped, 0);
  assert_int_equal(cudaGetLastError(), cudaSuccess);
  free(buf);
  aa_backend_destroy(b);
}

/* The ops from threads that have made no CUDA call: the backend must make
 * a context current itself (the driver calls need one). */
typedef struct vm_thread_job {
  aa_backend *b;
  int unmap; /* 0: granularity, reserve and map; 1: unmap and release */
  size_t g, va;
  unsigned char *base;
  void *h;
  int rc;
} vm_thread_job;

static void *vm_thread_fn(void *arg) {
  vm_thread_job *j = arg;
  aa_backend *b = j->b;
  if (j->unmap) {
    b->ops->unmap(b, j->base, j->g, j->h);
    b->ops->va_release(b, j->base, j->va);
    j->rc = AA_OK;
    return NULL;
  }
  j->g = b->ops->map_granularity(b);
  if (j->g == 0) {
    j->rc = AA_ENOTSUP;
    return NULL;
  }
  j->va = 4 * j->g;
  j->rc = b->ops->va_reserve(b, j->va, (void **)&j->base);
  if (j->rc == AA_OK)
    j->rc = b->ops->map(b, j->base + j->g, j->g, &j->h);
  return NULL;
}

static void vm_run_thread(vm_thread_job *j) {
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, vm_thread_fn, j), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
}

static void test_cuda_backend_vm_fresh_thread(void **state) {
  aa_backend *b = NULL;
  aa_cuda_counts c;
  vm_thread_job j;
  unsigned char *buf;
  (void)state;
  NEED_GPU();
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  memset(&j, 0, sizeof j);
  j.b = b;
  vm_run_thread(&j); /* the first granularity query is made there too */
  if (j.rc == AA_ENOTSUP) {
    print_message("[  SKIP    ] no CUDA virtual memory on device 0\n");
    aa_backend_destroy(b);
    skip();
    return;
  }
  assert_int_equal(j.rc, AA_OK);
  assert_non_null(j.h);
  buf = malloc(j.g);
  assert_non_null(buf);
  vm_fill_check(j.base + j.g, j.g, 0x33u, buf);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  j.unmap = 1;
  vm_run_thread(&j);
  assert_int_equal(aa_backend_cuda_counts(b, &c), AA_OK);
  assert_int_equal(c.allocs, 1);
  assert_int_equal(c.frees, 1);
  assert_int_equal(c.failures, 0);
  assert_int_equal(c.bytes_mapped, 0);
  free(buf);
  aa_backend_destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_backend_bad_arguments),
      cmocka_unit_test(test_cuda_backend_device_identity),
      cmocka_unit_test(test_cuda_backend_alloc_free),
      cmocka_unit_test(test_cuda_backend_oom_is_enomem),
      cmocka_unit_test(test_cuda_backend_keeps_current_device),
      cmocka_unit_test(test_cuda_backend_events_pooled),
      cmocka_unit_test(test_cuda_backend_event_pending),
      cmocka_unit_test(test_cuda_pool_cross_stream_reuse),
      cmocka_unit_test(test_cuda_pool_limit_and_release),
      cmocka_unit_test(test_cuda_pool_oom_releases_cache),
      cmocka_unit_test(test_cuda_backend_vm_granularity),
      cmocka_unit_test(test_cuda_backend_vm_map_unmap),
      cmocka_unit_test(test_cuda_backend_vm_map_failures),
      cmocka_unit_test(test_cuda_backend_vm_fresh_thread),
      cmocka_unit_test(test_cuda_backend_vm_alias),
      cmocka_unit_test(test_cuda_backend_vm_alias_run),
      cmocka_unit_test(test_cuda_pool_stitch),
      cmocka_unit_test(test_cuda_pool_stitch_grow),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
