// `sax launch --emulate netns`: the testbed it plans (every name with the slot's prefix, the
// boundary rate from the cluster, the agent that only enters the slot's namespaces), and, where
// this host permits namespaces (root), the testbed for real: ranks in their building's namespace,
// the boundary shaped (a one-sided check: the delay is a floor and the rate a ceiling, whatever
// the noise), and nothing with the prefix left after a success, a failing command, a killed rank,
// SIGINT, or a killed launcher's leftovers; two testbeds at once are isolated.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "launcher/launch.hpp"
#include "launcher/netns.hpp"
#include "spec/cluster.hpp"
#include "spec/error.hpp"
#include "tests/support/run.hpp"

using sax::test::Result;
using sax::test::run_sax;
using sax::test::run_shell;
using sax::test::TempDir;

namespace {

std::string cluster(const std::string& name) { return sax::test::preset_path("clusters/" + name); }

// Everything a testbed makes, by its prefix: namespaces, links, helper processes, launch dirs.
std::string leftovers() {
  return run_shell(
             "{ ls /run/netns 2>/dev/null; ls /sys/class/net; pgrep -a sax-linkdelay; ls -d /run/sax/sax-* "
             "2>/dev/null; } | grep -E '(^|/| )sax-[0-9]' || true")
      .out;
}

// Why the netns tests cannot run here ("" when they can).
std::string not_permitted() {
  if (::geteuid() != 0) return "not root";
  const std::string probe = "saxprobe" + std::to_string(::getpid());
  Result r = run_shell("ip netns add " + probe + " && ip netns delete " + probe);
  return r.code == 0 ? "" : "network namespaces not permitted: " + r.err;
}

#define SKIP_UNLESS_PERMITTED()                              \
  do {                                                       \
    const std::string why = not_permitted();                 \
    if (!why.empty()) GTEST_SKIP() << why;                   \
    ASSERT_EQ(leftovers(), "") << "a testbed is already up"; \
  } while (0)

sax::Cluster load(const std::string& file) { return sax::read_cluster(sax::test::preset("clusters/" + file), file); }

}  // namespace

// The words after `key` in every command that has it.
std::vector<std::string> after(const std::vector<std::vector<std::string>>& cmds, const std::string& key) {
  std::vector<std::string> v;
  for (const auto& cmd : cmds)
    for (std::size_t i = 0; i + 1 < cmd.size(); ++i)
      if (cmd[i] == key) v.push_back(cmd[i + 1]);
  return v;
}

std::string words(const std::vector<std::string>& cmd) {
  std::string line;
  for (const auto& w : cmd) line += w + " ";
  return line;
}

TEST(NetnsPlan, EveryNameCarriesTheSlotPrefixAndTheBoundaryComesFromTheCluster) {
  const sax::Cluster c = load("local-2bld.json");
  const sax::launcher::NetnsConfig n = sax::launcher::netns_config(c, "gbe-5", "/x/sax-linkdelay", 3);
  ASSERT_EQ(n.slots_per_building, (std::vector<int>{2, 2}));
  EXPECT_EQ(n.devices(), 4);
  EXPECT_EQ(n.nodes(), 2);
  // gbe-5: 0.625 GB/s per device, 2 devices per building, oversubscription 1; the NIC is the
  // intra-building link's 1.25 GB/s.
  EXPECT_DOUBLE_EQ(n.boundary_gbps[0], 1.25);
  EXPECT_DOUBLE_EQ(n.device_gbps[0], 0.625);
  EXPECT_DOUBLE_EQ(n.nic_gbps[1], 1.25);
  EXPECT_DOUBLE_EQ(n.arrival(0, 1).latency_us, 1000);
  EXPECT_EQ(n.arrivals_into(1).size(), 1u);
  int tbf = 0, nfqueue = 0, netns = 0;
  const auto cmds = sax::launcher::netns_setup_commands(n);
  for (const auto& cmd : cmds) {
    const std::string line = words(cmd);
    // Whatever is named (a link, a namespace, a bridge) is the slot's.
    std::vector<std::string> named;
    for (std::size_t i = 0; i + 1 < cmd.size(); ++i) {
      const std::string& w = cmd[i];
      if (w == "dev" || w == "master" || w == "name" || w == "-n" || w == "-i") named.push_back(cmd[i + 1]);
      if (w == "netns") named.push_back(cmd[i + 1] == "add" || cmd[i + 1] == "exec" ? cmd[i + 2] : cmd[i + 1]);
      if (i == 1 && w == "link" && cmd[2] == "add") named.push_back(cmd[3]);
    }
    for (const std::string& name : named) {
      EXPECT_EQ(name.rfind("sax-3-", 0), 0u) << line;
      EXPECT_LE(name.size(), 15u) << "an interface name of at most IFNAMSIZ - 1: " << line;
    }
    if (line.find(" tbf ") != std::string::npos) ++tbf;
    if (line.find("NFQUEUE") != std::string::npos) ++nfqueue;
    if (line.rfind("ip netns add ", 0) == 0) ++netns;
  }
  EXPECT_EQ(netns, 6);    // two nodes, four devices
  EXPECT_EQ(tbf, 4);      // each device's NIC receiving (sending is an htb: two rates)
  EXPECT_EQ(nfqueue, 4);  // each device's arrivals from the other building
  // A NIC at the intra-building link's 1.25 GB/s of payload = 10 Gbit/s, plus framing (1514/1448).
  EXPECT_EQ(std::count(cmds.begin(), cmds.end(),
                       std::vector<std::string>{"tc", "qdisc", "add", "dev", "sax-3-hd0", "root", "tbf", "rate",
                                                "10455801105bit", "burst", "326744", "latency", "50ms"}),
            1);
  // What crosses comes from the other building's address block.
  const std::vector<std::string> from = after(cmds, "-s");
  EXPECT_EQ(std::count(from.begin(), from.end(), "10.231.3.4/31"), 2) << "bld-a's devices queue bld-b's block";
  EXPECT_EQ(std::count(from.begin(), from.end(), "10.231.3.2/31"), 2);
  EXPECT_EQ(sax::launcher::netns_hostfile(n), "sax-3-n0 slots=2\nsax-3-n1 slots=2\n");
  // Each device's helper paces at its rate, on the clocks every helper shares (each building's
  // uplink at 2 × 0.625), and delays by the link's latency.
  const std::string helper = words(sax::launcher::netns_helper_command(n, 2, "/run/sax/x"));
  EXPECT_EQ(helper.rfind("ip netns exec sax-3-d2 /x/sax-linkdelay --rate-gbps 0.625 --clocks /run/sax/x/clocks "
                         "--building 1 --block 2 --device-gbps 0.625,0.625 --uplink-gbps 1.25,1.25 --queue ",
                         0),
            0u)
      << helper;
  EXPECT_NE(helper.find(" --delay-us 1000 "), std::string::npos) << helper;
  EXPECT_EQ(sax::launcher::netns_clocks_bytes(n), 8u * (2 + 2) * 2);
  // The shared-boundary technology: 2 devices × 0.125 / 2; a device alone still gets 0.125.
  const sax::launcher::NetnsConfig shared = sax::launcher::netns_config(c, "gbe-1-shared", "", 0);
  EXPECT_DOUBLE_EQ(shared.boundary_gbps[1], 0.125);
  EXPECT_DOUBLE_EQ(shared.device_gbps[1], 0.125);
}

