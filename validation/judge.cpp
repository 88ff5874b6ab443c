#include "validation/judge.hpp"

namespace sax::validation {

Judgement judge(const std::vector<Trial>& trials) {
  Judgement j;
  j.worst.assign(trials.size(), 0);
  std::vector<metrics::Outcome> outcomes;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const Trial& t = trials[i];
    if (!t.ran()) {
      ++j.failed;
      continue;
    }
    outcomes.push_back({t.predicted.step_time_s, t.median_s});
    j.measured.push_back(i);
    j.worst[i] = metrics::worst_part(t.predicted_parts, t.measured);
  }
  j.mape_pct = metrics::mape_pct(outcomes);
  j.kendall_tau = metrics::kendall_tau(outcomes);
  j.top1_regret_pct = metrics::top1_regret_pct(outcomes);
  if (!outcomes.empty()) {
    j.pick = j.measured[metrics::predicted_fastest(outcomes)];
    j.best = j.measured[metrics::measured_fastest(outcomes)];
  }
  return j;
}

}  // namespace sax::validation
