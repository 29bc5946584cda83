// allocator.h — private to torch/native: what the Python module (module.cpp)
// calls of the native allocator, the adaptalloc implementation of PyTorch's
// c10::cuda::CUDACachingAllocator::CUDAAllocator. Defined in allocator.cpp
// (install, is_installed, set_limit), stats.cpp (stats_json),
// graph_pools.cpp (private_pool_count) and regions.cpp (set_region,
// current_region). The design and what is unsupported are in docs/torch.md
// ("The native allocator").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace adaptalloc_torch {

// Makes the adaptalloc allocator PyTorch's current CUDA allocator, the way
// torch.cuda.memory.change_current_allocator does. Throws std::runtime_error
// (RuntimeError in Python) when PyTorch's allocator is already initialized,
// i.e. CUDA memory was already allocated in this process. Installing twice
// is a no-op.
void install(int device_count);
bool is_installed();

// The device pool's stats as JSON (aa_pool_stats_json of the runtime's pool
// for `device`; "" when no pool was made for it yet).
std::string stats_json(int device);

// Private pools (CUDA graphs, torch.cuda.MemPool) alive on `device`.
int private_pool_count(int device);

// Caps the device pool at `bytes` reserved (0 = no cap), as
// torch.cuda.set_per_process_memory_fraction does with a fraction.
void set_limit(int device, size_t bytes);

// Sends the calling thread's later allocations to region `id`'s pool
// (aa_runtime_region_id; -1: the device pool again) and returns the id it
// had. An open beginAllocateToPool that takes the stream (CUDA graph capture,
// use_mem_pool) still wins. Throws for an id no region has.
int set_region(int id);
// The calling thread's region id (-1: none).
int current_region();

} // namespace adaptalloc_torch
