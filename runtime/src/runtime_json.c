/*
 * runtime_json.c — the runtime's string buffer and the /history merge.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "adaptalloc/common.h"
#include "runtime_json.h"

void aa__strbuf_init(aa__strbuf *sb) { memset(sb, 0, sizeof(*sb)); }

void aa__strbuf_free(aa__strbuf *sb) {
  free(sb->data);
  memset(sb, 0, sizeof(*sb));
}

int aa__strbuf_reserve(aa__strbuf *sb, size_t extra) {
  size_t want, cap;
  char *p;
  if (sb->failed)
    return AA_ENOMEM;
  want = sb->len + extra + 1;
  if (want <= sb->cap)
    return AA_OK;
  cap = sb->cap ? sb->cap : 1024;
  while (cap < want)
    cap *= 2;
  p = realloc(sb->data, cap);
  if (p == NULL) {
    sb->failed = true;
    return AA_ENOMEM;
  }
  sb->data = p;
  sb->cap = cap;
  return AA_OK;
}

void aa__strbuf_printf(aa__strbuf *sb, const char *fmt, ...) {
  va_list ap;
  int n;
  va_start(ap, fmt);
  n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0 || aa__strbuf_reserve(sb, (size_t)n) != AA_OK)
    return;
  va_start(ap, fmt);
  vsnprintf(sb->data + sb->len, sb->cap - sb->len, fmt, ap);
  va_end(ap);
  sb->len += (size_t)n;
}

void aa__strbuf_json_str(aa__strbuf *sb, const char *s) {
  const unsigned char *p;
  if (s == NULL) {
    aa__strbuf_printf(sb, "null");
    return;
  }
  aa__strbuf_printf(sb, "\"");
  for (p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      aa__strbuf_printf(sb, "\\%c", *p);
    else if (*p < 0x20)
      aa__strbuf_printf(sb, "\\u%04x", *p);
    else
      aa__strbuf_printf(sb, "%c", *p);
  }
  aa__strbuf_printf(sb, "\"");
}

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
