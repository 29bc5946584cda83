/*
 * test_core_misuse.c — invalid frees are detected, counted, reported through
 * on_error, return AA_EINVAL and leave the pool intact: foreign pointers
 * (stack, malloc, another pool), double frees (thread cache, central list,
 * large), sizes that contradict the block, interior pointers, frees into a
 * slab that went back to the backend.
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

typedef struct seen {
  int n;
  aa_misuse last;
  const void *ptr;
  size_t size;
  aa_pool *pool;
} seen;

static void on_error(void *user, aa_pool *pool, aa_misuse what, const void *ptr, size_t size,
                     const char *message) {
  seen *s = user;
  s->n++;
  s->last = what;
  s->ptr = ptr;
  s->size = size;
  s->pool = pool;
  assert_non_null(message);
  assert_true(strlen(message) > 0);
}

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
  seen s;
} fx;

static int setup(void **state) {
  fx *f = calloc(1, sizeof *f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  cfg.on_error = on_error;
  cfg.on_error_user = &f->s;
  assert_int_equal(aa_pool_new(&cfg, &f->p), AA_OK);
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fx *f = *state;
  aa_pool_destroy(f->p);
  uint64_t mapped;
  aa_backend_host_counts(f->b, NULL, NULL, &mapped);
  assert_int_equal(mapped, 0);
  aa_backend_destroy(f->b);
  free(f);
  return 0;
}

/* The pool still works and its accounting is exact. */
static void check_intact(fx *f, uint64_t live_bytes_requested) {
  void *v[64];
  for (int i = 0; i < 64; i++) {
    v[i] = aa_alloc(f->p, 100 + (size_t)i * 700, NULL);
    assert_non_null(v[i]);
    for (int j = 0; j < i; j++)
      assert_ptr_not_equal(v[i], v[j]);
  }
  for (int i = 0; i < 64; i++)
    assert_int_equal(aa_free(f->p, v[i], 100 + (size_t)i * 700, NULL), AA_OK);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.bytes_requested, live_bytes_requested);
  assert_int_equal(st.invalid_frees, (uint64_t)f->s.n);
}

static void test_core_misuse_foreign(void **state) {
  fx *f = *state;
  int on_stack = 0;
  void *heap = malloc(64);
  assert_int_equal(aa_free(f->p, &on_stack, 0, NULL), AA_EINVAL);
  assert_int_equal(f->s.n, 1);
  assert_int_equal(f->s.last, AA_MISUSE_FOREIGN);
  assert_ptr_equal(f->s.ptr, &on_stack);
  assert_ptr_equal(f->s.pool, f->p);
  assert_int_equal(aa_free(f->p, heap, 64, NULL), AA_EINVAL);
  assert_int_equal(f->s.n, 2);
  assert_int_equal(f->s.size, 64);
  assert_int_equal(aa_free(f->p, (void *)(uintptr_t)0x10, 0, NULL), AA_EINVAL);
  assert_int_equal(aa_free(f->p, (void *)UINTPTR_MAX, 0, NULL), AA_EINVAL);
  assert_int_equal(f->s.n, 4);
  assert_int_equal(aa_block_size(f->p, &on_stack), 0);
  free(heap);

  /* a block of another pool is foreign here */
  aa_pool_config cfg;
  aa_pool *other;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  assert_int_equal(aa_pool_new(&cfg, &other), AA_OK);
  void *x = aa_alloc(other, 1000, NULL);
  void *y = aa_alloc(other, 3u << 20, NULL);
  assert_non_null(x);
  assert_non_null(y);
  assert_int_equal(aa_free(f->p, x, 0, NULL), AA_EINVAL);
  assert_int_equal(aa_free(f->p, y, 0, NULL), AA_EINVAL);
  assert_int_equal(f->s.n, 6);
  assert_int_equal(f->s.last, AA_MISUSE_FOREIGN);
  assert_int_equal(aa_free(other, x, 1000, NULL), AA_OK);
  assert_int_equal(aa_free(other, y, 3u << 20, NULL), AA_OK);
  aa_pool_destroy(other);
  check_intact(f, 0);
}

