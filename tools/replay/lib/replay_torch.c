/*
 * replay_torch.c — a model of PyTorch's CUDA caching allocator
 * (c10/cuda/CUDACachingAllocator.cpp, as of PyTorch 2.x) for the replay
 * tool, so that a trace replayed under an adaptalloc policy can be set
 * against what PyTorch would have reserved for the same requests
 * (`adaptalloc-replay compare --policy torch:default ...`).
 *
 * What is modelled (written from the allocator's documented behaviour and
 * its source, not copied):
 *   - sizes round up to 512 B (requests below 512 B take 512 B);
 *   - requests of at most 1 MiB come from the small pool, whose segments
 *     are 2 MiB; larger ones from the large pool, whose segments are 20 MiB
 *     for a request below 10 MiB and the request rounded up to 2 MiB
 *     otherwise; pools and their free blocks are per stream;
 *   - a request takes the smallest free block of its pool and stream that
 *     is large enough (best fit, lowest address on a tie); a block is split
 *     when what remains is at least 512 B (small pool) or more than 1 MiB
 *     (large pool), and a freed block merges with free neighbours of its
 *     segment; segments are never given back except to make room under
 *     the capacity, where every free whole segment is released and the
 *     allocation tried once more (PyTorch's OOM path);
 *   - max_split_size (PYTORCH_CUDA_ALLOC_CONF max_split_size_mb, unlimited
 *     by default): blocks of that size or more are not split, a request
 *     below it never takes such a block, a request at or above it takes
 *     a block at most 20 MiB larger (the oversize rules);
 *   - expandable segments (expandable_segments:True): per pool and stream
 *     one segment of reserved address space mapped in pages (2 MiB for the
 *     small pool, 20 MiB for the large one) at its end when no free block
 *     fits, the free block at the end growing into the new pages; any
 *     remainder of at least 512 B is split off; under the capacity the free
 *     pages at the end of each segment are unmapped first.
 * Not modelled: stream events of record_stream (a freed block is free at
 * once), the garbage-collection threshold, roundup_power2_divisions, and
 * unmapping inside a segment (only its free tail is given back).
 *
 * One concern, kept whole (about 750 lines): the model of one allocator,
 * its lists, block map and figures read best side by side.
 */
#include <stdlib.h>
#include <string.h>

#include "replay_internal.h"
#include "replay_parts.h"

#define T_MIN_BLOCK 512ull
#define T_SMALL_SIZE (1ull << 20)
#define T_SMALL_BUFFER (2ull << 20)
#define T_LARGE_BUFFER (20ull << 20)
#define T_MIN_LARGE_ALLOC (10ull << 20)
#define T_ROUND_LARGE (2ull << 20)
#define T_VA_SPAN (1ull << 40) /* address space per segment (fake) */

typedef struct tseg tseg;

typedef struct tblock {
  uint64_t addr, size;
  uint64_t req;               /* requested bytes while allocated */
  struct tblock *prev, *next; /* neighbours in the segment, by address */
  tseg *seg;
  bool allocated;
} tblock;

struct tseg {
  uint64_t base;
  uint64_t size; /* bytes held: the segment, or the mapped part */
  tblock *head, *tail;
  tseg *next_all;
  int pool; /* 0 small, 1 large */
  size_t stream_ix;
  bool expandable;
};

/* Free blocks of one pool and stream, ascending by (size, addr). */
typedef struct tlist {
  tblock **v;
  size_t n, cap;
} tlist;

typedef struct tstream {
  uint64_t stream;
  tlist free[2];
  tseg *exp[2]; /* expandable mode: this stream's segment per pool */
} tstream;

/* Recorded pointer -> block (open addressing, backward-shift delete). */
typedef struct tslot {
  uint64_t key;
  tblock *b; /* NULL = empty; FAILED_T = the allocation failed */
} tslot;

static char failed_t;
#define FAILED_T ((tblock *)&failed_t)

