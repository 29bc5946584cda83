/*
 * intake_mhd.c — libmicrohttpd's side of the intake's table (intake.c has
 * the states), called from inside MHD_run on the intake's own thread: it
 * finds the entry of a connection it took, follows its requests (MHD_BODY
 * once a head is parsed, MHD_IDLE once answered) and frees the slot when
 * libmicrohttpd lets go.
 * Entry points: the aa__intake_conn_* and aa__intake_request_* of intake.h,
 * and aa__intake_must_close.
 */
#include <stdint.h>

#include "intake_internal.h"

static entry *entry_of(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return ci != NULL ? ci->socket_context : NULL;
}

void aa__intake_conn_started(aa__intake *in, struct MHD_Connection *c,
                             void **socket_context) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  *socket_context = NULL;
  if (ci == NULL)
    return;
  for (size_t i = 0; i < in->cap; i++) {
    entry *e = &in->e[i];
    if (e->attached && !e->known && e->mhd_fd == ci->connect_fd &&
        (e->state == E_MHD_NEW || e->state == E_DETACHED ||
         e->state == E_CLOSING)) {
      e->known = true;
      *socket_context = e;
      break;
    }
  }
}

void aa__intake_conn_closed(aa__intake *in, void **socket_context) {
  entry *e = *socket_context;
  (void)in;
  if (e == NULL)
    return;
  e->attached = false;
  if (e->state == E_DETACHED)
    aa__intake_entry_free(e); /* we were done with it: the slot is free now */
  *socket_context = NULL;
}

static void set_state(aa__intake *in, struct MHD_Connection *c, int state) {
  entry *e = entry_of(c);
  if (e == NULL)
    return;
  if (e->state >= E_MHD_NEW) {
    e->state = state;
    e->since_ns = aa_now_ns();
  }
  if (state == E_MHD_BODY)
    e->reqs_begun++;
  if (state == E_MHD_IDLE) {
    e->reqs_done++;
    /* the relay waits for this answer to end the connection */
    if (e->state >= E_MHD_NEW && e->mode == M_STOP &&
        e->reqs_done >= e->answer_after) {
      e->again = true; /* the loop pumps it after MHD_run */
      in->again = true;
    }
  }
}

void aa__intake_request_begun(aa__intake *in, struct MHD_Connection *c) {
  set_state(in, c, E_MHD_BODY);
}

void aa__intake_request_done(aa__intake *in, struct MHD_Connection *c) {
  set_state(in, c, E_MHD_IDLE);
}

bool aa__intake_must_close(aa__intake *in, struct MHD_Connection *c) {
  entry *e = entry_of(c);
  (void)in;
  return e != NULL && e->close_at != 0 && e->reqs_begun >= e->close_at;
}
