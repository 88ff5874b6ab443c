// From a cluster to processes: the plan `sax launch` runs — where each rank sits (building → node
// → device, spec/cluster.hpp's placement), the emulation of the building boundary, and the exact
// launcher command (mpirun, or srun inside a Slurm allocation) with the environment it needs —
// and running it, with the child's exit code passed through and Ctrl-C passed on.
//
// Emulation modes (DESIGN.md "Building boundaries"): `none` runs the ranks as they are (the
// boundary is a placement and a link class, not a shaped link); `netns` (kernel shaping) and
// `software` (the communicator decorator) are named and refused until they are built. Every
// command started learns the mode from SAX_EMULATION (and the chosen technology from
// SAX_TECHNOLOGY), so that its results can say which emulation they came from.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "spec/cluster.hpp"

namespace sax::launcher {

enum class Emulation { none, netns, software };
const char* to_string(Emulation e);

struct LaunchPlan {
  Emulation emulation = Emulation::none;
  std::string technology;  // "" = the cluster's cross-building link
  std::vector<RankPlace> places;
  std::vector<std::string> building_names;
  std::vector<std::pair<std::string, std::string>> env;  // set for the launcher and the ranks
  std::vector<std::string> argv;                         // the launcher command, word by word
  // The plan as `--dry-run` prints it: the placement, then the environment and command as one
  // shell line (quoted where a word needs it).
  std::string text() const;
};

struct LaunchOptions {
  std::string emulate = "none";
  std::string technology;
  std::string sax_binary;            // the sax the ranks run (this program)
  std::vector<std::string> command;  // the sax subcommand and its arguments
  bool slurm = false;                // inside a Slurm allocation: srun instead of mpirun
  bool root = false;                 // Open MPI refuses root unless told
};

// Bad input (UsageError, exit 2): an unknown mode or technology, a mode not built yet, no command,
// a command that is not a sax subcommand that runs under a launcher.
LaunchPlan plan_launch(const Cluster& cluster, const std::string& cluster_file, const LaunchOptions& options);

// Runs the plan's command and waits for it: its exit code (128 + signal when it was killed).
// SIGINT and SIGTERM received meanwhile are passed on to it.
int run_plan(const LaunchPlan& plan);

// A word as a POSIX shell reads it back (single quotes where needed).
std::string shell_quote(const std::string& word);

}  // namespace sax::launcher
