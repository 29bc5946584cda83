/*
 * test_core_ltc.c — the per-thread large-block cache: a thread's free of a
 * large block it allocated is held for its next request of the same size,
 * without the pool lock. Checked here: accounting while held, exact reuse,
 * frees from other threads (stale entries, double frees), releases and
 * exits that must give held blocks back, another thread's request or
 * release taking an idle thread's held block back (before growth, at its
 * second look, not at its first), record_stream'd blocks, and a
 * cross-thread stress with data checks.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "core_test.h" /* core: the host backend's test hooks */

#include "core_large_fixture.h"

/* A held block is free in the books and comes back for the same size. */
static void test_core_ltc_reuse_and_accounting(void **state) {
  (void)state;
  aa_large_mode modes[] = {AA_LARGE_CACHE, AA_LARGE_EXPANDABLE};
  for (size_t m = 0; m < 2; m++) {
    fx *f = make(modes[m], 0);
    char *a = aa_alloc(f->p, 8 * MiB, NULL);
    assert_non_null(a);
    memset(a, 0x3C, 8 * MiB);
    aa_pool_stats s0 = stats(f);
    assert_int_equal(aa_free(f->p, a, 8 * MiB, NULL), AA_OK);
    aa_pool_stats s1 = stats(f);
    assert_int_equal(s1.large_bytes_in_use, 0);
    assert_int_equal(s1.bytes_requested, 0);
    assert_int_equal(s1.frees, s0.frees + 1);
    char *b = aa_alloc(f->p, 8 * MiB, NULL);
    assert_ptr_equal(b, a);
    aa_pool_stats s2 = stats(f);
    assert_int_equal(s2.large_bytes_in_use, 8 * MiB);
    assert_int_equal(s2.allocs, s0.allocs + 1);
    assert_int_equal(s2.backend_allocs, s0.backend_allocs);
    /* a different size: the held block merges back and serves it */
    assert_int_equal(aa_free(f->p, b, 0, NULL), AA_OK);
    char *c = aa_alloc(f->p, 6 * MiB, NULL);
    assert_ptr_equal(c, a);
    assert_int_equal(aa_free(f->p, c, 0, NULL), AA_OK);
    /* release from this thread gives held blocks back */
    (void)aa_pool_release(f->p);
    assert_int_equal(stats(f).large_bytes_reserved, 0);
    fx_done(f);
  }
}

/* The same stream only: a block freed on one stream is not handed to
 * another through the thread cache. */
static void test_core_ltc_stream(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_CACHE, 0);
  aa_stream s1 = (aa_stream)(uintptr_t)0x51, s2 = (aa_stream)(uintptr_t)0x52;
  aa_pool_set_stream_wait(f->p, false); /* else a pending block serves by a wait */
  aa_backend_host_hold_events(f->b, true);
  char *a = aa_alloc(f->p, 4 * MiB, s1);
  assert_int_equal(aa_free(f->p, a, 0, s1), AA_OK);
  char *b = aa_alloc(f->p, 4 * MiB, s2);
  assert_non_null(b);
  assert_true(b != a);
  char *c = aa_alloc(f->p, 4 * MiB, s1); /* merged back, same stream: reusable */
  assert_ptr_equal(c, a);
  assert_int_equal(aa_free(f->p, b, 0, s2), AA_OK);
  assert_int_equal(aa_free(f->p, c, 0, s1), AA_OK);
  aa_backend_host_hold_events(f->b, false);
  fx_done(f);
}

/* record_stream'd blocks need events at free: never held. */
static void test_core_ltc_record_stream(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_CACHE, 0);
  aa_stream s1 = (aa_stream)(uintptr_t)0x51, s2 = (aa_stream)(uintptr_t)0x52;
  aa_pool_set_stream_wait(f->p, false); /* else a pending block serves by a wait */
  aa_backend_host_hold_events(f->b, true);
  char *a = aa_alloc(f->p, 4 * MiB, s1);
  assert_int_equal(aa_record_stream(f->p, a, s2), AA_OK);
  assert_int_equal(aa_free(f->p, a, 0, s1), AA_OK);
  /* s2's work may still read it: not for s1 at once either */
  char *b = aa_alloc(f->p, 4 * MiB, s1);
  assert_true(b != a);
  aa_backend_host_hold_events(f->b, false);
  char *c = aa_alloc(f->p, 4 * MiB, s1);
  assert_ptr_equal(c, a);
  assert_int_equal(aa_free(f->p, b, 0, s1), AA_OK);
  assert_int_equal(aa_free(f->p, c, 0, s1), AA_OK);
  fx_done(f);
}

