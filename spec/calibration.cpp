#include "spec/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "spec/number_text.hpp"

namespace sax {

namespace {

// Efficiencies are achieved / the datasheet's figure, in their row of spec/bounds.hpp: what a
// fit from samples keeps stays readable.
const Bound& kEfficiency = bound(Quantity::efficiency);

// The median as harness::median has it (the mean of the middle two of an even count).
double median_of(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const double pos = 0.5 * static_cast<double>(xs.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, xs.size() - 1);
  return xs[lo] + (pos - static_cast<double>(lo)) * (xs[hi] - xs[lo]);
}

}  // namespace

double EfficiencyCurve::at(double flops, const double* log10_points) const {
  if (points.empty()) return 1.0;
  if (flops <= points.front().flops) return points.front().efficiency;
  if (flops >= points.back().flops) return points.back().efficiency;
  const double x = std::log10(flops);
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (flops > points[i].flops) continue;
    const double x0 = log10_points ? log10_points[i - 1] : std::log10(points[i - 1].flops);
    const double x1 = log10_points ? log10_points[i] : std::log10(points[i].flops);
    const double t = (x - x0) / (x1 - x0);
    return points[i - 1].efficiency + t * (points[i].efficiency - points[i - 1].efficiency);
  }
  return points.back().efficiency;
}

EfficiencyCurve EfficiencyCurve::from_samples(const std::vector<EfficiencyPoint>& samples) {
  std::map<long, std::vector<EfficiencyPoint>> bins;  // half decade -> its samples
  for (const EfficiencyPoint& p : samples)
    if (p.flops > 0 && std::isfinite(p.flops))
      bins[std::lround(std::floor(std::log10(p.flops) * 2))].push_back(
          {p.flops, std::clamp(p.efficiency, kEfficiency.min, kEfficiency.max)});
  EfficiencyCurve c;
  for (const auto& [bin, v] : bins) {
    double log_sum = 0;
    std::vector<double> effs;
    for (const EfficiencyPoint& p : v) log_sum += std::log10(p.flops), effs.push_back(p.efficiency);
    c.points.push_back({std::pow(10.0, log_sum / static_cast<double>(v.size())), median_of(effs)});
  }
  return c;
}

std::vector<AlphaBetaRegime> AlphaBeta::regimes_s() const {
  std::vector<AlphaBetaRegime> s;
  for (const LinkRegime& r : regimes)
    s.push_back({static_cast<double>(r.from_bytes), r.alpha_us * 1e-6, r.beta_ns_per_byte * 1e-9});
  if (s.empty()) s.push_back({0, alpha_us * 1e-6, beta_ns_per_byte * 1e-9});
  return s;
}

void AlphaBeta::divide_beta(double factor) {
  beta_ns_per_byte /= factor;
  for (LinkRegime& r : regimes) r.beta_ns_per_byte /= factor;
}

double gemm_quantization(double m, double n, double batch, int sm_count) {
  if (sm_count <= 0 || !(m > 0) || !(n > 0) || !(batch > 0)) return 1.0;
  // The guide's typical cuBLAS tiles (rows × columns of the output), most efficient first.
  static constexpr double kTiles[][2] = {{256, 128}, {128, 256}, {128, 128}, {256, 64},
                                         {64, 256},  {128, 64},  {64, 128},  {64, 64}};
  const double slots = sm_count;
  double least = INFINITY;
  for (const auto& tile : kTiles) {
    const double tiles = batch * std::ceil(m / tile[0]) * std::ceil(n / tile[1]);
    least = std::min(least, std::ceil(tiles / slots) * slots * tile[0] * tile[1]);
  }
  return batch * m * n / least;
}

