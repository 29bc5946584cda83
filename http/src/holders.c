/*
 * holders.c — GET /holders: who holds a pool's memory now, from its live
 * walk: the requested sizes that hold the most bytes and the largest live
 * blocks. Entry point: aa_http_holders_json (public).
 *
 * aa_pool_walk reports every slab and large-path segment and their blocks,
 * each class under its own lock and the large path under its lock (a walk
 * of every block the pool has: ~20 ms for a pool of many slabs, during which
 * each class's requests wait their turn; docs/http.md "GET /holders"). The
 * callback only folds an in-use block into two bounded structures, and the
 * JSON is written after the walk:
 *   sizes    an open-addressing table of at most SIZE_SLOTS / 2 distinct
 *            requested sizes (blocks, bytes held); a size that finds no
 *            room is counted in "other" (the totals count everything);
 *   largest  a min-heap of the `top` largest blocks (address, size,
 *            requested, kind), top <= AA_HTTP_HOLDERS_MAX.
 *
 * No address is served: a block is placed by its offset from the lowest
 * segment the walk reported, as /segments does (docs/security.md, "What
 * each read reveals"). The frames of the largest
 * blocks come from the caller's frames_fn after the walk (the runtime's:
 * a sampled trace keeps each traced block's stack id beside it, the runtime
 * the recent stacks' text; docs/http.md "GET /holders"): a list of the
 * text's lines, or null with "frames_evicted" saying whether a stack was
 * traced but is no longer kept.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"
#include "adaptalloc/internal/util.h"

#define SIZE_SLOTS 65536u /* a power of two; at most half are filled */

typedef struct {
  uint64_t size; /* requested bytes; 0: an empty slot */
  uint64_t blocks;
  uint64_t bytes; /* block bytes held */
} size_row;

typedef enum { K_SLAB = 0,
               K_LARGE = 1,
               K_PLANNED = 2 } block_kind;

typedef struct {
  uintptr_t address;
  size_t size;
  size_t requested;
  block_kind kind;
  bool stitched;
} big_t;

typedef struct {
  size_row *sizes;
  size_t nsizes;
  big_t *heap; /* min-heap by size, at most cap */
  size_t nheap, cap;
  bool in_large, in_stitched;
  uintptr_t lowest;
  uint64_t live_blocks, live_bytes, requested_bytes;
  uint64_t other_blocks, other_bytes; /* sizes the table had no room for */
} walk_t;

static size_t slot_of(uint64_t size) {
  return (size_t)((size * 0x9E3779B97F4A7C15ull) >> 40) & (SIZE_SLOTS - 1);
}

static void add_size(walk_t *w, uint64_t req, uint64_t held) {
  size_t i = slot_of(req);
  for (;;) {
    size_row *r = &w->sizes[i];
    if (r->size == req) {
      r->blocks++;
      r->bytes += held;
      return;
    }
    if (r->size == 0)
      break;
    i = (i + 1) & (SIZE_SLOTS - 1);
  }
  if (w->nsizes == SIZE_SLOTS / 2) { /* keeps probes short; the rest: other */
    w->other_blocks++;
    w->other_bytes += held;
    return;
  }
  w->sizes[i].size = req;
  w->sizes[i].blocks = 1;
  w->sizes[i].bytes = held;
  w->nsizes++;
}

static bool smaller(const big_t *a, const big_t *b) {
  return a->size < b->size || (a->size == b->size && a->address > b->address);
}

static void heap_down(big_t *h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    if (l < n && smaller(&h[l], &h[m]))
      m = l;
    if (l + 1 < n && smaller(&h[l + 1], &h[m]))
      m = l + 1;
    if (m == i)
      return;
    big_t t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

static void add_big(walk_t *w, const big_t *b) {
  if (w->nheap < w->cap) {
    size_t i = w->nheap++;
    w->heap[i] = *b;
    while (i > 0 && smaller(&w->heap[i], &w->heap[(i - 1) / 2])) {
      big_t t = w->heap[i];
      w->heap[i] = w->heap[(i - 1) / 2];
      w->heap[(i - 1) / 2] = t;
      i = (i - 1) / 2;
    }
    return;
  }
  if (w->cap == 0 || !smaller(&w->heap[0], b))
    return;
  w->heap[0] = *b;
  heap_down(w->heap, w->nheap, 0);
}

static int on_entry(void *user, const aa_walk_entry *e) {
  walk_t *w = user;
  if (e->kind == AA_WALK_SEGMENT) {
    w->in_large = (e->flags & AA_WALK_LARGE) != 0;
    w->in_stitched = (e->flags & AA_WALK_STITCHED) != 0;
    if (e->address < w->lowest)
      w->lowest = e->address;
    return 0;
  }
  if (e->kind != AA_WALK_BLOCK || (e->flags & AA_WALK_IN_USE) == 0)
    return 0;
  {
    /* a block whose request is not known (0) counts as its own size */
    uint64_t req = e->requested != 0 ? e->requested : e->size;
    big_t b;
    w->live_blocks++;
    w->live_bytes += e->size;
    w->requested_bytes += req;
    add_size(w, req, e->size);
    b.address = e->address;
    b.size = e->size;
    b.requested = (size_t)req;
    b.kind = !w->in_large                        ? K_SLAB
             : (e->flags & AA_WALK_PLANNED) != 0 ? K_PLANNED
                                                 : K_LARGE;
    b.stitched = w->in_large && w->in_stitched;
    add_big(w, &b);
  }
  return 0;
}

static int by_bytes(const void *a, const void *b) {
  const size_row *x = a, *y = b;
  if (x->bytes != y->bytes)
    return x->bytes > y->bytes ? -1 : 1;
  return x->size < y->size ? -1 : x->size > y->size ? 1
                                                    : 0;
}

static int by_size_desc(const void *a, const void *b) {
  const big_t *x = a, *y = b;
  if (x->size != y->size)
    return x->size > y->size ? -1 : 1;
  return x->address < y->address ? -1 : x->address > y->address ? 1
                                                                : 0;
}

static const char *kind_name(block_kind k) {
  return k == K_PLANNED ? "planned" : k == K_LARGE ? "large"
                                                   : "slab";
}

/* "frames": the text's lines as a list of strings (a last empty line
 * dropped), or null; then "frames_evicted". */
static void put_frames(aa__buf *b, aa_pool *pool, const big_t *x, aa_http_frames_fn fn,
                       void *user) {
  char *text = NULL;
  size_t len = 0;
  int rc = fn != NULL ? fn(user, pool, (const void *)x->address, &text, &len) : AA_ENOENT;
  if (rc != AA_OK || text == NULL) {
    aa__buf_printf(b, ",\"frames\":null,\"frames_evicted\":%s", rc == AA_ELIMIT ? "true" : "false");
    free(text);
    return;
  }
  aa__buf_puts(b, ",\"frames\":[");
  size_t at = 0;
  bool first = true;
  while (at < len) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t end = nl != NULL ? (size_t)(nl - text) : len;
    aa__buf_printf(b, "%s", first ? "" : ",");
    aa__buf_json_str(b, text + at, end - at);
    first = false;
    at = end + 1;
  }
  aa__buf_puts(b, "],\"frames_evicted\":false");
  free(text);
}

