/*
 * input.c — adaptalloc-replay's event sources behind one call (input_feed):
 * an RMM CSV log, a run's trace in the store, a histogram file or a run's
 * stored histogram (synthesised with a seed). Also `import` (input_import),
 * which writes any of them into a store database as a new run's trace
 * through the store's own writer (aa_store_trace_push), so that `run --db`
 * reads it back with aa_store_trace_foreach.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cJSON.h>

#include "adaptalloc/store.h"
#include "replay_tool.h"

#define BATCH 1024

static const char *store_err(int rc) {
  return rc == AA_ENOTSUP  ? "this adaptalloc-replay was built without the "
                             "store (-DAA_WITH_STORE=OFF); use --csv or "
                             "--histogram instead"
         : rc == AA_ENOENT ? "no such run, or not an adaptalloc database"
         : rc == AA_ESTALE ? "the database was written by a newer adaptalloc"
         : rc == AA_ECORRUPT
             ? "the database file is corrupt (SQLite: database disk image is "
               "malformed); sqlite3 FILE 'PRAGMA integrity_check' says where"
             : aa_strerror(rc);
}

/* AA_ENOENT from the store for a file that exists (main checks that it
 * does): say whether the file is no database at all or has no such run. */
static const char *store_enoent(const char *path, int64_t run_id, char *buf,
                                size_t cap) {
  char head[16];
  FILE *f = fopen(path, "rb");
  bool sqlite = false;

  if (f != NULL) {
    sqlite = fread(head, 1, sizeof head, f) == sizeof head &&
             memcmp(head, "SQLite format 3", 16) == 0;
    fclose(f);
  }
  if (!sqlite)
    snprintf(buf, cap, "not an adaptalloc database (not an SQLite file)");
  else if (run_id > 0)
    snprintf(buf, cap, "it has no run %lld (curl host:port/runs, or sqlite3 "
                       "FILE 'SELECT id FROM runs', lists them)",
             (long long)run_id);
  else
    snprintf(buf, cap, "it has no run, or is not an adaptalloc database");
  return buf;
}

static const char *store_why(const tool_input *in, int rc, char *buf, size_t cap) {
  return rc == AA_ENOENT ? store_enoent(in->path, in->run_id, buf, cap)
                         : store_err(rc);
}

/* ------------------------------------------------------------------ store */

/* The events the store wrote for the run (run_id <= 0: the latest), from
 * its runs table: what the progress bar counts down from. 0 = unknown. */
static uint64_t run_events(const char *path, int64_t run_id) {
  char *json = NULL;
  cJSON *root, *runs, *r;
  uint64_t n = 0;

  if (aa_store_runs_json(path, 1000, &json) != AA_OK || json == NULL)
    return 0;
  root = cJSON_Parse(json);
  free(json);
  runs = cJSON_GetObjectItemCaseSensitive(root, "runs");
  cJSON_ArrayForEach(r, runs) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(r, "events_written");
    if (!cJSON_IsNumber(id) || !cJSON_IsNumber(ev))
      continue;
    /* newest first: the first is the latest run */
    if (run_id <= 0 || (int64_t)id->valuedouble == run_id) {
      n = ev->valuedouble > 0 ? (uint64_t)ev->valuedouble : 0;
      break;
    }
  }
  cJSON_Delete(root);
  return n;
}

/* The pools the run (run_id <= 0: the latest) has snapshots of, from its
 * runs row, as "a, b" in buf; *run its id. False when the run is not there
 * (or the file is no store). */
static bool run_pools(const char *path, int64_t run_id, int64_t *run, char *buf, size_t cap) {
  char *json = NULL;
  cJSON *root, *r;
  bool found = false;
  size_t o = 0;

  buf[0] = '\0';
  *run = 0;
  if (aa_store_runs_json(path, 1000, &json) != AA_OK || json == NULL)
    return false;
  root = cJSON_Parse(json);
  free(json);
  cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(root, "runs")) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(r, "id");
    const cJSON *p;
    if (!cJSON_IsNumber(id) || (run_id > 0 && (int64_t)id->valuedouble != run_id))
      continue;
    /* newest first: the first is the latest run */
    found = true;
    *run = (int64_t)id->valuedouble;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(r, "pools")) {
      if (cJSON_IsString(p) && o < cap) {
        int n = snprintf(buf + o, cap - o, "%s%s", o > 0 ? ", " : "", p->valuestring);
        o = n < 0 ? cap : o + (size_t)n;
      }
    }
    break;
  }
  cJSON_Delete(root);
  return found;
}

