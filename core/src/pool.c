/*
 * pool.c — pool life cycle and the class table (the config, its defaults
 * and the class ladder are config.c's).
 *
 * Entry points: aa_pool_new, aa_pool_destroy; the class
 * table API (aa_pool_classes, aa_pool_class_add/retire/set,
 * aa_pool_set_classes); aa_pool_release / aa_pool_trim; the setters.
 * Also the out-of-memory retry (aa__oom_retry: release what the pool caches,
 * then the caller tries once more), the one for the small and the large path.
 *
 * Class-table changes are serialised by pool->class_mu. The size->slot table
 * is rewritten entry by entry with atomic stores *before* a retiring slot is
 * marked, so that a thread that sees a slot retiring and looks again finds a
 * live class. Every change to a slot bumps its gen (thread-cache bins resync)
 * and the pool epoch (thread caches look at stale bins on next touch).
 */
#include <sched.h>
#include <string.h>

#include "core_internal.h"

/* ------------------------------------------------------------ class slots */

static uint64_t magic_of(size_t bs) {
  uint64_t d = bs >> 9;
  return (((uint64_t)1 << 42) + d - 1) / d;
}

/* Makes slot c hold a class. Under class_mu; takes c->mu. */
static void slot_activate(aa_pool *pool, aa__class *c, const aa_class_spec *spec) {
  if (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_EMPTY)
    aa__slot_rebase(pool, (int)(c - pool->classes)); /* counts start at 0 */
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
    aa__class *c = &pool->classes[i];
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
  for (size_t u = 0; u < pool->ntable; u++) {
    size_t size = (u + 1) * AA_BLOCK_ALIGN;
    while (j < n - 1 && bs[j] < size)
      j++;
    uint8_t v = (uint8_t)order[j];
    if (atomic_load_explicit(&pool->size2cls[u], AA__RLX) != v)
      atomic_store_explicit(&pool->size2cls[u], v, memory_order_release);
  }
}

void aa__fill_table(aa_pool *pool) { fill_table(pool, NULL); }

static void bump(aa_pool *pool) {
  atomic_fetch_add_explicit(&pool->table_version, 1, memory_order_release);
  atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_release);
}

static aa__class *find_state(aa_pool *pool, size_t bs, uint32_t state) {
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->classes[i];
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
    aa__class *c = &pool->classes[i];
    if (poll && atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_RETIRING)
      aa__class_release(pool, c, SIZE_MAX, false);
    if (atomic_load_explicit(&c->state, AA__RLX) == AA__CLS_EMPTY)
      n++;
  }
  return n;
}

static aa__class *empty_slot(aa_pool *pool) {
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    if (atomic_load_explicit(&pool->classes[i].state, AA__RLX) == AA__CLS_EMPTY)
      return &pool->classes[i];
  }
  return NULL;
}

/* Empty slots not held by a prepared table. Under class_mu. */
static int avail_slots(aa_pool *pool, bool poll) {
  int n = free_slots(pool, poll) - pool->slots_reserved;
  aa__assert(pool->slots_reserved >= 0);
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
  pthread_mutex_lock(&pool->class_mu);
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    aa__class *c = &pool->classes[i];
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
    *version = atomic_load_explicit(&pool->table_version, AA__RLX);
  pthread_mutex_unlock(&pool->class_mu);
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
  pthread_mutex_lock(&pool->class_mu);
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
  pthread_mutex_unlock(&pool->class_mu);
  if (rc == AA_OK && spec->prefill > 0)
    (void)aa__class_prefill(pool, c);
  return rc;
}

int aa_pool_class_retire(aa_pool *pool, size_t block_size) {
  if (pool == NULL)
    return AA_EINVAL;
  int rc = AA_OK;
  bool skip[AA_MAX_CLASSES] = {false};
  pthread_mutex_lock(&pool->class_mu);
  aa__class *c = find_state(pool, block_size, AA__CLS_ACTIVE);
  if (c == NULL) {
    rc = AA_ENOENT;
    goto out;
  }
  if (block_size == pool->cfg.max_small) {
    rc = AA_EBUSY;
    goto out;
  }
  skip[c - pool->classes] = true;
  fill_table(pool, skip);
  slot_retire(pool, c);
  bump(pool);
out:
  pthread_mutex_unlock(&pool->class_mu);
  return rc;
}

