/*
 * test_torch_devices.c — the device layer under PyTorch (torch/src/devices.c)
 * on host pools: device and region pools made once through the source, a
 * pointer's owner (device, region and private pools, the learned table and
 * its stale entries, foreign pointers, the free path's shortcut), private
 * pools (use counts, live blocks, the rule that keeps a pool, remaking it
 * no_split, id order), misuse (NULL, out of range, a record destroyed
 * twice, a block counted out twice), threads racing on first use, frees and
 * use counts, and an allocation-failure sweep over every malloc/calloc.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "torch_test.h" /* torch: devices.h */

/* ------------------------------------------------------------ failing malloc */

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t sz);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t sz);

static _Atomic bool g_armed;       /* count (and maybe fail) the calls made now */
static _Atomic uint64_t g_calls;   /* calls counted since armed */
static _Atomic uint64_t g_fail_at; /* 0: none; else the call number that fails */
static _Atomic uint64_t g_failed;  /* calls failed since armed */

static bool fail_now(void) {
  if (!atomic_load(&g_armed))
    return false;
  uint64_t n = atomic_fetch_add(&g_calls, 1) + 1;
  if (n == atomic_load(&g_fail_at)) {
    atomic_fetch_add(&g_failed, 1);
    return true;
  }
  return false;
}

void *__wrap_malloc(size_t n) { return fail_now() ? NULL : __real_malloc(n); }

void *__wrap_calloc(size_t n, size_t sz) { return fail_now() ? NULL : __real_calloc(n, sz); }

static void arm(uint64_t at) {
  atomic_store(&g_calls, 0);
  atomic_store(&g_failed, 0);
  atomic_store(&g_fail_at, at);
  atomic_store(&g_armed, true);
}

static void disarm(void) { atomic_store(&g_armed, false); }

/* ------------------------------------------------------------ a host source */

#define NDEV 3
#define NREG 4
#define SMALL 1000
#define LARGE ((size_t)8 << 20)

typedef struct src {
  aa_backend *b;
  aa_pool *dev[NDEV];
  aa_pool *reg[NDEV][NREG];
  atomic_int dev_calls, reg_calls, priv_calls;
  atomic_int no_device;  /* device that has no pool (-1: none) */
  atomic_int priv_rc;    /* what private_pool returns; AA_OK: a pool */
  atomic_bool priv_null; /* ... and whether it gives nothing */
  pthread_mutex_t mu;
} src;

static aa_pool *new_pool(aa_backend *b, const char *name) {
  aa_pool_config cfg;
  aa_pool *p = NULL;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = name;
  return aa_pool_new(&cfg, &p) == AA_OK ? p : NULL;
}

static aa_pool *src_device(void *user, int device) {
  src *s = user;
  aa_pool *p = NULL;
  atomic_fetch_add(&s->dev_calls, 1);
  if (device < 0 || device >= NDEV || device == atomic_load(&s->no_device))
    return NULL;
  pthread_mutex_lock(&s->mu);
  if (s->dev[device] == NULL)
    s->dev[device] = new_pool(s->b, "device");
  p = s->dev[device];
  pthread_mutex_unlock(&s->mu);
  return p;
}

static aa_pool *src_region(void *user, int region, int device) {
  src *s = user;
  aa_pool *p = NULL;
  atomic_fetch_add(&s->reg_calls, 1);
  if (device < 0 || device >= NDEV || region < 0 || region >= NREG)
    return NULL;
  pthread_mutex_lock(&s->mu);
  if (s->reg[device][region] == NULL)
    s->reg[device][region] = new_pool(s->b, "region");
  p = s->reg[device][region];
  pthread_mutex_unlock(&s->mu);
  return p;
}

static int src_private(void *user, int device, aa_pool *main, aa__dl_id id, bool no_split,
                       aa_pool **out) {
  src *s = user;
  aa_pool_config cfg;
  int rc = atomic_load(&s->priv_rc);
  (void)device;
  (void)id;
  atomic_fetch_add(&s->priv_calls, 1);
  *out = NULL;
  if (rc != AA_OK || atomic_load(&s->priv_null))
    return rc;
  aa_pool_config_init(&cfg);
  cfg.backend = aa_pool_backend(main);
  cfg.name = no_split ? "private-nosplit" : "private";
  if (no_split)
    cfg.large_mode = AA_LARGE_PASSTHROUGH;
  return aa_pool_new(&cfg, out);
}

typedef struct fx {
  src s;
  aa__dl_source source;
  aa__dl *dl;
} fx;

static int setup_with(void **state, bool own_private) {
  fx *f = calloc(1, sizeof *f);
  assert_non_null(f);
  assert_int_equal(aa_backend_host_new(&f->s.b), AA_OK);
  atomic_init(&f->s.no_device, -1);
  atomic_init(&f->s.priv_rc, AA_OK);
  pthread_mutex_init(&f->s.mu, NULL);
  f->source.device_pool = src_device;
  f->source.region_pool = src_region;
  f->source.private_pool = own_private ? src_private : NULL;
  f->source.user = &f->s;
  assert_int_equal(aa__dl_new(&f->source, &f->dl), AA_OK);
  *state = f;
  return 0;
}

