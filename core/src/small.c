/*
 * small.c — the small path's life cycle and its class table: the pool's
 * small path made (aa__small_new: the default ladder, the size->slot table)
 * and destroyed, the class-table API (aa_pool_classes,
 * aa_pool_class_add/retire/set, aa_pool_classes_prepare/commit/abort,
 * aa_pool_set_classes), release (aa__small_release) and the bytes in use.
 *
 * Class-table changes are serialised by the small path's class_mu. The
 * size->slot table is rewritten entry by entry with atomic stores *before* a
 * retiring slot is marked, so that a thread that sees a slot retiring and
 * looks again finds a live class. Every change to a slot bumps its gen
 * (thread-cache bins resync) and the pool epoch (thread caches look at stale
 * bins on next touch).
 */
#include <string.h>

#include "small_internal.h"

/* ------------------------------------------------------------ class slots */

static uint64_t magic_of(size_t bs) {
  uint64_t d = bs >> 9;
  return (((uint64_t)1 << 42) + d - 1) / d;
}

/* Makes slot c hold a class. Under class_mu; takes c->mu. */
static void slot_activate(aa_pool *pool, aa__class *c, const aa_class_spec *spec) {
  if (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_EMPTY)
    aa__slot_rebase(pool, (int)(c - pool->small->classes)); /* counts start at 0 */
  pthread_mutex_lock(&c->mu);
  if (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_EMPTY) {
    atomic_store_explicit(&c->block_size, spec->block_size, AA__RLX);
    c->nblocks = (uint32_t)(pool->cfg.slab_size / spec->block_size);
    c->div_magic = magic_of(spec->block_size);
    c->peak_out = 0;
  }
  atomic_store_explicit(&c->cache_limit, spec->cache_limit, AA__RLX);
  atomic_store_explicit(&c->prefill, spec->prefill, AA__RLX);
  atomic_store_explicit(&c->state, AA__CLS_ACTIVE, memory_order_release);
  atomic_fetch_add_explicit(&c->gen, 1, memory_order_release);
  pthread_mutex_unlock(&c->mu);
}

/* Rewrites the size->slot table from the ACTIVE slots not in `skip`. */
static void fill_table(aa_pool *pool, const bool *skip) {
  int order[AA_MAX_CLASSES];
  size_t bs[AA_MAX_CLASSES];
  int n = 0;
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->small->classes[i];
    if (atomic_load_explicit(&c->state, AA__RLX) != AA__CLS_ACTIVE || (skip && skip[i]))
      continue;
    size_t b = atomic_load_explicit(&c->block_size, AA__RLX);
    int j = n++;
    while (j > 0 && bs[j - 1] > b) {
      bs[j] = bs[j - 1];
      order[j] = order[j - 1];
      j--;
    }
    bs[j] = b;
    order[j] = i;
  }
  aa__assert(n > 0 && bs[n - 1] == pool->cfg.max_small);
  int j = 0;
  for (size_t u = 0; u < pool->small->ntable; u++) {
    size_t size = (u + 1) * AA_BLOCK_ALIGN;
    while (j < n - 1 && bs[j] < size)
      j++;
    uint8_t v = (uint8_t)order[j];
    if (atomic_load_explicit(&pool->small->size2cls[u], AA__RLX) != v)
      atomic_store_explicit(&pool->small->size2cls[u], v, memory_order_release);
  }
}

static void bump(aa_pool *pool) {
  atomic_fetch_add_explicit(&pool->small->table_version, 1, memory_order_release);
  atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_release);
}

static aa__class *find_state(aa_pool *pool, size_t bs, uint32_t state) {
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->small->classes[i];
    if (atomic_load_explicit(&c->state, AA__RLX) == state &&
        atomic_load_explicit(&c->block_size, AA__RLX) == bs)
      return c;
  }
  return NULL;
}

/* Drains what can be drained of retiring classes; returns free slots. */
static int free_slots(aa_pool *pool, bool poll) {
  int n = 0;
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->small->classes[i];
    if (poll && atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_RETIRING)
      aa__class_release(pool, c, SIZE_MAX, false);
    if (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_EMPTY)
      n++;
  }
  return n;
}

