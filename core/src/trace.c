/*
 * trace.c — trace events: the callback set by aa_pool_set_trace called for
 * each allocation, free and recorded use, with a process-wide sequence
 * number, and sampled tracing (the rule that draws allocations into the
 * trace and the set of traced live blocks that makes their frees follow
 * them). Entry points: aa__trace, aa__trace_at, aa__trace_free_begin,
 * aa__tsample_configure, aa_pool_trace_frame, aa_pool_trace_frame_of. What telemetry counts of each
 * request's size is the sampler's (sampler.c).
 */
#include <string.h>

#include "core_internal.h"

/* ------------------------------------------------------------ trace */

/* One counter for every pool: a thread may move a block between pools'
 * traces only through the caller, and one order is simpler to merge. The
 * read-modify-writes of one atomic are totally ordered consistently with
 * happens-before, so a free's number (taken before the block is published)
 * is below that of the allocation that takes the block afterwards. */
static _Atomic uint64_t g_trace_seq;

uint64_t aa__trace_seq_next(void) {
  return atomic_fetch_add_explicit(&g_trace_seq, 1, memory_order_acq_rel) + 1;
}

/* ------------------------------------------------------------ sampling */

/* The traced live blocks while sampling: an open-addressing set of
 * addresses (0 empty, AA__TS_GONE a removed entry), probed linearly at most
 * AA__TS_PROBES slots from the address's home, so a lookup of an address
 * not in it costs at most that many loads however full the table. Inserted
 * by the allocating thread, removed by the freeing one (a block is in it at
 * most once: it is live while it is); every access is an atomic, and the
 * table lives as long as the pool, so a free that races a reconfiguration
 * at worst misses an entry of the old sample.
 *
 * Beside each slot, the id of the call stack last attached to its block
 * (aa_pool_trace_frame; 0 none), so that a live block's stack can be named
 * (aa_pool_trace_frame_of, GET /holders): set by the thread that owns the
 * block, cleared by its free before the slot is given up (the release of
 * that exchange orders the clear before the next owner's acquire, so a
 * later block never inherits a stale id). Ids are the store's (at most
 * AA_STORE_MAX_FRAMES a run): 32 bits, 256 KiB beside the 512 KiB of
 * addresses. */
#define AA__TS_GONE ((uintptr_t)1)
#define AA__TS_PROBES 32u
_Static_assert((AA_TRACE_SAMPLE_SLOTS & (AA_TRACE_SAMPLE_SLOTS - 1)) == 0,
               "the sample table's size is a power of two");

typedef struct aa__tsample {
  _Atomic bool on; /* sampling (else every event is traced) */
  _Atomic uint32_t every;
  _Atomic uint64_t min_bytes;
  _Atomic uint64_t traced, skipped, full, live;
  _Atomic uintptr_t slot[AA_TRACE_SAMPLE_SLOTS];
  _Atomic uint32_t frame[AA_TRACE_SAMPLE_SLOTS]; /* beside slot[i] */
} aa__tsample;

static inline size_t ts_home(uintptr_t p) {
  return (size_t)(((uint64_t)p * 0x9E3779B97F4A7C15ull) >> 40) & (AA_TRACE_SAMPLE_SLOTS - 1);
}

static bool ts_insert(aa__tsample *ts, uintptr_t p) {
  size_t h = ts_home(p);
  for (uint32_t i = 0; i < AA__TS_PROBES; i++) {
    _Atomic uintptr_t *s = &ts->slot[(h + i) & (AA_TRACE_SAMPLE_SLOTS - 1)];
    uintptr_t v = atomic_load_explicit(s, AA__RLX);
    if (v > AA__TS_GONE)
      continue;
    /* acquire: after the free that gave the slot up cleared its frame */
    if (atomic_compare_exchange_strong_explicit(s, &v, p, memory_order_acquire, AA__RLX)) {
      atomic_fetch_add_explicit(&ts->live, 1, AA__RLX);
      return true;
    }
  }
  atomic_fetch_add_explicit(&ts->full, 1, AA__RLX);
  return false;
}

/* The slot holding p, or NULL. Looks past removed entries, stops at an
 * empty slot (never written since the clear: nothing was placed beyond). */
static _Atomic uintptr_t *ts_find(aa__tsample *ts, uintptr_t p) {
  size_t h = ts_home(p);
  for (uint32_t i = 0; i < AA__TS_PROBES; i++) {
    _Atomic uintptr_t *s = &ts->slot[(h + i) & (AA_TRACE_SAMPLE_SLOTS - 1)];
    uintptr_t v = atomic_load_explicit(s, AA__RLX);
    if (v == p)
      return s;
    if (v == 0)
      return NULL;
  }
  return NULL;
}

static _Atomic uint32_t *ts_frame(aa__tsample *ts, _Atomic uintptr_t *s) {
  return &ts->frame[s - ts->slot];
}

