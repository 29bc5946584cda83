/*
 * suggest.c — `adaptalloc-replay suggest`: replays INPUT under the base
 * policy, tries candidate tables (every addition the tuner proposes, then the
 * best 16 .. 1), optionally the layout (max_small, large.mode), and writes
 * the best policy only when it improves on the base. Entry point:
 * cmd_suggest.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adaptalloc/policy.h"
#include "adaptalloc/replay.h"
#include "replay_tool.h"
#include "adaptalloc/internal/util.h"

/* ------------------------------------------------------------------ suggest */

/* The tuned policy document: base with pools.<pool>.classes replaced (and,
 * with --layout, its max_small and large.mode), through the policy module: a
 * merge patch validated as a whole, written by aa_policy_to_json. */
static char *tuned_json(const aa_policy *base, const char *pool,
                        const aa_class_spec *cls, size_t n,
                        const aa_pool_config *layout, const char *source,
                        char *err, size_t errcap) {
  aa__buf patch;
  aa_policy *tuned = NULL;
  char *out = NULL;
  char buf[700];
  size_t i;
  int rc;

  aa__buf_init(&patch);
  snprintf(buf, sizeof buf, "%s-tuned",
           aa_policy_name(base)[0] != '\0' ? aa_policy_name(base) : "default");
  aa__buf_puts(&patch, "{\"name\": ");
  aa__buf_json_cstr(&patch, buf);
  snprintf(buf, sizeof buf, "Suggested by adaptalloc-replay from %.500s: %s"
                            "exact classes for the sizes that waste most, the base ladder elsewhere.",
           source, layout != NULL ? "the max_small and large.mode that replayed best, " : "");
  aa__buf_puts(&patch, ", \"description\": ");
  aa__buf_json_cstr(&patch, buf);
  aa__buf_puts(&patch, ", \"pools\": {");
  aa__buf_json_cstr(&patch, pool);
  aa__buf_puts(&patch, ": {\"classes\": [");
  for (i = 0; i < n; i++) {
    if (cls[i].cache_limit == 0 && cls[i].prefill == 0)
      aa__buf_printf(&patch, "%s%zu", i ? ", " : "", cls[i].block_size);
    else
      aa__buf_printf(&patch, "%s{\"size\": %zu, \"cache_limit\": %u, \"prefill\": %u}",
                     i ? ", " : "", cls[i].block_size, cls[i].cache_limit,
                     cls[i].prefill);
  }
  aa__buf_puts(&patch, "]");
  if (layout != NULL) /* --layout: the pool's shape that replayed best */
    aa__buf_printf(&patch, ", \"max_small\": %zu, \"large\": {\"mode\": \"%s\"}",
                   layout->max_small, aa_large_mode_name(layout->large_mode));
  aa__buf_puts(&patch, "}}}");
  if (patch.failed) {
    snprintf(err, errcap, "out of memory");
    goto out;
  }
  rc = aa_policy_merge_patch(base, patch.data, patch.len, &tuned, err, errcap);
  if (rc != AA_OK)
    goto out;
  out = aa_policy_to_json(tuned);
  if (out == NULL)
    snprintf(err, errcap, "out of memory");
out:
  aa_policy_free(tuned);
  aa__buf_free(&patch);
  return out;
}

/* --layout: replays INPUT once under the base policy's pool with max_small
 * set to each of 16 KiB, 64 KiB, 256 KiB and the base's own (those not
 * above it), each in the base's large mode and the expandable one, and
 * gives `base` the shape with the lowest peak reserved (fewer backend calls
 * on a tie). The class table is the base's, cut at the new max_small. */