// Four buildings, one pair farther (building_links): each pair's latency is its own, a device
// delays what comes from each other building by that pair's latency, one queue per distinct
// arrival into it (bld-a and bld-d: 1 ms and 3 ms; bld-b and bld-c: 1 ms only), one helper each.
TEST(NetnsPlan, EachBuildingPairIsDelayedByItsOwnLink) {
  const sax::Cluster c = load("local-4bld.json");
  const sax::launcher::NetnsConfig n = sax::launcher::netns_config(c, "", "/x/sax-linkdelay", 5);
  ASSERT_EQ(n.slots_per_building, (std::vector<int>{4, 4, 4, 4}));
  EXPECT_EQ(n.nodes(), 8);
  EXPECT_DOUBLE_EQ(n.boundary_gbps[2], 4 * 0.03125);
  EXPECT_DOUBLE_EQ(n.arrival(3, 0).latency_us, 3000);
  EXPECT_DOUBLE_EQ(n.arrival(0, 3).latency_us, 3000);
  EXPECT_DOUBLE_EQ(n.arrival(1, 0).latency_us, 1000);
  EXPECT_DOUBLE_EQ(n.arrival(2, 2).latency_us, 0);
  EXPECT_EQ(n.arrivals_into(0).size(), 2u);
  EXPECT_EQ(n.arrivals_into(1).size(), 1u);
  EXPECT_EQ(n.arrivals_into(3).size(), 2u);
  // One rule per device and other building, into the queue of that pair's arrival.
  std::map<std::string, int> rules_per_queue;
  for (const std::string& q : after(sax::launcher::netns_setup_commands(n), "--queue-num")) ++rules_per_queue[q];
  int rules = 0;
  for (const auto& [q, k] : rules_per_queue) rules += k;
  EXPECT_EQ(rules, 16 * 3);                       // 16 devices × 3 other buildings
  EXPECT_EQ(rules_per_queue.size(), 8u * 2 + 8);  // bld-a, bld-d's devices: two queues; bld-b, bld-c's: one
  // Device 0 (bld-a): bld-d's block goes to its 3 ms queue, which its helper holds for 3 ms.
  const auto cmds = sax::launcher::netns_setup_commands(n);
  std::string queue_of_d;
  for (const auto& cmd : cmds) {
    const std::string line = words(cmd);
    if (line.find("exec sax-5-d0 iptables") != std::string::npos && line.find("-s 10.231.5.16/30") != std::string::npos)
      queue_of_d = after({cmd}, "--queue-num").at(0);
  }
  ASSERT_FALSE(queue_of_d.empty());
  const std::string helper = words(sax::launcher::netns_helper_command(n, 0, "/run/sax/x"));
  EXPECT_NE(helper.find("--queue " + queue_of_d + " --delay-us 3000"), std::string::npos) << helper;
  EXPECT_NE(words(sax::launcher::netns_helper_command(n, 8, "/run/sax/x")).find("--delay-us 1000"), std::string::npos);
}

