/*
 * main.c — adaptalloc-replay: replays recorded allocation traces (or
 * histograms) through the real allocator core over a simulated backend.
 *
 *   adaptalloc-replay run     [--policy P.json] INPUT
 *   adaptalloc-replay compare P1.json P2.json ... INPUT
 *   adaptalloc-replay suggest [--policy BASE.json] INPUT -o tuned.json
 *   adaptalloc-replay import  INPUT -o out.db
 *   adaptalloc-replay export  INPUT -o out.csv
 *   adaptalloc-replay ranks   --db rank0.db --db rank1.db ...
 *
 * Entry point main(); one function per command (cmd_run covers run and
 * compare: one parse of the input feeds one simulator per policy; with
 * several --db, cmd_run_multi replays each database in turn and adds a
 * combined row; `suggest` is in suggest.c, `ranks` in ranks.c, the command
 * line in args.c). Usage,
 * formats and exit codes: docs/replay.md, and `adaptalloc-replay --help`.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "adaptalloc/policy.h"
#include "adaptalloc/replay.h"
#include "replay_tool.h"
#include "strbuf.h"

/* ------------------------------------------------------------------ policies */

const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s != NULL ? s + 1 : p;
}

int load_policy(const options *o, const char *path, loaded *l) {
  char err[AA_POLICY_ERR_CAP];
  int rc;

  memset(l, 0, sizeof *l);
  if (path != NULL && strncmp(path, "torch:", 6) == 0) {
    /* PyTorch's caching allocator, modelled (replay_torch.c) */
    aa_replay_torch_config_init(&l->tcfg);
    if (aa_replay_torch_parse(path, &l->tcfg, err, sizeof err) != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s\n", err);
      return EXIT_INPUT;
    }
    if (o->adapt) {
      fprintf(stderr, "adaptalloc-replay: %s: --adapt runs adaptalloc's policy loop; "
                      "the PyTorch model has none\n",
              path);
      return EXIT_INPUT;
    }
    l->label = path;
    l->is_torch = true;
    rc = aa_policy_default(&l->policy); /* only for the pool's name */
    if (rc != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: out of memory\n");
      return EXIT_INTERNAL;
    }
    return 0;
  }
  if (path == NULL || strcmp(path, "default") == 0) {
    l->label = "default";
    rc = aa_policy_default(&l->policy);
  } else {
    l->label = base_name(path);
    rc = aa_policy_load_file(path, &l->policy, err, sizeof err);
    if (rc != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s\n", err);
      return rc == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
    }
  }
  if (rc != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: out of memory\n");
    return EXIT_INTERNAL;
  }
  aa_pool_config_init(&l->pc);
  l->pc.name = o->pool;
  rc = aa_policy_pool_config(l->policy, o->pool, &l->pc, l->classes,
                             AA_MAX_CLASSES, &l->nclasses);
  if (rc != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: %s: pool %s: %s\n", l->label, o->pool,
            aa_strerror(rc));
    return EXIT_INPUT;
  }
  return 0;
}

int make_sim(const options *o, loaded *l, bool collect_sizes) {
  aa_replay_config rc;
  char err[AA_REPLAY_ERR_CAP];
  int r;

  if (l->is_torch) {
    l->tcfg.capacity_bytes = o->capacity;
    l->tcfg.ignore_streams = o->ignore_streams;
    l->tcfg.on_error = o->on_error;
    l->tcfg.position_name = input_position_name(&o->in);
    l->tcfg.costs = o->costs;
    (void)collect_sizes;
    r = aa_replay_torch_new(&l->tcfg, &l->torch, err, sizeof err);
    if (r != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s: %s\n", l->label,
              err[0] != '\0' ? err : aa_strerror(r));
      return r == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
    }
    return 0;
  }
  aa_replay_config_init(&rc);
  rc.pool = l->pc;
  rc.classes = l->classes;
  rc.nclasses = l->nclasses;
  rc.costs = o->costs;
  rc.on_error = o->on_error;
  rc.capacity_bytes = o->capacity;
  rc.event_delay_ns = o->event_delay_ns;
  rc.ignore_streams = o->ignore_streams;
  rc.replay_failures = o->replay_failures;
  rc.collect_sizes = collect_sizes;
  rc.position_name = input_position_name(&o->in);
  rc.adapt = o->adapt;
  rc.per_thread = o->threads;
  aa_policy_adapt_params(l->policy, &rc.adapt_params);
  rc.adapt_every_events = o->adapt_every;
  r = aa_replay_sim_new(&rc, &l->sim, err, sizeof err);
  if (r != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: %s: %s\n", l->label, err);
    return r == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
  }
  return 0;
}