int aa_pool_class_set(aa_pool *pool, const aa_class_spec *spec) {
  if (pool == NULL || check_spec(pool, spec) != AA_OK)
    return AA_EINVAL;
  int rc = AA_OK;
  pthread_mutex_lock(&pool->class_mu);
  aa__class *c = find_state(pool, spec->block_size, AA__CLS_ACTIVE);
  if (c == NULL) {
    rc = AA_ENOENT;
    goto out;
  }
  slot_activate(pool, c, spec);
  bump(pool);
out:
  pthread_mutex_unlock(&pool->class_mu);
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
  int reserved; /* empty slots held in pool->slots_reserved */
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
  pthread_mutex_lock(&pool->class_mu);
  /* the new sizes need empty slots; a retiring size is reactivated in place */
  for (size_t i = 0; i < n; i++) {
    if (!find_state(pool, t->v[i].block_size, AA__CLS_ACTIVE) &&
        !find_state(pool, t->v[i].block_size, AA__CLS_RETIRING))
      need++;
  }
  if (need > avail_slots(pool, false) && need > avail_slots(pool, true)) {
    pthread_mutex_unlock(&pool->class_mu);
    rc = AA_ELIMIT;
    goto fail;
  }
  pool->slots_reserved += need;
  t->reserved = need;
  pthread_mutex_unlock(&pool->class_mu);
  *out = t;
  return AA_OK;
fail:
  free(t);
  return rc;
}

void aa_pool_classes_abort(aa_class_txn *t) {
  if (t == NULL)
    return;
  pthread_mutex_lock(&t->pool->class_mu);
  t->pool->slots_reserved -= t->reserved;
  aa__assert(t->pool->slots_reserved >= 0);
  pthread_mutex_unlock(&t->pool->class_mu);
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
  pthread_mutex_lock(&pool->class_mu);
  pool->slots_reserved -= t->reserved;
  aa__assert(pool->slots_reserved >= 0);
  /* set / reactivate / add, then retire the rest */
  for (size_t i = 0; i < t->n; i++) {
    aa__class *c = find_state(pool, t->v[i].block_size, AA__CLS_ACTIVE);
    if (c == NULL)
      c = find_state(pool, t->v[i].block_size, AA__CLS_RETIRING);
    if (c == NULL)
      c = empty_slot(pool);
    aa__assert(c != NULL);
    slot_activate(pool, c, &t->v[i]);
    keep[c - pool->classes] = true;
    target[i] = c;
  }
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    if (!keep[i] && atomic_load_explicit(&pool->classes[i].state, AA__RLX) == AA__CLS_ACTIVE)
      skip[i] = true;
  }
  fill_table(pool, skip);
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    if (skip[i])
      slot_retire(pool, &pool->classes[i]);
  }
  bump(pool);
  pthread_mutex_unlock(&pool->class_mu);
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

