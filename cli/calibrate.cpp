// `sax calibrate --cluster C --out K [...]` under mpirun or `sax launch`: the sweep and its fits
// (calibration/sweep.hpp).
// `sax calibrate fit FILE... [--out calibration.json]`: fits the cost model's α-β link
// coefficients, per link class and priced op, from `sax bench coll --json` results run with
// --cluster (so that each file says which link class its groups crossed), by the robust fit of
// calibration/fit.hpp; prints each fit with its quality and writes a calibration file the
// explorer reads (`--calibration`).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>

#include "calibration/export.hpp"
#include "calibration/fit.hpp"
#include "calibration/runs_fit.hpp"
#include "calibration/sweep.hpp"
#include "calibration/sweep_fit.hpp"
#include "calibration/trace_fit.hpp"
#include "cli/commands.hpp"
#include "cli/json_out.hpp"
#include "harness/job.hpp"
#include "spec/calibration.hpp"
#include "spec/error.hpp"
#include "spec/model.hpp"
#include "spec/utc.hpp"

namespace sax::cli {

namespace {

struct FitArgs {
  std::vector<std::string> files;
  std::string out;
};

void run_fit(const FitArgs& a) {
  if (!a.out.empty()) check_writable(a.out);
  calibration::LinkPoints groups;
  std::map<std::pair<LinkClass, CollOp>, std::string> sources;
  std::set<std::string> clusters, backends, emulations;
  std::size_t unpriced = 0;
  for (const auto& file : a.files) {
    const json doc = load_json_file(file);
    const auto points = calibration::read_bench_coll_points(doc, file);
    const json env = doc.value("env", json::object());
    if (!env.contains("link_class") || !env["link_class"].is_string())
      throw InputError(file, "/env/link_class",
                       "the link class the groups crossed (run sax bench coll with --cluster, and --group a kind whose "
                       "groups all cross one class)");
    const auto lc = parse_link_class(env["link_class"].get<std::string>());
    if (!lc) throw InputError(file, "/env/link_class", "intra_node, intra_building or cross_building");
    clusters.insert(doc.value("config", json::object()).value("cluster", ""));
    backends.insert(env.value("backend", "cpu"));
    emulations.insert(env.value("emulation", "none"));
    for (const auto& p : points) {
      const CollOp priced = priced_as(p.op);
      bool is_priced = false;
      for (CollOp op : kPricedCollOps) is_priced = is_priced || op == priced;
      if (!is_priced) {
        ++unpriced;
        continue;
      }
      groups[{*lc, priced}].push_back(p);
      auto& s = sources[{*lc, priced}];
      if (s.find(file) == std::string::npos) s += (s.empty() ? "" : ", ") + file;
    }
  }
  if (groups.empty()) throw UsageError("calibrate fit: the files hold no op the cost model prices");
  if (backends.size() > 1) throw UsageError("calibrate fit: the files mix backends (cpu and cuda): fit each apart");

  Calibration cal;
  std::printf(
      "# sax calibrate fit: %zu file(s); time = steps(op, n) * alpha + bus_factor(op, n) * bytes * beta, "
      "Huber-robust on relative residuals%s\n",
      a.files.size(), unpriced ? "; ops the cost model does not price (broadcast) left out" : "");
  std::printf("%s", calibration::fit_links(
                        groups,
                        [&](LinkClass lc, CollOp op) {
                          return sources[{lc, op}];
                        },
                        cal)
                        .c_str());
  if (a.out.empty()) return;
  auto joined = [](const std::set<std::string>& xs) {
    std::string s;
    for (const auto& x : xs) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  cal.provenance.cluster = joined(clusters);
  cal.provenance.backend = *backends.begin() == "cuda" ? Backend::cuda : Backend::cpu;
  cal.provenance.emulation = joined(emulations);
  cal.provenance.date = utc_now();
  cal.provenance.tool = "sax calibrate fit " + joined(std::set<std::string>(a.files.begin(), a.files.end()));
  calibration::check_readable(cal, joined(std::set<std::string>(a.files.begin(), a.files.end())));
  write_json_file(a.out, to_json(cal));
  std::printf("# wrote %s\n", a.out.c_str());
}

struct ExportArgs {
  std::string calibration, cluster, model, dtype, astra_sim_dir, calculon_file;
};

void run_export(const ExportArgs& a) {
  if (a.astra_sim_dir.empty() && a.calculon_file.empty())
    throw UsageError("calibrate export: nothing to write (--astra-sim DIR and/or --calculon FILE)");
  const Calibration k = load_calibration(a.calibration);
  const Cluster c = load_cluster(a.cluster);
  DType dtype = DType::bf16;
  if (!a.model.empty() && !a.dtype.empty()) throw UsageError("calibrate export: --model or --dtype, not both");
  if (!a.model.empty()) dtype = load_model(a.model).dtype;
  if (!a.dtype.empty()) {
    const auto d = parse_dtype(a.dtype);
    if (!d) throw UsageError("calibrate export --dtype: unknown type '" + a.dtype + "'");
    dtype = *d;
  }
  // Both are worked out (and any refusal said) before either is written.
  std::optional<calibration::Export> astra, calculon;
  if (!a.astra_sim_dir.empty()) astra = calibration::astra_sim_network(k, c);
  if (!a.calculon_file.empty()) calculon = calibration::calculon_system(k, c, dtype);
  const std::string network = a.astra_sim_dir + "/network.yml";
  check_distinct_files("calibrate export", {{"--astra-sim", astra ? network : ""}, {"--calculon", a.calculon_file}},
                       {{"calibration", a.calibration}, {"--cluster", a.cluster}, {"--model", a.model}});
  if (astra) {
    std::error_code ec;
    std::filesystem::create_directories(a.astra_sim_dir, ec);
    check_writable(network);
  }
  if (calculon) check_writable(a.calculon_file);
  auto show = [](const std::string& file, const calibration::Export& e) {
    std::printf("# wrote %s\n", file.c_str());
    for (const auto& n : e.notes) std::printf("#   %s\n", n.c_str());
  };
  if (astra) write_text_file(network, astra->text), show(network, *astra);
  if (calculon) write_text_file(a.calculon_file, calculon->text), show(a.calculon_file, *calculon);
}

}  // namespace

void add_calibrate(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "calibrate",
      "Sweep the testbed's links under mpirun (--cluster C --out K) and fit the cost model's coefficients; or fit "
      "bench coll files (calibrate fit)");
  cmd->require_subcommand(0, 1);
  auto s = std::make_shared<calibration::SweepArgs>();
  cmd->add_option("--cluster", s->cluster_file, "The testbed's cluster file (its ranks: mpirun -np N)");
  cmd->add_option("-o,--out", s->out, "The calibration file to write (atomically)");
  cmd->add_option("--points", s->points_file, "Raw points, appended as measured (default OUT.points.jsonl)");
  cmd->add_option("-b,--min-bytes", s->min_bytes, "Smallest size")->capture_default_str();
  cmd->add_option("-e,--max-bytes", s->max_bytes, "Largest size")->capture_default_str();
  cmd->add_option("-f,--step-factor", s->step_factor, "Size step")->capture_default_str();
  cmd->add_option("-n,--iters", s->iters, "Timed iterations per point")->capture_default_str();
  cmd->add_option("-w,--warmup", s->warmup, "Untimed iterations before")->capture_default_str();
  cmd->add_option("--ops", s->ops, "The priced ops to sweep: all, or a comma list")->capture_default_str();
  cmd->add_option("--model", s->model_files,
                  "Also time this model's compute ops at TP 1-8 and micro-batches 1-2 (repeatable): GEMM and "
                  "attention efficiency, HBM fraction");
  cmd->add_option("--held-cluster", s->held_cluster_file,
                  "With --model on a paced cluster: also write the cluster with its device slowed to the one this "
                  "host held (the cluster as it was where held), for runs that do not overrun");
  cmd->add_option("--backend", s->backend, "cpu (MPI) | cuda (NCCL); default cuda when a device is present");
  cmd->add_option("--timeout", s->timeout_s, "Seconds without progress before all ranks exit 1")->capture_default_str();
  auto offline = std::make_shared<OfflineFitArgs>();
  add_offline_fit_options(cmd, *offline);
  cmd->allow_extras();
  cmd->callback([s, cmd, offline] {
    if (!cmd->get_subcommands().empty()) return;
    refuse_extras(*cmd);
    if (run_offline_fit(*offline, s->cluster_file, s->out, !s->model_files.empty() || !cmd->remaining().empty()))
      return;
    harness::Job job;
    calibration::calibrate_cluster(job, *s, cmd->remaining(), {check_writable, write_json_file});
  });
  auto f = std::make_shared<FitArgs>();
  CLI::App* fit = cmd->add_subcommand(
      "fit", "Fit alpha-beta per link class and op from sax bench coll --json files (run with --cluster)");
  fit->add_option("files", f->files, "bench coll JSON files")->required();
  fit->add_option("-o,--out", f->out, "Write the calibration file (atomically)");
  fit->allow_extras(false);  // the parent allows extras (the sweep's, refused by it): these do not
  fit->callback([f] { run_fit(*f); });
  auto x = std::make_shared<ExportArgs>();
  CLI::App* ex = cmd->add_subcommand(
      "export", "Write a calibration as ASTRA-sim's analytical network (network.yml) and Calculon's system JSON");
  ex->add_option("calibration", x->calibration, "The calibration file")->required();
  ex->add_option("--cluster", x->cluster, "The cluster file it was measured on (its shape)")->required();
  ex->add_option("--model", x->model, "The model whose dtype Calculon's matrix peak is for");
  ex->add_option("--dtype", x->dtype, "Or the dtype itself (default bf16)");
  ex->add_option("--astra-sim", x->astra_sim_dir, "Write DIR/network.yml (ASTRA-sim 2.x analytical backend)");
  ex->add_option("--calculon", x->calculon_file, "Write Calculon's system description (systems/*.json shape)");
  ex->allow_extras(false);
  ex->callback([x] { run_export(*x); });
}

}  // namespace sax::cli
