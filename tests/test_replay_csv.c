/*
 * test_replay_csv.c — the RMM CSV reader: accepted forms, every malformed
 * variant with its line number, stop/count modes, the writer round trip,
 * files and stdin-like inputs.
 */
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/replay.h"
#include "replay_parts.h" /* tools/replay/lib: the tool's own parts */

#define MAXEV 64

typedef struct collect {
  aa_replay_event ev[MAXEV];
  size_t n;
  size_t calls;
  size_t stop_after; /* 0 = never */
} collect;

static int collect_sink(void *user, const aa_replay_event *ev, size_t n) {
  collect *c = user;
  size_t i;

  c->calls++;
  for (i = 0; i < n && c->n < MAXEV; i++)
    c->ev[c->n++] = ev[i];
  if (c->stop_after != 0 && c->n >= c->stop_after)
    return AA_ECLOSED;
  return AA_OK;
}

static int parse(const char *text, aa_replay_on_error mode, collect *c,
                 aa_replay_diag *d, char *err) {
  aa_replay_csv_options opt;

  memset(&opt, 0, sizeof opt);
  opt.on_error = mode;
  memset(c, 0, sizeof *c);
  if (d != NULL)
    memset(d, 0, sizeof *d);
  return aa_replay_csv_parse(text, strlen(text), &opt, collect_sink, c, d, err,
                             AA_REPLAY_ERR_CAP);
}

static void test_replay_csv_basic(void **state) {
  collect c;
  char err[AA_REPLAY_ERR_CAP];
  const char *text =
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "140573312345856,1634567890.123456,allocate,0x7f8a40000000,1024,0x7f8a38001020\n"
      "140573312345856,1634567890.234567,allocate failure,0x0,4096,0x0\n"
      "140573312345856,1634567890.345678,deallocate,0x7f8a40000000,1024,0x7f8a38001020\n";
  (void)state;

  assert_int_equal(parse(text, AA_REPLAY_STOP, &c, NULL, err), AA_OK);
  assert_int_equal(c.n, 3);
  assert_int_equal(c.ev[0].op, 'a');
  assert_int_equal(c.ev[0].thread, 140573312345856ull);
  assert_int_equal(c.ev[0].time_ns, 1634567890123456000ull);
  assert_int_equal(c.ev[0].ptr, 0x7f8a40000000ull);
  assert_int_equal(c.ev[0].size, 1024);
  assert_int_equal(c.ev[0].stream, 0x7f8a38001020ull);
  assert_int_equal(c.ev[0].line, 2);
  assert_int_equal(c.ev[1].op, 'x');
  assert_int_equal(c.ev[1].size, 4096);
  assert_int_equal(c.ev[2].op, 'f');
  assert_int_equal(c.ev[2].line, 4);
}

/* A CSV that starts with a UTF-8 byte-order mark (as spreadsheets save it)
 * reads like one without; a BOM anywhere else is data (and malformed). */
static void test_replay_csv_bom(void **state) {
  collect c;
  char err[AA_REPLAY_ERR_CAP];
  const char *text =
      "\xef\xbb\xbfThread,Time,Action,Pointer,Size,Stream\r\n"
      "1,1.5,allocate,0xa000,1024,0x0\r\n"
      "1,1.6,deallocate,0xa000,1024,0x0\r\n";
  const char *bom_no_header = "\xef\xbb\xbf"
                              "1,1.5,allocate,0xa000,1024,0x0\n";
  const char *second_bom = "Thread,Time,Action,Pointer,Size,Stream\n"
                           "\xef\xbb\xbf"
                           "1,1.5,allocate,0xa000,1024,0x0\n";
  (void)state;

  assert_int_equal(parse(text, AA_REPLAY_STOP, &c, NULL, err), AA_OK);
  assert_int_equal(c.n, 2);
  assert_int_equal(c.ev[0].thread, 1);
  assert_int_equal(c.ev[0].size, 1024);
  assert_int_equal(c.ev[1].op, 'f');
  assert_int_equal(parse(bom_no_header, AA_REPLAY_STOP, &c, NULL, err), AA_OK);
  assert_int_equal(c.n, 1);
  assert_int_equal(c.ev[0].ptr, 0xa000);
  assert_int_not_equal(parse(second_bom, AA_REPLAY_STOP, &c, NULL, err), AA_OK);
}

