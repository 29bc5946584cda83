/*
 * test_transfer_pack_copy.c — the packer's parallel gather copy (aa__pack_copy,
 * transfer/src/pack_copy.c): every item lands at its offset byte for byte,
 * nothing between or after the items is written, for one large item split
 * across threads, many small items, sizes that do not divide by a page or
 * by the thread count, more threads than pages, and out-of-range thread
 * counts (clamped). Needs no GPU: the copy is plain host memory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "transfer_test.h" /* transfer: the packer's gather copy */

#define GUARD 0xA5

/* Packs items of the given sizes (gap bytes apart) with `threads` and checks
 * the destination: each item's bytes, GUARD everywhere else. */
static void check(const size_t *sizes, size_t count, size_t gap, unsigned threads) {
  const void **src = calloc(count, sizeof *src);
  size_t *off = calloc(count, sizeof *off);
  size_t total = 0, i, pos = 0;
  unsigned char *dst, *want;
  assert_non_null(src);
  assert_non_null(off);
  for (i = 0; i < count; i++) {
    unsigned char *p = malloc(sizes[i]);
    assert_non_null(p);
    for (size_t k = 0; k < sizes[i]; k++)
      p[k] = (unsigned char)((i * 131 + k * 7 + 3) % 251); /* never GUARD alone */
    src[i] = p;
    off[i] = pos;
    pos += sizes[i] + gap;
    total = pos;
  }
  dst = malloc(total + 64);
  want = malloc(total + 64);
  assert_non_null(dst);
  assert_non_null(want);
  memset(dst, GUARD, total + 64);
  memset(want, GUARD, total + 64);
  for (i = 0; i < count; i++)
    memcpy(want + off[i], src[i], sizes[i]);
  aa__pack_copy(dst, src, sizes, off, count, threads);
  assert_memory_equal(dst, want, total + 64);
  for (i = 0; i < count; i++)
    free((void *)src[i]);
  free(src);
  free(off);
  free(dst);
  free(want);
}

static void test_one_large_item_is_split(void **state) {
  size_t one[1] = {(size_t)6 << 20};
  size_t odd[1] = {((size_t)5 << 20) + 12345};
  (void)state;
  for (unsigned t = 1; t <= 8; t++) {
    check(one, 1, 0, t);
    check(odd, 1, 0, t);
  }
}

static void test_large_and_small_items(void **state) {
  /* an image batch and its labels; the labels in front and behind */
  size_t a[2] = {((size_t)77 << 20) / 16 + 7, 2048};
  size_t b[3] = {100, ((size_t)3 << 20) + 1, 1};
  (void)state;
  check(a, 2, 256, 4);
  check(b, 3, 200, 3);
  check(b, 3, 0, 16);
}

static void test_many_small_items(void **state) {
  enum { N = 3000 };
  size_t *sizes = malloc(N * sizeof *sizes);
  (void)state;
  assert_non_null(sizes);
  for (size_t i = 0; i < N; i++)
    sizes[i] = 1 + (i * 977) % 4096;
  check(sizes, N, 17, 4);
  check(sizes, N, 0, 7);
  free(sizes);
}

static void test_fewer_pages_than_threads_and_clamping(void **state) {
  size_t tiny[3] = {1, 5000, 3};
  size_t page[1] = {4096};
  (void)state;
  check(tiny, 3, 9, 16);
  check(page, 1, 0, 16);
  check(tiny, 3, 1, 0);   /* 0 threads: the caller copies */
  check(tiny, 3, 1, 999); /* clamped to AA__PACK_MAX_THREADS */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_large_item_is_split),
      cmocka_unit_test(test_large_and_small_items),
      cmocka_unit_test(test_many_small_items),
      cmocka_unit_test(test_fewer_pages_than_threads_and_clamping),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
