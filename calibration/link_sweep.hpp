// The calibration sweep's link points, through the `bench coll` engine (harness/coll_engine.hpp):
// every op the cost model prices (kPricedCollOps) at log-spaced sizes on the groups of each link
// class the cluster has: `intra_building` (ranks of one building: link class intra_node where a
// building is one node) and `cross_building` (one rank per building), every group of a kind at
// once as a training step runs them; then, at the largest sizes, one cross-building group alone
// while the others wait without polling, for the boundary's sharing.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "calibration/points_file.hpp"
#include "calibration/sweep.hpp"
#include "harness/coll_plan.hpp"
#include "harness/job.hpp"
#include "harness/watchdog.hpp"

namespace sax::calibration {

// The group kinds a sweep measures, each reaching the link class the cluster says.
inline constexpr const char* kKinds[] = {"cross_building", "intra_building", "intra_node"};
// Sizes (the largest ones) measured with one cross-building group alone as well, and the op.
inline constexpr std::size_t kSharingSizes = 3;
inline constexpr CollOp kSharingOp = CollOp::all_reduce;

// The link sweep as checked (bench coll's own checks): the ops and sizes, and per group kind the
// cluster has with groups of two or more ranks, its groups and bench coll's plan for them.
struct LinkSweep {
  std::vector<CollOp> ops;
  std::vector<std::uint64_t> sizes;
  std::map<std::string, coll::GroupSet> kinds;
  std::map<std::string, harness::CollBenchPlan> plans;
  Backend backend = Backend::cpu;
  int iters = 0, warmup = 0;
};

// UsageError (or InputError) for what the sweep cannot measure. Every rank, inside Job::agree.
LinkSweep plan_link_sweep(const harness::Job& job, const SweepArgs& args, const Cluster& cluster);

// On a paced cluster, per group kind, the wait of a blocking call as a paced step makes it
// (harness/coll_engine.hpp time_wait_path): kWaitIters small all-reduces, each after sleeping
// kWaitGapUs from the last, as a paced op's deadline holds a rank; what the members' arrivals
// differ by is the cost model's idle per blocking call (CostParams::call_skew_s).
inline constexpr int kWaitIters = 100;
inline constexpr double kWaitGapUs = 1000;
inline constexpr std::uint64_t kWaitBytes = 4096;

// One point to measure: a group kind, an op, a size, alone or with every group of the kind; or
// (`wait`) the kind's wait path.
struct LinkTask {
  std::string kind;
  CollOp op = CollOp::all_reduce;
  std::uint64_t bytes = 0;
  bool together = false;
  std::int64_t iters = 0;  // timed iterations: -n, more where one op is short (kMinPointSeconds)
  double weight = 0;       // the datasheet's time for it (s), for the ETA
  bool wait = false;
  std::string key() const;
};

// A point's timed iterations last at least this long by the datasheet's time per op (at most
// kMaxItersFactor × -n): a message of a few KiB takes about a latency, so 20 of them are a few ms
// of a noisy host, and a fit of a small-message regime then measures the noise (-n 20 on local-2bld
// gave one regime of 4 to 32 KiB an R² of -0.40, -n 60 0.990 with every regime at 0.989 or more).
inline constexpr double kMinPointSeconds = 0.1;
inline constexpr std::int64_t kMaxItersFactor = 10;

// In order: per kind (cross-building first: the map's order), op and size, every group of the kind
// at once; then one cross-building group alone at the largest sizes.
std::vector<LinkTask> link_tasks(const LinkSweep& sweep, const Cluster& cluster);

// Measures the tasks whose key is not in `done`, on every rank, each recorded as measured.
void measure_links(const LinkSweep& sweep, const std::vector<LinkTask>& tasks, const std::set<std::string>& done,
                   harness::Job& job, kernels::Device& device, coll::CommunicatorFactory& factory,
                   harness::Watchdog& watchdog, const RecordPoint& record);

}  // namespace sax::calibration
