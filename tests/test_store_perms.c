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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_store_new_database_is_owner_only),
      cmocka_unit_test(test_store_existing_file_keeps_its_mode),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