static int setup(void **state) { return setup_with(state, true); }
static int setup_default_private(void **state) { return setup_with(state, false); }

static int teardown(void **state) {
  fx *f = *state;
  aa__dl_destroy(f->dl); /* its private pools */
  for (int d = 0; d < NDEV; d++) {
    for (int r = 0; r < NREG; r++)
      aa_pool_destroy(f->s.reg[d][r]);
    aa_pool_destroy(f->s.dev[d]);
  }
  aa_backend_destroy(f->s.b);
  pthread_mutex_destroy(&f->s.mu);
  free(f);
  return 0;
}

static aa__dl_id id_of(uint64_t a, uint64_t b) {
  aa__dl_id id = {a, b};
  return id;
}

/* ------------------------------------------------------------ device and region pools */

static void test_torch_devices_pools_made_once(void **state) {
  fx *f = *state;
  assert_null(aa__dl_pool_if_made(f->dl, 0));
  aa_pool *p0 = aa__dl_pool(f->dl, 0);
  assert_non_null(p0);
  assert_ptr_equal(aa__dl_pool(f->dl, 0), p0);
  assert_ptr_equal(aa__dl_pool_if_made(f->dl, 0), p0);
  assert_int_equal(atomic_load(&f->s.dev_calls), 1); /* once, then read */
  aa_pool *p1 = aa__dl_pool(f->dl, 1);
  assert_non_null(p1);
  assert_ptr_not_equal(p0, p1);

  /* regions: the device pool first, one pool per (device, region) */
  assert_null(aa__dl_region_pool_if_made(f->dl, 2, 1));
  aa_pool *r21 = aa__dl_region_pool(f->dl, 2, 1);
  assert_non_null(r21);
  assert_non_null(aa__dl_pool_if_made(f->dl, 2));
  assert_ptr_equal(aa__dl_region_pool(f->dl, 2, 1), r21);
  assert_ptr_equal(aa__dl_region_pool_if_made(f->dl, 2, 1), r21);
  assert_ptr_not_equal(aa__dl_region_pool(f->dl, 0, 1), r21);
  assert_int_equal(atomic_load(&f->s.reg_calls), 2);
}

static void test_torch_devices_pools_refused(void **state) {
  fx *f = *state;
  /* out of range: no pool, the source not asked */
  assert_null(aa__dl_pool(f->dl, -1));
  assert_null(aa__dl_pool(f->dl, AA__DL_MAX_DEVICES));
  assert_null(aa__dl_pool_if_made(f->dl, AA__DL_MAX_DEVICES));
  assert_null(aa__dl_region_pool(f->dl, 0, -1));
  assert_null(aa__dl_region_pool(f->dl, 0, AA__DL_MAX_REGIONS));
  assert_null(aa__dl_region_pool_if_made(f->dl, -1, 0));
  assert_int_equal(atomic_load(&f->s.dev_calls), 0);
  /* a device the source has no pool for: asked again next time */
  atomic_store(&f->s.no_device, 1);
  assert_null(aa__dl_pool(f->dl, 1));
  assert_null(aa__dl_region_pool(f->dl, 1, 0)); /* no device pool: no region pool */
  assert_int_equal(atomic_load(&f->s.reg_calls), 0);
  atomic_store(&f->s.no_device, -1);
  assert_non_null(aa__dl_pool(f->dl, 1));
  /* a region the source refuses */
  assert_null(aa__dl_region_pool(f->dl, 1, NREG));
  assert_null(aa__dl_region_pool_if_made(f->dl, 1, NREG));
  /* a NULL layer */
  assert_null(aa__dl_pool(NULL, 0));
  assert_null(aa__dl_region_pool(NULL, 0, 0));
  assert_null(aa__dl_owner(NULL, f, NULL));
  assert_null(aa__dl_free_pool(NULL, 0, f));
}

/* ------------------------------------------------------------ owners */

