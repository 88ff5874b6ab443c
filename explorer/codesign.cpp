#include "explorer/codesign.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "explorer/hetero.hpp"
#include "explorer/ranking.hpp"
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

std::string amount_text(double x) {
  const char* units[] = {"", "K", "M", "B", "T"};
  int u = 0;
  while (std::abs(x) >= 1000 && u < 4) x /= 1000, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, x >= 100 ? "%.0f" : x >= 10 ? "%.1f" : "%.2f", x);
  return buf + std::string(units[u]);
}

namespace {

// One cell: its variant, excluded with the reason or searched for its best layout.
CodesignRow search_cell(const CodesignInput& in, std::int64_t experts, std::int64_t topk) {
  CodesignRow r;
  r.variant = derive_variant(in.base, experts, topk, in.budget);
  if (!r.variant.model) {
    r.excluded = r.variant.why_not;
    return r;
  }
  const Model& m = *r.variant.model;
  if (in.max_total_params > 0 && m.params_total() > in.max_total_params) {
    r.excluded = amount_text(m.params_total()) + " total parameters, over --max-total-params";
    return r;
  }
  SearchOptions o;
  o.top = in.replay_top;
  o.framework = in.framework;
  const CostSource source{in.calibration.get(), in.calibration_file, nullptr};
  const auto ranking = rank_layouts(in.cluster, m, source, o, static_cast<std::size_t>(in.replay_top));
  r.searched = true;
  if (ranking->result.top.empty() || !ranking->result.top.front().prediction.feasible) {
    r.excluded = "no layout fits in memory";
    return r;
  }
  r.fits = true;
  r.best = ranking->result.top.front();
  r.dominant = breakdown_terms(r.best.prediction.breakdown).front().second;
  if (in.loss)
    r.loss = in.loss->loss(m.params_active(), sparsity(m), in.loss->training_tokens(r.best.prediction.tokens_per_s));
  return r;
}

// The term `r` loses the most time in against `q` (both fit), and by how much.
Beaten beaten_by(const std::vector<CodesignRow>& rows, std::size_t r, std::size_t q) {
  Beaten b{r, q, "", -1};
  const auto mine = breakdown_terms(rows[r].best.prediction.breakdown),
             theirs = breakdown_terms(rows[q].best.prediction.breakdown);
  for (const auto& [v, n] : mine)
    for (const auto& [w, o] : theirs)
      if (n == o && v - w > b.seconds) b.seconds = v - w, b.term = n;
  return b;
}

// The Pareto set among the variants that fit: without a loss model, tokens/s and total
// parameters (capacity) both up; with one, predicted loss down and total parameters down. Marks
// the rows on it and returns, for each off it, the one on it that beats it.
std::vector<Beaten> mark_pareto(std::vector<CodesignRow>& rows, bool by_loss) {
  std::vector<std::size_t> fit;
  std::vector<double> x, y;
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].fits) {
      const Model& m = *rows[i].variant.model;
      fit.push_back(i);
      x.push_back(by_loss ? -rows[i].loss : rows[i].best.prediction.tokens_per_s);
      y.push_back(by_loss ? -m.params_total() : m.params_total());
    }
  // Total parameters within 0.5 % are one size (the router's h x E apart, or the width's rounding).
  constexpr double kSameSize = 0.005;
  const std::vector<bool> front = pareto_front(x, y, kSameSize);
  for (std::size_t j = 0; j < fit.size(); ++j) rows[fit[j]].pareto = front[j];
  std::vector<Beaten> beaten;
  for (std::size_t j = 0; j < fit.size(); ++j) {
    if (front[j]) continue;
    std::size_t by = j;
    for (std::size_t i = 0; i < fit.size() && by == j; ++i)
      if (front[i] && x[i] >= x[j] && y[i] >= y[j] - kSameSize * std::abs(y[j])) by = i;
    beaten.push_back(beaten_by(rows, fit[j], fit[by]));
  }
  return beaten;
}

}  // namespace

CodesignResult codesign(const CodesignInput& in) {
  CodesignResult out;
  const auto start = std::chrono::steady_clock::now();
  for (std::int64_t e : in.experts)
    for (std::int64_t k : in.topks) out.rows.push_back(search_cell(in, e, k));
  out.search_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.beaten = mark_pareto(out.rows, in.loss.has_value());
  return out;
}

}  // namespace sax::explorer
