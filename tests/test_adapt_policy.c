/*
 * test_adapt_policy.c — the policy model: defaults, a table of bad documents
 * each with its exact error, round trips, RFC 7386 merge patch, the class
 * table a policy implies, and every example under policies/.
 *
 * One concern, the policy model (one ctest), kept in one file though it runs
 * past 600 lines; the cmocka table at its end lists every case.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "adaptalloc/policy.h"

#include "cJSON.h"
#include "policy_test.h" /* the policy model: aa__json_merge_patch */

static aa_policy *parse_ok(const char *doc) {
  char err[AA_POLICY_ERR_CAP] = "";
  aa_policy *p = NULL;
  int rc = aa_policy_parse(doc, strlen(doc), &p, err, sizeof err);
  if (rc != AA_OK)
    print_error("unexpected parse error: %s\n  doc: %s\n", err, doc);
  assert_int_equal(rc, AA_OK);
  assert_non_null(p);
  return p;
}

static void test_adapt_policy_default_is_empty_object(void **state) {
  aa_policy *d = NULL, *e;
  aa_adapt_params a;
  aa_telemetry_params t;
  (void)state;
  assert_int_equal(aa_policy_default(&d), AA_OK);
  e = parse_ok("{}");
  assert_true(aa_policy_equal(d, e));
  assert_int_equal(aa_policy_version(d), 0);
  aa_policy_adapt_params(d, &a);
  assert_true(a.enabled);
  assert_int_equal(a.interval_ms, 1000);
  assert_int_equal(a.max_classes, 64);
  assert_true(a.waste_threshold > 0.09 && a.waste_threshold < 0.11);
  aa_policy_telemetry_params(d, &t);
  assert_int_equal(t.snapshot_interval_ms, 1000);
  assert_false(t.trace);
  assert_true(t.histogram);
  assert_int_equal(t.retention_bytes, 1024ull * 1024 * 1024);
  assert_int_equal(t.retention_age_s, 7ull * 24 * 3600);
  aa_policy_adapt_params(NULL, &a);
  assert_int_equal(a.interval_ms, 1000);
  aa_policy_free(d);
  aa_policy_free(e);
}

typedef struct bad_doc {
  const char *doc;
  int rc;
  const char *msg; /* exact substring of the error */
} bad_doc;

#define POOL(x) "{\"pools\": {\"device\": " x "}}"

static const bad_doc bad_docs[] = {
    {"", AA_EPARSE, "(root): empty document"},
    {"{", AA_EPARSE, "(root): malformed JSON at line 1, column 1"},
    {"{\n  \"name\": \"x\",\n  ]\n}", AA_EPARSE,
     "(root): malformed JSON at line 3, column 4"},
    {"{\"name\": \"x\"} x", AA_EPARSE,
     "(root): unexpected data after the document at line 1, column 15"},
    {"{\"name\": \"a\xff\"}", AA_EPARSE, "(root): invalid UTF-8 at byte offset 11"},
    {"{\"name\": \"\xc0\xaf\"}", AA_EPARSE, "(root): invalid UTF-8 at byte offset 10"},
    {"{\"name\": \"\xed\xa0\x80\"}", AA_EPARSE,
     "(root): invalid UTF-8 at byte offset 10"},
    {"{\"name\": \"\xe2\x82\"}", AA_EPARSE, "(root): invalid UTF-8 at byte offset 10"},
    /* strict JSON (RFC 8259): what cJSON alone would accept */
    {"{\"version\": 0100}", AA_EPARSE,
     "(root): not strict JSON: a number with a leading zero at line 1, column 14"},
    {"{\"version\": 1.}", AA_EPARSE, "without digits after '.'"},
    {"{\"version\": -}", AA_EPARSE, "(root): malformed JSON"},
    {"{\"name\": \"a\x01b\"}", AA_EPARSE, "a raw control byte inside a string"},
    {"{\"name\": \"a\tb\"}", AA_EPARSE, "a raw control byte inside a string"},
    {"{\"name\": \"a\\u0000b\"}", AA_EPARSE,
     "the escape \\u0000 (a NUL) inside a string or key"},
    {"{\"adapt\\u0000\": {}}", AA_EPARSE, "the escape \\u0000"},
    {"{\"name\": \"\\udc00\"}", AA_EPARSE, "(root): malformed JSON"},
    {"\xef\xbb\xbf\xef\xbb\xbf{}", AA_EPARSE, "a byte-order mark after the start"},
    {"{\"\xc4\x85"
     "dapt\": {}}",
     AA_EINVAL, "\xc4\x85"
                "dapt: unknown key"},
    {POOL("{\"limit_bytes\": 18446744073709551616}"), AA_EINVAL,
     "pools.device.limit_bytes: 18446744073709551616 is beyond 2^53"},
    {"[]", AA_EINVAL, "(root): expected an object, got an array"},
    {"42", AA_EINVAL, "(root): expected an object, got a number"},
    {POOL("{\"slab_size\": 2097152, \"slab_size\": 2097152}"), AA_EINVAL,
     "pools.device.slab_size: duplicate key"},
    {"{\"name\": \"a\", \"n\\u0061me\": \"b\"}", AA_EINVAL, "name: duplicate key"},
    {"{\"pool\": {}}", AA_EINVAL, "pool: unknown key (did you mean \"pools\"?)"},
    {POOL("{\"slab_sise\": 2097152}"), AA_EINVAL,
     "pools.device.slab_sise: unknown key (did you mean \"slab_size\"?)"},
    {"{\"pools\": {\"gpu\": {}}}", AA_EINVAL, "pools.gpu: unknown key"},
    {"{\"pools\": []}", AA_EINVAL, "pools: expected an object, got an array"},
    {POOL("{\"slab_size\": \"2M\"}"), AA_EINVAL,
     "pools.device.slab_size: expected an integer, got a string"},
    {POOL("{\"slab_size\": 1.5}"), AA_EINVAL,
     "pools.device.slab_size: 1.5 is not an integer"},
    {POOL("{\"slab_size\": -65536}"), AA_EINVAL,
     "pools.device.slab_size: -65536 is negative"},
    {POOL("{\"slab_size\": 1e300}"), AA_EINVAL,
     "pools.device.slab_size: 1e300 is beyond 2^53"},
    {POOL("{\"limit_bytes\": 9007199254740994}"), AA_EINVAL,
     "pools.device.limit_bytes: 9007199254740994 is beyond 2^53"},
    {POOL("{\"slab_size\": 100000}"), AA_EINVAL,
     "pools.device.slab_size: 100000 is not a multiple of 65536"},
    {POOL("{\"slab_size\": 4294967296}"), AA_EINVAL,
     "pools.device.slab_size: 4294967296 is out of range [65536, 1073741824]"},
    {POOL("{\"classes\": [512, 1024, 1536, 1000, 1048576]}"), AA_EINVAL,
     "pools.device.classes[3]: 1000 is not a multiple of 512"},
    {POOL("{\"classes\": [512, 2048, 1024]}"), AA_EINVAL,
     "pools.device.classes[2]: 1024 is not larger than the previous class 2048"},
    {POOL("{\"classes\": []}"), AA_EINVAL, "pools.device.classes: the class list is empty"},
    {POOL("{\"max_small\": 524288, \"classes\": [512, 1048576]}"), AA_EINVAL,
     "pools.device.classes[1]: the largest class 1048576 is not max_small 524288"},
    {POOL("{\"classes\": \"ladder\"}"), AA_EINVAL,
     "pools.device.classes: expected an array of block sizes or a ladder object"},
    {POOL("{\"classes\": [512, true]}"), AA_EINVAL,
     "pools.device.classes[1]: expected a block size or a {size, cache_limit, "
     "prefill} object, got a boolean"},
    {POOL("{\"classes\": [{\"cache_limit\": 3}]}"), AA_EINVAL,
     "pools.device.classes[0]: missing required key \"size\""},
    {POOL("{\"classes\": [{\"size\": 512, \"prefil\": 3}]}"), AA_EINVAL,
     "pools.device.classes[0].prefil: unknown key (did you mean \"prefill\"?)"},
    {POOL("{\"classes\": [{\"size\": 700}]}"), AA_EINVAL,
     "pools.device.classes[0].size: 700 is not a multiple of 512"},
    {POOL("{\"slab_size\": 65536, \"classes\": [512, 131072]}"), AA_EINVAL,
     "pools.device.slab_size: 65536 is smaller than the largest class 131072"},
    {POOL("{\"max_small\": 4194304}"), AA_EINVAL,
     "pools.device.max_small: 4194304 is larger than slab_size 2097152"},
    {POOL("{\"classes\": {\"min\": 1024, \"max\": 524288}, \"max_small\": 1048576}"),
     AA_EINVAL, "pools.device.classes.max: 524288 is not max_small 1048576"},
    {POOL("{\"classes\": {\"per_doubling\": 0}}"), AA_EINVAL,
     "pools.device.classes.per_doubling: 0 is out of range [1, 16]"},
    {POOL("{\"slab_size\": 268435456, \"classes\": {\"max\": 268435456, "
          "\"per_doubling\": 16}}"),
     AA_EINVAL, "pools.device.classes: the ladder has 256 classes, more than 128"},
    {POOL("{\"slab_size\": 1073741824, \"max_small\": 536870912}"), AA_EINVAL,
     "pools.device.max_small: 536870912 is out of range [512, 268435456]"},
    {POOL("{\"classes\": {\"min\": 2097152}}"), AA_EINVAL,
     "pools.device.classes.min: 2097152 is larger than max_small 16384"},
    {POOL("{\"large\": {\"page_bytes\": 3145728}}"), AA_EINVAL,
     "pools.device.large.page_bytes: 3145728 is not 0 or a power of two from 2097152 to "
     "1073741824"},
    {POOL("{\"large\": {\"page_bytes\": 1048576}}"), AA_EINVAL,
     "pools.device.large.page_bytes: 1048576 is not 0 or a power of two from 2097152 to "
     "1073741824"},
    {POOL("{\"large\": {\"page_bytes\": 2147483648}}"), AA_EINVAL,
     "pools.device.large.page_bytes: 2147483648 is out of range [0, 1073741824]"},
    {POOL("{\"large\": {\"map_runs\": 1}}"), AA_EINVAL,
     "pools.device.large.map_runs: expected true or false, got a number"},
    {POOL("{\"large\": {\"stream_wait\": \"off\"}}"), AA_EINVAL,
     "pools.device.large.stream_wait: expected true or false, got a string"},
    {POOL("{\"large\": {\"map_run\": true}}"), AA_EINVAL,
     "pools.device.large.map_run: unknown key (did you mean \"map_runs\"?)"},
    {POOL("{\"large\": {\"stitch_grow\": true}}"), AA_EINVAL,
     "pools.device.large.stitch_grow: needs large.stitch true"},
    {POOL("{\"large\": {\"stitch\": false, \"stitch_grow\": true}}"), AA_EINVAL,
     "pools.device.large.stitch_grow: needs large.stitch true"},
    {POOL("{\"large\": {\"stitch\": true, \"stitch_grow\": 1}}"), AA_EINVAL,
     "pools.device.large.stitch_grow: expected true or false, got a number"},
    {POOL("{\"large\": {\"stitch\": true, \"stitch_share\": 0}}"), AA_EINVAL,
     "pools.device.large.stitch_share: 0 is out of range (0, 1]"},
    {POOL("{\"large\": {\"stitch\": true, \"stitch_share\": 1.5}}"), AA_EINVAL,
     "pools.device.large.stitch_share: 1.5 is out of range (0, 1]"},
    {POOL("{\"large\": {\"stitch\": true, \"stitch_share\": \"1%\"}}"), AA_EINVAL,
     "pools.device.large.stitch_share: expected a number, got a string"},
    {POOL("{\"large\": {\"map_run_pages\": 0}}"), AA_EINVAL,
     "pools.device.large.map_run_pages: 0 is out of range [1, 16]"},
    {POOL("{\"large\": {\"map_run_pages\": 17}}"), AA_EINVAL,
     "pools.device.large.map_run_pages: 17 is out of range [1, 16]"},
    {POOL("{\"large\": {\"map_run_pages\": true}}"), AA_EINVAL,
     "pools.device.large.map_run_pages: expected"},
    {POOL("{\"large\": {\"map_run_pages\": 2.5}}"), AA_EINVAL,
     "pools.device.large.map_run_pages:"},
    {POOL("{\"large\": {\"map_run_min_bytes\": -1}}"), AA_EINVAL,
     "pools.device.large.map_run_min_bytes:"},
    {POOL("{\"large\": {\"map_run_min_byte\": 1}}"), AA_EINVAL,
     "pools.device.large.map_run_min_byte: unknown key (did you mean \"map_run_min_bytes\"?)"},
    {"{\"pools\": {\"host\": {\"large\": {\"mode\": \"lru\"}}}}", AA_EINVAL,
     "pools.host.large.mode: \"lru\" is not one of \"cache\", \"passthrough\", \"expandable\""},
    {POOL("{\"limit_bytes\": 1000}"), AA_EINVAL,
     "pools.device.limit_bytes: 1000 is below one slab (slab_size 2097152)"},
    {POOL("{\"limit_bytes\": 4194304, \"classes\": [{\"size\": 1048576, "
          "\"prefill\": 100}]}"),
     AA_EINVAL,
     "pools.device.classes[0].prefill: prefill brings the pool's prefilled bytes "
     "to 104857600, over limit_bytes 4194304"},
    {POOL("{\"tcache\": {\"blocks\": 1000000}}"), AA_EINVAL,
     "pools.device.tcache.blocks: 1000000 is out of range [0, 65536]"},
    {"{\"adapt\": {\"hot_fraction\": 0}}", AA_EINVAL,
     "adapt.hot_fraction: 0 is out of range (0, 1]"},
    {"{\"adapt\": {\"waste_threshold\": 1.5}}", AA_EINVAL,
     "adapt.waste_threshold: 1.5 is out of range [0, 1)"},
    {"{\"adapt\": {\"interval_ms\": 5}}", AA_EINVAL,
     "adapt.interval_ms: 5 is out of range [10, 3600000]"},
    {"{\"adapt\": {\"interval_ms\": null}}", AA_EINVAL,
     "adapt.interval_ms: expected an integer, got null"},
    {"{\"adapt\": {\"enabled\": \"yes\"}}", AA_EINVAL,
     "adapt.enabled: expected true or false, got a string"},
    {"{\"adapt\": {\"hysteresis\": {\"readd_cooldwn\": 3}}}", AA_EINVAL,
     "adapt.hysteresis.readd_cooldwn: unknown key (did you mean \"readd_cooldown\"?)"},
    {"{\"telemetry\": {\"histogram\": false}}", AA_EINVAL,
     "adapt.enabled: the loop needs telemetry.histogram (heavy hitters) to be true"},
    {"{\"telemetry\": {\"retention\": {\"max_bytes\": 1000}}}", AA_EINVAL,
     "telemetry.retention.max_bytes: 1000 is below the 1 MiB minimum"},
    {"{\"telemetry\": {\"snapshot_interval_ms\": 99}}", AA_EINVAL,
     "telemetry.snapshot_interval_ms: 99 is out of range [100, 86400000]"},
    {"{\"version\": -1}", AA_EINVAL, "version: -1 is negative"},
    {"{\"version\": 1e16}", AA_EINVAL, "version: 1e16 is beyond 2^53"},
    {"{\"$schema\": 3}", AA_EINVAL, "$schema: expected a string, got a number"},
    {"{\"pools\": {\"regions\": []}}", AA_EINVAL,
     "pools.regions: expected an object of region sections, got an array"},
    {"{\"pools\": {\"regions\": {\"kv cache\": {}}}}", AA_EINVAL,
     "pools.regions.kv cache: not a region name: a region name holds only ASCII "
     "letters, digits, '_' and '-' (byte 2 is not one)"},
    {"{\"pools\": {\"regions\": {\"9kv\": {}}}}", AA_EINVAL,
     "pools.regions.9kv: not a region name: a region name starts with an ASCII letter"},
    {"{\"pools\": {\"regions\": {\"a23456789012345678901\": {}}}}", AA_EINVAL,
     "pools.regions.a23456789012345678901: not a region name: a region name is at "
     "most 20 bytes"},
    {"{\"pools\": {\"regions\": {\"\": {}}}}", AA_EINVAL,
     "pools.regions.: not a region name: a region name is empty"},
    {"{\"pools\": {\"regions\": {\"kv\": 3}}}", AA_EINVAL,
     "pools.regions.kv: expected an object, got a number"},
    {"{\"pools\": {\"regions\": {\"kv\": {\"limt_bytes\": 3}}}}", AA_EINVAL,
     "pools.regions.kv.limt_bytes: unknown key (did you mean \"limit_bytes\"?)"},
    {"{\"pools\": {\"regions\": {\"kv\": {\"limit_bytes\": 1000}}}}", AA_EINVAL,
     "pools.regions.kv.limit_bytes: 1000 is below one slab (slab_size 2097152)"},
    {"{\"pools\": {\"regions\": {\"kv\": {}, \"kv\": {}}}}", AA_EINVAL,
     "pools.regions.kv: duplicate key"},
    {"{\"pools\": {\"regions\": {\"r1\": {}, \"r2\": {}, \"r3\": {}, \"r4\": {}, "
     "\"r5\": {}, \"r6\": {}, \"r7\": {}, \"r8\": {}, \"r9\": {}, \"r10\": {}, "
     "\"r11\": {}, \"r12\": {}, \"r13\": {}, \"r14\": {}, \"r15\": {}, \"r16\": {}, "
     "\"r17\": {}}}}",
     AA_EINVAL, "pools.regions: 17 regions, more than 16"},
    {"{\"pools\": {\"regions\": {\"kv\": {\"classes\": [{\"size\": 1048576, "
     "\"prefill\": 100}], \"slab_size\": 2097152}}}}",
     AA_EINVAL,
     "pools.regions.kv.classes[0].prefill: prefill brings the pool's prefilled "
     "bytes to 104857600, over adapt.prefill_max_bytes"},
};

