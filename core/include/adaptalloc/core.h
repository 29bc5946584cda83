/*
 * adaptalloc/core.h — the slab allocator core.
 *
 * Glossary (outermost first):
 *   backend     where memory comes from: host (mmap), CUDA device, CUDA pinned
 *               host, or a user-supplied one (the replay simulator). It also
 *               provides stream events for stream-ordered reuse.
 *   pool        one allocator over one backend: a class table, slabs, per-class
 *               free lists, per-thread caches, and a large-allocation path.
 *   size class  a block size (a multiple of 512 B). Requests up to the largest
 *               class are rounded up to the smallest class that fits.
 *   slab        a backend allocation (default 2 MiB) carved into equal blocks of
 *               one class. Slab metadata lives on the host, never inside the
 *               memory handed out.
 *   block       what aa_alloc returns. The allocator never reads or writes it.
 *   segment     a large-path backend allocation; split and coalesced best-fit.
 *   stream      an opaque handle (a cudaStream_t for CUDA backends). A block
 *               freed on stream S is reused on S at once, on another stream only
 *               after an event recorded on S at free time has completed.
 *
 * Threads: every function here is thread-safe unless said otherwise. The class
 * table can change (add, retire, set) while other threads allocate and free.
 */
#ifndef ADAPTALLOC_CORE_H
#define ADAPTALLOC_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef void *aa_stream; /* opaque; NULL is the default stream */

/* ------------------------------------------------------------------ backends */

/* Device ordinals run 0 .. AA_MAX_DEVICES - 1: the one cap of the CUDA
 * backends and of the runtime's per-device pools. */
#define AA_MAX_DEVICES 64

typedef enum aa_backend_kind {
  AA_BACKEND_HOST = 0,   /* mmap'd host memory */
  AA_BACKEND_DEVICE = 1, /* CUDA device memory (cudaMalloc / cudaMallocAsync) */
  AA_BACKEND_PINNED = 2, /* CUDA page-locked host memory (cudaHostAlloc) */
  AA_BACKEND_CUSTOM = 3  /* user-supplied, e.g. the replay simulator */
} aa_backend_kind;

typedef struct aa_backend aa_backend;
struct aa_backend_residency;

/* The primitive interface a backend implements. All functions may be called
 * from any thread concurrently. */
typedef struct aa_backend_ops {
  /* Reserve `size` bytes (a multiple of 4 KiB). On success *out is the base
   * address, aligned to at least 4 KiB; on failure *out is NULL and the return
   * is AA_ENOMEM (really out of memory) or another negative code. */
  int (*alloc)(aa_backend *b, size_t size, void **out);
  /* Give back a region obtained from alloc with the same size. */
  void (*free)(aa_backend *b, void *ptr, size_t size);
  /* Record an event on `stream` now; *event_out is an opaque handle. May be
   * NULL when the backend has no streams (then cross-stream reuse is
   * immediate). */
  int (*event_record)(aa_backend *b, aa_stream stream, void **event_out);
  /* AA_OK when the event has completed, AA_EAGAIN while pending, <0 error. */
  int (*event_query)(aa_backend *b, void *event);
  /* Return an event handle to the backend (which may pool it). */
  void (*event_release)(aa_backend *b, void *event);
  /* Wait for all outstanding work on all streams. Used by the OOM path before
   * the retry. May be NULL. */
  int (*synchronize)(aa_backend *b);
  /* Free the backend itself (called by aa_backend_destroy). May be NULL. */
  void (*destroy)(aa_backend *b);

  /* Optional virtual memory, used by the expandable large path
   * (AA_LARGE_EXPANDABLE). A backend without it leaves all five NULL; a
   * pool asked for that mode then uses AA_LARGE_CACHE.
   *
   * The mapping granularity in bytes: a power of two and a multiple of
   * 64 KiB; 0 when virtual memory is unusable at run time. */
  size_t (*map_granularity)(aa_backend *b);
  /* Reserve `size` bytes of address space, no memory behind it (size a
   * multiple of the granularity); *out is aligned to the granularity. */
  int (*va_reserve)(aa_backend *b, size_t size, void **out);
  /* Give back a reservation, every page of it unmapped first. */
  void (*va_release)(aa_backend *b, void *base, size_t size);
  /* Back [addr, addr + size) with new memory (addr inside a reservation and
   * aligned to the granularity, size a multiple of it: one page of the
   * pool's, or a run of them), readable and writable
   * where the backend's memory is used; *handle is the backend's record of
   * it, handed back to unmap. AA_ENOMEM when out of memory. */
  int (*map)(aa_backend *b, void *addr, size_t size, void **handle);
  /* Undo one map: the memory goes back to the system. The caller
   * guarantees that no work still uses it. */
  void (*unmap)(aa_backend *b, void *addr, size_t size, void *handle);

  /* Optional (NULL: not offered). AA_OK when every piece of work issued on
   * `stream` up to this call has completed (the stream is idle); AA_EAGAIN
   * while some is pending, or when the backend cannot tell now (a stream
   * under CUDA graph capture); another negative code on error. Blocks
   * freed on a stream before an AA_OK are usable on every stream: a pool
   * asks this before it records an event for them, so that an idle stream
   * costs one query instead of an event's record and query. */
  int (*stream_query)(aa_backend *b, aa_stream stream);

  /* Optional (NULL: not offered), for backends whose pages move between
   * the device and the host (managed memory): where the bytes the backend
   * holds now are, as far as the driver can tell (aa_backend_residency).
   * Called by aa_pool_stats_get with no pool lock held. */
  int (*residency)(aa_backend *b, struct aa_backend_residency *out);

  /* Optional (NULL: not offered). Work issued on `stream` after this call
   * waits for `event` (from event_record) to complete, the host not
   * blocked (cudaStreamWaitEvent); the event stays the caller's. AA_OK when
   * ordered; AA_EAGAIN when `stream` cannot wait now (under CUDA graph
   * capture, the host pseudo-stream); another negative code on error. A
   * pool asks it on the way to growing: a free block whose last uses on
   * other streams are still pending serves a request on `stream` once
   * `stream` is ordered after them (aa_pool_config.large_stream_wait). */
  int (*stream_wait)(aa_backend *b, aa_stream stream, void *event);

  /* Optional (NULL: not offered; both or neither), for stitching in the
   * expandable large path (aa_pool_config.large_stitch): map the memory
   * behind `handle` (from map, of the same size, still mapped where map put
   * it) at `addr` too, a second address inside another reservation
   * (aligned and sized as for map): a write through either address is read
   * through the other. No new memory is made; the caller keeps the first
   * mapping until every alias of it is undone. AA_ENOMEM, AA_EBACKEND. */
  int (*map_alias)(aa_backend *b, void *addr, size_t size, void *handle);
  /* Undo one map_alias: the memory stays, mapped where map put it. */
  void (*unmap_alias)(aa_backend *b, void *addr, size_t size, void *handle);
  /* Optional (NULL: map_alias handle by handle), with map_alias: n handles
   * side by side from `addr` (handles[i] of sizes[i] bytes, each as
   * map_alias takes it), the range made accessible with one call instead of
   * one per handle (CUDA: a cuMemMap per handle, one cuMemSetAccess for the
   * range). All or nothing: on error nothing of the range stays mapped.
   * Undone handle by handle with unmap_alias. AA_EINVAL, AA_ENOMEM,
   * AA_EBACKEND. */
  int (*map_alias_run)(aa_backend *b, void *addr, void *const *handles, const size_t *sizes,
                       size_t n);

  /* Optional (NULL: not offered), for sharing memory with another process
   * (aa_block_share, CUDA IPC): a POSIX file descriptor that another
   * process can import the memory behind `handle` (from map, still
   * mapped) with (CUDA: cuMemExportToShareableHandle). The descriptor is
   * the backend's, the same one at every call for one handle, and stays
   * open while the handle is mapped: unmap closes it. AA_ENOTSUP when the
   * handle was made without an exportable type (a driver that refused
   * one), AA_EBACKEND. */
  int (*export_fd)(aa_backend *b, void *handle, int *fd);
} aa_backend_ops;

