#include "harness/kernel_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include "harness/internal/op_runner.hpp"
#include "harness/internal/tracer.hpp"
#include "harness/op_timing.hpp"
#include "harness/result_env.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "kernels/cpu/ops.hpp"
#include "sax_version.hpp"
#include "spec/error.hpp"
#include "workload/workload.hpp"

namespace sax::harness {

using workload::Op;
using workload::Phase;

namespace {

struct Row {
  Op op;
  double median_ms = 0, min_ms = 0, max_ms = 0, tflops = 0, gbps = 0, read = 0, written = 0, executed = 0;
  double peak_share = -1;  // -1: no cluster to compare with
  std::string bound;
  std::vector<std::int64_t> expert_rows;  // grouped expert GEMMs: rows per local expert
};

// The command line checked: what to run, how often, on which backend, against which peak.
struct KernelBenchPlan {
  int iters = 0, warmup = 0, threads = 0;
  Backend backend = Backend::cpu;
  OpRunnerOptions options;
  std::optional<Cluster> cluster;
  Model model;
  std::vector<Op> ops;
  bool sweep = false;  // a layout's slice (a progress line on long sweeps), not one shape
};

// --cluster --model --layout: every op of the layout's layer slice on --rank.
void plan_layout_ops(const KernelBenchArgs& a, KernelBenchPlan& p) {
  if (a.cluster_file.empty() || a.model_file.empty() || a.layout_file.empty())
    throw UsageError("bench kernels: --op gemm with --m --n --k, or --cluster, --model and --layout to sweep a layout");
  if (!a.m.empty() || !a.n.empty() || !a.k.empty()) throw UsageError("--m/--n/--k go with --op gemm");
  p.model = load_model(a.model_file);
  const Layout layout = load_layout(a.layout_file);
  validate_layout(layout, p.model, *p.cluster, a.layout_file);
  const std::int64_t rank = parse_integer(a.rank, "--rank", 0, p.cluster->world_size() - 1);
  p.ops = layer_slice_ops(workload::build(*p.cluster, p.model, layout, rank), p.model);
  if (p.model.num_experts > 0) p.options.local_experts = p.model.num_experts / layout.expert_model_parallel_size;
}

// --op gemm|attention: one op at the shape the flags give, in float32.
void plan_single_op(const KernelBenchArgs& a, KernelBenchPlan& p) {
  if (a.op != "gemm" && a.op != "attention")
    throw UsageError("--op: expected gemm or attention (or no --op with --cluster --model --layout), got '" + a.op +
                     "'");
  if (!a.model_file.empty() || !a.layout_file.empty())
    throw UsageError("--model and --layout sweep a layout: drop --op");
  const bool attention = a.op == "attention";
  static const std::map<std::string, Phase> phases = {{"forward", Phase::forward},
                                                      {"backward", Phase::backward},
                                                      {"backward_input", Phase::backward_input},
                                                      {"backward_weight", Phase::backward_weight}};
  const auto ph = phases.find(a.phase);
  if (ph == phases.end() || (attention && ph->second != Phase::forward && ph->second != Phase::backward))
    throw UsageError("--phase: expected forward, backward" +
                     std::string(attention ? "" : ", backward_input or backward_weight") + ", got '" + a.phase + "'");
  Op o;
  o.kind = workload::OpKind::compute;
  o.name = a.op;
  o.compute = attention ? workload::ComputeKind::attention : workload::ComputeKind::gemm;
  o.phase = ph->second;
  o.m = static_cast<double>(parse_integer(a.m, "--m", 1, 2147483647));
  o.n = static_cast<double>(parse_integer(a.n, "--n", 1, 2147483647));
  o.k = static_cast<double>(parse_integer(a.k, "--k", 1, 2147483647));
  o.count = 1;
  if (attention) {
    o.heads = a.heads.empty() ? 1 : static_cast<double>(parse_integer(a.heads, "--heads", 1, 65536));
    o.kv_heads = a.kv_heads.empty() ? o.heads : static_cast<double>(parse_integer(a.kv_heads, "--kv-heads", 1, 65536));
    if (static_cast<std::int64_t>(o.heads) % static_cast<std::int64_t>(o.kv_heads) != 0)
      throw UsageError("--kv-heads must divide --heads (grouped-query heads)");
    if (o.n < o.m) throw UsageError("--n (keys) must be at least --m (queries): the queries are the last keys");
  } else if (!a.heads.empty() || !a.kv_heads.empty()) {
    throw UsageError("--heads and --kv-heads go with --op attention");
  }
  o.flops = workload::flops(o);
  p.ops.push_back(o);
  p.model.dtype = DType::fp32;
}

KernelBenchPlan plan_kernel_bench(const KernelBenchArgs& a, const std::vector<std::string>& extras) {
  if (!extras.empty()) throw UsageError("bench kernels: unexpected argument '" + extras.front() + "'");
  KernelBenchPlan p;
  p.iters = static_cast<int>(parse_integer(a.iters, "-n/--iters", 1, 1000000));
  p.warmup = static_cast<int>(parse_integer(a.warmup, "-w/--warmup", 0, 1000000));
  p.threads = static_cast<int>(parse_integer(a.threads, "--threads", 1, 1024));
  if (a.backend != "cpu" && a.backend != "cuda")
    throw UsageError("--backend: expected cpu or cuda, got '" + a.backend + "'");
  p.backend = a.backend == "cuda" ? Backend::cuda : Backend::cpu;
  p.options.router_skew = static_cast<float>(parse_number(a.router_skew, "--router-skew", 0, 100));
  if (!a.cluster_file.empty()) p.cluster = load_cluster(a.cluster_file);
  p.sweep = a.op.empty();
  if (p.sweep)
    plan_layout_ops(a, p);
  else
    plan_single_op(a, p);
  if (p.backend == Backend::cuda) {
    const kernels::CudaDevices cuda = kernels::cuda_devices();
    if (cuda.count == 0) throw UsageError("--backend cuda: " + (cuda.compiled ? cuda.reason : "built without CUDA"));
  }
  return p;
}

// A runner per op, their buffers checked against the device's free memory before anything is
// allocated or run.
std::vector<OpRunner> make_runners(const KernelBenchPlan& p, kernels::Device& device, kernels::Ops& kops) {
  std::vector<OpRunner> runners;
  const double avail = device.free_bytes();
  for (const Op& o : p.ops) {
    runners.emplace_back(p.model, o, device, kops, p.options);
    const double need = runners.back().buffer_bytes();
    if (avail > 0 && need > avail) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "op %s (%s, %s) needs %.2f GiB of buffers, %.2f GiB are free on the %s device",
                    o.name.c_str(), workload::to_string(o.phase), shape_text(o).c_str(), need / (1u << 30),
                    avail / (1u << 30), to_string(p.backend));
      throw UsageError(buf);
    }
  }
  return runners;
}

