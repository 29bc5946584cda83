/*
 * test_runtime_api.c — the runtime's in-process API (the /stats and /policy
 * operations for embedders and the Python package): aa_runtime_started,
 * aa_runtime_stats_json, aa_runtime_policy_json, aa_runtime_policy_update,
 * aa_runtime_http_address. The runtime is a process-wide singleton, so each
 * scenario runs in a forked child; CHECK failures exit non-zero.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <cJSON.h>

#include "adaptalloc/runtime.h"

#include "child_check.h" /* CHECK: a failed check ends the forked child */

static void run_child(void (*scenario)(void)) {
  int status = 0;
  pid_t pid;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("ADAPTALLOC_QUIET", "1", 1);
    setenv("ADAPTALLOC_DB", "off", 1);
    unsetenv("ADAPTALLOC_POLICY");
    unsetenv("ADAPTALLOC_TOKEN");
    unsetenv("ADAPTALLOC_MODEL");
    setenv("ADAPTALLOC_POLICY_DIR", "/nonexistent-adaptalloc-policies", 1);
    scenario();
    aa_runtime_shutdown();
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

static uint64_t interval_of(const char *policy_json) {
  cJSON *root = cJSON_Parse(policy_json);
  cJSON *adapt = cJSON_GetObjectItemCaseSensitive(root, "adapt");
  cJSON *iv = cJSON_GetObjectItemCaseSensitive(adapt, "interval_ms");
  uint64_t v = cJSON_IsNumber(iv) ? (uint64_t)iv->valuedouble : 0;
  cJSON_Delete(root);
  return v;
}

static void scenario_policy(void) {
  char *doc = NULL, *doc2 = NULL;
  char err[256];
  uint64_t v = 0, nv = 0;
  const char *good = "{\"adapt\": {\"interval_ms\": 1500}}";
  const char *bad = "{\"adapt\": {\"interval_ms\": -1}}";

  setenv("ADAPTALLOC_HTTP", "off", 1);
  CHECK(!aa_runtime_started());
  CHECK(aa_runtime_policy_json(&doc, &v) == AA_OK); /* starts the runtime */
  CHECK(aa_runtime_started());
  CHECK(doc != NULL && v == 1);

  /* A merge patch: a new version, the value in force. */
  CHECK(aa_runtime_policy_update(good, strlen(good), true, "unit", 0, &nv, err,
                                 sizeof(err)) == AA_OK);
  CHECK(nv == 2);
  CHECK(aa_runtime_policy_json(&doc2, &v) == AA_OK && v == 2);
  CHECK(interval_of(doc2) == 1500);
  free(doc2);
  doc2 = NULL;

  /* Refusals change nothing and say why. */
  err[0] = '\0';
  CHECK(aa_runtime_policy_update(bad, strlen(bad), true, "unit", 0, &nv, err,
                                 sizeof(err)) < 0);
  CHECK(strstr(err, "interval_ms") != NULL);
  CHECK(aa_runtime_policy_update("{", 1, false, NULL, 0, NULL, err, sizeof(err)) ==
        AA_EPARSE);
  CHECK(aa_runtime_policy_update(good, strlen(good), true, "unit", 7, NULL, err,
                                 sizeof(err)) == AA_ESTALE);
  CHECK(strstr(err, "7") != NULL);
  CHECK(aa_runtime_policy_update(NULL, 0, true, NULL, 0, NULL, NULL, 0) == AA_EINVAL);
  /* A whole document must be complete; the message names what is missing
   * and the call that changes part (Python's names for Python). */
  CHECK(aa_runtime_policy_update(good, strlen(good), false, "python", 0, &nv, err,
                                 sizeof(err)) == AA_EINVAL);
  CHECK(strcmp(err, "not a complete policy: missing pools.device, pools.pinned, "
                    "pools.host, telemetry (use patch_policy to change part)") == 0);
  CHECK(aa_runtime_policy_update(good, strlen(good), false, "unit", 0, &nv, err,
                                 sizeof(err)) == AA_EINVAL);
  CHECK(strcmp(err, "not a complete policy: missing pools.device, pools.pinned, "
                    "pools.host, telemetry (use a merge patch to change part)") == 0);
  CHECK(aa_runtime_policy_json(&doc2, &v) == AA_OK && v == 2);
  CHECK(interval_of(doc2) == 1500);

  /* A whole document (PUT) with the version in force as if_match. */
  CHECK(aa_runtime_policy_update(doc, strlen(doc), false, "unit", 2, &nv, err,
                                 sizeof(err)) == AA_OK);
  CHECK(nv == 3);
  free(doc2);
  CHECK(aa_runtime_policy_json(&doc2, &v) == AA_OK && v == 3);
  CHECK(interval_of(doc2) == interval_of(doc));

  /* The same document again, or an empty patch: nothing changes, the
   * version in force is answered. */
  nv = 0;
  CHECK(aa_runtime_policy_update(doc, strlen(doc), false, "unit", 0, &nv, err,
                                 sizeof(err)) == AA_OK);
  CHECK(nv == 3);
  nv = 0;
  CHECK(aa_runtime_policy_update("{}", 2, true, "unit", 3, &nv, err, sizeof(err)) == AA_OK);
  CHECK(nv == 3);
  CHECK(aa_runtime_policy_update("{}", 2, true, "unit", 2, &nv, err, sizeof(err)) ==
        AA_ESTALE);
  free(doc2);
  CHECK(aa_runtime_policy_json(&doc2, &v) == AA_OK && v == 3);
  free(doc);
  free(doc2);
  CHECK(aa_runtime_policy_json(NULL, NULL) == AA_EINVAL);
}

static void scenario_stats_and_address(void) {
  char *out = NULL;
  size_t len = 0;
  char addr[64], tiny[4];
  cJSON *root;
  aa_pool *host;
  void *p;
  int port;

  setenv("ADAPTALLOC_HTTP", "127.0.0.1:0", 1);
  CHECK(aa_runtime_http_address(addr, sizeof(addr)) == AA_ENOTSUP); /* not started */
  host = aa_runtime_pool(AA_BACKEND_HOST, -1);
  CHECK(host != NULL);
  p = aa_alloc(host, 3000, NULL);
  CHECK(p != NULL);
  CHECK(aa_runtime_stats_json(&out, &len) == AA_OK);
  CHECK(out != NULL && len == strlen(out));
  root = cJSON_Parse(out);
  CHECK(root != NULL);
  {
    cJSON *pools = cJSON_GetObjectItemCaseSensitive(root, "pools");
    cJSON *first = cJSON_GetArrayItem(pools, 0);
    cJSON *in_use = cJSON_GetObjectItemCaseSensitive(first, "bytes_in_use");
    CHECK(cJSON_GetArraySize(pools) == 1);
    CHECK(cJSON_IsNumber(in_use) && in_use->valuedouble >= 3000);
  }
  cJSON_Delete(root);
  free(out);
  CHECK(aa_free(host, p, 3000, NULL) == AA_OK);
  CHECK(aa_runtime_stats_json(NULL, &len) == AA_EINVAL);
  if (!AA_TEST_WITH_HTTP) {
    CHECK(aa_runtime_http_address(addr, sizeof(addr)) == AA_ENOTSUP);
    return;
  }

  port = aa_runtime_http_port();
  CHECK(port > 0);
  CHECK(aa_runtime_http_address(addr, sizeof(addr)) == AA_OK);
  {
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%d", port);
    CHECK(strcmp(addr, want) == 0);
  }
  CHECK(aa_runtime_http_address(tiny, sizeof(tiny)) == AA_ERANGE && tiny[0] == '\0');
  CHECK(aa_runtime_http_address(NULL, 10) == AA_EINVAL);
}

static void scenario_http_off(void) {
  char addr[64];
  setenv("ADAPTALLOC_HTTP", "off", 1);
  CHECK(aa_runtime_init(NULL) == AA_OK);
  CHECK(aa_runtime_started());
  CHECK(aa_runtime_http_address(addr, sizeof(addr)) == AA_ENOTSUP);
  aa_runtime_shutdown();
  CHECK(!aa_runtime_started());
}

static void test_runtime_api_policy(void **state) {
  (void)state;
  run_child(scenario_policy);
}

static void test_runtime_api_stats_and_address(void **state) {
  (void)state;
  run_child(scenario_stats_and_address);
}

static void test_runtime_api_http_off(void **state) {
  (void)state;
  run_child(scenario_http_off);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_api_policy),
      cmocka_unit_test(test_runtime_api_stats_and_address),
      cmocka_unit_test(test_runtime_api_http_off),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
