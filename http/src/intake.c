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

#include "intake.h"

enum { E_FREE,
       E_INTAKE,
       E_CLOSING,
       E_DETACHED,
       E_MHD_NEW,
       E_MHD_BODY,
       E_MHD_IDLE };

/* What the relay expects next from the client (MHD_* states). */
enum { M_HEAD,       /* a request head: checked whole before a byte goes */
       M_PASS,       /* pass_left checked bytes, then mode `next` */
       M_CHUNK_SIZE, /* a chunk-size line of a chunked body */
       M_CHUNK_END,  /* the CRLF after a chunk's data */
       M_CHUNK_LAST, /* the CRLF after the last chunk (no trailer fields) */
       M_DONE,       /* nothing more: a chunked request was the last */
       M_STOP        /* nothing more: the client ended, or a refusal */
};

#define CHUNK_LINE_MAX 256 /* a chunk-size line with its extensions */

#define CLOSING_NS 1000000000ull /* how long a refused connection drains */
#define DRAIN_MAX (256 * 1024)   /* bytes dropped per event while closing */
#define RELAY_BYTES 65536        /* one relay step, each way */
#define PUMP_ROUNDS 32           /* relay steps per connection per turn */
#define TAG_LISTEN 1ull
#define TAG_WAKE 2ull
#define TAG_BASE 16ull /* entry i: TAG_BASE + 2 i (client), + 1 (pair) */

