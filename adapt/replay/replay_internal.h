/*
 * replay_internal.h — what the replay sources (adapt/replay/) share
 * privately: bad-input quoting and bookkeeping (errors are formatted by
 * core's aa__errf), the 64-bit PRNG, and the pointer map used by the simulator.
 *
 * Glossary: an event's `ptr` is the recorded pointer (an id only); the
 * simulator maps it to the block the real core handed out for it.
 */
#ifndef ADAPTALLOC_REPLAY_INTERNAL_H
#define ADAPTALLOC_REPLAY_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "adaptalloc/replay.h"
#include "adaptalloc/internal/util.h" /* util/: aa__errf */

#if defined(__GNUC__) || defined(__clang__)
#define AA__PRINTF(a, b) __attribute__((format(printf, a, b)))
#define AA__LIKELY(x) __builtin_expect(!!(x), 1)
#define AA__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define AA__PRINTF(a, b)
#define AA__LIKELY(x) (x)
#define AA__UNLIKELY(x) (x)
#endif

/* Copies at most 40 bytes of [s, s+n) into out (cap >= 48) for quoting in a
 * message, with non-printable bytes shown as '?' and "..." when cut. */
void aa__replay_quote(const char *s, size_t n, char *out, size_t cap);

/* Records a bad-input problem in diag (first one's message kept). */
void aa__replay_diag_note(aa_replay_diag *d, uint64_t line, const char *msg);

/* xoshiro256** seeded through splitmix64: deterministic per seed. */
typedef struct aa__rng {
  uint64_t s[4];
} aa__rng;
void aa__rng_seed(aa__rng *r, uint64_t seed);
uint64_t aa__rng_next(aa__rng *r);
/* Uniform in [0, n) (n > 0), without modulo bias. */
uint64_t aa__rng_below(aa__rng *r, uint64_t n);

#endif /* ADAPTALLOC_REPLAY_INTERNAL_H */
