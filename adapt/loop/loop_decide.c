/*
 * loop_decide.c — the policy loop's decision function (aa_adapt_decide) and
 * its hysteresis memory (aa_adapt_state).
 *
 * Pure and deterministic: the same params, state, snapshots and class table
 * always give the same decisions and the same new state. Nothing here calls
 * the core or allocates. One step: reconcile the state with the class table,
 * expire cooldowns, compute per-class and per-size deltas between the two
 * snapshots, then the rules in order — retire, add, grow, trim (see
 * adapt.h and docs/adapt.md).
 *
 * One concern, kept whole though it runs past 600 lines: the four rules and
 * the memory they share (tracked classes, cooldowns, flap counts) are read
 * side by side.
 */
#include <stdio.h>
#include <string.h>

#include "adaptalloc/adapt.h"

#define MIB_D (1024.0 * 1024.0)

const char *aa_adapt_kind_name(aa_adapt_kind kind) {
  switch (kind) {
  case AA_ADAPT_ADD_CLASS:
    return "add_class";
  case AA_ADAPT_GROW_OR_PREFILL:
    return "grow_or_prefill";
  case AA_ADAPT_RETIRE_CLASS:
    return "retire_class";
  case AA_ADAPT_TRIM:
    return "trim";
  default:
    return "unknown";
  }
}

void aa_adapt_state_init(aa_adapt_state *st) {
  if (st != NULL)
    memset(st, 0, sizeof *st);
}

static uint64_t delta(uint64_t cur, uint64_t prev) {
  /* A counter that went backwards was reset: count from zero. */
  return cur >= prev ? cur - prev : cur;
}

static uint64_t round_up_align(uint64_t v) {
  return (v + AA_BLOCK_ALIGN - 1) / AA_BLOCK_ALIGN * AA_BLOCK_ALIGN;
}

/* The stats of the active class of that size (a retiring twin that is still
 * draining only when there is no active one). */
static const aa_class_stats *class_stats(const aa_pool_stats *s, uint64_t size) {
  const aa_class_stats *draining = NULL;
  uint32_t n;
  if (s == NULL)
    return NULL;
  n = s->class_count < AA_MAX_CLASSES ? s->class_count : AA_MAX_CLASSES;
  for (uint32_t i = 0; i < n; i++) {
    if (s->classes[i].block_size != size)
      continue;
    if (!s->classes[i].retiring)
      return &s->classes[i];
    draining = &s->classes[i];
  }
  return draining;
}

static int track_find(const aa_adapt_state *st, uint64_t size) {
  for (uint32_t i = 0; i < st->n_classes; i++) {
    if (st->classes[i].block_size == size)
      return (int)i;
  }
  return -1;
}

/* Inserts (keeping the array ascending) and returns the entry, or NULL when
 * full. An existing entry is returned as is. */
static aa_adapt_class_state *track_insert(aa_adapt_state *st, uint64_t size) {
  uint32_t pos = 0;
  int at = track_find(st, size);
  if (at >= 0)
    return &st->classes[at];
  if (st->n_classes >= AA_MAX_CLASSES)
    return NULL;
  while (pos < st->n_classes && st->classes[pos].block_size < size)
    pos++;
  memmove(&st->classes[pos + 1], &st->classes[pos],
          (st->n_classes - pos) * sizeof st->classes[0]);
  memset(&st->classes[pos], 0, sizeof st->classes[0]);
  st->classes[pos].block_size = size;
  st->n_classes++;
  return &st->classes[pos];
}

static void track_remove(aa_adapt_state *st, uint64_t size) {
  int at = track_find(st, size);
  if (at < 0)
    return;
  memmove(&st->classes[at], &st->classes[at + 1],
          (st->n_classes - (uint32_t)at - 1) * sizeof st->classes[0]);
  st->n_classes--;
}

/* Makes the tracked classes exactly the table's (ascending), keeping the
 * memory of those that stay. */
