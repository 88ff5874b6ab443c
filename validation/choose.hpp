// The loop's first phase: which layouts to run. The explorer ranks every feasible layout on the
// boundary the testbed emulates; the best N and S others spread down the ranking, and any layout
// files given, become trials, each predicted by the replay of its schedule.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "explorer/ranking.hpp"
#include "spec/cluster.hpp"
#include "spec/lengths.hpp"
#include "spec/model.hpp"
#include "validation/trial.hpp"
#include "workload/balance.hpp"

namespace sax::validation {

// A layout file to run beside the ranking's: its stem (the trial's label) and the layout.
using GivenLayout = std::pair<std::string, Layout>;

// The layout files of `o.layouts`, each checked against the model and cluster and against the
// technology validate emulates (a UsageError naming the file and field).
std::vector<GivenLayout> load_given(const Options& o, const Cluster& c, const Model& m);

struct ChooseInput {
  const Cluster& cluster;
  const Model& model;
  explorer::CostSource cost;
  std::string technology;  // the boundary's: the ranking keeps layouts priced on it alone
  int top = 4, spread = 4;
  std::vector<GivenLayout> given;
  // The spread only down to the last layout predicted within this factor of the best's step (a
  // layout many times slower costs the testbed as many times the best's run); 0: the whole ranking.
  double spread_within = 0;
  // Uneven inputs: every trial predicted with the step's sequences placed as its run places them.
  LengthSpec lengths = parse_lengths("fixed");
  workload::Balance balance = workload::Balance::none;
};

struct Choice {
  std::unique_ptr<explorer::Ranking> ranking;  // the explorer's, on the emulated technology
  std::vector<Trial> trials;                   // the ranking's picks in rank order, then the given
  std::size_t top = 0, given = 0;              // how many trials are the best N, and layout files

  std::size_t feasible() const { return ranking->result.top.size(); }
  const explorer::CostModel& cost() const { return *ranking->cost; }
};

// Throws UsageError when fewer than two layouts fit (an order needs two).
Choice choose(ChooseInput in);

}  // namespace sax::validation
