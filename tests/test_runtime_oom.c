/*
 * test_runtime_oom.c — the runtime's out-of-memory records (runtime_oom.c):
 * a runtime host pool driven to OOM gives aa_runtime_last_oom the record and
 * the store's `ooms` table a row at the next tick; the allocation's result
 * is NULL and the pool works on, with the store on and with it off.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/runtime.h"
#include "adaptalloc/store.h"

#define MiB ((size_t)1 << 20)

static char g_db[256];

static void drive(void) {
  aa_pool *pool = aa_runtime_pool(AA_BACKEND_HOST, 0);
  assert_non_null(pool);
  aa_pool_set_limit(pool, 4 * MiB);
  assert_null(aa_alloc(pool, 16 * MiB, NULL));
  void *p = aa_alloc(pool, 2 * MiB, NULL); /* works on under the limit */
  assert_non_null(p);
  assert_int_equal(aa_free(pool, p, 0, NULL), AA_OK);
}

static void test_runtime_oom_recorded(void **state) {
  (void)state;
  aa_oom_info o;
  uint64_t total = 99;
  assert_int_equal(aa_runtime_last_oom(&o, &total), AA_ENOENT);
  assert_int_equal(total, 0);
  char *json = NULL;
  size_t len = 0;
  assert_int_equal(aa_runtime_oom_json(&json, &len), AA_OK);
  assert_string_equal(json, "{\"count\":0,\"last\":null}");
  free(json);

  drive();
  assert_int_equal(aa_runtime_last_oom(&o, &total), AA_OK);
  assert_int_equal(total, 1);
  assert_int_equal(o.request, 16 * MiB);
  assert_int_equal(o.limit_bytes, 4 * MiB);
  assert_string_equal(o.pool, "host");
  assert_int_equal(aa_runtime_oom_json(&json, &len), AA_OK);
  assert_int_equal(strlen(json), len);
  assert_non_null(strstr(json, "{\"count\":1,\"last\":{\"version\":1,\"pool\":\"host\""));
  free(json);

  aa_runtime_shutdown(); /* the final tick hands the record to the store */
  aa_store_query q;
  aa_store_query_init(&q);
  assert_int_equal(aa_store_ooms_json(g_db, &q, &json), AA_OK);
  assert_non_null(strstr(json, "\"count\":1"));
  assert_non_null(strstr(json, "\"request\":16777216"));
  free(json);
}

int main(void) {
  snprintf(g_db, sizeof g_db, "/tmp/aa_runtime_oom_%d.db", (int)getpid());
  unlink(g_db);
  setenv("ADAPTALLOC_QUIET", "1", 1);
  setenv("ADAPTALLOC_HTTP", "off", 1);
  setenv("ADAPTALLOC_DB", g_db, 1);
  unsetenv("ADAPTALLOC_POLICY");
  setenv("ADAPTALLOC_POLICY_DIR", "/nonexistent-adaptalloc-policies", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_oom_recorded),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  char side[300];
  unlink(g_db);
  snprintf(side, sizeof side, "%s-wal", g_db);
  unlink(side);
  snprintf(side, sizeof side, "%s-shm", g_db);
  unlink(side);
  return rc;
}