static void track_sync(aa_adapt_state *st, const aa_class_spec *classes,
                       size_t n) {
  aa_adapt_class_state next[AA_MAX_CLASSES];
  uint32_t m = 0;
  for (size_t i = 0; i < n && m < AA_MAX_CLASSES; i++) {
    int at = track_find(st, classes[i].block_size);
    if (at >= 0) {
      next[m] = st->classes[at];
    } else {
      memset(&next[m], 0, sizeof next[m]);
      next[m].block_size = classes[i].block_size;
    }
    m++;
  }
  memcpy(st->classes, next, m * sizeof next[0]);
  st->n_classes = m;
}

static bool cooling(const aa_adapt_state *st, uint64_t size) {
  for (uint32_t i = 0; i < st->n_cooldown; i++) {
    if (st->cooldown[i].block_size == size)
      return true;
  }
  return false;
}

/* ------------------------------------------------------------ flap memory */

#define AA__FLAP_MAX_SHIFT 6 /* cold limit grows to 64x cold_intervals at most */

static uint32_t flap_retires(const aa_adapt_state *st, uint64_t size) {
  for (uint32_t i = 0; i < st->n_flaps; i++)
    if (st->flaps[i].block_size == size)
      return st->flaps[i].retires;
  return 0;
}

static void flap_note_retire(aa_adapt_state *st, uint64_t size) {
  uint32_t i;
  for (i = 0; i < st->n_flaps; i++) {
    if (st->flaps[i].block_size == size) {
      st->flaps[i].retires++;
      return;
    }
  }
  if (st->n_flaps >= AA_MAX_CLASSES) {
    /* forget the oldest entry */
    memmove(&st->flaps[0], &st->flaps[1], (st->n_flaps - 1) * sizeof st->flaps[0]);
    st->n_flaps--;
  }
  st->flaps[st->n_flaps].block_size = size;
  st->flaps[st->n_flaps].retires = 1;
  st->n_flaps++;
}

/* The cold limit of a class the loop adds now: cold_intervals, doubled for
 * every earlier retirement of the same size. */
static uint16_t flap_cold_limit(const aa_adapt_params *p, const aa_adapt_state *st,
                                uint64_t size) {
  uint32_t r = flap_retires(st, size);
  uint64_t lim = p->cold_intervals;
  lim <<= r < AA__FLAP_MAX_SHIFT ? r : AA__FLAP_MAX_SHIFT;
  return (uint16_t)(lim > 65535 ? 65535 : lim);
}

static void cooldown_remove(aa_adapt_state *st, uint64_t size) {
  for (uint32_t i = 0; i < st->n_cooldown; i++) {
    if (st->cooldown[i].block_size == size) {
      memmove(&st->cooldown[i], &st->cooldown[i + 1],
              (st->n_cooldown - i - 1) * sizeof st->cooldown[0]);
      st->n_cooldown--;
      return;
    }
  }
}

static void cooldown_add(aa_adapt_state *st, uint64_t size, uint64_t now) {
  cooldown_remove(st, size);
  if (st->n_cooldown >= AA_MAX_CLASSES) {
    /* Full: the oldest entry (the first) goes. */
    memmove(&st->cooldown[0], &st->cooldown[1],
            (st->n_cooldown - 1) * sizeof st->cooldown[0]);
    st->n_cooldown--;
  }
  st->cooldown[st->n_cooldown].block_size = size;
  st->cooldown[st->n_cooldown].since = now;
  st->n_cooldown++;
}

static void cooldown_expire(aa_adapt_state *st, uint64_t now, uint32_t span) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < st->n_cooldown; i++) {
    if (now - st->cooldown[i].since < span)
      st->cooldown[m++] = st->cooldown[i];
  }
  st->n_cooldown = m;
}

static aa_adapt_decision *emit(aa_adapt_decision *out, size_t *nd,
                               aa_adapt_kind kind, uint64_t now) {
  aa_adapt_decision *d = &out[(*nd)++];
  memset(d, 0, sizeof *d);
  d->kind = kind;
  d->result = AA_OK;
  d->interval = now;
  return d;
}

