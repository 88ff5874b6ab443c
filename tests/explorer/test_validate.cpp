// What `sax validate` works out (explorer/validate.hpp), on cases worked by hand: which layouts
// of a ranking run, the prediction's parts in the testbed's terms, MAPE, Kendall's τ-b, top-1
// regret.
#include <gtest/gtest.h>

#include <cmath>

#include "explorer/validate.hpp"

using namespace sax;
using namespace sax::explorer;
namespace v = sax::explorer::validation;

TEST(ValidatePick, TheTopThenEvenlyDownTheRestToTheLast) {
  // 100 ranked, top 3, spread 3: the rest is 3..99 (97 layouts); steps of 96/3 = 32.
  EXPECT_EQ(v::pick(100, 3, 3), (std::vector<std::size_t>{0, 1, 2, 35, 67, 99}));
  EXPECT_EQ(v::pick(100, 0, 1), (std::vector<std::size_t>{99}));
  EXPECT_EQ(v::pick(100, 2, 0), (std::vector<std::size_t>{0, 1}));
}

TEST(ValidatePick, AShortRankingGivesEachLayoutOnce) {
  EXPECT_EQ(v::pick(3, 5, 4), (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(v::pick(5, 2, 10), (std::vector<std::size_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(v::pick(0, 4, 4).empty());
}

TEST(ValidateParts, ComputeHoldsRecomputeAndIdleIsTheBubble) {
  Prediction p;
  p.breakdown.compute_s = 1.0;
  p.breakdown.recompute_s = 0.25;
  p.breakdown.bubble_s = 0.5;
  p.breakdown.optimizer_s = 0.125;
  p.breakdown.exposed_comm_s[static_cast<int>(Dim::tp)] = 0.1;
  p.breakdown.exposed_comm_s[static_cast<int>(Dim::dp)] = 0.2;
  p.breakdown.exposed_comm_s[static_cast<int>(Dim::pp)] = 0.3;
  const v::Parts parts = v::predicted_parts(p);
  EXPECT_DOUBLE_EQ(parts[0], 1.0);    // compute, its recompute in it (as the testbed measures it)
  EXPECT_DOUBLE_EQ(parts[1], 0.125);  // optimizer
  EXPECT_DOUBLE_EQ(parts[2], 0.1);    // tp_comm
  EXPECT_DOUBLE_EQ(parts[5], 0.2);    // dp_comm
  EXPECT_DOUBLE_EQ(parts[6], 0.3);    // pp_comm
  EXPECT_DOUBLE_EQ(parts[7], 0.5);    // idle
  EXPECT_STREQ(v::kParts[7], "idle");
  // The part most off is the largest absolute difference, either way.
  v::Parts measured = parts;
  measured[2] = 0.5;   // tp_comm 0.4 more
  measured[7] = 0.05;  // idle 0.45 less
  EXPECT_EQ(v::worst_part(parts, measured), 7u);
}

TEST(ValidateStats, MapeIsTheMeanAbsoluteError) {
  const std::vector<v::Outcome> o = {{1.1, 1.0}, {0.8, 1.0}, {2.0, 2.0}};
  EXPECT_NEAR(v::error_pct(o[0]), 10, 1e-9);
  EXPECT_NEAR(v::error_pct(o[1]), -20, 1e-9);
  EXPECT_NEAR(v::mape_pct(o), 10, 1e-9);
  EXPECT_TRUE(std::isnan(v::mape_pct({})));
}

TEST(ValidateStats, KendallTauBCountsConcordantAndDiscordantPairs) {
  // Same order: 1; reversed: −1.
  EXPECT_DOUBLE_EQ(v::kendall_tau({{1, 10}, {2, 20}, {3, 30}, {4, 40}}), 1);
  EXPECT_DOUBLE_EQ(v::kendall_tau({{1, 40}, {2, 30}, {3, 20}, {4, 10}}), -1);
  // One swapped pair of 6: (5 − 1) / 6.
  EXPECT_NEAR(v::kendall_tau({{1, 10}, {2, 30}, {3, 20}, {4, 40}}), 4.0 / 6, 1e-12);
  // A tie in the predictions: pairs 6, ties 1: (5 − 0) / √(5·6).
  EXPECT_NEAR(v::kendall_tau({{1, 10}, {1, 20}, {3, 30}, {4, 40}}), 5 / std::sqrt(30.0), 1e-12);
  EXPECT_TRUE(std::isnan(v::kendall_tau({{1, 10}})));
  EXPECT_TRUE(std::isnan(v::kendall_tau({{1, 10}, {1, 20}})));
}

TEST(ValidateStats, TopOneRegretIsHowMuchSlowerThePredictedFastestRan) {
  // Predicted fastest (0.9) ran 1.2; fastest measured 1.0: 20 % regret.
  EXPECT_NEAR(v::top1_regret_pct({{1.0, 1.0}, {0.9, 1.2}, {1.5, 1.4}}), 20, 1e-9);
  EXPECT_DOUBLE_EQ(v::top1_regret_pct({{0.5, 1.0}, {0.9, 1.2}}), 0);
}
