/*
 * small.h — the small path, as the rest of core sees it: requests up to
 * max_small, served in blocks of size classes carved from slabs. Its state
 * (struct aa__small: the class table and its lock, the size->slot table,
 * each class's central lists and slabs, the record_stream table, the
 * classes' counters) is private to the small path's files
 * (small_internal.h); every other file reaches it through the entry points
 * below, and tools/check-layers.sh refuses a file outside them that includes
 * small_internal.h or names a pool's `small` or a thread cache's `stc`.
 *
 * The small path's files: small.c (life cycle, the class-table API),
 * central.c (central lists, slabs), small_tc.c (the per-thread bins),
 * small_stats.c (its stats, walk and peaks), alloc.c and free.c (aa_alloc
 * and aa_free: the thread-cache hit is its bins'; they hand the large
 * path's requests to large.h and the sampling to sampler.h).
 *
 * Ownership: aa__small_new makes the pool's small path (pool->small) from
 * the pool's normalised config; aa__small_destroy gives every slab back and
 * frees it, after every thread cache's bins were dropped (aa__stc_fold_dead).
 *
 * Locking: each entry point takes the small path's locks itself (its
 * class-table lock, then a class's; tc_mu, the thread registry's, between
 * the two); none is called with one of them held.
 */
#ifndef AA_SMALL_H
#define AA_SMALL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/core.h"

typedef struct aa__tcache aa__tcache;
struct aa__slab;

/* A block in a thread-cache bin: its address and its metadata word (the slab
 * header is aligned to the small path's hdr_align, so the slab is found from
 * `m`). */
typedef struct aa__bitem {
  void *p;
  _Atomic uint32_t *m;
} aa__bitem;

/* One bin of a thread cache: free blocks of one class, all freed on (or
 * refilled for) `stream`. */
typedef struct aa__bin {
  uint32_t n, lim, cap, gen;
  size_t bsize;
  aa_stream stream;
  aa__bitem *items;
  /* this thread's counters for the class */
  _Atomic uint64_t frees, hits, misses, req_add, req_sub;
  /* to 128 bytes: &bins[k] is one shift */
  uint8_t pad[128 - 4 * sizeof(uint32_t) - sizeof(size_t) - sizeof(aa_stream) -
              sizeof(aa__bitem *) - 5 * sizeof(uint64_t)];
} aa__bin;
_Static_assert(sizeof(aa__bin) == 128, "aa__bin is 128 bytes");

/* A thread's small-block cache, embedded in its aa__tcache as `stc`
 * (small_tc.c): one bin per class slot, its byte budget, and the one-entry
 * slab cache of the free path (the slab of the last fast free, used while
 * p - sc_base < sc_size; sc_size 0 = empty; cleared by aa__stc_sync, and a
 * slab's release moves the pool epoch first, so a cached slab is never used
 * after its header is freed). Owner only, but for the counters. Its fields
 * are the small path's alone. */
typedef struct aa__stc {
  uintptr_t sc_base;
  size_t sc_size;
  struct aa__slab *sc_slab;
  aa__bin *sc_bin; /* &bins[sc_slab's class] */
  size_t cached_bytes;
  size_t max_bytes; /* cfg.tcache_bytes */
  uint32_t sweep;   /* where the make-room sweep starts */
  aa__bin bins[AA_MAX_CLASSES];
} aa__stc;

/* What the small path reports (aa__small_stats_get). */
typedef struct aa__small_stats {
  uint64_t table_version; /* the class table's version */
  /* the active and retiring classes, ascending block size (a retiring
   * class before an active twin) */
  uint32_t nclasses;
  aa_class_stats classes[AA_MAX_CLASSES];
  /* every small request so far, the classes that left included */
  uint64_t allocs, frees, hits, misses;
  uint64_t in_use, req; /* the classes' bytes in use and asked for */
  uint64_t pending;     /* blocks waiting for stream events */
  /* with `account` only (aa_pool_account's parts): requested, rounding,
   * free slots of carved slabs, blocks whose event is still pending, and
   * slab tails that make no whole block */
  uint64_t acc_requested, acc_rounding, acc_slab_free, acc_holds, acc_tails;
} aa__small_stats;

/* Life cycle (pool.c): the default class table from the pool's normalised
 * config; AA_ENOMEM / AA_EINVAL. Destroy: no thread cache holds blocks. */
int aa__small_new(aa_pool *pool);
void aa__small_destroy(aa_pool *pool);

/* Releases slabs whose blocks are all free, up to `want` bytes; with
 * keep_prefill a class keeps its prefill's blocks (a trim). Bytes released. */
size_t aa__small_release(aa_pool *pool, size_t want, bool keep_prefill);
/* Bytes of blocks out of the pool now, from the counters (cheap). */
uint64_t aa__small_in_use(aa_pool *pool);

/* small_stats.c: the small path's figures; with `account`, its bytes split
 * as aa_pool_account_get reports them. Takes tc_mu, then each class's lock. */
void aa__small_stats_get(aa_pool *pool, bool account, aa__small_stats *out);
/* Walks the slabs and their blocks, as aa_pool_walk documents. */
int aa__small_walk(aa_pool *pool, aa_walk_fn fn, void *user);
void aa__small_reset_peaks(aa_pool *pool);

/* small_tc.c: a thread's bins. init: a new cache; sync: the pool's epoch
 * moved (bins in line with their classes, slab cache emptied); flush: every
 * block back to the central lists; fold_dead: a cache that goes (its thread
 * exits, flushed, or its pool is destroyed, blocks dropped): its counters
 * into the small path's dead totals and its bins freed (tc_mu held). */
void aa__stc_init(aa_pool *pool, aa__tcache *tc);
void aa__stc_sync(aa_pool *pool, aa__tcache *tc);
void aa__stc_flush(aa_pool *pool, aa__tcache *tc);
void aa__stc_fold_dead(aa_pool *pool, aa__tcache *tc);

#endif /* AA_SMALL_H */
