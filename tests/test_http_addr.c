/*
 * test_http_addr.c — the ADAPTALLOC_HTTP address grammar
 * (aa_http_parse_address), LOCAL_RANK reading, and the strict integer parser
 * used for query arguments. Pure functions: no sockets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "adaptalloc/http.h"
#include "http_test.h" /* the server's internals, the routing checks */

typedef struct {
  const char *spec;
  int rank;
  const char *host;
  unsigned port;
  bool ipv6;
  bool loopback;
} good_case;

static void test_http_addr_accepts_documented_forms(void **state) {
  static const good_case cases[] = {
      {"127.0.0.1:9100", -1, "127.0.0.1", 9100, false, true},
      {"127.0.0.1:0", -1, "127.0.0.1", 0, false, true},
      {"127.1.2.3:80", -1, "127.1.2.3", 80, false, true},
      {"[::1]:9100", -1, "::1", 9100, true, true},
      {"[0:0:0:0:0:0:0:1]:9100", -1, "::1", 9100, true, true},
      {"[::ffff:127.0.0.1]:9", -1, "::ffff:127.0.0.1", 9, true, true},
      {":9100", -1, "127.0.0.1", 9100, false, true},
      {"9100", -1, "127.0.0.1", 9100, false, true},
      {"localhost:9100", -1, "127.0.0.1", 9100, false, true},
      {"LOCALHOST:1", -1, "127.0.0.1", 1, false, true},
      {"0.0.0.0:9100", -1, "0.0.0.0", 9100, false, false},
      {"10.1.2.3:9100", -1, "10.1.2.3", 9100, false, false},
      {"[::]:9100", -1, "::", 9100, true, false},
      {"127.0.0.1:9100+rank", -1, "127.0.0.1", 9100, false, true},
      {"127.0.0.1:9100+rank", 0, "127.0.0.1", 9100, false, true},
      {"127.0.0.1:9100+rank", 3, "127.0.0.1", 9103, false, true},
      {"127.0.0.1:9100+RANK", 7, "127.0.0.1", 9107, false, true},
      {"[::1]:9100+rank", 2, "::1", 9102, true, true},
      {":9100+rank", 1, "127.0.0.1", 9101, false, true},
      {"127.0.0.1:0+rank", 5, "127.0.0.1", 0, false, true},
      {"127.0.0.1:65535", -1, "127.0.0.1", 65535, false, true},
      {"127.0.0.1:65530+rank", 5, "127.0.0.1", 65535, false, true},
      {"127.0.0.1:9100", 4, "127.0.0.1", 9100, false, true}, /* no +rank */
  };
  size_t i;
  (void)state;
  for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    aa_http_addr a;
    char err[256];
    int rc = aa_http_parse_address(cases[i].spec, cases[i].rank, &a, err,
                                   sizeof err);
    if (rc != AA_OK)
      fail_msg("'%s' refused: %s", cases[i].spec, err);
    assert_false(a.off);
    assert_string_equal(a.host, cases[i].host);
    assert_int_equal(a.port, cases[i].port);
    assert_int_equal(a.ipv6, cases[i].ipv6);
    assert_int_equal(a.loopback, cases[i].loopback);
    assert_string_equal(err, "");
  }
}

static void test_http_addr_off(void **state) {
  aa_http_addr a;
  (void)state;
  assert_int_equal(aa_http_parse_address("off", -1, &a, NULL, 0), AA_OK);
  assert_true(a.off);
  assert_int_equal(aa_http_parse_address("OFF", 3, &a, NULL, 0), AA_OK);
  assert_true(a.off);
}

