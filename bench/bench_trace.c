/*
 * bench_trace.c — `adaptalloc-bench trace`: what live tracing costs the
 * allocator's hot path and what the store's writer sustains. One host pool,
 * one thread, alloc+free pairs of 512 bytes (the tcache hit, the path a
 * trace slows most), measured in modes: tracing off (telemetry on, as the
 * runtime runs), every event into the store's ring, one in 100 and one in
 * 10000 allocations (sampled), and sizes of 64 KiB and more only (no 512-byte
 * request taken: the cost of the sampling decision alone). The store is a
 * real one on a temporary file with the runtime's ring (512 Ki events);
 * what the ring could not take is reported as dropped. Then the writer's
 * throughput: events pushed as fast as the ring takes them for 2 s, events
 * committed per second.
 *
 * Entry point: bench_trace_main.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "adaptalloc/core.h"
#include "adaptalloc/store.h"
#include "bench.h"

static uint64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* ns per alloc+free pair, the median of reps. */
static double pairs(aa_pool *pool, uint64_t n, int reps) {
  double v[32];
  for (int r = 0; r < reps; r++) {
    uint64_t t0 = cpu_ns();
    for (uint64_t i = 0; i < n; i++) {
      void *p = aa_alloc(pool, 512, NULL);
      aa_free(pool, p, 512, NULL);
    }
    v[r] = (double)(cpu_ns() - t0) / (double)n;
  }
  qsort(v, (size_t)reps, sizeof v[0], cmp_d);
  return v[reps / 2];
}

int bench_trace_main(int argc, char **argv) {
  uint64_t n = 2000000;
  int reps = 7;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--pairs") == 0 && i + 1 < argc) {
      n = strtoull(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: adaptalloc-bench trace [--pairs N] [--reps N (1..31)]\n");
      return strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (n == 0 || reps < 1 || reps > 31) {
    fprintf(stderr, "adaptalloc-bench trace: --pairs above 0, --reps 1..31\n");
    return 2;
  }
  char dir[] = "/tmp/aa-bench-trace-XXXXXX", path[128];
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  snprintf(path, sizeof path, "%s/trace.db", dir);
  aa_backend *b = NULL;
  aa_pool *pool = NULL;
  aa_store *st = NULL;
  aa_pool_config cfg;
  aa_store_config sc;
  aa_store_run_info info;
  int64_t run = 0;
  int rc = 1;
  if (aa_backend_host_new(&b) != AA_OK)
    goto out;
  aa_pool_config_init(&cfg);
  cfg.backend = b;
  cfg.name = "bench_trace";
  if (aa_pool_new(&cfg, &pool) != AA_OK)
    goto out;
  aa_store_config_init(&sc);
  sc.path = path;
  sc.trace_capacity = 1u << 19;
  sc.quiet = true;
  if (aa_store_open(&sc, &st) != AA_OK)
    goto out;
  memset(&info, 0, sizeof info);
  info.model = "bench";
  info.rank = -1;
  info.local_rank = -1;
  if (aa_store_begin_run(st, &info, &run) != AA_OK)
    goto out;

  static const struct {
    const char *name;
    bool trace;
    uint32_t every;
    uint64_t min_bytes;
  } modes[] = {{"off (telemetry on)", false, 1, 0},
               {"every event", true, 1, 0},
               {"1 in 100", true, 100, 0},
               {"1 in 10000", true, 10000, 0},
               {"sizes >= 64 KiB only", true, 0, 65536}};
  printf("| tracing | ns per alloc+free pair (512 B, median of %d) | events written | "
         "events dropped |\n|---|---:|---:|---:|\n",
         reps);
  (void)pairs(pool, n / 4 + 1, 1); /* warm the caches */
  for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
    aa_store_stats s0, s1;
    aa_store_flush(st, 0);
    aa_store_stats_get(st, &s0);
    if (modes[m].trace &&
        aa_pool_set_trace_sampled(pool, aa_store_trace_push, st, modes[m].every,
                                  modes[m].min_bytes) != AA_OK)
      goto out;
    double ns = pairs(pool, n, reps);
    aa_pool_set_trace(pool, NULL, NULL);
    aa_store_flush(st, 0);
    aa_store_stats_get(st, &s1);
    printf("| %s | %.1f | %llu | %llu |\n", modes[m].name, ns,
           (unsigned long long)(s1.events_written - s0.events_written),
           (unsigned long long)(s1.events_dropped - s0.events_dropped));
  }

  /* the writer: push for 2 s at the rate the ring takes, then flush */
  {
    aa_store_stats s0, s1;
    aa_trace_event ev;
    memset(&ev, 0, sizeof ev);
    ev.op = 'a';
    ev.size = 512;
    ev.thread = 1;
    aa_store_flush(st, 0);
    aa_store_stats_get(st, &s0);
    uint64_t t0 = wall_ns(), pushed = 0;
    while (wall_ns() - t0 < 2000000000ull) {
      aa_store_stats q;
      aa_store_stats_get(st, &q);
      if (q.events_queued > (1u << 18)) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL); /* let the writer drain: measure it, not drops */
        continue;
      }
      for (int k = 0; k < 4096; k++) {
        ev.seq = ++pushed;
        ev.ptr = 0x100000 + (pushed & 0xffff) * 512;
        ev.time_ns = wall_ns();
        aa_store_trace_push(st, &ev);
      }
    }
    aa_store_flush(st, 0);
    uint64_t dt = wall_ns() - t0;
    aa_store_stats_get(st, &s1);
    printf("\nstore writer: %llu events committed in %.2f s: %.2f M events/s (%llu dropped)\n",
           (unsigned long long)(s1.events_written - s0.events_written), (double)dt / 1e9,
           (double)(s1.events_written - s0.events_written) / ((double)dt / 1e9) / 1e6,
           (unsigned long long)(s1.events_dropped - s0.events_dropped));
  }
  rc = 0;
out:
  if (rc != 0)
    fprintf(stderr, "adaptalloc-bench trace: set-up failed\n");
  if (pool != NULL)
    aa_pool_set_trace(pool, NULL, NULL);
  aa_store_close(st);
  aa_pool_destroy(pool);
  aa_backend_destroy(b);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0)
    fprintf(stderr, "adaptalloc-bench trace: could not remove %s\n", dir);
  return rc;
}
