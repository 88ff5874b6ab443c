#include "validation/judge.hpp"

#include <cmath>

namespace sax::validation {

Judgement judge(const std::vector<Trial>& trials) {
  Judgement j;
  j.worst.assign(trials.size(), 0);
  std::vector<metrics::Outcome> outcomes, non_compute;
  double share = 0;
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const Trial& t = trials[i];
    if (!t.ran()) {
      ++j.failed;
      continue;
    }
    j.paced = j.paced || t.pacing.has_value();
    if (!t.scored()) {
      ++j.refused;
      continue;
    }
    outcomes.push_back({t.predicted.step_time_s, t.median_s});
    non_compute.push_back({t.predicted_non_compute_s(), t.measured_non_compute_s()});
    share += t.median_s > 0 ? 100 * t.measured_non_compute_s() / t.median_s : 0.0;
    j.measured.push_back(i);
    j.worst[i] = metrics::worst_part(t.predicted_parts, t.measured);
  }
  j.mape_pct = metrics::mape_pct(outcomes);
  j.non_compute_mape_pct = metrics::mape_pct(non_compute);
  j.non_compute_mae_s = 0;
  for (const metrics::Outcome& o : non_compute)
    j.non_compute_mae_s += std::abs(o.predicted_s - o.measured_s) / static_cast<double>(non_compute.size());
  if (non_compute.empty()) j.non_compute_mae_s = std::nan("");
  j.non_compute_share_pct = outcomes.empty() ? std::nan("") : share / static_cast<double>(outcomes.size());
  for (std::size_t k = 0; k < metrics::kParts.size(); ++k) {
    std::vector<metrics::Outcome> term;
    std::vector<double> step;
    for (std::size_t i : j.measured) {
      term.push_back({trials[i].predicted_parts[k], trials[i].measured[k]});
      step.push_back(trials[i].median_s);
    }
    j.terms[k] = metrics::term_fit(term, step);
  }
  j.kendall_tau = metrics::kendall_tau(outcomes);
  // The explorer's pick is the layout it predicts fastest, whether or not it ran: a pick that
  // failed (or was not scored) has no regret, and the fastest of the others is not its stand-in.
  for (std::size_t i = 0; i < trials.size(); ++i)
    if (!j.pick || trials[i].predicted.step_time_s < trials[*j.pick].predicted.step_time_s) j.pick = i;
  j.top1_regret_pct = j.pick && trials[*j.pick].scored() ? metrics::top1_regret_pct(outcomes) : std::nan("");
  if (!outcomes.empty()) j.best = j.measured[metrics::measured_fastest(outcomes)];
  return j;
}

}  // namespace sax::validation
