/*
 * export_torch.c — `adaptalloc-replay export --format torch-snapshot`: any
 * INPUT (a stored trace, a CSV) written as a PyTorch CUDA memory snapshot
 * pickle, the file torch.cuda.memory._dump_snapshot writes, so that
 * PyTorch's memory_viz (pytorch.org/memory_viz, or
 * torch.cuda._memory_viz.trace_plot) draws its Active Memory Timeline.
 * Entry point: cmd_export_torch.
 *
 * What is written (docs/replay.md "Export to PyTorch's memory_viz"):
 *   {"device_traces": [[entry, ...]], "segments": [...],
 *    "allocator_settings": {...}}
 * with one entry per event, in the input's order, on device 0:
 *   allocate           -> segment_alloc, alloc
 *   deallocate         -> free_requested, free_completed, segment_free
 *   allocate failure   -> oom (device_free 0: a trace does not know it)
 * Every entry has action, addr, size, stream, time_us and frames = [].
 * time_us: for a stored trace whose run has a clock origin, microseconds
 * since the Unix epoch, as PyTorch's own snapshots (memory_viz prints it
 * as a date); else the trace's own clock (a CSV's).
 * A trace records requests, not the pool's slabs, so each block is its own
 * segment (reserved reads as in use in memory_viz's segment views); this
 * keeps every block inside a segment, which memory_viz's "Allocator State
 * History" view needs. "segments" holds the blocks still live at the end,
 * each a segment of one active_allocated block, so memory_viz counts them
 * as allocated before nothing and after everything. A free whose
 * allocation came before the trace keeps its size when the input gives one
 * (the block then reads as allocated when the trace began); with size 0 it
 * is left out and counted.
 *
 * Bounded (docs/replay.md "A bounded snapshot"): --since/--until (a stored
 * trace's wall clock) or --last-seconds keep the events of a window, and
 * --max-entries the newest entries of it (as _record_memory_history's
 * max_entries keeps the newest); blocks allocated before the window and
 * freed in it keep their sizes, and "segments" are the blocks live at the
 * window's end. Call stacks ('c' events, trace_frames) become the alloc
 * entries' and the live blocks' "frames" ([{filename, line, name}], the
 * innermost first). Such an export reads the input twice: the first pass
 * counts the window's entries and gathers which allocation each stack
 * belongs to.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adaptalloc/store.h"
#include "pickle.h"
#include "replay_tool.h"

/* ------------------------------------------------------------ live blocks */

/* Open addressing, linear probing; ptr 0 marks an empty slot (a recorded
 * allocation at address 0 is skipped before it gets here). */
typedef struct live_blk {
  uint64_t ptr, size, stream;
  uint64_t frame; /* its call stack's id (0: none) */
  uint64_t nth;   /* the ordinal of its allocation in the input (from 1) */
} live_blk;

typedef struct live_set {
  live_blk *v;
  size_t cap, n; /* cap a power of two; n < cap * 3/4 */
} live_set;

static size_t live_hash(uint64_t p, size_t cap) {
  p ^= p >> 33;
  p *= 0xff51afd7ed558ccdull;
  p ^= p >> 33;
  return (size_t)p & (cap - 1);
}

static live_blk *live_find(const live_set *s, uint64_t ptr) {
  size_t i;
  if (s->cap == 0)
    return NULL;
  for (i = live_hash(ptr, s->cap); s->v[i].ptr != 0; i = (i + 1) & (s->cap - 1))
    if (s->v[i].ptr == ptr)
      return &s->v[i];
  return NULL;
}

static int live_grow(live_set *s) {
  size_t cap = s->cap ? s->cap * 2 : 1024, i, j;
  live_blk *v = calloc(cap, sizeof *v);
  if (v == NULL)
    return AA_ENOMEM;
  for (i = 0; i < s->cap; i++) {
    if (s->v[i].ptr == 0)
      continue;
    for (j = live_hash(s->v[i].ptr, cap); v[j].ptr != 0; j = (j + 1) & (cap - 1))
      ;
    v[j] = s->v[i];
  }
  free(s->v);
  s->v = v;
  s->cap = cap;
  return AA_OK;
}

/* Adds a block not in the set. */
static int live_add(live_set *s, const live_blk *b) {
  size_t i;
  if ((s->n + 1) * 4 > s->cap * 3 && live_grow(s) != AA_OK)
    return AA_ENOMEM;
  for (i = live_hash(b->ptr, s->cap); s->v[i].ptr != 0; i = (i + 1) & (s->cap - 1))
    ;
  s->v[i] = *b;
  s->n++;
  return AA_OK;
}

