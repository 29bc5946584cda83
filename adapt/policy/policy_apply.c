/*
 * policy_apply.c — from a policy to live pools: which section configures a
 * pool (aa_policy_pool_section), and changing live pools all at once or not
 * at all (aa_policy_change_prepare / _commit / _abort; aa_policy_apply is
 * the one-pool form used when a pool is made).
 *
 * What a pool gets is the policy's section combined with the pool's
 * overrides by one rule (aa_policy_limit_rule). A change is prepared for
 * every pool first: the settings a pool keeps from
 * its creation, its largest class (max_small), the prefill against what the
 * machine can give, and the class table itself, whose slots core holds
 * (aa_pool_classes_prepare). Only when every pool has accepted is anything
 * written, and the commit cannot fail, so a refused policy leaves every pool
 * as it was.
 *
 * Kept apart from policy.c: the model reads only core's ladder and
 * defaults; this file is the one that changes a live pool.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "adaptalloc/internal/debug.h" /* util/: tiered assertions */
#include "policy_model.h"

#define SECTION_MAX 48 /* "regions." + a region name + NUL */

/* ------------------------------------------------------------- sections */

const char *aa_policy_kind_name(aa_backend_kind kind) {
  switch (kind) {
  case AA_BACKEND_DEVICE:
    return "device";
  case AA_BACKEND_PINNED:
    return "pinned";
  default:
    return "host";
  }
}

const char *aa_policy_pool_kind(const aa_pool *pool) {
  const aa_backend *b = pool ? aa_pool_backend(pool) : NULL;
  return aa_policy_kind_name(b ? b->kind : AA_BACKEND_HOST);
}

const char *aa_policy_section_for(const aa_policy *p, const char *kind,
                                  const char *region, char *buf, size_t cap) {
  if (region != NULL && region[0] != '\0' && aa_policy_has_region(p, region))
    snprintf(buf, cap, "regions.%s", region);
  else
    snprintf(buf, cap, "%s", kind);
  return buf;
}

const char *aa_policy_pool_section(const aa_policy *p, const aa_pool *pool,
                                   char *buf, size_t cap) {
  return aa_policy_section_for(p, aa_policy_pool_kind(pool), aa_pool_region(pool),
                               buf, cap);
}

/* ------------------------------------------------------------- checks */

/* The settings a pool takes at creation and keeps: a policy that changes
 * one of them for a live pool is refused whole (applying only the class
 * table and the limit would report a change that did not happen). Returns
 * the first that differs, with both values, or NULL. The thread-cache
 * bounds are not among them: they are read when a pool is made, and a
 * region's pool that loses its section takes its backend's, whose bounds
 * differ (docs/policy.md). */
/* large_stitch_share with its default (0) as the value it stands for, in
 * millionths */
static size_t stitch_share_ppm(const aa_pool_config *c) {
  double s = c->large_stitch_share > 0 ? c->large_stitch_share : AA_DEFAULT_STITCH_SHARE;
  return (size_t)(s * 1e6 + 0.5);
}

/* large_map_run_pages with its default (0) as the value it stands for */
static size_t run_pages(const aa_pool_config *c) {
  return c->large_map_run_pages > 0 ? (size_t)c->large_map_run_pages : AA_LARGE_MAP_RUN_MAX;
}

static const char *fixed_changed(const aa_pool_config *cur, const aa_pool_config *want,
                                 size_t *was, size_t *asked) {
  const struct {
    const char *name;
    size_t cur, want;
  } f[] = {
      {"slab_size", cur->slab_size, want->slab_size},
      {"max_small", cur->max_small, want->max_small},
      {"large.mode", (size_t)cur->large_mode, (size_t)want->large_mode},
      {"large.cache_bytes", cur->large_cache_bytes, want->large_cache_bytes},
      {"large.page_bytes", cur->large_page_bytes, want->large_page_bytes},
      {"large.stitch", (size_t)(cur->large_stitch > 0), (size_t)(want->large_stitch > 0)},
      {"large.stitch_grow", (size_t)(cur->large_stitch > 1), (size_t)(want->large_stitch > 1)},
      {"large.stitch_share (millionths)", stitch_share_ppm(cur), stitch_share_ppm(want)},
      {"large.plan", (size_t)(cur->large_plan > 0), (size_t)(want->large_plan > 0)},
      {"large.map_run_pages", run_pages(cur), run_pages(want)},
      {"large.map_run_min_bytes", cur->large_map_run_min_bytes, want->large_map_run_min_bytes},
  };
  for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
    if (f[k].cur != f[k].want) {
      *was = f[k].cur;
      *asked = f[k].want;
      return f[k].name;
    }
  }
  return NULL;
}

