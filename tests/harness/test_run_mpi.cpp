// `sax run` end to end under mpirun -np 4 on local-2bld (two buildings of two devices), gpt-tiny
// and moe-tiny: for each layout — DP4 blocking, overlapped and hierarchical, TP2×DP2 with full
// recompute, TP2×DP2 with tp_comm_overlap, TP2×PP2, PP4 1F1B, PP2×DP2 interleaved (receives posted early, and in
// place), PP2×DP2 zero bubble, CP2×DP2, EP2 on MoE with and without router skew — every rank sent, per dimension,
// exactly the bytes its workload lists (under skew the EP bytes as routed, their sum over ranks the workload's), and
// each rank's breakdown adds up to the step time with under 2 % left unaccounted. Bad input exits 2 with one line; a
// hung rank ends the job with exit 1 within the timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
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

// TP2×DP2 with tp_comm_overlap (and the SP it needs): run, and run traced.
json tp2_dp2_tp_comm_overlap() {
  return {{"tensor_model_parallel_size", 2},
          {"sequence_parallel", true},
          {"tp_comm_overlap", true},
          {"micro_batch_size", 2},
          {"schedule", sched("1f1b", "blocking")}};
}

// PP2×DP2 interleaved, its pipeline receives posted early unless `in_place`: run, and run traced.
json pp2_dp2_interleaved(bool in_place = false) {
  json l = {{"pipeline_model_parallel_size", 2},
            {"virtual_pipeline_model_parallel_size", 2},
            {"micro_batch_size", 2},
            {"schedule", sched("interleaved", "blocking")}};
  if (in_place) l["overlap_p2p_comm"] = false;
  return l;
}

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
  // A skewed (or imbalanced) router sends each EP peer the tokens routed there: every rank still
  // dispatches all its copies, but combines back what it received, so per rank the EP bytes
  // differ from the balanced workload's while their sum over ranks does not.
  const bool skewed = c.extra.find("--router-") != std::string::npos;
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
    EXPECT_GT(b["compute"].get<double>(), 0) << "rank " << id;
    EXPECT_GT(rank["peak_rss_gib"].get<double>(), 0);
    ASSERT_TRUE(rank.contains("pacing")) << "rank " << id;
    // What no op accounts for is the harness's own work between ops, microseconds each on an idle
    // host; a busy host preempts the rank there as it wakes it late from its paced waits, so the
    // lateness it measured (pacing.late_s) is allowed beside 2 % of the step.
    EXPECT_LE(std::abs(b["other"].get<double>()), 0.02 * step + rank["pacing"]["late_s"].get<double>())
        << "rank " << id << ": time no op accounts for";
    // The preset's device is paced: every op is counted, and a rank waiting (for a deadline, a
    // message, a collective, the bubble) sleeps, so its CPU time is its kernels' (at most its
    // compute's wall time) and a little: a rank that spun would burn its waits too. A busy host
    // only lengthens the waits.
    EXPECT_GT(rank["pacing"]["ops"].get<std::int64_t>(), 0) << "rank " << id;
    const double busy = b["compute"].get<double>() + b["optimizer"].get<double>();
    EXPECT_LT(rank["cpu_s_per_step"].get<double>(), busy + 0.5 * (step - busy) + 0.05)
        << "rank " << id << ": CPU per step against " << busy << " s of compute in a " << step << " s step";
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
        // FSDP: each layer gathered twice and reduce-scattered once per micro-batch, prefetched.
        Case{"Dp4Fsdp",
             "gpt-tiny.json",
             {{"micro_batch_size", 2},
              {"data_parallel_sharding_strategy", "optim_grads_params"},
              {"schedule", sched("1f1b", "overlapped")}},
             ""},
        // ZeRO-2: each layer's gradients reduce-scattered every micro-batch, parameters gathered per step.
        Case{"Dp4Zero2",
             "gpt-tiny.json",
             {{"micro_batch_size", 2},
              {"data_parallel_sharding_strategy", "optim_grads"},
              {"schedule", sched("1f1b", "overlapped")}},
             ""},
        // HSDP: gathered and reduce-scattered inside each building, the shard all-reduced across.
        Case{"Dp4Hsdp",
             "gpt-tiny.json",
             {{"micro_batch_size", 2},
              {"data_parallel_sharding_strategy", "optim_grads_params"},
              {"schedule", sched("1f1b", "hierarchical")}},
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
        Case{"Tp2Dp2TpCommOverlap", "gpt-tiny.json", tp2_dp2_tp_comm_overlap(), ""},
        Case{"Pp4OneFOneB",
             "gpt-tiny.json",
             {{"pipeline_model_parallel_size", 4}, {"micro_batch_size", 2}, {"schedule", sched("1f1b", "blocking")}},
             ""},
        Case{"Pp2Dp2Interleaved", "gpt-tiny.json", pp2_dp2_interleaved(), ""},
        Case{"Pp2Dp2InterleavedP2pInPlace", "gpt-tiny.json", pp2_dp2_interleaved(true), ""},
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
        Case{"Ep2MoESkewed", "moe-tiny.json", sax::test::preset("layouts/local-ep2-dp4.json"), "--router-skew 4"},
        Case{"Ep2MoEImbalanced", "moe-tiny.json", sax::test::preset("layouts/local-ep2-dp4.json"),
             "--router-imbalance 1.25"}),
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

