/*
 * bench.h — private to adaptalloc-bench: the allocators under test, loaded
 * side by side into one process, and the subcommand entry points.
 *
 * Glossary: an "allocator" here is one row of a result table (adaptalloc with
 * telemetry, adaptalloc without, glibc, jemalloc, mimalloc); a "case" is one
 * workload (pair_64 ... batch_mixed_2t); a "rep" is one timed run of every
 * allocator on every case, allocators interleaved.
 */
#ifndef ADAPTALLOC_BENCH_H
#define ADAPTALLOC_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/core.h"

/* How an allocator is called. Each kind has its own timed loop so that the
 * call sequence in the loop is what a real caller would write. */
typedef enum bench_kind {
  BENCH_AA = 0,   /* aa_alloc / aa_free (size passed) on a host pool */
  BENCH_LIBC = 1, /* glibc malloc / free, resolved inside libc.so.6 */
  BENCH_JE = 2,   /* jemalloc mallocx / sdallocx, dlopen'd RTLD_LOCAL */
  BENCH_MI = 3    /* mimalloc mi_malloc / mi_free, dlopen'd RTLD_LOCAL */
} bench_kind;

typedef void *(*bench_aa_alloc_fn)(aa_pool *pool, size_t size, aa_stream s);
typedef int (*bench_aa_free_fn)(aa_pool *pool, void *ptr, size_t size, aa_stream s);
typedef void *(*bench_malloc_fn)(size_t size);
typedef void (*bench_free_fn)(void *ptr);
typedef void *(*bench_mallocx_fn)(size_t size, int flags);
typedef void (*bench_sdallocx_fn)(void *ptr, size_t size, int flags);

typedef struct bench_allocator {
  const char *name; /* the JSON "allocator" value (static string) */
  bench_kind kind;
  bool available;  /* false when its library could not be loaded */
  char where[256]; /* shared object the alloc function resolves into */
  void *handle;    /* dlopen handle (jemalloc, mimalloc, libc), or NULL */
  /* BENCH_AA: the pool (owned: bench_allocators_close) over its backend. */
  aa_backend *backend;
  aa_pool *pool;
  bench_aa_alloc_fn aa_alloc_fn;
  bench_aa_free_fn aa_free_fn;
  /* BENCH_LIBC, BENCH_MI */
  bench_malloc_fn malloc_fn;
  bench_free_fn free_fn;
  /* BENCH_JE */
  bench_mallocx_fn mallocx_fn;
  bench_sdallocx_fn sdallocx_fn;
} bench_allocator;

#define BENCH_ALLOCATORS 5

/* Loads the five allocators into `out` (order: adaptalloc,
 * adaptalloc_notelemetry, glibc, jemalloc, mimalloc) and prints on stderr
 * which shared object each alloc function resolves into. An allocator whose
 * library is missing is marked unavailable (and said so on stderr); the
 * others still run. Returns AA_OK, or a negative aa_err when adaptalloc
 * itself cannot be set up. Release with bench_allocators_close. */
int bench_allocators_open(bench_allocator out[BENCH_ALLOCATORS], bool verbose);
void bench_allocators_close(bench_allocator a[BENCH_ALLOCATORS]);

/* True when dlopen of jemalloc fails only for want of static TLS space (its
 * TLS model is initial-exec); main() then re-executes itself once with more
 * optional static TLS (GLIBC_TUNABLES). */
bool bench_need_tls_reexec(void);

/* ------------------------------------------------------- bench_cases.c */

#define BATCH_N 1000  /* blocks per batch */
#define BATCH_PERMS 8 /* free orders per thread, rotated */
#define MAX_THREADS 8

typedef enum case_kind { CASE_PAIR,
                         CASE_BATCH } case_kind;

typedef struct bench_case {
  const char *name;
  case_kind kind;
  size_t size;  /* pair cases */
  int threads;  /* batch cases */
  uint64_t ops; /* alloc+free pairs per measurement (per thread), at scale 1 */
} bench_case;

/* The cases, in report order (pair_64 ... batch_mixed_2t). */
#define N_CASES 6
extern const bench_case bench_cases[N_CASES];

/* One thread's batch workload: sizes and free orders. */
typedef struct batch_plan {
  size_t sizes[BATCH_N];
  uint16_t perm[BATCH_PERMS][BATCH_N];
  void *ptrs[BATCH_N];
} batch_plan;

/* Elapsed time of one measurement: wall clock and this thread's CPU time. */
typedef struct timing {
  uint64_t wall;
  uint64_t cpu;
} timing;

/* Fills a thread's batch plan from seed (deterministic). */
void bench_plan_init(batch_plan *p, uint64_t seed);
/* One measurement of n alloc+free pairs of one size; {0, 0} on failure. */
timing bench_run_pair(const bench_allocator *a, size_t size, uint64_t n);
/* Returns the wall time from the first thread's start to the last one's end
 * and the threads' mean CPU time; {0, 0} on failure. */
timing bench_run_batch_case(const bench_allocator *a, batch_plan *plans, int threads,
                            uint64_t batches);

/* -------------------------------------------------------- bench_main.c */

/* The most samples bench_summarise takes. */
#define BENCH_MAX_SAMPLES 1000

/* Median, min and max of a subcommand's repetitions. */
typedef struct bench_summary {
  double median;
  double min;
  double max;
} bench_summary;

/* Median, min and max of v[0..n), 0 < n <= BENCH_MAX_SAMPLES (v unchanged);
 * all zero for n <= 0. */
bench_summary bench_summarise(const double *v, int n);
/* A subcommand's whole-number option `name` with value text v (NULL when
 * missing) into *out when it is in lo..hi; else says so on stderr, naming
 * "adaptalloc-bench cmd", and returns 0. */
int bench_arg_int(const char *cmd, const char *name, const char *v, int lo, int hi, int *out);

/* -------------------------------------------------------- bench_host.c */

/* Subcommands. argv[0] is the subcommand name. Return the exit status. */
int bench_host_main(int argc, char **argv);
/* bench_steps.c: `adaptalloc-bench steps`. */
int bench_steps_main(int argc, char **argv);
/* bench_staging.c: `adaptalloc-bench staging`. */
int bench_staging_main(int argc, char **argv);
/* bench_trace.c: what live tracing costs the hot path, the writer's events/s */
int bench_trace_main(int argc, char **argv);
/* bench_plan.c: the learned plan's stall of the allocating thread */
int bench_plan_main(int argc, char **argv);
/* bench_streams.c: `adaptalloc-bench streams`. */
int bench_streams_main(int argc, char **argv);

/* Keeps a pointer alive in the eyes of the compiler without touching the
 * memory it points to, so alloc/free pairs cannot be elided. */
#define BENCH_SINK(p) __asm__ __volatile__(""       \
                                           :        \
                                           : "r"(p) \
                                           : "memory")

#endif /* ADAPTALLOC_BENCH_H */
