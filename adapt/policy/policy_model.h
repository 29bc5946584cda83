/*
 * policy_model.h — the in-memory policy (private to adapt/).
 *
 * Glossary: a policy has three pool sections (device, pinned, host), up to
 * AA_POLICY_MAX_REGIONS region sections (pools.regions.<name>: a pool
 * section whose absent fields are pools.device's), an adapt section and a
 * telemetry section. A pool section's class table is either a
 * ladder spec (min, per_doubling; its top is always max_small) or an explicit
 * list of aa_class_spec. Every field holds a value: defaults are filled in at
 * parse time, so two policies are equal exactly when their fields are.
 *
 * Files (adapt/policy/): policy.c (model, defaults from core, accessors,
 * pool config), policy_parse.c (pre-scan, cJSON tree validation; the strict
 * RFC 8259 check before cJSON is util's, util/src/json_strict.c), policy_json.c
 * (writer, merge patch), policy_apply.c (aa_policy_apply, the only caller
 * of the live pool).
 */
#ifndef ADAPTALLOC_POLICY_MODEL_H
#define ADAPTALLOC_POLICY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/cuda.h" /* aa_managed_location */
#include "adaptalloc/policy.h"

#include "cJSON.h"
#include "adaptalloc/internal/util.h"      /* util/: aa__buf, the strict check */
#include "adaptalloc/internal/json_text.h" /* numbers' texts on the tree */

#define AA__POLICY_POOLS 3 /* device, pinned, host (this order) */
/* The default policy's device and host pools (policy.c says why): slabs up
 * to 16 KiB, one class per doubling, the expandable large path. */
#define AA__POLICY_DEF_MAX_SMALL (16u * 1024u)
#define AA__POLICY_DEF_PER_DOUBLING 1u
#define AA__POLICY_NAME_MAX 128
#define AA__POLICY_DESC_MAX 1024

typedef enum aa__classes_kind {
  AA__CLASSES_LADDER = 0,
  AA__CLASSES_EXPLICIT = 1
} aa__classes_kind;

typedef struct aa__pool_policy {
  uint64_t slab_size;
  uint64_t max_small;
  aa__classes_kind classes_kind;
  uint64_t ladder_min;
  uint32_t ladder_per_doubling;
  uint32_t n_explicit;
  aa_class_spec explicit_classes[AA_MAX_CLASSES];
  uint32_t tcache_blocks;
  uint64_t tcache_bytes;
  aa_large_mode large_mode;
  uint64_t large_cache_bytes;
  uint64_t large_page_bytes; /* large.page_bytes: 0 = the backend's granularity */
  bool large_map_runs;       /* large.map_runs */
  bool large_stitch;         /* large.stitch (fixed while the pool lives) */
  bool large_stitch_grow;    /* large.stitch_grow (likewise; only with large.stitch) */
  double large_stitch_share; /* large.stitch_share (likewise; what it bounds is
                              * large.stitch's) */
  bool large_plan;           /* large.plan (likewise) */
  bool large_stream_wait;    /* large.stream_wait */
  /* large.map_run_pages (1..16) and large.map_run_min_bytes (fixed while the
   * pool lives) */
  uint64_t large_map_run_pages;
  uint64_t large_map_run_min_bytes;
  uint64_t limit_bytes;
  /* backend: "default" (the section's own: device, pinned, host memory) or
   * "managed" (device and regions only), with its advice and the cap */
  bool managed;
  aa_managed_location advise_preferred;   /* advise.preferred_location */
  aa_managed_location advise_accessed_by; /* advise.accessed_by */
  bool advise_read_mostly;                /* advise.read_mostly */
  bool allow_oversubscribe;
} aa__pool_policy;

typedef struct aa__region_policy {
  char name[AA_REGION_NAME_MAX + 1];
  aa__pool_policy pool;
} aa__region_policy;

struct aa_policy {
  uint64_t version;
  char name[AA__POLICY_NAME_MAX];
  char description[AA__POLICY_DESC_MAX];
  aa__pool_policy pools[AA__POLICY_POOLS];
  uint32_t n_regions; /* sorted by name */
  aa__region_policy regions[AA_POLICY_MAX_REGIONS];
  aa_adapt_params adapt;
  aa_telemetry_params telemetry;
};

extern const char *const aa__policy_pool_names[AA__POLICY_POOLS];

/* Index of a pool name, or -1. */
int aa__policy_pool_index(const char *pool);

/* The section a pool name selects: "device", "pinned", "host", or
 * "regions.<name>". AA_OK with *out set; AA_ENOENT for a region the policy
 * has no section for; AA_EINVAL for anything else. */
int aa__policy_section(const aa_policy *p, const char *pool,
                       const aa__pool_policy **out);

/* Fills every field with its default (version 0, empty name). */
void aa__policy_defaults(aa_policy *p);

/* Expands a ladder through core's aa_class_ladder (the one ladder rule) into
 * class specs. Writes up to cap entries (out may be NULL when cap is 0) and
 * returns the full count. */
size_t aa__ladder_expand(uint64_t min, uint64_t max, uint32_t per_doubling,
                         aa_class_spec *out, size_t cap);

/* Pre-scan (size, NUL, UTF-8, depth), bounded parse, the strict check,
 * duplicate keys; each number item keeps its text (json_text.h). On success
 * *out is the tree (caller: cJSON_Delete). Errors: AA_EPARSE or AA_ENOMEM
 * with the message appended to err (may be NULL). */
int aa__policy_parse_tree(const char *json, size_t len, cJSON **out, aa__buf *err);

/* Validates a whole tree into *out (which it fills from the defaults first).
 * AA_EINVAL with the message appended to err on a rule violation. */
int aa__policy_from_tree(const cJSON *root, aa_policy *out, aa__buf *err);

/* RFC 7386 MergePatch(target, patch) on cJSON trees. Consumes target (may be
 * NULL); returns the new target (the caller owns it: cJSON_Delete), or NULL
 * when out of memory. patch is not changed. */
cJSON *aa__json_merge_patch(cJSON *target, const cJSON *patch);

#endif /* ADAPTALLOC_POLICY_MODEL_H */