// A building emulated at a slower generation (local-2bld-slow: bld-b's compute_slowdown 2): on DP4
// every rank runs the same ops, and bld-b's ranks take about twice bld-a's compute time; each rank
// reports its slowdown. Paced (the preset), bld-b's device is paced at half the speed; native,
// each op spins its own time again after it.
TEST(RunMpi, ASlowedBuildingsRanksComputeThatManyTimesSlower) {
  TempDir t;
  json native = json::parse(sax::test::slurp(preset_path("clusters/local-2bld-slow.json")));
  native["device"]["emulation"] = "native";
  for (const std::string& cluster : {preset_path("clusters/local-2bld-slow.json"), t.write("native.json", native)}) {
    const bool paced = cluster.find("native") == std::string::npos;
    const std::string out = t.file("run.json");
    Result r = sh(kMpirun + " -np 4 " + SAX_BINARY + " run --cluster " + cluster + " --model " +
                  preset_path("models/gpt-tiny.json") + " --layout " + preset_path("layouts/local-dp4.json") +
                  " --steps 2 --json " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find(paced ? "building 1 bld-b: its device paced 2x slower"
                               : "building 1 bld-b: every compute op emulated 2x slower"),
              std::string::npos)
        << r.out;
    const json j = json::parse(sax::test::slurp(out));
    double fast = 0, slow = 0, fast_paced = 0, slow_paced = 0;
    for (const json& rank : j["ranks"]) {
      const int b = rank["building"].get<int>();
      EXPECT_DOUBLE_EQ(rank["compute_slowdown"].get<double>(), b == 1 ? 2.0 : 1.0);
      if (!paced) {
        (b == 1 ? slow : fast) += rank["breakdown_s"]["compute"].get<double>();
        continue;
      }
      // Paced: what the device held is the rank's compute less what the host could not hold (the
      // overruns, counted). A busy host overruns bld-a's shorter ops the most, which makes the
      // whole compute times alike, but never makes the held part longer than the device's time
      // (the waits past deadlines, late_s, aside): it is shorter only by the gaps between the
      // ops of a chain, alike on both buildings, so the ratio of the held parts only grows.
      const json& p = rank["pacing"];
      const double held = p["compute_s"].get<double>() - p["overrun_s"].get<double>();
      EXPECT_LE(held, p["paced_s"].get<double>() * 1.001 + p["late_s"].get<double>() + 1e-3) << p.dump();
      (b == 1 ? slow : fast) += held;
      (b == 1 ? slow_paced : fast_paced) += p["paced_s"].get<double>();
    }
    // Paced: each op's time on bld-b's device twice its time on bld-a's but for its launch overhead
    // (a fixed cost, not slowed), and so held.
    if (paced) EXPECT_NEAR(slow_paced / fast_paced, 2.0, 0.06);
    // Native: on 2 cores the ranks' own op times differ by which of them hold a core, so the ratio
    // is a floor only (a busy host has given bld-a's ranks less of the cores and the ratio past 3).
    EXPECT_GT(slow / fast, paced ? 1.6 : 1.25) << "bld-a compute " << fast << " s, bld-b " << slow << " s";
  }
}

