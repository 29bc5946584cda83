// module.cpp — the Python extension module adaptalloc._torch_native: the
// native PyTorch allocator (allocator.cpp) as seen from Python. The package's
// adaptalloc.torch wraps it; users call adaptalloc.torch.install().
//
// Functions (all raise RuntimeError with a message naming adaptalloc):
//   install(device_count: int) -> None
//       Makes adaptalloc PyTorch's CUDA allocator, exactly as
//       torch.cuda.memory.change_current_allocator would. Must run before the
//       first CUDA allocation of the process: raises RuntimeError when
//       PyTorch's allocator is already initialized. A second call is a no-op.
//       device_count is torch.cuda.device_count() (at most 64).
//   is_installed() -> bool
//       Whether adaptalloc is PyTorch's current CUDA allocator.
//   stats_json(device: int) -> str
//       The device pool's stats as JSON (the same object as a pool of
//       GET /stats); "" before the device allocated anything.
//   private_pool_count(device: int) -> int
//       Private pools alive on the device (CUDA graph pools, MemPools).
//   set_limit(device: int, bytes: int) -> None
//       Caps the device pool's reserved bytes (0 = no cap); what
//       torch.cuda.set_per_process_memory_fraction does with a fraction.
//   set_region(id: int) -> int
//       Sends this thread's later allocations to region id's pool (ids from
//       adaptalloc._C.region_id; -1: the device pool) and returns the
//       previous id. A CUDA graph capture's private pool still wins.
//   current_region() -> int
//       This thread's region id (-1: none).
//   _tracker_attach() -> None, _tracker_entries() -> list[(str, int, int)]
//       Tests: attaches a trace tracker of the module's own, through
//       PyTorch's attachAllocatorTraceTracker, that keeps each entry's
//       action name, address and size; _tracker_entries takes them.
// Everything else goes through torch.cuda's own functions (memory_stats,
// memory_summary, empty_cache, _snapshot, graphs, MemPool, ...).
#include <torch/extension.h>

#include "allocator.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <mutex>
#include <tuple>
#include <vector>

#ifndef TORCH_EXTENSION_NAME
#define TORCH_EXTENSION_NAME _torch_native
#endif

namespace py = pybind11;

namespace {

std::mutex g_trk_mu;
// never destroyed: the tracker may see a free at exit (allocator.cpp's
// g_alloc says why)
auto &g_trk = *new std::vector<std::tuple<std::string, size_t, size_t>>();

const char *action_name(int a) {
  using E = c10::cuda::CUDACachingAllocator::TraceEntry;
  switch (a) {
  case E::ALLOC: return "alloc";
  case E::FREE_REQUESTED: return "free_requested";
  case E::FREE_COMPLETED: return "free_completed";
  case E::SEGMENT_ALLOC: return "segment_alloc";
  case E::SEGMENT_FREE: return "segment_free";
  case E::SEGMENT_MAP: return "segment_map";
  case E::SEGMENT_UNMAP: return "segment_unmap";
  case E::SNAPSHOT: return "snapshot";
  case E::OOM: return "oom";
  default: return "?";
  }
}

void tracker_attach() {
  c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(
      [](const c10::cuda::CUDACachingAllocator::TraceEntry &e) {
        std::lock_guard<std::mutex> g(g_trk_mu);
        g_trk.emplace_back(action_name(static_cast<int>(e.action_)), e.addr_, e.size_);
      });
}

std::vector<std::tuple<std::string, size_t, size_t>> tracker_entries() {
  std::lock_guard<std::mutex> g(g_trk_mu);
  std::vector<std::tuple<std::string, size_t, size_t>> out;
  out.swap(g_trk);
  return out;
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "adaptalloc as PyTorch's native CUDA allocator";
  m.def("install", &adaptalloc_torch::install, py::arg("device_count"),
        "Make adaptalloc PyTorch's CUDA allocator (before any CUDA allocation).");
  m.def("is_installed", &adaptalloc_torch::is_installed,
        "Whether adaptalloc is PyTorch's current CUDA allocator.");
  m.def("stats_json", &adaptalloc_torch::stats_json, py::arg("device"),
        "The device pool's stats as JSON ('' before its first allocation).");
  m.def("private_pool_count", &adaptalloc_torch::private_pool_count,
        py::arg("device"), "Private pools (CUDA graphs, MemPools) alive on a device.");
  m.def("set_limit", &adaptalloc_torch::set_limit, py::arg("device"),
        py::arg("bytes"), "Cap the device pool's reserved bytes (0 = no cap).");
  m.def("set_region", &adaptalloc_torch::set_region, py::arg("id"),
        "Send this thread's allocations to region id's pool (-1: none); "
        "returns the previous id.");
  m.def("current_region", &adaptalloc_torch::current_region,
        "This thread's region id (-1: none).");
  m.def("_tracker_attach", &tracker_attach,
        "Tests: attach a trace tracker that keeps (action, addr, size) of each entry.");
  m.def("_tracker_entries", &tracker_entries,
        "Tests: the entries the test tracker kept since the last call.");
}
