/*
 * test_core_stitch.c — stitched ranges of the expandable large path
 * (aa_pool_config.large_stitch) on the host backend, whose map_alias shows
 * the same pages at a second address: a request no hole fits served from
 * holes' whole pages with no new memory; data written through the stitched
 * address read back through the lent one; the range kept and served again
 * with no backend call; dissolved on release; off by default; under a limit
 * a stitch before a failure; and a randomized shadow-model stress that
 * checks every block's bytes and the accounting.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "core_test.h" /* core: the host backend's test hooks */

#include "core_large_fixture.h"

#define PAGE (2 * MiB)

/* An expandable pool over an aliasable host backend, stitching with no
 * time budget (large_stitch_share 1): what these tests count must not hang
 * on how fast the machine maps (under TSan the 170 ranges of
 * retired_bounded_while_busy took past the 50 ms start and some were
 * deferred). The budget's own tests set a share and a clock. */
static fx *make_stitch_share(size_t limit, int stitch, double share) {
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.large_mode = AA_LARGE_EXPANDABLE;
  cfg.large_stitch = stitch;
  cfg.large_stitch_share = share;
  cfg.limit_bytes = limit;
  return make_cfg(&cfg, true);
}

static fx *make_stitch(size_t limit, int stitch) { return make_stitch_share(limit, stitch, 1.0); }

/* Three 6 MiB holes between live 3 MiB blocks (each hole holds two whole
 * pages), and the live blocks; `hole[i]` freed. */
typedef struct layout {
  char *hole[3], *keep[3];
} layout;

/* Three 6 MiB blocks between live 3 MiB ones, all on stream s ... */
static layout placed(fx *f, aa_stream s) {
  layout l;
  for (int i = 0; i < 3; i++) {
    l.hole[i] = aa_alloc(f->p, 6 * MiB, s);
    l.keep[i] = aa_alloc(f->p, 3 * MiB, s);
    assert_non_null(l.hole[i]);
    assert_non_null(l.keep[i]);
    memset(l.keep[i], 0x40 + i, 3 * MiB);
  }
  return l;
}

/* ... the 6 MiB ones freed: three holes */
static void free_holes(fx *f, const layout *l, aa_stream s) {
  for (int i = 0; i < 3; i++)
    assert_int_equal(aa_free(f->p, l->hole[i], 6 * MiB, s), AA_OK);
}

static layout holes_on(fx *f, aa_stream s) {
  layout l = placed(f, s);
  free_holes(f, &l, s);
  return l;
}

static layout holes(fx *f) { return holes_on(f, NULL); }

/* n holes of `hole` bytes between live blocks of `keep` bytes on stream s
 * (the live ones in kept[0..n-1], freed by the caller). */
static void holes_n(fx *f, int n, size_t hole, size_t keep, aa_stream s, char **kept) {
  char *h[128];
  assert_true(n <= 128);
  for (int i = 0; i < n; i++) {
    h[i] = aa_alloc(f->p, hole, s);
    kept[i] = aa_alloc(f->p, keep, s);
    assert_non_null(h[i]);
    assert_non_null(kept[i]);
  }
  for (int i = 0; i < n; i++)
    assert_int_equal(aa_free(f->p, h[i], hole, s), AA_OK);
}

static void free_keep_on(fx *f, layout *l, aa_stream s) {
  for (int i = 0; i < 3; i++) {
    const unsigned char *k = (const unsigned char *)l->keep[i];
    assert_int_equal(k[0], 0x40 + i); /* never touched by the stitching */
    assert_int_equal(k[3 * MiB - 1], 0x40 + i);
    assert_int_equal(aa_free(f->p, l->keep[i], 3 * MiB, s), AA_OK);
  }
}

static void free_keep(fx *f, layout *l) { free_keep_on(f, l, NULL); }

/* The backend's page maps and alias maps and unmaps so far. */
typedef struct calls {
  uint64_t maps, aliases, unaliases;
} calls;

static calls calls_now(fx *f) {
  calls c;
  uint64_t frees;
  aa_backend_host_counts(f->b, &c.maps, &frees, NULL);
  aa_backend_host_alias_counts(f->b, &c.aliases, &c.unaliases);
  return c;
}

static void assert_no_call_since(fx *f, calls then) {
  calls now = calls_now(f);
  assert_int_equal(now.maps, then.maps);
  assert_int_equal(now.aliases, then.aliases);
  assert_int_equal(now.unaliases, then.unaliases);
}

/* A 10 MiB request on stream s served by a stitched range from the holes,
 * then freed behind the kernel that uses it: s is busy (not yet run). */
static void stitched_freed_behind_kernel(fx *f, aa_stream s) {
  char *p = aa_alloc(f->p, 10 * MiB, s);
  assert_non_null(p);
  assert_int_equal(stats(f).large_stitches, 1);
  assert_int_equal(aa_backend_host_stream_busy(f->b, s, true), AA_OK);
  assert_int_equal(aa_free(f->p, p, 10 * MiB, s), AA_OK);
}

/* A release with nothing running: every alias made so far is undone. */
static void release_undoes_every_alias(fx *f) {
  (void)aa_pool_release(f->p);
  calls c = calls_now(f);
  assert_int_equal(c.unaliases, c.aliases);
}

typedef struct lent_walk {
  uintptr_t lent[16];
  size_t lent_size[16];
  int nlent, nstitched;
} lent_walk;

static int on_walk(void *user, const aa_walk_entry *e) {
  lent_walk *w = user;
  if (e->kind == AA_WALK_SEGMENT && (e->flags & AA_WALK_STITCHED))
    w->nstitched++;
  if (e->kind == AA_WALK_BLOCK && (e->flags & AA_WALK_LENT) && w->nlent < 16) {
    w->lent[w->nlent] = e->address;
    w->lent_size[w->nlent++] = e->size;
  }
  return 0;
}

/* A request no hole fits, served from the holes' pages: reserved does not
 * grow; what is written through the stitched address is what the lent
 * pages hold at theirs. */