struct aa_replay_torch {
  aa_replay_torch_config cfg;
  const char *pos;
  char err[AA_REPLAY_ERR_CAP];
  aa_replay_diag diag;
  tstream *streams;
  size_t nstreams, capstreams;
  tseg *segs;
  uint64_t next_base;
  tslot *map;
  size_t mask, nmap, failed_live;

  uint64_t reserved, in_use, requested;
  uint64_t events, requests, allocs, frees, failures, trace_failures;
  uint64_t hits, misses, backend_allocs, backend_frees, backend_failures, alloc_bytes;
  uint64_t peak_in_use, peak_requested, peak_reserved;
  uint64_t req_at_peak_in_use, in_use_at_peak_reserved;
  bool have_time;
  uint64_t first_time, last_time;
  double t_req, t_use, t_res, e_req, e_use, e_res;
};

void aa_replay_torch_config_init(aa_replay_torch_config *cfg) {
  aa_replay_config rc;
  memset(cfg, 0, sizeof *cfg);
  cfg->mode = AA_REPLAY_TORCH_DEFAULT;
  cfg->on_error = AA_REPLAY_STOP;
  cfg->position_name = "line";
  aa_replay_config_init(&rc);
  cfg->costs = rc.costs;
}

int aa_replay_torch_parse(const char *spec, aa_replay_torch_config *cfg, char *err,
                          size_t errcap) {
  const char *p;
  if (spec == NULL || cfg == NULL || strncmp(spec, "torch:", 6) != 0) {
    aa__errf(err, errcap, "'%s' is not torch:default or torch:expandable",
             spec != NULL ? spec : "(null)");
    return AA_EINVAL;
  }
  p = spec + 6;
  if (strncmp(p, "default", 7) == 0) {
    cfg->mode = AA_REPLAY_TORCH_DEFAULT;
    p += 7;
  } else if (strncmp(p, "expandable", 10) == 0) {
    cfg->mode = AA_REPLAY_TORCH_EXPANDABLE;
    p += 10;
  } else {
    aa__errf(err, errcap, "'%s': the PyTorch model is torch:default or "
                          "torch:expandable (optionally ,max_split_mb=N)",
             spec);
    return AA_EINVAL;
  }
  cfg->max_split_size = 0;
  if (*p == '\0')
    return AA_OK;
  if (strncmp(p, ",max_split_mb=", 14) == 0 && p[14] >= '1' && p[14] <= '9') {
    char *end = NULL;
    unsigned long long mb = strtoull(p + 14, &end, 10);
    if (end != NULL && *end == '\0' && mb > 0 && mb < (1ull << 30)) {
      cfg->max_split_size = mb << 20;
      return AA_OK;
    }
  }
  aa__errf(err, errcap, "'%s': after the mode only ,max_split_mb=N (N > 0) "
                        "is understood",
           spec);
  return AA_EINVAL;
}

/* ---------------------------------------------------------------- lists */

static int blk_cmp(const tblock *a, uint64_t size, uint64_t addr) {
  if (a->size != size)
    return a->size < size ? -1 : 1;
  if (a->addr != addr)
    return a->addr < addr ? -1 : 1;
  return 0;
}

