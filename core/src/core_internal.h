/*
 * core_internal.h — private types of the allocator core, shared by the files
 * in core/src/. Nothing here is public; names shared across files are aa__.
 * One concern, the core's one private header (its glossary, structs, lock
 * order, assertions and the shared functions by file), though it runs past
 * 600 lines.
 *
 * Glossary (outermost first; docs/core.md has the full design):
 *   pool     -> class table (AA_MAX_CLASSES fixed slots, a size->slot table)
 *            -> per class: central free lists (per stream), slabs
 *            -> slab: one backend region carved into equal blocks; its header
 *               (state byte + requested size per block) lives on the host
 *            -> block: what aa_alloc returns; never read or written by us
 *   tcache   one per (thread, pool): a bounded stack of free blocks per class,
 *            tagged by stream, plus this thread's counters. Touched only by
 *            its owner thread without locks or atomic RMW.
 *   span     what the page map points at: a slab or a large segment.
 *   pagemap  two-level radix map from address>>16 (64 KiB granules) to spans;
 *            free finds its slab in O(1) through it.
 *   large    requests above max_small: segments split/coalesced best-fit.
 *
 * Files (each shared function below sits under the file that defines it):
 *   config.c     defaults, validation, the class ladder, large-mode names
 *   base_backend.c  backend calls with accounting (limit, counters, time)
 *   base_events.c   stream events, idle streams, record_stream's events
 *   base_misuse.c   misuse reports (assertion failures: util's debug.h)
 *   pool.c       class slots, pool life cycle, release/trim, the OOM retry
 *   central.c    block lists, central free lists, slabs (carve, release,
 *                prefill, retire)
 *   tcache.c     thread registry, thread caches (bins, sync, flush, retire)
 *   telemetry.c  heavy hitters, dead-thread folding, trace events
 *   alloc.c      aa_alloc: the tcache hit, the refill, request counting
 *   free.c       aa_free, aa_record_stream, aa_block_size, aa_block_share
 *   large.c      the large path, a subsystem with its own state, lock and
 *                header (large.h, the only way in; struct aa__large and
 *                what its files share are in large_internal.h): alloc,
 *                free, record_stream, the chunk structures, stats and the
 *                walk; large_seg.c segments, pages and trimming,
 *                large_ltc.c the per-thread large-block cache (aa__ltc, in
 *                each tcache), large_ipc.c a live block's backend memory
 *                for sharing (aa_block_share), large_check.c the AA_DEBUG 3 walk
 *   pagemap.c    address -> span
 *   stats.c      snapshots, the histogram, per-slot counter baselines, the
 *                account of the reserved bytes
 *   inspect.c    aa_pool_reset_peaks, aa_pool_walk
 *   oom.c        the out-of-memory observer and its record
 *   common.c     error strings, the clock, a walk's entry
 *   backend_host.c  the host backend (its test hooks: test_hooks.h)
 *   pack_copy.c  the packer's parallel gather copy (pack_copy.h, outside
 *                this header; built without CUDA too, for its test)
 *   managed_cap.c  the managed backend's safety cap, a pure function
 *                (managed_cap.h, outside this header; built without CUDA too)
 *   cuda/        the CUDA backends (cuda/cuda_internal.h); cuda_managed.c
 *                the managed-memory backend
 *
 * Layers, bottom first: a file uses what its own layer and the layers below
 * define, never what a higher layer defines (tools/check-layers.sh reads
 * this list and the object files: the ctest test_core_layers):
 *   layer 0 backend:  backend_host.c pack_copy.c managed_cap.c cuda/cuda_common.c
 *                     cuda/cuda_device.c cuda/cuda_pinned.c cuda/cuda_managed.c
 *                     cuda/stub/cuda_stub.c
 *   layer 1 base:     common.c config.c pagemap.c base_backend.c base_events.c
 *                     base_misuse.c
 *   layer 2 block:    central.c large.c large_seg.c large_ltc.c large_stitch.c large_plan.c
 *                     large_ipc.c large_check.c
 *   layer 3 cache:    tcache.c telemetry.c
 *   layer 4 pool:     pool.c alloc.c free.c stats.c inspect.c oom.c
 *   layer 5 transfer: cuda/cuda_transfer.c
 *
 * Walls (tools/check-layers.sh): a subsystem's private header and fields
 * are its own files' alone; every other file goes through its short header.
 * "wall name: private header, fields | the subsystem's files":
 *   wall large: large_internal.h large ltc | large.c large_seg.c large_stitch.c
 *               large_plan.c large_ltc.c large_ipc.c large_check.c large.h
 *
 * Locks (outer before inner): g_mu (thread registry, global) -> pool->class_mu
 * (class-table changes) -> pool->tc_mu (tcache list) -> class->mu -> pool->map_mu.
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
#define AA__HH_SLOTS 256      /* per-thread heavy-hitter table (power of 2) */
#define AA__HH_SAMPLE 16      /* evicted single requests: 1 in 16 */
#define AA__SZ_BITS 12        /* per-thread exact-size table: 2^12 words */
#define AA__SZ_SLOTS (1u << AA__SZ_BITS)
#define AA__RS_BUCKETS 1024