static void test_torch_devices_owner(void **state) {
  fx *f = *state;
  aa_pool *p0 = aa__dl_pool(f->dl, 0), *p1 = aa__dl_pool(f->dl, 1);
  aa_pool *r02 = aa__dl_region_pool(f->dl, 0, 2), *r13 = aa__dl_region_pool(f->dl, 1, 3);
  aa_pool *pools[4] = {p0, p1, r02, r13};
  int devs[4] = {0, 1, 0, 1};
  void *small[4], *large[4];
  int dev;
  for (int i = 0; i < 4; i++) {
    small[i] = aa_alloc(pools[i], SMALL, NULL);
    large[i] = aa_alloc(pools[i], LARGE, NULL);
    assert_non_null(small[i]);
    assert_non_null(large[i]);
  }
  for (int round = 0; round < 3; round++) { /* searched, then from the table */
    for (int i = 0; i < 4; i++) {
      assert_ptr_equal(aa__dl_owner(f->dl, small[i], &dev), pools[i]);
      assert_int_equal(dev, devs[i]);
      assert_ptr_equal(aa__dl_owner(f->dl, large[i], &dev), pools[i]);
      assert_int_equal(dev, devs[i]);
      /* a byte inside the block too */
      assert_ptr_equal(aa__dl_owner(f->dl, (char *)large[i] + 4096, NULL), pools[i]);
      assert_ptr_equal(aa__dl_free_pool(f->dl, devs[i], small[i]), pools[i]);
      assert_ptr_equal(aa__dl_free_pool(f->dl, devs[i], large[i]), pools[i]);
    }
  }
  /* a block of device 1 freed "on device 0": not one of 0's, so 0's pool
   * (whose aa_free then reports it) */
  assert_ptr_equal(aa__dl_free_pool(f->dl, 0, small[1]), p0);
  assert_ptr_equal(aa__dl_free_pool(f->dl, 0, large[3]), p0);
  /* foreign pointers: no owner */
  int local;
  assert_null(aa__dl_owner(f->dl, &local, &dev));
  assert_int_equal(dev, -1);
  assert_null(aa__dl_owner(f->dl, NULL, &dev));
  assert_ptr_equal(aa__dl_free_pool(f->dl, 0, &local), p0);
  assert_null(aa__dl_free_pool(f->dl, 2, &local)); /* no pool made on 2 */
  for (int i = 0; i < 4; i++) {
    assert_int_equal(aa_free(aa__dl_free_pool(f->dl, devs[i], small[i]), small[i], SMALL, NULL),
                     AA_OK);
    assert_int_equal(aa_free(aa__dl_free_pool(f->dl, devs[i], large[i]), large[i], LARGE, NULL),
                     AA_OK);
  }
}

/* A device with its own pool alone: the free path asks nothing. */
static void test_torch_devices_free_shortcut(void **state) {
  fx *f = *state;
  aa_pool *p2 = aa__dl_pool(f->dl, 2);
  int local;
  void *b = aa_alloc(p2, SMALL, NULL);
  assert_non_null(b);
  assert_ptr_equal(aa__dl_free_pool(f->dl, 2, b), p2);
  assert_ptr_equal(aa__dl_free_pool(f->dl, 2, &local), p2); /* no lookup: aa_free's to report */
  assert_ptr_equal(aa__dl_free_pool(f->dl, 2, NULL), p2);
  assert_int_equal(aa_free(p2, b, SMALL, NULL), AA_OK);
}

/* An entry of the table that is no longer true (the memory went back to
 * the backend and may now be another pool's): the answer is still right. */
static void test_torch_devices_owner_stale(void **state) {
  fx *f = *state;
  aa_pool *p0 = aa__dl_pool(f->dl, 0), *r01 = aa__dl_region_pool(f->dl, 0, 1);
  for (int i = 0; i < 8; i++) {
    void *a = aa_alloc(r01, LARGE, NULL);
    assert_non_null(a);
    assert_ptr_equal(aa__dl_owner(f->dl, a, NULL), r01); /* learned */
    assert_int_equal(aa_free(r01, a, LARGE, NULL), AA_OK);
    (void)aa_pool_release(r01); /* the segment goes back: its address is free */
    assert_null(aa__dl_owner(f->dl, a, NULL));
    void *b = aa_alloc(p0, LARGE, NULL); /* often at the same address */
    assert_non_null(b);
    assert_ptr_equal(aa__dl_owner(f->dl, b, NULL), p0);
    assert_ptr_equal(aa__dl_free_pool(f->dl, 0, b), p0);
    assert_int_equal(aa_free(p0, b, LARGE, NULL), AA_OK);
    (void)aa_pool_release(p0);
  }
}

/* ------------------------------------------------------------ private pools */

