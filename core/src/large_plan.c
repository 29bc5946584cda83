/*
 * large_plan.c — a placement learned from the first steps
 * (aa_pool_config.large_plan): the large requests of a training or serving
 * loop repeat, so their offsets can be planned from their lifetimes once,
 * and every later step served at those offsets from one arena, with no
 * hole between live blocks and no backend call.
 *
 * Watching: while the plan is on, every large request and free takes the
 * locked path (the thread caches step aside: large.c does not note a block
 * for a lock-free free) and goes into a window of the last PLAN_WIN events:
 * a token (request or free, bytes asked for, stream), the allocation number,
 * and the path's bytes in use and reserved after it.
 *
 * Finding the period: every PLAN_EVERY events, the Z-function of the window
 * read backwards gives, for every shift Q, how far back the window equals
 * itself shifted by Q. The shift whose match is longest and covers at least
 * two whole periods wins (the smaller of equals): a period inside a step (a
 * transformer's layers) matches only across the layers and loses to the
 * step's own, whose match runs back to the first steady step.
 *
 * Planning: the period before the last is the model. Each request in it on
 * the plan's stream (the one with the most bytes) that is freed less than a
 * period later has a lifetime: an arc on a circle of Q events. Offsets are
 * placed greedily, largest first, each at the lowest offset clear of every
 * placed block whose arc meets its own; the arena is the highest end. The
 * window's replay decides: the large path's peak reserved over the last
 * period against the peak of its bytes in use outside the plan plus the
 * arena plus the planned bytes live at the period's start (they are still in
 * the path's chunks when the arena comes); a plan that would not lower peak
 * reserved by a margin is refused, and not tried again for a while.
 *
 * Serving: the requests of a period are numbered from the point where the
 * fewest planned bytes are live. At the next period start the path gives
 * back what it caches (so that reserved falls), takes the arena as one chunk
 * (large_take.c aa__lg_take: the arena is a live chunk of the path, not counted as
 * in use), and serves each request whose token is the one expected next at
 * its offset, provided no block still covers that room: a bitmap of the
 * arena's 4 KiB units, set while a block is live and, when its free was on
 * another stream or after record_stream, until the events recorded at the
 * free complete. Anything else is served by the path. A request out of order
 * resyncs to one of the next few expected or to the period's start; a run of
 * misses longer than a quarter period drops the plan: no new block in the
 * arena, which goes back to the path with its last block, and learning
 * starts again.
 *
 * Planning in the background (large_plan 1): where the period is found,
 * the allocating thread copies the window's events that planning reads
 * (from the start of the repetition: at most PLAN_WIN) into a job and hands
 * it to the pool's planner thread (one, started at the first plan; joined
 * at destroy, which cancels a planning under way: the placement looks at a
 * flag), and goes on learning without waiting. The finished plan is
 * collected at the next request: installed, waiting for the period's start
 * as one made inline is, when the events since the copy still repeat with
 * its period; else discarded. AA_LARGE_PLAN_SYNC (the replay, the
 * deterministic tests), or no thread, or no memory for the copy: planned
 * on the allocating thread from the window itself, as before.
 *
 * Everything here runs under pool->large->mu, but plan_compute and what it
 * calls (they read only their job and its copy of the window: also on the
 * planner thread) and the planner thread's own loop (under its mutex).
 * Entry points: aa__lg_plan_alloc, aa__lg_plan_note, aa__lg_plan_free.
 */
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#endif

#include "large_internal.h"
#include "test_hooks.h"

#define PLAN_WIN ((uint64_t)1 << 16)     /* events watched */
#define PLAN_EVERY 512                   /* events between looks for a period */
#define PLAN_MIN_Q 4                     /* the shortest period, in events */
#define PLAN_MAX_N 4096                  /* requests per period planned at most */
#define PLAN_RESYNC 8                    /* expected requests looked ahead on a miss */
#define PLAN_MAX_REPS 8                  /* periods in a row a plan may have to repeat */
#define PLAN_UNIT AA__LARGE_ALIGN        /* the arena's bitmap unit */
#define PLAN_MAX_SEEN 16                 /* periods whose sizes make the rooms */
#define PLAN_HEAD_MIN ((size_t)64 << 10) /* a varying slot's headroom, at least */

enum { EV_ALLOC = 0,
       EV_FREE = 1 };

typedef struct plan_ev {
  uint64_t tok;              /* exact: request or free, bytes asked for, stream */
  uint64_t stok;             /* the shape (shape_of): request or free, stream, and for a
                  * free how many requests ago its block was asked for */
  uint64_t seq;              /* request: its number; free: its block's (0: unknown) */
  uint64_t in_use, reserved; /* the path's bytes after the event */
  size_t size;               /* bytes asked for */
  size_t blk;                /* request: the bytes in use it added (its
                              * room, chunk or stitched range) */
  aa_stream stream;
  uint32_t kind;
} plan_ev;

/* A request of the period, in order from entry 0. A request is this entry
 * when its shape token is the entry's and it asks for lo..cap bytes (the
 * expected entry: any bytes, judged by its room). */
typedef struct plan_ent {
  uint64_t tok; /* the shape token of a request on its stream */
  size_t lo;    /* the fewest bytes it may ask for */
  size_t size;  /* its room: the most bytes seen in its slot, plus headroom */
  size_t cap;   /* the room it may take at off (>= size): up to the next
                  * block placed above it whose lifetime meets its own */
  size_t off;   /* in the arena; NO_OFF: served by the path */
  bool varied;  /* its sizes differed over the periods seen */
} plan_ent;
#define NO_OFF SIZE_MAX

/* A block handed out from the arena (open addressing by address). */
typedef struct plan_live {
  uintptr_t p; /* 0: an empty slot */
  size_t size, req;
  uint64_t seq;
  aa_stream *xs; /* record_stream'd streams */
  uint32_t nxs;
} plan_live;

/* A freed block whose room waits for events. */
typedef struct plan_pend {
  size_t off, size;
  void *own;
  void **evs;
  uint32_t nevs;
  /* no event could be recorded on `idle` (a stream under graph capture):
   * the room waits until that stream is idle */
  bool by_query;
  aa_stream idle;
} plan_pend;

/* The events planning reads: event i (first <= i < nev) at
 * ev[(i - first) % cap]. The window itself (first 0, cap PLAN_WIN), or a
 * copy of its last events (cap nev - first). nwin: the events the window
 * held when the copy was made. */
typedef struct plan_view {
  const plan_ev *ev;
  uint64_t first, cap, nev, nwin;
} plan_view;

static const plan_ev *vat(const plan_view *v, uint64_t i) {
  return &v->ev[(i - v->first) % v->cap];
}

/* A planning: what it needs, what came of it. */
enum { PJ_RETRY, /* memory was short: the window is looked at again later */
       PJ_REFUSE,
       PJ_ADOPT,
       PJ_CANCELLED };

typedef struct plan_job {
  /* in: the window's last events [first, nev) (a copy in the planner
   * thread's buffer; NULL when planned on the window itself), the
   * period, how far back it matched, the path's page, and whether it was
   * found by the requests' shapes */
  plan_ev *ev;
  uint64_t first, nev, nwin;
  uint64_t q, matched;
  size_t page;
  bool shape;
  /* out: PJ_*; with PJ_ADOPT the plan (ent owned by the job until installed) */
  int outcome;
  plan_ent *ent;
  uint32_t n;
  uint64_t s0, saved, observed;
  aa_stream stream;
  size_t arena;
  uint64_t ns; /* the planning's time */
} plan_job;

/* The pool's planner thread (one at most, started at the first plan of a
 * pool asked to plan in the background; stopped and joined at destroy).
 * One job at a time: queued by the allocating path, taken and planned by
 * the thread, left done for the allocating path to collect. Everything
 * here under mu but `ready` (done, read without mu by the allocating path)
 * and `cancel` (read by the planning). */
enum { PT_IDLE,
       PT_QUEUED,
       PT_RUNNING,
       PT_DONE };

typedef struct plan_thread {
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* a job queued, a job done, quit */
  plan_job *job;
  /* the copies of the window: grown to the largest asked for (PLAN_WIN
   * events at most), kept (its pages faulted once, not at every copy),
   * freed with the thread; written by the allocating path only while the
   * thread has no job */
  plan_ev *buf;
  uint64_t buf_cap;
  int st; /* PT_* */
  bool quit;
  _Atomic bool cancel;
  _Atomic bool ready;
  pid_t pid; /* the process that started it (a fork()ed child has no thread) */
} plan_thread;

struct aa__plan {
  /* the window (a ring) and the Z-function's scratch */
  plan_ev *win;
  uint64_t nev, next_check, backoff;
  uint64_t *rtok;
  uint32_t *z;
  int state; /* AA_PLAN_* */
  /* the plan */
  plan_ent *ent;
  uint32_t n;
  uint64_t s0; /* the number of a request that was entry 0 */
  uint64_t q;  /* the period in events */
  aa_stream stream;
  size_t arena_bytes;
  aa__chunk *arena;
  uint32_t cursor, streak, wait_miss;
  /* the arena's room: a bit per PLAN_UNIT, set while covered */
  uint64_t *bits;
  size_t nwords;
  plan_live *live;
  size_t live_cap, nlive;
  plan_pend *pend;
  size_t npend, pend_cap;
  uint64_t live_bytes;
  uint64_t hits, misses, adopted, dropped, refused, saved;
  uint64_t observed;    /* the window's peak reserved the plan was measured against */
  unsigned idle_checks; /* looks in a row that found no period */
  /* periods in a row the window must repeat to be planned: 2, one more
   * after each plan the requests stopped matching (a loop with phases,
   * an evaluation pass every few steps), up to PLAN_MAX_REPS */
  unsigned reps;
  uint32_t period_misses; /* misses since the period last started */
  uint32_t period_grown;  /* of which requests that outgrew their rooms */
  bool grew;              /* the request being served outgrew its room */
  uint32_t good_periods;  /* period starts served since reps last eased */
  /* planning in the background (large_plan 1): the thread, a job handed
   * to it and not yet collected; planning's cost and what came of it */
  plan_thread *thr;
  bool job_out;
  uint64_t plan_ns, stall_ns, inline_plans, stale;
};

