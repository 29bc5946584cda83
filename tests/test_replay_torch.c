/*
 * test_replay_torch.c — the model of PyTorch's caching allocator: 512 B
 * rounding, the small pool's 2 MiB segments, the large pool's 20 MiB and
 * rounded segments, best fit with splitting and merging, the oversize rules
 * of max_split_size, per-stream pools, the release of cached segments under
 * a capacity, expandable segments growing in pages, and the spec parser.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/replay.h"
#include "replay_parts.h" /* tools/replay/lib: the tool's own parts */

#define MIB (1ull << 20)

typedef struct model {
  aa_replay_torch *t;
  uint64_t line;
} model;

static model *mk(const char *spec, uint64_t capacity) {
  model *m = calloc(1, sizeof *m);
  aa_replay_torch_config cfg;
  char err[256] = "";
  assert_non_null(m);
  aa_replay_torch_config_init(&cfg);
  assert_int_equal(aa_replay_torch_parse(spec, &cfg, err, sizeof err), AA_OK);
  cfg.capacity_bytes = capacity;
  cfg.position_name = "event";
  assert_int_equal(aa_replay_torch_new(&cfg, &m->t, err, sizeof err), AA_OK);
  return m;
}

static int ev(model *m, char op, uint64_t ptr, uint64_t size, uint64_t stream) {
  aa_replay_event e;
  memset(&e, 0, sizeof e);
  e.op = op;
  e.ptr = ptr;
  e.size = size;
  e.stream = stream;
  e.line = ++m->line;
  e.time_ns = m->line * 1000;
  return aa_replay_torch_feed(m->t, &e, 1);
}

static void a(model *m, uint64_t ptr, uint64_t size) { assert_int_equal(ev(m, 'a', ptr, size, 0), AA_OK); }
static void f(model *m, uint64_t ptr) { assert_int_equal(ev(m, 'f', ptr, 0, 0), AA_OK); }

static aa_replay_result res(model *m) {
  aa_replay_result r;
  aa_replay_torch_result(m->t, &r);
  return r;
}

static void done(model *m) {
  aa_replay_torch_free(m->t);
  free(m);
}

static void test_replay_torch_default_pools(void **state) {
  (void)state;
  model *m = mk("torch:default", 0);
  /* small: 1000 B -> 1024 B in a 2 MiB segment; 100 B -> 512 B, same one */
  a(m, 1, 1000);
  a(m, 2, 100);
  aa_replay_result r = res(m);
  assert_int_equal(r.peak_reserved, 2 * MIB);
  assert_int_equal(r.peak_in_use, 1024 + 512);
  assert_int_equal(r.backend_allocs, 1);
  /* large: 3 MiB opens a 20 MiB segment, 5 MiB splits its remainder */
  a(m, 3, 3 * MIB);
  a(m, 4, 5 * MIB);
  r = res(m);
  assert_int_equal(r.peak_reserved, 22 * MIB);
  assert_int_equal(r.backend_allocs, 2);
  /* 12 MiB: no free block fits (12 MiB left, at least 12 needed: it fits
   * exactly in the remainder) */
  a(m, 5, 12 * MIB);
  r = res(m);
  assert_int_equal(r.peak_reserved, 22 * MIB);
  /* 13 MiB (>= 10 MiB): a segment of the request rounded to 2 MiB, 14 MiB */
  a(m, 6, 13 * MIB);
  r = res(m);
  assert_int_equal(r.peak_reserved, 36 * MIB);
  assert_int_equal(r.backend_allocs, 3);
  /* frees merge the 20 MiB segment back into one block; 19 MiB takes it
   * whole (1 MiB left is not more than 1 MiB: no split) */
  f(m, 3);
  f(m, 4);
  f(m, 5);
  a(m, 7, 19 * MIB);
  r = res(m);
  assert_int_equal(r.peak_reserved, 36 * MIB);
  assert_int_equal(r.cache_misses, 3);
  assert_int_equal(r.cache_hits, 4);
  f(m, 7);
  f(m, 6);
  f(m, 1);
  f(m, 2);
  r = res(m);
  assert_int_equal(r.live_at_end, 0);
  assert_int_equal(r.backend_frees, 0); /* nothing is given back */
  done(m);
}

static void test_replay_torch_best_fit_and_streams(void **state) {
  (void)state;
  model *m = mk("torch:default", 0);
  /* two free blocks, 4 MiB and 2.5 MiB (in segments of 20 MiB) */
  a(m, 1, 4 * MIB);
  a(m, 2, 16 * MIB); /* the rest of the first segment: 20 - 4 = 16 */
  a(m, 3, 5 * MIB / 2);
  a(m, 4, 35 * MIB / 2); /* the rest of the second: 17.5 */
  f(m, 1);
  f(m, 3);
  /* 2 MiB takes the smaller block that fits (2.5 MiB), not the 4 MiB one */
  a(m, 5, 2 * MIB);
  aa_replay_result r = res(m);
  assert_int_equal(r.peak_reserved, 40 * MIB);
  assert_int_equal(r.peak_in_use, 4 * MIB + 16 * MIB + 5 * MIB / 2 + 35 * MIB / 2);
  /* a block freed on stream 0 does not serve stream 7 */
  assert_int_equal(ev(m, 'a', 6, 3 * MIB, 7), AA_OK);
  r = res(m);
  assert_int_equal(r.peak_reserved, 60 * MIB);
  done(m);
}

