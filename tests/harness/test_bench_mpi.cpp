// `sax bench coll` and `sax regress` end to end under mpirun -np 4: bad input exits 2 with one
// line from rank 0 only; mismatched arguments are detected; a hung or dead peer ends the job
// with exit 1 by --timeout; the JSON has every field; `regress` reads what the sweep wrote.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>

#include "tests/support/run.hpp"

using sax::test::Result;
using sax::test::TempDir;

namespace {

const std::string kMpirun = sax::test::mpirun();
Result sh(const std::string& cmd) { return sax::test::run_shell(cmd); }

Result bench(const std::string& args, const std::string& env = "", int np = 4) {
  return sh(env + " " + kMpirun + " -np " + std::to_string(np) + " " + SAX_BINARY + " bench coll " + args);
}

// Lines of sax's own (mpirun adds its banners to stderr when a rank exits non-zero).
std::vector<std::string> sax_lines(const std::string& err) {
  std::vector<std::string> lines;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("sax:", 0) == 0) lines.push_back(line);
  return lines;
}

std::string cluster() { return sax::test::preset_path("clusters/local-2bld.json"); }
std::string layout() { return sax::test::preset_path("layouts/local-tp2-pp2.json"); }

}  // namespace

namespace {

struct BadCase {
  const char* name;
  std::string args;
  const char* says;
};
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

}  // namespace

// Bad input end to end under mpirun, one case for each path to the one line from rank 0: the
// plan every rank makes once MPI is up (its other refusals are checked in process:
// CollPlanRefusal in test_coll_plan.cpp), the job's agreement before the sweep, and CLI11 before
// any rank knows its rank.
class BenchBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(BenchBadInput, ExitsTwoWithOneLineFromRankZero) {
  Result r = bench(GetParam().args);
  EXPECT_EQ(r.code, 2) << r.err;
  auto lines = sax_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("sax: error: "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(GetParam().says), std::string::npos) << lines[0];
}

INSTANTIATE_TEST_SUITE_P(Cases, BenchBadInput,
                         ::testing::Values(BadCase{"UnknownOp", "--op all_reduse", "unknown operation 'all_reduse'"},
                                           // Found before the sweep (it was exit 1 by MPI_Abort after it).
                                           BadCase{"UnwritableJson", "-b 1K -e 1K --json /nonexistent-dir/out.json",
                                                   "/nonexistent-dir/out.json: expected a writable path"},
                                           BadCase{"RepeatedFlag", "-b 1K -b 2K", "--min-bytes"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(BenchMpi, MismatchedArgumentsAcrossRanksAreDetected) {
  const std::string s = SAX_BINARY;
  Result r = sh(kMpirun + " -np 2 " + s + " bench coll -b 1K -e 1K : -np 2 " + s + " bench coll -b 1K -e 2K");
  EXPECT_EQ(r.code, 2) << r.err;
  auto lines = sax_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("arguments differ across ranks"), std::string::npos) << lines[0];
}

TEST(BenchMpi, HungPeerEndsEveryRankWithExitOneByTheTimeout) {
  const auto start = std::chrono::steady_clock::now();
  Result r = bench("-b 1K -e 1K --timeout 3", "SAX_TEST_HANG_RANK=2 timeout 60");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("sax: failed: timeout: no progress for 3 s"), std::string::npos) << r.err;
  EXPECT_LT(s, 45);  // the watchdog's 3 s, not `timeout 60`: a busy host's launch takes seconds
}

TEST(BenchMpi, DeadPeerEndsEveryRankWithExitOne) {
  // Without mpirun's own tear-down (as under launchers that leave survivors running), the
  // survivors wait in a collective for the dead rank: the watchdog ends them with exit 1.
  const auto start = std::chrono::steady_clock::now();
  Result r = sh("SAX_TEST_EXIT_RANK=1 timeout 60 " + kMpirun + " --mca orte_abort_on_non_zero_status 0 -np 4 " +
                SAX_BINARY + " bench coll -b 1K -e 1K --timeout 3");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("a peer died or hangs"), std::string::npos) << r.err;
  EXPECT_LT(s, 45);  // the watchdog's 3 s, not `timeout 60`
  // With mpirun's default, it takes the job down at once with the dead rank's status; no hang.
  r = bench("-b 1K -e 1K --timeout 30", "SAX_TEST_EXIT_RANK=1 timeout 60");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.code, 124) << "hung";
}

