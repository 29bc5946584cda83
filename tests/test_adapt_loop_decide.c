/*
 * test_adapt_loop_decide.c — the policy loop's decision function on synthetic
 * stats: each rule (add, grow, retire, trim), each bound (max_classes,
 * max_adds_per_interval, cap) and each hysteresis span (min_class_age,
 * cold_intervals, readd_cooldown, grow_cooldown, trim_cooldown), and
 * determinism.
 *
 * One concern, the loop's decision function (one ctest), kept in one file
 * though it runs past 600 lines; the cmocka table at its end lists every
 * case.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/adapt.h"

#define MIB (1024ull * 1024ull)

/* A synthetic pool: a class table and cumulative counters. */
typedef struct fake {
  aa_class_spec cl[AA_MAX_CLASSES];
  size_t n;
  aa_pool_stats prev, cur;
  aa_adapt_state st;
  aa_adapt_params p;
  aa_adapt_decision d[AA_ADAPT_MAX_DECISIONS];
} fake;

static void sync_stats_classes(aa_pool_stats *s, const fake *f) {
  aa_pool_stats old = *s;
  s->class_count = (uint32_t)f->n;
  for (size_t i = 0; i < f->n; i++) {
    aa_class_stats *c = &s->classes[i];
    memset(c, 0, sizeof *c);
    c->block_size = f->cl[i].block_size;
    c->prefill = f->cl[i].prefill;
    for (uint32_t k = 0; k < old.class_count; k++) {
      if (old.classes[k].block_size == c->block_size) {
        *c = old.classes[k];
        c->prefill = f->cl[i].prefill;
      }
    }
  }
}

static fake *fake_new(void) {
  fake *f = calloc(1, sizeof *f);
  aa_policy *pol = NULL;
  assert_non_null(f);
  assert_int_equal(aa_policy_default(&pol), AA_OK);
  assert_int_equal(
      aa_policy_pool_config(pol, "pinned", NULL, f->cl, AA_MAX_CLASSES, &f->n), AA_OK);
  aa_policy_free(pol);
  assert_int_equal(f->n, 40);
  aa_adapt_params_default(&f->p);
  aa_adapt_state_init(&f->st);
  f->cur.version = AA_STATS_VERSION;
  sync_stats_classes(&f->cur, f);
  f->prev = f->cur;
  return f;
}

static aa_class_stats *cls(fake *f, uint64_t size) {
  for (uint32_t i = 0; i < f->cur.class_count; i++) {
    if (f->cur.classes[i].block_size == size)
      return &f->cur.classes[i];
  }
  fail_msg("no class %llu", (unsigned long long)size);
  return NULL;
}

/* The smallest class that serves a request of `size`. */
static uint64_t serving(const fake *f, uint64_t size) {
  for (size_t i = 0; i < f->n; i++) {
    if (f->cl[i].block_size >= size)
      return f->cl[i].block_size;
  }
  return 0;
}

static void hh_add(aa_pool_stats *s, uint64_t size, uint64_t count) {
  for (uint32_t i = 0; i < s->hh_count; i++) {
    if (s->hh[i].size == size) {
      s->hh[i].count += count;
      return;
    }
  }
  assert_true(s->hh_count < AA_HH_MAX);
  s->hh[s->hh_count].size = size;
  s->hh[s->hh_count].count = count;
  s->hh_count++;
}

/* `count` requests of `size` this interval (misses of them needed a slab). */
static void request(fake *f, uint64_t size, uint64_t count, uint64_t misses) {
  aa_class_stats *c = cls(f, serving(f, size));
  c->allocs += count;
  c->misses += misses;
  c->hits += count - misses;
  f->cur.allocs += count;
  hh_add(&f->cur, size, count);
}

/* One step; then applies the decisions to the synthetic table and rolls the
 * snapshots. Returns the number of decisions. */
