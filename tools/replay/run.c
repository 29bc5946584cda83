/*
 * run.c — adaptalloc-replay run and compare: one parse of the input feeds
 * one simulator per policy (cmd_run); with several --db, cmd_run_multi
 * replays each database in turn and adds a combined row. Text and JSON
 * reports, the loop's decisions, the sizes that waste most (--top).
 */
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/replay.h"
#include "replay_tool.h"

static void print_json_decisions(FILE *f, const loaded *l) {
  size_t n = 0, i;
  const aa_adapt_decision *d = aa_replay_sim_decisions(l->sim, &n);

  fprintf(f, ",\"decisions\":[");
  for (i = 0; i < n; i++) {
    fprintf(f, "%s{\"step\":%llu,\"kind\":", i > 0 ? "," : "",
            (unsigned long long)d[i].interval);
    print_json_string(f, aa_adapt_kind_name(d[i].kind));
    fprintf(f, ",\"block_size\":%llu,\"request_size\":%llu,\"amount\":%llu,"
               "\"result\":",
            (unsigned long long)d[i].block_size,
            (unsigned long long)d[i].request_size,
            (unsigned long long)d[i].amount);
    print_json_string(f, aa_errname(d[i].result));
    fprintf(f, ",\"reason\":");
    print_json_string(f, d[i].reason);
    fprintf(f, "}");
  }
  fprintf(f, "]");
}

static void print_text_decisions(FILE *f, const loaded *l) {
  size_t n = 0, i;
  const aa_adapt_decision *d = aa_replay_sim_decisions(l->sim, &n);
  const aa_adapt_counters *c = &l->res.adapt;

  fprintf(f, "policy loop       %llu steps, %llu decisions: %llu classes added, "
             "%llu retired, %llu grows, %llu trims, %llu refused, %llu rejected by its "
             "replay check\n",
          (unsigned long long)c->steps, (unsigned long long)c->decisions,
          (unsigned long long)c->classes_added,
          (unsigned long long)c->classes_retired, (unsigned long long)c->grows,
          (unsigned long long)c->trims, (unsigned long long)c->apply_failures,
          (unsigned long long)c->rejected);
  for (i = 0; i < n; i++)
    fprintf(f, "  step %-5llu %-15s %s%s%s\n", (unsigned long long)d[i].interval,
            aa_adapt_kind_name(d[i].kind), d[i].reason,
            d[i].result != AA_OK ? " -> " : "",
            d[i].result != AA_OK ? aa_errname(d[i].result) : "");
  if (c->decisions > n)
    fprintf(f, "  (%llu more)\n", (unsigned long long)(c->decisions - n));
}

/* One request size with what its class wastes at its peak live count. */
typedef struct waste_row {
  uint64_t size, allocs, max_live, block, waste;
} waste_row;

static int cmp_waste(const void *a, const void *b) {
  const waste_row *x = a, *y = b;
  if (x->waste != y->waste)
    return x->waste > y->waste ? -1 : 1;
  return x->size < y->size ? -1 : x->size > y->size;
}

/* The top n sizes by waste (block - size) x peak live, for the small path;
 * large requests are listed with block 0. *rows is malloc'd. */
static size_t top_sizes(loaded *l, size_t n, waste_row **rows) {
  aa_replay_size_stat *v = NULL;
  aa_class_spec cls[AA_MAX_CLASSES];
  size_t nv = 0, nc = 0, i, k;
  waste_row *r;

  *rows = NULL;
  if (l->is_torch || aa_replay_sim_sizes(l->sim, &v, &nv) != AA_OK || nv == 0 ||
      aa_pool_classes(aa_replay_sim_pool(l->sim), cls, AA_MAX_CLASSES, &nc,
                      NULL) != AA_OK) {
    free(v);
    return 0;
  }
  r = calloc(nv, sizeof *r);
  if (r == NULL) {
    free(v);
    return 0;
  }
  for (i = 0; i < nv; i++) {
    r[i].size = v[i].size;
    r[i].allocs = v[i].allocs;
    r[i].max_live = v[i].max_live;
    for (k = 0; k < nc && cls[k].block_size < v[i].size; k++)
      ;
    if (k < nc) {
      r[i].block = cls[k].block_size;
      r[i].waste = (r[i].block - r[i].size) * r[i].max_live;
    }
  }
  free(v);
  qsort(r, nv, sizeof *r, cmp_waste);
  *rows = r;
  return nv < n ? nv : n;
}

