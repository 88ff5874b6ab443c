#include "harness/watchdog.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "collectives/link_pacer.hpp"

namespace sax::harness {

Watchdog::Watchdog(double timeout_s, int world_rank)
    : timeout_(std::isfinite(timeout_s) && timeout_s > 0 ? std::min(timeout_s, kMaxTimeoutS) : kMaxTimeoutS),
      world_rank_(world_rank) {
  thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::progress(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  what_ = what;
  tick();
}

void Watchdog::watch() {
  using Clock = std::chrono::steady_clock;
  const auto timeout = std::chrono::duration_cast<Clock::duration>(timeout_);
  const auto look_every = timeout / 8;
  std::unique_lock<std::mutex> lock(mu_);
  // The last time the count was seen to move: progress happened at or before it, so a stall is
  // declared only once the count has stood still for the whole timeout.
  std::uint64_t seen = ticks_.load(std::memory_order_relaxed);
  Clock::time_point moved = Clock::now();
  while (!stop_) {
    const Clock::time_point now = Clock::now();
    const std::uint64_t ticks = ticks_.load(std::memory_order_relaxed);
    if (ticks != seen) {
      seen = ticks;
      moved = now;
    } else if (now - moved >= timeout) {
      break;
    }
    cv_.wait_until(lock, std::min(moved + timeout, now + look_every));
  }
  if (stop_) return;
  const std::string what = what_;
  lock.unlock();
  // Rank 0 says why and aborts; another rank gives it 2 s to, then says it itself (rank 0 may be
  // the hung one, or a busy host may not have woken its watchdog yet): the job never goes down
  // without the reason.
  if (world_rank_ != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  std::fprintf(
      stderr, "sax: failed: timeout: no progress for %g s during %s (a peer died or hangs); aborting all ranks%s\n",
      timeout_.count(), what.c_str(), world_rank_ == 0 ? "" : (" (rank " + std::to_string(world_rank_) + ")").c_str());
  std::fflush(stderr);
  coll::unlink_pacing_segments();  // the peers mpirun kills cannot
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);  // MPI_Abort does not return; if it ever does, still never hang
}

}  // namespace sax::harness
