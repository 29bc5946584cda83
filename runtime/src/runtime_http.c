/*
 * runtime_http.c — the HTTP server's provider callbacks over the runtime's
 * services (/stats, /metrics extras, /policy, /history, /segments, /runs),
 * the server's start, and the same operations for in-process callers
 * (aa__rt_prov_*: the public aa_runtime_stats_json, aa_runtime_policy_json
 * and aa_runtime_policy_update are runtime.c's, which starts the runtime
 * first). Entry points: aa__rt_start_http and those three.
 *
 * Each provider callback gets its runtime as `user`; the services' state
 * (rt->svc) is runtime_services.c's, its lock order written at the top of
 * that file. The aa_runtime_* calls here work on the default runtime.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/http.h"
#include "adaptalloc/policy.h"
#include "adaptalloc/store.h"
#include "runtime_internal.h"
#include "runtime_json.h"

/* ------------------------------------------------------------------ http */

static int prov_pool_stats(void *user, aa_pool_stats **out, size_t *n) {
  aa_runtime *rt = user;
  aa_pool *pools[AA_RT_MAX_POOLS];
  size_t np = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS), i, k = 0;
  aa_pool_stats *arr;

  *out = NULL;
  *n = 0;
  arr = calloc(np ? np : 1, sizeof(*arr));
  if (arr == NULL)
    return AA_ENOMEM;
  for (i = 0; i < np; i++)
    if (aa_pool_stats_get(pools[i], &arr[k]) == AA_OK)
      k++;
  *out = arr;
  *n = k;
  return AA_OK;
}

static void append_pool_json(aa__buf *sb, const aa_pool_stats *st) {
  size_t need = aa_pool_stats_json(st, NULL, 0);
  if (!aa__buf_reserve(sb, need + 1))
    return;
  aa_pool_stats_json(st, sb->data + sb->len, need + 1);
  sb->len += need;
}

/* The loop's audit of class-table changes, every pool (or the one named):
 * what the replay of the interval predicted before the change (the small
 * requests' peak reserved), and the pool's reserved bytes, whole and the
 * small classes' alone (the prediction's scope), at the change and
 * AA_ADAPT_MEASURE_STEPS steps later (null until then, and for a change
 * that was not applied). */
static void append_audit_json(aa_runtime *rt, aa__buf *sb, const char *only) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  aa_adapt_audit au[AA_ADAPT_AUDIT_MAX];
  size_t np = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS), na, shown = 0;
  for (size_t i = 0; i < np; i++) {
    const char *name = aa_pool_name(pools[i]);
    if (only != NULL && strcmp(name, only) != 0)
      continue;
    if (aa_adapt_loop_audit(rt->svc.loop, pools[i], au, AA_ADAPT_AUDIT_MAX, &na) != AA_OK)
      continue;
    for (size_t k = 0; k < na; k++) {
      const aa_adapt_audit *a = &au[k];
      aa__buf_printf(sb, "%s{\"pool\":", shown++ ? "," : "");
      aa__buf_json_cstr(sb, name);
      aa__buf_printf(sb, ",\"step\":%llu,\"kind\":\"%s\",\"block_size\":%llu,"
                         "\"applied\":%s,",
                     (unsigned long long)a->step, aa_adapt_kind_name(a->kind),
                     (unsigned long long)a->block_size, a->result == AA_OK ? "true" : "false");
      if (a->kind == AA_ADAPT_TRIM)
        aa__buf_printf(sb, "\"released\":%llu,", (unsigned long long)a->released);
      aa__buf_printf(sb, "\"predicted\":");
      if (a->verified)
        aa__buf_printf(sb, "{\"peak_reserved_before\":%llu,\"peak_reserved_after\":%llu,"
                           "\"backend_calls_before\":%llu,\"backend_calls_after\":%llu}",
                       (unsigned long long)a->predicted_reserved_before,
                       (unsigned long long)a->predicted_reserved_after,
                       (unsigned long long)a->predicted_calls_before,
                       (unsigned long long)a->predicted_calls_after);
      else
        aa__buf_printf(sb, "null");
      aa__buf_printf(sb, ",\"measured\":");
      if (a->measured)
        aa__buf_printf(sb, "{\"reserved_before\":%llu,\"reserved_after\":%llu,"
                           "\"small_reserved_before\":%llu,\"small_reserved_after\":%llu,"
                           "\"small_requested_before\":%llu,\"small_requested_after\":%llu,"
                           "\"after_steps\":%d}",
                       (unsigned long long)a->measured_reserved_before,
                       (unsigned long long)a->measured_reserved_after,
                       (unsigned long long)a->measured_small_before,
                       (unsigned long long)a->measured_small_after,
                       (unsigned long long)a->measured_small_requested_before,
                       (unsigned long long)a->measured_small_requested_after,
                       AA_ADAPT_MEASURE_STEPS);
      else
        aa__buf_printf(sb, "null");
      aa__buf_printf(sb, "}");
    }
  }
}

