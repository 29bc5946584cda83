/*
 * runtime_internal.h — state shared by runtime.c (life cycle: pools,
 * configuration, the in-process /stats and /policy calls), runtime_state.c
 * (the default runtime, the log, the pool list's copy),
 * runtime_services.c (store, loop, ticker, the services' state),
 * runtime_policy.c (the owner of each pool's settings: the policy in
 * force, the pools' overrides, the one commit every change takes) and
 * runtime_http.c (the server's callbacks and start); runtime_json.c is
 * the /history merge; runtime_oom.c the out-of-memory records;
 * runtime_config.c the configuration; runtime_token.c the token file;
 * runtime_stacks.c the live trace's recent call stacks (GET /holders).
 *
 * Layers, bottom first: a file uses what its own layer and the layers below
 * define, never what a higher layer defines (tools/check-layers.sh reads
 * this list and the object files: the ctest test_layers_runtime). State at
 * the bottom, services above, the life cycle on top; a service that needs
 * the runtime started is called by runtime.c, never the other way round:
 *   layer 0 state:     runtime_state.c runtime_config.c runtime_json.c
 *                      runtime_token.c
 *   layer 1 records:   runtime_oom.c runtime_devices.c runtime_stacks.c
 *   layer 2 policy:    runtime_policy.c
 *   layer 3 http:      runtime_http.c
 *   layer 4 services:  runtime_services.c
 *   layer 5 lifecycle: runtime.c
 */
#ifndef AA_RUNTIME_INTERNAL_H
#define AA_RUNTIME_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>

#include <pthread.h>
#include <stdint.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/cuda.h"
#include "adaptalloc/http.h"
#include "adaptalloc/policy.h"
#include "adaptalloc/runtime.h"
#include "adaptalloc/store.h"

/* device pools, managed pools (aa_runtime_managed_pool), host, pinned, regions */
#define AA_RT_MAX_POOLS (2 * AA_MAX_DEVICES + 2 + AA_RUNTIME_MAX_REGION_POOLS)

/* How long the end of a run at exit waits for the store's writer to commit
 * what is queued: while the writer makes progress, at most
 * AA__RT_EXIT_FLUSH_MAX_MS in all (a full 512 Ki ring takes about a second
 * on a 2-core VM, over 5 s under TSan on a loaded one), and no more than
 * AA__RT_FLUSH_STALL_MS without progress (a database another process keeps
 * locked holds the writer for its busy timeout, 5 s, before it gives up). */
#define AA__RT_EXIT_FLUSH_MAX_MS 30000u
#define AA__RT_FLUSH_STALL_MS 5000u

/* A region's pools (runtime.c): one per device, one on the host backend. */
typedef struct aa__rt_region {
  char name[AA_REGION_NAME_MAX + 1];
  _Atomic(aa_pool *) device[AA_MAX_DEVICES];
  _Atomic(aa_pool *) host;
} aa__rt_region;

/* The services' state, one per runtime (rt->svc): the store, the loop, the
 * server, the ticker and the policy in force. */