static size_t step(fake *f) {
  size_t nd = aa_adapt_decide(&f->p, &f->st, &f->prev, &f->cur, f->cl, f->n, f->d,
                              AA_ADAPT_MAX_DECISIONS);
  for (size_t i = 0; i < nd; i++) {
    const aa_adapt_decision *d = &f->d[i];
    size_t k;
    assert_int_equal(d->result, AA_OK);
    assert_int_equal(d->interval, f->st.interval);
    assert_true(strlen(d->reason) > 10);
    switch (d->kind) {
    case AA_ADAPT_ADD_CLASS:
      k = 0;
      while (k < f->n && f->cl[k].block_size < d->block_size)
        k++;
      assert_true(k == f->n || f->cl[k].block_size != d->block_size);
      memmove(&f->cl[k + 1], &f->cl[k], (f->n - k) * sizeof f->cl[0]);
      f->cl[k] = (aa_class_spec){(size_t)d->block_size, 0, 0};
      f->n++;
      break;
    case AA_ADAPT_RETIRE_CLASS:
      for (k = 0; k < f->n && f->cl[k].block_size != d->block_size; k++)
        ;
      assert_true(k < f->n);
      memmove(&f->cl[k], &f->cl[k + 1], (f->n - k - 1) * sizeof f->cl[0]);
      f->n--;
      break;
    case AA_ADAPT_GROW_OR_PREFILL:
      for (k = 0; k < f->n && f->cl[k].block_size != d->block_size; k++)
        ;
      assert_true(k < f->n);
      f->cl[k].prefill = (uint32_t)d->amount;
      break;
    case AA_ADAPT_TRIM:
      break;
    default:
      fail_msg("bad kind %d", d->kind);
    }
  }
  sync_stats_classes(&f->cur, f);
  f->prev = f->cur;
  return nd;
}

static void test_adapt_loop_decide_adds_exact_class(void **state) {
  fake *f = fake_new();
  size_t nd;
  (void)state;
  /* 1000 requests of 16884 B: the ladder serves them with 20480 B (17.6%). */
  assert_int_equal(serving(f, 16884), 20480);
  request(f, 16884, 1000, 10);
  request(f, 1000, 100, 1);
  nd = step(f);
  assert_int_equal(nd, 1);
  assert_int_equal(f->d[0].kind, AA_ADAPT_ADD_CLASS);
  assert_int_equal(f->d[0].block_size, 16896);
  assert_int_equal(f->d[0].request_size, 16884);
  assert_int_equal(f->d[0].amount, 1000);
  assert_non_null(strstr(f->d[0].reason, "hot size 16884 B: 1000 of 1100 small "
                                         "requests this interval (90.9%) go to "
                                         "class 20480 B, wasting 17.6%"));
  assert_non_null(strstr(f->d[0].reason, "exact class 16896 B wastes 0.1%"));
  assert_string_equal(aa_adapt_kind_name(f->d[0].kind), "add_class");
  assert_int_equal(serving(f, 16884), 16896);

  /* The same traffic now goes to the exact class: nothing more to do. */
  request(f, 16884, 1000, 0);
  request(f, 1000, 100, 0);
  assert_int_equal(step(f), 0);
  free(f);
}

/* Shares are over the interval actually elapsed, with one denominator for
 * the counts: a table change restarts the class counters (the thread caches
 * are flushed), which once gave "20508 of 17900 small requests (114.6%)";
 * and a size missing from a full heavy-hitter list has an unknown earlier
 * count, not 0. */
