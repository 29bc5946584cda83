/*
 * telemetry.c — the parts of telemetry shared by the paths: the heavy-hitter
 * table, folding an exiting thread's size table and heavy hitters into the
 * pool's dead totals, and trace events with their process-wide sequence.
 * (Counting a request happens inline on the alloc path, alloc.c.)
 */
#include <string.h>

#include "core_internal.h"

/* ------------------------------------------------------------ telemetry */

void aa__hh_add(aa__hh_slot *t, size_t nslots, uint64_t size, uint64_t count) {
  size_t mask = nslots - 1;
  size_t h = (size_t)((size * 0x9E3779B97F4A7C15ull) >> 40) & mask;
  aa__hh_slot *a = &t[h], *b = &t[h ^ 1];
  uint64_t as = aa__cget(&a->size), bs = aa__cget(&b->size);
  uint64_t ac = aa__cget(&a->count), bc = aa__cget(&b->count);
  if (as == size && ac > 0) {
    atomic_store_explicit(&a->count, ac + count, AA__RLX);
  } else if (bs == size && bc > 0) {
    atomic_store_explicit(&b->count, bc + count, AA__RLX);
  } else if (ac == 0) {
    atomic_store_explicit(&a->size, size, AA__RLX);
    atomic_store_explicit(&a->count, count, AA__RLX);
  } else if (bc == 0) {
    atomic_store_explicit(&b->size, size, AA__RLX);
    atomic_store_explicit(&b->count, count, AA__RLX);
  } else {
    /* both taken by other sizes: decay the smaller (Misra-Gries style);
     * a size that keeps coming takes the slot over */
    aa__hh_slot *m = ac <= bc ? a : b;
    uint64_t mc = ac <= bc ? ac : bc;
    if (mc <= count) {
      atomic_store_explicit(&m->size, size, AA__RLX);
      atomic_store_explicit(&m->count, count - mc + 1, AA__RLX);
    } else {
      atomic_store_explicit(&m->count, mc - count, AA__RLX);
    }
  }
}

void aa__fold_hh(aa_pool *pool, const aa__hh_slot *t, size_t n) {
  if (pool->dead_hh == NULL)
    return;
  for (size_t i = 0; i < n; i++) {
    uint64_t c = aa__cget(&t[i].count);
    if (c)
      aa__hh_add(pool->dead_hh, pool->dead_hh_n, aa__cget(&t[i].size), c);
  }
}

/* The size table of a dying thread into the dead totals. tc_mu held. */
void aa__fold_sz(aa_pool *pool, aa__tcache *tc) {
  for (uint32_t i = 0; i < AA__SZ_SLOTS; i++) {
    uint64_t w = atomic_load_explicit(&tc->sz[i], AA__RLX);
    uint64_t n = aa__run_count(w);
    if (n == 0)
      continue;
    atomic_store_explicit(&tc->sz[i], 0, AA__RLX);
    aa__cadd(&pool->dead_hist[aa__hist_bucket((size_t)aa__run_size(w))], n);
    if (pool->dead_hh)
      aa__hh_add(pool->dead_hh, pool->dead_hh_n, aa__run_size(w), n);
  }
}

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
