// Device activity (kernels, copies, API calls, NVTX markers) as CUPTI's Activity API delivers it,
// behind an injected source, after kineto's CuptiActivityApi / MockCuptiActivities: the real
// source (profiles/cupti/cupti_source.cpp) turns CUPTI's buffers into ActivityRecords; tests feed
// synthetic ones. ActivityProcessor, which turns records into Events, never sees CUPTI.
#pragma once

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "profiles/event.hpp"

namespace sax::profiles {

// The CUPTI_ACTIVITY_KIND_* sax asks for. Any other value is an unknown kind: the processor
// counts it as malformed.
enum class ActivityKind : std::uint8_t {
  concurrent_kernel,
  memcpy,
  memset,
  runtime,
  driver,
  external_correlation,
  marker
};
const char* to_string(ActivityKind k);

// CUpti_ActivityMemcpyKind, folded to the directions a timeline tells apart.
enum class MemcpyKind : std::uint8_t { unknown, htod, dtoh, htoh, dtod, peer };
const char* to_string(MemcpyKind k);

// CUPTI_ACTIVITY_FLAG_MARKER_*: an instant, or the start or end of an NVTX range.
enum class MarkerPhase : std::uint8_t { instant, start, end };

// One activity record; each kind fills the fields named beside them, the rest stay zero.
struct ActivityRecord {
  ActivityKind kind = ActivityKind::concurrent_kernel;
  // CUPTI's clock (cuptiGetTimestamp), ns, for every kind. A marker has one timestamp: start_ns.
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint32_t device_id = 0;       // kernel, memcpy, memset
  std::uint32_t stream_id = 0;       // kernel, memcpy, memset
  std::uint64_t thread_id = 0;       // runtime, driver, marker: the calling thread's OS id
  std::uint32_t correlation_id = 0;  // kernel, memcpy, memset, runtime, driver, external_correlation
  // kernel (mangled or not), API function, marker start. Valid only during the flush callback.
  const char* name = nullptr;
  std::uint64_t bytes = 0;                     // memcpy, memset
  MemcpyKind copy_kind = MemcpyKind::unknown;  // memcpy
  std::uint64_t external_id = 0;               // external_correlation: the host range's id
  std::uint32_t marker_id = 0;                 // marker: pairs a start with its end
  MarkerPhase marker_phase = MarkerPhase::instant;
};

using ActivityCallback = std::function<void(const ActivityRecord&)>;

class ActivitySource {
 public:
  virtual ~ActivitySource() = default;
  // Begins / stops collecting. Records gathered before stop() wait for flush().
  virtual void start() = 0;
  virtual void stop() = 0;
  // Delivers every completed record, in the order gathered, then forgets them.
  virtual void flush(const ActivityCallback& deliver) = 0;
  // Records lost since the previous call (CUPTI's buffers were full), as
  // cuptiActivityGetNumDroppedRecords reports them.
  virtual std::uint64_t take_dropped() = 0;
};

// Turns records into Events on `rank`'s timeline:
// - kernels, memcpy, memset on their stream's lane (kernel names demangled; NCCL's kernels,
//   "nccl…", are communication);
// - runtime and driver API calls, and NVTX ranges, on the calling thread's lane;
// - an API call and the device work it launched carry the same correlation_id, and both carry
//   the host range they were launched from (external_id) once an external-correlation record
//   names it, whichever batch it arrives in;
// - a marker start and its end become one range event;
// - every timestamp is shifted onto the host clock: host_ns = device_ns + clock_offset_ns.
// Records with end < start, a marker end without its start, and unknown kinds are counted as
// malformed and skipped. Not thread-safe: one thread drains.
class ActivityProcessor {
 public:
  explicit ActivityProcessor(std::int32_t rank, NameTable& names = process_names());

  void set_clock_offset_ns(std::int64_t offset_ns) { clock_offset_ns_ = offset_ns; }
  std::int64_t clock_offset_ns() const { return clock_offset_ns_; }

  // Flushes `source` through process() and adds the records it dropped.
  void drain(ActivitySource& source);
  void process(const ActivityRecord& record);

  const std::vector<Event>& events() const { return events_; }
  std::uint64_t malformed() const { return malformed_; }
  std::uint64_t dropped() const { return dropped_; }
  // Marker starts still waiting for their end.
  std::size_t open_markers() const { return open_markers_.size(); }
  // Forgets events, counts, pending markers and correlations; keeps the clock offset.
  void clear();

 private:
  struct OpenMarker {
    const char* name;
    std::int64_t start_ns;
    std::uint64_t thread_id;
  };
  // What is known about one correlation id: the host range, or the events waiting for it.
  struct Correlation {
    std::uint64_t external_id = 0;
    std::vector<std::size_t> waiting;
  };

  std::int64_t to_host(std::int64_t device_ns) const { return device_ns + clock_offset_ns_; }
  const char* intern(const char* name, const char* fallback);
  const char* kernel_name(const char* raw);
  void add_correlated(Event event);
  void add_external_correlation(const ActivityRecord& r);
  void add_marker(const ActivityRecord& r);

  std::int32_t rank_;
  NameTable& names_;
  std::int64_t clock_offset_ns_ = 0;
  std::vector<Event> events_;
  std::uint64_t malformed_ = 0;
  std::uint64_t dropped_ = 0;
  std::unordered_map<std::uint32_t, OpenMarker> open_markers_;
  std::unordered_map<std::uint32_t, Correlation> correlations_;
  std::unordered_map<const char*, const char*> demangled_;  // interned kernel name → as shown
};

}  // namespace sax::profiles