/* Removes e (a slot of s), moving later entries of its run back. */
static void live_del(live_set *s, live_blk *e) {
  size_t i = (size_t)(e - s->v), j = i, k;
  s->v[i].ptr = 0;
  for (;;) {
    j = (j + 1) & (s->cap - 1);
    if (s->v[j].ptr == 0)
      break;
    k = live_hash(s->v[j].ptr, s->cap);
    /* leave v[j] when its home k lies cyclically in (i, j] */
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
      continue;
    s->v[i] = s->v[j];
    s->v[j].ptr = 0;
    i = j;
  }
  s->n--;
}

/* ------------------------------------------------------------ frames */

/* A call stack's text, by id: a dense table (ids are 1..n per run). */
typedef struct frame_tab {
  char **text;
  size_t n;
} frame_tab;

static int frames_keep(void *user, uint64_t id, const char *frames) {
  frame_tab *t = user;
  if (id == 0 || id > (1u << 24))
    return 0; /* not an id the store hands out */
  if (id > t->n) {
    size_t n = (size_t)id * 2;
    char **v = realloc(t->text, n * sizeof *v);
    if (v == NULL)
      return AA_ENOMEM;
    memset(v + t->n, 0, (n - t->n) * sizeof *v);
    t->text = v;
    t->n = n;
  }
  free(t->text[id - 1]);
  t->text[id - 1] = strdup(frames);
  return t->text[id - 1] != NULL ? 0 : AA_ENOMEM;
}

/* Which allocation (its ordinal) each call stack belongs to: an open map
 * ordinal -> frame id, filled by the first pass. */
typedef struct nth_map {
  uint64_t *key, *val; /* key 0: empty */
  size_t cap, n;
} nth_map;

static int nth_put(nth_map *m, uint64_t k, uint64_t v) {
  if ((m->n + 1) * 4 > m->cap * 3) {
    size_t cap = m->cap ? m->cap * 2 : 1024;
    uint64_t *nk = calloc(cap, sizeof *nk), *nv = calloc(cap, sizeof *nv);
    if (nk == NULL || nv == NULL) {
      free(nk);
      free(nv);
      return AA_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
      if (m->key[i] == 0)
        continue;
      size_t j = live_hash(m->key[i], cap);
      while (nk[j] != 0)
        j = (j + 1) & (cap - 1);
      nk[j] = m->key[i];
      nv[j] = m->val[i];
    }
    free(m->key);
    free(m->val);
    m->key = nk;
    m->val = nv;
    m->cap = cap;
  }
  size_t i = live_hash(k, m->cap);
  while (m->key[i] != 0 && m->key[i] != k)
    i = (i + 1) & (m->cap - 1);
  if (m->key[i] == 0)
    m->n++;
  m->key[i] = k;
  m->val[i] = v;
  return AA_OK;
}

static uint64_t nth_get(const nth_map *m, uint64_t k) {
  if (m->cap == 0)
    return 0;
  for (size_t i = live_hash(k, m->cap); m->key[i] != 0; i = (i + 1) & (m->cap - 1))
    if (m->key[i] == k)
      return m->val[i];
  return 0;
}

/* ------------------------------------------------------------ entries */

typedef struct tsnap {
  pk_writer pk;
  live_set live;
  tool_progress *prog;
  uint64_t entries, allocs, frees, ooms, skipped;
  /* the window: events with lo_ns <= time_ns <= hi_ns are written */
  uint64_t lo_ns, hi_ns;
  bool counting;              /* the first pass: count, write nothing */
  uint64_t total;             /* the first pass's count of the window's entries */
  uint64_t skip;              /* entries of the window left out (--max-entries) */
  uint64_t consumed;          /* entries of the window seen so far (second pass) */
  uint64_t nth;               /* allocations seen (ordinals) */
  uint64_t first_ns, last_ns; /* the input's first and last event times */
  uint64_t with_frames;       /* alloc entries written with a stack */
  nth_map stacks;             /* allocation ordinal -> call stack id */
  const frame_tab *frames;
  /* a stored trace with a clock origin: time_us = time_ns / 1000 + wall_us
   * (the epoch's microseconds; db_meta) */
  bool wall;
  int64_t wall_us;
} tsnap;

