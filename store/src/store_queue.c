/*
 * store_queue.c — what producers hand to the writer: the bounded item queue
 * (snapshots, policy changes, begin and end of a run; a mutex held only for
 * list operations, never across SQLite) and the lock-free trace ring
 * (multi-producer, single consumer, one sequence number per slot), with the
 * count of what either drops.
 *
 * Entry points: aa_store_begin_run, aa_store_snapshot,
 * aa_store_policy_change, aa_store_end_run, aa_store_trace_push;
 * aa__store_ring_pop for the writer.
 *
 * Invariants (aa__assert_internal; the walk aa__assert_expensive): under
 * mu, head and tail are both NULL exactly when queued is 0, tail ends the
 * list, queued never passes queue_capacity and is the list's length (no
 * item lost); every item not written is counted dropped by its kind; the
 * ring's reader never passes its writers, who never get more than ring_cap
 * ahead of it.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"

/* ------------------------------------------------------------- items */

void aa__store_item_free(item *it) {
  if (it == NULL) return;
  free(it->reason);
  free(it->policy);
  free(it);
}

void aa__store_count_dropped(aa_store *st, const item *it) {
  /* an item of no known kind would be lost uncounted */
  aa__assert_internal(it->kind >= ITEM_SNAPSHOT && it->kind <= ITEM_FRAMES);
  if (it->kind == ITEM_SNAPSHOT) {
    atomic_fetch_add(&st->snapshots_dropped, 1);
  } else if (it->kind == ITEM_POLICY) {
    atomic_fetch_add(&st->policy_dropped, 1);
  } else if (it->kind == ITEM_OOM) {
    atomic_fetch_add(&st->ooms_dropped, 1);
  } else if (it->kind == ITEM_FRAMES) {
    atomic_fetch_add(&st->frames_dropped, 1);
  }
}