static void test_adapt_loop_decide_shares_over_elapsed(void **state) {
  fake *f = fake_new();
  (void)state;
  /* since start: 90000 requests of 921600 B, class counters at 120000 */
  request(f, 921600, 90000, 0);
  request(f, 3000, 30000, 0);
  f->cur.hist[aa_hist_bucket(921600)] += 90000;
  f->cur.hist[aa_hist_bucket(3000)] += 30000;
  f->prev = f->cur;
  f->prev.time_ns = 1000000000ull;
  f->cur.time_ns = f->prev.time_ns + 500000000ull; /* 0.5 s later */
  /* this interval: 20000 of 921600 B and 5000 of 3000 B, but the class
   * counters restarted from 0 at a table change and count only 2000 */
  request(f, 921600, 20000, 0);
  request(f, 3000, 5000, 0);
  f->cur.hist[aa_hist_bucket(921600)] += 20000;
  f->cur.hist[aa_hist_bucket(3000)] += 5000;
  for (uint32_t i = 0; i < f->cur.class_count; i++) {
    aa_class_stats *c = &f->cur.classes[i];
    if (c->allocs > 0)
      c->allocs = c->hits = c->block_size == serving(f, 921600) ? 1500 : 500;
  }
  size_t nd = aa_adapt_decide(&f->p, &f->st, &f->prev, &f->cur, f->cl, f->n, f->d,
                              AA_ADAPT_MAX_DECISIONS);
  assert_int_equal(nd, 1);
  assert_int_equal(f->d[0].kind, AA_ADAPT_ADD_CLASS);
  assert_int_equal(f->d[0].request_size, 921600);
  assert_int_equal(f->d[0].amount, 20000);
  assert_int_equal(f->d[0].window_requests, 25000);
  assert_true(f->d[0].amount <= f->d[0].window_requests);
  assert_int_equal(f->d[0].window_ns, 500000000ull);
  assert_non_null(strstr(f->d[0].reason, "20000 of 25000 small requests in the last 0.50 s (80.0%)"));

  /* A full list at the previous snapshot without the size: no decision on
   * its count since start. */
  fake *g = fake_new();
  for (uint32_t i = 0; i < AA_HH_MAX; i++)
    hh_add(&g->cur, 600 + i, 1000);
  g->cur.hist[aa_hist_bucket(600)] += 1000u * AA_HH_MAX;
  g->prev = g->cur;
  /* 16884 B enters the list with its count since start, 900000; 900 of
   * them in this interval */
  g->cur.hh[AA_HH_MAX - 1].size = 16884;
  g->cur.hh[AA_HH_MAX - 1].count = 900000;
  g->cur.hist[aa_hist_bucket(16884)] += 900;
  for (uint32_t i = 0; i < g->cur.class_count; i++) {
    aa_class_stats *c = &g->cur.classes[i];
    if (c->block_size == serving(g, 16884))
      c->allocs = c->hits = 900;
  }
  nd = aa_adapt_decide(&g->p, &g->st, &g->prev, &g->cur, g->cl, g->n, g->d,
                       AA_ADAPT_MAX_DECISIONS);
  for (size_t i = 0; i < nd; i++)
    assert_true(g->d[i].kind != AA_ADAPT_ADD_CLASS || g->d[i].amount <= g->d[i].window_requests);
  for (size_t i = 0; i < nd; i++)
    assert_true(g->d[i].kind != AA_ADAPT_ADD_CLASS || g->d[i].request_size != 16884);
  free(g);
  free(f);
}

static void test_adapt_loop_decide_add_thresholds(void **state) {
  fake *f = fake_new();
  (void)state;
  /* Not hot enough: 40 of 1000 (4% < 5%). */
  request(f, 16884, 40 + 64, 0); /* >= min_requests but a small share */
  request(f, 512, 2400, 0);
  assert_int_equal(step(f), 0);
  /* Little waste: 3000 B in 3072 B (2.3% <= 10%). */
  request(f, 3000, 1000, 0);
  assert_int_equal(step(f), 0);
  /* Too few requests (below min_requests = 64) even though they are all. */
  request(f, 16884, 63, 0);
  assert_int_equal(step(f), 0);
  /* Over max_small: the large path, not a class. */
  request(f, 1048576, 10, 0);
  hh_add(&f->cur, 2000000, 1000);
  assert_int_equal(step(f), 0);
  /* Exact would be the serving class itself: 1100 B -> 1536 B either way. */
  request(f, 1100, 1000, 0);
  assert_int_equal(step(f), 0);
  /* Cumulative heavy-hitter counts: only the delta counts. */
  hh_add(&f->prev, 17000, 100000);
  hh_add(&f->cur, 17000, 100000);
  request(f, 17000, 10, 0);
  assert_int_equal(step(f), 0);
  /* A heavy-hitter count that went down (the core's table decays) gives no
   * requests for the interval, even when the classes saw many. */
  hh_add(&f->prev, 17500, 5000);
  request(f, 17500, 1000, 0);
  f->cur.hh[f->cur.hh_count - 1].count = 1000;
  assert_int_equal(step(f), 0);
  /* 9700 B in 10240 B wastes 5.3%: under the default 10%, over 1%. */
  request(f, 9700, 1000, 0);
  assert_int_equal(step(f), 0);
  f->p.waste_threshold = 0.01;
  request(f, 9700, 1000, 0);
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].block_size, 9728);
  free(f);
}

