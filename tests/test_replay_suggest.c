/*
 * test_replay_suggest.c — the tuner: which exact classes it adds and why,
 * the class bound, bad arguments, and the end-to-end claim that the tuned
 * table beats the default ladder on a skewed run.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/policy.h"
#include "adaptalloc/replay.h"
#include "replay_parts.h" /* tools/replay/lib: the tool's own parts */

static size_t default_table(aa_class_spec *out, aa_pool_config *pc) {
  aa_policy *p = NULL;
  size_t n = 0;

  assert_int_equal(aa_policy_default(&p), AA_OK);
  aa_pool_config_init(pc);
  /* the 1 MiB ladder, four classes per doubling: the pinned pool's */
  assert_int_equal(aa_policy_pool_config(p, "pinned", pc, out, AA_MAX_CLASSES,
                                         &n),
                   AA_OK);
  aa_policy_free(p);
  assert_true(n > 8);
  return n;
}

static bool has_class(const aa_class_spec *t, size_t n, size_t size) {
  size_t i;

  for (i = 0; i < n; i++) {
    if (t[i].block_size == size)
      return true;
  }
  return false;
}

static void test_replay_suggest_adds_exact_class(void **state) {
  aa_class_spec base[AA_MAX_CLASSES], out[AA_MAX_CLASSES];
  aa_pool_config pc;
  size_t nb = default_table(base, &pc), n = 0, i;
  aa_replay_suggest_config sc;
  aa_replay_size_stat sizes[2] = {{4100, 50000, 0, 20000}, {6000, 10, 0, 3}};
  (void)state;

  assert_false(has_class(base, nb, 4608));
  aa_replay_suggest_config_init(&sc);
  sc.slab_size = pc.slab_size;
  sc.max_small = pc.max_small;
  assert_int_equal(aa_replay_suggest_classes(sizes, 2, base, nb, &sc, out,
                                             AA_MAX_CLASSES, &n),
                   AA_OK);
  /* 4100 B rounds to 4608 exactly; 6000 is too rare to earn a class. */
  assert_int_equal(n, nb + 1);
  assert_true(has_class(out, n, 4608));
  assert_false(has_class(out, n, 6144) && !has_class(base, nb, 6144));
  for (i = 0; i + 1 < n; i++)
    assert_true(out[i].block_size < out[i + 1].block_size);
  assert_int_equal(out[n - 1].block_size, pc.max_small);
  /* Every base class is kept. */
  for (i = 0; i < nb; i++)
    assert_true(has_class(out, n, base[i].block_size));
}

static void test_replay_suggest_nothing_to_gain(void **state) {
  aa_class_spec base[AA_MAX_CLASSES], out[AA_MAX_CLASSES];
  aa_pool_config pc;
  size_t nb = default_table(base, &pc), n = 0;
  aa_replay_suggest_config sc;
  /* Sizes that sit on classes, a rare odd size, a large one. */
  aa_replay_size_stat sizes[3] = {
      {4096, 900, 0, 900}, {4100, 5, 0, 5}, {5u << 20, 100, 0, 50}};
  (void)state;

  aa_replay_suggest_config_init(&sc);
  assert_int_equal(aa_replay_suggest_classes(sizes, 3, base, nb, &sc, out,
                                             AA_MAX_CLASSES, &n),
                   AA_OK);
  assert_int_equal(n, nb);
  assert_memory_equal(out, base, nb * sizeof *base);
  /* No sizes at all: the base comes back. */
  assert_int_equal(aa_replay_suggest_classes(NULL, 0, base, nb, &sc, out,
                                             AA_MAX_CLASSES, &n),
                   AA_OK);
  assert_int_equal(n, nb);
}

static void test_replay_suggest_class_bound(void **state) {
  aa_class_spec base[AA_MAX_CLASSES], out[AA_MAX_CLASSES];
  aa_pool_config pc;
  size_t nb = default_table(base, &pc), n = 0;
  aa_replay_suggest_config sc;
  aa_replay_size_stat sizes[2] = {{4100, 50000, 0, 20000},
                                  {70000, 5000, 0, 3000}};
  (void)state;

  aa_replay_suggest_config_init(&sc);
  sc.max_classes = nb; /* full: an unused ladder class must make room */
  assert_int_equal(aa_replay_suggest_classes(sizes, 2, base, nb, &sc, out,
                                             AA_MAX_CLASSES, &n),
                   AA_OK);
  assert_int_equal(n, nb);
  assert_true(has_class(out, n, 4608));
  assert_true(has_class(out, n, 70144));
  assert_false(has_class(out, n, base[0].block_size)); /* 512 served nothing */
  assert_int_equal(out[n - 1].block_size, pc.max_small);
}

