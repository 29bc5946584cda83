/*
 * intake.c — the server's front door (see intake.h): accepts connections,
 * checks each first request head on its raw bytes before libmicrohttpd sees
 * it, answers refusals as JSON, hands good connections over, and enforces
 * the connection limits and per-request deadlines for every connection.
 *
 * States of a connection (entry.state):
 *   INTAKE   accepted; its first head is arriving. Ours. Deadline: timeout_s
 *            from accept, however slowly bytes trickle.
 *   CLOSING  answered with a refusal; the rest of its input is drained (so
 *            that the answer is not lost to a reset) for up to 1 s. Ours.
 *   MHD_NEW  handed to libmicrohttpd with a complete head.
 *   MHD_BODY libmicrohttpd parsed a head: body, handler and answer are under
 *            way. Deadline: timeout_s from the head.
 *   MHD_IDLE answered; a kept-alive connection waiting for (or receiving)
 *            its next head. Deadline: timeout_s from the answer.
 * A libmicrohttpd connection past its deadline, or chosen to make room, is
 * shut down through a duplicate of its descriptor (so no descriptor number
 * can be reused under us); libmicrohttpd then closes it and tells us.
 *
 * Room for new clients: when a client connects and the server holds
 * max_connections (or its address holds per_ip_connections), the oldest
 * connection of that scope with no request in progress (INTAKE without a
 * whole head queued, or MHD_IDLE) is closed to make room; only when there is none is the newcomer refused
 * (503). Slow clients therefore cannot hold every slot: each one is closed
 * at its deadline or when someone new needs its place.
 *
 * Lock: in->mu guards the table; held briefly by the intake thread and by
 * libmicrohttpd's thread (its callbacks). Never held across
 * MHD_add_connection.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "intake.h"

enum { E_FREE,
       E_INTAKE,
       E_CLOSING,
       E_MHD_NEW,
       E_MHD_BODY,
       E_MHD_IDLE };

#define CLOSING_NS 1000000000ull /* how long a refused connection drains */
#define TAG_LISTEN 1ull
#define TAG_WAKE 2ull
#define TAG_BASE 16ull /* entry i has tag TAG_BASE + i */

typedef struct entry {
  int state;
  int fd;     /* INTAKE/CLOSING: the socket; MHD_*: our duplicate of it */
  int mhd_fd; /* MHD_*: libmicrohttpd's descriptor (for the lookup) */
  bool shut;  /* shut down (deadline or room); libmicrohttpd closes it */
  bool known; /* MHD_*: libmicrohttpd told us it took it */
  uint64_t since_ns;
  struct sockaddr_storage addr;
  socklen_t alen;
  char ip[64];
} entry;

struct aa__intake {
  pthread_mutex_t mu;
  aa__http_state *st;
  struct MHD_Daemon *daemon;
  int listen_fd;
  int ep;
  int wake_fd;
  pthread_t thread;
  bool running;
  bool accept_paused; /* out of descriptors: listening socket not watched */
  _Atomic bool stop;
  entry *e;
  size_t cap;
  unsigned max_conn;
  unsigned per_ip;
  uint64_t deadline_ns;
  unsigned timeout_s;
  aa__http_head_limits lim;
  char *buf; /* lim.max_head + 1 bytes: peeks and drains */
};

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

static void entry_free(entry *e) {
  memset(e, 0, sizeof *e);
  e->state = E_FREE;
  e->fd = -1;
  e->mhd_fd = -1;
}

/* Reads and drops what the client has sent so far (never blocks). Returns
 * false at end of input or on an error. */
static bool drain(aa__intake *in, int fd) {
  for (;;) {
    ssize_t n = recv(fd, in->buf, in->lim.max_head, MSG_DONTWAIT);
    if (n > 0)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return true;
    if (n < 0 && errno == EINTR)
      continue;
    return false;
  }
}

/* Sends a JSON error document on fd and half-closes it (one small write to a
 * fresh socket: it fits in the send buffer, never blocks). */
