// A peer that dies or hangs must not hang the others: the watchdog is a thread that, when the
// main thread has made no progress for `timeout_s`, prints one line (rank 0 only) and aborts the
// whole MPI job with exit code 1. A collective stuck waiting for a dead peer never returns, so
// only another thread can end it.
//
// Progress is whatever the caller counts: a step named by progress(), or a tick() — bench coll
// ticks every completed iteration, so a healthy size that lasts longer than the timeout is not
// taken for a hang (it was, when progress was counted per size). A tick is one relaxed
// atomic increment, cheap enough for a timed loop; the thread looks every timeout / 8, so a stall
// is reported after between timeout and 1.125 × timeout.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace sax::harness {

// The longest timeout: sax bench coll refuses more, and the watchdog clamps to it, because
// steady_clock::now() + 1e20 s overflows and would put the deadline in the past.
inline constexpr double kMaxTimeoutS = 1e6;

class Watchdog {
 public:
  Watchdog(double timeout_s, int world_rank);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Restarts the countdown; `what` names the step now running, for the message.
  void progress(const std::string& what);
  // Restarts the countdown within the step (an iteration completed): no lock, no allocation.
  void tick() noexcept { ticks_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void watch();
  std::chrono::duration<double> timeout_;
  int world_rank_;
  std::atomic<std::uint64_t> ticks_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string what_ = "start-up";
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sax::harness