namespace {

double relative_error(Fields& g, const std::string& key) {
  const double e = g.number(key, -1.0, 0.0);
  if (e < 0) g.fail(key, "a number >= 0");
  return e;
}

// A fit block; a link entry's (`link`) also holds the median and p90 relative error.
FitQuality read_fit(Fields& f, AlphaBeta* link = nullptr) {
  FitQuality q;
  if (const json* fit = f.optional("fit")) {
    Fields g(*fit, f.file(), f.path_of("fit"));
    q.r2 = g.number("r2", -1e300, 0.0);
    if (q.r2 > 1.0) g.fail("r2", "a coefficient of determination at most 1, got " + std::to_string(q.r2));
    q.max_rel_error = relative_error(g, "max_rel_error");
    q.samples = g.integer("samples", 0, 0);
    if (link) {
      link->rel_residual_p50 = relative_error(g, "p50_rel_error");
      link->rel_residual_p90 = relative_error(g, "p90_rel_error");
    }
    g.finish();
  }
  return q;
}

json fit_json(const FitQuality& q) {
  return {{"r2", q.r2}, {"max_rel_error", q.max_rel_error}, {"samples", q.samples}};
}

// A file's figure and the one it must equal (the last regime's), alike to what a hand-edited
// text of the same number parses to.
bool same_figure(double a, double b) { return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)); }

std::vector<LinkRegime> read_regimes(Fields& ab, const AlphaBeta& v) {
  const json* rs = ab.optional("regimes");
  if (!rs) return {{0, v.alpha_us, v.beta_ns_per_byte, v.fit}};  // an older file: one regime
  const std::string expected =
      "an array of 1 to " + std::to_string(kMaxLinkRegimes) + " regimes {from_bytes, alpha_us, beta_ns_per_byte, fit}";
  if (!rs->is_array() || rs->empty() || rs->size() > kMaxLinkRegimes) ab.fail("regimes", expected);
  std::vector<LinkRegime> regimes;
  for (std::size_t i = 0; i < rs->size(); ++i) {
    Fields r((*rs)[i], ab.file(), json_path(ab.path_of("regimes"), i));
    LinkRegime g;
    g.from_bytes = r.count("from_bytes", Quantity::message_size);
    if (!regimes.empty() && g.from_bytes <= regimes.back().from_bytes)
      r.fail("from_bytes", "regimes in ascending order of from_bytes, above the previous regime's " +
                               std::to_string(regimes.back().from_bytes));
    g.alpha_us = r.quantity("alpha_us", Quantity::latency);
    g.beta_ns_per_byte = r.quantity("beta_ns_per_byte", Quantity::inverse_bandwidth);
    g.fit = read_fit(r);
    r.finish();
    regimes.push_back(g);
  }
  // The entry's own figures are the large-message regime's, which readers without regimes use.
  if (!same_figure(v.alpha_us, regimes.back().alpha_us))
    ab.fail("alpha_us", "the last regime's alpha_us " + num(regimes.back().alpha_us) + " (the large-message regime)");
  if (!same_figure(v.beta_ns_per_byte, regimes.back().beta_ns_per_byte))
    ab.fail("beta_ns_per_byte", "the last regime's beta_ns_per_byte " + num(regimes.back().beta_ns_per_byte) +
                                    " (the large-message regime)");
  return regimes;
}

std::vector<FitOutlier> read_outliers(Fields& ab) {
  std::vector<FitOutlier> outliers;
  const json* os = ab.optional("outliers");
  if (!os) return outliers;
  if (!os->is_array()) ab.fail("outliers", "an array of {bytes, ranks, time_us, rel_residual, why}");
  for (std::size_t i = 0; i < os->size(); ++i) {
    Fields o((*os)[i], ab.file(), json_path(ab.path_of("outliers"), i));
    FitOutlier x;
    x.bytes = o.count("bytes", Quantity::message_size);
    x.ranks = o.integer_in("ranks", 1, INT32_MAX);
    x.time_us = o.quantity("time_us", Quantity::measured_time);
    x.rel_residual = o.number("rel_residual", -1e300);
    if (!std::isfinite(x.rel_residual)) o.fail("rel_residual", "a finite number");
    x.why = o.string("why", "");
    o.finish();
    outliers.push_back(x);
  }
  return outliers;
}

