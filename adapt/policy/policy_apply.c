/*
 * policy_apply.c — aa_policy_apply: puts a policy's class table, limit and
 * large.map_runs into a live pool through the core's public API
 * (aa_pool_set_classes, which validates the whole table first, then
 * aa_pool_set_limit and aa_pool_set_map_runs).
 *
 * Kept apart from policy.c: the model reads only core's ladder and
 * defaults; this file is the one that changes a live pool.
 */
#include "policy_model.h"

int aa_policy_apply(const aa_policy *p, const char *pool, aa_pool *target) {
  aa_class_spec specs[AA_MAX_CLASSES];
  aa_class_spec cur[AA_MAX_CLASSES];
  size_t n = 0, ncur = 0;
  const aa__pool_policy *pp = NULL;
  int rc;

  if (p == NULL || target == NULL)
    return AA_EINVAL;
  rc = aa__policy_section(p, pool, &pp);
  if (rc != AA_OK)
    return rc;
  rc = aa_policy_pool_config(p, pool, NULL, specs, AA_MAX_CLASSES, &n);
  if (rc != AA_OK)
    return rc;
  rc = aa_pool_classes(target, cur, AA_MAX_CLASSES, &ncur, NULL);
  if (rc != AA_OK)
    return rc;
  /* The largest class of a live pool is its max_small: it cannot change. */
  if (ncur > 0 && ncur <= AA_MAX_CLASSES &&
      cur[ncur - 1].block_size != specs[n - 1].block_size)
    return AA_EINVAL;
  rc = aa_pool_set_classes(target, specs, n);
  if (rc != AA_OK)
    return rc;
  aa_pool_set_limit(target, (size_t)pp->limit_bytes);
  aa_pool_set_map_runs(target, pp->large_map_runs);
  return AA_OK;
}
