#include "harness/regress.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <tuple>

#include "harness/coll_plan.hpp"
#include "harness/internal/coll_table.hpp"
#include "harness/job.hpp"
#include "harness/stats.hpp"
#include "harness/watchdog.hpp"
#include "spec/bounds.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"
#include "spec/provenance.hpp"

namespace sax::harness {

namespace {

using Key = std::tuple<std::string, std::string, std::string, std::uint64_t, int, bool>;

struct Entry {
  Key key;
  std::vector<double> busbw;  // per-iteration samples
};

std::string range_text(double lo, double hi) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "from %g to %g", lo, hi);
  return buf;
}

// A time within spec/bounds' measured_time row (a denormal, zero or negative time is refused), so
// that with a busbw within measured_bandwidth every sample busbw × time_us / t_i is a finite,
// normal number: a NaN would spin the Mann-Whitney test forever.
bool is_time_us(const nlohmann::json& v) {
  return v.is_number() && within(bound(Quantity::measured_time), v.get<double>());
}

// busbw_i = busbw × time_us / t_i: the same bytes and factor, each iteration's own time.
std::vector<Entry> read_entries(const nlohmann::json& doc, const std::string& file) {
  if (!doc.is_object() || !doc.contains("results") || !doc["results"].is_array())
    throw InputError(file, "/results", "an array of bench coll results (a file written by sax bench coll --json)");
  const std::string time_range = describe(bound(Quantity::measured_time));
  const Bound& busbw_bound = bound(Quantity::measured_bandwidth);
  std::vector<Entry> out;
  const auto& results = doc["results"];
  for (std::size_t i = 0; i < results.size(); ++i) {
    const std::string path = json_path("/results", i);
    Fields f(results[i], file, path);
    Entry e;
    const std::string op = f.string("op"), group = f.string("group"), dtype = f.string("dtype");
    const auto bytes = static_cast<std::uint64_t>(f.integer_in("bytes", 1, kMaxSize));
    const int ranks = static_cast<int>(f.integer_in("ranks", 1, std::numeric_limits<int>::max()));
    // A one-buffer op (broadcast) is in place whatever the file says (version 1 had no field).
    const std::optional<CollOp> parsed = parse_coll_op(op);
    const bool in_place = (parsed && coll_op_entry(*parsed).one_buffer) || f.boolean("in_place", false);
    const double busbw = f.nonnegative("busbw_gbps");
    if (busbw != 0 && !within(busbw_bound, busbw)) f.fail("busbw_gbps", "0 or " + describe(busbw_bound));
    const nlohmann::json* time = f.optional("time_us");
    if (!time || !is_time_us(*time)) f.fail("time_us", time_range);
    const double time_us = time->get<double>();
    const auto& times = f.array("times_us");
    if (times.empty()) f.fail("times_us", "at least one per-iteration time");
    for (std::size_t k = 0; k < times.size(); ++k) {
      if (!is_time_us(times[k])) throw InputError(file, json_path(f.path_of("times_us"), k), time_range);
      const double sample = busbw * time_us / times[k].get<double>();
      // In range by the bounds above; kept as the test's own guard should a bound ever widen.
      if (!std::isfinite(sample) || (sample != 0 && !std::isnormal(sample)))
        throw InputError(file, json_path(f.path_of("times_us"), k),
                         "a time that keeps busbw_gbps × time_us / time a finite, normal number");
      e.busbw.push_back(sample);
    }
    e.key = Key{op, group, dtype, bytes, ranks, in_place};
    out.push_back(std::move(e));
  }
  return out;
}

// How a file's times were taken: the aggregation over ranks (config.average) and the timing
// mode (cpu; on cuda batched, blocking or graph). A version-1 file (no config.average, written
// before --average) took the slowest rank and, on CUDA, synchronised every iteration.
struct TimingKind {
  std::string average, mode;
  double min_sample_us = 0;  // a file written before --min-sample-us sampled every iteration
};

