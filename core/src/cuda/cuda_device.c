/*
 * cuda_device.c — the CUDA device-memory backend: slabs and large segments
 * from cudaMalloc, stream events from the pooled event list, synchronize =
 * cudaDeviceSynchronize on the backend's device.
 *
 * Entry point: aa_backend_cuda_new(device, &b); destroyed by
 * aa_backend_destroy(b) through ops->destroy.
 *
 * Every call that touches CUDA state makes the backend's device current and
 * restores the caller's device afterwards, so a pool for device 1 used from a
 * thread whose current device is 0 neither fails nor changes that thread.
 * cudaErrorMemoryAllocation becomes AA_ENOMEM with the runtime's last error
 * cleared (PyTorch checks cudaGetLastError after kernels and would otherwise
 * report our handled OOM as its own failure).
 *
 * cudaFree is used, not cudaFreeAsync: the pool gives memory back only when
 * it holds no live block, but kernels on the freeing stream may still read
 * it; cudaFree's implicit device synchronisation is what makes that safe.
 *
 * Virtual memory (the five map ops, for AA_LARGE_EXPANDABLE): the CUDA
 * driver's VMM API (cuMemAddressReserve, cuMemCreate, cuMemMap,
 * cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree). libcuda is
 * not linked: <cuda.h> gives the types only, and the entry points are
 * resolved once through cudart (cudaGetDriverEntryPointByVersion), so the
 * library loads without a driver. If any is missing, or the device lacks
 * CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, map_granularity
 * answers 0 and the core uses AA_LARGE_CACHE. One map is one cuMemCreate
 * handle of one or more granules (2 MiB on H100/H200; the core maps the
 * pages one request needs with one call, which costs about what one granule
 * does), counted like a cudaMalloc in the backend's counters; unmap gives
 * it back to the driver at once (no implicit synchronisation: the core
 * unmaps only memory no work uses).
 *
 * Sharing with another process (CUDA IPC, aa_block_share): maps ask for
 * handles exportable as POSIX file descriptors where the device offers the
 * type (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
 * a driver that refuses it at cuMemCreate turns the request off for the
 * backend's later maps. export_fd makes one descriptor per handle
 * (cuMemExportToShareableHandle), kept until the handle is unmapped, so
 * that a consumer can take a copy of it (pidfd_getfd) while the block it
 * shares is live. aa_cuda_ipc_import maps such descriptors of another
 * process into this one; aa_cuda_alloc_base finds the cudaMalloc
 * allocation under a pointer (cudaIpcGetMemHandle wants its start).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cuda.h> /* driver types only: libcuda is never linked */

#include "cuda_internal.h"

/* cudaMalloc returned memory below the 4 KiB alignment the core needs (seen
 * only for small sizes, which the pool does not ask for by default): make a
 * larger allocation and hand out its first aligned address. */
static int alloc_aligned_slow(aa__cuda_backend *cb, size_t size, void **out) {
  void *raw = NULL;
  uintptr_t a;
  int rc = aa__cuda_err(cudaMalloc(&raw, size + 4096));
  if (rc != AA_OK)
    return rc;
  a = ((uintptr_t)raw + 4095u) & ~(uintptr_t)4095u;
  pthread_mutex_lock(&cb->mis_lock);
  if (cb->nmis == cb->capmis) {
    size_t ncap = cb->capmis ? cb->capmis * 2 : 16;
    struct aa__cuda_misaligned *n = realloc(cb->mis, ncap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&cb->mis_lock);
      if (cudaFree(raw) != cudaSuccess)
        (void)cudaGetLastError();
      return AA_ENOMEM;
    }
    cb->mis = n;
    cb->capmis = ncap;
  }
  cb->mis[cb->nmis].aligned = (void *)a;
  cb->mis[cb->nmis].raw = raw;
  cb->nmis++;
  pthread_mutex_unlock(&cb->mis_lock);
  *out = (void *)a;
  return AA_OK;
}

/* The raw pointer behind an aligned one made by alloc_aligned_slow (removed
 * from the table), or ptr itself. */
