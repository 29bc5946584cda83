/*
 * managed_cap.c — the managed backend's safety cap, a pure function over the
 * figures of one reservation (managed_cap.h): whether it fits in the
 * device's free memory, and the refusal's message. Built with and without
 * CUDA; the backend (cuda/cuda_managed.c) gathers the figures.
 *
 * Entry points: aa__managed_cap_check; aa_managed_config_init and
 * aa_managed_location_name (plain values, the same with and without CUDA).
 */
#include <stdio.h>
#include <string.h>

#include "adaptalloc/common.h"
#include "adaptalloc/cuda.h"
#include "managed_cap.h"

int aa__managed_cap_check(const aa__managed_cap *c, char *msg, size_t cap) {
  uint64_t on_dev = c->held_on_device < c->held ? c->held_on_device : c->held;
  uint64_t need, room;
  bool fits;

  if (msg != NULL && cap > 0)
    msg[0] = '\0';
  if (c->allow_oversubscribe)
    return AA_OK;
  /* need = held + requested and room = device_free + on_dev, saturating:
   * a sum past 2^64 needs more than any device has */
  need = c->held + c->requested;
  if (need < c->held)
    need = UINT64_MAX;
  room = c->device_free + on_dev;
  if (room < c->device_free)
    room = UINT64_MAX;
  fits = need <= room && need != UINT64_MAX;
  if (fits)
    return AA_OK;
  if (msg != NULL && cap > 0)
    snprintf(msg, cap,
             "device %d: managed reservation of %llu bytes refused: the backend "
             "holds %llu bytes (%llu last prefetched to the device) and the device "
             "has %llu bytes free; allow_oversubscribe is false",
             c->device, (unsigned long long)c->requested, (unsigned long long)c->held,
             (unsigned long long)on_dev, (unsigned long long)c->device_free);
  return AA_ELIMIT;
}

const char *aa_managed_location_name(aa_managed_location loc) {
  switch (loc) {
  case AA_MANAGED_LOC_NONE:
    return "none";
  case AA_MANAGED_LOC_DEVICE:
    return "device";
  case AA_MANAGED_LOC_HOST:
    return "host";
  default:
    return "?";
  }
}

void aa_managed_config_init(aa_managed_config *cfg) {
  if (cfg == NULL)
    return;
  memset(cfg, 0, sizeof *cfg);
  cfg->version = AA_MANAGED_CONFIG_VERSION;
  cfg->size = (uint32_t)sizeof *cfg;
}
