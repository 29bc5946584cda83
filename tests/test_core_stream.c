/*
 * test_core_stream.c — stream-ordered reuse with host events held pending: a
 * block freed on stream A is reused on A at once but reaches stream B only
 * after an event recorded on A has completed; record_stream'd blocks wait for
 * every stream; the large path follows the same rules; nothing leaks events;
 * a large block freed on the host pseudo-stream (AA_STREAM_HOST) is given back
 * like one freed on an idle stream; a block freed on the host pseudo-stream
 * with one record_stream'd stream waits for that stream with no event; each
 * device's default stream (aa_stream_default) is a stream of its own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h" /* AA_STREAM_HOST */
#include "core_test.h"       /* core: the host backend's test hooks */

#define SA ((aa_stream)(uintptr_t)0x1000)
#define SB ((aa_stream)(uintptr_t)0x2000)
#define SC ((aa_stream)(uintptr_t)0x3000)
#define SD ((aa_stream)(uintptr_t)0x4000)

typedef struct fx {
  aa_backend *b;
  aa_pool *p;
} fx;

static int setup_cfg(void **state, uint32_t tcache_blocks) {
  fx *f = calloc(1, sizeof *f);
  assert_int_equal(aa_backend_host_new(&f->b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = f->b;
  cfg.tcache_blocks = tcache_blocks;
  assert_int_equal(aa_pool_new(&cfg, &f->p), AA_OK);
  *state = f;
  return 0;
}
static int setup(void **state) { return setup_cfg(state, 32); }
static int setup_nocache(void **state) { return setup_cfg(state, 0); }

static int teardown(void **state) {
  fx *f = *state;
  aa_pool_destroy(f->p);
  uint64_t mapped, rec, outstanding;
  aa_backend_host_counts(f->b, NULL, NULL, &mapped);
  aa_backend_host_event_counts(f->b, &rec, &outstanding);
  assert_int_equal(mapped, 0);
  assert_int_equal(outstanding, 0);
  aa_backend_destroy(f->b);
  free(f);
  return 0;
}

enum { N = 16 };
#define BIG ((size_t)256 << 10) /* 8 blocks a slab: the free lists run dry quickly */

static int contains(void **v, int n, void *p) {
  for (int i = 0; i < n; i++)
    if (v[i] == p)
      return 1;
  return 0;
}

/* Blocks freed on A: B never sees them while events are held; A does. */
static void test_core_stream_cross_stream_waits(void **state) {
  fx *f = *state;
  void *a[N], *b[N], *again[N];
  aa_backend_host_hold_events(f->b, true);
  for (int i = 0; i < N; i++)
    a[i] = aa_alloc(f->p, BIG, SA);
  for (int i = 0; i < N; i++)
    assert_int_equal(aa_free(f->p, a[i], BIG, SA), AA_OK);
  for (int i = 0; i < N; i++) {
    b[i] = aa_alloc(f->p, BIG, SB);
    assert_non_null(b[i]);
    assert_false(contains(a, N, b[i]));
  }
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_true(st.pending_blocks > 0); /* B tried to take A's blocks */
  /* reuse on A is immediate */
  for (int i = 0; i < N; i++) {
    again[i] = aa_alloc(f->p, BIG, SA);
    assert_true(contains(a, N, again[i]));
  }
  for (int i = 0; i < N; i++) {
    assert_int_equal(aa_free(f->p, again[i], 0, SA), AA_OK);
    assert_int_equal(aa_free(f->p, b[i], 0, SB), AA_OK);
  }
  /* complete the events: B may now take A's blocks */
  aa_backend_host_hold_events(f->b, false);
  int from_a = 0;
  void *c[3 * N];
  for (int i = 0; i < 3 * N; i++) {
    c[i] = aa_alloc(f->p, BIG, SC);
    from_a += contains(a, N, c[i]);
  }
  assert_true(from_a > 0);
  for (int i = 0; i < 3 * N; i++)
    aa_free(f->p, c[i], 0, SC);
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.bytes_in_use, 0);
}

/* aa_stream_default(d): one handle per device, told apart from NULL, the
 * host pseudo-stream and real stream pointers, and decoded back. */
static void test_core_stream_default_per_device(void **state) {
  (void)state;
  assert_null(aa_stream_default(-1));
  assert_null(aa_stream_default(AA_STREAM_DEFAULT_DEVICES));
  for (int d = 0; d < AA_STREAM_DEFAULT_DEVICES; d++) {
    aa_stream s = aa_stream_default(d);
    assert_non_null(s);
    assert_true(s != AA_STREAM_HOST);
    assert_int_equal(aa_stream_default_device(s), d);
    if (d > 0)
      assert_true(s != aa_stream_default(d - 1));
  }
  assert_int_equal(aa_stream_default_device(NULL), -1);
  assert_int_equal(aa_stream_default_device(AA_STREAM_HOST), -1);
  assert_int_equal(aa_stream_default_device(SA), -1);
  assert_int_equal(aa_stream_default_device((aa_stream)(uintptr_t)0x1), -1); /* cudaStreamLegacy */
  assert_int_equal(aa_stream_default_device((aa_stream)(uintptr_t)0x2), -1); /* ...PerThread */
}

/* Blocks freed on device 0's default stream while its work is pending do
 * not serve device 1's default stream (with the one handle NULL for both,
 * they did: the pinned pool, used from every device, handed a block still
 * read by one GPU's copy to another GPU's copy); device 0's own stream
 * reuses them at once. */
static void test_core_stream_default_streams_apart(void **state) {
  fx *f = *state;
  aa_stream d0 = aa_stream_default(0), d1 = aa_stream_default(1);
  void *a[N], *b[N];
  aa_backend_host_hold_events(f->b, true);
  for (int i = 0; i < N; i++)
    a[i] = aa_alloc(f->p, BIG, d0);
  for (int i = 0; i < N; i++)
    assert_int_equal(aa_free(f->p, a[i], BIG, d0), AA_OK);
  for (int i = 0; i < N; i++) {
    b[i] = aa_alloc(f->p, BIG, d1);
    assert_non_null(b[i]);
    assert_false(contains(a, N, b[i]));
  }
  void *again = aa_alloc(f->p, BIG, d0);
  assert_true(contains(a, N, again));
  assert_int_equal(aa_free(f->p, again, BIG, d0), AA_OK);
  for (int i = 0; i < N; i++)
    assert_int_equal(aa_free(f->p, b[i], BIG, d1), AA_OK);
  aa_backend_host_hold_events(f->b, false);
}

/* Same without thread caches: every block goes through the central lists. */
static void test_core_stream_central_lists(void **state) {
  fx *f = *state;
  aa_backend_host_hold_events(f->b, true);
  const size_t sz = (size_t)1 << 20; /* two blocks a slab */
  void *a = aa_alloc(f->p, sz, SA);
  assert_int_equal(aa_free(f->p, a, 0, SA), AA_OK);
  void *b = aa_alloc(f->p, sz, SB);
  assert_ptr_not_equal(a, b);
  void *a2 = aa_alloc(f->p, sz, SA);
  assert_ptr_equal(a, a2);
  assert_int_equal(aa_free(f->p, a2, 0, SA), AA_OK);
  assert_int_equal(aa_free(f->p, b, 0, SB), AA_OK);
  /* still held: B gets its own block back, then new ones, never a */
  void *b2 = aa_alloc(f->p, sz, SB);
  assert_ptr_equal(b2, b);
  void *b3 = aa_alloc(f->p, sz, SB);
  void *b4 = aa_alloc(f->p, sz, SB);
  assert_ptr_not_equal(b3, a);
  assert_ptr_not_equal(b4, a);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.pending_blocks, 1);
  aa_backend_host_hold_events(f->b, false);
  void *b5 = aa_alloc(f->p, sz, SB);
  assert_ptr_equal(b5, a); /* now a completed event covers it */
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.pending_blocks, 0);
  aa_free(f->p, b2, 0, SB);
  aa_free(f->p, b3, 0, SB);
  aa_free(f->p, b4, 0, SB);
  aa_free(f->p, b5, 0, SB);
}