/* First index whose block is >= (size, addr). */
static size_t list_lower(const tlist *l, uint64_t size, uint64_t addr) {
  size_t lo = 0, hi = l->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (blk_cmp(l->v[mid], size, addr) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

static int list_insert(tlist *l, tblock *b) {
  size_t i;
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 64;
    tblock **nv = realloc(l->v, nc * sizeof *nv);
    if (nv == NULL)
      return AA_ENOMEM;
    l->v = nv;
    l->cap = nc;
  }
  i = list_lower(l, b->size, b->addr);
  memmove(&l->v[i + 1], &l->v[i], (l->n - i) * sizeof l->v[0]);
  l->v[i] = b;
  l->n++;
  return AA_OK;
}

static void list_remove(tlist *l, tblock *b) {
  size_t i = list_lower(l, b->size, b->addr);
  if (i < l->n && l->v[i] == b) {
    memmove(&l->v[i], &l->v[i + 1], (l->n - i - 1) * sizeof l->v[0]);
    l->n--;
  }
}

/* ---------------------------------------------------------------- map */

static size_t map_home(const aa_replay_torch *t, uint64_t key) {
  return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->mask;
}

static size_t map_find(const aa_replay_torch *t, uint64_t key) {
  size_t i = map_home(t, key);
  while (t->map[i].b != NULL && t->map[i].key != key)
    i = (i + 1) & t->mask;
  return i;
}

static int map_grow(aa_replay_torch *t) {
  size_t ncap = (t->mask + 1) * 2, i;
  tslot *old = t->map;
  size_t omask = t->mask;
  tslot *nm = calloc(ncap, sizeof *nm);
  if (nm == NULL)
    return AA_ENOMEM;
  t->map = nm;
  t->mask = ncap - 1;
  for (i = 0; i <= omask; i++)
    if (old[i].b != NULL)
      t->map[map_find(t, old[i].key)] = old[i];
  free(old);
  return AA_OK;
}

static void map_remove(aa_replay_torch *t, size_t i) {
  size_t j = i;
  t->map[i].b = NULL;
  t->nmap--;
  for (;;) {
    size_t h;
    j = (j + 1) & t->mask;
    if (t->map[j].b == NULL)
      return;
    h = map_home(t, t->map[j].key);
    /* move j back to i when its home is not in (i, j] (cyclically) */
    if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
      t->map[i] = t->map[j];
      t->map[j].b = NULL;
      i = j;
    }
  }
}

/* ---------------------------------------------------------------- model */

int aa_replay_torch_new(const aa_replay_torch_config *cfg, aa_replay_torch **out, char *err,
                        size_t errcap) {
  aa_replay_torch *t;
  if (cfg == NULL || out == NULL ||
      (cfg->mode != AA_REPLAY_TORCH_DEFAULT && cfg->mode != AA_REPLAY_TORCH_EXPANDABLE)) {
    aa__errf(err, errcap, "bad PyTorch model configuration");
    return AA_EINVAL;
  }
  t = calloc(1, sizeof *t);
  if (t == NULL)
    return AA_ENOMEM;
  t->cfg = *cfg;
  if (t->cfg.max_split_size == 0)
    t->cfg.max_split_size = UINT64_MAX;
  t->pos = cfg->position_name != NULL ? cfg->position_name : "line";
  t->next_base = 0x200000000000ull;
  t->mask = 4095;
  t->map = calloc(t->mask + 1, sizeof *t->map);
  if (t->map == NULL) {
    free(t);
    return AA_ENOMEM;
  }
  *out = t;
  return AA_OK;
}

void aa_replay_torch_free(aa_replay_torch *t) {
  if (t == NULL)
    return;
  for (tseg *s = t->segs; s != NULL;) {
    tseg *n = s->next_all;
    for (tblock *b = s->head; b != NULL;) {
      tblock *nb = b->next;
      free(b);
      b = nb;
    }
    free(s);
    s = n;
  }
  for (size_t i = 0; i < t->nstreams; i++) {
    free(t->streams[i].free[0].v);
    free(t->streams[i].free[1].v);
  }
  free(t->streams);
  free(t->map);
  free(t);
}

const char *aa_replay_torch_error(const aa_replay_torch *t) { return t->err; }

static tstream *stream_get(aa_replay_torch *t, uint64_t stream, size_t *ix) {
  for (size_t i = 0; i < t->nstreams; i++) {
    if (t->streams[i].stream == stream) {
      *ix = i;
      return &t->streams[i];
    }
  }
  if (t->nstreams == t->capstreams) {
    size_t nc = t->capstreams ? t->capstreams * 2 : 4;
    tstream *ns = realloc(t->streams, nc * sizeof *ns);
    if (ns == NULL)
      return NULL;
    t->streams = ns;
    t->capstreams = nc;
  }
  memset(&t->streams[t->nstreams], 0, sizeof t->streams[0]);
  t->streams[t->nstreams].stream = stream;
  *ix = t->nstreams;
  return &t->streams[t->nstreams++];
}