static void test_core_stitch_serves_from_holes(void **state) {
  (void)state;
  fx *f = make_stitch(0, 1);
  layout l = holes(f);
  aa_pool_stats st = stats(f);
  uint64_t reserved = st.large_bytes_reserved;
  uint64_t maps0, frees0, mapped0, al0, unal0;
  aa_backend_host_counts(f->b, &maps0, &frees0, &mapped0);
  char *p = aa_alloc(f->p, 10 * MiB, NULL);
  assert_non_null(p);
  st = stats(f);
  assert_int_equal(st.large_bytes_reserved, reserved); /* no new memory */
  assert_int_equal(st.large_stitches, 1);
  assert_int_equal(st.large_stitched_ranges, 1);
  assert_true(st.large_stitched_bytes >= 10 * MiB);
  uint64_t maps1, frees1, mapped1;
  aa_backend_host_counts(f->b, &maps1, &frees1, &mapped1);
  assert_int_equal(maps1, maps0);
  assert_int_equal(mapped1, mapped0);
  aa_backend_host_alias_counts(f->b, &al0, &unal0);
  assert_int_equal(al0, st.large_alias_maps);
  assert_true(al0 >= 5);                                 /* 10 MiB of 2 MiB handles */
  assert_int_equal(aa_backend_host_alias_runs(f->b), 1); /* all of them in one call */
  assert_int_equal(st.large_alias_runs, 1);

  /* the bytes: every page of p is one of the lent blocks' pages, seen
   * through their own addresses (lent in the order the holes were taken) */
  for (size_t i = 0; i < 10 * MiB; i++)
    p[i] = (char)(i / PAGE + 1);
  lent_walk w;
  memset(&w, 0, sizeof w);
  assert_int_equal(aa_pool_walk_large(f->p, on_walk, &w), 0);
  assert_int_equal(w.nstitched, 1);
  assert_true(w.nlent >= 2);
  unsigned seen = 0;
  for (int k = 0; k < w.nlent; k++) {
    assert_int_equal(w.lent[k] % PAGE, 0);
    for (size_t pg = 0; pg < w.lent_size[k] / PAGE; pg++) {
      const char *o = (const char *)w.lent[k] + pg * PAGE;
      int v = o[0];
      if (v < 1 || v > 5)
        continue; /* past the 10 MiB written */
      for (size_t j = 0; j < PAGE; j += 4096)
        assert_int_equal(o[j], v);
      seen |= 1u << v;
    }
  }
  assert_int_equal(seen, 0x3Eu); /* pages 1..5 each found at a lent address */

  /* kept: the next request of that size takes it again, no backend call */
  assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
  char *q = aa_alloc(f->p, 10 * MiB, NULL);
  assert_ptr_equal(q, p);
  st = stats(f);
  /* (through this thread's large-block cache, or the range's reuse) */
  assert_true(st.large_stitch_hits <= 1);
  assert_int_equal(st.large_stitches, 1);
  uint64_t al1, unal1;
  aa_backend_host_alias_counts(f->b, &al1, &unal1);
  assert_int_equal(al1, al0);
  assert_int_equal(aa_free(f->p, q, 10 * MiB, NULL), AA_OK);

  /* released: the range is dissolved, its pages free in their holes again */
  (void)aa_pool_release(f->p);
  st = stats(f);
  assert_int_equal(st.large_stitched_ranges, 0);
  assert_int_equal(st.large_stitched_bytes, 0);
  assert_int_equal(st.large_stitch_dissolved, 1);
  aa_backend_host_alias_counts(f->b, &al1, &unal1);
  assert_int_equal(unal1, al1);
  free_keep(f, &l);
  assert_int_equal(stats(f).large_bytes_in_use, 0);
  fx_done(f);
}

/* large_stitch 2 (policy large.stitch_grow): a request that the holes'
 * whole pages leave short of a range gets the shortfall mapped as new pages
 * and a range of the holes and those pages, so reserved grows by the
 * shortfall, not by the request (with large_stitch 1 no range is made and
 * it grows by about the request). The range's bytes are the holes' and the
 * new pages' (written through it, the live blocks beside the holes keep
 * theirs); it serves the next request of its size with no backend call;
 * a release undoes every alias and gives the new pages back with the rest. */
static void test_core_stitch_grow(void **state) {
  (void)state;
  for (int grow = 0; grow < 2; grow++) {
    fx *f = make_stitch(0, grow ? 2 : 1);
    layout l = holes(f); /* at most 16 MiB of whole pages in holes */
    uint64_t r0 = stats(f).large_bytes_reserved;
    char *p = aa_alloc(f->p, 24 * MiB, NULL);
    assert_non_null(p);
    aa_pool_stats st = stats(f);
    uint64_t grew = st.large_bytes_reserved - r0;
    if (grow) {
      assert_int_equal(st.large_stitches, 1);
      assert_true(st.large_stitch_new_bytes >= 8 * MiB);  /* what the holes lack */
      assert_true(st.large_stitch_new_bytes <= 18 * MiB); /* the holes gave a quarter */
      assert_int_equal(grew, st.large_stitch_new_bytes);
      assert_true(st.large_alias_maps >= 12); /* 24 MiB of 2 MiB handles */
    } else {
      assert_int_equal(st.large_stitches, 0);
      assert_int_equal(st.large_stitch_new_bytes, 0);
      assert_true(grew >= 22 * MiB);
    }
    for (size_t i = 0; i < 24 * MiB; i += 4096)
      p[i] = (char)(i / PAGE + 1);
    for (size_t i = 0; i < 24 * MiB; i += 4096)
      assert_int_equal(p[i], (char)(i / PAGE + 1));
    assert_int_equal(aa_free(f->p, p, 24 * MiB, NULL), AA_OK);
    calls c = calls_now(f);
    char *q = aa_alloc(f->p, 24 * MiB, NULL);
    assert_ptr_equal(q, p);
    assert_no_call_since(f, c);
    assert_int_equal(aa_free(f->p, q, 24 * MiB, NULL), AA_OK);
    release_undoes_every_alias(f);
    free_keep(f, &l);
    st = stats(f);
    assert_int_equal(st.large_bytes_in_use, 0);
    assert_int_equal(st.large_stitched_ranges, 0);
    fx_done(f);
  }
}

/* With map runs, the free end's mapped start can lie in a run it shares
 * with the live block before it: plain growth uses those pages, a range
 * cannot (not whole handles). Stitching with new pages then never maps
 * more than plain growth would, and counts new bytes only for a range
 * made. */
static uint64_t grow_past_shared_run(int level, aa_pool_stats *out) {
  fx *f = make_full(AA_LARGE_EXPANDABLE, 0, 1, true, level);
  layout l = placed(f, NULL);
  char *big = aa_alloc(f->p, 30 * MiB, NULL); /* the free end, mapped */
  assert_non_null(big);
  assert_int_equal(aa_free(f->p, big, 30 * MiB, NULL), AA_OK);
  char *head = aa_alloc(f->p, 2 * MiB, NULL); /* at the free end's start */
  assert_non_null(head);
  free_holes(f, &l, NULL);
  uint64_t r0 = stats(f).large_bytes_reserved;
  char *p = aa_alloc(f->p, 40 * MiB, NULL);
  assert_non_null(p);
  memset(p, 0x33, 40 * MiB);
  *out = stats(f);
  uint64_t grew = out->large_bytes_reserved - r0;
  assert_int_equal(aa_free(f->p, p, 40 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, head, 2 * MiB, NULL), AA_OK);
  release_undoes_every_alias(f);
  free_keep(f, &l);
  assert_int_equal(stats(f).large_bytes_in_use, 0);
  fx_done(f);
  return grew;
}

