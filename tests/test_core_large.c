/*
 * test_core_large.c — the large path: splitting, coalescing, best fit, the
 * cache bound, limit_bytes (one pool's, and one shared by several pools:
 * aa_pool_share_limit) and the out-of-memory release-and-retry.
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

#define MiB ((size_t)1 << 20)

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
} fx;

static fx *make(size_t cache_bound, size_t limit) {
  fx *f = calloc(1, sizeof *f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  cfg.large_cache_bytes = cache_bound;
  cfg.limit_bytes = limit;
  assert_int_equal(aa_pool_new(&cfg, &f->p), AA_OK);
  return f;
}

static void done(fx *f) {
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.large_bytes_in_use, 0);
  aa_pool_destroy(f->p);
  uint64_t a, fr, mapped;
  aa_backend_host_counts(f->b, &a, &fr, &mapped);
  assert_int_equal(mapped, 0);
  assert_int_equal(a, fr);
  aa_backend_destroy(f->b);
  free(f);
}

static uint64_t segs(fx *f) {
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  return st.large_segments;
}

static void test_core_large_split_and_coalesce(void **state) {
  (void)state;
  fx *f = make(0, 0);
  char *a = aa_alloc(f->p, 6 * MiB, NULL);
  assert_non_null(a);
  assert_int_equal(segs(f), 1);
  assert_int_equal(aa_free(f->p, a, 6 * MiB, NULL), AA_OK);
  char *b = aa_alloc(f->p, 2 * MiB, NULL);
  char *c = aa_alloc(f->p, 2 * MiB, NULL);
  char *d = aa_alloc(f->p, 2 * MiB - 4096, NULL);
  assert_ptr_equal(b, a);
  assert_ptr_equal(c, a + 2 * MiB);
  assert_ptr_equal(d, a + 4 * MiB);
  assert_int_equal(segs(f), 1);
  memset(b, 1, 2 * MiB);
  memset(c, 2, 2 * MiB);
  assert_int_equal(aa_free(f->p, c, 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, b, 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, d, 0, NULL), AA_OK);
  /* all three merged back into one 6 MiB chunk */
  char *e = aa_alloc(f->p, 6 * MiB, NULL);
  assert_ptr_equal(e, a);
  assert_int_equal(segs(f), 1);
  assert_int_equal(aa_block_size(f->p, e), 6 * MiB);
  assert_int_equal(aa_free(f->p, e, 0, NULL), AA_OK);
  done(f);
}

static void test_core_large_best_fit(void **state) {
  (void)state;
  fx *f = make(0, 0);
  void *p8 = aa_alloc(f->p, 8 * MiB, NULL);
  void *p2 = aa_alloc(f->p, 2 * MiB, NULL);
  void *p4 = aa_alloc(f->p, 4 * MiB, NULL);
  assert_int_equal(segs(f), 3);
  aa_free(f->p, p8, 0, NULL);
  aa_free(f->p, p2, 0, NULL);
  aa_free(f->p, p4, 0, NULL);
  void *x = aa_alloc(f->p, 2 * MiB - 100, NULL);
  assert_ptr_equal(x, p2);
  void *y = aa_alloc(f->p, 3 * MiB, NULL);
  assert_ptr_equal(y, p4);
  void *z = aa_alloc(f->p, 5 * MiB, NULL);
  assert_ptr_equal(z, p8);
  assert_int_equal(segs(f), 3);
  aa_free(f->p, x, 0, NULL);
  aa_free(f->p, y, 0, NULL);
  aa_free(f->p, z, 0, NULL);
  done(f);
}

static void test_core_large_cache_bound(void **state) {
  (void)state;
  fx *f = make(4 * MiB, 0);
  void *v[3];
  for (int i = 0; i < 3; i++)
    v[i] = aa_alloc(f->p, 4 * MiB, NULL);
  for (int i = 0; i < 3; i++)
    aa_free(f->p, v[i], 0, NULL);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_true(st.large_bytes_reserved <= 4 * MiB);
  assert_int_equal(st.large_bytes_in_use, 0);
  done(f);
}