static void *mis_take(aa__cuda_backend *cb, void *ptr) {
  void *raw = ptr;
  size_t i;
  /* Backend frees are rare (a slab or segment going back): a lock is fine. */
  pthread_mutex_lock(&cb->mis_lock);
  for (i = 0; i < cb->nmis; i++) {
    if (cb->mis[i].aligned == ptr) {
      raw = cb->mis[i].raw;
      cb->mis[i] = cb->mis[cb->nmis - 1];
      cb->nmis--;
      break;
    }
  }
  pthread_mutex_unlock(&cb->mis_lock);
  return raw;
}

static int dev_alloc(aa_backend *b, size_t size, void **out) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  void *p = NULL;
  int prev = -1;
  int rc;

  *out = NULL;
  if (size == 0)
    return AA_EINVAL;
  rc = aa__cuda_enter(b->device, &prev);
  if (rc != AA_OK)
    goto done;
  rc = aa__cuda_err(cudaMalloc(&p, size));
  if (rc == AA_OK && ((uintptr_t)p & 4095u) != 0) {
    if (cudaFree(p) != cudaSuccess)
      (void)cudaGetLastError();
    p = NULL;
    rc = alloc_aligned_slow(cb, size, &p);
  }
  aa__cuda_leave(b->device, prev);
done:
  if (aa__cuda_count_alloc(cb, rc, size) != AA_OK)
    return rc;
  *out = p;
  return AA_OK;
}

static void dev_free(aa_backend *b, void *ptr, size_t size) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  int prev = -1;
  if (!ptr)
    return;
  ptr = mis_take(cb, ptr);
  if (aa__cuda_enter(b->device, &prev) == AA_OK) {
    /* cudaErrorCudartUnloading at exit is harmless; clear any error. */
    if (cudaFree(ptr) != cudaSuccess)
      (void)cudaGetLastError();
    aa__cuda_leave(b->device, prev);
  }
  atomic_fetch_add_explicit(&cb->frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&cb->bytes_mapped, size, memory_order_relaxed);
}

static int dev_synchronize(aa_backend *b) {
  int prev = -1;
  int rc = aa__cuda_enter(b->device, &prev);
  if (rc != AA_OK)
    return rc;
  rc = aa__cuda_err(cudaDeviceSynchronize());
  aa__cuda_leave(b->device, prev);
  return rc;
}

static void dev_destroy(aa_backend *b) {
  aa__cuda_backend *cb;
  size_t i;
  if (!b)
    return;
  cb = (aa__cuda_backend *)b->ctx;
  aa__cuda_evpool_fini(&cb->evpools[0]);
  for (i = 0; i < cb->nmis; i++) {
    if (cudaFree(cb->mis[i].raw) != cudaSuccess)
      (void)cudaGetLastError();
  }
  free(cb->mis);
  pthread_mutex_destroy(&cb->mis_lock);
  for (i = 0; i < cb->nfds; i++)
    (void)close(cb->fds[i].fd);
  free(cb->fds);
  pthread_mutex_destroy(&cb->fd_lock);
  cb->magic = 0;
  free(cb);
}

/* ------------------------------------------------------- virtual memory */

/* The driver entry points, as the CUDA 12.0 ABI defines them. */
typedef CUresult(CUDAAPI *vm_ctx_get_current_fn)(CUcontext *pctx);
typedef CUresult(CUDAAPI *vm_device_get_fn)(CUdevice *device, int ordinal);
typedef CUresult(CUDAAPI *vm_device_get_attribute_fn)(int *pi,
                                                      CUdevice_attribute attrib,
                                                      CUdevice dev);
typedef CUresult(CUDAAPI *vm_get_granularity_fn)(
    size_t *granularity, const CUmemAllocationProp *prop,
    CUmemAllocationGranularity_flags option);
typedef CUresult(CUDAAPI *vm_address_reserve_fn)(CUdeviceptr *ptr, size_t size,
                                                 size_t alignment,
                                                 CUdeviceptr addr,
                                                 unsigned long long flags);
