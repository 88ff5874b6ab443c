// The loop's last phase: what it says. A header before the runs; after them the trials beside
// their predictions, the breakdowns part by part and the judgement's summary line; and the same
// as JSON (cli/ writes it, with the plots).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "spec/cluster.hpp"
#include "spec/model.hpp"
#include "validation/choose.hpp"
#include "validation/judge.hpp"
#include "validation/trial.hpp"

namespace sax::validation {

// The loop's set-up as the report names it.
struct Setup {
  const Options& options;
  const Cluster& cluster;
  const Model& model;
  std::string emulation, emulation_note;  // the boundary, as the launch plan made it
};

// The lines before the runs: what is run, on which boundary, and where the runs go.
std::string header(const Setup& s, const Choice& choice, const std::filesystem::path& runs);
// The tables after the runs, ending with the judgement's summary line.
std::string tables(const std::vector<Trial>& trials, const Judgement& j);
// The whole comparison as data; run files are named only where the runs are kept.
nlohmann::json to_json(const Setup& s, const Choice& choice, const Judgement& j, bool runs_kept);

}  // namespace sax::validation
