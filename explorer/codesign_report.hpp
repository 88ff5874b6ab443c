// MoE co-design's results for people and files (`sax codesign`): the table of variants, the
// Pareto set's note with why each variant off it loses, and each variant as JSON.
#pragma once

#include <string>

#include "explorer/codesign.hpp"
#include "spec/cluster.hpp"
#include "spec/fields.hpp"

namespace sax::explorer {

// A row per variant (an excluded one says why); `loss`: the predicted loss beside each.
std::string codesign_table(const CodesignResult& r, bool loss);
// The Pareto set's note, and why each variant off it loses: its dominant term, and the term it
// loses the most time in against the one on the set that beats it.
std::string codesign_pareto(const CodesignResult& r, bool loss);
// One variant: its sizes, and its best layout and prediction or why it was excluded.
json to_json(const CodesignRow& r, const Cluster& c, bool loss);

}  // namespace sax::explorer
