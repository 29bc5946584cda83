/*
 * test_replay_sim.c — the simulator over the real core: hand-computed
 * figures on a small trace, bad input in stop and count modes, simulated
 * out-of-memory, per-size figures, streams with delayed events, the JSON
 * writer.
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

#define MIB (1024ull * 1024ull)

/* A table with 1024 and 4096 below the default max_small (1 MiB). */
static const aa_class_spec small_table[] = {
    {1024, 0, 0}, {4096, 0, 0}, {65536, 0, 0}, {1048576, 0, 0}};

static aa_replay_sim *new_sim(aa_replay_on_error mode, uint64_t capacity,
                              bool sizes) {
  aa_replay_config cfg;
  aa_replay_sim *s = NULL;
  char err[AA_REPLAY_ERR_CAP];

  aa_replay_config_init(&cfg);
  cfg.classes = small_table;
  cfg.nclasses = 4;
  cfg.on_error = mode;
  cfg.capacity_bytes = capacity;
  cfg.collect_sizes = sizes;
  if (aa_replay_sim_new(&cfg, &s, err, sizeof err) != AA_OK)
    fail_msg("aa_replay_sim_new: %s", err);
  return s;
}

static aa_replay_event ev(char op, uint64_t t, uint64_t ptr, uint64_t size,
                          uint64_t line) {
  aa_replay_event e;

  memset(&e, 0, sizeof e);
  e.op = op;
  e.time_ns = t;
  e.ptr = ptr;
  e.size = size;
  e.line = line;
  return e;
}

/* The trace behind the hand-computed figures (docs/replay.md works the same
 * example):
 *   t=0  alloc A 1000 -> class 1024     t=30 alloc C 1000 -> 1024 (reuse)
 *   t=10 alloc B 3000 -> class 4096     t=40 free B
 *   t=20 free A                         t=50 free C */
static void feed_small(aa_replay_sim *s) {
  aa_replay_event e[6];

  e[0] = ev('a', 0, 0xA000, 1000, 2);
  e[1] = ev('a', 10, 0xB000, 3000, 3);
  e[2] = ev('f', 20, 0xA000, 1000, 4);
  e[3] = ev('a', 30, 0xC000, 1000, 5);
  e[4] = ev('f', 40, 0xB000, 3000, 6);
  e[5] = ev('f', 50, 0xC000, 1000, 7);
  assert_int_equal(aa_replay_sim_feed(s, e, 6), AA_OK);
}

static void test_replay_sim_hand_computed(void **state) {
  aa_replay_sim *s = new_sim(AA_REPLAY_STOP, 0, false);
  aa_replay_result r;
  double int_avg, ext_avg;
  (void)state;

  feed_small(s);
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.events, 6);
  assert_int_equal(r.requests, 3);
  assert_int_equal(r.allocs, 3);
  assert_int_equal(r.frees, 3);
  assert_int_equal(r.failures, 0);
  assert_int_equal(r.class_count, 4);
  /* Peak in use at t=10: 1024 + 4096 for 1000 + 3000 requested. */
  assert_int_equal(r.peak_in_use, 5120);
  assert_int_equal(r.requested_at_peak_in_use, 4000);
  assert_int_equal(r.peak_requested, 4000);
  assert_true(r.int_frag_peak > 0.21874 && r.int_frag_peak < 0.21876);
  /* One 2 MiB slab per class used; the second is taken at t=10. */
  assert_int_equal(r.backend_allocs, 2);
  assert_int_equal(r.backend_frees, 0);
  assert_int_equal(r.backend_calls, 2);
  assert_int_equal(r.peak_reserved, 4 * MIB);
  assert_int_equal(r.in_use_at_peak_reserved, 5120);
  assert_true(r.ext_frag_peak > 1.0 - 5120.0 / (4.0 * MIB) - 1e-9 &&
              r.ext_frag_peak < 1.0 - 5120.0 / (4.0 * MIB) + 1e-9);
  /* Integrals over [0, 50): requested 130000, in use 163840 byte-ns;
   * reserved 2 MiB for 10 ns then 4 MiB for 40 ns. */
  int_avg = 1.0 - 130000.0 / 163840.0;
  ext_avg = 1.0 - 163840.0 / (10.0 * 2 * MIB + 40.0 * 4 * MIB);
  assert_true(r.int_frag_avg > int_avg - 1e-9 && r.int_frag_avg < int_avg + 1e-9);
  assert_true(r.ext_frag_avg > ext_avg - 1e-9 && r.ext_frag_avg < ext_avg + 1e-9);
  /* C reuses A's block: one hit, two misses (new slabs). */
  assert_int_equal(r.cache_hits + r.cache_misses, 3);
  assert_true(r.cache_hits >= 1);
  /* 2 backend allocs at 43 us each. */
  assert_true(r.sim_backend_us > 85.99 && r.sim_backend_us < 86.01);
  assert_int_equal(r.live_at_end, 0);
  assert_int_equal(r.trace_span_ns, 50);
  aa_replay_sim_free(s);
}

/* Stitching in the simulator: three 6 MiB holes between live 3 MiB blocks,
 * then a 10 MiB request that no hole fits, served by a stitched range, and,
 * with `then7`, a 7 MiB request that the range is too large for; with
 * `release`, at the end a release that undoes the ranges' aliases. The
 * events are 1 ns apart from t0. */
