// What the validate loop carries from phase to phase: what it was asked (Options) and, per layout,
// a Trial that choose() fills with its prediction, run_trials() with its measurements and judge()
// reads.
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "explorer/candidate.hpp"
#include "explorer/cost_model.hpp"
#include "explorer/validate.hpp"
#include "spec/layout.hpp"

namespace sax::validation {

namespace metrics = explorer::validation;

// `sax validate`'s flags, less where its results go (--json, --plots: cli/ writes them).
struct Options {
  std::string cluster, model, calibration, emulate = "auto", technology, runs_dir;
  // The data's sample lengths and their placement (`sax run --lengths --balance`): every layout run
  // and predicted with them (spec/lengths.hpp, workload/balance.hpp).
  std::string lengths = "fixed", balance = "none";
  std::vector<std::string> layouts;
  int top = 4, spread = 4, steps = 3, warmup = 1, rounds = 1;
  double spread_within = 0;  // the spread over layouts predicted within this factor of the best (0: all)
  double timeout_s = 300;
};

// A UsageError naming the flag when a count or range is out of bounds, before any file is read.
void check_options(const Options& o);

// A run on a paced device that pacing could not hold (overruns beyond this share of its compute
// time) measured the host, not the device: it is not scored.
inline constexpr double kMaxOverrunPct = 1.0;

// What a paced device's runs said of pacing (`sax run`'s "pacing"), over every round.
struct Pacing {
  std::int64_t ops = 0, overruns = 0;
  double overrun_s = 0, compute_s = 0;
  double load_p99 = 0;  // the highest rank's p99 of kernel time / device time, over the rounds
  double overrun_pct() const { return compute_s > 0 ? 100 * overrun_s / compute_s : 0.0; }
};

struct Trial {
  std::string label;                // "#rank" in the explorer's ranking, or the layout file's stem
  std::optional<std::size_t> rank;  // 1-based, in the ranking on the emulated technology
  std::string picked;               // top, spread or given
  Layout layout;
  explorer::Candidate candidate;
  explorer::Prediction predicted;
  metrics::Parts predicted_parts{};  // the prediction's breakdown in the testbed's parts
  std::filesystem::path dir;         // layout.json, run.json, run.log, trace/
  int exit_code = -1;
  double median_s = 0, min_s = 0, max_s = 0;  // over every measured step of every round
  metrics::Parts measured{};                  // the mean over rounds of the mean over ranks
  double other_s = 0;
  std::vector<double> steps;     // each round's measured steps
  int rounds = 0;                // rounds that ran
  std::optional<Pacing> pacing;  // a paced device's
  double router_imbalance = 0;   // > 0: the run routes at this load (sax run --router-imbalance)

  bool ran() const { return exit_code == 0; }
  // Ran, and (on a paced device) within kMaxOverrunPct of overruns: what the judgement counts.
  bool scored() const { return ran() && !(pacing && pacing->overrun_pct() > kMaxOverrunPct); }
  // Of the step, what is not compute: exposed communication, the bubble and waiting (predicted:
  // its breakdown's; measured: the median step less the compared stage's compute and optimizer).
  double predicted_non_compute_s() const { return predicted.step_time_s - predicted_parts[0] - predicted_parts[1]; }
  double measured_non_compute_s() const { return median_s - measured[0] - measured[1]; }
};

}  // namespace sax::validation