static void test_core_stream_record_stream(void **state) {
  fx *f = *state;
  aa_backend_host_hold_events(f->b, true);
  void *a = aa_alloc(f->p, 2048, SA);
  assert_int_equal(aa_record_stream(f->p, a, SB), AA_OK);
  assert_int_equal(aa_record_stream(f->p, a, SB), AA_OK); /* twice is fine */
  assert_int_equal(aa_free(f->p, a, 2048, SA), AA_OK);
  /* not even A may reuse it before B's work is done */
  void *x = aa_alloc(f->p, 2048, SA);
  void *y = aa_alloc(f->p, 2048, SB);
  assert_ptr_not_equal(x, a);
  assert_ptr_not_equal(y, a);
  aa_pool_stats st;
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.pending_blocks, 1);
  aa_backend_host_hold_events(f->b, false);
  aa_pool_release(f->p); /* polls pending work */
  aa_pool_stats_get(f->p, &st);
  assert_int_equal(st.pending_blocks, 0);
  aa_free(f->p, x, 0, SA);
  aa_free(f->p, y, 0, SB);
  /* record_stream on a free or foreign pointer is refused */
  int local;
  assert_int_equal(aa_record_stream(f->p, &local, SB), AA_EINVAL);
  assert_int_equal(aa_record_stream(f->p, a, SB), AA_EINVAL);
}

/* PyTorch's rule (large_stream_wait off; on, test_core_stream_wait_*): a
 * large block pending on its stream serves that stream only. */
static void test_core_stream_large(void **state) {
  fx *f = *state;
  aa_pool_set_stream_wait(f->p, false);
  aa_backend_host_hold_events(f->b, true);
  void *a = aa_alloc(f->p, 3u << 20, SA);
  assert_int_equal(aa_free(f->p, a, 0, SA), AA_OK);
  void *b = aa_alloc(f->p, 3u << 20, SB);
  assert_ptr_not_equal(a, b);
  void *a2 = aa_alloc(f->p, 3u << 20, SA);
  assert_ptr_equal(a, a2);
  aa_free(f->p, a2, 0, SA);
  aa_backend_host_hold_events(f->b, false);
  void *c = aa_alloc(f->p, 3u << 20, SC);
  assert_ptr_equal(c, a);
  aa_free(f->p, c, 0, SC);
  /* record_stream on a large block */
  aa_backend_host_hold_events(f->b, true);
  void *d = aa_alloc(f->p, 5u << 20, SA);
  assert_int_equal(aa_record_stream(f->p, d, SB), AA_OK);
  aa_free(f->p, d, 0, SA);
  void *e = aa_alloc(f->p, 5u << 20, SA);
  assert_ptr_not_equal(e, d);
  aa_backend_host_hold_events(f->b, false);
  void *g = aa_alloc(f->p, 5u << 20, SC);
  assert_ptr_equal(g, d);
  aa_free(f->p, e, 0, SA);
  aa_free(f->p, g, 0, SC);
  aa_free(f->p, b, 0, SB);
}

/* A block taken on the host pseudo-stream, used by one stream X
 * (record_stream: a pinned tensor a copy on X read) and freed on the host
 * pseudo-stream is a block freed on X: no event is recorded for it at the
 * free, the host does not get it back while X is busy, and once X is idle
 * it does (the pool asks X). */
enum { HF_MAX = 1100 };

/* Takes n-byte blocks on `s` until the pool's limit and frees them;
 * whether `a` was among them. */
static bool stream_meets(aa_pool *p, aa_stream s, size_t n, void *a) {
  static void *h[HF_MAX];
  size_t k = 0;
  bool seen = false;
  while (k < HF_MAX && (h[k] = aa_alloc(p, n, s)) != NULL)
    seen |= h[k++] == a;
  assert_true(k < HF_MAX);
  for (size_t i = 0; i < k; i++)
    assert_int_equal(aa_free(p, h[i], 0, s), AA_OK);
  return seen;
}

