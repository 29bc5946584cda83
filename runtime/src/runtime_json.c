/*
 * runtime_json.c — the /history merge.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "adaptalloc/common.h"
#include "runtime_json.h"

int aa__rt_merge_history(const char *snapshots_json, const char *changes_json,
                         char **out, size_t *len) {
  cJSON *snaps = NULL, *changes = NULL, *root = NULL, *item;
  int rc = AA_ENOMEM;
  char *text;

  *out = NULL;
  *len = 0;
  snaps = cJSON_Parse(snapshots_json);
  changes = cJSON_Parse(changes_json);
  if (snaps == NULL || changes == NULL) {
    rc = AA_EIO;
    goto done;
  }
  root = cJSON_CreateObject();
  if (root == NULL)
    goto done;
  item = cJSON_DetachItemFromObject(snaps, "run");
  if (item != NULL)
    cJSON_AddItemToObject(root, "run", item);
  item = cJSON_DetachItemFromObject(snaps, "snapshots");
  cJSON_AddItemToObject(root, "snapshots", item ? item : cJSON_CreateArray());
  item = cJSON_DetachItemFromObject(changes, "changes");
  cJSON_AddItemToObject(root, "policy_changes", item ? item : cJSON_CreateArray());
  text = cJSON_PrintUnformatted(root);
  if (text == NULL)
    goto done;
  *out = text;
  *len = strlen(text);
  rc = AA_OK;
done:
  cJSON_Delete(root);
  cJSON_Delete(snaps);
  cJSON_Delete(changes);
  return rc;
}
