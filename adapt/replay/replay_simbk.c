/*
 * replay_simbk.c — the replay simulator's backend: fake addresses that
 * nobody touches (freed ranges of one size reused first), call and byte
 * counters, an optional capacity, stream events that complete on the
 * trace's clock, and expandable-segment reservations and page maps.
 * Entry points: aa__simbk_new, aa__simbk_free (the ops table is sim_ops).
 */
#include <stdlib.h>
#include <string.h>

#include "replay_sim.h"

/* ---------------------------------------------------------------- backend */

#define SIM_ALIGN (2ull << 20)

static sim_event done_event = {NULL, 0, 1};

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static addr_stack *stack_find(simbk *b, uint64_t size, bool create) {
  size_t i;

  if (b->stacks == NULL || (create && (b->nstacks_used + 1) * 2 >
                                          b->nstacks_mask + 1)) {
    size_t ncap = b->stacks == NULL ? 64 : (b->nstacks_mask + 1) * 2;
    addr_stack *ns;
    size_t j;
    if (!create)
      return NULL;
    ns = calloc(ncap, sizeof *ns);
    if (ns == NULL)
      return NULL;
    for (j = 0; b->stacks != NULL && j <= b->nstacks_mask; j++) {
      addr_stack *o = &b->stacks[j];
      size_t k;
      if (o->size == 0)
        continue;
      k = (size_t)((o->size * 0x9e3779b97f4a7c15ull) >> 20) & (ncap - 1);
      while (ns[k].size != 0)
        k = (k + 1) & (ncap - 1);
      ns[k] = *o;
    }
    free(b->stacks);
    b->stacks = ns;
    b->nstacks_mask = ncap - 1;
  }
  i = (size_t)((size * 0x9e3779b97f4a7c15ull) >> 20) & b->nstacks_mask;
  while (b->stacks[i].size != 0 && b->stacks[i].size != size)
    i = (i + 1) & b->nstacks_mask;
  if (b->stacks[i].size == 0) {
    if (!create)
      return NULL;
    b->stacks[i].size = size;
    b->nstacks_used++;
  }
  return &b->stacks[i];
}

static int sim_alloc(aa_backend *be, size_t size, void **out) {
  simbk *b = be->ctx;
  uint64_t addr = 0;
  addr_stack *st;
  int rc = AA_OK;

  *out = NULL;
  if (size == 0)
    return AA_EINVAL;
  pthread_mutex_lock(&b->mu);
  if (b->capacity != 0 &&
      size > b->capacity - atomic_load_explicit(&b->held, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&b->refused, 1, memory_order_relaxed);
    rc = AA_ENOMEM; /* the simulated device is full: a figure of the replay */
    goto out;
  }
  if (size > SIM_ADDR_LIMIT - SIM_BASE_ADDR) {
    atomic_fetch_add_explicit(&b->space_exhausted, 1, memory_order_relaxed);
    rc = AA_ENOMEM; /* more than the fake address space holds */
    goto out;
  }
  st = stack_find(b, size, false);
  if (st != NULL && st->n > 0) {
    addr = st->v[--st->n];
  } else {
    uint64_t span = round_up(size, SIM_ALIGN);
    if (b->next_addr + span > SIM_ADDR_LIMIT || b->next_addr + span < b->next_addr) {
      atomic_fetch_add_explicit(&b->space_exhausted, 1, memory_order_relaxed);
      rc = AA_ENOMEM; /* fake address space exhausted */
      goto out;
    }
    addr = b->next_addr;
    b->next_addr += span;
  }
  atomic_fetch_add_explicit(&b->held, size, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->alloc_bytes, size, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->cost_ns, b->cost_alloc_ns, memory_order_relaxed);
  *out = (void *)(uintptr_t)addr;
out:
  if (rc != AA_OK)
    atomic_fetch_add_explicit(&b->failures, 1, memory_order_relaxed);
  pthread_mutex_unlock(&b->mu);
  return rc;
}

static void sim_free(aa_backend *be, void *ptr, size_t size) {
  simbk *b = be->ctx;
  addr_stack *st;

  if (ptr == NULL)
    return;
  pthread_mutex_lock(&b->mu);
  atomic_fetch_sub_explicit(&b->held, size, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->frees, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->cost_ns, b->cost_free_ns, memory_order_relaxed);
  st = stack_find(b, size, true);
  if (st != NULL) {
    if (st->n == st->cap) {
      size_t ncap = st->cap == 0 ? 8 : st->cap * 2;
      uint64_t *nv = realloc(st->v, ncap * sizeof *nv);
      if (nv != NULL) {
        st->v = nv;
        st->cap = ncap;
      }
    }
    if (st->n < st->cap)
      st->v[st->n++] = (uint64_t)(uintptr_t)ptr;
    /* else: the range is simply not reused (address space is plentiful) */
  }
  pthread_mutex_unlock(&b->mu);
}

/* Whether no event of the trace has begun since the last synchronize
 * (replay_sim.c resets synced_at at each event). */