typedef CUresult(CUDAAPI *vm_address_free_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult(CUDAAPI *vm_create_fn)(CUmemGenericAllocationHandle *handle,
                                        size_t size,
                                        const CUmemAllocationProp *prop,
                                        unsigned long long flags);
typedef CUresult(CUDAAPI *vm_release_fn)(CUmemGenericAllocationHandle handle);
typedef CUresult(CUDAAPI *vm_map_fn)(CUdeviceptr ptr, size_t size,
                                     size_t offset,
                                     CUmemGenericAllocationHandle handle,
                                     unsigned long long flags);
typedef CUresult(CUDAAPI *vm_unmap_fn)(CUdeviceptr ptr, size_t size);
typedef CUresult(CUDAAPI *vm_set_access_fn)(CUdeviceptr ptr, size_t size,
                                            const CUmemAccessDesc *desc,
                                            size_t count);

typedef CUresult(CUDAAPI *vm_export_fn)(void *shareable, CUmemGenericAllocationHandle handle,
                                        CUmemAllocationHandleType type,
                                        unsigned long long flags);
typedef CUresult(CUDAAPI *vm_import_fn)(CUmemGenericAllocationHandle *handle, void *shareable,
                                        CUmemAllocationHandleType type);
typedef CUresult(CUDAAPI *vm_addr_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr p);

_Static_assert(sizeof(vm_map_fn) == sizeof(void *),
               "driver entry points travel through a void *");
_Static_assert(sizeof(CUmemGenericAllocationHandle) <= sizeof(uintptr_t),
               "a VMM handle travels through a void *");

/* Written once under vm_once, read-only afterwards. */
static struct {
  bool ok; /* every entry point below resolved */
  vm_ctx_get_current_fn ctx_get_current;
  vm_device_get_fn device_get;
  vm_device_get_attribute_fn device_get_attribute;
  vm_get_granularity_fn get_granularity;
  vm_address_reserve_fn address_reserve;
  vm_address_free_fn address_free;
  vm_create_fn create;
  vm_release_fn release;
  vm_map_fn map;
  vm_unmap_fn unmap;
  vm_set_access_fn set_access;
  /* optional (NULL: no CUDA IPC of mapped memory) */
  vm_export_fn export_handle;
  vm_import_fn import_handle;
  vm_addr_range_fn addr_range;
} vm_api;
static pthread_once_t vm_once = PTHREAD_ONCE_INIT;

/* Looks one driver symbol up through cudart; *slot (a function pointer)
 * stays NULL when the driver lacks it or there is no driver. */
static bool vm_sym(const char *name, void *slot) {
  enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
  void *fn = NULL;
  cudaError_t e;
#if CUDART_VERSION >= 12050
  e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &st);
#else
  e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &st);
#endif
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (st != cudaDriverEntryPointSuccess || !fn)
    return false;
  /* ISO C has no object-to-function pointer cast; copy the bits (POSIX
   * guarantees they are the same size, checked above). */
  memcpy(slot, &fn, sizeof fn);
  return true;
}

static void vm_resolve(void) {
  bool ok = true;
  ok = vm_sym("cuCtxGetCurrent", &vm_api.ctx_get_current) && ok;
  ok = vm_sym("cuDeviceGet", &vm_api.device_get) && ok;
  ok = vm_sym("cuDeviceGetAttribute", &vm_api.device_get_attribute) && ok;
  ok = vm_sym("cuMemGetAllocationGranularity", &vm_api.get_granularity) && ok;
  ok = vm_sym("cuMemAddressReserve", &vm_api.address_reserve) && ok;
  ok = vm_sym("cuMemAddressFree", &vm_api.address_free) && ok;
  ok = vm_sym("cuMemCreate", &vm_api.create) && ok;
  ok = vm_sym("cuMemRelease", &vm_api.release) && ok;
  ok = vm_sym("cuMemMap", &vm_api.map) && ok;
  ok = vm_sym("cuMemUnmap", &vm_api.unmap) && ok;
  ok = vm_sym("cuMemSetAccess", &vm_api.set_access) && ok;
  vm_api.ok = ok;
  if (!vm_sym("cuMemExportToShareableHandle", &vm_api.export_handle) ||
      !vm_sym("cuMemImportFromShareableHandle", &vm_api.import_handle))
    vm_api.export_handle = NULL, vm_api.import_handle = NULL;
  if (!vm_sym("cuMemGetAddressRange", &vm_api.addr_range))
    vm_api.addr_range = NULL;
}

static bool vm_available(void) {
  if (pthread_once(&vm_once, vm_resolve) != 0)
    return false;
  return vm_api.ok;
}

static int vm_err(CUresult r) {
  if (r == CUDA_SUCCESS)
    return AA_OK;
  return r == CUDA_ERROR_OUT_OF_MEMORY ? AA_ENOMEM : AA_EBACKEND;
}