static void test_adapt_policy_bad_documents(void **state) {
  size_t n = sizeof bad_docs / sizeof bad_docs[0];
  (void)state;
  assert_true(n >= 30);
  for (size_t i = 0; i < n; i++) {
    char err[AA_POLICY_ERR_CAP] = "";
    aa_policy *p = (aa_policy *)&err; /* must be cleared */
    int rc = aa_policy_parse(bad_docs[i].doc, strlen(bad_docs[i].doc), &p, err,
                             sizeof err);
    if (rc != bad_docs[i].rc || strstr(err, bad_docs[i].msg) == NULL)
      print_error("case %zu: rc %d (want %d)\n  got:  %s\n  want: %s\n", i, rc,
                  bad_docs[i].rc, err, bad_docs[i].msg);
    assert_int_equal(rc, bad_docs[i].rc);
    assert_non_null(strstr(err, bad_docs[i].msg));
    assert_null(p);
  }
}

/* Start-up files get the same strictness as HTTP bodies, and what is not a
 * regular file is refused without blocking (a FIFO with no writer). */
static void test_adapt_policy_load_file_strict(void **state) {
  char dir[] = "/tmp/aa-policy-file-XXXXXX", path[128], fifo[128], err[512];
  aa_policy *p = (aa_policy *)1;
  FILE *f;
  (void)state;
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/double-bom.json", dir);
  f = fopen(path, "wb");
  assert_non_null(f);
  fputs("\xef\xbb\xbf\xef\xbb\xbf{\"name\": \"x\"}", f);
  fclose(f);
  assert_int_equal(aa_policy_load_file(path, &p, err, sizeof err), AA_EPARSE);
  assert_null(p);
  assert_non_null(strstr(err, "byte-order mark"));
  assert_non_null(strstr(err, path));
  f = fopen(path, "wb");
  assert_non_null(f);
  fputs("{\"version\": 007}", f);
  fclose(f);
  assert_int_equal(aa_policy_load_file(path, &p, err, sizeof err), AA_EPARSE);
  assert_non_null(strstr(err, "leading zero"));
  snprintf(fifo, sizeof fifo, "%s/policy.fifo", dir);
  assert_int_equal(mkfifo(fifo, 0600), 0);
  assert_int_equal(aa_policy_load_file(fifo, &p, err, sizeof err), AA_EINVAL);
  assert_non_null(strstr(err, "not a regular file (a FIFO)"));
  assert_int_equal(aa_policy_load_file(dir, &p, err, sizeof err), AA_EINVAL);
  assert_non_null(strstr(err, "a directory"));
  unlink(fifo);
  unlink(path);
  rmdir(dir);
}

/* Complete policies (docs/policy.md): aa_policy_missing names, in order,
 * the parts a whole policy must have and a document leaves out; the
 * _complete forms of parse and load_file refuse such a document (a file's
 * path first) and return nothing; regions and the fields inside a part stay
 * optional; a written policy is always complete. */
