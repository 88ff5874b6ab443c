// `sax codesign` end to end: bad grids, budgets and loss models exit 2 with one line naming the
// flag or the field; a small grid on the CPU testbed gives every cell a line and the JSON the
// Pareto set.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/support/run.hpp"

using nlohmann::json;
using sax::test::preset_path;
using sax::test::run_sax;
using sax::test::TempDir;

namespace {

const std::string kBase =
    "codesign --cluster " + preset_path("clusters/local-2bld.json") + " --model " + preset_path("models/moe-tiny.json");

void expect_usage(const std::string& args, const std::string& names) {
  auto r = run_sax(kBase + " " + args);
  EXPECT_EQ(r.code, 2) << args << ": " << r.err;
  EXPECT_NE(r.err.find(names), std::string::npos) << args << ": " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace

TEST(CodesignCli, BadGridsAndBudgetsNameTheFlag) {
  expect_usage("--experts 8,x", "--experts: expected a comma-separated list");
  expect_usage("--experts 0,8", "--experts: expected");
  expect_usage("--experts 8,8",
               "--experts: expected a comma-separated list of integers from 1 to 1048576, each once, got 8 twice");
  expect_usage("--experts 8,", "--experts: expected");
  expect_usage("--topk 1,,2", "--topk: expected");
  expect_usage("--topk 2.5", "--topk: expected");
  expect_usage("--active-params -5", "--active-params: expected a number above 0");
  expect_usage("--active-flops 1e400", "--active-flops: expected a number above 0");
  expect_usage("--active-params 1e9 --active-flops 1e10", "--active-flops: one budget");
  expect_usage("--max-total-params lots", "--max-total-params: expected");
  expect_usage("--experts " + std::string("1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17") +
                   " --topk 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
               "--experts x --topk: expected at most 256 cells");
}

TEST(CodesignCli, ALossModelWithABadFieldNamesIt) {
  TempDir t;
  json l = json::parse(sax::test::slurp(preset_path("loss/chinchilla-dense.json")));
  l["alpha"] = -1;
  const std::string file = t.write("loss.json", l);
  auto r = run_sax(kBase + " --experts 2,4 --topk 1 --loss-model " + file);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(file + ": /alpha: expected"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(CodesignCli, ASmallGridOnTheTestbed) {
  TempDir t;
  const std::string out = t.file("codesign.json");
  auto r = run_sax(kBase + " --experts 2,4,8 --topk 1,2,4 --json " + out + " --loss-model " +
                   preset_path("loss/chinchilla-dense.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("E2 k4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("excluded: top-4 of 2 experts"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the Pareto set"), std::string::npos) << r.out;
  const json j = json::parse(sax::test::slurp(out));
  ASSERT_EQ(j["variants"].size(), 9u);
  int pareto = 0;
  for (const json& v : j["variants"]) {
    if (v.contains("excluded")) continue;
    EXPECT_LE(std::abs(v["budget_error"].get<double>()), 0.01) << v.dump();
    EXPECT_TRUE(v.contains("predicted_loss")) << v.dump();
    pareto += v["pareto"].get<bool>() ? 1 : 0;
  }
  EXPECT_GE(pareto, 1);
  EXPECT_EQ(j["pareto_axes"][0], "predicted_loss (lower)");
}

// With a calibration each variant is priced with its terms: the repository's own from published
// runs (H100 compute slower than the datasheet's) makes the same cell's best step slower, and the
// output names it; a calibration that is not one is refused naming it.
TEST(CodesignCli, ACalibrationPricesEveryVariant) {
  TempDir t;
  const std::string base = "codesign --cluster " + preset_path("clusters/h100-3bld.json") + " --model " +
                           preset_path("models/mixtral-8x7b.json") + " --experts 8 --topk 2 --replay-top 1 --json ";
  auto d = run_sax(base + t.file("d.json"));
  auto c = run_sax(base + t.file("c.json") + " --calibration " + preset_path("calibrations/published.json"));
  ASSERT_EQ(d.code, 0) << d.err;
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("calibration: "), std::string::npos) << c.out;
  const double ds =
      json::parse(sax::test::slurp(t.file("d.json")))["variants"][0]["predicted"]["step_time_s"].get<double>();
  const double cal =
      json::parse(sax::test::slurp(t.file("c.json")))["variants"][0]["predicted"]["step_time_s"].get<double>();
  EXPECT_GT(cal, ds * 1.02) << "the published runs' H100 is slower than its datasheet";
  auto bad = run_sax(base + t.file("b.json") + " --calibration " + t.write("k.json", json{{"kind", "cluster"}}));
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("k.json"), std::string::npos) << bad.err;
}
