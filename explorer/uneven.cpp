#include "explorer/uneven.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

#include "explorer/hetero.hpp"
#include "spec/error.hpp"
#include "spec/groups.hpp"
#include "workload/device_time.hpp"

namespace sax::explorer {

namespace {

// Each DP rank's scales: per (micro-batch, virtual stage) its compute ops' device time at their
// lengths on its own ranks' slowest device, over their time at the model's on the stage's slowest
// (the pace the stage's blocks are priced at): a DP rank in a slower building than the stage's
// others is priced at its own pace. The model-length times are the same for every DP rank of a
// stage: summed once.
class Scales {
 public:
  Scales(const Cluster& c, const Model& m, const Layout& l, std::int64_t microbatches)
      : c_(c), m_(m), l_(l), microbatches_(microbatches), pp_(l.pipeline_model_parallel_size) {
    const RankGrid grid(l, c);
    const auto dp = static_cast<std::size_t>(l.size(Dim::dp, c.world_size()));
    stages_.resize(static_cast<std::size_t>(pp_));
    for (Stage& st : stages_) st.own.assign(dp, -1), st.rank.assign(dp, -1);
    for (std::int64_t r = 0; r < c.world_size(); ++r) {
      Stage& st = stages_[static_cast<std::size_t>(grid.stage(r))];
      const auto d = static_cast<std::size_t>(grid.coordinate(r, GroupKind::dp));
      st.pace = slower(st.pace, grid.building(r));
      st.own[d] = slower(st.own[d], grid.building(r));
      if (st.rank[d] < 0 && grid.coordinate(r, GroupKind::tp) == 0 && grid.coordinate(r, GroupKind::cp) == 0)
        st.rank[d] = r;
    }
    for (Stage& st : stages_)
      if (st.rank.front() >= 0) st.even = sums(workload::build(c, m, l, st.rank.front()), st.pace);
  }

  MicrobatchScales of(const workload::StepInputs& in, std::int64_t d) const {
    const std::int64_t V = pp_ * l_.virtual_pipeline_model_parallel_size;
    MicrobatchScales out;
    out.block.assign(static_cast<std::size_t>(microbatches_ * V), 1.0);
    for (std::int64_t j = 0; j < microbatches_; ++j) out.transfer.push_back(in.at(d, j).tokens);
    for (std::int64_t s = 0; s < pp_; ++s) {
      const Stage& st = stages_[static_cast<std::size_t>(s)];
      const auto di = static_cast<std::size_t>(d);
      if (st.rank[di] < 0) continue;
      for (const auto& [key, t] : sums(workload::build(c_, m_, l_, st.rank[di], in), st.own[di])) {
        const auto even = st.even.find(key);
        if (even != st.even.end() && even->second > 0)
          out.block[static_cast<std::size_t>(key.first * V + key.second * pp_ + s)] = t / even->second;
      }
    }
    return out;
  }

 private:
  using Times = std::map<std::pair<std::int64_t, std::int64_t>, double>;  // (micro-batch, chunk) → s
  struct Stage {
    int pace = -1;                   // the building of the stage's slowest device
    std::vector<int> own;            // per DP rank, the building of its slowest device here
    std::vector<std::int64_t> rank;  // per DP rank, its rank here with TP and CP coordinate 0
    Times even;                      // the blocks' compute at the model's length, at the pace
  };
  // The slower of two buildings' devices for the model's dtype (a < 0: none yet).
  int slower(int a, int b) const {
    return a < 0 || c_.device_of(b).peak_tflops_for(m_.dtype) < c_.device_of(a).peak_tflops_for(m_.dtype) ? b : a;
  }
  Times sums(const workload::Workload& w, int building) const {
    const workload::DeviceSpeed speed = workload::DeviceSpeed::of(c_.device_of(building), c_.backend, m_.dtype);
    Times out;
    for (const workload::Op& op : w.ops)
      if (op.kind == workload::OpKind::compute && op.microbatch >= 0)
        out[{op.microbatch, op.chunk}] += workload::op_time(speed, op);
    return out;
  }
  const Cluster& c_;
  const Model& m_;
  const Layout& l_;
  std::int64_t microbatches_, pp_;
  std::vector<Stage> stages_;
};

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
  const Scales scales(cluster, model, layout, f.even.num_microbatches);
  for (std::int64_t d = 0; d < inputs.dp; ++d) {
    Replay r = replay(costs, cand, scales.of(inputs, d));
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
