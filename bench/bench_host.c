/*
 * bench_host.c — `adaptalloc-bench host`: adaptalloc (telemetry on and off),
 * glibc, jemalloc and mimalloc side by side in one process.
 *
 * Cases:
 *   pair_64 pair_512 pair_4096 pair_65536
 *       alloc+free of one size, repeated; the memory is never touched (the
 *       pointer is only passed to an empty asm so the pair is not elided).
 *   batch_mixed     1000 blocks of mixed sizes (log-uniform 16 B .. 256 KiB,
 *                   fixed seed) allocated, then freed in a random order
 *                   (eight precomputed permutations, rotated).
 *   batch_mixed_2t  the same on 2 threads at once, each with its own sizes.
 *
 * ns_per_op is nanoseconds per alloc+free pair. For batch_mixed_2t it is the
 * wall time of the two threads divided by the pairs done by ONE thread, so
 * perfect scaling shows the same figure as batch_mixed.
 *
 * Within each repetition every case runs every allocator once, the
 * allocator order rotating from one repetition to the next; after all
 * repetitions the median (and min, max) per case and allocator is reported.
 *
 * Entry point: bench_host_main. The cases and their timed loops are
 * bench_cases.c's; this file repeats them, sums them up and reports.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_REPS BENCH_MAX_SAMPLES

/* ------------------------------------------------------------ driver */

static void usage(FILE *f) {
  fprintf(f,
          "usage: adaptalloc-bench host [--json|--markdown] [--reps N] [--case NAME[,NAME...]]\n"
          "                             [--allocator NAME[,NAME...]] [--scale F] [--clock cpu|wall]\n"
          "  Runs adaptalloc (telemetry on/off), glibc, jemalloc and mimalloc side by\n"
          "  side in this one process and reports the median ns per alloc+free pair.\n"
          "  --json       one JSON object per line on stdout instead of a table\n"
          "  --markdown   the table as Markdown (medians, min-max, ratios), for BENCHMARKS.md\n"
          "  --reps N     repetitions (default 7, at least 1); median, min, max over them\n"
          "  --case       only these cases: pair_64 pair_512 pair_4096 pair_65536\n"
          "               batch_mixed batch_mixed_2t\n"
          "  --allocator  only these: adaptalloc adaptalloc_notelemetry glibc jemalloc mimalloc\n"
          "  --scale F    multiply the operations per measurement by F (default 1)\n"
          "  --clock cpu|wall  time each measurement by the thread's CPU time (default; it\n"
          "               leaves out the time other processes ran on a shared machine)\n"
          "               or by the wall clock\n"
          "  --quiet      do not print the library resolution lines on stderr\n"
          "  --version    print the version and exit\n"
          "  Values go as the next word or after '=' (--reps=9). Exit codes: 0 ok,\n"
          "  1 the run failed, 2 a bad command line.\n");
}

/* True when `name` is in the comma-separated `list` (NULL list: all). */
static bool in_list(const char *list, const char *name) {
  size_t len = strlen(name);
  const char *p = list;
  if (list == NULL) {
    return true;
  }
  while (*p != '\0') {
    const char *end = strchr(p, ',');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    if (n == len && strncmp(p, name, len) == 0) {
      return true;
    }
    if (end == NULL) {
      break;
    }
    p = end + 1;
  }
  return false;
}

/* Every name in `list` must be one of `names`; prints the bad one. */
static bool list_valid(const char *list, const char *const *names, size_t count,
                       const char *what) {
  const char *p = list;
  if (list == NULL) {
    return true;
  }
  while (1) {
    const char *end = strchr(p, ',');
    size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
    bool found = false;
    size_t i;
    for (i = 0; i < count; i++) {
      if (strlen(names[i]) == n && strncmp(p, names[i], n) == 0) {
        found = true;
      }
    }
    if (!found) {
      fprintf(stderr, "adaptalloc-bench host: unknown %s '%.*s'\n", what, (int)n, p);
      return false;
    }
    if (end == NULL) {
      return true;
    }
    p = end + 1;
  }
}

static bool parse_long(const char *s, long lo, long hi, long *out) {
  char *end = NULL;
  long v;
  if (s == NULL || *s == '\0') {
    return false;
  }
  v = strtol(s, &end, 10);
  if (*end != '\0' || v < lo || v > hi) {
    return false;
  }
  *out = v;
  return true;
}

