/*
 * sampler.h — the size sampler, as the rest of core sees it: what telemetry
 * counts of each request's size. Per thread, an exact-size table, a
 * histogram and a heavy-hitter table (aa__smp, embedded first in each
 * aa__tcache as `smp`); per pool, the totals of threads that went (struct
 * aa__sampler, private to sampler.c: sampler_internal.h). Every other file
 * reaches both through the entry points below, and tools/check-layers.sh
 * refuses a file outside sampler.c that includes sampler_internal.h or
 * names a pool's `sampler`, a thread cache's `smp` or an aa__smp field.
 *
 * Included by core_internal.h (it uses its counters, aa__cadd). The hot
 * path's count (aa__smp_hit) is inline here.
 *
 * Ownership: aa__sampler_new makes pool->sampler, aa__sampler_destroy frees
 * it; a thread's part lives and dies with its thread cache
 * (aa__smp_fold_dead folds it into the pool's totals first).
 */
#ifndef AA_SAMPLER_H
#define AA_SAMPLER_H

#define AA__HH_SLOTS 256 /* per-thread heavy-hitter table (power of 2) */
#define AA__HH_SAMPLE 16 /* evicted single requests: 1 in 16 */
#define AA__SZ_BITS 12   /* per-thread exact-size table: 2^12 words */
#define AA__SZ_SLOTS (1u << AA__SZ_BITS)
/* sizes the exact-size table counts (larger ones go to the histogram and
 * the heavy hitters at once) */
#define AA__SMP_RUN_SIZE_MAX (((size_t)1 << 30) - 1)

/* A size word: (size << 32) | count (0 = none; sizes < 2^32), one slot of a
 * thread's exact-size table. aa__run_extends: w counts `size` with room for
 * one more, in one xor and one compare. aa__sz_hash: the slot of a size (its
 * pair is slot ^ 1). */
#define AA__RUN_MAX 0x7FFFFFFFu
static inline uint64_t aa__run_word(uint64_t size, uint64_t count) { return (size << 32) | count; }
static inline uint64_t aa__run_size(uint64_t w) { return w >> 32; }
static inline uint64_t aa__run_count(uint64_t w) { return w & 0xFFFFFFFFu; }
static inline bool aa__run_extends(uint64_t w, uint64_t size) {
  return (w ^ (size << 32)) < AA__RUN_MAX;
}
/* aa__run_extends(*c, size) for the owner of *c (see aa__cxor). */
static inline bool aa__run_extends_at(const _Atomic uint64_t *c, uint64_t size) {
  return aa__cxor(c, size << 32) < AA__RUN_MAX;
}
static inline size_t aa__sz_hash(size_t size) {
  return (size_t)(((uint32_t)size * 0x9E3779B1u) >> (32 - AA__SZ_BITS));
}

typedef struct aa__hh_slot {
  _Atomic uint64_t size, count;
} aa__hh_slot;

/* A thread's sampling state, the first member of its aa__tcache (`smp`):
 * runs, a size word per size seen, at aa__sz_hash(size) or its pair slot (a
 * size that finds both taken evicts the smaller count into bucket/hitters;
 * first, so that &runs[h] is one address mode from the cache); the
 * histogram of evicted counts and of sizes above AA__SMP_RUN_SIZE_MAX; the
 * heavy hitters; the sampling countdown of evicted single requests. Owner
 * writes, readers sum (bucket first, then runs). Its fields are the
 * sampler's alone. */
typedef struct aa__smp {
  _Atomic uint64_t runs[AA__SZ_SLOTS];
  _Atomic uint64_t bucket[AA_HIST_BUCKETS];
  aa__hh_slot hitters[AA__HH_SLOTS];
  uint32_t countdown;
} aa__smp;

/* A thread cache's sampling state (the cache's first member:
 * core_internal.h asserts it). */
static inline aa__smp *aa__smp_of(aa__tcache *tc) { return (aa__smp *)(void *)tc; }

/* The hot path's count of a request of `size` (<= AA__SMP_RUN_SIZE_MAX):
 * true when its first slot already counted it and was bumped; false when the
 * caller must call aa__smp_note (out of line). Owner only. */
static inline bool aa__smp_hit(aa__tcache *tc, size_t size) {
  _Atomic uint64_t *w = &aa__smp_of(tc)->runs[aa__sz_hash(size)];
  if (AA__LIKELY(aa__run_extends_at(w, size))) {
    aa__cadd(w, 1);
    return true;
  }
  return false;
}

/* sampler.c: counting. note: one request of `size` (<= AA__SMP_RUN_SIZE_MAX)
 * in the thread's table; count: one request of any size (tc NULL: into the
 * pool's totals); count_failed: a request that found no memory (histogram
 * only). */
void aa__smp_note(aa__tcache *tc, size_t size);
void aa__smp_count(aa_pool *pool, aa__tcache *tc, size_t size);
void aa__smp_count_failed(aa__tcache *tc, size_t size);

/* A new thread cache's part; one that goes: its counts into the pool's
 * totals (tc_mu held). */
void aa__smp_init(aa__tcache *tc);
void aa__smp_fold_dead(aa_pool *pool, aa__tcache *tc);

/* Life cycle (pool.c). AA_ENOMEM. */
int aa__sampler_new(aa_pool *pool);
void aa__sampler_destroy(aa_pool *pool);

/* The sampler's figures: the request histogram (every live thread's, its
 * size table folded in, and the totals of threads that went) and the
 * heaviest exact sizes (at most AA_HH_MAX into hh, their number in
 * *hh_count). Copies the tables under tc_mu alone and merges them with no
 * lock held. */
void aa__sampler_stats_get(aa_pool *pool, uint64_t *hist, aa_size_count *hh, uint32_t *hh_count);

#endif /* AA_SAMPLER_H */