/* The effective table during a step: sizes, ascending. */
typedef struct eff_table {
  uint64_t size[AA_MAX_CLASSES * 2];
  size_t n;
} eff_table;

static void eff_insert(eff_table *t, uint64_t s) {
  size_t pos = 0;
  if (t->n >= sizeof t->size / sizeof t->size[0])
    return;
  while (pos < t->n && t->size[pos] < s)
    pos++;
  if (pos < t->n && t->size[pos] == s)
    return;
  memmove(&t->size[pos + 1], &t->size[pos], (t->n - pos) * sizeof t->size[0]);
  t->size[pos] = s;
  t->n++;
}

static void eff_remove(eff_table *t, uint64_t s) {
  for (size_t i = 0; i < t->n; i++) {
    if (t->size[i] == s) {
      memmove(&t->size[i], &t->size[i + 1], (t->n - i - 1) * sizeof t->size[0]);
      t->n--;
      return;
    }
  }
}

static uint64_t eff_serving(const eff_table *t, uint64_t s) {
  for (size_t i = 0; i < t->n; i++) {
    if (t->size[i] >= s)
      return t->size[i];
  }
  return 0;
}

typedef struct hot_size {
  uint64_t size;
  uint64_t count; /* requests in the interval */
} hot_size;

static size_t retire_rule(const aa_adapt_params *p, aa_adapt_state *st,
                          const aa_pool_stats *prev, const aa_pool_stats *cur,
                          uint64_t max_small, eff_table *eff,
                          aa_adapt_decision *out, size_t *nd, size_t cap) {
  uint64_t now = st->interval;
  size_t retired = 0;
  uint32_t i = 0;
  while (i < st->n_classes) {
    aa_adapt_class_state *cs = &st->classes[i];
    const aa_class_stats *c = class_stats(cur, cs->block_size);
    const aa_class_stats *pc = class_stats(prev, cs->block_size);
    uint64_t allocs = c == NULL ? 0 : delta(c->allocs, pc == NULL ? 0 : pc->allocs);
    if (allocs == 0)
      cs->cold++;
    else
      cs->cold = 0;
    uint32_t limit = cs->cold_limit ? cs->cold_limit : p->cold_intervals;
    if (cs->added && cs->cold >= limit &&
        now - cs->added_at >= p->min_class_age && cs->block_size != max_small &&
        *nd < cap) {
      aa_adapt_decision *d = emit(out, nd, AA_ADAPT_RETIRE_CLASS, now);
      d->block_size = cs->block_size;
      d->amount = cs->cold;
      snprintf(d->reason, sizeof d->reason,
               "class %llu B (added %llu intervals ago) had no allocations for "
               "%u intervals (cold limit %u); retire it, no re-add for %u "
               "intervals",
               (unsigned long long)cs->block_size,
               (unsigned long long)(now - cs->added_at), cs->cold,
               limit, p->readd_cooldown);
      cooldown_add(st, cs->block_size, now);
      flap_note_retire(st, cs->block_size);
      eff_remove(eff, cs->block_size);
      track_remove(st, cs->block_size);
      retired++;
      continue; /* the array shifted down */
    }
    i++;
  }
  return retired;
}

static int cmp_hot(const hot_size *a, const hot_size *b) {
  if (a->count != b->count)
    return a->count > b->count ? -1 : 1;
  if (a->size != b->size)
    return a->size < b->size ? -1 : 1;
  return 0;
}

