// `bench coll`'s engine, shared by every collective (nccl-tests' structure): sizes, warmup,
// timing, checking; what differs per op is in coll_table.
//
// Timing, as nccl-tests times a size: after the warmup the ranks meet; then each rank enqueues
// the `iters` iterations one after another and waits once at the end (`-z 1`: every iteration
// is synchronised before the next is enqueued, nccl-tests' -z 1; `-G N`: the iterations are
// captured once as a CUDA graph, launched N times). nccl-tests' structure, timed with events on
// the stream rather than its host timer around the loop (so a batch's first launch latency and
// the final wake-up are not in it). For the spread, an event also ends each sample: a run of
// consecutive iterations long enough by the warmup's pace to last --min-sample-us (default 50 µs;
// at most iters / 10 iterations; 0: every iteration its own sample), so that short operations
// are not slowed by the timing (an event every iteration cost 3-7 % of a 1 KiB MPI collective
// on 4 ranks here, bench/coll_overhead with min_sample_us 0; on CUDA each record is a host API
// call). On the MPI backend every call is complete on return and the events stamp
// the host's steady clock. A rank's time per iteration is its loop's elapsed time / iters; a
// sample's is its events' interval / its iterations (with -G: per launch / iters). Both are
// aggregated over the ranks as --average says (nccl-tests' -a: rank 0, the mean — the default,
// as nccl-tests and OSU —, min or max). Reported:
//   time_us   the aggregate of each rank's mean time per iteration;
//   p50_us, p99_us, cv   over the aggregated samples (times_us in the JSON, iters_per_sample each).
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
#include "harness/tracer.hpp"
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
  // --trace: the timed batch and each iteration on this rank's timeline, named `trace_name`.
  StepTracer* tracer = nullptr;
  const char* trace_name = "";
  // --timeout: each completed iteration (warmup and timed; on CUDA each completed sample) ticks
  // it, so a size longer than the timeout is not a hang while its iterations keep completing.
  Watchdog* watchdog = nullptr;
  static Timing of(const CollBenchConfig& c) {
    return {c.iters, c.warmup, c.average, c.blocking, c.graph_launches, c.min_sample_us, true, c.groups_at_once > 0};
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

// The sweep: every op × size of the plan, on every rank; `on_result` runs on every rank after
// each size (rank 0 prints). Buffers are allocated once on `device` at the largest size.
std::vector<CollResult> run_coll_sweep(const CollBenchPlan& plan, coll::Communicator& comm, kernels::Device& device,
                                       Job& job, Watchdog* watchdog,
                                       const std::function<void(const CollResult&)>& on_result,
                                       StepTracer* tracer = nullptr);

}  // namespace sax::harness
