/*
 * test_runtime_exit.c — the end of the store's run when a process exits
 * without aa_runtime_shutdown (every PyTorch process: its allocator lives
 * until the end). Each scenario starts the runtime with the store and every
 * event traced in a forked child that then returns through exit(); the test
 * reads the database the child left:
 *  - the trace is whole (every event, the last ones included, also with
 *    the ring nearly full at exit) and the run's row is finished: ended_ms
 *    set, events_written counting them, nothing dropped;
 *  - a fork()ed grandchild exiting on its own ends nothing and writes
 *    nothing of its parent's run;
 *  - a store that cannot be written any more (the file size limit) does
 *    not make the exit crash: it says the trace is incomplete on stderr,
 *    once, also after an aa_runtime_shutdown;
 *  - a database another process keeps locked does not keep the exit
 *    waiting for ever: it ends, saying so.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "adaptalloc/runtime.h"
#include "adaptalloc/store.h"

#if defined(__SANITIZE_THREAD__)
#define AA_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define AA_TEST_UNDER_TSAN 1
#endif
#endif
#ifndef AA_TEST_UNDER_TSAN
#define AA_TEST_UNDER_TSAN 0
#endif

#if AA_TEST_WITH_STORE
#include <sqlite3.h>

#define PAIRS 1000 /* alloc/free pairs a child makes: 2000 traced events */

typedef struct paths {
  char dir[64];
  char db[128];
  char log[128]; /* the child's stderr */
} paths;

static void paths_make(paths *p) {
  snprintf(p->dir, sizeof p->dir, "/tmp/aa-test-exit-XXXXXX");
  assert_non_null(mkdtemp(p->dir));
  snprintf(p->db, sizeof p->db, "%s/t.db", p->dir);
  snprintf(p->log, sizeof p->log, "%s/stderr.txt", p->dir);
}

static void paths_remove(const paths *p) {
  const char *suffix[] = {"", "-wal", "-shm"};
  char f[160];
  for (size_t i = 0; i < sizeof suffix / sizeof suffix[0]; i++) {
    snprintf(f, sizeof f, "%s%s", p->db, suffix[i]);
    unlink(f);
  }
  unlink(p->log);
  rmdir(p->dir);
}

/* In a child: stderr into p->log, the runtime's environment (store at
 * p->db, every event traced, no server, no policy file). */
static void child_env(const paths *p) {
  if (freopen(p->log, "w", stderr) == NULL)
    _exit(3);
  setenv("ADAPTALLOC_DB", p->db, 1);
  setenv("ADAPTALLOC_HTTP", "off", 1);
  setenv("ADAPTALLOC_TRACE", "1", 1);
  setenv("ADAPTALLOC_QUIET", "1", 1);
  unsetenv("ADAPTALLOC_POLICY");
  unsetenv("ADAPTALLOC_TOKEN");
  setenv("ADAPTALLOC_POLICY_DIR", "/nonexistent-adaptalloc-policies", 1);
}

/* In a forked child: child_env, then the runtime's traced host pool with a
 * run in the store; _exit(2) when there is none. */
static aa_pool *child_pool(const paths *p) {
  child_env(p);
  aa_pool *pool = aa_runtime_pool(AA_BACKEND_HOST, -1);
  if (pool == NULL || aa_runtime_run_id() <= 0)
    _exit(2);
  return pool;
}

/* Makes p's paths and forks (stdio flushed first, so nothing buffered is
 * written twice); the pid, as fork() returns it. */
static pid_t fork_with_paths(paths *p) {
  paths_make(p);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  return pid;
}

/* n alloc/free pairs on pool: 2n traced events; _exit(2) on a NULL. */
static void churn(aa_pool *pool, int n) {
  for (int i = 0; i < n; i++) {
    size_t size = 256 + (size_t)(i % 7) * 512;
    void *b = aa_alloc(pool, size, NULL);
    if (b == NULL)
      _exit(2);
    aa_free(pool, b, size, NULL);
  }
}

static int wait_child(pid_t pid) {
  int st = 0;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  if (!WIFEXITED(st)) {
    print_message("child ended by signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    return -1;
  }
  return WEXITSTATUS(st);
}

static void read_log(const paths *p, char *out, size_t cap) {
  FILE *f = fopen(p->log, "r");
  size_t n = 0;
  if (f != NULL) {
    n = fread(out, 1, cap - 1, f);
    fclose(f);
  }
  out[n] = '\0';
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *at = strstr(hay, needle); at != NULL; at = strstr(at + 1, needle))
    n++;
  return n;
}