static CUdeviceptr vm_addr(const void *p) { return (CUdeviceptr)(uintptr_t)p; }

static void fd_forget(aa__cuda_backend *cb, void *handle);

/* Pinned (non-migratable) memory on the backend's device, no export handle. */
static void vm_prop(const aa_backend *b, CUmemAllocationProp *prop) {
  memset(prop, 0, sizeof *prop);
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = b->device;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
}

/* vm_prop for a cuMemCreate: with the POSIX descriptor handle type while
 * the backend asks for it (cb->vm_fd). */
static void vm_prop_create(const aa_backend *b, CUmemAllocationProp *prop) {
  const aa__cuda_backend *cb = (const aa__cuda_backend *)b->ctx;
  vm_prop(b, prop);
  if (atomic_load_explicit(&cb->vm_fd, memory_order_relaxed))
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

/* aa__cuda_enter, plus a current driver context. A thread that has made no
 * runtime call on this device yet has none (aa__cuda_enter skips
 * cudaSetDevice when the thread's default device is already `device`);
 * driver 580 was seen to reserve and create without one, but the VMM calls
 * are documented against a current context, so cudaFree(NULL) makes the
 * runtime bind the device's primary context to this thread, as any runtime
 * call would. On failure nothing is left to undo. */
static int vm_enter(const aa_backend *b, int *prev) {
  CUcontext ctx = NULL;
  int rc = aa__cuda_enter(b->device, prev);
  if (rc != AA_OK)
    return rc;
  if (vm_api.ctx_get_current(&ctx) == CUDA_SUCCESS && ctx != NULL)
    return AA_OK;
  rc = aa__cuda_err(cudaFree(NULL));
  if (rc != AA_OK)
    aa__cuda_leave(b->device, *prev);
  return rc;
}

/* The driver's recommended granularity, rounded up to a power of two of at
 * least 64 KiB; 0 when virtual memory cannot be used. */
static size_t vm_query_granularity(const aa_backend *b) {
  CUmemAllocationProp prop;
  CUdevice dev = 0;
  size_t g = 0, p = (size_t)64 << 10;
  int supported = 0;
  int prev = -1;

  if (!vm_available())
    return 0;
  if (vm_enter(b, &prev) != AA_OK)
    return 0;
  vm_prop(b, &prop);
  if (vm_api.device_get(&dev, b->device) != CUDA_SUCCESS ||
      vm_api.device_get_attribute(
          &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
          dev) != CUDA_SUCCESS ||
      !supported ||
      vm_api.get_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) !=
          CUDA_SUCCESS)
    g = 0;
  if (g != 0 && vm_api.export_handle != NULL) {
    int fd_ok = 0;
    aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
    if (vm_api.device_get_attribute(&fd_ok,
                                    CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                    dev) == CUDA_SUCCESS &&
        fd_ok)
      atomic_store_explicit(&cb->vm_fd, true, memory_order_relaxed);
  }
  aa__cuda_leave(b->device, prev);
  if (g == 0)
    return 0;
  while (p < g) {
    if (p > SIZE_MAX / 2)
      return 0;
    p <<= 1;
  }
  return p;
}

static size_t dev_map_granularity(aa_backend *b) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  size_t g = atomic_load_explicit(&cb->vm_granularity, memory_order_acquire);
  if (g != AA__CUDA_VM_UNKNOWN)
    return g;
  /* Two threads racing here both ask the driver and store the same answer. */
  g = vm_query_granularity(b);
  atomic_store_explicit(&cb->vm_granularity, g, memory_order_release);
  return g;
}

static int dev_va_reserve(aa_backend *b, size_t size, void **out) {
  size_t g = dev_map_granularity(b);
  CUdeviceptr p = 0;
  CUresult r;
  int prev = -1;
  int rc;

  *out = NULL;
  if (g == 0)
    return AA_ENOTSUP;
  if (size == 0 || size % g != 0)
    return AA_EINVAL;
  rc = vm_enter(b, &prev);
  if (rc != AA_OK)
    return rc;
  r = vm_api.address_reserve(&p, size, g, 0, 0);
  aa__cuda_leave(b->device, prev);
  rc = vm_err(r);
  if (rc != AA_OK)
    return rc;
  *out = (void *)(uintptr_t)p;
  return AA_OK;
}

