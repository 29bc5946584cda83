/*
 * common.c — the error table (aa_strerror, aa_errname), the clock, and the
 * one entry of a pool walk (aa__walk_emit: the small and the large path's).
 */
#include <string.h>
#include <time.h>

#include "core_internal.h"

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

int aa__walk_emit(aa_walk_fn fn, void *user, uint32_t kind, uint32_t flags, uintptr_t addr,
                  size_t size, size_t req, size_t bs) {
  aa_walk_entry e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.flags = flags;
  e.address = addr;
  e.size = size;
  e.requested = req;
  e.block_size = bs;
  return fn(user, &e);
}
