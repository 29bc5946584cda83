/*
 * intake_close.c — how the intake ends a connection (intake.c has the
 * states): a refusal answered with a JSON error document while the client's
 * input is drained, so that the answer is not lost to a reset (CLOSING); an
 * abrupt end (deadline, room, a broken client); and freeing a slot, at once
 * or once libmicrohttpd lets go of its end (DETACHED).
 * Entry points: aa__intake_close_with_error, aa__intake_refuse,
 * aa__intake_end_entry, aa__intake_close_entry (intake thread).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "intake_internal.h"

static const char *reason(int status) {
  switch (status) {
  case 400:
    return "Bad Request";
  case 408:
    return "Request Timeout";
  case 414:
    return "URI Too Long";
  case 431:
    return "Request Header Fields Too Large";
  case 503:
    return "Service Unavailable";
  case 505:
    return "HTTP Version Not Supported";
  default:
    return "Error";
  }
}

/* Whether the client has shut its sending side (checked on the socket: an
 * event's flag may be a stale one of an earlier connection of the slot). */
bool aa__intake_client_shut(int fd) {
  struct pollfd pf = {fd, POLLRDHUP, 0};
  return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP)) != 0;
}

/* Empties a slot (its buffers freed; its descriptors are closed by now). */
void aa__intake_entry_free(entry *e) {
  free(e->refusal);
  free(e->out);
  memset(e, 0, sizeof *e);
  e->state = E_FREE;
  e->fd = -1;
  e->peer = -1;
  e->mhd_fd = -1;
}

/* Reads and drops what the client has sent so far, at most DRAIN_MAX bytes
 * a call so that a client that keeps sending cannot hold the thread (the
 * rest goes on its next event, or at the CLOSING deadline). Never blocks.
 * Returns false at end of input or on an error. */
bool aa__intake_drain(aa__intake *in, int fd) {
  size_t total = 0;
  while (total < DRAIN_MAX) {
    ssize_t n = recv(fd, in->buf, in->lim.max_head, MSG_DONTWAIT);
    if (n > 0) {
      total += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return true;
    if (n < 0 && errno == EINTR)
      continue;
    return false;
  }
  return true;
}

/* Queues a JSON error document in e->out (which is empty). false: out of
 * memory (the connection is then closed without it). */
static bool queue_error(aa__intake *in, entry *e, int status, const char *msg,
                        const char *path) {
  aa__http_resp resp;
  char head[512];
  int n;
  bool ok = false;

  aa__http_error_resp(in->st, path != NULL ? path : "", status, msg,
                      status == 503 ? AA_EBUSY : AA_EINVAL, &resp);
  n = snprintf(head, sizeof head,
               "HTTP/1.1 %d %s\r\n"
               "Content-Type: application/json\r\n"
               "Content-Length: %zu\r\n"
               "Cache-Control: no-store\r\n"
               "X-Content-Type-Options: nosniff\r\n"
               "%s"
               "Connection: close\r\n\r\n",
               resp.status, reason(resp.status), resp.len,
               status == 503 ? "Retry-After: 1\r\n" : "");
  if (n > 0 && (size_t)n < sizeof head) {
    e->out = malloc((size_t)n + resp.len);
    if (e->out != NULL) {
      memcpy(e->out, head, (size_t)n);
      memcpy(e->out + n, resp.body, resp.len);
      e->out_len = (size_t)n + resp.len;
      e->out_off = 0;
      ok = true;
    }
  }
  aa__http_resp_free(&resp);
  return ok;
}

/* CLOSING: sends what is left of the answer in e->out, then half-closes.
 * -1: the client's socket failed. */
int aa__intake_flush_closing(entry *e) {
  while (e->out_off < e->out_len) {
    ssize_t w = send(e->fd, e->out + e->out_off, e->out_len - e->out_off,
                     MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0)
      return would_block() ? 0 : -1; /* its EPOLLOUT resumes us */
    e->out_off += (size_t)w;
  }
  if (e->out != NULL) {
    free(e->out);
    e->out = NULL;
    e->out_len = e->out_off = 0;
    (void)shutdown(e->fd, SHUT_WR);
  }
  return 0;
}

/* Closes our end of the pair (libmicrohttpd sees the end of its input). */
void aa__intake_close_peer(aa__intake *in, entry *e) {
  if (e->peer < 0)
    return;
  epoll_ctl(in->ep, EPOLL_CTL_DEL, e->peer, NULL);
  close(e->peer);
  e->peer = -1;
}

/* Done with the client: closes its socket and our end of the pair. The slot
 * is free at once unless libmicrohttpd still holds its end (DETACHED until
 * it reports the close). */
void aa__intake_close_entry(aa__intake *in, entry *e) {
  aa__intake_close_peer(in, e);
  if (e->fd >= 0) {
    epoll_ctl(in->ep, EPOLL_CTL_DEL, e->fd, NULL);
    close(e->fd);
    e->fd = -1;
  }
  if (!e->attached) {
    aa__intake_entry_free(e);
    return;
  }
  free(e->refusal);
  e->refusal = NULL;
  free(e->out);
  e->out = NULL;
  e->out_len = e->out_off = 0;
  e->state = E_DETACHED;
  e->since_ns = aa_now_ns();
}

/* Ends a connection abruptly (deadline, room, a broken client). */
void aa__intake_end_entry(aa__intake *in, entry *e) {
  if (e->fd >= 0)
    (void)shutdown(e->fd, SHUT_RDWR);
  aa__intake_close_entry(in, e);
}

/* Ends e with a JSON error answer: its input is drained for up to
 * CLOSING_NS (so that the answer is not lost to a reset) while the answer
 * goes out as fast as the client takes it (CLOSING), then it is closed.
 * Nothing more is relayed. */
void aa__intake_close_with_error(aa__intake *in, entry *e, int status,
                                 const char *msg, const char *path) {
  bool open = aa__intake_drain(in, e->fd);
  aa__intake_close_peer(in, e);
  free(e->out);
  e->out = NULL;
  e->out_len = e->out_off = 0;
  if (!queue_error(in, e, status, msg, path)) {
    aa__intake_end_entry(in, e);
    return;
  }
  e->state = E_CLOSING;
  e->since_ns = aa_now_ns();
  if (aa__intake_flush_closing(e) < 0 || (!open && e->out == NULL))
    aa__intake_close_entry(in, e);
}

/* Refuses an entry that is ours (INTAKE). */
void aa__intake_refuse(aa__intake *in, entry *e, int status, const char *msg,
                       const char *path) {
  aa__intake_close_with_error(in, e, status, msg, path);
}
