/*
 * adaptalloc/adapt.h — the policy loop: watch a pool's stats, reshape its
 * class table.
 *
 * Two layers.
 *   aa_adapt_decide   a pure, deterministic function: given the loop's
 *                     parameters, its state (hysteresis memory), the previous
 *                     and current stats snapshots of a pool and the pool's
 *                     current class table, it returns what to do. It calls
 *                     nothing and allocates nothing; tests drive it with
 *                     synthetic stats.
 *   aa_adapt_loop     a background thread that, every params.interval_ms,
 *                     takes each registered pool's stats, decides, and hands
 *                     the step's proposal (aa_adapt_proposal: the class table
 *                     after its adds, retires and grows, and a trim) to its
 *                     committer, then reports each decision (with the result
 *                     of committing it) to a callback. The runtime commits a
 *                     proposal as a new policy version through its one path
 *                     and owns policy versions.
 *
 * Rules (details, numbers and the reason strings: docs/adapt.md), in the
 * order decisions are emitted within one step:
 *   retire_class     a class the loop added that has had no allocations for
 *                    cold_intervals steps (and is at least min_class_age old);
 *   add_class        a hot request size (heavy hitters over the interval:
 *                    >= min_requests and >= hot_fraction of the small
 *                    requests) that its serving class wastes more than
 *                    waste_threshold of gets an exact class (the size rounded
 *                    up to 512), at most max_adds_per_interval a step, never
 *                    beyond max_classes, never a size retired less than
 *                    readd_cooldown steps ago;
 *   grow_or_prefill  a class whose misses/allocs over the interval exceed
 *                    miss_rate_threshold gets its prefill doubled (at least
 *                    one slab's worth, at most prefill_max_bytes, and all
 *                    prefill together within the pool's limit), at most once
 *                    per grow_cooldown steps;
 *   trim             cached bytes (reserved - in use) above
 *                    trim_threshold_bytes are trimmed to half of it, or to 0
 *                    when reserved is within 10% of the pool's limit; at most
 *                    once per trim_cooldown steps. A trim whose bytes the
 *                    pool maps again for a peak no larger is not repeated:
 *                    the gap between reserved and peak in use then is what
 *                    the workload's peaks need (holes between live blocks),
 *                    kept by every later trim.
 */
#ifndef ADAPTALLOC_ADAPT_H
#define ADAPTALLOC_ADAPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/common.h"
#include "adaptalloc/core.h"
#include "adaptalloc/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------ decisions */

typedef enum aa_adapt_kind {
  AA_ADAPT_ADD_CLASS = 1,
  AA_ADAPT_GROW_OR_PREFILL = 2,
  AA_ADAPT_RETIRE_CLASS = 3,
  AA_ADAPT_TRIM = 4
} aa_adapt_kind;

/* "add_class", "grow_or_prefill", "retire_class", "trim" ("unknown"). */
AA_EXTERN const char *aa_adapt_kind_name(aa_adapt_kind kind);

#define AA_ADAPT_REASON_CAP 256
/* A grown class's prefill never exceeds this many blocks (the policy's
 * per-class bound), nor, with all classes' prefill together, limit_bytes. */
#define AA_ADAPT_PREFILL_MAX (1u << 20)
/* The most decisions one step can return for one pool. */
#define AA_ADAPT_MAX_DECISIONS (2 * AA_MAX_CLASSES + 1)

typedef struct aa_adapt_decision {
  aa_adapt_kind kind;
  int result;                       /* AA_OK from aa_adapt_decide; the loop sets the result
                            of applying it (a core error code on failure) */
  uint64_t block_size;              /* add/grow/retire: the class; trim: 0 */
  uint64_t request_size;            /* add: the hot request size; otherwise 0 */
  uint64_t amount;                  /* add: requests of that size in the interval;
                            grow: the new prefill (blocks);
                            retire: intervals without allocations;
                            trim: bytes to keep cached (aa_pool_trim's keep) */
  uint64_t released;                /* trim: bytes released (set by the loop) */
  uint64_t interval;                /* the step (aa_adapt_state.interval) it was made in */
  char reason[AA_ADAPT_REASON_CAP]; /* human-readable, with the numbers */
  uint64_t window_requests;         /* add: small requests over the same two
                               snapshots as amount (amount <= it) */
  uint64_t window_ns;               /* add: time between those snapshots (0 = no
                            previous snapshot) */
  /* add/retire, set by the loop before applying: the interval's small
   * requests replayed under the table before and after the step's changes
   * (peak reserved, backend calls; a retired class's reserved bytes now are
   * taken off the after figure). verified 0 = not replayed (no requests,
   * dry run, or another kind). A change that does not improve the objective
   * is not applied: result AA_EAGAIN. */
  uint8_t verified;
  uint64_t predicted_reserved_before, predicted_reserved_after;
  uint64_t predicted_calls_before, predicted_calls_after;
} aa_adapt_decision;

