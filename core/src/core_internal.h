/*
 * core_internal.h — private types of the allocator core, shared by the files
 * in core/src/. Nothing here is public; names shared across files are aa__.
 * The pool, its thread caches, the page map, the lock order, assertions and
 * the shared functions by file; each walled subsystem (the small path, the
 * large path, the size sampler) has a short header included here and a
 * private one of its own.
 *
 * Glossary (outermost first; docs/core.md has the full design):
 *   pool     -> the small path (small.h): class table, central free lists,
 *               slabs, blocks up to max_small
 *            -> the large path (large.h): segments cut into chunks
 *            -> the size sampler (sampler.h): what telemetry counts
 *   tcache   one per (thread, pool), in the pool's registry (tcache.c): the
 *            small path's bins (aa__stc), the large path's cache (aa__ltc)
 *            and the sampler's tables (aa__smp), each its owner's alone.
 *            Touched only by its owner thread without locks or atomic RMW.
 *   span     what the page map points at: a slab or a large segment.
 *   pagemap  two-level radix map from address>>16 (64 KiB granules) to spans;
 *            free finds its slab in O(1) through it.
 *
 * Files (each shared function below sits under the file that defines it;
 * a subsystem's own files list theirs in its private header):
 *   config.c     defaults, validation, the class ladder, large-mode names
 *   base_backend.c  backend calls with accounting (limit, counters, time)
 *   base_events.c   stream events, idle streams, record_stream's events
 *   base_misuse.c   misuse reports (assertion failures: util's debug.h)
 *   pool.c       pool life cycle, release/trim, the OOM retry, the setters
 *   small.c      the small path, a subsystem with its own state, locks and
 *                header (small.h, the only way in; struct aa__small and
 *                what its files share are in small_internal.h): life cycle
 *                and the class table; central.c central lists and slabs,
 *                small_tc.c the per-thread bins (aa__stc, in each tcache),
 *                small_stats.c its stats, walk and peaks, alloc.c aa_alloc
 *                (the bins' hit, the refill; the large path and the sampler
 *                through their headers), free.c aa_free, aa_record_stream,
 *                aa_block_size, aa_block_share
 *   large.c      the large path, a subsystem with its own state, lock and
 *                header (large.h, the only way in; struct aa__large and
 *                what its files share are in large_internal.h): alloc,
 *                free, record_stream, release, stats and the walk, over
 *                floors of its own (large_internal.h): large_chunk.c the
 *                chunk structures, large_stitch.c stitched ranges,
 *                large_seg.c segments and pages, large_give.c a block
 *                given back, large_ltc.c the per-thread large-block cache
 *                (aa__ltc, in each tcache), large_take.c placement,
 *                large_plan.c the learned plan; large_ipc.c a live block's
 *                backend memory for sharing (aa_block_share), large_check.c
 *                the AA_DEBUG 3 walk
 *   sampler.c    the size sampler, a subsystem with its own state and header
 *                (sampler.h; struct aa__sampler in sampler_internal.h): the
 *                per-thread size table, histogram and heavy hitters
 *                (aa__smp, first in each tcache), the dead threads' totals,
 *                its stats call
 *   tcache.c     the thread registry and the thread caches (made, synced,
 *                flushed, retired through each part's owner)
 *   trace.c      trace events and their sequence
 *   pagemap.c    address -> span
 *   stats.c      snapshots from the subsystems' stats calls, the histogram
 *                buckets, the account of the reserved bytes, the JSON writer
 *   inspect.c    aa_pool_reset_peaks, aa_pool_walk
 *   oom.c        the out-of-memory observer and its record
 *   common.c     error strings, the clock, a walk's entry
 *   backend_host.c  the host backend (its test hooks: test_hooks.h)
 *   managed_cap.c  the managed backend's safety cap, a pure function
 *                (managed_cap.h, outside this header; built without CUDA too)
 *   cuda/        the CUDA backends (cuda/cuda_internal.h); cuda_managed.c
 *                the managed-memory backend. Staging buffers and the packer,
 *                users of the pool's public API, are the transfer module's
 *                (transfer/), outside core.
 *
 * Layers, bottom first: a file uses what its own layer and the layers below
 * define, never what a higher layer defines (tools/check-layers.sh reads
 * this list and the object files: the ctest test_core_layers):
 *   layer 0 backend:  backend_host.c managed_cap.c cuda/cuda_common.c
 *                     cuda/cuda_device.c cuda/cuda_pinned.c cuda/cuda_managed.c
 *                     cuda/stub/cuda_stub.c
 *   layer 1 base:     common.c config.c pagemap.c base_backend.c base_events.c
 *                     base_misuse.c
 *   layer 2 block:    central.c large.c large_chunk.c large_stitch.c large_seg.c
 *                     large_give.c large_ltc.c large_take.c large_plan.c
 *                     large_ipc.c large_check.c
 *                     (the large path's own floors: large_internal.h)
 *   layer 3 cache:    small_tc.c sampler.c tcache.c trace.c
 *   layer 4 pool:     small.c small_stats.c pool.c alloc.c free.c stats.c inspect.c oom.c
 *
 * Walls (tools/check-layers.sh): a subsystem's private header and fields
 * are its own files' alone; every other file goes through its short header.
 * "wall name: private header, fields | the subsystem's files":
 *   wall large: large_internal.h large ltc | large.c large_chunk.c large_seg.c
 *               large_stitch.c large_give.c large_ltc.c large_take.c
 *               large_plan.c large_ipc.c large_check.c large.h
 *   wall small: small_internal.h small stc | small.c central.c small_tc.c
 *               small_stats.c alloc.c free.c small.h
 *   wall sampler: sampler_internal.h sampler smp runs bucket hitters countdown |
 *               sampler.c sampler.h
 *
 * Locks (outer before inner): g_mu (thread registry, global) -> the small
 * path's class_mu (class-table changes) -> pool->tc_mu (tcache list) ->
 * class->mu -> pool->map_mu; the small path's rs_mu (record_stream table)
 * and pool->set_mu (telemetry and trace settings) are taken alone.
 * The large path's own lock (large.h) is taken alone (or after class locks
 * in the release path), tc_mu after it; backend calls may be made under
 * class->mu or the large path's lock.
 */
