/*
 * test_core_managed.c — the managed-memory backend: the safety cap's
 * arithmetic and message as a pure function (fake figures, everywhere), the
 * config's defaults and names, argument checks; without CUDA the stub's
 * AA_ENOTSUP, built with CUDA but without a GPU AA_ENODEV; on a GPU a pool
 * over the backend: data through prefetches to the device and back, the
 * advice as the driver reports it, residency in the pool's stats, and a
 * refusal by the cap (a request larger than the device's free memory, which
 * the cap refuses before anything is allocated).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"
#include "core_test.h" /* core/src/managed_cap.h */

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

/* ------------------------------------------------------------------ cap */

static aa__managed_cap figures(uint64_t req, uint64_t held, uint64_t on_dev,
                               uint64_t free_b) {
  aa__managed_cap c;
  memset(&c, 0, sizeof c);
  c.requested = req;
  c.held = held;
  c.held_on_device = on_dev;
  c.device_free = free_b;
  c.device = 3;
  return c;
}

static void test_core_managed_cap_allows_within_free(void **state) {
  char msg[256] = "junk";
  (void)state;
  aa__managed_cap c = figures(2 * MIB, 0, 0, 8 * GIB);
  assert_int_equal(aa__managed_cap_check(&c, msg, sizeof msg), AA_OK);
  assert_string_equal(msg, "");
  /* exactly free: allowed */
  c = figures(6 * GIB, 2 * GIB, 0, 8 * GIB);
  assert_int_equal(aa__managed_cap_check(&c, msg, sizeof msg), AA_OK);
}

static void test_core_managed_cap_refuses_over_free(void **state) {
  char msg[256];
  (void)state;
  /* held + requested one byte over free */
  aa__managed_cap c = figures(6 * GIB + 1, 2 * GIB, 0, 8 * GIB);
  assert_int_equal(aa__managed_cap_check(&c, msg, sizeof msg), AA_ELIMIT);
  assert_non_null(strstr(msg, "device 3"));
  assert_non_null(strstr(msg, "6442450945 bytes refused")); /* requested */
  assert_non_null(strstr(msg, "holds 2147483648 bytes"));   /* held */
  assert_non_null(strstr(msg, "(0 last prefetched"));
  assert_non_null(strstr(msg, "has 8589934592 bytes free")); /* free */
  assert_non_null(strstr(msg, "allow_oversubscribe is false"));
  /* a request alone larger than free, nothing held */
  c = figures(16 * GIB, 0, 0, 8 * GIB);
  assert_int_equal(aa__managed_cap_check(&c, NULL, 0), AA_ELIMIT);
}

static void test_core_managed_cap_counts_held_on_device(void **state) {
  char msg[256];
  (void)state;
  /* 4 GiB held, all prefetched to the device (already out of free): another
   * 4 GiB fits in 4 GiB free */
  aa__managed_cap c = figures(4 * GIB, 4 * GIB, 4 * GIB, 4 * GIB);
  assert_int_equal(aa__managed_cap_check(&c, msg, sizeof msg), AA_OK);
  /* none on the device: the held 4 GiB would need room too */
  c = figures(4 * GIB, 4 * GIB, 0, 4 * GIB);
  assert_int_equal(aa__managed_cap_check(&c, msg, sizeof msg), AA_ELIMIT);
  /* held_on_device beyond held is clamped to held (and said so) */
  c = figures(4 * GIB + 1, 1 * GIB, 9 * GIB, 4 * GIB);
  assert_int_equal(aa__managed_cap_check(&c, msg, sizeof msg), AA_ELIMIT);
  assert_non_null(strstr(msg, "(1073741824 last prefetched"));
}

static void test_core_managed_cap_oversubscribe_allowed(void **state) {
  char msg[64] = "junk";
  (void)state;
  aa__managed_cap c = figures(64 * GIB, 64 * GIB, 0, 1 * GIB);
  c.allow_oversubscribe = true;
  assert_int_equal(aa__managed_cap_check(&c, msg, sizeof msg), AA_OK);
  assert_string_equal(msg, "");
}