/* The decision function's memory. A value type: zero it with
 * aa_adapt_state_init, keep one per pool, pass it to every step. */
typedef struct aa_adapt_class_state {
  uint64_t block_size;
  uint64_t added_at;     /* the step the loop added it (valid when added) */
  uint64_t last_grow_at; /* the step of its last grow (valid when grown) */
  uint32_t cold;         /* consecutive steps without allocations */
  uint8_t added;         /* the loop added it (only those are retired) */
  uint8_t grown;
  uint16_t cold_limit; /* steps without allocations before it is retired;
                            0 = params.cold_intervals. A size the loop has
                            retired before gets a longer one (flap backoff) */
} aa_adapt_class_state;

typedef struct aa_adapt_cooldown {
  uint64_t block_size;
  uint64_t since; /* the step it was retired (or its add failed) */
} aa_adapt_cooldown;

typedef struct aa_adapt_flap {
  uint64_t block_size;
  uint32_t retires; /* times the loop retired this size */
  uint32_t reserved0;
} aa_adapt_flap;

#define AA_ADAPT_PEAK_INTERVALS 16 /* intervals the trim rule looks back */

typedef struct aa_adapt_state {
  uint64_t interval; /* steps decided so far; the current step's number */
  uint64_t last_trim_at;
  uint8_t trimmed; /* last_trim_at is valid */
  uint8_t reserved0[7];
  uint32_t n_classes;
  uint32_t n_cooldown;
  uint64_t suppressed_by_bound;    /* adds skipped: max_classes reached */
  uint64_t suppressed_by_cooldown; /* adds skipped: size retired recently */
  aa_adapt_class_state classes[AA_MAX_CLASSES];
  aa_adapt_cooldown cooldown[AA_MAX_CLASSES];
  /* Flap memory: how often the loop retired each size. A size that comes
   * back after being retired is periodically hot (a cyclic workload), so
   * its next class is kept 2^retires times longer before it counts as cold:
   * the loop converges instead of adding and retiring it every cycle. */
  uint32_t n_flaps;
  uint32_t reserved1;
  aa_adapt_flap flaps[AA_MAX_CLASSES];
  /* The trim rule's memory: each recent interval's peak bytes in use, so a
   * quiet interval between busy ones does not trim what they need. */
  uint64_t peaks[AA_ADAPT_PEAK_INTERVALS];
  uint32_t n_peaks, peak_at;
  /* A trim the workload undoes: at the last threshold trim, the reserved
   * bytes and the recent peak in use (trim_from 0: none pending), and the
   * reserved bytes right after it; when the pool maps at least half of
   * those bytes again within AA_ADAPT_PEAK_INTERVALS steps, for a recent
   * peak no larger, the gap between its reserved bytes and that peak (the
   * holes its peaks need, not a cache) is learned in kept_gap, and later
   * trims keep it (no more than the recent peak itself). */
  uint64_t trim_from, trim_working, trim_low;
  uint64_t kept_gap;
} aa_adapt_state;

AA_EXTERN void aa_adapt_state_init(aa_adapt_state *st);

/* One step. prev may be NULL (counters are then taken from zero). classes is
 * the pool's current class table (aa_pool_classes), ascending; its largest
 * entry is max_small. Writes up to cap decisions into out and returns how
 * many; the state is advanced as if every returned decision is applied.
 * Returns 0 when params->enabled is false (the state is then unchanged) or
 * when an argument is NULL. */
AA_EXTERN size_t aa_adapt_decide(const aa_adapt_params *params,
                                 aa_adapt_state *st, const aa_pool_stats *prev,
                                 const aa_pool_stats *cur,
                                 const aa_class_spec *classes, size_t n_classes,
                                 aa_adapt_decision *out, size_t cap);

/* Tells the state that applying d failed: a failed add puts its size on the
 * re-add cooldown (so it is not retried every step) and forgets the class; a
 * failed retire keeps tracking the class. */
AA_EXTERN void aa_adapt_state_note_failure(aa_adapt_state *st,
                                           const aa_adapt_decision *d);