static void print_top_text(FILE *f, loaded *l, size_t n) {
  waste_row *r = NULL;
  size_t k = top_sizes(l, n, &r), i;
  char a[32];

  fprintf(f, "\ntop sizes by waste at their peak live count:\n");
  fprintf(f, "  %12s %12s %10s %12s %8s %12s\n", "size", "allocs", "peak live",
          "class", "waste", "at peak");
  for (i = 0; i < k; i++) {
    fmt_bytes(r[i].waste, a, sizeof a);
    if (r[i].block == 0)
      fprintf(f, "  %12llu %12llu %10llu %12s %8s %12s\n",
              (unsigned long long)r[i].size, (unsigned long long)r[i].allocs,
              (unsigned long long)r[i].max_live, "large", "-", "-");
    else
      fprintf(f, "  %12llu %12llu %10llu %12llu %7.1f%% %12s\n",
              (unsigned long long)r[i].size, (unsigned long long)r[i].allocs,
              (unsigned long long)r[i].max_live,
              (unsigned long long)r[i].block,
              100.0 * (double)(r[i].block - r[i].size) / (double)r[i].block, a);
  }
  free(r);
}

static void print_top_json(FILE *f, loaded *l, size_t n) {
  waste_row *r = NULL;
  size_t k = top_sizes(l, n, &r), i;

  fprintf(f, ",\"top_sizes\":[");
  for (i = 0; i < k; i++)
    fprintf(f, "%s{\"size\":%llu,\"allocs\":%llu,\"max_live\":%llu,"
               "\"class\":%llu,\"waste_at_peak\":%llu}",
            i > 0 ? "," : "",
            (unsigned long long)r[i].size, (unsigned long long)r[i].allocs,
            (unsigned long long)r[i].max_live, (unsigned long long)r[i].block,
            (unsigned long long)r[i].waste);
  fprintf(f, "]");
  free(r);
}

/* One database of a multi-database run: its run row and, per policy, the
 * result. */
typedef struct db_run {
  db_meta meta;
  char label[64];
  uint64_t events;
  aa_replay_result res[MAX_POLICIES];
} db_run;

static void print_json_db_meta(FILE *f, const char *path, const db_run *d) {
  fprintf(f, "{\"path\":");
  print_json_string(f, path);
  fprintf(f, ",\"label\":");
  print_json_string(f, d->label);
  fprintf(f, ",\"run\":%lld,\"rank\":", (long long)d->meta.run_id);
  if (d->meta.rank >= 0)
    fprintf(f, "%lld", (long long)d->meta.rank);
  else
    fprintf(f, "null");
  fprintf(f, ",\"model\":");
  print_json_string(f, d->meta.model);
  fprintf(f, ",\"host\":");
  print_json_string(f, d->meta.host);
  fprintf(f, ",\"events\":%llu", (unsigned long long)d->events);
}

/* run/compare over several databases (one per rank): each database's run is
 * replayed on its own under the same policies; a combined row follows. */