/* ------------------------------------------------------------ helpers */

static uint64_t tok_of(uint32_t kind, size_t req, aa_stream s) {
  uint64_t h = (uint64_t)req * 0x9E3779B97F4A7C15ull;
  h ^= ((uint64_t)(uintptr_t)s + 0x632BE59BD9B4E019ull) * 0xD6E8FEB86659FD93ull;
  h ^= h >> 31;
  return (h << 1) | kind;
}

/* The shape token: a request on its stream, whatever its bytes; a free,
 * with how many requests ago its block was asked for (dist; UINT64_MAX:
 * not known). Where only sizes change from step to step (a sequence length
 * drawn each step, sizes a few pages apart), the shapes still repeat. */
static uint64_t shape_of(uint32_t kind, uint64_t dist, aa_stream s) {
  return tok_of(kind, (size_t)(kind == EV_ALLOC ? 0 : dist) ^ (size_t)0x5851F42D4C957F2Dull, s);
}

static size_t room_of(size_t req) { return aa__lg_round_up(req, PLAN_UNIT); }

static const plan_ev *ev_at(const struct aa__plan *P, uint64_t i) { return &P->win[i % PLAN_WIN]; }

bool aa__lg_plan_usable(const aa_pool *pool) {
  return pool->cfg.large_plan > 0 && pool->cfg.large_mode != AA_LARGE_PASSTHROUGH;
}

/* What the path below asks of the plan before it grows (aa__lg_take): it
 * calls up only through this, set with the plan's state. */
static const aa__lg_yield plan_yield_ops = {aa__lg_plan_can_yield, aa__lg_plan_yield};

/* The plan's state, made at the first event; NULL when it cannot be. */
static struct aa__plan *plan_get(aa_pool *pool) {
  aa__large *L = pool->large;
  if (L->plan != NULL || !L->plan_on)
    return L->plan;
  struct aa__plan *P = calloc(1, sizeof *P);
  if (P != NULL) {
    P->win = malloc(PLAN_WIN * sizeof *P->win);
    P->rtok = malloc(PLAN_WIN * sizeof *P->rtok);
    P->z = malloc(PLAN_WIN * sizeof *P->z);
  }
  if (P == NULL || P->win == NULL || P->rtok == NULL || P->z == NULL) {
    if (P != NULL) {
      free(P->win);
      free(P->rtok);
      free(P->z);
      free(P);
    }
    L->plan_on = false; /* watching needs its window: the path as without a plan */
    return NULL;
  }
  P->state = AA_PLAN_LEARNING;
  P->next_check = PLAN_EVERY;
  P->reps = 2;
  L->plan = P;
  L->yield = &plan_yield_ops;
  return P;
}

/* ------------------------------------------------------------ the room */

static void bits_span(const struct aa__plan *P, size_t off, size_t size, size_t *u0, size_t *u1) {
  *u0 = off / PLAN_UNIT;
  *u1 = (off + size + PLAN_UNIT - 1) / PLAN_UNIT;
  aa__assert(*u1 <= P->nwords * 64);
  (void)P;
}

static bool bits_clear(const struct aa__plan *P, size_t off, size_t size) {
  size_t u0, u1;
  bits_span(P, off, size, &u0, &u1);
  for (size_t u = u0; u < u1;) {
    if (u % 64 == 0 && u + 64 <= u1) {
      if (P->bits[u / 64] != 0)
        return false;
      u += 64;
      continue;
    }
    if (P->bits[u / 64] >> (u % 64) & 1)
      return false;
    u++;
  }
  return true;
}

static void bits_set(struct aa__plan *P, size_t off, size_t size, bool on) {
  size_t u0, u1;
  bits_span(P, off, size, &u0, &u1);
  for (size_t u = u0; u < u1;) {
    if (u % 64 == 0 && u + 64 <= u1) {
      aa__assert_internal(P->bits[u / 64] == (on ? 0 : ~(uint64_t)0));
      P->bits[u / 64] = on ? ~(uint64_t)0 : 0;
      u += 64;
      continue;
    }
    uint64_t m = (uint64_t)1 << (u % 64);
    aa__assert_internal(((P->bits[u / 64] & m) != 0) != on);
    if (on)
      P->bits[u / 64] |= m;
    else
      P->bits[u / 64] &= ~m;
    u++;
  }
}

/* Rooms whose events have completed are free again. */
static void pend_poll(aa_pool *pool, struct aa__plan *P) {
  for (size_t i = 0; i < P->npend;) {
    plan_pend *d = &P->pend[i];
    bool done = aa__events_done(pool, d->evs, &d->nevs) != 0;
    if (done && d->by_query)
      done = aa__stream_idle(pool, d->idle);
    if (done && d->own != NULL) {
      uint32_t one = 1;
      done = aa__events_done(pool, &d->own, &one) != 0;
      if (done)
        d->own = NULL;
    }
    if (!done) {
      i++;
      continue;
    }
    free(d->evs);
    bits_set(P, d->off, d->size, false);
    P->pend[i] = P->pend[--P->npend];
  }
}

/* ------------------------------------------------------------ live blocks */

static size_t live_slot(const struct aa__plan *P, uintptr_t p) {
  return (size_t)(((uint64_t)p >> 12) * 0x9E3779B97F4A7C15ull >> 20) & (P->live_cap - 1);
}

static plan_live *live_find(struct aa__plan *P, uintptr_t p) {
  for (size_t i = live_slot(P, p);; i = (i + 1) & (P->live_cap - 1)) {
    if (P->live[i].p == p)
      return &P->live[i];
    if (P->live[i].p == 0)
      return NULL;
  }
}

/* A slot for p (the table has room: live_cap > 2 * entries, and no two live
 * blocks share an address). */
static plan_live *live_put(struct aa__plan *P, uintptr_t p) {
  aa__assert(P->nlive + 1 < P->live_cap);
  size_t i = live_slot(P, p);
  while (P->live[i].p != 0)
    i = (i + 1) & (P->live_cap - 1);
  P->nlive++;
  return &P->live[i];
}

/* Removes slot e, shifting back what its probe chains passed over. */
static void live_del(struct aa__plan *P, plan_live *e) {
  size_t mask = P->live_cap - 1, i = (size_t)(e - P->live);
  for (size_t j = (i + 1) & mask; P->live[j].p != 0; j = (j + 1) & mask) {
    size_t h = live_slot(P, P->live[j].p);
    /* j's entry may fill the hole at i when its home is not in (i, j] */
    if ((j > i && (h <= i || h > j)) || (j < i && (h <= i && h > j))) {
      P->live[i] = P->live[j];
      i = j;
    }
  }
  memset(&P->live[i], 0, sizeof P->live[i]);
  P->nlive--;
}

/* ------------------------------------------------------------ the period */

/* The period in events, 0 when the window does not repeat; *matched: how
 * many events back the window equals itself shifted by it. shape: the
 * shape tokens instead of the exact ones. */
static uint64_t find_period(struct aa__plan *P, bool shape, uint64_t *matched) {
  uint64_t n = P->nev < PLAN_WIN ? P->nev : PLAN_WIN;
  *matched = 0;
  if (n < 2 * PLAN_MIN_Q)
    return 0;
  uint64_t *r = P->rtok;
  uint32_t *z = P->z;
  for (uint64_t i = 0; i < n; i++) {
    const plan_ev *e = ev_at(P, P->nev - 1 - i);
    r[i] = shape ? e->stok : e->tok;
  }
  /* z[i]: the length of the longest common prefix of r and r + i */
  z[0] = (uint32_t)n;
  uint64_t l = 0, rr = 0;
  for (uint64_t i = 1; i < n; i++) {
    uint64_t k = 0;
    if (i < rr) {
      k = rr - i < z[i - l] ? rr - i : z[i - l];
    }
    while (i + k < n && r[k] == r[i + k])
      k++;
    z[i] = (uint32_t)k;
    if (i + k > rr) {
      l = i;
      rr = i + k;
    }
  }
  /* a step leaves the path's bytes in use as it found them (by shape, where
   * sizes change: as many blocks live); a period inside one (a layer of the
   * forward pass, which keeps activations, or of the backward, which frees
   * them) does not; and the repetition must cover a quarter of the window
   * at least (an optimizer's loop of temporaries balances, but only over a
   * stretch of the step). By shape, a third period is asked for too: the
   * sizes of each slot over three periods at least make its room. */
  uint64_t in_use = ev_at(P, P->nev - 1)->in_use;
  uint64_t reps = P->reps - 1 + (shape ? 2 : 0);
  uint64_t best = 0, bm = 0;
  int64_t bal = 0; /* requests less frees over the last q events */
  for (uint64_t q = 1; q <= n / 2; q++) {
    bal += ev_at(P, P->nev - q)->kind == EV_ALLOC ? 1 : -1;
    if (q < PLAN_MIN_Q || z[q] < reps * q || z[q] < n / 4 || z[q] <= bm)
      continue;
    if (shape ? bal != 0 : ev_at(P, P->nev - 1 - q)->in_use != in_use)
      continue;
    best = q;
    bm = z[q];
  }
  *matched = bm;
  return best;
}

/* Whether circular arcs [a1, a1 + l1) and [a2, a2 + l2) on a circle of q
 * meet (each shorter than q). */
static bool arcs_meet(uint64_t a1, uint64_t l1, uint64_t a2, uint64_t l2, uint64_t q) {
  for (int k = -1; k <= 1; k++) {
    int64_t b = (int64_t)a2 + (int64_t)k * (int64_t)q;
    if ((int64_t)a1 < b + (int64_t)l2 && b < (int64_t)(a1 + l1))
      return true;
  }
  return false;
}