static void test_adapt_loop_decide_bounds(void **state) {
  fake *f = fake_new();
  size_t nd;
  static const uint64_t sizes[6] = {16884, 33000, 66000, 132000, 264000, 528000};
  (void)state;
  /* Six hot wasteful sizes; max_adds_per_interval 4 takes the busiest four. */
  for (int i = 0; i < 6; i++)
    request(f, sizes[i], 1000 + 100 * (uint64_t)i, 0);
  nd = step(f);
  assert_int_equal(nd, 4);
  assert_int_equal(f->d[0].request_size, 528000);
  assert_int_equal(f->d[1].request_size, 264000);
  assert_int_equal(f->d[2].request_size, 132000);
  assert_int_equal(f->d[3].request_size, 66000);
  assert_int_equal(f->n, 44);
  /* The next step takes the rest. */
  for (int i = 0; i < 6; i++)
    request(f, sizes[i], 1000, 0);
  nd = step(f);
  assert_int_equal(nd, 2);
  assert_int_equal(f->n, 46);

  /* max_classes: at the bound nothing is added, and that is counted. */
  free(f);
  f = fake_new();
  f->p.max_classes = 41;
  for (int i = 0; i < 6; i++)
    request(f, sizes[i], 1000, 0);
  nd = step(f);
  assert_int_equal(nd, 1);
  assert_int_equal(f->n, 41);
  assert_int_equal(f->st.suppressed_by_bound, 5);
  for (int i = 0; i < 6; i++)
    request(f, sizes[i], 1000, 0);
  assert_int_equal(step(f), 0);

  /* The caller's cap bounds the decisions of one step. */
  free(f);
  f = fake_new();
  for (int i = 0; i < 6; i++)
    request(f, sizes[i], 1000, 0);
  nd = aa_adapt_decide(&f->p, &f->st, &f->prev, &f->cur, f->cl, f->n, f->d, 2);
  assert_int_equal(nd, 2);
  free(f);
}

/* Adds 16896 B at step 1 and returns. */
static fake *with_added_class(void) {
  fake *f = fake_new();
  request(f, 16884, 1000, 0);
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].kind, AA_ADAPT_ADD_CLASS);
  assert_int_equal(f->st.interval, 1);
  return f;
}

static void test_adapt_loop_decide_retire_cold(void **state) {
  fake *f;
  (void)state;
  /* cold_intervals 3, min_class_age 5: cold from step 2, retired at step 6
   * (age 5), not at step 4 (cold 3 but only 3 old). */
  f = with_added_class();
  f->p.cold_intervals = 3;
  f->p.min_class_age = 5;
  for (int s = 2; s <= 5; s++) {
    request(f, 512, 100, 0);
    assert_int_equal(step(f), 0);
  }
  request(f, 512, 100, 0);
  assert_int_equal(step(f), 1);
  assert_int_equal(f->st.interval, 6);
  assert_int_equal(f->d[0].kind, AA_ADAPT_RETIRE_CLASS);
  assert_int_equal(f->d[0].block_size, 16896);
  assert_int_equal(f->d[0].amount, 5);
  assert_non_null(strstr(f->d[0].reason, "class 16896 B (added 5 intervals ago) "
                                         "had no allocations for 5 intervals"));
  assert_int_equal(f->n, 40);
  free(f);

  /* min_class_age 0: retired exactly when cold_intervals is reached; any
   * allocation restarts the count. */
  f = with_added_class();
  f->p.cold_intervals = 3;
  f->p.min_class_age = 0;
  assert_int_equal(step(f), 0); /* step 2: cold 1 */
  request(f, 16884, 1, 0);      /* one request: warm again */
  assert_int_equal(step(f), 0); /* step 3: cold 0 */
  assert_int_equal(step(f), 0); /* 4: 1 */
  assert_int_equal(step(f), 0); /* 5: 2 */
  assert_int_equal(step(f), 1); /* 6: 3 -> retire */
  assert_int_equal(f->d[0].kind, AA_ADAPT_RETIRE_CLASS);
  free(f);

  /* Ladder classes are never retired, however cold. */
  f = fake_new();
  f->p.cold_intervals = 1;
  f->p.min_class_age = 0;
  for (int s = 0; s < 5; s++)
    assert_int_equal(step(f), 0);
  assert_int_equal(f->n, 40);
  free(f);
}

