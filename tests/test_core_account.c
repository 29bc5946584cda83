/*
 * test_core_account.c — aa_pool_account_get: each category of a pool's
 * reserved bytes on constructed cases with exact expected values (a small
 * request's block rounding, a slab's free slots and tail, a large request's
 * rounding and the free rest of its segment, a freed large block, blocks
 * freed with record_stream on a stream the host backend holds busy, a large
 * block in a thread's cache), the categories summing to bytes_reserved under
 * a randomized sequence in every large mode, and bad input refused with
 * *out unchanged.
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

#define SA ((aa_stream)(uintptr_t)0x1000)
#define SB ((aa_stream)(uintptr_t)0x2000)
#define SC ((aa_stream)(uintptr_t)0x3000)
#define MIB ((size_t)1 << 20)

static aa_pool *pool_new(aa_backend **b, aa_large_mode mode, uint32_t tcache_blocks) {
  assert_int_equal(aa_backend_host_new(b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.name = "account";
  cfg.backend = *b;
  cfg.large_mode = mode;
  cfg.tcache_blocks = tcache_blocks;
  aa_pool *p = NULL;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  return p;
}

static void pool_done(aa_pool *p, aa_backend *b) {
  aa_pool_destroy(p);
  aa_backend_destroy(b);
}

/* The account, checked against a snapshot taken right after it: the
 * categories add up to bytes_reserved with nothing in `other` (every byte
 * this pool reserves is a slab or a segment), and the figures the snapshot
 * also has agree with it. */
static aa_pool_account account(aa_pool *p) {
  aa_pool_account a;
  memset(&a, 0, sizeof a);
  a.version = AA_ACCOUNT_VERSION;
  a.size = (uint32_t)sizeof a;
  assert_int_equal(aa_pool_account_get(p, &a), AA_OK);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get_opts(p, &st, AA_STATS_NO_SIZES), AA_OK);
  uint64_t sum = a.requested + a.rounding + a.slab_free + a.slab_tails + a.holes +
                 a.stream_holds + a.thread_caches + a.other;
  assert_int_equal(sum, a.bytes_reserved);
  assert_int_equal(a.bytes_reserved, st.bytes_reserved);
  assert_int_equal(a.other, 0);
  assert_int_equal(a.requested, st.bytes_requested);
  assert_int_equal(a.requested + a.rounding, st.bytes_in_use);
  assert_int_equal(a.thread_caches, st.large_bytes_held);
  return a;
}

static uint64_t slab_size_of(aa_pool *p, uint64_t bs) {
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get_opts(p, &st, AA_STATS_NO_SIZES), AA_OK);
  for (uint32_t i = 0; i < st.class_count; i++) {
    if (st.classes[i].block_size == bs && st.classes[i].slabs > 0)
      return st.classes[i].bytes_reserved / st.classes[i].slabs;
  }
  fail_msg("no slab of block size %llu", (unsigned long long)bs);
  return 0;
}

/* One small request: its block's rounding, the slab's other blocks free,
 * its tail; freed, the whole carved part is free. */
static void test_core_account_small(void **state) {
  (void)state;
  aa_backend *b = NULL;
  aa_pool *p = pool_new(&b, AA_LARGE_CACHE, 0);
  const size_t req = 3000;
  void *x = aa_alloc(p, req, SA);
  assert_non_null(x);
  uint64_t bs = aa_block_size(p, x);
  assert_true(bs > req);
  uint64_t slab = slab_size_of(p, bs), nb = slab / bs;
  aa_pool_account a = account(p);
  assert_int_equal(a.bytes_reserved, slab); /* one slab, nothing else */
  assert_int_equal(a.requested, req);
  assert_int_equal(a.rounding, bs - req);
  assert_int_equal(a.slab_free, (nb - 1) * bs);
  assert_int_equal(a.slab_tails, slab - nb * bs);
  assert_true(a.slab_tails > 0); /* 3000's block does not divide the slab */
  assert_int_equal(a.holes + a.stream_holds + a.thread_caches, 0);
  assert_int_equal(aa_free(p, x, 0, SA), AA_OK);
  a = account(p);
  assert_int_equal(a.requested + a.rounding, 0);
  assert_int_equal(a.slab_free, nb * bs);
  assert_int_equal(a.slab_tails, slab - nb * bs);
  pool_done(p, b);
}

/* A large request of an odd size: rounded to 4 KiB, the rest of its
 * segment a hole; freed, all of the segment a hole (a 64 MiB limit keeps
 * blocks over 4 MiB out of the thread's large cache: large_ltc.c). */