// Loss and jitter are a link's, and reach the helpers of the buildings the link enters.
TEST(NetnsPlan, ALossyTechnologysLossAndJitterReachTheHelpers) {
  sax::test::TempDir t;
  nlohmann::json j = sax::test::preset("clusters/local-2bld.json");
  j["network_technologies"].push_back(
      {{"name", "lossy"},
       {"description", "1 Gbit/s, 1 ms, 0.1 % loss, 200 us jitter"},
       {"cross_building", {{"bandwidth_gbps", 0.125}, {"latency_us", 1000}, {"loss", 0.001}, {"jitter_us", 200}}}});
  const sax::Cluster c = sax::read_cluster(j, "lossy.json");
  const sax::launcher::NetnsConfig n = sax::launcher::netns_config(c, "lossy", "/x/sax-linkdelay", 1);
  const std::string helper = words(sax::launcher::netns_helper_command(n, 3, "/run/sax/x"));
  EXPECT_NE(helper.find("--delay-us 1000 --jitter-us 200 --loss 0.001"), std::string::npos) << helper;
  EXPECT_EQ(words(sax::launcher::netns_helper_command(sax::launcher::netns_config(c, "", "/x", 1), 3, "/run/sax/x"))
                .find("--loss"),
            std::string::npos);
  j["network_technologies"].back()["cross_building"]["loss"] = 0.5;
  try {
    sax::read_cluster(j, "lossy.json");
    ADD_FAILURE() << "a loss of 0.5 was taken";
  } catch (const sax::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("loss"), std::string::npos) << e.what();
  }
}

TEST(NetnsPlan, TheAgentEntersOnlyTheSlotsNamespaces) {
  TempDir t;
  const std::string agent = t.write_text("agent.sh", sax::launcher::netns_agent_script(2));
  Result r = run_shell("sh " + agent + " 'sax-2-n0;touch " + t.file("owned") + "' true");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("refusing host"), std::string::npos) << r.err;
  r = run_shell("sh " + agent + " sax-3-n0 true");
  EXPECT_EQ(r.code, 1);
  EXPECT_FALSE(std::filesystem::exists(t.file("owned")));
}

TEST(NetnsPlan, DryRunShowsTheTestbedAndTheCommands) {
  Result r = run_sax("launch --cluster " + cluster("local-2bld.json") +
                     " --emulate netns --dry-run -- bench coll --group cross_building --cluster x.json");
  if (r.code == 2) GTEST_SKIP() << r.err;  // not permitted here: said on one line, tested below
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("emulation netns"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ip netns add sax-"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sax-linkdelay --rate-gbps 0.125 --clocks /run/sax/sax-"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ip netns exec sax-"), std::string::npos) << "each rank enters its device's namespace";
  EXPECT_NE(r.out.find("--mca plm_rsh_agent /run/sax/sax-"), std::string::npos) << r.out;
  // Open MPI's session directory in the launch's own, so that two launches at once never race on one.
  EXPECT_NE(r.out.find("--mca orte_tmpdir_base /run/sax/sax-"), std::string::npos) << r.out;
  EXPECT_EQ(leftovers(), "");  // a dry run builds nothing
}

TEST(NetnsPlan, WithoutRootNetnsExitsTwoAndAutoFallsBackToNone) {
  if (run_shell("unshare -U true").code != 0) GTEST_SKIP() << "no user namespaces to drop root in";
  Result r = run_shell("unshare -U " + std::string(SAX_BINARY) + " launch --cluster " + cluster("local-2bld.json") +
                       " --emulate netns --dry-run -- bench coll");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--emulate netns: network namespaces and tc need root"), std::string::npos) << r.err;
  r = run_shell("unshare -U " + std::string(SAX_BINARY) + " launch --cluster " + cluster("local-2bld.json") +
                " --dry-run -- bench coll");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("# emulation: none: netns is not permitted here (network namespaces and tc need root)"),
            std::string::npos)
      << r.out;
}

namespace {
sax::launcher::LaunchOptions plan_options(const std::string& emulate) {
  sax::launcher::LaunchOptions o;
  o.emulate = emulate;
  o.sax_binary = "/x/sax";
  o.linkdelay = "/x/sax-linkdelay";
  o.command = {"bench", "coll"};
  o.host_cores = 2;
  return o;
}
}  // namespace

TEST(LaunchPlanSafety, ANewlineInANameStaysInsideThePlansComments) {
  // A name the spec reader would refuse, given to the planner directly: what the plan prints of
  // it is escaped, so only the last line (the command) is not a comment.
  sax::Cluster c = load("local-2bld.json");
  c.buildings[0].name = "bld\ntouch /tmp/sax-owned #";
  const std::string text = sax::launcher::plan_launch(c, "c.json", plan_options("none")).text();
  // Comments up to the command, which starts with its environment (a newline inside its quotes is sh's).
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line) && line.rfind("#", 0) == 0) {
  }
  EXPECT_EQ(line.rfind("SAX_EMULATION=none ", 0), 0u) << "a line outside the comments: " << line;
  EXPECT_NE(text.find("bld\\ntouch"), std::string::npos) << text;
}

