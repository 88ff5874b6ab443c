// `sax launch`: the plan (placement building → node → device from the cluster, the emulation, the
// exact mpirun command with the environment its ranks need) printed by --dry-run without running
// anything; bad input (an unknown or unbuilt emulation, an unknown technology, no command, a
// command that is not a testbed one) exits 2 with one line; a launched command runs on every rank
// and its exit code comes back; the ranks' results say which emulation they ran under.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "launcher/launch.hpp"
#include "tests/support/run.hpp"

using sax::test::Result;
using sax::test::run_sax;
using sax::test::TempDir;

namespace {
std::string cluster(const std::string& name) { return sax::test::preset_path("clusters/" + name); }
int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
}  // namespace

TEST(Launch, DryRunPrintsThePlacementAndTheExactCommand) {
  Result r = run_sax("launch --cluster " + cluster("local-2bld.json") +
                     " --emulate none --technology gbe-5 --dry-run -- bench coll -b 1K -e 1K --json '/tmp/a b.json'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("4 ranks, emulation none, technology gbe-5"), std::string::npos) << r.out;
  // Ranks fill a node's devices, then the next building.
  EXPECT_NE(r.out.find("# 0 bld-a 0 0\n# 1 bld-a 0 1\n# 2 bld-b 1 0\n# 3 bld-b 1 1\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("SAX_EMULATION=none SAX_TECHNOLOGY=gbe-5"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mpirun -np 4 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(" bench coll -b 1K -e 1K --json '/tmp/a b.json'"), std::string::npos) << r.out;
  // Open MPI takes the ring algorithms the cost model prices.
  EXPECT_NE(r.out.find("OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_allreduce_algorithm=4"),
            std::string::npos)
      << r.out;
}

TEST(Launch, AnOpenMpiAlgorithmTheUserChoseIsKept) {
  const sax::Cluster c = sax::load_cluster(cluster("local-2bld.json"));
  sax::launcher::LaunchOptions o;
  o.command = {"run"};
  o.sax_binary = "sax";
  o.emulate = "none";
  auto value = [](const sax::launcher::LaunchPlan& p, const std::string& k) {
    for (const auto& [key, v] : p.env)
      if (key == k) return v;
    return std::string("(unset)");
  };
  EXPECT_EQ(value(sax::launcher::plan_launch(c, "local-2bld.json", o), "OMPI_MCA_coll_tuned_allreduce_algorithm"), "4");
  // The nonblocking all_reduce paced ranks wait on is the ring too.
  EXPECT_EQ(value(sax::launcher::plan_launch(c, "local-2bld.json", o), "OMPI_MCA_coll_libnbc_iallreduce_algorithm"),
            "1");
  ::setenv("OMPI_MCA_coll_tuned_allreduce_algorithm", "6", 1);
  const auto p = sax::launcher::plan_launch(c, "local-2bld.json", o);
  ::unsetenv("OMPI_MCA_coll_tuned_allreduce_algorithm");
  EXPECT_EQ(value(p, "OMPI_MCA_coll_tuned_allreduce_algorithm"), "(unset)");  // the environment's 6 stands
  EXPECT_EQ(value(p, "OMPI_MCA_coll_tuned_allgather_algorithm"), "4");
}

TEST(Launch, ShellQuotingReadsBack) {
  EXPECT_EQ(sax::launcher::shell_quote("plain-word_1.json"), "plain-word_1.json");
  EXPECT_EQ(sax::launcher::shell_quote("a b"), "'a b'");
  EXPECT_EQ(sax::launcher::shell_quote("it's; rm -rf /"), "'it'\\''s; rm -rf /'");
  EXPECT_EQ(sax::launcher::shell_quote(""), "''");
}

TEST(Launch, PlacementOfALargeClusterFillsNodesThenBuildings) {
  const sax::Cluster c = sax::load_cluster(cluster("h100-3bld.json"));
  sax::launcher::LaunchOptions o;
  o.command = {"run"};
  o.sax_binary = "sax";
  o.host_cores = 1 << 20;  // a host that holds the cluster (a real one is refused: LaunchPlanSafety)
  const auto p = sax::launcher::plan_launch(c, "h100-3bld.json", o);
  ASSERT_EQ(static_cast<std::int64_t>(p.places.size()), c.world_size());
  const std::int64_t per_building = c.buildings[0].nodes * c.devices_per_node;
  EXPECT_EQ(p.places[static_cast<std::size_t>(per_building - 1)].building, 0);
  EXPECT_EQ(p.places[static_cast<std::size_t>(per_building)].building, 1);
  EXPECT_EQ(p.places[static_cast<std::size_t>(c.devices_per_node)].node, 1);
  EXPECT_EQ(p.places[static_cast<std::size_t>(c.devices_per_node)].local_device, 0);
}

struct Bad {
  const char* name;
  std::string args, says;
};
void PrintTo(const Bad& b, std::ostream* os) { *os << b.name; }
class LaunchBad : public ::testing::TestWithParam<Bad> {};

TEST_P(LaunchBad, ExitsTwoWithOneLine) {
  Result r = run_sax("launch --cluster " + cluster("local-2bld.json") + " " + GetParam().args);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().says), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LaunchBad,
    ::testing::Values(Bad{"UnknownEmulation", "--emulate tunnel -- run",
                          "--emulate: expected auto, netns, software, plugin or none"},
                      Bad{"SoftwareWithoutCluster", "--emulate software -- bench coll",
                          "--emulate software: the command must name the cluster"},
                      Bad{"UnknownTechnology", "--technology warp -- run", "has no network technology 'warp'"},
                      Bad{"NoCommand", "--dry-run", "no command after --"},
                      Bad{"NotATestbedCommand", "-- explore --top 3", "'explore' is not a sax command that runs"}),
    [](const auto& info) { return std::string(info.param.name); });

#ifdef SAX_HAVE_TESTBED_TESTS
// Started for real on the 4 ranks: the results record the emulation, and a failing command's
// exit code (2: bad input) comes back through mpirun and the launcher.
TEST(LaunchMpi, RunsTheCommandOnEveryRankAndPassesItsExitCodeBack) {
  TempDir t;
  Result r = run_sax("launch --cluster " + cluster("local-2bld.json") +
                     " --emulate none --technology gbe-5 -- bench coll -b 1K -e 4K "
                     "-n 3 -w 1 --json " +
                     t.file("c.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("emulation none, technology gbe-5"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(sax::test::slurp(t.file("c.json")));
  EXPECT_EQ(j["env"]["emulation"], "none");
  EXPECT_EQ(j["env"]["technology"], "gbe-5");
  EXPECT_EQ(j["env"]["world_size"], 4);
  r = run_sax("launch --cluster " + cluster("local-2bld.json") + " --emulate none -- bench coll --op all_reduse");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("unknown operation 'all_reduse'"), std::string::npos) << r.err;
}
#endif

#ifdef SAX_HAVE_TESTBED_TESTS
// The software link emulator through the launcher: the boundary's delay is a floor and its rate a
// ceiling (one-sided, whatever the noise); inside a building nothing is slowed; the results say
// which emulation they came from; a run whose layout is priced on another technology is refused.
TEST(LaunchMpi, SoftwareEmulationShapesOnlyTheBoundary) {
  TempDir t;
  const std::string c = cluster("local-2bld.json");
  Result r =
      run_sax("launch --cluster " + c + " --emulate software -- bench coll --cluster " + c +
              " --group cross_building --op send_recv -b 8 -e 4M -f 524288 -n 5 -w 1 --json " + t.file("x.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto x = nlohmann::json::parse(sax::test::slurp(t.file("x.json")));
  EXPECT_EQ(x["env"]["emulation"], "software");
  ASSERT_EQ(x["results"].size(), 2u);
  EXPECT_GE(x["results"][0]["time_us"].get<double>(), 1000.0);
  EXPECT_LE(x["results"][1]["algbw_gbps"].get<double>(), 0.125 * 1.05);
  EXPECT_NE(x["results"][1]["path"].get<std::string>().find("software-emulated link"), std::string::npos);
  r = run_sax("launch --cluster " + c + " --emulate software -- bench coll --cluster " + c +
              " --group intra_building --op send_recv -b 4M -e 4M -n 5 -w 1 --json " + t.file("i.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto i = nlohmann::json::parse(sax::test::slurp(t.file("i.json")));
  // Inside a building is not shaped: its call is the library's own, not the emulator's (a
  // bandwidth floor here is the host's speed, which a busy host misses).
  EXPECT_EQ(i["results"][0]["path"].get<std::string>().find("software"), std::string::npos) << i["results"][0];
  EXPECT_EQ(i["env"]["emulation"], "software");
  r = run_sax("launch --cluster " + c + " --emulate software -- run --cluster " + c + " --model " +
              sax::test::preset_path("models/moe-tiny.json") + " --layout " +
              sax::test::preset_path("layouts/local-ep2-dp4.json"));
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(
      r.err.find("crosses buildings over network technology gbe-5 but the testbed emulates the cluster's own link"),
      std::string::npos)
      << r.err;
}

// A layout's link priority through the launcher: under the software emulator its PP group's
// messages are of the priority class (the path says so), a group of no parallelism's (the
// benchmarks' one rank per building) is not; under any other
// boundary the layout is refused, not run as if the priority were there.
TEST(LaunchMpi, LinkPriorityIsTheSoftwareEmulators) {
  TempDir t;
  const std::string c = cluster("local-2bld.json");
  nlohmann::json l = nlohmann::json::parse(sax::test::slurp(sax::test::preset_path("layouts/local-pp2-dp2.json")));
  l["schedule"]["link_priority"] = {"pp"};
  const std::string layout = t.write("pp-first.json", l);
  auto bench = [&](const std::string& emulate, const std::string& group) {
    return run_sax("launch --cluster " + c + " --emulate " + emulate + " -- bench coll --cluster " + c + " --layout " +
                   layout + " --group " + group + " --op send_recv -b 4K -e 4K -n 2 -w 1 --json " +
                   t.file(group + ".json"));
  };
  for (const char* group : {"pp", "cross_building"}) {
    Result r = bench("software", group);
    ASSERT_EQ(r.code, 0) << r.err;
    const auto x = nlohmann::json::parse(sax::test::slurp(t.file(std::string(group) + ".json")));
    const std::string path = x["results"][0]["path"].get<std::string>();
    EXPECT_NE(path.find("software-emulated link"), std::string::npos) << group << ": " << path;
    EXPECT_EQ(path.find("priority class") != std::string::npos, std::string(group) == "pp") << group << ": " << path;
  }
  Result r = bench("none", "pp");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("schedule.link_priority (pp): only the software emulator gives"), std::string::npos) << r.err;
}
#endif
