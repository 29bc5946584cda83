/*
 * test_core_stress.c — 4 threads allocate and free random sizes on their own
 * streams, write a pattern into every block and check it before freeing,
 * hand some blocks to each other to free, while a fifth thread adds,
 * retires and changes classes, replaces the whole table, trims, toggles
 * telemetry and holds events. At the end the accounting must be exact and
 * every byte must go back. Bounded by operations and by about a second.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "core_test.h" /* core: the host backend's test hooks */

enum { WORKERS = 4,
       LIVE = 128,
       OPS = 60000,
       MIN_OPS = 3000,
       XCHG = 64 };
#define BUDGET_NS 800000000ull

typedef struct blk {
  unsigned char *p;
  size_t size;
  unsigned char tag;
} blk;

typedef struct shared {
  aa_pool *pool;
  aa_backend *b;
  atomic_int running;
  atomic_uint_fast64_t allocs, frees, failed;
  uint64_t deadline;
  pthread_mutex_t xmu;
  blk xchg[XCHG];
  int nx;
} shared;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t rnd_size(unsigned *seed) {
  unsigned r = (unsigned)rand_r(seed);
  switch (r % 16) {
  case 0:
    return 1 + (size_t)rand_r(seed) % (1u << 20); /* up to max_small */
  case 1:
    if (r % 64 == 1)
      return (1u << 20) + 1 + (size_t)rand_r(seed) % (3u << 20); /* large */
    return 1 + (size_t)rand_r(seed) % 512;
  default:
    return 1 + (size_t)rand_r(seed) % (64u << 10);
  }
}

/* Pattern: every byte of the first KiB (compared with memcmp against a
 * reference row), then one byte in every 512 and the last byte. */
enum { HEAD = 1024 };
static unsigned char ref[256][HEAD];

static void init_ref(void) {
  for (int t = 0; t < 256; t++)
    memset(ref[t], t, HEAD);
}

static void fill(blk *b) {
  size_t n = b->size < HEAD ? b->size : HEAD;
  memcpy(b->p, ref[b->tag], n);
  for (size_t i = HEAD; i < b->size; i += 512)
    b->p[i] = (unsigned char)(b->tag ^ (i >> 9));
  b->p[b->size - 1] = (unsigned char)~b->tag;
}

static void check(const blk *b) {
  size_t n = b->size < HEAD ? b->size : HEAD;
  if (n > 1 && memcmp(b->p, ref[b->tag], n - 1) != 0)
    fail_msg("pattern broken in the head of a %zu-byte block", b->size);
  for (size_t i = HEAD; i + 1 < b->size; i += 512) {
    if (b->p[i] != (unsigned char)(b->tag ^ (i >> 9)))
      fail_msg("pattern broken at %zu of %zu", i, b->size);
  }
  if (b->p[b->size - 1] != (unsigned char)~b->tag)
    fail_msg("tail broken (%zu)", b->size);
}

typedef struct warg {
  shared *sh;
  int id;
} warg;

