/*
 * bench_devlayer.c — aa-bench-devlayer: the pluggable library's free path
 * before and after the device layer, on host pools (no GPU): the pool a
 * free of (pointer, device) goes to, then aa_free, after aa_alloc.
 *
 *   before  the pluggable library's own lookup as it was (aa_torch.c before
 *           torch/src/devices.c): the device pool when no region pool was
 *           made, else aa_block_size on the device pool, then on each region
 *           pool in turn
 *   after   aa__dl_free_pool: the device pool without a lookup while the
 *           device has no other pool, else the owner table (one probe, one
 *           aa_pool_owns)
 *
 * Cases: blocks of the device pool with no region; with NREG regions made,
 * blocks of the device pool, of the last region (the old scan's worst), and
 * large blocks of the device pool (aa_block_size takes the large lock).
 * Each case runs before and after alternately, ROUNDS times; the median
 * ns per alloc+free pair is printed. Not a test; not installed.
 *
 *   build-dl/bench/aa-bench-devlayer [iterations]
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "adaptalloc/core.h"
#include "devices.h"

#define NREG 4
#define ROUNDS 7
#define BATCH 64

static aa_pool *g_dev;
static aa_pool *g_reg[AA__DL_MAX_REGIONS];
static int g_nreg;

/* ------------------------------------------------------------ before */

static _Atomic(aa_pool *) old_pools[AA__DL_MAX_DEVICES];
static _Atomic(aa_pool *) old_region_pools[AA__DL_MAX_DEVICES][AA_RUNTIME_MAX_REGIONS];
static atomic_int old_nregion_pools[AA__DL_MAX_DEVICES];

static aa_pool *old_owner_of(int device, const void *ptr) {
  aa_pool *p = atomic_load_explicit(&old_pools[device], memory_order_acquire);
  if (!p || atomic_load_explicit(&old_nregion_pools[device], memory_order_acquire) == 0 ||
      aa_block_size(p, ptr) != 0)
    return p;
  for (int i = 0; i < AA_RUNTIME_MAX_REGIONS; i++) {
    aa_pool *r = atomic_load_explicit(&old_region_pools[device][i], memory_order_acquire);
    if (r && aa_block_size(r, ptr) != 0)
      return r;
  }
  return p;
}

/* ------------------------------------------------------------ after */

static aa_pool *src_device(void *user, int device) {
  (void)user;
  return device == 0 ? g_dev : NULL;
}

static aa_pool *src_region(void *user, int region, int device) {
  (void)user;
  return device == 0 && region < g_nreg ? g_reg[region] : NULL;
}

static aa__dl *g_dl;

/* ------------------------------------------------------------ timing */

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* ns per alloc+free pair from `pool`, freed through before (0) or after (1). */
static double run(aa_pool *pool, size_t size, long iters, int after) {
  void *v[BATCH];
  double t0 = now_ns();
  for (long i = 0; i < iters; i += BATCH) {
    for (int k = 0; k < BATCH; k++)
      v[k] = aa_alloc(pool, size, NULL);
    for (int k = 0; k < BATCH; k++) {
      aa_pool *p = after ? aa__dl_free_pool(g_dl, 0, v[k]) : old_owner_of(0, v[k]);
      if (p != pool) {
        fprintf(stderr, "wrong pool\n");
        exit(1);
      }
      (void)aa_free(p, v[k], size, NULL);
    }
  }
  return (now_ns() - t0) / (double)iters;
}

static void report(const char *name, aa_pool *pool, size_t size, long iters) {
  double b[ROUNDS], a[ROUNDS];
  (void)run(pool, size, iters / 4, 0); /* warm */
  (void)run(pool, size, iters / 4, 1);
  for (int r = 0; r < ROUNDS; r++) {
    b[r] = run(pool, size, iters, 0);
    a[r] = run(pool, size, iters, 1);
  }
  qsort(b, ROUNDS, sizeof b[0], cmp);
  qsort(a, ROUNDS, sizeof a[0], cmp);
  printf("%-34s before %7.1f ns  after %7.1f ns  (median of %d, %ld pairs each)\n", name,
         b[ROUNDS / 2], a[ROUNDS / 2], ROUNDS, iters);
}

static aa_pool *mk(aa_backend *b, const char *name) {
  aa_pool_config cfg;
  aa_pool *p = NULL;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = name;
  if (aa_pool_new(&cfg, &p) != AA_OK) {
    fprintf(stderr, "pool: cannot\n");
    exit(1);
  }
  return p;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 2000000;
  aa_backend *b = NULL;
  aa__dl_source src = {src_device, src_region, NULL, NULL};
  if (iters < BATCH || aa_backend_host_new(&b) != AA_OK || aa__dl_new(&src, &g_dl) != AA_OK)
    return 1;
  iters -= iters % BATCH;
  g_dev = mk(b, "device0");
  for (int i = 0; i < NREG; i++)
    g_reg[i] = mk(b, "region");
  atomic_store(&old_pools[0], g_dev);
  (void)aa__dl_pool(g_dl, 0);

  report("device pool, no region (1 KiB)", g_dev, 1024, iters);

  for (int i = 0; i < NREG; i++) {
    atomic_store(&old_region_pools[0][i], g_reg[i]);
    atomic_fetch_add(&old_nregion_pools[0], 1);
  }
  g_nreg = NREG;
  for (int i = 0; i < NREG; i++)
    (void)aa__dl_region_pool(g_dl, 0, i);
  report("4 regions: device pool (1 KiB)", g_dev, 1024, iters);
  report("4 regions: last region (1 KiB)", g_reg[NREG - 1], 1024, iters);
  report("4 regions: device pool (4 MiB)", g_dev, (size_t)4 << 20, iters / 8);
  report("4 regions: last region (4 MiB)", g_reg[NREG - 1], (size_t)4 << 20, iters / 8);

  aa__dl_destroy(g_dl);
  for (int i = 0; i < NREG; i++)
    aa_pool_destroy(g_reg[i]);
  aa_pool_destroy(g_dev);
  aa_backend_destroy(b);
  return 0;
}