TEST(LaunchPlanSafety, AHostCrowdedPastEightRanksPerCoreIsWarnedOf) {
  sax::Cluster c = load("local-2bld.json");  // 4 ranks on 2 cores: no warning
  EXPECT_EQ(sax::launcher::plan_launch(c, "c.json", plan_options("none")).host_warning, "");
  c.buildings[0].nodes = c.buildings[1].nodes = 16;  // 64 ranks: 32 per core
  const sax::launcher::LaunchPlan p = sax::launcher::plan_launch(c, "c.json", plan_options("none"));
  EXPECT_EQ(p.places.size(), 64u);
  EXPECT_NE(p.text(false).find("# warning: 64 ranks on this host's 2 cores (32 per core): a native step"),
            std::string::npos)
      << p.text(false);
}

TEST(LaunchPlanSafety, APlanBeyondTheHostIsRefusedBeforeAnythingIsMade) {
  sax::Cluster c = load("local-2bld.json");
  c.buildings[0].nodes = 500000;  // 10^6 ranks on a 2-core host
  try {
    sax::launcher::plan_launch(c, "big.json", plan_options("none"));
    ADD_FAILURE() << "planned 10^6 ranks on 2 cores";
  } catch (const sax::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("at most 32 ranks per core"), std::string::npos) << e.what();
  }
  // The testbed's own limits: buildings, addresses and what tc can shape.
  sax::launcher::NetnsConfig n = sax::launcher::netns_config(load("local-2bld.json"), "", "/x", 0);
  EXPECT_EQ(sax::launcher::netns_host_problem(n), "");
  n.boundary_gbps[1] = 2e5;
  EXPECT_NE(sax::launcher::netns_host_problem(n).find("beyond what tc shapes"), std::string::npos);
  n = sax::launcher::netns_config(load("local-2bld.json"), "", "/x", 0);
  n.slots_per_building.assign(1200, 1), n.boundary_gbps.assign(1200, 1);
  EXPECT_NE(sax::launcher::netns_host_problem(n).find("at most 32 buildings"), std::string::npos);
  // Every device and node an address: 30 buildings of 8 devices do not fit a /24.
  n = sax::launcher::netns_config(load("local-2bld.json"), "", "/x", 0);
  n.slots_per_building.assign(30, 8), n.boundary_gbps.assign(30, 1);
  n.device_gbps.assign(30, 1), n.nic_gbps.assign(30, 1);
  EXPECT_NE(sax::launcher::netns_host_problem(n).find("at most 253 devices and nodes"), std::string::npos);
}

TEST(LaunchPlanSafety, JobIdentifiersCannotBePredicted) {
  const std::int64_t a = sax::random_job_id(), b = sax::random_job_id();
  EXPECT_GT(a, 0);
  EXPECT_NE(a, b);
  EXPECT_NE(a, static_cast<std::int64_t>(::getpid()));
}

TEST(LaunchWatchMpi, AResultIsNotLabelledWithABoundaryWhoseProcessesEnded) {
  // What a rank does when the launcher or a delay helper is gone: no result names the emulation.
  TempDir t;
  Result r = run_shell("SAX_EMULATION=netns SAX_EMULATION_WATCH=" + std::to_string(::getpid()) + ",999999999 " +
                       std::string(SAX_BINARY) + " bench coll -b 8 -e 8 -n 1 -w 0 --json " + t.file("r.json"));
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("the emulated boundary no longer holds: process 999999999"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("r.json")));
}

// The label comes from the launcher, never from the environment alone: netns named with no watch,
// or with a watch whose first process is not a sax launcher outside the ranks' network namespace
// (this test; pid 1), labels nothing; the same watch with emulation none runs.
TEST(LaunchWatchMpi, TheEnvironmentAloneCannotClaimANetnsBoundary) {
  TempDir t;
  const std::string mpirun =
      " mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 2 -x SAX_EMULATION -x "
      "SAX_EMULATION_WATCH " +
      std::string(SAX_BINARY) + " bench coll -b 8 -e 8 -n 1 -w 0 --json " + t.file("r.json");
  Result r = run_shell("SAX_EMULATION=netns SAX_EMULATION_WATCH=" + mpirun);
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.err.find("SAX_EMULATION=netns without SAX_EMULATION_WATCH"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("r.json")));
  for (const std::string& watch : {std::to_string(::getpid()), std::string("1")}) {
    r = run_shell("SAX_EMULATION=netns SAX_EMULATION_WATCH=" + watch + mpirun);
    EXPECT_NE(r.code, 0) << watch;
    EXPECT_NE(r.err.find("is not a sax launcher outside this rank's network namespace"), std::string::npos)
        << watch << r.err;
    EXPECT_FALSE(std::filesystem::exists(t.file("r.json"))) << watch;
  }
  r = run_shell("SAX_EMULATION=none SAX_EMULATION_WATCH=" + std::to_string(::getpid()) + mpirun);
  EXPECT_EQ(r.code, 0) << r.err;
}

