/*
 * test_core_place.c — where the large path places a block (docs/core.md,
 * "Placement"): requests of at most 1 MiB in segments of their own, apart
 * from larger ones, in both modes, so that the holes small long-lived
 * blocks would leave between freed activations do not form (a hole between
 * live large blocks serves a small request before its region grows);
 * rooms, where mid-size (1-10 MiB) blocks cut after a much larger block lie
 * together for the same reason; and parking, which takes back a chunk
 * freed beside free memory only when no exact hole of the size lies
 * elsewhere.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "core_test.h" /* core: the host backend's test hooks */

#include "core_large_fixture.h"

#define KiB ((size_t)1 << 10)
#define NACT 8
#define ACT ((size_t)(15.4 * (double)MiB)) /* an activation: fits no 16 MiB request */
#define KEEP (600 * KiB)                   /* a small block that outlives it */
#define KEEP_MID (1536 * KiB)              /* a mid-size one: above the small bound */

/* A pool on the host backend whose large path starts at 16 KiB, as the
 * default policy's device pool. */
static fx *make_place(aa_large_mode mode) {
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.max_small = 16 * KiB;
  cfg.classes_per_doubling = 1;
  cfg.large_mode = mode;
  return make_cfg(&cfg, false);
}

/* Every large block freed: the backend gets every mapping back. */
static void done(fx *f) {
  assert_int_equal(stats(f).large_bytes_in_use, 0);
  fx_done(f);
}

/* The holes pattern (bench/replay/holes_trace.py): NACT pairs of an
 * activation and a `keep`-byte block that outlives it; the activations
 * freed, two 16 MiB requests must need no new memory. check(): the kept
 * blocks' layout, asked before the activations are freed. */
static void holes_with(aa_large_mode mode, size_t keep_bytes,
                       void (*check)(aa_large_mode, char **act, char **keep)) {
  fx *f = make_place(mode);
  char *act[NACT], *keep[NACT], *comb[2];
  for (int i = 0; i < NACT; i++) {
    act[i] = aa_alloc(f->p, ACT, NULL);
    keep[i] = aa_alloc(f->p, keep_bytes, NULL);
    assert_non_null(act[i]);
    assert_non_null(keep[i]);
  }
  check(mode, act, keep);
  for (int i = 0; i < NACT; i++)
    assert_int_equal(aa_free(f->p, act[i], ACT, NULL), AA_OK);
  aa_pool_stats before = stats(f);
  for (int i = 0; i < 2; i++) {
    comb[i] = aa_alloc(f->p, 16 * MiB, NULL);
    assert_non_null(comb[i]);
  }
  aa_pool_stats after = stats(f);
  assert_int_equal(after.large_bytes_reserved, before.large_bytes_reserved);
  assert_int_equal(after.large_segments, before.large_segments);
  assert_int_equal(after.backend_allocs, before.backend_allocs);
  for (int i = 0; i < 2; i++)
    assert_int_equal(aa_free(f->p, comb[i], 16 * MiB, NULL), AA_OK);
  for (int i = 0; i < NACT; i++)
    assert_int_equal(aa_free(f->p, keep[i], keep_bytes, NULL), AA_OK);
  done(f);
}

/* Small kept blocks (600 KiB): none lies inside any activation's room (the
 * small requests' region); before, each sat right after its activation,
 * every hole was 15.4 MiB, and both 16 MiB requests mapped new pages or
 * made segments. */
static void small_apart(aa_large_mode mode, char **act, char **keep) {
  (void)mode;
  for (int i = 0; i < NACT; i++) {
    for (int j = 0; j < NACT; j++) {
      uintptr_t k = (uintptr_t)keep[j], a = (uintptr_t)act[i];
      assert_false(k >= a && k < a + 16 * MiB);
    }
  }
}

static void holes(aa_large_mode mode) { holes_with(mode, KEEP, small_apart); }

static void test_core_place_small_apart_expandable(void **state) {
  (void)state;
  holes(AA_LARGE_EXPANDABLE);
}

static void test_core_place_small_apart_cache(void **state) {
  (void)state;
  holes(AA_LARGE_CACHE);
}

/* Whether two blocks lie in different reservations (each holds at least
 * 32 GiB of address space, so blocks of one lie within a few MiB here). */
static bool apart(const void *x, const void *y) {
  uintptr_t a = (uintptr_t)x, b = (uintptr_t)y;
  return (a > b ? a - b : b - a) >= ((uintptr_t)1 << 30);
}

