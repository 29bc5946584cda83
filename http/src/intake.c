/*
 * intake.c — the server's front door (see intake.h): accepts connections,
 * checks every request head on its raw bytes before libmicrohttpd sees it,
 * answers refusals as JSON, and enforces the connection limits and the
 * per-request deadlines for every connection.
 *
 * How the bytes flow. The client's socket is ours for its whole life. When
 * its first head has arrived and passed the check, a socket pair is made and
 * libmicrohttpd is given one end (MHD_add_connection); from then on this
 * thread relays: the client's bytes go to libmicrohttpd one checked unit at a
 * time (a head only once it is complete and good, then exactly the body its
 * Content-Length announces, or a chunked body chunk by chunk with each size
 * line and CRLF checked), and libmicrohttpd's answers go back to the client.
 * libmicrohttpd therefore never parses a head (or chunk framing) that head.c
 * has not passed: a NUL inside a header value, "X-A : 1", obsolete folding
 * and the rest are refused on the second and every later request of a
 * kept-alive connection, pipelined or not, exactly as on the first, and a
 * malformed chunked body gets a JSON 400/413, not libmicrohttpd's HTML. A
 * chunked request is the connection's last all the same (the answer says
 * "Connection: close"; aa__intake_must_close). A refused request is
 * answered after the answers to the requests before it, then the connection
 * is closed.
 *
 * The relay itself is relay.c; this file keeps the table: accepting,
 * the first head, refusals, limits, deadlines and libmicrohttpd's callbacks.
 *
 * States of a connection (entry.state):
 *   INTAKE   accepted; its first head is arriving. Ours. Deadline: timeout_s
 *            from accept, however slowly bytes trickle.
 *   CLOSING  answered with a refusal (or libmicrohttpd closed its end); the
 *            rest of the client's input is drained (so that the answer is
 *            not lost to a reset) for up to 1 s. Ours.
 *   DETACHED the client's socket is closed; waiting for libmicrohttpd to
 *            report that it closed its end of the pair (the slot is reused
 *            only then: libmicrohttpd's callbacks point at it).
 *   MHD_NEW  relayed to libmicrohttpd, which has not parsed a head yet.
 *   MHD_BODY libmicrohttpd parsed a head: body, handler and answer are under
 *            way. Deadline: timeout_s from the head.
 *   MHD_IDLE answered; a kept-alive connection waiting for (or receiving)
 *            its next head. Deadline: timeout_s from the answer.
 * A relayed connection past its deadline, or chosen to make room, is closed
 * here (its client socket and our end of the pair); libmicrohttpd sees the
 * end of its pair and tells us when it has let go.
 *
 * Room for new clients: when a client connects and the server holds
 * max_connections (or its address holds per_ip_connections), the oldest
 * connection of that scope with no request in progress (INTAKE without a
 * whole head queued, or MHD_IDLE) is closed to make room; only when there is
 * none is the newcomer refused (503). Slow clients therefore cannot hold
 * every slot: each one is closed at its deadline or when someone new needs
 * its place.
 *
 * Lock: in->mu guards the table; held by the intake thread while it handles
 * an event (all socket calls are non-blocking) and briefly by libmicrohttpd's
 * thread (its callbacks). Never held across MHD_add_connection.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "intake_internal.h"

/* ------------------------------------------------------------ helpers */

