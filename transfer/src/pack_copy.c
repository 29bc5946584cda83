/*
 * pack_copy.c — the packer's parallel gather copy (see pack_copy.h).
 *
 * One CPU thread's memcpy into pinned memory (about 7 GB/s on the H200
 * machine, less when the source is freshly mapped shared memory and every
 * page faults) is slower than the PCIe copy that follows. Splitting by items
 * would leave a batch made of one large tensor (an image batch) to one
 * thread, so the split is by bytes: thread w copies bytes [lo, hi) of the
 * items' concatenation, whichever items those fall in.
 */
#include <pthread.h>
#include <string.h>

#include "pack_copy.h"

#define PACK_SPLIT_ALIGN ((size_t)4096) /* range boundaries, for whole pages */

typedef struct pack_range {
  unsigned char *dst;
  const void *const *src;
  const size_t *n;
  const size_t *off;
  size_t count;
  size_t lo, hi; /* bytes of the concatenation */
} pack_range;

static void copy_range(const pack_range *r) {
  size_t pos = 0; /* where item i starts in the concatenation */
  for (size_t i = 0; i < r->count && pos < r->hi; i++) {
    size_t end = pos + r->n[i];
    if (end > r->lo) {
      size_t a = r->lo > pos ? r->lo - pos : 0;
      size_t b = r->hi < end ? r->hi - pos : r->n[i];
      memcpy(r->dst + r->off[i] + a, (const unsigned char *)r->src[i] + a, b - a);
    }
    pos = end;
  }
}

static void *copy_thread(void *arg) {
  copy_range(arg);
  return NULL;
}

void aa__pack_copy(unsigned char *dst, const void *const *src, const size_t *n,
                   const size_t *off, size_t count, unsigned threads) {
  pack_range r[AA__PACK_MAX_THREADS];
  pthread_t tid[AA__PACK_MAX_THREADS];
  int started[AA__PACK_MAX_THREADS];
  size_t total = 0, per;
  unsigned t = threads, w;

  for (size_t i = 0; i < count; i++)
    total += n[i];
  if (t < 1)
    t = 1;
  if (t > AA__PACK_MAX_THREADS)
    t = AA__PACK_MAX_THREADS;
  /* Ranges of whole pages, about equal; fewer threads when there are fewer
   * pages than threads. */
  per = (total / t + PACK_SPLIT_ALIGN - 1) / PACK_SPLIT_ALIGN * PACK_SPLIT_ALIGN;
  if (per == 0)
    per = PACK_SPLIT_ALIGN;
  for (w = 0; w < t; w++) {
    size_t lo = per * w;
    r[w].dst = dst;
    r[w].src = src;
    r[w].n = n;
    r[w].off = off;
    r[w].count = count;
    r[w].lo = lo < total ? lo : total;
    r[w].hi = (w == t - 1 || lo + per >= total) ? total : lo + per;
    started[w] = 0;
  }
  for (w = 1; w < t; w++) {
    if (r[w].lo < r[w].hi)
      started[w] = pthread_create(&tid[w], NULL, copy_thread, &r[w]) == 0;
  }
  copy_range(&r[0]);
  for (w = 1; w < t; w++) {
    if (started[w])
      pthread_join(tid[w], NULL);
    else if (r[w].lo < r[w].hi)
      copy_range(&r[w]); /* no thread: its share is copied here */
  }
}