static void test_replay_csv_forms(void **state) {
  collect c;
  char err[AA_REPLAY_ERR_CAP];
  /* CRLF, comments, blank lines, spaces, quotes, hh:mm:ss, ns/us suffixes,
   * decimal and bare-hex pointers, (nil), no final newline. */
  const char *text =
      "# recorded on a test box\r\n"
      "Thread,Time,Action,Pointer,Size,Stream\r\n"
      "\r\n"
      "1, 10:00:01.5 , allocate , 0x1000 , 512 , 0\r\n"
      "\"2\",\"12ns\",\"deallocate\",\"0x1000\",\"512\",\"0x0\"\r\n"
      "   \r\n"
      "3,7us,allocate,7f00,0x200,(nil)\r\n"
      "4,5,Allocate,4096,1,1\n"
      "5,1.000000001,deallocate,7f00,512,0";
  (void)state;

  assert_int_equal(parse(text, AA_REPLAY_STOP, &c, NULL, err), AA_OK);
  assert_int_equal(c.n, 5);
  assert_int_equal(c.ev[0].time_ns, 36001500000000ull);
  assert_int_equal(c.ev[0].ptr, 0x1000);
  assert_int_equal(c.ev[0].line, 4);
  assert_int_equal(c.ev[1].op, 'f');
  assert_int_equal(c.ev[1].time_ns, 12);
  assert_int_equal(c.ev[1].thread, 2);
  assert_int_equal(c.ev[2].time_ns, 7000);
  assert_int_equal(c.ev[2].ptr, 0x7f00);
  assert_int_equal(c.ev[2].size, 512);
  assert_int_equal(c.ev[2].stream, 0);
  assert_int_equal(c.ev[3].op, 'a');
  assert_int_equal(c.ev[3].ptr, 4096); /* all digits: decimal */
  assert_int_equal(c.ev[3].time_ns, 5000000000ull);
  assert_int_equal(c.ev[4].time_ns, 1000000001ull);
  assert_int_equal(c.ev[4].line, 9);
}

static void test_replay_csv_header_order(void **state) {
  collect c;
  char err[AA_REPLAY_ERR_CAP];
  const char *text = "size,Extra,pointer,action\n"
                     "100,zzz,0xa00,allocate\n"
                     "100,,0xa00,deallocate\n";
  (void)state;

  assert_int_equal(parse(text, AA_REPLAY_STOP, &c, NULL, err), AA_OK);
  assert_int_equal(c.n, 2);
  assert_int_equal(c.ev[0].size, 100);
  assert_int_equal(c.ev[0].ptr, 0xa00);
  assert_int_equal(c.ev[0].time_ns, 0);
  assert_int_equal(c.ev[0].thread, 0);
  assert_int_equal(c.ev[1].op, 'f');
}

static void test_replay_csv_no_header(void **state) {
  collect c;
  char err[AA_REPLAY_ERR_CAP];
  (void)state;

  assert_int_equal(parse("1,0,allocate,0x10,5,0\n", AA_REPLAY_STOP, &c, NULL,
                         err),
                   AA_OK);
  assert_int_equal(c.n, 1);
  assert_int_equal(c.ev[0].line, 1);
  /* An empty input is fine and produces nothing. */
  assert_int_equal(parse("", AA_REPLAY_STOP, &c, NULL, err), AA_OK);
  assert_int_equal(c.n, 0);
  assert_int_equal(c.calls, 0);
  /* A repeated header (concatenated logs) is skipped. */
  assert_int_equal(parse("Thread,Time,Action,Pointer,Size,Stream\n"
                         "1,0,allocate,0x10,5,0\n"
                         "Thread,Time,Action,Pointer,Size,Stream\n"
                         "1,0,deallocate,0x10,5,0\n",
                         AA_REPLAY_STOP, &c, NULL, err),
                   AA_OK);
  assert_int_equal(c.n, 2);
}

typedef struct bad_case {
  const char *line;
  const char *expect; /* substring of the message */
  bool unknown_action;
} bad_case;

