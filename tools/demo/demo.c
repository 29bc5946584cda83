/*
 * demo.c — adaptalloc-demo, the main job: a trainer-like workload on the
 * runtime's pool (the CUDA device pool when a GPU is present, else the host
 * pool), with a one-line progress summary every second.
 *
 * The workload (tools/demo/workload.c, shared with tests/test_adapt_demo.c)
 * is a small transformer trained data-parallel by --threads workers that
 * share one pool:
 *   - weights, their gradients and two optimiser states are allocated once;
 *   - each step runs a forward pass that allocates, per layer, the layer-norm
 *     output and statistics, Q, K, V, the attention scores (freed once the
 *     softmax exists), the softmax, the attention output, the MLP hidden and
 *     activated tensors, and keeps them for the backward pass; the backward
 *     pass walks the layers in reverse, allocating and freeing gradient
 *     temporaries and freeing that layer's saved activations;
 *   - the sequence length follows a schedule (128, 256, 64, 192, 384 tokens,
 *     the next one every --phase seconds) with a little jitter per step, so
 *     the request sizes move while the program runs, which is what the
 *     policy loop is there to follow;
 *   - the second phase evaluates instead of training: forward passes only,
 *     each keeping its predictions (10240 bytes, which the default ladder
 *     serves from 16 KiB blocks) until the phase ends, so the loop has a hot,
 *     wasteful size to add an exact class for within the first seconds, and
 *     to retire once it has gone cold.
 * The memory handed out is never touched (it may be device memory); a
 * --compute-us sleep per step stands in for the kernels.
 *
 * Runs for --seconds N or until SIGINT/SIGTERM (a second signal exits at
 * once with 130), then frees everything, shuts the runtime down, exits 0.
 *
 * Entry point: main.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "adaptalloc/core.h"
#include "adaptalloc/http.h"
#include "adaptalloc/runtime.h"
#include "workload.h"

#define DEMO_MAX_THREADS 64

typedef struct demo_opts {
  double seconds; /* <= 0: until a signal */
  int threads;
  bool quiet;
  long compute_us; /* simulated compute per step */
  double phase_s;  /* seconds per sequence-length phase */
} demo_opts;

typedef struct worker {
  pthread_t tid;
  int index;
  aa_pool *pool;
  const demo_opts *opts;
  uint64_t rng;
  _Atomic uint64_t steps;
  _Atomic uint64_t failed_allocs;
  demo_eval eval; /* an evaluation phase's kept predictions */
} worker;

/* Set by the signal handler, read by the main thread: an atomic, since the
 * signal may land on any thread (a worker's, the server's), where a plain
 * sig_atomic_t is a data race (TSan saw one, now and then, when SIGTERM hit
 * another thread); lock-free atomics are async-signal-safe. */
static atomic_int g_signalled;
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal flag must be lock-free");
static atomic_int g_stop;
static atomic_int g_seq_base; /* current phase's sequence length */
static atomic_int g_phase;    /* current phase (demo_phase_eval says what it does) */
static uint64_t g_start_ns;

/* ------------------------------------------------------------ signals */

static void on_signal(int sig) {
  (void)sig;
  if (atomic_exchange(&g_signalled, 1)) {
    _exit(130);
  }
}

static int install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0) {
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ helpers */

static void sleep_ns(uint64_t ns) {
  struct timespec ts;
  ts.tv_sec = (time_t)(ns / 1000000000u);
  ts.tv_nsec = (long)(ns % 1000000000u);
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !atomic_load(&g_stop)) {
  }
}

/* Stands in for the kernels of a step: a sleep, so the demo stays light on
 * a shared machine. */
static void simulate_compute(long us) {
  if (us > 0) {
    sleep_ns((uint64_t)us * 1000u);
  }
}

/* The compute callback of demo_train_step: half the sleep after the
 * forward pass, the rest after the backward pass. */