json alpha_beta_json(const AlphaBeta& v) {
  json fit = fit_json(v.fit);
  fit["p50_rel_error"] = v.rel_residual_p50;
  fit["p90_rel_error"] = v.rel_residual_p90;
  json regimes = json::array();
  for (const LinkRegime& r : v.regimes)
    regimes.push_back({{"from_bytes", r.from_bytes},
                       {"alpha_us", r.alpha_us},
                       {"beta_ns_per_byte", r.beta_ns_per_byte},
                       {"fit", fit_json(r.fit)}});
  if (regimes.empty())
    regimes.push_back({{"from_bytes", 0},
                       {"alpha_us", v.alpha_us},
                       {"beta_ns_per_byte", v.beta_ns_per_byte},
                       {"fit", fit_json(v.fit)}});
  json j = {{"alpha_us", v.alpha_us}, {"beta_ns_per_byte", v.beta_ns_per_byte}, {"fit", fit}, {"regimes", regimes}};
  if (!v.outliers.empty()) {
    json& os = j["outliers"] = json::array();
    for (const FitOutlier& o : v.outliers)
      os.push_back({{"bytes", o.bytes},
                    {"ranks", o.ranks},
                    {"time_us", o.time_us},
                    {"rel_residual", o.rel_residual},
                    {"why", o.why}});
  }
  return j;
}

EfficiencyCurve read_curve(Fields& parent, const std::string& key) {
  Fields f(parent.object(key), parent.file(), parent.path_of(key));
  EfficiencyCurve c;
  const json& pts = f.array("curve");
  if (pts.empty()) f.fail("curve", "at least one point {flops, efficiency}");
  for (std::size_t i = 0; i < pts.size(); ++i) {
    Fields p(pts[i], f.file(), json_path(f.path_of("curve"), i));
    EfficiencyPoint e;
    e.flops = p.quantity("flops", Quantity::curve_flops);
    e.efficiency = p.quantity("efficiency", Quantity::efficiency);
    p.finish();
    if (!c.points.empty() && e.flops <= c.points.back().flops)
      throw InputError(f.file(), p.path_of("flops"), "points in ascending order of flops");
    c.points.push_back(e);
  }
  c.fit = read_fit(f);
  f.finish();
  return c;
}

json curve_json(const EfficiencyCurve& c) {
  json pts = json::array();
  for (const auto& p : c.points) pts.push_back({{"flops", p.flops}, {"efficiency", p.efficiency}});
  return {{"curve", pts}, {"fit", fit_json(c.fit)}};
}

}  // namespace

// read_calibration's phases, each one object of the file, in the order they are read (the first
// fault found is the one said).
static CalibrationProvenance read_provenance(Fields p, const std::string& file) {
  CalibrationProvenance provenance;
  provenance.cluster = p.string("cluster");
  provenance.backend = *parse_backend(p.choice("backend", {"cpu", "cuda"}));
  provenance.emulation = p.string("emulation", "");
  provenance.date = p.string("date", "");
  provenance.tool = p.string("tool", "");
  provenance.cluster_hash = p.string("cluster_hash", "");
  provenance.sax_version = p.string("sax_version", "");
  provenance.library = p.string("library", "");
  if (const json* hosts = p.optional("hosts")) {
    if (!hosts->is_array()) p.fail("hosts", "an array of host names");
    for (std::size_t i = 0; i < hosts->size(); ++i) {
      if (!(*hosts)[i].is_string()) throw InputError(file, json_path(p.path_of("hosts"), i), "a host name");
      provenance.hosts.push_back((*hosts)[i].get<std::string>());
    }
  }
  p.allow("comment");
  p.finish();
  return provenance;
}