TimingKind timing_of(const nlohmann::json& doc, const std::string& file) {
  const bool cuda = doc.contains("env") && doc["env"].is_object() && doc["env"].value("backend", "") == "cuda";
  if (!doc.contains("config") || !doc["config"].is_object() || !doc["config"].contains("average"))
    return {"max", cuda ? "blocking" : "cpu"};
  Fields f(doc["config"], file, "/config");
  const std::optional<RankAggregate> how = parse_rank_aggregate(f.string("average"));
  if (!how) f.fail("average", "one of rank0, mean, min, max");
  // Within what bench coll accepts (--min-sample-us, -G), so that a graph_launches of 2^32 is not
  // read as 0 through an int.
  const double min_sample_us = f.number("min_sample_us", -1, 0);
  if (min_sample_us < 0 || min_sample_us > kMaxMinSampleUs)
    f.fail("min_sample_us", "microseconds " + range_text(0, kMaxMinSampleUs));
  return {to_string(*how),
          timing_mode(cuda ? Backend::cuda : Backend::cpu, cuda && f.boolean("blocking", false),
                      cuda ? static_cast<int>(f.integer_in("graph_launches", 0, kMaxIters, 0)) : 0),
          min_sample_us};
}

}  // namespace

double parse_tolerance(const std::string& text) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  const bool percent = end && *end == '%' && end[1] == '\0';
  if (text.empty() || end == text.c_str() || (!percent && *end != '\0'))
    throw UsageError("--tolerance: expected a percentage like 5% or a fraction like 0.05, got '" + text + "'");
  if (percent) v /= 100;
  if (!(v > 0 && v < 1)) throw UsageError("--tolerance: expected between 0% and 100% (exclusive), got '" + text + "'");
  return v;
}

std::vector<double> block_medians(const std::vector<double>& samples, int blocks) {
  const std::size_t n = samples.size();
  if (blocks < 1 || n < 2 * static_cast<std::size_t>(blocks)) return samples;
  const std::size_t size = n / static_cast<std::size_t>(blocks);
  std::vector<double> out;
  for (int b = 0; b < blocks; ++b) {
    const auto first = samples.begin() + static_cast<std::ptrdiff_t>(b * size);
    const auto last = b == blocks - 1 ? samples.end() : first + static_cast<std::ptrdiff_t>(size);
    out.push_back(median(std::vector<double>(first, last)));
  }
  return out;
}

SampleComparison compare_samples(const std::vector<double>& base, const std::vector<double>& cur,
                                 const RegressOptions& o) {
  SampleComparison c;
  c.base_median = median(base);
  c.current_median = median(cur);
  c.change = c.base_median > 0 ? c.current_median / c.base_median - 1 : 0;
  const auto b = block_medians(base, o.blocks), k = block_medians(cur, o.blocks);
  c.p_slower = mann_whitney(k, b).p_less;
  c.p_faster = mann_whitney(b, k).p_less;
  // log C(n+m, n) via lgamma: exact enough, and no overflow at 50 + 50 blocks.
  const double n = static_cast<double>(b.size()), m = static_cast<double>(k.size());
  c.min_p = std::exp(std::lgamma(n + 1) + std::lgamma(m + 1) - std::lgamma(n + m + 1));
  c.base_units = b.size();
  c.current_units = k.size();
  c.regression = c.change < -o.tolerance && c.p_slower < o.alpha;
  c.improvement = c.change > o.tolerance && c.p_faster < o.alpha;
  return c;
}

// The input files by their hashes (spec/provenance.hpp), or by their paths where a result
// written before the hashes records none; then the boundary, the backend and the rank count.
std::string run_differences(const nlohmann::json& base, const nlohmann::json& cur) {
  const json none = json::object();
  auto at = [&none](const json& o, const char* key) -> const json& {
    return o.is_object() && o.contains(key) && o[key].is_object() ? o[key] : none;
  };
  auto get = [](const json& o, const char* key) { return o.contains(key) ? o[key] : json(); };
  const json &be = at(base, "env"), &ce = at(cur, "env");
  std::string out = differing_inputs(be, ce);
  auto add = [&out](const std::string& what, const json& a, const json& b) {
    if (a.is_null() || b.is_null() || a == b) return;
    auto text = [](const json& x) {
      return !x.is_string() ? x.dump() : x.get<std::string>().empty() ? "none" : x.get<std::string>();
    };
    out += (out.empty() ? "" : "; ") + what + ": " + text(a) + " against " + text(b);
  };
  if (!be.contains("inputs") || !ce.contains("inputs")) {
    const json &bc = at(base, "config"), &cc = at(cur, "config");
    for (const char* role : {"cluster", "layout"}) add(role, get(bc, role), get(cc, role));
  }
  for (const char* key : {"emulation", "technology", "backend", "world_size"}) add(key, get(be, key), get(ce, key));
  return out;
}

