/*
 * timespec.h — the one parser of a point in time given on a command line
 * (adaptalloc-replay export --since/--until): Unix seconds ("1796223937",
 * "1796223937.25") or an ISO 8601 date and time in UTC or with an offset
 * ("2026-12-06T10:00:00Z", "2026-12-06 10:00:00.5+01:00"; no zone: UTC).
 * util/src/timespec.c; fuzzed by tests/fuzz/fuzz_timespec.c.
 */
#ifndef AA_INTERNAL_TIMESPEC_H
#define AA_INTERNAL_TIMESPEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parses s (len bytes, need not be NUL-terminated) into milliseconds since
 * 1970-01-01 UTC. Returns AA_OK, or AA_EINVAL with why (cap bytes, may be
 * NULL) saying what is wrong; *unix_ms is 0 then. Years 1970..9999; no
 * leap seconds (second 60 is refused). */
int aa__parse_time(const char *s, size_t len, int64_t *unix_ms, char *why, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
