/*
 * fuzz_core.c — libFuzzer target for the core allocator API, driven by the
 * byte stream against a model.
 *
 * The first bytes pick a pool configuration (large-path mode, thread-cache
 * bounds, telemetry, a reserve limit); every later byte is an operation with
 * its arguments: allocations of small and large sizes on a few streams, frees
 * with the right size, size 0 or a wrong size, double frees, foreign and
 * interior pointers, record_stream, class add / retire / set / set_classes,
 * release and trim, telemetry and trace toggles, held stream events, stats
 * and JSON. At most MAX_OPS operations run per input.
 *
 * The model is the set of live blocks (pointer, requested size, block size,
 * stream, a tag written into the block). Checked after every operation: the
 * call's result is what the API promises (misuse returns AA_EINVAL and leaves
 * the block live); and regularly and at the end: live blocks never overlap,
 * every live block still holds its tag bytes, aa_block_size agrees, stats
 * bytes_in_use equals the model's sum of block sizes, bytes_requested the sum
 * of requested sizes, allocs - frees the live count, invalid_frees and ooms
 * the model's counts, the error callback fired once per invalid free. After
 * aa_pool_destroy the backend has nothing mapped and no event outstanding.
 * Any violation aborts (a crash for libFuzzer).
 *
 * Seed corpus: tests/fuzz/corpus/core/.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/core.h"
#include "core_test.h" /* core: the host backend's test hooks */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_OPS 400
#define MAX_LIVE 256
#define NSTREAMS 4

#define REQUIRE(cond)                                                     \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "fuzz_core: %s:%d: invariant broken: %s (op %u)\n", \
              __FILE__, __LINE__, #cond, f->op_index);                    \
      abort();                                                            \
    }                                                                     \
  } while (0)

typedef struct live {
  unsigned char *p;
  size_t req;   /* size asked for (0 kept as 0) */
  size_t bsize; /* aa_block_size at allocation */
  aa_stream stream;
  unsigned char tag;
} live;

typedef struct fz {
  const uint8_t *data;
  size_t size, pos;
  aa_backend *b;
  aa_pool *pool;
  size_t max_small;
  aa_pool_stats *st0; /* the pool's counters when this input started */
  live blk[MAX_LIVE];
  unsigned n;
  uint64_t invalid;   /* invalid frees the model expects */
  uint64_t callbacks; /* on_error calls seen */
  uint64_t nulls;     /* aa_alloc NULL returns */
  unsigned op_index;
  unsigned tag_seq;
  bool held;
  uint64_t trace_events;
} fz;

static const aa_stream streams[NSTREAMS] = {NULL, (aa_stream)(uintptr_t)0x100,
                                            (aa_stream)(uintptr_t)0x200,
                                            (aa_stream)(uintptr_t)0x300};

static uint8_t u8(fz *f) { return f->pos < f->size ? f->data[f->pos++] : 0; }
static uint16_t u16(fz *f) { return (uint16_t)(u8(f) | (u8(f) << 8)); }
static uint32_t u24(fz *f) { return (uint32_t)u16(f) | ((uint32_t)u8(f) << 16); }

static void on_error(void *user, aa_pool *pool, aa_misuse what, const void *ptr,
                     size_t size, const char *message) {
  fz *f = user;
  (void)pool;
  (void)ptr;
  (void)size;
  REQUIRE(what >= AA_MISUSE_FOREIGN && what <= AA_MISUSE_INTERIOR);
  REQUIRE(message != NULL && message[0] != '\0');
  f->callbacks++;
}

static void on_trace(void *user, const aa_trace_event *ev) {
  fz *f = user;
  REQUIRE(ev->op == 'a' || ev->op == 'f' || ev->op == 'x' || ev->op == 'u');
  REQUIRE(ev->op != 'u' || (ev->size == 0 && ev->ptr != 0)); /* a recorded stream use */
  f->trace_events++;
}

static void write_tag(const live *l) {
  size_t n = l->req ? l->req : 1;
  l->p[0] = l->tag;
  l->p[n / 2] = l->tag;
  l->p[n - 1] = l->tag;
}

static bool tag_ok(const live *l) {
  size_t n = l->req ? l->req : 1;
  return l->p[0] == l->tag && l->p[n / 2] == l->tag && l->p[n - 1] == l->tag;
}

static int cmp_live(const void *a, const void *b) {
  const live *x = a, *y = b;
  return x->p < y->p ? -1 : x->p > y->p;
}

