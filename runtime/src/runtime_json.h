/*
 * runtime_json.h — a growable string buffer for the runtime's JSON answers,
 * and the /history merge of the store's two readers.
 */
#ifndef AA_RUNTIME_JSON_H
#define AA_RUNTIME_JSON_H

#include <stdbool.h>
#include <stddef.h>

/* A NUL-terminated, malloc'd, growing buffer. After an allocation failure
 * `failed` is set and further appends do nothing; the owner frees `data`
 * with aa__strbuf_free or takes it (then frees it with free()). */
typedef struct aa__strbuf {
  char *data;
  size_t len;
  size_t cap;
  bool failed;
} aa__strbuf;

void aa__strbuf_init(aa__strbuf *sb);
void aa__strbuf_free(aa__strbuf *sb);
/* Makes room for `extra` more bytes (plus the NUL). AA_OK or AA_ENOMEM. */
int aa__strbuf_reserve(aa__strbuf *sb, size_t extra);
void aa__strbuf_printf(aa__strbuf *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal (quoted, escaped); NULL gives null. */
void aa__strbuf_json_str(aa__strbuf *sb, const char *s);

/* Builds /history's {"run":..,"snapshots":[..],"policy_changes":[..]} from
 * the store's history and policy-log answers. *out malloc'd. */
int aa__rt_merge_history(const char *snapshots_json, const char *changes_json,
                         char **out, size_t *len);

#endif
