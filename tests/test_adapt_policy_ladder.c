/*
 * test_adapt_policy_ladder.c — one class ladder: a pool created from a
 * policy's config has exactly the class table the policy implies, so
 * applying the policy to it re-tables nothing, for every combination of
 * (min, max_small, per_doubling) below; and both sides refuse the same
 * ladders (more than AA_MAX_CLASSES classes).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "adaptalloc/policy.h"

static const size_t mins[] = {512, 1024, 1536, 2560, 4096, 8192, 65536};
static const size_t maxs[] = {4096, 16384, 65536, 98304, 262144, 1048576, 1572864, 2097152};

static void test_adapt_policy_ladder_matches_pool(void **state) {
  aa_backend *b = NULL;
  size_t combos = 0, refused = 0;
  (void)state;
  assert_int_equal(aa_backend_host_new(&b), AA_OK);
  for (size_t i = 0; i < sizeof mins / sizeof mins[0]; i++) {
    for (size_t j = 0; j < sizeof maxs / sizeof maxs[0]; j++) {
      if (mins[i] > maxs[j])
        continue;
      for (unsigned pd = 1; pd <= 16; pd++) {
        char doc[256], err[AA_POLICY_ERR_CAP] = "";
        aa_policy *p = NULL;
        aa_pool_config cfg;
        aa_pool *pool = NULL;
        aa_class_spec want[AA_MAX_CLASSES], have[AA_MAX_CLASSES];
        size_t nwant = 0, nhave = 0;
        size_t ladder = aa_class_ladder(mins[i], maxs[j], pd, NULL, 0);
        int rc;

        combos++;
        snprintf(doc, sizeof doc,
                 "{\"pools\": {\"host\": {\"max_small\": %zu, \"classes\": "
                 "{\"min\": %zu, \"per_doubling\": %u}}}}",
                 maxs[j], mins[i], pd);
        rc = aa_policy_parse(doc, strlen(doc), &p, err, sizeof err);
        aa_pool_config_init(&cfg);
        cfg.backend = b;
        cfg.min_block = mins[i];
        cfg.max_small = maxs[j];
        cfg.classes_per_doubling = pd;
        if (ladder > AA_MAX_CLASSES) {
          /* Both refuse a ladder no pool can hold. */
          refused++;
          assert_int_equal(rc, AA_EINVAL);
          assert_non_null(strstr(err, "classes, more than"));
          assert_int_equal(aa_pool_new(&cfg, &pool), AA_EINVAL);
          assert_null(pool);
          continue;
        }
        if (rc != AA_OK)
          print_error("%s: %s\n", doc, err);
        assert_int_equal(rc, AA_OK);
        assert_int_equal(aa_policy_pool_config(p, "host", &cfg, want,
                                               AA_MAX_CLASSES, &nwant),
                         AA_OK);
        assert_int_equal(nwant, ladder);
        cfg.backend = b;
        assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
        assert_int_equal(aa_pool_classes(pool, have, AA_MAX_CLASSES, &nhave, NULL),
                         AA_OK);
        if (nhave != nwant)
          print_error("%s: pool %zu classes, policy %zu\n", doc, nhave, nwant);
        assert_int_equal(nhave, nwant);
        for (size_t k = 0; k < nwant; k++)
          assert_int_equal(have[k].block_size, want[k].block_size);
        /* Applying the policy keeps every class: the same table again. */
        assert_int_equal(aa_policy_apply(p, "host", pool), AA_OK);
        assert_int_equal(aa_pool_classes(pool, have, AA_MAX_CLASSES, &nhave, NULL),
                         AA_OK);
        assert_int_equal(nhave, nwant);
        for (size_t k = 0; k < nwant; k++)
          assert_int_equal(have[k].block_size, want[k].block_size);
        aa_pool_destroy(pool);
        aa_policy_free(p);
      }
    }
  }
  /* The grid must exercise both outcomes. */
  assert_true(combos > 200);
  assert_true(refused > 0 && refused < combos);
  aa_backend_destroy(b);
}

/* The ladder's shape: min first, max last, strictly increasing multiples of
 * AA_BLOCK_ALIGN, every power of two in between present, at most
 * per_doubling classes in each doubling (plus max_small in its own); and the
 * count-only call agrees. */
static void test_adapt_policy_ladder_shape(void **state) {
  size_t out[4096];
  (void)state;
  for (size_t i = 0; i < sizeof mins / sizeof mins[0]; i++) {
    for (size_t j = 0; j < sizeof maxs / sizeof maxs[0]; j++) {
      if (mins[i] > maxs[j])
        continue;
      for (uint32_t pd = 1; pd <= 16; pd++) {
        size_t n = aa_class_ladder(mins[i], maxs[j], pd, out, 4096);
        assert_true(n >= 1 && n < 4096);
        assert_int_equal(aa_class_ladder(mins[i], maxs[j], pd, NULL, 0), n);
        assert_int_equal(out[0], mins[i]);
        assert_int_equal(out[n - 1], maxs[j]);
        for (size_t k = 1; k < n; k++) {
          assert_true(out[k] > out[k - 1]);
          assert_int_equal(out[k] % AA_BLOCK_ALIGN, 0);
        }
        for (size_t p2 = AA_BLOCK_ALIGN; p2 < maxs[j]; p2 *= 2) {
          size_t in = 0;
          bool found = p2 <= mins[i];
          for (size_t k = 0; k < n; k++) {
            found = found || out[k] == p2;
            in += out[k] >= p2 && out[k] < 2 * p2;
          }
          assert_true(found);
          /* max_small, always the top class, may be one more */
          assert_true(in <= pd + (maxs[j] < 2 * p2));
        }
      }
    }
  }
  /* The pool default, 512 .. 1 MiB at 4 a doubling: 40 classes. */
  assert_int_equal(aa_class_ladder(512, 1 << 20, 4, NULL, 0), 40);
  /* 512 .. 1 MiB at 3 a doubling: the case the two old ladders disagreed
   * on (30 vs 31 classes). */
  assert_int_equal(aa_class_ladder(512, 1 << 20, 3, out, 4096), 31);
  assert_int_equal(out[1], 1024);
  assert_int_equal(out[2], 1536); /* 1024 + 1024/3 = 1365, rounded up */
  /* Refusals: max below min, per_doubling 0. */
  assert_int_equal(aa_class_ladder(4096, 1024, 4, out, 4096), 0);
  assert_int_equal(aa_class_ladder(512, 1024, 0, out, 4096), 0);
  /* Below-alignment minimum rounds up. */
  assert_int_equal(aa_class_ladder(100, 2048, 1, out, 4096), 3);
  assert_int_equal(out[0], 512);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adapt_policy_ladder_matches_pool),
      cmocka_unit_test(test_adapt_policy_ladder_shape),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