#ifndef AA_CORE_INTERNAL_H
#define AA_CORE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "adaptalloc/core.h"

/* ------------------------------------------------------------ assertions */
/* aa__assert (AA_DEBUG >= 1), aa__assert_internal (>= 2) and
 * aa__assert_expensive (>= 3): util's, one definition for every module. */
#include "adaptalloc/internal/debug.h"

#define AA__LIKELY(x) __builtin_expect(!!(x), 1)
#define AA__UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Relaxed atomics for per-thread counters: a load and a store by the owner
 * (plain mov/add), loads by readers. No read-modify-write. */
#define AA__RLX memory_order_relaxed
#if defined(__SANITIZE_THREAD__)
#define AA__TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AA__TSAN 1
#endif
#endif
static inline void aa__cadd(_Atomic uint64_t *c, uint64_t v) {
#if defined(__x86_64__) && !defined(AA__TSAN)
  /* The same as the load+store below, in one instruction (compilers do not
   * fuse an atomic load and store): the owner is the only writer and an
   * aligned 8-byte store is single-copy atomic on x86-64, so a reader sees
   * the old or the new value. TSan builds keep the C11 form it can see. */
  __asm__ __volatile__("addq %1, %0"
                       : "+m"(*(uint64_t *)c)
                       : "er"(v));
#else
  atomic_store_explicit(c, atomic_load_explicit(c, AA__RLX) + v, AA__RLX);
#endif
}
/* *c ^ v, read by the owner of *c (its only writer): on x86-64 outside TSan
 * one xor with a memory operand (an atomic load is never folded into one). */