typedef struct aa__rt_services {
  pthread_mutex_t policy_lock;
  aa_policy *policy;      /* in force; guarded by policy_lock */
  char policy_source[32]; /* "file", "default", "http", "loop" */

  aa_store *store; /* NULL when off */
  char store_path[1100];
  int64_t run_id;
  /* set once the run is ended (aa__rt_services_end_run): no pool traces
   * into the store after it */
  atomic_bool run_ended;

  aa_adapt_loop *loop; /* NULL when off */
  aa_http *http;       /* NULL when off */
  atomic_int http_port;
  /* the file holding the token the runtime made (none set), "" when none
   * (runtime_token.c) */
  char token_file[1100];

  pthread_t ticker;
  bool ticker_running;
  pthread_mutex_t ticker_lock;
  pthread_cond_t ticker_cond;
  bool ticker_stop;
  atomic_uint snapshot_interval_ms;
  atomic_bool histogram_on;
  atomic_bool tracing; /* the pools trace into the store now (written under
                          policy_lock) */
  atomic_bool traced;  /* ... or did at some time in this run */
  /* live tracing's sample (telemetry.trace_sample, trace_min_bytes) in
   * force on the pools, and when a trace of trace_seconds ends (aa_now_ns;
   * 0: not timed) and began; written under policy_lock */
  atomic_uint trace_every;
  _Atomic uint64_t trace_min_bytes;
  _Atomic uint64_t trace_deadline_ns;
  _Atomic uint64_t trace_began_ns;

  /* The pools' named overrides (aa_pool_overrides: the user's cap), which
   * the policy's sections are combined with by aa_policy_limit_rule;
   * guarded by policy_lock, changed only by aa__rt_settings_commit. */
  aa_pool *ov_pools[AA_RT_MAX_POOLS];
  aa_pool_overrides ov[AA_RT_MAX_POOLS];
  size_t nov;

  atomic_uint_fast64_t classes_added;
  atomic_uint_fast64_t classes_retired;
  atomic_uint_fast64_t loop_decisions;
  atomic_uint_fast64_t policy_changes;
  atomic_uint_fast64_t policy_rejects;
} aa__rt_services;

/* The live trace's recent call stacks (runtime_stacks.c): the text of each
 * store frames id (aa_store_frames_id) that aa_rt_trace_frames attached to
 * a block, so that GET /holders names a live block's stack from the id its
 * pool keeps beside it (aa_pool_trace_frame_of). Direct-mapped by id (ids
 * are handed out 1, 2, ... a run, so the newest AA__RT_STACKS distinct
 * stacks sit in distinct slots), at most AA__RT_STACKS_BYTES of text (past
 * it, the oldest slots in sweep order are dropped). A dropped stack is
 * "evicted": /holders says frames null, frames_evicted true. Guarded by mu
 * (a leaf lock); slot is NULL until the first stack. */
#define AA__RT_STACKS 4096u /* a power of two */
#define AA__RT_STACKS_BYTES ((size_t)4 << 20)
typedef struct aa__rt_stack {
  int64_t run;
  uint64_t id;
  size_t len;
  char text[]; /* len bytes, NUL after */
} aa__rt_stack;
typedef struct aa__rt_stacks {
  pthread_mutex_t mu;
  aa__rt_stack **slot; /* AA__RT_STACKS, calloc'd at the first stack */
  size_t bytes;        /* text held */
  unsigned sweep;      /* the next slot dropped for room */
  uint64_t evicted;    /* stacks dropped (a slot's id replaced, or for room) */
} aa__rt_stacks;

/* The out-of-memory records of one runtime's pools (runtime_oom.c). */
#define AA__RT_OOM_PENDING 16
typedef struct aa__rt_oom {
  pthread_mutex_t mu;
  uint64_t total;        /* OOMs reported by the runtime's pools */
  uint64_t dropped;      /* records not handed to the store (pending list full) */
  uint64_t dropped_told; /* ... of which the store was told (ooms_dropped) */
  bool have_last;
  aa_oom_info last;
  aa_oom_info pending[AA__RT_OOM_PENDING];
  unsigned npending;
  /* a managed pool's cap refusals logged so far (the first 8), and the last
   * one's backend and count, so that one refusal is logged once */
  unsigned cap_logged;
  const aa_backend *cap_backend;
  uint64_t cap_count;
} aa__rt_oom;

/* One runtime (the opaque aa_runtime of adaptalloc/runtime.h): its
 * configuration, its pools, its services and its OOM records. Every
 * internal function of the runtime takes the one it works on; the public
 * aa_runtime_* calls without a handle work on the process's default one
 * (aa__rt_default). */
struct aa_runtime {
  /* Lock order: lock (pool creation, init, shutdown) -> svc.policy_lock ->
   * pools_lock (a leaf: held only to copy the pool list). */
  pthread_mutex_t lock;
  pthread_mutex_t pools_lock;
  bool is_default; /* the process's default instance (static storage) */