static void dev_va_release(aa_backend *b, void *base, size_t size) {
  int prev = -1;
  bool entered;
  if (!base || !vm_available())
    return;
  /* The driver call needs no runtime state; try it even when the runtime is
   * unloading (process exit) and the device guard fails. */
  entered = vm_enter(b, &prev) == AA_OK;
  (void)vm_api.address_free(vm_addr(base), size);
  if (entered)
    aa__cuda_leave(b->device, prev);
}

/* Whether [addr, addr + size) is a range map calls take: AA_OK, AA_ENOTSUP
 * without virtual memory, AA_EINVAL unaligned. */
static int vm_range_ok(aa_backend *b, const void *addr, size_t size) {
  size_t g = dev_map_granularity(b);
  if (g == 0)
    return AA_ENOTSUP;
  if (!addr || size == 0 || size % g != 0 || (uintptr_t)addr % g != 0)
    return AA_EINVAL;
  return AA_OK;
}

/* Makes [addr, addr + size) readable and writable from the backend's
 * device: one cuMemSetAccess, over one mapping or several side by side.
 * Inside vm_enter. */
static CUresult set_rw(aa_backend *b, void *addr, size_t size) {
  CUmemAllocationProp prop;
  CUmemAccessDesc access;
  vm_prop(b, &prop);
  memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return vm_api.set_access(vm_addr(addr), size, &access, 1);
}

/* Maps handle h whole at addr and makes it readable and writable from the
 * backend's device; a failed cuMemSetAccess unmaps it again (a failed
 * cuMemMap, the range already mapped say, must not unmap what was there).
 * Inside vm_enter. */
static CUresult map_rw(aa_backend *b, void *addr, size_t size, CUmemGenericAllocationHandle h) {
  CUresult r = vm_api.map(vm_addr(addr), size, 0, h, 0);
  if (r == CUDA_SUCCESS) {
    r = set_rw(b, addr, size);
    if (r != CUDA_SUCCESS)
      (void)vm_api.unmap(vm_addr(addr), size);
  }
  return r;
}

static int dev_map(aa_backend *b, void *addr, size_t size, void **handle) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop;
  CUresult r;
  int prev = -1;
  int rc;

  *handle = NULL;
  rc = vm_range_ok(b, addr, size);
  if (rc != AA_OK)
    return rc;
  rc = vm_enter(b, &prev);
  if (rc != AA_OK)
    goto done;
  vm_prop_create(b, &prop);
  r = vm_api.create(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY &&
      prop.requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    /* the driver refuses the exportable type here: plain handles from now
     * on (such memory cannot be shared with another process) */
    atomic_store_explicit(&cb->vm_fd, false, memory_order_relaxed);
    vm_prop(b, &prop);
    r = vm_api.create(&h, size, &prop, 0);
  }
  if (r == CUDA_SUCCESS) {
    r = map_rw(b, addr, size, h);
    if (r != CUDA_SUCCESS)
      (void)vm_api.release(h);
  }
  aa__cuda_leave(b->device, prev);
  rc = vm_err(r);
done:
  if (aa__cuda_count_alloc(cb, rc, size) != AA_OK)
    return rc;
  *handle = (void *)(uintptr_t)h;
  return AA_OK;
}

static void dev_unmap(aa_backend *b, void *addr, size_t size, void *handle) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  int prev = -1;
  bool entered;
  if (!addr || !vm_available())
    return;
  fd_forget(cb, handle);
  entered = vm_enter(b, &prev) == AA_OK;
  (void)vm_api.unmap(vm_addr(addr), size);
  (void)vm_api.release((CUmemGenericAllocationHandle)(uintptr_t)handle);
  if (entered)
    aa__cuda_leave(b->device, prev);
  atomic_fetch_add_explicit(&cb->frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&cb->bytes_mapped, size, memory_order_relaxed);
}

/* The memory behind `handle` at a second address (stitching): one cuMemMap
 * of the handle whole, then cuMemSetAccess; no cuMemCreate. */
