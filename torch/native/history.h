// history.h — private to torch/native: PyTorch's memory history
// (torch.cuda.memory._record_memory_history) for the adaptalloc allocator.
// A History holds whether recording is on, the context recorder and the
// RecordContext level, the skipped actions, and one bounded ring of
// c10::cuda::CUDACachingAllocator::TraceEntry per device
// (alloc_trace_max_entries each, the oldest overwritten first), which
// snapshot() hands to PyTorch as SnapshotInfo::device_traces.
//
// allocator.cpp calls record() at each allocation, free and OOM, guarded by
// on(): while recording is off the whole cost is that one relaxed load.
// An allocation's record() is given its pool: when adaptalloc's live trace
// takes the block (aa_runtime_trace_wants) and the recorder gathered Python
// frames (stacks="python" or "all"), the frames also go to the store as the
// block's call stack (aa_runtime_trace_frames), so that the store's trace
// and its export carry them (docs/torch.md "Memory history").
// Thread safety: every member function may be called from any thread; the
// rings are under one mutex, and the context recorder (which takes the
// GIL to gather Python frames) runs outside it.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include "adaptalloc/core.h"
#include <c10/util/ApproximateClock.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace adaptalloc_torch {

class History {
public:
  using TraceEntry = c10::cuda::CUDACachingAllocator::TraceEntry;
  using Action = TraceEntry::Action;

  bool on() const { return on_.load(std::memory_order_relaxed); }

  // recordHistory: turns recording on or off. clear drops every entry kept.
  // skip_actions names actions ("alloc", "free_requested", ...) never
  // recorded; an unknown name raises c10::Error and changes nothing.
  void configure(
      bool enabled,
      c10::cuda::CUDACachingAllocator::CreateContextFn context_recorder,
      size_t max_entries,
      c10::cuda::CUDACachingAllocator::RecordContext when,
      bool clear,
      const std::vector<std::string> &skip_actions);

  // One entry (no-op while off or for a skipped action). For OOM, addr is
  // the device's free bytes, as in PyTorch. pool: an allocation's pool, for
  // the store's call stacks (nullptr: none).
  void record(Action action, int device, size_t addr, size_t size, void *stream,
              aa_pool *pool = nullptr);

  // The entries of devices 0..ndevices-1, oldest first, times converted to
  // microseconds since the epoch (what _dump_snapshot writes as time_us).
  std::vector<std::vector<TraceEntry>> traces(size_t ndevices);

  // recordAnnotation (record_function's names, while recording is on): one
  // entry of the device's with the metadata, kept like the trace entries
  // (the newest max_entries); annotations() hands them to snapshot() with
  // the same time conversion.
  using AnnotationEntry = c10::CachingDeviceAllocator::AnnotationEntry;
  void annotate(int device, const std::vector<std::pair<std::string, std::string>> &md);
  std::vector<AnnotationEntry> annotations();

private:
  struct Ring {
    std::vector<TraceEntry> v;
    size_t next = 0; // once full: the oldest entry, overwritten next
  };
  std::atomic<bool> on_{false};
  std::mutex mu_; // everything below
  c10::cuda::CUDACachingAllocator::CreateContextFn context_ = nullptr;
  c10::cuda::CUDACachingAllocator::RecordContext when_ =
      c10::cuda::CUDACachingAllocator::RecordContext::NEVER;
  size_t max_ = 1;
  std::vector<bool> skip_;
  std::vector<Ring> rings_;
  std::vector<AnnotationEntry> notes_; // a ring of max_, as a Ring's v
  size_t notes_next_ = 0;
  std::unique_ptr<c10::ApproximateClockToUnixTimeConverter> clock_;
};

} // namespace adaptalloc_torch