static void test_core_stitch_grow_no_more_than_growth(void **state) {
  (void)state;
  aa_pool_stats st1, st2;
  uint64_t g1 = grow_past_shared_run(1, &st1);
  uint64_t g2 = grow_past_shared_run(2, &st2);
  assert_true(g2 <= g1);
  assert_int_equal(st1.large_stitch_new_bytes, 0);
  if (st2.large_stitches == 0)
    assert_int_equal(st2.large_stitch_new_bytes, 0);
  else
    assert_int_equal(g2, st2.large_stitch_new_bytes);
}

/* Stitching with new pages when a chunk record is refused at the free
 * end's cut (the first one asked for): nothing is mapped for a range, and
 * the request is served as plain growth would serve it (about its size,
 * not the whole free end); under a limit of many pages' handles (one a page)
 * a range that would join more than its bound of handles is not started
 * either. Either way new bytes are counted only for a range made. */
static void test_core_stitch_grow_refused(void **state) {
  (void)state;
  fx *f = make_stitch(512 * MiB, 2);
  layout l = holes(f);
  uint64_t r0 = stats(f).large_bytes_reserved;
  aa_test_chunk_fail_nth(1);
  char *p = aa_alloc(f->p, 24 * MiB, NULL);
  aa_test_chunk_fail_nth(0);
  assert_non_null(p);
  aa_pool_stats st = stats(f);
  assert_true(st.large_bytes_reserved - r0 <= 24 * MiB);
  if (st.large_stitches == 0)
    assert_int_equal(st.large_stitch_new_bytes, 0);
  assert_int_equal(aa_free(f->p, p, 24 * MiB, NULL), AA_OK);
  release_undoes_every_alias(f);
  free_keep(f, &l);
  fx_done(f);

  /* ten holes of 20 MiB between live blocks under a limit (pages map one
   * by one), then 800 MiB: the holes and the new pages would be more
   * handles than a range joins */
  f = make_stitch((size_t)4 << 30, 2);
  char *keep[10];
  holes_n(f, 10, 20 * MiB, 3 * MiB, NULL, keep);
  p = aa_alloc(f->p, 800 * MiB, NULL);
  assert_non_null(p);
  st = stats(f);
  if (st.large_stitches == 0)
    assert_int_equal(st.large_stitch_new_bytes, 0);
  assert_int_equal(aa_free(f->p, p, 800 * MiB, NULL), AA_OK);
  for (int i = 0; i < 10; i++)
    assert_int_equal(aa_free(f->p, keep[i], 3 * MiB, NULL), AA_OK);
  release_undoes_every_alias(f);
  assert_int_equal(stats(f).large_bytes_in_use, 0);
  fx_done(f);
}

/* The default host backend keeps its pages private: a forked child's
 * writes stay its own, and it offers no aliases, so a pool over it does not
 * stitch even when asked. */
static void test_core_stitch_default_host_private(void **state) {
  (void)state;
  fx *f = make_full(AA_LARGE_EXPANDABLE, 0, 0, false, 1);
  assert_null(f->b->ops->map_alias);
  char *p = aa_alloc(f->p, 4 * MiB, NULL);
  assert_non_null(p);
  memset(p, 1, 4 * MiB);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    memset(p, 2, 4 * MiB);
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_int_equal(p[0], 1);
  assert_int_equal(p[4 * MiB - 1], 1);
  assert_int_equal(aa_free(f->p, p, 4 * MiB, NULL), AA_OK);
  layout l = holes(f);
  assert_non_null(p = aa_alloc(f->p, 10 * MiB, NULL));
  assert_int_equal(stats(f).large_stitches, 0);
  assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
  free_keep(f, &l);
  /* and a backend that mapped already cannot become aliasable */
  assert_int_equal(aa_backend_host_aliasable(f->b), AA_EINVAL);
  fx_done(f);
}

/* Off by default: the same request maps new pages. */
/* Every byte of p[0..n) is v. */
static void check_bytes(const char *p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i += 4096)
    assert_int_equal((unsigned char)p[i], v);
  assert_int_equal((unsigned char)p[n - 1], v);
}

/* A clock for the time budget: each read moves it by g_tick, and the test
 * moves it by hand too. */
static uint64_t g_now, g_tick;
static uint64_t fake_clock(void *user) {
  (void)user;
  g_now += g_tick;
  return g_now;
}

/* Stitching's time budget (large_stitch_share): alias calls that take
 * longer than the burst leave the next new range unmade, so the request
 * grows the pool, while the range already made still serves with no call;
 * time passing refills the budget and ranges are made again. With no bound
 * (share 1) the same requests are all stitched. */
static void budget_run(double share) {
  fx *f = make_stitch_share(0, 1, share);
  g_now = (uint64_t)1 << 40;
  g_tick = 60 * 1000 * 1000; /* every read 60 ms later: a range's map calls "take" 60 ms */
  aa_pool_set_clock(f->p, fake_clock, NULL);
  layout l = holes(f);
  uint64_t reserved = stats(f).large_bytes_reserved;
  char *p = aa_alloc(f->p, 10 * MiB, NULL);
  assert_non_null(p);
  aa_pool_stats st = stats(f);
  assert_int_equal(st.large_stitches, 1);
  assert_int_equal(st.large_bytes_reserved, reserved);
  assert_int_equal(st.large_alias_ns, 60 * 1000 * 1000); /* one map_alias_run, timed */
  assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
  g_tick = 0;
  /* the kept range serves again, budget or not: no call */
  calls then = calls_now(f);
  p = aa_alloc(f->p, 10 * MiB, NULL);
  assert_non_null(p);
  assert_no_call_since(f, then);
  assert_int_equal(stats(f).large_stitch_hits, 1);
  memset(p, 0x31, 10 * MiB);
  assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
  /* 7 MiB: a new range (the kept one is too large for it), over the budget
   * (60 ms spent against 50, 1% of 120 ms back): the pool grows instead */
  char *q = aa_alloc(f->p, 7 * MiB, NULL);
  assert_non_null(q);
  memset(q, 0x32, 7 * MiB);
  st = stats(f);
  if (share < 1.0) {
    assert_int_equal(st.large_stitch_deferred, 1);
    assert_int_equal(st.large_stitches, 1);
    assert_true(st.large_bytes_reserved > reserved); /* grown for it */
  } else {
    assert_int_equal(st.large_stitch_deferred, 0);
    assert_int_equal(st.large_stitches, 2);
    assert_int_equal(st.large_bytes_reserved, reserved);
  }
  /* a second later (1% of it: 10 ms back) a new range is made again: 12
   * MiB from the six whole pages of the holes (with no bound, q's range
   * holds four of them and 12 MiB grows the pool) */
  g_now += (uint64_t)1000 * 1000 * 1000;
  char *r = aa_alloc(f->p, 12 * MiB, NULL);
  assert_non_null(r);
  st = stats(f);
  assert_int_equal(st.large_stitches, 2);
  assert_int_equal(st.large_stitch_deferred, share < 1.0 ? 1 : 0);
  memset(r, 0x33, 12 * MiB);
  check_bytes(q, 7 * MiB, 0x32);
  check_bytes(r, 12 * MiB, 0x33);
  assert_int_equal(aa_free(f->p, q, 7 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, r, 12 * MiB, NULL), AA_OK);
  free_keep(f, &l);
  /* undoing the aliases is timed too (and never refused) */
  uint64_t spent = stats(f).large_alias_ns;
  g_tick = 1000 * 1000;
  release_undoes_every_alias(f);
  assert_true(stats(f).large_alias_ns > spent);
  fx_done(f);
}

