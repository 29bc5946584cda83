/*
 * dbs.c — adaptalloc-replay over several ranks' databases: what a run row
 * says about its rank (db_meta_read), --each-rank (db_expand_ranks), the
 * labels of the rows, and the combined figures of several replays
 * (result_combine). The `ranks` command is ranks.c's.
 *
 * Everything is read through the store's readers (aa_store_runs_json);
 * docs/multi-gpu.md defines the combined figures.
 */
#include <stdlib.h>
#include <string.h>

#include <cJSON.h>

#include "adaptalloc/store.h"
#include "replay_tool.h"

const char *meta_store_err(int rc) {
  return rc == AA_ENOTSUP  ? "this adaptalloc-replay was built without the "
                             "store (-DAA_WITH_STORE=OFF)"
         : rc == AA_ENOENT ? "no such file, or not an adaptalloc database"
         : rc == AA_ESTALE ? "the database was written by a newer adaptalloc"
         : rc == AA_ECORRUPT
             ? "the database file is corrupt (SQLite: database disk image is "
               "malformed); sqlite3 FILE 'PRAGMA integrity_check' says where"
             : aa_strerror(rc);
}

/* ------------------------------------------------------------------ meta */

static void copy_str(char *dst, size_t cap, const cJSON *v) {
  snprintf(dst, cap, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

int db_meta_read(const char *path, int64_t run_id, db_meta *m, char *err,
                 size_t errcap) {
  char *json = NULL;
  cJSON *root = NULL, *runs, *r, *pick = NULL;
  int rc;

  memset(m, 0, sizeof *m);
  m->rank = -1;
  rc = aa_store_runs_json(path, AA_STORE_QUERY_MAX_LIMIT, &json);
  if (rc != AA_OK) {
    snprintf(err, errcap, "%s: cannot read the runs: %s", path,
             meta_store_err(rc));
    goto out;
  }
  root = cJSON_Parse(json);
  runs = cJSON_GetObjectItemCaseSensitive(root, "runs");
  if (!cJSON_IsArray(runs)) {
    snprintf(err, errcap, "%s: the store's run list does not parse", path);
    rc = AA_EIO;
    goto out;
  }
  cJSON_ArrayForEach(r, runs) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
    if (!cJSON_IsNumber(id))
      continue;
    if (run_id <= 0 || (int64_t)id->valuedouble == run_id) {
      pick = r; /* newest first: the first is the latest */
      break;
    }
  }
  if (pick == NULL) {
    if (run_id > 0)
      snprintf(err, errcap, "%s: no run %lld", path, (long long)run_id);
    else
      snprintf(err, errcap, "%s: the database has no runs", path);
    rc = AA_ENOENT;
    goto out;
  }
  {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(pick, "id");
    m->run_id = (int64_t)v->valuedouble;
    v = cJSON_GetObjectItemCaseSensitive(pick, "rank");
    m->rank = cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
    copy_str(m->model, sizeof m->model,
             cJSON_GetObjectItemCaseSensitive(pick, "model"));
    copy_str(m->host, sizeof m->host,
             cJSON_GetObjectItemCaseSensitive(pick, "host"));
    v = cJSON_GetObjectItemCaseSensitive(pick, "events_written");
    m->events_written = cJSON_IsNumber(v) && v->valuedouble > 0
                            ? (uint64_t)v->valuedouble
                            : 0;
    v = cJSON_GetObjectItemCaseSensitive(pick, "started_ms");
    m->started_ms = cJSON_IsNumber(v) && v->valuedouble > 0 ? (int64_t)v->valuedouble : 0;
    v = cJSON_GetObjectItemCaseSensitive(pick, "mono_origin_ns");
    m->mono_origin_ns = cJSON_IsNumber(v) && v->valuedouble > 0 ? (uint64_t)v->valuedouble : 0;
    v = cJSON_GetObjectItemCaseSensitive(pick, "snapshots");
    m->snapshots = cJSON_IsNumber(v) && v->valuedouble > 0
                       ? (uint64_t)v->valuedouble
                       : 0;
  }
  rc = AA_OK;
out:
  cJSON_Delete(root);
  free(json);
  return rc;
}

typedef struct rank_run {
  int64_t rank, run;
} rank_run;

static int cmp_rank_run(const void *a, const void *b) {
  const rank_run *x = a, *y = b;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

int db_expand_ranks(const char **dbs, int64_t *runs, size_t *n, size_t cap,
                    char *err, size_t errcap) {
  const char **odbs = calloc(*n, sizeof *odbs);
  rank_run *rr = NULL;
  size_t i, k, on = *n, out = 0;
  int rc = AA_OK;

  if (odbs == NULL) {
    snprintf(err, errcap, "out of memory");
    return AA_ENOMEM;
  }
  memcpy(odbs, dbs, on * sizeof *odbs);
  for (i = 0; i < on && rc == AA_OK; i++) {
    char *json = NULL;
    cJSON *root = NULL, *r;
    size_t nr = 0, latest_set = 0;
    int64_t latest = 0;

    rc = aa_store_runs_json(odbs[i], AA_STORE_QUERY_MAX_LIMIT, &json);
    if (rc != AA_OK) {
      snprintf(err, errcap, "%s: cannot read the runs: %s", odbs[i],
               meta_store_err(rc));
      break;
    }
    root = cJSON_Parse(json);
    free(json);
    rr = calloc((size_t)cJSON_GetArraySize(
                    cJSON_GetObjectItemCaseSensitive(root, "runs")) +
                    1,
                sizeof *rr);
    if (root == NULL || rr == NULL) {
      if (root == NULL)
        snprintf(err, errcap, "%s: the store's run list does not parse",
                 odbs[i]);
      else
        snprintf(err, errcap, "out of memory");
      rc = root == NULL ? AA_EIO : AA_ENOMEM;
      cJSON_Delete(root);
      break;
    }
    /* newest first: the first run seen of a rank is its latest */
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(root, "runs")) {
      const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
      const cJSON *rk = cJSON_GetObjectItemCaseSensitive(r, "rank");
      if (!cJSON_IsNumber(id))
        continue;
      if (!latest_set) {
        latest = (int64_t)id->valuedouble;
        latest_set = 1;
      }
      if (!cJSON_IsNumber(rk))
        continue;
      for (k = 0; k < nr && rr[k].rank != (int64_t)rk->valuedouble; k++)
        ;
      if (k == nr) {
        rr[nr].rank = (int64_t)rk->valuedouble;
        rr[nr++].run = (int64_t)id->valuedouble;
      }
    }
    cJSON_Delete(root);
    if (!latest_set) {
      snprintf(err, errcap, "%s: the database has no runs", odbs[i]);
      rc = AA_ENOENT;
    } else if (nr == 0) {
      rr[nr].rank = -1;
      rr[nr++].run = latest;
    }
    qsort(rr, nr, sizeof *rr, cmp_rank_run);
    for (k = 0; k < nr && rc == AA_OK; k++) {
      if (out == cap) {
        snprintf(err, errcap, "more than %zu ranks in the databases", cap);
        rc = AA_ELIMIT;
        break;
      }
      dbs[out] = odbs[i];
      runs[out++] = rr[k].run;
    }
    free(rr);
    rr = NULL;
  }
  free(odbs);
  if (rc == AA_OK)
    *n = out;
  return rc;
}

const char *base_of(const char *path) {
  const char *s = strrchr(path, '/');
  return s != NULL ? s + 1 : path;
}

void db_label(const char *path, const db_meta *m, char *buf, size_t cap) {
  if (m->rank >= 0)
    snprintf(buf, cap, "rank%lld", (long long)m->rank);
  else
    snprintf(buf, cap, "%s", base_of(path));
}

/* ------------------------------------------------------------------ combine */

static double max_d(double a, double b) { return a > b ? a : b; }

void result_combine(const aa_replay_result *r, size_t n,
                    aa_replay_result *out) {
  size_t i, pin = 0, pres = 0;

  memset(out, 0, sizeof *out);
  for (i = 0; i < n; i++) {
    const aa_replay_result *x = &r[i];
    out->events += x->events;
    out->requests += x->requests;
    out->allocs += x->allocs;
    out->frees += x->frees;
    out->failures += x->failures;
    out->trace_failures += x->trace_failures;
    out->cache_hits += x->cache_hits;
    out->cache_misses += x->cache_misses;
    out->backend_allocs += x->backend_allocs;
    out->backend_frees += x->backend_frees;
    out->backend_calls += x->backend_calls;
    out->backend_failures += x->backend_failures;
    out->event_records += x->event_records;
    out->stitches += x->stitches;
    out->stitch_hits += x->stitch_hits;
    out->stitch_dissolved += x->stitch_dissolved;
    out->alias_maps += x->alias_maps;
    out->alias_unmaps += x->alias_unmaps;
    out->stitch_wakes += x->stitch_wakes;
    out->plan_hits += x->plan_hits;
    out->plan_misses += x->plan_misses;
    out->plans_adopted += x->plans_adopted;
    out->plans_dropped += x->plans_dropped;
    out->plans_refused += x->plans_refused;
    out->plan_bytes += x->plan_bytes;
    out->stream_waits += x->stream_waits;
    out->stitch_deferred += x->stitch_deferred;
    out->alias_ns += x->alias_ns;
    out->sim_backend_us += x->sim_backend_us;
    out->live_at_end += x->live_at_end;
    out->live_bytes_at_end += x->live_bytes_at_end;
    if (x->peak_requested > out->peak_requested)
      out->peak_requested = x->peak_requested;
    if (x->peak_in_use > r[pin].peak_in_use)
      pin = i;
    if (x->peak_reserved > r[pres].peak_reserved)
      pres = i;
    out->int_frag_avg = max_d(out->int_frag_avg, x->int_frag_avg);
    out->ext_frag_avg = max_d(out->ext_frag_avg, x->ext_frag_avg);
    if (x->trace_span_ns > out->trace_span_ns)
      out->trace_span_ns = x->trace_span_ns;
    if (x->class_count > out->class_count)
      out->class_count = x->class_count;
    out->adapt.steps += x->adapt.steps;
    out->adapt.decisions += x->adapt.decisions;
    out->adapt.classes_added += x->adapt.classes_added;
    out->adapt.classes_retired += x->adapt.classes_retired;
    out->adapt.grows += x->adapt.grows;
    out->adapt.trims += x->adapt.trims;
    out->adapt.bytes_trimmed += x->adapt.bytes_trimmed;
    out->adapt.apply_failures += x->adapt.apply_failures;
    out->adapt.rejected += x->adapt.rejected;
    out->diag.malformed += x->diag.malformed;
    out->diag.unknown_action += x->diag.unknown_action;
    out->diag.unknown_free += x->diag.unknown_free;
    out->diag.duplicate_ptr += x->diag.duplicate_ptr;
    out->diag.size_mismatch += x->diag.size_mismatch;
    if (out->diag.first_error[0] == '\0' && x->diag.first_error[0] != '\0') {
      out->diag.first_line = x->diag.first_line;
      snprintf(out->diag.first_error, sizeof out->diag.first_error, "%s",
               x->diag.first_error);
    }
  }
  if (n == 0)
    return;
  out->hit_rate = out->cache_hits + out->cache_misses > 0
                      ? (double)out->cache_hits /
                            (double)(out->cache_hits + out->cache_misses)
                      : 0.0;
  /* The peaks are the busiest rank's, with that rank's figure beside it. */
  out->peak_in_use = r[pin].peak_in_use;
  out->requested_at_peak_in_use = r[pin].requested_at_peak_in_use;
  out->int_frag_peak = r[pin].int_frag_peak;
  out->peak_reserved = r[pres].peak_reserved;
  out->in_use_at_peak_reserved = r[pres].in_use_at_peak_reserved;
  out->ext_frag_peak = r[pres].ext_frag_peak;
}