static const char *pool_section(const char *name) {
  if (strcmp(name, "host") == 0)
    return "host";
  if (strcmp(name, "pinned") == 0)
    return "pinned";
  return NULL;
}

const char *input_run_pool(const tool_input *in) {
  char pools[256];
  int64_t run = 0;

  if (in->kind != IN_DB_TRACE && in->kind != IN_DB_HIST)
    return NULL;
  if (in->kind == IN_DB_HIST && in->hist_pool != NULL)
    return pool_section(in->hist_pool);
  if (!run_pools(in->path, in->run_id, &run, pools, sizeof pools) || pools[0] == '\0' ||
      strchr(pools, ',') != NULL)
    return NULL;
  return pool_section(pools);
}

typedef struct trace_ctx {
  bool frames; /* deliver 'c' events (tool_input.frames) */
  aa_replay_sink sink;
  void *user;
  tool_progress *prog;
  uint64_t total; /* events the run wrote (0 = unknown) */
  aa_replay_event batch[BATCH];
  size_t n;
  uint64_t index;
  int rc;        /* the sink's error, or a bad event's */
  char why[256]; /* a bad event's message */
} trace_ctx;

int trace_event_of(const aa_trace_event *ev, uint64_t index, aa_replay_event *e, char *msg,
                   size_t cap) {
  char why[200];
  int rc;

  e->time_ns = ev->time_ns;
  e->ptr = ev->ptr;
  e->size = ev->size;
  e->stream = ev->stream;
  e->thread = ev->thread;
  e->line = index;
  e->op = ev->op;
  rc = aa_replay_event_check(e, why, sizeof why);
  if (rc != AA_OK)
    snprintf(msg, cap, "trace event %llu: %s", (unsigned long long)index, why);
  return rc;
}

static int trace_cb(void *user, const aa_trace_event *ev) {
  trace_ctx *t = user;
  aa_replay_event *e = &t->batch[t->n];

  if (ev->op == 'c') { /* a call stack: not an operation */
    if (!t->frames)
      return 0;
    memset(e, 0, sizeof *e);
    e->time_ns = ev->time_ns;
    e->ptr = ev->ptr;
    e->size = ev->frame;
    e->thread = ev->thread;
    e->line = ++t->index;
    e->op = 'c';
  } else {
    t->rc = trace_event_of(ev, ++t->index, e, t->why, sizeof t->why);
    if (t->rc != AA_OK)
      return 1;
  }
  t->n++;
  if (t->n == BATCH) {
    t->rc = t->sink(t->user, t->batch, t->n);
    t->n = 0;
    if (t->rc != AA_OK)
      return 1;
    if (t->prog != NULL && (t->index & 0xffff) == 0)
      progress_update(t->prog, t->index,
                      t->total >= t->index ? t->total : 0);
  }
  return 0;
}

static int feed_store_trace(const tool_input *in, aa_replay_sink sink,
                            void *user, tool_progress *prog, char *err,
                            size_t errcap) {
  trace_ctx *t = calloc(1, sizeof *t);
  int rc;

  if (t == NULL) {
    snprintf(err, errcap, "out of memory");
    return AA_ENOMEM;
  }
  t->sink = sink;
  t->user = user;
  t->prog = prog;
  t->frames = in->frames;
  if (prog != NULL && prog->on)
    t->total = run_events(in->path, in->run_id);
  rc = aa_store_trace_read(in->path, in->run_id, trace_cb, t, t->why, sizeof t->why);
  if (rc != AA_OK && t->rc != AA_OK) {
    rc = t->rc;
    err[0] = '\0';         /* the sink has the message */
    if (t->why[0] != '\0') /* a bad event, the message is here */
      snprintf(err, errcap, "%s: %s", in->path, t->why);
  } else if (rc == AA_EPARSE && t->why[0] != '\0') {
    snprintf(err, errcap, "%s: %s", in->path, t->why); /* a row the store never wrote */
  } else if (rc != AA_OK) {
    char why[160];
    snprintf(err, errcap, "%s: cannot read the trace: %s", in->path,
             store_why(in, rc, why, sizeof why));
  } else if (t->n > 0) {
    rc = sink(user, t->batch, t->n);
    if (rc != AA_OK)
      err[0] = '\0';
  }
  if (rc == AA_OK && t->index > 0) {
    uint64_t written = 0, dropped = 0, cut = 0;
    if (aa_store_trace_lost(in->path, in->run_id, &written, &dropped, &cut) == AA_OK &&
        dropped > 0)
      fprintf(stderr, "adaptalloc-replay: note: %s: the run lost %llu trace events "
                      "(the store's ring was full or the store failed); replaying the %llu "
                      "of %llu stored that come before the first loss, a complete prefix "
                      "of the run\n",
              in->path, (unsigned long long)dropped,
              (unsigned long long)t->index, (unsigned long long)written);
  }
  if (rc == AA_OK && t->index == 0) {
    snprintf(err, errcap, "%s: the run has no trace events; replay its stored "
                          "histogram with --db %s --from-histogram, or record a trace with "
                          "ADAPTALLOC_TRACE=1",
             in->path, in->path);
    rc = AA_ENOENT;
  }
  free(t);
  return rc;
}