/* pool->tflags */
enum { AA__TF_TELEMETRY = 1,
       AA__TF_TRACE = 2 };
/* A telemetry size word: (size << 32) | count (0 = none; sizes < 2^32), one
 * slot of a thread's exact-size table (aa__tcache.sz).
 * aa__run_extends: w counts `size` with room for one more, in one xor and
 * one compare. aa__sz_hash: the slot of a size (its pair is slot ^ 1). */
#define AA__RUN_MAX 0x7FFFFFFFu
static inline uint64_t aa__run_word(uint64_t size, uint64_t count) { return (size << 32) | count; }
static inline uint64_t aa__run_size(uint64_t w) { return w >> 32; }
static inline uint64_t aa__run_count(uint64_t w) { return w & 0xFFFFFFFFu; }
static inline bool aa__run_extends(uint64_t w, uint64_t size) {
  return (w ^ (size << 32)) < AA__RUN_MAX;
}
/* aa__run_extends(*c, size) for the owner of *c (see aa__cxor). */
static inline bool aa__run_extends_at(const _Atomic uint64_t *c, uint64_t size) {
  return aa__cxor(c, size << 32) < AA__RUN_MAX;
}
static inline size_t aa__sz_hash(size_t size) {
  return (size_t)(((uint32_t)size * 0x9E3779B1u) >> (32 - AA__SZ_BITS));
}

/* Per-block metadata word in the slab header: the requested size in the
 * low 30 bits, USED and RECORDED (record_stream'd) flags on top; 0 = free. */
#define AA__M_USED (1u << 30)
#define AA__M_REC (1u << 31)
#define AA__M_SIZE (AA__M_USED - 1u)

/* Class slot states. */
enum { AA__CLS_EMPTY = 0,
       AA__CLS_ACTIVE = 1,
       AA__CLS_RETIRING = 2 };

/* ------------------------------------------------------------ spans */
enum { AA__SPAN_SLAB = 1,
       AA__SPAN_LARGE = 2 };

typedef struct aa__span {
  uintptr_t base, end; /* [base, end), end - base a multiple of 64 KiB */
  int kind;
} aa__span;

/* The large path's entry points and its per-thread cache (aa__ltc). */
#include "large.h"

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

/* A block in a thread-cache bin: its address and its metadata word (the slab
 * header is pool->hdr_align aligned, so the slab is found from `m`). */
typedef struct aa__bitem {
  void *p;
  _Atomic uint32_t *m;
} aa__bitem;

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

/* One bin of a thread cache: free blocks of one class, all freed on (or
 * refilled for) `stream`. */
typedef struct aa__bin {
  uint32_t n, lim, cap, gen;
  size_t bsize;
  aa_stream stream;
  aa__bitem *items;
  /* this thread's counters for the class */
  _Atomic uint64_t frees, hits, misses, req_add, req_sub;
  /* to 128 bytes: &tc->bins[k] is one shift */
  uint8_t pad[128 - 4 * sizeof(uint32_t) - sizeof(size_t) - sizeof(aa_stream) -
              sizeof(aa__bitem *) - 5 * sizeof(uint64_t)];
} aa__bin;
_Static_assert(sizeof(aa__bin) == 128, "aa__bin is 128 bytes");

