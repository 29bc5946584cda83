/*
 * test_core_classes.c — the class table: add, retire (drain before the slabs
 * go), set, set_classes validated whole, limits, prefill, slot reuse, and a
 * thread cache holding blocks of a retired class.
 */
#include <pthread.h>
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
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
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

static size_t ncls(aa_pool *p, uint64_t *ver) {
  size_t n = 0;
  assert_int_equal(aa_pool_classes(p, NULL, 0, &n, ver), AA_OK);
  return n;
}

static int has_class(aa_pool *p, size_t bs) {
  aa_class_spec v[AA_MAX_CLASSES];
  size_t n;
  aa_pool_classes(p, v, AA_MAX_CLASSES, &n, NULL);
  for (size_t i = 0; i < n; i++)
    if (v[i].block_size == bs)
      return 1;
  return 0;
}

static const aa_class_stats *cstat(const aa_pool_stats *st, size_t bs, int retiring) {
  for (uint32_t i = 0; i < st->class_count; i++)
    if (st->classes[i].block_size == bs && (int)st->classes[i].retiring == retiring)
      return &st->classes[i];
  return NULL;
}

static void test_core_classes_add(void **state) {
  fx *f = *state;
  uint64_t v0, v1;
  size_t n0 = ncls(f->p, &v0);
  aa_class_spec s = {4608, 0, 0};
  assert_int_equal(aa_pool_class_add(f->p, &s), AA_OK);
  size_t n1 = ncls(f->p, &v1);
  assert_int_equal(n1, n0 + 1);
  assert_true(v1 > v0);
  assert_true(has_class(f->p, 4608));
  assert_int_equal(aa_pool_class_add(f->p, &s), AA_EEXIST);
  void *x = aa_alloc(f->p, 4600, NULL);
  assert_int_equal(aa_block_size(f->p, x), 4608);
  aa_free(f->p, x, 4600, NULL);
  /* bad specs change nothing */
  aa_class_spec bad[] = {{0, 0, 0}, {513, 0, 0}, {(2u << 20), 0, 0}, {1024, 100000, 0}};
  for (size_t i = 0; i < 4; i++)
    assert_int_equal(aa_pool_class_add(f->p, &bad[i]), AA_EINVAL);
  assert_int_equal(aa_pool_class_add(f->p, NULL), AA_EINVAL);
  uint64_t v2;
  assert_int_equal(ncls(f->p, &v2), n1);
  assert_int_equal(v2, v1);
}

static void test_core_classes_limit(void **state) {
  fx *f = *state;
  size_t n = ncls(f->p, NULL);
  int rc = AA_OK;
  size_t added = 0;
  for (size_t bs = 512 * 3; rc == AA_OK && bs < (1u << 20); bs += 512) {
    aa_class_spec s = {bs, 0, 0};
    rc = aa_pool_class_add(f->p, &s);
    if (rc == AA_OK)
      added++;
    else if (rc == AA_EEXIST)
      rc = AA_OK;
  }
  assert_int_equal(rc, AA_ELIMIT);
  assert_int_equal(n + added, AA_MAX_CLASSES);
  assert_int_equal(ncls(f->p, NULL), AA_MAX_CLASSES);
}

static void test_core_classes_retire_drains(void **state) {
  fx *f = *state;
  aa_class_spec s = {4608, 0, 0};
  assert_int_equal(aa_pool_class_add(f->p, &s), AA_OK);
  void *x = aa_alloc(f->p, 4600, NULL);
  void *y = aa_alloc(f->p, 4600, NULL);
  assert_int_equal(aa_block_size(f->p, x), 4608);
  assert_int_equal(aa_pool_class_retire(f->p, 4608), AA_OK);
  assert_false(has_class(f->p, 4608));
  assert_int_equal(aa_pool_class_retire(f->p, 4608), AA_ENOENT);
  /* new requests go to the next class */
  void *z = aa_alloc(f->p, 4600, NULL);
  assert_int_equal(aa_block_size(f->p, z), 5120);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  const aa_class_stats *c = cstat(&st, 4608, 1);
  assert_non_null(c);
  assert_int_equal(c->slabs, 1);
  assert_int_equal(c->blocks_in_use, 2);
  /* frees still work; the slab goes back once empty */
  assert_int_equal(aa_free(f->p, x, 4600, NULL), AA_OK);
  aa_pool_stats_get(f->p, &st);
  assert_non_null(cstat(&st, 4608, 1));
  assert_int_equal(aa_free(f->p, y, 0, NULL), AA_OK);
  aa_pool_stats_get(f->p, &st);
  assert_null(cstat(&st, 4608, 1));
  assert_int_equal(aa_free(f->p, z, 0, NULL), AA_OK);
  /* the slot is reusable; counts start at zero */
  aa_class_spec s2 = {4608, 0, 0};
  assert_int_equal(aa_pool_class_add(f->p, &s2), AA_OK);
  aa_pool_stats_get(f->p, &st);
  c = cstat(&st, 4608, 0);
  assert_non_null(c);
  assert_int_equal(c->allocs, 0);
  assert_int_equal(st.allocs, 3); /* pool totals keep the retired class's counts */
  assert_int_equal(st.frees, 3);
}