static void test_core_stitch_time_budget(void **state) {
  (void)state;
  /* a share out of (0, 1] (0: the default) is refused, nothing made */
  static const double bad[] = {-0.01, 1.5, NAN};
  aa_backend *b = NULL;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    aa_pool_config cfg;
    aa_pool *p = NULL;
    aa_pool_config_init(&cfg);
    cfg.backend = b;
    cfg.large_mode = AA_LARGE_EXPANDABLE;
    cfg.large_stitch = 1;
    cfg.large_stitch_share = bad[i];
    assert_int_equal(aa_pool_new(&cfg, &p), AA_EINVAL);
    assert_null(p);
  }
  aa_backend_destroy(b);
  budget_run(AA_DEFAULT_STITCH_SHARE);
  budget_run(1.0); /* no bound: every range made */
}

static void test_core_stitch_off_by_default(void **state) {
  (void)state;
  fx *f = make_stitch(0, 0);
  layout l = holes(f);
  uint64_t reserved = stats(f).large_bytes_reserved;
  char *p = aa_alloc(f->p, 10 * MiB, NULL);
  assert_non_null(p);
  aa_pool_stats st = stats(f);
  assert_true(st.large_bytes_reserved > reserved);
  assert_int_equal(st.large_stitches, 0);
  assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
  free_keep(f, &l);
  fx_done(f);
}

/* A free range whose pages a different request needs is retired (its
 * pages free for a new range, its aliases kept), and the request is served
 * from the merged holes (or a new stitch). */
static void test_core_stitch_dissolved_for_another_size(void **state) {
  (void)state;
  fx *f = make_stitch(0, 1);
  layout l = holes(f);
  uint64_t reserved = stats(f).large_bytes_reserved;
  char *p = aa_alloc(f->p, 10 * MiB, NULL);
  assert_non_null(p);
  assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
  /* 7 MiB: the free range is too large for it (a range serves down to
   * 7/8 of its size), no hole fits it, the pages not lent are too few for a
   * stitch: the range goes back to its holes, retired, and a new one
   * serves it */
  char *r = aa_alloc(f->p, 7 * MiB, NULL);
  assert_non_null(r);
  aa_pool_stats st = stats(f);
  assert_int_equal(st.large_bytes_reserved, reserved);
  assert_int_equal(st.large_stitch_dissolved, 0);
  assert_int_equal(st.large_stitch_dormant, 1);
  assert_int_equal(st.large_stitches, 2);
  assert_int_equal(st.large_stitched_ranges, 1);
  memset(r, 0x77, 7 * MiB);
  assert_int_equal(aa_free(f->p, r, 7 * MiB, NULL), AA_OK);
  free_keep(f, &l);
  fx_done(f);
}

/* A range takes no pages of a free end the request does not grow into:
 * the small requests' region's free end (requests of at most 1 MiB) holds
 * two mapped pages that its next requests need, the large region's free
 * end mapped pages of its own. An 18 MiB request that no chunk fits is
 * stitched from the three holes' whole pages (16 MiB) and the large free
 * end's page, the end it would grow into; the small requests then find
 * their region's pages and nothing is mapped. Before, the range took a
 * page of the small region's end (the smaller free chunk first), and the
 * small requests mapped a new one: reserved grew by 2 MiB (the replay's
 * kvgen trace: 458 MiB against 456 without stitching). */
static void test_core_stitch_other_free_end(void **state) {
  (void)state;
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.max_small = 16 * 1024; /* 1 MiB requests: the large path's small region */
  cfg.large_mode = AA_LARGE_EXPANDABLE;
  cfg.large_stitch = 1;
  fx *f = make_cfg(&cfg, true);
  char *s[7];
  for (int i = 0; i < 5; i++) { /* pages 0-2 of the small region */
    s[i] = aa_alloc(f->p, 1 * MiB, NULL);
    assert_non_null(s[i]);
  }
  for (int i = 1; i < 5; i++) /* its free end: pages 1 and 2 whole */
    assert_int_equal(aa_free(f->p, s[i], 1 * MiB, NULL), AA_OK);
  /* holes()'s, and 8 MiB after them: the large free end's mapped pages */
  layout l = placed(f, NULL);
  char *end = aa_alloc(f->p, 8 * MiB, NULL);
  assert_ptr_equal(end, l.keep[2] + 3 * MiB);
  free_holes(f, &l, NULL);
  assert_int_equal(aa_free(f->p, end, 8 * MiB, NULL), AA_OK);
  aa_pool_stats st = stats(f);
  uint64_t reserved = st.large_bytes_reserved;
  char *p = aa_alloc(f->p, 18 * MiB, NULL);
  assert_non_null(p);
  st = stats(f);
  assert_int_equal(st.large_stitches, 1);
  assert_int_equal(st.large_bytes_reserved, reserved);
  /* six: its own pages' 5 MiB and, between live large blocks, the holes'
   * 1 MiB ends the range left (find_fit_other) */
  for (int i = 1; i < 7; i++) {
    s[i] = aa_alloc(f->p, 1 * MiB, NULL);
    assert_non_null(s[i]);
    memset(s[i], 0x20 + i, 1 * MiB);
  }
  assert_int_equal(stats(f).large_bytes_reserved, reserved);
  memset(p, 0x55, 18 * MiB);
  for (int i = 1; i < 7; i++) {
    const unsigned char *x = (const unsigned char *)s[i];
    assert_int_equal(x[0], 0x20 + i);
    assert_int_equal(x[1 * MiB - 1], 0x20 + i);
  }
  assert_int_equal(aa_free(f->p, p, 18 * MiB, NULL), AA_OK);
  for (int i = 0; i < 7; i++)
    assert_int_equal(aa_free(f->p, s[i], 1 * MiB, NULL), AA_OK);
  free_keep(f, &l);
  fx_done(f);
}

/* A loop whose early phase fills the holes and whose peak needs the
 * stitched range: from the second step on the range sleeps and wakes with
 * no backend call, and reserved stays where the first step left it. */
