/*
 * adaptalloc/runtime.h — the embedding glue.
 *
 * A runtime (aa_runtime) creates pools on demand (one per CUDA device, one
 * pinned, one host), loads the policy, and starts the store's writer thread,
 * the policy loop and the HTTP server. Nothing it does can make an
 * allocation fail: a store, policy or server that cannot start is logged once
 * and left off.
 *
 * A process has one default runtime, the one the calls without a handle
 * (aa_runtime_init, aa_runtime_pool, ... aa_runtime_shutdown) work on and the
 * PyTorch allocator uses; it starts on first use with the configuration
 * aa_runtime_configure gave, else the ADAPTALLOC_* environment (README
 * "Environment"). More runtimes can be made with aa_runtime_new, each with
 * its own configuration, pools, store, loop and server; the aa_rt_* calls
 * work on the one they are given. The environment is read in one place,
 * aa_runtime_config_from_env.
 *
 * Ownership: a runtime owns its pools; they live until aa_runtime_shutdown()
 * (the default one) or aa_runtime_destroy() (one made by aa_runtime_new).
 */
#ifndef ADAPTALLOC_RUNTIME_H
#define ADAPTALLOC_RUNTIME_H

#include "adaptalloc/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A runtime: its configuration, its pools, its store, loop and server.
 * Opaque. The aa_runtime_* calls without a handle work on the process's
 * default runtime; the aa_rt_* calls on the one they are given. */
typedef struct aa_runtime aa_runtime;

#define AA_RUNTIME_CONFIG_VERSION 2

/* A runtime's configuration: a value type. The strings are borrowed: read
 * (copied) by the call that takes the config, never kept. A NULL or empty
 * string, trace -1, a rank -1 is "not set": the default (in brackets) then
 * applies. Each field names the environment variable that
 * aa_runtime_config_from_env reads into it. */
typedef struct aa_runtime_config {
  uint32_t size;           /* sizeof(aa_runtime_config) */
  uint32_t version;        /* AA_RUNTIME_CONFIG_VERSION */
  const char *model;       /* ADAPTALLOC_MODEL ["default"]: a plain name */
  const char *policy_path; /* ADAPTALLOC_POLICY [none: <policy_dir>/<model>.json] */
  const char *policy_dir;  /* ADAPTALLOC_POLICY_DIR [./policies or the installed] */
  const char *db;          /* ADAPTALLOC_DB ["./adaptalloc.db"; "off" disables;
                              "{rank}" becomes local_rank, else rank, else 0] */
  const char *http;        /* ADAPTALLOC_HTTP ["127.0.0.1:9100"; "off" disables;
                              docs/http.md "Address"] */
  const char *token;       /* ADAPTALLOC_TOKEN [none: one is made and written
                              to a file, aa_runtime_token_file]: bytes
                              0x21..0x7e; "off" (any case): none, loopback
                              only */
  int trace;               /* ADAPTALLOC_TRACE: 1 on; 0 or -1 off */
  bool quiet;              /* ADAPTALLOC_QUIET set: no log lines but errors */
  int rank;                /* RANK [-1 unset]: /stats, /metrics, the run row */
  int local_rank;          /* LOCAL_RANK [-1]: {rank}, the "+rank" port */
  int world_size;          /* WORLD_SIZE [-1 unset, else >= 1] */
} aa_runtime_config;

/* Sets every field of cfg to "not set", size and version to this header's. */
AA_EXTERN void aa_runtime_config_init(aa_runtime_config *cfg);

/* Fills cfg (aa_runtime_config_init first) from the environment: the one
 * place the runtime reads it. Unset or empty variables leave a field unset.
 * The strings point into the environment: valid until it changes (setenv,
 * unsetenv, putenv); take the config before that. A value that cannot be
 * one (ADAPTALLOC_TRACE other than 1, 0 or off; RANK, LOCAL_RANK or
 * WORLD_SIZE not a number in range) is said in one line and left unset
 * (trace: off). The other rules (length, model name, token bytes) apply
 * when a runtime takes the config. AA_EINVAL for a NULL cfg. */
AA_EXTERN int aa_runtime_config_from_env(aa_runtime_config *cfg);

/* Sets the configuration the default runtime starts with, in place of the
 * environment (cfg is copied, strings included). The last call before the
 * start wins; fields left unset take their defaults, not the environment's
 * values (start from aa_runtime_config_from_env to keep those).
 * AA_EBUSY once the default runtime has taken its configuration (it
 * started); AA_EINVAL for a NULL cfg or another size or version; nothing
 * changes then. */
