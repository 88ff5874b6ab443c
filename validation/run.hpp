// The loop's second phase: each trial's layout run through the launcher (`sax run` on the
// cluster's ranks) for a number of rounds, its output kept out of validate's in a log, and its
// measured steps and parts added to the trial. Needs the testbed (MPI): built with it only.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "launcher/launch.hpp"
#include "spec/cluster.hpp"
#include "validation/trial.hpp"

namespace sax::validation {

// A folder one validate owns while it runs: an exclusive lock on DIR/.sax-validate.lock (flock,
// released however the process ends), or a UsageError naming the flag when another holds it.
class FolderLock {
 public:
  FolderLock(const std::filesystem::path& dir, const std::string& flag);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

// Where the runs go: --runs DIR kept (locked while validate runs, and cleared of an earlier
// validate's runs: a stale run.json beside a new run's failed log read as its result), else a
// temporary folder removed when this ends.
class RunsDir {
 public:
  explicit RunsDir(const std::string& keep);
  ~RunsDir();
  RunsDir(const RunsDir&) = delete;
  RunsDir& operator=(const RunsDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  bool temporary() const { return temporary_; }

 private:
  std::filesystem::path path_;
  bool temporary_ = false;
  std::unique_ptr<FolderLock> lock_;
};

struct RunInput {
  const Options& options;
  const Cluster& cluster;
  launcher::LaunchOptions launch;       // the boundary's (on the testbed, where one is built)
  std::function<std::string()> broken;  // run_plan's question: does the boundary still hold?
  std::filesystem::path runs;           // absolute
  // Writes each trial's layout.json: cli/ is the code that writes files.
  std::function<void(const std::string& file, const nlohmann::json& value)> write_json;
  std::ostream& out;  // a progress line per run, and a failed run's log tail
};

// Runs every trial, round after round; a trial that failed once is not run again. Throws RunError
// when interrupted.
void run_trials(const RunInput& in, std::vector<Trial>& trials);

}  // namespace sax::validation