static bool parse_double(const char *s, double lo, double hi, double *out) {
  char *end = NULL;
  double v;
  if (s == NULL || *s == '\0') {
    return false;
  }
  v = strtod(s, &end);
  if (*end != '\0' || !(v >= lo && v <= hi)) {
    return false;
  }
  *out = v;
  return true;
}

static const char *fmt_ratio(char *buf, size_t cap, double num, double den) {
  if (num > 0.0 && den > 0.0) {
    snprintf(buf, cap, "%.2f", num / den);
  } else {
    snprintf(buf, cap, "-");
  }
  return buf;
}

/* The result table as Markdown: one row per case, median ns per pair with
 * the min-max range, then the ratios the targets are stated in. */
static void print_markdown(const bench_allocator *al, const bool *run_alloc, const bool *run_case,
                           double (*res)[BENCH_ALLOCATORS][MAX_REPS], int reps) {
  size_t c;
  int i;
  printf("| case |");
  for (i = 0; i < BENCH_ALLOCATORS; i++) {
    if (run_alloc[i]) {
      printf(" %s |", al[i].name);
    }
  }
  printf(" adaptalloc / mimalloc | adaptalloc / glibc | telemetry on / off |\n|---|");
  for (i = 0; i < BENCH_ALLOCATORS; i++) {
    if (run_alloc[i]) {
      printf("---:|");
    }
  }
  printf("---:|---:|---:|\n");
  for (c = 0; c < N_CASES; c++) {
    bench_summary s[BENCH_ALLOCATORS];
    char r1[16];
    char r2[16];
    char r3[16];
    if (!run_case[c]) {
      continue;
    }
    printf("| `%s` |", bench_cases[c].name);
    for (i = 0; i < BENCH_ALLOCATORS; i++) {
      s[i].median = 0.0;
      if (run_alloc[i]) {
        s[i] = bench_summarise(res[c][i], reps);
        printf(" %.1f <sub>%.1f-%.1f</sub> |", s[i].median, s[i].min, s[i].max);
      }
    }
    printf(" %s | %s | %s |\n", fmt_ratio(r1, sizeof r1, s[0].median, s[4].median),
           fmt_ratio(r2, sizeof r2, s[0].median, s[2].median),
           fmt_ratio(r3, sizeof r3, s[0].median, s[1].median));
  }
}