static void test_adapt_policy_complete(void **state) {
  static const char whole[] =
      "{\"pools\": {\"device\": {}, \"pinned\": {}, \"host\": {}}, \"adapt\": {},"
      " \"telemetry\": {}}";
  char miss[AA_POLICY_ERR_CAP], err[AA_POLICY_ERR_CAP + 128], dir[] = "/tmp/aa-complete-XXXXXX",
                                                              path[128];
  aa_policy *p = (aa_policy *)1, *d = NULL;
  size_t n = 99;
  char *j;
  FILE *f;
  (void)state;

  assert_int_equal(aa_policy_missing("{\"version\": 1}", 14, &n, miss, sizeof miss), AA_OK);
  assert_int_equal(n, 5);
  assert_string_equal(miss, AA_POLICY_COMPLETE_PARTS);
  {
    static const char some[] = "{\"pools\": {\"host\": {}, \"regions\": {}}, \"telemetry\": {}}";
    assert_int_equal(aa_policy_missing(some, strlen(some), &n, miss, sizeof miss), AA_OK);
  }
  assert_int_equal(n, 3);
  assert_string_equal(miss, "pools.device, pools.pinned, adapt");
  assert_int_equal(aa_policy_missing(whole, strlen(whole), &n, miss, sizeof miss), AA_OK);
  assert_int_equal(n, 0);
  assert_string_equal(miss, "");
  /* a short buffer still gets the count */
  assert_int_equal(aa_policy_missing("{}", 2, &n, miss, 8), AA_OK);
  assert_int_equal(n, 5);
  assert_int_equal(aa_policy_missing("{}", 2, &n, NULL, 0), AA_OK);
  assert_int_equal(n, 5);
  /* not a document: its error, no count */
  assert_int_equal(aa_policy_missing("{", 1, &n, miss, sizeof miss), AA_EPARSE);
  assert_int_equal(n, 0);
  assert_int_equal(aa_policy_missing("[]", 2, &n, miss, sizeof miss), AA_EINVAL);
  assert_string_equal(miss, "(root): expected an object");

  assert_int_equal(aa_policy_parse_complete("{\"version\": 1}", 14, &p, err, sizeof err),
                   AA_EINVAL);
  assert_null(p);
  assert_string_equal(err, "(root): not a complete policy: missing pools.device, "
                           "pools.pinned, pools.host, adapt, telemetry (a whole policy "
                           "names pools.device, pools.pinned, pools.host, adapt, "
                           "telemetry)");
  /* a rule broken inside comes first */
  {
    static const char bad[] = "{\"adapt\": {\"interval_ms\": 1}}";
    assert_int_equal(aa_policy_parse_complete(bad, strlen(bad), &p, err, sizeof err), AA_EINVAL);
  }
  assert_non_null(strstr(err, "adapt.interval_ms"));
  assert_int_equal(aa_policy_parse_complete(whole, strlen(whole), &p, err, sizeof err), AA_OK);
  assert_int_equal(aa_policy_default(&d), AA_OK);
  assert_true(aa_policy_equal(p, d)); /* "{}" parts: their defaults */
  /* what the writer writes is complete */
  j = aa_policy_to_json(d);
  assert_int_equal(aa_policy_missing(j, strlen(j), &n, miss, sizeof miss), AA_OK);
  assert_int_equal(n, 0);
  free(j);
  aa_policy_free(p);
  aa_policy_free(d);

  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/partial.json", dir);
  f = fopen(path, "wb");
  assert_non_null(f);
  fputs("{\"name\": \"partial\", \"pools\": {\"device\": {}}, \"adapt\": {}}", f);
  fclose(f);
  p = (aa_policy *)1;
  assert_int_equal(aa_policy_load_file_complete(path, &p, err, sizeof err), AA_EINVAL);
  assert_null(p);
  assert_ptr_equal(strstr(err, path), err);
  assert_non_null(strstr(err, "partial.json: (root): not a complete policy: missing "
                              "pools.pinned, pools.host, telemetry"));
  /* the plain loader still takes it (the replay tool reads such files) */
  assert_int_equal(aa_policy_load_file(path, &p, err, sizeof err), AA_OK);
  aa_policy_free(p);
  unlink(path);
  rmdir(dir);
}

/* ---------------------------------------------------- numbers as written */

/* A document {"<key>": <num>} in section `sect` ("adapt", "pools.device"),
 * malloc'd. */
static char *doc_with(const char *sect, const char *key, const char *num) {
  size_t n = strlen(num) + 128;
  char *d = malloc(n);
  assert_non_null(d);
  if (strcmp(sect, "pools.device") == 0)
    snprintf(d, n, "{\"pools\": {\"device\": {\"%s\": %s}}}", key, num);
  else
    snprintf(d, n, "{\"%s\": {\"%s\": %s}}", sect, key, num);
  return d;
}

/* digits of the given count, "1234567890..." (first digit never 0) */
static char *digits(size_t n, const char *sign) {
  size_t k = strlen(sign);
  char *s = malloc(k + n + 1);
  assert_non_null(s);
  memcpy(s, sign, k);
  for (size_t i = 0; i < n; i++)
    s[k + i] = (char)('1' + (i % 9));
  s[k + n] = '\0';
  return s;
}

/* Every message of every entry point quotes the number as written: parse
 * (whole, _msg), parse into a buffer of len + 1024, merge patch (_msg and
 * buffer) and load_file (_msg). want_rule follows the number. */
static void expect_quoted(const char *doc, const char *num, const char *want_rule) {
  size_t len = strlen(doc), cap = len + 1024;
  char *want = malloc(strlen(num) + strlen(want_rule) + 4);
  char *msg = NULL, *buf = malloc(cap);
  aa_policy *p = (aa_policy *)&msg, *base = NULL;
  int rc;
  assert_non_null(want);
  assert_non_null(buf);
  sprintf(want, "%s %s", num, want_rule);

  rc = aa_policy_parse_msg(doc, len, &p, &msg);
  if (rc == AA_OK || msg == NULL || strstr(msg, want) == NULL)
    print_error("parse_msg: rc %d\n  got:  %.400s\n  want: %.400s\n", rc,
                msg ? msg : "(null)", want);
  assert_int_not_equal(rc, AA_OK);
  assert_null(p);
  assert_non_null(msg);
  assert_non_null(strstr(msg, want));
  free(msg);
  msg = NULL;

  buf[0] = '\0';
  assert_int_not_equal(aa_policy_parse(doc, len, &p, buf, cap), AA_OK);
  if (strstr(buf, want) == NULL)
    print_error("parse: got %.400s\n", buf);
  assert_non_null(strstr(buf, want));

  assert_int_equal(aa_policy_default(&base), AA_OK);
  assert_int_not_equal(aa_policy_merge_patch_msg(base, doc, len, &p, &msg), AA_OK);
  assert_non_null(msg);
  assert_non_null(strstr(msg, want));
  free(msg);
  msg = NULL;
  buf[0] = '\0';
  assert_int_not_equal(aa_policy_merge_patch(base, doc, len, &p, buf, cap), AA_OK);
  assert_non_null(strstr(buf, want));
  assert_null(p);
  aa_policy_free(base);

  {
    char dir[] = "/tmp/aa-policy-num-XXXXXX", path[128];
    FILE *f;
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/p.json", dir);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs(doc, f);
    fclose(f);
    assert_int_not_equal(aa_policy_load_file_msg(path, &p, &msg), AA_OK);
    assert_non_null(msg);
    assert_non_null(strstr(msg, path));
    assert_non_null(strstr(msg, want));
    free(msg);
    unlink(path);
    rmdir(dir);
  }
  free(want);
  free(buf);
}

static void test_adapt_policy_number_1000_digits_quoted_whole(void **state) {
  char *num = digits(1000, "");
  char *doc = doc_with("adapt", "interval_ms", num);
  char small[AA_POLICY_ERR_CAP];
  aa_policy *p = NULL;
  (void)state;
  expect_quoted(doc, num, "at line 1, column 27 is out of range");
  /* never inf, never a cut */
  assert_int_equal(aa_policy_parse(doc, strlen(doc), &p, small, sizeof small),
                   AA_EPARSE);
  assert_null(strstr(small, "inf"));
  assert_int_equal(strlen(small), sizeof small - 1); /* cut to fit, still */
  free(doc);
  free(num);
}

static void test_adapt_policy_number_20_digits_exact(void **state) {
  (void)state;
  /* the double would print 12345678901234567168 */
  char *doc = doc_with("pools.device", "limit_bytes", "12345678901234567890");
  expect_quoted(doc, "12345678901234567890", "is beyond 2^53 - 1");
  free(doc);
}

static void test_adapt_policy_number_17_18_21_digits_exact(void **state) {
  static const char *nums[] = {
      "12345678901234567",     /* 17: the double is ...568 */
      "123456789012345678",    /* 18: ...680 */
      "999999999999999999999", /* 21: the double is 1e+21 */
      "100000000000000000001", /* 21 */
      "9007199254740993",      /* 2^53 + 1: the double is 2^53 */
  };
  (void)state;
  for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
    char *doc = doc_with("pools.device", "limit_bytes", nums[i]);
    expect_quoted(doc, nums[i], "is beyond 2^53 - 1");
    free(doc);
  }
}

static void test_adapt_policy_number_negative_huge_exact(void **state) {
  char *n1000 = digits(1000, "-"), *doc;
  (void)state;
  doc = doc_with("adapt", "interval_ms", "-12345678901234567890");
  expect_quoted(doc, "-12345678901234567890", "is negative");
  free(doc);
  doc = doc_with("adapt", "interval_ms", n1000);
  expect_quoted(doc, n1000, "at line 1, column 27 is out of range");
  free(doc);
  doc = doc_with("adapt", "interval_ms", "-1e400");
  expect_quoted(doc, "-1e400", "is negative");
  free(doc);
  free(n1000);
}

static void test_adapt_policy_number_exponent_fraction_as_written(void **state) {
  static const struct {
    const char *num, *rule;
  } cases[] = {
      {"1e400", "is beyond 2^53 - 1"},
      {"1E+400", "is beyond 2^53 - 1"},
      {"12345678901234567890123456789.5", "is beyond 2^53 - 1"},
      {"1.5e300", "is beyond 2^53 - 1"},
      {"2.50", "is not an integer"},
      /* reads as the double 1000: still not an integer */
      {"1000.0000000000000000001", "is not an integer"},
      {"1e-400", "is not an integer"},
  };
  char *frac = digits(1000, "1.");
  char *doc;
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    doc = doc_with("adapt", "interval_ms", cases[i].num);
    expect_quoted(doc, cases[i].num, cases[i].rule);
    free(doc);
  }
  /* a fraction of 1000 digits, quoted whole */
  doc = doc_with("adapt", "hot_fraction", frac);
  expect_quoted(doc, frac, "is out of range (0, 1]");
  free(doc);
  free(frac);
  /* what is an integer exactly still reads as one */
  {
    aa_policy *p = parse_ok("{\"adapt\": {\"interval_ms\": 2.5e2, \"max_classes\": 1.0}}");
    aa_adapt_params a;
    aa_policy_adapt_params(p, &a);
    assert_int_equal(a.interval_ms, 250);
    assert_int_equal(a.max_classes, 1);
    aa_policy_free(p);
  }
}