/* ------------------------------------------------------------------ replay */

typedef struct fanout {
  loaded *l;
  size_t n;
  tool_progress *prog;
  size_t failed;   /* index of the simulator that stopped the input */
  tool_plot *plot; /* NULL: no --plot */
} fanout;

static int fanout_sink(void *user, const aa_replay_event *ev, size_t n) {
  fanout *f = user;
  size_t i;

  for (i = 0; i < f->n; i++) {
    int rc = f->l[i].is_torch ? aa_replay_torch_feed(f->l[i].torch, ev, n)
                              : aa_replay_sim_feed(f->l[i].sim, ev, n);
    if (rc != AA_OK) {
      f->failed = i;
      return rc;
    }
  }
  f->prog->events += n;
  if (f->plot != NULL) {
    aa_replay_now now[MAX_POLICIES];
    for (i = 0; i < f->n && i < MAX_POLICIES; i++)
      if (f->l[i].is_torch)
        aa_replay_torch_now(f->l[i].torch, &now[i]);
      else
        aa_replay_sim_now(f->l[i].sim, &now[i]);
    plot_add(f->plot, now);
  }
  return AA_OK;
}

static double cpu_seconds(void) {
  struct timespec ts;

  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
    return 0.0;
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Replays the input through every simulator in l[0..n). Returns 0 or an
 * exit code (message printed). */
int replay_all(const options *o, loaded *l, size_t n, timing *t,
               tool_plot *plot) {
  tool_progress prog;
  fanout f;
  aa_replay_diag diag;
  char err[512];
  uint64_t t0, t1;
  double c0, c1;
  size_t i;
  int rc;

  progress_init(&prog, o->progress == 1 || (o->progress == -1 && isatty(2)));
  memset(&diag, 0, sizeof diag);
  f.l = l;
  f.n = n;
  f.prog = &prog;
  f.failed = 0;
  f.plot = plot;
  t0 = aa_now_ns();
  c0 = cpu_seconds();
  rc = input_feed(&o->in, o->on_error, fanout_sink, &f, &prog, &diag, err,
                  sizeof err);
  c1 = cpu_seconds();
  t1 = aa_now_ns();
  progress_end(&prog);
  if (rc != AA_OK) {
    if (err[0] != '\0')
      fprintf(stderr, "adaptalloc-replay: %s\n", err);
    else
      fprintf(stderr, "adaptalloc-replay: %s: %s\n", input_name(&o->in),
              l[f.failed].is_torch ? aa_replay_torch_error(l[f.failed].torch)
                                   : aa_replay_sim_error(l[f.failed].sim));
    return rc == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
  }
  t->events = prog.events;
  t->wall_s = (double)(t1 - t0) / 1e9;
  t->events_per_s = t->wall_s > 0 ? (double)t->events / t->wall_s : 0.0;
  t->cpu_s = c1 - c0;
  t->events_per_cpu_s = t->cpu_s > 0 ? (double)t->events / t->cpu_s : 0.0;
  for (i = 0; i < n; i++) {
    aa_replay_result *r = &l[i].res;
    if (l[i].is_torch)
      aa_replay_torch_result(l[i].torch, r);
    else
      aa_replay_sim_result(l[i].sim, r);
    /* Parse problems are the input's, counted once for every policy. */
    r->diag.malformed += diag.malformed;
    r->diag.unknown_action += diag.unknown_action;
    if (diag.first_error[0] != '\0' &&
        (r->diag.first_error[0] == '\0' || diag.first_line < r->diag.first_line)) {
      r->diag.first_line = diag.first_line;
      snprintf(r->diag.first_error, sizeof r->diag.first_error, "%s",
               diag.first_error);
    }
  }
  if (o->bench)
    fprintf(stderr, "bench: %llu events in %.3f s = %.2f M events/s (CPU "
                    "%.3f s = %.2f M events/s; %zu polic%s)\n",
            (unsigned long long)t->events, t->wall_s, t->events_per_s / 1e6,
            t->cpu_s, t->events_per_cpu_s / 1e6, n, n == 1 ? "y" : "ies");
  return 0;
}

void free_loaded(loaded *l, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    aa_replay_sim_free(l[i].sim);
    aa_replay_torch_free(l[i].torch);
    aa_policy_free(l[i].policy);
  }
  free(l);
}