static void stitch_sim(const aa_replay_costs *costs, bool per_thread, bool then7, bool release,
                       uint64_t t0, aa_replay_result *r) {
  aa_replay_config cfg;
  aa_replay_sim *s = NULL;
  char err[AA_REPLAY_ERR_CAP];
  aa_replay_event e[24];
  size_t n = 0;
  uint64_t t = t0;

  aa_replay_config_init(&cfg);
  cfg.pool.large_mode = AA_LARGE_EXPANDABLE;
  cfg.pool.large_stitch = 1;
  cfg.costs.alias_us = costs->alias_us;
  cfg.costs.unalias_us = costs->unalias_us;
  cfg.per_thread = per_thread;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  for (uint64_t i = 0; i < 3; i++) {
    e[n] = ev('a', t++, 0x100000 + i, 6 * MIB, n + 2);
    n++;
    e[n] = ev('a', t++, 0x200000 + i, 3 * MIB, n + 2);
    n++;
  }
  for (uint64_t i = 0; i < 3; i++, n++)
    e[n] = ev('f', t++, 0x100000 + i, 6 * MIB, n + 2);
  e[n] = ev('a', t++, 0x300000, 10 * MIB, n + 2);
  n++;
  e[n] = ev('f', t++, 0x300000, 10 * MIB, n + 2);
  n++;
  if (then7) {
    e[n] = ev('a', t++, 0x400000, 7 * MIB, n + 2);
    n++;
    e[n] = ev('f', t++, 0x400000, 7 * MIB, n + 2);
    n++;
  }
  for (uint64_t i = 0; i < 3; i++, n++)
    e[n] = ev('f', t++, 0x200000 + i, 3 * MIB, n + 2);
  assert_int_equal(aa_replay_sim_feed(s, e, n), AA_OK);
  if (release)
    (void)aa_pool_release(aa_replay_sim_pool(s));
  aa_replay_sim_result(s, r);
  aa_replay_sim_free(s);
}

/* The cost model prices the aliases (alias_us per handle mapped,
 * unalias_us per alias undone) beside the backend's calls. */
static void stitch_run(double alias_us, double unalias_us, aa_replay_result *r) {
  aa_replay_costs c = {.alias_us = alias_us, .unalias_us = unalias_us};
  stitch_sim(&c, false, false, true, 0, r);
}

static void test_replay_sim_stitch_alias_costs(void **state) {
  aa_replay_result r, free_aliases;
  (void)state;
  stitch_run(37.0, 11.0, &r);
  assert_int_equal(r.failures, 0);
  assert_int_equal(r.stitches, 1);
  assert_true(r.alias_maps >= 5);                 /* 10 MiB of 2 MiB handles */
  assert_int_equal(r.alias_unmaps, r.alias_maps); /* the release undid them */
  double want = (double)r.backend_allocs * 43.0 + (double)r.backend_frees * 43.0 +
                (double)r.alias_maps * 37.0 + (double)r.alias_unmaps * 11.0;
  assert_true(r.sim_backend_us > want - 0.01 && r.sim_backend_us < want + 0.01);
  stitch_run(0.0, 0.0, &free_aliases); /* the same run, aliases free */
  assert_int_equal(free_aliases.alias_maps, r.alias_maps);
  assert_int_equal(free_aliases.backend_calls, r.backend_calls);
  want -= (double)r.alias_maps * 37.0 + (double)r.alias_unmaps * 11.0;
  assert_true(free_aliases.sim_backend_us > want - 0.01 &&
              free_aliases.sim_backend_us < want + 0.01);
}

/* Stitching's time budget on the simulator's clock (the trace's time plus
 * the costs of the calls made): a first range whose alias calls cost 30 ms
 * each spends the 50 ms start, so a request for another size right after
 * (1 ns of trace time later) is refused a range and the pool grows;
 * alias_ns is the cost model's time of the calls. The same with free
 * aliases stitches both; the figures are the same on every run and with a
 * thread per recorded thread. */
static void budget_sim(double alias_us, bool per_thread, aa_replay_result *r) {
  aa_replay_costs c = {.alias_us = alias_us};
  stitch_sim(&c, per_thread, true, false, 1, r);
}

static void test_replay_sim_stitch_time_budget(void **state) {
  aa_replay_result r, again, threads, free_aliases;
  (void)state;
  budget_sim(30000.0, false, &r);
  assert_int_equal(r.failures, 0);
  assert_int_equal(r.stitches, 1);
  assert_int_equal(r.stitch_deferred, 1);
  assert_int_equal(r.alias_ns, r.alias_maps * 30000000ull); /* each call its cost, no more */
  budget_sim(30000.0, false, &again);
  budget_sim(30000.0, true, &threads);
  assert_int_equal(again.stitch_deferred, 1);
  assert_int_equal(threads.stitch_deferred, 1);
  assert_int_equal(again.alias_ns, r.alias_ns);
  assert_int_equal(threads.alias_ns, r.alias_ns);
  assert_int_equal(again.peak_reserved, r.peak_reserved);
  assert_int_equal(threads.peak_reserved, r.peak_reserved);
  budget_sim(0.0, false, &free_aliases);
  assert_int_equal(free_aliases.stitches, 2);
  assert_int_equal(free_aliases.stitch_deferred, 0);
  assert_int_equal(free_aliases.alias_ns, 0);
  assert_true(free_aliases.peak_reserved < r.peak_reserved); /* the refused range grew the pool */
}

