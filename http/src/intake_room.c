/*
 * intake_room.c — accepting clients and making room for them (intake.c has
 * the states and the loop that calls aa__intake_accept_all).
 *
 * Room for new clients: when a client connects and the server holds
 * max_connections (or its address holds per_ip_connections), the oldest
 * connection of that scope with no request in progress (INTAKE without a
 * whole head queued, or MHD_IDLE) is closed to make room; only when there is
 * none is the newcomer refused (503). Slow clients therefore cannot hold
 * every slot: each one is closed at its deadline or when someone new needs
 * its place.
 *
 * Entry point: aa__intake_accept_all (intake thread).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "intake_internal.h"

/* Makes room: closes e, which has no request in progress. */
static void evict(aa__intake *in, entry *e) {
  if (e->state == E_INTAKE)
    aa__intake_refuse(in, e, 503,
                      "the server needed this connection for a new client and "
                      "this request had not arrived; retry",
                      "");
  else
    aa__intake_end_entry(in, e);
}

static bool counts(const entry *e) {
  return e->state != E_FREE && e->state != E_CLOSING &&
         e->state != E_DETACHED;
}

/* Whether an INTAKE entry's queued bytes already hold a whole head (good or
 * bad): its request has arrived and is decided on its own event, which may
 * still be pending behind the one that admits a newcomer. */
static bool head_arrived(aa__intake *in, const entry *e) {
  aa__http_head h;
  ssize_t n = recv(e->fd, in->buf, in->lim.max_head, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 && aa__http_head_check(in->buf, (size_t)n, &in->lim, &h) != 0;
}

static bool evictable(aa__intake *in, const entry *e) {
  if (!counts(e))
    return false;
  if (e->state == E_INTAKE)
    return !head_arrived(in, e);
  /* answered everything relayed, and no whole head waits at the relay */
  return e->state == E_MHD_IDLE && e->mode == M_HEAD &&
         e->reqs_fwd == e->reqs_done && !head_arrived(in, e);
}

/* The oldest evictable entry (of ip when ip is not NULL), or NULL. */
static entry *oldest(aa__intake *in, const char *ip) {
  entry *best = NULL;
  for (size_t i = 0; i < in->cap; i++) {
    entry *e = &in->e[i];
    if (!counts(e) || (ip != NULL && strcmp(e->ip, ip) != 0))
      continue;
    if (best != NULL && e->since_ns >= best->since_ns)
      continue;
    if (evictable(in, e))
      best = e;
  }
  return best;
}

static void admit(aa__intake *in, int fd, const struct sockaddr_storage *ss,
                  socklen_t alen) {
  char ip[64];
  unsigned total = 0, same = 0;
  entry *slot = NULL;
  struct epoll_event ev;

  aa__http_addr_text((const struct sockaddr *)(const void *)ss, ip, sizeof ip);
  for (size_t i = 0; i < in->cap; i++) {
    entry *e = &in->e[i];
    if (e->state == E_FREE) {
      if (slot == NULL)
        slot = e;
      continue;
    }
    if (!counts(e))
      continue;
    total++;
    if (strcmp(e->ip, ip) == 0)
      same++;
  }
  bool room = true;
  if (in->per_ip > 0 && same >= in->per_ip) {
    entry *v = oldest(in, ip);
    if (v == NULL) {
      room = false;
    } else {
      evict(in, v);
      total--;
    }
  }
  if (room && total >= in->max_conn) {
    entry *v = oldest(in, NULL);
    if (v == NULL)
      room = false;
    else
      evict(in, v);
  }
  if (slot == NULL) {
    close(fd); /* no slot even to answer in: the table is full of closers */
    return;
  }
  aa__intake_entry_free(slot);
  slot->state = E_INTAKE;
  slot->fd = fd;
  slot->since_ns = aa_now_ns();
  memcpy(&slot->addr, ss, sizeof *ss);
  slot->alen = alen;
  snprintf(slot->ip, sizeof slot->ip, "%s", ip);
  memset(&ev, 0, sizeof ev);
  /* edge-triggered: a peek leaves the bytes queued, so only new bytes (or
   * the end of input, or room to send) must wake us */
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = tag_of(in, slot, false);
  if (epoll_ctl(in->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    aa__intake_entry_free(slot);
    close(fd);
    return;
  }
  if (!room) /* answered and drained like any refusal (no reset) */
    aa__intake_refuse(in, slot, 503,
                      "too many connections (from this address or in all) with "
                      "requests in progress; retry",
                      "");
}

void aa__intake_accept_all(aa__intake *in) {
  for (;;) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = accept4(in->listen_fd, (struct sockaddr *)&ss, &sl,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        /* the listening socket stays readable: waiting on it would spin;
         * accepting resumes at the next sweep */
        struct epoll_event ev;
        memset(&ev, 0, sizeof ev);
        ev.data.u64 = TAG_LISTEN;
        if (epoll_ctl(in->ep, EPOLL_CTL_MOD, in->listen_fd, &ev) == 0)
          in->accept_paused = true;
      }
      return; /* EAGAIN, or out of descriptors */
    }
    admit(in, fd, &ss, sl);
  }
}
