/*
 * relay.c — a connection's bytes between its client and libmicrohttpd,
 * once its first head has passed (intake.c has the states and the
 * deadlines, intake_room.c the limits). The client's bytes go to
 * libmicrohttpd through a socket pair one checked piece at a time: a head
 * once whole and good, then the body its Content-Length announces, or a
 * chunked body chunk by chunk; its answers come back the same way. A refused request is answered after the
 * answers owed before it. Entry points: aa__relay_hand_over, aa__relay_pump
 * (intake thread).
 *
 * The relay's modes (M_*, intake_internal.h) move only along these edges,
 * checked by set_mode (aa__assert_internal):
 *   M_HEAD        -> M_PASS (a good head), M_STOP
 *   M_PASS        -> its `next` once pass_left bytes went (M_HEAD,
 *                    M_CHUNK_SIZE, M_CHUNK_END, M_CHUNK_LAST, M_DONE), M_STOP
 *   M_CHUNK_*     -> M_PASS (the line, then the data), M_STOP
 *   M_DONE        -> M_STOP
 *   M_STOP        -> nothing: input has ended for good
 * and M_PASS never passes more than pass_left bytes.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "adaptalloc/internal/debug.h" /* util/: tiered assertions */
#include "intake_internal.h"

/* Whether the relay may go from mode `from` to `to` (the edges above);
 * used only by assertions, which AA_DEBUG < 2 compiles out (hence marked
 * unused: clang warns of an unused static inline in a .c file). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((unused))
#endif
static inline bool
mode_edge(int from, int to) {
  switch (from) {
  case M_HEAD:
    return to == M_PASS || to == M_STOP;
  case M_PASS:
    return to == M_HEAD || to == M_CHUNK_SIZE || to == M_CHUNK_END || to == M_CHUNK_LAST ||
           to == M_DONE || to == M_STOP;
  case M_CHUNK_SIZE:
  case M_CHUNK_END:
  case M_CHUNK_LAST:
    return to == M_PASS || to == M_STOP;
  case M_DONE:
    return to == M_STOP;
  default:
    return false;
  }
}

static void set_mode(entry *e, int to) {
  aa__assert_internal(mode_edge(e->mode, to));
  /* M_PASS has bytes to pass, and a mode to go to after them */
  aa__assert_internal(to != M_PASS || (e->pass_left > 0 && e->next != M_PASS &&
                                       e->next != M_STOP && mode_edge(M_PASS, e->next)));
  e->mode = to;
}

/* A good head: what of the client's stream libmicrohttpd may have now. */
static void start_request(entry *e, const aa__http_head *h) {
  e->reqs_fwd++;
  /* the path its body's refusals name (a chunk framing error's document) */
  memcpy(e->path, h->path, sizeof e->path);
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
  set_mode(e, M_PASS);
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
  set_mode(e, M_STOP);
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
    aa__assert_internal((uint64_t)w <= e->pass_left);
    e->pass_left -= (uint64_t)w;
    if (e->pass_left == 0) {
      set_mode(e, e->next);
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
    set_mode(e, M_PASS);
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
  set_mode(e, M_PASS);
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
    if ((size_t)n < want && !aa__intake_client_shut(e->fd)) {
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
  if (r < 0 && e->mode != M_HEAD)
    memcpy(h.path, e->path, sizeof h.path); /* inside its body: its path */
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
    aa__assert_internal(e->out_off <= e->out_len);
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
    aa__intake_close_with_error(in, e, h.status, h.why, h.path);
    return;
  }
  open = aa__intake_drain(in, e->fd); /* what the client sent after the end */
  aa__intake_close_peer(in, e);
  (void)shutdown(e->fd, SHUT_WR);
  if (!open) {
    aa__intake_close_entry(in, e); /* its input has ended: nothing to drain */
    return;
  }
  e->state = E_CLOSING;
  e->since_ns = aa_now_ns();
}

/* Moves bytes both ways until both are waiting. Called for an
 * entry in an MHD_* state. The socket calls follow what epoll reported
 * (c_rd ... p_wr: set by an event, cleared when a call finds nothing or no
 * room), so a request costs no call that is bound to find nothing. */
void aa__relay_pump(aa__intake *in, entry *e) {
  for (int round = 0; round < PUMP_ROUNDS; round++) {
    int b = backward(in, e);
    int f = 0;
    if (b >= 0 && e->mode != M_STOP && e->peer >= 0 && !e->peer_eof)
      f = forward(in, e);
    if (b < 0 || f < 0) {
      aa__intake_end_entry(in, e); /* the client is gone */
      return;
    }
    if (e->peer_eof && e->out_len == 0) {
      finish(in, e);
      return;
    }
    if (e->mode == M_STOP && e->reqs_done >= e->answer_after &&
        e->out_len == 0) {
      /* every answer owed was written before its count: one
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
 * pair and starts relaying (intake thread). */
void aa__relay_hand_over(aa__intake *in, entry *e, const aa__http_head *h) {
  int sv[2];
  int one = 1;
  struct epoll_event ev;
  struct sockaddr_storage ss = e->addr;
  socklen_t alen = e->alen;

  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) !=
      0) {
    aa__intake_refuse(in, e, 503, "out of file descriptors; retry", "");
    return;
  }
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = tag_of(in, e, true);
  if (epoll_ctl(in->ep, EPOLL_CTL_ADD, sv[0], &ev) != 0) {
    close(sv[0]);
    close(sv[1]);
    aa__intake_refuse(in, e, 503, "out of memory; retry", "");
    return;
  }
  /* answers are relayed in the pieces libmicrohttpd wrote them in */
  (void)setsockopt(e->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  e->peer = sv[0];
  e->mhd_fd = sv[1];
  e->attached = true;
  e->c_rd = e->c_wr = e->p_wr = true;
  e->c_hup = aa__intake_client_shut(e->fd); /* its event may have come already */
  e->state = E_MHD_NEW;
  e->since_ns = aa_now_ns();
  start_request(e, h);
  /* MHD takes sv[1] (and closes it even when it refuses the connection) */
  if (MHD_add_connection(in->daemon, sv[1], (const struct sockaddr *)&ss,
                         alen) != MHD_YES) {
    if (e->state == E_MHD_NEW && e->peer == sv[0] && !e->known) {
      aa__intake_close_peer(in, e);
      e->attached = false;
      e->state = E_INTAKE;
      aa__intake_refuse(in, e, 503, "the server cannot take more connections now; retry",
                        "");
    }
    return;
  }
  if (e->state == E_MHD_NEW && e->peer == sv[0])
    aa__relay_pump(in, e);
}
