/*
 * policy_parse.h — what the files of the policy parser share:
 *   policy_tree.c    bytes -> a cJSON tree: the raw-byte pre-scan, cJSON,
 *                    trailing bytes, duplicate keys (aa__policy_parse_tree)
 *   policy_fields.c  error messages with their JSON path, and the typed
 *                    field readers the validating walk is made of
 *   policy_parse.c   tree -> a validated policy, section by section
 *                    (aa__policy_from_tree)
 * Each shared function below sits under the file that defines it; the
 * shared names are aa__pv_<what> (policy validation).
 */
#ifndef ADAPTALLOC_POLICY_PARSE_H
#define ADAPTALLOC_POLICY_PARSE_H

#include "policy_model.h"

#define PATH_CAP 256

/* Where the error message goes (through aa__pv_fail): a string builder,
 * so that a message may quote a number of any length as written. */
typedef struct vctx {
  aa__buf *err; /* may be NULL: no message */
} vctx;

/* policy_fields.c */
/* Writes "path: message" into v and returns AA_EINVAL. */
int aa__pv_fail(vctx *v, const char *path, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* A key made safe for a message (see policy_fields.c). */
void aa__pv_key_safe(char *dst, size_t cap, const char *key);
/* dst (PATH_CAP) = parent.key, parent[i]. */
void aa__pv_path_key(char *dst, const char *parent, const char *key);
void aa__pv_path_index(char *dst, const char *parent, size_t i);
/* "an object", "a number", ...: what a message calls an item's type. */
const char *aa__pv_type_name(const cJSON *item);
/* item must be an object whose keys are all in `keys` (NULL-terminated). */
int aa__pv_check_object(vctx *v, const cJSON *item, const char *path, const char *const *keys);
/* The member `key` of obj (exact, case-sensitive) or NULL. */
const cJSON *aa__pv_member(const cJSON *obj, const char *key);
/* An integer in [lo, hi] (exactly representable), a string into dst[cap].
 * Messages quote the number as the document wrote it. */
int aa__pv_get_uint(vctx *v, const cJSON *item, const char *path, uint64_t lo, uint64_t hi,
                    uint64_t *out);
int aa__pv_get_u32(vctx *v, const cJSON *item, const char *path, uint32_t lo, uint32_t hi,
                   uint32_t *out);
int aa__pv_get_string(vctx *v, const cJSON *item, const char *path, char *dst, size_t cap);

/* Convenience: look up key; absent leaves *out alone and *present false. */
#define FIELD(obj, key, pathbuf, parent) \
  (aa__pv_path_key((pathbuf), (parent), (key)), aa__pv_member((obj), (key)))

/* Optional members: absent leaves *out alone and returns AA_OK. */
int aa__pv_opt_uint(vctx *v, const cJSON *obj, const char *parent, const char *key, uint64_t lo,
                    uint64_t hi, uint64_t *out);
int aa__pv_opt_u32(vctx *v, const cJSON *obj, const char *parent, const char *key, uint32_t lo,
                   uint32_t hi, uint32_t *out);
int aa__pv_opt_frac(vctx *v, const cJSON *obj, const char *parent, const char *key, bool lo_open,
                    bool hi_open, double *out);
int aa__pv_opt_bool(vctx *v, const cJSON *obj, const char *parent, const char *key, bool *out);

/* policy_tree.c and policy_parse.c: aa__policy_parse_tree and
 * aa__policy_from_tree, declared in policy_model.h. */

#endif /* ADAPTALLOC_POLICY_PARSE_H */
