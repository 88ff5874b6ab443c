#include "calibration/fit.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "harness/stats.hpp"
#include "spec/alpha_beta.hpp"
#include "spec/bounds.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"

namespace sax::calibration {

namespace {

constexpr double kHuberK = 1.345;  // 95 % efficiency under Gaussian noise
constexpr double kMadToSigma = 1.4826;
constexpr int kMaxIterations = 50;

struct Design {
  Eigen::MatrixXd a;  // columns: steps, bus bytes (each row divided by the measured time)
  Eigen::VectorXd b;  // ones: relative residual = (a·x − 1)
};

// Weighted least squares over the columns `use` (the others fixed at 0).
Eigen::Vector2d solve(const Design& d, const Eigen::VectorXd& w, bool use_alpha, bool use_beta) {
  Eigen::Vector2d x = Eigen::Vector2d::Zero();
  const Eigen::VectorXd sw = w.array().sqrt();
  if (use_alpha && use_beta) {
    const Eigen::MatrixXd a = sw.asDiagonal() * d.a;
    x = a.colPivHouseholderQr().solve(sw.asDiagonal() * d.b);
  } else {
    const int c = use_alpha ? 0 : 1;
    const Eigen::VectorXd a = sw.asDiagonal() * d.a.col(c);
    x[c] = a.colPivHouseholderQr().solve(sw.asDiagonal() * d.b)(0);
  }
  return x;
}

}  // namespace

double predict_us(const AlphaBeta& ab, const CollPoint& p) {
  const RingAlgorithm ring = ring_algorithm(p.op, static_cast<double>(p.ranks));
  return 1e6 * alpha_beta_s(ring, p.bytes, ab.alpha_us * 1e-6, ab.beta_ns_per_byte * 1e-9);
}

LinkFit fit_alpha_beta(const std::vector<CollPoint>& points, const std::string& what) {
  const auto n = static_cast<Eigen::Index>(points.size());
  Design d{Eigen::MatrixXd(n, 2), Eigen::VectorXd::Ones(n)};
  double min_bus = INFINITY, max_bus = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const CollPoint& p = points[static_cast<std::size_t>(i)];
    if (!(p.time_us > 0) || !std::isfinite(p.time_us) || !(p.bytes > 0) || !std::isfinite(p.bytes) || p.ranks < 2)
      throw InputError(what, "/results/" + std::to_string(i),
                       "a point with positive, finite time_us and bytes on 2 ranks or more");
    const RingAlgorithm ring = ring_algorithm(p.op, static_cast<double>(p.ranks));
    const double bus = ring.bus_factor * p.bytes * 1e-3;  // β is ns per byte: µs per 1000 bytes
    d.a(i, 0) = ring.steps / p.time_us;
    d.a(i, 1) = bus / p.time_us;
    min_bus = std::min(min_bus, bus), max_bus = std::max(max_bus, bus);
  }
  if (n < 2 || !(max_bus > min_bus))
    throw InputError(what, "/results", "points of at least two different sizes to fit latency and bandwidth");

  LinkFit fit;
  Eigen::VectorXd w = Eigen::VectorXd::Ones(n);
  bool use_alpha = true, use_beta = true;
  Eigen::Vector2d x = Eigen::Vector2d::Zero();
  for (fit.iterations = 1; fit.iterations <= kMaxIterations; ++fit.iterations) {
    x = solve(d, w, use_alpha, use_beta);
    // Physical coefficients: a negative term is dropped and the other refitted.
    if (use_alpha && use_beta && (x[0] < 0 || x[1] < 0)) {
      (x[0] < 0 ? use_alpha : use_beta) = false;
      x = solve(d, w, use_alpha, use_beta);
    }
    const Eigen::VectorXd r = d.a * x - d.b;  // relative residuals
    std::vector<double> abs_r(static_cast<std::size_t>(n));
    for (Eigen::Index i = 0; i < n; ++i) abs_r[static_cast<std::size_t>(i)] = std::abs(r[i]);
    const double scale = std::max(kMadToSigma * harness::median(abs_r), 1e-9);
    Eigen::VectorXd next(n);
    std::int64_t down = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      const double u = std::abs(r[i]) / scale;
      next[i] = u <= kHuberK ? 1.0 : kHuberK / u;
      down += u > kHuberK ? 1 : 0;
    }
    fit.downweighted = down;
    const bool settled = (next - w).cwiseAbs().maxCoeff() < 1e-6;
    w = next;
    if (settled) break;
  }
  fit.iterations = std::min(fit.iterations, kMaxIterations);

  AlphaBeta& ab = fit.coefficients;
  ab.alpha_us = std::max(0.0, x[0]);
  ab.beta_ns_per_byte = std::max(0.0, x[1]);
  // Quality over every point, outliers included: R² of the times, relative residuals.
  double mean = 0;
  for (const auto& p : points) mean += p.time_us / static_cast<double>(n);
  double ss_res = 0, ss_tot = 0;
  std::vector<double> rel;
  for (const auto& p : points) {
    const double pred = predict_us(ab, p);
    ss_res += (pred - p.time_us) * (pred - p.time_us);
    ss_tot += (p.time_us - mean) * (p.time_us - mean);
    rel.push_back(std::abs(pred - p.time_us) / p.time_us);
  }
  ab.fit.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1.0;
  ab.fit.max_rel_error = *std::max_element(rel.begin(), rel.end());
  ab.fit.samples = n;
  fit.rel_residual_p50 = harness::percentile(rel, 0.5);
  fit.rel_residual_p95 = harness::percentile(rel, 0.95);
  return fit;
}

