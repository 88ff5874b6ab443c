#include "calibration/fit.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

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

// One range's robust line: its coefficients, and per point its relative residual and Huber's
// weight under the last round's scale.
struct Line {
  double alpha_us = 0, beta_ns_per_byte = 0;
  std::vector<double> rel;  // (predicted − measured) / measured
  double scale = 0;
  int iterations = 0;
  std::int64_t downweighted = 0;
};

double robust_scale(const std::vector<double>& rel) {
  std::vector<double> abs_r(rel.size());
  std::transform(rel.begin(), rel.end(), abs_r.begin(), [](double r) { return std::abs(r); });
  return std::max(kMadToSigma * harness::median(abs_r), 1e-9);
}

// The robust fit of `pts` (checked already); nothing where they hold fewer than two bus sizes.
std::optional<Line> robust_line(const std::vector<const CollPoint*>& pts) {
  const auto n = static_cast<Eigen::Index>(pts.size());
  Design d{Eigen::MatrixXd(n, 2), Eigen::VectorXd::Ones(n)};
  double min_bus = INFINITY, max_bus = 0;
  for (Eigen::Index i = 0; i < n; ++i) {
    const CollPoint& p = *pts[static_cast<std::size_t>(i)];
    const RingAlgorithm ring = ring_algorithm(p.op, static_cast<double>(p.ranks));
    const double bus = ring.bus_factor * p.bytes * 1e-3;  // β is ns per byte: µs per 1000 bytes
    d.a(i, 0) = ring.steps / p.time_us;
    d.a(i, 1) = bus / p.time_us;
    min_bus = std::min(min_bus, bus), max_bus = std::max(max_bus, bus);
  }
  if (n < 2 || !(max_bus > min_bus)) return std::nullopt;

  Line line;
  Eigen::VectorXd w = Eigen::VectorXd::Ones(n);
  bool use_alpha = true, use_beta = true;
  Eigen::Vector2d x = Eigen::Vector2d::Zero();
  for (line.iterations = 1; line.iterations <= kMaxIterations; ++line.iterations) {
    x = solve(d, w, use_alpha, use_beta);
    // Physical coefficients: a negative term is dropped and the other refitted.
    if (use_alpha && use_beta && (x[0] < 0 || x[1] < 0)) {
      (x[0] < 0 ? use_alpha : use_beta) = false;
      x = solve(d, w, use_alpha, use_beta);
    }
    const Eigen::VectorXd r = d.a * x - d.b;  // relative residuals
    const double scale = robust_scale(std::vector<double>(r.data(), r.data() + n));
    Eigen::VectorXd next(n);
    std::int64_t down = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      const double u = std::abs(r[i]) / scale;
      next[i] = u <= kHuberK ? 1.0 : kHuberK / u;
      down += u > kHuberK ? 1 : 0;
    }
    line.downweighted = down;
    const bool settled = (next - w).cwiseAbs().maxCoeff() < 1e-6;
    w = next;
    if (settled) break;
  }
  line.iterations = std::min(line.iterations, kMaxIterations);
  line.alpha_us = std::max(0.0, x[0]);
  line.beta_ns_per_byte = std::max(0.0, x[1]);
  const Eigen::VectorXd r = d.a * Eigen::Vector2d(line.alpha_us, line.beta_ns_per_byte) - d.b;
  line.rel.assign(r.data(), r.data() + n);
  line.scale = robust_scale(line.rel);
  return line;
}

double huber_rho(double u) {
  const double a = std::abs(u);
  return a <= kHuberK ? 0.5 * a * a : kHuberK * a - 0.5 * kHuberK * kHuberK;
}

// A split of the sorted distinct sizes into regimes: the index of each regime's first size.
struct Split {
  std::vector<std::size_t> starts;
  std::vector<const Line*> lines;  // per regime
  std::vector<double> rel;         // per point, in its regime
};