static bool sim_synced_now(simbk *b) {
  return atomic_load_explicit(&b->synced_at, memory_order_relaxed) ==
         atomic_load_explicit(&b->now_ns, memory_order_relaxed);
}

static int sim_event_record(aa_backend *be, aa_stream stream, void **out) {
  simbk *b = be->ctx;
  sim_event *e;

  (void)stream;
  atomic_fetch_add_explicit(&b->event_records, 1, memory_order_relaxed);
  if (b->delay_ns == 0 || sim_synced_now(b)) {
    *out = &done_event;
    return AA_OK;
  }
  pthread_mutex_lock(&b->mu);
  e = b->free_events;
  if (e != NULL) {
    b->free_events = e->next;
  } else {
    if (b->nall == b->capall) {
      size_t ncap = b->capall == 0 ? 64 : b->capall * 2;
      sim_event **na = realloc(b->all_events, ncap * sizeof *na);
      if (na == NULL) {
        pthread_mutex_unlock(&b->mu);
        *out = NULL;
        return AA_ENOMEM;
      }
      b->all_events = na;
      b->capall = ncap;
    }
    e = malloc(sizeof *e);
    if (e == NULL) {
      pthread_mutex_unlock(&b->mu);
      *out = NULL;
      return AA_ENOMEM;
    }
    b->all_events[b->nall++] = e;
  }
  e->next = NULL;
  e->done = 0;
  e->complete_at =
      atomic_load_explicit(&b->now_ns, memory_order_relaxed) + b->delay_ns;
  pthread_mutex_unlock(&b->mu);
  *out = e;
  return AA_OK;
}

static int sim_event_query(aa_backend *be, void *ev) {
  simbk *b = be->ctx;
  sim_event *e = ev;
  int rc;

  if (e == NULL || e == &done_event)
    return AA_OK;
  pthread_mutex_lock(&b->mu);
  rc = (e->done ||
        atomic_load_explicit(&b->now_ns, memory_order_relaxed) >= e->complete_at)
           ? AA_OK
           : AA_EAGAIN;
  pthread_mutex_unlock(&b->mu);
  return rc;
}

/* Orders `stream` after `ev` (the pool's stream-ordered reuse, as
 * cudaStreamWaitEvent on a GPU): the host never waits for it, and the trace
 * clock is the only clock, so there is nothing to do here. Offered so the
 * pool reuses a pending block the way it does over CUDA (its
 * large_stream_waits counts them). */
static int sim_stream_wait(aa_backend *be, aa_stream stream, void *ev) {
  (void)be, (void)stream, (void)ev;
  return AA_OK;
}

static void sim_event_release(aa_backend *be, void *ev) {
  simbk *b = be->ctx;
  sim_event *e = ev;

  if (e == NULL || e == &done_event)
    return;
  pthread_mutex_lock(&b->mu);
  e->next = b->free_events;
  b->free_events = e;
  pthread_mutex_unlock(&b->mu);
}

static int sim_synchronize(aa_backend *be) {
  simbk *b = be->ctx;
  size_t i;

  pthread_mutex_lock(&b->mu);
  for (i = 0; i < b->nall; i++)
    b->all_events[i]->done = 1;
  atomic_store_explicit(&b->synced_at, atomic_load_explicit(&b->now_ns, memory_order_relaxed),
                        memory_order_relaxed);
  pthread_mutex_unlock(&b->mu);
  return AA_OK;
}

/* A stream is idle (cudaStreamQuery's success) only right after a
 * synchronize, before the trace's next event: otherwise the recorded
 * program keeps queueing work, which completes event_delay_ns behind it.
 * Without this, a block freed before an out-of-memory retry's synchronize
 * looked busy after it (the event asked for then completed a delay later),
 * so that the retry could not unmap its pages: failures under a limit with
 * --event-delay-us that a device, idle after the synchronize, does not have
 * (vit's trace under a limit of 2,985 MiB at 1 ms: 5 with stitching). */
static int sim_stream_query(aa_backend *be, aa_stream stream) {
  simbk *b = be->ctx;
  (void)stream;
  /* (without a delay an event is complete when recorded: the pool asks for one) */
  return b->delay_ns != 0 && sim_synced_now(b) ? AA_OK : AA_EAGAIN;
}

/* Virtual memory, for the expandable large path: a reservation is fresh
 * fake address space; a mapped page counts as held memory and as one
 * backend alloc (an unmap as one free), with the device's 2 MiB pages. */
static size_t sim_map_granularity(aa_backend *be) {
  (void)be;
  return SIM_ALIGN;
}

static int sim_va_reserve(aa_backend *be, size_t size, void **out) {
  simbk *b = be->ctx;
  int rc = AA_OK;

  *out = NULL;
  pthread_mutex_lock(&b->mu);
  if (size == 0 || (b->capacity != 0 && size > b->capacity)) {
    atomic_fetch_add_explicit(&b->refused, 1, memory_order_relaxed);
    rc = AA_ENOMEM; /* more than the simulated device could ever map */
  } else if (size > SIM_ADDR_LIMIT - b->next_addr) {
    atomic_fetch_add_explicit(&b->space_exhausted, 1, memory_order_relaxed);
    rc = AA_ENOMEM; /* fake address space exhausted */
  } else {
    *out = (void *)(uintptr_t)b->next_addr;
    b->next_addr += round_up(size, SIM_ALIGN);
  }
  pthread_mutex_unlock(&b->mu);
  return rc;
}