static void test_replay_sim_event_count_fallback(void **state) {
  aa_replay_sim *s = new_sim(AA_REPLAY_STOP, 0, false);
  aa_replay_event e[3];
  aa_replay_result r;
  (void)state;

  /* No times: the averages weigh each event's state equally. */
  e[0] = ev('a', 0, 1, 1000, 1);
  e[1] = ev('a', 0, 2, 1000, 2);
  e[2] = ev('f', 0, 1, 0, 3);
  assert_int_equal(aa_replay_sim_feed(s, e, 3), AA_OK);
  aa_replay_sim_result(s, &r);
  /* States before events 2 and 3: (1000,1024), (2000,2048). */
  assert_true(r.int_frag_avg > 1.0 - 3000.0 / 3072.0 - 1e-9 &&
              r.int_frag_avg < 1.0 - 3000.0 / 3072.0 + 1e-9);
  assert_int_equal(r.live_at_end, 1);
  assert_int_equal(r.live_bytes_at_end, 1000);
  assert_int_equal(r.diag.size_mismatch, 0);
  aa_replay_sim_free(s);
}

static void test_replay_sim_bad_input_stop(void **state) {
  aa_replay_sim *s = new_sim(AA_REPLAY_STOP, 0, false);
  aa_replay_event e[3];
  aa_replay_result r;
  (void)state;

  e[0] = ev('a', 0, 0x10, 100, 7);
  e[1] = ev('f', 1, 0x20, 100, 8); /* never allocated */
  e[2] = ev('f', 2, 0x10, 100, 9);
  assert_int_equal(aa_replay_sim_feed(s, e, 3), AA_EPARSE);
  assert_string_equal(aa_replay_sim_error(s),
                      "line 8: free of a not live pointer 0x20 (size 100)");
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.events, 1);
  assert_int_equal(r.diag.unknown_free, 1);
  assert_int_equal(r.diag.first_line, 8);
  aa_replay_sim_free(s);

  s = new_sim(AA_REPLAY_STOP, 0, false);
  e[1] = ev('a', 1, 0x10, 100, 12); /* duplicate live pointer */
  assert_int_equal(aa_replay_sim_feed(s, e, 2), AA_EPARSE);
  assert_string_equal(aa_replay_sim_error(s),
                      "line 12: allocate of an already live pointer 0x10 "
                      "(size 100)");
  aa_replay_sim_free(s);
}

static void test_replay_sim_bad_input_count(void **state) {
  aa_replay_sim *s = new_sim(AA_REPLAY_COUNT, 0, false);
  aa_replay_event e[5];
  aa_replay_result r;
  char json[4096];
  size_t len;
  (void)state;

  e[0] = ev('a', 0, 0x10, 100, 1);
  e[1] = ev('f', 1, 0x20, 100, 2); /* unknown */
  e[2] = ev('a', 2, 0x10, 100, 3); /* duplicate */
  e[3] = ev('f', 3, 0x10, 200, 4); /* size differs: warning, still freed */
  e[4] = ev('f', 4, 0x10, 100, 5); /* now unknown again */
  assert_int_equal(aa_replay_sim_feed(s, e, 5), AA_OK);
  assert_string_equal(aa_replay_sim_error(s), "");
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.events, 5);
  assert_int_equal(r.allocs, 1);
  assert_int_equal(r.frees, 1);
  assert_int_equal(r.diag.unknown_free, 2);
  assert_int_equal(r.diag.duplicate_ptr, 1);
  assert_int_equal(r.diag.size_mismatch, 1);
  assert_int_equal(r.diag.first_line, 2);
  assert_non_null(strstr(r.diag.first_error, "line 2: free of a not live"));
  len = aa_replay_result_json(&r, json, sizeof json);
  assert_true(len < sizeof json);
  assert_non_null(strstr(json, "\"unknown_free\":2"));
  assert_non_null(strstr(json, "\"duplicate_ptr\":1"));
  assert_non_null(strstr(json, "\"first_error\":\"line 2: free"));
  assert_int_equal(json[0], '{');
  assert_int_equal(json[len - 1], '}');
  /* Truncation reports the full length like snprintf. */
  assert_int_equal(aa_replay_result_json(&r, json, 10), len);
  assert_int_equal(strlen(json), 9);
  aa_replay_sim_free(s);
}