static void add_rule(const aa_adapt_params *p, aa_adapt_state *st,
                     const aa_pool_stats *prev, const aa_pool_stats *cur,
                     uint64_t max_small, uint64_t total_small, uint64_t window_ns,
                     eff_table *eff,
                     aa_adapt_decision *out, size_t *nd, size_t cap) {
  hot_size hot[AA_HH_MAX];
  size_t nh = 0;
  uint32_t adds = 0;
  uint64_t now = st->interval;
  uint32_t hn = cur->hh_count < AA_HH_MAX ? cur->hh_count : AA_HH_MAX;

  if (total_small == 0)
    return;
  for (uint32_t j = 0; j < hn; j++) {
    uint64_t before = 0;
    if (prev != NULL) {
      uint32_t pn = prev->hh_count < AA_HH_MAX ? prev->hh_count : AA_HH_MAX;
      bool found = false;
      for (uint32_t k = 0; k < pn; k++) {
        if (prev->hh[k].size == cur->hh[j].size) {
          before = prev->hh[k].count;
          found = true;
          break;
        }
      }
      /* Not in a full list: its count then is unknown (not 0; the list
       * keeps only the top AA_HH_MAX), so its count since start would pass
       * for this interval's. Wait one interval. */
      if (!found && prev->hh_count >= AA_HH_MAX)
        continue;
    }
    hot[nh].size = cur->hh[j].size;
    /* The core's heavy-hitter counts can go down (its table decays the
     * smaller of two contending sizes): a count below the previous one
     * gives nothing for this interval rather than a guess. */
    hot[nh].count = cur->hh[j].count >= before ? cur->hh[j].count - before : 0;
    /* a size cannot have more requests than all small sizes together */
    if (hot[nh].count > total_small)
      hot[nh].count = total_small;
    nh++;
  }
  /* Insertion sort: most requests first, then the smaller size. */
  for (size_t a = 1; a < nh; a++) {
    hot_size x = hot[a];
    size_t b = a;
    while (b > 0 && cmp_hot(&x, &hot[b - 1]) < 0) {
      hot[b] = hot[b - 1];
      b--;
    }
    hot[b] = x;
  }
  for (size_t h = 0; h < nh; h++) {
    uint64_t s = hot[h].size, cnt = hot[h].count, serving, exact;
    double share, waste, new_waste;
    aa_adapt_decision *d;
    aa_adapt_class_state *cs;
    if (adds >= p->max_adds_per_interval || *nd >= cap)
      break;
    if (s == 0 || s > max_small || cnt < p->min_requests)
      continue;
    share = (double)cnt / (double)total_small;
    if (share < p->hot_fraction)
      continue;
    serving = eff_serving(eff, s);
    if (serving == 0)
      continue;
    waste = 1.0 - (double)s / (double)serving;
    if (waste <= p->waste_threshold)
      continue;
    exact = round_up_align(s);
    if (exact >= serving)
      continue;
    if (cooling(st, exact)) {
      st->suppressed_by_cooldown++;
      continue;
    }
    if (eff->n >= p->max_classes || eff->n >= AA_MAX_CLASSES) {
      st->suppressed_by_bound++;
      continue;
    }
    new_waste = 1.0 - (double)s / (double)exact;
    d = emit(out, nd, AA_ADAPT_ADD_CLASS, now);
    d->block_size = exact;
    d->request_size = s;
    d->amount = cnt;
    {
      d->window_requests = total_small;
      d->window_ns = window_ns;
      char span[48] = "this interval";
      if (window_ns > 0)
        snprintf(span, sizeof span, "in the last %.2f s", (double)window_ns / 1e9);
      int len = snprintf(d->reason, sizeof d->reason,
                         "hot size %llu B: %llu of %llu small requests %s "
                         "(%.1f%%) go to class %llu B, wasting %.1f%% (threshold %.1f%%); "
                         "exact class %llu B wastes %.1f%%",
                         (unsigned long long)s, (unsigned long long)cnt,
                         (unsigned long long)total_small, span, share * 100.0,
                         (unsigned long long)serving, waste * 100.0,
                         p->waste_threshold * 100.0, (unsigned long long)exact,
                         new_waste * 100.0);
      uint32_t r = flap_retires(st, exact);
      if (r > 0 && len > 0 && (size_t)len < sizeof d->reason)
        snprintf(d->reason + len, sizeof d->reason - (size_t)len,
                 "; retired %u time%s before, so it is kept through %u cold "
                 "intervals",
                 r, r == 1 ? "" : "s", (unsigned)flap_cold_limit(p, st, exact));
    }
    eff_insert(eff, exact);
    cs = track_insert(st, exact);
    if (cs != NULL) {
      cs->added = 1;
      cs->added_at = now;
      cs->cold = 0;
      /* 0 follows params.cold_intervals as it changes; only a size that
       * flapped before gets a limit of its own. */
      cs->cold_limit = flap_retires(st, exact) ? flap_cold_limit(p, st, exact) : 0;
    }
    adds++;
  }
}