/* A pool over a new host backend, with a limit (the pool cannot grow past
 * a's slab or segment); limited_done destroys both, checking no event is left. */
static aa_pool *limited_pool(aa_backend **b, uint32_t tcache_blocks, size_t limit) {
  assert_int_equal(aa_backend_host_new(b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = *b;
  cfg.tcache_blocks = tcache_blocks;
  cfg.limit_bytes = limit;
  aa_pool *p = NULL;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  return p;
}

static void limited_done(aa_pool *p, aa_backend *b) {
  uint64_t out = 1;
  aa_pool_destroy(p);
  aa_backend_host_event_counts(b, NULL, &out);
  assert_int_equal(out, 0);
  aa_backend_destroy(b);
}

static void check_host_free_recorded(uint32_t tc, size_t n, size_t limit) {
  aa_backend *b = NULL;
  aa_pool *p = limited_pool(&b, tc, limit);
  uint64_t rec0, rec1;
  void *a = aa_alloc(p, n, AA_STREAM_HOST);
  assert_non_null(a);
  assert_int_equal(aa_record_stream(p, a, SB), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, true), AA_OK);
  aa_backend_host_event_counts(b, &rec0, NULL);
  assert_int_equal(aa_free(p, a, 0, AA_STREAM_HOST), AA_OK);
  aa_backend_host_event_counts(b, &rec1, NULL);
  assert_int_equal(rec1, rec0);                        /* was: one event on SB, one for the host */
  assert_false(stream_meets(p, AA_STREAM_HOST, n, a)); /* SB is busy */
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  assert_true(stream_meets(p, AA_STREAM_HOST, n, a)); /* SB idle */
  limited_done(p, b);
}

static void test_core_stream_record_host_free(void **state) {
  (void)state;
  for (uint32_t tc = 0; tc <= 32; tc += 32) {
    check_host_free_recorded(tc, 2048, (size_t)2 << 20);
    check_host_free_recorded(tc, (size_t)1 << 20, (size_t)2 << 20);
    check_host_free_recorded(tc, (size_t)5 << 20, (size_t)6 << 20);
  }
}

/* The edges of that rule: with two recorded streams the block still waits
 * for both (no stream gets it while one is busy, the one idle recorded
 * stream included); freed on a real stream SA with one recorded stream SB,
 * neither SA nor the host gets it while SB is busy; with one recorded
 * stream SB and freed on the host, SB itself gets it at once, busy. */
static void check_host_free_edges(uint32_t tc, size_t n, size_t limit) {
  aa_backend *b = NULL;
  /* two recorded streams, freed on the host: SC busy keeps it from all
   * (with large_stream_wait off: no stream is ordered after SC instead) */
  aa_pool *p = limited_pool(&b, tc, limit);
  aa_pool_set_stream_wait(p, false);
  void *a = aa_alloc(p, n, AA_STREAM_HOST);
  assert_non_null(a);
  assert_int_equal(aa_record_stream(p, a, SB), AA_OK);
  assert_int_equal(aa_record_stream(p, a, SC), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SC, true), AA_OK);
  assert_int_equal(aa_free(p, a, 0, AA_STREAM_HOST), AA_OK);
  assert_false(stream_meets(p, AA_STREAM_HOST, n, a));
  assert_false(stream_meets(p, SB, n, a));
  assert_false(stream_meets(p, SC, n, a));
  assert_int_equal(aa_backend_host_stream_busy(b, SC, false), AA_OK);
  assert_true(stream_meets(p, AA_STREAM_HOST, n, a));
  limited_done(p, b);
  /* one recorded stream, freed on a real stream: both must finish */
  p = limited_pool(&b, tc, limit);
  aa_pool_set_stream_wait(p, false);
  a = aa_alloc(p, n, SA);
  assert_non_null(a);
  assert_int_equal(aa_record_stream(p, a, SB), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, true), AA_OK);
  assert_int_equal(aa_free(p, a, 0, SA), AA_OK);
  assert_false(stream_meets(p, SA, n, a));
  assert_false(stream_meets(p, AA_STREAM_HOST, n, a));
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  assert_true(stream_meets(p, SA, n, a));
  limited_done(p, b);
  /* one recorded stream, freed on the host: that stream gets it at once */
  p = limited_pool(&b, tc, limit);
  aa_pool_set_stream_wait(p, false);
  a = aa_alloc(p, n, AA_STREAM_HOST);
  assert_non_null(a);
  assert_int_equal(aa_record_stream(p, a, SB), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, true), AA_OK);
  assert_int_equal(aa_free(p, a, 0, AA_STREAM_HOST), AA_OK);
  assert_true(stream_meets(p, SB, n, a));
  assert_false(stream_meets(p, AA_STREAM_HOST, n, a));
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  limited_done(p, b);
}

static void test_core_stream_record_host_free_edges(void **state) {
  (void)state;
  for (uint32_t tc = 0; tc <= 32; tc += 32) {
    check_host_free_edges(tc, 2048, (size_t)2 << 20);
    check_host_free_edges(tc, (size_t)1 << 20, (size_t)2 << 20);
    check_host_free_edges(tc, (size_t)5 << 20, (size_t)6 << 20);
  }
}

/* Held events at destroy are released, nothing leaks. */
static void test_core_stream_destroy_pending(void **state) {
  fx *f = *state;
  aa_backend_host_hold_events(f->b, true);
  for (int i = 0; i < 10; i++) {
    void *a = aa_alloc(f->p, 1000 + (size_t)i * 1000, SA);
    aa_free(f->p, a, 0, SA);
    void *b = aa_alloc(f->p, 1000 + (size_t)i * 1000, SB);
    aa_record_stream(f->p, b, SC);
    aa_free(f->p, b, 0, SB);
  }
  /* teardown checks that no event and no byte is left */
}

/* A large block freed with no GPU work behind it goes back on release, in
 * the cache and the expandable mode, whether freed on an idle stream or on
 * the host pseudo-stream (aa_staging_put(..., AA_STREAM_HOST), a packer's
 * buffer). The release asked "usable on any stream?" with (aa_stream)-1,
 * which is AA_STREAM_HOST: a block freed there stayed held for good. */