static void test_core_account_large(void **state) {
  (void)state;
  aa_backend *b = NULL;
  aa_pool *p = pool_new(&b, AA_LARGE_CACHE, 0);
  aa_pool_set_limit(p, 64 * MIB);
  const size_t req = 5 * MIB + 1;
  void *x = aa_alloc(p, req, SA);
  assert_non_null(x);
  uint64_t bs = aa_block_size(p, x);
  assert_int_equal(bs, 5 * MIB + 4096);
  aa_pool_account a = account(p);
  assert_int_equal(a.bytes_reserved, 6 * MIB); /* one segment, 2 MiB rounded */
  assert_int_equal(a.requested, req);
  assert_int_equal(a.rounding, bs - req);
  assert_int_equal(a.holes, 6 * MIB - bs);
  assert_int_equal(a.slab_free + a.slab_tails + a.stream_holds + a.thread_caches, 0);
  assert_int_equal(aa_free(p, x, 0, SA), AA_OK);
  a = account(p);
  assert_int_equal(a.requested + a.rounding, 0);
  assert_int_equal(a.holes, 6 * MIB);
  pool_done(p, b);
}

/* Blocks used on SB (record_stream) and freed on SA while SB is busy wait
 * for SB: stream holds, on the small and the large path; once SB is idle
 * they are free (asked now, before the pool itself looks). */
static void test_core_account_stream_holds(void **state) {
  (void)state;
  aa_backend *b = NULL;
  aa_pool *p = pool_new(&b, AA_LARGE_CACHE, 0);
  void *keep = aa_alloc(p, 1 * MIB + 4096, SA); /* the segment stays */
  assert_int_equal(account(p).thread_caches, 0);
  void *big = aa_alloc(p, 3 * MIB, SA);
  void *small = aa_alloc(p, 3000, SA);
  assert_non_null(keep);
  assert_non_null(big);
  assert_non_null(small);
  uint64_t lbs = aa_block_size(p, big), sbs = aa_block_size(p, small);
  aa_pool_account a0 = account(p);
  assert_int_equal(aa_record_stream(p, big, SB), AA_OK);
  assert_int_equal(aa_record_stream(p, small, SB), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, true), AA_OK);
  assert_int_equal(aa_free(p, big, 0, SA), AA_OK);
  assert_int_equal(aa_free(p, small, 0, SA), AA_OK);
  aa_pool_account a = account(p);
  assert_int_equal(a.bytes_reserved, a0.bytes_reserved);
  assert_int_equal(a.stream_holds, lbs + sbs);
  assert_int_equal(a.holes, a0.holes);         /* the freed chunk is not a hole */
  assert_int_equal(a.slab_free, a0.slab_free); /* nor the small block a free slot */
  assert_int_equal(a.requested, a0.requested - 3 * MIB - 3000);
  /* the account asks, and changes nothing: still held */
  a = account(p);
  assert_int_equal(a.stream_holds, lbs + sbs);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  a = account(p);
  assert_int_equal(a.stream_holds, 0);
  assert_int_equal(a.holes, a0.holes + lbs);
  assert_int_equal(a.slab_free, a0.slab_free + sbs);
  assert_int_equal(aa_free(p, keep, 0, SA), AA_OK);
  pool_done(p, b);
}

/* A large block its thread frees into the thread's large cache (the last
 * one it was handed, large_ltc.c): held there, neither requested nor a
 * hole; another freed by the locked path is a hole; a release takes the
 * held one back. */
static void test_core_account_thread_cache(void **state) {
  (void)state;
  aa_backend *b = NULL;
  aa_pool *p = pool_new(&b, AA_LARGE_CACHE, 32);
  void *y = aa_alloc(p, 2 * MIB, SA);
  void *x = aa_alloc(p, 3 * MIB + 100, SA); /* the thread's last: its cache knows it */
  assert_non_null(x);
  assert_non_null(y);
  uint64_t bs = aa_block_size(p, x), ybs = aa_block_size(p, y);
  aa_pool_account a0 = account(p);
  assert_int_equal(a0.thread_caches, 0);
  assert_int_equal(a0.requested, 5 * MIB + 100);
  assert_int_equal(aa_free(p, x, 0, SA), AA_OK);
  aa_pool_account a = account(p);
  assert_int_equal(a.thread_caches, bs);
  assert_int_equal(a.requested, 2 * MIB);
  assert_int_equal(a.rounding, ybs - 2 * MIB);
  assert_int_equal(a.holes, a0.holes);
  assert_int_equal(aa_free(p, y, 0, SA), AA_OK);
  a = account(p);
  assert_int_equal(a.thread_caches, bs);
  assert_int_equal(a.requested + a.rounding, 0);
  assert_int_equal(a.holes, a0.holes + ybs);
  /* a release takes it back: none held then */
  aa_pool_release(p);
  a = account(p);
  assert_int_equal(a.thread_caches, 0);
  pool_done(p, b);
}

