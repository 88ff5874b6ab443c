// `sax launch` and NCCL: on a cluster of 2 buildings × 2 nodes × 2 devices, each
// mode's --dry-run shows the variables that keep NCCL on the emulated boundary — an NCCL_HOSTID per
// node (the same on a node's ranks, never the same across a building), NCCL_NET_PLUGIN and the
// plugin's link (the cluster's cross-building link, as the software emulator takes it) in plugin
// mode only, NCCL's sockets on the namespace's veth under netns — and the rank wrapper really sets
// each rank's values from its rank under mpirun and srun. A value the user already set wins; a
// plugin that is not built is refused at launch; the plugin on the CPU backend is refused.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "launcher/launch.hpp"
#include "launcher/nccl_env.hpp"
#include "launcher/netns.hpp"
#include "spec/error.hpp"
#include "spec/pacing.hpp"
#include "tests/support/run.hpp"

using sax::launcher::Emulation;
using sax::test::Result;
using sax::test::run_sax;
using sax::test::run_shell;
using sax::test::TempDir;
namespace nccl_plugin = sax::launcher::nccl_plugin;

namespace {

// local-2bld with two nodes in each building: 8 ranks, nodes 0-1 in bld-a, 2-3 in bld-b.
nlohmann::json two_by_two() {
  nlohmann::json j = sax::test::preset("clusters/local-2bld.json");
  j["name"] = "local-2x2";
  for (auto& b : j["buildings"]) b["nodes"] = 2;
  return j;
}

sax::launcher::LaunchOptions options(const std::string& mode) {
  sax::launcher::LaunchOptions o;
  o.command = {"bench", "coll", "--cluster", "local-2x2.json"};
  o.sax_binary = "/opt/sax/sax";
  o.emulate = mode;
  o.nccl_net_plugin = "/opt/sax/libnccl-net-sax.so";
  o.job = 4242;
  return o;
}

std::string value(const sax::launcher::EnvList& env, const std::string& k) {
  for (const auto& [key, v] : env)
    if (key == k) return v;
  return "(unset)";
}

// The variables the rank wrapper of `argv` gives rank `rank` (started as mpirun or srun starts it).
std::map<std::string, std::string> rank_env(const std::vector<std::string>& argv, int rank, bool slurm = false) {
  const auto c = std::find(argv.begin(), argv.end(), "-c");
  if (c == argv.end() || c + 2 >= argv.end()) return {};
  Result r = run_shell(std::string("env -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID ") +
                       (slurm ? "SLURM_PROCID=" : "OMPI_COMM_WORLD_RANK=") + std::to_string(rank) + " sh -c " +
                       sax::launcher::shell_quote(c[1]) + " " + c[2] + " env");
  EXPECT_EQ(r.code, 0) << r.err;
  std::map<std::string, std::string> env;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (const auto eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  return env;
}

// The line of a dry run that starts the command: the environment, then mpirun.
std::string command_line(const std::string& out) {
  const auto at = out.find("mpirun ");
  const auto start = out.rfind('\n', at);
  return out.substr(start == std::string::npos ? 0 : start + 1, out.find('\n', at) - start);
}

class LaunchNcclMode : public ::testing::TestWithParam<std::string> {};

TEST_P(LaunchNcclMode, DryRunShowsEachNodesHostIdAndTheModesVariables) {
  TempDir t;
  const std::string file = t.write("local-2x2.json", two_by_two());
  const std::string& mode = GetParam();
  Result r = run_sax("launch --cluster " + file + " --emulate " + mode + " --dry-run -- bench coll --cluster " + file);
  ASSERT_EQ(r.code, 0) << r.err;
  // One NCCL_HOSTID per node, by building: the same for a node's ranks, different across buildings.
  EXPECT_NE(r.out.find("# NCCL, per node"), std::string::npos) << r.out;
  for (const char* node : {"node 0 (bld-a, ranks 0-1):", "node 1 (bld-a, ranks 2-3):", "node 2 (bld-b, ranks 4-5):",
                           "node 3 (bld-b, ranks 6-7):"})
    EXPECT_NE(r.out.find(node), std::string::npos) << node << "\n" << r.out;
  for (int n = 0; n < 4; ++n)
    EXPECT_NE(r.out.find("NCCL_HOSTID=sax-local-2x2-" + std::string(n < 2 ? "bld-a" : "bld-b") + "-node" +
                         std::to_string(n) + "\n"),
              std::string::npos)
        << r.out;
  const std::string line = command_line(r.out);
  EXPECT_NE(line.find("SAX_EMULATION=" + mode + " "), std::string::npos) << line;
  EXPECT_NE(line.find(" sh -c "), std::string::npos) << "the rank wrapper: " << line;
  const bool plugin = mode == "plugin";
  EXPECT_EQ(line.find("NCCL_NET_PLUGIN=") != std::string::npos, plugin) << line;
  EXPECT_EQ(line.find("-x NCCL_NET_PLUGIN") != std::string::npos, plugin) << line;
  EXPECT_EQ(line.find("NCCL_NET=sax ") != std::string::npos, plugin) << line;
  EXPECT_EQ(line.find("SAX_NET_LATENCY_US=") != std::string::npos, plugin) << line;
  EXPECT_NE(line.find("SAX_NET_KEY=local-2x2-own-"), std::string::npos)
      << "every job paces under its launcher's key: " << line;
  EXPECT_EQ(r.out.find("NCCL_SOCKET_"), std::string::npos) << "sockets are netns's" << r.out;
  EXPECT_EQ(line.find("NCCL_NET=Socket"), std::string::npos) << line;
  if (plugin) {
    // The plugin's link: the cluster's cross-building link (1 Gbit/s = 0.125 GB/s per device, 1 ms),
    // a NIC of 1.25 GB/s (intra_building), the pacing key cluster-technology-job.
    EXPECT_NE(line.find("NCCL_NET_PLUGIN=" + std::string(SAX_BINARY).substr(0, std::string(SAX_BINARY).rfind('/')) +
                        "/libnccl-net-sax.so "),
              std::string::npos)
        << line;
    for (const char* want : {"SAX_NET_LATENCY_US=1000 ", "SAX_NET_BANDWIDTH_GBPS=0.125 ", "SAX_NET_OVERSUBSCRIPTION=1 ",
                             "SAX_NET_NIC_GBPS=1.25 "})
      EXPECT_NE(line.find(want), std::string::npos) << want << "\n" << line;
    EXPECT_TRUE(std::regex_search(line, std::regex("SAX_NET_KEY=local-2x2-own-[0-9]+ "))) << line;
    EXPECT_NE(r.out.find("node 2 (bld-b, ranks 4-5): SAX_NET_BUILDING=1 SAX_NET_DEVICES_IN_BUILDING=4 "),
              std::string::npos)
        << r.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, LaunchNcclMode, ::testing::Values("none", "software", "plugin"),
                         [](const auto& info) { return info.param; });

TEST(LaunchNccl, TheRankWrapperSetsEachRanksValuesUnderMpirunAndSrun) {
  const sax::Cluster c = sax::read_cluster(two_by_two(), "local-2x2.json");
  for (const std::string mode : {"none", "software", "plugin"}) {
    const auto p = sax::launcher::plan_launch(c, "local-2x2.json", options(mode));
    std::vector<std::string> ids;
    for (int r = 0; r < 8; ++r) {
      auto env = rank_env(p.argv, r);
      const auto place = c.place(r);
      ids.push_back(env["NCCL_HOSTID"]);
      EXPECT_EQ(env["NCCL_HOSTID"], "sax-local-2x2-" + c.buildings[static_cast<std::size_t>(place.building)].name +
                                        "-node" + std::to_string(place.node))
          << mode << " rank " << r;
      if (mode == "plugin") {
        EXPECT_EQ(env[sax::kEnvNetBuilding.name], std::to_string(place.building)) << "rank " << r;
        EXPECT_EQ(env[sax::kEnvNetDevicesInBuilding.name], "4") << "rank " << r;
      } else {
        EXPECT_EQ(env.count(sax::kEnvNetBuilding.name), 0u) << mode;
      }
    }
    EXPECT_EQ(ids[0], ids[1]) << "a node's ranks are one host";
    EXPECT_NE(ids[1], ids[2]) << "two nodes are two hosts";
    EXPECT_EQ(std::set<std::string>(ids.begin(), ids.begin() + 4).count(ids[4]), 0u) << "a building's ids are its own";
    EXPECT_EQ(rank_env(p.argv, 5, /*slurm=*/true)["NCCL_HOSTID"], ids[5]) << "srun's SLURM_PROCID";
  }
  // Without a rank the wrapper refuses rather than guessing.
  const auto p = sax::launcher::plan_launch(c, "local-2x2.json", options("none"));
  const auto at = std::find(p.argv.begin(), p.argv.end(), "-c");
  ASSERT_NE(at, p.argv.end());
  Result r = run_shell("env -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID sh -c " + sax::launcher::shell_quote(at[1]) +
                       " sax-rank true");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("no rank"), std::string::npos) << r.err;
}

TEST(LaunchNccl, BuildingsOfDifferentSizesGetTheirOwnValues) {
  // Three buildings of 1, 2 and 1 nodes: the wrapper's tests follow the buildings' node counts.
  nlohmann::json j = two_by_two();
  j["buildings"] = nlohmann::json::array(
      {{{"name", "north"}, {"nodes", 1}}, {{"name", "mid"}, {"nodes", 2}}, {{"name", "south"}, {"nodes", 1}}});
  const sax::Cluster c = sax::read_cluster(j, "uneven.json");
  const auto p = sax::launcher::plan_launch(c, "uneven.json", options("plugin"));
  const std::vector<std::pair<std::string, std::string>> want = {
      {"north-node0", "2"}, {"mid-node1", "4"}, {"mid-node2", "4"}, {"south-node3", "2"}};
  for (int r = 0; r < 8; ++r) {
    auto env = rank_env(p.argv, r);
    const auto node = static_cast<std::size_t>(r / 2);
    EXPECT_EQ(env["NCCL_HOSTID"], "sax-local-2x2-" + want[node].first) << "rank " << r;
    EXPECT_EQ(env[sax::kEnvNetDevicesInBuilding.name], want[node].second) << "rank " << r;
    EXPECT_EQ(env[sax::kEnvNetBuilding.name], std::to_string(c.place(r).building)) << "rank " << r;
  }
}

TEST(LaunchNccl, ThePluginsLinkIsTheClustersCrossBuildingLinkUnderEachTechnology) {
  const sax::Cluster c = sax::read_cluster(two_by_two(), "local-2x2.json");
  for (const std::string tech : {"", "gbe-5", "gbe-1-shared", "gbe-1-lowlat"}) {
    auto o = options("plugin");
    o.technology = tech;
    const auto p = sax::launcher::plan_launch(c, "local-2x2.json", o);
    const sax::BuildingBoundary b = c.boundary(0, tech);
    EXPECT_DOUBLE_EQ(std::stod(value(p.env, sax::kEnvNetLatencyUs.name)), c.cross_building_link(tech).latency_us)
        << tech;
    EXPECT_DOUBLE_EQ(std::stod(value(p.env, sax::kEnvNetBandwidthGbps.name)),
                     c.cross_building_link(tech).bandwidth_gbps)
        << tech;
    EXPECT_DOUBLE_EQ(std::stod(value(p.env, sax::kEnvNetOversubscription.name)),
                     c.cross_building_link(tech).oversubscription)
        << tech;
    EXPECT_DOUBLE_EQ(std::stod(value(p.env, sax::kEnvNetNicGbps.name)), b.nic_gbps) << tech;
    EXPECT_EQ(value(p.env, sax::kEnvNetKey.name), sax::boundary_pacing_key(c, tech, 4242));
    EXPECT_EQ(value(p.env, "NCCL_NET_PLUGIN"), "/opt/sax/libnccl-net-sax.so");
    EXPECT_EQ(value(p.env, "NCCL_NET"), nccl_plugin::kNetName);
  }
  EXPECT_EQ(value(sax::launcher::plan_launch(c, "x", options("plugin")).env, sax::kEnvNetOversubscription.name), "1");
  auto o = options("plugin");
  o.technology = "gbe-1-shared";
  EXPECT_EQ(value(sax::launcher::plan_launch(c, "x", o).env, sax::kEnvNetOversubscription.name), "2");
}

TEST(LaunchNccl, NetnsPutsNcclOnSocketsOverEachNamespacesVeth) {
  const sax::Cluster c = sax::read_cluster(two_by_two(), "local-2x2.json");
  // NCCL's limits (env.rst; src/transport/net_socket.cc MAX_THREADS, MAX_SOCKETS).
  static_assert(sax::launcher::kNcclSocketThreads >= 1 && sax::launcher::kNcclSocketThreads <= 16);
  static_assert(sax::launcher::kNcclSocketThreads * sax::launcher::kNcclSocketsPerThread <= 64);
  sax::launcher::NcclEnvOptions o;
  o.netns_slot = 3;
  const sax::launcher::NcclEnv e = sax::launcher::nccl_env(c, Emulation::netns, o);
  EXPECT_EQ(value(e.common, "NCCL_NET"), "Socket");
  EXPECT_EQ(value(e.common, "NCCL_IB_DISABLE"), "1");
  EXPECT_EQ(value(e.common, "NCCL_SOCKET_NTHREADS"), "4");
  EXPECT_EQ(value(e.common, "NCCL_NSOCKS_PERTHREAD"), "4");
  EXPECT_EQ(value(e.common, "NCCL_NET_PLUGIN"), "(unset)");
  // The NIC inside each device's namespace, as the testbed names it (launcher/netns.cpp): a prefix
  // every device's NIC, and nothing else there, starts with.
  EXPECT_EQ(value(e.common, "NCCL_SOCKET_IFNAME"), "sax-3-nd");
  sax::launcher::NetnsConfig n;
  n.slot = 3;
  n.slots_per_building = {4, 4};
  n.node_devices = {2, 2};
  n.boundary_gbps = n.device_gbps = n.nic_gbps = {0.5, 0.5};
  std::string setup;
  for (const auto& cmd : sax::launcher::netns_setup_commands(n)) setup += sax::launcher::shell_line(cmd) + "\n";
  for (int d = 0; d < 8; ++d)
    EXPECT_NE(setup.find("peer name sax-3-nd" + std::to_string(d) + " netns " + sax::launcher::netns_device_name(3, d)),
              std::string::npos)
        << setup;
  EXPECT_EQ(e.hostid_prefix.size(), 2u);
}

TEST(LaunchNccl, NetnsDryRunShowsTheSocketSettingsWherePermitted) {
  const std::string bin = SAX_BINARY;
  if (const std::string why = sax::launcher::netns_unavailable(bin.substr(0, bin.rfind('/') + 1) + "sax-linkdelay");
      !why.empty())
    GTEST_SKIP() << why;
  TempDir t;
  const std::string file = t.write("local-2x2.json", two_by_two());
  Result r = run_sax("launch --cluster " + file + " --emulate netns --dry-run -- bench coll");
  ASSERT_EQ(r.code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("# testbed (sax-[0-9]-)"))) << r.out;
  const std::string prefix = m[1];
  const std::string line = command_line(r.out);
  for (const char* want : {"NCCL_NET=Socket ", "NCCL_IB_DISABLE=1 ", "NCCL_SOCKET_NTHREADS=4 ",
                           "NCCL_NSOCKS_PERTHREAD=4 ", "-x NCCL_NET ", "-x NCCL_SOCKET_NTHREADS "})
    EXPECT_NE(line.find(want), std::string::npos) << want << "\n" << line;
  EXPECT_NE(line.find("NCCL_SOCKET_IFNAME=" + prefix + "nd "), std::string::npos) << line;
  EXPECT_NE(r.out.find("node 1 (bld-a, ranks 2-3): NCCL_HOSTID="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("node 2 (bld-b, ranks 4-5): NCCL_HOSTID="), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("peer name " + prefix + "nd5 netns " + prefix + "d5"), std::string::npos) << r.out;
  EXPECT_EQ(line.find("NCCL_NET_PLUGIN"), std::string::npos) << line;
}

TEST(LaunchNccl, TheUsersOwnValuesWin) {
  TempDir t;
  const std::string file = t.write("local-2x2.json", two_by_two());
  Result r =
      run_shell("NCCL_HOSTID=mine SAX_NET_LATENCY_US=5 NCCL_NET_PLUGIN=/my/libnccl-net-x.so SAX_NET_INNER=ib " +
                std::string(SAX_BINARY) + " launch --cluster " + file + " --emulate plugin --dry-run -- bench coll");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string line = command_line(r.out);
  EXPECT_NE(r.out.find("# kept from the environment: "), std::string::npos) << r.out;
  for (const char* kept : {"NCCL_HOSTID=mine", "SAX_NET_LATENCY_US=5", "NCCL_NET_PLUGIN=/my/libnccl-net-x.so"})
    EXPECT_NE(r.out.find(kept), std::string::npos) << kept << "\n" << r.out;
  EXPECT_EQ(line.find("NCCL_HOSTID="), std::string::npos) << "the wrapper leaves NCCL_HOSTID alone: " << line;
  EXPECT_EQ(line.find("SAX_NET_LATENCY_US="), std::string::npos) << line;
  EXPECT_EQ(line.find("NCCL_NET_PLUGIN="), std::string::npos) << line;
  // SAX_NET_INNER (another net plugin under the boundary) is the user's alone: passed on, never set.
  for (const char* passed : {"-x NCCL_HOSTID ", "-x SAX_NET_LATENCY_US ", "-x NCCL_NET_PLUGIN ", "-x SAX_NET_INNER "})
    EXPECT_NE(line.find(passed), std::string::npos) << passed << "\n" << line;
  EXPECT_NE(line.find("SAX_NET_BANDWIDTH_GBPS=0.125 "), std::string::npos) << "the rest is still set: " << line;
  EXPECT_NE(r.out.find("# emulation: the NCCL net plugin /my/libnccl-net-x.so"), std::string::npos) << r.out;
  // Under netns, a socket setting of the user's stands.
  const sax::Cluster c = sax::read_cluster(two_by_two(), "local-2x2.json");
  ::setenv("NCCL_SOCKET_NTHREADS", "2", 1);
  const sax::launcher::NcclEnv e = sax::launcher::nccl_env(c, Emulation::netns, {});
  ::unsetenv("NCCL_SOCKET_NTHREADS");
  EXPECT_EQ(value(e.common, "NCCL_SOCKET_NTHREADS"), "(unset)");
  EXPECT_EQ(e.kept, std::vector<std::string>{"NCCL_SOCKET_NTHREADS"});
  EXPECT_EQ(value(e.common, "NCCL_NSOCKS_PERTHREAD"), "4");
}

TEST(LaunchNccl, APluginThatIsNotBuiltIsRefusedAtLaunchNotInTheDryRun) {
  const sax::Cluster c = sax::read_cluster(two_by_two(), "local-2x2.json");
  auto o = options("plugin");
  o.nccl_net_plugin = "/nonexistent/libnccl-net-sax.so";
  const auto p = sax::launcher::plan_launch(c, "local-2x2.json", o);
  EXPECT_NE(p.emulation_note.find("not built"), std::string::npos) << p.emulation_note;
  EXPECT_NE(p.text().find("/nonexistent/libnccl-net-sax.so"), std::string::npos);
  try {
    sax::launcher::run_plan(p);
    ADD_FAILURE() << "launched without the plugin";
  } catch (const sax::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--emulate plugin: the NCCL net plugin /nonexistent/libnccl-net-sax.so "
                                         "is not built"),
              std::string::npos)
        << e.what();
  }
}

