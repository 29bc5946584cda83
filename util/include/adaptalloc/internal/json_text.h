/*
 * adaptalloc/internal/json_text.h — a number's text as the document wrote
 * it, kept on cJSON's tree, for the modules that read JSON with cJSON (the
 * policy parser, the replay tool's histogram files). cJSON reads a number
 * into a double and forgets its text: 12345678901234567890 becomes
 * 12345678901234567168, a 1000-digit integer inf. The strict check
 * (aa__json_strict_check) lists every number token in document order; this
 * header copies each token's text into its cJSON item's valuestring, which
 * cJSON leaves unused for numbers, so that a message quotes the number
 * exactly.
 *
 * Header-only (static inline) because util's objects also go into the core
 * library, which does not link cJSON; include it after <cJSON.h>.
 *
 * Ownership: the texts belong to the tree. cJSON_Delete frees an item's
 * valuestring whatever its type, and cJSON_Duplicate copies it (cJSON 1.7;
 * test_adapt_policy_number_text_survives checks both), so a text lives and
 * dies with its item, merge patch copies included. cJSON_Print ignores it.
 */
#ifndef AA_INTERNAL_JSON_TEXT_H
#define AA_INTERNAL_JSON_TEXT_H

#include <string.h>

#include "adaptalloc/common.h"
#include "adaptalloc/internal/util.h"

static inline int aa__json_text_walk(cJSON *item, const char *json,
                                     const aa__json_numbers *nums, size_t *k) {
  for (; item != NULL; item = item->next) {
    if (cJSON_IsNumber(item)) {
      const struct aa__json_token *t;
      char *s;
      if (*k >= nums->n)
        return AA_EINVAL;
      t = &nums->at[(*k)++];
      if (item->valuestring != NULL)
        continue;
      s = (char *)cJSON_malloc(t->len + 1);
      if (s == NULL)
        return AA_ENOMEM;
      memcpy(s, json + t->off, t->len);
      s[t->len] = '\0';
      item->valuestring = s;
    } else if (item->child != NULL) {
      int rc = aa__json_text_walk(item->child, json, nums, k);
      if (rc != AA_OK)
        return rc;
    }
  }
  return AA_OK;
}

/* Gives each number of root (parsed by cJSON from json) its text from nums
 * (the strict check's list for the same json). AA_OK; AA_ENOMEM. A tree
 * whose numbers do not pair with the list one for one (never, for the same
 * bytes) keeps what was given and reads as the doubles. */
static inline int aa__json_text_attach(cJSON *root, const char *json,
                                       const aa__json_numbers *nums) {
  size_t k = 0;
  int rc;
  if (root == NULL || nums == NULL)
    return AA_OK;
  rc = aa__json_text_walk(root, json, nums, &k);
  return rc == AA_ENOMEM ? AA_ENOMEM : AA_OK;
}

/* The number's text as written, or NULL (not a number, or no text kept). */
static inline const char *aa__json_number_text(const cJSON *item) {
  return cJSON_IsNumber(item) ? item->valuestring : NULL;
}

#endif
