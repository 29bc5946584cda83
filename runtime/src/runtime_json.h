/*
 * runtime_json.h — the /history merge of the store's two readers. The
 * runtime's JSON answers are built in aa__buf (adaptalloc/internal/util.h).
 */
#ifndef AA_RUNTIME_JSON_H
#define AA_RUNTIME_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "adaptalloc/internal/util.h"

/* Builds /history's {"run":..,"snapshots":[..],"policy_changes":[..]} from
 * the store's history and policy-log answers. *out malloc'd. */
int aa__rt_merge_history(const char *snapshots_json, const char *changes_json,
                         char **out, size_t *len);

#endif