typedef struct job {
  fx *f;
  char *p;
  size_t size;
  int rc;
} job;

static void *free_it(void *arg) {
  job *j = arg;
  j->rc = aa_free(j->f->p, j->p, j->size, NULL);
  return NULL;
}

static void *alloc_free_exit(void *arg) {
  job *j = arg;
  j->p = aa_alloc(j->f->p, j->size, NULL);
  j->rc = j->p ? aa_free(j->f->p, j->p, j->size, NULL) : AA_ENOMEM;
  return NULL; /* exits holding the block: the exit must give it back */
}

/* Another thread frees a block this thread allocated (this thread's entry
 * goes stale); this thread's later free of it is a double free, caught. */
static void test_core_ltc_cross_thread_free(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_EXPANDABLE, 0);
  job j = {f, aa_alloc(f->p, 8 * MiB, NULL), 8 * MiB, -1};
  assert_non_null(j.p);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, free_it, &j), 0);
  pthread_join(t, NULL);
  assert_int_equal(j.rc, AA_OK);
  assert_int_equal(aa_free(f->p, j.p, 0, NULL), AA_EINVAL);
  assert_int_equal(f->last, AA_MISUSE_DOUBLE_FREE);
  /* held here, then freed again from another thread: also caught */
  char *b = aa_alloc(f->p, 8 * MiB, NULL);
  assert_int_equal(aa_free(f->p, b, 0, NULL), AA_OK);
  job k = {f, b, 0, -1};
  assert_int_equal(pthread_create(&t, NULL, free_it, &k), 0);
  pthread_join(t, NULL);
  assert_int_equal(k.rc, AA_EINVAL);
  assert_int_equal(f->last, AA_MISUSE_DOUBLE_FREE);
  assert_int_equal(f->misuses, 2);
  assert_int_equal(stats(f).large_bytes_in_use, 0);
  fx_done(f);
}

/* A thread that exits holding blocks gives them back. */
static void test_core_ltc_thread_exit(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_EXPANDABLE, 0);
  job j = {f, NULL, 16 * MiB, -1};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, alloc_free_exit, &j), 0);
  pthread_join(t, NULL);
  assert_int_equal(j.rc, AA_OK);
  aa_pool_stats s = stats(f);
  assert_int_equal(s.large_bytes_in_use, 0);
  assert_int_equal(s.allocs, s.frees);
  (void)aa_pool_release(f->p);
  assert_int_equal(stats(f).large_bytes_reserved, 0);
  fx_done(f);
}

/* Destroying the pool while a thread holds blocks loses nothing. */
static void test_core_ltc_destroy_while_held(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_CACHE, 0);
  char *a = aa_alloc(f->p, 8 * MiB, NULL);
  assert_int_equal(aa_free(f->p, a, 0, NULL), AA_OK); /* held */
  fx_done(f);
}

/* A thread that holds a block and then waits (PyTorch's autograd thread
 * between backward passes) while another allocates. */
typedef struct holder {
  fx *f;
  size_t size;
  char *p;
  int rc;
  pthread_barrier_t bar;
  pthread_t t;
} holder;

static void *hold_wait_reuse(void *arg) {
  holder *h = arg;
  h->p = aa_alloc(h->f->p, h->size, NULL);
  h->rc = h->p ? aa_free(h->f->p, h->p, h->size, NULL) : AA_ENOMEM; /* held */
  pthread_barrier_wait(&h->bar);                                    /* 1: held */
  pthread_barrier_wait(&h->bar);                                    /* 2: the other thread allocated */
  /* the same size again: its entry went stale when the block was taken
   * back, so this goes the locked way and must still work */
  char *q = aa_alloc(h->f->p, h->size, NULL);
  if (q == NULL) {
    h->rc = AA_ENOMEM;
  } else {
    memset(q, 0x5A, h->size);
    h->rc = aa_free(h->f->p, q, h->size, NULL);
  }
  pthread_barrier_wait(&h->bar); /* 3: done, holding again */
  pthread_barrier_wait(&h->bar); /* 4: may exit */
  return NULL;
}

