#include "explorer/validate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace sax::explorer::validation {

std::vector<std::size_t> pick(std::size_t ranked, std::size_t top, std::size_t spread) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < std::min(top, ranked); ++i) out.push_back(i);
  if (ranked <= top || spread == 0) return out;
  // The rest, [top, ranked), at spread evenly spaced positions ending on the last.
  const std::size_t rest = ranked - top;
  for (std::size_t j = 1; j <= spread; ++j) {
    const auto at = top + static_cast<std::size_t>(std::llround(static_cast<double>(rest - 1) * static_cast<double>(j) /
                                                                static_cast<double>(spread)));
    if (std::find(out.begin(), out.end(), at) == out.end()) out.push_back(at);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Parts predicted_parts(const Prediction& p) {
  const Breakdown& b = p.breakdown;
  auto comm = [&](Dim d) { return b.exposed_comm_s[static_cast<int>(d)]; };
  return {b.compute_s,  // recompute included already
          b.optimizer_s, comm(Dim::tp), comm(Dim::cp), comm(Dim::ep), comm(Dim::dp), comm(Dim::pp), b.bubble_s};
}

std::size_t worst_part(const Parts& predicted, const Parts& measured) {
  std::size_t worst = 0;
  for (std::size_t i = 1; i < kParts.size(); ++i)
    if (std::abs(predicted[i] - measured[i]) > std::abs(predicted[worst] - measured[worst])) worst = i;
  return worst;
}

double error_pct(const Outcome& o) { return 100 * (o.predicted_s - o.measured_s) / o.measured_s; }

double mape_pct(const std::vector<Outcome>& outcomes) {
  if (outcomes.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (const Outcome& o : outcomes) sum += std::abs(error_pct(o));
  return sum / static_cast<double>(outcomes.size());
}

double kendall_tau(const std::vector<Outcome>& outcomes) {
  // τ-b = (concordant − discordant) / √((pairs − ties in predicted)(pairs − ties in measured)).
  double concordant = 0, discordant = 0, tied_predicted = 0, tied_measured = 0, pairs = 0;
  for (std::size_t i = 0; i < outcomes.size(); ++i)
    for (std::size_t j = i + 1; j < outcomes.size(); ++j) {
      pairs += 1;
      const double p = outcomes[i].predicted_s - outcomes[j].predicted_s;
      const double m = outcomes[i].measured_s - outcomes[j].measured_s;
      if (p == 0) tied_predicted += 1;
      if (m == 0) tied_measured += 1;
      if (p == 0 || m == 0) continue;
      ((p > 0) == (m > 0) ? concordant : discordant) += 1;
    }
  const double denominator = std::sqrt((pairs - tied_predicted) * (pairs - tied_measured));
  if (denominator == 0) return std::numeric_limits<double>::quiet_NaN();
  return (concordant - discordant) / denominator;
}

std::size_t predicted_fastest(const std::vector<Outcome>& outcomes) {
  return static_cast<std::size_t>(
      std::min_element(outcomes.begin(), outcomes.end(),
                       [](const Outcome& a, const Outcome& b) { return a.predicted_s < b.predicted_s; }) -
      outcomes.begin());
}

std::size_t measured_fastest(const std::vector<Outcome>& outcomes) {
  return static_cast<std::size_t>(
      std::min_element(outcomes.begin(), outcomes.end(),
                       [](const Outcome& a, const Outcome& b) { return a.measured_s < b.measured_s; }) -
      outcomes.begin());
}

TermFit term_fit(const std::vector<Outcome>& term, const std::vector<double>& step_s) {
  TermFit f;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  f.mape_pct = f.bias_pct = f.worst_pct = nan;
  double sum = 0, signed_sum = 0;
  for (std::size_t i = 0; i < term.size() && i < step_s.size(); ++i) {
    if (!(term[i].measured_s >= kTermFloor * step_s[i]) || !(term[i].measured_s > 0)) continue;
    const double e = error_pct(term[i]);
    sum += std::abs(e), signed_sum += e, ++f.layouts;
    if (f.layouts == 1 || std::abs(e) > std::abs(f.worst_pct)) f.worst_pct = e, f.worst = i;
  }
  if (f.layouts > 0)
    f.mape_pct = sum / static_cast<double>(f.layouts), f.bias_pct = signed_sum / static_cast<double>(f.layouts);
  return f;
}

double top1_regret_pct(const std::vector<Outcome>& outcomes) {
  if (outcomes.empty()) return std::numeric_limits<double>::quiet_NaN();
  return 100 * (outcomes[predicted_fastest(outcomes)].measured_s / outcomes[measured_fastest(outcomes)].measured_s - 1);
}

}  // namespace sax::explorer::validation
