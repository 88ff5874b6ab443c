// The straggler what-if (explorer/straggler.hpp): a slowed building costs every layout with ranks
// in it; moving the stage boundaries never prices worse than leaving them; bad --straggler text is
// refused naming what was expected.
#include <gtest/gtest.h>

#include "explorer/straggler.hpp"
#include "spec/error.hpp"
#include "tests/support/presets.hpp"

using namespace sax;
using namespace sax::explorer;

TEST(Straggler, ParsesABuildingByNameOrIndex) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Straggler by_index = parse_straggler("1:1.2", c);
  EXPECT_EQ(by_index.building, 1);
  EXPECT_DOUBLE_EQ(by_index.factor, 1.2);
  EXPECT_EQ(parse_straggler(c.buildings[0].name + ":2", c).building, 0);
  EXPECT_DOUBLE_EQ(slowed(c, by_index).buildings[1].compute_slowdown, 1.2 * c.buildings[1].compute_slowdown);
  for (const char* bad : {"1", ":1.2", "1:0.5", "1:x", "1:", "7:1.2", "nowhere:1.2", "1:2000"})
    EXPECT_THROW(parse_straggler(bad, c), UsageError) << bad;
}

TEST(Straggler, ASlowBuildingCostsEveryLayoutAndMovingBoundariesNeverHurts) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  const ExploreRequest q{c, m, CostSource{}, 6, 50, 1};
  const Exploration x = explore(q);
  const StragglerWhatIf w = straggler_what_if(q, x, parse_straggler("1:1.5", c), 6);
  ASSERT_EQ(w.layouts.size(), std::min<std::size_t>(6, x.ranking->result.top.size()));
  for (const StragglerLayout& y : w.layouts) {
    EXPECT_GT(y.slowed_s, y.base_s) << y.index;  // every layout of 4 ranks has two in building 1
    EXPECT_LE(y.moved_s, y.slowed_s) << y.index;
  }
  ASSERT_FALSE(w.research.ranking->result.top.empty());
  EXPECT_GT(w.recommended_s(), 0.0);
  EXPECT_LE(w.recommended_s(), w.layouts.front().slowed_s);
  if (w.recommended() == StragglerWhatIf::Mitigation::none)
    EXPECT_DOUBLE_EQ(w.recommended_s(), w.layouts.front().slowed_s);
  else
    EXPECT_LT(w.recommended_s(), w.layouts.front().slowed_s);
  // A pipeline across the two buildings gives the one twice as slow a layer of its two fewer.
  const Layout pp = load_layout(test::preset_path("layouts/local-pp2-dp2.json"));
  const std::unique_ptr<Forecast> f = forecast(slowed(c, parse_straggler("1:2", c)), m, pp, CostSource{}, true);
  EXPECT_LT(f->balanced.prediction.step_time_s, f->predicted.step_time_s);
}