/* The backend is fixed too: a pool made over managed memory stays so, one
 * made over device memory stays so, and a managed pool keeps the advice and
 * cap it was made with (its backend took a copy). Like check_fixed, this
 * compares the section in force with the one asked (cur NULL skips it: a
 * pool being made took its backend from the same policy). Refuses
 * (AA_ECONFLICT, err names it) a change of them. */
static int check_backend(const aa_policy *cur, const aa_policy *next, aa_pool *pool,
                         const char *sec, char *err, size_t errcap) {
  aa_managed_config cm, wm;
  char cur_sec[SECTION_MAX];
  bool was = false, want = false;

  if (cur == NULL)
    return AA_OK;
  aa_policy_pool_section(cur, pool, cur_sec, sizeof(cur_sec));
  if (aa_policy_pool_backend(cur, cur_sec, &was, &cm) != AA_OK)
    return AA_OK; /* nothing known in force to compare against */
  if (aa_policy_pool_backend(next, sec, &want, &wm) != AA_OK)
    return AA_OK; /* the class table's prepare reports a missing section */
  if (was != want) {
    snprintf(err, errcap,
             "pools.%s.backend: fixed while pool %s is live (\"%s\" in force, "
             "\"%s\" asked); restart to change it",
             sec, aa_pool_name(pool), was ? "managed" : "default",
             want ? "managed" : "default");
    return AA_ECONFLICT;
  }
  if (was && (cm.preferred_location != wm.preferred_location ||
              cm.accessed_by != wm.accessed_by || cm.read_mostly != wm.read_mostly ||
              cm.allow_oversubscribe != wm.allow_oversubscribe)) {
    snprintf(err, errcap,
             "pools.%s: advise and allow_oversubscribe are fixed while pool %s is "
             "live; restart to change them",
             sec, aa_pool_name(pool));
    return AA_ECONFLICT;
  }
  return AA_OK;
}

/* Refuses (AA_ECONFLICT, err names them) settings of `sec` under next that
 * would change what pool keeps from its creation under cur. */
static int check_fixed(const aa_policy *cur, const aa_policy *next, aa_pool *pool,
                       const char *sec, char *err, size_t errcap) {
  aa_pool_config c, w;
  char cur_sec[SECTION_MAX];
  size_t was = 0, asked = 0;
  const char *fixed;
  int rc;

  if (cur == NULL)
    return AA_OK;
  aa_pool_config_init(&c);
  aa_pool_config_init(&w);
  aa_policy_pool_section(cur, pool, cur_sec, sizeof(cur_sec));
  rc = aa_policy_pool_config(cur, cur_sec, &c, NULL, 0, NULL);
  if (rc != AA_OK && rc != AA_ERANGE)
    return AA_OK; /* nothing known in force to compare against */
  rc = aa_policy_pool_config(next, sec, &w, NULL, 0, NULL);
  if (rc != AA_OK && rc != AA_ERANGE)
    return AA_OK; /* the class table's prepare reports it */
  fixed = fixed_changed(&c, &w, &was, &asked);
  if (fixed == NULL)
    return AA_OK;
  if (strcmp(fixed, "large.mode") == 0) /* the policy file's names */
    snprintf(err, errcap,
             "pools.%s: %s is fixed while pool %s is live (\"%s\" in force, "
             "\"%s\" asked); restart to change it",
             sec, fixed, aa_pool_name(pool), aa_large_mode_name((aa_large_mode)was),
             aa_large_mode_name((aa_large_mode)asked));
  else
    snprintf(err, errcap,
             "pools.%s: %s is fixed while pool %s is live (%zu in force, %zu "
             "asked); restart to change it",
             sec, fixed, aa_pool_name(pool), was, asked);
  return AA_ECONFLICT;
}

/* Bytes the machine can still give pool `st` (device: the GPU's free
 * memory; host and pinned: the available physical memory), plus what the
 * pool already holds (a prefill may reuse it). 0 when unknown. */
static uint64_t machine_room(const aa_pool_stats *st, const char **what) {
  size_t f = 0, t = 0;
  if (strcmp(st->backend, "host") != 0 && strcmp(st->backend, "pinned") != 0 &&
      st->device >= 0) {
    *what = "the device's free memory";
    if (aa_cuda_mem_info(st->device, &f, &t) != AA_OK)
      return 0;
    return (uint64_t)f + st->bytes_reserved;
  }
  *what = "the available physical memory";
  long pages = sysconf(_SC_AVPHYS_PAGES);
  long psz = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || psz <= 0)
    return 0;
  return (uint64_t)pages * (uint64_t)psz + st->bytes_reserved;
}

