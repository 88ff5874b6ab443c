// MoE co-design (`sax codesign`): the expert count, the router's top-k and the expert width
// chosen with the layout. Each variant of a base model keeps the active parameters (or the
// training FLOPs per token) on a budget by its expert width; each is searched for its best layout
// on the cluster; the variants no other beats on two figures at once form the Pareto set.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "explorer/cost_model.hpp"
#include "explorer/framework.hpp"
#include "explorer/search.hpp"
#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "spec/model.hpp"

namespace sax::explorer {

// What each variant keeps: its active parameters, or its training FLOPs per token (Megatron's
// convention, Model::training_flops_per_token), at `value`.
struct CodesignBudget {
  enum class Kind { active_params, active_flops } kind = Kind::active_params;
  double value = 0;
  const char* name() const { return kind == Kind::active_params ? "active parameters" : "training FLOPs per token"; }
  double of(const Model& m) const {
    return kind == Kind::active_params ? m.params_active() : m.training_flops_per_token();
  }
};

// One cell of the grid: the base model with `experts` experts, top-`topk` routing, every MoE layer
// of the base (every layer, for a dense base) and the expert width that keeps the budget. Both the
// parameters and the FLOPs are affine in the expert width (Model's own counts), so the width is
// solved from two of its values; `why_not` says why a cell has no
// variant (top-k above the expert count, a budget the rest of the model already spends). The width
// is a multiple of 128 (every TP degree up to 128 divides it, as Megatron needs) wherever that
// keeps the budget within 0.5 %, else of the largest power of two that does.
struct Variant {
  std::int64_t experts = 0, topk = 0;
  std::optional<Model> model;
  std::string why_not;
  double budget_error = 0;  // (the variant's figure − the budget) / the budget
};
Variant derive_variant(const Model& base, std::int64_t experts, std::int64_t topk, const CodesignBudget& budget);

// Sparsity: the share of the expert parameters a token does not use, 1 − top-k / experts.
inline double sparsity(const Model& m) {
  return m.num_experts > 0 ? 1.0 - static_cast<double>(m.moe_router_topk) / static_cast<double>(m.num_experts) : 0.0;
}

// A parametric scaling law the user gives (`--loss-model FILE`; nothing is fitted here):
//   L(N, S, D) = e + a / N_eff^alpha + b / D^beta,   N_eff = N · (1 − S)^(−gamma)
// with N the active parameters, S the sparsity, D the training tokens: a Chinchilla-form law
// whose parameter term sees sparsity as a multiplier on the active parameters (gamma = 0: none).
// Its budget: a wall-clock time on this cluster (D = tokens/s × time) or a token count.
struct LossModel {
  std::string source;
  double e = 0, a = 0, alpha = 0, b = 0, beta = 0, gamma = 0;
  double wall_clock_hours = 0;  // one of these two is > 0
  double tokens = 0;
  double training_tokens(double tokens_per_s) const {
    return tokens > 0 ? tokens : tokens_per_s * wall_clock_hours * 3600.0;
  }
  double loss(double active_params, double sparsity, double training_tokens) const;
};
LossModel read_loss_model(const json& value, const std::string& file);
LossModel load_loss_model(const std::string& file);

// The Pareto set: element i is on it when no other element is at least as good on both
// objectives and better on one. `a` and `b` are to be maximised (negate to minimise); on `b`,
// values within `b_tolerance` of each other (relative) count as equal (total parameters that
// differ by the router's few alone are the same size).
std::vector<bool> pareto_front(const std::vector<double>& a, const std::vector<double>& b, double b_tolerance = 0);

// A count for people in three figures: 950, 1.30B, 12.5T.
std::string amount_text(double x);

// The co-design search: every cell of experts x top-k derived on the budget, searched for its best
// layout on the cluster (datasheet prices, the best `replay_top` replayed), and the Pareto set.
struct CodesignInput {
  const Cluster& cluster;
  const Model& base;
  std::vector<std::int64_t> experts, topks;
  CodesignBudget budget;
  double max_total_params = 0;  // 0: no limit
  std::optional<LossModel> loss;
  int replay_top = 10;
  Framework framework = Framework::any;  // each cell searched for what it runs as priced
  // Each variant priced with this calibration's terms (null: the datasheet's), `calibration_file`
  // named as their source.
  std::shared_ptr<const Calibration> calibration;
  std::string calibration_file;
};

struct CodesignRow {
  Variant variant;
  bool searched = false, fits = false;
  Ranked best;
  std::string dominant, excluded;
  double loss = NAN;
  bool pareto = false;
};

// A variant off the Pareto set beside one on it that beats it on both axes: the term it loses the
// most time in against that one.
struct Beaten {
  std::size_t row = 0, by = 0;  // indices into rows
  std::string term;
  double seconds = 0;
};

struct CodesignResult {
  std::vector<CodesignRow> rows;  // experts-major, as given
  std::vector<Beaten> beaten;     // in row order
  double search_seconds = 0;
};

CodesignResult codesign(const CodesignInput& in);

}  // namespace sax::explorer