static void test_torch_devices_private_rule(void **state) {
  fx *f = *state;
  aa__dl_private *pp = NULL, *again = NULL;
  aa__dl_id id = id_of(7, 1);
  assert_null(aa__dl_private_find(f->dl, 1, id));
  assert_int_equal(aa__dl_private_ref(f->dl, 1, id, &pp), AA_OK);
  assert_non_null(pp);
  assert_non_null(aa__dl_pool_if_made(f->dl, 1)); /* the device pool first */
  assert_int_equal(aa__dl_private_use_count(pp), 1);
  assert_int_equal(aa__dl_private_device(pp), 1);
  assert_true(aa__dl_private_id(pp).first == 7 && aa__dl_private_id(pp).second == 1);
  assert_false(aa__dl_private_no_split(pp));
  assert_ptr_equal(aa__dl_private_find(f->dl, 1, id), pp);
  assert_null(aa__dl_private_find(f->dl, 0, id)); /* per device */
  assert_int_equal(aa__dl_private_ref(f->dl, 1, id, &again), AA_OK);
  assert_ptr_equal(again, pp);
  assert_int_equal(aa__dl_private_use_count(pp), 2);
  assert_int_equal(atomic_load(&f->s.priv_calls), 1);

  /* the caller's pointer is kept, never read */
  aa__dl_private_set_user(pp, f);
  assert_ptr_equal(aa__dl_private_user(pp), f);

  /* a live block keeps the pool when nobody uses it */
  aa_pool *pool = aa__dl_private_pool(pp);
  void *b = aa_alloc(pool, SMALL, NULL);
  assert_non_null(b);
  assert_int_equal(aa__dl_private_blocks(pp, 1), AA_OK);
  assert_int_equal(aa__dl_private_live(pp), 1);
  assert_ptr_equal(aa__dl_owner(f->dl, b, NULL), pool);
  assert_ptr_equal(aa__dl_free_pool(f->dl, 1, b), pool);
  assert_int_equal(aa__dl_private_unref(pp), 1);
  assert_int_equal(aa__dl_private_unref(pp), 0);
  assert_int_equal(aa__dl_private_unref(pp), 0); /* never below 0 */
  assert_false(aa__dl_private_idle(pp));
  assert_int_equal(aa__dl_private_destroy(f->dl, pp), AA_EBUSY);
  assert_ptr_equal(aa__dl_private_find(f->dl, 1, id), pp); /* nothing changed */
  assert_int_equal(aa_free(pool, b, SMALL, NULL), AA_OK);
  assert_int_equal(aa__dl_private_blocks(pp, -1), AA_OK);
  assert_true(aa__dl_private_idle(pp));

  /* a use count keeps it with no block */
  assert_int_equal(aa__dl_private_ref(f->dl, 1, id, &again), AA_OK);
  assert_false(aa__dl_private_idle(pp));
  assert_int_equal(aa__dl_private_destroy(f->dl, pp), AA_EBUSY);
  assert_int_equal(aa__dl_private_unref(pp), 0);

  assert_int_equal(aa__dl_private_destroy(f->dl, pp), AA_OK);
  assert_null(aa__dl_private_find(f->dl, 1, id));
  assert_int_equal(aa__dl_private_list(f->dl, 1, NULL, 0), 0);
  /* made again under the same id: a new pool */
  assert_int_equal(aa__dl_private_ref(f->dl, 1, id, &pp), AA_OK);
  assert_int_equal(aa__dl_private_use_count(pp), 1);
  assert_int_equal(atomic_load(&f->s.priv_calls), 2);
}

static void test_torch_devices_private_misuse(void **state) {
  fx *f = *state;
  aa__dl_private *pp = (aa__dl_private *)f, *ok = NULL;
  /* arguments */
  assert_int_equal(aa__dl_private_ref(f->dl, 0, id_of(1, 0), NULL), AA_EINVAL);
  assert_int_equal(aa__dl_private_ref(NULL, 0, id_of(1, 0), &pp), AA_EINVAL);
  assert_null(pp); /* cleared */
  pp = (aa__dl_private *)f;
  assert_int_equal(aa__dl_private_ref(f->dl, -1, id_of(1, 0), &pp), AA_EINVAL);
  assert_null(pp);
  assert_int_equal(aa__dl_private_ref(f->dl, AA__DL_MAX_DEVICES, id_of(1, 0), &pp), AA_EINVAL);
  assert_null(aa__dl_private_find(f->dl, -1, id_of(1, 0)));
  assert_null(aa__dl_private_find(NULL, 0, id_of(1, 0)));
  assert_int_equal(aa__dl_private_unref(NULL), AA_EINVAL);
  assert_int_equal(aa__dl_private_use_count(NULL), 0);
  assert_int_equal(aa__dl_private_blocks(NULL, 1), AA_EINVAL);
  assert_int_equal(aa__dl_private_live(NULL), 0);
  assert_false(aa__dl_private_idle(NULL));
  assert_int_equal(aa__dl_private_destroy(f->dl, NULL), AA_EINVAL);
  assert_int_equal(aa__dl_private_destroy(NULL, NULL), AA_EINVAL);
  assert_int_equal(aa__dl_private_remake(f->dl, NULL, true), AA_EINVAL);
  assert_null(aa__dl_private_pool(NULL));
  assert_int_equal(aa__dl_private_device(NULL), -1);
  assert_null(aa__dl_private_user(NULL));
  aa__dl_private_set_user(NULL, f); /* nothing */
  assert_int_equal(aa__dl_private_list(f->dl, 0, NULL, 4), 0);
  assert_int_equal(aa__dl_private_list(f->dl, -1, NULL, 0), 0);

  /* a device without a pool */
  atomic_store(&f->s.no_device, 2);
  assert_int_equal(aa__dl_private_ref(f->dl, 2, id_of(1, 0), &pp), AA_ENODEV);
  assert_null(pp);
  atomic_store(&f->s.no_device, -1);

  /* the source fails, or says yes with nothing: no record */
  atomic_store(&f->s.priv_rc, AA_ENOMEM);
  assert_int_equal(aa__dl_private_ref(f->dl, 0, id_of(1, 0), &pp), AA_ENOMEM);
  assert_null(pp);
  atomic_store(&f->s.priv_rc, AA_OK);
  atomic_store(&f->s.priv_null, true);
  assert_int_equal(aa__dl_private_ref(f->dl, 0, id_of(1, 0), &pp), AA_ENOMEM);
  assert_null(pp);
  atomic_store(&f->s.priv_null, false);
  assert_null(aa__dl_private_find(f->dl, 0, id_of(1, 0)));

  /* a block counted out twice */
  assert_int_equal(aa__dl_private_ref(f->dl, 0, id_of(1, 0), &ok), AA_OK);
  assert_int_equal(aa__dl_private_blocks(ok, 2), AA_OK);
  assert_int_equal(aa__dl_private_blocks(ok, -3), AA_EINVAL);
  assert_int_equal(aa__dl_private_live(ok), 2); /* nothing changed */
  assert_int_equal(aa__dl_private_blocks(ok, -2), AA_OK);
  assert_int_equal(aa__dl_private_blocks(ok, -1), AA_EINVAL);
  assert_int_equal(aa__dl_private_live(ok), 0);

  /* destroyed twice, and a record that is not the layer's: refused, with
   * no read through the pointer */
  assert_int_equal(aa__dl_private_unref(ok), 0);
  assert_int_equal(aa__dl_private_destroy(f->dl, ok), AA_OK);
  assert_int_equal(aa__dl_private_destroy(f->dl, ok), AA_EINVAL);
  assert_int_equal(aa__dl_private_remake(f->dl, ok, true), AA_EINVAL);
  assert_int_equal(aa__dl_private_destroy(f->dl, (aa__dl_private *)f), AA_EINVAL);
}