AA_EXTERN int aa_runtime_configure(const aa_runtime_config *cfg);

/* Starts the default runtime once (later calls return the first call's
 * result). Its configuration: aa_runtime_configure's, else the environment,
 * with the set fields of cfg (may be NULL) on top. Returns AA_OK even when
 * optional parts (store, server, policy) failed to start; those failures
 * are logged and visible in /stats. AA_EINVAL for a cfg of another size or
 * version. */
AA_EXTERN int aa_runtime_init(const aa_runtime_config *cfg);

/* Makes a runtime of its own, configured by cfg alone (NULL: every default;
 * the environment is not read: pass aa_runtime_config_from_env's result for
 * that), and starts it: its policy, store, loop and server, as the default
 * one's. Its pools are made on first use (aa_rt_pool). Settings refused by
 * the rules (see aa_runtime_config) are logged and left off, as for the
 * default runtime: *out is still made. Two runtimes must not share a
 * database file or a port. The end of its store run at exit() is not
 * registered (the default runtime's is): destroy it before the process
 * ends, or its run stays unended. AA_EINVAL (a NULL out, a cfg of another
 * size or version, a field out of range) or AA_ENOMEM; *out NULL then.
 * Ownership: the caller owns *out and frees it with aa_runtime_destroy. */
AA_EXTERN int aa_runtime_new(const aa_runtime_config *cfg, aa_runtime **out);

/* Stops rt's server, loop and store (ending its run, flushed), destroys its
 * pools and frees rt. Pointers from its pools and rt itself are invalid
 * after it. NULL does nothing. */
AA_EXTERN void aa_runtime_destroy(aa_runtime *rt);

/* Whether the runtime has started (aa_runtime_init ran, or a pool was asked
 * for) and is not shut down. */
AA_EXTERN bool aa_runtime_started(void);

/* The pool for a backend kind (AA_BACKEND_DEVICE with device >= 0,
 * AA_BACKEND_PINNED, AA_BACKEND_HOST), created on first use; starts the
 * runtime if needed. NULL if that backend cannot be had (no GPU, no CUDA). */
AA_EXTERN aa_pool *aa_runtime_pool(aa_backend_kind kind, int device);

/* The runtime's managed-memory pool of CUDA device `device`, named
 * "managed<device>" (adaptalloc.torch.managed_empty's), created on first use
 * over its own managed backend (aa_backend_managed_new, docs/cuda.md) with
 * the policy's device section: its slabs and classes, and its advise and
 * allow_oversubscribe when that section says backend "managed" (else no
 * advice and the safety cap on). Owned by the runtime like aa_runtime_pool's.
 * NULL without CUDA, without such a GPU or managed-memory support (logged
 * once). Device pools and region pools whose policy section says backend
 * "managed" are managed too, each over a managed backend of its own. */
AA_EXTERN aa_pool *aa_runtime_managed_pool(int device);

/* Fills cfg (after aa_pool_config_init) with the settings the policy in
 * force gives the pool of a backend kind: slab and class ladder, thread
 * caches, large mode, limit. The class list and prefill come only with a
 * policy's apply. For pools made beside the runtime's own (the torch
 * allocator's CUDA-graph pools). Leaves name and backend alone. AA_EINVAL
 * for a NULL cfg or a kind without a policy section. */
AA_EXTERN int aa_runtime_pool_config(aa_backend_kind kind, aa_pool_config *cfg);

/* Regions: named pools for one kind of tensor ("kv_cache", "scores"), each
 * with its own policy section (pools.regions.<name>, docs/policy.md), its own
 * stats (the pool's "region" in /stats, a region label in /metrics, the
 * store's snapshots) and its own limit. A region has one pool per backend it
 * is used on (device d, or the host backend), named "device0:kv_cache" or
 * "host:kv_cache"; it shares that backend with the runtime's pool for it.
 * At most AA_RUNTIME_MAX_REGIONS names per process, at most
 * AA_RUNTIME_MAX_REGION_POOLS region pools in all. */
#define AA_RUNTIME_MAX_REGIONS 16
#define AA_RUNTIME_MAX_REGION_POOLS 64

/* Registers the region `name` (a second call with the same name gives the
 * same id) and sets *id (0 .. AA_RUNTIME_MAX_REGIONS - 1). Needs no started
 * runtime. AA_EINVAL for a name that is not a region name (1 to
 * AA_REGION_NAME_MAX bytes of ASCII letters, digits, '_' and '-', first a
 * letter); AA_ELIMIT when AA_RUNTIME_MAX_REGIONS other names are taken. On
 * error *id is -1, nothing changes and err (may be NULL) says why. */
