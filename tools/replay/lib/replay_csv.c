/*
 * replay_csv.c — the RMM logging_resource_adaptor CSV reader (and writer).
 *
 * Entry points: aa_replay_csv_parse (a buffer), aa_replay_csv_parse_file (a
 * mapped file or stdin), aa_replay_csv_format (one line out).
 *
 * Hand-rolled for speed: memchr finds each line end, fields are split and
 * numbers converted in one pass without sscanf/strtoull, events are handed
 * to the sink in batches of BATCH. What is accepted is documented in
 * docs/replay.md "CSV" and in replay.h.
 *
 * Files: this one (the reader with its fast path, and the writer),
 * replay_csv_line.c (the general path: headers, quoted or unusual fields,
 * the error messages); replay_csv.h.
 *
 * One concern, kept whole though it runs past 600 lines: the reader's fast
 * path (FX, inlined into the line loop), its buffering (csv_reader) and the
 * buffer and stream drivers over it; the writer is the dozen lines of its
 * inverse.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "replay_csv.h"

#define BATCH 1024
#define PROGRESS_EVERY 64 /* batches between progress calls */

/* ---------------------------------------------------------------- fast path */

/* The fast path parses a plain line (no quotes, no spaces, the usual number
 * forms) in one pass without looking for the line end first. Each helper
 * takes the cursor and returns the cursor after what it read, or NULL when
 * the text is not in its plain form; anything not plain goes through
 * parse_line, which accepts every documented form and writes the error
 * messages. */

#if defined(__GNUC__) || defined(__clang__)
#define FX static inline __attribute__((always_inline))
#else
#define FX static inline
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* Eight ASCII digits at p (first digit in the lowest byte) as a number, or
 * false when any of the eight is not a digit. Pairs, then quads, then the
 * whole are combined with multiplies inside the 64-bit word. */
FX bool swar8(const char *p, uint64_t *out) {
  uint64_t v;

  memcpy(&v, p, 8);
  if ((v & 0xf0f0f0f0f0f0f0f0ull) != 0x3030303030303030ull ||
      ((v + 0x0606060606060606ull) & 0xf0f0f0f0f0f0f0f0ull) !=
          0x3030303030303030ull)
    return false;
  v -= 0x3030303030303030ull;
  v = v * 10 + (v >> 8); /* 2-digit values in bytes 0, 2, 4, 6 */
  v = (v & 0x000000ff000000ffull) * (100 + (1000000ull << 32)) +
      ((v >> 16) & 0x000000ff000000ffull) * (1 + (10000ull << 32));
  *out = v >> 32;
  return true;
}
#define AA__HAVE_SWAR8 1
#endif

/* 1..19 decimal digits. */
FX const char *fx_dec(const char *p, const char *e, uint64_t *out) {
  const char *s = p;
  uint64_t v = 0;

  while (p < e && (unsigned)(*p - '0') < 10u) {
    v = v * 10 + (uint64_t)(*p - '0');
    p++;
  }
  if (p == s || p - s > 19)
    return NULL; /* none, or it may not fit: the general path decides */
  *out = v;
  return p;
}

/* The same for runs that are often long (thread ids, fractions): eight
 * digits at a time first. *ndig gets the digit count. */
FX const char *fx_dec_long(const char *p, const char *e, uint64_t *out,
                           int *ndig) {
  const char *s = p;
  uint64_t v = 0;
#ifdef AA__HAVE_SWAR8
  uint64_t c;

  if (e - p >= 8 && swar8(p, &c)) {
    v = c;
    p += 8;
    if (e - p >= 8 && swar8(p, &c)) {
      v = v * 100000000ull + c;
      p += 8;
    }
  }
#endif
  while (p < e && (unsigned)(*p - '0') < 10u) {
    v = v * 10 + (uint64_t)(*p - '0');
    p++;
  }
  if (p == s || p - s > 19)
    return NULL;
  *out = v;
  *ndig = (int)(p - s);
  return p;
}