typedef struct cand {
  uint32_t j;    /* request index in the period */
  uint64_t a, l; /* its arc: occupied from event a (after its request) for l events */
  size_t size;
  size_t off;
  uint64_t key; /* the order being tried (set_keys) */
} cand;

typedef struct span {
  size_t lo, hi;
} span;

/* The orders placement tries, each a key to sort by, descending: size,
 * lifetime, size times lifetime; and the period's order (ascending start). */
enum { ORD_SIZE,
       ORD_LIFE,
       ORD_AREA,
       ORD_START,
       ORD_N };

static uint64_t key_of(const cand *c, int order) {
  switch (order) {
  case ORD_SIZE:
    return c->size;
  case ORD_LIFE:
    return c->l;
  case ORD_AREA:
    return (uint64_t)(c->size / PLAN_UNIT) * c->l;
  default:
    return UINT64_MAX - c->a;
  }
}

/* The keys of `order` into the candidates (each pool plans under its own
 * lock: the order is the candidates', never a global's). */
static void set_keys(cand *c, size_t nc, int order) {
  for (size_t i = 0; i < nc; i++)
    c[i].key = key_of(&c[i], order);
}

static int by_key_desc(const void *x, const void *y) {
  const cand *a = x, *b = y;
  if (a->key != b->key)
    return a->key < b->key ? 1 : -1;
  if (a->size != b->size)
    return a->size < b->size ? 1 : -1;
  return a->a < b->a ? -1 : a->a > b->a;
}

