#include "calibration/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

#include "calibration/compute_sweep.hpp"
#include "calibration/link_sweep.hpp"
#include "calibration/points_file.hpp"
#include "calibration/sweep_fit.hpp"
#include "harness/boundary_guard.hpp"
#include "harness/watchdog.hpp"
#include "sax_version.hpp"
#include "spec/error.hpp"
#include "spec/utc.hpp"

namespace sax::calibration {

namespace {

std::string default_points_file(const SweepArgs& a) {
  return a.points_file.empty() ? a.out + ".points.jsonl" : a.points_file;
}

std::string duration_text(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0f s", s);
  else
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  return buf;
}

// The sweep as every rank checked it: the cluster, its link sweep, the models and their ops.
struct SweepInputs {
  Cluster cluster;
  std::string cluster_hash;
  LinkSweep links;
  std::vector<Model> models;
  std::vector<ComputeTask> compute;
};

SweepInputs check_inputs(const harness::Job& job, const SweepArgs& a, const std::vector<std::string>& extras) {
  if (!extras.empty()) throw UsageError("calibrate: unexpected argument '" + extras.front() + "'");
  if (a.cluster_file.empty()) throw UsageError("calibrate: --cluster is required (the testbed's cluster file)");
  if (a.out.empty()) throw UsageError("calibrate: --out is required (the calibration file to write)");
  SweepInputs in;
  in.cluster = load_cluster(a.cluster_file);
  in.cluster_hash = file_hash(a.cluster_file);
  in.links = plan_link_sweep(job, a, in.cluster);
  for (const auto& f : a.model_files) in.models.push_back(load_model(f));
  if (!in.models.empty()) in.compute = compute_tasks(in.cluster, in.models, job.size());
  if (!a.held_cluster_file.empty()) {
    if (in.models.empty() || !in.cluster.paced())
      throw UsageError("calibrate --held-cluster: expected --model and a cluster whose device is paced (" +
                       a.cluster_file + "'s device/emulation \"paced\"): the held device is measured on its ops");
  }
  NamedFiles inputs = {{"--cluster", a.cluster_file}};
  for (const std::string& m : a.model_files) inputs.emplace_back("--model", m);
  check_distinct_files(
      "calibrate", {{"--out", a.out}, {"--points", default_points_file(a)}, {"--held-cluster", a.held_cluster_file}},
      inputs);
  return in;
}

// What the sweep measures, in order, and what is left of it: the keys measured before (rank 0's
// file's, on every rank) and the datasheet's time of the rest, for the ETA.
struct SweepPlan {
  std::vector<LinkTask> links;
  OverlapTasks overlap;
  std::set<std::string> done;
  double left_weight = 0;
  std::size_t left = 0, total = 0;
};

std::set<std::string> keys_measured_before(harness::Job& job, const std::vector<json>& have) {
  std::string mine;
  for (const auto& p : have) mine += p["key"].get<std::string>() + "\n";
  const std::string all = job.all_gather(mine)[0];  // rank 0's: the others read no file
  std::set<std::string> keys;
  std::istringstream in(all);
  for (std::string k; std::getline(in, k);) keys.insert(k);
  return keys;
}

SweepPlan plan_points(harness::Job& job, const SweepInputs& in, const std::vector<json>& have) {
  SweepPlan plan;
  plan.links = link_tasks(in.links, in.cluster);
  plan.done = keys_measured_before(job, have);
  // A paced op ends at its deadline whatever communicates beside it: no overlap slowdown to measure.
  plan.overlap =
      overlap_tasks(in.compute, in.models, in.links.kinds.count("cross_building") > 0 && !in.cluster.paced());
  auto left = [&](const std::string& key, double weight) {
    if (!plan.done.count(key)) plan.left_weight += weight, ++plan.left;
  };
  for (const auto& t : plan.links) left(t.key(), t.weight);
  for (const auto& t : in.compute) left(t.key, t.weight);
  for (const auto& k : plan.overlap.keys) left(k, kOverlapWeight);
  plan.total = plan.links.size() + in.compute.size() + plan.overlap.keys.size();
  return plan;
}

// Each point as measured: kept, appended to the points file and shown with the ETA (rank 0).
class Progress {
 public:
  Progress(const harness::Job& job, const SweepFiles& files, const SweepPlan& plan)
      : job_(job), files_(files), plan_(plan), start_(std::chrono::steady_clock::now()) {}