static void send_error(aa__intake *in, int fd, int status, const char *msg,
                       const char *path) {
  aa__http_resp resp;
  char head[512];
  int n;

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
    struct iovec iov[2];
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    iov[0].iov_base = head;
    iov[0].iov_len = (size_t)n;
    iov[1].iov_base = resp.body;
    iov[1].iov_len = resp.len;
    mh.msg_iov = iov;
    mh.msg_iovlen = 2;
    (void)sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  aa__http_resp_free(&resp);
  (void)shutdown(fd, SHUT_WR);
}

/* Refuses an INTAKE entry: answer, then drain for a while (CLOSING). */
static void refuse_entry(aa__intake *in, entry *e, int status, const char *msg,
                         const char *path) {
  if (!drain(in, e->fd)) {
    /* the client is gone: nothing to answer */
    epoll_ctl(in->ep, EPOLL_CTL_DEL, e->fd, NULL);
    close(e->fd);
    entry_free(e);
    return;
  }
  send_error(in, e->fd, status, msg, path);
  e->state = E_CLOSING;
  e->since_ns = aa_now_ns();
}

static void close_entry(aa__intake *in, entry *e) {
  epoll_ctl(in->ep, EPOLL_CTL_DEL, e->fd, NULL);
  close(e->fd);
  entry_free(e);
}

/* Makes room: closes e, which has no request in progress. */
static void evict(aa__intake *in, entry *e) {
  if (e->state == E_INTAKE) {
    refuse_entry(in, e, 503,
                 "the server needed this connection for a new client and "
                 "this request had not arrived; retry",
                 "");
  } else if (!e->shut) {
    (void)shutdown(e->fd, SHUT_RDWR);
    e->shut = true;
  }
}

