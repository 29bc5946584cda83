/*
 * cuda_stub.c — the CUDA API when built with -DAA_WITH_CUDA=OFF: every
 * constructor returns AA_ENOTSUP with its out-parameter cleared, getters
 * return NULL or 0, so callers need no #ifdef.
 */
#include <string.h>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"

int aa_backend_cuda_new(int device, aa_backend **out) {
  (void)device;
  if (out)
    *out = NULL;
  return AA_ENOTSUP;
}

int aa_backend_pinned_new(aa_backend **out) {
  if (out)
    *out = NULL;
  return AA_ENOTSUP;
}

int aa_cuda_device_count(void) { return 0; }

int aa_cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes) {
  (void)device;
  *free_bytes = 0;
  *total_bytes = 0;
  return AA_ENOTSUP;
}

int aa_cuda_device_identity(int device, aa_cuda_identity *out) {
  if (out == NULL)
    return AA_EINVAL;
  memset(out, 0, sizeof *out);
  out->version = AA_CUDA_IDENTITY_VERSION;
  out->size = (uint32_t)sizeof *out;
  out->device = device;
  return AA_ENOTSUP;
}

int aa_backend_cuda_counts(const aa_backend *b, aa_cuda_counts *out) {
  (void)b;
  if (out) {
    memset(out, 0, sizeof *out);
    out->version = AA_CUDA_COUNTS_VERSION;
    out->size = (uint32_t)sizeof *out;
  }
  return AA_ENOTSUP;
}

int aa_pinned_device_ptr(const void *host, void **dev_out) {
  (void)host;
  if (dev_out)
    *dev_out = NULL;
  return AA_ENOTSUP;
}

int aa_backend_managed_new(const aa_managed_config *cfg, aa_backend **out) {
  (void)cfg;
  if (out)
    *out = NULL;
  return AA_ENOTSUP;
}

bool aa_backend_is_managed(const aa_backend *b) {
  (void)b;
  return false;
}

int aa_managed_prefetch(const aa_backend *b, const void *ptr, size_t size,
                        int device, aa_stream stream) {
  (void)b;
  (void)ptr;
  (void)size;
  (void)device;
  (void)stream;
  return AA_ENOTSUP;
}

int aa_managed_advise(const void *ptr, size_t size,
                      const aa_managed_config *cfg) {
  (void)ptr;
  (void)size;
  (void)cfg;
  return AA_ENOTSUP;
}

int aa_managed_range_info(const void *ptr, size_t size, aa_managed_range *out) {
  (void)ptr;
  (void)size;
  if (out) {
    memset(out, 0, sizeof *out);
    out->version = AA_MANAGED_RANGE_VERSION;
    out->size = (uint32_t)sizeof *out;
    out->preferred_location = AA_MANAGED_UNSET;
    out->last_prefetch_location = AA_MANAGED_UNSET;
  }
  return AA_ENOTSUP;
}

int aa_managed_last_refusal(const aa_backend *b, aa_managed_refusal *out) {
  (void)b;
  if (out) {
    memset(out, 0, sizeof *out);
    out->version = AA_MANAGED_REFUSAL_VERSION;
    out->size = (uint32_t)sizeof *out;
  }
  return AA_ENOTSUP;
}

int aa_cuda_ipc_import(int device, int pid, const int *fds, const size_t *sizes, size_t n,
                       aa_cuda_import **out, void **base) {
  (void)device, (void)pid, (void)fds, (void)sizes, (void)n;
  if (out)
    *out = NULL;
  if (base)
    *base = NULL;
  return AA_ENOTSUP;
}

void aa_cuda_ipc_close(aa_cuda_import *im) { (void)im; }

int aa_cuda_alloc_base(const void *ptr, void **base, size_t *size) {
  (void)ptr;
  if (base)
    *base = NULL;
  if (size)
    *size = 0;
  return AA_ENOTSUP;
}
