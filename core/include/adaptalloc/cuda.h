/*
 * adaptalloc/cuda.h — the CUDA side: backend counters, streams, the managed
 * backend, mapped (zero-copy) pinned memory. (Staging buffers and the
 * transfer packer are the transfer module's, adaptalloc/transfer.h; the
 * PyTorch plugin's entry points are declared in adaptalloc/torch_plugin.h,
 * under torch/.)
 *
 * The backends themselves are made with aa_backend_cuda_new() and
 * aa_backend_pinned_new() from adaptalloc/core.h, and the managed-memory
 * backend with aa_backend_managed_new() below. Built without CUDA
 * (-DAA_WITH_CUDA=OFF) every function here exists and fails cleanly:
 * constructors return AA_ENOTSUP, getters return NULL / 0.
 *
 * Streams are aa_stream values; for CUDA they are cudaStream_t cast to
 * void * (NULL is the legacy default stream of the current device;
 * aa_stream_default(d) is device d's). No CUDA header is needed to use this
 * header.
 */
#ifndef ADAPTALLOC_CUDA_H
#define ADAPTALLOC_CUDA_H

#include <stdbool.h>
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

/* Device `device`'s default stream as an aa_stream of its own. To CUDA every
 * device's legacy default stream is NULL, which means "of the current
 * device"; a pool used from several devices (the pinned pool, a staging
 * buffer, a packer) would take one device's default stream for another's,
 * and wait on, or record an event in, the wrong queue. aa_stream_default(d)
 * is a small non-pointer value, different for each device, that every CUDA
 * call of this library turns back into NULL with device d made current for
 * the call; pools compare it as any other stream. NULL still means the
 * current device's default stream. For device >= AA_STREAM_DEFAULT_DEVICES or
 * < 0 the value is NULL. */
#define AA_STREAM_DEFAULT_DEVICES 256
#define AA__STREAM_DEFAULT_BASE ((uintptr_t)0x100)
static inline aa_stream aa_stream_default(int device) {
  if (device < 0 || device >= AA_STREAM_DEFAULT_DEVICES)
    return NULL;
  return (aa_stream)(AA__STREAM_DEFAULT_BASE + (uintptr_t)device);
}
/* The handle for CUDA stream `s` (a cudaStream_t) of device `device`: s
 * itself, or aa_stream_default(device) for the legacy default stream (NULL),
 * which names the device. */
static inline aa_stream aa_stream_of(void *s, int device) {
  return s != NULL ? (aa_stream)s : aa_stream_default(device);
}
/* The device of a handle made by aa_stream_default, or -1 for any other
 * stream (NULL, a cudaStream_t, AA_STREAM_HOST). */
static inline int aa_stream_default_device(aa_stream s) {
  uintptr_t v = (uintptr_t)s;
  if (v < AA__STREAM_DEFAULT_BASE || v >= AA__STREAM_DEFAULT_BASE + AA_STREAM_DEFAULT_DEVICES)
    return -1;
  return (int)(v - AA__STREAM_DEFAULT_BASE);
}

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

/* ------------------------------------------------------ device identity */

#define AA_CUDA_IDENTITY_VERSION 1

/* Which physical GPU a CUDA ordinal is (a value type). The ordinal depends
 * on CUDA_VISIBLE_DEVICES (every rank of a torchrun job sees its GPU as 0);
 * the UUID and the PCI bus id do not, and they are the labels the DCGM
 * exporter and nvidia-smi use: the UUID as "GPU-" and 8-4-4-4-12 hex digits
 * (DCGM's UUID label), the bus id as NVML writes it, an 8-digit domain
 * ("00000000:3B:00.0", DCGM's pci_bus_id label). Under MIG the UUID is the
 * one CUDA reports for the instance. */
typedef struct aa_cuda_identity {
  uint32_t version; /* AA_CUDA_IDENTITY_VERSION */
  uint32_t size;    /* sizeof(aa_cuda_identity) */
  int32_t device;   /* the CUDA ordinal asked for */
  uint32_t reserved0;
  uint64_t total_bytes; /* the card's memory (cudaDeviceProp.totalGlobalMem) */
  char uuid[48];        /* "GPU-8b2f...-...": NUL-terminated */
  char pci_bus_id[32];  /* "00000000:3B:00.0" */
  char name[96];        /* "NVIDIA H100 80GB HBM3" */
} aa_cuda_identity;

/* Fills *out for CUDA device `device` (cudaGetDeviceProperties: no context
 * is created, no memory taken; a query costs up to a few milliseconds, so
 * callers keep the answer, it never changes while the process lives).
 * AA_EINVAL for NULL out; AA_ENODEV for a device that is not there;
 * AA_ENOTSUP without CUDA. *out is zeroed (version and size set) on failure. */
