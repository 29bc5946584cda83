/*
 * base_misuse.c — what the core reports when a rule breaks: its own (a failed
 * assertion, which aborts) or its caller's (a misuse: a double free, a
 * foreign pointer; counted, and handed to the pool's on_error callback).
 *
 * Entry points: aa__assert_fail, aa__misuse.
 */
#include "core_internal.h"

void aa__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "adaptalloc: assertion failed: %s (%s:%d)\n", expr, file, line);
  abort();
}

void aa__misuse(aa_pool *pool, aa_misuse what, const void *ptr, size_t size, const char *msg) {
  atomic_fetch_add_explicit(&pool->invalid_frees, 1, AA__RLX);
  if (pool->cfg.on_error)
    pool->cfg.on_error(pool->cfg.on_error_user, pool, what, ptr, size, msg);
}