/* Refuses (AA_EINVAL, err names the bound) a table whose prefill the
 * machine cannot give pool. A pool whose stats cannot be read is not
 * refused for it. */
static int check_fits(const aa_class_spec *want, size_t nw, aa_pool *pool,
                      const char *sec, char *err, size_t errcap) {
  aa_pool_stats *st = NULL;
  uint64_t prefill = 0, room;
  const char *what = "";
  int rc = AA_OK;

  for (size_t i = 0; i < nw; i++)
    prefill += (uint64_t)want[i].prefill * want[i].block_size;
  if (prefill == 0)
    return AA_OK;
  st = malloc(sizeof *st);
  if (st == NULL || aa_pool_stats_get_opts(pool, st, AA_STATS_NO_SIZES) != AA_OK)
    goto out;
  room = machine_room(st, &what);
  if (room != 0 && prefill > room) {
    snprintf(err, errcap,
             "pools.%s.classes: the prefill asks for %llu bytes, more than "
             "%s (%llu bytes, counting what pool %s holds)",
             sec, (unsigned long long)prefill, what, (unsigned long long)room,
             aa_pool_name(pool));
    rc = AA_EINVAL;
  }
out:
  free(st);
  return rc;
}

/* ------------------------------------------------------------- the rule */

/* The one rule that combines a pool's settings (docs/policy.md, "A pool's
 * settings"): its limit is the smallest of the policy's limit_bytes and
 * every override that is set, 0 (none) when none is. */
size_t aa_policy_limit_rule(uint64_t policy_limit, const aa_pool_overrides *ov) {
  uint64_t v = policy_limit;
  if (ov != NULL && ov->user_limit != 0 && (v == 0 || ov->user_limit < v))
    v = ov->user_limit;
  return v > SIZE_MAX ? SIZE_MAX : (size_t)v;
}

/* ------------------------------------------------------------- changes */

typedef struct pool_change {
  aa_pool *pool;
  aa_class_txn *txn; /* the class table, its slots held */
  size_t limit_bytes;
  bool map_runs;
  bool stream_wait;
} pool_change;

/* Invariants (aa__assert_internal): pools[0 .. n) are prepared, each with
 * its pool and its table's txn, and pools[n .. want) hold nothing; only a
 * whole change (n == want) is committed; abort gives back every txn. */
struct aa_policy_change {
  size_t n;    /* pools prepared so far */
  size_t want; /* pools asked for */
  pool_change pools[];
};

/* Prepares one pool's change to section `sec` of next (cur: the policy in
 * force, NULL at creation). Errors as aa_policy_apply's; err says why. */
static int prepare_pool(const aa_policy *cur, const aa_policy *next, const char *sec,
                        aa_pool *pool, const aa_pool_overrides *ov, bool live,
                        pool_change *out, char *err, size_t errcap) {
  aa_class_spec want[AA_MAX_CLASSES];
  aa_class_spec have[AA_MAX_CLASSES];
  size_t nw = 0, nh = 0;
  const aa__pool_policy *pp = NULL;
  int rc;

  memset(out, 0, sizeof(*out));
  rc = aa__policy_section(next, sec, &pp);
  if (rc != AA_OK) {
    snprintf(err, errcap, "pools.%s: no such section for pool %s", sec, aa_pool_name(pool));
    return rc;
  }
  rc = check_fixed(cur, next, pool, sec, err, errcap);
  if (rc == AA_OK)
    rc = check_backend(cur, next, pool, sec, err, errcap);
  if (rc != AA_OK)
    return rc;
  rc = aa_policy_pool_config(next, sec, NULL, want, AA_MAX_CLASSES, &nw);
  if (rc != AA_OK || nw == 0) {
    snprintf(err, errcap, "pools.%s.classes: no class table for pool %s (%s)", sec,
             aa_pool_name(pool), aa_strerror(rc != AA_OK ? rc : AA_EINVAL));
    return rc != AA_OK ? rc : AA_EINVAL;
  }
  rc = aa_pool_classes(pool, have, AA_MAX_CLASSES, &nh, NULL);
  if (rc != AA_OK)
    return rc;
  /* The largest class of a live pool is its max_small: it cannot change. */
  if (nh > 0 && nh <= AA_MAX_CLASSES && have[nh - 1].block_size != want[nw - 1].block_size) {
    snprintf(err, errcap,
             "pools.%s: max_small is fixed while pool %s is live (%zu in force, "
             "%zu asked); restart to change it",
             sec, aa_pool_name(pool), have[nh - 1].block_size, want[nw - 1].block_size);
    return live ? AA_ECONFLICT : AA_EINVAL;
  }
  if (live) {
    rc = check_fits(want, nw, pool, sec, err, errcap);
    if (rc != AA_OK)
      return rc;
  }
  rc = aa_pool_classes_prepare(pool, want, nw, &out->txn);
  if (rc != AA_OK) {
    snprintf(err, errcap, "pools.%s: the pool %s refused the class table: %s", sec,
             aa_pool_name(pool),
             rc == AA_ELIMIT ? "no free class slot (AA_MAX_CLASSES) for a "
                               "new size while retired classes drain"
                             : aa_strerror(rc));
    return rc;
  }
  out->pool = pool;
  out->limit_bytes = aa_policy_limit_rule(pp->limit_bytes, ov);
  out->map_runs = pp->large_map_runs;
  out->stream_wait = pp->large_stream_wait;
  return AA_OK;
}

