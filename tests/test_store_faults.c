/*
 * test_store_faults.c — every way the store can fail leaves the caller
 * working: an injected SQLite failure, a sweep that fails each SQLite call of
 * a realistic scenario in turn, a database locked by another connection, a
 * read-only file and a full disk (RLIMIT_FSIZE). Each failure disables the
 * store with exactly one "adaptalloc: store:" line on stderr, later enqueues
 * are counted as dropped, and the database stays intact.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "adaptalloc/store.h"

static char g_dir[256];

static int setup_dir(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/aa-store-faults-XXXXXX");
  return mkdtemp(g_dir) != NULL ? 0 : -1;
}

static int teardown_dir(void **state) {
  (void)state;
  if (getenv("AA_TEST_KEEP") != NULL) return 0; /* keep files for a look */
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void db_file(char *buf, size_t cap, const char *name) {
  char side[320];
  snprintf(buf, cap, "%s/%s", g_dir, name);
  unlink(buf);
  snprintf(side, sizeof side, "%s-wal", buf);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", buf);
  unlink(side);
}

/* ------------------------------------------------------------------ stderr */

static int g_saved_fd = -1;
static char g_cap_path[300];

static void capture_begin(void) {
  snprintf(g_cap_path, sizeof g_cap_path, "%s/stderr.txt", g_dir);
  fflush(stderr);
  g_saved_fd = dup(2);
  int fd = open(g_cap_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  dup2(fd, 2);
  close(fd);
}

/* Restores stderr; returns the captured text (static buffer). */
static const char *capture_end(void) {
  static char buf[8192];
  fflush(stderr);
  dup2(g_saved_fd, 2);
  close(g_saved_fd);
  FILE *f = fopen(g_cap_path, "r");
  assert_non_null(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int count_lines(const char *text, const char *prefix) {
  int n = 0;
  size_t len = strlen(prefix);
  for (const char *p = text; *p != '\0';) {
    if (strncmp(p, prefix, len) == 0) n++;
    const char *nl = strchr(p, '\n');
    if (nl == NULL) break;
    p = nl + 1;
  }
  return n;
}

/* ------------------------------------------------------------------ helpers */

static void fill_stats(aa_pool_stats *p, uint64_t seed, uint32_t classes) {
  memset(p, 0, sizeof *p);
  p->version = AA_STATS_VERSION;
  p->size = sizeof *p;
  snprintf(p->name, sizeof p->name, "host");
  snprintf(p->backend, sizeof p->backend, "host");
  p->allocs = seed;
  p->class_count = classes;
  for (uint32_t c = 0; c < classes; c++) {
    p->classes[c].block_size = 512u * (c + 1);
    p->classes[c].allocs = seed + c;
  }
  p->hist[5] = seed;
  p->hist[50] = seed + 1;
  p->hh_count = 1;
  p->hh[0].size = 777;
  p->hh[0].count = seed;
}

static void push_events(aa_store *st, int n) {
  for (int i = 0; i < n; i++) {
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = 'a';
    ev.ptr = (uint64_t)i;
    aa_store_trace_push(st, &ev);
  }
}

static const char *integrity(const char *path) {
  static char out[128];
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  snprintf(out, sizeof out, "cannot check");
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW) {
    snprintf(out, sizeof out, "%s", (const char *)sqlite3_column_text(s, 0));
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

static int64_t sql_int(const char *path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW) {
    v = sqlite3_column_int64(s, 0);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

static int64_t begin(aa_store *st) {
  aa_store_run_info info;
  memset(&info, 0, sizeof info);
  info.rank = -1;
  info.model = "faults";
  int64_t id = 0;
  int rc = aa_store_begin_run(st, &info, &id);
  return rc == AA_OK ? id : rc;
}

/* ------------------------------------------------------------------ tests */

static void test_store_fault_disables_once(void **state) {
  (void)state;
  char path[300];
  aa_pool_stats p;
  aa_store_stats s;
  db_file(path, sizeof path, "inject.db");
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.commit_interval_ms = 5;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  assert_true(begin(st) > 0);
  fill_stats(&p, 1, 3);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);

  capture_begin();
  aa_store_fail_nth(st, 3); /* in the middle of the next snapshot */
  fill_stats(&p, 2, 3);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  push_events(st, 10);
  int rc = aa_store_flush(st, 0);
  /* Everything after the fault is dropped, nothing blocks or crashes. */
  for (int i = 0; i < 50; i++) {
    assert_int_equal(aa_store_snapshot(st, &p), AA_ECLOSED);
    assert_int_equal(aa_store_policy_change(st, "http", 1, 2, "x", "{}"), AA_ECLOSED);
  }
  push_events(st, 100);
  assert_int_equal(aa_store_begin_run(st, &(aa_store_run_info){.rank = -1}, &(int64_t){0}),
                   AA_ECLOSED);
  assert_int_equal(aa_store_flush(st, 100), AA_EIO);
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  int close_rc = aa_store_close(st);
  const char *err = capture_end();

  assert_int_equal(rc, AA_EIO);
  assert_int_equal(close_rc, AA_EIO);
  assert_int_equal(s.enabled, 0);
  assert_int_equal(s.last_error, AA_EIO);
  assert_non_null(strstr(s.last_error_msg, "injected"));
  assert_non_null(strstr(s.last_error_msg, path));
  assert_int_equal(s.snapshots_written, 1);
  assert_int_equal(s.snapshots_dropped, 51);
  assert_int_equal(s.policy_changes_dropped, 50);
  /* An event pushed while the fault was being handled may still sit in the
   * ring, to be counted when the writer next drains it. */
  assert_int_equal(s.events_dropped + s.events_queued, 110);
  assert_int_equal(count_lines(err, "adaptalloc: store:"), 1);
  assert_non_null(strstr(err, "adaptalloc: store: disabled: writing a snapshot failed on"));
  assert_non_null(strstr(err, "SQLITE_FULL"));

  /* The committed snapshot is intact and the file is healthy. */
  assert_string_equal(integrity(path), "ok");
  assert_int_equal(sql_int(path, "SELECT count(*) FROM snapshots"), 1);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM class_stats"), 3);
  /* It opens again and works. */
  cfg.fault_nth = 0;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  assert_true(begin(st) > 0);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(sql_int(path, "SELECT count(*) FROM snapshots"), 2);
}

/* Fails the 1st, 2nd, ... SQLite call of open + a run + snapshots + policy
 * changes + trace events + retention, until the scenario passes untouched. */
static void test_store_fault_sweep(void **state) {
  (void)state;
  char path[300];
  int n;
  bool clean = false;
  for (n = 1; n < 400 && !clean; n++) {
    db_file(path, sizeof path, "sweep.db");
    aa_store_config cfg;
    aa_store_config_init(&cfg);
    cfg.path = path;
    cfg.commit_interval_ms = 5;
    cfg.fault_nth = (uint64_t)n;
    cfg.max_bytes = 1 << 20;
    cfg.max_age_s = 3600;
    aa_store *st = NULL;
    aa_store_stats s;
    char why[300] = "";
    capture_begin();
    int rc = aa_store_open(&cfg, &st);
    bool failed = rc != AA_OK;
    if (rc == AA_OK) {
      aa_pool_stats p;
      begin(st);
      for (uint64_t i = 0; i < 3; i++) {
        fill_stats(&p, i, 2);
        aa_store_snapshot(st, &p);
      }
      aa_store_policy_change(st, "loop", 1, 2, "sweep", "{\"a\":1}");
      push_events(st, 5);
      aa_store_flush(st, 0);
      begin(st);
      fill_stats(&p, 9, 1);
      aa_store_snapshot(st, &p);
      aa_store_flush(st, 0);
      aa_store_stats_get(st, &s);
      failed = s.enabled == 0;
      if (failed && (s.last_error == AA_OK ||
                     strstr(s.last_error_msg, "injected") == NULL)) {
        snprintf(why, sizeof why, "disabled without the injected error: %s",
                 s.last_error_msg);
      } else if (!failed && (s.snapshots_written != 4 || s.events_written != 5)) {
        snprintf(why, sizeof why, "enabled but %llu snapshots, %llu events written",
                 (unsigned long long)s.snapshots_written,
                 (unsigned long long)s.events_written);
      }
      rc = aa_store_close(st); /* its end-of-run write can be the one */
      if (!failed && rc != AA_OK) {
        if (rc == AA_EIO) {
          failed = true;
        } else {
          snprintf(why, sizeof why, "close: %d", rc);
        }
      }
    } else if (st != NULL) {
      snprintf(why, sizeof why, "open failed but returned a handle");
    }
    const char *err = capture_end();
    if (why[0] != '\0') fail_msg("fault at call %d: %s", n, why);
    if (count_lines(err, "adaptalloc: store:") != (failed ? 1 : 0)) {
      fail_msg("fault at call %d: %d log lines: %s", n,
               count_lines(err, "adaptalloc: store:"), err);
    }
    if (failed) assert_non_null(strstr(err, "injected"));
    if (strcmp(integrity(path), "ok") != 0) {
      fail_msg("fault at call %d: integrity_check: %s", n, integrity(path));
    }
    clean = !failed;
  }
  assert_true(clean);
  if (n <= 30) fail_msg("scenario clean at fault %d", n - 1);
}

static void test_store_fault_locked_database(void **state) {
  (void)state;
  char path[300];
  aa_pool_stats p;
  aa_store_stats s;
  db_file(path, sizeof path, "locked.db");
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.busy_timeout_ms = 50;
  cfg.commit_interval_ms = 5;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  assert_true(begin(st) > 0);

  sqlite3 *blocker = NULL;
  assert_int_equal(sqlite3_open(path, &blocker), SQLITE_OK);
  assert_int_equal(sqlite3_exec(blocker, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  capture_begin();
  fill_stats(&p, 1, 1);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  int rc = aa_store_flush(st, 0);
  assert_int_equal(aa_store_snapshot(st, &p), AA_ECLOSED);
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  sqlite3_exec(blocker, "COMMIT", NULL, NULL, NULL);
  sqlite3_close(blocker);
  aa_store_close(st);
  const char *err = capture_end();
  assert_int_equal(rc, AA_EBUSY);
  assert_int_equal(s.enabled, 0);
  assert_int_equal(s.last_error, AA_EBUSY);
  assert_non_null(strstr(s.last_error_msg, "locked"));
  assert_int_equal(count_lines(err, "adaptalloc: store:"), 1);
  assert_non_null(strstr(err, "SQLITE_BUSY"));
  assert_string_equal(integrity(path), "ok");
}

/* Runs fn in a child whose stderr is a pipe; returns its exit status and the
 * text it wrote to stderr. */
static int run_child(void (*fn)(const char *), const char *arg, char *err,
                     size_t cap) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], 2);
    close(fds[1]);
    fn(arg);
    _exit(0);
  }
  close(fds[1]);
  size_t n = 0;
  for (;;) {
    ssize_t k = read(fds[0], err + n, cap - 1 - n);
    if (k <= 0) break;
    n += (size_t)k;
    if (n >= cap - 1) break;
  }
  err[n] = '\0';
  close(fds[0]);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  return WEXITSTATUS(status);
}

static void child_read_only(const char *path) {
  if (geteuid() == 0) {
    /* root ignores file modes: become nobody for the test. */
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(90);
  }
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  aa_store *st = (aa_store *)&cfg;
  int rc = aa_store_open(&cfg, &st);
  if (rc != AA_EPERM) _exit(10 + (rc < 0 ? -rc : rc));
  if (st != NULL) _exit(2);
  /* Readers still work on a read-only file. */
  char *json = NULL;
  rc = aa_store_runs_json(path, 0, &json);
  if (rc != AA_OK || json == NULL || strstr(json, "\"model\":\"faults\"") == NULL) _exit(3);
  free(json);
  uint64_t h[AA_HIST_BUCKETS];
  if (aa_store_histogram_latest(path, 0, NULL, h) != AA_OK || h[5] != 1) _exit(4);
  /* A file that cannot be created in a read-only directory. */
  char other[400];
  snprintf(other, sizeof other, "%s.new", path);
  cfg.path = other;
  rc = aa_store_open(&cfg, &st);
  if (rc != AA_EPERM) _exit(40 + (rc < 0 ? -rc : rc));
  _exit(0);
}

static void test_store_fault_read_only_file(void **state) {
  (void)state;
  char path[300];
  char err[4096];
  aa_pool_stats p;
  db_file(path, sizeof path, "ro.db");
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  assert_true(begin(st) > 0);
  fill_stats(&p, 1, 1);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(chmod(path, 0444), 0);
  assert_int_equal(chmod(g_dir, 0555), 0);
  int code = run_child(child_read_only, path, err, sizeof err);
  chmod(g_dir, 0700);
  chmod(path, 0644);
  if (code != 0) fail_msg("read-only child exited %d: %s", code, err);
  assert_int_equal(count_lines(err, "adaptalloc: store:"), 2); /* one per open */
  assert_non_null(strstr(err, "read-only"));
  assert_non_null(strstr(err, "AA_EPERM"));
  assert_int_equal(sql_int(path, "SELECT count(*) FROM snapshots"), 1);
}

static void child_disk_full(const char *path) {
  signal(SIGXFSZ, SIG_IGN);
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.commit_interval_ms = 5;
  aa_store *st = NULL;
  if (aa_store_open(&cfg, &st) != AA_OK) _exit(2);
  if (begin(st) <= 0) _exit(3);
  struct rlimit rl = {256 * 1024, 256 * 1024};
  if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(4);
  aa_pool_stats p;
  aa_store_stats s;
  int i;
  for (i = 0; i < 2000; i++) {
    fill_stats(&p, (uint64_t)i, 100);
    int rc = aa_store_snapshot(st, &p);
    if (rc == AA_ECLOSED) break;
    if (rc != AA_OK) _exit(5);
    if (i % 10 == 9) aa_store_flush(st, 0);
  }
  if (aa_store_stats_get(st, &s) != AA_OK) _exit(6);
  if (s.enabled != 0) _exit(7);
  if (s.last_error != AA_EIO) _exit(8);
  if (s.snapshots_written == 0) _exit(9);
  /* The caller keeps working: enqueues return at once. */
  for (int k = 0; k < 100; k++) {
    if (aa_store_snapshot(st, &p) != AA_ECLOSED) _exit(10);
  }
  aa_store_close(st);
  _exit(0);
}

static void test_store_fault_disk_full(void **state) {
  (void)state;
  char path[300];
  char err[4096];
  db_file(path, sizeof path, "full.db");
  int code = run_child(child_disk_full, path, err, sizeof err);
  if (code != 0) fail_msg("disk-full child exited %d: %s", code, err);
  assert_int_equal(count_lines(err, "adaptalloc: store:"), 1);
  assert_true(strstr(err, "SQLITE_FULL") != NULL || strstr(err, "SQLITE_IOERR") != NULL);
  assert_string_equal(integrity(path), "ok");
  assert_true(sql_int(path, "SELECT count(*) FROM snapshots") > 0);
}

/* A fork()ed child (a DataLoader worker, say) inherits a copy of the handle:
 * the copy must be inert — no writer thread, and the parent's connection is
 * never touched — while the parent keeps writing. */
static void test_store_fork_child_copy_is_inert(void **state) {
  (void)state;
  char path[300];
  aa_pool_stats p;
  db_file(path, sizeof path, "fork.db");
  aa_store_config cfg;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.commit_interval_ms = 5;
  aa_store *st = NULL;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  assert_true(begin(st) > 0);
  fill_stats(&p, 1, 2);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int code = 0;
    if (aa_store_snapshot(st, &p) != AA_ECLOSED) code = 1;
    if (aa_store_policy_change(st, "api", 1, 2, NULL, NULL) != AA_ECLOSED) code = 2;
    push_events(st, 10);
    if (aa_store_flush(st, 1000) != AA_ECLOSED) code = 3;
    int64_t id = 0;
    aa_store_run_info info = {.rank = -1};
    if (aa_store_begin_run(st, &info, &id) != AA_ECLOSED) code = 4;
    if (aa_store_end_run(st) != AA_ECLOSED) code = 5;
    aa_store_stats s;
    if (aa_store_stats_get(st, &s) != AA_OK || s.enabled != 0) code = 6;
    if (aa_store_close(st) != AA_ECLOSED) code = 7;
    _exit(code);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  fill_stats(&p, 2, 2);
  assert_int_equal(aa_store_snapshot(st, &p), AA_OK);
  assert_int_equal(aa_store_flush(st, 0), AA_OK);
  aa_store_stats s;
  assert_int_equal(aa_store_stats_get(st, &s), AA_OK);
  assert_int_equal(s.enabled, 1);
  assert_int_equal(s.snapshots_written, 2);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_string_equal(integrity(path), "ok");
  assert_int_equal(sql_int(path, "SELECT count(*) FROM snapshots"), 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_fault_disables_once),
      cmocka_unit_test(test_store_fault_sweep),
      cmocka_unit_test(test_store_fault_locked_database),
      cmocka_unit_test(test_store_fault_read_only_file),
      cmocka_unit_test(test_store_fault_disk_full),
      cmocka_unit_test(test_store_fork_child_copy_is_inert),
  };
  return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