static aa__class *empty_slot(aa_pool *pool) {
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    if (atomic_load_explicit(&pool->small->classes[i].state, AA__RLX) == AA__CLS_EMPTY)
      return &pool->small->classes[i];
  }
  return NULL;
}

/* Empty slots not held by a prepared table. Under class_mu. */
static int avail_slots(aa_pool *pool, bool poll) {
  int n = free_slots(pool, poll) - pool->small->slots_reserved;
  aa__assert(pool->small->slots_reserved >= 0);
  return n > 0 ? n : 0;
}

static int check_spec(const aa_pool *pool, const aa_class_spec *s) {
  if (s == NULL || s->block_size == 0 || s->block_size % AA_BLOCK_ALIGN != 0 ||
      s->block_size > pool->cfg.max_small || s->cache_limit > 65536 || s->prefill > (1u << 24))
    return AA_EINVAL;
  return AA_OK;
}

/* Marks a slot retiring (table already rewritten) and drains what it can. */
static void slot_retire(aa_pool *pool, aa__class *c) {
  pthread_mutex_lock(&c->mu);
  atomic_store_explicit(&c->state, AA__CLS_RETIRING, memory_order_release);
  atomic_fetch_add_explicit(&c->gen, 1, memory_order_release);
  aa__retire_check(pool, c);
  pthread_mutex_unlock(&c->mu);
}

int aa_pool_classes(aa_pool *pool, aa_class_spec *out, size_t cap, size_t *n, uint64_t *version) {
  if (n)
    *n = 0;
  if (version)
    *version = 0;
  if (pool == NULL || n == NULL || (out == NULL && cap > 0))
    return AA_EINVAL;
  aa_class_spec v[AA_MAX_CLASSES];
  size_t k = 0;
  pthread_mutex_lock(&pool->small->class_mu);
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->small->classes[i];
    if (atomic_load_explicit(&c->state, AA__RLX) != AA__CLS_ACTIVE)
      continue;
    aa_class_spec s = {atomic_load_explicit(&c->block_size, AA__RLX),
                       atomic_load_explicit(&c->cache_limit, AA__RLX),
                       atomic_load_explicit(&c->prefill, AA__RLX)};
    size_t j = k++;
    while (j > 0 && v[j - 1].block_size > s.block_size) {
      v[j] = v[j - 1];
      j--;
    }
    v[j] = s;
  }
  if (version)
    *version = atomic_load_explicit(&pool->small->table_version, AA__RLX);
  pthread_mutex_unlock(&pool->small->class_mu);
  for (size_t i = 0; i < k && i < cap; i++)
    out[i] = v[i];
  *n = k;
  return AA_OK;
}

int aa_pool_class_add(aa_pool *pool, const aa_class_spec *spec) {
  if (pool == NULL || check_spec(pool, spec) != AA_OK)
    return AA_EINVAL;
  int rc = AA_OK;
  aa__class *c;
  pthread_mutex_lock(&pool->small->class_mu);
  if (find_state(pool, spec->block_size, AA__CLS_ACTIVE)) {
    rc = AA_EEXIST;
    goto out;
  }
  c = find_state(pool, spec->block_size, AA__CLS_RETIRING);
  if (c == NULL) {
    if (avail_slots(pool, false) == 0 && avail_slots(pool, true) == 0) {
      rc = AA_ELIMIT;
      goto out;
    }
    c = empty_slot(pool);
    aa__assert(c != NULL);
  }
  slot_activate(pool, c, spec);
  fill_table(pool, NULL);
  bump(pool);
out:
  pthread_mutex_unlock(&pool->small->class_mu);
  if (rc == AA_OK && spec->prefill > 0)
    (void)aa__class_prefill(pool, c);
  return rc;
}

int aa_pool_class_retire(aa_pool *pool, size_t block_size) {
  if (pool == NULL)
    return AA_EINVAL;
  int rc = AA_OK;
  bool skip[AA_MAX_CLASSES] = {false};
  pthread_mutex_lock(&pool->small->class_mu);
  aa__class *c = find_state(pool, block_size, AA__CLS_ACTIVE);
  if (c == NULL) {
    rc = AA_ENOENT;
    goto out;
  }
  if (block_size == pool->cfg.max_small) {
    rc = AA_EBUSY;
    goto out;
  }
  skip[c - pool->small->classes] = true;
  fill_table(pool, skip);
  slot_retire(pool, c);
  bump(pool);
out:
  pthread_mutex_unlock(&pool->small->class_mu);
  return rc;
}

