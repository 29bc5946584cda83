/*
 * adaptalloc/replay.h — offline replay: event sources, the simulator that
 * drives the real core over a simulated backend, its figures, and the tuner
 * behind `adaptalloc-replay suggest`. Format and field definitions:
 * docs/replay.md.
 *
 * Pipeline: a source (CSV reader, histogram synthesiser, or the caller's own
 * loop over a store trace) produces batches of aa_replay_event and hands them
 * to a sink; aa_replay_sim_feed is a sink. One parse can feed several
 * simulators (compare).
 *
 * Threads: nothing here is thread-safe; one simulator is driven by one thread
 * at a time (with per_thread it runs its own replay threads inside feed).
 * Different simulators are independent.
 *
 * Ownership: every object returned through an out-parameter is owned by the
 * caller and freed by the matching *_free; out-parameters are cleared on
 * failure. Error messages go into caller buffers (err, errcap; may be NULL/0)
 * and name the line (or event) number of the input.
 */
#ifndef ADAPTALLOC_REPLAY_H
#define ADAPTALLOC_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/common.h"
#include "adaptalloc/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AA_REPLAY_ERR_CAP 256 /* a buffer this big holds any message */

/* ------------------------------------------------------------------ events */

/* One input event. op: 'a' allocate, 'f' free, 'x' an allocation that failed
 * in the recorded program, 'u' a live block used on another stream
 * (record_stream; store traces only): the simulator holds the block after
 * its free for that stream's work, PyTorch's model ignores it. ptr is the recorded pointer, used only as an id.
 * line: 1-based line of a CSV input, or the 1-based event index of other
 * sources (0 when unknown); error messages quote it. */
typedef struct aa_replay_event {
  uint64_t time_ns;
  uint64_t ptr;
  uint64_t size;
  uint64_t stream;
  uint64_t thread;
  uint64_t line;
  char op;
} aa_replay_event;

/* The largest size an event may hold: 2^48 (256 TiB), more than any
 * backend could give (a device's or a host's address space). */
#define AA_REPLAY_MAX_SIZE (1ull << 48)

/* The rules every event passes whatever it was read from (a CSV line, a
 * store's trace row, a torch snapshot), so that one reader's rules hold for
 * all: op is 'a', 'f', 'x' or 'u'; size is at most AA_REPLAY_MAX_SIZE (a
 * larger one, up to 2^63 - 1, would only count as a failure); size and
 * time_ns are below 2^63 (what a store can hold: larger is a negative
 * number read back, or no size at all). AA_OK, or AA_EPARSE with a message
 * naming the field (msg may be NULL). The CSV reader applies it to every line; a reader of another
 * source calls it on each event before its sink. */
AA_EXTERN int aa_replay_event_check(const aa_replay_event *ev, char *msg, size_t cap);

/* Receives a batch of n events (n >= 1). Returns AA_OK to go on; any other
 * value stops the source, which returns it. */
typedef int (*aa_replay_sink)(void *user, const aa_replay_event *ev, size_t n);

/* What to do with bad input: stop at the first problem (the default), or
 * count it, skip the event and go on. */
typedef enum aa_replay_on_error {
  AA_REPLAY_STOP = 0,
  AA_REPLAY_COUNT = 1
} aa_replay_on_error;

/* Bad-input counters (all zero under AA_REPLAY_STOP unless it stopped). */
typedef struct aa_replay_diag {
  uint64_t malformed;                  /* CSV line that does not parse */
  uint64_t unknown_action;             /* CSV Action other than the three known ones */
  uint64_t unknown_free;               /* free of a pointer that is not live */
  uint64_t duplicate_ptr;              /* allocate of a pointer that is already live */
  uint64_t size_mismatch;              /* free whose size differs from its allocate
                              (a warning only: the free is replayed) */
  uint64_t first_line;                 /* line/event of the first problem, 0 if none */
  char first_error[AA_REPLAY_ERR_CAP]; /* its message, "" if none */
} aa_replay_diag;

/* ------------------------------------------------------------------ histogram */

/* A recorded size distribution: hist[] counts per core histogram bucket
 * (aa_hist_bucket), plus optional exact sizes with counts (heavy hitters).
 * Exact counts are part of, not in addition to, the bucket counts when both
 * describe the same requests: see aa_replay_synth. */
typedef struct aa_replay_hist {
  uint64_t hist[AA_HIST_BUCKETS];
  aa_size_count *exact; /* malloc'd, owned: aa_replay_hist_clear */
  size_t nexact;
} aa_replay_hist;

AA_EXTERN void aa_replay_hist_clear(aa_replay_hist *h);