static inline uint64_t aa__cxor(const _Atomic uint64_t *c, uint64_t v) {
#if defined(__x86_64__) && !defined(AA__TSAN)
  __asm__("xorq %1, %0"
          : "+r"(v)
          : "m"(*(const uint64_t *)c));
  return v;
#else
  return atomic_load_explicit((_Atomic uint64_t *)c, AA__RLX) ^ v;
#endif
}
static inline uint64_t aa__cget(const _Atomic uint64_t *c) {
  return atomic_load_explicit((_Atomic uint64_t *)c, AA__RLX);
}
static inline void aa__atomic_max(_Atomic uint64_t *m, uint64_t v) {
  uint64_t cur = atomic_load_explicit(m, AA__RLX);
  while (cur < v && !atomic_compare_exchange_weak_explicit(m, &cur, v, AA__RLX, AA__RLX)) {
  }
}

/* aa_hist_bucket, inline for the hot paths (stats.c has the public one). */
static inline unsigned aa__hist_bucket(size_t size) {
  if (size < 4)
    return (unsigned)size;
  unsigned l = 63u - (unsigned)__builtin_clzll((unsigned long long)size);
  unsigned b = 4u * (l - 1u) + (unsigned)((size >> (l - 2u)) & 3u);
  return b < AA_HIST_BUCKETS ? b : AA_HIST_BUCKETS - 1;
}

/* ------------------------------------------------------------ constants */
#define AA__GRANULE_SHIFT 16 /* page map granule: 64 KiB */
#define AA__GRANULE ((size_t)1 << AA__GRANULE_SHIFT)
#define AA__ADDR_BITS 48
#define AA__LEAF_BITS 14
#define AA__ROOT_BITS (AA__ADDR_BITS - AA__GRANULE_SHIFT - AA__LEAF_BITS)
#define AA__MAX_POOL_SLOTS 16 /* pools with thread caches at one time (TLS slots) */

/* pool->tflags */
enum { AA__TF_TELEMETRY = 1,
       AA__TF_TRACE = 2 };
/* ------------------------------------------------------------ spans */
enum { AA__SPAN_SLAB = 1,
       AA__SPAN_LARGE = 2 };

typedef struct aa__span {
  uintptr_t base, end; /* [base, end), end - base a multiple of 64 KiB */
  int kind;
} aa__span;

/* The subsystems' entry points and their per-thread parts: the small path
 * (aa__stc), the large path (aa__ltc), the size sampler (aa__smp). */
#include "large.h"
#include "sampler.h"
#include "small.h"

/* A thread cache: one per (thread, pool), registered in the pool's list
 * (tcache.c); each subsystem's per-thread part is embedded, its fields that
 * subsystem's alone (tools/check-layers.sh refuses a file outside it that
 * names the member). */
typedef struct aa__tcache {
  /* the size sampler's (sampler.h): first, so that its table is one
   * address mode from the cache and aa__smp_of is a cast */
  aa__smp smp;
  aa_pool *pool;
  _Atomic int dead;               /* its pool was destroyed (g_mu) */
  struct aa__tcache *next, *prev; /* pool's tcache list (tc_mu) */
  uint32_t epoch;                 /* the pool epoch the parts are in line with */
  uint64_t tid;
  /* the small path's bins and slab cache (small.h) */
  aa__stc stc;
  /* the large path's per-thread cache (large.h) */
  aa__ltc ltc;
} aa__tcache;
_Static_assert(offsetof(aa__tcache, smp) == 0, "aa__smp_of: the sampler's part comes first");

typedef struct aa__trace_cb {
  aa_trace_fn fn;
  void *user;
  struct aa__trace_cb *older;
  /* callbacks through this record under way: aa_pool_set_trace waits for
   * the record it replaces to reach 0 (aa__trace_at) */
  _Atomic uint32_t inflight;
} aa__trace_cb;

