// The figures of the validate loop (pure, no I/O; validation/ runs the loop): which layouts of a
// ranking to run, the prediction's breakdown in the parts the testbed measures, and how well
// predictions held — per layout the error and the part most off, overall MAPE, Kendall's τ
// between the predicted and measured orders, and the top-1 regret.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "explorer/cost_model.hpp"

namespace sax::explorer::validation {

// Positions (0-based) in a ranking of `ranked` layouts to run: the best `top`, then `spread` more
// spaced evenly over the rest of the ranking down to its last, so that an order wrong far below
// the top shows too. Ascending, each once; fewer where the ranking is shorter.
std::vector<std::size_t> pick(std::size_t ranked, std::size_t top, std::size_t spread);

// The parts of a step as `sax run` measures them (harness/run.hpp's breakdown; compute includes
// recompute, idle is waiting for a peer). `other` (the measured remainder) has no prediction.
inline constexpr std::array<const char*, 8> kParts = {"compute", "optimizer", "tp_comm", "cp_comm",
                                                      "ep_comm", "dp_comm",   "pp_comm", "idle"};
using Parts = std::array<double, kParts.size()>;

// A prediction's breakdown in those parts: compute (its recompute included, as the testbed
// measures it), the pipeline bubble as idle, each dimension's exposed communication its own.
Parts predicted_parts(const Prediction& p);

// The part whose predicted and measured seconds differ most (an index into kParts).
std::size_t worst_part(const Parts& predicted, const Parts& measured);

struct Outcome {
  double predicted_s = 0, measured_s = 0;
};

// (predicted − measured) / measured, in %.
double error_pct(const Outcome& o);
// The mean of |error_pct| over the outcomes.
double mape_pct(const std::vector<Outcome>& outcomes);
// Kendall's τ-b between the predicted and the measured step times: 1 when both order the layouts
// alike, −1 when reversed; ties (equal predictions) count for neither. NaN with fewer than two
// layouts or when one side is all ties.
double kendall_tau(const std::vector<Outcome>& outcomes);
// The explorer's pick: the outcome predicted fastest (among equal predictions, the first listed);
// and the fastest measured. Indices into `outcomes` (not empty).
std::size_t predicted_fastest(const std::vector<Outcome>& outcomes);
std::size_t measured_fastest(const std::vector<Outcome>& outcomes);
// How much slower, in %, the explorer's pick ran than the fastest measured (0 when it was the
// fastest).
double top1_regret_pct(const std::vector<Outcome>& outcomes);

// Kendall's τ over fewer layouts than this says little (4 layouts have 6 pairs: one discordant
// pair moves τ by a third): the report says so beside it.
inline constexpr std::size_t kFewForTau = 5;

// How well one term of the step held: judged over the layouts where its measured time is at least
// kTermFloor of the measured step (below, its relative error measures noise), by the MAPE, the
// signed mean error (the bias: + predicted too long) and the worst error (its layout: an index
// into the outcomes). NaN and 0 layouts where none counts.
inline constexpr double kTermFloor = 0.02;
struct TermFit {
  std::size_t layouts = 0;
  double mape_pct = 0, bias_pct = 0, worst_pct = 0;
  std::size_t worst = 0;
};
// `term[i]`: layout i's predicted and measured term; `step_s[i]` its measured step.
TermFit term_fit(const std::vector<Outcome>& term, const std::vector<double>& step_s);

}  // namespace sax::explorer::validation