  atomic_int ready;
  /* set under lock; read without it by aa_runtime_started, which every
   * pinned tensor's free asks (torch/ext/torch_ext.cpp) */
  atomic_bool shut_down;
  bool quiet;
  bool trace;
  uint64_t started_ns;
  char model[128];
  char policy_path[1024];
  char policy_dir[1024];
  char db[1024];
  char http[256];
  char token[256];
  bool token_off; /* ADAPTALLOC_TOKEN=off: no token on loopback (opt-out) */
  /* a setting over its buffer is refused whole, never cut short */
  bool policy_refused; /* ADAPTALLOC_POLICY or _POLICY_DIR: default policy */
  bool db_refused;     /* ADAPTALLOC_DB: the store stays off */
  bool http_refused;   /* ADAPTALLOC_HTTP or _TOKEN: the server stays off */
  int rank;            /* RANK, -1 when unset */
  int local_rank;      /* LOCAL_RANK, -1 when unset */
  int world_size;      /* WORLD_SIZE, -1 when unset */

  _Atomic(aa_pool *) device_pools[AA_MAX_DEVICES];
  _Atomic(aa_pool *) pinned_pool;
  _Atomic(aa_pool *) host_pool;
  bool failed[4][AA_MAX_DEVICES]; /* [aa_backend_kind][device] */
  /* aa_rt_managed_pool's pools (managed memory, docs/cuda.md) */
  _Atomic(aa_pool *) managed_pools[AA_MAX_DEVICES];
  bool managed_failed_logged;

  aa__rt_region regions[AA_RUNTIME_MAX_REGIONS];
  atomic_int nregions;  /* registered names; each written before the count */
  size_t nregion_pools; /* under lock */
  bool region_pools_full_logged;

  aa_pool *pools[AA_RT_MAX_POOLS]; /* creation order, for destroy */
  size_t npools;
  aa_backend *backends[AA_RT_MAX_POOLS];
  size_t nbackends;

  aa__rt_services svc;
  aa__rt_oom oom;
  aa__rt_stacks stacks;
};

/* runtime_state.c */
/* The process's default runtime (static storage, never freed; started by
 * aa_runtime_init or the first pool asked for). Does not start it. */
aa_runtime *aa__rt_default(void);

/* printf-style line on stderr, prefixed "adaptalloc: ". */
void aa__rt_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Copies up to cap of rt's live pools into out; returns how many. */
size_t aa__rt_pools_snapshot(aa_runtime *rt, aa_pool **out, size_t cap);

/* runtime.c */
/* Starts rt when it is the default one and has not started. */
void aa__rt_ensure_started(aa_runtime *rt);

/* runtime_config.c: the configuration; the one reader of the environment */
/* AA_OK for NULL or a config of this version (size, version, trace 0/1/-1,
 * ranks >= -1, world_size -1 or >= 1); else AA_EINVAL. */
int aa__rt_config_check(const aa_runtime_config *cfg);
/* Takes cfg (NULL: every default) into rt under the rules below; a refused
 * setting is said in one line and left at its default or off. */
void aa__rt_apply_config(aa_runtime *rt, const aa_runtime_config *cfg);
/* The default runtime's configuration: what aa_runtime_configure set, else
 * the environment, with over's set fields (may be NULL) on top, applied to
 * rt. After it aa_runtime_configure answers AA_EBUSY. */
void aa__rt_default_config(aa_runtime *rt, const aa_runtime_config *over);
/* The folders where a model's policy file is looked for when
 * ADAPTALLOC_POLICY_DIR is unset, in order: ./policies; beside the file
 * this code was loaded from (libadaptalloc.so or the program linked with
 * it), the installed share/adaptalloc/policies relative to it and a
 * policies/ folder (the Python package); the prefix the library was
 * configured for. Each once, real paths where they exist. Returns how many
 * went into dirs (at most cap). */