/* One 64 KiB granule: `lo` covers the granule's first byte up to offset
 * lo_end; `hi` starts at offset hi_start. The offsets make the lookup
 * independent of the span headers. */
typedef struct aa__pm_entry {
  _Atomic(aa__span *) lo;
  _Atomic(aa__span *) hi;
  _Atomic uint32_t lo_end, hi_start;
  uint64_t pad;
} aa__pm_entry;

typedef struct aa__pagemap {
  /* root slots that hold a leaf (map_mu), so that fini frees them without
   * scanning the 2^18 slots of the root */
  uint32_t *used;
  size_t nused, capused;
  _Atomic(aa__pm_entry *) root[(size_t)1 << AA__ROOT_BITS]; /* untouched pages stay unmapped */
} aa__pagemap;

struct aa_pool {
  char name[32];
  char region[AA_REGION_NAME_MAX + 1]; /* "" = none (aa_pool_config.region) */
  aa_backend *backend;
  aa_pool_config cfg; /* normalised copy (name points at this->name) */
  int slot;           /* thread-cache slot, -1 = none */
  int slot_ix;        /* slot, or AA__MAX_POOL_SLOTS (a NULL entry) when none */
  uint64_t id;
  bool has_events;

  _Atomic uint32_t epoch;
  /* the small path (small.h; its state is private to its files): the hot
   * path's size->slot table is behind it */
  struct aa__small *small;

  pthread_mutex_t map_mu;

  /* the thread registry: this pool's thread caches (tcache.c) */
  pthread_mutex_t tc_mu;
  aa__tcache *tcaches;

  /* the size sampler's totals (sampler.h; private to sampler.c) */
  struct aa__sampler *sampler;

  /* pool-level counters (slow paths, atomic RMW) */
  _Atomic uint64_t bytes_reserved, peak_reserved;
  _Atomic uint64_t out_bytes, peak_out_bytes, win_peak_out_bytes;
  _Atomic uint64_t backend_allocs, backend_frees, backend_failures;
  _Atomic uint64_t backend_ns; /* time inside those calls (aa__backend_*) */
  /* stream_query calls (aa__stream_idle) and those that found the stream
   * idle (each saved an event) */
  _Atomic uint64_t stream_queries, stream_idle;
  _Atomic uint64_t ooms, oom_retries, invalid_frees;
  _Atomic uint64_t last_oom_ms; /* wall clock of the last OOM (ms since 1970), 0: none */
  _Atomic size_t limit;
  /* aa_pool_share_limit: the pool whose limit this one's reservations
   * count against as well (set before the first, never changed), and on
   * that pool the bytes its sharers hold (reserved less its own) */
  aa_pool *limit_owner;
  _Atomic uint64_t sharers_reserved;
  _Atomic uint32_t sharers; /* pools ever made to share this one's limit */
  _Atomic bool telemetry;
  _Atomic uint32_t tflags; /* AA__TF_*: what the hot path must do */
  _Atomic(aa__trace_cb *) trace;
  aa__trace_cb *trace_all; /* every record ever set (set_mu) */
  pthread_mutex_t set_mu;  /* telemetry and trace settings */
  /* sampled tracing (trace.c), made at the first sampled setting and
   * freed with the pool */
  _Atomic(struct aa__tsample *) tsample;
  /* the OOM observer (oom.c): set and called under oom_mu */
  pthread_mutex_t oom_mu;
  aa_oom_fn oom_fn;
  void *oom_user;

  /* the large path (large.h; its state is private to large*.c) */
  struct aa__large *large;

  aa__pagemap map;
};

