#include "calibration/sweep.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "calibration/fit.hpp"
#include "collectives/groups.hpp"
#include "harness/coll_engine.hpp"
#include "harness/coll_plan.hpp"
#ifdef SAX_HAVE_KERNEL_BENCH
#include "harness/kernel_bench.hpp"
#include "harness/op_runner.hpp"
#include "kernels/ops.hpp"
#endif
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "harness/watchdog.hpp"
#include "sax_version.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"
#include "workload/layer_ops.hpp"

namespace sax::calibration {

namespace {

// The group kinds a sweep measures, each reaching the link class the cluster says.
constexpr const char* kKinds[] = {"cross_building", "intra_building"};
// Sizes (the largest ones) measured with every cross-building group at once, and the op.
constexpr std::size_t kSharingSizes = 3;
constexpr CollOp kSharingOp = CollOp::all_reduce;

std::string hex(std::uint64_t h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string file_hash(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return hex(harness::text_hash(ss.str()));
}

std::string duration_text(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  return buf;
}

// One point to measure: a group kind, an op, a size, alone or with every group of the kind.
struct Task {
  std::string kind;
  CollOp op = CollOp::all_reduce;
  std::uint64_t bytes = 0;
  bool together = false;
  double weight = 0;  // the datasheet's time for it (s), for the ETA
  std::string key() const {
    return kind + "/" + to_string(op) + "/" + std::to_string(bytes) + (together ? "/together" : "/alone");
  }
};

std::vector<CollOp> parse_ops(const std::string& text) {
  std::vector<CollOp> ops;
  std::string rest = text;
  while (true) {
    const auto comma = rest.find(',');
    const std::string name = rest.substr(0, comma);
    if (name == "all") {
      ops.assign(std::begin(kPricedCollOps), std::end(kPricedCollOps));
    } else {
      const auto op = parse_coll_op(name);
      if (!op || std::find(std::begin(kPricedCollOps), std::end(kPricedCollOps), *op) == std::end(kPricedCollOps)) {
        std::string names;
        for (CollOp o : kPricedCollOps) names += std::string(names.empty() ? "" : ", ") + to_string(o);
        throw UsageError("--ops: '" + name + "' is not an op the cost model prices (" + names + ", or all)");
      }
      ops.push_back(*op);
    }
    if (comma == std::string::npos) break;
    rest = rest.substr(comma + 1);
  }
  return ops;
}

void check_point(const json& p, const std::string& what, const std::string& at);

// A file this process alone uses while it runs: opened (created if absent) without following a
// link, and held by an exclusive flock, so that another process asking for it is refused (a
// killed launcher's sweep still running beside its resumption would be two writers). The lock is
// on the file still at `file` (one unlinked or replaced meanwhile is opened again). A `removed`
// file (a lock file) is unlinked when let go, as is a file it created that is still empty.
class HeldFile {
 public:
  // Errors name `named` (the file the user gave, where `file` is a lock file beside it).
  HeldFile(const std::string& file, const std::string& named, const std::string& what, bool removed)
      : file_(file), removed_(removed) {
    for (;;) {
      const bool existed = ::access(file.c_str(), F_OK) == 0;
      fd_ = ::open(file.c_str(), O_RDWR | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0666);
      if (fd_ < 0)
        throw InputError(named, "", what + (errno == ELOOP ? " (it is a symbolic link)" : " (" + errno_text() + ")"));
      created_ = !existed;
      struct stat held {};
      struct stat there {};
      if (::fstat(fd_, &held) != 0 || !S_ISREG(held.st_mode)) {
        let_go(false);
        throw InputError(named, "", what + " (it is not a regular file)");
      }
      if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        const bool busy = errno == EWOULDBLOCK;
        const std::string why = errno_text();
        let_go(false);
        throw InputError(named, "",
                         what + (busy ? " (another sax process holds it: a sweep still running?)"
                                      : " (cannot lock it: " + why + ")"));
      }
      if (::lstat(file.c_str(), &there) == 0 && there.st_dev == held.st_dev && there.st_ino == held.st_ino) return;
      let_go(false);  // unlinked or replaced between open and lock: take the one there now
    }
  }
  HeldFile(const HeldFile&) = delete;
  HeldFile& operator=(const HeldFile&) = delete;
  ~HeldFile() { let_go(true); }
  int fd() const { return fd_; }

 private:
  static std::string errno_text() { return std::strerror(errno); }
  void let_go(bool done) {
    if (fd_ < 0) return;
    struct stat st {};
    if (done && (removed_ || (created_ && ::fstat(fd_, &st) == 0 && st.st_size == 0))) ::unlink(file_.c_str());
    ::close(fd_);
    fd_ = -1;
  }
  std::string file_;
  bool removed_ = false, created_ = false;
  int fd_ = -1;
};

void write_all(int fd, const std::string& text, const std::string& file) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw RunError("cannot append to " + file + ": " + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

// The whole of a held file, or an InputError: a file that cannot be read whole (too big for the
// limit every JSON input has, a read error, no memory) must never pass for an empty one, which
// the sweep would then cut and overwrite.
std::string read_whole(int fd, const std::string& file) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    throw InputError(file, "", std::string("a readable points file (") + std::strerror(errno) + ")");
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxInputFileBytes)
    throw InputError(file, "",
                     "a points file of at most " + std::to_string(kMaxInputFileBytes >> 20) + " MiB (it has " +
                         std::to_string(static_cast<std::uintmax_t>(st.st_size) >> 20) + " MiB)");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + done, text.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError(file, "", std::string("a readable points file (") + std::strerror(errno) + ")");
    if (n == 0) break;  // shorter than it was: what is there
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  return text;
}

}  // namespace

