#include "calibration/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
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
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "harness/watchdog.hpp"
#include "sax_version.hpp"
#include "spec/error.hpp"

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

std::string point_key(const json& p) {
  return p.at("group").get<std::string>() + "/" + p.at("op").get<std::string>() + "/" +
         std::to_string(p.at("bytes").get<std::uint64_t>()) + (p.at("together").get<bool>() ? "/together" : "/alone");
}

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

// The points file: its first line names the sweep; each further line is one point. A line cut
// short by an interruption (the last) is dropped, and the file cut back to the whole lines.
struct PointsFile {
  json header;
  std::vector<json> points;
};

std::optional<PointsFile> read_points_file(const std::string& file) {
  std::ifstream in(file);
  if (!in) return std::nullopt;
  PointsFile f;
  std::string line;
  std::uintmax_t whole = 0;
  bool first = true;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline: cut short
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      if (in.peek() == EOF) break;  // the last line, cut short
      throw InputError(file, "/" + std::to_string(first ? 0 : f.points.size() + 1),
                       "one JSON object per line (a sax calibrate points file)");
    }
    if (first) {
      if (!j.contains("sax_calibrate_points"))
        throw InputError(file, "/0", "the header of a sax calibrate points file");
      f.header = j;
    } else {
      for (const char* k : {"group", "op", "bytes", "together", "time_us", "link_class", "ranks", "groups"})
        if (!j.contains(k))
          throw InputError(file, "/" + std::to_string(f.points.size() + 1) + "/" + k, "a field of every point");
      f.points.push_back(j);
    }
    first = false;
    whole += line.size() + 1;
  }
  in.close();
  if (std::filesystem::file_size(file) != whole) std::filesystem::resize_file(file, whole);
  if (first) return std::nullopt;  // empty
  return f;
}

std::string default_points_file(const SweepArgs& a) {
  return a.points_file.empty() ? a.out + ".points.jsonl" : a.points_file;
}

}  // namespace

std::string SweepArgs::text() const {
  std::string t;
  for (const std::string* s : {&cluster_file, &min_bytes, &max_bytes, &step_factor, &iters, &warmup, &ops, &backend})
    t += *s + '\x1f';
  return t;
}

