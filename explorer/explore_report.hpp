// `sax explore`'s and `sax predict`'s results for people and files: the ranking's table and its
// JSON, a compared layout beside the best, --emit's settings; one layout's prediction, its stages
// where buildings differ and its JSON. cli/ parses and writes; the text and the JSON are made here
// (as codesign_report.hpp does for codesign, validation/report.hpp for validate).
#pragma once

#include <string>

#include "explorer/emit.hpp"
#include "explorer/explore.hpp"
#include "explorer/framework.hpp"
#include "explorer/straggler.hpp"
#include "explorer/uneven.hpp"
#include "spec/cluster.hpp"
#include "spec/fields.hpp"
#include "spec/layout.hpp"
#include "spec/lengths.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

// The files a result came from, as given on the command line (empty: not given), which its JSON
// names and hashes (spec/provenance.hpp).
struct InputFiles {
  std::string cluster, model, layout, calibration, compare, technology;
};

// One layout's prediction, a line a part: degrees and options, placement, step, tokens/s, MFU,
// memory, breakdown and why.
std::string prediction_text(const Candidate& k, const Layout& l, const Prediction& p, const CostModel& cm,
                            const Cluster& c, const std::string& why);

// explore's table: the search's counts and bounds, how the best were priced, and the ranking.
std::string ranking_text(const Cluster& c, const Model& m, const Exploration& x, Framework framework);

// `--compare`: the compared layout's prediction and how the best found beats it (within the
// framework, and with any where `any_best_s` > 0); its JSON, null without a best.
struct CompareReport {
  std::string text;
  json j;
};
CompareReport compare_report(const InputFiles& in, const Cluster& c, const Exploration& x, const Layout& compare,
                             Framework framework, double any_best_s);

// explore's JSON: provenance, inputs, the search's counts and every ranked layout.
json ranking_json(const InputFiles& in, const Cluster& c, const Exploration& x, const json& compare,
                  Framework framework);

// `--emit`: the ranking's `rank`-th as the framework's settings; when the framework would run it
// otherwise than priced, the best it runs as priced (a second search) follows, commented out, so
// that the output stays one command or one TOML file, and `note` says so.
struct Emitted {
  std::string settings, note;
};
Emitted emit_pick(EmitFormat format, const Ranked& pick, int rank, const Cluster& c, const Model& m,
                  const ExploreRequest& q);

// The framework `--emit`'s format writes for.
Framework emit_framework(EmitFormat f);

// predict's report: the layout's prediction with what was calibrated and where a calibrated
// curve is read beyond what it measured.
std::string forecast_text(const InputFiles& in, const Cluster& c, const Model& m, const Layout& l, const Forecast& f);
// How the forecast was made: where buildings differ, the uniform rule's figure, the stages and
// the balanced split; with `replay`, the replay against the closed forms.
std::string method_text(const Cluster& c, const Layout& l, const Forecast& f, bool replay);
// predict's JSON.
json forecast_json(const InputFiles& in, const Layout& l, const Forecast& f);
// `--lengths`: the step with uneven inputs beside the even one, and its JSON.
std::string uneven_text(const LengthSpec& lengths, workload::Balance balance, const UnevenForecast& u);
json uneven_json(const LengthSpec& lengths, workload::Balance balance, const UnevenForecast& u);

// `explore --lengths`: the listed layouts under uneven inputs, each with every balancer asked for,
// fastest first; how much of each step the imbalance costs; and their JSON.
std::string uneven_ranking_text(const Exploration& x, const LengthSpec& lengths, const std::vector<UnevenRanked>& u);
json uneven_ranking_json(const Cluster& c, const Exploration& x, const LengthSpec& lengths,
                         const std::vector<UnevenRanked>& u);

// `explore --straggler`: each listed layout's step without and with the straggler, the moved
// boundaries', the re-searched best and the recommended mitigation; and their JSON.
std::string straggler_text(const Cluster& c, const Exploration& x, const StragglerWhatIf& w);
json straggler_json(const Cluster& c, const Exploration& x, const StragglerWhatIf& w);

}  // namespace sax::explorer
