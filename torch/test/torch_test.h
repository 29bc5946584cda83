/*
 * torch_test.h — the one header through which tests reach the torch
 * module's C internals (torch/src/torch_internal.h: stats_map.h, the mapping
 * from pool stats to torch.cuda.memory_stats() figures; devices.h, the
 * device layer). A test that includes it gets torch/test on its include
 * path and links aa_torch_stats and aa_torch_devices (tests/CMakeLists.txt),
 * never torch/src. Not installed.
 */
#ifndef AA_TORCH_TEST_H
#define AA_TORCH_TEST_H

#include "../src/torch_internal.h"

#endif
