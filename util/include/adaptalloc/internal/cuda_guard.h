/*
 * adaptalloc/internal/cuda_guard.h — the CUDA runtime conventions every
 * module that calls CUDA shares (core's CUDA backends, transfer's staging
 * and packer): the error mapping (aa__cuda_err), the device guard
 * (aa__cuda_enter / aa__cuda_enter_for / aa__cuda_leave) and the decoding of
 * an aa_stream (aa__cuda_stream). Header-only, so that util itself needs no
 * CUDA: only files built with CUDA include it. Internal (aa__), never
 * installed.
 */
#ifndef AA_INTERNAL_CUDA_GUARD_H
#define AA_INTERNAL_CUDA_GUARD_H

#include <cuda_runtime.h>

#include "adaptalloc/common.h"
#include "adaptalloc/cuda.h"

/* Maps a cudaError_t to an aa_err, clearing the runtime's last error. */
static inline int aa__cuda_err(cudaError_t e) {
  if (e == cudaSuccess)
    return AA_OK;
  (void)cudaGetLastError(); /* clear it so it does not leak into torch */
  switch (e) {
  case cudaErrorMemoryAllocation:
    return AA_ENOMEM;
  case cudaErrorNoDevice:
  case cudaErrorInvalidDevice:
  case cudaErrorInsufficientDriver:
    return AA_ENODEV;
  case cudaErrorInvalidValue:
    return AA_EINVAL;
  case cudaErrorNotReady:
    return AA_EAGAIN;
  default:
    return AA_EBACKEND;
  }
}

/* Makes `device` current; *prev gets the caller's device (-1 if none could
 * be read). AA_EBACKEND when cudaSetDevice fails (error cleared). */
static inline int aa__cuda_enter(int device, int *prev) {
  int cur = -1;
  cudaError_t e = cudaGetDevice(&cur);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    cur = -1;
  }
  *prev = cur;
  if (cur == device)
    return AA_OK;
  e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    *prev = -1;
    return aa__cuda_err(e);
  }
  return AA_OK;
}

/* aa__cuda_enter for a decoded stream's device; nothing when it is -1 (prev
 * is then -1 too, and aa__cuda_leave(-1, -1) does nothing). */
static inline int aa__cuda_enter_for(int device, int *prev) {
  if (device < 0) {
    *prev = -1;
    return AA_OK;
  }
  return aa__cuda_enter(device, prev);
}

/* Restores the device saved by aa__cuda_enter. */
static inline void aa__cuda_leave(int device, int prev) {
  if (prev >= 0 && prev != device) {
    if (cudaSetDevice(prev) != cudaSuccess)
      (void)cudaGetLastError();
  }
}

/* The cudaStream_t behind an aa_stream: for aa_stream_default(d), NULL (the
 * legacy default stream) and *device = d, which the caller makes current for
 * the call (aa__cuda_enter); otherwise the handle itself and *device = -1. */
static inline cudaStream_t aa__cuda_stream(aa_stream s, int *device) {
  *device = aa_stream_default_device(s);
  return *device >= 0 ? NULL : (cudaStream_t)s;
}

#endif /* AA_INTERNAL_CUDA_GUARD_H */
