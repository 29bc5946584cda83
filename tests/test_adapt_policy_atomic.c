/*
 * test_adapt_policy_atomic.c — a new policy reaches every live pool or none
 * (aa_policy_change_prepare / _commit / _abort, adapt/policy/policy_apply.c).
 *
 * Three pools on one host backend, made as the runtime makes them (their
 * section's settings, then aa_policy_apply): "host" (pools.host), "host:kv"
 * (pools.regions.kv) and "host:scores" (pools.regions.scores), in that order.
 * A new policy changes the first two (a new class table, a new limit) and
 * asks the last for something it cannot take (a prefill no machine has, a
 * setting fixed while the pool is live). The change must be refused naming
 * the last pool, and every pool found exactly as it was: class table, stats
 * (limit, class table version, counters), backend calls. The policy in
 * force is not touched either. The same document without the last pool's
 * problem is accepted and does change the first two pools, so the refusal
 * is what kept them.
 *
 * The failure sweep fails the Nth malloc/calloc made inside
 * aa_policy_change_prepare (once, and from N on) for every N until prepare
 * no longer reaches N, and checks the same after each run. This executable
 * is linked with -Wl,--wrap=malloc,--wrap=calloc (tests/CMakeLists.txt) so
 * that the allocator library's own calls come here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/policy.h"
#include "core_test.h" /* core: the host backend's call counts */

/* ------------------------------------------------------------ failing malloc */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t sz);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t sz);

static bool g_armed;       /* count (and maybe fail) the calls made now */
static uint64_t g_calls;   /* calls counted since armed */
static uint64_t g_fail_at; /* 0: none; else the call number that fails */
static bool g_fail_every;  /* ... and every later one */
static uint64_t g_failed;  /* calls failed since armed */

static bool fail_now(void) {
  if (!g_armed)
    return false;
  g_calls++;
  if (g_fail_at != 0 && (g_calls == g_fail_at || (g_fail_every && g_calls > g_fail_at))) {
    g_failed++;
    return true;
  }
  return false;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }

void *__wrap_calloc(size_t n, size_t sz) { return fail_now() ? NULL : __real_calloc(n, sz); }

static void arm(uint64_t at, bool every) {
  g_calls = 0;
  g_failed = 0;
  g_fail_at = at;
  g_fail_every = every;
  g_armed = true;
}

static void disarm(void) { g_armed = false; }

/* ------------------------------------------------------------ the pools */

/* The policy in force: kv with a limit, scores with 1 MiB blocks in 2 MiB
 * slabs (so a prefill of 2^20 of them asks for 1 TiB); the loop off. */
static const char CUR[] =
    "{\"name\":\"atomic\",\"adapt\":{\"enabled\":false,\"prefill_max_bytes\":4398046511104},\"pools\":{"
    "\"host\":{\"classes\":{\"min\":512,\"per_doubling\":1}},"
    "\"regions\":{"
    "\"kv\":{\"limit_bytes\":67108864},"
    "\"scores\":{\"slab_size\":2097152,\"max_small\":1048576,"
    "\"classes\":{\"min\":4096,\"per_doubling\":1}}}}}";

/* Changes host (two classes per doubling) and kv (limit), and asks scores
 * for a prefill of 2^20 blocks of 1 MiB. */
static const char NEXT_PREFILL[] =
    "{\"name\":\"atomic\",\"adapt\":{\"enabled\":false,\"prefill_max_bytes\":4398046511104},\"pools\":{"
    "\"host\":{\"classes\":{\"min\":512,\"per_doubling\":2}},"
    "\"regions\":{"
    "\"kv\":{\"limit_bytes\":134217728},"
    "\"scores\":{\"slab_size\":2097152,\"max_small\":1048576,"
    "\"classes\":[4096,65536,{\"size\":1048576,\"prefill\":1048576}]}}}}";

/* The same change with scores' slab_size changed (fixed while live). */
static const char NEXT_FIXED[] =
    "{\"name\":\"atomic\",\"adapt\":{\"enabled\":false,\"prefill_max_bytes\":4398046511104},\"pools\":{"
    "\"host\":{\"classes\":{\"min\":512,\"per_doubling\":2}},"
    "\"regions\":{"
    "\"kv\":{\"limit_bytes\":134217728},"
    "\"scores\":{\"slab_size\":4194304,\"max_small\":1048576,"
    "\"classes\":{\"min\":4096,\"per_doubling\":1}}}}}";

/* The same change with nothing wrong for scores (a smaller table). */
static const char NEXT_OK[] =
    "{\"name\":\"atomic\",\"adapt\":{\"enabled\":false,\"prefill_max_bytes\":4398046511104},\"pools\":{"
    "\"host\":{\"classes\":{\"min\":512,\"per_doubling\":2}},"
    "\"regions\":{"
    "\"kv\":{\"limit_bytes\":134217728},"
    "\"scores\":{\"slab_size\":2097152,\"max_small\":1048576,"
    "\"classes\":[4096,65536,1048576]}}}}";

