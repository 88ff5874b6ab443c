// The regression gate on synthetic samples with noise like this machine's (log-normal jitter
// plus rare multi-millisecond stalls): identical distributions never flag over many seeds, a
// 10 % slowdown always does, and a real results file with its times scaled by 1.1 flags.
#include <gtest/gtest.h>

#include <random>

#include "harness/regress.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"
#include "tests/support/run.hpp"

using namespace sax::harness;

namespace {

// busbw samples: base / (jitter · stall).
std::vector<double> noisy_busbw(std::mt19937& rng, int n, double base, double slowdown = 1.0) {
  std::lognormal_distribution<double> jitter(0.0, 0.15);
  std::bernoulli_distribution stall(0.05);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) out.push_back(base / (slowdown * jitter(rng) * (stall(rng) ? 20.0 : 1.0)));
  return out;
}

}  // namespace

TEST(RegressUnit, ToleranceParsing) {
  EXPECT_DOUBLE_EQ(parse_tolerance("5%"), 0.05);
  EXPECT_DOUBLE_EQ(parse_tolerance("0.1"), 0.1);
  EXPECT_THROW(parse_tolerance("5"), sax::UsageError);
  EXPECT_THROW(parse_tolerance("abc"), sax::UsageError);
  EXPECT_THROW(parse_tolerance("5%%"), sax::UsageError);
  EXPECT_THROW(parse_tolerance("0%"), sax::UsageError);
}

TEST(RegressUnit, IdenticalDistributionsNeverFlag) {
  RegressOptions o;
  int alarms = 0;
  for (unsigned seed = 0; seed < 200; ++seed) {
    std::mt19937 rng(seed);
    auto a = noisy_busbw(rng, 200, 10.0), b = noisy_busbw(rng, 200, 10.0);
    alarms += compare_samples(a, b, o).regression;
  }
  EXPECT_EQ(alarms, 0);
}

TEST(RegressUnit, TenPercentSlowdownFlags) {
  RegressOptions o;
  int caught = 0;
  for (unsigned seed = 0; seed < 50; ++seed) {
    std::mt19937 rng(1000 + seed);
    auto a = noisy_busbw(rng, 200, 10.0), b = noisy_busbw(rng, 200, 10.0, 1.10);
    caught += compare_samples(a, b, o).regression;
  }
  EXPECT_GE(caught, 48);  // power of the gate at n = 200, 15 % jitter
}

TEST(RegressUnit, SmallDropWithinToleranceDoesNotFlag) {
  RegressOptions o;
  std::mt19937 rng(7);
  auto a = noisy_busbw(rng, 500, 10.0), b = noisy_busbw(rng, 500, 10.0, 1.02);
  EXPECT_FALSE(compare_samples(a, b, o).regression);
}

namespace {

// A results file as `bench coll --json` writes it, with per-iteration times.
nlohmann::json results_file(const std::vector<double>& times_us, double scale) {
  nlohmann::json r = {{"op", "all_reduce"}, {"group", "world"}, {"dtype", "float32"},
                      {"bytes", 1 << 20},   {"ranks", 4},       {"count", 1 << 18}};
  std::vector<double> t;
  for (double x : times_us) t.push_back(x * scale);
  double mean = 0;
  for (double x : t) mean += x / static_cast<double>(t.size());
  r["time_us"] = mean;
  r["algbw_gbps"] = (1 << 20) / (mean * 1e3);
  r["busbw_gbps"] = r["algbw_gbps"].get<double>() * 1.5;
  r["times_us"] = t;
  return {{"version", 1}, {"results", {r}}};
}

}  // namespace

TEST(RegressUnit, ScaledResultsFileFlagsAndIdenticalDoesNot) {
  std::mt19937 rng(3);
  std::lognormal_distribution<double> jitter(std::log(500.0), 0.2);
  std::vector<double> t;
  for (int i = 0; i < 400; ++i) t.push_back(jitter(rng));
  RegressOptions o;
  EXPECT_EQ(compare_runs(results_file(t, 1.0), "a", results_file(t, 1.0), "b", o).regressions, 0);
  auto slow = compare_runs(results_file(t, 1.0), "a", results_file(t, 1.1), "b", o);
  EXPECT_EQ(slow.regressions, 1);
  EXPECT_NEAR(slow.rows[0].cmp.change, 1 / 1.1 - 1, 1e-9);
}

TEST(RegressUnit, MalformedFilesNameTheField) {
  RegressOptions o;
  nlohmann::json ok = results_file({1, 2, 3}, 1.0);
  nlohmann::json bad = ok;
  bad["results"][0].erase("times_us");
  try {
    compare_runs(ok, "a.json", bad, "b.json", o);
    FAIL();
  } catch (const sax::InputError& e) {
    EXPECT_EQ(e.file(), "b.json");
    EXPECT_EQ(e.path(), "/results/0/times_us");
  }
  nlohmann::json other = ok;
  other["results"][0]["bytes"] = 2048;
  EXPECT_THROW(compare_runs(ok, "a.json", other, "b.json", o), sax::UsageError);  // nothing in common
}