static void check_idle_large_released(aa_large_mode mode, aa_stream free_on) {
  aa_backend *b = NULL;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.large_mode = mode;
  aa_pool *p = NULL;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  size_t n = (size_t)24 << 20;
  void *x = aa_alloc(p, n, AA_STREAM_HOST);
  assert_non_null(x);
  assert_int_equal(aa_free(p, x, n, free_on), AA_OK);
  assert_true(aa_pool_release(p) >= n);
  uint64_t mapped = 1;
  aa_backend_host_counts(b, NULL, NULL, &mapped);
  assert_int_equal(mapped, 0);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get(p, &st), AA_OK);
  assert_int_equal(st.large_bytes_reserved, 0);
  aa_pool_destroy(p);
  aa_backend_destroy(b);
}

static void test_core_stream_host_freed_large_released(void **state) {
  (void)state;
  check_idle_large_released(AA_LARGE_CACHE, SA); /* the control */
  check_idle_large_released(AA_LARGE_EXPANDABLE, SA);
  check_idle_large_released(AA_LARGE_CACHE, AA_STREAM_HOST);
  check_idle_large_released(AA_LARGE_EXPANDABLE, AA_STREAM_HOST);
}

/* The side-stream shapes (PyTorch's record_stream after wait_stream, or
 * blocks freed on two streams side by side): free chunks tied to streams
 * whose work has since completed merge before the pool grows, in both large
 * modes, and never while the work is pending. */
#define MIB ((size_t)1 << 20)

static aa_pool *settle_pool(aa_backend **b, aa_large_mode mode) {
  assert_int_equal(aa_backend_host_new(b), AA_OK);
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = *b;
  cfg.tcache_blocks = 0;
  cfg.large_mode = mode;
  aa_pool *p = NULL;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  return p;
}

static uint64_t reserved_of(aa_pool *p, uint64_t *settled) {
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get_opts(p, &st, AA_STATS_NO_SIZES), AA_OK);
  if (settled)
    *settled = st.large_settled;
  return st.bytes_reserved;
}

/* Two neighbouring 4 MiB blocks cut from one 8 MiB chunk on `sa` (a) and
 * `sb` (b): the first is the whole's base. */
static void two_halves(aa_pool *p, aa_stream sa, aa_stream sb, void **a, void **b) {
  void *x = aa_alloc(p, 8 * MIB, sa);
  assert_non_null(x);
  assert_int_equal(aa_free(p, x, 0, sa), AA_OK);
  *a = aa_alloc(p, 4 * MIB, sa);
  *b = aa_alloc(p, 4 * MIB, sb);
  assert_ptr_equal(*a, x);
  assert_ptr_equal(*b, (char *)x + 4 * MIB);
}

static void check_settle_record_stream(aa_large_mode mode) {
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, mode);
  aa_pool_set_stream_wait(p, false); /* PyTorch's rule; on: test_core_stream_wait_merges_run */
  void *a, *c;
  two_halves(p, SA, SA, &a, &c);
  /* both used on SB (record_stream), freed on SA while SB works */
  assert_int_equal(aa_backend_host_stream_busy(b, SB, true), AA_OK);
  assert_int_equal(aa_record_stream(p, a, SB), AA_OK);
  assert_int_equal(aa_record_stream(p, c, SB), AA_OK);
  assert_int_equal(aa_free(p, a, 0, SA), AA_OK);
  assert_int_equal(aa_free(p, c, 0, SA), AA_OK);
  uint64_t settled0, settled1;
  (void)reserved_of(p, &settled0);
  /* SB's work pending: an 8 MiB request cannot be the freed pair */
  void *busy = aa_alloc(p, 8 * MIB, SA);
  assert_non_null(busy);
  assert_ptr_not_equal(busy, a);
  /* SB done: the pair merges and serves the next 8 MiB, no new memory */
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  uint64_t r1 = reserved_of(p, NULL);
  void *again = aa_alloc(p, 8 * MIB, SC);
  assert_ptr_equal(again, a);
  assert_int_equal(reserved_of(p, &settled1), r1);
  assert_true(settled1 >= settled0 + 2);
  assert_int_equal(aa_free(p, again, 0, SC), AA_OK);
  assert_int_equal(aa_free(p, busy, 0, SA), AA_OK);
  limited_done(p, b);
}

static void test_core_stream_settle_record_stream(void **state) {
  (void)state;
  check_settle_record_stream(AA_LARGE_CACHE);
  check_settle_record_stream(AA_LARGE_EXPANDABLE);
}

/* Blocks freed on two streams side by side: once both are idle, a request
 * on a third stream takes the merged pair instead of new memory; while one
 * is busy, it does not. */
static void check_settle_two_streams(aa_large_mode mode) {
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, mode);
  aa_pool_set_stream_wait(p, false); /* PyTorch's rule; on: test_core_stream_wait_merges_run */
  void *a, *c;
  two_halves(p, SA, SB, &a, &c);
  assert_int_equal(aa_backend_host_stream_busy(b, SA, true), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, true), AA_OK);
  assert_int_equal(aa_free(p, a, 0, SA), AA_OK);
  assert_int_equal(aa_free(p, c, 0, SB), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SA, false), AA_OK);
  /* SB still busy: the pair is not for SC */
  void *one = aa_alloc(p, 8 * MIB, SC);
  assert_non_null(one);
  assert_ptr_not_equal(one, a);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  uint64_t r0 = reserved_of(p, NULL);
  void *two = aa_alloc(p, 8 * MIB, SC);
  assert_ptr_equal(two, a); /* the merged pair, no new memory */
  assert_int_equal(reserved_of(p, NULL), r0);
  assert_int_equal(aa_free(p, two, 0, SC), AA_OK);
  assert_int_equal(aa_free(p, one, 0, SC), AA_OK);
  limited_done(p, b);
}

