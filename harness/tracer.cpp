#include "harness/internal/tracer.hpp"

#include <pthread.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "profiles/chrome_trace.hpp"
#include "spec/error.hpp"

namespace sax::harness {

using profiles::Category;

namespace {

// Sub-lanes of a device stream: its id + k · stride (CUPTI's stream ids stay far below the
// stride; trace_thread_id keeps the device above 2^20).
constexpr std::size_t kStreamSubLanes = 8;
constexpr std::uint64_t kStreamSubLaneStride = 1u << 16;

std::uint64_t comm_lane_id(std::size_t dim, int k) {
  return kCommLaneBase + dim * kCommLanesPerDim + static_cast<std::uint64_t>(k);
}

// Places an event [start, end) on the first of `lane_ends` (each lane's latest end) free at
// `start`, opening a lane while fewer than `most` are open (then the last: overlap rather than
// collide with another lane); returns the lane. Events placed so, in any order, never overlap
// on one lane: each starts after everything placed on its lane before, and anything placed on
// it later starts after this one's end.
std::size_t place(std::vector<std::int64_t>& lane_ends, std::size_t most, std::int64_t start, std::int64_t end) {
  std::size_t k = 0;
  while (k < lane_ends.size() && lane_ends[k] > start) ++k;
  if (k == most) k = most - 1;
  if (k == lane_ends.size()) lane_ends.push_back(end);
  lane_ends[k] = std::max(lane_ends[k], end);
  return k;
}

}  // namespace

std::string trace_file(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / ("rank-" + std::to_string(rank) + ".json")).string();
}

void prepare_trace_dir(const std::string& command, const std::string& dir, int rank, const ResultWriter& writer) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw UsageError(command + ": --trace: cannot make directory '" + dir + "': " + ec.message());
  writer.check(trace_file(dir, rank));
}

std::optional<Dim> comm_lane_dim(std::uint64_t trace_tid) {
  if (trace_tid < kCommLaneBase || trace_tid >= kCommLaneBase + 5 * kCommLanesPerDim) return std::nullopt;
  return static_cast<Dim>((trace_tid - kCommLaneBase) / kCommLanesPerDim);
}

StepTracer::StepTracer(int rank, std::size_t capacity)
    : recorder_(rank, capacity),
      thread_(profiles::current_thread_lane()),
      pthread_low_(static_cast<std::uint32_t>(pthread_self())) {
  for (auto& ends : comm_lane_ends_) ends.reserve(kCommLanesPerDim);
}

void StepTracer::span(Category c, const char* name, std::int64_t t0_ns, std::int64_t t1_ns, std::uint64_t bytes,
                      std::uint64_t external_id) {
  profiles::Event e;
  e.rank = recorder_.rank();
  e.lane = thread_;
  e.name = name;
  e.category = c;
  e.start_ns = t0_ns;
  e.end_ns = t1_ns;
  e.bytes = bytes;
  e.external_id = external_id;
  recorder_.record(e);
}

void StepTracer::lifetime(Dim dim, const char* name, std::int64_t t0_ns, std::int64_t t1_ns, std::uint64_t bytes) {
  const auto d = static_cast<std::size_t>(dim);
  const auto k = static_cast<int>(place(comm_lane_ends_[d], kCommLanesPerDim, t0_ns, t1_ns));
  profiles::Event e;
  e.rank = recorder_.rank();
  e.lane = profiles::Lane{profiles::LaneKind::host_thread, -1, comm_lane_id(d, k)};
  e.name = name;
  e.category = Category::communication;
  e.start_ns = t0_ns;
  e.end_ns = t1_ns;
  e.bytes = bytes;
  recorder_.record(e);
}

json StepTracer::chrome_trace(const std::string& process_name, int building, int stage, const ClockOffset& clock,
                              std::span<const profiles::Event> device, const json& extra) const {
  std::vector<profiles::Event> events(recorder_.events().begin(), recorder_.events().end());
  // A stream's kernels may overlap (Hopper's programmatic dependent launch starts the next one
  // before the last ends; cuBLAS does): each goes to the first sub-lane of its stream that is free
  // at its start, so that no two events of one trace thread overlap.
  std::vector<profiles::Event> on_device(device.begin(), device.end());
  std::stable_sort(on_device.begin(), on_device.end(),
                   [](const profiles::Event& a, const profiles::Event& b) { return a.start_ns < b.start_ns; });
  std::map<std::uint64_t, std::vector<std::int64_t>> free_at;  // stream lane → each sub-lane's end
  std::map<std::uint64_t, std::string> device_lanes;
  for (auto& e : on_device) {
    if (e.lane.kind != profiles::LaneKind::device_stream || e.end_ns == profiles::Event::kOpen) continue;
    const std::size_t k = place(free_at[profiles::trace_thread_id(e.lane)], kStreamSubLanes, e.start_ns, e.end_ns);
    const std::string base = "GPU " + std::to_string(e.lane.device) + " stream " + std::to_string(e.lane.id);
    e.lane.id += k * kStreamSubLaneStride;
    device_lanes[profiles::trace_thread_id(e.lane)] = base + (k > 0 ? " #" + std::to_string(k + 1) : "");
  }
  events.insert(events.end(), on_device.begin(), on_device.end());
  for (auto& e : events) {
    e.start_ns -= clock.offset_ns;
    if (e.end_ns != profiles::Event::kOpen) e.end_ns -= clock.offset_ns;
  }
  profiles::TraceProcess process{recorder_.rank(), process_name, {}};
  process.lanes[profiles::trace_thread_id(thread_)] = "executor: compute, exposed communication, idle";
  for (Dim d : kDims)
    for (int k = 0; k < static_cast<int>(comm_lane_ends_[static_cast<std::size_t>(d)].size()); ++k)
      process.lanes[comm_lane_id(static_cast<std::size_t>(d), k)] =
          std::string(dim_name(d)) + " comm" + (k > 0 ? " #" + std::to_string(k + 1) : "");
  process.lanes.insert(device_lanes.begin(), device_lanes.end());
  for (const auto& e : on_device) {
    const std::uint64_t tid = profiles::trace_thread_id(e.lane);
    if (!process.lanes.count(tid))
      process.lanes[tid] =
          e.lane.id == pthread_low_ ? "executor: CUDA calls, NVTX ranges" : "thread " + std::to_string(e.lane.id);
  }
  json doc = profiles::chrome_trace(events, process);
  doc["otherData"] = {{"sax",
                       {{"rank", recorder_.rank()},
                        {"building", building},
                        {"stage", stage},
                        {"executor_tid", profiles::trace_thread_id(thread_)},
                        {"clock_offset_ns", clock.offset_ns},
                        {"clock_residual_ns", clock.residual_ns},
                        {"events", recorder_.size()},
                        {"dropped", recorder_.dropped()}}}};
  for (const auto& [k, v] : extra.items()) doc["otherData"]["sax"][k] = v;
  return doc;
}

}  // namespace sax::harness