/* ,"last_oom": the process's last out-of-memory record (aa_oom_info as
 * JSON, as GET /oom's "last") or null; with ?pool=NAME only when it is that
 * pool's. */
static void append_last_oom(aa_runtime *rt, aa__buf *sb, const char *pool) {
  aa_oom_info last;
  char rec[4096];
  bool have = aa_rt_last_oom(rt, &last, NULL) == AA_OK;
  if (have && pool != NULL && strncmp(last.pool, pool, sizeof last.pool) != 0)
    have = false;
  if (aa_oom_info_json(have ? &last : NULL, rec, sizeof rec) >= sizeof rec)
    snprintf(rec, sizeof rec, "null"); /* cannot happen: AA_OOM_TOP bounds it */
  aa__buf_printf(sb, ",\"last_oom\":%s", rec);
}

/* ,"rank":R,"local_rank":L,"world_size":W: each null when unset (RANK,
 * LOCAL_RANK, WORLD_SIZE, or the runtime's config). */
static void append_ranks(const aa_runtime *rt, aa__buf *sb) {
  const char *names[3] = {"rank", "local_rank", "world_size"};
  int v[3] = {rt->rank, rt->local_rank, rt->world_size};
  for (int i = 0; i < 3; i++) {
    if (v[i] >= 0)
      aa__buf_printf(sb, ",\"%s\":%d", names[i], v[i]);
    else
      aa__buf_printf(sb, ",\"%s\":null", names[i]);
  }
}

static int prov_stats_json(void *user, const char *pool, char **out, size_t *len) {
  aa_runtime *rt = user;
  aa_pool_stats *arr = NULL;
  size_t n = 0, i, shown = 0;
  aa__buf sb;
  aa_adapt_counters lc;
  uint64_t version;
  char buf[2048];
  int rc;

  *out = NULL;
  *len = 0;
  rc = prov_pool_stats(user, &arr, &n);
  if (rc != AA_OK)
    return rc;
  if (pool != NULL) {
    for (i = 0; i < n; i++)
      if (strcmp(arr[i].name, pool) == 0)
        break;
    if (i == n) {
      free(arr);
      return AA_ENOENT;
    }
  }
  pthread_mutex_lock(&rt->svc.policy_lock);
  version = rt->svc.policy ? aa_policy_version(rt->svc.policy) : 0;
  pthread_mutex_unlock(&rt->svc.policy_lock);

  aa__buf_init(&sb);
  aa__buf_printf(&sb, "{\"version\":1,\"model\":");
  aa__buf_json_cstr(&sb, rt->model);
  aa__buf_printf(&sb, ",\"pid\":%ld,\"uptime_s\":%.3f,\"policy_version\":%llu,"
                      "\"policy_source\":",
                 (long)getpid(),
                 (double)(aa_now_ns() - rt->started_ns) / 1e9,
                 (unsigned long long)version);
  aa__buf_json_cstr(&sb, rt->svc.policy_source);
  aa__buf_printf(&sb, ",\"run_id\":%lld", (long long)rt->svc.run_id);
  append_ranks(rt, &sb);
  aa__rt_devices_json(&sb, arr, n);
  aa__buf_printf(&sb, ",\"pools\":[");
  for (i = 0; i < n; i++) {
    if (pool != NULL && strcmp(arr[i].name, pool) != 0)
      continue;
    if (shown++)
      aa__buf_printf(&sb, ",");
    append_pool_json(&sb, &arr[i]);
  }
  aa__buf_printf(&sb, "]");
  aa__rt_overrides_json(rt, &sb);
  aa__buf_printf(&sb, ",\"adapt\":");
  if (rt->svc.loop != NULL) {
    aa_adapt_loop_counters(rt->svc.loop, &lc);
    aa__buf_printf(&sb, "{\"enabled\":true,\"steps\":%llu,\"decisions\":%llu,"
                        "\"classes_added\":%llu,\"classes_retired\":%llu,\"grows\":%llu,"
                        "\"trims\":%llu,\"bytes_trimmed\":%llu,\"apply_failures\":%llu,"
                        "\"rejected_by_replay\":%llu,\"audit\":[",
                   (unsigned long long)lc.steps, (unsigned long long)lc.decisions,
                   (unsigned long long)lc.classes_added,
                   (unsigned long long)lc.classes_retired,
                   (unsigned long long)lc.grows, (unsigned long long)lc.trims,
                   (unsigned long long)lc.bytes_trimmed,
                   (unsigned long long)lc.apply_failures,
                   (unsigned long long)lc.rejected);
    append_audit_json(rt, &sb, pool);
    aa__buf_printf(&sb, "]}");
  } else {
    aa__buf_printf(&sb, "{\"enabled\":false}");
  }
  aa__buf_printf(&sb, ",\"store\":");
  if (rt->svc.store != NULL) {
    aa_store_stats ss;
    aa_store_stats_get(rt->svc.store, &ss);
    aa_store_stats_json(&ss, buf, sizeof(buf));
    aa__buf_printf(&sb, "%s", buf);
  } else {
    aa__buf_printf(&sb, "{\"enabled\":0,\"path\":null}");
  }
  aa__rt_trace_json(rt, &sb);
  aa__buf_printf(&sb, ",\"policy_changes\":%llu,\"policy_rejects\":%llu",
                 (unsigned long long)atomic_load(&rt->svc.policy_changes),
                 (unsigned long long)atomic_load(&rt->svc.policy_rejects));
  append_last_oom(rt, &sb, pool);
  aa__buf_printf(&sb, "}");
  free(arr);
  if (sb.failed) {
    aa__buf_free(&sb);
    return AA_ENOMEM;
  }
  *out = sb.data;
  *len = sb.len;
  return AA_OK;
}

