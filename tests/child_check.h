/*
 * child_check.h — CHECK(cond) for the runtime tests whose cases run in a
 * forked child (the runtime is one per process): a failed check prints the
 * expression and ends the child with an exit code from its line, which the
 * parent's cmocka assertion then reports. Header-only, tests only.
 */
#ifndef AA_TESTS_CHILD_CHECK_H
#define AA_TESTS_CHILD_CHECK_H

#include <stdio.h>
#include <unistd.h>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      _exit(10 + __LINE__ % 100);                                              \
    }                                                                          \
  } while (0)

#endif
