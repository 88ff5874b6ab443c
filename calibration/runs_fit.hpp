// `sax calibrate --runs RUNS.json --out K.json`: a device's compute learned from training runs
// somebody already measured (a layout and its step time, or its TFLOP/s with what they count),
// the way Calculon and Lumos learn theirs from measurements rather than datasheets.
//
// Per GPU generation (spec/cluster.hpp gpu_kind) the fit finds the factors on the datasheet's
// GEMM curve, attention curve and HBM fraction and the fixed cost per op that bring the cost
// model's step times (explorer forecast, closed forms, as `sax predict` gives them) nearest the
// measured ones: robust (Huber-weighted) least squares on log(predicted / measured), each
// coefficient held within its bounds and pulled weakly towards the datasheet (a direction the runs
// do not determine stays where the datasheet put it), its 95 % interval from the curvature. What
// the fit claims is its leave-one-source-out error: each source's runs predicted by a fit of the
// others' (runs of one source share their software and their way of counting).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"

namespace sax::calibration {

// One measured run, its inputs loaded.
struct MeasuredRun {
  std::string name, source;
  Cluster cluster;
  Model model;
  Layout layout;
  double step_s = 0;  // measured, in seconds per step (a throughput turned into it)
  GpuGeneration generation = GpuGeneration::unknown;
};

// Reads a runs file: {"runs": [{name, source, cluster, model, layout (paths, relative to the file's
// directory or the nearest one above it where they exist, else to the working directory),
// published: {metric, value, counts}}]}; `metric` is
// iteration_time_s (seconds per step), tflops_per_gpu (with `counts` narayanan2021: Narayanan et
// al. 2021 Eq. 3, recompute included; or sax_model: Model::training_flops_per_step) or
// tokens_per_s (the job's). Bad input: InputError naming the file and field.
std::vector<MeasuredRun> read_runs(const std::string& file);

// Relative errors (predicted / measured − 1) as a calibration states them, in %: the mean and the
// largest |error|, and the signed mean (negative: predicted too fast).
struct ErrorSummary {
  double mean = 0, max = 0, signed_mean = 0;
};
ErrorSummary error_summary(const std::vector<double>& errors);
// `d`'s held-out figures: its errors on what was held out and the datasheet's on the same.
void set_held_out(DeviceCompute& d, const std::vector<double>& held_out, const std::vector<double>& datasheet);

// The cost model's step time for a run with `device` applied (nullptr: the datasheet's).
double predicted_step(const MeasuredRun& run, const DeviceCompute* device);

struct HeldOut {
  std::string name, source;
  double measured_s = 0, datasheet_s = 0, calibrated_s = 0;  // calibrated: by a fit without its source
};

struct RunsFit {
  std::map<GpuGeneration, DeviceCompute> devices;
  std::map<GpuGeneration, std::vector<HeldOut>> held_out;
  std::vector<std::string> skipped;  // runs on devices of no known generation, and why
};

// Fits every generation the runs hold. `progress` (may be empty) hears a line per fit.
RunsFit fit_runs(const std::vector<MeasuredRun>& runs, const std::function<void(const std::string&)>& progress);

// `sax calibrate --runs FILE --out K`: fits, prints the coefficients and the cross-validation
// table, writes the calibration (atomically, through `write`).
struct RunsArgs {
  std::string runs_file, out;
};
void calibrate_runs(const RunsArgs& args, const std::function<void(const std::string&, const json&)>& write);

}  // namespace sax::calibration
