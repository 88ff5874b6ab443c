// The regression gate on synthetic samples with noise like this machine's (log-normal jitter
// plus rare multi-millisecond stalls): identical distributions never flag over many seeds, a
// 10 % slowdown always does, and a real results file with its times scaled by 1.1 flags.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <limits>
#include <random>

#include "harness/regress.hpp"
#include "harness/stats.hpp"
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

TEST(RegressUnit, TheHeaderSaysHowManyUnitsTheTestHad) {
  RegressOptions o;  // 50 blocks: 20 samples a size are tested one by one, 400 as 50 block medians
  std::vector<double> t20(20, 500.0), t400(400, 500.0);
  const std::string few = regress_table(compare_runs(results_file(t20, 1.0), "a", results_file(t20, 1.0), "b", o), o);
  EXPECT_NE(few.find("over 20 samples per size and run (50 block medians from 100 samples on)"), std::string::npos)
      << few;
  const std::string many =
      regress_table(compare_runs(results_file(t400, 1.0), "a", results_file(t400, 1.0), "b", o), o);
  EXPECT_NE(many.find("over 50 block medians per size and run\n"), std::string::npos) << many;
}

TEST(RegressUnit, RunsOnDifferentInputsSaySo) {
  // A change that is not the code's: the two runs had different cluster files, or boundaries.
  std::vector<double> t(20, 500.0);
  nlohmann::json a = results_file(t, 1.0), b = a;
  a["env"]["inputs"] = {{"cluster", {{"path", "c.json"}, {"hash", "fnv1a64:1"}}}};
  b["env"]["inputs"] = {{"cluster", {{"path", "c.json"}, {"hash", "fnv1a64:2"}}}};
  RegressOptions o;
  EXPECT_EQ(compare_runs(a, "a", a, "b", o).differences, "");
  EXPECT_EQ(compare_runs(a, "a", b, "b", o).differences, "cluster: c.json (fnv1a64:1) against c.json (fnv1a64:2)");
  b["env"]["inputs"] = nlohmann::json::object();
  b["env"]["emulation"] = "netns";
  a["env"]["emulation"] = "none";
  const auto r = compare_runs(a, "a", b, "b", o);
  EXPECT_EQ(r.differences, "cluster: c.json (fnv1a64:1) against none; emulation: none against netns");
  EXPECT_NE(regress_table(r, o).find("# the runs differ in what they ran on: cluster: c.json"), std::string::npos);
  // Results written before the hashes: their config's paths.
  nlohmann::json old_a = results_file(t, 1.0), old_b = old_a;
  old_a["config"]["cluster"] = "x.json";
  old_b["config"]["cluster"] = "y.json";
  EXPECT_EQ(compare_runs(old_a, "a", old_b, "b", o).differences, "cluster: x.json against y.json");
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

// Endless loops and silent acceptance, for what `regress` reads.
namespace {

// The minimal file of one all_reduce row; `row` edits the row.
nlohmann::json one_row(const std::function<void(nlohmann::json&)>& row = {}) {
  nlohmann::json doc = results_file({500, 510, 490, 505, 495}, 1.0);
  if (row) row(doc["results"][0]);
  return doc;
}

// The InputError's JSON path when `current` is compared with a good baseline ("" when accepted).
std::string refused_at(const nlohmann::json& current) {
  try {
    compare_runs(one_row(), "base.json", current, "cur.json", RegressOptions{});
  } catch (const sax::InputError& e) {
    EXPECT_EQ(e.file(), "cur.json");
    return e.path();
  }
  return "";
}

}  // namespace

// A NaN among the samples spun the tie loop of the rank test forever (NaN equals nothing, so the
// run of ties never advanced). Whatever a defect elsewhere lets through, the test ends.
TEST(HardeningEndlessLoop, RankTestAndMediansEndOnNaNAndInfinity) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(sax::test::run_in_child(
                [&] {
                  std::vector<double> a = {1, nan, 2, nan, inf, 3}, b = {nan, nan, 1, inf, -inf};
                  (void)mann_whitney(a, b);
                  (void)mann_whitney(b, a);
                  (void)median(a);
                  (void)compare_samples(std::vector<double>(200, nan), std::vector<double>(200, inf), RegressOptions{});
                },
                5.0),
            0);
  // Finite samples rank as before: NaN-safe ordering changed nothing for them.
  const MannWhitney r = mann_whitney({1, 2, 3}, {4, 5, 6});
  EXPECT_DOUBLE_EQ(r.u, 0);
  EXPECT_LT(r.p_less, 0.05);
}