static void worker_compute(void *user, int phase) {
  const worker *w = user;
  long us = w->opts->compute_us;
  simulate_compute(phase == 0 ? us / 2 : us - us / 2);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
    int base = atomic_load_explicit(&g_seq_base, memory_order_relaxed);
    int phase = atomic_load_explicit(&g_phase, memory_order_relaxed);
    int s = demo_seq_len(base, &w->rng);
    uint64_t failed;
    if (demo_phase_eval[phase]) {
      failed = demo_eval_step(w->pool, s, &w->eval, worker_compute, w);
    } else {
      demo_eval_end(w->pool, &w->eval); /* an evaluation phase ended: its metrics */
      failed = demo_train_step(w->pool, s, worker_compute, w);
    }
    if (failed > 0) {
      atomic_fetch_add_explicit(&w->failed_allocs, failed, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&w->steps, 1, memory_order_relaxed);
  }
  demo_eval_end(w->pool, &w->eval);
  return NULL;
}

/* ------------------------------------------------------------ reporting */

/* Class sizes in a snapshot, not counting the ones draining after retire. */
static size_t live_classes(const aa_pool_stats *st, uint64_t *out) {
  size_t n = 0;
  uint32_t i;
  for (i = 0; i < st->class_count && i < AA_MAX_CLASSES; i++) {
    if (!st->classes[i].retiring) {
      out[n++] = st->classes[i].block_size;
    }
  }
  return n;
}

static bool has_size(const uint64_t *v, size_t n, uint64_t x) {
  size_t i;
  for (i = 0; i < n; i++) {
    if (v[i] == x) {
      return true;
    }
  }
  return false;
}

static double mib(uint64_t b) {
  return (double)b / (1024.0 * 1024.0);
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: adaptalloc-demo [--seconds N] [--threads N] [--compute-us N] [--phase S]\n"
          "                       [--quiet] [--help] [--version]\n"
          "  A trainer-like workload on the adaptalloc runtime's pool (CUDA device 0\n"
          "  when a GPU is present, else the host pool): weights allocated once, each\n"
          "  step allocating Q/K/V, attention scores, softmax and activations sized by a\n"
          "  sequence length that changes during the run. Prints one line a second.\n"
          "  --seconds N     run N seconds (default: until Ctrl-C / SIGTERM)\n"
          "  --threads N     workers sharing the pool (default 2, 1..%d)\n"
          "  --compute-us N  simulated compute per step in microseconds (default 1000;\n"
          "                  0 makes the run allocation-bound)\n"
          "  --phase S       seconds per sequence length (default 4)\n"
          "  --quiet         only the final summary line (and, when ADAPTALLOC_HTTP\n"
          "                  asks for port 0, the server's address on stderr)\n"
          "  --version       print the version and exit\n"
          "  Values go as the next word or after '=' (--seconds=30). Exit codes: 0 ok,\n"
          "  1 the run failed, 2 a bad command line.\n"
          "The runtime reads ADAPTALLOC_* from the environment (see README).\n",
          DEMO_MAX_THREADS);
}

static bool parse_num(const char *s, double lo, double hi, double *out) {
  char *end = NULL;
  double v;
  if (s == NULL || *s == '\0') {
    return false;
  }
  errno = 0;
  v = strtod(s, &end);
  if (errno != 0 || *end != '\0' || !(v >= lo && v <= hi)) {
    return false;
  }
  *out = v;
  return true;
}

/* Returns 0 to run, 1 for --help, 2 for --version, -1 for a bad command
 * line. Options take their value as the next word or after '='
 * (--seconds 30, --seconds=30). */
