/*
 * test_core_pool.c — pool life cycle, the default ladder, small and large
 * alloc/free, accounting, release, config validation, histogram buckets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "core_test.h" /* core: the host backend's test hooks */

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
} fx;

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  cfg.name = "test";
  assert_int_equal(aa_pool_new(&cfg, &f->p), AA_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  aa_pool_destroy(f->p);
  uint64_t a, fr, mapped;
  aa_backend_host_counts(f->b, &a, &fr, &mapped);
  assert_int_equal(mapped, 0);
  assert_int_equal(a, fr);
  aa_backend_destroy(f->b);
  free(f);
  return 0;
}

static void test_core_pool_config_defaults(void **state) {
  (void)state;
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  assert_int_equal(cfg.version, AA_POOL_CONFIG_VERSION);
  assert_int_equal(cfg.slab_size, 2u << 20);
  assert_int_equal(cfg.min_block, 512);
  assert_int_equal(cfg.max_small, 1u << 20);
  assert_int_equal(cfg.classes_per_doubling, 4);
  assert_true(cfg.telemetry);
  assert_null(cfg.backend);
}

static void test_core_pool_bad_config(void **state) {
  (void)state;
  aa_backend *b;
  aa_pool *p = (aa_pool *)1;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  assert_int_equal(aa_pool_new(&cfg, &p), AA_EINVAL); /* no backend */
  assert_null(p);
  cfg.backend = b;
  cfg.slab_size = 100000; /* not a multiple of 64 KiB */
  assert_int_equal(aa_pool_new(&cfg, &p), AA_EINVAL);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.max_small = 1000; /* not a multiple of 512 */
  assert_int_equal(aa_pool_new(&cfg, &p), AA_EINVAL);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.max_small = 4u << 20; /* larger than a slab */
  assert_int_equal(aa_pool_new(&cfg, &p), AA_EINVAL);
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.version = 99;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_EINVAL);
  cfg.version = 1; /* before region and large_page_bytes */
  assert_int_equal(aa_pool_new(&cfg, &p), AA_EINVAL);
  assert_null(p);
  assert_int_equal(aa_pool_new(NULL, &p), AA_EINVAL);
  aa_pool_destroy(NULL);
  aa_backend_destroy(b);
}

static void test_core_pool_default_ladder(void **state) {
  fx *f = *state;
  aa_class_spec v[AA_MAX_CLASSES];
  size_t n = 0;
  uint64_t ver = 0;
  assert_int_equal(aa_pool_classes(f->p, v, AA_MAX_CLASSES, &n, &ver), AA_OK);
  assert_true(n > 20 && n <= AA_MAX_CLASSES);
  assert_true(ver > 0);
  assert_int_equal(v[0].block_size, 512);
  assert_int_equal(v[n - 1].block_size, 1u << 20);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(v[i].block_size % AA_BLOCK_ALIGN, 0);
    if (i > 0) {
      assert_true(v[i].block_size > v[i - 1].block_size);
      /* about four per doubling: never more than a third bigger above 4 KiB */
      if (v[i - 1].block_size >= 4096)
        assert_true(v[i].block_size * 4 <= v[i - 1].block_size * 5 + 4);
    }
  }
  /* 4 KiB .. 8 KiB has exactly four steps */
  size_t in = 0;
  for (size_t i = 0; i < n; i++)
    in += v[i].block_size > 4096 && v[i].block_size <= 8192;
  assert_int_equal(in, 4);
}

static void test_core_pool_small_roundtrip(void **state) {
  fx *f = *state;
  static const size_t sizes[] = {1, 64, 511, 512, 513, 4096, 5000, 65536, 100000, 1u << 20};
  void *ptrs[sizeof sizes / sizeof sizes[0]];
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    ptrs[i] = aa_alloc(f->p, sizes[i], NULL);
    assert_non_null(ptrs[i]);
    assert_int_equal((uintptr_t)ptrs[i] % AA_BLOCK_ALIGN, 0);
    size_t bs = aa_block_size(f->p, ptrs[i]);
    assert_true(bs >= sizes[i]);
    assert_true(bs < sizes[i] * 2 + 1024);
    memset(ptrs[i], (int)i, sizes[i]);
  }
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.allocs, 10);
  assert_int_equal(st.frees, 0);
  uint64_t req = 0;
  for (size_t i = 0; i < 10; i++)
    req += sizes[i];
  assert_int_equal(st.bytes_requested, req);
  assert_true(st.bytes_in_use >= req);
  for (size_t i = 0; i < 10; i++) {
    unsigned char *p = ptrs[i];
    assert_int_equal(p[0], (unsigned char)i);
    assert_int_equal(p[sizes[i] - 1], (unsigned char)i);
    assert_int_equal(aa_free(f->p, ptrs[i], i % 2 ? sizes[i] : 0, NULL), AA_OK);
  }
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.allocs, 10);
  assert_int_equal(st.frees, 10);
  assert_int_equal(st.bytes_in_use, 0);
  assert_int_equal(st.bytes_requested, 0);
  assert_true(st.bytes_reserved > 0);
  assert_true(st.peak_bytes_in_use >= req);
  assert_int_equal(st.invalid_frees, 0);
  assert_int_equal(aa_free(f->p, NULL, 0, NULL), AA_OK);
}

