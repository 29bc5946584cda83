/*
 * bench_plan.c — `adaptalloc-bench plan TRACE.csv ...`: what the learned
 * plan (aa_pool_config.large_plan) costs the allocating thread. Each trace
 * (RMM-format CSV, as bench/replay/holes_trace.py and train_trace.py write
 * them) is replayed on one thread through a host pool (expandable, no cache
 * bound, the plan on), once with the plan made on the allocating thread
 * (AA_LARGE_PLAN_SYNC, as the replay does) and once on the pool's planner
 * thread (large_plan 1), the trace's pace kept (the next call waits for
 * the trace's own gap between events, capped at 1 ms, or --pace-us, so
 * that a plan made in the background is ready while the trace lasts, as a
 * training loop's later steps would give it time). Per run: the longest
 * single aa_alloc/aa_free call, plans adopted, refused, stale and made
 * inline, each planning's time (from the pool's stats after every event)
 * and the longest stall the pool counted (large_plan_stall_max_ns). The
 * longest call leaves out the first (the window's allocation, the first
 * map) and includes the period's start where a plan is adopted (the path's
 * cache given back, the arena taken: backend calls, a few ms on the host).
 *
 * Entry point: bench_plan_main.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adaptalloc/core.h"
#include "bench.h"

typedef struct tev {
  uint64_t ptr, size, stream, t_ns;
  char op;
} tev;

/* The trace's allocate and free lines; NULL on error. */
static tev *read_trace(const char *path, size_t *n) {
  FILE *fp = fopen(path, "r");
  if (fp == NULL)
    return NULL;
  size_t cap = 4096, k = 0;
  tev *v = malloc(cap * sizeof *v);
  char line[512];
  while (v != NULL && fgets(line, sizeof line, fp) != NULL) {
    unsigned long long th, ptr, size, st;
    double t;
    char act[32];
    if (sscanf(line, "%llu,%lf,%31[^,],%llx,%llu,%llx", &th, &t, act, &ptr, &size, &st) != 6)
      continue; /* the header */
    char op = strcmp(act, "allocate") == 0                                 ? 'a'
              : strcmp(act, "free") == 0 || strcmp(act, "deallocate") == 0 ? 'f'
                                                                           : 0;
    if (op == 0)
      continue;
    if (k == cap) {
      tev *w = realloc(v, 2 * cap * sizeof *v);
      if (w == NULL) {
        free(v);
        v = NULL;
        break;
      }
      v = w;
      cap *= 2;
    }
    v[k++] = (tev){ptr, size, st, (uint64_t)(t * 1e9), op};
  }
  fclose(fp);
  *n = k;
  return v;
}

/* The trace's pointers to the pool's (open addressing). */
typedef struct pmap {
  uint64_t *key;
  void **val;
  size_t mask;
} pmap;

static size_t pm_slot(const pmap *m, uint64_t k) {
  size_t i = (size_t)(k * 0x9E3779B97F4A7C15ull >> 17) & m->mask;
  while (m->key[i] != 0 && m->key[i] != k)
    i = (i + 1) & m->mask;
  return i;
}

/* Deletion by backward shift. */
static void pm_del(pmap *m, size_t i) {
  m->key[i] = 0;
  for (size_t j = (i + 1) & m->mask; m->key[j] != 0; j = (j + 1) & m->mask) {
    uint64_t k = m->key[j];
    void *v = m->val[j];
    m->key[j] = 0;
    size_t h = pm_slot(m, k);
    m->key[h] = k;
    m->val[h] = v;
  }
}

typedef struct run_out {
  uint64_t max_call_ns, calls, adopted, refused, stale, inl, stall_ns;
  uint64_t plan_ns[64];
  int nplans;
} run_out;

