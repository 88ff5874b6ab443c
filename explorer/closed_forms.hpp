// Closed forms of one training step, per rank of a pipeline stage, following
// workload/README.md exactly: what sax::workload::build lists, summed without listing it.
// The cost model's step time is built on the same quantities (quantities.hpp).
#pragma once

#include <array>
#include <cstdint>

#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

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
