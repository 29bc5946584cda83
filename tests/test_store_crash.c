/*
 * test_store_crash.c — crash safety: a child process writes snapshots, policy
 * changes and trace events as fast as it can, reporting through a pipe the
 * last snapshot sequence number of each commit that aa_store_flush confirmed;
 * the parent SIGKILLs it at a random moment (half the time after its first
 * commit, half the time anywhere from open on), 24 times over one database.
 * After every kill: PRAGMA integrity_check is "ok" and every snapshot the
 * child reported committed is present with all of its per-class rows.
 * The seed is printed; AA_CRASH_SEED=<n> replays a sequence of kill times.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "adaptalloc/store.h"

#define KILLS 24
#define CLASSES 8

static char g_dir[256];

static int setup_dir(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/aa-store-crash-XXXXXX");
  return mkdtemp(g_dir) != NULL ? 0 : -1;
}

static int teardown_dir(void **state) {
  (void)state;
  if (getenv("AA_TEST_KEEP") != NULL) return 0;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static uint64_t seq_base(int iteration) { return (uint64_t)(iteration + 1) << 32; }

/* The child: never returns. */
static void writer_child(const char *path, int iteration, int fd) {
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.commit_interval_ms = 2;
  cfg.quiet = true;
  aa_store *st = NULL;
  if (aa_store_open(&cfg, &st) != AA_OK) _exit(2);
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.model = "crash";
  info.rank = iteration;
  int64_t run = 0;
  if (aa_store_begin_run(st, &info, &run) != AA_OK) _exit(3);

  aa_pool_stats p;
  memset(&p, 0, sizeof p);
  p.version = AA_STATS_VERSION;
  p.size = sizeof p;
  snprintf(p.name, sizeof p.name, "crash");
  snprintf(p.backend, sizeof p.backend, "host");
  p.class_count = CLASSES;
  for (uint32_t c = 0; c < CLASSES; c++) p.classes[c].block_size = 512u * (c + 1);
  for (unsigned b = 0; b < AA_HIST_BUCKETS; b += 2) p.hist[b] = b + 1;
  p.hh_count = 4;

  uint64_t seq = seq_base(iteration);
  for (int round = 0; round < 1000000; round++) {
    for (int k = 0; k < 4; k++) {
      p.allocs = ++seq;
      p.time_ns = aa_now_ns();
      for (uint32_t c = 0; c < CLASSES; c++) p.classes[c].allocs = seq;
      while (aa_store_snapshot(st, &p) == AA_ELIMIT) {
      }
    }
    aa_store_policy_change(st, "loop", (uint64_t)round, (uint64_t)round + 1,
                           "crash test", "{\"adapt\":{\"interval_ms\":10}}");
    for (int e = 0; e < 100; e++) {
      aa_trace_event ev = {.time_ns = aa_now_ns(), .ptr = seq, .size = 512, .thread = 1, .op = 'a'};
      aa_store_trace_push(st, &ev);
    }
    if (aa_store_flush(st, 0) != AA_OK) _exit(4);
    /* Committed: everything up to seq is in the database. */
    if (write(fd, &seq, sizeof seq) != (ssize_t)sizeof seq) _exit(5);
  }
  _exit(0);
}

static int64_t q_int(sqlite3 *db, const char *sql, int64_t a, int64_t b) {
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK) {
    sqlite3_bind_int64(s, 1, a);
    sqlite3_bind_int64(s, 2, b);
    if (sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  return v;
}

static void test_store_crash_sigkill_keeps_commits(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/crash.db", g_dir);
  unsigned seed = (unsigned)time(NULL);
  const char *env = getenv("AA_CRASH_SEED");
  if (env != NULL) seed = (unsigned)strtoul(env, NULL, 10);
  printf("crash test seed %u (AA_CRASH_SEED to replay)\n", seed);
  fflush(stdout);
  uint64_t total_committed = 0;
  int with_commits = 0;

  for (int it = 0; it < KILLS; it++) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      writer_child(path, it, fds[1]);
    }
    close(fds[1]);
    /* Even iterations wait for the child's first confirmed commit and then
     * kill it 0-150 ms later (mid-transaction, mid-checkpoint); odd ones kill
     * it 0-150 ms after the fork, wherever it is (open, migration, ...). */
    uint64_t last = seq_base(it), v;
    if (it % 2 == 0) {
      ssize_t n;
      do {
        n = read(fds[0], &v, sizeof v);
      } while (n < 0 && errno == EINTR);
      if (n != (ssize_t)sizeof v) fail_msg("iteration %d: the child died before committing", it);
      last = v;
    }
    unsigned delay_ms = (unsigned)(rand_r(&seed) % 150);
    struct timespec ts = {0, (long)delay_ms * 1000000L};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
      fail_msg("iteration %d: child ended by itself (status 0x%x) before the kill",
               it, status);
    }
    for (;;) {
      ssize_t n = read(fds[0], &v, sizeof v);
      if (n == (ssize_t)sizeof v) {
        last = v;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      break;
    }
    close(fds[0]);
    uint64_t committed = last - seq_base(it);
    total_committed += committed;
    if (committed > 0) with_commits++;

    /* The database after the crash: recover, check, count. */
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    const char *ic = (const char *)sqlite3_column_text(s, 0);
    if (strcmp(ic, "ok") != 0) fail_msg("iteration %d: integrity_check: %s", it, ic);
    sqlite3_finalize(s);
    int64_t ver = q_int(db, "PRAGMA user_version", 0, 0);
    if (ver == 0) {
      assert_int_equal(committed, 0); /* killed before the schema existed */
    } else {
      assert_int_equal(ver, AA_STORE_SCHEMA_VERSION);
      int64_t lo = (int64_t)seq_base(it) + 1, hi = (int64_t)last;
      int64_t present = q_int(db,
                              "SELECT count(DISTINCT allocs) FROM snapshots WHERE allocs BETWEEN ?1 AND ?2",
                              lo, hi);
      if (present != (int64_t)committed) {
        fail_msg("iteration %d: %lld of %llu committed snapshots present", it,
                 (long long)present, (unsigned long long)committed);
      }
      int64_t rows = q_int(db,
                           "SELECT count(*) FROM class_stats c JOIN snapshots s ON s.id = c.snapshot_id"
                           " WHERE s.allocs BETWEEN ?1 AND ?2",
                           lo, hi);
      assert_int_equal(rows, (int64_t)committed * CLASSES);
      /* Nothing half-written: every snapshot has all its class rows. */
      assert_int_equal(q_int(db,
                             "SELECT count(*) FROM snapshots s WHERE s.allocs BETWEEN ?1 AND ?2"
                             " AND s.class_count !="
                             " (SELECT count(*) FROM class_stats c WHERE c.snapshot_id = s.id)",
                             lo, (int64_t)seq_base(it + 1)),
                       0);
    }
    sqlite3_close(db);
  }
  printf("crash test: %d kills, %d after commits, %llu snapshots confirmed\n",
         KILLS, with_commits, (unsigned long long)total_committed);
  assert_true(with_commits >= KILLS / 2); /* every even iteration */

  /* The store opens the crashed file as usual afterwards. */
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  char *json = NULL;
  assert_int_equal(aa_store_runs_json(aa_store_db_path(st), 0, &json), AA_OK);
  assert_non_null(strstr(json, "\"model\":\"crash\""));
  free(json);
  assert_int_equal(aa_store_close(st), AA_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_crash_sigkill_keeps_commits),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