static void grow_rule(const aa_adapt_params *p, aa_adapt_state *st,
                      const aa_pool_stats *prev, const aa_pool_stats *cur,
                      const aa_class_spec *classes, size_t n,
                      const eff_table *eff, aa_adapt_decision *out, size_t *nd,
                      size_t cap) {
  uint64_t now = st->interval;
  uint64_t prefill_bytes = 0;
  for (size_t i = 0; i < n; i++)
    prefill_bytes += (uint64_t)classes[i].prefill * classes[i].block_size;
  for (size_t i = 0; i < n && *nd < cap; i++) {
    uint64_t size = classes[i].block_size;
    const aa_class_stats *c = class_stats(cur, size);
    const aa_class_stats *pc = class_stats(prev, size);
    uint64_t allocs, misses, per_slab, want, cap_blocks;
    double rate;
    bool present = false;
    int at;
    aa_adapt_decision *d;
    for (size_t k = 0; k < eff->n; k++)
      present = present || eff->size[k] == size;
    if (c == NULL || c->retiring || !present || size == 0)
      continue;
    allocs = delta(c->allocs, pc == NULL ? 0 : pc->allocs);
    misses = delta(c->misses, pc == NULL ? 0 : pc->misses);
    if (allocs < p->min_requests)
      continue;
    rate = (double)misses / (double)allocs;
    if (rate <= p->miss_rate_threshold)
      continue;
    at = track_find(st, size);
    if (at >= 0 && st->classes[at].grown &&
        now - st->classes[at].last_grow_at < p->grow_cooldown)
      continue;
    per_slab = (c->slabs > 0 && c->bytes_reserved / c->slabs >= size)
                   ? c->bytes_reserved / c->slabs / size
                   : 1;
    want = (uint64_t)classes[i].prefill * 2;
    if (want < per_slab)
      want = per_slab;
    cap_blocks = p->prefill_max_bytes / size;
    if (cur->limit_bytes > 0) {
      /* All classes' prefill together stays within the pool's limit. */
      uint64_t others = prefill_bytes - (uint64_t)classes[i].prefill * size;
      uint64_t room = cur->limit_bytes > others ? cur->limit_bytes - others : 0;
      if (room / size < cap_blocks)
        cap_blocks = room / size;
    }
    if (cap_blocks > AA_ADAPT_PREFILL_MAX)
      cap_blocks = AA_ADAPT_PREFILL_MAX;
    if (want > cap_blocks)
      want = cap_blocks;
    if (want <= classes[i].prefill)
      continue;
    d = emit(out, nd, AA_ADAPT_GROW_OR_PREFILL, now);
    d->block_size = size;
    d->amount = want;
    snprintf(d->reason, sizeof d->reason,
             "class %llu B: %llu misses in %llu allocations this interval "
             "(%.1f%% > %.1f%%); prefill %u -> %llu blocks",
             (unsigned long long)size, (unsigned long long)misses,
             (unsigned long long)allocs, rate * 100.0,
             p->miss_rate_threshold * 100.0, classes[i].prefill,
             (unsigned long long)want);
    if (at >= 0) {
      st->classes[at].grown = 1;
      st->classes[at].last_grow_at = now;
    }
  }
}