static void ip_of(const struct sockaddr_storage *ss, char *out, size_t cap) {
  out[0] = '\0';
  if (ss->ss_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)ss)->sin_addr,
              out, (socklen_t)cap);
  else if (ss->ss_family == AF_INET6)
    inet_ntop(AF_INET6,
              &((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr, out,
              (socklen_t)cap);
}

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

/* Empties a slot (its buffers freed; its descriptors are closed by now). */
static void entry_free(entry *e) {
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
static int flush_closing(entry *e) {
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
    entry_free(e);
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
  if (flush_closing(e) < 0 || (!open && e->out == NULL))
    aa__intake_close_entry(in, e);
}

/* Refuses an entry that is ours (INTAKE). */
void aa__intake_refuse(aa__intake *in, entry *e, int status, const char *msg,
                       const char *path) {
  aa__intake_close_with_error(in, e, status, msg, path);
}

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

/* Whether the client has shut its sending side (checked on the socket: an
 * event's flag may be a stale one of an earlier connection of the slot). */
bool aa__intake_client_shut(int fd) {
  struct pollfd pf = {fd, POLLRDHUP, 0};
  return poll(&pf, 1, 0) == 1 && (pf.revents & (POLLRDHUP | POLLHUP)) != 0;
}

/* ------------------------------------------------------------ intake */

static void admit(aa__intake *in, int fd, const struct sockaddr_storage *ss,
                  socklen_t alen) {
  char ip[64];
  unsigned total = 0, same = 0;
  entry *slot = NULL;
  struct epoll_event ev;

  ip_of(ss, ip, sizeof ip);
  pthread_mutex_lock(&in->mu);
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
    pthread_mutex_unlock(&in->mu);
    close(fd); /* no slot even to answer in: the table is full of closers */
    return;
  }
  entry_free(slot);
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
    entry_free(slot);
    pthread_mutex_unlock(&in->mu);
    close(fd);
    return;
  }
  if (!room) /* answered and drained like any refusal (no reset) */
    aa__intake_refuse(in, slot, 503,
                      "too many connections (from this address or in all) with "
                      "requests in progress; retry",
                      "");
  pthread_mutex_unlock(&in->mu);
}

static void accept_all(aa__intake *in) {
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

static void on_readable(aa__intake *in, entry *e, bool rdhup) {
  aa__http_head h;
  ssize_t n;

  if (e->state == E_CLOSING) {
    bool open = aa__intake_drain(in, e->fd);
    if (flush_closing(e) < 0 || (!open && e->out == NULL))
      aa__intake_close_entry(in, e);
    return;
  }
  if (e->state != E_INTAKE)
    return;
  n = recv(e->fd, in->buf, in->lim.max_head, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && !would_block())) {
    aa__intake_close_entry(in, e); /* the client went away before its request */
    return;
  }
  if (n < 0)
    return;
  if (aa__http_head_check(in->buf, (size_t)n, &in->lim, &h) == 0) {
    if (rdhup && aa__intake_client_shut(e->fd)) {
      /* the client shut its side: the head can never be completed. It
       * may still read, so it is answered (not left until the deadline). */
      aa__intake_close_with_error(in, e, 400,
                                  "the client closed its side before the request head "
                                  "was complete",
                                  "");
    }
    return; /* not complete yet */
  }
  if (h.status != 0) {
    aa__intake_refuse(in, e, h.status, h.why, h.path);
    return;
  }
  aa__relay_hand_over(in, e, &h);
}

static void sweep(aa__intake *in) {
  uint64_t now;
  char msg[160];
  pthread_mutex_lock(&in->mu);
  now = aa_now_ns(); /* after the lock: no since_ns is later than now */
  for (size_t i = 0; i < in->cap; i++) {
    entry *e = &in->e[i];
    uint64_t age = now > e->since_ns ? now - e->since_ns : 0;
    switch (e->state) {
    case E_INTAKE:
      if (age > in->deadline_ns) {
        snprintf(msg, sizeof msg,
                 "the request line and headers did not arrive within %u s",
                 in->timeout_s);
        aa__intake_refuse(in, e, 408, msg, "");
      }
      break;
    case E_CLOSING:
      if (age > CLOSING_NS)
        aa__intake_close_entry(in, e);
      break;
    case E_DETACHED:
      /* libmicrohttpd never reported taking it (it dropped it, e.g. out of
       * memory): no callback can come for it */
      if (!e->known && age > CLOSING_NS)
        entry_free(e);
      break;
    case E_MHD_NEW:
      if (!e->known && age > CLOSING_NS) {
        aa__intake_end_entry(in, e); /* never taken: end it rather than wait */
        break;
      }
      /* fall through */
    case E_MHD_BODY:
    case E_MHD_IDLE:
      if (age <= in->deadline_ns)
        break;
      if (e->state == E_MHD_IDLE && e->mode == M_HEAD && e->out_len == 0 &&
          recv(e->fd, in->buf, 1, MSG_PEEK | MSG_DONTWAIT) == 1) {
        /* every answer has gone and part of the next head has come: it is
         * answered like a first head that came too slowly */
        snprintf(msg, sizeof msg,
                 "the request line and headers did not arrive within %u s",
                 in->timeout_s);
        aa__intake_close_with_error(in, e, 408, msg, "");
        break;
      }
      aa__intake_end_entry(in, e);
      break;
    default:
      break;
    }
  }
  pthread_mutex_unlock(&in->mu);
}