static void *worker(void *arg) {
  warg *w = arg;
  shared *sh = w->sh;
  unsigned seed = 1234u + (unsigned)w->id * 7919u;
  aa_stream s = (aa_stream)(uintptr_t)(0x100 * (w->id + 1));
  blk live[LIVE];
  int n = 0;
  uint64_t allocs = 0, frees = 0, failed = 0;
  for (int op = 0; op < OPS; op++) {
    /* at least MIN_OPS, then until the time budget is spent */
    if (op >= MIN_OPS && (op & 255) == 0 && now_ns() > sh->deadline)
      break;
    unsigned r = (unsigned)rand_r(&seed);
    if (n < LIVE && (n == 0 || r % 100 < 55)) {
      blk b;
      b.size = rnd_size(&seed);
      b.tag = (unsigned char)(r >> 8);
      b.p = aa_alloc(sh->pool, b.size, s);
      if (b.p == NULL) {
        failed++;
        continue;
      }
      allocs++;
      fill(&b);
      live[n++] = b;
    } else if (r % 100 < 60) {
      /* hand a block to another thread */
      int i = (int)((unsigned)rand_r(&seed) % (unsigned)n);
      pthread_mutex_lock(&sh->xmu);
      if (sh->nx < XCHG) {
        sh->xchg[sh->nx++] = live[i];
        live[i] = live[--n];
      }
      pthread_mutex_unlock(&sh->xmu);
    } else if (r % 100 < 65) {
      /* free one handed over by someone else */
      blk b;
      int got = 0;
      pthread_mutex_lock(&sh->xmu);
      if (sh->nx > 0) {
        b = sh->xchg[--sh->nx];
        got = 1;
      }
      pthread_mutex_unlock(&sh->xmu);
      if (got) {
        check(&b);
        assert_int_equal(aa_free(sh->pool, b.p, b.size, s), AA_OK);
        frees++;
      }
    } else {
      int i = (int)((unsigned)rand_r(&seed) % (unsigned)n);
      check(&live[i]);
      assert_int_equal(aa_free(sh->pool, live[i].p, r % 2 ? live[i].size : 0, s), AA_OK);
      frees++;
      live[i] = live[--n];
    }
  }
  while (n > 0) {
    n--;
    check(&live[n]);
    assert_int_equal(aa_free(sh->pool, live[n].p, live[n].size, s), AA_OK);
    frees++;
  }
  atomic_fetch_add(&sh->allocs, allocs);
  atomic_fetch_add(&sh->frees, frees);
  atomic_fetch_add(&sh->failed, failed);
  return NULL;
}

static void *changer(void *arg) {
  shared *sh = arg;
  unsigned seed = 99;
  uint64_t changes = 0;
  while (atomic_load(&sh->running)) {
    unsigned r = (unsigned)rand_r(&seed) % 100;
    size_t size = (1 + (size_t)rand_r(&seed) % 2047) * 512;
    int rc;
    if (r < 30) {
      aa_class_spec sp = {size, (uint32_t)rand_r(&seed) % 64, (uint32_t)rand_r(&seed) % 8};
      rc = aa_pool_class_add(sh->pool, &sp);
      assert_true(rc == AA_OK || rc == AA_EEXIST || rc == AA_ELIMIT);
    } else if (r < 55) {
      aa_class_spec v[AA_MAX_CLASSES];
      size_t n;
      assert_int_equal(aa_pool_classes(sh->pool, v, AA_MAX_CLASSES, &n, NULL), AA_OK);
      if (n > 1) {
        size_t victim = v[(size_t)rand_r(&seed) % (n - 1)].block_size;
        rc = aa_pool_class_retire(sh->pool, victim);
        assert_true(rc == AA_OK || rc == AA_ENOENT);
      }
    } else if (r < 80) {
      aa_class_spec v[AA_MAX_CLASSES];
      size_t n;
      aa_pool_classes(sh->pool, v, AA_MAX_CLASSES, &n, NULL);
      aa_class_spec sp = v[(size_t)rand_r(&seed) % n];
      sp.cache_limit = (uint32_t)rand_r(&seed) % 100;
      sp.prefill = (uint32_t)rand_r(&seed) % 4;
      rc = aa_pool_class_set(sh->pool, &sp);
      assert_true(rc == AA_OK || rc == AA_ENOENT);
    } else if (r < 83) {
      /* a fresh random ladder */
      aa_class_spec v[16];
      size_t n = 0;
      for (size_t sz = 512 * (1 + (size_t)rand_r(&seed) % 4); sz < (1u << 20) && n < 15;
           sz = sz * 2 + 512 * ((size_t)rand_r(&seed) % 3))
        v[n++] = (aa_class_spec){sz, 0, 0};
      v[n++] = (aa_class_spec){1u << 20, 0, 0};
      rc = aa_pool_set_classes(sh->pool, v, n);
      assert_true(rc == AA_OK || rc == AA_ELIMIT);
    } else if (r < 85) {
      aa_pool_trim(sh->pool, (size_t)rand_r(&seed) % (64u << 20));
    } else if (r < 90) {
      aa_pool_set_telemetry(sh->pool, r % 2);
    } else if (r < 95) {
      aa_backend_host_hold_events(sh->b, r % 2);
    } else {
      aa_pool_stats st;
      assert_int_equal(aa_pool_stats_get(sh->pool, &st), AA_OK);
      assert_true(st.class_count >= 1);
    }
    changes++;
    struct timespec ts = {0, 200000}; /* ~thousands of changes a second */
    nanosleep(&ts, NULL);
  }
  aa_backend_host_hold_events(sh->b, false);
  print_message("class-table changes: %llu\n", (unsigned long long)changes);
  return NULL;
}