static void test_adapt_loop_decide_readd_cooldown(void **state) {
  fake *f = with_added_class();
  (void)state;
  f->p.cold_intervals = 2;
  f->p.min_class_age = 0;
  f->p.readd_cooldown = 4;
  assert_int_equal(step(f), 0); /* 2 */
  assert_int_equal(step(f), 1); /* 3: retired */
  assert_int_equal(f->d[0].kind, AA_ADAPT_RETIRE_CLASS);
  /* Hot again at once: suppressed at steps 4, 5, 6; re-added at step 7. */
  for (int s = 4; s <= 6; s++) {
    request(f, 16884, 1000, 0);
    assert_int_equal(step(f), 0);
  }
  assert_int_equal(f->st.suppressed_by_cooldown, 3);
  request(f, 16884, 1000, 0);
  assert_int_equal(step(f), 1);
  assert_int_equal(f->st.interval, 7);
  assert_int_equal(f->d[0].kind, AA_ADAPT_ADD_CLASS);
  assert_int_equal(f->d[0].block_size, 16896);
  free(f);

  /* A failed add goes on the same cooldown. */
  f = fake_new();
  f->p.readd_cooldown = 3;
  request(f, 16884, 1000, 0);
  assert_int_equal(aa_adapt_decide(&f->p, &f->st, &f->prev, &f->cur, f->cl, f->n,
                                   f->d, AA_ADAPT_MAX_DECISIONS),
                   1);
  aa_adapt_state_note_failure(&f->st, &f->d[0]); /* not applied to f->cl */
  f->prev = f->cur;
  request(f, 16884, 1000, 0);
  assert_int_equal(step(f), 0); /* 2 */
  request(f, 16884, 1000, 0);
  assert_int_equal(step(f), 0); /* 3 */
  request(f, 16884, 1000, 0);
  assert_int_equal(step(f), 1); /* 4: cooldown over */
  free(f);
}

/* A size that comes back after being retired is periodically hot: each time
 * it is re-added its cold limit doubles, so a cyclic workload converges to
 * keeping the class instead of adding and retiring it every cycle. */
static void test_adapt_loop_decide_flap_backoff(void **state) {
  fake *f = with_added_class(); /* step 1: 16896 B added */
  int s;
  (void)state;
  f->p.cold_intervals = 2;
  f->p.min_class_age = 0;
  f->p.readd_cooldown = 1;
  assert_int_equal(step(f), 0); /* 2: cold 1 */
  assert_int_equal(step(f), 1); /* 3: cold 2 -> retired (first time) */
  assert_int_equal(f->d[0].kind, AA_ADAPT_RETIRE_CLASS);
  request(f, 16884, 1000, 0);
  assert_int_equal(step(f), 1); /* 4: hot again -> re-added */
  assert_int_equal(f->d[0].kind, AA_ADAPT_ADD_CLASS);
  assert_non_null(strstr(f->d[0].reason, "retired 1 time before, so it is kept "
                                         "through 4 cold intervals"));
  for (s = 5; s <= 7; s++) /* cold 1..3: kept (limit 4) */
    assert_int_equal(step(f), 0);
  assert_int_equal(step(f), 1); /* 8: cold 4 -> retired (second time) */
  assert_int_equal(f->d[0].kind, AA_ADAPT_RETIRE_CLASS);
  assert_non_null(strstr(f->d[0].reason, "cold limit 4"));
  request(f, 16884, 1000, 0);
  assert_int_equal(step(f), 1); /* 9: re-added, limit 8 now */
  assert_non_null(strstr(f->d[0].reason, "retired 2 times before, so it is kept "
                                         "through 8 cold intervals"));
  for (s = 10; s <= 16; s++) /* cold 1..7: kept */
    assert_int_equal(step(f), 0);
  assert_int_equal(step(f), 1); /* 17: cold 8 -> retired */
  free(f);
}

static void test_adapt_loop_decide_grow(void **state) {
  fake *f = fake_new();
  aa_class_stats *c;
  (void)state;
  f->p.grow_cooldown = 3;
  f->p.prefill_max_bytes = 8 * MIB;
  /* 1 MiB blocks, 2 per 2 MiB slab: 100 allocations, 50 misses. */
  c = cls(f, 1048576);
  c->slabs = 10;
  c->bytes_reserved = 20 * MIB;
  request(f, 1048576, 100, 50);
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].kind, AA_ADAPT_GROW_OR_PREFILL);
  assert_int_equal(f->d[0].block_size, 1048576);
  assert_int_equal(f->d[0].amount, 2); /* one slab's worth */
  assert_non_null(strstr(f->d[0].reason, "class 1048576 B: 50 misses in 100 "
                                         "allocations this interval (50.0% > "
                                         "10.0%); prefill 0 -> 2 blocks"));
  /* Cooldown: steps 2 and 3 do nothing; step 4 doubles. */
  request(f, 1048576, 100, 50);
  assert_int_equal(step(f), 0);
  request(f, 1048576, 100, 50);
  assert_int_equal(step(f), 0);
  request(f, 1048576, 100, 50);
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].amount, 4);
  /* Capped by prefill_max_bytes (8 blocks), then no more. */
  for (int s = 0; s < 3; s++) {
    request(f, 1048576, 100, 50);
    step(f);
  }
  assert_int_equal(f->d[0].amount, 8);
  for (int s = 0; s < 6; s++) {
    request(f, 1048576, 100, 50);
    assert_int_equal(step(f), 0);
  }
  /* A low miss rate or too few allocations never grow. */
  request(f, 4096, 1000, 100); /* 10%, not above */
  request(f, 8192, 63, 63);    /* below min_requests */
  assert_int_equal(step(f), 0);
  free(f);
}