/* Starts a holder and waits until it holds its block. On the heap: a
 * failed assertion leaves the thread waiting on a barrier that must outlive
 * the test (the process's exit ends it). */
static holder *holder_start(fx *f, size_t size) {
  holder *h = calloc(1, sizeof *h);
  assert_non_null(h);
  h->f = f;
  h->size = size;
  h->rc = -1;
  pthread_barrier_init(&h->bar, NULL, 2);
  assert_int_equal(pthread_create(&h->t, NULL, hold_wait_reuse, h), 0);
  pthread_barrier_wait(&h->bar); /* 1: held */
  return h;
}

static void holder_done(holder *h) {
  pthread_join(h->t, NULL);
  pthread_barrier_destroy(&h->bar);
  free(h);
}

/* Another thread's request that finds no fit takes the held block back
 * rather than growing the pool (on the old code the pool took a second
 * segment), and the holder's stale entry is forgotten. */
static void test_core_ltc_reclaim_before_growth(void **state) {
  (void)state;
  aa_large_mode modes[] = {AA_LARGE_CACHE, AA_LARGE_EXPANDABLE};
  for (size_t m = 0; m < 2; m++) {
    fx *f = make(modes[m], 0);
    holder *h = holder_start(f, 8 * MiB); /* 1: held */
    assert_int_equal(h->rc, AA_OK);
    aa_pool_stats s0 = stats(f);
    assert_int_equal(s0.large_bytes_held, 8 * MiB);
    assert_int_equal(s0.large_bytes_in_use, 0);
    assert_int_equal(s0.large_held_reclaims, 0);
    char *a = aa_alloc(f->p, 6 * MiB, NULL);
    assert_non_null(a);
    assert_ptr_equal(a, h->p); /* the held block's memory */
    memset(a, 0x11, 6 * MiB);
    aa_pool_stats s1 = stats(f);
    assert_int_equal(s1.bytes_reserved, s0.bytes_reserved);
    assert_int_equal(s1.large_bytes_held, 0);
    assert_int_equal(s1.large_held_reclaims, 1);
    assert_int_equal(s1.large_bytes_in_use, 6 * MiB);
    pthread_barrier_wait(&h->bar); /* 2 */
    pthread_barrier_wait(&h->bar); /* 3 */
    assert_int_equal(h->rc, AA_OK);
    aa_pool_stats s2 = stats(f);
    assert_int_equal(s2.large_bytes_held, 8 * MiB);
    assert_int_equal(s2.large_bytes_in_use, 6 * MiB);
    assert_true(a[0] == 0x11 && a[6 * MiB - 1] == 0x11);
    assert_int_equal(aa_free(f->p, a, 6 * MiB, NULL), AA_OK);
    pthread_barrier_wait(&h->bar); /* 4 */
    holder_done(h);
    aa_pool_stats s3 = stats(f); /* the exit gave its block back; this thread holds `a` */
    assert_int_equal(s3.large_bytes_held, 6 * MiB);
    assert_int_equal(s3.large_bytes_in_use, 0);
    assert_int_equal(s3.allocs, s3.frees);
    assert_int_equal(f->misuses, 0);
    fx_done(f);
  }
}

/* Without growth: another thread's locked requests leave a held block
 * alone at the first look (its holder may be about to reuse it) and take it
 * back at the next if it is still held, unchanged. */