void print_json_result(FILE *f, const aa_replay_result *r) {
  char buf[4096];
  size_t len = aa_replay_result_json(r, buf, sizeof buf);

  if (len >= sizeof buf) {
    char *big = malloc(len + 1);
    if (big != NULL) {
      aa_replay_result_json(r, big, len + 1);
      fputs(big, f);
      free(big);
      return;
    }
  }
  fputs(buf, f);
}

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

void print_json_head(FILE *f, const options *o, const timing *t) {
  char desc[512];

  input_describe(&o->in, desc, sizeof desc);
  fprintf(f, "{\"command\":");
  print_json_string(f, o->cmd);
  fprintf(f, ",\"input\":");
  print_json_string(f, desc);
  fprintf(f, ",\"pool\":");
  print_json_string(f, o->pool);
  fprintf(f, ",\"events\":%llu,\"wall_s\":%.6f,\"events_per_s\":%.0f,"
             "\"cpu_s\":%.6f,\"events_per_cpu_s\":%.0f",
          (unsigned long long)t->events, t->wall_s, t->events_per_s, t->cpu_s,
          t->events_per_cpu_s);
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
static int cmd_run_multi(const options *o, bool compare) {
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

static int cmd_run(const options *o, bool compare) {
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
    if (plot_write_svg(&plot, o->plot, title, labels, err, sizeof err) != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s\n", err);
      rc = EXIT_INPUT;
    }
  }
  if (o->plot != NULL)
    plot_free(&plot);
  if (rc == 0 && o->json) {
    print_json_head(stdout, o, &t);
    if (!compare) {
      fprintf(stdout, ",\"policy\":");
      print_json_string(stdout, l[0].label);
      fprintf(stdout, ",\"result\":");
      print_json_result(stdout, &l[0].res);
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
    printf("input             %s, %llu events, pool %s\n", desc,
           (unsigned long long)t.events, o->pool);
    if (!compare) {
      print_result_text(stdout, l[0].label, &l[0].res);
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

/* ------------------------------------------------------------------ export */

typedef struct export_ctx {
  FILE *f;
  tool_progress *prog;
  char *buf;
} export_ctx;

static int export_sink(void *user, const aa_replay_event *ev, size_t n) {
  export_ctx *c = user;
  size_t i, len = 0;

  for (i = 0; i < n; i++)
    len += aa_replay_csv_format(&ev[i], c->buf + len, 128);
  if (fwrite(c->buf, 1, len, c->f) != len)
    return AA_EIO;
  c->prog->events += n;
  return AA_OK;
}

static int cmd_export(const options *o) {
  tool_progress prog;
  aa_replay_diag diag;
  export_ctx c;
  char err[512];
  int rc;

  if (o->out == NULL)
    return usage_error("export needs -o FILE.csv ('-' = stdout)%s", "");
  c.f = strcmp(o->out, "-") == 0 ? stdout : fopen(o->out, "w");
  if (c.f == NULL) {
    fprintf(stderr, "adaptalloc-replay: %s: %s\n", o->out, strerror(errno));
    return EXIT_INPUT;
  }
  c.buf = malloc(1024 * 128); /* one batch; a line is under 128 bytes */
  if (c.buf == NULL) {
    if (c.f != stdout)
      fclose(c.f);
    fprintf(stderr, "adaptalloc-replay: out of memory\n");
    return EXIT_INTERNAL;
  }
  progress_init(&prog, o->progress == 1 || (o->progress == -1 && isatty(2)));
  c.prog = &prog;
  memset(&diag, 0, sizeof diag);
  fprintf(c.f, "%s\n", AA_REPLAY_CSV_HEADER);
  rc = input_feed(&o->in, o->on_error, export_sink, &c, &prog, &diag, err,
                  sizeof err);
  progress_end(&prog);
  free(c.buf);
  if (c.f != stdout) {
    if (fclose(c.f) != 0 && rc == AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s: %s\n", o->out, strerror(errno));
      return EXIT_INPUT;
    }
  } else if (fflush(stdout) != 0 && rc == AA_OK) {
    rc = AA_EIO;
  }
  if (rc != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: %s\n",
            err[0] != '\0' ? err : "writing the CSV failed");
    return rc == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
  }
  return 0;
}

/* ------------------------------------------------------------------ import */

static int cmd_import(const options *o) {
  tool_progress prog;
  aa_replay_diag diag;
  uint64_t n = 0;
  int64_t run = 0;
  char err[512];
  int rc;

  if (o->out == NULL)
    return usage_error("import needs -o FILE.db%s", "");
  if (o->in.kind == IN_DB_TRACE && o->in.path != NULL &&
      strcmp(o->in.path, o->out) == 0)
    return usage_error("import: input and output are the same file (%s)",
                       o->out);
  progress_init(&prog, o->progress == 1 || (o->progress == -1 && isatty(2)));
  memset(&diag, 0, sizeof diag);
  rc = input_import(&o->in, o->on_error, o->out, &prog, &diag, &n, &run, err,
                    sizeof err);
  progress_end(&prog);
  if (rc != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: %s\n", err);
    return rc == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
  }
  if (o->json) {
    fprintf(stdout, "{\"command\":\"import\",\"output\":");
    print_json_string(stdout, o->out);
    fprintf(stdout, ",\"run\":%lld,\"events\":%llu,\"malformed\":%llu,"
                    "\"unknown_action\":%llu}\n",
            (long long)run, (unsigned long long)n,
            (unsigned long long)diag.malformed,
            (unsigned long long)diag.unknown_action);
  } else {
    printf("imported %llu events into %s as run %lld", (unsigned long long)n,
           o->out, (long long)run);
    if (diag.malformed + diag.unknown_action > 0)
      printf(" (%llu bad lines skipped; first: %s)",
             (unsigned long long)(diag.malformed + diag.unknown_action),
             diag.first_error);
    printf("\n");
  }
  return 0;
}

int main(int argc, char **argv) {
  options o;
  int rc;

  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    const cmd_help *c = NULL;
    /* help COMMAND: that command's help */
    if (argc >= 3 && strcmp(argv[1], "help") == 0 &&
        (c = find_command(argv[2])) == NULL)
      return usage_error("help: unknown command '%s' (run, compare, suggest, "
                         "import, export, ranks)",
                         argv[2]);
    print_help(argc < 2 ? stderr : stdout, c);
    return argc < 2 ? EXIT_USAGE : EXIT_OK;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("adaptalloc-replay %d.%d.%d\n", AA_VERSION_MAJOR, AA_VERSION_MINOR,
           AA_VERSION_PATCH);
    return EXIT_OK;
  }
  if (find_command(argv[1]) == NULL)
    return usage_error("unknown command '%s' (run, compare, suggest, import, "
                       "export, ranks)",
                       argv[1]);
  rc = parse_args(argc, argv, &o);
  if (rc != 0)
    return rc;
  rc = check_inputs(&o);
  if (rc != 0)
    return rc;
  {
    size_t i;
    for (i = 0; i < o.ndbs; i++)
      o.db_runs[i] = o.in.run_id;
  }
  if (o.each_rank) {
    char err[1024];
    rc = db_expand_ranks(o.dbs, o.db_runs, &o.ndbs, MAX_DBS, err, sizeof err);
    if (rc != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s\n", err);
      return rc == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
    }
  }
  if (strcmp(o.cmd, "run") == 0)
    return cmd_run(&o, false);
  if (strcmp(o.cmd, "compare") == 0)
    return cmd_run(&o, true);
  if (strcmp(o.cmd, "suggest") == 0)
    return cmd_suggest(&o);
  if (strcmp(o.cmd, "export") == 0)
    return cmd_export(&o);
  if (strcmp(o.cmd, "ranks") == 0)
    return cmd_ranks(o.dbs, o.db_runs, o.ndbs, o.in.hist_pool,
                     o.in.kind == IN_DB_HIST, o.top > 0 ? o.top : 5,
                     o.threshold >= 0 ? o.threshold : 0.1, o.json);
  return cmd_import(&o);
}