/* Copies text into out with the process's labels (plabels, without braces)
 * on every sample line that has no labels of its own: "name value" becomes
 * "name{plabels} value". */
static void add_process_labels(aa__buf *out, const char *text, size_t len,
                               const char *plabels) {
  const char *p = text;
  const char *end = text + len;
  while (p < end) {
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    const char *eol = nl != NULL ? nl : end;
    const char *sp = memchr(p, ' ', (size_t)(eol - p));
    if (*p != '#' && sp != NULL && memchr(p, '{', (size_t)(sp - p)) == NULL) {
      aa__buf_append(out, p, (size_t)(sp - p));
      aa__buf_printf(out, "{%s}", plabels);
      aa__buf_append(out, sp, (size_t)(eol - sp));
    } else {
      aa__buf_append(out, p, (size_t)(eol - p));
    }
    if (nl != NULL)
      aa__buf_append(out, "\n", 1);
    p = eol + 1;
  }
}

static int prov_metrics_extra(void *user, char **out, size_t *len) {
  aa_runtime *rt = user;
  aa__buf sb;
  aa__buf labeled;
  uint64_t version;
  char model[sizeof rt->model * 2];
  char host[512];
  char plabels[640];
  char rank[16];
  char local_rank[16];
  int r = rt->rank;

  pthread_mutex_lock(&rt->svc.policy_lock);
  version = rt->svc.policy ? aa_policy_version(rt->svc.policy) : 0;
  pthread_mutex_unlock(&rt->svc.policy_lock);
  aa__buf_init(&sb);
  aa__rt_prom_label(model, sizeof model, rt->model);
  aa__rt_prom_label(host, sizeof host, aa__rt_host_name());
  if (r >= 0)
    snprintf(rank, sizeof rank, "%d", r);
  else
    rank[0] = '\0';
  if (rt->local_rank >= 0)
    snprintf(local_rank, sizeof local_rank, "%d", rt->local_rank);
  else
    local_rank[0] = '\0';
  /* One series per process: joins the pool series to the run in the store
   * (run), the policy file (model) and the build (version). build_info is
   * the same process seen as a build: the server leaves it to this provider
   * (http.h, metrics_extra). */
  aa__buf_printf(&sb,
                 "# HELP adaptalloc_info The run this process is: model, store run id, rank, "
                 "local rank, host, version.\n"
                 "# TYPE adaptalloc_info gauge\n"
                 "adaptalloc_info{model=\"%s\",run=\"%lld\",rank=\"%s\",local_rank=\"%s\","
                 "host=\"%s\",version=\"%d.%d.%d\"} 1\n"
                 "# HELP adaptalloc_build_info The library version, the model and RANK (empty: unset).\n"
                 "# TYPE adaptalloc_build_info gauge\n"
                 "adaptalloc_build_info{version=\"%d.%d.%d\",model=\"%s\",rank=\"%s\"} 1\n",
                 model, (long long)rt->svc.run_id, rank, local_rank, host, AA_VERSION_MAJOR,
                 AA_VERSION_MINOR,
                 AA_VERSION_PATCH, AA_VERSION_MAJOR, AA_VERSION_MINOR, AA_VERSION_PATCH, model,
                 rank);
  {
    /* the runtime's start as Unix time: now, less the time since it */
    struct timespec ts;
    double start = 0.0;
    if (clock_gettime(CLOCK_REALTIME, &ts) == 0)
      start = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 -
              (double)(aa_now_ns() - rt->started_ns) / 1e9;
    aa__buf_printf(&sb,
                   "# HELP adaptalloc_process_start_time_seconds Start of this process's "
                   "adaptalloc runtime, Unix time.\n"
                   "# TYPE adaptalloc_process_start_time_seconds gauge\n"
                   "adaptalloc_process_start_time_seconds %.3f\n",
                   start);
  }
  aa__buf_printf(&sb,
                 "# HELP adaptalloc_policy_version Version of the policy in force.\n"
                 "# TYPE adaptalloc_policy_version gauge\n"
                 "adaptalloc_policy_version %llu\n"
                 "# HELP adaptalloc_policy_changes_total Policy changes applied (file, http, loop).\n"
                 "# TYPE adaptalloc_policy_changes_total counter\n"
                 "adaptalloc_policy_changes_total %llu\n"
                 "# HELP adaptalloc_policy_rejects_total Policy changes refused.\n"
                 "# TYPE adaptalloc_policy_rejects_total counter\n"
                 "adaptalloc_policy_rejects_total %llu\n"
                 "# HELP adaptalloc_adapt_classes_added_total Size classes the policy loop added.\n"
                 "# TYPE adaptalloc_adapt_classes_added_total counter\n"
                 "adaptalloc_adapt_classes_added_total %llu\n"
                 "# HELP adaptalloc_adapt_classes_retired_total Size classes the policy loop retired.\n"
                 "# TYPE adaptalloc_adapt_classes_retired_total counter\n"
                 "adaptalloc_adapt_classes_retired_total %llu\n",
                 (unsigned long long)version,
                 (unsigned long long)atomic_load(&rt->svc.policy_changes),
                 (unsigned long long)atomic_load(&rt->svc.policy_rejects),
                 (unsigned long long)atomic_load(&rt->svc.classes_added),
                 (unsigned long long)atomic_load(&rt->svc.classes_retired));
  if (rt->svc.loop != NULL) {
    aa_adapt_counters lc;
    aa_adapt_loop_counters(rt->svc.loop, &lc);
    aa__buf_printf(&sb,
                   "# HELP adaptalloc_adapt_steps_total Steps of the policy loop.\n"
                   "# TYPE adaptalloc_adapt_steps_total counter\n"
                   "adaptalloc_adapt_steps_total %llu\n"
                   "# HELP adaptalloc_adapt_decisions_total Decisions the policy loop made.\n"
                   "# TYPE adaptalloc_adapt_decisions_total counter\n"
                   "adaptalloc_adapt_decisions_total %llu\n"
                   "# HELP adaptalloc_adapt_rejected_by_replay_total Class changes not applied: "
                   "the replay predicted no gain.\n"
                   "# TYPE adaptalloc_adapt_rejected_by_replay_total counter\n"
                   "adaptalloc_adapt_rejected_by_replay_total %llu\n"
                   "# HELP adaptalloc_adapt_grows_total Grow or prefill decisions applied.\n"
                   "# TYPE adaptalloc_adapt_grows_total counter\n"
                   "adaptalloc_adapt_grows_total %llu\n"
                   "# HELP adaptalloc_adapt_trims_total Trims applied.\n"
                   "# TYPE adaptalloc_adapt_trims_total counter\n"
                   "adaptalloc_adapt_trims_total %llu\n"
                   "# HELP adaptalloc_adapt_apply_failures_total Decisions the core refused.\n"
                   "# TYPE adaptalloc_adapt_apply_failures_total counter\n"
                   "adaptalloc_adapt_apply_failures_total %llu\n",
                   (unsigned long long)lc.steps, (unsigned long long)lc.decisions,
                   (unsigned long long)lc.rejected, (unsigned long long)lc.grows,
                   (unsigned long long)lc.trims, (unsigned long long)lc.apply_failures);
  }
  if (rt->svc.store != NULL) {
    aa_store_stats ss;
    aa_store_stats_get(rt->svc.store, &ss);
    aa__buf_printf(&sb,
                   "# HELP adaptalloc_store_enabled 1 while the store writes, 0 after a fault.\n"
                   "# TYPE adaptalloc_store_enabled gauge\n"
                   "adaptalloc_store_enabled %u\n"
                   "# HELP adaptalloc_store_snapshots_dropped_total Snapshots the store could not queue.\n"
                   "# TYPE adaptalloc_store_snapshots_dropped_total counter\n"
                   "adaptalloc_store_snapshots_dropped_total %llu\n"
                   "# HELP adaptalloc_store_events_dropped_total Trace events the store could not queue.\n"
                   "# TYPE adaptalloc_store_events_dropped_total counter\n"
                   "adaptalloc_store_events_dropped_total %llu\n"
                   "# HELP adaptalloc_store_ooms_written_total Out-of-memory records stored.\n"
                   "# TYPE adaptalloc_store_ooms_written_total counter\n"
                   "adaptalloc_store_ooms_written_total %llu\n"
                   "# HELP adaptalloc_store_ooms_dropped_total Out-of-memory records lost before "
                   "the store wrote them.\n"
                   "# TYPE adaptalloc_store_ooms_dropped_total counter\n"
                   "adaptalloc_store_ooms_dropped_total %llu\n",
                   ss.enabled, (unsigned long long)ss.snapshots_dropped,
                   (unsigned long long)ss.events_dropped, (unsigned long long)ss.ooms_written,
                   (unsigned long long)ss.ooms_dropped);
  }
  {
    /* the GPUs the pools are on: identity, memory, headroom */
    aa_pool_stats *arr = NULL;
    size_t n = 0;
    if (prov_pool_stats(rt, &arr, &n) == AA_OK)
      aa__rt_devices_metrics(&sb, rt, arr, n);
    free(arr);
  }
  if (sb.failed) {
    aa__buf_free(&sb);
    return AA_ENOMEM;
  }
  /* every series says which process it is, whatever the scrape adds */
  aa__rt_process_labels(rt, plabels, sizeof plabels);
  aa__buf_init(&labeled);
  add_process_labels(&labeled, sb.data, sb.len, plabels);
  aa__buf_free(&sb);
  if (labeled.failed) {
    aa__buf_free(&labeled);
    return AA_ENOMEM;
  }
  *out = labeled.data;
  *len = labeled.len;
  return AA_OK;
}