static int dev_map_alias(aa_backend *b, void *addr, size_t size, void *handle) {
  int prev = -1;
  int rc = vm_range_ok(b, addr, size);
  if (rc != AA_OK)
    return rc;
  if (handle == NULL)
    return AA_EINVAL;
  rc = vm_enter(b, &prev);
  if (rc != AA_OK)
    return rc;
  CUresult r = map_rw(b, addr, size, (CUmemGenericAllocationHandle)(uintptr_t)handle);
  aa__cuda_leave(b->device, prev);
  return vm_err(r);
}

/* dev_map_alias for n handles side by side: a cuMemMap each, then one
 * cuMemSetAccess over the whole range (on an H100, 2 MiB handles in ranges
 * of 8: 36 us a handle against 40 with an access call each; the map is
 * most of it; bench/gpu/bench_vmm.py). A failure unmaps what this call
 * mapped. */
static int dev_map_alias_run(aa_backend *b, void *addr, void *const *handles,
                             const size_t *sizes, size_t n) {
  size_t total = 0, mapped = 0;
  int prev = -1;
  int rc;
  CUresult r = CUDA_SUCCESS;
  if (n == 0 || handles == NULL || sizes == NULL)
    return AA_EINVAL;
  for (size_t i = 0; i < n; i++) {
    if (handles[i] == NULL || sizes[i] == 0 || sizes[i] > SIZE_MAX - total)
      return AA_EINVAL;
    rc = vm_range_ok(b, (char *)addr + total, sizes[i]);
    if (rc != AA_OK)
      return rc;
    total += sizes[i];
  }
  rc = vm_enter(b, &prev);
  if (rc != AA_OK)
    return rc;
  for (size_t off = 0; mapped < n; off += sizes[mapped], mapped++) {
    r = vm_api.map(vm_addr((char *)addr + off), sizes[mapped], 0,
                   (CUmemGenericAllocationHandle)(uintptr_t)handles[mapped], 0);
    if (r != CUDA_SUCCESS)
      break;
  }
  if (r == CUDA_SUCCESS)
    r = set_rw(b, addr, total);
  if (r != CUDA_SUCCESS) {
    size_t off = 0;
    for (size_t i = 0; i < mapped; i++) {
      (void)vm_api.unmap(vm_addr((char *)addr + off), sizes[i]);
      off += sizes[i];
    }
  }
  aa__cuda_leave(b->device, prev);
  return vm_err(r);
}

/* Undoes dev_map_alias: the handle stays (its first mapping holds it). */
static void dev_unmap_alias(aa_backend *b, void *addr, size_t size, void *handle) {
  int prev = -1;
  (void)handle;
  if (!addr || !vm_available())
    return;
  bool entered = vm_enter(b, &prev) == AA_OK;
  (void)vm_api.unmap(vm_addr(addr), size);
  if (entered)
    aa__cuda_leave(b->device, prev);
}

/* ------------------------------------------------------- sharing (IPC) */

/* Closes the descriptor export_fd made for `handle`, if any (its handle is
 * being unmapped). */
static void fd_forget(aa__cuda_backend *cb, void *handle) {
  uint64_t h = (uint64_t)(uintptr_t)handle;
  int fd = -1;
  pthread_mutex_lock(&cb->fd_lock);
  for (size_t i = 0; i < cb->nfds; i++) {
    if (cb->fds[i].handle == h) {
      fd = cb->fds[i].fd;
      cb->fds[i] = cb->fds[--cb->nfds];
      break;
    }
  }
  pthread_mutex_unlock(&cb->fd_lock);
  if (fd >= 0)
    (void)close(fd);
}