/* json_text.h relies on cJSON freeing a number's valuestring (the texts
 * would leak: the sanitizer build catches that) and cJSON_Duplicate copying
 * it (merge patch copies the patch's items). */
static void test_adapt_policy_number_text_survives(void **state) {
  cJSON *n = cJSON_CreateNumber(5), *d;
  (void)state;
  assert_non_null(n);
  n->valuestring = cJSON_malloc(4);
  assert_non_null(n->valuestring);
  memcpy(n->valuestring, "5.0", 4);
  d = cJSON_Duplicate(n, 1);
  assert_non_null(d);
  assert_non_null(aa__json_number_text(d));
  assert_string_equal(aa__json_number_text(d), "5.0");
  assert_true(cJSON_IsNumber(d));
  cJSON_Delete(n);
  cJSON_Delete(d);
}

static void test_adapt_policy_limits_before_parse(void **state) {
  char err[AA_POLICY_ERR_CAP];
  aa_policy *p = NULL;
  size_t big = AA_POLICY_MAX_BYTES + 1;
  char *doc = malloc(big);
  char deep[2 * (AA_POLICY_MAX_DEPTH + 1) + 16];
  size_t k = 0;
  (void)state;
  assert_non_null(doc);
  memset(doc, ' ', big);
  doc[0] = '{';
  doc[big - 1] = '}';
  assert_int_equal(aa_policy_parse(doc, big, &p, err, sizeof err), AA_EPARSE);
  assert_non_null(strstr(err, "document is 65537 bytes, over the 65536-byte limit"));
  assert_null(p);
  /* Exactly at the limit is fine. */
  doc[big - 2] = '}';
  assert_int_equal(aa_policy_parse(doc, big - 1, &p, err, sizeof err), AA_OK);
  aa_policy_free(p);
  p = NULL;
  free(doc);

  /* 33 levels: refused by the pre-scan; 32 levels pass the scan (and then
   * fail validation: "name" must be a string). */
  deep[k++] = '{';
  memcpy(deep + k, "\"name\":", 7);
  k += 7;
  for (int i = 0; i < AA_POLICY_MAX_DEPTH; i++)
    deep[k++] = '[';
  for (int i = 0; i < AA_POLICY_MAX_DEPTH; i++)
    deep[k++] = ']';
  deep[k++] = '}';
  assert_int_equal(aa_policy_parse(deep, k, &p, err, sizeof err), AA_EPARSE);
  assert_non_null(strstr(err, "nested deeper than 32 levels"));
  /* Brackets inside strings do not count. */
  {
    char s[200];
    int n = snprintf(s, sizeof s, "{\"name\": \"%s\"}",
                     "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"{{{");
    p = parse_ok(s);
    aa_policy_free(p);
    p = NULL;
    (void)n;
  }
  /* A NUL byte inside the given length is refused; the length bounds the
   * parse (no NUL terminator needed). */
  assert_int_equal(aa_policy_parse("{}\0{}", 5, &p, err, sizeof err), AA_EPARSE);
  assert_non_null(strstr(err, "NUL byte at byte offset 2"));
  /* A byte-order mark is skipped; a BOM alone is no document. */
  assert_int_equal(aa_policy_parse("\xef\xbb\xbf{}", 5, &p, err, sizeof err), AA_OK);
  aa_policy_free(p);
  p = NULL;
  assert_int_equal(aa_policy_parse("\xef\xbb\xbf", 3, &p, err, sizeof err),
                   AA_EPARSE);
  assert_int_equal(aa_policy_parse("{}garbage", 2, &p, err, sizeof err), AA_OK);
  aa_policy_free(p);
  p = NULL;
  /* Null arguments. */
  assert_int_equal(aa_policy_parse(NULL, 0, &p, err, sizeof err), AA_EINVAL);
  assert_int_equal(aa_policy_parse("{}", 2, NULL, err, sizeof err), AA_EINVAL);
  /* A tiny error buffer is truncated, still NUL-terminated. */
  {
    char small[8];
    assert_int_equal(aa_policy_parse("[]", 2, &p, small, sizeof small), AA_EINVAL);
    assert_int_equal(strlen(small), 7);
    assert_int_equal(aa_policy_parse("[]", 2, &p, NULL, 0), AA_EINVAL);
  }
}

static const char *full_doc =
    "{\n"
    "  \"$schema\": \"./schema.json\",\n"
    "  \"version\": 9007199254740991,\n"
    "  \"name\": \"t\\\"est \\u00e9\\n\",\n"
    "  \"description\": \"round trip\",\n"
    "  \"pools\": {\n"
    "    \"device\": {\"slab_size\": 4194304, \"classes\": [512, {\"size\": 3072, "
    "\"cache_limit\": 64, \"prefill\": 16}, {\"size\": 8192}, 2097152],\n"
    "                \"tcache\": {\"blocks\": 7, \"bytes\": 65536}, \"large\": "
    "{\"mode\": \"passthrough\", \"cache_bytes\": 123456789012345, \"page_bytes\": 8388608,\n"
    "                \"map_runs\": true, \"map_run_pages\": 2, \"map_run_min_bytes\": 67108864,\n"
    "                \"stitch\": true, \"stitch_grow\": true, \"stitch_share\": 0.25},\n"
    "                \"limit_bytes\": 9007199254740991},\n"
    "    \"pinned\": {\"max_small\": 262144, \"classes\": {\"min\": 1024, "
    "\"per_doubling\": 2}},\n"
    "    \"host\": {\"classes\": {\"max\": 524288}}\n"
    "  },\n"
    "  \"adapt\": {\"enabled\": false, \"interval_ms\": 250, \"max_classes\": 100,\n"
    "            \"hot_fraction\": 0.123456789, \"waste_threshold\": 0.1, "
    "\"miss_rate_threshold\": 1,\n"
    "            \"cold_intervals\": 3, \"trim_threshold_bytes\": 0,\n"
    "            \"hysteresis\": {\"min_class_age\": 0, \"readd_cooldown\": 7}},\n"
    "  \"telemetry\": {\"histogram\": false, \"trace\": true, \"retention\": "
    "{\"max_bytes\": 0, \"max_age_s\": 60}}\n"
    "}\n";

static void test_adapt_policy_round_trip(void **state) {
  aa_policy *p, *q, *c, *d = NULL;
  char *j1, *j2;
  (void)state;
  p = parse_ok(full_doc);
  assert_int_equal(aa_policy_version(p), 9007199254740991ull);
  assert_string_equal(aa_policy_name(p), "t\"est \xc3\xa9\n");
  j1 = aa_policy_to_json(p);
  assert_non_null(j1);
  q = parse_ok(j1);
  assert_true(aa_policy_equal(p, q));
  assert_int_equal(aa_policy_version(q), aa_policy_version(p));
  j2 = aa_policy_to_json(q);
  assert_string_equal(j1, j2); /* the writer is deterministic */
  assert_non_null(strstr(j1, "\"limit_bytes\": 9007199254740991"));
  assert_non_null(
      strstr(j1, "\"cache_bytes\": 123456789012345, \"page_bytes\": 8388608, \"map_runs\": true, "
                 "\"map_run_pages\": 2, \"map_run_min_bytes\": 67108864, \"stitch\": true, "
                 "\"stitch_grow\": true, \"stitch_share\": 0.25}"));
  /* written only where set: the device pool's, not pinned's and host's */
  assert_null(strstr(strstr(j1, "\"map_run_pages\"") + 1, "\"map_run_pages\""));
  assert_non_null(strstr(j1, "\"hot_fraction\": 0.123456789"));
  assert_non_null(strstr(j1, "\"waste_threshold\": 0.1,"));
  /* The host ladder's max is max_small and is written as max_small. */
  assert_non_null(strstr(j1, "\"max_small\": 524288"));

  c = aa_policy_clone(p);
  assert_true(aa_policy_equal(p, c));
  assert_int_equal(aa_policy_version(c), aa_policy_version(p));
  aa_policy_set_version(c, 3);
  assert_int_equal(aa_policy_version(c), 3);
  assert_true(aa_policy_equal(p, c)); /* version is not content */

  assert_int_equal(aa_policy_default(&d), AA_OK);
  assert_false(aa_policy_equal(p, d));
  assert_true(aa_policy_equal(NULL, NULL));
  assert_false(aa_policy_equal(p, NULL));
  free(j1);
  free(j2);
  aa_policy_free(p);
  aa_policy_free(q);
  aa_policy_free(c);
  aa_policy_free(d);
  aa_policy_free(NULL);
}

static void test_adapt_policy_default_round_trip(void **state) {
  aa_policy *d = NULL, *q;
  char *j;
  (void)state;
  assert_int_equal(aa_policy_default(&d), AA_OK);
  aa_policy_set_version(d, 41);
  j = aa_policy_to_json(d);
  assert_non_null(j);
  q = parse_ok(j);
  assert_true(aa_policy_equal(d, q));
  assert_int_equal(aa_policy_version(q), 41);
  { /* map runs: on for device memory only, and written back as such */
    aa_pool_config cfg;
    assert_int_equal(aa_policy_pool_config(q, "device", &cfg, NULL, 0, NULL), AA_OK);
    assert_int_equal(cfg.large_map_runs, 1);
    assert_int_equal(aa_policy_pool_config(q, "host", &cfg, NULL, 0, NULL), AA_OK);
    assert_int_equal(cfg.large_map_runs, 0);
    assert_non_null(strstr(j, "\"map_runs\": false"));
    /* stream-ordered reuse: on everywhere, written only when off */
    assert_int_equal(cfg.large_stream_wait, 1);
    assert_null(strstr(j, "stream_wait"));
  }
  { /* large.stream_wait false: off in the pool config, written back, and a
     * policy that differs only there is another policy */
    aa_policy *o = parse_ok("{\"pools\": {\"pinned\": {\"large\": {\"stream_wait\": false}}}}");
    aa_pool_config cfg;
    assert_int_equal(aa_policy_pool_config(o, "pinned", &cfg, NULL, 0, NULL), AA_OK);
    assert_int_equal(cfg.large_stream_wait, -1);
    assert_int_equal(aa_policy_pool_config(o, "device", &cfg, NULL, 0, NULL), AA_OK);
    assert_int_equal(cfg.large_stream_wait, 1);
    assert_false(aa_policy_equal(d, o));
    char *oj = aa_policy_to_json(o);
    assert_non_null(oj);
    assert_non_null(strstr(oj, "\"stream_wait\": false"));
    aa_policy *o2 = parse_ok(oj);
    assert_true(aa_policy_equal(o, o2));
    free(oj);
    aa_policy_free(o);
    aa_policy_free(o2);
  }
  free(j);
  aa_policy_free(d);
  aa_policy_free(q);
}

static void test_adapt_policy_pool_config(void **state) {
  aa_policy *p;
  aa_pool_config cfg;
  aa_class_spec cl[AA_MAX_CLASSES];
  size_t n = 0;
  (void)state;
  p = parse_ok(full_doc);
  memset(&cfg, 0, sizeof cfg);
  cfg.slab_size = 1;
  assert_int_equal(aa_policy_pool_config(p, "device", &cfg, cl, AA_MAX_CLASSES, &n),
                   AA_OK);
  assert_int_equal(cfg.slab_size, 4194304);
  assert_int_equal(cfg.max_small, 2097152);
  assert_int_equal(cfg.tcache_blocks, 7);
  assert_int_equal(cfg.tcache_bytes, 65536);
  assert_int_equal(cfg.large_mode, AA_LARGE_PASSTHROUGH);
  assert_int_equal(cfg.large_cache_bytes, 123456789012345ull);
  assert_int_equal(cfg.large_page_bytes, 8388608);
  assert_int_equal(cfg.large_map_runs, 1);
  assert_int_equal(cfg.large_map_run_pages, 2);
  assert_int_equal(cfg.large_map_run_min_bytes, 67108864);
  assert_int_equal(cfg.limit_bytes, 9007199254740991ull);
  assert_false(cfg.telemetry);
  assert_int_equal(n, 4);
  assert_int_equal(cl[0].block_size, 512);
  assert_int_equal(cl[1].block_size, 3072);
  assert_int_equal(cl[1].cache_limit, 64);
  assert_int_equal(cl[1].prefill, 16);
  assert_int_equal(cl[2].block_size, 8192);
  assert_int_equal(cl[3].block_size, 2097152);

  /* pinned: a ladder 1024 .. 256 KiB, two per doubling. */
  assert_int_equal(aa_policy_pool_config(p, "pinned", &cfg, cl, AA_MAX_CLASSES, &n),
                   AA_OK);
  assert_int_equal(cfg.min_block, 1024);
  assert_int_equal(cfg.classes_per_doubling, 2);
  assert_int_equal(cfg.max_small, 262144);
  assert_int_equal(cfg.large_map_runs, 0);       /* the default: off */
  assert_int_equal(cfg.large_map_run_pages, 16); /* the default: runs of 16 for all */
  assert_int_equal(cfg.large_map_run_min_bytes, 0);
  assert_int_equal(cl[0].block_size, 1024);
  assert_int_equal(cl[1].block_size, 1536);
  assert_int_equal(cl[2].block_size, 2048);
  assert_int_equal(cl[n - 1].block_size, 262144);
  for (size_t i = 1; i < n; i++) {
    assert_true(cl[i].block_size > cl[i - 1].block_size);
    assert_int_equal(cl[i].block_size % AA_BLOCK_ALIGN, 0);
  }

  /* Too small a buffer: AA_ERANGE, the count, the first entries. */
  assert_int_equal(aa_policy_pool_config(p, "pinned", NULL, cl, 2, &n), AA_ERANGE);
  assert_true(n > 2);
  /* No buffer: only the count (and cfg). */
  n = 0;
  assert_int_equal(aa_policy_pool_config(p, "pinned", &cfg, NULL, 0, &n), AA_OK);
  assert_true(n > 2);
  assert_int_equal(cfg.max_small, 262144);
  assert_int_equal(aa_policy_pool_config(p, "gpu", &cfg, cl, AA_MAX_CLASSES, &n),
                   AA_EINVAL);
  assert_int_equal(aa_policy_pool_config(NULL, "host", &cfg, cl, AA_MAX_CLASSES, &n),
                   AA_EINVAL);
  aa_policy_free(p);

  /* The default ladders: device and host 512 B .. 16 KiB, one class per
   * doubling, the expandable large path; pinned 512 .. 1 MiB, about four
   * per doubling, the cache path. */
  p = parse_ok("{}");
  for (int k = 0; k < 2; k++) {
    aa_pool_config pc;
    aa_pool_config_init(&pc);
    assert_int_equal(aa_policy_pool_config(p, k == 0 ? "device" : "host", &pc, cl,
                                           AA_MAX_CLASSES, &n),
                     AA_OK);
    assert_int_equal(n, 6);
    assert_int_equal(cl[0].block_size, 512);
    assert_int_equal(cl[1].block_size, 1024);
    assert_int_equal(cl[5].block_size, 16384);
    assert_int_equal(pc.max_small, 16384);
    assert_int_equal(pc.large_mode, AA_LARGE_EXPANDABLE);
  }
  assert_int_equal(aa_policy_pool_config(p, "pinned", NULL, cl, AA_MAX_CLASSES, &n),
                   AA_OK);
  assert_int_equal(n, 40);
  assert_int_equal(cl[0].block_size, 512);
  assert_int_equal(cl[1].block_size, 1024);
  assert_int_equal(cl[3].block_size, 2048);
  assert_int_equal(cl[4].block_size, 2560);
  assert_int_equal(cl[n - 1].block_size, 1048576);
  aa_policy_free(p);
}

static aa_policy *patch_ok(const aa_policy *base, const char *patch) {
  char err[AA_POLICY_ERR_CAP] = "";
  aa_policy *p = NULL;
  int rc = aa_policy_merge_patch(base, patch, strlen(patch), &p, err, sizeof err);
  if (rc != AA_OK)
    print_error("unexpected patch error: %s\n  patch: %s\n", err, patch);
  assert_int_equal(rc, AA_OK);
  return p;
}

static void test_adapt_policy_merge_patch(void **state) {
  char err[AA_POLICY_ERR_CAP];
  aa_policy *base, *p, *q, *e = NULL;
  aa_adapt_params a;
  aa_class_spec cl[AA_MAX_CLASSES];
  size_t n;
  (void)state;
  base = parse_ok(full_doc);
  aa_policy_set_version(base, 5);

  /* Empty patch: the same policy, the same version. */
  p = patch_ok(base, "{}");
  assert_true(aa_policy_equal(base, p));
  assert_int_equal(aa_policy_version(p), 5);
  aa_policy_free(p);

  /* A member replaces, siblings stay (objects merge recursively). */
  p = patch_ok(base, "{\"adapt\": {\"interval_ms\": 500}}");
  aa_policy_adapt_params(p, &a);
  assert_int_equal(a.interval_ms, 500);
  assert_int_equal(a.cold_intervals, 3);
  assert_false(a.enabled);
  aa_policy_free(p);

  /* null deletes: the field falls back to its default. */
  p = patch_ok(base, "{\"adapt\": {\"interval_ms\": null, \"hysteresis\": null}}");
  aa_policy_adapt_params(p, &a);
  assert_int_equal(a.interval_ms, 1000);
  assert_int_equal(a.readd_cooldown, 20);
  assert_int_equal(a.cold_intervals, 3);
  aa_policy_free(p);

  /* Deleting a whole pool or everything gives the defaults back. */
  p = patch_ok(base, "{\"pools\": {\"device\": null}}");
  assert_int_equal(aa_policy_pool_config(p, "device", NULL, cl, AA_MAX_CLASSES, &n),
                   AA_OK);
  assert_int_equal(n, 6);
  aa_policy_free(p);
  p = patch_ok(base, "{\"$schema\": null, \"name\": null, \"description\": null, "
                     "\"pools\": null, \"adapt\": null, \"telemetry\": null}");
  assert_int_equal(aa_policy_default(&e), AA_OK);
  assert_true(aa_policy_equal(p, e));
  assert_int_equal(aa_policy_version(p), 5);
  aa_policy_free(p);

  /* Arrays replace; null for an absent key is a no-op. */
  p = patch_ok(base, "{\"pools\": {\"device\": {\"classes\": [1024, 2097152]}}, "
                     "\"nothing\": null}");
  assert_int_equal(aa_policy_pool_config(p, "device", NULL, cl, AA_MAX_CLASSES, &n),
                   AA_OK);
  assert_int_equal(n, 2);
  assert_int_equal(cl[0].block_size, 1024);
  aa_policy_free(p);

  /* An object replaces a non-object (RFC 7386: the target becomes {} first,
   * and nulls inside the patch object are dropped). */
  p = patch_ok(base, "{\"pools\": {\"device\": {\"classes\": {\"per_doubling\": 8, "
                     "\"min\": null}}}}");
  assert_int_equal(aa_policy_pool_config(p, "device", NULL, cl, AA_MAX_CLASSES, &n),
                   AA_OK);
  assert_int_equal(cl[0].block_size, 512);
  assert_int_equal(cl[n - 1].block_size, 2097152); /* max_small kept */
  aa_policy_free(p);

  /* Version can be patched. */
  p = patch_ok(base, "{\"version\": 77}");
  assert_int_equal(aa_policy_version(p), 77);
  aa_policy_free(p);

  /* A patch that breaks a rule: named error, no result, base unchanged. */
  q = aa_policy_clone(base);
  p = (aa_policy *)&err;
  {
    const char *typo = "{\"adapt\": {\"max_clases\": 3}}";
    assert_int_equal(
        aa_policy_merge_patch(base, typo, strlen(typo), &p, err, sizeof err),
        AA_EINVAL);
  }
  assert_null(p);
  assert_non_null(strstr(err, "adapt.max_clases: unknown key (did you mean \"max_classes\"?)"));
  assert_true(aa_policy_equal(base, q));
  {
    const char *bad = "{\"pools\": {\"device\": {\"max_small\": 1048576}}}";
    assert_int_equal(aa_policy_merge_patch(base, bad, strlen(bad), &p, err, sizeof err),
                     AA_EINVAL);
    assert_non_null(strstr(err, "pools.device.classes[3]: the largest class 2097152 "
                                "is not max_small 1048576"));
  }
  /* A non-object patch replaces the whole document, which must be an object. */
  assert_int_equal(aa_policy_merge_patch(base, "[1]", 3, &p, err, sizeof err),
                   AA_EINVAL);
  assert_non_null(strstr(err, "(root): expected an object, got an array"));
  /* The patch itself goes through the same pre-scan. */
  assert_int_equal(aa_policy_merge_patch(base, "{\"a\":1,\"a\":2}", 13, &p, err,
                                         sizeof err),
                   AA_EINVAL);
  assert_non_null(strstr(err, "a: duplicate key"));
  assert_int_equal(aa_policy_merge_patch(base, "{\"a\":", 5, &p, err, sizeof err),
                   AA_EPARSE);
  assert_int_equal(aa_policy_merge_patch(NULL, "{}", 2, &p, err, sizeof err),
                   AA_EINVAL);
  aa_policy_free(q);
  aa_policy_free(e);
  aa_policy_free(base);
}

/* RFC 7386 appendix A, every example: target, patch, result. */
static void test_adapt_policy_rfc7386_examples(void **state) {
  static const char *const cases[][3] = {
      {"{\"a\":\"b\"}", "{\"a\":\"c\"}", "{\"a\":\"c\"}"},
      {"{\"a\":\"b\"}", "{\"b\":\"c\"}", "{\"a\":\"b\",\"b\":\"c\"}"},
      {"{\"a\":\"b\"}", "{\"a\":null}", "{}"},
      {"{\"a\":\"b\",\"b\":\"c\"}", "{\"a\":null}", "{\"b\":\"c\"}"},
      {"{\"a\":[\"b\"]}", "{\"a\":\"c\"}", "{\"a\":\"c\"}"},
      {"{\"a\":\"c\"}", "{\"a\":[\"b\"]}", "{\"a\":[\"b\"]}"},
      {"{\"a\":{\"b\":\"c\"}}", "{\"a\":{\"b\":\"d\",\"c\":null}}",
       "{\"a\":{\"b\":\"d\"}}"},
      {"{\"a\":[{\"b\":\"c\"}]}", "{\"a\":[1]}", "{\"a\":[1]}"},
      {"[\"a\",\"b\"]", "[\"c\",\"d\"]", "[\"c\",\"d\"]"},
      {"{\"a\":\"b\"}", "[\"c\"]", "[\"c\"]"},
      {"{\"a\":\"foo\"}", "null", "null"},
      {"{\"a\":\"foo\"}", "\"bar\"", "\"bar\""},
      {"{\"e\":null}", "{\"a\":1}", "{\"e\":null,\"a\":1}"},
      {"[1,2]", "{\"a\":\"b\",\"c\":null}", "{\"a\":\"b\"}"},
      {"{}", "{\"a\":{\"bb\":{\"ccc\":null}}}", "{\"a\":{\"bb\":{}}}"},
  };
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cJSON *target = cJSON_Parse(cases[i][0]);
    cJSON *patch = cJSON_Parse(cases[i][1]);
    cJSON *want = cJSON_Parse(cases[i][2]);
    cJSON *got;
    char *text;
    assert_non_null(target);
    assert_non_null(patch);
    assert_non_null(want);
    got = aa__json_merge_patch(target, patch);
    assert_non_null(got);
    text = cJSON_PrintUnformatted(got);
    if (!cJSON_Compare(got, want, 1))
      print_error("case %zu: got %s, want %s\n", i, text, cases[i][2]);
    assert_true(cJSON_Compare(got, want, 1));
    free(text);
    cJSON_Delete(got);
    cJSON_Delete(patch);
    cJSON_Delete(want);
  }
}

static void test_adapt_policy_example_files(void **state) {
  const char *src = getenv("AA_TEST_SOURCE_DIR");
  char dir[1024], path[1400], err[AA_POLICY_ERR_CAP + 1400];
  DIR *d;
  struct dirent *de;
  int parsed = 0;
  (void)state;
  if (src == NULL)
    src = ".";
  snprintf(dir, sizeof dir, "%s/policies", src);
  d = opendir(dir);
  assert_non_null(d);
  for (de = readdir(d); de != NULL; de = readdir(d)) {
    size_t l = strlen(de->d_name);
    aa_policy *p = NULL, *q = NULL;
    char *j;
    if (l < 6 || strcmp(de->d_name + l - 5, ".json") != 0 ||
        strcmp(de->d_name, "schema.json") == 0)
      continue;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    err[0] = '\0';
    /* every shipped policy is complete: each can be a start-up file */
    if (aa_policy_load_file_complete(path, &p, err, sizeof err) != AA_OK)
      print_error("%s\n", err);
    assert_non_null(p);
    j = aa_policy_to_json(p);
    q = parse_ok(j);
    assert_true(aa_policy_equal(p, q));
    free(j);
    aa_policy_free(p);
    aa_policy_free(q);
    parsed++;
  }
  closedir(d);
  assert_true(parsed >= 3);

  {
    aa_policy *p = NULL;
    snprintf(path, sizeof path, "%s/no-such-policy.json", dir);
    assert_int_equal(aa_policy_load_file(path, &p, err, sizeof err), AA_EIO);
    assert_non_null(strstr(err, "no-such-policy.json: cannot open"));
    assert_null(p);
  }
}

/* Reads a whole file (malloc'd, NUL-terminated) or fails the test. */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  char *buf;
  long n;
  assert_non_null(f);
  assert_int_equal(fseek(f, 0, SEEK_END), 0);
  n = ftell(f);
  assert_true(n > 0);
  rewind(f);
  buf = malloc((size_t)n + 1);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  buf[n] = '\0';
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* For every property of the schema that has a "default", a document setting
 * just that property to that default must parse (the parser knows the key and
 * accepts the value) and equal the built-in default (the defaults agree). */
static int schema_walk(const cJSON *root, const cJSON *node, const char **path,
                       int depth, const aa_policy *def) {
  const cJSON *props, *ref;
  int checked = 0;
  ref = cJSON_GetObjectItemCaseSensitive(node, "$ref");
  if (cJSON_IsString(ref)) {
    /* Only local "#/$defs/<name>" references are used. */
    assert_memory_equal(ref->valuestring, "#/$defs/", 8);
    node = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "$defs"), ref->valuestring + 8);
    assert_non_null(node);
  }
  props = cJSON_GetObjectItemCaseSensitive(node, "properties");
  if (props == NULL)
    return 0;
  assert_true(depth < 6);
  for (const cJSON *pr = props->child; pr != NULL; pr = pr->next) {
    const cJSON *dflt = cJSON_GetObjectItemCaseSensitive(pr, "default");
    path[depth] = pr->string;
    if (dflt != NULL) {
      cJSON *doc = cJSON_CreateObject(), *at = doc;
      char err[AA_POLICY_ERR_CAP] = "";
      aa_policy *p = NULL;
      char *text;
      for (int i = 0; i < depth; i++)
        at = cJSON_AddObjectToObject(at, path[i]);
      cJSON_AddItemToObject(at, pr->string, cJSON_Duplicate(dflt, 1));
      text = cJSON_PrintUnformatted(doc);
      assert_non_null(text);
      if (aa_policy_parse(text, strlen(text), &p, err, sizeof err) != AA_OK ||
          !aa_policy_equal(p, def))
        print_error("schema default not the parser's: %s (%s)\n", text, err);
      assert_non_null(p);
      assert_true(aa_policy_equal(p, def));
      aa_policy_free(p);
      free(text);
      cJSON_Delete(doc);
      checked++;
    }
    checked += schema_walk(root, pr, path, depth + 1, def);
  }
  return checked;
}

/* Every key the writer emits is a property in the schema (resolving $ref;
 * below a "oneOf" the check stops). */
static void keys_in_schema(const cJSON *root, const cJSON *node,
                           const cJSON *json) {
  const cJSON *ref = cJSON_GetObjectItemCaseSensitive(node, "$ref");
  const cJSON *props;
  if (cJSON_IsString(ref))
    node = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(root, "$defs"), ref->valuestring + 8);
  if (!cJSON_IsObject(json) || node == NULL)
    return;
  props = cJSON_GetObjectItemCaseSensitive(node, "properties");
  if (props == NULL)
    return;
  for (const cJSON *m = json->child; m != NULL; m = m->next) {
    const cJSON *sub = cJSON_GetObjectItemCaseSensitive(props, m->string);
    if (sub == NULL)
      print_error("key \"%s\" written but not in the schema\n", m->string);
    assert_non_null(sub);
    keys_in_schema(root, sub, m);
  }
}