static void test_core_classes_retire_largest_refused(void **state) {
  fx *f = *state;
  assert_int_equal(aa_pool_class_retire(f->p, 1u << 20), AA_EBUSY);
  assert_int_equal(aa_pool_class_retire(f->p, 12345), AA_ENOENT);
  assert_int_equal(aa_pool_class_retire(NULL, 512), AA_EINVAL);
}

static void test_core_classes_retire_then_readd(void **state) {
  fx *f = *state;
  void *x = aa_alloc(f->p, 512, NULL);
  assert_int_equal(aa_pool_class_retire(f->p, 512), AA_OK);
  void *w = aa_alloc(f->p, 1, NULL);
  assert_int_equal(aa_block_size(f->p, w), 1024);
  aa_free(f->p, w, 1, NULL);
  /* adding it back while it drains revives it */
  aa_class_spec s = {512, 0, 0};
  assert_int_equal(aa_pool_class_add(f->p, &s), AA_OK);
  void *y = aa_alloc(f->p, 100, NULL);
  assert_int_equal(aa_block_size(f->p, y), 512);
  aa_free(f->p, x, 0, NULL);
  aa_free(f->p, y, 0, NULL);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_null(cstat(&st, 512, 1));
  assert_non_null(cstat(&st, 512, 0));
}

static void test_core_classes_set_and_prefill(void **state) {
  fx *f = *state;
  aa_class_spec s = {8192, 7, 300};
  uint64_t v0, v1;
  ncls(f->p, &v0);
  assert_int_equal(aa_pool_class_set(f->p, &s), AA_OK);
  ncls(f->p, &v1);
  assert_true(v1 > v0);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  const aa_class_stats *c = cstat(&st, 8192, 0);
  assert_non_null(c);
  assert_int_equal(c->cache_limit, 7);
  assert_int_equal(c->prefill, 300);
  assert_true(c->blocks_free >= 300);
  assert_int_equal(c->blocks_in_use, 0);
  /* trim keeps the prefill; release does not */
  aa_pool_trim(f->p, 0);
  aa_pool_stats_get(f->p, &st);
  assert_true(cstat(&st, 8192, 0)->blocks_free >= 300);
  aa_pool_release(f->p);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.bytes_reserved, 0);
  aa_class_spec missing = {8704 + 512, 0, 0};
  assert_int_equal(aa_pool_class_set(f->p, &missing), AA_ENOENT);
}

static void test_core_classes_set_classes(void **state) {
  fx *f = *state;
  void *old = aa_alloc(f->p, 3000, NULL); /* in the 3072 class */
  uint64_t v0, v1;
  size_t n0 = ncls(f->p, &v0);
  /* invalid tables change nothing */
  aa_class_spec dup[] = {{512, 0, 0}, {512, 0, 0}, {1u << 20, 0, 0}};
  aa_class_spec nomax[] = {{512, 0, 0}, {4096, 0, 0}};
  aa_class_spec badsz[] = {{512, 0, 0}, {700, 0, 0}, {1u << 20, 0, 0}};
  assert_int_equal(aa_pool_set_classes(f->p, dup, 3), AA_EINVAL);
  assert_int_equal(aa_pool_set_classes(f->p, nomax, 2), AA_EINVAL);
  assert_int_equal(aa_pool_set_classes(f->p, badsz, 3), AA_EINVAL);
  assert_int_equal(aa_pool_set_classes(f->p, NULL, 3), AA_EINVAL);
  assert_int_equal(aa_pool_set_classes(f->p, dup, 0), AA_EINVAL);
  assert_int_equal(ncls(f->p, &v1), n0);
  assert_int_equal(v1, v0);
  /* a valid one, given out of order */
  aa_class_spec t[] = {{65536, 4, 0}, {1u << 20, 0, 0}, {512, 0, 0}, {2048, 16, 2}};
  assert_int_equal(aa_pool_set_classes(f->p, t, 4), AA_OK);
  aa_class_spec v[AA_MAX_CLASSES];
  size_t n;
  aa_pool_classes(f->p, v, AA_MAX_CLASSES, &n, &v1);
  assert_int_equal(n, 4);
  assert_true(v1 > v0);
  assert_int_equal(v[0].block_size, 512);
  assert_int_equal(v[1].block_size, 2048);
  assert_int_equal(v[1].cache_limit, 16);
  assert_int_equal(v[2].block_size, 65536);
  assert_int_equal(v[3].block_size, 1u << 20);
  void *x = aa_alloc(f->p, 600, NULL);
  assert_int_equal(aa_block_size(f->p, x), 2048);
  void *y = aa_alloc(f->p, 3000, NULL);
  assert_int_equal(aa_block_size(f->p, y), 65536);
  /* the old block still frees, into its retiring class */
  assert_int_equal(aa_block_size(f->p, old), 3072);
  assert_int_equal(aa_free(f->p, old, 3000, NULL), AA_OK);
  aa_free(f->p, x, 0, NULL);
  aa_free(f->p, y, 0, NULL);
  aa_pool_stats st;
  aa_pool_release(f->p);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.class_count, 4); /* every retired class drained */
  assert_int_equal(st.bytes_reserved, 0);
}