void input_live_from_run(tool_input *in) {
  aa_store_query q;
  char *json = NULL;
  cJSON *root, *snaps, *sn;
  struct {
    char pool[64];
    uint64_t peak;
  } pools[32];
  size_t np = 0, i;
  uint64_t sum = 0;

  aa_store_query_init(&q);
  q.run_id = in->run_id;
  q.pool = in->hist_pool;
  q.limit = AA_STORE_QUERY_MAX_LIMIT;
  if (aa_store_history_json(in->path, &q, &json) != AA_OK || json == NULL)
    return;
  root = cJSON_Parse(json);
  free(json);
  snaps = cJSON_GetObjectItemCaseSensitive(root, "snapshots");
  cJSON_ArrayForEach(sn, snaps) {
    const cJSON *pool = cJSON_GetObjectItemCaseSensitive(sn, "pool");
    const cJSON *peak = cJSON_GetObjectItemCaseSensitive(sn, "peak_bytes_in_use");
    uint64_t v;
    if (!cJSON_IsString(pool) || !cJSON_IsNumber(peak) || peak->valuedouble <= 0)
      continue;
    v = peak->valuedouble >= 1.8e19 ? UINT64_MAX / 4 : (uint64_t)peak->valuedouble;
    for (i = 0; i < np; i++)
      if (strcmp(pools[i].pool, pool->valuestring) == 0)
        break;
    if (i == np) {
      if (np == sizeof pools / sizeof pools[0])
        continue;
      snprintf(pools[np].pool, sizeof pools[np].pool, "%s", pool->valuestring);
      pools[np++].peak = 0;
    }
    if (v > pools[i].peak)
      pools[i].peak = v;
  }
  cJSON_Delete(root);
  for (i = 0; i < np; i++)
    sum = sum + pools[i].peak < sum ? UINT64_MAX / 4 : sum + pools[i].peak;
  in->synth.live_bytes = sum > UINT64_MAX / 4 ? UINT64_MAX / 4 : sum;
}

/* ------------------------------------------------------------------ csv */

static void csv_progress(void *user, uint64_t done, uint64_t total) {
  progress_update(user, done, total);
}

/* ------------------------------------------------------------------ feed */

typedef struct synth_prog {
  aa_replay_sink sink;
  void *user;
  tool_progress *prog;
  uint64_t done, total;
} synth_prog;

static int synth_sink(void *user, const aa_replay_event *ev, size_t n) {
  synth_prog *s = user;
  int rc = s->sink(s->user, ev, n);

  s->done += n;
  if (s->prog != NULL && (s->done & 0xffff) < n)
    progress_update(s->prog, s->done, s->total);
  return rc;
}