static char *dup_bounded(const char *s, size_t max, bool *too_long) {
  size_t n = strnlen(s, max + 1);
  if (n > max) {
    *too_long = true;
    return NULL;
  }
  char *d = malloc(n + 1);
  if (d != NULL) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

uint32_t aa__store_list_length(const item *head) {
  uint32_t n = 0;
  for (const item *it = head; it != NULL; it = it->next) n++;
  return n;
}

/* The queue length at which the writer is woken early. */
uint32_t aa__store_wake_mark(const aa_store *st) {
  uint32_t half = st->cfg.queue_capacity / 2;
  return half > 0 ? half : 1;
}

/* -------------------------------------------------------- trace ring */

/* Counts a trace event of `run` that will not be stored; its sequence
 * number bounds the part of the run's trace that is complete. */
static void trace_lost(aa_store *st, int64_t run, const aa_trace_event *ev) {
  atomic_fetch_add_explicit(&st->events_dropped, 1, memory_order_relaxed);
  if (run <= 0 || ev->seq == 0) return;
  pthread_mutex_lock(&st->cut_mu);
  if (run > st->cut_run) {
    /* Forward only: a late loss of an older run (a push that read the run
     * before the next one began) must not take the slot from the newer
     * run, whose first loss would be forgotten. */
    st->cut_run = run;
    st->cut_seq = ev->seq;
  } else if (run == st->cut_run && ev->seq < st->cut_seq) {
    st->cut_seq = ev->seq;
  }
  pthread_mutex_unlock(&st->cut_mu);
}

/* The first sequence number run's trace lost, UINT64_MAX when none. */
uint64_t aa__store_trace_cut_of(aa_store *st, int64_t run) {
  pthread_mutex_lock(&st->cut_mu);
  uint64_t cut = st->cut_run == run ? st->cut_seq : UINT64_MAX;
  pthread_mutex_unlock(&st->cut_mu);
  return cut;
}

/* The run that lost trace events last (0 when none) and its first lost
 * sequence number in *seq. */
int64_t aa__store_trace_cut(aa_store *st, uint64_t *seq) {
  pthread_mutex_lock(&st->cut_mu);
  int64_t run = st->cut_run;
  *seq = st->cut_seq;
  pthread_mutex_unlock(&st->cut_mu);
  return run;
}

/* Takes one published event out of the ring; false when the next slot is
 * empty or not yet published. Single consumer: the writer. */
bool aa__store_ring_pop(aa_store *st, ring *r, aa_trace_event *ev,
                        int64_t *run_id) {
  uint64_t pos = atomic_load_explicit(&st->ring_deq, memory_order_relaxed);
  ring_slot *slot = &r->slots[pos & r->mask];
  uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
  if (seq != pos + 1) return false;
  /* a published slot: its writer claimed pos, so the reader is behind */
  aa__assert_internal(pos < atomic_load_explicit(&st->ring_enq, memory_order_relaxed));
  *ev = slot->ev;
  *run_id = slot->run_id;
  atomic_store_explicit(&slot->seq, pos + r->mask + 1, memory_order_release);
  atomic_store_explicit(&st->ring_deq, pos + 1, memory_order_release);
  return true;
}

/* ------------------------------------------------------------ public */

int aa_store_begin_run(aa_store *st, const aa_store_run_info *info,
                       int64_t *run_id) {
  int err = AA_OK;
  begin_req req;
  if (run_id != NULL) *run_id = 0;
  if (st == NULL || info == NULL || run_id == NULL) return AA_EINVAL;
  if ((info->model != NULL && strnlen(info->model, AA__STORE_MAX_TEXT + 1) > AA__STORE_MAX_TEXT) ||
      (info->host != NULL && strnlen(info->host, AA__STORE_MAX_TEXT + 1) > AA__STORE_MAX_TEXT) ||
      (info->config_json != NULL &&
       strnlen(info->config_json, AA__STORE_MAX_JSON + 1) > AA__STORE_MAX_JSON)) {
    return AA_EINVAL;
  }
  if (aa__store_forked_copy(st)) return AA_ECLOSED; /* the mutex may be held by a
                                             thread of the parent */
  memset(&req, 0, sizeof req);
  req.info = info;
  pthread_mutex_lock(&st->mu);
  if (!aa__store_is_enabled(st) || st->stop) {
    err = AA_ECLOSED;
    goto unlock;
  }
  req.next = st->begins;
  st->begins = &req;
  aa__store_wake_writer(st);
  while (!req.done) pthread_cond_wait(&st->done, &st->mu);
  err = req.err;
  if (err == AA_OK) *run_id = req.run_id;
unlock:
  pthread_mutex_unlock(&st->mu);
  return err;
}

/* Appends an item; takes ownership of it in every case. */
static int enqueue(aa_store *st, item *it, bool need_run) {
  int err = AA_OK;
  if (aa__store_forked_copy(st)) {
    err = AA_ECLOSED;
    goto dropped;
  }
  pthread_mutex_lock(&st->mu);
  if (!aa__store_is_enabled(st) || st->stop) {
    err = AA_ECLOSED;
    goto unlock;
  }
  it->run_id = atomic_load(&st->run_id);
  if (need_run && it->run_id <= 0) {
    err = AA_ENOENT;
    goto unlock;
  }
  aa__assert_internal((st->head == NULL) == (st->tail == NULL));
  aa__assert_internal((st->head == NULL) == (st->queued == 0));
  aa__assert_internal(st->tail == NULL || st->tail->next == NULL);
  aa__assert_internal(st->queued <= st->cfg.queue_capacity);
  aa__assert_expensive(aa__store_list_length(st->head) == st->queued);
  if (st->queued >= st->cfg.queue_capacity) {
    err = AA_ELIMIT;
    goto unlock;
  }
  it->next = NULL;
  if (st->tail != NULL) {
    st->tail->next = it;
  } else {
    st->head = it;
  }
  st->tail = it;
  st->queued++;
  aa__assert_internal(st->head != NULL && st->queued <= st->cfg.queue_capacity);
  if (it->kind == ITEM_SNAPSHOT) atomic_fetch_add(&st->snapshots_queued, 1);
  if (st->queued >= aa__store_wake_mark(st)) aa__store_wake_writer(st);
  if (it->kind == ITEM_END_RUN) atomic_store(&st->run_id, 0);
  it = NULL;
unlock:
  pthread_mutex_unlock(&st->mu);
dropped:
  if (it != NULL) {
    aa__store_count_dropped(st, it);
    aa__store_item_free(it);
  }
  return err;
}

int aa_store_end_run(aa_store *st) {
  if (st == NULL) return AA_EINVAL;
  item *it = calloc(1, sizeof *it);
  if (it == NULL) return AA_ENOMEM;
  it->kind = ITEM_END_RUN;
  it->ts_ms = aa__store_wall_ms();
  return enqueue(st, it, true);
}

int aa_store_snapshot(aa_store *st, const aa_pool_stats *stats) {
  if (st == NULL) return AA_EINVAL;
  if (stats == NULL || stats->version != AA_STATS_VERSION ||
      stats->size != sizeof(aa_pool_stats) ||
      stats->class_count > AA_MAX_CLASSES || stats->hh_count > AA_HH_MAX) {
    atomic_fetch_add(&st->snapshots_dropped, 1);
    return AA_EINVAL;
  }
  if (!aa__store_is_enabled(st)) {
    atomic_fetch_add(&st->snapshots_dropped, 1);
    return AA_ECLOSED;
  }
  item *it = malloc(sizeof *it + sizeof(aa_pool_stats));
  if (it == NULL) {
    atomic_fetch_add(&st->snapshots_dropped, 1);
    return AA_ENOMEM;
  }
  memset(it, 0, sizeof *it);
  it->kind = ITEM_SNAPSHOT;
  it->ts_ms = aa__store_wall_ms();
  memcpy(&it->snap[0], stats, sizeof *stats);
  it->snap[0].name[sizeof it->snap[0].name - 1] = '\0';
  it->snap[0].backend[sizeof it->snap[0].backend - 1] = '\0';
  return enqueue(st, it, true);
}

static bool source_ok(const char *s) {
  size_t n = 0;
  if (s == NULL) return false;
  for (; s[n] != '\0'; n++) {
    char ch = s[n];
    if (n >= 31) return false;
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' ||
          ch == '-')) {
      return false;
    }
  }
  return n > 0;
}

