// `sax codesign --cluster C --model M --experts 8,16,... --topk 1,2,... [--active-params N |
// --active-flops F] [--max-total-params P] [--loss-model L] [--json FILE] [--plot FILE]`: MoE
// variants of a base model on one budget, each with its best layout on the cluster
// (explorer/codesign.hpp), and the Pareto set.
#include "explorer/codesign.hpp"

#include <chrono>
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
#include "explorer/hetero.hpp"
#include "explorer/report.hpp"

namespace sax::cli {

namespace {

struct CodesignArgs {
  std::string cluster, model, experts = "8,16,32,64,128,256", topk = "1,2,4,8", active_params, active_flops,
                              max_total_params, loss_model, json_file, plot;
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

struct Row {
  explorer::Variant variant;
  bool searched = false, fits = false;
  explorer::Ranked best;
  std::string dominant, excluded;
  double loss = NAN;
  bool pareto = false;
};

std::string human(double x) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (std::abs(x) >= 1000 && u < 4) x /= 1000, ++u;
  return fmt(x >= 100 ? "%.0f" : x >= 10 ? "%.1f" : "%.2f", x) + units[u];
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
  explorer::CodesignBudget budget;
  if (!a.active_flops.empty())
    budget = {explorer::CodesignBudget::Kind::active_flops, parse_amount("--active-flops", a.active_flops)};
  else if (!a.active_params.empty())
    budget = {explorer::CodesignBudget::Kind::active_params, parse_amount("--active-params", a.active_params)};
  if (!a.json_file.empty()) check_writable(a.json_file);
  if (!a.plot.empty()) check_writable(a.plot);
  const Cluster c = load_cluster(a.cluster);
  const Model base = load_model(a.model);
  if (budget.value == 0) budget.value = budget.of(base);  // the base model's own
  std::optional<explorer::LossModel> loss;
  if (!a.loss_model.empty()) loss = explorer::load_loss_model(a.loss_model);

  const auto start = std::chrono::steady_clock::now();
  std::vector<Row> rows;
  for (std::int64_t e : experts)
    for (std::int64_t k : topks) {
      Row r;
      r.variant = explorer::derive_variant(base, e, k, budget);
      if (!r.variant.model) {
        r.excluded = r.variant.why_not;
      } else if (max_total > 0 && r.variant.model->params_total() > max_total) {
        r.excluded = human(r.variant.model->params_total()) + " total parameters, over --max-total-params";
      } else {
        explorer::SearchOptions o;
        o.top = a.replay_top;
        const Model& m = *r.variant.model;
        const auto ranking = explorer::rank_layouts(c, m, params_for(m, ""), o, static_cast<std::size_t>(a.replay_top));
        r.searched = true;
        if (!ranking->result.top.empty() && ranking->result.top.front().prediction.feasible) {
          r.fits = true;
          r.best = ranking->result.top.front();
          r.dominant = explorer::breakdown_terms(r.best.prediction.breakdown).front().second;
          if (loss)
            r.loss = loss->loss(m.params_active(), explorer::sparsity(m),
                                loss->training_tokens(r.best.prediction.tokens_per_s));
        } else {
          r.excluded = "no layout fits in memory";
        }
      }
      rows.push_back(std::move(r));
    }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The Pareto set among the variants that fit: without a loss model, tokens/s and total
  // parameters (capacity) both up; with one, predicted loss down and total parameters down.
  std::vector<std::size_t> fit;
  std::vector<double> x, y;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].fits) {
      const Model& m = *rows[i].variant.model;
      fit.push_back(i);
      x.push_back(loss ? -rows[i].loss : rows[i].best.prediction.tokens_per_s);
      y.push_back(loss ? -m.params_total() : m.params_total());
    }
  // Total parameters within 0.5 % are one size (the router's h x E apart, or the width's rounding).
  constexpr double kSameSize = 0.005;
  const std::vector<bool> front = explorer::pareto_front(x, y, kSameSize);
  for (std::size_t j = 0; j < fit.size(); ++j) rows[fit[j]].pareto = front[j];

