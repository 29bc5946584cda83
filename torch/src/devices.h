/*
 * devices.h — the device layer under PyTorch: one object (aa__dl) that owns,
 * for every CUDA device, the pools the PyTorch integration serves tensors
 * from, and answers which of them holds a pointer. Both front ends are
 * adapters over it: the pluggable library (torch/pluggable/aa_torch.c) and
 * the native allocator (torch/native/, which adds what is PyTorch's alone:
 * MempoolId_t, beginAllocateToPool's streams and filters, checkpoints, the
 * stats base). docs/torch.md ("The device layer").
 *
 * Glossary, per device d (0 .. AA__DL_MAX_DEVICES - 1):
 *   device pool    the pool d's tensors come from (the runtime's
 *                  aa_runtime_pool(AA_BACKEND_DEVICE, d)), made on first use
 *                  and read without a lock afterwards
 *   region pool    a named region's pool on d (aa_runtime_region_pool),
 *                  made on first use, after d's device pool
 *   private pool   a pool of its own for a CUDA graph's capture or a
 *                  torch.cuda.MemPool, keyed by an opaque 128-bit id
 *                  (PyTorch's MempoolId_t, a pair of 64-bit integers); it
 *                  lives while its use count is above 0 or blocks of it are
 *                  live (aa__dl_private_destroy refuses it before)
 *   owner          the pool whose memory holds a pointer: a small table of
 *                  2 MiB address granules -> (device, pool) learned on
 *                  lookups and checked with aa_pool_owns (one page-map
 *                  lookup of core's), so that a free that names only the
 *                  pointer and the device (CUDAPluggableAllocator's free_fn)
 *                  finds its pool without trying every region's
 *
 * Where pools come from: a source (aa__dl_source). NULL is the default
 * runtime's (device and region pools of AA_BACKEND_DEVICE); tests pass
 * their own host pools. Private pools are made by the layer over the
 * device pool's backend with the device policy's slab and classes
 * (aa_runtime_pool_config), unless the source makes them.
 *
 * Ownership: the layer never owns a device or region pool: they are the
 * source's, and must outlive the layer (the runtime's live until
 * aa_runtime_shutdown; after it nothing here may be called with the
 * default layer). Private pools are the layer's: made by
 * aa__dl_private_ref, destroyed by aa__dl_private_destroy (or with the
 * layer, aa__dl_destroy); a record (aa__dl_private) and its pool are
 * invalid after either. The record's `user` pointer is the caller's: the
 * layer stores it and never reads through it.
 *
 * Threads: every call may be made from any thread. Device and region pools
 * are read with one acquire load once made; the owner lookup takes no lock
 * unless the device has private pools and the pointer is none of its
 * shared pools'. Private pools are kept per device under a mutex of the
 * layer's, which is never held while calling the source or core, except
 * aa_pool_owns on a private pool during a lookup. A caller that destroys a
 * private pool must know that no other thread still uses its record (the
 * native allocator does both under its device mutex).
 *
 * Errors: functions returning int give AA_OK or a negative aa_err and leave
 * nothing half done; out-parameters are cleared on failure.
 */
#ifndef AA_TORCH_DEVICES_H
#define AA_TORCH_DEVICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/core.h"
#include "adaptalloc/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AA__DL_MAX_DEVICES AA_MAX_DEVICES
#define AA__DL_MAX_REGIONS AA_RUNTIME_MAX_REGIONS

typedef struct aa__dl aa__dl;
typedef struct aa__dl_private aa__dl_private;

/* A private pool's id: PyTorch's MempoolId_t (first, second), opaque here. */
typedef struct aa__dl_id {
  uint64_t first;
  uint64_t second;
} aa__dl_id;

/* Where device and region pools come from. Each function must return the
 * same pool for the same arguments every time (or NULL when it has none),
 * and the pool must outlive the layer. private_pool (may be NULL: the
 * layer's own rule) makes a new pool for private pool `id` on `device`,
 * whose device pool is `main`; the layer owns *out from then on. */
typedef struct aa__dl_source {
  aa_pool *(*device_pool)(void *user, int device);
  aa_pool *(*region_pool)(void *user, int region, int device);
  int (*private_pool)(void *user, int device, aa_pool *main, aa__dl_id id, bool no_split,
                      aa_pool **out);
  void *user;
} aa__dl_source;

/* ------------------------------------------------------------ life cycle */

/* A layer over `src` (copied; NULL: the default runtime). *out is the
 * caller's: aa__dl_destroy. AA_EINVAL (NULL out, a source without
 * device_pool or region_pool), AA_ENOMEM; *out NULL then. */
int aa__dl_new(const aa__dl_source *src, aa__dl **out);
/* Destroys the private pools left and frees the layer; the source's pools
 * stay. No other call on the layer may be in flight. NULL: nothing. */