/* What a backend's residency op reports, over all it holds. */
typedef struct aa_backend_residency {
  uint64_t device_bytes;  /* last prefetched to the backend's device, or, never
                             prefetched, advised to prefer it */
  uint64_t host_bytes;    /* the same for the host */
  uint64_t unknown_bytes; /* neither, mixed below the query granularity, or
                             beyond the query budget */
} aa_backend_residency;

/* A backend is a value: the ops table, its private context, what it is. A
 * custom backend fills one of these in and keeps it alive for as long as any
 * pool uses it. */
struct aa_backend {
  const aa_backend_ops *ops;
  void *ctx;
  aa_backend_kind kind;
  int device;       /* CUDA ordinal, -1 for host memory */
  const char *name; /* "host", "cuda", "pinned", ... (static string) */
};

/* The host backend: mmap/munmap, with events that tests can hold pending and a
 * fault-injection hook (core/src/test_hooks.h, not installed). *out is owned
 * by the caller: aa_backend_destroy. */
AA_EXTERN int aa_backend_host_new(aa_backend **out);

/* CUDA device memory on `device` (slabs via cudaMalloc; the large path via
 * cudaMalloc or a cudaMallocAsync pool as configured). AA_ENOTSUP when built
 * without CUDA, AA_ENODEV when there is no such GPU at run time. */
AA_EXTERN int aa_backend_cuda_new(int device, aa_backend **out);
/* CUDA pinned host memory (cudaHostAlloc arenas, portable + mapped). */
AA_EXTERN int aa_backend_pinned_new(aa_backend **out);
/* Number of CUDA devices usable now (0 without CUDA or without a GPU). */
AA_EXTERN int aa_cuda_device_count(void);
/* Free and total memory of a CUDA device (cudaMemGetInfo on that device).
 * AA_ENOTSUP without CUDA, AA_ENODEV for a device that is not there. */
AA_EXTERN int aa_cuda_mem_info(int device, size_t *free_bytes,
                               size_t *total_bytes);

/* Destroys a backend made by one of the constructors above. NULL is a no-op.
 * Every pool over it must be destroyed first. */
AA_EXTERN void aa_backend_destroy(aa_backend *b);

/* ------------------------------------------------------------------ pools */

typedef struct aa_pool aa_pool;

typedef enum aa_large_mode {
  AA_LARGE_CACHE = 0,       /* cache segments, best-fit reuse, split/coalesce */
  AA_LARGE_PASSTHROUGH = 1, /* straight to the backend every time */
  AA_LARGE_EXPANDABLE = 2   /* one address-space reservation, pages mapped on
                               demand and unmapped from free holes, so free
                               space never strands memory (needs the
                               backend's map ops; else AA_LARGE_CACHE) */
} aa_large_mode;

/* "cache", "passthrough" or "expandable" (the policy files' names); "?" for
 * anything else. */
AA_EXTERN const char *aa_large_mode_name(aa_large_mode mode);

/* What an invalid free looked like, for the error callback. */
typedef enum aa_misuse {
  AA_MISUSE_FOREIGN = 1,     /* pointer not owned by this pool */
  AA_MISUSE_DOUBLE_FREE = 2, /* block already free */
  AA_MISUSE_BAD_SIZE = 3,    /* size argument contradicts the block */
  AA_MISUSE_INTERIOR = 4     /* pointer inside a block, not at its start */
} aa_misuse;

/* Called (from the freeing thread, no pool lock held) for each detected
 * misuse. Must not call back into the same pool's free. */
typedef void (*aa_error_fn)(void *user, aa_pool *pool, aa_misuse what,
                            const void *ptr, size_t size, const char *message);

/* One trace event (ADAPTALLOC_TRACE). op: 'a' alloc, 'f' free, 'x' failed
 * alloc, 'u' a use on another stream that aa_record_stream recorded (ptr,
 * stream; size 0), 'c' the call stack of the block at ptr (size 0, frame:
 * an id the caller of aa_pool_trace_frame chose, docs/store.md). Delivered from the allocating/freeing thread after the operation;
 * the callee must not block (copy into a ring buffer and return).
 * Delivery order across threads is not the order of the operations: sort
 * by seq. seq is process-wide and increasing; a free takes its number while
 * the block is still the caller's, an allocation after it has the block, so
 * for any address a free sorts before the next allocation of it. 0 = not
 * numbered (events from before seq existed). */
typedef struct aa_trace_event {
  uint64_t time_ns;
  uint64_t ptr;
  uint64_t size; /* requested size for 'a'/'x', the size passed (or 0) for 'f' */
  uint64_t stream;
  uint64_t thread;
  char op;
  uint64_t seq;
  uint64_t frame; /* op 'c' (aa_pool_trace_frame): the frames' id; else 0 */
} aa_trace_event;
typedef void (*aa_trace_fn)(void *user, const aa_trace_event *ev);

/* Bumped whenever aa_pool_config changes (2: region, large_page_bytes,
 * large_map_runs; 3: large_stitch, large_plan, large_map_run_pages,
 * large_map_run_min_bytes; 4: large_stitch_share):
 * aa_pool_new refuses a config of another version (AA_EINVAL) rather than
 * read fields its caller's struct does not have. */
#define AA_POOL_CONFIG_VERSION 4