int aa_pool_class_set(aa_pool *pool, const aa_class_spec *spec) {
  if (pool == NULL || check_spec(pool, spec) != AA_OK)
    return AA_EINVAL;
  int rc = AA_OK;
  pthread_mutex_lock(&pool->small->class_mu);
  aa__class *c = find_state(pool, spec->block_size, AA__CLS_ACTIVE);
  if (c == NULL) {
    rc = AA_ENOENT;
    goto out;
  }
  slot_activate(pool, c, spec);
  bump(pool);
out:
  pthread_mutex_unlock(&pool->small->class_mu);
  if (rc == AA_OK && spec->prefill > 0)
    (void)aa__class_prefill(pool, c);
  return rc;
}

static int cmp_spec(const void *a, const void *b) {
  size_t x = ((const aa_class_spec *)a)->block_size, y = ((const aa_class_spec *)b)->block_size;
  return x < y ? -1 : x > y;
}

/* A class table validated and with its slots held (aa_pool_classes_prepare):
 * committing it cannot fail. */
struct aa_class_txn {
  aa_pool *pool;
  size_t n;
  int reserved; /* empty slots held in pool->small->slots_reserved */
  aa_class_spec v[AA_MAX_CLASSES];
};

int aa_pool_classes_prepare(aa_pool *pool, const aa_class_spec *specs, size_t n,
                            aa_class_txn **out) {
  aa_class_txn *t = NULL;
  int rc = AA_EINVAL;
  int need = 0;

  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  if (pool == NULL || specs == NULL || n == 0 || n > AA_MAX_CLASSES)
    return AA_EINVAL;
  t = malloc(sizeof *t);
  if (t == NULL)
    return AA_ENOMEM;
  t->pool = pool;
  t->n = n;
  t->reserved = 0;
  for (size_t i = 0; i < n; i++) {
    if (check_spec(pool, &specs[i]) != AA_OK)
      goto fail;
    t->v[i] = specs[i];
  }
  qsort(t->v, n, sizeof t->v[0], cmp_spec);
  for (size_t i = 1; i < n; i++) {
    if (t->v[i].block_size == t->v[i - 1].block_size)
      goto fail;
  }
  if (t->v[n - 1].block_size != pool->cfg.max_small)
    goto fail;
  pthread_mutex_lock(&pool->small->class_mu);
  /* the new sizes need empty slots; a retiring size is reactivated in place */
  for (size_t i = 0; i < n; i++) {
    if (!find_state(pool, t->v[i].block_size, AA__CLS_ACTIVE) &&
        !find_state(pool, t->v[i].block_size, AA__CLS_RETIRING))
      need++;
  }
  if (need > avail_slots(pool, false) && need > avail_slots(pool, true)) {
    pthread_mutex_unlock(&pool->small->class_mu);
    rc = AA_ELIMIT;
    goto fail;
  }
  pool->small->slots_reserved += need;
  t->reserved = need;
  pthread_mutex_unlock(&pool->small->class_mu);
  *out = t;
  return AA_OK;
fail:
  free(t);
  return rc;
}

void aa_pool_classes_abort(aa_class_txn *t) {
  if (t == NULL)
    return;
  pthread_mutex_lock(&t->pool->small->class_mu);
  t->pool->small->slots_reserved -= t->reserved;
  aa__assert(t->pool->small->slots_reserved >= 0);
  pthread_mutex_unlock(&t->pool->small->class_mu);
  free(t);
}

/* Why the commit finds a slot for every new size: the slots it held were
 * counted against every other taker (class_add, other prepared tables), and
 * a size whose retiring class drained since the prepare needs one more slot
 * but freed that slot by draining. */
