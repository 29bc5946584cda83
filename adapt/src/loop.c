/*
 * loop.c — the policy loop thread (aa_adapt_loop).
 *
 * Every params.interval_ms, for each registered pool: take a stats snapshot,
 * read the class table, run aa_adapt_decide against the previous snapshot,
 * apply each decision through the core's public API (aa_pool_class_add,
 * aa_pool_class_retire, aa_pool_class_set, aa_pool_trim), record the result in
 * the decision and hand it to the callback. aa_adapt_loop_step does the same
 * in the caller's thread. One mutex guards the loop and serialises steps; the
 * thread waits on a condition variable (CLOCK_MONOTONIC) so stop is prompt.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adaptalloc/adapt.h"

typedef struct loop_pool {
  aa_pool *pool;
  aa_pool_stats *prev;
  aa_pool_stats *cur;
  aa_adapt_state *st;
  bool have_prev;
} loop_pool;

struct aa_adapt_loop {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  aa_adapt_params params;
  aa_adapt_decision_fn on_decision;
  void *user;
  bool dry_run;
  loop_pool pools[AA_ADAPT_LOOP_MAX_POOLS];
  size_t n_pools;
  aa_adapt_counters counters;
  pthread_t thread;
  bool running;
  bool stopping;
  aa_class_spec specs[AA_MAX_CLASSES];
  aa_adapt_decision decisions[AA_ADAPT_MAX_DECISIONS];
};

void aa_adapt_loop_config_init(aa_adapt_loop_config *cfg) {
  if (cfg == NULL)
    return;
  memset(cfg, 0, sizeof *cfg);
  cfg->version = AA_ADAPT_LOOP_CONFIG_VERSION;
  aa_adapt_params_default(&cfg->params);
}

int aa_adapt_loop_new(const aa_adapt_loop_config *cfg, aa_adapt_loop **out) {
  aa_adapt_loop *l = NULL;
  pthread_condattr_t ca;
  int rc = AA_OK;
  bool mu_ok = false, ca_ok = false;

  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  if (cfg == NULL || cfg->version != AA_ADAPT_LOOP_CONFIG_VERSION ||
      cfg->params.interval_ms == 0)
    return AA_EINVAL;
  l = calloc(1, sizeof *l);
  if (l == NULL)
    return AA_ENOMEM;
  if (pthread_mutex_init(&l->mu, NULL) != 0) {
    rc = AA_ENOMEM;
    goto fail;
  }
  mu_ok = true;
  if (pthread_condattr_init(&ca) != 0) {
    rc = AA_ENOMEM;
    goto fail;
  }
  ca_ok = true;
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  if (pthread_cond_init(&l->cv, &ca) != 0) {
    rc = AA_ENOMEM;
    goto fail;
  }
  pthread_condattr_destroy(&ca);
  l->params = cfg->params;
  l->on_decision = cfg->on_decision;
  l->user = cfg->user;
  l->dry_run = cfg->dry_run;
  *out = l;
  return AA_OK;
fail:
  if (ca_ok)
    pthread_condattr_destroy(&ca);
  if (mu_ok)
    pthread_mutex_destroy(&l->mu);
  free(l);
  return rc;
}

static void pool_slot_free(loop_pool *lp) {
  free(lp->prev);
  free(lp->cur);
  free(lp->st);
  memset(lp, 0, sizeof *lp);
}

static int find_pool(const aa_adapt_loop *l, const aa_pool *pool) {
  for (size_t i = 0; i < l->n_pools; i++) {
    if (l->pools[i].pool == pool)
      return (int)i;
  }
  return -1;
}

int aa_adapt_loop_add_pool(aa_adapt_loop *loop, aa_pool *pool) {
  loop_pool lp;
  int rc = AA_OK;

  if (loop == NULL || pool == NULL)
    return AA_EINVAL;
  memset(&lp, 0, sizeof lp);
  lp.pool = pool;
  lp.prev = calloc(1, sizeof *lp.prev);
  lp.cur = calloc(1, sizeof *lp.cur);
  lp.st = calloc(1, sizeof *lp.st);
  if (lp.prev == NULL || lp.cur == NULL || lp.st == NULL) {
    pool_slot_free(&lp);
    return AA_ENOMEM;
  }
  aa_adapt_state_init(lp.st);
  pthread_mutex_lock(&loop->mu);
  if (find_pool(loop, pool) >= 0) {
    rc = AA_EEXIST;
  } else if (loop->n_pools >= AA_ADAPT_LOOP_MAX_POOLS) {
    rc = AA_ELIMIT;
  } else {
    lp.have_prev = aa_pool_stats_get(pool, lp.prev) == AA_OK;
    loop->pools[loop->n_pools++] = lp;
  }
  pthread_mutex_unlock(&loop->mu);
  if (rc != AA_OK)
    pool_slot_free(&lp);
  return rc;
}

int aa_adapt_loop_remove_pool(aa_adapt_loop *loop, aa_pool *pool) {
  int at;
  if (loop == NULL || pool == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(&loop->mu);
  at = find_pool(loop, pool);
  if (at >= 0) {
    pool_slot_free(&loop->pools[at]);
    memmove(&loop->pools[at], &loop->pools[at + 1],
            (loop->n_pools - (size_t)at - 1) * sizeof loop->pools[0]);
    loop->n_pools--;
  }
  pthread_mutex_unlock(&loop->mu);
  return at >= 0 ? AA_OK : AA_ENOENT;
}

int aa_adapt_loop_set_params(aa_adapt_loop *loop, const aa_adapt_params *params) {
  if (loop == NULL || params == NULL || params->interval_ms == 0)
    return AA_EINVAL;
  pthread_mutex_lock(&loop->mu);
  loop->params = *params;
  pthread_cond_broadcast(&loop->cv); /* re-arm the wait with the new interval */
  pthread_mutex_unlock(&loop->mu);
  return AA_OK;
}

