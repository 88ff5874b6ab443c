#include "calibration/sweep_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "calibration/fit.hpp"
#include "calibration/link_sweep.hpp"
#include "calibration/points_file.hpp"
#include "harness/stats.hpp"
#include "spec/bounds.hpp"
#include "spec/error.hpp"

namespace sax::calibration {

namespace {

// An efficiency curve from (flops, time, peak) points, as the cost model reads it (linear in
// log10 FLOPs between points, clamped at the ends): the median efficiency per half decade of
// FLOPs, at the geometric mean of the FLOPs in it (EfficiencyCurve::from_samples); its quality
// over every point. Each point's efficiency is divided by its tile and wave quantization (the
// point's `quantization`, workload::quantization of its shape on the device's SMs when measured;
// 1 when absent, as on the CPU testbed): the curve is the one the cost model multiplies by it.
std::optional<EfficiencyCurve> efficiency_curve(const std::vector<json>& pts) {
  std::vector<EfficiencyPoint> samples;
  std::vector<const json*> used;
  for (const json& p : pts) {
    const double flops = p["flops"].get<double>(), peak = p["peak_flops"].get<double>();
    if (!(flops > 0) || !(peak > 0)) continue;
    const double eff = flops / (p["time_us"].get<double>() * 1e-6 * peak);
    samples.push_back({flops, eff / p.value("quantization", 1.0)});
    used.push_back(&p);
  }
  if (samples.empty()) return std::nullopt;
  EfficiencyCurve c = EfficiencyCurve::from_samples(samples);
  double mean = 0, ss_res = 0, ss_tot = 0, worst = 0;
  for (const json* p : used) mean += (*p)["time_us"].get<double>() / static_cast<double>(used.size());
  for (const json* p : used) {
    const double flops = (*p)["flops"].get<double>(), measured = (*p)["time_us"].get<double>();
    const double predicted =
        flops / ((*p)["peak_flops"].get<double>() * c.at(flops) * p->value("quantization", 1.0)) * 1e6;
    ss_res += (predicted - measured) * (predicted - measured);
    ss_tot += (measured - mean) * (measured - mean);
    worst = std::max(worst, std::abs(predicted - measured) / measured);
  }
  c.fit = {ss_tot > 0 ? 1 - ss_res / ss_tot : 1.0, worst, static_cast<std::int64_t>(used.size())};
  return c;
}

// The GEMM curve (weight GEMMs and the unfused score and value products alike: the cost model
// prices both on it, each times its quantization), the attention curve (fused attention), and
// the HBM fraction of memory-bound ops.
void fit_compute(const std::vector<json>& compute, Calibration& cal, std::string& t) {
  std::vector<json> gemm, attention, memory;
  for (const json& p : compute) {
    const std::string k = p["compute"].get<std::string>();
    (k == "gemm" || k == "product" ? gemm : k == "memory" ? memory : attention).push_back(p);
  }
  char line[1024];
  auto show = [&](const char* name, const std::optional<EfficiencyCurve>& c) {
    if (!c) return;
    std::string pts;
    for (const auto& e : c->points) {
      char b[48];
      std::snprintf(b, sizeof b, " %.3g:%.3f", e.flops, e.efficiency);
      pts += b;
    }
    std::snprintf(line, sizeof line,
                  "# %s efficiency (achieved / peak by FLOPs of one op; clamped outside %.3g-%.3g FLOPs, the "
                  "measured range): R2 %.4f, max error %.1f%%, %lld ops; curve%s\n",
                  name, c->points.front().flops, c->points.back().flops, c->fit.r2, c->fit.max_rel_error * 100,
                  static_cast<long long>(c->fit.samples), pts.c_str());
    t += line;
  };
  cal.gemm = efficiency_curve(gemm);
  show("gemm", cal.gemm);
  cal.attention = efficiency_curve(attention);
  show("attention", cal.attention);
  std::vector<double> fractions;
  for (const json& p : memory) {
    const double hbm = p["hbm_bytes_per_s"].get<double>(), bytes = p["bytes"].get<double>();
    if (hbm > 0 && bytes > 0) fractions.push_back(bytes / (p["time_us"].get<double>() * 1e-6) / hbm);
  }
  if (!fractions.empty()) {
    const double m = harness::median(fractions);
    cal.hbm_efficiency = std::clamp(m, 1e-6, 100.0);
    std::snprintf(line, sizeof line,
                  "# memory-bound ops reach %.3f x the datasheet's memory bandwidth (median of %zu ops, %.3f-%.3f)%s\n",
                  m, fractions.size(), *std::min_element(fractions.begin(), fractions.end()),
                  *std::max_element(fractions.begin(), fractions.end()),
                  m > 1 ? ": the datasheet figure is below what the device does" : "");
    t += line;
  }
}

// A sweep's points by what they feed: the link fits, the boundary's sharing, the compute curves,
// the overlap slowdown.
struct SortedPoints {
  LinkPoints links;                                             // every group of the kind at once
  std::map<std::uint64_t, double> cross_alone, cross_together;  // kSharingOp by size
  int cross_groups = 0;
  std::vector<json> compute;
  std::vector<json> paced;      // a paced device's ops: what the host holds, not efficiencies
  std::vector<double> overlap;  // compute's slowdown beside a collective, per repetition
  std::vector<json> wait;       // a paced device's wait path of a blocking call, per group kind
};

SortedPoints sort_points(const json& points, const std::string& what) {
  SortedPoints s;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const json& p = points[i];
    check_point(p, what, "/" + std::to_string(i));
    const std::string kind = p.value("kind", "link");
    if (kind == "overlap") {
      // (W − max(A, C)) / min(A, C); points from before the all-reduce was timed alone (no
      // comm_us) measured the GEMMs' slowdown with collectives kept in flight: W / A − 1.
      const double w = p["time_us"].get<double>(), a = p["alone_us"].get<double>();
      if (p.contains("comm_us")) {
        const double c = p["comm_us"].get<double>();
        s.overlap.push_back((w - std::max(a, c)) / std::min(a, c));
      } else {
        s.overlap.push_back(w / a - 1);
      }
      continue;
    }
    if (kind == "wait") {
      s.wait.push_back(p);
      continue;
    }
    if (kind == "compute") {
      (p.value("paced", false) ? s.paced : s.compute).push_back(p);
      continue;
    }
    const LinkClass lc = *parse_link_class(p.at("link_class").get<std::string>());
    const auto op = parse_coll_op(p.at("op").get<std::string>());
    // A point's median over its samples, where it has one: a sample the host stalled (a rank
    // preempted, a helper woken late) moves the mean, not the median, and the link is the same.
    const double time_us = p.contains("p50_us") ? p["p50_us"].get<double>() : p.at("time_us").get<double>();
    CollPoint c{*op, p.at("ranks").get<int>(), p.at("bytes").get<double>(), time_us};
    const bool together = p.at("together").get<bool>();
    if (together) s.links[{lc, *op}].push_back(c);
    if (lc == LinkClass::cross_building && *op == kSharingOp && p.at("groups").get<int>() > 1) {
      (together ? s.cross_together : s.cross_alone)[p.at("bytes").get<std::uint64_t>()] = c.time_us;
      s.cross_groups = p.at("groups").get<int>();
    }
  }
  return s;
}

// The boundary's sharing, as the cost model has it (explorer/cost_model.cpp): the groups put
// a fraction f of a building's devices on it, and the per-device bandwidth shrinks by
// max(1, oversubscription × f). All G groups at once: f = 1; one alone: f = 1/G. So the slowdown
// together / alone is the oversubscription where it lies in [1, G] (G means "G or more"), and the
// fits, made with every group at once, hold it: the link's own β is theirs / it.
void fit_oversubscription(const SortedPoints& s, Calibration& cal, std::string& t) {
  std::vector<double> ratios, alone_us, together_us;
  for (const auto& [bytes, tt] : s.cross_together)
    if (auto it = s.cross_alone.find(bytes); it != s.cross_alone.end() && it->second > 0)
      ratios.push_back(tt / it->second), alone_us.push_back(it->second), together_us.push_back(tt);
  if (ratios.empty()) return;
  Oversubscription o;
  const double r = harness::median(ratios);
  o.value = std::clamp(r, 1.0, static_cast<double>(s.cross_groups));
  o.alone_us = harness::median(alone_us);
  o.together_us = harness::median(together_us);
  o.samples = static_cast<std::int64_t>(ratios.size());
  cal.cross_oversubscription = o;
  // Every regime's β (a regime at the least β a calibration holds stays there: readable).
  const double least_beta = bound(Quantity::inverse_bandwidth).min;
  for (auto& ab : cal.links[static_cast<int>(LinkClass::cross_building)])
    if (ab) {
      ab->divide_beta(o.value);
      for (LinkRegime& r : ab->regimes) r.beta_ns_per_byte = std::max(r.beta_ns_per_byte, least_beta);
    }
  char line[512];
  std::snprintf(line, sizeof line,
                "# cross-building boundary: one of %d groups alone takes 1/%.2f of the time of all at once (%s at "
                "the %zu largest sizes): oversubscription %.2f%s; a device's own bandwidth, unshared, is the "
                "busbw above x %.2f\n",
                s.cross_groups, r, to_string(kSharingOp), ratios.size(), o.value,
                r >= s.cross_groups ? " (or more: all groups at once cannot tell more)" : "", o.value);
  t += line;
}

// The host holds a paced device while every op's p99 is within the device's time for it. The
// declared time is c + R (R the roofline part, c the fixed cost per op); a device s times faster
// (peak, or memory bandwidth for the ops bound by bytes) takes c + R / s, so an op allows
// s ≤ R / (p99 − c) (any s where p99 ≤ c). The fastest device held: each scale the least its ops
// allow, times kHeldMargin, which leaves room for what single runs do not show (a rank waking
// late from its wait, messages moving beside the kernels).
constexpr double kHeldMargin = 0.8;

void fit_held_device(const std::vector<json>& paced, Calibration& cal, std::string& t) {
  if (paced.empty()) return;
  double flops_scale = std::numeric_limits<double>::infinity(), bytes_scale = flops_scale;
  HeldDevice h;
  for (const json& p : paced) {
    const double c = p["overhead_us"].get<double>(), rest = p["device_us"].get<double>() - c,
                 p99 = p["p99_us"].get<double>();
    const double scale = p99 > c ? rest / (p99 - c) : std::numeric_limits<double>::infinity();
    const bool bytes = p["bound"].get<std::string>() == "bytes";
    const std::string what =
        p["op"].get<std::string>() + " " + p["phase"].get<std::string>() + " " + p["shape"].get<std::string>();
    if (bytes && scale < bytes_scale) bytes_scale = scale, h.memory_limited_by = what;
    if (!bytes && scale < flops_scale) flops_scale = scale, h.peak_limited_by = what;
    h.declared_peak_tflops = p["peak_flops"].get<double>() * 1e-12;
    h.declared_hbm_bandwidth_gbps = p["hbm_bytes_per_s"].get<double>() * 1e-9;
  }
  // An unbounded scale (no op of the kind, or every op within its fixed cost) is bounded by the
  // other, or left at the declared device.
  auto held = [](double s, double other) { return std::isfinite(s) ? s : std::isfinite(other) ? other : 1.0; };
  h.margin = kHeldMargin;
  h.peak_tflops = h.declared_peak_tflops * held(flops_scale, bytes_scale) * h.margin;
  h.hbm_bandwidth_gbps = h.declared_hbm_bandwidth_gbps * held(bytes_scale, flops_scale) * h.margin;
  h.ops = static_cast<std::int64_t>(paced.size());
  cal.held_device = h;
  char line[1024];
  std::snprintf(
      line, sizeof line,
      "# paced device: with every rank computing at once this host holds up to %.4g TFLOP/s (%s) and "
      "%.4g GB/s of memory (%s), a margin of %.0f%% kept, over %lld ops; the cluster declares %.4g TFLOP/s "
      "and %.4g GB/s: %s\n",
      h.peak_tflops, h.peak_limited_by.empty() ? "no op bound by FLOPs" : h.peak_limited_by.c_str(),
      h.hbm_bandwidth_gbps, h.memory_limited_by.empty() ? "no op bound by bytes" : h.memory_limited_by.c_str(),
      (1 - h.margin) * 100, static_cast<long long>(h.ops), h.declared_peak_tflops, h.declared_hbm_bandwidth_gbps,
      h.holds_declared() ? "held" : "NOT held: expect overruns (declare a slower device)");
  t += line;
}

// The members' arrival skew of a blocking call on a paced device, per link class (the ranks wake
// apart, and saw the last call end apart: by a link's latency across it). A link class measured
// on two group kinds (none on the testbeds) takes their median.
void fit_wait(const std::vector<json>& wait, Calibration& cal, std::string& t) {
  std::map<LinkClass, std::vector<double>> by_link;
  for (const json& p : wait)
    by_link[*parse_link_class(p.at("link_class").get<std::string>())].push_back(p["skew_us"].get<double>());
  for (const auto& [lc, skew] : by_link) {
    const double s = std::max(0.0, harness::median(skew));
    cal.call_skew_us[static_cast<std::size_t>(lc)] = s;
    char line[256];
    std::snprintf(line, sizeof line,
                  "# blocking call after compute (paced), %s: its group's last member calls %.0f us after a rank, on "
                  "average\n",
                  link_class_name(lc), s);
    t += line;
  }
}

void fit_overlap(const std::vector<double>& overlap, Calibration& cal, std::string& t) {
  if (overlap.empty()) return;
  const double m = harness::median(overlap);
  cal.overlap_slowdown = std::max(0.0, m);
  char line[512];
  std::snprintf(line, sizeof line,
                "# overlap slowdown %.1f%% (median of %zu repetitions, %.1f%% to %.1f%%): of the time a collective "
                "and compute overlap, this share is still paid (0: hidden, 100: nothing overlaps)\n",
                m * 100, overlap.size(), *std::min_element(overlap.begin(), overlap.end()) * 100,
                *std::max_element(overlap.begin(), overlap.end()) * 100);
  t += line;
}

}  // namespace