AA_EXTERN int aa_runtime_region_id(const char *name, int *id, char *err,
                                   size_t errcap);

/* The name of region id, or NULL when no region has that id. The string
 * lives as long as the process. */
AA_EXTERN const char *aa_runtime_region_name(int id);

/* The pool of region id on a backend: AA_BACKEND_DEVICE with device >= 0,
 * or AA_BACKEND_HOST. Created on first use (starting the runtime if needed)
 * with the policy's pools.regions.<name> section, or its backend's section
 * when the policy has none; owned by the runtime like aa_runtime_pool's.
 * NULL for an unknown id, a pinned backend, a backend that cannot be had,
 * or when AA_RUNTIME_MAX_REGION_POOLS region pools exist (logged once). */
AA_EXTERN aa_pool *aa_runtime_region_pool(int id, aa_backend_kind kind,
                                          int device);

/* The HTTP server's bound port (0 when off or not started). */
AA_EXTERN int aa_runtime_http_port(void);

/* Store run id for this process (0 when the store is off). */
AA_EXTERN int64_t aa_runtime_run_id(void);

/* The HTTP server's bound address ("127.0.0.1:9100", "[::1]:9100") copied
 * into buf (NUL-terminated). AA_ENOTSUP when the server is off or not
 * started, AA_ERANGE when cap is too small, AA_EINVAL for NULL buf. */
AA_EXTERN int aa_runtime_http_address(char *buf, size_t cap);

/* The path of the file holding the token the runtime made because none was
 * set (ADAPTALLOC_TOKEN unset; docs/security.md "The token file"), copied
 * into buf. Mutating requests need "Authorization: Bearer <its first line>".
 * AA_ENOTSUP when the server is off, a token was set (or is "off"), or the
 * file could not be written; AA_ERANGE when cap is too small (buf empty);
 * AA_EINVAL for NULL buf. */
AA_EXTERN int aa_runtime_token_file(char *buf, size_t cap);

/* What GET /stats answers: the runtime's state and every pool's stats as one
 * JSON document. Starts the runtime if needed. *out is malloc'd, owned by the
 * caller (free()); on failure *out is NULL and *len 0. */
AA_EXTERN int aa_runtime_stats_json(char **out, size_t *len);

/* The policy in force as JSON (what GET /policy answers) and its version.
 * Starts the runtime if needed. *out is malloc'd, owned by the caller
 * (free()); AA_ENOTSUP when no policy could be built. */
AA_EXTERN int aa_runtime_policy_json(char **out, uint64_t *version);

/* Replaces the policy in force (patch false: `json` is a whole policy, as PUT
 * /policy, which must be complete: pools.device, pools.pinned, pools.host,
 * adapt and telemetry present, else AA_EINVAL "not a complete policy:
 * missing ..."; docs/policy.md) or merges `json` into it (patch true: an RFC 7386 merge patch, as
 * PATCH /policy), validates it, applies it to every pool and logs the change
 * to the store with `source` ("python", NULL = "api"). if_match > 0 refuses
 * the change with AA_ESTALE unless that version is in force. On error nothing
 * changes and err (may be NULL) names the problem: AA_EPARSE / AA_EINVAL /
 * AA_ERANGE for a bad document. *new_version (may be NULL) gets the version
 * now in force. A result equal to the policy in force (an empty patch, the
 * same document) changes nothing: AA_OK, no new version, no audit entry. */
AA_EXTERN int aa_runtime_policy_update(const char *json, size_t len, bool patch,
                                       const char *source, uint64_t if_match,
                                       uint64_t *new_version, char *err,
                                       size_t errcap);

/* The user's cap on one of the runtime's pools (what
 * torch.cuda.set_per_process_memory_fraction asks for): an override of the
 * pool's settings, combined with its policy section by the one rule
 * (docs/policy.md, "A pool's settings": the pool's limit is the smallest of
 * the section's limit_bytes and the cap; bytes 0 removes the cap). It goes
 * through the runtime's one transactional path, so it stays in force across
 * every later policy change (PATCH, PUT, patch_policy, the loop's
 * proposals), and is logged once with `source` (NULL: "api") as a new
 * version. AA_OK; AA_ENOENT when pool is not the runtime's (the caller may
 * then set the limit itself, aa_pool_set_limit); AA_ECLOSED when the runtime
 * is not running; AA_EINVAL for a NULL pool. Does not start the runtime. */
