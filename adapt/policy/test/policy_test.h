/*
 * policy_test.h — the one header through which tests reach the policy
 * module's internals: its model (adapt/policy/policy_model.h: the parsed
 * policy's structs, aa__json_merge_patch, aa__ladder_expand). A test that
 * includes it gets adapt/policy/test on its include path
 * (tests/CMakeLists.txt), never adapt/policy. Not installed.
 */
#ifndef AA_POLICY_TEST_H
#define AA_POLICY_TEST_H

#include "../policy_model.h"

#endif