static void *intake_main(void *arg) {
  aa__intake *in = arg;
  struct epoll_event evs[64];
  uint64_t last_sweep = 0;

  while (!in->stop) {
    int n = epoll_wait(in->ep, evs, 64, in->again ? 0 : 100);
    for (int k = 0; k < n; k++) {
      uint64_t tag = evs[k].data.u64;
      if (tag == TAG_LISTEN) {
        accept_all(in);
      } else if (tag == TAG_WAKE) {
        uint64_t v;
        (void)!read(in->wake_fd, &v, sizeof v);
        in->again = true; /* a callback marked entries (e->again) */
      } else if (tag >= TAG_BASE && (tag - TAG_BASE) / 2 < in->cap) {
        entry *e = &in->e[(tag - TAG_BASE) / 2];
        bool client_side = ((tag - TAG_BASE) & 1) == 0;
        uint32_t ev = evs[k].events;
        bool hup = (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
        bool rd = hup || (ev & EPOLLIN) != 0;
        bool wr = (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0;
        pthread_mutex_lock(&in->mu);
        if (e->state >= E_MHD_NEW) {
          if (client_side) {
            e->c_hup |= hup;
            e->c_rd |= rd;
            e->c_wr |= wr;
          } else {
            e->p_hup |= hup;
            e->p_rd |= rd;
            e->p_wr |= wr;
          }
          aa__relay_pump(in, e);
        } else if (client_side)
          on_readable(in, e,
                      (evs[k].events & (EPOLLRDHUP | EPOLLHUP)) != 0);
        pthread_mutex_unlock(&in->mu);
      }
    }
    if (in->again) {
      pthread_mutex_lock(&in->mu);
      in->again = false;
      for (size_t i = 0; i < in->cap; i++) {
        entry *e = &in->e[i];
        if (!e->again)
          continue;
        e->again = false;
        if (e->state >= E_MHD_NEW)
          aa__relay_pump(in, e);
      }
      pthread_mutex_unlock(&in->mu);
    }
    if (aa_now_ns() - last_sweep > 100000000ull) {
      sweep(in);
      last_sweep = aa_now_ns();
      if (in->accept_paused) {
        struct epoll_event ev;
        memset(&ev, 0, sizeof ev);
        ev.events = EPOLLIN;
        ev.data.u64 = TAG_LISTEN;
        if (epoll_ctl(in->ep, EPOLL_CTL_MOD, in->listen_fd, &ev) == 0)
          in->accept_paused = false;
      }
    }
  }
  return NULL;
}

/* ------------------------------------------------------------ lifecycle */

int aa__intake_new(aa__http_state *st, const aa_http_config *cfg,
                   int listen_fd, aa__intake **out) {
  aa__intake *in = calloc(1, sizeof *in);
  struct epoll_event ev;
  int rc = AA_ENOMEM;

  *out = NULL;
  if (in == NULL) {
    close(listen_fd);
    return AA_ENOMEM;
  }
  pthread_mutex_init(&in->mu, NULL);
  in->st = st;
  in->listen_fd = listen_fd;
  in->ep = -1;
  in->wake_fd = -1;
  in->max_conn = cfg->max_connections;
  in->per_ip = cfg->per_ip_connections;
  in->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 10;
  in->deadline_ns = (uint64_t)in->timeout_s * 1000000000ull;
  in->lim.max_head = cfg->max_header;
  in->lim.max_target = cfg->max_header / 2;
  in->lim.max_args = AA__HTTP_MAX_ARGS;
  in->lim.max_fields = AA__HTTP_MAX_FIELDS;
  /* our connections plus those closed but not yet let go by libmicrohttpd */
  in->cap = (size_t)in->max_conn * 2 + 16;
  in->e = calloc(in->cap, sizeof *in->e);
  in->buf = malloc(in->lim.max_head + 1);
  in->relay = malloc(RELAY_BYTES);
  if (in->e == NULL || in->buf == NULL || in->relay == NULL)
    goto fail;
  for (size_t i = 0; i < in->cap; i++)
    entry_free(&in->e[i]);
  rc = AA_EIO;
  in->ep = epoll_create1(EPOLL_CLOEXEC);
  in->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (in->ep < 0 || in->wake_fd < 0)
    goto fail;
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.u64 = TAG_LISTEN;
  if (epoll_ctl(in->ep, EPOLL_CTL_ADD, listen_fd, &ev) != 0)
    goto fail;
  ev.data.u64 = TAG_WAKE;
  if (epoll_ctl(in->ep, EPOLL_CTL_ADD, in->wake_fd, &ev) != 0)
    goto fail;
  *out = in;
  return AA_OK;
fail:
  aa__intake_free(in);
  return rc;
}

int aa__intake_start(aa__intake *in, struct MHD_Daemon *d) {
  in->daemon = d;
  if (pthread_create(&in->thread, NULL, intake_main, in) != 0)
    return AA_EIO;
  in->running = true;
  return AA_OK;
}

void aa__intake_stop(aa__intake *in) {
  uint64_t one = 1;
  if (in == NULL)
    return;
  if (in->running) {
    in->stop = true;
    (void)!write(in->wake_fd, &one, sizeof one);
    pthread_join(in->thread, NULL);
    in->running = false;
  }
  /* nobody relays any more: every client is closed, and libmicrohttpd sees
   * the end of each pair (slots it holds stay DETACHED until it lets go) */
  pthread_mutex_lock(&in->mu);
  for (size_t i = 0; i < in->cap; i++) {
    entry *e = &in->e[i];
    if (e->state != E_FREE && e->state != E_DETACHED)
      aa__intake_close_entry(in, e);
  }
  pthread_mutex_unlock(&in->mu);
}

void aa__intake_free(aa__intake *in) {
  if (in == NULL)
    return;
  aa__intake_stop(in);
  if (in->e != NULL) {
    for (size_t i = 0; i < in->cap; i++) {
      entry *e = &in->e[i];
      if (e->state == E_FREE)
        continue;
      if (e->fd >= 0)
        close(e->fd);
      if (e->peer >= 0)
        close(e->peer);
      entry_free(e);
    }
  }
  if (in->ep >= 0)
    close(in->ep);
  if (in->wake_fd >= 0)
    close(in->wake_fd);
  if (in->listen_fd >= 0)
    close(in->listen_fd);
  pthread_mutex_destroy(&in->mu);
  free(in->e);
  free(in->buf);
  free(in->relay);
  free(in);
}

/* ------------------------------------------------------------ MHD's side */

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
  pthread_mutex_lock(&in->mu);
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
  pthread_mutex_unlock(&in->mu);
}

void aa__intake_conn_closed(aa__intake *in, void **socket_context) {
  entry *e = *socket_context;
  if (e == NULL)
    return;
  pthread_mutex_lock(&in->mu);
  e->attached = false;
  if (e->state == E_DETACHED)
    entry_free(e); /* we were done with it: the slot is free now */
  pthread_mutex_unlock(&in->mu);
  *socket_context = NULL;
}

static void set_state(aa__intake *in, struct MHD_Connection *c, int state) {
  entry *e = entry_of(c);
  bool wake = false;
  if (e == NULL)
    return;
  pthread_mutex_lock(&in->mu);
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
      e->again = true;
      wake = true;
    }
  }
  pthread_mutex_unlock(&in->mu);
  if (wake) {
    uint64_t one = 1;
    (void)!write(in->wake_fd, &one, sizeof one);
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
  bool close_it;
  if (e == NULL)
    return false;
  pthread_mutex_lock(&in->mu);
  close_it = e->close_at != 0 && e->reqs_begun >= e->close_at;
  pthread_mutex_unlock(&in->mu);
  return close_it;
}