static void test_adapt_policy_schema_matches_parser(void **state) {
  const char *src = getenv("AA_TEST_SOURCE_DIR");
  char path[1200];
  const char *keys[8];
  size_t len = 0;
  char *text;
  cJSON *schema;
  aa_policy *def = NULL;
  int checked;
  (void)state;
  snprintf(path, sizeof path, "%s/policies/schema.json", src ? src : ".");
  text = slurp(path, &len);
  schema = cJSON_ParseWithLength(text, len);
  assert_non_null(schema);
  assert_string_equal(
      cJSON_GetObjectItemCaseSensitive(schema, "$schema")->valuestring,
      "https://json-schema.org/draft/2020-12/schema");
  assert_int_equal(aa_policy_default(&def), AA_OK);
  checked = schema_walk(schema, schema, keys, 0, def);
  /* version; 3 pools x (slab_size, tcache.blocks, large.cache_bytes,
   * large.page_bytes, large.map_run_pages, large.map_run_min_bytes, large.stream_wait,
   * large.stitch, large.stitch_grow, large.stitch_share, large.plan, limit_bytes, backend, advise's three, allow_oversubscribe;
   * max_small, large.map_runs, classes, tcache.bytes
   * and large.mode have no schema default: they differ between pools);
   * 11 adapt + 4 hysteresis; 9 telemetry (4 of them live tracing's).
   * (Defaults under "oneOf" — class entries, ladder fields — are not
   * walked.) */
  assert_int_equal(checked, 1 + 3 * 17 + 15 + 9);
  {
    aa_policy *p = parse_ok(full_doc);
    char *j = aa_policy_to_json(p);
    cJSON *tree = cJSON_Parse(j);
    assert_non_null(tree);
    keys_in_schema(schema, schema, tree);
    cJSON_Delete(tree);
    free(j);
    aa_policy_free(p);
  }
  aa_policy_free(def);
  cJSON_Delete(schema);
  free(text);
}

