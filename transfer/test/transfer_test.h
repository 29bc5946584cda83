/*
 * transfer_test.h — the one header through which tests reach transfer's
 * internals: the packer's parallel gather copy (transfer/src/pack_copy.h).
 * A test that includes it gets transfer/test on its include path
 * (cmake/AATestHeaders.cmake), never transfer/src. Not installed.
 */
#ifndef AA_TRANSFER_TEST_H
#define AA_TRANSFER_TEST_H

#include "../src/pack_copy.h"

#endif