/* "frames": [{"filename", "line", "name"}, ...] from a stack's text, one
 * frame a line "file:line:function" (the part before the last two colons is
 * the file, so a file name may hold colons); an unparsable line is a frame
 * named by the whole line. */
static void write_frames(pk_writer *w, const char *text) {
  pk_str(w, "frames");
  if (text == NULL || text[0] == '\0') {
    pk_empty_list(w);
    return;
  }
  pk_list_begin(w);
  const char *p = text;
  while (*p != '\0') {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    if (n > 0) {
      char line[1024];
      size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
      memcpy(line, p, k);
      line[k] = '\0';
      char *c2 = strrchr(line, ':');
      char *c1 = NULL;
      if (c2 != NULL) {
        *c2 = '\0';
        c1 = strrchr(line, ':');
        *c2 = ':';
      }
      pk_dict_begin(w);
      if (c1 != NULL && c2 != NULL && c2 > c1 + 1) {
        *c1 = '\0';
        *c2 = '\0';
        pk_kv_str(w, "filename", line);
        pk_kv_int(w, "line", strtol(c1 + 1, NULL, 10));
        pk_kv_str(w, "name", c2 + 1);
      } else {
        pk_kv_str(w, "filename", "??");
        pk_kv_int(w, "line", 0);
        pk_kv_str(w, "name", line);
      }
      pk_dict_end(w);
    }
    p += n;
    if (*p == '\n')
      p++;
  }
  pk_list_end(w);
}

static const char *frames_of(const tsnap *t, uint64_t id) {
  if (id == 0 || t->frames == NULL || id > t->frames->n)
    return NULL;
  return t->frames->text[id - 1];
}

static void entry(tsnap *t, const char *action, uint64_t addr, uint64_t size,
                  uint64_t stream, uint64_t time_ns, uint64_t frame) {
  pk_writer *w = &t->pk;
  pk_dict_begin(w);
  pk_kv_str(w, "action", action);
  pk_kv_uint(w, "addr", addr);
  pk_kv_uint(w, "size", size);
  pk_kv_uint(w, "stream", stream);
  int64_t us = t->wall ? (int64_t)(time_ns / 1000) + t->wall_us : (int64_t)(time_ns / 1000);
  pk_kv_uint(w, "time_us", us > 0 ? (uint64_t)us : 0);
  if (strcmp(action, "oom") == 0)
    pk_kv_uint(w, "device_free", 0);
  write_frames(w, frames_of(t, frame));
  pk_dict_end(w);
  t->entries++;
}

/* Whether an event's entries (n of them) are written: inside the window,
 * and past the entries --max-entries leaves out. Counts them. */
static bool take(tsnap *t, uint64_t time_ns, uint64_t n) {
  if (time_ns < t->lo_ns || time_ns > t->hi_ns)
    return false;
  if (t->counting) {
    t->total += n;
    return false;
  }
  bool out = t->consumed >= t->skip;
  t->consumed += n;
  return out;
}

static void free_entries(tsnap *t, const live_blk *b, uint64_t time_ns) {
  if (!take(t, time_ns, 3))
    return;
  entry(t, "free_requested", b->ptr, b->size, b->stream, time_ns, 0);
  entry(t, "free_completed", b->ptr, b->size, b->stream, time_ns, 0);
  entry(t, "segment_free", b->ptr, b->size, b->stream, time_ns, 0);
  t->frees++;
}

