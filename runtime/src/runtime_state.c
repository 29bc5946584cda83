/*
 * runtime_state.c — the runtime's bottom floor: the process's default
 * runtime (static storage), the one log line writer, and the copy of a
 * runtime's pool list, which every other file of runtime/ may use (none
 * calls back up). Whole functions moved from runtime.c.
 *
 * Entry points: aa__rt_default, aa__rt_log, aa__rt_pools_snapshot.
 */
#include <pthread.h>
#include <stdarg.h>
#include <string.h>

#include "runtime_internal.h"
#include "adaptalloc/internal/util.h" /* aa__log_line, aa__buf */

/* The process's default runtime: the one the aa_runtime_* calls without a
 * handle (and so the PyTorch hooks, Python and the tools) work on. Static
 * storage: it is never freed, so a pointer to it stays valid after
 * aa_runtime_shutdown. Lock order: lock (pool creation, init, shutdown) ->
 * the services' policy lock -> pools_lock (a leaf: held only to copy the
 * pool list). */
static aa_runtime rt_default = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .pools_lock = PTHREAD_MUTEX_INITIALIZER,
    .is_default = true,
    .svc =
        {
            .policy_lock = PTHREAD_MUTEX_INITIALIZER,
            .ticker_lock = PTHREAD_MUTEX_INITIALIZER,
            .ticker_cond = PTHREAD_COND_INITIALIZER,
        },
    .oom = {.mu = PTHREAD_MUTEX_INITIALIZER},
    .stacks = {.mu = PTHREAD_MUTEX_INITIALIZER},
};
aa_runtime *aa__rt_default(void) { return &rt_default; }

void aa__rt_log(const char *fmt, ...) {
  va_list ap;
  aa__buf line;
  aa__buf_init(&line);
  va_start(ap, fmt);
  aa__buf_vprintf(&line, fmt, ap); /* whole: a message may quote a long number */
  va_end(ap);
  /* every value it quotes escaped: one line, always */
  aa__log_line(line.data != NULL && !line.failed ? line.data : "(out of memory)");
  aa__buf_free(&line);
}

size_t aa__rt_pools_snapshot(aa_runtime *rt, aa_pool **out, size_t cap) {
  size_t n;
  pthread_mutex_lock(&rt->pools_lock);
  n = rt->npools < cap ? rt->npools : cap;
  memcpy(out, rt->pools, n * sizeof(*out));
  pthread_mutex_unlock(&rt->pools_lock);
  return n;
}
