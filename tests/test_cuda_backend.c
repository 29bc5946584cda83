/*
 * test_cuda_backend.c — the CUDA device backend and a pool over it:
 * argument checks (run everywhere), then on a GPU: alloc/free alignment,
 * out-of-memory as AA_ENOMEM with the CUDA error cleared, the caller's
 * current device left alone, pooled events, pending events while a stream is
 * held by a host callback, and stream-ordered reuse in a pool.
 *
 * Without a GPU (CI) every GPU test calls cmocka's skip() after printing why.
 */
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

#define NEED_GPU()                                                             \
  do {                                                                         \
    if (!have_gpu()) {                                                         \
      skip();                                                                  \
      return;                                                                  \
    }                                                                          \
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_backend_bad_arguments),
      cmocka_unit_test(test_cuda_backend_alloc_free),
      cmocka_unit_test(test_cuda_backend_oom_is_enomem),
      cmocka_unit_test(test_cuda_backend_keeps_current_device),
      cmocka_unit_test(test_cuda_backend_events_pooled),
      cmocka_unit_test(test_cuda_backend_event_pending),
      cmocka_unit_test(test_cuda_pool_cross_stream_reuse),
      cmocka_unit_test(test_cuda_pool_limit_and_release),
      cmocka_unit_test(test_cuda_pool_oom_releases_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