std::string fit_links(const LinkPoints& points, const std::function<std::string(LinkClass, CollOp)>& what,
                      Calibration& cal) {
  char line[1024];  // a row holds two numbers of up to 309 digits (%f of a double near its max)
  std::snprintf(line, sizeof line, "#%-15s %-15s %10s %10s %8s %8s %8s %9s %7s %5s\n", "link class", "op", "alpha_us",
                "busbw_GBps", "r2", "p50_err", "p95_err", "max_err", "points", "outl");
  std::string t = line;
  for (const auto& [key, pts] : points) {
    const LinkFit fit = fit_alpha_beta(pts, what(key.first, key.second));
    const AlphaBeta& ab = fit.coefficients;
    std::snprintf(line, sizeof line, " %-15s %-15s %10.3f %10.4f %8.4f %7.1f%% %7.1f%% %8.1f%% %7lld %5lld\n",
                  link_class_name(key.first), to_string(key.second), ab.alpha_us,
                  ab.beta_ns_per_byte > 0 ? 1.0 / ab.beta_ns_per_byte : 0.0, ab.fit.r2, fit.rel_residual_p50 * 100,
                  fit.rel_residual_p95 * 100, ab.fit.max_rel_error * 100, static_cast<long long>(ab.fit.samples),
                  static_cast<long long>(fit.downweighted));
    t += line;
    // A fit outside what a calibration may hold (a busy host can measure a small sweep at 1 MB/s)
    // is said and left out, as one that resolves no bandwidth: the datasheet's stays.
    const Bound& latency = bound(Quantity::latency);
    const Bound& per_byte = bound(Quantity::inverse_bandwidth);
    if (!(ab.beta_ns_per_byte > 0))
      t += "#   (not written: no bandwidth resolved, the times do not grow with size; the datasheet's stays)\n";
    else if (!within(latency, ab.alpha_us) || !within(per_byte, ab.beta_ns_per_byte))
      t += "#   (not written: expected " + describe(within(latency, ab.alpha_us) ? per_byte : latency) +
           "; the datasheet's stays)\n";
    else
      cal.links[static_cast<int>(key.first)][static_cast<int>(key.second)] = ab;
  }
  return t;
}

std::vector<CollPoint> read_bench_coll_points(const json& doc, const std::string& file) {
  if (!doc.is_object() || doc.value("version", 0) != 2)
    throw InputError(file, "/version", "2 (a sax bench coll --json file)");
  if (!doc.contains("results") || !doc["results"].is_array())
    throw InputError(file, "/results", "an array of bench coll results");
  std::vector<CollPoint> points;
  for (std::size_t i = 0; i < doc["results"].size(); ++i) {
    const json& r = doc["results"][i];
    const std::string at = "/results/" + std::to_string(i);
    if (!r.is_object() || !r.contains("op") || !r["op"].is_string()) throw InputError(file, at + "/op", "an op name");
    const auto op = parse_coll_op(r["op"].get<std::string>());
    if (!op) throw InputError(file, at + "/op", "an op of sax bench coll, got '" + r["op"].get<std::string>() + "'");
    // Read at the width each is used at, and within range: a rank count that would narrow, or a
    // non-positive time, is refused rather than fitted.
    Fields f(r, file, at);
    const auto ranks = static_cast<int>(f.integer_in("ranks", 1, INT32_MAX));
    const double bytes = f.nonnegative("bytes");  // bench coll writes it as a number (1024.0)
    if (bytes > static_cast<double>(kMaxSize) || bytes != std::floor(bytes))
      f.fail("bytes", "a whole number of bytes up to 2^40, got " + json_type_name(r["bytes"]));
    points.push_back({*op, ranks, bytes, f.number("time_us", 0.0)});
  }
  return points;
}

}  // namespace sax::calibration