// R² of measured against predicted times, 1 where the times do not vary.
double r_squared(const std::vector<double>& measured, const std::vector<double>& predicted) {
  double mean = 0;
  for (double t : measured) mean += t / static_cast<double>(measured.size());
  double ss_res = 0, ss_tot = 0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    ss_res += (predicted[i] - measured[i]) * (predicted[i] - measured[i]);
    ss_tot += (measured[i] - mean) * (measured[i] - mean);
  }
  return ss_tot > 0 ? 1 - ss_res / ss_tot : 1.0;
}

// The quality of the points `idx` under `ab`, each in its regime: R², worst relative error, count.
FitQuality quality(const AlphaBeta& ab, const std::vector<CollPoint>& points, const std::vector<std::size_t>& idx,
                   std::vector<double>* rel = nullptr) {
  std::vector<double> measured, predicted;
  FitQuality q;
  for (std::size_t i : idx) {
    const double pred = predict_us(ab, points[i]);
    measured.push_back(points[i].time_us), predicted.push_back(pred);
    const double e = std::abs(pred - points[i].time_us) / points[i].time_us;
    q.max_rel_error = std::max(q.max_rel_error, e);
    if (rel) rel->push_back(e);
  }
  q.r2 = r_squared(measured, predicted);
  q.samples = static_cast<std::int64_t>(idx.size());
  return q;
}

std::string percent(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f%%", x * 100);
  return b;
}

}  // namespace

double predict_us(const AlphaBeta& ab, const CollPoint& p) {
  const RingAlgorithm ring = ring_algorithm(p.op, static_cast<double>(p.ranks));
  if (ab.regimes.empty()) return 1e6 * alpha_beta_s(ring, p.bytes, ab.alpha_us * 1e-6, ab.beta_ns_per_byte * 1e-9);
  return 1e6 * alpha_beta_s(ab.regimes_s(), ring, p.bytes);
}

namespace {

// The points' sizes in order, and each point's index among them (the points checked first).
struct SizeIndex {
  std::vector<double> sizes;
  std::vector<std::size_t> size_of;  // per point
  std::size_t regime_of(const std::vector<std::size_t>& starts, std::size_t point) const {
    return static_cast<std::size_t>(std::upper_bound(starts.begin(), starts.end(), size_of[point]) - starts.begin() -
                                    1);
  }
};

SizeIndex index_sizes(const std::vector<CollPoint>& points, const std::string& what) {
  SizeIndex x;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const CollPoint& p = points[i];
    if (!(p.time_us > 0) || !std::isfinite(p.time_us) || !(p.bytes > 0) || !std::isfinite(p.bytes) || p.ranks < 2)
      throw InputError(what, "/results/" + std::to_string(i),
                       "a point with positive, finite time_us and bytes on 2 ranks or more");
    x.sizes.push_back(p.bytes);
  }
  std::sort(x.sizes.begin(), x.sizes.end());
  x.sizes.erase(std::unique(x.sizes.begin(), x.sizes.end()), x.sizes.end());
  for (const CollPoint& p : points)
    x.size_of.push_back(
        static_cast<std::size_t>(std::lower_bound(x.sizes.begin(), x.sizes.end(), p.bytes) - x.sizes.begin()));
  return x;
}

// Each range of sizes [first, end) fitted once, its points in their order in `points`; the
// splits point into it (a map's nodes stay where they are).
using RangeFits = std::map<std::pair<std::size_t, std::size_t>, std::optional<Line>>;

const Line* range_fit(RangeFits& fits, const std::vector<CollPoint>& points, const SizeIndex& x, std::size_t first,
                      std::size_t end) {
  auto [it, fresh] = fits.try_emplace({first, end});
  if (fresh) {
    std::vector<const CollPoint*> pts;
    for (std::size_t i = 0; i < points.size(); ++i)
      if (x.size_of[i] >= first && x.size_of[i] < end) pts.push_back(&points[i]);
    it->second = robust_line(pts);
  }
  return it->second ? &*it->second : nullptr;
}

