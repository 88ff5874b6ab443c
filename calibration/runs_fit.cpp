#include "calibration/runs_fit.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>

#include "explorer/cost_model.hpp"
#include "explorer/explore.hpp"
#include "sax_version.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"
#include "spec/utc.hpp"

namespace sax::calibration {

namespace {

// A path in a runs file: from the file's directory or the nearest directory above it where it
// exists (a repository's runs name their files from its root), else as given (the working
// directory).
std::string resolve(const std::string& runs_file, const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::path(path).is_absolute()) return path;
  std::error_code ec;
  for (fs::path dir = fs::absolute(runs_file, ec).parent_path(); !ec && !dir.empty(); dir = dir.parent_path()) {
    if (fs::exists(dir / path, ec)) return (dir / path).string();
    if (dir == dir.root_path()) break;
  }
  return path;
}

// FLOPs per iteration as Narayanan et al. 2021 count them (arXiv 2104.04473, Eq. 3): model FLOPs
// plus the full recompute's second forward.
double narayanan_flops(const Model& m) {
  const double B = static_cast<double>(m.global_batch_size), s = static_cast<double>(m.seq_length),
               l = static_cast<double>(m.num_layers), h = static_cast<double>(m.hidden_size),
               V = static_cast<double>(m.vocab_size);
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

double measured_step(Fields p, const MeasuredRun& r) {
  const std::string metric =
      p.choice("metric", {"iteration_time_s", "tflops_per_gpu", "tokens_per_s", "tokens_per_s_per_gpu"});
  const double value = p.number("value");
  p.allow("what");
  const double gpus = static_cast<double>(r.cluster.world_size());
  double step = value;
  if (metric == "tflops_per_gpu") {
    const std::string counts = p.choice("counts", {"narayanan2021", "sax_model"});
    const double flops = counts == "narayanan2021" ? narayanan_flops(r.model) : r.model.training_flops_per_step();
    step = flops / (value * 1e12 * gpus);
  } else {
    p.choice("counts", {"step", "tokens"}, "step");
    if (metric == "tokens_per_s") step = static_cast<double>(r.model.tokens_per_step()) / value;
    if (metric == "tokens_per_s_per_gpu") step = static_cast<double>(r.model.tokens_per_step()) / (value * gpus);
  }
  p.finish();
  return step;
}

}  // namespace

std::vector<MeasuredRun> read_runs(const std::string& file) {
  const json doc = load_json_file(file);
  Fields f(doc, file, "");
  f.allow("comment");
  const json& runs = f.array("runs");
  f.finish();
  if (runs.empty()) throw InputError(file, "/runs", "at least one run");
  std::vector<MeasuredRun> out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    Fields r(runs[i], file, json_path("/runs", i));
    MeasuredRun m;
    m.name = r.name("name");
    if (!names.insert(m.name).second) r.fail("name", "a name no other run has, got \"" + m.name + "\" twice");
    m.source = r.string("source");
    const std::string cluster = resolve(file, r.string("cluster")), model = resolve(file, r.string("model")),
                      layout = resolve(file, r.string("layout"));
    for (const char* k : {"table_row", "source_layout", "cross_check", "comment"}) r.allow(k);
    m.cluster = load_cluster(cluster);
    m.model = load_model(model);
    m.layout = load_layout(layout);
    validate_layout(m.layout, m.model, m.cluster, layout);
    m.step_s = measured_step(Fields(r.object("published"), file, r.path_of("published")), m);
    r.finish();
    m.generation = gpu_kind(m.cluster.device.name).generation;
    out.push_back(std::move(m));
  }
  return out;
}

double predicted_step(const MeasuredRun& run, const DeviceCompute* device) {
  explorer::CostSource source;
  source.device = device;
  return explorer::forecast(run.cluster, run.model, run.layout, source, false)->predicted.step_time_s;
}