/* The defaults of aa_pool_config, in one place: the pool, the policy module
 * and the replay tuner all take them from here. */
#define AA_DEFAULT_SLAB_SIZE ((size_t)2 << 20)
#define AA_DEFAULT_MIN_BLOCK ((size_t)512)
#define AA_DEFAULT_MAX_SMALL ((size_t)1 << 20)
#define AA_DEFAULT_PER_DOUBLING 4u
/* aa_pool_config.large_stitch_share's default: stitching's alias calls may
 * take 1% of the time (docs/core.md "Stitching's time budget") */
#define AA_DEFAULT_STITCH_SHARE 0.01
#define AA_DEFAULT_TCACHE_BLOCKS 32u
/* Thread caches hold memory nobody else can use: plain host memory is cheap,
 * device, pinned and custom memory is scarce. */
#define AA_DEFAULT_TCACHE_BYTES_HOST ((size_t)64 << 20)
#define AA_DEFAULT_TCACHE_BYTES ((size_t)4 << 20)

/* The bounds of aa_pool_config.large_page_bytes (besides 0). */
#define AA_LARGE_PAGE_MIN ((size_t)2 << 20)
#define AA_LARGE_PAGE_MAX ((size_t)1 << 30)

typedef struct aa_pool_config {
  uint32_t version;              /* AA_POOL_CONFIG_VERSION */
  const char *name;              /* for stats ("device0", "pinned", "host"); copied */
  aa_backend *backend;           /* borrowed; must outlive the pool */
  size_t slab_size;              /* default 2 MiB; a multiple of 64 KiB */
  size_t min_block;              /* default 512 */
  size_t max_small;              /* largest class, default 1 MiB */
  uint32_t classes_per_doubling; /* default ladder density, default 4 */
  uint32_t tcache_blocks;        /* per-thread cache bound per class (default 32) */
  size_t tcache_bytes;           /* per-thread cache bound in bytes, all classes (0 = default: 64 MiB for AA_BACKEND_HOST, else 4 MiB) */
  aa_large_mode large_mode;      /* default AA_LARGE_CACHE */
  size_t large_cache_bytes;      /* cached large segments above this are released (0 = no bound) */
  size_t limit_bytes;            /* cap on reserved bytes (0 = none); over it = OOM */
  bool telemetry;                /* histogram + heavy hitters on (default true) */
  aa_error_fn on_error;          /* optional */
  void *on_error_user;
  const char *region;      /* a label for stats: the region (named pool of
                                    the runtime) this pool serves, "kv_cache";
                                    NULL or "" = none; copied, at most
                                    AA_REGION_NAME_MAX bytes (longer: AA_EINVAL) */
  size_t large_page_bytes; /* expandable: the unit pages are mapped and unmapped in; 0 =
                              the backend's granularity (2 MiB on CUDA), else a power of
                              two from 2 MiB to 1 GiB, rounded up to the granularity.
                              Fewer, larger maps (one cuMemCreate + cuMemMap +
                              cuMemSetAccess each) against coarser unmapping */
  int large_map_runs;      /* expandable, without limit_bytes: the unmapped pages one request
                         needs are mapped by one backend call (one handle) per 16
                         pages, each run given back only when all its pages are
                         free; 1 on, 0 or -1 off (the default here; the default
                         policy's device pool has it on: gpt2 training on a GPU,
                         152 device calls instead of 2,254 at the same peak,
                         BENCHMARKS.md). Policy: large.map_runs;
                         aa_pool_set_map_runs changes it live.
                         Under a limit pages map one by one, so that stranded
                         pages can move */
  int large_stitch;        /* expandable, on backends with map_alias: a request that no free
                              chunk fits, while whole free pages lie in holes, is served by
                              mapping those pages again side by side at a new address (a
                              stitched range, kept for the next request of about its size)
                              instead of new memory. 1 on, 0 (the default) off; 2 on, and a
                              request that the holes leave short (they hold a quarter of it
                              at least) gets the shortfall as new pages and a range of both,
                              so the pool grows by the shortfall (policy large.stitch_grow).
                              Docs: docs/core.md "Stitching" */
  int large_stream_wait;   /* before the large path grows, a free chunk whose last uses
                              on other streams are still pending serves a request on
                              `stream` by ordering `stream` after them (the backend's
                              stream_wait: one cudaStreamWaitEvent per pending event) instead
                              of new memory. 0 (the default) or 1 on where the backend
                              offers stream_wait, -1 off: wait until the events complete,
                              as PyTorch's caching allocator does. Policy:
                              large.stream_wait; aa_pool_set_stream_wait changes it
                              live */
  int large_plan;          /* cache or expandable: a placement learned from the first
                              steps. The large requests are watched; once they repeat
                              (the period found in the order of requests and frees), the
                              repeating ones with a lifetime shorter than a period get
                              offsets planned from their lifetimes in one arena, adopted
                              only when the window's replay says peak reserved falls;
                              from the period's next start they are served there with no
                              backend call, the rest as before; a plan that stops
                              matching is dropped and learned again. 1 on, 0 (the
                              default) off; AA_LARGE_PLAN_SYNC on, planned on the
                              allocating thread. Fixed while the pool lives. Policy:
                              large.plan. Docs: docs/core.md "The learned plan" */

  /* With large_map_runs: the most pages one run (one handle) covers for a
   * request of at least large_map_run_min_bytes; 0 = AA_LARGE_MAP_RUN_MAX (the
   * default), else 1 to AA_LARGE_MAP_RUN_MAX (more: AA_EINVAL). A stitched
   * range maps whole handles, so smaller ones in large blocks are holes it can
   * map (BENCHMARKS.md "Shorter runs for large requests"), at one map call per
   * run. Policy: large.map_run_pages. Fixed while the pool lives. */
  int large_map_run_pages;
  /* The requests below it keep runs of AA_LARGE_MAP_RUN_MAX; 0 (the default):
   * every request. Policy: large.map_run_min_bytes. */
  size_t large_map_run_min_bytes;
  /* With large_stitch: the most of the time, by the pool's clock
   * (aa_pool_set_clock), that stitching's alias calls (mapping a new range's
   * handles, undoing a range's) may take, over a start of 50 ms of calls:
   * past it a request that would make a new range grows the pool instead
   * (kept ranges still serve, with no call). In (0, 1]; 0: the default,
   * AA_DEFAULT_STITCH_SHARE; 1: no bound. Negative, above 1 or not a number:
   * AA_EINVAL. Policy: large.stitch_share. Docs: docs/core.md "Stitching's
   * time budget" */
  double large_stitch_share;
} aa_pool_config;

/* The most pages one mapping of large_map_runs covers: 32 MiB of 2 MiB pages
 * (aa_pool_config.large_map_run_pages: 1 to this). */