#ifdef SAX_HAVE_TESTBED_TESTS
TEST(NetnsLaunch, RanksRunInTheirBuildingsBehindAShapedBoundaryAndNothingIsLeft) {
  SKIP_UNLESS_PERMITTED();
  TempDir t;
  const std::string c = cluster("local-2bld.json");
  // 8 B across the boundary waits the 1 ms delay at least; 4 MiB cannot beat 1 Gbit/s. Inside a
  // building (shared memory) 4 MiB is far faster than the boundary.
  Result r =
      run_sax("launch --cluster " + c + " --emulate netns -- bench coll --cluster " + c +
              " --group cross_building --op send_recv -b 8 -e 4M -f 524288 -n 5 -w 1 --json " + t.file("x.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(leftovers(), "");
  const auto x = nlohmann::json::parse(sax::test::slurp(t.file("x.json")));
  EXPECT_EQ(x["env"]["emulation"], "netns");
  EXPECT_EQ(x["env"]["hosts"], 2) << "each building's namespace is a host of its own";
  ASSERT_EQ(x["results"].size(), 2u);
  EXPECT_GE(x["results"][0]["time_us"].get<double>(), 1000.0);
  EXPECT_LE(x["results"][1]["algbw_gbps"].get<double>(), 0.125 * 1.05);
  r = run_sax("launch --cluster " + c + " --emulate netns -- bench coll --cluster " + c +
              " --group intra_building --op send_recv -b 4M -e 4M -n 5 -w 1 --json " + t.file("i.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto i = nlohmann::json::parse(sax::test::slurp(t.file("i.json")));
  // Not shaped: its quickest exchange well past the boundary's rate (the quickest, as a busy host
  // only makes exchanges slower; one shaped at 0.125 GB/s is never quicker than 32 ms).
  const auto times = i["results"][0]["times_us"].get<std::vector<double>>();
  ASSERT_FALSE(times.empty());
  const double quickest_us = *std::min_element(times.begin(), times.end());
  EXPECT_GT((4 << 20) / (quickest_us * 1e3), 0.125 * 2) << "inside a building is not shaped";
  EXPECT_EQ(leftovers(), "");
}

TEST(NetnsLaunch, AFailingCommandLeavesNothing) {
  SKIP_UNLESS_PERMITTED();
  Result r = run_sax("launch --cluster " + cluster("local-2bld.json") + " --emulate netns -- bench coll --op nope");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("unknown operation 'nope'"), std::string::npos) << r.err;
  EXPECT_EQ(leftovers(), "");
}

// A pattern for the ranks' command lines (from their start: not mpirun's, which holds the same
// words, nor the shell's that searches for it). Only this file's long jobs (-n 100000 --timeout
// 60): other tests run sax and mpirun meanwhile.
std::string ranks() { return "^" + std::string(SAX_BINARY) + " bench coll .*-n 100000 --timeout 60"; }
std::string its_mpirun() { return "[m]pirun .*bench coll .*-n 100000 --timeout 60"; }

// Starts a long sweep through the launcher in the background, waits until every rank is
// measuring, runs `then` (shell, with $L the launcher's pid and $S its testbed's slot), and
// reports the launcher's exit code. With `json`, the sweep would write its result there.
Result long_launch_and(const std::string& then, const std::string& json = "") {
  TempDir t;
  const std::string sax = SAX_BINARY;
  return run_shell(
      "{ " + sax + " launch --cluster " + cluster("local-2bld.json") +
      " --emulate netns -- bench coll -b 64K -e 64K -n 100000 --timeout 60" + (json.empty() ? "" : " --json " + json) +
      " > " + t.file("out") +
      " 2>&1 & L=$!; "
      "for i in $(seq 300); do grep -q '^# sax bench coll' " +
      t.file("out") + " && [ $(pgrep -fc '" + ranks() +
      "') -ge 4 ] && break; sleep 0.1; done; sleep 0.5; S=$(sed -n 's/^# testbed sax-\\([0-9]\\)-.*/\\1/p' " +
      t.file("out") + "); " + then + "; wait $L; echo rc=$?; cat " + t.file("out") + " >&2; }");
}

// Waits up to 30 s until no rank of the long sweep runs; says whether they ended.
std::string until_ranks_end() {
  return "for i in $(seq 300); do pgrep -f '" + ranks() + "' >/dev/null || break; sleep 0.1; done; pgrep -f '" +
         ranks() + "' >/dev/null && echo ranks=running || echo ranks=ended";
}

TEST(NetnsLaunch, AKilledRankLeavesNothing) {
  SKIP_UNLESS_PERMITTED();
  Result r = long_launch_and("kill -9 $(pgrep -nf '" + ranks() + "')");
  EXPECT_EQ(r.out.find("rc=0"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.out.find("rc="), std::string::npos) << r.out << r.err;
  EXPECT_EQ(leftovers(), "");
}

TEST(NetnsLaunch, CtrlCLeavesNothing) {
  SKIP_UNLESS_PERMITTED();
  Result r = long_launch_and("kill -INT $L");
  EXPECT_EQ(r.out.find("rc=0"), std::string::npos) << r.out << r.err;
  EXPECT_EQ(leftovers(), "");
  EXPECT_EQ(run_shell("pgrep -fc '" + ranks() + "'").out, "0\n") << "ranks left running";
}

TEST(NetnsLaunch, AKilledLaunchersLeftoversAreClearedAndNothingElse) {
  SKIP_UNLESS_PERMITTED();
  const std::string c = cluster("local-2bld.json");
  Result dry = run_sax("launch --cluster " + c + " --emulate netns --dry-run -- bench coll");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dry.out, m, std::regex("# testbed (sax-[0-9]-)")));
  const std::string prefix = m[1];
  // What a launcher killed with SIGKILL would leave: a link and a namespace of its slot. A link
  // that is not the slot's stays.
  ASSERT_EQ(run_shell("ip link add " + prefix + "h9 type bridge && ip netns add " + prefix +
                      "b9 && ip link add saxkeep9 type bridge")
                .code,
            0);
  Result r = run_sax("launch --cluster " + c + " --emulate netns -- bench coll -b 1K -e 1K -n 2 -w 0");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(leftovers(), "");
  EXPECT_EQ(run_shell("ip link delete saxkeep9").code, 0) << "a link without the prefix was removed";
}

TEST(NetnsLaunch, TwoTestbedsAtOnceAreIsolated) {
  SKIP_UNLESS_PERMITTED();
  TempDir t;
  const std::string launch = std::string(SAX_BINARY) + " launch --cluster " + cluster("local-2bld.json") +
                             " --emulate netns -- bench coll -b 1K -e 1K -n 20 -w 1";
  Result r = run_shell("{ " + launch + " > " + t.file("a") + " 2>&1 & A=$!; " + launch + " > " + t.file("b") +
                       " 2>&1; echo b=$?; wait $A; echo a=$?; }");
  EXPECT_NE(r.out.find("b=0"), std::string::npos) << r.out << sax::test::slurp(t.file("b"));
  EXPECT_NE(r.out.find("a=0"), std::string::npos) << r.out << sax::test::slurp(t.file("a"));
  std::smatch ma, mb;
  const std::string a = sax::test::slurp(t.file("a")), b = sax::test::slurp(t.file("b"));
  ASSERT_TRUE(std::regex_search(a, ma, std::regex("# testbed (sax-[0-9]-)")));
  ASSERT_TRUE(std::regex_search(b, mb, std::regex("# testbed (sax-[0-9]-)")));
  EXPECT_NE(ma[1], mb[1]) << "two testbeds on one slot";
  EXPECT_EQ(leftovers(), "");
}

TEST(NetnsLaunch, AKilledDelayHelperStopsTheJobAndNoResultClaimsTheEmulation) {
  SKIP_UNLESS_PERMITTED();
  TempDir t;
  const std::string c = cluster("local-2bld.json");
  Result r = run_shell("{ " + std::string(SAX_BINARY) + " launch --cluster " + c +
                       " --emulate netns -- bench coll -b 8 -e 8 -n 100000 --timeout 60 --json " + t.file("r.json") +
                       " > " + t.file("out") + " 2>&1 & L=$!; for i in $(seq 300); do [ $(pgrep -fc '" + ranks() +
                       "') -ge 4 ] && break; sleep 0.1; done; sleep 0.5; pkill -9 -x sax-linkdelay; wait $L; "
                       "echo rc=$?; cat " +
                       t.file("out") + " >&2; }");
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("the link helper of sax-"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("r.json"))) << "a result claims a boundary that did not hold";
  EXPECT_EQ(run_shell("pgrep -fc '" + ranks() + "'").out, "0\n") << "ranks left running";
  EXPECT_EQ(leftovers(), "");
}

// SIGKILL of the launcher: mpirun gets its parent-death signal, but the ranks must not wait for
// it. Here mpirun is stopped first, so that only the ranks' own watch on the launcher can end
// them: they end within seconds, and the sweep writes no result.
TEST(NetnsLaunch, AKilledLauncherTakesItsJobWithIt) {
  SKIP_UNLESS_PERMITTED();
  TempDir t;
  Result r = long_launch_and("M=$(pgrep -f '" + its_mpirun() + "'); kill -STOP $M; kill -9 $L; " + until_ranks_end() +
                                 "; kill -9 $M; kill -CONT $M",
                             t.file("r.json"));
  EXPECT_NE(r.out.find("ranks=ended"), std::string::npos) << "ranks outlived their launcher\n" << r.out << r.err;
  EXPECT_NE(r.out.find("rc=137"), std::string::npos) << r.out << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("r.json"))) << "a result claims a boundary its launcher stopped holding";
  EXPECT_EQ(run_shell("for i in $(seq 100); do pgrep -f '" + its_mpirun() + "' || break; sleep 0.1; done").out, "")
      << "mpirun outlived its launcher";
  std::smatch m;  // what SIGKILL left on the launch's own slot
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("# testbed sax-([0-9])-"))) << r.err;
  sax::launcher::NetnsTestbed::teardown(std::stoi(m[1]));
  EXPECT_EQ(leftovers(), "");
}

