/*
 * oom.c — the out-of-memory observer: counts each request that failed after
 * the release and the one retry (central.c), and when an observer is set
 * (aa_pool_set_oom_observer) fills an aa_oom_info — the request, the pool's
 * figures, its segments, the largest free holes, the most requested sizes
 * and the live block sizes holding the most bytes — and hands it over. Entry point: aa__oom_fail (alloc.c, large.c).
 * The record is built on the failing thread's stack from the public
 * snapshot calls (stats, the large-path walk); nothing comes from the pool.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core_internal.h"
#include "adaptalloc/internal/util.h"

/* set while this thread reports: a failure inside the observer is counted
 * but not reported again */
static _Thread_local bool t_reporting;

void aa_pool_set_oom_observer(aa_pool *pool, aa_oom_fn fn, void *user) {
  if (pool == NULL)
    return;
  pthread_mutex_lock(&pool->oom_mu); /* waits for a call under way */
  pool->oom_fn = fn;
  pool->oom_user = fn ? user : NULL;
  pthread_mutex_unlock(&pool->oom_mu);
}

/* Keeps the n largest of a descending list of at most AA_OOM_TOP. */
static void top_put(uint64_t *v, uint32_t *n, uint64_t x) {
  uint32_t i = *n < AA_OOM_TOP ? (*n)++ : AA_OOM_TOP;
  if (i == AA_OOM_TOP) {
    if (x <= v[AA_OOM_TOP - 1])
      return;
    i = AA_OOM_TOP - 1;
  }
  while (i > 0 && v[i - 1] < x) {
    v[i] = v[i - 1];
    i--;
  }
  v[i] = x;
}

/* The same for (size, count) pairs keyed by size: a size already listed
 * counts once more; else the n largest sizes are kept. */
static void seg_put(aa_size_count *v, uint32_t *n, uint64_t size) {
  for (uint32_t j = 0; j < *n; j++) {
    if (v[j].size == size) {
      v[j].count++;
      return;
    }
  }
  uint32_t i = *n < AA_OOM_TOP ? (*n)++ : AA_OOM_TOP;
  if (i == AA_OOM_TOP) {
    if (size <= v[AA_OOM_TOP - 1].size)
      return;
    i = AA_OOM_TOP - 1;
  }
  while (i > 0 && v[i - 1].size < size) {
    v[i] = v[i - 1];
    i--;
  }
  v[i].size = size;
  v[i].count = 1;
}

/* Distinct live block sizes gathered before the AA_OOM_TOP holding the most
 * bytes are kept: each class's size and the large path's sizes. */
#define LIVE_SCRATCH 64

typedef struct oom_walk {
  aa_oom_info *info;
  aa_size_count live[LIVE_SCRATCH];
  uint32_t nlive;
} oom_walk;

/* Counts `count` live blocks of `size` bytes. A size already gathered adds
 * up; a new one takes a free slot, or, when every slot is taken, the slot of
 * the size holding the fewest bytes if it holds more (so with more than
 * LIVE_SCRATCH distinct sizes the list is close to, not always, the top). */
static void live_put(oom_walk *w, uint64_t size, uint64_t count) {
  uint32_t least = 0;
  if (size == 0 || count == 0)
    return;
  for (uint32_t j = 0; j < w->nlive; j++) {
    if (w->live[j].size == size) {
      w->live[j].count += count;
      return;
    }
    if (w->live[j].size * w->live[j].count < w->live[least].size * w->live[least].count)
      least = j;
  }
  if (w->nlive < LIVE_SCRATCH) {
    w->live[w->nlive++] = (aa_size_count){size, count};
    return;
  }
  if (size * count > w->live[least].size * w->live[least].count)
    w->live[least] = (aa_size_count){size, count};
}

/* Most bytes first, then the larger size. */
static int live_cmp(const void *a, const void *b) {
  const aa_size_count *x = a, *y = b;
  uint64_t bx = x->size * x->count, by = y->size * y->count;
  if (bx != by)
    return bx < by ? 1 : -1;
  return x->size < y->size ? 1 : x->size > y->size ? -1
                                                   : 0;
}

static int walk_one(void *user, const aa_walk_entry *e) {
  oom_walk *w = user;
  aa_oom_info *info = w->info;
  if (e->kind == AA_WALK_SEGMENT) {
    info->segments++;
    seg_put(info->seg_sizes, &info->nseg_sizes, e->size);
  } else if (!(e->flags & AA_WALK_IN_USE)) {
    info->large_bytes_free += e->size;
    top_put(info->holes, &info->nholes, e->size);
  } else {
    live_put(w, e->size, 1);
  }
  return 0;
}

