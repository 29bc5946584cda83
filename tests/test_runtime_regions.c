/*
 * test_runtime_regions.c — the runtime's regions (named pools): names and
 * their bound, a region's pool per backend configured from its policy
 * section (pools.regions.<name>) or its backend's, its limit failing only its
 * own allocations, its stats in /stats, policy changes that reach it or are
 * refused whole. The host backend stands in for a GPU. The runtime is a
 * process-wide singleton, so each scenario runs in a forked child; CHECK
 * failures exit non-zero.
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

#define MIB ((size_t)1 << 20)

static char g_policy[256];

static void run_child(void (*scenario)(void)) {
  int status = 0;
  pid_t pid;
  fflush(NULL);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    setenv("ADAPTALLOC_QUIET", "1", 1);
    setenv("ADAPTALLOC_DB", "off", 1);
    setenv("ADAPTALLOC_HTTP", "off", 1);
    setenv("ADAPTALLOC_POLICY", g_policy, 1);
    unsetenv("ADAPTALLOC_TOKEN");
    unsetenv("ADAPTALLOC_MODEL");
    scenario();
    aa_runtime_shutdown();
    _exit(0);
  }
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* The pool object of /stats named `name` (in root), or NULL. */
static cJSON *stats_pool(cJSON *root, const char *name) {
  cJSON *pools = cJSON_GetObjectItemCaseSensitive(root, "pools");
  cJSON *it;
  cJSON_ArrayForEach(it, pools) {
    cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
    if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
      return it;
  }
  return NULL;
}

static double num(cJSON *obj, const char *key) {
  cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  CHECK(cJSON_IsNumber(v));
  return v->valuedouble;
}

static cJSON *stats_now(void) {
  char *out = NULL;
  size_t len = 0;
  cJSON *root;
  CHECK(aa_runtime_stats_json(&out, &len) == AA_OK);
  root = cJSON_Parse(out);
  free(out);
  CHECK(root != NULL);
  return root;
}

static void scenario_names(void) {
  char err[256], name[32];
  int id = 7, id2 = -5;

  /* bad names: AA_EINVAL, id -1, a reason */
  CHECK(aa_runtime_region_id(NULL, &id, err, sizeof(err)) == AA_EINVAL && id == -1);
  CHECK(strstr(err, "not a region name") != NULL);
  CHECK(aa_runtime_region_id("", &id, err, sizeof(err)) == AA_EINVAL);
  CHECK(aa_runtime_region_id("kv cache", &id, err, sizeof(err)) == AA_EINVAL);
  CHECK(strstr(err, "byte 2") != NULL);
  CHECK(aa_runtime_region_id("a23456789012345678901", &id, err, sizeof(err)) == AA_EINVAL);
  CHECK(aa_runtime_region_id("kv", NULL, err, sizeof(err)) == AA_EINVAL);
  /* nothing was registered by the refusals: the first good name is id 0 */
  CHECK(aa_runtime_region_name(0) == NULL);
  CHECK(aa_runtime_region_id("kv_cache", &id, err, sizeof(err)) == AA_OK && id == 0);
  CHECK(aa_runtime_region_id("kv_cache", &id2, NULL, 0) == AA_OK && id2 == 0);
  CHECK(strcmp(aa_runtime_region_name(0), "kv_cache") == 0);
  for (int i = 1; i < AA_RUNTIME_MAX_REGIONS; i++) {
    snprintf(name, sizeof(name), "r%d", i);
    CHECK(aa_runtime_region_id(name, &id, NULL, 0) == AA_OK && id == i);
  }
  CHECK(aa_runtime_region_id("one_more", &id, err, sizeof(err)) == AA_ELIMIT && id == -1);
  CHECK(strstr(err, "16 regions") != NULL);
  CHECK(aa_runtime_region_name(AA_RUNTIME_MAX_REGIONS) == NULL);
  CHECK(aa_runtime_region_name(-1) == NULL);
  /* a known name still answers at the bound */
  CHECK(aa_runtime_region_id("r3", &id, NULL, 0) == AA_OK && id == 3);
  /* no runtime was needed for any of it */
  CHECK(!aa_runtime_started());
}