// The rules that hand each arrival to its delay helper, flushed mid-run (they bypass a missing
// queue, so packets would then cross undelayed): the launcher sees it at once, stops the job, and
// no result is written.
TEST(NetnsLaunch, FlushedDelayRulesStopTheJobAndNoResultClaimsTheEmulation) {
  SKIP_UNLESS_PERMITTED();
  TempDir t;
  Result r = long_launch_and("ip netns exec sax-$S-d0 iptables -t mangle -F", t.file("r.json"));
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("changed: a packet-filter rule was deleted"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("r.json"))) << "a result claims a boundary whose rules were flushed";
  EXPECT_EQ(run_shell("pgrep -fc '" + ranks() + "'").out, "0\n") << "ranks left running";
  EXPECT_EQ(leftovers(), "");
}

// A qdisc replaced on a host-side link of the testbed changes its rate: the same.
TEST(NetnsLaunch, AChangedQdiscStopsTheJob) {
  SKIP_UNLESS_PERMITTED();
  TempDir t;
  Result r = long_launch_and("tc qdisc del dev sax-$S-hd0 root", t.file("r.json"));
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find("changed: a qdisc was deleted"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("r.json")));
  EXPECT_EQ(leftovers(), "");
}

// A stopped delay helper holds its queue's packets for ever: the launcher stops the job at once
// (not the sweep's own timeout, long after), and nothing is written.
TEST(NetnsLaunch, AStoppedDelayHelperStopsTheJob) {
  SKIP_UNLESS_PERMITTED();
  TempDir t;
  Result r = long_launch_and("kill -STOP $(pgrep -nf 'sax-linkdelay.*/run/sax/sax-'$S'-')", t.file("r.json"));
  EXPECT_NE(r.out.find("rc=1"), std::string::npos) << r.out << r.err;
  EXPECT_NE(r.err.find(") is stopped: the boundary no longer holds"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("r.json")));
  EXPECT_EQ(run_shell("pgrep -fc '" + ranks() + "'").out, "0\n") << "ranks left running";
  EXPECT_EQ(leftovers(), "");
}