static uint64_t round_size(uint64_t size) {
  if (size < T_MIN_BLOCK)
    return T_MIN_BLOCK;
  return (size + T_MIN_BLOCK - 1) / T_MIN_BLOCK * T_MIN_BLOCK;
}

static uint64_t allocation_size(uint64_t rs) {
  if (rs <= T_SMALL_SIZE)
    return T_SMALL_BUFFER;
  if (rs < T_MIN_LARGE_ALLOC)
    return T_LARGE_BUFFER;
  return (rs + T_ROUND_LARGE - 1) / T_ROUND_LARGE * T_ROUND_LARGE;
}

static bool should_split(const aa_replay_torch *t, const tblock *b, uint64_t rs) {
  uint64_t remaining = b->size - rs;
  if (b->seg->pool == 0 || t->cfg.mode == AA_REPLAY_TORCH_EXPANDABLE)
    return remaining >= T_MIN_BLOCK;
  return rs < t->cfg.max_split_size && remaining > T_SMALL_SIZE;
}

/* Best fit in the list, with the oversize rules; NULL when none. */
static tblock *best_fit(const aa_replay_torch *t, tlist *l, uint64_t rs) {
  size_t i = list_lower(l, rs, 0);
  tblock *b;
  if (i >= l->n)
    return NULL;
  b = l->v[i];
  if (rs < t->cfg.max_split_size && b->size >= t->cfg.max_split_size)
    return NULL;
  if (rs >= t->cfg.max_split_size && b->size >= rs + T_LARGE_BUFFER)
    return NULL;
  list_remove(l, b);
  return b;
}

static tseg *seg_new(aa_replay_torch *t, int pool, size_t stream_ix, bool expandable) {
  tseg *s = calloc(1, sizeof *s);
  if (s == NULL)
    return NULL;
  s->base = t->next_base;
  t->next_base += T_VA_SPAN;
  s->pool = pool;
  s->stream_ix = stream_ix;
  s->expandable = expandable;
  s->next_all = t->segs;
  t->segs = s;
  return s;
}

static void seg_unlink(aa_replay_torch *t, tseg *s) {
  tseg **pp = &t->segs;
  while (*pp != NULL && *pp != s)
    pp = &(*pp)->next_all;
  if (*pp == s)
    *pp = s->next_all;
}

/* Under the capacity: gives back what is cached. Default mode: every free
 * block that is a whole segment (cudaFree). Expandable: the whole pages of
 * each segment's free tail (unmapped). */
static void release_cached(aa_replay_torch *t) {
  tseg **pp = &t->segs;
  while (*pp != NULL) {
    tseg *s = *pp;
    tblock *b = s->tail;
    tstream *st = &t->streams[s->stream_ix];
    if (!s->expandable) {
      if (b != NULL && b == s->head && !b->allocated) {
        list_remove(&st->free[s->pool], b);
        t->reserved -= s->size;
        t->backend_frees++;
        *pp = s->next_all;
        free(b);
        free(s);
        continue;
      }
    } else if (b != NULL && !b->allocated) {
      uint64_t page = s->pool == 0 ? T_SMALL_BUFFER : T_LARGE_BUFFER;
      uint64_t keep = (b->addr - s->base + page - 1) / page * page; /* mapped below b's first page */
      uint64_t give = s->size - keep;
      if (give > 0) {
        list_remove(&st->free[s->pool], b);
        s->size = keep;
        t->reserved -= give;
        t->backend_frees += give / page;
        if (b->addr - s->base >= keep) { /* b lies wholly in the pages given back */
          s->tail = b->prev;
          if (b->prev != NULL)
            b->prev->next = NULL;
          else
            s->head = NULL;
          free(b);
        } else {
          b->size = s->base + keep - b->addr;
          (void)list_insert(&st->free[s->pool], b);
        }
      }
    }
    pp = &s->next_all;
  }
}