// A sample busbw_gbps × time_us / t_i that overflows (1e308 × 1e308) or divides by a denormal
// time became inf, its median NaN: each is now refused where the file says it, exit 2.
TEST(HardeningEndlessLoop, NonFiniteOrDenormalSamplesAreRefusedWithTheirPath) {
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["busbw_gbps"] = 1e308, r["time_us"] = 1e308; })),
            "/results/0/busbw_gbps");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["time_us"] = 1e308; })), "/results/0/time_us");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["times_us"][1] = 1e-310; })), "/results/0/times_us/1");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["times_us"][2] = 0.0; })), "/results/0/times_us/2");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["times_us"][0] = -5.0; })), "/results/0/times_us/0");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["busbw_gbps"] = -1.0; })), "/results/0/busbw_gbps");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["busbw_gbps"] = 1e-310; })), "/results/0/busbw_gbps");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["time_us"] = 1e-310; })), "/results/0/time_us");
  EXPECT_EQ(refused_at(one_row()), "");
  // A one-rank group moves nothing over a bus: busbw 0 is a result bench coll writes.
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["busbw_gbps"] = 0.0; })), "");
}

// The whole command on a file whose sample overflows: exit 2 with one line naming the file and
// the field, at once (it never ended). Under `timeout` so that a regression cannot hang CI.
TEST(HardeningEndlessLoop, RegressStopsOnOverflowingSampleWithExitTwo) {
  sax::test::TempDir t;
  // 200 samples: 50 blocks of 2, whose medians (inf + 0.5 × (inf − inf)) were NaN.
  std::vector<double> times;
  for (int i = 0; i < 200; ++i) times.push_back(500 + i % 7);
  nlohmann::json overflow = results_file(times, 1.0);
  const std::string base = t.write("base.json", overflow);
  overflow["results"][0]["busbw_gbps"] = 1e308;
  overflow["results"][0]["time_us"] = 1e308;
  const std::string cur = t.write("cur.json", overflow);
  const auto start = std::chrono::steady_clock::now();
  const sax::test::Result r = sax::test::run_shell("timeout 10 " + std::string(SAX_BINARY) + " regress --baseline " +
                                                   base + " --current " + cur);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 2) << r.err;  // 124: timed out, the loop is back
  EXPECT_LT(s, 5.0);              // 0.03 s alone; loose for a loaded CI host (a hang is 124 after 10 s)
  EXPECT_EQ(r.err, "sax: error: " + cur +
                       ": /results/0/busbw_gbps: expected 0 or a measured bandwidth between 1e-15 and 100000 GB/s\n");
}

// `ranks` 4294967300 was read through an int as 4 (and matched a 4-rank row); integers are read at
// the width they are used at, or refused; so are counts past what bench coll accepts.
TEST(HardeningSilentAcceptance, RegressRanksWidth) {
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["ranks"] = 4294967300ull; })), "/results/0/ranks");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["ranks"] = 2147483648ll; })), "/results/0/ranks");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["ranks"] = 0; })), "/results/0/ranks");
  EXPECT_EQ(refused_at(one_row([](auto& r) { r["bytes"] = 1ull << 41; })), "/results/0/bytes");
  const nlohmann::json widest = one_row([](auto& r) { r["ranks"] = 2147483647; });  // INT_MAX itself fits
  EXPECT_EQ(compare_runs(widest, "a.json", widest, "b.json", RegressOptions{}).rows.at(0).ranks, 2147483647);
  nlohmann::json graph = one_row();
  graph["version"] = 2;
  graph["env"] = {{"backend", "cuda"}};
  graph["config"] = {{"average", "mean"}, {"graph_launches", 4294967296ull}};
  EXPECT_EQ(refused_at(graph), "/config/graph_launches");
  nlohmann::json sample = one_row();
  sample["version"] = 2;
  sample["config"] = {{"average", "mean"}, {"min_sample_us", 1e300}};
  EXPECT_EQ(refused_at(sample), "/config/min_sample_us");
}
