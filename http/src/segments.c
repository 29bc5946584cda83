/*
 * segments.c — GET /segments: a pool's large-path segments and the pieces
 * they are cut into, as JSON for the dashboard's segment map.
 * Entry point: aa_http_segments_json (public).
 *
 * aa_pool_walk_large reports the large path's segments and their blocks
 * under the large-path lock alone (the slabs, which the map does not show,
 * are not walked: their class locks are what small requests take, and a
 * pool of many slabs took ~20 ms to walk); the callback only copies the
 * entries into an array, and the JSON is written after the walk. Neighbouring free pieces
 * are merged. At most SEG_MAX segments and PIECE_MAX pieces are listed
 * ("truncated": true beyond); the totals count everything.
 *
 * No address is served: a segment is named by its place in the walk
 * ("id": 0, 1, ...) and placed by its offset from the lowest segment served,
 * since heap and device addresses defeat ASLR for anyone who can connect
 * (docs/security.md, "What each read reveals").
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"
#include "adaptalloc/internal/util.h"

#define SEG_MAX 4096
#define PIECE_MAX 65536

typedef struct {
  uintptr_t address;
  size_t size;
  uint32_t flags;
  size_t first; /* index of its first piece */
  size_t npieces;
  size_t used;
} seg_t;

typedef struct {
  size_t size;
  bool used;
  bool lent; /* pages a stitched range maps again (AA_WALK_LENT) */
} piece_t;

typedef struct {
  seg_t *segs;
  size_t nsegs;
  piece_t *pieces;
  size_t npieces;
  bool in_large; /* the blocks that follow belong to a large segment */
  bool truncated;
  uint64_t total_segments, total_bytes, used_bytes;
} walk_t;

static int on_entry(void *user, const aa_walk_entry *e) {
  walk_t *w = user;
  if (e->kind == AA_WALK_SEGMENT) {
    w->in_large = (e->flags & AA_WALK_LARGE) != 0;
    if (!w->in_large)
      return 0;
    w->total_segments++;
    if ((e->flags & AA_WALK_STITCHED) == 0) /* a stitched range: the same memory as */
      w->total_bytes += e->size;            /* the lent pieces, counted there once */
    if (w->nsegs == SEG_MAX) {
      w->truncated = true;
      w->in_large = false; /* counted, not listed */
      return 0;
    }
    w->segs[w->nsegs].address = e->address;
    w->segs[w->nsegs].size = e->size;
    w->segs[w->nsegs].flags = e->flags;
    w->segs[w->nsegs].first = w->npieces;
    w->segs[w->nsegs].npieces = 0;
    w->segs[w->nsegs].used = 0;
    w->nsegs++;
    return 0;
  }
  if (e->kind != AA_WALK_BLOCK || w->nsegs == 0)
    return 0;
  if (!w->in_large) {
    if ((e->flags & AA_WALK_IN_USE) != 0 && w->truncated)
      w->used_bytes += e->size; /* an unlisted large segment's */
    return 0;
  }
  {
    seg_t *s = &w->segs[w->nsegs - 1];
    bool used = (e->flags & AA_WALK_IN_USE) != 0;
    bool lent = (e->flags & AA_WALK_LENT) != 0;
    if (used) {
      s->used += e->size;
      w->used_bytes += e->size;
    }
    if (s->npieces > 0 && !used && !lent && !w->pieces[w->npieces - 1].used &&
        !w->pieces[w->npieces - 1].lent) {
      w->pieces[w->npieces - 1].size += e->size; /* merge free neighbours */
      return 0;
    }
    if (w->npieces == PIECE_MAX) {
      w->truncated = true;
      return 0;
    }
    w->pieces[w->npieces].size = e->size;
    w->pieces[w->npieces].used = used;
    w->pieces[w->npieces].lent = lent;
    w->npieces++;
    s->npieces++;
  }
  return 0;
}

int aa_http_segments_json(aa_pool *pool, char **out, size_t *len) {
  walk_t w;
  aa__buf b;
  size_t i, j;
  int rc;

  if (out != NULL)
    *out = NULL;
  if (len != NULL)
    *len = 0;
  if (pool == NULL || out == NULL)
    return AA_EINVAL;
  memset(&w, 0, sizeof w);
  w.segs = malloc(SEG_MAX * sizeof *w.segs);
  w.pieces = malloc(PIECE_MAX * sizeof *w.pieces);
  if (w.segs == NULL || w.pieces == NULL) {
    free(w.segs);
    free(w.pieces);
    return AA_ENOMEM;
  }
  rc = aa_pool_walk_large(pool, on_entry, &w);
  if (rc != AA_OK) {
    free(w.segs);
    free(w.pieces);
    return rc;
  }
  aa__buf_init(&b);
  aa__buf_puts(&b, "{\"pool\":");
  aa__buf_json_cstr(&b, aa_pool_name(pool));
  aa__buf_printf(&b,
                 ",\"segment_count\":%llu,\"bytes\":%llu,\"used_bytes\":%llu,"
                 "\"truncated\":%s,\"segments\":[",
                 (unsigned long long)w.total_segments,
                 (unsigned long long)w.total_bytes,
                 (unsigned long long)w.used_bytes, w.truncated ? "true" : "false");
  uintptr_t lowest = UINTPTR_MAX;
  for (i = 0; i < w.nsegs; i++)
    if (w.segs[i].address < lowest)
      lowest = w.segs[i].address;
  for (i = 0; i < w.nsegs; i++) {
    const seg_t *s = &w.segs[i];
    /* offset: from the lowest segment served, so that the dashboard can see
     * which runs of an expandable reservation are contiguous without any
     * absolute address leaving the process */
    aa__buf_printf(&b,
                   "%s{\"id\":%zu,\"offset\":%llu,\"size\":%llu,\"used\":%llu,"
                   "\"expandable\":%s,\"stitched\":%s,\"small_requests\":%s,\"pieces\":[",
                   i > 0 ? "," : "", i,
                   (unsigned long long)(s->address - lowest),
                   (unsigned long long)s->size, (unsigned long long)s->used,
                   (s->flags & AA_WALK_EXPANDABLE) != 0 ? "true" : "false",
                   (s->flags & AA_WALK_STITCHED) != 0 ? "true" : "false",
                   (s->flags & AA_WALK_SMALL_REQS) != 0 ? "true" : "false");
    for (j = 0; j < s->npieces; j++) {
      const piece_t *p = &w.pieces[s->first + j];
      aa__buf_printf(&b, "%s[%llu,%d]", j > 0 ? "," : "", (unsigned long long)p->size,
                     p->used ? 1 : p->lent ? 2
                                           : 0);
    }
    aa__buf_puts(&b, "]}");
  }
  aa__buf_puts(&b, "]}");
  free(w.segs);
  free(w.pieces);
  {
    size_t l = 0;
    rc = aa__buf_take(&b, out, &l);
    if (len != NULL)
      *len = l;
  }
  return rc;
}