/* The regions in expandable mode: a small request is not cut from the
 * fresh memory after the large blocks, a large one never takes the small
 * blocks' room; a small request takes a hole between live large blocks
 * only when its own region would need new memory. */
static void test_core_place_regions(void **state) {
  (void)state;
  fx *f = make_place(AA_LARGE_EXPANDABLE);
  char *a = aa_alloc(f->p, 4 * MiB, NULL);
  char *b = aa_alloc(f->p, 4 * MiB, NULL);
  assert_ptr_equal(b, a + 4 * MiB);
  char *s = aa_alloc(f->p, 512 * KiB, NULL); /* before: right after b */
  assert_true(apart(s, a));
  char *s2 = aa_alloc(f->p, 1 * MiB, NULL); /* at the bound: small */
  assert_ptr_equal(s2, s + 512 * KiB);
  char *l = aa_alloc(f->p, 1 * MiB + 4 * KiB, NULL); /* above it: after b */
  assert_ptr_equal(l, b + 4 * MiB);
  assert_int_equal(aa_free(f->p, s, 512 * KiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, s2, 1 * MiB, NULL), AA_OK);
  /* the small blocks' room, free and mapped, is not the large requests' */
  char *l2 = aa_alloc(f->p, 1 * MiB + 4 * KiB, NULL);
  assert_ptr_equal(l2, l + 1 * MiB + 4 * KiB);
  /* b freed: a hole between live blocks, which small requests leave alone
   * while their own region's mapped page has room... */
  assert_int_equal(aa_free(f->p, b, 4 * MiB, NULL), AA_OK);
  aa_pool_stats before = stats(f);
  char *s3 = aa_alloc(f->p, 512 * KiB, NULL);
  char *s4 = aa_alloc(f->p, 1 * MiB, NULL);
  assert_ptr_equal(s3, s);
  assert_ptr_equal(s4, s + 512 * KiB);
  /* ...and take once it would need a new page: memory held anyway */
  char *s5 = aa_alloc(f->p, 1 * MiB, NULL);
  assert_ptr_equal(s5, b);
  assert_int_equal(stats(f).large_bytes_reserved, before.large_bytes_reserved);
  char *bufs[] = {a, l, l2, s3, s4, s5};
  size_t sizes[] = {4 * MiB, 1 * MiB + 4 * KiB, 1 * MiB + 4 * KiB, 512 * KiB, 1 * MiB, 1 * MiB};
  for (int i = 0; i < 6; i++)
    assert_int_equal(aa_free(f->p, bufs[i], sizes[i], NULL), AA_OK);
  done(f);
}

/* The holes pattern with mid-size blocks (1.5 MiB: the large requests'
 * region, bench/replay/holes_trace.py --keep-kib 1536): expandable, the
 * first opens a room after the first activation and the others fill it, so
 * the activations after it lie side by side and, freed, serve the 16 MiB
 * requests with no new memory (before, each kept block sat right after its
 * activation: 15.4 MiB holes, and both requests mapped new pages). Cache
 * mode gives each activation a segment of its own already. */
static void one_room(aa_large_mode mode, char **act, char **keep) {
  (void)act;
  if (mode == AA_LARGE_EXPANDABLE) { /* one room: the kept blocks together */
    for (int i = 1; i < NACT; i++)
      assert_ptr_equal(keep[i], keep[0] + (size_t)i * KEEP_MID);
  }
}

static void mid_holes(aa_large_mode mode) { holes_with(mode, KEEP_MID, one_room); }

static void test_core_place_mid_room_expandable(void **state) {
  (void)state;
  mid_holes(AA_LARGE_EXPANDABLE);
}

static void test_core_place_mid_room_cache(void **state) {
  (void)state;
  mid_holes(AA_LARGE_CACHE);
}

/* The rule: a mid-size request cut from the free end right after a live
 * block at least six times its size opens a 20 MiB room; mid-size requests
 * fill it, larger ones are cut after it (its memory, where mapped, is
 * theirs before new pages); below the ratio no room is opened; a mid-size
 * request that the room at the free end cannot hold extends it; a room
 * left empty is memory like any other. */
