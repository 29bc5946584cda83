/*
 * args.c — adaptalloc-replay's command line: the help table (`--help`,
 * `<command> --help`), usage errors, option parsing into `options` and the
 * input checks. Entry points: parse_args, check_inputs, print_help,
 * find_command, usage_error.
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

/* ------------------------------------------------------------------ help
 * One table of help lines, each tagged with the commands it is about:
 * `--help` prints them all, `<command> --help` only that command's. */
static const cmd_help commands[] = {
    {"run", C_RUN, "run [--policy P.json] [options] INPUT",
     "  replay INPUT under one policy and report its figures\n"},
    {"compare", C_COMPARE, "compare P1.json P2.json ... [options] INPUT",
     "  replay INPUT under several policies (P.json ... or 'default')\n"},
    {"suggest", C_SUGGEST, "suggest [--policy BASE.json] [options] INPUT -o tuned.json",
     "  derive a tuned policy for INPUT (-o tuned.json)\n"},
    {"import", C_IMPORT, "import INPUT -o out.db",
     "  store INPUT as a new run's trace in a database (-o out.db)\n"},
    {"export", C_EXPORT, "export INPUT -o out.csv",
     "  write INPUT as an RMM-format CSV (-o out.csv, '-' = stdout)\n"},
    {"ranks", C_RANKS, "ranks --db rank0.db --db rank1.db ... [options]",
     "  compare several ranks' databases' request-size histograms\n"
     "  (--db rank0.db --db rank1.db ...; flags a rank that differs)\n"},
};

typedef struct {
  unsigned cmds;
  const char *text;
} help_line;

static const help_line input_help[] = {
    {C_INPUT, "  --csv FILE             RMM logging_resource_adaptor CSV ('-' = stdin)\n"},
    {C_INPUT, "  --db FILE [--run ID]   a run's event trace in an adaptalloc database\n"},
    {C_INPUT, "  --histogram FILE       synthesise requests from a histogram file\n"},
    {C_ALL, "  --db FILE --from-histogram [--hist-pool NAME]\n"
            "                         synthesise from a run's stored histogram\n"},
    {C_INPUT, "  a bare INPUT is a database when it starts like one, else a CSV file\n"},
    {C_RUN | C_COMPARE | C_RANKS,
     "  run, compare, ranks: --db is repeatable (one database per rank: each\n"
     "                         is replayed on its own, plus a combined row)\n"},
    {C_INPUT, "  synthesis: --events N (default 1000000) --seed S (1) --live N (1024)\n"},
};

static const help_line option_help[] = {
    {C_REPLAY, "  --policy FILE          policy file (run, suggest; repeatable for compare)\n"},
    {C_REPLAY, "  --pool NAME            which pool of the policy: device (default),\n"
               "                         pinned or host\n"},
    {C_REPLAY | C_RANKS, "  --json                 machine-readable output on stdout\n"},
    {C_INPUT, "  --progress, --no-progress  progress and the time left on stderr\n"
              "                         (default: when stderr is a terminal)\n"},
    {C_INPUT, "  --on-error stop|count  bad input: stop at the first (default) or count\n"},
    {C_REPLAY, "  --bench                print events/s on stderr (always in --json)\n"},
    {C_REPLAY, "  --cost-alloc-us X      simulated cost of a backend alloc (43)\n"
               "  --cost-free-us X       of a backend free (43)\n"
               "  --cost-alloc-us-per-gib X  extra per GiB allocated (0)\n"
               "  --cost-hit-ns X        of a pool hit (0)\n"
               "  --cost-event-ns X      of a stream event record (0)\n"},
    {C_REPLAY, "  --capacity BYTES       simulated device memory (K/M/G/T suffixes; 0 =\n"
               "                         unbounded)\n"},
    {C_REPLAY, "  --event-delay-us N     stream events complete N us of trace time after\n"
               "                         they are recorded (0)\n"},
    {C_REPLAY, "  --ignore-streams       replay everything on the default stream\n"},
    {C_REPLAY, "  --replay-failures      also try allocations that failed in the trace\n"},
    {C_REPLAY, "  --adapt                run the policy's adapt loop on the trace clock\n"
               "                         (a step every adapt.interval_ms of trace time)\n"},
    {C_REPLAY, "  --adapt-every N        with --adapt: a step every N events instead\n"},
    {C_RUN | C_RANKS, "  --top N                run: list the N request sizes that waste most;\n"
                      "                         ranks: sizes listed per database (5)\n"},
    {C_RUN | C_COMPARE | C_RANKS,
     "  --each-rank            run, compare, ranks: every rank in each database\n"
     "                         (the latest run of each rank; for ranks that\n"
     "                         shared one file)\n"},
    {C_RANKS, "  --threshold X          ranks: flag a rank whose histogram is farther\n"
              "                         than X from the median rank's (0.1; 0..1)\n"},
    {C_RUN | C_COMPARE, "  --threads              replay each recorded thread on a thread of its\n"
                        "                         own (per-thread caches as recorded; slower)\n"},
    {C_COMPARE, "  --plot FILE.svg        compare: draw reserved (solid) and in-use (dashed)\n"
                "                         bytes over the trace, a colour per policy\n"},
    {C_SUGGEST | C_IMPORT | C_EXPORT, "  -o FILE                output file (suggest, import, export)\n"},
    {C_SUGGEST, "  --max-classes N        suggest: class table bound (policy's\n"
                "                         adapt.max_classes)\n"},
    {C_SUGGEST, "  --min-gain-slabs X     suggest: least saving per added class (0.5)\n"},
    {C_SUGGEST, "  --layout               suggest: first choose max_small (16 KiB, 64 KiB,\n"
                "                         256 KiB or the base's) and large.mode (the base's\n"
                "                         or expandable) by peak reserved, then the classes\n"},
    {C_SUGGEST, "  --force                suggest: write the policy even when its replay\n"
                "                         does not improve on the base (peak reserved,\n"
                "                         then backend calls); without it suggest exits 4\n"
                "                         and writes nothing\n"},
    {C_ALL, "  --help                 this help (adaptalloc-replay COMMAND --help: that\n"
            "                         command's only); --version: the version\n"
            "  values go as the next word or after '=' (--top 5, --top=5)\n"},
};