static bool ts_remove(aa__tsample *ts, uintptr_t p) {
  _Atomic uintptr_t *s = ts_find(ts, p);
  uintptr_t want = p;
  if (s == NULL)
    return false;
  /* only p's owner frees it: the slot stays p until the exchange below */
  atomic_store_explicit(ts_frame(ts, s), 0, AA__RLX);
  if (!atomic_compare_exchange_strong_explicit(s, &want, AA__TS_GONE, memory_order_release,
                                               AA__RLX))
    return false;
  atomic_fetch_sub_explicit(&ts->live, 1, AA__RLX);
  return true;
}

/* The calling thread's countdown to its next sampled allocation, and its
 * generator (xorshift64*, seeded from the thread id and the clock). */
static _Thread_local uint64_t tl_rng;
static _Thread_local uint64_t tl_left;

static uint64_t ts_draw(uint32_t every) {
  if (tl_rng == 0)
    tl_rng = (aa__thread_id() * 0x9E3779B97F4A7C15ull) ^ aa_now_ns() ^ 0x2545F4914F6CDD1Dull;
  tl_rng ^= tl_rng >> 12;
  tl_rng ^= tl_rng << 25;
  tl_rng ^= tl_rng >> 27;
  uint64_t r = tl_rng * 0x2545F4914F6CDD1Dull;
  /* uniform on 1 .. 2*every-1: mean `every` */
  return 1 + (r >> 11) % (2 * (uint64_t)every - 1);
}

/* Whether an allocation of `size` is drawn into the sample. */
static bool ts_take(aa__tsample *ts, size_t size) {
  uint64_t min = atomic_load_explicit(&ts->min_bytes, AA__RLX);
  if (min != 0 && size >= min)
    return true;
  uint32_t every = atomic_load_explicit(&ts->every, AA__RLX);
  if (every == 0)
    return false;
  if (every == 1)
    return true;
  if (tl_left == 0 || tl_left > 2 * (uint64_t)every)
    tl_left = ts_draw(every); /* a new thread, or a smaller `every` */
  if (--tl_left == 0) {
    tl_left = ts_draw(every);
    return true;
  }
  return false;
}

static aa__tsample *sampling(aa_pool *pool) {
  aa__tsample *ts = atomic_load_explicit(&pool->tsample, memory_order_acquire);
  return ts != NULL && atomic_load_explicit(&ts->on, AA__RLX) ? ts : NULL;
}

int aa__tsample_configure(aa_pool *pool, uint32_t every, uint64_t min_bytes) {
  bool on = !(every == 1 && min_bytes == 0);
  aa__tsample *ts = atomic_load_explicit(&pool->tsample, memory_order_acquire);
  if (!on) {
    if (ts != NULL)
      atomic_store_explicit(&ts->on, false, AA__RLX);
    return AA_OK;
  }
  if (ts == NULL) {
    ts = calloc(1, sizeof *ts);
    if (ts == NULL)
      return AA_ENOMEM;
    atomic_store_explicit(&pool->tsample, ts, memory_order_release);
  }
  for (size_t i = 0; i < AA_TRACE_SAMPLE_SLOTS; i++) {
    atomic_store_explicit(&ts->slot[i], 0, AA__RLX);
    atomic_store_explicit(&ts->frame[i], 0, AA__RLX);
  }
  atomic_store_explicit(&ts->traced, 0, AA__RLX);
  atomic_store_explicit(&ts->skipped, 0, AA__RLX);
  atomic_store_explicit(&ts->full, 0, AA__RLX);
  atomic_store_explicit(&ts->live, 0, AA__RLX);
  atomic_store_explicit(&ts->every, every, AA__RLX);
  atomic_store_explicit(&ts->min_bytes, min_bytes, AA__RLX);
  atomic_store_explicit(&ts->on, true, AA__RLX);
  /* published to allocating threads by the trace record's exchange that
   * follows (seq_cst; aa__trace_at reads it acquire) */
  return AA_OK;
}

void aa__tsample_free(aa_pool *pool) {
  free(atomic_load_explicit(&pool->tsample, AA__RLX));
  atomic_store_explicit(&pool->tsample, NULL, AA__RLX);
}

uint64_t aa__trace_free_begin(aa_pool *pool, const void *p, bool *claimed) {
  aa__tsample *ts = sampling(pool);
  *claimed = false;
  if (ts != NULL && p != NULL) {
    if (!ts_remove(ts, (uintptr_t)p))
      return 0;
    *claimed = true;
  }
  return aa__trace_seq_next();
}

void aa__trace_free_undo(aa_pool *pool, const void *p) {
  aa__tsample *ts = sampling(pool);
  if (ts != NULL)
    (void)ts_insert(ts, (uintptr_t)p);
}

bool aa_pool_trace_wants(aa_pool *pool, const void *ptr) {
  if (pool == NULL || ptr == NULL ||
      (atomic_load_explicit(&pool->tflags, AA__RLX) & AA__TF_TRACE) == 0)
    return false;
  aa__tsample *ts = sampling(pool);
  return ts == NULL || ts_find(ts, (uintptr_t)ptr) != NULL;
}

