/*
 * adaptalloc/internal/util.h — the util module: the one string builder and
 * the one JSON string writer (util/src/strbuf.c), shared by every module that
 * writes text (core's stats JSON, the store, the policy writer, the replay
 * report, the HTTP server, the runtime, the tools), and the strict JSON check
 * every JSON input passes (util/src/json_strict.c). Internal (aa__), never
 * installed: modules reach it through the CMake target aa_util_headers.
 *
 * Glossary:
 *   aa__buf       a growable, NUL-terminated, malloc'd string. After an
 *                 allocation failure `failed` is set and further appends do
 *                 nothing, so callers check once at the end (aa__buf_take).
 *   aa__put_fn    where bytes go for a writer with its own buffer (a fixed
 *                 array, a FILE *): aa__json_put writes through it.
 *   JSON string   quotes, \" and \\, \n \r \t, every other byte below 0x20
 *                 and 0x7f as \u00XX, and each byte that does not start a
 *                 valid UTF-8 sequence as \ufffd: the result is always valid
 *                 JSON whatever the input.
 */
#ifndef AA_INTERNAL_UTIL_H
#define AA_INTERNAL_UTIL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct aa__buf {
  char *data; /* NUL-terminated when non-NULL; malloc'd, owned */
  size_t len;
  size_t cap;
  bool failed; /* an allocation failed; further appends do nothing */
} aa__buf;

void aa__buf_init(aa__buf *b);
void aa__buf_free(aa__buf *b);
/* Makes room for n more bytes up front (one allocation instead of many);
 * false, and the buffer failed, when out of memory. */
bool aa__buf_reserve(aa__buf *b, size_t n);
void aa__buf_append(aa__buf *b, const char *s, size_t n);
void aa__buf_puts(aa__buf *b, const char *s);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
void
aa__buf_printf(aa__buf *b, const char *fmt, ...);
/* (format(printf, 2, 0): fmt is checked at its callers, each a printf-like
 * function itself; clang's -Wformat-nonliteral asks it of the v-form) */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 0)))
#endif
void
aa__buf_vprintf(aa__buf *b, const char *fmt, va_list ap);
/* Appends s (n bytes) as a JSON string with quotes (aa__json_put). */
void aa__buf_json_str(aa__buf *b, const char *s, size_t n);
/* The same for a NUL-terminated string; NULL gives null. */
void aa__buf_json_cstr(aa__buf *b, const char *s);
/* Hands the data over: *out gets the malloc'd string (free()), *len its
 * length; the buffer is reset. AA_ENOMEM (and *out NULL) if any append
 * failed. */
int aa__buf_take(aa__buf *b, char **out, size_t *len);

/* printf into err (errcap bytes) when err is non-NULL and errcap > 0: the
 * one formatter of the error messages that parsers hand back. */
void aa__errf(char *err, size_t errcap, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Copies msg into err (errcap bytes) when err is non-NULL and errcap > 0,
 * cut to errcap - 1 bytes before a character that does not fit whole. */
void aa__errcpy(char *err, size_t errcap, const char *msg);

/* Receives n bytes of output. */
typedef void (*aa__put_fn)(void *sink, const char *s, size_t n);

/* Writes s (n bytes) as a JSON string, quotes included, through put. */
void aa__json_put(aa__put_fn put, void *sink, const char *s, size_t n);

/* The one escaping rule of log lines, so that no value a line quotes (a
 * model name, a path, a parser's message) can forge another line or drive
 * the terminal: a backslash becomes \\, newline, CR and TAB \n \r \t,
 * every other byte below 0x20, 0x7f, each byte that does not start a valid
 * UTF-8 sequence and the bytes of a C1 control (U+0080..U+009F) \xNN; valid
 * UTF-8 is kept. Writes at most cap - 1 bytes and a NUL into out (never half
 * an escape or a character); returns the length written. */
size_t aa__log_escape(const char *s, char *out, size_t cap);
/* Writes "adaptalloc: <line escaped>\n" to stderr in one call, whole
 * whatever its length (cut at AA__LOG_LINE_MAX bytes only when out of
 * memory). */
#define AA__LOG_LINE_MAX 4096
void aa__log_line(const char *line);

/* json_strict.c: the number tokens of a document, in document order (the
 * order in which a depth-first walk of cJSON's tree meets them): byte offset
 * and length of each, so that a message can quote a number as the document
 * wrote it (cJSON keeps only a double). malloc'd; aa__json_numbers_free. */
typedef struct aa__json_numbers {
  struct aa__json_token {
    size_t off, len;
  } * at;
  size_t n, cap;
} aa__json_numbers;
void aa__json_numbers_free(aa__json_numbers *nums);

/* json_strict.c: RFC 8259 grammar on bytes already known to be UTF-8 (one
 * leading byte-order mark allowed), refusing what cJSON lets through:
 * leading zeros, raw control bytes in strings, \u0000, unpaired surrogate
 * escapes, a second byte-order mark, nesting over max_depth, and integers of
 * 22 digits or more (beyond every field). AA_EPARSE with "(root): ... at
 * line L, column C" appended to err (may be NULL). nums (may be NULL) gets
 * every number token; AA_ENOMEM (nums freed) when it cannot. Offsets count
 * from json[0]. A message quotes a number whole up to quote_max bytes
 * (SIZE_MAX: always), as aa__buf_number. */
int aa__json_strict_check(const char *json, size_t len, unsigned max_depth,
                          size_t quote_max, aa__buf *err, aa__json_numbers *nums);
/* Appends a number's text s (n bytes): whole when n <= quote_max, else its
 * first 40 and last 8 bytes and its length ("1234...7890 (1000
 * characters)"), for messages that must fit a fixed buffer. */
void aa__buf_number(aa__buf *b, const char *s, size_t n, size_t quote_max);

#endif
