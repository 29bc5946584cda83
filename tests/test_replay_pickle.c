/*
 * test_replay_pickle.c — the pickle writer of adaptalloc-replay's
 * torch-snapshot export (tools/replay/pickle.c): integers and floats give
 * the bytes Python's pickle gives (checked against pickle.dumps), repeated
 * short strings come from the memo, containers close every 1000 items, and
 * bad nesting or a failing FILE is reported by pk_finish.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/common.h"
#include "../tools/replay/pickle.c"

/* The bytes between PROTO 4 and STOP of one writer run (none after an
 * error: the writer then stops writing, STOP included). */
typedef struct out {
  unsigned char b[65536];
  size_t n;
} out;

static pk_writer w;
static FILE *f;

static void start(void) {
  f = tmpfile();
  assert_non_null(f);
  pk_init(&w, f);
}

static void finish(out *o, int want_rc) {
  unsigned char all[sizeof o->b + 3];
  size_t n;
  assert_int_equal(pk_finish(&w), want_rc);
  rewind(f);
  n = fread(all, 1, sizeof all, f);
  fclose(f);
  assert_true(n >= 2);
  assert_int_equal(all[0], 0x80);
  assert_int_equal(all[1], 4);
  assert_int_equal(w.bytes, n);
  if (want_rc != AA_OK) { /* nothing written after the error, no STOP */
    assert_int_not_equal(all[n - 1], '.');
    o->n = 0;
    return;
  }
  assert_int_equal(all[n - 1], '.');
  o->n = n - 3;
  memcpy(o->b, all + 2, o->n);
}

static void hex_is(const out *o, const char *want) {
  char got[2 * sizeof o->b + 1];
  for (size_t i = 0; i < o->n; i++)
    sprintf(got + 2 * i, "%02x", o->b[i]);
  got[2 * o->n] = '\0';
  assert_string_equal(got, want);
}

static void one_int(int64_t v, const char *want) {
  out o;
  start();
  pk_int(&w, v);
  finish(&o, AA_OK);
  hex_is(&o, want);
}

static void test_replay_pickle_ints_as_python(void **state) {
  (void)state;
  one_int(5, "4b05");
  one_int(300, "4d2c01");
  one_int(-1, "4affffffff");
  one_int(70000, "4a70110100");
  one_int(INT32_MAX, "4affffff7f");
  one_int(INT32_MIN, "4a00000080");
  one_int((int64_t)INT32_MIN - 1, "8a05ffffff7fff");
  one_int((int64_t)1 << 40, "8a06000000000001");
  one_int(-((int64_t)1 << 40), "8a060000000000ff");
  {
    out o;
    start();
    pk_uint(&w, (uint64_t)1 << 63);
    pk_float(&w, 1.5);
    finish(&o, AA_OK);
    hex_is(&o, "8a09000000000000008000"
               "473ff8000000000000");
  }
}

static void test_replay_pickle_memo_and_strings(void **state) {
  out o;
  char longs[300];
  (void)state;
  memset(longs, 'x', sizeof longs - 1);
  longs[sizeof longs - 1] = '\0';
  start();
  pk_str(&w, "ab");
  pk_str(&w, "ab");
  pk_str(&w, "cd");
  finish(&o, AA_OK);
  /* SHORT_BINUNICODE "ab" BINPUT 0, BINGET 0, SHORT_BINUNICODE "cd" BINPUT 1 */
  hex_is(&o, "8c026162710068008c0263647101");
  start();
  pk_str(&w, longs); /* BINUNICODE, 4-byte length, not memoised */
  pk_str(&w, longs);
  finish(&o, AA_OK);
  assert_int_equal(o.n, 2 * (5 + 299));
  assert_int_equal(o.b[0], 'X');
  assert_int_equal(o.b[1] | o.b[2] << 8, 299);
  assert_int_equal(o.b[304], 'X');
}

static size_t count_byte(const out *o, unsigned char c) {
  size_t k = 0;
  for (size_t i = 0; i < o->n; i++)
    k += o->b[i] == c;
  return k;
}

static void test_replay_pickle_batches_of_1000(void **state) {
  out o;
  (void)state;
  start();
  pk_list_begin(&w);
  for (int i = 0; i < 2500; i++)
    pk_int(&w, 7); /* K 07: neither byte is a MARK or an APPENDS */
  pk_list_end(&w);
  finish(&o, AA_OK);
  assert_int_equal(count_byte(&o, '('), 3);
  assert_int_equal(count_byte(&o, 'e'), 3);
  assert_int_equal(o.n, 2 + 2500 * 2 + 2 * 2 + 1);
  start();
  pk_dict_begin(&w);
  for (int i = 0; i < 1000; i++) {
    pk_int(&w, 9);
    pk_int(&w, 9);
  }
  pk_int(&w, 9); /* pair 1001: a second batch */
  pk_int(&w, 9);
  pk_dict_end(&w);
  finish(&o, AA_OK);
  assert_int_equal(count_byte(&o, '('), 2);
  assert_int_equal(count_byte(&o, 'u'), 2);
}

static void test_replay_pickle_errors_are_reported(void **state) {
  out o;
  (void)state;
  start();
  pk_dict_begin(&w);
  pk_str(&w, "key"); /* a key without a value */
  pk_dict_end(&w);
  finish(&o, AA_EINVAL);
  start();
  pk_list_begin(&w);
  pk_dict_end(&w); /* the wrong kind */
  finish(&o, AA_EINVAL);
  start();
  pk_list_begin(&w); /* never closed */
  finish(&o, AA_EINVAL);
  {
    FILE *full = fopen("/dev/full", "w");
    if (full != NULL) {
      setvbuf(full, NULL, _IONBF, 0);
      pk_init(&w, full);
      pk_int(&w, 1);
      assert_int_equal(pk_finish(&w), AA_EIO);
      fclose(full);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_pickle_ints_as_python),
      cmocka_unit_test(test_replay_pickle_memo_and_strings),
      cmocka_unit_test(test_replay_pickle_batches_of_1000),
      cmocka_unit_test(test_replay_pickle_errors_are_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