static int prov_pool_labels(void *user, const aa_pool_stats *st, aa_http_labels *out) {
  return aa__rt_pool_labels(user, st, out);
}

static int prov_policy_get(void *user, char **json, size_t *len, uint64_t *version) {
  aa_runtime *rt = user;
  *json = NULL;
  *len = 0;
  pthread_mutex_lock(&rt->svc.policy_lock);
  if (rt->svc.policy != NULL) {
    *json = aa_policy_to_json(rt->svc.policy);
    *version = aa_policy_version(rt->svc.policy);
  }
  pthread_mutex_unlock(&rt->svc.policy_lock);
  if (*json == NULL)
    return rt->svc.policy == NULL ? AA_ENOTSUP : AA_ENOMEM;
  *len = strlen(*json);
  return AA_OK;
}

/* A whole policy (PUT /policy, set_policy) must be complete
 * (aa_policy_missing): a fragment would reset the parts it leaves out to
 * their defaults. AA_OK, or AA_EINVAL with err naming what is missing and
 * the call that changes part. */
static int refuse_incomplete(const aa_http_policy_change *c, char *err,
                             size_t errcap) {
  char missing[AA_POLICY_ERR_CAP];
  size_t n = 0;
  bool python = c->source != NULL && strcmp(c->source, "python") == 0;
  bool http = c->client == NULL || strcmp(c->client, "in-process") != 0;
  int rc = aa_policy_missing(c->body, c->len, &n, missing, sizeof missing);
  if (rc != AA_OK || n == 0)
    return rc; /* a document that parsed parses again; else its error */
  /* Python's message is prefixed with the function's name already */
  snprintf(err, errcap, "%s a complete policy: missing %s (use %s to change part)",
           http ? "PUT /policy needs" : "not", missing,
           http     ? "PATCH"
           : python ? "patch_policy"
                    : "a merge patch");
  return AA_EINVAL;
}