void aa__dl_destroy(aa__dl *dl);
/* The process's layer over the default runtime, made on the first call
 * (racing first calls get one layer); never destroyed. NULL only when it
 * cannot be made (out of memory); a later call tries again. */
aa__dl *aa__dl_default(void);

/* ------------------------------------------------------------ device and region pools */

/* Device's pool, made through the source on first use; NULL for a device
 * out of range or one the source has no pool for (tried again next call). */
aa_pool *aa__dl_pool(aa__dl *dl, int device);
/* The device's pool if made, else NULL; never makes one. */
aa_pool *aa__dl_pool_if_made(aa__dl *dl, int device);
/* Region `region`'s pool on the device (the device pool made first), made
 * on first use; NULL for arguments out of range or no pool. */
aa_pool *aa__dl_region_pool(aa__dl *dl, int device, int region);
/* Region's pool on the device if made, else NULL. */
aa_pool *aa__dl_region_pool_if_made(aa__dl *dl, int device, int region);

/* ------------------------------------------------------------ owners */

/* The pool of the device's (its own, its regions', its private pools')
 * whose memory holds ptr, or NULL; *device (may be NULL) gets the device,
 * -1 when none. Looks at every device with a pool. The pool stays valid
 * while the block at ptr is live. */
aa_pool *aa__dl_owner(aa__dl *dl, const void *ptr, int *device);
/* Where a free of ptr on `device` goes: when the device has only its own
 * pool, that pool without any lookup (as before regions; aa_free reports a
 * pointer that is not its own); else the owner among the device's pools,
 * or the device pool when none holds it. NULL when the device has no pool. */
aa_pool *aa__dl_free_pool(aa__dl *dl, int device, const void *ptr);

/* ------------------------------------------------------------ private pools */

/* Private pool `id` on the device: found, its use count raised by one; or
 * made (after the device pool) with use count 1 and no live block. *out
 * (cleared on failure) is valid until aa__dl_private_destroy. AA_EINVAL
 * (NULL, device out of range), AA_ENODEV (no device pool), the source's or
 * aa_pool_new's error, AA_ENOMEM. */
int aa__dl_private_ref(aa__dl *dl, int device, aa__dl_id id, aa__dl_private **out);
/* Private pool `id` on the device, or NULL; the use count is unchanged. */
aa__dl_private *aa__dl_private_find(aa__dl *dl, int device, aa__dl_id id);
/* Lowers the use count by one (never below 0) and returns what is left;
 * the pool stays until aa__dl_private_destroy. AA_EINVAL for NULL. */
int aa__dl_private_unref(aa__dl_private *pp);
/* The use count (0 for NULL). */
int aa__dl_private_use_count(const aa__dl_private *pp);
/* Counts blocks of the pool that became live (delta > 0) or stopped being
 * live (delta < 0), as the caller defines live. AA_EINVAL, nothing changed,
 * for NULL or a count that would fall below 0 (a block counted out twice). */
int aa__dl_private_blocks(aa__dl_private *pp, int delta);
/* The live blocks counted (0 for NULL). */
size_t aa__dl_private_live(const aa__dl_private *pp);
/* Whether the rule lets the pool go: use count 0 and no live block. */
bool aa__dl_private_idle(const aa__dl_private *pp);
/* Destroys an idle private pool: its record leaves the device's list and
 * its aa_pool is destroyed (memory of blocks not counted live, e.g. kept by
 * the caller for a checkpoint, goes with it). AA_EBUSY, nothing changed,
 * when it is not idle; AA_EINVAL for NULL or a record that is not one of
 * the layer's (destroyed already). */
int aa__dl_private_destroy(aa__dl *dl, aa__dl_private *pp);
/* Makes the pool again (no_split: every large block its own backend
 * allocation, MemPool(no_split=True)); the old pool is destroyed. AA_OK at
 * once when it already is so; AA_EBUSY, nothing changed, while blocks are
 * live; AA_EINVAL for NULL or a record not the layer's; a failure to make
 * the new pool leaves the old one. */
int aa__dl_private_remake(aa__dl *dl, aa__dl_private *pp, bool no_split);
/* The record's pool, id, device, no_split and the caller's pointer. */
aa_pool *aa__dl_private_pool(const aa__dl_private *pp);
aa__dl_id aa__dl_private_id(const aa__dl_private *pp);
int aa__dl_private_device(const aa__dl_private *pp);
bool aa__dl_private_no_split(const aa__dl_private *pp);
void *aa__dl_private_user(const aa__dl_private *pp);
void aa__dl_private_set_user(aa__dl_private *pp, void *user);
/* The device's private pools in id order (first, then second: a std::map
 * of MempoolId_t's order): writes up to cap records to
 * out (may be NULL when cap is 0) and returns how many there are. */
size_t aa__dl_private_list(aa__dl *dl, int device, aa__dl_private **out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* AA_TORCH_DEVICES_H */
