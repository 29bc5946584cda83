/*
 * test_cuda_pinned.c — the pinned host backend, staging buffers, mapped
 * (zero-copy) device pointers and the packer: argument checks everywhere;
 * on a GPU, data round trips, alignment of packed offsets, the full-buffer
 * error, double buffering across several flushes, and that a staging buffer
 * whose copy is still queued is not handed out again.
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
#include "adaptalloc/transfer.h"

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

typedef struct gate {
  volatile int open;
} gate;

static void CUDART_CB gate_fn(void *user) {
  gate *g = user;
  while (!__atomic_load_n(&g->open, __ATOMIC_ACQUIRE))
    ;
}

typedef struct fixture {
  aa_backend *b;
  aa_pool *pool;
} fixture;

static int setup_pool(void **state) {
  static fixture f;
  aa_pool_config cfg;
  memset(&f, 0, sizeof f);
  *state = &f;
  if (aa_cuda_device_count() == 0)
    return 0;
  if (aa_backend_pinned_new(&f.b) != AA_OK)
    return -1;
  aa_pool_config_init(&cfg);
  cfg.name = "test-pinned";
  cfg.backend = f.b;
  if (aa_pool_new(&cfg, &f.pool) != AA_OK)
    return -1;
  return 0;
}

static int teardown_pool(void **state) {
  fixture *f = *state;
  aa_pool_destroy(f->pool);
  aa_backend_destroy(f->b);
  f->pool = NULL;
  f->b = NULL;
  return 0;
}

/* ------------------------------------------------------------------ tests */

static void test_cuda_pinned_bad_arguments(void **state) {
  aa_packer *pk = (aa_packer *)0x1;
  void *d = (void *)0x1;
  int x = 0;
  size_t off = 7;
  (void)state;
  assert_null(aa_staging_get(NULL, 64));
  assert_int_equal(aa_staging_put(NULL, &x, 4, AA_STREAM_HOST), AA_EINVAL);
  assert_int_equal(aa_packer_new(NULL, 0, &pk), AA_EINVAL);
  assert_null(pk);
  assert_int_equal(aa_packer_new(NULL, 64, NULL), AA_EINVAL);
  assert_int_equal(aa_packer_add(NULL, &x, 4, &off), AA_EINVAL);
  assert_int_equal(off, 0);
  assert_int_equal(aa_packer_used(NULL), 0);
  {
    const void *srcs[1] = {&x};
    size_t lens[1] = {4}, offs[1] = {9};
    assert_int_equal(aa_packer_add_many(NULL, srcs, lens, 1, offs), AA_EINVAL);
    assert_int_equal(aa_packer_set_threads(NULL, 3), 1);
  }
  assert_int_equal(aa_packer_flush(NULL, &x, NULL), AA_EINVAL);
  assert_int_equal(aa_packer_sync(NULL), AA_EINVAL);
  aa_packer_destroy(NULL);
  assert_int_equal(aa_pinned_device_ptr(NULL, &d), AA_EINVAL);
  assert_null(d);
  if (aa_cuda_device_count() == 0) {
    aa_backend *b = (aa_backend *)0x1;
    assert_int_equal(aa_backend_pinned_new(&b), AA_ENODEV);
    assert_null(b);
  }
}

static void test_cuda_pinned_backend_mapped(void **state) {
  fixture *f = *state;
  struct cudaPointerAttributes a;
  void *p = NULL, *d = NULL, *d2 = NULL;
  aa_cuda_counts c;
  (void)state;
  NEED_GPU();
  assert_int_equal(f->b->kind, AA_BACKEND_PINNED);
  assert_int_equal(f->b->ops->alloc(f->b, 1u << 20, &p), AA_OK);
  assert_int_equal((uintptr_t)p & 4095u, 0);
  assert_int_equal(cudaPointerGetAttributes(&a, p), cudaSuccess);
  assert_int_equal(a.type, cudaMemoryTypeHost);
  assert_int_equal(aa_pinned_device_ptr(p, &d), AA_OK);
  assert_non_null(d);
  assert_int_equal(aa_pinned_device_ptr((char *)p + 4096, &d2), AA_OK);
  assert_ptr_equal(d2, (char *)d + 4096);
  /* Zero-copy: a device-side memset through the device pointer is visible
   * to the host. */
  memset(p, 0, 4096);
  assert_int_equal(cudaMemset(d, 0x5a, 4096), cudaSuccess);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(((unsigned char *)p)[4095], 0x5a);
  /* Pageable memory is not mapped pinned memory. */
  {
    char *heap = malloc(64);
    assert_non_null(heap);
    assert_int_not_equal(aa_pinned_device_ptr(heap, &d2), AA_OK);
    assert_null(d2);
    free(heap);
  }
  assert_int_equal(aa_backend_cuda_counts(f->b, &c), AA_OK);
  assert_true(c.bytes_mapped >= (1u << 20));
  f->b->ops->free(f->b, p, 1u << 20);
}

