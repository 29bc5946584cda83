/*
 * testserver.c — aa_http_testserver: the real HTTP server over real core
 * pools on the host backend, with a workload thread allocating and freeing
 * so the dashboard has something to draw, and a provider whose policy
 * handling is adapt's real parser, merge patch and aa_policy_apply. For the
 * browser test (tests/browser/dashboard.test.mjs) and for trying the page by
 * hand; not the runtime (adaptalloc-demo serves the same page for real).
 *
 *   aa_http_testserver [--address 127.0.0.1:0] [--token T] [--seconds N]
 *                      [--watch-stdin] [--stats-cache-ms MS]
 *                      [--hot] [--hot-cpu C] [--server-cpu C] [--no-store]
 *
 * --no-store serves no history and no runs (503, as the runtime does with
 * ADAPTALLOC_DB=off): for the dashboard's empty states.
 *
 * --hot replaces the paced workload by a hot allocation loop (alloc/free of
 * a few small sizes on pool device0, as fast as it goes) that prints
 * "HOT <unix ms> <ops per wall second> <ops per CPU second>" once a second: bench/wrk/run.sh measures
 * its slowdown while wrk hammers /stats. --hot-cpu / --server-cpu pin the
 * loop and the server's polling thread to one CPU each.
 *
 * Prints "PORT <n>" on stdout once listening; runs until SIGTERM/SIGINT,
 * --seconds have passed, or (with --watch-stdin) stdin closes, so a parent
 * that dies takes it along. With --watch-stdin, a line "oom" makes pool host
 * fail a request (1 PiB, which no backend serves): its OOM observer's
 * record is /stats' last_oom and GET /oom's last, as in the runtime. A PUT
 * /policy must be complete, as the runtime's.
 *
 * One program, the browser test's server, kept in one file though it runs
 * past 600 lines: its workload, provider and main share the pools and the
 * policy in force.
 */
#include <errno.h>
#include <sched.h>
#include <poll.h>
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
#include "adaptalloc/policy.h"
#include "adaptalloc/internal/util.h"

#define NPOOLS 3 /* device0, host, and a region's pool (device0:kv_cache) */
#define NLIVE 2048
#define NRESIDENT 16 /* large blocks live all along */
#define RESIDENT_BYTES ((size_t)1 << 20)
#define NSNAP 600
#define NCHANGE 200

typedef struct change {
  int64_t time_ms;
  uint64_t old_version;
  uint64_t new_version;
  char source[16];
  char reason[128];
  char *doc; /* the policy document installed (malloc'd), NULL if none */
} change;

typedef struct snap {
  int64_t time_ms;
  int pool;
  uint64_t in_use;
  uint64_t reserved;
  uint64_t large_in_use;
  uint64_t large_reserved;
} snap;

typedef struct server {
  aa_backend *backend;
  aa_pool *pools[NPOOLS];
  const char *policy_names[NPOOLS]; /* the policy's pool section of each */
  pthread_mutex_t mu;               /* policy, history */
  aa_policy *policy;
  change changes[NCHANGE];
  size_t nchanges;
  snap snaps[NSNAP];
  size_t nsnaps;
  atomic_bool stop;
  pthread_mutex_t oom_mu; /* the pools' out-of-memory records */
  uint64_t oom_count;
  bool have_oom;
  aa_oom_info last_oom;
} server;

static server S;
static volatile sig_atomic_t got_signal;

static void on_signal(int sig) {
  (void)sig;
  got_signal = 1;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p != NULL) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

/* ------------------------------------------------------------ out of memory */

/* Every pool's OOM observer, as the runtime's (runtime_oom.c): copies the
 * record for /stats' last_oom and GET /oom. */
static void observe_oom(void *user, aa_pool *pool, const aa_oom_info *info) {
  (void)user;
  (void)pool;
  pthread_mutex_lock(&S.oom_mu);
  S.oom_count++;
  S.last_oom = *info;
  S.have_oom = true;
  pthread_mutex_unlock(&S.oom_mu);
}