RegressReport compare_runs(const nlohmann::json& baseline, const std::string& baseline_file,
                           const nlohmann::json& current, const std::string& current_file, const RegressOptions& o) {
  // Like with like: a mean over ranks is not the slowest rank's time, nor a batch a blocking loop.
  const TimingKind base_how = timing_of(baseline, baseline_file), cur_how = timing_of(current, current_file);
  if (base_how.average != cur_how.average)
    throw UsageError(baseline_file + " aggregates times over ranks as " + base_how.average + " (/config/average) but " +
                     current_file + " as " + cur_how.average + ": compare runs made with the same --average");
  if (base_how.mode != cur_how.mode)
    throw UsageError(baseline_file + " was timed " + base_how.mode +
                     " (/config/blocking, /config/graph_launches) but " + current_file + " " + cur_how.mode +
                     ": compare runs made with the same -z and -G");
  if (base_how.min_sample_us != cur_how.min_sample_us) {
    char base_text[32], cur_text[32];
    std::snprintf(base_text, sizeof base_text, "%g", base_how.min_sample_us);
    std::snprintf(cur_text, sizeof cur_text, "%g", cur_how.min_sample_us);
    throw UsageError(baseline_file + " takes samples of at least " + base_text + " us (/config/min_sample_us) but " +
                     current_file + " of " + cur_text +
                     " us: their spreads differ; compare runs made with the same --min-sample-us");
  }
  const auto base = read_entries(baseline, baseline_file);
  std::map<Key, std::vector<double>> cur;
  for (auto& e : read_entries(current, current_file)) cur[e.key] = std::move(e.busbw);
  RegressReport report;
  for (const auto& b : base) {
    RegressRow row;
    std::tie(row.op, row.group, row.dtype, row.bytes, row.ranks, row.in_place) = b.key;
    auto it = cur.find(b.key);
    if (it == cur.end()) {
      row.missing = true;
    } else {
      row.cmp = compare_samples(b.busbw, it->second, o);
      ++report.compared;
      if (row.cmp.min_p >= o.alpha) ++report.underpowered;
      if (row.cmp.regression) ++report.regressions;
    }
    report.rows.push_back(std::move(row));
  }
  if (report.compared == 0)
    throw UsageError("no (op, group, dtype, size, ranks, in place) in common between " + baseline_file + " and " +
                     current_file);
  report.differences = run_differences(baseline, current);
  return report;
}

std::string regress_table(const RegressReport& r, const RegressOptions& o) {
  std::string s;
  char buf[256];
  // The test's units as they were: a run of fewer than 2 x blocks samples per size is tested
  // sample by sample, not by block medians.
  std::size_t lo = 0, hi = 0;
  for (const auto& row : r.rows)
    if (!row.missing)
      for (std::size_t u : {row.cmp.base_units, row.cmp.current_units})
        lo = lo == 0 ? u : std::min(lo, u), hi = std::max(hi, u);
  const std::string units = lo == hi ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi);
  const bool blocked = lo == static_cast<std::size_t>(o.blocks) && hi == lo;
  std::snprintf(buf, sizeof buf,
                "# busbw medians of per-iteration samples; regression = drop > %.1f%% and Mann-Whitney p < %g over %s "
                "%s per size and run%s\n",
                o.tolerance * 100, o.alpha, units.c_str(), blocked ? "block medians" : "samples",
                blocked ? ""
                        : (" (" + std::to_string(o.blocks) + " block medians from " + std::to_string(2 * o.blocks) +
                           " samples on)")
                              .c_str());
  s += buf;
  if (!r.differences.empty()) s += "# the runs differ in what they ran on: " + r.differences + "\n";
  std::snprintf(buf, sizeof buf, "#%-15s %-14s %-9s %12s %5s %5s %12s %12s %8s %9s  %s\n", "op", "group", "dtype",
                "bytes", "ranks", "place", "base_busbw", "cur_busbw", "change", "p_slower", "verdict");
  s += buf;
  for (const auto& row : r.rows) {
    const char* verdict = row.missing           ? "missing in current"
                          : row.cmp.regression  ? "REGRESSION"
                          : row.cmp.improvement ? "faster"
                                                : "ok";
    std::snprintf(buf, sizeof buf, " %-15s %-14s %-9s %12llu %5d %5s %12.4f %12.4f %7.1f%% %9.2g  %s\n", row.op.c_str(),
                  row.group.c_str(), row.dtype.c_str(), static_cast<unsigned long long>(row.bytes), row.ranks,
                  row.in_place ? "in" : "out", row.cmp.base_median, row.cmp.current_median, row.cmp.change * 100,
                  row.cmp.p_slower, verdict);
    s += buf;
  }
  return s;
}

}  // namespace sax::harness