static uint64_t unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void fill(aa_pool *pool, size_t size, aa_stream stream, uint64_t count, uint64_t when_ms,
                 oom_walk *w) {
  aa_oom_info *info = w->info;
  memset(info, 0, sizeof *info);
  w->nlive = 0;
  info->version = AA_OOM_VERSION;
  info->size = sizeof *info;
  snprintf(info->pool, sizeof info->pool, "%s", pool->name);
  info->time_ns = aa_now_ns();
  info->unix_ms = when_ms;
  info->count = count;
  info->request = size;
  info->stream = (uint64_t)(uintptr_t)stream;
  info->slab_size = pool->cfg.slab_size;
  info->bytes_reserved = atomic_load(&pool->bytes_reserved);
  info->limit_bytes = atomic_load(&pool->limit);
  /* a snapshot is about 20 KiB: from the C heap, never from this pool; when
   * that fails too the record keeps the counters read above */
  aa_pool_stats *st = malloc(sizeof *st);
  if (st != NULL && aa_pool_stats_get(pool, st) == AA_OK) {
    info->bytes_reserved = st->bytes_reserved;
    info->bytes_in_use = st->bytes_in_use;
    info->bytes_requested = st->bytes_requested;
    info->limit_bytes = st->limit_bytes;
    for (uint32_t i = 0; i < st->class_count; i++) {
      info->slabs += st->classes[i].slabs;
      live_put(w, st->classes[i].block_size, st->classes[i].blocks_in_use);
    }
    for (uint32_t i = 0; i < st->hh_count && info->ntop < AA_OOM_TOP; i++)
      info->top[info->ntop++] = st->hh[i];
  }
  free(st);
  (void)aa_pool_walk_large(pool, walk_one, w);
  info->segments += info->slabs;
  qsort(w->live, w->nlive, sizeof w->live[0], live_cmp);
  info->nlive = w->nlive < AA_OOM_TOP ? w->nlive : AA_OOM_TOP;
  memcpy(info->live, w->live, info->nlive * sizeof info->live[0]);
}

void aa__oom_fail(aa_pool *pool, size_t size, aa_stream stream) {
  uint64_t count = atomic_fetch_add_explicit(&pool->ooms, 1, AA__RLX) + 1;
  uint64_t when = unix_ms();
  /* the stats' last_oom_unix_ms, observer or not */
  atomic_store_explicit(&pool->last_oom_ms, when, AA__RLX);
  if (t_reporting)
    return;
  /* a failure while another is reported is not made to wait for it */
  if (pthread_mutex_trylock(&pool->oom_mu) != 0)
    return;
  if (pool->oom_fn != NULL) {
    aa_oom_info info;
    oom_walk w;
    w.info = &info;
    t_reporting = true;
    fill(pool, size, stream, count, when, &w);
    pool->oom_fn(pool->oom_user, pool, &info);
    t_reporting = false;
  }
  pthread_mutex_unlock(&pool->oom_mu);
}

/* ------------------------------------------------------------ JSON */

static void sizes_json(aa__buf *b, const char *key, const aa_size_count *v, uint32_t n) {
  aa__buf_printf(b, ",\"%s\":[", key);
  for (uint32_t i = 0; i < n; i++)
    aa__buf_printf(b, "%s{\"size\":%" PRIu64 ",\"count\":%" PRIu64 "}", i ? "," : "", v[i].size,
                   v[i].count);
  aa__buf_append(b, "]", 1);
}

size_t aa_oom_info_json(const aa_oom_info *info, char *buf, size_t cap) {
  aa__buf b;
  size_t len = 0;
  char *s = NULL;
  aa__buf_init(&b);
  if (info == NULL) {
    aa__buf_puts(&b, "null");
  } else {
    char name[sizeof info->pool + 1];
    memcpy(name, info->pool, sizeof info->pool);
    name[sizeof info->pool] = '\0';
    aa__buf_printf(&b, "{\"version\":%" PRIu32 ",\"pool\":", info->version);
    aa__buf_json_cstr(&b, name);
    aa__buf_printf(&b,
                   ",\"time_ns\":%" PRIu64 ",\"unix_ms\":%" PRIu64 ",\"count\":%" PRIu64
                   ",\"request\":%" PRIu64 ",\"stream\":%" PRIu64 ",\"bytes_reserved\":%" PRIu64
                   ",\"bytes_in_use\":%" PRIu64 ",\"bytes_requested\":%" PRIu64
                   ",\"limit_bytes\":%" PRIu64 ",\"segments\":%" PRIu64 ",\"slabs\":%" PRIu64
                   ",\"slab_size\":%" PRIu64 ",\"large_bytes_free\":%" PRIu64,
                   info->time_ns, info->unix_ms, info->count, info->request, info->stream,
                   info->bytes_reserved, info->bytes_in_use, info->bytes_requested,
                   info->limit_bytes, info->segments, info->slabs, info->slab_size,
                   info->large_bytes_free);
    uint32_t nseg = info->nseg_sizes < AA_OOM_TOP ? info->nseg_sizes : AA_OOM_TOP;
    uint32_t nholes = info->nholes < AA_OOM_TOP ? info->nholes : AA_OOM_TOP;
    uint32_t ntop = info->ntop < AA_OOM_TOP ? info->ntop : AA_OOM_TOP;
    sizes_json(&b, "segment_sizes", info->seg_sizes, nseg);
    aa__buf_puts(&b, ",\"holes\":[");
    for (uint32_t i = 0; i < nholes; i++)
      aa__buf_printf(&b, "%s%" PRIu64, i ? "," : "", info->holes[i]);
    aa__buf_append(&b, "]", 1);
    uint32_t nlive = info->nlive < AA_OOM_TOP ? info->nlive : AA_OOM_TOP;
    sizes_json(&b, "top_sizes", info->top, ntop);
    sizes_json(&b, "live_sizes", info->live, nlive);
    aa__buf_append(&b, "}", 1);
  }
  if (aa__buf_take(&b, &s, &len) != AA_OK) {
    if (cap > 0)
      buf[0] = '\0';
    return cap > 0 ? cap : 1; /* reads as truncated */
  }
  if (cap > 0) {
    size_t n = len < cap - 1 ? len : cap - 1;
    memcpy(buf, s, n);
    buf[n] = '\0';
  }
  free(s);
  return len;
}
