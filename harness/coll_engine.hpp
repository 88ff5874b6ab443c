// `bench coll`'s engine, shared by every collective (nccl-tests' structure): sizes, warmup,
// timing, checking; what differs per op is in coll_table.
//
// Timing: each rank stamps the steady clock before the timed loop and after every iteration,
// nothing else inside the loop (no reduction of timings there, which would add work a bare loop
// does not have). After the loop, per-iteration durations are reduced with MAX over all ranks
// (every group runs at once, so the slowest rank anywhere sets the pace). Reported:
//   time_us   the slowest rank's mean time per iteration (loop time / iters, MAX over ranks):
//             nccl-tests reports a mean too, and it is what a bare timing loop measures;
//   p50_us, p99_us, cv   over the per-iteration slowest-rank times (times_us in the JSON).
// algbw = bytes / time_us; busbw = algbw × busbw_factor(op, group size).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.hpp"
#include "harness/coll_plan.hpp"
#include "harness/coll_table.hpp"
#include "harness/fault_injection.hpp"
#include "harness/job.hpp"
#include "harness/watchdog.hpp"
#include "kernels/device.hpp"

namespace sax::harness {

struct CollResult {
  CollOp op = CollOp::all_reduce;
  std::uint64_t bytes = 0, count = 0;
  DType dtype = DType::fp32;
  std::string group;
  int ranks = 0;  // ranks per group
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0, p50_us = 0, p99_us = 0, cv = 0;
  std::optional<std::int64_t> wrong;  // summed over all ranks; empty when not checked
  std::vector<double> times_us;       // per iteration, slowest rank
  json to_json() const;
};

struct Measurement {
  std::vector<double> times_us;  // per iteration, MAX over the ranks of the job
  double time_us = 0;            // MAX over ranks of each rank's mean time per iteration
};

// Times `iters` runs (after `warmup`) of one op at `count` elements on this rank's group
// communicator. Collective over every rank of `job`. `faults` (tests only) may slow iterations.
Measurement time_op(const CollOpEntry& entry, coll::Communicator& comm, Job& job, void* send, void* recv,
                    std::size_t count, DType dtype, int iters, int warmup,
                    const FaultInjection& faults = FaultInjection::get());

// The sweep: every op × size of the plan, on every rank; `on_result` runs on every rank after
// each size (rank 0 prints). Buffers are allocated once on `device` at the largest size.
std::vector<CollResult> run_coll_sweep(const CollBenchPlan& plan, coll::Communicator& comm, kernels::Device& device,
                                       Job& job, Watchdog* watchdog,
                                       const std::function<void(const CollResult&)>& on_result);

}  // namespace sax::harness