static void test_core_ltc_reclaim_idle(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_CACHE, 0);
  /* room for every request below, free in the pool (not held: only the
   * block a thread was handed last can be held) */
  char *big = aa_alloc(f->p, 16 * MiB, NULL);
  char *big2 = aa_alloc(f->p, 20 * MiB, NULL);
  assert_int_equal(aa_free(f->p, big, 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, big2, 0, NULL), AA_OK); /* held here */
  holder *h = holder_start(f, 8 * MiB);                  /* 1: held */
  uint64_t reserved = stats(f).bytes_reserved;
  char *a = aa_alloc(f->p, 2 * MiB, NULL); /* first look */
  assert_non_null(a);
  aa_pool_stats s1 = stats(f);
  assert_int_equal(s1.large_held_reclaims, 0);
  assert_int_equal(s1.large_bytes_held, 8 * MiB);
  char *b = aa_alloc(f->p, 3 * MiB, NULL); /* still held, unchanged: taken back */
  assert_non_null(b);
  aa_pool_stats s2 = stats(f);
  assert_int_equal(s2.large_held_reclaims, 1);
  assert_int_equal(s2.large_bytes_held, 0);
  assert_int_equal(s2.bytes_reserved, reserved); /* no growth on the way */
  pthread_barrier_wait(&h->bar);                 /* 2 */
  pthread_barrier_wait(&h->bar);                 /* 3: reused its size the locked way */
  assert_int_equal(h->rc, AA_OK);
  assert_int_equal(aa_free(f->p, a, 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, b, 0, NULL), AA_OK);
  pthread_barrier_wait(&h->bar); /* 4 */
  holder_done(h);
  aa_pool_stats s3 = stats(f);
  assert_int_equal(s3.large_bytes_in_use, 0);
  assert_int_equal(s3.allocs, s3.frees);
  assert_int_equal(f->misuses, 0);
  fx_done(f);
}

/* A release from one thread gives back what an idle thread holds (an
 * out-of-memory retry needs it); on the old code the segment stayed. */
static void test_core_ltc_release_takes_held_back(void **state) {
  (void)state;
  fx *f = make(AA_LARGE_CACHE, 0);
  holder *h = holder_start(f, 8 * MiB); /* 1: held */
  assert_int_equal(stats(f).large_bytes_reserved, 8 * MiB);
  (void)aa_pool_release(f->p);
  aa_pool_stats s = stats(f);
  assert_int_equal(s.large_bytes_reserved, 0);
  assert_int_equal(s.large_bytes_held, 0);
  pthread_barrier_wait(&h->bar); /* 2 */
  pthread_barrier_wait(&h->bar); /* 3 */
  assert_int_equal(h->rc, AA_OK);
  pthread_barrier_wait(&h->bar); /* 4 */
  holder_done(h);
  assert_int_equal(stats(f).large_bytes_in_use, 0);
  assert_int_equal(f->misuses, 0);
  fx_done(f);
}

/* Threads allocate, write, pass blocks to each other and free them. */
enum { NT = 4,
       NB = 32,
       ROUNDS = 4000 };
typedef struct shared {
  fx *f;
  pthread_mutex_t mu;
  char *slot[NB];
  size_t size[NB];
  unsigned char tag[NB];
  int bad;
} shared;

typedef struct worker {
  shared *sh;
  unsigned seed;
} worker;

static void *stress(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  for (int r = 0; r < ROUNDS; r++) {
    w->seed = w->seed * 1103515245u + 12345u;
    int i = (int)((w->seed >> 8) % NB);
    size_t sz = ((size_t)1 + (w->seed >> 16) % 4) * 2 * MiB;
    pthread_mutex_lock(&sh->mu);
    char *p = sh->slot[i];
    size_t psz = sh->size[i];
    unsigned char tag = sh->tag[i];
    sh->slot[i] = NULL;
    pthread_mutex_unlock(&sh->mu);
    if (p) {
      if (p[0] != (char)tag || p[psz - 1] != (char)tag)
        __atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED);
      if (aa_free(sh->f->p, p, psz, NULL) != AA_OK)
        __atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED);
      continue;
    }
    char *q = aa_alloc(sh->f->p, sz, NULL);
    if (q == NULL) {
      __atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED);
      continue;
    }
    unsigned char t = (unsigned char)(w->seed >> 24);
    q[0] = (char)t;
    q[sz - 1] = (char)t;
    pthread_mutex_lock(&sh->mu);
    if (sh->slot[i] == NULL) {
      sh->slot[i] = q;
      sh->size[i] = sz;
      sh->tag[i] = t;
      q = NULL;
    }
    pthread_mutex_unlock(&sh->mu);
    if (q && aa_free(sh->f->p, q, sz, NULL) != AA_OK)
      __atomic_fetch_add(&sh->bad, 1, __ATOMIC_RELAXED);
    if (r % 1000 == 999)
      (void)aa_pool_release(sh->f->p);
  }
  return NULL;
}