static void test_replay_sim_out_of_memory(void **state) {
  /* Room for one slab: the second class cannot get one. */
  aa_replay_sim *s = new_sim(AA_REPLAY_STOP, 2 * MIB, false);
  aa_replay_event e[4];
  aa_replay_result r;
  (void)state;

  e[0] = ev('a', 0, 0xA, 1000, 1);
  e[1] = ev('a', 1, 0xB, 3000, 2); /* fails in the replay */
  e[2] = ev('f', 2, 0xB, 3000, 3); /* its free is expected, not an error */
  e[3] = ev('f', 3, 0xA, 1000, 4);
  assert_int_equal(aa_replay_sim_feed(s, e, 4), AA_OK);
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.requests, 2);
  assert_int_equal(r.allocs, 1);
  assert_int_equal(r.failures, 1);
  assert_true(r.backend_failures >= 1);
  assert_true(r.peak_reserved <= 2 * MIB);
  assert_int_equal(r.live_at_end, 0);
  assert_int_equal(r.diag.unknown_free, 0);
  aa_replay_sim_free(s);
}

static void test_replay_sim_trace_failures(void **state) {
  aa_replay_config cfg;
  aa_replay_sim *s = NULL;
  aa_replay_event e = ev('x', 0, 0, 5000, 1);
  aa_replay_result r;
  char err[AA_REPLAY_ERR_CAP];
  (void)state;

  aa_replay_config_init(&cfg);
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  assert_int_equal(aa_replay_sim_feed(s, &e, 1), AA_OK);
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.trace_failures, 1);
  assert_int_equal(r.requests, 0);
  aa_replay_sim_free(s);

  cfg.replay_failures = true;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  assert_int_equal(aa_replay_sim_feed(s, &e, 1), AA_OK);
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.trace_failures, 1);
  assert_int_equal(r.requests, 1);
  assert_int_equal(r.allocs, 1);
  assert_int_equal(r.frees, 1);
  assert_int_equal(r.live_at_end, 0);
  aa_replay_sim_free(s);
}

static void test_replay_sim_sizes(void **state) {
  aa_replay_sim *s = new_sim(AA_REPLAY_STOP, 0, true);
  aa_replay_size_stat *v = NULL;
  size_t n = 0;
  (void)state;

  feed_small(s);
  assert_int_equal(aa_replay_sim_sizes(s, &v, &n), AA_OK);
  assert_int_equal(n, 2);
  assert_int_equal(v[0].size, 1000);
  assert_int_equal(v[0].allocs, 2);
  assert_int_equal(v[0].max_live, 1);
  assert_int_equal(v[0].live, 0);
  assert_int_equal(v[1].size, 3000);
  assert_int_equal(v[1].allocs, 1);
  free(v);
  aa_replay_sim_free(s);
}

static void test_replay_sim_large_and_many(void **state) {
  aa_replay_sim *s = new_sim(AA_REPLAY_STOP, 0, false);
  aa_replay_event *e = malloc(20000 * sizeof *e);
  aa_replay_result r;
  size_t i, n = 0;
  (void)state;

  assert_non_null(e);
  /* Many live pointers (the map grows), a large request, then all freed. */
  for (i = 0; i < 9000; i++)
    e[n++] = ev('a', i, 0x7f0000000000ull + i * 512, 100 + (i % 7) * 300, i + 1);
  e[n++] = ev('a', 9000, 0x1, 3 * MIB + 5, 9001);
  for (i = 0; i < 9000; i++)
    e[n++] = ev('f', 9001 + i, 0x7f0000000000ull + i * 512, 0, 9002 + i);
  e[n++] = ev('f', 18001, 0x1, 0, 18002);
  assert_int_equal(aa_replay_sim_feed(s, e, n), AA_OK);
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.allocs, 9001);
  assert_int_equal(r.frees, 9001);
  assert_int_equal(r.live_at_end, 0);
  assert_true(r.peak_in_use >= 3 * MIB + 5);
  assert_true(r.peak_reserved >= r.peak_in_use);
  assert_true(r.int_frag_peak >= 0.0 && r.int_frag_peak < 1.0);
  free(e);
  aa_replay_sim_free(s);
}

static void test_replay_sim_streams(void **state) {
  aa_replay_config cfg;
  aa_replay_sim *s = NULL;
  aa_replay_event e[4];
  aa_replay_result r;
  char err[AA_REPLAY_ERR_CAP];
  (void)state;

  aa_replay_config_init(&cfg);
  cfg.event_delay_ns = 1000;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  e[0] = ev('a', 0, 0x10, 4096, 1);
  e[0].stream = 1;
  e[1] = ev('f', 1, 0x10, 4096, 2);
  e[1].stream = 1;
  e[2] = ev('a', 2, 0x20, 4096, 3); /* another stream, event still pending */
  e[2].stream = 2;
  e[3] = ev('a', 5000, 0x30, 4096, 4); /* later: the event has completed */
  e[3].stream = 2;
  assert_int_equal(aa_replay_sim_feed(s, e, 4), AA_OK);
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.allocs, 3);
  assert_int_equal(r.live_at_end, 2);
  /* Two blocks live at the end: at least 2 x 4096 in use at the peak. */
  assert_true(r.peak_in_use >= 2 * 4096);
  aa_replay_sim_free(s);
}

/* The simulated device right after a synchronize, as a GPU is then: idle
 * (stream_query succeeds) and an event recorded then complete, until the
 * trace's next event (even at the same time); without a delay an event is
 * complete at once and the pool asks for one (stream_query says busy, as
 * before). */