int aa_pool_new(const aa_pool_config *cfg, aa_pool **out) {
  int rc = AA_EINVAL;
  aa_pool *pool = NULL;
  aa_pool_config c;
  size_t sizes[AA_MAX_CLASSES];
  size_t nsizes = 0;
  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  if (cfg == NULL || cfg->version != AA_POOL_CONFIG_VERSION || cfg->backend == NULL ||
      cfg->backend->ops == NULL || cfg->backend->ops->alloc == NULL ||
      cfg->backend->ops->free == NULL)
    return AA_EINVAL;
  rc = aa__config_normalise(cfg, &c);
  if (rc != AA_OK)
    return rc;
  rc = aa__config_ladder(&c, sizes, &nsizes);
  if (rc != AA_OK)
    return rc;
  size_t ntable = c.max_small / AA_BLOCK_ALIGN;
  pool = calloc(1, sizeof *pool + ntable * sizeof pool->size2cls[0]);
  if (pool == NULL)
    return AA_ENOMEM;
  pool->ntable = ntable;
  /* slab headers: a power of two that holds the header and one word per
   * block of the smallest class, so a metadata word finds its header */
  pool->hdr_align = 64;
  while (pool->hdr_align < sizeof(aa__slab) + (c.slab_size / AA_BLOCK_ALIGN) * sizeof(uint32_t))
    pool->hdr_align *= 2;
  snprintf(pool->name, sizeof pool->name, "%s", c.name ? c.name : "pool");
  c.name = pool->name;
  snprintf(pool->region, sizeof pool->region, "%s", c.region ? c.region : "");
  c.region = pool->region;
  pool->cfg = c;
  pool->backend = c.backend;
  pool->has_events = c.backend->ops->event_record != NULL && c.backend->ops->event_query != NULL;
  pthread_mutex_init(&pool->class_mu, NULL);
  pthread_mutex_init(&pool->map_mu, NULL);
  pthread_mutex_init(&pool->tc_mu, NULL);
  pthread_mutex_init(&pool->rs_mu, NULL);
  pthread_mutex_init(&pool->oom_mu, NULL);
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  /* short critical sections: spin a little before sleeping */
  pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
  for (int i = 0; i < AA_MAX_CLASSES; i++)
    pthread_mutex_init(&pool->classes[i].mu, &ma);
  pthread_mutexattr_destroy(&ma);
  atomic_store(&pool->limit, c.limit_bytes);
  atomic_store(&pool->telemetry, c.telemetry);
  atomic_store(&pool->tflags, c.telemetry ? AA__TF_TELEMETRY : 0);
  atomic_store(&pool->epoch, 1);
  atomic_store(&pool->table_version, 1);
  rc = AA_ENOMEM;
  if (aa__pm_init(&pool->map) != AA_OK)
    goto fail;
  /* the large path: an expandable mode without usable virtual memory falls
   * back to AA_LARGE_CACHE in pool->cfg */
  if (aa__large_new(pool) != AA_OK)
    goto fail;
  pool->rs = calloc(AA__RS_BUCKETS, sizeof *pool->rs);
  pool->dead_hh_n = AA__HH_SLOTS * 4;
  pool->dead_hh = calloc(pool->dead_hh_n, sizeof *pool->dead_hh);
  if (pool->rs == NULL || pool->dead_hh == NULL)
    goto fail;
  for (size_t i = 0; i < nsizes; i++) {
    aa_class_spec s = {sizes[i], 0, 0};
    slot_activate(pool, &pool->classes[i], &s);
  }
  fill_table(pool, NULL);
  aa__slot_acquire(pool);
  *out = pool;
  return AA_OK;
fail:
  aa_pool_destroy(pool);
  return rc;
}

void aa_pool_destroy(aa_pool *pool) {
  if (pool == NULL)
    return;
  aa__pool_drop_tcaches(pool);
  aa__large_destroy(pool);
  for (int i = 0; i < AA_MAX_CLASSES; i++)
    aa__class_destroy(pool, &pool->classes[i]);
  aa__rs_destroy(pool);
  aa__pm_fini(&pool->map);
  aa__trace_cb *t = pool->trace_all;
  while (t) {
    aa__trace_cb *o = t->older;
    free(t);
    t = o;
  }
  aa__tsample_free(pool);
  free(pool->dead_hh);
  pthread_mutex_destroy(&pool->class_mu);
  pthread_mutex_destroy(&pool->map_mu);
  pthread_mutex_destroy(&pool->tc_mu);
  pthread_mutex_destroy(&pool->rs_mu);
  pthread_mutex_destroy(&pool->oom_mu);
  free(pool);
}

/* ------------------------------------------------------------ release */

bool aa__oom_retry(aa_pool *pool, bool *retried) {
  if (*retried)
    return false;
  *retried = true;
  atomic_fetch_add_explicit(&pool->oom_retries, 1, AA__RLX);
  aa__release_cached(pool, true);
  return true;
}

size_t aa__release_cached(aa_pool *pool, bool sync) {
  size_t r = 0;
  aa_backend *b = pool->backend;
  /* other threads give back the large blocks they hold at their next call */
  atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_release);
  if (sync && b->ops->synchronize)
    b->ops->synchronize(b);
  aa__tcache_flush_mine(pool);
  for (int i = 0; i < AA_MAX_CLASSES; i++) {
    if (atomic_load_explicit(&pool->classes[i].state, AA__RLX) != AA__CLS_EMPTY)
      r += aa__class_release(pool, &pool->classes[i], SIZE_MAX, false);
  }
  r += aa__large_release(pool, SIZE_MAX, !sync); /* aa_pool_release: not an OOM retry */
  return r;
}

size_t aa_pool_release(aa_pool *pool) {
  if (pool == NULL)
    return 0;
  return aa__release_cached(pool, false);
}

void aa_pool_window_reset(aa_pool *pool) {
  if (pool == NULL)
    return;
  atomic_store(&pool->win_peak_out_bytes, atomic_load(&pool->out_bytes));
}