#define AA_LARGE_MAP_RUN_MAX 16

/* aa_pool_config.large_plan: on (1), a plan is made on a helper thread of the
 * pool (started at the first plan, joined by aa_pool_destroy) from a copy of
 * the window, and adopted at the period's start after it is ready: the
 * allocating thread only copies. AA_LARGE_PLAN_SYNC: made on the allocating
 * thread, under the large path's lock, where the period is found (a stall
 * of up to about 200 ms): the same plans at the same events every run, as
 * the replay (adaptalloc-replay) and deterministic tests need. */
#define AA_LARGE_PLAN_SYNC 2

/* The longest region label (aa_pool_config.region, aa_pool_stats.region). */
#define AA_REGION_NAME_MAX 20

/* Fills in the defaults above (backend NULL). */
AA_EXTERN void aa_pool_config_init(aa_pool_config *cfg);

/* Creates a pool with the default class ladder (min_block .. max_small, about
 * classes_per_doubling per doubling, multiples of 512). *out is owned by the
 * caller: aa_pool_destroy. On failure *out is NULL. */
AA_EXTERN int aa_pool_new(const aa_pool_config *cfg, aa_pool **out);

/* Returns every slab and segment to the backend, including blocks still in
 * use (they become invalid). Thread caches of live threads are dropped. No
 * other call on the pool may be in flight. NULL is a no-op. */
AA_EXTERN void aa_pool_destroy(aa_pool *pool);

/* Allocates `size` bytes (0 is treated as 1) usable on `stream`. Returns NULL
 * when out of memory after releasing cached memory and retrying once. */
AA_EXTERN void *aa_alloc(aa_pool *pool, size_t size, aa_stream stream);

/* Frees a block. `size` is the size asked for, or 0 when unknown; a size that
 * contradicts the block is reported as AA_MISUSE_BAD_SIZE and the block is
 * NOT freed. NULL ptr is a no-op. Invalid frees are counted and reported
 * through on_error; they never corrupt the pool. Returns AA_OK or AA_EINVAL. */
AA_EXTERN int aa_free(aa_pool *pool, void *ptr, size_t size, aa_stream stream);

/* Marks a live block as used on another stream too (torch record_stream):
 * when it is freed, events are recorded on each such stream and it is reused
 * only after all have completed. */
AA_EXTERN int aa_record_stream(aa_pool *pool, void *ptr, aa_stream stream);

/* Size of the block that holds ptr (its class size or large size), 0 if the
 * pool does not own it. */
AA_EXTERN size_t aa_block_size(aa_pool *pool, const void *ptr);

/* Whether ptr lies in memory the pool holds from its backend now (a slab or
 * a large segment of its own, the block live or not): one page-map lookup,
 * no lock, so a caller that keeps several pools can find the owner of a
 * pointer cheaply (the PyTorch integration's device layer). false for NULL
 * arguments. The answer can change as soon as the pool returns memory to
 * its backend; for a live block of the pool's it stays true until the
 * block is freed. */
AA_EXTERN bool aa_pool_owns(const aa_pool *pool, const void *ptr);

/* ---------------------------------------------------- sharing a block
 * What another process needs to map a live block: the backend memory under
 * it, one piece per backend allocation (a slab, a large segment of the
 * cache path) or per map handle (pages of the expandable path, the parts of
 * a stitched range), in address order, contiguous, covering the block. A
 * piece is mapped whole at [addr, addr + size) in this process. */
typedef struct aa_share_piece {
  void *addr;   /* where the piece starts in this process */
  size_t size;  /* its bytes */
  void *handle; /* the backend's map handle (map op), for aa_backend_export_fd;
                   NULL: a whole backend allocation (alloc op) starting at addr */
} aa_share_piece;

/* Describes the live block that holds `ptr` (its start or any byte of it):
 * fills pieces[0 .. *n) (at most cap) and *block with the block's start.
 * AA_ERANGE when more than cap pieces are needed (*n says how many);
 * AA_EINVAL when ptr is in no live block of the pool (free, cached in a
 * thread's cache, another pool's). The description holds while the block
 * stays live: the pool never gives a live block's memory back, so a
 * consumer may map the pieces until the owner frees the block (PyTorch's
 * CUDA IPC keeps the owner's block live until every consumer let go). */
AA_EXTERN int aa_block_share(aa_pool *pool, const void *ptr, aa_share_piece *pieces, size_t cap,
                             size_t *n, void **block);

/* The backend's export_fd: a POSIX descriptor for a map handle of a
 * piece (the backend's; never close it). AA_ENOTSUP when the backend has no
 * export_fd, AA_EINVAL for a NULL handle or backend. */
AA_EXTERN int aa_backend_export_fd(aa_backend *b, void *handle, int *fd);

/* Returns cached memory to the backend: free blocks in this thread's cache and
 * the central lists, empty slabs, cached large segments (torch empty_cache).
 * Blocks pending on events are kept. Returns bytes released. */
AA_EXTERN size_t aa_pool_release(aa_pool *pool);

/* Starts a new window for stats' window_peak_bytes_in_use (the policy loop
 * does this each interval, so the trim rule sees the interval's peak and not
 * the moment's in-use bytes). */
AA_EXTERN void aa_pool_window_reset(aa_pool *pool);

/* Releases empty slabs and cached segments until reserved - in_use <= keep
 * bytes. Returns bytes released. */
AA_EXTERN size_t aa_pool_trim(aa_pool *pool, size_t keep_bytes);

AA_EXTERN void aa_pool_set_telemetry(aa_pool *pool, bool on);
/* Sets the trace callback (NULL: none). Returns once every call of the
 * callback it replaces has returned, so the old callback's `user` may be
 * freed then. Never call it from inside a trace callback (it would wait for
 * itself). */
AA_EXTERN void aa_pool_set_trace(aa_pool *pool, aa_trace_fn fn, void *user);
/* Sampled tracing: aa_pool_set_trace, with only some allocations traced.
 * An allocation is traced when its size is at least min_bytes (min_bytes >
 * 0), or when it is drawn one time in `every` on average (every > 1: a
 * per-thread countdown drawn uniformly from 1..2*every-1, so a loop of
 * exactly `every` allocations is not always sampled at the same place;
 * every 0: none by count). every 1 with min_bytes 0 traces every event, as
 * aa_pool_set_trace does. While sampling, the free, the uses on other
 * streams ('u') and the frames ('c') of a block are traced exactly when its
 * allocation was: the pool keeps the traced live blocks in a table of
 * AA_TRACE_SAMPLE_SLOTS addresses (allocated at the first sampled setting,
 * about 768 KiB with the stack id beside each, freed with the pool); an allocation that finds no room is
 * not traced (counted as table_full). Blocks allocated before the call are
 * not in the sample: their frees are not traced. The trace is off during the
 * call (a few events may be missed); the same rules as aa_pool_set_trace
 * apply to fn and user (fn NULL: tracing off). Returns AA_OK, AA_EINVAL
 * (pool NULL), AA_ENOMEM (no table: nothing changed). */
