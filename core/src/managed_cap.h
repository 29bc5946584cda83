/*
 * managed_cap.h — the managed backend's safety cap as a pure function (no
 * CUDA), so that its arithmetic and its message are tested without a GPU
 * (tests/test_core_managed.c). Never installed.
 */
#ifndef AA_MANAGED_CAP_H
#define AA_MANAGED_CAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The figures of one reservation, as the backend saw them. */
typedef struct aa__managed_cap {
  uint64_t requested;      /* bytes the reservation asks for */
  uint64_t held;           /* managed bytes the backend holds already */
  uint64_t held_on_device; /* of them, last prefetched to the device (already
                              counted out of device_free; clamped to held) */
  uint64_t device_free;    /* cudaMemGetInfo's free bytes now */
  int device;
  bool allow_oversubscribe;
} aa__managed_cap;

/* AA_OK when the reservation may go ahead: allow_oversubscribe, or
 *   held + requested <= device_free + min(held_on_device, held)
 * (computed without overflow). Otherwise AA_ELIMIT, and msg (cap bytes,
 * may be NULL/0) gets one line naming the figures. msg is "" on AA_OK. */
int aa__managed_cap_check(const aa__managed_cap *c, char *msg, size_t cap);

#endif /* AA_MANAGED_CAP_H */
