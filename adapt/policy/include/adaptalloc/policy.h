/*
 * adaptalloc/policy.h — the policy model: JSON parse, validate, serialise,
 * merge patch, and what a policy means for a pool, the loop and telemetry.
 *
 * A policy is a JSON document (format and every field: docs/policy.md; JSON
 * Schema: policies/schema.json). It holds, per pool ("device", "pinned",
 * "host"): slab size, largest small class, the class table (explicit sizes,
 * explicit {size, cache_limit, prefill} objects, or a ladder spec), thread
 * cache bounds, the large path, a reserve limit and (device and regions)
 * the backend: "managed" memory with its advice and safety cap; the adapt loop's
 * parameters; telemetry settings. Every field has a default, so "{}" is a
 * valid policy (the built-in default).
 *
 * Validation is whole-document and happens before anything is returned: on
 * any error *out is NULL, nothing changes, and err (when non-NULL) gets one
 * NUL-terminated message naming the JSON path and the rule, for example
 *   pools.device.classes[3]: 1000 is not a multiple of 512
 * A message quotes a number as the document wrote it, every digit however
 * many (12345678901234567890 is not the double's 12345678901234567168, a
 * 1000-digit integer is not "inf"). So a message is as long as the number it
 * quotes: the _msg forms hand it back whole (malloc'd); the others cut it to
 * errcap - 1 bytes (never half a UTF-8 character), which holds it whole when
 * errcap is at least len + 1024 (a path, the rule and the number).
 * Documents over AA_POLICY_MAX_BYTES or nested deeper than AA_POLICY_MAX_DEPTH
 * are refused before cJSON sees them; so are invalid UTF-8, duplicate keys,
 * unknown keys, wrong types, non-integers where integers are due, numbers
 * negative or beyond 2^53, out-of-range and contradictory values.
 *
 * Ownership: every aa_policy * returned here is owned by the caller and freed
 * with aa_policy_free(). A policy is immutable except for its version, so one
 * policy may be read from many threads at once; aa_policy_set_version must
 * not race with readers.
 *
 * Version: a uint64 that the owner of the policy in force (the runtime) bumps
 * on every change. It is serialised as "version" and parsed back, but
 * aa_policy_equal ignores it (it compares content).
 */
#ifndef ADAPTALLOC_POLICY_H
#define ADAPTALLOC_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/common.h"
#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AA_POLICY_MAX_BYTES (64u * 1024u) /* larger documents are refused */
#define AA_POLICY_MAX_DEPTH 32            /* deeper nesting is refused */
#define AA_POLICY_ERR_CAP 256             /* holds any message but the number it quotes */
#define AA_POLICY_MAX_REGIONS 16          /* pools.regions sections at most */

typedef struct aa_policy aa_policy; /* opaque */

/* The adapt loop's knobs (policy "adapt" object; defaults in docs/policy.md).
 * Fractions are in [0, 1]; counts of intervals are loop steps. */
typedef struct aa_adapt_params {
  bool enabled;                   /* run the loop at all (default true) */
  uint32_t interval_ms;           /* time between steps (default 1000) */
  uint32_t max_classes;           /* never add a class beyond this many (default 64) */
  uint32_t max_adds_per_interval; /* exact classes added per step at most (default 4) */
  uint64_t min_requests;          /* a size or class needs this many requests in the
                                    interval before any rule looks at it (default 64) */
  double hot_fraction;            /* a size is hot at this share of the interval's
                                    small requests (default 0.05) */
  double waste_threshold;         /* add an exact class when the serving class wastes
                                    more than this of a hot size (default 0.10) */
  double miss_rate_threshold;     /* grow/prefill a class whose misses/allocs in the
                                    interval exceed this (default 0.10) */
  uint64_t prefill_max_bytes;     /* a grown class's prefill is capped at this (default 64 MiB) */
  uint32_t cold_intervals;        /* an added class with no allocations for this many
                                    intervals is retired (default 10) */
  uint64_t trim_threshold_bytes;  /* trim when reserved - in_use exceeds this; 0 = never
                                    (default 256 MiB) */
  uint32_t min_class_age;         /* hysteresis: an added class is kept at least this many
                                    intervals (default 5) */
  uint32_t readd_cooldown;        /* hysteresis: a retired size is not re-added for this many
                                    intervals (default 20) */
  uint32_t grow_cooldown;         /* hysteresis: a class is grown at most once per this many
                                    intervals (default 5) */
  uint32_t trim_cooldown;         /* hysteresis: a pool is trimmed at most once per this many
                                    intervals (default 5) */
} aa_adapt_params;