/* pools.regions: sections start from pools.device, are sorted by name, round
 * trip through the writer and a merge patch, and are what
 * aa_policy_pool_config("regions.<name>") answers. */
/* A region starts from pools.device: what it turns back off, or sets back
 * to the default, survives a round trip (the writer compares a region's
 * keys with the device pool's, not with the defaults). */
static void test_adapt_policy_region_round_trip(void **state) {
  const char *doc =
      "{\"pools\": {\"device\": {\"large\": {\"mode\": \"expandable\", \"page_bytes\": 4194304,"
      " \"map_run_pages\": 2, \"stream_wait\": false, \"stitch\": true, \"stitch_grow\": true,"
      " \"stitch_share\": 0.05, \"plan\": true}},"
      " \"regions\": {\"kv\": {\"large\": {\"page_bytes\": 0, \"map_run_pages\": 16,"
      " \"stream_wait\": true, \"stitch\": false, \"stitch_grow\": false,"
      " \"stitch_share\": 0.01, \"plan\": false}}}}}";
  aa_policy *p = parse_ok(doc), *q;
  aa_pool_config cfg;
  char *j;
  (void)state;
  j = aa_policy_to_json(p);
  assert_non_null(j);
  q = parse_ok(j);
  if (!aa_policy_equal(p, q))
    print_error("%s\n", j);
  assert_true(aa_policy_equal(p, q));
  aa_pool_config_init(&cfg);
  assert_int_equal(aa_policy_pool_config(q, "regions.kv", &cfg, NULL, 0, NULL), AA_OK);
  assert_int_equal(cfg.large_stitch, 0);
  assert_true(cfg.large_stitch_share == 0.01);
  assert_int_equal(cfg.large_plan, 0);
  assert_int_equal(cfg.large_map_run_pages, 16);
  assert_int_equal(cfg.large_page_bytes, 0);
  aa_pool_config_init(&cfg);
  assert_int_equal(aa_policy_pool_config(q, "device", &cfg, NULL, 0, NULL), AA_OK);
  assert_int_equal(cfg.large_stitch, 2);
  assert_true(cfg.large_stitch_share == 0.05);
  free(j);
  aa_policy_free(p);
  aa_policy_free(q);
}