/* A thread keeps blocks of a class in its cache; the class is retired
 * meanwhile. The class drains when that thread touches the pool again, or
 * at the latest when it exits. */
typedef struct hold {
  aa_pool *p;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int step;
} hold;

static void wait_step(hold *h, int s) {
  pthread_mutex_lock(&h->mu);
  while (h->step < s)
    pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
}

static void set_step(hold *h, int s) {
  pthread_mutex_lock(&h->mu);
  h->step = s;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&h->mu);
}

static void *holder(void *arg) {
  hold *h = arg;
  void *v[8];
  for (int i = 0; i < 8; i++)
    v[i] = aa_alloc(h->p, 6000, NULL); /* 6144 class */
  for (int i = 0; i < 8; i++)
    aa_free(h->p, v[i], 6000, NULL); /* into this thread's cache */
  set_step(h, 1);
  wait_step(h, 2);
  void *x = aa_alloc(h->p, 100, NULL); /* touch: flushes the stale bin */
  aa_free(h->p, x, 100, NULL);
  set_step(h, 3);
  wait_step(h, 4);
  return NULL;
}

static void test_core_classes_retire_with_thread_cache(void **state) {
  fx *f = *state;
  hold h = {f->p, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, holder, &h), 0);
  wait_step(&h, 1);
  assert_int_equal(aa_pool_class_retire(f->p, 6144), AA_OK);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  const aa_class_stats *c = cstat(&st, 6144, 1);
  assert_non_null(c); /* held by the other thread's cache */
  assert_int_equal(c->blocks_in_use, 0);
  set_step(&h, 2);
  wait_step(&h, 3);
  aa_pool_stats_get(f->p, &st);
  assert_null(cstat(&st, 6144, 1));
  set_step(&h, 4);
  pthread_join(t, NULL);
}

/* A thread that exits returns its cache. */
static void *user(void *arg) {
  aa_pool *p = arg;
  void *v[20];
  for (int i = 0; i < 20; i++)
    v[i] = aa_alloc(p, 10000, NULL);
  for (int i = 0; i < 20; i++)
    aa_free(p, v[i], 10000, NULL);
  return NULL;
}

static void test_core_classes_thread_exit_returns_cache(void **state) {
  fx *f = *state;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, user, f->p), 0);
  pthread_join(t, NULL);
  aa_pool_release(f->p);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.bytes_reserved, 0);
  assert_int_equal(st.allocs, 20); /* the dead thread's counts stay */
  assert_int_equal(st.frees, 20);
}

/* A pool whose default table is refused (more than AA_MAX_CLASSES classes)
 * fails after the pool struct was made: it must give back no thread-cache
 * slot it never held. Before, its destroy cleared slot 0, the fixture pool's,
 * so the next pool took that slot too and was served the fixture's cached
 * blocks. */
static void test_core_classes_refused_table_keeps_slots(void **state) {
  fx *f = *state;
  void *a = aa_alloc(f->p, 4096, NULL); /* the fixture's thread cache */
  assert_non_null(a);
  assert_int_equal(aa_free(f->p, a, 4096, NULL), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  cfg.classes_per_doubling = 16;
  cfg.max_small = (size_t)4 << 20;
  cfg.slab_size = (size_t)8 << 20;
  aa_pool *bad = (aa_pool *)&cfg;
  assert_int_equal(aa_pool_new(&cfg, &bad), AA_EINVAL);
  assert_null(bad);
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  aa_pool *other = NULL;
  assert_int_equal(aa_pool_new(&cfg, &other), AA_OK);
  void *q = aa_alloc(other, 4096, NULL);
  assert_non_null(q);
  assert_int_equal(aa_block_size(other, q), 4096); /* its own block */
  assert_int_equal(aa_block_size(f->p, q), 0);
  assert_int_equal(aa_free(other, q, 4096, NULL), AA_OK);
  aa_pool_destroy(other);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_core_classes_add, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_classes_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_classes_retire_drains, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_classes_retire_largest_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_classes_retire_then_readd, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_classes_set_and_prefill, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_classes_set_classes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_classes_retire_with_thread_cache, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_classes_thread_exit_returns_cache, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(test_core_classes_refused_table_keeps_slots, setup,
                                      teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