static void trim_rule(const aa_adapt_params *p, aa_adapt_state *st,
                      const aa_pool_stats *cur, aa_adapt_decision *out,
                      size_t *nd, size_t cap) {
  uint64_t now = st->interval;
  uint64_t reserved = cur->bytes_reserved, in_use = cur->bytes_in_use;
  /* What the last intervals needed at their peak stays: trimming below it
   * only makes the next iteration of a training loop take the memory back. */
  uint64_t working = cur->window_peak_bytes_in_use > in_use ? cur->window_peak_bytes_in_use : in_use;
  st->peaks[st->peak_at] = working;
  st->peak_at = (st->peak_at + 1) % AA_ADAPT_PEAK_INTERVALS;
  if (st->n_peaks < AA_ADAPT_PEAK_INTERVALS)
    st->n_peaks++;
  for (uint32_t i = 0; i < st->n_peaks; i++) {
    if (st->peaks[i] > working)
      working = st->peaks[i];
  }
  uint64_t cached = reserved > working ? reserved - working : 0;
  uint64_t limit = cur->limit_bytes;
  uint64_t thr = p->trim_threshold_bytes;
  /* The last threshold trim undone: the pool mapped again at least half
   * of what it gave back, for a peak no larger than then. What it trimmed
   * were holes its peaks need, not a cache: trimming them again maps them
   * again at the next peak (the replay's moe and phases traces with the
   * loop stepping every 2,000 events: 9 and 15 trims, 4 and 3 with this
   * rule, the same peak reserved; on the H100 moe's trim of 176 MiB was
   * mapped back by 11 calls within the same training step). */
  if (st->trim_from > 0 && (working > st->trim_working + thr / 4 ||
                            now - st->last_trim_at > AA_ADAPT_PEAK_INTERVALS))
    st->trim_from = 0; /* a larger peak, or long after: not the trim's bytes */
  if (st->trim_from > 0 && st->trim_low < st->trim_from &&
      reserved >= st->trim_low + (st->trim_from - st->trim_low) / 2) {
    if (cached > st->kept_gap)
      st->kept_gap = cached;
    st->trim_from = 0;
  }
  /* a gap learned for a larger working set is no reason to hold more
   * than that working set again. (Not forgotten when the peaks fall: a
   * workload whose phases come back less often than the peaks' window,
   * the replay's phases trace, trimmed and mapped again 10 times where it
   * did 3 times with the gap kept.) */
  uint64_t gap = st->kept_gap < working ? st->kept_gap : working;
  bool near_limit = limit > 0 && cached > 0 &&
                    (double)reserved >= 0.9 * (double)limit;
  bool over = thr > 0 && cached > thr && cached > gap + thr / 4;
  aa_adapt_decision *d;

  if (!(near_limit || over) || *nd >= cap)
    return;
  if (st->trimmed && now - st->last_trim_at < p->trim_cooldown)
    return;
  d = emit(out, nd, AA_ADAPT_TRIM, now);
  if (near_limit) {
    d->amount = 0;
    snprintf(d->reason, sizeof d->reason,
             "reserved %.1f MiB is within 10%% of limit_bytes %.1f MiB; "
             "cached %.1f MiB, trim to 0",
             (double)reserved / MIB_D, (double)limit / MIB_D,
             (double)cached / MIB_D);
    st->trim_from = 0;
  } else {
    uint64_t keep = gap > thr / 2 ? gap : thr / 2;
    d->amount = (working - in_use) + keep;
    if (gap > thr / 2)
      snprintf(d->reason, sizeof d->reason,
               "cached %.1f MiB (reserved %.1f MiB - recent peak in use %.1f MiB) "
               "is above trim_threshold_bytes %.1f MiB and the %.1f MiB its peaks "
               "needed after an earlier trim; trim to %.1f MiB above the peak",
               (double)cached / MIB_D, (double)reserved / MIB_D, (double)working / MIB_D,
               (double)thr / MIB_D, (double)gap / MIB_D, (double)keep / MIB_D);
    else
      snprintf(d->reason, sizeof d->reason,
               "cached %.1f MiB (reserved %.1f MiB - recent peak in use %.1f MiB) "
               "is above trim_threshold_bytes %.1f MiB; trim to %.1f MiB above the peak",
               (double)cached / MIB_D, (double)reserved / MIB_D, (double)working / MIB_D,
               (double)thr / MIB_D, (double)keep / MIB_D);
    st->trim_from = reserved;
    st->trim_working = working;
    st->trim_low = reserved; /* until aa_adapt_state_note_trim says what went */
  }
  st->trimmed = 1;
  st->last_trim_at = now;
}