// The device's peak from the cluster file, in the type each backend computes in (the CPU backend
// float32, the CUDA backend bf16); zeros without a cluster.
struct Peak {
  double flops = 0, bytes_per_s = 0;
};
Peak device_peak(const KernelBenchPlan& p) {
  Peak peak;
  if (!p.cluster) return peak;
  const auto& pk = p.cluster->device.peak_tflops;
  const DType d = p.backend == Backend::cpu ? DType::fp32 : DType::bf16;
  if (auto it = pk.find(d); it != pk.end()) peak.flops = it->second * 1e12;
  peak.bytes_per_s = p.cluster->device.hbm_bandwidth_gbps * 1e9;
  return peak;
}

void print_header(const KernelBenchPlan& p, const kernels::Device& device, bool threads_set, const Peak& peak) {
  std::printf(
      "# sax bench kernels: %zu op(s), %s, BLAS threads %s, router skew %g, %d iterations after %d warm-up; "
      "time median (min-max)%s\n",
      p.ops.size(), p.backend == Backend::cpu ? "CPU float32" : ("CUDA bf16 on " + device.name()).c_str(),
      threads_set ? std::to_string(p.threads).c_str() : "as the CBLAS decides", p.options.router_skew, p.iters,
      p.warmup,
      p.cluster ? ("; peak from " + p.cluster->name + ": " + std::to_string(peak.flops / 1e12) + " TFLOP/s, " +
                   std::to_string(peak.bytes_per_s / 1e9) + " GB/s")
                      .c_str()
                : "");
  std::printf("#%-20s %-15s %-22s %10s %19s %9s %8s %7s %s\n", "op", "phase", "shape", "ms", "(min-max)", "TFLOP/s",
              "GB/s", "%peak", "bound");
}

