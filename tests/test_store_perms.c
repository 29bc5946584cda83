/*
 * test_store_perms.c — a new database holds the audit log and, with tracing,
 * every allocation address: it is created owner-only (0600), and so are the
 * -wal and -shm files SQLite makes beside it. An existing file keeps its mode.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/store.h"

static unsigned mode_of(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  return (unsigned)(st.st_mode & 0777);
}

static void test_store_new_database_is_owner_only(void **state) {
  char dir[] = "/tmp/aa-perms-XXXXXX", path[256], wal[300];
  aa_store_config cfg;
  aa_store_run_info info;
  aa_store *st = NULL;
  int64_t run = 0;
  mode_t old = umask(022);
  (void)state;

  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/new.db", dir);
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.quiet = true;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  memset(&info, 0, sizeof(info));
  info.rank = -1;
  assert_int_equal(aa_store_begin_run(st, &info, &run), AA_OK);
  assert_int_equal(mode_of(path), 0600);
  snprintf(wal, sizeof(wal), "%s-wal", path);
  if (access(wal, F_OK) == 0)
    assert_int_equal(mode_of(wal), 0600);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(mode_of(path), 0600);
  unlink(path);
  rmdir(dir);
  umask(old);
}

static void test_store_existing_file_keeps_its_mode(void **state) {
  char dir[] = "/tmp/aa-perms-XXXXXX", path[256];
  aa_store_config cfg;
  aa_store *st = NULL;
  FILE *f;
  (void)state;

  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/old.db", dir);
  f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  assert_int_equal(chmod(path, 0640), 0);
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.quiet = true;
  assert_int_equal(aa_store_open(&cfg, &st), AA_OK);
  assert_int_equal(aa_store_close(st), AA_OK);
  assert_int_equal(mode_of(path), 0640);
  unlink(path);
  rmdir(dir);
}

static int open_path(const char *path) {
  aa_store_config cfg;
  aa_store *st = NULL;
  int rc;
  aa_store_config_init(&cfg);
  cfg.path = path;
  cfg.quiet = true;
  rc = aa_store_open(&cfg, &st);
  if (rc == AA_OK)
    assert_int_equal(aa_store_close(st), AA_OK);
  else
    assert_null(st);
  return rc;
}

static int entries_in(const char *dir) {
  char cmd[300];
  FILE *p;
  int n = -1;
  snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
  p = popen(cmd, "r");
  assert_non_null(p);
  assert_int_equal(fscanf(p, "%d", &n), 1);
  pclose(p);
  return n;
}

/* A dangling symbolic link is refused: nothing is created at its target
 * (SQLite would have made it 0644 there). A link to an existing file is
 * followed. */
static void test_store_dangling_symlink_refused(void **state) {
  char dir[] = "/tmp/aa-perms-XXXXXX", link[256], target[256];
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(link, sizeof link, "%s/link.db", dir);
  snprintf(target, sizeof target, "%s/target.db", dir);
  assert_int_equal(symlink(target, link), 0);
  assert_int_equal(open_path(link), AA_EINVAL);
  assert_int_not_equal(access(target, F_OK), 0);
  assert_int_equal(entries_in(dir), 1);
  /* once the target exists, the link is followed */
  assert_int_equal(open_path(target), AA_OK);
  assert_int_equal(mode_of(target), 0600);
  assert_int_equal(open_path(link), AA_OK);
  {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
  }
}

/* "file:" URIs and a trailing slash are refused before anything is made:
 * no stray "file:x.db", no "x.db" without the slash. */
static void test_store_uri_and_slash_refused(void **state) {
  char dir[] = "/tmp/aa-perms-XXXXXX", cwd[512], path[300], cmd[300];
  (void)state;
  assert_non_null(mkdtemp(dir));
  assert_non_null(getcwd(cwd, sizeof cwd));
  assert_int_equal(chdir(dir), 0);
  assert_int_equal(open_path("file:x.db"), AA_EINVAL);
  assert_int_equal(open_path("file:x.db?mode=rwc"), AA_EINVAL);
  assert_int_equal(open_path("x.db/"), AA_EINVAL);
  snprintf(path, sizeof path, "%s/y.db/", dir);
  assert_int_equal(open_path(path), AA_EINVAL);
  assert_int_equal(entries_in(dir), 0);
  /* a file so named is reached with ./ */
  assert_int_equal(open_path("./file:x.db"), AA_OK);
  assert_int_equal(mode_of("./file:x.db"), 0600);
  assert_int_equal(chdir(cwd), 0);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* Devices, directories and FIFOs are not databases: refused before SQLite
 * opens anything (no /dev/null-journal), a FIFO without blocking. */
static void test_store_non_regular_refused(void **state) {
  char dir[] = "/tmp/aa-perms-XXXXXX", fifo[256], cmd[300];
  (void)state;
  assert_non_null(mkdtemp(dir));
  assert_int_equal(open_path("/dev/null"), AA_EINVAL);
  assert_int_equal(open_path("/dev/zero"), AA_EINVAL);
  assert_int_equal(open_path(dir), AA_EINVAL);
  snprintf(fifo, sizeof fifo, "%s/f.db", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  alarm(20);
  assert_int_equal(open_path(fifo), AA_EINVAL);
  alarm(0);
  assert_int_equal(entries_in(dir), 1);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

/* A umask that takes the owner's bits still gives 0600 (0277 would leave
 * 0400, which SQLite opens read-only). */
static void test_store_created_mode_checked(void **state) {
  char dir[] = "/tmp/aa-perms-XXXXXX", path[256], cmd[300];
  mode_t old;
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/u.db", dir);
  old = umask(0277);
  assert_int_equal(open_path(path), AA_OK);
  umask(old);
  assert_int_equal(mode_of(path), 0600);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_new_database_is_owner_only),
      cmocka_unit_test(test_store_existing_file_keeps_its_mode),
      cmocka_unit_test(test_store_dangling_symlink_refused),
      cmocka_unit_test(test_store_uri_and_slash_refused),
      cmocka_unit_test(test_store_non_regular_refused),
      cmocka_unit_test(test_store_created_mode_checked),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