static void scenario_pools(void) {
  aa_pool *host, *kv, *scores;
  void *blocks[64];
  size_t n = 0;
  int kv_id = -1, sc_id = -1;
  cJSON *root, *o;
  void *big;

  CHECK(aa_runtime_region_id("kv", &kv_id, NULL, 0) == AA_OK);
  CHECK(aa_runtime_region_id("scores", &sc_id, NULL, 0) == AA_OK);
  CHECK(aa_runtime_region_pool(kv_id + 5, AA_BACKEND_HOST, -1) == NULL);
  CHECK(aa_runtime_region_pool(kv_id, AA_BACKEND_PINNED, -1) == NULL);
  kv = aa_runtime_region_pool(kv_id, AA_BACKEND_HOST, -1);
  CHECK(kv != NULL);
  CHECK(aa_runtime_region_pool(kv_id, AA_BACKEND_HOST, -1) == kv);
  CHECK(strcmp(aa_pool_name(kv), "host:kv") == 0);
  CHECK(strcmp(aa_pool_region(kv), "kv") == 0);
  host = aa_runtime_pool(AA_BACKEND_HOST, -1);
  CHECK(host != NULL && host != kv);
  CHECK(aa_pool_backend(host) == aa_pool_backend(kv));
  CHECK(strcmp(aa_pool_region(host), "") == 0);
  scores = aa_runtime_region_pool(sc_id, AA_BACKEND_HOST, -1);
  CHECK(scores != NULL && scores != kv);

  /* kv's limit (its section: 4 MiB) fails kv's allocations only */
  while (n < 64 && (blocks[n] = aa_alloc(kv, MIB, NULL)) != NULL)
    n++;
  CHECK(n >= 1 && n <= 4);
  big = aa_alloc(host, 16 * MIB, NULL);
  CHECK(big != NULL);
  void *s = aa_alloc(scores, 8 * MIB, NULL); /* no section: the host's, no limit */
  CHECK(s != NULL);

  root = stats_now();
  o = stats_pool(root, "host:kv");
  CHECK(o != NULL);
  CHECK(strcmp(cJSON_GetObjectItemCaseSensitive(o, "region")->valuestring, "kv") == 0);
  CHECK(num(o, "limit_bytes") == 4.0 * MIB);
  CHECK(num(o, "bytes_in_use") == (double)(n * MIB));
  CHECK(num(o, "ooms") == 1);
  o = stats_pool(root, "host");
  CHECK(o != NULL && cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "region")));
  CHECK(num(o, "bytes_in_use") == 16.0 * MIB && num(o, "ooms") == 0);
  o = stats_pool(root, "host:scores");
  CHECK(o != NULL && num(o, "limit_bytes") == 0 && num(o, "bytes_in_use") == 8.0 * MIB);
  cJSON_Delete(root);

  for (size_t i = 0; i < n; i++)
    CHECK(aa_free(kv, blocks[i], MIB, NULL) == AA_OK);
  CHECK(aa_free(host, big, 16 * MIB, NULL) == AA_OK);
  CHECK(aa_free(scores, s, 8 * MIB, NULL) == AA_OK);
}

static int64_t pool_limit(const char *name) {
  cJSON *root = stats_now();
  cJSON *o = stats_pool(root, name);
  int64_t v = o != NULL ? (int64_t)num(o, "limit_bytes") : -1;
  cJSON_Delete(root);
  return v;
}

static void scenario_policy_changes(void) {
  char err[512];
  uint64_t v = 0;
  int id = -1;
  const char *raise = "{\"pools\": {\"regions\": {\"kv\": {\"limit_bytes\": 16777216}}}}";
  const char *bad = "{\"pools\": {\"regions\": {\"kv!\": {}}}}";
  const char *fixed = "{\"pools\": {\"regions\": {\"kv\": {\"max_small\": 65536}}}}";
  const char *drop = "{\"pools\": {\"regions\": {\"kv\": null}}}";
  const char *add = "{\"pools\": {\"regions\": {\"scores\": {\"limit_bytes\": 8388608}}}}";
  aa_pool *kv;

  CHECK(aa_runtime_region_id("kv", &id, NULL, 0) == AA_OK);
  kv = aa_runtime_region_pool(id, AA_BACKEND_HOST, -1);
  CHECK(kv != NULL);
  CHECK(pool_limit("host:kv") == 4 * (int64_t)MIB);
  /* a change to the section reaches the live pool */
  CHECK(aa_runtime_policy_update(raise, strlen(raise), true, "unit", 0, &v, err,
                                 sizeof(err)) == AA_OK);
  CHECK(v == 2 && pool_limit("host:kv") == 16 * (int64_t)MIB);
  /* refused whole, naming the path: nothing changes */
  CHECK(aa_runtime_policy_update(bad, strlen(bad), true, "unit", 0, &v, err,
                                 sizeof(err)) == AA_EINVAL);
  CHECK(strstr(err, "pools.regions.kv!: not a region name") != NULL);
  CHECK(aa_runtime_policy_update(fixed, strlen(fixed), true, "unit", 0, &v, err,
                                 sizeof(err)) == AA_ECONFLICT);
  CHECK(strstr(err, "pools.regions.kv: max_small is fixed") != NULL);
  CHECK(strstr(err, "host:kv") != NULL);
  /* the backend is fixed too: a live pool does not turn into managed memory */
  {
    const char *managed = "{\"pools\": {\"regions\": {\"kv\": {\"backend\": \"managed\"}}}}";
    CHECK(aa_runtime_policy_update(managed, strlen(managed), true, "unit", 0, &v, err,
                                   sizeof(err)) == AA_ECONFLICT);
    CHECK(strstr(err, "pools.regions.kv.backend: fixed while pool host:kv is live "
                      "(\"default\" in force, \"managed\" asked)") != NULL);
  }
  {
    char *doc = NULL;
    uint64_t now = 0;
    CHECK(aa_runtime_policy_json(&doc, &now) == AA_OK && now == 2);
    free(doc);
  }
  CHECK(pool_limit("host:kv") == 16 * (int64_t)MIB);
  /* without its section the region's pool takes its backend's (no limit) */
  CHECK(aa_runtime_policy_update(drop, strlen(drop), true, "unit", 0, &v, err,
                                 sizeof(err)) == AA_OK);
  CHECK(pool_limit("host:kv") == 0);
  /* a section added later applies to the region's pool made after it */
  CHECK(aa_runtime_policy_update(add, strlen(add), true, "unit", 0, &v, err,
                                 sizeof(err)) == AA_OK);
  CHECK(aa_runtime_region_id("scores", &id, NULL, 0) == AA_OK);
  CHECK(aa_runtime_region_pool(id, AA_BACKEND_HOST, -1) != NULL);
  CHECK(pool_limit("host:scores") == 8 * (int64_t)MIB);
}

