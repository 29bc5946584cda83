/*
 * devices.c — the device layer under PyTorch (devices.h): per device the
 * device pool and the region pools (atomic slots, made once through the
 * source), the private pools (a list under the device's mutex, each with its
 * use count and live blocks), and the owner table that finds a pointer's
 * pool. Entry points: aa__dl_default (the process's layer over the
 * runtime), aa__dl_free_pool (the pluggable library's free), aa__dl_owner,
 * aa__dl_private_ref / _destroy.
 *
 * The owner table: OWNER_SLOTS words, each a 2 MiB granule's tag and a
 * code naming one device or region pool (never a private one: those can be
 * destroyed under a reader). An entry is a hint written by lookups that had
 * to search; a reader trusts it only after aa_pool_owns(pool, ptr) (a page-
 * map lookup), so a stale or overwritten entry costs a search, never a
 * wrong answer: a live block's address is in one pool's memory at a time.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devices.h"

#define OWNER_BITS 13
#define OWNER_SLOTS ((size_t)1 << OWNER_BITS)
#define GRANULE_SHIFT 21
/* one code per shared pool: the device pool (0), region r (1 + r) */
#define CODES_PER_DEVICE (1 + AA__DL_MAX_REGIONS)

struct aa__dl_private {
  aa__dl_private *next;
  aa__dl_id id;
  int device;
  _Atomic(aa_pool *) pool;
  int use_count; /* under the device's mu, as are live and no_split */
  size_t live;
  bool no_split;
  _Atomic(void *) user;
  pthread_mutex_t *mu; /* its device's */
};

typedef struct dl_device {
  _Atomic(aa_pool *) pool;
  _Atomic(aa_pool *) region[AA__DL_MAX_REGIONS];
  atomic_int nregions;   /* region pools made */
  atomic_int nprivate;   /* private pools listed */
  atomic_int others;     /* nregions + nprivate: the free path's one load */
  pthread_mutex_t mu;    /* privs and their counts */
  aa__dl_private *privs; /* in id order, as a std::map of MempoolId_t */
} dl_device;

struct aa__dl {
  aa__dl_source src;
  dl_device dev[AA__DL_MAX_DEVICES];
  _Atomic uint64_t owners[OWNER_SLOTS];
};

/* ------------------------------------------------------------ the runtime's pools */

static aa_pool *rt_device_pool(void *user, int device) {
  (void)user;
  return aa_runtime_pool(AA_BACKEND_DEVICE, device);
}

static aa_pool *rt_region_pool(void *user, int region, int device) {
  (void)user;
  return aa_runtime_region_pool(region, AA_BACKEND_DEVICE, device);
}

/* A private pool over main's backend: the device policy's slab and class
 * ladder (a graph pool made with the core's defaults, classes to 1 MiB in
 * slabs of their own, took a third more device memory than PyTorch's graph
 * pool), but the cache path for large blocks: a capture's memory stays
 * mapped while the graph lives, and no limit of its own: what it reserves
 * counts against the device pool's (aa_pool_share_limit), as PyTorch's
 * set_per_process_memory_fraction caps its graph and MemPool pools too (a
 * MemPool(use_on_oom=True) then lends the device pool what it holds). */
