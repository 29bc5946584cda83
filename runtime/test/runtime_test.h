/*
 * runtime_test.h — the one header through which tests reach the runtime's
 * internals (runtime/src/runtime_internal.h: its state and the functions its
 * files share). A test that includes it gets runtime/test on its include
 * path (tests/CMakeLists.txt), never runtime/src. Not installed.
 */
#ifndef AA_RUNTIME_TEST_H
#define AA_RUNTIME_TEST_H

#include "../src/runtime_internal.h"

#endif
