/*
 * test_replay_synth.c — histogram files (JSON and CSV, with their errors)
 * and the request-stream synthesiser: determinism per seed, sizes drawn
 * from the right places, a consistent alloc/free stream, the live set.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/replay.h"

typedef struct evvec {
  aa_replay_event *v;
  size_t n, cap;
} evvec;

static int vec_sink(void *user, const aa_replay_event *ev, size_t n) {
  evvec *e = user;

  if (e->n + n > e->cap) {
    size_t ncap = (e->n + n) * 2;
    aa_replay_event *nv = realloc(e->v, ncap * sizeof *nv);
    if (nv == NULL)
      return AA_ENOMEM;
    e->v = nv;
    e->cap = ncap;
  }
  memcpy(e->v + e->n, ev, n * sizeof *ev);
  e->n += n;
  return AA_OK;
}

static int hparse(const char *text, aa_replay_hist *h, char *err) {
  return aa_replay_hist_parse(text, strlen(text), h, err, AA_REPLAY_ERR_CAP);
}

static void test_replay_synth_hist_json(void **state) {
  aa_replay_hist h;
  char err[AA_REPLAY_ERR_CAP];
  (void)state;

  assert_int_equal(hparse("{\"hist\": [0, 0, 5], \"sizes\": [{\"size\": 1000, "
                          "\"count\": 3}, {\"size\": 1000, \"count\": 2}]}",
                          &h, err),
                   AA_OK);
  assert_int_equal(h.hist[2], 5);
  assert_int_equal(h.hist[0], 0);
  assert_int_equal(h.nexact, 1);
  assert_int_equal(h.exact[0].size, 1000);
  assert_int_equal(h.exact[0].count, 5);
  aa_replay_hist_clear(&h);

  /* Core stats shape: heavy hitters under "hh"; pools summed. */
  assert_int_equal(hparse("{\"pools\": {\"device\": {\"hist\": [1], \"hh\": []},"
                          " \"host\": {\"hist\": [2, 7]}}}",
                          &h, err),
                   AA_OK);
  assert_int_equal(h.hist[0], 3);
  assert_int_equal(h.hist[1], 7);
  aa_replay_hist_clear(&h);

  assert_int_equal(hparse("{\"hist\": \"x\"}", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "hist: expected an array"));
  assert_int_equal(hparse("{\"hist\": [1, -2]}", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "hist[1]: expected a non-negative integer"));
  assert_int_equal(hparse("{\"hist\": [1.5]}", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "hist[0]"));
  assert_int_equal(hparse("{\"sizes\": [{\"size\": 1, \"count\": 1}, {\"size\":"
                          " 2}]}",
                          &h, err),
                   AA_EPARSE);
  assert_non_null(strstr(err, "sizes[1]: expected"));
  /* numbers are quoted as the file wrote them, not as a double reads them */
  assert_int_equal(hparse("{\"hist\": [1, 12345678901234567890]}", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "hist[1]: expected a non-negative integer count below "
                              "2^53, got 12345678901234567890"));
  assert_int_equal(hparse("{\"sizes\": [{\"size\": 4096, \"count\": 1.5e400}]}", &h, err),
                   AA_EPARSE);
  assert_non_null(strstr(err, "got 1.5e400"));
  assert_int_equal(hparse("{\"hist\": [-12345678901234567890123]}", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "the integer -12345678901234567890123 at line 1"));
  {
    /* over 100 bytes: first 40 and last 8 digits and the length, so the
     * message fits AA_REPLAY_ERR_CAP (docs/security.md) */
    char doc[1100];
    int k = sprintf(doc, "{\"hist\": [");
    for (int i = 0; i < 1000; i++)
      doc[k++] = (char)('1' + i % 9);
    strcpy(doc + k, "]}");
    assert_int_equal(hparse(doc, &h, err), AA_EPARSE);
    assert_non_null(strstr(err, "the integer 1234567891234567891234567891234567891234"
                                "...34567891 (1000 characters) at line 1"));
  }
  assert_int_equal(hparse("{\"other\": 1}", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "no \"hist\" or \"sizes\""));
  assert_int_equal(hparse("{\"hist\": [1,", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "malformed JSON"));
  assert_null(h.exact);
}

static void test_replay_synth_hist_csv(void **state) {
  aa_replay_hist h;
  char err[AA_REPLAY_ERR_CAP];
  (void)state;

  assert_int_equal(hparse("size,count\n1000,3\r\n# note\n\n4096,5\n", &h, err),
                   AA_OK);
  assert_int_equal(h.nexact, 2);
  assert_int_equal(h.hist[aa_hist_bucket(1000)], 3);
  assert_int_equal(h.hist[aa_hist_bucket(4096)], 5);
  aa_replay_hist_clear(&h);

  assert_int_equal(hparse("bucket,count\n10,4\n11,0\n", &h, err), AA_OK);
  assert_int_equal(h.nexact, 0);
  assert_int_equal(h.hist[10], 4);
  aa_replay_hist_clear(&h);

  assert_int_equal(hparse("size,count\n1000,3\n1000;3\n", &h, err), AA_EPARSE);
  assert_string_equal(err, "histogram line 3: expected `size,count` with "
                           "decimal integers");
  assert_int_equal(hparse("bucket,count\n192,1\n", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "line 2: bucket 192 is not below 192"));
  assert_int_equal(hparse("1,2,3\n", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "line 1"));
  assert_int_equal(hparse("size,count\n", &h, err), AA_EPARSE);
  assert_non_null(strstr(err, "no data lines"));
}

