/*
 * test_util_strbuf.c — the one string builder (aa__buf) and the one JSON
 * string writer (aa__json_put): exact escapes for quotes, backslashes and
 * every control byte and 0x7f, valid UTF-8 copied as is, every byte of an
 * invalid sequence replaced by U+FFFD; and writers of three buffer types
 * (the growable aa__buf, the pool stats' fixed buffer, a FILE) give the
 * same bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/core.h"
#include "adaptalloc/internal/util.h"

static char *escape(const char *s, size_t n) {
  aa__buf b;
  char *out = NULL;
  aa__buf_init(&b);
  aa__buf_json_str(&b, s, n);
  assert_int_equal(aa__buf_take(&b, &out, NULL), AA_OK);
  return out;
}

static void expect(const char *in, size_t n, const char *want) {
  char *got = escape(in, n);
  if (strcmp(got, want) != 0)
    print_error("escape: got %s, want %s\n", got, want);
  assert_string_equal(got, want);
  free(got);
}

static void test_util_strbuf_json_escapes(void **state) {
  (void)state;
  expect("", 0, "\"\"");
  expect("plain text", 10, "\"plain text\"");
  expect("a\"b\\c", 5, "\"a\\\"b\\\\c\"");
  expect("\n\r\t", 3, "\"\\n\\r\\t\"");
  expect("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\\u007f\"");
  expect("a\0b", 3, "\"a\\u0000b\"");
  expect("/", 1, "\"/\""); /* '/' needs no escape */
  /* Valid UTF-8, 2, 3 and 4 bytes, copied as is. */
  expect("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9, "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
  /* Invalid: a lone continuation byte, an overlong '/', a surrogate, above
   * U+10FFFF, a truncated sequence, 0xff: one U+FFFD per bad byte. */
  expect("\x80", 1, "\"\\ufffd\"");
  expect("\xc0\xaf", 2, "\"\\ufffd\\ufffd\"");
  expect("\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\"");
  expect("\xf4\x90\x80\x80", 4, "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
  expect("x\xe2\x82", 3, "\"x\\ufffd\\ufffd\"");
  expect("\xff"
         "ok",
         3, "\"\\ufffdok\"");
}

static void test_util_strbuf_buffer(void **state) {
  aa__buf b;
  char *out = NULL;
  size_t len = 0;
  (void)state;
  aa__buf_init(&b);
  aa__buf_json_cstr(&b, NULL);
  aa__buf_puts(&b, ",");
  aa__buf_json_cstr(&b, "q\"");
  aa__buf_printf(&b, ",%d", 42);
  for (int i = 0; i < 1000; i++) /* grows past its first capacity */
    aa__buf_append(&b, "0123456789", 10);
  assert_int_equal(aa__buf_take(&b, &out, &len), AA_OK);
  assert_int_equal(len, strlen(out));
  assert_int_equal(len, 13 + 10000);
  assert_memory_equal(out, "null,\"q\\\"\",42", 13);
  assert_null(b.data); /* taken: the buffer is reset */
  free(out);
  /* An empty buffer still hands over a string. */
  assert_int_equal(aa__buf_take(&b, &out, &len), AA_OK);
  assert_string_equal(out, "");
  free(out);
  /* A failed buffer reports it once, at the end. */
  aa__buf_init(&b);
  b.failed = true;
  aa__buf_puts(&b, "x");
  assert_int_equal(aa__buf_take(&b, &out, &len), AA_ENOMEM);
  assert_null(out);
}

/* aa_pool_stats_json writes the pool name through a fixed buffer: the same
 * escapes as the growable one. */
static void test_util_strbuf_stats_writer(void **state) {
  static const char name[] = "p\x7f\"\n\xc3\xa9\xc3";
  aa_backend *be = NULL;
  aa_pool_config cfg;
  aa_pool *pool = NULL;
  aa_pool_stats st;
  char *want = escape(name, sizeof name - 1);
  char *json;
  size_t n;
  (void)state;
  assert_int_equal(aa_backend_host_new(&be), AA_OK);
  aa_pool_config_init(&cfg);
  cfg.backend = be;
  cfg.name = name;
  assert_int_equal(aa_pool_new(&cfg, &pool), AA_OK);
  memset(&st, 0, sizeof st);
  st.version = AA_STATS_VERSION;
  st.size = sizeof st;
  assert_int_equal(aa_pool_stats_get(pool, &st), AA_OK);
  n = aa_pool_stats_json(&st, NULL, 0);
  json = malloc(n + 1);
  assert_non_null(json);
  assert_int_equal(aa_pool_stats_json(&st, json, n + 1), n);
  if (strstr(json, want) == NULL)
    print_error("stats JSON lacks %s: %.200s\n", want, json);
  assert_non_null(strstr(json, want));
  assert_non_null(strstr(want, "\\u007f"));
  assert_non_null(strstr(want, "\\ufffd"));
  free(json);
  free(want);
  aa_pool_destroy(pool);
  aa_backend_destroy(be);
}

static void file_put(void *sink, const char *s, size_t n) { fwrite(s, 1, n, sink); }

/* Through a FILE: the same bytes again. */
static void test_util_strbuf_file_writer(void **state) {
  static const char in[] = "t\x01\x7f\xe2\x82\xac\xe2";
  char *want = escape(in, sizeof in - 1);
  char got[256] = "";
  FILE *f = tmpfile();
  size_t n;
  (void)state;
  assert_non_null(f);
  aa__json_put(file_put, f, in, sizeof in - 1);
  rewind(f);
  n = fread(got, 1, sizeof got - 1, f);
  got[n] = '\0';
  fclose(f);
  assert_string_equal(got, want);
  assert_string_equal(got, "\"t\\u0001\\u007f\xe2\x82\xac\\ufffd\"");
  free(want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_util_strbuf_json_escapes),
      cmocka_unit_test(test_util_strbuf_buffer),
      cmocka_unit_test(test_util_strbuf_stats_writer),
      cmocka_unit_test(test_util_strbuf_file_writer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
