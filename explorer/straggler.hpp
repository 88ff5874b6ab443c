// A straggler what-if (`explore --straggler B:F`): building B's devices F times slower — its
// compute_slowdown multiplied, as the paced testbed then runs it — what that costs each listed
// layout, and the mitigations the explorer can express: the layout's stage boundaries moved (its
// layers balanced over the stages' own speeds, HeteroModel::balance), or another layout and
// placement (the search again on the slowed cluster), or under uneven inputs the samples rebalanced. The slowed
// cluster's buildings differ, so every layout is priced stage by stage on its own devices, replayed
// (explorer/hetero.hpp). Under uneven inputs (--lengths) every step is priced with the sequences placed
// (explorer/uneven.hpp), by a balancer that does not know of the straggler, and a third mitigation is priced: the
// balanced placement weighing each DP rank's speed (the straggler's ranks get the shorter
// sequences).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "explorer/explore.hpp"
#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/lengths.hpp"
#include "workload/balance.hpp"

namespace sax::explorer {

struct Straggler {
  int building = 0;
  double factor = 1;
  std::string text;  // as given
};
// "NAME:F" or "INDEX:F" (F >= 1); a UsageError naming --straggler otherwise.
Straggler parse_straggler(const std::string& text, const Cluster& cluster);
// The cluster with the straggler's building slowed.
Cluster slowed(const Cluster& cluster, const Straggler& s);

struct StragglerLayout {
  std::size_t index = 0;            // in the ranking it was taken from
  double base_s = 0, slowed_s = 0;  // the layout's step without and with the straggler
  double moved_s = 0;               // with its stage boundaries moved (slowed_s where nothing moves)
  Layout moved;                     // that layout
  double rebalanced_s = 0;          // uneven inputs: placed at each DP rank's speed (0: fixed lengths)
  double cost_s() const { return slowed_s - base_s; }
};

struct StragglerWhatIf {
  Straggler straggler;
  Cluster cluster;                       // slowed
  std::vector<StragglerLayout> layouts;  // the listed layouts, in their order
  Exploration research;                  // the search on the slowed cluster (its top: the best there)
  double research_s = 0;                 // its best's step (under the inputs: placed at the ranks' speeds)
  bool uneven = false;                   // priced under uneven inputs
  // The recommended mitigation of the best listed layout's straggler: the fastest of its moved
  // boundaries, its samples rebalanced and the re-searched best, where faster than it slowed.
  enum class Mitigation { none, move_boundaries, rebalance, research };
  Mitigation recommended() const;
  double recommended_s() const;  // the step with it (the layout's slowed step with none)
};

// The what-if over the first `count` layouts of `x` (explored by `q`); under `lengths` where they
// differ, placed by `balance` (the rebalanced mitigation: balanced, at the ranks' speeds).
StragglerWhatIf straggler_what_if(const ExploreRequest& q, const Exploration& x, const Straggler& s, std::size_t count,
                                  const LengthSpec& lengths = parse_lengths("fixed"),
                                  workload::Balance balance = workload::Balance::balanced);

}  // namespace sax::explorer
