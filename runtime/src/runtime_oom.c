/*
 * runtime_oom.c — the runtime's side of out-of-memory forensics: every pool
 * the runtime makes gets an OOM observer (aa__rt_oom_watch) that copies the
 * record into the last-OOM slot and a small pending list; the ticker hands
 * the pending records to the store (aa__rt_oom_drain), so the failing
 * thread never waits for the store and a store that is off, full or closed
 * changes nothing for the allocation. Entry points: aa__rt_oom_watch,
 * aa__rt_oom_drain, aa_runtime_last_oom, aa_runtime_oom_json.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_internal.h"

#define PENDING_MAX 16

static struct {
  pthread_mutex_t mu;
  uint64_t total;   /* OOMs reported by the runtime's pools */
  uint64_t dropped; /* records not handed to the store (pending list full) */
  bool have_last;
  aa_oom_info last;
  aa_oom_info pending[PENDING_MAX];
  unsigned npending;
} g_oom = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The observer: copies and returns (core calls it with no pool lock held). */
static void observe(void *user, aa_pool *pool, const aa_oom_info *info) {
  (void)user;
  (void)pool;
  pthread_mutex_lock(&g_oom.mu);
  g_oom.total++;
  g_oom.last = *info;
  g_oom.have_last = true;
  if (g_oom.npending < PENDING_MAX)
    g_oom.pending[g_oom.npending++] = *info;
  else
    g_oom.dropped++;
  pthread_mutex_unlock(&g_oom.mu);
}

void aa__rt_oom_watch(aa_pool *pool) { aa_pool_set_oom_observer(pool, observe, NULL); }

void aa__rt_oom_drain(aa_store *store) {
  aa_oom_info batch[PENDING_MAX];
  unsigned n;
  pthread_mutex_lock(&g_oom.mu);
  n = g_oom.npending;
  memcpy(batch, g_oom.pending, n * sizeof batch[0]);
  g_oom.npending = 0;
  pthread_mutex_unlock(&g_oom.mu);
  for (unsigned i = 0; i < n && store != NULL; i++)
    (void)aa_store_oom(store, &batch[i]); /* refusals: the store's ooms_dropped */
}

int aa_runtime_last_oom(aa_oom_info *out, uint64_t *total) {
  int rc = AA_ENOENT;
  pthread_mutex_lock(&g_oom.mu);
  if (total != NULL)
    *total = g_oom.total;
  if (out != NULL) {
    if (g_oom.have_last)
      *out = g_oom.last;
    else
      memset(out, 0, sizeof *out);
  }
  if (g_oom.have_last)
    rc = AA_OK;
  pthread_mutex_unlock(&g_oom.mu);
  return rc;
}

int aa_runtime_oom_json(char **out, size_t *len) {
  aa_oom_info last;
  uint64_t total = 0;
  char rec[4096];
  int have = aa_runtime_last_oom(&last, &total) == AA_OK;
  size_t n = aa_oom_info_json(have ? &last : NULL, rec, sizeof rec);
  char *s = NULL;
  int k;
  if (out == NULL || len == NULL)
    return AA_EINVAL;
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
