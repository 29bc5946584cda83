/*
 * test_torch_stats_map.c — the one mapping from pool stats to
 * torch.cuda.memory_stats() figures (torch/src/stats_map.c), on host pools:
 * each figure against the pool's own snapshot, small and large pools adding
 * up to all, a device's pools summed, resetAccumulatedStats' base, and the
 * figures by name (memory_stats keys and the pluggable library's short
 * names; unknown names refused).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "torch_test.h" /* torch: stats_map.h */

#define SMALL 1000
#define NSMALL 3
#define LARGE ((size_t)8 << 20)

typedef struct fx {
  aa_backend *b;
  aa_pool *p, *q;
  void *small[NSMALL];
  void *large;
} fx;

static aa_pool *new_pool(aa_backend *b, const char *name) {
  aa_pool_config cfg;
  aa_pool *p = NULL;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = name;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  return p;
}

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  f->p = new_pool(f->b, "device");
  f->q = new_pool(f->b, "region");
  for (int i = 0; i < NSMALL; i++) {
    f->small[i] = aa_alloc(f->p, SMALL, NULL);
    assert_non_null(f->small[i]);
  }
  f->large = aa_alloc(f->p, LARGE, NULL);
  assert_non_null(f->large);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  for (int i = 0; i < NSMALL; i++) {
    if (f->small[i])
      (void)aa_free(f->p, f->small[i], SMALL, NULL);
  }
  if (f->large)
    (void)aa_free(f->p, f->large, LARGE, NULL);
  aa_pool_destroy(f->q);
  aa_pool_destroy(f->p);
  aa_backend_destroy(f->b);
  free(f);
  return 0;
}

static void map_pool(aa_pool *p, const aa__torch_base *base, aa__torch_sums *t,
                     aa__torch_stats *s) {
  memset(t, 0, sizeof *t);
  assert_int_equal(aa__torch_sums_add_pool(t, p), AA_OK);
  aa__torch_stats_map(t, base, s);
}

static int64_t named(const aa__torch_stats *s, const aa__torch_sums *t, const char *name) {
  int64_t v = -1;
  assert_int_equal(aa__torch_stat_named(s, t, name, &v), AA_OK);
  return v;
}

static void test_torch_stats_map_figures_follow_the_pool(void **state) {
  fx *f = *state;
  aa_pool_stats *st = malloc(sizeof *st);
  aa__torch_sums t;
  aa__torch_stats s;
  assert_non_null(st);
  assert_int_equal(aa_pool_stats_get(f->p, st), AA_OK);
  map_pool(f->p, NULL, &t, &s);
  const int A = AA__TORCH_ALL, S = AA__TORCH_SMALL, L = AA__TORCH_LARGE;

  assert_int_equal(s.allocation[A].current, NSMALL + 1);
  assert_int_equal(s.allocation[S].current, NSMALL);
  assert_int_equal(s.allocation[L].current, 1);
  assert_int_equal(s.allocation[A].allocated, NSMALL + 1);
  assert_int_equal(s.allocation[S].allocated, NSMALL);
  assert_int_equal(s.allocation[L].allocated, 1);
  assert_int_equal(s.allocation[A].freed, 0);
  assert_memory_equal(s.active, s.allocation, sizeof s.active);

  assert_int_equal(s.allocated_bytes[A].current, (int64_t)st->bytes_in_use);
  assert_int_equal(s.allocated_bytes[L].current, (int64_t)st->large_bytes_in_use);
  assert_true(s.allocated_bytes[L].current >= (int64_t)LARGE);
  assert_true(s.allocated_bytes[S].current >= NSMALL * SMALL);
  assert_int_equal(s.allocated_bytes[S].current + s.allocated_bytes[L].current,
                   s.allocated_bytes[A].current);
  assert_int_equal(s.allocated_bytes[A].peak, (int64_t)st->peak_bytes_in_use);
  assert_memory_equal(s.active_bytes, s.allocated_bytes, sizeof s.active_bytes);

  assert_int_equal(s.reserved_bytes[A].current, (int64_t)st->bytes_reserved);
  assert_int_equal(s.reserved_bytes[L].current, (int64_t)st->large_bytes_reserved);
  assert_int_equal(s.requested_bytes[A].current, NSMALL * SMALL + (int64_t)LARGE);
  assert_int_equal(s.requested_bytes[S].current, NSMALL * SMALL);
  assert_int_equal(s.requested_bytes[L].current, (int64_t)LARGE);

  assert_int_equal(s.segment[L].current, (int64_t)st->large_segments);
  assert_true(s.segment[S].current >= 1); /* the small blocks' slab */
  assert_int_equal(s.segment[A].current, s.segment[S].current + s.segment[L].current);
  assert_int_equal(s.segment[A].allocated, (int64_t)st->backend_allocs);
  assert_int_equal(s.num_device_alloc, (int64_t)st->backend_allocs);
  assert_int_equal(s.num_device_free, (int64_t)st->backend_frees);

  assert_int_equal(s.inactive_split_bytes[A].current,
                   (int64_t)(st->bytes_reserved - st->bytes_in_use));
  assert_int_equal(s.inactive_split[S].current, s.inactive_split[A].current);
  assert_int_equal(s.num_ooms, 0);
  assert_int_equal(s.num_alloc_retries, 0);
  assert_int_equal(s.max_split_size, INT64_MAX);
  assert_int_equal(s.oversize_allocations.current, 0);
  free(st);
}

