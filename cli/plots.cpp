#include "cli/plots.hpp"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "spec/env.hpp"
#include "spec/error.hpp"

extern char** environ;

namespace sax::cli {

namespace {

// Debian's python3-matplotlib is importable here; a python3 first on PATH (pyenv, a virtualenv)
// may lack it (TESTBED.md).
constexpr const char* kSystemPython = "/usr/bin/python3";
// plots.py's exit code for "matplotlib is not importable".
constexpr int kExitNoMatplotlib = 3;
// What a shell, and glibc's posix_spawnp before 2.24, report for a program that is not there.
constexpr int kExitNotFound = 127;

std::string plot_script() {
  if (std::string s = env_text(kEnvPlotsScript); !s.empty()) return s;
  return std::string(SAX_SOURCE_DIR) + "/scripts/plots.py";
}

bool skipped(const std::string& why) {
  std::fputs(("plots: skipped (" + why + ")\n").c_str(), stderr);
  return false;
}

}  // namespace

bool run_plot_script(const std::vector<std::string>& args) {
  const std::string script = plot_script();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(script, ec))
    return skipped("no plot script at " + script + "; SAX_PLOTS_SCRIPT names another");
  const bool system_python = ::access(kSystemPython, X_OK) == 0;
  const std::string python = system_python ? kSystemPython : "python3";
  std::vector<std::string> words = {python, script};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);

  // The child writes to the same stdout: what this program printed comes first.
  std::cout.flush();
  std::fflush(stdout);
  pid_t pid = 0;
  // posix_spawnp searches PATH as a shell would; no shell is involved, so no quoting to get wrong.
  const int rc = system_python ? ::posix_spawn(&pid, kSystemPython, nullptr, nullptr, argv.data(), environ)
                               : ::posix_spawnp(&pid, "python3", nullptr, nullptr, argv.data(), environ);
  if (rc == ENOENT || rc == EACCES)
    return skipped("no python3: neither " + std::string(kSystemPython) + " nor on PATH");
  if (rc != 0) throw RunError("plots: cannot start " + python + ": " + std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw RunError(std::string("plots: waiting for ") + python + ": " + std::strerror(errno));

  const std::string what = python + " " + script + (args.empty() ? "" : " " + args.front());
  if (WIFSIGNALED(status))
    throw RunError("plots: " + what + " was killed by signal " + std::to_string(WTERMSIG(status)));
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return true;
  if (code == kExitNoMatplotlib) return skipped("matplotlib is not importable by " + python);
  if (code == kExitNotFound) return skipped("no python3: neither " + std::string(kSystemPython) + " nor on PATH");
  throw RunError("plots: " + what + " exited with code " + std::to_string(code) + " (its line above says why)");
}

}  // namespace sax::cli