static void test_torch_devices_private_remake(void **state) {
  fx *f = *state;
  aa__dl_private *pp = NULL;
  assert_int_equal(aa__dl_private_ref(f->dl, 0, id_of(3, 0), &pp), AA_OK);
  aa_pool *before = aa__dl_private_pool(pp);
  assert_int_equal(aa__dl_private_remake(f->dl, pp, false), AA_OK); /* already so */
  assert_ptr_equal(aa__dl_private_pool(pp), before);
  assert_int_equal(aa__dl_private_blocks(pp, 1), AA_OK);
  assert_int_equal(aa__dl_private_remake(f->dl, pp, true), AA_EBUSY);
  assert_ptr_equal(aa__dl_private_pool(pp), before);
  assert_false(aa__dl_private_no_split(pp));
  assert_int_equal(aa__dl_private_blocks(pp, -1), AA_OK);
  /* the source cannot make the new one: the old stays */
  atomic_store(&f->s.priv_rc, AA_ENOMEM);
  assert_int_equal(aa__dl_private_remake(f->dl, pp, true), AA_ENOMEM);
  assert_ptr_equal(aa__dl_private_pool(pp), before);
  atomic_store(&f->s.priv_rc, AA_OK);
  assert_int_equal(aa__dl_private_remake(f->dl, pp, true), AA_OK);
  assert_true(aa__dl_private_no_split(pp));
  assert_string_equal(aa_pool_name(aa__dl_private_pool(pp)), "private-nosplit");
  void *b = aa_alloc(aa__dl_private_pool(pp), LARGE, NULL);
  assert_non_null(b);
  assert_ptr_equal(aa__dl_owner(f->dl, b, NULL), aa__dl_private_pool(pp));
  assert_int_equal(aa_free(aa__dl_private_pool(pp), b, LARGE, NULL), AA_OK);
}

/* id order (first, then second), as PyTorch's std::map of MempoolId_t */
static void test_torch_devices_private_order(void **state) {
  fx *f = *state;
  aa__dl_id ids[5] = {id_of(5, 0), id_of(0, 9), id_of(0, 2), id_of(UINT64_MAX, 0), id_of(5, 1)};
  aa__dl_private *pp, *got[8];
  for (int i = 0; i < 5; i++)
    assert_int_equal(aa__dl_private_ref(f->dl, 0, ids[i], &pp), AA_OK);
  assert_int_equal(aa__dl_private_list(f->dl, 0, got, 2), 5); /* the count, two written */
  assert_int_equal(aa__dl_private_list(f->dl, 0, got, 8), 5);
  uint64_t want[5][2] = {{0, 2}, {0, 9}, {5, 0}, {5, 1}, {UINT64_MAX, 0}};
  for (int i = 0; i < 5; i++) {
    assert_true(aa__dl_private_id(got[i]).first == want[i][0]);
    assert_true(aa__dl_private_id(got[i]).second == want[i][1]);
  }
}