/* A new block of at least rs bytes from the backend for (pool, stream):
 * a new segment, or pages mapped at the end of the stream's expandable
 * segment. NULL when the capacity does not allow it (after releasing). */
static tblock *backend_block(aa_replay_torch *t, int pool, size_t six, uint64_t rs) {
  bool expandable = t->cfg.mode == AA_REPLAY_TORCH_EXPANDABLE;
  for (int attempt = 0; attempt < 2; attempt++) {
    tstream *st = &t->streams[six];
    if (!expandable) {
      uint64_t sz = allocation_size(rs);
      if (t->cfg.capacity_bytes == 0 || t->reserved + sz <= t->cfg.capacity_bytes) {
        tseg *s = seg_new(t, pool, six, false);
        tblock *b = s != NULL ? calloc(1, sizeof *b) : NULL;
        if (b == NULL) {
          if (s != NULL) {
            seg_unlink(t, s);
            free(s);
          }
          return NULL;
        }
        s->size = sz;
        b->addr = s->base;
        b->size = sz;
        b->seg = s;
        s->head = s->tail = b;
        t->reserved += sz;
        t->backend_allocs++;
        t->alloc_bytes += sz;
        return b;
      }
    } else {
      uint64_t page = pool == 0 ? T_SMALL_BUFFER : T_LARGE_BUFFER;
      tseg *s = st->exp[pool];
      tblock *tail;
      uint64_t have, need, map;
      if (s == NULL) {
        s = seg_new(t, pool, six, true);
        if (s == NULL)
          return NULL;
        st->exp[pool] = s;
      }
      tail = s->tail;
      have = tail != NULL && !tail->allocated ? tail->size : 0;
      need = rs - have;
      map = (need + page - 1) / page * page;
      if (t->cfg.capacity_bytes == 0 || t->reserved + map <= t->cfg.capacity_bytes) {
        if (have > 0) {
          list_remove(&st->free[pool], tail);
          tail->size += map;
        } else {
          tblock *b = calloc(1, sizeof *b);
          if (b == NULL)
            return NULL;
          b->addr = s->base + s->size;
          b->size = map;
          b->seg = s;
          b->prev = s->tail;
          if (s->tail != NULL)
            s->tail->next = b;
          else
            s->head = b;
          s->tail = b;
          tail = b;
        }
        s->size += map;
        t->reserved += map;
        t->backend_allocs += map / page;
        t->alloc_bytes += map;
        return tail;
      }
    }
    if (attempt == 0)
      release_cached(t);
  }
  t->backend_failures++;
  return NULL;
}

static tblock *t_malloc(aa_replay_torch *t, uint64_t size, uint64_t stream) {
  uint64_t rs = round_size(size);
  int pool = rs <= T_SMALL_SIZE ? 0 : 1;
  size_t six;
  tstream *st = stream_get(t, stream, &six);
  tblock *b;
  if (st == NULL)
    return NULL;
  b = best_fit(t, &st->free[pool], rs);
  if (b != NULL) {
    t->hits++;
  } else {
    b = backend_block(t, pool, six, rs);
    if (b == NULL)
      return NULL;
    t->misses++;
    st = &t->streams[six];
  }
  if (should_split(t, b, rs)) {
    tblock *r = calloc(1, sizeof *r);
    if (r != NULL) {
      r->addr = b->addr + rs;
      r->size = b->size - rs;
      r->seg = b->seg;
      r->prev = b;
      r->next = b->next;
      if (b->next != NULL)
        b->next->prev = r;
      else
        b->seg->tail = r;
      b->next = r;
      b->size = rs;
      if (list_insert(&st->free[pool], r) != AA_OK) {
        /* cannot track the remainder as free: keep it in the block */
        b->size += r->size;
        b->next = r->next;
        if (r->next != NULL)
          r->next->prev = b;
        else
          b->seg->tail = b;
        free(r);
      }
    }
  }
  b->allocated = true;
  return b;
}