static int make_private(int device, aa_pool *main, aa__dl_id id, bool no_split, aa_pool **out) {
  aa_pool_config cfg;
  char name[32];
  size_t slab;
  int rc;

  *out = NULL;
  aa_pool_config_init(&cfg);
  (void)aa_runtime_pool_config(AA_BACKEND_DEVICE, &cfg);
  /* no_split (MemPool(no_split=True)): every large block its own backend
   * allocation, never a part of a cached segment (PyTorch's meaning: NCCL's
   * symmetric memory registers each block as its own segment) */
  cfg.large_mode = no_split ? AA_LARGE_PASSTHROUGH : AA_LARGE_CACHE;
  cfg.large_stitch = 0; /* no stitched ranges in a private pool (a capture's pool) */
  cfg.large_plan = 0;   /* nor a learned plan: a capture replays fixed addresses */
  cfg.large_cache_bytes = 0;
  cfg.limit_bytes = 0;
  cfg.region = NULL;
  /* Small slabs: each class of a private pool holds one slab at least, and
   * in a graph's pool most classes hold a few blocks, so 2 MiB slabs left
   * 10 MiB of a BERT b1 capture's pool empty (48 MiB against PyTorch's 42);
   * 64 KiB slabs (at least four blocks of the largest class, never more
   * than the policy's slab) made it 42. A capture allocates once, so the
   * extra slab refills cost nothing that matters. */
  slab = (size_t)64 << 10;
  while (slab < cfg.max_small * 4 && slab < cfg.slab_size)
    slab *= 2;
  if (slab < cfg.slab_size)
    cfg.slab_size = slab;
  snprintf(name, sizeof name, "cuda%d.pool%llu.%llu", device, (unsigned long long)id.first,
           (unsigned long long)id.second);
  cfg.name = name;
  cfg.backend = aa_pool_backend(main);
  rc = aa_pool_new(&cfg, out);
  if (rc != AA_OK) { /* a policy the core refuses here: its defaults */
    aa_pool_config_init(&cfg);
    cfg.name = name;
    cfg.backend = aa_pool_backend(main);
    if (no_split)
      cfg.large_mode = AA_LARGE_PASSTHROUGH;
    rc = aa_pool_new(&cfg, out);
  }
  if (rc == AA_OK && (rc = aa_pool_share_limit(*out, main)) != AA_OK) {
    aa_pool_destroy(*out);
    *out = NULL;
  }
  return rc;
}

static int src_private(aa__dl *dl, int device, aa_pool *main, aa__dl_id id, bool no_split,
                       aa_pool **out) {
  int rc;
  *out = NULL;
  if (dl->src.private_pool == NULL)
    return make_private(device, main, id, no_split, out);
  rc = dl->src.private_pool(dl->src.user, device, main, id, no_split, out);
  if (rc == AA_OK && *out == NULL)
    rc = AA_ENOMEM; /* a source that says yes and gives nothing */
  if (rc != AA_OK)
    *out = NULL;
  return rc;
}

/* ------------------------------------------------------------ life cycle */

int aa__dl_new(const aa__dl_source *src, aa__dl **out) {
  aa__dl *dl;
  int i;

  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  if (src != NULL && (src->device_pool == NULL || src->region_pool == NULL))
    return AA_EINVAL;
  dl = calloc(1, sizeof *dl);
  if (dl == NULL)
    return AA_ENOMEM;
  if (src != NULL) {
    dl->src = *src;
  } else {
    dl->src.device_pool = rt_device_pool;
    dl->src.region_pool = rt_region_pool;
  }
  for (i = 0; i < AA__DL_MAX_DEVICES; i++) {
    if (pthread_mutex_init(&dl->dev[i].mu, NULL) != 0)
      goto fail;
  }
  *out = dl;
  return AA_OK;
fail:
  while (--i >= 0)
    pthread_mutex_destroy(&dl->dev[i].mu);
  free(dl);
  return AA_ENOMEM;
}

void aa__dl_destroy(aa__dl *dl) {
  if (dl == NULL)
    return;
  for (int i = 0; i < AA__DL_MAX_DEVICES; i++) {
    aa__dl_private *p = dl->dev[i].privs;
    while (p != NULL) {
      aa__dl_private *next = p->next;
      aa_pool_destroy(atomic_load_explicit(&p->pool, memory_order_relaxed));
      free(p);
      p = next;
    }
    pthread_mutex_destroy(&dl->dev[i].mu);
  }
  free(dl);
}

static _Atomic(aa__dl *) g_default;

aa__dl *aa__dl_default(void) {
  aa__dl *dl = atomic_load_explicit(&g_default, memory_order_acquire);
  aa__dl *none = NULL;
  if (dl != NULL)
    return dl;
  if (aa__dl_new(NULL, &dl) != AA_OK)
    return NULL;
  if (!atomic_compare_exchange_strong_explicit(&g_default, &none, dl, memory_order_acq_rel,
                                               memory_order_acquire)) {
    aa__dl_destroy(dl); /* another thread's came first */
    dl = none;
  }
  return dl;
}

/* ------------------------------------------------------------ device and region pools */

static bool device_ok(const aa__dl *dl, int device) {
  return dl != NULL && device >= 0 && device < AA__DL_MAX_DEVICES;
}

aa_pool *aa__dl_pool_if_made(aa__dl *dl, int device) {
  if (!device_ok(dl, device))
    return NULL;
  return atomic_load_explicit(&dl->dev[device].pool, memory_order_acquire);
}