// Every split into 1 to max_regimes regimes of kMinRegimeSizes sizes or more, fewest regimes first.
std::vector<Split> candidate_splits(RangeFits& fits, const std::vector<CollPoint>& points, const SizeIndex& x,
                                    std::size_t max_regimes) {
  const std::size_t n = points.size(), m = x.sizes.size();
  std::vector<Split> splits;
  auto add = [&](std::vector<std::size_t> starts) {
    Split s{std::move(starts), {}, std::vector<double>(n)};
    std::vector<std::size_t> at(s.starts.size(), 0);  // each regime's next residual
    for (std::size_t r = 0; r < s.starts.size(); ++r) {
      const Line* l = range_fit(fits, points, x, s.starts[r], r + 1 < s.starts.size() ? s.starts[r + 1] : m);
      if (!l) return;
      s.lines.push_back(l);
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t r = x.regime_of(s.starts, i);
      s.rel[i] = s.lines[r]->rel[at[r]++];
    }
    splits.push_back(std::move(s));
  };
  add({0});
  const std::size_t k = kMinRegimeSizes;
  if (max_regimes >= 2)
    for (std::size_t a = k; a + k <= m; ++a) add({0, a});
  if (max_regimes >= 3)
    for (std::size_t a = k; a + 2 * k <= m; ++a)
      for (std::size_t b = a + k; b + k <= m; ++b) add({0, a, b});
  return splits;
}

// The split of the least criterion under one scale σ for all. σ: the residuals' root mean
// square winsorized at 2.5 robust scales (as efficient as the RMS under Gaussian noise, bounded
// against outliers), over the split's degrees of freedom; first the least of every split's (a
// broken line's one-regime residuals hold its misfit and would hide the break), then the chosen
// split's, until the choice stands. The penalty is twice Schwarz's: a break searched for over
// every size costs more than the one parameter it adds.
std::size_t choose_split(std::span<const Split> splits, std::size_t n) {
  auto parameters = [](const Split& s) { return static_cast<double>(3 * s.starts.size() - 1); };
  auto criterion = [&](const Split& s, double sigma) {
    double loss = 0;
    for (double r : s.rel) loss += huber_rho(r / sigma);
    return 2 * loss + 2 * parameters(s) * std::log(static_cast<double>(n));
  };
  auto scale_of = [&](const Split& s) {
    const double cap = 2.5 * robust_scale(s.rel);
    double sum = 0;
    for (double r : s.rel) sum += std::min(r * r, cap * cap);
    return std::max(std::sqrt(sum / std::max(1.0, static_cast<double>(n) - parameters(s))), 1e-9);
  };
  double sigma = INFINITY;
  for (const Split& s : splits) sigma = std::min(sigma, scale_of(s));
  std::size_t chosen = 0;
  for (int pass = 0; pass < 5; ++pass) {
    std::size_t best = 0;
    double least = INFINITY;
    for (std::size_t i = 0; i < splits.size(); ++i)
      if (const double c = criterion(splits[i], sigma); c < least) least = c, best = i;
    const bool settled = pass > 0 && best == chosen;
    chosen = best;
    sigma = scale_of(splits[chosen]);
    if (settled) break;
  }
  return chosen;
}

// The chosen split as a fit: its regimes' coefficients, the quality over every point (outliers
// included) and per regime over its own, and the points Huber's weights all but set aside.
LinkFit fit_of_split(const Split& s, const std::vector<CollPoint>& points, const SizeIndex& x) {
  const std::size_t n = points.size(), regimes = s.starts.size();
  LinkFit fit;
  AlphaBeta& ab = fit.coefficients;
  for (std::size_t r = 0; r < regimes; ++r) {
    const Line& l = *s.lines[r];
    ab.regimes.push_back({std::llround(x.sizes[s.starts[r]]), l.alpha_us, l.beta_ns_per_byte, {}});
    fit.downweighted += l.downweighted;
    fit.iterations = std::max(fit.iterations, l.iterations);
  }
  ab.alpha_us = ab.regimes.back().alpha_us;
  ab.beta_ns_per_byte = ab.regimes.back().beta_ns_per_byte;
  std::vector<std::size_t> all(n);
  std::vector<std::vector<std::size_t>> in_regime(regimes);
  for (std::size_t i = 0; i < n; ++i) all[i] = i, in_regime[x.regime_of(s.starts, i)].push_back(i);
  std::vector<double> rel;
  ab.fit = quality(ab, points, all, &rel);
  ab.rel_residual_p50 = harness::percentile(rel, 0.5);
  ab.rel_residual_p90 = harness::percentile(rel, 0.9);
  for (std::size_t r = 0; r < regimes; ++r) {
    ab.regimes[r].fit = quality(ab, points, in_regime[r]);
    // Far off its regime's line, in that regime's scale.
    const Line& l = *s.lines[r];
    for (std::size_t j = 0; j < in_regime[r].size(); ++j) {
      const double u = std::abs(l.rel[j]) / l.scale;
      if (u <= kOutlierScales) continue;
      const CollPoint& p = points[in_regime[r][j]];
      char why[160];
      std::snprintf(why, sizeof why, "residual %s is %.1f x regime %zu's robust scale %.2f%% (> %.0f): weight %.2f",
                    percent(l.rel[j]).c_str(), u, r + 1, l.scale * 100, kOutlierScales, kHuberK / u);
      ab.outliers.push_back({std::llround(p.bytes), p.ranks, p.time_us, l.rel[j], why});
    }
  }
  return fit;
}

}  // namespace