/* build for a merge patch: the patch merged onto the policy in force, under
 * the lock that keeps it in force until the change is committed. */
static int build_merge(void *arg, const aa_policy *cur, aa_policy **out, char *err,
                       size_t errcap) {
  const aa_http_policy_change *c = arg;
  return aa_policy_merge_patch(cur, c->body, c->len, out, err, errcap);
}

static int prov_policy_change(aa_runtime *rt, const aa_http_policy_change *c, bool patch,
                              uint64_t *new_version, char *err, size_t errcap) {
  aa_policy *next = NULL;
  aa__rt_change ch;
  char reason[160];
  int rc;

  snprintf(reason, sizeof(reason), "%s /policy from %s", patch ? "PATCH" : "PUT",
           c->client ? c->client : "?");
  if (patch) {
    /* one transaction: merged onto the policy in force and committed under
     * one hold of the policy lock */
    memset(&ch, 0, sizeof(ch));
    ch.build = build_merge;
    ch.arg = (void *)c;
    ch.source = c->source ? c->source : "http";
    ch.reason = reason;
    ch.has_if_match = c->has_if_match;
    ch.if_match = c->if_match;
    return aa__rt_settings_commit(rt, &ch, new_version, c->unchanged, err, errcap);
  }
  rc = aa_policy_parse(c->body, c->len, &next, err, errcap);
  if (rc == AA_OK)
    rc = refuse_incomplete(c, err, errcap);
  if (rc != AA_OK) {
    aa_policy_free(next);
    atomic_fetch_add(&rt->svc.policy_rejects, 1);
    return rc;
  }
  return aa__rt_install_policy(rt, next, c->source ? c->source : "http", reason,
                               c->has_if_match, c->if_match, new_version, c->unchanged, err,
                               errcap);
}

