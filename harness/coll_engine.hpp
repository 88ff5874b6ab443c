// `bench coll`'s engine, shared by every collective (nccl-tests' structure): sizes, warmup,
// timing, checking; what differs per op is in coll_table. A size is timed as nccl-tests times it
// (all iterations enqueued, one wait; `-z 1` synchronises each, `-G N` replays a CUDA graph), with
// events on the stream rather than a host timer, so launch latency and wake-up are not in it. An
// event also ends each sample of --min-sample-us worth of iterations, so short operations are not
// slowed by the timing (0: every iteration its own sample). Each rank's mean time per iteration and
// its samples are aggregated over the ranks as --average says (nccl-tests' -a): time_us, and
// p50_us, p99_us, cv over the samples; algbw = bytes / time_us, busbw = algbw × busbw_factor.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.hpp"
#include "harness/coll_plan.hpp"
#include "harness/internal/coll_table.hpp"
#include "harness/internal/fault_injection.hpp"
#include "harness/internal/tracer.hpp"
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
  bool in_place = false;
  std::string path;  // the library call that carried it (coll::Communicator::path)
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0, p50_us = 0, p99_us = 0, cv = 0;
  std::optional<std::int64_t> wrong;  // summed over all ranks; empty when not checked
  std::vector<double> times_us;       // per-iteration time of each sample, aggregated over ranks
  double iters_per_sample = 1;        // the iterations a sample holds (on average: the split is even)
  json to_json() const;
};

// How one size is timed: the configuration's -n, -w, --average, --blocking and -G.
struct Timing {
  int iters = 20, warmup = 5;
  RankAggregate average = RankAggregate::mean;
  bool blocking = false;
  int graph_launches = 0;
  double min_sample_us = 50;  // --min-sample-us: iterations per sample so that one lasts this long
  // --groups-at-once: whether this rank's group runs the op (false: it waits without polling and
  // is left out of the aggregate); `quiet` when some groups wait (every rank meets quietly).
  bool active = true, quiet = false;
  double poll_us = 0;  // > 0: each op posted nonblocking and waited for asleep (CollBenchConfig::poll_us)
  // --trace: the timed batch and each iteration on this rank's timeline, named `trace_name`.
  StepTracer* tracer = nullptr;
  const char* trace_name = "";
  // --timeout: each completed iteration (warmup and timed; on CUDA each completed sample) ticks
  // it, so a size longer than the timeout is not a hang while its iterations keep completing.
  Watchdog* watchdog = nullptr;
  static Timing of(const CollBenchConfig& c) {
    return {c.iters,  c.warmup, c.average, c.blocking, c.graph_launches, c.min_sample_us, true, c.groups_at_once > 0,
            c.poll_us};
  }
};

struct Measurement {
  std::vector<double> times_us;  // per sample, its time per iteration (-G: per launch / iters), aggregated over ranks
  double iters_per_sample = 1;
  double time_us = 0;  // each rank's mean time per iteration, aggregated over ranks
};

// Times one op at `count` elements on this rank's group communicator, whose stream is
// `device`'s communication stream. Collective over every rank of `job`. `faults` (tests only)
// may slow iterations.
Measurement time_op(const CollOpEntry& entry, coll::Communicator& comm, Job& job, kernels::Device& device, void* send,
                    void* recv, std::size_t count, DType dtype, const Timing& timing,
                    const FaultInjection& faults = FaultInjection::get());

// A blocking call as a paced step makes it (`sax run` on a paced device, harness/internal/executor.hpp):
// `iters` times the rank sleeps until `gap_us` after it went on from its last call, as a paced op
// holds it to the device's deadline, then calls `entry` (posted nonblocking, waited for asleep,
// testing every `poll_us`). Per call, the time from the rank's own call to the last of its
// group's members' (`skew_us`: the wait `sax run` counts as idle) and from then until the rank
// went on (`after_us`: its communication); each the mean over the calls, then over every rank.
// `members` are the world ranks of this rank's group (every group of the kind runs at once).
// Collective over every rank of `job`.
struct WaitPath {
  double skew_us = 0, after_us = 0;
};
WaitPath time_wait_path(const CollOpEntry& entry, coll::Communicator& comm, Job& job, void* send, void* recv,
                        std::size_t count, DType dtype, double poll_us, double gap_us, int iters,
                        const std::vector<std::int64_t>& members);

// The sweep: every op × size of the plan, on every rank; `on_result` runs on every rank after
// each size (rank 0 prints). Buffers are allocated once on `device` at the largest size.
std::vector<CollResult> run_coll_sweep(const CollBenchPlan& plan, coll::Communicator& comm, kernels::Device& device,
                                       Job& job, Watchdog* watchdog,
                                       const std::function<void(const CollResult&)>& on_result,
                                       StepTracer* tracer = nullptr);

}  // namespace sax::harness