LinkFit fit_alpha_beta(const std::vector<CollPoint>& points, const std::string& what, std::size_t max_regimes) {
  const SizeIndex x = index_sizes(points, what);
  RangeFits fits;
  if (!range_fit(fits, points, x, 0, x.sizes.size()))
    throw InputError(what, "/results", "points of at least two different sizes to fit latency and bandwidth");
  const std::vector<Split> splits = candidate_splits(fits, points, x, max_regimes);
  // The fewest regimes whose chosen split meets every point but the outliers within
  // kMaterialMisfit: each break, the second as the first, only where fewer lines miss by more.
  auto misfit = [](const Split& s) {
    double worst = 0;
    for (const Line* l : s.lines)
      for (double r : l->rel)
        if (std::abs(r) <= kOutlierScales * l->scale) worst = std::max(worst, std::abs(r));
    return worst;
  };
  std::size_t chosen = 0;
  for (std::size_t regimes = 1, upto = 0; upto < splits.size(); ++regimes) {
    while (upto < splits.size() && splits[upto].starts.size() <= regimes) ++upto;  // fewest regimes first
    chosen = choose_split(std::span<const Split>(splits.data(), upto), points.size());
    if (misfit(splits[chosen]) <= kMaterialMisfit) break;
  }
  return fit_of_split(splits[chosen], points, x);
}

namespace {

// R² is the share of the times' spread the line explains: a regime whose times hardly change with
// size (latency-bound) has little spread to explain, and a good line scores near 0 or below. Its
// relative errors say whether it fits: a line saying which, under kLowR2 (else empty).
std::string low_r2_note(double r2, double p90) {
  if (r2 >= kLowR2) return "";
  char line[256];
  std::snprintf(line, sizeof line,
                p90 <= kFlatFitError
                    ? "#   r2 %.2f: the times barely change with size here (latency-bound), so a line explains "
                      "little of their spread; judge it by its errors (p90 %.1f%%)\n"
                    : "#   r2 %.2f and p90 error %.1f%%: the line does not follow these times (noisy or uneven "
                      "points; more iterations, -n, or a quieter host)\n",
                r2, p90 * 100);
  return line;
}

}  // namespace

