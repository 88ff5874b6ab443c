// `sax explore` and `sax predict` on clusters whose buildings differ: the balanced
// split, the stages, and the two baselines the explorer sets the best beside.
#include <gtest/gtest.h>

#include <map>

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

// predict --lengths: the step with uneven inputs beside the even one, on a cluster whose buildings
// differ too (each stage on its own device), in the text and the JSON; a bad spec or balance is
// one line and exit 2.
TEST(HeteroCli, PredictPricesUnevenInputs) {
  TempDir t;
  const std::string layout = "predict --cluster " + preset_path("clusters/local-2bld-slow.json") + " --model " +
                             preset_path("models/gpt-tiny.json") + " --layout " +
                             preset_path("layouts/local-pp2-dp2.json");
  const std::string base = layout + " --lengths lognormal:median=48,sigma=1.0";
  std::map<std::string, double> step;
  for (const std::string b : {"none", "balanced"}) {
    const std::string out = t.file(b + ".json");
    auto r = run_sax(base + " --balance " + b + " --json " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("  inputs        lognormal:median=48,sigma=1.0, balance " + b + ": step "), std::string::npos)
        << r.out;
    const json j = json::parse(sax::test::slurp(out));
    step[b] = j["inputs"]["step_time_s"].get<double>();
    EXPECT_LT(step[b], j["inputs"]["even_step_time_s"].get<double>()) << "shorter sequences than the model's";
    EXPECT_EQ(j["inputs"]["dp_step_time_s"].size(), 2u);  // DP2
  }
  EXPECT_LT(step["balanced"], step["none"]);
  for (const auto& [args, why] :
       {std::pair{base + " --balance lpt", "--balance: expected none, sorted or balanced"},
        std::pair{layout + " --lengths lognormal:median=48", "--lengths: lognormal needs sigma"}}) {
    auto r = run_sax(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << args << ": " << r.err;
  }
}

// explore --lengths and --straggler: the listed layouts priced under uneven inputs with every
// balancer and under a slowed building, in the text and the JSON; bad flags are one line, exit 2.
TEST(HeteroCli, ExplorePricesUnevenInputsAndAStraggler) {
  TempDir t;
  const std::string base = "explore --cluster " + preset_path("clusters/local-2bld.json") + " --model " +
                           preset_path("models/gpt-tiny.json") + " --top 3";
  const std::string out = t.file("x.json");
  auto r = run_sax(base + " --lengths lognormal:median=48,sigma=1.0 --straggler bld-b:1.5 --json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("under uneven inputs: lognormal:median=48,sigma=1.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("straggler: building 1 (bld-b) 1.5x slower"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("recommended for #1: "), std::string::npos) << r.out;
  const json j = json::parse(sax::test::slurp(out));
  ASSERT_EQ(j["uneven"]["ranking"].size(), 3u);
  for (const json& row : j["uneven"]["ranking"]) {
    EXPECT_EQ(row["by_balance"].size(), 3u);
    EXPECT_EQ(row["step_time_s"], row["by_balance"][row["best_balance"].get<std::string>()]["step_time_s"]);
  }
  ASSERT_EQ(j["straggler"]["layouts"].size(), 3u);
  for (const json& y : j["straggler"]["layouts"])
    EXPECT_GT(y["slowed_step_time_s"].get<double>(), y["step_time_s"].get<double>());
  EXPECT_EQ(j["straggler"]["building"], "bld-b");
  for (const auto& [args, why] :
       {std::pair{base + " --straggler bld-z:1.2", "--straggler: expected one of the cluster's buildings (bld-a, "},
        std::pair{base + " --straggler 1:0.5", "--straggler: expected BUILDING:FACTOR"},
        std::pair{base + " --balance sorted", "--balance: needs --lengths with lengths that differ"},
        std::pair{base + " --lengths lognormal:median=48,sigma=1 --balance lpt",
                  "--balance: expected none, sorted, balanced or all"}}) {
    auto e = run_sax(args);
    EXPECT_EQ(e.code, 2) << args << ": " << e.err;
    EXPECT_NE(e.err.find(why), std::string::npos) << args << ": " << e.err;
  }
}

// explore --link-priority: every candidate priced with that traffic class, said in the header, in
// the JSON's inputs and in each listed layout (which predict then prices the same); a bad list
// is one line, exit 2.
TEST(HeteroCli, ExplorePricesEveryCandidateWithTheLinkPriority) {
  TempDir t;
  const std::string base = "explore --cluster " + preset_path("clusters/local-4bld.json") + " --model " +
                           preset_path("models/gpt-tiny.json") + " --top 3";
  const std::string out = t.file("x.json");
  auto r = run_sax(base + " --link-priority pp,cp --json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("link priority: cp,pp ahead of the other parallelisms' messages on the boundary"),
            std::string::npos)
      << r.out;
  const json j = json::parse(sax::test::slurp(out));
  EXPECT_EQ(j["inputs"]["link_priority"], "cp,pp");
  ASSERT_EQ(j["candidates"].size(), 3u);
  for (const json& y : j["candidates"]) EXPECT_EQ(y["layout"]["schedule"]["link_priority"], json({"cp", "pp"}));
  const std::string layout = t.write("first.json", j["candidates"][0]["layout"]);
  auto p =
      run_sax("predict --cluster " + preset_path("clusters/local-4bld.json") + " --model " +
              preset_path("models/gpt-tiny.json") + " --layout " + layout + " --replay --json " + t.file("p.json"));
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NEAR(json::parse(sax::test::slurp(t.file("p.json")))["predicted"]["step_time_s"].get<double>(),
              j["candidates"][0]["predicted"]["step_time_s"].get<double>(), 1e-9);
  for (const char* bad : {"pp,pp", "pp,", "dp_grad", ""}) {
    auto e = run_sax(base + " --link-priority '" + bad + "'");
    EXPECT_EQ(e.code, 2) << bad << ": " << e.err;
    EXPECT_NE(e.err.find("--link-priority: expected distinct parallelisms among tp, cp, ep, dp, pp"), std::string::npos)
        << bad << ": " << e.err;
  }
}