#ifdef SAX_HAVE_TESTBED_TESTS
// The plugin sees NCCL's traffic only: a CPU (MPI) run under it is refused on every rank with
// exit 2, not run across an unshaped boundary and recorded as "plugin".
TEST(LaunchNcclMpi, ThePluginOnTheCpuBackendIsRefused) {
  Result r = run_shell(
      "SAX_EMULATION=plugin mpirun -np 2 --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -x "
      "SAX_EMULATION " +
      std::string(SAX_BINARY) + " bench coll --backend cpu -b 1K -e 1K -n 1 -w 0");
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("--emulate plugin shapes NCCL traffic only and this run's backend is cpu"), std::string::npos)
      << r.err;
}
#endif

}  // namespace

// Its own suite (process): run_plan sets the plan's environment in the process that runs it.
// In every mode the job paces under the launcher's key (its boundary's segment and its node
// fabrics'), and both go with the job: ranks killed before the last one could unlink leave them.
TEST(LaunchPluginEnd, AJobsPacingSegmentsAreRemovedWhenItEndsInEveryMode) {
  const sax::Cluster c = sax::read_cluster(two_by_two(), "local-2x2.json");
  for (const char* mode : {"plugin", "software", "none"}) {
    ::unsetenv(sax::kEnvNetKey.name);  // run_plan set the last one's here: the user's would be kept
    auto o = options(mode);
    o.nccl_net_plugin = "/bin/true";  // a file: the launch is not refused as unbuilt
    o.job = sax::random_job_id();
    sax::launcher::LaunchPlan p = sax::launcher::plan_launch(c, "local-2x2.json", o);
    p.argv = {"true"};  // the job: its ranks were killed before the last one could unlink
    const std::string key = sax::boundary_pacing_key(c, "", o.job);
    EXPECT_EQ(value(p.env, sax::kEnvNetKey.name), key) << mode;
    for (const std::string& name :
         {sax::pacing_segment_name(key), sax::pacing_segment_name(sax::node_pacing_key(key))}) {
      const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      ASSERT_GE(fd, 0) << name;
      ::close(fd);
    }
    EXPECT_EQ(sax::launcher::run_plan(p), 0) << mode;
    for (const std::string& name :
         {sax::pacing_segment_name(key), sax::pacing_segment_name(sax::node_pacing_key(key))}) {
      EXPECT_LT(::shm_open(name.c_str(), O_RDONLY, 0), 0) << mode << ": " << name << " outlived its job";
      ::shm_unlink(name.c_str());
    }
  }
}
