#include "explorer/codesign.hpp"

#include <cmath>

#include "spec/bounds.hpp"
#include "spec/error.hpp"

namespace sax::explorer {

Variant derive_variant(const Model& base, std::int64_t experts, std::int64_t topk, const CodesignBudget& budget) {
  Variant v;
  v.experts = experts, v.topk = topk;
  if (topk > experts) {
    v.why_not = "top-" + std::to_string(topk) + " of " + std::to_string(experts) + " experts";
    return v;
  }
  Model m = base;
  m.name = base.name + "-e" + std::to_string(experts) + "-k" + std::to_string(topk);
  m.num_experts = experts;
  m.moe_router_topk = topk;
  if (!base.is_moe()) m.moe_layer_pattern.assign(static_cast<std::size_t>(base.num_layers), true);
  // The budget's figure is affine in the expert width: two widths give its line.
  auto at = [&](std::int64_t width) {
    m.moe_ffn_hidden_size = width;
    return budget.of(m);
  };
  const double lo = at(1), hi = at(1025), slope = (hi - lo) / 1024.0;
  const double width = 1.0 + (budget.value - lo) / slope;
  if (!(width >= 1.0)) {
    v.why_not = "the rest of the model already spends the budget of " + std::to_string(budget.value) + " " +
                budget.name() + " (one-wide experts need " + std::to_string(lo) + ")";
    return v;
  }
  if (width > static_cast<double>(kMaxSize)) {
    v.why_not = "an expert width past 2^40";
    return v;
  }
  // A width every TP degree divides (Megatron: TP divides the FFN width): the nearest multiple of
  // 128 where that keeps the budget within 0.5 %, else of the largest power of two that does.
  for (std::int64_t granule = 128; granule >= 1; granule /= 2) {
    const std::int64_t w =
        std::max<std::int64_t>(granule, std::llround(width / static_cast<double>(granule)) * granule);
    v.budget_error = (at(w) - budget.value) / budget.value;
    if (std::abs(v.budget_error) <= 0.005 || granule == 1) break;
  }
  v.model = std::move(m);
  return v;
}

double LossModel::loss(double n, double s, double d) const {
  const double n_eff = n * std::pow(1.0 - s, -gamma);
  return e + a / std::pow(n_eff, alpha) + b / std::pow(d, beta);
}

LossModel read_loss_model(const json& value, const std::string& file) {
  Fields f(value, file, "");
  f.choice("kind", {"loss_model"}, "loss_model");
  f.allow("comment");
  LossModel l;
  l.source = f.string("source");
  if (l.source.empty()) f.fail("source", "where the coefficients come from (a paper, a fit of your own)");
  f.choice("form", {"chinchilla_sparse"}, "chinchilla_sparse");
  l.e = f.nonnegative("e");
  l.a = f.nonnegative("a");
  l.alpha = f.number("alpha", 0.0);
  l.b = f.nonnegative("b");
  l.beta = f.number("beta", 0.0);
  l.gamma = f.nonnegative("gamma");
  if (l.alpha > 10) f.fail("alpha", "an exponent in (0, 10], got " + std::to_string(l.alpha));
  if (l.beta > 10) f.fail("beta", "an exponent in (0, 10], got " + std::to_string(l.beta));
  if (l.gamma > 10) f.fail("gamma", "an exponent in [0, 10], got " + std::to_string(l.gamma));
  {
    Fields b(f.object("budget"), file, f.path_of("budget"));
    const bool hours = b.has("wall_clock_hours"), tokens = b.has("tokens");
    if (hours == tokens)
      throw InputError(file, f.path_of("budget"), "one of wall_clock_hours (time on this cluster) or tokens");
    if (hours) {
      l.wall_clock_hours = b.number("wall_clock_hours", 0.0);
      if (l.wall_clock_hours > 1e6) b.fail("wall_clock_hours", "at most 1e6 hours (over a century)");
    } else {
      l.tokens = b.number("tokens", 0.0);
      if (l.tokens > 1e18) b.fail("tokens", "at most 1e18 tokens");
    }
    b.finish();
  }
  f.finish();
  return l;
}

LossModel load_loss_model(const std::string& file) { return read_loss_model(load_json_file(file), file); }

std::vector<bool> pareto_front(const std::vector<double>& a, const std::vector<double>& b, double b_tolerance) {
  std::vector<bool> on(a.size(), true);
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double slack = b_tolerance * std::abs(b[i]);
    for (std::size_t j = 0; j < a.size() && on[i]; ++j)
      if (j != i && a[j] >= a[i] && b[j] >= b[i] - slack && (a[j] > a[i] || b[j] > b[i] + slack)) on[i] = false;
  }
  return on;
}

}  // namespace sax::explorer
