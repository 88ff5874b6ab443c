// The paced device (harness/internal/pacer.hpp) and how a paced rank waits (harness/internal/waiter.hpp), without
// MPI: an op never ends before its deadline, a chain's deadlines are absolute (waking late does
// not add up), a kernel slower than its time is counted when the chain ends behind the device and
// not when the rank catches up, and waiting sleeps. Bounds are orders, not tight times: a loaded
// host wakes late, but never early, and a sleeping thread does not burn its core.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "harness/internal/pacer.hpp"
#include "profiles/host_recorder.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "tests/support/presets.hpp"
#include "workload/workload.hpp"

using sax::harness::Pacer;
using sax::harness::PacingStats;
using sax::harness::Waiter;
using sax::profiles::now_ns;

namespace {

// A memory-bound op of `bytes` on local-2bld's paced device (its time: the fixed cost plus the
// bytes at the declared bandwidth).
sax::workload::Op memory_op(double bytes) {
  sax::workload::Op o;
  o.name = "input_norm";
  o.compute = sax::workload::ComputeKind::memory;
  o.m = 1, o.n = bytes / 4, o.count = 1;
  o.bytes_read = bytes / 2, o.bytes_written = bytes / 2;
  return o;
}

struct Paced {
  sax::Cluster cluster = sax::test::preset_cluster("local-2bld");
  sax::Model model = sax::test::preset_model("gpt-tiny");
  Pacer pacer{cluster, model, 0};
};

}  // namespace

TEST(Pacer, AnOpTakesTheDeclaredDevicesTime) {
  Paced p;
  ASSERT_TRUE(p.cluster.paced());
  const sax::Device& d = p.cluster.device;
  const double bytes = 4e6;
  EXPECT_NEAR(p.pacer.time_s(memory_op(bytes)),
              d.op_overhead_us * 1e-6 + bytes / (d.hbm_bandwidth_gbps * 1e9 * d.efficiency->memory), 1e-12);
  // A routed expert GEMM that received twice its share of rows takes twice the work's time.
  const double t = p.pacer.time_s(memory_op(bytes)), fixed = d.op_overhead_us * 1e-6;
  EXPECT_NEAR(p.pacer.time_s(memory_op(bytes), 2.0), fixed + 2 * (t - fixed), 1e-12);
}

TEST(Pacer, ChainedDeadlinesNeverEndEarlyAndDoNotAddUpWakingLate) {
  Paced p;
  const sax::workload::Op op = memory_op(8e6);  // a few ms on the declared device
  const double t = p.pacer.time_s(op);
  constexpr int kOps = 40;
  const std::int64_t start = now_ns();
  for (int i = 0; i < kOps; ++i) {
    const std::int64_t deadline = p.pacer.begin(op, 1.0, now_ns());
    const std::int64_t end = p.pacer.end(now_ns(), [] { return false; });
    EXPECT_GE(end, deadline) << "op " << i << " ended before its deadline";
  }
  const double elapsed = static_cast<double>(now_ns() - start) * 1e-9;
  // Each op starts at the last one's deadline: the chain takes its ops' time plus the last
  // wake-up, not one wake-up per op (40 late wake-ups on a busy host would be far more).
  EXPECT_GE(elapsed, kOps * t - 1e-6);
  EXPECT_LT(elapsed, kOps * t + 0.5) << "a chain of " << kOps << " ops of " << t << " s";
  const PacingStats s = p.pacer.take();
  EXPECT_EQ(s.ops, kOps);
  EXPECT_NEAR(s.paced_s, kOps * t, 1e-9);
  EXPECT_EQ(s.overruns, 0);
}

TEST(Pacer, AKernelPastItsDeadlineIsAnOverrunOnlyWhenTheChainEndsBehind) {
  Paced p;
  const sax::workload::Op small = memory_op(1e5), large = memory_op(2e8);  // ~0.4 ms and ~0.1 s
  // 20 ms late, then the chain ends: an overrun of those 20 ms.
  std::int64_t deadline = p.pacer.begin(small, 1.0, now_ns());
  const std::int64_t late = deadline + 20'000'000;
  EXPECT_EQ(p.pacer.end(late, [] { return false; }), late);  // behind: on at once
  p.pacer.break_chain();
  PacingStats s = p.pacer.take();
  EXPECT_EQ(s.late_ops, 1);
  EXPECT_EQ(s.overruns, 1);
  EXPECT_NEAR(s.overrun_s, 0.02, 1e-9);
  // 20 ms late, then an op whose kernel is quicker than its time: the rank catches up.
  deadline = p.pacer.begin(small, 1.0, now_ns());
  p.pacer.end(deadline + 20'000'000, [] { return false; });
  const std::int64_t next = p.pacer.begin(large, 1.0, now_ns());
  EXPECT_EQ(next, deadline + static_cast<std::int64_t>(std::llround(p.pacer.time_s(large) * 1e9)))
      << "the next op starts at the last one's deadline";
  EXPECT_GE(p.pacer.end(now_ns(), [] { return false; }), next);
  s = p.pacer.take();
  EXPECT_EQ(s.late_ops, 1);
  EXPECT_EQ(s.overruns, 0);
  EXPECT_EQ(s.overrun_s, 0);
}

TEST(Pacer, ItsWaitProgressesWhatIsPendingUntilTheDeadline) {
  Paced p;
  int tests = 0;
  // ~125 ms: room for the four tests' polls however late a busy host wakes them, and far more
  // polls than 1000 had it tested on.
  const sax::workload::Op op = memory_op(2e8);
  p.pacer.begin(op, 1.0, now_ns());
  p.pacer.end(now_ns(), [&] { return ++tests < 5; });  // pending for the first 4 tests
  EXPECT_GE(tests, 5) << "the wait tests what is pending, and stops testing once nothing is";
  EXPECT_LT(tests, 1000) << "then sleeps to the deadline instead of testing on";
}

// The mechanism, at a poll interval whose wake-ups cost next to nothing even on a loaded VM (at
// the default 50 µs each wake-up's few µs of kernel time add up to a share that depends on the
// host: a figure for a benchmark, not a test): it tests at most once per interval, and its CPU
// time is a small part of the wait. A busy host only makes it wake later: fewer tests, less CPU.
TEST(Waiter, WaitingForAMessageSleepsInsteadOfSpinning) {
  const Waiter w(1000);
  std::atomic<bool> arrived{false};
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    arrived = true;
  });
  int tests = 0;
  const double cpu0 = sax::harness::cpu_seconds(false);
  const std::int64_t t0 = now_ns();
  w.until([&] {
    ++tests;
    return arrived.load();
  });
  const double wall = static_cast<double>(now_ns() - t0) * 1e-9, cpu = sax::harness::cpu_seconds(false) - cpu0;
  sender.join();
  EXPECT_GE(wall, 0.29);
  EXPECT_LE(tests, static_cast<int>(wall / 1e-3) + 2) << "tested more often than once per poll interval";
  // A spinning wait would use the whole 0.3 s.
  EXPECT_LT(cpu, 0.25 * wall) << cpu << " s of CPU over " << wall << " s of waiting";
}
