// What `sax launch` and `sax validate` share to start a command on the testbed's ranks.
#pragma once

#include <string>

#include "launcher/launch.hpp"

namespace sax::cli {

// The options `sax launch` starts a command with: this program for the ranks, its sax-linkdelay
// beside it, srun inside a Slurm allocation, root allowed when root, a free netns slot.
launcher::LaunchOptions launch_options(const std::string& emulate, const std::string& technology);

}  // namespace sax::cli
