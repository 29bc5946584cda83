/*
 * large_give.c — a block given back to the path (aa__lg_release_chunk): the
 * user's free, a thread cache's flush or take-back, the plan's arena. The
 * counts, the streams its last uses were on (events), then its place: a
 * stitched range keeps its one chunk, a chunk freed whole is parked, else
 * it merges into the bins; the cache bound last. Under pool->large->mu.
 */
#include <stdlib.h>

#include "large_internal.h"

/* Gives a chunk (live or held, its state already moved to free) back:
 * accounting, record_stream events, parking. `counted`: a user's free (a
 * thread cache's flush was counted when the user freed it). Under large->mu. */
void aa__lg_release_chunk(aa_pool *pool, aa__chunk *c, aa_stream stream, bool counted) {
  aa__assert(!c->free && (atomic_load_explicit(&c->state, AA__RLX) & 3) == AA__CH_FREE);
  aa__chunk *h = aa__lg_hash_find(pool, c->base, true);
  aa__assert(h == c);
  (void)h;
  if (pool->large->arena != c) { /* the plan's arena was never counted in use */
    aa__assert(pool->large->in_use >= c->size && pool->large->req >= c->req);
    pool->large->in_use -= c->size;
    pool->large->req -= c->req;
    atomic_fetch_sub_explicit(&pool->out_bytes, c->size, AA__RLX);
  }
  if (counted)
    pool->large->frees++;
  if (pool->cfg.large_mode == AA_LARGE_PASSTHROUGH) {
    free(c->xs);
    c->xs = NULL;
    c->nxs = 0;
    c->free = 1;
    aa__lg_seg_unlink_free(pool, c->seg);
    return;
  }
  if (c->waited && pool->has_events && stream != c->stream) {
    /* handed out ordered after other streams' pending work (order_after)
     * and freed elsewhere: that work is behind c->stream's, which counts as
     * a record_stream'd stream (an event there), so that the block is not
     * taken on the free's stream, or anywhere once it is idle (the host
     * pseudo-stream at once), while it is still running */
    bool have = false;
    for (uint32_t i = 0; i < c->nxs && !have; i++)
      have = c->xs[i] == c->stream;
    aa_stream *v = have ? c->xs : realloc(c->xs, (size_t)(c->nxs + 1) * sizeof *v);
    if (v == NULL) {
      aa_backend *b = pool->backend; /* cannot track it: wait for all work */
      if (b->ops->synchronize)
        b->ops->synchronize(b);
    } else if (!have) {
      c->xs = v;
      c->xs[c->nxs++] = c->stream;
    }
  }
  c->waited = 0;
  if (pool->has_events)
    stream = aa__rec_free_stream(c->xs, c->nxs, stream);
  c->free = 1;
  c->freed_at = pool->large->frees;
  c->stream = stream;
  c->any = !pool->has_events;
  c->ev = NULL;
  if (c->nxs > 0 && pool->has_events) {
    void **ev;
    bool synced;
    /* Events on the other streams (xev): once they are done, a block freed
     * on `stream`, reused there at once as PyTorch reuses it. And one on
     * `stream` itself (ev, which aa__lg_usable would otherwise record
     * lazily): with both done it serves every stream, with no wait for the
     * work `stream` is given after this free. */
    uint32_t n = aa__stream_events(pool, c->xs, c->nxs, stream, &c->ev, &ev, &synced);
    if (synced)
      c->any = 1; /* the device was synchronized: usable on any stream */
    c->xev = ev;
    c->nxev = n;
  }
  free(c->xs);
  c->xs = NULL;
  c->nxs = 0;
  if (c->seg->st != NULL) {
    aa__lg_stitch_freed(pool, c); /* a stitched range keeps its one chunk */
    return;
  }
  if (c->nxev == 0)
    aa__lg_park(pool, c);
  else
    aa__lg_coalesce_insert(pool, c);
  aa__lg_enforce_bound(pool);
}