Calibration fit_sweep(const json& points, const std::string& what, std::string* table) {
  std::map<std::pair<LinkClass, CollOp>, std::vector<CollPoint>> fitted;
  std::map<std::uint64_t, double> cross_alone, cross_together;
  int cross_groups = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const json& p = points[i];
    const std::string at = "/" + std::to_string(i);
    if (!p.is_object()) throw InputError(what, at, "a point object");
    for (const char* k : {"group", "link_class", "op"})
      if (!p.contains(k) || !p[k].is_string()) throw InputError(what, at + "/" + k, "a name");
    for (const char* k : {"ranks", "groups", "bytes", "time_us"})
      if (!p.contains(k) || !p[k].is_number() || !(p[k].get<double>() > 0))
        throw InputError(what, at + "/" + k, "a positive number");
    if (!p.contains("together") || !p["together"].is_boolean())
      throw InputError(what, at + "/together", "true or false");
    LinkClass lc{};
    bool found = false;
    for (LinkClass c : kLinkClasses)
      if (p.at("link_class").get<std::string>() == link_class_name(c)) lc = c, found = true;
    if (!found)
      throw InputError(what, "/" + std::to_string(i) + "/link_class", "intra_node, intra_building or cross_building");
    const auto op = parse_coll_op(p.at("op").get<std::string>());
    if (!op) throw InputError(what, "/" + std::to_string(i) + "/op", "a collective op");
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
  std::snprintf(line, sizeof line, "#%-15s %-15s %10s %10s %8s %8s %8s %9s %7s %5s\n", "link class", "op", "alpha_us",
                "busbw_GBps", "r2", "p50_err", "p95_err", "max_err", "points", "outl");
  t += line;
  for (const auto& [key, pts] : fitted) {
    const auto fit = fit_alpha_beta(pts, what + " (" + link_class_name(key.first) + " " + to_string(key.second) + ")");
    const AlphaBeta& ab = fit.coefficients;
    std::snprintf(line, sizeof line, " %-15s %-15s %10.3f %10.4f %8.4f %7.1f%% %7.1f%% %8.1f%% %7lld %5lld\n",
                  link_class_name(key.first), to_string(key.second), ab.alpha_us,
                  ab.beta_ns_per_byte > 0 ? 1.0 / ab.beta_ns_per_byte : 0.0, ab.fit.r2, fit.rel_residual_p50 * 100,
                  fit.rel_residual_p95 * 100, ab.fit.max_rel_error * 100, static_cast<long long>(ab.fit.samples),
                  static_cast<long long>(fit.downweighted));
    t += line;
    cal.links[static_cast<int>(key.first)][static_cast<int>(key.second)] = ab;
  }
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
  std::map<std::string, coll::GroupSet> kinds;
  Backend backend = Backend::cpu;
  int iters = 0, warmup = 0;
  std::string cluster_hash;
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
    b.group = kinds.begin()->first;
    const CollBenchPlan plan =
        plan_coll_bench(b, job.size(), [&job](const std::string& x) { return job.choose_backend(x); });
    check_emulation(&*cluster);
    backend = plan.config.backend;
    iters = plan.config.iters, warmup = plan.config.warmup;
    sizes = sweep_sizes(plan.config.min_bytes, plan.config.max_bytes, plan.config.step_factor);
    for (std::uint64_t bytes : sizes)
      for (CollOp op : ops)
        if (splits_by_rank(op))
          for (const auto& [kind, set] : kinds)
            for (const auto& g : set.groups)
              if (bytes % (4u * g.size()) != 0)
                throw UsageError("calibrate: size " + std::to_string(bytes) + " B does not split into " +
                                 std::to_string(g.size()) + " whole float32 blocks (" + to_string(op) + " on " + kind +
                                 " groups)");
    if (job.rank() == 0) {
      writer.check(a.out);
      if (auto f = read_points_file(points_file)) {
        if (f->header.value("args", "") != hex(text_hash(a.text())) ||
            f->header.value("cluster_hash", "") != cluster_hash)
          throw UsageError("calibrate: " + points_file +
                           " holds points of another sweep (other arguments or another cluster file): pass the "
                           "same arguments to resume it, or --points another file");
        have = std::move(f->points);
      }
    }
  });

  // The tasks, in order: per kind (cross-building first), op and size, every group of the kind at
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
  std::stable_partition(tasks.begin(), tasks.end(), [](const Task& t) { return t.kind == "cross_building"; });
  std::set<std::string> done_keys;
  {
    std::string mine;
    for (const auto& p : have) mine += point_key(p) + "\n";
    const std::string all = job.all_gather(mine)[0];  // rank 0's: the others read no file
    std::istringstream in(all);
    for (std::string k; std::getline(in, k);) done_keys.insert(k);
  }
  double left_weight = 0;
  std::size_t left = 0;
  for (const auto& t : tasks) {
    if (!done_keys.count(t.key())) left_weight += t.weight, ++left;
  }

  try {
    Watchdog watchdog(std::strtod(a.timeout_s.c_str(), nullptr), job.rank());
    auto device = job.make_device(backend);
    auto factory = job.communicators(*device, &*cluster);
    const std::vector<std::string> hosts = job.all_gather(job.processor_name());
    std::ofstream out;
    if (job.rank() == 0) {
      const bool fresh = have.empty() && !std::filesystem::exists(points_file);
      out.open(points_file, std::ios::app);
      if (!out) throw InputError(points_file, "", "a points file this rank can append to");
      if (fresh || have.empty()) {
        if (!fresh) std::filesystem::resize_file(points_file, 0);
        out << json{{"sax_calibrate_points", 1},
                    {"args", hex(text_hash(a.text()))},
                    {"cluster", a.cluster_file},
                    {"cluster_hash", cluster_hash}}
                   .dump()
            << "\n"
            << std::flush;
      }
      std::fprintf(stderr,
                   "calibrate: %zu points (%zu measured before, %zu to measure) on %s; points go to %s as measured\n",
                   tasks.size(), tasks.size() - left, left, a.cluster_file.c_str(), points_file.c_str());
    }
    const auto start = std::chrono::steady_clock::now();
    double done_weight = 0;
    std::size_t measured = 0;
    std::vector<json> fresh_points;
    for (const auto& [kind, set] : kinds) {
      bool any = false;
      for (const auto& t : tasks) any = any || (t.kind == kind && !done_keys.count(t.key()));
      if (!any) continue;
      coll::GroupCommunicator group = factory->make(set);
      for (const auto& t : tasks) {
        if (t.kind != kind || done_keys.count(t.key())) continue;
        CollBenchArgs b;
        b.op = to_string(t.op);
        b.min_bytes = b.max_bytes = std::to_string(t.bytes);
        b.iters = a.iters, b.warmup = a.warmup, b.backend = a.backend, b.timeout_s = a.timeout_s;
        b.cluster_file = a.cluster_file;
        b.group = kind;
        b.groups_at_once = t.together ? "0" : "1";
        const CollBenchPlan plan = plan_coll_bench(b, job.size(), [&](const std::string&) { return backend; });
        const auto results = run_coll_sweep(plan, *group.comm, *device, job, &watchdog, [](const CollResult&) {});
        const CollResult& r = results.front();
        const json p = {{"group", kind},
                        {"link_class", link_class_name(*set.link_class)},
                        {"op", to_string(t.op)},
                        {"ranks", r.ranks},
                        {"groups", set.groups.size()},
                        {"together", t.together},
                        {"bytes", t.bytes},
                        {"time_us", r.time_us},
                        {"p50_us", r.p50_us},
                        {"p99_us", r.p99_us},
                        {"cv", r.cv},
                        {"iters", iters},
                        {"path", r.path}};
        fresh_points.push_back(p);
        done_weight += t.weight;
        ++measured;
        if (job.rank() == 0) {
          out << p.dump() << "\n" << std::flush;
          const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          const double eta = done_weight > 0 ? elapsed * (left_weight - done_weight) / done_weight : 0;
          std::fprintf(stderr, "calibrate: [%zu/%zu] %-14s %-14s %9s B %-8s %10.1f us   %s elapsed, ETA %s\n", measured,
                       left, kind.c_str(), to_string(t.op), format_bytes(t.bytes).c_str(),
                       t.together ? "together" : "alone", r.time_us, duration_text(elapsed).c_str(),
                       duration_text(std::max(0.0, eta)).c_str());
        }
      }
      group.comm.reset();
    }
    if (job.rank() == 0) {
      json all = json::array();
      for (const auto& p : have) all.push_back(p);
      for (const auto& p : fresh_points) all.push_back(p);
      std::string table;
      Calibration cal = fit_sweep(all, points_file, &table);
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
      cal.provenance.sax_version = kVersion;
      cal.provenance.library = job.mpi_library();
      const std::set<std::string> distinct(hosts.begin(), hosts.end());
      cal.provenance.hosts.assign(distinct.begin(), distinct.end());
      cal.points = all;
      std::cout << "# sax calibrate: " << job.size() << " ranks, cluster " << a.cluster_file << ", backend "
                << to_string(backend) << ", emulation " << cal.provenance.emulation << "; " << all.size() << " points ("
                << measured << " measured now)\n"
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

}  // namespace sax::calibration