static void sim_va_release(aa_backend *be, void *base, size_t size) {
  (void)be, (void)base, (void)size; /* fake address space is not reused */
}

static int sim_map(aa_backend *be, void *addr, size_t size, void **handle) {
  simbk *b = be->ctx;
  int rc = AA_OK;

  *handle = NULL;
  pthread_mutex_lock(&b->mu);
  if (addr == NULL || size == 0 || (uintptr_t)addr % SIM_ALIGN != 0)
    rc = AA_EINVAL;
  else if (b->capacity != 0 &&
           size > b->capacity - atomic_load_explicit(&b->held, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&b->refused, 1, memory_order_relaxed);
    rc = AA_ENOMEM;
  }
  if (rc == AA_OK) {
    atomic_fetch_add_explicit(&b->held, size, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->alloc_bytes, size, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->cost_ns, b->cost_alloc_ns, memory_order_relaxed);
    *handle = addr;
  } else {
    atomic_fetch_add_explicit(&b->failures, 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&b->mu);
  return rc;
}

static void sim_unmap(aa_backend *be, void *addr, size_t size, void *handle) {
  simbk *b = be->ctx;

  (void)addr, (void)handle;
  atomic_fetch_sub_explicit(&b->held, size, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->frees, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->cost_ns, b->cost_free_ns, memory_order_relaxed);
}

/* An alias is the same memory at a second address: nothing held changes;
 * counted apart (aliases) from maps. */
static int sim_map_alias(aa_backend *be, void *addr, size_t size, void *handle) {
  simbk *b = be->ctx;
  if (addr == NULL || size == 0 || (uintptr_t)addr % SIM_ALIGN != 0 || handle == NULL)
    return AA_EINVAL;
  atomic_fetch_add_explicit(&b->aliases, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->cost_ns, b->cost_alias_ns, memory_order_relaxed);
  return AA_OK;
}

static void sim_unmap_alias(aa_backend *be, void *addr, size_t size, void *handle) {
  simbk *b = be->ctx;
  (void)addr, (void)size, (void)handle;
  atomic_fetch_add_explicit(&b->unaliases, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->cost_ns, b->cost_unalias_ns, memory_order_relaxed);
}

static const aa_backend_ops sim_ops = {
    .alloc = sim_alloc,
    .free = sim_free,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_release = sim_event_release,
    .stream_wait = sim_stream_wait,
    .stream_query = sim_stream_query,
    .synchronize = sim_synchronize,
    .map_granularity = sim_map_granularity,
    .va_reserve = sim_va_reserve,
    .va_release = sim_va_release,
    .map = sim_map,
    .unmap = sim_unmap,
    .map_alias = sim_map_alias,
    .unmap_alias = sim_unmap_alias,
};

void aa__simbk_free(simbk *b) {
  size_t i;

  if (b == NULL)
    return;
  for (i = 0; b->stacks != NULL && i <= b->nstacks_mask; i++)
    free(b->stacks[i].v);
  free(b->stacks);
  for (i = 0; i < b->nall; i++)
    free(b->all_events[i]);
  free(b->all_events);
  pthread_mutex_destroy(&b->mu);
  free(b);
}

static uint64_t us_to_ns(double us) {
  return us > 0 && us < 1e12 ? (uint64_t)(us * 1000.0 + 0.5) : 0;
}

void aa__simbk_costs(simbk *b, const aa_replay_costs *c) {
  b->cost_alloc_ns = us_to_ns(c->alloc_us);
  b->cost_free_ns = us_to_ns(c->free_us);
  b->cost_alias_ns = us_to_ns(c->alias_us);
  b->cost_unalias_ns = us_to_ns(c->unalias_us);
}

uint64_t aa__simbk_clock(void *user) {
  simbk *b = user;
  return atomic_load_explicit(&b->now_ns, memory_order_relaxed) +
         atomic_load_explicit(&b->cost_ns, memory_order_relaxed);
}

simbk *aa__simbk_new(uint64_t capacity, uint64_t delay_ns) {
  simbk *b = calloc(1, sizeof *b);

  if (b == NULL)
    return NULL;
  if (pthread_mutex_init(&b->mu, NULL) != 0) {
    free(b);
    return NULL;
  }
  b->be.ops = &sim_ops;
  b->be.ctx = b;
  b->be.kind = AA_BACKEND_CUSTOM;
  b->be.device = -1;
  b->be.name = "replay";
  b->next_addr = SIM_BASE_ADDR;
  b->capacity = capacity;
  b->delay_ns = delay_ns;
  atomic_init(&b->synced_at, UINT64_MAX);
  return b;
}
