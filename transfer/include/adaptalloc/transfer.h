/*
 * adaptalloc/transfer.h — host-to-device transfers through pinned memory:
 * staging buffers (aa_staging_get / aa_staging_put, a pool over the pinned
 * backend used on the host pseudo-stream) and the packer (many small host
 * tensors -> one pinned buffer -> ONE cudaMemcpyAsync, double-buffered with
 * events so copies overlap compute). A user of the pool's public API
 * (core.h, cuda.h), in its own module (transfer/); in libadaptalloc, not in
 * libadaptalloc_core. Without CUDA every call returns AA_ENOTSUP (or NULL,
 * 0), so callers need no #ifdef.
 *
 * Ownership: staging buffers belong to the caller between aa_staging_get()
 * and aa_staging_put(); the pool must outlive them. A packer owns its two
 * pinned buffers (from the pinned pool it was given, or from cudaHostAlloc
 * when none) and returns them in aa_packer_destroy(); one thread uses it at
 * a time.
 */
#ifndef ADAPTALLOC_TRANSFER_H
#define ADAPTALLOC_TRANSFER_H

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------------------------- staging */

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
#endif /* ADAPTALLOC_TRANSFER_H */