static void test_adapt_loop_decide_trim(void **state) {
  fake *f = fake_new();
  (void)state;
  f->p.trim_cooldown = 2;
  f->cur.bytes_reserved = 600 * MIB;
  f->cur.bytes_in_use = 100 * MIB;
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].kind, AA_ADAPT_TRIM);
  assert_int_equal(f->d[0].amount, 128 * MIB);
  assert_non_null(strstr(f->d[0].reason, "cached 500.0 MiB (reserved 600.0 MiB - "
                                         "recent peak in use 100.0 MiB) is above "
                                         "trim_threshold_bytes 256.0 MiB; trim to "
                                         "128.0 MiB above the peak"));
  assert_int_equal(step(f), 0); /* cooldown */
  /* The intervals' peaks count, not the moment's in-use bytes: 550 MiB at
   * a peak leaves 50 MiB cached, nothing to trim... */
  f->cur.window_peak_bytes_in_use = 550 * MIB;
  assert_int_equal(step(f), 0);
  /* ...for as long as that peak is recent... */
  f->cur.window_peak_bytes_in_use = 200 * MIB;
  for (int i = 0; i < AA_ADAPT_PEAK_INTERVALS - 1; i++)
    assert_int_equal(step(f), 0);
  /* ...then 200 MiB at the peaks keeps those plus half the threshold. */
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].amount, 100 * MIB + 128 * MIB);
  assert_non_null(strstr(f->d[0].reason, "cached 400.0 MiB"));
  f->cur.window_peak_bytes_in_use = 0;
  for (int i = 0; i < AA_ADAPT_PEAK_INTERVALS; i++)
    step(f); /* the 200 MiB peaks age out */
  {
    int found = 0;
    for (int i = 0; i < 3 && !found; i++) { /* the next one the cooldown allows */
      if (step(f) == 1) {
        found = 1;
        assert_int_equal(f->d[0].amount, 128 * MIB);
      }
    }
    assert_true(found);
  }
  /* Below the threshold: nothing. */
  f->cur.bytes_reserved = 300 * MIB;
  f->cur.bytes_in_use = 100 * MIB;
  step(f);
  step(f);
  assert_int_equal(step(f), 0);
  /* Near the limit: trim everything cached. */
  f->cur.limit_bytes = 1024 * MIB;
  f->cur.bytes_reserved = 950 * MIB;
  f->cur.bytes_in_use = 900 * MIB;
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].amount, 0);
  assert_non_null(strstr(f->d[0].reason, "within 10% of limit_bytes 1024.0 MiB"));
  /* trim_threshold_bytes 0 turns the threshold rule off. */
  f->cur.limit_bytes = 0;
  f->p.trim_threshold_bytes = 0;
  f->cur.bytes_reserved = 60000 * MIB;
  step(f);
  step(f);
  assert_int_equal(step(f), 0);
  free(f);
}

/* A pool 300 MiB above a 300 MiB peak, trimmed (128 MiB kept above the
 * peak) and the trim noted as giving back `released` bytes, which leave the
 * pool's reserved bytes. */
static fake *trimmed_at_300(uint64_t released) {
  fake *f = fake_new();
  f->p.trim_cooldown = 2;
  f->cur.bytes_reserved = 600 * MIB;
  f->cur.bytes_in_use = 300 * MIB;
  f->cur.window_peak_bytes_in_use = 300 * MIB;
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].kind, AA_ADAPT_TRIM);
  assert_int_equal(f->d[0].amount, 128 * MIB);
  f->d[0].released = released;
  aa_adapt_state_note_trim(&f->st, &f->d[0]);
  f->cur.bytes_reserved -= released;
  return f;
}

/* Steps n times, each trim noted as giving nothing back; *first and *last
 * the amounts of the first and last trims (0: none). */
