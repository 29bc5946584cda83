/*
 * test_core_stream_busy.c — stream-ordered reuse under threads, on the host
 * backend's simulated busy streams (aa_backend_host_stream_busy): a block
 * freed on a stream is never handed out to another stream while that stream
 * has been busy since before the free, on the small and the large path,
 * with the pool held at its limit so that the blocks waiting on busy streams
 * are the ones asked for (the pool asks the backend whether the stream is
 * idle, stream_query, before it records an event).
 *
 * Copier threads each take K buffers on the host pseudo-stream, mark their
 * stream busy, list the buffers and free them on it, wait until the getters
 * have run the pool dry twice, then unlist them and mark the stream idle.
 * Getter threads take buffers until the pool has none (the limit), check
 * each against the lists, and give them back. A listed address met again
 * counts only when no slab went back to the backend since it was listed
 * (the CUDA backends' cudaFree / cudaFreeHost wait for all work, so a slab
 * released and carved again at the same address is another matter). The
 * check fails when the host backend's stream_query ignores busy streams.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h" /* AA_STREAM_HOST */
#include "test_hooks.h"      /* core/src: the host backend's test hooks */

/* A pool over b with a limit, without thread caches (every free reaches
 * the central lists, every free of a large block the locked path). */
static aa_pool *pool_new(aa_backend *b, size_t limit) {
  aa_pool_config cfg;
  aa_pool *p = NULL;
  aa_pool_config_init(&cfg);
  cfg.name = "stream-busy";
  cfg.backend = b;
  cfg.large_mode = AA_LARGE_CACHE;
  cfg.limit_bytes = limit;
  cfg.tcache_blocks = 0;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  return p;
}

enum { SB_COPIERS = 3,
       SB_GETTERS = 2,
       SB_K = 4,
       SB_ROUNDS = 300 };

typedef struct sb_shared {
  aa_backend *b;
  aa_pool *p;
  size_t n;
  _Atomic(void *) forbidden[SB_COPIERS][SB_K];
  _Atomic uint64_t fsnap[SB_COPIERS]; /* backend frees when they were listed */
  _Atomic long recycled;              /* listed addresses met after a slab went back */
  _Atomic int copiers_left;
  _Atomic int bad;
  _Atomic long got;
  _Atomic long drains; /* getters' passes that ran the pool dry */
} sb_shared;

typedef struct sb_arg {
  sb_shared *sh;
  int id;
} sb_arg;

static uint64_t host_frees(aa_backend *b) {
  uint64_t fr;
  aa_backend_host_counts(b, NULL, &fr, NULL);
  return fr;
}

static void *sb_copier(void *arg) {
  sb_arg *a = arg;
  sb_shared *sh = a->sh;
  aa_stream s = (aa_stream)(uintptr_t)(0x10000 * (a->id + 1));
  for (int r = 0; r < SB_ROUNDS; r++) {
    void *v[SB_K];
    for (int k = 0; k < SB_K; k++)
      v[k] = aa_alloc(sh->p, sh->n, AA_STREAM_HOST); /* NULL at the limit */
    if (aa_backend_host_stream_busy(sh->b, s, true) != AA_OK)
      atomic_fetch_add(&sh->bad, 1000);
    atomic_store(&sh->fsnap[a->id], host_frees(sh->b));
    for (int k = 0; k < SB_K; k++) {
      atomic_store(&sh->forbidden[a->id][k], v[k]);
      if (v[k] != NULL && aa_free(sh->p, v[k], sh->n, s) != AA_OK)
        atomic_fetch_add(&sh->bad, 1000);
    }
    /* the getters run the pool dry twice while the stream is busy */
    long d0 = atomic_load(&sh->drains);
    while (atomic_load(&sh->drains) < d0 + 2)
      sched_yield();
    for (int k = 0; k < SB_K; k++)
      atomic_store(&sh->forbidden[a->id][k], NULL);
    if (aa_backend_host_stream_busy(sh->b, s, false) != AA_OK)
      atomic_fetch_add(&sh->bad, 1000);
  }
  atomic_fetch_sub(&sh->copiers_left, 1);
  return NULL;
}

static void *sb_getter(void *arg) {
  sb_arg *a = arg;
  sb_shared *sh = a->sh;
  enum { MAXG = 64 };
  void *q[MAXG];
  while (atomic_load(&sh->copiers_left) > 0) {
    /* run the pool dry (the limit), so that the blocks on busy streams are
     * the only ones left to ask for */
    int m = 0;
    while (m < MAXG) {
      q[m] = aa_alloc(sh->p, sh->n, AA_STREAM_HOST);
      if (q[m] == NULL)
        break;
      atomic_fetch_add(&sh->got, 1);
      for (int c = 0; c < SB_COPIERS; c++)
        for (int j = 0; j < SB_K; j++)
          if (atomic_load(&sh->forbidden[c][j]) == q[m]) {
            /* the same block, unless its slab went back to the backend (the
             * CUDA backends' cudaFree/cudaFreeHost wait for all work) and
             * was carved again at the same address */
            if (host_frees(sh->b) == atomic_load(&sh->fsnap[c]))
              atomic_fetch_add(&sh->bad, 1);
            else
              atomic_fetch_add(&sh->recycled, 1);
          }
      m++;
    }
    for (int k = 0; k < m; k++)
      (void)aa_free(sh->p, q[k], sh->n, AA_STREAM_HOST);
    atomic_fetch_add(&sh->drains, 1);
  }
  return NULL;
}

static void sb_busy_threads(size_t n, size_t limit) {
  sb_shared *sh = calloc(1, sizeof *sh);
  assert_non_null(sh);
  assert_int_equal(aa_backend_host_new(&sh->b), AA_OK);
  /* a limit: the getters run the pool dry, so that blocks put back on the
   * busy streams are asked for */
  sh->p = pool_new(sh->b, limit);
  sh->n = n;
  atomic_store(&sh->copiers_left, SB_COPIERS);
  pthread_t th[SB_COPIERS + SB_GETTERS];
  sb_arg args[SB_COPIERS + SB_GETTERS];
  for (int i = 0; i < SB_COPIERS + SB_GETTERS; i++) {
    args[i] = (sb_arg){sh, i < SB_COPIERS ? i : i - SB_COPIERS};
    assert_int_equal(
        pthread_create(&th[i], NULL, i < SB_COPIERS ? sb_copier : sb_getter, &args[i]), 0);
  }
  for (int i = 0; i < SB_COPIERS + SB_GETTERS; i++)
    assert_int_equal(pthread_join(th[i], NULL), 0);
  assert_int_equal(atomic_load(&sh->bad), 0);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(sh->p, &st), AA_OK);
  assert_int_equal(st.bytes_in_use, 0);
  assert_true(st.stream_queries > 0);
  aa_pool_destroy(sh->p);
  aa_backend_destroy(sh->b);
  free(sh);
}

static void test_core_stream_busy_small(void **state) {
  (void)state;
  sb_busy_threads((size_t)1 << 20, (size_t)16 << 20); /* a small class, two a slab */
}

static void test_core_stream_busy_large(void **state) {
  (void)state;
  sb_busy_threads((size_t)3 << 20, (size_t)72 << 20); /* 18 segments of 4 MiB */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_stream_busy_small),
      cmocka_unit_test(test_core_stream_busy_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