static void test_core_stream_settle_two_streams(void **state) {
  (void)state;
  check_settle_two_streams(AA_LARGE_CACHE);
  check_settle_two_streams(AA_LARGE_EXPANDABLE);
}

/* Stream-ordered reuse (large_stream_wait): a free chunk whose uses on
 * other streams are still pending serves a request once the requesting
 * stream is ordered after them (the backend's stream_wait) instead of new
 * memory; off, refused by the backend, or on the host pseudo-stream, the
 * pool grows as PyTorch's caching allocator would, and the chunk waits. */
static uint64_t waits_of(aa_pool *p) {
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get_opts(p, &st, AA_STATS_NO_SIZES), AA_OK);
  return st.large_stream_waits;
}

/* An 8 MiB block on SA, used on SB (record_stream), freed on SA with SB
 * busy: pending. */
static void *pending_block(aa_pool *p, aa_backend *b) {
  void *x = aa_alloc(p, 8 * MIB, SA);
  assert_non_null(x);
  assert_int_equal(aa_record_stream(p, x, SB), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, true), AA_OK);
  assert_int_equal(aa_free(p, x, 0, SA), AA_OK);
  return x;
}

static void check_stream_wait(aa_large_mode mode, aa_stream req, uint64_t want_waits) {
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, mode);
  void *x = pending_block(p, b);
  uint64_t r0 = reserved_of(p, NULL), w0, wp0, w1, wp1;
  aa_backend_host_stream_waits(b, &w0, &wp0);
  void *y = aa_alloc(p, 8 * MIB, req);
  assert_ptr_equal(y, x); /* the pending block, no new memory */
  assert_int_equal(reserved_of(p, NULL), r0);
  aa_backend_host_stream_waits(b, &w1, &wp1);
  assert_int_equal(w1 - w0, want_waits); /* SB's event (and SA's for another stream) */
  assert_true(wp1 - wp0 >= 1);           /* SB's was pending: a real ordering */
  assert_int_equal(waits_of(p), 1);
  /* freed again on `req` with nothing pending on other streams: reused at
   * once on `req`, no wait */
  assert_int_equal(aa_free(p, y, 0, req), AA_OK);
  void *z = aa_alloc(p, 8 * MIB, req);
  assert_ptr_equal(z, x);
  assert_int_equal(waits_of(p), 1);
  assert_int_equal(aa_free(p, z, 0, req), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  limited_done(p, b); /* every event released */
}

/* The GPU test's side-stream pipeline (tests/gpu/test_torch_native.py,
 * adaptalloc-bench streams sidepipe --after): a pool first serves 250 MiB of
 * assorted blocks, keeps every seventh and releases the rest (what earlier
 * work leaves), then each step takes an input and two transformed copies on
 * SA, hands the copies to SB (record_stream), takes a 16 MiB buffer on SB
 * and frees all four; six sizes cycle. The pattern repeats, so after its
 * first cycle the pool must take no more memory. It took more, cycle after
 * cycle, while the chunks each stream's frees left stayed in pieces until
 * the pool was about to grow (the bench's replica of this: 158, 158, 168,
 * 196, 196, 234 MiB); with the events free chunks hold asked before each
 * request and their pieces merged (large_take.c process_events), 150 MiB from
 * the first cycle. */
static void test_core_stream_repeating_pattern_steady(void **state) {
  static const size_t shape[6] = {9633792, 9830400, 7372800, 9437184, 6291456, 9633792};
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, AA_LARGE_EXPANDABLE);
  void *v[64], *kept[16];
  size_t sz[64], nk = 0, n = 0, sum = 0;
  uint32_t x = 12345;
  uint64_t after[8];
  (void)state;
  while (sum < 250 * MIB && n < 64) {
    x = x * 1103515245u + 12345u;
    sz[n] = ((size_t)(x >> 8) % (24 * MIB)) + (32u << 10);
    v[n] = aa_alloc(p, sz[n], SB);
    assert_non_null(v[n]);
    sum += sz[n++];
  }
  for (size_t i = 0; i < n; i++) {
    if (i % 7 == 3)
      kept[nk++] = v[i];
    else
      assert_int_equal(aa_free(p, v[i], sz[i], SB), AA_OK);
  }
  (void)aa_pool_release(p);
  for (int c = 0; c < 8; c++) {
    for (int k = 0; k < 6; k++) {
      void *raw = aa_alloc(p, shape[k], SA);
      void *xa = aa_alloc(p, shape[k] * 4, SA);
      void *ya = aa_alloc(p, shape[k] * 4, SA);
      assert_true(raw && xa && ya);
      assert_int_equal(aa_free(p, raw, shape[k], SA), AA_OK);
      assert_int_equal(aa_record_stream(p, xa, SB), AA_OK);
      assert_int_equal(aa_record_stream(p, ya, SB), AA_OK);
      void *w = aa_alloc(p, 16 * MIB, SB);
      assert_non_null(w);
      assert_int_equal(aa_free(p, xa, 0, SA), AA_OK);
      assert_int_equal(aa_free(p, ya, 0, SA), AA_OK);
      assert_int_equal(aa_free(p, w, 0, SB), AA_OK);
    }
    after[c] = reserved_of(p, NULL);
  }
  for (int c = 1; c < 8; c++)
    assert_true(after[c] <= after[0]);
  for (size_t i = 0; i < nk; i++)
    assert_int_equal(aa_free(p, kept[i], 0, SB), AA_OK);
  limited_done(p, b);
}

/* No single free chunk fits, but a run of free neighbours does, one of
 * them still waiting for record_stream'd SB (such a block cannot merge):
 * the requesting stream is ordered after SB, the run merges and serves the
 * request, no new memory (DDP's gradients: adaptalloc-bench streams ddp
 * --busy). */
