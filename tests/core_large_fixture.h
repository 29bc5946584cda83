/*
 * core_large_fixture.h — the pool fixture of the large-path tests
 * (test_core_expandable.c, test_core_ltc.c, test_core_place.c): a host backend, a pool in the
 * given large mode, misuse reports counted (from any thread), and a
 * teardown that checks the backend got every byte back.
 */
#ifndef AA_TEST_CORE_LARGE_FIXTURE_H
#define AA_TEST_CORE_LARGE_FIXTURE_H

#include <pthread.h>
#include <stdlib.h>

#include "adaptalloc/core.h"
#include "core_test.h" /* core: the host backend's test hooks */

#define MiB ((size_t)1 << 20)

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
  int misuses;
  aa_misuse last;
  pthread_mutex_t mu;
} fx;

static void on_error(void *user, aa_pool *pool, aa_misuse what, const void *ptr, size_t size,
                     const char *msg) {
  fx *f = user;
  (void)pool, (void)ptr, (void)size, (void)msg;
  pthread_mutex_lock(&f->mu);
  f->misuses++;
  f->last = what;
  pthread_mutex_unlock(&f->mu);
}

/* The fixture over a configuration the caller filled (aa_pool_config_init
 * and its own fields); the backend (made aliasable first when asked:
 * aa_backend_host_aliasable, shared pages, map_alias) and the misuse hook
 * are set here. */
static inline fx *make_cfg(aa_pool_config *cfg, bool aliasable) {
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  pthread_mutex_init(&f->mu, NULL);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  if (aliasable)
    assert_int_equal(aa_backend_host_aliasable(f->b), AA_OK);
  cfg->backend = f->b;
  cfg->on_error = on_error;
  cfg->on_error_user = f;
  assert_int_equal(aa_pool_new(cfg, &f->p), AA_OK);
  return f;
}

/* A pool on the host backend; map_runs sets aa_pool_config.large_map_runs,
 * stitch its large_stitch; `aliasable` as make_cfg's. */
static inline fx *make_full(aa_large_mode mode, size_t limit, int map_runs, bool aliasable,
                            int stitch) {
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.large_mode = mode;
  cfg.large_map_runs = map_runs;
  cfg.large_stitch = stitch;
  cfg.limit_bytes = limit;
  return make_cfg(&cfg, aliasable);
}

static inline fx *make_with(aa_large_mode mode, size_t limit, int map_runs) {
  return make_full(mode, limit, map_runs, false, 0);
}

static inline fx *make(aa_large_mode mode, size_t limit) {
  return make_with(mode, limit, 0);
}

static aa_pool_stats stats(fx *f) {
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  return st;
}

/* Destroys the pool: the backend must have every mapping back. */
static void fx_done(fx *f) {
  aa_pool_destroy(f->p);
  uint64_t a, fr, mapped;
  aa_backend_host_counts(f->b, &a, &fr, &mapped);
  assert_int_equal(mapped, 0);
  assert_int_equal(a, fr);
  aa_backend_destroy(f->b);
  pthread_mutex_destroy(&f->mu);
  free(f);
}

#endif
