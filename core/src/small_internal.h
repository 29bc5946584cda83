/*
 * small_internal.h — what the small path's files share (requests up to
 * max_small; small.h is the rest of core's way in). No file outside the
 * small path includes this header (tools/check-layers.sh).
 *
 * Glossary: the small path -> class table (AA_MAX_CLASSES fixed slots, a
 * size->slot table) -> per class: central free lists (per stream), slabs ->
 * slab: one backend region carved into equal blocks; its header (state word
 * + requested size per block) lives on the host -> block: what aa_alloc
 * returns, never read or written by us. A thread's bins (aa__stc, small.h)
 * hold blocks between the user and the central lists.
 *
 * Files (each shared function below sits under the file that defines it):
 *   small.c        life cycle, the class table and its API, release
 *   central.c      block lists, central free lists, slabs (carve, release,
 *                  prefill, retire)
 *   small_tc.c     the per-thread bins: kept in line with their classes,
 *                  flushed, made room in, folded when they go
 *   small_stats.c  the classes' counters summed, stats, the walk, peaks
 *   alloc.c        aa_alloc: the thread-cache hit, the refill, the large
 *                  path's entry (large.h), the sampling (sampler.h)
 *   free.c         aa_free, aa_record_stream, aa_block_size
 *
 * Locks: class_mu (class-table changes) -> tc_mu (the thread registry,
 * pool-level) -> class->mu -> pool->map_mu; rs_mu alone.
 */
#ifndef AA_SMALL_INTERNAL_H
#define AA_SMALL_INTERNAL_H

#include "core_internal.h"

#define AA__RS_BUCKETS 1024

/* Per-block metadata word in the slab header: the requested size in the
 * low 30 bits, USED and RECORDED (record_stream'd) flags on top; 0 = free. */
#define AA__M_USED (1u << 30)
#define AA__M_REC (1u << 31)
#define AA__M_SIZE (AA__M_USED - 1u)
_Static_assert(AA__M_SIZE == AA__SMP_RUN_SIZE_MAX, "the sampler counts every small size");

/* Class slot states. */
enum { AA__CLS_EMPTY = 0,
       AA__CLS_ACTIVE = 1,
       AA__CLS_RETIRING = 2 };

typedef struct aa__slab aa__slab;

/* A free block as the lists hold it: the address and its slab. */
typedef struct aa__blk {
  aa__slab *s;
  uint32_t idx;
} aa__blk;

/* A growable stack of free blocks. */
typedef struct aa__blist {
  aa__blk *v;
  uint32_t n, cap;
} aa__blist;

struct aa__slab {
  aa__span h;
  aa__slab *next, *prev; /* the class's slab list */
  uint32_t cls;          /* class slot (immutable while the slab lives) */
  uint32_t nblocks;
  size_t block_size;
  uint64_t div_magic;      /* (off>>9) * magic >> 42 == block index */
  uint32_t nfree;          /* blocks of this slab in central lists (incl. pending) */
  uint32_t npending;       /* of which waiting for stream events */
  int dying;               /* marked for release (class_release) */
  _Atomic uint32_t meta[]; /* per block: AA__M_* | requested size */
};

/* Blocks freed on one stream. fresh: no event yet (usable on `stream` only).
 * infl: an event (ev) was recorded on `stream` after they were freed; usable
 * on `stream`, and on any stream once ev completes. */
typedef struct aa__slist {
  aa_stream stream;
  aa__blist fresh;
  aa__blist infl;
  void *ev;
} aa__slist;

/* A block freed with record_stream'd extra streams: usable anywhere once
 * every event completed. */
typedef struct aa__multi {
  aa__blk b;
  uint32_t nev;
  void **ev;
} aa__multi;

typedef struct aa__class {
  pthread_mutex_t mu;
  _Atomic uint32_t state; /* AA__CLS_* */
  _Atomic uint32_t gen;   /* bumped by every change to this slot */
  _Atomic size_t block_size;
  _Atomic uint32_t cache_limit; /* 0 = pool default */
  _Atomic uint32_t prefill;
  /* under mu: */
  uint32_t nblocks; /* blocks per slab */
  uint64_t div_magic;
  aa__slab *slabs; /* all slabs of this class */
  uint64_t nslabs;
  uint64_t nfree;    /* blocks in central lists (incl. pending) */
  uint64_t npending; /* blocks waiting on events */
  uint64_t peak_out; /* high-water of blocks out of the central lists */
  aa__blist any;     /* usable on every stream */
  aa__slist *sl;     /* per-stream lists */
  uint32_t nsl, capsl;
  aa__multi *multi;
  uint32_t nmulti, capmulti;
} aa__class;

/* Counters folded from dead threads (and from the no-tcache path). */
typedef struct aa__ccount {
  _Atomic uint64_t allocs, frees, hits, misses, req_add, req_sub;
} aa__ccount;