/* The layer's own private pools: over the device pool's backend, named as
 * the native allocator named them. */
static void test_torch_devices_private_default(void **state) {
  fx *f = *state;
  aa__dl_private *pp = NULL;
  assert_int_equal(aa__dl_private_ref(f->dl, 2, id_of(4, 11), &pp), AA_OK);
  aa_pool *pool = aa__dl_private_pool(pp);
  assert_string_equal(aa_pool_name(pool), "cuda2.pool4.11");
  assert_ptr_equal(aa_pool_backend(pool), aa_pool_backend(aa__dl_pool(f->dl, 2)));
  void *b = aa_alloc(pool, LARGE, NULL);
  assert_non_null(b);
  assert_ptr_equal(aa__dl_owner(f->dl, b, NULL), pool);
  assert_int_equal(aa_free(pool, b, LARGE, NULL), AA_OK);
  assert_int_equal(aa__dl_private_remake(f->dl, pp, true), AA_OK);
  assert_string_equal(aa_pool_name(aa__dl_private_pool(pp)), "cuda2.pool4.11");
  /* left to aa__dl_destroy (teardown), with its use count */
}

/* What MemPool(use_on_oom=True) relies on (torch/native/alloc.cpp,
 * alloc_on_oom_pool): a default private pool keeps a freed block's memory,
 * and under a limit of exactly what it holds serves a smaller request
 * from it, at the same address, without new memory. */
static void test_torch_devices_private_lends_what_it_holds(void **state) {
  fx *f = *state;
  aa__dl_private *pp = NULL;
  const size_t big = (size_t)64 << 20, part = (size_t)48 << 20;
  assert_int_equal(aa__dl_private_ref(f->dl, 0, id_of(5, 1), &pp), AA_OK);
  aa_pool *pool = aa__dl_private_pool(pp);
  void *x = aa_alloc(pool, big, NULL);
  assert_non_null(x);
  assert_int_equal(aa_free(pool, x, big, NULL), AA_OK);
  aa_pool_stats st;
  assert_int_equal(aa_pool_stats_get_opts(pool, &st, AA_STATS_NO_SIZES), AA_OK);
  assert_true(st.bytes_reserved >= big);
  uint64_t allocs = st.backend_allocs;
  aa_pool_set_limit(pool, (size_t)st.bytes_reserved);
  void *y = aa_alloc(pool, part, NULL);
  aa_pool_set_limit(pool, 0);
  assert_ptr_equal(y, x);
  assert_int_equal(aa_pool_stats_get_opts(pool, &st, AA_STATS_NO_SIZES), AA_OK);
  assert_int_equal(st.backend_allocs, allocs);
  assert_int_equal(aa_free(pool, y, part, NULL), AA_OK);
}

/* A private pool has no limit of its own but counts against the device
 * pool's (PyTorch's memory fraction covers MemPools and graph pools): the
 * device pool is refused what the private pool holds, and the private
 * pool's cached memory still serves it. */
static void test_torch_devices_private_shares_the_device_limit(void **state) {
  fx *f = *state;
  aa__dl_private *pp = NULL;
  const size_t big = (size_t)64 << 20, part = (size_t)48 << 20;
  assert_int_equal(aa__dl_private_ref(f->dl, 0, id_of(6, 1), &pp), AA_OK);
  aa_pool *priv = aa__dl_private_pool(pp), *dev = aa__dl_pool(f->dl, 0);
  void *x = aa_alloc(priv, big, NULL);
  assert_non_null(x);
  assert_int_equal(aa_free(priv, x, big, NULL), AA_OK);
  aa_pool_stats ps, ds;
  assert_int_equal(aa_pool_stats_get_opts(priv, &ps, AA_STATS_NO_SIZES), AA_OK);
  assert_int_equal(aa_pool_stats_get_opts(dev, &ds, AA_STATS_NO_SIZES), AA_OK);
  assert_int_equal(ps.limit_bytes, 0);
  assert_int_equal(aa_pool_sharers_reserved(dev), ps.bytes_reserved);
  /* the fraction's cap: what the device holds, and 16 MiB */
  aa_pool_set_limit(dev, (size_t)(ds.bytes_reserved + ps.bytes_reserved) + ((size_t)16 << 20));
  assert_null(aa_alloc(dev, part, NULL)); /* alone, the device pool would fit it */
  void *y = aa_alloc(priv, part, NULL);
  assert_ptr_equal(y, x);
  assert_int_equal(aa_free(priv, y, part, NULL), AA_OK);
  aa_pool_set_limit(dev, 0);
  void *z = aa_alloc(dev, part, NULL);
  assert_non_null(z);
  assert_int_equal(aa_free(dev, z, part, NULL), AA_OK);
}

