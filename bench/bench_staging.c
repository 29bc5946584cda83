/*
 * bench_staging.c — `adaptalloc-bench staging`: the pinned staging pattern
 * (adaptalloc.torch.pinned_empty + free) as the pool sees it, on the host
 * backend: a buffer taken on the host pseudo-stream (aa_staging_get
 * allocates on AA_STREAM_HOST) and put back on a GPU stream (aa_staging_put
 * frees on the copy's stream), one buffer cycling, per size.
 *
 * Two pools side by side, interleaved per repetition:
 *   query     the host backend as it is: before recording an event for
 *             blocks freed on a stream the pool asks whether that stream is
 *             idle (stream_query; on CUDA cudaStreamQuery)
 *   events    the same backend without stream_query (the pool before it
 *             had one): every reuse of the buffer needs an event recorded on
 *             the stream and queried
 * Reported per size, median [min, max] over --reps: ns per get+put pair on
 * the host backend, and events recorded and stream queries per pair. The
 * host backend's event is a calloc and a mutex; CUDA's record + query is
 * about a microsecond (cudaEventRecord on the stream, its device looked up
 * and made current, the event pool's lock, cudaEventQuery), so the counts
 * say what the pair costs on a GPU.
 *
 * Entry point: bench_staging_main.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/cuda.h" /* AA_STREAM_HOST */
#include "bench.h"
#include "test_hooks.h"

#define MAX_REPS 100
#define COPY_STREAM ((aa_stream)(uintptr_t)0x5000) /* a stand-in cudaStream_t */

static const size_t SIZES[] = {(size_t)4 << 10, (size_t)1 << 20, (size_t)16 << 20};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

typedef struct sample {
  double ns, events, queries;
} sample;

/* n get+put pairs of `size` after a warm-up; the host backend's counters
 * are read through `host` (the backend the pool's ops point into). */
static int one(aa_pool *pool, aa_backend *host, size_t size, int n, sample *out) {
  for (int i = 0; i < 16; i++) { /* warm: the slab or segment exists */
    void *p = aa_alloc(pool, size, AA_STREAM_HOST);
    if (p == NULL)
      return AA_ENOMEM;
    aa_free(pool, p, size, COPY_STREAM);
  }
  uint64_t e0, e1, q0 = aa_backend_host_stream_queries(host);
  aa_backend_host_event_counts(host, &e0, NULL);
  uint64_t t0 = aa_now_ns();
  for (int i = 0; i < n; i++) {
    void *p = aa_alloc(pool, size, AA_STREAM_HOST);
    if (p == NULL)
      return AA_ENOMEM;
    BENCH_SINK(p);
    aa_free(pool, p, size, COPY_STREAM);
  }
  uint64_t t1 = aa_now_ns();
  aa_backend_host_event_counts(host, &e1, NULL);
  out->ns = (double)(t1 - t0) / n;
  out->events = (double)(e1 - e0) / n;
  out->queries = (double)(aa_backend_host_stream_queries(host) - q0) / n;
  return AA_OK;
}

static void usage(FILE *f) {
  fprintf(f, "usage: adaptalloc-bench staging [--pairs N] [--reps N]\n"
             "  pinned staging buffers (get on the host pseudo-stream, put on a copy stream)\n"
             "  on the host backend: the pool asking whether the stream is idle vs recording\n"
             "  an event per reuse (bench_staging.c)\n"
             "  --pairs N  get+put pairs per measurement (default 200000)\n"
             "  --reps N   repetitions, both pools in each (default 5, at most 100)\n");
}

int bench_staging_main(int argc, char **argv) {
  int pairs = 200000, reps = 5, rc = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      return 0;
    }
    int ok = strcmp(a, "--pairs") == 0  ? bench_arg_int("staging", a, v, 1, 100000000, &pairs)
             : strcmp(a, "--reps") == 0 ? bench_arg_int("staging", a, v, 1, MAX_REPS, &reps)
                                        : -1;
    if (ok == -1) {
      fprintf(stderr, "adaptalloc-bench staging: unknown option '%s'\n", a);
      usage(stderr);
      return 2;
    }
    if (!ok)
      return 2;
    i++;
  }
  aa_backend *host = NULL;
  aa_pool *pools[2] = {NULL, NULL};
  /* "events": the host backend's ops without stream_query, same context */
  aa_backend_ops no_query;
  aa_backend events_backend;
  static const char *const names[2] = {"query", "events"};
  sample(*v)[NSIZES][MAX_REPS] = calloc(2, sizeof *v);
  if (v == NULL || aa_backend_host_new(&host) != AA_OK)
    goto out;
  no_query = *host->ops;
  no_query.stream_query = NULL;
  events_backend = *host;
  events_backend.ops = &no_query;
  for (int k = 0; k < 2; k++) {
    aa_pool_config cfg;
    aa_pool_config_init(&cfg);
    cfg.name = names[k];
    cfg.backend = k == 0 ? host : &events_backend;
    if (aa_pool_new(&cfg, &pools[k]) != AA_OK)
      goto out;
  }
  for (int r = 0; r < reps; r++) {
    for (size_t si = 0; si < NSIZES; si++) {
      for (int j = 0; j < 2; j++) {
        int k = (r + j) % 2; /* order alternating */
        int e = one(pools[k], host, SIZES[si], pairs, &v[k][si][r]);
        if (e != AA_OK) {
          fprintf(stderr, "adaptalloc-bench staging: %s: %s\n", names[k], aa_strerror(e));
          goto out;
        }
      }
    }
  }
  printf("pinned staging pattern on the host backend (get on AA_STREAM_HOST, put on a copy "
         "stream), %d pairs, %d reps: median [min, max]\n",
         pairs, reps);
  printf("  %-9s %-7s %-26s %-22s %s\n", "size", "pool", "ns per pair", "events per pair",
         "stream queries per pair");
  for (size_t si = 0; si < NSIZES; si++) {
    for (int k = 0; k < 2; k++) {
      double x[MAX_REPS];
      bench_summary m[3];
      for (int f = 0; f < 3; f++) {
        for (int r = 0; r < reps; r++) {
          const sample *s = &v[k][si][r];
          x[r] = f == 0 ? s->ns : f == 1 ? s->events
                                         : s->queries;
        }
        m[f] = bench_summarise(x, reps);
      }
      char a[64], b[64], c[64];
      snprintf(a, sizeof a, "%.1f [%.1f, %.1f]", m[0].median, m[0].min, m[0].max);
      snprintf(b, sizeof b, "%.3f [%.3f, %.3f]", m[1].median, m[1].min, m[1].max);
      snprintf(c, sizeof c, "%.3f [%.3f, %.3f]", m[2].median, m[2].min, m[2].max);
      printf("  %-9s %-7s %-26s %-22s %s\n", k == 0 ? (si == 0 ? "4 KiB" : si == 1 ? "1 MiB"
                                                                                   : "16 MiB")
                                                    : "",
             names[k], a, b, c);
    }
  }
  rc = 0;
out:
  if (rc != 0 && v != NULL && host != NULL && pools[1] == NULL)
    fprintf(stderr, "adaptalloc-bench staging: cannot set up the pools\n");
  aa_pool_destroy(pools[0]);
  aa_pool_destroy(pools[1]);
  aa_backend_destroy(host);
  free(v);
  return rc;
}
