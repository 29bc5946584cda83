/*
 * loop.c — the policy loop thread (aa_adapt_loop).
 *
 * Every params.interval_ms, for each registered pool: take a stats snapshot,
 * read the class table, run aa_adapt_decide against the previous snapshot,
 * verify the table changes by replay, build the step's proposal (the table
 * its adds, retires and grows leave, and a trim) and hand it whole to the
 * committer (the runtime's one transactional path, or
 * aa_adapt_proposal_commit), record the result in each decision and hand
 * it to the callback. aa_adapt_loop_step does the same
 * in the caller's thread. One mutex guards the loop and serialises steps; the
 * thread waits on a condition variable (CLOCK_MONOTONIC) so stop is prompt.
 */
#include <errno.h>
#include <stdio.h>
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
  uint64_t steps;                           /* steps of this pool */
  aa_adapt_audit audit[AA_ADAPT_AUDIT_MAX]; /* ring, oldest at audit_at */
  size_t audit_n, audit_at;
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
  aa_adapt_commit_fn commit; /* the proposal's committer */
  aa_adapt_verify_fn verify; /* NULL: no verification */
  void *verify_user;
  aa_adapt_proposal proposal; /* the step's, for one pool at a time */
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
  l->commit = cfg->commit != NULL ? cfg->commit : aa_adapt_proposal_commit;
  l->verify = cfg->verify;
  l->verify_user = cfg->verify_user;
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

int aa_adapt_proposal_commit(void *user, aa_adapt_proposal *p) {
  aa_class_txn *txn = NULL;
  int rc = AA_OK;
  (void)user;
  if (p == NULL || p->pool == NULL)
    return AA_EINVAL;
  if (p->n_classes > 0) {
    rc = aa_pool_classes_prepare(p->pool, p->classes, p->n_classes, &txn);
    if (rc == AA_OK)
      aa_pool_classes_commit(txn);
  }
  if (p->trim)
    p->released = aa_pool_trim(p->pool, p->trim_keep);
  return rc;
}

static bool proposes(const aa_adapt_decision *d) { return d->result == AA_OK; }

/* The step's proposal for lp from the table in force (l->specs, n) and the
 * decisions still standing: retired classes out, added ones in (cache
 * limit and prefill 0), grown ones with their new prefill. A grow of a
 * class that is not there fails here (AA_ENOENT). n_classes stays 0 when
 * the table does not change. */
static void build_proposal(aa_adapt_loop *l, loop_pool *lp, size_t n, size_t nd) {
  aa_adapt_proposal *p = &l->proposal;
  bool table = false;
  size_t m = 0;

  memset(p, 0, sizeof *p);
  p->pool = lp->pool;
  p->decisions = l->decisions;
  p->n_decisions = nd;
  for (size_t i = 0; i < n; i++) {
    bool retired = false;
    for (size_t k = 0; k < nd; k++)
      retired = retired || (proposes(&l->decisions[k]) &&
                            l->decisions[k].kind == AA_ADAPT_RETIRE_CLASS &&
                            l->decisions[k].block_size == l->specs[i].block_size);
    if (retired)
      table = true;
    else
      p->classes[m++] = l->specs[i];
  }
  for (size_t k = 0; k < nd; k++) {
    aa_adapt_decision *d = &l->decisions[k];
    size_t pos = 0;
    if (!proposes(d))
      continue;
    if (d->kind == AA_ADAPT_TRIM) {
      p->trim = true;
      p->trim_keep = (size_t)d->amount;
      continue;
    }
    if (d->kind != AA_ADAPT_ADD_CLASS && d->kind != AA_ADAPT_GROW_OR_PREFILL)
      continue;
    while (pos < m && p->classes[pos].block_size < d->block_size)
      pos++;
    if (d->kind == AA_ADAPT_GROW_OR_PREFILL) {
      if (pos < m && p->classes[pos].block_size == d->block_size) {
        p->classes[pos].prefill = (uint32_t)d->amount;
        table = true;
      } else {
        d->result = AA_ENOENT; /* no such class to grow */
      }
      continue;
    }
    if (pos < m && p->classes[pos].block_size == d->block_size)
      continue; /* there already */
    if (m >= AA_MAX_CLASSES) {
      d->result = AA_ELIMIT;
      continue;
    }
    memmove(&p->classes[pos + 1], &p->classes[pos], (m - pos) * sizeof p->classes[0]);
    memset(&p->classes[pos], 0, sizeof p->classes[0]);
    p->classes[pos].block_size = (size_t)d->block_size;
    m++;
    table = true;
  }
  p->n_classes = table ? m : 0;
}