/* Applies one decision to the pool; returns the core's result. */
static int apply(aa_adapt_loop *l, aa_pool *pool, aa_adapt_decision *d,
                 const aa_class_spec *specs, size_t n) {
  aa_class_spec spec;
  int rc = AA_OK;
  switch (d->kind) {
  case AA_ADAPT_ADD_CLASS:
    spec.block_size = (size_t)d->block_size;
    spec.cache_limit = 0;
    spec.prefill = 0;
    rc = aa_pool_class_add(pool, &spec);
    if (rc == AA_OK)
      l->counters.classes_added++;
    break;
  case AA_ADAPT_RETIRE_CLASS:
    rc = aa_pool_class_retire(pool, (size_t)d->block_size);
    if (rc == AA_OK)
      l->counters.classes_retired++;
    break;
  case AA_ADAPT_GROW_OR_PREFILL:
    rc = AA_ENOENT;
    for (size_t i = 0; i < n; i++) {
      if (specs[i].block_size == d->block_size) {
        spec = specs[i];
        spec.prefill = (uint32_t)d->amount;
        rc = aa_pool_class_set(pool, &spec);
        break;
      }
    }
    if (rc == AA_OK)
      l->counters.grows++;
    break;
  case AA_ADAPT_TRIM:
    d->released = aa_pool_trim(pool, (size_t)d->amount);
    l->counters.trims++;
    l->counters.bytes_trimmed += d->released;
    break;
  default:
    rc = AA_EINVAL;
    break;
  }
  return rc;
}

