// Uneven inputs priced (explorer/uneven.hpp): inputs of the model's length give the replay's
// step; shorter sequences a shorter one; the DP rank that holds the most work sets the step, and
// the balanced placement of a skewed batch is priced no slower than the loader's order.
#include <gtest/gtest.h>

#include "explorer/uneven.hpp"
#include "tests/support/presets.hpp"

using namespace sax;
using namespace sax::explorer;

namespace {

struct Testbed {
  Cluster c = test::preset_cluster("local-2bld");
  Model m = test::preset_model("gpt-tiny");
  CostModel cost{c, m, CostParams::datasheet(c, m)};
};

UnevenForecast priced(const Testbed& s, const char* layout, const std::string& lengths, workload::Balance b) {
  const Layout l = load_layout(test::preset_path(std::string("layouts/") + layout + ".json"));
  return forecast_uneven(s.cost, CostSource{}, s.c, s.m, l, workload::place(s.c, s.m, l, parse_lengths(lengths), b));
}

}  // namespace

TEST(Uneven, FullLengthInputsGiveTheReplaysStep) {
  const Testbed s;
  for (const char* layout : {"local-dp4", "local-pp2-dp2", "local-tp2-pp2"}) {
    const UnevenForecast u = priced(s, layout, "uniform:min=256,max=256", workload::Balance::none);
    EXPECT_NEAR(u.step.step_time_s, u.even.step_time_s, 1e-9 * u.even.step_time_s) << layout;
    EXPECT_NEAR(u.step.breakdown.compute_s, u.even.breakdown.compute_s, 1e-9 * u.even.breakdown.compute_s) << layout;
  }
}

TEST(Uneven, TheBusiestDataParallelRankSetsTheStep) {
  const Testbed s;
  for (const char* layout : {"local-dp4", "local-pp2-dp2"}) {
    const UnevenForecast none = priced(s, layout, "lognormal:median=48,sigma=1.0", workload::Balance::none);
    const UnevenForecast balanced = priced(s, layout, "lognormal:median=48,sigma=1.0", workload::Balance::balanced);
    EXPECT_LT(none.step.step_time_s, none.even.step_time_s) << layout;  // shorter sequences than the model's
    double slowest = 0;
    for (double t : none.dp_step_s) slowest = std::max(slowest, t);
    EXPECT_DOUBLE_EQ(none.step.step_time_s, slowest) << layout;
    EXPECT_EQ(none.dp_step_s[static_cast<std::size_t>(none.slowest_dp)], slowest) << layout;
    EXPECT_LT(balanced.step.step_time_s, none.step.step_time_s) << layout;
    EXPECT_NEAR(balanced.step.breakdown.total(), balanced.step.step_time_s, 1e-9 * balanced.step.step_time_s);
  }
}

// Each stage's DP group syncs on its own slowest rank: without a pipeline that is the slowest
// replica (the wait is its step less each one's); with one, the critical stage's ranks differ by
// their own blocks, and the slowest replica's rank there is idle for exactly its replay's bubble.
TEST(Uneven, TheDataParallelWaitIsOnTheCriticalStagesSync) {
  const Testbed s;
  const UnevenForecast dp = priced(s, "local-dp4", "lognormal:median=48,sigma=1.0", workload::Balance::none);
  double wait = 0;
  for (double t : dp.dp_step_s) wait += dp.step.step_time_s - t;
  EXPECT_NEAR(dp.dp_wait_mean_s(), wait / static_cast<double>(dp.dp_step_s.size()), 1e-9 * dp.step.step_time_s);
  EXPECT_GT(dp.dp_wait_mean_s(), 0.0);
  const UnevenForecast pp = priced(s, "local-pp2-dp2", "lognormal:median=48,sigma=1.0", workload::Balance::none);
  ASSERT_EQ(pp.critical_idle_s.size(), 2u);
  EXPECT_NEAR(pp.critical_idle_s[static_cast<std::size_t>(pp.slowest_dp)], pp.step.bubble_s,
              1e-9 * pp.step.step_time_s);
  EXPECT_LE(pp.bubble_s(), pp.step.breakdown.bubble_s + 1e-12);
}

// explore --lengths: every balancer asked for is priced, the fastest kept, and the layouts ordered
// by it; with the model's length on every sequence, every balancer gives the even step.
TEST(Uneven, TheSearchKeepsEachLayoutsFastestBalancer) {
  const Testbed s;
  std::vector<Ranked> ranked;
  for (const char* name : {"local-dp4", "local-pp2-dp2", "local-tp2-dp2"}) {
    const Layout l = load_layout(test::preset_path(std::string("layouts/") + name + ".json"));
    ranked.push_back({Candidate::of(l, s.c), s.cost.predict(l)});
  }
  const std::vector<workload::Balance> all = {workload::Balance::none, workload::Balance::sorted,
                                              workload::Balance::balanced};
  const std::vector<UnevenRanked> u =
      rank_uneven(s.cost, CostSource{}, s.c, s.m, ranked, 2, parse_lengths("lognormal:median=48,sigma=1.0"), all);
  ASSERT_EQ(u.size(), 2u);  // the first two only
  for (const UnevenRanked& r : u) {
    ASSERT_EQ(r.choices.size(), 3u);
    for (const UnevenChoice& k : r.choices) {
      EXPECT_LE(r.pick().step_s, k.step_s);
      EXPECT_GE(k.placing_s, 0.0);
      EXPECT_GE(k.imbalance_s, 0.0);
    }
    EXPECT_LT(r.pick().step_s, r.even_step_s);  // shorter sequences than the model's
  }
  EXPECT_LE(u[0].pick().step_s, u[1].pick().step_s);
  const std::vector<UnevenRanked> even =
      rank_uneven(s.cost, CostSource{}, s.c, s.m, ranked, 1, parse_lengths("uniform:min=256,max=256"), all);
  for (const UnevenChoice& k : even.front().choices) {
    EXPECT_NEAR(k.step_s - k.placing_s, even.front().even_step_s, 1e-9 * even.front().even_step_s);
    EXPECT_NEAR(k.imbalance_s, 0.0, 1e-9 * k.step_s);
  }
}

// The step's terms on the critical stage, averaged over the DP ranks, add up to the step.
TEST(Uneven, TheMeanRanksTermsSumToTheStep) {
  const Testbed s;
  for (const char* layout : {"local-dp4", "local-pp2-dp2"}) {
    const UnevenForecast u = priced(s, layout, "lognormal:median=48,sigma=1.0", workload::Balance::none);
    EXPECT_NEAR(u.mean_rank.total(), u.step.step_time_s, 1e-9 * u.step.step_time_s) << layout;
    EXPECT_LT(u.token_share, 1.0) << layout;
    const Layout l = load_layout(test::preset_path(std::string("layouts/") + layout + ".json"));
    const Prediction p = uneven_prediction(s.cost.predict(l), u);
    EXPECT_DOUBLE_EQ(p.step_time_s, u.step.step_time_s) << layout;
    EXPECT_DOUBLE_EQ(p.breakdown.bubble_s, u.mean_rank.bubble_s) << layout;
  }
}
