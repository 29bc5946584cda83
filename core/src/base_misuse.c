/*
 * base_misuse.c — what the core reports when its caller breaks a rule (a
 * misuse: a double free, a foreign pointer; counted, and handed to the
 * pool's on_error callback). A failed assertion, the core's own rule, is
 * util's aa__assert_fail (adaptalloc/internal/debug.h).
 *
 * Entry point: aa__misuse.
 */
#include "core_internal.h"

void aa__misuse(aa_pool *pool, aa_misuse what, const void *ptr, size_t size, const char *msg) {
  atomic_fetch_add_explicit(&pool->invalid_frees, 1, AA__RLX);
  if (pool->cfg.on_error)
    pool->cfg.on_error(pool->cfg.on_error_user, pool, what, ptr, size, msg);
}