enum { NPOOLS = 3,
       NBLK = 12 };

typedef struct pool_state {
  aa_class_spec cls[AA_MAX_CLASSES];
  size_t ncls;
  aa_pool_stats *st;
} pool_state;

typedef struct world {
  aa_backend *be;
  aa_policy *cur;
  char *cur_json; /* aa_policy_to_json(cur) at the start */
  aa_pool *pools[NPOOLS];
  void *blk[NPOOLS][NBLK];
  size_t sz[NBLK];
  pool_state before[NPOOLS];
  uint64_t be_allocs, be_frees, be_mapped;
} world;

static aa_policy *parse(const char *doc) {
  char err[AA_POLICY_ERR_CAP] = "";
  aa_policy *p = NULL;
  int rc = aa_policy_parse(doc, strlen(doc), &p, err, sizeof err);
  if (rc != AA_OK)
    print_error("parse: %s\n", err);
  assert_int_equal(rc, AA_OK);
  return p;
}

/* Makes a pool the way the runtime does: the section's settings, then its
 * classes through aa_policy_apply. */
static aa_pool *make_pool(world *w, const char *name, const char *region) {
  aa_pool_config cfg;
  char sec[48], sec_made[48];
  aa_pool *pool = NULL;
  int rc;

  aa_pool_config_init(&cfg);
  aa_policy_section_for(w->cur, "host", region, sec, sizeof sec);
  snprintf(sec_made, sizeof sec_made, "%s", sec);
  rc = aa_policy_pool_config(w->cur, sec, &cfg, NULL, 0, NULL);
  assert_true(rc == AA_OK || rc == AA_ERANGE);
  cfg.backend = w->be;
  cfg.name = name;
  cfg.region = region;
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  /* the section the pool finds is the one it was made from */
  assert_string_equal(aa_policy_pool_section(w->cur, pool, sec, sizeof sec), sec_made);
  assert_int_equal(aa_policy_apply(w->cur, sec, pool), AA_OK);
  return pool;
}

static void take_state(world *w, pool_state *s, aa_pool *pool) {
  s->st = calloc(1, sizeof *s->st);
  assert_non_null(s->st);
  assert_int_equal(aa_pool_classes(pool, s->cls, AA_MAX_CLASSES, &s->ncls, NULL), AA_OK);
  assert_int_equal(aa_pool_stats_get(pool, s->st), AA_OK);
  s->st->time_ns = 0;
  (void)w;
}

static void setup_world(world *w) {
  static const size_t sizes[NBLK] = {100, 512, 700, 3000, 4096, 5000,
                                     9000, 16384, 20000, 70000, 1u << 20, 3u << 20};
  memset(w, 0, sizeof *w);
  assert_int_equal(aa_backend_host_new(&w->be), AA_OK);
  w->cur = parse(CUR);
  aa_policy_set_version(w->cur, 1);
  w->cur_json = aa_policy_to_json(w->cur);
  assert_non_null(w->cur_json);
  w->pools[0] = make_pool(w, "host", NULL);
  w->pools[1] = make_pool(w, "host:kv", "kv");
  w->pools[2] = make_pool(w, "host:scores", "scores");
  /* live pools: blocks in use on the small and the large path */
  for (int p = 0; p < NPOOLS; p++) {
    for (int i = 0; i < NBLK; i++) {
      w->sz[i] = sizes[i];
      w->blk[p][i] = aa_alloc(w->pools[p], sizes[i], NULL);
      assert_non_null(w->blk[p][i]);
      memset(w->blk[p][i], 0x5a + p, sizes[i]);
    }
  }
  for (int p = 0; p < NPOOLS; p++)
    take_state(w, &w->before[p], w->pools[p]);
  aa_backend_host_counts(w->be, &w->be_allocs, &w->be_frees, &w->be_mapped);
}

static void teardown_world(world *w) {
  for (int p = 0; p < NPOOLS; p++) {
    for (int i = 0; i < NBLK; i++)
      assert_int_equal(aa_free(w->pools[p], w->blk[p][i], w->sz[i], NULL), AA_OK);
    aa_pool_destroy(w->pools[p]);
    free(w->before[p].st);
  }
  aa_policy_free(w->cur);
  free(w->cur_json);
  aa_backend_destroy(w->be);
}

