/*
 * pickle.c — the pickle writer of pickle.h: protocol 2 and 4 opcodes for plain
 * data, containers batched every PK_BATCH items, short repeated strings
 * through the memo. Entry points: pk_init, the pk_* values, pk_finish.
 */
#include <string.h>

#include "adaptalloc/common.h"
#include "pickle.h"

/* The opcodes used (Python's Lib/pickle.py names). */
enum {
  OP_PROTO = 0x80,
  OP_STOP = '.',
  OP_MARK = '(',
  OP_EMPTY_DICT = '}',
  OP_SETITEMS = 'u',
  OP_EMPTY_LIST = ']',
  OP_APPENDS = 'e',
  OP_TUPLE2 = 0x86,
  OP_BININT = 'J',
  OP_BININT1 = 'K',
  OP_BININT2 = 'M',
  OP_LONG1 = 0x8a,
  OP_BINFLOAT = 'G',
  OP_SHORT_BINUNICODE = 0x8c,
  OP_BINUNICODE = 'X',
  OP_NEWTRUE = 0x88,
  OP_NEWFALSE = 0x89,
  OP_NONE = 'N',
  OP_BINPUT = 'q',
  OP_BINGET = 'h'
};

static void put(pk_writer *w, const void *p, size_t n) {
  if (w->err != AA_OK)
    return;
  if (fwrite(p, 1, n, w->f) != n) {
    w->err = AA_EIO;
    return;
  }
  w->bytes += n;
}

static void put1(pk_writer *w, unsigned v) {
  unsigned char c = (unsigned char)v;
  put(w, &c, 1);
}

