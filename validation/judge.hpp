// The loop's third phase: how well the predictions held over the trials that ran — per trial the
// part most off, overall MAPE, Kendall's τ between the predicted and measured orders, and the
// top-1 regret (the figures themselves: explorer/validate.hpp).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "validation/trial.hpp"

namespace sax::validation {

struct Judgement {
  std::vector<std::size_t> measured;  // the trials that ran, in trial order
  std::vector<std::size_t> worst;     // per trial: the part most off (an index into kParts), if it ran
  std::size_t failed = 0;
  double mape_pct = 0, kendall_tau = 0, top1_regret_pct = 0;  // NaN where no figure holds
  std::optional<std::size_t> pick, best;                      // the trials predicted fastest and measured fastest
};

Judgement judge(const std::vector<Trial>& trials);

}  // namespace sax::validation
