/*
 * large_check.c — the large path's full invariant walk (AA_DEBUG 3), run
 * after every locked alloc and free: see large.c's opening comment for
 * what it checks. Under pool->large->mu.
 */
#include "large_internal.h"

/* ------------------------------------------------------------ invariants */

#if AA_DEBUG >= 3
/* Full walk of the large path's structures (AA_DEBUG 3). Under large->mu. */
void aa__lg_check(aa_pool *pool) {
  size_t free_in_segs = 0, live = 0, free_bytes = 0, in_bins = 0, hashed = 0;
  for (aa__seg *s = pool->large->segs; s; s = s->next) {
    aa__assert(s->next == NULL || s->next->prev == s);
    aa__assert(s->owner == NULL && s->first != NULL && s->first->base == s->h.base);
    uintptr_t end = s->h.base;
    for (aa__chunk *c = s->first; c; c = c->next) {
      aa__assert(c->seg == s && c->base == end && c->size > 0);
      aa__assert(c->next == NULL || c->next->prev == c);
      aa__assert(c->nxev > 0 || c->xev == NULL);                    /* an array only while events wait */
      aa__assert(!c->room || (s->pages != NULL && !s->small_reqs)); /* rooms: expandable, larger requests' region */
      end = c->base + c->size;
      uint64_t phase = atomic_load_explicit(&c->state, AA__RLX) & 3;
      if (c->free) {
        aa__assert(phase == AA__CH_FREE);
        if (!c->parked) {
          free_in_segs++;
          aa__assert(c->bin == aa__lg_bin_of(c->size));
        }
      } else if (c->lent != NULL) {
        aa__assert(c->lent->st != NULL && phase == AA__CH_FREE); /* lent: neither */
      } else {
        live++;
      }
    }
    aa__assert(end == s->h.end);
  }
  size_t nst = 0, ndorm = 0, nret = 0, stb = 0;
  for (aa__seg *s = pool->large->stitches; s; s = s->next) {
    aa__assert(s->next == NULL || s->next->prev == s);
    aa__chunk *c = s->first;
    aa__assert(s->st != NULL && c->seg == s && c->base == s->h.base && c->next == NULL &&
               c->base + c->size == s->h.end && !c->parked);
    for (size_t i = 0; i < s->st->nparts; i++) {
      const aa__stitch_part *pt = &s->st->parts[i];
      aa__assert(pt->pg->nalias > 0 && pt->pg->owner != NULL);
      aa__assert(s->st->retired ? s->st->dormant : pt->pg->nheld > 0);
      /* active: each part inside its lent chunk; dormant: none lent */
      aa__assert(s->st->dormant ? pt->from == NULL
                                : pt->from != NULL && pt->from->lent == s &&
                                      pt->from->base <= pt->pg->h.base &&
                                      pt->pg->h.end <= pt->from->base + pt->from->size);
    }
    if (s->st->dormant) {
      aa__assert(c->free);
      ndorm++;
      nret += s->st->retired;
    } else {
      live += !c->free;
      stb += c->size;
    }
    nst++;
  }
  aa__assert(nst == pool->large->nstitch && ndorm == pool->large->ndormant &&
             nret == pool->large->nretired &&
             stb == pool->large->stitch_bytes);
  for (unsigned b = 0; b < AA__LARGE_BINS; b++) {
    bool bit = (pool->large->bin_mask[b / 64] >> (b % 64)) & 1;
    aa__assert(bit == (pool->large->bins[b] != NULL));
    for (aa__chunk *c = pool->large->bins[b]; c; c = c->fnext) {
      aa__assert(c->free && !c->parked && c->bin == b);
      aa__assert(c->fprev != NULL ? c->fprev->fnext == c : pool->large->bins[b] == c);
      free_bytes += c->size;
      in_bins++;
    }
  }
  for (unsigned i = 0; i < pool->large->npark; i++)
    aa__assert(pool->large->park[i]->free && pool->large->park[i]->parked);
  for (size_t i = 0; i < pool->large->hash_cap; i++) {
    for (aa__chunk *c = pool->large->hash[i]; c; c = c->hnext) {
      aa__assert(!c->free && aa__lg_hidx(pool, c->base) == i);
      hashed++;
    }
  }
  aa__assert(free_bytes == pool->large->free_bytes);
  aa__assert(in_bins == free_in_segs);
  aa__assert(hashed == pool->large->hash_n && hashed == live);
  aa__lg_plan_check(pool);
}
#endif