int aa_http_holders_json(aa_pool *pool, unsigned top, char **out, size_t *len) {
  return aa_http_holders_json_frames(pool, top, NULL, NULL, out, len);
}

int aa_http_holders_json_frames(aa_pool *pool, unsigned top, aa_http_frames_fn frames_fn,
                                void *user, char **out, size_t *len) {
  walk_t w;
  aa__buf b;
  size_t i, j;
  uint64_t t0, walk_us;
  int rc;

  if (out != NULL)
    *out = NULL;
  if (len != NULL)
    *len = 0;
  if (pool == NULL || out == NULL || top == 0 || top > AA_HTTP_HOLDERS_MAX)
    return AA_EINVAL;
  memset(&w, 0, sizeof w);
  w.lowest = UINTPTR_MAX;
  w.cap = top;
  w.sizes = calloc(SIZE_SLOTS, sizeof *w.sizes);
  w.heap = malloc(top * sizeof *w.heap);
  if (w.sizes == NULL || w.heap == NULL) {
    rc = AA_ENOMEM;
    goto done;
  }
  t0 = aa_now_ns();
  rc = aa_pool_walk(pool, on_entry, &w);
  walk_us = (aa_now_ns() - t0) / 1000;
  if (rc != AA_OK)
    goto done;

  /* the filled rows to the front, the most bytes first */
  for (i = 0, j = 0; i < SIZE_SLOTS; i++)
    if (w.sizes[i].size != 0)
      w.sizes[j++] = w.sizes[i];
  qsort(w.sizes, j, sizeof *w.sizes, by_bytes);
  qsort(w.heap, w.nheap, sizeof *w.heap, by_size_desc);

  aa__buf_init(&b);
  aa__buf_puts(&b, "{\"pool\":");
  aa__buf_json_cstr(&b, aa_pool_name(pool));
  aa__buf_printf(&b,
                 ",\"top\":%u,\"live_blocks\":%llu,\"live_bytes\":%llu,"
                 "\"requested_bytes\":%llu,\"walk_us\":%llu,\"top_sizes\":[",
                 top, (unsigned long long)w.live_blocks, (unsigned long long)w.live_bytes,
                 (unsigned long long)w.requested_bytes, (unsigned long long)walk_us);
  for (i = 0; i < j && i < top; i++)
    aa__buf_printf(&b, "%s{\"size\":%llu,\"blocks\":%llu,\"bytes\":%llu}", i > 0 ? "," : "",
                   (unsigned long long)w.sizes[i].size, (unsigned long long)w.sizes[i].blocks,
                   (unsigned long long)w.sizes[i].bytes);
  aa__buf_printf(&b,
                 "],\"distinct_sizes\":%llu,\"other\":{\"blocks\":%llu,\"bytes\":%llu},"
                 "\"largest\":[",
                 (unsigned long long)j, (unsigned long long)w.other_blocks,
                 (unsigned long long)w.other_bytes);
  for (i = 0; i < w.nheap; i++) {
    const big_t *x = &w.heap[i];
    /* offset: from the lowest segment the walk reported; no absolute
     * address leaves the process */
    aa__buf_printf(&b,
                   "%s{\"offset\":%llu,\"size\":%llu,\"requested\":%llu,\"kind\":\"%s\","
                   "\"stitched\":%s",
                   i > 0 ? "," : "", (unsigned long long)(x->address - w.lowest),
                   (unsigned long long)x->size, (unsigned long long)x->requested,
                   kind_name(x->kind), x->stitched ? "true" : "false");
    put_frames(&b, pool, x, frames_fn, user);
    aa__buf_puts(&b, "}");
  }
  aa__buf_puts(&b, "]}");
  {
    size_t l = 0;
    rc = aa__buf_take(&b, out, &l);
    if (len != NULL)
      *len = l;
  }
done:
  free(w.sizes);
  free(w.heap);
  return rc;
}