#define AA_TRACE_SAMPLE_SLOTS 65536
AA_EXTERN int aa_pool_set_trace_sampled(aa_pool *pool, aa_trace_fn fn, void *user,
                                        uint32_t every, uint64_t min_bytes);
/* Whether the block at ptr (live, the caller's) is in the pool's trace:
 * the pool traces, and, while sampling, the block's allocation was traced.
 * For callers that gather something costly for the trace (a call stack). */
AA_EXTERN bool aa_pool_trace_wants(aa_pool *pool, const void *ptr);
/* Traces an event 'c' that attaches `frame` (the caller's id of a call
 * stack; nonzero) to the live block at ptr, when aa_pool_trace_wants says
 * so. Returns AA_OK when traced, AA_ENOENT when the block is not in the
 * trace, AA_EINVAL for NULL pool or ptr or frame 0. */
AA_EXTERN int aa_pool_trace_frame(aa_pool *pool, const void *ptr, uint64_t frame);
/* The id last given to aa_pool_trace_frame for the live block at ptr, kept
 * beside the block in the sample's table: 0 when the pool is not sampling
 * now (a trace of every event keeps no table), the block is not in the
 * sample, or it had no frame (or one past 32 bits). A reader's answer: the
 * block may be freed meanwhile (then 0, or the id of the block that took
 * the address since). Lock-free: at most 32 probes of the table. */
AA_EXTERN uint64_t aa_pool_trace_frame_of(aa_pool *pool, const void *ptr);
/* The sampling's counters since the last aa_pool_set_trace_sampled that
 * turned sampling on: allocations traced, allocations not drawn, traced
 * blocks live now, allocations not traced for want of room in the table.
 * Zeros when the pool never sampled. Any pointer may be NULL. */
AA_EXTERN void aa_pool_trace_sample_counts(aa_pool *pool, uint64_t *traced, uint64_t *skipped,
                                           uint64_t *live, uint64_t *table_full);
AA_EXTERN void aa_pool_set_limit(aa_pool *pool, size_t limit_bytes);
/* Makes pool's reservations count against owner's limit as well as its
 * own: owner's limit then caps owner's reserved bytes plus those of every
 * pool sharing it (PyTorch's per-process memory fraction covers a device's
 * CUDA-graph and MemPool pools with its device pool). Call it before pool
 * reserves anything; owner must outlive pool, and neither may already
 * share (pool another's limit, owner a third's). AA_EINVAL otherwise,
 * nothing changed. Not thread-safe against pool's own allocations. */
AA_EXTERN int aa_pool_share_limit(aa_pool *pool, aa_pool *owner);
/* The bytes the pools sharing pool's limit hold now (0 for NULL). */
AA_EXTERN uint64_t aa_pool_sharers_reserved(aa_pool *pool);
/* The pool whose limit pool shares (aa_pool_share_limit), else NULL. */
AA_EXTERN aa_pool *aa_pool_limit_owner(aa_pool *pool);
/* Turns large_map_runs on or off for the mappings the pool makes from now
 * on (those made before keep their shape; each goes back whole as before).
 * No effect on a pool whose large path is not expandable. */
AA_EXTERN void aa_pool_set_map_runs(aa_pool *pool, bool on);
/* Turns large_stream_wait on or off for the allocations from now on (no
 * effect where the backend has no stream_wait). */
AA_EXTERN void aa_pool_set_stream_wait(aa_pool *pool, bool on);
/* The clock, in nanoseconds, of stitching's time budget
 * (aa_pool_config.large_stitch_share; nothing else in the pool reads it);
 * NULL (the default): aa_now_ns. The replay's simulator sets the trace's
 * time plus its simulated backend calls' costs, so that the budget is
 * measured as on the device the trace came from. `now` is called under the
 * large path's lock, by allocations and by aa_pool_release, trims and
 * aa_pool_destroy too (undoing ranges): it must not call into the pool, and
 * `user` must outlive the pool or the next aa_pool_set_clock. */
AA_EXTERN void aa_pool_set_clock(aa_pool *pool, uint64_t (*now)(void *user), void *user);
AA_EXTERN const char *aa_pool_name(const aa_pool *pool);
/* The pool's region label ("" when none; see aa_pool_config.region). */
AA_EXTERN const char *aa_pool_region(const aa_pool *pool);
AA_EXTERN aa_backend *aa_pool_backend(const aa_pool *pool);

/* ------------------------------------------------------------------ classes */

#define AA_MAX_CLASSES 128
#define AA_BLOCK_ALIGN 512

/* The class ladder, the one rule for a default class table: min_block
 * (rounded up to AA_BLOCK_ALIGN), then per_doubling classes in each doubling
 * [2^k, 2^(k+1)) at 2^k + j * 2^k / per_doubling rounded up to
 * AA_BLOCK_ALIGN, then max_small exactly. aa_pool_new and the policy module
 * both use it. Writes up to cap sizes to out (out may be NULL when cap is 0)
 * and returns the full count (0 when max_small < min_block or per_doubling
 * is 0); a count over AA_MAX_CLASSES is a table no pool accepts. */
AA_EXTERN size_t aa_class_ladder(size_t min_block, size_t max_small,
                                 uint32_t per_doubling, size_t *out, size_t cap);

typedef struct aa_class_spec {
  size_t block_size;    /* multiple of AA_BLOCK_ALIGN, <= max_small */
  uint32_t cache_limit; /* per-thread cache bound for this class (0 = pool default) */
  uint32_t prefill;     /* blocks to keep carved and free ahead of demand */
} aa_class_spec;

/* Current class table, ascending. *n gets the count; up to cap are copied.
 * *version gets the table version (bumped by every change); may be NULL. */
AA_EXTERN int aa_pool_classes(aa_pool *pool, aa_class_spec *out, size_t cap,
                              size_t *n, uint64_t *version);
/* Adds a class. AA_EEXIST if that size exists, AA_ELIMIT at AA_MAX_CLASSES,
 * AA_EINVAL for a bad size. */
AA_EXTERN int aa_pool_class_add(aa_pool *pool, const aa_class_spec *spec);
/* Retires a class: no new allocations use it; its live blocks drain (free
 * still works) and its slabs go back once empty. AA_ENOENT if absent. The last
 * class covering max_small cannot be retired (AA_EBUSY). */