/* Parses a histogram document (docs/replay.md "Histogram files"): JSON
 * {"hist": [192 counts], "sizes": [{"size": S, "count": C}, ...]} (either
 * member optional; a core stats object with "hist"/"hh" is accepted too), or
 * CSV lines `size,count` (exact sizes) / `bucket:I,count`. On error *h is
 * left cleared and err names the line or JSON member. */
AA_EXTERN int aa_replay_hist_parse(const char *buf, size_t len,
                                   aa_replay_hist *h, char *err, size_t errcap);
AA_EXTERN int aa_replay_hist_load_file(const char *path, aa_replay_hist *h,
                                       char *err, size_t errcap);

typedef struct aa_replay_synth_config {
  uint64_t events;       /* events to produce (allocs + frees), > 0 */
  uint64_t seed;         /* same seed, same histogram -> same stream */
  uint64_t live_target;  /* mean live blocks in steady state (default 1024) */
  uint64_t time_step_ns; /* time between events (default 1000) */
  bool free_at_end;      /* free what is still live at the end (extra events) */
  uint64_t live_bytes;   /* > 0: hold the live requested bytes near and never
                            over this (a run's peak in use) instead of a block
                            count; live_target is then unused (default 0) */
} aa_replay_synth_config;

AA_EXTERN void aa_replay_synth_config_init(aa_replay_synth_config *cfg);

/* Synthesises a request stream from h: each allocation's size is drawn from
 * the exact sizes with their counts' weight and from the buckets with the
 * rest of the weight (a bucket's count minus the exact counts that fall in
 * it, floored at 0), uniformly within a bucket. Lifetimes: while k blocks
 * are live the next event allocates with probability 1 - k/(2*live_target)
 * and otherwise frees a uniformly chosen live block; with live_bytes set,
 * while b bytes are live it allocates with probability 1 - b/(2*live_bytes),
 * and frees instead when the drawn size would take b over live_bytes (a
 * first block larger than live_bytes is still allocated). Deterministic for a
 * seed (xoshiro256**, no global state). AA_EINVAL for an empty histogram. */
AA_EXTERN int aa_replay_synth(const aa_replay_hist *h,
                              const aa_replay_synth_config *cfg,
                              aa_replay_sink sink, void *user, char *err,
                              size_t errcap);

/* ------------------------------------------------------------------ simulator */

/* Costs of the simulated backend (docs/replay.md "Cost model"). Defaults
 * from measurements on an H200: cudaMalloc+cudaFree about 86 us a
 * pair, so 43 us each; a pool hit costs nothing. Stitching's aliases from
 * an H100 (bench/gpu/bench_vmm.py, 2 MiB handles): 36 us to map one
 * (cuMemMap, the range's access call shared), 24 us to unmap it. */
typedef struct aa_replay_costs {
  double alloc_us;         /* per backend alloc call (default 43) */
  double free_us;          /* per backend free call (default 43) */
  double alloc_us_per_gib; /* extra per GiB allocated (default 0) */
  double hit_ns;           /* per pool hit (default 0) */
  double event_ns;         /* per event record (default 0) */
  double alias_us;         /* per handle mapped at a stitched range (default 36) */
  double unalias_us;       /* per alias undone (default 24) */
} aa_replay_costs;

/* Bumped whenever aa_replay_config changes (2: account_at_event; 3: the
 * alias costs):
 * aa_replay_sim_new refuses a config of another version (AA_EINVAL). */
#define AA_REPLAY_CONFIG_VERSION 3

typedef struct aa_replay_config {
  uint32_t version;             /* AA_REPLAY_CONFIG_VERSION */
  aa_pool_config pool;          /* backend is ignored: the simulator's own is used */
  const aa_class_spec *classes; /* the class table to install; NULL = the
                                   pool's default ladder. Copied. */
  size_t nclasses;
  aa_replay_costs costs;
  aa_replay_on_error on_error;
  uint64_t capacity_bytes;   /* simulated device memory, 0 = unbounded */
  uint64_t event_delay_ns;   /* a stream event completes this long (trace time)
                               after it is recorded; 0 = at once */
  bool ignore_streams;       /* replay everything on the default stream */
  bool replay_failures;      /* also try the recorded failed allocations ('x') */
  bool collect_sizes;        /* keep per-size counts (for suggest) */
  const char *position_name; /* what messages call ev->line: "line" (default,
                               CSV) or "event" (store traces, synthesis) */
  /* The policy loop, run on the trace's clock: when adapt is set, one
   * aa_adapt_loop_step every adapt_params.interval_ms of trace time (or,
   * with adapt_every_events > 0, every that many events instead). */
  bool adapt;
  aa_adapt_params adapt_params; /* aa_adapt_params_default by init */
  uint64_t adapt_every_events;
  /* Replay each recorded thread id on a thread of its own (at most
   * AA_REPLAY_MAX_THREADS; more ids share them), events still strictly in
   * input order, so the core's per-thread caches see the recorded pattern.
   * Slower: a hand-off at every change of thread id. */
  bool per_thread;
  /* > 0: take the pool's account (aa_pool_account_get) once, right after
   * the account_at_event-th good event (the count aa_replay_result's events
   * reaches), before any loop step due then: aa_replay_sim_account_at_event.
   * A second pass over the same input with this set to the first pass's
   * aa_replay_sim_peak_in_use_event gives the account at peak in use.
   * 0 (the default): none, and no cost. */
  uint64_t account_at_event;
} aa_replay_config;