std::optional<PointsFile> parse_points_file(const std::string& text, const std::string& file) {
  PointsFile f;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = text.find('\n', at);
    const std::string at_line = "/" + std::to_string(f.whole == 0 ? 0 : f.points.size() + 1);
    if (end == std::string::npos) {
      if (f.whole == 0)  // not even a whole header
        throw InputError(file, at_line, "the header of a sax calibrate points file, ending in a newline");
      break;  // the last line, cut short by an interrupted append: measured again
    }
    json j;
    try {
      j = parse_json_text(text.substr(at, end - at), file);
    } catch (const InputError& e) {
      throw InputError(
          file, at_line + e.path(),
          "one JSON object per line, after the header of a sax calibrate points file (" + e.expected() + ")");
    }
    if (f.whole == 0) {
      if (!j.is_object() || !j.contains("sax_calibrate_points") || !j.contains("args") || !j["args"].is_string() ||
          !j.contains("cluster_hash") || !j["cluster_hash"].is_string())
        throw InputError(file, "/0", "the header of a sax calibrate points file");
      f.header = j;
    } else {
      check_point(j, file, at_line);
      f.points.push_back(std::move(j));
    }
    at = end + 1;
    f.whole = at;
  }
  if (f.whole == 0) return std::nullopt;  // empty
  return f;
}