static void test_torch_stats_map_frees_by_pool_kind(void **state) {
  fx *f = *state;
  aa__torch_sums t;
  aa__torch_stats s;
  assert_int_equal(aa_free(f->p, f->large, LARGE, NULL), AA_OK);
  f->large = NULL;
  assert_int_equal(aa_free(f->p, f->small[0], SMALL, NULL), AA_OK);
  f->small[0] = NULL;
  map_pool(f->p, NULL, &t, &s);
  assert_int_equal(s.allocation[AA__TORCH_LARGE].current, 0);
  assert_int_equal(s.allocation[AA__TORCH_LARGE].freed, 1);
  assert_int_equal(s.allocation[AA__TORCH_SMALL].current, NSMALL - 1);
  assert_int_equal(s.allocation[AA__TORCH_SMALL].freed, 1);
  assert_int_equal(s.allocation[AA__TORCH_ALL].freed, 2);
  assert_int_equal(s.allocated_bytes[AA__TORCH_LARGE].current, 0);
  /* the peak stays */
  assert_true(s.allocated_bytes[AA__TORCH_ALL].peak >= (int64_t)LARGE);
}

static void test_torch_stats_map_sums_a_devices_pools(void **state) {
  fx *f = *state;
  aa__torch_sums one, both;
  aa__torch_stats s1, s2;
  void *r = aa_alloc(f->q, SMALL, NULL);
  assert_non_null(r);
  map_pool(f->p, NULL, &one, &s1);
  memset(&both, 0, sizeof both);
  assert_int_equal(aa__torch_sums_add_pool(&both, f->p), AA_OK);
  assert_int_equal(aa__torch_sums_add_pool(&both, f->q), AA_OK);
  aa__torch_stats_map(&both, NULL, &s2);
  assert_int_equal(s2.allocation[AA__TORCH_ALL].current, s1.allocation[AA__TORCH_ALL].current + 1);
  assert_int_equal(s2.requested_bytes[AA__TORCH_SMALL].current,
                   s1.requested_bytes[AA__TORCH_SMALL].current + SMALL);
  assert_true(s2.reserved_bytes[AA__TORCH_ALL].current > s1.reserved_bytes[AA__TORCH_ALL].current);
  assert_int_equal(both.classes, 2 * one.classes);
  assert_int_equal(aa_free(f->q, r, SMALL, NULL), AA_OK);
}

