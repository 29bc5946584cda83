/*
 * replay_threads.c — per_thread replay: a replay thread for each recorded
 * thread id, fed runs of its events in input order.
 * Entry points: aa__replay_feed_threads, aa__replay_workers_stop.
 */
#include <pthread.h>
#include <string.h>

#include "replay_sim.h"

/* ---------------------------------------------------------------- threads */

/* With per_thread, each recorded thread id gets a replay thread of its own
 * (so the core's per-thread caches see the recorded pattern), and events
 * are handed to them strictly in input order: the feeding thread passes a
 * run of consecutive events of one thread id and waits until it is done.
 * Only one thread touches the simulator at a time; the hand-off mutex
 * orders their accesses. */

static void *worker_main(void *arg) {
  replay_worker *w = arg;

  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (w->ev == NULL && !w->quit)
      pthread_cond_wait(&w->cv, &w->mu);
    if (w->ev == NULL)
      break; /* quit with nothing pending */
    w->rc = aa__replay_feed_local(w->s, w->ev, w->n);
    w->ev = NULL;
    pthread_cond_broadcast(&w->cv);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

void aa__replay_workers_stop(aa_replay_sim *s) {
  size_t i;

  for (i = 0; i < s->nworkers; i++) {
    replay_worker *w = &s->workers[i];
    if (!w->started)
      continue;
    pthread_mutex_lock(&w->mu);
    w->quit = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL); /* its thread cache goes back to the pool */
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    w->started = false;
  }
  s->nworkers = 0;
}

/* The worker of a recorded thread id; past AA_REPLAY_MAX_THREADS ids, they
 * share workers by id modulo. NULL when a thread cannot be started. */
static replay_worker *worker_for(aa_replay_sim *s, uint64_t tid) {
  replay_worker *w;
  size_t i;

  for (i = 0; i < s->nworkers; i++) {
    if (s->workers[i].tid == tid)
      return &s->workers[i];
  }
  if (s->nworkers == AA_REPLAY_MAX_THREADS)
    return &s->workers[tid % AA_REPLAY_MAX_THREADS];
  w = &s->workers[s->nworkers];
  memset(w, 0, sizeof *w);
  w->s = s;
  w->tid = tid;
  if (pthread_mutex_init(&w->mu, NULL) != 0)
    return NULL;
  if (pthread_cond_init(&w->cv, NULL) != 0) {
    pthread_mutex_destroy(&w->mu);
    return NULL;
  }
  if (pthread_create(&w->th, NULL, worker_main, w) != 0) {
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return NULL;
  }
  w->started = true;
  s->nworkers++;
  return w;
}

int aa__replay_feed_threads(aa_replay_sim *s, const aa_replay_event *ev, size_t n) {
  size_t i = 0;
  int rc = AA_OK;

  while (i < n && rc == AA_OK) {
    size_t j = i + 1;
    replay_worker *w;
    while (j < n && ev[j].thread == ev[i].thread)
      j++;
    w = worker_for(s, ev[i].thread);
    if (w == NULL) {
      snprintf(s->err, sizeof s->err, "%s %llu: cannot start a replay thread",
               s->pos, (unsigned long long)ev[i].line);
      return AA_ENOMEM;
    }
    pthread_mutex_lock(&w->mu);
    w->ev = &ev[i];
    w->n = j - i;
    pthread_cond_broadcast(&w->cv);
    while (w->ev != NULL)
      pthread_cond_wait(&w->cv, &w->mu);
    rc = w->rc;
    pthread_mutex_unlock(&w->mu);
    i = j;
  }
  return rc;
}

size_t aa_replay_sim_threads(const aa_replay_sim *s) { return s->nworkers; }
