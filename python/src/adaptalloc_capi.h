/*
 * adaptalloc_capi.h — the C API of adaptalloc._C for the package's other
 * native module, adaptalloc._torch_ext (torch/ext/torch_ext.cpp): _C is the
 * one module that binds the library's staging buffers, packer and runtime,
 * and _torch_ext, the tensor side (tensors over pinned blocks, pack's device
 * views, the copy tracker), reaches them only through this table. It is
 * published as the capsule AA_PY_CAPI_NAME (PyCapsule_Import; CPython's
 * "Providing a C API for an Extension Module"), made once at _C's import
 * and never freed.
 *
 * Ownership: every pointer the table hands out (a pool, a block, a packer
 * given by its Packer's handle) is the library's, as through the C API it
 * wraps; nothing here allocates but staging_get's block, which goes back
 * with staging_put. After adaptalloc.shutdown() (or the runtime's end)
 * live() is false, pinned_pool() is NULL and staging_put, record and
 * release do nothing (the pools are gone).
 *
 * Threads: every function may be called from any thread, with or without
 * the GIL, and sets no Python error.
 */
#ifndef ADAPTALLOC_CAPI_H
#define ADAPTALLOC_CAPI_H

#include <stddef.h>
#include <stdint.h>

#include "adaptalloc/core.h"
#include "adaptalloc/transfer.h"

#define AA_PY_CAPI_NAME "adaptalloc._C._C_API"
#define AA_PY_CAPI_VERSION 1u

#ifdef __cplusplus
extern "C" {
#endif

typedef struct aa_py_capi {
  uint32_t size;    /* sizeof(aa_py_capi) of the _C that made it */
  uint32_t version; /* AA_PY_CAPI_VERSION */

  /* Whether the runtime runs and was not shut down: its pools are usable. */
  int (*live)(void);
  /* The runtime's pinned pool, made on first use; NULL when there is none
   * (no CUDA, no GPU) or the runtime was shut down. */
  aa_pool *(*pinned_pool)(void);
  /* aa_staging_get: a pinned block of size bytes; NULL when out of memory. */
  void *(*staging_get)(aa_pool *pinned, size_t size);
  /* aa_staging_put, when live(): the block is reused after stream's work
   * up to now (AA_STREAM_HOST: at once, or after the streams recorded). */
  void (*staging_put)(aa_pool *pinned, void *block, size_t size, aa_stream stream);
  /* aa_block_size: the block's size, 0 when ptr is no block of the pool. */
  size_t (*block_size)(aa_pool *pool, const void *ptr);
  /* aa_record_stream when live() (AA_ENOTSUP otherwise): AA_OK, AA_EINVAL
   * when ptr is no live block of the pool, AA_ENOMEM. */
  int (*record)(aa_pool *pool, void *ptr, aa_stream stream);
  /* aa_pool_release when live(). */
  void (*release)(aa_pool *pool);
  /* aa_strerror. */
  const char *(*strerror)(int rc);

  /* The packer of a Packer (its handle): aa_packer_add_many, _used, _flush,
   * _wait. */
  int (*pack)(aa_packer *pk, const void *const *src, const size_t *len, size_t count,
              size_t *offsets);
  size_t (*packed)(const aa_packer *pk);
  int (*flush)(aa_packer *pk, void *dst, aa_stream copy_stream);
  int (*wait)(aa_packer *pk, aa_stream stream);
} aa_py_capi;

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_CAPI_H */