/* The line "oom" on stdin: a request no backend can serve (1 PiB, beyond
 * the address space) on pool host, so the browser test sees a real record
 * of the pool as it is. */
static void provoke_oom(void) {
  void *p = aa_alloc(S.pools[1], (size_t)1 << 50, NULL);
  if (p != NULL) /* cannot happen on a 47-bit address space */
    aa_free(S.pools[1], p, 0, NULL);
}

/* The record as JSON ("null" when none), malloc'd. */
static char *last_oom_json(uint64_t *count) {
  aa_oom_info rec;
  bool have;
  char buf[4096];
  pthread_mutex_lock(&S.oom_mu);
  rec = S.last_oom;
  have = S.have_oom;
  if (count != NULL)
    *count = S.oom_count;
  pthread_mutex_unlock(&S.oom_mu);
  if (aa_oom_info_json(have ? &rec : NULL, buf, sizeof buf) >= sizeof buf)
    return NULL;
  return dup_n(buf, strlen(buf));
}

static int oom_json(void *user, int64_t limit, char **out, size_t *len) {
  uint64_t count = 0;
  char *rec = last_oom_json(&count);
  size_t cap;
  (void)user;
  *out = NULL;
  *len = 0;
  if (limit > 0) {
    free(rec);
    return AA_ENOTSUP; /* no store here */
  }
  if (rec == NULL)
    return AA_ENOMEM;
  cap = strlen(rec) + 64;
  *out = malloc(cap);
  if (*out == NULL) {
    free(rec);
    return AA_ENOMEM;
  }
  *len = (size_t)snprintf(*out, cap, "{\"count\":%llu,\"last\":%s}", (unsigned long long)count,
                          rec);
  free(rec);
  return AA_OK;
}

/* ------------------------------------------------------------ workload */