// A calibration whose launcher is killed outright (mpirun stopped, as above): its ranks end on
// their own, no point is appended once they have, every point kept names the boundary and the
// launch it was measured behind, and the sweep resumes only behind that boundary: under a plain
// mpirun it is refused (the file kept), launched again it measures the rest.
TEST(NetnsLaunch, AKilledLaunchersCalibrationKeepsOnlyShapedPointsAndResumesOnlyBehindItsBoundary) {
  SKIP_UNLESS_PERMITTED();
  TempDir t;
  const std::string sax = SAX_BINARY, c = cluster("local-2bld.json"), out = t.file("k.json"),
                    points = out + ".points.jsonl";
  const std::string sweep = " calibrate --cluster " + c + " -b 4K -e 256K -f 4 -n 3 -w 1 --ops all_reduce --out " + out;
  const std::string its_ranks = "^" + sax + " calibrate .*" + out;
  Result r =
      run_shell("{ " + sax + " launch --cluster " + c + " --emulate netns --" + sweep + " > " + t.file("log") +
                " 2>&1 & L=$!; for i in $(seq 600); do [ $(cat " + points +
                " 2>/dev/null | wc -l) -ge 3 ] && break; sleep 0.05; done; M=$(pgrep -f '^mpirun .*" + out +
                "'); kill -STOP $M; kill -9 $L; for i in $(seq 300); do pgrep -f '" + its_ranks +
                "' >/dev/null || break; sleep 0.1; done; pgrep -f '" + its_ranks +
                "' >/dev/null && echo ranks=running || echo ranks=ended; wc -l < " + points + "; sleep 1; wc -l < " +
                points + "; kill -9 $M; kill -CONT $M; wait $L; cat " + t.file("log") + " >&2; }");
  EXPECT_NE(r.out.find("ranks=ended"), std::string::npos) << "ranks outlived their launcher\n" << r.out << r.err;
  std::istringstream counts(r.out.substr(r.out.find('\n') + 1));
  int at_end = 0, later = 0;
  counts >> at_end >> later;
  EXPECT_EQ(at_end, later) << "points appended after the job ended\n" << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("# testbed sax-([0-9])-"))) << r.err;
  sax::launcher::NetnsTestbed::teardown(std::stoi(m[1]));
  // What was kept: the header's boundary, and on every point the boundary and the one launch.
  auto kept = [&](std::set<std::string>* launches) {
    std::istringstream in(sax::test::slurp(points));
    std::string line;
    int n = 0;
    for (bool header = true; std::getline(in, line); header = false) {
      const nlohmann::json j = nlohmann::json::parse(line);
      EXPECT_EQ(j.value("emulation", ""), "netns") << line;
      if (!header) launches->insert(j.value("launch", "")), ++n;
    }
    return n;
  };
  std::set<std::string> first;
  const int measured = kept(&first);
  ASSERT_GE(measured, 2);
  EXPECT_EQ(first.size(), 1u);
  const std::string before = sax::test::slurp(points);
  r = run_shell("mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np 4 " + sax + sweep);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("holds points measured behind the boundary \"netns\"; this sweep runs behind \"none\""),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(sax::test::slurp(points) == before) << "a refused resume changed the points";
  r = run_shell(sax + " launch --cluster " + c + " --emulate netns --" + sweep);
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("(" + std::to_string(measured) + " measured before"), std::string::npos) << r.err;
  std::set<std::string> both;
  EXPECT_GT(kept(&both), measured);
  EXPECT_EQ(both.size(), 2u) << "the resumed points name their own launch";
  EXPECT_TRUE(std::filesystem::exists(out));
  EXPECT_EQ(leftovers(), "");
}