/* ------------------------------------------------------------ functions */
/* pagemap.c */
int aa__pm_init(aa__pagemap *m);
void aa__pm_fini(aa__pagemap *m);
int aa__pm_insert(aa_pool *pool, aa__span *s);
void aa__pm_remove(aa_pool *pool, aa__span *s);
static inline aa__span *aa__pm_lookup(const aa__pagemap *m, uintptr_t p) {
  if (AA__UNLIKELY(p >> AA__ADDR_BITS))
    return NULL;
  uintptr_t g = p >> AA__GRANULE_SHIFT;
  aa__pm_entry *leaf = atomic_load_explicit(&m->root[g >> AA__LEAF_BITS], memory_order_acquire);
  if (AA__UNLIKELY(leaf == NULL))
    return NULL;
  aa__pm_entry *e = &leaf[g & (((uintptr_t)1 << AA__LEAF_BITS) - 1)];
  uint32_t off = (uint32_t)(p & (AA__GRANULE - 1));
  aa__span *lo = atomic_load_explicit(&e->lo, memory_order_acquire);
  if (lo && off < atomic_load_explicit(&e->lo_end, AA__RLX))
    return lo;
  aa__span *hi = atomic_load_explicit(&e->hi, memory_order_acquire);
  if (hi && off >= atomic_load_explicit(&e->hi_start, AA__RLX))
    return hi;
  return NULL;
}

/* common.c: hands one walk entry to fn (aa_pool_walk); fn's answer. */
int aa__walk_emit(aa_walk_fn fn, void *user, uint32_t kind, uint32_t flags, uintptr_t addr,
                  size_t size, size_t req, size_t bs);

/* config.c: fills the config's zero fields with defaults and validates it
 * (AA_EINVAL); the pool's default class table (AA_EINVAL over
 * AA_MAX_CLASSES). */
int aa__config_normalise(const aa_pool_config *in, aa_pool_config *c);
int aa__config_ladder(const aa_pool_config *c, size_t *out, size_t *n);

/* base_backend.c: backend calls with accounting, limit and counters */
int aa__backend_alloc(aa_pool *pool, size_t size, void **out);
void aa__backend_free(aa_pool *pool, void *p, size_t size);
/* The same for one page of an expandable segment (limit, counters). */
int aa__backend_map(aa_pool *pool, void *addr, size_t size, void **handle);
void aa__backend_unmap(aa_pool *pool, void *addr, size_t size, void *handle);

/* base_misuse.c: counts a misuse and hands it to cfg.on_error. */
void aa__misuse(aa_pool *pool, aa_misuse what, const void *ptr, size_t size, const char *msg);

/* pool.c: release of what the pool caches; the out-of-memory retry */
size_t aa__release_cached(aa_pool *pool, bool sync);
/* Out of memory, no pool lock held: the first time (*retried false) counts a
 * retry, releases what the pool caches (synchronising) and returns true (try
 * again); after that, false. The one retry for the small and the large path
 * (alloc.c decides to retry; the layers below only report the failure). */
bool aa__oom_retry(aa_pool *pool, bool *retried);

/* base_events.c: the backend's stream events, both paths */
/* Queries events, releasing the completed ones (array compacted); 1 when
 * none is left pending. */
int aa__events_done(aa_pool *pool, void **ev, uint32_t *n);
/* Whether event ev is still pending, asked without releasing it (NULL: no).
 * For the account, which changes nothing. */
bool aa__event_pending(aa_pool *pool, void *ev);
/* Whether all work issued on `stream` so far has completed, by the
 * backend's stream_query (false when it has none, says pending or fails);
 * counted in the pool's stream_queries / stream_idle. The one check for the
 * small and the large path, asked before an event is recorded. */
bool aa__stream_idle(aa_pool *pool, aa_stream stream);
/* Releases one backend event; NULL is a no-op. The one release for the
 * small and the large path. */