static void test_torch_devices_new_refused(void **state) {
  (void)state;
  aa__dl_source bad = {0};
  aa__dl *dl = (aa__dl *)&bad;
  assert_int_equal(aa__dl_new(NULL, NULL), AA_EINVAL);
  assert_int_equal(aa__dl_new(&bad, &dl), AA_EINVAL);
  assert_null(dl);
  bad.device_pool = src_device;
  assert_int_equal(aa__dl_new(&bad, &dl), AA_EINVAL); /* no region_pool */
  assert_null(dl);
  aa__dl_destroy(NULL);
  /* the process's layer: one, whatever the callers */
  aa__dl *d1 = aa__dl_default();
  assert_non_null(d1);
  assert_ptr_equal(aa__dl_default(), d1);
  assert_null(aa__dl_pool_if_made(d1, 0));
}

/* ------------------------------------------------------------ threads */

#define NTHREADS 8
#define ROUNDS 2000

typedef struct targ {
  fx *f;
  int t;
  pthread_barrier_t *go;
  aa_pool *seen[NDEV];
  int bad;
} targ;

static void *racer(void *arg) {
  targ *a = arg;
  fx *f = a->f;
  pthread_barrier_wait(a->go);
  /* first uses, all at once */
  for (int d = 0; d < NDEV; d++)
    a->seen[d] = aa__dl_pool(f->dl, d);
  for (int r = 0; r < NREG; r++)
    (void)aa__dl_region_pool(f->dl, a->t % NDEV, r);
  /* allocations in every pool of a device, freed through the layer */
  for (int i = 0; i < ROUNDS; i++) {
    int d = (a->t + i) % NDEV, r = i % (NREG + 1);
    aa_pool *p = r == NREG ? aa__dl_pool(f->dl, d) : aa__dl_region_pool(f->dl, d, r);
    size_t n = (i % 7 == 0) ? LARGE / 4 : SMALL + (size_t)(i % 5) * 512;
    void *b = aa_alloc(p, n, NULL);
    if (b == NULL) {
      a->bad++;
      continue;
    }
    int dev = -1;
    if (aa__dl_free_pool(f->dl, d, b) != p || aa__dl_owner(f->dl, b, &dev) != p || dev != d)
      a->bad++;
    if (aa_free(aa__dl_free_pool(f->dl, d, b), b, n, NULL) != AA_OK)
      a->bad++;
  }
  /* use counts of one private pool from every thread */
  for (int i = 0; i < 200; i++) {
    aa__dl_private *pp = NULL;
    if (aa__dl_private_ref(f->dl, 0, id_of(42, 0), &pp) != AA_OK) {
      a->bad++;
      continue;
    }
    if (aa__dl_private_blocks(pp, 1) != AA_OK || aa__dl_private_blocks(pp, -1) != AA_OK)
      a->bad++;
    aa__dl_private *mine = NULL;
    if (aa__dl_private_ref(f->dl, 1, id_of(100 + (uint64_t)a->t, (uint64_t)i), &mine) != AA_OK) {
      a->bad++;
    } else {
      (void)aa__dl_private_unref(mine);
      if (aa__dl_private_destroy(f->dl, mine) != AA_OK)
        a->bad++;
    }
    /* lookups while other threads add and destroy device 1's private pools */
    int local;
    if (aa__dl_owner(f->dl, &local, NULL) != NULL ||
        aa__dl_free_pool(f->dl, 1, &local) != aa__dl_pool(f->dl, 1))
      a->bad++;
  }
  return NULL;
}

static void test_torch_devices_threads(void **state) {
  fx *f = *state;
  pthread_t th[NTHREADS];
  targ args[NTHREADS];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, NTHREADS);
  for (int t = 0; t < NTHREADS; t++) {
    args[t] = (targ){.f = f, .t = t, .go = &go};
    assert_int_equal(pthread_create(&th[t], NULL, racer, &args[t]), 0);
  }
  for (int t = 0; t < NTHREADS; t++)
    assert_int_equal(pthread_join(th[t], NULL), 0);
  pthread_barrier_destroy(&go);
  for (int t = 0; t < NTHREADS; t++) {
    assert_int_equal(args[t].bad, 0);
    for (int d = 0; d < NDEV; d++) {
      assert_non_null(args[t].seen[d]);
      assert_ptr_equal(args[t].seen[d], args[0].seen[d]); /* one pool per device */
    }
  }
  aa__dl_private *pp = aa__dl_private_find(f->dl, 0, id_of(42, 0));
  assert_non_null(pp);
  assert_int_equal(aa__dl_private_use_count(pp), NTHREADS * 200);
  assert_int_equal(aa__dl_private_live(pp), 0);
  assert_int_equal(aa__dl_private_list(f->dl, 0, NULL, 0), 1); /* made once */
  assert_int_equal(aa__dl_private_list(f->dl, 1, NULL, 0), 0); /* all destroyed */
  for (int i = 0; i < NTHREADS * 200; i++)
    (void)aa__dl_private_unref(pp);
  assert_int_equal(aa__dl_private_destroy(f->dl, pp), AA_OK);
}