// One op timed (the shared loop, harness/op_timing.hpp) and its figures against the peak.
Row measure(OpRunner& r, kernels::Device& device, const KernelBenchPlan& p, const Peak& peak, StepTracer* tracer) {
  r.allocate();
  warm_up(r, device, p.warmup);
  const char* name = tracer ? profiles::process_names().intern(r.op().name + " " + workload::to_string(r.op().phase) +
                                                               " " + shape_text(r.op()))
                            : "";
  std::function<void(std::int64_t, std::int64_t)> each;
  if (tracer) each = [&](std::int64_t b, std::int64_t e) { tracer->span(profiles::Category::compute, name, b, e); };
  const OpTimes t = time_runs(r, device, p.iters, 1, each);
  std::vector<double> ms;
  for (double us : t.us) ms.push_back(us / 1e3);
  Row row;
  row.op = r.op();
  row.expert_rows = r.expert_rows();
  row.median_ms = median(ms);
  row.min_ms = *std::min_element(ms.begin(), ms.end());
  row.max_ms = *std::max_element(ms.begin(), ms.end());
  const double s = row.median_ms / 1e3, bytes = t.traffic.read + t.traffic.written;
  row.read = t.traffic.read, row.written = t.traffic.written, row.executed = t.traffic.flops;
  row.tflops = row.op.flops / s / 1e12;
  row.gbps = bytes / s / 1e9;
  if (peak.flops > 0 && peak.bytes_per_s > 0) {
    const double tf = row.op.flops / peak.flops, tb = bytes / peak.bytes_per_s;
    row.peak_share = std::max(tf, tb) / s;
    row.bound = tf >= tb ? "flops" : "bytes";
  }
  r.release();
  return row;
}

void print_row(const Row& row) {
  std::printf(" %-20s %-15s %-22s %10.3f %9.3f-%-9.3f %9.4f %8.2f %6s %s\n", row.op.name.c_str(),
              workload::to_string(row.op.phase), shape_text(row.op).c_str(), row.median_ms, row.min_ms, row.max_ms,
              row.tflops, row.gbps,
              row.peak_share >= 0 ? (std::to_string(static_cast<int>(row.peak_share * 100 + 0.5)) + "%").c_str() : "-",
              row.bound.c_str());
  std::fflush(stdout);
}

json results_json(const KernelBenchArgs& a, const KernelBenchPlan& p, const kernels::Device& device, bool threads_set,
                  const json& env, const std::vector<Row>& rows) {
  json out = {{"version", 1},
              {"env", env},
              {"sax_version", kVersion},
              {"backend", to_string(p.backend)},
              {"device", device.name()},
              {"dtype", p.backend == Backend::cpu ? "float32" : "bfloat16"},
              {"router_skew", p.options.router_skew},
              {"iters", p.iters},
              {"threads", threads_set ? json(p.threads) : json(nullptr)},
              {"warmup", p.warmup},
              {"cluster", a.cluster_file},
              {"model", a.model_file},
              {"layout", a.layout_file},
              {"results", json::array()}};
  for (const Row& r : rows)
    out["results"].push_back({{"op", r.op.name},
                              {"phase", workload::to_string(r.op.phase)},
                              {"shape", {r.op.m, r.op.n, r.op.k}},
                              {"count", r.op.count},
                              {"heads", {r.op.heads, r.op.kv_heads}},
                              {"flops", r.op.flops},
                              {"executed_flops", r.executed},
                              {"bytes_read", r.read},
                              {"bytes_written", r.written},
                              {"time_ms", r.median_ms},
                              {"min_ms", r.min_ms},
                              {"max_ms", r.max_ms},
                              {"tflops", r.tflops},
                              {"gbps", r.gbps},
                              {"peak_share", r.peak_share >= 0 ? json(r.peak_share) : json(nullptr)},
                              {"bound", r.bound.empty() ? json(nullptr) : json(r.bound)},
                              {"expert_rows", r.expert_rows}});
  return out;
}

}  // namespace

