/*
 * cuda_internal.h — shared by the CUDA backend files (never installed).
 *
 *   device guard   aa__cuda_enter / aa__cuda_leave (util's
 *                  adaptalloc/internal/cuda_guard.h, with the error mapping
 *                  aa__cuda_err and aa__cuda_stream): make `device` current
 *                  for one call and restore the caller's device afterwards.
 *   event pool     a free list of cudaEvent_t (cudaEventDisableTiming), one
 *                  per device; events are created only when the list is
 *                  empty and destroyed only with the backend.
 *   backend ctx    aa__cuda_backend: what both CUDA backends share (counters,
 *                  event pools); the first member is the aa_backend value so
 *                  a backend pointer is also a context pointer.
 */
#ifndef AA_CUDA_INTERNAL_H
#define AA_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"
#include "adaptalloc/internal/cuda_guard.h"

typedef struct aa__cuda_backend aa__cuda_backend;
/* Counts one backend allocation (or map) of `size` bytes that ended with
 * `rc`: a success, or a failure and, for AA_ENOMEM, an out-of-memory.
 * Returns rc. */
int aa__cuda_count_alloc(aa__cuda_backend *cb, int rc, size_t size);

/* ------------------------------------------------------------- event pool */

typedef struct aa__cuda_event {
  cudaEvent_t ev;
  int device;
  struct aa__cuda_event *next;     /* free list */
  struct aa__cuda_event *all_next; /* every event ever made, for destroy */
} aa__cuda_event;

typedef struct aa__cuda_evpool {
  pthread_mutex_t lock;
  aa__cuda_event *free;
  aa__cuda_event *all;
  int device;
  uint64_t created;
  uint64_t nfree;
} aa__cuda_evpool;

int aa__cuda_evpool_init(aa__cuda_evpool *p, int device);
/* Takes an event from the pool (creating one on `device` if none is free)
 * and records it on `stream`. */
int aa__cuda_evpool_record(aa__cuda_evpool *p, cudaStream_t stream,
                           aa__cuda_event **out);
/* AA_OK done, AA_EAGAIN pending, <0 error. */
int aa__cuda_event_query(const aa__cuda_event *e);
void aa__cuda_evpool_put(aa__cuda_evpool *p, aa__cuda_event *e);
/* Destroys every event the pool ever made. Outstanding handles die too. */
void aa__cuda_evpool_fini(aa__cuda_evpool *p);

/* --------------------------------------------------------- backend context */

#define AA__CUDA_MAGIC 0x41414355u /* "AACU" */

struct aa__cuda_backend {
  aa_backend base; /* must be first */
  uint32_t magic;
  _Atomic uint64_t allocs;
  _Atomic uint64_t frees;
  _Atomic uint64_t failures;
  _Atomic uint64_t ooms;
  _Atomic uint64_t bytes_mapped;
  _Atomic uint64_t events_recorded;
  int ndev; /* event pools below */
  aa__cuda_evpool evpools[AA_MAX_DEVICES];
  /* device backend only: allocations cudaMalloc returned under 4 KiB
   * alignment, re-made larger and aligned by hand (rare). */
  pthread_mutex_t mis_lock;
  struct aa__cuda_misaligned {
    void *aligned;
    void *raw;
  } * mis;
  size_t nmis, capmis;
  /* device backend only: the virtual-memory mapping granularity, asked of
   * the driver on first use (AA__CUDA_VM_UNKNOWN until then; 0 = no VMM). */
  _Atomic size_t vm_granularity;
  /* device backend only: maps ask for handles exportable as POSIX file
   * descriptors (CUDA IPC); cleared when the driver refuses the type. */
  _Atomic bool vm_fd;
  /* device backend only: descriptors export_fd made, one per handle,
   * closed when the handle is unmapped (cuda_device.c) */
  pthread_mutex_t fd_lock;
  struct aa__cuda_fd {
    uint64_t handle;
    int fd;
  } * fds;
  size_t nfds, capfds;
};

#define AA__CUDA_VM_UNKNOWN SIZE_MAX

/* Event ops common to both backends. */
int aa__cuda_op_event_record(aa_backend *b, aa_stream stream, void **out);
int aa__cuda_op_event_query(aa_backend *b, void *event);
/* cudaStreamQuery: AA_OK when `stream` is idle, AA_EAGAIN while it has work
 * or is being captured into a graph; AA_STREAM_HOST is always idle. The
 * pinned backend's stream_query (the device backend offers none). */
int aa__cuda_op_stream_query(aa_backend *b, aa_stream stream);
/* stream_wait: cudaStreamWaitEvent, refused (AA_EAGAIN) for the host
 * pseudo-stream and a stream under capture. Device, pinned and managed. */
int aa__cuda_op_stream_wait(aa_backend *b, aa_stream stream, void *event);
void aa__cuda_op_event_release(aa_backend *b, void *event);

/* NULL unless b is one of ours. */
aa__cuda_backend *aa__cuda_from(const aa_backend *b);

#endif /* AA_CUDA_INTERNAL_H */