static void test_core_pool_reuse_same_block(void **state) {
  fx *f = *state;
  void *a = aa_alloc(f->p, 1000, NULL);
  assert_non_null(a);
  assert_int_equal(aa_free(f->p, a, 1000, NULL), AA_OK);
  void *b = aa_alloc(f->p, 1000, NULL);
  assert_ptr_equal(a, b); /* LIFO thread cache */
  assert_int_equal(aa_free(f->p, b, 0, NULL), AA_OK);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.cache_hits + st.cache_misses, st.allocs - st.large_allocs);
  assert_true(st.cache_hits >= 1);
}

static void test_core_pool_many_blocks(void **state) {
  fx *f = *state;
  enum { N = 5000 };
  void **v = calloc(N, sizeof *v);
  assert_non_null(v);
  for (int i = 0; i < N; i++) {
    v[i] = aa_alloc(f->p, 600, NULL);
    assert_non_null(v[i]);
    ((char *)v[i])[0] = (char)i;
  }
  /* all distinct */
  for (int i = 0; i < N; i++)
    assert_int_equal(((char *)v[i])[0], (char)i);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_true(st.bytes_reserved >= (uint64_t)N * 1024);
  for (int i = 0; i < N; i++)
    assert_int_equal(aa_free(f->p, v[i], 600, NULL), AA_OK);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.bytes_in_use, 0);
  size_t rel = aa_pool_release(f->p);
  assert_true(rel > 0);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.bytes_reserved, 0);
  free(v);
}

static void test_core_pool_large(void **state) {
  fx *f = *state;
  void *a = aa_alloc(f->p, (1u << 20) + 1, NULL);
  void *b = aa_alloc(f->p, 5u << 20, NULL);
  assert_non_null(a);
  assert_non_null(b);
  memset(a, 1, (1u << 20) + 1);
  memset(b, 2, 5u << 20);
  assert_true(aa_block_size(f->p, a) >= (1u << 20) + 1);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.large_allocs, 2);
  assert_true(st.large_bytes_in_use >= (6u << 20));
  assert_true(st.large_segments >= 1);
  assert_int_equal(aa_free(f->p, a, (1u << 20) + 1, NULL), AA_OK);
  /* reuse of the cached segment */
  void *c = aa_alloc(f->p, (1u << 20) + 100, NULL);
  assert_ptr_equal(c, a);
  assert_int_equal(aa_free(f->p, c, 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, b, 0, NULL), AA_OK);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.large_bytes_in_use, 0);
  assert_int_equal(st.bytes_in_use, 0);
  assert_true(st.large_bytes_reserved > 0);
  aa_pool_release(f->p);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.large_bytes_reserved, 0);
  assert_int_equal(st.large_segments, 0);
}

/* aa_pool_owns: a pointer in the pool's memory (small or large, live or
 * cached), not another pool's or a foreign one, and not once the memory
 * went back to the backend. */
static void test_core_pool_owns(void **state) {
  fx *f = *state;
  aa_pool *q = NULL;
  aa_pool_config cfg;
  int local;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  cfg.name = "other";
  assert_int_equal(aa_pool_new(&cfg, &q), AA_OK);
  void *s = aa_alloc(f->p, 1000, NULL), *l = aa_alloc(f->p, 5u << 20, NULL);
  void *o = aa_alloc(q, 1000, NULL);
  assert_non_null(s);
  assert_non_null(l);
  assert_non_null(o);
  assert_true(aa_pool_owns(f->p, s));
  assert_true(aa_pool_owns(f->p, l));
  assert_true(aa_pool_owns(f->p, (char *)l + (4u << 20)));
  assert_false(aa_pool_owns(f->p, o));
  assert_true(aa_pool_owns(q, o));
  assert_false(aa_pool_owns(q, l));
  assert_false(aa_pool_owns(f->p, &local));
  assert_false(aa_pool_owns(f->p, NULL));
  assert_false(aa_pool_owns(NULL, s));
  assert_int_equal(aa_free(f->p, l, 0, NULL), AA_OK);
  assert_true(aa_pool_owns(f->p, l)); /* cached: still the pool's memory */
  aa_pool_release(f->p);
  assert_false(aa_pool_owns(f->p, l)); /* back to the backend */
  assert_int_equal(aa_free(f->p, s, 0, NULL), AA_OK);
  assert_int_equal(aa_free(q, o, 0, NULL), AA_OK);
  aa_pool_destroy(q);
}

