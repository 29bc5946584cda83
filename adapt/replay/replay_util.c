/*
 * replay_util.c — small helpers shared by the replay sources: the rules
 * every event passes whatever its source (aa_replay_event_check), quoting
 * of bad input for messages, bad-input bookkeeping and the seeded PRNG
 * (xoshiro256** with a splitmix64 seeder).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "replay_internal.h"

int aa_replay_event_check(const aa_replay_event *ev, char *msg, size_t cap) {
  const char *what = NULL;
  uint64_t v = 0;

  if (ev->op != 'a' && ev->op != 'f' && ev->op != 'x' && ev->op != 'u') {
    if (msg != NULL && cap > 0)
      snprintf(msg, cap, "unknown operation '%c' (0x%02x): expected allocate, deallocate, "
                         "allocate failure or a stream use",
               ev->op >= 0x20 && ev->op < 0x7f ? ev->op : '?', (unsigned char)ev->op);
    return AA_EPARSE;
  }
  if (ev->size > AA_REPLAY_MAX_SIZE && ev->size <= (uint64_t)INT64_MAX) {
    if (msg != NULL && cap > 0)
      snprintf(msg, cap, "Size: %llu is over 2^48 (256 TiB), more than any backend could give: "
                         "not a request a trace holds",
               (unsigned long long)ev->size);
    return AA_EPARSE;
  }
  if (ev->size > (uint64_t)INT64_MAX) {
    what = "Size";
    v = ev->size;
  } else if (ev->time_ns > (uint64_t)INT64_MAX) {
    what = "Time";
    v = ev->time_ns;
  }
  if (what == NULL)
    return AA_OK;
  if (msg != NULL && cap > 0)
    snprintf(msg, cap, "%s: %llu (%lld as a signed number) is not below 2^63, the most a "
                       "trace holds",
             what, (unsigned long long)v, (long long)v);
  return AA_EPARSE;
}

void aa__replay_quote(const char *s, size_t n, char *out, size_t cap) {
  size_t i, lim = n < 40 ? n : 40;
  size_t o = 0;

  if (cap == 0)
    return;
  for (i = 0; i < lim && o + 1 < cap; i++) {
    unsigned char c = (unsigned char)s[i];
    out[o++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
  }
  if (n > lim && o + 4 < cap) {
    memcpy(out + o, "...", 3);
    o += 3;
  }
  out[o] = '\0';
}

void aa__replay_diag_note(aa_replay_diag *d, uint64_t line, const char *msg) {
  if (d == NULL || d->first_error[0] != '\0')
    return;
  d->first_line = line;
  snprintf(d->first_error, sizeof d->first_error, "%s", msg);
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void aa__rng_seed(aa__rng *r, uint64_t seed) {
  uint64_t x = seed;
  int i;

  for (i = 0; i < 4; i++)
    r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t aa__rng_next(aa__rng *r) {
  uint64_t *s = r->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;

  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

uint64_t aa__rng_below(aa__rng *r, uint64_t n) {
  /* Rejection sampling: draws below the largest multiple of n. */
  uint64_t lim = UINT64_MAX - (UINT64_MAX % n);
  uint64_t x;

  do {
    x = aa__rng_next(r);
  } while (x >= lim);
  return x % n;
}