static void test_core_place_mid_room_rule(void **state) {
  (void)state;
  fx *f = make_place(AA_LARGE_EXPANDABLE);
  char *a = aa_alloc(f->p, 32 * MiB, NULL);
  char *m1 = aa_alloc(f->p, 2 * MiB, NULL); /* 32 >= 6 x 2: a room */
  assert_ptr_equal(m1, a + 32 * MiB);
  char *l = aa_alloc(f->p, 16 * MiB, NULL); /* larger: after the room */
  assert_ptr_equal(l, m1 + 20 * MiB);
  char *m2 = aa_alloc(f->p, 3 * MiB, NULL); /* mid-size: in it */
  char *m3 = aa_alloc(f->p, 10 * MiB, NULL);
  assert_ptr_equal(m2, m1 + 2 * MiB);
  assert_ptr_equal(m3, m2 + 3 * MiB);
  char *x = aa_alloc(f->p, 6 * MiB, NULL); /* 5 MiB left in the room; 16 < 6 x 6: no room */
  char *y = aa_alloc(f->p, 16 * MiB, NULL);
  assert_ptr_equal(x, l + 16 * MiB);
  assert_ptr_equal(y, x + 6 * MiB);
  /* m2 and m3 freed (m1 keeps the room): its mapped free memory serves a
   * larger request before new pages do */
  assert_int_equal(aa_free(f->p, m2, 3 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, m3, 10 * MiB, NULL), AA_OK);
  aa_pool_stats before = stats(f);
  char *z = aa_alloc(f->p, 12 * MiB, NULL);
  assert_ptr_equal(z, m2);
  assert_int_equal(stats(f).large_bytes_reserved, before.large_bytes_reserved);
  char *bufs[] = {a, l, x, y, z, m1};
  size_t sizes[] = {32 * MiB, 16 * MiB, 6 * MiB, 16 * MiB, 12 * MiB, 2 * MiB};
  for (int i = 0; i < 6; i++)
    assert_int_equal(aa_free(f->p, bufs[i], sizes[i], NULL), AA_OK);
  done(f);
  /* a room at the free end grows: no partial page between its blocks */
  f = make_place(AA_LARGE_EXPANDABLE);
  a = aa_alloc(f->p, 64 * MiB, NULL);
  char *v[3];
  for (int i = 0; i < 3; i++) {
    v[i] = aa_alloc(f->p, 7 * MiB, NULL); /* the third fits the room's 6 MiB left no more */
    assert_ptr_equal(v[i], a + 64 * MiB + (size_t)i * 7 * MiB);
  }
  for (int i = 0; i < 3; i++)
    assert_int_equal(aa_free(f->p, v[i], 7 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, a, 64 * MiB, NULL), AA_OK);
  done(f);
  /* a room with no block left in it is memory like any other: its free
   * neighbours merge with it, and a larger request takes it */
  f = make_place(AA_LARGE_EXPANDABLE);
  a = aa_alloc(f->p, 32 * MiB, NULL);
  m1 = aa_alloc(f->p, 2 * MiB, NULL);
  l = aa_alloc(f->p, 16 * MiB, NULL);
  assert_ptr_equal(l, m1 + 20 * MiB);
  assert_int_equal(aa_free(f->p, m1, 2 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, l, 16 * MiB, NULL), AA_OK);
  char *big = aa_alloc(f->p, 30 * MiB, NULL);
  assert_ptr_equal(big, m1);
  assert_int_equal(aa_free(f->p, big, 30 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, a, 32 * MiB, NULL), AA_OK);
  done(f);
}

#define SA ((aa_stream)(uintptr_t)0x1000)
#define SB ((aa_stream)(uintptr_t)0x2000)

/* A room whose blocks are freed while one of them still waits for a
 * record_stream'd stream: its chunks merge later, when the stream's work
 * has completed (large_take.c process_events), not in aa__lg_coalesce_insert.
 * The room, now with no block in it, must end there too, as it does when
 * its last block is freed plainly (test_core_place_mid_room_rule): else
 * its free part, still flagged and with unmapped pages, stays apart from
 * the free memory above it and larger requests pass over it for good. */