static int snap_sink(void *user, const aa_replay_event *ev, size_t n) {
  tsnap *t = user;
  size_t i;

  for (i = 0; i < n; i++) {
    const aa_replay_event *e = &ev[i];
    if (t->first_ns == 0 || e->time_ns < t->first_ns)
      t->first_ns = e->time_ns;
    if (e->time_ns > t->last_ns)
      t->last_ns = e->time_ns;
    if (e->time_ns > t->hi_ns && !t->counting)
      continue; /* past the window: the blocks live at its end stay live */
    if (e->op == 'u')
      continue; /* a stream use (record_stream): the snapshot has no entry for it */
    live_blk *old = e->ptr != 0 ? live_find(&t->live, e->ptr) : NULL;
    if (e->op == 'c') { /* a call stack (size: its id) for the live block */
      if (old != NULL && t->counting && nth_put(&t->stacks, old->nth, e->size) != AA_OK)
        return AA_ENOMEM;
      if (old != NULL)
        old->frame = e->size;
      continue;
    }
    if (e->op == 'x') {
      if (take(t, e->time_ns, 1)) {
        entry(t, "oom", 0, e->size, e->stream, e->time_ns, 0);
        t->ooms++;
      }
    } else if (e->op == 'a') {
      live_blk b = {e->ptr, e->size, e->stream, 0, 0};
      if (e->ptr == 0) {
        t->skipped++;
        continue;
      }
      if (old != NULL) { /* allocated again without a free: end the old one */
        free_entries(t, old, e->time_ns);
        live_del(&t->live, old);
      }
      b.nth = ++t->nth;
      b.frame = t->counting ? 0 : nth_get(&t->stacks, b.nth);
      if (live_add(&t->live, &b) != AA_OK)
        return AA_ENOMEM;
      if (take(t, e->time_ns, 2)) {
        entry(t, "segment_alloc", b.ptr, b.size, b.stream, e->time_ns, 0);
        entry(t, "alloc", b.ptr, b.size, b.stream, e->time_ns, b.frame);
        t->allocs++;
        t->with_frames += b.frame != 0;
      }
    } else if (old != NULL) {
      live_blk b = *old;
      live_del(&t->live, old);
      free_entries(t, &b, e->time_ns);
    } else if (e->ptr != 0 && e->size > 0) { /* allocated before the trace */
      live_blk b = {e->ptr, e->size, e->stream, 0, 0};
      free_entries(t, &b, e->time_ns);
    } else {
      t->skipped++;
    }
  }
  t->prog->events += n;
  return t->pk.err;
}

static int by_addr(const void *a, const void *b) {
  uint64_t x = ((const live_blk *)a)->ptr, y = ((const live_blk *)b)->ptr;
  return x < y ? -1 : x > y;
}

/* "segments": the blocks live at the end, by address. */
static int write_segments(tsnap *t) {
  pk_writer *w = &t->pk;
  live_blk *v = NULL;
  size_t i, k = 0;

  if (t->live.n > 0) {
    v = malloc(t->live.n * sizeof *v);
    if (v == NULL)
      return AA_ENOMEM;
    for (i = 0; i < t->live.cap; i++)
      if (t->live.v[i].ptr != 0)
        v[k++] = t->live.v[i];
    qsort(v, k, sizeof *v, by_addr);
  }
  pk_str(w, "segments");
  pk_list_begin(w);
  for (i = 0; i < k; i++) {
    pk_dict_begin(w);
    pk_kv_int(w, "device", 0);
    pk_kv_uint(w, "address", v[i].ptr);
    pk_kv_uint(w, "total_size", v[i].size);
    pk_kv_uint(w, "allocated_size", v[i].size);
    pk_kv_uint(w, "active_size", v[i].size);
    pk_kv_uint(w, "requested_size", v[i].size);
    pk_kv_uint(w, "stream", v[i].stream);
    pk_kv_str(w, "segment_type", "large");
    pk_str(w, "segment_pool_id");
    pk_tuple2_int(w, 0, 0);
    pk_kv_bool(w, "is_expandable", false);
    pk_str(w, "frames");
    pk_empty_list(w);
    pk_str(w, "blocks");
    pk_list_begin(w);
    pk_dict_begin(w);
    pk_kv_uint(w, "address", v[i].ptr);
    pk_kv_uint(w, "size", v[i].size);
    pk_kv_uint(w, "requested_size", v[i].size);
    pk_kv_str(w, "state", "active_allocated");
    write_frames(w, frames_of(t, v[i].frame));
    pk_dict_end(w);
    pk_list_end(w);
    pk_dict_end(w);
  }
  pk_list_end(w);
  free(v);
  return w->err;
}

/* One counting pass over the input (nothing written): t's totals, first
 * and last times, and the stacks' owners. */
static int count_pass(const tool_input *in, aa_replay_on_error mode, tsnap *t, char *err,
                      size_t cap) {
  aa_replay_diag diag;
  tool_progress quiet;
  memset(&diag, 0, sizeof diag);
  progress_init(&quiet, false);
  tool_progress *prog = t->prog;
  t->prog = &quiet;
  t->counting = true;
  t->total = 0;
  t->nth = 0;
  int rc = input_feed(in, mode, snap_sink, t, &quiet, &diag, err, cap);
  free(t->live.v);
  memset(&t->live, 0, sizeof t->live);
  t->counting = false;
  t->nth = 0;
  t->prog = prog;
  return rc;
}

/* The window and the stacks: the bounds in the trace's clock from
 * --since/--until (the run's wall clock), --last-seconds (a pass to find the
 * trace's end), the newest --max-entries (a pass to count), the call stacks
 * of a stored trace. */
