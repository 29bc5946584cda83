/*
 * test_core_oom.c — the out-of-memory observer (core/src/oom.c): a limited
 * host pool driven to OOM on the large and the small path reports the
 * request, the pool's figures, its segments, the largest free holes, the
 * most requested sizes and the live sizes holding the most bytes; the pool keeps working afterwards; an allocation
 * from inside the observer is not reported again; clearing the observer
 * stops the calls; the record's JSON.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"

#define MiB ((size_t)1 << 20)

typedef struct seen {
  int n;
  aa_oom_info last;
  aa_pool *pool;
  void *inner; /* what an allocation from inside the observer got */
  bool alloc_inside;
} seen;

static void observe(void *user, aa_pool *pool, const aa_oom_info *info) {
  seen *s = user;
  s->n++;
  s->last = *info;
  s->pool = pool;
  if (s->alloc_inside)
    s->inner = aa_alloc(pool, 64 * MiB, NULL);
}

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
  seen s;
} fx;

static fx *make(size_t limit) {
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.name = "oomtest";
  cfg.backend = f->b;
  cfg.limit_bytes = limit;
  assert_int_equal(aa_pool_new(&cfg, &f->p), AA_OK);
  aa_pool_set_oom_observer(f->p, observe, &f->s);
  return f;
}

static void done(fx *f) {
  aa_pool_destroy(f->p);
  aa_backend_destroy(f->b);
  free(f);
}

/* A large request that fits neither a hole nor the limit: the record names
 * it, the two holes around a live block and the one segment. */
static void test_core_oom_large_record(void **state) {
  (void)state;
  fx *f = make(12 * MiB);
  aa_stream stream = (aa_stream)(uintptr_t)0x5100;
  void *big = aa_alloc(f->p, 8 * MiB, stream);
  assert_non_null(big);
  assert_int_equal(aa_free(f->p, big, 8 * MiB, stream), AA_OK);
  void *a = aa_alloc(f->p, 3 * MiB, stream); /* the 8 MiB segment, split */
  void *b = aa_alloc(f->p, 1536 << 10, stream);
  assert_non_null(a);
  assert_non_null(b);
  assert_int_equal(aa_free(f->p, a, 3 * MiB, stream), AA_OK);
  assert_int_equal(f->s.n, 0);

  assert_null(aa_alloc(f->p, 6 * MiB, stream));
  assert_int_equal(f->s.n, 1);
  const aa_oom_info *r = &f->s.last;
  assert_ptr_equal(f->s.pool, f->p);
  assert_int_equal(r->version, AA_OOM_VERSION);
  assert_int_equal(r->size, sizeof *r);
  assert_string_equal(r->pool, "oomtest");
  assert_int_equal(r->request, 6 * MiB);
  assert_int_equal(r->stream, 0x5100);
  assert_int_equal(r->count, 1);
  assert_int_equal(r->limit_bytes, 12 * MiB);
  assert_int_equal(r->bytes_reserved, 8 * MiB);
  assert_int_equal(r->bytes_in_use, 1536 << 10);
  assert_int_equal(r->bytes_requested, 1536 << 10);
  assert_int_equal(r->slabs, 0);
  assert_int_equal(r->segments, 1);
  assert_int_equal(r->nseg_sizes, 1);
  assert_int_equal(r->seg_sizes[0].size, 8 * MiB);
  assert_int_equal(r->seg_sizes[0].count, 1);
  assert_int_equal(r->nholes, 2);
  assert_int_equal(r->holes[0], 8 * MiB - 3 * MiB - (1536 << 10));
  assert_int_equal(r->holes[1], 3 * MiB);
  assert_int_equal(r->large_bytes_free, 8 * MiB - (1536 << 10));
  assert_true(r->time_ns > 0);
  assert_true(r->unix_ms > (uint64_t)1700000000 * 1000);
  /* the heavy hitters: each size asked for once, the failed one too or not */
  assert_true(r->ntop >= 3 && r->ntop <= AA_OOM_TOP);
  /* what was live: b alone (a was freed) */
  assert_int_equal(r->nlive, 1);
  assert_int_equal(r->live[0].size, 1536 << 10);
  assert_int_equal(r->live[0].count, 1);

  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.ooms, 1);
  assert_int_equal(st.last_oom_unix_ms, r->unix_ms);

  /* the pool works on: what fits is served, a second failure is counted */
  void *c = aa_alloc(f->p, 3 * MiB, stream);
  assert_non_null(c);
  assert_null(aa_alloc(f->p, 7 * MiB, NULL));
  assert_int_equal(f->s.n, 2);
  assert_int_equal(f->s.last.count, 2);
  assert_int_equal(f->s.last.stream, 0);
  assert_int_equal(aa_free(f->p, c, 0, stream), AA_OK);
  assert_int_equal(aa_free(f->p, b, 0, stream), AA_OK);
  void *d = aa_alloc(f->p, 6 * MiB, stream); /* fits once the blocks are back */
  assert_non_null(d);
  assert_int_equal(aa_free(f->p, d, 0, stream), AA_OK);
  assert_int_equal(f->s.n, 2);
  done(f);
}

