/*
 * test_replay_ranks.c — adaptalloc-replay over several ranks' databases:
 * three small databases written with the store API (a run with a rank, a
 * trace, one snapshot each; rank 2 deliberately asks for other sizes), then
 * `run` and `compare` with several --db (per-database figures equal the
 * single-database replays, the combined row sums and maxes them), and
 * `ranks` (rank 2 flagged, from the traces and from the snapshots),
 * --each-rank on one file that every rank shared, and the usage errors of
 * the multi-database forms.
 *
 * Finds the program through AA_TEST_BINARY_DIR (set by ctest). Built with
 * -DAA_WITH_STORE=OFF (AA_TEST_WITH_STORE 0) every test skips.
 *
 * One concern, adaptalloc-replay over several databases (one ctest), kept in
 * one file though it runs past 600 lines; the cmocka table at its end lists
 * every case.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cJSON.h>
#include <cmocka.h>

#include "adaptalloc/core.h"
#include "adaptalloc/store.h"

#ifndef AA_TEST_WITH_STORE
#define AA_TEST_WITH_STORE 1
#endif

static char g_bin[1024];
static char g_tmp[256];

/* What each rank's trace asks for: `count` blocks of `size` live at once
 * (after one 1000 B block when with_small), then all freed. */
typedef struct rank_plan {
  int rank;
  uint64_t size;
  unsigned count;
  bool with_small;
} rank_plan;

static const rank_plan g_plan[3] = {
    {0, 4096, 20, true},
    {1, 4096, 30, true},
    {2, 100000, 40, false}, /* the odd one */
};

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  char *buf = NULL;
  long n;

  if (f == NULL)
    return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
      fseek(f, 0, SEEK_SET) == 0) {
    buf = malloc((size_t)n + 1);
    if (buf != NULL)
      buf[fread(buf, 1, (size_t)n, f)] = '\0';
  }
  fclose(f);
  return buf;
}

/* Runs `{BIN} <args>` (args printf-formatted; {TMP} expanded) in a shell;
 * stdout and stderr land in *out / *err (malloc'd; may be NULL). Returns the
 * exit status, -1 when it did not exit. */