static void test_core_managed_cap_no_overflow(void **state) {
  char msg[16];
  (void)state;
  /* sums past 2^64 must refuse, not wrap around to "fits" */
  aa__managed_cap c = figures(UINT64_MAX, 2, 0, 8 * GIB);
  assert_int_equal(aa__managed_cap_check(&c, msg, sizeof msg), AA_ELIMIT);
  assert_int_equal(strlen(msg), sizeof msg - 1); /* truncated, terminated */
  c = figures(UINT64_MAX - 1, 0, 0, UINT64_MAX);
  assert_int_equal(aa__managed_cap_check(&c, NULL, 0), AA_OK);
}

/* ------------------------------------------------------------- config */

static void test_core_managed_config_defaults(void **state) {
  aa_managed_config c;
  (void)state;
  memset(&c, 0x5a, sizeof c);
  aa_managed_config_init(&c);
  assert_int_equal(c.version, AA_MANAGED_CONFIG_VERSION);
  assert_int_equal(c.size, sizeof c);
  assert_int_equal(c.device, 0);
  assert_int_equal(c.preferred_location, AA_MANAGED_LOC_NONE);
  assert_int_equal(c.accessed_by, AA_MANAGED_LOC_NONE);
  assert_false(c.read_mostly);
  assert_false(c.allow_oversubscribe);
  assert_string_equal(aa_managed_location_name(AA_MANAGED_LOC_NONE), "none");
  assert_string_equal(aa_managed_location_name(AA_MANAGED_LOC_DEVICE), "device");
  assert_string_equal(aa_managed_location_name(AA_MANAGED_LOC_HOST), "host");
  assert_string_equal(aa_managed_location_name((aa_managed_location)7), "?");
}

/* Without a usable backend: the stub says AA_ENOTSUP for everything; a CUDA
 * build without a GPU refuses to make the backend with AA_ENODEV. */
static void test_core_managed_unavailable(void **state) {
  aa_managed_config c;
  aa_managed_range r;
  aa_managed_refusal f;
  aa_backend *b = (aa_backend *)(uintptr_t)1;
  char x[64];
  (void)state;
  aa_managed_config_init(&c);
  if (AA_TEST_WITH_CUDA && aa_cuda_device_count() > 0) {
    skip(); /* the GPU tests below cover it */
    return;
  }
  if (!AA_TEST_WITH_CUDA) {
    assert_int_equal(aa_backend_managed_new(&c, &b), AA_ENOTSUP);
    assert_null(b);
    assert_int_equal(aa_managed_prefetch(NULL, x, sizeof x, 0, NULL), AA_ENOTSUP);
    assert_int_equal(aa_managed_advise(x, sizeof x, &c), AA_ENOTSUP);
    assert_int_equal(aa_managed_range_info(x, sizeof x, &r), AA_ENOTSUP);
    assert_int_equal(r.version, AA_MANAGED_RANGE_VERSION);
    assert_int_equal(r.preferred_location, AA_MANAGED_UNSET);
    assert_int_equal(aa_managed_last_refusal(NULL, &f), AA_ENOTSUP);
    assert_int_equal(f.count, 0);
  } else {
    assert_int_equal(aa_backend_managed_new(&c, &b), AA_ENODEV);
    assert_null(b);
    /* host memory is not managed memory */
    assert_int_equal(aa_managed_prefetch(NULL, x, sizeof x, AA_MANAGED_HOST, NULL),
                     AA_EINVAL);
    assert_int_equal(aa_managed_range_info(x, sizeof x, &r), AA_EINVAL);
    assert_int_equal(aa_managed_last_refusal(NULL, &f), AA_EINVAL);
  }
  assert_false(aa_backend_is_managed(NULL));
}