static void test_replay_csv_malformed(void **state) {
  static const bad_case cases[] = {
      {"1,0,allocate,0x10,5", "expected 6 fields, got 5", false},
      {"1,0,allocate,0x10,5,0,9", "expected 6 fields, got 7", false},
      {"x1,0,allocate,0x10,5,0", "Thread: 'x1'", false},
      {"1,abc,allocate,0x10,5,0", "Time: 'abc' is not a time", false},
      {"1,1.2.3,allocate,0x10,5,0", "Time: '1.2.3'", false},
      {"1,10:61:00,allocate,0x10,5,0", "Time: '10:61:00'", false},
      {"1,0,alloc,0x10,5,0", "unknown Action 'alloc'", true},
      {"1,0,,0x10,5,0", "unknown Action ''", true},
      {"1,0,allocate,0xZZ,5,0", "Pointer: '0xZZ'", false},
      {"1,0,allocate,,5,0", "Pointer: ''", false},
      {"1,0,allocate,0x10,-5,0", "Size: '-5' is not a size", false},
      {"1,0,allocate,0x10,5kb,0", "Size: '5kb'", false},
      {"1,0,allocate,0x10,99999999999999999999,0", "Size: '9999", false},
      {"1,0,allocate,0x10,0x11112222333344445,0", "Size:", false},
      {"1,0,allocate,0x10,5,zz", "Stream: 'zz'", false},
      {"1,0,\"allocate,0x10,5,0", "bad quoting", false},
      {"1,0,all\"ocate,0x10,5,0", "bad quoting", false},
  };
  size_t i;
  (void)state;

  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    collect c;
    aa_replay_diag d;
    char err[AA_REPLAY_ERR_CAP];
    char text[256], want[160];
    /* The bad line is line 3, after the header and one good line. */
    snprintf(text, sizeof text,
             "Thread,Time,Action,Pointer,Size,Stream\n"
             "1,0,allocate,0x20,5,0\n%s\n1,0,deallocate,0x20,5,0\n",
             cases[i].line);
    assert_int_equal(parse(text, AA_REPLAY_STOP, &c, &d, err), AA_EPARSE);
    snprintf(want, sizeof want, "line 3: ");
    if (strncmp(err, want, strlen(want)) != 0 ||
        strstr(err, cases[i].expect) == NULL)
      fail_msg("case %zu (%s): got '%s', want 'line 3: ...%s...'", i,
               cases[i].line, err, cases[i].expect);
    assert_int_equal(d.first_line, 3);
    assert_int_equal(cases[i].unknown_action ? d.unknown_action : d.malformed, 1);
    /* Stop mode delivered nothing past the bad line. */
    assert_true(c.n <= 1);

    /* Count mode: the bad line is counted and skipped, the rest goes on. */
    assert_int_equal(parse(text, AA_REPLAY_COUNT, &c, &d, err), AA_OK);
    assert_int_equal(c.n, 2);
    assert_int_equal(c.ev[1].line, 4);
    assert_int_equal(d.malformed + d.unknown_action, 1);
    assert_non_null(strstr(d.first_error, "line 3: "));
  }
}

static void test_replay_csv_nul_byte(void **state) {
  collect c;
  aa_replay_diag d;
  aa_replay_csv_options opt;
  char err[AA_REPLAY_ERR_CAP];
  static const char text[] = "1,0,allocate,0x10,5,0\n1,0,deal\0cate,0x10,5,0\n";
  (void)state;

  memset(&opt, 0, sizeof opt);
  memset(&c, 0, sizeof c);
  memset(&d, 0, sizeof d);
  assert_int_equal(aa_replay_csv_parse(text, sizeof text - 1, &opt,
                                       collect_sink, &c, &d, err, sizeof err),
                   AA_EPARSE);
  assert_non_null(strstr(err, "line 2: unknown Action 'deal?cate'"));
}

static void test_replay_csv_bad_header(void **state) {
  collect c;
  aa_replay_diag d;
  char err[AA_REPLAY_ERR_CAP];
  (void)state;

  /* A broken header stops even in count mode: the columns are unknown. */
  assert_int_equal(parse("\nThread,Time,Pointer,Size\n1,0,0x10,5\n",
                         AA_REPLAY_COUNT, &c, &d, err),
                   AA_EPARSE);
  assert_string_equal(err, "line 2: header lacks column Action");
  assert_int_equal(parse("Size,Action,Pointer,size\n", AA_REPLAY_STOP, &c, &d,
                         err),
                   AA_EPARSE);
  assert_string_equal(err, "line 1: header names column Size twice");
}

static void test_replay_csv_sink_stops(void **state) {
  collect c;
  aa_replay_csv_options opt;
  char err[AA_REPLAY_ERR_CAP];
  char *text = malloc(3000 * 32);
  size_t len = 0;
  int i;
  (void)state;

  assert_non_null(text);
  for (i = 0; i < 3000; i++)
    len += (size_t)sprintf(text + len, "1,%d,allocate,0x%x,8,0\n", i, i + 1);
  memset(&opt, 0, sizeof opt);
  memset(&c, 0, sizeof c);
  c.stop_after = 1; /* the first batch already stops */
  assert_int_equal(aa_replay_csv_parse(text, len, &opt, collect_sink, &c, NULL,
                                       err, sizeof err),
                   AA_ECLOSED);
  assert_int_equal(c.calls, 1);
  free(text);
}