int bench_host_main(int argc, char **argv) {
  static const char *const alloc_names[BENCH_ALLOCATORS] = {
      "adaptalloc", "adaptalloc_notelemetry", "glibc", "jemalloc", "mimalloc"};
  const char *case_names[N_CASES];
  bench_allocator al[BENCH_ALLOCATORS];
  bool json = false;
  bool markdown = false;
  bool quiet = false;
  long reps = 7;
  double scale = 1.0;
  const char *case_list = NULL;
  const char *alloc_list = NULL;
  double(*res)[BENCH_ALLOCATORS][MAX_REPS] = NULL;  /* [case][alloc][rep] ns/op, --clock */
  double(*wres)[BENCH_ALLOCATORS][MAX_REPS] = NULL; /* the same by the wall clock */
  bool cpu_clock = true;
  batch_plan *plans = NULL;
  bool run_case[N_CASES];
  bool run_alloc[BENCH_ALLOCATORS];
  bool opened = false;
  int status = 2; /* a bad command line */
  int i;
  size_t c;
  long r;

  for (c = 0; c < N_CASES; c++) {
    case_names[c] = bench_cases[c].name;
  }
  for (i = 1; i < argc; i++) {
    char name[32];
    const char *a = argv[i];
    /* --name VALUE or --name=VALUE */
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    bool flag;
    if (eq != NULL) {
      if ((size_t)(eq - a) >= sizeof name) {
        fprintf(stderr, "adaptalloc-bench host: unknown option '%s' (try --help)\n", a);
        goto out;
      }
      memcpy(name, a, (size_t)(eq - a));
      name[eq - a] = '\0';
      a = name;
      v = eq + 1;
    }
    flag = strcmp(a, "--json") == 0 || strcmp(a, "--markdown") == 0 ||
           strcmp(a, "--quiet") == 0 || strcmp(a, "--help") == 0 ||
           strcmp(a, "-h") == 0 || strcmp(a, "--version") == 0;
    if (flag && eq != NULL) {
      fprintf(stderr, "adaptalloc-bench host: %s takes no value\n", a);
      goto out;
    }
    if (strcmp(a, "--json") == 0) {
      json = true;
    } else if (strcmp(a, "--markdown") == 0) {
      markdown = true;
    } else if (strcmp(a, "--quiet") == 0) {
      quiet = true;
    } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      status = 0;
      goto out;
    } else if (strcmp(a, "--version") == 0) {
      printf("adaptalloc-bench %d.%d.%d\n", AA_VERSION_MAJOR, AA_VERSION_MINOR,
             AA_VERSION_PATCH);
      status = 0;
      goto out;
    } else if (strcmp(a, "--reps") == 0) {
      if (!parse_long(v, 1, MAX_REPS, &reps)) {
        fprintf(stderr, "adaptalloc-bench host: --reps needs an integer 1..%d\n", MAX_REPS);
        goto out;
      }
      i += eq == NULL;
    } else if (strcmp(a, "--clock") == 0) {
      if (v == NULL || (strcmp(v, "cpu") != 0 && strcmp(v, "wall") != 0)) {
        fprintf(stderr, "adaptalloc-bench host: --clock needs 'cpu' or 'wall'\n");
        goto out;
      }
      cpu_clock = strcmp(v, "cpu") == 0;
      i += eq == NULL;
    } else if (strcmp(a, "--scale") == 0) {
      if (!parse_double(v, 0.001, 1000.0, &scale)) {
        fprintf(stderr, "adaptalloc-bench host: --scale needs a number 0.001..1000\n");
        goto out;
      }
      i += eq == NULL;
    } else if (strcmp(a, "--case") == 0) {
      if (v == NULL || !list_valid(v, case_names, N_CASES, "case")) {
        if (v == NULL) {
          fprintf(stderr, "adaptalloc-bench host: --case needs a name\n");
        }
        goto out;
      }
      case_list = v;
      i += eq == NULL;
    } else if (strcmp(a, "--allocator") == 0) {
      if (v == NULL || !list_valid(v, alloc_names, BENCH_ALLOCATORS, "allocator")) {
        if (v == NULL) {
          fprintf(stderr, "adaptalloc-bench host: --allocator needs a name\n");
        }
        goto out;
      }
      alloc_list = v;
      i += eq == NULL;
    } else {
      fprintf(stderr, "adaptalloc-bench host: unknown option '%s' (try --help)\n", argv[i]);
      goto out;
    }
  }

  status = 1; /* from here on, a failure to run */
  if (bench_allocators_open(al, !quiet) != AA_OK) {
    goto out;
  }
  opened = true;
  for (i = 0; i < BENCH_ALLOCATORS; i++) {
    run_alloc[i] = al[i].available && in_list(alloc_list, al[i].name);
  }
  for (c = 0; c < N_CASES; c++) {
    run_case[c] = in_list(case_list, bench_cases[c].name);
  }

  res = calloc(N_CASES, sizeof *res);
  wres = calloc(N_CASES, sizeof *wres);
  plans = calloc(MAX_THREADS, sizeof *plans);
  if (res == NULL || wres == NULL || plans == NULL) {
    fprintf(stderr, "adaptalloc-bench host: out of memory\n");
    goto out;
  }
  for (i = 0; i < MAX_THREADS; i++) {
    bench_plan_init(&plans[i], 0x5eed0000u + (uint64_t)i);
  }

  /* Warm-up: one short untimed pass of every case on every allocator, so
   * that first-touch page faults and lazy initialisation are not timed. */
  for (c = 0; c < N_CASES; c++) {
    const bench_case *bc = &bench_cases[c];
    uint64_t warm = (uint64_t)((double)bc->ops * scale / 10.0) + 1;
    if (!run_case[c]) {
      continue;
    }
    for (i = 0; i < BENCH_ALLOCATORS; i++) {
      if (!run_alloc[i]) {
        continue;
      }
      if (bc->kind == CASE_PAIR) {
        (void)bench_run_pair(&al[i], bc->size, warm);
      } else {
        (void)bench_run_batch_case(&al[i], plans, bc->threads, warm / BATCH_N + 1);
      }
    }
  }

  for (r = 0; r < reps; r++) {
    for (c = 0; c < N_CASES; c++) {
      const bench_case *bc = &bench_cases[c];
      uint64_t ops = (uint64_t)((double)bc->ops * scale);
      int k;
      if (!run_case[c]) {
        continue;
      }
      if (ops < BATCH_N) {
        ops = BATCH_N;
      }
      for (k = 0; k < BENCH_ALLOCATORS; k++) {
        int ai = (int)((k + r) % BENCH_ALLOCATORS); /* rotate the order */
        timing t;
        uint64_t done;
        if (!run_alloc[ai]) {
          continue;
        }
        if (bc->kind == CASE_PAIR) {
          done = ops;
          t = bench_run_pair(&al[ai], bc->size, ops);
        } else {
          uint64_t batches = ops / BATCH_N;
          done = batches * BATCH_N;
          t = bench_run_batch_case(&al[ai], plans, bc->threads, batches);
        }
        if (t.wall == 0) {
          fprintf(stderr, "adaptalloc-bench host: %s: %s: allocation failed\n", bc->name,
                  al[ai].name);
          goto out;
        }
        res[c][ai][r] = (double)(cpu_clock ? t.cpu : t.wall) / (double)done;
        wres[c][ai][r] = (double)t.wall / (double)done;
      }
    }
  }

  if (json) {
    for (c = 0; c < N_CASES; c++) {
      const bench_case *bc = &bench_cases[c];
      uint64_t ops = (uint64_t)((double)bc->ops * scale);
      if (!run_case[c]) {
        continue;
      }
      if (bc->kind == CASE_BATCH) {
        ops = ops / BATCH_N * BATCH_N;
      }
      for (i = 0; i < BENCH_ALLOCATORS; i++) {
        bench_summary s;
        bench_summary w;
        if (!run_alloc[i]) {
          continue;
        }
        s = bench_summarise(res[c][i], (int)reps);
        w = bench_summarise(wres[c][i], (int)reps);
        printf("{\"case\": \"%s\", \"allocator\": \"%s\", \"ns_per_op\": %.2f, "
               "\"ns_min\": %.2f, \"ns_max\": %.2f, \"clock\": \"%s\", "
               "\"wall_ns_per_op\": %.2f, \"reps\": %ld, \"ops\": %llu, "
               "\"threads\": %d, \"size\": %zu}\n",
               bc->name, al[i].name, s.median, s.min, s.max, cpu_clock ? "cpu" : "wall",
               w.median, reps, (unsigned long long)ops, bc->threads, bc->size);
      }
    }
  } else if (markdown) {
    print_markdown(al, run_alloc, run_case, res, (int)reps);
  } else {
    printf("adaptalloc-bench host: median ns per alloc+free pair over %ld reps, %s time%s\n",
           reps, cpu_clock ? "thread CPU" : "wall-clock",
           reps < 5 ? " (fewer than 5: not a benchmark figure)" : "");
    printf("%-15s %10s %10s %10s %10s %10s | %7s %8s %7s\n", "case", "adaptalloc",
           "aa_notelem", "glibc", "jemalloc", "mimalloc", "aa/mi", "aa/glibc", "telem");
    for (c = 0; c < N_CASES; c++) {
      bench_summary s[BENCH_ALLOCATORS];
      char cell[BENCH_ALLOCATORS][16];
      char r1[16];
      char r2[16];
      char r3[16];
      if (!run_case[c]) {
        continue;
      }
      for (i = 0; i < BENCH_ALLOCATORS; i++) {
        if (run_alloc[i]) {
          s[i] = bench_summarise(res[c][i], (int)reps);
          snprintf(cell[i], sizeof cell[i], "%.2f", s[i].median);
        } else {
          s[i].median = 0.0;
          snprintf(cell[i], sizeof cell[i], "-");
        }
      }
      printf("%-15s %10s %10s %10s %10s %10s | %7s %8s %7s\n", bench_cases[c].name, cell[0],
             cell[1], cell[2], cell[3], cell[4],
             fmt_ratio(r1, sizeof r1, s[0].median, s[4].median),
             fmt_ratio(r2, sizeof r2, s[0].median, s[2].median),
             fmt_ratio(r3, sizeof r3, s[0].median, s[1].median));
    }
    printf("aa/mi, aa/glibc: adaptalloc (telemetry on) over mimalloc, glibc; "
           "telem: telemetry on over off\n");
  }
  fflush(stdout);
  status = 0;

out:
  if (opened) {
    bench_allocators_close(al);
  }
  free(plans);
  free(wres);
  free(res);
  return status;
}