aa_pool *aa__dl_pool(aa__dl *dl, int device) {
  aa_pool *p, *none = NULL;
  if (!device_ok(dl, device))
    return NULL;
  p = atomic_load_explicit(&dl->dev[device].pool, memory_order_acquire);
  if (p != NULL)
    return p;
  p = dl->src.device_pool(dl->src.user, device);
  if (p == NULL)
    return NULL;
  /* racing first uses got the same pool from the source (its contract):
   * the first stored stays */
  if (!atomic_compare_exchange_strong_explicit(&dl->dev[device].pool, &none, p,
                                               memory_order_acq_rel, memory_order_acquire))
    p = none;
  return p;
}

aa_pool *aa__dl_region_pool_if_made(aa__dl *dl, int device, int region) {
  if (!device_ok(dl, device) || region < 0 || region >= AA__DL_MAX_REGIONS)
    return NULL;
  return atomic_load_explicit(&dl->dev[device].region[region], memory_order_acquire);
}

aa_pool *aa__dl_region_pool(aa__dl *dl, int device, int region) {
  dl_device *d;
  aa_pool *p, *none = NULL;
  if (!device_ok(dl, device) || region < 0 || region >= AA__DL_MAX_REGIONS)
    return NULL;
  d = &dl->dev[device];
  p = atomic_load_explicit(&d->region[region], memory_order_acquire);
  if (p != NULL)
    return p;
  /* the device's own pool first: stats and the free path start from it */
  if (aa__dl_pool(dl, device) == NULL)
    return NULL;
  p = dl->src.region_pool(dl->src.user, region, device);
  if (p == NULL)
    return NULL;
  /* counted before the pool is published: a thread that sees it (and its
   * blocks) must find the free path looking at regions; a count raised for
   * a store that loses the race is taken back (a search more meanwhile) */
  atomic_fetch_add_explicit(&d->nregions, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&d->others, 1, memory_order_relaxed);
  if (!atomic_compare_exchange_strong_explicit(&d->region[region], &none, p, memory_order_acq_rel,
                                               memory_order_acquire)) {
    atomic_fetch_sub_explicit(&d->nregions, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&d->others, 1, memory_order_relaxed);
    p = none;
  }
  return p;
}

/* ------------------------------------------------------------ owners */

static size_t owner_slot(uintptr_t granule) {
  return (size_t)(((uint64_t)granule * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - OWNER_BITS));
}

/* The shared pool a code names (1-based), and its device. */
static aa_pool *code_pool(aa__dl *dl, unsigned code, int *device) {
  unsigned c = code - 1, dev = c / CODES_PER_DEVICE, k = c % CODES_PER_DEVICE;
  if (code == 0 || dev >= AA__DL_MAX_DEVICES)
    return NULL;
  *device = (int)dev;
  return k == 0 ? atomic_load_explicit(&dl->dev[dev].pool, memory_order_acquire)
                : atomic_load_explicit(&dl->dev[dev].region[k - 1], memory_order_acquire);
}

static void owner_learn(aa__dl *dl, uintptr_t granule, int device, int k) {
  uint64_t code = (uint64_t)device * CODES_PER_DEVICE + (uint64_t)k + 1;
  atomic_store_explicit(&dl->owners[owner_slot(granule)], ((uint64_t)granule << 16) | code,
                        memory_order_relaxed);
}

/* The table's pool for ptr when it holds ptr (device: any when -1). */
static aa_pool *owner_hint(aa__dl *dl, uintptr_t p, int device, int *found) {
  uintptr_t g = p >> GRANULE_SHIFT;
  uint64_t e = atomic_load_explicit(&dl->owners[owner_slot(g)], memory_order_relaxed);
  aa_pool *pool;
  int dev = -1;
  if (e == 0 || (e >> 16) != (uint64_t)g)
    return NULL;
  pool = code_pool(dl, (unsigned)(e & 0xffff), &dev);
  if (pool == NULL || (device >= 0 && dev != device) || !aa_pool_owns(pool, (const void *)p))
    return NULL;
  *found = dev;
  return pool;
}

/* The device's shared pool (its own or a region's) holding ptr, learned
 * into the table; NULL when none does. */