static int dev_export_fd(aa_backend *b, void *handle, int *fd) {
  aa__cuda_backend *cb = (aa__cuda_backend *)b->ctx;
  uint64_t h = (uint64_t)(uintptr_t)handle;
  int rc = AA_OK;
  *fd = -1;
  if (!vm_available() || vm_api.export_handle == NULL)
    return AA_ENOTSUP;
  pthread_mutex_lock(&cb->fd_lock);
  for (size_t i = 0; i < cb->nfds; i++) {
    if (cb->fds[i].handle == h) {
      *fd = cb->fds[i].fd;
      goto out;
    }
  }
  if (cb->nfds == cb->capfds) {
    size_t ncap = cb->capfds ? cb->capfds * 2 : 16;
    struct aa__cuda_fd *n = realloc(cb->fds, ncap * sizeof *n);
    if (n == NULL) {
      rc = AA_ENOMEM;
      goto out;
    }
    cb->fds = n;
    cb->capfds = ncap;
  }
  int made = -1;
  CUresult r = vm_api.export_handle(&made, (CUmemGenericAllocationHandle)h,
                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) {
    /* a handle made without the type (the driver refused it) */
    rc = r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE ||
                 r == CUDA_ERROR_NOT_PERMITTED
             ? AA_ENOTSUP
             : AA_EBACKEND;
    goto out;
  }
  cb->fds[cb->nfds].handle = h;
  cb->fds[cb->nfds].fd = made;
  cb->nfds++;
  *fd = made;
out:
  pthread_mutex_unlock(&cb->fd_lock);
  return rc;
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

struct aa_cuda_import {
  int device;
  CUdeviceptr base;
  size_t size;      /* the reservation */
  size_t n, mapped; /* handles; of which mapped */
  size_t *sizes;
  CUmemGenericAllocationHandle *h;
};

void aa_cuda_ipc_close(aa_cuda_import *im) {
  int prev = -1;
  if (im == NULL)
    return;
  if (vm_available()) {
    bool entered = aa__cuda_enter(im->device, &prev) == AA_OK;
    size_t off = 0;
    for (size_t i = 0; i < im->n; i++) {
      if (i < im->mapped)
        (void)vm_api.unmap(im->base + off, im->sizes[i]);
      if (im->h[i] != 0)
        (void)vm_api.release(im->h[i]);
      off += im->sizes[i];
    }
    if (im->base != 0)
      (void)vm_api.address_free(im->base, im->size);
    if (entered)
      aa__cuda_leave(im->device, prev);
  }
  free(im->sizes);
  free(im->h);
  free(im);
}

int aa_cuda_ipc_import(int device, int pid, const int *fds, const size_t *sizes, size_t n,
                       aa_cuda_import **out, void **base) {
  aa_cuda_import *im = NULL;
  long pidfd = -1;
  int prev = -1, rc = AA_OK;
  bool entered = false;
  size_t total = 0;
  if (out != NULL)
    *out = NULL;
  if (base != NULL)
    *base = NULL;
  if (out == NULL || base == NULL || fds == NULL || sizes == NULL || n == 0 || device < 0)
    return AA_EINVAL;
  for (size_t i = 0; i < n; i++) {
    if (sizes[i] == 0 || total > SIZE_MAX - sizes[i])
      return AA_EINVAL;
    total += sizes[i];
  }
  if (!vm_available() || vm_api.import_handle == NULL)
    return AA_ENOTSUP;
  im = calloc(1, sizeof *im);
  if (im == NULL)
    return AA_ENOMEM;
  im->device = device;
  im->n = n;
  im->size = total;
  im->sizes = calloc(n, sizeof *im->sizes);
  im->h = calloc(n, sizeof *im->h);
  if (im->sizes == NULL || im->h == NULL) {
    rc = AA_ENOMEM;
    goto fail;
  }
  memcpy(im->sizes, sizes, n * sizeof *sizes);
  rc = aa__cuda_enter(device, &prev);
  if (rc != AA_OK)
    goto fail;
  entered = true;
  if (pid > 0 && pid != (int)getpid()) {
    pidfd = syscall(SYS_pidfd_open, (pid_t)pid, 0);
    if (pidfd < 0) {
      rc = errno == ENOSYS ? AA_ENOTSUP : errno == EPERM ? AA_EPERM
                                                         : AA_ENOENT;
      goto fail;
    }
  }
  for (size_t i = 0; i < n; i++) {
    long mine = fds[i];
    if (pidfd >= 0) {
      mine = syscall(SYS_pidfd_getfd, (int)pidfd, fds[i], 0);
      if (mine < 0) {
        rc = errno == ENOSYS ? AA_ENOTSUP : errno == EPERM ? AA_EPERM
                                                           : AA_ENOENT;
        goto fail;
      }
    }
    CUresult r = vm_api.import_handle(&im->h[i], (void *)(uintptr_t)mine,
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (pidfd >= 0)
      (void)close((int)mine);
    if (r != CUDA_SUCCESS) {
      im->h[i] = 0;
      rc = vm_err(r);
      goto fail;
    }
  }
  /* the reservation aligned to the largest handle's power of two at most
   * (the driver wants the granularity; sizes are multiples of it) */
  size_t align = sizes[0];
  while (align & (align - 1))
    align &= align - 1;
  CUresult r = vm_api.address_reserve(&im->base, total, align, 0, 0);
  if (r != CUDA_SUCCESS) {
    im->base = 0;
    rc = vm_err(r);
    goto fail;
  }
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    r = vm_api.map(im->base + off, sizes[i], 0, im->h[i], 0);
    if (r != CUDA_SUCCESS) {
      rc = vm_err(r);
      goto fail;
    }
    im->mapped = i + 1;
    off += sizes[i];
  }
  r = vm_api.set_access(im->base, total, &access, 1);
  if (r != CUDA_SUCCESS) {
    rc = vm_err(r);
    goto fail;
  }
  if (pidfd >= 0)
    (void)close((int)pidfd);
  aa__cuda_leave(device, prev);
  *out = im;
  *base = (void *)(uintptr_t)im->base;
  return AA_OK;
fail:
  if (pidfd >= 0)
    (void)close((int)pidfd);
  if (entered)
    aa__cuda_leave(device, prev);
  aa_cuda_ipc_close(im);
  return rc;
}

int aa_cuda_alloc_base(const void *ptr, void **base, size_t *size) {
  CUdeviceptr b = 0;
  size_t n = 0;
  if (base != NULL)
    *base = NULL;
  if (size != NULL)
    *size = 0;
  if (ptr == NULL || base == NULL)
    return AA_EINVAL;
  if (!vm_available() || vm_api.addr_range == NULL)
    return AA_ENOTSUP;
  if (vm_api.addr_range(&b, &n, vm_addr(ptr)) != CUDA_SUCCESS)
    return AA_EINVAL;
  *base = (void *)(uintptr_t)b;
  if (size != NULL)
    *size = n;
  return AA_OK;
}

static const aa_backend_ops dev_ops = {
    .alloc = dev_alloc,
    .free = dev_free,
    .event_record = aa__cuda_op_event_record,
    .event_query = aa__cuda_op_event_query,
    .event_release = aa__cuda_op_event_release,
    .stream_wait = aa__cuda_op_stream_wait,
    .synchronize = dev_synchronize,
    .destroy = dev_destroy,
    .map_granularity = dev_map_granularity,
    .va_reserve = dev_va_reserve,
    .va_release = dev_va_release,
    .map = dev_map,
    .unmap = dev_unmap,
    .map_alias = dev_map_alias,
    .unmap_alias = dev_unmap_alias,
    .map_alias_run = dev_map_alias_run,
    .export_fd = dev_export_fd,
};

int aa_backend_cuda_new(int device, aa_backend **out) {
  aa__cuda_backend *cb = NULL;
  int n;
  int rc = AA_OK;

  if (!out)
    return AA_EINVAL;
  *out = NULL;
  if (device < 0 || device >= AA_MAX_DEVICES)
    return AA_EINVAL;
  n = aa_cuda_device_count();
  if (device >= n)
    return AA_ENODEV;
  cb = calloc(1, sizeof *cb);
  if (!cb)
    return AA_ENOMEM;
  cb->magic = AA__CUDA_MAGIC;
  cb->ndev = 1;
  /* Asked on first use: the query makes a context current on `device`. */
  atomic_init(&cb->vm_granularity, AA__CUDA_VM_UNKNOWN);
  rc = aa__cuda_evpool_init(&cb->evpools[0], device);
  if (rc != AA_OK)
    goto fail_cb;
  if (pthread_mutex_init(&cb->mis_lock, NULL) != 0) {
    rc = AA_ENOMEM;
    goto fail_ev;
  }
  if (pthread_mutex_init(&cb->fd_lock, NULL) != 0) {
    pthread_mutex_destroy(&cb->mis_lock);
    rc = AA_ENOMEM;
    goto fail_ev;
  }
  atomic_init(&cb->vm_fd, false);
  cb->base.ops = &dev_ops;
  cb->base.ctx = cb;
  cb->base.kind = AA_BACKEND_DEVICE;
  cb->base.device = device;
  cb->base.name = "cuda";
  *out = &cb->base;
  return AA_OK;

fail_ev:
  aa__cuda_evpool_fini(&cb->evpools[0]);
fail_cb:
  free(cb);
  return rc;
}