static void test_core_stitch_loop_no_calls(void **state) {
  (void)state;
  fx *f = make_stitch(0, 1);
  layout l = holes(f);
  uint64_t reserved = stats(f).large_bytes_reserved;
  calls then = {0, 0, 0};
  for (int step = 0; step < 6; step++) {
    char *a[3];
    for (int i = 0; i < 3; i++) { /* the early phase: into the holes */
      a[i] = aa_alloc(f->p, 6 * MiB, NULL);
      assert_non_null(a[i]);
      memset(a[i], 0x10 + i, 6 * MiB);
    }
    for (int i = 0; i < 3; i++) {
      const unsigned char *x = (const unsigned char *)a[i];
      assert_int_equal(x[0], 0x10 + i);
      assert_int_equal(x[6 * MiB - 1], 0x10 + i);
      assert_int_equal(aa_free(f->p, a[i], 6 * MiB, NULL), AA_OK);
    }
    char *p = aa_alloc(f->p, 10 * MiB, NULL); /* the peak */
    assert_non_null(p);
    memset(p, 0x99, 10 * MiB);
    assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
    assert_int_equal(stats(f).large_bytes_reserved, reserved);
    if (step == 1) {
      then = calls_now(f);
    }
  }
  assert_no_call_since(f, then);
  aa_pool_stats st = stats(f);
  assert_int_equal(st.large_stitches, 1);
  assert_true(st.large_stitch_wakes >= 4);
  assert_true(st.large_stitch_rests >= 4);
  free_keep(f, &l);
  fx_done(f);
}

/* A loop of two phases whose peaks need stitched ranges of different
 * sizes from the same holes (the replay's phases trace: 512 MiB and
 * 128 MiB requests in turn): both ranges are kept, one dormant while the
 * other serves, though they alias the same pages. From the second step on
 * each request is served by the range the first step made, woken with no
 * backend call, and reserved stays where the first step left it. Before,
 * a handle was aliased by one range at most: each phase's new range needed
 * the dormant one's pages, so the dormant range was destroyed and the
 * other made again, every step. */
static void test_core_stitch_two_sizes_kept(void **state) {
  (void)state;
  fx *f = make_stitch(0, 1);
  layout l = holes(f);
  uint64_t reserved = stats(f).large_bytes_reserved;
  calls then = {0, 0, 0};
  const size_t size[2] = {10 * MiB, 7 * MiB};
  char *first[2] = {NULL, NULL};
  for (int step = 0; step < 6; step++) {
    for (int k = 0; k < 2; k++) {
      char *p = aa_alloc(f->p, size[k], NULL);
      assert_non_null(p);
      if (step == 0)
        first[k] = p;
      else
        assert_ptr_equal(p, first[k]); /* the same range */
      memset(p, 0x60 + k, size[k]);
      assert_int_equal(p[size[k] - 1], 0x60 + k);
      assert_int_equal(aa_free(f->p, p, size[k], NULL), AA_OK);
      assert_int_equal(stats(f).large_bytes_reserved, reserved);
    }
    if (step == 0) {
      then = calls_now(f);
    }
  }
  assert_no_call_since(f, then);
  aa_pool_stats st = stats(f);
  assert_int_equal(st.large_stitches, 2);
  assert_int_equal(st.large_stitch_dissolved, 0);
  assert_true(st.large_stitch_hits >= 10);
  assert_true(st.large_stitch_wakes >= 10);
  free_keep(f, &l);
  (void)aa_pool_release(f->p); /* both ranges undone */
  calls end = calls_now(f);
  assert_int_equal(end.unaliases, end.aliases);
  fx_done(f);
}

/* A stitched block freed by another thread (the locked path: the range is
 * kept, free): the account's holes include the range's free bytes once, and
 * its figures add up to what is reserved (AA_DEBUG 3 checks the free bytes
 * against a walk). */
typedef struct free_arg {
  fx *f;
  char *p;
  size_t n;
} free_arg;

static void *free_other(void *a) {
  free_arg *x = a;
  assert_int_equal(aa_free(x->f->p, x->p, x->n, NULL), AA_OK);
  return NULL;
}

static void test_core_stitch_account_free_range(void **state) {
  (void)state;
  fx *f = make_stitch(0, 1);
  layout l = holes(f);
  char *p = aa_alloc(f->p, 10 * MiB, NULL);
  assert_non_null(p);
  free_arg arg = {f, p, 10 * MiB};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, free_other, &arg), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  aa_pool_stats st = stats(f);
  assert_int_equal(st.large_stitched_ranges, 1);
  aa_pool_account a;
  memset(&a, 0, sizeof a);
  a.version = AA_ACCOUNT_VERSION;
  a.size = sizeof a;
  assert_int_equal(aa_pool_account_get(f->p, &a), AA_OK);
  /* large: reserved = live + holes (no stream holds, nothing held) */
  assert_int_equal(a.stream_holds, 0);
  assert_true(a.holes >= st.large_stitched_bytes);
  assert_int_equal(st.large_bytes_in_use + a.holes, st.large_bytes_reserved);
  free_keep(f, &l);
  fx_done(f);
}

/* The pool destroyed with a live stitched block that has a record_stream'd
 * stream: nothing leaks (LeakSanitizer in the ASan build), every mapping
 * goes back. */
static void test_core_stitch_destroy_live_recorded(void **state) {
  (void)state;
  fx *f = make_stitch(0, 1);
  layout l = holes(f);
  char *p = aa_alloc(f->p, 10 * MiB, NULL);
  assert_non_null(p);
  assert_int_equal(stats(f).large_stitches, 1);
  assert_int_equal(aa_record_stream(f->p, p, (aa_stream)0x10), AA_OK);
  (void)l;
  aa_pool_destroy(f->p);
  uint64_t al, unal;
  aa_backend_host_alias_counts(f->b, &al, &unal);
  assert_int_equal(al, unal);
  aa_backend_destroy(f->b);
  pthread_mutex_destroy(&f->mu);
  free(f);
}

/* A second free of a block whose pages a stitched range now maps is a
 * double free (not "a pointer inside a block"), and changes nothing. */
static void test_core_stitch_double_free_lent(void **state) {
  (void)state;
  fx *f = make_stitch(0, 1);
  layout l = holes(f);
  char *p = aa_alloc(f->p, 10 * MiB, NULL);
  assert_non_null(p);
  lent_walk w;
  memset(&w, 0, sizeof w);
  assert_int_equal(aa_pool_walk_large(f->p, on_walk, &w), 0);
  int hit = -1;
  for (int i = 0; i < 3; i++) {
    for (int k = 0; k < w.nlent; k++) {
      if ((uintptr_t)l.hole[i] == w.lent[k])
        hit = i;
    }
  }
  assert_true(hit >= 0);
  assert_int_equal(aa_free(f->p, l.hole[hit], 6 * MiB, NULL), AA_EINVAL);
  assert_int_equal(f->misuses, 1);
  assert_int_equal(f->last, AA_MISUSE_DOUBLE_FREE);
  memset(p, 0x31, 10 * MiB); /* still the caller's, whole */
  assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
  free_keep(f, &l);
  fx_done(f);
}

/* Holes freed on one stream serve a stitched range for a request on
 * another only once that stream's work is done: while it is busy the pool
 * grows instead (no page that a kernel may still read is handed out), once
 * it is idle the holes are stitched. */