static void test_core_ltc_stress(void **state) {
  (void)state;
  aa_large_mode modes[] = {AA_LARGE_CACHE, AA_LARGE_EXPANDABLE};
  for (size_t m = 0; m < 2; m++) {
    shared sh;
    memset(&sh, 0, sizeof sh);
    sh.f = make(modes[m], 0);
    pthread_mutex_init(&sh.mu, NULL);
    pthread_t t[NT];
    worker w[NT];
    for (int i = 0; i < NT; i++) {
      w[i] = (worker){&sh, 77u + (unsigned)i * 1000u};
      assert_int_equal(pthread_create(&t[i], NULL, stress, &w[i]), 0);
    }
    for (int i = 0; i < NT; i++)
      pthread_join(t[i], NULL);
    assert_int_equal(sh.bad, 0);
    assert_int_equal(sh.f->misuses, 0);
    for (int i = 0; i < NB; i++) {
      if (sh.slot[i])
        assert_int_equal(aa_free(sh.f->p, sh.slot[i], sh.size[i], NULL), AA_OK);
    }
    aa_pool_stats s = stats(sh.f);
    assert_int_equal(s.large_bytes_in_use, 0);
    assert_int_equal(s.allocs, s.frees);
    pthread_mutex_destroy(&sh.mu);
    fx_done(sh.f);
  }
}

/* Holders free and take back their own same-size blocks, idling now and
 * then, while growers force the pool to look for memory (taking held blocks
 * back), release and trim, and a reader takes stats: a live sentinel block
 * must show in large_bytes_in_use in every snapshot (a reclaim's accounting
 * once let it read 0), held never above reserved, and nothing held at the
 * end. */
#define RS_HOLDERS 4
#define RS_ROUNDS 300
#define RS_WAVES 6

typedef struct rs {
  fx *f;
  atomic_int stop;
  atomic_int bad;
  atomic_long snaps;
  atomic_long glitches;
} rs;

typedef struct rs_arg {
  rs *r;
  int id;
} rs_arg;

static void *rs_holder(void *a) {
  rs_arg *h = a;
  size_t sz = (size_t)(2 + h->id % 5) * MiB + 4096 * (size_t)(h->id % 3);
  unsigned seed = 1234u + (unsigned)h->id;
  for (int i = 0; i < RS_ROUNDS; i++) {
    unsigned char *p = aa_alloc(h->r->f->p, sz, NULL);
    if (p == NULL) {
      atomic_fetch_add(&h->r->bad, 1);
      continue;
    }
    unsigned char t = (unsigned char)(h->id * 31 + i);
    p[0] = t;
    p[sz - 1] = t;
    seed = seed * 1103515245u + 12345u;
    if ((seed >> 16) % 8 == 0)
      usleep(50);
    if (p[0] != t || p[sz - 1] != t || aa_free(h->r->f->p, p, sz, NULL) != AA_OK)
      atomic_fetch_add(&h->r->bad, 1);
    if ((seed >> 20) % 16 == 0)
      usleep(100); /* idle while its cache holds the block */
  }
  return NULL;
}

static void *rs_grower(void *a) {
  rs_arg *g = a;
  unsigned seed = 99u + (unsigned)g->id;
  unsigned char *live[4] = {0};
  size_t lsz[4] = {0};
  while (!atomic_load(&g->r->stop)) {
    seed = seed * 1103515245u + 12345u;
    int i = (int)((seed >> 8) % 4);
    if (live[i] != NULL) {
      if (aa_free(g->r->f->p, live[i], lsz[i], NULL) != AA_OK)
        atomic_fetch_add(&g->r->bad, 1);
      live[i] = NULL;
    } else {
      lsz[i] = (size_t)(1 + (seed >> 12) % 40) * MiB + ((seed >> 4) % 7) * 8192;
      live[i] = aa_alloc(g->r->f->p, lsz[i], NULL);
      if (live[i] == NULL)
        atomic_fetch_add(&g->r->bad, 1);
    }
    if ((seed >> 18) % 200 == 0)
      (void)aa_pool_release(g->r->f->p);
    if ((seed >> 18) % 200 == 1)
      (void)aa_pool_trim(g->r->f->p, 0);
  }
  for (int i = 0; i < 4; i++)
    if (live[i] != NULL)
      (void)aa_free(g->r->f->p, live[i], lsz[i], NULL);
  return NULL;
}