int input_feed(const tool_input *in, aa_replay_on_error mode,
               aa_replay_sink sink, void *user, tool_progress *prog,
               aa_replay_diag *diag, char *err, size_t errcap) {
  aa_replay_hist h;
  aa_replay_csv_options opt;
  synth_prog sp;
  char inner[AA_REPLAY_ERR_CAP];
  int rc;

  err[0] = '\0';
  memset(&h, 0, sizeof h);
  switch (in->kind) {
  case IN_CSV:
    memset(&opt, 0, sizeof opt);
    opt.on_error = mode;
    opt.progress = prog != NULL && prog->on ? csv_progress : NULL;
    opt.progress_user = prog;
    rc = aa_replay_csv_parse_file(in->path, &opt, sink, user, diag, inner,
                                  sizeof inner);
    /* the parser's message may name the file already: name it once */
    if (rc != AA_OK && inner[0] != '\0') {
      const char *name = input_name(in);
      if (strncmp(inner, name, strlen(name)) == 0)
        snprintf(err, errcap, "%s", inner);
      else
        snprintf(err, errcap, "%s: %s", name, inner);
    }
    return rc;
  case IN_DB_TRACE:
    return feed_store_trace(in, sink, user, prog, err, errcap);
  case IN_HIST:
    rc = aa_replay_hist_load_file(in->path, &h, err, errcap);
    if (rc != AA_OK)
      return rc;
    break;
  case IN_DB_HIST:
    rc = aa_store_histogram_latest(in->path, in->run_id, in->hist_pool, h.hist);
    if (rc != AA_OK) {
      char why[160];
      char pools[256];
      int64_t run = 0;
      if (rc == AA_ENOENT && in->hist_pool != NULL &&
          run_pools(in->path, in->run_id, &run, pools, sizeof pools)) {
        /* the run is there; the pool is what is wrong */
        snprintf(err, errcap,
                 "%s: run %lld has no histogram of pool %s; its pools: %s (leave out "
                 "--hist-pool to sum them all)",
                 in->path, (long long)run, in->hist_pool, pools[0] != '\0' ? pools : "none");
        return rc;
      }
      snprintf(err, errcap, "%s: cannot read the histogram%s%s: %s", in->path,
               in->hist_pool != NULL ? " of pool " : "",
               in->hist_pool != NULL ? in->hist_pool : "",
               store_why(in, rc, why, sizeof why));
      return rc;
    }
    break;
  default:
    snprintf(err, errcap, "no input given");
    return AA_EINVAL;
  }
  sp.sink = sink;
  sp.user = user;
  sp.prog = prog;
  sp.done = 0;
  sp.total = in->synth.events;
  rc = aa_replay_synth(&h, &in->synth, synth_sink, &sp, inner, sizeof inner);
  if (rc != AA_OK && inner[0] != '\0')
    snprintf(err, errcap, "%s: %s", in->path, inner);
  aa_replay_hist_clear(&h);
  return rc;
}

void input_describe(const tool_input *in, char *buf, size_t cap) {
  char run[32], live[96];

  if (in->run_id > 0)
    snprintf(run, sizeof run, "run %lld", (long long)in->run_id);
  else
    snprintf(run, sizeof run, "latest run");
  switch (in->kind) {
  case IN_CSV:
    snprintf(buf, cap, "CSV %s", input_name(in));
    break;
  case IN_DB_TRACE:
    snprintf(buf, cap, "store trace %s (%s)", in->path, run);
    break;
  case IN_HIST:
    snprintf(buf, cap, "histogram %s (%llu events, seed %llu, live %llu)",
             in->path, (unsigned long long)in->synth.events,
             (unsigned long long)in->synth.seed,
             (unsigned long long)in->synth.live_target);
    break;
  case IN_DB_HIST:
    if (in->synth.live_bytes > 0) {
      char b[32];
      fmt_bytes(in->synth.live_bytes, b, sizeof b);
      snprintf(live, sizeof live, "live up to %s, the run's peak in use", b);
    } else {
      snprintf(live, sizeof live, "live %llu blocks", (unsigned long long)in->synth.live_target);
    }
    snprintf(buf, cap, "stored histogram %s (%s, %s%s; %llu events, seed %llu, %s)", in->path,
             run, in->hist_pool != NULL ? "histogram of pool " : "every pool's histogram summed",
             in->hist_pool != NULL ? in->hist_pool : "", (unsigned long long)in->synth.events,
             (unsigned long long)in->synth.seed, live);
    break;
  default:
    snprintf(buf, cap, "(none)");
    break;
  }
}

const char *input_name(const tool_input *in) {
  if (in->path == NULL)
    return "input";
  return strcmp(in->path, "-") == 0 ? "stdin" : in->path;
}

bool input_rereadable(const tool_input *in, char *why, size_t cap) {
  struct stat st;

  why[0] = '\0';
  if (in->kind == IN_DB_TRACE || in->kind == IN_DB_HIST)
    return true; /* a database: read again by a new query */
  if (in->path == NULL || strcmp(in->path, "-") == 0) {
    snprintf(why, cap, "stdin is read once");
    return false;
  }
  if (stat(in->path, &st) != 0 || !S_ISREG(st.st_mode)) {
    snprintf(why, cap, "%s is not a regular file: it is read once", in->path);
    return false;
  }
  return true;
}

const char *input_position_name(const tool_input *in) {
  return in->kind == IN_CSV ? "line" : "event";
}

/* ------------------------------------------------------------------ import */

#define IMPORT_RING (1u << 20)
#define IMPORT_FLUSH_EVERY (IMPORT_RING / 2)

typedef struct import_ctx {
  aa_store *st;
  uint64_t n;
  tool_progress *prog;
} import_ctx;

