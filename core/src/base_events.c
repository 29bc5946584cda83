/*
 * base_events.c — the backend's stream events as the small and the large
 * path both use them: querying and releasing events, asking whether a stream
 * is idle, recording the events a record_stream'd block waits for, and the
 * stream such a block is put back on when it needs none.
 *
 * Entry points: aa__events_done, aa__event_pending, aa__stream_idle, aa__event_release,
 * aa__stream_events, aa__rec_free_stream.
 */
#include <stdlib.h>

#include "adaptalloc/cuda.h" /* AA_STREAM_HOST */
#include "core_internal.h"

/* Queries events, releasing the completed ones (array compacted). Returns 1
 * when none is left pending. */
int aa__events_done(aa_pool *pool, void **ev, uint32_t *n) {
  aa_backend *b = pool->backend;
  uint32_t j = 0;
  for (uint32_t i = 0; i < *n; i++) {
    int q = b->ops->event_query ? b->ops->event_query(b, ev[i]) : AA_OK;
    if (q == AA_EAGAIN) {
      ev[j++] = ev[i];
    } else if (b->ops->event_release) {
      b->ops->event_release(b, ev[i]);
    }
  }
  *n = j;
  return j == 0;
}

bool aa__event_pending(aa_pool *pool, void *ev) {
  aa_backend *b = pool->backend;
  return ev != NULL && b->ops->event_query != NULL && b->ops->event_query(b, ev) == AA_EAGAIN;
}

bool aa__stream_idle(aa_pool *pool, aa_stream stream) {
  aa_backend *b = pool->backend;
  if (b->ops->stream_query == NULL)
    return false;
  atomic_fetch_add_explicit(&pool->stream_queries, 1, AA__RLX);
  if (b->ops->stream_query(b, stream) != AA_OK)
    return false;
  atomic_fetch_add_explicit(&pool->stream_idle, 1, AA__RLX);
  return true;
}

void aa__event_release(aa_pool *pool, void *ev) {
  aa_backend *b = pool->backend;
  if (ev && b->ops->event_release)
    b->ops->event_release(b, ev);
}

uint32_t aa__stream_events(aa_pool *pool, const aa_stream *xs, uint32_t nxs, aa_stream stream,
                           void **own, void ***evs, bool *synced) {
  aa_backend *b = pool->backend;
  void **ev = calloc((size_t)nxs + 1, sizeof *ev);
  uint32_t n = 0;
  bool failed = ev == NULL;
  *evs = NULL;
  *synced = false;
  if (own != NULL)
    *own = NULL;
  for (uint32_t i = 0; i < nxs && !failed; i++) {
    if (xs[i] == stream)
      continue;
    if (b->ops->event_record(b, xs[i], &ev[n]) == AA_OK)
      n++;
    else
      failed = true;
  }
  if (!failed && n > 0 && own == NULL) {
    if (b->ops->event_record(b, stream, &ev[n]) == AA_OK)
      n++;
    else
      failed = true;
  } else if (!failed && n > 0 && b->ops->event_record(b, stream, own) != AA_OK) {
    *own = NULL; /* the caller records it later, when it is asked for */
  }
  if (failed) {
    /* cannot track it: wait for all work instead */
    for (uint32_t i = 0; i < n; i++)
      aa__event_release(pool, ev[i]);
    free(ev);
    if (b->ops->synchronize)
      b->ops->synchronize(b);
    *synced = true;
    return 0;
  }
  if (n == 0) {
    free(ev);
    return 0;
  }
  *evs = ev;
  return n;
}

aa_stream aa__rec_free_stream(const aa_stream *xs, uint32_t nxs, aa_stream stream) {
  if (stream == AA_STREAM_HOST && nxs == 1)
    return xs[0];
  return stream;
}
