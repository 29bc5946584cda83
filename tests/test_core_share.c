/*
 * test_core_share.c — aa_block_share and aa_backend_export_fd (core.h,
 * "sharing a block"): what another process needs to map a live block, on
 * the host backend. Each shape of memory: a slab (one piece, the slab's
 * allocation), a cache-path segment (one piece, no handle), expandable
 * pages (one piece per map handle, the handle being the host backend's
 * page address), a run of pages mapped by one call (one piece), a
 * stitched range (its parts, each the handle of a hole's pages: what is
 * written through the block is read through the handles, as an importer
 * of them would). Pieces are contiguous and cover the block; an interior
 * pointer names the same block; a free block, a foreign pointer and a
 * short array are refused; the export op is asked through the backend.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "core_test.h" /* core: the host backend's test hooks */
#include "core_large_fixture.h"

#define PAGE (2 * MiB)

/* The pieces cover [block, block + size) contiguously, in address order. */
static void check_cover(const aa_share_piece *v, size_t n, const void *block, size_t size) {
  uintptr_t b = (uintptr_t)block;
  assert_true(n >= 1);
  assert_true((uintptr_t)v[0].addr <= b);
  for (size_t i = 1; i < n; i++)
    assert_ptr_equal((char *)v[i - 1].addr + v[i - 1].size, v[i].addr);
  assert_true((uintptr_t)v[n - 1].addr + v[n - 1].size >= b + size);
}

static void test_core_share_slab_block(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_CACHE, 0);
  char *p = aa_alloc(f->p, 1000, NULL);
  assert_non_null(p);
  aa_share_piece v[4];
  size_t n = 0;
  void *blk = NULL;
  assert_int_equal(aa_block_share(f->p, p, v, 4, &n, &blk), AA_OK);
  assert_int_equal(n, 1);
  assert_ptr_equal(blk, p);
  assert_null(v[0].handle); /* a whole backend allocation */
  check_cover(v, n, p, 1000);
  /* an interior pointer names the same block */
  assert_int_equal(aa_block_share(f->p, p + 500, v, 4, &n, &blk), AA_OK);
  assert_ptr_equal(blk, p);
  /* no room: the count, and AA_ERANGE */
  assert_int_equal(aa_block_share(f->p, p, NULL, 0, &n, &blk), AA_ERANGE);
  assert_int_equal(n, 1);
  assert_int_equal(aa_free(f->p, p, 1000, NULL), AA_OK);
  assert_int_equal(aa_block_share(f->p, p, v, 4, &n, &blk), AA_EINVAL);
  assert_int_equal(n, 0);
  assert_null(blk);
  fx_done(f);
}

static void test_core_share_cache_segment(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_CACHE, 0);
  size_t sz = 8 * MiB;
  char *p = aa_alloc(f->p, sz, NULL);
  assert_non_null(p);
  aa_share_piece v[4];
  size_t n = 0;
  void *blk = NULL;
  assert_int_equal(aa_block_share(f->p, p + 4096, v, 4, &n, &blk), AA_OK);
  assert_int_equal(n, 1);
  assert_ptr_equal(blk, p);
  assert_null(v[0].handle);
  check_cover(v, n, p, sz);
  assert_int_equal(aa_free(f->p, p, sz, NULL), AA_OK);
  fx_done(f);
}

/* One map per page: a 5 MiB block over three pages is three handles. */
static void test_core_share_expandable_pages(void **state) {
  (void)state;
  fx *f = make_with(AA_LARGE_EXPANDABLE, 0, 0);
  size_t sz = 5 * MiB;
  char *p = aa_alloc(f->p, sz, NULL);
  assert_non_null(p);
  memset(p, 0x5a, sz);
  aa_share_piece v[8];
  size_t n = 0;
  void *blk = NULL;
  assert_int_equal(aa_block_share(f->p, p, v, 8, &n, &blk), AA_OK);
  assert_int_equal(n, 3);
  check_cover(v, n, p, sz);
  for (size_t i = 0; i < n; i++) {
    assert_int_equal(v[i].size, PAGE);
    assert_non_null(v[i].handle);
    assert_ptr_equal(v[i].handle, v[i].addr); /* the host backend's handle */
  }
  assert_int_equal(aa_block_share(f->p, p, v, 2, &n, &blk), AA_ERANGE);
  assert_int_equal(n, 3);
  /* the fixture's backend has no export op */
  int fd = 7;
  assert_int_equal(aa_backend_export_fd(f->b, v[0].handle, &fd), AA_ENOTSUP);
  assert_int_equal(fd, -1);
  assert_int_equal(aa_free(f->p, p, sz, NULL), AA_OK);
  assert_int_equal(aa_block_share(f->p, p, v, 8, &n, &blk), AA_EINVAL);
  fx_done(f);
}

