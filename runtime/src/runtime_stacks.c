/*
 * runtime_stacks.c — the live trace's recent call stacks: the text behind
 * each store frames id that aa_rt_trace_frames attached to a traced block,
 * so that GET /holders can name a live block's stack (its pool keeps only
 * the id, aa_pool_trace_frame_of). Entry points: aa__rt_stacks_put,
 * aa__rt_stacks_get.
 *
 * A direct-mapped table of AA__RT_STACKS slots by id (the store numbers a
 * run's distinct stacks 1, 2, ..., so the newest AA__RT_STACKS sit apart),
 * at most AA__RT_STACKS_BYTES of text: a stack whose slot another id took,
 * or that was swept out for room, is gone ("evicted" to /holders). Only
 * the traced path with a stack pays: a lookup under a leaf mutex, and a
 * copy the first time an id is seen (made outside the lock). Memory: 32 KiB
 * of slots and at most AA__RT_STACKS_BYTES of text, from the first stack
 * to the runtime's stop.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime_internal.h"

static aa__rt_stack **slot_of(aa__rt_stacks *s, uint64_t id) {
  return &s->slot[id & (AA__RT_STACKS - 1)];
}

int aa__rt_stacks_put(aa_runtime *rt, int64_t run, uint64_t id, const char *frames, size_t len) {
  aa__rt_stacks *s = &rt->stacks;
  aa__rt_stack *fresh = NULL, *old = NULL;
  unsigned looked = 0;
  int rc = AA_OK;

  pthread_mutex_lock(&s->mu);
  if (s->slot != NULL) {
    aa__rt_stack *cur = *slot_of(s, id);
    if (cur != NULL && cur->run == run && cur->id == id) {
      pthread_mutex_unlock(&s->mu); /* the common case: a stack seen before */
      return AA_OK;
    }
  }
  pthread_mutex_unlock(&s->mu);

  fresh = malloc(sizeof *fresh + len + 1);
  if (fresh == NULL) {
    rc = AA_ENOMEM;
    goto done;
  }
  fresh->run = run;
  fresh->id = id;
  fresh->len = len;
  memcpy(fresh->text, frames, len);
  fresh->text[len] = '\0';

  pthread_mutex_lock(&s->mu);
  if (s->slot == NULL) {
    s->slot = calloc(AA__RT_STACKS, sizeof *s->slot);
    if (s->slot == NULL) {
      pthread_mutex_unlock(&s->mu);
      rc = AA_ENOMEM;
      goto done;
    }
  }
  aa__rt_stack **at = slot_of(s, id);
  if (*at != NULL && (*at)->run == run && (*at)->id == id) {
    pthread_mutex_unlock(&s->mu); /* another thread kept it meanwhile */
    goto done;
  }
  old = *at;
  *at = NULL;
  if (old != NULL) {
    s->bytes -= old->len;
    s->evicted++;
  }
  /* room: the slots from the sweep's mark go (freed under the lock: rare,
   * a text of at most AA_STORE_MAX_FRAMES_BYTES each) */
  while (s->bytes + len > AA__RT_STACKS_BYTES && looked++ < AA__RT_STACKS) {
    aa__rt_stack **v = &s->slot[s->sweep];
    s->sweep = (s->sweep + 1) & (AA__RT_STACKS - 1);
    if (*v == NULL)
      continue;
    s->bytes -= (*v)->len;
    s->evicted++;
    free(*v);
    *v = NULL;
  }
  *at = fresh;
  s->bytes += len;
  fresh = NULL;
  pthread_mutex_unlock(&s->mu);
done:
  free(old);
  free(fresh);
  return rc;
}

int aa__rt_stacks_get(aa_runtime *rt, int64_t run, uint64_t id, char **text, size_t *len) {
  aa__rt_stacks *s = &rt->stacks;
  int rc = AA_ELIMIT;
  *text = NULL;
  *len = 0;
  if (id == 0)
    return AA_ENOENT;
  pthread_mutex_lock(&s->mu);
  aa__rt_stack *cur = s->slot != NULL ? *slot_of(s, id) : NULL;
  if (cur != NULL && cur->run == run && cur->id == id) {
    *text = malloc(cur->len + 1);
    if (*text == NULL) {
      rc = AA_ENOMEM;
    } else {
      memcpy(*text, cur->text, cur->len + 1);
      *len = cur->len;
      rc = AA_OK;
    }
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void aa__rt_stacks_clear(aa_runtime *rt) {
  aa__rt_stacks *s = &rt->stacks;
  aa__rt_stack **slot;
  pthread_mutex_lock(&s->mu);
  slot = s->slot;
  s->slot = NULL;
  s->bytes = 0;
  s->sweep = 0;
  pthread_mutex_unlock(&s->mu);
  if (slot == NULL)
    return;
  for (size_t i = 0; i < AA__RT_STACKS; i++)
    free(slot[i]);
  free(slot);
}
