// `sax run` end to end under mpirun -np 4 on local-2bld (two buildings of two devices), gpt-tiny
// and moe-tiny: for each layout — DP4 blocking, overlapped and hierarchical, TP2×DP2 with full
// recompute, TP2×PP2, PP4 1F1B, PP2×DP2 interleaved, PP2×DP2 zero bubble, CP2×DP2, EP2 on MoE
// with and without router skew — every rank sent, per dimension, exactly the bytes its workload
// lists (under skew the EP bytes as routed, their sum over ranks the workload's), and each rank's breakdown adds up to
// the step time with under 2 % left unaccounted. Bad input exits 2 with one line; a hung rank ends the job with exit 1
// within the timeout.
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>

#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"
#include "tests/support/run.hpp"
#include "workload/workload.hpp"

using nlohmann::json;
using sax::test::preset_path;
using sax::test::Result;
using sax::test::TempDir;

namespace {

const std::string kMpirun = sax::test::mpirun();
Result sh(const std::string& cmd) { return sax::test::run_shell(cmd); }

const std::string kCluster = preset_path("clusters/local-2bld.json");

Result run(const std::string& model, const std::string& layout, const std::string& extra, int np = 4,
           const std::string& env = "") {
  return sh(env + " " + kMpirun + " -np " + std::to_string(np) + " " + SAX_BINARY + " run --cluster " + kCluster +
            " --model " + model + " --layout " + layout + " " + extra);
}

struct Case {
  const char* name;
  const char* model;  // preset file under configs/models
  json layout;
  std::string extra;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

json sched(const char* pipeline, const char* dp_sync) { return {{"pipeline", pipeline}, {"dp_sync", dp_sync}}; }

}  // namespace

class RunLayouts : public ::testing::TestWithParam<Case> {};

TEST_P(RunLayouts, SendsTheWorkloadsBytesAndTheBreakdownAddsUp) {
  const Case& c = GetParam();
  TempDir t;
  const std::string layout = t.write("layout.json", c.layout), model = preset_path(std::string("models/") + c.model);
  Result r = run(model, layout, "--steps 1 --warmup 0 --timeout 120 --json " + t.file("run.json") + " " + c.extra);
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("step time"), std::string::npos) << r.out;
  const json j = json::parse(sax::test::slurp(t.file("run.json")));
  const sax::Cluster cl = sax::load_cluster(kCluster);
  const sax::Model m = sax::load_model(model);
  const sax::Layout l = sax::load_layout(layout);
  const double step = j["step_time_s"]["median"].get<double>();
  ASSERT_GT(step, 0);
  ASSERT_EQ(j["ranks"].size(), 4u);
  // A skewed router sends each EP peer the tokens it really routed there: every rank still
  // dispatches all its copies, but combines back what it received, so per rank the EP bytes
  // differ from the balanced workload's while their sum over ranks does not.
  const bool skewed = c.extra.find("--router-skew") != std::string::npos;
  double ep_sent = 0, ep_listed = 0, ep_off = 0;
  for (const json& rank : j["ranks"]) {
    const auto id = rank["rank"].get<std::int64_t>();
    const auto totals = sax::workload::totals(sax::workload::build(cl, m, l, id));
    for (sax::Dim d : sax::kDims) {
      const double got = rank["bytes"][sax::dim_name(d)].get<double>(),
                   want = totals.sent_bytes[static_cast<std::size_t>(d)];
      if (skewed && d == sax::Dim::ep) {
        ep_sent += got, ep_listed += want, ep_off += std::abs(got - want);
        continue;
      }
      EXPECT_DOUBLE_EQ(got, want) << "rank " << id << " dim " << sax::dim_name(d);
    }
    const json& b = rank["breakdown_s"];
    double sum =
        b["compute"].get<double>() + b["optimizer"].get<double>() + b["idle"].get<double>() + b["other"].get<double>();
    for (sax::Dim d : sax::kDims) sum += b[std::string(sax::dim_name(d)) + "_comm"].get<double>();
    EXPECT_NEAR(sum, step, 1e-9 * step) << "rank " << id;
    EXPECT_LE(std::abs(b["other"].get<double>()), 0.02 * step) << "rank " << id << ": time no op accounts for";
    EXPECT_GT(b["compute"].get<double>(), 0) << "rank " << id;
    EXPECT_GT(rank["peak_rss_gib"].get<double>(), 0);
  }
  if (skewed) {
    EXPECT_DOUBLE_EQ(ep_sent, ep_listed);
    EXPECT_GT(ep_off, 0) << "the skew changed no rank's all-to-all";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RunLayouts,
    ::testing::Values(
        Case{"Dp4Blocking", "gpt-tiny.json", {{"micro_batch_size", 2}, {"schedule", sched("1f1b", "blocking")}}, ""},
        Case{
            "Dp4Overlapped", "gpt-tiny.json", {{"micro_batch_size", 2}, {"schedule", sched("1f1b", "overlapped")}}, ""},
        Case{
            "Dp4HierarchicalDistributedOptimizer",
            "gpt-tiny.json",
            {{"micro_batch_size", 2}, {"use_distributed_optimizer", true}, {"schedule", sched("1f1b", "hierarchical")}},
            ""},
        Case{"Tp2Dp2FullRecompute",
             "gpt-tiny.json",
             {{"tensor_model_parallel_size", 2},
              {"sequence_parallel", true},
              {"recompute_granularity", "full"},
              {"micro_batch_size", 2},
              {"schedule", sched("1f1b", "overlapped")}},
             ""},
        Case{"Tp2Pp2", "gpt-tiny.json", sax::test::preset("layouts/local-tp2-pp2.json"), ""},
        Case{"Pp4OneFOneB",
             "gpt-tiny.json",
             {{"pipeline_model_parallel_size", 4}, {"micro_batch_size", 2}, {"schedule", sched("1f1b", "blocking")}},
             ""},
        Case{"Pp2Dp2Interleaved",
             "gpt-tiny.json",
             {{"pipeline_model_parallel_size", 2},
              {"virtual_pipeline_model_parallel_size", 2},
              {"micro_batch_size", 2},
              {"schedule", sched("interleaved", "blocking")}},
             ""},
        Case{"Pp2Dp2ZeroBubble",
             "gpt-tiny.json",
             {{"pipeline_model_parallel_size", 2},
              {"micro_batch_size", 2},
              {"schedule", sched("zero_bubble", "blocking")}},
             ""},
        Case{"Cp2Dp2",
             "gpt-tiny.json",
             {{"context_parallel_size", 2}, {"micro_batch_size", 2}, {"schedule", sched("1f1b", "blocking")}},
             ""},
        Case{"Ep2MoE", "moe-tiny.json", sax::test::preset("layouts/local-ep2-dp4.json"), ""},
        Case{"Ep2MoESkewed", "moe-tiny.json", sax::test::preset("layouts/local-ep2-dp4.json"), "--router-skew 4"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(RunMpi, WorldSizeOtherThanTheClustersIsRefused) {
  Result r = run(preset_path("models/gpt-tiny.json"), preset_path("layouts/local-tp2-pp2.json"), "--steps 1", 2);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("has 4 devices and the job has 2 ranks"), std::string::npos) << r.err;
}

// The layout's memory per device (the explorer's figure) against the device's: refused before
// anything is allocated, with the figures.
TEST(RunMpi, ALayoutThatDoesNotFitTheDeviceIsRefusedWithTheFigures) {
  TempDir t;
  json c = json::parse(sax::test::slurp(kCluster));
  c["device"]["hbm_gib"] = 0.01;
  const std::string small = t.write("small.json", c);
  Result r = sh(kMpirun + " -np 4 " + SAX_BINARY + " run --cluster " + small + " --model " +
                preset_path("models/gpt-tiny.json") + " --layout " + preset_path("layouts/local-tp2-pp2.json"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("GiB per device (weights"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("has 0.01 GiB usable"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(RunMpi, BadStepsAreRefusedWithOneLine) {
  Result r = run(preset_path("models/gpt-tiny.json"), preset_path("layouts/local-tp2-pp2.json"), "--steps 0");
  EXPECT_EQ(r.code, 2) << r.err;
  std::istringstream in(r.err);
  int lines = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("sax:", 0) == 0) ++lines;
  EXPECT_EQ(lines, 1) << r.err;
  EXPECT_NE(r.err.find("--steps: expected an integer from 1"), std::string::npos) << r.err;
}

TEST(RunMpi, AHungRankEndsTheJobWithExitOneWithinTheTimeout) {
  TempDir t;
  const auto start = std::chrono::steady_clock::now();
  Result r = run(preset_path("models/gpt-tiny.json"), preset_path("layouts/local-tp2-pp2.json"),
                 "--steps 1 --warmup 0 --timeout 3 --json " + t.file("r.json"), 4, "SAX_TEST_HANG_RANK=2 timeout 90");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("no progress for 3 s"), std::string::npos) << r.err;
  EXPECT_LT(s, 60);
  EXPECT_FALSE(std::filesystem::exists(t.file("r.json"))) << "no partial JSON";
}