/* A trim decision of aa_adapt_decide applied (d->result, d->released):
 * the bytes it gave back, against which the next steps tell whether the
 * workload maps them again (aa_adapt_state.kept_gap). */
AA_EXTERN void aa_adapt_state_note_trim(aa_adapt_state *st, const aa_adapt_decision *d);

/* ------------------------------------------------------------ the loop */

typedef struct aa_adapt_loop aa_adapt_loop;

/* Called once per decision, after it was committed (d->result says how that
 * went), from the loop thread or from the aa_adapt_loop_step caller, with the
 * loop's lock held: it must not call aa_adapt_loop_* functions. d is valid
 * only during the call. */
typedef void (*aa_adapt_decision_fn)(void *user, aa_pool *pool,
                                     const aa_adapt_decision *d);

/* What one step proposes for one pool, committed whole by the loop's
 * committer: the class table the step's accepted adds, retires and grows
 * leave (every class with its cache_limit and prefill), and a trim. The loop
 * never changes a pool's settings itself: a runtime commits the table as a
 * new policy version through its one transactional path (with the pool's
 * overrides, e.g. the user's cap, in force), and a loop without a runtime
 * uses aa_adapt_proposal_commit. */
typedef struct aa_adapt_proposal {
  aa_pool *pool;
  size_t n_classes;                      /* 0: the class table stays */
  aa_class_spec classes[AA_MAX_CLASSES]; /* ascending, topped by max_small */
  bool trim;                             /* release cached memory ... */
  size_t trim_keep;                      /* ... down to this many cached bytes */
  size_t released;                       /* set by the committer: bytes the trim gave back */
  const aa_adapt_decision *decisions;    /* the step's decisions behind it */
  size_t n_decisions;                    /* (those with result AA_OK make it) */
} aa_adapt_proposal;

/* Commits a proposal: AA_OK when the table is in force (or there was
 * none); else the error, and the table is as it was. A trim is done either
 * way (it changes no setting), its bytes in p->released. Called with the
 * loop's lock held, like aa_adapt_decision_fn. */
typedef int (*aa_adapt_commit_fn)(void *user, aa_adapt_proposal *p);

/* The committer of a loop without one: the table through
 * aa_pool_classes_prepare / _commit (all of it or none), then the trim. */
AA_EXTERN int aa_adapt_proposal_commit(void *user, aa_adapt_proposal *p);

#define AA_ADAPT_LOOP_CONFIG_VERSION 2

/* What a verifier predicts for one class table over the interval just
 * measured: the objective the loop compares (peak reserved, then backend
 * calls). */
typedef struct aa_adapt_prediction {
  uint64_t peak_reserved;
  uint64_t backend_calls;
} aa_adapt_prediction;

/* A verifier: predicts the interval between prev (NULL: from the start) and
 * cur under the class table base and under the candidate cand. AA_OK with
 * both filled; AA_ENOENT when there is nothing to predict from; any error
 * leaves the rules alone to decide. Called from the loop's step with its
 * lock held, never on an allocating thread. The loop sits below the
 * simulator: aa_replay_adapt_verify (adaptalloc/replay.h) is the verifier
 * the runtime and the replay give it. */
typedef int (*aa_adapt_verify_fn)(void *user, const aa_pool_stats *prev,
                                  const aa_pool_stats *cur, const aa_class_spec *base,
                                  size_t nbase, const aa_class_spec *cand, size_t ncand,
                                  aa_adapt_prediction *before, aa_adapt_prediction *after);

typedef struct aa_adapt_loop_config {
  uint32_t version;                 /* AA_ADAPT_LOOP_CONFIG_VERSION */
  aa_adapt_params params;           /* aa_adapt_params_default() by init */
  aa_adapt_decision_fn on_decision; /* optional */
  void *user;
  bool dry_run;              /* decide and report, apply nothing (a
                                     decision then repeats each step, as the
                                     table it would change stays the same) */
  aa_adapt_commit_fn commit; /* NULL: aa_adapt_proposal_commit; gets user */
  aa_adapt_verify_fn verify; /* NULL: table changes are not verified (the
                                     rules alone decide); gets verify_user */
  void *verify_user;
} aa_adapt_loop_config;

AA_EXTERN void aa_adapt_loop_config_init(aa_adapt_loop_config *cfg);

/* Creates a stopped loop with no pools. *out is owned by the caller:
 * aa_adapt_loop_destroy. AA_EINVAL for a bad config, AA_ENOMEM. */
AA_EXTERN int aa_adapt_loop_new(const aa_adapt_loop_config *cfg,
                                aa_adapt_loop **out);