TEST(BenchMpi, JsonHasEveryFieldAndCheckPasses) {
  TempDir t;
  Result r = bench("--op all --check -b 1K -e 4K -f 4 -n 5 -w 1 --group pp --cluster " + cluster() + " --layout " +
                   layout() + " --json " + t.file("r.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("link class cross_building"), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(sax::test::slurp(t.file("r.json")));
  for (const char* k : {"version", "config", "env", "results"}) EXPECT_TRUE(j.contains(k)) << k;
  // MPI started with MPI_THREAD_MULTIPLE: the watchdog aborts from its own thread.
  EXPECT_EQ(j["env"]["mpi_thread_level"], "multiple");
  EXPECT_EQ(r.out.find("# warning"), std::string::npos) << r.out;
  ASSERT_EQ(j["results"].size(), 12u);  // 6 ops × 2 sizes
  for (const auto& res : j["results"]) {
    for (const char* k : {"op", "bytes", "count", "dtype", "group", "ranks", "time_us", "algbw_gbps", "busbw_gbps",
                          "p50_us", "p99_us", "cv", "wrong", "times_us"})
      EXPECT_TRUE(res.contains(k)) << k;
    EXPECT_EQ(res["wrong"], 0);
    EXPECT_EQ(res["ranks"], 2);
    EXPECT_EQ(res["times_us"].size(), 5u);
    EXPECT_GT(res["busbw_gbps"].get<double>(), 0);
  }
}

TEST(BenchMpi, WrongResultsMakeEveryRankExitOne) {
  // Rank 3 sees one wrong element per size: 2 ops × 2 sizes = 4, summed over ranks.
  Result r = bench("--op all_reduce,all_to_all --check -b 1K -e 4K -f 4 -n 3", "SAX_TEST_CORRUPT_RANK=3");
  EXPECT_EQ(r.code, 1) << r.err;
  auto lines = sax_lines(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("sax: failed: check failed: 4 wrong elements"), std::string::npos) << lines[0];
  EXPECT_NE(r.out.find("       1  MPI_"), std::string::npos) << r.out;  // the #wrong column, then the call
}

// Every op, both placements, at every size from 1 KiB to 128 KiB — across the op table's windows
// where the MPI backend changes calls — correct in float32 and bfloat16; each row says the call.
TEST(BenchMpi, InPlaceAndOutOfPlaceAcrossTheCallWindowsAreCorrect) {
  for (const char* dtype : {"float32", "bfloat16"}) {
    TempDir t;
    Result r = bench(std::string("--op all --check --inplace 2 -b 1K -e 128K -f 2 -n 2 -w 1 -d ") + dtype + " --json " +
                     t.file("r.json"));
    ASSERT_EQ(r.code, 0) << r.err << r.out;
    auto j = nlohmann::json::parse(sax::test::slurp(t.file("r.json")));
    EXPECT_EQ(j["version"], 2);
    EXPECT_EQ(j["config"]["inplace"], 2);
    std::map<std::pair<std::string, bool>, int> rows;
    std::map<std::pair<std::string, std::uint64_t>, std::string> path;
    for (const auto& res : j["results"]) {
      EXPECT_EQ(res["wrong"], 0) << res.dump();
      ++rows[{res["op"], res["in_place"]}];
      path[{res["op"], res["bytes"]}] = res["path"];
    }
    // 8 sizes: both rows where an in-place form exists, out of place (broadcast: in place) else.
    for (const char* op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      EXPECT_EQ((rows[{op, false}]), 8) << op;
      EXPECT_EQ((rows[{op, true}]), 8) << op;
    }
    for (const char* op : {"all_to_all", "send_recv"}) EXPECT_EQ((rows[{op, false}]), 8) << op;
    EXPECT_EQ((rows[{"broadcast", true}]), 8);
    EXPECT_EQ(rows.size(), 9u);  // and no other (op, placement)
    // The op table: reduce_scatter always MPI_Reduce_scatter (never the slow _block call);
    // all-reduce's and all-gather's composite windows.
    EXPECT_EQ((path[{"reduce_scatter", 1024}]), "MPI_Reduce_scatter");
    EXPECT_EQ((path[{"reduce_scatter", 131072}]), "MPI_Reduce_scatter");
    EXPECT_EQ((path[{"all_reduce", 4096}]), "MPI_Allreduce");
    EXPECT_EQ((path[{"all_reduce", 8192}]), "MPI_Reduce+MPI_Bcast");
    EXPECT_EQ((path[{"all_reduce", 65536}]), "MPI_Reduce+MPI_Bcast");
    EXPECT_EQ((path[{"all_reduce", 131072}]), "MPI_Allreduce");
    EXPECT_EQ((path[{"all_gather", 16384}]), "MPI_Gather+MPI_Bcast");
    EXPECT_EQ((path[{"all_gather", 65536}]), "MPI_Allgather");
  }
}

// --inplace 1 runs every op that has an in-place form, broadcast (one buffer) included.
TEST(BenchMpi, InPlaceOnlyRunsBroadcastToo) {
  Result r = bench("--op all_reduce,broadcast --inplace 1 --check -b 1K -e 1K -n 2 -w 1 -z 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("   out "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MPI_Bcast"), std::string::npos) << r.out;
}

// --average is named in the header and the JSON, and says what time_us is.
TEST(BenchMpi, AggregationIsNamedInTheHeaderAndTheJson) {
  TempDir t;
  Result r = bench("-b 1K -e 1K -n 4 -a 3 --json " + t.file("max.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("time = slowest rank's mean per iteration (average 3: max"), std::string::npos) << r.out;
  auto j = nlohmann::json::parse(sax::test::slurp(t.file("max.json")));
  EXPECT_EQ(j["config"]["average"], "max");
  EXPECT_NE(j["timing"].get<std::string>().find("each the max over ranks"), std::string::npos) << j["timing"];
  r = bench("-b 1K -e 1K -n 4 --json " + t.file("mean.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("time = mean over ranks of each rank's mean per iteration (average 1: mean"), std::string::npos)
      << r.out;
  EXPECT_EQ(nlohmann::json::parse(sax::test::slurp(t.file("mean.json")))["config"]["average"], "mean");
  // regress compares like with like: exit 2, naming both files and the field.
  r = sh(std::string(SAX_BINARY) + " regress --baseline " + t.file("max.json") + " --current " + t.file("mean.json"));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("max.json aggregates times over ranks as max (/config/average) but"), std::string::npos)
      << r.err;
}

// Short iterations are timed in samples of several (--min-sample-us, default 50 µs), the
// iterations split evenly; the header and the JSON say so, and regress compares like with like.
TEST(BenchMpi, ShortIterationsAreSampledInRunsThatSayHowMany) {
  TempDir t;
  Result r = bench("-b 1K -e 1K -n 300 -w 30 --json " + t.file("default.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("p50/p99/cv over samples of consecutive iterations lasting >= 50 us"), std::string::npos)
      << r.out;
  EXPECT_EQ(nlohmann::json::parse(sax::test::slurp(t.file("default.json")))["config"]["min_sample_us"], 50.0);
  // 1 s, the largest accepted: a sample then holds the most iterations allowed (a tenth of them)
  // while an iteration takes under 33 ms, and more than one while it takes under 0.5 s. (At 1 ms a
  // 1 KiB all-reduce of 4 ranks beside another job on 2 cores took up to 14 ms: one a sample.)
  r = bench("-b 1K -e 1K -n 300 -w 30 --min-sample-us 1000000 --json " + t.file("1000.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(sax::test::slurp(t.file("1000.json")));
  const auto& res = j["results"][0];
  const double per = res["iters_per_sample"].get<double>();
  const auto samples = static_cast<double>(res["times_us"].size());
  // More than one iteration a sample, at most a tenth of them (at least 10 samples); every
  // iteration in one.
  EXPECT_GT(per, 1) << res.dump();
  EXPECT_GE(samples, 10) << res.dump();
  EXPECT_DOUBLE_EQ(per * samples, 300) << res.dump();
  // The samples' times per iteration average to about the rank's mean per iteration.
  double sum = 0;
  for (const auto& x : res["times_us"]) sum += x.get<double>();
  EXPECT_NEAR(sum / samples, res["time_us"].get<double>(), 0.2 * res["time_us"].get<double>()) << res.dump();
  // --min-sample-us 0: every iteration its own sample.
  r = bench("-b 1K -e 1K -n 30 -w 3 --min-sample-us 0 --json " + t.file("0.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("p50/p99/cv over per-iteration samples"), std::string::npos) << r.out;
  j = nlohmann::json::parse(sax::test::slurp(t.file("0.json")));
  EXPECT_EQ(j["results"][0]["times_us"].size(), 30u);
  EXPECT_EQ(j["results"][0]["iters_per_sample"], 1.0);
  r = sh(std::string(SAX_BINARY) + " regress --baseline " + t.file("default.json") + " --current " + t.file("0.json"));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("default.json takes samples of at least 50 us (/config/min_sample_us) but"), std::string::npos)
      << r.err;
}

namespace {

Result regress(const std::string& a, const std::string& b) {
  return sh(std::string(SAX_BINARY) + " regress --baseline " + a + " --current " + b);
}

}  // namespace

// `regress` reads what `bench coll --json` wrote, one real sweep shared by the cases: a run against
// itself is no regression, and the same file with every time doubled is one at every size (a drop far
// past the 5 % tolerance that a busy host's spread cannot hide from the rank test). (What
// the gate says of real re-runs and of a real injected slowdown depends on the host's noise: a
// figure for scripts/regress_gate.py, not an assertion; the gate itself is tested on made samples in
// test_regress_unit.cpp.)
class RegressMpi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    base_ = bench("--op all_reduce -b 1K -e 16K -f 4 -n 200 -w 10 --min-sample-us 0 --json " + dir_->file("base.json"));
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(base_.code, 0) << base_.err; }
  static std::string base() { return dir_->file("base.json"); }
  static TempDir* dir_;
  static Result base_;
};
TempDir* RegressMpi::dir_ = nullptr;
Result RegressMpi::base_;

TEST_F(RegressMpi, ARealResultsFileAgainstItselfRaisesNoAlarm) {
  const Result r = regress(base(), base());
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("all_reduce"), std::string::npos) << r.out;
}

TEST_F(RegressMpi, ARealResultsFileTwiceAsSlowIsFlaggedAtEverySize) {
  auto j = nlohmann::json::parse(sax::test::slurp(base()));
  for (auto& res : j["results"]) {
    for (auto& x : res["times_us"]) x = x.get<double>() * 2;
    res["time_us"] = res["time_us"].get<double>() * 2;
    res["busbw_gbps"] = res["busbw_gbps"].get<double>() / 2;
  }
  ASSERT_EQ(j["results"].size(), 3u);
  const std::string scaled = dir_->file("scaled.json");
  std::ofstream(scaled) << j.dump();
  const Result r = regress(base(), scaled);
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("3 regression(s) of busbw"), std::string::npos) << r.err;
}

// What bench coll cannot allocate ended in std::bad_alloc on every rank (exit
// 1). Now every rank refuses it together before allocating: exit 2, one line from rank 0.
TEST(HardeningBenchCollAllocation, UnallocatableSweepsEndWithOneLineAndExitTwo) {
  struct Case {
    std::string args;
    std::vector<std::string> says;  // one of these
  };
  const Case cases[] = {
      {"-n 1000000000", {"-n/--iters: expected an integer from 1 to 10000000"}},
      {"-e 1024G", {"bench coll needs 3072.0 GiB per rank"}},
      // Past MPI's int count on any host; past this host's memory where it has less than 4 × 24 GiB.
      {"-e 8G",
       {"all_reduce passes 2147483648 float32 elements to one MPI call", "bench coll needs 24.0 GiB per rank"}},
  };
  for (const Case& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    Result r = bench(c.args, "timeout 60");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
    EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << r.err;
    const auto lines = sax_lines(r.err);
    ASSERT_EQ(lines.size(), 1u) << c.args << ": " << r.err;
    bool said = false;
    for (const auto& say : c.says) said = said || lines[0].find(say) != std::string::npos;
    EXPECT_TRUE(said) << c.args << ": " << lines[0];
    EXPECT_LT(s, 30) << c.args;  // a check, not an allocation
  }
}

// A sweep that fits still runs: -e 1G (3 GiB per rank: the buffers and MPI's scratch) on 2 ranks,
// where the host has room for it twice over.
TEST(HardeningBenchCollAllocation, OneGibibyteRunsWhereTheHostHasTheMemory) {
  std::ifstream meminfo("/proc/meminfo");
  double available_gib = 0;
  for (std::string key; meminfo >> key;) {
    double kb = 0;
    meminfo >> kb;
    if (key == "MemAvailable:") available_gib = kb / (1 << 20);
    meminfo.ignore(1 << 10, '\n');
  }
  if (available_gib < 2 * 2 * 3) GTEST_SKIP() << "needs 12 GiB available, the host has " << available_gib;
  TempDir t;
  Result r = bench("--op all_reduce -b 1G -e 1G -n 1 -w 0 --json " + t.file("r.json"), "timeout 300", 2);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(sax::test::slurp(t.file("r.json")));
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_EQ(j["results"][0]["bytes"], 1ull << 30);
}

// A size longer than --timeout whose iterations are short completes; progress
// is counted per iteration. The software link emulator puts 1 ms on every message across the
// building boundary, so 3000 iterations last at least 3 s whatever the machine, against a 2 s
// timeout. (A hung peer is still caught: BenchMpi.HungPeerEndsEveryRankWithExitOneByTheTimeout.)
TEST(HardeningWatchdog, SizeLongerThanTheTimeoutOfShortIterationsCompletes) {
  TempDir t;
  Result r = bench("--cluster " + cluster() + " --group cross_building --op send_recv -b 8 -e 8 -n 3000 -w 1 " +
                       "--timeout 2 --json " + t.file("r.json"),
                   "SAX_EMULATION=software timeout 120");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(sax::test::slurp(t.file("r.json")));
  ASSERT_EQ(j["results"].size(), 1u);
  const auto& res = j["results"][0];
  EXPECT_GT(res["time_us"].get<double>() * 3000, 2e6) << "the size did not outlast the timeout";
  EXPECT_LT(res["p99_us"].get<double>(), 1e6) << "an iteration as long as the timeout";
  // With --groups-at-once 1 the other group waits out the whole size, sleeping: its wait counts.
  r = bench("--cluster " + cluster() + " --group cross_building --groups-at-once 1 --op send_recv -b 8 -e 8 " +
                "-n 3000 -w 1 --timeout 2 --json " + t.file("one.json"),
            "SAX_EMULATION=software timeout 120");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto one = nlohmann::json::parse(sax::test::slurp(t.file("one.json")));
  EXPECT_GT(one["results"][0]["time_us"].get<double>() * 3000, 2e6) << "the size did not outlast the timeout";
}
