// From a cluster to processes: the plan `sax launch` runs — where each rank sits (building → node
// → device, spec/cluster.hpp's placement), the emulation of the building boundary, and the exact
// launcher command (mpirun, or srun inside a Slurm allocation) with the environment it needs —
// and running it, with the child's exit code passed through and Ctrl-C passed on.
//
// Emulation modes (docs/design.md "Building boundaries"): `netns` — kernel shaping on one host
// (launcher/netns.hpp), the default where permitted — starts each building's ranks inside its own
// network namespace behind a shaped, delayed link; `software` starts the ranks as they are and
// has the communicator factory wrap every communicator that crosses a building in the software
// link emulator (collectives/link_emulator.hpp), which imposes the cost model's own α-β; `none`
// runs the ranks as they are (the boundary is a placement and a link class, not a shaped link);
// `plugin` starts the ranks as they are and NCCL's net plugin (libnccl-net-sax.so) holds back
// what crosses a building by the link's α + bytes·β. In every mode NCCL is kept from going around
// the boundary (launcher/nccl_env.hpp): each rank learns its NCCL_HOSTID and its mode's NCCL
// settings from a small sh wrapper keyed on its rank. Every command started learns the mode from
// SAX_EMULATION (and the chosen technology from SAX_TECHNOLOGY), so that its results can say
// which emulation they came from.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/nccl_env.hpp"
#include "launcher/netns.hpp"
#include "spec/cluster.hpp"
#include "spec/number_text.hpp"  // num(), which netns.cpp and nccl_env.cpp write figures with

namespace sax::launcher {

struct LaunchPlan {
  Emulation emulation = Emulation::none;
  std::string emulation_note;  // how `auto` chose, printed with the plan
  std::string technology;      // "" = the cluster's cross-building link
  std::vector<RankPlace> places;
  std::vector<std::string> building_names;
  std::vector<std::pair<std::string, std::string>> env;  // set for the launcher and the ranks
  std::vector<std::string> argv;                         // the launcher command, word by word
  NetnsConfig netns;                                     // under netns: the testbed to build (slot as planned)
  NcclEnv nccl;                                          // NCCL's side of the boundary (common part in env)
  std::string nccl_net_plugin;                           // under plugin: the library NCCL loads
  std::string host_warning;                              // more ranks per core than kWarnRanksPerCore
  // The plan as `--dry-run` prints it: the placement, the testbed's set-up commands, then the
  // environment and command as one shell line (quoted where a word needs it). `commands` false:
  // the testbed in one line (what a real launch prints before it starts).
  std::string text(bool commands = true) const;
};

struct LaunchOptions {
  std::string emulate = "auto";  // auto: netns where permitted (the reason printed), else none
  std::string technology;
  std::string sax_binary;            // the sax the ranks run (this program)
  std::vector<std::string> command;  // the sax subcommand and its arguments
  bool slurm = false;                // inside a Slurm allocation: srun instead of mpirun
  bool root = false;                 // Open MPI refuses root unless told
  std::string linkdelay;             // the sax-linkdelay program (netns)
  int slot = 0;                      // the netns testbed's slot (NetnsTestbed picks it)
  std::string nccl_net_plugin;       // the NCCL net plugin (plugin); "" = its name, found by dlopen
  std::int64_t job = 0;              // names the job's pacing (SAX_NET_KEY): random per launch (random_job_id)
  std::string state_dir;             // netns: the launch's own directory ("" = as planned, not made yet)
  // netns: the processes the boundary needs (the launcher, its delay helpers); each rank is told
  // them, holds them from its start and ends the moment one ends (harness/boundary_guard.hpp).
  std::vector<int> watch;
  int host_cores = 0;  // this host's cores, for the plan's check (0: asked of the host)
};

// At most this many ranks per core of the one host a mpirun launch starts every rank on (netns, or
// no hostfile or batch node list in the environment): beyond
// it a rank's share of a core is too small for a step to mean anything (and a typo of 10^6 ranks
// must not start 10^6 processes).
inline constexpr int kMaxRanksPerCore = 32;
// Past this many ranks per core the plan warns (the largest built-in testbed, local-4bld, runs 16
// ranks on this project's 2-core hosts): each rank holds a core a small share of the time, so a
// native step measures the scheduler, and paced compute holds only while the host keeps up.
inline constexpr int kWarnRanksPerCore = 8;

// The netns testbed a cluster asks for: ranks per building, each building's boundary (devices ×
// per-device bandwidth / oversubscription of the cross-building link or the technology's), the
// link's one-way latency.
NetnsConfig netns_config(const Cluster& cluster, const std::string& technology, const std::string& linkdelay, int slot);

// While one lives, SIGINT and SIGTERM do not end the launcher: they are passed on to the command
// run_plan is running and remembered, so that a testbed being built stops and is torn down.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;
  static bool interrupted();
};

// Bad input (UsageError, exit 2): an unknown mode or technology, netns where it is not permitted
// (the reason said), no command, a command that is not a sax subcommand that runs under a
// launcher, software emulation of a command that names no cluster.
LaunchPlan plan_launch(const Cluster& cluster, const std::string& cluster_file, const LaunchOptions& options);

// Runs the plan's command and waits for it: its exit code (128 + signal when it was killed).
// SIGINT and SIGTERM received meanwhile are passed on to it (an InterruptGuard is held). mpirun
// gets SIGTERM as the launcher dies (its parent-death signal), but that alone does not end the
// ranks of a launcher killed outright: each rank's BoundaryGuard (harness/boundary_guard.hpp)
// watching this launcher does, before it writes anything. `broken`, when given, is asked every
// 100 ms whether the emulation still holds ("" while it does): when it says why not, the command
// is stopped (SIGTERM, then SIGKILL) and run_plan throws RunError with that reason. The job's
// pacing segments (SAX_NET_KEY's) are removed after it, however it ended. Under plugin, a plugin that is not built is a
// UsageError (--dry-run still shows the plan).
int run_plan(const LaunchPlan& plan, const std::function<std::string()>& broken = {});

// A word as a POSIX shell reads it back (single quotes where needed), and a command as one line of
// such words.
std::string shell_quote(const std::string& word);
std::string shell_line(const std::vector<std::string>& argv);
// argv as exec wants it: pointers into `argv`'s strings, null-terminated (valid while argv lives).
std::vector<char*> c_argv(const std::vector<std::string>& argv);

}  // namespace sax::launcher
