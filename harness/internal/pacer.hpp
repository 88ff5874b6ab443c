// The paced device (docs/design.md "Devices: native and paced"): as the link emulator holds a message
// for the emulated link's time, the pacer holds a compute op until the declared device would
// have finished it. The op's real kernel runs on real buffers first; its deadline is its start
// plus the device's time for it (workload/device_time.hpp, the function the cost model prices it
// with, on this rank's building's device), and the rank waits for it. Deadlines are absolute and
// chained: an op that follows a paced op straight on (nothing waited for in between) starts at
// that op's deadline, so waking late does not add up along a chain, and a rank behind its
// deadlines (a kernel slower than its time, a slow issue of a message) goes on at once and
// catches up on the ops whose kernels are quicker than their time. What it has not caught up
// when the chain ends (the rank waits for a message, or the step ends) is an overrun: the device
// ran slower than declared there, and the overrun is counted, never hidden.
// Waiting for the deadline never spins (harness/internal/waiter.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "harness/internal/waiter.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "workload/device_time.hpp"

namespace sax::harness {

// What pacing did over the steps it was asked about.
struct PacingStats {
  std::int64_t ops = 0;
  std::int64_t late_ops = 0;  // ops whose kernel ended after their deadline (caught up or not)
  std::int64_t overruns = 0;  // chains that ended behind the device
  double paced_s = 0;         // the device's time for the ops, summed
  double overrun_s = 0;       // how far behind the device those chains ended, summed
  double late_s = 0;          // how long after their deadlines the rank resumed (waking up)
  // Of every op, its kernel's time (from when the rank began it) / the device's time for it. Its
  // p99 says how fast a device this host holds (the declared speed / it).
  std::vector<float> load;
  void add(const PacingStats& s);
  double load_p(double q) const;  // the q-quantile of `load` (0 when none)
};

class Pacer {
 public:
  // Rank `rank`'s device: its building's (device_of: its own or the cluster's, slowed by its
  // compute_slowdown), priced for the model's dtype.
  Pacer(const Cluster& cluster, const Model& model, std::int64_t rank);
  // The device's time for `op` (s), `load` times its listed work (the rows a routed expert GEMM
  // really received over those the workload lists).
  double time_s(const workload::Op& op, double load = 1) const;
  // A compute op begins at `now_ns`: its deadline, chained from the last op's when the rank went
  // straight on from it (nothing waited for in between).
  std::int64_t begin(const workload::Op& op, double load, std::int64_t now_ns);
  // Its kernel ended at `kernel_end_ns`: waits for the deadline (if it has not passed) progressing
  // what is pending; returns when the op ends.
  std::int64_t end(std::int64_t kernel_end_ns, const std::function<bool()>& progress);
  // The rank waits for something other than a paced op: the chain ends (an overrun if it ended
  // behind the device), and the next op starts when it begins.
  void break_chain();
  const Waiter& waiter() const { return waiter_; }
  // What pacing did since the last take() (and forgets it).
  PacingStats take();
  std::int64_t deadline_ns() const { return deadline_; }

 private:
  workload::DeviceSpeed speed_;
  Waiter waiter_;
  std::int64_t deadline_ = 0, began_ = 0, behind_ns_ = 0;
  double time_s_ = 0;
  bool chained_ = false;
  PacingStats stats_;
};

}  // namespace sax::harness