/* The full check: no overlap, tags, block sizes, stats against the model. */
static void check_all(fz *f) {
  static live sorted[MAX_LIVE];
  aa_pool_stats *st = malloc(sizeof(*st));
  uint64_t in_use = 0, requested = 0;
  unsigned i;

  REQUIRE(st != NULL);
  memcpy(sorted, f->blk, f->n * sizeof(live));
  qsort(sorted, f->n, sizeof(live), cmp_live);
  for (i = 0; i < f->n; i++) {
    REQUIRE(tag_ok(&sorted[i]));
    REQUIRE(aa_block_size(f->pool, sorted[i].p) == sorted[i].bsize);
    if (i + 1 < f->n)
      REQUIRE(sorted[i].p + sorted[i].bsize <= sorted[i + 1].p);
    in_use += sorted[i].bsize;
    requested += sorted[i].req ? sorted[i].req : 1;
  }
  REQUIRE(aa_pool_stats_get(f->pool, st) == AA_OK);
  REQUIRE(st->version == AA_STATS_VERSION && st->size == sizeof(*st));
  REQUIRE(st->bytes_in_use == in_use);
  REQUIRE(st->bytes_requested == requested);
  REQUIRE((st->allocs - f->st0->allocs) - (st->frees - f->st0->frees) == f->n);
  REQUIRE(st->invalid_frees - f->st0->invalid_frees == f->invalid);
  REQUIRE(st->ooms - f->st0->ooms == f->nulls);
  REQUIRE(f->callbacks == f->invalid);
  REQUIRE(st->bytes_reserved >= st->bytes_in_use);
  REQUIRE(st->class_count >= 1 && st->class_count <= AA_MAX_CLASSES);
  {
    uint64_t mapped = 0;
    aa_backend_host_counts(f->b, NULL, NULL, &mapped);
    REQUIRE(mapped == st->bytes_reserved);
  }
  free(st);
}

static live *pick(fz *f) {
  if (f->n == 0)
    return NULL;
  return &f->blk[u8(f) % f->n];
}

static void forget(fz *f, live *l) {
  *l = f->blk[--f->n];
}

static void do_alloc(fz *f, size_t sz) {
  aa_stream s = streams[u8(f) % NSTREAMS];
  unsigned char *p;
  live *l;

  if (f->n >= MAX_LIVE)
    return;
  p = aa_alloc(f->pool, sz, s);
  if (p == NULL) {
    f->nulls++;
    return;
  }
  l = &f->blk[f->n++];
  l->p = p;
  l->req = sz;
  l->bsize = aa_block_size(f->pool, p);
  l->stream = s;
  l->tag = (unsigned char)(++f->tag_seq | 1);
  REQUIRE(l->bsize >= (sz ? sz : 1));
  REQUIRE(((uintptr_t)p % AA_BLOCK_ALIGN) == 0);
  write_tag(l);
}

/* A misuse: the call fails, is counted, calls back once, frees nothing. */
static void expect_misuse(fz *f, void *p, size_t sz, aa_stream s) {
  uint64_t cb = f->callbacks;
  REQUIRE(aa_free(f->pool, p, sz, s) == AA_EINVAL);
  f->invalid++;
  REQUIRE(f->callbacks == cb + 1);
}

static void do_free(fz *f, int how) {
  live *l = pick(f);
  live copy;
  if (l == NULL)
    return;
  REQUIRE(tag_ok(l));
  copy = *l;
  switch (how) {
  case 0: /* the right size, its own stream */
    REQUIRE(aa_free(f->pool, l->p, l->req, l->stream) == AA_OK);
    forget(f, l);
    break;
  case 1: /* size unknown, maybe another stream */
    REQUIRE(aa_free(f->pool, l->p, 0, streams[u8(f) % NSTREAMS]) == AA_OK);
    forget(f, l);
    break;
  case 2: /* a size that contradicts the block: refused, block stays */
    if (l->req == 0)
      return;
    expect_misuse(f, l->p, l->req + 1 + (size_t)u8(f) * 512, l->stream);
    if (l->req > 1)
      expect_misuse(f, l->p, l->req - 1, l->stream);
    REQUIRE(tag_ok(l));
    break;
  case 3: /* free, then the same pointer again at once */
    REQUIRE(aa_free(f->pool, l->p, l->req, l->stream) == AA_OK);
    forget(f, l);
    expect_misuse(f, copy.p, copy.req, copy.stream);
    break;
  case 4: /* an interior pointer */
    if (copy.bsize > 1) {
      size_t off = 1 + (size_t)u24(f) % (copy.bsize - 1);
      expect_misuse(f, copy.p + off, 0, copy.stream);
      REQUIRE(tag_ok(l));
    }
    break;
  }
}

