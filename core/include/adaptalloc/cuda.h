/*
 * adaptalloc/cuda.h — the CUDA side: backend counters, pinned staging
 * buffers, the transfer packer (many small host tensors -> one pinned buffer
 * -> one cudaMemcpyAsync), double buffering with events, mapped (zero-copy)
 * pinned memory. (The PyTorch plugin's entry points are declared in
 * adaptalloc/torch_plugin.h, under torch/.)
 *
 * The backends themselves are made with aa_backend_cuda_new() and
 * aa_backend_pinned_new() from adaptalloc/core.h. Built without CUDA
 * (-DAA_WITH_CUDA=OFF) every function here exists and fails cleanly:
 * constructors return AA_ENOTSUP, getters return NULL / 0.
 *
 * Streams are aa_stream values; for CUDA they are cudaStream_t cast to
 * void * (NULL is the legacy default stream). No CUDA header is needed to use
 * this header.
 *
 * Ownership: a packer owns its two pinned buffers (from the pinned pool it was
 * given, or from cudaHostAlloc when none) and returns them in
 * aa_packer_destroy(). Staging buffers belong to the caller between
 * aa_staging_get() and aa_staging_put(); the pool must outlive them.
 */
#ifndef ADAPTALLOC_CUDA_H
#define ADAPTALLOC_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A pseudo-stream meaning "the host CPU, no GPU stream". Staging buffers are
 * allocated on it, so that a buffer put back after a copy on stream S is
 * reused only once the event recorded on S has completed (the CPU writes into
 * pinned memory out of stream order). A CUDA backend records no event for it.
 */
#define AA_STREAM_HOST ((aa_stream)(intptr_t)-1)

/* --------------------------------------------------------------- backends */

#define AA_CUDA_COUNTS_VERSION 1

/* Calls a CUDA backend has made (device or pinned). */
typedef struct aa_cuda_counts {
  uint32_t version;         /* AA_CUDA_COUNTS_VERSION */
  uint32_t size;            /* sizeof(aa_cuda_counts) */
  uint64_t allocs;          /* cudaMalloc / cudaHostAlloc calls and device
                              map ops (cuMemCreate + cuMemMap) that succeeded */
  uint64_t frees;           /* cudaFree / cudaFreeHost calls, device unmap ops */
  uint64_t failures;        /* alloc and map calls that failed (OOM included) */
  uint64_t ooms;            /* of those, out of memory */
  uint64_t bytes_mapped;    /* bytes currently held from CUDA */
  uint64_t events_created;  /* cudaEventCreateWithFlags calls (pool growth) */
  uint64_t events_free;     /* events idle in the backend's event pool */
  uint64_t events_recorded; /* cudaEventRecord calls */
} aa_cuda_counts;

/* Fills *out for a backend made by aa_backend_cuda_new or
 * aa_backend_pinned_new. AA_EINVAL for any other backend or NULL arguments;
 * AA_ENOTSUP without CUDA. */
AA_EXTERN int aa_backend_cuda_counts(const aa_backend *b, aa_cuda_counts *out);

/* ----------------------------------------------------------- pinned memory */

/* A pinned buffer of at least `size` bytes from a pool over the pinned
 * backend, for the CPU to fill and a copy to read. NULL on bad arguments (a
 * pool that is not pinned, size 0) or out of memory. Free it with
 * aa_staging_put. */
AA_EXTERN void *aa_staging_get(aa_pool *pinned, size_t size);

/* Returns a staging buffer. `last_use` is the stream of the last copy that
 * reads or writes it (AA_STREAM_HOST if no copy was issued); the buffer is
 * handed out again only after that stream's work up to now has completed.
 * `size` is the size given to aa_staging_get (or 0). */
AA_EXTERN int aa_staging_put(aa_pool *pinned, void *buf, size_t size,
                             aa_stream last_use);

/* The device address of mapped pinned memory (all pinned backend memory is
 * mapped and portable), for kernels that read small host data directly
 * (zero-copy). `host` may point anywhere inside a pinned allocation.
 * AA_EINVAL when `host` is not mapped pinned memory. */
AA_EXTERN int aa_pinned_device_ptr(const void *host, void **dev_out);

/* ------------------------------------------------------------------ packer */

#define AA_PACKER_ALIGN 256 /* offsets returned by aa_packer_add */

typedef struct aa_packer aa_packer;

/* A packer with two pinned buffers of `capacity` bytes each (double
 * buffering). `pinned` is a pool over the pinned backend, or NULL to take the
 * two buffers straight from cudaHostAlloc (once, here). *out is owned by the
 * caller: aa_packer_destroy. */
AA_EXTERN int aa_packer_new(aa_pool *pinned, size_t capacity, aa_packer **out);

/* Copies n bytes from host memory `src` into the current pinned buffer at the
 * next AA_PACKER_ALIGN boundary; *offset gets the byte offset where they will
 * land in the destination of the next flush. If that buffer's previous copy is
 * still in flight this waits for it first (the only blocking point). AA_ELIMIT
 * when the buffer is full (flush, then add again); AA_EINVAL for n == 0, NULL
 * src, or n > capacity. */
AA_EXTERN int aa_packer_add(aa_packer *pk, const void *src, size_t n,
                            size_t *offset);

/* Packs `count` host tensors at once: offsets[i] gets where src[i] (n[i]
 * bytes) lands, as with aa_packer_add. All or nothing: AA_ELIMIT, with
 * nothing packed, when they do not all fit; AA_EINVAL for a NULL array, a
 * NULL src[i] or an n[i] of 0. Batches of 2 MiB or more are copied into the
 * pinned buffer by up to aa_packer_set_threads() threads (the caller's
 * included), each taking an equal share of the bytes (one large tensor is
 * shared too), because one CPU thread's memcpy, not the PCIe copy, is what
 * bounds packing. */
AA_EXTERN int aa_packer_add_many(aa_packer *pk, const void *const *src,
                                 const size_t *n, size_t count, size_t *offsets);

/* Threads aa_packer_add_many may use (1 = the caller only; 0 = the default,
 * min(4, online CPUs / 2), at least 1). Returns the number now in force. */
AA_EXTERN unsigned aa_packer_set_threads(aa_packer *pk, unsigned threads);

/* Bytes used in the current buffer (the length the next flush copies). */
AA_EXTERN size_t aa_packer_used(const aa_packer *pk);

/* Issues ONE cudaMemcpyAsync of the current buffer's used bytes to device
 * memory `dst` on `copy_stream`, records an event, and switches to the other
 * buffer so the CPU can pack the next batch while this copy runs. A flush of
 * an empty buffer does nothing. */
AA_EXTERN int aa_packer_flush(aa_packer *pk, void *dst, aa_stream copy_stream);

/* Makes `stream` (a compute stream) wait, on the GPU, for the last flush's
 * copy; the CPU does not block. AA_OK with nothing to wait for. */
AA_EXTERN int aa_packer_wait(aa_packer *pk, aa_stream stream);

/* Blocks the CPU until every flushed copy has completed. */
AA_EXTERN int aa_packer_sync(aa_packer *pk);

/* Waits for copies in flight, returns both buffers, frees the packer. NULL is
 * a no-op. */
AA_EXTERN void aa_packer_destroy(aa_packer *pk);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_CUDA_H */