static int by_lo(const void *x, const void *y) {
  const span *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Test hooks (test_hooks.h): planner threads that reach the local search
 * wait there while g_hold is set (until cancelled); starting one fails
 * while g_fail_thread is set. */
static _Atomic bool g_hold, g_fail_thread;
static _Atomic unsigned g_held;

void aa_test_plan_hold(bool hold) { atomic_store(&g_hold, hold); }
void aa_test_plan_thread_fail(bool fail) { atomic_store(&g_fail_thread, fail); }
unsigned aa_test_plan_held(void) { return atomic_load(&g_held); }

static bool cancelled(const _Atomic bool *cancel) {
  return cancel != NULL && atomic_load_explicit(cancel, memory_order_relaxed);
}

/* The planner thread (cancel set) at the test hook's hold. */
static void hold_here(const _Atomic bool *cancel) {
  if (cancel == NULL || !atomic_load_explicit(&g_hold, memory_order_relaxed))
    return;
  atomic_fetch_add(&g_held, 1);
  struct timespec ms = {0, 1000000};
  while (atomic_load(&g_hold) && !cancelled(cancel))
    nanosleep(&ms, NULL);
}

/* Offsets for the candidates in the current order, each in the gap among
 * the placed blocks whose arcs meet its own that fits it best (the lowest
 * of equals; above them all when none fits); returns the arena's bytes. sp:
 * room for nc spans. */
static size_t place_once(cand *c, size_t nc, uint64_t q, span *sp, const _Atomic bool *cancel) {
  size_t top = 0;
  for (size_t i = 0; i < nc; i++) {
    if (i % 64 == 63 && cancelled(cancel))
      return SIZE_MAX; /* the caller sees the cancel */
    size_t ns = 0;
    for (size_t k = 0; k < i; k++) {
      if (arcs_meet(c[i].a, c[i].l, c[k].a, c[k].l, q))
        sp[ns++] = (span){c[k].off, c[k].off + c[k].size};
    }
    qsort(sp, ns, sizeof *sp, by_lo);
    size_t at = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (size_t k = 0; k < ns; k++) {
      if (sp[k].lo >= at + c[i].size && sp[k].lo - at < best_gap) {
        best = at;
        best_gap = sp[k].lo - at;
      }
      if (sp[k].hi > at)
        at = sp[k].hi;
    }
    c[i].off = best != SIZE_MAX ? best : at;
    if (c[i].off + c[i].size > top)
      top = c[i].off + c[i].size;
  }
  return top;
}

/* Offsets for the candidates: every order tried, the smallest arena kept;
 * returns its bytes, 0 when memory is short or *cancel was set (the
 * planner thread's: a pool destroyed while it plans; NULL on the
 * allocating thread). */
static size_t place(cand *c, size_t nc, uint64_t q, const _Atomic bool *cancel) {
  span *sp = malloc((nc + 1) * sizeof *sp);
  size_t *keep = malloc((nc + 1) * sizeof *keep);
  size_t best = 0;
  int best_ord = 0;
  if (sp == NULL || keep == NULL)
    goto out;
  /* every order when that is cheap, else size alone (planning runs on
   * the planner thread, or under the large path's lock: about 2e7 steps of
   * work at most in all) */
  int orders = (uint64_t)nc * nc * ORD_N <= 20000000 ? ORD_N : 1;
  for (int o = 0; o < orders; o++) {
    if (cancelled(cancel)) {
      best = 0;
      goto out;
    }
    set_keys(c, nc, o);
    qsort(c, nc, sizeof *c, by_key_desc);
    size_t top = place_once(c, nc, q, sp, cancel);
    if (best == 0 || top < best) {
      best = top;
      best_ord = o;
    }
  }
  set_keys(c, nc, best_ord); /* placed again in the best order */
  qsort(c, nc, sizeof *c, by_key_desc);
  best = place_once(c, nc, q, sp, cancel);
  /* then a bounded local search: two blocks of the order swapped, kept
   * when the arena does not grow (about 2e7 steps of work in all) */
  uint64_t work = (uint64_t)nc * nc + 1, budget = 20000000;
  uint64_t r = 0x9E3779B97F4A7C15ull ^ nc;
  hold_here(cancel);
  for (uint64_t it = 0; nc > 2 && (it + 1) * work < budget && it < 2000; it++) {
    if (cancelled(cancel)) {
      best = 0;
      goto out;
    }
    for (size_t i = 0; i < nc; i++)
      keep[i] = c[i].off;
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    size_t i = (size_t)(r % nc), j = (size_t)((r >> 32) % nc);
    if (i == j)
      continue;
    cand t = c[i];
    c[i] = c[j];
    c[j] = t;
    size_t top = place_once(c, nc, q, sp, cancel);
    if (top <= best) {
      best = top;
      continue;
    }
    t = c[i]; /* undone, with the offsets of the kept order */
    c[i] = c[j];
    c[j] = t;
    for (size_t k = 0; k < nc; k++)
      c[k].off = keep[k];
  }
  if (cancelled(cancel))
    best = 0;
out:
  free(sp);
  free(keep);
  return best;
}

/* A refused plan (the window's replay, or its arena at the period's
 * start): not tried again for a while, longer each time. */
static void refused(struct aa__plan *P, uint64_t q) {
  P->refused++;
  P->backoff = P->backoff ? P->backoff * 2 : 4 * q;
  if (P->backoff > 4 * PLAN_WIN)
    P->backoff = 4 * PLAN_WIN;
  P->next_check = P->nev + P->backoff;
}

/* The next plan must have repeated one period longer (up to PLAN_MAX_REPS). */
static void ask_longer(struct aa__plan *P) {
  if (P->reps < PLAN_MAX_REPS)
    P->reps++;
}

/* Requests out of step a plan bears in a row: a quarter period, 16 at least. */
static uint32_t run_limit(const struct aa__plan *P) { return P->n / 4 > 16 ? P->n / 4 : 16; }

/* The bytes a slot's room holds over the largest request seen in it (lo..hi
 * over m periods): where sizes scatter in a range, its end estimated from
 * the slot's own sizes (the largest plus twice the spread over m - 1) and
 * from the slots of about its size (within a doubling: their largest
 * spread, `range`, times m / (m - 1), from its smallest), whichever is
 * higher; at most
 * an eighth of the largest (PLAN_HEAD_MIN at least). A slot whose sizes
 * never changed gets none: its room is its request's. */
static size_t headroom(size_t lo, size_t hi, size_t range, uint64_t m) {
  if (lo == hi)
    return 0;
  size_t own = 2 * (hi - lo) / (size_t)(m - 1);
  range = range / (size_t)(m - 1) * (size_t)m; /* a range seen is short of the true one */
  size_t near = lo + range > hi ? lo + range - hi : 0;
  size_t h = own > near ? own : near;
  size_t lim = hi / 8 > PLAN_HEAD_MIN ? hi / 8 : PLAN_HEAD_MIN;
  return h < lim ? h : lim;
}

/* The doubling a size is in. */
static unsigned octave(size_t v) {
  unsigned o = 0;
  while (v > 1) {
    v >>= 1;
    o++;
  }
  return o;
}

/* Each candidate's cap: the room it may take at its offset, up to the
 * lowest block above it whose arc meets its own, or the arena's end. */
static void set_caps(const cand *c, size_t nc, uint64_t q, size_t arena, plan_ent *ent) {
  for (size_t i = 0; i < nc; i++) {
    size_t top = arena, end = c[i].off + c[i].size;
    for (size_t k = 0; k < nc; k++) {
      if (k != i && c[k].off >= end && c[k].off < top &&
          arcs_meet(c[i].a, c[i].l, c[k].a, c[k].l, q))
        top = c[k].off;
    }
    ent[c[i].j].cap = top - c[i].off;
  }
}

/* Plans j: a window (v) whose last job->matched events repeat with period
 * job->q (events): the lifetimes of the period before the last, the rooms
 * from the sizes of every whole period repeated (up to PLAN_MAX_SEEN);
 * job->outcome PJ_ADOPT with the plan when the window's replay says peak
 * reserved falls, PJ_REFUSE when it does not, PJ_RETRY when memory is short,
 * PJ_CANCELLED when *cancel was set. Reads nothing but v and job: it runs on
 * the planner thread as well as on the allocating one. */
static void plan_compute(const plan_view *v, plan_job *job, const _Atomic bool *cancel) {
  uint64_t q = job->q, matched = job->matched;
  uint64_t b = v->nev - 2 * q; /* the model period: events [b, b + q) */
  uint64_t nwin = v->nwin;
  uint64_t m = (matched + q) / q; /* whole periods seen, the last included */
  if (m > PLAN_MAX_SEEN)
    m = PLAN_MAX_SEEN;
  if (m * q > nwin)
    m = nwin / q;
  uint64_t *at = NULL, *freed = NULL;
  size_t *lo = NULL, *hi = NULL;
  cand *cs = NULL;
  int64_t *diff = NULL, *pl = NULL;
  plan_ent *ent = NULL, *rot = NULL;
  int outcome = PJ_REFUSE;
  uint32_t n = 0;
  for (uint64_t i = b; i < b + q; i++)
    n += vat(v, i)->kind == EV_ALLOC;
  if (n == 0 || n > PLAN_MAX_N || m < 2)
    goto out;
  at = malloc((size_t)n * sizeof *at); /* each request's event */
  freed = calloc(n, sizeof *freed);    /* its free's event, or 0 */
  lo = malloc((size_t)n * sizeof *lo); /* the fewest and most bytes seen */
  hi = calloc(n, sizeof *hi);
  cs = malloc((size_t)n * sizeof *cs);
  diff = calloc(q + 1, sizeof *diff);
  pl = calloc(nwin + 2, sizeof *pl);
  ent = calloc(n, sizeof *ent);
  rot = malloc((size_t)n * sizeof *rot);
  if (at == NULL || freed == NULL || lo == NULL || hi == NULL || cs == NULL || diff == NULL ||
      pl == NULL || ent == NULL || rot == NULL) {
    outcome = PJ_RETRY; /* memory is short: try again later */
    goto out;
  }
  uint32_t k = 0;
  for (uint64_t i = b; i < b + q; i++) {
    if (vat(v, i)->kind == EV_ALLOC)
      at[k++] = i;
  }
  uint64_t seq0 = vat(v, at[0])->seq;
  for (uint32_t j = 0; j < n; j++) {
    if (vat(v, at[j])->seq != seq0 + j)
      goto out; /* a request the window missed: no model */
    lo[j] = SIZE_MAX;
  }
  for (uint64_t i = b; i < v->nev; i++) {
    const plan_ev *e = vat(v, i);
    if (e->kind == EV_FREE && e->seq >= seq0 && e->seq < seq0 + n && freed[e->seq - seq0] == 0)
      freed[e->seq - seq0] = i;
  }
  /* the sizes of each slot over the periods seen (request j of each is at
   * the same place in it: the periods repeat) */
  for (uint64_t p = 0; p < m; p++) {
    uint64_t bp = v->nev - (p + 1) * q;
    for (uint32_t j = 0; j < n; j++) {
      const plan_ev *e = vat(v, bp + (at[j] - b));
      if (e->kind != EV_ALLOC)
        goto out;
      lo[j] = e->size < lo[j] ? e->size : lo[j];
      hi[j] = e->size > hi[j] ? e->size : hi[j];
    }
  }
  /* the plan's stream: the one with the most bytes asked for */
  aa_stream st[8];
  uint64_t sb[8] = {0};
  int nst = 0;
  for (uint32_t j = 0; j < n; j++) {
    const plan_ev *e = vat(v, at[j]);
    int s = 0;
    while (s < nst && st[s] != e->stream)
      s++;
    if (s == nst && nst < 8)
      st[nst++] = e->stream;
    if (s < nst)
      sb[s] += hi[j];
  }
  int best = 0;
  for (int s = 1; s < nst; s++)
    best = sb[s] > sb[best] ? s : best;
  aa_stream stream = st[best];
  /* the largest spread of the slots in each doubling */
  size_t range[64] = {0};
  for (uint32_t j = 0; j < n; j++) {
    unsigned o = octave(hi[j]);
    range[o] = hi[j] - lo[j] > range[o] ? hi[j] - lo[j] : range[o];
  }
  /* the candidates, and the planned bytes (rooms) live before each event */
  size_t nc = 0;
  for (uint32_t j = 0; j < n; j++) {
    const plan_ev *e = vat(v, at[j]);
    size_t h = headroom(lo[j], hi[j], range[octave(hi[j])], m);
    ent[j].tok = e->stok;
    ent[j].size = room_of(hi[j] + h);
    ent[j].varied = lo[j] < hi[j];
    if (ent[j].varied) { /* down to half its room, or the fewest bytes seen */
      ent[j].lo = lo[j] > h ? lo[j] - h : 1;
      ent[j].lo = ent[j].lo < ent[j].size / 2 ? ent[j].lo : ent[j].size / 2;
    } else {
      ent[j].lo = lo[j];
    }
    ent[j].cap = ent[j].size;
    ent[j].off = NO_OFF;
    if (e->stream != stream || freed[j] == 0 || freed[j] - at[j] >= q)
      continue; /* another stream, or lives a period or more: the path's */
    uint64_t a = (at[j] - b + 1) % q, l = freed[j] - at[j];
    cs[nc++] = (cand){j, a, l, ent[j].size, 0, 0};
    int64_t sz = (int64_t)ent[j].size;
    diff[a] += sz;
    if (a + l <= q) {
      diff[a + l] -= sz;
    } else { /* the arc wraps round the period's end */
      diff[q] -= sz;
      diff[0] += sz;
      diff[a + l - q] -= sz;
    }
  }
  if (nc == 0)
    goto out;
  /* diff[t] becomes the planned bytes live before event t of the period */
  int64_t run = 0;
  for (uint64_t t = 0; t < q; t++) {
    run += diff[t];
    diff[t] = run;
  }
  /* entry 0: the request before which the fewest planned bytes are live */
  uint32_t j0 = 0;
  for (uint32_t j = 1; j < n; j++) {
    if (diff[at[j] - b] < diff[at[j0] - b])
      j0 = j;
  }
  uint64_t live0 = (uint64_t)diff[at[j0] - b];
  size_t arena = place(cs, nc, q, cancel);
  if (arena == 0) {
    outcome = cancelled(cancel) ? PJ_CANCELLED : PJ_RETRY;
    goto out;
  }
  for (size_t i = 0; i < nc; i++)
    ent[cs[i].j].off = cs[i].off;
  set_caps(cs, nc, q, arena, ent);
  /* the window's replay: the last period's peak reserved against the peak
   * in use outside the plan, plus the arena, plus what is live at entry 0.
   * Outside the plan: what was in use less the bytes the planned blocks of
   * each period asked for, over the events of the repeating stretch
   * (from valid0) whose live planned blocks were all asked for in it (a
   * period in: they live less than one). pl[t]: the change of the planned
   * bytes live after event valid0 + t. */
  uint64_t valid0 = v->nev - (matched + q < nwin ? matched + q : nwin);
  for (uint64_t p = 0; (p + 1) * q <= v->nev - valid0 + q; p++) {
    for (size_t i = 0; i < nc; i++) {
      uint64_t ea = v->nev - (p + 1) * q + (at[cs[i].j] - b);
      if ((p + 1) * q > v->nev + (at[cs[i].j] - b) || ea < valid0 || ea >= v->nev)
        continue;
      const plan_ev *e = vat(v, ea);
      aa__assert(e->kind == EV_ALLOC);
      uint64_t t1 = ea + cs[i].l < v->nev ? ea + cs[i].l : v->nev;
      pl[ea - valid0] += (int64_t)e->blk;
      pl[t1 - valid0] -= (int64_t)e->blk;
    }
  }
  uint64_t observed = 0, outside = 0;
  run = 0;
  for (uint64_t i = valid0; i < v->nev; i++) {
    const plan_ev *e = vat(v, i);
    run += pl[i - valid0];
    uint64_t planned = (uint64_t)run; /* after event i */
    uint64_t o = e->in_use > planned ? e->in_use - planned : 0;
    if (i >= v->nev - q)
      observed = e->reserved > observed ? e->reserved : observed;
    if (i >= valid0 + q)
      outside = o > outside ? o : outside;
  }
  uint64_t predicted = outside + arena + live0;
  size_t page = job->page;
  uint64_t margin = observed / 100 > 2 * page ? observed / 100 : 2 * page;
  if (predicted + margin > observed)
    goto out;
  /* adopted: entry 0 is request j0 */
  for (uint32_t j = 0; j < n; j++)
    rot[j] = ent[(j0 + j) % n];
  job->ent = rot;
  rot = NULL;
  job->n = n;
  job->s0 = seq0 + j0;
  job->stream = stream;
  job->arena = arena;
  job->saved = observed - predicted;
  job->observed = observed;
  outcome = PJ_ADOPT;
out:
  job->outcome = outcome;
  free(at);
  free(freed);
  free(lo);
  free(hi);
  free(cs);
  free(diff);
  free(pl);
  free(ent);
  free(rot);
}

/* ------------------------------------------------------------ planning */

/* What came of a planning, on the allocating path: the plan installed
 * (waiting for the period's start) when adopted, a refusal counted. */
static void plan_install(struct aa__plan *P, plan_job *j) {
  P->plan_ns = j->ns;
  if (j->outcome == PJ_REFUSE) {
    refused(P, j->q);
    return;
  }
  if (j->outcome != PJ_ADOPT)
    return;
  free(P->ent);
  P->ent = j->ent;
  j->ent = NULL;
  P->n = j->n;
  P->q = j->q;
  P->s0 = j->s0;
  P->stream = j->stream;
  P->arena_bytes = j->arena;
  P->saved = j->saved;
  P->observed = j->observed;
  P->state = AA_PLAN_WAITING;
  P->wait_miss = 0;
  P->backoff = 0;
}

static void job_free(plan_job *j) {
  if (j == NULL)
    return;
  free(j->ent);
  free(j);
}

/* Plans j on the events of v, timed. */
static void plan_run(const plan_view *v, plan_job *j, const _Atomic bool *cancel) {
  uint64_t t0 = aa_now_ns();
  plan_compute(v, j, cancel);
  j->ns = aa_now_ns() - t0;
}

static void *planner_main(void *arg) {
  plan_thread *T = arg;
#ifdef __linux__
  /* a batch thread (waking it to plan never preempts the allocating thread
   * that handed the plan over) of the lowest priority (on a core the
   * application's threads want, it takes a sliver: a plan comes back later,
   * no step is slower) */
  struct sched_param sp = {0};
  (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &sp);
  (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
#endif
  pthread_mutex_lock(&T->mu);
  for (;;) {
    while (!T->quit && T->st != PT_QUEUED)
      pthread_cond_wait(&T->cv, &T->mu);
    if (T->quit)
      break;
    plan_job *j = T->job;
    T->st = PT_RUNNING;
    pthread_mutex_unlock(&T->mu);
    plan_view v = {j->ev, j->first, j->nev - j->first, j->nev, j->nwin};
    plan_run(&v, j, &T->cancel);
    pthread_mutex_lock(&T->mu);
    T->st = PT_DONE;
    atomic_store_explicit(&T->ready, true, memory_order_release);
    pthread_cond_broadcast(&T->cv);
  }
  pthread_mutex_unlock(&T->mu);
  return NULL;
}

/* Stops and joins the thread (a planning under way sees the cancel within
 * one placement), frees it and its job. In a fork()ed child, where the
 * thread does not run (and its lock may have been held at the fork), it is
 * only forgotten. */
static void planner_stop(plan_thread *T) {
  if (T == NULL || T->pid != getpid())
    return;
  pthread_mutex_lock(&T->mu);
  T->quit = true;
  atomic_store(&T->cancel, true);
  pthread_cond_broadcast(&T->cv);
  pthread_mutex_unlock(&T->mu);
  pthread_join(T->th, NULL);
  job_free(T->job);
  free(T->buf);
  pthread_cond_destroy(&T->cv);
  pthread_mutex_destroy(&T->mu);
  free(T);
}

/* The pool's planner thread, started the first time; NULL when it cannot
 * be (the caller plans on the allocating thread). The thread takes no
 * signal (they stay the application's threads'). */
static plan_thread *planner_get(struct aa__plan *P) {
  if (P->thr != NULL && P->thr->pid == getpid())
    return P->thr;
  P->thr = NULL; /* a fork()ed child's copy: its thread is the parent's */
  if (atomic_load(&g_fail_thread))
    return NULL;
  plan_thread *T = calloc(1, sizeof *T);
  if (T == NULL)
    return NULL;
  pthread_mutex_init(&T->mu, NULL);
  pthread_cond_init(&T->cv, NULL);
  T->pid = getpid();
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&T->th, NULL, planner_main, T);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&T->cv);
    pthread_mutex_destroy(&T->mu);
    free(T);
    return NULL;
  }
  P->thr = T;
  return T;
}

