// Closed forms of one training step, per rank of a pipeline stage, following workload/README.md
// exactly: what sax::workload::build lists, counted without listing it. The cost model prices
// these counts (cost_model.hpp) and tests/explorer checks them against the explicit workload, so
// the chain workload → closed forms → cost model has one set of message counts.
#pragma once

#include <array>
#include <cstdint>

#include "explorer/candidate.hpp"
#include "explorer/placement.hpp"
#include "explorer/quantities.hpp"
#include "spec/cluster.hpp"
#include "spec/collective.hpp"
#include "spec/groups.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

// `count` messages of `op` in groups of kind `group`, for dimension `dim`; `bytes` summed over
// them (each message's bytes as nccl-tests' "size", spec/collective.hpp).
struct Traffic {
  Dim dim = Dim::tp;
  GroupKind group = GroupKind::tp;
  CollOp op = CollOp::all_reduce;
  double count = 0;
  double bytes = 0;
};

// A few kinds of traffic without allocating (the cost model's hot path).
template <int N>
struct TrafficList {
  std::array<Traffic, N> items{};
  int size = 0;
  void add(const Traffic& t) {
    if (t.count > 0) items[static_cast<std::size_t>(size++)] = t;
  }
  const Traffic* begin() const { return items.data(); }
  const Traffic* end() const { return items.data() + size; }
};

// What one rank of a pipeline stage sends in a step, grouped as the cost model exposes it.
struct StageTraffic {
  // Per micro-batch, on the critical path: TP's collectives (each op once), EP's all-to-alls, PP's
  // sends (recv mirrors a peer's send and is not counted).
  TrafficList<3> tp;
  Traffic ep, pp;
  // CP's KV ring of one layer pass (cp−1 send_recv steps), forward and backward: each runs behind
  // that pass's attention core. Per micro-batch: `cp_forward_passes` forward passes (recomputed
  // ones included) and `cp_backward_passes` backward passes.
  Traffic cp_forward, cp_backward;
  double cp_forward_passes = 0, cp_backward_passes = 0;
  // Per step, after the pipeline: the DP gradient sync, the distributed optimizer's parameter
  // all-gather (workload/dp_sync.hpp), and the tied embedding's gradient all-reduce.
  TrafficList<6> dp_grad, dp_gather;
  Traffic embedding;
};

// The traffic of one rank of stage `st` for candidate `cand` (micro-batch quantities `x`, groups
// placed as `placement`).
StageTraffic stage_traffic(const ModelConsts& c, const Candidate& cand, const StageLayers& st, const MicroShape& x,
                           const Placement& placement);

struct StepTotals {
  double forward_flops = 0, backward_flops = 0, recompute_flops = 0;  // compute ops, summed over the step
  std::array<double, 5> sent_bytes{};      // per Dim (static_cast<int>(sax::Dim)); recv excluded
  std::array<std::int64_t, 5> messages{};  // per Dim; recv excluded
};

// One rank of pipeline stage `stage` (every rank of a stage has the same totals). The layout
// must be valid for the model and cluster (validate_layout).
StepTotals step_totals(const Cluster& cluster, const Model& model, const Layout& layout, std::int64_t stage);

// Pipeline bubble as a fraction of the ideal (bubble-free) compute time, by schedule:
// GPipe and 1F1B (p−1)/m, interleaved (p−1)/(v·m), zero bubble (ZB-H1, Qi et al. 2023,
// with forward, backward-input and backward-weight of equal length) max(p−1, 2p−1−m)/(3m),
// i.e. (p−1)/(3m) once m ≥ p. Each is the makespan of workload/'s block order (tested).
double bubble_fraction(const Layout& layout, std::int64_t num_microbatches);
double bubble_fraction(PipelineSchedule schedule, std::int64_t pp, std::int64_t vpp, std::int64_t num_microbatches);

}  // namespace sax::explorer