/* Commits the step's proposal for lp and gives each decision behind it its
 * result, counted. */
static void commit_step(aa_adapt_loop *l, loop_pool *lp, size_t n, size_t nd) {
  aa_adapt_proposal *p = &l->proposal;
  bool any = false;
  int rc;

  build_proposal(l, lp, n, nd);
  for (size_t k = 0; k < nd; k++)
    any = any || proposes(&l->decisions[k]);
  if (!any)
    return;
  rc = l->commit(l->user, p);
  for (size_t k = 0; k < nd; k++) {
    aa_adapt_decision *d = &l->decisions[k];
    if (!proposes(d))
      continue;
    if (d->kind == AA_ADAPT_TRIM) {
      d->released = p->released;
      l->counters.trims++;
      l->counters.bytes_trimmed += d->released;
      continue;
    }
    d->result = rc;
    if (rc != AA_OK)
      continue;
    if (d->kind == AA_ADAPT_ADD_CLASS)
      l->counters.classes_added++;
    else if (d->kind == AA_ADAPT_RETIRE_CLASS)
      l->counters.classes_retired++;
    else if (d->kind == AA_ADAPT_GROW_OR_PREFILL)
      l->counters.grows++;
  }
}

static bool table_change(const aa_adapt_decision *d) {
  return d->kind == AA_ADAPT_ADD_CLASS || d->kind == AA_ADAPT_RETIRE_CLASS;
}

/* The table after the step's adds and retires, ascending. */
static size_t candidate_table(const aa_class_spec *specs, size_t n, const aa_adapt_decision *d,
                              size_t nd, aa_class_spec *out) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    bool retired = false;
    for (size_t k = 0; k < nd; k++)
      retired = retired ||
                (d[k].kind == AA_ADAPT_RETIRE_CLASS && d[k].block_size == specs[i].block_size);
    if (!retired)
      out[m++] = specs[i];
  }
  for (size_t k = 0; k < nd; k++) {
    size_t pos = 0;
    if (d[k].kind != AA_ADAPT_ADD_CLASS || m >= AA_MAX_CLASSES)
      continue;
    while (pos < m && out[pos].block_size < d[k].block_size)
      pos++;
    if (pos < m && out[pos].block_size == d[k].block_size)
      continue;
    memmove(&out[pos + 1], &out[pos], (m - pos) * sizeof out[0]);
    memset(&out[pos], 0, sizeof out[0]);
    out[pos].block_size = (size_t)d[k].block_size;
    m++;
  }
  return m;
}

/* Replays the interval under the table before and after the step's adds
 * and retires; marks them rejected (AA_EAGAIN, and in the state as a
 * failure: an add goes on the re-add cooldown) when the objective, peak
 * reserved then backend calls, does not improve. */
