/*
 * large.h — the large path, as the rest of core sees it: requests above
 * max_small, served from segments (fixed or an expandable reservation) cut
 * into chunks. Its state (struct aa__large: bins, segments, the chunk
 * records, its lock and counters) is private to large*.c (large_internal.h);
 * every other file reaches it through the entry points below, and
 * tools/check-layers.sh refuses a file outside large*.c that includes
 * large_internal.h or reads a thread cache's `ltc` fields.
 *
 * Ownership: aa__large_new makes the pool's large path (pool->large) from
 * the pool's normalised config; aa__large_destroy gives every segment back
 * and frees it, after every thread cache's held blocks went back
 * (aa__ltc_flush). Blocks handed out by aa__large_alloc belong to the caller
 * until aa__large_free or aa__ltc_free.
 *
 * Locking: each entry point takes the large path's own lock itself; none is
 * called with it held. The lock is taken alone, or after class locks (the
 * release path); the large path takes tc_mu after it (aa__lg_ltc_reclaim,
 * aa__large_stats_get).
 */
#ifndef AA_LARGE_H
#define AA_LARGE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/core.h"

typedef struct aa__tcache aa__tcache;
struct aa__span;
struct aa__chunk;

#define AA__LTC_N 1 /* large blocks a thread caches (see aa__ltc) */
/* ...and their bytes at most: memory only this thread reuses until another
 * thread's locked request takes it back (large_ltc.c) */
#define AA__LTC_MAX_BYTES ((size_t)64 << 20)

/* A thread's large-block cache, embedded in its aa__tcache (large_ltc.c):
 * blocks this thread allocated from the large path (so that its own free
 * finds the chunk without the lock) and blocks it freed and holds for an
 * exact-size reuse on the same stream. Owner only, but for the counters.
 * Its fields are the large path's alone. */
typedef struct aa__ltc {
  struct aa__ltc_live {
    void *p;
    struct aa__chunk *c;
    uint64_t state; /* the chunk's state word when allocated */
  } live[AA__LTC_N];
  struct aa__ltc_held {
    void *p;
    struct aa__chunk *c;
    uint64_t state;
    size_t req, size; /* the chunk's, copied while it was this thread's */
    aa_stream stream;
  } held[AA__LTC_N];
  /* held[i].c for other threads (NULL past nheld): a thread whose request
   * would take new memory takes held blocks back (aa__lg_ltc_reclaim) */
  _Atomic(struct aa__chunk *) pub[AA__LTC_N];
  /* the chunk and state word a reclaim walk last saw in pub[i] (tc_mu): a
   * block still held with the same word at the next walk sat idle */
  struct aa__chunk *seen_c[AA__LTC_N];
  uint64_t seen[AA__LTC_N];
  uint32_t nheld;
  uint32_t epoch;
  size_t held_bytes;
  /* large blocks this thread handed out and took back without the lock,
   * and the block and requested bytes it holds now (stats) */
  _Atomic uint64_t allocs, frees, held_block, held_req;
} aa__ltc;

/* What the large path reports (aa__large_stats_get), read at one moment. */
typedef struct aa__large_stats {
  uint64_t in_use;                       /* bytes of live chunks, net of threads' held blocks */
  uint64_t req;                          /* bytes asked for by those chunks' owners */
  uint64_t reserved;                     /* bytes the backend holds for the large path */
  uint64_t segments;                     /* segments (an expandable reservation counts one) */
  uint64_t allocs;                       /* blocks handed out, the threads' lock-free ones too */
  uint64_t frees;                        /* blocks given back, likewise */
  uint64_t misses;                       /* allocations that called the backend */
  uint64_t settled;                      /* free chunks made usable everywhere on the way to growing */
  uint64_t stream_waits;                 /* pending free chunks reused by a stream_wait */
  uint64_t pages_mapped, pages_unmapped; /* expandable: pages so far */
  uint64_t page_bytes;                   /* expandable: the mapping granularity, else 0 */
  uint64_t held;                         /* bytes threads' caches hold (freed, not in use) */
  uint64_t held_reclaims;                /* held blocks other threads took back */
  /* with `account` only: free chunk bytes that are mapped, usable now on
   * some stream (holes) or waiting for record_stream'd streams' events */
  uint64_t holes, holds;
  /* stitching (large_stitch.c): ranges and their bytes now; ranges made,
   * requests a kept range served again, ranges dissolved; alias map and
   * unmap calls */
  uint64_t stitched_ranges, stitched_bytes, stitches, stitch_hits, stitch_dissolved;
  uint64_t stitch_dormant, stitch_rests, stitch_wakes;
  uint64_t alias_maps, alias_unmaps;
  uint64_t alias_runs;       /* ranges whose aliases were made in one call (map_alias_run) */
  uint64_t stitch_new_bytes; /* mapped new for ranges the holes left short (stitch_grow) */
  uint64_t alias_ns;         /* time inside alias calls (the pool's clock) */
  uint64_t stitch_deferred;  /* requests refused a new range: the time budget spent */
  /* the learned placement (large_plan.c): its state (AA_PLAN_*), requests
   * per period, arena bytes, bytes live in it, requests served at their
   * planned offsets and not, plans adopted, dropped and refused (the
   * window's replay said they would not lower peak reserved), and the bytes
   * the adopted one saves by that replay */
  uint64_t plan_state, plan_period, plan_bytes, plan_live;
  uint64_t plan_hits, plan_misses, plans_adopted, plans_dropped, plans_refused, plan_saved;
  /* planning's cost: the last plan's time, the longest stall of the
   * allocating thread, plans made inline for want of the helper thread,
   * plans from the helper discarded as stale (ns, ns, counts) */
  uint64_t plan_ns, plan_stall_ns, plans_inline, plans_stale;
} aa__large_stats;