size_t aa_pool_trim(aa_pool *pool, size_t keep_bytes) {
  if (pool == NULL)
    return 0;
  size_t r = 0;
  atomic_fetch_add_explicit(&pool->epoch, 1, memory_order_release);
  aa__tcache_flush_mine(pool); /* what this thread holds counts as in use until then */
  uint64_t in_use = aa__pool_in_use(pool);
  uint64_t reserved = atomic_load(&pool->bytes_reserved);
  if (reserved <= in_use + keep_bytes)
    return 0;
  size_t excess = (size_t)(reserved - in_use - keep_bytes);
  r += aa__large_release(pool, excess, false);
  for (int i = 0; i < AA_MAX_CLASSES && r < excess; i++) {
    if (atomic_load_explicit(&pool->classes[i].state, AA__RLX) != AA__CLS_EMPTY)
      r += aa__class_release(pool, &pool->classes[i], excess - r, true);
  }
  return r;
}

/* ------------------------------------------------------------ setters */

/* Recomputes the hot-path flags. Under class_mu. */
static void update_tflags(aa_pool *pool) {
  uint32_t f = atomic_load(&pool->telemetry) ? AA__TF_TELEMETRY : 0;
  if (atomic_load(&pool->trace) != NULL)
    f |= AA__TF_TRACE;
  atomic_store_explicit(&pool->tflags, f, memory_order_release);
}

void aa_pool_set_telemetry(aa_pool *pool, bool on) {
  if (pool == NULL)
    return;
  pthread_mutex_lock(&pool->class_mu);
  atomic_store_explicit(&pool->telemetry, on, AA__RLX);
  update_tflags(pool);
  pthread_mutex_unlock(&pool->class_mu);
}

void aa_pool_set_trace(aa_pool *pool, aa_trace_fn fn, void *user) {
  if (pool == NULL)
    return;
  /* Records are never freed before the pool (a racing allocator may hold
   * one); an identical (fn, user) pair reuses its record, so the chain stays
   * as long as the number of distinct callbacks ever set. */
  pthread_mutex_lock(&pool->class_mu);
  aa__trace_cb *t = NULL;
  if (fn != NULL) {
    for (t = pool->trace_all; t; t = t->older) {
      if (t->fn == fn && t->user == user)
        break;
    }
    if (t == NULL) {
      t = calloc(1, sizeof *t);
      if (t) {
        t->fn = fn;
        t->user = user;
        t->older = pool->trace_all;
        pool->trace_all = t;
      }
    }
  }
  aa__trace_cb *old = atomic_exchange_explicit(&pool->trace, t, memory_order_seq_cst);
  update_tflags(pool);
  pthread_mutex_unlock(&pool->class_mu);
  /* Callbacks already under way through the old record finish before the
   * caller may free what the old record's user points to. */
  if (old != NULL && old != t) {
    while (atomic_load_explicit(&old->inflight, memory_order_seq_cst) != 0)
      sched_yield();
  }
}

/* Sampling's table and rule change only while no callback is set (none
 * under way: set_trace waited for them); one change at a time. */
static pthread_mutex_t g_sample_mu = PTHREAD_MUTEX_INITIALIZER;

int aa_pool_set_trace_sampled(aa_pool *pool, aa_trace_fn fn, void *user, uint32_t every,
                              uint64_t min_bytes) {
  if (pool == NULL)
    return AA_EINVAL;
  pthread_mutex_lock(&g_sample_mu);
  aa_pool_set_trace(pool, NULL, NULL);
  int rc = aa__tsample_configure(pool, every, min_bytes);
  /* on failure the rule in force stays, and so does tracing off */
  if (rc == AA_OK && fn != NULL)
    aa_pool_set_trace(pool, fn, user);
  pthread_mutex_unlock(&g_sample_mu);
  return rc;
}

void aa_pool_set_limit(aa_pool *pool, size_t limit_bytes) {
  if (pool)
    atomic_store(&pool->limit, limit_bytes);
}

void aa_pool_set_map_runs(aa_pool *pool, bool on) {
  if (pool != NULL)
    aa__large_set_map_runs(pool, on);
}

/* Stream-ordered reuse asked for (`on`); used only where possible: the
 * backend records events and offers stream_wait. */
void aa_pool_set_stream_wait(aa_pool *pool, bool on) {
  if (pool != NULL)
    aa__large_set_stream_wait(pool, on);
}

const char *aa_pool_name(const aa_pool *pool) { return pool ? pool->name : ""; }

const char *aa_pool_region(const aa_pool *pool) { return pool ? pool->region : ""; }

aa_backend *aa_pool_backend(const aa_pool *pool) { return pool ? pool->backend : NULL; }