/* A region pool is published by one store; a thread that sees it (and
 * blocks of it) at once must find them in the free path: the counts the
 * free path reads (regions made) were raised after the store, so a free
 * that came between the two went to the device pool (reported as foreign,
 * the block lost). A watcher spins on the slot and frees a block of the
 * region the moment the slot is set. */
typedef struct pub_arg {
  aa__dl *dl;
  int region;
  void *block;
  aa_pool *got;
  atomic_int ready;
} pub_arg;

static void *pub_watch(void *v) {
  pub_arg *a = v;
  atomic_store(&a->ready, 1);
  while (aa__dl_region_pool_if_made(a->dl, 0, a->region) == NULL)
    ;
  a->got = aa__dl_free_pool(a->dl, 0, a->block);
  return NULL;
}

static void test_torch_devices_region_published(void **state) {
  fx *f = *state;
  void *blocks[NREG];
  int wrong = 0;
  for (int r = 0; r < NREG; r++) {
    assert_non_null(src_region(&f->s, r, 0));
    blocks[r] = aa_alloc(f->s.reg[0][r], LARGE, NULL);
    assert_non_null(blocks[r]);
  }
  for (int it = 0; it < 4000; it++) {
    pub_arg a = {.region = it % NREG, .block = blocks[it % NREG]};
    pthread_t th;
    assert_int_equal(aa__dl_new(&f->source, &a.dl), AA_OK);
    assert_non_null(aa__dl_pool(a.dl, 0));
    assert_int_equal(pthread_create(&th, NULL, pub_watch, &a), 0);
    while (atomic_load(&a.ready) == 0)
      ;
    aa_pool *r = aa__dl_region_pool(a.dl, 0, a.region);
    assert_int_equal(pthread_join(th, NULL), 0);
    wrong += a.got != r;
    aa__dl_destroy(a.dl);
  }
  for (int r = 0; r < NREG; r++)
    assert_int_equal(aa_free(f->s.reg[0][r], blocks[r], LARGE, NULL), AA_OK);
  assert_int_equal(wrong, 0);
}

/* ------------------------------------------------------------ allocation failures */

/* Each malloc/calloc of a layer's life (made, pools, a private pool and its
 * remake, lookups) fails in turn: every call answers AA_OK or AA_ENOMEM (or
 * NULL), nothing half made stays, and the layer works after. */
static void test_torch_devices_failsweep(void **state) {
  fx *f = *state;
  bool clean = false;
  uint64_t at;
  for (at = 1; at < 2000 && !clean; at++) {
    aa__dl *dl = NULL;
    aa__dl_private *pp = NULL;
    void *b = NULL;
    arm(at);
    int rc = aa__dl_new(&f->source, &dl);
    if (rc == AA_OK) {
      aa_pool *p = aa__dl_pool(dl, 0);
      aa_pool *r = aa__dl_region_pool(dl, 0, 0);
      if (p != NULL && r != NULL) {
        b = aa_alloc(r, SMALL, NULL);
        if (b != NULL && aa__dl_free_pool(dl, 0, b) != r)
          fail_msg("wrong owner under failures (call %llu)", (unsigned long long)at);
      }
      rc = aa__dl_private_ref(dl, 0, id_of(1, 1), &pp);
      if (rc != AA_OK) {
        assert_int_equal(rc, AA_ENOMEM);
        assert_null(pp);
      } else {
        rc = aa__dl_private_remake(dl, pp, true);
        assert_true(rc == AA_OK || rc == AA_ENOMEM);
      }
    } else {
      assert_int_equal(rc, AA_ENOMEM);
      assert_null(dl);
    }
    clean = atomic_load(&g_failed) == 0;
    disarm();
    if (b != NULL)
      assert_int_equal(aa_free(aa__dl_region_pool(dl, 0, 0), b, SMALL, NULL), AA_OK);
    if (dl != NULL && pp == NULL) { /* the layer works once memory is back */
      assert_int_equal(aa__dl_private_ref(dl, 0, id_of(1, 1), &pp), AA_OK);
      assert_non_null(aa__dl_private_pool(pp));
    }
    aa__dl_destroy(dl);
  }
  assert_true(clean); /* the sweep reached a run with no failure */
  print_message("failsweep: %llu runs\n", (unsigned long long)(at - 1));
  assert_true(at > 5); /* and failed each of the allocations before it */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_torch_devices_pools_made_once, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_pools_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_owner, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_free_shortcut, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_owner_stale, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_private_rule, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_private_misuse, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_private_remake, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_private_order, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_private_lends_what_it_holds,
                                      setup_default_private, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_private_shares_the_device_limit,
                                      setup_default_private, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_private_default, setup_default_private,
                                      teardown),
      cmocka_unit_test(test_torch_devices_new_refused),
      cmocka_unit_test_setup_teardown(test_torch_devices_threads, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_region_published, setup, teardown),
      cmocka_unit_test_setup_teardown(test_torch_devices_failsweep, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