/* Telemetry settings (policy "telemetry" object). */
typedef struct aa_telemetry_params {
  uint32_t snapshot_interval_ms; /* store snapshot period (default 1000) */
  bool trace;                    /* record every alloc/free event (default false) */
  bool histogram;                /* histogram + heavy hitters on (default true) */
  uint64_t retention_bytes;      /* store size bound, 0 = none (default 1 GiB) */
  uint64_t retention_age_s;      /* store age bound, 0 = none (default 7 days) */
  /* live tracing (docs/operating.md "Tracing a live job") */
  uint32_t trace_sample;     /* trace one allocation in N (1: all; 0: none by
                                count, only trace_min_bytes) (default 1) */
  uint64_t trace_min_bytes;  /* also every allocation of at least this many
                                bytes (0: none by size) (default 0) */
  uint32_t trace_seconds;    /* tracing turned on ends by itself after this
                                many seconds (0: when turned off) (default 0) */
  uint64_t trace_max_events; /* the store keeps at most this many trace
                                events, the oldest dropped (0: retention's
                                bounds only) (default 0) */
} aa_telemetry_params;

/* The built-in default policy (the same as parsing "{}"). Returns AA_OK or
 * AA_ENOMEM; *out is NULL on failure. */
AA_EXTERN int aa_policy_default(aa_policy **out);

/* Parses and validates a document of len bytes (need not be NUL-terminated).
 * Returns AA_OK; AA_EPARSE for malformed JSON, bad UTF-8, too big or too deep;
 * AA_EINVAL for a document that parses but breaks a rule; AA_ENOMEM. On error
 * *out is NULL and err (errcap bytes, may be NULL/0) gets the message. */
AA_EXTERN int aa_policy_parse(const char *json, size_t len, aa_policy **out,
                              char *err, size_t errcap);
/* The same; on error *errmsg (may be NULL) gets the whole message, malloc'd
 * (the caller free()s it; NULL when out of memory), and NULL on success. */
AA_EXTERN int aa_policy_parse_msg(const char *json, size_t len, aa_policy **out,
                                  char **errmsg);

/* Reads a file and parses it as above. AA_EIO (with the errno text in err) when
 * the file cannot be read; AA_EPARSE when it is over AA_POLICY_MAX_BYTES.
 * Messages are prefixed with the path. */
AA_EXTERN int aa_policy_load_file(const char *path, aa_policy **out, char *err,
                                  size_t errcap);
/* The same, with the whole message malloc'd into *errmsg (as _parse_msg). */
AA_EXTERN int aa_policy_load_file_msg(const char *path, aa_policy **out,
                                      char **errmsg);

/* Complete policies. A policy put in force whole (a start-up file,
 * PUT /policy, aa_runtime_policy_update without patch) must name every part
 * a policy has, so that a fragment or a typo cannot reset a tuned policy to
 * the defaults: pools.device, pools.pinned, pools.host, adapt and telemetry
 * (AA_POLICY_COMPLETE_PARTS, in this order). Fields inside a part may still
 * be left out (they take their defaults; "{}" asks for the part's defaults on
 * purpose); pools.regions sections stay optional (a region without one uses
 * its backend's section). A merge patch changes part of a policy and is not
 * checked. docs/policy.md, "Complete policies". */
#define AA_POLICY_COMPLETE_PARTS "pools.device, pools.pinned, pools.host, adapt, telemetry"

/* Which parts of a complete policy the document (len bytes) leaves out:
 * *n (may be NULL) gets their count, missing (cap bytes, may be NULL/0) their
 * names joined by ", " in the order above ("" when none). Only the document's
 * shape is read (aa_policy_parse checks the rest). AA_OK, or AA_EPARSE /
 * AA_ENOMEM / AA_EINVAL (not a JSON object) with the message in missing and
 * *n 0. */
AA_EXTERN int aa_policy_missing(const char *json, size_t len, size_t *n,
                                char *missing, size_t cap);

/* aa_policy_parse and aa_policy_load_file that also refuse an incomplete
 * document: AA_EINVAL with "(root): not a complete policy: missing
 * pools.host, adapt (...)" (the file's path first for a file), *out NULL. */
AA_EXTERN int aa_policy_parse_complete(const char *json, size_t len,
                                       aa_policy **out, char *err, size_t errcap);
AA_EXTERN int aa_policy_load_file_complete(const char *path, aa_policy **out,
                                           char *err, size_t errcap);
AA_EXTERN int aa_policy_load_file_complete_msg(const char *path, aa_policy **out,
                                               char **errmsg);

/* Serialises a policy as a pretty-printed JSON object, every field explicit
 * (defaults included), "version" first. malloc'd, NUL-terminated; the caller
 * free()s it. NULL on out of memory. Parsing the result gives an equal policy
 * with the same version. */
