/*
 * transfer_stub.c — staging and the packer when built with
 * -DAA_WITH_CUDA=OFF: every call returns AA_ENOTSUP (or NULL, 0) with its
 * out-parameters cleared, so callers need no #ifdef.
 */
#include "adaptalloc/transfer.h"

void *aa_staging_get(aa_pool *pinned, size_t size) {
  (void)pinned;
  (void)size;
  return NULL;
}

int aa_staging_put(aa_pool *pinned, void *buf, size_t size, aa_stream last_use) {
  (void)pinned;
  (void)buf;
  (void)size;
  (void)last_use;
  return AA_ENOTSUP;
}

int aa_packer_new(aa_pool *pinned, size_t capacity, aa_packer **out) {
  (void)pinned;
  (void)capacity;
  if (out)
    *out = NULL;
  return AA_ENOTSUP;
}

int aa_packer_add(aa_packer *pk, const void *src, size_t n, size_t *offset) {
  (void)pk;
  (void)src;
  (void)n;
  if (offset)
    *offset = 0;
  return AA_ENOTSUP;
}

int aa_packer_add_many(aa_packer *pk, const void *const *src, const size_t *n,
                       size_t count, size_t *offsets) {
  (void)pk;
  (void)src;
  (void)n;
  (void)count;
  (void)offsets;
  return AA_ENOTSUP;
}

unsigned aa_packer_set_threads(aa_packer *pk, unsigned threads) {
  (void)pk;
  (void)threads;
  return 1;
}

size_t aa_packer_used(const aa_packer *pk) {
  (void)pk;
  return 0;
}

int aa_packer_flush(aa_packer *pk, void *dst, aa_stream copy_stream) {
  (void)pk;
  (void)dst;
  (void)copy_stream;
  return AA_ENOTSUP;
}

int aa_packer_wait(aa_packer *pk, aa_stream stream) {
  (void)pk;
  (void)stream;
  return AA_ENOTSUP;
}

int aa_packer_sync(aa_packer *pk) {
  (void)pk;
  return AA_ENOTSUP;
}

void aa_packer_destroy(aa_packer *pk) { (void)pk; }
