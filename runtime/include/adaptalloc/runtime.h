/*
 * adaptalloc/runtime.h — the embedding glue.
 *
 * The runtime reads the ADAPTALLOC_* environment (see README "Environment"),
 * creates pools on demand (one per CUDA device, one pinned, one host), loads
 * the policy, and starts the store's writer thread, the policy loop and the
 * HTTP server. Everything starts on first use; nothing it does can make an
 * allocation fail: a store, policy or server that cannot start is logged once
 * and left off.
 *
 * Ownership: the runtime is a process-wide singleton; pools it returns are
 * owned by it and live until aa_runtime_shutdown().
 */
#ifndef ADAPTALLOC_RUNTIME_H
#define ADAPTALLOC_RUNTIME_H

#include "adaptalloc/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AA_RUNTIME_CONFIG_VERSION 1

/* Overrides for the environment (NULL/0 fields fall back to the environment,
 * then to the defaults). */
typedef struct aa_runtime_config {
  uint32_t version;        /* AA_RUNTIME_CONFIG_VERSION */
  const char *model;       /* ADAPTALLOC_MODEL */
  const char *policy_path; /* ADAPTALLOC_POLICY */
  const char *policy_dir;  /* ADAPTALLOC_POLICY_DIR */
  const char *db;          /* ADAPTALLOC_DB ("off" disables) */
  const char *http;        /* ADAPTALLOC_HTTP ("off" disables) */
  const char *token;       /* ADAPTALLOC_TOKEN */
  int trace;               /* ADAPTALLOC_TRACE: -1 = from env, 0/1 */
  bool quiet;              /* no log lines on stderr except errors */
} aa_runtime_config;

AA_EXTERN void aa_runtime_config_init(aa_runtime_config *cfg);

/* Starts the runtime once (later calls return the first call's result).
 * cfg may be NULL (environment only). Returns AA_OK even when optional parts
 * (store, server, policy) failed to start; those failures are logged and
 * visible in /stats. */
AA_EXTERN int aa_runtime_init(const aa_runtime_config *cfg);

/* Whether the runtime has started (aa_runtime_init ran, or a pool was asked
 * for) and is not shut down. */
AA_EXTERN bool aa_runtime_started(void);

/* The pool for a backend kind (AA_BACKEND_DEVICE with device >= 0,
 * AA_BACKEND_PINNED, AA_BACKEND_HOST), created on first use; starts the
 * runtime if needed. NULL if that backend cannot be had (no GPU, no CUDA). */
AA_EXTERN aa_pool *aa_runtime_pool(aa_backend_kind kind, int device);

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

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_RUNTIME_H */
