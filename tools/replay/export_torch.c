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
 * A trace records requests, not the pool's slabs, so each block is its own
 * segment (reserved reads as in use in memory_viz's segment views); this
 * keeps every block inside a segment, which memory_viz's "Allocator State
 * History" view needs. "segments" holds the blocks still live at the end,
 * each a segment of one active_allocated block, so memory_viz counts them
 * as allocated before nothing and after everything. A free whose
 * allocation came before the trace keeps its size when the input gives one
 * (the block then reads as allocated when the trace began); with size 0 it
 * is left out and counted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pickle.h"
#include "replay_tool.h"

/* ------------------------------------------------------------ live blocks */

/* Open addressing, linear probing; ptr 0 marks an empty slot (a recorded
 * allocation at address 0 is skipped before it gets here). */
typedef struct live_blk {
  uint64_t ptr, size, stream;
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

/* ------------------------------------------------------------ entries */

typedef struct tsnap {
  pk_writer pk;
  live_set live;
  tool_progress *prog;
  uint64_t entries, allocs, frees, ooms, skipped;
} tsnap;

static void entry(tsnap *t, const char *action, uint64_t addr, uint64_t size,
                  uint64_t stream, uint64_t time_ns) {
  pk_writer *w = &t->pk;
  pk_dict_begin(w);
  pk_kv_str(w, "action", action);
  pk_kv_uint(w, "addr", addr);
  pk_kv_uint(w, "size", size);
  pk_kv_uint(w, "stream", stream);
  pk_kv_uint(w, "time_us", time_ns / 1000);
  if (strcmp(action, "oom") == 0)
    pk_kv_uint(w, "device_free", 0);
  pk_str(w, "frames");
  pk_empty_list(w);
  pk_dict_end(w);
  t->entries++;
}

static void free_entries(tsnap *t, const live_blk *b, uint64_t time_ns) {
  entry(t, "free_requested", b->ptr, b->size, b->stream, time_ns);
  entry(t, "free_completed", b->ptr, b->size, b->stream, time_ns);
  entry(t, "segment_free", b->ptr, b->size, b->stream, time_ns);
  t->frees++;
}

static int snap_sink(void *user, const aa_replay_event *ev, size_t n) {
  tsnap *t = user;
  size_t i;

  for (i = 0; i < n; i++) {
    const aa_replay_event *e = &ev[i];
    if (e->op == 'u')
      continue; /* a stream use (record_stream): the snapshot has no entry for it */
    live_blk *old = e->ptr != 0 ? live_find(&t->live, e->ptr) : NULL;
    if (e->op == 'x') {
      entry(t, "oom", 0, e->size, e->stream, e->time_ns);
      t->ooms++;
    } else if (e->op == 'a') {
      live_blk b = {e->ptr, e->size, e->stream};
      if (e->ptr == 0) {
        t->skipped++;
        continue;
      }
      if (old != NULL) { /* allocated again without a free: end the old one */
        free_entries(t, old, e->time_ns);
        live_del(&t->live, old);
      }
      if (live_add(&t->live, &b) != AA_OK)
        return AA_ENOMEM;
      entry(t, "segment_alloc", b.ptr, b.size, b.stream, e->time_ns);
      entry(t, "alloc", b.ptr, b.size, b.stream, e->time_ns);
      t->allocs++;
    } else if (old != NULL) {
      live_blk b = *old;
      live_del(&t->live, old);
      free_entries(t, &b, e->time_ns);
    } else if (e->ptr != 0 && e->size > 0) { /* allocated before the trace */
      live_blk b = {e->ptr, e->size, e->stream};
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
    pk_str(w, "frames");
    pk_empty_list(w);
    pk_dict_end(w);
    pk_list_end(w);
    pk_dict_end(w);
  }
  pk_list_end(w);
  free(v);
  return w->err;
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

  pk_init(&t.pk, f);
  pk_dict_begin(&t.pk);
  pk_str(&t.pk, "device_traces");
  pk_list_begin(&t.pk);
  pk_list_begin(&t.pk);
  rc = input_feed(&o->in, o->on_error, snap_sink, &t, &prog, &diag, err,
                  sizeof err);
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
                    "\"live_at_end\":%llu,\"skipped\":%llu,\"bytes\":%llu}\n",
            (unsigned long long)t.entries, (unsigned long long)t.allocs,
            (unsigned long long)t.frees, (unsigned long long)t.ooms,
            (unsigned long long)t.live.n, (unsigned long long)t.skipped,
            (unsigned long long)t.pk.bytes);
    return EXIT_OK;
  }
  printf("wrote %s: %llu trace entries (%llu allocations, %llu frees, %llu failed), "
         "%llu blocks live at the end",
         o->out, (unsigned long long)t.entries, (unsigned long long)t.allocs,
         (unsigned long long)t.frees, (unsigned long long)t.ooms,
         (unsigned long long)t.live.n);
  if (t.skipped > 0)
    printf("; %llu events left out (frees of blocks allocated before the trace, "
           "size unknown, or allocations at address 0)",
           (unsigned long long)t.skipped);
  printf("\n");
  return EXIT_OK;
}
