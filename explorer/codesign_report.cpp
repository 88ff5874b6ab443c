#include "explorer/codesign_report.hpp"

#include <algorithm>
#include <cstdio>

#include "explorer/report.hpp"
#include "spec/number_text.hpp"
#include "spec/provenance.hpp"

namespace sax::explorer {

std::string codesign_table(const CodesignResult& r, bool loss) {
  std::string s =
      printf_text("  %-3s %-9s %-6s %-7s %-7s %-6s %-9s %-11s %-6s %-7s %-14s %s\n", "", "variant", "width", "total",
                  "active", "sparse", "step", "tokens/s", "MFU", "memory", "dominant", "best layout");
  for (const CodesignRow& row : r.rows) {
    const std::string name = printf_text("E%lld k%lld", static_cast<long long>(row.variant.experts),
                                         static_cast<long long>(row.variant.topk));
    if (!row.fits) {
      s +=
          printf_text("  %-3s %-9s %s\n", "", name.c_str(),
                      (row.searched ? "(" + amount_text(row.variant.model->params_total()) + " total) " : std::string())
                          .append("excluded: " + row.excluded)
                          .c_str());
      continue;
    }
    const Model& m = *row.variant.model;
    const Prediction& p = row.best.prediction;
    s += printf_text("  %-3s %-9s %-6lld %-7s %-7s %-6s %-9s %-11s %-6s %-7s %-14s %s%s\n", row.pareto ? "*" : "",
                     name.c_str(), static_cast<long long>(m.moe_ffn_hidden_size), amount_text(m.params_total()).c_str(),
                     amount_text(m.params_active()).c_str(), printf_text("%.1f%%", 100 * sparsity(m)).c_str(),
                     printf_text("%.4g s", p.step_time_s).c_str(), printf_text("%.4g", p.tokens_per_s).c_str(),
                     printf_text("%.1f%%", 100 * p.mfu).c_str(), printf_text("%.1fG", p.memory_gib).c_str(),
                     row.dominant.c_str(), describe_degrees(row.best.candidate).c_str(),
                     loss ? (" — loss " + printf_text("%.4f", row.loss)).c_str() : "");
  }
  return s;
}

std::string codesign_pareto(const CodesignResult& r, bool loss) {
  std::string s = printf_text(
      "  * the Pareto set: no other variant is %s; %zu of %zu cells searched in %.2f s\n",
      loss ? "lower in predicted loss and in total parameters at once"
           : "faster in tokens/s and larger in total "
             "parameters at once",
      static_cast<std::size_t>(std::count_if(r.rows.begin(), r.rows.end(), [](const auto& x) { return x.searched; })),
      r.rows.size(), r.search_seconds);
  for (const Beaten& b : r.beaten) {
    const CodesignRow &x = r.rows[b.row], &q = r.rows[b.by];
    s += printf_text(
        "  E%lld k%lld loses to E%lld k%lld: %s is %.0f%% of its step; its step is %+.3g s, most in %s (%+.3g s)\n",
        static_cast<long long>(x.variant.experts), static_cast<long long>(x.variant.topk),
        static_cast<long long>(q.variant.experts), static_cast<long long>(q.variant.topk), x.dominant.c_str(),
        100 * breakdown_terms(x.best.prediction.breakdown).front().first / x.best.prediction.step_time_s,
        x.best.prediction.step_time_s - q.best.prediction.step_time_s, b.term.c_str(), b.seconds);
  }
  return s;
}

json to_json(const CodesignRow& r, const Cluster& c, bool loss) {
  json v = {{"experts", r.variant.experts}, {"topk", r.variant.topk}, {"pareto", r.pareto}};
  if (r.variant.model) {
    const Model& m = *r.variant.model;
    v["moe_ffn_hidden_size"] = m.moe_ffn_hidden_size;
    v["total_params"] = m.params_total();
    v["active_params"] = m.params_active();
    v["training_flops_per_token"] = m.training_flops_per_token();
    v["sparsity"] = sparsity(m);
    v["budget_error"] = r.variant.budget_error;
  }
  if (r.fits) {
    v["layout"] = sax::to_json(r.best.candidate.to_layout(c));
    v["predicted"] = to_json(r.best.prediction);
    v["dominant_term"] = r.dominant;
    if (loss) v["predicted_loss"] = r.loss;
  } else {
    v["excluded"] = r.excluded;
  }
  return v;
}

std::string codesign_header(const CodesignInput& in, bool budget_given) {
  const Cluster& c = in.cluster;
  std::string s = printf_text(
      "codesign %s on %s (%lld devices): %zu experts x %zu top-k, each variant's %s at %s (%s)\n", in.base.name.c_str(),
      c.name.c_str(), static_cast<long long>(c.world_size()), in.experts.size(), in.topks.size(), in.budget.name(),
      amount_text(in.budget.value).c_str(), budget_given ? "given" : "the base model's");
  if (in.loss)
    s += printf_text("  loss model: %s; after %s\n", in.loss->source.c_str(),
                     (in.loss->tokens > 0 ? amount_text(in.loss->tokens) + " tokens"
                                          : printf_text("%g", in.loss->wall_clock_hours) + " hours on this cluster")
                         .c_str());
  if (in.calibration)
    s += printf_text("  calibration: %s (its terms in place of the datasheet's)\n", in.calibration_file.c_str());
  return s;
}

json codesign_json(const CodesignFiles& files, const CodesignInput& in, const CodesignResult& r) {
  const bool loss = in.loss.has_value();
  json variants = json::array();
  for (const CodesignRow& row : r.rows) variants.push_back(to_json(row, in.cluster, loss));
  auto named = [](const std::string& f) { return f.empty() ? json(nullptr) : json(f); };
  return {{"version", 1},
          {"provenance", provenance({{"cluster", files.cluster},
                                     {"model", files.model},
                                     {"calibration", in.calibration_file},
                                     {"loss_model", files.loss_model}})},
          {"inputs",
           {{"cluster", files.cluster},
            {"model", files.model},
            {"calibration", named(in.calibration_file)},
            {"framework", to_string(in.framework)},
            {"budget", {{"kind", in.budget.name()}, {"value", in.budget.value}}},
            {"max_total_params", in.max_total_params > 0 ? json(in.max_total_params) : json(nullptr)},
            {"loss_model", named(files.loss_model)},
            {"loss_source", loss ? json(in.loss->source) : json(nullptr)}}},
          {"pareto_axes", loss ? json::array({"predicted_loss (lower)", "total_params (lower)"})
                               : json::array({"tokens_per_s (higher)", "total_params (higher)"})},
          {"search_seconds", r.search_seconds},
          {"variants", variants}};
}

}  // namespace sax::explorer
