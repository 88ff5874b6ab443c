// `sax explore` and `sax predict` on clusters whose buildings differ: the balanced
// split, the stages, and the two baselines the explorer sets the best beside.
#include <gtest/gtest.h>

#include "tests/support/run.hpp"

using nlohmann::json;
using sax::test::preset_path;
using sax::test::run_sax;
using sax::test::TempDir;

TEST(HeteroCli, ExploreBalancesTheBestAndBeatsBothBaselines) {
  TempDir t;
  const std::string out = t.file("explore.json");
  auto r = run_sax("explore --cluster " + preset_path("clusters/mixed-3bld.json") + " --model " +
                   preset_path("models/llama3-70b.json") + " --top 3 --json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("buildings differ: ranked by the uniform-cluster rule"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best against the even split"), std::string::npos) << r.out;
  const json j = json::parse(sax::test::slurp(out));
  const double best = j["candidates"][0]["predicted"]["step_time_s"].get<double>();
  // The balanced best is no slower than its even split or than the uniform rule's pick, each
  // priced on the cluster as it is.
  EXPECT_LE(best, j["heterogeneous"]["even_split_step_time_s"].get<double>());
  EXPECT_LE(best, j["heterogeneous"]["uniform_rule_pick_step_time_s"].get<double>());
  EXPECT_EQ(j["heterogeneous"]["uniform_rule_device"], "A100 SXM4 80GB");
  const std::string why = j["candidates"][0]["why"];
  EXPECT_NE(why.find("layers per stage"), std::string::npos) << why;
  EXPECT_NE(why.find("sets the pace"), std::string::npos) << why;
}

TEST(HeteroCli, PredictShowsEachStageAndTheBalancedSplit) {
  TempDir t;
  const std::string out = t.file("predict.json");
  auto r = run_sax("predict --cluster " + preset_path("clusters/local-2bld-slow.json") + " --model " +
                   preset_path("models/gpt-tiny.json") + " --layout " + preset_path("layouts/local-pp2-dp2.json") +
                   " --json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("stage 1       bld-b, paced-cpu-4 at 1/2 speed: 2 layers"), std::string::npos) << r.out;
  const json j = json::parse(sax::test::slurp(out));
  EXPECT_EQ(j["heterogeneous"]["balanced_pipeline_layout"], "E,t*3|t*1,L");
  EXPECT_LT(j["heterogeneous"]["balanced_step_time_s"].get<double>(), j["predicted"]["step_time_s"].get<double>());
  // The balanced layout, given, is its own balance.
  auto b =
      run_sax("predict --cluster " + preset_path("clusters/local-2bld-slow.json") + " --model " +
              preset_path("models/gpt-tiny.json") + " --layout " + preset_path("layouts/local-pp2-dp2-balanced.json"));
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_NE(b.out.find("no other split of the layers over the stages is faster"), std::string::npos) << b.out;
}