/* Whether pool p is exactly as it was at the start; says what moved. */
static bool pool_same(world *w, int p, const char *when) {
  pool_state now;
  bool same = true;
  const pool_state *was = &w->before[p];

  take_state(w, &now, w->pools[p]);
  if (now.ncls != was->ncls || memcmp(now.cls, was->cls, now.ncls * sizeof now.cls[0]) != 0) {
    print_error("%s: pool %s: the class table changed (%zu classes, was %zu)\n", when,
                aa_pool_name(w->pools[p]), now.ncls, was->ncls);
    same = false;
  }
#define SAME(f)                                                            \
  if (now.st->f != was->st->f) {                                           \
    print_error("%s: pool %s: " #f " moved %llu -> %llu\n", when,          \
                aa_pool_name(w->pools[p]), (unsigned long long)was->st->f, \
                (unsigned long long)now.st->f);                            \
    same = false;                                                          \
  }
  SAME(limit_bytes)
  SAME(class_table_version)
  SAME(class_count)
  SAME(large_page_bytes)
  SAME(bytes_in_use)
  SAME(bytes_reserved)
  SAME(allocs)
  SAME(frees)
  SAME(backend_allocs)
  SAME(backend_frees)
#undef SAME
  /* and everything else the stats carry (time_ns zeroed in both) */
  if (same && memcmp(now.st, was->st, sizeof *now.st) != 0) {
    print_error("%s: pool %s: its stats changed\n", when, aa_pool_name(w->pools[p]));
    same = false;
  }
  free(now.st);
  for (int i = 0; i < NBLK; i++) {
    const unsigned char *b = w->blk[p][i];
    if (b[0] != (unsigned char)(0x5a + p) || b[w->sz[i] - 1] != (unsigned char)(0x5a + p)) {
      print_error("%s: pool %s: block %d overwritten\n", when, aa_pool_name(w->pools[p]), i);
      same = false;
    }
  }
  return same;
}

/* Every pool, the backend and the policy in force as at the start. */
static void assert_unchanged(world *w, const char *when) {
  uint64_t a = 0, f = 0, m = 0;
  char *json;
  bool same = true;

  for (int p = 0; p < NPOOLS; p++)
    same = pool_same(w, p, when) && same;
  aa_backend_host_counts(w->be, &a, &f, &m);
  if (a != w->be_allocs || f != w->be_frees || m != w->be_mapped) {
    print_error("%s: backend calls moved (allocs %llu -> %llu, frees %llu -> %llu)\n", when,
                (unsigned long long)w->be_allocs, (unsigned long long)a,
                (unsigned long long)w->be_frees, (unsigned long long)f);
    same = false;
  }
  json = aa_policy_to_json(w->cur);
  if (json == NULL || strcmp(json, w->cur_json) != 0 || aa_policy_version(w->cur) != 1) {
    print_error("%s: the policy in force changed\n", when);
    same = false;
  }
  free(json);
  assert_true(same);
}

/* Refused: rc, *out NULL, err naming the last pool; nothing changed. */
static void expect_refused(world *w, const char *doc, const char *want_err, int want_rc) {
  aa_policy *next = parse(doc);
  aa_policy_change *ch = (aa_policy_change *)w; /* not NULL: must be cleared */
  char err[512] = "";
  int rc = aa_policy_change_prepare(w->cur, next, w->pools, NPOOLS, &ch, err, sizeof err);
  assert_int_equal(rc, want_rc);
  assert_null(ch);
  if (strstr(err, want_err) == NULL || strstr(err, "host:scores") == NULL)
    print_error("err: %s\n", err);
  assert_non_null(strstr(err, want_err));
  assert_non_null(strstr(err, "host:scores"));
  assert_unchanged(w, want_err);
  aa_policy_free(next);
}

/* NEXT_OK is accepted and changes the first two pools: the refusals above
 * kept a change that would have happened. */
static void expect_ok_changes(world *w) {
  aa_policy *next = parse(NEXT_OK);
  aa_policy_change *ch = NULL;
  aa_class_spec cls[AA_MAX_CLASSES];
  size_t n = 0;
  char err[512] = "";
  aa_pool_stats *st = calloc(1, sizeof *st);

  assert_non_null(st);
  assert_int_equal(aa_policy_change_prepare(w->cur, next, w->pools, NPOOLS, &ch, err, sizeof err),
                   AA_OK);
  assert_non_null(ch);
  assert_unchanged(w, "prepared, not committed");
  aa_policy_change_commit(ch);
  assert_int_equal(aa_pool_classes(w->pools[0], cls, AA_MAX_CLASSES, &n, NULL), AA_OK);
  assert_true(n > w->before[0].ncls); /* two classes per doubling now */
  assert_int_equal(aa_pool_stats_get(w->pools[1], st), AA_OK);
  assert_int_equal(st->limit_bytes, 134217728);
  assert_int_equal(aa_pool_classes(w->pools[2], cls, AA_MAX_CLASSES, &n, NULL), AA_OK);
  assert_int_equal(n, 3);
  free(st);
  aa_policy_free(next);
}