/* One integer from the database (-1 for NULL). */
static int64_t sql_int(const char *db_path, const char *sql) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -1;
  assert_int_equal(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
  sqlite3_busy_timeout(db, 5000);
  assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
  assert_int_equal(sqlite3_step(s), SQLITE_ROW);
  if (sqlite3_column_type(s, 0) != SQLITE_NULL)
    v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

static int count_ev(void *user, const aa_trace_event *ev) {
  (void)ev;
  (*(int64_t *)user)++;
  return 0;
}

/* The database holds one run, ended, whose trace is whole: `events` events
 * written and read back, none dropped, no cut; and the last snapshot of the
 * host pool, taken at the end, counts `allocs` allocations. */
static void check_complete_run(const paths *p, int64_t events, int64_t allocs) {
  int64_t read = 0;
  uint64_t written = 0, dropped = 0, cut = 0;
  assert_int_equal(sql_int(p->db, "SELECT count(*) FROM runs"), 1);
  int64_t run = sql_int(p->db, "SELECT id FROM runs");
  assert_true(run > 0);
  assert_int_equal(aa_store_trace_foreach(p->db, run, count_ev, &read), AA_OK);
  assert_int_equal(read, events);
  assert_int_equal(aa_store_trace_lost(p->db, run, &written, &dropped, &cut), AA_OK);
  assert_int_equal(written, (uint64_t)events);
  assert_int_equal(dropped, 0);
  assert_int_equal(cut, 0);
  assert_true(sql_int(p->db, "SELECT ended_ms FROM runs") > 0);
  assert_true(sql_int(p->db, "SELECT ended_ms >= started_ms FROM runs") == 1);
  assert_int_equal(sql_int(p->db, "SELECT count(*) FROM trace_events"), events);
  assert_true(sql_int(p->db, "SELECT snapshots_written FROM runs") >= 1);
  assert_int_equal(
      sql_int(p->db, "SELECT allocs FROM snapshots WHERE pool = 'host' ORDER BY id DESC LIMIT 1"),
      allocs);
}

/* In a child (no cmocka asserts there): the number of runs not ended, -2
 * when the database cannot be read. */
static int64_t live_runs(const char *db_path) {
  sqlite3 *db = NULL;
  sqlite3_stmt *s = NULL;
  int64_t v = -2;
  if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
      sqlite3_busy_timeout(db, 5000) == SQLITE_OK &&
      sqlite3_prepare_v2(db, "SELECT count(*) FROM runs WHERE ended_ms IS NULL", -1, &s,
                         NULL) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW)
    v = sqlite3_column_int64(s, 0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return v;
}

/* ------------------------------------------------------------ scenarios */

/* A C program whose signal handler calls exit() (SIGTERM/SIGINT/SIGALRM
 * handlers often do) while the main thread is inside a traced allocation:
 * the exit must still end, not wait for ever on the interrupted thread's own
 * trace callback or pool locks. Five children, each interrupted after 50 ms
 * of a traced alloc/free loop; each must be gone within 20 s. */
static void exit_on_signal(int sig) {
  (void)sig;
  exit(0);
}

static void test_runtime_exit_from_signal_handler_ends(void **state) {
  (void)state;
  for (int round = 0; round < 5; round++) {
    paths p;
    pid_t pid = fork_with_paths(&p);
    if (pid == 0) {
      struct sigaction sa;
      struct itimerval it;
      aa_pool *pool = child_pool(&p);
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = exit_on_signal;
      sigaction(SIGALRM, &sa, NULL);
      memset(&it, 0, sizeof it);
      it.it_value.tv_usec = 50000;
      setitimer(ITIMER_REAL, &it, NULL);
      for (;;)
        churn(pool, 1000);
    }
    int st = 0;
    pid_t got = 0;
    for (int ms = 0; ms < 20000 && got == 0; ms += 10) {
      got = waitpid(pid, &st, WNOHANG);
      if (got == 0)
        usleep(10000);
    }
    if (got == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
    }
    paths_remove(&p);
    if (got == 0)
      fail_msg("round %d: the child that called exit() from its signal handler during a "
               "traced allocation was still running after 20 s",
               round);
    assert_true(WIFEXITED(st));
#if !AA_TEST_UNDER_TSAN
    /* (TSan reports the handler's exit() as a signal-unsafe call and ends
     * the child with its own status: that it ended is what counts) */
    assert_int_equal(WEXITSTATUS(st), 0);
#endif
  }
}

/* 1000 pairs, then one block allocated and kept: its alloc is the last
 * event. Returns through exit() as main would. */
static void test_runtime_exit_trace_kept_without_shutdown(void **state) {
  paths p;
  char said[4096];
  (void)state;
  pid_t pid = fork_with_paths(&p);
  if (pid == 0) {
    aa_pool *pool = child_pool(&p);
    churn(pool, PAIRS);
    if (aa_alloc(pool, 4096, NULL) == NULL) /* held to the end */
      _exit(2);
    exit(0);
  }
  assert_int_equal(wait_child(pid), 0);
  read_log(&p, said, sizeof said);
  print_message("child's stderr: \"%s\"\n", said);
  check_complete_run(&p, 2 * PAIRS + 1, PAIRS + 1);
  assert_null(strstr(said, "incomplete"));
  paths_remove(&p);
}

/* The ring nearly full at exit: up to 150000 pairs made while another
 * connection holds the database's write lock (the writer waits), the lock
 * let go, then exit(): the exit waits while the writer works through them
 * (longer than a fixed 5 s cap allowed under TSan on a loaded machine) and
 * keeps them all. The lock is held at most 2 s, well within the writer's
 * 5 s busy timeout (past it the store would give up: a slow build makes
 * fewer pairs, never a disabled store); the child says how many it made. */
static void test_runtime_exit_full_ring_kept(void **state) {
  enum { BURST = 150000,
         CHUNK = 1000 };
  paths p;
  char said[4096];
  int made_pipe[2];
  int made = 0;
  (void)state;
  assert_int_equal(pipe(made_pipe), 0);
  pid_t pid = fork_with_paths(&p);
  if (pid == 0) {
    sqlite3 *other = NULL;
    struct timespec t0, t;
    int pairs = 0;
    close(made_pipe[0]);
    aa_pool *pool = child_pool(&p);
    if (sqlite3_open(p.db, &other) != SQLITE_OK || sqlite3_busy_timeout(other, 4000) != SQLITE_OK ||
        sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
      _exit(9);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
      churn(pool, CHUNK);
      pairs += CHUNK;
      clock_gettime(CLOCK_MONOTONIC, &t);
    } while (pairs < BURST && (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 2000);
    if (sqlite3_exec(other, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
      _exit(9);
    sqlite3_close(other);
    if (aa_alloc(pool, 4096, NULL) == NULL)
      _exit(2);
    if (write(made_pipe[1], &pairs, sizeof pairs) != (ssize_t)sizeof pairs)
      _exit(8);
    exit(0);
  }
  close(made_pipe[1]);
  assert_int_equal(read(made_pipe[0], &made, sizeof made), (ssize_t)sizeof made);
  close(made_pipe[0]);
  assert_int_equal(wait_child(pid), 0);
  read_log(&p, said, sizeof said);
  print_message("%d pairs behind the lock; child's stderr: \"%s\"\n", made, said);
  assert_true(made >= CHUNK);
  check_complete_run(&p, 2 * (int64_t)made + 1, made + 1);
  assert_null(strstr(said, "incomplete"));
  paths_remove(&p);
}

/* The child P traces 500 pairs, forks G, which churns on its copy of the
 * pool and exits through exit() while P's run is live: G must neither end
 * P's run nor write into P's store (nor hang joining threads it does not
 * have). P then makes 500 more pairs and one kept block and exits. */
static void test_runtime_exit_fork_child_leaves_parent_run(void **state) {
  paths p;
  char said[4096];
  (void)state;
  pid_t pid = fork_with_paths(&p);
  if (pid == 0) {
    aa_pool *pool = child_pool(&p);
    churn(pool, PAIRS / 2);
    fflush(NULL);
    pid_t g = fork();
    if (g < 0)
      _exit(4);
    if (g == 0) {
      churn(pool, 100);
      exit(0);
    }
    int st = 0;
    if (waitpid(g, &st, 0) != g || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
      _exit(5);
    /* G's exit ended nothing: the run is live and still traced */
    if (live_runs(p.db) != 1)
      _exit(6);
    churn(pool, PAIRS / 2);
    if (aa_alloc(pool, 4096, NULL) == NULL)
      _exit(2);
    exit(0);
  }
  assert_int_equal(wait_child(pid), 0);
  read_log(&p, said, sizeof said);
  print_message("child's stderr: \"%s\"\n", said);
  /* P's events only, all of them */
  check_complete_run(&p, 2 * PAIRS + 1, PAIRS + 1);
  assert_null(strstr(said, "incomplete"));
  paths_remove(&p);
}

/* In a child whose run has begun: every write past 16 KiB into any file
 * fails (EFBIG; SIGXFSZ ignored), so the store's writer fails on the trace
 * and disables the store. */
static void break_store_writes(void) {
  struct rlimit rl = {16 * 1024, 16 * 1024};
  signal(SIGXFSZ, SIG_IGN);
  if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
    _exit(7);
}

/* The store fails in the middle of the run; shutdown: whether the child
 * calls aa_runtime_shutdown before exit(). Either way the exit does not
 * crash, and the loss is said once. */
static void store_fails(bool shutdown) {
  paths p;
  char said[4096];
  pid_t pid = fork_with_paths(&p);
  if (pid == 0) {
    aa_pool *pool = child_pool(&p);
    break_store_writes();
    churn(pool, 4 * PAIRS); /* the allocator never notices */
    if (shutdown)
      aa_runtime_shutdown();
    exit(0);
  }
  assert_int_equal(wait_child(pid), 0);
  read_log(&p, said, sizeof said);
  print_message("child's stderr: \"%s\"\n", said);
  /* the store said it failed, and the exit (or the shutdown) said what
   * that cost the trace, once */
  assert_non_null(strstr(said, "store: disabled"));
  assert_int_equal(count_of(said, "is incomplete"), 1);
  assert_non_null(strstr(said, "events were dropped"));
  /* what was committed before the failure is a valid database */
  assert_int_equal(sql_int(p.db, "SELECT count(*) FROM runs"), 1);
  assert_true(sql_int(p.db, "SELECT count(*) FROM trace_events") < 8 * PAIRS);
  paths_remove(&p);
}

static void test_runtime_exit_store_fails(void **state) {
  (void)state;
  store_fails(false);
}

static void test_runtime_exit_after_shutdown_reports_once(void **state) {
  (void)state;
  store_fails(true);
}

/* Another process holds the database's write lock from the child's first
 * events to its end: the child's writer cannot commit, and its exit must
 * end anyway (waiting at most the store's busy timeout or the exit's own
 * limit, whichever comes first), saying the trace is incomplete. */
static void test_runtime_exit_locked_store_does_not_hang(void **state) {
  paths p;
  char said[4096];
  int go[2], ready[2];
  char byte = 0;
  sqlite3 *db = NULL;
  (void)state;
  assert_int_equal(pipe(go), 0);
  assert_int_equal(pipe(ready), 0);
  pid_t pid = fork_with_paths(&p);
  if (pid == 0) {
    close(go[1]);
    close(ready[0]);
    aa_pool *pool = child_pool(&p);
    if (write(ready[1], "r", 1) != 1 || read(go[0], &byte, 1) != 1)
      _exit(8);
    churn(pool, PAIRS);
    exit(0);
  }
  close(go[0]);
  close(ready[1]);
  assert_int_equal(read(ready[0], &byte, 1), 1); /* the run has begun */
  assert_int_equal(sqlite3_open(p.db, &db), SQLITE_OK);
  assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
  assert_int_equal(write(go[1], "g", 1), 1);
  assert_int_equal(wait_child(pid), 0);
  sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
  sqlite3_close(db);
  close(go[1]);
  close(ready[0]);
  read_log(&p, said, sizeof said);
  print_message("child's stderr: \"%s\"\n", said);
  assert_int_equal(count_of(said, "is incomplete"), 1);
  assert_int_equal(sql_int(p.db, "SELECT count(*) FROM runs"), 1);
  assert_int_equal(sql_int(p.db, "SELECT count(*) FROM trace_events"), 0);
  paths_remove(&p);
}
#endif /* AA_TEST_WITH_STORE */

int main(void) {
#if AA_TEST_WITH_STORE
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_exit_trace_kept_without_shutdown),
      cmocka_unit_test(test_runtime_exit_full_ring_kept),
      cmocka_unit_test(test_runtime_exit_fork_child_leaves_parent_run),
      cmocka_unit_test(test_runtime_exit_store_fails),
      cmocka_unit_test(test_runtime_exit_after_shutdown_reports_once),
      cmocka_unit_test(test_runtime_exit_locked_store_does_not_hang),
      cmocka_unit_test(test_runtime_exit_from_signal_handler_ends),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
#else
  printf("test_runtime_exit: skipped (built without the store)\n");
  return 0;
#endif
}
