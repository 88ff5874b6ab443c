#include "harness/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sax::harness {

namespace {

// Orders NaN after every number and equal to itself: a strict weak order whatever the samples
// hold (std::sort with `<` over a NaN is undefined behaviour and can read out of bounds). The
// readers refuse non-finite samples; this keeps a defect elsewhere from hanging or crashing here.
bool nan_last(double a, double b) { return std::isnan(a) ? false : std::isnan(b) || a < b; }

}  // namespace

double percentile(std::vector<double> xs, double q) {
  if (xs.empty()) return 0;
  std::sort(xs.begin(), xs.end(), nan_last);
  const double pos = q * static_cast<double>(xs.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (pos - static_cast<double>(lo)) * (xs[hi] - xs[lo]);
}

double median(std::vector<double> xs) { return percentile(std::move(xs), 0.5); }

double mean(const std::vector<double>& xs) {
  return xs.empty() ? 0 : std::accumulate(xs.begin(), xs.end(), 0.0) / static_cast<double>(xs.size());
}

double cv(const std::vector<double>& xs) {
  if (xs.size() < 2) return 0;
  const double m = mean(xs);
  double ss = 0;
  for (double x : xs) ss += (x - m) * (x - m);
  return m == 0 ? 0 : std::sqrt(ss / static_cast<double>(xs.size() - 1)) / m;
}

MannWhitney mann_whitney(const std::vector<double>& x, const std::vector<double>& y) {
  MannWhitney r;
  const std::size_t n1 = x.size(), n2 = y.size();
  if (n1 == 0 || n2 == 0) return r;
  // Rank the pooled samples, ties sharing their mean rank.
  std::vector<std::pair<double, int>> all;
  all.reserve(n1 + n2);
  for (double v : x) all.emplace_back(v, 0);
  for (double v : y) all.emplace_back(v, 1);
  std::sort(all.begin(), all.end(), [](auto& a, auto& b) { return nan_last(a.first, b.first); });
  double rank_sum_x = 0, tie_term = 0;
  for (std::size_t i = 0; i < all.size();) {
    // A run of ties starts with all[i] itself: j starts past it, so the loop advances even where
    // all[i] equals nothing (NaN != NaN spun here forever).
    std::size_t j = i + 1;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double t = static_cast<double>(j - i), mean_rank = (static_cast<double>(i + j) + 1) / 2;
    for (std::size_t k = i; k < j; ++k)
      if (all[k].second == 0) rank_sum_x += mean_rank;
    tie_term += t * t * t - t;
    i = j;
  }
  const double a = static_cast<double>(n1), b = static_cast<double>(n2), n = a + b;
  r.u = rank_sum_x - a * (a + 1) / 2;
  const double mu = a * b / 2;
  const double sigma = std::sqrt(a * b / 12 * ((n + 1) - tie_term / (n * (n - 1))));
  if (sigma == 0) return r;
  // Small U means x ranks low; +0.5 is the continuity correction toward the mean.
  r.z = (r.u - mu + 0.5) / sigma;
  r.p_less = 0.5 * std::erfc(-r.z / std::sqrt(2.0));
  return r;
}

}  // namespace sax::harness