static void test_core_pool_large_passthrough(void **state) {
  (void)state;
  aa_backend *b;
  aa_pool *p;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.large_mode = AA_LARGE_PASSTHROUGH;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  uint64_t a0, f0, m0, a1, f1, m1;
  aa_backend_host_counts(b, &a0, &f0, &m0);
  void *x = aa_alloc(p, 3u << 20, NULL);
  assert_non_null(x);
  aa_backend_host_counts(b, &a1, &f1, &m1);
  assert_int_equal(a1, a0 + 1);
  assert_int_equal(aa_free(p, x, 0, NULL), AA_OK);
  aa_backend_host_counts(b, &a1, &f1, &m1);
  assert_int_equal(f1, f0 + 1);
  assert_int_equal(m1, m0);
  aa_pool_destroy(p);
  aa_backend_destroy(b);
}

static void test_core_pool_hist_buckets(void **state) {
  (void)state;
  assert_int_equal(aa_hist_bucket(0), 0);
  assert_int_equal(aa_hist_bucket(1), 1);
  unsigned prev = aa_hist_bucket(1);
  for (size_t s = 2; s < (1u << 22); s += s / 7 + 1) {
    unsigned b = aa_hist_bucket(s);
    assert_true(b >= prev);
    assert_true(b < AA_HIST_BUCKETS);
    assert_true(aa_hist_bucket_lower(b) <= s);
    if (b + 1 < AA_HIST_BUCKETS)
      assert_true(aa_hist_bucket_lower(b + 1) > s);
    prev = b;
  }
  for (unsigned b = 0; b < AA_HIST_BUCKETS; b++)
    assert_int_equal(aa_hist_bucket((size_t)aa_hist_bucket_lower(b)), b);
  /* four buckets per doubling */
  assert_int_equal(aa_hist_bucket(8192) - aa_hist_bucket(4096), 4);
  assert_int_equal(aa_hist_bucket(SIZE_MAX), AA_HIST_BUCKETS - 1);
}

static void test_core_pool_name_backend(void **state) {
  fx *f = *state;
  assert_string_equal(aa_pool_name(f->p), "test");
  assert_ptr_equal(aa_pool_backend(f->p), f->b);
  assert_string_equal(aa_strerror(AA_EINVAL), "invalid argument");
}

/* More pools than thread-cache slots: the extra ones work without caches;
 * destroying pools and making new ones in their slots is safe. */
static void test_core_pool_many_pools(void **state) {
  (void)state;
  aa_backend *b;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  enum { NP = 20 };
  aa_pool *p[NP];
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < NP; i++)
      assert_int_equal(aa_pool_new(&cfg, &p[i]), AA_OK);
    for (int i = 0; i < NP; i++) {
      void *x = aa_alloc(p[i], 700 + (size_t)i, NULL);
      void *y = aa_alloc(p[i], 700 + (size_t)i, NULL);
      assert_non_null(x);
      assert_ptr_not_equal(x, y);
      assert_int_equal(aa_free(p[NP - 1 - i], x, 0, NULL), i == NP - 1 - i ? AA_OK : AA_EINVAL);
      if (i != NP - 1 - i)
        assert_int_equal(aa_free(p[i], x, 0, NULL), AA_OK);
      assert_int_equal(aa_free(p[i], y, 700 + (size_t)i, NULL), AA_OK);
      aa_pool_stats st;
      aa_pool_stats_get(p[i], &st);
      assert_int_equal(st.allocs, 2);
      assert_int_equal(st.frees, 2);
      assert_int_equal(st.bytes_in_use, 0);
    }
    for (int i = 0; i < NP; i++)
      aa_pool_destroy(p[i]);
  }
  uint64_t mapped;
  aa_backend_host_counts(b, NULL, NULL, &mapped);
  assert_int_equal(mapped, 0);
  aa_backend_destroy(b);
}

static void test_core_pool_huge_and_zero(void **state) {
  fx *f = *state;
  assert_null(aa_alloc(f->p, SIZE_MAX, NULL));
  assert_null(aa_alloc(f->p, SIZE_MAX - 4095, NULL));
  assert_null(aa_alloc(f->p, (size_t)1 << 60, NULL));
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.ooms, 3);
  void *z = aa_alloc(f->p, 0, NULL);
  assert_non_null(z);
  assert_int_equal(aa_block_size(f->p, z), 512);
  assert_int_equal(aa_free(f->p, z, 0, NULL), AA_OK);
  z = aa_alloc(f->p, 0, NULL);
  assert_int_equal(aa_free(f->p, z, 1, NULL), AA_OK); /* 0 is asked as 1 */
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.bytes_in_use, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_pool_config_defaults),
      cmocka_unit_test(test_core_pool_bad_config),
      cmocka_unit_test_setup_teardown(test_core_pool_default_ladder, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_pool_small_roundtrip, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_pool_reuse_same_block, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_pool_many_blocks, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_pool_large, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_pool_owns, setup, teardown),
      cmocka_unit_test(test_core_pool_large_passthrough),
      cmocka_unit_test(test_core_pool_hist_buckets),
      cmocka_unit_test_setup_teardown(test_core_pool_name_backend, setup, teardown),
      cmocka_unit_test(test_core_pool_many_pools),
      cmocka_unit_test_setup_teardown(test_core_pool_huge_and_zero, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
