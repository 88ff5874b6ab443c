// The environment is a contract across process boundaries (`sax launch` → its ranks → the NCCL net
// plugin), so each variable is declared here once, as NCCL_PARAM declares NCCL's: its name, what it
// holds and how its value is read. Writers and readers name the declaration, never the string.
// Values are read strictly: one that is not what the variable takes is a UsageError naming it
// ("garbage is an error, not 0"), so a mistyped setting is seen, not ignored.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>

#include "spec/bounds.hpp"

namespace sax {

// How a variable's value is read; unset and empty are the same: the variable's `unset`.
enum class EnvRule {
  text,      // taken as it is
  flag,      // "1" turns it on; anything else leaves it off
  integer,   // an integer in [min, max]
  number,    // a finite number in [min, max]
  quantity,  // a figure as a spec file's field takes it: spec/bounds' row, its max lowered to `max`
};

struct EnvVar {
  const char* name;
  const char* holds;  // what it holds, who sets it and who reads it
  EnvRule rule = EnvRule::text;
  double min = std::numeric_limits<double>::lowest(), max = std::numeric_limits<double>::max();
  Quantity quantity = Quantity::bandwidth;  // EnvRule::quantity's row
  bool zero_is_none = false;                // EnvRule::quantity: 0 is accepted too, meaning "none"
  double unset = 0;                         // a number's value when unset
  const char* unset_text = "";              // text's value when unset
};

// --- `sax launch` → its ranks
inline constexpr EnvVar kEnvEmulation{.name = "SAX_EMULATION",
                                      .holds =
                                          "how the building boundary is emulated (none, netns, software, plugin); "
                                          "the launcher sets it, a rank labels its results with it",
                                      .rule = EnvRule::text,
                                      .unset_text = "none"};
inline constexpr EnvVar kEnvTechnology{.name = "SAX_TECHNOLOGY",
                                       .holds =
                                           "the network technology the boundary emulates (--technology); unset: the "
                                           "cluster's own cross-building link"};
inline constexpr EnvVar kEnvEmulationWatch{
    .name = "SAX_EMULATION_WATCH",
    .holds =
        "comma-separated process ids an emulated boundary needs alive (the launcher, its delay helpers under "
        "netns): a rank labels a result with the emulation only while every one runs (harness/job.hpp)"};

// --- `sax launch --emulate plugin` → the NCCL net plugin (collectives/net_plugin). Without
// SAX_NET_BUILDING there is no boundary; with it the link's latency and bandwidth are required.
inline constexpr EnvVar kEnvNetBuilding{.name = "SAX_NET_BUILDING",
                                        .holds =
                                            "this rank's building index (set per rank by the rank wrapper); unset: "
                                            "no boundary, every message passes straight through",
                                        .rule = EnvRule::integer,
                                        .min = 0,
                                        .max = 509 /* LinkPacer::kMaxBuildings - 1 */};
inline constexpr EnvVar kEnvNetLatencyUs{
    .name = "SAX_NET_LATENCY_US",
    .holds = "the cross-building link's one-way latency in us (spec/cluster.hpp Link)",
    .rule = EnvRule::quantity,
    .quantity = Quantity::latency};
inline constexpr EnvVar kEnvNetBandwidthGbps{
    .name = "SAX_NET_BANDWIDTH_GBPS",
    .holds = "the cross-building link's bandwidth per device and direction in GB/s (10^9 bytes/s)",
    .rule = EnvRule::quantity,
    .quantity = Quantity::bandwidth};
inline constexpr EnvVar kEnvNetOversubscription{
    .name = "SAX_NET_OVERSUBSCRIPTION",
    .holds = "the link's oversubscription: the building's egress carries devices x bandwidth / it",
    .rule = EnvRule::quantity,
    .quantity = Quantity::oversubscription,
    .unset = 1};
inline constexpr EnvVar kEnvNetDevicesInBuilding{.name = "SAX_NET_DEVICES_IN_BUILDING",
                                                 .holds =
                                                     "the devices (ranks) of this building sharing its egress (set per "
                                                     "rank); an int in the plugin",
                                                 .rule = EnvRule::quantity,
                                                 .max = std::numeric_limits<int>::max(),
                                                 .quantity = Quantity::world_size,
                                                 .unset = 1};
inline constexpr EnvVar kEnvNetNicGbps{.name = "SAX_NET_NIC_GBPS",
                                       .holds =
                                           "a device's NIC in GB/s, which also bounds it (the cluster's intra_building "
                                           "link); 0: none",
                                       .rule = EnvRule::quantity,
                                       .quantity = Quantity::bandwidth,
                                       .zero_is_none = true};
inline constexpr EnvVar kEnvNetKey{.name = "SAX_NET_KEY",
                                   .holds =
                                       "the pacing key: names the pacing state the processes of a host share "
                                       "(LinkPacer's shared-memory segment), one per job (cluster, technology, job)",
                                   .rule = EnvRule::text,
                                   .unset_text = "nccl-net"};
inline constexpr EnvVar kEnvNetInner{
    .name = "SAX_NET_INNER",
    .holds =
        "another NCCL net plugin under the boundary instead of the socket transport (an "
        "IB one): its path, or a name as NCCL_NET_PLUGIN takes it; the user's choice, "
        "never set by the launcher, passed on to the ranks"};
inline constexpr EnvVar kEnvNcclSocketIfname{
    .name = "NCCL_SOCKET_IFNAME",
    .holds =
        "NCCL's own: the interfaces its socket transport, and the plugin's, may "
        "listen on (the launcher sets it under netns); unset: the first "
        "non-loopback interface that is up"};

// --- the testbed's own switches
inline constexpr EnvVar kEnvLinkdelayStats{
    .name = "SAX_LINKDELAY_STATS",
    .holds = "1: each netns delay helper says at the end how late it let packets go",
    .rule = EnvRule::flag};
inline constexpr EnvVar kEnvPlotsScript{.name = "SAX_PLOTS_SCRIPT",
                                        .holds = "the plots script `--plots` runs instead of scripts/plots.py (tests)"};

// --- fault injection, for the tests of fail-together and `sax regress`: a rank of -1 is none
inline constexpr double kMaxInjectedRank = 1 << 30;
inline constexpr EnvVar kEnvTestHangRank{.name = "SAX_TEST_HANG_RANK",
                                         .holds = "the rank that hangs before its first measurement",
                                         .rule = EnvRule::integer,
                                         .min = -1,
                                         .max = kMaxInjectedRank};
inline constexpr EnvVar kEnvTestExitRank{.name = "SAX_TEST_EXIT_RANK",
                                         .holds = "the rank that exits before its first measurement",
                                         .rule = EnvRule::integer,
                                         .min = -1,
                                         .max = kMaxInjectedRank};
inline constexpr EnvVar kEnvTestCorruptRank{.name = "SAX_TEST_CORRUPT_RANK",
                                            .holds = "the rank whose checked results are corrupted",
                                            .rule = EnvRule::integer,
                                            .min = -1,
                                            .max = kMaxInjectedRank};
inline constexpr EnvVar kEnvBenchInjectSlowdown{
    .name = "SAX_BENCH_INJECT_SLOWDOWN",
    .holds = "the fraction each slowed iteration of bench coll is stretched by",
    .rule = EnvRule::number,
    .min = 0,
    .max = 100};
inline constexpr EnvVar kEnvBenchInjectBlock{
    .name = "SAX_BENCH_INJECT_BLOCK",
    .holds = "slow every other block of this many iterations; 0: every iteration",
    .rule = EnvRule::integer,
    .min = 0,
    .max = 1 << 20};

// Every declaration above, for the tests that hold them to the rules (names unique, bounds valid).
std::span<const EnvVar* const> env_table();

// The readers, one per rule; nullopt (or `unset`, `unset_text`) when the variable is unset or
// empty. Each checks that it reads the variable by its own rule.
std::string env_text(const EnvVar& v);
bool env_flag(const EnvVar& v);
std::optional<std::int64_t> env_integer(const EnvVar& v);
std::optional<double> env_number(const EnvVar& v);
std::optional<double> env_quantity(const EnvVar& v);

// The strict readers underneath, for a variable not declared here (a test's own).
std::optional<std::int64_t> env_integer(const char* name, std::int64_t min, std::int64_t max);
std::optional<double> env_number(const char* name, double min, double max);

// The values of SAX_EMULATION (`sax launch --emulate`).
enum class Emulation { none, netns, software, plugin };
const char* to_string(Emulation e);

// Software emulation takes the link it emulates from the cluster file, so a command under it must
// name one: the launcher checks the command before it starts the ranks, a rank its arguments.
// Throws UsageError when `emulation` is software and there is no cluster; `cluster_file` (empty
// where unknown) is named in the message.
void check_cluster_for(Emulation emulation, bool has_cluster, const std::string& cluster_file);

}  // namespace sax