int cmd_run_multi(const options *o, bool compare) {
  size_t np = compare ? o->npolicies : 1, nd = o->ndbs, i, p;
  db_run *d = calloc(nd, sizeof *d);
  const char **labels = calloc(nd, sizeof *labels);
  db_meta *metas = calloc(nd, sizeof *metas);
  aa_replay_result *col = calloc(nd, sizeof *col);
  aa_replay_result comb[MAX_POLICIES];
  const char *plabel[MAX_POLICIES];
  timing sum;
  int rc = 0;

  memset(&sum, 0, sizeof sum);
  if (d == NULL || labels == NULL || metas == NULL || col == NULL) {
    fprintf(stderr, "adaptalloc-replay: out of memory\n");
    rc = EXIT_INTERNAL;
    goto out;
  }
  if (o->top > 0) {
    rc = usage_error("--top goes with a single input%s", "");
    goto out;
  }
  for (i = 0; i < nd && rc == 0; i++) {
    options od = *o;
    loaded *l;
    timing t;
    char err[1024];

    od.in.path = o->dbs[i];
    if (db_meta_read(o->dbs[i], o->db_runs[i], &d[i].meta, err, sizeof err) !=
        AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s\n", err);
      rc = EXIT_INPUT;
      break;
    }
    od.in.run_id = d[i].meta.run_id;
    db_label(o->dbs[i], &d[i].meta, d[i].label, sizeof d[i].label);
    l = calloc(np, sizeof *l);
    if (l == NULL) {
      fprintf(stderr, "adaptalloc-replay: out of memory\n");
      rc = EXIT_INTERNAL;
      break;
    }
    for (p = 0; p < np && rc == 0; p++) {
      rc = load_policy(&od, o->npolicies > 0 ? o->policies[p] : NULL, &l[p]);
      if (rc == 0)
        rc = make_sim(&od, &l[p], false);
    }
    if (rc == 0)
      rc = replay_all(&od, l, np, &t, NULL);
    if (rc == 0) {
      d[i].events = t.events;
      sum.events += t.events;
      sum.wall_s += t.wall_s;
      sum.cpu_s += t.cpu_s;
      for (p = 0; p < np; p++) {
        d[i].res[p] = l[p].res;
        plabel[p] = l[p].label; /* into argv, or a literal: outlives l */
      }
    }
    free_loaded(l, np);
  }
  if (rc != 0)
    goto out;
  sum.events_per_s = sum.wall_s > 0 ? (double)sum.events / sum.wall_s : 0.0;
  sum.events_per_cpu_s = sum.cpu_s > 0 ? (double)sum.events / sum.cpu_s : 0.0;
  for (p = 0; p < np; p++) {
    for (i = 0; i < nd; i++)
      col[i] = d[i].res[p];
    result_combine(col, nd, &comb[p]);
  }
  if (o->json) {
    char desc[64];
    snprintf(desc, sizeof desc, "%zu databases", nd);
    fprintf(stdout, "{\"command\":");
    print_json_string(stdout, o->cmd);
    fprintf(stdout, ",\"input\":");
    print_json_string(stdout, desc);
    fprintf(stdout, ",\"pool\":");
    print_json_string(stdout, o->pool);
    fprintf(stdout, ",\"events\":%llu,\"wall_s\":%.6f,\"events_per_s\":%.0f,"
                    "\"cpu_s\":%.6f,\"events_per_cpu_s\":%.0f",
            (unsigned long long)sum.events, sum.wall_s, sum.events_per_s,
            sum.cpu_s, sum.events_per_cpu_s);
    if (!compare) {
      fprintf(stdout, ",\"policy\":");
      print_json_string(stdout, plabel[0]);
    }
    fprintf(stdout, ",\"databases\":[");
    for (i = 0; i < nd; i++) {
      if (i > 0)
        fprintf(stdout, ",");
      print_json_db_meta(stdout, o->dbs[i], &d[i]);
      if (!compare) {
        fprintf(stdout, ",\"result\":");
        print_json_result(stdout, &d[i].res[0]);
      } else {
        fprintf(stdout, ",\"runs\":[");
        for (p = 0; p < np; p++) {
          fprintf(stdout, "%s{\"policy\":", p > 0 ? "," : "");
          print_json_string(stdout, plabel[p]);
          fprintf(stdout, ",\"result\":");
          print_json_result(stdout, &d[i].res[p]);
          fprintf(stdout, "}");
        }
        fprintf(stdout, "]");
      }
      fprintf(stdout, "}");
    }
    fprintf(stdout, "],\"combined\":{\"databases\":%zu,\"events\":%llu", nd,
            (unsigned long long)sum.events);
    if (!compare) {
      fprintf(stdout, ",\"result\":");
      print_json_result(stdout, &comb[0]);
    } else {
      fprintf(stdout, ",\"runs\":[");
      for (p = 0; p < np; p++) {
        fprintf(stdout, "%s{\"policy\":", p > 0 ? "," : "");
        print_json_string(stdout, plabel[p]);
        fprintf(stdout, ",\"result\":");
        print_json_result(stdout, &comb[p]);
        fprintf(stdout, "}");
      }
      fprintf(stdout, "]");
    }
    fprintf(stdout, "}}\n");
  } else {
    for (i = 0; i < nd; i++) {
      labels[i] = d[i].label;
      metas[i] = d[i].meta;
    }
    printf("input             %zu databases, %llu events, pool %s\n", nd,
           (unsigned long long)sum.events, o->pool);
    for (i = 0; i < nd; i++)
      printf("  %-15s %s (run %lld, model %s)\n", d[i].label, o->dbs[i],
             (long long)d[i].meta.run_id,
             d[i].meta.model[0] != '\0' ? d[i].meta.model : "-");
    for (p = 0; p < np; p++) {
      for (i = 0; i < nd; i++)
        col[i] = d[i].res[p];
      printf("\npolicy %s\n", plabel[p]);
      print_db_table(stdout, labels, metas, col, nd, &comb[p]);
    }
  }
out:
  free(col);
  free(metas);
  free(labels);
  free(d);
  return rc;
}

