/*
 * pack_copy.h — the packer's parallel gather copy (aa_packer_add_many), kept
 * apart from the CUDA code so that it builds and is tested without CUDA.
 * Defined in transfer/src/pack_copy.c; internal (aa__), not installed; tests
 * reach it through transfer/test/transfer_test.h.
 */
#ifndef AA_PACK_COPY_H
#define AA_PACK_COPY_H

#include <stddef.h>

#define AA__PACK_MAX_THREADS 16

/* Copies item i (n[i] bytes from src[i]) to dst + off[i], for i < count.
 * The bytes of all items, taken in order, are split into `threads` (1 to
 * AA__PACK_MAX_THREADS; clamped) ranges of about equal size, so one large
 * item is shared by the threads as well as many small ones. The calling
 * thread copies the first range; a thread that cannot be started has its
 * range copied by the caller. Items must not overlap in dst. */
void aa__pack_copy(unsigned char *dst, const void *const *src, const size_t *n,
                   const size_t *off, size_t count, unsigned threads);

#endif
