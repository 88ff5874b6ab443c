// `sax regress`: is the current `bench coll` run slower than the baseline? Per (op, group, dtype,
// bytes, ranks, in place) the per-iteration samples (times_us) become busbw samples; a regression is
// flagged only when both
//   - the median busbw fell by more than the tolerance (an effect big enough to matter), and
//   - a one-sided Mann-Whitney U test says the current run's block medians rank lower than the
//     baseline's with p < alpha (the drop is not noise).
// Block medians (the samples cut, in time order, into `blocks` consecutive blocks), not single
// iterations, are the test's units: on a shared machine consecutive iterations are correlated
// (the scheduler keeps ranks in one arrangement for tens of milliseconds), and a test that took
// them as independent would call such drift significant.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sax::harness {

struct RegressOptions {
  double tolerance = 0.05;  // a fraction: 0.05 = 5 %
  double alpha = 0.01;
  int blocks = 50;  // fewer samples than 2 × blocks: every sample is its own block
};

// Medians of `blocks` consecutive blocks of `samples` (the remainder joins the last block).
std::vector<double> block_medians(const std::vector<double>& samples, int blocks);

// "5%" → 0.05, "0.05" → 0.05; anything else (or outside (0, 1)) is a UsageError.
double parse_tolerance(const std::string& text);

struct SampleComparison {
  double base_median = 0, current_median = 0;
  double change = 0;    // current / base - 1 (of the medians)
  double p_slower = 1;  // p-value of "current is lower than base"
  double p_faster = 1;
  bool regression = false, improvement = false;
  // The smallest p-value the test can give with these sample counts (1 / C(n+m, n)): above
  // alpha, no difference however large can be called significant.
  double min_p = 0;
  // The test's units on each side: block medians, or the samples themselves when too few.
  std::size_t base_units = 0, current_units = 0;
};
// Samples are busbw (higher is better).
SampleComparison compare_samples(const std::vector<double>& base_busbw, const std::vector<double>& current_busbw,
                                 const RegressOptions& options);

struct RegressRow {
  std::string op, group, dtype;
  std::uint64_t bytes = 0;
  int ranks = 0;
  bool in_place = false;
  bool missing = false;  // in the baseline but not in the current run
  SampleComparison cmp;
};

struct RegressReport {
  std::vector<RegressRow> rows;
  int regressions = 0;
  int compared = 0;      // rows present in both runs
  int underpowered = 0;  // compared rows with too few samples to ever flag (min_p >= alpha)
  // What the two runs ran on, where it differs ("cluster: a.json (fnv1a64:…) against b.json
  // (…); emulation: netns against none"): a cause of a change that is not the code's. Empty when
  // they agree or do not say.
  std::string differences;
};

// Reads two `bench coll` JSON documents; a malformed one is an InputError naming its file. Rows
// are matched on (op, group, dtype, bytes, ranks, in place; broadcast is always in place). Two
// files whose times were aggregated over ranks differently (config.average; a version-1 file
// took the slowest rank, "max") or, on CUDA, timed differently (batched, -z 1 blocking, -G
// graph; a version-1 CUDA file was blocking) are a UsageError: like is compared with like.
RegressReport compare_runs(const nlohmann::json& baseline, const std::string& baseline_file,
                           const nlohmann::json& current, const std::string& current_file,
                           const RegressOptions& options);

std::string regress_table(const RegressReport& report, const RegressOptions& options);

}  // namespace sax::harness
