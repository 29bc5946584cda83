/*
 * fuzz_policy.c — libFuzzer target for the policy parser and merge patch.
 *
 * Each input is parsed as a policy document. A document that parses must
 * serialise and parse back to an equal policy with the same version (the
 * round-trip property); every error must come with a non-empty message. The
 * same bytes are then applied as a merge patch to the default policy, with
 * the same checks. A refused document's whole message (aa_policy_parse_msg)
 * must begin with what the buffer form gave and be at most size + 1024
 * bytes (the bound policy.h promises, on which the HTTP server sizes its
 * buffer). Seed corpus: tests/fuzz/corpus/policy/.
 *
 *   CC=clang cmake -S . -B build-fuzz -DAA_BUILD_FUZZ=ON -DAA_BUILD_TESTS=OFF
 *   cmake --build build-fuzz --target fuzz_policy   (tests/fuzz/CMakeLists.txt)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adaptalloc/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_round_trip(const aa_policy *p) {
  char err[AA_POLICY_ERR_CAP];
  aa_policy *q = NULL;
  char *j = aa_policy_to_json(p);
  if (j == NULL)
    return; /* out of memory */
  if (aa_policy_parse(j, strlen(j), &q, err, sizeof err) != AA_OK) {
    fprintf(stderr, "round trip failed: %s\n%s\n", err, j);
    abort();
  }
  if (!aa_policy_equal(p, q) || aa_policy_version(p) != aa_policy_version(q)) {
    fprintf(stderr, "round trip not equal:\n%s\n", j);
    abort();
  }
  aa_policy_free(q);
  free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[AA_POLICY_ERR_CAP];
  aa_policy *p = NULL, *d = NULL, *m = NULL;
  const char *doc = (const char *)data;
  int rc;

  err[0] = '\0';
  rc = aa_policy_parse(doc, size, &p, err, sizeof err);
  if (rc == AA_OK) {
    check_round_trip(p);
    aa_policy_free(p);
  } else if (err[0] == '\0' || p != NULL) {
    abort();
  } else {
    char *whole = NULL;
    if (aa_policy_parse_msg(doc, size, &p, &whole) != rc || p != NULL)
      abort();
    if (whole != NULL) { /* NULL: out of memory */
      if (strncmp(whole, err, strlen(err)) != 0 || strlen(whole) > size + 1024) {
        fprintf(stderr, "message of %zu bytes for %zu: %.200s\n", strlen(whole), size, whole);
        abort();
      }
      free(whole);
    }
  }

  if (aa_policy_default(&d) != AA_OK)
    return 0;
  err[0] = '\0';
  rc = aa_policy_merge_patch(d, doc, size, &m, err, sizeof err);
  if (rc == AA_OK) {
    check_round_trip(m);
    aa_policy_free(m);
  } else if (err[0] == '\0' || m != NULL) {
    abort();
  }
  aa_policy_free(d);
  return 0;
}