static void test_replay_sim_idle_after_sync(void **state) {
  aa_replay_config cfg;
  aa_replay_sim *s = NULL;
  aa_replay_event e[2];
  char err[AA_REPLAY_ERR_CAP];
  void *q = NULL;
  (void)state;

  aa_replay_config_init(&cfg);
  cfg.event_delay_ns = 1000000;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  e[0] = ev('a', 1000, 0x10, 4096, 1);
  e[1] = ev('f', 1000, 0x10, 4096, 2); /* the same trace time */
  assert_int_equal(aa_replay_sim_feed(s, e, 1), AA_OK);
  aa_backend *b = aa_pool_backend(aa_replay_sim_pool(s));
  assert_non_null(b->ops->stream_query);
  assert_int_equal(b->ops->stream_query(b, NULL), AA_EAGAIN); /* work queued, a delay behind */
  assert_int_equal(b->ops->event_record(b, NULL, &q), AA_OK);
  assert_int_equal(b->ops->event_query(b, q), AA_EAGAIN);
  assert_int_equal(b->ops->synchronize(b), AA_OK);
  assert_int_equal(b->ops->event_query(b, q), AA_OK); /* recorded before: done */
  b->ops->event_release(b, q);
  assert_int_equal(b->ops->stream_query(b, NULL), AA_OK);
  assert_int_equal(b->ops->event_record(b, NULL, &q), AA_OK);
  assert_int_equal(b->ops->event_query(b, q), AA_OK); /* recorded after: nothing queued */
  b->ops->event_release(b, q);
  assert_int_equal(aa_replay_sim_feed(s, e + 1, 1), AA_OK); /* the next event: work again */
  assert_int_equal(b->ops->stream_query(b, NULL), AA_EAGAIN);
  assert_int_equal(b->ops->event_record(b, NULL, &q), AA_OK);
  assert_int_equal(b->ops->event_query(b, q), AA_EAGAIN);
  b->ops->event_release(b, q);
  aa_replay_sim_free(s);

  aa_replay_config_init(&cfg); /* no delay */
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  b = aa_pool_backend(aa_replay_sim_pool(s));
  assert_int_equal(b->ops->synchronize(b), AA_OK);
  assert_int_equal(b->ops->stream_query(b, NULL), AA_EAGAIN);
  assert_int_equal(b->ops->event_record(b, NULL, &q), AA_OK);
  assert_int_equal(b->ops->event_query(b, q), AA_OK);
  b->ops->event_release(b, q);
  aa_replay_sim_free(s);
}

/* One 8 MiB block used on stream 2 (record_stream, 'u'), freed on stream 1
 * while stream 2's work is pending, then 8 MiB asked for on stream 1:
 * returns the pool's peak reserved and its stream waits. */
static uint64_t stream_use_peak(bool use, int stream_wait, uint64_t *waits) {
  aa_replay_config cfg;
  aa_replay_sim *s = NULL;
  aa_replay_event e[4];
  size_t n = 0;
  aa_pool_stats st;
  char err[AA_REPLAY_ERR_CAP];

  aa_replay_config_init(&cfg);
  cfg.event_delay_ns = 1000000; /* stream 2's work outlasts the trace */
  cfg.pool.large_stream_wait = stream_wait;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  e[n] = ev('a', 0, 0x10, 8 << 20, 1);
  e[n++].stream = 1;
  if (use) {
    e[n] = ev('u', 1, 0x10, 0, 2);
    e[n++].stream = 2;
  }
  e[n] = ev('f', 2, 0x10, 8 << 20, 3);
  e[n++].stream = 1;
  e[n] = ev('a', 3, 0x20, 8 << 20, 4);
  e[n++].stream = 1;
  assert_int_equal(aa_replay_sim_feed(s, e, n), AA_OK);
  memset(&st, 0, sizeof st);
  st.version = AA_STATS_VERSION;
  st.size = sizeof st;
  assert_int_equal(aa_pool_stats_get(aa_replay_sim_pool(s), &st), AA_OK);
  *waits = st.large_stream_waits;
  aa_replay_result r;
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.stream_waits, st.large_stream_waits); /* the replay's figure */
  aa_replay_sim_free(s);
  return st.peak_bytes_reserved;
}

/* A stream use ('u') holds a freed block for that stream's work, as the
 * pool does on a GPU: with stream-ordered reuse the next request waits for
 * it (one stream wait, no growth); without, the pool grows; without the
 * use, the block's own stream reuses it at once. */
static void test_replay_sim_stream_use(void **state) {
  uint64_t waits = 99;
  (void)state;

  assert_true(stream_use_peak(false, 0, &waits) < (16u << 20));
  assert_int_equal(waits, 0);
  assert_true(stream_use_peak(true, 0, &waits) < (16u << 20));
  assert_int_equal(waits, 1);
  assert_true(stream_use_peak(true, -1, &waits) >= (16u << 20));
  assert_int_equal(waits, 0);
}

/* A use of a pointer that is not live is bad input, named. */
static void test_replay_sim_stream_use_bad(void **state) {
  aa_replay_sim *s = new_sim(AA_REPLAY_STOP, 0, false);
  aa_replay_event e = ev('u', 0, 0x40, 0, 1);
  (void)state;

  e.stream = 2;
  assert_int_equal(aa_replay_sim_feed(s, &e, 1), AA_EPARSE);
  assert_non_null(strstr(aa_replay_sim_error(s), "stream use of a not live"));
  aa_replay_sim_free(s);
}

