// `sax calibrate --runs RUNS` and `sax calibrate --trace T ... --cluster C`: fits from what was
// measured elsewhere (calibration/runs_fit.hpp, calibration/trace_fit.hpp), with no mpirun and no
// testbed, so that a planning build (a laptop without MPI) has them too; the sweep's calibrate
// (calibrate.cpp) takes the same two options through the same functions.
#include <iostream>
#include <memory>

#include "calibration/runs_fit.hpp"
#include "calibration/trace_fit.hpp"
#include "cli/commands.hpp"
#include "cli/json_out.hpp"
#include "spec/error.hpp"

namespace sax::cli {

void add_offline_fit_options(CLI::App* cmd, OfflineFitArgs& a) {
  cmd->add_option("--trace", a.traces,
                  "Fit the cluster's GPU compute from PyTorch profiler (Kineto) traces instead (repeatable; .json or "
                  ".json.gz; with --cluster, the cluster they ran on), no mpirun");
  cmd->add_option("--runs", a.runs,
                  "Fit the compute of each GPU generation from measured runs instead (a runs file: cluster, model, "
                  "layout and step time or TFLOP/s each; configs/published_runs.json's shape), no mpirun");
}

bool run_offline_fit(const OfflineFitArgs& a, const std::string& cluster, const std::string& out, bool sweep_options) {
  auto write = [](const std::string& file, const json& value) { write_json_file(file, value); };
  if (!a.traces.empty()) {
    if (!a.runs.empty() || sweep_options)
      throw UsageError(
          "calibrate --trace fits from the traces alone: it takes --cluster and --out, not --runs, --model or sweep "
          "options");
    if (!out.empty()) check_writable(out);  // before the fit, not after it
    calibration::calibrate_traces({a.traces, cluster, out}, write);
    return true;
  }
  if (!a.runs.empty()) {
    if (!cluster.empty() || sweep_options)
      throw UsageError(
          "calibrate --runs fits from the runs file alone: it takes --out, not --cluster, --model or sweep options");
    if (!out.empty()) check_writable(out);
    calibration::calibrate_runs({a.runs, out}, write);
    return true;
  }
  return false;
}

void add_calibrate_offline(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Fit the cost model's compute from measured runs (--runs) or profiler traces (--trace); the testbed's sweep "
      "needs MPI, which this sax was built without");
  auto a = std::make_shared<OfflineFitArgs>();
  auto cluster = std::make_shared<std::string>(), out = std::make_shared<std::string>();
  cmd->add_option("--cluster", *cluster, "With --trace: the cluster (its device) the traces ran on");
  cmd->add_option("-o,--out", *out, "The calibration file to write (atomically)");
  add_offline_fit_options(cmd, *a);
  cmd->callback([a, cluster, out] {
    if (!run_offline_fit(*a, *cluster, *out, false))
      throw UsageError(
          "calibrate: --runs or --trace (the sweep, fit and export need the testbed: this sax was built without MPI; "
          "install libopenmpi-dev and build again)");
  });
}

}  // namespace sax::cli
