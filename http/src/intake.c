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
 * The table's files: this one has the intake thread (the first head of
 * each connection, the deadlines) and the table's life cycle;
 * intake_room.c accepting and room for new clients (the limits);
 * intake_close.c refusals and closing; intake_mhd.c libmicrohttpd's
 * callbacks; relay.c the relay.
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
 * Room for new clients (the oldest connection with no request in progress
 * is closed when a newcomer needs its place): intake_room.c.
 *
 * One thread, no lock: libmicrohttpd runs without a thread of its own
 * (external mode, its epoll set watched by the intake's), so MHD_run, its
 * callbacks (intake_mhd.c, request.c) and the router all run here, between
 * the intake's own events. Measured (BENCHMARKS.md, "One HTTP path"), the
 * hop between two threads was not what the relay costs: the bytes are.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "intake_internal.h"

static void on_readable(aa__intake *in, entry *e, bool rdhup) {
  aa__http_head h;
  ssize_t n;

  if (e->state == E_CLOSING) {
    bool open = aa__intake_drain(in, e->fd);
    if (aa__intake_flush_closing(e) < 0 || (!open && e->out == NULL))
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
  now = aa_now_ns(); /* one thread: no since_ns is later than now */
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
        aa__intake_entry_free(e);
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
}

static void *intake_main(void *arg) {
  aa__intake *in = arg;
  struct epoll_event evs[64];
  uint64_t last_sweep = 0;

  while (!in->stop) {
    bool mhd_due = false;
    MHD_UNSIGNED_LONG_LONG mt = 100;
    int wait_ms = 100;
    int n;
    /* libmicrohttpd's own deadlines, and work it left for the next run */
    if (MHD_get_timeout(in->daemon, &mt) == MHD_YES && mt < 100)
      wait_ms = (int)mt;
    n = epoll_wait(in->ep, evs, 64, in->again ? 0 : wait_ms);
    for (int k = 0; k < n; k++) {
      uint64_t tag = evs[k].data.u64;
      if (tag == TAG_LISTEN) {
        aa__intake_accept_all(in);
      } else if (tag == TAG_MHD) {
        mhd_due = true;
      } else if (tag == TAG_WAKE) {
        uint64_t v;
        (void)!read(in->wake_fd, &v, sizeof v); /* aa__intake_stop */
      } else if (tag >= TAG_BASE && (tag - TAG_BASE) / 2 < in->cap) {
        entry *e = &in->e[(tag - TAG_BASE) / 2];
        bool client_side = ((tag - TAG_BASE) & 1) == 0;
        uint32_t ev = evs[k].events;
        bool hup = (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0;
        bool rd = hup || (ev & EPOLLIN) != 0;
        bool wr = (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR)) != 0;
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
      }
    }
    /* libmicrohttpd reads what the relay passed it, answers, and writes the
     * answers to its ends of the pairs (their events come next turn); its
     * callbacks may mark entries (e->again) */
    if (mhd_due || n == 0)
      MHD_run(in->daemon);
    if (in->again) {
      in->again = false;
      for (size_t i = 0; i < in->cap; i++) {
        entry *e = &in->e[i];
        if (!e->again)
          continue;
        e->again = false;
        if (e->state >= E_MHD_NEW)
          aa__relay_pump(in, e);
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
    aa__intake_entry_free(&in->e[i]);
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
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
  struct epoll_event ev;
  in->daemon = d;
  if (di == NULL)
    return AA_EIO;
  /* level-triggered: readable while libmicrohttpd has events to handle */
  memset(&ev, 0, sizeof ev);
  ev.events = EPOLLIN;
  ev.data.u64 = TAG_MHD;
  if (epoll_ctl(in->ep, EPOLL_CTL_ADD, di->epoll_fd, &ev) != 0)
    return AA_EIO;
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
  for (size_t i = 0; i < in->cap; i++) {
    entry *e = &in->e[i];
    if (e->state != E_FREE && e->state != E_DETACHED)
      aa__intake_close_entry(in, e);
  }
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
      aa__intake_entry_free(e);
    }
  }
  if (in->ep >= 0)
    close(in->ep);
  if (in->wake_fd >= 0)
    close(in->wake_fd);
  if (in->listen_fd >= 0)
    close(in->listen_fd);
  free(in->e);
  free(in->buf);
  free(in->relay);
  free(in);
}