static void test_core_managed_bad_arguments(void **state) {
  aa_managed_config c;
  aa_backend *b = (aa_backend *)(uintptr_t)1;
  int want = AA_TEST_WITH_CUDA ? AA_EINVAL : AA_ENOTSUP;
  (void)state;
  assert_int_equal(aa_backend_managed_new(NULL, &b), want);
  assert_null(b);
  aa_managed_config_init(&c);
  c.version = AA_MANAGED_CONFIG_VERSION + 1;
  assert_int_equal(aa_backend_managed_new(&c, &b), want);
  aa_managed_config_init(&c);
  c.preferred_location = (aa_managed_location)9;
  assert_int_equal(aa_backend_managed_new(&c, &b), want);
  aa_managed_config_init(&c);
  c.device = -1;
  assert_int_equal(aa_backend_managed_new(&c, &b), want);
  assert_null(b);
}

/* ------------------------------------------------------------- on a GPU */

#if AA_TEST_WITH_CUDA
#include <cuda_runtime.h>

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

static aa_pool *managed_pool(const aa_managed_config *c, aa_backend **b) {
  aa_pool_config pc;
  aa_pool *pool = NULL;
  assert_int_equal(aa_backend_managed_new(c, b), AA_OK);
  assert_true(aa_backend_is_managed(*b));
  assert_string_equal((*b)->name, "managed");
  assert_int_equal((*b)->kind, AA_BACKEND_DEVICE);
  aa_pool_config_init(&pc);
  pc.name = "managed-test";
  pc.backend = *b;
  assert_int_equal(aa_pool_new(&pc, &pool), AA_OK);
  return pool;
}

static void test_core_managed_gpu_prefetch_and_data(void **state) {
  aa_managed_config c;
  aa_backend *b = NULL;
  aa_managed_range r;
  aa_pool_stats *st = NULL;
  size_t n = 4 * MIB;
  unsigned char *p;
  (void)state;
  NEED_GPU();
  st = calloc(1, sizeof *st);
  assert_non_null(st);
  aa_managed_config_init(&c);
  aa_pool *pool = managed_pool(&c, &b);
  p = aa_alloc(pool, n, NULL);
  assert_non_null(p);
  memset(p, 0xab, n); /* the host writes managed memory directly */
  assert_int_equal(aa_managed_prefetch(b, p, n, 0, NULL), AA_OK);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(aa_managed_range_info(p, n, &r), AA_OK);
  assert_int_equal(r.last_prefetch_location, 0);
  assert_int_equal(aa_pool_stats_get(pool, st), AA_OK);
  assert_true(st->managed_device_bytes >= n);
  assert_int_equal(cudaMemset(p, 0x5c, n), cudaSuccess); /* the device writes */
  assert_int_equal(aa_managed_prefetch(NULL, p, n, AA_MANAGED_HOST, NULL), AA_OK);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(aa_managed_range_info(p, n, &r), AA_OK);
  assert_int_equal(r.last_prefetch_location, AA_MANAGED_HOST);
  assert_int_equal(p[0], 0x5c);
  assert_int_equal(p[n - 1], 0x5c);
  assert_int_equal(aa_pool_stats_get(pool, st), AA_OK);
  assert_true(st->managed_host_bytes >= n);
  /* a range that is not the backend's */
  unsigned char host[64];
  assert_int_equal(aa_managed_prefetch(b, host, sizeof host, 0, NULL), AA_EINVAL);
  assert_int_equal(aa_managed_prefetch(NULL, host, sizeof host, 0, NULL), AA_EINVAL);
  assert_int_equal(aa_managed_prefetch(b, p, n, 999, NULL), AA_EINVAL);
  assert_int_equal(aa_free(pool, p, n, NULL), AA_OK);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
  free(st);
}

