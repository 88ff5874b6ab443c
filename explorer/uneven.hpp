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
#include "explorer/search.hpp"
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
  double token_share = 1;         // the step's tokens over those of the batch at the model's length
  // Per DP rank, the idle time of its rank on the critical stage (step.critical_stage): its
  // pipeline's waits, then its wait at the gradient sync for the slowest of that stage's DP group
  // (each stage's group syncs on its own, so a rank waits for the busiest rank of its stage, not
  // for the slowest whole pipeline), then what is left of the step. `sax run` measures the same.
  std::vector<double> critical_idle_s;
  // The bubble: the least idle of the critical stage's ranks (the one no DP rank waits for) and
  // the skew the step's breakdown counts as bubble.
  double bubble_s() const;
  // How much longer than that the critical stage's ranks wait, on average over the DP ranks.
  double dp_wait_mean_s() const;
  // The critical stage's ranks' step, term by term, on average over the DP ranks (what `sax run`
  // reports per rank and `validate` compares): each replica's terms, their idle time the mean of
  // critical_idle_s, so that it sums to the step.
  Breakdown mean_rank;
};

// `closed` (the layout's prediction with every sequence at the model's length) with the uneven
// step, its critical stage and mean_rank's breakdown; tokens/s and MFU scaled by the step and by
// the step's share of the full batch's tokens (MFU's attention FLOPs, a smaller share, as theirs).
Prediction uneven_prediction(const Prediction& closed, const UnevenForecast& f);

// A UsageError where the replay cannot run the layout. `cost` prices a uniform cluster; where
// buildings differ each stage is priced on its own view from `source` (HeteroModel::stage_costs),
// as `predict` prices them.
UnevenForecast forecast_uneven(const CostModel& cost, const CostSource& source, const Cluster& cluster,
                               const Model& model, const Layout& layout, const workload::StepInputs& inputs);

// The search under uneven inputs (`explore --lengths`): a layout priced with the step's sequences
// placed by each balancer, the balancer's own host time counted in its step (it places every
// step's batch before the step can start).
struct UnevenChoice {
  workload::Balance balance = workload::Balance::none;
  double step_s = 0;       // the forecast's step plus the placing's host time
  double placing_s = 0;    // that host time
  double imbalance_s = 0;  // what the imbalance costs: the step less the mean DP rank's pipeline and tail
  double bubble_s = 0, dp_wait_s = 0;
};
struct UnevenRanked {
  std::size_t index = 0;              // in the ranking it was taken from
  double even_step_s = 0;             // every sequence at the model's length
  std::vector<UnevenChoice> choices;  // one per balancer asked for, in that order
  std::size_t best = 0;               // the fastest of them
  const UnevenChoice& pick() const { return choices[best]; }
};
// The first `count` of `ranked` (those the replay runs) priced under `lengths` with each of
// `balances`, fastest (by its best balancer) first.
std::vector<UnevenRanked> rank_uneven(const CostModel& cost, const CostSource& source, const Cluster& cluster,
                                      const Model& model, const std::vector<Ranked>& ranked, std::size_t count,
                                      const LengthSpec& lengths, const std::vector<workload::Balance>& balances);

}  // namespace sax::explorer
