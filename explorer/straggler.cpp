#include "explorer/straggler.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "explorer/uneven.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"

namespace sax::explorer {

Straggler parse_straggler(const std::string& text, const Cluster& cluster) {
  const std::size_t colon = text.rfind(':');
  const std::string expected =
      "--straggler: expected BUILDING:FACTOR (a building's name or index, a factor >= 1 "
      "and <= 1000), got \"" +
      safe_text(text) + "\"";
  if (colon == std::string::npos || colon == 0) throw UsageError(expected);
  Straggler s;
  s.text = text;
  const std::string name = text.substr(0, colon), factor = text.substr(colon + 1);
  char* end = nullptr;
  s.factor = std::strtod(factor.c_str(), &end);
  if (factor.empty() || *end != '\0' || !(s.factor >= 1 && s.factor <= 1e3)) throw UsageError(expected);
  s.building = -1;
  for (std::size_t b = 0; b < cluster.buildings.size(); ++b)
    if (cluster.buildings[b].name == name || std::to_string(b) == name) s.building = static_cast<int>(b);
  if (s.building < 0) {
    std::string known;
    for (const Building& b : cluster.buildings) known += (known.empty() ? "" : ", ") + b.name;
    throw UsageError("--straggler: expected one of the cluster's buildings (" + known + ", or its index), got \"" +
                     safe_text(name) + "\"");
  }
  return s;
}

Cluster slowed(const Cluster& cluster, const Straggler& s) {
  Cluster c = cluster;
  c.buildings[static_cast<std::size_t>(s.building)].compute_slowdown *= s.factor;
  return c;
}

StragglerWhatIf::Mitigation StragglerWhatIf::recommended() const {
  if (layouts.empty()) return Mitigation::none;
  const StragglerLayout& first = layouts.front();
  Mitigation pick = Mitigation::none;
  double best = first.slowed_s;
  for (const auto& [m, t] :
       {std::pair{Mitigation::move_boundaries, first.moved_s}, std::pair{Mitigation::rebalance, first.rebalanced_s},
        std::pair{Mitigation::research, research_s}})
    if (t > 0 && t < best) pick = m, best = t;
  return pick;
}

double StragglerWhatIf::recommended_s() const {
  if (layouts.empty()) return 0.0;
  switch (recommended()) {
    case Mitigation::move_boundaries:
      return layouts.front().moved_s;
    case Mitigation::rebalance:
      return layouts.front().rebalanced_s;
    case Mitigation::research:
      return research_s;
    case Mitigation::none:
      break;
  }
  return layouts.front().slowed_s;
}

namespace {

// A layout's step on `cluster` with every sequence at the model's length (the replay, stage by
// stage where buildings differ), or under uneven inputs placed on `placed_on` (the cluster the
// balancer knows of).
struct Pricer {
  const ExploreRequest& q;
  const LengthSpec& lengths;
  double operator()(const Cluster& cluster, const CostModel& cost, const Layout& l, const Cluster& placed_on,
                    workload::Balance b) const {
    if (!lengths.uneven()) return forecast(cluster, q.model, l, q.cost, true)->predicted.step_time_s;
    const workload::StepInputs in = workload::place(placed_on, q.model, l, lengths, b);
    return forecast_uneven(cost, q.cost, cluster, q.model, l, in).step.step_time_s;
  }
};

}  // namespace

StragglerWhatIf straggler_what_if(const ExploreRequest& q, const Exploration& x, const Straggler& s, std::size_t count,
                                  const LengthSpec& lengths, workload::Balance balance) {
  StragglerWhatIf w;
  w.straggler = s;
  w.cluster = slowed(q.cluster, s);
  w.uneven = lengths.uneven();
  ExploreRequest again{w.cluster, q.model,          q.cost,       1,           q.replay_top,
                       q.threads, q.max_candidates, std::nullopt, q.framework, q.technology};
  w.research = explore(again);
  const Pricer price{q, lengths};
  const CostModel &base_cost = *x.ranking->cost, &slow_cost = *w.research.ranking->cost;
  const std::vector<Ranked>& top = x.ranking->result.top;
  for (std::size_t i = 0; i < std::min(count, top.size()); ++i) {
    if (w.uneven && !replayable(base_cost, top[i].candidate)) continue;
    const Layout l = top[i].candidate.to_layout(q.cluster);
    StragglerLayout y;
    y.index = i;
    y.base_s = price(q.cluster, base_cost, l, q.cluster, balance);
    // The slowed layout's forecast gives its moved boundaries, and with every sequence at the
    // model's length its step too.
    const std::unique_ptr<Forecast> f = forecast(w.cluster, q.model, l, q.cost, true);
    y.slowed_s = w.uneven ? price(w.cluster, slow_cost, l, q.cluster, balance) : f->predicted.step_time_s;
    y.moved = l;
    y.moved_s = y.slowed_s;
    if (f->balanced.prediction.step_time_s > 0 &&
        f->balanced_candidate.pipeline_layout != top[i].candidate.pipeline_layout) {
      const Layout moved = f->balanced_candidate.to_layout(w.cluster);
      const double t = price(w.cluster, slow_cost, moved, w.cluster, balance);
      if (t < y.slowed_s) y.moved = moved, y.moved_s = t;
    }
    if (w.uneven) y.rebalanced_s = price(w.cluster, slow_cost, l, w.cluster, workload::Balance::balanced);
    w.layouts.push_back(std::move(y));
  }
  const std::vector<Ranked>& best = w.research.ranking->result.top;
  if (!best.empty())
    w.research_s = w.uneven && replayable(slow_cost, best.front().candidate)
                       ? price(w.cluster, slow_cost, best.front().candidate.to_layout(w.cluster), w.cluster,
                               workload::Balance::balanced)
                       : best.front().prediction.step_time_s;
  return w;
}

}  // namespace sax::explorer
