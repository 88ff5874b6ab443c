// `sax predict --cluster C --model M --layout L [--calibration K] [--json FILE] [--emit
// megatron|torchtitan] [--framework megatron-core|torchtitan|any]`: one layout's predicted step
// time with its full breakdown, memory per device and MFU, and what the framework would run
// otherwise; --emit prints the layout as the framework's settings instead.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.hpp"
#include "cli/explorer_inputs.hpp"
#include "cli/json_out.hpp"
#include "explorer/explore.hpp"
#include "explorer/quantities.hpp"
#include "spec/provenance.hpp"

namespace sax::cli {

namespace {

struct PredictArgs {
  std::string cluster, model, layout, calibration, json_file, emit, framework;
  bool replay = false;
};

void print_report(const PredictArgs& a, const Cluster& c, const Model& m, const Layout& l,
                  const explorer::CostModel& cm, const explorer::Prediction& p, const std::string& why) {
  std::cout << "prediction for " << a.layout << " on " << c.name << " (" << c.world_size() << " devices) with "
            << m.name << " — " << cm.params().source << "\n";
  auto list = [](const std::vector<std::string>& terms) {
    std::string s;
    for (const auto& t : terms) s += (s.empty() ? "" : "; ") + t;
    return s;
  };
  if (!cm.params().calibrated_terms.empty())
    std::cout << "  calibrated    " << list(cm.params().calibrated_terms) << "\n"
              << "  datasheet     " << list(cm.params().datasheet_terms) << "\n";
  // A calibrated efficiency curve holds between the FLOPs it measured and is clamped beyond:
  // say so where this layout's ops lie outside.
  if (!a.calibration.empty()) {
    const explorer::terms::CurveReads r = explorer::terms::curve_reads(m, explorer::Candidate::of(l, c));
    auto outside = [](const char* name, const EfficiencyCurve& curve, double lo, double hi) {
      if (curve.points.empty() || hi <= 0) return;
      if (lo >= curve.points.front().flops * (1 - 1e-9) && hi <= curve.points.back().flops * (1 + 1e-9)) return;
      std::printf(
          "  extrapolated  %s efficiency: this layout's ops of %.3g-%.3g FLOPs lie outside the measured "
          "%.3g-%.3g (the curve's end value is used)\n",
          name, lo, hi, curve.points.front().flops, curve.points.back().flops);
    };
    const auto& k = cm.params();
    if (std::find(k.calibrated_terms.begin(), k.calibrated_terms.end(), "gemm efficiency") != k.calibrated_terms.end())
      outside("gemm", k.gemm, r.gemm_lo, r.gemm_hi);
    if (std::find(k.calibrated_terms.begin(), k.calibrated_terms.end(), "attention efficiency") !=
        k.calibrated_terms.end())
      outside("attention", k.attention, r.attention_lo, r.attention_hi);
  }
  print_prediction(explorer::Candidate::of(l, c), l, p, cm, c, why);
}

// Where buildings differ: the uniform rule's figure, the stages, and the balanced split; with
// --replay, the replay against the closed forms.
void print_method(const PredictArgs& a, const Cluster& c, const Layout& l, const explorer::Forecast& f) {
  const explorer::Prediction& p = f.predicted;
  if (f.hetero) {
    std::printf(
        "  buildings     differ: the uniform-cluster rule (every building on the slowest device, %s; every pair "
        "on the worst link) "
        "gives %.4g s; stage by stage on their own devices and links, replayed:\n",
        f.plan.device.name.c_str(), f.closed.step_time_s);
    print_stages(c, f.stages);
    if (f.balanced_candidate.pipeline_layout != explorer::Candidate::of(l, c).pipeline_layout)
      std::printf("  balanced      pipeline_model_parallel_layout \"%s\": %.4g s (%+.1f%% against this split)\n",
                  f.balanced_candidate.pipeline_layout.c_str(), f.balanced.prediction.step_time_s,
                  100 * (f.balanced.prediction.step_time_s / p.step_time_s - 1));
    else
      std::printf("  balanced      no other split of the layers over the stages is faster\n");
  } else if (a.replay)
    std::printf(
        "  replay        step %.4g s against the closed forms' %.4g s (%+.1f%%): each stage's blocks "
        "in the schedule's order, critical stage %lld\n",
        p.step_time_s, f.closed.step_time_s, 100 * (p.step_time_s / f.closed.step_time_s - 1),
        static_cast<long long>(p.critical_stage));
}

json prediction_json(const PredictArgs& a, const Layout& l, const explorer::Forecast& f) {
  const explorer::CostParams& k = f.cost->params();
  json j = {
      {"version", 1},
      {"provenance",
       provenance({{"cluster", a.cluster}, {"model", a.model}, {"layout", a.layout}, {"calibration", a.calibration}})},
      {"inputs",
       {{"cluster", a.cluster},
        {"model", a.model},
        {"layout", a.layout},
        {"calibration", a.calibration.empty() ? json(nullptr) : json(a.calibration)},
        {"cost_source", k.source},
        {"calibrated_terms", k.calibrated_terms},
        {"datasheet_terms", k.datasheet_terms}}},
      {"layout", to_json(l)},
      {"predicted", explorer::to_json(f.predicted)},
      {"method", f.method},
      {"closed_form_step_time_s", f.closed.step_time_s},
      {"why", f.why}};
  if (!f.hetero) return j;
  json st = json::array();
  for (const auto& s : f.stages.stages)
    st.push_back({{"buildings", s.buildings},
                  {"device", s.device},
                  {"layers", s.layers},
                  {"microbatch_s", s.microbatch_s},
                  {"memory_gib", s.memory_gib},
                  {"limit_gib", s.limit_gib}});
  j["heterogeneous"] = {{"uniform_rule_step_time_s", f.closed.step_time_s},
                        {"stages", st},
                        {"balanced_pipeline_layout", f.balanced_candidate.pipeline_layout},
                        {"balanced_step_time_s", f.balanced.prediction.step_time_s}};
  return j;
}

void run_predict(const PredictArgs& a) {
  const std::optional<explorer::EmitFormat> emit = emit_format(a.emit);
  const explorer::Framework framework = framework_of(a.framework, emit);
  const Cluster c = load_cluster(a.cluster);
  const Model m = load_model(a.model);
  const Layout l = load_layout(a.layout);
  validate_layout(l, m, c, a.layout);
  if (!a.json_file.empty()) check_writable(a.json_file);  // before anything is printed
  const CalibrationFile k(a.calibration);
  const auto f = explorer::forecast(c, m, l, k.source(), a.replay);
  if (emit) {
    // The settings alone on stdout, to paste or redirect; --json still gets the prediction.
    std::cout << explorer::emit(*emit, l, m, c);
  } else {
    print_report(a, c, m, l, *f->cost, f->predicted, f->why);
    print_method(a, c, l, *f);
  }
  // What the framework would run otherwise than priced (emit writes the same as `#` notes).
  std::vector<std::string> gaps;
  const bool as_predicted =
      framework == explorer::Framework::any || runs_as_predicted(framework, explorer::Candidate::of(l, c), c, &gaps);
  if (!emit && framework != explorer::Framework::any) {
    std::cout << "  framework     " << explorer::to_string(framework)
              << (as_predicted ? " runs this layout as predicted" : " would run this layout otherwise:") << "\n";
    for (const std::string& g : gaps) std::cout << "                - " << g << "\n";
  }
  if (!a.json_file.empty()) {
    json j = prediction_json(a, l, *f);
    if (framework != explorer::Framework::any)
      j["framework"] = {{"name", explorer::to_string(framework)}, {"runs_as_predicted", as_predicted}, {"gaps", gaps}};
    write_json_file(a.json_file, j);
  }
}

}  // namespace

void add_predict(CLI::App& app) {
  auto a = std::make_shared<PredictArgs>();
  CLI::App* cmd = app.add_subcommand("predict", "Predict one layout's step time with its breakdown");
  cmd->add_option("--cluster", a->cluster, "Cluster file")->required();
  cmd->add_option("--model", a->model, "Model file")->required();
  cmd->add_option("--layout", a->layout, "Layout file")->required();
  cmd->add_option("--calibration", a->calibration, "Calibration file (default: datasheet values)");
  cmd->add_option("--json", a->json_file, "Write the prediction as JSON to FILE");
  cmd->add_option("--emit", a->emit,
                  "Print the layout as Megatron-LM arguments or a torchtitan TOML section instead of the report");
  cmd->add_option("--framework", a->framework,
                  "Say what this framework's configuration would run otherwise than predicted: megatron-core, "
                  "torchtitan or any (default: --emit's framework, else any)");
  cmd->add_flag("--replay", a->replay,
                "Run the schedule block by block (uneven stages, zero bubble with unequal F/B/W) instead of the "
                "closed forms");
  cmd->callback([a] { run_predict(*a); });
}

}  // namespace sax::cli