// A device declared faster than the host computes: the kernels end past their deadlines, the
// overruns are counted per rank and for the job, in the JSON and the table, never hidden.
TEST(RunMpi, ADeviceTheHostCannotHoldIsCountedAsOverruns) {
  TempDir t;
  json fast = json::parse(sax::test::slurp(kCluster));
  fast["device"]["peak_tflops"]["fp32"] = 100.0;
  fast["device"]["hbm_bandwidth_gbps"] = 10000.0;
  fast["device"]["op_overhead_us"] = 0;
  const std::string out = t.file("run.json");
  Result r = sh(kMpirun + " -np 4 " + SAX_BINARY + " run --cluster " + t.write("fast.json", fast) + " --model " +
                preset_path("models/gpt-tiny.json") + " --layout " + preset_path("layouts/local-dp4.json") +
                " --steps 1 --warmup 0 --json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(sax::test::slurp(out));
  ASSERT_TRUE(j.contains("pacing"));
  EXPECT_GT(j["pacing"]["overruns"].get<std::int64_t>(), 0);
  EXPECT_GT(j["pacing"]["overrun_pct"].get<double>(), 1.0) << "a device 4000x the host's";
  for (const json& rank : j["ranks"]) EXPECT_GT(rank["pacing"]["overrun_s"].get<double>(), 0) << rank["rank"];
  EXPECT_NE(r.out.find("compute paced: every op held to the declared device's time; overruns " +
                       std::to_string(j["pacing"]["overruns"].get<std::int64_t>()) + " of "),
            std::string::npos)
      << r.out;
}

// Buildings that differ: each pipeline stage's memory against its own building's device.
TEST(RunMpi, AStageThatDoesNotFitItsBuildingsDeviceIsRefused) {
  TempDir t;
  json c = json::parse(sax::test::slurp(preset_path("clusters/local-2bld-slow.json")));
  c["buildings"][1]["device"] = c["device"];
  c["buildings"][1]["device"]["name"] = "small-rank";
  c["buildings"][1]["device"]["hbm_gib"] = 0.01;
  const std::string small = t.write("small.json", c);
  Result r = sh(kMpirun + " -np 4 " + SAX_BINARY + " run --cluster " + small + " --model " +
                preset_path("models/gpt-tiny.json") + " --layout " + preset_path("layouts/local-pp2-dp2.json"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("pipeline stage 1 needs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("small-rank at 1/2 speed has 0.01 GiB usable"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// Uneven inputs: the DP rank that drew the most work is held the longest by the paced device
// (paced_s is the device's time for the ops it ran: no host timing in it), and balancing evens
// the ranks' work out. Bad specs, and uneven inputs on a native device, are refused.
TEST(RunMpi, UnevenInputsHoldEachRankForItsWorkAndBalancingEvensThem) {
  TempDir t;
  const std::string lengths = " --lengths lognormal:median=24,sigma=1.2,seed=2";
  std::map<std::string, json> runs;
  for (const std::string balance : {"none", "balanced"}) {
    const std::string out = t.file(balance + ".json");
    Result r = run(preset_path("models/gpt-tiny.json"), preset_path("layouts/local-dp4.json"),
                   "--steps 1 --warmup 0" + lengths + " --balance " + balance + " --json " + out);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(
        r.out.find("inputs lognormal:median=24,sigma=1.2,seed=2, balance " + balance + ": the busiest DP rank holds "),
        std::string::npos)
        << r.out;
    runs[balance] = json::parse(sax::test::slurp(out));
  }
  auto spread = [](const json& j) {  // the ranks' paced time, max over min
    double lo = 1e300, hi = 0;
    for (const json& rank : j["ranks"]) {
      lo = std::min(lo, rank["pacing"]["paced_s"].get<double>());
      hi = std::max(hi, rank["pacing"]["paced_s"].get<double>());
    }
    return hi / lo;
  };
  const json& none = runs["none"];
  EXPECT_EQ(none["config"]["balance"], "none");
  const double skew = none["inputs"]["work_max_over_mean"].get<double>();
  EXPECT_GT(skew, 1.1) << none["inputs"].dump();
  EXPECT_LT(runs["balanced"]["inputs"]["work_max_over_mean"].get<double>(), skew);
  // local-dp4: rank r is DP rank r. The busiest DP rank's device time is the longest.
  std::size_t busiest = 0, longest = 0;
  for (std::size_t d = 0; d < 4; ++d) {
    if (none["inputs"]["dp_ranks"][d]["work"] > none["inputs"]["dp_ranks"][busiest]["work"]) busiest = d;
    if (none["ranks"][d]["pacing"]["paced_s"] > none["ranks"][longest]["pacing"]["paced_s"]) longest = d;
  }
  EXPECT_EQ(busiest, longest) << none["inputs"].dump();
  EXPECT_GT(spread(none), 1.05);
  EXPECT_LT(spread(runs["balanced"]), spread(none));

  for (const auto& [extra, why] :
       {std::pair{"--lengths gamma:k=2", "--lengths: unknown distribution \"gamma\""},
        std::pair{"--lengths fixed --balance lpt", "--balance: expected none, sorted or balanced"}}) {
    Result r = run(preset_path("models/gpt-tiny.json"), preset_path("layouts/local-dp4.json"), extra);
    EXPECT_EQ(r.code, 2) << extra << ": " << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << extra << ": " << r.err;
  }
  json native = json::parse(sax::test::slurp(kCluster));
  native["device"]["emulation"] = "native";
  Result r = sh(kMpirun + " -np 4 " + SAX_BINARY + " run --cluster " + t.write("native.json", native) + " --model " +
                preset_path("models/gpt-tiny.json") + " --layout " + preset_path("layouts/local-dp4.json") + lengths);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--lengths: uneven inputs are run on a paced device"), std::string::npos) << r.err;
}

// --slow-rank: the straggler's device is paced that much slower (paced_s is the device's time for
// the ops it ran), the others not; its record says so; a rank outside the job is refused.
TEST(RunMpi, ASlowRankIsPacedThatMuchSlower) {
  TempDir t;
  const std::string out = t.file("slow.json");
  Result r = run(preset_path("models/gpt-tiny.json"), preset_path("layouts/local-dp4.json"),
                 "--steps 1 --warmup 0 --slow-rank 2:1.5 --json " + out);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("(rank 2: a straggler, its compute 1.5x slower than its building's, --slow-rank)"),
            std::string::npos)
      << r.out;
  const json j = json::parse(sax::test::slurp(out));
  const double slow = j["ranks"][2]["pacing"]["paced_s"].get<double>();
  for (std::size_t k : {0u, 1u, 3u}) {
    EXPECT_EQ(j["ranks"][k]["compute_slowdown"], 1.0);
    EXPECT_NEAR(slow / j["ranks"][k]["pacing"]["paced_s"].get<double>(), 1.5, 0.05) << k;
  }
  EXPECT_EQ(j["ranks"][2]["compute_slowdown"], 1.5);
  for (const auto& [extra, why] :
       {std::pair{"--slow-rank 4:1.2", "--slow-rank's rank"}, std::pair{"--slow-rank 1:0.5", "--slow-rank's factor"},
        std::pair{"--slow-rank 1", "--slow-rank: expected RANK[,RANK...]:FACTOR"}}) {
    Result e = run(preset_path("models/gpt-tiny.json"), preset_path("layouts/local-dp4.json"), extra);
    EXPECT_EQ(e.code, 2) << extra << ": " << e.err;
    EXPECT_NE(e.err.find(why), std::string::npos) << extra << ": " << e.err;
  }
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
  // A router load below the mean or beyond what EP ranks can hold, or with a skew too.
  const std::string moe = preset_path("models/moe-tiny.json"), ep2 = preset_path("layouts/local-ep2-dp4.json");
  for (const auto& [extra, why] :
       {std::pair{"--router-imbalance 0.5",
                  "--router-imbalance: expected 0 (the router's own) or the busiest EP rank's"},
        std::pair{"--router-imbalance 3", "from 1 to EP (2), got 3"},
        std::pair{"--router-imbalance 1.25 --router-skew 2", "--router-imbalance and --router-skew: give one"}}) {
    r = run(moe, ep2, extra);
    EXPECT_EQ(r.code, 2) << extra << ": " << r.err;
    EXPECT_NE(r.err.find(why), std::string::npos) << extra << ": " << r.err;
  }
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

// `--trace DIR`: every rank's timeline, merged, read back by `sax trace summary` in the run's own
// categories. The summary rebuilds each rank's breakdown from the events alone; it must agree
// with the run's JSON within 5 % per category, on TP2×PP2 (pipeline bubble, TP
// collectives), on DP4 with the gradient sync overlapped, on TP2×DP2 with the TP messages
// behind their GEMMs (tp_comm_overlap) and on PP2×DP2 interleaved (pipeline receives posted early).
class TracedLayouts : public ::testing::TestWithParam<Case> {};

TEST_P(TracedLayouts, TheTraceSummaryAgreesWithTheRunsBreakdown) {
  const Case& c = GetParam();
  TempDir t;
  const std::string layout = t.write("layout.json", c.layout), model = preset_path(std::string("models/") + c.model);
  Result r = run(model, layout,
                 "--steps 3 --warmup 1 --timeout 120 --json " + t.file("run.json") + " --trace " + t.file("trace"));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("# trace: "), std::string::npos) << r.out;
  Result m = sh(std::string(SAX_BINARY) + " trace merge " + t.file("trace") + " -o " + t.file("merged.json"));
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_EQ(m.out.find("warning"), std::string::npos) << "events overlap on one thread:\n" << m.out;
  Result s = sh(std::string(SAX_BINARY) + " trace summary " + t.file("merged.json") + " --json " + t.file("s.json"));
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.out.find("overlap%"), std::string::npos) << s.out;

  const json run_json = json::parse(sax::test::slurp(t.file("run.json")));
  const json merged = json::parse(sax::test::slurp(t.file("merged.json")));
  const json summary = json::parse(sax::test::slurp(t.file("s.json")));
  // One process per rank, named with its building and stage; nothing dropped.
  std::set<int> named;
  for (const json& e : merged["traceEvents"])
    if (e["ph"] == "M" && e["name"] == "process_name") {
      named.insert(e["pid"].get<int>());
      EXPECT_NE(e["args"]["name"].get<std::string>().find("stage"), std::string::npos);
    }
  EXPECT_EQ(named, (std::set<int>{0, 1, 2, 3}));
  ASSERT_EQ(merged["otherData"]["sax_ranks"].size(), 4u);
  for (const json& rk : merged["otherData"]["sax_ranks"]) EXPECT_EQ(rk["dropped"].get<int>(), 0);
  // Every compute op of every measured step is on its rank's timeline.
  const sax::Cluster cl = sax::load_cluster(kCluster);
  const sax::Model mo = sax::load_model(model);
  const sax::Layout l = sax::load_layout(layout);
  for (int rank = 0; rank < 4; ++rank) {
    std::size_t ops = 0, seen = 0;
    for (const auto& o : sax::workload::build(cl, mo, l, rank).ops) ops += o.kind == sax::workload::OpKind::compute;
    for (const json& e : merged["traceEvents"])
      seen += e["ph"] == "X" && e["pid"] == rank && e["cat"] == "compute" ? 1 : 0;
    EXPECT_EQ(seen, 3 * ops) << "rank " << rank;
  }
  // The same step, and the same breakdown within 5 % per category.
  EXPECT_NEAR(summary["step_time_s"]["median"].get<double>(), run_json["step_time_s"]["median"].get<double>(), 1e-6);
  ASSERT_EQ(summary["ranks"].size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const json& want = run_json["ranks"][i]["breakdown_s"];
    const json& got = summary["ranks"][i]["breakdown_s"];
    for (const auto& [key, v] : want.items()) {
      const double a = v.get<double>(), b = got.at(key).get<double>();
      EXPECT_LE(std::abs(a - b), 0.05 * std::abs(a) + 1e-6)
          << "rank " << i << " " << key << ": run " << a << " s, trace " << b << " s";
    }
    EXPECT_EQ(summary["ranks"][i]["stage"], run_json["ranks"][i]["stage"]);
  }
  if (c.layout.value("schedule", json::object()).value("dp_sync", "") == "overlapped" &&
      c.layout.value("pipeline_model_parallel_size", 1) == 1)
    EXPECT_GT(summary["overall"]["overlap_pct"].get<double>(), 0) << "the overlapped DP sync hid nothing";
  // tp_comm_overlap (with a blocking DP sync, so that only TP messages run behind compute): each
  // rank reports its TP communication, and the trace shows the messages in flight across their GEMMs.
  if (c.layout.value("tp_comm_overlap", false)) {
    for (const json& rank : run_json["ranks"]) EXPECT_GT(rank["breakdown_s"]["tp_comm"].get<double>(), 0);
    EXPECT_GT(summary["overall"]["overlap_pct"].get<double>(), 0) << "no TP message ran behind its GEMM";
  }
}

INSTANTIATE_TEST_SUITE_P(Traced, TracedLayouts,
                         ::testing::Values(Case{"Tp2Pp2", "gpt-tiny.json",
                                                sax::test::preset("layouts/local-tp2-pp2.json"), ""},
                                           Case{"Dp4Overlapped",
                                                "gpt-tiny.json",
                                                {{"micro_batch_size", 2}, {"schedule", sched("1f1b", "overlapped")}},
                                                ""},
                                           Case{"Tp2Dp2TpCommOverlap", "gpt-tiny.json", tp2_dp2_tp_comm_overlap(), ""},
                                           Case{"Pp2Dp2Interleaved", "gpt-tiny.json", pp2_dp2_interleaved(), ""}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TraceSummary, ATraceWithoutStepsIsRefusedWithOneLine) {
  TempDir t;
  const std::string f = t.write(
      "x.json",
      json{{"traceEvents",
            json::array(
                {{{"ph", "X"}, {"pid", 0}, {"tid", 1}, {"name", "k"}, {"cat", "compute"}, {"ts", 0}, {"dur", 1}}})}});
  Result r = sh(std::string(SAX_BINARY) + " trace summary " + f);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find(f), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("step events"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}