static void test_adapt_policy_regions(void **state) {
  const char *doc =
      "{\"pools\": {\"device\": {\"max_small\": 65536, \"limit_bytes\": 33554432,"
      " \"classes\": {\"min\": 1024, \"per_doubling\": 2}},"
      " \"regions\": {\"scores\": {\"large\": {\"mode\": \"cache\"}},"
      "  \"kv_cache\": {\"limit_bytes\": 8388608}}}}";
  aa_pool_config cfg, dev;
  aa_class_spec a[AA_MAX_CLASSES], b[AA_MAX_CLASSES];
  size_t na = 0, nb = 0;
  aa_policy *p = parse_ok(doc), *q, *r = NULL;
  char *j, err[AA_POLICY_ERR_CAP];
  (void)state;

  assert_true(aa_policy_has_region(p, "kv_cache"));
  assert_true(aa_policy_has_region(p, "scores"));
  assert_false(aa_policy_has_region(p, "kv"));
  aa_pool_config_init(&cfg);
  aa_pool_config_init(&dev);
  assert_int_equal(aa_policy_pool_config(p, "device", &dev, a, AA_MAX_CLASSES, &na), AA_OK);
  assert_int_equal(aa_policy_pool_config(p, "regions.kv_cache", &cfg, b, AA_MAX_CLASSES, &nb),
                   AA_OK);
  /* what it does not say comes from pools.device; what it says wins */
  assert_int_equal(cfg.max_small, 65536);
  assert_int_equal(cfg.min_block, 1024);
  assert_int_equal(cfg.limit_bytes, 8388608);
  assert_int_equal(dev.limit_bytes, 33554432);
  assert_int_equal(cfg.large_mode, dev.large_mode);
  assert_int_equal(na, nb);
  assert_memory_equal(a, b, na * sizeof a[0]);
  assert_int_equal(aa_policy_pool_config(p, "regions.scores", &cfg, NULL, 0, NULL), AA_OK);
  assert_int_equal(cfg.large_mode, AA_LARGE_CACHE);
  assert_int_equal(cfg.limit_bytes, 33554432);
  /* no section: AA_ENOENT; not a section name at all: AA_EINVAL */
  assert_int_equal(aa_policy_pool_config(p, "regions.kv", &cfg, NULL, 0, NULL), AA_ENOENT);
  assert_int_equal(aa_policy_pool_config(p, "regions.", &cfg, NULL, 0, NULL), AA_EINVAL);
  assert_int_equal(aa_policy_pool_config(p, "kv_cache", &cfg, NULL, 0, NULL), AA_EINVAL);

  /* the writer puts every field of each section; parsing it back is equal */
  j = aa_policy_to_json(p);
  assert_non_null(j);
  assert_non_null(strstr(j, "\"regions\": {"));
  assert_true(strstr(j, "\"kv_cache\"") < strstr(j, "\"scores\""));
  q = parse_ok(j);
  assert_true(aa_policy_equal(p, q));
  free(j);

  /* a section's content and its presence both count for equality */
  aa_policy_free(q);
  q = parse_ok("{\"pools\": {\"device\": {\"max_small\": 65536, \"limit_bytes\": 33554432,"
               " \"classes\": {\"min\": 1024, \"per_doubling\": 2}},"
               " \"regions\": {\"kv_cache\": {\"limit_bytes\": 8388608}}}}");
  assert_false(aa_policy_equal(p, q));

  /* merge patch: null deletes a section, nothing else changes */
  assert_int_equal(aa_policy_merge_patch(p, "{\"pools\": {\"regions\": {\"scores\": null}}}",
                                         40, &r, err, sizeof err),
                   AA_OK);
  assert_true(aa_policy_equal(r, q));
  aa_policy_free(r);
  r = NULL;
  /* a bad name in a patch: refused whole, with the path */
  assert_int_equal(aa_policy_merge_patch(p, "{\"pools\": {\"regions\": {\"k v\": {}}}}", 35,
                                         &r, err, sizeof err),
                   AA_EINVAL);
  assert_null(r);
  assert_non_null(strstr(err, "pools.regions.k v: not a region name"));

  /* max_small without classes over an explicit device table: the default
   * ladder up to it, not the device's table */
  aa_policy_free(q);
  q = parse_ok("{\"pools\": {\"device\": {\"classes\": [512, 4096, 16384]},"
               " \"regions\": {\"big\": {\"max_small\": 65536},"
               " \"same\": {\"limit_bytes\": 4194304}}}}");
  assert_int_equal(aa_policy_pool_config(q, "regions.big", &cfg, b, AA_MAX_CLASSES, &nb), AA_OK);
  assert_int_equal(b[nb - 1].block_size, 65536);
  assert_true(nb > 3);
  assert_int_equal(aa_policy_pool_config(q, "regions.same", &cfg, b, AA_MAX_CLASSES, &nb),
                   AA_OK);
  assert_int_equal(nb, 3);
  assert_int_equal(b[1].block_size, 4096);

  /* the name rule on its own */
  assert_int_equal(aa_policy_region_name_check("kv_cache", NULL, 0), AA_OK);
  assert_int_equal(aa_policy_region_name_check("Q-proj_2", NULL, 0), AA_OK);
  assert_int_equal(aa_policy_region_name_check("a2345678901234567890", NULL, 0), AA_OK);
  assert_int_equal(aa_policy_region_name_check("a23456789012345678901", err, sizeof err),
                   AA_EINVAL);
  assert_int_equal(aa_policy_region_name_check(NULL, err, sizeof err), AA_EINVAL);
  assert_int_equal(aa_policy_region_name_check("_x", err, sizeof err), AA_EINVAL);
  assert_int_equal(aa_policy_region_name_check("x.y", err, sizeof err), AA_EINVAL);
  assert_int_equal(aa_policy_region_name_check("k\xc3\xa9", err, sizeof err), AA_EINVAL);

  aa_policy_free(q);
  aa_policy_free(p);
}

/* Backend "managed": pools.device and regions may select it, with advice
 * and allow_oversubscribe; strict validation (each error names the path
 * and the value), round trip through the writer and a merge patch, and what
 * aa_policy_pool_backend answers. */
static void expect_bad(const char *doc, const char *want) {
  char err[AA_POLICY_ERR_CAP] = "";
  aa_policy *p = (aa_policy *)(uintptr_t)1;
  int rc = aa_policy_parse(doc, strlen(doc), &p, err, sizeof err);
  if (rc != AA_EINVAL || strstr(err, want) == NULL)
    print_error("doc: %s\n  got %d: %s\n  want: %s\n", doc, rc, err, want);
  assert_int_equal(rc, AA_EINVAL);
  assert_null(p);
  assert_non_null(strstr(err, want));
}