static void *rs_reader(void *a) {
  rs *r = a;
  while (!atomic_load(&r->stop)) {
    aa_pool_stats s;
    if (aa_pool_stats_get(r->f->p, &s) != AA_OK)
      atomic_fetch_add(&r->bad, 1);
    else if (s.large_bytes_in_use < 10 * MiB || s.large_bytes_held > s.large_bytes_reserved)
      atomic_fetch_add(&r->glitches, 1);
    atomic_fetch_add(&r->snaps, 1);
    usleep(200);
  }
  return NULL;
}

static void test_core_ltc_reclaim_stress(void **state) {
  (void)state;
  aa_large_mode modes[] = {AA_LARGE_CACHE, AA_LARGE_EXPANDABLE};
  for (size_t m = 0; m < 2; m++) {
    rs r;
    memset(&r, 0, sizeof r);
    r.f = make(modes[m], 0);
    void *sentinel = aa_alloc(r.f->p, 10 * MiB, NULL);
    assert_non_null(sentinel);
    pthread_t g[2], rd;
    rs_arg ga[2];
    for (int i = 0; i < 2; i++) {
      ga[i] = (rs_arg){&r, i};
      assert_int_equal(pthread_create(&g[i], NULL, rs_grower, &ga[i]), 0);
    }
    assert_int_equal(pthread_create(&rd, NULL, rs_reader, &r), 0);
    for (int w = 0; w < RS_WAVES; w++) {
      pthread_t h[RS_HOLDERS];
      rs_arg ha[RS_HOLDERS];
      for (int i = 0; i < RS_HOLDERS; i++) {
        ha[i] = (rs_arg){&r, w * RS_HOLDERS + i};
        assert_int_equal(pthread_create(&h[i], NULL, rs_holder, &ha[i]), 0);
      }
      for (int i = 0; i < RS_HOLDERS; i++)
        pthread_join(h[i], NULL);
    }
    atomic_store(&r.stop, 1);
    for (int i = 0; i < 2; i++)
      pthread_join(g[i], NULL);
    pthread_join(rd, NULL);
    assert_int_equal(atomic_load(&r.bad), 0);
    assert_int_equal(r.f->misuses, 0);
    assert_true(atomic_load(&r.snaps) > 0);
    assert_int_equal(atomic_load(&r.glitches), 0);
    aa_pool_stats s = stats(r.f);
    assert_int_equal(s.large_bytes_held, 0); /* the holders' threads exited */
    assert_int_equal(s.large_bytes_in_use, 10 * MiB);
    assert_int_equal(aa_free(r.f->p, sentinel, 10 * MiB, NULL), AA_OK);
    s = stats(r.f);
    assert_int_equal(s.large_bytes_in_use, 0);
    assert_int_equal(s.allocs, s.frees);
    fx_done(r.f);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_ltc_reuse_and_accounting),
      cmocka_unit_test(test_core_ltc_stream),
      cmocka_unit_test(test_core_ltc_record_stream),
      cmocka_unit_test(test_core_ltc_cross_thread_free),
      cmocka_unit_test(test_core_ltc_thread_exit),
      cmocka_unit_test(test_core_ltc_destroy_while_held),
      cmocka_unit_test(test_core_ltc_reclaim_before_growth),
      cmocka_unit_test(test_core_ltc_reclaim_idle),
      cmocka_unit_test(test_core_ltc_release_takes_held_back),
      cmocka_unit_test(test_core_ltc_stress),
      cmocka_unit_test(test_core_ltc_reclaim_stress),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