// What launches killed outright left is removed by `launch --cleanup`: a slot no launch holds
// (its namespace, its link), this user's pacing segments no process holds; a segment a process
// holds stays.
TEST(NetnsLaunch, CleanupRemovesWhatDeadLaunchesLeftAndNothingHeld) {
  SKIP_UNLESS_PERMITTED();
  const std::string uid = std::to_string(::geteuid());
  const std::string dead = "/dev/shm/sax-cleanup-test-dead-" + uid, held = "/dev/shm/sax-cleanup-test-held-" + uid;
  ASSERT_EQ(run_shell("ip netns add sax-7-b9 && ip link add sax-7-h9 type bridge && touch " + dead + " " + held +
                      " && { flock -s " + held + " sleep 30 & echo $! > " + held + ".pid; }; sleep 0.3")
                .code,
            0);
  Result r = run_sax("launch --cleanup");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("slot 7 (sax-7-*): 1 namespaces, 1 links"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# removed " + dead), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(held)) << "a segment a process holds was removed";
  run_shell("kill $(cat " + held + ".pid); rm -f " + held + " " + held + ".pid");
  EXPECT_EQ(leftovers(), "");
}

// An unprivileged user (uid 65534) who plants, as fast as it can, what the launcher once used in
// shared directories: a launch directory of every slot with its own agent.sh (run as root, it would
// create `owned`), a link from each to a root-only directory, and the slot lock files, held.
TEST(NetnsSafety, AnUnprivilegedUserRacingTheLaunchGetsNoCodeRunAndLosesNoFile) {
  SKIP_UNLESS_PERMITTED();
  if (run_shell("setpriv --reuid=65534 --regid=65534 --clear-groups true").code != 0) GTEST_SKIP() << "no setpriv";
  TempDir t;
  ASSERT_EQ(run_shell("chmod 0777 " + t.file("") + " && mkdir -m 0700 " + t.file("rootonly")).code, 0);
  // $1: the directory of the marker files (writable by the user), $2: a root-only directory.
  const std::string script = t.write_text("attack.sh", R"(
for s in 0 1 2 3 4 5 6 7; do (flock -n /run/lock/sax-netns-$s.lock sleep 30 &) 2>/dev/null; done
while [ ! -e "$1/stop" ]; do
  for s in 0 1 2 3 4 5 6 7; do
    d=/tmp/sax-$s-launch
    mkdir -p $d 2>/dev/null
    printf '#!/bin/sh\ntouch %s/owned\n' "$1" > $d/.a && chmod 755 $d/.a && mv -f $d/.a $d/agent.sh
    ln -sfn "$2" /tmp/sax-$s-launch-link 2>/dev/null
  done
done
)");
  const std::string attack = "setpriv --reuid=65534 --regid=65534 --clear-groups sh " + script + " " + t.file("") +
                             " " + t.file("rootonly") + " ";
  Result r = run_shell("{ " + attack + "& A=$!; sleep 0.3; TMPDIR='" + t.file("with space") + "' " +
                       std::string(SAX_BINARY) + " launch --cluster " + cluster("local-2bld.json") +
                       " --emulate netns -- bench coll -b 1K -e 1K -n 2 -w 0; echo rc=$?; touch " + t.file("stop") +
                       "; wait $A; }");
  EXPECT_NE(r.out.find("rc=0"), std::string::npos) << r.out << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("owned"))) << "root ran the user's agent";
  EXPECT_TRUE(std::filesystem::is_empty(t.file("rootonly"))) << "root wrote through the user's link";
  EXPECT_TRUE(std::filesystem::exists("/tmp/sax-0-launch/agent.sh")) << "the user's file was removed";
  run_shell("pkill -u 65534 -f 'sleep 30'; rm -rf /tmp/sax-[0-7]-launch /tmp/sax-[0-7]-launch-link");
  EXPECT_EQ(leftovers(), "");
}

TEST(NetnsSafety, AStateBaseOthersCanWriteIsRefused) {
  SKIP_UNLESS_PERMITTED();
  ASSERT_EQ(run_shell("mkdir -p -m 0700 /run/sax && chmod 0777 /run/sax").code, 0);
  Result r = run_sax("launch --cluster " + cluster("local-2bld.json") + " --emulate netns -- bench coll -n 1");
  run_shell("chmod 0700 /run/sax");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("/run/sax: expected a directory only uid 0 can use (mode 0700)"), std::string::npos) << r.err;
  EXPECT_EQ(leftovers(), "");
}
#endif