/* The small path: no slab can be carved under the limit. */
static void test_core_oom_small_record(void **state) {
  (void)state;
  fx *f = make(2 * MiB); /* one slab */
  void *v[1024];
  size_t n = 0;
  while (n < 1024) {
    v[n] = aa_alloc(f->p, 4096, NULL);
    if (v[n] == NULL)
      break;
    n++;
  }
  assert_true(n > 0 && n < 1024);
  assert_int_equal(f->s.n, 1);
  const aa_oom_info *r = &f->s.last;
  assert_int_equal(r->request, 4096);
  assert_int_equal(r->slabs, 1);
  assert_int_equal(r->segments, 1);
  assert_int_equal(r->slab_size, 2 * MiB);
  assert_int_equal(r->bytes_reserved, 2 * MiB);
  assert_int_equal(r->bytes_in_use, n * 4096);
  assert_int_equal(r->nseg_sizes, 0); /* no large-path segments */
  assert_int_equal(r->nholes, 0);
  assert_true(r->ntop >= 1);
  assert_int_equal(r->top[0].size, 4096);
  assert_true(r->top[0].count >= n);
  assert_int_equal(r->nlive, 1); /* the class of 4096 B, n blocks */
  assert_int_equal(r->live[0].size, 4096);
  assert_int_equal(r->live[0].count, n);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(aa_free(f->p, v[i], 4096, NULL), AA_OK);
  void *again = aa_alloc(f->p, 4096, NULL);
  assert_non_null(again);
  assert_int_equal(aa_free(f->p, again, 4096, NULL), AA_OK);
  done(f);
}

/* An observer that allocates from the failing pool gets NULL, is not called
 * again for it, and the failure is counted. */
static void test_core_oom_observer_reentry(void **state) {
  (void)state;
  fx *f = make(4 * MiB);
  f->s.alloc_inside = true;
  assert_null(aa_alloc(f->p, 16 * MiB, NULL));
  assert_int_equal(f->s.n, 1);
  assert_null(f->s.inner);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.ooms, 2);
  f->s.alloc_inside = false;
  assert_null(aa_alloc(f->p, 16 * MiB, NULL));
  assert_int_equal(f->s.n, 2);
  assert_int_equal(f->s.last.count, 3);
  done(f);
}

static void test_core_oom_observer_cleared(void **state) {
  (void)state;
  fx *f = make(4 * MiB);
  aa_pool_set_oom_observer(f->p, NULL, &f->s);
  assert_null(aa_alloc(f->p, 16 * MiB, NULL));
  assert_int_equal(f->s.n, 0);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.ooms, 1);
  aa_pool_set_oom_observer(NULL, observe, NULL); /* no-op */
  done(f);
}

/* The live sizes mix the classes and the large path, the sizes holding the
 * most bytes first; a pool that never failed says last_oom_unix_ms 0. */
static void test_core_oom_live_sizes(void **state) {
  (void)state;
  fx *f = make(32 * MiB);
  void *small[200], *four[2], *six;
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.last_oom_unix_ms, 0);
  for (int i = 0; i < 200; i++) {
    small[i] = aa_alloc(f->p, 4000, NULL); /* the 4096 B class */
    assert_non_null(small[i]);
  }
  four[0] = aa_alloc(f->p, 4 * MiB, NULL);
  four[1] = aa_alloc(f->p, 4 * MiB, NULL);
  six = aa_alloc(f->p, 6 * MiB, NULL);
  assert_non_null(four[0]);
  assert_non_null(four[1]);
  assert_non_null(six);
  assert_null(aa_alloc(f->p, 64 * MiB, NULL));
  assert_int_equal(f->s.n, 1);
  const aa_oom_info *r = &f->s.last;
  assert_int_equal(r->nlive, 3);
  assert_int_equal(r->live[0].size, 4 * MiB); /* 8 MiB in all */
  assert_int_equal(r->live[0].count, 2);
  assert_int_equal(r->live[1].size, 6 * MiB);
  assert_int_equal(r->live[1].count, 1);
  assert_int_equal(r->live[2].size, 4096);
  assert_int_equal(r->live[2].count, 200);
  char buf[4096];
  assert_true(aa_oom_info_json(r, buf, sizeof buf) < sizeof buf);
  assert_non_null(strstr(buf, "\"live_sizes\":[{\"size\":4194304,\"count\":2},"
                              "{\"size\":6291456,\"count\":1},{\"size\":4096,\"count\":200}]"));
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.last_oom_unix_ms, r->unix_ms);
  for (int i = 0; i < 200; i++)
    assert_int_equal(aa_free(f->p, small[i], 4000, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, four[0], 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, four[1], 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, six, 0, NULL), AA_OK);
  done(f);
}

static void test_core_oom_json(void **state) {
  (void)state;
  fx *f = make(4 * MiB);
  assert_null(aa_alloc(f->p, 16 * MiB, NULL));
  char buf[4096];
  size_t len = aa_oom_info_json(&f->s.last, buf, sizeof buf);
  assert_true(len > 0 && len < sizeof buf);
  assert_int_equal(strlen(buf), len);
  assert_non_null(strstr(buf, "\"pool\":\"oomtest\""));
  assert_non_null(strstr(buf, "\"request\":16777216,"));
  assert_non_null(strstr(buf, "\"limit_bytes\":4194304,"));
  assert_non_null(strstr(buf, "\"holes\":[]"));
  /* only requests that were served are counted in the heavy hitters */
  assert_non_null(
      strstr(buf, "\"segment_sizes\":[],\"holes\":[],\"top_sizes\":[],\"live_sizes\":[]}"));
  assert_int_equal(buf[0], '{');
  assert_int_equal(buf[len - 1], '}');
  char small[16];
  assert_int_equal(aa_oom_info_json(&f->s.last, small, sizeof small), len);
  assert_int_equal(strlen(small), sizeof small - 1);
  assert_int_equal(aa_oom_info_json(NULL, buf, sizeof buf), 4);
  assert_string_equal(buf, "null");
  done(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_oom_large_record),
      cmocka_unit_test(test_core_oom_small_record),
      cmocka_unit_test(test_core_oom_observer_reentry),
      cmocka_unit_test(test_core_oom_observer_cleared),
      cmocka_unit_test(test_core_oom_live_sizes),
      cmocka_unit_test(test_core_oom_json),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