/* Hex digit value + 1, 0 for anything else. */
/* clang-format off */
static const unsigned char hexv1[256] = {
    ['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,
    ['6'] = 7,  ['7'] = 8,  ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12,
    ['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16, ['A'] = 11, ['B'] = 12,
    ['C'] = 13, ['D'] = 14, ['E'] = 15, ['F'] = 16};
/* clang-format on */

/* An id or size: 0x-hex (1..16 digits) or decimal. */
FX const char *fx_id(const char *p, const char *e, uint64_t *out) {
  if (e - p > 2 && p[0] == '0' && p[1] == 'x') {
    const char *s = p + 2;
    uint64_t v = 0;
    unsigned d;
    p = s;
    while (p < e) {
      d = hexv1[(unsigned char)*p];
      if (d == 0)
        break;
      v = (v << 4) | (d - 1);
      p++;
    }
    if (p == s || p - s > 16)
      return NULL;
    *out = v;
    return p;
  }
  return fx_dec(p, e, out);
}

/* "S", "S.F", "H:M:S" or "H:M:S.F" with up to 9 fraction digits. */
FX const char *fx_time(const char *p, const char *e, uint64_t *out) {
  static const uint64_t scale[10] = {1000000000ull, 100000000ull, 10000000ull,
                                     1000000ull, 100000ull, 10000ull,
                                     1000ull, 100ull, 10ull, 1ull};
  uint64_t a, m, sec, frac = 0;
  int n;

  p = fx_dec(p, e, &a);
  if (p == NULL)
    return NULL;
  if (p < e && *p == ':') {
    p = fx_dec(p + 1, e, &m);
    if (p == NULL || p >= e || *p != ':' || m > 59)
      return NULL;
    p = fx_dec(p + 1, e, &sec);
    if (p == NULL || sec > 60 || a > 1000000)
      return NULL;
    sec += a * 3600 + m * 60;
  } else {
    sec = a;
  }
  if (p < e && *p == '.') {
    p = fx_dec_long(p + 1, e, &frac, &n);
    if (p == NULL || n > 9)
      return NULL; /* beyond ns: the general path drops the extra digits */
    frac *= scale[n];
  }
  if (sec > (UINT64_MAX - frac) / 1000000000ull)
    return NULL;
  *out = sec * 1000000000ull + frac;
  return p;
}

FX const char *fx_action(const char *p, const char *e, char *op) {
  if (e - p >= 10 && memcmp(p, "deallocate", 10) == 0) {
    *op = 'f';
    return p + 10;
  }
  if (e - p >= 8 && memcmp(p, "allocate", 8) == 0) {
    if (e - p >= 16 && memcmp(p + 8, " failure", 8) == 0) {
      *op = 'x';
      return p + 16;
    }
    *op = 'a';
    return p + 8;
  }
  return NULL;
}

/* Past the separator c, or NULL. */
FX const char *fx_sep(const char *p, const char *e, char c) {
  if (p == NULL || p >= e || *p != c)
    return NULL;
  return p + 1;
}

/* At the end of a line: the start of the next one, or NULL. */
FX const char *fx_eol(const char *p, const char *e) {
  if (p == NULL)
    return NULL;
  if (p < e && *p == '\r')
    p++;
  if (p < e) {
    if (*p != '\n')
      return NULL;
    p++;
  }
  return p;
}

/* The usual Thread,Time,Action,Pointer,Size,Stream order, straight-line. */
FX const char *fast_line_default(const char *p, const char *e,
                                 aa_replay_event *ev) {
  int nd;

  p = fx_dec_long(p, e, &ev->thread, &nd);
  if (p == NULL) /* a hex thread id: the per-column path takes it */
    return NULL;
  p = fx_sep(p, e, ',');
  if (p != NULL)
    p = fx_sep(fx_time(p, e, &ev->time_ns), e, ',');
  if (p != NULL)
    p = fx_sep(fx_action(p, e, &ev->op), e, ',');
  if (p != NULL)
    p = fx_sep(fx_id(p, e, &ev->ptr), e, ',');
  if (p != NULL)
    p = fx_sep(fx_id(p, e, &ev->size), e, ',');
  if (p != NULL)
    p = fx_eol(fx_id(p, e, &ev->stream), e);
  return p;
}

/* Any column order; ignored columns are left to the general path. Returns
 * the start of the next line, or NULL. */
static const char *fast_line(const csv_state *st, const char *p, const char *e,
                             aa_replay_event *ev) {
  unsigned i;
  const char *q;

  if (AA__LIKELY(st->default_layout)) {
    q = fast_line_default(p, e, ev);
    if (AA__LIKELY(q != NULL))
      return q;
  }
  ev->time_ns = 0;
  ev->ptr = 0;
  ev->size = 0;
  ev->stream = 0;
  ev->thread = 0;
  ev->op = 0;
  for (i = 0; i < st->ncols && p != NULL; i++) {
    if (i > 0)
      p = fx_sep(p, e, ',');
    if (p == NULL)
      break;
    switch (st->cols[i]) {
    case COL_THREAD:
      p = fx_id(p, e, &ev->thread);
      break;
    case COL_TIME:
      p = fx_time(p, e, &ev->time_ns);
      break;
    case COL_ACTION:
      p = fx_action(p, e, &ev->op);
      break;
    case COL_POINTER:
      p = fx_id(p, e, &ev->ptr);
      break;
    case COL_SIZE:
      p = fx_id(p, e, &ev->size);
      break;
    case COL_STREAM:
      p = fx_id(p, e, &ev->stream);
      break;
    default:
      return NULL;
    }
  }
  if (p == NULL || ev->op == 0)
    return NULL;
  return fx_eol(p, e);
}

/* ---------------------------------------------------------------- parse */

/* The reader's state across the chunks of one input (a pipe is read in
 * chunks; a mapped file is one chunk). */
typedef struct csv_reader {
  csv_state st;
  bool first;      /* no data or header line seen yet */
  uint64_t line;   /* lines consumed */
  uint64_t offset; /* bytes consumed before this chunk */
  uint64_t total;  /* input size for progress, 0 when unknown */
  char *header;    /* copy of the header line (owned) */
  size_t batches;
  aa_replay_event batch[BATCH];
  size_t nb;
  const aa_replay_csv_options *opt;
  aa_replay_on_error mode;
  aa_replay_sink sink;
  void *user;
  aa_replay_diag *diag;
  char *err;
  size_t errcap;
} csv_reader;

static csv_reader *reader_new(const aa_replay_csv_options *opt,
                              aa_replay_sink sink, void *user,
                              aa_replay_diag *diag, char *err, size_t errcap) {
  csv_reader *r = malloc(sizeof *r);

  if (r == NULL)
    return NULL;
  memset(&r->st, 0, sizeof r->st);
  aa__csv_set_default_cols(&r->st);
  r->first = true;
  r->line = 0;
  r->offset = 0;
  r->total = 0;
  r->header = NULL;
  r->batches = 0;
  r->nb = 0;
  r->opt = opt;
  r->mode = opt != NULL ? opt->on_error : AA_REPLAY_STOP;
  r->sink = sink;
  r->user = user;
  r->diag = diag;
  r->err = err;
  r->errcap = errcap;
  return r;
}

static void reader_free(csv_reader *r) {
  if (r == NULL)
    return;
  free(r->header);
  free(r);
}

static int reader_flush(csv_reader *r) {
  int rc = AA_OK;

  if (r->nb > 0)
    rc = r->sink(r->user, r->batch, r->nb);
  r->nb = 0;
  return rc;
}

/* One event is in batch[nb]: keep it, hand the batch on when full. */
static inline int reader_keep(csv_reader *r, const char *buf, const char *p) {
  int rc;

  r->batch[r->nb].line = r->line;
  if (++r->nb < BATCH)
    return AA_OK;
  rc = reader_flush(r);
  if (rc == AA_OK && r->opt != NULL && r->opt->progress != NULL &&
      ++r->batches % PROGRESS_EVERY == 0)
    r->opt->progress(r->opt->progress_user, r->offset + (uint64_t)(p - buf),
                     r->total);
  return rc;
}

/* A line over AA_REPLAY_CSV_MAX_LINE: fatal in every mode (r->line is its
 * number). */
static int line_too_long(csv_reader *r) {
  char full[AA_REPLAY_ERR_CAP];

  snprintf(full, sizeof full,
           "line %llu: longer than %u bytes, the bound on a CSV line (no line end: "
           "not a CSV log?)",
           (unsigned long long)r->line, (unsigned)AA_REPLAY_CSV_MAX_LINE);
  if (r->diag != NULL) {
    r->diag->malformed++;
    aa__replay_diag_note(r->diag, r->line, full);
  }
  aa__errf(r->err, r->errcap, "%s", full);
  return AA_EPARSE;
}

/* Parses [buf, buf+len), which ends at a line end or the end of the input. */
static int reader_chunk(csv_reader *r, const char *buf, size_t len) {
  const char *p = buf;
  const char *end = buf + len;
  char msg[AA_REPLAY_ERR_CAP];
  char full[AA_REPLAY_ERR_CAP + 32];
  int rc = AA_OK;

  while (p < end) {
    const char *nl;
    const char *le;
    const char *ls;
    const char *t;
    bool unknown = false;
    int lrc;

    /* A UTF-8 byte-order mark (spreadsheets write one) before the first
     * line is not part of the first column's name. */
    if (AA__UNLIKELY(r->first && r->line == 0 && end - p >= 3 &&
                     memcmp(p, "\xef\xbb\xbf", 3) == 0))
      p += 3;
    if (AA__LIKELY(!r->first))
      nl = fast_line(&r->st, p, end, &r->batch[r->nb]);
    else
      nl = NULL;
    /* a line past the rules of every reader: the general path says why */
    if (AA__UNLIKELY(nl != NULL && (r->batch[r->nb].size > AA_REPLAY_MAX_SIZE ||
                                    r->batch[r->nb].time_ns > (uint64_t)INT64_MAX)))
      nl = NULL;
    if (AA__LIKELY(nl != NULL)) {
      r->line++;
      p = nl;
      rc = reader_keep(r, buf, p);
      if (rc != AA_OK)
        return rc;
      continue;
    }
    nl = memchr(p, '\n', (size_t)(end - p));
    le = nl != NULL ? nl : end;
    ls = p;
    r->line++;
    if (AA__UNLIKELY((size_t)(le - ls) > AA_REPLAY_CSV_MAX_LINE))
      return line_too_long(r);
    p = nl != NULL ? nl + 1 : end;
    if (le > ls && le[-1] == '\r')
      le--;
    t = ls;
    while (t < le && aa__csv_is_space(*t))
      t++;
    if (t == le || *t == '#')
      continue;
    if (r->first) {
      r->first = false;
      if (aa__csv_looks_like_header(ls, le)) {
        lrc = aa__csv_parse_header(&r->st, ls, le, msg, sizeof msg);
        if (lrc != AA_OK) {
          /* A broken header cannot be skipped: the columns are unknown. */
          snprintf(full, sizeof full, "line %llu: %s",
                   (unsigned long long)r->line, msg);
          aa__errf(r->err, r->errcap, "%s", full);
          if (r->diag != NULL) {
            r->diag->malformed++;
            aa__replay_diag_note(r->diag, r->line, full);
          }
          return lrc;
        }
        r->st.header_len = (size_t)(le - ls);
        r->header = malloc(r->st.header_len + 1);
        if (r->header == NULL) {
          aa__errf(r->err, r->errcap, "out of memory");
          return AA_ENOMEM;
        }
        memcpy(r->header, ls, r->st.header_len);
        r->st.header = r->header;
        r->st.have_header = true;
        continue;
      }
    }
    lrc = aa__csv_parse_line(&r->st, ls, le, &r->batch[r->nb], &unknown, msg,
                             sizeof msg);
    if (AA__UNLIKELY(lrc != AA_OK)) {
      if (r->st.have_header && (size_t)(le - ls) == r->st.header_len &&
          memcmp(ls, r->st.header, r->st.header_len) == 0)
        continue; /* a repeated header (concatenated logs) */
      snprintf(full, sizeof full, "line %llu: %s", (unsigned long long)r->line,
               msg);
      if (r->diag != NULL) {
        if (unknown)
          r->diag->unknown_action++;
        else
          r->diag->malformed++;
        aa__replay_diag_note(r->diag, r->line, full);
      }
      if (r->mode == AA_REPLAY_STOP) {
        aa__errf(r->err, r->errcap, "%s", full);
        return AA_EPARSE;
      }
      continue;
    }
    rc = reader_keep(r, buf, p);
    if (rc != AA_OK)
      return rc;
  }
  r->offset += len;
  return AA_OK;
}

int aa_replay_csv_parse(const char *buf, size_t len,
                        const aa_replay_csv_options *opt, aa_replay_sink sink,
                        void *user, aa_replay_diag *diag, char *err,
                        size_t errcap) {
  csv_reader *r = NULL;
  int rc;

  if (err != NULL && errcap > 0)
    err[0] = '\0';
  if ((buf == NULL && len > 0) || sink == NULL) {
    aa__errf(err, errcap, "aa_replay_csv_parse: NULL argument");
    return AA_EINVAL;
  }
  r = reader_new(opt, sink, user, diag, err, errcap);
  if (r == NULL) {
    aa__errf(err, errcap, "out of memory");
    return AA_ENOMEM;
  }
  r->total = len;
  rc = reader_chunk(r, buf, len);
  if (rc == AA_OK)
    rc = reader_flush(r);
  if (rc == AA_OK && opt != NULL && opt->progress != NULL)
    opt->progress(opt->progress_user, len, len);
  reader_free(r);
  return rc;
}

#define STREAM_CHUNK (8u << 20)

/* A pipe or other unmappable input, in chunks: each chunk is parsed up to
 * its last complete line and the rest is carried into the next, so memory
 * stays at one chunk however long the stream (a line is at most
 * AA_REPLAY_CSV_MAX_LINE bytes, far under a chunk). */
static int parse_stream(int fd, const char *name,
                        const aa_replay_csv_options *opt, aa_replay_sink sink,
                        void *user, aa_replay_diag *diag, char *err,
                        size_t errcap) {
  csv_reader *r = reader_new(opt, sink, user, diag, err, errcap);
  size_t cap = STREAM_CHUNK, have = 0;
  char *buf = malloc(cap);
  bool eof = false;
  int rc = AA_OK;

  if (r == NULL || buf == NULL) {
    aa__errf(err, errcap, "out of memory");
    rc = AA_ENOMEM;
    goto out;
  }
  while (!eof) {
    ssize_t n;
    const char *cut;
    size_t take;

    /* the chunk is far larger than the longest line allowed: a full
     * buffer without a line end is a line over the bound */
    if (have == cap || (memchr(buf, '\n', have) == NULL && have > AA_REPLAY_CSV_MAX_LINE)) {
      r->line++;
      rc = line_too_long(r);
      goto out;
    }
    n = read(fd, buf + have, cap - have);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      aa__errf(err, errcap, "%s: %s", name, strerror(errno));
      rc = AA_EIO;
      goto out;
    }
    if (n == 0)
      eof = true;
    have += (size_t)n;
    if (eof) {
      take = have;
    } else {
      cut = memrchr(buf, '\n', have);
      if (cut == NULL)
        continue; /* no complete line yet */
      take = (size_t)(cut - buf) + 1;
    }
    rc = reader_chunk(r, buf, take);
    if (rc != AA_OK)
      goto out;
    memmove(buf, buf + take, have - take);
    have -= take;
    if (opt != NULL && opt->progress != NULL)
      opt->progress(opt->progress_user, r->offset, 0);
  }
  rc = reader_flush(r);
out:
  free(buf);
  reader_free(r);
  return rc;
}

int aa_replay_csv_parse_file(const char *path, const aa_replay_csv_options *opt,
                             aa_replay_sink sink, void *user,
                             aa_replay_diag *diag, char *err, size_t errcap) {
  int fd = -1;
  void *map = MAP_FAILED;
  size_t len = 0;
  struct stat sb;
  int rc;

  if (err != NULL && errcap > 0)
    err[0] = '\0';
  if (path == NULL || sink == NULL) {
    aa__errf(err, errcap, "aa_replay_csv_parse_file: NULL argument");
    return AA_EINVAL;
  }
  if (strcmp(path, "-") == 0) {
    rc = parse_stream(0, "stdin", opt, sink, user, diag, err, errcap);
    goto out;
  }
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &sb) != 0) {
    aa__errf(err, errcap, "%s: %s", path, strerror(errno));
    rc = AA_EIO;
    goto out;
  }
  if (S_ISDIR(sb.st_mode)) {
    aa__errf(err, errcap, "%s: is a directory", path);
    rc = AA_EIO;
    goto out;
  }
  if (S_ISREG(sb.st_mode) && sb.st_size > 0) {
    len = (size_t)sb.st_size;
    map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      aa__errf(err, errcap, "%s: %s", path, strerror(errno));
      rc = AA_EIO;
      goto out;
    }
    (void)madvise(map, len, MADV_SEQUENTIAL);
    rc = aa_replay_csv_parse(map, len, opt, sink, user, diag, err, errcap);
  } else {
    /* a pipe, a FIFO, a character device, an empty file */
    rc = parse_stream(fd, path, opt, sink, user, diag, err, errcap);
  }
out:
  if (map != MAP_FAILED)
    munmap(map, len);
  if (fd >= 0)
    close(fd);
  return rc;
}

size_t aa_replay_csv_format(const aa_replay_event *ev, char *buf, size_t cap) {
  if (ev->op == 'u') { /* RMM's format has no action for a stream use */
    if (cap > 0)
      buf[0] = '\0';
    return 0;
  }
  const char *action = ev->op == 'a'   ? "allocate"
                       : ev->op == 'f' ? "deallocate"
                                       : "allocate failure";
  int n = snprintf(buf, cap, "%llu,%llu.%09llu,%s,0x%llx,%llu,0x%llx\n",
                   (unsigned long long)ev->thread,
                   (unsigned long long)(ev->time_ns / 1000000000ull),
                   (unsigned long long)(ev->time_ns % 1000000000ull), action,
                   (unsigned long long)ev->ptr, (unsigned long long)ev->size,
                   (unsigned long long)ev->stream);
  return n < 0 ? 0 : (size_t)n;
}