int aa_store_policy_change(aa_store *st, const char *source,
                           uint64_t old_version, uint64_t new_version,
                           const char *reason, const char *policy_json) {
  int err = AA_OK;
  bool too_long = false;
  item *it = NULL;
  if (st == NULL) return AA_EINVAL;
  if (!source_ok(source)) {
    err = AA_EINVAL;
    goto fail;
  }
  if (!aa__store_is_enabled(st)) {
    err = AA_ECLOSED;
    goto fail;
  }
  it = calloc(1, sizeof *it);
  if (it == NULL) {
    err = AA_ENOMEM;
    goto fail;
  }
  it->kind = ITEM_POLICY;
  it->ts_ms = aa__store_wall_ms();
  snprintf(it->source, sizeof it->source, "%s", source);
  it->old_version = old_version;
  it->new_version = new_version;
  if (reason != NULL) {
    it->reason = dup_bounded(reason, AA__STORE_MAX_TEXT, &too_long);
    if (it->reason == NULL) {
      err = too_long ? AA_EINVAL : AA_ENOMEM;
      goto fail;
    }
  }
  if (policy_json != NULL) {
    it->policy = dup_bounded(policy_json, AA__STORE_MAX_JSON, &too_long);
    if (it->policy == NULL) {
      err = too_long ? AA_EINVAL : AA_ENOMEM;
      goto fail;
    }
  }
  return enqueue(st, it, false);
fail:
  aa__store_item_free(it);
  atomic_fetch_add(&st->policy_dropped, 1);
  return err;
}

int aa_store_oom(aa_store *st, const aa_oom_info *info) {
  int err = AA_OK;
  item *it = NULL;
  if (st == NULL) return AA_EINVAL;
  if (info == NULL || info->version != AA_OOM_VERSION || info->size != sizeof *info) {
    err = AA_EINVAL;
    goto fail;
  }
  if (!aa__store_is_enabled(st)) {
    err = AA_ECLOSED;
    goto fail;
  }
  it = calloc(1, sizeof *it);
  if (it == NULL) {
    err = AA_ENOMEM;
    goto fail;
  }
  it->kind = ITEM_OOM;
  it->ts_ms = aa__store_wall_ms();
  it->oom = *info;
  it->oom.pool[sizeof it->oom.pool - 1] = '\0';
  return enqueue(st, it, false);
fail:
  aa__store_item_free(it);
  atomic_fetch_add(&st->ooms_dropped, 1);
  return err;
}

void aa_store_ooms_lost(aa_store *st, uint64_t n) {
  if (st != NULL && n > 0)
    atomic_fetch_add(&st->ooms_dropped, n);
}

static ring *ring_get(aa_store *st) {
  ring *r = atomic_load_explicit(&st->ring, memory_order_acquire);
  if (r != NULL) return r;
  ring *fresh = malloc(sizeof *fresh + (size_t)st->ring_cap * sizeof(ring_slot));
  if (fresh == NULL) return NULL;
  fresh->mask = st->ring_cap - 1;
  for (uint64_t i = 0; i < st->ring_cap; i++) {
    atomic_init(&fresh->slots[i].seq, i);
  }
  ring *expected = NULL;
  if (atomic_compare_exchange_strong_explicit(&st->ring, &expected, fresh,
                                              memory_order_acq_rel,
                                              memory_order_acquire)) {
    return fresh;
  }
  free(fresh);
  return expected;
}