static void test_replay_torch_max_split(void **state) {
  (void)state;
  model *m = mk("torch:default,max_split_mb=8", 0);
  a(m, 1, 20 * MIB);
  f(m, 1);
  /* below max_split: a free block of max_split or more is not taken */
  a(m, 2, 2 * MIB);
  aa_replay_result r = res(m);
  assert_int_equal(r.peak_reserved, 40 * MIB);
  done(m);
  /* at or above it: a block more than 20 MiB larger is not taken */
  m = mk("torch:default,max_split_mb=8", 0);
  a(m, 1, 30 * MIB);
  f(m, 1);
  a(m, 2, 9 * MIB); /* 30 >= 9 + 20: a new 20 MiB segment */
  r = res(m);
  assert_int_equal(r.peak_reserved, 50 * MIB);
  a(m, 3, 11 * MIB); /* 30 < 11 + 20: takes the 30 MiB block, unsplit */
  r = res(m);
  assert_int_equal(r.peak_reserved, 50 * MIB);
  assert_int_equal(r.peak_in_use, 20 * MIB + 30 * MIB);
  done(m);
}

static void test_replay_torch_capacity_releases(void **state) {
  (void)state;
  model *m = mk("torch:default", 40 * MIB);
  a(m, 1, 12 * MIB);
  f(m, 1);
  /* 12 + 30 > 40: the free 12 MiB segment is released, then 30 fits */
  a(m, 2, 30 * MIB);
  aa_replay_result r = res(m);
  assert_int_equal(r.failures, 0);
  assert_int_equal(r.backend_frees, 1);
  assert_int_equal(r.peak_reserved, 30 * MIB);
  /* no room at all: a failure, and its free is expected */
  a(m, 3, 12 * MIB);
  r = res(m);
  assert_int_equal(r.failures, 1);
  f(m, 3);
  done(m);
}

static void test_replay_torch_expandable(void **state) {
  (void)state;
  model *m = mk("torch:expandable", 0);
  /* 3 MiB maps one 20 MiB page; 30 MiB grows the free tail (17 MiB) by
   * one more page, where the default needs 20 + 30 */
  a(m, 1, 3 * MIB);
  a(m, 2, 30 * MIB);
  aa_replay_result r = res(m);
  assert_int_equal(r.peak_reserved, 40 * MIB);
  assert_int_equal(r.backend_allocs, 2); /* pages mapped */
  /* small requests map 2 MiB pages of their own segment */
  a(m, 3, 4096);
  r = res(m);
  assert_int_equal(r.peak_reserved, 42 * MIB);
  done(m);

  /* under a capacity, the free pages at a segment's end are unmapped */
  m = mk("torch:expandable", 60 * MIB);
  a(m, 1, 50 * MIB); /* 60 MiB mapped */
  f(m, 1);
  a(m, 2, 4096); /* needs a 2 MiB small page: 62 > 60, the large tail goes */
  r = res(m);
  assert_int_equal(r.failures, 0);
  assert_int_equal(r.backend_frees, 3);
  done(m);

  model *d = mk("torch:default", 0);
  a(d, 1, 3 * MIB);
  a(d, 2, 30 * MIB);
  r = res(d);
  assert_int_equal(r.peak_reserved, 50 * MIB);
  done(d);
}

static void test_replay_torch_bad_input_and_parse(void **state) {
  (void)state;
  model *m = mk("torch:default", 0);
  assert_int_equal(ev(m, 'f', 99, 0, 0), AA_EPARSE);
  assert_non_null(strstr(aa_replay_torch_error(m->t), "event 1: free of a not live pointer 0x63"));
  done(m);
  m = mk("torch:default", 0);
  a(m, 5, 100);
  assert_int_equal(ev(m, 'a', 5, 100, 0), AA_EPARSE);
  assert_non_null(strstr(aa_replay_torch_error(m->t), "allocate of an already live"));
  done(m);

  aa_replay_torch_config cfg;
  char err[256];
  aa_replay_torch_config_init(&cfg);
  assert_int_equal(aa_replay_torch_parse("torch:expandable", &cfg, err, sizeof err), AA_OK);
  assert_int_equal(cfg.mode, AA_REPLAY_TORCH_EXPANDABLE);
  assert_int_equal(aa_replay_torch_parse("torch:default,max_split_mb=64", &cfg, err,
                                         sizeof err),
                   AA_OK);
  assert_int_equal(cfg.max_split_size, 64 * MIB);
  assert_int_equal(aa_replay_torch_parse("torch:async", &cfg, err, sizeof err), AA_EINVAL);
  assert_non_null(strstr(err, "torch:default or torch:expandable"));
  assert_int_equal(aa_replay_torch_parse("torch:default,max_split_mb=0", &cfg, err,
                                         sizeof err),
                   AA_EINVAL);
  assert_int_equal(aa_replay_torch_parse("torch:defaultx", &cfg, err, sizeof err), AA_EINVAL);
  assert_int_equal(aa_replay_torch_parse("default", &cfg, err, sizeof err), AA_EINVAL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_torch_default_pools),
      cmocka_unit_test(test_replay_torch_best_fit_and_streams),
      cmocka_unit_test(test_replay_torch_max_split),
      cmocka_unit_test(test_replay_torch_capacity_releases),
      cmocka_unit_test(test_replay_torch_expandable),
      cmocka_unit_test(test_replay_torch_bad_input_and_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