void aa_pool_trace_sample_counts(aa_pool *pool, uint64_t *traced, uint64_t *skipped,
                                 uint64_t *live, uint64_t *table_full) {
  aa__tsample *ts = pool ? atomic_load_explicit(&pool->tsample, memory_order_acquire) : NULL;
  if (traced)
    *traced = ts ? atomic_load_explicit(&ts->traced, AA__RLX) : 0;
  if (skipped)
    *skipped = ts ? atomic_load_explicit(&ts->skipped, AA__RLX) : 0;
  if (live)
    *live = ts ? atomic_load_explicit(&ts->live, AA__RLX) : 0;
  if (table_full)
    *table_full = ts ? atomic_load_explicit(&ts->full, AA__RLX) : 0;
}

/* ------------------------------------------------------------ events */

static void trace_emit(aa_pool *pool, char op, const void *p, size_t size, aa_stream s,
                       uint64_t seq, uint64_t frame) {
  aa__trace_cb *t = atomic_load_explicit(&pool->trace, memory_order_acquire);
  if (t == NULL || t->fn == NULL)
    return;
  /* Announce the call, then check the record is still the one in force:
   * with both sides sequentially consistent, either aa_pool_set_trace sees
   * this call in flight and waits for it, or this sees the new record and
   * skips (its user may be gone once set_trace returned). */
  atomic_fetch_add_explicit(&t->inflight, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&pool->trace, memory_order_seq_cst) != t)
    goto out;
  aa__tsample *ts = sampling(pool);
  if (ts != NULL) {
    /* a free was decided by aa__trace_free_begin, before the block left */
    if (op == 'a' || op == 'x') {
      if (!ts_take(ts, size)) {
        atomic_fetch_add_explicit(&ts->skipped, 1, AA__RLX);
        goto out;
      }
      if (op == 'a' && !ts_insert(ts, (uintptr_t)p))
        goto out;
      atomic_fetch_add_explicit(&ts->traced, 1, AA__RLX);
    } else if (op == 'u' || op == 'c') {
      if (ts_find(ts, (uintptr_t)p) == NULL)
        goto out;
    }
  }
  aa_trace_event ev;
  memset(&ev, 0, sizeof ev);
  ev.seq = seq;
  ev.time_ns = aa_now_ns();
  ev.ptr = (uint64_t)(uintptr_t)p;
  ev.size = size;
  ev.stream = (uint64_t)(uintptr_t)s;
  ev.thread = aa__thread_id();
  ev.op = op;
  ev.frame = frame;
  t->fn(t->user, &ev);
out:
  atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_release);
}

void aa__trace(aa_pool *pool, char op, const void *p, size_t size, aa_stream s) {
  trace_emit(pool, op, p, size, s, aa__trace_seq_next(), 0);
}

void aa__trace_at(aa_pool *pool, char op, const void *p, size_t size, aa_stream s, uint64_t seq) {
  trace_emit(pool, op, p, size, s, seq, 0);
}

int aa_pool_trace_frame(aa_pool *pool, const void *ptr, uint64_t frame) {
  if (pool == NULL || ptr == NULL || frame == 0)
    return AA_EINVAL;
  if (!aa_pool_trace_wants(pool, ptr))
    return AA_ENOENT;
  /* kept beside the block while sampling (the caller owns the block, so
   * its slot stays put); an id past 32 bits is not kept (never a store's) */
  aa__tsample *ts = sampling(pool);
  if (ts != NULL) {
    _Atomic uintptr_t *s = ts_find(ts, (uintptr_t)ptr);
    if (s != NULL)
      atomic_store_explicit(ts_frame(ts, s), frame <= UINT32_MAX ? (uint32_t)frame : 0, AA__RLX);
  }
  /* numbered after the block's allocation, before its free (the caller
   * owns the block) */
  trace_emit(pool, 'c', ptr, 0, NULL, aa__trace_seq_next(), frame);
  return AA_OK;
}

uint64_t aa_pool_trace_frame_of(aa_pool *pool, const void *ptr) {
  if (pool == NULL || ptr == NULL ||
      (atomic_load_explicit(&pool->tflags, AA__RLX) & AA__TF_TRACE) == 0)
    return 0;
  aa__tsample *ts = sampling(pool);
  if (ts == NULL)
    return 0;
  _Atomic uintptr_t *s = ts_find(ts, (uintptr_t)ptr);
  if (s == NULL)
    return 0;
  uint32_t f = atomic_load_explicit(ts_frame(ts, s), memory_order_acquire);
  /* the block may have been freed meanwhile (a reader, not its owner):
   * an id read while the slot still held it is its */
  return atomic_load_explicit(s, memory_order_acquire) == (uintptr_t)ptr ? f : 0;
}