void aa_store_trace_push(void *store, const aa_trace_event *ev) {
  aa_store *st = store;
  if (st == NULL || ev == NULL) return;
  int64_t run = atomic_load_explicit(&st->run_id, memory_order_relaxed);
  if (!aa__store_is_enabled(st) || run <= 0) {
    trace_lost(st, run, ev);
    return;
  }
  ring *r = ring_get(st);
  if (r == NULL) {
    trace_lost(st, run, ev);
    return;
  }
  uint64_t pos = atomic_load_explicit(&st->ring_enq, memory_order_relaxed);
  ring_slot *slot;
  for (;;) {
    slot = &r->slots[pos & r->mask];
    uint64_t seq = atomic_load_explicit(&slot->seq, memory_order_acquire);
    int64_t diff = (int64_t)(seq - pos);
    if (diff == 0) {
      if (atomic_compare_exchange_weak_explicit(&st->ring_enq, &pos, pos + 1,
                                                memory_order_relaxed,
                                                memory_order_relaxed)) {
        break;
      }
    } else if (diff < 0) {
      trace_lost(st, run, ev);
      return; /* full */
    } else {
      pos = atomic_load_explicit(&st->ring_enq, memory_order_relaxed);
    }
  }
  /* the slot was free: the reader took what was ring_cap behind it (and
   * may not have moved ring_deq past it yet) */
  aa__assert_internal(pos - atomic_load_explicit(&st->ring_deq, memory_order_relaxed) <=
                      (uint64_t)st->ring_cap);
  slot->ev = *ev;
  slot->run_id = run;
  atomic_store_explicit(&slot->seq, pos + 1, memory_order_release);
  /* Wake the writer early when the ring is half full. */
  uint64_t deq = atomic_load_explicit(&st->ring_deq, memory_order_relaxed);
  if (pos + 1 - deq == (uint64_t)st->ring_cap / 2) aa__store_wake_writer(st);
}

/* ------------------------------------------------------------------ frames */

/* FNV-1a, then a mix: the text's 64-bit name (never 0). */
static uint64_t frames_hash(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h != 0 ? h : 1;
}

int aa_store_frames_id(aa_store *st, const char *frames, size_t len, uint64_t *id) {
  int err = AA_OK;
  item *it = NULL;
  if (id != NULL) *id = 0;
  if (st == NULL || frames == NULL || id == NULL || len == 0 ||
      len > AA_STORE_MAX_FRAMES_BYTES)
    return AA_EINVAL;
  if (aa__store_forked_copy(st) || !aa__store_is_enabled(st)) return AA_ECLOSED;
  int64_t run = atomic_load(&st->run_id);
  if (run <= 0) return AA_ENOENT;
  uint64_t h = frames_hash(frames, len);
  pthread_mutex_lock(&st->frames_mu);
  if (st->frames_hash == NULL) {
    st->frames_hash = calloc(AA__STORE_FRAMES_SLOTS, sizeof *st->frames_hash);
    st->frames_ids = calloc(AA__STORE_FRAMES_SLOTS, sizeof *st->frames_ids);
    if (st->frames_hash == NULL || st->frames_ids == NULL) {
      free(st->frames_hash);
      free(st->frames_ids);
      st->frames_hash = st->frames_ids = NULL;
      err = AA_ENOMEM;
      goto unlock;
    }
  }
  if (st->frames_run != run) { /* a new run: its own ids, from 1 */
    memset(st->frames_hash, 0, AA__STORE_FRAMES_SLOTS * sizeof *st->frames_hash);
    st->frames_run = run;
    st->frames_n = 0;
  }
  size_t i = (size_t)h & (AA__STORE_FRAMES_SLOTS - 1);
  while (st->frames_hash[i] != 0 && st->frames_hash[i] != h)
    i = (i + 1) & (AA__STORE_FRAMES_SLOTS - 1);
  if (st->frames_hash[i] == h) {
    *id = st->frames_ids[i];
    goto unlock;
  }
  if (st->frames_n >= AA_STORE_MAX_FRAMES) {
    err = AA_ELIMIT;
    atomic_fetch_add(&st->frames_dropped, 1);
    goto unlock;
  }
  it = calloc(1, sizeof *it);
  if (it != NULL) it->reason = malloc(len + 1);
  if (it == NULL || it->reason == NULL) {
    aa__store_item_free(it);
    err = AA_ENOMEM;
    atomic_fetch_add(&st->frames_dropped, 1);
    goto unlock;
  }
  memcpy(it->reason, frames, len);
  it->reason[len] = '\0';
  it->kind = ITEM_FRAMES;
  it->ts_ms = aa__store_wall_ms();
  it->frame_id = st->frames_n + 1;
  /* queued under frames_mu so that an id is handed out only once its row
   * is on its way (enqueue counts a refusal in frames_dropped) */
  err = enqueue(st, it, true);
  if (err == AA_OK) {
    st->frames_n++;
    st->frames_hash[i] = h;
    st->frames_ids[i] = st->frames_n;
    *id = st->frames_n;
  }
unlock:
  pthread_mutex_unlock(&st->frames_mu);
  return err;
}

int aa_store_set_trace_bound(aa_store *st, uint64_t max_events) {
  if (st == NULL) return AA_EINVAL;
  if (aa__store_forked_copy(st)) return AA_ECLOSED;
  atomic_store(&st->trace_bound, max_events);
  atomic_store(&st->trace_bound_changed, true);
  pthread_mutex_lock(&st->mu);
  aa__store_wake_writer(st);
  pthread_mutex_unlock(&st->mu);
  return AA_OK;
}