static void do_foreign(fz *f) {
  static unsigned char not_ours[4096];
  unsigned char *heap = malloc(64);
  uint8_t k = u8(f) % 4;
  REQUIRE(heap != NULL);
  switch (k) {
  case 0:
    expect_misuse(f, not_ours + 512, 512, NULL);
    break;
  case 1:
    expect_misuse(f, heap, 64, NULL);
    break;
  case 2: /* an address nobody maps */
    expect_misuse(f, (void *)(uintptr_t)(0x10000 + (uintptr_t)u16(f) * 4096), 0, NULL);
    break;
  case 3: /* NULL is a no-op */
    REQUIRE(aa_free(f->pool, NULL, 123, NULL) == AA_OK);
    break;
  }
  free(heap);
  REQUIRE(aa_block_size(f->pool, not_ours) == 0);
}

static void do_class_op(fz *f, int how) {
  aa_class_spec specs[AA_MAX_CLASSES];
  size_t n = 0;
  uint64_t v0 = 0, v1 = 0;
  int rc;

  REQUIRE(aa_pool_classes(f->pool, specs, AA_MAX_CLASSES, &n, &v0) == AA_OK);
  REQUIRE(n >= 1 && n <= AA_MAX_CLASSES);
  for (size_t i = 1; i < n; i++)
    REQUIRE(specs[i - 1].block_size < specs[i].block_size);
  REQUIRE(specs[n - 1].block_size == f->max_small);
  switch (how) {
  case 0: { /* add; sizes off the grid and past max_small are refused */
    aa_class_spec s;
    uint8_t k = u8(f);
    s.block_size = (k & 0x80) ? (size_t)u16(f) : ((size_t)(k & 0x7f) + 1) * AA_BLOCK_ALIGN;
    s.cache_limit = u8(f) % 64;
    s.prefill = u8(f) % 8;
    rc = aa_pool_class_add(f->pool, &s);
    REQUIRE(rc == AA_OK || rc == AA_EEXIST || rc == AA_ELIMIT || rc == AA_EINVAL);
    if (s.block_size % AA_BLOCK_ALIGN != 0 || s.block_size == 0 || s.block_size > f->max_small)
      REQUIRE(rc == AA_EINVAL);
    break;
  }
  case 1: { /* retire one; the last class cannot go */
    size_t bs = specs[u8(f) % n].block_size;
    rc = aa_pool_class_retire(f->pool, bs);
    REQUIRE(rc == AA_OK || rc == AA_EBUSY || rc == AA_ENOENT);
    if (bs == f->max_small)
      REQUIRE(rc != AA_OK);
    rc = aa_pool_class_retire(f->pool, 777); /* not a class */
    REQUIRE(rc == AA_ENOENT || rc == AA_EINVAL);
    break;
  }
  case 2: { /* set limits of one */
    aa_class_spec s = specs[u8(f) % n];
    s.cache_limit = u8(f);
    s.prefill = u8(f) % 16;
    rc = aa_pool_class_set(f->pool, &s);
    REQUIRE(rc == AA_OK || rc == AA_ENOENT || rc == AA_EINVAL);
    break;
  }
  case 3: { /* a whole table: keep some, add some; valid or refused whole */
    aa_class_spec t[AA_MAX_CLASSES];
    size_t m = 0;
    uint8_t mask = u8(f);
    for (size_t i = 0; i < n && m < AA_MAX_CLASSES; i++)
      if ((mask >> (i % 8)) & 1 || specs[i].block_size == f->max_small)
        t[m++] = specs[i];
    if (m < AA_MAX_CLASSES && (mask & 1)) {
      /* one more, placed in order; maybe a duplicate or off the grid */
      aa_class_spec extra = {((size_t)(u8(f) % 64) + 1) * AA_BLOCK_ALIGN + (mask & 2 ? 1 : 0), 0,
                             0};
      size_t j = m;
      while (j > 0 && t[j - 1].block_size > extra.block_size) {
        t[j] = t[j - 1];
        j--;
      }
      t[j] = extra;
      m++;
    }
    rc = aa_pool_set_classes(f->pool, t, m);
    REQUIRE(aa_pool_classes(f->pool, specs, AA_MAX_CLASSES, &n, &v1) == AA_OK);
    if (rc != AA_OK)
      REQUIRE(v1 == v0); /* refused whole: nothing changed */
    break;
  }
  }
}

