#include "harness/kernel_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "harness/op_runner.hpp"
#include "harness/sizes.hpp"
#include "harness/stats.hpp"
#include "harness/tracer.hpp"
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
  if (!extras.empty()) throw UsageError("bench kernels: unexpected argument '" + extras.front() + "'");
  const int iters = static_cast<int>(parse_integer(a.iters, "-n/--iters", 1, 1000000));
  const int warmup = static_cast<int>(parse_integer(a.warmup, "-w/--warmup", 0, 1000000));
  const int threads = static_cast<int>(parse_integer(a.threads, "--threads", 1, 1024));
  if (a.backend != "cpu" && a.backend != "cuda")
    throw UsageError("--backend: expected cpu or cuda, got '" + a.backend + "'");
  const Backend backend = a.backend == "cuda" ? Backend::cuda : Backend::cpu;
  OpRunnerOptions options;
  options.router_skew = static_cast<float>(parse_number(a.router_skew, "--router-skew", 0, 100));
  std::optional<Cluster> cluster;
  if (!a.cluster_file.empty()) cluster = load_cluster(a.cluster_file);
  Model model;
  std::vector<Op> ops;
  const bool sweep = a.op.empty();
  if (sweep) {
    if (a.cluster_file.empty() || a.model_file.empty() || a.layout_file.empty())
      throw UsageError(
          "bench kernels: --op gemm with --m --n --k, or --cluster, --model and --layout to sweep a layout");
    if (!a.m.empty() || !a.n.empty() || !a.k.empty()) throw UsageError("--m/--n/--k go with --op gemm");
    model = load_model(a.model_file);
    const Layout layout = load_layout(a.layout_file);
    validate_layout(layout, model, *cluster, a.layout_file);
    const std::int64_t rank = parse_integer(a.rank, "--rank", 0, cluster->world_size() - 1);
    ops = layer_slice_ops(workload::build(*cluster, model, layout, rank), model);
    if (model.num_experts > 0) options.local_experts = model.num_experts / layout.expert_model_parallel_size;
  } else {
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
      o.kv_heads =
          a.kv_heads.empty() ? o.heads : static_cast<double>(parse_integer(a.kv_heads, "--kv-heads", 1, 65536));
      if (static_cast<std::int64_t>(o.heads) % static_cast<std::int64_t>(o.kv_heads) != 0)
        throw UsageError("--kv-heads must divide --heads (grouped-query heads)");
      if (o.n < o.m) throw UsageError("--n (keys) must be at least --m (queries): the queries are the last keys");
    } else if (!a.heads.empty() || !a.kv_heads.empty()) {
      throw UsageError("--heads and --kv-heads go with --op attention");
    }
    o.flops = workload::flops(o);
    ops.push_back(o);
    model.dtype = DType::fp32;
  }
  if (backend == Backend::cuda) {
    const kernels::CudaDevices cuda = kernels::cuda_devices();
    if (cuda.count == 0) throw UsageError("--backend cuda: " + (cuda.compiled ? cuda.reason : "built without CUDA"));
  }
  std::unique_ptr<kernels::Device> device = kernels::make_device(backend);
  std::unique_ptr<kernels::Ops> kops = kernels::make_ops(*device);
  // Sizes are checked (and the memory they need) before anything is allocated or run.
  std::vector<OpRunner> runners;
  const double avail = device->free_bytes();
  for (const Op& o : ops) {
    runners.emplace_back(model, o, *device, *kops, options);
    const double need = runners.back().buffer_bytes();
    if (avail > 0 && need > avail) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "op %s (%s, %s) needs %.2f GiB of buffers, %.2f GiB are free on the %s device",
                    o.name.c_str(), workload::to_string(o.phase), shape_text(o).c_str(), need / (1u << 30),
                    avail / (1u << 30), to_string(backend));
      throw UsageError(buf);
    }
  }
  if (!a.json_file.empty()) writer.check(a.json_file);
  if (!a.trace_dir.empty()) prepare_trace_dir("bench kernels", a.trace_dir, 0, writer);
  const bool threads_set = kernels::cpu::set_blas_threads(threads);
  // The device's peak, from the cluster file: the CPU backend computes in float32, the CUDA
  // backend in bf16.
  double peak_flops = 0, peak_bw = 0;
  if (cluster) {
    const auto& pk = cluster->device.peak_tflops;
    const DType d = backend == Backend::cpu ? DType::fp32 : DType::bf16;
    if (auto it = pk.find(d); it != pk.end()) peak_flops = it->second * 1e12;
    peak_bw = cluster->device.hbm_bandwidth_gbps * 1e9;
  }
  std::printf(
      "# sax bench kernels: %zu op(s), %s, BLAS threads %s, router skew %g, %d iterations after %d warm-up; "
      "time median (min-max)%s\n",
      ops.size(), backend == Backend::cpu ? "CPU float32" : ("CUDA bf16 on " + device->name()).c_str(),
      threads_set ? std::to_string(threads).c_str() : "as the CBLAS decides", options.router_skew, iters, warmup,
      cluster ? ("; peak from " + cluster->name + ": " + std::to_string(peak_flops / 1e12) + " TFLOP/s, " +
                 std::to_string(peak_bw / 1e9) + " GB/s")
                    .c_str()
              : "");
  std::printf("#%-20s %-15s %-22s %10s %19s %9s %8s %7s %s\n", "op", "phase", "shape", "ms", "(min-max)", "TFLOP/s",
              "GB/s", "%peak", "bound");
  std::vector<Row> rows;
  std::unique_ptr<StepTracer> tracer;
  if (!a.trace_dir.empty())
    tracer = std::make_unique<StepTracer>(0, runners.size() * static_cast<std::size_t>(iters) + 16);
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < runners.size(); ++i) {
    OpRunner& r = runners[i];
    r.allocate();
    for (int w = 0; w < warmup; ++w) r.run();
    // Timed by the device's events on its compute stream (CUDA: the GPU's clock; CPU: the host's).
    const Stream stream = device->compute_stream();
    auto t0 = device->make_event(true), t1 = device->make_event(true);
    std::vector<double> ms;
    kernels::Traffic t;
    const char* name = tracer ? profiles::process_names().intern(r.op().name + " " + workload::to_string(r.op().phase) +
                                                                 " " + shape_text(r.op()))
                              : "";
    for (int it = 0; it < iters; ++it) {
      const std::int64_t h0 = tracer ? profiles::now_ns() : 0;
      t0->record(stream);
      t = r.run();
      t1->record(stream);
      t1->synchronize();
      if (tracer) tracer->span(profiles::Category::compute, name, h0, profiles::now_ns());
      ms.push_back(t1->elapsed_us(*t0) / 1e3);
    }
    Row row;
    row.op = r.op();
    row.expert_rows = r.expert_rows();
    row.median_ms = median(ms);
    row.min_ms = *std::min_element(ms.begin(), ms.end());
    row.max_ms = *std::max_element(ms.begin(), ms.end());
    const double s = row.median_ms / 1e3, bytes = t.read + t.written;
    row.read = t.read, row.written = t.written, row.executed = t.flops;
    row.tflops = row.op.flops / s / 1e12;
    row.gbps = bytes / s / 1e9;
    if (peak_flops > 0 && peak_bw > 0) {
      const double tf = row.op.flops / peak_flops, tb = bytes / peak_bw;
      row.peak_share = std::max(tf, tb) / s;
      row.bound = tf >= tb ? "flops" : "bytes";
    }
    r.release();
    std::printf(
        " %-20s %-15s %-22s %10.3f %9.3f-%-9.3f %9.4f %8.2f %6s %s\n", row.op.name.c_str(),
        workload::to_string(row.op.phase), shape_text(row.op).c_str(), row.median_ms, row.min_ms, row.max_ms,
        row.tflops, row.gbps,
        row.peak_share >= 0 ? (std::to_string(static_cast<int>(row.peak_share * 100 + 0.5)) + "%").c_str() : "-",
        row.bound.c_str());
    std::fflush(stdout);
    rows.push_back(row);
    // A progress line with the time left on sweeps that take more than a few seconds.
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (sweep && elapsed > 3 && i + 1 < runners.size())
      std::fprintf(stderr, "[%zu/%zu] %.0f s elapsed, about %.0f s left\n", i + 1, runners.size(), elapsed,
                   elapsed / static_cast<double>(i + 1) * static_cast<double>(runners.size() - i - 1));
  }
  if (tracer) {
    writer.write(trace_file(a.trace_dir, 0), tracer->chrome_trace("bench kernels", -1, -1, ClockOffset{}));
    std::printf("# trace: %s (%zu events)\n", trace_file(a.trace_dir, 0).c_str(), tracer->recorder().size());
  }
  if (a.json_file.empty()) return;
  json out = {{"version", 1},
              {"sax_version", kVersion},
              {"backend", to_string(backend)},
              {"device", device->name()},
              {"dtype", backend == Backend::cpu ? "float32" : "bfloat16"},
              {"router_skew", options.router_skew},
              {"iters", iters},
              {"threads", threads_set ? json(threads) : json(nullptr)},
              {"warmup", warmup},
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
  writer.write(a.json_file, out);
}

}  // namespace sax::harness