static void test_core_large_trim(void **state) {
  (void)state;
  fx *f = make(0, 0);
  void *v[4];
  for (int i = 0; i < 4; i++)
    v[i] = aa_alloc(f->p, 4 * MiB, NULL);
  void *small = aa_alloc(f->p, 1000, NULL);
  for (int i = 0; i < 4; i++)
    aa_free(f->p, v[i], 0, NULL);
  size_t r = aa_pool_trim(f->p, 8 * MiB);
  assert_true(r >= 8 * MiB);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_true(st.bytes_reserved - st.bytes_in_use <= 8 * MiB);
  aa_free(f->p, small, 0, NULL);
  done(f);
}

static void test_core_large_limit(void **state) {
  (void)state;
  fx *f = make(0, 4 * MiB);
  assert_null(aa_alloc(f->p, 8 * MiB, NULL));
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.ooms, 1);
  assert_int_equal(st.oom_retries, 1);
  assert_int_equal(st.limit_bytes, 4 * MiB);
  assert_int_equal(st.bytes_reserved, 0);
  void *ok = aa_alloc(f->p, 3 * MiB, NULL);
  assert_non_null(ok);
  aa_free(f->p, ok, 0, NULL);
  /* raising the limit at run time */
  aa_pool_set_limit(f->p, 0);
  void *big = aa_alloc(f->p, 8 * MiB, NULL);
  assert_non_null(big);
  aa_free(f->p, big, 0, NULL);
  done(f);
}

/* A second pool on the same backend, no limit of its own. */
static aa_pool *sharer(fx *f) {
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  aa_pool *q = NULL;
  assert_int_equal(aa_pool_new(&cfg, &q), AA_OK);
  return q;
}

/* A sharer's reservations count against the owner's limit, both ways: the
 * owner is refused what the sharer holds, the sharer what the owner's limit
 * leaves; the sharer's cached memory still serves it; and what it gives
 * back is the owner's again. */
static void test_core_large_shared_limit(void **state) {
  (void)state;
  fx *f = make(0, 0);
  aa_pool *q = sharer(f);
  assert_int_equal(aa_pool_share_limit(q, f->p), AA_OK);
  void *x = aa_alloc(q, 8 * MiB, NULL);
  assert_non_null(x);
  aa_pool_stats st;
  aa_pool_stats_get(q, &st);
  uint64_t held = st.bytes_reserved;
  assert_true(held >= 8 * MiB);
  assert_int_equal(aa_pool_sharers_reserved(f->p), held);
  aa_pool_set_limit(f->p, held + 4 * MiB);
  /* the owner alone would fit 6 MiB under its limit; with the sharer's
   * bytes it does not */
  assert_null(aa_alloc(f->p, 6 * MiB, NULL));
  void *ok = aa_alloc(f->p, 3 * MiB, NULL);
  assert_non_null(ok);
  /* the sharer: freed memory serves it again with no new reservation ... */
  assert_int_equal(aa_free(q, x, 0, NULL), AA_OK);
  void *again = aa_alloc(q, 6 * MiB, NULL);
  assert_non_null(again);
  aa_pool_stats_get(q, &st);
  assert_int_equal(st.bytes_reserved, held);
  /* ... and new memory past the owner's limit is refused */
  assert_null(aa_alloc(q, 16 * MiB, NULL));
  assert_int_equal(aa_free(q, again, 0, NULL), AA_OK);
  aa_pool_destroy(q); /* before its owner, as aa_pool_share_limit asks */
  assert_int_equal(aa_pool_sharers_reserved(f->p), 0);
  void *now = aa_alloc(f->p, 6 * MiB, NULL); /* the sharer's bytes are back */
  assert_non_null(now);
  aa_free(f->p, now, 0, NULL);
  aa_free(f->p, ok, 0, NULL);
  done(f);
}