#define AA_REPLAY_MAX_THREADS 64

/* Fills in defaults: aa_pool_config_init, default costs, everything else 0. */
AA_EXTERN void aa_replay_config_init(aa_replay_config *cfg);

/* Figures of one replay (definitions: docs/replay.md "Output fields"). */
typedef struct aa_replay_result {
  uint64_t events;   /* events fed (good ones) */
  uint64_t requests; /* allocation requests replayed */
  uint64_t allocs;   /* that succeeded */
  uint64_t frees;
  uint64_t failures;       /* aa_alloc returned NULL in the replay */
  uint64_t trace_failures; /* 'x' events in the input */
  uint64_t cache_hits;
  uint64_t cache_misses;
  double hit_rate; /* hits / (hits + misses), 0 when none */
  uint64_t backend_allocs;
  uint64_t backend_frees;
  uint64_t backend_calls; /* allocs + frees */
  uint64_t backend_failures;
  uint64_t event_records;
  uint64_t peak_requested; /* max over time of live requested bytes */
  uint64_t peak_in_use;    /* max over time of live block bytes */
  uint64_t peak_reserved;  /* max over time of bytes held from the backend */
  uint64_t requested_at_peak_in_use;
  uint64_t in_use_at_peak_reserved;
  double int_frag_peak;  /* 1 - requested/in_use at peak in use */
  double int_frag_avg;   /* 1 - integral(requested)/integral(in_use) */
  double ext_frag_peak;  /* 1 - in_use/reserved at peak reserved */
  double ext_frag_avg;   /* 1 - integral(in_use)/integral(reserved) */
  double sim_backend_us; /* cost model applied to the counts */
  uint64_t live_at_end;  /* blocks never freed by the input */
  uint64_t live_bytes_at_end;
  uint64_t trace_span_ns;  /* last - first event time */
  uint32_t class_count;    /* classes in the table at the end */
  aa_adapt_counters adapt; /* the loop's counters (zero without adapt) */
  aa_replay_diag diag;
  /* stitching (policy large.stitch; docs/core.md): ranges made, requests a
   * kept range served again, ranges dissolved, and the backend's alias map
   * and unmap calls (not in backend_calls: no memory is made or freed) */
  uint64_t stitches, stitch_hits, stitch_dissolved, alias_maps, alias_unmaps;
  uint64_t stitch_wakes; /* of stitch_hits, dormant ranges woken */
  /* the learned plan (policy large.plan; docs/core.md): requests served at
   * their planned offsets and not, plans adopted, dropped and refused, and
   * the arena's bytes at the end */
  uint64_t plan_hits, plan_misses, plans_adopted, plans_dropped, plans_refused, plan_bytes;
  /* free large blocks still pending on another stream that served a request
   * once its stream was ordered after that work (large.stream_wait; on a
   * GPU a cudaStreamWaitEvent, no backend call) */
  uint64_t stream_waits;
  /* stitching's time budget (large.stitch_share; docs/core.md): requests
   * refused a new range because the budget was spent, and the time inside
   * alias calls by the pool's clock (the trace's time plus the simulated
   * costs: each alias call takes its cost) */
  uint64_t stitch_deferred, alias_ns;
} aa_replay_result;

typedef struct aa_replay_sim aa_replay_sim;

/* Creates a pool over a fresh simulated backend. AA_EINVAL (message in err)
 * when the pool configuration or class table is refused by the core. */
AA_EXTERN int aa_replay_sim_new(const aa_replay_config *cfg,
                                aa_replay_sim **out, char *err, size_t errcap);

/* An aa_replay_sink: replays n events. On bad input (free of a pointer that
 * is not live, an allocate of a live pointer) returns AA_EPARSE under
 * AA_REPLAY_STOP (message: aa_replay_sim_error) or counts it. */
AA_EXTERN int aa_replay_sim_feed(void *sim, const aa_replay_event *ev, size_t n);