static void check_wait_merges_run(aa_large_mode mode, aa_stream req) {
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, mode);
  void *a, *c;
  two_halves(p, SA, SA, &a, &c);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, true), AA_OK);
  assert_int_equal(aa_record_stream(p, a, SB), AA_OK);
  assert_int_equal(aa_free(p, a, 0, SA), AA_OK); /* pending on SB */
  assert_int_equal(aa_free(p, c, 0, SA), AA_OK); /* usable on SA */
  uint64_t r0 = reserved_of(p, NULL), w0, wp0, w1, wp1;
  aa_backend_host_stream_waits(b, &w0, &wp0);
  void *y = aa_alloc(p, 8 * MIB, req);
  assert_ptr_equal(y, a); /* the merged pair */
  assert_int_equal(reserved_of(p, NULL), r0);
  aa_backend_host_stream_waits(b, &w1, &wp1);
  assert_true(w1 - w0 >= 1 && wp1 - wp0 >= 1); /* ordered after SB's pending work */
  assert_true(waits_of(p) >= 1);
  assert_int_equal(aa_free(p, y, 0, req), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  limited_done(p, b); /* every event released */
}

static void test_core_stream_wait_merges_run(void **state) {
  (void)state;
  check_wait_merges_run(AA_LARGE_CACHE, SA);
  check_wait_merges_run(AA_LARGE_EXPANDABLE, SA);
  check_wait_merges_run(AA_LARGE_EXPANDABLE, SC);
}

static void test_core_stream_wait_reuses_pending(void **state) {
  (void)state;
  check_stream_wait(AA_LARGE_CACHE, SA, 1); /* its own stream: SB's event */
  check_stream_wait(AA_LARGE_EXPANDABLE, SA, 1);
  check_stream_wait(AA_LARGE_CACHE, SC, 2); /* a third: SB's and SA's */
  check_stream_wait(AA_LARGE_EXPANDABLE, SC, 2);
}

/* How the pool grows instead: off (aa_pool_set_stream_wait), the backend
 * refusing (a stream under capture), the host pseudo-stream. The pending
 * block is then left alone, and serves once SB's work is done. */
enum { WAIT_OFF,
       WAIT_REFUSED,
       WAIT_HOST };

static void check_no_stream_wait(aa_large_mode mode, int how) {
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, mode);
  void *x = pending_block(p, b);
  aa_stream req = how == WAIT_HOST ? AA_STREAM_HOST : SA;
  if (how == WAIT_OFF)
    aa_pool_set_stream_wait(p, false);
  if (how == WAIT_REFUSED)
    aa_backend_host_refuse_waits(b, true);
  uint64_t r0 = reserved_of(p, NULL), w0, w1;
  aa_backend_host_stream_waits(b, &w0, NULL);
  void *y = aa_alloc(p, 8 * MIB, req);
  assert_non_null(y);
  assert_ptr_not_equal(y, x);
  assert_true(reserved_of(p, NULL) > r0); /* new memory */
  aa_backend_host_stream_waits(b, &w1, NULL);
  assert_int_equal(w1, w0); /* refused calls are not counted by the host backend */
  assert_int_equal(waits_of(p), 0);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  void *z = aa_alloc(p, 8 * MIB, SA);
  assert_ptr_equal(z, x); /* SB done: the block serves */
  assert_int_equal(aa_free(p, z, 0, SA), AA_OK);
  assert_int_equal(aa_free(p, y, 0, req), AA_OK);
  limited_done(p, b);
}

static void test_core_stream_wait_off_refused_host(void **state) {
  (void)state;
  for (int how = WAIT_OFF; how <= WAIT_HOST; how++) {
    check_no_stream_wait(AA_LARGE_CACHE, how);
    check_no_stream_wait(AA_LARGE_EXPANDABLE, how);
  }
}

/* The best fit among pending chunks, and the rest of a larger one stays
 * free on the requesting stream: a 16 MiB and an 8 MiB pending block, a
 * 6 MiB request takes the 8 MiB one; the 2 MiB left over serves the same
 * stream at once, no second wait. */
static void test_core_stream_wait_best_fit_and_rest(void **state) {
  (void)state;
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, AA_LARGE_EXPANDABLE);
  void *big = aa_alloc(p, 16 * MIB, SA);
  void *x = pending_block(p, b);
  assert_int_equal(aa_record_stream(p, big, SB), AA_OK);
  assert_int_equal(aa_free(p, big, 0, SA), AA_OK);
  uint64_t r0 = reserved_of(p, NULL);
  void *y = aa_alloc(p, 6 * MIB, SC);
  assert_ptr_equal(y, x);
  void *rest = aa_alloc(p, 2 * MIB, SC);
  assert_ptr_equal(rest, (char *)x + 6 * MIB);
  assert_int_equal(reserved_of(p, NULL), r0);
  assert_int_equal(waits_of(p), 1);
  assert_int_equal(aa_free(p, y, 0, SC), AA_OK);
  assert_int_equal(aa_free(p, rest, 0, SC), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  limited_done(p, b);
}

/* The rest of a pending chunk taken by a stream that waited: a 2 MiB
 * request on SA takes 2 MiB of a block used on SB (record_stream, SB busy)
 * and freed on SA, SA ordered after SB's event; the 6 MiB left over must
 * not reach a third stream SC before SB's work is done unless SC is ordered
 * after it too, and never reach the host pseudo-stream, which cannot wait.
 * (The event recorded on SA at the free, before SA waited, went with the
 * rest and completed at once: SC and the host took the rest unordered.) */
static void check_wait_rest_ordered(aa_large_mode mode) {
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, mode);
  void *x = pending_block(p, b);
  uint64_t sb = aa_backend_host_stream_period(b, SB, NULL, NULL);
  assert_true(sb != 0);
  void *y = aa_alloc(p, 2 * MIB, SA);
  assert_ptr_equal(y, x);
  assert_true(aa_backend_host_stream_ordered(b, SA, sb));
  void *z = aa_alloc(p, 4 * MIB, SC);
  assert_non_null(z);
  if ((char *)z >= (char *)x && (char *)z < (char *)x + 8 * MIB)
    assert_true(aa_backend_host_stream_ordered(b, SC, sb)); /* SB's work before SC's */
  /* the host cannot wait: nothing of the block while SB is busy */
  void *h = aa_alloc(p, 2 * MIB, AA_STREAM_HOST);
  assert_non_null(h);
  assert_false((char *)h >= (char *)x && (char *)h < (char *)x + 8 * MIB);
  assert_int_equal(aa_free(p, h, 0, AA_STREAM_HOST), AA_OK);
  assert_int_equal(aa_free(p, z, 0, SC), AA_OK);
  assert_int_equal(aa_free(p, y, 0, SA), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  limited_done(p, b);
}