static aa_pool *owner_search_shared(aa__dl *dl, int device, uintptr_t p) {
  dl_device *d = &dl->dev[device];
  aa_pool *pool = atomic_load_explicit(&d->pool, memory_order_acquire);
  if (pool == NULL)
    return NULL;
  if (aa_pool_owns(pool, (const void *)p)) {
    owner_learn(dl, p >> GRANULE_SHIFT, device, 0);
    return pool;
  }
  if (atomic_load_explicit(&d->nregions, memory_order_acquire) == 0)
    return NULL;
  for (int r = 0; r < AA__DL_MAX_REGIONS; r++) {
    aa_pool *q = atomic_load_explicit(&d->region[r], memory_order_acquire);
    if (q != NULL && aa_pool_owns(q, (const void *)p)) {
      owner_learn(dl, p >> GRANULE_SHIFT, device, 1 + r);
      return q;
    }
  }
  return NULL;
}

/* The device's private pool holding ptr, or NULL (under its mutex). */
static aa_pool *owner_search_private(aa__dl *dl, int device, uintptr_t p) {
  dl_device *d = &dl->dev[device];
  aa_pool *found = NULL;
  if (atomic_load_explicit(&d->nprivate, memory_order_acquire) == 0)
    return NULL;
  pthread_mutex_lock(&d->mu);
  for (aa__dl_private *pp = d->privs; pp != NULL && found == NULL; pp = pp->next) {
    aa_pool *q = atomic_load_explicit(&pp->pool, memory_order_acquire);
    if (aa_pool_owns(q, (const void *)p))
      found = q;
  }
  pthread_mutex_unlock(&d->mu);
  return found;
}

aa_pool *aa__dl_owner(aa__dl *dl, const void *ptr, int *device) {
  uintptr_t p = (uintptr_t)ptr;
  aa_pool *pool = NULL;
  int dev = -1;

  if (dl == NULL || ptr == NULL)
    goto out;
  pool = owner_hint(dl, p, -1, &dev);
  if (pool != NULL)
    goto out;
  for (int i = 0; i < AA__DL_MAX_DEVICES; i++) {
    if (atomic_load_explicit(&dl->dev[i].pool, memory_order_acquire) == NULL)
      continue;
    pool = owner_search_shared(dl, i, p);
    if (pool == NULL)
      pool = owner_search_private(dl, i, p);
    if (pool != NULL) {
      dev = i;
      goto out;
    }
  }
out:
  if (device != NULL)
    *device = pool != NULL ? dev : -1;
  return pool;
}

aa_pool *aa__dl_free_pool(aa__dl *dl, int device, const void *ptr) {
  dl_device *d;
  aa_pool *main, *pool;
  int dev = -1;

  if (!device_ok(dl, device))
    return NULL;
  d = &dl->dev[device];
  main = atomic_load_explicit(&d->pool, memory_order_acquire);
  if (atomic_load_explicit(&d->others, memory_order_relaxed) == 0 || main == NULL || ptr == NULL)
    return main;
  /* the device pool's blocks first (most of them): one page-map lookup */
  if (aa_pool_owns(main, ptr))
    return main;
  pool = owner_hint(dl, (uintptr_t)ptr, device, &dev);
  if (pool == NULL)
    pool = owner_search_shared(dl, device, (uintptr_t)ptr);
  if (pool == NULL)
    pool = owner_search_private(dl, device, (uintptr_t)ptr);
  return pool != NULL ? pool : main; /* not ours: aa_free reports it */
}

/* ------------------------------------------------------------ private pools */

static bool id_eq(aa__dl_id a, aa__dl_id b) {
  return a.first == b.first && a.second == b.second;
}

static bool id_less(aa__dl_id a, aa__dl_id b) {
  return a.first < b.first || (a.first == b.first && a.second < b.second);
}

/* Under d->mu. */
static aa__dl_private *find_locked(dl_device *d, aa__dl_id id) {
  for (aa__dl_private *pp = d->privs; pp != NULL; pp = pp->next) {
    if (id_eq(pp->id, id))
      return pp;
  }
  return NULL;
}