static uint64_t rng(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* A mix: an odd hot size (3000 B), a spread of small sizes, some mid ones,
 * the occasional large one; the number of live blocks swings slowly so the
 * memory chart moves. */
static size_t pick_size(uint64_t *s) {
  uint64_t r = rng(s) % 100;
  if (r < 40)
    return 3000;
  if (r < 75)
    return 256 + rng(s) % 8192;
  if (r < 99)
    return 16384 + rng(s) % (256 * 1024);
  return (size_t)(1u << 20) + rng(s) % (2u << 20);
}

static int hot_cpu = -1;

static void pin_to(int cpu) {
  cpu_set_t set;
  if (cpu < 0)
    return;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    fprintf(stderr, "testserver: cannot pin to CPU %d: %s\n", cpu,
            strerror(errno));
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The allocator's hot path: a window of 64 live blocks of a few small sizes,
 * one free and one alloc per step. */
static void *hot_loop(void *arg) {
  static const size_t sizes[8] = {512, 1024, 3000, 4096, 700, 8192, 2048, 1536};
  void *live[64] = {0};
  uint64_t ops = 0;
  uint64_t i = 0;
  int64_t t0 = now_ms();
  double c0 = thread_cpu_s();
  (void)arg;
  pin_to(hot_cpu);
  while (!atomic_load_explicit(&S.stop, memory_order_relaxed)) {
    unsigned k;
    for (k = 0; k < 4096; k++, i++) {
      size_t slot = i & 63;
      if (live[slot] != NULL)
        aa_free(S.pools[0], live[slot], 0, NULL);
      live[slot] = aa_alloc(S.pools[0], sizes[(i >> 6) & 7], NULL);
    }
    ops += 4096;
    {
      int64_t t = now_ms();
      if (t - t0 >= 1000) {
        double c = thread_cpu_s();
        /* per wall second, and per second of this thread's CPU time (which
         * leaves out time the scheduler gave to other processes) */
        printf("HOT %lld %.0f %.0f\n", (long long)t,
               (double)ops * 1000.0 / (double)(t - t0),
               c > c0 ? (double)ops / (c - c0) : 0.0);
        fflush(stdout);
        ops = 0;
        t0 = t;
        c0 = c;
      }
    }
  }
  for (i = 0; i < 64; i++)
    if (live[i] != NULL)
      aa_free(S.pools[0], live[i], 0, NULL);
  return NULL;
}

static void *workload(void *arg) {
  static void *live[NPOOLS][NLIVE];
  static size_t sizes[NPOOLS][NLIVE];
  /* A resident set of large blocks, live for the server's whole life, so
   * the large-segment map always has used pieces however low the triangle
   * wave below has drained the pools. */
  static void *resident[NPOOLS][NRESIDENT];
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  unsigned tick = 0;
  (void)arg;
  for (int p = 0; p < NPOOLS; p++)
    for (int r = 0; r < NRESIDENT; r++)
      resident[p][r] = aa_alloc(S.pools[p], RESIDENT_BYTES, NULL);
  while (!atomic_load(&S.stop)) {
    /* target fill follows a slow triangle wave */
    unsigned phase = tick % 120;
    unsigned target = (phase < 60 ? phase : 120 - phase) * (NLIVE / 60);
    int p;
    for (p = 0; p < NPOOLS; p++) {
      unsigned i;
      for (i = 0; i < 600; i++) {
        size_t k = rng(&seed) % NLIVE;
        bool want = k < target + (p ? NLIVE / 8 : 0);
        if (live[p][k] != NULL && (!want || rng(&seed) % 4 == 0)) {
          aa_free(S.pools[p], live[p][k], sizes[p][k], NULL);
          live[p][k] = NULL;
        }
        if (live[p][k] == NULL && want) {
          sizes[p][k] = pick_size(&seed);
          live[p][k] = aa_alloc(S.pools[p], sizes[p][k], NULL);
        }
      }
    }
    tick++;
    usleep(50 * 1000);
  }
  for (int p = 0; p < NPOOLS; p++)
    for (size_t k = 0; k < NLIVE; k++)
      if (live[p][k] != NULL)
        aa_free(S.pools[p], live[p][k], sizes[p][k], NULL);
  for (int p = 0; p < NPOOLS; p++)
    for (int r = 0; r < NRESIDENT; r++)
      if (resident[p][r] != NULL)
        aa_free(S.pools[p], resident[p][r], RESIDENT_BYTES, NULL);
  return NULL;
}

/* ------------------------------------------------------------ provider */

static int pool_stats(void *user, aa_pool_stats **out, size_t *n) {
  aa_pool_stats *a = calloc(NPOOLS, sizeof *a);
  int p;
  (void)user;
  *out = NULL;
  *n = 0;
  if (a == NULL)
    return AA_ENOMEM;
  for (p = 0; p < NPOOLS; p++) {
    int rc = aa_pool_stats_get(S.pools[p], &a[p]);
    if (rc != AA_OK) {
      free(a);
      return rc;
    }
  }
  *out = a;
  *n = NPOOLS;
  return AA_OK;
}

static uint64_t policy_version(void) {
  uint64_t v;
  pthread_mutex_lock(&S.mu);
  v = aa_policy_version(S.policy);
  pthread_mutex_unlock(&S.mu);
  return v;
}

/* /stats' "adapt" object. This server runs no policy loop, so it serves a
 * fixed audit in the runtime's shape (docs/stats.md; the runtime's writer is
 * tested in test_runtime_env): an applied add with its prediction and its
 * measurement, a retire the replay rejected, a trim with the bytes it gave
 * back and its measurement, and an applied add not yet measured with
 * nothing replayed. The dashboard's "Loop decisions" panel must show all
 * four. After the applied add the pool grew by 10 MiB on the large path and
 * its small classes by 1 MiB while their demand grew by 2 MiB: the panel
 * must show the small classes' -1.00 MiB net of demand (the prediction's
 * scope), not the pool's +10.00 MiB nor the raw +1.00 MiB. */
static const char ADAPT_JSON[] =
    "{\"enabled\":true,\"steps\":42,\"decisions\":4,\"classes_added\":2,"
    "\"classes_retired\":0,\"grows\":0,\"trims\":1,\"bytes_trimmed\":536870912,"
    "\"apply_failures\":0,\"rejected_by_replay\":1,\"audit\":["
    "{\"pool\":\"device0\",\"step\":30,\"kind\":\"add_class\",\"block_size\":3072,"
    "\"applied\":true,\"predicted\":{\"peak_reserved_before\":8388608,"
    "\"peak_reserved_after\":6291456,\"backend_calls_before\":12,"
    "\"backend_calls_after\":9},\"measured\":{\"reserved_before\":8388608,"
    "\"reserved_after\":18874368,\"small_reserved_before\":8388608,"
    "\"small_reserved_after\":9437184,\"small_requested_before\":6291456,"
    "\"small_requested_after\":8388608,\"after_steps\":3}},"
    "{\"pool\":\"device0\",\"step\":36,\"kind\":\"retire_class\",\"block_size\":1536,"
    "\"applied\":false,\"predicted\":{\"peak_reserved_before\":6291456,"
    "\"peak_reserved_after\":6553600,\"backend_calls_before\":9,"
    "\"backend_calls_after\":11},\"measured\":null},"
    "{\"pool\":\"device0\",\"step\":38,\"kind\":\"trim\",\"block_size\":0,"
    "\"applied\":true,\"released\":536870912,\"predicted\":null,"
    "\"measured\":{\"reserved_before\":1073741824,\"reserved_after\":603979776,"
    "\"small_reserved_before\":1073741824,\"small_reserved_after\":603979776,"
    "\"after_steps\":3}},"
    "{\"pool\":\"host\",\"step\":41,\"kind\":\"add_class\",\"block_size\":12288,"
    "\"applied\":true,\"predicted\":null,\"measured\":null}]}";

static int stats_json(void *user, const char *pool, char **out, size_t *len) {
  aa_pool_stats *a = NULL;
  size_t n = 0;
  size_t cap = 1 << 20;
  size_t off = 0;
  char *buf;
  size_t i;
  bool found = pool == NULL;
  int rc = pool_stats(user, &a, &n);

  *out = NULL;
  if (rc != AA_OK)
    return rc;
  buf = malloc(cap);
  if (buf == NULL) {
    free(a);
    return AA_ENOMEM;
  }
  off += (size_t)snprintf(buf + off, cap - off,
                          "{\"model\":\"testserver\",\"policy_version\":%llu,"
                          "\"pools\":[",
                          (unsigned long long)policy_version());
  for (i = 0; i < n; i++) {
    if (pool != NULL && strcmp(pool, a[i].name) != 0)
      continue;
    if (i > 0 && pool == NULL)
      buf[off++] = ',';
    found = true;
    off += aa_pool_stats_json(&a[i], buf + off, cap - off - 8);
    if (off >= cap - 8) {
      free(a);
      free(buf);
      return AA_ENOMEM;
    }
  }
  {
    char *rec = last_oom_json(NULL);
    if (rec == NULL) {
      free(a);
      free(buf);
      return AA_ENOMEM;
    }
    off += (size_t)snprintf(buf + off, cap - off, "],\"adapt\":%s,\"last_oom\":%s}", ADAPT_JSON,
                            rec);
    free(rec);
  }
  free(a);
  if (off >= cap) {
    free(buf);
    return AA_ENOMEM;
  }
  if (!found) {
    free(buf);
    return AA_ENOENT;
  }
  *out = buf;
  *len = off;
  return AA_OK;
}

static int metrics_extra(void *user, char **out, size_t *len) {
  char buf[256];
  int n;
  (void)user;
  n = snprintf(buf, sizeof buf,
               "# HELP adaptalloc_policy_version Version of the policy in "
               "force.\n# TYPE adaptalloc_policy_version gauge\n"
               "adaptalloc_policy_version %llu\n",
               (unsigned long long)policy_version());
  *out = dup_n(buf, (size_t)n);
  *len = (size_t)n;
  return *out != NULL ? AA_OK : AA_ENOMEM;
}

static int policy_get(void *user, char **json, size_t *len, uint64_t *version) {
  (void)user;
  pthread_mutex_lock(&S.mu);
  *json = aa_policy_to_json(S.policy);
  *version = aa_policy_version(S.policy);
  pthread_mutex_unlock(&S.mu);
  if (*json == NULL)
    return AA_ENOMEM;
  *len = strlen(*json);
  return AA_OK;
}

static void log_change(uint64_t old_v, uint64_t new_v, const char *source,
                       const char *reason, const aa_policy *doc) {
  change *c;
  if (S.nchanges == NCHANGE) {
    free(S.changes[0].doc);
    memmove(&S.changes[0], &S.changes[1], (NCHANGE - 1) * sizeof S.changes[0]);
    S.nchanges--;
  }
  c = &S.changes[S.nchanges++];
  c->time_ms = now_ms();
  c->old_version = old_v;
  c->new_version = new_v;
  snprintf(c->source, sizeof c->source, "%s", source);
  snprintf(c->reason, sizeof c->reason, "%s", reason);
  c->doc = doc != NULL ? aa_policy_to_json(doc) : NULL;
}

static int install(aa_policy *next, const aa_http_policy_change *ch,
                   const char *what, uint64_t *nv, char *err, size_t errcap) {
  uint64_t old_v = aa_policy_version(S.policy);
  char reason[128];
  int p;
  int rc = AA_OK;

  if (ch->has_if_match && ch->if_match != old_v) {
    snprintf(err, errcap, "version %llu is stale: version %llu is in force",
             (unsigned long long)ch->if_match, (unsigned long long)old_v);
    return AA_ESTALE;
  }
  for (p = 0; p < NPOOLS; p++) {
    aa_class_spec specs[AA_MAX_CLASSES];
    size_t n = 0;
    rc = aa_policy_pool_config(next, S.policy_names[p], NULL, specs,
                               AA_MAX_CLASSES, &n);
    if (rc != AA_OK) {
      snprintf(err, errcap, "pools.%s: %s", S.policy_names[p], aa_strerror(rc));
      return rc;
    }
  }
  for (p = 0; p < NPOOLS && rc == AA_OK; p++) {
    rc = aa_policy_apply(next, S.policy_names[p], S.pools[p]);
    if (rc != AA_OK)
      snprintf(err, errcap, "pools.%s: cannot apply to the live pool: %s",
               S.policy_names[p], aa_strerror(rc));
  }
  if (rc != AA_OK)
    return rc;
  aa_policy_set_version(next, old_v + 1);
  aa_policy_free(S.policy);
  S.policy = next;
  *nv = old_v + 1;
  snprintf(reason, sizeof reason, "%s /policy from %s", what,
           ch->client != NULL ? ch->client : "?");
  log_change(old_v, old_v + 1, ch->source, reason, S.policy);
  return AA_OK;
}

static int policy_put(void *user, const aa_http_policy_change *ch, uint64_t *nv,
                      char *err, size_t errcap) {
  aa_policy *next = NULL;
  int rc;
  (void)user;
  rc = aa_policy_parse(ch->body, ch->len, &next, err, errcap);
  if (rc != AA_OK)
    return rc;
  {
    /* a PUT carries a complete policy, as the runtime's (docs/policy.md) */
    char missing[AA_POLICY_ERR_CAP];
    size_t nmiss = 0;
    if (aa_policy_missing(ch->body, ch->len, &nmiss, missing, sizeof missing) == AA_OK &&
        nmiss > 0) {
      snprintf(err, errcap,
               "PUT /policy needs a complete policy: missing %s (use PATCH to change part)",
               missing);
      aa_policy_free(next);
      return AA_EINVAL;
    }
  }
  pthread_mutex_lock(&S.mu);
  rc = install(next, ch, "PUT", nv, err, errcap);
  pthread_mutex_unlock(&S.mu);
  if (rc != AA_OK)
    aa_policy_free(next);
  return rc;
}

static int policy_patch(void *user, const aa_http_policy_change *ch,
                        uint64_t *nv, char *err, size_t errcap) {
  aa_policy *next = NULL;
  int rc;
  (void)user;
  pthread_mutex_lock(&S.mu);
  rc = aa_policy_merge_patch(S.policy, ch->body, ch->len, &next, err, errcap);
  if (rc == AA_OK)
    rc = install(next, ch, "PATCH", nv, err, errcap);
  pthread_mutex_unlock(&S.mu);
  if (rc != AA_OK)
    aa_policy_free(next);
  return rc;
}

/* The store's /history shape; step keeps the last snapshot of each pool in
 * each slice of time, policies adds each change's document. */
static int history_json(void *user, const aa_http_history_query *q, char **out,
                        size_t *len) {
  aa__buf b;
  size_t i, j;
  size_t first;
  size_t shown = 0;
  (void)user;
  *out = NULL;
  *len = 0;
  if (q->run > 1)
    return AA_ENOENT;
  aa__buf_init(&b);
  pthread_mutex_lock(&S.mu);
  aa__buf_puts(&b, "{\"run\":1,\"snapshots\":[");
  first = S.nsnaps > (size_t)q->limit ? S.nsnaps - (size_t)q->limit : 0;
  for (i = first; i < S.nsnaps; i++) {
    const snap *s = &S.snaps[i];
    bool later = false;
    if (q->since >= 0 && s->time_ms < q->since)
      continue;
    for (j = i + 1; q->step > 0 && j < S.nsnaps && !later; j++)
      later = S.snaps[j].pool == s->pool &&
              S.snaps[j].time_ms / q->step == s->time_ms / q->step;
    if (later)
      continue;
    aa__buf_printf(&b,
                   "%s{\"ts_ms\":%lld,\"pool\":\"%s\",\"bytes_in_use\":%llu,"
                   "\"bytes_reserved\":%llu,\"large_bytes_in_use\":%llu,"
                   "\"large_bytes_reserved\":%llu}",
                   shown++ ? "," : "", (long long)s->time_ms, aa_pool_name(S.pools[s->pool]),
                   (unsigned long long)s->in_use, (unsigned long long)s->reserved,
                   (unsigned long long)s->large_in_use, (unsigned long long)s->large_reserved);
  }
  aa__buf_puts(&b, "],\"policy_changes\":[");
  first = S.nchanges > (size_t)q->limit ? S.nchanges - (size_t)q->limit : 0;
  shown = 0;
  for (i = first; i < S.nchanges; i++) {
    const change *c = &S.changes[i];
    if (q->since >= 0 && c->time_ms < q->since)
      continue;
    aa__buf_printf(&b,
                   "%s{\"ts_ms\":%lld,\"source\":\"%s\",\"old_version\":%llu,"
                   "\"new_version\":%llu,\"reason\":",
                   shown++ ? "," : "", (long long)c->time_ms, c->source,
                   (unsigned long long)c->old_version, (unsigned long long)c->new_version);
    aa__buf_json_cstr(&b, c->reason);
    if (q->policies && c->doc != NULL) {
      aa__buf_puts(&b, ",\"policy\":");
      aa__buf_puts(&b, c->doc);
    }
    aa__buf_puts(&b, "}");
  }
  pthread_mutex_unlock(&S.mu);
  aa__buf_puts(&b, "]}");
  return aa__buf_take(&b, out, len);
}

static int segments_json(void *user, const char *pool, char **out, size_t *len) {
  int p;
  (void)user;
  for (p = 0; p < NPOOLS; p++)
    if (strcmp(aa_pool_name(S.pools[p]), pool) == 0)
      return aa_http_segments_json(S.pools[p], out, len);
  return AA_ENOENT;
}

static int holders_json(void *user, const char *pool, unsigned top, char **out, size_t *len) {
  int p;
  (void)user;
  for (p = 0; p < NPOOLS; p++)
    if (strcmp(aa_pool_name(S.pools[p]), pool) == 0)
      return aa_http_holders_json(S.pools[p], top, out, len);
  return AA_ENOENT;
}

static int runs_json(void *user, char **out, size_t *len) {
  const char *t = "{\"runs\":[{\"id\":1,\"model\":\"testserver\"}]}";
  (void)user;
  *out = dup_n(t, strlen(t));
  *len = strlen(t);
  return *out != NULL ? AA_OK : AA_ENOMEM;
}

static void take_snapshots(void) {
  int p;
  pthread_mutex_lock(&S.mu);
  for (p = 0; p < NPOOLS; p++) {
    aa_pool_stats *st = malloc(sizeof *st);
    if (st == NULL || aa_pool_stats_get(S.pools[p], st) != AA_OK) {
      free(st);
      continue;
    }
    if (S.nsnaps == NSNAP) {
      memmove(&S.snaps[0], &S.snaps[1], (NSNAP - 1) * sizeof S.snaps[0]);
      S.nsnaps--;
    }
    S.snaps[S.nsnaps].time_ms = now_ms();
    S.snaps[S.nsnaps].pool = p;
    S.snaps[S.nsnaps].in_use = st->bytes_in_use;
    S.snaps[S.nsnaps].reserved = st->bytes_reserved;
    S.snaps[S.nsnaps].large_in_use = st->large_bytes_in_use;
    S.snaps[S.nsnaps].large_reserved = st->large_bytes_reserved;
    S.nsnaps++;
    free(st);
  }
  pthread_mutex_unlock(&S.mu);
}

/* ------------------------------------------------------------ main */

int main(int argc, char **argv) {
  const char *address = "127.0.0.1:0";
  const char *token = NULL;
  long seconds = 0;
  bool watch_stdin = false;
  bool hot = false;
  bool no_store = false;
  int server_cpu = -1;
  unsigned stats_cache_ms = 0;
  aa_http_config cfg;
  aa_http_provider prov;
  aa_http *srv = NULL;
  pthread_t worker;
  char err[512];
  int i;
  int rc;
  int64_t start = now_ms();
  int64_t last_snap = 0;

  for (i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--address") == 0 && i + 1 < argc) {
      address = argv[++i];
    } else if (strcmp(argv[i], "--token") == 0 && i + 1 < argc) {
      token = argv[++i];
    } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
      seconds = strtol(argv[++i], NULL, 10);
    } else if (strcmp(argv[i], "--watch-stdin") == 0) {
      watch_stdin = true;
    } else if (strcmp(argv[i], "--no-store") == 0) {
      no_store = true;
    } else if (strcmp(argv[i], "--hot") == 0) {
      hot = true;
    } else if (strcmp(argv[i], "--hot-cpu") == 0 && i + 1 < argc) {
      hot_cpu = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--server-cpu") == 0 && i + 1 < argc) {
      server_cpu = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--stats-cache-ms") == 0 && i + 1 < argc) {
      stats_cache_ms = (unsigned)strtoul(argv[++i], NULL, 10);
    } else {
      fprintf(stderr,
              "usage: %s [--address A] [--token T] [--seconds N] "
              "[--watch-stdin] [--stats-cache-ms MS] [--hot] [--hot-cpu C] "
              "[--server-cpu C] [--no-store]\n",
              argv[0]);
      return 2;
    }
  }
  signal(SIGTERM, on_signal);
  signal(SIGINT, on_signal);
  signal(SIGPIPE, SIG_IGN);
  pthread_mutex_init(&S.mu, NULL);
  pthread_mutex_init(&S.oom_mu, NULL);

  rc = aa_policy_default(&S.policy);
  if (rc == AA_OK)
    rc = aa_backend_host_new(&S.backend);
  if (rc != AA_OK) {
    fprintf(stderr, "testserver: %s\n", aa_strerror(rc));
    return 1;
  }
  aa_policy_set_version(S.policy, 1);
  S.policy_names[0] = "device";
  S.policy_names[1] = "host";
  S.policy_names[2] = "device"; /* a region without a section: its backend's */
  for (i = 0; i < NPOOLS; i++) {
    static const char *const names[NPOOLS] = {"device0", "host", "device0:kv_cache"};
    aa_pool_config pc;
    aa_pool_config_init(&pc);
    pc.backend = S.backend;
    pc.name = names[i];
    pc.region = i == 2 ? "kv_cache" : NULL;
    rc = aa_policy_pool_config(S.policy, S.policy_names[i], &pc, NULL, 0, NULL);
    if (rc != AA_OK && rc != AA_ERANGE) {
      fprintf(stderr, "testserver: policy: %s\n", aa_strerror(rc));
      return 1;
    }
    rc = aa_pool_new(&pc, &S.pools[i]);
    if (rc == AA_OK)
      rc = aa_policy_apply(S.policy, S.policy_names[i], S.pools[i]);
    if (rc == AA_OK)
      aa_pool_set_oom_observer(S.pools[i], observe_oom, NULL);
    if (rc != AA_OK) {
      fprintf(stderr, "testserver: pool %d: %s\n", i, aa_strerror(rc));
      return 1;
    }
  }
  log_change(0, 1, "default", "built-in default policy at start", S.policy);

  memset(&prov, 0, sizeof prov);
  prov.version = AA_HTTP_PROVIDER_VERSION;
  prov.user = &S;
  prov.stats_json = stats_json;
  prov.pool_stats = pool_stats;
  prov.metrics_extra = metrics_extra;
  prov.policy_get = policy_get;
  prov.policy_put = policy_put;
  prov.policy_patch = policy_patch;
  prov.history_json = no_store ? NULL : history_json;
  prov.runs_json = no_store ? NULL : runs_json;
  prov.segments_json = segments_json;
  prov.holders_json = holders_json;
  prov.oom_json = oom_json;
  aa_http_config_init(&cfg);
  cfg.address = address;
  cfg.token = token;
  cfg.stats_cache_ms = stats_cache_ms;
  pin_to(server_cpu); /* the polling thread inherits this affinity */
  rc = aa_http_new(&cfg, &prov, &srv, err, sizeof err);
  if (rc != AA_OK) {
    fprintf(stderr, "testserver: %s\n", err);
    return 1;
  }
  if (pthread_create(&worker, NULL, hot ? hot_loop : workload, NULL) != 0) {
    fprintf(stderr, "testserver: cannot start the workload\n");
    aa_http_destroy(srv);
    return 1;
  }
  printf("PORT %d\n", aa_http_port(srv));
  fflush(stdout);
  fprintf(stderr, "testserver: http://%s/\n", aa_http_bound_address(srv));

  while (!got_signal) {
    struct pollfd pfd = {watch_stdin ? 0 : -1, POLLIN, 0};
    int64_t t = now_ms();
    if (seconds > 0 && t - start >= seconds * 1000)
      break;
    if (t - last_snap >= 1000) {
      take_snapshots();
      last_snap = t;
    }
    if (poll(&pfd, 1, 200) > 0) {
      char b[64];
      ssize_t n = read(0, b, sizeof b);
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
        break; /* stdin closed: the parent went away */
      if (n > 0 && memmem(b, (size_t)n, "oom", 3) != NULL)
        provoke_oom();
    }
  }
  atomic_store(&S.stop, true);
  pthread_join(worker, NULL);
  aa_http_destroy(srv);
  for (i = 0; i < NPOOLS; i++)
    aa_pool_destroy(S.pools[i]);
  aa_backend_destroy(S.backend);
  aa_policy_free(S.policy);
  pthread_mutex_destroy(&S.mu);
  pthread_mutex_destroy(&S.oom_mu);
  return 0;
}