static int prov_policy_put(void *user, const aa_http_policy_change *c,
                           uint64_t *new_version, char *err, size_t errcap) {
  return prov_policy_change(user, c, false, new_version, err, errcap);
}

static int prov_policy_patch(void *user, const aa_http_policy_change *c,
                             uint64_t *new_version, char *err, size_t errcap) {
  return prov_policy_change(user, c, true, new_version, err, errcap);
}

static int prov_history_json(void *user, const aa_http_history_query *q,
                             char **out, size_t *len) {
  aa_runtime *rt = user;
  aa_store_query sq;
  char *snaps = NULL, *changes = NULL;
  int rc;

  *out = NULL;
  *len = 0;
  if (rt->svc.store == NULL)
    return AA_ENOTSUP;
  aa_store_query_init(&sq);
  sq.run_id = q->run > 0 ? q->run : rt->svc.run_id;
  sq.since_ms = q->since > 0 ? q->since : 0;
  sq.limit = q->limit > 0 ? (uint32_t)q->limit : 100;
  sq.step_ms = q->step > 0 ? q->step : 0;
  rc = aa_store_history_json(aa_store_db_path(rt->svc.store), &sq, &snaps);
  if (rc == AA_OK) {
    /* policies=1: each change with its document (at most 1000 of them) */
    sq.detail = q->policies;
    if (sq.detail && sq.limit > 1000)
      sq.limit = 1000;
    rc = aa_store_policy_log_json(aa_store_db_path(rt->svc.store), &sq, &changes);
  }
  if (rc == AA_OK)
    rc = aa__rt_merge_history(snaps, changes, out, len);
  free(snaps);
  free(changes);
  return rc;
}

/* The runtime's pool of that name, or NULL (pools live until shutdown). */
static aa_pool *pool_named(aa_runtime *rt, const char *name) {
  aa_pool *pools[AA_RT_MAX_POOLS];
  size_t n = aa__rt_pools_snapshot(rt, pools, AA_RT_MAX_POOLS), i;

  for (i = 0; i < n; i++)
    if (strcmp(aa_pool_name(pools[i]), name) == 0)
      return pools[i];
  return NULL;
}