int aa__dl_private_ref(aa__dl *dl, int device, aa__dl_id id, aa__dl_private **out) {
  dl_device *d;
  aa__dl_private *pp, *rec = NULL, **link;
  aa_pool *main, *pool = NULL;
  int rc;

  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  if (!device_ok(dl, device))
    return AA_EINVAL;
  d = &dl->dev[device];
  pthread_mutex_lock(&d->mu);
  pp = find_locked(d, id);
  if (pp != NULL)
    pp->use_count++;
  pthread_mutex_unlock(&d->mu);
  if (pp != NULL) {
    *out = pp;
    return AA_OK;
  }
  /* made without the mutex (the source and core take locks of their own) */
  main = aa__dl_pool(dl, device);
  if (main == NULL)
    return AA_ENODEV;
  rec = calloc(1, sizeof *rec);
  if (rec == NULL)
    return AA_ENOMEM;
  rc = src_private(dl, device, main, id, false, &pool);
  if (rc != AA_OK)
    goto fail;
  pthread_mutex_lock(&d->mu);
  pp = find_locked(d, id);
  if (pp != NULL) { /* made meanwhile by another thread: that one serves */
    pp->use_count++;
    pthread_mutex_unlock(&d->mu);
    aa_pool_destroy(pool);
    free(rec);
    *out = pp;
    return AA_OK;
  }
  rec->id = id;
  rec->device = device;
  atomic_init(&rec->pool, pool);
  rec->use_count = 1;
  rec->mu = &d->mu;
  link = &d->privs;
  while (*link != NULL && id_less((*link)->id, id))
    link = &(*link)->next;
  rec->next = *link;
  *link = rec;
  atomic_fetch_add_explicit(&d->nprivate, 1, memory_order_release);
  atomic_fetch_add_explicit(&d->others, 1, memory_order_release);
  pthread_mutex_unlock(&d->mu);
  *out = rec;
  return AA_OK;
fail:
  free(rec);
  return rc;
}

aa__dl_private *aa__dl_private_find(aa__dl *dl, int device, aa__dl_id id) {
  aa__dl_private *pp;
  if (!device_ok(dl, device))
    return NULL;
  pthread_mutex_lock(&dl->dev[device].mu);
  pp = find_locked(&dl->dev[device], id);
  pthread_mutex_unlock(&dl->dev[device].mu);
  return pp;
}

