/*
 * args.c — adaptalloc-replay's command line: option parsing into `options`
 * (numbers with their suffixes, which input a path is) and the input
 * checks; the help text and usage errors are help.c's. Entry points:
 * parse_args, check_inputs.
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
#include "adaptalloc/internal/timespec.h"
#include "adaptalloc/internal/util.h"

static bool parse_u64_arg(const char *s, uint64_t *out, bool suffixes) {
  char *end = NULL;
  unsigned long long v;
  uint64_t mul = 1;

  if (s == NULL || *s == '\0' || *s == '-')
    return false;
  errno = 0;
  v = strtoull(s, &end, 0);
  if (errno != 0 || end == s)
    return false;
  if (*end != '\0') {
    if (!suffixes)
      return false;
    switch (*end) {
    case 'k':
    case 'K': mul = 1ull << 10; break;
    case 'm':
    case 'M': mul = 1ull << 20; break;
    case 'g':
    case 'G': mul = 1ull << 30; break;
    case 't':
    case 'T': mul = 1ull << 40; break;
    default: return false;
    }
    end++;
    if (strcmp(end, "") != 0 && strcmp(end, "B") != 0 && strcmp(end, "iB") != 0)
      return false;
    if (v > UINT64_MAX / mul)
      return false;
  }
  *out = (uint64_t)v * mul;
  return true;
}

static bool parse_double_arg(const char *s, double *out) {
  char *end = NULL;
  double d;

  if (s == NULL || *s == '\0')
    return false;
  errno = 0;
  d = strtod(s, &end);
  if (errno != 0 || *end != '\0' || !(d >= 0.0) || d > 1e12)
    return false;
  *out = d;
  return true;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* A database starts with "SQLite format 3\0". */
static bool looks_like_db(const char *path) {
  char head[16];
  FILE *f = fopen(path, "rb");
  bool yes = false;

  if (f == NULL)
    return ends_with(path, ".db") || ends_with(path, ".sqlite");
  if (fread(head, 1, sizeof head, f) == sizeof head)
    yes = memcmp(head, "SQLite format 3", 16) == 0;
  fclose(f);
  return yes;
}

enum {
  OPT_CSV = 256,
  OPT_DB,
  OPT_RUN,
  OPT_HISTOGRAM,
  OPT_FROM_HIST,
  OPT_HIST_POOL,
  OPT_EVENTS,
  OPT_SEED,
  OPT_LIVE,
  OPT_POLICY,
  OPT_POOL,
  OPT_JSON,
  OPT_PROGRESS,
  OPT_NO_PROGRESS,
  OPT_ON_ERROR,
  OPT_BENCH,
  OPT_COST_ALLOC,
  OPT_COST_FREE,
  OPT_COST_GIB,
  OPT_COST_HIT,
  OPT_COST_EVENT,
  OPT_COST_ALIAS,
  OPT_COST_UNALIAS,
  OPT_CAPACITY,
  OPT_DELAY,
  OPT_IGNORE_STREAMS,
  OPT_REPLAY_FAILURES,
  OPT_MAX_CLASSES,
  OPT_MIN_GAIN,
  OPT_ADAPT,
  OPT_ADAPT_EVERY,
  OPT_TOP,
  OPT_THREADS,
  OPT_THRESHOLD,
  OPT_EACH_RANK,
  OPT_LAYOUT,
  OPT_FORCE,
  OPT_PLOT,
  OPT_FORMAT,
  OPT_MAX_ENTRIES,
  OPT_SINCE,
  OPT_UNTIL,
  OPT_LAST_SECONDS,
  OPT_HELP
};

