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

// The lines above the table: what is searched, on which budget (`budget_given`: from the flags,
// else the base model's), the loss model and the calibration.
std::string codesign_header(const CodesignInput& in, bool budget_given);
// The files a result came from, as given (empty: not given), which its JSON names and hashes.
struct CodesignFiles {
  std::string cluster, model, loss_model;
};
// codesign's JSON: provenance, inputs, the Pareto axes and every variant.
json codesign_json(const CodesignFiles& files, const CodesignInput& in, const CodesignResult& r);

}  // namespace sax::explorer
