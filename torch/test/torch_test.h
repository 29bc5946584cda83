/*
 * torch_test.h — the one header through which tests reach the torch
 * module's C internals (torch/src/stats_map.h: the mapping from pool stats to
 * torch.cuda.memory_stats() figures). A test that includes it gets
 * torch/test on its include path and links aa_torch_stats
 * (tests/CMakeLists.txt), never torch/src. Not installed.
 */
#ifndef AA_TORCH_TEST_H
#define AA_TORCH_TEST_H

#include "../src/stats_map.h"

#endif
