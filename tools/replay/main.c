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
 * Entry point main(); one function per command: run and compare in run.c
 * (one parse of the input feeds one simulator per policy; with several
 * --db, cmd_run_multi replays each database in turn and adds a combined
 * row), policies and the shared replay in sims.c, `suggest` in suggest.c,
 * `ranks` in ranks.c, export and import here, the command line in args.c
 * and its help in help.c.
 * Usage, formats and exit codes: docs/replay.md, and `adaptalloc-replay
 * --help`.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adaptalloc/replay.h"
#include "replay_tool.h"

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
  aa__outfile out;
  char err[PATH_MAX * 2 + 256];
  int rc;

  if (o->out == NULL)
    return usage_error("export needs -o FILE.csv ('-' = stdout)%s", "");
  rc = check_output(o, "export", o->out);
  if (rc != 0)
    return rc;
  if (o->torch_snapshot)
    return cmd_export_torch(o); /* export_torch.c */
  if (o->max_entries || o->has_since || o->has_until || o->last_seconds > 0)
    return usage_error("--max-entries, --since, --until and --last-seconds go with "
                       "--format torch-snapshot%s",
                       "");
  if (aa__out_open(&out, o->out, 0666, err, sizeof err) != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: %s\n", err);
    return EXIT_INPUT;
  }
  c.f = out.f;
  c.buf = malloc(1024 * 128); /* one batch; a line is under 128 bytes */
  if (c.buf == NULL) {
    aa__out_abort(&out);
    fprintf(stderr, "adaptalloc-replay: out of memory\n");
    return EXIT_INTERNAL;
  }
  progress_init(&prog, o->progress == 1 || (o->progress == -1 && isatty(2)));
  c.prog = &prog;
  memset(&diag, 0, sizeof diag);
  err[0] = '\0';
  rc = fprintf(c.f, "%s\n", AA_REPLAY_CSV_HEADER) < 0 ? AA_EIO : AA_OK;
  if (rc == AA_OK)
    rc = input_feed(&o->in, o->on_error, export_sink, &c, &prog, &diag, err, sizeof err);
  progress_end(&prog);
  free(c.buf);
  if (rc != AA_OK) {
    /* nothing half-written: the old output (or none) stays */
    aa__out_abort(&out);
    fprintf(stderr, "adaptalloc-replay: %s%s\n",
            err[0] != '\0' ? err : "writing the CSV failed",
            strcmp(o->out, "-") != 0 ? "; nothing written" : "");
    return rc == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
  }
  if (aa__out_commit(&out, err, sizeof err) != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: %s; nothing written\n", err);
    return EXIT_INPUT;
  }
  return 0;
}

/* ------------------------------------------------------------------ import */

static int cmd_import(const options *o) {
  tool_progress prog;
  aa_replay_diag diag;
  uint64_t n = 0;
  int64_t run = 0;
  char err[PATH_MAX * 2 + 512];
  int rc;

  if (o->out == NULL)
    return usage_error("import needs -o FILE.db%s", "");
  rc = check_output(o, "import", o->out);
  if (rc != 0)
    return rc;
  if (strcmp(o->out, "-") == 0)
    return usage_error("import writes a database file: -o FILE.db (not '%s')", o->out);
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
  if (o.in.kind == IN_DB_HIST && !o.in.live_given && o.ndbs <= 1)
    input_live_from_run(&o.in);
  /* A stored run of one host or pinned pool (the demo's on a machine
   * without a GPU) replays under that pool's section unless --pool says. */
  if (!o.pool_given && o.ndbs <= 1) {
    const char *p = input_run_pool(&o.in);
    if (p != NULL)
      o.pool = p;
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
