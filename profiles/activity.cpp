#include "profiles/activity.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <cstring>
#include <iterator>

namespace sax::profiles {

const char* to_string(ActivityKind k) {
  static constexpr const char* kNames[] = {"concurrent_kernel",    "memcpy", "memset", "runtime", "driver",
                                           "external_correlation", "marker"};  // in ActivityKind's order
  const auto i = static_cast<std::size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

const char* to_string(MemcpyKind k) {
  static constexpr const char* kNames[] = {"unknown", "HtoD", "DtoH", "HtoH", "DtoD", "PtoP"};  // in MemcpyKind's order
  const auto i = static_cast<std::size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

namespace {

// Static, so memcpy events need no interning.
const char* memcpy_name(MemcpyKind k) {
  static constexpr const char* kNames[] = {"Memcpy",      "Memcpy HtoD", "Memcpy DtoH",
                                           "Memcpy HtoH", "Memcpy DtoD", "Memcpy PtoP"};  // in MemcpyKind's order
  const auto i = static_cast<std::size_t>(k);
  return i < std::size(kNames) ? kNames[i] : "Memcpy";
}

// After demangling: NCCL's kernels are "ncclDevKernel_…" / "ncclKernel_…" functions.
bool is_nccl_kernel(const char* name) { return name != nullptr && std::strncmp(name, "nccl", 4) == 0; }

Lane stream_lane(const ActivityRecord& r) {
  return Lane{LaneKind::device_stream, static_cast<std::int32_t>(r.device_id), r.stream_id};
}

Lane thread_lane(std::uint64_t thread_id) { return Lane{LaneKind::host_thread, -1, thread_id}; }

}  // namespace

ActivityProcessor::ActivityProcessor(std::int32_t rank, NameTable& names) : rank_(rank), names_(names) {}

void ActivityProcessor::drain(ActivitySource& source) {
  source.flush([this](const ActivityRecord& r) { process(r); });
  dropped_ += source.take_dropped();
}

const char* ActivityProcessor::intern(const char* name, const char* fallback) {
  return name == nullptr || *name == '\0' ? fallback : names_.intern(name);
}

// Kernel names as CUPTI gives them are mangled for C++ kernels ("_Z39ncclDevKernel_…"): shown
// demangled, as Nsight and kineto show them, each demangled once.
const char* ActivityProcessor::kernel_name(const char* raw) {
  const char* mangled = intern(raw, "kernel");
  const auto it = demangled_.find(mangled);
  if (it != demangled_.end()) return it->second;
  const char* shown = mangled;
  if (std::strncmp(mangled, "_Z", 2) == 0) {
    int status = 0;
    char* plain = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    if (status == 0 && plain) shown = names_.intern(plain);
    std::free(plain);
  }
  demangled_.emplace(mangled, shown);
  return shown;
}

void ActivityProcessor::process(const ActivityRecord& r) {
  switch (r.kind) {
    case ActivityKind::external_correlation:
      add_external_correlation(r);
      return;
    case ActivityKind::marker:
      add_marker(r);
      return;
    case ActivityKind::concurrent_kernel:
    case ActivityKind::memcpy:
    case ActivityKind::memset:
    case ActivityKind::runtime:
    case ActivityKind::driver:
      break;
    default:
      ++malformed_;
      return;
  }
  if (r.end_ns < r.start_ns) {
    ++malformed_;
    return;
  }
  Event e;
  e.rank = rank_;
  e.start_ns = to_host(r.start_ns);
  e.end_ns = to_host(r.end_ns);
  e.correlation_id = r.correlation_id;
  if (r.kind == ActivityKind::runtime || r.kind == ActivityKind::driver) {
    e.lane = thread_lane(r.thread_id);
    e.name = intern(r.name, r.kind == ActivityKind::runtime ? "cuda runtime" : "cuda driver");
    e.category = Category::runtime;
  } else {
    e.lane = stream_lane(r);
    e.bytes = r.bytes;
    if (r.kind == ActivityKind::concurrent_kernel) {
      e.name = kernel_name(r.name);
      e.category = is_nccl_kernel(e.name) ? Category::communication : Category::compute;
    } else if (r.kind == ActivityKind::memcpy) {
      e.name = memcpy_name(r.copy_kind);
      e.category = Category::memcpy;
    } else {
      e.name = "Memset";
      e.category = Category::memset;
    }
  }
  add_correlated(e);
}

void ActivityProcessor::add_correlated(Event event) {
  const std::size_t index = events_.size();
  if (event.correlation_id != 0) {
    Correlation& c = correlations_[static_cast<std::uint32_t>(event.correlation_id)];
    if (c.external_id != 0) {
      event.external_id = c.external_id;
    } else {
      c.waiting.push_back(index);
    }
  }
  events_.push_back(event);
}

void ActivityProcessor::add_external_correlation(const ActivityRecord& r) {
  if (r.correlation_id == 0 || r.external_id == 0) {
    ++malformed_;
    return;
  }
  // CUPTI may deliver the device record before the external correlation (another buffer), so
  // the events already waiting are patched now.
  Correlation& c = correlations_[r.correlation_id];
  c.external_id = r.external_id;
  for (std::size_t i : c.waiting) events_[i].external_id = r.external_id;
  c.waiting.clear();
  c.waiting.shrink_to_fit();
}

void ActivityProcessor::add_marker(const ActivityRecord& r) {
  switch (r.marker_phase) {
    case MarkerPhase::instant: {
      Event e;
      e.rank = rank_;
      e.lane = thread_lane(r.thread_id);
      e.name = intern(r.name, "marker");
      e.category = Category::range;
      e.start_ns = e.end_ns = to_host(r.start_ns);
      events_.push_back(e);
      return;
    }
    case MarkerPhase::start:
      // A repeated start id replaces the earlier one: CUPTI reuses ids only after the end.
      open_markers_[r.marker_id] = OpenMarker{intern(r.name, "range"), r.start_ns, r.thread_id};
      return;
    case MarkerPhase::end: {
      auto it = open_markers_.find(r.marker_id);
      if (it == open_markers_.end() || r.start_ns < it->second.start_ns) {
        ++malformed_;
        if (it != open_markers_.end()) open_markers_.erase(it);
        return;
      }
      Event e;
      e.rank = rank_;
      e.lane = thread_lane(it->second.thread_id);
      e.name = it->second.name;
      e.category = Category::range;
      e.start_ns = to_host(it->second.start_ns);
      e.end_ns = to_host(r.start_ns);
      events_.push_back(e);
      open_markers_.erase(it);
      return;
    }
  }
  ++malformed_;  // a phase outside the enum
}

void ActivityProcessor::clear() {
  events_.clear();
  malformed_ = 0;
  dropped_ = 0;
  open_markers_.clear();
  correlations_.clear();
}

}  // namespace sax::profiles
