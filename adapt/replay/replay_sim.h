/*
 * replay_sim.h — the simulator's structures, shared by its three files:
 *   replay_sim.c      the simulator: pointer and size maps, feeding events
 *                     to a real core pool, the figures (aa_replay_sim_*)
 *   replay_simbk.c    the simulated backend under that pool (fake
 *                     addresses, call counters, a clock for stream events)
 *   replay_threads.c  per_thread replay: one thread per recorded thread id
 * Each shared function below sits under the file that defines it.
 */
#ifndef ADAPTALLOC_REPLAY_SIM_H
#define ADAPTALLOC_REPLAY_SIM_H

#include <pthread.h>
#include <stdatomic.h>

#include "replay_internal.h"

/* ---------------------------------------------------------------- backend */

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
  /* the trace's time at the event being replayed (events complete delay_ns
   * after it; with no delay it matters only to the pool's clock) */
  _Atomic uint64_t now_ns;
  /* now_ns at the last synchronize (UINT64_MAX: none since the trace's
   * last event began): until the next event, nothing new is queued, so
   * every stream is idle and an event recorded then is complete, as on a
   * device just synchronized */
  _Atomic uint64_t synced_at;
  _Atomic uint64_t held;
  _Atomic uint64_t allocs, frees, failures, alloc_bytes;
  _Atomic uint64_t aliases, unaliases; /* map_alias / unmap_alias calls (stitching) */
  _Atomic uint64_t event_records;
  /* the pool's clock (aa__simbk_clock, aa_pool_set_clock): now_ns plus the
   * simulated costs of the backend calls made so far (cost_* in ns, from the
   * replay's cost model), so that stitching's time budget sees its alias
   * calls take time as on a device */
  _Atomic uint64_t cost_ns;
  uint64_t cost_alloc_ns, cost_free_ns, cost_alias_ns, cost_unalias_ns;
  /* requests refused because the fake address space ran out (not the
   * capacity): the simulator's limit, never a figure of the replay */
  _Atomic uint64_t space_exhausted;
  /* requests the simulated device refused (its capacity, a reservation
   * larger than it): a figure of the replay; a NULL from the pool with
   * neither this nor a limit is a host-side failure (replay_sim.c) */
  _Atomic uint64_t refused;
} simbk;

/* The fake address space the simulated backend hands out addresses from:
 * 4 TiB from 16 TiB. Bounded because the host memory that models it grows
 * with it: the pool's page map holds 32 bytes per 64 KiB granule it ever
 * covered (0.5 GiB per TiB, kept until the pool dies), so a larger space
 * let one absurd trace row take the host's memory; 4 TiB is many times any
 * device's memory and costs at most a few GiB. A request past it stops the
 * replay (exit 3), before any host memory is used for it. */
#define SIM_BASE_ADDR 0x100000000000ull /* 16 TiB: clearly fake */
#define SIM_ADDR_LIMIT (SIM_BASE_ADDR + (4ull << 40))

/* ---------------------------------------------------------------- maps */

/* The recorded pointer of each live allocation -> the block the core returned
 * (open addressing, backward-shift deletion). */
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

/* Per-size figures: allocs == 0 marks an empty slot. */
typedef struct sslot {
  uint64_t size, allocs, live, max_live;
} sslot;

typedef struct smap {
  sslot *s;
  size_t mask;
  size_t n;
} smap;

/* ---------------------------------------------------------------- simulator */

typedef struct replay_worker replay_worker;

/* One replay thread (per_thread; see replay_threads.c). */
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
  /* where the bytes were when reserved last reached a new peak (note_peaks) */
  aa_pool_account acct_peak;
  bool have_acct_peak;
  uint64_t peak_in_use_event; /* events fed when in_use first reached its peak */
  /* the account after event cfg.account_at_event (note_peaks) */
  aa_pool_account acct_event;
  bool have_acct_event;
  bool have_time;
  uint64_t first_time, last_time;
  double t_req, t_use, t_res; /* integrals over trace time */
  double e_req, e_use, e_res; /* integrals over event count */
};

/* replay_sim.c: replays n events in the calling thread. */
int aa__replay_feed_local(aa_replay_sim *s, const aa_replay_event *ev, size_t n);

/* replay_simbk.c: the simulated backend (capacity 0 = unbounded; stream
 * events complete delay_ns of trace time after they are recorded); NULL when
 * out of memory. aa__simbk_free takes NULL. */
simbk *aa__simbk_new(uint64_t capacity, uint64_t delay_ns);
/* The costs the clock adds per call (the replay's cost model). */
void aa__simbk_costs(simbk *b, const aa_replay_costs *c);
/* The pool's clock over simulated backend user (a simbk). */
uint64_t aa__simbk_clock(void *user);
void aa__simbk_free(simbk *b);

/* replay_threads.c: hands each run of one recorded thread's events to that
 * thread's replay thread, in input order; stops and joins them all. */
int aa__replay_feed_threads(aa_replay_sim *s, const aa_replay_event *ev, size_t n);
void aa__replay_workers_stop(aa_replay_sim *s);

#endif /* ADAPTALLOC_REPLAY_SIM_H */
