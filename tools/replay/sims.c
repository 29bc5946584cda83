/*
 * sims.c — adaptalloc-replay's policies and simulators, shared by run,
 * compare and suggest: loading a policy file (or "default", or a PyTorch
 * allocator model), making its simulator, and one pass of the input
 * through every simulator at once (replay_all).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "adaptalloc/policy.h"
#include "adaptalloc/replay.h"
#include "replay_tool.h"

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
    char *why = NULL; /* whole: it may quote a number of any length */
    rc = aa_policy_load_file_msg(path, &l->policy, &why);
    if (rc != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s\n", why != NULL ? why : aa_strerror(rc));
      free(why);
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
  rc.account_at_event = l->account_at_event;
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
    plot_add(f->plot, now, ev[n - 1].time_ns);
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

int account_in_use_pass(const options *o, loaded *l, size_t n) {
  loaded *l2 = NULL;
  size_t idx[MAX_POLICIES], k = 0, i;
  char why[160];
  options o2 = *o;
  timing t;
  int rc = 0;

  if (!input_rereadable(&o->in, why, sizeof why)) {
    for (i = 0; i < n; i++)
      if (!l[i].is_torch)
        snprintf(l[i].acct_use_why, sizeof l[i].acct_use_why,
                 "not available: %s (it takes a second pass)", why);
    return 0;
  }
  l2 = calloc(n, sizeof *l2);
  if (l2 == NULL) {
    for (i = 0; i < n; i++)
      if (!l[i].is_torch)
        snprintf(l[i].acct_use_why, sizeof l[i].acct_use_why,
                 "not available: out of memory for the second pass");
    return 0;
  }
  for (i = 0; i < n && rc == 0; i++) {
    uint64_t ev;
    if (l[i].is_torch || l[i].sim == NULL)
      continue;
    ev = aa_replay_sim_peak_in_use_event(l[i].sim);
    if (ev == 0) {
      snprintf(l[i].acct_use_why, sizeof l[i].acct_use_why,
               "none: nothing was in use");
      continue;
    }
    /* the same policy over a fresh simulator; the policy stays l[i]'s */
    l2[k].label = l[i].label;
    l2[k].policy = l[i].policy;
    l2[k].pc = l[i].pc;
    memcpy(l2[k].classes, l[i].classes, sizeof l2[k].classes);
    l2[k].nclasses = l[i].nclasses;
    l2[k].account_at_event = ev;
    rc = make_sim(o, &l2[k], false);
    idx[k++] = i;
  }
  o2.bench = false; /* the timing is the first pass's */
  o2.progress = 0;  /* and so is the progress bar */
  if (rc == 0 && k > 0)
    rc = replay_all(&o2, l2, k, &t, NULL);
  if (rc == EXIT_INTERNAL) {
    /* out of host memory (the error above): never figures with exit 0 */
    for (i = 0; i < k; i++)
      aa_replay_sim_free(l2[i].sim);
    free(l2);
    return rc;
  }
  if (rc != 0) {
    /* the first pass's figures stand: only this field is missing */
    for (i = 0; i < k; i++)
      snprintf(l[idx[i]].acct_use_why, sizeof l[idx[i]].acct_use_why,
               "not available: the second pass failed (exit %d; the error above)", rc);
  }
  for (i = 0; i < k && rc == 0; i++) {
    loaded *a = &l[idx[i]], *b = &l2[i];
    uint64_t ev = aa_replay_sim_peak_in_use_event(a->sim);
    b->acct_use.version = AA_ACCOUNT_VERSION;
    b->acct_use.size = (uint32_t)sizeof b->acct_use;
    if (b->res.peak_in_use != a->res.peak_in_use ||
        aa_replay_sim_peak_in_use_event(b->sim) != ev ||
        aa_replay_sim_account_at_event(b->sim, &b->acct_use) != AA_OK) {
      snprintf(a->acct_use_why, sizeof a->acct_use_why,
               "not available: the second pass did not repeat the first (peak in "
               "use %llu at event %llu, then %llu at event %llu)",
               (unsigned long long)a->res.peak_in_use, (unsigned long long)ev,
               (unsigned long long)b->res.peak_in_use,
               (unsigned long long)aa_replay_sim_peak_in_use_event(b->sim));
      continue;
    }
    a->acct_use = b->acct_use;
    a->have_acct_use = true;
    a->acct_use_event = ev;
  }
  for (i = 0; i < k; i++)
    aa_replay_sim_free(l2[i].sim); /* the policies are l's */
  free(l2);
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