void aa__event_release(aa_pool *pool, void *ev);
/* A block freed on `stream` whose work also ran on the record_stream'd
 * streams xs[0..nxs): records an event on each of those but `stream`, then,
 * when any was recorded, one on `stream`: into the array with own NULL, else
 * into *own (NULL when it cannot be made: the caller records it later).
 * Returns how many are in the array, which goes to *evs (the caller's), 0
 * when none is needed. When an event of the array cannot be made it waits
 * for the device instead (*synced true, 0 events): the block may be reused
 * at once. With own NULL the block is usable anywhere once all have
 * completed (the small path's stream lists); with own, it is a block freed
 * on `stream` once the array's have, usable elsewhere once *own has too (the
 * large path: as PyTorch's caching allocator, which waits for the other
 * streams only, so a side stream's block is not held for that stream's later
 * work). */
uint32_t aa__stream_events(aa_pool *pool, const aa_stream *xs, uint32_t nxs, aa_stream stream,
                           void **own, void ***evs, bool *synced);
/* The stream a record_stream'd block freed on `stream` is put back on with
 * no event: freed on the host pseudo-stream (the freer has no GPU work
 * behind it) with one recorded stream X, it is a block freed on X (usable
 * on X at once, elsewhere once X's work up to now is done; the stream lists
 * ask whether X is idle). Else `stream` itself (the events of
 * aa__stream_events decide). Small and large path. */
aa_stream aa__rec_free_stream(const aa_stream *xs, uint32_t nxs, aa_stream stream);

/* tcache.c: the thread registry and the thread caches */
/* This thread's cache of each pool slot, indexed by pool->slot_ix (the
 * last entry stays NULL: pools without a slot). */
extern _Thread_local aa__tcache *aa__tl_tc[AA__MAX_POOL_SLOTS + 1]
    __attribute__((tls_model("initial-exec")));
uint64_t aa__thread_id(void);
void aa__slot_acquire(aa_pool *pool);
/* Brings the cache's parts in line with the pool's epoch (it moved). */
void aa__tcache_sync(aa__tcache *tc);
/* Every block the cache holds back to its subsystem (small, large). */
void aa__tcache_flush_all(aa__tcache *tc);
/* The calling thread's live cache of this pool, or NULL; never makes one. */
aa__tcache *aa__tcache_mine(aa_pool *pool);
/* The calling thread's cache of this pool, made on first use; NULL when the
 * pool has no slot or memory is short. */
aa__tcache *aa__tcache_get(aa_pool *pool);
void aa__pool_drop_tcaches(aa_pool *pool);
void aa__tcache_flush_mine(aa_pool *pool);

/* trace.c: trace events and their sequence */
void aa__trace(aa_pool *pool, char op, const void *p, size_t size, aa_stream s);
/* The next trace sequence number (process-wide, from 1). */
uint64_t aa__trace_seq_next(void);
/* aa__trace with a sequence number taken earlier (a free takes it while it
 * still owns the block). */
void aa__trace_at(aa_pool *pool, char op, const void *p, size_t size, aa_stream s, uint64_t seq);
/* A traced free's number, taken before the block can go to another thread;
 * 0 when the free is not traced (sampling, and the block's allocation was
 * not). While sampling, the block leaves the traced set here (*claimed
 * true): a free that then fails gives it back (aa__trace_free_undo). */
uint64_t aa__trace_free_begin(aa_pool *pool, const void *p, bool *claimed);
void aa__trace_free_undo(aa_pool *pool, const void *p);
/* Sampling's settings (pool.c's aa_pool_set_trace_sampled, with no trace
 * callback set, so no event is under way): makes the table on first use
 * (AA_ENOMEM), clears it, sets the rule. every 1 with min_bytes 0: off. */
int aa__tsample_configure(aa_pool *pool, uint32_t every, uint64_t min_bytes);
void aa__tsample_free(aa_pool *pool);

/* oom.c: the out-of-memory observer */
/* Counts a failed request (pool->ooms) and, when an observer is set, reports
 * what the pool looked like. No pool lock held; after the retry failed. */
void aa__oom_fail(aa_pool *pool, size_t size, aa_stream stream);

#endif /* AA_CORE_INTERNAL_H */