static void synth(const aa_replay_hist *h, uint64_t seed, uint64_t events,
                  uint64_t live, bool drain, evvec *out) {
  aa_replay_synth_config cfg;
  char err[AA_REPLAY_ERR_CAP];

  aa_replay_synth_config_init(&cfg);
  cfg.seed = seed;
  cfg.events = events;
  cfg.live_target = live;
  cfg.free_at_end = drain;
  memset(out, 0, sizeof *out);
  assert_int_equal(aa_replay_synth(h, &cfg, vec_sink, out, err, sizeof err),
                   AA_OK);
}

static void test_replay_synth_deterministic(void **state) {
  aa_replay_hist h;
  evvec a, b, c;
  char err[AA_REPLAY_ERR_CAP];
  size_t i, same = 0;
  (void)state;

  assert_int_equal(hparse("{\"hist\": [0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,"
                          "0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,9,9,9,9],"
                          " \"sizes\": [{\"size\": 3000, \"count\": 50}]}",
                          &h, err),
                   AA_OK);
  synth(&h, 42, 20000, 100, false, &a);
  synth(&h, 42, 20000, 100, false, &b);
  synth(&h, 43, 20000, 100, false, &c);
  assert_int_equal(a.n, 20000);
  assert_int_equal(b.n, 20000);
  assert_memory_equal(a.v, b.v, a.n * sizeof *a.v);
  for (i = 0; i < a.n && i < c.n; i++)
    same += a.v[i].op == c.v[i].op && a.v[i].size == c.v[i].size;
  assert_true(same < a.n / 2 + a.n / 4); /* another seed, another stream */
  free(a.v);
  free(b.v);
  free(c.v);
  aa_replay_hist_clear(&h);
}

static void test_replay_synth_sizes(void **state) {
  aa_replay_hist h;
  evvec a;
  unsigned bk = 60;
  uint64_t lo = aa_hist_bucket_lower(bk), hi = aa_hist_bucket_lower(bk + 1);
  size_t i, exact = 0, inbucket = 0, allocs = 0;
  (void)state;

  memset(&h, 0, sizeof h);
  h.hist[bk] = 100;
  h.exact = malloc(sizeof *h.exact);
  assert_non_null(h.exact);
  h.exact[0].size = 777;
  h.exact[0].count = 100;
  h.nexact = 1;
  h.hist[aa_hist_bucket(777)] = 100; /* exact counts are part of the buckets */
  synth(&h, 7, 10000, 50, false, &a);
  for (i = 0; i < a.n; i++) {
    if (a.v[i].op != 'a')
      continue;
    allocs++;
    if (a.v[i].size == 777)
      exact++;
    else if (a.v[i].size >= lo && a.v[i].size < hi)
      inbucket++;
    else
      fail_msg("size %llu drawn from nowhere", (unsigned long long)a.v[i].size);
  }
  /* Equal weights: about half each (deterministic for the seed). */
  assert_true(exact > allocs / 3 && inbucket > allocs / 3);
  free(a.v);
  aa_replay_hist_clear(&h);
}

static void test_replay_synth_stream_consistent(void **state) {
  aa_replay_hist h;
  evvec a;
  uint64_t *live;
  size_t nlive = 0, i, allocs = 0, frees = 0, maxlive = 0;
  double sum_live = 0;
  (void)state;

  memset(&h, 0, sizeof h);
  h.hist[40] = 1;
  h.hist[80] = 3;
  synth(&h, 99, 50000, 200, true, &a);
  live = malloc(a.n * sizeof *live);
  assert_non_null(live);
  for (i = 0; i < a.n; i++) {
    assert_int_equal(a.v[i].line, i + 1);
    assert_int_equal(a.v[i].time_ns, i * 1000);
    if (a.v[i].op == 'a') {
      live[nlive++] = a.v[i].ptr;
      allocs++;
    } else {
      size_t k;
      assert_int_equal(a.v[i].op, 'f');
      for (k = 0; k < nlive && live[k] != a.v[i].ptr; k++)
        ;
      assert_true(k < nlive); /* frees only what is live */
      live[k] = live[--nlive];
      frees++;
    }
    if (nlive > maxlive)
      maxlive = nlive;
    if (i < 50000)
      sum_live += (double)nlive;
  }
  assert_true(a.n > 50000); /* the drain added events */
  assert_int_equal(nlive, 0);
  assert_int_equal(allocs, frees);
  assert_true(maxlive <= 400);
  /* The steady state hovers around the target. */
  assert_true(sum_live / 50000.0 > 100.0 && sum_live / 50000.0 < 300.0);
  free(live);
  free(a.v);
}

static void test_replay_synth_errors(void **state) {
  aa_replay_hist h;
  aa_replay_synth_config cfg;
  evvec a;
  char err[AA_REPLAY_ERR_CAP];
  (void)state;

  memset(&h, 0, sizeof h);
  memset(&a, 0, sizeof a);
  aa_replay_synth_config_init(&cfg);
  assert_int_equal(aa_replay_synth(&h, &cfg, vec_sink, &a, err, sizeof err),
                   AA_EINVAL);
  assert_non_null(strstr(err, "empty"));
  h.hist[3] = 1;
  cfg.events = 0;
  assert_int_equal(aa_replay_synth(&h, &cfg, vec_sink, &a, err, sizeof err),
                   AA_EINVAL);
  assert_int_equal(a.n, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_synth_hist_json),
      cmocka_unit_test(test_replay_synth_hist_csv),
      cmocka_unit_test(test_replay_synth_deterministic),
      cmocka_unit_test(test_replay_synth_sizes),
      cmocka_unit_test(test_replay_synth_stream_consistent),
      cmocka_unit_test(test_replay_synth_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