  std::printf("codesign %s on %s (%lld devices): %zu experts x %zu top-k, each variant's %s at %s (%s)\n",
              base.name.c_str(), c.name.c_str(), static_cast<long long>(c.world_size()), experts.size(), topks.size(),
              budget.name(), human(budget.value).c_str(),
              a.active_params.empty() && a.active_flops.empty() ? "the base model's" : "given");
  if (loss)
    std::printf("  loss model: %s; after %s\n", loss->source.c_str(),
                loss->tokens > 0 ? (human(loss->tokens) + " tokens").c_str()
                                 : (fmt("%g", loss->wall_clock_hours) + " hours on this cluster").c_str());
  std::printf("  %-3s %-9s %-6s %-7s %-7s %-6s %-9s %-11s %-6s %-7s %-14s %s\n", "", "variant", "width", "total",
              "active", "sparse", "step", "tokens/s", "MFU", "memory", "dominant", "best layout");
  for (const Row& r : rows) {
    const std::string name = "E" + std::to_string(r.variant.experts) + " k" + std::to_string(r.variant.topk);
    if (!r.fits) {
      std::printf("  %-3s %-9s %s\n", "", name.c_str(),
                  (r.searched ? "(" + human(r.variant.model->params_total()) + " total) " : std::string())
                      .append("excluded: " + r.excluded)
                      .c_str());
      continue;
    }
    const Model& m = *r.variant.model;
    const explorer::Prediction& p = r.best.prediction;
    std::printf("  %-3s %-9s %-6lld %-7s %-7s %-6s %-9s %-11s %-6s %-7s %-14s %s%s\n", r.pareto ? "*" : "",
                name.c_str(), static_cast<long long>(m.moe_ffn_hidden_size), human(m.params_total()).c_str(),
                human(m.params_active()).c_str(), fmt("%.1f%%", 100 * explorer::sparsity(m)).c_str(),
                fmt("%.4g s", p.step_time_s).c_str(), fmt("%.4g", p.tokens_per_s).c_str(),
                fmt("%.1f%%", 100 * p.mfu).c_str(), fmt("%.1fG", p.memory_gib).c_str(), r.dominant.c_str(),
                explorer::describe_degrees(r.best.candidate).c_str(),
                loss ? (" — loss " + fmt("%.4f", r.loss)).c_str() : "");
  }
  std::printf(
      "  * the Pareto set: no other variant is %s; %zu of %zu cells searched in %.2f s\n",
      loss ? "lower in predicted loss and in total parameters at once"
           : "faster in tokens/s and larger in total "
             "parameters at once",
      static_cast<std::size_t>(std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.searched; })),
      rows.size(), seconds);
  // Why the others lose: each variant off the Pareto set beside one on it that beats it on both
  // axes: its dominant term, and the term it loses the most time in against that one.
  for (std::size_t j = 0; j < fit.size(); ++j) {
    if (front[j]) continue;
    std::size_t by = j;
    for (std::size_t i = 0; i < fit.size() && by == j; ++i)
      if (front[i] && x[i] >= x[j] && y[i] >= y[j] - kSameSize * std::abs(y[j])) by = i;
    const Row &r = rows[fit[j]], &q = rows[fit[by]];
    const auto mine = explorer::breakdown_terms(r.best.prediction.breakdown),
               theirs = explorer::breakdown_terms(q.best.prediction.breakdown);
    std::string worst;
    double most = -1;
    for (const auto& [v, n] : mine)
      for (const auto& [w, o] : theirs)
        if (n == o && v - w > most) most = v - w, worst = n;
    std::printf(
        "  E%lld k%lld loses to E%lld k%lld: %s is %.0f%% of its step; its step is %+.3g s, most in %s (%+.3g s)\n",
        static_cast<long long>(r.variant.experts), static_cast<long long>(r.variant.topk),
        static_cast<long long>(q.variant.experts), static_cast<long long>(q.variant.topk), r.dominant.c_str(),
        100 * mine.front().first / r.best.prediction.step_time_s,
        r.best.prediction.step_time_s - q.best.prediction.step_time_s, worst.c_str(), most);
  }

  if (!a.json_file.empty() || !a.plot.empty()) {
    json variants = json::array();
    for (const Row& r : rows) {
      json v = {{"experts", r.variant.experts}, {"topk", r.variant.topk}, {"pareto", r.pareto}};
      if (r.variant.model) {
        const Model& m = *r.variant.model;
        v["moe_ffn_hidden_size"] = m.moe_ffn_hidden_size;
        v["total_params"] = m.params_total();
        v["active_params"] = m.params_active();
        v["training_flops_per_token"] = m.training_flops_per_token();
        v["sparsity"] = explorer::sparsity(m);
        v["budget_error"] = r.variant.budget_error;
      }
      if (r.fits) {
        v["layout"] = to_json(r.best.candidate.to_layout(c));
        v["predicted"] = explorer::to_json(r.best.prediction);
        v["dominant_term"] = r.dominant;
        if (loss) v["predicted_loss"] = r.loss;
      } else {
        v["excluded"] = r.excluded;
      }
      variants.push_back(v);
    }
    json j = {{"version", 1},
              {"inputs",
               {{"cluster", a.cluster},
                {"model", a.model},
                {"budget", {{"kind", budget.name()}, {"value", budget.value}}},
                {"max_total_params", max_total > 0 ? json(max_total) : json(nullptr)},
                {"loss_model", a.loss_model.empty() ? json(nullptr) : json(a.loss_model)},
                {"loss_source", loss ? json(loss->source) : json(nullptr)}}},
              {"pareto_axes", loss ? json::array({"predicted_loss (lower)", "total_params (lower)"})
                                   : json::array({"tokens_per_s (higher)", "total_params (higher)"})},
              {"search_seconds", seconds},
              {"variants", variants}};
    const std::string file = a.json_file.empty() ? a.plot + ".json" : a.json_file;
    write_json_file(file, j);
    if (!a.plot.empty()) run_plot_script({"codesign", file, "--out", a.plot});
  }
}

}  // namespace

void add_codesign(CLI::App& app) {
  auto a = std::make_shared<CodesignArgs>();
  CLI::App* cmd = app.add_subcommand(
      "codesign", "MoE co-design: expert count x top-k on one budget, each variant's best layout, the Pareto set");
  cmd->add_option("--cluster", a->cluster, "Cluster file")->required();
  cmd->add_option("--model", a->model, "Base model file (dense or MoE)")->required();
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
  cmd->add_option("--json", a->json_file, "Write every variant as JSON");
  cmd->add_option("--plot", a->plot, "Write the Pareto plot (PNG) to FILE");
  cmd->callback([a] { run_codesign(*a); });
}

}  // namespace sax::cli
