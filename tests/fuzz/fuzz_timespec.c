/*
 * fuzz_timespec.c — libFuzzer target for the point-in-time parser
 * (util/src/timespec.c, adaptalloc-replay export --since/--until).
 *
 * Checks, beyond "no crash, no sanitizer report": an accepted time is in
 * 1970..9999; a refusal says why and leaves 0; an accepted time written back
 * as Unix milliseconds ("S.mmm") parses to the same value.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/common.h"
#include "adaptalloc/internal/timespec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int64_t ms = -1, back = -1;
  char why[160] = "";
  int rc = aa__parse_time((const char *)data, size, &ms, why, sizeof why);
  if (rc != AA_OK) {
    if (rc != AA_EINVAL || ms != 0 || why[0] == '\0')
      abort();
    return 0;
  }
  if (ms < 0 || ms > 253402300799999LL)
    abort();
  char text[64];
  int n = snprintf(text, sizeof text, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
  if (aa__parse_time(text, (size_t)n, &back, NULL, 0) != AA_OK || back != ms)
    abort();
  return 0;
}