static void test_http_addr_refuses_bad_forms(void **state) {
  static const char *const bad[] = {
      "",
      "127.0.0.1", /* no port */
      "127.0.0.1:",
      "127.0.0.1:65536",
      "127.0.0.1:99999",
      "127.0.0.1:-1",
      "127.0.0.1:9100x",
      "127.0.0.1: 9100",
      " 127.0.0.1:9100",
      "127.0.0.256:9100",
      "example.com:9100", /* no DNS at start-up */
      "::1:9100",         /* IPv6 needs brackets */
      "[::1]9100",
      "[::1]",
      "[::1:9100",
      "[127.0.0.1]:9100",
      "[zz::1]:9100",
      "127.0.0.1:9100+",
      "127.0.0.1:9100+ranks",
      "127.0.0.1:9100+1",
      "127.0.0.1+rank:9100",
      "+rank",
      "offf",
      "http://127.0.0.1:9100",
      "127.0.0.1:123456",
      ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
       "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa:1"),
  };
  size_t i;
  (void)state;
  for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    aa_http_addr a;
    char err[256];
    memset(&a, 0x5a, sizeof a);
    int rc = aa_http_parse_address(bad[i], -1, &a, err, sizeof err);
    if (rc != AA_EINVAL)
      fail_msg("'%s' accepted (rc %d)", bad[i], rc);
    assert_true(strlen(err) > 0);
    assert_non_null(strstr(err, "bad address"));
    /* out is zeroed on failure */
    assert_false(a.off);
    assert_int_equal(a.port, 0);
    assert_string_equal(a.host, "");
  }
}

static void test_http_addr_rank_overflow(void **state) {
  aa_http_addr a;
  char err[256];
  (void)state;
  assert_int_equal(
      aa_http_parse_address("127.0.0.1:65535+rank", 1, &a, err, sizeof err),
      AA_EINVAL);
  assert_non_null(strstr(err, "65535"));
  assert_int_equal(
      aa_http_parse_address("127.0.0.1:9100+rank", 70000, &a, err, sizeof err),
      AA_EINVAL);
}

static void test_http_addr_null_args(void **state) {
  aa_http_addr a;
  char err[64];
  (void)state;
  assert_int_equal(aa_http_parse_address(NULL, -1, &a, err, sizeof err),
                   AA_EINVAL);
  assert_int_equal(aa_http_parse_address("127.0.0.1:1", -1, NULL, NULL, 0),
                   AA_EINVAL);
  /* a tiny error buffer is still NUL-terminated */
  assert_int_equal(aa_http_parse_address("nope", -1, &a, err, 4), AA_EINVAL);
  assert_int_equal(strlen(err), 3);
}

static void test_http_addr_local_rank_env(void **state) {
  int rank = 99;
  (void)state;
  unsetenv("LOCAL_RANK");
  assert_int_equal(aa_http_local_rank_from_env(&rank), AA_OK);
  assert_int_equal(rank, -1);
  setenv("LOCAL_RANK", "", 1);
  assert_int_equal(aa_http_local_rank_from_env(&rank), AA_OK);
  assert_int_equal(rank, -1);
  setenv("LOCAL_RANK", "3", 1);
  assert_int_equal(aa_http_local_rank_from_env(&rank), AA_OK);
  assert_int_equal(rank, 3);
  setenv("LOCAL_RANK", "-2", 1);
  assert_int_equal(aa_http_local_rank_from_env(&rank), AA_EINVAL);
  assert_int_equal(rank, -1);
  setenv("LOCAL_RANK", "3x", 1);
  assert_int_equal(aa_http_local_rank_from_env(&rank), AA_EINVAL);
  setenv("LOCAL_RANK", "65536", 1);
  assert_int_equal(aa_http_local_rank_from_env(&rank), AA_EINVAL);
  unsetenv("LOCAL_RANK");
}