void aa_pool_classes_commit(aa_class_txn *t) {
  aa_pool *pool;
  bool keep[AA_MAX_CLASSES] = {false};
  bool skip[AA_MAX_CLASSES] = {false};
  aa__class *target[AA_MAX_CLASSES];

  if (t == NULL)
    return;
  pool = t->pool;
  pthread_mutex_lock(&pool->small->class_mu);
  pool->small->slots_reserved -= t->reserved;
  aa__assert(pool->small->slots_reserved >= 0);
  /* set / reactivate / add, then retire the rest */
  for (size_t i = 0; i < t->n; i++) {
    aa__class *c = find_state(pool, t->v[i].block_size, AA__CLS_ACTIVE);
    if (c == NULL)
      c = find_state(pool, t->v[i].block_size, AA__CLS_RETIRING);
    if (c == NULL)
      c = empty_slot(pool);
    aa__assert(c != NULL);
    slot_activate(pool, c, &t->v[i]);
    keep[c - pool->small->classes] = true;
    target[i] = c;
  }
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    if (!keep[i] && atomic_load_explicit(&pool->small->classes[i].state, AA__RLX) == AA__CLS_ACTIVE)
      skip[i] = true;
  }
  fill_table(pool, skip);
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    if (skip[i])
      slot_retire(pool, &pool->small->classes[i]);
  }
  bump(pool);
  pthread_mutex_unlock(&pool->small->class_mu);
  for (size_t i = 0; i < t->n; i++) {
    if (t->v[i].prefill > 0)
      (void)aa__class_prefill(pool, target[i]);
  }
  free(t);
}

int aa_pool_set_classes(aa_pool *pool, const aa_class_spec *specs, size_t n) {
  aa_class_txn *t = NULL;
  int rc = aa_pool_classes_prepare(pool, specs, n, &t);
  if (rc == AA_OK)
    aa_pool_classes_commit(t);
  return rc;
}

/* ------------------------------------------------------------ life cycle */

int aa__small_new(aa_pool *pool) {
  size_t sizes[AA_MAX_CLASSES];
  size_t nsizes = 0;
  int rc = aa__config_ladder(&pool->cfg, sizes, &nsizes);
  if (rc != AA_OK)
    return rc;
  size_t ntable = pool->cfg.max_small / AA_BLOCK_ALIGN;
  aa__small *sm = calloc(1, sizeof *sm + ntable * sizeof sm->size2cls[0]);
  if (sm == NULL)
    return AA_ENOMEM;
  sm->ntable = ntable;
  /* slab headers: a power of two that holds the header and one word per
   * block of the smallest class, so a metadata word finds its header */
  sm->hdr_align = 64;
  while (sm->hdr_align <
         sizeof(aa__slab) + (pool->cfg.slab_size / AA_BLOCK_ALIGN) * sizeof(uint32_t))
    sm->hdr_align *= 2;
  pthread_mutex_init(&sm->class_mu, NULL);
  pthread_mutex_init(&sm->rs_mu, NULL);
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  /* short critical sections: spin a little before sleeping */
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
  for (int i = 0; i < AA_MAX_CLASSES; i++)
    pthread_mutex_init(&sm->classes[i].mu, &ma);
  pthread_mutexattr_destroy(&ma);
  atomic_store(&sm->table_version, 1);
  pool->small = sm;
  for (size_t i = 0; i < nsizes; i++) {
    aa_class_spec s = {sizes[i], 0, 0};
    slot_activate(pool, &sm->classes[i], &s);
  }
  fill_table(pool, NULL);
  return AA_OK;
}

void aa__small_destroy(aa_pool *pool) {
  aa__small *sm = pool->small;
  if (sm == NULL)
    return;
  for (int i = 0; i < AA_MAX_CLASSES; i++)
    aa__class_destroy(pool, &sm->classes[i]);
  aa__rs_destroy(pool);
  pthread_mutex_destroy(&sm->class_mu);
  pthread_mutex_destroy(&sm->rs_mu);
  free(sm);
  pool->small = NULL;
}

/* ------------------------------------------------------------ release */

size_t aa__small_release(aa_pool *pool, size_t want, bool keep_prefill) {
  size_t r = 0;
  for (int i = 0; i < AA_MAX_CLASSES && r < want; i++) {
    aa__class *c = &pool->small->classes[i];
    if (atomic_load_explicit(&c->state, AA__RLX) != AA__CLS_EMPTY)
      r += aa__class_release(pool, c, want - r, keep_prefill);
  }
  return r;
}
