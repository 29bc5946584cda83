/*
 * help.c — adaptalloc-replay's help and usage errors: the command table,
 * the help lines of every option, and the one usage-error message. Entry
 * points: print_help, find_command, usage_error. The options themselves are
 * parsed in args.c.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "replay_tool.h"

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
    {"export", C_EXPORT, "export [--format csv|torch-snapshot [--max-entries N] [--since T] "
                         "[--until T] [--last-seconds S]] INPUT -o FILE",
     "  write INPUT as an RMM-format CSV (-o out.csv, '-' = stdout), or\n"
     "  as a PyTorch memory snapshot for memory_viz (--format torch-snapshot)\n"},
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
    {C_REPLAY, "  --pool NAME            which pool of the policy: device, pinned or\n"
               "                         host (default: a stored run's one pool when it\n"
               "                         is host or pinned, else device)\n"},
    {C_REPLAY | C_RANKS, "  --json                 machine-readable output on stdout\n"},
    {C_INPUT, "  --progress, --no-progress  progress and the time left on stderr\n"
              "                         (default: when stderr is a terminal)\n"},
    {C_INPUT, "  --on-error stop|count  bad input: stop at the first (default) or count\n"},
    {C_REPLAY, "  --bench                print events/s on stderr (always in --json)\n"},
    {C_REPLAY, "  --cost-alloc-us X      simulated cost of a backend alloc (43)\n"
               "  --cost-free-us X       of a backend free (43)\n"
               "  --cost-alloc-us-per-gib X  extra per GiB allocated (0)\n"
               "  --cost-hit-ns X        of a pool hit (0)\n"
               "  --cost-event-ns X      of a stream event record (0)\n"
               "  --cost-alias-us X      of a handle mapped at a stitched range (36)\n"
               "  --cost-unalias-us X    of an alias undone (24)\n"},
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
    {C_RUN | C_COMPARE, "  --plot FILE.svg|.png   draw reserved (thick) and in-use (thin) bytes\n"
                        "                         over the trace's time, a colour and dash per\n"
                        "                         policy (PNG through rsvg-convert)\n"},
    {C_SUGGEST | C_IMPORT | C_EXPORT, "  -o FILE                output file (suggest, import, export)\n"},
    {C_EXPORT, "  --format F             export: csv (default) or torch-snapshot (the\n"
               "                         pickle torch.cuda.memory._dump_snapshot writes)\n"},
    {C_EXPORT, "  --max-entries N        torch-snapshot: the newest N entries (k, M)\n"},
    {C_EXPORT, "  --since T, --until T   torch-snapshot: events in a wall-clock window of a\n"
               "                         stored trace (T: Unix seconds or\n"
               "                         2026-12-06T10:00:00Z, +HH:MM; no zone: UTC)\n"},
    {C_EXPORT, "  --last-seconds S       torch-snapshot: the trace's last S seconds\n"},
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
  if (c == NULL) {
    print_lines(f, option_help, sizeof option_help / sizeof option_help[0], bit);
  } else {
    /* the command's own options; the ones every command takes once, in the
     * whole help */
    for (i = 0; i < sizeof option_help / sizeof option_help[0]; i++)
      if ((option_help[i].cmds & bit) && option_help[i].cmds != C_INPUT &&
          option_help[i].cmds != C_ALL)
        fputs(option_help[i].text, f);
    fputs("  global options (--progress, --on-error, --help, --version):\n"
          "                         adaptalloc-replay --help\n",
          f);
  }
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