// α and β per link class and op.
static void read_link_fits(Fields l, const std::string& file, Calibration& c) {
  for (LinkClass lc : kLinkClasses) {
    const json* cls = l.optional(link_class_name(lc));
    if (!cls) continue;
    Fields ops(*cls, file, l.path_of(link_class_name(lc)));
    for (CollOp op : kPricedCollOps) {
      const json* e = ops.optional(to_string(op));
      if (!e) continue;
      Fields ab(*e, file, ops.path_of(to_string(op)));
      AlphaBeta v;
      v.alpha_us = ab.quantity("alpha_us", Quantity::latency);
      v.beta_ns_per_byte = ab.quantity("beta_ns_per_byte", Quantity::inverse_bandwidth);
      v.fit = read_fit(ab, &v);
      v.regimes = read_regimes(ab, v);
      v.outliers = read_outliers(ab);
      ab.finish();
      c.links[static_cast<int>(lc)][static_cast<int>(op)] = v;
    }
    ops.finish();
  }
  l.finish();
}

static void read_compute(Fields k, Calibration& c) {
  if (k.has("gemm"))
    c.gemm = read_curve(k, "gemm");
  else
    k.allow("gemm");
  if (k.has("attention"))
    c.attention = read_curve(k, "attention");
  else
    k.allow("attention");
  if (k.has("hbm_efficiency")) {
    c.hbm_efficiency = k.quantity("hbm_efficiency", Quantity::efficiency);
  } else {
    k.allow("hbm_efficiency");
  }
  k.finish();
}

static Oversubscription read_oversubscription(Fields g) {
  Oversubscription v;
  v.value = g.quantity("value", Quantity::oversubscription);
  v.alone_us = g.quantity("alone_us", Quantity::measured_time);
  v.together_us = g.quantity("together_us", Quantity::measured_time);
  v.samples = g.integer("samples", 1);
  g.finish();
  return v;
}

static HeldDevice read_held_device(Fields g) {
  HeldDevice v;
  v.peak_tflops = g.quantity("peak_tflops", Quantity::peak_compute);
  v.hbm_bandwidth_gbps = g.quantity("hbm_bandwidth_gbps", Quantity::hbm_bandwidth);
  v.declared_peak_tflops = g.quantity("declared_peak_tflops", Quantity::peak_compute);
  v.declared_hbm_bandwidth_gbps = g.quantity("declared_hbm_bandwidth_gbps", Quantity::hbm_bandwidth);
  v.margin = g.quantity("margin", Quantity::efficiency);
  v.peak_limited_by = g.string("peak_limited_by", "");
  v.memory_limited_by = g.string("memory_limited_by", "");
  v.ops = g.integer("ops", 1);
  g.finish();
  return v;
}

static FittedCoefficient read_coefficient(Fields g, Quantity q) {
  FittedCoefficient v;
  v.value = g.quantity("value", q);
  v.low = g.quantity("low", q);
  v.high = g.quantity("high", q);
  if (!(v.low <= v.value && v.value <= v.high)) g.fail("value", "low <= value <= high");
  g.finish();
  return v;
}

