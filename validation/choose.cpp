#include "validation/choose.hpp"

#include <algorithm>
#include <filesystem>

#include "explorer/explore.hpp"
#include "explorer/replay.hpp"
#include "explorer/uneven.hpp"
#include "harness/watchdog.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"
#include "validation/text.hpp"

namespace sax::validation {

namespace {

// The explorer's ranking is the closed forms' with its best re-ranked by the replay, as `explore`
// shows it (its --replay-top default).
constexpr auto kReplayTop = static_cast<std::size_t>(explorer::kDefaultReplayTop);
// No testbed runs more layouts than this; the search keeps at most these many.
constexpr int kMaxRanking = 1 << 20;

// The ranking as explore gives it (where buildings differ, priced stage by stage:
// explorer/hetero.hpp), of the layouts on the emulated technology (the candidates' index into the
// cluster's list, −1 for its own link).
std::unique_ptr<explorer::Ranking> rank_on_boundary(const ChooseInput& in) {
  const NetworkTechnology* emulated = in.cluster.technology(in.technology);
  const int technology = emulated ? static_cast<int>(emulated - in.cluster.network_technologies.data()) : -1;
  explorer::SearchOptions o;
  o.top = kMaxRanking;
  return explorer::rank_layouts(in.cluster, in.model, in.cost, o, kReplayTop,
                                [&](const explorer::Ranked& x) { return x.candidate.technology != technology; });
}

std::vector<Trial> picked_from(const explorer::SearchResult& r, const Cluster& c, std::size_t top, std::size_t spread,
                               double within) {
  std::vector<Trial> trials;
  std::size_t ranked = r.top.size();
  if (within > 0 && ranked > 0) {
    const double slowest = within * r.top.front().prediction.step_time_s;
    // The ranking's order, to its first layout past the factor.
    ranked = static_cast<std::size_t>(
        std::find_if(r.top.begin(), r.top.end(),
                     [&](const explorer::Ranked& x) { return x.prediction.step_time_s > slowest; }) -
        r.top.begin());
  }
  for (std::size_t i : metrics::pick(ranked, top, spread)) {
    Trial t;
    t.label = "#" + std::to_string(i + 1);
    t.rank = i + 1;
    t.picked = i < top ? "top" : "spread";
    t.candidate = r.top[i].candidate;
    t.layout = t.candidate.to_layout(c);
    trials.push_back(std::move(t));
  }
  return trials;
}

}  // namespace

void check_options(const Options& o) {
  if (o.top < 0) throw UsageError("--top: expected a number of layouts >= 0, got " + std::to_string(o.top));
  if (o.spread < 0) throw UsageError("--spread: expected a number of layouts >= 0, got " + std::to_string(o.spread));
  if (o.spread_within != 0 && !(o.spread_within >= 1))
    throw UsageError(
        "--spread-within: expected a factor >= 1 of the best layout's predicted step (0: the whole "
        "ranking), got " +
        printf_text("%g", o.spread_within));
  if (o.top + o.spread + static_cast<int>(o.layouts.size()) < 2)
    throw UsageError("--top, --spread, --layout: expected at least 2 layouts in all (an order needs two)");
  if (o.steps < 1) throw UsageError("--steps: expected >= 1, got " + std::to_string(o.steps));
  if (o.warmup < 0) throw UsageError("--warmup: expected >= 0, got " + std::to_string(o.warmup));
  if (o.rounds < 1) throw UsageError("--rounds: expected >= 1, got " + std::to_string(o.rounds));
  // The range each run's --timeout takes (sax run refuses the rest, after the launch).
  if (!(o.timeout_s >= 1 && o.timeout_s <= harness::kMaxTimeoutS))
    throw UsageError("--timeout: expected seconds between 1 and " + printf_text("%g", harness::kMaxTimeoutS));
  const LengthSpec lengths = parse_lengths(o.lengths, "--lengths");
  if (!workload::parse_balance(o.balance))
    throw UsageError("--balance: expected none, sorted or balanced, got \"" + safe_text(o.balance) + "\"");
  if (o.balance != "none" && !lengths.uneven()) throw UsageError("--balance: needs --lengths with lengths that differ");
}

std::vector<GivenLayout> load_given(const Options& o, const Cluster& c, const Model& m) {
  std::vector<GivenLayout> given;
  for (const std::string& f : o.layouts) {
    Layout l = load_layout(f);
    validate_layout(l, m, c, f);
    if (l.schedule.network_technology != o.technology)
      throw UsageError(f + ": /schedule/network_technology: expected \"" + o.technology +
                       "\" (the boundary validate emulates, --technology), got \"" + l.schedule.network_technology +
                       "\"");
    given.emplace_back(std::filesystem::path(f).stem().string(), std::move(l));
  }
  return given;
}

Choice choose(ChooseInput in) {
  Choice out;
  out.ranking = rank_on_boundary(in);
  const explorer::SearchResult& r = out.ranking->result;
  const auto top = static_cast<std::size_t>(in.top);
  out.trials = picked_from(r, in.cluster, top, static_cast<std::size_t>(in.spread), in.spread_within);
  out.top = std::min(top, r.top.size());
  for (auto& [name, l] : in.given) {
    Trial t;
    t.label = name;
    t.picked = "given";
    t.candidate = explorer::Candidate::of(l, in.cluster);
    t.layout = std::move(l);
    out.trials.push_back(std::move(t));
  }
  out.given = in.given.size();
  if (out.trials.size() < 2)
    throw UsageError("validate: " + std::to_string(out.trials.size()) + " layout(s) of " + in.model.name + " fit on " +
                     in.cluster.name + (in.technology.empty() ? "" : " with " + in.technology) +
                     "; an order needs two");
  // Every layout run is predicted by the replay of its schedule, the explorer's finer figure.
  const explorer::CostModel& cm = out.cost();
  const explorer::HeteroModel* hm = out.ranking->hetero.get();
  for (Trial& t : out.trials) {
    t.predicted = hm ? hm->evaluate(t.candidate).prediction : explorer::replayed(cm, t.candidate, cm.predict(t.layout));
    // On a paced device the run's router takes the load the explorer prices, as its compute takes
    // the explorer's time: the EP term is judged on the busiest expert's load it assumes.
    if (in.cluster.device.paced() && in.model.is_moe() && t.layout.expert_model_parallel_size > 1)
      t.router_imbalance =
          std::min(cm.params().router_imbalance, static_cast<double>(t.layout.expert_model_parallel_size));
    // Uneven inputs: the step's sequences placed as the run places them, each DP rank's pipeline
    // replayed at its micro-batches' lengths.
    if (in.lengths.uneven())
      t.predicted = explorer::uneven_prediction(
          t.predicted,
          explorer::forecast_uneven(cm, in.cost, in.cluster, in.model, t.layout,
                                    workload::place(in.cluster, in.model, t.layout, in.lengths, in.balance)));
    t.predicted_parts = metrics::predicted_parts(t.predicted);
  }
  return out;
}

}  // namespace sax::validation