int aa__dl_private_unref(aa__dl_private *pp) {
  int n;
  if (pp == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(pp->mu);
  if (pp->use_count > 0)
    pp->use_count--;
  n = pp->use_count;
  pthread_mutex_unlock(pp->mu);
  return n;
}

int aa__dl_private_use_count(const aa__dl_private *pp) {
  int n;
  if (pp == NULL)
    return 0;
  pthread_mutex_lock(pp->mu);
  n = pp->use_count;
  pthread_mutex_unlock(pp->mu);
  return n;
}

int aa__dl_private_blocks(aa__dl_private *pp, int delta) {
  int rc = AA_OK;
  if (pp == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(pp->mu);
  if (delta < 0 && (size_t) - (long long)delta > pp->live)
    rc = AA_EINVAL;
  else if (delta < 0)
    pp->live -= (size_t) - (long long)delta;
  else
    pp->live += (size_t)delta;
  pthread_mutex_unlock(pp->mu);
  return rc;
}

size_t aa__dl_private_live(const aa__dl_private *pp) {
  size_t n;
  if (pp == NULL)
    return 0;
  pthread_mutex_lock(pp->mu);
  n = pp->live;
  pthread_mutex_unlock(pp->mu);
  return n;
}

static bool idle_locked(const aa__dl_private *pp) {
  return pp->use_count == 0 && pp->live == 0;
}

bool aa__dl_private_idle(const aa__dl_private *pp) {
  bool idle;
  if (pp == NULL)
    return false;
  pthread_mutex_lock(pp->mu);
  idle = idle_locked(pp);
  pthread_mutex_unlock(pp->mu);
  return idle;
}

/* The device whose list holds pp (compared by address, never read through:
 * a destroyed record is found nowhere), with its mutex held; -1 when none. */
static int lock_owner_device(aa__dl *dl, const aa__dl_private *pp) {
  for (int i = 0; i < AA__DL_MAX_DEVICES; i++) {
    dl_device *d = &dl->dev[i];
    if (atomic_load_explicit(&d->nprivate, memory_order_acquire) == 0)
      continue;
    pthread_mutex_lock(&d->mu);
    for (aa__dl_private *q = d->privs; q != NULL; q = q->next) {
      if (q == pp)
        return i;
    }
    pthread_mutex_unlock(&d->mu);
  }
  return -1;
}

int aa__dl_private_destroy(aa__dl *dl, aa__dl_private *pp) {
  dl_device *d;
  aa__dl_private **link;
  int dev;

  if (dl == NULL || pp == NULL)
    return AA_EINVAL;
  dev = lock_owner_device(dl, pp);
  if (dev < 0)
    return AA_EINVAL;
  d = &dl->dev[dev];
  if (!idle_locked(pp)) {
    pthread_mutex_unlock(&d->mu);
    return AA_EBUSY;
  }
  for (link = &d->privs; *link != pp; link = &(*link)->next)
    ;
  *link = pp->next;
  atomic_fetch_sub_explicit(&d->nprivate, 1, memory_order_release);
  atomic_fetch_sub_explicit(&d->others, 1, memory_order_release);
  pthread_mutex_unlock(&d->mu);
  /* out of the list: no lookup reaches its pool any more */
  aa_pool_destroy(atomic_load_explicit(&pp->pool, memory_order_relaxed));
  free(pp);
  return AA_OK;
}

int aa__dl_private_remake(aa__dl *dl, aa__dl_private *pp, bool no_split) {
  aa_pool *main, *fresh = NULL, *old;
  aa__dl_id id;
  int dev, rc;

  if (dl == NULL || pp == NULL)
    return AA_EINVAL;
  dev = lock_owner_device(dl, pp);
  if (dev < 0)
    return AA_EINVAL;
  if (pp->no_split == no_split) {
    pthread_mutex_unlock(&dl->dev[dev].mu);
    return AA_OK;
  }
  if (pp->live > 0) {
    pthread_mutex_unlock(&dl->dev[dev].mu);
    return AA_EBUSY;
  }
  id = pp->id;
  pthread_mutex_unlock(&dl->dev[dev].mu);
  main = aa__dl_pool(dl, dev);
  if (main == NULL)
    return AA_ENODEV;
  rc = src_private(dl, dev, main, id, no_split, &fresh);
  if (rc != AA_OK)
    return rc;
  pthread_mutex_lock(&dl->dev[dev].mu);
  if (pp->live > 0) { /* a block came meanwhile: the old pool stays */
    pthread_mutex_unlock(&dl->dev[dev].mu);
    aa_pool_destroy(fresh);
    return AA_EBUSY;
  }
  /* the lookups read the pool under this mutex: the old one is out of
   * their reach once it is unlocked */
  old = atomic_exchange_explicit(&pp->pool, fresh, memory_order_acq_rel);
  pp->no_split = no_split;
  pthread_mutex_unlock(&dl->dev[dev].mu);
  aa_pool_destroy(old);
  return AA_OK;
}

aa_pool *aa__dl_private_pool(const aa__dl_private *pp) {
  return pp != NULL ? atomic_load_explicit(&pp->pool, memory_order_acquire) : NULL;
}

aa__dl_id aa__dl_private_id(const aa__dl_private *pp) {
  aa__dl_id none = {0, 0};
  return pp != NULL ? pp->id : none;
}

int aa__dl_private_device(const aa__dl_private *pp) {
  return pp != NULL ? pp->device : -1;
}

bool aa__dl_private_no_split(const aa__dl_private *pp) {
  bool v;
  if (pp == NULL)
    return false;
  pthread_mutex_lock(pp->mu);
  v = pp->no_split;
  pthread_mutex_unlock(pp->mu);
  return v;
}

void *aa__dl_private_user(const aa__dl_private *pp) {
  return pp != NULL ? atomic_load_explicit(&pp->user, memory_order_acquire) : NULL;
}

void aa__dl_private_set_user(aa__dl_private *pp, void *user) {
  if (pp != NULL)
    atomic_store_explicit(&pp->user, user, memory_order_release);
}

size_t aa__dl_private_list(aa__dl *dl, int device, aa__dl_private **out, size_t cap) {
  size_t n = 0;
  if (!device_ok(dl, device) || (out == NULL && cap > 0))
    return 0;
  pthread_mutex_lock(&dl->dev[device].mu);
  for (aa__dl_private *pp = dl->dev[device].privs; pp != NULL; pp = pp->next) {
    if (n < cap)
      out[n] = pp;
    n++;
  }
  pthread_mutex_unlock(&dl->dev[device].mu);
  return n;
}