static void test_core_stitch_other_stream(void **state) {
  (void)state;
  const aa_stream sa = (aa_stream)0x10, sb = (aa_stream)0x20;
  for (int busy = 1; busy >= 0; busy--) {
    fx *f = make_stitch(0, 1);
    char *hole[3], *keep[3];
    for (int i = 0; i < 3; i++) {
      hole[i] = aa_alloc(f->p, 6 * MiB, sa);
      keep[i] = aa_alloc(f->p, 3 * MiB, sa);
      assert_non_null(hole[i]);
      assert_non_null(keep[i]);
    }
    assert_int_equal(aa_backend_host_stream_busy(f->b, sa, busy != 0), AA_OK);
    for (int i = 0; i < 3; i++)
      assert_int_equal(aa_free(f->p, hole[i], 6 * MiB, sa), AA_OK);
    uint64_t reserved = stats(f).large_bytes_reserved;
    char *p = aa_alloc(f->p, 10 * MiB, sb);
    assert_non_null(p);
    aa_pool_stats st = stats(f);
    if (busy) {
      assert_int_equal(st.large_stitches, 0);
      assert_true(st.large_bytes_reserved > reserved);
    } else {
      assert_int_equal(st.large_stitches, 1);
      assert_int_equal(st.large_bytes_reserved, reserved);
    }
    assert_int_equal(aa_backend_host_stream_busy(f->b, sa, false), AA_OK);
    assert_int_equal(aa_free(f->p, p, 10 * MiB, sb), AA_OK);
    for (int i = 0; i < 3; i++)
      assert_int_equal(aa_free(f->p, keep[i], 3 * MiB, sa), AA_OK);
    fx_done(f);
  }
}

/* A range's aliases are undone only once no work may still use its
 * address: a release while the stream it was freed on is busy keeps it;
 * once that stream is idle the release undoes it. */
static void test_core_stitch_release_waits_for_stream(void **state) {
  (void)state;
  const aa_stream sa = (aa_stream)0x10;
  fx *f = make_stitch(0, 1);
  layout l = holes(f);
  stitched_freed_behind_kernel(f, sa);
  (void)aa_pool_release(f->p);
  uint64_t al, unal;
  aa_backend_host_alias_counts(f->b, &al, &unal);
  assert_int_equal(unal, 0); /* a kernel on sa may still read it */
  assert_int_equal(stats(f).large_stitched_ranges + stats(f).large_stitch_dormant, 1);
  assert_int_equal(aa_backend_host_stream_busy(f->b, sa, false), AA_OK);
  release_undoes_every_alias(f);
  assert_int_equal(stats(f).large_stitched_ranges + stats(f).large_stitch_dormant, 0);
  free_keep(f, &l);
  fx_done(f);
}

/* A GPU runs behind the host: when a request needs a dormant range's pages
 * for a new range, the stream that used the range has long finished that
 * work but is busy with later work. The range is retired and the request
 * stitched from its pages with no new memory: its address was known idle
 * from an event recorded when its block was freed, not from one recorded
 * only now, behind the later work (which left every such range standing on
 * the GPU and mapped new pages: the replay's --event-delay-us 1000 showed
 * phases 4,190 -> 3,854 MiB, offload 1,696 -> 1,724, serve 804 -> 912, as
 * the H100 did). */
static void test_core_stitch_retired_while_stream_runs_ahead(void **state) {
  (void)state;
  const aa_stream sa = (aa_stream)0x10;
  fx *f = make_stitch(0, 1);
  layout l = holes_on(f, sa);
  uint64_t reserved = stats(f).large_bytes_reserved;
  stitched_freed_behind_kernel(f, sa);
  /* it ran; the host has queued later work on sa since */
  assert_int_equal(aa_backend_host_stream_busy(f->b, sa, false), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(f->b, sa, true), AA_OK);
  /* 7 MiB: too small for the range, no hole fits, the pages not lent too
   * few: the range retires, its pages serve a new one */
  char *r = aa_alloc(f->p, 7 * MiB, sa);
  assert_non_null(r);
  aa_pool_stats st = stats(f);
  assert_int_equal(st.large_stitch_dormant, 1);
  assert_int_equal(st.large_stitches, 2);
  assert_int_equal(st.large_bytes_reserved, reserved);
  assert_int_equal(aa_backend_host_stream_busy(f->b, sa, false), AA_OK);
  assert_int_equal(aa_free(f->p, r, 7 * MiB, sa), AA_OK);
  free_keep_on(f, &l, sa);
  fx_done(f);
}

/* A GPU runs further behind the host: the kernel that used a dormant range
 * has not run yet when a request on the same stream needs the range's pages
 * for a new range. The range retires all the same (its parts are chunks
 * freed on that stream, which a request there may take at once) and the
 * request is stitched with no new memory; only its aliases wait: a release
 * while the stream is busy keeps them, one after it is idle undoes them.
 * Before, a range retired only once its address was idle, and the pool
 * mapped new pages (the replay's H100 traces at --event-delay-us 5000:
 * offload 1,724 MiB against 1,616 with no delay, sidepipe 1,244 against
 * 974; 1,616 and 1,088 with the rule). */
static void test_core_stitch_retired_while_range_busy(void **state) {
  (void)state;
  const aa_stream sa = (aa_stream)0x10;
  fx *f = make_stitch(0, 1);
  layout l = holes_on(f, sa);
  uint64_t reserved = stats(f).large_bytes_reserved;
  stitched_freed_behind_kernel(f, sa);
  char *r = aa_alloc(f->p, 7 * MiB, sa);
  assert_non_null(r);
  aa_pool_stats st = stats(f);
  assert_int_equal(st.large_stitches, 2);
  assert_int_equal(st.large_stitch_dormant, 1);
  assert_int_equal(st.large_bytes_reserved, reserved);
  memset(r, 0x5C, 7 * MiB);
  assert_int_equal(aa_free(f->p, r, 7 * MiB, sa), AA_OK);
  uint64_t al, unal;
  (void)aa_pool_release(f->p);
  aa_backend_host_alias_counts(f->b, &al, &unal);
  assert_int_equal(unal, 0); /* a kernel on sa may still use either address */
  assert_int_equal(aa_backend_host_stream_busy(f->b, sa, false), AA_OK);
  release_undoes_every_alias(f);
  st = stats(f);
  assert_int_equal(st.large_stitched_ranges + st.large_stitch_dormant, 0);
  free_keep_on(f, &l, sa);
  fx_done(f);
}

/* The GPU far behind the host: every range a loop of growing requests on
 * one stream stitches is still in use by its kernel when the next request
 * needs its pages. A dormant range retires while its address is busy, but
 * the retired ones stay bounded (AA__STITCH_RETIRED, 128, beside at most
 * AA__STITCH_MAX, 16, not retired): at the bound a busy range stays dormant
 * (its pages held) and the request maps new pages, as before the rule.
 * Before, every request retired the last range and stitched a new one, the
 * retired ones kept with their aliases and address space until the stream
 * went idle (170 requests: 170 ranges). */
