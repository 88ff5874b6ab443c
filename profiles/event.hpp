// One timeline event, the unit every part of profiles/ speaks: host ranges from the recorder,
// kernels, copies and API calls from the activity processor, and (later) Chrome-trace export.
//
// The one clock: every start_ns/end_ns is host std::chrono::steady_clock in nanoseconds since
// its epoch (what now_ns() in host_recorder.hpp returns). Device timestamps are shifted onto it
// before they become Events, so events of one rank compare directly.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

namespace sax::profiles {

// Where an event ran: a host thread (id = OS thread id) or a device stream (id = stream id).
enum class LaneKind : std::uint8_t { host_thread, device_stream };
const char* to_string(LaneKind k);

struct Lane {
  LaneKind kind = LaneKind::host_thread;
  std::int32_t device = -1;  // the device of a stream; -1 on a host thread
  std::uint64_t id = 0;

  friend bool operator==(const Lane&, const Lane&) = default;
};

// range: a named span of host time (an NVTX marker range or a HostRecorder range).
// runtime: a CUDA runtime or driver API call. communication: NCCL kernels and host-side
// collectives. step: one training step. idle: waiting for a peer (a pipeline bubble).
enum class Category : std::uint8_t { compute, communication, memcpy, memset, runtime, range, step, other, idle };
const char* to_string(Category c);

struct Event {
  // end_ns of a range begun but not yet ended.
  static constexpr std::int64_t kOpen = -1;

  std::int32_t rank = 0;
  Lane lane;
  const char* name = "";  // static or interned (NameTable); never freed while events live
  Category category = Category::other;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t bytes = 0;  // bytes moved or set; 0 when none
  // CUPTI's correlation id, shared by an API call and the device work it launched; 0 = none.
  std::uint64_t correlation_id = 0;
  // The host range device work was launched from (CUPTI's external correlation id); on a host
  // range, that range's own id. 0 = none.
  std::uint64_t external_id = 0;

  std::int64_t duration_ns() const { return end_ns - start_ns; }
};

// Interns names built at run time ("dp.reduce_scatter") so that events can hold a plain
// const char*. Returned pointers stay valid for the table's lifetime. Thread-safe; it locks and
// allocates, so intern once, outside the hot path, and keep the pointer.
class NameTable {
 public:
  const char* intern(std::string_view name);
  std::size_t size() const;

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  mutable std::mutex mutex_;
  // Node-based: an element's characters never move on rehash.
  std::unordered_set<std::string, Hash, std::equal_to<>> names_;
};

// The process-wide table, for names that must outlive any one recorder or processor.
NameTable& process_names();

}  // namespace sax::profiles