static DeviceCompute read_device_compute(Fields g) {
  DeviceCompute d;
  auto coefficient = [&g](const char* name, Quantity q, FittedCoefficient& into) {
    if (const json* v = g.optional(name)) into = read_coefficient(Fields(*v, g.file(), g.path_of(name)), q);
  };
  coefficient("gemm_scale", Quantity::efficiency, d.gemm_scale);
  coefficient("attention_scale", Quantity::efficiency, d.attention_scale);
  coefficient("memory_scale", Quantity::efficiency, d.memory_scale);
  coefficient("op_overhead_us", Quantity::op_overhead, d.op_overhead_us);
  d.runs = g.integer("runs", 0);
  if (const json* s = g.optional("sources")) {
    if (!s->is_array()) g.fail("sources", "an array of the runs' sources");
    for (const json& e : *s) {
      if (!e.is_string()) g.fail("sources", "an array of strings");
      d.sources.push_back(e.get<std::string>());
    }
  }
  if (const json* cv = g.optional("cross_validation")) {
    Fields c(*cv, g.file(), g.path_of("cross_validation"));
    // Percentages: |error| at least 0, a signed mean above −100 % (a prediction takes some time).
    d.cv_mean_pct = c.number("mean_abs_pct", -1), d.cv_max_pct = c.number("max_abs_pct", -1);
    d.cv_signed_pct = c.number("signed_mean_pct", -100);
    d.datasheet_mean_pct = c.number("datasheet_mean_abs_pct", -1);
    d.datasheet_max_pct = c.number("datasheet_max_abs_pct", -1);
    d.datasheet_signed_pct = c.number("datasheet_signed_mean_pct", -100);
    d.held_out = c.integer("held_out", 1);
    c.allow("method");
    c.finish();
  }
  g.finish();
  return d;
}

Calibration read_calibration(const json& value, const std::string& file) {
  Fields f(value, file, "");
  f.choice("kind", {"calibration"}, "calibration");  // a file of another kind is refused wherever it is read
  f.allow("comment");
  Calibration c;
  // Compared before narrowing to int: 4294967297 would otherwise read as version 1.
  const std::int64_t version = f.integer("version", 1);
  if (version != 1) f.fail("version", "1 (the only calibration format so far), got " + std::to_string(version));
  c.version = static_cast<int>(version);
  c.provenance = read_provenance(Fields(f.object("provenance"), file, f.path_of("provenance")), file);
  if (const json* links = f.optional("links")) read_link_fits(Fields(*links, file, f.path_of("links")), file, c);
  if (const json* compute = f.optional("compute")) read_compute(Fields(*compute, file, f.path_of("compute")), c);
  if (f.has("overlap_slowdown"))
    c.overlap_slowdown = f.quantity("overlap_slowdown", Quantity::overlap_slowdown);
  else
    f.allow("overlap_slowdown");
  if (const json* skew = f.optional("call_skew_us")) {
    Fields s(*skew, file, f.path_of("call_skew_us"));
    for (LinkClass lc : {LinkClass::intra_node, LinkClass::intra_building, LinkClass::cross_building})
      if (s.has(link_class_name(lc)))
        c.call_skew_us[static_cast<std::size_t>(lc)] = s.quantity(link_class_name(lc), Quantity::call_skew);
      else
        s.allow(link_class_name(lc));
    s.finish();
  }
  if (const json* o = f.optional("cross_oversubscription"))
    c.cross_oversubscription = read_oversubscription(Fields(*o, file, f.path_of("cross_oversubscription")));
  if (const json* h = f.optional("held_device"))
    c.held_device = read_held_device(Fields(*h, file, f.path_of("held_device")));
  if (const json* devices = f.optional("devices")) {
    if (!devices->is_object()) f.fail("devices", "an object of GPU generations (a100, h100, h200, b200)");
    for (const auto& [name, d] : devices->items()) {
      const auto g = parse_gpu_generation(name);
      if (!g) throw InputError(file, f.path_of("devices") + "/" + name, "a GPU generation: a100, h100, h200 or b200");
      c.devices[*g] = read_device_compute(Fields(d, file, f.path_of("devices") + "/" + name));
    }
  }
  if (const json* points = f.optional("points")) {
    if (!points->is_array()) f.fail("points", "an array of the raw measurements");
    c.points = *points;
  }
  f.finish();
  return c;
}

Calibration load_calibration(const std::string& file) { return read_calibration(load_json_file(file), file); }

