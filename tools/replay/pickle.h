/*
 * pickle.h — a small writer of Python pickles (protocol 4, without frames) for plain data:
 * dicts, lists, 2-tuples, integers, strings, floats, booleans and None.
 * export_torch.c writes PyTorch memory snapshots with it.
 *
 * It emits only the opcodes that both Python's unpickler and the
 * JavaScript unpickler of PyTorch's memory_viz page read (PROTO, MARK,
 * EMPTY_DICT, SETITEMS, EMPTY_LIST, APPENDS, TUPLE2, BININT1, BININT2,
 * BININT, LONG1, SHORT_BINUNICODE, BINUNICODE, BINFLOAT, NEWTRUE,
 * NEWFALSE, NONE, BINPUT, BINGET, STOP).
 * Containers are closed every 1000 items (as Python's own pickler does),
 * so that no single APPENDS carries a whole trace. Short strings that
 * repeat (dict keys, action names) go into the memo once and are fetched
 * from it after.
 *
 * Errors are sticky: the first write error, bad nesting or out-of-memory
 * sets w->err (an AA_* code) and every later call does nothing;
 * pk_finish reports it. The writer owns nothing but its memo table; the
 * FILE stays the caller's.
 */
#ifndef ADAPTALLOC_REPLAY_PICKLE_H
#define ADAPTALLOC_REPLAY_PICKLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PK_MAX_DEPTH 16
#define PK_MEMO_MAX 64 /* strings kept in the memo */
#define PK_MEMO_LEN 32 /* the longest string memoised */
#define PK_BATCH 1000  /* items per APPENDS / pairs per SETITEMS */

typedef struct pk_level {
  char kind;      /* 'd' dict, 'l' list */
  uint32_t count; /* values since the last MARK (a dict counts keys and values) */
} pk_level;

typedef struct pk_writer {
  FILE *f;
  int err; /* AA_OK, or the first error */
  pk_level stack[PK_MAX_DEPTH];
  size_t depth;
  char memo[PK_MEMO_MAX][PK_MEMO_LEN + 1];
  size_t nmemo;
  uint64_t bytes; /* written so far */
} pk_writer;

/* Starts a pickle on f (writes PROTO 4). */
void pk_init(pk_writer *w, FILE *f);

/* A dict: pk_dict_begin, then key, value, key, value ..., pk_dict_end. */
void pk_dict_begin(pk_writer *w);
void pk_dict_end(pk_writer *w);
/* A list: pk_list_begin, values, pk_list_end. */
void pk_list_begin(pk_writer *w);
void pk_list_end(pk_writer *w);
/* An empty list as one value (frames=[]). */
void pk_empty_list(pk_writer *w);

void pk_int(pk_writer *w, int64_t v);
void pk_uint(pk_writer *w, uint64_t v);
void pk_float(pk_writer *w, double v);
void pk_bool(pk_writer *w, bool v);
void pk_none(pk_writer *w);
/* A UTF-8 string (the caller's bytes, written as they are). */
void pk_str(pk_writer *w, const char *s);
/* The tuple (a, b) of two integers. */
void pk_tuple2_int(pk_writer *w, int64_t a, int64_t b);

/* Key and value in one call: pk_str(key) then the value. */
void pk_kv_str(pk_writer *w, const char *key, const char *v);
void pk_kv_uint(pk_writer *w, const char *key, uint64_t v);
void pk_kv_int(pk_writer *w, const char *key, int64_t v);
void pk_kv_bool(pk_writer *w, const char *key, bool v);

/* Writes STOP after the one top-level value. Returns AA_OK, or the first
 * error (AA_EIO: the FILE failed; AA_EINVAL: nesting was wrong). Does not
 * flush or close f. */
int pk_finish(pk_writer *w);

#endif /* ADAPTALLOC_REPLAY_PICKLE_H */