static bool counts(const entry *e) {
  return e->state != E_FREE && e->state != E_CLOSING && !e->shut;
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
  return e->state == E_MHD_IDLE;
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
   * the end of input) must wake us */
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = TAG_BASE + (uint64_t)(slot - in->e);
  if (epoll_ctl(in->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
    entry_free(slot);
    pthread_mutex_unlock(&in->mu);
    close(fd);
    return;
  }
  if (!room) /* answered and drained like any refusal (no reset) */
    refuse_entry(in, slot, 503,
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

/* Hands e (a complete, good head) to libmicrohttpd. Called with mu held;
 * returns with it held. */
static void hand_over(aa__intake *in, entry *e) {
  int fd = e->fd;
  int dup_fd;
  struct sockaddr_storage ss = e->addr;
  socklen_t alen = e->alen;

  epoll_ctl(in->ep, EPOLL_CTL_DEL, fd, NULL);
  dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) {
    e->state = E_INTAKE; /* answer and drain it as ours */
    refuse_entry(in, e, 503, "out of file descriptors; retry", "");
    return;
  }
  e->state = E_MHD_NEW;
  e->fd = dup_fd;
  e->mhd_fd = fd;
  e->since_ns = aa_now_ns();
  pthread_mutex_unlock(&in->mu);
  /* MHD takes fd (and closes it even when it refuses the connection) */
  if (MHD_add_connection(in->daemon, fd, (const struct sockaddr *)&ss, alen) !=
      MHD_YES) {
    pthread_mutex_lock(&in->mu);
    if (e->state == E_MHD_NEW && e->fd == dup_fd && !e->known) {
      close(dup_fd);
      entry_free(e);
    }
    return;
  }
  pthread_mutex_lock(&in->mu);
}

static void on_readable(aa__intake *in, entry *e, bool rdhup) {
  aa__http_head h;
  ssize_t n;

  if (e->state == E_CLOSING) {
    if (!drain(in, e->fd))
      close_entry(in, e);
    return;
  }
  if (e->state != E_INTAKE)
    return;
  n = recv(e->fd, in->buf, in->lim.max_head, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                 errno != EINTR)) {
    close_entry(in, e); /* the client went away before its request */
    return;
  }
  if (n < 0)
    return;
  if (aa__http_head_check(in->buf, (size_t)n, &in->lim, &h) == 0) {
    struct pollfd pf = {e->fd, POLLRDHUP, 0};
    /* rdhup is rechecked on the socket itself: the event may be a stale
     * one of an earlier connection that had this entry */
    if (rdhup && poll(&pf, 1, 0) == 1 &&
        (pf.revents & (POLLRDHUP | POLLHUP)) != 0) {
      /* the client shut its side: the head can never be completed. It
       * may still read, so it is answered (not left until the deadline). */
      (void)drain(in, e->fd);
      send_error(in, e->fd, 400,
                 "the client closed its side before the request head was "
                 "complete",
                 "");
      close_entry(in, e);
    }
    return; /* not complete yet */
  }
  if (h.status != 0) {
    refuse_entry(in, e, h.status, h.why, h.path);
    return;
  }
  hand_over(in, e);
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
        refuse_entry(in, e, 408, msg, "");
      }
      break;
    case E_CLOSING:
      if (age > CLOSING_NS)
        close_entry(in, e);
      break;
    case E_MHD_NEW:
      if (!e->known && age > CLOSING_NS) {
        /* libmicrohttpd never reported it (it dropped it, e.g. out of
         * memory): end it rather than keep the client waiting */
        (void)shutdown(e->fd, SHUT_RDWR);
        close(e->fd);
        entry_free(e);
        break;
      }
      /* fall through */
    case E_MHD_BODY:
    case E_MHD_IDLE:
      if (!e->shut && age > in->deadline_ns) {
        (void)shutdown(e->fd, SHUT_RDWR);
        e->shut = true;
      }
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
    int n = epoll_wait(in->ep, evs, 64, 100);
    for (int k = 0; k < n; k++) {
      uint64_t tag = evs[k].data.u64;
      if (tag == TAG_LISTEN) {
        accept_all(in);
      } else if (tag == TAG_WAKE) {
        uint64_t v;
        (void)!read(in->wake_fd, &v, sizeof v);
      } else if (tag >= TAG_BASE && tag - TAG_BASE < in->cap) {
        pthread_mutex_lock(&in->mu);
        on_readable(in, &in->e[tag - TAG_BASE],
                    (evs[k].events & (EPOLLRDHUP | EPOLLHUP)) != 0);
        pthread_mutex_unlock(&in->mu);
      }
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
  /* our connections plus those shut down but not yet closed */
  in->cap = (size_t)in->max_conn * 2 + 16;
  in->e = calloc(in->cap, sizeof *in->e);
  in->buf = malloc(in->lim.max_head + 1);
  if (in->e == NULL || in->buf == NULL)
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
  pthread_mutex_lock(&in->mu);
  for (size_t i = 0; i < in->cap; i++) {
    entry *e = &in->e[i];
    if (e->state == E_INTAKE || e->state == E_CLOSING)
      close_entry(in, e);
  }
  pthread_mutex_unlock(&in->mu);
}

void aa__intake_free(aa__intake *in) {
  if (in == NULL)
    return;
  aa__intake_stop(in);
  if (in->e != NULL) {
    for (size_t i = 0; i < in->cap; i++)
      if (in->e[i].state != E_FREE && in->e[i].fd >= 0)
        close(in->e[i].fd);
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
    if (e->state == E_MHD_NEW && !e->known && e->mhd_fd == ci->connect_fd) {
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
  if (e->state >= E_MHD_NEW) {
    close(e->fd);
    entry_free(e);
  }
  pthread_mutex_unlock(&in->mu);
  *socket_context = NULL;
}

static void set_state(aa__intake *in, struct MHD_Connection *c, int state) {
  entry *e = entry_of(c);
  if (e == NULL)
    return;
  pthread_mutex_lock(&in->mu);
  if (e->state >= E_MHD_NEW) {
    e->state = state;
    e->since_ns = aa_now_ns();
  }
  pthread_mutex_unlock(&in->mu);
}

void aa__intake_request_begun(aa__intake *in, struct MHD_Connection *c) {
  set_state(in, c, E_MHD_BODY);
}

void aa__intake_request_done(aa__intake *in, struct MHD_Connection *c) {
  set_state(in, c, E_MHD_IDLE);
}