AA_EXTERN int aa_cuda_device_identity(int device, aa_cuda_identity *out);

/* ---------------------------------------------------------- managed memory */

/* Unified (managed) memory: one address valid on the host and on every GPU,
 * pages migrated on demand by the driver (cudaMallocManaged). A pool over a
 * managed backend hands out blocks that kernels use like device memory (the
 * backend's kind is AA_BACKEND_DEVICE, its name "managed") and that can be
 * moved to the host and back with aa_managed_prefetch.
 *
 * The safety cap: managed memory can oversubscribe the GPU (more than it
 * has, pages evicted to the host as needed); on a shared GPU that can stall
 * or hang the card for every process on it, not only this one. So unless
 * allow_oversubscribe is set, every reservation the backend makes (a slab or
 * a large segment, not every aa_alloc) is checked first against the device's
 * free memory (cudaMemGetInfo now): refused when
 *     held + requested > device_free + held_on_device
 * held being the managed bytes the backend holds already and held_on_device
 * those of them whose last prefetch went to the device (they are already
 * counted out of device_free). The refusal is AA_ELIMIT from the backend
 * (aa_alloc returns NULL, the pool's OOM path runs) and its figures are kept:
 * aa_managed_last_refusal. */

/* Where managed memory is advised to live or be read from. */
typedef enum aa_managed_location {
  AA_MANAGED_LOC_NONE = 0,   /* no advice */
  AA_MANAGED_LOC_DEVICE = 1, /* the backend's device */
  AA_MANAGED_LOC_HOST = 2    /* the CPU */
} aa_managed_location;

/* "none", "device", "host"; "?" for anything else (the policy's names). */
AA_EXTERN const char *aa_managed_location_name(aa_managed_location loc);

#define AA_MANAGED_CONFIG_VERSION 1

/* A managed backend's settings (a value type; version and size first). The
 * advice is given with cudaMemAdvise to every reservation as it is made. */
typedef struct aa_managed_config {
  uint32_t version;                       /* AA_MANAGED_CONFIG_VERSION */
  uint32_t size;                          /* sizeof(aa_managed_config) */
  int device;                             /* CUDA ordinal (default 0) */
  aa_managed_location preferred_location; /* cudaMemAdviseSetPreferredLocation */
  aa_managed_location accessed_by;        /* cudaMemAdviseSetAccessedBy */
  bool read_mostly;                       /* cudaMemAdviseSetReadMostly */
  bool allow_oversubscribe;               /* skip the safety cap (see above);
                                             default false */
} aa_managed_config;

/* Defaults: device 0, no advice, the cap on. */
AA_EXTERN void aa_managed_config_init(aa_managed_config *cfg);

/* A backend over cudaMallocManaged (cudaMemAttachGlobal) on cfg->device.
 * *out is owned by the caller: aa_backend_destroy, after every pool over it.
 * AA_EINVAL for a NULL or wrong-version config, a bad location or device
 * number; AA_ENODEV when there is no such GPU or it cannot do managed memory
 * (cudaDevAttrManagedMemory); AA_ENOTSUP without CUDA. */
AA_EXTERN int aa_backend_managed_new(const aa_managed_config *cfg,
                                     aa_backend **out);

/* Whether b was made by aa_backend_managed_new (false for NULL). */
AA_EXTERN bool aa_backend_is_managed(const aa_backend *b);

/* The location meaning "the host" for aa_managed_prefetch (cudaCpuDeviceId). */
#define AA_MANAGED_HOST (-1)

/* Moves the pages of [ptr, ptr + size) to `device` (a CUDA ordinal) or to
 * the host (AA_MANAGED_HOST), in order on `stream` (cudaMemPrefetchAsync;
 * the call returns at once). `b` is the managed backend the memory came
 * from (checked: its memory must be managed), or NULL for any managed memory.
 * AA_EINVAL for NULL ptr, size 0, memory that is not managed, a bad
 * device; AA_ENOTSUP without CUDA; AA_EBACKEND when the driver refuses
 * (a device without concurrent managed access cannot prefetch). */
AA_EXTERN int aa_managed_prefetch(const aa_backend *b, const void *ptr,
                                  size_t size, int device, aa_stream stream);

/* Gives [ptr, ptr + size) the advice of `cfg` (its device, locations and
 * read_mostly; allow_oversubscribe is ignored) on top of what it has: a
 * location NONE or read_mostly false leaves that advice alone. Advice is
 * per page, so memory sharing a page with the range gets it too. */