static void verify_changes(aa_adapt_loop *l, loop_pool *lp, size_t n, size_t nd) {
  aa_class_spec cand[AA_MAX_CLASSES];
  aa_adapt_prediction rb, rc;
  size_t nc, k;
  uint64_t before, after, freed = 0, stranded = 0;
  bool any = false, better;
  for (k = 0; k < nd; k++)
    any = any || table_change(&l->decisions[k]);
  if (!any || l->verify == NULL)
    return;
  nc = candidate_table(l->specs, n, l->decisions, nd, cand);
  if (nc == 0 || l->verify(l->verify_user, lp->have_prev ? lp->prev : NULL, lp->cur, l->specs,
                           n, cand, nc, &rb, &rc) != AA_OK)
    return; /* nothing to replay: the rules alone decide */
  /* A retired class gives back the slabs it holds now, which a replay that
   * starts empty does not see. */
  for (k = 0; k < nd; k++) {
    const aa_adapt_decision *d = &l->decisions[k];
    if (d->kind != AA_ADAPT_RETIRE_CLASS)
      continue;
    for (uint32_t i = 0; i < lp->cur->class_count && i < AA_MAX_CLASSES; i++)
      if (lp->cur->classes[i].block_size == d->block_size && !lp->cur->classes[i].retiring)
        freed += lp->cur->classes[i].bytes_reserved;
  }
  /* An added class takes its sizes from the class that serves them now;
   * that class's free blocks stay reserved, and the replay, which starts
   * from an empty pool, does not see them: they count against the
   * candidate. Left out, an add the replay favoured (102 -> 96 MiB) raised
   * the pool's peak by 4 MiB on the demo's workload with classes up to
   * 1 MiB (tests/test_adapt_demo.c). */
  uint64_t counted[AA_MAX_CLASSES]; /* serving classes already counted */
  size_t ncounted = 0;
  for (k = 0; k < nd; k++) {
    const aa_adapt_decision *d = &l->decisions[k];
    uint64_t serving = 0;
    bool seen = false;
    if (d->kind != AA_ADAPT_ADD_CLASS)
      continue;
    for (size_t i = 0; i < n && serving == 0; i++)
      if (l->specs[i].block_size > d->block_size)
        serving = l->specs[i].block_size;
    /* two adds served by one class strand its free blocks once */
    for (size_t i = 0; i < ncounted && !seen; i++)
      seen = counted[i] == serving;
    if (serving == 0 || seen || ncounted == AA_MAX_CLASSES)
      continue;
    counted[ncounted++] = serving;
    for (uint32_t i = 0; i < lp->cur->class_count && i < AA_MAX_CLASSES; i++)
      if (lp->cur->classes[i].block_size == serving && !lp->cur->classes[i].retiring)
        stranded += lp->cur->classes[i].bytes_reserved - lp->cur->classes[i].bytes_in_use;
  }
  before = rb.peak_reserved;
  after = rc.peak_reserved + stranded > freed ? rc.peak_reserved + stranded - freed : 0;
  better = after < before || (after == before && rc.backend_calls < rb.backend_calls);
  for (k = 0; k < nd; k++) {
    aa_adapt_decision *d = &l->decisions[k];
    if (!table_change(d))
      continue;
    d->verified = 1;
    d->predicted_reserved_before = before;
    d->predicted_reserved_after = after;
    d->predicted_calls_before = rb.backend_calls;
    d->predicted_calls_after = rc.backend_calls;
    size_t len = strlen(d->reason);
    if (len + 1 < sizeof d->reason)
      snprintf(d->reason + len, sizeof d->reason - len,
               "; replay of the interval: peak reserved %.1f -> %.1f MiB, backend calls "
               "%llu -> %llu%s",
               (double)before / 1048576.0, (double)after / 1048576.0,
               (unsigned long long)rb.backend_calls, (unsigned long long)rc.backend_calls,
               better ? "" : ": no gain, not applied");
    if (!better) {
      d->result = AA_EAGAIN;
      aa_adapt_state_note_failure(lp->st, d);
      l->counters.rejected++;
    }
  }
}

/* Enters a table change or a trim that gave memory back in the pool's
 * audit; its reserved bytes now are the "before" of the measurement (a trim
 * has not yet been applied to lp->cur, taken at the step's start). A trim
 * that gave nothing back (a pool held near its limit asks for one every
 * trim_cooldown steps) is not entered: the ring would soon hold only those
 * and lose the table changes it exists for. */
/* The bytes the small classes' live blocks asked for. */
static uint64_t small_requested(const aa_pool_stats *st) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < st->class_count && i < AA_MAX_CLASSES; i++)
    n += st->classes[i].bytes_requested;
  return n;
}