static int tool(char **out, char **err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int tool(char **out, char **err, const char *fmt, ...) {
  char args[2048], exp[4096], cmd[6144], op[300], ep[300];
  const char *p;
  size_t o = 0;
  va_list ap;
  int st;

  va_start(ap, fmt);
  vsnprintf(args, sizeof args, fmt, ap);
  va_end(ap);
  for (p = args; *p != '\0' && o + 300 < sizeof exp; p++) {
    if (strncmp(p, "{TMP}", 5) == 0) {
      o += (size_t)snprintf(exp + o, sizeof exp - o, "%s", g_tmp);
      p += 4;
    } else {
      exp[o++] = *p;
    }
  }
  exp[o] = '\0';
  snprintf(op, sizeof op, "%s/out.txt", g_tmp);
  snprintf(ep, sizeof ep, "%s/err.txt", g_tmp);
  snprintf(cmd, sizeof cmd, "'%s' %s >'%s' 2>'%s' </dev/null", g_bin, exp, op,
           ep);
  st = system(cmd);
  if (out != NULL)
    *out = slurp(op);
  if (err != NULL)
    *err = slurp(ep);
  if (st == -1 || !WIFEXITED(st))
    return -1;
  return WEXITSTATUS(st);
}

static const cJSON *get(const cJSON *o, const char *path) {
  char buf[160];
  char *tok, *save = NULL;

  snprintf(buf, sizeof buf, "%s", path);
  for (tok = strtok_r(buf, ".", &save); tok != NULL && o != NULL;
       tok = strtok_r(NULL, ".", &save)) {
    if (*tok >= '0' && *tok <= '9')
      o = cJSON_GetArrayItem(o, atoi(tok));
    else
      o = cJSON_GetObjectItemCaseSensitive(o, tok);
  }
  return o;
}

static double num(const cJSON *o, const char *path) {
  const cJSON *v = get(o, path);
  if (!cJSON_IsNumber(v))
    fail_msg("no number at %s", path);
  return v->valuedouble;
}

static cJSON *parse_or_fail(const char *text) {
  cJSON *j = text != NULL ? cJSON_Parse(text) : NULL;
  if (j == NULL)
    fail_msg("not JSON: %s", text != NULL ? text : "(no output)");
  return j;
}

/* One run with the given rank, the plan's trace and one snapshot whose
 * histogram matches it, in the open store st. */
static void write_run(aa_store *st, int rank, const rank_plan *pl) {
  aa_store_run_info info;
  aa_pool_stats *ps;
  int64_t run = 0;
  uint64_t t = 1000, ptr = 0x10000000ull;
  unsigned i;

  memset(&info, 0, sizeof info);
  info.model = "gpt2-ddp";
  info.host = "node0";
  info.rank = rank;
  assert_int_equal(aa_store_begin_run(st, &info, &run), AA_OK);
  assert_true(run > 0);

  {
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.thread = 1;
    if (pl->with_small) {
      ev.op = 'a';
      ev.time_ns = t++;
      ev.ptr = 0x1000;
      ev.size = 1000;
      aa_store_trace_push(st, &ev);
    }
    for (i = 0; i < pl->count; i++) {
      ev.op = 'a';
      ev.time_ns = t++;
      ev.ptr = ptr + (uint64_t)i * 0x100000ull;
      ev.size = pl->size;
      aa_store_trace_push(st, &ev);
    }
    for (i = 0; i < pl->count; i++) {
      ev.op = 'f';
      ev.time_ns = t++;
      ev.ptr = ptr + (uint64_t)i * 0x100000ull;
      ev.size = pl->size;
      aa_store_trace_push(st, &ev);
    }
    if (pl->with_small) {
      ev.op = 'f';
      ev.time_ns = t++;
      ev.ptr = 0x1000;
      ev.size = 1000;
      aa_store_trace_push(st, &ev);
    }
  }

  ps = calloc(1, sizeof *ps);
  assert_non_null(ps);
  ps->version = AA_STATS_VERSION;
  ps->size = sizeof *ps;
  snprintf(ps->name, sizeof ps->name, "device%d", pl->rank);
  snprintf(ps->backend, sizeof ps->backend, "cuda");
  ps->device = pl->rank;
  ps->telemetry = 1;
  ps->time_ns = t;
  ps->hist[aa_hist_bucket((size_t)pl->size)] += pl->count;
  if (pl->with_small)
    ps->hist[aa_hist_bucket(1000)] += 1;
  ps->allocs = ps->frees = pl->count + (pl->with_small ? 1u : 0u);
  assert_int_equal(aa_store_snapshot(st, ps), AA_OK);
  free(ps);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  {
    aa_store_stats ss;
    assert_int_equal(aa_store_stats_get(st, &ss), AA_OK);
    assert_int_equal(ss.events_dropped, 0);
  }
}

/* <name> in the temporary directory with one run per (ranks[i], plans[i]),
 * in that order. */
static void write_db(const char *name, const int *ranks,
                     const rank_plan *const *plans, size_t n) {
  char path[400];
  aa_store_config cfg;
  aa_store *st = NULL;
  size_t i;

  snprintf(path, sizeof path, "%s/%s", g_tmp, name);
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.commit_interval_ms = 10;
  cfg.quiet = true;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  for (i = 0; i < n; i++)
    write_run(st, ranks[i], plans[i]);
  assert_int_equal(aa_store_close(st), AA_OK);
}

/* rank<r>.db: the plan's run. */
static void write_rank_db(const rank_plan *pl) {
  char name[32];
  const rank_plan *one[1] = {pl};

  snprintf(name, sizeof name, "rank%d.db", pl->rank);
  write_db(name, &pl->rank, one, 1);
}

static int setup(void **state) {
  const char *b = getenv("AA_TEST_BINARY_DIR");

  (void)state;
  snprintf(g_bin, sizeof g_bin, "%s/tools/adaptalloc-replay", b ? b : "..");
  snprintf(g_tmp, sizeof g_tmp, "/tmp/aa_replay_ranks_XXXXXX");
  if (mkdtemp(g_tmp) == NULL)
    return -1;
  return 0;
}

static int teardown(void **state) {
  char cmd[512];

  (void)state;
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
  return system(cmd) == 0 ? 0 : -1;
}

/* Skips unless the store is built in and the program exists; writes the
 * three databases once. */
static void need_dbs(void) {
  static bool written;
  struct stat sb;
  size_t i;

  if (!AA_TEST_WITH_STORE) {
    print_message("built without the store (-DAA_WITH_STORE=OFF): skipped\n");
    skip();
  }
  if (stat(g_bin, &sb) != 0) {
    print_message("%s not built: skipped\n", g_bin);
    skip();
  }
  if (written)
    return;
  for (i = 0; i < 3; i++)
    write_rank_db(&g_plan[i]);
  {
    /* shared.db: every rank in one file (runs 1..4); rank 2 ran twice, the
     * second time (run 4, its latest) like rank 0. */
    static const int ranks[4] = {0, 1, 2, 2};
    const rank_plan *plans[4] = {&g_plan[0], &g_plan[1], &g_plan[2],
                                 &g_plan[0]};
    write_db("shared.db", ranks, plans, 4);
  }
  written = true;
}

static uint64_t plan_requests(const rank_plan *p) {
  return p->count + (p->with_small ? 1u : 0u);
}

static uint64_t plan_peak_requested(const rank_plan *p) {
  return (uint64_t)p->count * p->size + (p->with_small ? 1000u : 0u);
}

/* run with three --db: each database's figures are what a run on it alone
 * gives, and the combined row sums the counts and takes the largest peaks. */
static void test_replay_ranks_run_combined(void **state) {
  cJSON *j, *single[3];
  char *out = NULL;
  double sum_req = 0, sum_calls = 0, sum_us = 0, max_in_use = 0,
         max_reserved = 0, sum_events = 0;
  int i;

  (void)state;
  need_dbs();
  for (i = 0; i < 3; i++) {
    assert_int_equal(tool(&out, NULL, "run --json --db {TMP}/rank%d.db", i), 0);
    single[i] = parse_or_fail(out);
    free(out);
  }
  assert_int_equal(tool(&out, NULL, "run --json --db {TMP}/rank0.db "
                                    "--db {TMP}/rank1.db --db {TMP}/rank2.db"),
                   0);
  j = parse_or_fail(out);
  free(out);
  assert_int_equal(cJSON_GetArraySize(get(j, "databases")), 3);
  for (i = 0; i < 3; i++) {
    char k[64];
    const cJSON *d = cJSON_GetArrayItem(get(j, "databases"), i);
    const rank_plan *p = &g_plan[i];

    assert_int_equal((int)num(d, "rank"), p->rank);
    assert_int_equal((int)num(d, "run"), 1);
    assert_string_equal(get(d, "model")->valuestring, "gpt2-ddp");
    snprintf(k, sizeof k, "rank%d", p->rank);
    assert_string_equal(get(d, "label")->valuestring, k);
    assert_int_equal((uint64_t)num(d, "result.requests"), plan_requests(p));
    assert_int_equal((uint64_t)num(d, "result.peak_requested"),
                     plan_peak_requested(p));
    assert_int_equal((uint64_t)num(d, "events"), 2 * plan_requests(p));
    /* the same figures as the database replayed alone */
    assert_int_equal((uint64_t)num(d, "result.backend_calls"),
                     (uint64_t)num(single[i], "result.backend_calls"));
    assert_int_equal((uint64_t)num(d, "result.peak_in_use"),
                     (uint64_t)num(single[i], "result.peak_in_use"));
    assert_int_equal((uint64_t)num(d, "result.peak_reserved"),
                     (uint64_t)num(single[i], "result.peak_reserved"));
    sum_req += num(d, "result.requests");
    sum_calls += num(d, "result.backend_calls");
    sum_us += num(d, "result.sim_backend_us");
    sum_events += num(d, "events");
    if (num(d, "result.peak_in_use") > max_in_use)
      max_in_use = num(d, "result.peak_in_use");
    if (num(d, "result.peak_reserved") > max_reserved)
      max_reserved = num(d, "result.peak_reserved");
  }
  assert_int_equal((int)num(j, "combined.databases"), 3);
  assert_int_equal((uint64_t)num(j, "combined.result.requests"), 92);
  assert_true(num(j, "combined.result.requests") == sum_req);
  assert_true(num(j, "combined.result.backend_calls") == sum_calls);
  assert_true(num(j, "combined.events") == sum_events);
  assert_true(num(j, "events") == sum_events);
  assert_true(num(j, "combined.result.sim_backend_us") > sum_us - 0.01 &&
              num(j, "combined.result.sim_backend_us") < sum_us + 0.01);
  assert_true(num(j, "combined.result.peak_in_use") == max_in_use);
  assert_true(num(j, "combined.result.peak_reserved") == max_reserved);
  assert_int_equal((uint64_t)num(j, "combined.result.peak_requested"),
                   plan_peak_requested(&g_plan[2]));
  assert_true(num(j, "combined.result.backend_calls") > 0);
  cJSON_Delete(j);
  for (i = 0; i < 3; i++)
    cJSON_Delete(single[i]);

  /* The text table: a row per rank and the combined row. */
  assert_int_equal(tool(&out, NULL, "run --db {TMP}/rank0.db {TMP}/rank1.db"),
                   0);
  assert_non_null(strstr(out, "\nrank0 "));
  assert_non_null(strstr(out, "\nrank1 "));
  assert_non_null(strstr(out, "\ncombined "));
  assert_null(strstr(out, "\nrank2 "));
  free(out);
}

/* compare with several --db: per database one result per policy, and a
 * combined result per policy. */
static void test_replay_ranks_compare(void **state) {
  cJSON *j;
  char *out = NULL;
  int i;

  (void)state;
  need_dbs();
  assert_int_equal(tool(&out, NULL, "compare --json default default "
                                    "--db {TMP}/rank0.db --db {TMP}/rank2.db"),
                   0);
  j = parse_or_fail(out);
  free(out);
  assert_string_equal(get(j, "command")->valuestring, "compare");
  assert_int_equal(cJSON_GetArraySize(get(j, "databases")), 2);
  assert_int_equal(cJSON_GetArraySize(get(j, "combined.runs")), 2);
  for (i = 0; i < 2; i++) {
    char k[64];
    snprintf(k, sizeof k, "databases.%d.runs", i);
    assert_int_equal(cJSON_GetArraySize(get(j, k)), 2);
    snprintf(k, sizeof k, "databases.%d.runs.1.result.requests", i);
    assert_int_equal((uint64_t)num(j, k), plan_requests(&g_plan[i * 2]));
  }
  /* the same policy twice gives the same figures */
  assert_true(num(j, "combined.runs.0.result.backend_calls") ==
              num(j, "combined.runs.1.result.backend_calls"));
  assert_int_equal((uint64_t)num(j, "combined.runs.0.result.requests"),
                   plan_requests(&g_plan[0]) + plan_requests(&g_plan[2]));
  cJSON_Delete(j);
  assert_int_equal(tool(&out, NULL, "compare default "
                                    "--db {TMP}/rank0.db --db {TMP}/rank2.db"),
                   0);
  assert_non_null(strstr(out, "policy default"));
  assert_non_null(strstr(out, "\ncombined "));
  free(out);
}

/* ranks flags the rank that asks for other sizes, from the traces and from
 * the snapshots' histograms. */
static void test_replay_ranks_flags_odd_rank(void **state) {
  cJSON *j;
  char *out = NULL;
  int pass, i;

  (void)state;
  need_dbs();
  for (pass = 0; pass < 2; pass++) {
    /* a shell glob, as a user would type it */
    assert_int_equal(tool(&out, NULL, "ranks --json --db {TMP}/rank*.db%s",
                          pass == 1 ? " --from-histogram" : ""),
                     0);
    j = parse_or_fail(out);
    free(out);
    assert_int_equal(cJSON_GetArraySize(get(j, "databases")), 3);
    for (i = 0; i < 3; i++) {
      const cJSON *d = cJSON_GetArrayItem(get(j, "databases"), i);
      assert_int_equal((int)num(d, "rank"), i);
      assert_string_equal(get(d, "source")->valuestring,
                          pass == 0 ? "trace" : "snapshot");
      assert_int_equal((uint64_t)num(d, "requests"), plan_requests(&g_plan[i]));
      assert_true(cJSON_IsBool(get(d, "differs")));
      assert_int_equal(cJSON_IsTrue(get(d, "differs")), i == 2);
    }
    /* rank 0: 20 of 21 requests are 4096 B */
    assert_true(num(j, "databases.0.top.0.share") > 20.0 / 21 - 1e-4 &&
                num(j, "databases.0.top.0.share") < 20.0 / 21 + 1e-4);
    if (pass == 0) {
      assert_int_equal((int)num(j, "databases.0.top.0.size"), 4096);
      assert_int_equal((int)num(j, "databases.2.top.0.size"), 100000);
      assert_true(cJSON_IsTrue(get(j, "databases.0.top.0.exact")));
    } else {
      /* a bucket: its range holds the size */
      assert_true(num(j, "databases.0.top.0.size") <= 4096 &&
                  num(j, "databases.0.top.0.upper") >= 4096);
    }
    /* rank 0 vs rank 1: |20/21 - 30/31| in one bucket, the same in another */
    assert_true(num(j, "pairwise.0.1") > 0.0153 &&
                num(j, "pairwise.0.1") < 0.0155);
    assert_true(num(j, "pairwise.1.0") == num(j, "pairwise.0.1"));
    assert_true(num(j, "pairwise.0.2") > 0.999);
    assert_true(num(j, "pairwise.2.2") == 0.0);
    assert_true(num(j, "databases.2.distance") > 0.99);
    assert_true(num(j, "databases.0.distance") < 0.05);
    assert_int_equal(cJSON_GetArraySize(get(j, "differing")), 1);
    assert_int_equal((int)num(j, "differing.0"), 2);
    cJSON_Delete(j);
  }

  assert_int_equal(tool(&out, NULL, "ranks --db {TMP}/rank0.db --db "
                                    "{TMP}/rank1.db --db {TMP}/rank2.db"),
                   0);
  assert_non_null(strstr(out, "DIFFERS"));
  assert_non_null(strstr(out, "1 of 3 differ"));
  assert_non_null(strstr(out, "rank2 ("));
  assert_non_null(strstr(out, "4096 B 95.2 %"));
  free(out);

  /* A high threshold flags nobody; two similar ranks are not flagged. */
  assert_int_equal(tool(&out, NULL, "ranks --threshold 1 --db {TMP}/rank*.db"),
                   0);
  assert_non_null(strstr(out, "no rank differs"));
  free(out);
  assert_int_equal(tool(&out, NULL, "ranks --db {TMP}/rank0.db "
                                    "--db {TMP}/rank1.db"),
                   0);
  assert_null(strstr(out, "DIFFERS"));
  free(out);
  /* Two different ranks: both flagged, with the note that says why. */
  assert_int_equal(tool(&out, NULL, "ranks --db {TMP}/rank0.db "
                                    "--db {TMP}/rank2.db"),
                   0);
  assert_non_null(strstr(out, "2 of 2 differ"));
  assert_non_null(strstr(out, "cannot be told"));
  free(out);
}

/* --each-rank: the ranks that shared one file, the latest run of each. */
static void test_replay_ranks_each_rank(void **state) {
  cJSON *j;
  char *out = NULL;

  (void)state;
  need_dbs();
  assert_int_equal(tool(&out, NULL, "ranks --json --each-rank "
                                    "--db {TMP}/shared.db"),
                   0);
  j = parse_or_fail(out);
  free(out);
  assert_int_equal(cJSON_GetArraySize(get(j, "databases")), 3);
  assert_int_equal((int)num(j, "databases.0.rank"), 0);
  assert_int_equal((int)num(j, "databases.0.run"), 1);
  assert_int_equal((int)num(j, "databases.1.run"), 2);
  assert_int_equal((int)num(j, "databases.2.rank"), 2);
  assert_int_equal((int)num(j, "databases.2.run"), 4);
  assert_int_equal((uint64_t)num(j, "databases.2.requests"),
                   plan_requests(&g_plan[0]));
  assert_int_equal(cJSON_GetArraySize(get(j, "differing")), 0);
  cJSON_Delete(j);

  assert_int_equal(tool(&out, NULL, "run --json --each-rank "
                                    "--db {TMP}/shared.db"),
                   0);
  j = parse_or_fail(out);
  free(out);
  assert_int_equal(cJSON_GetArraySize(get(j, "databases")), 3);
  assert_string_equal(get(j, "databases.2.label")->valuestring, "rank2");
  assert_int_equal((uint64_t)num(j, "combined.result.requests"),
                   2 * plan_requests(&g_plan[0]) + plan_requests(&g_plan[1]));
  cJSON_Delete(j);

  /* per-rank files: the same as without --each-rank */
  assert_int_equal(tool(&out, NULL, "ranks --json --each-rank "
                                    "--db {TMP}/rank0.db --db {TMP}/rank2.db"),
                   0);
  j = parse_or_fail(out);
  free(out);
  assert_int_equal(cJSON_GetArraySize(get(j, "databases")), 2);
  assert_int_equal((int)num(j, "databases.1.rank"), 2);
  cJSON_Delete(j);
}

static void test_replay_ranks_usage(void **state) {
  char *err = NULL;

  (void)state;
  need_dbs();
  assert_int_equal(tool(NULL, &err, "suggest --db {TMP}/rank0.db --db "
                                    "{TMP}/rank1.db -o {TMP}/x.json"),
                   2);
  assert_non_null(strstr(err, "suggest takes one input"));
  free(err);
  assert_int_equal(tool(NULL, &err, "export --db {TMP}/rank0.db "
                                    "{TMP}/rank1.db -o -"),
                   2);
  free(err);
  assert_int_equal(tool(NULL, &err, "ranks --csv {TMP}/x.csv"), 2);
  assert_non_null(strstr(err, "ranks reads databases"));
  free(err);
  assert_int_equal(tool(NULL, &err, "ranks --threshold 2 --db {TMP}/rank0.db"),
                   2);
  free(err);
  assert_int_equal(tool(NULL, &err, "run --threshold 0.5 --db {TMP}/rank0.db"),
                   2);
  free(err);
  assert_int_equal(tool(NULL, &err, "run --top 3 --db {TMP}/rank0.db "
                                    "--db {TMP}/rank1.db"),
                   2);
  free(err);
  assert_int_equal(tool(NULL, &err, "run --csv {TMP}/x.csv --db "
                                    "{TMP}/rank0.db"),
                   2);
  free(err);
  /* A missing database or run is an input error naming it. */
  assert_int_equal(tool(NULL, &err, "run --db {TMP}/rank0.db --db "
                                    "{TMP}/nosuch.db"),
                   1);
  assert_non_null(strstr(err, "nosuch.db"));
  free(err);
  assert_int_equal(tool(NULL, &err, "ranks --db {TMP}/rank0.db --db "
                                    "{TMP}/nosuch.db"),
                   1);
  assert_non_null(strstr(err, "nosuch.db"));
  free(err);
  assert_int_equal(tool(NULL, &err, "ranks --each-rank --run 1 --db "
                                    "{TMP}/shared.db"),
                   2);
  free(err);
  assert_int_equal(tool(NULL, &err, "suggest --each-rank --db "
                                    "{TMP}/shared.db -o {TMP}/x.json"),
                   2);
  free(err);
  assert_int_equal(tool(NULL, &err, "ranks --run 7 --db {TMP}/rank0.db"), 1);
  assert_non_null(strstr(err, "no run 7"));
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_ranks_run_combined),
      cmocka_unit_test(test_replay_ranks_compare),
      cmocka_unit_test(test_replay_ranks_flags_odd_rank),
      cmocka_unit_test(test_replay_ranks_each_rank),
      cmocka_unit_test(test_replay_ranks_usage),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
