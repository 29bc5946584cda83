/*
 * loop_internal.h — what the policy loop's files share privately.
 */
#ifndef ADAPTALLOC_LOOP_INTERNAL_H
#define ADAPTALLOC_LOOP_INTERNAL_H

#include "adaptalloc/adapt.h"
#include "adaptalloc/replay.h"

/* Replays the small requests of the interval between prev and cur
 * (synthesised from its histogram and heavy hitters) under the class table
 * base and under cand, into *rb and *rc. AA_ENOENT when the interval had no
 * small requests; other errors from the simulator. loop_verify.c. */
int aa__adapt_predict(const aa_pool_stats *prev, const aa_pool_stats *cur,
                      const aa_class_spec *base, size_t nbase, const aa_class_spec *cand,
                      size_t ncand, aa_replay_result *rb, aa_replay_result *rc);

#endif