static void put_le32(pk_writer *w, uint32_t v) {
  unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                        (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
  put(w, b, 4);
}

/* Before each value: counts it in the open container, and closes the
 * container's batch (APPENDS / SETITEMS, then a new MARK) when it is full.
 * A dict's batch is closed only between pairs. */
static void value_begin(pk_writer *w) {
  if (w->err != AA_OK || w->depth == 0)
    return;
  pk_level *l = &w->stack[w->depth - 1];
  uint32_t full = l->kind == 'd' ? 2 * PK_BATCH : PK_BATCH;
  if (l->count == full) {
    put1(w, l->kind == 'd' ? OP_SETITEMS : OP_APPENDS);
    put1(w, OP_MARK);
    l->count = 0;
  }
  l->count++;
}

void pk_init(pk_writer *w, FILE *f) {
  memset(w, 0, sizeof *w);
  w->f = f;
  w->err = f != NULL ? AA_OK : AA_EINVAL;
  put1(w, OP_PROTO);
  put1(w, 4); /* SHORT_BINUNICODE is protocol 4's; no frames (optional) */
}

static void open_container(pk_writer *w, char kind) {
  value_begin(w);
  if (w->err != AA_OK)
    return;
  if (w->depth == PK_MAX_DEPTH) {
    w->err = AA_EINVAL;
    return;
  }
  put1(w, kind == 'd' ? OP_EMPTY_DICT : OP_EMPTY_LIST);
  put1(w, OP_MARK);
  w->stack[w->depth].kind = kind;
  w->stack[w->depth].count = 0;
  w->depth++;
}

static void close_container(pk_writer *w, char kind) {
  if (w->err != AA_OK)
    return;
  if (w->depth == 0 || w->stack[w->depth - 1].kind != kind ||
      (kind == 'd' && w->stack[w->depth - 1].count % 2 != 0)) {
    w->err = AA_EINVAL; /* not open, another kind open, or a key alone */
    return;
  }
  put1(w, kind == 'd' ? OP_SETITEMS : OP_APPENDS);
  w->depth--;
}

void pk_dict_begin(pk_writer *w) { open_container(w, 'd'); }
void pk_dict_end(pk_writer *w) { close_container(w, 'd'); }
void pk_list_begin(pk_writer *w) { open_container(w, 'l'); }
void pk_list_end(pk_writer *w) { close_container(w, 'l'); }

void pk_empty_list(pk_writer *w) {
  value_begin(w);
  put1(w, OP_EMPTY_LIST);
}

/* An integer's opcode, value_begin already done. */
static void int_body(pk_writer *w, int64_t v) {
  if (v >= 0 && v <= 0xff) {
    put1(w, OP_BININT1);
    put1(w, (unsigned)v);
  } else if (v >= 0 && v <= 0xffff) {
    unsigned char b[3] = {OP_BININT2, (unsigned char)v, (unsigned char)(v >> 8)};
    put(w, b, 3);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    put1(w, OP_BININT);
    put_le32(w, (uint32_t)(int32_t)v);
  } else {
    /* LONG1: little-endian two's complement, as few bytes as keep the sign */
    unsigned char b[8];
    uint64_t u = (uint64_t)v;
    size_t n = 8;
    for (size_t i = 0; i < 8; i++)
      b[i] = (unsigned char)(u >> (8 * i));
    while (n > 1 && ((b[n - 1] == 0x00 && !(b[n - 2] & 0x80)) ||
                     (b[n - 1] == 0xff && (b[n - 2] & 0x80))))
      n--;
    put1(w, OP_LONG1);
    put1(w, (unsigned)n);
    put(w, b, n);
  }
}

void pk_int(pk_writer *w, int64_t v) {
  value_begin(w);
  int_body(w, v);
}

void pk_uint(pk_writer *w, uint64_t v) {
  value_begin(w);
  if (v <= (uint64_t)INT64_MAX) {
    int_body(w, (int64_t)v);
    return;
  }
  /* above INT64_MAX: eight bytes and a zero sign byte */
  unsigned char b[11];
  b[0] = OP_LONG1;
  b[1] = 9;
  for (size_t i = 0; i < 8; i++)
    b[2 + i] = (unsigned char)(v >> (8 * i));
  b[10] = 0;
  put(w, b, sizeof b);
}

void pk_float(pk_writer *w, double v) {
  unsigned char b[9];
  uint64_t u;
  value_begin(w);
  memcpy(&u, &v, sizeof u);
  b[0] = OP_BINFLOAT; /* big-endian IEEE 754 */
  for (size_t i = 0; i < 8; i++)
    b[1 + i] = (unsigned char)(u >> (56 - 8 * i));
  put(w, b, sizeof b);
}

void pk_bool(pk_writer *w, bool v) {
  value_begin(w);
  put1(w, v ? OP_NEWTRUE : OP_NEWFALSE);
}

void pk_none(pk_writer *w) {
  value_begin(w);
  put1(w, OP_NONE);
}

void pk_str(pk_writer *w, const char *s) {
  size_t n = strlen(s), i;

  value_begin(w);
  if (w->err != AA_OK)
    return;
  if (n <= PK_MEMO_LEN) {
    for (i = 0; i < w->nmemo; i++) {
      if (strcmp(w->memo[i], s) == 0) {
        unsigned char b[2] = {OP_BINGET, (unsigned char)i};
        put(w, b, 2); /* PK_MEMO_MAX < 256: BINGET always reaches */
        return;
      }
    }
  }
  if (n > UINT32_MAX) {
    w->err = AA_EINVAL;
    return;
  }
  if (n < 256) {
    put1(w, OP_SHORT_BINUNICODE);
    put1(w, (unsigned)n);
  } else {
    put1(w, OP_BINUNICODE);
    put_le32(w, (uint32_t)n);
  }
  put(w, s, n);
  if (n <= PK_MEMO_LEN && w->nmemo < PK_MEMO_MAX) {
    put1(w, OP_BINPUT);
    put1(w, (unsigned)w->nmemo);
    memcpy(w->memo[w->nmemo], s, n + 1);
    w->nmemo++;
  }
}

void pk_tuple2_int(pk_writer *w, int64_t a, int64_t b) {
  value_begin(w);
  int_body(w, a);
  int_body(w, b);
  put1(w, OP_TUPLE2);
}

void pk_kv_str(pk_writer *w, const char *key, const char *v) {
  pk_str(w, key);
  pk_str(w, v);
}

void pk_kv_uint(pk_writer *w, const char *key, uint64_t v) {
  pk_str(w, key);
  pk_uint(w, v);
}

void pk_kv_int(pk_writer *w, const char *key, int64_t v) {
  pk_str(w, key);
  pk_int(w, v);
}

void pk_kv_bool(pk_writer *w, const char *key, bool v) {
  pk_str(w, key);
  pk_bool(w, v);
}

int pk_finish(pk_writer *w) {
  if (w->err == AA_OK && w->depth != 0)
    w->err = AA_EINVAL;
  put1(w, OP_STOP);
  return w->err;
}
