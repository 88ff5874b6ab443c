// `sax predict --cluster C --model M --layout L [--calibration K] [--json FILE] [--emit
// megatron|torchtitan] [--framework megatron-core|torchtitan|any] [--lengths SPEC --balance B]`: one layout's predicted
// step time with its full breakdown, memory per device and MFU, and what the framework would run otherwise; --emit
// prints the layout as the framework's settings instead.
#include <iostream>
#include <memory>
#include <optional>

#include "cli/commands.hpp"
#include "cli/explorer_inputs.hpp"
#include "cli/json_out.hpp"
#include "explorer/explore.hpp"

namespace sax::cli {

namespace {

struct PredictArgs {
  std::string cluster, model, layout, calibration, json_file, emit, framework, lengths = "fixed", balance = "none";
  bool replay = false;
};

void run_predict(const PredictArgs& a) {
  const std::optional<explorer::EmitFormat> emit = emit_format(a.emit);
  const explorer::Framework framework = framework_of(a.framework, emit);
  const Cluster c = load_cluster(a.cluster);
  const Model m = load_model(a.model);
  const Layout l = load_layout(a.layout);
  validate_layout(l, m, c, a.layout);
  const LengthSpec lengths = parse_lengths(a.lengths, "--lengths");
  const std::optional<workload::Balance> b = workload::parse_balance(a.balance);
  if (!b) throw UsageError("--balance: expected none, sorted or balanced, got \"" + safe_text(a.balance) + "\"");
  const workload::Balance balance = *b;
  if (!a.json_file.empty()) check_writable(a.json_file);  // before anything is printed
  const CalibrationFile k(a.calibration);
  const explorer::InputFiles in{a.cluster, a.model, a.layout, a.calibration, "", ""};
  const auto f = explorer::forecast(c, m, l, k.source(), a.replay);
  if (emit) {
    // The settings alone on stdout, to paste or redirect; --json still gets the prediction.
    std::cout << explorer::emit(*emit, l, m, c);
  } else {
    std::cout << explorer::forecast_text(in, c, m, l, *f) << explorer::method_text(c, l, *f, a.replay);
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
  // --lengths: the step with uneven inputs, placed as `sax run` places them.
  json uneven = nullptr;
  if (lengths.uneven()) {
    const workload::StepInputs inputs = workload::place(c, m, l, lengths, balance);
    const explorer::UnevenForecast u = explorer::forecast_uneven(*f->cost, k.source(), c, m, l, inputs);
    if (!emit) std::cout << explorer::uneven_text(lengths, balance, u);
    uneven = explorer::uneven_json(lengths, balance, u);
  }
  if (!a.json_file.empty()) {
    json j = explorer::forecast_json(in, l, *f);
    if (!uneven.is_null()) j["inputs"] = uneven;
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
  cmd->add_option("--lengths", a->lengths,
                  "Price uneven inputs: the data's sample lengths as `sax run --lengths` takes them (each DP rank's "
                  "pipeline replayed at its micro-batches' lengths)")
      ->capture_default_str();
  cmd->add_option("--balance", a->balance, "With --lengths: none, sorted or balanced, as `sax run --balance`")
      ->capture_default_str();
  cmd->add_flag("--replay", a->replay,
                "Run the schedule block by block (uneven stages, zero bubble with unequal F/B/W) instead of the "
                "closed forms");
  cmd->callback([a] { run_predict(*a); });
}

}  // namespace sax::cli