AA_EXTERN int aa_pool_class_retire(aa_pool *pool, size_t block_size);
/* Changes cache_limit and prefill of an existing class. */
AA_EXTERN int aa_pool_class_set(aa_pool *pool, const aa_class_spec *spec);
/* Makes the table exactly `specs` (adds, retires, sets as needed), validated
 * whole first: on any error nothing changes. The largest block_size must equal
 * max_small. */
AA_EXTERN int aa_pool_set_classes(aa_pool *pool, const aa_class_spec *specs,
                                  size_t n);

/* The same change in two steps, for a caller that changes several pools at
 * once and must change all or none (the policy module): prepare validates the
 * table as aa_pool_set_classes does and holds the class slots its new sizes
 * need, so that commit cannot fail. Nothing is visible to allocating threads
 * until commit. Every prepared table is given to exactly one of commit or
 * abort, which free it; while one is held, other changes of the pool's table
 * (class_add, set_classes, other prepares) see fewer free slots.
 * prepare: AA_OK with *out set; AA_EINVAL (a bad table), AA_ELIMIT (not
 * enough free class slots), AA_ENOMEM, with *out NULL and nothing held. */
typedef struct aa_class_txn aa_class_txn;
AA_EXTERN int aa_pool_classes_prepare(aa_pool *pool, const aa_class_spec *specs,
                                      size_t n, aa_class_txn **out);
AA_EXTERN void aa_pool_classes_commit(aa_class_txn *txn);
AA_EXTERN void aa_pool_classes_abort(aa_class_txn *txn);

/* ------------------------------------------------------------------ stats */

#define AA_STATS_VERSION 17
#define AA_HIST_BUCKETS 192 /* quarter doublings: bucket(size) below */
#define AA_HH_MAX 32        /* heavy-hitter exact sizes reported */

/* Histogram bucket of a request size: about four buckets per doubling.
 * aa_hist_bucket_lower(i) is the smallest size in bucket i. */
AA_EXTERN unsigned aa_hist_bucket(size_t size);
AA_EXTERN uint64_t aa_hist_bucket_lower(unsigned bucket);

typedef struct aa_class_stats {
  uint64_t block_size;
  uint32_t cache_limit;
  uint32_t prefill;
  uint32_t retiring; /* 1 while draining after retire */
  uint32_t reserved0;
  uint64_t slabs; /* slabs currently held */
  uint64_t blocks_in_use;
  uint64_t blocks_free;     /* carved, free (central + thread caches + pending) */
  uint64_t bytes_in_use;    /* blocks_in_use * block_size */
  uint64_t bytes_requested; /* sum of requested sizes of live blocks */
  uint64_t bytes_reserved;  /* slabs * slab_size */
  uint64_t peak_bytes_in_use;
  uint64_t allocs;
  uint64_t frees;
  uint64_t hits;   /* served from a thread cache or free list */
  uint64_t misses; /* needed a new slab */
} aa_class_stats;

typedef struct aa_size_count {
  uint64_t size;
  uint64_t count;
} aa_size_count;

typedef struct aa_pool_stats {
  uint32_t version; /* AA_STATS_VERSION */
  uint32_t size;    /* sizeof(aa_pool_stats) */
  char name[32];
  char backend[16];
  char region[AA_REGION_NAME_MAX + 4]; /* "" when the pool serves no region */
  int32_t device;
  uint32_t telemetry;
  uint64_t time_ns; /* aa_now_ns() when taken */
  uint64_t class_table_version;

  uint64_t bytes_in_use;    /* handed out (block sizes), small + large */
  uint64_t bytes_requested; /* asked for, live */
  uint64_t bytes_reserved;  /* held from the backend */
  uint64_t peak_bytes_in_use;
  uint64_t peak_bytes_reserved;
  uint64_t limit_bytes;
  uint64_t allocs;
  uint64_t frees;
  uint64_t cache_hits;
  uint64_t cache_misses;
  uint64_t backend_allocs;
  uint64_t backend_frees;
  uint64_t backend_failures;
  uint64_t ooms;        /* aa_alloc calls that returned NULL */
  uint64_t oom_retries; /* releases-and-retries done */
  uint64_t invalid_frees;
  uint64_t pending_blocks; /* freed, waiting for a stream event */
  uint64_t large_allocs;
  uint64_t large_bytes_in_use;
  uint64_t large_bytes_reserved;
  uint64_t large_segments;
  uint64_t window_peak_bytes_in_use; /* most in use since aa_pool_window_reset */
  uint64_t large_pages_mapped;       /* expandable large path: page maps so far */
  uint64_t large_pages_unmapped;     /* ... and unmaps (to the system or moved) */
  uint64_t backend_ns;               /* time inside backend alloc/free/map/unmap */
  uint64_t large_page_bytes;         /* expandable: the map unit (0: not expandable) */
  uint64_t large_bytes_held;         /* large blocks freed into threads' caches, held now */
  uint64_t large_held_reclaims;      /* held blocks other threads took back so far */
  uint64_t stream_queries;           /* backend stream_query calls, before recording an event */
  uint64_t stream_idle;              /* of those, streams found idle: an event saved each */
  uint64_t large_misses;             /* large allocations that called the backend */
  uint64_t large_settled;            /* free large chunks made usable on every stream (their work done) on
                           * the way to growing, merged with their neighbours */
  uint64_t large_stream_waits;       /* free large chunks still pending on other streams that served a
                                        request by ordering its stream after them (the backend's
                                        stream_wait) instead of the pool growing */
  /* Over a backend with a residency op (managed memory; 0 otherwise): where
   * the backend's bytes are (aa_backend_residency; every pool over that
   * backend reports the same figures). */
  uint64_t managed_device_bytes;
  uint64_t managed_host_bytes;
  uint64_t managed_unknown_bytes;
  uint64_t last_oom_unix_ms; /* wall clock of the last aa_alloc that returned NULL
                                        (ms since 1970; 0: none yet) */

  uint32_t class_count;
  uint32_t hh_count;
  aa_class_stats classes[AA_MAX_CLASSES];
  uint64_t hist[AA_HIST_BUCKETS]; /* request counts per bucket since start */
  aa_size_count hh[AA_HH_MAX];    /* most frequent exact sizes, descending */
  /* Stitching in the expandable large path (aa_pool_config.large_stitch;
   * docs/core.md "Stitching"): active stitched ranges and their bytes now
   * (the same memory as the holes they were made from: not more reserved),
   * ranges made so far, requests a kept range served again (no backend
   * call), ranges destroyed (aliases undone), and the backend's alias
   * map/unmap calls; dormant ranges now (aliases kept, pages back in their
   * holes), and how often a range went to sleep and woke. */
  uint64_t large_stitched_ranges;
  uint64_t large_stitched_bytes;
  uint64_t large_stitches;
  uint64_t large_stitch_hits;
  uint64_t large_stitch_dissolved;
  uint64_t large_alias_maps;
  uint64_t large_alias_unmaps;
  uint64_t large_stitch_dormant;
  uint64_t large_stitch_rests;
  uint64_t large_stitch_wakes;
  /* The learned placement (aa_pool_config.large_plan; docs/core.md "The
   * learned plan"): its state (AA_PLAN_*), requests per period, the arena's
   * bytes and the bytes live in it, requests served at their planned
   * offsets (hits) and requests the plan expected elsewhere or found its
   * room taken (misses), plans adopted, dropped (stopped matching, a
   * release) and refused (the window's replay said peak reserved would not
   * fall), and the bytes of peak reserved the adopted plan saves by that
   * replay. */
  uint64_t large_plan_state;
  uint64_t large_plan_period;
  uint64_t large_plan_bytes;
  uint64_t large_plan_live_bytes;
  uint64_t large_plan_hits;
  uint64_t large_plan_misses;
  uint64_t large_plans_adopted;
  uint64_t large_plans_dropped;
  uint64_t large_plans_refused;
  uint64_t large_plan_saved_bytes;
  /* Planning's cost (stats version 14): the last plan's planning time (ns,
   * on whichever thread made it), the longest the allocating thread was held
   * up by one plan (ns: the window's copy and the adoption's check when
   * planned on the helper thread, the whole planning call when on the
   * allocating thread), plans made on the allocating thread although the
   * helper was asked for (it could not be started, or the copy's memory was
   * short), and plans made on the helper that were discarded because the
   * requests had stopped repeating with their period before adoption. */
  uint64_t large_plan_ns;
  uint64_t large_plan_stall_max_ns;
  uint64_t large_plans_inline;
  uint64_t large_plans_stale;
  /* Stitched ranges whose aliases were made in one backend call (stats
   * version 15; aa_backend_ops.map_alias_run: on CUDA one cuMemSetAccess
   * for the range, where large_alias_maps counts its cuMemMap calls). */
  uint64_t large_alias_runs;
  /* Bytes mapped new for stitched ranges that the holes left short of a
   * request (stats version 16; policy large.stitch_grow: a range of the
   * holes' pages and these), counted in the page maps too. */
  uint64_t large_stitch_new_bytes;
  /* Stitching's time budget (stats version 17; aa_pool_config.
   * large_stitch_share): the time inside alias calls by the pool's clock,
   * and the requests refused a new range because the budget was spent
   * (each counted once; it then took what stitching would have spared: a
   * hole found after, or new memory). */
  uint64_t large_alias_ns;
  uint64_t large_stitch_deferred;
} aa_pool_stats;