static void test_core_stitch_retired_bounded_while_busy(void **state) {
  (void)state;
  const aa_stream sa = (aa_stream)0x10;
  const int nh = 96, nreq = 170;
  fx *f = make_stitch(0, 1);
  char *keep[96];
  holes_n(f, nh, 6 * MiB, 3 * MiB, sa, keep); /* 96 holes of two whole pages each */
  /* the kernels queued from here on have not run */
  assert_int_equal(aa_backend_host_stream_busy(f->b, sa, true), AA_OK);
  for (int k = 0; k < nreq; k++) {
    size_t n = (size_t)(8 + 2 * k) * MiB;
    char *p = aa_alloc(f->p, n, sa);
    assert_non_null(p);
    assert_int_equal(aa_free(f->p, p, n, sa), AA_OK);
    aa_pool_stats st = stats(f);
    assert_true(st.large_stitched_ranges + st.large_stitch_dormant <= 16 + 128);
  }
  assert_true(stats(f).large_stitches > 128); /* busy ones retired up to the bound */
  assert_int_equal(aa_backend_host_stream_busy(f->b, sa, false), AA_OK);
  release_undoes_every_alias(f);
  for (int i = 0; i < nh; i++)
    assert_int_equal(aa_free(f->p, keep[i], 3 * MiB, sa), AA_OK);
  fx_done(f);
}

/* A retired range that a request would revive (a new range of exactly its
 * handles), when a cut of one of its parts out of its hole finds memory
 * short (the `fail`th chunk record refused; 0: none): the request is
 * served otherwise, with no alias call; the range, whose address the
 * stream may still use (`busy`), is retired again, its aliases kept, and
 * revives at the next such request; idle, it is destroyed. Either way the
 * counts stay whole: the release once the stream is idle undoes every
 * alias (and AA_DEBUG 3 walks the structures after each call). */
static void revive_short(int fail, bool busy) {
  const aa_stream sa = (aa_stream)0x10;
  fx *f = make_stitch(0, 1);
  layout l = holes_on(f, sa);
  char *p = aa_alloc(f->p, 10 * MiB, sa); /* range 1 */
  assert_non_null(p);
  if (busy)
    assert_int_equal(aa_backend_host_stream_busy(f->b, sa, true), AA_OK);
  assert_int_equal(aa_free(f->p, p, 10 * MiB, sa), AA_OK);
  char *r = aa_alloc(f->p, 7 * MiB, sa); /* range 1 retires, range 2 from its pages */
  assert_non_null(r);
  assert_int_equal(aa_free(f->p, r, 7 * MiB, sa), AA_OK);
  aa_pool_stats st = stats(f);
  assert_int_equal(st.large_stitches, 2);
  uint64_t reserved = st.large_bytes_reserved, wakes = st.large_stitch_wakes;
  calls c0 = calls_now(f);
  /* range 2 retires too; range 1's handles are free: it revives */
  aa_test_chunk_fail_nth((uint64_t)fail);
  char *q = aa_alloc(f->p, 10 * MiB, sa);
  aa_test_chunk_fail_nth(0);
  assert_non_null(q);
  st = stats(f);
  calls c1 = calls_now(f);
  assert_int_equal(c1.aliases, c0.aliases); /* no new range either way */
  if (fail == 0) {
    assert_ptr_equal(q, p);
    assert_int_equal(st.large_stitch_wakes, wakes + 1);
    assert_int_equal(st.large_bytes_reserved, reserved);
  } else {
    assert_true(q != p);
    assert_int_equal(st.large_stitch_wakes, wakes);
    assert_int_equal(st.large_stitched_ranges + st.large_stitch_dormant, busy ? 2 : 1);
    assert_int_equal(c1.unaliases, busy ? c0.unaliases : c0.unaliases + 5);
  }
  memset(q, 0x3C, 10 * MiB);
  if (fail != 0 && busy) { /* retired again as it was: it revives now */
    char *q2 = aa_alloc(f->p, 10 * MiB, sa);
    assert_ptr_equal(q2, p);
    assert_int_equal(stats(f).large_stitch_wakes, wakes + 1);
    assert_int_equal(aa_free(f->p, q2, 10 * MiB, sa), AA_OK);
  }
  assert_int_equal(aa_free(f->p, q, 10 * MiB, sa), AA_OK);
  if (busy)
    assert_int_equal(aa_backend_host_stream_busy(f->b, sa, false), AA_OK);
  release_undoes_every_alias(f);
  st = stats(f);
  assert_int_equal(st.large_stitched_ranges + st.large_stitch_dormant, 0);
  free_keep_on(f, &l, sa);
  fx_done(f);
}

static void test_core_stitch_revive_memory_short(void **state) {
  (void)state;
  for (int busy = 0; busy < 2; busy++) {
    for (int fail = 0; fail <= 3; fail++)
      revive_short(fail, busy != 0);
  }
}

/* Under a limit that the request would pass by mapping new pages: the
 * stitched range serves it. */
static void test_core_stitch_under_limit(void **state) {
  (void)state;
  fx *f = make_stitch(40 * MiB, 1);
  layout l = holes(f);
  char *p = aa_alloc(f->p, 10 * MiB, NULL);
  assert_non_null(p);
  aa_pool_stats st = stats(f);
  assert_true(st.bytes_reserved <= 40 * MiB);
  memset(p, 0x5A, 10 * MiB);
  assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
  free_keep(f, &l);
  fx_done(f);
}

/* The backend fails an alias in the middle of a new range's handles (the
 * fail-th map call from the request on), in one map_alias_run call or,
 * `per_handle`, in the pool's own map_alias calls: none of the range stays
 * mapped, no range is made, and the request is served by new pages
 * instead; the holes and the live blocks are untouched, and the next
 * request of that size stitches. */
static void alias_fails_midway(uint64_t fail, bool per_handle) {
  fx *f = make_stitch(0, 1);
  if (per_handle)
    assert_int_equal(aa_backend_host_alias_per_handle(f->b), AA_OK);
  layout l = holes(f);
  uint64_t reserved = stats(f).large_bytes_reserved;
  aa_backend_host_fail_nth(f->b, fail, false);
  char *p = aa_alloc(f->p, 10 * MiB, NULL);
  aa_backend_host_fail_nth(f->b, 0, false);
  assert_non_null(p);
  aa_pool_stats st = stats(f);
  assert_int_equal(st.large_stitches, 0);
  assert_int_equal(st.large_stitched_ranges, 0);
  /* handles mapped before the failure, and undone: counted by the pool
   * only where it made the calls itself */
  assert_int_equal(st.large_alias_maps, per_handle ? fail - 1 : 0);
  assert_int_equal(st.large_alias_unmaps, st.large_alias_maps);
  assert_int_equal(st.large_alias_runs, 0);
  assert_true(st.large_bytes_reserved > reserved); /* new pages */
  calls c = calls_now(f);
  assert_int_equal(c.aliases, fail - 1);    /* the failed run mapped those first */
  assert_int_equal(c.unaliases, c.aliases); /* and undid them */
  assert_int_equal(aa_backend_host_alias_runs(f->b), 0);
  memset(p, 0x6B, 10 * MiB);
  char *q = aa_alloc(f->p, 10 * MiB, NULL); /* the holes: stitched now */
  assert_non_null(q);
  st = stats(f);
  assert_int_equal(st.large_stitches, 1);
  assert_int_equal(st.large_alias_runs, per_handle ? 0 : 1);
  assert_int_equal(aa_backend_host_alias_runs(f->b), per_handle ? 0 : 1);
  memset(q, 0x6C, 10 * MiB);
  assert_int_equal(((unsigned char *)p)[10 * MiB - 1], 0x6B);
  assert_int_equal(aa_free(f->p, q, 10 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, p, 10 * MiB, NULL), AA_OK);
  free_keep(f, &l);
  release_undoes_every_alias(f);
  fx_done(f);
}

