#include "calibration/compute_sweep.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "spec/error.hpp"
#include "spec/layout.hpp"
#ifdef SAX_HAVE_KERNEL_BENCH
#include "harness/kernel_bench.hpp"
#include "harness/op_timing.hpp"
#include "harness/stats.hpp"
#include "workload/device_time.hpp"
#include "workload/layer_ops.hpp"
#endif

namespace sax::calibration {

#ifdef SAX_HAVE_KERNEL_BENCH

namespace {

// Each op is timed kComputeIters times after kComputeWarmup (median per rank, mean over ranks),
// every rank at once. Each timing covers back-to-back repetitions of the op for at least
// kComputeWindowUs, so that where ranks share cores it is the rank's share of the host over many
// scheduler slices (what a step's ops get), not one op that happened to run unpreempted on a
// whole core, which runs faster than the same op does in a step.
constexpr int kComputeIters = 5, kComputeWarmup = 1;
constexpr double kComputeWindowUs = 20000;
// A paced device's points: each op timed kPacedIters times on every rank at once, each timing
// over back-to-back runs for kPacedWindowUs of the op run alone (about a chain of paced ops between
// two waits of a step, a micro-batch's pass through a stage): the p99 (the highest rank's) of the
// rate the host sustains for the op while every rank computes. A single run can be preempted for a
// scheduler slice; a chain of paced ops catches up on the ops quicker than their time
// (harness/internal/pacer.hpp), so what a device must not exceed is the sustained rate, not one
// run's. The runs are counted from the op's time alone (shorter than a slice, a run gets a whole
// core), so where R ranks share a core a timing lasts about R times the window: 0.1 s with 4 ranks
// on 2 cores, 0.4 s with 16. Windows of the nominal length under sharing were tried: the sweep of
// local-4bld ran twice as fast, but the highest p99 over that many short windows held a device 1.1
// to 1.3 times slower (0.0025-0.0029 TFLOP/s in three runs, 0.0032-0.0033 in two), and the runs
// on it are as much longer; on local-2bld the one run, 0.0103, fell below the two others' 0.0134
// and 0.0241. Shorter windows wait for evidence that the device they hold is as steady.
constexpr int kPacedIters = 5;
constexpr double kPacedWindowUs = 50000;

// The tile and wave quantization of a measured op on the device's SMs, as the cost model has it
// (workload::quantization: 1 but for GEMMs and attention products on a device with an SM count).
double quantization(const workload::Op& op, int sm_count) {
  const double batch = op.compute == workload::ComputeKind::product ? op.count * op.heads : op.count;
  return workload::quantization(op.compute, op.m, op.n, op.k, batch, workload::part_of(op.phase), sm_count);
}

const char* compute_kind_name(workload::ComputeKind k) {
  switch (k) {
    case workload::ComputeKind::gemm:
      return "gemm";
    case workload::ComputeKind::product:
      return "product";
    case workload::ComputeKind::attention:
      return "attention";
    case workload::ComputeKind::memory:
      return "memory";
  }
  return "?";
}

// A compute point: the op, its shape and the device's peaks, what fit_sweep reads.
json compute_point(const ComputeTask& ct, const Model& m, const Cluster& cluster, double bytes, double time_us) {
  return {{"key", ct.key},
          {"kind", "compute"},
          {"model", m.name},
          {"op", ct.op.name},
          {"compute", compute_kind_name(ct.op.compute)},
          {"phase", workload::to_string(ct.op.phase)},
          {"shape", harness::shape_text(ct.op)},
          {"flops", ct.op.flops},
          {"m", ct.op.m},
          {"n", ct.op.n},
          {"k", ct.op.k},
          {"count", ct.op.count},
          {"heads", ct.op.heads},
          {"sm_count", cluster.device.sm_count},
          {"quantization", quantization(ct.op, cluster.device.sm_count)},
          {"bytes", bytes},
          {"time_us", time_us},
          {"peak_flops", cluster.device.peak_tflops_for(m.dtype) * 1e12},
          {"hbm_bytes_per_s", cluster.device.hbm_bandwidth_gbps * 1e9}};
}

// A paced cluster's op: single runs on every rank at once; its p99 (the highest rank's) beside the
// declared device's time for it (the cluster's device, workload/device_time.hpp) and how that
// time splits (the fixed cost per op; bound by FLOPs or by bytes), what fit_sweep's held device
// reads.
void measure_paced(const ComputeBench& b, harness::ComputeDevice& ops, const ComputeTask& ct) {
  const Model& m = b.models[ct.model];
  harness::ComputeOp op(ops, m, ct.op);
  op.warm_up(kComputeWarmup);
  // One run's time, the median of a few (one preempted run would make the windows too short).
  const double one_us = b.job.aggregate(harness::median(op.time(5).us), harness::RankAggregate::max);
  const int reps = static_cast<int>(std::clamp(std::ceil(kPacedWindowUs / std::max(one_us, 1.0)), 1.0, 10000.0));
  b.job.barrier();  // every rank computes at once
  const harness::OpTimes t = op.time(kPacedIters, reps);
  const double time_us = b.job.aggregate(harness::median(t.us), harness::RankAggregate::mean);
  const double p99_us = b.job.aggregate(harness::percentile(t.us, 0.99), harness::RankAggregate::max);
  workload::DeviceSpeed speed = workload::DeviceSpeed::of(b.cluster.device, b.cluster.backend, m.dtype);
  const double device_s = workload::op_time(speed, ct.op), overhead_s = speed.op_overhead_s;
  speed.op_overhead_s = 0;
  speed.hbm_bytes_per_s = std::numeric_limits<double>::infinity();  // the FLOPs' part alone
  const bool bytes_bound = ct.op.compute == workload::ComputeKind::memory || !(ct.op.flops > 0) ||
                           workload::op_time(speed, ct.op) < device_s - overhead_s;
  json p = compute_point(ct, m, b.cluster, t.traffic.read + t.traffic.written, time_us);
  p["paced"] = true;
  p["p99_us"] = p99_us;
  p["runs"] = kPacedIters * reps;
  p["device_us"] = device_s * 1e6;
  p["overhead_us"] = overhead_s * 1e6;
  p["bound"] = bytes_bound ? "bytes" : "flops";
  b.record(
      p, ct.weight,
      "paced " + m.name + " " + ct.op.name + " " + workload::to_string(ct.op.phase) + " " + harness::shape_text(ct.op));
}

// One op on every rank at once: repetitions per timing enough for the window on the slowest rank,
// the same on every rank; its time the mean over ranks of each rank's median.
void measure_one(const ComputeBench& b, harness::ComputeDevice& ops, const ComputeTask& ct) {
  const Model& m = b.models[ct.model];
  harness::ComputeOp op(ops, m, ct.op);
  op.warm_up(kComputeWarmup);
  const double one_us = b.job.aggregate(op.time(1).us.front(), harness::RankAggregate::max);
  const int reps = static_cast<int>(std::clamp(std::ceil(kComputeWindowUs / std::max(one_us, 1.0)), 1.0, 1000.0));
  b.job.barrier();  // every rank computes at once, as in a step
  const harness::OpTimes t = op.time(kComputeIters, reps);
  const double time_us = b.job.aggregate(harness::median(t.us), harness::RankAggregate::mean);
  b.record(compute_point(ct, m, b.cluster, t.traffic.read + t.traffic.written, time_us), ct.weight,
           "compute " + m.name + " " + ct.op.name + " " + workload::to_string(ct.op.phase) + " " +
               harness::shape_text(ct.op));
}

// The overlap slowdown, as the cost model's overlap term has it (terms::overlap_time: comm and
// compute together take max(comm, compute) + slowdown·min(comm, compute)): an 8 MiB all-reduce
// on the cross-building groups alone (C), the largest GEMM of the first model repeated for about
// as long alone (A), and the all-reduce posted before the same GEMMs and tested between them as a
// step's executor does, then waited for (W): slowdown = (W − max(A, C)) / min(A, C). It is 0 when
// the transfer hides entirely and the GEMMs run at full speed, 1 when nothing overlaps (an MPI
// library that moves a message only inside MPI calls), and above where both slow each other.
void measure_overlap(const ComputeBench& b, harness::ComputeDevice& ops, const OverlapTasks& overlap,
                     const coll::GroupSet& cross, const std::set<std::string>& done) {
  const Model& m = b.models[0];
  const workload::Op& big = overlap.big->op;
  harness::ComputeOp op(ops, m, big);
  coll::GroupCommunicator group = b.factory.make(cross);
  const std::size_t count = (8u << 20) / 4;
  auto send = b.device.allocate(count * 4), recv = b.device.allocate(count * 4);
  const Stream stream = b.device.compute_stream();
  auto t0 = b.device.make_event(true), t1 = b.device.make_event(true);
  auto all_reduce = [&] {
    return group.comm->all_reduce(send->data(), recv->data(), count, DType::fp32, coll::Mode::async);
  };
  // Times `body` on every rank at once: the mean over ranks.
  auto timed = [&](const auto& body) {
    b.job.barrier();
    t0->record(stream);
    body();
    t1->record(stream);
    t1->synchronize();
    return b.job.aggregate(t1->elapsed_us(*t0), harness::RankAggregate::mean);
  };
  all_reduce().wait();  // warm the path
  const double one_us = timed([&] { op.run(); });
  for (const std::string& key : overlap.keys) {
    if (done.count(key)) continue;
    b.watchdog.progress(key);
    const double comm = timed([&] { all_reduce().wait(); });
    // As many GEMMs as take about the all-reduce's time: the same count on every rank, as
    // timed() gives every rank the same mean.
    const int reps = static_cast<int>(std::clamp(std::round(comm / std::max(one_us, 1.0)), 1.0, 1000.0));
    const double alone = timed([&] {
      for (int i = 0; i < reps; ++i) op.run();
    });
    const double together = timed([&] {
      coll::Handle h = all_reduce();
      for (int i = 0; i < reps; ++i) {
        h.test();
        op.run();
      }
      h.wait();
    });
    const json p = {{"key", key},
                    {"kind", "overlap"},
                    {"model", m.name},
                    {"op", big.name},
                    {"shape", harness::shape_text(big)},
                    {"repetitions", reps},
                    {"alone_us", alone},
                    {"comm_us", comm},
                    {"time_us", together},
                    {"collective", "all_reduce 8 MiB cross_building"}};
    b.record(p, kOverlapWeight, "overlap " + big.name + " x" + std::to_string(reps) + " with an all-reduce in flight");
  }
  group.comm.reset();
}

}  // namespace

std::vector<ComputeTask> compute_tasks(const Cluster& c, const std::vector<Model>& models, std::int64_t world) {
  std::vector<ComputeTask> out;
  std::set<std::string> seen;
  for (std::size_t mi = 0; mi < models.size(); ++mi) {
    const Model& m = models[mi];
    const double peak = c.device.peak_tflops_for(m.dtype) * 1e12, hbm = c.device.hbm_bandwidth_gbps * 1e9;
    for (std::int64_t tp : {1, 2, 4, 8}) {
      if (tp > c.devices_per_node || world % tp != 0) continue;
      for (std::int64_t mbs : {1, 2}) {
        Layout l;
        l.tensor_model_parallel_size = tp;
        l.micro_batch_size = mbs;
        l.sequence_parallel = tp > 1;
        try {
          validate_layout(l, m, c, "calibrate");
        } catch (const std::exception&) {
          continue;  // not a layout of this model on this cluster
        }
        for (const workload::Op& op : harness::layer_slice_ops(workload::build(c, m, l, 0), m)) {
          const std::string key =
              "compute/" + m.name + "/" + op.name + "/" + workload::to_string(op.phase) + "/" + harness::shape_text(op);
          if (!seen.insert(key).second) continue;
          const double t = std::max(
              {peak > 0 ? op.flops / peak : 0.0, hbm > 0 ? (op.bytes_read + op.bytes_written) / hbm : 0.0, 1e-4});
          out.push_back({key, mi, op, kComputeIters * std::max(t, kComputeWindowUs * 1e-6) + (kComputeWarmup + 2) * t});
        }
      }
    }
  }
  return out;
}

OverlapTasks overlap_tasks(const std::vector<ComputeTask>& compute, const std::vector<Model>& models,
                           bool cross_building) {
  OverlapTasks o;
  for (const ComputeTask& ct : compute)
    if (ct.model == 0 && ct.op.compute == workload::ComputeKind::gemm && (!o.big || ct.op.flops > o.big->op.flops))
      o.big = &ct;
  if (!o.big || !cross_building) return {};
  for (int rep = 0; rep < kOverlapRepetitions; ++rep)
    o.keys.push_back("overlap/" + models[0].name + "/" + o.big->op.name + "/" + std::to_string(rep));
  return o;
}

void measure_compute(const ComputeBench& b, const std::vector<ComputeTask>& tasks, const OverlapTasks& overlap,
                     const coll::GroupSet* cross, const std::set<std::string>& done) {
  const bool any = std::any_of(tasks.begin(), tasks.end(), [&](const ComputeTask& t) { return !done.count(t.key); });
  if (!any && !overlap.big) return;
  harness::ComputeDevice ops(b.device);
  for (const ComputeTask& ct : tasks) {
    if (done.count(ct.key)) continue;
    b.watchdog.progress(ct.key);
    if (b.cluster.paced())
      measure_paced(b, ops, ct);
    else
      measure_one(b, ops, ct);
  }
  if (overlap.big && cross) measure_overlap(b, ops, overlap, *cross, done);
}

#else  // without the layer ops (no OpenBLAS): no compute points

std::vector<ComputeTask> compute_tasks(const Cluster&, const std::vector<Model>&, std::int64_t) {
  throw UsageError("calibrate --model: this sax was built without OpenBLAS (the CPU layer ops)");
}
OverlapTasks overlap_tasks(const std::vector<ComputeTask>&, const std::vector<Model>&, bool) { return {}; }
void measure_compute(const ComputeBench&, const std::vector<ComputeTask>&, const OverlapTasks&, const coll::GroupSet*,
                     const std::set<std::string>&) {}

#endif

}  // namespace sax::calibration
