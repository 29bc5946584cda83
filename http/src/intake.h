/*
 * intake.h — the server's front door (intake.c), shared with server.c and
 * request.c only.
 *
 * The intake thread owns the listening socket and every client's socket. It
 * reads each request head without consuming it (MSG_PEEK), checks it strictly
 * (head.c) and answers a refusal itself with a JSON error document. A
 * connection whose first head is good gets a socket pair whose other end is
 * handed to libmicrohttpd; the intake relays between the client and the pair,
 * passing libmicrohttpd each later head only once it is complete and checked
 * too. It keeps one table of every connection to enforce the connection
 * limits, the per-request deadlines, and room for new clients (the oldest
 * connection that has no request in progress is closed when a new client
 * needs its place).
 */
#ifndef AA_HTTP_INTAKE_H
#define AA_HTTP_INTAKE_H

#include <microhttpd.h>

#include "http_internal.h"

typedef struct aa__intake aa__intake;

/* Creates the table (no thread yet). Takes the listening socket fd (closed
 * by aa__intake_free). AA_ENOMEM / AA_EIO. */
int aa__intake_new(aa__http_state *st, const aa_http_config *cfg,
                   int listen_fd, aa__intake **out);
/* Starts the server's one thread: it accepts, hands connections to d and
 * runs d (libmicrohttpd in external mode, with epoll). */
int aa__intake_start(aa__intake *in, struct MHD_Daemon *d);
/* Stops the thread and closes the connections it still holds. The daemon
 * must be stopped after this and before aa__intake_free. */
void aa__intake_stop(aa__intake *in);
void aa__intake_free(aa__intake *in);

/* libmicrohttpd's side, called from inside MHD_run on the intake's thread. */
void aa__intake_conn_started(aa__intake *in, struct MHD_Connection *c,
                             void **socket_context);
void aa__intake_conn_closed(aa__intake *in, void **socket_context);
/* A request's head was parsed (its body may follow) / it was answered. */
void aa__intake_request_begun(aa__intake *in, struct MHD_Connection *c);
void aa__intake_request_done(aa__intake *in, struct MHD_Connection *c);
/* Whether the request being answered must be the connection's last (its
 * body was chunked: the relay no longer knows where the next head starts). */
bool aa__intake_must_close(aa__intake *in, struct MHD_Connection *c);

#endif /* AA_HTTP_INTAKE_H */