static int parse_args(int argc, char **argv, demo_opts *o) {
  int i;
  o->seconds = 0.0;
  o->threads = 2;
  o->quiet = false;
  o->compute_us = 1000;
  o->phase_s = 4.0;
  for (i = 1; i < argc; i++) {
    char name[32];
    const char *a = argv[i];
    const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
    const char *v;
    double d = 0.0;
    if (eq != NULL) {
      if ((size_t)(eq - a) >= sizeof name) {
        fprintf(stderr, "adaptalloc-demo: unknown option '%s'\n", a);
        return -1;
      }
      memcpy(name, a, (size_t)(eq - a));
      name[eq - a] = '\0';
      a = name;
      v = eq + 1;
    } else {
      v = i + 1 < argc ? argv[i + 1] : NULL;
    }
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0 ||
        strcmp(a, "--version") == 0 || strcmp(a, "--quiet") == 0 ||
        strcmp(a, "-q") == 0) {
      if (eq != NULL) {
        fprintf(stderr, "adaptalloc-demo: %s takes no value\n", a);
        return -1;
      }
      if (strcmp(a, "--version") == 0)
        return 2;
      if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
        return 1;
      o->quiet = true;
      continue;
    }
    if (strcmp(a, "--seconds") == 0) {
      if (!parse_num(v, 0.0, 1e9, &d)) {
        fprintf(stderr, "adaptalloc-demo: --seconds needs a number >= 0 (0 = until Ctrl-C)\n");
        return -1;
      }
      o->seconds = d;
    } else if (strcmp(a, "--threads") == 0) {
      if (!parse_num(v, 1, DEMO_MAX_THREADS, &d) || d != (double)(int)d) {
        fprintf(stderr, "adaptalloc-demo: --threads needs an integer 1..%d\n", DEMO_MAX_THREADS);
        return -1;
      }
      o->threads = (int)d;
    } else if (strcmp(a, "--compute-us") == 0) {
      if (!parse_num(v, 0, 10000000, &d) || d != (double)(long)d) {
        fprintf(stderr, "adaptalloc-demo: --compute-us needs an integer 0..10000000\n");
        return -1;
      }
      o->compute_us = (long)d;
    } else if (strcmp(a, "--phase") == 0) {
      if (!parse_num(v, 0.1, 1e6, &d)) {
        fprintf(stderr, "adaptalloc-demo: --phase needs a number of seconds >= 0.1\n");
        return -1;
      }
      o->phase_s = d;
    } else if (argv[i][0] != '-') {
      fprintf(stderr, "adaptalloc-demo: unexpected argument '%s' (the demo takes options only)\n",
              argv[i]);
      return -1;
    } else {
      fprintf(stderr, "adaptalloc-demo: unknown option '%s'\n", argv[i]);
      return -1;
    }
    if (eq == NULL)
      i++; /* the value was the next word */
  }
  return 0;
}

/* Whether ADAPTALLOC_HTTP asks for port 0, a port the system picks (read
 * as the runtime reads it; unset means its default port). */
static bool port_chosen_by_system(void) {
  aa_runtime_config cfg;
  aa_http_addr a;
  return aa_runtime_config_from_env(&cfg) == AA_OK && cfg.http != NULL &&
         aa_http_parse_address(cfg.http, -1, &a, NULL, 0) == AA_OK && !a.off && a.port == 0;
}

/* The runtime's pool: the first GPU when there is one, else the host. */
static aa_pool *open_pool(const char **where) {
  aa_pool *pool = NULL;
  if (aa_cuda_device_count() > 0) {
    pool = aa_runtime_pool(AA_BACKEND_DEVICE, 0);
    *where = "cuda device 0";
    if (pool == NULL) {
      fprintf(stderr, "adaptalloc-demo: no pool for CUDA device 0; using the host pool\n");
    }
  }
  if (pool == NULL) {
    pool = aa_runtime_pool(AA_BACKEND_HOST, -1);
    *where = "host";
  }
  return pool;
}