#define AA__RT_PATH_MAX 1024
size_t aa__rt_policy_dirs(char dirs[][AA__RT_PATH_MAX], size_t cap);

/* Whether an environment value is "off", in any case: the one rule of
 * ADAPTALLOC_DB, ADAPTALLOC_HTTP and ADAPTALLOC_TRACE. */
bool aa__rt_is_off(const char *v);
/* AA_OK when token can be sent in "Authorization: Bearer <token>": bytes
 * 0x21..0x7e only. Else AA_EINVAL and why names the byte (never the token). */
int aa__rt_token_check(const char *token, char *why, size_t cap);
/* AA_OK when model is a plain name: not empty, no '/' or '\\', no leading
 * dot, no byte below 0x20 or 0x7f. Else AA_EINVAL and why says which rule. */
int aa__rt_model_check(const char *model, char *why, size_t cap);

/* in copied into out with every "{rank}" replaced by rank (0 when < 0);
 * false, and out empty, when it does not fit in cap. */
bool aa__rt_expand_rank(const char *in, int rank, char *out, size_t cap);

/* runtime_services.c */
void aa__rt_services_start(aa_runtime *rt);
void aa__rt_services_stop(aa_runtime *rt);
/* Ends the store's run, the pools living on: detaches every pool's trace
 * sink, stops the snapshot thread, takes a last snapshot of every pool,
 * ends the run and waits for the writer to commit it all: as long as it
 * takes with limit_ms 0 (shutdown), else while it makes progress and at
 * most limit_ms (exit; AA__RT_FLUSH_STALL_MS without progress ends the
 * wait). Says in one line on stderr when the trace lost events or the wait
 * gave up. Once: later calls (and the store part of aa__rt_services_stop)
 * do nothing more. Called with rt->lock held, or after shut_down was set.
 * detached (may be NULL) is called once no pool traces any more and the
 * last snapshots are queued, before the wait for the writer. */
void aa__rt_services_end_run(aa_runtime *rt, uint32_t limit_ms,
                             void (*detached)(void));

/* runtime_policy.c */
/* Loads the start-up policy (ADAPTALLOC_POLICY, the model's file, or the
 * built-in default) into rt->svc.policy. */
void aa__rt_load_start_policy(aa_runtime *rt);
/* Reads the policy's telemetry settings into the services' atomics. Called
 * with policy_lock held. */
void aa__rt_adopt_telemetry(aa_runtime *rt, const aa_policy *p);
/* One change of the settings (aa__rt_settings_commit): a next policy built
 * from the one in force under policy_lock (build NULL: it stays; build
 * returns AA_OK with *out, the caller's, or an error with err set), and/or
 * pool's overrides (pool NULL: none change). */
typedef struct aa__rt_change {
  int (*build)(void *arg, const aa_policy *cur, aa_policy **out, char *err,
               size_t errcap);
  void *arg;
  aa_pool *pool;
  aa_pool_overrides ov;
  const char *source; /* "http", "python", "loop", "torch", ... (audit log) */
  const char *reason;
  bool has_if_match; /* refuse (AA_ESTALE) unless if_match is in force */
  uint64_t if_match;
} aa__rt_change;
/* The one transactional path for every change of a pool's settings: every
 * live pool gets its section of the next policy combined with its
 * overrides (aa_policy_limit_rule), all of them or none; a telemetry
 * setting that could not take effect is refused (AA_ECONFLICT), as is a
 * setting fixed while a pool lives; the version is bumped and the change
 * logged once. A result equal to what is in force changes nothing: AA_OK,
 * *unchanged (may be NULL) true, *new_version (may be NULL) the version in
 * force. Takes policy_lock (after the loop's lock, never before). */
int aa__rt_settings_commit(aa_runtime *rt, const aa__rt_change *c, uint64_t *new_version,
                           bool *unchanged, char *err, size_t errcap);
/* Appends ,"overrides":[{"pool":NAME,"user_limit":N},...] to sb: the pools'
 * overrides in force (/stats). */
