// Uneven inputs priced (`predict --lengths --balance`): the step's sequences placed as `sax run`
// places them (workload::place), each DP rank's pipeline replayed with every micro-batch's blocks
// at its own lengths, and the step the slowest DP rank's (the gradient sync waits for it). A
// block's scale is the device's time for its ops at the micro-batch's shapes over their time at
// the model's (workload/device_time.hpp, on the workload's own op list: a short sequence's small
// GEMMs at the efficiency they get), a transfer's the micro-batch's token share.
#pragma once

#include <cstdint>
#include <vector>

#include "explorer/cost_model.hpp"
#include "explorer/replay.hpp"
#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"
#include "workload/balance.hpp"

namespace sax::explorer {

struct UnevenForecast {
  Replay even;                    // every sequence at the model's length
  Replay step;                    // the slowest DP rank's
  std::int64_t slowest_dp = 0;    // which
  std::vector<double> dp_step_s;  // every DP rank's pipeline and tail
  // How long a DP rank waits for the slowest at the gradient sync, on average over the DP ranks.
  double dp_wait_mean_s() const {
    double sum = 0;
    for (double s : dp_step_s) sum += step.step_time_s - s;
    return dp_step_s.empty() ? 0.0 : sum / static_cast<double>(dp_step_s.size());
  }
};

// A UsageError where the replay cannot run the layout. `cost` prices a uniform cluster; where
// buildings differ each stage is priced on its own view from `source` (HeteroModel::stage_costs),
// as `predict` prices them.
UnevenForecast forecast_uneven(const CostModel& cost, const CostSource& source, const Cluster& cluster,
                               const Model& model, const Layout& layout, const workload::StepInputs& inputs);

}  // namespace sax::explorer