TEST(RegressUnit, TooFewSamplesAreCountedAsUnderpowered) {
  // 4 against 4 samples: the smallest one-sided Mann-Whitney p is 1/C(8,4) = 1/70 > 0.01, so
  // even a halving of busbw cannot be called significant — the report must say so.
  RegressOptions o;
  std::vector<double> t4 = {500, 510, 490, 505}, t5 = {500, 510, 490, 505, 495};
  auto few = compare_runs(results_file(t4, 1.0), "a", results_file(t4, 2.0), "b", o);
  EXPECT_EQ(few.compared, 1);
  EXPECT_EQ(few.underpowered, 1);
  EXPECT_EQ(few.regressions, 0);
  EXPECT_NEAR(few.rows[0].cmp.min_p, 1.0 / 70, 1e-12);
  // 5 against 5: 1/252 < 0.01, and the halving is flagged.
  auto enough = compare_runs(results_file(t5, 1.0), "a", results_file(t5, 2.0), "b", o);
  EXPECT_EQ(enough.underpowered, 0);
  EXPECT_EQ(enough.regressions, 1);
}

// Like with like: a file aggregated as the mean over ranks is not compared with one that took
// the slowest rank (a version-1 file, written before --average, counts as "max").
TEST(RegressUnit, DifferentAggregationsAreRefusedAndVersionOneMeansMax) {
  RegressOptions o;
  nlohmann::json v1 = results_file({500, 510, 490, 505, 495}, 1.0);  // no config: version 1
  nlohmann::json mean = v1, max = v1;
  mean["version"] = max["version"] = 2;
  mean["config"] = {{"average", "mean"}};
  max["config"] = {{"average", "max"}};
  try {
    compare_runs(v1, "old.json", mean, "new.json", o);
    FAIL();
  } catch (const sax::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("old.json aggregates times over ranks as max (/config/average) but "
                                         "new.json as mean"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(compare_runs(v1, "old.json", max, "new.json", o).compared, 1);
  EXPECT_EQ(compare_runs(mean, "a.json", mean, "b.json", o).compared, 1);
  nlohmann::json bad = mean;
  bad["config"]["average"] = "median";
  try {
    compare_runs(bad, "a.json", mean, "b.json", o);
    FAIL();
  } catch (const sax::InputError& e) {
    EXPECT_EQ(e.path(), "/config/average");
  }
}

// On CUDA a batch (one synchronisation) is not a blocking loop (-z 1) nor a graph (-G): refused.
// A version-1 CUDA file synchronised every iteration: it compares with -z 1 runs only.
TEST(RegressUnit, DifferentCudaTimingModesAreRefused) {
  RegressOptions o;
  nlohmann::json batched = results_file({500, 510, 490, 505, 495}, 1.0);
  batched["version"] = 2;
  batched["env"] = {{"backend", "cuda"}};
  batched["config"] = {{"average", "max"}, {"blocking", false}, {"graph_launches", 0}};
  nlohmann::json blocking = batched, graph = batched, v1 = results_file({500, 510, 490, 505, 495}, 1.0);
  blocking["config"]["blocking"] = true;
  graph["config"]["graph_launches"] = 4;
  v1["env"] = {{"backend", "cuda"}};
  try {
    compare_runs(batched, "a.json", blocking, "b.json", o);
    FAIL();
  } catch (const sax::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("a.json was timed batched"), std::string::npos) << e.what();
  }
  EXPECT_THROW(compare_runs(batched, "a.json", graph, "b.json", o), sax::UsageError);
  EXPECT_THROW(compare_runs(v1, "a.json", batched, "b.json", o), sax::UsageError);
  EXPECT_EQ(compare_runs(v1, "a.json", blocking, "b.json", o).compared, 1);
}

// A version-1 broadcast row (no in_place field) matches today's broadcast row (in place).
TEST(RegressUnit, BroadcastIsInPlaceInEveryVersion) {
  RegressOptions o;
  nlohmann::json v1 = results_file({500, 510, 490, 505, 495}, 1.0), v2 = v1;
  v1["results"][0]["op"] = v2["results"][0]["op"] = "broadcast";
  v2["version"] = 2;
  v2["config"] = {{"average", "max"}};
  v2["results"][0]["in_place"] = true;
  EXPECT_EQ(compare_runs(v1, "a.json", v2, "b.json", o).compared, 1);
}

// In place and out of place are different rows: matched only with their own kind.
TEST(RegressUnit, InPlaceRowsMatchOnlyInPlaceRows) {
  RegressOptions o;
  nlohmann::json out = results_file({500, 510, 490, 505, 495}, 1.0), in = out;
  in["results"][0]["in_place"] = true;
  EXPECT_THROW(compare_runs(out, "a.json", in, "b.json", o), sax::UsageError);  // nothing in common
  auto r = compare_runs(in, "a.json", in, "b.json", o);
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_TRUE(r.rows[0].in_place);
}