struct aa__buf;
void aa__rt_overrides_json(aa_runtime *rt, struct aa__buf *sb);
/* Appends ,"trace":{...} to sb: live tracing now (on, sample, the time
 * left of a timed trace, the events: docs/operating.md) (/stats). */
void aa__rt_trace_json(aa_runtime *rt, struct aa__buf *sb);
/* The ticker's part of a timed trace: how long until it ends (ns; UINT64_MAX
 * when none is timed), and, once it is due, ends it through
 * aa__rt_settings_commit (source "trace-timer"). */
uint64_t aa__rt_trace_due_in(aa_runtime *rt);
void aa__rt_trace_expire(aa_runtime *rt);
/* Installs `next` (validated) as the policy in force through
 * aa__rt_settings_commit. Takes ownership of next. A `next`
 * equal to the policy in force changes nothing (no apply, no new version, no
 * audit entry): AA_OK, *new_version the version in force, *unchanged (may be
 * NULL) true. */
int aa__rt_install_policy(aa_runtime *rt, aa_policy *next, const char *source,
                          const char *reason, bool has_if_match,
                          uint64_t if_match, uint64_t *new_version,
                          bool *unchanged, char *err, size_t errcap);
/* Applies the policy's settings for a pool of backend kind
 * "device"/"pinned"/"host" (region: NULL, or the region it serves, whose
 * pools.regions section wins when the policy has one) to cfg before the pool
 * is created. Never fails the pool for a policy problem. */
int aa__rt_pool_config(aa_runtime *rt, const char *kind, const char *region,
                       aa_pool_config *cfg);
/* Hooks a new pool into the policy, the loop, the store and traces. */
void aa__rt_pool_created(aa_runtime *rt, aa_pool *pool);

/* runtime_token.c: the token the runtime makes when none is set */
/* 64 hex digits of 32 bytes from getrandom into out (cap >= 65): AA_OK, or
 * AA_EIO (no randomness) / AA_EINVAL with out empty. */
int aa__rt_token_generate(char *out, size_t cap);
/* Writes token and a newline to <dir>/<port>.token (mode 0600, in a 0700
 * directory of this user's: $XDG_RUNTIME_DIR/adaptalloc, else
 * /tmp/adaptalloc-<uid>), replacing an earlier job's file of that port;
 * the path into path. Else an error, path empty and why saying what. */
int aa__rt_token_file_write(const char *token, int port, char *path, size_t cap,
                            char *why, size_t whycap);
/* Removes rt's token file while it still holds rt's token; forgets it. */
void aa__rt_token_file_remove(aa_runtime *rt);
/* For the default runtime: removes its token file at exit() (once). */
void aa__rt_token_file_arm_exit(aa_runtime *rt);

/* runtime_http.c: starts the server unless ADAPTALLOC_HTTP is off; logs and
 * leaves it off on failure. */
void aa__rt_start_http(aa_runtime *rt);
/* runtime_http.c: the provider's answers without the server, for the
 * in-process calls of runtime.c (which start the runtime first). */
int aa__rt_prov_stats_json(aa_runtime *rt, char **out, size_t *len);
int aa__rt_prov_policy_get(aa_runtime *rt, char **out, size_t *len, uint64_t *version);
int aa__rt_prov_policy_change(aa_runtime *rt, const aa_http_policy_change *c, bool patch,
                              uint64_t *new_version, char *err, size_t errcap);

/* Whether the policy's section for a device pool (region NULL or "": the
 * device section; else the region's, or the device section when the policy
 * has none for it) selects backend "managed", and then its settings in *mc
 * (device 0). AA_OK, or the policy's error with *managed false. */
int aa__rt_pool_backend(aa_runtime *rt, const char *region, bool *managed, aa_managed_config *mc);
/* runtime_stacks.c: the live trace's recent call stacks */
/* Keeps a copy of frames (len bytes) as the stack of store id `id` in
 * `run`, replacing whatever held its slot. AA_OK, AA_ENOMEM (nothing kept;
 * its blocks then read as evicted). */
