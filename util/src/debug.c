/*
 * debug.c — what a failed assertion does, for every module's tiered
 * assertions (adaptalloc/internal/debug.h): names the expression and where,
 * then aborts. Entry point: aa__assert_fail.
 */
#include <stdio.h>
#include <stdlib.h>

#include "adaptalloc/internal/debug.h"

void aa__assert_fail(const char *expr, const char *file, int line) {
  fprintf(stderr, "adaptalloc: assertion failed: %s (%s:%d)\n", expr, file, line);
  abort();
}