static void t_free(aa_replay_torch *t, tblock *b) {
  tseg *s = b->seg;
  tlist *l = &t->streams[s->stream_ix].free[s->pool];
  b->allocated = false;
  if (b->prev != NULL && !b->prev->allocated) {
    tblock *p = b->prev;
    list_remove(l, p);
    p->size += b->size;
    p->next = b->next;
    if (b->next != NULL)
      b->next->prev = p;
    else
      s->tail = p;
    free(b);
    b = p;
  }
  if (b->next != NULL && !b->next->allocated) {
    tblock *n = b->next;
    list_remove(l, n);
    b->size += n->size;
    b->next = n->next;
    if (n->next != NULL)
      n->next->prev = b;
    else
      s->tail = b;
    free(n);
  }
  (void)list_insert(l, b);
}

static int bad_event(aa_replay_torch *t, uint64_t *counter, const aa_replay_event *ev,
                     const char *what) {
  char msg[AA_REPLAY_ERR_CAP];
  (*counter)++;
  snprintf(msg, sizeof msg, "%s %llu: %s pointer 0x%llx (size %llu)", t->pos,
           (unsigned long long)ev->line, what, (unsigned long long)ev->ptr,
           (unsigned long long)ev->size);
  aa__replay_diag_note(&t->diag, ev->line, msg);
  if (t->cfg.on_error == AA_REPLAY_STOP) {
    snprintf(t->err, sizeof t->err, "%s", msg);
    return AA_EPARSE;
  }
  return AA_OK;
}

static int do_alloc(aa_replay_torch *t, const aa_replay_event *ev) {
  size_t i = map_find(t, ev->ptr);
  tblock *b;
  if (t->map[i].b != NULL)
    return bad_event(t, &t->diag.duplicate_ptr, ev, "allocate of an already live");
  t->requests++;
  b = t_malloc(t, ev->size, t->cfg.ignore_streams ? 0 : ev->stream);
  t->map[i].key = ev->ptr;
  t->nmap++;
  if (b == NULL) {
    t->failures++;
    t->failed_live++;
    t->map[i].b = FAILED_T;
  } else {
    t->allocs++;
    b->req = ev->size;
    t->map[i].b = b;
    t->in_use += b->size;
    t->requested += ev->size;
  }
  if (t->nmap * 2 > t->mask + 1 && map_grow(t) != AA_OK) {
    snprintf(t->err, sizeof t->err, "out of memory growing the pointer map");
    return AA_ENOMEM;
  }
  return AA_OK;
}

static int do_free(aa_replay_torch *t, const aa_replay_event *ev) {
  size_t i = map_find(t, ev->ptr);
  tblock *b = t->map[i].b;
  if (b == NULL)
    return bad_event(t, &t->diag.unknown_free, ev, "free of a not live");
  if (b == FAILED_T) {
    t->failed_live--;
    map_remove(t, i);
    return AA_OK;
  }
  if (ev->size != 0 && ev->size != b->req)
    t->diag.size_mismatch++;
  t->frees++;
  t->in_use -= b->size;
  t->requested -= b->req;
  map_remove(t, i);
  t_free(t, b);
  return AA_OK;
}