static int prov_segments_json(void *user, const char *pool, char **out,
                              size_t *len) {
  aa_pool *p = pool_named(user, pool);
  return p != NULL ? aa_http_segments_json(p, out, len) : AA_ENOENT;
}

/* A live block's stack for /holders: the id its pool keeps beside it while
 * a sampled trace runs (aa_pool_trace_frame_of), the text from the recent
 * stacks (runtime_stacks.c). Tracing off: none. */
static int holders_frames(void *user, aa_pool *pool, const void *ptr, char **text, size_t *len) {
  aa_runtime *rt = user;
  *text = NULL;
  *len = 0;
  if (!atomic_load(&rt->svc.tracing))
    return AA_ENOENT;
  return aa__rt_stacks_get(rt, rt->svc.run_id, aa_pool_trace_frame_of(pool, ptr), text, len);
}

static int prov_holders_json(void *user, const char *pool, unsigned top, char **out,
                             size_t *len) {
  aa_pool *p = pool_named(user, pool);
  return p != NULL ? aa_http_holders_json_frames(p, top, holders_frames, user, out, len)
                   : AA_ENOENT;
}

static int prov_runs_json(void *user, char **out, size_t *len) {
  aa_runtime *rt = user;
  int rc;
  *out = NULL;
  *len = 0;
  if (rt->svc.store == NULL)
    return AA_ENOTSUP;
  rc = aa_store_runs_json(aa_store_db_path(rt->svc.store), 100, out);
  if (rc == AA_OK)
    *len = strlen(*out);
  return rc;
}

/* The live record, then with limit the store's: one object. */
static int prov_oom_json(void *user, int64_t limit, char **out, size_t *len) {
  aa_runtime *rt = user;
  char *live = NULL, *stored = NULL, *s = NULL;
  size_t n = 0;
  int rc;
  *out = NULL;
  *len = 0;
  rc = aa_rt_oom_json(rt, &live, &n);
  if (rc != AA_OK || limit <= 0) {
    *out = live;
    *len = rc == AA_OK ? n : 0;
    return rc;
  }
  if (rt->svc.store == NULL) {
    rc = AA_ENOTSUP;
    goto done;
  }
  aa_store_query q;
  aa_store_query_init(&q);
  q.run_id = rt->svc.run_id;
  q.limit = (uint32_t)limit;
  rc = aa_store_ooms_json(aa_store_db_path(rt->svc.store), &q, &stored);
  if (rc != AA_OK)
    goto done;
  size_t ns = strlen(stored);
  s = malloc(n + ns + 16);
  if (s == NULL) {
    rc = AA_ENOMEM;
    goto done;
  }
  /* live is {"count":..,"last":..}: drop its "}" and add "stored" */
  memcpy(s, live, n - 1);
  memcpy(s + n - 1, ",\"stored\":", 10);
  memcpy(s + n + 9, stored, ns);
  memcpy(s + n + 9 + ns, "}", 2);
  *out = s;
  *len = n + 10 + ns;
done:
  free(live);
  free(stored);
  return rc;
}