static void test_http_addr_parse_i64(void **state) {
  int64_t v;
  (void)state;
  assert_int_equal(aa__http_parse_i64("0", 0, 10, &v), AA_OK);
  assert_int_equal(v, 0);
  assert_int_equal(aa__http_parse_i64("10", 0, 10, &v), AA_OK);
  assert_int_equal(v, 10);
  assert_int_equal(aa__http_parse_i64("11", 0, 10, &v), AA_ERANGE);
  /* no sign where only non-negative values are valid ("-0" like "-1") */
  assert_int_equal(aa__http_parse_i64("-1", 0, 10, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64("-0", 0, 10, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64("+1", 0, 10, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64("-0", -10, 10, &v), AA_OK);
  assert_int_equal(aa__http_parse_i64("-5", -10, 10, &v), AA_OK);
  assert_int_equal(v, -5);
  assert_int_equal(aa__http_parse_i64("9223372036854775807", 0, INT64_MAX, &v),
                   AA_OK);
  assert_true(v == INT64_MAX);
  assert_int_equal(aa__http_parse_i64("9223372036854775808", 0, INT64_MAX, &v),
                   AA_ERANGE);
  assert_int_equal(
      aa__http_parse_i64("-9223372036854775808", INT64_MIN, 0, &v), AA_OK);
  assert_true(v == INT64_MIN);
  assert_int_equal(aa__http_parse_i64("", 0, 10, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64("-", -10, 10, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64("1 ", 0, 10, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64(" 1", 0, 10, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64("+1", 0, 10, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64("0x1", 0, 10, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64("1e3", 0, 10000, &v), AA_EINVAL);
  assert_int_equal(aa__http_parse_i64(NULL, 0, 10, &v), AA_EINVAL);
}

static void test_http_addr_token_compare(void **state) {
  (void)state;
  assert_true(aa__http_token_equal("secret", 6, "secret", 6));
  assert_false(aa__http_token_equal("secreT", 6, "secret", 6));
  assert_false(aa__http_token_equal("secre", 5, "secret", 6));
  assert_false(aa__http_token_equal("secrets", 7, "secret", 6));
  assert_false(aa__http_token_equal("", 0, "secret", 6));
  assert_false(aa__http_token_equal("secret\0", 7, "secret", 6));
}

/* Without a token only canonical loopback Host forms count: inet_aton's
 * other readings of 127/8 (127.1, 127.000.0.1, 127.0000) do not. */
static void test_http_addr_host_loopback_canonical(void **state) {
  static const char *yes[] = {"127.0.0.1", "127.0.0.2", "127.255.255.255", "127.10.0.1"};
  static const char *no[] = {"127.000.0.1", "127.1", "127.0000", "127.0.0.01", "127.0.0.256",
                             "127.0.0.1.", "127..0.1", "127.0.0.1.5", "0x7f.0.0.1",
                             "0177.0.0.1", "127.0.0.1x", "127.0.0", "127", "128.0.0.1",
                             "127.0.0.1000", "127.-1.0.1", ""};
  (void)state;
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
    if (!aa__http_canonical_loopback4(yes[i]))
      fail_msg("%s should be loopback", yes[i]);
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
    if (aa__http_canonical_loopback4(no[i]))
      fail_msg("%s should not be loopback", no[i]);
}

/* If-None-Match is a list of entity tags, each compared whole (weakly). */
static void test_http_addr_if_none_match_list(void **state) {
  (void)state;
  assert_true(aa__http_if_none_match_hits("\"3\"", "\"3\""));
  assert_true(aa__http_if_none_match_hits("W/\"3\"", "\"3\""));
  assert_true(aa__http_if_none_match_hits("\"1\", \"3\"", "\"3\""));
  assert_true(aa__http_if_none_match_hits("\"1\",W/\"3\" ,\"9\"", "\"3\""));
  assert_true(aa__http_if_none_match_hits("*", "\"3\""));
  assert_false(aa__http_if_none_match_hits("x\"3\"y", "\"3\""));
  assert_false(aa__http_if_none_match_hits("\"3\"y", "\"3\""));
  assert_false(aa__http_if_none_match_hits("\"33\"", "\"3\""));
  assert_false(aa__http_if_none_match_hits("\"13\"", "\"3\""));
  assert_false(aa__http_if_none_match_hits("3", "\"3\""));
  assert_false(aa__http_if_none_match_hits("\"3", "\"3\""));
  assert_false(aa__http_if_none_match_hits("w/\"3\"", "\"3\""));
  assert_false(aa__http_if_none_match_hits("\"1\" \"3\"", "\"3\"")); /* no comma */
  assert_false(aa__http_if_none_match_hits("**", "\"3\""));
  assert_false(aa__http_if_none_match_hits("", "\"3\""));
  assert_false(aa__http_if_none_match_hits(NULL, "\"3\""));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_http_addr_host_loopback_canonical),
      cmocka_unit_test(test_http_addr_if_none_match_list),
      cmocka_unit_test(test_http_addr_accepts_documented_forms),
      cmocka_unit_test(test_http_addr_off),
      cmocka_unit_test(test_http_addr_refuses_bad_forms),
      cmocka_unit_test(test_http_addr_rank_overflow),
      cmocka_unit_test(test_http_addr_null_args),
      cmocka_unit_test(test_http_addr_local_rank_env),
      cmocka_unit_test(test_http_addr_parse_i64),
      cmocka_unit_test(test_http_addr_token_compare),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