/* The window's last events planning reads (from valid0, the start of the
 * repetition, which holds every period it reads) copied into T's buffer,
 * for a job of their own; NULL when memory is short. T has no job. */
static plan_job *job_snapshot(struct aa__plan *P, plan_thread *T, uint64_t q, uint64_t matched,
                              bool shape, size_t page) {
  uint64_t nwin = P->nev < PLAN_WIN ? P->nev : PLAN_WIN;
  uint64_t count = matched + q < nwin ? matched + q : nwin;
  if (count > T->buf_cap) { /* grown by doubling at least (PLAN_WIN at most) */
    uint64_t cap = 2 * T->buf_cap > count ? 2 * T->buf_cap : count;
    cap = cap < PLAN_WIN ? cap : PLAN_WIN;
    free(T->buf);
    T->buf = malloc((size_t)cap * sizeof *T->buf);
    T->buf_cap = T->buf != NULL ? cap : 0;
  }
  plan_job *j = T->buf != NULL ? calloc(1, sizeof *j) : NULL;
  if (j == NULL)
    return NULL;
  plan_ev *ev = T->buf;
  uint64_t first = P->nev - count, at = first % PLAN_WIN;
  uint64_t n1 = PLAN_WIN - at < count ? PLAN_WIN - at : count;
  memcpy(ev, &P->win[at], (size_t)n1 * sizeof *ev);
  memcpy(ev + n1, P->win, (size_t)(count - n1) * sizeof *ev);
  j->ev = ev;
  j->first = first;
  j->nev = P->nev;
  j->nwin = nwin;
  j->q = q;
  j->matched = matched;
  j->page = page;
  j->shape = shape;
  return j;
}

/* Whether the events since j's copy still repeat with its period (what
 * the window still holds of them): else the loop changed while it was
 * planned, and the plan is not for it. */
static bool still_repeats(const struct aa__plan *P, const plan_job *j) {
  uint64_t lo = j->nev, nwin = P->nev < PLAN_WIN ? P->nev : PLAN_WIN;
  if (lo < P->nev - nwin + j->q)
    lo = P->nev - nwin + j->q;
  for (uint64_t i = lo; i < P->nev; i++) {
    const plan_ev *a = ev_at(P, i), *b = ev_at(P, i - j->q);
    if (j->shape ? a->stok != b->stok : a->tok != b->tok)
      return false;
  }
  return true;
}

static void stalled(struct aa__plan *P, uint64_t t0) {
  uint64_t d = aa_now_ns() - t0;
  P->stall_ns = d > P->stall_ns ? d : P->stall_ns;
}

/* A window whose last `matched` events repeat with period q: planned on
 * the planner thread from a copy (large_plan 1), the allocating path going
 * on at once; on the allocating thread, from the window itself, with
 * AA_LARGE_PLAN_SYNC or when the thread or the copy cannot be had. */
static void plan_start(aa_pool *pool, struct aa__plan *P, uint64_t q, uint64_t matched,
                       bool shape) {
  size_t page = pool->large->vmm_page ? pool->large->vmm_page : AA__LARGE_SEG;
  uint64_t t0 = aa_now_ns();
  if (pool->cfg.large_plan != AA_LARGE_PLAN_SYNC) {
    plan_thread *T = planner_get(P);
    plan_job *j = T != NULL ? job_snapshot(P, T, q, matched, shape, page) : NULL;
    if (j != NULL) {
      pthread_mutex_lock(&T->mu);
      aa__assert(T->st == PT_IDLE && T->job == NULL);
      T->job = j;
      T->st = PT_QUEUED;
      pthread_cond_broadcast(&T->cv);
      pthread_mutex_unlock(&T->mu);
      P->job_out = true;
      stalled(P, t0);
      return;
    }
    P->inline_plans++; /* no thread, or no memory for the copy: planned here */
  }
  uint64_t nwin = P->nev < PLAN_WIN ? P->nev : PLAN_WIN;
  plan_view v = {P->win, 0, PLAN_WIN, P->nev, nwin};
  plan_job j = {.nev = P->nev, .nwin = nwin, .q = q, .matched = matched, .page = page, .shape = shape};
  plan_run(&v, &j, NULL);
  plan_install(P, &j);
  free(j.ent);
  stalled(P, t0);
}

/* A plan the planner thread finished: installed when the requests still
 * repeat with its period, else discarded (counted stale; the window is
 * looked at again). Nothing when it is not done yet (one atomic load). A
 * fork()ed child whose fork came while a plan was made does not plan. */
static void plan_collect(struct aa__plan *P) {
  plan_thread *T = P->thr;
  if (!atomic_load_explicit(&T->ready, memory_order_acquire))
    return;
  if (T->pid != getpid()) { /* a fork()ed child: the job was the parent's thread's */
    P->job_out = false;
    return;
  }
  uint64_t t0 = aa_now_ns();
  pthread_mutex_lock(&T->mu);
  plan_job *j = T->job;
  T->job = NULL;
  T->st = PT_IDLE;
  atomic_store_explicit(&T->ready, false, memory_order_relaxed);
  pthread_cond_broadcast(&T->cv);
  pthread_mutex_unlock(&T->mu);
  P->job_out = false;
  if ((j->outcome == PJ_ADOPT || j->outcome == PJ_REFUSE) && !still_repeats(P, j)) {
    P->stale++;
    P->plan_ns = j->ns;
  } else {
    plan_install(P, j);
  }
  job_free(j);
  stalled(P, t0);
}

