/*
 * common.c — the error table (aa_strerror, aa_errname) and the clock.
 */
#include <time.h>

#include "adaptalloc/common.h"

const char *aa_strerror(int err) {
  switch (err) {
#define AA__ERR_MSG(name, value, msg) \
  case (value):                       \
    return (msg);
    AA_ERRNO_MAP(AA__ERR_MSG)
#undef AA__ERR_MSG
  default:
    return "unknown error";
  }
}

const char *aa_errname(int err) {
  switch (err) {
#define AA__ERR_NAME(name, value, msg) \
  case (value):                        \
    return #name;
    AA_ERRNO_MAP(AA__ERR_NAME)
#undef AA__ERR_NAME
  default:
    return "AA_UNKNOWN";
  }
}

uint64_t aa_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
