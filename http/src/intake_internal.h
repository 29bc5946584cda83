/*
 * intake_internal.h — what the intake's files share: intake.c (the thread,
 * the first head, deadlines, life cycle), intake_room.c (accepting, limits,
 * room for new clients), intake_close.c (refusals and closing),
 * intake_mhd.c (libmicrohttpd's callbacks) and relay.c (the bytes of a
 * connection between its client and libmicrohttpd): the table of
 * connections and its entries, and the functions each file lends the
 * others. http/ only.
 */
#ifndef AA_HTTP_INTAKE_INTERNAL_H
#define AA_HTTP_INTAKE_INTERNAL_H

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

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
#define TAG_WAKE 2ull  /* aa__intake_stop */
#define TAG_MHD 3ull   /* libmicrohttpd's epoll set has events */
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
  int mode;              /* M_* */
  bool c_rd, c_wr;       /* the client's socket: may have bytes / room */
  bool p_rd, p_wr;       /* our end of the pair: may have bytes / room */
  bool c_hup, p_hup;     /* its end of input was reported: no event follows */
  bool peer_eof;         /* libmicrohttpd closed its end: no more answers */
  uint64_t pass_left;    /* M_PASS */
  int next;              /* M_PASS: the mode after it */
  unsigned reqs_fwd;     /* heads relayed */
  unsigned reqs_begun;   /* heads libmicrohttpd handed to the handler */
  unsigned reqs_done;    /* requests libmicrohttpd finished answering */
  unsigned answer_after; /* M_STOP: answers owed before we end it */
  bool drained;          /* M_STOP: the pair was read after the last one */
  unsigned close_at;     /* the request (1-based) after which to close; 0: none */
  /* the path of the request in progress (its body's refusals name it) */
  char path[AA__HTTP_PATH_CAP];
  aa__http_head *refusal; /* a refused later head, answered last */
  char *out;              /* answer bytes the client has not taken yet */
  size_t out_len, out_off;
} entry;

struct aa__intake {
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

static inline bool would_block(void) {
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

static inline uint64_t tag_of(const aa__intake *in, const entry *e, bool peer) {
  return TAG_BASE + 2 * (uint64_t)(e - in->e) + (peer ? 1 : 0);
}

/* ------------------------------------------------------------ shared */

/* intake_room.c: accepts every waiting client, making room or refusing
 * (intake thread). */
void aa__intake_accept_all(aa__intake *in);

/* intake_close.c: refusals, closing, freeing slots; whether the client has
 * shut its sending side. */
bool aa__intake_client_shut(int fd);
void aa__intake_entry_free(entry *e);
bool aa__intake_drain(aa__intake *in, int fd);
int aa__intake_flush_closing(entry *e);
void aa__intake_close_peer(aa__intake *in, entry *e);
void aa__intake_close_entry(aa__intake *in, entry *e);
void aa__intake_end_entry(aa__intake *in, entry *e);
void aa__intake_close_with_error(aa__intake *in, entry *e, int status,
                                 const char *msg, const char *path);
void aa__intake_refuse(aa__intake *in, entry *e, int status, const char *msg,
                       const char *path);

/* relay.c: hands a connection whose first head h passed to libmicrohttpd
 * through a socket pair, and moves its bytes both ways (intake thread). */
void aa__relay_hand_over(aa__intake *in, entry *e, const aa__http_head *h);
void aa__relay_pump(aa__intake *in, entry *e);

#endif /* AA_HTTP_INTAKE_INTERNAL_H */
