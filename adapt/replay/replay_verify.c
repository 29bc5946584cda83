/*
 * replay_verify.c — the policy loop's verifier (aa_adapt_verify_fn), the
 * check of a class-table change before it is applied: the small requests of the interval just measured (the two
 * snapshots' histogram and heavy hitters) are synthesised into a request
 * stream and replayed through the simulator under the current table and
 * the candidate one; the loop applies the change only when the candidate's
 * peak reserved is lower, or equal with fewer backend calls. The loop knows
 * nothing of the simulator: whoever makes a loop (the runtime, the replay's
 * --adapt) hands it this function (aa_adapt_loop_config.verify).
 * Entry point: aa_replay_adapt_verify.
 *
 * Runs in the loop's thread (or aa_adapt_loop_step's caller) with the
 * loop's lock held, never on an allocating thread: the simulator drives
 * pools of its own over a simulated backend.
 */
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/adapt.h"
#include "adaptalloc/replay.h"

static uint64_t delta(uint64_t cur, uint64_t prev) { return cur >= prev ? cur - prev : cur; }

typedef struct pair {
  aa_replay_sim *a, *b;
} pair;

static int pair_feed(void *user, const aa_replay_event *ev, size_t n) {
  pair *p = user;
  int rc = aa_replay_sim_feed(p->a, ev, n);
  if (rc == AA_OK)
    rc = aa_replay_sim_feed(p->b, ev, n);
  return rc;
}

/* The interval's small requests as a histogram with exact heavy hitters.
 * Returns the number of requests in it. */
static uint64_t window_hist(const aa_pool_stats *prev, const aa_pool_stats *cur,
                            uint64_t max_small, aa_replay_hist *h, aa_size_count *exact,
                            size_t cap) {
  uint64_t total = 0;
  memset(h, 0, sizeof *h);
  for (unsigned b = 0; b < AA_HIST_BUCKETS && aa_hist_bucket_lower(b) <= max_small; b++) {
    h->hist[b] = delta(cur->hist[b], prev != NULL ? prev->hist[b] : 0);
    total += h->hist[b];
  }
  uint32_t hn = cur->hh_count < AA_HH_MAX ? cur->hh_count : AA_HH_MAX;
  for (uint32_t j = 0; j < hn && h->nexact < cap; j++) {
    uint64_t before = 0, s = cur->hh[j].size;
    bool found = prev == NULL;
    if (s == 0 || s > max_small)
      continue;
    if (prev != NULL) {
      uint32_t pn = prev->hh_count < AA_HH_MAX ? prev->hh_count : AA_HH_MAX;
      for (uint32_t k = 0; k < pn; k++) {
        if (prev->hh[k].size == s) {
          before = prev->hh[k].count;
          found = true;
          break;
        }
      }
      if (!found && prev->hh_count < AA_HH_MAX)
        found = true; /* not in a list that kept every size: 0 before */
    }
    if (!found || cur->hh[j].count <= before)
      continue;
    exact[h->nexact].size = s;
    exact[h->nexact].count = cur->hh[j].count - before;
    h->nexact++;
  }
  h->exact = exact;
  return total;
}

int aa_replay_adapt_verify(void *user, const aa_pool_stats *prev, const aa_pool_stats *cur,
                           const aa_class_spec *base, size_t nbase, const aa_class_spec *cand,
                           size_t ncand, aa_adapt_prediction *before,
                           aa_adapt_prediction *after) {
  aa_replay_result rb, rc;
  aa_size_count exact[AA_HH_MAX];
  aa_replay_hist h;
  aa_replay_config cfg;
  aa_replay_synth_config sc;
  pair p = {NULL, NULL};
  uint64_t slab = AA_DEFAULT_SLAB_SIZE, live = 0, total;
  char err[AA_REPLAY_ERR_CAP];
  int r;

  (void)user;
  if (nbase == 0 || ncand == 0 || before == NULL || after == NULL)
    return AA_EINVAL;
  total = window_hist(prev, cur, base[nbase - 1].block_size, &h, exact, AA_HH_MAX);
  if (total == 0)
    return AA_ENOENT;
  for (uint32_t i = 0; i < cur->class_count && i < AA_MAX_CLASSES; i++) {
    const aa_class_stats *c = &cur->classes[i];
    if (c->slabs > 0 && c->bytes_reserved / c->slabs > 0)
      slab = c->bytes_reserved / c->slabs;
    live += c->blocks_in_use;
  }
  if (live < 64)
    live = 64;
  if (live > 65536)
    live = 65536;
  aa_replay_config_init(&cfg);
  cfg.pool.slab_size = (size_t)slab;
  cfg.pool.max_small = (size_t)base[nbase - 1].block_size;
  cfg.on_error = AA_REPLAY_COUNT;
  cfg.position_name = "event";
  cfg.classes = base;
  cfg.nclasses = nbase;
  r = aa_replay_sim_new(&cfg, &p.a, err, sizeof err);
  if (r == AA_OK) {
    cfg.classes = cand;
    cfg.nclasses = ncand;
    cfg.pool.max_small = (size_t)cand[ncand - 1].block_size;
    r = aa_replay_sim_new(&cfg, &p.b, err, sizeof err);
  }
  if (r == AA_OK) {
    aa_replay_synth_config_init(&sc);
    sc.seed = 1; /* the same interval gives the same prediction */
    sc.live_target = live;
    sc.events = live * 8 < 20000 ? 20000 : live * 8 > 200000 ? 200000
                                                             : live * 8;
    r = aa_replay_synth(&h, &sc, pair_feed, &p, err, sizeof err);
  }
  if (r == AA_OK) {
    aa_replay_sim_result(p.a, &rb);
    aa_replay_sim_result(p.b, &rc);
    before->peak_reserved = rb.peak_reserved;
    before->backend_calls = rb.backend_calls;
    after->peak_reserved = rc.peak_reserved;
    after->backend_calls = rc.backend_calls;
  }
  aa_replay_sim_free(p.a);
  aa_replay_sim_free(p.b);
  return r;
}
