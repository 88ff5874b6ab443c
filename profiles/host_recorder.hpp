// Host-side timeline recording that is cheap enough to leave on in a timed step: the buffer is
// allocated once, up front, and recording neither allocates nor locks.
//
// Threading contract: begin/end/record may be called from any number of threads at once; each
// call claims its own slot with one atomic increment, so every slot has one writer. A range's
// end() must come from the thread that began it, or after it (any hand-over that orders the two
// is enough). events(), size() and clear() are for after recording: the caller makes sure every
// recording thread has finished (joined, or past a barrier) before calling them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "profiles/event.hpp"

namespace sax::profiles {

// Nanoseconds on the one clock of every Event: std::chrono::steady_clock.
std::int64_t now_ns();
// The OS thread id of the caller (cached per thread): the id of its host-thread lane.
std::uint64_t current_thread_id();
Lane current_thread_lane();

class HostRecorder {
 public:
  // A begun range. id is unique for the recorder's lifetime (it survives clear()) and can be
  // pushed as CUPTI's external correlation id; 0 when the range was dropped (buffer full).
  struct Range {
    std::size_t slot = 0;
    std::uint64_t id = 0;
  };

  // Owns a buffer of `capacity` events, allocated here.
  HostRecorder(std::int32_t rank, std::size_t capacity);
  // Records into caller-owned storage (a static array, say); never writes outside it.
  HostRecorder(std::int32_t rank, std::span<Event> storage);
  HostRecorder(const HostRecorder&) = delete;
  HostRecorder& operator=(const HostRecorder&) = delete;

  // A range on the calling thread's lane, starting now. `name` must outlive the events.
  Range begin(const char* name, Category category = Category::range, std::uint64_t bytes = 0);
  void end(Range range);
  // Records `event` as given. false when the buffer is full (the event is counted as dropped).
  bool record(const Event& event);

  // The events, in the order their slots were claimed (a range's slot is claimed at begin).
  std::span<const Event> events() const { return storage_.first(size()); }
  std::size_t size() const;
  std::size_t capacity() const { return storage_.size(); }
  std::uint64_t dropped() const;
  std::int32_t rank() const { return rank_; }
  // Forgets every event and the dropped count; the buffer is kept. Ranges still open are
  // abandoned: ending them afterwards does nothing.
  void clear();

 private:
  // Claims a slot; returns the ticket (slot = ticket - base_, out of range when full).
  std::uint64_t claim() { return next_.fetch_add(1, std::memory_order_relaxed); }

  std::int32_t rank_;
  std::unique_ptr<Event[]> owned_;
  std::span<Event> storage_;
  std::atomic<std::uint64_t> next_{0};  // tickets handed out since construction
  std::uint64_t base_ = 0;              // the first ticket since the last clear()
};

// Begins a range on construction and ends it on destruction.
class ScopedRange {
 public:
  ScopedRange(HostRecorder& recorder, const char* name, Category category = Category::range, std::uint64_t bytes = 0)
      : recorder_(recorder), range_(recorder.begin(name, category, bytes)) {}
  ~ScopedRange() { recorder_.end(range_); }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

  std::uint64_t id() const { return range_.id; }

 private:
  HostRecorder& recorder_;
  HostRecorder::Range range_;
};

}  // namespace sax::profiles