static void trims_giving_nothing(fake *f, int n, uint64_t *first, uint64_t *last) {
  *first = *last = 0;
  for (int i = 0; i < n; i++) {
    if (step(f) == 1) {
      if (*first == 0)
        *first = f->d[0].amount;
      *last = f->d[0].amount;
      f->d[0].released = 0;
      aa_adapt_state_note_trim(&f->st, &f->d[0]);
    }
  }
}

/* A trim the workload undoes is not repeated: 300 MiB above the recent
 * peak is trimmed to 128, the pool maps it back for a peak no larger (its
 * holes, not a cache), and from then on that gap is kept; a trim that gave
 * nothing back teaches nothing; a shrunken working set is trimmed again. */
static void test_adapt_loop_decide_trim_undone(void **state) {
  /* applied, nothing given back: nothing to learn, the next one comes */
  fake *f = trimmed_at_300(0);
  (void)state;
  assert_int_equal(step(f), 0); /* cooldown */
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].amount, 128 * MIB);
  /* this one gives back 172 MiB... */
  f->d[0].released = 172 * MIB;
  aa_adapt_state_note_trim(&f->st, &f->d[0]);
  f->cur.bytes_reserved = 428 * MIB;
  assert_int_equal(step(f), 0);
  /* ...which the next peak, no larger, maps again: learned, never again */
  f->cur.bytes_reserved = 600 * MIB;
  for (int i = 0; i < 3 * AA_ADAPT_PEAK_INTERVALS; i++)
    assert_int_equal(step(f), 0);
  assert_int_equal(f->st.kept_gap, 300 * MIB);
  /* more above the peak than the gap needs (and the threshold's quarter):
   * trimmed down to the gap */
  f->cur.bytes_reserved = 700 * MIB;
  assert_int_equal(step(f), 1);
  assert_int_equal(f->d[0].amount, 300 * MIB);
  assert_non_null(strstr(f->d[0].reason, "and the 300.0 MiB its peaks needed after an "
                                         "earlier trim; trim to 300.0 MiB above the peak"));
  /* the working set shrinks to 100 MiB: while the 300 MiB peaks are
   * recent, trimmed to them and the gap (200 + 300 above in use); once
   * they have aged out, the gap learned for 300 holds no more than the
   * working set itself (100), below half the threshold: 128 */
  f->d[0].released = 0;
  aa_adapt_state_note_trim(&f->st, &f->d[0]);
  f->cur.bytes_in_use = 100 * MIB;
  f->cur.window_peak_bytes_in_use = 100 * MIB;
  uint64_t first, last;
  trims_giving_nothing(f, AA_ADAPT_PEAK_INTERVALS + 3, &first, &last);
  assert_int_equal(first, 500 * MIB);
  assert_int_equal(last, 128 * MIB);
  free(f);
}

/* What is not the trim's bytes coming back teaches nothing: after a trim
 * a burst maps more than the trim gave back, and once the burst's peak has
 * aged out its reserve must not read as the trim undone. And a gap learned
 * for one working set holds no more than the recent peak. */
static void test_adapt_loop_decide_trim_not_undone(void **state) {
  fake *f = trimmed_at_300(172 * MIB); /* 428 MiB left */
  (void)state;
  assert_int_equal(step(f), 0);
  /* a burst to 2000 MiB in use, then back to 300 (the pool keeps 2100) */
  f->cur.bytes_reserved = 2100 * MIB;
  f->cur.window_peak_bytes_in_use = 2000 * MIB;
  assert_int_equal(step(f), 0);
  f->cur.window_peak_bytes_in_use = 300 * MIB;
  uint64_t amount = 0;
  for (int i = 0; i < AA_ADAPT_PEAK_INTERVALS + 3 && amount == 0; i++)
    if (step(f) == 1)
      amount = f->d[0].amount;
  assert_int_equal(f->st.kept_gap, 0);
  assert_int_equal(amount, 128 * MIB); /* as without the earlier trim */
  free(f);

  /* learned at a 300 MiB peak (as in ..._trim_undone)... */
  f = trimmed_at_300(172 * MIB);
  assert_int_equal(step(f), 0);
  f->cur.bytes_reserved = 600 * MIB;
  assert_int_equal(step(f), 0);
  assert_int_equal(f->st.kept_gap, 300 * MIB);
  /* ...kept while the peak grows (a larger gap is learned only when a
   * trim is undone again)... */
  f->cur.bytes_reserved = 1200 * MIB;
  f->cur.bytes_in_use = 600 * MIB;
  f->cur.window_peak_bytes_in_use = 600 * MIB;
  assert_int_equal(step(f), 1);
  assert_int_equal(f->st.kept_gap, 300 * MIB);
  assert_int_equal(f->d[0].amount, 300 * MIB);
  /* ...and, once the recent peaks have fallen to 20 MiB, holding no more
   * than that peak: 20 MiB above it is below half the threshold, 128 */
  f->d[0].released = 0;
  aa_adapt_state_note_trim(&f->st, &f->d[0]);
  f->cur.bytes_in_use = 20 * MIB;
  f->cur.window_peak_bytes_in_use = 20 * MIB;
  uint64_t first, last;
  trims_giving_nothing(f, AA_ADAPT_PEAK_INTERVALS + 3, &first, &last);
  assert_int_equal(last, 128 * MIB);
  free(f);
}

