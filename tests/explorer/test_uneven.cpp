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