/* Registers a pool (borrowed: it must outlive its registration) and takes its
 * baseline snapshot. AA_EEXIST if already registered, AA_ELIMIT beyond
 * AA_ADAPT_LOOP_MAX_POOLS. */
/* every pool a runtime can make: 64 devices, 64 managed (one per device),
 * host, pinned, 64 region pools (runtime_policy.c asserts it) */
#define AA_ADAPT_LOOP_MAX_POOLS 224
AA_EXTERN int aa_adapt_loop_add_pool(aa_adapt_loop *loop, aa_pool *pool);
/* Unregisters a pool; when this returns the loop no longer touches it.
 * AA_ENOENT if it was not registered. */
AA_EXTERN int aa_adapt_loop_remove_pool(aa_adapt_loop *loop, aa_pool *pool);

/* Replaces the parameters (a new policy); the interval takes effect at the
 * next wait. AA_EINVAL for an interval of 0. */
AA_EXTERN int aa_adapt_loop_set_params(aa_adapt_loop *loop,
                                       const aa_adapt_params *params);

/* Starts the background thread (AA_EBUSY if running). */
AA_EXTERN int aa_adapt_loop_start(aa_adapt_loop *loop);
/* Stops and joins the thread; a no-op when not running. */
AA_EXTERN void aa_adapt_loop_stop(aa_adapt_loop *loop);

/* Runs one step now for every registered pool, in the caller's thread (for
 * tests, and for the runtime at shutdown). Returns the number of decisions
 * made, or a negative error. Serialised with the thread's steps. When
 * params.enabled is false it only refreshes the baselines and returns 0. */
AA_EXTERN int aa_adapt_loop_step(aa_adapt_loop *loop);

typedef struct aa_adapt_counters {
  uint64_t steps;           /* steps run (all pools each) */
  uint64_t decisions;       /* decisions made */
  uint64_t classes_added;   /* add_class applied successfully */
  uint64_t classes_retired; /* retire_class applied successfully */
  uint64_t grows;           /* grow_or_prefill applied successfully */
  uint64_t trims;           /* trim applied */
  uint64_t bytes_trimmed;   /* bytes released by trims */
  uint64_t apply_failures;  /* decisions the core refused */
  uint64_t rejected;        /* add/retire not applied: the replay of the
                               interval predicted no gain */
} aa_adapt_counters;

AA_EXTERN void aa_adapt_loop_counters(aa_adapt_loop *loop,
                                      aa_adapt_counters *out);

/* The audit of a pool's recent class-table changes, applied or rejected,
 * and trims that gave memory back, oldest first: what the replay predicted (table changes) and,
 * AA_ADAPT_MEASURE_STEPS steps after an applied one, what the pool measured
 * (its reserved bytes at the decision and then); for a trim the bytes it
 * gave back. Grows are not listed. */
#define AA_ADAPT_AUDIT_MAX 16
#define AA_ADAPT_MEASURE_STEPS 3
typedef struct aa_adapt_audit {
  uint64_t step;      /* the loop step it was decided in */
  aa_adapt_kind kind; /* add_class, retire_class or trim */
  int result;         /* AA_OK applied; AA_EAGAIN rejected by the replay */
  uint64_t block_size;
  uint8_t verified;
  uint8_t measured; /* the after figure is in */
  uint64_t predicted_reserved_before, predicted_reserved_after;
  uint64_t predicted_calls_before, predicted_calls_after;
  uint64_t measured_reserved_before, measured_reserved_after;
  /* the same, the small classes' alone (reserved less the large path's):
   * the scope of the prediction, which replays small requests only; and
   * the bytes the small classes' live blocks asked for then (the demand,
   * which the prediction holds fixed) */
  uint64_t measured_small_before, measured_small_after;
  uint64_t measured_small_requested_before, measured_small_requested_after;
  uint64_t released; /* trim: the bytes aa_pool_trim gave back (0 otherwise) */
} aa_adapt_audit;

/* Copies up to cap entries of pool's audit into out; *n gets the count.
 * AA_ENOENT for a pool that is not registered. */
AA_EXTERN int aa_adapt_loop_audit(aa_adapt_loop *loop, const aa_pool *pool,
                                  aa_adapt_audit *out, size_t cap, size_t *n);

/* Stops the thread and frees the loop. NULL is a no-op. Pools are untouched. */
AA_EXTERN void aa_adapt_loop_destroy(aa_adapt_loop *loop);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_ADAPT_H */