/* The message of the error that stopped feed ("" if none). */
AA_EXTERN const char *aa_replay_sim_error(const aa_replay_sim *sim);

/* Computes the figures so far (may be called more than once). */
AA_EXTERN void aa_replay_sim_result(aa_replay_sim *sim, aa_replay_result *out);

/* The moment's figures, for plots over the trace: what aa_replay_sim_result
 * reports as peaks, read now (after a feed has returned). */
typedef struct aa_replay_now {
  uint64_t events;    /* events fed so far */
  uint64_t in_use;    /* live block bytes */
  uint64_t requested; /* live requested bytes */
  uint64_t reserved;  /* bytes held from the simulated backend */
} aa_replay_now;
AA_EXTERN void aa_replay_sim_now(const aa_replay_sim *sim, aa_replay_now *out);

/* Where the pool's reserved bytes were (aa_pool_account_get) the last time
 * reserved reached a new peak: the account of peak_reserved. The caller
 * sets out->version and out->size (AA_ACCOUNT_VERSION, sizeof). AA_EINVAL
 * for a NULL argument or a wrong version or size, AA_ENOENT when none was
 * taken (nothing reserved yet); *out unchanged on either. With per_thread
 * the account is taken by the replay thread that raised reserved, while
 * the others wait, so their caches are counted too. */
AA_EXTERN int aa_replay_sim_account_at_peak(const aa_replay_sim *sim,
                                            aa_pool_account *out);

/* The number of good events fed (as aa_replay_result's events counts them)
 * when the live block bytes first reached peak_in_use: the event after
 * which the allocated bytes were largest. 0 when nothing was ever in use.
 * Recorded at each new peak in use, so it costs nothing to keep. */
AA_EXTERN uint64_t aa_replay_sim_peak_in_use_event(const aa_replay_sim *sim);

/* The account taken after event cfg.account_at_event, as
 * aa_replay_sim_account_at_peak: out->version and size set by the caller;
 * AA_EINVAL for a NULL argument or a wrong version or size, AA_ENOENT when
 * none was taken (account_at_event 0, or the input had fewer good events);
 * *out unchanged on either. */
AA_EXTERN int aa_replay_sim_account_at_event(const aa_replay_sim *sim,
                                             aa_pool_account *out);

/* The pool being driven (borrowed; valid until aa_replay_sim_free). */
AA_EXTERN aa_pool *aa_replay_sim_pool(aa_replay_sim *sim);

/* Per requested size, when collect_sizes was set. */
typedef struct aa_replay_size_stat {
  uint64_t size;
  uint64_t allocs;
  uint64_t live;     /* now */
  uint64_t max_live; /* most blocks of this size live at once */
} aa_replay_size_stat;

/* Copies the per-size table, ascending by size, into a malloc'd array the
 * caller free()s. *out NULL and *n 0 when empty or not collected. */
AA_EXTERN int aa_replay_sim_sizes(const aa_replay_sim *sim,
                                  aa_replay_size_stat **out, size_t *n);

/* The first AA_REPLAY_DECISION_LOG decisions the loop made (with their
 * results), in order; *n gets the count kept. Valid until the next feed. */
#define AA_REPLAY_DECISION_LOG 32
AA_EXTERN const aa_adapt_decision *aa_replay_sim_decisions(
    const aa_replay_sim *sim, size_t *n);

/* Replay threads started so far (per_thread; 0 otherwise). */
AA_EXTERN size_t aa_replay_sim_threads(const aa_replay_sim *sim);

/* Destroys the pool (releasing everything) and the backend. NULL is a no-op. */
AA_EXTERN void aa_replay_sim_free(aa_replay_sim *sim);

/* Writes the result as one JSON object (fields as in the struct, plus the
 * diag counters under "input_errors"); snprintf-style return. */
AA_EXTERN size_t aa_replay_result_json(const aa_replay_result *r, char *buf,
                                       size_t cap);

/* ------------------------------------------------------------------ verify */

/* The policy loop's verifier (an aa_adapt_verify_fn; user unused): the
 * small requests of the interval between prev and cur (its histogram and
 * heavy hitters) synthesised into a request stream and replayed under base
 * and under cand. AA_ENOENT when the interval had no small requests; other
 * errors from the simulator. replay_verify.c. */
AA_EXTERN int aa_replay_adapt_verify(void *user, const aa_pool_stats *prev,
                                     const aa_pool_stats *cur, const aa_class_spec *base,
                                     size_t nbase, const aa_class_spec *cand, size_t ncand,
                                     aa_adapt_prediction *before, aa_adapt_prediction *after);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_REPLAY_H */
