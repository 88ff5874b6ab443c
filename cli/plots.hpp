// The seam to scripts/plots.py: figures are drawn by matplotlib in Python, which the
// `sax` program starts as a child process and waits for. Plots are an extra beside results that
// are already written, so a machine without Python or matplotlib skips them with one line rather
// than failing the command.
#pragma once

#include <string>
#include <vector>

namespace sax::cli {

// Runs `python3 <plots.py> args...` (no shell) and waits for it. The interpreter is
// /usr/bin/python3 (where Debian's python3-matplotlib is importable), else python3 from PATH;
// the script is $SAX_PLOTS_SCRIPT when set, else the source tree's scripts/plots.py.
// Returns true when the script drew its figures; false, after one line "plots: skipped (why)" on
// stderr, when there is no Python, no script or no matplotlib (the script's exit code 3).
// Throws RunError (exit 1) when the script fails otherwise (its own line on stderr says why).
bool run_plot_script(const std::vector<std::string>& args);

}  // namespace sax::cli
