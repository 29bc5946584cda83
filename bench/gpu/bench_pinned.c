/*
 * bench_pinned.c — benchmark 5: the pinned pool and transfers on a GPU.
 *
 *   1 getput     aa_staging_get/put (pinned pool) vs cudaHostAlloc/cudaFreeHost
 *   2 pack       4096 x 4 KiB host tensors: packed into one pinned buffer and
 *                sent with one cudaMemcpyAsync (aa_packer_add one by one, and
 *                aa_packer_add_many with 4 and 8 copying threads) vs 4096
 *                separate copies (from pageable memory, and from pinned memory)
 *   3 bandwidth  256 MiB host-to-device from a pool buffer vs from a plain
 *                cudaHostAlloc buffer vs from pageable memory
 *   4 overlap    16 batches of 64 MiB copies on a copy stream, double
 *                buffered with events, against "compute" (cudaMemsetAsync of
 *                8 GiB) on a compute stream; the same work serialised on one
 *                stream for comparison; a per-batch timeline to a CSV file
 *
 * Every section runs its variants interleaved inside each repetition; the
 * median and range over repetitions are printed. Build (on the device):
 *   gcc -O2 -std=c11 bench/gpu/bench_pinned.c -Icore/include \
 *       -I/usr/local/cuda/include build-device/libadaptalloc_static.a \
 *       -L/usr/local/cuda/lib64 -lcudart -lpthread -lm -o bench_pinned
 * Usage: bench_pinned [reps] [timeline.csv]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime.h>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"
#include "adaptalloc/transfer.h"

#define CK(x)                                                   \
  do {                                                          \
    cudaError_t e_ = (x);                                       \
    if (e_ != cudaSuccess) {                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, \
              cudaGetErrorString(e_));                          \
      exit(1);                                                  \
    }                                                           \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  double t[64];
  memcpy(t, v, (size_t)n * sizeof *v);
  qsort(t, (size_t)n, sizeof *t, cmp_d);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static double vmin(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    m = v[i] < m ? v[i] : m;
  return m;
}

static double vmax(const double *v, int n) {
  double m = v[0];
  for (int i = 1; i < n; i++)
    m = v[i] > m ? v[i] : m;
  return m;
}

static void report(const char *what, const char *unit, double *v, int n) {
  printf("  %-44s median %12.3f %-6s range [%.3f, %.3f]\n", what, median(v, n), unit,
         vmin(v, n), vmax(v, n));
}

#define MAXR 32

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 7;
  const char *csv = argc > 2 ? argv[2] : NULL;
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_pool_config cfg;
  cudaStream_t cs, xs;
  int r;

  if (reps < 5)
    reps = 5;
  if (reps > MAXR)
    reps = MAXR;
  if (aa_cuda_device_count() == 0) {
    printf("SKIP: no CUDA device\n");
    return 0;
  }
  CK(cudaSetDevice(0));
  if (aa_backend_pinned_new(&b) != AA_OK)
    return 1;
  aa_pool_config_init(&cfg);
  cfg.name = "pinned";
  cfg.backend = b;
  cfg.slab_size = 8u << 20; /* fewer, larger cudaHostAlloc arenas */
  if (aa_pool_new(&cfg, &pool) != AA_OK)
    return 1;
  CK(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&xs, cudaStreamNonBlocking));

  /* ---------------------------------------------------------- 1 get/put */
  {
    static const size_t sizes[] = {4096, 65536, 1u << 20, 64u << 20};
    printf("1 getput: one get+put pair (us)\n");
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
      size_t sz = sizes[si];
      double pool_us[MAXR], host_us[MAXR];
      void *w = aa_staging_get(pool, sz); /* warm */
      aa_staging_put(pool, w, sz, AA_STREAM_HOST);
      for (r = 0; r < reps; r++) {
        int n = 100000, m = sz >= (64u << 20) ? 3 : 10;
        double t0 = now_s();
        for (int i = 0; i < n; i++) {
          void *p = aa_staging_get(pool, sz);
          if (!p)
            return 2;
          aa_staging_put(pool, p, sz, AA_STREAM_HOST);
        }
        pool_us[r] = (now_s() - t0) / n * 1e6;
        t0 = now_s();
        for (int i = 0; i < m; i++) {
          void *p = NULL;
          CK(cudaHostAlloc(&p, sz, cudaHostAllocPortable | cudaHostAllocMapped));
          CK(cudaFreeHost(p));
        }
        host_us[r] = (now_s() - t0) / m * 1e6;
      }
      char name[96];
      snprintf(name, sizeof name, "pool get/put %zu B", sz);
      report(name, "us", pool_us, reps);
      snprintf(name, sizeof name, "cudaHostAlloc/cudaFreeHost %zu B", sz);
      report(name, "us", host_us, reps);
      printf("  => ratio host/pool %.0fx\n", median(host_us, reps) / median(pool_us, reps));
    }
  }

  /* ----------------------------------------------------------- 2 packing */
  {
    enum { N = 4096,
           SZ = 4096 };
    unsigned char **src = malloc(N * sizeof *src);
    unsigned char *pin_src = NULL, *dev = NULL;
    aa_packer *pk = NULL;
    double sep_pageable[MAXR], sep_pinned[MAXR], packed[MAXR], many4[MAXR], many8[MAXR];
    size_t off;
    size_t *lens = malloc(N * sizeof *lens), *offs = malloc(N * sizeof *offs);
    unsigned tdef;
    for (int i = 0; i < N; i++) {
      src[i] = malloc(SZ);
      memset(src[i], i & 0xff, SZ);
    }
    CK(cudaHostAlloc((void **)&pin_src, (size_t)N * SZ, cudaHostAllocPortable));
    memset(pin_src, 7, (size_t)N * SZ);
    CK(cudaMalloc((void **)&dev, (size_t)N * SZ * 2));
    if (aa_packer_new(pool, (size_t)N * SZ, &pk) != AA_OK)
      return 3;
    for (int i = 0; i < N; i++)
      lens[i] = SZ;
    tdef = aa_packer_set_threads(pk, 0);
    printf("2 pack: 4096 x 4 KiB host tensors to the device (ms, until synced)\n");
    for (r = 0; r < reps; r++) {
      double t0 = now_s();
      for (int i = 0; i < N; i++)
        CK(cudaMemcpyAsync(dev + (size_t)i * SZ, src[i], SZ, cudaMemcpyHostToDevice, cs));
      CK(cudaStreamSynchronize(cs));
      sep_pageable[r] = (now_s() - t0) * 1e3;
      t0 = now_s();
      for (int i = 0; i < N; i++)
        CK(cudaMemcpyAsync(dev + (size_t)i * SZ, pin_src + (size_t)i * SZ, SZ,
                           cudaMemcpyHostToDevice, cs));
      CK(cudaStreamSynchronize(cs));
      sep_pinned[r] = (now_s() - t0) * 1e3;
      t0 = now_s();
      for (int i = 0; i < N; i++)
        if (aa_packer_add(pk, src[i], SZ, &off) != AA_OK)
          return 4;
      if (aa_packer_flush(pk, dev, cs) != AA_OK)
        return 5;
      if (aa_packer_sync(pk) != AA_OK)
        return 6;
      packed[r] = (now_s() - t0) * 1e3;
      for (int k = 0; k < 2; k++) {
        aa_packer_set_threads(pk, k == 0 ? tdef : 8);
        t0 = now_s();
        if (aa_packer_add_many(pk, (const void *const *)src, lens, N, offs) != AA_OK)
          return 4;
        if (aa_packer_flush(pk, dev, cs) != AA_OK)
          return 5;
        if (aa_packer_sync(pk) != AA_OK)
          return 6;
        (k == 0 ? many4 : many8)[r] = (now_s() - t0) * 1e3;
      }
    }
    /* correctness: tensor 4095 landed at its offset */
    {
      unsigned char chk[SZ];
      CK(cudaMemcpy(chk, dev + (size_t)(N - 1) * SZ, SZ, cudaMemcpyDeviceToHost));
      if (chk[0] != ((N - 1) & 0xff) || chk[SZ - 1] != ((N - 1) & 0xff))
        printf("  !! packed data mismatch\n");
    }
    report("4096 separate cudaMemcpyAsync from pageable", "ms", sep_pageable, reps);
    report("4096 separate cudaMemcpyAsync from pinned", "ms", sep_pinned, reps);
    report("packed: 4096 aa_packer_add + 1 copy", "ms", packed, reps);
    {
      char name[96];
      snprintf(name, sizeof name, "packed: aa_packer_add_many, %u threads + 1 copy", tdef);
      report(name, "ms", many4, reps);
    }
    report("packed: aa_packer_add_many, 8 threads + 1 copy", "ms", many8, reps);
    printf("  => speed-up vs pageable: add %.1fx, add_many(%u) %.1fx, add_many(8) %.1fx; "
           "vs pinned-separate: %.1fx, %.1fx, %.1fx\n",
           median(sep_pageable, reps) / median(packed, reps), tdef,
           median(sep_pageable, reps) / median(many4, reps),
           median(sep_pageable, reps) / median(many8, reps),
           median(sep_pinned, reps) / median(packed, reps),
           median(sep_pinned, reps) / median(many4, reps),
           median(sep_pinned, reps) / median(many8, reps));
    aa_packer_destroy(pk);
    CK(cudaFree(dev));
    CK(cudaFreeHost(pin_src));
    for (int i = 0; i < N; i++)
      free(src[i]);
    free(src);
    free(lens);
    free(offs);
  }

  /* --------------------------------------------------------- 3 bandwidth */
  {
    const size_t SZ = 256u << 20;
    unsigned char *poolbuf = aa_staging_get(pool, SZ);
    unsigned char *hostbuf = NULL, *pageable = malloc(SZ), *dev = NULL;
    double bw_pool[MAXR], bw_host[MAXR], bw_page[MAXR], bw_pool_d2h[MAXR];
    cudaEvent_t e0, e1;
    float ms;
    if (!poolbuf || !pageable)
      return 7;
    CK(cudaHostAlloc((void **)&hostbuf, SZ, cudaHostAllocPortable));
    CK(cudaMalloc((void **)&dev, SZ));
    memset(poolbuf, 1, SZ);
    memset(hostbuf, 1, SZ);
    memset(pageable, 1, SZ);
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("3 bandwidth: 256 MiB copies (GB/s)\n");
    for (r = 0; r < reps; r++) {
      unsigned char *srcs[3] = {poolbuf, hostbuf, pageable};
      double *outs[3] = {bw_pool, bw_host, bw_page};
      for (int k = 0; k < 3; k++) {
        CK(cudaEventRecord(e0, cs));
        CK(cudaMemcpyAsync(dev, srcs[k], SZ, cudaMemcpyHostToDevice, cs));
        CK(cudaEventRecord(e1, cs));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&ms, e0, e1));
        outs[k][r] = (double)SZ / (ms * 1e-3) / 1e9;
      }
      CK(cudaEventRecord(e0, cs));
      CK(cudaMemcpyAsync(poolbuf, dev, SZ, cudaMemcpyDeviceToHost, cs));
      CK(cudaEventRecord(e1, cs));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms, e0, e1));
      bw_pool_d2h[r] = (double)SZ / (ms * 1e-3) / 1e9;
    }
    report("H2D from pool buffer (aa_staging_get)", "GB/s", bw_pool, reps);
    report("H2D from cudaHostAlloc buffer", "GB/s", bw_host, reps);
    report("H2D from pageable malloc buffer", "GB/s", bw_page, reps);
    report("D2H into pool buffer", "GB/s", bw_pool_d2h, reps);
    printf("  => pool / cudaHostAlloc = %.1f%%\n",
           100.0 * median(bw_pool, reps) / median(bw_host, reps));
    aa_staging_put(pool, poolbuf, SZ, cs);
    CK(cudaStreamSynchronize(cs));
    CK(cudaFreeHost(hostbuf));
    CK(cudaFree(dev));
    free(pageable);
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
  }

  /* ----------------------------------------------------------- 4 overlap */
  {
    enum { NB = 16 };
    const size_t CSZ = 64u << 20;       /* per batch copy */
    const size_t WSZ = (size_t)8 << 30; /* "compute": memset of 8 GiB */
    unsigned char *stage[2], *dst[2], *work = NULL;
    cudaEvent_t copied[2], consumed[2];
    cudaEvent_t tc0[NB], tc1[NB], tk0[NB], tk1[NB], tstart;
    double serial[MAXR], overl[MAXR], hidden_frac = 0;
    FILE *f = NULL;
    for (int k = 0; k < 2; k++) {
      stage[k] = aa_staging_get(pool, CSZ);
      if (!stage[k])
        return 8;
      memset(stage[k], k + 1, CSZ);
      CK(cudaMalloc((void **)&dst[k], CSZ));
      CK(cudaEventCreateWithFlags(&copied[k], cudaEventDisableTiming));
      CK(cudaEventCreateWithFlags(&consumed[k], cudaEventDisableTiming));
    }
    CK(cudaMalloc((void **)&work, WSZ));
    for (int i = 0; i < NB; i++) {
      CK(cudaEventCreate(&tc0[i]));
      CK(cudaEventCreate(&tc1[i]));
      CK(cudaEventCreate(&tk0[i]));
      CK(cudaEventCreate(&tk1[i]));
    }
    CK(cudaEventCreate(&tstart));
    printf("4 overlap: %d batches of 64 MiB copies + 8 GiB memset each (ms total)\n", NB);
    for (r = 0; r < reps; r++) {
      /* serial: copy then compute on one stream */
      double t0 = now_s();
      for (int i = 0; i < NB; i++) {
        CK(cudaMemcpyAsync(dst[i & 1], stage[i & 1], CSZ, cudaMemcpyHostToDevice, cs));
        CK(cudaMemsetAsync(work, i, WSZ, cs));
      }
      CK(cudaStreamSynchronize(cs));
      serial[r] = (now_s() - t0) * 1e3;
      /* overlapped: copies on xs, compute on cs, double-buffered by events */
      t0 = now_s();
      CK(cudaEventRecord(tstart, xs));
      for (int i = 0; i < NB; i++) {
        int k = i & 1;
        /* do not overwrite dst[k] before compute i-2 consumed it */
        if (i >= 2)
          CK(cudaStreamWaitEvent(xs, consumed[k], 0));
        CK(cudaEventRecord(tc0[i], xs));
        CK(cudaMemcpyAsync(dst[k], stage[k], CSZ, cudaMemcpyHostToDevice, xs));
        CK(cudaEventRecord(tc1[i], xs));
        CK(cudaEventRecord(copied[k], xs));
        CK(cudaStreamWaitEvent(cs, copied[k], 0));
        CK(cudaEventRecord(tk0[i], cs));
        CK(cudaMemsetAsync(work, i, WSZ, cs));
        CK(cudaEventRecord(tk1[i], cs));
        CK(cudaEventRecord(consumed[k], cs));
      }
      CK(cudaStreamSynchronize(cs));
      CK(cudaStreamSynchronize(xs));
      overl[r] = (now_s() - t0) * 1e3;
    }
    /* timeline of the last overlapped repetition */
    {
      double copy_total = 0, copy_hidden = 0;
      if (csv)
        f = fopen(csv, "w");
      if (f)
        fprintf(f, "batch,copy_start_ms,copy_end_ms,compute_start_ms,compute_end_ms\n");
      for (int i = 0; i < NB; i++) {
        float a, bb, c, d;
        CK(cudaEventElapsedTime(&a, tstart, tc0[i]));
        CK(cudaEventElapsedTime(&bb, tstart, tc1[i]));
        CK(cudaEventElapsedTime(&c, tstart, tk0[i]));
        CK(cudaEventElapsedTime(&d, tstart, tk1[i]));
        if (f)
          fprintf(f, "%d,%.4f,%.4f,%.4f,%.4f\n", i, a, bb, c, d);
        copy_total += bb - a;
        /* how much of this copy ran while some compute ran */
        for (int j = 0; j < NB; j++) {
          float c2, d2;
          CK(cudaEventElapsedTime(&c2, tstart, tk0[j]));
          CK(cudaEventElapsedTime(&d2, tstart, tk1[j]));
          double lo = a > c2 ? a : c2, hi = bb < d2 ? bb : d2;
          if (hi > lo)
            copy_hidden += hi - lo;
        }
      }
      if (f)
        fclose(f);
      hidden_frac = copy_total > 0 ? copy_hidden / copy_total : 0;
    }
    report("serial (one stream)", "ms", serial, reps);
    report("overlapped (copy stream + compute stream)", "ms", overl, reps);
    printf("  => %.1f%% of copy time ran under compute (last rep); saved %.2f ms of %.2f\n",
           100.0 * hidden_frac, median(serial, reps) - median(overl, reps),
           median(serial, reps));
    for (int k = 0; k < 2; k++) {
      aa_staging_put(pool, stage[k], CSZ, AA_STREAM_HOST);
      CK(cudaFree(dst[k]));
    }
    CK(cudaFree(work));
  }
  {
    aa_cuda_counts c;
    aa_backend_cuda_counts(b, &c);
    printf("pinned backend: %llu cudaHostAlloc calls, %llu MiB held, %llu events created\n",
           (unsigned long long)c.allocs, (unsigned long long)(c.bytes_mapped >> 20),
           (unsigned long long)c.events_created);
  }
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
  return 0;
}