int main(int argc, char **argv) {
  demo_opts opts;
  aa_runtime_config rcfg;
  worker *workers = NULL;
  aa_pool_stats *st = NULL;
  uint64_t *cls_prev = NULL;
  uint64_t *cls_now = NULL;
  size_t n_prev = 0;
  aa_pool *pool = NULL;
  const char *where = "?";
  char addr[80];
  bool have_addr = false;
  demo_model m;
  bool model_ok = false;
  bool runtime_on = false;
  int started = 0;
  int status = 1;
  int rc;
  int i;
  uint64_t last_ns;
  uint64_t last_steps = 0;
  uint64_t last_allocs = 0;
  uint64_t last_hits = 0;
  uint64_t last_misses = 0;
  uint64_t added = 0;
  uint64_t retired = 0;
  uint64_t total_steps = 0;
  uint64_t failed = 0;
  double elapsed_s = 0.0;

  memset(&m, 0, sizeof m);
  rc = parse_args(argc, argv, &opts);
  if (rc == 2) {
    printf("adaptalloc-demo %d.%d.%d\n", AA_VERSION_MAJOR, AA_VERSION_MINOR,
           AA_VERSION_PATCH);
    return 0;
  }
  if (rc == 1) {
    usage(stdout);
    return 0;
  }
  if (rc != 0) {
    fprintf(stderr, "(adaptalloc-demo --help for usage)\n");
    return 2; /* a usage error */
  }
  if (install_signals() != 0) {
    perror("adaptalloc-demo: sigaction");
    return 1;
  }
  st = malloc(sizeof *st);
  cls_prev = calloc(AA_MAX_CLASSES, sizeof *cls_prev);
  cls_now = calloc(AA_MAX_CLASSES, sizeof *cls_now);
  workers = calloc((size_t)opts.threads, sizeof *workers);
  if (st == NULL || cls_prev == NULL || cls_now == NULL || workers == NULL) {
    fprintf(stderr, "adaptalloc-demo: out of memory\n");
    goto out;
  }

  aa_runtime_config_init(&rcfg);
  rcfg.quiet = opts.quiet;
  rc = aa_runtime_init(&rcfg);
  if (rc != AA_OK) {
    fprintf(stderr, "adaptalloc-demo: aa_runtime_init: %s\n", aa_strerror(rc));
    goto out;
  }
  runtime_on = true;
  pool = open_pool(&where);
  if (pool == NULL) {
    fprintf(stderr, "adaptalloc-demo: the runtime has no pool for the host either\n");
    goto out;
  }
  rc = demo_model_alloc(pool, &m);
  model_ok = true; /* model_free frees what was allocated, even after a failure */
  if (rc != AA_OK) {
    fprintf(stderr, "adaptalloc-demo: allocating the weights: %s\n", aa_strerror(rc));
    goto out;
  }
  if (aa_pool_stats_get_opts(pool, st, AA_STATS_NO_SIZES) == AA_OK) {
    n_prev = live_classes(st, cls_prev);
  }
  have_addr = aa_runtime_http_address(addr, sizeof addr) == AA_OK;
  if (opts.quiet && have_addr && port_chosen_by_system()) {
    /* the only way to find a server on a port the system picked, and the
     * token file it made (none set), which the quiet runtime does not name */
    char token_file[1200];
    bool have_token = aa_runtime_token_file(token_file, sizeof token_file) == AA_OK;
    fprintf(stderr, "adaptalloc-demo: http://%s/ (port chosen by the system)%s%s\n", addr,
            have_token ? "; changes need the token in " : "", have_token ? token_file : "");
    fflush(stderr);
  }
  if (!opts.quiet) {
    printf("adaptalloc-demo: pool '%s' on %s, %d threads, %d layers, hidden %d, batch %d, "
           "weights+optimiser %.1f MiB, seq",
           aa_pool_name(pool), where, opts.threads, DEMO_LAYERS, DEMO_HIDDEN, DEMO_BATCH,
           mib(m.bytes));
    for (i = 0; i < (int)DEMO_PHASES; i++) {
      printf("%c%d", i == 0 ? ' ' : ',', demo_seq_schedule[i]);
    }
    printf(" (next every %.1f s)", opts.phase_s);
    if (have_addr) {
      printf(", http://%s/", addr);
    }
    printf("\n");
    fflush(stdout);
  }

  atomic_store(&g_seq_base, demo_seq_schedule[0]);
  g_start_ns = aa_now_ns();
  for (i = 0; i < opts.threads; i++) {
    workers[i].index = i;
    workers[i].pool = pool;
    workers[i].opts = &opts;
    workers[i].rng = 0x64656d6fu + (uint64_t)i * 7919u;
    atomic_init(&workers[i].steps, 0);
    atomic_init(&workers[i].failed_allocs, 0);
    if (pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]) != 0) {
      fprintf(stderr, "adaptalloc-demo: pthread_create failed\n");
      goto stop;
    }
    started++;
  }

  last_ns = g_start_ns;
  while (!atomic_load(&g_signalled)) {
    uint64_t now;
    uint64_t steps = 0;
    uint64_t dh;
    uint64_t dm;
    size_t n_now;
    size_t k;
    double dt;
    double since = 0.0;
    size_t phase;

    sleep_ns(50u * 1000u * 1000u);
    now = aa_now_ns();
    since = (double)(now - g_start_ns) / 1e9;
    phase = (size_t)(since / opts.phase_s) % DEMO_PHASES;
    atomic_store_explicit(&g_seq_base, demo_seq_schedule[phase], memory_order_relaxed);
    atomic_store_explicit(&g_phase, (int)phase, memory_order_relaxed);
    if (opts.seconds > 0.0 && since >= opts.seconds) {
      break;
    }
    if (now - last_ns < 1000000000u) {
      continue;
    }
    dt = (double)(now - last_ns) / 1e9;
    last_ns = now;
    for (i = 0; i < started; i++) {
      steps += atomic_load_explicit(&workers[i].steps, memory_order_relaxed);
    }
    if (aa_pool_stats_get_opts(pool, st, AA_STATS_NO_SIZES) != AA_OK) {
      continue;
    }
    n_now = live_classes(st, cls_now);
    for (k = 0; k < n_now; k++) {
      added += has_size(cls_prev, n_prev, cls_now[k]) ? 0 : 1;
    }
    for (k = 0; k < n_prev; k++) {
      retired += has_size(cls_now, n_now, cls_prev[k]) ? 0 : 1;
    }
    memcpy(cls_prev, cls_now, n_now * sizeof *cls_now);
    n_prev = n_now;
    dh = st->cache_hits - last_hits;
    dm = st->cache_misses - last_misses;
    if (!opts.quiet) {
      printf("[%5.0fs] steps/s %7.1f  allocs/s %8.0f  seq %3d  in_use %8.1f MiB  "
             "reserved %8.1f MiB  hit %5.1f%%  classes %u (+%llu -%llu)  ooms %llu\n",
             since, (double)(steps - last_steps) / dt, (double)(st->allocs - last_allocs) / dt,
             atomic_load_explicit(&g_seq_base, memory_order_relaxed), mib(st->bytes_in_use),
             mib(st->bytes_reserved), dh + dm > 0 ? 100.0 * (double)dh / (double)(dh + dm) : 100.0,
             (unsigned)n_now, (unsigned long long)added, (unsigned long long)retired,
             (unsigned long long)st->ooms);
      fflush(stdout);
    }
    last_steps = steps;
    last_allocs = st->allocs;
    last_hits = st->cache_hits;
    last_misses = st->cache_misses;
  }