static void test_core_stitch_alias_run_fails_midway(void **state) {
  (void)state;
  for (int per_handle = 0; per_handle < 2; per_handle++) {
    for (uint64_t fail = 1; fail <= 3; fail++)
      alias_fails_midway(fail, per_handle != 0);
  }
}

/* Randomized: blocks of 1-20 MiB allocated and freed at random with
 * stitching on; every live block carries its own byte, checked before its
 * free; no two live blocks overlap in the pages they touch; in use adds up. */
typedef struct live {
  unsigned char *p;
  size_t n;
  unsigned char v;
} live;

/* A mark every 64 KiB and at the end: two live blocks that shared a page
 * (through either address) would overwrite each other's marks. */
static void mark(unsigned char *p, size_t n, unsigned char v) {
  for (size_t j = 0; j < n; j += 65536)
    p[j] = v;
  p[n - 1] = v;
}

static void check_marks(const unsigned char *p, size_t n, unsigned char v) {
  for (size_t j = 0; j < n; j += 65536)
    assert_int_equal(p[j], v);
  assert_int_equal(p[n - 1], v);
}

static uint64_t rng(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static void test_core_stitch_random_shadow(void **state) {
  (void)state;
  uint64_t made = 0, dissolved = 0, grown = 0, deferred = 0;
  /* rounds 3 and 4: large_stitch 2 (ranges of holes and new pages), with
   * no limit and under one; 5 and 6: large_stitch 1 and 2 on a clock that
   * moves 5 ms at every read, so that stitching's time budget runs out
   * and refills over and over (ranges deferred and made in turn) */
  for (int round = 0; round < 7; round++) {
    bool capped = round == 2 || round == 4;
    fx *f = make_stitch_share(capped ? 192 * MiB : 0, round == 3 || round == 4 || round == 6 ? 2 : 1,
                              round >= 5 ? AA_DEFAULT_STITCH_SHARE : 1.0);
    g_tick = 5 * 1000 * 1000;
    if (round >= 5)
      aa_pool_set_clock(f->p, fake_clock, NULL);
    live v[48];
    memset(v, 0, sizeof v);
    uint64_t seed = 0x9E3779B97F4A7C15ull + (uint64_t)round;
    uint64_t in_use = 0;
    for (int step = 0; step < 3000; step++) {
      live *e = &v[rng(&seed) % 48];
      if (e->p != NULL) {
        check_marks(e->p, e->n, e->v);
        assert_int_equal(aa_free(f->p, e->p, e->n, NULL), AA_OK);
        in_use -= e->n;
        e->p = NULL;
        continue;
      }
      size_t n = (size_t)(1 + rng(&seed) % 20) * MiB - (rng(&seed) % 4) * 4096;
      uint64_t was_deferred = stats(f).large_stitch_deferred;
      e->p = aa_alloc(f->p, n, NULL);
      if (e->p == NULL) {
        assert_true(capped); /* only under the limit */
        continue;
      }
      e->n = n;
      e->v = (unsigned char)(step & 0xFF);
      mark(e->p, n, e->v);
      in_use += n;
      aa_pool_stats st = stats(f);
      assert_true(st.bytes_in_use >= in_use);
      /* a request refused a range is counted once, however often it asked */
      assert_true(st.large_stitch_deferred <= was_deferred + 1);
      was_deferred = st.large_stitch_deferred;
      if (capped)
        assert_true(st.bytes_reserved <= 192 * MiB);
    }
    for (int i = 0; i < 48; i++) {
      if (v[i].p == NULL)
        continue;
      check_marks(v[i].p, v[i].n, v[i].v);
      assert_int_equal(aa_free(f->p, v[i].p, v[i].n, NULL), AA_OK);
    }
    aa_pool_stats st = stats(f);
    assert_int_equal(st.large_bytes_in_use, 0);
    assert_int_equal(f->misuses, 0);
    made += st.large_stitches;
    dissolved += st.large_stitch_dissolved;
    grown += st.large_stitch_new_bytes;
    deferred += st.large_stitch_deferred;
    if (round < 3 || round == 5)
      assert_int_equal(st.large_stitch_new_bytes, 0);
    (void)aa_pool_release(f->p);
    assert_int_equal(stats(f).large_stitched_ranges, 0);
    fx_done(f);
  }
  /* the paths under test ran */
  assert_true(made > 0 && dissolved > 0 && grown > 0 && deferred > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_stitch_serves_from_holes),
      cmocka_unit_test(test_core_stitch_grow),
      cmocka_unit_test(test_core_stitch_grow_no_more_than_growth),
      cmocka_unit_test(test_core_stitch_grow_refused),
      cmocka_unit_test(test_core_stitch_time_budget),
      cmocka_unit_test(test_core_stitch_off_by_default),
      cmocka_unit_test(test_core_stitch_default_host_private),
      cmocka_unit_test(test_core_stitch_dissolved_for_another_size),
      cmocka_unit_test(test_core_stitch_loop_no_calls),
      cmocka_unit_test(test_core_stitch_two_sizes_kept),
      cmocka_unit_test(test_core_stitch_other_free_end),
      cmocka_unit_test(test_core_stitch_account_free_range),
      cmocka_unit_test(test_core_stitch_destroy_live_recorded),
      cmocka_unit_test(test_core_stitch_double_free_lent),
      cmocka_unit_test(test_core_stitch_other_stream),
      cmocka_unit_test(test_core_stitch_release_waits_for_stream),
      cmocka_unit_test(test_core_stitch_retired_while_stream_runs_ahead),
      cmocka_unit_test(test_core_stitch_retired_while_range_busy),
      cmocka_unit_test(test_core_stitch_retired_bounded_while_busy),
      cmocka_unit_test(test_core_stitch_revive_memory_short),
      cmocka_unit_test(test_core_stitch_under_limit),
      cmocka_unit_test(test_core_stitch_alias_run_fails_midway),
      cmocka_unit_test(test_core_stitch_random_shadow),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
