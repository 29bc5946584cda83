/*
 * bench_main.c — adaptalloc-bench: picks the subcommand.
 *
 *   adaptalloc-bench host [...]   allocator comparison on the host (bench_host.c)
 *   adaptalloc-bench steps [...]  the allocator's own cost per training step (bench_steps.c)
 *   adaptalloc-bench staging [...] pinned staging buffers' get+put (bench_staging.c)
 *
 * jemalloc uses the initial-exec TLS model, so dlopen'ing it next to
 * everything else can fail with "cannot allocate memory in static TLS
 * block". When that happens, main() re-executes the program once with
 * GLIBC_TUNABLES=glibc.rtld.optional_static_tls raised; the environment
 * variable ADAPTALLOC_BENCH_REEXEC guards against a loop.
 *
 * Entry point: main.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define TLS_TUNABLE "glibc.rtld.optional_static_tls=65536"

/* ------------------------------------------------------------ shared */

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x;
  double b = *(const double *)y;
  return (a > b) - (a < b);
}

bench_summary bench_summarise(const double *v, int n) {
  double tmp[BENCH_MAX_SAMPLES];
  bench_summary s = {0.0, 0.0, 0.0};
  if (n <= 0 || n > BENCH_MAX_SAMPLES)
    return s;
  memcpy(tmp, v, sizeof(double) * (size_t)n);
  qsort(tmp, (size_t)n, sizeof(double), cmp_double);
  s.min = tmp[0];
  s.max = tmp[n - 1];
  s.median = (n % 2 == 1) ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
  return s;
}

int bench_arg_int(const char *cmd, const char *name, const char *v, int lo, int hi, int *out) {
  char *end = NULL;
  long x = v ? strtol(v, &end, 10) : 0;
  if (v == NULL || *v == '\0' || *end != '\0' || x < lo || x > hi) {
    fprintf(stderr, "adaptalloc-bench %s: %s wants a whole number in %d..%d, not '%s'\n", cmd,
            name, lo, hi, v ? v : "");
    return 0;
  }
  *out = (int)x;
  return 1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: adaptalloc-bench <command> [options]   (or --help, --version)\n"
          "commands:\n"
          "  host    adaptalloc vs glibc, jemalloc, mimalloc on the host, one process\n"
          "          (adaptalloc-bench host --help for its options)\n"
          "  steps   the allocator's own cost per training step (the GPU zoo's moe\n"
          "          step as allocations, on a host pool)\n"
          "  staging pinned staging buffers' get+put (pinned_empty + free) on the host\n"
          "          backend: events and stream queries per pair\n"
          "  streams host replicas of the GPU zoo's side-stream workloads (sidepipe,\n"
          "          fsdp): what the large path holds, per cycle, no timing\n"
          "  trace   live tracing's cost on the hot path (off, every event, sampled)\n"
          "          and the store writer's events/s\n"
          "  plan    the learned plan's stall of the allocating thread on RMM-format\n"
          "          traces: planned there, and on the pool's planner thread\n");
}

/* Re-executes this program with more optional static TLS. Returns only when
 * that cannot be done (then the caller goes on without jemalloc). */
static void reexec_with_tls(char **argv) {
  const char *old = getenv("GLIBC_TUNABLES");
  char buf[1024];
  if (getenv("ADAPTALLOC_BENCH_REEXEC") != NULL) {
    return;
  }
  if (old != NULL && old[0] != '\0') {
    snprintf(buf, sizeof buf, "%s:%s", old, TLS_TUNABLE);
  } else {
    snprintf(buf, sizeof buf, "%s", TLS_TUNABLE);
  }
  if (setenv("GLIBC_TUNABLES", buf, 1) != 0 || setenv("ADAPTALLOC_BENCH_REEXEC", "1", 1) != 0) {
    return;
  }
  fflush(NULL);
  execv("/proc/self/exe", argv);
  fprintf(stderr, "adaptalloc-bench: re-exec for jemalloc's static TLS failed; "
                  "jemalloc will be skipped\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("adaptalloc-bench %d.%d.%d\n", AA_VERSION_MAJOR, AA_VERSION_MINOR,
           AA_VERSION_PATCH);
    return 0;
  }
  if (strcmp(argv[1], "host") == 0) {
    if (bench_need_tls_reexec()) {
      reexec_with_tls(argv);
    }
    return bench_host_main(argc - 1, argv + 1);
  }
  if (strcmp(argv[1], "steps") == 0)
    return bench_steps_main(argc - 1, argv + 1);
  if (strcmp(argv[1], "staging") == 0)
    return bench_staging_main(argc - 1, argv + 1);
  if (strcmp(argv[1], "streams") == 0)
    return bench_streams_main(argc - 1, argv + 1);
  if (strcmp(argv[1], "trace") == 0)
    return bench_trace_main(argc - 1, argv + 1);
  if (strcmp(argv[1], "plan") == 0)
    return bench_plan_main(argc - 1, argv + 1);
  fprintf(stderr, "adaptalloc-bench: unknown command '%s' (host, steps, staging, streams, trace)\n",
          argv[1]);
  fprintf(stderr, "(adaptalloc-bench --help for usage)\n");
  return 2;
}