AA_EXTERN int aa_runtime_pool_cap(aa_pool *pool, size_t bytes, const char *source);

/* Live tracing's call stacks (docs/operating.md "Tracing a live job"):
 * whether the live block at ptr of pool (one of the runtime's) is in the
 * trace now (tracing on, and the block in the sample), so that a caller
 * gathers its call stack only then; and attaching that stack (text: one
 * frame a line, "file:line:function", innermost first) to the block, stored
 * as the block's frames (trace_frames, a 'c' event) and exported with it.
 * AA_OK, AA_ENOENT (the block is not traced), AA_ECLOSED (no store or no
 * run), AA_ELIMIT (too many distinct stacks this run), AA_EINVAL. Thread
 * safe; never waits on the store. */
AA_EXTERN bool aa_rt_trace_wants(aa_runtime *rt, aa_pool *pool, const void *ptr);
AA_EXTERN int aa_rt_trace_frames(aa_runtime *rt, aa_pool *pool, const void *ptr,
                                 const char *frames, size_t len);
AA_EXTERN bool aa_runtime_trace_wants(aa_pool *pool, const void *ptr);
AA_EXTERN int aa_runtime_trace_frames(aa_pool *pool, const void *ptr, const char *frames,
                                      size_t len);

/* The last out-of-memory record of any runtime pool (its observer, after the
 * release and the retry failed) into *out (may be NULL), and into *total
 * (may be NULL) how many the runtime's pools reported. AA_ENOENT (and *out
 * zeroed) when none happened in this process. The records also go to the
 * store's `ooms` table at the next snapshot tick. */
AA_EXTERN int aa_runtime_last_oom(aa_oom_info *out, uint64_t *total);

/* {"count":N,"last":{record}|null} (what GET /oom will answer for the live
 * part): *out malloc'd, owned by the caller (free()); on failure NULL, *len 0. */
AA_EXTERN int aa_runtime_oom_json(char **out, size_t *len);

/* Stops the server, the loop and the store (flushing it), destroys the
 * pools. After this, pointers from runtime pools are invalid. Safe to call
 * when never started. A process that exits without calling it (as a
 * PyTorch process must) still ends its store run at exit(): the trace ring
 * is written out (waiting while the store's writer makes progress, at most
 * 30 s) and the run's row finished; the pools are left to the process's
 * end. An exit() that cannot get the pools' traces detached within 5 s
 * (called from a signal handler that interrupted an allocation) gives the
 * run up, says so, and exits; aa_runtime_shutdown then does nothing. */
AA_EXTERN void aa_runtime_shutdown(void);

/* ------------------------------------------------ on a runtime given */

/* The same calls on the runtime rt (the default one's are above):
 * aa_rt_pool as aa_runtime_pool, and so on. NULL rt: NULL, 0 or AA_EINVAL. */
AA_EXTERN aa_pool *aa_rt_pool(aa_runtime *rt, aa_backend_kind kind, int device);
AA_EXTERN aa_pool *aa_rt_managed_pool(aa_runtime *rt, int device);
AA_EXTERN int aa_rt_http_port(aa_runtime *rt);
AA_EXTERN int aa_rt_http_address(aa_runtime *rt, char *buf, size_t cap);
AA_EXTERN int aa_rt_token_file(aa_runtime *rt, char *buf, size_t cap);
AA_EXTERN int64_t aa_rt_run_id(aa_runtime *rt);
AA_EXTERN int aa_rt_stats_json(aa_runtime *rt, char **out, size_t *len);
AA_EXTERN int aa_rt_policy_json(aa_runtime *rt, char **out, uint64_t *version);
AA_EXTERN int aa_rt_policy_update(aa_runtime *rt, const char *json, size_t len,
                                  bool patch, const char *source,
                                  uint64_t if_match, uint64_t *new_version,
                                  char *err, size_t errcap);
AA_EXTERN int aa_rt_pool_cap(aa_runtime *rt, aa_pool *pool, size_t bytes,
                             const char *source);
/* The user's cap on pool in force (0: none). */
AA_EXTERN size_t aa_rt_pool_cap_get(aa_runtime *rt, const aa_pool *pool);
AA_EXTERN int aa_rt_last_oom(aa_runtime *rt, aa_oom_info *out, uint64_t *total);
AA_EXTERN int aa_rt_oom_json(aa_runtime *rt, char **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_RUNTIME_H */