static void test_torch_stats_map_reset_accumulated(void **state) {
  fx *f = *state;
  aa__torch_sums t;
  aa__torch_stats s;
  aa__torch_base base;
  map_pool(f->p, NULL, &t, &s);
  aa__torch_base_take(&base, &t);
  map_pool(f->p, &base, &t, &s);
  assert_int_equal(s.allocation[AA__TORCH_ALL].allocated, 0);
  assert_int_equal(s.allocation[AA__TORCH_LARGE].allocated, 0);
  assert_int_equal(s.num_device_alloc, 0);
  /* current figures do not reset */
  assert_int_equal(s.allocation[AA__TORCH_ALL].current, NSMALL + 1);

  void *a = aa_alloc(f->p, SMALL, NULL);
  void *b = aa_alloc(f->p, LARGE, NULL);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(aa_free(f->p, b, LARGE, NULL), AA_OK);
  map_pool(f->p, &base, &t, &s);
  assert_int_equal(s.allocation[AA__TORCH_ALL].allocated, 2);
  assert_int_equal(s.allocation[AA__TORCH_ALL].freed, 1);
  assert_int_equal(s.allocation[AA__TORCH_SMALL].allocated, 1);
  assert_int_equal(s.allocation[AA__TORCH_SMALL].freed, 0);
  assert_int_equal(s.allocation[AA__TORCH_LARGE].allocated, 1);
  assert_int_equal(s.allocation[AA__TORCH_LARGE].freed, 1);
  assert_int_equal(aa_free(f->p, a, SMALL, NULL), AA_OK);
}

static void test_torch_stats_map_by_name(void **state) {
  fx *f = *state;
  aa__torch_sums t;
  aa__torch_stats s;
  aa_pool_set_limit(f->p, (size_t)1 << 30);
  map_pool(f->p, NULL, &t, &s);
  assert_int_equal(named(&s, &t, "allocated_bytes.all.current"),
                   s.allocated_bytes[AA__TORCH_ALL].current);
  assert_int_equal(named(&s, &t, "segment.large_pool.peak"), s.segment[AA__TORCH_LARGE].peak);
  assert_int_equal(named(&s, &t, "allocation.small_pool.allocated"), NSMALL);
  assert_int_equal(named(&s, &t, "inactive_split_bytes.small_pool.freed"), 0);
  assert_int_equal(named(&s, &t, "requested_bytes.large_pool.current"), (int64_t)LARGE);
  assert_int_equal(named(&s, &t, "num_ooms"), 0);
  assert_int_equal(named(&s, &t, "max_split_size"), INT64_MAX);
  assert_int_equal(named(&s, &t, "oversize_allocations.current"), 0);
  /* the pluggable library's short names: the same figures */
  assert_int_equal(named(&s, &t, "in_use"), s.allocated_bytes[AA__TORCH_ALL].current);
  assert_int_equal(named(&s, &t, "reserved"), s.reserved_bytes[AA__TORCH_ALL].current);
  assert_int_equal(named(&s, &t, "peak_in_use"), s.allocated_bytes[AA__TORCH_ALL].peak);
  assert_int_equal(named(&s, &t, "requested"), NSMALL * SMALL + (int64_t)LARGE);
  assert_int_equal(named(&s, &t, "allocs"), NSMALL + 1);
  assert_int_equal(named(&s, &t, "frees"), 0);
  assert_int_equal(named(&s, &t, "backend_allocs"), s.num_device_alloc);
  assert_int_equal(named(&s, &t, "limit"), (int64_t)1 << 30);
  assert_int_equal(named(&s, &t, "classes"), (int64_t)t.classes);
  assert_true(t.classes > 20);
  assert_int_equal(named(&s, &t, "invalid_frees"), 0);
  assert_int_equal(named(&s, &t, "pending"), 0);

  static const char *const bad[] = {
      "",
      "nosuch",
      "allocated_bytes",
      "allocated_bytes.",
      "allocated_bytes.all",
      "allocated_bytes.all.",
      "allocated_bytes.all.cur",
      "allocated_bytes.all.current.x",
      "allocated_bytes.every.current",
      "allocated_bytesx.all.current",
      "oversize_allocations.all.current",
      "num_ooms.current",
      "In_use",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int64_t v = 12345;
    if (aa__torch_stat_named(&s, &t, bad[i], &v) != AA_EINVAL || v != 0)
      fail_msg("name \"%s\" was not refused (value %lld)", bad[i], (long long)v);
  }
  int64_t v = 12345;
  assert_int_equal(aa__torch_stat_named(&s, &t, NULL, &v), AA_EINVAL);
  assert_int_equal(v, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_torch_stats_map_figures_follow_the_pool, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_torch_stats_map_frees_by_pool_kind, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_stats_map_sums_a_devices_pools, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_stats_map_reset_accumulated, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_stats_map_by_name, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
