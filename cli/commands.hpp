// The `sax` subcommands. Each add_* registers one with CLI11 and its callback; the callback
// throws sax::InputError (exit 2) or sax::RunError (exit 1) and returns normally on success.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace sax::cli {

void add_check(CLI::App& app);
// `explore` (the search) and `predict` (one layout's step time with its breakdown).
void add_explore(CLI::App& app);
void add_predict(CLI::App& app);
void add_codesign(CLI::App& app);
// `bench coll` (collective sweeps under mpirun) and `regress` (the busbw regression gate).
void add_bench(CLI::App& app);
void add_regress(CLI::App& app);
// `run` (one layout's training step on the testbed, timed); needs the layer ops (OpenBLAS).
void add_run(CLI::App& app);
// `launch` (place ranks into buildings and start a testbed command on them).
void add_launch(CLI::App& app);
void add_trace(CLI::App& app);
// The per-rank Chrome traces of `dir` (every *.json but `skip`), sorted, as `sax trace merge`
// reads them; `cmd` names the command in errors (UsageError: no such directory, no trace).
std::vector<std::string> trace_files(const std::string& cmd, const std::string& dir, const std::string& skip);
// `validate` (the explorer's ranking run on the testbed, predicted against measured).
void add_validate(CLI::App& app);
// `calibrate fit` (α-β per link class and op from bench coll results); needs Eigen.
void add_calibrate(CLI::App& app);
// calibrate --runs and --trace (cli/calibrate_offline.cpp): with the testbed, options of the
// sweep's calibrate; without it, a calibrate of their own.
struct OfflineFitArgs {
  std::string runs;
  std::vector<std::string> traces;
};
void add_offline_fit_options(CLI::App* cmd, OfflineFitArgs& a);
// Runs the fit one of them asks for (true), or nothing (false); `sweep_options`: the sweep's were
// given too (refused beside them).
bool run_offline_fit(const OfflineFitArgs& a, const std::string& cluster, const std::string& out, bool sweep_options);
void add_calibrate_offline(CLI::App& app);
// Subcommands this sax cannot run — named by the design but not built yet, or needing what this
// build was configured without: they say why and exit 2.
void add_not_built(CLI::App& app, const char* name, const char* what, const char* why);
// For a command that allows extras (its library refuses them on every rank): the first unknown
// option, with the closest real one ("did you mean"), or the first stray word, as a UsageError.
void refuse_extras(const CLI::App& cmd);
inline constexpr const char* kLaterIssue = "it is not built yet (a later issue)";
inline constexpr const char* kWithoutTestbed =
    "this sax was built without MPI, which the testbed needs (planning only: check, explore, predict); install "
    "Open MPI (scripts/install-deps.sh: libopenmpi-dev) and configure and build again";

}  // namespace sax::cli