static void test_replay_sim_bad_config(void **state) {
  aa_replay_config cfg;
  aa_replay_sim *s = (aa_replay_sim *)&cfg;
  char err[AA_REPLAY_ERR_CAP];
  static const aa_class_spec bad[] = {{1000, 0, 0}, {1048576, 0, 0}};
  (void)state;

  aa_replay_config_init(&cfg);
  cfg.classes = bad;
  cfg.nclasses = 2;
  assert_int_not_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  assert_null(s);
  assert_non_null(strstr(err, "class table"));
  cfg.version = 99;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_EINVAL);
  aa_replay_sim_free(NULL);
}

static int feed_sink(void *user, const aa_replay_event *e, size_t n) {
  return aa_replay_sim_feed(user, e, n);
}

/* The policy loop runs on the replay's clock and adds the exact class the
 * skewed stream asks for (with 8000 blocks live the exact class saves
 * slabs, so the loop's replay of the interval lets it through; with 2000 it
 * would save none and not be applied). */
static void test_replay_sim_adapt_loop(void **state) {
  aa_replay_config cfg;
  aa_replay_synth_config syn;
  aa_replay_hist h;
  aa_replay_sim *s = NULL;
  aa_replay_result r;
  const aa_adapt_decision *d;
  size_t n = 0, i;
  uint32_t with_loop;
  bool added = false;
  char err[AA_REPLAY_ERR_CAP];
  (void)state;

  memset(&h, 0, sizeof h);
  h.exact = malloc(2 * sizeof *h.exact);
  assert_non_null(h.exact);
  h.exact[0].size = 4100;
  h.exact[0].count = 90;
  h.exact[1].size = 512;
  h.exact[1].count = 10;
  h.nexact = 2;
  aa_replay_config_init(&cfg);
  cfg.adapt = true;
  cfg.adapt_every_events = 20000;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  aa_replay_synth_config_init(&syn);
  syn.events = 100000;
  syn.live_target = 8000;
  assert_int_equal(aa_replay_synth(&h, &syn, feed_sink, s, err, sizeof err),
                   AA_OK);
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.adapt.steps, 5);
  assert_true(r.adapt.classes_added >= 1);
  d = aa_replay_sim_decisions(s, &n);
  assert_true(n >= 1);
  for (i = 0; i < n; i++) {
    if (d[i].kind == AA_ADAPT_ADD_CLASS && d[i].block_size == 4608 &&
        d[i].result == AA_OK)
      added = true;
  }
  assert_true(added);
  with_loop = r.class_count;
  aa_replay_sim_free(s);

  /* Without adapt nothing changes the table. */
  cfg.adapt = false;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  assert_int_equal(aa_replay_synth(&h, &syn, feed_sink, s, err, sizeof err),
                   AA_OK);
  aa_replay_sim_result(s, &r);
  assert_int_equal(r.adapt.steps, 0);
  assert_true(r.class_count < with_loop);
  aa_replay_sim_free(s);
  aa_replay_hist_clear(&h);
}

/* per_thread: one replay thread per recorded thread id, same order, same
 * figures on every run. */
static void run_threads(aa_replay_result *r, size_t *nthreads) {
  aa_replay_config cfg;
  aa_replay_sim *s = NULL;
  aa_replay_event *e = malloc(3000 * sizeof *e);
  char err[AA_REPLAY_ERR_CAP];
  size_t i, n = 0;

  assert_non_null(e);
  aa_replay_config_init(&cfg);
  cfg.per_thread = true;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  /* Thread 1 allocates, thread 2 frees (a producer/consumer hand-off), in
   * short runs so the replay switches threads often. */
  for (i = 0; i < 1000; i++) {
    e[n] = ev('a', n, 0x1000 + i * 512, 4096, n + 1);
    e[n].thread = 1;
    n++;
    if (i % 3 == 2) {
      e[n] = ev('f', n, 0x1000 + (i - 2) * 512, 4096, n + 1);
      e[n].thread = 2;
      n++;
    }
  }
  assert_int_equal(aa_replay_sim_feed(s, e, n), AA_OK);
  aa_replay_sim_result(s, r);
  *nthreads = aa_replay_sim_threads(s);
  free(e);
  aa_replay_sim_free(s);
}

static void test_replay_sim_per_thread(void **state) {
  aa_replay_result a, b;
  size_t ta = 0, tb = 0;
  (void)state;

  run_threads(&a, &ta);
  run_threads(&b, &tb);
  assert_int_equal(ta, 2);
  assert_int_equal(tb, 2);
  assert_int_equal(a.allocs, 1000);
  assert_int_equal(a.frees, 333);
  assert_int_equal(a.live_at_end, 667);
  assert_int_equal(a.peak_in_use, b.peak_in_use);
  assert_int_equal(a.peak_reserved, b.peak_reserved);
  assert_int_equal(a.cache_hits, b.cache_hits);
  assert_int_equal(a.backend_calls, b.backend_calls);
  assert_true(a.peak_in_use >= 667 * 4096);
}