namespace {

// One point's fields, as fit_sweep needs them: an InputError naming `what` and the point.
void check_point(const json& p, const std::string& what, const std::string& at) {
  if (!p.is_object()) throw InputError(what, at, "a point object");
  if (!p.contains("key") || !p["key"].is_string()) throw InputError(what, at + "/key", "the point's key");
  const std::string kind = p.contains("kind") && p["kind"].is_string() ? p["kind"].get<std::string>() : "link";
  auto positive = [&](const char* k) {
    if (!p.contains(k) || !p[k].is_number() || !(p[k].get<double>() > 0))
      throw InputError(what, at + "/" + k, "a positive number");
  };
  auto whole = [&](const char* k, std::int64_t min, std::int64_t max) {  // a count, however the JSON spells it
    const double x = p.contains(k) && p[k].is_number() ? p[k].get<double>() : -1.0;
    if (!(x >= static_cast<double>(min) && x <= static_cast<double>(max) && x == std::floor(x)))
      throw InputError(what, at + "/" + k, "an integer between " + std::to_string(min) + " and " + std::to_string(max));
  };

  if (kind == "overlap") {
    positive("alone_us"), positive("time_us");
    if (p.contains("comm_us")) positive("comm_us");
  } else if (kind == "compute") {
    if (!p.contains("compute") || !p["compute"].is_string()) throw InputError(what, at + "/compute", "a name");
    for (const char* k : {"flops", "bytes", "peak_flops", "hbm_bytes_per_s"})
      if (!p.contains(k) || !p[k].is_number() || !(p[k].get<double>() >= 0))
        throw InputError(what, at + "/" + k, "a number >= 0");
    positive("time_us");
    if (p.contains("quantization") &&
        !(p["quantization"].is_number() && p["quantization"].get<double>() > 0 && p["quantization"].get<double>() <= 1))
      throw InputError(what, at + "/quantization", "a number in (0, 1] (the useful fraction of the work scheduled)");
  } else if (kind == "link") {
    for (const char* k : {"group", "link_class", "op"})
      if (!p.contains(k) || !p[k].is_string()) throw InputError(what, at + "/" + k, "a name");
    // Counts and sizes are read as the integers they are used as: 1.5 ranks or 4294967300 ranks
    // (4 once narrowed to int) are refused, not truncated.
    for (const char* k : {"ranks", "groups"}) whole(k, 1, INT32_MAX);
    whole("bytes", 0, kMaxSize);
    positive("time_us");
    if (!p.contains("together") || !p["together"].is_boolean())
      throw InputError(what, at + "/together", "true or false");
    if (!parse_link_class(p["link_class"].get<std::string>()))
      throw InputError(what, at + "/link_class", "intra_node, intra_building or cross_building");
    if (!parse_coll_op(p["op"].get<std::string>())) throw InputError(what, at + "/op", "a collective op");
  } else {
    throw InputError(what, at + "/kind", "link, compute or overlap");
  }
}

std::string default_points_file(const SweepArgs& a) {
  return a.points_file.empty() ? a.out + ".points.jsonl" : a.points_file;
}

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

// Compute points: each op of a model's layer slice at plausible layouts, timed on every rank at
// once, kComputeIters times after kComputeWarmup (median per rank, mean over ranks). Each timing
// covers back-to-back repetitions of the op for at least kComputeWindowUs, so that where ranks
// share cores (the 4-rank testbed on 2) it is the rank's share of the host over many scheduler
// slices — what a step's ops get — and not one op that happened to run unpreempted on a whole
// core (single short ops timed alone came out about 2x faster than the same ops in a step).
constexpr int kComputeIters = 5, kComputeWarmup = 1;
constexpr double kComputeWindowUs = 20000;
constexpr int kOverlapRepetitions = 3;
constexpr double kOverlapWeight = 0.1;  // s, for the ETA

struct ComputeTask {
  std::string key;
  std::size_t model = 0;
  workload::Op op;
  double weight = 0;  // the datasheet's time for it (s), for the ETA
};

#ifdef SAX_HAVE_KERNEL_BENCH
// The tile and wave quantization of a measured op on the device's SMs, as the cost model has it
// (workload::quantization: 1 but for GEMMs and attention products on a device with an SM count).
double quantization(const workload::Op& op, int sm_count) {
  const double batch = op.compute == workload::ComputeKind::product ? op.count * op.heads : op.count;
  return workload::quantization(op.compute, op.m, op.n, op.k, batch, workload::part_of(op.phase), sm_count);
}

const char* compute_kind_name(workload::ComputeKind k) {
  switch (k) {
    case workload::ComputeKind::gemm:
      return "gemm";
    case workload::ComputeKind::product:
      return "product";
    case workload::ComputeKind::attention:
      return "attention";
    case workload::ComputeKind::memory:
      return "memory";
  }
  return "?";
}

// TP 1, 2, 4, 8 as far as a node holds them and the world divides, micro-batches 1 and 2, no
// pipeline: the layouts whose valid shapes the sweep times; each op shape once over them.
std::vector<ComputeTask> compute_tasks(const Cluster& c, const std::vector<Model>& models, std::int64_t world) {
  std::vector<ComputeTask> out;
  std::set<std::string> seen;
  for (std::size_t mi = 0; mi < models.size(); ++mi) {
    const Model& m = models[mi];
    const double peak = c.device.peak_tflops_for(m.dtype) * 1e12, hbm = c.device.hbm_bandwidth_gbps * 1e9;
    for (std::int64_t tp : {1, 2, 4, 8}) {
      if (tp > c.devices_per_node || world % tp != 0) continue;
      for (std::int64_t mbs : {1, 2}) {
        Layout l;
        l.tensor_model_parallel_size = tp;
        l.micro_batch_size = mbs;
        l.sequence_parallel = tp > 1;
        try {
          validate_layout(l, m, c, "calibrate");
        } catch (const std::exception&) {
          continue;  // not a layout of this model on this cluster
        }
        for (const workload::Op& op : harness::layer_slice_ops(workload::build(c, m, l, 0), m)) {
          const std::string key =
              "compute/" + m.name + "/" + op.name + "/" + workload::to_string(op.phase) + "/" + harness::shape_text(op);
          if (!seen.insert(key).second) continue;
          const double t = std::max(
              {peak > 0 ? op.flops / peak : 0.0, hbm > 0 ? (op.bytes_read + op.bytes_written) / hbm : 0.0, 1e-4});
          out.push_back({key, mi, op, kComputeIters * std::max(t, kComputeWindowUs * 1e-6) + (kComputeWarmup + 2) * t});
        }
      }
    }
  }
  return out;
}
#endif

}  // namespace

std::string SweepArgs::text() const {
  std::string t;
  for (const std::string* s : {&cluster_file, &min_bytes, &max_bytes, &step_factor, &iters, &warmup, &ops, &backend})
    t += *s + '\x1f';
  for (const auto& m : model_files) t += "model " + m + '\x1f';
  return t;
}

