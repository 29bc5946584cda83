/*
 * store_stub.c — the store when built with -DAA_WITH_STORE=OFF: every entry
 * point of adaptalloc/store.h exists and returns AA_ENOTSUP (or does nothing),
 * so callers need no #ifdef.
 */
#include <string.h>

#include "adaptalloc/store.h"

void aa_store_config_init(aa_store_config *cfg) {
  if (cfg == NULL) return;
  memset(cfg, 0, sizeof *cfg);
  cfg->version = AA_STORE_CONFIG_VERSION;
}

void aa_store_query_init(aa_store_query *q) {
  if (q == NULL) return;
  memset(q, 0, sizeof *q);
  q->version = AA_STORE_QUERY_VERSION;
  q->limit = 100;
}

int aa_store_open(const aa_store_config *cfg, aa_store **out) {
  (void)cfg;
  if (out != NULL) *out = NULL;
  return AA_ENOTSUP;
}

int aa_store_close(aa_store *st) {
  (void)st;
  return AA_OK;
}

const char *aa_store_db_path(const aa_store *st) {
  (void)st;
  return NULL;
}

int aa_store_begin_run(aa_store *st, const aa_store_run_info *info,
                       int64_t *run_id) {
  (void)st;
  (void)info;
  if (run_id != NULL) *run_id = 0;
  return AA_ENOTSUP;
}

int aa_store_end_run(aa_store *st) {
  (void)st;
  return AA_ENOTSUP;
}

int64_t aa_store_run_id(const aa_store *st) {
  (void)st;
  return 0;
}

int aa_store_snapshot(aa_store *st, const aa_pool_stats *stats) {
  (void)st;
  (void)stats;
  return AA_ENOTSUP;
}

int aa_store_policy_change(aa_store *st, const char *source,
                           uint64_t old_version, uint64_t new_version,
                           const char *reason, const char *policy_json) {
  (void)st;
  (void)source;
  (void)old_version;
  (void)new_version;
  (void)reason;
  (void)policy_json;
  return AA_ENOTSUP;
}

int aa_store_oom(aa_store *st, const aa_oom_info *info) {
  (void)st;
  (void)info;
  return AA_ENOTSUP;
}

void aa_store_ooms_lost(aa_store *st, uint64_t n) {
  (void)st;
  (void)n;
}

int aa_store_ooms_json(const char *db_path, const aa_store_query *q, char **json) {
  (void)db_path;
  (void)q;
  if (json != NULL) *json = NULL;
  return AA_ENOTSUP;
}

void aa_store_trace_push(void *store, const aa_trace_event *ev) {
  (void)store;
  (void)ev;
}

int aa_store_set_retention(aa_store *st, uint64_t max_bytes, uint64_t max_age_s) {
  (void)st;
  (void)max_bytes;
  (void)max_age_s;
  return AA_ENOTSUP;
}

int aa_store_set_trace_bound(aa_store *st, uint64_t max_events) {
  (void)st;
  (void)max_events;
  return AA_ENOTSUP;
}

int aa_store_frames_id(aa_store *st, const char *frames, size_t len, uint64_t *id) {
  (void)st;
  (void)frames;
  (void)len;
  if (id != NULL) *id = 0;
  return AA_ENOTSUP;
}

int aa_store_frames_foreach(const char *db_path, int64_t run_id, aa_store_frames_cb cb,
                            void *user) {
  (void)db_path;
  (void)run_id;
  (void)cb;
  (void)user;
  return AA_ENOTSUP;
}

int aa_store_flush(aa_store *st, uint32_t timeout_ms) {
  (void)st;
  (void)timeout_ms;
  return AA_ENOTSUP;
}

void aa_store_fail_nth(aa_store *st, uint64_t n) {
  (void)st;
  (void)n;
}

int aa_store_stats_get(const aa_store *st, aa_store_stats *out) {
  (void)st;
  if (out != NULL) {
    memset(out, 0, sizeof *out);
    out->version = AA_STORE_STATS_VERSION;
    out->size = sizeof *out;
    out->last_error = AA_ENOTSUP;
  }
  return AA_ENOTSUP;
}

size_t aa_store_stats_json(const aa_store_stats *s, char *buf, size_t cap) {
  static const char off[] = "{\"enabled\":false,\"last_error\":\"AA_ENOTSUP\"}";
  (void)s;
  if (buf != NULL && cap > 0) {
    size_t n = sizeof off - 1 < cap - 1 ? sizeof off - 1 : cap - 1;
    memcpy(buf, off, n);
    buf[n] = '\0';
  }
  return sizeof off - 1;
}

int aa_store_runs_json(const char *db_path, uint32_t limit, char **json) {
  (void)db_path;
  (void)limit;
  if (json != NULL) *json = NULL;
  return AA_ENOTSUP;
}

int aa_store_history_json(const char *db_path, const aa_store_query *q,
                          char **json) {
  (void)db_path;
  (void)q;
  if (json != NULL) *json = NULL;
  return AA_ENOTSUP;
}

int aa_store_policy_log_json(const char *db_path, const aa_store_query *q,
                             char **json) {
  (void)db_path;
  (void)q;
  if (json != NULL) *json = NULL;
  return AA_ENOTSUP;
}

int aa_store_trace_lost(const char *db_path, int64_t run_id, uint64_t *written,
                        uint64_t *dropped, uint64_t *cut_seq) {
  (void)db_path;
  (void)run_id;
  (void)written;
  (void)dropped;
  (void)cut_seq;
  return AA_ENOTSUP;
}

int aa_store_trace_foreach(const char *db_path, int64_t run_id,
                           aa_store_trace_cb cb, void *user) {
  (void)db_path;
  (void)run_id;
  (void)cb;
  (void)user;
  return AA_ENOTSUP;
}

int aa_store_trace_read(const char *db_path, int64_t run_id, aa_store_trace_cb cb,
                        void *user, char *msg, size_t cap) {
  if (msg != NULL && cap > 0)
    msg[0] = '\0';
  return aa_store_trace_foreach(db_path, run_id, cb, user);
}

int aa_store_histogram_latest(const char *db_path, int64_t run_id,
                              const char *pool_name,
                              uint64_t hist[AA_HIST_BUCKETS]) {
  (void)db_path;
  (void)run_id;
  (void)pool_name;
  if (hist != NULL) memset(hist, 0, sizeof(uint64_t) * AA_HIST_BUCKETS);
  return AA_ENOTSUP;
}