/* map_runs: a request's unmapped pages in one map call, one handle. */
static void test_core_share_expandable_run(void **state) {
  (void)state;
  fx *f = make_with(AA_LARGE_EXPANDABLE, 0, 1);
  size_t sz = 6 * MiB;
  char *p = aa_alloc(f->p, sz, NULL);
  assert_non_null(p);
  aa_share_piece v[8];
  size_t n = 0;
  void *blk = NULL;
  assert_int_equal(aa_block_share(f->p, p, v, 8, &n, &blk), AA_OK);
  assert_int_equal(n, 1);
  assert_int_equal(v[0].size, sz);
  check_cover(v, n, p, sz);
  assert_int_equal(aa_free(f->p, p, sz, NULL), AA_OK);
  fx_done(f);
}

/* A block of a stitched range: its pieces are the holes' handles; what is
 * written through the block is read through them. */
static void test_core_share_stitched_range(void **state) {
  (void)state;
  fx *f = make_full(AA_LARGE_EXPANDABLE, 0, 0, true, 1);
  char *hole[3], *keep[3];
  for (int i = 0; i < 3; i++) {
    hole[i] = aa_alloc(f->p, 6 * MiB, NULL);
    keep[i] = aa_alloc(f->p, 3 * MiB, NULL);
    assert_non_null(hole[i]);
    assert_non_null(keep[i]);
  }
  for (int i = 0; i < 3; i++)
    assert_int_equal(aa_free(f->p, hole[i], 6 * MiB, NULL), AA_OK);
  size_t sz = 10 * MiB;
  char *p = aa_alloc(f->p, sz, NULL);
  assert_non_null(p);
  assert_int_equal(stats(f).large_stitches, 1);
  for (size_t k = 0; k < sz; k += 4096)
    p[k] = (char)(k / 4096);
  aa_share_piece v[16];
  size_t n = 0;
  void *blk = NULL;
  assert_int_equal(aa_block_share(f->p, p, v, 16, &n, &blk), AA_OK);
  assert_ptr_equal(blk, p);
  assert_true(n >= 5);
  check_cover(v, n, p, sz);
  for (size_t i = 0; i < n; i++) {
    assert_non_null(v[i].handle);
    assert_ptr_not_equal(v[i].handle, v[i].addr); /* a hole's pages, mapped again here */
    const char *origin = v[i].handle;
    for (size_t off = 0; off < v[i].size; off += 4096) {
      uintptr_t at = (uintptr_t)v[i].addr + off;
      if (at < (uintptr_t)p || at >= (uintptr_t)p + sz)
        continue;
      assert_int_equal(origin[off], (char)((at - (uintptr_t)p) / 4096));
    }
  }
  assert_int_equal(aa_free(f->p, p, sz, NULL), AA_OK);
  for (int i = 0; i < 3; i++)
    assert_int_equal(aa_free(f->p, keep[i], 3 * MiB, NULL), AA_OK);
  fx_done(f);
}

/* aa_backend_export_fd asks the backend's op; bad arguments are refused. */
static int fake_calls;
static int fake_export(aa_backend *b, void *handle, int *fd) {
  (void)b;
  fake_calls++;
  *fd = (int)((uintptr_t)handle & 0xff);
  return AA_OK;
}

static void test_core_share_export_op(void **state) {
  (void)state;
  aa_backend_ops ops;
  memset(&ops, 0, sizeof ops);
  ops.export_fd = fake_export;
  aa_backend b = {&ops, NULL, AA_BACKEND_CUSTOM, -1, "fake"};
  int fd = -5;
  assert_int_equal(aa_backend_export_fd(&b, (void *)(uintptr_t)0x1234, &fd), AA_OK);
  assert_int_equal(fd, 0x34);
  assert_int_equal(fake_calls, 1);
  assert_int_equal(aa_backend_export_fd(&b, NULL, &fd), AA_EINVAL);
  assert_int_equal(fd, -1);
  assert_int_equal(aa_backend_export_fd(NULL, (void *)1, &fd), AA_EINVAL);
  assert_int_equal(aa_backend_export_fd(&b, (void *)1, NULL), AA_EINVAL);
  assert_int_equal(fake_calls, 1);
}

/* Arguments: no pool, no out-parameters, a pointer no pool owns. */
static void test_core_share_refuses_bad_arguments(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_CACHE, 0);
  aa_share_piece v[2];
  size_t n = 9;
  void *blk = (void *)1;
  int x;
  assert_int_equal(aa_block_share(NULL, &x, v, 2, &n, &blk), AA_EINVAL);
  assert_int_equal(n, 0);
  assert_null(blk);
  assert_int_equal(aa_block_share(f->p, &x, v, 2, &n, &blk), AA_EINVAL);
  assert_int_equal(aa_block_share(f->p, &x, v, 2, NULL, &blk), AA_EINVAL);
  assert_int_equal(aa_block_share(f->p, &x, v, 2, &n, NULL), AA_EINVAL);
  fx_done(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_share_slab_block),
      cmocka_unit_test(test_core_share_cache_segment),
      cmocka_unit_test(test_core_share_expandable_pages),
      cmocka_unit_test(test_core_share_expandable_run),
      cmocka_unit_test(test_core_share_stitched_range),
      cmocka_unit_test(test_core_share_export_op),
      cmocka_unit_test(test_core_share_refuses_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