size_t aa_adapt_decide(const aa_adapt_params *params, aa_adapt_state *st,
                       const aa_pool_stats *prev, const aa_pool_stats *cur,
                       const aa_class_spec *classes, size_t n_classes,
                       aa_adapt_decision *out, size_t cap) {
  eff_table eff;
  size_t nd = 0;
  uint64_t max_small, total_small = 0;

  if (params == NULL || st == NULL || cur == NULL || classes == NULL ||
      n_classes == 0 || out == NULL || cap == 0 || !params->enabled)
    return 0;
  if (n_classes > AA_MAX_CLASSES)
    n_classes = AA_MAX_CLASSES;
  st->interval++;
  track_sync(st, classes, n_classes);
  cooldown_expire(st, st->interval, params->readd_cooldown);
  max_small = classes[n_classes - 1].block_size;
  eff.n = 0;
  for (size_t i = 0; i < n_classes; i++)
    eff_insert(&eff, classes[i].block_size);
  for (size_t i = 0; i < n_classes; i++) {
    const aa_class_stats *c = class_stats(cur, classes[i].block_size);
    const aa_class_stats *pc = class_stats(prev, classes[i].block_size);
    if (c != NULL)
      total_small += delta(c->allocs, pc == NULL ? 0 : pc->allocs);
  }
  /* The heavy hitters' counts come from the same per-thread telemetry as
   * the histogram, the class counters from the bins: a class's counter
   * restarts when a table change flushes the thread caches, which made the
   * class total smaller than one size's count ("20508 of 17900"). The
   * histogram's small buckets over the same two snapshots are the
   * denominator the counts share; the larger of the two is taken (a fake or
   * a telemetry-off pool has no histogram). */
  uint64_t hist_small = 0;
  for (unsigned b = 0; b < AA_HIST_BUCKETS && aa_hist_bucket_lower(b) <= max_small; b++)
    hist_small += delta(cur->hist[b], prev == NULL ? 0 : prev->hist[b]);
  if (hist_small > total_small)
    total_small = hist_small;
  uint64_t window_ns = prev != NULL && cur->time_ns > prev->time_ns
                           ? cur->time_ns - prev->time_ns
                           : 0;

  retire_rule(params, st, prev, cur, max_small, &eff, out, &nd, cap);
  add_rule(params, st, prev, cur, max_small, total_small, window_ns, &eff, out, &nd, cap);
  grow_rule(params, st, prev, cur, classes, n_classes, &eff, out, &nd, cap);
  trim_rule(params, st, cur, out, &nd, cap);
  return nd;
}

void aa_adapt_state_note_trim(aa_adapt_state *st, const aa_adapt_decision *d) {
  if (st == NULL || d == NULL || d->kind != AA_ADAPT_TRIM || st->trim_from == 0)
    return;
  if (d->result != AA_OK || d->released == 0)
    st->trim_from = 0; /* nothing went: nothing can come back */
  else
    st->trim_low = st->trim_from > d->released ? st->trim_from - d->released : 0;
}

void aa_adapt_state_note_failure(aa_adapt_state *st, const aa_adapt_decision *d) {
  aa_adapt_class_state *cs;
  if (st == NULL || d == NULL)
    return;
  switch (d->kind) {
  case AA_ADAPT_ADD_CLASS:
    track_remove(st, d->block_size);
    cooldown_add(st, d->block_size, d->interval);
    break;
  case AA_ADAPT_RETIRE_CLASS:
    cooldown_remove(st, d->block_size);
    cs = track_insert(st, d->block_size);
    if (cs != NULL) {
      cs->added = 1;
      cs->added_at = d->interval;
      cs->cold = 0;
    }
    break;
  default:
    break;
  }
}