#define LAYOUT_MAX 8
static int choose_layout(const options *o, loaded *base, aa_replay_result *as_given) {
  static char labels[LAYOUT_MAX][48];
  size_t sizes[4] = {16u << 10, 64u << 10, 256u << 10, base->pc.max_small};
  aa_large_mode modes[2] = {base->pc.large_mode, AA_LARGE_EXPANDABLE};
  loaded *c = calloc(LAYOUT_MAX, sizeof *c);
  size_t n = 0, best = 0, i, j, k;
  timing t;
  int rc = 0;

  if (c == NULL) {
    fprintf(stderr, "adaptalloc-replay: out of memory\n");
    return EXIT_INTERNAL;
  }
  for (i = 0; i < 4; i++) {
    if (sizes[i] > base->pc.max_small || (i < 3 && sizes[i] == base->pc.max_small))
      continue;
    for (j = 0; j < 2; j++) {
      if (j == 1 && modes[0] == AA_LARGE_EXPANDABLE)
        continue;
      loaded *x = &c[n];
      x->pc = base->pc;
      x->pc.max_small = sizes[i];
      x->pc.large_mode = modes[j];
      for (k = 0; k < base->nclasses && base->classes[k].block_size < sizes[i]; k++)
        x->classes[x->nclasses++] = base->classes[k];
      x->classes[x->nclasses] = (aa_class_spec){0};
      x->classes[x->nclasses++].block_size = sizes[i];
      snprintf(labels[n], sizeof labels[n], "max_small %zu KiB, %s", sizes[i] >> 10,
               aa_large_mode_name(modes[j]));
      x->label = labels[n];
      rc = make_sim(o, x, false);
      if (rc != 0)
        goto out;
      n++;
    }
  }
  rc = replay_all(o, c, n, &t, NULL);
  if (rc != 0)
    goto out;
  for (i = 0; i < n; i++)
    if (c[i].pc.max_small == base->pc.max_small && c[i].pc.large_mode == base->pc.large_mode)
      *as_given = c[i].res;
  for (i = 1; i < n; i++) {
    const aa_replay_result *a = &c[i].res, *b = &c[best].res;
    if (a->peak_reserved < b->peak_reserved ||
        (a->peak_reserved == b->peak_reserved && a->backend_calls < b->backend_calls))
      best = i;
  }
  if (!o->json) {
    printf("layouts (peak reserved, backend calls):\n");
    for (i = 0; i < n; i++)
      printf("  %c %-36s %10.2f MiB %8llu\n", i == best ? '*' : ' ', c[i].label,
             (double)c[i].res.peak_reserved / (1 << 20),
             (unsigned long long)c[i].res.backend_calls);
    printf("\n");
  }
  base->pc.max_small = c[best].pc.max_small;
  base->pc.large_mode = c[best].pc.large_mode;
  memcpy(base->classes, c[best].classes, c[best].nclasses * sizeof base->classes[0]);
  base->nclasses = c[best].nclasses;
out:
  free_loaded(c, n);
  return rc;
}

/* The objective suggest and the loop report: peak reserved, then backend
 * calls. True when a is strictly better than b. */
static bool objective_better(const aa_replay_result *a, const aa_replay_result *b) {
  if (a->peak_reserved != b->peak_reserved)
    return a->peak_reserved < b->peak_reserved;
  return a->backend_calls < b->backend_calls;
}

/* Says so when `out` is inside an adaptalloc source tree (a folder above it
 * holds setup.py, policies/schema.json and core/include/adaptalloc/core.h):
 * pip install . ships every JSON file of policies/ in the next wheel, and the tree's
 * next checkout or clean may drop it. A warning, not a refusal: the file is
 * still written. */
static void warn_source_tree(const char *out) {
  char dir[PATH_MAX];
  char probe[PATH_MAX + 64];
  const char *slash = strrchr(out, '/');
  char *end;
  struct stat st;

  if (slash == NULL)
    snprintf(probe, sizeof probe, ".");
  else
    snprintf(probe, sizeof probe, "%.*s", (int)(slash - out == 0 ? 1 : slash - out), out);
  if (realpath(probe, dir) == NULL)
    return;
  for (;;) {
    static const char *const marks[] = {"setup.py", "policies/schema.json",
                                        "core/include/adaptalloc/core.h"};
    bool all = true;
    for (size_t k = 0; k < sizeof marks / sizeof marks[0] && all; k++) {
      snprintf(probe, sizeof probe, "%s/%s", dir, marks[k]);
      all = stat(probe, &st) == 0;
    }
    if (all) {
      fprintf(stderr,
              "adaptalloc-replay: warning: %s is inside adaptalloc's source tree (%s): "
              "pip install . ships every policies/*.json of it in the next wheel; keep "
              "tuned policies in a folder of your own (ADAPTALLOC_POLICY_DIR=DIR, or "
              "ADAPTALLOC_POLICY=FILE)\n",
              out, dir);
      return;
    }
    end = strrchr(dir, '/');
    if (end == NULL || end == dir)
      return;
    *end = '\0';
  }
}

