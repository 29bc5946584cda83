/*
 * replay_tool.h — what the files of adaptalloc-replay share: the input
 * selection, the progress bar, the text/JSON output helpers.
 *
 * main.c    main(), export, import
 * sims.c    policies, their simulators, the one replay behind run/compare/suggest
 * run.c     run and compare (several --db: cmd_run_multi), their reports
 * args.c    the command line: option parsing, input checks
 * help.c    the help table (--help, COMMAND --help), usage errors
 * suggest.c the suggest command (candidate tables, --layout, the tuned policy)
 * input.c   event sources behind one call: CSV, store trace, histograms
 * output.c  the progress bar, byte/percent formatting, tables, result JSON
 * dbs.c     several ranks' databases: run rows, --each-rank, combined figures
 * ranks.c   the `ranks` command
 * plot.c    run/compare --plot: the SVG (or PNG) of the replays
 * outfile.c outputs: refused when they are an input, written through a
 *           temporary file renamed into place
 * export_torch.c  export --format torch-snapshot; pickle.c its pickle writer
 */
#ifndef ADAPTALLOC_REPLAY_TOOL_H
#define ADAPTALLOC_REPLAY_TOOL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "adaptalloc/replay.h"

/* Exit codes (docs/replay.md "Exit codes"). */
#define EXIT_OK 0
#define EXIT_INPUT 1        /* unreadable or malformed input, policy or database */
#define EXIT_USAGE 2        /* bad command line */
#define EXIT_INTERNAL 3     /* out of memory, or the core refused to work */
#define EXIT_NOT_IMPROVED 4 /* suggest: no candidate beats the base; nothing written */

/* ------------------------------------------------------------------ progress */

typedef struct tool_progress {
  bool on;
  uint64_t start_ns;
  uint64_t last_ns;
  uint64_t events; /* updated by the sink */
  bool drawn;
} tool_progress;

void progress_init(tool_progress *p, bool on);
/* done/total in the source's unit (bytes for CSV, events otherwise); total 0
 * when unknown. Draws at most every 100 ms. */
void progress_update(tool_progress *p, uint64_t done, uint64_t total);
/* Clears the bar line and, when the bar is on, prints a one-line summary. */
void progress_end(tool_progress *p);

/* ------------------------------------------------------------------ input */

typedef enum tool_input_kind {
  IN_NONE = 0,
  IN_CSV,      /* --csv FILE */
  IN_DB_TRACE, /* --db FILE [--run ID] */
  IN_HIST,     /* --histogram FILE */
  IN_DB_HIST   /* --db FILE --from-histogram */
} tool_input_kind;

typedef struct tool_input {
  tool_input_kind kind;
  const char *path;
  int64_t run_id;        /* <= 0: latest */
  const char *hist_pool; /* NULL: all pools summed */
  bool from_histogram;
  bool live_given; /* --live N: a block count, not the run's peak bytes */
  /* a stored trace's call stacks ('c' events, aa_pool_trace_frame) are
   * delivered as events op 'c' with the stack's id in `size` (the export
   * asks for them); otherwise they are skipped, as every other reader of
   * replay events knows no 'c' */
  bool frames;
  aa_replay_synth_config synth;
} tool_input;

/* --db FILE --from-histogram without --live: the run's peak in use (the
 * largest peak_bytes_in_use of each pool's snapshots, summed over the pools
 * the histogram sums) becomes in->synth.live_bytes, so the synthesised live
 * set is as large as the run's was. Leaves it 0 when the store says nothing. */
void input_live_from_run(tool_input *in);
/* A store's trace event as a replay event (index: its 1-based position),
 * through the rules every reader's events pass (aa_replay_event_check, as
 * the CSV reader's lines): AA_OK, or AA_EPARSE with msg naming the event. */
int trace_event_of(const aa_trace_event *ev, uint64_t index, aa_replay_event *e, char *msg,
                   size_t cap);

/* Streams the input's events to sink. diag collects parse problems (CSV).
 * Returns AA_OK or an error with err filled in ("" when the sink failed and
 * has its own message). */
