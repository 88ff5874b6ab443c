// The loop's third phase: how well the predictions held over the trials that ran — per trial the
// part most off, overall MAPE, Kendall's τ between the predicted and measured orders, and the
// top-1 regret (the figures themselves: explorer/validate.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <vector>

#include "validation/trial.hpp"

namespace sax::validation {

struct Judgement {
  std::vector<std::size_t> measured;  // the trials scored (ran, within the overruns allowed), in trial order
  std::vector<std::size_t> worst;     // per trial: the part most off (an index into kParts), if it ran
  std::size_t failed = 0;
  std::size_t refused = 0;  // ran on a paced device that could not hold it (overruns): not scored
  double mape_pct = 0, kendall_tau = 0, top1_regret_pct = 0;  // NaN where no figure holds
  // The part that is not compute (exposed communication, the bubble, waiting): its MAPE, and its
  // mean share of the measured step, over the trials scored.
  double non_compute_mape_pct = 0, non_compute_share_pct = 0;
  double non_compute_mae_s = 0;  // its mean |predicted − measured|, s
  // Each part of the step (kParts), over the trials scored where it is at least kTermFloor of the
  // measured step; a term's worst is an index into `measured`.
  std::array<metrics::TermFit, metrics::kParts.size()> terms{};
  bool paced = false;  // the trials ran on a paced device
  // The trial predicted fastest (of all: it may have failed) and the one measured fastest.
  std::optional<std::size_t> pick, best;
};

Judgement judge(const std::vector<Trial>& trials);

}  // namespace sax::validation