/* An account the simulator kept (get: aa_replay_sim_account_at_peak or
 * _at_event), its return code checked. */
static aa_pool_account acct_got(int (*get)(const aa_replay_sim *, aa_pool_account *),
                                const aa_replay_sim *s, int want_rc) {
  aa_pool_account a;
  memset(&a, 0, sizeof a);
  a.version = AA_ACCOUNT_VERSION;
  a.size = (uint32_t)sizeof a;
  assert_int_equal(get(s, &a), want_rc);
  return a;
}

static aa_pool_account acct_at_peak(const aa_replay_sim *s, int want_rc) {
  return acct_got(aa_replay_sim_account_at_peak, s, want_rc);
}

static aa_pool_account acct_at_event(const aa_replay_sim *s, int want_rc) {
  return acct_got(aa_replay_sim_account_at_event, s, want_rc);
}

/* The class table of the account tests: 3072 (682 blocks and a 2048-byte
 * tail a 2 MiB slab) and 1 MiB. */
static const aa_class_spec t3072[] = {{3072, 0, 0}, {1048576, 0, 0}};

/* The account at peak reserved on two hand-computed traces. feed_small's
 * peak (4 MiB, at t=10): A 1000 in a 1024 block, B 3000 in a 4096 block,
 * the rest of their two slabs free (both classes divide 2 MiB: no tail).
 * Then, with a 3072 class (682 blocks, a 2048-byte tail a slab): P1 3000;
 * P2 5 MiB + 1 (a 6 MiB segment, its block 5 MiB + 4 KiB) freed; P3 7 MiB,
 * which P2's free 6 MiB cannot hold: an 8 MiB segment, reserved 16 MiB
 * with 6 + 1 MiB of holes. */
static void test_replay_sim_account_at_peak(void **state) {
  aa_replay_sim *s = new_sim(AA_REPLAY_STOP, 0, false);
  aa_replay_config cfg;
  char err[AA_REPLAY_ERR_CAP];
  aa_replay_event e[4];
  aa_pool_account a;
  (void)state;

  (void)acct_at_peak(s, AA_ENOENT); /* nothing reserved yet */
  feed_small(s);
  a = acct_at_peak(s, AA_OK);
  assert_int_equal(a.bytes_reserved, 4 * MIB);
  assert_int_equal(a.requested, 4000);
  assert_int_equal(a.rounding, 24 + 1096);
  assert_int_equal(a.slab_free, 2047 * 1024 + 511 * 4096);
  assert_int_equal(a.slab_tails + a.holes + a.stream_holds + a.thread_caches + a.other, 0);
  /* bad arguments: AA_EINVAL, *out unchanged */
  a.version = AA_ACCOUNT_VERSION + 1;
  assert_int_equal(aa_replay_sim_account_at_peak(s, &a), AA_EINVAL);
  assert_int_equal(a.bytes_reserved, 4 * MIB);
  a.version = AA_ACCOUNT_VERSION;
  a.size = 4;
  assert_int_equal(aa_replay_sim_account_at_peak(s, &a), AA_EINVAL);
  assert_int_equal(a.requested, 4000);
  assert_int_equal(aa_replay_sim_account_at_peak(s, NULL), AA_EINVAL);
  assert_int_equal(aa_replay_sim_account_at_peak(NULL, &a), AA_EINVAL);
  aa_replay_sim_free(s);

  for (int per_thread = 0; per_thread <= 1; per_thread++) {
    aa_replay_config_init(&cfg);
    cfg.classes = t3072;
    cfg.nclasses = 2;
    cfg.per_thread = per_thread != 0;
    assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
    e[0] = ev('a', 0, 0x1000, 3000, 2);
    e[1] = ev('a', 10, 0x2000, 5 * MIB + 1, 3);
    e[2] = ev('f', 20, 0x2000, 5 * MIB + 1, 4);
    e[3] = ev('a', 30, 0x3000, 7 * MIB, 5);
    assert_int_equal(aa_replay_sim_feed(s, e, 4), AA_OK);
    a = acct_at_peak(s, AA_OK);
    assert_int_equal(a.bytes_reserved, 16 * MIB);
    assert_int_equal(a.requested, 3000 + 7 * MIB);
    assert_int_equal(a.rounding, 72);
    assert_int_equal(a.slab_free, 681 * 3072);
    assert_int_equal(a.slab_tails, 2048);
    assert_int_equal(a.holes, 7 * MIB);
    assert_int_equal(a.stream_holds + a.thread_caches + a.other, 0);
    /* frees raise no peak: the account stays the peak's */
    e[0] = ev('f', 40, 0x3000, 7 * MIB, 6);
    assert_int_equal(aa_replay_sim_feed(s, e, 1), AA_OK);
    assert_int_equal(acct_at_peak(s, AA_OK).requested, 3000 + 7 * MIB);
    aa_replay_sim_free(s);
  }
}

/* The account at peak in use, apart from the one at peak reserved (the 3072
 * table of the test above): P1 3000; P2 5 MiB + 1 (a 6 MiB segment) freed;
 * P3 7 MiB: a new 8 MiB segment, reserved peaks at 16 MiB (event 4) with
 * 6 + 1 MiB of holes and 7 MiB + 3072 in use; P4 5 MiB fits P2's free
 * 6 MiB: in use peaks (event 5) at 12 MiB + 3072 with reserved still
 * 16 MiB, its holes 1 + 1 MiB; then P3 freed. A second pass with
 * account_at_event 5 takes that account; the first has none. */