/* aa_pool_share_limit refuses what it cannot keep, and changes nothing. */
static void test_core_large_shared_limit_refused(void **state) {
  (void)state;
  fx *f = make(0, 0);
  aa_pool *q = sharer(f), *r = sharer(f);
  assert_int_equal(aa_pool_share_limit(NULL, f->p), AA_EINVAL);
  assert_int_equal(aa_pool_share_limit(q, NULL), AA_EINVAL);
  assert_int_equal(aa_pool_share_limit(q, q), AA_EINVAL);
  /* a pool that has reserved memory: its bytes were never counted */
  void *x = aa_alloc(r, 4 * MiB, NULL);
  assert_non_null(x);
  assert_int_equal(aa_pool_share_limit(r, f->p), AA_EINVAL);
  aa_free(r, x, 0, NULL);
  assert_null(aa_pool_limit_owner(q));
  assert_int_equal(aa_pool_share_limit(q, f->p), AA_OK);
  assert_ptr_equal(aa_pool_limit_owner(q), f->p);
  assert_null(aa_pool_limit_owner(f->p));
  assert_null(aa_pool_limit_owner(NULL));
  assert_int_equal(aa_pool_share_limit(q, f->p), AA_EINVAL); /* shares already */
  /* one level: no owner of a sharer, no sharer of another's owner */
  aa_pool *s = sharer(f);
  assert_int_equal(aa_pool_share_limit(s, q), AA_EINVAL);
  assert_int_equal(aa_pool_share_limit(f->p, s), AA_EINVAL);
  assert_int_equal(aa_pool_sharers_reserved(f->p), 0);
  assert_int_equal(aa_pool_sharers_reserved(NULL), 0);
  aa_pool_destroy(s);
  aa_pool_destroy(r);
  aa_pool_destroy(q);
  done(f);
}

/* A sharer refused by its owner's limit while the owner's cache, free,
 * holds it: the out-of-memory retry gives the owner's cache back too (as
 * PyTorch's release_cached_blocks frees the device pool's cache when a
 * MemPool's request fails), and the request is served. */
static void test_core_large_shared_limit_oom_releases_owner(void **state) {
  (void)state;
  fx *f = make(0, 32 * MiB);
  aa_pool *q = sharer(f);
  assert_int_equal(aa_pool_share_limit(q, f->p), AA_OK);
  void *x = aa_alloc(f->p, 30 * MiB, NULL);
  assert_non_null(x);
  assert_int_equal(aa_free(f->p, x, 0, NULL), AA_OK); /* cached by the owner */
  void *y = aa_alloc(q, 16 * MiB, NULL);
  assert_non_null(y);
  aa_pool_stats st;
  aa_pool_stats_get(q, &st);
  assert_int_equal(st.ooms, 0);
  assert_int_equal(aa_free(q, y, 0, NULL), AA_OK);
  aa_pool_destroy(q);
  assert_int_equal(aa_pool_sharers_reserved(f->p), 0);
  done(f);
}

/* Cached memory is given back and the allocation retried. */
static void test_core_large_oom_releases_cache(void **state) {
  (void)state;
  fx *f = make(0, 4 * MiB);
  void *l = aa_alloc(f->p, 3 * MiB, NULL); /* a 4 MiB segment */
  assert_non_null(l);
  aa_free(f->p, l, 0, NULL);            /* cached */
  void *s = aa_alloc(f->p, 1000, NULL); /* needs a 2 MiB slab: over the limit */
  assert_non_null(s);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.oom_retries, 1);
  assert_int_equal(st.ooms, 0);
  assert_int_equal(st.large_bytes_reserved, 0);
  assert_int_equal(st.bytes_reserved, 2 * MiB);
  aa_free(f->p, s, 0, NULL);
  done(f);
}

/* A backend that fails: NULL, counted, and a later call works. */
static void test_core_large_backend_failure(void **state) {
  (void)state;
  fx *f = make(0, 0);
  aa_backend_host_fail_nth(f->b, 1, true);
  assert_null(aa_alloc(f->p, 5 * MiB, NULL));
  assert_null(aa_alloc(f->p, 5000, NULL));
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.ooms, 2);
  assert_int_equal(st.backend_failures, 4); /* each tried twice */
  assert_int_equal(st.bytes_reserved, 0);
  aa_backend_host_fail_nth(f->b, 0, false);
  void *x = aa_alloc(f->p, 5 * MiB, NULL);
  assert_non_null(x);
  aa_free(f->p, x, 0, NULL);
  done(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_large_split_and_coalesce),
      cmocka_unit_test(test_core_large_best_fit),
      cmocka_unit_test(test_core_large_cache_bound),
      cmocka_unit_test(test_core_large_trim),
      cmocka_unit_test(test_core_large_limit),
      cmocka_unit_test(test_core_large_shared_limit),
      cmocka_unit_test(test_core_large_shared_limit_refused),
      cmocka_unit_test(test_core_large_shared_limit_oom_releases_owner),
      cmocka_unit_test(test_core_large_oom_releases_cache),
      cmocka_unit_test(test_core_large_backend_failure),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
