/*
 * test_core_inspect.c — aa_pool_reset_peaks and aa_pool_walk: peaks read as
 * the current values after a reset and grow again; the walk reports every
 * slab and large segment, blocks that tile each segment exactly, the live
 * blocks with their requested sizes, in-use bytes equal to the stats', and
 * expandable reservations only where pages are mapped; aa_pool_walk_large
 * reports the large part alone, entry for entry; a nonzero callback return
 * stops it; bad arguments are refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
} fx;

static int setup_mode(void **state, aa_large_mode mode) {
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  cfg.name = "inspect";
  cfg.large_mode = mode;
  assert_int_equal(aa_pool_new(&cfg, &f->p), AA_OK);
  *state = f;
  return 0;
}
static int setup(void **state) { return setup_mode(state, AA_LARGE_CACHE); }
static int setup_exp(void **state) { return setup_mode(state, AA_LARGE_EXPANDABLE); }

static int teardown(void **state) {
  fx *f = *state;
  aa_pool_destroy(f->p);
  aa_backend_destroy(f->b);
  free(f);
  return 0;
}

/* What a walk saw, checked as it goes. */
typedef struct seen {
  size_t segs, large_segs, exp_segs, blocks, live;
  uint64_t seg_bytes, live_bytes, live_req;
  uintptr_t seg_lo, seg_hi, next; /* the current segment and where its next block starts */
  int order_errors;
  int stop_after; /* entries; 0 = never stop */
  int entries;
  uintptr_t want_ptr; /* a block to find */
  size_t want_req;
  int found;
} seen;

static int on_entry(void *user, const aa_walk_entry *e) {
  seen *s = user;
  s->entries++;
  if (e->kind == AA_WALK_SEGMENT) {
    if (s->next != s->seg_hi) /* the previous segment was not tiled */
      s->order_errors++;
    s->segs++;
    s->seg_bytes += e->size;
    if (e->flags & AA_WALK_LARGE)
      s->large_segs++;
    if (e->flags & AA_WALK_EXPANDABLE)
      s->exp_segs++;
    s->seg_lo = e->address;
    s->seg_hi = e->address + e->size;
    s->next = e->address;
  } else {
    assert_int_equal(e->kind, AA_WALK_BLOCK);
    if (e->address != s->next || e->address + e->size > s->seg_hi || e->size == 0)
      s->order_errors++;
    s->next = e->address + e->size;
    s->blocks++;
    if (e->flags & AA_WALK_IN_USE) {
      s->live++;
      s->live_bytes += e->size;
      s->live_req += e->requested;
      if (e->address == s->want_ptr && e->requested == s->want_req)
        s->found = 1;
    } else if (e->requested != 0) {
      s->order_errors++;
    }
  }
  if (s->stop_after && s->entries >= s->stop_after)
    return 7;
  return 0;
}

static int walk(aa_pool *p, seen *s) {
  int rc = aa_pool_walk(p, on_entry, s);
  if (rc == AA_OK && s->next != s->seg_hi)
    s->order_errors++;
  return rc;
}

static void test_core_inspect_walk_small_and_large(void **state) {
  fx *f = *state;
  void *small[40];
  size_t req_total = 0;
  for (int i = 0; i < 40; i++) {
    size_t n = 100 + (size_t)i * 300; /* several classes */
    small[i] = aa_alloc(f->p, n, NULL);
    assert_non_null(small[i]);
    req_total += n;
  }
  void *big = aa_alloc(f->p, (size_t)5 << 20, NULL); /* large path */
  assert_non_null(big);
  req_total += (size_t)5 << 20;

  seen s = {0};
  s.want_ptr = (uintptr_t)big;
  s.want_req = (size_t)5 << 20;
  assert_int_equal(walk(f->p, &s), AA_OK);
  assert_int_equal(s.order_errors, 0);
  assert_int_equal(s.live, 41);
  assert_int_equal(s.live_req, req_total);
  assert_true(s.found);
  assert_true(s.large_segs >= 1);
  assert_int_equal(s.exp_segs, 0);

  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(s.live_bytes, st.bytes_in_use);
  assert_int_equal(s.seg_bytes, st.bytes_reserved);
  uint64_t slabs = 0;
  for (uint32_t i = 0; i < st.class_count; i++)
    slabs += st.classes[i].slabs;
  assert_int_equal(s.segs - s.large_segs, slabs);
  assert_int_equal(s.large_segs, st.large_segments);

  /* freed blocks are no longer in use */
  for (int i = 0; i < 40; i++)
    assert_int_equal(aa_free(f->p, small[i], 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, big, 0, NULL), AA_OK);
  seen t = {0};
  assert_int_equal(walk(f->p, &t), AA_OK);
  assert_int_equal(t.order_errors, 0);
  assert_int_equal(t.live, 0);
  assert_int_equal(t.live_bytes, 0);
}

/* The large walk is the full walk's large-path part, entry for entry, and
 * nothing of the slabs. Records the entries from the first large segment on
 * (the full walk reports the slabs before it), counting those before. */
typedef struct rec {
  aa_walk_entry e[64];
  int n, overflow, started, before;
} rec;

static int on_rec(void *user, const aa_walk_entry *e) {
  rec *r = user;
  if (!r->started && e->kind == AA_WALK_SEGMENT && (e->flags & AA_WALK_LARGE))
    r->started = 1;
  if (!r->started)
    r->before++;
  else if (r->n == 64)
    r->overflow = 1;
  else
    r->e[r->n++] = *e;
  return 0;
}