static void test_replay_sim_account_at_peak_in_use(void **state) {
  aa_replay_config cfg;
  aa_replay_sim *s = NULL;
  char err[AA_REPLAY_ERR_CAP];
  aa_replay_event e[6];
  aa_pool_account a;
  (void)state;

  e[0] = ev('a', 0, 0x1000, 3000, 2);
  e[1] = ev('a', 10, 0x2000, 5 * MIB + 1, 3);
  e[2] = ev('f', 20, 0x2000, 5 * MIB + 1, 4);
  e[3] = ev('a', 30, 0x3000, 7 * MIB, 5);
  e[4] = ev('a', 40, 0x4000, 5 * MIB, 6);
  e[5] = ev('f', 50, 0x3000, 7 * MIB, 7);
  for (int per_thread = 0; per_thread <= 1; per_thread++) {
    aa_replay_config_init(&cfg);
    assert_int_equal(cfg.account_at_event, 0);
    cfg.classes = t3072;
    cfg.nclasses = 2;
    cfg.per_thread = per_thread != 0;
    /* first pass: where in use peaked, no account at an event */
    assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
    assert_int_equal(aa_replay_sim_peak_in_use_event(s), 0);
    assert_int_equal(aa_replay_sim_feed(s, e, 6), AA_OK);
    assert_int_equal(aa_replay_sim_peak_in_use_event(s), 5);
    (void)acct_at_event(s, AA_ENOENT);
    aa_replay_sim_free(s);

    /* second pass: the account after event 5 */
    cfg.account_at_event = 5;
    assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
    (void)acct_at_event(s, AA_ENOENT); /* not yet */
    assert_int_equal(aa_replay_sim_feed(s, e, 3), AA_OK);
    (void)acct_at_event(s, AA_ENOENT);
    assert_int_equal(aa_replay_sim_feed(s, e + 3, 3), AA_OK);
    a = acct_at_event(s, AA_OK);
    assert_int_equal(a.bytes_reserved, 16 * MIB);
    assert_int_equal(a.requested, 3000 + 12 * MIB);
    assert_int_equal(a.rounding, 72);
    assert_int_equal(a.slab_free, 681 * 3072);
    assert_int_equal(a.slab_tails, 2048);
    assert_int_equal(a.holes, 2 * MIB);
    assert_int_equal(a.stream_holds + a.thread_caches + a.other, 0);
    /* the account at peak reserved is still event 4's */
    a = acct_at_peak(s, AA_OK);
    assert_int_equal(a.requested, 3000 + 7 * MIB);
    assert_int_equal(a.holes, 7 * MIB);
    /* bad arguments: AA_EINVAL, *out unchanged */
    a = acct_at_event(s, AA_OK);
    a.version = AA_ACCOUNT_VERSION + 1;
    assert_int_equal(aa_replay_sim_account_at_event(s, &a), AA_EINVAL);
    assert_int_equal(a.holes, 2 * MIB);
    a.version = AA_ACCOUNT_VERSION;
    a.size = 4;
    assert_int_equal(aa_replay_sim_account_at_event(s, &a), AA_EINVAL);
    assert_int_equal(a.holes, 2 * MIB);
    assert_int_equal(aa_replay_sim_account_at_event(s, NULL), AA_EINVAL);
    assert_int_equal(aa_replay_sim_account_at_event(NULL, &a), AA_EINVAL);
    aa_replay_sim_free(s);

    /* an event past the input's end: none */
    cfg.account_at_event = 7;
    assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
    assert_int_equal(aa_replay_sim_feed(s, e, 6), AA_OK);
    (void)acct_at_event(s, AA_ENOENT);
    aa_replay_sim_free(s);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_sim_hand_computed),
      cmocka_unit_test(test_replay_sim_stitch_alias_costs),
      cmocka_unit_test(test_replay_sim_event_count_fallback),
      cmocka_unit_test(test_replay_sim_bad_input_stop),
      cmocka_unit_test(test_replay_sim_bad_input_count),
      cmocka_unit_test(test_replay_sim_out_of_memory),
      cmocka_unit_test(test_replay_sim_trace_failures),
      cmocka_unit_test(test_replay_sim_sizes),
      cmocka_unit_test(test_replay_sim_large_and_many),
      cmocka_unit_test(test_replay_sim_streams),
      cmocka_unit_test(test_replay_sim_stream_use),
      cmocka_unit_test(test_replay_sim_stream_use_bad),
      cmocka_unit_test(test_replay_sim_bad_config),
      cmocka_unit_test(test_replay_sim_adapt_loop),
      cmocka_unit_test(test_replay_sim_idle_after_sync),
      cmocka_unit_test(test_replay_sim_per_thread),
      cmocka_unit_test(test_replay_sim_stitch_time_budget),
      cmocka_unit_test(test_replay_sim_account_at_peak),
      cmocka_unit_test(test_replay_sim_account_at_peak_in_use),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