int aa_replay_torch_feed(void *model, const aa_replay_event *ev, size_t n) {
  aa_replay_torch *t = model;
  for (size_t k = 0; k < n; k++) {
    const aa_replay_event *e = &ev[k];
    int rc = AA_OK;
    if (!t->have_time) {
      t->have_time = true;
      t->first_time = t->last_time = e->time_ns;
    } else if (e->time_ns > t->last_time) {
      double dt = (double)(e->time_ns - t->last_time);
      t->t_req += (double)t->requested * dt;
      t->t_use += (double)t->in_use * dt;
      t->t_res += (double)t->reserved * dt;
      t->last_time = e->time_ns;
    }
    t->e_req += (double)t->requested;
    t->e_use += (double)t->in_use;
    t->e_res += (double)t->reserved;
    switch (e->op) {
    case 'a':
      rc = do_alloc(t, e);
      break;
    case 'f':
      rc = do_free(t, e);
      break;
    case 'x':
      t->trace_failures++;
      break;
    case 'u': /* record_stream's events are not modelled (above) */
      break;
    default:
      snprintf(t->err, sizeof t->err, "%s %llu: unknown op '%c'", t->pos,
               (unsigned long long)e->line, e->op >= 0x20 && e->op < 0x7f ? e->op : '?');
      rc = AA_EINVAL;
      break;
    }
    if (rc != AA_OK)
      return rc;
    t->events++;
    if (t->in_use > t->peak_in_use) {
      t->peak_in_use = t->in_use;
      t->req_at_peak_in_use = t->requested;
    }
    if (t->requested > t->peak_requested)
      t->peak_requested = t->requested;
    if (t->reserved > t->peak_reserved) {
      t->peak_reserved = t->reserved;
      t->in_use_at_peak_reserved = t->in_use;
    }
  }
  return AA_OK;
}

void aa_replay_torch_now(const aa_replay_torch *t, aa_replay_now *out) {
  out->events = t->events;
  out->in_use = t->in_use;
  out->requested = t->requested;
  out->reserved = t->reserved;
}

static double loss(double part, double whole) {
  if (whole <= 0.0 || part >= whole)
    return 0.0;
  return 1.0 - part / whole;
}

void aa_replay_torch_result(aa_replay_torch *t, aa_replay_result *r) {
  const aa_replay_costs *c = &t->cfg.costs;
  bool use_time = t->t_use > 0.0 || t->t_res > 0.0;
  memset(r, 0, sizeof *r);
  r->events = t->events;
  r->requests = t->requests;
  r->allocs = t->allocs;
  r->frees = t->frees;
  r->failures = t->failures;
  r->trace_failures = t->trace_failures;
  r->cache_hits = t->hits;
  r->cache_misses = t->misses;
  if (t->hits + t->misses > 0)
    r->hit_rate = (double)t->hits / (double)(t->hits + t->misses);
  r->backend_allocs = t->backend_allocs;
  r->backend_frees = t->backend_frees;
  r->backend_calls = t->backend_allocs + t->backend_frees;
  r->backend_failures = t->backend_failures;
  r->peak_requested = t->peak_requested;
  r->peak_in_use = t->peak_in_use;
  r->peak_reserved = t->peak_reserved;
  r->requested_at_peak_in_use = t->req_at_peak_in_use;
  r->in_use_at_peak_reserved = t->in_use_at_peak_reserved;
  r->int_frag_peak = loss((double)t->req_at_peak_in_use, (double)t->peak_in_use);
  r->ext_frag_peak = loss((double)t->in_use_at_peak_reserved, (double)t->peak_reserved);
  r->int_frag_avg = use_time ? loss(t->t_req, t->t_use) : loss(t->e_req, t->e_use);
  r->ext_frag_avg = use_time ? loss(t->t_use, t->t_res) : loss(t->e_use, t->e_res);
  r->sim_backend_us = (double)r->backend_allocs * c->alloc_us +
                      (double)r->backend_frees * c->free_us +
                      (double)t->alloc_bytes / (1024.0 * 1024.0 * 1024.0) * c->alloc_us_per_gib +
                      (double)t->hits * c->hit_ns / 1000.0;
  r->live_at_end = t->nmap - t->failed_live;
  r->live_bytes_at_end = t->requested;
  r->trace_span_ns = t->have_time ? t->last_time - t->first_time : 0;
  r->diag = t->diag;
}