static void run_stress(uint32_t tcache_blocks) {
  shared sh;
  init_ref();
  memset(&sh, 0, sizeof sh);
  pthread_mutex_init(&sh.xmu, NULL);
  assert_int_equal(aa_backend_host_new(&sh.b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = sh.b;
  cfg.tcache_blocks = tcache_blocks;
  assert_int_equal(aa_pool_new(&cfg, &sh.pool), AA_OK);
  atomic_store(&sh.running, 1);
  sh.deadline = now_ns() + BUDGET_NS;
  pthread_t th[WORKERS], ch;
  warg wa[WORKERS];
  assert_int_equal(pthread_create(&ch, NULL, changer, &sh), 0);
  for (int i = 0; i < WORKERS; i++) {
    wa[i].sh = &sh;
    wa[i].id = i;
    assert_int_equal(pthread_create(&th[i], NULL, worker, &wa[i]), 0);
  }
  for (int i = 0; i < WORKERS; i++)
    pthread_join(th[i], NULL);
  atomic_store(&sh.running, 0);
  pthread_join(ch, NULL);
  /* leftovers in the exchange */
  for (int i = 0; i < sh.nx; i++) {
    check(&sh.xchg[i]);
    assert_int_equal(aa_free(sh.pool, sh.xchg[i].p, sh.xchg[i].size, NULL), AA_OK);
    atomic_fetch_add(&sh.frees, 1);
  }
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(sh.pool, &st), AA_OK);
  print_message("ops: %llu allocs, %llu failed\n", (unsigned long long)atomic_load(&sh.allocs),
                (unsigned long long)atomic_load(&sh.failed));
  assert_int_equal(atomic_load(&sh.failed), 0);
  assert_int_equal(st.allocs, atomic_load(&sh.allocs));
  assert_int_equal(st.frees, atomic_load(&sh.frees));
  assert_int_equal(st.allocs, st.frees);
  assert_int_equal(st.bytes_in_use, 0);
  assert_int_equal(st.bytes_requested, 0);
  assert_int_equal(st.large_bytes_in_use, 0);
  assert_int_equal(st.invalid_frees, 0);
  for (uint32_t i = 0; i < st.class_count; i++) {
    assert_int_equal(st.classes[i].blocks_in_use, 0);
  }
  /* the workers exited, so their caches went back: everything can go */
  aa_pool_release(sh.pool);
  assert_int_equal(aa_pool_stats_get(sh.pool, &st), AA_OK);
  assert_int_equal(st.pending_blocks, 0);
  size_t n;
  aa_pool_classes(sh.pool, NULL, 0, &n, NULL);
  assert_int_equal(st.class_count, n); /* every retired class drained */
  if (st.bytes_reserved != 0) {
    print_message("left: large %llu\n", (unsigned long long)st.large_bytes_reserved);
    for (uint32_t i = 0; i < st.class_count; i++)
      if (st.classes[i].slabs)
        print_message("class %llu: slabs %llu free %llu prefill %u retiring %u\n",
                      (unsigned long long)st.classes[i].block_size,
                      (unsigned long long)st.classes[i].slabs,
                      (unsigned long long)st.classes[i].blocks_free, st.classes[i].prefill,
                      st.classes[i].retiring);
  }
  assert_int_equal(st.bytes_reserved, 0);
  uint64_t mapped;
  aa_backend_host_counts(sh.b, NULL, NULL, &mapped);
  assert_int_equal(mapped, st.bytes_reserved);
  aa_pool_destroy(sh.pool);
  aa_backend_host_counts(sh.b, NULL, NULL, &mapped);
  assert_int_equal(mapped, 0);
  aa_backend_destroy(sh.b);
  pthread_mutex_destroy(&sh.xmu);
}

static void test_core_stress_threads_and_class_changes(void **state) {
  (void)state;
  run_stress(32);
}

static void test_core_stress_no_thread_cache(void **state) {
  (void)state;
  run_stress(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_stress_threads_and_class_changes),
      cmocka_unit_test(test_core_stress_no_thread_cache),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