static int run_one(const tev *ev, size_t n, int plan, uint64_t pace_ns, run_out *o) {
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  pmap m = {0};
  int rc = -1;
  memset(o, 0, sizeof *o);
  size_t cap = 1;
  while (cap < 4 * n + 16)
    cap *= 2;
  m.key = calloc(cap, sizeof *m.key);
  m.val = calloc(cap, sizeof *m.val);
  m.mask = cap - 1;
  if (m.key == NULL || m.val == NULL || aa_backend_host_new(&b) != AA_OK)
    goto out;
  aa_pool_config cfg;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.large_mode = AA_LARGE_EXPANDABLE;
  cfg.large_cache_bytes = 0;
  cfg.large_plan = plan;
  if (aa_pool_new(&cfg, &pool) != AA_OK)
    goto out;
  uint64_t last_ns = 0, done = 0;
  for (size_t i = 0; i < n; i++) {
    const tev *e = &ev[i];
    if (i > 0) {
      uint64_t gap = e->t_ns > ev[i - 1].t_ns ? e->t_ns - ev[i - 1].t_ns : 0;
      gap = gap < 1000000 ? gap : 1000000;
      gap = gap > pace_ns ? gap : pace_ns;
      struct timespec ts = {0, (long)gap};
      if (gap > 0)
        nanosleep(&ts, NULL);
    }
    aa_stream s = (aa_stream)(uintptr_t)e->stream;
    uint64_t t0 = aa_now_ns(), d;
    if (e->op == 'a') {
      void *p = aa_alloc(pool, (size_t)e->size, s);
      d = aa_now_ns() - t0;
      if (p == NULL) {
        fprintf(stderr, "adaptalloc-bench plan: allocation %zu failed\n", i);
        goto out;
      }
      size_t k = pm_slot(&m, e->ptr + 1);
      m.key[k] = e->ptr + 1;
      m.val[k] = p;
    } else {
      size_t k = pm_slot(&m, e->ptr + 1);
      if (m.key[k] == 0)
        continue;
      void *p = m.val[k];
      pm_del(&m, k);
      t0 = aa_now_ns();
      (void)aa_free(pool, p, 0, s);
      d = aa_now_ns() - t0;
    }
    o->calls++;
    if (i > 0) /* the first: the window's allocation and the first map */
      o->max_call_ns = d > o->max_call_ns ? d : o->max_call_ns;
    aa_pool_stats st;
    if (aa_pool_stats_get_opts(pool, &st, AA_STATS_NO_SIZES) != AA_OK)
      goto out;
    uint64_t plans = st.large_plans_adopted + st.large_plans_refused + st.large_plans_stale;
    if (plans != done || st.large_plan_ns != last_ns) {
      if (o->nplans < 64 && st.large_plan_ns != 0)
        o->plan_ns[o->nplans++] = st.large_plan_ns;
      done = plans;
      last_ns = st.large_plan_ns;
    }
    o->adopted = st.large_plans_adopted;
    o->refused = st.large_plans_refused;
    o->stale = st.large_plans_stale;
    o->inl = st.large_plans_inline;
    o->stall_ns = st.large_plan_stall_max_ns;
  }
  rc = 0;
out:
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
  free(m.key);
  free(m.val);
  return rc;
}

int bench_plan_main(int argc, char **argv) {
  uint64_t pace_ns = 0;
  if (argc >= 3 && strcmp(argv[1], "--pace-us") == 0) {
    pace_ns = strtoull(argv[2], NULL, 10) * 1000;
    argc -= 2;
    argv += 2;
  }
  if (argc < 2 || strcmp(argv[1], "--help") == 0) {
    printf("usage: adaptalloc-bench plan [--pace-us N] TRACE.csv ...\n"
           "  replays each RMM-format trace on a host pool with the learned plan made\n"
           "  on the allocating thread (sync) and on the pool's planner thread (bg):\n"
           "  the longest aa_alloc/aa_free call, plans, each planning's time, the\n"
           "  longest stall the pool counted (ms). --pace-us: the calls at least N us\n"
           "  apart (default: the trace's own gaps, at most 1 ms), so that a plan made\n"
           "  in the background is ready while the trace lasts\n");
    return argc < 2 ? 2 : 0;
  }
  printf("| trace | planned on | events | longest call ms | stall max ms | plans "
         "adopted/refused/stale/inline | planning ms |\n|---|---|---|---|---|---|---|\n");
  for (int a = 1; a < argc; a++) {
    size_t n = 0;
    tev *ev = read_trace(argv[a], &n);
    if (ev == NULL) {
      fprintf(stderr, "adaptalloc-bench plan: cannot read %s\n", argv[a]);
      return 1;
    }
    const char *name = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
    for (int mode = 0; mode < 2; mode++) {
      run_out o;
      if (run_one(ev, n, mode == 0 ? AA_LARGE_PLAN_SYNC : 1, pace_ns, &o) != 0) {
        free(ev);
        return 1;
      }
      char pl[64 * 12] = "";
      size_t at = 0;
      for (int i = 0; i < o.nplans && at + 16 < sizeof pl; i++)
        at += (size_t)snprintf(pl + at, sizeof pl - at, "%s%.1f", i ? " " : "",
                               (double)o.plan_ns[i] / 1e6);
      printf("| %s | %s | %" PRIu64 " | %.3f | %.3f | %" PRIu64 "/%" PRIu64 "/%" PRIu64
             "/%" PRIu64 " | %s |\n",
             name, mode == 0 ? "allocating thread" : "planner thread", o.calls,
             (double)o.max_call_ns / 1e6, (double)o.stall_ns / 1e6, o.adopted, o.refused,
             o.stale, o.inl, pl);
      fflush(stdout);
    }
    free(ev);
  }
  return 0;
}
