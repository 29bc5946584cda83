/*
 * sampler_internal.h — the size sampler's pool-level state (sampler.h is
 * the rest of core's way in). Only sampler.c includes it
 * (tools/check-layers.sh).
 */
#ifndef AA_SAMPLER_INTERNAL_H
#define AA_SAMPLER_INTERNAL_H

#include "core_internal.h"

#define AA__DEAD_HH_SLOTS (AA__HH_SLOTS * 4) /* the dead threads' merged table */

/* The totals of threads that went and of requests counted without a thread
 * cache: one per pool (pool->sampler). The histogram by atomics; the heavy
 * hitters under tc_mu. */
typedef struct aa__sampler {
  _Atomic uint64_t dead_hist[AA_HIST_BUCKETS];
  aa__hh_slot dead_hh[AA__DEAD_HH_SLOTS];
} aa__sampler;

#endif /* AA_SAMPLER_INTERNAL_H */
