// MoE co-design (explorer/codesign.hpp): variants keep their budget, the Pareto set by hand, the
// loss model's formula and its file's errors.
#include <gtest/gtest.h>

#include <cmath>

#include "explorer/codesign.hpp"
#include "tests/support/input_error.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using namespace sax::explorer;
using sax::test::preset_path;

TEST(Codesign, EveryVariantKeepsTheBudgetWithinOnePercent) {
  const Model base = load_model(preset_path("models/mixtral-8x7b.json"));
  for (auto kind : {CodesignBudget::Kind::active_params, CodesignBudget::Kind::active_flops}) {
    CodesignBudget budget{kind, 0};
    budget.value = budget.of(base);
    for (std::int64_t e : {8, 16, 32, 64, 128, 256})
      for (std::int64_t k : {1, 2, 4, 8}) {
        const Variant v = derive_variant(base, e, k, budget);
        ASSERT_TRUE(v.model) << e << " " << k << ": " << v.why_not;
        EXPECT_EQ(v.model->num_experts, e);
        EXPECT_EQ(v.model->moe_router_topk, k);
        EXPECT_LE(std::abs(budget.of(*v.model) / budget.value - 1), 0.01) << budget.name() << " E" << e << " k" << k;
        EXPECT_NEAR(v.budget_error, budget.of(*v.model) / budget.value - 1, 1e-12);
        EXPECT_EQ(v.model->moe_ffn_hidden_size % 128, 0) << "E" << e << " k" << k;  // every TP degree divides it
      }
  }
  // The base's own cell is the base: Mixtral's 8 experts, top-2, 14336 wide.
  CodesignBudget own{CodesignBudget::Kind::active_params, base.params_active()};
  EXPECT_EQ(derive_variant(base, 8, 2, own).model->moe_ffn_hidden_size, 14336);
  // Twice the top-k at the same budget: experts of half the width.
  EXPECT_EQ(derive_variant(base, 8, 4, own).model->moe_ffn_hidden_size, 14336 / 2);
}

TEST(Codesign, ADenseBaseBecomesMoEInEveryLayer) {
  const Model base = load_model(preset_path("models/llama3-8b.json"));
  CodesignBudget budget{CodesignBudget::Kind::active_params, base.params_active()};
  const Variant v = derive_variant(base, 16, 2, budget);
  ASSERT_TRUE(v.model);
  EXPECT_EQ(v.model->num_moe_layers(), base.num_layers);
  EXPECT_LE(std::abs(v.budget_error), 0.01);
  // By hand: the dense MLPs are 32 x 3 x 4096 x 14336 = 5.64 B of the 8.03 B; 16 experts of half
  // that width are 8 such MLPs: 8.03 - 5.64 + 8 x 5.64 = 47.5 B (the router's 2 M aside).
  const double mlps = 32.0 * 3 * 4096 * 14336;
  EXPECT_NEAR(v.model->params_total(), base.params_total() - mlps + 8 * mlps, 0.01 * v.model->params_total());
}

TEST(Codesign, CellsWithoutAVariantSayWhy) {
  const Model base = load_model(preset_path("models/mixtral-8x7b.json"));
  CodesignBudget budget{CodesignBudget::Kind::active_params, base.params_active()};
  const Variant over = derive_variant(base, 4, 8, budget);
  EXPECT_FALSE(over.model);
  EXPECT_EQ(over.why_not, "top-8 of 4 experts");
  budget.value = 1e6;  // less than the attention alone
  const Variant poor = derive_variant(base, 8, 2, budget);
  EXPECT_FALSE(poor.model);
  EXPECT_NE(poor.why_not.find("already spends the budget"), std::string::npos) << poor.why_not;
}

TEST(Codesign, TheParetoSetByHand) {
  // (a, b) both up: (1,5) (2,4) (3,3) are each best somewhere; (2,2) loses to (2,4), (1,1) to all.
  EXPECT_EQ(pareto_front({1, 2, 3, 2, 1}, {5, 4, 3, 2, 1}), (std::vector<bool>{true, true, true, false, false}));
  // Equal points do not beat each other.
  EXPECT_EQ(pareto_front({2, 2, 1}, {2, 2, 1}), (std::vector<bool>{true, true, false}));
  EXPECT_EQ(pareto_front({}, {}), std::vector<bool>{});
  // Within 0.5 % on b the sizes are equal: the faster of two near-equal sizes wins.
  EXPECT_EQ(pareto_front({7, 6}, {100, 100.2}, 0.005), (std::vector<bool>{true, false}));
  EXPECT_EQ(pareto_front({7, 6}, {100, 100.2}), (std::vector<bool>{true, true}));
}

TEST(Codesign, TheLossModelsFormulaByHand) {
  const LossModel l = load_loss_model(preset_path("loss/chinchilla-dense.json"));
  EXPECT_NE(l.source.find("Hoffmann"), std::string::npos);
  EXPECT_DOUBLE_EQ(l.wall_clock_hours, 720);
  // N 1e9, D 2e10: 1.69 + 406.4 / 1148.2 + 410.7 / 765.9 = 1.69 + 0.3540 + 0.5362 = 2.580.
  EXPECT_NEAR(l.loss(1e9, 0.0, 2e10), 2.580, 0.002);
  EXPECT_DOUBLE_EQ(l.loss(1e9, 0.75, 2e10), l.loss(1e9, 0.0, 2e10));  // gamma 0: sparsity not credited
  LossModel g = l;
  g.gamma = 1;  // sparsity 0.75 counts the active parameters four times
  EXPECT_DOUBLE_EQ(g.loss(1e9, 0.75, 2e10), l.loss(4e9, 0.0, 2e10));
  EXPECT_DOUBLE_EQ(l.training_tokens(1e6), 1e6 * 720 * 3600);
}

TEST(Codesign, ALossModelsBadFieldNamesItsPath) {
  const json good = load_json_file(preset_path("loss/chinchilla-dense.json"));
  auto path = [&](auto edit) {
    json j = good;
    edit(j);
    return sax::test::input_error([&] { read_loss_model(j, "l.json"); }).path();
  };
  EXPECT_EQ(path([](json& j) { j.erase("source"); }), "/source");
  EXPECT_EQ(path([](json& j) { j["source"] = ""; }), "/source");
  EXPECT_EQ(path([](json& j) { j["kind"] = "model"; }), "/kind");
  EXPECT_EQ(path([](json& j) { j["form"] = "kaplan"; }), "/form");
  EXPECT_EQ(path([](json& j) { j["alpha"] = -0.3; }), "/alpha");
  EXPECT_EQ(path([](json& j) { j["beta"] = 11; }), "/beta");
  EXPECT_EQ(path([](json& j) { j["e"] = "1.69"; }), "/e");
  EXPECT_EQ(path([](json& j) { j["gamma"] = -1; }), "/gamma");
  EXPECT_EQ(path([](json& j) { j["budget"]["tokens"] = 1e12; }), "/budget");
  EXPECT_EQ(path([](json& j) { j["budget"] = json::object(); }), "/budget");
  EXPECT_EQ(path([](json& j) { j["budget"]["wall_clock_hours"] = 0; }), "/budget/wall_clock_hours");
  EXPECT_EQ(path([](json& j) { j["temperature"] = 1; }), "/temperature");
}