static void test_replay_csv_format_roundtrip(void **state) {
  aa_replay_event in[3] = {
      {1234567890123456789ull, 0x7f0000001000ull, 4096, 0x55, 77, 0, 'a'},
      {5, 0x7f0000001000ull, 4096, 0x55, 77, 0, 'f'},
      {0, 0, 99, 0, 0, 0, 'x'}};
  char text[512];
  size_t len = 0, i;
  collect c;
  char err[AA_REPLAY_ERR_CAP];
  (void)state;

  len = (size_t)snprintf(text, sizeof text, "%s\n", AA_REPLAY_CSV_HEADER);
  for (i = 0; i < 3; i++)
    len += aa_replay_csv_format(&in[i], text + len, sizeof text - len);
  assert_int_equal(parse(text, AA_REPLAY_STOP, &c, NULL, err), AA_OK);
  assert_int_equal(c.n, 3);
  for (i = 0; i < 3; i++) {
    assert_int_equal(c.ev[i].time_ns, in[i].time_ns);
    assert_int_equal(c.ev[i].ptr, in[i].ptr);
    assert_int_equal(c.ev[i].size, in[i].size);
    assert_int_equal(c.ev[i].stream, in[i].stream);
    assert_int_equal(c.ev[i].thread, in[i].thread);
    assert_int_equal(c.ev[i].op, in[i].op);
  }
}

static void test_replay_csv_file(void **state) {
  char path[] = "/tmp/aa_replay_csv_XXXXXX";
  int fd = mkstemp(path);
  collect c;
  aa_replay_csv_options opt;
  char err[AA_REPLAY_ERR_CAP];
  const char *text = "Thread,Time,Action,Pointer,Size,Stream\n"
                     "1,0,allocate,0x10,5,0\n1,1,deallocate,0x10,5,0\n";
  (void)state;

  assert_true(fd >= 0);
  assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  close(fd);
  memset(&opt, 0, sizeof opt);
  memset(&c, 0, sizeof c);
  assert_int_equal(aa_replay_csv_parse_file(path, &opt, collect_sink, &c, NULL,
                                            err, sizeof err),
                   AA_OK);
  assert_int_equal(c.n, 2);
  unlink(path);
  assert_int_equal(aa_replay_csv_parse_file(path, &opt, collect_sink, &c, NULL,
                                            err, sizeof err),
                   AA_EIO);
  assert_non_null(strstr(err, "No such file"));
  assert_int_equal(aa_replay_csv_parse_file("/tmp", &opt, collect_sink, &c,
                                            NULL, err, sizeof err),
                   AA_EIO);
  assert_non_null(strstr(err, "directory"));
}

typedef struct prog {
  int calls;
  uint64_t last_done, total;
  bool monotone;
} prog;

static void on_progress(void *user, uint64_t done, uint64_t total) {
  prog *p = user;

  if (done < p->last_done)
    p->monotone = false;
  p->calls++;
  p->last_done = done;
  p->total = total;
}

static void test_replay_csv_progress(void **state) {
  size_t cap = 200000 * 40, len = 0;
  char *text = malloc(cap);
  aa_replay_csv_options opt;
  collect c;
  prog p = {0, 0, 0, true};
  char err[AA_REPLAY_ERR_CAP];
  int i;
  (void)state;

  assert_non_null(text);
  for (i = 0; i < 200000; i++)
    len += (size_t)snprintf(text + len, cap - len, "1,%d,allocate,0x%x,8,0\n",
                            i, i + 1);
  memset(&opt, 0, sizeof opt);
  opt.progress = on_progress;
  opt.progress_user = &p;
  memset(&c, 0, sizeof c);
  assert_int_equal(aa_replay_csv_parse(text, len, &opt, collect_sink, &c, NULL,
                                       err, sizeof err),
                   AA_OK);
  /* Between batches now and then, and once at the end with done == total. */
  assert_true(p.calls >= 2);
  assert_true(p.monotone);
  assert_int_equal(p.last_done, len);
  assert_int_equal(p.total, len);
  assert_int_equal(c.calls, (200000 + 1023) / 1024);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_replay_csv_basic),
      cmocka_unit_test(test_replay_csv_forms),
      cmocka_unit_test(test_replay_csv_bom),
      cmocka_unit_test(test_replay_csv_header_order),
      cmocka_unit_test(test_replay_csv_no_header),
      cmocka_unit_test(test_replay_csv_malformed),
      cmocka_unit_test(test_replay_csv_nul_byte),
      cmocka_unit_test(test_replay_csv_bad_header),
      cmocka_unit_test(test_replay_csv_sink_stops),
      cmocka_unit_test(test_replay_csv_format_roundtrip),
      cmocka_unit_test(test_replay_csv_file),
      cmocka_unit_test(test_replay_csv_progress),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