int aa_test_plan_wait(aa_pool *pool) {
  aa__large *L = pool->large;
  pthread_mutex_lock(&L->mu);
  plan_thread *T = L->plan != NULL ? L->plan->thr : NULL;
  pthread_mutex_unlock(&L->mu);
  if (T == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(&T->mu);
  while (T->st == PT_QUEUED || T->st == PT_RUNNING)
    pthread_cond_wait(&T->cv, &T->mu);
  pthread_mutex_unlock(&T->mu);
  return AA_OK;
}

void aa__lg_plan_note(aa_pool *pool, int kind, size_t req, aa_stream stream, uint64_t seq) {
  struct aa__plan *P = plan_get(pool);
  if (P == NULL)
    return;
  plan_ev *e = &P->win[P->nev % PLAN_WIN];
  uint64_t dist = kind == EV_FREE && seq != 0 ? pool->large->alloc_seq - seq : UINT64_MAX;
  e->tok = tok_of((uint32_t)kind, req, stream);
  e->stok = shape_of((uint32_t)kind, dist, stream);
  e->seq = seq;
  e->size = req;
  e->stream = stream;
  e->kind = (uint32_t)kind;
  e->in_use = pool->large->in_use;
  e->reserved = pool->large->reserved;
  /* what it added to the bytes in use (every change to them is an event
   * here), within its room and twice that */
  e->blk = room_of(req);
  if (kind == EV_ALLOC && P->nev > 0) {
    uint64_t prev = ev_at(P, P->nev - 1)->in_use;
    if (e->in_use > prev + e->blk && e->in_use - prev <= 2 * (uint64_t)e->blk)
      e->blk = (size_t)(e->in_use - prev);
  }
  P->nev++;
  if (P->state == AA_PLAN_LEARNING && !P->job_out && P->nev >= P->next_check) {
    /* a window that does not repeat is looked at less often, down to
     * once per 8 * PLAN_EVERY events (the search is linear in the window);
     * the exact requests first, then their shapes (sizes that change) */
    P->idle_checks = P->idle_checks < 4 ? P->idle_checks + 1 : 4;
    P->next_check = P->nev + ((uint64_t)PLAN_EVERY << (P->idle_checks - 1));
    uint64_t matched;
    uint64_t q = find_period(P, false, &matched);
    bool shape = q == 0;
    if (shape)
      q = find_period(P, true, &matched);
    if (q != 0) {
      P->idle_checks = 0;
      plan_start(pool, P, q, matched, shape);
    }
  }
}

/* ------------------------------------------------------------ drop */

/* The arena's memory is the path's now (dissolved, or back whole). The
 * pages activate gave back for it lie below their reservations' high-water
 * marks, which placement counts as held (find_fit_mapped): it mapped them
 * again, best fit by size, while the arena's room stayed mapped and idle,
 * and the pool held both. On the shapes trace (H100, a large phase back
 * after the plan was adopted on a smaller one) peak reserved was 3,570 MiB
 * against best fit's 2,872, and 1,162 against 982 on prefetch. They are
 * forgotten, as after an explicit release: the arena's room first. */
static void handed_over(aa_pool *pool) { aa__lg_forget_unmapped(pool); }

/* The arena is chunk c now (NULL: none), also in the path's state, whose
 * give-back (aa__lg_release_chunk) never counts the arena in use. */
static void set_arena(aa_pool *pool, struct aa__plan *P, aa__chunk *c) {
  P->arena = c;
  pool->large->arena = c;
}

/* The arena back to the path (no block in it), the plan gone; learning
 * starts again. */
static void plan_finish(aa_pool *pool, struct aa__plan *P) {
  aa__assert(P->nlive == 0 && P->npend == 0);
  aa__chunk *c = P->arena;
  if (c != NULL) {
    /* still the arena while the path takes it back: never counted in use,
     * so nothing is taken off the counts (pool->out_bytes raised for the
     * moment would reach a peak another thread's small request takes) */
    uint64_t st = atomic_load_explicit(&c->state, AA__RLX);
    atomic_store_explicit(&c->state, aa__lg_st_phase(st, AA__CH_FREE), AA__RLX);
    aa__lg_release_chunk(pool, c, P->stream, false);
    set_arena(pool, P, NULL);
    handed_over(pool);
  }
  free(P->bits);
  P->bits = NULL;
  P->nwords = 0;
  free(P->live);
  P->live = NULL;
  P->live_cap = 0;
  free(P->pend);
  P->pend = NULL;
  P->pend_cap = 0;
  free(P->ent);
  P->ent = NULL;
  P->n = 0;
  P->arena_bytes = 0;
  P->good_periods = 0;
  P->period_misses = 0;
  P->period_grown = 0;
  P->grew = false;
  P->state = AA_PLAN_LEARNING;
  P->next_check = P->nev + PLAN_EVERY;
}

static int by_piece(const void *x, const void *y) {
  const aa__lg_piece *a = x, *b = y;
  return a->base < b->base ? -1 : a->base > b->base;
}

/* The arena becomes chunks of the path at once: its live blocks live
 * chunks, the rooms waiting for events free chunks holding those events,
 * the rest free (aa__lg_carve). The memory the plan no longer serves is the
 * path's from this moment, for the requests the plan did not know (a loop's
 * other phase). false when it cannot be (a stitched range's arena: one chunk
 * for ever; memory short): the caller drains instead. */
static bool dissolve(aa_pool *pool, struct aa__plan *P) {
  aa__chunk *c = P->arena;
  if (c == NULL)
    return true;
  if (c->seg->st != NULL)
    return false;
  aa__lg_piece *v = calloc(P->nlive + P->npend + 1, sizeof *v);
  if (v == NULL)
    return false;
  size_t n = 0;
  for (size_t i = 0; i < P->live_cap; i++) {
    const plan_live *l = &P->live[i];
    if (l->p != 0)
      v[n++] = (aa__lg_piece){.base = l->p, .size = l->size, .live = 1, .req = l->req, .born = l->seq, .xs = l->xs, .nxs = l->nxs};
  }
  for (size_t i = 0; i < P->npend; i++) {
    const plan_pend *d = &P->pend[i];
    /* a room that waits for a stream's idleness (no event could be
     * recorded) is a chunk freed on that stream */
    v[n++] = (aa__lg_piece){.base = c->base + d->off, .size = d->size, .stream = d->idle, .ev = d->own, .xev = d->evs, .nxev = d->nevs};
  }
  qsort(v, n, sizeof *v, by_piece);
  /* the free room around the blocks still live: expandable, its pages go
   * where the path would map new ones (aa__lg_ensure_mapped), so that the
   * placement the plan leaves behind costs no memory */
  uint64_t room = c->size > P->live_bytes ? c->size - P->live_bytes : 0;
  bool ok = aa__lg_carve(pool, c, v, n, P->stream);
  if (ok && P->nlive > 0 && pool->large->vmm_page != 0)
    pool->large->unmap_credit += room;
  free(v);
  if (!ok)
    return false;
  /* the chunks own the streams and events now */
  for (size_t i = 0; i < P->live_cap; i++)
    P->live[i] = (plan_live){0};
  P->nlive = 0;
  P->npend = 0;
  P->live_bytes = 0;
  set_arena(pool, P, NULL);
  handed_over(pool);
  return true;
}

/* Stops serving from the plan: the arena becomes the path's chunks at once
 * (dissolve), else it goes once its blocks are freed. */
static void plan_drop(aa_pool *pool, struct aa__plan *P) {
  P->dropped++;
  pend_poll(pool, P);
  if ((P->nlive == 0 && P->npend == 0) || dissolve(pool, P)) {
    plan_finish(pool, P);
    return;
  }
  P->state = AA_PLAN_DRAINING;
}

/* Drops a plan the requests stopped following; the next one must have
 * repeated for one period more, unless the requests still follow it and
 * only their bytes outgrew their rooms (the request that made the path
 * take memory, or most of the period's misses): then it is planned again
 * from the window, with the larger sizes, at the next look. */
static void stop_following(aa_pool *pool, struct aa__plan *P) {
  bool grown = P->grew || 2 * P->period_grown > P->period_misses;
  if (!grown)
    ask_longer(P);
  plan_drop(pool, P);
}

/* Whether a small request (aa__lg_small) of need bytes on `stream` could
 * take some of the arena's free room were the arena the path's chunks
 * (aa__lg_carve): a small request takes the larger requests' memory only
 * from a hole between two blocks in use (large_take.c find_fit_other), so a
 * clear run of the bitmap of at least need bytes between two live blocks
 * (a chunk in use beyond the arena's edge counts), whose chunk would be
 * freed on the plan's stream. A run beside a room that waits for events
 * does not count (its chunk is free), nor one cleared since the last poll
 * (the answer errs towards keeping the plan). */
static bool hole_fits(const aa_pool *pool, struct aa__plan *P, size_t need, aa_stream stream) {
  const aa__chunk *c = P->arena;
  if (stream != P->stream && pool->has_events)
    return false;
  size_t nu = c->size / PLAN_UNIT, nbits = P->nwords * 64;
  size_t want = (need + PLAN_UNIT - 1) / PLAN_UNIT;
  /* a run starts at the arena's start (after a chunk in use) or at a live
   * block's end: every run is looked at once */
  for (size_t i = 0; i <= P->live_cap; i++) {
    size_t u;
    if (i == P->live_cap) {
      if (c->prev == NULL || c->prev->free)
        continue;
      u = 0;
    } else {
      const plan_live *l = &P->live[i];
      if (l->p == 0)
        continue;
      u = (size_t)(l->p + l->size - c->base) / PLAN_UNIT;
    }
    size_t e = u;
    while (e < nu) {
      if (e >= nbits) {
        e = nu;
        break;
      }
      if (e % 64 == 0 && P->bits[e / 64] == 0) {
        e += 64;
        continue;
      }
      if (P->bits[e / 64] >> (e % 64) & 1)
        break;
      e++;
    }
    if (e > nu)
      e = nu;
    if (e - u < want)
      continue;
    if (e == nu ? c->next != NULL && !c->next->free
                : live_find(P, c->base + e * PLAN_UNIT) != NULL)
      return true;
  }
  return false;
}

bool aa__lg_plan_can_yield(const aa_pool *pool, size_t need, aa_stream stream, bool refused) {
  struct aa__plan *P = pool->large->plan;
  if (P == NULL || P->state != AA_PLAN_ACTIVE || P->arena == NULL ||
      P->live_bytes >= P->arena_bytes)
    return false;
  /* the backend refused new memory: the arena's free room is the request's
   * best chance before the out-of-memory path (which gives back only an
   * idle arena) */
  if (refused)
    return true;
  size_t page = pool->large->vmm_page ? pool->large->vmm_page : AA__LARGE_SEG;
  bool past = pool->large->reserved + aa__lg_round_up(need, page) > P->observed;
  /* a small request grows its own region by a page of small blocks, as
   * under best fit, while the pool stays under the peak the plan was
   * measured against (that peak held the region's pages the arena's
   * activation gave back): the plan holds. Past it, the plan yields only
   * when the request could take room of the arena instead, a hole between
   * its live blocks. Before, a small block the plan does not serve (one
   * living longer than a step) asked for after the arena was taken dropped
   * the plan every time (test_core_plan kept_small: 100 MiB reserved at the
   * peak against best fit's 70). */
  if (aa__lg_small(need))
    return past && hole_fits(pool, P, need, stream);
  /* a request the plan expected, grown past its room (sizes that change a
   * little every step), may take new memory while the pool stays under
   * the peak the plan was measured against: the plan holds */
  return !P->grew || pool->large->reserved + aa__lg_round_up(need, page) > P->observed;
}

void aa__lg_plan_yield(aa_pool *pool) { stop_following(pool, pool->large->plan); }

void aa__lg_plan_release(aa_pool *pool) {
  struct aa__plan *P = pool->large->plan;
  if (P == NULL || P->arena == NULL)
    return;
  pend_poll(pool, P);
  if (P->nlive == 0 && P->npend == 0) {
    if (P->state != AA_PLAN_DRAINING)
      P->dropped++;
    plan_finish(pool, P);
  }
}

/* ------------------------------------------------------------ serving */

/* The period's start: what the path caches goes back, the arena is taken. */
static bool activate(aa_pool *pool, struct aa__plan *P) {
  size_t nw = (P->arena_bytes / PLAN_UNIT + 63) / 64;
  size_t cap = 16;
  while (cap < 2 * ((size_t)P->n + 1))
    cap *= 2;
  uint64_t *bits = calloc(nw, sizeof *bits);
  plan_live *live = calloc(cap, sizeof *live);
  if (bits == NULL || live == NULL) {
    free(bits);
    free(live);
    return false;
  }
  /* free stitched ranges give their pages back to their holes first (no
   * memory changes hands); then what a release would give back (pages that
   * live blocks' map runs share stay): when what is left with the arena
   * would not come in under the window's peak, nothing is released */
  (void)aa__lg_stitch_release(pool);
  /* asked first changing nothing (at most what a release gives back);
   * then, that passed, with the free chunks' events recorded */
  if (pool->large->reserved - aa__lg_releasable(pool, true) + P->arena_bytes > P->observed ||
      pool->large->reserved - aa__lg_releasable(pool, false) + P->arena_bytes > P->observed) {
    free(bits);
    free(live);
    return false;
  }
  (void)aa__lg_release_locked(pool, SIZE_MAX);
  /* what could not be given back (pages that live blocks share) stays:
   * the arena on top of it must still come in under the window's peak */
  if (pool->large->reserved + P->arena_bytes > P->observed) {
    free(bits);
    free(live);
    return false;
  }
  bool retry;
  /* expandable: the arena's map runs end at its planned blocks' edges
   * (aa__lg_ensure_mapped), so that a drop mid-step can give back the free
   * room around the blocks then live; no cuts when memory is short */
  size_t *cuts = malloc(2 * (size_t)P->n * sizeof *cuts), ncuts = 0;
  for (uint32_t j = 0; cuts != NULL && j < P->n; j++) {
    if (P->ent[j].off != NO_OFF) {
      cuts[ncuts++] = P->ent[j].off;
      cuts[ncuts++] = P->ent[j].off + P->ent[j].size;
    }
  }
  pool->large->map_cuts = cuts;
  pool->large->map_ncuts = cuts != NULL ? ncuts : 0;
  pool->large->unmap_credit = 0;
  /* a stitched range when holes make one (no new memory; such an arena,
   * one chunk for ever, drains instead of dissolving when the plan goes) */
  aa__chunk *c = aa__lg_take(pool, NULL, P->arena_bytes, P->arena_bytes, P->stream, &retry);
  pool->large->map_cuts = NULL;
  pool->large->map_ncuts = 0;
  free(cuts);
  if (c == NULL) {
    free(bits);
    free(live);
    return false;
  }
  c->born = 0;
  set_arena(pool, P, c);
  P->bits = bits;
  P->nwords = nw;
  P->live = live;
  P->live_cap = cap;
  P->nlive = 0;
  P->cursor = 0;
  P->streak = 0;
  P->state = AA_PLAN_ACTIVE;
  P->adopted++;
  return true;
}

/* Whether a request of `size` bytes with shape token tok is entry e. */
static bool is_ent(const plan_ent *e, uint64_t tok, size_t size) {
  return e->tok == tok && size >= e->lo && room_of(size) <= e->cap;
}

/* The entry a request matches: the expected one (also when its bytes
 * outgrew its room, where its slot's sizes vary: *grown set), one of the
 * next few, or the period's start; n (none) otherwise. */
static uint32_t match(const struct aa__plan *P, uint64_t tok, size_t size, bool *grown) {
  const plan_ent *e = &P->ent[P->cursor];
  *grown = false;
  if (is_ent(e, tok, size))
    return P->cursor;
  if (e->varied && e->tok == tok && size >= e->lo) {
    *grown = true;
    return P->cursor;
  }
  for (uint32_t d = 1; d <= PLAN_RESYNC && d < P->n; d++) {
    uint32_t k = (P->cursor + d) % P->n;
    if (is_ent(&P->ent[k], tok, size))
      return k;
  }
  return is_ent(&P->ent[0], tok, size) ? 0 : P->n;
}

/* A request the plan did not serve: a run of them longer than a quarter
 * period (16 at least), or more than an eighth of a period's requests (4
 * at least) between two starts of the period, and the plan goes. The
 * second catches a loop whose other phase (an evaluation pass) the plan
 * does not know: its requests miss among the hits of the known phase, while
 * the arena holds memory that phase cannot use. */
static void miss(aa_pool *pool, struct aa__plan *P) {
  P->misses++;
  P->streak++;
  P->period_misses++;
  uint32_t plimit = P->n / 8 > 4 ? P->n / 8 : 4;
  if (P->streak > run_limit(P) || P->period_misses > plimit)
    stop_following(pool, P);
}

void *aa__lg_plan_alloc(aa_pool *pool, size_t size, aa_stream stream, uint64_t seq) {
  struct aa__plan *P = plan_get(pool);
  if (P != NULL && P->job_out)
    plan_collect(P); /* a plan made in the background, when done */
  if (P != NULL && P->state == AA_PLAN_DRAINING && P->nlive == 0) {
    /* its last rooms waited for events at their frees: the arena goes once
     * they complete, and learning starts again */
    pend_poll(pool, P);
    if (P->npend == 0)
      plan_finish(pool, P);
  }
  if (P == NULL || P->state == AA_PLAN_LEARNING || P->state == AA_PLAN_DRAINING)
    return NULL;
  uint64_t tok = shape_of(EV_ALLOC, 0, stream);
  P->grew = false;
  if (P->state == AA_PLAN_WAITING) {
    uint32_t k = (uint32_t)((seq - P->s0) % P->n);
    if (!is_ent(&P->ent[k], tok, size)) {
      if (++P->wait_miss > run_limit(P)) { /* the requests moved on: learn again */
        P->dropped++;
        plan_finish(pool, P);
      }
      return NULL;
    }
    if (k != 0)
      return NULL;
    if (!activate(pool, P)) { /* what the path holds would not make room */
      uint64_t q = P->q;
      ask_longer(P);
      plan_finish(pool, P);
      refused(P, q);
      return NULL;
    }
  }
  bool grown;
  uint32_t k = match(P, tok, size, &grown);
  if (k == P->n) {
    miss(pool, P);
    return NULL;
  }
  if (k == 0 && !grown) { /* a new period's start */
    P->period_misses = 0;
    P->period_grown = 0;
    /* a plan that has held for 16 periods eases what the next must show */
    if (++P->good_periods >= 16) {
      P->good_periods = 0;
      if (P->reps > 2)
        P->reps--;
    }
  }
  P->cursor = (k + 1) % P->n;
  const plan_ent *e = &P->ent[k];
  size_t room = room_of(size);
  if (e->off == NO_OFF) {
    P->streak = 0; /* expected, and the path's */
    return NULL;
  }
  if (grown) { /* more bytes than its room: the path's, and a miss */
    P->grew = true;
    P->period_grown++;
    miss(pool, P);
    return NULL;
  }
  if (!bits_clear(P, e->off, room)) {
    pend_poll(pool, P);
    if (!bits_clear(P, e->off, room)) {
      miss(pool, P); /* a block lives longer than planned */
      return NULL;
    }
  }
  uintptr_t p = P->arena->base + e->off;
  plan_live *l = live_put(P, p);
  *l = (plan_live){p, room, size, seq, NULL, 0};
  bits_set(P, e->off, room, true);
  P->live_bytes += room;
  P->hits++;
  P->streak = 0;
  aa__lg_count_out(pool, room, size);
  aa__lg_plan_note(pool, EV_ALLOC, size, stream, seq);
  return (void *)p;
}

bool aa__lg_plan_owns(const aa_pool *pool, uintptr_t p) {
  const struct aa__plan *P = pool->large->plan;
  return P != NULL && P->arena != NULL && p >= P->arena->base &&
         p < P->arena->base + P->arena_bytes;
}

bool aa__lg_plan_is_arena(const aa_pool *pool, const aa__chunk *c) {
  const struct aa__plan *P = pool->large->plan;
  return P != NULL && P->arena == c;
}

/* The live block containing p, or NULL. */
static const plan_live *live_containing(const struct aa__plan *P, uintptr_t p) {
  for (size_t i = 0; i < P->live_cap; i++) {
    const plan_live *l = &P->live[i];
    if (l->p != 0 && p >= l->p && p < l->p + l->size)
      return l;
  }
  return NULL;
}

bool aa__lg_plan_block_of(const aa_pool *pool, uintptr_t p, uintptr_t *base, size_t *size) {
  const plan_live *l = live_containing(pool->large->plan, p);
  if (l == NULL)
    return false;
  *base = l->p;
  *size = l->size;
  return true;
}

int aa__lg_plan_free(aa_pool *pool, uintptr_t p, size_t size, aa_stream stream, aa_misuse *what,
                     const char **msg) {
  struct aa__plan *P = pool->large->plan;
  plan_live *l = live_find(P, p);
  if (l == NULL) {
    if (live_containing(P, p) != NULL) {
      *what = AA_MISUSE_INTERIOR;
      *msg = "pointer inside a large block, not at its start";
    } else {
      *what = AA_MISUSE_DOUBLE_FREE;
      *msg = "large block already free (in the learned plan's arena)";
    }
    return AA_EINVAL;
  }
  if (size != 0 && size != l->req) {
    *what = AA_MISUSE_BAD_SIZE;
    *msg = "size differs from the size allocated";
    return AA_EINVAL;
  }
  plan_live b = *l;
  live_del(P, l);
  aa__large *L = pool->large;
  aa__assert(L->in_use >= b.size && L->req >= b.req && P->live_bytes >= b.size);
  L->in_use -= b.size;
  L->req -= b.req;
  L->frees++;
  P->live_bytes -= b.size;
  atomic_fetch_sub_explicit(&pool->out_bytes, b.size, AA__RLX);
  aa__lg_plan_note(pool, EV_FREE, b.req, stream, b.seq);
  size_t off = b.p - P->arena->base;
  /* the room is free at once for the plan's stream when the block's work
   * is all there; else when the events recorded now complete */
  aa_stream fs = pool->has_events ? aa__rec_free_stream(b.xs, b.nxs, stream) : stream;
  bool now = !pool->has_events || (b.nxs == 0 && fs == P->stream);
  if (!now) {
    void *own = NULL, **evs = NULL;
    bool synced = false;
    uint32_t nevs = aa__stream_events(pool, b.xs, b.nxs, fs, &own, &evs, &synced);
    aa_backend *bk = pool->backend;
    bool by_query = false;
    if (!synced && own == NULL && fs != P->stream &&
        bk->ops->event_record(bk, fs, &own) != AA_OK) {
      /* no event (a stream under capture, where synchronizing is not
       * allowed either): the room waits until the stream says it is idle */
      own = NULL;
      by_query = true;
    }
    if (synced) {
      aa__event_release(pool, own);
      for (uint32_t i = 0; i < nevs; i++)
        aa__event_release(pool, evs[i]);
      free(evs);
      now = true;
    } else if (P->npend == P->pend_cap) {
      size_t cap = P->pend_cap ? P->pend_cap * 2 : 8;
      plan_pend *v = realloc(P->pend, cap * sizeof *v);
      if (v == NULL) { /* cannot wait for it: wait for all work */
        aa__event_release(pool, own);
        for (uint32_t i = 0; i < nevs; i++)
          aa__event_release(pool, evs[i]);
        free(evs);
        if (bk->ops->synchronize)
          bk->ops->synchronize(bk);
        now = true;
      } else {
        P->pend = v;
        P->pend_cap = cap;
      }
    }
    if (!now)
      P->pend[P->npend++] = (plan_pend){off, b.size, own, evs, nevs, by_query, fs};
  }
  free(b.xs);
  if (now)
    bits_set(P, off, b.size, false);
  if (P->state == AA_PLAN_DRAINING) {
    pend_poll(pool, P);
    if (P->nlive == 0 && P->npend == 0)
      plan_finish(pool, P);
  }
  return AA_OK;
}

size_t aa__lg_plan_block_size(aa_pool *pool, uintptr_t p) {
  plan_live *l = live_find(pool->large->plan, p);
  return l != NULL ? l->size : 0;
}

int aa__lg_plan_record(aa_pool *pool, uintptr_t p, aa_stream stream) {
  plan_live *l = live_find(pool->large->plan, p);
  if (l == NULL)
    return AA_EINVAL;
  if (!pool->has_events)
    return AA_OK;
  for (uint32_t i = 0; i < l->nxs; i++) {
    if (l->xs[i] == stream)
      return AA_OK;
  }
  aa_stream *v = realloc(l->xs, (size_t)(l->nxs + 1) * sizeof *v);
  if (v == NULL)
    return AA_ENOMEM;
  l->xs = v;
  l->xs[l->nxs++] = stream;
  return AA_OK;
}

/* ------------------------------------------------------------ walk, stats */

static int by_addr(const void *x, const void *y) {
  const plan_live *a = x, *b = y;
  return a->p < b->p ? -1 : a->p > b->p;
}

int aa__lg_plan_walk(const aa_pool *pool, uintptr_t lo, uintptr_t hi, aa_walk_fn fn, void *user) {
  const struct aa__plan *P = pool->large->plan;
  plan_live *v = malloc((P->nlive + 1) * sizeof *v);
  if (v == NULL) /* the arena as one block */
    return aa__walk_emit(fn, user, AA_WALK_BLOCK, AA_WALK_IN_USE | AA_WALK_PLANNED, lo,
                         (size_t)(hi - lo), 0, 0);
  size_t n = 0;
  for (size_t i = 0; i < P->live_cap; i++) {
    if (P->live[i].p != 0)
      v[n++] = P->live[i];
  }
  qsort(v, n, sizeof *v, by_addr);
  int rc = 0;
  uintptr_t at = lo;
  for (size_t i = 0; rc == 0 && i <= n; i++) {
    uintptr_t a = i < n ? v[i].p : hi, b = i < n ? v[i].p + v[i].size : hi;
    a = a < lo ? lo : a > hi ? hi
                             : a;
    b = b < lo ? lo : b > hi ? hi
                             : b;
    if (a > at)
      rc = aa__walk_emit(fn, user, AA_WALK_BLOCK, AA_WALK_PLANNED, at, (size_t)(a - at), 0, 0);
    if (rc == 0 && b > a)
      rc = aa__walk_emit(fn, user, AA_WALK_BLOCK, AA_WALK_IN_USE | AA_WALK_PLANNED, a,
                         (size_t)(b - a), v[i].req, 0);
    at = b > at ? b : at;
  }
  free(v);
  return rc;
}

uint64_t aa__lg_plan_room(aa_pool *pool, uint64_t *held) {
  struct aa__plan *P = pool->large->plan;
  *held = 0;
  if (P == NULL || P->arena == NULL)
    return 0;
  for (size_t i = 0; i < P->npend; i++) {
    const plan_pend *d = &P->pend[i];
    bool pending = aa__event_pending(pool, d->own);
    for (uint32_t k = 0; k < d->nevs && !pending; k++)
      pending = aa__event_pending(pool, d->evs[k]);
    *held += pending ? d->size : 0;
  }
  aa__assert(P->arena->size >= P->live_bytes + *held);
  return P->arena->size - P->live_bytes;
}

void aa__lg_plan_stats(const aa_pool *pool, aa__large_stats *out) {
  const struct aa__plan *P = pool->large->plan;
  if (!pool->large->plan_on && P == NULL)
    return;
  out->plan_state = P != NULL ? (uint64_t)P->state : AA_PLAN_LEARNING;
  if (P == NULL)
    return;
  out->plan_period = P->n;
  out->plan_bytes = P->arena != NULL ? P->arena_bytes : 0;
  out->plan_live = P->live_bytes;
  out->plan_hits = P->hits;
  out->plan_misses = P->misses;
  out->plans_adopted = P->adopted;
  out->plans_dropped = P->dropped;
  out->plans_refused = P->refused;
  out->plan_saved = P->arena != NULL ? P->saved : 0;
  out->plan_ns = P->plan_ns;
  out->plan_stall_ns = P->stall_ns;
  out->plans_inline = P->inline_plans;
  out->plans_stale = P->stale;
}

#if AA_DEBUG >= 3
void aa__lg_plan_check(aa_pool *pool) {
  struct aa__plan *P = pool->large->plan;
  if (P == NULL || P->arena == NULL) {
    aa__assert(P == NULL || (P->nlive == 0 && P->npend == 0 && P->live_bytes == 0));
    return;
  }
  aa__assert(P->state == AA_PLAN_ACTIVE || P->state == AA_PLAN_DRAINING);
  aa__assert(P->arena_bytes <= P->arena->size && !P->arena->free);
  /* every live block found from its home slot (the probe chains whole
   * after live_del), inside the arena, its room covered */
  uint64_t *want = calloc(P->nwords, sizeof *want);
  size_t n = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < P->live_cap; i++) {
    const plan_live *l = &P->live[i];
    if (l->p == 0)
      continue;
    aa__assert(live_find(P, l->p) == l);
    aa__assert(l->p >= P->arena->base && l->p + l->size <= P->arena->base + P->arena_bytes);
    aa__assert(l->size % PLAN_UNIT == 0 && l->req <= l->size);
    n++;
    bytes += l->size;
    for (size_t u = (l->p - P->arena->base) / PLAN_UNIT; want && u < (l->p + l->size - P->arena->base) / PLAN_UNIT; u++) {
      aa__assert((want[u / 64] >> (u % 64) & 1) == 0); /* no two rooms overlap */
      want[u / 64] |= (uint64_t)1 << (u % 64);
    }
  }
  aa__assert(n == P->nlive && bytes == P->live_bytes && P->nlive < P->live_cap);
  for (size_t i = 0; i < P->npend; i++) {
    const plan_pend *d = &P->pend[i];
    for (size_t u = d->off / PLAN_UNIT; want && u < (d->off + d->size) / PLAN_UNIT; u++) {
      aa__assert((want[u / 64] >> (u % 64) & 1) == 0);
      want[u / 64] |= (uint64_t)1 << (u % 64);
    }
  }
  for (size_t w = 0; want && w < P->nwords; w++)
    aa__assert(want[w] == P->bits[w]); /* the bitmap: the live and waiting rooms exactly */
  free(want);
}
#endif

void aa__lg_plan_destroy(aa_pool *pool) {
  struct aa__plan *P = pool->large->plan;
  if (P == NULL)
    return;
  planner_stop(P->thr); /* a planning under way is cancelled, its job freed */
  for (size_t i = 0; i < P->live_cap; i++)
    free(P->live[i].xs);
  for (size_t i = 0; i < P->npend; i++) {
    aa__event_release(pool, P->pend[i].own);
    for (uint32_t k = 0; k < P->pend[i].nevs; k++)
      aa__event_release(pool, P->pend[i].evs[k]);
    free(P->pend[i].evs);
  }
  free(P->pend);
  free(P->live);
  free(P->bits);
  free(P->ent);
  free(P->win);
  free(P->rtok);
  free(P->z);
  free(P);
  pool->large->plan = NULL;
  pool->large->arena = NULL;
  pool->large->yield = NULL;
}
