/*
 * test_adapt_demo.c — "reserved with the policy loop on is never above
 * reserved with it off", checked on the demo's own workload
 * (tools/demo/workload.c) so that the answer does not depend on timing or
 * on a second process competing for the machine: one thread, the demo's
 * seeded padding jitter, the sequence-length phases changed by step count.
 * Two host pools built from the default policy as the runtime builds them
 * get the same requests in the same order; each has a loop with the default
 * policy's adapt section, enabled on one and disabled on the other, stepped
 * in this thread (aa_adapt_loop_step) every STEPS_PER_INTERVAL steps. The
 * pools differ only by what the loop did, so their peaks compare exactly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/replay.h"
#include "adaptalloc/policy.h"
#include "workload.h"

#define CYCLES 2               /* passes over the five phases */
#define STEPS_PER_PHASE 2048   /* steps of one sequence length */
#define STEPS_PER_INTERVAL 512 /* steps between two loop steps: 4 a phase */
#define SEED 0x64656d6fu       /* the demo's first worker's seed */
#define WORKERS 2              /* the demo's default --threads, stepping in turn */

static double mib(uint64_t b) { return (double)b / 1048576.0; }

typedef struct side {
  aa_backend *be;
  aa_pool *pool;
  aa_adapt_loop *loop;
  demo_model m;
  demo_eval *eval; /* each worker's evaluation phase's kept predictions */
} side;

/* A host pool made from the policy's "host" section, as the runtime makes
 * its pools (the configuration at creation, then the class table), and a
 * loop over it with the policy's adapt section, enabled or not. */
static void side_open(const aa_policy *p, bool loop_on, side *sd) {
  aa_pool_config cfg;
  aa_adapt_loop_config lcfg;
  memset(sd, 0, sizeof *sd);
  assert_int_equal(aa_backend_host_new(&sd->be), AA_OK);
  aa_pool_config_init(&cfg);
  assert_int_equal(aa_policy_pool_config(p, "host", &cfg, NULL, 0, NULL), AA_OK);
  cfg.name = "host";
  cfg.backend = sd->be;
  assert_int_equal(aa_pool_new(&cfg, &sd->pool), AA_OK);
  assert_int_equal(aa_policy_apply(p, "host", sd->pool), AA_OK);
  aa_pool_set_telemetry(sd->pool, true);
  aa_adapt_loop_config_init(&lcfg);
  lcfg.verify = aa_replay_adapt_verify;
  aa_policy_adapt_params(p, &lcfg.params);
  assert_true(lcfg.params.enabled); /* the default policy has the loop on */
  lcfg.params.enabled = loop_on;
  assert_int_equal(aa_adapt_loop_new(&lcfg, &sd->loop), AA_OK);
  assert_int_equal(aa_adapt_loop_add_pool(sd->loop, sd->pool), AA_OK);
  assert_int_equal(demo_model_alloc(sd->pool, &sd->m), AA_OK);
  sd->eval = calloc(WORKERS, sizeof *sd->eval);
  assert_non_null(sd->eval);
}

static void side_close(side *sd) {
  for (int w = 0; w < WORKERS; w++)
    demo_eval_end(sd->pool, &sd->eval[w]);
  free(sd->eval);
  demo_model_free(sd->pool, &sd->m);
  aa_adapt_loop_destroy(sd->loop);
  aa_pool_destroy(sd->pool);
  aa_backend_destroy(sd->be);
}

/* Runs the workload on both sides under policy p; returns the loop's
 * decisions on the enabled side, its counters in *got unless NULL. */
