#include "validation/report.hpp"

#include <cmath>

#include "explorer/report.hpp"
#include "spec/fields.hpp"
#include "spec/provenance.hpp"
#include "validation/text.hpp"

namespace sax::validation {

namespace {

using nlohmann::json;

std::string nan_or(double x, const char* format) { return std::isnan(x) ? "n/a" : printf_text(format, x); }

json nan_or_null(double x) { return std::isnan(x) ? json(nullptr) : json(x); }

json parts_json(const metrics::Parts& p) {
  json j = json::object();
  for (std::size_t i = 0; i < metrics::kParts.size(); ++i) j[metrics::kParts[i]] = p[i];
  return j;
}

// One line per trial: predicted beside measured, the error and the part most off.
std::string trials_table(const std::vector<Trial>& trials, const Judgement& j) {
  std::string s = printf_text("\n  %-6s %-7s %-34s %-44s %10s %20s %8s  %s\n", "layout", "picked", "degrees", "options",
                              "predicted", "measured (min-max)", "error", "part most off: predicted / measured");
  for (std::size_t i = 0; i < trials.size(); ++i) {
    const Trial& t = trials[i];
    s += printf_text("  %-6s %-7s %-34s %-44s %9ss ", t.label.c_str(), t.picked.c_str(),
                     explorer::describe_degrees(t.candidate).c_str(), explorer::options_string(t.layout).c_str(),
                     seconds_text(t.predicted.step_time_s).c_str());
    if (!t.ran()) {
      s += printf_text("%20s\n", ("failed (exit " + std::to_string(t.exit_code) + ")").c_str());
      continue;
    }
    if (!t.scored()) {
      const Pacing& p = *t.pacing;
      s += printf_text(
          "not scored: overruns %.1f %% of its compute (more than %.0f %%): this host held about %.2fx the declared "
          "device's speed at p99; declare a device that much slower (sax calibrate --model says which it holds)\n",
          p.overrun_pct(), kMaxOverrunPct, p.load_p99 > 0 ? 1 / p.load_p99 : 0.0);
      continue;
    }
    const std::size_t w = j.worst[i];
    s += printf_text(
        "%20s %+7.1f%%  %s %s / %s s\n",
        (seconds_text(t.median_s) + " (" + seconds_text(t.min_s) + "-" + seconds_text(t.max_s) + ")").c_str(),
        metrics::error_pct({t.predicted.step_time_s, t.median_s}), metrics::kParts[w],
        seconds_text(t.predicted_parts[w]).c_str(), seconds_text(t.measured[w]).c_str());
  }
  return s;
}

// The breakdowns side by side, part by part (s; measured: the mean over the ranks of the
// predicted critical stage).
std::string breakdown_table(const std::vector<Trial>& trials, const Judgement& j) {
  std::string s = printf_text("\n  %-8s %-9s", "layout", "");
  for (const char* part : metrics::kParts) s += printf_text(" %9s", part);
  s += printf_text(" %9s\n", "other");
  for (std::size_t i : j.measured) {
    const Trial& t = trials[i];
    s += printf_text("  %-8s %-9s", t.label.c_str(), "predicted");
    for (double x : t.predicted_parts) s += printf_text(" %9.4f", x);
    s += printf_text(" %9s\n  %-8s %-9s", "",
                     printf_text("stage %.0f", static_cast<double>(t.predicted.critical_stage)).c_str(), "measured");
    for (double x : t.measured) s += printf_text(" %9.4f", x);
    s += printf_text(" %9.4f\n", t.other_s);
  }
  return s;
}

// Term by term, over the layouts where the term is at least kTermFloor of the measured step.
std::string terms_table(const std::vector<Trial>& trials, const Judgement& j) {
  std::string s = printf_text("\n  %-10s %8s %8s %8s  %s\n", "term", "layouts", "MAPE", "bias", "worst");
  for (std::size_t k = 0; k < metrics::kParts.size(); ++k) {
    const metrics::TermFit& f = j.terms[k];
    if (f.layouts == 0) {
      s += printf_text("  %-10s %8s %8s %8s  (under %.0f %% of the step wherever it ran)\n", metrics::kParts[k], "0",
                       "-", "-", 100 * metrics::kTermFloor);
      continue;
    }
    const Trial& w = trials[j.measured[f.worst]];
    s += printf_text("  %-10s %8zu %7.1f%% %+7.1f%%  %+.1f %% (%s: %s / %s s)\n", metrics::kParts[k], f.layouts,
                     f.mape_pct, f.bias_pct, f.worst_pct, w.label.c_str(), seconds_text(w.predicted_parts[k]).c_str(),
                     seconds_text(w.measured[k]).c_str());
  }
  return s;
}

// The terms the model predicts (the communication terms, idle and the optimizer; on a paced device
// compute is held to the prediction) that were judged, with their MAPE: "tp_comm 4.1 % (8), ...".
std::string judged_terms(const Judgement& j) {
  std::string s;
  for (std::size_t k = 1; k < metrics::kParts.size(); ++k)
    if (j.terms[k].layouts > 0)
      s += printf_text("%s%s %.1f %% (%zu)", s.empty() ? "" : ", ", metrics::kParts[k], j.terms[k].mape_pct,
                       j.terms[k].layouts);
  return s.empty() ? "none at 2 % of a step or more" : s;
}

std::string summary_line(const std::vector<Trial>& trials, const Judgement& j) {
  const Trial* pick = j.pick ? &trials[*j.pick] : nullptr;
  const Trial* best = j.best ? &trials[*j.best] : nullptr;
  std::int64_t overruns = 0;
  for (const Trial& t : trials)
    if (t.ran() && t.pacing) overruns += t.pacing->overruns;
  const std::string non_compute = printf_text(
      "not compute (exposed communication, bubble, waiting): MAPE %s %%, %s %% of the measured step on average, "
      "mean error %s s; by term, MAPE (layouts): %s\n",
      nan_or(j.non_compute_mape_pct, "%.1f").c_str(), nan_or(j.non_compute_share_pct, "%.1f").c_str(),
      nan_or(j.non_compute_mae_s, "%.4f").c_str(), judged_terms(j).c_str());
  const std::string tau_note = j.measured.size() < metrics::kFewForTau && j.measured.size() > 1
                                   ? printf_text(" (over %zu layouts: it says little)", j.measured.size())
                                   : "";
  // What became of the explorer's pick: its time, or why it has none (no regret then).
  const std::string picked = !pick             ? "- ran - s"
                             : !pick->ran()    ? pick->label + " failed"
                             : !pick->scored() ? pick->label + " was not scored (overruns)"
                                               : pick->label + " ran " + seconds_text(pick->median_s) + " s";
  const std::string step = printf_text(
      "%zu of %zu layouts ran%s: step MAPE %s %%, Kendall tau %s%s, top-1 regret %s %% (the explorer's pick %s; "
      "fastest measured %s, %s s)\n",
      j.measured.size(), trials.size(),
      j.refused > 0 ? printf_text(" and were scored (%zu not: overruns)", j.refused).c_str() : "",
      nan_or(j.mape_pct, "%.1f").c_str(), nan_or(j.kendall_tau, "%.2f").c_str(), tau_note.c_str(),
      nan_or(j.top1_regret_pct, "%.1f").c_str(), picked.c_str(), best ? best->label.c_str() : "-",
      best ? seconds_text(best->median_s).c_str() : "-");
  // On a paced device compute is what the explorer priced by construction: the step's figures
  // say little beyond the part that is not compute, which comes first.
  if (!j.paced) return "\n  " + step + "  " + non_compute;
  return "\n  " + non_compute + "  " + step +
         printf_text(
             "  compute paced: every op held to the declared device's time (the device the explorer prices), so the "
             "step's compute matches by construction and the part that is not compute is the model's own; %lld "
             "overruns in all\n",
             static_cast<long long>(overruns));
}

json terms_json(const std::vector<Trial>& trials, const Judgement& j) {
  json out = json::object();
  for (std::size_t k = 0; k < metrics::kParts.size(); ++k) {
    const metrics::TermFit& f = j.terms[k];
    out[metrics::kParts[k]] = {{"layouts", f.layouts},
                               {"mape_pct", f.layouts ? json(f.mape_pct) : json(nullptr)},
                               {"bias_pct", f.layouts ? json(f.bias_pct) : json(nullptr)},
                               {"worst_pct", f.layouts ? json(f.worst_pct) : json(nullptr)},
                               {"worst_layout", f.layouts ? json(trials[j.measured[f.worst]].label) : json(nullptr)}};
  }
  return out;
}

json trial_json(const Trial& t, std::size_t worst, bool runs_kept) {
  const metrics::Parts& p = t.predicted_parts;
  json j = {{"label", t.label},
            {"explorer_rank", t.rank ? json(*t.rank) : json(nullptr)},
            {"picked", t.picked},
            {"describe", explorer::describe_degrees(t.candidate)},
            {"options", explorer::options_string(t.layout)},
            {"layout", sax::to_json(t.layout)},
            {"predicted",
             {{"step_time_s", t.predicted.step_time_s},
              {"breakdown_s", parts_json(p)},
              {"explorer", explorer::to_json(t.predicted)}}},
            {"compared_stage", t.predicted.critical_stage},
            {"router_imbalance", t.router_imbalance > 0 ? json(t.router_imbalance) : json(nullptr)},
            {"exit_code", t.exit_code},
            {"run_json", runs_kept ? json((t.dir / "run.json").string()) : json(nullptr)},
            {"trace_dir", runs_kept ? json((t.dir / "trace").string()) : json(nullptr)}};
  if (!t.ran()) {
    j["measured"] = nullptr;
    return j;
  }
  json mb = parts_json(t.measured);
  mb["other"] = t.other_s;
  if (t.pacing)
    j["pacing"] = {{"ops", t.pacing->ops},
                   {"overruns", t.pacing->overruns},
                   {"overrun_s", t.pacing->overrun_s},
                   {"compute_s", t.pacing->compute_s},
                   {"overrun_pct", t.pacing->overrun_pct()},
                   {"load_p99", t.pacing->load_p99},
                   {"scored", t.scored()}};
  j["non_compute_s"] = {{"predicted", t.predicted_non_compute_s()}, {"measured", t.measured_non_compute_s()}};
  j["measured"] = {{"step_time_s", {{"median", t.median_s}, {"min", t.min_s}, {"max", t.max_s}}}, {"breakdown_s", mb}};
  j["error_pct"] = metrics::error_pct({t.predicted.step_time_s, t.median_s});
  j["worst_term"] = {{"term", metrics::kParts[worst]}, {"predicted_s", p[worst]}, {"measured_s", t.measured[worst]}};
  return j;
}

json inputs_json(const Setup& s, const explorer::CostParams& cost) {
  const Options& o = s.options;
  json provenance = nullptr;
  if (!o.calibration.empty()) provenance = load_json_file(o.calibration).value("provenance", json(nullptr));
  return {{"cluster", o.cluster},
          {"model", o.model},
          {"calibration", o.calibration.empty() ? json(nullptr) : json(o.calibration)},
          {"calibration_provenance", provenance},
          {"cost_source", cost.source},
          {"calibrated_terms", cost.calibrated_terms},
          {"emulation", s.emulation},
          {"compute", to_string(s.cluster.device.emulation)},
          {"emulation_note", s.emulation_note},
          {"technology", o.technology.empty() ? json(nullptr) : json(o.technology)},
          {"steps", o.steps},
          {"warmup", o.warmup},
          {"rounds", o.rounds},
          {"top", o.top},
          {"spread", o.spread},
          {"spread_within", o.spread_within},
          {"lengths", o.lengths},
          {"balance", o.balance}};
}

}  // namespace

std::string header(const Setup& s, const Choice& choice, const std::filesystem::path& runs) {
  const Options& o = s.options;
  const std::size_t n = choice.trials.size();
  const Device& d = s.cluster.device;
  const std::string compute =
      d.paced() ? printf_text(
                      "\n  compute: paced to the declared device (%s: %g TFLOP/s %s, %g GB/s, %g us per op), "
                      "the device the explorer prices",
                      d.name.c_str(), d.peak_tflops_for(s.model.dtype), to_string(s.model.dtype), d.hbm_bandwidth_gbps,
                      d.op_overhead_us)
                : std::string("\n  compute: native (the host's own kernels at the host's speed)");
  const std::string router =
      d.paced() && s.model.is_moe()
          ? printf_text(
                "\n  router: with EP > 1 the first EP rank's experts take %gx the mean load, the others the "
                "rest evenly (the router imbalance the explorer prices, as compute is paced)",
                choice.cost().params().router_imbalance)
          : std::string();
  return "validate " + s.model.name + " on " + s.cluster.name + " (" + std::to_string(s.cluster.world_size()) +
         " ranks, " + std::to_string(s.cluster.buildings.size()) + " buildings) — " + choice.cost().params().source +
         compute + router +
         (o.lengths == "fixed" ? ""
                               : "\n  inputs: lengths " + o.lengths + ", balance " + o.balance +
                                     ": each layout run with them and predicted with the same sequences placed "
                                     "(explorer/uneven.hpp)") +
         "\n  boundary: " + s.emulation + (s.emulation_note.empty() ? "" : " (" + s.emulation_note + ")") +
         (o.technology.empty() ? "" : ", technology " + o.technology) +
         "\n  ranking: " + std::to_string(choice.feasible()) + " feasible layouts on this boundary; running " +
         std::to_string(n) + " (top " + std::to_string(choice.top) + ", " +
         std::to_string(n - choice.given - choice.top) + " spread down the ranking" +
         (o.spread_within > 0 ? printf_text(" within %gx the best's step", o.spread_within) : std::string()) + ", " +
         std::to_string(choice.given) + " given), " + std::to_string(o.steps) + " measured steps after " +
         std::to_string(o.warmup) + " warm-up each" +
         (o.rounds > 1 ? ", " + std::to_string(o.rounds) + " rounds (forward, backward, ...)" : "") + "; runs in " +
         runs.string() + "\n";
}

std::string tables(const std::vector<Trial>& trials, const Judgement& j) {
  return trials_table(trials, j) + breakdown_table(trials, j) + terms_table(trials, j) + summary_line(trials, j);
}

json to_json(const Setup& s, const Choice& choice, const Judgement& j, bool runs_kept) {
  json layouts = json::array();
  for (std::size_t i = 0; i < choice.trials.size(); ++i)
    layouts.push_back(trial_json(choice.trials[i], j.worst[i], runs_kept));
  const std::vector<Trial>& trials = choice.trials;
  const Options& o = s.options;
  return {{"version", 1},
          {"provenance", provenance({{"cluster", o.cluster}, {"model", o.model}, {"calibration", o.calibration}})},
          {"inputs", inputs_json(s, choice.cost().params())},
          {"feasible", choice.feasible()},
          {"layouts", layouts},
          {"summary",
           {{"layouts", j.measured.size()},
            {"failed", j.failed},
            {"not_scored", j.refused},
            {"compute", j.paced ? "paced" : "native"},
            {"non_compute_share_pct", nan_or_null(j.non_compute_share_pct)},
            {"non_compute_mape_pct", nan_or_null(j.non_compute_mape_pct)},
            {"non_compute_mae_s", nan_or_null(j.non_compute_mae_s)},
            {"terms", terms_json(trials, j)},
            {"term_floor_pct", 100 * metrics::kTermFloor},
            {"kendall_tau_layouts_few", j.measured.size() < metrics::kFewForTau},
            {"mape_pct", nan_or_null(j.mape_pct)},
            {"kendall_tau", nan_or_null(j.kendall_tau)},
            {"top1_regret_pct", nan_or_null(j.top1_regret_pct)},
            {"explorer_pick", j.pick ? json(trials[*j.pick].label) : json(nullptr)},
            {"best_measured", j.best ? json(trials[*j.best].label) : json(nullptr)}}}};
}

}  // namespace sax::validation
