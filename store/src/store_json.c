/*
 * store_json.c — the store's counters as one JSON object (for /stats and
 * the tools); strings go through the one escaper, adaptalloc/internal/util.h.
 *
 * Entry point: aa_store_stats_json.
 */
#include <stdio.h>
#include <string.h>

#include "store_internal.h"
#include "adaptalloc/internal/util.h"

/* A fixed buffer that counts what does not fit (snprintf's contract). */
typedef struct fixed_sink {
  char *buf;
  size_t cap;
  size_t len;
} fixed_sink;

static void fixed_put(void *sink, const char *s, size_t n) {
  fixed_sink *f = sink;
  for (size_t i = 0; i < n; i++, f->len++)
    if (f->len + 1 < f->cap) f->buf[f->len] = s[i];
}

/* Appends s as a JSON string (the one writer, adaptalloc/internal/util.h) to buf at
 * *len. */
static void json_str(char *buf, size_t cap, size_t *len, const char *s) {
  fixed_sink f = {buf, cap, *len};
  aa__json_put(fixed_put, &f, s, strlen(s));
  *len = f.len;
}

size_t aa_store_stats_json(const aa_store_stats *s, char *buf, size_t cap) {
  size_t len = 0;
  char tmp[1];
  if (buf == NULL || cap == 0) {
    buf = tmp;
    cap = 1;
  }
  if (s == NULL) {
    buf[0] = '\0';
    return 0;
  }
#define APPEND(...)                                                           \
  do {                                                                        \
    int k = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, \
                     __VA_ARGS__);                                            \
    if (k > 0) len += (size_t)k;                                              \
  } while (0)
  APPEND("{\"enabled\":%s,\"last_error\":\"%s\",\"last_error_msg\":",
         s->enabled ? "true" : "false",
         s->last_error != AA_OK ? aa_errname(s->last_error) : "");
  json_str(buf, cap, &len, s->last_error_msg);
  APPEND(",\"run_id\":%lld,\"snapshots_queued\":%llu,\"snapshots_written\":%llu,"
         "\"snapshots_dropped\":%llu,\"policy_changes_written\":%llu,"
         "\"policy_changes_dropped\":%llu,\"events_queued\":%llu,"
         "\"events_written\":%llu,\"events_dropped\":%llu,"
         "\"transactions\":%llu,\"retention_runs\":%llu,"
         "\"rows_deleted\":%llu,\"db_bytes\":%llu,\"ooms_written\":%llu,"
         "\"ooms_dropped\":%llu,\"events_evicted\":%llu,\"trace_max_events\":%llu,"
         "\"frames_written\":%llu,\"frames_dropped\":%llu}",
         (long long)s->run_id, (unsigned long long)s->snapshots_queued,
         (unsigned long long)s->snapshots_written,
         (unsigned long long)s->snapshots_dropped,
         (unsigned long long)s->policy_changes_written,
         (unsigned long long)s->policy_changes_dropped,
         (unsigned long long)s->events_queued,
         (unsigned long long)s->events_written,
         (unsigned long long)s->events_dropped,
         (unsigned long long)s->transactions,
         (unsigned long long)s->retention_runs,
         (unsigned long long)s->rows_deleted,
         (unsigned long long)s->db_bytes,
         (unsigned long long)s->ooms_written,
         (unsigned long long)s->ooms_dropped,
         (unsigned long long)s->events_evicted,
         (unsigned long long)s->trace_max_events,
         (unsigned long long)s->frames_written,
         (unsigned long long)s->frames_dropped);
#undef APPEND
  if (len < cap) {
    buf[len] = '\0';
  } else {
    buf[cap - 1] = '\0';
  }
  return len;
}
