/*
 * replay_sim.c — the replay simulator: a real core pool over a simulated
 * backend (replay_simbk.c), and the loop that feeds recorded events to that
 * pool and measures what happens.
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
 *
 * per_thread replay is replay_threads.c's; replay_sim.h holds the
 * structures the three files share.
 */
#include <stdlib.h>
#include <string.h>

#include "replay_sim.h"

/* ---------------------------------------------------------------- maps */

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

void aa_replay_config_init(aa_replay_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->version = AA_REPLAY_CONFIG_VERSION;
  aa_pool_config_init(&cfg->pool);
  cfg->costs.alloc_us = 43.0;
  cfg->costs.free_us = 43.0;
  cfg->costs.alloc_us_per_gib = 0.0;
  cfg->costs.hit_ns = 0.0;
  cfg->costs.event_ns = 0.0;
  cfg->costs.alias_us = 36.0;
  cfg->costs.unalias_us = 24.0;
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
  s->bk = aa__simbk_new(cfg->capacity_bytes, cfg->event_delay_ns);
  if (s->bk == NULL) {
    rc = AA_ENOMEM;
    goto fail;
  }
  aa__simbk_costs(s->bk, &cfg->costs);
  pc = cfg->pool;
  pc.backend = &s->bk->be;
  pc.name = s->name;
  pc.on_error = NULL; /* misuse cannot happen: the map checks first */
  /* the learned plan made where the period is found, on this thread: the
   * same plans at the same events on every run (the figures reproducible) */
  if (pc.large_plan > 0)
    pc.large_plan = AA_LARGE_PLAN_SYNC;
  rc = aa_pool_new(&pc, &s->pool);
  if (rc != AA_OK) {
    aa__errf(err, errcap, "the core refused the pool configuration: %s",
             aa_strerror(rc));
    goto fail;
  }
  aa_pool_set_clock(s->pool, aa__simbk_clock, s->bk);
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
    lc.verify = aa_replay_adapt_verify;
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
  aa__replay_workers_stop(s);
  free(s->workers);
  aa_adapt_loop_destroy(s->loop); /* before the pool it watches */
  aa_pool_destroy(s->pool);
  aa__simbk_free(s->bk);
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

/* The pool's account now into *dst (*have set when it was taken). */
static void take_account(aa_replay_sim *s, aa_pool_account *dst, bool *have) {
  aa_pool_account a;
  a.version = AA_ACCOUNT_VERSION;
  a.size = (uint32_t)sizeof a;
  if (aa_pool_account_get(s->pool, &a) == AA_OK) {
    *dst = a;
    *have = true;
  }
}

/* A kept account to the caller: AA_EINVAL for a bad out, AA_ENOENT when
 * none was taken. */
static int give_account(const aa_pool_account *src, bool have, aa_pool_account *out) {
  if (out == NULL || out->version != AA_ACCOUNT_VERSION || out->size != (uint32_t)sizeof *out)
    return AA_EINVAL;
  if (!have)
    return AA_ENOENT;
  *out = *src;
  return AA_OK;
}

/* Reserved reached a new peak: the pool's account of it. Only a backend
 * call raises reserved, so this runs at most once per backend allocation. */
static __attribute__((noinline, cold)) void note_peak_account(aa_replay_sim *s) {
  take_account(s, &s->acct_peak, &s->have_acct_peak);
}

int aa_replay_sim_account_at_peak(const aa_replay_sim *s, aa_pool_account *out) {
  if (s == NULL)
    return AA_EINVAL;
  return give_account(&s->acct_peak, s->have_acct_peak, out);
}

/* The event cfg.account_at_event has just been replayed: the pool's
 * account now (once: note_peaks runs again after a loop step). */
static __attribute__((noinline, cold)) void note_event_account(aa_replay_sim *s) {
  if (!s->have_acct_event)
    take_account(s, &s->acct_event, &s->have_acct_event);
}

int aa_replay_sim_account_at_event(const aa_replay_sim *s, aa_pool_account *out) {
  if (s == NULL)
    return AA_EINVAL;
  return give_account(&s->acct_event, s->have_acct_event, out);
}

uint64_t aa_replay_sim_peak_in_use_event(const aa_replay_sim *s) {
  return s->peak_in_use_event;
}

static inline void note_peaks(aa_replay_sim *s) {
  uint64_t res = atomic_load_explicit(&s->bk->held, memory_order_relaxed);

  if (s->in_use > s->peak_in_use) {
    s->peak_in_use = s->in_use;
    s->req_at_peak_in_use = s->requested;
    s->peak_in_use_event = s->events;
  }
  if (AA__UNLIKELY(s->events == s->cfg.account_at_event))
    note_event_account(s);
  if (s->requested > s->peak_requested)
    s->peak_requested = s->requested;
  if (res > s->peak_reserved) {
    s->peak_reserved = res;
    s->in_use_at_peak_reserved = s->in_use;
    note_peak_account(s);
  }
}

/* Stands in the map for a recorded allocation that failed in the replay, so
 * that its later free is expected rather than an error. */
static char failed_block;
#define FAILED_BLK ((void *)&failed_block)

/* After a NULL from the pool: AA_OK when the simulated device refused it (a
 * failure the replay counts), AA_ENOMEM with the message when the
 * simulator's fake address space ran out instead: its own limit, which
 * must not pass for the policy's failures (docs/replay.md: exit 3). */
static int check_space(aa_replay_sim *s, const aa_replay_event *ev, uint64_t bk_refused) {
  if (AA__LIKELY(atomic_load_explicit(&s->bk->space_exhausted, memory_order_relaxed) == 0)) {
    aa_pool_stats *st;
    int host = 0;
    /* the simulated device refused (its capacity): a figure */
    if (atomic_load_explicit(&s->bk->refused, memory_order_relaxed) != bk_refused)
      return AA_OK;
    /* neither the device nor a limit refused: the core failed on the host
     * (its own memory: a page map leaf, a segment record), which must not
     * pass for the policy's failure either */
    st = malloc(sizeof *st);
    if (st == NULL)
      host = 1;
    else if (aa_pool_stats_get(s->pool, st) == AA_OK && st->limit_bytes == 0)
      host = 1;
    free(st);
    if (!host)
      return AA_OK;
    snprintf(s->err, sizeof s->err,
             "%s %llu: out of host memory serving a request of %llu bytes (the core failed "
             "with no refusal of the simulated device): its figures would count that as the "
             "policy's failure, so the replay stops",
             s->pos, (unsigned long long)ev->line, (unsigned long long)ev->size);
    return AA_ENOMEM;
  }
  snprintf(s->err, sizeof s->err,
           "%s %llu: the simulator ran out of its fake address space (%llu TiB, bounded by "
           "the host memory that models it) serving a request of %llu bytes: its figures "
           "would count its own limit as the policy's failures, so the replay stops",
           s->pos, (unsigned long long)ev->line,
           (unsigned long long)((SIM_ADDR_LIMIT - SIM_BASE_ADDR) >> 40),
           (unsigned long long)ev->size);
  return AA_ENOMEM;
}

static int do_alloc(aa_replay_sim *s, const aa_replay_event *ev) {
  aa_stream st = s->cfg.ignore_streams ? NULL : (aa_stream)(uintptr_t)ev->stream;
  size_t i = pmap_find(&s->live, ev->ptr);
  uint64_t bk_refused;
  void *p;
  int rc;

  if (AA__UNLIKELY(s->live.s[i].blk != NULL))
    return bad_event(s, &s->diag.duplicate_ptr, ev,
                     "allocate of an already live");
  s->requests++;
  bk_refused = atomic_load_explicit(&s->bk->refused, memory_order_relaxed);
  p = aa_alloc(s->pool, (size_t)ev->size, st);
  s->live.s[i].key = ev->ptr;
  s->live.n++;
  if (AA__UNLIKELY(p == NULL)) {
    rc = check_space(s, ev, bk_refused);
    if (rc != AA_OK) {
      s->live.n--; /* not entered (blk stays NULL): the replay stops here */
      return rc;
    }
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

/* 'u': the recorded program used a live block on another stream
 * (record_stream); the pool then holds the block after its free until that
 * stream's work recorded at the free is done (cfg.event_delay_ns later). */
static int do_use(aa_replay_sim *s, const aa_replay_event *ev) {
  size_t i = pmap_find(&s->live, ev->ptr);
  pslot *e = &s->live.s[i];

  if (AA__UNLIKELY(e->blk == NULL))
    return bad_event(s, &s->diag.unknown_free, ev, "stream use of a not live");
  if (e->blk == FAILED_BLK || s->cfg.ignore_streams)
    return AA_OK;
  int rc = aa_record_stream(s->pool, e->blk, (aa_stream)(uintptr_t)ev->stream);
  if (AA__UNLIKELY(rc != AA_OK)) {
    snprintf(s->err, sizeof s->err, "%s %llu: the pool refused a stream use: %s", s->pos,
             (unsigned long long)ev->line, aa_strerror(rc));
    return rc;
  }
  return AA_OK;
}

static int do_failed(aa_replay_sim *s, const aa_replay_event *ev) {
  s->trace_failures++;
  if (s->cfg.replay_failures) {
    aa_stream st =
        s->cfg.ignore_streams ? NULL : (aa_stream)(uintptr_t)ev->stream;
    uint64_t bk_refused = atomic_load_explicit(&s->bk->refused, memory_order_relaxed);
    void *p = aa_alloc(s->pool, (size_t)ev->size, st);
    s->requests++;
    if (p == NULL) {
      int rc = check_space(s, ev, bk_refused);
      if (rc != AA_OK)
        return rc;
      s->failures++;
    } else {
      /* The recorded program never held it: give it straight back. */
      s->allocs++;
      s->frees++;
      (void)aa_free(s->pool, p, (size_t)ev->size, st);
    }
  }
  return AA_OK;
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
int aa__replay_feed_local(aa_replay_sim *s, const aa_replay_event *ev, size_t n) {
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
      atomic_store_explicit(&s->bk->now_ns, e->time_ns, memory_order_relaxed);
    } else if (e->time_ns > s->last_time) {
      double dt = (double)(e->time_ns - s->last_time);
      s->t_req += (double)s->requested * dt;
      s->t_use += (double)s->in_use * dt;
      s->t_res += (double)res * dt;
      s->last_time = e->time_ns;
      atomic_store_explicit(&s->bk->now_ns, e->time_ns, memory_order_relaxed);
    }
    /* a synchronize during the last event (the out-of-memory retry's)
     * left the device idle until now: this event queues work again */
    if (s->cfg.event_delay_ns != 0)
      atomic_store_explicit(&s->bk->synced_at, UINT64_MAX, memory_order_relaxed);
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
      rc = do_failed(s, e);
      break;
    case 'u':
      rc = do_use(s, e);
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

int aa_replay_sim_feed(void *user, const aa_replay_event *ev, size_t n) {
  aa_replay_sim *s = user;

  if (s->cfg.per_thread)
    return aa__replay_feed_threads(s, ev, n);
  return aa__replay_feed_local(s, ev, n);
}

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
    r->stitches = st->large_stitches;
    r->stitch_hits = st->large_stitch_hits;
    r->stitch_dissolved = st->large_stitch_dissolved;
    r->stitch_wakes = st->large_stitch_wakes;
    r->plan_hits = st->large_plan_hits;
    r->plan_misses = st->large_plan_misses;
    r->plans_adopted = st->large_plans_adopted;
    r->plans_dropped = st->large_plans_dropped;
    r->plans_refused = st->large_plans_refused;
    r->plan_bytes = st->large_plan_bytes;
    r->stream_waits = st->large_stream_waits;
    r->stitch_deferred = st->large_stitch_deferred;
    r->alias_ns = st->large_alias_ns;
  }
  free(st);
  if (r->cache_hits + r->cache_misses > 0)
    r->hit_rate = (double)r->cache_hits / (double)(r->cache_hits + r->cache_misses);
  r->backend_allocs = atomic_load(&s->bk->allocs);
  r->backend_frees = atomic_load(&s->bk->frees);
  r->backend_calls = r->backend_allocs + r->backend_frees;
  r->backend_failures = atomic_load(&s->bk->failures);
  r->event_records = atomic_load(&s->bk->event_records);
  r->alias_maps = atomic_load(&s->bk->aliases);
  r->alias_unmaps = atomic_load(&s->bk->unaliases);
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
                      (double)r->event_records * c->event_ns / 1000.0 +
                      (double)r->alias_maps * c->alias_us +
                      (double)r->alias_unmaps * c->unalias_us;
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