static void test_adapt_policy_managed(void **state) {
  const char *doc =
      "{\"pools\": {\"regions\": {\"optimizer\": {\"backend\": \"managed\","
      " \"advise\": {\"preferred_location\": \"host\", \"accessed_by\": \"device\","
      " \"read_mostly\": true}, \"allow_oversubscribe\": false},"
      " \"kv\": {\"limit_bytes\": 8388608}}}}";
  aa_managed_config mc;
  aa_policy *p = parse_ok(doc), *q, *r = NULL, *d;
  char *j, err[AA_POLICY_ERR_CAP];
  bool managed = true;
  (void)state;

  assert_int_equal(aa_policy_pool_backend(p, "regions.optimizer", &managed, &mc), AA_OK);
  assert_true(managed);
  assert_int_equal(mc.version, AA_MANAGED_CONFIG_VERSION);
  assert_int_equal(mc.preferred_location, AA_MANAGED_LOC_HOST);
  assert_int_equal(mc.accessed_by, AA_MANAGED_LOC_DEVICE);
  assert_true(mc.read_mostly);
  assert_false(mc.allow_oversubscribe);
  assert_int_equal(aa_policy_pool_backend(p, "regions.kv", &managed, &mc), AA_OK);
  assert_false(managed);
  assert_int_equal(mc.preferred_location, AA_MANAGED_LOC_NONE);
  assert_int_equal(aa_policy_pool_backend(p, "device", &managed, NULL), AA_OK);
  assert_false(managed);
  assert_int_equal(aa_policy_pool_backend(p, "regions.nope", &managed, &mc), AA_ENOENT);
  assert_int_equal(aa_policy_pool_backend(p, "gpu", &managed, &mc), AA_EINVAL);
  assert_int_equal(aa_policy_pool_backend(NULL, "device", &managed, &mc), AA_EINVAL);

  /* the writer says it back, and it parses to the same policy */
  j = aa_policy_to_json(p);
  assert_non_null(j);
  assert_non_null(strstr(j, "\"backend\": \"managed\""));
  assert_non_null(strstr(j, "\"advise\": {\"preferred_location\": \"host\", "
                            "\"accessed_by\": \"device\", \"read_mostly\": true}"));
  assert_non_null(strstr(j, "\"allow_oversubscribe\": false"));
  assert_non_null(strstr(j, "\"backend\": \"default\""));
  q = parse_ok(j);
  assert_true(aa_policy_equal(p, q));
  free(j);
  aa_policy_free(q);

  /* a merge patch changes one piece of advice; equal no more */
  const char *patch = "{\"pools\": {\"regions\": {\"optimizer\": {\"advise\": "
                      "{\"read_mostly\": false}, \"allow_oversubscribe\": true}}}}";
  assert_int_equal(aa_policy_merge_patch(p, patch, strlen(patch), &r, err, sizeof err),
                   AA_OK);
  assert_false(aa_policy_equal(p, r));
  assert_int_equal(aa_policy_pool_backend(r, "regions.optimizer", &managed, &mc), AA_OK);
  assert_true(managed);
  assert_false(mc.read_mostly);
  assert_true(mc.allow_oversubscribe);
  assert_int_equal(mc.preferred_location, AA_MANAGED_LOC_HOST);
  aa_policy_free(r);
  aa_policy_free(p);

  /* pools.device managed: a region without a section of its own answers
   * through it; one that says "default" drops the advice it inherited */
  p = parse_ok("{\"pools\": {\"device\": {\"backend\": \"managed\", \"advise\":"
               " {\"preferred_location\": \"device\"}},"
               " \"regions\": {\"a\": {}, \"b\": {\"backend\": \"default\"}}}}");
  assert_int_equal(aa_policy_pool_backend(p, "regions.a", &managed, &mc), AA_OK);
  assert_true(managed);
  assert_int_equal(mc.preferred_location, AA_MANAGED_LOC_DEVICE);
  assert_int_equal(aa_policy_pool_backend(p, "regions.b", &managed, &mc), AA_OK);
  assert_false(managed);
  assert_int_equal(mc.preferred_location, AA_MANAGED_LOC_NONE);
  aa_policy_free(p);

  /* the default policy: no managed memory anywhere; "default" is the default */
  assert_int_equal(aa_policy_default(&d), AA_OK);
  p = parse_ok("{\"pools\": {\"device\": {\"backend\": \"default\"},"
               " \"pinned\": {\"backend\": \"default\", \"allow_oversubscribe\": false}}}");
  assert_true(aa_policy_equal(p, d));
  aa_policy_free(p);
  aa_policy_free(d);

#define REGION(x) "{\"pools\": {\"regions\": {\"opt\": " x "}}}"
  expect_bad(REGION("{\"backend\": \"managed\", \"advise\": {\"read_mostley\": true}}"),
             "pools.regions.opt.advise.read_mostley: unknown key (did you mean "
             "\"read_mostly\"?)");
  expect_bad(REGION("{\"backend\": \"managed\", \"advise\": {\"prefetch\": \"device\"}}"),
             "pools.regions.opt.advise.prefetch: unknown key");
  expect_bad(REGION("{\"backend\": \"managed\", \"advise\": "
                    "{\"preferred_location\": \"gpu\"}}"),
             "pools.regions.opt.advise.preferred_location: \"gpu\" is not one of "
             "\"none\", \"device\", \"host\"");
  expect_bad(REGION("{\"backend\": \"managed\", \"advise\": {\"accessed_by\": 0}}"),
             "pools.regions.opt.advise.accessed_by: expected \"none\", \"device\" or "
             "\"host\", got a number");
  expect_bad(REGION("{\"backend\": \"managed\", \"advise\": {\"read_mostly\": 1}}"),
             "pools.regions.opt.advise.read_mostly: expected true or false, got a number");
  expect_bad(REGION("{\"backend\": \"managed\", \"advise\": [\"read_mostly\"]}"),
             "pools.regions.opt.advise: expected an object, got an array");
  expect_bad(REGION("{\"backend\": \"managed\", \"allow_oversubscribe\": \"yes\"}"),
             "pools.regions.opt.allow_oversubscribe: expected true or false, got a string");
  expect_bad(REGION("{\"backend\": \"managed\", \"allow_oversubscribe\": 0}"),
             "pools.regions.opt.allow_oversubscribe: expected true or false, got a number");
  expect_bad(REGION("{\"backend\": \"unified\"}"),
             "pools.regions.opt.backend: \"unified\" is not one of \"default\", \"managed\"");
  expect_bad(REGION("{\"backend\": true}"),
             "pools.regions.opt.backend: expected \"default\" or \"managed\", got a boolean");
  expect_bad(REGION("{\"advise\": {\"read_mostly\": true}}"),
             "pools.regions.opt.advise: advice applies only to backend \"managed\"");
  expect_bad(REGION("{\"allow_oversubscribe\": true}"),
             "pools.regions.opt.allow_oversubscribe: applies only to backend \"managed\"");
  expect_bad("{\"pools\": {\"pinned\": {\"backend\": \"managed\"}}}",
             "pools.pinned.backend: \"managed\" is for pools.device and "
             "pools.regions.<name> only");
  expect_bad("{\"pools\": {\"host\": {\"backend\": \"managed\"}}}",
             "pools.host.backend: \"managed\" is for pools.device");
  expect_bad("{\"pools\": {\"device\": {\"backend\": \"managed\"}, \"regions\": {\"b\":"
             " {\"backend\": \"default\", \"advise\": {\"preferred_location\": \"host\"}}}}}",
             "pools.regions.b.advise: advice applies only to backend \"managed\"");
#undef REGION
}

/* The one rule (docs/policy.md, "A pool's settings"): the limit is the
 * smallest of limit_bytes and every override set, 0 when none is; and the
 * loop's proposal as a policy: a section's explicit table (a region's
 * section made from pools.device), which round-trips. */
static void test_adapt_policy_settings_rule_and_proposal(void **state) {
  aa_pool_overrides ov = {0};
  aa_policy *p = NULL, *q = NULL, *back = NULL;
  aa_class_spec cl[AA_MAX_CLASSES], got[AA_MAX_CLASSES];
  size_t n = 0, ng = 0;
  char err[AA_POLICY_ERR_CAP] = "", *json;
  (void)state;

  assert_int_equal(aa_policy_limit_rule(0, NULL), 0);
  assert_int_equal(aa_policy_limit_rule(0, &ov), 0);
  assert_int_equal(aa_policy_limit_rule(1000, &ov), 1000);
  ov.user_limit = 700;
  assert_int_equal(aa_policy_limit_rule(0, &ov), 700);
  assert_int_equal(aa_policy_limit_rule(1000, &ov), 700);
  assert_int_equal(aa_policy_limit_rule(500, &ov), 500);

  assert_int_equal(aa_policy_default(&p), AA_OK);
  assert_int_equal(aa_policy_pool_config(p, "host", NULL, cl, AA_MAX_CLASSES, &n), AA_OK);
  assert_true(n >= 2 && n < AA_MAX_CLASSES);
  /* an exact class of 4608 bytes, with a prefill, in its place */
  {
    size_t at = 0;
    while (at < n && cl[at].block_size < 4608)
      at++;
    memmove(&cl[at + 1], &cl[at], (n - at) * sizeof cl[0]);
    memset(&cl[at], 0, sizeof cl[at]);
    cl[at].block_size = 4608;
    cl[at].prefill = 4;
    n++;
  }
  assert_int_equal(aa_policy_with_classes(p, "host", cl, n, &q, err, sizeof err), AA_OK);
  assert_int_equal(aa_policy_pool_config(q, "host", NULL, got, AA_MAX_CLASSES, &ng), AA_OK);
  assert_int_equal(ng, n);
  assert_memory_equal(got, cl, n * sizeof cl[0]);
  assert_false(aa_policy_equal(p, q));
  json = aa_policy_to_json(q);
  assert_non_null(json);
  assert_int_equal(aa_policy_parse(json, strlen(json), &back, err, sizeof err), AA_OK);
  assert_true(aa_policy_equal(q, back));
  free(json);
  aa_policy_free(back);
  aa_policy_free(q);
  q = NULL;

  /* a region without a section gets one, from pools.device */
  assert_false(aa_policy_has_region(p, "kv"));
  assert_int_equal(aa_policy_pool_config(p, "device", NULL, cl, AA_MAX_CLASSES, &n), AA_OK);
  assert_int_equal(aa_policy_with_classes(p, "regions.kv", cl, n, &q, err, sizeof err), AA_OK);
  assert_true(aa_policy_has_region(q, "kv"));
  aa_policy_free(q);
  q = NULL;

  /* refused: not topped by max_small, not ascending; *out NULL */
  q = (aa_policy *)p;
  assert_int_equal(aa_policy_with_classes(p, "host", cl, n - 1, &q, err, sizeof err),
                   AA_EINVAL);
  assert_null(q);
  assert_non_null(strstr(err, "pools.host.classes"));
  aa_policy_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adapt_policy_default_is_empty_object),
      cmocka_unit_test(test_adapt_policy_bad_documents),
      cmocka_unit_test(test_adapt_policy_load_file_strict),
      cmocka_unit_test(test_adapt_policy_complete),
      cmocka_unit_test(test_adapt_policy_limits_before_parse),
      cmocka_unit_test(test_adapt_policy_number_1000_digits_quoted_whole),
      cmocka_unit_test(test_adapt_policy_number_20_digits_exact),
      cmocka_unit_test(test_adapt_policy_number_17_18_21_digits_exact),
      cmocka_unit_test(test_adapt_policy_number_negative_huge_exact),
      cmocka_unit_test(test_adapt_policy_number_exponent_fraction_as_written),
      cmocka_unit_test(test_adapt_policy_number_text_survives),
      cmocka_unit_test(test_adapt_policy_round_trip),
      cmocka_unit_test(test_adapt_policy_default_round_trip),
      cmocka_unit_test(test_adapt_policy_pool_config),
      cmocka_unit_test(test_adapt_policy_merge_patch),
      cmocka_unit_test(test_adapt_policy_rfc7386_examples),
      cmocka_unit_test(test_adapt_policy_example_files),
      cmocka_unit_test(test_adapt_policy_schema_matches_parser),
      cmocka_unit_test(test_adapt_policy_regions),
      cmocka_unit_test(test_adapt_policy_region_round_trip),
      cmocka_unit_test(test_adapt_policy_managed),
      cmocka_unit_test(test_adapt_policy_settings_rule_and_proposal),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
