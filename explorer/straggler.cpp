#include "explorer/straggler.hpp"

#include <algorithm>
#include <cstdlib>
#include <utility>

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
  const std::vector<Ranked>& best = research.ranking->result.top;
  const double searched = best.empty() ? first.slowed_s : best.front().prediction.step_time_s;
  if (first.moved_s < first.slowed_s && first.moved_s <= searched) return Mitigation::move_boundaries;
  return searched < first.slowed_s ? Mitigation::research : Mitigation::none;
}

double StragglerWhatIf::recommended_s() const {
  switch (recommended()) {
    case Mitigation::move_boundaries:
      return layouts.front().moved_s;
    case Mitigation::research:
      return research.ranking->result.top.front().prediction.step_time_s;
    case Mitigation::none:
      break;
  }
  return layouts.empty() ? 0.0 : layouts.front().slowed_s;
}

StragglerWhatIf straggler_what_if(const ExploreRequest& q, const Exploration& x, const Straggler& s,
                                  std::size_t count) {
  StragglerWhatIf w;
  w.straggler = s;
  w.cluster = slowed(q.cluster, s);
  const std::vector<Ranked>& top = x.ranking->result.top;
  for (std::size_t i = 0; i < std::min(count, top.size()); ++i) {
    const Layout l = top[i].candidate.to_layout(q.cluster);
    StragglerLayout y;
    y.index = i;
    y.base_s = forecast(q.cluster, q.model, l, q.cost, true)->predicted.step_time_s;
    const std::unique_ptr<Forecast> f = forecast(w.cluster, q.model, l, q.cost, true);
    y.slowed_s = f->predicted.step_time_s;
    y.moved_s =
        std::min(y.slowed_s, f->balanced.prediction.step_time_s > 0 ? f->balanced.prediction.step_time_s : y.slowed_s);
    y.moved = y.moved_s < y.slowed_s ? f->balanced_candidate.to_layout(w.cluster) : l;
    w.layouts.push_back(std::move(y));
  }
  ExploreRequest again{w.cluster, q.model,          q.cost,       1,           q.replay_top,
                       q.threads, q.max_candidates, std::nullopt, q.framework, q.technology};
  w.research = explore(again);
  return w;
}

}  // namespace sax::explorer
