/*
 * test_hooks.h — test-only hooks of the host backend (core/src/backend_host.c):
 * fault injection, held events, call counts; of the large path's chunk
 * records (core/src/large_chunk.c); of the snapshot (core/src/stats.c);
 * and of the learned plan's planner thread (core/src/large_plan.c). For the tests, fuzz targets and
 * benchmarks built in this tree against adaptalloc_static; not installed,
 * not exported from the shared libraries.
 */
#ifndef AA_TEST_HOOKS_H
#define AA_TEST_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

#include "adaptalloc/core.h"

/* Fault injection on the host backend: the `n`th alloc call from now (1 = the
 * next one) fails with AA_ENOMEM; with `every` true, every call from the nth on
 * fails. n = 0 disables. */
void aa_backend_host_fail_nth(aa_backend *b, uint64_t n, bool every);
/* While `hold` is true, host events recorded and not yet queried complete
 * stay pending; setting it false completes every outstanding event. */
void aa_backend_host_hold_events(aa_backend *b, bool hold);
/* Marks `stream` busy (its work outstanding: stream_query says pending and
 * events recorded on it now stay pending) or idle again (those events
 * complete). AA_ELIMIT past 8 busy streams at once, AA_EINVAL for a backend
 * that is not the host one. Events held by aa_backend_host_hold_events stay
 * held either way. */
int aa_backend_host_stream_busy(aa_backend *b, aa_stream stream, bool busy);
/* stream_wait calls so far, and those on an event still pending then. */
void aa_backend_host_stream_waits(const aa_backend *b, uint64_t *waits, uint64_t *pending);
/* While `refuse` is true, stream_wait answers AA_EAGAIN (as a stream under
 * CUDA graph capture does). */
void aa_backend_host_refuse_waits(aa_backend *b, bool refuse);
/* The busy period `stream` is in (0: idle) and, in deps[0..*ndeps) (room
 * for 8), the active busy periods of other streams it waits for
 * (stream_wait, directly or through an event of a stream that waited). */
uint64_t aa_backend_host_stream_period(aa_backend *b, aa_stream stream, uint64_t *deps,
                                       int *ndeps);
/* Whether work issued on `stream` now runs after busy period `period`: the
 * period has ended (or is 0), it is `stream`'s own, or `stream` waits for it. */
bool aa_backend_host_stream_ordered(aa_backend *b, aa_stream stream, uint64_t period);
/* stream_query calls the backend has answered so far. */
uint64_t aa_backend_host_stream_queries(const aa_backend *b);
/* Calls made so far: allocs, frees, and bytes currently mapped. */
void aa_backend_host_counts(const aa_backend *b, uint64_t *allocs,
                            uint64_t *frees, uint64_t *bytes_mapped);
/* Makes host backend b aliasable, before it maps anything: pages mapped
 * shared (a forked child shares them) and map_alias/unmap_alias offered, so
 * that a pool over it can stitch. AA_EINVAL when not a host backend or
 * something is mapped. */
int aa_backend_host_aliasable(aa_backend *b);
/* map_alias and unmap_alias calls so far (stitching). */
void aa_backend_host_alias_counts(const aa_backend *b, uint64_t *aliases, uint64_t *unaliases);
/* Makes aliasable host backend b offer no map_alias_run, so that a pool
 * over it maps a stitched range's handles one map_alias call at a time (as
 * the replay's simulator does). AA_EINVAL when b is not an aliasable host
 * backend. */
int aa_backend_host_alias_per_handle(aa_backend *b);
/* map_alias_run calls that mapped their range so far (a stitched range's
 * handles in one call; each handle is counted in aliases too). */
uint64_t aa_backend_host_alias_runs(const aa_backend *b);
/* Host events recorded so far, and those not yet released (outstanding) —
 * for leak checks in tests. */
void aa_backend_host_event_counts(const aa_backend *b, uint64_t *recorded,
                                  uint64_t *outstanding);

/* The large path's chunk records (core/src/large_chunk.c): the `n`th one
 * asked for from now (1 = the next one), by any pool, is refused as when
 * memory is short; once, then the hook is off. n = 0 disables. A global
 * switch: for tests that run one at a time. */
void aa_test_chunk_fail_nth(uint64_t n);

/* fn(user) is called by every aa_pool_stats_get between copying the pool's
 * tables and merging its heavy hitters, with none of the pool's locks held
 * (so a test can allocate from fn's wait). NULL removes it. */
void aa_test_stats_merge_hook(void (*fn)(void *user), void *user);

/* The learned plan's planner thread (core/src/large_plan.c; large_plan 1).
 * While `hold` is true, a planner thread that reaches its local search
 * waits there (a destroy's cancel still ends it); aa_test_plan_held counts
 * those that did so far. While `fail` is true, starting a planner thread
 * fails as pthread_create would (the plan is made on the allocating
 * thread, counted in large_plans_inline). aa_test_plan_wait waits until the
 * pool's planner thread has no plan queued or under way (its result may
 * wait for the allocating path's next request): AA_OK, or AA_EINVAL when
 * the pool has none. Global switches: for tests that run one at a time. */
void aa_test_plan_hold(bool hold);
unsigned aa_test_plan_held(void);
void aa_test_plan_thread_fail(bool fail);
int aa_test_plan_wait(aa_pool *pool);

#endif