Calibration fit_sweep(const json& points, const std::string& what, std::string* table) {
  LinkPoints fitted;
  std::map<std::uint64_t, double> cross_alone, cross_together;
  int cross_groups = 0;
  std::vector<json> compute;
  std::vector<double> overlap;  // compute's slowdown beside a collective, per repetition
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
        overlap.push_back((w - std::max(a, c)) / std::min(a, c));
      } else {
        overlap.push_back(w / a - 1);
      }
      continue;
    }
    if (kind == "compute") {
      compute.push_back(p);
      continue;
    }
    const LinkClass lc = *parse_link_class(p.at("link_class").get<std::string>());
    const auto op = parse_coll_op(p.at("op").get<std::string>());
    CollPoint c{*op, p.at("ranks").get<int>(), p.at("bytes").get<double>(), p.at("time_us").get<double>()};
    const bool together = p.at("together").get<bool>();
    if (together) fitted[{lc, *op}].push_back(c);
    if (lc == LinkClass::cross_building && *op == kSharingOp && p.at("groups").get<int>() > 1) {
      (together ? cross_together : cross_alone)[p.at("bytes").get<std::uint64_t>()] = c.time_us;
      cross_groups = p.at("groups").get<int>();
    }
  }
  Calibration cal;
  char line[512];
  std::string t;
  t += fit_links(
      fitted, [&](LinkClass lc, CollOp op) { return what + " (" + link_class_name(lc) + " " + to_string(op) + ")"; },
      cal);
  // The boundary's sharing, as the cost model has it (explorer/cost_model.cpp): the groups put
  // a fraction f of a building's devices on it, and the per-device bandwidth shrinks by
  // max(1, oversubscription × f). All G groups at once: f = 1; one alone: f = 1/G. So the slowdown
  // together / alone is the oversubscription where it lies in [1, G] (G means "G or more"), and the
  // fits above, made with every group at once, hold it: the link's own β is theirs / it.
  std::vector<double> ratios, alone_us, together_us;
  for (const auto& [bytes, tt] : cross_together)
    if (auto it = cross_alone.find(bytes); it != cross_alone.end() && it->second > 0)
      ratios.push_back(tt / it->second), alone_us.push_back(it->second), together_us.push_back(tt);
  if (!ratios.empty()) {
    Oversubscription o;
    const double s = harness::median(ratios);
    o.value = std::clamp(s, 1.0, static_cast<double>(cross_groups));
    o.alone_us = harness::median(alone_us);
    o.together_us = harness::median(together_us);
    o.samples = static_cast<std::int64_t>(ratios.size());
    cal.cross_oversubscription = o;
    for (auto& ab : cal.links[static_cast<int>(LinkClass::cross_building)])
      if (ab) ab->beta_ns_per_byte /= o.value;
    std::snprintf(line, sizeof line,
                  "# cross-building boundary: one of %d groups alone takes 1/%.2f of the time of all at once (%s at "
                  "the %zu largest sizes): oversubscription %.2f%s; a device's own bandwidth, unshared, is the "
                  "busbw above x %.2f\n",
                  cross_groups, s, to_string(kSharingOp), ratios.size(), o.value,
                  s >= cross_groups ? " (or more: all groups at once cannot tell more)" : "", o.value);
    t += line;
  }
  fit_compute(compute, cal, t);
  if (!overlap.empty()) {
    const double m = harness::median(overlap);
    cal.overlap_slowdown = std::max(0.0, m);
    std::snprintf(line, sizeof line,
                  "# overlap slowdown %.1f%% (median of %zu repetitions, %.1f%% to %.1f%%): of the time a collective "
                  "and compute overlap, this share is still paid (0: hidden, 100: nothing overlaps)\n",
                  m * 100, overlap.size(), *std::min_element(overlap.begin(), overlap.end()) * 100,
                  *std::max_element(overlap.begin(), overlap.end()) * 100);
    t += line;
  }
  if (table) *table = t;
  return cal;
}