static void test_core_misuse_double_free_small(void **state) {
  fx *f = *state;
  void *a = aa_alloc(f->p, 700, NULL);
  void *keep = aa_alloc(f->p, 700, NULL);
  assert_int_equal(aa_free(f->p, a, 700, NULL), AA_OK);
  /* now in this thread's cache */
  assert_int_equal(aa_free(f->p, a, 700, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_DOUBLE_FREE);
  assert_int_equal(aa_free(f->p, a, 0, NULL), AA_EINVAL);
  assert_int_equal(f->s.n, 2);
  /* push it to the central lists, then double free again */
  aa_pool_release(f->p);
  assert_int_equal(aa_free(f->p, a, 0, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_DOUBLE_FREE);
  assert_int_equal(f->s.n, 3);
  /* the block is handed out exactly once afterwards */
  void *b = aa_alloc(f->p, 700, NULL);
  void *c = aa_alloc(f->p, 700, NULL);
  assert_ptr_not_equal(b, c);
  assert_ptr_not_equal(b, keep);
  assert_ptr_not_equal(c, keep);
  assert_int_equal(aa_free(f->p, b, 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, c, 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, keep, 0, NULL), AA_OK);
  check_intact(f, 0);
}

static void test_core_misuse_bad_size(void **state) {
  fx *f = *state;
  void *a = aa_alloc(f->p, 1000, NULL);
  assert_int_equal(aa_free(f->p, a, 1001, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_BAD_SIZE);
  assert_int_equal(f->s.size, 1001);
  assert_int_equal(aa_free(f->p, a, 1024, NULL), AA_EINVAL); /* the block size is not it */
  assert_int_equal(f->s.n, 2);
  /* NOT freed: still live, stats say so */
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.bytes_requested, 1000);
  assert_int_equal(st.frees, 0);
  assert_int_equal(aa_free(f->p, a, 1000, NULL), AA_OK);
  void *l = aa_alloc(f->p, 3u << 20, NULL);
  assert_int_equal(aa_free(f->p, l, (3u << 20) + 1, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_BAD_SIZE);
  assert_int_equal(aa_free(f->p, l, 3u << 20, NULL), AA_OK);
  check_intact(f, 0);
}

static void test_core_misuse_interior(void **state) {
  fx *f = *state;
  char *a = aa_alloc(f->p, 4096, NULL);
  assert_int_equal(aa_free(f->p, a + 1, 0, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_INTERIOR);
  assert_int_equal(aa_free(f->p, a + 512, 0, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_INTERIOR);
  assert_int_equal(aa_block_size(f->p, a + 100), 4096);
  char *l = aa_alloc(f->p, 3u << 20, NULL);
  assert_int_equal(aa_free(f->p, l + 4096, 0, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_INTERIOR);
  assert_int_equal(f->s.n, 3);
  assert_int_equal(aa_free(f->p, a, 4096, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, l, 0, NULL), AA_OK);
  check_intact(f, 0);
}

static void test_core_misuse_double_free_large(void **state) {
  fx *f = *state;
  void *keep = aa_alloc(f->p, 2u << 20, NULL);
  void *l = aa_alloc(f->p, 3u << 20, NULL);
  assert_non_null(l);
  assert_int_equal(aa_free(f->p, l, 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, l, 0, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_DOUBLE_FREE);
  assert_int_equal(aa_free(f->p, keep, 0, NULL), AA_OK);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.large_bytes_in_use, 0);
  check_intact(f, 0);
}

/* The free path caches the last slab per thread: a slab that went back to
 * the backend must not be used through that cache any more, nor must a new
 * slab mapped at the same address be mistaken for the old one. */
static void test_core_misuse_released_slab(void **state) {
  fx *f = *state;
  void *a = aa_alloc(f->p, 700, NULL);
  assert_non_null(a);
  assert_int_equal(aa_free(f->p, a, 700, NULL), AA_OK); /* its slab is now cached */
  assert_true(aa_pool_release(f->p) > 0);               /* ... and released */
  assert_int_equal(aa_free(f->p, a, 700, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_FOREIGN);
  assert_int_equal(f->s.n, 1);
  /* a new slab of the same class, often at the same address */
  void *b = aa_alloc(f->p, 700, NULL);
  void *c = aa_alloc(f->p, 1500, NULL);
  assert_non_null(b);
  assert_non_null(c);
  assert_int_equal(aa_free(f->p, b, 700, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, b, 700, NULL), AA_EINVAL);
  assert_int_equal(f->s.last, AA_MISUSE_DOUBLE_FREE);
  assert_int_equal(aa_free(f->p, c, 1500, NULL), AA_OK);
  assert_int_equal(f->s.n, 2);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.allocs, 3);
  assert_int_equal(st.frees, 3);
  check_intact(f, 0);
}

static void test_core_misuse_no_callback(void **state) {
  (void)state;
  aa_backend *b;
  aa_pool *p;
  aa_backend_host_new(&b);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  void *a = aa_alloc(p, 10, NULL);
  assert_int_equal(aa_free(p, a, 0, NULL), AA_OK);
  assert_int_equal(aa_free(p, a, 0, NULL), AA_EINVAL);
  aa_pool_stats st;
  aa_pool_stats_get(p, &st);
  assert_int_equal(st.invalid_frees, 1);
  assert_int_equal(aa_free(NULL, a, 0, NULL), AA_EINVAL);
  assert_null(aa_alloc(NULL, 10, NULL));
  aa_pool_destroy(p);
  aa_backend_destroy(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_core_misuse_foreign, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_misuse_double_free_small, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_misuse_bad_size, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_misuse_interior, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_misuse_double_free_large, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_misuse_released_slab, setup, teardown),
      cmocka_unit_test(test_core_misuse_no_callback),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
