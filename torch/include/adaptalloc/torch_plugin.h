/*
 * adaptalloc/torch_plugin.h — the C entry points of libadaptalloc_torch.so,
 * the CUDAPluggableAllocator fallback of the PyTorch integration (built from
 * torch/pluggable/ by torch/CMakeLists.txt when CUDA is on). The native
 * allocator (torch/native/) is the default path; this one serves a torch the
 * native layer cannot build against.
 */
#ifndef ADAPTALLOC_TORCH_PLUGIN_H
#define ADAPTALLOC_TORCH_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Exported by libadaptalloc_torch.so, not by libadaptalloc. The first two are
 * what torch.cuda.memory.CUDAPluggableAllocator(path, "aa_torch_alloc",
 * "aa_torch_free") calls; the hooks are given to its _allocator with
 * set_init_fn / set_reset_fn / set_memory_fraction_fn / set_record_stream_fn.
 * aa_stream is ABI-identical to cudaStream_t. Pools come from the runtime
 * (aa_runtime_pool(AA_BACKEND_DEVICE, device)), which starts the store, the
 * policy loop and the HTTP server from the environment on first use.
 */
AA_EXTERN void *aa_torch_alloc(size_t size, int device, aa_stream stream);
AA_EXTERN void aa_torch_free(void *ptr, size_t size, int device, aa_stream stream);
/* init hook: void(int device_count). Starts the runtime. */
AA_EXTERN void aa_torch_init(int device_count);
/* reset hook (torch.cuda.empty_cache): void(void). aa_pool_release on every
 * device pool made so far. */
AA_EXTERN void aa_torch_reset(void);
/* memory fraction hook: void(double fraction, int device). Sets the pool
 * limit to fraction x the device's total memory. */
AA_EXTERN void aa_torch_memory_fraction(double fraction, int device);
/* record_stream hook: void(void *ptr, cudaStream_t stream). */
AA_EXTERN void aa_torch_record_stream(void *ptr, aa_stream stream);

/* Helpers for Python (ctypes) tests and benchmarks: */
/* Caps device `device`'s pool at `bytes` reserved (0 = no cap). */
AA_EXTERN int aa_torch_set_limit(int device, size_t bytes);
/* One figure of the device's pools (its own and its regions') by name: a
 * torch.cuda.memory_stats() key ("allocated_bytes.all.current",
 * "segment.large_pool.peak", "num_ooms", ...; the figures the native
 * allocator shows, from the same mapping), or a short name: "in_use",
 * "reserved", "peak_in_use", "peak_reserved", "requested", "allocs", "frees",
 * "ooms", "oom_retries", "backend_allocs", "backend_frees" (each the
 * memory_stats figure of that meaning), and "pending", "limit" (what
 * aa_torch_set_limit set), "classes", "invalid_frees", which are the device
 * pool's own. 0 when unknown or no pool. */
AA_EXTERN uint64_t aa_torch_stat(int device, const char *name);
/* The device pool's stats as JSON (aa_pool_stats_json); returns the length
 * needed, 0 when there is no pool. */
AA_EXTERN size_t aa_torch_stats_json(int device, char *buf, size_t cap);

/* Sends the calling thread's later allocations to region id's pool
 * (aa_runtime_region_id; -1: the device pool again); *prev (may be NULL) gets
 * the id it had. AA_EINVAL, nothing changed, for an id no region has. */
AA_EXTERN int aa_torch_set_region(int id, int *prev);
/* The calling thread's region id (-1: none). */
AA_EXTERN int aa_torch_region(void);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_TORCH_PLUGIN_H */