static void test_core_managed_gpu_advice(void **state) {
  aa_managed_config c;
  aa_backend *b = NULL;
  aa_managed_range r;
  size_t n = 4 * MIB;
  void *p;
  (void)state;
  NEED_GPU();
  aa_managed_config_init(&c);
  c.preferred_location = AA_MANAGED_LOC_DEVICE;
  c.accessed_by = AA_MANAGED_LOC_HOST;
  c.read_mostly = true;
  aa_pool *pool = managed_pool(&c, &b);
  p = aa_alloc(pool, n, NULL);
  assert_non_null(p);
  assert_int_equal(aa_managed_range_info(p, n, &r), AA_OK);
  assert_int_equal(r.preferred_location, 0);
  assert_int_equal(r.read_mostly, 1);
  assert_true(r.n_accessed_by >= 1);
  assert_int_equal(r.accessed_by[0], AA_MANAGED_HOST);
  /* advice given later, by range */
  aa_managed_config_init(&c);
  c.preferred_location = AA_MANAGED_LOC_HOST;
  assert_int_equal(aa_managed_advise(p, n, &c), AA_OK);
  assert_int_equal(aa_managed_range_info(p, n, &r), AA_OK);
  assert_int_equal(r.preferred_location, AA_MANAGED_HOST);
  assert_int_equal(aa_free(pool, p, n, NULL), AA_OK);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}

/* The cap: a request larger than the device's free memory is refused
 * before any memory is allocated (the only over-free request this suite
 * makes; it never reaches cudaMallocManaged). */
static void test_core_managed_gpu_cap_refuses(void **state) {
  aa_managed_config c;
  aa_managed_refusal f;
  aa_backend *b = NULL;
  size_t free_b = 0, total = 0;
  char want[64];
  (void)state;
  NEED_GPU();
  aa_managed_config_init(&c);
  aa_pool *pool = managed_pool(&c, &b);
  assert_int_equal(aa_managed_last_refusal(b, &f), AA_ENOENT);
  assert_int_equal(f.count, 0);
  assert_int_equal(aa_cuda_mem_info(0, &free_b, &total), AA_OK);
  size_t ask = free_b + free_b / 2 + 64 * MIB;
  assert_null(aa_alloc(pool, ask, NULL));
  assert_int_equal(aa_managed_last_refusal(b, &f), AA_OK);
  assert_true(f.count >= 1);
  assert_true(f.requested >= ask);
  assert_int_equal(f.held, 0);
  assert_true(f.device_free > 0 && f.device_free < f.requested);
  snprintf(want, sizeof want, "reservation of %llu bytes refused",
           (unsigned long long)f.requested);
  assert_non_null(strstr(f.message, want));
  assert_non_null(strstr(f.message, "allow_oversubscribe is false"));
  aa_cuda_counts k;
  assert_int_equal(aa_backend_cuda_counts(b, &k), AA_OK);
  assert_int_equal(k.allocs, 0);
  assert_int_equal(k.bytes_mapped, 0);
  /* the pool still works for what fits */
  void *p = aa_alloc(pool, 2 * MIB, NULL);
  assert_non_null(p);
  assert_int_equal(aa_free(pool, p, 2 * MIB, NULL), AA_OK);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
}
#else
static void test_core_managed_gpu_prefetch_and_data(void **state) {
  (void)state;
  skip();
}
static void test_core_managed_gpu_advice(void **state) {
  (void)state;
  skip();
}
static void test_core_managed_gpu_cap_refuses(void **state) {
  (void)state;
  skip();
}
#endif

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_managed_cap_allows_within_free),
      cmocka_unit_test(test_core_managed_cap_refuses_over_free),
      cmocka_unit_test(test_core_managed_cap_counts_held_on_device),
      cmocka_unit_test(test_core_managed_cap_oversubscribe_allowed),
      cmocka_unit_test(test_core_managed_cap_no_overflow),
      cmocka_unit_test(test_core_managed_config_defaults),
      cmocka_unit_test(test_core_managed_unavailable),
      cmocka_unit_test(test_core_managed_bad_arguments),
      cmocka_unit_test(test_core_managed_gpu_prefetch_and_data),
      cmocka_unit_test(test_core_managed_gpu_advice),
      cmocka_unit_test(test_core_managed_gpu_cap_refuses),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