AA_EXTERN int aa_managed_advise(const void *ptr, size_t size,
                                const aa_managed_config *cfg);

#define AA_MANAGED_RANGE_VERSION 1

/* What the driver says of a managed range (cudaMemRangeGetAttribute). A
 * location is a CUDA ordinal, AA_MANAGED_HOST, or AA_MANAGED_UNSET (no
 * advice or prefetch, or not the same for the whole range). */
#define AA_MANAGED_UNSET (-2)
typedef struct aa_managed_range {
  uint32_t version;           /* AA_MANAGED_RANGE_VERSION */
  uint32_t size;              /* sizeof(aa_managed_range) */
  int preferred_location;     /* cudaMemRangeAttributePreferredLocation */
  int last_prefetch_location; /* cudaMemRangeAttributeLastPrefetchLocation */
  int read_mostly;            /* 1 when the whole range is read-mostly */
  uint32_t n_accessed_by;     /* entries of accessed_by in use */
  int accessed_by[8];         /* cudaMemRangeAttributeAccessedBy */
} aa_managed_range;

/* Fills *out for [ptr, ptr + size). AA_EINVAL for bad arguments or memory
 * that is not managed; AA_ENOTSUP without CUDA. */
AA_EXTERN int aa_managed_range_info(const void *ptr, size_t size,
                                    aa_managed_range *out);

#define AA_MANAGED_REFUSAL_VERSION 1

/* The last reservation the safety cap refused (a value type). */
typedef struct aa_managed_refusal {
  uint32_t version; /* AA_MANAGED_REFUSAL_VERSION */
  uint32_t size;    /* sizeof(aa_managed_refusal) */
  uint64_t count;   /* refusals by this backend so far */
  int32_t device;
  uint32_t reserved0;
  uint64_t requested;      /* bytes the reservation asked for */
  uint64_t held;           /* managed bytes the backend held then */
  uint64_t held_on_device; /* of them, last prefetched to the device */
  uint64_t device_free;    /* cudaMemGetInfo's free bytes then */
  char message[256];       /* the refusal in words, naming the figures */
} aa_managed_refusal;

/* Fills *out with the backend's last refusal: AA_OK, or AA_ENOENT (count 0,
 * message "") when none happened; AA_EINVAL when b is not a managed
 * backend; AA_ENOTSUP without CUDA. */
AA_EXTERN int aa_managed_last_refusal(const aa_backend *b,
                                      aa_managed_refusal *out);

/* ----------------------------------------------------------- pinned memory */

/* The device address of mapped pinned memory (all pinned backend memory is
 * mapped and portable), for kernels that read small host data directly
 * (zero-copy). `host` may point anywhere inside a pinned allocation.
 * AA_EINVAL when `host` is not mapped pinned memory. */
AA_EXTERN int aa_pinned_device_ptr(const void *host, void **dev_out);

/* ------------------------------------------------------ CUDA IPC
 * Mapped device memory (the expandable large path's handles) shared
 * between processes: the owner describes a block with aa_block_share and
 * exports each handle's POSIX descriptor (aa_backend_export_fd); another
 * process maps them with aa_cuda_ipc_import. */
typedef struct aa_cuda_import aa_cuda_import;

/* Maps, in this process, the n handles whose descriptors fds[i] (numbers
 * in process `pid`; pid 0 or this process's own: descriptors of this
 * process) were exported, sizes[i] bytes each, side by side at a new
 * address (*base) on `device`, readable and writable there. The copies
 * of the descriptors are taken with pidfd_getfd (Linux 5.6; the caller
 * needs ptrace access to pid, as for PyTorch's expandable segments) and
 * closed once imported. *out is the caller's: aa_cuda_ipc_close unmaps
 * and frees. AA_ENOTSUP (no driver entry points, or a kernel without
 * pidfd_getfd), AA_EPERM (no ptrace access to pid), AA_ENOENT (pid or a
 * descriptor gone), AA_ENOMEM, AA_EBACKEND. */
AA_EXTERN int aa_cuda_ipc_import(int device, int pid, const int *fds, const size_t *sizes,
                                 size_t n, aa_cuda_import **out, void **base);
AA_EXTERN void aa_cuda_ipc_close(aa_cuda_import *im);

/* The device allocation (cudaMalloc's, or a VMM mapping's) that holds ptr:
 * its start and size (cuMemGetAddressRange). AA_EINVAL for no such
 * allocation, AA_ENOTSUP without CUDA. */
AA_EXTERN int aa_cuda_alloc_base(const void *ptr, void **base, size_t *size);

#ifdef __cplusplus
}
#endif
#endif /* ADAPTALLOC_CUDA_H */