/* One step over every pool; l->mu held. Returns decisions made. */
static int step_locked(aa_adapt_loop *l) {
  int total = 0;
  for (size_t i = 0; i < l->n_pools; i++) {
    loop_pool *lp = &l->pools[i];
    aa_pool_stats *tmp;
    size_t n = 0, nd;
    if (aa_pool_stats_get(lp->pool, lp->cur) != AA_OK)
      continue;
    aa_pool_window_reset(lp->pool); /* the next interval's peak starts now */
    if (l->params.enabled &&
        aa_pool_classes(lp->pool, l->specs, AA_MAX_CLASSES, &n, NULL) == AA_OK &&
        n > 0) {
      if (n > AA_MAX_CLASSES)
        n = AA_MAX_CLASSES;
      nd = aa_adapt_decide(&l->params, lp->st, lp->have_prev ? lp->prev : NULL,
                           lp->cur, l->specs, n, l->decisions,
                           AA_ADAPT_MAX_DECISIONS);
      for (size_t k = 0; k < nd; k++) {
        aa_adapt_decision *d = &l->decisions[k];
        if (!l->dry_run) {
          d->result = apply(l, lp->pool, d, l->specs, n);
          if (d->result != AA_OK) {
            l->counters.apply_failures++;
            aa_adapt_state_note_failure(lp->st, d);
          }
        }
        if (l->on_decision != NULL)
          l->on_decision(l->user, lp->pool, d);
      }
      l->counters.decisions += nd;
      total += (int)nd;
    }
    tmp = lp->prev;
    lp->prev = lp->cur;
    lp->cur = tmp;
    lp->have_prev = true;
  }
  l->counters.steps++;
  return total;
}

int aa_adapt_loop_step(aa_adapt_loop *loop) {
  int n;
  if (loop == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(&loop->mu);
  n = step_locked(loop);
  pthread_mutex_unlock(&loop->mu);
  return n;
}

static void deadline_after_ms(struct timespec *ts, uint32_t ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static void *loop_main(void *arg) {
  aa_adapt_loop *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stopping) {
    struct timespec dl;
    uint32_t armed = l->params.interval_ms;
    int w = 0;
    deadline_after_ms(&dl, armed);
    /* Wait out the interval; a new interval (set_params) re-arms. */
    while (!l->stopping && w != ETIMEDOUT && l->params.interval_ms == armed)
      w = pthread_cond_timedwait(&l->cv, &l->mu, &dl);
    if (l->stopping)
      break;
    if (w == ETIMEDOUT)
      step_locked(l);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

int aa_adapt_loop_start(aa_adapt_loop *loop) {
  int rc = AA_OK;
  if (loop == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(&loop->mu);
  if (loop->running) {
    rc = AA_EBUSY;
  } else {
    loop->stopping = false;
    if (pthread_create(&loop->thread, NULL, loop_main, loop) != 0)
      rc = AA_ENOMEM;
    else
      loop->running = true;
  }
  pthread_mutex_unlock(&loop->mu);
  return rc;
}

void aa_adapt_loop_stop(aa_adapt_loop *loop) {
  pthread_t t;
  if (loop == NULL)
    return;
  pthread_mutex_lock(&loop->mu);
  if (!loop->running || loop->stopping) { /* not running, or another stop */
    pthread_mutex_unlock(&loop->mu);
    return;
  }
  loop->stopping = true;
  t = loop->thread;
  pthread_cond_broadcast(&loop->cv);
  pthread_mutex_unlock(&loop->mu);
  pthread_join(t, NULL);
  pthread_mutex_lock(&loop->mu);
  loop->running = false;
  loop->stopping = false;
  pthread_mutex_unlock(&loop->mu);
}

void aa_adapt_loop_counters(aa_adapt_loop *loop, aa_adapt_counters *out) {
  if (out == NULL)
    return;
  memset(out, 0, sizeof *out);
  if (loop == NULL)
    return;
  pthread_mutex_lock(&loop->mu);
  *out = loop->counters;
  pthread_mutex_unlock(&loop->mu);
}

void aa_adapt_loop_destroy(aa_adapt_loop *loop) {
  if (loop == NULL)
    return;
  aa_adapt_loop_stop(loop);
  for (size_t i = 0; i < loop->n_pools; i++)
    pool_slot_free(&loop->pools[i]);
  pthread_cond_destroy(&loop->cv);
  pthread_mutex_destroy(&loop->mu);
  free(loop);
}
