/*
 * replay_sim.c — the replay simulator: a simulated backend (fake addresses
 * that nobody touches, call counters, a clock for stream events) under a
 * real core pool, and the loop that feeds recorded events to that pool and
 * measures what happens.
 *
 * Entry points: aa_replay_sim_new, aa_replay_sim_feed (a sink), then
 * aa_replay_sim_result / aa_replay_sim_sizes, and aa_replay_sim_free.
 *
 * The recorded pointer of each live allocation maps (open addressing,
 * backward-shift deletion) to the block the core returned, its requested
 * size and its block size (aa_block_size), so figures are kept exactly and
 * incrementally: in use = sum of live block sizes, requested = sum of live
 * requested sizes, reserved = bytes the backend holds. Time integrals use
 * the events' times; a trace without times falls back to event counts.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "replay_internal.h"

/* ---------------------------------------------------------------- backend */

#define SIM_BASE_ADDR 0x100000000000ull /* 16 TiB: clearly fake */
#define SIM_ADDR_LIMIT 0x7f0000000000ull
#define SIM_ALIGN (2ull << 20)

typedef struct sim_event {
  struct sim_event *next;
  uint64_t complete_at;
  int done;
} sim_event;

/* Freed address ranges of one size, reused before new address space. */
typedef struct addr_stack {
  uint64_t size; /* 0 = empty slot */
  uint64_t *v;
  size_t n, cap;
} addr_stack;

typedef struct simbk {
  aa_backend be; /* handed to the pool; be.ctx points back here */
  pthread_mutex_t mu;
  uint64_t next_addr;
  addr_stack *stacks; /* open addressing on size */
  size_t nstacks_mask;
  size_t nstacks_used;
  uint64_t capacity;
  uint64_t delay_ns;
  sim_event *free_events;
  sim_event **all_events; /* every event ever made, for synchronize/teardown */
  size_t nall, capall;
  _Atomic uint64_t now_ns;
  _Atomic uint64_t held;
  _Atomic uint64_t allocs, frees, failures, alloc_bytes;
  _Atomic uint64_t event_records;
} simbk;

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
  if (size > SIM_ADDR_LIMIT - SIM_BASE_ADDR ||
      (b->capacity != 0 &&
       size > b->capacity - atomic_load_explicit(&b->held, memory_order_relaxed))) {
    rc = AA_ENOMEM;
    goto out;
  }
  st = stack_find(b, size, false);
  if (st != NULL && st->n > 0) {
    addr = st->v[--st->n];
  } else {
    uint64_t span = round_up(size, SIM_ALIGN);
    if (b->next_addr + span > SIM_ADDR_LIMIT || b->next_addr + span < b->next_addr) {
      rc = AA_ENOMEM; /* fake address space exhausted */
      goto out;
    }
    addr = b->next_addr;
    b->next_addr += span;
  }
  atomic_fetch_add_explicit(&b->held, size, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&b->alloc_bytes, size, memory_order_relaxed);
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