namespace {

// The coefficients as the fit moves them: log of each factor, the fixed cost in units of kCostUnit.
constexpr int kCoefficients = 4;
constexpr double kCostUnitUs = 100;
// Bounds: a factor from 0.3 to 1.5 of the datasheet's (outside it the datasheet is not the device
// described, or the runs count something else); a fixed cost per op up to 100 µs (tens of µs are
// what launch and framework costs per kernel come to).
const Eigen::Vector4d kLow(std::log(0.3), std::log(0.3), std::log(0.3), 0.0);
const Eigen::Vector4d kHigh(std::log(1.5), std::log(1.5), std::log(1.5), 1.0);
// The pull towards the datasheet, per coefficient, as a prior: each datasheet figure (a published
// kernel measurement) trusted within about 20 % (one σ in log; 20 µs for the fixed cost), a run's
// step time within about 5 % (what one source's runs at different scales scatter by: NVIDIA's
// Nemotron-4 340B from 128 to 2,048 H100s, 4.61 to 4.84 s). The weight is their ratio: what the
// runs determine moves freely, what they leave open (attention, where no run's attention is
// long) stays near the datasheet instead of wandering to a bound.
constexpr double kRunScatter = 0.05, kPriorSigma = 0.2;
constexpr double kPrior = kRunScatter / kPriorSigma;
constexpr double kHuber = 1.345;  // × the residuals' robust scale

DeviceCompute to_device(const Eigen::Vector4d& x) {
  DeviceCompute d;
  d.gemm_scale.value = std::exp(x[0]);
  d.attention_scale.value = std::exp(x[1]);
  d.memory_scale.value = std::exp(x[2]);
  d.op_overhead_us.value = x[3] * kCostUnitUs;
  return d;
}

struct Problem {
  std::vector<const MeasuredRun*> runs;
  Eigen::VectorXd weight;  // Huber's, per run