int cmd_run(const options *o, bool compare) {
  size_t n = compare ? o->npolicies : 1, i;
  loaded *l;
  timing t;
  tool_plot plot;
  int rc = 0;

  if (!compare && o->npolicies > 1)
    return usage_error("run takes one --policy (use compare for several)%s", "");
  if (compare && n < 1)
    return usage_error("compare needs policies: P1.json P2.json ... (or "
                       "'default')%s",
                       "");
  if (o->out != NULL)
    return usage_error("-o is for suggest and import%s", "");
  if (o->plot != NULL && (o->ndbs > 1 || o->each_rank))
    return usage_error("--plot draws one input (not several --db or "
                       "--each-rank)%s",
                       "");
  if (o->ndbs > 1 || o->each_rank)
    return cmd_run_multi(o, compare);
  if (o->plot != NULL) { /* before the replay: an output that cannot be written */
    rc = check_output(o, "--plot", o->plot);
    if (rc != 0)
      return rc;
  }
  l = calloc(n, sizeof *l);
  if (l == NULL) {
    fprintf(stderr, "adaptalloc-replay: out of memory\n");
    return EXIT_INTERNAL;
  }
  if (compare && o->top > 0) {
    free(l);
    return usage_error("--top goes with run%s", "");
  }
  for (i = 0; i < n && rc == 0; i++) {
    rc = load_policy(o, o->npolicies > 0 ? o->policies[i] : NULL, &l[i]);
    if (rc == 0)
      rc = make_sim(o, &l[i], o->top > 0);
  }
  if (rc == 0 && o->plot != NULL) {
    if (plot_init(&plot, n) != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: out of memory\n");
      rc = EXIT_INTERNAL;
    }
  }
  if (rc == 0)
    rc = replay_all(o, l, n, &t, o->plot != NULL ? &plot : NULL);
  if (rc == 0 && o->plot != NULL) {
    const char *labels[MAX_POLICIES];
    char desc[512], title[600], err[1200];
    for (i = 0; i < n; i++)
      labels[i] = l[i].label;
    input_describe(&o->in, desc, sizeof desc);
    snprintf(title, sizeof title, "Reserved and in use over %s (pool %s)", desc,
             o->pool);
    if (plot_write(&plot, o->plot, title, labels, err, sizeof err) != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s\n", err);
      rc = EXIT_INPUT;
    }
  }
  if (o->plot != NULL)
    plot_free(&plot);
  /* the account at peak in use: a second pass (compare prints it only in
   * its JSON, so its table alone does not pay for one) */
  if (rc == 0 && (!compare || o->json))
    rc = account_in_use_pass(o, l, n);
  if (rc == 0 && o->json) {
    print_json_head(stdout, o, &t);
    if (!compare) {
      fprintf(stdout, ",\"policy\":");
      print_json_string(stdout, l[0].label);
      fprintf(stdout, ",\"result\":");
      print_json_result(stdout, &l[0].res);
      print_json_account(stdout, &l[0]);
      if (o->adapt)
        print_json_decisions(stdout, &l[0]);
      if (o->top > 0)
        print_top_json(stdout, &l[0], o->top);
    } else {
      fprintf(stdout, ",\"runs\":[");
      for (i = 0; i < n; i++) {
        fprintf(stdout, "%s{\"policy\":", i > 0 ? "," : "");
        print_json_string(stdout, l[i].label);
        fprintf(stdout, ",\"result\":");
        print_json_result(stdout, &l[i].res);
        print_json_account(stdout, &l[i]);
        if (o->adapt)
          print_json_decisions(stdout, &l[i]);
        fprintf(stdout, "}");
      }
      fprintf(stdout, "]");
    }
    fprintf(stdout, "}\n");
  } else if (rc == 0) {
    char desc[512];
    input_describe(&o->in, desc, sizeof desc);
    printf("input             %s, %llu events\npolicy pool       %s\n", desc,
           (unsigned long long)t.events, o->pool);
    if (!compare) {
      print_result_text(stdout, &l[0]);
      if (o->adapt)
        print_text_decisions(stdout, &l[0]);
      if (o->top > 0)
        print_top_text(stdout, &l[0], o->top);
    } else {
      const char *labels[MAX_POLICIES];
      aa_replay_result res[MAX_POLICIES];
      for (i = 0; i < n; i++) {
        labels[i] = l[i].label;
        res[i] = l[i].res;
      }
      printf("\n");
      print_compare_table(stdout, labels, res, n);
      if (o->adapt) {
        for (i = 0; i < n; i++) {
          printf("\n%s:\n", l[i].label);
          print_text_decisions(stdout, &l[i]);
        }
      }
    }
  }
  free_loaded(l, n);
  return rc;
}