static void test_adapt_policy_atomic_prefill_refused_late(void **state) {
  world w;
  (void)state;
  setup_world(&w);
  expect_refused(&w, NEXT_PREFILL, "pools.regions.scores.classes: the prefill asks for",
                 AA_EINVAL);
  expect_ok_changes(&w);
  teardown_world(&w);
}

static void test_adapt_policy_atomic_fixed_refused_late(void **state) {
  world w;
  (void)state;
  setup_world(&w);
  /* a setting fixed while the pool lives is a conflict with it (HTTP 409) */
  expect_refused(&w, NEXT_FIXED, "pools.regions.scores: slab_size is fixed", AA_ECONFLICT);
  expect_ok_changes(&w);
  teardown_world(&w);
}

/* A prepared change dropped with abort changes nothing and gives back the
 * class slots it held: preparing and dropping it far more often than there
 * are slots still succeeds. */
static void test_adapt_policy_atomic_abort_releases(void **state) {
  world w;
  aa_policy *next;
  (void)state;
  setup_world(&w);
  next = parse(NEXT_OK);
  for (int i = 0; i < 4 * AA_MAX_CLASSES; i++) {
    aa_policy_change *ch = NULL;
    char err[512] = "";
    int rc = aa_policy_change_prepare(w.cur, next, w.pools, NPOOLS, &ch, err, sizeof err);
    if (rc != AA_OK)
      print_error("round %d: %s\n", i, err);
    assert_int_equal(rc, AA_OK);
    aa_policy_change_abort(ch);
  }
  assert_unchanged(&w, "after aborts");
  aa_policy_free(next);
  expect_ok_changes(&w);
  teardown_world(&w);
}

/* Empty and bad arguments: refused, nothing changed. */
static void test_adapt_policy_atomic_bad_args(void **state) {
  world w;
  aa_policy_change *ch = NULL;
  char err[64];
  (void)state;
  setup_world(&w);
  assert_int_equal(aa_policy_change_prepare(w.cur, w.cur, w.pools, NPOOLS, NULL, err, sizeof err),
                   AA_EINVAL);
  assert_int_equal(aa_policy_change_prepare(w.cur, NULL, w.pools, NPOOLS, &ch, err, sizeof err),
                   AA_EINVAL);
  assert_null(ch);
  assert_int_equal(aa_policy_change_prepare(w.cur, w.cur, NULL, NPOOLS, &ch, err, sizeof err),
                   AA_EINVAL);
  assert_null(ch);
  aa_policy_change_commit(NULL);
  aa_policy_change_abort(NULL);
  assert_unchanged(&w, "bad arguments");
  teardown_world(&w);
}

/* Fails the Nth allocation inside prepare, for every N, once and from N on. */
static void sweep(bool every) {
  world w;
  aa_policy *next;
  int failures_seen = 0;
  uint64_t n;

  setup_world(&w);
  next = parse(NEXT_OK);
  for (n = 1; n < 10000; n++) {
    aa_policy_change *ch = (aa_policy_change *)&w;
    char err[512] = "";
    char when[64];
    int rc;

    arm(n, every);
    rc = aa_policy_change_prepare(w.cur, next, w.pools, NPOOLS, &ch, err, sizeof err);
    disarm();
    snprintf(when, sizeof when, "%s failure at allocation %llu", every ? "every" : "one",
             (unsigned long long)n);
    if (rc != AA_OK) {
      if (rc != AA_ENOMEM)
        print_error("%s: rc %d (%s)\n", when, rc, err);
      assert_int_equal(rc, AA_ENOMEM);
      assert_null(ch);
      failures_seen++;
    } else {
      assert_non_null(ch);
      aa_policy_change_abort(ch);
    }
    assert_unchanged(&w, when);
    if (g_failed == 0)
      break; /* prepare made fewer than n allocations: every one was tried */
  }
  assert_true(n < 10000);
  /* prepare allocates at least the change and one table per pool */
  assert_true(failures_seen >= NPOOLS + 1);
  aa_policy_free(next);
  expect_ok_changes(&w); /* and after all that, a change still goes through */
  teardown_world(&w);
}

static void test_adapt_policy_atomic_failsweep_once(void **state) {
  (void)state;
  sweep(false);
}

static void test_adapt_policy_atomic_failsweep_every(void **state) {
  (void)state;
  sweep(true);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adapt_policy_atomic_prefill_refused_late),
      cmocka_unit_test(test_adapt_policy_atomic_fixed_refused_late),
      cmocka_unit_test(test_adapt_policy_atomic_abort_releases),
      cmocka_unit_test(test_adapt_policy_atomic_bad_args),
      cmocka_unit_test(test_adapt_policy_atomic_failsweep_once),
      cmocka_unit_test(test_adapt_policy_atomic_failsweep_every),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