int input_feed(const tool_input *in, aa_replay_on_error mode,
               aa_replay_sink sink, void *user, tool_progress *prog,
               aa_replay_diag *diag, char *err, size_t errcap);

/* "CSV trace.csv", "store trace out.db (latest run)", ... */
void input_describe(const tool_input *in, char *buf, size_t cap);

/* The input's name for messages ("stdin" for "-"). */
const char *input_name(const tool_input *in);

/* The policy section a stored run's events came from, for --pool's default:
 * "host" or "pinned" when the run (or --hist-pool) names exactly one pool
 * and it is that one; NULL otherwise (a CSV, a histogram file, a device
 * pool, several pools: the caller keeps "device"). */
const char *input_run_pool(const tool_input *in);

/* Whether the input can be fed a second time with the same events (a
 * database, a regular file; a synthesised stream repeats for its seed).
 * false for stdin, a pipe or another one-pass file, with why (one phrase,
 * "stdin is read once") filled in. */
bool input_rereadable(const tool_input *in, char *why, size_t cap);

/* What messages call an event's position: "line" or "event". */
const char *input_position_name(const tool_input *in);

/* Writes every event of the input into a new run of the store at db_path.
 * *events gets the count, *run_id the run. */
int input_import(const tool_input *in, aa_replay_on_error mode,
                 const char *db_path, tool_progress *prog, aa_replay_diag *diag,
                 uint64_t *events, int64_t *run_id, char *err, size_t errcap);

/* ------------------------------------------------------------------ output */

/* "12.0 MiB" style. */
void fmt_bytes(uint64_t v, char *buf, size_t cap);
/* The text report of one run. */
struct loaded;
/* The report of loaded run l (its label and result); after the peak line,
 * the pool's account at peak reserved (aa_replay_sim_account_at_peak; none
 * for a model of PyTorch's allocator or when nothing was reserved) and the
 * account at peak in use (the account, or why there is none). */
void print_result_text(FILE *f, const struct loaded *l);
/* ,"account_at_peak":{...} (byte figures), or null when there is none;
 * then ,"account_at_peak_in_use":{..., "event":N} or null (with
 * ,"account_at_peak_in_use_why":"..." when a reason is known). */
void print_json_account(FILE *f, const struct loaded *l);
/* A table of several results side by side. */
void print_compare_table(FILE *f, const char *const *labels,
                         const aa_replay_result *r, size_t n);
/* A JSON string literal. */
void print_json_string(FILE *f, const char *s);

/* ------------------------------------------------------------------ ranks */

/* dbs.c: several ranks' databases */
/* What a database's run row says (aa_store_runs_json). */
typedef struct db_meta {
  int64_t run_id; /* the run resolved (the latest when asked <= 0) */
  int64_t rank;   /* -1 when the run has none */
  char model[128];
  char host[128];
  uint64_t events_written; /* trace events stored */
  uint64_t snapshots;
  int64_t started_ms;      /* the run's start, Unix ms (0: unknown) */
  uint64_t mono_origin_ns; /* aa_now_ns() at started_ms: an event's wall time
                              is started_ms + (time_ns - mono_origin_ns) / 1e6 */
} db_meta;

/* Reads run run_id (<= 0: the latest) of the database at path. AA_OK, or an
 * error with err filled in (no such run: AA_ENOENT). */
int db_meta_read(const char *path, int64_t run_id, db_meta *m, char *err,
                 size_t errcap);

/* --each-rank: replaces dbs[0..*n) (and runs[]) by one entry per rank found
 * in each file -- the latest run of every distinct rank, ranks ascending; a
 * file whose runs have no rank contributes its latest run. At most cap
 * entries. The paths stay the caller's strings. AA_OK, or an error with err
 * filled in. */
int db_expand_ranks(const char **dbs, int64_t *runs, size_t *n, size_t cap,
                    char *err, size_t errcap);

/* "rank3" when the run has a rank, else the file's base name. */
void db_label(const char *path, const db_meta *m, char *buf, size_t cap);