static int plan_window(const options *o, tool_input *in, tsnap *t, frame_tab *ft, char *err,
                       size_t cap) {
  bool bounded = o->max_entries || o->has_since || o->has_until || o->last_seconds > 0;
  int rc;
  t->lo_ns = 0;
  t->hi_ns = UINT64_MAX;
  if (in->kind == IN_DB_TRACE) {
    db_meta wm;
    char werr[256];
    /* the epoch clock for time_us when the run has one (else the trace's) */
    if (db_meta_read(in->path, in->run_id, &wm, werr, sizeof werr) == AA_OK &&
        wm.started_ms > 0 && wm.mono_origin_ns != 0) {
      t->wall = true;
      t->wall_us = wm.started_ms * 1000 - (int64_t)(wm.mono_origin_ns / 1000);
    }
    in->frames = true;
    rc = aa_store_frames_foreach(in->path, in->run_id, frames_keep, ft);
    if (rc != AA_OK && rc != AA_ENOENT) {
      snprintf(err, cap, "%s: cannot read the call stacks: %s", in->path, aa_strerror(rc));
      return rc;
    }
  }
  if (o->has_since || o->has_until) {
    db_meta m;
    if (in->kind != IN_DB_TRACE) {
      snprintf(err, cap, "--since and --until need a stored trace (--db): a CSV has no wall "
                         "clock; use --last-seconds");
      return AA_EINVAL;
    }
    rc = db_meta_read(in->path, in->run_id, &m, err, cap);
    if (rc != AA_OK)
      return rc;
    if (m.started_ms <= 0 || m.mono_origin_ns == 0) {
      snprintf(err, cap, "%s: run %lld has no clock origin (an import): use --last-seconds",
               in->path, (long long)m.run_id);
      return AA_EINVAL;
    }
    /* the event at wall time w has time_ns = mono_origin + (w - started) ms */
    if (o->has_since) {
      int64_t d = (o->since_ms - m.started_ms) * 1000000;
      t->lo_ns = d <= 0 ? 0 : m.mono_origin_ns + (uint64_t)d;
    }
    if (o->has_until) {
      int64_t d = (o->until_ms - m.started_ms) * 1000000;
      t->hi_ns = d < -(int64_t)m.mono_origin_ns ? 0 : (uint64_t)((int64_t)m.mono_origin_ns + d);
    }
    if (t->hi_ns < t->lo_ns) {
      snprintf(err, cap, "--until is before --since");
      return AA_EINVAL;
    }
  }
  if (!bounded && (ft->n == 0))
    return AA_OK; /* one pass, as always */
  char why[160];
  if (!input_rereadable(in, why, sizeof why)) {
    snprintf(err, cap, "a bounded export or one with call stacks reads its input twice: %s",
             why);
    return AA_EINVAL;
  }
  if (o->last_seconds > 0) {
    uint64_t lo = t->lo_ns, hi = t->hi_ns;
    rc = count_pass(in, o->on_error, t, err, cap);
    if (rc != AA_OK)
      return rc;
    uint64_t end = t->last_ns < hi ? t->last_ns : hi;
    uint64_t span = (uint64_t)(o->last_seconds * 1e9);
    t->lo_ns = end > span ? end - span : 0;
    if (t->lo_ns < lo)
      t->lo_ns = lo;
    t->hi_ns = hi;
  }
  rc = count_pass(in, o->on_error, t, err, cap);
  if (rc != AA_OK)
    return rc;
  t->skip = o->max_entries && t->total > o->max_entries ? t->total - o->max_entries : 0;
  return AA_OK;
}

