/*
 * replay_suggest.c — the tuner behind `adaptalloc-replay suggest`: from the
 * per-size figures of one replay, a class table that serves that run with
 * less waste.
 *
 * Entry points: aa_replay_suggest_config_init, aa_replay_suggest_classes.
 *
 * Model: each requested size s <= max_small is served by the smallest class
 * >= s; a class c holding n blocks at once needs ceil(n / floor(slab/c))
 * slabs. n is estimated as the sum of the sizes' peak live counts (an upper
 * bound: peaks of different sizes need not coincide). Greedy: repeatedly add
 * the exact class (s rounded up to 512) with the largest saving in
 * (estimated reserved bytes + in-use bytes), accepting it only when it does
 * not raise the reserved estimate and saves at least min_gain_slabs slabs'
 * worth; when the table is full, a ladder class that serves nothing makes
 * room.
 */
#include <stdlib.h>
#include <string.h>

#include "replay_internal.h"
#include "replay_parts.h"

void aa_replay_suggest_config_init(aa_replay_suggest_config *cfg) {
  cfg->max_classes = AA_MAX_CLASSES;
  cfg->slab_size = AA_DEFAULT_SLAB_SIZE;
  cfg->max_small = AA_DEFAULT_MAX_SMALL;
  cfg->min_gain_slabs = 0.5;
}

typedef struct tclass {
  uint64_t size;
  uint32_t cache_limit, prefill;
  uint64_t n; /* blocks (sum of peak live counts) served */
  bool added;
} tclass;

static uint64_t slabs_for(uint64_t n, uint64_t bsize, uint64_t slab) {
  uint64_t per;

  if (n == 0)
    return 0;
  if (bsize >= slab)
    return n * ((bsize + slab - 1) / slab); /* one or more slabs a block */
  per = slab / bsize;
  return (n + per - 1) / per;
}

/* Index of the smallest class >= s (n classes ascending), n if none. */
static size_t class_for(const tclass *t, size_t n, uint64_t s) {
  size_t lo = 0, hi = n;

  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (t[mid].size >= s)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* Index of the first size > x. */
static size_t upper(const aa_replay_size_stat *sz, size_t n, uint64_t x) {
  size_t lo = 0, hi = n;

  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (sz[mid].size > x)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

/* Recounts every class's n from the sizes. */
static void recount(tclass *t, size_t nt, const aa_replay_size_stat *sz,
                    size_t ns) {
  size_t i;

  for (i = 0; i < nt; i++)
    t[i].n = 0;
  for (i = 0; i < ns; i++) {
    size_t k = class_for(t, nt, sz[i].size);
    if (k < nt)
      t[k].n += sz[i].max_live;
  }
}

int aa_replay_suggest_classes(const aa_replay_size_stat *sizes, size_t nsizes,
                              const aa_class_spec *base, size_t nbase,
                              const aa_replay_suggest_config *cfg,
                              aa_class_spec *out, size_t cap, size_t *nout) {
  tclass *t = NULL;
  uint64_t *pre = NULL; /* pre[i] = sum of max_live of sizes[0..i) */
  size_t nt = 0, i, maxc;
  uint64_t slab, gain_min;
  int rc = AA_OK;

  if (nout != NULL)
    *nout = 0;
  if ((sizes == NULL && nsizes > 0) || base == NULL || nbase == 0 ||
      cfg == NULL || nout == NULL || cfg->slab_size == 0 ||
      base[nbase - 1].block_size != cfg->max_small)
    return AA_EINVAL;
  for (i = 1; i < nbase; i++) {
    if (base[i].block_size <= base[i - 1].block_size)
      return AA_EINVAL;
  }
  for (i = 1; i < nsizes; i++) {
    if (sizes[i].size <= sizes[i - 1].size)
      return AA_EINVAL;
  }
  maxc = cfg->max_classes < AA_MAX_CLASSES ? cfg->max_classes : AA_MAX_CLASSES;
  if (maxc < nbase)
    maxc = nbase; /* never shrink what the base already had */
  slab = cfg->slab_size;
  gain_min = (uint64_t)(cfg->min_gain_slabs * (double)slab);
  t = calloc(AA_MAX_CLASSES + 1, sizeof *t);
  pre = malloc((nsizes + 1) * sizeof *pre);
  if (t == NULL || pre == NULL) {
    rc = AA_ENOMEM;
    goto out;
  }
  pre[0] = 0;
  for (i = 0; i < nsizes; i++)
    pre[i + 1] = pre[i] + sizes[i].max_live;
  for (i = 0; i < nbase && i < AA_MAX_CLASSES; i++) {
    t[i].size = base[i].block_size;
    t[i].cache_limit = base[i].cache_limit;
    t[i].prefill = base[i].prefill;
  }
  nt = i;
  recount(t, nt, sizes, nsizes);

  for (;;) {
    uint64_t best_c = 0;
    int64_t best_score = 0;
    size_t j;

    for (j = 0; j < nsizes; j++) {
      uint64_t s = sizes[j].size, c, m = 0, nc_old, res_old, res_new;
      size_t k;
      int64_t dres, duse, score;

      if (s > cfg->max_small || s == 0)
        continue;
      c = (s + AA_BLOCK_ALIGN - 1) / AA_BLOCK_ALIGN * AA_BLOCK_ALIGN;
      k = class_for(t, nt, c);
      if (k >= nt || t[k].size == c)
        continue;
      /* Sizes in (previous class, c] move from class k to c. */
      m = pre[upper(sizes, nsizes, c)] -
          (k == 0 ? 0 : pre[upper(sizes, nsizes, t[k - 1].size)]);
      if (m == 0)
        continue;
      nc_old = t[k].n;
      res_old = slabs_for(nc_old, t[k].size, slab) * slab;
      res_new = (slabs_for(nc_old - m, t[k].size, slab) +
                 slabs_for(m, c, slab)) *
                slab;
      dres = (int64_t)res_old - (int64_t)res_new;
      duse = (int64_t)((t[k].size - c) * m);
      if (dres < 0)
        continue;
      score = dres + duse;
      if ((uint64_t)score < gain_min)
        continue;
      if (score > best_score) {
        best_score = score;
        best_c = c;
      }
    }
    if (best_c == 0)
      break;
    if (nt >= maxc) {
      /* Make room: drop the smallest ladder class that serves nothing. */
      size_t d;
      for (d = 0; d + 1 < nt; d++) {
        if (t[d].n == 0 && !t[d].added)
          break;
      }
      if (d + 1 >= nt)
        break; /* nothing to drop: the table is full */
      memmove(&t[d], &t[d + 1], (nt - d - 1) * sizeof *t);
      nt--;
    }
    {
      size_t k = class_for(t, nt, best_c);
      memmove(&t[k + 1], &t[k], (nt - k) * sizeof *t);
      memset(&t[k], 0, sizeof *t);
      t[k].size = best_c;
      t[k].added = true;
      nt++;
    }
    recount(t, nt, sizes, nsizes);
  }

  *nout = nt;
  if (out == NULL || cap < nt) {
    rc = cap < nt ? AA_ERANGE : AA_EINVAL;
    goto out;
  }
  for (i = 0; i < nt; i++) {
    out[i].block_size = (size_t)t[i].size;
    out[i].cache_limit = t[i].cache_limit;
    out[i].prefill = t[i].prefill;
  }
out:
  free(pre);
  free(t);
  return rc;
}