static void print_lines(FILE *f, const help_line *l, size_t n, unsigned bit) {
  size_t i;
  for (i = 0; i < n; i++)
    if (l[i].cmds & bit)
      fputs(l[i].text, f);
}

/* The whole help (c == NULL) or one command's. */
void print_help(FILE *f, const cmd_help *c) {
  size_t i;
  unsigned bit = c != NULL ? c->bit : C_ALL;

  if (c == NULL) {
    fputs("usage: adaptalloc-replay <command> [options] [INPUT]\n\ncommands:\n", f);
    for (i = 0; i < sizeof commands / sizeof commands[0]; i++) {
      /* each line of "what" (2-space indented) in the column after the name */
      const char *w = commands[i].what;
      bool first = true;
      while (*w != '\0') {
        const char *nl = strchr(w, '\n');
        int len = nl != NULL ? (int)(nl - w) : (int)strlen(w);
        fprintf(f, "  %-9s%.*s\n", first ? commands[i].name : "", len - 2, w + 2);
        first = false;
        w += len + (nl != NULL);
      }
    }
  } else {
    fprintf(f, "usage: adaptalloc-replay %s\n\n%s", c->synopsis, c->what);
  }
  fputs(c == NULL || (bit & C_INPUT) ? "\ninput (one of):\n" : "\ninput:\n", f);
  print_lines(f, input_help, sizeof input_help / sizeof input_help[0], bit);
  fputs("\noptions:\n", f);
  print_lines(f, option_help, sizeof option_help / sizeof option_help[0], bit);
  fputs("\nexit codes: 0 ok, 1 input error, 2 usage error, 3 internal error", f);
  fputs(bit & C_SUGGEST ? ",\n            4 suggest found nothing better than the base "
                          "(nothing written)\n"
                        : "\n",
        f);
}

const cmd_help *find_command(const char *name) {
  size_t i;
  for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(commands[i].name, name) == 0)
      return &commands[i];
  return NULL;
}

int usage_error(const char *fmt, const char *arg)
    __attribute__((format(printf, 1, 0)));

/* fmt has exactly one %s, filled with arg. */
int usage_error(const char *fmt, const char *arg) {
  const char *pct = strstr(fmt, "%s");

  fprintf(stderr, "adaptalloc-replay: ");
  if (pct != NULL) {
    fwrite(fmt, 1, (size_t)(pct - fmt), stderr);
    fputs(arg, stderr);
    fputs(pct + 2, stderr);
  } else {
    fputs(fmt, stderr);
  }
  fprintf(stderr, "\n(adaptalloc-replay --help for usage)\n");
  return EXIT_USAGE;
}

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
    case OPT_COST_EVENT: {
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
      else
        o->costs.event_ns = d;
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
      if (strcmp(o->cmd, "compare") != 0)
        return usage_error("--plot goes with compare (at %s)", optarg);
      o->plot = optarg;
      break;
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
