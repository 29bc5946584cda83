/*
 * adaptalloc/common.h — what every module shares: the export macro, the one
 * error enum, version numbers.
 *
 * Errors are negative ints from the X-macro below; AA_OK is 0. Codes are only
 * ever appended, never renumbered or removed.
 */
#ifndef ADAPTALLOC_COMMON_H
#define ADAPTALLOC_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define AA_EXTERN __attribute__((visibility("default")))
#else
#define AA_EXTERN
#endif

#define AA_VERSION_MAJOR 0
#define AA_VERSION_MINOR 1
#define AA_VERSION_PATCH 0

/* X(name, value, message). Append only. */
#define AA_ERRNO_MAP(X)                            \
  X(AA_OK, 0, "success")                           \
  X(AA_EINVAL, -1, "invalid argument")             \
  X(AA_ENOMEM, -2, "out of memory")                \
  X(AA_ENOTSUP, -3, "not supported in this build") \
  X(AA_EBUSY, -4, "resource busy")                 \
  X(AA_ENOENT, -5, "no such entry")                \
  X(AA_EEXIST, -6, "entry already exists")         \
  X(AA_EAGAIN, -7, "not ready yet, try again")     \
  X(AA_ERANGE, -8, "value out of range")           \
  X(AA_EIO, -9, "input/output error")              \
  X(AA_ELIMIT, -10, "configured limit reached")    \
  X(AA_EBACKEND, -11, "backend call failed")       \
  X(AA_EPARSE, -12, "malformed input")             \
  X(AA_ESTALE, -13, "version mismatch (stale)")    \
  X(AA_EPERM, -14, "permission denied")            \
  X(AA_ENODEV, -15, "no such device")              \
  X(AA_ECLOSED, -16, "object is shut down")        \
  X(AA_ECORRUPT, -17, "data is corrupt")           \
  X(AA_ECONFLICT, -18, "conflicts with the state in force")

typedef enum aa_err {
#define AA__ERR_ENUM(name, value, msg) name = (value),
  AA_ERRNO_MAP(AA__ERR_ENUM)
#undef AA__ERR_ENUM
} aa_err;

/* Returns a static, never-NULL message for an error code (unknown codes get
 * "unknown error"). */
AA_EXTERN const char *aa_strerror(int err);

/* Returns the symbolic name ("AA_EINVAL") of an error code, or "AA_UNKNOWN". */
AA_EXTERN const char *aa_errname(int err);

/* Monotonic clock in nanoseconds (CLOCK_MONOTONIC). */
AA_EXTERN uint64_t aa_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_COMMON_H */
