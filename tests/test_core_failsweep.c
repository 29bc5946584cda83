/*
 * test_core_failsweep.c — fails the Nth host backend call for every N of a
 * realistic scenario (once, and from N on), and checks after each run that
 * nothing broke: allocations that succeeded are usable, accounting is exact,
 * and after destroy every mapped byte went back.
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

#define SA ((aa_stream)(uintptr_t)0x10)
#define SB ((aa_stream)(uintptr_t)0x20)

enum { MAXP = 256 };

typedef struct run {
  void *p[MAXP];
  size_t sz[MAXP];
  aa_stream st[MAXP];
  int n;
} run;

static void take(aa_pool *pool, run *r, size_t size, aa_stream s) {
  void *p = aa_alloc(pool, size, s);
  if (p == NULL)
    return;
  /* touch first and last byte: it must be real memory */
  ((volatile char *)p)[0] = 1;
  ((volatile char *)p)[size - 1] = 2;
  r->p[r->n] = p;
  r->sz[r->n] = size;
  r->st[r->n] = s;
  r->n++;
}

static void drop(aa_pool *pool, run *r, int i) {
  assert_int_equal(aa_free(pool, r->p[i], r->sz[i], r->st[i]), AA_OK);
  r->p[i] = r->p[r->n - 1];
  r->sz[i] = r->sz[r->n - 1];
  r->st[i] = r->st[r->n - 1];
  r->n--;
}

/* A mix of what a trainer does: many small sizes on two streams, large
 * tensors, frees in between, a class added with prefill, a release, a
 * retire, and more allocations after. */
static void scenario(aa_pool *pool, aa_backend *b, run *r) {
  static const size_t small[] = {100, 700, 3000, 5000, 40000, 100000, 300000, 1u << 20};
  aa_backend_host_hold_events(b, true);
  for (int round = 0; round < 3; round++) {
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
      take(pool, r, small[i], SA);
      take(pool, r, small[i] + 1, SB);
    }
    take(pool, r, (3u << 20) + 5, SA);
    take(pool, r, 9u << 20, SB);
    for (int i = r->n - 1; i >= 0; i -= 3)
      drop(pool, r, i);
  }
  aa_class_spec add = {4608, 8, 20};
  (void)aa_pool_class_add(pool, &add);
  take(pool, r, 4600, SA);
  if (r->n > 0)
    (void)aa_record_stream(pool, r->p[0], SB);
  aa_pool_release(pool);
  aa_backend_host_hold_events(b, false);
  (void)aa_pool_class_retire(pool, 4608);
  for (int i = 0; i < 10; i++)
    take(pool, r, 2000u + (size_t)i * 9000u, i % 2 ? SA : SB);
  take(pool, r, 20u << 20, SA);
  while (r->n > 0)
    drop(pool, r, 0);
  aa_pool_trim(pool, 0);
}

/* Runs the scenario with fail_nth(n, every); returns the backend allocs
 * that succeeded. */
static uint64_t one(uint64_t n, bool every) {
  aa_backend *b;
  aa_pool *pool;
  run r;
  memset(&r, 0, sizeof r);
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.tcache_blocks = 4; /* more traffic through the central lists */
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  aa_backend_host_fail_nth(b, n, every);
  scenario(pool, b, &r);
  aa_backend_host_fail_nth(b, 0, false);

  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(pool, &st), AA_OK);
  uint64_t ha, hf, mapped;
  aa_backend_host_counts(b, &ha, &hf, &mapped);
  assert_int_equal(st.bytes_in_use, 0);
  assert_int_equal(st.bytes_requested, 0);
  assert_int_equal(st.allocs, st.frees);
  assert_int_equal(st.invalid_frees, 0);
  assert_int_equal(st.backend_allocs, ha);
  assert_int_equal(st.backend_frees, hf);
  assert_int_equal(st.bytes_reserved, mapped);
  assert_int_equal(st.large_bytes_in_use, 0);
  if (n == 0)
    assert_int_equal(st.ooms, 0);
  /* the pool still works */
  void *x = aa_alloc(pool, 1234, NULL);
  assert_non_null(x);
  assert_int_equal(aa_free(pool, x, 1234, NULL), AA_OK);
  aa_pool_destroy(pool);
  aa_backend_host_counts(b, &ha, &hf, &mapped);
  assert_int_equal(mapped, 0);
  assert_int_equal(ha, hf);
  uint64_t rec, outstanding;
  aa_backend_host_event_counts(b, &rec, &outstanding);
  assert_int_equal(outstanding, 0);
  aa_backend_destroy(b);
  return ha;
}

static void test_core_failsweep_nth_once(void **state) {
  (void)state;
  uint64_t total = one(0, false);
  print_message("scenario: %llu backend allocations\n", (unsigned long long)total);
  assert_true(total > 10);
  for (uint64_t n = 1; n <= total + 1; n++)
    one(n, false);
}

static void test_core_failsweep_nth_onwards(void **state) {
  (void)state;
  uint64_t total = one(0, false);
  for (uint64_t n = 1; n <= total + 1; n++)
    one(n, true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_failsweep_nth_once),
      cmocka_unit_test(test_core_failsweep_nth_onwards),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