static void test_core_place_mid_room_ends_after_events(void **state) {
  (void)state;
  fx *f = make_place(AA_LARGE_EXPANDABLE);
  char *a = aa_alloc(f->p, 32 * MiB, SA);
  char *m1 = aa_alloc(f->p, 2 * MiB, SA); /* a room */
  char *m2 = aa_alloc(f->p, 2 * MiB, SA); /* in it */
  char *l = aa_alloc(f->p, 16 * MiB, SA); /* after it */
  assert_ptr_equal(m1, a + 32 * MiB);
  assert_ptr_equal(m2, m1 + 2 * MiB);
  assert_ptr_equal(l, m1 + 20 * MiB);
  assert_int_equal(aa_free(f->p, l, 16 * MiB, SA), AA_OK);
  /* m2 used on SB while SB works: freed, it waits, and m1 beside it is
   * freed with it still waiting */
  assert_int_equal(aa_backend_host_stream_busy(f->b, SB, true), AA_OK);
  assert_int_equal(aa_record_stream(f->p, m2, SB), AA_OK);
  assert_int_equal(aa_free(f->p, m2, 2 * MiB, SA), AA_OK);
  assert_int_equal(aa_free(f->p, m1, 2 * MiB, SA), AA_OK);
  /* a small request, which unparks m1: it goes back to the bins while m2
   * still waits, so nothing merges then */
  char *s = aa_alloc(f->p, 512 * KiB, SA);
  assert_non_null(s);
  assert_int_equal(aa_backend_host_stream_busy(f->b, SB, false), AA_OK);
  /* the room is empty: memory like any other, from m1 on (16 MiB of new
   * pages for 36 MiB; after it, from l, 20) */
  aa_pool_stats before = stats(f);
  char *big = aa_alloc(f->p, 36 * MiB, SA);
  assert_ptr_equal(big, m1);
  assert_int_equal(stats(f).large_bytes_reserved, before.large_bytes_reserved + 16 * MiB);
  assert_int_equal(aa_free(f->p, big, 36 * MiB, SA), AA_OK);
  assert_int_equal(aa_free(f->p, a, 32 * MiB, SA), AA_OK);
  assert_int_equal(aa_free(f->p, s, 512 * KiB, SA), AA_OK);
  done(f);
}

/* A host backend whose reservations are at most 128 MiB (a bigger one is
 * refused, and the pool asks for half), so that a test reaches the end of
 * an expandable segment. */
static aa_backend_ops small_va_ops;
static int (*host_va_reserve)(aa_backend *b, size_t size, void **out);

static int small_va_reserve(aa_backend *b, size_t size, void **out) {
  if (size > 128 * MiB) {
    *out = NULL;
    return AA_ENOMEM;
  }
  return host_va_reserve(b, size, out);
}

typedef struct other_free {
  aa_pool *p;
  void *ptr;
  size_t size;
} other_free;

static void *free_on_thread(void *arg) {
  other_free *of = arg;
  for (int i = 0; i < 2; i++)
    assert_int_equal(aa_free(of[i].p, of[i].ptr, of[i].size, NULL), AA_OK);
  return NULL;
}

/* The room at the free end grows (room_open) only from a room chunk in
 * the bins: at the end of a reservation, a block freed whole there and
 * the room's last block freed whole before it are both parked; a request
 * of the first's size takes it back (park_take) and must leave the parked
 * room chunk alone (it is in no bin, and in the park list). */