static void do_misc(fz *f, int how) {
  switch (how) {
  case 0:
    (void)aa_pool_release(f->pool);
    break;
  case 1:
    (void)aa_pool_trim(f->pool, (size_t)u8(f) << 16);
    break;
  case 2:
    aa_pool_set_telemetry(f->pool, u8(f) & 1);
    break;
  case 3:
    f->held = !f->held;
    aa_backend_host_hold_events(f->b, f->held);
    break;
  case 4: {
    live *l = pick(f);
    if (l != NULL) {
      aa_stream s = streams[u8(f) % NSTREAMS];
      REQUIRE(aa_record_stream(f->pool, l->p, s) == AA_OK);
    }
    {
      static char stack_thing[64];
      REQUIRE(aa_record_stream(f->pool, stack_thing, NULL) == AA_EINVAL);
    }
    break;
  }
  case 5:
    if (u8(f) & 1)
      aa_pool_set_trace(f->pool, on_trace, f);
    else
      aa_pool_set_trace(f->pool, NULL, NULL);
    break;
  case 6: { /* stats as JSON: snprintf semantics */
    aa_pool_stats *st = malloc(sizeof(*st));
    char small[64];
    size_t need, cap;
    char *buf;
    REQUIRE(st != NULL);
    REQUIRE(aa_pool_stats_get(f->pool, st) == AA_OK);
    need = aa_pool_stats_json(st, small, sizeof(small));
    REQUIRE(need >= sizeof(small) || strlen(small) == need);
    REQUIRE(strlen(small) < sizeof(small));
    cap = need + 1;
    buf = malloc(cap);
    REQUIRE(buf != NULL);
    REQUIRE(aa_pool_stats_json(st, buf, cap) == need);
    REQUIRE(strlen(buf) == need && buf[0] == '{' && buf[need - 1] == '}');
    free(buf);
    free(st);
    break;
  }
  case 7:
    aa_pool_set_limit(f->pool, (u8(f) & 1) ? 0 : ((size_t)u8(f) + 1) << 20);
    break;
  }
}

/* ------------------------------------------------------------ pools
 * Creating a pool costs milliseconds (its address map), which would make the
 * pool's birth and death most of what the fuzzer measures. So sixteen pools,
 * one per configuration, live across inputs; each input starts from an empty
 * pool (counters are compared as deltas) and leaves it empty with the
 * default class table. Every 32nd use the pool is destroyed and made anew,
 * which checks that destroy gives every byte back. */
#define NSLOTS 16
#define SLOT_USES 32

typedef struct slot {
  aa_backend *b;
  aa_pool *pool;
  aa_class_spec def[AA_MAX_CLASSES];
  size_t ndef;
  size_t max_small;
  bool telemetry;
  unsigned uses;
} slot;

static slot slots[NSLOTS];
static fz state;

static void slot_destroy(slot *sl) {
  fz *f = &state;
  uint64_t allocs = 0, frees = 0, mapped = 0, recorded = 0, outstanding = 0;
  if (sl->pool == NULL)
    return;
  aa_pool_destroy(sl->pool);
  aa_backend_host_counts(sl->b, &allocs, &frees, &mapped);
  aa_backend_host_event_counts(sl->b, &recorded, &outstanding);
  REQUIRE(mapped == 0);
  REQUIRE(allocs == frees);
  REQUIRE(outstanding == 0);
  aa_backend_destroy(sl->b);
  sl->pool = NULL;
  sl->b = NULL;
}

static bool slot_make(slot *sl, unsigned k) {
  aa_pool_config cfg;
  if (aa_backend_host_new(&sl->b) != AA_OK)
    return false;
  /* expandable pools stitch (docs/core.md "Stitching") on an aliasable
   * backend in half the inputs' slots */
  bool stitch = (k & 1) && !(k & 2) && (k & 8);
  if (stitch && aa_backend_host_aliasable(sl->b) != AA_OK) {
    aa_backend_destroy(sl->b);
    sl->b = NULL;
    return false;
  }
  aa_pool_config_init(&cfg);
  cfg.backend = sl->b;
  cfg.name = "fuzz";
  cfg.slab_size = (k & 1) ? (64u << 10) : (2u << 20);
  cfg.max_small = (k & 1) ? (32u << 10) : (1u << 20);
  cfg.classes_per_doubling = (k & 1) ? 2 : 4;
  cfg.large_mode = (k & 2) ? AA_LARGE_PASSTHROUGH : (k & 1) ? AA_LARGE_EXPANDABLE
                                                            : AA_LARGE_CACHE;
  cfg.large_cache_bytes = (k & 2) ? 0 : (8u << 20);
  cfg.tcache_blocks = (k & 4) ? 2 : 32;
  cfg.tcache_bytes = (k & 4) ? (256u << 10) : (4u << 20);
  cfg.telemetry = (k & 4) == 0;
  cfg.limit_bytes = 256u << 20; /* bounds what one input can reserve */
  /* with new pages for what the holes lack (large_stitch 2) where the
   * slots have small thread caches: half the stitching ones */
  cfg.large_stitch = stitch ? ((k & 4) ? 2 : 1) : 0;
  /* the learned plan in the cache and expandable slots with small thread
   * caches (a quarter of the slots, with and without stitching) */
  cfg.large_plan = !(k & 2) && (k & 4) ? AA_LARGE_PLAN_SYNC : 0; /* reproducible: inline */
  cfg.on_error = on_error;
  cfg.on_error_user = &state;
  if (aa_pool_new(&cfg, &sl->pool) != AA_OK) {
    aa_backend_destroy(sl->b);
    sl->b = NULL;
    return false;
  }
  sl->max_small = cfg.max_small;
  sl->telemetry = cfg.telemetry;
  sl->uses = 0;
  if (aa_pool_classes(sl->pool, sl->def, AA_MAX_CLASSES, &sl->ndef, NULL) != AA_OK)
    abort();
  return true;
}

