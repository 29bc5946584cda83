/*
 * core_test.h — the one header through which tests reach core's internals:
 * the host backend's test hooks and the snapshot's merge hook
 * (core/src/test_hooks.h), the managed backend's safety cap
 * (core/src/managed_cap.h). A test that includes it gets core/test on its
 * include path (tests/CMakeLists.txt), never core/src. Not installed.
 */
#ifndef AA_CORE_TEST_H
#define AA_CORE_TEST_H

#include "../src/managed_cap.h"
#include "../src/test_hooks.h"

#endif