/* The combined figures of n replays (docs/multi-gpu.md "Combined row"):
 * counts, simulated time and bytes live at the end summed; peaks the busiest
 * replay's (with that replay's fragmentation at the peak); time-averaged
 * fragmentation, trace span and class count the largest; hit rate from the
 * summed hits and misses. */
void result_combine(const aa_replay_result *r, size_t n, aa_replay_result *out);

/* A store error as a message that says what to do about it. */
const char *meta_store_err(int rc);

/* The part of a path after its last '/'. */
const char *base_of(const char *path);

/* ranks.c: `ranks`: the databases' request-size histograms side by side (runs[i] of
 * dbs[i], <= 0 the latest; from each run's trace, or its latest snapshots when it has no trace or
 * from_histogram), each one's distance to the median rank, flagged above
 * threshold. Returns an exit code (messages printed). */
int cmd_ranks(const char *const *dbs, const int64_t *runs, size_t n,
              const char *hist_pool, bool from_histogram, size_t top,
              double threshold, bool json);

/* output.c: a table with one row per database and a last row `combined`. */
void print_db_table(FILE *f, const char *const *labels,
                    const db_meta *meta, const aa_replay_result *r, size_t n,
                    const aa_replay_result *combined);

/* ------------------------------------------------------------------ plot */

/* run/compare --plot: reserved and in use over the trace's time per policy
 * (plot.c). */
#define PLOT_MAX_SERIES 16
#define PLOT_MAX_POINTS 2048

typedef struct tool_plot_point {
  uint64_t events;           /* events fed when the point closed */
  uint64_t time_ns;          /* the trace's time of the last of them */
  uint64_t in_use, reserved; /* the largest values seen within the point */
} tool_plot_point;

typedef struct tool_plot {
  tool_plot_point *pts; /* [series][PLOT_MAX_POINTS] */
  size_t nseries, npoints;
  uint64_t stride;  /* samples per point (doubles when the points run out) */
  uint64_t pending; /* samples in the open point, modulo stride */
} tool_plot;

int plot_init(tool_plot *p, size_t nseries); /* AA_EINVAL, AA_ENOMEM */
/* One sample of every series (now[nseries]), e.g. after each batch. */
void plot_add(tool_plot *p, const aa_replay_now *now, uint64_t time_ns);
/* Writes the plot: SVG, or PNG for a path ending .png (the SVG rasterised by
 * rsvg-convert; without it an error naming SVG). err names the file and the
 * cause on failure; the output is replaced whole or not at all. */
int plot_write(const tool_plot *p, const char *path, const char *title,
               const char *const *labels, char *err, size_t errcap);
/* True when path ends .svg or .png (--plot's formats). */
bool plot_format_ok(const char *path);
void plot_free(tool_plot *p);

/* ------------------------------------------------------------------ outputs */

/* The project's one rule for outputs (util/src/outfile.c). */
#include "adaptalloc/internal/outfile.h"

/* ------------------------------------------------------------------ commands */

#include "adaptalloc/policy.h"

#define MAX_POLICIES 16
#define MAX_DBS 256

typedef struct options {
  const char *cmd;
  tool_input in;
  const char *policies[MAX_POLICIES];
  size_t npolicies;
  const char *pool;
  bool pool_given; /* --pool on the command line (else the run's, or device) */
  const char *out;
  const char *plot; /* run/compare --plot FILE.svg|FILE.png */
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
  bool each_rank;      /* expand each database into the latest run per rank */
  double threshold;    /* ranks: flag a rank farther than this (< 0: default) */
  bool torch_snapshot; /* export --format torch-snapshot (else CSV) */
  /* export --format torch-snapshot: the newest max_entries entries (0: all),
   * events in a wall-clock window (--since/--until, Unix ms; a stored
   * trace), or the last last_seconds of the trace (0: none) */
  uint64_t max_entries;
  bool has_since, has_until;
  int64_t since_ms, until_ms;
  double last_seconds;
} options;