static void test_adapt_loop_decide_order_and_determinism(void **state) {
  fake *f = with_added_class();
  aa_adapt_state st2;
  aa_adapt_decision d2[AA_ADAPT_MAX_DECISIONS];
  aa_class_stats *c;
  size_t nd, nd2;
  (void)state;
  f->p.cold_intervals = 1;
  f->p.min_class_age = 1;
  /* One step with all four kinds: retire 16896, add 33280, grow 1 MiB, trim. */
  request(f, 33000, 1000, 0);
  c = cls(f, 1048576);
  c->slabs = 2;
  c->bytes_reserved = 4 * MIB;
  request(f, 1048576, 100, 90);
  f->cur.bytes_reserved = 1024 * MIB;
  st2 = f->st;
  nd = aa_adapt_decide(&f->p, &f->st, &f->prev, &f->cur, f->cl, f->n, f->d,
                       AA_ADAPT_MAX_DECISIONS);
  nd2 = aa_adapt_decide(&f->p, &st2, &f->prev, &f->cur, f->cl, f->n, d2,
                        AA_ADAPT_MAX_DECISIONS);
  assert_int_equal(nd, 4);
  assert_int_equal(nd2, nd);
  assert_memory_equal(f->d, d2, nd * sizeof d2[0]);
  assert_memory_equal(&f->st, &st2, sizeof st2);
  assert_int_equal(f->d[0].kind, AA_ADAPT_RETIRE_CLASS);
  assert_int_equal(f->d[1].kind, AA_ADAPT_ADD_CLASS);
  assert_int_equal(f->d[1].block_size, 33280);
  assert_int_equal(f->d[2].kind, AA_ADAPT_GROW_OR_PREFILL);
  assert_int_equal(f->d[3].kind, AA_ADAPT_TRIM);

  /* Disabled: nothing, and the state does not move. */
  f->p.enabled = false;
  st2 = f->st;
  assert_int_equal(aa_adapt_decide(&f->p, &f->st, &f->prev, &f->cur, f->cl, f->n,
                                   f->d, AA_ADAPT_MAX_DECISIONS),
                   0);
  assert_memory_equal(&f->st, &st2, sizeof st2);
  /* Bad arguments: nothing. */
  f->p.enabled = true;
  assert_int_equal(aa_adapt_decide(NULL, &f->st, NULL, &f->cur, f->cl, f->n, f->d, 4),
                   0);
  assert_int_equal(aa_adapt_decide(&f->p, &f->st, NULL, NULL, f->cl, f->n, f->d, 4),
                   0);
  assert_int_equal(aa_adapt_decide(&f->p, &f->st, NULL, &f->cur, f->cl, 0, f->d, 4),
                   0);
  assert_string_equal(aa_adapt_kind_name((aa_adapt_kind)99), "unknown");
  free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adapt_loop_decide_adds_exact_class),
      cmocka_unit_test(test_adapt_loop_decide_shares_over_elapsed),
      cmocka_unit_test(test_adapt_loop_decide_add_thresholds),
      cmocka_unit_test(test_adapt_loop_decide_bounds),
      cmocka_unit_test(test_adapt_loop_decide_retire_cold),
      cmocka_unit_test(test_adapt_loop_decide_readd_cooldown),
      cmocka_unit_test(test_adapt_loop_decide_flap_backoff),
      cmocka_unit_test(test_adapt_loop_decide_grow),
      cmocka_unit_test(test_adapt_loop_decide_trim),
      cmocka_unit_test(test_adapt_loop_decide_trim_undone),
      cmocka_unit_test(test_adapt_loop_decide_trim_not_undone),
      cmocka_unit_test(test_adapt_loop_decide_order_and_determinism),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