static void test_cuda_pinned_staging_waits_for_copy(void **state) {
  fixture *f = *state;
  cudaStream_t s;
  gate g = {0};
  void *dev = NULL;
  void *a, *b2[8];
  int i;
  NEED_GPU();
  assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  assert_int_equal(cudaMalloc(&dev, 8192), cudaSuccess);
  a = aa_staging_get(f->pool, 8192);
  assert_non_null(a);
  memset(a, 1, 8192);
  assert_int_equal(cudaLaunchHostFunc(s, gate_fn, &g), cudaSuccess);
  assert_int_equal(cudaMemcpyAsync(dev, a, 8192, cudaMemcpyHostToDevice, s),
                   cudaSuccess);
  assert_int_equal(aa_staging_put(f->pool, a, 8192, s), AA_OK);
  /* The copy has not run yet: the buffer must not come back to the CPU. */
  for (i = 0; i < 8; i++) {
    b2[i] = aa_staging_get(f->pool, 8192);
    assert_non_null(b2[i]);
    assert_ptr_not_equal(b2[i], a);
  }
  for (i = 0; i < 8; i++)
    assert_int_equal(aa_staging_put(f->pool, b2[i], 8192, AA_STREAM_HOST), AA_OK);
  __atomic_store_n(&g.open, 1, __ATOMIC_RELEASE);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
  {
    unsigned char back[16];
    assert_int_equal(cudaMemcpy(back, (char *)dev + 8176, 16, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(back[15], 1);
  }
  assert_int_equal(cudaFree(dev), cudaSuccess);
  assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
}

/* Packs `n` chunks of varying sizes, flushes, copies back and compares. */
static void pack_round_trip(aa_pool *pool) {
  enum { N = 300,
         CAP = 1 << 20 };
  aa_packer *pk = NULL;
  size_t off[N], len[N];
  unsigned char *src, *back;
  void *dev = NULL;
  cudaStream_t s;
  size_t used_before;
  int i, round;

  src = malloc(N * 2048);
  back = malloc(CAP);
  assert_non_null(src);
  assert_non_null(back);
  for (i = 0; i < N * 2048; i++)
    src[i] = (unsigned char)(i * 7 + 3);
  assert_int_equal(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  assert_int_equal(cudaMalloc(&dev, CAP), cudaSuccess);
  assert_int_equal(aa_packer_new(pool, CAP, &pk), AA_OK);
  /* Several rounds: the two buffers alternate and each is reused. */
  for (round = 0; round < 4; round++) {
    for (i = 0; i < N; i++) {
      len[i] = (size_t)(1 + (i * 37 + round) % 2048);
      assert_int_equal(aa_packer_add(pk, src + (size_t)i * 2048, len[i], &off[i]),
                       AA_OK);
      assert_int_equal(off[i] % AA_PACKER_ALIGN, 0);
      if (i > 0)
        assert_true(off[i] >= off[i - 1] + len[i - 1]);
    }
    used_before = aa_packer_used(pk);
    assert_int_equal(used_before, off[N - 1] + len[N - 1]);
    assert_int_equal(aa_packer_flush(pk, dev, s), AA_OK);
    assert_int_equal(aa_packer_used(pk), 0);
    assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
    assert_int_equal(cudaMemcpy(back, dev, used_before, cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (i = 0; i < N; i++)
      assert_memory_equal(back + off[i], src + (size_t)i * 2048, len[i]);
  }
  /* Full: AA_ELIMIT, nothing written, then flush and retry works. */
  {
    size_t o = 0;
    unsigned char *big = calloc(1, CAP);
    assert_non_null(big);
    assert_int_equal(aa_packer_add(pk, big, CAP, &o), AA_OK);
    assert_int_equal(aa_packer_add(pk, big, 1, &o), AA_ELIMIT);
    assert_int_equal(aa_packer_add(pk, big, CAP + 1, &o), AA_EINVAL);
    assert_int_equal(aa_packer_flush(pk, dev, s), AA_OK);
    assert_int_equal(aa_packer_add(pk, big, 1, &o), AA_OK);
    assert_int_equal(o, 0);
    free(big);
  }
  assert_int_equal(aa_packer_wait(pk, NULL), AA_OK);
  assert_int_equal(aa_packer_sync(pk), AA_OK);
  aa_packer_destroy(pk);
  assert_int_equal(cudaFree(dev), cudaSuccess);
  assert_int_equal(cudaStreamDestroy(s), cudaSuccess);
  free(back);
  free(src);
}

/* A device's default stream as its own handle (aa_stream_default): the
 * packer's copy and event, a wait on it and a staging buffer's event go to
 * device 0's legacy stream (an undecoded handle is an invalid stream to CUDA:
 * every call below would fail); a handle of a device that is not there is
 * refused; the caller's current device is kept throughout. */
static void test_cuda_pinned_default_stream_handle(void **state) {
  fixture *f = *state;
  aa_stream d0 = aa_stream_default(0);
  unsigned char src[4096], back[4096];
  aa_packer *pk = NULL;
  void *dev = NULL, *a;
  size_t off = 0;
  int cur = -1, n = 0;
  NEED_GPU();
  assert_int_equal(cudaSetDevice(0), cudaSuccess);
  for (int i = 0; i < 4096; i++)
    src[i] = (unsigned char)(i * 13 + 5);
  assert_int_equal(cudaMalloc(&dev, 4096), cudaSuccess);
  assert_int_equal(aa_packer_new(f->pool, 1 << 16, &pk), AA_OK);
  assert_int_equal(aa_packer_add(pk, src, sizeof src, &off), AA_OK);
  assert_int_equal(aa_packer_flush(pk, dev, d0), AA_OK);
  assert_int_equal(aa_packer_wait(pk, d0), AA_OK);
  assert_int_equal(cudaStreamSynchronize(NULL), cudaSuccess);
  assert_int_equal(cudaMemcpy(back, (char *)dev + off, sizeof back, cudaMemcpyDeviceToHost),
                   cudaSuccess);
  assert_memory_equal(back, src, sizeof src);
  /* a staging buffer read by a copy on device 0's default stream: put back
   * with an event on that stream, handed out again once it completed */
  a = aa_staging_get(f->pool, 4096);
  assert_non_null(a);
  memcpy(a, src, sizeof src);
  assert_int_equal(cudaMemcpyAsync(dev, a, 4096, cudaMemcpyHostToDevice, NULL), cudaSuccess);
  assert_int_equal(aa_staging_put(f->pool, a, 4096, d0), AA_OK);
  assert_int_equal(cudaStreamSynchronize(NULL), cudaSuccess);
  a = aa_staging_get(f->pool, 4096);
  assert_non_null(a);
  assert_int_equal(aa_staging_put(f->pool, a, 4096, AA_STREAM_HOST), AA_OK);
  /* a device that is not there: refused, nothing queued, device kept */
  assert_int_equal(cudaGetDeviceCount(&n), cudaSuccess);
  if (n < AA_STREAM_DEFAULT_DEVICES) {
    assert_int_equal(aa_packer_add(pk, src, 16, &off), AA_OK);
    assert_int_not_equal(aa_packer_flush(pk, dev, aa_stream_default(n)), AA_OK);
  }
  assert_int_equal(cudaGetDevice(&cur), cudaSuccess);
  assert_int_equal(cur, 0);
  assert_int_equal(aa_packer_sync(pk), AA_OK);
  aa_packer_destroy(pk);
  assert_int_equal(cudaFree(dev), cudaSuccess);
}

static void test_cuda_pinned_packer_round_trip_pool(void **state) {
  fixture *f = *state;
  NEED_GPU();
  pack_round_trip(f->pool);
}

static void test_cuda_pinned_packer_round_trip_hostalloc(void **state) {
  (void)state;
  NEED_GPU();
  pack_round_trip(NULL);
}

/* add_many: a 4 MiB batch copied by 3 threads lands where the offsets say;
 * a batch that does not fit is refused whole. */
static void test_cuda_pinned_packer_add_many(void **state) {
  enum { N = 1000,
         CAP = 8 << 20 };
  fixture *f = *state;
  aa_packer *pk = NULL;
  const void **srcs;
  size_t *lens, *offs;
  unsigned char *data, *back;
  void *dev = NULL;
  size_t used, i;
  NEED_GPU();
  srcs = malloc(N * sizeof *srcs);
  lens = malloc(N * sizeof *lens);
  offs = malloc(N * sizeof *offs);
  data = malloc((size_t)N * 4096);
  back = malloc(CAP);
  assert_non_null(srcs);
  assert_non_null(lens);
  assert_non_null(offs);
  assert_non_null(data);
  assert_non_null(back);
  for (i = 0; i < (size_t)N * 4096; i++)
    data[i] = (unsigned char)(i * 13 + 1);
  for (i = 0; i < N; i++) {
    srcs[i] = data + i * 4096;
    lens[i] = 4096 - (i % 7) * 100;
  }
  assert_int_equal(cudaMalloc(&dev, CAP), cudaSuccess);
  assert_int_equal(aa_packer_new(f->pool, CAP, &pk), AA_OK);
  assert_int_equal(aa_packer_set_threads(pk, 3), 3);
  assert_int_equal(aa_packer_add_many(pk, srcs, lens, N, offs), AA_OK);
  used = aa_packer_used(pk);
  assert_int_equal(used, offs[N - 1] + lens[N - 1]);
  for (i = 0; i < N; i++)
    assert_int_equal(offs[i] % AA_PACKER_ALIGN, 0);
  /* Too much for what is left: refused whole, nothing changes. */
  {
    const void *big[2] = {data, data};
    size_t bl[2] = {4096, CAP - 4096}, bo[2] = {1, 1};
    assert_int_equal(aa_packer_add_many(pk, big, bl, 2, bo), AA_ELIMIT);
    assert_int_equal(bo[0], 0);
    assert_int_equal(aa_packer_used(pk), used);
  }
  assert_int_equal(aa_packer_flush(pk, dev, NULL), AA_OK);
  assert_int_equal(aa_packer_sync(pk), AA_OK);
  assert_int_equal(cudaMemcpy(back, dev, used, cudaMemcpyDeviceToHost), cudaSuccess);
  for (i = 0; i < N; i++)
    assert_memory_equal(back + offs[i], srcs[i], lens[i]);
  aa_packer_destroy(pk);
  assert_int_equal(cudaFree(dev), cudaSuccess);
  free(back);
  free(data);
  free(offs);
  free(lens);
  free(srcs);
}

static void test_cuda_pinned_packer_rejects_device_pool(void **state) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  aa_packer *pk = (aa_packer *)0x1;
  (void)state;
  NEED_GPU();
  assert_int_equal(aa_backend_cuda_new(0, &b), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = "not-pinned";
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  assert_int_equal(aa_packer_new(pool, 4096, &pk), AA_EINVAL);
  assert_null(pk);
  assert_null(aa_staging_get(pool, 64));
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cuda_pinned_bad_arguments),
      cmocka_unit_test(test_cuda_pinned_backend_mapped),
      cmocka_unit_test(test_cuda_pinned_staging_waits_for_copy),
      cmocka_unit_test(test_cuda_pinned_packer_round_trip_pool),
      cmocka_unit_test(test_cuda_pinned_packer_round_trip_hostalloc),
      cmocka_unit_test(test_cuda_pinned_packer_add_many),
      cmocka_unit_test(test_cuda_pinned_packer_rejects_device_pool),
      cmocka_unit_test(test_cuda_pinned_default_stream_handle),
  };
  return cmocka_run_group_tests(tests, setup_pool, teardown_pool);
}
