/*
 * torch_internal.h — the torch module's C part, what its files define and
 * their floors (docs/torch.md). Everything here is plain C, built without
 * torch or CUDA, and compiled into each front end (the pluggable library
 * and the native allocator's Python module) and into the tests:
 *   stats_map.c   the one mapping from aa_pool_stats to
 *                 torch.cuda.memory_stats() figures (stats_map.h)
 *   devices.c     the device layer: device, region and private pools, the
 *                 owner of a pointer (devices.h)
 *   pluggable/aa_torch.c   libadaptalloc_torch.so, an adapter over both
 *                 (built with CUDA only)
 * The native allocator (the C++ files of native/, over c10) adapts to the
 * same two; its own files list themselves in native/native_internal.h.
 *
 * Layers, bottom first: a file uses what its own layer and the layers below
 * define, never what a higher layer defines (tools/check-layers.sh reads
 * this list and the object files: the ctest test_layers_torch):
 *   layer 0 map:       stats_map.c
 *   layer 1 devices:   devices.c
 *   layer 2 adapters:  pluggable/aa_torch.c
 * (the check reads the objects of aa_torch_stats and aa_torch_devices; the
 * adapters' floor names the pluggable library for the reader: it is built
 * with CUDA only, and adapts to the floors below by construction)
 */
#ifndef AA_TORCH_INTERNAL_H
#define AA_TORCH_INTERNAL_H

#include "devices.h"
#include "stats_map.h"

#endif