static uint64_t compare_on_off(const aa_policy *p, const char *what, aa_adapt_counters *got) {
  side on, off;
  aa_pool_stats *a = malloc(sizeof *a);
  aa_pool_stats *b = malloc(sizeof *b);
  aa_adapt_counters ca, cb;
  uint64_t rng[WORKERS];
  uint64_t steps = 0;
  uint64_t worst_excess = 0; /* reserved on - off at an interval's end, when above */

  assert_non_null(a);
  assert_non_null(b);
  side_open(p, true, &on);
  side_open(p, false, &off);
  for (int w = 0; w < WORKERS; w++)
    rng[w] = SEED + (uint64_t)w * 7919u; /* the demo's seeds */
  /* Both pools get the same requests in the same order, step by step. */
  for (int c = 0; c < CYCLES; c++) {
    for (int ph = 0; ph < DEMO_PHASES; ph++) {
      for (int s = 0; s < STEPS_PER_PHASE; s++) {
        for (int w = 0; w < WORKERS; w++) { /* the workers' steps, taking turns */
          int seq = demo_seq_len(demo_seq_schedule[ph], &rng[w]);
          if (demo_phase_eval[ph]) {
            assert_int_equal(demo_eval_step(on.pool, seq, &on.eval[w], NULL, NULL), 0);
            assert_int_equal(demo_eval_step(off.pool, seq, &off.eval[w], NULL, NULL), 0);
          } else {
            demo_eval_end(on.pool, &on.eval[w]); /* as the demo's workers do */
            demo_eval_end(off.pool, &off.eval[w]);
            assert_int_equal(demo_train_step(on.pool, seq, NULL, NULL), 0);
            assert_int_equal(demo_train_step(off.pool, seq, NULL, NULL), 0);
          }
        }
        if (++steps % STEPS_PER_INTERVAL != 0)
          continue;
        assert_true(aa_adapt_loop_step(on.loop) >= 0);
        assert_int_equal(aa_adapt_loop_step(off.loop), 0);
        assert_int_equal(aa_pool_stats_get(on.pool, a), AA_OK);
        assert_int_equal(aa_pool_stats_get(off.pool, b), AA_OK);
        if (a->bytes_reserved > b->bytes_reserved &&
            a->bytes_reserved - b->bytes_reserved > worst_excess)
          worst_excess = a->bytes_reserved - b->bytes_reserved;
      }
    }
  }
  assert_int_equal(aa_pool_stats_get(on.pool, a), AA_OK);
  assert_int_equal(aa_pool_stats_get(off.pool, b), AA_OK);
  aa_adapt_loop_counters(on.loop, &ca);
  aa_adapt_loop_counters(off.loop, &cb);
  print_message("%s\n", what);
  print_message("loop on:  peak in use %.1f MiB, peak reserved %.1f MiB, at the end %.1f MiB; "
                "%llu steps, %llu decisions (%llu added, %llu retired, %llu grows, %llu trims, "
                "%llu rejected by replay)\n",
                mib(a->peak_bytes_in_use), mib(a->peak_bytes_reserved), mib(a->bytes_reserved),
                (unsigned long long)ca.steps, (unsigned long long)ca.decisions,
                (unsigned long long)ca.classes_added, (unsigned long long)ca.classes_retired,
                (unsigned long long)ca.grows, (unsigned long long)ca.trims,
                (unsigned long long)ca.rejected);
  print_message("loop off: peak in use %.1f MiB, peak reserved %.1f MiB, at the end %.1f MiB; "
                "on above off at an interval's end by at most %.1f MiB\n",
                mib(b->peak_bytes_in_use), mib(b->peak_bytes_reserved), mib(b->bytes_reserved),
                mib(worst_excess));
  {
    aa_adapt_audit au[AA_ADAPT_AUDIT_MAX];
    size_t na = 0;
    assert_int_equal(aa_adapt_loop_audit(on.loop, on.pool, au, AA_ADAPT_AUDIT_MAX, &na), AA_OK);
    for (size_t k = 0; k < na; k++)
      print_message("  step %llu %s %llu B: %s; replay %.1f -> %.1f MiB; measured %.1f -> %.1f "
                    "MiB\n",
                    (unsigned long long)au[k].step, aa_adapt_kind_name(au[k].kind),
                    (unsigned long long)au[k].block_size,
                    au[k].result == AA_OK ? "applied" : "rejected",
                    mib(au[k].predicted_reserved_before), mib(au[k].predicted_reserved_after),
                    mib(au[k].measured_reserved_before), mib(au[k].measured_reserved_after));
  }
  /* the same requests reached both pools */
  assert_int_equal(a->allocs, b->allocs);
  /* the loop stepped every interval; off, it only watched */
  assert_int_equal(ca.steps, CYCLES * DEMO_PHASES * STEPS_PER_PHASE / STEPS_PER_INTERVAL);
  assert_int_equal(cb.decisions, 0);
  /* the claim */
  assert_true(a->peak_bytes_reserved <= b->peak_bytes_reserved);

  side_close(&on);
  side_close(&off);
  free(a);
  free(b);
  if (got != NULL)
    *got = ca;
  return ca.decisions;
}

/* The default policy: slabs up to 16 KiB, the rest on the expandable path.
 * The training phases give the loop nothing to change (their small sizes are
 * few beside the large activations); the evaluation phase's kept
 * predictions (10240 bytes, served from 16 KiB blocks) do: the loop adds the
 * exact class once its replay shows the gain, and retires it once the phase
 * is over, as in the demo's first 20 s. */
static void test_adapt_demo_reserved_loop_on_not_above_off(void **state) {
  aa_policy *p = NULL;
  (void)state;
  assert_int_equal(aa_policy_default(&p), AA_OK);
  aa_adapt_counters got;
  assert_true(compare_on_off(p, "default policy", &got) >= 2);
  assert_true(got.classes_added >= 1);   /* the predictions' exact class... */
  assert_true(got.classes_retired >= 1); /* ...retired once cold */
  aa_policy_free(p);
}

/* compare_on_off for the default policy with `patch` merged in. */
static uint64_t compare_patched(const char *patch, const char *what) {
  aa_policy *base = NULL;
  aa_policy *p = NULL;
  char err[256] = "";
  uint64_t decisions;
  assert_int_equal(aa_policy_default(&base), AA_OK);
  if (aa_policy_merge_patch(base, patch, strlen(patch), &p, err, sizeof err) != AA_OK)
    fail_msg("the policy patch: %s", err);
  decisions = compare_on_off(p, what, NULL);
  aa_policy_free(p);
  aa_policy_free(base);
  return decisions;
}

/* The default policy with the trim threshold at 32 MiB instead of 256, so
 * that the loop acts on this workload: it trims the cache between the
 * phases (and the next phase maps memory again). */
static void test_adapt_demo_reserved_loop_on_not_above_off_trimming(void **state) {
  (void)state;
  assert_true(compare_patched("{\"adapt\": {\"trim_threshold_bytes\": 33554432}}",
                              "default policy, trim threshold 32 MiB") > 0); /* it acted */
}

/* Four classes per doubling up to 1 MiB (the default before the current
 * one, with the expandable path): the demo's activations are small
 * requests, the loop adds and retires exact classes, each change checked by
 * its replay of the interval first. */
static void test_adapt_demo_reserved_loop_on_not_above_off_classes_to_1m(void **state) {
  (void)state;
  assert_true(compare_patched("{\"pools\": {\"host\": {\"max_small\": 1048576, "
                              "\"classes\": {\"min\": 512, \"per_doubling\": 4}}}}",
                              "classes to 1 MiB") > 0); /* it acted */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adapt_demo_reserved_loop_on_not_above_off),
      cmocka_unit_test(test_adapt_demo_reserved_loop_on_not_above_off_trimming),
      cmocka_unit_test(test_adapt_demo_reserved_loop_on_not_above_off_classes_to_1m),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