/* Life cycle (pool.c). aa__large_new reads the pool's normalised config and
 * backend (an expandable mode without usable virtual memory falls back to
 * AA_LARGE_CACHE in pool->cfg). AA_ENOMEM. */
int aa__large_new(aa_pool *pool);
void aa__large_destroy(aa_pool *pool);

/* NULL when out of memory; *retry true when a backend call refused, so that
 * releasing what the pool caches may help (the caller's aa__oom_retry). */
void *aa__large_alloc(aa_pool *pool, aa__tcache *tc, size_t size, aa_stream stream,
                      bool *retry);
/* The block at p in span sp (a large span of the page map). */
int aa__large_free(aa_pool *pool, struct aa__span *sp, void *p, size_t size, aa_stream stream);
size_t aa__large_block_size(aa_pool *pool, struct aa__span *sp, const void *p);
int aa__large_record(aa_pool *pool, struct aa__span *sp, void *p, aa_stream stream);
/* large_ipc.c: the backend memory under the live block holding p (span sp),
 * for aa_block_share: pieces as core.h's aa_share_piece, at most cap
 * written, *n the count (AA_ERANGE past cap); AA_EINVAL for no live block. */
int aa__large_share(aa_pool *pool, struct aa__span *sp, const void *p, aa_share_piece *pieces,
                    size_t cap, size_t *n, void **block);

/* Releases cached large memory (up to `want` bytes). `forget`: an explicit
 * release (aa_pool_release): the pages it unmaps stop counting as touched
 * for placement; a trim's or an OOM retry's keep counting, so the next
 * requests land where they did before. */
size_t aa__large_release(aa_pool *pool, size_t want, bool forget);

/* The large path's figures; with `account`, its free bytes split into
 * holes and holds too (a walk of the free bins; the events are asked, none
 * is recorded or released). */
void aa__large_stats_get(aa_pool *pool, bool account, aa__large_stats *out);
/* Bytes of live large chunks, net of nothing (cheap: aa__pool_in_use). */
uint64_t aa__large_in_use(aa_pool *pool);
/* Walks the segments (an expandable one as a segment per run of mapped
 * pages) and their chunks, as aa_pool_walk_large documents. */
int aa__large_walk(aa_pool *pool, aa_walk_fn fn, void *user);

/* Settings that can change on a live pool. map_runs: expandable only
 * (ignored otherwise); stream_wait: used only when the backend can. */
void aa__large_set_map_runs(aa_pool *pool, bool on);
void aa__large_set_stream_wait(aa_pool *pool, bool on);
/* aa_pool_set_clock's, under the large path's lock. */
void aa__large_set_clock(aa_pool *pool, uint64_t (*now)(void *user), void *user);

/* large_ltc.c: the thread's large-block cache: an exact-size reuse (NULL on
 * a miss), a lock-free free of a block this thread allocated (false: take
 * the locked path), giving every held block back (release, epoch change,
 * exit), a dying thread's counters into the pool's (tc_mu held), and a
 * cache whose pool was destroyed emptied (the destroy took every chunk). */
void *aa__ltc_alloc(aa_pool *pool, aa__tcache *tc, size_t size, aa_stream stream);
bool aa__ltc_free(aa_pool *pool, aa__tcache *tc, void *p, size_t size, aa_stream stream);
void aa__ltc_flush(aa_pool *pool, aa__tcache *tc);
void aa__ltc_fold_dead(aa_pool *pool, aa__tcache *tc);
void aa__ltc_forget_all(aa__tcache *tc);

#endif /* AA_LARGE_H */