/* aa_pool_stats.large_plan_state */
enum {
  AA_PLAN_OFF = 0,      /* not asked for, or the mode cannot (passthrough) */
  AA_PLAN_LEARNING = 1, /* watching the requests for a period */
  AA_PLAN_WAITING = 2,  /* planned: served from the period's next start */
  AA_PLAN_ACTIVE = 3,   /* requests served at their planned offsets */
  AA_PLAN_DRAINING = 4  /* dropped: its arena goes once its blocks are freed */
};

/* Takes a snapshot. Counters are per thread and summed here; no allocation
 * lock is held for more than a copy. Same as aa_pool_stats_get_opts(pool,
 * out, 0). */
AA_EXTERN int aa_pool_stats_get(aa_pool *pool, aa_pool_stats *out);

/* What aa_pool_stats_get_opts may leave out of a snapshot. */
enum {
  /* No request sizes: hist[] and hh[] stay zero (hh_count 0); every other
   * field is filled as by aa_pool_stats_get. Skips copying each thread's
   * histogram and size tables and the heavy-hitter merge (a sort of each
   * allocating thread's exact-size entries: most of a full snapshot's CPU
   * time, hundreds of microseconds per such thread), for callers that read the
   * counters only (torch.cuda.memory_stats, a progress line). */
  AA_STATS_NO_SIZES = 1
};

/* aa_pool_stats_get with `opts` (AA_STATS_* or'ed; 0: everything).
 * AA_EINVAL for a NULL argument or an unknown option bit (*out zeroed). */
AA_EXTERN int aa_pool_stats_get_opts(aa_pool *pool, aa_pool_stats *out, unsigned opts);

/* Where a pool's reserved bytes are now (aa_pool_account_get): bytes_reserved
 * split into disjoint categories that add up to it exactly. A value type; the
 * caller sets version and size before the call. */
#define AA_ACCOUNT_VERSION 1

typedef struct aa_pool_account {
  uint32_t version;        /* AA_ACCOUNT_VERSION, set by the caller */
  uint32_t size;           /* sizeof(aa_pool_account), set by the caller */
  uint64_t bytes_reserved; /* held from the backend: the sum of the fields below */
  uint64_t requested;      /* live requests, small and large, as asked for */
  /* handed-out block bytes beyond the request: a small request rounded up
   * to its class's block, a large one to its chunk (4 KiB and the split
   * minimum; passthrough: the segment) */
  uint64_t rounding;
  /* small path: slab bytes carved into blocks that nobody holds, usable now
   * (free slots in the central lists, and blocks sitting in threads' small
   * caches: those count as freed from the user's free on, as in
   * aa_pool_stats's blocks_free) */
  uint64_t slab_free;
  uint64_t slab_tails; /* small path: each slab's bytes past its last block */
  /* large path: free chunk bytes (mapped: an expandable segment's unmapped
   * pages are not reserved) usable now on some stream, the stream a chunk
   * was freed on at least */
  uint64_t holes;
  /* free bytes waiting for stream work before reuse: small blocks waiting
   * for a stream event (aa_pool_stats's pending_blocks: record_stream'd
   * blocks, and batches freed on one stream waiting for its event to serve
   * the others) and large free chunks whose record_stream'd streams' events
   * have not completed; the events are asked now, so blocks whose events
   * completed, though the pool has not looked yet, count as free */
  uint64_t stream_holds;
  uint64_t thread_caches; /* large blocks freed into threads' large caches */
  /* reserved and in none of the above: what the backend holds for the pool
   * outside slabs and chunks; with other threads allocating while the
   * account is taken, also the drift between its separate reads (then the
   * sum may exceed what was read, and bytes_reserved is the sum) */
  uint64_t other;
} aa_pool_account;

/* Fills *out with where `pool`'s reserved bytes are now. Takes the locks a
 * snapshot takes, one section at a time (large->mu and tc_mu, then each
 * class's); exact when no other thread uses the pool meanwhile. Not for the
 * hot path: it walks the large path's free lists and each class's pending
 * lists. AA_EINVAL for a NULL argument
 * or an out whose version or size is not this header's (*out unchanged). */