/* aa_runtime_pool_config: what the policy in force gives a kind's pools
 * (the torch allocator makes its CUDA-graph pools with it). */
static void scenario_pool_config(void) {
  const char *patch = "{\"pools\": {\"device\": {\"limit_bytes\": 67108864,"
                      " \"large\": {\"mode\": \"passthrough\"}}}}";
  char err[256];
  uint64_t v = 0;
  aa_pool_config c;
  char *doc = NULL;
  cJSON *root, *dev;

  aa_pool_config_init(&c);
  CHECK(aa_runtime_pool_config(AA_BACKEND_DEVICE, NULL) == AA_EINVAL);
  CHECK(aa_runtime_pool_config((aa_backend_kind)99, &c) == AA_EINVAL);
  CHECK(aa_runtime_policy_update(patch, strlen(patch), true, "unit", 0, &v, err,
                                 sizeof(err)) == AA_OK);
  aa_pool_config_init(&c);
  c.name = "mine";
  CHECK(aa_runtime_pool_config(AA_BACKEND_DEVICE, &c) == AA_OK);
  CHECK(strcmp(c.name, "mine") == 0 && c.backend == NULL);
  CHECK(c.limit_bytes == 64 * MIB);
  CHECK(c.large_mode == AA_LARGE_PASSTHROUGH);
  CHECK(aa_runtime_policy_json(&doc, &v) == AA_OK);
  root = cJSON_Parse(doc);
  free(doc);
  CHECK(root != NULL);
  dev = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "pools"),
                                         "device");
  CHECK(dev != NULL);
  CHECK((double)c.max_small == num(dev, "max_small"));
  CHECK((double)c.slab_size == num(dev, "slab_size"));
  cJSON_Delete(root);
  /* the host section is another one */
  aa_pool_config_init(&c);
  CHECK(aa_runtime_pool_config(AA_BACKEND_HOST, &c) == AA_OK);
  CHECK(c.limit_bytes == 0 && c.large_mode != AA_LARGE_PASSTHROUGH);
}

static void test_runtime_regions_pool_config(void **state) {
  (void)state;
  run_child(scenario_pool_config);
}

static void test_runtime_regions_names(void **state) {
  (void)state;
  run_child(scenario_names);
}

static void test_runtime_regions_pools(void **state) {
  (void)state;
  run_child(scenario_pools);
}

static void test_runtime_regions_policy_changes(void **state) {
  (void)state;
  run_child(scenario_policy_changes);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_runtime_regions_names),
      cmocka_unit_test(test_runtime_regions_pools),
      cmocka_unit_test(test_runtime_regions_policy_changes),
      cmocka_unit_test(test_runtime_regions_pool_config),
  };
  FILE *f;
  int rc;
  snprintf(g_policy, sizeof(g_policy), "/tmp/aa-test-regions-%ld.json", (long)getpid());
  f = fopen(g_policy, "w");
  if (f == NULL)
    return 1;
  /* the loop off: its trims and classes must not move the numbers */
  fputs("{\"adapt\": {\"enabled\": false}, \"telemetry\": {},"
        " \"pools\": {\"device\": {}, \"pinned\": {}, \"host\": {},"
        " \"regions\": {\"kv\": {\"limit_bytes\": 4194304}}}}",
        f);
  fclose(f);
  rc = cmocka_run_group_tests(tests, NULL, NULL);
  unlink(g_policy);
  return rc;
}