// The ops of one micro-batch that `bench kernels` sweeps: compute ops of micro-batch 0 in the
// first layer of each kind (dense, MoE) and outside layers, plus the optimizer; each (name,
// phase, shape) once. Recompute repeats a forward: left out.
std::vector<Op> layer_slice_ops(const workload::Workload& w, const Model& m) {
  std::vector<Op> out;
  std::set<std::tuple<std::string, int, double, double, double, double>> seen;
  std::int64_t dense_layer = -1, moe_layer = -1;
  for (const Op& o : w.ops) {
    if (o.kind != workload::OpKind::compute || o.phase == Phase::recompute) continue;
    if (o.microbatch > 0) continue;
    if (o.layer >= 0) {
      const bool moe = m.moe_layer_pattern[static_cast<std::size_t>(o.layer)];
      std::int64_t& first = moe ? moe_layer : dense_layer;
      if (first < 0) first = o.layer;
      if (o.layer != first) continue;
    }
    if (seen.insert({o.name, static_cast<int>(o.phase), o.m, o.n, o.k, o.count}).second) out.push_back(o);
  }
  return out;
}

void bench_kernels(const KernelBenchArgs& a, const std::vector<std::string>& extras, const ResultWriter& writer) {
  const KernelBenchPlan p = plan_kernel_bench(a, extras);
  // Before the work: a malformed test variable is bad input.
  json env =
      result_env(nullptr, p.backend, {{"cluster", a.cluster_file}, {"model", a.model_file}, {"layout", a.layout_file}});
  std::unique_ptr<kernels::Device> device = kernels::make_device(p.backend);
  std::unique_ptr<kernels::Ops> kops = kernels::make_ops(*device);
  std::vector<OpRunner> runners = make_runners(p, *device, *kops);
  if (!a.json_file.empty()) writer.check(a.json_file);
  if (!a.trace_dir.empty()) prepare_trace_dir("bench kernels", a.trace_dir, 0, writer);
  const bool threads_set = kernels::cpu::set_blas_threads(p.threads);
  env["device"] = device->name();
  const Peak peak = device_peak(p);
  print_header(p, *device, threads_set, peak);
  std::vector<Row> rows;
  std::unique_ptr<StepTracer> tracer;
  if (!a.trace_dir.empty())
    tracer = std::make_unique<StepTracer>(0, runners.size() * static_cast<std::size_t>(p.iters) + 16);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < runners.size(); ++i) {
    rows.push_back(measure(runners[i], *device, p, peak, tracer.get()));
    print_row(rows.back());
    // A progress line with the time left on sweeps that take more than a few seconds.
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (p.sweep && elapsed > 3 && i + 1 < runners.size())
      std::fprintf(stderr, "[%zu/%zu] %.0f s elapsed, about %.0f s left\n", i + 1, runners.size(), elapsed,
                   elapsed / static_cast<double>(i + 1) * static_cast<double>(runners.size() - i - 1));
  }
  if (tracer) {
    writer.write(trace_file(a.trace_dir, 0), tracer->chrome_trace("bench kernels", -1, -1, ClockOffset{}));
    std::printf("# trace: %s (%zu events)\n", trace_file(a.trace_dir, 0).c_str(), tracer->recorder().size());
  }
  if (!a.json_file.empty()) writer.write(a.json_file, results_json(a, p, *device, threads_set, env, rows));
}

}  // namespace sax::harness
