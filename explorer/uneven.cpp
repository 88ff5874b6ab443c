#include "explorer/uneven.hpp"

#include <map>
#include <memory>
#include <utility>

#include "explorer/hetero.hpp"
#include "spec/error.hpp"
#include "spec/groups.hpp"
#include "workload/device_time.hpp"

namespace sax::explorer {

namespace {

// DP rank d's scales: per (micro-batch, virtual stage) its compute ops' device time at their
// lengths over at the model's, on the rank of stage s with TP and CP coordinate 0.
MicrobatchScales scales_of(const Cluster& c, const Model& m, const Layout& l, const workload::StepInputs& in,
                           std::int64_t d, std::int64_t microbatches) {
  const RankGrid grid(l, c);
  const std::int64_t pp = l.pipeline_model_parallel_size, V = pp * l.virtual_pipeline_model_parallel_size;
  MicrobatchScales out;
  out.block.assign(static_cast<std::size_t>(microbatches * V), 1.0);
  for (std::int64_t j = 0; j < microbatches; ++j) out.transfer.push_back(in.at(d, j).tokens);
  for (std::int64_t s = 0; s < pp; ++s) {
    std::int64_t rank = -1;
    for (std::int64_t r = 0; r < c.world_size() && rank < 0; ++r)
      if (grid.stage(r) == s && grid.coordinate(r, GroupKind::dp) == d && grid.coordinate(r, GroupKind::tp) == 0 &&
          grid.coordinate(r, GroupKind::cp) == 0)
        rank = r;
    if (rank < 0) continue;
    const workload::DeviceSpeed speed =
        workload::DeviceSpeed::of(c.device_of(c.place(rank).building), c.backend, m.dtype);
    const workload::Workload even = workload::build(c, m, l, rank), mine = workload::build(c, m, l, rank, in);
    std::map<std::pair<std::int64_t, std::int64_t>, std::pair<double, double>> sums;  // (mb, chunk) → (even, mine)
    for (std::size_t i = 0; i < even.ops.size() && i < mine.ops.size(); ++i) {
      const workload::Op &e = even.ops[i], &u = mine.ops[i];
      if (e.kind != workload::OpKind::compute || e.microbatch < 0) continue;
      auto& [full, own] = sums[{e.microbatch, e.chunk}];
      full += workload::op_time(speed, e);
      own += workload::op_time(speed, u);
    }
    for (const auto& [key, t] : sums)
      if (t.first > 0) out.block[static_cast<std::size_t>(key.first * V + key.second * pp + s)] = t.second / t.first;
  }
  return out;
}

}  // namespace

UnevenForecast forecast_uneven(const CostModel& cost, const CostSource& source, const Cluster& cluster,
                               const Model& model, const Layout& layout, const workload::StepInputs& inputs) {
  const Candidate cand = Candidate::of(layout, cluster);
  if (!replayable(cost, cand))
    throw UsageError("--lengths: the layout has more blocks than the replay runs; uneven inputs are priced by it");
  // Buildings that differ: each stage on its own view, as predict's stages are priced.
  std::unique_ptr<HeteroModel> hetero;
  std::vector<const CostModel*> costs(static_cast<std::size_t>(cand.pp), &cost);
  if (!cluster.uniform()) {
    hetero = std::make_unique<HeteroModel>(cluster, model, source);
    costs = hetero->stage_costs(cand);
  }
  UnevenForecast f;
  f.even = replay(costs, cand);
  for (std::int64_t d = 0; d < inputs.dp; ++d) {
    Replay r = replay(costs, cand, scales_of(cluster, model, layout, inputs, d, f.even.num_microbatches));
    f.dp_step_s.push_back(r.step_time_s);
    if (d == 0 || r.step_time_s > f.step.step_time_s) f.step = std::move(r), f.slowest_dp = d;
  }
  return f;
}

}  // namespace sax::explorer