static void test_core_inspect_walk_large_only(void **state) {
  fx *f = *state;
  void *small[8], *big[3];
  for (int i = 0; i < 8; i++) {
    small[i] = aa_alloc(f->p, 200 + (size_t)i * 900, NULL);
    assert_non_null(small[i]);
  }
  for (int i = 0; i < 3; i++) {
    big[i] = aa_alloc(f->p, (size_t)(3 + i) << 20, NULL);
    assert_non_null(big[i]);
  }
  assert_int_equal(aa_free(f->p, big[1], 0, NULL), AA_OK);

  rec all, large;
  memset(&all, 0, sizeof all);
  memset(&large, 0, sizeof large);
  assert_int_equal(aa_pool_walk(f->p, on_rec, &all), AA_OK);
  assert_int_equal(aa_pool_walk_large(f->p, on_rec, &large), AA_OK);
  assert_false(all.overflow || large.overflow);
  assert_true(all.before > 0);       /* the full walk: slabs first */
  assert_int_equal(large.before, 0); /* the large walk: no slab entry */
  assert_int_equal(large.n, all.n);
  assert_true(large.n >= 3);
  for (int i = 0; i < large.n; i++)
    assert_memory_equal(&large.e[i], &all.e[i], sizeof(aa_walk_entry));
  for (int i = 0; i < large.n; i++)
    if (large.e[i].kind == AA_WALK_SEGMENT)
      assert_true(large.e[i].flags & AA_WALK_LARGE);

  seen s = {0};
  s.stop_after = 1;
  assert_int_equal(aa_pool_walk_large(f->p, on_entry, &s), 7);
  assert_int_equal(aa_pool_walk_large(NULL, on_entry, &s), AA_EINVAL);
  assert_int_equal(aa_pool_walk_large(f->p, NULL, &s), AA_EINVAL);
  for (int i = 0; i < 8; i++)
    assert_int_equal(aa_free(f->p, small[i], 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, big[0], 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, big[2], 0, NULL), AA_OK);
}

static void test_core_inspect_walk_stops_and_refuses(void **state) {
  fx *f = *state;
  void *p = aa_alloc(f->p, 1000, NULL);
  assert_non_null(p);
  seen s = {0};
  s.stop_after = 2;
  assert_int_equal(aa_pool_walk(f->p, on_entry, &s), 7);
  assert_int_equal(s.entries, 2);
  assert_int_equal(aa_pool_walk(NULL, on_entry, &s), AA_EINVAL);
  assert_int_equal(aa_pool_walk(f->p, NULL, &s), AA_EINVAL);
  assert_int_equal(aa_free(f->p, p, 1000, NULL), AA_OK);
}

static void test_core_inspect_walk_expandable(void **state) {
  fx *f = *state;
  aa_backend *b = aa_pool_backend(f->p);
  if (b->ops->map_granularity == NULL || b->ops->map_granularity(b) == 0)
    skip();
  void *a = aa_alloc(f->p, (size_t)6 << 20, NULL);
  void *c = aa_alloc(f->p, (size_t)3 << 20, NULL);
  assert_non_null(a);
  assert_non_null(c);
  seen s = {0};
  assert_int_equal(walk(f->p, &s), AA_OK);
  assert_int_equal(s.order_errors, 0);
  assert_true(s.exp_segs >= 1);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  /* only mapped pages are reported: the segments add up to what is reserved */
  assert_int_equal(s.seg_bytes, st.bytes_reserved);
  assert_int_equal(s.live_bytes, st.bytes_in_use);
  assert_int_equal(s.live, 2);
  assert_int_equal(aa_free(f->p, a, 0, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, c, 0, NULL), AA_OK);
}

static void test_core_inspect_reset_peaks(void **state) {
  fx *f = *state;
  aa_pool_stats st;
  void *big = aa_alloc(f->p, (size_t)8 << 20, NULL);
  void *keep = aa_alloc(f->p, 4096, NULL);
  assert_non_null(big);
  assert_non_null(keep);
  assert_int_equal(aa_free(f->p, big, 0, NULL), AA_OK);
  assert_int_equal(aa_pool_release(f->p) > 0, 1);
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_true(st.peak_bytes_in_use >= ((uint64_t)8 << 20));
  assert_true(st.peak_bytes_reserved > st.bytes_reserved);

  aa_pool_reset_peaks(f->p);
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_int_equal(st.peak_bytes_in_use, st.bytes_in_use);
  assert_int_equal(st.peak_bytes_reserved, st.bytes_reserved);
  for (uint32_t i = 0; i < st.class_count; i++)
    assert_int_equal(st.classes[i].peak_bytes_in_use, st.classes[i].bytes_in_use);

  /* and they grow again */
  void *big2 = aa_alloc(f->p, (size_t)3 << 20, NULL);
  assert_non_null(big2);
  assert_int_equal(aa_free(f->p, big2, 0, NULL), AA_OK);
  assert_int_equal(aa_pool_stats_get(f->p, &st), AA_OK);
  assert_true(st.peak_bytes_in_use >= ((uint64_t)3 << 20) + 4096);
  assert_true(st.peak_bytes_reserved >= ((uint64_t)3 << 20));
  aa_pool_reset_peaks(NULL); /* no-op */
  assert_int_equal(aa_free(f->p, keep, 0, NULL), AA_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_core_inspect_walk_small_and_large, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_inspect_walk_large_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_inspect_walk_stops_and_refuses, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_inspect_walk_expandable, setup_exp, teardown),
      cmocka_unit_test_setup_teardown(test_core_inspect_reset_peaks, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
