// Spread of per-iteration samples (p50, p99, CV) and the rank test `sax regress` uses.
#pragma once

#include <vector>

namespace sax::harness {

// q in [0, 1]; linear interpolation between order statistics (numpy's default).
double percentile(std::vector<double> xs, double q);
double median(std::vector<double> xs);
double mean(const std::vector<double>& xs);
// Coefficient of variation: sample standard deviation / mean (0 for fewer than 2 samples).
double cv(const std::vector<double>& xs);

struct MannWhitney {
  double u = 0;       // U statistic of x
  double z = 0;       // normal approximation, tie-corrected, with continuity correction
  double p_less = 1;  // one-sided p-value for "x is stochastically smaller than y"
};
MannWhitney mann_whitney(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace sax::harness