static void test_core_stream_wait_rest_ordered(void **state) {
  (void)state;
  check_wait_rest_ordered(AA_LARGE_CACHE);
  check_wait_rest_ordered(AA_LARGE_EXPANDABLE);
}

/* A block taken by stream-ordered reuse and freed, untouched, on the host
 * pseudo-stream or another stream: its earlier uses on SB are behind the
 * taking stream's wait, which the freeing caller knows nothing of, so the
 * block must not go to the host (which cannot wait) while SB is busy, nor
 * to another stream unordered. (It was given back as freed on an idle
 * stream: the host took it at once.) Nor may the thread's large-block cache
 * hold it for the host. */
static void check_wait_freed_elsewhere(aa_large_mode mode, uint32_t tcache) {
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, mode);
  if (tcache != 0) {
    aa_pool_destroy(p);
    aa_pool_config cfg;
    aa_pool_config_init(&cfg);
    cfg.backend = b;
    cfg.tcache_blocks = tcache;
    cfg.large_mode = mode;
    assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  }
  void *x = pending_block(p, b);
  uint64_t sb = aa_backend_host_stream_period(b, SB, NULL, NULL);
  void *y = aa_alloc(p, 8 * MIB, SC);
  assert_ptr_equal(y, x);
  assert_true(aa_backend_host_stream_ordered(b, SC, sb));
  assert_int_equal(aa_free(p, y, 0, AA_STREAM_HOST), AA_OK);
  void *h = aa_alloc(p, 8 * MIB, AA_STREAM_HOST);
  assert_non_null(h);
  assert_ptr_not_equal(h, x);
  void *z = aa_alloc(p, 8 * MIB, SD);
  assert_non_null(z);
  if (z == x)
    assert_true(aa_backend_host_stream_ordered(b, SD, sb));
  assert_int_equal(aa_free(p, z, 0, SD), AA_OK);
  assert_int_equal(aa_free(p, h, 0, AA_STREAM_HOST), AA_OK);
  assert_int_equal(aa_backend_host_stream_busy(b, SB, false), AA_OK);
  limited_done(p, b);
}

static void test_core_stream_wait_freed_elsewhere(void **state) {
  (void)state;
  check_wait_freed_elsewhere(AA_LARGE_CACHE, 0);
  check_wait_freed_elsewhere(AA_LARGE_EXPANDABLE, 0);
  check_wait_freed_elsewhere(AA_LARGE_CACHE, 64);
}

/* Randomized: blocks of many sizes allocated, record_stream'd and freed
 * on four streams and the host pseudo-stream, streams marked busy and idle
 * at random, stream_wait refused and the feature turned off now and then.
 * A shadow model keeps, for every range freed, the busy periods its uses
 * were in (the freeing stream's and the record_stream'd streams' periods at
 * the free, and the periods those streams waited for; a block freed on a
 * stream other than its own, the host's included, once its own is idle, has
 * its last use there); a block handed to a stream must be ordered after
 * every one of those still running on another stream (the host backend's
 * model of stream_wait: aa_backend_host_stream_ordered). Live blocks never
 * overlap; bytes_requested follows; at the end nothing is in use and every
 * event has been released. */
#define SW_LIVE 48
#define SW_NONE ((aa_stream)(uintptr_t)0x9000)
#define SW_PRINTS 512
#define SW_PER 64

typedef struct sw_live {
  char *p;
  size_t size;
  aa_stream s, rec[4];
  int nrec;
} sw_live;

typedef struct sw_print {
  uintptr_t lo, hi;
  uint64_t per[SW_PER];
  int n;
} sw_print;