  void record(const json& measured, double weight, const std::string& what) {
    // A point is kept only if the boundary it names held from the job's start to now (the rank's
    // guard: the launcher and its helpers ran throughout), and it says which launch measured it.
    json p = measured;
    p["emulation"] = harness::emulation_text();
    if (const std::string launch = harness::BoundaryGuard::launch(); !launch.empty()) p["launch"] = launch;
    points.push_back(p);
    done_weight_ += weight;
    if (job_.rank() != 0) return;
    append_line(files_, p.dump());
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = done_weight_ > 0 ? elapsed * (plan_.left_weight - done_weight_) / done_weight_ : 0;
    std::fprintf(stderr, "calibrate: [%zu/%zu] %-60s %10.1f us   %s elapsed, ETA %s\n", points.size(), plan_.left,
                 what.c_str(), p["time_us"].get<double>(), duration_text(elapsed).c_str(),
                 duration_text(std::max(0.0, eta)).c_str());
  }

  std::vector<json> points;  // measured now

 private:
  const harness::Job& job_;
  const SweepFiles& files_;
  const SweepPlan& plan_;
  std::chrono::steady_clock::time_point start_;
  double done_weight_ = 0;
};

// Rank 0 gives a new points file (or one with a header only) its header, and says what is left.
void start_points(const harness::Job& job, const SweepArgs& a, const SweepInputs& in, const SweepPlan& plan,
                  const SweepFiles& files) {
  if (job.rank() != 0) return;
  if (files.have.empty())
    start_points_file(files, {{"sax_calibrate_points", 1},
                              {"args", hash_text(a.text())},
                              {"cluster", a.cluster_file},
                              {"cluster_hash", in.cluster_hash},
                              {"emulation", harness::emulation_text()}});
  std::fprintf(stderr,
               "calibrate: %zu points (%zu measured before, %zu to measure) on %s; points go to %s as measured\n",
               plan.total, plan.total - plan.left, plan.left, a.cluster_file.c_str(), files.points_file.c_str());
}

struct Measured {
  std::vector<json> points;  // measured now
  std::vector<std::string> hosts;
};

// Every point left, on every rank; a failure here may be one rank's alone: it ends the job.
Measured measure_points(harness::Job& job, const SweepArgs& a, const SweepInputs& in, const SweepPlan& plan,
                        const SweepFiles& files) {
  Measured out;
  try {
    harness::Watchdog watchdog(std::strtod(a.timeout_s.c_str(), nullptr), job.rank());
    auto device = job.make_device(in.links.backend);
    auto factory = job.communicators(*device, &in.cluster);
    out.hosts = job.all_gather(job.processor_name());
    start_points(job, a, in, plan, files);
    Progress progress(job, files, plan);
    const RecordPoint record = [&](const json& p, double weight, const std::string& what) {
      progress.record(p, weight, what);
    };
    measure_links(in.links, plan.links, plan.done, job, *device, *factory, watchdog, record);
    const auto cross = in.links.kinds.find("cross_building");
    measure_compute({job, *device, *factory, in.cluster, in.models, watchdog, record}, in.compute, plan.overlap,
                    cross == in.links.kinds.end() ? nullptr : &cross->second, plan.done);
    out.points = std::move(progress.points);
  } catch (const std::exception& e) {
    job.abort(e);
  }
  return out;
}

// Where the calibration came from: the cluster file, the backend and emulation, the command, the
// hosts.
void set_provenance(Calibration& cal, const harness::Job& job, const SweepArgs& a, const SweepInputs& in,
                    const std::vector<std::string>& hosts) {
  cal.provenance.cluster = a.cluster_file;
  cal.provenance.cluster_hash = in.cluster_hash;
  cal.provenance.backend = in.links.backend;
  cal.provenance.emulation = harness::emulation_text();
  cal.provenance.date = utc_now();
  cal.provenance.tool = "sax calibrate --cluster " + a.cluster_file + " -b " + a.min_bytes + " -e " + a.max_bytes +
                        " -f " + a.step_factor + " -n " + a.iters + " -w " + a.warmup + " --ops " + a.ops;
  for (const auto& f : a.model_files) cal.provenance.tool += " --model " + f;
  cal.provenance.sax_version = kVersion;
  cal.provenance.library = job.mpi_library();
  const std::set<std::string> distinct(hosts.begin(), hosts.end());
  cal.provenance.hosts.assign(distinct.begin(), distinct.end());
}

// The cluster file with its device slowed to the one held (as it was where the host held it).
void write_held_cluster(const SweepArgs& a, const Calibration& cal, const json& held,
                        const harness::ResultWriter& writer) {
  writer.write(a.held_cluster_file, held);
  char line[512];
  std::snprintf(line, sizeof line, "# wrote %s: %s\n", a.held_cluster_file.c_str(),
                cal.held_device->holds_declared() ? "the cluster as it was (its device held)"
                                                  : "the cluster with its device slowed to the one held");
  std::cout << line << std::flush;
}

// Rank 0 prints the fits and writes the calibration (and the held cluster, with --held-cluster);
// every rank waits for it.
void report(harness::Job& job, const SweepArgs& a, const Calibration& cal, const json& held, const std::string& table,
            const json& all, std::size_t measured_now, const std::string& points_file,
            const harness::ResultWriter& writer) {
  try {
    if (job.rank() == 0) {
      std::cout << "# sax calibrate: " << job.size() << " ranks, cluster " << a.cluster_file << ", backend "
                << to_string(cal.provenance.backend) << ", emulation " << cal.provenance.emulation << "; " << all.size()
                << " points (" << measured_now << " measured now)\n";
      if (std::any_of(all.begin(), all.end(), [](const json& p) { return p.value("kind", "link") == "link"; }))
        std::cout << "# time = steps(op, n) * alpha + bus_factor(op, n) * bytes * beta per link class and op, every "
                     "group of the kind at once, Huber-robust on relative residuals\n";
      else
        std::cout << "# no link measured (one rank): the links stay the datasheet's\n";
      std::cout << table;
      writer.write(a.out, to_json(cal));
      std::cout << "# wrote " << a.out << " (points: " << points_file << ")\n" << std::flush;
      if (!a.held_cluster_file.empty()) write_held_cluster(a, cal, held, writer);
    }
    job.barrier();
  } catch (const std::exception& e) {
    job.abort(e);
  }
}

}  // namespace

std::string SweepArgs::text() const {
  std::string t;
  for (const std::string* s : {&cluster_file, &min_bytes, &max_bytes, &step_factor, &iters, &warmup, &ops, &backend})
    t += *s + '\x1f';
  for (const auto& m : model_files) t += "model " + m + '\x1f';
  return t;
}

void calibrate_cluster(harness::Job& job, const SweepArgs& a, const std::vector<std::string>& extras,
                       const harness::ResultWriter& writer) {
  SweepFiles files;  // rank 0's, held for the sweep's whole life
  files.out = a.out;
  files.points_file = default_points_file(a);
  SweepInputs in;
  job.agree(a.text() + '\x1f' + a.out + '\x1f' + files.points_file + '\x1f' + a.timeout_s, [&] {
    in = check_inputs(job, a, extras);
    if (job.rank() != 0) return;
    // Rank 0 alone reads the files: whatever goes wrong is bad input, so that every rank leaves
    // agree() together.
    writer.check(a.out);
    if (!a.held_cluster_file.empty()) writer.check(a.held_cluster_file);
    open_sweep_files(files, {hash_text(a.text()), in.cluster_hash, harness::emulation_text()});
  });
  const SweepPlan plan = plan_points(job, in, files.have);
  const Measured measured = measure_points(job, a, in, plan, files);
  json all = json::array();  // every point, measured before and now (rank 0)
  if (job.rank() == 0) {
    for (const auto& p : files.have) all.push_back(p);
    for (const auto& p : measured.points) all.push_back(p);
  }
  // The fits, and the calibration they make read back as every command reads it: points whose
  // fits it would refuse (a time of 1e300 µs, an r² that is not a number) exit 2 on every rank,
  // naming the points file, and nothing is written.
  Calibration cal;
  json held;  // rank 0's, with --held-cluster
  std::string table;
  job.agree(a.text(), [&] {
    if (job.rank() != 0) return;
    cal = fit_sweep(all, files.points_file, &table);
    set_provenance(cal, job, a, in, measured.hosts);
    cal.points = all;
    check_readable(cal, files.points_file);
    if (!a.held_cluster_file.empty()) {
      if (!cal.held_device) throw InputError(files.points_file, "", "paced compute points to find the held device by");
      // What is written is a cluster every command reads (a device slowed below what a cluster
      // may declare is refused here, naming the figure, before anything is written).
      held = held_cluster(load_json_file(a.cluster_file), *cal.held_device, cal.provenance.tool);
      read_cluster(held, a.held_cluster_file);
    }
  });
  report(job, a, cal, held, table, all, measured.points.size(), files.points_file, writer);
}

}  // namespace sax::calibration
