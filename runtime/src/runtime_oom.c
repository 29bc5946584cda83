/*
 * runtime_oom.c — the runtime's side of out-of-memory forensics: every pool
 * the runtime makes gets an OOM observer (aa__rt_oom_watch) that copies the
 * record into the last-OOM slot and a small pending list; the ticker hands
 * the pending records to the store (aa__rt_oom_drain), so the failing
 * thread never waits for the store and a store that is off, full or closed
 * changes nothing for the allocation. Records over the pending list's
 * bound between two ticks are counted, and the store told (its
 * ooms_dropped), so that every record is stored or counted. The records are the runtime's
 * (rt->oom), each pool's observer gets its runtime as user. A refusal by a
 * managed pool's safety cap is also logged with its figures. Entry points:
 * aa__rt_oom_watch, aa__rt_oom_drain, aa_rt_last_oom, aa_rt_oom_json (and
 * aa_runtime_last_oom, aa_runtime_oom_json on the default runtime).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_internal.h"

#define PENDING_MAX AA__RT_OOM_PENDING

/* A managed pool's failure may be the safety cap's refusal (docs/cuda.md),
 * whose figures the OOM record has no room for: the first CAP_LOGS new
 * refusals are logged in words. Called with o->mu held. */
#define CAP_LOGS 8

static void log_cap_refusal_locked(aa__rt_oom *o, aa_pool *pool) {
  const aa_backend *b = aa_pool_backend(pool);
  aa_managed_refusal f;
  if (o->cap_logged >= CAP_LOGS || !aa_backend_is_managed(b) ||
      aa_managed_last_refusal(b, &f) != AA_OK)
    return;
  if (b == o->cap_backend && f.count == o->cap_count)
    return; /* no new refusal: this failure was another out-of-memory */
  o->cap_backend = b;
  o->cap_count = f.count;
  o->cap_logged++;
  aa__rt_log("pool %s: %s%s", aa_pool_name(pool), f.message,
             o->cap_logged == CAP_LOGS ? " (further refusals are not logged)" : "");
}

/* The observer: copies and returns (core calls it with no pool lock held). */
static void observe(void *user, aa_pool *pool, const aa_oom_info *info) {
  aa__rt_oom *o = user;
  pthread_mutex_lock(&o->mu);
  log_cap_refusal_locked(o, pool);
  o->total++;
  o->last = *info;
  o->have_last = true;
  if (o->npending < PENDING_MAX)
    o->pending[o->npending++] = *info;
  else
    o->dropped++;
  pthread_mutex_unlock(&o->mu);
}

void aa__rt_oom_watch(aa_runtime *rt, aa_pool *pool) {
  aa_pool_set_oom_observer(pool, observe, &rt->oom);
}

void aa__rt_oom_drain(aa_runtime *rt, aa_store *store) {
  aa__rt_oom *o = &rt->oom;
  aa_oom_info batch[PENDING_MAX];
  uint64_t lost = 0;
  unsigned n;
  pthread_mutex_lock(&o->mu);
  n = o->npending;
  memcpy(batch, o->pending, n * sizeof batch[0]);
  o->npending = 0;
  if (store != NULL) {
    lost = o->dropped - o->dropped_told;
    o->dropped_told = o->dropped;
  }
  pthread_mutex_unlock(&o->mu);
  /* the records the pending list had no room for: counted, so that every
   * record is stored or counted (docs/store.md) */
  aa_store_ooms_lost(store, lost);
  for (unsigned i = 0; i < n && store != NULL; i++)
    (void)aa_store_oom(store, &batch[i]); /* refusals: the store's ooms_dropped */
}

int aa_rt_last_oom(aa_runtime *rt, aa_oom_info *out, uint64_t *total) {
  aa__rt_oom *o;
  int rc = AA_ENOENT;
  if (rt == NULL)
    return AA_EINVAL;
  o = &rt->oom;
  pthread_mutex_lock(&o->mu);
  if (total != NULL)
    *total = o->total;
  if (out != NULL) {
    if (o->have_last)
      *out = o->last;
    else
      memset(out, 0, sizeof *out);
  }
  if (o->have_last)
    rc = AA_OK;
  pthread_mutex_unlock(&o->mu);
  return rc;
}

int aa_runtime_last_oom(aa_oom_info *out, uint64_t *total) {
  return aa_rt_last_oom(aa__rt_default(), out, total);
}

int aa_rt_oom_json(aa_runtime *rt, char **out, size_t *len) {
  aa_oom_info last;
  uint64_t total = 0;
  char rec[4096];
  int have, k;
  size_t n;
  char *s = NULL;
  if (rt == NULL || out == NULL || len == NULL)
    return AA_EINVAL;
  have = aa_rt_last_oom(rt, &last, &total) == AA_OK;
  n = aa_oom_info_json(have ? &last : NULL, rec, sizeof rec);
  *out = NULL;
  *len = 0;
  if (n >= sizeof rec)
    return AA_ENOMEM;
  s = malloc(n + 64);
  if (s == NULL)
    return AA_ENOMEM;
  k = snprintf(s, n + 64, "{\"count\":%llu,\"last\":%s}", (unsigned long long)total, rec);
  *out = s;
  *len = (size_t)k;
  return AA_OK;
}

int aa_runtime_oom_json(char **out, size_t *len) {
  return aa_rt_oom_json(aa__rt_default(), out, len);
}
