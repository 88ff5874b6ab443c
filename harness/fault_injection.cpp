#include "harness/internal/fault_injection.hpp"

#include <unistd.h>

#include <chrono>
#include <thread>

#include "spec/env.hpp"

namespace sax::harness {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

const FaultInjection& FaultInjection::get() {
  static const FaultInjection f = [] {
    FaultInjection x;
    x.hang_rank_ = static_cast<int>(env_integer(kEnvTestHangRank).value_or(-1));
    x.exit_rank_ = static_cast<int>(env_integer(kEnvTestExitRank).value_or(-1));
    x.corrupt_rank_ = static_cast<int>(env_integer(kEnvTestCorruptRank).value_or(-1));
    x.slowdown_ = env_number(kEnvBenchInjectSlowdown).value_or(0.0);
    x.block_ = static_cast<int>(env_integer(kEnvBenchInjectBlock).value_or(0));
    return x;
  }();
  return f;
}

void FaultInjection::before_first_measurement(int world_rank) const {
  if (world_rank == exit_rank_) _exit(3);
  if (world_rank == hang_rank_)
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

double FaultInjection::slow_down(int i, double start_s, double end_s) const {
  const bool slowed = block_ == 0 || (i / block_) % 2 == 1;
  const double until = slowed ? end_s + slowdown_ * (end_s - start_s) : end_s;
  while (now_s() < until) {
  }
  return now_s();
}

nlohmann::json FaultInjection::to_json() const { return {{"inject_slowdown", slowdown_}, {"inject_block", block_}}; }

}  // namespace sax::harness