static void test_replay_suggest_bad_args(void **state) {
  aa_class_spec base[AA_MAX_CLASSES], out[4];
  aa_pool_config pc;
  size_t nb = default_table(base, &pc), n = 99;
  aa_replay_suggest_config sc;
  aa_replay_size_stat sizes[2] = {{4100, 1, 0, 20000}, {4000, 1, 0, 1}};
  (void)state;

  aa_replay_suggest_config_init(&sc);
  /* Sizes out of order. */
  assert_int_equal(aa_replay_suggest_classes(sizes, 2, base, nb, &sc, out, 4,
                                             &n),
                   AA_EINVAL);
  assert_int_equal(n, 0);
  /* A base whose last class is not max_small. */
  assert_int_equal(aa_replay_suggest_classes(sizes, 1, base, nb - 1, &sc, out,
                                             4, &n),
                   AA_EINVAL);
  /* Too small an output array: the count is still reported. */
  assert_int_equal(aa_replay_suggest_classes(sizes, 1, base, nb, &sc, out, 4,
                                             &n),
                   AA_ERANGE);
  assert_int_equal(n, nb + 1);
}

/* ---------------------------------------------------------- end to end */

static int feed_one(void *user, const aa_replay_event *ev, size_t n) {
  return aa_replay_sim_feed(user, ev, n);
}

static void run_policy(const aa_replay_hist *h, const aa_class_spec *cls,
                       size_t ncls, bool sizes, aa_replay_result *r,
                       aa_replay_size_stat **sz, size_t *nsz,
                       aa_class_spec *used, size_t *nused) {
  aa_replay_config cfg;
  aa_replay_synth_config syn;
  aa_replay_sim *s = NULL;
  char err[AA_REPLAY_ERR_CAP];

  aa_replay_config_init(&cfg);
  cfg.classes = cls;
  cfg.nclasses = ncls;
  cfg.collect_sizes = sizes;
  assert_int_equal(aa_replay_sim_new(&cfg, &s, err, sizeof err), AA_OK);
  aa_replay_synth_config_init(&syn);
  syn.events = 60000;
  syn.live_target = 8000;
  syn.seed = 11;
  assert_int_equal(aa_replay_synth(h, &syn, feed_one, s, err, sizeof err), AA_OK);
  aa_replay_sim_result(s, r);
  if (sz != NULL)
    assert_int_equal(aa_replay_sim_sizes(s, sz, nsz), AA_OK);
  if (used != NULL)
    assert_int_equal(aa_pool_classes(aa_replay_sim_pool(s), used,
                                     AA_MAX_CLASSES, nused, NULL),
                     AA_OK);
  aa_replay_sim_free(s);
}

static void test_replay_suggest_beats_default(void **state) {
  aa_class_spec base[AA_MAX_CLASSES], used[AA_MAX_CLASSES], tuned[AA_MAX_CLASSES];
  aa_pool_config pc;
  size_t nb = default_table(base, &pc), nused = 0, nt = 0, nsz = 0;
  aa_replay_size_stat *sz = NULL;
  aa_replay_suggest_config sc;
  aa_replay_result rd, rt;
  aa_replay_hist h;
  char err[AA_REPLAY_ERR_CAP];
  static const char skewed[] =
      "{\"sizes\": [{\"size\": 4100, \"count\": 9000}, {\"size\": 512, "
      "\"count\": 500}, {\"size\": 70000, \"count\": 400}, {\"size\": 9000, "
      "\"count\": 100}]}";
  (void)state;

  assert_int_equal(aa_replay_hist_parse(skewed, sizeof skewed - 1, &h, err,
                                        sizeof err),
                   AA_OK);
  run_policy(&h, base, nb, true, &rd, &sz, &nsz, used, &nused);
  assert_int_equal(nused, nb);
  aa_replay_suggest_config_init(&sc);
  assert_int_equal(aa_replay_suggest_classes(sz, nsz, used, nused, &sc, tuned,
                                             AA_MAX_CLASSES, &nt),
                   AA_OK);
  assert_true(nt > nb);
  run_policy(&h, tuned, nt, false, &rt, NULL, NULL, NULL, NULL);

  /* The same requests... */
  assert_int_equal(rt.requests, rd.requests);
  assert_int_equal(rt.peak_requested, rd.peak_requested);
  /* ...with less waste, less memory held, no more backend calls. */
  assert_true(rt.int_frag_peak < rd.int_frag_peak);
  assert_true(rt.int_frag_avg < rd.int_frag_avg);
  assert_true(rt.peak_in_use < rd.peak_in_use);
  assert_true(rt.peak_reserved < rd.peak_reserved);
  assert_true(rt.backend_calls <= rd.backend_calls);
  assert_true(rt.sim_backend_us <= rd.sim_backend_us);
  /* The dominant size's waste is mostly gone: 4100 in 4608 is 11%, against
   * 20% in 5120 (and the mix's other sizes fit well). */
  assert_true(rd.int_frag_peak > 0.15);
  assert_true(rt.int_frag_peak < 0.10);
  free(sz);
  aa_replay_hist_clear(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_suggest_adds_exact_class),
      cmocka_unit_test(test_replay_suggest_nothing_to_gain),
      cmocka_unit_test(test_replay_suggest_class_bound),
      cmocka_unit_test(test_replay_suggest_bad_args),
      cmocka_unit_test(test_replay_suggest_beats_default),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