static uint64_t sw_rand(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Adds `stream`'s busy period and what it waits for to footprint f. */
static void sw_note(aa_backend *b, sw_print *f, aa_stream stream) {
  uint64_t deps[8];
  int nd = 0;
  uint64_t per = aa_backend_host_stream_period(b, stream, deps, &nd);
  if (per != 0 && f->n < SW_PER)
    f->per[f->n++] = per;
  for (int i = 0; i < nd && f->n < SW_PER; i++)
    f->per[f->n++] = deps[i];
  assert_true(f->n < SW_PER); /* room left: nothing dropped */
}

static void sw_check(aa_backend *b, sw_print *fp, int nfp, const char *p, size_t size,
                     aa_stream s) {
  uintptr_t lo = (uintptr_t)p, hi = lo + size;
  for (int i = 0; i < nfp; i++) {
    if (fp[i].hi <= lo || fp[i].lo >= hi)
      continue;
    for (int j = 0; j < fp[i].n; j++) {
      if (!aa_backend_host_stream_ordered(b, s, fp[i].per[j]))
        print_message("block %p+%zu on stream %p: range %d [%lx,%lx) period %llu pending\n",
                      (const void *)p, size, s, i, (unsigned long)fp[i].lo,
                      (unsigned long)fp[i].hi, (unsigned long long)fp[i].per[j]);
      assert_true(aa_backend_host_stream_ordered(b, s, fp[i].per[j]));
    }
  }
}

static void sw_run(aa_large_mode mode, uint64_t seed, int steps) {
  static const aa_stream streams[5] = {SA, SB, SC, SD, AA_STREAM_HOST};
  static const size_t sizes[8] = {1 * MIB, 2 * MIB, 3 * MIB, 4 * MIB, 6 * MIB,
                                  8 * MIB + 4096, MIB + 192 * 1024, 12 * MIB};
  aa_backend *b = NULL;
  aa_pool *p = settle_pool(&b, mode);
  sw_live live[SW_LIVE];
  sw_print *fp = calloc(SW_PRINTS, sizeof *fp);
  assert_non_null(fp);
  int nlive = 0, nfp = 0;
  size_t req = 0;
  uint64_t x = seed;
  for (int step = 0; step < steps; step++) {
    unsigned op = (unsigned)(sw_rand(&x) % 100);
    aa_stream s = streams[sw_rand(&x) % 5];
    if (op < 40 && nlive < SW_LIVE) {
      size_t n = sizes[sw_rand(&x) % 8];
      char *q = aa_alloc(p, n, s);
      assert_non_null(q);
      for (int i = 0; i < nlive; i++) /* no overlap with a live block */
        assert_true(q + n <= live[i].p || live[i].p + live[i].size <= q);
      sw_check(b, fp, nfp, q, n, s);
      live[nlive++] = (sw_live){.p = q, .size = n, .s = s};
      req += n;
    } else if (op < 70 && nlive > 0) {
      int k = (int)(sw_rand(&x) % (uint64_t)nlive);
      sw_live *l = &live[k];
      aa_stream fs = sw_rand(&x) % 4 == 0 ? s : l->s;
      uint64_t zd[8];
      int nzd = 0;
      /* on another stream only once its own is idle (a caller that
       * synchronized with it); the stream-ordered reuse's waits are the
       * pool's to keep */
      if (aa_backend_host_stream_period(b, l->s, zd, &nzd) != 0 || nzd > 0)
        fs = l->s;
      /* the footprint first: the free records events in these periods */
      if (nfp == SW_PRINTS) { /* drop the ones whose periods all ended */
        int m = 0;
        for (int i = 0; i < nfp; i++) {
          bool on = false;
          for (int j = 0; j < fp[i].n && !on; j++) /* SNONE: never busy, never waits */
            on = !aa_backend_host_stream_ordered(b, SW_NONE, fp[i].per[j]);
          if (on)
            fp[m++] = fp[i];
        }
        nfp = m;
      }
      assert_true(nfp < SW_PRINTS);
      sw_print *f = &fp[nfp++];
      *f = (sw_print){.lo = (uintptr_t)l->p, .hi = (uintptr_t)l->p + l->size};
      sw_note(b, f, fs); /* the last use's stream (the alloc stream's work is the caller's to order) */
      for (int i = 0; i < l->nrec; i++)
        sw_note(b, f, l->rec[i]);
      assert_int_equal(aa_free(p, l->p, 0, fs), AA_OK);
      req -= l->size;
      *l = live[--nlive];
    } else if (op < 82 && nlive > 0) {
      sw_live *l = &live[sw_rand(&x) % (uint64_t)nlive];
      if (s != AA_STREAM_HOST && l->nrec < 4) {
        assert_int_equal(aa_record_stream(p, l->p, s), AA_OK);
        l->rec[l->nrec++] = s;
      }
    } else if (op < 96) {
      if (s != AA_STREAM_HOST)
        assert_int_equal(aa_backend_host_stream_busy(b, s, sw_rand(&x) % 3 != 0), AA_OK);
    } else if (op < 98) {
      aa_backend_host_refuse_waits(b, sw_rand(&x) % 3 == 0);
    } else {
      aa_pool_set_stream_wait(p, sw_rand(&x) % 4 != 0);
    }
    if (step % 64 == 0) {
      aa_pool_stats st;
      assert_int_equal(aa_pool_stats_get_opts(p, &st, AA_STATS_NO_SIZES), AA_OK);
      assert_int_equal(st.bytes_requested, req);
      assert_true(st.bytes_in_use >= req);
    }
  }
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get_opts(p, &st, AA_STATS_NO_SIZES), AA_OK);
  assert_true(st.large_stream_waits > 0); /* the feature was exercised */
  while (nlive > 0) {
    assert_int_equal(aa_free(p, live[nlive - 1].p, 0, live[nlive - 1].s), AA_OK);
    nlive--;
  }
  for (int i = 0; i < 4; i++)
    assert_int_equal(aa_backend_host_stream_busy(b, streams[i], false), AA_OK);
  assert_int_equal(aa_pool_stats_get_opts(p, &st, AA_STATS_NO_SIZES), AA_OK);
  assert_int_equal(st.bytes_in_use, 0);
  assert_int_equal(st.bytes_requested, 0);
  free(fp);
  limited_done(p, b); /* every event released */
}

static void test_core_stream_wait_stress(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 6; seed++) {
    sw_run(AA_LARGE_CACHE, seed * 0x9E3779B97F4A7C15ull, 3000);
    sw_run(AA_LARGE_EXPANDABLE, seed * 0x9E3779B97F4A7C15ull + 1, 3000);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_core_stream_cross_stream_waits, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stream_central_lists, setup_nocache, teardown),
      cmocka_unit_test(test_core_stream_default_per_device),
      cmocka_unit_test_setup_teardown(test_core_stream_default_streams_apart, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stream_record_stream, setup, teardown),
      cmocka_unit_test_setup_teardown(test_core_stream_large, setup, teardown),
      cmocka_unit_test(test_core_stream_record_host_free),
      cmocka_unit_test(test_core_stream_record_host_free_edges),
      cmocka_unit_test_setup_teardown(test_core_stream_destroy_pending, setup, teardown),
      cmocka_unit_test(test_core_stream_host_freed_large_released),
      cmocka_unit_test(test_core_stream_settle_record_stream),
      cmocka_unit_test(test_core_stream_settle_two_streams),
      cmocka_unit_test(test_core_stream_wait_reuses_pending),
      cmocka_unit_test(test_core_stream_wait_merges_run),
      cmocka_unit_test(test_core_stream_wait_off_refused_host),
      cmocka_unit_test(test_core_stream_wait_best_fit_and_rest),
      cmocka_unit_test(test_core_stream_wait_rest_ordered),
      cmocka_unit_test(test_core_stream_wait_freed_elsewhere),
      cmocka_unit_test(test_core_stream_wait_stress),
      cmocka_unit_test(test_core_stream_repeating_pattern_steady),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
