// `sax codesign --cluster C --model M --experts 8,16,... --topk 1,2,... [--active-params N |
// --active-flops F] [--max-total-params P] [--loss-model L] [--json FILE] [--plot FILE]`: MoE
// variants of a base model on one budget, each with its best layout on the cluster
// (explorer/codesign.hpp), and the Pareto set.
#include "explorer/codesign.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/explorer_inputs.hpp"
#include "cli/json_out.hpp"
#include "cli/plots.hpp"
#include "explorer/codesign_report.hpp"

namespace sax::cli {

namespace {

struct CodesignArgs {
  std::string cluster, model, calibration, experts = "8,16,32,64,128,256", topk = "1,2,4,8", active_params,
                                           active_flops, framework, max_total_params, loss_model, json_file, plot;
  int replay_top = 10;
};

// At most this many cells: each is a search of its own.
constexpr std::size_t kMaxCells = 256;

// "8,16,32": integers in [1, 2^20], each once; else a UsageError naming the flag.
std::vector<std::int64_t> parse_grid(const std::string& flag, const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream in(text);
  std::string item;
  const std::string expected = flag + ": expected a comma-separated list of integers from 1 to 1048576, each once";
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 1 || v > (1 << 20))
      throw UsageError(expected + ", got \"" + safe_text(text) + "\"");
    if (std::find(out.begin(), out.end(), v) != out.end())
      throw UsageError(expected + ", got " + std::to_string(v) + " twice");
    out.push_back(v);
  }
  if (out.empty() || text.back() == ',') throw UsageError(expected + ", got \"" + safe_text(text) + "\"");
  return out;
}

// A positive count of parameters or FLOPs ("1.3e10"), at most 1e18.
double parse_amount(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || !std::isfinite(v) || v <= 0 || v > 1e18)
    throw UsageError(flag + ": expected a number above 0 and at most 1e18 (e.g. 1.3e10), got \"" + safe_text(text) +
                     "\"");
  return v;
}

// The budget the flags give, or the base model's own (value 0 until the model is read).
explorer::CodesignBudget budget_of(const CodesignArgs& a) {
  if (!a.active_flops.empty())
    return {explorer::CodesignBudget::Kind::active_flops, parse_amount("--active-flops", a.active_flops)};
  if (!a.active_params.empty())
    return {explorer::CodesignBudget::Kind::active_params, parse_amount("--active-params", a.active_params)};
  return {};
}

void run_codesign(const CodesignArgs& a) {
  const std::vector<std::int64_t> experts = parse_grid("--experts", a.experts), topks = parse_grid("--topk", a.topk);
  if (experts.size() * topks.size() > kMaxCells)
    throw UsageError("--experts x --topk: expected at most " + std::to_string(kMaxCells) +
                     " cells (each a search), got " + std::to_string(experts.size() * topks.size()));
  if (!a.active_params.empty() && !a.active_flops.empty())
    throw UsageError("--active-flops: one budget, not both --active-params and --active-flops");
  if (a.replay_top < 1 || a.replay_top > kMaxReplayTop)
    throw UsageError("--replay-top: expected a number of layouts from 1 to " + std::to_string(kMaxReplayTop) +
                     ", got " + std::to_string(a.replay_top));
  const double max_total = a.max_total_params.empty() ? 0 : parse_amount("--max-total-params", a.max_total_params);
  const explorer::Framework framework = framework_of(a.framework, std::nullopt);
  explorer::CodesignBudget budget = budget_of(a);
  if (!a.json_file.empty()) check_writable(a.json_file);
  if (!a.plot.empty()) check_writable(a.plot);
  const Cluster c = load_cluster(a.cluster);
  const Model base = load_model(a.model);
  if (budget.value == 0) budget.value = budget.of(base);  // the base model's own
  explorer::CodesignInput in{c,         base,    experts, topks, budget, max_total, std::nullopt, a.replay_top,
                             framework, nullptr, ""};
  if (!a.loss_model.empty()) in.loss = explorer::load_loss_model(a.loss_model);
  if (!a.calibration.empty())
    in.calibration = std::make_shared<const Calibration>(load_calibration(a.calibration)),
    in.calibration_file = a.calibration;

  const explorer::CodesignResult r = explorer::codesign(in);
  const bool loss = in.loss.has_value();
  std::fputs(explorer::codesign_header(in, !a.active_params.empty() || !a.active_flops.empty()).c_str(), stdout);
  std::fputs((explorer::codesign_table(r, loss) + explorer::codesign_pareto(r, loss)).c_str(), stdout);
  if (a.json_file.empty() && a.plot.empty()) return;
  const std::string file = a.json_file.empty() ? a.plot + ".json" : a.json_file;
  write_json_file(file, explorer::codesign_json({a.cluster, a.model, a.loss_model}, in, r));
  if (!a.plot.empty()) run_plot_script({"codesign", file, "--out", a.plot});
}

}  // namespace

void add_codesign(CLI::App& app) {
  auto a = std::make_shared<CodesignArgs>();
  CLI::App* cmd = app.add_subcommand(
      "codesign", "MoE co-design: expert count x top-k on one budget, each variant's best layout, the Pareto set");
  cmd->add_option("--cluster", a->cluster, "Cluster file")->required();
  cmd->add_option("--model", a->model, "Base model file (dense or MoE)")->required();
  cmd->add_option("--calibration", a->calibration, "Calibration file (default: datasheet values)");
  cmd->add_option("--experts", a->experts, "Expert counts, comma-separated")->capture_default_str();
  cmd->add_option("--topk", a->topk, "Router top-k values, comma-separated")->capture_default_str();
  cmd->add_option("--active-params", a->active_params,
                  "Active parameters each variant keeps (default: the base model's)");
  cmd->add_option("--active-flops", a->active_flops, "Or: training FLOPs per token each variant keeps");
  cmd->add_option("--max-total-params", a->max_total_params, "Leave out variants with more total parameters");
  cmd->add_option("--loss-model", a->loss_model,
                  "A scaling law's coefficients (JSON naming its source): rank by predicted loss after its budget");
  cmd->add_option("--replay-top", a->replay_top, "Per variant, re-rank the best K by the replay")
      ->capture_default_str();
  cmd->add_option("--framework", a->framework,
                  "Search each variant for what this framework runs as priced: megatron-core, torchtitan or any "
                  "(default any)");
  cmd->add_option("--json", a->json_file, "Write every variant as JSON");
  cmd->add_option("--plot", a->plot, "Write the Pareto plot (PNG) to FILE");
  cmd->callback([a] { run_codesign(*a); });
}

}  // namespace sax::cli