static const struct option long_opts[] = {
    {"csv", required_argument, NULL, OPT_CSV},
    {"db", required_argument, NULL, OPT_DB},
    {"run", required_argument, NULL, OPT_RUN},
    {"histogram", required_argument, NULL, OPT_HISTOGRAM},
    {"from-histogram", no_argument, NULL, OPT_FROM_HIST},
    {"hist-pool", required_argument, NULL, OPT_HIST_POOL},
    {"events", required_argument, NULL, OPT_EVENTS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"live", required_argument, NULL, OPT_LIVE},
    {"policy", required_argument, NULL, OPT_POLICY},
    {"pool", required_argument, NULL, OPT_POOL},
    {"json", no_argument, NULL, OPT_JSON},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"on-error", required_argument, NULL, OPT_ON_ERROR},
    {"bench", no_argument, NULL, OPT_BENCH},
    {"cost-alloc-us", required_argument, NULL, OPT_COST_ALLOC},
    {"cost-free-us", required_argument, NULL, OPT_COST_FREE},
    {"cost-alloc-us-per-gib", required_argument, NULL, OPT_COST_GIB},
    {"cost-hit-ns", required_argument, NULL, OPT_COST_HIT},
    {"cost-event-ns", required_argument, NULL, OPT_COST_EVENT},
    {"cost-alias-us", required_argument, NULL, OPT_COST_ALIAS},
    {"cost-unalias-us", required_argument, NULL, OPT_COST_UNALIAS},
    {"capacity", required_argument, NULL, OPT_CAPACITY},
    {"event-delay-us", required_argument, NULL, OPT_DELAY},
    {"ignore-streams", no_argument, NULL, OPT_IGNORE_STREAMS},
    {"replay-failures", no_argument, NULL, OPT_REPLAY_FAILURES},
    {"max-classes", required_argument, NULL, OPT_MAX_CLASSES},
    {"min-gain-slabs", required_argument, NULL, OPT_MIN_GAIN},
    {"layout", no_argument, NULL, OPT_LAYOUT},
    {"force", no_argument, NULL, OPT_FORCE},
    {"adapt", no_argument, NULL, OPT_ADAPT},
    {"adapt-every", required_argument, NULL, OPT_ADAPT_EVERY},
    {"top", required_argument, NULL, OPT_TOP},
    {"threads", no_argument, NULL, OPT_THREADS},
    {"threshold", required_argument, NULL, OPT_THRESHOLD},
    {"each-rank", no_argument, NULL, OPT_EACH_RANK},
    {"plot", required_argument, NULL, OPT_PLOT},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"max-entries", required_argument, NULL, OPT_MAX_ENTRIES},
    {"since", required_argument, NULL, OPT_SINCE},
    {"until", required_argument, NULL, OPT_UNTIL},
    {"last-seconds", required_argument, NULL, OPT_LAST_SECONDS},
    {"output", required_argument, NULL, 'o'},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0}};

static int set_input(options *o, tool_input_kind k, const char *path) {
  if (o->in.kind != IN_NONE && !(o->in.kind == IN_DB_TRACE && k == IN_DB_TRACE))
    return usage_error("more than one input given (at %s)", path);
  if (k == IN_DB_TRACE) {
    /* Several databases (one per rank): in.path stays the first. */
    if (o->ndbs == MAX_DBS)
      return usage_error("at most 256 databases (at %s)", path);
    o->dbs[o->ndbs++] = path;
    if (o->ndbs > 1)
      return 0;
  }
  o->in.kind = k;
  o->in.path = path;
  return 0;
}