static void commit_pool(pool_change *c) {
  aa__assert_internal(c->pool != NULL && c->txn != NULL);
  aa_pool_classes_commit(c->txn);
  aa_pool_set_limit(c->pool, c->limit_bytes);
  aa_pool_set_map_runs(c->pool, c->map_runs);
  aa_pool_set_stream_wait(c->pool, c->stream_wait);
  c->txn = NULL;
}

int aa_policy_change_prepare(const aa_policy *cur, const aa_policy *next,
                             aa_pool *const *pools, size_t n, aa_policy_change **out,
                             char *err, size_t errcap) {
  return aa_policy_change_prepare_ov(cur, next, pools, NULL, n, out, err, errcap);
}

int aa_policy_change_prepare_ov(const aa_policy *cur, const aa_policy *next,
                                aa_pool *const *pools, const aa_pool_overrides *ov,
                                size_t n, aa_policy_change **out, char *err,
                                size_t errcap) {
  aa_policy_change *ch = NULL;
  size_t i;
  int rc = AA_OK;

  if (out == NULL)
    return AA_EINVAL;
  *out = NULL;
  if (next == NULL || (pools == NULL && n > 0))
    return AA_EINVAL;
  ch = calloc(1, sizeof(*ch) + n * sizeof(ch->pools[0]));
  if (ch == NULL)
    return AA_ENOMEM;
  ch->want = n;
  for (i = 0; i < n; i++) {
    char sec[SECTION_MAX];
    aa_policy_pool_section(next, pools[i], sec, sizeof(sec));
    rc = prepare_pool(cur, next, sec, pools[i], ov != NULL ? &ov[i] : NULL, true,
                      &ch->pools[i], err, errcap);
    if (rc == AA_ELIMIT || rc == AA_ENOENT)
      rc = AA_EINVAL; /* a table the pool cannot hold is the request's problem */
    if (rc != AA_OK)
      break;
    aa__assert_internal(ch->pools[i].pool == pools[i] && ch->pools[i].txn != NULL);
    ch->n = i + 1;
  }
  if (rc != AA_OK) {
    aa_policy_change_abort(ch);
    return rc;
  }
  aa__assert_internal(ch->n == n);
  *out = ch;
  return AA_OK;
}

void aa_policy_change_commit(aa_policy_change *ch) {
  if (ch == NULL)
    return;
  /* only a change every pool accepted is committed */
  aa__assert_internal(ch->n == ch->want);
  for (size_t i = 0; i < ch->n; i++)
    commit_pool(&ch->pools[i]);
  free(ch);
}

void aa_policy_change_abort(aa_policy_change *ch) {
  if (ch == NULL)
    return;
  aa__assert_internal(ch->n <= ch->want);
  for (size_t i = 0; i < ch->want; i++) {
    pool_change *c = &ch->pools[i];
    /* every table held is one of the prepared pools', and each goes back */
    aa__assert_internal((i < ch->n) == (c->txn != NULL));
    aa_pool_classes_abort(c->txn);
    c->txn = NULL;
  }
  free(ch);
}

int aa_policy_apply(const aa_policy *p, const char *pool, aa_pool *target) {
  pool_change c;
  char err[256];
  int rc;

  if (p == NULL || target == NULL || pool == NULL)
    return AA_EINVAL;
  rc = prepare_pool(NULL, p, pool, target, NULL, false, &c, err, sizeof(err));
  if (rc != AA_OK)
    return rc;
  commit_pool(&c);
  return AA_OK;
}
