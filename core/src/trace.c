/*
 * trace.c — trace events: the callback set by aa_pool_set_trace called for
 * each allocation, free and recorded use, with a process-wide sequence
 * number (aa__trace, aa__trace_at, aa__trace_seq_next). What telemetry
 * counts of each request's size is the sampler's (sampler.c).
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

void aa__trace(aa_pool *pool, char op, const void *p, size_t size, aa_stream s) {
  aa__trace_at(pool, op, p, size, s, aa__trace_seq_next());
}

void aa__trace_at(aa_pool *pool, char op, const void *p, size_t size, aa_stream s, uint64_t seq) {
  aa__trace_cb *t = atomic_load_explicit(&pool->trace, memory_order_acquire);
  if (t == NULL || t->fn == NULL)
    return;
  /* Announce the call, then check the record is still the one in force:
   * with both sides sequentially consistent, either aa_pool_set_trace sees
   * this call in flight and waits for it, or this sees the new record and
   * skips (its user may be gone once set_trace returned). */
  atomic_fetch_add_explicit(&t->inflight, 1, memory_order_seq_cst);
  if (atomic_load_explicit(&pool->trace, memory_order_seq_cst) != t) {
    atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_release);
    return;
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
  t->fn(t->user, &ev);
  atomic_fetch_sub_explicit(&t->inflight, 1, memory_order_release);
}
