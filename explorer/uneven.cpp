#include "explorer/uneven.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

#include "explorer/hetero.hpp"
#include "spec/error.hpp"
#include "spec/groups.hpp"
#include "workload/device_time.hpp"

namespace sax::explorer {

namespace {

// DP rank d's scales: per (micro-batch, virtual stage) its compute ops' device time at their
// lengths on its own ranks' slowest device, over their time at the model's on the stage's slowest
// (the pace the stage's blocks are priced at): a DP rank in a slower building than the stage's
// others is priced at its own pace.
MicrobatchScales scales_of(const Cluster& c, const Model& m, const Layout& l, const workload::StepInputs& in,
                           std::int64_t d, std::int64_t microbatches) {
  const RankGrid grid(l, c);
  const std::int64_t pp = l.pipeline_model_parallel_size, V = pp * l.virtual_pipeline_model_parallel_size;
  MicrobatchScales out;
  out.block.assign(static_cast<std::size_t>(microbatches * V), 1.0);
  for (std::int64_t j = 0; j < microbatches; ++j) out.transfer.push_back(in.at(d, j).tokens);
  // The slower of two buildings' devices for the model's dtype.
  auto slower = [&](int a, int b) {
    return a < 0 || c.device_of(b).peak_tflops_for(m.dtype) < c.device_of(a).peak_tflops_for(m.dtype) ? b : a;
  };
  for (std::int64_t s = 0; s < pp; ++s) {
    std::int64_t rank = -1;
    int pace = -1, own = -1;  // buildings
    for (std::int64_t r = 0; r < c.world_size(); ++r) {
      if (grid.stage(r) != s) continue;
      pace = slower(pace, grid.building(r));
      if (grid.coordinate(r, GroupKind::dp) != d) continue;
      own = slower(own, grid.building(r));
      if (rank < 0 && grid.coordinate(r, GroupKind::tp) == 0 && grid.coordinate(r, GroupKind::cp) == 0) rank = r;
    }
    if (rank < 0) continue;
    const workload::DeviceSpeed at_pace = workload::DeviceSpeed::of(c.device_of(pace), c.backend, m.dtype),
                                speed = workload::DeviceSpeed::of(c.device_of(own), c.backend, m.dtype);
    const workload::Workload even = workload::build(c, m, l, rank), mine = workload::build(c, m, l, rank, in);
    std::map<std::pair<std::int64_t, std::int64_t>, std::pair<double, double>> sums;  // (mb, chunk) → (even, mine)
    for (std::size_t i = 0; i < even.ops.size() && i < mine.ops.size(); ++i) {
      const workload::Op &e = even.ops[i], &u = mine.ops[i];
      if (e.kind != workload::OpKind::compute || e.microbatch < 0) continue;
      auto& [full, own] = sums[{e.microbatch, e.chunk}];
      full += workload::op_time(at_pace, e);
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
  std::vector<Replay> replicas;
  for (std::int64_t d = 0; d < inputs.dp; ++d) {
    Replay r = replay(costs, cand, scales_of(cluster, model, layout, inputs, d, f.even.num_microbatches));
    f.dp_step_s.push_back(r.step_time_s);
    if (d == 0 || r.step_time_s > f.step.step_time_s) f.step = r, f.slowest_dp = d;
    replicas.push_back(std::move(r));
  }
  // Every stage ends its step with the slowest replica's (the syncs and the next step's start
  // hold it): a rank is idle for all of it but its blocks, its transfers and its tail.
  const auto s = static_cast<std::size_t>(f.step.critical_stage);
  const double n = static_cast<double>(replicas.size());
  for (const Replay& r : replicas) {
    f.critical_idle_s.push_back(
        std::max(0.0, f.step.step_time_s - r.stages.stage_busy[s] - r.stages.stage_transfer[s] - r.stage_tail_s[s]));
    const Breakdown& b = r.breakdown;
    f.mean_rank.compute_s += b.compute_s / n;
    f.mean_rank.recompute_s += b.recompute_s / n;
    for (std::size_t i = 0; i < b.exposed_comm_s.size(); ++i) f.mean_rank.exposed_comm_s[i] += b.exposed_comm_s[i] / n;
    f.mean_rank.optimizer_s += b.optimizer_s / n;
  }
  double tokens = 0;
  for (const workload::MicrobatchWork& w : inputs.work) tokens += w.tokens;
  if (!inputs.work.empty()) f.token_share = tokens / static_cast<double>(inputs.work.size());
  f.mean_rank.bubble_s = std::max(0.0, f.step.step_time_s - f.mean_rank.total());
  return f;
}

Prediction uneven_prediction(const Prediction& closed, const UnevenForecast& f) {
  Prediction p = closed;
  const double speed = closed.step_time_s / f.step.step_time_s;
  p.step_time_s = f.step.step_time_s;
  p.tokens_per_s *= speed * f.token_share;
  p.mfu *= speed * f.token_share;
  p.breakdown = f.mean_rank;
  p.critical_stage = f.step.critical_stage;
  p.bubble_fraction = f.mean_rank.compute_s > 0 ? f.mean_rank.bubble_s / f.mean_rank.compute_s : 0.0;
  check_figures(p);
  return p;
}

double UnevenForecast::bubble_s() const {
  if (critical_idle_s.empty()) return step.breakdown.bubble_s;
  return *std::min_element(critical_idle_s.begin(), critical_idle_s.end()) + step.breakdown.bubble_s - step.bubble_s;
}

double UnevenForecast::dp_wait_mean_s() const {
  if (critical_idle_s.empty()) return 0.0;
  const double least = *std::min_element(critical_idle_s.begin(), critical_idle_s.end());
  return std::accumulate(critical_idle_s.begin(), critical_idle_s.end(), 0.0) /
             static_cast<double>(critical_idle_s.size()) -
         least;
}

std::vector<UnevenRanked> rank_uneven(const CostModel& cost, const CostSource& source, const Cluster& cluster,
                                      const Model& model, const std::vector<Ranked>& ranked, std::size_t count,
                                      const LengthSpec& lengths, const std::vector<workload::Balance>& balances) {
  std::vector<UnevenRanked> out;
  for (std::size_t i = 0; i < std::min(count, ranked.size()); ++i) {
    if (!replayable(cost, ranked[i].candidate)) continue;
    const Layout layout = ranked[i].candidate.to_layout(cluster);
    UnevenRanked u;
    u.index = i;
    for (workload::Balance b : balances) {
      UnevenChoice c;
      c.balance = b;
      const workload::StepInputs inputs = workload::place(cluster, model, layout, lengths, b, &c.placing_s);
      const UnevenForecast f = forecast_uneven(cost, source, cluster, model, layout, inputs);
      u.even_step_s = f.even.step_time_s;
      c.step_s = f.step.step_time_s + c.placing_s;
      c.imbalance_s = f.step.step_time_s - std::accumulate(f.dp_step_s.begin(), f.dp_step_s.end(), 0.0) /
                                               static_cast<double>(std::max<std::size_t>(1, f.dp_step_s.size()));
      c.bubble_s = f.bubble_s();
      c.dp_wait_s = f.dp_wait_mean_s();
      if (!u.choices.empty() && c.step_s < u.pick().step_s) u.best = u.choices.size();
      u.choices.push_back(c);
    }
    out.push_back(std::move(u));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const UnevenRanked& a, const UnevenRanked& b) { return a.pick().step_s < b.pick().step_s; });
  return out;
}

}  // namespace sax::explorer
