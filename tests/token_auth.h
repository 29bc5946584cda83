/*
 * token_auth.h — the header a test's mutating request carries to the
 * runtime's server when no ADAPTALLOC_TOKEN is set: the runtime made a
 * token and wrote it to a file (aa_rt_token_file, docs/security.md "The
 * token file"); this reads it as any client of the job's user does.
 * Header-only, tests only.
 */
#ifndef AA_TESTS_TOKEN_AUTH_H
#define AA_TESTS_TOKEN_AUTH_H

#include <stdio.h>
#include <string.h>

#include "adaptalloc/runtime.h"

/* The first line of rt's token file (NULL rt: the default runtime's) into
 * token; false, token empty, when there is none. */
static inline bool aa_test_read_token(aa_runtime *rt, char *token, size_t cap) {
  char path[1200];
  FILE *f;
  bool ok = false;
  token[0] = '\0';
  if ((rt != NULL ? aa_rt_token_file(rt, path, sizeof(path))
                  : aa_runtime_token_file(path, sizeof(path))) != AA_OK)
    return false;
  f = fopen(path, "r");
  if (f == NULL)
    return false;
  if (fgets(token, (int)cap, f) != NULL) {
    token[strcspn(token, "\r\n")] = '\0';
    ok = token[0] != '\0';
  }
  fclose(f);
  if (!ok)
    token[0] = '\0';
  return ok;
}

/* "Authorization: Bearer <token>\r\n" from rt's token file into out; ""
 * when there is none. */
static inline bool aa_test_auth_header(aa_runtime *rt, char *out, size_t cap) {
  char token[300];
  bool ok = aa_test_read_token(rt, token, sizeof(token));
  snprintf(out, cap, ok ? "Authorization: Bearer %s\r\n" : "%s", ok ? token : "");
  return ok;
}

#endif
