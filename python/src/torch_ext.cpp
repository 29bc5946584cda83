// torch_ext.cpp — adaptalloc._torch_ext, the tensor side of adaptalloc.torch's
// pinned-pool helpers, built when torch is importable at install time.
// Python could do the same with torch.frombuffer and views, at a few
// microseconds of interpreter and dispatcher work per tensor; here a tensor
// over a pool block is one at::from_blob, and pack's device views are built
// straight from the storage.
//
// Everything goes through the C API (adaptalloc/cuda.h, runtime.h); nothing
// here allocates or copies by itself.
//   pinned_empty(shape: list[int], dtype: torch.dtype, stream: int) -> Tensor
//       CPU tensor over aa_staging_get(runtime pinned pool); its deleter
//       returns the block with aa_staging_put(..., stream).
//   pack(packer: int, tensors: list[Tensor], device: int, copy_stream: int,
//        wait_stream: int) -> (list[Tensor], base) | int
//       aa_packer_add_many of the CPU tensors (made contiguous), one device
//       allocation `base`, aa_packer_flush on copy_stream, aa_packer_wait on
//       wait_stream when it differs, and the device views of base. When they
//       do not fit the packer: the bytes they need (nothing packed).
#include <torch/extension.h>
#include <torch/csrc/Dtype.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "adaptalloc/core.h"
#include "adaptalloc/cuda.h"
#include "adaptalloc/runtime.h"

namespace py = pybind11;

namespace {

at::ScalarType dtype_of(const py::handle &obj) {
  if (!THPDtype_Check(obj.ptr()))
    throw py::type_error("adaptalloc: dtype must be a torch.dtype");
  return reinterpret_cast<THPDtype *>(obj.ptr())->scalar_type;
}

aa_pool *pinned_pool() {
  aa_pool *pool = aa_runtime_pool(AA_BACKEND_PINNED, 0);
  if (pool == nullptr)
    throw std::runtime_error("adaptalloc: no pinned pool in this process (no CUDA or no GPU)");
  return pool;
}

at::Tensor pinned_empty(const std::vector<int64_t> &shape, const py::handle &dtype,
                        uint64_t stream) {
  at::ScalarType st = dtype_of(dtype);
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw py::value_error("adaptalloc.torch.pinned_empty: negative dimension");
    if (__builtin_mul_overflow(numel, d, &numel))
      throw py::value_error("adaptalloc.torch.pinned_empty: the shape has too many elements");
  }
  size_t nbytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(numel), c10::elementSize(st), &nbytes))
    throw py::value_error("adaptalloc.torch.pinned_empty: the tensor is too large");
  size_t size = nbytes ? nbytes : 1;
  aa_pool *pool = pinned_pool();
  void *p = aa_staging_get(pool, size);
  if (p == nullptr)
    throw std::runtime_error("adaptalloc: out of pinned memory allocating " +
                             std::to_string(size) + " bytes");
  aa_stream s = reinterpret_cast<aa_stream>(static_cast<uintptr_t>(stream));
  auto put = [pool, size, s](void *q) {
    // After aa_runtime_shutdown the pool is gone: nothing to return to.
    if (aa_runtime_started())
      (void)aa_staging_put(pool, q, size, s);
  };
  return at::from_blob(p, shape, put, at::TensorOptions().dtype(st).device(at::kCPU));
}

py::object pack(uint64_t packer, const std::vector<at::Tensor> &tensors, int64_t device,
                uint64_t copy_stream, uint64_t wait_stream) {
  aa_packer *pk = reinterpret_cast<aa_packer *>(static_cast<uintptr_t>(packer));
  if (pk == nullptr)
    throw py::value_error("adaptalloc: no packer");
  size_t count = tensors.size();
  std::vector<at::Tensor> srcs;
  std::vector<const void *> src;
  std::vector<size_t> len, off(count, 0), idx;
  size_t need = 0;
  srcs.reserve(count);
  src.reserve(count);
  len.reserve(count);
  for (size_t i = 0; i < count; i++) {
    const at::Tensor &t = tensors[i];
    if (!t.device().is_cpu())
      throw py::value_error("adaptalloc.torch.pack: item " + std::to_string(i) + " is on " +
                            t.device().str() + "; pack takes CPU tensors");
    srcs.push_back(t.contiguous());
    size_t n = static_cast<size_t>(t.numel()) * t.element_size();
    if (n == 0)
      continue;
    src.push_back(srcs.back().data_ptr());
    len.push_back(n);
    idx.push_back(i);
    need += (n + AA_PACKER_ALIGN - 1) / AA_PACKER_ALIGN * AA_PACKER_ALIGN;
  }
  std::vector<size_t> packed_off(src.size(), 0);
  int rc = AA_OK;
  if (!src.empty()) {
    py::gil_scoped_release nogil;
    rc = aa_packer_add_many(pk, src.data(), len.data(), src.size(), packed_off.data());
  }
  if (rc == AA_ELIMIT)
    return py::int_(need); // the caller makes a larger packer and calls again
  if (rc != AA_OK)
    throw std::runtime_error(std::string("adaptalloc: pack: ") + aa_strerror(rc));
  for (size_t k = 0; k < idx.size(); k++)
    off[idx[k]] = packed_off[k];
  size_t used = aa_packer_used(pk);
  at::Tensor base = at::empty({static_cast<int64_t>(used ? used : 1)},
                              at::TensorOptions().dtype(at::kByte).device(
                                  at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device))));
  if (used) {
    aa_stream cs = reinterpret_cast<aa_stream>(static_cast<uintptr_t>(copy_stream));
    rc = aa_packer_flush(pk, base.data_ptr(), cs);
    if (rc == AA_OK && wait_stream != copy_stream)
      rc = aa_packer_wait(pk, reinterpret_cast<aa_stream>(static_cast<uintptr_t>(wait_stream)));
    if (rc != AA_OK)
      throw std::runtime_error(std::string("adaptalloc: pack copy: ") + aa_strerror(rc));
  }
  std::vector<at::Tensor> out;
  out.reserve(count);
  for (size_t i = 0; i < count; i++) {
    const at::Tensor &t = srcs[i];
    at::ScalarType st = t.scalar_type();
    if (t.numel() == 0) {
      out.push_back(at::empty(t.sizes(), base.options().dtype(st)));
      continue;
    }
    // A view of base's storage: one TensorImpl, no dispatcher round trips.
    at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(
        c10::Storage(base.storage()), base.key_set(), caffe2::TypeMeta::fromScalarType(st));
    v.unsafeGetTensorImpl()->set_storage_offset(
        static_cast<int64_t>(off[i] / c10::elementSize(st)));
    v.unsafeGetTensorImpl()->set_sizes_contiguous(t.sizes());
    out.push_back(std::move(v));
  }
  return py::make_tuple(py::cast(out), base);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "adaptalloc's pinned-pool tensors and packed copies (see adaptalloc.torch)";
  m.def("pinned_empty", &pinned_empty, py::arg("shape"), py::arg("dtype"), py::arg("stream"));
  m.def("pack", &pack, py::arg("packer"), py::arg("tensors"), py::arg("device"),
        py::arg("copy_stream"), py::arg("wait_stream"));
}