Calibration fit_sweep(const json& points, const std::string& what, std::string* table) {
  const SortedPoints s = sort_points(points, what);
  Calibration cal;
  // One rank measures no link (its compute alone): no table of fits to show.
  std::string t =
      s.links.empty()
          ? std::string()
          : fit_links(
                s.links,
                [&](LinkClass lc, CollOp op) { return what + " (" + link_class_name(lc) + " " + to_string(op) + ")"; },
                cal);
  fit_oversubscription(s, cal, t);
  fit_compute(s.compute, cal, t);
  fit_held_device(s.paced, cal, t);
  fit_overlap(s.overlap, cal, t);
  fit_wait(s.wait, cal, t);
  if (table) *table = t;
  return cal;
}

void check_readable(const Calibration& cal, const std::string& what) {
  try {
    read_calibration(to_json(cal), what);
  } catch (const InputError& e) {
    throw InputError(
        what, "",
        "points whose fits make a calibration sax reads (the calibration's " + e.path() + ": " + e.expected() + ")");
  }
}

json held_cluster(const json& cluster, const HeldDevice& held, const std::string& source) {
  json out = cluster;
  const double peak = std::min(1.0, held.peak_tflops / held.declared_peak_tflops),
               memory = std::min(1.0, held.hbm_bandwidth_gbps / held.declared_hbm_bandwidth_gbps);
  if (peak >= 1 && memory >= 1) return out;
  // Down to 4 digits, never up, so that the written device is never faster than the one held (the
  // 1e-9 keeps a product that lands a rounding error under a 4-digit figure at that figure).
  auto slowed = [](double v, double scale) {
    if (scale >= 1 || !(v > 0)) return v;
    const double unit = std::pow(10.0, std::floor(std::log10(v * scale)) - 3);
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", std::floor(v * scale / unit * (1 + 1e-9)) * unit);
    return std::strtod(text, nullptr);
  };
  char what[512];
  std::snprintf(what, sizeof what,
                "Slowed to what the host held, every rank computing at once: peak x %.4g, memory bandwidth x %.4g "
                "(`%s` printed %.4g TFLOP/s and %.4g GB/s held, %.0f%% margin kept, of %.4g and %.4g declared). ",
                peak, memory, source.c_str(), held.peak_tflops, held.hbm_bandwidth_gbps, (1 - held.margin) * 100,
                held.declared_peak_tflops, held.declared_hbm_bandwidth_gbps);
  auto slow = [&](json& d) {
    if (!d.is_object()) return;
    if (d.contains("peak_tflops") && d["peak_tflops"].is_object())
      for (auto& [dtype, v] : d["peak_tflops"].items())
        if (v.is_number()) v = slowed(v.get<double>(), peak);
    if (d.contains("hbm_bandwidth_gbps") && d["hbm_bandwidth_gbps"].is_number())
      d["hbm_bandwidth_gbps"] = slowed(d["hbm_bandwidth_gbps"].get<double>(), memory);
    d["comment"] = what + d.value("comment", std::string());
  };
  slow(out["device"]);
  if (out.contains("buildings") && out["buildings"].is_array())
    for (json& b : out["buildings"])
      if (b.is_object() && b.contains("device")) slow(b["device"]);
  return out;
}

}  // namespace sax::calibration