static int sim_event_record(aa_backend *be, aa_stream stream, void **out) {
  simbk *b = be->ctx;
  sim_event *e;

  (void)stream;
  atomic_fetch_add_explicit(&b->event_records, 1, memory_order_relaxed);
  if (b->delay_ns == 0) {
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
  pthread_mutex_unlock(&b->mu);
  return AA_OK;
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
  if (size == 0 || size > SIM_ADDR_LIMIT - b->next_addr)
    rc = AA_ENOMEM;
  else {
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
           size > b->capacity - atomic_load_explicit(&b->held, memory_order_relaxed))
    rc = AA_ENOMEM;
  if (rc == AA_OK) {
    atomic_fetch_add_explicit(&b->held, size, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->allocs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->alloc_bytes, size, memory_order_relaxed);
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
}

static const aa_backend_ops sim_ops = {
    .alloc = sim_alloc,
    .free = sim_free,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_release = sim_event_release,
    .synchronize = sim_synchronize,
    .map_granularity = sim_map_granularity,
    .va_reserve = sim_va_reserve,
    .va_release = sim_va_release,
    .map = sim_map,
    .unmap = sim_unmap,
};

static void simbk_free(simbk *b) {
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

static simbk *simbk_new(uint64_t capacity, uint64_t delay_ns) {
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
  return b;
}

/* ---------------------------------------------------------------- maps */

typedef struct pslot {
  uint64_t key;
  void *blk; /* NULL = empty slot */
  uint64_t req;
  uint64_t bsize;
} pslot;

typedef struct pmap {
  pslot *s;
  size_t mask;
  unsigned shift;
  size_t n;
} pmap;

static inline size_t pmap_home(const pmap *m, uint64_t key) {
  return (size_t)((key * 0x9e3779b97f4a7c15ull) >> m->shift);
}

static int pmap_init(pmap *m, unsigned bits) {
  m->s = calloc((size_t)1 << bits, sizeof *m->s);
  if (m->s == NULL)
    return AA_ENOMEM;
  m->mask = ((size_t)1 << bits) - 1;
  m->shift = 64 - bits;
  m->n = 0;
  return AA_OK;
}

static inline size_t pmap_find(const pmap *m, uint64_t key) {
  size_t i = pmap_home(m, key);

  while (m->s[i].blk != NULL && m->s[i].key != key)
    i = (i + 1) & m->mask;
  return i;
}

static int pmap_grow(pmap *m) {
  pmap nm;
  size_t i;
  int rc = pmap_init(&nm, 64 - m->shift + 1);

  if (rc != AA_OK)
    return rc;
  for (i = 0; i <= m->mask; i++) {
    if (m->s[i].blk != NULL) {
      size_t j = pmap_find(&nm, m->s[i].key);
      nm.s[j] = m->s[i];
    }
  }
  nm.n = m->n;
  free(m->s);
  *m = nm;
  return AA_OK;
}

static void pmap_remove(pmap *m, size_t i) {
  size_t j = i;

  for (;;) {
    size_t k;
    j = (j + 1) & m->mask;
    if (m->s[j].blk == NULL)
      break;
    k = pmap_home(m, m->s[j].key);
    /* Leave s[j] where it is when its home lies cyclically in (i, j]. */
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
      continue;
    m->s[i] = m->s[j];
    i = j;
  }
  m->s[i].blk = NULL;
  m->n--;
}

/* Per-size figures: allocs == 0 marks an empty slot. */
typedef struct sslot {
  uint64_t size, allocs, live, max_live;
} sslot;

typedef struct smap {
  sslot *s;
  size_t mask;
  size_t n;
} smap;

static inline size_t smap_home(const smap *m, uint64_t size) {
  return (size_t)((size * 0x9e3779b97f4a7c15ull) >> 17) & m->mask;
}

static sslot *smap_get(smap *m, uint64_t size, bool create) {
  size_t i;

  if (create && (m->n + 1) * 2 > m->mask + 1) {
    size_t ncap = (m->mask + 1) * 2, j;
    smap nm;
    nm.s = calloc(ncap, sizeof *nm.s);
    if (nm.s == NULL)
      return NULL;
    nm.mask = ncap - 1;
    nm.n = m->n;
    for (j = 0; j <= m->mask; j++) {
      if (m->s[j].allocs != 0) {
        size_t k = smap_home(&nm, m->s[j].size);
        while (nm.s[k].allocs != 0)
          k = (k + 1) & nm.mask;
        nm.s[k] = m->s[j];
      }
    }
    free(m->s);
    *m = nm;
  }
  i = smap_home(m, size);
  while (m->s[i].allocs != 0 && m->s[i].size != size)
    i = (i + 1) & m->mask;
  if (m->s[i].allocs == 0) {
    if (!create)
      return NULL;
    m->s[i].size = size;
    m->n++;
  }
  return &m->s[i];
}

/* ---------------------------------------------------------------- simulator */

typedef struct replay_worker replay_worker;
static void workers_stop(aa_replay_sim *s);

/* One replay thread (per_thread; see "threads" below). */
struct replay_worker {
  aa_replay_sim *s;
  uint64_t tid;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  const aa_replay_event *ev; /* the run to replay; NULL when idle */
  size_t n;
  int rc;
  bool quit;
  bool started;
};

struct aa_replay_sim {
  aa_replay_config cfg;
  replay_worker *workers; /* per_thread: AA_REPLAY_MAX_THREADS slots */
  size_t nworkers;
  char name[32];
  const char *pos;
  simbk *bk;
  aa_pool *pool;
  pmap live;
  smap sizes;
  char err[AA_REPLAY_ERR_CAP];
  aa_replay_diag diag;

  aa_adapt_loop *loop;   /* NULL without adapt */
  uint64_t next_step_ns; /* trace time of the next loop step */
  uint64_t last_step_ev; /* events at the last step */
  aa_adapt_decision dlog[AA_REPLAY_DECISION_LOG];
  size_t ndlog;

  uint64_t events, requests, allocs, frees, failures, trace_failures;
  uint64_t failed_live; /* map entries standing for allocations that failed */
  uint64_t in_use, requested;
  uint64_t peak_in_use, peak_requested, peak_reserved;
  uint64_t req_at_peak_in_use, in_use_at_peak_reserved;
  bool have_time;
  uint64_t first_time, last_time;
  double t_req, t_use, t_res; /* integrals over trace time */
  double e_req, e_use, e_res; /* integrals over event count */
};

void aa_replay_config_init(aa_replay_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->version = AA_REPLAY_CONFIG_VERSION;
  aa_pool_config_init(&cfg->pool);
  cfg->costs.alloc_us = 43.0;
  cfg->costs.free_us = 43.0;
  cfg->costs.alloc_us_per_gib = 0.0;
  cfg->costs.hit_ns = 0.0;
  cfg->costs.event_ns = 0.0;
  cfg->on_error = AA_REPLAY_STOP;
  cfg->position_name = "line";
  aa_adapt_params_default(&cfg->adapt_params);
}

static void note_decision(void *user, aa_pool *pool, const aa_adapt_decision *d) {
  aa_replay_sim *s = user;

  (void)pool;
  if (s->ndlog < AA_REPLAY_DECISION_LOG)
    s->dlog[s->ndlog++] = *d;
}

int aa_replay_sim_new(const aa_replay_config *cfg, aa_replay_sim **out,
                      char *err, size_t errcap) {
  aa_replay_sim *s = NULL;
  aa_pool_config pc;
  int rc;

  if (out != NULL)
    *out = NULL;
  if (cfg == NULL || out == NULL || cfg->version != AA_REPLAY_CONFIG_VERSION) {
    aa__errf(err, errcap, "aa_replay_sim_new: bad arguments");
    return AA_EINVAL;
  }
  s = calloc(1, sizeof *s);
  if (s == NULL) {
    rc = AA_ENOMEM;
    goto fail;
  }
  s->cfg = *cfg;
  s->cfg.classes = NULL; /* not kept: copied into the pool below */
  s->cfg.nclasses = 0;
  s->pos = cfg->position_name != NULL ? cfg->position_name : "line";
  snprintf(s->name, sizeof s->name, "%s",
           cfg->pool.name != NULL ? cfg->pool.name : "replay");
  rc = pmap_init(&s->live, 12);
  if (rc != AA_OK)
    goto fail;
  s->sizes.s = calloc(256, sizeof *s->sizes.s);
  if (s->sizes.s == NULL) {
    rc = AA_ENOMEM;
    goto fail;
  }
  s->sizes.mask = 255;
  if (cfg->per_thread) {
    s->workers = calloc(AA_REPLAY_MAX_THREADS, sizeof *s->workers);
    if (s->workers == NULL) {
      rc = AA_ENOMEM;
      goto fail;
    }
  }
  s->bk = simbk_new(cfg->capacity_bytes, cfg->event_delay_ns);
  if (s->bk == NULL) {
    rc = AA_ENOMEM;
    goto fail;
  }
  pc = cfg->pool;
  pc.backend = &s->bk->be;
  pc.name = s->name;
  pc.on_error = NULL; /* misuse cannot happen: the map checks first */
  rc = aa_pool_new(&pc, &s->pool);
  if (rc != AA_OK) {
    aa__errf(err, errcap, "the core refused the pool configuration: %s",
             aa_strerror(rc));
    goto fail;
  }
  if (cfg->classes != NULL && cfg->nclasses > 0) {
    rc = aa_pool_set_classes(s->pool, cfg->classes, cfg->nclasses);
    if (rc != AA_OK) {
      aa__errf(err, errcap, "the core refused the class table (%zu "
                            "classes): %s",
               cfg->nclasses, aa_strerror(rc));
      goto fail;
    }
  }
  if (cfg->adapt) {
    aa_adapt_loop_config lc;
    aa_adapt_loop_config_init(&lc);
    lc.params = cfg->adapt_params;
    lc.on_decision = note_decision;
    lc.user = s;
    rc = aa_adapt_loop_new(&lc, &s->loop);
    if (rc == AA_OK)
      rc = aa_adapt_loop_add_pool(s->loop, s->pool);
    if (rc != AA_OK) {
      aa__errf(err, errcap, "the policy loop refused its parameters: %s",
               aa_strerror(rc));
      goto fail;
    }
  }
  *out = s;
  return AA_OK;
fail:
  if (rc == AA_ENOMEM)
    aa__errf(err, errcap, "out of memory");
  aa_replay_sim_free(s);
  return rc;
}

void aa_replay_sim_free(aa_replay_sim *s) {
  if (s == NULL)
    return;
  workers_stop(s);
  free(s->workers);
  aa_adapt_loop_destroy(s->loop); /* before the pool it watches */
  aa_pool_destroy(s->pool);
  simbk_free(s->bk);
  free(s->live.s);
  free(s->sizes.s);
  free(s);
}

aa_pool *aa_replay_sim_pool(aa_replay_sim *s) { return s->pool; }

const char *aa_replay_sim_error(const aa_replay_sim *s) { return s->err; }

/* A bad event: stop (AA_EPARSE) or count and skip (AA_OK). */
static int bad_event(aa_replay_sim *s, uint64_t *counter,
                     const aa_replay_event *ev, const char *what) {
  char msg[AA_REPLAY_ERR_CAP];

  (*counter)++;
  snprintf(msg, sizeof msg, "%s %llu: %s pointer 0x%llx (size %llu)", s->pos,
           (unsigned long long)ev->line, what, (unsigned long long)ev->ptr,
           (unsigned long long)ev->size);
  aa__replay_diag_note(&s->diag, ev->line, msg);
  if (s->cfg.on_error == AA_REPLAY_STOP) {
    snprintf(s->err, sizeof s->err, "%s", msg);
    return AA_EPARSE;
  }
  return AA_OK;
}

void aa_replay_sim_now(const aa_replay_sim *s, aa_replay_now *out) {
  out->events = s->events;
  out->in_use = s->in_use;
  out->requested = s->requested;
  out->reserved = atomic_load_explicit(&s->bk->held, memory_order_relaxed);
}

static inline void note_peaks(aa_replay_sim *s) {
  uint64_t res = atomic_load_explicit(&s->bk->held, memory_order_relaxed);

  if (s->in_use > s->peak_in_use) {
    s->peak_in_use = s->in_use;
    s->req_at_peak_in_use = s->requested;
  }
  if (s->requested > s->peak_requested)
    s->peak_requested = s->requested;
  if (res > s->peak_reserved) {
    s->peak_reserved = res;
    s->in_use_at_peak_reserved = s->in_use;
  }
}

/* Stands in the map for a recorded allocation that failed in the replay, so
 * that its later free is expected rather than an error. */
static char failed_block;
#define FAILED_BLK ((void *)&failed_block)

static int do_alloc(aa_replay_sim *s, const aa_replay_event *ev) {
  aa_stream st = s->cfg.ignore_streams ? NULL : (aa_stream)(uintptr_t)ev->stream;
  size_t i = pmap_find(&s->live, ev->ptr);
  void *p;
  int rc;

  if (AA__UNLIKELY(s->live.s[i].blk != NULL))
    return bad_event(s, &s->diag.duplicate_ptr, ev,
                     "allocate of an already live");
  s->requests++;
  p = aa_alloc(s->pool, (size_t)ev->size, st);
  s->live.s[i].key = ev->ptr;
  s->live.n++;
  if (AA__UNLIKELY(p == NULL)) {
    s->failures++;
    s->failed_live++;
    s->live.s[i].blk = FAILED_BLK;
    s->live.s[i].req = 0;
    s->live.s[i].bsize = 0;
  } else {
    s->allocs++;
    s->live.s[i].blk = p;
    s->live.s[i].req = ev->size;
    s->live.s[i].bsize = aa_block_size(s->pool, p);
    s->in_use += s->live.s[i].bsize;
    s->requested += ev->size;
  }
  if (s->cfg.collect_sizes && p != NULL) {
    sslot *z = smap_get(&s->sizes, ev->size, true);
    if (z != NULL) {
      z->allocs++;
      if (++z->live > z->max_live)
        z->max_live = z->live;
    }
  }
  if (AA__UNLIKELY(s->live.n * 2 > s->live.mask + 1)) {
    rc = pmap_grow(&s->live);
    if (rc != AA_OK) {
      snprintf(s->err, sizeof s->err, "out of memory growing the pointer map");
      return rc;
    }
  }
  return AA_OK;
}

static int do_free(aa_replay_sim *s, const aa_replay_event *ev) {
  aa_stream st = s->cfg.ignore_streams ? NULL : (aa_stream)(uintptr_t)ev->stream;
  size_t i = pmap_find(&s->live, ev->ptr);
  pslot *e = &s->live.s[i];

  if (AA__UNLIKELY(e->blk == NULL))
    return bad_event(s, &s->diag.unknown_free, ev, "free of a not live");
  if (AA__UNLIKELY(e->blk == FAILED_BLK)) {
    s->failed_live--;
    pmap_remove(&s->live, i);
    return AA_OK;
  }
  if (AA__UNLIKELY(ev->size != 0 && ev->size != e->req))
    s->diag.size_mismatch++;
  (void)aa_free(s->pool, e->blk, (size_t)e->req, st);
  s->frees++;
  s->in_use -= e->bsize;
  s->requested -= e->req;
  if (s->cfg.collect_sizes) {
    sslot *z = smap_get(&s->sizes, e->req, false);
    if (z != NULL && z->live > 0)
      z->live--;
  }
  pmap_remove(&s->live, i);
  return AA_OK;
}

static void do_failed(aa_replay_sim *s, const aa_replay_event *ev) {
  s->trace_failures++;
  if (s->cfg.replay_failures) {
    aa_stream st =
        s->cfg.ignore_streams ? NULL : (aa_stream)(uintptr_t)ev->stream;
    void *p = aa_alloc(s->pool, (size_t)ev->size, st);
    s->requests++;
    if (p == NULL) {
      s->failures++;
    } else {
      /* The recorded program never held it: give it straight back. */
      s->allocs++;
      s->frees++;
      (void)aa_free(s->pool, p, (size_t)ev->size, st);
    }
  }
}

/* Whether the loop's next step is due after event e. */
static bool step_due(aa_replay_sim *s, const aa_replay_event *e) {
  if (s->cfg.adapt_every_events > 0) {
    if (s->events - s->last_step_ev < s->cfg.adapt_every_events)
      return false;
    s->last_step_ev = s->events;
    return true;
  }
  if (e->time_ns < s->next_step_ns)
    return false;
  /* One step per interval passed; a gap of many intervals is one step. */
  s->next_step_ns = e->time_ns + (uint64_t)s->cfg.adapt_params.interval_ms * 1000000ull;
  return true;
}

const aa_adapt_decision *aa_replay_sim_decisions(const aa_replay_sim *s,
                                                 size_t *n) {
  *n = s->ndlog;
  return s->dlog;
}

#define PREFETCH_AHEAD 8
#if defined(__GNUC__) || defined(__clang__)
#define AA__PREFETCH(p) __builtin_prefetch((p), 1, 3)
#else
#define AA__PREFETCH(p) ((void)(p))
#endif

/* Replays n events in the calling thread. */
static int feed_local(aa_replay_sim *s, const aa_replay_event *ev, size_t n) {
  size_t k;
  int rc = AA_OK;

  for (k = 0; k < n; k++) {
    const aa_replay_event *e = &ev[k];
    uint64_t res = atomic_load_explicit(&s->bk->held, memory_order_relaxed);

    /* The map is probed at random: fetch a later event's slot now. */
    if (AA__LIKELY(k + PREFETCH_AHEAD < n))
      AA__PREFETCH(&s->live.s[pmap_home(&s->live, ev[k + PREFETCH_AHEAD].ptr)]);

    /* Integrate the state held since the previous event. */
    if (AA__UNLIKELY(!s->have_time)) {
      s->have_time = true;
      s->first_time = e->time_ns;
      s->last_time = e->time_ns;
      s->next_step_ns = e->time_ns + (uint64_t)s->cfg.adapt_params.interval_ms * 1000000ull;
    } else if (e->time_ns > s->last_time) {
      double dt = (double)(e->time_ns - s->last_time);
      s->t_req += (double)s->requested * dt;
      s->t_use += (double)s->in_use * dt;
      s->t_res += (double)res * dt;
      s->last_time = e->time_ns;
      if (s->cfg.event_delay_ns != 0)
        atomic_store_explicit(&s->bk->now_ns, e->time_ns, memory_order_relaxed);
    }
    s->e_req += (double)s->requested;
    s->e_use += (double)s->in_use;
    s->e_res += (double)res;

    switch (e->op) {
    case 'a':
      rc = do_alloc(s, e);
      break;
    case 'f':
      rc = do_free(s, e);
      break;
    case 'x':
      do_failed(s, e);
      break;
    default:
      snprintf(s->err, sizeof s->err, "%s %llu: unknown op '%c'", s->pos,
               (unsigned long long)e->line, e->op >= 0x20 && e->op < 0x7f ? e->op : '?');
      rc = AA_EINVAL;
      break;
    }
    if (AA__UNLIKELY(rc != AA_OK))
      break;
    s->events++;
    note_peaks(s);
    if (AA__UNLIKELY(s->loop != NULL) && step_due(s, e)) {
      int steprc = aa_adapt_loop_step(s->loop);
      if (steprc < 0) {
        snprintf(s->err, sizeof s->err, "%s %llu: the policy loop failed: %s",
                 s->pos, (unsigned long long)e->line, aa_strerror(steprc));
        rc = steprc;
        break;
      }
      note_peaks(s); /* a trim or prefill changes what is reserved */
    }
  }
  return rc;
}

/* ---------------------------------------------------------------- threads */

/* With per_thread, each recorded thread id gets a replay thread of its own
 * (so the core's per-thread caches see the recorded pattern), and events
 * are handed to them strictly in input order: the feeding thread passes a
 * run of consecutive events of one thread id and waits until it is done.
 * Only one thread touches the simulator at a time; the hand-off mutex
 * orders their accesses. */

static void *worker_main(void *arg) {
  replay_worker *w = arg;

  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (w->ev == NULL && !w->quit)
      pthread_cond_wait(&w->cv, &w->mu);
    if (w->ev == NULL)
      break; /* quit with nothing pending */
    w->rc = feed_local(w->s, w->ev, w->n);
    w->ev = NULL;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

static void workers_stop(aa_replay_sim *s) {
  size_t i;

  for (i = 0; i < s->nworkers; i++) {
    replay_worker *w = &s->workers[i];
    if (!w->started)
      continue;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL); /* its thread cache goes back to the pool */
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->started = false;
  }
  s->nworkers = 0;
}

/* The worker of a recorded thread id; past AA_REPLAY_MAX_THREADS ids, they
 * share workers by id modulo. NULL when a thread cannot be started. */
static replay_worker *worker_for(aa_replay_sim *s, uint64_t tid) {
  replay_worker *w;
  size_t i;

  for (i = 0; i < s->nworkers; i++) {
    if (s->workers[i].tid == tid)
      return &s->workers[i];
  }
  if (s->nworkers == AA_REPLAY_MAX_THREADS)
    return &s->workers[tid % AA_REPLAY_MAX_THREADS];
  w = &s->workers[s->nworkers];
  memset(w, 0, sizeof *w);
  w->s = s;
  w->tid = tid;
  if (pthread_mutex_init(&w->mu, NULL) != 0)
    return NULL;
  if (pthread_cond_init(&w->cv, NULL) != 0) {
    pthread_mutex_destroy(&w->mu);
    return NULL;
  }
  if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return NULL;
  }
  w->started = true;
  s->nworkers++;
  return w;
}

static int feed_threads(aa_replay_sim *s, const aa_replay_event *ev, size_t n) {
  size_t i = 0;
  int rc = AA_OK;

  while (i < n && rc == AA_OK) {
    size_t j = i + 1;
    replay_worker *w;
    while (j < n && ev[j].thread == ev[i].thread)
      j++;
    w = worker_for(s, ev[i].thread);
    if (w == NULL) {
      snprintf(s->err, sizeof s->err, "%s %llu: cannot start a replay thread",
               s->pos, (unsigned long long)ev[i].line);
      return AA_ENOMEM;
    }
    pthread_mutex_lock(&w->mu);
    w->ev = &ev[i];
    w->n = j - i;
    pthread_cond_broadcast(&w->cv);
    while (w->ev != NULL)
      pthread_cond_wait(&w->cv, &w->mu);
    rc = w->rc;
    pthread_mutex_unlock(&w->mu);
    i = j;
  }
  return rc;
}

int aa_replay_sim_feed(void *user, const aa_replay_event *ev, size_t n) {
  aa_replay_sim *s = user;

  if (s->cfg.per_thread)
    return feed_threads(s, ev, n);
  return feed_local(s, ev, n);
}

size_t aa_replay_sim_threads(const aa_replay_sim *s) { return s->nworkers; }

static double frac_loss(double part, double whole) {
  if (whole <= 0.0)
    return 0.0;
  if (part >= whole)
    return 0.0;
  return 1.0 - part / whole;
}

void aa_replay_sim_result(aa_replay_sim *s, aa_replay_result *r) {
  aa_pool_stats *st = malloc(sizeof *st);
  const aa_replay_costs *c = &s->cfg.costs;
  bool use_time = s->t_use > 0.0 || s->t_res > 0.0;

  memset(r, 0, sizeof *r);
  r->events = s->events;
  r->requests = s->requests;
  r->allocs = s->allocs;
  r->frees = s->frees;
  r->failures = s->failures;
  r->trace_failures = s->trace_failures;
  if (st != NULL && aa_pool_stats_get(s->pool, st) == AA_OK) {
    r->cache_hits = st->cache_hits;
    r->cache_misses = st->cache_misses;
    r->class_count = st->class_count;
  }
  free(st);
  if (r->cache_hits + r->cache_misses > 0)
    r->hit_rate = (double)r->cache_hits / (double)(r->cache_hits + r->cache_misses);
  r->backend_allocs = atomic_load(&s->bk->allocs);
  r->backend_frees = atomic_load(&s->bk->frees);
  r->backend_calls = r->backend_allocs + r->backend_frees;
  r->backend_failures = atomic_load(&s->bk->failures);
  r->event_records = atomic_load(&s->bk->event_records);
  r->peak_requested = s->peak_requested;
  r->peak_in_use = s->peak_in_use;
  r->peak_reserved = s->peak_reserved;
  r->requested_at_peak_in_use = s->req_at_peak_in_use;
  r->in_use_at_peak_reserved = s->in_use_at_peak_reserved;
  r->int_frag_peak = frac_loss((double)s->req_at_peak_in_use, (double)s->peak_in_use);
  r->ext_frag_peak = frac_loss((double)s->in_use_at_peak_reserved, (double)s->peak_reserved);
  r->int_frag_avg = use_time ? frac_loss(s->t_req, s->t_use) : frac_loss(s->e_req, s->e_use);
  r->ext_frag_avg = use_time ? frac_loss(s->t_use, s->t_res) : frac_loss(s->e_use, s->e_res);
  r->sim_backend_us = (double)r->backend_allocs * c->alloc_us +
                      (double)r->backend_frees * c->free_us +
                      (double)atomic_load(&s->bk->alloc_bytes) /
                          (1024.0 * 1024.0 * 1024.0) * c->alloc_us_per_gib +
                      (double)r->cache_hits * c->hit_ns / 1000.0 +
                      (double)r->event_records * c->event_ns / 1000.0;
  r->live_at_end = s->live.n - s->failed_live;
  r->live_bytes_at_end = s->requested;
  r->trace_span_ns = s->have_time ? s->last_time - s->first_time : 0;
  r->diag = s->diag;
  if (s->loop != NULL)
    aa_adapt_loop_counters(s->loop, &r->adapt);
}

static int cmp_size_stat(const void *a, const void *b) {
  const aa_replay_size_stat *x = a, *y = b;
  return x->size < y->size ? -1 : x->size > y->size;
}

int aa_replay_sim_sizes(const aa_replay_sim *s, aa_replay_size_stat **out,
                        size_t *n) {
  aa_replay_size_stat *v;
  size_t i, k = 0;

  *out = NULL;
  *n = 0;
  if (s->sizes.n == 0)
    return AA_OK;
  v = malloc(s->sizes.n * sizeof *v);
  if (v == NULL)
    return AA_ENOMEM;
  for (i = 0; i <= s->sizes.mask; i++) {
    const sslot *z = &s->sizes.s[i];
    if (z->allocs == 0)
      continue;
    v[k].size = z->size;
    v[k].allocs = z->allocs;
    v[k].live = z->live;
    v[k].max_live = z->max_live;
    k++;
  }
  qsort(v, k, sizeof *v, cmp_size_stat);
  *out = v;
  *n = k;
  return AA_OK;
}
