// history.cpp — PyTorch's memory history for the adaptalloc allocator: the
// History of history.h (recordHistory's settings, the per-device rings of
// TraceEntry, their conversion for snapshot()). Entry points:
// History::configure, History::record, History::traces.
//
// What is recorded (docs/torch.md "Memory history"): alloc when a tensor's
// block is handed out, free_requested and free_completed when it is freed
// (adaptalloc's pool takes the block back at once and holds it itself
// while other streams may still use it, so the two come together), oom with
// the device's free bytes when an allocation fails. Stack frames are
// gathered by PyTorch's context recorder: for allocations when `when` is
// ALLOC or ALL, for frees when it is ALL. record_function's annotations
// (recordAnnotation) are kept beside them (annotate, annotations).
#include "history.h"

#include <c10/util/Exception.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "adaptalloc/runtime.h"

namespace adaptalloc_torch {

namespace CCA = c10::cuda::CUDACachingAllocator;

void History::configure(
    bool enabled,
    CCA::CreateContextFn context_recorder,
    size_t max_entries,
    CCA::RecordContext when,
    bool clear,
    const std::vector<std::string> &skip_actions) {
  // Parsed before anything changes: a bad name leaves the settings alone.
  std::vector<bool> skip(static_cast<size_t>(TraceEntry::OOM) + 1, false);
  for (const std::string &a : skip_actions)
    skip[static_cast<size_t>(c10::CachingDeviceAllocator::parseTraceEntryAction(a))] = true;
  std::unique_ptr<c10::ApproximateClockToUnixTimeConverter> clock;
  if (enabled)
    clock = std::make_unique<c10::ApproximateClockToUnixTimeConverter>();

  std::lock_guard<std::mutex> g(mu_);
  if (clear) {
    rings_.clear();
    notes_.clear();
    notes_next_ = 0;
  }
  if (enabled) {
    context_ = context_recorder;
    when_ = when;
    max_ = std::max<size_t>(max_entries, 1);
    skip_ = std::move(skip);
    if (!clock_)
      clock_ = std::move(clock);
    // a smaller bound keeps the newest entries
    for (Ring &r : rings_) {
      if (r.v.size() <= max_)
        continue;
      std::rotate(r.v.begin(), r.v.begin() + static_cast<std::ptrdiff_t>(r.next), r.v.end());
      r.v.erase(r.v.begin(), r.v.end() - static_cast<std::ptrdiff_t>(max_));
      r.next = 0;
    }
  }
  on_.store(enabled && when != CCA::RecordContext::NEVER, std::memory_order_relaxed);
}

namespace {

// The frames PyTorch's recorder gathered, as the store keeps a call stack:
// one frame a line, "file:line:function", innermost first (at most about
// 60 KiB). Empty for a context that is not a CapturedTraceback.
std::string frames_text(c10::GatheredContext *ctx) {
  auto *tb = dynamic_cast<torch::CapturedTraceback *>(ctx);
  std::string out;
  if (tb == nullptr)
    return out;
  std::vector<torch::CapturedTraceback *> one{tb};
  torch::SymbolizedTracebacks s = torch::symbolize(one);
  if (s.tracebacks.empty())
    return out;
  for (uint64_t i : s.tracebacks[0]) {
    if (i >= s.all_frames.size() || out.size() > 60000)
      break;
    const auto &f = s.all_frames[i];
    out += f.filename;
    out += ':';
    out += std::to_string(f.lineno);
    out += ':';
    out += f.funcname;
    out += '\n';
  }
  return out;
}

} // namespace

void History::record(Action action, int device, size_t addr, size_t size, void *stream,
                     aa_pool *pool) {
  if (!on() || device < 0)
    return;
  CCA::CreateContextFn ctx_fn = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (skip_[static_cast<size_t>(action)])
      return;
    bool is_free = action == TraceEntry::FREE_REQUESTED || action == TraceEntry::FREE_COMPLETED;
    if (when_ == CCA::RecordContext::ALL ||
        (when_ == CCA::RecordContext::ALLOC && !is_free))
      ctx_fn = context_;
  }
  // Frames are gathered without our lock: the recorder takes the GIL.
  std::shared_ptr<c10::GatheredContext> ctx = ctx_fn ? ctx_fn() : nullptr;
  // ... and so is their text for the store, only for a block the live trace
  // takes (sampled: rarely); a stack the store refuses is only not stored
  if (ctx && pool != nullptr && action == TraceEntry::ALLOC) {
    const void *p = reinterpret_cast<const void *>(addr);
    if (aa_runtime_trace_wants(pool, p)) {
      std::string text = frames_text(ctx.get());
      if (!text.empty())
        (void)aa_runtime_trace_frames(pool, p, text.data(), text.size());
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  if (!on())
    return; // turned off meanwhile
  // Stamped under the lock: a ring's entries are in time order.
  TraceEntry e(
      action, static_cast<c10::DeviceIndex>(device), addr, size, stream,
      c10::MempoolId_t{0, 0}, c10::getApproximateTime(), std::move(ctx));
  if (rings_.size() <= static_cast<size_t>(device))
    rings_.resize(static_cast<size_t>(device) + 1);
  Ring &r = rings_[static_cast<size_t>(device)];
  if (r.v.size() < max_) {
    r.v.push_back(std::move(e));
    return;
  }
  r.v[r.next] = std::move(e);
  r.next = (r.next + 1) % max_;
}

std::vector<std::vector<History::TraceEntry>> History::traces(size_t ndevices) {
  std::vector<std::vector<TraceEntry>> out(ndevices);
  std::function<time_t(c10::approx_time_t)> to_unix;
  std::lock_guard<std::mutex> g(mu_);
  if (clock_)
    to_unix = clock_->makeConverter();
  for (size_t d = 0; d < ndevices && d < rings_.size(); d++) {
    const Ring &r = rings_[d];
    std::vector<TraceEntry> &o = out[d];
    o.reserve(r.v.size());
    for (size_t i = 0; i < r.v.size(); i++)
      o.push_back(r.v[(r.next + i) % r.v.size()]);
    for (TraceEntry &e : o)
      e.time_.t_ = to_unix ? to_unix(e.time_.approx_t_) / 1000 : 0;
  }
  return out;
}

void History::annotate(int device, const std::vector<std::pair<std::string, std::string>> &md) {
  if (!on() || device < 0)
    return;
  AnnotationEntry e(static_cast<c10::DeviceIndex>(device), c10::getApproximateTime());
  for (const auto &kv : md)
    e.recordUserMetadata(kv.first, kv.second);
  std::lock_guard<std::mutex> g(mu_);
  if (!on())
    return;
  if (notes_.size() < max_) {
    notes_.push_back(std::move(e));
    return;
  }
  notes_[notes_next_] = std::move(e);
  notes_next_ = (notes_next_ + 1) % max_;
}

std::vector<History::AnnotationEntry> History::annotations() {
  std::vector<AnnotationEntry> out;
  std::function<time_t(c10::approx_time_t)> to_unix;
  std::lock_guard<std::mutex> g(mu_);
  if (clock_)
    to_unix = clock_->makeConverter();
  out.reserve(notes_.size());
  for (size_t i = 0; i < notes_.size(); i++)
    out.push_back(notes_[(notes_next_ + i) % notes_.size()]);
  for (AnnotationEntry &e : out)
    e.time_.t_ = to_unix ? to_unix(e.time_.approx_t_) / 1000 : 0;
  return out;
}

} // namespace adaptalloc_torch