AA_EXTERN char *aa_policy_to_json(const aa_policy *p);

/* RFC 7386 JSON merge patch: applies `patch` (len bytes) to base's JSON form
 * and validates the result as a whole document. A null member deletes the
 * field, which then takes its default. The result keeps base's version unless
 * the patch sets "version". Errors as for aa_policy_parse; base is unchanged. */
AA_EXTERN int aa_policy_merge_patch(const aa_policy *base, const char *patch,
                                    size_t len, aa_policy **out, char *err,
                                    size_t errcap);
/* The same, with the whole message malloc'd into *errmsg (as _parse_msg). */
AA_EXTERN int aa_policy_merge_patch_msg(const aa_policy *base, const char *patch,
                                        size_t len, aa_policy **out,
                                        char **errmsg);

/* True when a and b have the same content (the version is not compared).
 * Two NULLs are equal. */
AA_EXTERN bool aa_policy_equal(const aa_policy *a, const aa_policy *b);

/* A deep copy (version included), or NULL on out of memory. */
AA_EXTERN aa_policy *aa_policy_clone(const aa_policy *p);

/* NULL is a no-op. */
AA_EXTERN void aa_policy_free(aa_policy *p);

AA_EXTERN uint64_t aa_policy_version(const aa_policy *p);
AA_EXTERN void aa_policy_set_version(aa_policy *p, uint64_t v);

/* The policy's "name" (the model it was written for; "" when absent). The
 * string lives as long as p. */
AA_EXTERN const char *aa_policy_name(const aa_policy *p);

/* Whether `name` may name a region (pools.regions.<name>, the runtime's
 * named pools): 1 to AA_REGION_NAME_MAX bytes of ASCII letters, digits, '_'
 * and '-', the first a letter. AA_OK, or AA_EINVAL with err (may be NULL)
 * saying what is wrong with it. */
AA_EXTERN int aa_policy_region_name_check(const char *name, char *err,
                                          size_t errcap);

/* Whether the policy has a section pools.regions.<name>. */
AA_EXTERN bool aa_policy_has_region(const aa_policy *p, const char *name);

/* What the policy says for one pool: pool is "device", "pinned", "host" or
 * "regions.<name>" (a region's section; AA_ENOENT when the policy has none).
 * cfg: on entry the caller's defaults (aa_pool_config_init plus backend and
 * name); on return slab_size, min_block, max_small, classes_per_doubling,
 * tcache_blocks, tcache_bytes, large_mode, large_cache_bytes, limit_bytes and
 * telemetry are set from the policy (other fields untouched). cfg may be NULL.
 * classes: the explicit class table the policy implies (a ladder spec is
 * expanded), ascending, its last block_size equal to max_small; *n gets the
 * full count, up to cap entries are copied (classes may be NULL when cap is 0:
 * then only cfg and *n are filled in; n may be NULL). Returns AA_OK, AA_EINVAL
 * for a NULL policy or an unknown pool name, AA_ERANGE when classes is given
 * and cap is smaller than the count (cfg and the first cap entries are still
 * filled in). */
AA_EXTERN int aa_policy_pool_config(const aa_policy *p, const char *pool,
                                    aa_pool_config *cfg, aa_class_spec *classes,
                                    size_t cap, size_t *n);

/* The backend section `pool` selects (as for aa_policy_pool_config):
 * *managed (may be NULL) is true for backend "managed"; then *mc (may be
 * NULL; aa_managed_config_init'ed first, its device left 0 for the caller
 * to set) gets the advice and allow_oversubscribe. AA_OK; AA_ENOENT for a
 * region section the policy lacks; AA_EINVAL for a NULL policy or an
 * unknown pool name. */
AA_EXTERN int aa_policy_pool_backend(const aa_policy *p, const char *pool,
                                     bool *managed, aa_managed_config *mc);

/* The section that configures a pool: "regions.<name>" when the pool serves
 * a region the policy has a section for, else its backend's ("device",
 * "pinned" or "host": aa_policy_kind_name of its backend's kind,
 * aa_policy_pool_kind of a pool). aa_policy_section_for is the
 * same rule from a backend kind and a region name (NULL or "" for none).
 * Both write into buf (48 bytes hold any section) and return it. */
AA_EXTERN const char *aa_policy_kind_name(aa_backend_kind kind);
AA_EXTERN const char *aa_policy_pool_kind(const aa_pool *pool);
AA_EXTERN const char *aa_policy_section_for(const aa_policy *p, const char *kind,
                                            const char *region, char *buf,
                                            size_t cap);
AA_EXTERN const char *aa_policy_pool_section(const aa_policy *p,
                                             const aa_pool *pool, char *buf,
                                             size_t cap);