static int import_sink(void *user, const aa_replay_event *ev, size_t n) {
  import_ctx *c = user;
  size_t i;

  for (i = 0; i < n; i++) {
    aa_trace_event t;
    memset(&t, 0, sizeof t);
    t.seq = c->n + 1; /* the input's order is the replay order */
    t.time_ns = ev[i].time_ns;
    t.ptr = ev[i].ptr;
    t.size = ev[i].size;
    t.stream = ev[i].stream;
    t.thread = ev[i].thread;
    t.op = ev[i].op;
    aa_store_trace_push(c->st, &t);
    c->n++;
    if (c->n % IMPORT_FLUSH_EVERY == 0) {
      int rc = aa_store_flush(c->st, 0);
      if (rc != AA_OK)
        return rc;
    }
  }
  if (c->prog != NULL)
    c->prog->events = c->n;
  return AA_OK;
}

int input_import(const tool_input *in, aa_replay_on_error mode,
                 const char *db_path, tool_progress *prog, aa_replay_diag *diag,
                 uint64_t *events, int64_t *run_id, char *err, size_t errcap) {
  aa_store_config sc;
  aa_store_run_info info;
  aa_store_stats ss;
  aa_store *st = NULL;
  import_ctx c;
  aa__outfile out;
  char desc[512], cfgjson[1024];
  int rc, crc;

  *events = 0;
  *run_id = 0;
  err[0] = '\0';
  /* The import goes into a copy of the database (or a new empty file)
   * renamed over it when every event is in: a failure leaves the database
   * byte for byte as it was, and a new path is never created. */
  rc = aa__out_open_db(&out, db_path, err, errcap);
  if (rc != AA_OK)
    return rc;
  aa_store_config_init(&sc);
  sc.path = out.tmp;
  sc.trace_capacity = IMPORT_RING;
  sc.quiet = true;
  rc = aa_store_open(&sc, &st);
  if (rc != AA_OK) {
    snprintf(err, errcap, "%s: cannot open the store: %s", db_path,
             store_err(rc));
    aa__out_abort(&out);
    return rc;
  }
  input_describe(in, desc, sizeof desc);
  {
    FILE *mf = fmemopen(cfgjson, sizeof cfgjson, "w");
    if (mf != NULL) {
      fputs("{\"imported_by\":\"adaptalloc-replay\",\"source\":", mf);
      print_json_string(mf, desc);
      fputs("}", mf);
      fputc('\0', mf);
      fclose(mf);
    } else {
      snprintf(cfgjson, sizeof cfgjson, "{}");
    }
    cfgjson[sizeof cfgjson - 1] = '\0';
  }
  memset(&info, 0, sizeof info);
  info.model = "replay-import";
  info.rank = -1;
  info.local_rank = -1;
  info.config_json = cfgjson;
  rc = aa_store_begin_run(st, &info, run_id);
  if (rc != AA_OK) {
    snprintf(err, errcap, "%s: cannot start a run: %s", db_path, store_err(rc));
    goto out;
  }
  c.st = st;
  c.n = 0;
  c.prog = prog;
  rc = input_feed(in, mode, import_sink, &c, prog, diag, err, errcap);
  if (rc != AA_OK) {
    if (err[0] == '\0')
      snprintf(err, errcap, "%s: writing the trace failed: %s", db_path,
               store_err(rc));
    goto out;
  }
  rc = aa_store_flush(st, 0);
  if (rc == AA_OK)
    rc = aa_store_stats_get(st, &ss);
  if (rc != AA_OK) {
    snprintf(err, errcap, "%s: writing the trace failed: %s", db_path,
             store_err(rc));
    goto out;
  }
  if (ss.events_dropped > 0 || !ss.enabled) {
    snprintf(err, errcap, "%s: the store dropped %llu of %llu events%s%s",
             db_path, (unsigned long long)ss.events_dropped,
             (unsigned long long)c.n, ss.last_error_msg[0] ? ": " : "",
             ss.last_error_msg);
    rc = AA_EIO;
    goto out;
  }
  *events = c.n;
out:
  crc = aa_store_close(st);
  if (rc == AA_OK && crc != AA_OK) {
    snprintf(err, errcap, "%s: closing the store failed: %s", db_path,
             store_err(crc));
    rc = crc;
  }
  if (rc == AA_OK) {
    char side[PATH_MAX + 8];
    snprintf(side, sizeof side, "%s-wal", out.tmp);
    if (access(side, F_OK) == 0) {
      snprintf(err, errcap, "%s: the store did not finish its write-ahead log", db_path);
      rc = AA_EIO;
    }
  }
  if (rc == AA_OK)
    rc = aa__out_commit(&out, err, errcap);
  else
    aa__out_abort(&out);
  if (rc != AA_OK) {
    *events = 0;
    *run_id = 0;
  }
  return rc;
}
