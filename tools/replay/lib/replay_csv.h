/*
 * replay_csv.h — what the CSV reader's files share (adapt/replay/):
 *   replay_csv.c       the reader: chunks, the fast path (a plain line in one
 *                      pass), batches to the sink, files and stdin, errors
 *                      and progress; the writer
 *   replay_csv_line.c  the general path: the header, any documented form
 *                      of a line, field by field, with the error messages
 * Each shared function below sits under the file that defines it.
 */
#ifndef ADAPTALLOC_REPLAY_CSV_H
#define ADAPTALLOC_REPLAY_CSV_H

#include "replay_internal.h"
#include "replay_parts.h"

#define MAX_COLS 32

enum col {
  COL_IGNORE = 0,
  COL_THREAD,
  COL_TIME,
  COL_ACTION,
  COL_POINTER,
  COL_SIZE,
  COL_STREAM
};

typedef struct csv_state {
  unsigned char cols[MAX_COLS];
  unsigned ncols;
  bool default_layout; /* exactly Thread,Time,Action,Pointer,Size,Stream */
  bool have_header;
  const char *header; /* the header line, to skip repeats of it */
  size_t header_len;
} csv_state;

/* A space inside a field (the reader trims them). */
static inline bool aa__csv_is_space(char c) { return c == ' ' || c == '\t'; }

/* replay_csv_line.c */
/* The column layout Thread,Time,Action,Pointer,Size,Stream. */
void aa__csv_set_default_cols(csv_state *st);
/* A header line: names the columns. AA_OK or AA_EPARSE with a message. */
int aa__csv_parse_header(csv_state *st, const char *s, const char *e, char *msg, size_t msgcap);
/* Parses one data line into *ev. Returns AA_OK, or AA_EPARSE with a message
 * and *unknown_action set when that was the problem. */
int aa__csv_parse_line(const csv_state *st, const char *s, const char *e, aa_replay_event *ev,
                       bool *unknown_action, char *msg, size_t msgcap);
/* Whether a line looks like a header: its first field starts with a letter. */
bool aa__csv_looks_like_header(const char *s, const char *e);

#endif /* ADAPTALLOC_REPLAY_CSV_H */
