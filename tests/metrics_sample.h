/*
 * metrics_sample.h — reading one sample of a /metrics text in the runtime's
 * tests (test_runtime_env.c, test_runtime_oom.c).
 */
#ifndef AA_TEST_METRICS_SAMPLE_H
#define AA_TEST_METRICS_SAMPLE_H

#include <stdio.h>
#include <string.h>

/* The value of the first sample whose line starts with `head` (a metric
 * name and, maybe, its first labels): the text after the line's last space,
 * up to the newline, copied into out; "" when there is none. The process's
 * labels (rank, host) follow those a test names. */
static inline const char *sample_value(const char *text, const char *head, char *out,
                                       size_t cap) {
  const char *p = text;
  size_t n = strlen(head);
  out[0] = '\0';
  while (p != NULL && *p != '\0') {
    const char *eol = strchr(p, '\n');
    size_t len = eol != NULL ? (size_t)(eol - p) : strlen(p);
    if (len > n && strncmp(p, head, n) == 0 && (p[n] == ' ' || p[n] == '{' || p[n] == ',')) {
      const char *sp = p + len;
      while (sp > p && sp[-1] != ' ')
        sp--;
      snprintf(out, cap, "%.*s", (int)(p + len - sp), sp);
      break;
    }
    p = eol != NULL ? eol + 1 : NULL;
  }
  return out;
}

#endif
