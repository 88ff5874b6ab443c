// The calibration sweep's compute points (with --model): each op of a model's layer slice
// (harness/kernel_bench.hpp) at plausible layouts, timed on every rank at once as in a step, for
// the GEMM and attention efficiency curves and the HBM fraction memory-bound ops reach; and the
// overlap slowdown: the largest GEMM of the first model beside a cross-building all-reduce.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "calibration/points_file.hpp"
#include "harness/job.hpp"
#include "harness/watchdog.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "workload/workload.hpp"

namespace sax::calibration {

inline constexpr int kOverlapRepetitions = 3;
inline constexpr double kOverlapWeight = 0.1;  // s per overlap point, for the ETA

struct ComputeTask {
  std::string key;
  std::size_t model = 0;
  workload::Op op;
  double weight = 0;  // the datasheet's time for it (s), for the ETA
};

// TP 1, 2, 4, 8 as far as a node holds them and the world divides, micro-batches 1 and 2, no
// pipeline: the layouts whose valid shapes the sweep times; each op shape once over them. A
// UsageError where this sax was built without the layer ops.
std::vector<ComputeTask> compute_tasks(const Cluster& c, const std::vector<Model>& models, std::int64_t world);

// The overlap slowdown's points: the largest GEMM of the first model (`big`, null when there is
// none or no cross-building group) kOverlapRepetitions times.
struct OverlapTasks {
  const ComputeTask* big = nullptr;
  std::vector<std::string> keys;
};
OverlapTasks overlap_tasks(const std::vector<ComputeTask>& compute, const std::vector<Model>& models,
                           bool cross_building);

// Where the compute points are measured, and how each is recorded.
struct ComputeBench {
  harness::Job& job;
  kernels::Device& device;
  coll::CommunicatorFactory& factory;
  const Cluster& cluster;
  const std::vector<Model>& models;
  harness::Watchdog& watchdog;
  const RecordPoint& record;
};

// The compute points, then the overlap points, whose keys are not in `done`, on every rank (the
// device's layer ops made once for them, where any is left). `cross`: the cross-building groups,
// where the overlap's all-reduce runs (null when there are none).
void measure_compute(const ComputeBench& bench, const std::vector<ComputeTask>& tasks, const OverlapTasks& overlap,
                     const coll::GroupSet* cross, const std::set<std::string>& done);

}  // namespace sax::calibration