/* Counter baselines of a slot (its counts before the current class moved
 * in), and the totals of classes that left; under tc_mu. */
typedef struct aa__cbase {
  uint64_t frees, hits, misses, req_add, req_sub;
} aa__cbase;

typedef struct aa__rsrec {
  void *p;
  aa_stream *s;
  uint32_t n;
  struct aa__rsrec *next;
} aa__rsrec;

/* The small path's state: one per pool (pool->small), made by
 * aa__small_new, one allocation with its size->slot table. */
typedef struct aa__small aa__small;
struct aa__small {
  pthread_mutex_t class_mu; /* class-table changes */
  int slots_reserved;       /* empty slots held by prepared tables (class_mu) */
  _Atomic uint64_t table_version;
  size_t ntable;    /* entries of size2cls */
  size_t hdr_align; /* slab headers are aligned to (and as large as) this */
  aa__class classes[AA_MAX_CLASSES];
  /* counters (tc_mu, or atomics from the no-tcache path) */
  aa__ccount dead[AA_MAX_CLASSES];
  aa__cbase base[AA_MAX_CLASSES];
  aa__cbase retired;
  /* record_stream of small blocks */
  pthread_mutex_t rs_mu;
  aa__rsrec *rs[AA__RS_BUCKETS];
  _Atomic uint8_t size2cls[]; /* ntable entries, index (size-1)>>9 */
};

/* The slab of a block's metadata word. */
static inline aa__slab *aa__slab_of(const aa_pool *pool, const _Atomic uint32_t *m) {
  return (aa__slab *)((uintptr_t)m & ~(uintptr_t)(pool->small->hdr_align - 1));
}

/* A block's index in its slab from its offset (one multiply by the slab's
 * division magic). */
static inline uint32_t aa__slab_index(const aa__slab *s, uintptr_t off) {
  return (uint32_t)(((uint64_t)(off >> 9) * s->div_magic) >> 42);
}

/* A block's address, and a block as a bin holds it and back (inline: the
 * alloc, free and bin paths). */
static inline void *aa__blk_ptr(aa__blk b) {
  return (void *)(b.s->h.base + (uintptr_t)b.idx * b.s->block_size);
}

static inline aa__blk aa__item_blk(const aa_pool *pool, aa__bitem it) {
  aa__slab *s = aa__slab_of(pool, it.m);
  return (aa__blk){s, (uint32_t)(it.m - s->meta)};
}

static inline aa__bitem aa__blk_item(aa__blk b) {
  return (aa__bitem){aa__blk_ptr(b), &b.s->meta[b.idx]};
}

/* ------------------------------------------------------------ functions */
/* central.c: block lists, central lists, slabs */
/* Puts n blocks freed on `stream` on the class's central lists. Under c->mu. */
void aa__central_push(aa_pool *pool, aa__class *c, const aa__blk *v, uint32_t n,
                      aa_stream stream);
/* Takes up to `want` blocks off the end of list l. Under c->mu. */
uint32_t aa__central_take(aa__class *c, aa__blist *l, aa__blk *out, uint32_t want);
/* Up to `want` blocks usable on `stream` now. Under c->mu. */
uint32_t aa__central_pop(aa_pool *pool, aa__class *c, aa_stream stream, aa__blk *out,
                         uint32_t want);
/* Of the class's blocks waiting for events (npending), those whose events
 * are still pending when asked now (none is released or recorded: the
 * account, aa_pool_account_get). Under c->mu. */
uint64_t aa__central_held_now(aa_pool *pool, const aa__class *c);
/* Carves one new slab into the class's `any` list. Under c->mu. */
int aa__carve(aa_pool *pool, aa__class *c);
size_t aa__class_release(aa_pool *pool, aa__class *c, size_t want, bool keep_prefill);
void aa__class_destroy(aa_pool *pool, aa__class *c);
int aa__class_prefill(aa_pool *pool, aa__class *c);
void aa__retire_check(aa_pool *pool, aa__class *c);

/* small_tc.c: the per-thread bins */
/* Returns the bin's blocks [0, n) to the central lists. Under c->mu. */
void aa__bin_flush_n(aa_pool *pool, aa__tcache *tc, aa__bin *bin, aa__class *c, uint32_t n);
/* Brings a bin in line with its class slot. Under c->mu. */
void aa__bin_sync(aa_pool *pool, aa__tcache *tc, aa__bin *bin, aa__class *c);
/* The cache is over its byte budget: gives blocks back until half is free. */
void aa__stc_make_room(aa_pool *pool, aa__tcache *tc);

/* small_stats.c: the classes' counters */
/* Moves a slot's counts so far into the retired totals (its next class
 * starts at 0). Takes tc_mu. */
void aa__slot_rebase(aa_pool *pool, int slot);

/* free.c: the record_stream table at destroy */
void aa__rs_destroy(aa_pool *pool);

#endif /* AA_SMALL_INTERNAL_H */