typedef struct aa__hh_slot {
  _Atomic uint64_t size, count;
} aa__hh_slot;

typedef struct aa__tcache {
  /* exact-size table: a size word (aa__run_word) per size seen, at
   * aa__sz_hash(size) or its pair slot; a size that finds both taken evicts
   * the smaller count into hist/hh. Requests up to 1 GiB; owner writes,
   * readers sum it (hist first, then sz). First: &sz[h] is
   * one address mode. */
  _Atomic uint64_t sz[AA__SZ_SLOTS];
  aa_pool *pool;
  _Atomic int dead;               /* its pool was destroyed (g_mu) */
  struct aa__tcache *next, *prev; /* pool's tcache list (tc_mu) */
  uint32_t epoch;
  /* one-entry slab cache of the free path: the slab of the last fast free,
   * used while p - sc_base < sc_size (sc_size 0 = empty). Cleared by
   * aa__tcache_sync; releasing a slab bumps the pool epoch, so a cached slab is
   * never used after its header is freed. */
  uintptr_t sc_base;
  size_t sc_size;
  aa__slab *sc_slab;
  struct aa__bin *sc_bin; /* &bins[sc_slab->cls] */
  size_t cached_bytes;
  size_t max_bytes;      /* cfg.tcache_bytes */
  uint32_t sweep;        /* where aa__tcache_make_room starts */
  uint32_t hh_countdown; /* heavy-hitter sampling of evicted single requests */
  uint64_t tid;
  /* The large path's per-thread cache (large.h: its fields are the large
   * path's; tools/check-layers.sh refuses a file outside it that reads them). */
  aa__ltc ltc;
  _Atomic uint64_t hist[AA_HIST_BUCKETS];
  aa__hh_slot hh[AA__HH_SLOTS];
  aa__bin bins[AA_MAX_CLASSES];
} aa__tcache;

/* Counters folded from dead threads (and from the no-tcache path). */
typedef struct aa__ccount {
  _Atomic uint64_t allocs, frees, hits, misses, req_add, req_sub;
} aa__ccount;

/* Counter baselines of a slot (its counts before the current class moved
 * in), and the totals of classes that left; under tc_mu. */
typedef struct aa__cbase {
  uint64_t frees, hits, misses, req_add, req_sub;
} aa__cbase;

typedef struct aa__trace_cb {
  aa_trace_fn fn;
  void *user;
  struct aa__trace_cb *older;
  /* callbacks through this record under way: aa_pool_set_trace waits for
   * the record it replaces to reach 0 (aa__trace_at) */
  _Atomic uint32_t inflight;
} aa__trace_cb;

typedef struct aa__rsrec {
  void *p;
  aa_stream *s;
  uint32_t n;
  struct aa__rsrec *next;
} aa__rsrec;

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
  size_t ntable;
  size_t hdr_align; /* slab headers are aligned to (and as large as) this */
  _Atomic uint64_t table_version;
  pthread_mutex_t class_mu;
  int slots_reserved; /* empty slots held by prepared tables (class_mu) */
  aa__class classes[AA_MAX_CLASSES];

  pthread_mutex_t map_mu;

  /* tcaches */
  pthread_mutex_t tc_mu;
  aa__tcache *tcaches;
  aa__ccount dead[AA_MAX_CLASSES];
  aa__cbase base[AA_MAX_CLASSES];
  aa__cbase retired;
  _Atomic uint64_t dead_hist[AA_HIST_BUCKETS];
  aa__hh_slot *dead_hh; /* merged table of dead threads, AA__HH_SLOTS*4 */
  size_t dead_hh_n;

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
  _Atomic bool telemetry;
  _Atomic uint32_t tflags; /* AA__TF_*: what the hot path must do */
  _Atomic(aa__trace_cb *) trace;
  aa__trace_cb *trace_all; /* every record ever set (class_mu) */
  /* sampled tracing (telemetry.c), made at the first sampled setting and
   * freed with the pool */
  _Atomic(struct aa__tsample *) tsample;
  /* the OOM observer (oom.c): set and called under oom_mu */
  pthread_mutex_t oom_mu;
  aa_oom_fn oom_fn;
  void *oom_user;

  /* record_stream of small blocks */
  pthread_mutex_t rs_mu;
  aa__rsrec **rs; /* AA__RS_BUCKETS chains */

  /* the large path (large.h; its state is private to large*.c) */
  struct aa__large *large;

  aa__pagemap map;
  _Atomic uint8_t size2cls[]; /* ntable entries, index (size-1)>>9 */
};

