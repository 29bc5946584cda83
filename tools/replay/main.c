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
 * combined row; `ranks` is in ranks.c). Usage,
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

#define MAX_POLICIES 16
#define MAX_DBS 256

typedef struct options {
  const char *cmd;
  tool_input in;
  const char *policies[MAX_POLICIES];
  size_t npolicies;
  const char *pool;
  const char *out;
  const char *plot; /* compare --plot FILE.svg */
  bool json;
  int progress; /* -1 auto (tty), 0 off, 1 on */
  bool bench;
  aa_replay_on_error on_error;
  aa_replay_costs costs;
  uint64_t capacity;
  uint64_t event_delay_ns;
  bool ignore_streams;
  bool replay_failures;
  size_t max_classes; /* 0 = from the policy's adapt.max_classes */
  double min_gain_slabs;
  bool layout; /* suggest: also choose max_small and large.mode */
  bool force;  /* suggest: write the policy even when it does not improve */
  bool have_events;
  bool adapt;
  uint64_t adapt_every;
  size_t top; /* run: list the N sizes that waste most (0 = none) */
  bool threads;
  const char *dbs[MAX_DBS]; /* every --db (and bare database) in order */
  int64_t db_runs[MAX_DBS]; /* the run of each (<= 0: latest), set in main */
  size_t ndbs;
  bool each_rank; /* expand each database into the latest run per rank */
  double threshold; /* ranks: flag a rank farther than this (< 0: default) */
} options;

/* ------------------------------------------------------------------ help
 * One table of help lines, each tagged with the commands it is about:
 * `--help` prints them all, `<command> --help` only that command's. */
enum {
  C_RUN = 1, C_COMPARE = 2, C_SUGGEST = 4, C_IMPORT = 8, C_EXPORT = 16,
  C_RANKS = 32,
  C_REPLAY = C_RUN | C_COMPARE | C_SUGGEST, /* commands that simulate */
  C_INPUT = C_REPLAY | C_IMPORT | C_EXPORT, /* commands that read INPUT */
  C_ALL = 63
};

typedef struct {
  const char *name;
  unsigned bit;
  const char *synopsis;
  const char *what; /* one or more lines, each starting with 2 spaces */
} cmd_help;

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
static void print_help(FILE *f, const cmd_help *c) {
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

static const cmd_help *find_command(const char *name) {
  size_t i;
  for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(commands[i].name, name) == 0)
      return &commands[i];
  return NULL;
}

static int usage_error(const char *fmt, const char *arg)
    __attribute__((format(printf, 1, 0)));

/* fmt has exactly one %s, filled with arg. */
static int usage_error(const char *fmt, const char *arg) {
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
    case 'k': case 'K': mul = 1ull << 10; break;
    case 'm': case 'M': mul = 1ull << 20; break;
    case 'g': case 'G': mul = 1ull << 30; break;
    case 't': case 'T': mul = 1ull << 40; break;
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
  OPT_CSV = 256, OPT_DB, OPT_RUN, OPT_HISTOGRAM, OPT_FROM_HIST, OPT_HIST_POOL,
  OPT_EVENTS, OPT_SEED, OPT_LIVE, OPT_POLICY, OPT_POOL, OPT_JSON, OPT_PROGRESS,
  OPT_NO_PROGRESS, OPT_ON_ERROR, OPT_BENCH, OPT_COST_ALLOC, OPT_COST_FREE,
  OPT_COST_GIB, OPT_COST_HIT, OPT_COST_EVENT, OPT_CAPACITY, OPT_DELAY,
  OPT_IGNORE_STREAMS, OPT_REPLAY_FAILURES, OPT_MAX_CLASSES, OPT_MIN_GAIN,
  OPT_ADAPT, OPT_ADAPT_EVERY, OPT_TOP, OPT_THREADS, OPT_THRESHOLD,
  OPT_EACH_RANK, OPT_LAYOUT, OPT_FORCE, OPT_PLOT, OPT_HELP
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
static int parse_args(int argc, char **argv, options *o) {
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
                           "number", optarg);
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
    rc = set_input(o, strcmp(a, "-") != 0 && looks_like_db(a) ? IN_DB_TRACE
                                                              : IN_CSV, a);
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
                       "compare and ranks)", o->cmd);
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
static int check_inputs(const options *o) {
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
              "default)\n", paths[i]);
    else
      fprintf(stderr, "adaptalloc-replay: %s: %s\n", paths[i], strerror(errno));
    return EXIT_INPUT;
  }
  return 0;
}

/* ------------------------------------------------------------------ policies */

typedef struct loaded {
  const char *label;
  aa_policy *policy;
  aa_pool_config pc;
  aa_class_spec classes[AA_MAX_CLASSES];
  size_t nclasses;
  aa_replay_sim *sim;
  bool is_torch;              /* a model of PyTorch's allocator, not a policy */
  aa_replay_torch_config tcfg;
  aa_replay_torch *torch;
  aa_replay_result res;
} loaded;

static const char *base_name(const char *p) {
  const char *s = strrchr(p, '/');
  return s != NULL ? s + 1 : p;
}

static int load_policy(const options *o, const char *path, loaded *l) {
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
              "the PyTorch model has none\n", path);
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