void aa__rt_start_http(aa_runtime *rt) {
  aa_http_config cfg;
  aa_http_provider prov;
  char err[512];
  bool generated;
  int rc;

  if (rt->http_refused) {
    aa__rt_log("http: a setting is refused (see above); the server is off, "
               "the allocator keeps working");
    return;
  }
  if (aa__rt_is_off(rt->http))
    return;
  /* No token set (and not "off"): one is made, so that no mutating request
   * is open to every local user; it goes into a file once the port is
   * known (docs/security.md "The token file"). */
  generated = rt->token[0] == '\0' && !rt->token_off;
  if (generated && aa__rt_token_generate(rt->token, sizeof(rt->token)) != AA_OK) {
    aa__rt_log("http: no random bytes for a token (getrandom failed); the server is off "
               "(set ADAPTALLOC_TOKEN), the allocator keeps working");
    return;
  }
  aa_http_config_init(&cfg);
  cfg.address = rt->http;
  cfg.token = rt->token[0] ? rt->token : NULL;
  cfg.local_rank = rt->local_rank;
  /* /stats and /metrics answers may be reused for 100 ms: a dashboard or a
   * scraper flood then costs the process one stats copy per 100 ms, not one
   * per request (docs/http.md, BENCHMARKS.md "HTTP load"). A policy change
   * clears the cache. */
  cfg.stats_cache_ms = 100;
  memset(&prov, 0, sizeof(prov));
  prov.version = AA_HTTP_PROVIDER_VERSION;
  prov.user = rt;
  prov.stats_json = prov_stats_json;
  prov.pool_stats = prov_pool_stats;
  prov.metrics_extra = prov_metrics_extra;
  prov.pool_labels = prov_pool_labels;
  prov.policy_get = prov_policy_get;
  prov.policy_put = prov_policy_put;
  prov.policy_patch = prov_policy_patch;
  prov.history_json = prov_history_json;
  prov.segments_json = prov_segments_json;
  prov.holders_json = prov_holders_json;
  prov.runs_json = prov_runs_json;
  prov.oom_json = prov_oom_json;
  err[0] = '\0';
  rc = aa_http_new(&cfg, &prov, &rt->svc.http, err, sizeof(err));
  if (rc != AA_OK) {
    if (rc != AA_ENOTSUP)
      aa__rt_log("http: %s; the server is off, the allocator keeps working",
                 err[0] ? err : aa_strerror(rc));
    rt->svc.http = NULL;
    return;
  }
  atomic_store(&rt->svc.http_port, aa_http_port(rt->svc.http));
  if (generated &&
      aa__rt_token_file_write(rt->token, aa_http_port(rt->svc.http), rt->svc.token_file,
                              sizeof(rt->svc.token_file), err, sizeof(err)) != AA_OK) {
    /* reads stay served; no client can change the policy over HTTP */
    aa__rt_log("http: serving on http://%s/ read-only: the token file cannot be written (%s); "
               "set ADAPTALLOC_TOKEN to change the policy over HTTP",
               aa_http_bound_address(rt->svc.http), err);
    return;
  }
  if (generated)
    aa__rt_token_file_arm_exit(rt);
  if (rt->quiet)
    return;
  if (generated)
    aa__rt_log("http: serving on http://%s/; changes need the token in %s",
               aa_http_bound_address(rt->svc.http), rt->svc.token_file);
  else if (rt->token_off)
    aa__rt_log("http: serving on http://%s/; ADAPTALLOC_TOKEN=off: any local user can "
               "change the policy",
               aa_http_bound_address(rt->svc.http));
  else
    aa__rt_log("http: serving on http://%s/; changes need ADAPTALLOC_TOKEN",
               aa_http_bound_address(rt->svc.http));
}

int aa_rt_http_port(aa_runtime *rt) {
  return rt != NULL ? atomic_load(&rt->svc.http_port) : 0;
}

int aa_runtime_http_port(void) { return aa_rt_http_port(aa__rt_default()); }

int aa_rt_http_address(aa_runtime *rt, char *buf, size_t cap) {
  const char *addr;
  int n;
  if (rt == NULL || buf == NULL || cap == 0)
    return AA_EINVAL;
  buf[0] = '\0';
  if (rt->svc.http == NULL || atomic_load(&rt->svc.http_port) == 0)
    return AA_ENOTSUP;
  addr = aa_http_bound_address(rt->svc.http);
  if (addr == NULL)
    return AA_ENOTSUP;
  n = snprintf(buf, cap, "%s", addr);
  if (n < 0 || (size_t)n >= cap) {
    buf[0] = '\0';
    return AA_ERANGE;
  }
  return AA_OK;
}

int aa_runtime_http_address(char *buf, size_t cap) {
  return aa_rt_http_address(aa__rt_default(), buf, cap);
}

/* For the in-process calls (runtime.c, above: they start the runtime
 * first): the provider's answers without the server. */
int aa__rt_prov_stats_json(aa_runtime *rt, char **out, size_t *len) {
  return prov_stats_json(rt, NULL, out, len);
}

int aa__rt_prov_policy_get(aa_runtime *rt, char **out, size_t *len, uint64_t *version) {
  return prov_policy_get(rt, out, len, version);
}

int aa__rt_prov_policy_change(aa_runtime *rt, const aa_http_policy_change *c, bool patch,
                              uint64_t *new_version, char *err, size_t errcap) {
  return prov_policy_change(rt, c, patch, new_version, err, errcap);
}

int64_t aa_rt_run_id(aa_runtime *rt) { return rt != NULL ? rt->svc.run_id : 0; }

int64_t aa_runtime_run_id(void) { return aa_rt_run_id(aa__rt_default()); }