typedef struct entry {
  int state;
  int fd;        /* the client's socket (ours), -1 once closed */
  int peer;      /* MHD_*: our end of the pair, -1 once closed */
  int mhd_fd;    /* libmicrohttpd's end (for the lookup in conn_started) */
  bool attached; /* libmicrohttpd holds mhd_fd (until it reports the close) */
  bool known;    /* libmicrohttpd told us it took it */
  bool again;    /* the relay stopped after PUMP_ROUNDS with work left */
  uint64_t since_ns;
  struct sockaddr_storage addr;
  socklen_t alen;
  char ip[64];
  /* the relay (MHD_* states) */
  int mode;               /* M_* */
  bool c_rd, c_wr;        /* the client's socket: may have bytes / room */
  bool p_rd, p_wr;        /* our end of the pair: may have bytes / room */
  bool c_hup, p_hup;      /* its end of input was reported: no event follows */
  bool peer_eof;          /* libmicrohttpd closed its end: no more answers */
  uint64_t pass_left;     /* M_PASS */
  int next;               /* M_PASS: the mode after it */
  unsigned reqs_fwd;      /* heads relayed */
  unsigned reqs_begun;    /* heads libmicrohttpd handed to the handler */
  unsigned reqs_done;     /* requests libmicrohttpd finished answering */
  unsigned answer_after;  /* M_STOP: answers owed before we end it */
  bool drained;           /* M_STOP: the pair was read after the last one */
  unsigned close_at;      /* the request (1-based) after which to close; 0: none */
  aa__http_head *refusal; /* a refused later head, answered last */
  char *out;              /* answer bytes the client has not taken yet */
  size_t out_len, out_off;
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
  bool again;         /* some entry has .again set */
  _Atomic bool stop;
  entry *e;
  size_t cap;
  unsigned max_conn;
  unsigned per_ip;
  uint64_t deadline_ns;
  unsigned timeout_s;
  aa__http_head_limits lim;
  char *buf;   /* lim.max_head + 1 bytes: peeks and drains */
  char *relay; /* RELAY_BYTES: one relay step */
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

static bool would_block(void) {
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
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

static uint64_t tag_of(const aa__intake *in, const entry *e, bool peer) {
  return TAG_BASE + 2 * (uint64_t)(e - in->e) + (peer ? 1 : 0);
}

/* Reads and drops what the client has sent so far, at most DRAIN_MAX bytes
 * a call so that a client that keeps sending cannot hold the thread (the
 * rest goes on its next event, or at the CLOSING deadline). Never blocks.
 * Returns false at end of input or on an error. */
static bool drain(aa__intake *in, int fd) {
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
static void close_peer(aa__intake *in, entry *e) {
  if (e->peer < 0)
    return;
  epoll_ctl(in->ep, EPOLL_CTL_DEL, e->peer, NULL);
  close(e->peer);
  e->peer = -1;
}

/* Done with the client: closes its socket and our end of the pair. The slot
 * is free at once unless libmicrohttpd still holds its end (DETACHED until
 * it reports the close). */
static void close_entry(aa__intake *in, entry *e) {
  close_peer(in, e);
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
static void end_entry(aa__intake *in, entry *e) {
  if (e->fd >= 0)
    (void)shutdown(e->fd, SHUT_RDWR);
  close_entry(in, e);
}

/* Ends e with a JSON error answer: its input is drained for up to
 * CLOSING_NS (so that the answer is not lost to a reset) while the answer
 * goes out as fast as the client takes it (CLOSING), then it is closed.
 * Nothing more is relayed. */
static void close_with_error(aa__intake *in, entry *e, int status,
                             const char *msg, const char *path) {
  bool open = drain(in, e->fd);
  close_peer(in, e);
  free(e->out);
  e->out = NULL;
  e->out_len = e->out_off = 0;
  if (!queue_error(in, e, status, msg, path)) {
    end_entry(in, e);
    return;
  }
  e->state = E_CLOSING;
  e->since_ns = aa_now_ns();
  if (flush_closing(e) < 0 || (!open && e->out == NULL))
    close_entry(in, e);
}

/* Refuses an entry that is ours (INTAKE). */
static void refuse_entry(aa__intake *in, entry *e, int status, const char *msg,
                         const char *path) {
  close_with_error(in, e, status, msg, path);
}

/* Makes room: closes e, which has no request in progress. */
static void evict(aa__intake *in, entry *e) {
  if (e->state == E_INTAKE)
    refuse_entry(in, e, 503,
                 "the server needed this connection for a new client and "
                 "this request had not arrived; retry",
                 "");
  else
    end_entry(in, e);
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
static bool client_shut(int fd) {
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

/* ------------------------------------------------------------ relay */

/* A good head: what of the client's stream libmicrohttpd may have now. */
static void start_request(entry *e, const aa__http_head *h) {
  e->reqs_fwd++;
  e->mode = M_PASS;
  if (h->chunked) {
    /* its chunks are checked one by one too; it is the last request the
     * connection carries all the same (nothing after a chunked body is
     * relied on) */
    e->pass_left = (uint64_t)h->len;
    e->next = M_CHUNK_SIZE;
    if (e->close_at == 0)
      e->close_at = e->reqs_fwd;
  } else {
    e->pass_left = (uint64_t)h->len + h->content_length;
    e->next = M_HEAD;
  }
}

/* Nothing more goes to libmicrohttpd: it answers what it has, then sees the
 * end of its input and closes its end. A refused head (h) is answered then. */
static void stop_input(entry *e, const aa__http_head *h, bool mid_request) {
  if (h != NULL && e->refusal == NULL) {
    e->refusal = malloc(sizeof *e->refusal);
    if (e->refusal != NULL) /* out of memory: closed without the answer */
      *e->refusal = *h;
  }
  /* the requests relayed whole are answered; one cut short never is (its
   * end is not waited for: libmicrohttpd may not notice the end of input
   * that arrived with the last bytes it read) */
  e->answer_after = e->reqs_fwd - (mid_request && e->reqs_fwd > 0 ? 1 : 0);
  e->mode = M_STOP;
  if (e->peer >= 0)
    (void)shutdown(e->peer, SHUT_WR);
}

/* Sends n checked bytes of the client's (peeked into buf: queued bytes of
 * the asked) to libmicrohttpd and consumes what went from the client's
 * socket. 1: progress, 0: the pair is full, -1: the client's socket
 * failed. */
static int pass(entry *e, char *buf, size_t n, size_t queued, size_t asked) {
  ssize_t w = send(e->peer, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0) {
    if (would_block()) {
      e->p_wr = false; /* its EPOLLOUT resumes us */
      return 0;
    }
    /* libmicrohttpd closed its end: what it wrote is still to relay */
    stop_input(e, NULL, e->mode != M_HEAD);
    return 1;
  }
  if ((size_t)w < n)
    e->p_wr = false;
  /* consume what went (peeked bytes are queued: this cannot block) */
  if (recv(e->fd, buf, (size_t)w, MSG_DONTWAIT | MSG_TRUNC) != w)
    return -1;
  /* everything queued went: only new bytes (an event) make more */
  if ((size_t)w == queued && queued < asked && !e->c_hup)
    e->c_rd = false;
  if (e->mode == M_PASS) {
    e->pass_left -= (uint64_t)w;
    if (e->pass_left == 0) {
      e->mode = e->next;
      if (e->mode == M_DONE) /* the last request is whole: nothing more */
        stop_input(e, NULL, false);
    }
  }
  return 1;
}

/* A line of a chunked body's framing in buf (n bytes peeked): 1 with the
 * bytes to pass and the mode after them set, 0 when incomplete, -1 with the
 * refusal filled into h. */
static int chunk_step(aa__intake *in, entry *e, const char *buf, size_t n,
                      aa__http_head *h) {
  uint64_t size;
  size_t len;
  int r;

  memset(h, 0, sizeof *h);
  if (e->mode != M_CHUNK_SIZE) {
    if (n < 2)
      return 0;
    if (buf[0] != '\r' || buf[1] != '\n') {
      h->status = 400;
      snprintf(h->why, sizeof h->why, "%s",
               e->mode == M_CHUNK_END
                   ? "a chunk's data is not followed by CRLF"
                   : "trailer fields after a chunked body are not accepted");
      return -1;
    }
    e->pass_left = 2;
    e->next = e->mode == M_CHUNK_END ? M_CHUNK_SIZE : M_DONE;
    e->mode = M_PASS;
    return 1;
  }
  r = aa__http_chunk_line(buf, n, 4 * (uint64_t)in->st->cfg.max_body + 65536,
                          &size, &len, h->why, sizeof h->why);
  if (r == 0)
    return 0;
  if (r != 1) {
    h->status = r;
    return -1;
  }
  e->pass_left = (uint64_t)len + size;
  e->next = size > 0 ? M_CHUNK_END : M_CHUNK_LAST;
  e->mode = M_PASS;
  return 1;
}

/* One step of the client's bytes to libmicrohttpd. 1: progress, 0: waiting
 * (for the client or for room in the pair), -1: the client's socket failed. */
static int forward(aa__intake *in, entry *e) {
  bool chunk_line = e->mode == M_CHUNK_SIZE || e->mode == M_CHUNK_END ||
                    e->mode == M_CHUNK_LAST;
  char *buf = e->mode == M_PASS ? in->relay : in->buf;
  size_t want;
  ssize_t n;
  aa__http_head h;
  int r;

  if (!e->c_rd || !e->p_wr)
    return 0;
  if (e->mode == M_HEAD)
    want = in->lim.max_head;
  else if (chunk_line)
    want = CHUNK_LINE_MAX;
  else if (e->mode == M_PASS)
    want = e->pass_left < RELAY_BYTES ? (size_t)e->pass_left : RELAY_BYTES;
  else
    return 0;
  n = recv(e->fd, buf, want, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) {
    /* the client has sent all it will; inside a request, that one is
     * never answered */
    stop_input(e, NULL, e->mode != M_HEAD);
    return 1;
  }
  if (n < 0) {
    if (!would_block())
      return -1;
    e->c_rd = false;
    return 0;
  }
  if (e->mode == M_PASS)
    return pass(e, buf, (size_t)n, (size_t)n, want);

  if (e->mode == M_HEAD)
    r = aa__http_head_check(buf, (size_t)n, &in->lim, &h) == 0 ? 0
        : h.status != 0                                        ? -1
                                                               : 1;
  else
    r = chunk_step(in, e, buf, (size_t)n, &h);
  if (r == 0) {
    if ((size_t)n < want && !client_shut(e->fd)) {
      e->c_rd = e->c_hup; /* not complete yet: wait for more */
      return 0;
    }
    memset(&h, 0, sizeof h);
    h.status = 400;
    snprintf(h.why, sizeof h.why, "%s",
             (size_t)n == want ? "a chunk-size line over 256 bytes"
             : chunk_line
                 ? "the client closed its side inside a chunked body"
                 : "the client closed its side before the request head was "
                   "complete");
    r = -1;
  }
  if (r < 0) {
    /* refused: answered after the answers before it; a request cut short
     * (a chunked body) is never answered by libmicrohttpd */
    stop_input(e, &h, chunk_line);
    return 1;
  }
  if (chunk_line)
    return 1; /* M_PASS now: the next round passes the line */
  start_request(e, &h);
  /* what was peeked goes at once, up to the checked end */
  {
    size_t go = (size_t)n;
    if (e->pass_left < (uint64_t)go)
      go = (size_t)e->pass_left;
    return pass(e, buf, go, (size_t)n, want) < 0 ? -1 : 1;
  }
}

/* One step of libmicrohttpd's answers to the client. 1: progress, 0:
 * waiting, -1: the client's socket failed. */
static int backward(aa__intake *in, entry *e) {
  ssize_t n, w;

  if (e->out_off < e->out_len) {
    if (!e->c_wr)
      return 0;
    w = send(e->fd, e->out + e->out_off, e->out_len - e->out_off,
             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (!would_block())
        return -1;
      e->c_wr = false;
      return 0;
    }
    e->out_off += (size_t)w;
    if (e->out_off < e->out_len) {
      e->c_wr = false;
    } else {
      free(e->out);
      e->out = NULL;
      e->out_len = e->out_off = 0;
    }
    return 1;
  }
  if (e->peer < 0 || e->peer_eof || !e->p_rd)
    return 0;
  n = recv(e->peer, in->relay, RELAY_BYTES, MSG_DONTWAIT);
  if (n < 0 && would_block()) {
    e->p_rd = false;
    return 0;
  }
  if (n <= 0) {
    e->peer_eof = true; /* libmicrohttpd closed its end */
    return 1;
  }
  if (n < RELAY_BYTES && !e->p_hup)
    e->p_rd = false; /* drained: libmicrohttpd's next write is an event */
  w = e->c_wr ? send(e->fd, in->relay, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT)
              : 0;
  if (w < 0 && !would_block())
    return -1;
  if (w < 0)
    w = 0;
  if (w < n) {
    /* the client reads slowly: keep the rest, read no more answers until
     * it has taken it (its EPOLLOUT resumes us) */
    e->c_wr = false;
    e->out = malloc((size_t)(n - w));
    if (e->out == NULL)
      return -1;
    memcpy(e->out, in->relay + w, (size_t)(n - w));
    e->out_len = (size_t)(n - w);
    e->out_off = 0;
  }
  return 1;
}

/* libmicrohttpd closed its end and every answer went out: answer a refused
 * head, end our side, and drain the client's input for a while. */
static void finish(aa__intake *in, entry *e) {
  bool open;
  if (e->refusal != NULL) {
    aa__http_head h = *e->refusal;
    free(e->refusal);
    e->refusal = NULL;
    close_with_error(in, e, h.status, h.why, h.path);
    return;
  }
  open = drain(in, e->fd); /* what the client sent after the end */
  close_peer(in, e);
  (void)shutdown(e->fd, SHUT_WR);
  if (!open) {
    close_entry(in, e); /* its input has ended: nothing to drain */
    return;
  }
  e->state = E_CLOSING;
  e->since_ns = aa_now_ns();
}

/* Moves bytes both ways until both are waiting. Called with mu held for an
 * entry in an MHD_* state. The socket calls follow what epoll reported
 * (c_rd ... p_wr: set by an event, cleared when a call finds nothing or no
 * room), so a request costs no call that is bound to find nothing. */
static void pump(aa__intake *in, entry *e) {
  for (int round = 0; round < PUMP_ROUNDS; round++) {
    int b = backward(in, e);
    int f = 0;
    if (b >= 0 && e->mode != M_STOP && e->peer >= 0 && !e->peer_eof)
      f = forward(in, e);
    if (b < 0 || f < 0) {
      end_entry(in, e); /* the client is gone */
      return;
    }
    if (e->peer_eof && e->out_len == 0) {
      finish(in, e);
      return;
    }
    if (e->mode == M_STOP && e->reqs_done >= e->answer_after &&
        e->out_len == 0) {
      /* every answer owed was written before its count (under mu): one
       * more read of the pair to its end, then it is over */
      if (!e->drained) {
        e->drained = true;
        e->p_rd = true;
        continue;
      }
      if (!e->p_rd) {
        finish(in, e);
        return;
      }
    }
    if (b == 0 && f == 0)
      return;
  }
  e->again = true; /* fairness: the rest on the next turn */
  in->again = true;
}

/* Hands e (a complete, good first head h) to libmicrohttpd through a socket
 * pair and starts relaying. Called with mu held; returns with it held. */
static void hand_over(aa__intake *in, entry *e, const aa__http_head *h) {
  int sv[2];
  int one = 1;
  struct epoll_event ev;
  struct sockaddr_storage ss = e->addr;
  socklen_t alen = e->alen;

  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) !=
      0) {
    refuse_entry(in, e, 503, "out of file descriptors; retry", "");
    return;
  }
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = tag_of(in, e, true);
  if (epoll_ctl(in->ep, EPOLL_CTL_ADD, sv[0], &ev) != 0) {
    close(sv[0]);
    close(sv[1]);
    refuse_entry(in, e, 503, "out of memory; retry", "");
    return;
  }
  /* answers are relayed in the pieces libmicrohttpd wrote them in */
  (void)setsockopt(e->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  e->peer = sv[0];
  e->mhd_fd = sv[1];
  e->attached = true;
  e->c_rd = e->c_wr = e->p_wr = true;
  e->c_hup = client_shut(e->fd); /* its event may have come already */
  e->state = E_MHD_NEW;
  e->since_ns = aa_now_ns();
  start_request(e, h);
  pthread_mutex_unlock(&in->mu);
  /* MHD takes sv[1] (and closes it even when it refuses the connection) */
  if (MHD_add_connection(in->daemon, sv[1], (const struct sockaddr *)&ss,
                         alen) != MHD_YES) {
    pthread_mutex_lock(&in->mu);
    if (e->state == E_MHD_NEW && e->peer == sv[0] && !e->known) {
      close_peer(in, e);
      e->attached = false;
      e->state = E_INTAKE;
      refuse_entry(in, e, 503, "the server cannot take more connections now; retry",
                   "");
    }
    return;
  }
  pthread_mutex_lock(&in->mu);
  if (e->state == E_MHD_NEW && e->peer == sv[0])
    pump(in, e);
}

static void on_readable(aa__intake *in, entry *e, bool rdhup) {
  aa__http_head h;
  ssize_t n;

  if (e->state == E_CLOSING) {
    bool open = drain(in, e->fd);
    if (flush_closing(e) < 0 || (!open && e->out == NULL))
      close_entry(in, e);
    return;
  }
  if (e->state != E_INTAKE)
    return;
  n = recv(e->fd, in->buf, in->lim.max_head, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && !would_block())) {
    close_entry(in, e); /* the client went away before its request */
    return;
  }
  if (n < 0)
    return;
  if (aa__http_head_check(in->buf, (size_t)n, &in->lim, &h) == 0) {
    if (rdhup && client_shut(e->fd)) {
      /* the client shut its side: the head can never be completed. It
       * may still read, so it is answered (not left until the deadline). */
      close_with_error(in, e, 400,
                       "the client closed its side before the request head "
                       "was complete",
                       "");
    }
    return; /* not complete yet */
  }
  if (h.status != 0) {
    refuse_entry(in, e, h.status, h.why, h.path);
    return;
  }
  hand_over(in, e, &h);
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
    case E_DETACHED:
      /* libmicrohttpd never reported taking it (it dropped it, e.g. out of
       * memory): no callback can come for it */
      if (!e->known && age > CLOSING_NS)
        entry_free(e);
      break;
    case E_MHD_NEW:
      if (!e->known && age > CLOSING_NS) {
        end_entry(in, e); /* never taken: end it rather than wait */
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
        close_with_error(in, e, 408, msg, "");
        break;
      }
      end_entry(in, e);
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
          pump(in, e);
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
          pump(in, e);
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
      close_entry(in, e);
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