static int make_sim(const options *o, loaded *l, bool collect_sizes) {
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
  size_t failed; /* index of the simulator that stopped the input */
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

typedef struct timing {
  double wall_s;
  double events_per_s;
  double cpu_s;            /* this process's CPU time over the same span */
  double events_per_cpu_s; /* the figure for "one core" on a busy machine */
  uint64_t events;
} timing;

static double cpu_seconds(void) {
  struct timespec ts;

  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
    return 0.0;
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Replays the input through every simulator in l[0..n). Returns 0 or an
 * exit code (message printed). */
static int replay_all(const options *o, loaded *l, size_t n, timing *t,
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

static void free_loaded(loaded *l, size_t n) {
  size_t i;

  for (i = 0; i < n; i++) {
    aa_replay_sim_free(l[i].sim);
    aa_replay_torch_free(l[i].torch);
    aa_policy_free(l[i].policy);
  }
  free(l);
}

static void print_json_result(FILE *f, const aa_replay_result *r) {
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
            "\"result\":", (unsigned long long)d[i].block_size,
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
          "%llu retired, %llu grows, %llu trims, %llu refused\n",
          (unsigned long long)c->steps, (unsigned long long)c->decisions,
          (unsigned long long)c->classes_added,
          (unsigned long long)c->classes_retired, (unsigned long long)c->grows,
          (unsigned long long)c->trims, (unsigned long long)c->apply_failures);
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
            "\"class\":%llu,\"waste_at_peak\":%llu}", i > 0 ? "," : "",
            (unsigned long long)r[i].size, (unsigned long long)r[i].allocs,
            (unsigned long long)r[i].max_live, (unsigned long long)r[i].block,
            (unsigned long long)r[i].waste);
  fprintf(f, "]");
  free(r);
}

static void print_json_head(FILE *f, const options *o, const timing *t) {
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
                       "'default')%s", "");
  if (o->out != NULL)
    return usage_error("-o is for suggest and import%s", "");
  if (o->plot != NULL && (o->ndbs > 1 || o->each_rank))
    return usage_error("--plot draws one input (not several --db or "
                       "--each-rank)%s", "");
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

/* How many of the ranked additions each candidate table keeps (0 = all that
 * suggest found): exact classes also cost partly filled slabs, which the
 * per-size estimate does not see, so fewer can replay better than more. */
static const size_t kSuggestKeep[] = {0, 16, 8, 4, 2, 1};
#define SUGGEST_CANDIDATES (sizeof kSuggestKeep / sizeof kSuggestKeep[0])

static int cmd_suggest(const options *opts) {
  options local_opts = *opts; /* suggest tunes the static table: no loop */
  const options *o = &local_opts;
  loaded *l = NULL;
  aa_replay_size_stat *sizes = NULL;
  size_t nsizes = 0, i, ncand = 0, best = 0;
  aa_class_spec used[AA_MAX_CLASSES];
  aa_class_spec (*tuned)[AA_MAX_CLASSES] = NULL;
  size_t nnew[SUGGEST_CANDIDATES];
  size_t nused = 0;
  aa_replay_suggest_config sc;
  aa_adapt_params ap;
  aa_replay_result orig;
  char *docs[SUGGEST_CANDIDATES] = {NULL};
  char err[AA_POLICY_ERR_CAP + 256], desc[512];
  static char labels[SUGGEST_CANDIDATES][64];
  timing t0, t1;
  FILE *f = NULL;
  bool improved, write_it;
  int rc;

  local_opts.adapt = false;
  local_opts.adapt_every = 0;
  if (o->out == NULL)
    return usage_error("suggest needs -o FILE for the tuned policy%s", "");
  if (o->npolicies > 1)
    return usage_error("suggest takes one --policy (the base)%s", "");
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
                       "(compare it instead)", o->policies[0]);
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
              "(a bug): %s\n", err);
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
      snprintf(labels[ncand], sizeof labels[ncand], "%s", base_name(o->out));
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
    f = fopen(o->out, "w");
    if (f == NULL || fputs(docs[best], f) < 0 || fputc('\n', f) == EOF) {
      fprintf(stderr, "adaptalloc-replay: %s: %s\n", o->out, strerror(errno));
      rc = EXIT_INPUT;
      goto out;
    }
    if (fclose(f) != 0) {
      f = NULL;
      fprintf(stderr, "adaptalloc-replay: %s: %s\n", o->out, strerror(errno));
      rc = EXIT_INPUT;
      goto out;
    }
    f = NULL;
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
              "\"backend_calls\":%llu}", i ? "," : "", l[1 + i].label, nnew[i],
              (unsigned long long)l[1 + i].res.peak_reserved,
              (unsigned long long)l[1 + i].res.backend_calls);
    fprintf(stdout, "]}\n");
  } else {
    const char *lab[2] = {l[0].label, l[1 + best].label};
    aa_replay_result res[2] = {l[0].res, l[1 + best].res};
    printf("input             %s, %llu events, pool %s\n", desc,
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
  if (f != NULL)
    fclose(f);
  for (i = 0; i < SUGGEST_CANDIDATES; i++)
    free(docs[i]);
  free(sizes);
  free(tuned);
  free_loaded(l, 1 + ncand);
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
            "\"unknown_action\":%llu}\n", (long long)run, (unsigned long long)n,
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
                         "import, export, ranks)", argv[2]);
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
                       "export, ranks)", argv[1]);
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