/* help.c: the command table, help, usage errors. */
enum {
  C_RUN = 1,
  C_COMPARE = 2,
  C_SUGGEST = 4,
  C_IMPORT = 8,
  C_EXPORT = 16,
  C_RANKS = 32,
  C_REPLAY = C_RUN | C_COMPARE | C_SUGGEST, /* commands that simulate */
  C_INPUT = C_REPLAY | C_IMPORT | C_EXPORT, /* commands that read INPUT */
  C_ALL = 63
};

typedef struct cmd_help {
  const char *name;
  unsigned bit;
  const char *synopsis;
  const char *what; /* one or more lines, each starting with 2 spaces */
} cmd_help;

/* The whole help (c == NULL) or one command's. */
void print_help(FILE *f, const cmd_help *c);
const cmd_help *find_command(const char *name);
/* fmt has exactly one %s, filled with arg; returns EXIT_USAGE. */
int usage_error(const char *fmt, const char *arg) __attribute__((format(printf, 1, 0)));

/* args.c: the command line into options, and the input checks. */
int parse_args(int argc, char **argv, options *o);
int check_inputs(const options *o);

/* sims.c: policies and the replay behind run and compare, shared with
 * suggest.c. */
typedef struct loaded {
  const char *label;
  aa_policy *policy;
  aa_pool_config pc;
  aa_class_spec classes[AA_MAX_CLASSES];
  size_t nclasses;
  aa_replay_sim *sim;
  bool is_torch; /* a model of PyTorch's allocator, not a policy */
  aa_replay_torch_config tcfg;
  aa_replay_torch *torch;
  aa_replay_result res;
  uint64_t account_at_event; /* make_sim: the config's account_at_event */
  /* the account at peak in use (run.c's second pass): acct_use when
   * have_acct_use, else acct_use_why says why not ("" when not asked) */
  aa_pool_account acct_use;
  bool have_acct_use;
  uint64_t acct_use_event;
  char acct_use_why[256];
} loaded;

typedef struct timing {
  double wall_s;
  double events_per_s;
  double cpu_s;            /* this process's CPU time over the same span */
  double events_per_cpu_s; /* the figure for "one core" on a busy machine */
  uint64_t events;
} timing;

const char *base_name(const char *p);
int load_policy(const options *o, const char *path, loaded *l);
int make_sim(const options *o, loaded *l, bool collect_sizes);
int replay_all(const options *o, loaded *l, size_t n, timing *t, tool_plot *plot);
/* The account at peak in use of each simulator of l[0..n) after replay_all:
 * a second pass over the input with fresh simulators that take the pool's
 * account after the event where the first pass's in-use bytes first peaked.
 * Fills l[i].acct_use, or l[i].acct_use_why when the input is read once,
 * the second pass failed (its error printed) or did not repeat the first.
 * Returns 0: the first pass's figures stand whatever happens here. */
int account_in_use_pass(const options *o, loaded *l, size_t n);
void free_loaded(loaded *l, size_t n);

/* output.c: a result's JSON object, and the head of a command's JSON (the
 * command, the input, the pool, the timing) */
void print_json_result(FILE *f, const aa_replay_result *r);
void print_json_head(FILE *f, const options *o, const timing *t);

/* args.c: the files the command reads (inputs, databases, policy files)
 * into paths[0..cap); returns the count. */
size_t input_files(const options *o, const char **paths, size_t cap);
/* out_check over input_files (message printed); 0 or EXIT_USAGE. */
int check_output(const options *o, const char *what, const char *path);

/* run.c: run and compare (compare true); over several databases */
int cmd_run(const options *o, bool compare);
int cmd_run_multi(const options *o, bool compare);

/* suggest.c */
int cmd_suggest(const options *opts);

/* export_torch.c: export --format torch-snapshot (a PyTorch memory snapshot
 * pickle for memory_viz). Returns an exit code (messages printed). */
int cmd_export_torch(const options *o);

#endif /* ADAPTALLOC_REPLAY_TOOL_H */