/* Random requests, frees and record_streams on streams going busy and idle:
 * after every step the categories add up to bytes_reserved (account()). */
static void run_random(aa_large_mode mode, uint32_t tcache_blocks, unsigned seed) {
  enum { N = 64,
         STEPS = 1500 };
  aa_backend *b = NULL;
  aa_pool *p = pool_new(&b, mode, tcache_blocks);
  void *live[N] = {0};
  aa_stream on[N];
  static const aa_stream streams[3] = {SA, SB, SC};
  bool busy[3] = {false, false, false};
  bool saw_holds = false, saw_holes = false;
  srand(seed);
  for (int step = 0; step < STEPS; step++) {
    int i = rand() % N, r = rand() % 100;
    if (r < 5) {
      int k = 1 + rand() % 2; /* SB or SC */
      busy[k] = !busy[k];
      assert_int_equal(aa_backend_host_stream_busy(b, streams[k], busy[k]), AA_OK);
    } else if (live[i] == NULL) {
      size_t n;
      int kind = rand() % 4;
      if (kind == 0)
        n = 1 + (size_t)rand() % 4096;
      else if (kind == 1)
        n = 4096 + (size_t)rand() % MIB;
      else
        n = MIB + 1 + (size_t)rand() % (12 * MIB);
      on[i] = streams[rand() % 3];
      live[i] = aa_alloc(p, n, on[i]);
      assert_non_null(live[i]);
      if (rand() % 4 == 0)
        assert_int_equal(aa_record_stream(p, live[i], streams[rand() % 3]), AA_OK);
    } else {
      assert_int_equal(aa_free(p, live[i], 0, on[i]), AA_OK);
      live[i] = NULL;
    }
    if (step % 300 == 299)
      aa_pool_release(p);
    aa_pool_account a = account(p);
    saw_holds |= a.stream_holds > 0;
    saw_holes |= a.holes > 0;
  }
  /* the sequence reaches the categories it is meant to mix */
  assert_true(saw_holds);
  assert_true(saw_holes || mode == AA_LARGE_PASSTHROUGH);
  for (int k = 1; k < 3; k++)
    assert_int_equal(aa_backend_host_stream_busy(b, streams[k], false), AA_OK);
  for (int i = 0; i < N; i++) {
    if (live[i] != NULL)
      assert_int_equal(aa_free(p, live[i], 0, on[i]), AA_OK);
  }
  aa_pool_account a = account(p);
  assert_int_equal(a.requested + a.rounding, 0);
  pool_done(p, b);
}

static void test_core_account_random_sum(void **state) {
  (void)state;
  static const aa_large_mode modes[] = {AA_LARGE_CACHE, AA_LARGE_EXPANDABLE,
                                        AA_LARGE_PASSTHROUGH};
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    run_random(modes[m], 0, 7u + (unsigned)m);
    run_random(modes[m], 32, 11u + (unsigned)m);
  }
}

/* NULL pool or out, a wrong version or size: AA_EINVAL, *out unchanged. */
static void test_core_account_bad_input(void **state) {
  (void)state;
  aa_backend *b = NULL;
  aa_pool *p = pool_new(&b, AA_LARGE_CACHE, 0);
  void *x = aa_alloc(p, 3000, SA);
  aa_pool_account a, before;
  memset(&a, 0xAB, sizeof a);
  a.version = AA_ACCOUNT_VERSION;
  a.size = (uint32_t)sizeof a;
  before = a;
  assert_int_equal(aa_pool_account_get(NULL, &a), AA_EINVAL);
  assert_memory_equal(&a, &before, sizeof a);
  assert_int_equal(aa_pool_account_get(p, NULL), AA_EINVAL);
  a.version = AA_ACCOUNT_VERSION + 1;
  before = a;
  assert_int_equal(aa_pool_account_get(p, &a), AA_EINVAL);
  assert_memory_equal(&a, &before, sizeof a);
  a.version = AA_ACCOUNT_VERSION;
  a.size = (uint32_t)sizeof a - 8;
  before = a;
  assert_int_equal(aa_pool_account_get(p, &a), AA_EINVAL);
  assert_memory_equal(&a, &before, sizeof a);
  a.size = 0;
  before = a;
  assert_int_equal(aa_pool_account_get(p, &a), AA_EINVAL);
  assert_memory_equal(&a, &before, sizeof a);
  aa_free(p, x, 0, SA);
  pool_done(p, b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_account_small),
      cmocka_unit_test(test_core_account_large),
      cmocka_unit_test(test_core_account_stream_holds),
      cmocka_unit_test(test_core_account_thread_cache),
      cmocka_unit_test(test_core_account_random_sum),
      cmocka_unit_test(test_core_account_bad_input),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