static void audit_note(loop_pool *lp, const aa_adapt_decision *d) {
  aa_adapt_audit *a;
  size_t slot;
  if (d->kind == AA_ADAPT_TRIM ? d->result == AA_OK && d->released == 0 : !table_change(d))
    return;
  if (lp->audit_n < AA_ADAPT_AUDIT_MAX) {
    slot = (lp->audit_at + lp->audit_n++) % AA_ADAPT_AUDIT_MAX;
  } else {
    slot = lp->audit_at;
    lp->audit_at = (lp->audit_at + 1) % AA_ADAPT_AUDIT_MAX;
  }
  a = &lp->audit[slot];
  memset(a, 0, sizeof *a);
  a->step = lp->steps;
  a->kind = d->kind;
  a->result = d->result;
  a->block_size = d->block_size;
  a->verified = d->verified;
  a->predicted_reserved_before = d->predicted_reserved_before;
  a->predicted_reserved_after = d->predicted_reserved_after;
  a->predicted_calls_before = d->predicted_calls_before;
  a->predicted_calls_after = d->predicted_calls_after;
  a->measured_reserved_before = lp->cur->bytes_reserved;
  a->measured_small_before = lp->cur->bytes_reserved - lp->cur->large_bytes_reserved;
  a->measured_small_requested_before = small_requested(lp->cur);
  a->released = d->kind == AA_ADAPT_TRIM ? d->released : 0;
}

/* The measured effect, AA_ADAPT_MEASURE_STEPS steps after each applied
 * change: the pool's reserved bytes then. */
static void audit_measure(loop_pool *lp) {
  for (size_t i = 0; i < lp->audit_n; i++) {
    aa_adapt_audit *a = &lp->audit[(lp->audit_at + i) % AA_ADAPT_AUDIT_MAX];
    if (a->result == AA_OK && !a->measured && lp->steps - a->step >= AA_ADAPT_MEASURE_STEPS) {
      a->measured = 1;
      a->measured_reserved_after = lp->cur->bytes_reserved;
      a->measured_small_after = lp->cur->bytes_reserved - lp->cur->large_bytes_reserved;
      a->measured_small_requested_after = small_requested(lp->cur);
    }
  }
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
    lp->steps++;
    audit_measure(lp);
    if (l->params.enabled &&
        aa_pool_classes(lp->pool, l->specs, AA_MAX_CLASSES, &n, NULL) == AA_OK &&
        n > 0) {
      if (n > AA_MAX_CLASSES)
        n = AA_MAX_CLASSES;
      nd = aa_adapt_decide(&l->params, lp->st, lp->have_prev ? lp->prev : NULL,
                           lp->cur, l->specs, n, l->decisions,
                           AA_ADAPT_MAX_DECISIONS);
      if (!l->dry_run) {
        bool stood[AA_ADAPT_MAX_DECISIONS];
        verify_changes(l, lp, n, nd);
        for (size_t k = 0; k < nd; k++)
          stood[k] = l->decisions[k].result == AA_OK;
        commit_step(l, lp, n, nd);
        for (size_t k = 0; k < nd; k++) {
          if (stood[k] && l->decisions[k].result != AA_OK) {
            l->counters.apply_failures++;
            aa_adapt_state_note_failure(lp->st, &l->decisions[k]);
          }
          aa_adapt_state_note_trim(lp->st, &l->decisions[k]);
        }
      }
      for (size_t k = 0; k < nd; k++) {
        aa_adapt_decision *d = &l->decisions[k];
        if (!l->dry_run)
          audit_note(lp, d);
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

int aa_adapt_loop_audit(aa_adapt_loop *loop, const aa_pool *pool, aa_adapt_audit *out,
                        size_t cap, size_t *n) {
  int at;
  if (n != NULL)
    *n = 0;
  if (loop == NULL || pool == NULL || (out == NULL && cap > 0) || n == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(&loop->mu);
  at = find_pool(loop, pool);
  if (at >= 0) {
    const loop_pool *lp = &loop->pools[at];
    for (size_t i = 0; i < lp->audit_n && i < cap; i++)
      out[i] = lp->audit[(lp->audit_at + i) % AA_ADAPT_AUDIT_MAX];
    *n = lp->audit_n < cap ? lp->audit_n : cap;
  }
  pthread_mutex_unlock(&loop->mu);
  return at >= 0 ? AA_OK : AA_ENOENT;
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