/* Applies the policy's class table (with per-class cache limits and prefill),
 * limit_bytes, large.map_runs and large.stream_wait of section `pool` (as for
 * aa_policy_pool_config) to one pool, as it is made: on error nothing
 * changes. slab_size, max_small and the thread-cache bounds only take effect
 * when a pool is created (aa_policy_pool_config); a pool whose max_small
 * differs from the policy's gets AA_EINVAL; AA_ENOENT for a region section
 * the policy lacks; AA_ELIMIT when the pool has no free class slot. */
AA_EXTERN int aa_policy_apply(const aa_policy *p, const char *pool,
                              aa_pool *target);

/* A pool's settings are the policy's section for it combined with the
 * pool's named overrides by one rule (docs/policy.md, "A pool's settings"):
 *   limit = the smallest of the section's limit_bytes and every override
 *           that is set; 0 (no limit) when none is.
 * The runtime holds the overrides (runtime/src/runtime_policy.c) and hands
 * them to every change; a region's limit is its section's limit_bytes. */
typedef struct aa_pool_overrides {
  size_t user_limit; /* the user's cap (torch.cuda.set_per_process_memory_
                        fraction, aa_runtime_pool_cap); 0 = none */
} aa_pool_overrides;

/* The rule above: the limit a pool gets from its section's limit_bytes
 * and its overrides (ov may be NULL: none). */
AA_EXTERN size_t aa_policy_limit_rule(uint64_t policy_limit,
                                      const aa_pool_overrides *ov);

/* A copy of base whose section `section` ("device", "pinned", "host" or
 * "regions.<name>", made from pools.device when base has none) has the
 * explicit class table classes[0 .. n) (ascending, topped by the section's
 * max_small, within the parser's bounds and the prefill limits): how the
 * loop's proposal becomes a policy. AA_OK with *out (the caller's:
 * aa_policy_free), else AA_EINVAL / AA_ELIMIT (no room for a region
 * section) / AA_ENOMEM with *out NULL and err saying why. The version is
 * base's. */
AA_EXTERN int aa_policy_with_classes(const aa_policy *base, const char *section,
                                     const aa_class_spec *classes, size_t n,
                                     aa_policy **out, char *err, size_t errcap);

/* Changing live pools to a new policy, all of them or none. prepare checks,
 * for each of the n pools in its section of next (aa_policy_pool_section):
 * the settings the pool keeps from its creation against cur (the policy in
 * force; NULL skips that check), its max_small, that the prefill fits what
 * the machine can give, and the class table, whose class slots it holds
 * (aa_pool_classes_prepare). Nothing changes. AA_OK with *out set, or
 * AA_ECONFLICT (a setting the pool keeps from its creation would change:
 * slab_size, max_small, large.mode, large.cache_bytes, large.page_bytes,
 * the backend; err names it, the section and the pool), AA_EINVAL (err
 * names the section, the pool and the rule), AA_ENOMEM, with *out NULL and
 * nothing held. commit then writes every pool's table, limit (the rule
 * above, with the pool's overrides: _prepare_ov's ov[i] for pools[i], ov
 * may be NULL; _prepare has none), large.map_runs and large.stream_wait
 * and cannot fail; abort drops the change. Each prepared change goes to
 * exactly one of them, which frees it. The pools must stay alive until
 * then, and the caller serialises changes of one pool's policy. */
typedef struct aa_policy_change aa_policy_change;
AA_EXTERN int aa_policy_change_prepare(const aa_policy *cur, const aa_policy *next,
                                       aa_pool *const *pools, size_t n,
                                       aa_policy_change **out, char *err,
                                       size_t errcap);
AA_EXTERN int aa_policy_change_prepare_ov(const aa_policy *cur,
                                          const aa_policy *next,
                                          aa_pool *const *pools,
                                          const aa_pool_overrides *ov, size_t n,
                                          aa_policy_change **out, char *err,
                                          size_t errcap);
AA_EXTERN void aa_policy_change_commit(aa_policy_change *ch);
AA_EXTERN void aa_policy_change_abort(aa_policy_change *ch);

/* The adapt and telemetry sections as value types. p NULL gives the defaults. */
AA_EXTERN void aa_policy_adapt_params(const aa_policy *p, aa_adapt_params *out);
AA_EXTERN void aa_policy_telemetry_params(const aa_policy *p,
                                          aa_telemetry_params *out);

/* The built-in defaults without building a policy. */
AA_EXTERN void aa_adapt_params_default(aa_adapt_params *out);
AA_EXTERN void aa_telemetry_params_default(aa_telemetry_params *out);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_POLICY_H */