AA_EXTERN int aa_pool_account_get(aa_pool *pool, aa_pool_account *out);

/* Writes a snapshot as one JSON object into buf (NUL-terminated). Returns the
 * length that the whole object needs (excluding NUL), like snprintf: a result
 * >= cap means it was truncated. Field names are documented in docs/stats.md. */
AA_EXTERN size_t aa_pool_stats_json(const aa_pool_stats *st, char *buf, size_t cap);

/* Starts the peaks over again: peak_bytes_in_use and peak_bytes_reserved
 * (and each class's peak) read as the current values until they grow again
 * (torch.cuda.reset_peak_memory_stats). window_peak_bytes_in_use, which the
 * policy loop owns, is left alone. NULL is a no-op. */
AA_EXTERN void aa_pool_reset_peaks(aa_pool *pool);

/* ------------------------------------------------------------------ OOM */

#define AA_OOM_VERSION 2 /* 2: live_sizes (nlive, live) */
#define AA_OOM_TOP 8     /* entries in each of aa_oom_info's lists */

/* What the pool looked like when a request failed after the release and
 * the one retry (a value type, filled by the pool; version and size first).
 * Lists hold at most AA_OOM_TOP entries, the largest first. */
typedef struct aa_oom_info {
  uint32_t version; /* AA_OOM_VERSION */
  uint32_t size;    /* sizeof(aa_oom_info) */
  char pool[32];
  uint64_t time_ns; /* aa_now_ns() at the failure */
  uint64_t unix_ms; /* the wall clock then (ms since 1970) */
  uint64_t count;   /* the pool's failed requests so far, this one included */
  uint64_t request; /* bytes asked for */
  uint64_t stream;  /* the request's stream (0: the default one) */
  uint64_t bytes_reserved, bytes_in_use, bytes_requested, limit_bytes;
  uint64_t segments; /* slabs plus large-path segments */
  uint64_t slabs;    /* of them, slabs (each slab_size bytes) */
  uint64_t slab_size;
  uint64_t large_bytes_free; /* free bytes inside large-path segments */
  uint32_t nseg_sizes, nholes, ntop, nlive;
  aa_size_count seg_sizes[AA_OOM_TOP]; /* large-path segments: size, count */
  uint64_t holes[AA_OOM_TOP];          /* largest free large-path blocks */
  aa_size_count top[AA_OOM_TOP];       /* most requested exact sizes (heavy
                                          hitters; empty without telemetry) */
  aa_size_count live[AA_OOM_TOP];      /* live blocks by size: (block size,
                                          blocks in use), the sizes holding
                                          the most bytes (size x count) first;
                                          a class's blocks and the large
                                          path's blocks of one size each */
} aa_oom_info;

/* Called from the failing thread once aa_alloc is about to return NULL
 * (after the release and the retry), no pool lock held. `info` lives for the
 * call only. It must be quick (copy and return), must not allocate from
 * `pool` (an allocation from it that fails is not reported again), and
 * must not call aa_pool_set_oom_observer. Calls are one at a time per pool:
 * a failure while another is being reported is counted (info->count of the
 * next) but not reported. */
typedef void (*aa_oom_fn)(void *user, aa_pool *pool, const aa_oom_info *info);

/* Sets the observer (NULL: none). Returns once a call of the observer it
 * replaces has returned, so the old `user` may be freed then. */
AA_EXTERN void aa_pool_set_oom_observer(aa_pool *pool, aa_oom_fn fn, void *user);

/* Writes a record as one JSON object into buf, like aa_pool_stats_json
 * (the length needed is returned; >= cap means truncated). Fields are
 * documented in docs/stats.md. */
AA_EXTERN size_t aa_oom_info_json(const aa_oom_info *info, char *buf, size_t cap);

/* ------------------------------------------------------------------ walk */

/* What aa_pool_walk reports: each segment (a slab, a large-path segment, or
 * one mapped run of an expandable reservation), then its blocks in address
 * order, which tile the segment exactly (free space included). */
typedef enum aa_walk_kind {
  AA_WALK_SEGMENT = 1,
  AA_WALK_BLOCK = 2
} aa_walk_kind;

enum {
  AA_WALK_LARGE = 1,      /* segment: of the large path (else a slab) */
  AA_WALK_EXPANDABLE = 2, /* segment: a mapped run of an expandable reservation */
  AA_WALK_IN_USE = 4,     /* block: handed out (else free, cached or pending) */
  AA_WALK_STITCHED = 8,   /* segment: a stitched range (aa_pool_config.large_stitch): the
                             same memory as the blocks flagged AA_WALK_LENT, at a second
                             address; not more reserved memory */
  AA_WALK_LENT = 16,      /* block: free pages a stitched range maps again (not usable here
                             while it lives) */
  AA_WALK_PLANNED = 32,   /* block: in the learned plan's arena (aa_pool_config.large_plan),
                             at its planned offset (in use) or room between (free) */
  AA_WALK_SMALL_REQS = 64 /* segment: of the large path's region for requests of at most
                             1 MiB (docs/core.md "Placement"; in expandable mode a
                             reservation of its own), else of the larger requests' */
};

typedef struct aa_walk_entry {
  uint32_t kind;  /* aa_walk_kind */
  uint32_t flags; /* AA_WALK_* */
  uintptr_t address;
  size_t size;       /* bytes: the segment's, or the block's */
  size_t requested;  /* block in use: the size asked for; else 0 */
  size_t block_size; /* segment of a slab: its class's block size; else 0 */
} aa_walk_entry;

/* Called for each entry; a nonzero return stops the walk. It runs under the
 * pool's class or large-path lock: it must not call into the same pool, and
 * should only copy what it needs. */
typedef int (*aa_walk_fn)(void *user, const aa_walk_entry *e);

/* Walks every segment of the pool and its blocks (a consistent view of each
 * class and of the large path; other threads may allocate between those).
 * Blocks in thread caches are reported free. Returns AA_OK, AA_EINVAL for a
 * NULL pool or fn, or the callback's nonzero value when it stopped the
 * walk. For snapshots (torch.cuda.memory._snapshot), not for hot paths. */
AA_EXTERN int aa_pool_walk(aa_pool *pool, aa_walk_fn fn, void *user);

/* The large path's part of aa_pool_walk alone (its segments, AA_WALK_LARGE,
 * and their blocks, as aa_pool_walk reports them after the slabs), under the
 * large-path lock only: no class lock is taken, so small requests never wait
 * for it however many slabs the pool has. For views of the large path (the
 * server's GET /segments). Returns as aa_pool_walk. */
AA_EXTERN int aa_pool_walk_large(aa_pool *pool, aa_walk_fn fn, void *user);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_CORE_H */