int cmd_export_torch(const options *o) {
  tool_progress prog;
  aa_replay_diag diag;
  tsnap t;
  aa__outfile out;
  FILE *f;
  char err[512], src[512];
  int rc;
  bool to_stdout = strcmp(o->out, "-") == 0;
  tool_input in = o->in;
  frame_tab ft = {NULL, 0};

  if (to_stdout && isatty(1))
    return usage_error("export --format torch-snapshot writes a binary pickle: "
                       "give -o FILE.pickle, or redirect stdout%s",
                       "");
  /* A file is written through an exclusive temporary beside it, renamed
   * over it at the end (the project's rule for outputs, util/src/outfile.c):
   * a failed export leaves whatever was there before. */
  if (aa__out_open(&out, o->out, 0666, err, sizeof err) != AA_OK) {
    fprintf(stderr, "adaptalloc-replay: %s\n", err);
    return EXIT_INPUT;
  }
  f = out.f;
  memset(&t, 0, sizeof t);
  progress_init(&prog, o->progress == 1 || (o->progress == -1 && isatty(2)));
  t.prog = &prog;
  memset(&diag, 0, sizeof diag);
  err[0] = '\0';
  input_describe(&o->in, src, sizeof src);
  t.frames = &ft;
  rc = plan_window(o, &in, &t, &ft, err, sizeof err);
  if (rc != AA_OK) {
    aa__out_abort(&out);
    progress_end(&prog);
    fprintf(stderr, "adaptalloc-replay: %s\n", err);
    return rc == AA_ENOMEM ? EXIT_INTERNAL : rc == AA_EINVAL ? EXIT_USAGE
                                                             : EXIT_INPUT;
  }

  pk_init(&t.pk, f);
  pk_dict_begin(&t.pk);
  pk_str(&t.pk, "device_traces");
  pk_list_begin(&t.pk);
  pk_list_begin(&t.pk);
  rc = input_feed(&in, o->on_error, snap_sink, &t, &prog, &diag, err, sizeof err);
  pk_list_end(&t.pk);
  pk_list_end(&t.pk);
  if (rc == AA_OK)
    rc = write_segments(&t);
  pk_str(&t.pk, "allocator_settings");
  pk_dict_begin(&t.pk);
  pk_kv_str(&t.pk, "exported_by", "adaptalloc-replay export --format torch-snapshot");
  pk_kv_str(&t.pk, "source", src);
  pk_dict_end(&t.pk);
  pk_dict_end(&t.pk);
  if (pk_finish(&t.pk) != AA_OK && rc == AA_OK)
    rc = t.pk.err;
  progress_end(&prog);
  free(t.live.v);
  free(t.stacks.key);
  free(t.stacks.val);
  for (size_t i = 0; i < ft.n; i++)
    free(ft.text[i]);
  free(ft.text);
  if (rc == AA_OK) {
    char cerr[512];
    if (aa__out_commit(&out, cerr, sizeof cerr) != AA_OK) {
      snprintf(err, sizeof err, "%s", cerr);
      rc = AA_EIO;
    }
  } else {
    aa__out_abort(&out);
  }
  if (rc != AA_OK) {
    if (err[0] == '\0')
      snprintf(err, sizeof err, "%s: %s", o->out,
               rc == AA_ENOMEM ? "out of memory" : "writing the snapshot failed");
    fprintf(stderr, "adaptalloc-replay: %s\n", err);
    return rc == AA_ENOMEM ? EXIT_INTERNAL : EXIT_INPUT;
  }
  if (to_stdout)
    return EXIT_OK; /* stdout holds the pickle: nothing else goes there */
  if (o->json) {
    fprintf(stdout, "{\"command\":\"export\",\"format\":\"torch-snapshot\",\"output\":");
    print_json_string(stdout, o->out);
    fprintf(stdout, ",\"entries\":%llu,\"allocs\":%llu,\"frees\":%llu,\"ooms\":%llu,"
                    "\"live_at_end\":%llu,\"skipped\":%llu,\"bytes\":%llu,"
                    "\"left_out\":%llu,\"with_frames\":%llu}\n",
            (unsigned long long)t.entries, (unsigned long long)t.allocs,
            (unsigned long long)t.frees, (unsigned long long)t.ooms,
            (unsigned long long)t.live.n, (unsigned long long)t.skipped,
            (unsigned long long)t.pk.bytes, (unsigned long long)t.skip,
            (unsigned long long)t.with_frames);
    return EXIT_OK;
  }
  printf("wrote %s: %llu trace entries (%llu allocations, %llu frees, %llu failed), "
         "%llu blocks live at the end",
         o->out, (unsigned long long)t.entries, (unsigned long long)t.allocs,
         (unsigned long long)t.frees, (unsigned long long)t.ooms,
         (unsigned long long)t.live.n);
  if (t.skip > 0)
    printf("; the %llu oldest entries of the window left out (--max-entries)",
           (unsigned long long)t.skip);
  if (t.with_frames > 0)
    printf("; %llu allocations with their call stacks", (unsigned long long)t.with_frames);
  if (t.skipped > 0)
    printf("; %llu events left out (frees of blocks allocated before the trace, "
           "size unknown, or allocations at address 0)",
           (unsigned long long)t.skipped);
  printf("\n");
  return EXIT_OK;
}
