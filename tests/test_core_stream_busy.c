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
 * released and carved again at the same address is another matter); a
 * getter reads a copier's backend-free snapshot before its list, so that
 * both are of one round. test_core_stream_busy_at_limit walks that
 * interleaving one step at a time. The checks fail when the host
 * backend's stream_query or event_query ignores busy streams.
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
#include "core_test.h"       /* core: the host backend's test hooks */

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
      for (int c = 0; c < SB_COPIERS; c++) {
        /* the snapshot before the list: read after it, it may be the
         * copier's next round's (taken after a release that let this
         * block come back legitimately); read before, it is the round of
         * any listing of q[m] seen below (q[m] was listed and freed before
         * we got it, and a list is cleared before the next snapshot) */
        uint64_t snap = atomic_load(&sh->fsnap[c]);
        for (int j = 0; j < SB_K; j++) {
          if (atomic_load(&sh->forbidden[c][j]) != q[m])
            continue;
          /* the same block, unless its slab went back to the backend (the
           * CUDA backends' cudaFree/cudaFreeHost wait for all work) and
           * was carved again at the same address */
          if (host_frees(sh->b) == snap)
            atomic_fetch_add(&sh->bad, 1);
          else
            atomic_fetch_add(&sh->recycled, 1);
        }
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

/*
 * The threaded test's interleaving, one step at a time: at the pool's limit
 * (two slabs of two 1 MiB blocks), blocks put back on a busy stream never
 * come back to the host stream through the out-of-memory retry. A batch in
 * flight (its event recorded) keeps its slab; a slab whose blocks all wait
 * in the stream's list with no event yet goes back to the backend (the
 * CUDA backends' cudaFree/cudaFreeHost wait for all work), counted in the
 * backend's frees: the one way an address freed on a busy stream may be
 * handed out again while it is busy, the case the threaded test lets
 * through only when the backend's free count moved since the block was
 * listed. Once the stream is idle its blocks come back with no new memory.
 */
static void test_core_stream_busy_at_limit(void **state) {
  (void)state;
  const size_t n = (size_t)1 << 20;
  const aa_stream s = (aa_stream)(uintptr_t)0x10000;
  aa_backend *b = NULL;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool *p = pool_new(b, (size_t)4 << 20);
  void *a[2], *c[2];
  for (int i = 0; i < 2; i++)
    a[i] = aa_alloc(p, n, AA_STREAM_HOST); /* slab A */
  for (int i = 0; i < 2; i++)
    c[i] = aa_alloc(p, n, AA_STREAM_HOST); /* slab B */
  for (int i = 0; i < 2; i++) {
    assert_non_null(a[i]);
    assert_non_null(c[i]);
  }
  assert_null(aa_alloc(p, n, AA_STREAM_HOST)); /* the limit */
  assert_int_equal(aa_backend_host_stream_busy(b, s, true), AA_OK);
  uint64_t f0 = host_frees(b);
  /* A's blocks on the busy stream: the pool records an event for them and
   * the retry cannot give A back (its blocks are pending) */
  for (int i = 0; i < 2; i++)
    assert_int_equal(aa_free(p, a[i], n, s), AA_OK);
  assert_null(aa_alloc(p, n, AA_STREAM_HOST));
  assert_int_equal(host_frees(b), f0);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(p, &st), AA_OK);
  assert_int_equal(st.pending_blocks, 2);
  /* B's blocks on the busy stream, A's batch still in flight: no event for
   * them yet, B is all free, so the retry gives B back and carves anew */
  for (int i = 0; i < 2; i++)
    assert_int_equal(aa_free(p, c[i], n, s), AA_OK);
  void *x = aa_alloc(p, n, AA_STREAM_HOST);
  assert_non_null(x);
  assert_int_equal(host_frees(b), f0 + 1);
  assert_ptr_not_equal(x, a[0]);
  assert_ptr_not_equal(x, a[1]);
  void *y = aa_alloc(p, n, AA_STREAM_HOST);
  assert_non_null(y);
  assert_ptr_not_equal(y, a[0]);
  assert_ptr_not_equal(y, a[1]);
  assert_null(aa_alloc(p, n, AA_STREAM_HOST)); /* A still busy */
  assert_int_equal(host_frees(b), f0 + 1);
  /* the stream finishes: A's blocks come back, no new memory */
  assert_int_equal(aa_backend_host_stream_busy(b, s, false), AA_OK);
  uint64_t allocs0;
  aa_backend_host_counts(b, &allocs0, NULL, NULL);
  void *z[2];
  for (int i = 0; i < 2; i++) {
    z[i] = aa_alloc(p, n, AA_STREAM_HOST);
    assert_true(z[i] == a[0] || z[i] == a[1]);
  }
  assert_ptr_not_equal(z[0], z[1]);
  uint64_t allocs1;
  aa_backend_host_counts(b, &allocs1, NULL, NULL);
  assert_int_equal(allocs1, allocs0);
  assert_int_equal(aa_pool_stats_get(p, &st), AA_OK);
  assert_int_equal(st.pending_blocks, 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(aa_free(p, z[i], n, AA_STREAM_HOST), AA_OK);
  assert_int_equal(aa_free(p, x, n, AA_STREAM_HOST), AA_OK);
  assert_int_equal(aa_free(p, y, n, AA_STREAM_HOST), AA_OK);
  aa_pool_destroy(p);
  aa_backend_destroy(b);
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
      cmocka_unit_test(test_core_stream_busy_at_limit),
      cmocka_unit_test(test_core_stream_busy_small),
      cmocka_unit_test(test_core_stream_busy_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