/* Parses argv[2..]. Returns 0, or an exit code. */
int parse_args(int argc, char **argv, options *o) {
  uint64_t u;
  int c, rc;

  memset(o, 0, sizeof *o);
  o->cmd = argv[1];
  o->pool = "device";
  o->progress = -1;
  o->on_error = AA_REPLAY_STOP;
  o->min_gain_slabs = -1.0;
  o->threshold = -1.0;
  {
    aa_replay_config d;
    aa_replay_config_init(&d);
    o->costs = d.costs;
  }
  aa_replay_synth_config_init(&o->in.synth);
  optind = 2;
  opterr = 0;
  for (;;) {
    c = getopt_long(argc, argv, ":o:", long_opts, NULL);
    if (c == -1)
      break;
    switch (c) {
    case OPT_CSV:
      rc = set_input(o, IN_CSV, optarg);
      if (rc != 0)
        return rc;
      break;
    case OPT_DB:
      rc = set_input(o, IN_DB_TRACE, optarg);
      if (rc != 0)
        return rc;
      break;
    case OPT_HISTOGRAM:
      rc = set_input(o, IN_HIST, optarg);
      if (rc != 0)
        return rc;
      break;
    case OPT_RUN:
      if (!parse_u64_arg(optarg, &u, false) || u == 0 || u > INT64_MAX)
        return usage_error("--run: '%s' is not a run id (a positive integer)",
                           optarg);
      o->in.run_id = (int64_t)u;
      break;
    case OPT_FROM_HIST:
      o->in.from_histogram = true;
      break;
    case OPT_HIST_POOL:
      o->in.hist_pool = optarg;
      break;
    case OPT_EVENTS:
      if (!parse_u64_arg(optarg, &o->in.synth.events, true) ||
          o->in.synth.events == 0)
        return usage_error("--events: '%s' is not a positive count", optarg);
      o->have_events = true;
      break;
    case OPT_SEED:
      if (!parse_u64_arg(optarg, &o->in.synth.seed, false))
        return usage_error("--seed: '%s' is not a non-negative integer", optarg);
      break;
    case OPT_LIVE:
      o->in.live_given = true;
      if (!parse_u64_arg(optarg, &o->in.synth.live_target, true) ||
          o->in.synth.live_target == 0)
        return usage_error("--live: '%s' is not a positive count", optarg);
      break;
    case OPT_POLICY:
      if (o->npolicies == MAX_POLICIES)
        return usage_error("at most 16 policies (at %s)", optarg);
      o->policies[o->npolicies++] = optarg;
      break;
    case OPT_POOL:
      if (strcmp(optarg, "device") != 0 && strcmp(optarg, "pinned") != 0 &&
          strcmp(optarg, "host") != 0)
        return usage_error("--pool: '%s' is not device, pinned or host", optarg);
      o->pool = optarg;
      o->pool_given = true;
      break;
    case OPT_JSON:
      o->json = true;
      break;
    case OPT_PROGRESS:
      o->progress = 1;
      break;
    case OPT_NO_PROGRESS:
      o->progress = 0;
      break;
    case OPT_ON_ERROR:
      if (strcmp(optarg, "stop") == 0)
        o->on_error = AA_REPLAY_STOP;
      else if (strcmp(optarg, "count") == 0)
        o->on_error = AA_REPLAY_COUNT;
      else
        return usage_error("--on-error: '%s' is not stop or count", optarg);
      break;
    case OPT_BENCH:
      o->bench = true;
      break;
    case OPT_COST_ALLOC:
    case OPT_COST_FREE:
    case OPT_COST_GIB:
    case OPT_COST_HIT:
    case OPT_COST_EVENT:
    case OPT_COST_ALIAS:
    case OPT_COST_UNALIAS: {
      double d;
      if (!parse_double_arg(optarg, &d))
        return usage_error("cost: '%s' is not a non-negative number", optarg);
      if (c == OPT_COST_ALLOC)
        o->costs.alloc_us = d;
      else if (c == OPT_COST_FREE)
        o->costs.free_us = d;
      else if (c == OPT_COST_GIB)
        o->costs.alloc_us_per_gib = d;
      else if (c == OPT_COST_HIT)
        o->costs.hit_ns = d;
      else if (c == OPT_COST_EVENT)
        o->costs.event_ns = d;
      else if (c == OPT_COST_ALIAS)
        o->costs.alias_us = d;
      else
        o->costs.unalias_us = d;
      break;
    }
    case OPT_CAPACITY:
      if (!parse_u64_arg(optarg, &o->capacity, true))
        return usage_error("--capacity: '%s' is not a byte count", optarg);
      break;
    case OPT_DELAY:
      if (!parse_u64_arg(optarg, &u, false) || u > UINT64_MAX / 1000)
        return usage_error("--event-delay-us: '%s' is not a count of us", optarg);
      o->event_delay_ns = u * 1000;
      break;
    case OPT_IGNORE_STREAMS:
      o->ignore_streams = true;
      break;
    case OPT_REPLAY_FAILURES:
      o->replay_failures = true;
      break;
    case OPT_MAX_CLASSES:
      if (!parse_u64_arg(optarg, &u, false) || u == 0 || u > AA_MAX_CLASSES)
        return usage_error("--max-classes: '%s' is not in 1..128", optarg);
      o->max_classes = (size_t)u;
      break;
    case OPT_LAYOUT:
      o->layout = true;
      break;
    case OPT_FORCE:
      o->force = true;
      break;
    case OPT_MIN_GAIN:
      if (!parse_double_arg(optarg, &o->min_gain_slabs))
        return usage_error("--min-gain-slabs: '%s' is not a non-negative "
                           "number",
                           optarg);
      break;
    case OPT_ADAPT:
      o->adapt = true;
      break;
    case OPT_ADAPT_EVERY:
      if (!parse_u64_arg(optarg, &o->adapt_every, true) || o->adapt_every == 0)
        return usage_error("--adapt-every: '%s' is not a positive count", optarg);
      break;
    case OPT_THREADS:
      o->threads = true;
      break;
    case OPT_TOP:
      if (!parse_u64_arg(optarg, &u, false) || u == 0 || u > 1000)
        return usage_error("--top: '%s' is not in 1..1000", optarg);
      o->top = (size_t)u;
      break;
    case OPT_EACH_RANK:
      o->each_rank = true;
      break;
    case OPT_THRESHOLD:
      if (!parse_double_arg(optarg, &o->threshold) || o->threshold > 1.0)
        return usage_error("--threshold: '%s' is not a number in 0..1", optarg);
      break;
    case 'o':
      o->out = optarg;
      break;
    case OPT_PLOT:
      if (strcmp(o->cmd, "compare") != 0 && strcmp(o->cmd, "run") != 0)
        return usage_error("--plot goes with run and compare (at %s)", optarg);
      if (!plot_format_ok(optarg))
        return usage_error("--plot: '%s' is neither FILE.svg nor FILE.png", optarg);
      o->plot = optarg;
      break;
    case OPT_FORMAT:
      if (strcmp(o->cmd, "export") != 0)
        return usage_error("--format goes with export (at %s)", optarg);
      if (strcmp(optarg, "torch-snapshot") != 0 && strcmp(optarg, "csv") != 0)
        return usage_error("--format: '%s' is not csv or torch-snapshot", optarg);
      o->torch_snapshot = strcmp(optarg, "torch-snapshot") == 0;
      break;
    case OPT_MAX_ENTRIES:
      if (strcmp(o->cmd, "export") != 0)
        return usage_error("--max-entries goes with export (at %s)", optarg);
      if (!parse_u64_arg(optarg, &o->max_entries, true) || o->max_entries == 0)
        return usage_error("--max-entries: '%s' is not a count above 0 (k, M suffixes)", optarg);
      break;
    case OPT_SINCE:
    case OPT_UNTIL: {
      char why[160];
      int64_t ms = 0;
      const char *name = c == OPT_SINCE ? "--since" : "--until";
      if (strcmp(o->cmd, "export") != 0)
        return usage_error("--since and --until go with export (at %s)", optarg);
      if (aa__parse_time(optarg, strlen(optarg), &ms, why, sizeof why) != AA_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s '%s': %s", name, optarg, why);
        return usage_error("%s", msg);
      }
      if (c == OPT_SINCE) {
        o->has_since = true;
        o->since_ms = ms;
      } else {
        o->has_until = true;
        o->until_ms = ms;
      }
      break;
    }
    case OPT_LAST_SECONDS: {
      char *end = NULL;
      if (strcmp(o->cmd, "export") != 0)
        return usage_error("--last-seconds goes with export (at %s)", optarg);
      o->last_seconds = strtod(optarg, &end);
      if (end == optarg || *end != '\0' || !(o->last_seconds > 0) || o->last_seconds > 1e9)
        return usage_error("--last-seconds: '%s' is not a number of seconds above 0", optarg);
      break;
    }
    case OPT_HELP:
      print_help(stdout, find_command(o->cmd));
      exit(EXIT_OK);
    case ':':
      return usage_error("option %s needs an argument", argv[optind - 1]);
    default:
      return usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  for (; optind < argc; optind++) {
    const char *a = argv[optind];
    /* compare: every .json (or 'default') is a policy; run/suggest: one. */
    if ((strcmp(o->cmd, "compare") == 0 ||
         ((strcmp(o->cmd, "run") == 0 || strcmp(o->cmd, "suggest") == 0) &&
          o->npolicies == 0)) &&
        (ends_with(a, ".json") || strcmp(a, "default") == 0 || strncmp(a, "torch:", 6) == 0)) {
      if (o->npolicies == MAX_POLICIES)
        return usage_error("at most 16 policies (at %s)", a);
      o->policies[o->npolicies++] = a;
      continue;
    }
    rc = set_input(o, strcmp(a, "-") != 0 && looks_like_db(a) ? IN_DB_TRACE : IN_CSV, a);
    if (rc != 0)
      return rc;
  }
  if (o->in.kind == IN_NONE)
    return usage_error("no input given%s", " (--csv FILE, --db FILE or "
                                           "--histogram FILE)");
  if (o->in.from_histogram) {
    if (o->in.kind != IN_DB_TRACE)
      return usage_error("--from-histogram needs --db FILE%s", "");
    o->in.kind = IN_DB_HIST;
  }
  if (o->in.hist_pool != NULL && o->in.kind != IN_DB_HIST)
    return usage_error("--hist-pool goes with --db FILE --from-histogram%s", "");
  if (o->in.run_id > 0 && o->in.kind != IN_DB_TRACE && o->in.kind != IN_DB_HIST)
    return usage_error("--run goes with --db FILE%s", "");
  if (o->have_events && o->in.kind != IN_HIST && o->in.kind != IN_DB_HIST)
    return usage_error("--events goes with a histogram input%s", "");
  if (o->adapt_every > 0 && !o->adapt)
    return usage_error("--adapt-every goes with --adapt%s", "");
  if (o->ndbs > 1 && strcmp(o->cmd, "run") != 0 &&
      strcmp(o->cmd, "compare") != 0 && strcmp(o->cmd, "ranks") != 0)
    return usage_error("%s takes one input (several --db go with run, "
                       "compare and ranks)",
                       o->cmd);
  if (o->each_rank && strcmp(o->cmd, "run") != 0 &&
      strcmp(o->cmd, "compare") != 0 && strcmp(o->cmd, "ranks") != 0)
    return usage_error("--each-rank goes with run, compare and ranks%s", "");
  if (o->each_rank && o->in.kind != IN_DB_TRACE && o->in.kind != IN_DB_HIST)
    return usage_error("--each-rank reads databases: --db FILE ...%s", "");
  if (o->each_rank && o->in.run_id > 0)
    return usage_error("--each-rank picks the runs itself: drop --run%s", "");
  if (o->threshold >= 0 && strcmp(o->cmd, "ranks") != 0)
    return usage_error("--threshold goes with ranks%s", "");
  if (strcmp(o->cmd, "ranks") == 0) {
    if (o->in.kind != IN_DB_TRACE && o->in.kind != IN_DB_HIST)
      return usage_error("ranks reads databases: --db FILE ...%s", "");
    if (o->npolicies > 0)
      return usage_error("ranks takes no policy (it reads histograms)%s", "");
    if (o->out != NULL)
      return usage_error("-o is for suggest, import and export%s", "");
  }
  return 0;
}

/* Every input file must exist before anything is read: a missing file is
 * named once, with the reason, and nothing else is said about it. */
int check_inputs(const options *o) {
  const char *paths[MAX_DBS + 1];
  size_t n = 0, i;

  if (o->in.kind == IN_DB_TRACE || o->in.kind == IN_DB_HIST) {
    for (i = 0; i < o->ndbs; i++)
      paths[n++] = o->dbs[i];
  } else if (o->in.path != NULL && strcmp(o->in.path, "-") != 0) {
    paths[n++] = o->in.path;
  }
  for (i = 0; i < n; i++) {
    if (access(paths[i], R_OK) == 0)
      continue;
    if (errno == ENOENT && (o->in.kind == IN_DB_TRACE || o->in.kind == IN_DB_HIST))
      fprintf(stderr, "adaptalloc-replay: %s: No such file or directory (the "
                      "database a run writes is ADAPTALLOC_DB, ./adaptalloc.db by "
                      "default)\n",
              paths[i]);
    else
      fprintf(stderr, "adaptalloc-replay: %s: %s\n", paths[i], strerror(errno));
    return EXIT_INPUT;
  }
  return 0;
}

size_t input_files(const options *o, const char **paths, size_t cap) {
  size_t n = 0, i;

  if (o->in.kind == IN_DB_TRACE || o->in.kind == IN_DB_HIST) {
    for (i = 0; i < o->ndbs && n < cap; i++)
      paths[n++] = o->dbs[i];
  }
  if (o->in.path != NULL && n < cap)
    paths[n++] = o->in.path;
  for (i = 0; i < o->npolicies && n < cap; i++)
    if (strcmp(o->policies[i], "default") != 0 && strncmp(o->policies[i], "torch:", 6) != 0)
      paths[n++] = o->policies[i];
  return n;
}

int check_output(const options *o, const char *what, const char *path) {
  const char *paths[MAX_DBS + MAX_POLICIES + 1];
  char err[PATH_MAX * 2 + 256];
  size_t n = input_files(o, paths, sizeof paths / sizeof paths[0]);
  int rc = aa__out_check(what, path, paths, n, err, sizeof err);

  if (rc != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: %s\n", err);
    return EXIT_USAGE;
  }
  return 0;
}