int aa__rt_stacks_put(aa_runtime *rt, int64_t run, uint64_t id, const char *frames, size_t len);
/* The text of id in run: AA_OK with *text malloc'd (free()) and *len;
 * AA_ELIMIT when it is no longer kept (evicted); AA_ENOENT for id 0;
 * AA_ENOMEM. */
int aa__rt_stacks_get(aa_runtime *rt, int64_t run, uint64_t id, char **text, size_t *len);
/* Drops every stack (the runtime's stop); the lock stays usable. */
void aa__rt_stacks_clear(aa_runtime *rt);

/* runtime_oom.c: out-of-memory records */
/* Sets rt's OOM observer on a new pool. */
void aa__rt_oom_watch(aa_runtime *rt, aa_pool *pool);
/* Hands the records reported since the last call to the store (NULL: they
 * are dropped; the last one stays for aa_runtime_last_oom). The ticker. */
void aa__rt_oom_drain(aa_runtime *rt, aa_store *store);

/* runtime_devices.c: the GPUs the pools are on, the process's labels */
/* Where a device's identity and memory come from: CUDA's
 * (aa_cuda_device_identity, aa_cuda_mem_info), or a test's. */
typedef struct aa__rt_device_probe {
  int (*identity)(int device, aa_cuda_identity *out);
  int (*mem_info)(int device, size_t *free_bytes, size_t *total_bytes);
} aa__rt_device_probe;
/* Tests: p's functions instead of CUDA's (copied; NULL: CUDA's again); the
 * identities kept so far are forgotten. */
void aa__rt_devices_test_probe(const aa__rt_device_probe *p);
/* One GPU that a pool is on, read now. */
typedef struct aa__rt_device {
  int device;          /* the CUDA ordinal */
  bool have_id;        /* id is known */
  bool have_mem;       /* total, free, used and non_allocator are known */
  aa_cuda_identity id; /* its UUID, PCI bus id, name */
  uint64_t total;
  uint64_t free;
  uint64_t used;          /* total - free: every process's */
  uint64_t reserved;      /* what the pools in the snapshot hold on it */
  uint64_t non_allocator; /* used - reserved, at least 0 */
} aa__rt_device;
/* The devices of pools[0..n) (pools on "cuda" or "managed" backends; each
 * device once, in ordinal order) into out, at most cap; returns how many.
 * Asks only those devices: never one without a pool (a context). */
size_t aa__rt_devices_read(const aa_pool_stats *pools, size_t n, aa__rt_device *out,
                           size_t cap);
/* A Prometheus label value into out (cap bytes): \\, \" and \n escaped, other
 * control bytes '_'. The runtime's series' one escape. */
void aa__rt_prom_label(char *out, size_t cap, const char *s);
/* gethostname(), read once ("unknown" when it fails). */
const char *aa__rt_host_name(void);
/* Appends ,"host":"..","devices":[{device, gpu_uuid, pci_bus_id, name,
 * reserved_bytes, total_bytes, free_bytes, used_bytes,
 * non_allocator_bytes}, ...] to sb (/stats; unknown figures null). */
void aa__rt_devices_json(struct aa__buf *sb, const aa_pool_stats *pools, size_t n);
/* Appends the adaptalloc_device_* families (none without a GPU pool). */
void aa__rt_devices_metrics(struct aa__buf *sb, const aa_runtime *rt,
                            const aa_pool_stats *pools, size_t n);
/* The labels of every series of this process, escaped, without braces:
 * rank="R",host="H" (no rank when RANK is unset). */
void aa__rt_process_labels(const aa_runtime *rt, char *out, size_t cap);
/* The server's pool_labels: the process's labels and, for a pool on a GPU,
 * gpu_uuid and pci_bus_id. */
int aa__rt_pool_labels(aa_runtime *rt, const aa_pool_stats *st, aa_http_labels *out);

#endif