stop:
  atomic_store(&g_stop, 1);
  for (i = 0; i < started; i++) {
    pthread_join(workers[i].tid, NULL);
    total_steps += atomic_load(&workers[i].steps);
    failed += atomic_load(&workers[i].failed_allocs);
  }
  elapsed_s = (double)(aa_now_ns() - g_start_ns) / 1e9;
  if (started == opts.threads) {
    status = 0;
  }
  if (aa_pool_stats_get_opts(pool, st, AA_STATS_NO_SIZES) == AA_OK) {
    printf("adaptalloc-demo: %s%llu steps in %.1f s (%.1f steps/s), %llu allocs, "
           "peak in_use %.1f MiB, peak reserved %.1f MiB, hit %.1f%%, failed allocs %llu, "
           "invalid frees %llu\n",
           atomic_load(&g_signalled) ? "interrupted; " : "", (unsigned long long)total_steps, elapsed_s,
           elapsed_s > 0 ? (double)total_steps / elapsed_s : 0.0, (unsigned long long)st->allocs,
           mib(st->peak_bytes_in_use), mib(st->peak_bytes_reserved),
           st->cache_hits + st->cache_misses > 0
               ? 100.0 * (double)st->cache_hits / (double)(st->cache_hits + st->cache_misses)
               : 100.0,
           (unsigned long long)failed, (unsigned long long)st->invalid_frees);
    fflush(stdout);
  }

out:
  if (model_ok) {
    demo_model_free(pool, &m);
  }
  if (runtime_on) {
    aa_runtime_shutdown();
  }
  free(workers);
  free(cls_now);
  free(cls_prev);
  free(st);
  return status;
}
