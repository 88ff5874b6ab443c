#include "profiles/host_recorder.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace sax::profiles {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::uint64_t current_thread_id() {
  // Constant-initialised, so reading it needs no guard and no allocation; the syscall runs once.
  thread_local std::uint64_t tid = 0;
  if (tid == 0) tid = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  return tid;
}

Lane current_thread_lane() { return Lane{LaneKind::host_thread, -1, current_thread_id()}; }

HostRecorder::HostRecorder(std::int32_t rank, std::size_t capacity)
    : rank_(rank), owned_(std::make_unique<Event[]>(capacity)), storage_(owned_.get(), capacity) {}

HostRecorder::HostRecorder(std::int32_t rank, std::span<Event> storage) : rank_(rank), storage_(storage) {}

HostRecorder::Range HostRecorder::begin(const char* name, Category category, std::uint64_t bytes) {
  const std::uint64_t ticket = claim();
  const std::uint64_t slot = ticket - base_;
  if (slot >= storage_.size()) return Range{};
  Event& e = storage_[slot];
  e.rank = rank_;
  e.lane = current_thread_lane();
  e.name = name;
  e.category = category;
  e.bytes = bytes;
  e.correlation_id = 0;
  e.external_id = ticket + 1;
  e.end_ns = Event::kOpen;
  e.start_ns = now_ns();  // last, so that the bookkeeping above is not timed
  return Range{static_cast<std::size_t>(slot), ticket + 1};
}

void HostRecorder::end(Range range) {
  // id 0: dropped at begin; a ticket before base_: a range from before clear(), whose slot
  // may hold another event now.
  if (range.id == 0 || range.id - 1 < base_) return;
  storage_[range.slot].end_ns = now_ns();
}

bool HostRecorder::record(const Event& event) {
  const std::uint64_t slot = claim() - base_;
  if (slot >= storage_.size()) return false;
  storage_[slot] = event;
  return true;
}

std::size_t HostRecorder::size() const {
  const std::uint64_t claimed = next_.load(std::memory_order_relaxed) - base_;
  return static_cast<std::size_t>(std::min<std::uint64_t>(claimed, storage_.size()));
}

std::uint64_t HostRecorder::dropped() const {
  const std::uint64_t claimed = next_.load(std::memory_order_relaxed) - base_;
  return claimed > storage_.size() ? claimed - storage_.size() : 0;
}

void HostRecorder::clear() { base_ = next_.load(std::memory_order_relaxed); }

}  // namespace sax::profiles