static void test_core_place_mid_room_parked_beside_end(void **state) {
  (void)state;
  aa_backend *hb = NULL;
  assert_int_equal(aa_backend_host_new(&hb), AA_OK);
  aa_backend w = *hb;
  small_va_ops = *hb->ops;
  host_va_reserve = small_va_ops.va_reserve;
  small_va_ops.va_reserve = small_va_reserve;
  w.ops = &small_va_ops;
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = &w;
  cfg.max_small = 16 * KiB;
  cfg.classes_per_doubling = 1;
  cfg.large_mode = AA_LARGE_EXPANDABLE;
  cfg.tcache_blocks = 0; /* frees go to the pool, not the thread's cache */
  aa_pool *p = NULL;
  assert_int_equal(aa_pool_new(&cfg, &p), AA_OK);
  char *big = aa_alloc(p, 104 * MiB, NULL);
  char *m1 = aa_alloc(p, 10 * MiB, NULL); /* a room: 104 .. 124 MiB */
  char *m2 = aa_alloc(p, 10 * MiB, NULL); /* its last 10 MiB */
  char *x = aa_alloc(p, 4 * MiB, NULL);   /* the reservation's last 4 MiB */
  assert_non_null(big);
  assert_ptr_equal(m1, big + 104 * MiB);
  assert_ptr_equal(m2, m1 + 10 * MiB);
  assert_ptr_equal(x, m2 + 10 * MiB);
  /* freed by another thread: to the pool (parked), not this thread's cache */
  other_free of[2] = {{p, m2, 10 * MiB}, {p, x, 4 * MiB}};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, free_on_thread, of), AA_OK);
  assert_int_equal(pthread_join(t, NULL), 0);
  char *y = aa_alloc(p, 4 * MiB, NULL);
  assert_ptr_equal(y, x);                /* its parked chunk, whole */
  char *z = aa_alloc(p, 10 * MiB, NULL); /* m2's room again, or new memory */
  assert_non_null(z);
  assert_int_equal(aa_free(p, y, 4 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(p, z, 10 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(p, m1, 10 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(p, big, 104 * MiB, NULL), AA_OK);
  aa_pool_destroy(p);
  uint64_t a, fr, mapped;
  aa_backend_host_counts(hb, &a, &fr, &mapped);
  assert_int_equal(mapped, 0);
  assert_int_equal(a, fr);
  aa_backend_destroy(hb);
}

/* Parking: a chunk freed beside free memory is not taken back while an
 * exact hole of its size lies elsewhere (best fit's choice), so that the
 * room it would merge into stays whole for a larger request. */
static void park_exact(aa_large_mode mode) {
  fx *f = make_place(mode);
  /* one run of 4 MiB blocks, a h b x y z: carved from one free chunk */
  char *big = aa_alloc(f->p, 24 * MiB, NULL);
  assert_non_null(big);
  char *w = aa_alloc(f->p, 64 * KiB, NULL); /* the thread's last block is not one of a..z */
  assert_int_equal(aa_free(f->p, big, 24 * MiB, NULL), AA_OK);
  char *v[6];
  for (int i = 0; i < 6; i++) {
    v[i] = aa_alloc(f->p, 4 * MiB, NULL);
    assert_ptr_equal(v[i], big + (size_t)i * 4 * MiB);
  }
  char *last = aa_alloc(f->p, 64 * KiB, NULL);
  char *h = v[1], *x = v[3], *y = v[4];
  assert_int_equal(aa_free(f->p, h, 4 * MiB, NULL), AA_OK); /* a hole of its own */
  assert_int_equal(aa_free(f->p, y, 4 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, x, 4 * MiB, NULL), AA_OK); /* beside y: one 8 MiB room */
  aa_pool_stats before = stats(f);
  /* the exact hole h, not x out of the 8 MiB room x + y (before: x, the
   * newest parked chunk of the size) */
  char *p = aa_alloc(f->p, 4 * MiB, NULL);
  assert_ptr_equal(p, h);
  /* and that room serves 8 MiB with no new memory */
  char *q = aa_alloc(f->p, 8 * MiB, NULL);
  assert_ptr_equal(q, x);
  assert_int_equal(stats(f).large_bytes_reserved, before.large_bytes_reserved);
  assert_int_equal(stats(f).large_segments, before.large_segments);
  assert_int_equal(aa_free(f->p, p, 4 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, q, 8 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, v[0], 4 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, v[2], 4 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, v[5], 4 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, w, 64 * KiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, last, 64 * KiB, NULL), AA_OK);
  /* everything merged back: the run serves its whole size again */
  char *all = aa_alloc(f->p, 24 * MiB, NULL);
  assert_ptr_equal(all, big);
  assert_int_equal(aa_free(f->p, all, 24 * MiB, NULL), AA_OK);
  done(f);
}

static void test_core_place_park_exact_hole_expandable(void **state) {
  (void)state;
  park_exact(AA_LARGE_EXPANDABLE);
}

static void test_core_place_park_exact_hole_cache(void **state) {
  (void)state;
  park_exact(AA_LARGE_CACHE);
}

/* With no exact hole elsewhere, a chunk freed beside free memory is taken
 * back as it was (the loop's fast path: no merge, no split); parked
 * neighbours merge for a request of both. */
static void test_core_place_park_fast_path(void **state) {
  (void)state;
  fx *f = make_place(AA_LARGE_EXPANDABLE);
  char *big = aa_alloc(f->p, 16 * MiB, NULL);
  char *w = aa_alloc(f->p, 64 * KiB, NULL);
  assert_int_equal(aa_free(f->p, big, 16 * MiB, NULL), AA_OK);
  char *a = aa_alloc(f->p, 4 * MiB, NULL);
  char *b = aa_alloc(f->p, 4 * MiB, NULL);
  char *c = aa_alloc(f->p, 4 * MiB, NULL);
  char *d = aa_alloc(f->p, 4 * MiB, NULL);
  char *last = aa_alloc(f->p, 64 * KiB, NULL);
  assert_ptr_equal(b, a + 4 * MiB);
  aa_pool_stats before = stats(f);
  char *m[3];
  for (int i = 0; i < 3; i++) { /* a loop freeing and asking again */
    assert_int_equal(aa_free(f->p, a, 4 * MiB, NULL), AA_OK);
    assert_int_equal(aa_free(f->p, b, 4 * MiB, NULL), AA_OK); /* beside a */
    char *b2 = aa_alloc(f->p, 4 * MiB, NULL);
    char *a2 = aa_alloc(f->p, 4 * MiB, NULL);
    assert_ptr_equal(b2, b); /* the newest first, no exact hole elsewhere */
    assert_ptr_equal(a2, a);
    m[i] = aa_alloc(f->p, 64 * KiB, NULL); /* the thread's last block: not a */
  }
  for (int i = 0; i < 3; i++)
    assert_int_equal(aa_free(f->p, m[i], 64 * KiB, NULL), AA_OK);
  assert_int_equal(stats(f).large_bytes_reserved, before.large_bytes_reserved);
  /* c and d parked side by side: one room for 8 MiB */
  assert_int_equal(aa_free(f->p, c, 4 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, d, 4 * MiB, NULL), AA_OK);
  char *e = aa_alloc(f->p, 8 * MiB, NULL);
  assert_ptr_equal(e, c);
  assert_int_equal(stats(f).large_bytes_reserved, before.large_bytes_reserved);
  assert_int_equal(aa_free(f->p, e, 8 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, a, 4 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, b, 4 * MiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, w, 64 * KiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, last, 64 * KiB, NULL), AA_OK);
  done(f);
}

/* Under a cap: a request whose own region has no room takes free memory
 * of the other region before it fails. Cache mode: a free tail of a large
 * block's segment (not between two live blocks) served no small request,
 * and a small block's segment no large one, so that a pool with 8 MiB
 * free under its cap failed a 600 KiB request (the out-of-memory retry
 * releases only wholly free segments). */
static void capped(aa_large_mode mode) {
  fx *f = make_place(mode);
  char *x = aa_alloc(f->p, 16 * MiB, NULL);
  assert_non_null(x);
  assert_int_equal(aa_free(f->p, x, 16 * MiB, NULL), AA_OK);
  char *a = aa_alloc(f->p, 8 * MiB, NULL); /* cut from x's room: 8 MiB free after it */
  assert_ptr_equal(a, x);
  size_t reserved = stats(f).large_bytes_reserved;
  aa_pool_set_limit(f->p, reserved + MiB);
  char *s = aa_alloc(f->p, 600 * KiB, NULL);
  assert_non_null(s);
  char *s2 = aa_alloc(f->p, 600 * KiB, NULL);
  assert_non_null(s2);
  assert_true(stats(f).large_bytes_reserved <= reserved + MiB);
  aa_pool_set_limit(f->p, 0);
  assert_int_equal(aa_free(f->p, s, 600 * KiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, s2, 600 * KiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, a, 8 * MiB, NULL), AA_OK);
  done(f);
  /* the other way: a large request in the room of a small block's segment */
  f = make_place(mode);
  s = aa_alloc(f->p, 600 * KiB, NULL);
  assert_non_null(s);
  reserved = stats(f).large_bytes_reserved;
  aa_pool_set_limit(f->p, reserved + MiB);
  char *l = aa_alloc(f->p, 1 * MiB + 64 * KiB, NULL);
  assert_non_null(l);
  assert_true(stats(f).large_bytes_reserved <= reserved + MiB);
  aa_pool_set_limit(f->p, 0);
  assert_int_equal(aa_free(f->p, l, 1 * MiB + 64 * KiB, NULL), AA_OK);
  assert_int_equal(aa_free(f->p, s, 600 * KiB, NULL), AA_OK);
  done(f);
}

static void test_core_place_capped_cache(void **state) {
  (void)state;
  capped(AA_LARGE_CACHE);
}

static void test_core_place_capped_expandable(void **state) {
  (void)state;
  capped(AA_LARGE_EXPANDABLE);
}

/* A randomized shadow model of the two regions: sizes on both sides of
 * the bound, frees in any order, releases and trims, a cap set and lifted.
 * Every live block keeps its bytes, none overlaps another, the pool owns
 * each and knows its size, the accounts add up (in use at least what was
 * asked, reserved at least in use, within the cap while one is set), and
 * at the end every byte has gone back. */
#define RND_N 64

static uint64_t rnd(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

static void random_regions(aa_large_mode mode) {
  fx *f = make_place(mode);
  unsigned char *v[RND_N] = {0};
  size_t n[RND_N] = {0};
  uint64_t seed = 0x9E3779B97F4A7C15ull ^ (uint64_t)mode;
  size_t cap = 0;
  for (int step = 0; step < 6000; step++) {
    int k = (int)(rnd(&seed) % RND_N);
    uint64_t op = rnd(&seed) % 100;
    if (op < 2) {
      (void)aa_pool_release(f->p);
    } else if (op < 3) {
      (void)aa_pool_trim(f->p, 4 * MiB);
    } else if (op < 4) { /* a cap a little above what is in use, or none */
      cap = cap == 0 ? (size_t)stats(f).bytes_reserved + 8 * MiB : 0;
      aa_pool_set_limit(f->p, cap);
    } else if (v[k] != NULL) {
      for (size_t i = 0; i < n[k]; i += 4096)
        assert_int_equal(v[k][i], (unsigned char)k);
      assert_int_equal(v[k][n[k] - 1], (unsigned char)k);
      assert_int_equal(aa_free(f->p, v[k], n[k], NULL), AA_OK);
      v[k] = NULL;
    } else {
      /* half at most 1 MiB (the small requests' region), half above */
      size_t sz = rnd(&seed) % 2 ? 17 * KiB + rnd(&seed) % (MiB - 17 * KiB + 1)
                                 : MiB + 1 + rnd(&seed) % (8 * MiB);
      v[k] = aa_alloc(f->p, sz, NULL);
      if (v[k] == NULL) {
        assert_true(cap != 0); /* only under the cap */
        continue;
      }
      n[k] = sz;
      assert_true(aa_pool_owns(f->p, v[k]));
      assert_true(aa_pool_owns(f->p, v[k] + sz - 1));
      assert_true(aa_block_size(f->p, v[k]) >= sz);
      for (size_t i = 0; i < sz; i += 4096)
        v[k][i] = (unsigned char)k;
      v[k][sz - 1] = (unsigned char)k;
      for (int j = 0; j < RND_N; j++) { /* no overlap */
        if (j != k && v[j] != NULL)
          assert_true(v[j] + n[j] <= v[k] || v[k] + sz <= v[j]);
      }
    }
    aa_pool_stats st = stats(f);
    uint64_t asked = 0;
    for (int j = 0; j < RND_N; j++)
      asked += v[j] != NULL ? n[j] : 0;
    assert_true(st.large_bytes_in_use >= asked);
    assert_true(st.large_bytes_reserved >= st.large_bytes_in_use);
    if (cap != 0 && op >= 4)
      assert_true(st.bytes_reserved <= cap);
  }
  aa_pool_set_limit(f->p, 0);
  for (int j = 0; j < RND_N; j++) {
    if (v[j] != NULL)
      assert_int_equal(aa_free(f->p, v[j], n[j], NULL), AA_OK);
  }
  (void)aa_pool_release(f->p);
  done(f);
}

static void test_core_place_random_cache(void **state) {
  (void)state;
  random_regions(AA_LARGE_CACHE);
}

static void test_core_place_random_expandable(void **state) {
  (void)state;
  random_regions(AA_LARGE_EXPANDABLE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_core_place_small_apart_expandable),
      cmocka_unit_test(test_core_place_small_apart_cache),
      cmocka_unit_test(test_core_place_regions),
      cmocka_unit_test(test_core_place_mid_room_expandable),
      cmocka_unit_test(test_core_place_mid_room_cache),
      cmocka_unit_test(test_core_place_mid_room_rule),
      cmocka_unit_test(test_core_place_mid_room_ends_after_events),
      cmocka_unit_test(test_core_place_mid_room_parked_beside_end),
      cmocka_unit_test(test_core_place_park_exact_hole_expandable),
      cmocka_unit_test(test_core_place_park_exact_hole_cache),
      cmocka_unit_test(test_core_place_park_fast_path),
      cmocka_unit_test(test_core_place_capped_cache),
      cmocka_unit_test(test_core_place_capped_expandable),
      cmocka_unit_test(test_core_place_random_cache),
      cmocka_unit_test(test_core_place_random_expandable),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