/* Back to how slot_make left it; false when it cannot be (then the caller
 * makes the pool anew). */
static bool slot_reset(slot *sl) {
  aa_class_spec now[AA_MAX_CLASSES];
  size_t n = 0;
  aa_pool_set_trace(sl->pool, NULL, NULL);
  aa_pool_set_telemetry(sl->pool, sl->telemetry);
  aa_pool_set_limit(sl->pool, 256u << 20);
  aa_backend_host_hold_events(sl->b, false);
  if (aa_pool_set_classes(sl->pool, sl->def, sl->ndef) != AA_OK)
    return false;
  (void)aa_pool_release(sl->pool);
  if (aa_pool_classes(sl->pool, now, AA_MAX_CLASSES, &n, NULL) != AA_OK || n != sl->ndef)
    return false;
  for (size_t i = 0; i < n; i++)
    if (now[i].block_size != sl->def[i].block_size ||
        now[i].cache_limit != sl->def[i].cache_limit || now[i].prefill != sl->def[i].prefill)
      return false;
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz *f = &state;
  slot *sl;
  unsigned k;

  memset(f, 0, sizeof(*f));
  f->data = data;
  f->size = size;
  k = u8(f) % NSLOTS;
  sl = &slots[k];
  if (sl->pool == NULL && !slot_make(sl, k))
    return 0;
  f->b = sl->b;
  f->pool = sl->pool;
  f->max_small = sl->max_small;
  f->st0 = malloc(sizeof(*f->st0));
  REQUIRE(f->st0 != NULL);
  REQUIRE(aa_pool_stats_get(f->pool, f->st0) == AA_OK);
  REQUIRE(f->st0->bytes_in_use == 0 && f->st0->bytes_requested == 0);
  check_all(f);

  for (f->op_index = 0; f->op_index < MAX_OPS && f->pos < f->size; f->op_index++) {
    uint8_t op = u8(f);
    switch (op % 16) {
    case 0:
    case 1: /* small, up to max_small (and a little past it) */
      do_alloc(f, (size_t)u16(f) % (f->max_small + f->max_small / 4 + 1));
      break;
    case 2: /* large, up to 16 MiB */
      do_alloc(f, (size_t)u24(f));
      break;
    case 3:
    case 4:
      do_free(f, 0);
      break;
    case 5:
      do_free(f, 1);
      break;
    case 6:
      do_free(f, 2 + (op >> 4) % 3);
      break;
    case 7:
      do_foreign(f);
      break;
    case 8:
    case 9:
      do_class_op(f, (op >> 4) % 4);
      break;
    case 10:
    case 11:
      do_misc(f, (op >> 4) % 8);
      break;
    case 12:
      check_all(f);
      break;
    default: /* a burst of the same small size: hits the thread cache */
    {
      size_t sz = (size_t)u16(f) % (f->max_small + 1);
      for (int r = 0; r < 1 + (op >> 4); r++)
        do_alloc(f, sz);
      break;
    }
    }
  }
  check_all(f);

  /* Everything back: the pool ends empty. */
  if (f->held) {
    aa_backend_host_hold_events(f->b, false);
    f->held = false;
  }
  while (f->n > 0) {
    live *l = &f->blk[f->n - 1];
    REQUIRE(tag_ok(l));
    REQUIRE(aa_free(f->pool, l->p, l->req, l->stream) == AA_OK);
    f->n--;
  }
  check_all(f);
  if (!slot_reset(sl) || ++sl->uses >= SLOT_USES)
    slot_destroy(sl);
  else
    check_all(f);
  free(f->st0);
  f->st0 = NULL;
  return 0;
}
