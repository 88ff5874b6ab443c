// A peer that dies or hangs must not hang the others: the watchdog is a thread that, when the
// main thread has made no progress for `timeout_s`, prints one line (rank 0 only) and aborts the
// whole MPI job with exit code 1. A collective stuck waiting for a dead peer never returns, so
// only another thread can end it.
#pragma once

#include <chrono>
#include <condition_variable>
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

 private:
  void watch();
  std::chrono::duration<double> timeout_;
  int world_rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::chrono::steady_clock::time_point deadline_;
  std::string what_ = "start-up";
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sax::harness
