// What `sax launch` and `sax validate` share to start a command on the testbed's ranks.
#pragma once

#include <functional>
#include <string>

#include "launcher/launch.hpp"
#include "launcher/netns.hpp"

namespace sax::cli {

// The options `sax launch` starts a command with: this program for the ranks, its sax-linkdelay
// beside it, srun inside a Slurm allocation, root allowed when root, a free netns slot.
launcher::LaunchOptions launch_options(const std::string& emulate, const std::string& technology);

// The options of a launch on a built testbed: its slot and directory, and the processes its
// boundary needs (this launcher, the delay helpers) for the ranks to watch.
void use_testbed(launcher::LaunchOptions& options, const launcher::NetnsTestbed& testbed);
// What run_plan asks while the job runs: whether the testbed still holds (none without one).
std::function<std::string()> boundary_watch(launcher::NetnsTestbed* testbed);

// What `launch --help` and `validate --help` say about a launcher killed outright.
inline constexpr const char* kKilledLauncherLeftovers =
    "A launcher killed outright (SIGKILL) cannot tear its testbed down: its namespaces, links, qdiscs, "
    "packet-filter rules and launch folder (/run/sax/sax-<slot>-*) stay until the next launch on that slot, and "
    "its job's pacing state (/dev/shm/sax-*) stays. Its job ends with it (each rank watches the launcher), and "
    "nothing it measured is written. `sax launch --cleanup` removes what no live launch holds.";

}  // namespace sax::cli