void calibrate_cluster(harness::Job& job, const SweepArgs& a, const std::vector<std::string>& extras,
                       const harness::ResultWriter& writer) {
  using namespace harness;
  const std::string points_file = default_points_file(a);
  std::optional<Cluster> cluster;
  std::vector<CollOp> ops;
  std::vector<std::uint64_t> sizes;
  std::vector<Task> tasks;
  std::vector<json> have;  // points measured before (rank 0)
  std::vector<Model> models;
  std::vector<ComputeTask> compute;
  std::map<std::string, coll::GroupSet> kinds;
  std::map<std::string, CollBenchPlan> plans;  // per kind
  Backend backend = Backend::cpu;
  int iters = 0, warmup = 0;
  std::string cluster_hash;
  std::optional<HeldFile> out_lock, points;  // rank 0's, for the sweep's whole life
  std::vector<std::string> hosts;
  json all = json::array();  // every point, measured before and now (rank 0)
  std::size_t measured_now = 0;
  job.agree(a.text() + '\x1f' + a.out + '\x1f' + points_file + '\x1f' + a.timeout_s, [&] {
    if (!extras.empty()) throw UsageError("calibrate: unexpected argument '" + extras.front() + "'");
    if (a.cluster_file.empty()) throw UsageError("calibrate: --cluster is required (the testbed's cluster file)");
    if (a.out.empty()) throw UsageError("calibrate: --out is required (the calibration file to write)");
    cluster = load_cluster(a.cluster_file);
    cluster_hash = file_hash(a.cluster_file);
    ops = parse_ops(a.ops);
    // The sizes, iterations and the rest as bench coll validates them.
    CollBenchArgs b;
    b.op = to_string(ops.front());
    b.min_bytes = a.min_bytes, b.max_bytes = a.max_bytes, b.step_factor = a.step_factor;
    b.iters = a.iters, b.warmup = a.warmup, b.backend = a.backend, b.timeout_s = a.timeout_s;
    b.cluster_file = a.cluster_file;
    b.group = kKinds[0];
    coll::GroupSource src;
    src.cluster = &*cluster;
    src.cluster_file = a.cluster_file;
    src.allow_single = true;
    for (const char* kind : kKinds) {
      coll::GroupSet set = coll::resolve_group(kind, job.size(), src);
      std::size_t smallest = SIZE_MAX;
      for (const auto& g : set.groups) smallest = std::min(smallest, g.size());
      if (smallest >= 2) kinds[kind] = set;
    }
    if (kinds.empty())
      throw UsageError("calibrate: cluster " + a.cluster_file +
                       " has no group of two or more ranks inside a building or across buildings to measure");
    // One plan per kind, as bench coll would make it (the cluster read once); each point sets its
    // op, size and how many groups run.
    for (const auto& [kind, set] : kinds) {
      b.group = kind;
      plans.emplace(kind,
                    plan_coll_bench(b, job.size(), [&job](const std::string& x) { return job.choose_backend(x); }));
    }
    const CollBenchPlan& plan = plans.begin()->second;
    check_emulation(&*cluster);
    backend = plan.config.backend;
    iters = plan.config.iters, warmup = plan.config.warmup;
    sizes = sweep_sizes(plan.config.min_bytes, plan.config.max_bytes, plan.config.step_factor);
    if (sizes.size() < 2)
      throw UsageError("calibrate: -b " + a.min_bytes + " -e " + a.max_bytes +
                       " gives one size; a latency and a bandwidth need at least two");
    for (std::uint64_t bytes : sizes)
      for (CollOp op : ops)
        if (splits_by_rank(op))
          for (const auto& [kind, set] : kinds)
            for (const auto& g : set.groups)
              if (bytes % (4u * g.size()) != 0)
                throw UsageError("calibrate: size " + std::to_string(bytes) + " B does not split into " +
                                 std::to_string(g.size()) + " whole float32 blocks (" + to_string(op) + " on " + kind +
                                 " groups)");
    for (const auto& f : a.model_files) models.push_back(load_model(f));
    if (!models.empty()) {
#ifdef SAX_HAVE_KERNEL_BENCH
      compute = compute_tasks(*cluster, models, job.size());
#else
      throw UsageError("calibrate --model: this sax was built without OpenBLAS (the CPU layer ops)");
#endif
    }
    if (job.rank() == 0) {
      writer.check(a.out);
      // Rank 0 alone reads the file: whatever goes wrong is said as bad input, so that every
      // rank leaves agree() together. Both files are held until the sweep ends: a second sweep on
      // either is refused instead of writing beside this one.
      const std::filesystem::path out(a.out);
      const std::string lock = (out.parent_path() / ("." + out.filename().string() + ".lock")).string();
      out_lock.emplace(lock, a.out, "an output no other process is writing (its lock file " + lock + ")", true);
      points.emplace(points_file, points_file, "a points file no other process is using", false);
      try {
        if (auto f = parse_points_file(read_whole(points->fd(), points_file), points_file)) {
          if (f->header["args"].get<std::string>() != hex(text_hash(a.text())) ||
              f->header["cluster_hash"].get<std::string>() != cluster_hash)
            throw UsageError("calibrate: " + points_file +
                             " holds points of another sweep (other arguments or another cluster file): pass the "
                             "same arguments to resume it, or --points another file");
          if (::ftruncate(points->fd(), static_cast<off_t>(f->whole)) != 0)  // the line cut short, if any
            throw InputError(points_file, "",
                             std::string("a points file this process can cut back (") + std::strerror(errno) + ")");
          have = std::move(f->points);
        }
      } catch (const UsageError&) {
        throw;
      } catch (const InputError&) {
        throw;
      } catch (const std::exception& e) {
        throw InputError(points_file, "",
                         std::string("a points file this process can read and append to (") + e.what() + ")");
      }
    }
  });

  // The tasks, in order: per kind (cross-building first: the map's order), op and size, every group of the kind at
  // once, as a step runs them; then one cross-building group alone at the largest sizes, for the
  // boundary's sharing. Each weighted by the datasheet's time, for the ETA.
  for (const auto& [kind, set] : kinds) {
    const Link& link = cluster->link(*set.link_class);
    const bool several = set.groups.size() > 1;
    for (CollOp op : ops)
      for (std::uint64_t bytes : sizes) {
        const RingAlgorithm ring = ring_algorithm(op, static_cast<double>(set.groups.front().size()));
        const double one = ring.steps * link.latency_us * 1e-6 +
                           ring.bus_factor * static_cast<double>(bytes) / (link.bandwidth_gbps * 1e9);
        tasks.push_back({kind, op, bytes, true, (iters + warmup + 2) * one});
        if (kind == std::string("cross_building") && several && op == kSharingOp &&
            bytes >= sizes[sizes.size() - std::min(sizes.size(), kSharingSizes)])
          tasks.push_back({kind, op, bytes, false, (iters + warmup + 2) * one});
      }
  }
  std::set<std::string> done_keys;
  {
    std::string mine;
    for (const auto& p : have) mine += p["key"].get<std::string>() + "\n";
    const std::string all = job.all_gather(mine)[0];  // rank 0's: the others read no file
    std::istringstream in(all);
    for (std::string k; std::getline(in, k);) done_keys.insert(k);
  }
  // The overlap slowdown's points: the largest GEMM of the first model beside a cross-building
  // all-reduce, kOverlapRepetitions times (about 0.1 s each).
  const ComputeTask* big = nullptr;
  std::vector<std::string> overlap_keys;
#ifdef SAX_HAVE_KERNEL_BENCH
  for (const ComputeTask& ct : compute)
    if (ct.model == 0 && ct.op.compute == workload::ComputeKind::gemm && (!big || ct.op.flops > big->op.flops))
      big = &ct;
  if (big && kinds.count("cross_building"))
    for (int rep = 0; rep < kOverlapRepetitions; ++rep)
      overlap_keys.push_back("overlap/" + models[0].name + "/" + big->op.name + "/" + std::to_string(rep));
  else
    big = nullptr;
#endif
  double left_weight = 0;
  std::size_t left = 0;
  for (const auto& t : tasks)
    if (!done_keys.count(t.key())) left_weight += t.weight, ++left;
  for (const auto& t : compute)
    if (!done_keys.count(t.key)) left_weight += t.weight, ++left;
  for (const auto& k : overlap_keys)
    if (!done_keys.count(k)) left_weight += kOverlapWeight, ++left;
  const std::size_t total = tasks.size() + compute.size() + overlap_keys.size();

  try {
    Watchdog watchdog(std::strtod(a.timeout_s.c_str(), nullptr), job.rank());
    auto device = job.make_device(backend);
    auto factory = job.communicators(*device, &*cluster);
    hosts = job.all_gather(job.processor_name());
    if (job.rank() == 0 && have.empty()) {  // a new file, or one with a header only
      if (::ftruncate(points->fd(), 0) != 0) throw RunError("cannot cut back " + points_file);
      write_all(points->fd(),
                json{{"sax_calibrate_points", 1},
                     {"args", hex(text_hash(a.text()))},
                     {"cluster", a.cluster_file},
                     {"cluster_hash", cluster_hash}}
                        .dump() +
                    "\n",
                points_file);
    }
    if (job.rank() == 0) {
      std::fprintf(stderr,
                   "calibrate: %zu points (%zu measured before, %zu to measure) on %s; points go to %s as measured\n",
                   total, total - left, left, a.cluster_file.c_str(), points_file.c_str());
    }
    const auto start = std::chrono::steady_clock::now();
    double done_weight = 0;
    std::size_t measured = 0;
    std::vector<json> fresh_points;
    // One point measured: kept, appended to the file, and a progress line with the ETA.
    auto record = [&](const json& p, double weight, const std::string& what) {
      fresh_points.push_back(p);
      done_weight += weight;
      ++measured;
      if (job.rank() != 0) return;
      write_all(points->fd(), p.dump() + "\n", points_file);
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double eta = done_weight > 0 ? elapsed * (left_weight - done_weight) / done_weight : 0;
      std::fprintf(stderr, "calibrate: [%zu/%zu] %-60s %10.1f us   %s elapsed, ETA %s\n", measured, left, what.c_str(),
                   p["time_us"].get<double>(), duration_text(elapsed).c_str(),
                   duration_text(std::max(0.0, eta)).c_str());
    };
    for (const auto& [kind, set] : kinds) {
      bool any = false;
      for (const auto& t : tasks) any = any || (t.kind == kind && !done_keys.count(t.key()));
      if (!any) continue;
      coll::GroupCommunicator group = factory->make(set);
      for (const auto& t : tasks) {
        if (t.kind != kind || done_keys.count(t.key())) continue;
        CollBenchPlan plan = plans.at(kind);
        plan.config.ops = {t.op};
        plan.config.min_bytes = plan.config.max_bytes = t.bytes;
        plan.config.groups_at_once = t.together ? 0 : 1;
        const auto results = run_coll_sweep(plan, *group.comm, *device, job, &watchdog, [](const CollResult&) {});
        const CollResult& r = results.front();
        const json p = {
            {"key", t.key()},         {"group", kind},      {"link_class", link_class_name(*set.link_class)},
            {"op", to_string(t.op)},  {"ranks", r.ranks},   {"groups", set.groups.size()},
            {"together", t.together}, {"bytes", t.bytes},   {"time_us", r.time_us},
            {"p50_us", r.p50_us},     {"p99_us", r.p99_us}, {"cv", r.cv},
            {"iters", iters},         {"path", r.path}};
        char what[96];
        std::snprintf(what, sizeof what, "%-14s %-14s %9s B %s", kind.c_str(), to_string(t.op),
                      format_bytes(t.bytes).c_str(), t.together ? "together" : "alone");
        record(p, t.weight, what);
      }
      group.comm.reset();
    }
#ifdef SAX_HAVE_KERNEL_BENCH
    std::unique_ptr<kernels::Ops> kops;
    const Stream stream = device->compute_stream();
    for (const ComputeTask& ct : compute) {
      if (done_keys.count(ct.key)) continue;
      if (!kops) kops = kernels::make_ops(*device);
      watchdog.progress(ct.key);
      const Model& m = models[ct.model];
      OpRunnerOptions options;
      if (m.num_experts > 0) options.local_experts = m.num_experts;
      OpRunner r(m, ct.op, *device, *kops, options);
      r.allocate();
      for (int w = 0; w < kComputeWarmup; ++w) r.run();
      device->synchronize(stream);
      auto t0 = device->make_event(true), t1 = device->make_event(true);
      // Repetitions per timing: enough for the window on the slowest rank, the same on every rank.
      t0->record(stream);
      r.run();
      t1->record(stream);
      t1->synchronize();
      const double one_us = job.aggregate(t1->elapsed_us(*t0), RankAggregate::max);
      const int reps = static_cast<int>(std::clamp(std::ceil(kComputeWindowUs / std::max(one_us, 1.0)), 1.0, 1000.0));
      job.barrier();  // every rank computes at once, as in a step
      std::vector<double> us;
      kernels::Traffic traffic;
      for (int it = 0; it < kComputeIters; ++it) {
        t0->record(stream);
        for (int k = 0; k < reps; ++k) traffic = r.run();
        t1->record(stream);
        t1->synchronize();
        us.push_back(t1->elapsed_us(*t0) / reps);
      }
      r.release();
      const double time_us = job.aggregate(median(us), RankAggregate::mean);
      const json p = {{"key", ct.key},
                      {"kind", "compute"},
                      {"model", m.name},
                      {"op", ct.op.name},
                      {"compute", compute_kind_name(ct.op.compute)},
                      {"phase", workload::to_string(ct.op.phase)},
                      {"shape", shape_text(ct.op)},
                      {"flops", ct.op.flops},
                      {"m", ct.op.m},
                      {"n", ct.op.n},
                      {"k", ct.op.k},
                      {"count", ct.op.count},
                      {"heads", ct.op.heads},
                      {"sm_count", cluster->device.sm_count},
                      {"quantization", quantization(ct.op, cluster->device.sm_count)},
                      {"bytes", traffic.read + traffic.written},
                      {"time_us", time_us},
                      {"peak_flops", cluster->device.peak_tflops_for(m.dtype) * 1e12},
                      {"hbm_bytes_per_s", cluster->device.hbm_bandwidth_gbps * 1e9}};
      record(p, ct.weight,
             "compute " + m.name + " " + ct.op.name + " " + workload::to_string(ct.op.phase) + " " + shape_text(ct.op));
    }
    // The overlap slowdown, as the cost model's overlap term has it (terms::overlap_time: comm and
    // compute together take max(comm, compute) + slowdown·min(comm, compute)): an 8 MiB all-reduce
    // on the cross-building groups alone (C), the largest GEMM of the first model repeated for
    // about as long alone (A), and the all-reduce posted before the same GEMMs and tested between
    // them as a step's executor does, then waited for (W): slowdown = (W − max(A, C)) / min(A, C).
    // It is 0 when the transfer hides entirely and the GEMMs run at full speed, 1 when nothing
    // overlaps (an MPI library that moves a message only inside MPI calls), and above where
    // both slow each other.
    if (big) {
      if (!kops) kops = kernels::make_ops(*device);
      const Model& m = models[0];
      OpRunnerOptions options;
      if (m.num_experts > 0) options.local_experts = m.num_experts;
      OpRunner r(m, big->op, *device, *kops, options);
      r.allocate();
      coll::GroupCommunicator group = factory->make(kinds.at("cross_building"));
      const std::size_t count = (8u << 20) / 4;
      auto send = device->allocate(count * 4), recv = device->allocate(count * 4);
      auto t0 = device->make_event(true), t1 = device->make_event(true);
      auto all_reduce = [&] {
        return group.comm->all_reduce(send->data(), recv->data(), count, DType::fp32, coll::Mode::async);
      };
      // Times `body` on every rank at once: the mean over ranks.
      auto timed = [&](const auto& body) {
        job.barrier();
        t0->record(stream);
        body();
        t1->record(stream);
        t1->synchronize();
        return job.aggregate(t1->elapsed_us(*t0), RankAggregate::mean);
      };
      all_reduce().wait();  // warm the path
      const double one_us = timed([&] { r.run(); });
      for (const std::string& key : overlap_keys) {
        if (done_keys.count(key)) continue;
        watchdog.progress(key);
        const double comm = timed([&] { all_reduce().wait(); });
        // As many GEMMs as take about the all-reduce's time: the same count on every rank, as
        // timed() gives every rank the same mean.
        const int reps = static_cast<int>(std::clamp(std::round(comm / std::max(one_us, 1.0)), 1.0, 1000.0));
        const double alone = timed([&] {
          for (int i = 0; i < reps; ++i) r.run();
        });
        const double together = timed([&] {
          coll::Handle h = all_reduce();
          for (int i = 0; i < reps; ++i) {
            h.test();
            r.run();
          }
          h.wait();
        });
        const json p = {{"key", key},
                        {"kind", "overlap"},
                        {"model", m.name},
                        {"op", big->op.name},
                        {"shape", shape_text(big->op)},
                        {"repetitions", reps},
                        {"alone_us", alone},
                        {"comm_us", comm},
                        {"time_us", together},
                        {"collective", "all_reduce 8 MiB cross_building"}};
        record(p, kOverlapWeight,
               "overlap " + big->op.name + " x" + std::to_string(reps) + " with an all-reduce in flight");
      }
      r.release();
      group.comm.reset();
    }
#endif
    if (job.rank() == 0) {
      for (const auto& p : have) all.push_back(p);
      for (const auto& p : fresh_points) all.push_back(p);
    }
    measured_now = measured;
  } catch (const std::exception& e) {
    job.abort(e);
  }
  // The fits, and the calibration they make read back as every command reads it: points whose
  // fits it would refuse (a time of 1e300 µs, an r² that is not a number) exit 2 on every rank,
  // naming the points file, and nothing is written.
  Calibration cal;
  std::string table;
  job.agree(a.text(), [&] {
    if (job.rank() != 0) return;
    cal = fit_sweep(all, points_file, &table);
    cal.provenance.cluster = a.cluster_file;
    cal.provenance.cluster_hash = cluster_hash;
    cal.provenance.backend = backend;
    cal.provenance.emulation = emulation_text();
    char when[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    cal.provenance.date = when;
    cal.provenance.tool = "sax calibrate --cluster " + a.cluster_file + " -b " + a.min_bytes + " -e " + a.max_bytes +
                          " -f " + a.step_factor + " -n " + a.iters + " -w " + a.warmup + " --ops " + a.ops;
    for (const auto& f : a.model_files) cal.provenance.tool += " --model " + f;
    cal.provenance.sax_version = kVersion;
    cal.provenance.library = job.mpi_library();
    const std::set<std::string> distinct(hosts.begin(), hosts.end());
    cal.provenance.hosts.assign(distinct.begin(), distinct.end());
    cal.points = all;
    check_readable(cal, points_file);
  });
  try {
    if (job.rank() == 0) {
      std::cout << "# sax calibrate: " << job.size() << " ranks, cluster " << a.cluster_file << ", backend "
                << to_string(backend) << ", emulation " << cal.provenance.emulation << "; " << all.size() << " points ("
                << measured_now << " measured now)\n"
                << "# time = steps(op, n) * alpha + bus_factor(op, n) * bytes * beta per link class and op, every "
                   "group of the kind at once, Huber-robust on relative residuals\n"
                << table;
      writer.write(a.out, to_json(cal));
      std::cout << "# wrote " << a.out << " (points: " << points_file << ")\n" << std::flush;
    }
    job.barrier();
  } catch (const std::exception& e) {
    job.abort(e);
  }
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

}  // namespace sax::calibration