  Eigen::VectorXd residuals(const Eigen::Vector4d& x, bool weighted) const {
    const DeviceCompute d = to_device(x);
    const auto n = static_cast<Eigen::Index>(runs.size());
    Eigen::VectorXd r(n + kCoefficients);
    for (Eigen::Index i = 0; i < n; ++i) {
      const double e = std::log(predicted_step(*runs[static_cast<std::size_t>(i)], &d) / runs[i]->step_s);
      r[i] = weighted ? std::sqrt(weight[i]) * e : e;
    }
    r.tail(kCoefficients) = kPrior * x;
    return r;
  }
  Eigen::MatrixXd jacobian(const Eigen::Vector4d& x, const Eigen::VectorXd& r0) const {
    Eigen::MatrixXd j(r0.size(), kCoefficients);
    for (int c = 0; c < kCoefficients; ++c) {
      Eigen::Vector4d y = x;
      const double h = y[c] + 1e-3 <= kHigh[c] ? 1e-3 : -1e-3;  // inside the bounds
      y[c] += h;
      j.col(c) = (residuals(y, true) - r0) / h;
    }
    return j;
  }
};

// Levenberg-Marquardt within the bounds (each step clipped to them).
Eigen::Vector4d minimise(const Problem& p, Eigen::Vector4d x) {
  double mu = 1e-3;
  Eigen::VectorXd r = p.residuals(x, true);
  for (int it = 0; it < 40 && mu < 1e8; ++it) {
    const Eigen::MatrixXd j = p.jacobian(x, r);
    const Eigen::Matrix4d h = j.transpose() * j;
    const Eigen::Vector4d g = j.transpose() * r;
    Eigen::Matrix4d a = h;
    a.diagonal() += mu * (h.diagonal().array() + 1e-9).matrix();
    const Eigen::Vector4d y = (x - a.ldlt().solve(g)).cwiseMax(kLow).cwiseMin(kHigh);
    const Eigen::VectorXd ry = p.residuals(y, true);
    if (ry.squaredNorm() < r.squaredNorm()) {
      const bool done = (y - x).norm() < 1e-6;
      x = y, r = ry, mu /= 3;
      if (done) break;
    } else {
      mu *= 4;
    }
  }
  return x;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The robust fit: least squares, then Huber's weights from the residuals' scale, a few rounds.
DeviceCompute fit_device(const std::vector<const MeasuredRun*>& runs) {
  Problem p{runs, Eigen::VectorXd::Ones(static_cast<Eigen::Index>(runs.size()))};
  Eigen::Vector4d x = Eigen::Vector4d::Zero();
  for (int round = 0; round < 3; ++round) {
    x = minimise(p, x);
    const Eigen::VectorXd r = p.residuals(x, false).head(static_cast<Eigen::Index>(runs.size()));
    std::vector<double> abs(static_cast<std::size_t>(r.size()));
    for (Eigen::Index i = 0; i < r.size(); ++i) abs[static_cast<std::size_t>(i)] = std::abs(r[i]);
    const double scale = std::max(0.01, 1.4826 * median(abs));
    for (Eigen::Index i = 0; i < r.size(); ++i) p.weight[i] = std::min(1.0, kHuber * scale / std::max(abs[i], 1e-12));
  }
  // The 95 % intervals from the curvature at the optimum, the residuals' variance per degree of
  // freedom (the prior's rows keep the matrix invertible where the runs do not determine it).
  const Eigen::VectorXd r = p.residuals(x, true);
  const Eigen::MatrixXd j = p.jacobian(x, r);
  const double dof = std::max(1.0, static_cast<double>(runs.size()) - kCoefficients);
  const double s2 = r.head(static_cast<Eigen::Index>(runs.size())).squaredNorm() / dof;
  const Eigen::Matrix4d cov = s2 * (j.transpose() * j).inverse();
  DeviceCompute d = to_device(x);
  FittedCoefficient* out[kCoefficients] = {&d.gemm_scale, &d.attention_scale, &d.memory_scale, &d.op_overhead_us};
  for (int c = 0; c < kCoefficients; ++c) {
    const double half = 1.96 * std::sqrt(std::max(0.0, cov(c, c)));
    const double lo = std::max(kLow[c], x[c] - half), hi = std::min(kHigh[c], x[c] + half);
    out[c]->low = c < 3 ? std::exp(lo) : lo * kCostUnitUs;
    out[c]->high = c < 3 ? std::exp(hi) : hi * kCostUnitUs;
  }
  d.runs = static_cast<std::int64_t>(runs.size());
  std::set<std::string> sources;
  for (const MeasuredRun* run : runs) sources.insert(run->source);
  d.sources.assign(sources.begin(), sources.end());
  return d;
}

}  // namespace

ErrorSummary error_summary(const std::vector<double>& e) {
  ErrorSummary out;
  for (double v : e) out.mean += std::abs(v), out.max = std::max(out.max, std::abs(v)), out.signed_mean += v;
  const double n = static_cast<double>(std::max<std::size_t>(e.size(), 1));
  return {100 * out.mean / n, 100 * out.max, 100 * out.signed_mean / n};
}

void set_held_out(DeviceCompute& d, const std::vector<double>& held_out, const std::vector<double>& datasheet) {
  const ErrorSummary c = error_summary(held_out), ds = error_summary(datasheet);
  d.held_out = static_cast<std::int64_t>(held_out.size());
  d.cv_mean_pct = c.mean, d.cv_max_pct = c.max, d.cv_signed_pct = c.signed_mean;
  d.datasheet_mean_pct = ds.mean, d.datasheet_max_pct = ds.max, d.datasheet_signed_pct = ds.signed_mean;
}

RunsFit fit_runs(const std::vector<MeasuredRun>& runs, const std::function<void(const std::string&)>& progress) {
  RunsFit out;
  std::map<GpuGeneration, std::vector<const MeasuredRun*>> by_kind;
  for (const MeasuredRun& r : runs) {
    if (r.generation == GpuGeneration::unknown)
      out.skipped.push_back(r.name + ": its device \"" + r.cluster.device.name + "\" is of no known GPU generation");
    else if (r.cluster.paced())
      out.skipped.push_back(r.name + ": a paced device computes what its cluster declares");
    else
      by_kind[r.generation].push_back(&r);
  }
  for (const auto& [g, kind] : by_kind) {
    std::set<std::string> sources;
    for (const MeasuredRun* r : kind) sources.insert(r->source);
    if (progress)
      progress(std::string(to_string(g)) + ": " + std::to_string(kind.size()) + " runs from " +
               std::to_string(sources.size()) + " sources; the fit on all, then one without each source");
    DeviceCompute d = fit_device(kind);
    // Leave one source out: its runs predicted by the fit of the others' (none where it is the only one).
    std::vector<double> cv, datasheet;
    for (const std::string& s : sources) {
      std::vector<const MeasuredRun*> rest, held;
      for (const MeasuredRun* r : kind) (r->source == s ? held : rest).push_back(r);
      if (rest.empty()) continue;
      const DeviceCompute without = fit_device(rest);
      for (const MeasuredRun* r : held) {
        HeldOut h{r->name, r->source, r->step_s, predicted_step(*r, nullptr), predicted_step(*r, &without)};
        cv.push_back(h.calibrated_s / h.measured_s - 1), datasheet.push_back(h.datasheet_s / h.measured_s - 1);
        out.held_out[g].push_back(h);
      }
    }
    set_held_out(d, cv, datasheet);
    out.devices[g] = d;
  }
  return out;
}

namespace {

void print_fit(const RunsFit& fit) {
  for (const auto& [g, d] : fit.devices) {
    std::printf("\n%s: %lld runs, %zu sources\n", to_string(g), static_cast<long long>(d.runs), d.sources.size());
    auto row = [](const char* what, const FittedCoefficient& v, const char* unit) {
      std::printf("  %-34s %8.3f%s  (95 %%: %.3f to %.3f)\n", what, v.value, unit, v.low, v.high);
    };
    row("GEMM curve x", d.gemm_scale, "");
    row("attention curve x", d.attention_scale, "");
    row("HBM fraction x", d.memory_scale, "");
    row("fixed cost per op, added (us)", d.op_overhead_us, "");
    const auto it = fit.held_out.find(g);
    if (it == fit.held_out.end()) {
      std::printf("  no cross-validation: one source only (a fit's error on its own runs is no claim)\n");
      continue;
    }
    std::printf("  leave one source out (step time, predicted / measured - 1):\n");
    std::printf("  %-46s %4s  %-26s %-26s\n", "held-out source", "runs", "datasheet mean/max/signed",
                "calibrated mean/max/signed");
    std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> per;
    for (const HeldOut& h : it->second) {
      per[h.source].first.push_back(h.datasheet_s / h.measured_s - 1);
      per[h.source].second.push_back(h.calibrated_s / h.measured_s - 1);
    }
    for (const auto& [s, e] : per) {
      const ErrorSummary a = error_summary(e.first), b = error_summary(e.second);
      const std::string shown = s.size() > 46 ? "..." + s.substr(s.size() - 43) : s;
      std::printf("  %-46s %4zu  %5.1f / %5.1f / %+6.1f %%    %5.1f / %5.1f / %+6.1f %%\n", shown.c_str(),
                  e.first.size(), a.mean, a.max, a.signed_mean, b.mean, b.max, b.signed_mean);
    }
    std::printf("  %-46s %4zu  %5.1f / %5.1f / %+6.1f %%    %5.1f / %5.1f / %+6.1f %%\n", "all held out",
                it->second.size(), d.datasheet_mean_pct, d.datasheet_max_pct, d.datasheet_signed_pct, d.cv_mean_pct,
                d.cv_max_pct, d.cv_signed_pct);
  }
}

}  // namespace

std::string fmt_cv(GpuGeneration g, const DeviceCompute& d) {
  char line[200];
  std::snprintf(line, sizeof line, " %s %.1f/%.1f/%+.1f %% -> %.1f/%.1f/%+.1f %% (%lld runs);", to_string(g),
                d.datasheet_mean_pct, d.datasheet_max_pct, d.datasheet_signed_pct, d.cv_mean_pct, d.cv_max_pct,
                d.cv_signed_pct, static_cast<long long>(d.runs));
  return line;
}

void calibrate_runs(const RunsArgs& a, const std::function<void(const std::string&, const json&)>& write) {
  const std::vector<MeasuredRun> runs = read_runs(a.runs_file);
  std::printf(
      "# sax calibrate --runs %s: %zu runs; per GPU generation, factors on the datasheet's compute fitted "
      "to the measured step times (robust, bounded, weakly held to the datasheet)\n",
      a.runs_file.c_str(), runs.size());
  const RunsFit fit = fit_runs(runs, [](const std::string& line) {
    std::printf("# fitting %s\n", line.c_str());
    std::fflush(stdout);
  });
  for (const std::string& s : fit.skipped) std::printf("# left out: %s\n", s.c_str());
  if (fit.devices.empty()) throw InputError(a.runs_file, "/runs", "at least one run on a GPU of a known generation");
  print_fit(fit);
  if (a.out.empty()) return;
  Calibration cal;
  cal.provenance.cluster = a.runs_file;
  cal.provenance.tool = "sax calibrate --runs " + a.runs_file;
  cal.provenance.sax_version = kVersion;
  cal.provenance.date = utc_now();
  cal.devices = fit.devices;
  // The inputs: every run, as measured (a throughput turned into seconds per step), with the
  // datasheet's prediction and, held out, the fit's without its source.
  std::map<std::string, const HeldOut*> held;
  for (const auto& [g, list] : fit.held_out)
    for (const HeldOut& h : list) held[h.name] = &h;
  for (const MeasuredRun& r : runs) {
    json p = {{"kind", "run"},
              {"name", r.name},
              {"source", r.source},
              {"device", r.cluster.device.name},
              {"world_size", r.cluster.world_size()},
              {"step_s", r.step_s}};
    if (const auto it = held.find(r.name); it != held.end())
      p["datasheet_step_s"] = it->second->datasheet_s, p["held_out_step_s"] = it->second->calibrated_s;
    cal.points.push_back(p);
  }
  json j = to_json(cal);
  std::string cv;
  for (const auto& [g, d] : fit.devices) cv += fmt_cv(g, d);
  j["comment"] = "Made by `sax calibrate --runs " + a.runs_file +
                 "`. Step time held out by source (mean / max / signed " +
                 "mean |error|, datasheet -> calibrated):" + cv;
  write(a.out, j);
  std::printf("\n# wrote %s\n", a.out.c_str());
}

}  // namespace sax::calibration