json to_json(const Calibration& c) {
  json j = {{"kind", "calibration"},
            {"version", c.version},
            {"provenance", {{"cluster", c.provenance.cluster}, {"backend", to_string(c.provenance.backend)}}}};
  // The optional fields only where known: the reader takes an empty string for a mistake.
  json& prov = j["provenance"];
  if (!c.provenance.emulation.empty()) prov["emulation"] = c.provenance.emulation;
  if (!c.provenance.date.empty()) prov["date"] = c.provenance.date;
  if (!c.provenance.tool.empty()) prov["tool"] = c.provenance.tool;
  if (!c.provenance.cluster_hash.empty()) prov["cluster_hash"] = c.provenance.cluster_hash;
  if (!c.provenance.sax_version.empty()) prov["sax_version"] = c.provenance.sax_version;
  if (!c.provenance.library.empty()) prov["library"] = c.provenance.library;
  if (!c.provenance.hosts.empty()) prov["hosts"] = c.provenance.hosts;
  json links = json::object();
  for (LinkClass lc : kLinkClasses)
    for (CollOp op : kPricedCollOps)
      if (const auto& v = c.links[static_cast<int>(lc)][static_cast<int>(op)])
        links[link_class_name(lc)][to_string(op)] = alpha_beta_json(*v);
  if (!links.empty()) j["links"] = links;
  json compute = json::object();
  if (c.gemm) compute["gemm"] = curve_json(*c.gemm);
  if (c.attention) compute["attention"] = curve_json(*c.attention);
  if (c.hbm_efficiency) compute["hbm_efficiency"] = *c.hbm_efficiency;
  if (!compute.empty()) j["compute"] = compute;
  if (c.overlap_slowdown) j["overlap_slowdown"] = *c.overlap_slowdown;
  for (LinkClass lc : {LinkClass::intra_node, LinkClass::intra_building, LinkClass::cross_building})
    if (const auto& s = c.call_skew_us[static_cast<std::size_t>(lc)]) j["call_skew_us"][link_class_name(lc)] = *s;
  if (const auto& o = c.cross_oversubscription)
    j["cross_oversubscription"] = {
        {"value", o->value}, {"alone_us", o->alone_us}, {"together_us", o->together_us}, {"samples", o->samples}};
  if (const auto& h = c.held_device)
    j["held_device"] = {{"peak_tflops", h->peak_tflops},
                        {"hbm_bandwidth_gbps", h->hbm_bandwidth_gbps},
                        {"declared_peak_tflops", h->declared_peak_tflops},
                        {"declared_hbm_bandwidth_gbps", h->declared_hbm_bandwidth_gbps},
                        {"margin", h->margin},
                        {"peak_limited_by", h->peak_limited_by},
                        {"memory_limited_by", h->memory_limited_by},
                        {"ops", h->ops}};
  for (const auto& [g, d] : c.devices) {
    auto coefficient = [](const FittedCoefficient& v) {
      return json{{"value", v.value}, {"low", v.low}, {"high", v.high}};
    };
    json& out = j["devices"][to_string(g)];
    out = {{"gemm_scale", coefficient(d.gemm_scale)},
           {"attention_scale", coefficient(d.attention_scale)},
           {"memory_scale", coefficient(d.memory_scale)},
           {"op_overhead_us", coefficient(d.op_overhead_us)},
           {"runs", d.runs},
           {"sources", d.sources}};
    if (d.held_out > 0)  // a figure only where something was held out
      out["cross_validation"] = {{"method", "leave one source out"},
                                 {"held_out", d.held_out},
                                 {"mean_abs_pct", d.cv_mean_pct},
                                 {"max_abs_pct", d.cv_max_pct},
                                 {"signed_mean_pct", d.cv_signed_pct},
                                 {"datasheet_mean_abs_pct", d.datasheet_mean_pct},
                                 {"datasheet_max_abs_pct", d.datasheet_max_pct},
                                 {"datasheet_signed_mean_pct", d.datasheet_signed_pct}};
  }
  if (!c.points.empty()) j["points"] = c.points;
  return j;
}

}  // namespace sax