std::string fit_links(const LinkPoints& points, const std::function<std::string(LinkClass, CollOp)>& what,
                      Calibration& cal) {
  char line[1024];  // a row holds two numbers of up to 309 digits (%f of a double near its max)
  std::snprintf(line, sizeof line, "#%-15s %-15s %-6s %11s %10s %10s %8s %8s %8s %9s %7s %5s\n", "link class", "op",
                "regime", "from_bytes", "alpha_us", "busbw_GBps", "r2", "p50_err", "p90_err", "max_err", "points",
                "outl");
  std::string t = line;
  const Bound& latency = bound(Quantity::latency);
  const Bound& per_byte = bound(Quantity::inverse_bandwidth);
  for (const auto& [key, pts] : points) {
    LinkFit fit = fit_alpha_beta(pts, what(key.first, key.second));
    AlphaBeta& ab = fit.coefficients;
    // Per regime: its points' relative errors and its outliers.
    const std::vector<AlphaBetaRegime> regimes = ab.regimes_s();
    std::vector<std::vector<double>> rel(regimes.size());
    std::vector<std::int64_t> outl(regimes.size(), 0);
    auto index_of = [&](double bytes) { return static_cast<std::size_t>(&regime_at(regimes, bytes) - regimes.data()); };
    for (const CollPoint& p : pts)
      rel[index_of(p.bytes)].push_back(std::abs(predict_us(ab, p) - p.time_us) / p.time_us);
    for (const FitOutlier& o : ab.outliers) ++outl[index_of(static_cast<double>(o.bytes))];
    for (std::size_t r = 0; r < ab.regimes.size(); ++r) {
      const LinkRegime& g = ab.regimes[r];
      const std::string regime = std::to_string(r + 1) + "/" + std::to_string(ab.regimes.size());
      std::snprintf(
          line, sizeof line, " %-15s %-15s %-6s %11lld %10.3f %10.4f %8.4f %7.1f%% %7.1f%% %8.1f%% %7lld %5lld\n",
          link_class_name(key.first), to_string(key.second), regime.c_str(), static_cast<long long>(g.from_bytes),
          g.alpha_us, g.beta_ns_per_byte > 0 ? 1.0 / g.beta_ns_per_byte : 0.0, g.fit.r2,
          harness::percentile(rel[r], 0.5) * 100, harness::percentile(rel[r], 0.9) * 100, g.fit.max_rel_error * 100,
          static_cast<long long>(g.fit.samples), static_cast<long long>(outl[r]));
      t += line + low_r2_note(g.fit.r2, harness::percentile(rel[r], 0.9));
    }
    if (ab.regimes.size() > 1) {
      std::snprintf(line, sizeof line, "#   all sizes: r2 %.4f, p50 %.1f%%, p90 %.1f%%, max %.1f%% over %lld points\n",
                    ab.fit.r2, ab.rel_residual_p50 * 100, ab.rel_residual_p90 * 100, ab.fit.max_rel_error * 100,
                    static_cast<long long>(ab.fit.samples));
      t += line;
    }
    if (!ab.outliers.empty()) {
      std::string list;
      const std::size_t shown = std::min<std::size_t>(ab.outliers.size(), 8);
      for (std::size_t i = 0; i < shown; ++i) {
        const FitOutlier& o = ab.outliers[i];
        list += (i ? ", " : "") + std::to_string(o.bytes) + " B x" + std::to_string(o.ranks) + " " +
                percent(o.rel_residual);
      }
      if (shown < ab.outliers.size()) list += ", and " + std::to_string(ab.outliers.size() - shown) + " more";
      std::snprintf(line, sizeof line,
                    "#   outliers (residual > %.0f x its regime's robust scale, down-weighted): ", kOutlierScales);
      t += line + list + "\n";
    }
    // A fit outside what a calibration may hold (a busy host can measure a small sweep at 1 MB/s)
    // is said and left out, as one that resolves no bandwidth: the datasheet's stays. A smaller
    // size's regime whose times do not grow with size (a latency-bound protocol) is written at
    // the least β a calibration holds, which adds less than it resolved.
    for (std::size_t r = 0; r + 1 < ab.regimes.size(); ++r)
      ab.regimes[r].beta_ns_per_byte = std::max(ab.regimes[r].beta_ns_per_byte, per_byte.min);
    const LinkRegime* outside = nullptr;
    for (const LinkRegime& g : ab.regimes)
      if (!outside && (!within(latency, g.alpha_us) || !within(per_byte, g.beta_ns_per_byte))) outside = &g;
    if (!(ab.beta_ns_per_byte > 0))
      t += "#   (not written: no bandwidth resolved, the times do not grow with size; the datasheet's stays)\n";
    else if (outside)
      t += "#   (not written: expected " + describe(within(latency, outside->alpha_us) ? per_byte : latency) +
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