/* How many of the ranked additions each candidate table keeps (0 = all that
 * suggest found): exact classes also cost partly filled slabs, which the
 * per-size estimate does not see, so fewer can replay better than more. */
static const size_t kSuggestKeep[] = {0, 16, 8, 4, 2, 1};
#define SUGGEST_CANDIDATES (sizeof kSuggestKeep / sizeof kSuggestKeep[0])

int cmd_suggest(const options *opts) {
  options local_opts = *opts; /* suggest tunes the static table: no loop */
  const options *o = &local_opts;
  loaded *l = NULL;
  aa_replay_size_stat *sizes = NULL;
  size_t nsizes = 0, i, ncand = 0, best = 0;
  aa_class_spec used[AA_MAX_CLASSES];
  aa_class_spec(*tuned)[AA_MAX_CLASSES] = NULL;
  size_t nnew[SUGGEST_CANDIDATES];
  size_t nused = 0;
  aa_replay_suggest_config sc;
  aa_adapt_params ap;
  aa_replay_result orig;
  char *docs[SUGGEST_CANDIDATES] = {NULL};
  char err[AA_POLICY_ERR_CAP + 256], desc[512];
  static char labels[SUGGEST_CANDIDATES][64];
  timing t0, t1;
  bool improved, write_it;
  int rc;

  local_opts.adapt = false;
  local_opts.adapt_every = 0;
  if (o->out == NULL)
    return usage_error("suggest needs -o FILE for the tuned policy%s", "");
  if (o->npolicies > 1)
    return usage_error("suggest takes one --policy (the base)%s", "");
  /* before the replays: an output that cannot be written, or that is an
   * input, is said now, not after minutes of work */
  rc = check_output(o, "suggest", o->out);
  if (rc != 0)
    return rc;
  warn_source_tree(o->out);
  l = calloc(1 + SUGGEST_CANDIDATES, sizeof *l);
  tuned = calloc(SUGGEST_CANDIDATES, sizeof *tuned);
  if (l == NULL || tuned == NULL) {
    free(l);
    free(tuned);
    fprintf(stderr, "adaptalloc-replay: out of memory\n");
    return EXIT_INTERNAL;
  }
  memset(&orig, 0, sizeof orig);
  rc = load_policy(o, o->npolicies > 0 ? o->policies[0] : NULL, &l[0]);
  if (rc == 0 && l[0].is_torch) {
    free_loaded(l, 1);
    free(tuned);
    return usage_error("suggest tunes an adaptalloc policy: %s cannot be its base "
                       "(compare it instead)",
                       o->policies[0]);
  }
  if (rc == 0 && o->layout) {
    rc = choose_layout(o, &l[0], &orig);
    l[0].label = "base, chosen layout";
  }
  if (rc == 0)
    rc = make_sim(o, &l[0], true);
  if (rc == 0)
    rc = replay_all(o, l, 1, &t0, NULL);
  if (rc != 0)
    goto out;
  if (!o->layout)
    orig = l[0].res;
  if (aa_pool_classes(aa_replay_sim_pool(l[0].sim), used, AA_MAX_CLASSES,
                      &nused, NULL) != AA_OK ||
      aa_replay_sim_sizes(l[0].sim, &sizes, &nsizes) != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: cannot read the run's classes/sizes\n");
    rc = EXIT_INTERNAL;
    goto out;
  }
  aa_replay_suggest_config_init(&sc);
  aa_policy_adapt_params(l[0].policy, &ap);
  sc.max_classes = o->max_classes > 0 ? o->max_classes : ap.max_classes;
  sc.slab_size = l[0].pc.slab_size;
  sc.max_small = l[0].pc.max_small;
  if (o->min_gain_slabs >= 0)
    sc.min_gain_slabs = o->min_gain_slabs;
  input_describe(&o->in, desc, sizeof desc);
  /* The candidates: all the additions suggest ranks, then the best 16, 8,
   * ... 1 of them (each distinct table once), replayed together. */
  for (size_t c = 0; c < SUGGEST_CANDIDATES; c++) {
    aa_replay_suggest_config scc = sc;
    loaded *x = &l[1 + ncand];
    aa_policy *check = NULL;
    if (kSuggestKeep[c] > 0) {
      if (nused + kSuggestKeep[c] >= nnew[0])
        continue; /* keeps them all: the first candidate */
      scc.max_classes = nused + kSuggestKeep[c];
    }
    rc = aa_replay_suggest_classes(sizes, nsizes, used, nused, &scc, tuned[ncand],
                                   AA_MAX_CLASSES, &nnew[ncand]);
    if (rc != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: suggest: %s\n", aa_strerror(rc));
      rc = EXIT_INTERNAL;
      goto out;
    }
    docs[ncand] = tuned_json(l[0].policy, o->pool, tuned[ncand], nnew[ncand],
                             o->layout ? &l[0].pc : NULL, desc, err, sizeof err);
    if (docs[ncand] == NULL) {
      fprintf(stderr, "adaptalloc-replay: %s\n", err);
      rc = EXIT_INTERNAL;
      goto out;
    }
    rc = aa_policy_parse(docs[ncand], strlen(docs[ncand]), &check, err, sizeof err);
    if (rc != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: the tuned policy does not validate "
                      "(a bug): %s\n",
              err);
      rc = EXIT_INTERNAL;
      goto out;
    }
    /* Written in the policy module's own canonical form. */
    free(docs[ncand]);
    docs[ncand] = aa_policy_to_json(check);
    x->policy = check;
    if (docs[ncand] == NULL) {
      fprintf(stderr, "adaptalloc-replay: out of memory\n");
      rc = EXIT_INTERNAL;
      goto out;
    }
    if (kSuggestKeep[c] == 0)
      snprintf(labels[ncand], sizeof labels[ncand], "all added");
    else
      snprintf(labels[ncand], sizeof labels[ncand], "best %zu added", kSuggestKeep[c]);
    x->label = labels[ncand];
    aa_pool_config_init(&x->pc);
    x->pc.name = o->pool;
    rc = aa_policy_pool_config(x->policy, o->pool, &x->pc, x->classes, AA_MAX_CLASSES,
                               &x->nclasses);
    if (rc != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: tuned policy: %s\n", aa_strerror(rc));
      rc = EXIT_INTERNAL;
      goto out;
    }
    ncand++;
    rc = make_sim(o, x, false);
    if (rc != 0)
      goto out;
  }
  rc = replay_all(o, &l[1], ncand, &t1, NULL);
  if (rc != 0)
    goto out;
  for (i = 1; i < ncand; i++)
    if (objective_better(&l[1 + i].res, &l[1 + best].res))
      best = i;
  improved = objective_better(&l[1 + best].res, &orig);
  write_it = improved || o->force;
  if (write_it) {
    aa__outfile of;
    char oerr[PATH_MAX * 2 + 128];
    if (aa__out_open(&of, o->out, 0666, oerr, sizeof oerr) != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s; nothing written\n", oerr);
      rc = EXIT_INPUT;
      goto out;
    }
    if (fputs(docs[best], of.f) < 0 || fputc('\n', of.f) == EOF) {
      fprintf(stderr, "adaptalloc-replay: %s: %s; nothing written\n", o->out, strerror(errno));
      aa__out_abort(&of);
      rc = EXIT_INPUT;
      goto out;
    }
    if (aa__out_commit(&of, oerr, sizeof oerr) != AA_OK) {
      fprintf(stderr, "adaptalloc-replay: %s; nothing written\n", oerr);
      rc = EXIT_INPUT;
      goto out;
    }
  }
  if (o->json) {
    print_json_head(stdout, o, &t0);
    fprintf(stdout, ",\"output\":");
    print_json_string(stdout, o->out);
    if (o->layout)
      fprintf(stdout, ",\"layout\":{\"max_small\":%zu,\"large_mode\":\"%s\"}", l[0].pc.max_small,
              aa_large_mode_name(l[0].pc.large_mode));
    fprintf(stdout, ",\"classes\":[");
    for (i = 0; i < nnew[best]; i++)
      fprintf(stdout, "%s%zu", i > 0 ? "," : "", tuned[best][i].block_size);
    fprintf(stdout, "],\"added\":[");
    {
      size_t j = 0;
      bool first = true;
      for (i = 0; i < nnew[best]; i++) {
        while (j < nused && used[j].block_size < tuned[best][i].block_size)
          j++;
        if (j >= nused || used[j].block_size != tuned[best][i].block_size) {
          fprintf(stdout, "%s%zu", first ? "" : ",", tuned[best][i].block_size);
          first = false;
        }
      }
    }
    fprintf(stdout, "],\"base\":{\"policy\":");
    print_json_string(stdout, l[0].label);
    fprintf(stdout, ",\"result\":");
    print_json_result(stdout, &l[0].res);
    fprintf(stdout, "},\"tuned\":{\"policy\":");
    print_json_string(stdout, l[1 + best].label);
    fprintf(stdout, ",\"result\":");
    print_json_result(stdout, &l[1 + best].res);
    fprintf(stdout, "},\"objective\":{\"before\":{\"peak_reserved\":%llu,\"backend_calls\":%llu},"
                    "\"after\":{\"peak_reserved\":%llu,\"backend_calls\":%llu},"
                    "\"improved\":%s,\"written\":%s},\"candidates\":[",
            (unsigned long long)orig.peak_reserved, (unsigned long long)orig.backend_calls,
            (unsigned long long)l[1 + best].res.peak_reserved,
            (unsigned long long)l[1 + best].res.backend_calls, improved ? "true" : "false",
            write_it ? "true" : "false");
    for (i = 0; i < ncand; i++)
      fprintf(stdout, "%s{\"label\":\"%s\",\"classes\":%zu,\"peak_reserved\":%llu,"
                      "\"backend_calls\":%llu}",
              i ? "," : "", l[1 + i].label, nnew[i],
              (unsigned long long)l[1 + i].res.peak_reserved,
              (unsigned long long)l[1 + i].res.backend_calls);
    fprintf(stdout, "]}\n");
  } else {
    const char *lab[2] = {l[0].label, l[1 + best].label};
    aa_replay_result res[2] = {l[0].res, l[1 + best].res};
    printf("input             %s, %llu events\npolicy pool       %s\n", desc,
           (unsigned long long)t0.events, o->pool);
    printf("objective         peak reserved, then backend calls\n");
    printf("  before          %.2f MiB, %llu calls (the base policy%s)\n",
           (double)orig.peak_reserved / (1 << 20), (unsigned long long)orig.backend_calls,
           o->layout ? " as given" : "");
    for (i = 0; i < ncand; i++)
      printf("  %c %-13s %.2f MiB, %llu calls (%zu classes)\n", i == best ? '*' : ' ',
             l[1 + i].label, (double)l[1 + i].res.peak_reserved / (1 << 20),
             (unsigned long long)l[1 + i].res.backend_calls, nnew[i]);
    if (write_it)
      printf("wrote             %s (%zu classes, %zu before)%s\n\n", o->out, nnew[best],
             nused, improved ? "" : ": NOT an improvement, written because of --force");
    else
      printf("wrote             nothing\n\n");
    print_compare_table(stdout, lab, res, 2);
  }
  if (!write_it) {
    fprintf(stderr, "adaptalloc-replay: suggest: no candidate improves on the base "
                    "(peak reserved %.2f MiB, %llu backend calls; the best, %s, gives %.2f MiB, "
                    "%llu calls); %s not written (--force writes it anyway)\n",
            (double)orig.peak_reserved / (1 << 20), (unsigned long long)orig.backend_calls,
            l[1 + best].label, (double)l[1 + best].res.peak_reserved / (1 << 20),
            (unsigned long long)l[1 + best].res.backend_calls, o->out);
    rc = EXIT_NOT_IMPROVED;
  }
out:
  for (i = 0; i < SUGGEST_CANDIDATES; i++)
    free(docs[i]);
  free(sizes);
  free(tuned);
  free_loaded(l, 1 + ncand);
  return rc;
}