/* ------------------------------------------------------------ functions */
/* pagemap.c */
int aa__pm_init(aa__pagemap *m);
void aa__pm_fini(aa__pagemap *m);
int aa__pm_insert(aa_pool *pool, aa__span *s);
void aa__pm_remove(aa_pool *pool, aa__span *s);
static inline aa__slab *aa__slab_of(const aa_pool *pool, const _Atomic uint32_t *m) {
  return (aa__slab *)((uintptr_t)m & ~(uintptr_t)(pool->hdr_align - 1));
}

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
void aa__fill_table(aa_pool *pool);

/* stats.c */
uint64_t aa__pool_in_use(aa_pool *pool);
void aa__slot_rebase(aa_pool *pool, int slot);

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
/* A block's index in its slab from its offset (one multiply by the slab's
 * division magic). */
static inline uint32_t aa__slab_index(const aa__slab *s, uintptr_t off) {
  return (uint32_t)(((uint64_t)(off >> 9) * s->div_magic) >> 42);
}

/* A block's address, and a block as a bin holds it and back (inline: the
 * alloc, free and tcache paths). */
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

/* tcache.c: the thread registry and the thread caches */
/* This thread's cache of each pool slot, indexed by pool->slot_ix (the
 * last entry stays NULL: pools without a slot). */
extern _Thread_local aa__tcache *aa__tl_tc[AA__MAX_POOL_SLOTS + 1]
    __attribute__((tls_model("initial-exec")));
uint64_t aa__thread_id(void);
void aa__slot_acquire(aa_pool *pool);
/* Returns the bin's blocks [0, n) to the central lists. Under c->mu. */
void aa__bin_flush_n(aa_pool *pool, aa__tcache *tc, aa__bin *bin, aa__class *c, uint32_t n);
/* Brings a bin in line with its class slot. Under c->mu. */
void aa__bin_sync(aa_pool *pool, aa__tcache *tc, aa__bin *bin, aa__class *c);
/* Brings every bin in line with the pool's epoch (the cache's epoch moved). */
void aa__tcache_sync(aa__tcache *tc);
void aa__tcache_flush_all(aa__tcache *tc);
/* The calling thread's live cache of this pool, or NULL; never makes one. */
aa__tcache *aa__tcache_mine(aa_pool *pool);
/* The calling thread's cache of this pool, made on first use; NULL when the
 * pool has no slot or memory is short. */
aa__tcache *aa__tcache_get(aa_pool *pool);
void aa__pool_drop_tcaches(aa_pool *pool);
/* The cache is over its byte budget: gives blocks back until half is free. */
void aa__tcache_make_room(aa_pool *pool, aa__tcache *tc);
void aa__tcache_flush_mine(aa_pool *pool);

/* telemetry.c: the heavy-hitter table, dead-thread folding, trace events */
void aa__hh_add(aa__hh_slot *t, size_t nslots, uint64_t size, uint64_t count);
/* A dying thread's heavy hitters and size table into the dead totals
 * (tc_mu held). */
void aa__fold_hh(aa_pool *pool, const aa__hh_slot *t, size_t n);
void aa__fold_sz(aa_pool *pool, aa__tcache *tc);
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

/* alloc.c: aa_alloc, its slow paths, counting each request */
void *aa__small_alloc_slow(aa_pool *pool, size_t size, aa_stream stream);

/* free.c: aa_free, aa_record_stream, aa_block_size */
void aa__rs_destroy(aa_pool *pool);

#endif /* AA_CORE_INTERNAL_H */
