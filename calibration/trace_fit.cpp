#include "calibration/trace_fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <set>
#include <tuple>

#include "calibration/runs_fit.hpp"

#ifdef SAX_HAVE_ZLIB
#include <zlib.h>
#endif

#include "sax_version.hpp"
#include "spec/dtype.hpp"
#include "spec/error.hpp"
#include "spec/fields.hpp"
#include "spec/utc.hpp"
#include "workload/device_time.hpp"
#include "workload/layer_ops.hpp"

namespace sax::calibration {

namespace {

enum class Class { gemm, attention, nccl, elementwise, optimizer, memcpy, other };
constexpr const char* kClassNames[] = {"gemm", "attention", "nccl", "elementwise", "optimizer", "memcpy", "other"};

bool has(const std::string& s, const char* word) { return s.find(word) != std::string::npos; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A kernel's class by its name, as the libraries name them (cuBLAS, CUTLASS, cuDNN's implicit
// GEMMs, rocBLAS's Cijk_; FlashAttention, cuDNN's and PyTorch's fused attention; NCCL's kernels;
// PyTorch's elementwise, reduction and normalisation kernels; the fused optimizers).
Class classify(const std::string& name) {
  const std::string n = lower(name);
  if (n.rfind("nccl", 0) == 0) return Class::nccl;
  if (has(n, "flash") || has(n, "fmha") || has(n, "attention") || has(n, "sdpa")) return Class::attention;
  if (has(n, "gemm") || has(n, "cutlass") || has(n, "xmma") || has(n, "cublas") || has(n, "cijk_") || has(n, "nvjet") ||
      has(n, "gemv"))
    return Class::gemm;
  if (has(n, "multi_tensor_apply") || has(n, "adam") || has(n, "sgd")) return Class::optimizer;
  if (has(n, "elementwise") || has(n, "reduce") || has(n, "norm") || has(n, "softmax") || has(n, "bn_") ||
      has(n, "vectorized") || has(n, "index") || has(n, "cat") || has(n, "copy") || has(n, "fill"))
    return Class::elementwise;
  return Class::other;
}

// NCCL's kernel names say the collective: ncclKernel_AllReduce_RING_LL_Sum_float,
// ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL, ncclKernel_SendRecv_...
std::string nccl_op(const std::string& name) {
  for (const auto& [word, op] : {std::pair{"AllReduce", "all_reduce"}, std::pair{"AllGather", "all_gather"},
                                 std::pair{"ReduceScatter", "reduce_scatter"}, std::pair{"SendRecv", "send_recv"},
                                 std::pair{"Broadcast", "broadcast"}, std::pair{"Reduce", "reduce"},
                                 std::pair{"Send", "send_recv"}, std::pair{"Recv", "send_recv"}})
    if (has(name, word)) return op;
  return "other";
}

struct Kernel {
  Class cls = Class::other;
  std::string nccl;
  bool tensor_core_fp32 = false;  // a TF32 GEMM (the name says tf32 or an s1688/s884 tensor op)
  double ts = 0, dur = 0;
  std::int64_t correlation = -1;
};
struct Launch {
  std::int64_t thread = 0;
  double ts = 0;
  std::int64_t correlation = -1;
};
// An operator whose shapes price its kernels: a GEMM's or an elementwise op's.
struct Op {
  std::int64_t thread = 0;
  double ts = 0, end = 0;
  bool gemm = false;
  std::string name;
  std::vector<std::vector<double>> dims;
  std::vector<std::string> types;
};

const std::set<std::string> kGemmOps = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"};
const std::set<std::string> kElementwiseOps = {"aten::add",   "aten::add_", "aten::mul",   "aten::mul_",
                                               "aten::sub",   "aten::sub_", "aten::div",   "aten::div_",
                                               "aten::copy_", "aten::relu", "aten::relu_", "aten::sigmoid"};

std::optional<DType> dtype_of(const std::string& type, bool tensor_core_fp32) {
  if (type == "float") return tensor_core_fp32 ? DType::tf32 : DType::fp32;
  if (type == "c10::Half") return DType::fp16;
  if (type == "c10::BFloat16") return DType::bf16;
  return std::nullopt;
}

double numel(const std::vector<double>& d) {
  double n = 1;
  for (double x : d) n *= x;
  return d.empty() ? 0.0 : n;
}

// The text of a trace: a .gz inflated (up to kMaxTraceBytes), else the file itself.
json parse_trace(const std::string& file, const JsonElementSink& each) {
  if (file.size() < 3 || file.compare(file.size() - 3, 3, ".gz") != 0)
    return load_json_file(file, "/traceEvents", each, kMaxTraceBytes);
#ifdef SAX_HAVE_ZLIB
  gzFile in = gzopen(file.c_str(), "rb");
  if (!in) throw InputError(file, "", "a readable gzip file (cannot open it)");
  std::string text;
  char buf[1 << 16];
  int got = 0;
  while ((got = gzread(in, buf, sizeof buf)) > 0) {
    text.append(buf, static_cast<std::size_t>(got));
    if (text.size() > kMaxTraceBytes) {
      gzclose(in);
      throw InputError(file, "", "a trace of at most " + std::to_string(kMaxTraceBytes >> 20) + " MiB inflated");
    }
  }
  const bool bad = got < 0;
  gzclose(in);
  if (bad) throw InputError(file, "", "a whole gzip file (it is truncated or not gzip)");
  return parse_json_text(text, file, "/traceEvents", each);
#else
  throw InputError(file, "", "a .json trace (this sax was built without zlib: gunzip it first)");
#endif
}

// One event of the stream into the lists that matter; anything malformed that matters is an
// InputError at its pointer.
struct Collector {
  std::string file;
  std::vector<Kernel> kernels;
  std::vector<Launch> launches;
  std::vector<Op> ops;
  std::int64_t events = 0;

  static double number(const json& e, const char* key, const std::string& file, const std::string& at) {
    if (!e.contains(key) || !e[key].is_number()) throw InputError(file, at + "/" + key, "a number");
    return e[key].get<double>();
  }
  static std::int64_t thread_of(const json& e) {
    const auto id = [](const json& v) { return v.is_number_integer() ? v.get<std::int64_t>() : 0; };
    return (e.contains("pid") ? id(e["pid"]) : 0) * 1000003 + (e.contains("tid") ? id(e["tid"]) : 0);
  }
  void operator()(json& e, const std::string& at) {
    ++events;
    if (!e.is_object()) throw InputError(file, at, "a trace event (an object)");
    const auto text = [&e](const char* k) { return e.contains(k) && e[k].is_string() ? e[k].get<std::string>() : ""; };
    if (text("ph") != "X" || !e.contains("cat") || !e["cat"].is_string()) return;
    const std::string cat = e["cat"].get<std::string>();
    const json args = e.contains("args") && e["args"].is_object() ? e["args"] : json::object();
    const std::int64_t corr = args.contains("correlation") && args["correlation"].is_number_integer()
                                  ? args["correlation"].get<std::int64_t>()
                                  : -1;
    if (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset") {
      if (!e.contains("name") || !e["name"].is_string()) throw InputError(file, at + "/name", "the kernel's name");
      Kernel k;
      const std::string name = e["name"].get<std::string>();
      k.cls = cat == "kernel" ? classify(name) : Class::memcpy;
      if (k.cls == Class::nccl) k.nccl = nccl_op(name);
      const std::string n = lower(name);
      k.tensor_core_fp32 = has(n, "tf32") || has(n, "s1688") || has(n, "s884") || has(n, "tensorop_s");
      k.ts = number(e, "ts", file, at), k.dur = number(e, "dur", file, at);
      if (!(k.dur >= 0)) throw InputError(file, at + "/dur", "a duration >= 0 (us)");
      k.correlation = corr;
      kernels.push_back(std::move(k));
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
      if (corr >= 0) launches.push_back({thread_of(e), number(e, "ts", file, at), corr});
    } else if (cat == "cpu_op" && e.contains("name") && e["name"].is_string() && args.contains("Input Dims")) {
      const std::string name = e["name"].get<std::string>();
      const bool gemm = kGemmOps.count(name) > 0;
      if (!gemm && !kElementwiseOps.count(name)) return;
      Op o{thread_of(e), number(e, "ts", file, at), 0, gemm, name, {}, {}};
      o.end = o.ts + number(e, "dur", file, at);
      // A tensor's dimensions; anything else (a scalar, a list of tensors) has none that price it.
      const json& dims = args["Input Dims"];
      if (!dims.is_array()) throw InputError(file, at + "/args/Input Dims", "the inputs' dimensions (an array)");
      for (const json& d : dims) {
        std::vector<double> one;
        for (const json& x : d.is_array() ? d : json::array())
          if (x.is_number()) one.push_back(x.get<double>());
        o.dims.push_back(one.size() == (d.is_array() ? d.size() : 0) ? one : std::vector<double>{});
      }
      if (args.contains("Input type") && args["Input type"].is_array())
        for (const json& t : args["Input type"]) o.types.push_back(t.is_string() ? t.get<std::string>() : "");
      ops.push_back(std::move(o));
    }
  }
};

// Each launch's innermost shaped operator on its thread (the op whose interval holds it): by
// correlation id, the op's index.
std::map<std::int64_t, std::size_t> launching_ops(std::vector<Launch>& launches, const std::vector<Op>& ops) {
  std::vector<std::size_t> order(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) order[i] = i;
  // An op that starts with its parent comes after it (the longer first): the stack's top is the innermost.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::make_tuple(ops[a].thread, ops[a].ts, -ops[a].end) <
           std::make_tuple(ops[b].thread, ops[b].ts, -ops[b].end);
  });
  std::sort(launches.begin(), launches.end(),
            [](const Launch& a, const Launch& b) { return std::tie(a.thread, a.ts) < std::tie(b.thread, b.ts); });
  std::map<std::int64_t, std::size_t> out;
  std::vector<std::size_t> open;  // ops that hold the sweep's time on this thread, outermost first
  std::size_t next = 0;
  std::int64_t thread = 0;
  for (const Launch& l : launches) {
    if (l.thread != thread) open.clear(), thread = l.thread;
    while (next < order.size() && std::tie(ops[order[next]].thread, ops[order[next]].ts) <= std::tie(l.thread, l.ts)) {
      const Op& o = ops[order[next]];
      if (o.thread == l.thread) {
        while (!open.empty() && ops[open.back()].end < o.ts) open.pop_back();
        open.push_back(order[next]);
      }
      ++next;
    }
    while (!open.empty() && ops[open.back()].end < l.ts) open.pop_back();
    if (!open.empty() && ops[open.back()].thread == l.thread) out[l.correlation] = open.back();
  }
  return out;
}

// A GEMM op's datasheet time on `c`'s device: its FLOPs and bytes at the cost model's roofline.
std::optional<double> gemm_datasheet(const Op& o, const Cluster& c, bool tensor_core_fp32) {
  const bool bias = o.name == "aten::addmm" || o.name == "aten::baddbmm";
  const std::size_t a = bias ? 1 : 0;
  if (o.dims.size() < a + 2 || o.types.size() < a + 1) return std::nullopt;
  const auto &x = o.dims[a], &y = o.dims[a + 1];
  const bool batched = o.name == "aten::bmm" || o.name == "aten::baddbmm";
  if (x.size() != (batched ? 3u : 2u) || y.size() != x.size()) return std::nullopt;
  const double b = batched ? x[0] : 1, m = x[x.size() - 2], k = x.back(), n = y.back();
  const auto dtype = dtype_of(o.types[a], tensor_core_fp32);
  if (!dtype || !(m > 0 && n > 0 && k > 0 && b > 0)) return std::nullopt;
  workload::DeviceSpeed speed = workload::DeviceSpeed::of(c.device, Backend::cuda, *dtype);
  if (!(speed.peak_flops > 0)) return std::nullopt;
  const double flops = 2 * b * m * n * k, bytes = dtype_bytes(*dtype) * b * (m * k + k * n + m * n);
  const double q =
      workload::quantization(workload::ComputeKind::gemm, m, n, k, b, workload::Part::forward, speed.sm_count);
  return workload::roofline_time(speed, workload::ComputeKind::gemm, flops, flops, bytes, q);
}

std::optional<double> memory_datasheet(const Op& o, const Cluster& c) {
  if (o.types.empty()) return std::nullopt;
  const auto dtype = dtype_of(o.types[0], false);
  if (!dtype) return std::nullopt;
  double read = 0, largest = 0;
  for (const auto& d : o.dims) read += numel(d), largest = std::max(largest, numel(d));
  if (!(largest > 0)) return std::nullopt;
  const workload::DeviceSpeed speed = workload::DeviceSpeed::of(c.device, Backend::cuda, *dtype);
  return workload::roofline_time(speed, workload::ComputeKind::memory, 0, 0, dtype_bytes(*dtype) * (read + largest), 1);
}

// Time of `spans` (sorted, merged) that [a, b) overlaps.
double overlap(const std::vector<std::pair<double, double>>& spans, double a, double b) {
  auto it = std::upper_bound(spans.begin(), spans.end(), std::pair{a, a},
                             [](const auto& x, const auto& y) { return x.second < y.second; });
  double s = 0;
  for (; it != spans.end() && it->first < b; ++it) s += std::max(0.0, std::min(b, it->second) - std::max(a, it->first));
  return s;
}

}  // namespace

TraceSummary read_trace(const std::string& file, const Cluster& cluster) {
  Collector col{file, {}, {}, {}, 0};
  const json doc = parse_trace(file, [&col](json& e, const std::string& at) { col(e, at); });
  if (!doc.is_object() || !doc.contains("traceEvents"))
    throw InputError(file, "/traceEvents", "a PyTorch profiler (Kineto) trace's events");
  if (!doc.contains("deviceProperties") || !doc["deviceProperties"].is_array() || doc["deviceProperties"].empty() ||
      !doc["deviceProperties"][0].is_object() || !doc["deviceProperties"][0].contains("name") ||
      !doc["deviceProperties"][0]["name"].is_string())
    throw InputError(file, "/deviceProperties",
                     "the GPU's properties (a trace recorded with CUDA activities has them; this one has none)");
  TraceSummary t;
  t.file = file;
  t.device = doc["deviceProperties"][0]["name"].get<std::string>();
  t.generation = gpu_kind(t.device).generation;
  if (col.kernels.empty()) throw InputError(file, "/traceEvents", "GPU kernels (the trace has none)");
  double first = col.kernels[0].ts, last = first;
  std::vector<std::pair<double, double>> compute;
  for (const Kernel& k : col.kernels) {
    first = std::min(first, k.ts), last = std::max(last, k.ts + k.dur);
    t.kernel_s += k.dur * 1e-6;
    KernelTime& c = t.classes[kClassNames[static_cast<int>(k.cls)]];
    c.seconds += k.dur * 1e-6, ++c.kernels;
    if (k.cls == Class::nccl) t.nccl[k.nccl].seconds += k.dur * 1e-6, ++t.nccl[k.nccl].kernels;
    if (k.cls != Class::nccl && k.cls != Class::memcpy) compute.push_back({k.ts, k.ts + k.dur});
  }
  t.span_s = (last - first) * 1e-6;
  std::sort(compute.begin(), compute.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& s : compute)
    if (!merged.empty() && s.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, s.second);
    else
      merged.push_back(s);
  // Shaped kernels: their launching op's shapes at the datasheet's roofline, beside their time
  // (the kernels one op launched together: a split-K GEMM's parts are one).
  const auto by_corr = launching_ops(col.launches, col.ops);
  std::map<std::size_t, double> gemm_s, memory_s;
  std::map<std::size_t, bool> tf32;
  for (const Kernel& k : col.kernels) {
    if (k.cls == Class::nccl) t.nccl_overlap_s += overlap(merged, k.ts, k.ts + k.dur) * 1e-6;
    const auto it = by_corr.find(k.correlation);
    if (it == by_corr.end()) continue;
    const Op& o = col.ops[it->second];
    if (o.gemm && k.cls == Class::gemm) gemm_s[it->second] += k.dur * 1e-6, tf32[it->second] |= k.tensor_core_fp32;
    if (!o.gemm && k.cls == Class::elementwise) memory_s[it->second] += k.dur * 1e-6;
  }
  for (const auto& [i, s] : gemm_s)
    if (const auto d = gemm_datasheet(col.ops[i], cluster, tf32[i]); d && s > 0) t.gemm.push_back({*d, s});
  for (const auto& [i, s] : memory_s)
    if (const auto d = memory_datasheet(col.ops[i], cluster); d && s > 0) t.memory.push_back({*d, s});
  return t;
}

namespace {

// The time-weighted median of datasheet / measured, and its 95 % interval by bootstrap (a fixed
// seed: the same trace gives the same figures).
FittedCoefficient weighted_factor(const std::vector<Shaped>& k) {
  auto median = [](std::vector<std::pair<double, double>> v) {  // (ratio, weight)
    std::sort(v.begin(), v.end());
    double total = 0, run = 0;
    for (const auto& [r, w] : v) total += w;
    for (const auto& [r, w] : v)
      if ((run += w) >= total / 2) return r;
    return v.empty() ? 1.0 : v.back().first;
  };
  std::vector<std::pair<double, double>> v;
  for (const Shaped& s : k) v.push_back({s.datasheet_s / s.measured_s, s.measured_s});
  FittedCoefficient f;
  f.value = std::clamp(median(v), 0.3, 1.5);
  std::mt19937_64 rng(20261206);
  std::uniform_int_distribution<std::size_t> pick(0, v.size() - 1);
  std::vector<double> boots;
  for (int b = 0; b < 400; ++b) {
    std::vector<std::pair<double, double>> s(v.size());
    for (auto& x : s) x = v[pick(rng)];
    boots.push_back(std::clamp(median(s), 0.3, 1.5));
  }
  std::sort(boots.begin(), boots.end());
  f.low = std::min(f.value, boots[10]), f.high = std::max(f.value, boots[389]);
  return f;
}

}  // namespace

TraceFit fit_traces(const std::vector<TraceSummary>& traces) {
  TraceFit fit;
  fit.traces = traces;
  std::vector<Shaped> gemm, memory;
  for (const TraceSummary& t : traces) {
    gemm.insert(gemm.end(), t.gemm.begin(), t.gemm.end());
    memory.insert(memory.end(), t.memory.begin(), t.memory.end());
    fit.device.sources.push_back(t.file);
  }
  // What the traces leave open stays the datasheet's, its interval the bounds' (undetermined).
  fit.device.gemm_scale = fit.device.attention_scale = fit.device.memory_scale = {1, 0.3, 1.5};
  fit.device.op_overhead_us = {0, 0, 100};
  fit.gemm_kernels = static_cast<std::int64_t>(gemm.size());
  fit.memory_kernels = static_cast<std::int64_t>(memory.size());
  if ((fit.gemm_fitted = !gemm.empty())) fit.device.gemm_scale = weighted_factor(gemm);
  if ((fit.memory_fitted = !memory.empty())) fit.device.memory_scale = weighted_factor(memory);
  // Each trace's GEMM time, as the others' factor predicts it.
  for (std::size_t i = 0; traces.size() > 1 && i < traces.size(); ++i) {
    std::vector<Shaped> rest;
    for (std::size_t j = 0; j < traces.size(); ++j)
      if (j != i) rest.insert(rest.end(), traces[j].gemm.begin(), traces[j].gemm.end());
    if (rest.empty() || traces[i].gemm.empty()) continue;
    const double f = weighted_factor(rest).value;
    TraceFit::HeldOut h{traces[i].file, 0, 0, 0};
    for (const Shaped& s : traces[i].gemm) h.datasheet_s += s.datasheet_s, h.measured_s += s.measured_s;
    h.calibrated_s = h.datasheet_s / f;
    fit.held_out.push_back(h);
  }
  return fit;
}

namespace {

void print_trace(const TraceSummary& t) {
  std::printf("\n%s: %s (%s), kernels %.4g s over a span of %.4g s\n", t.file.c_str(), t.device.c_str(),
              to_string(t.generation), t.kernel_s, t.span_s);
  for (const auto& [name, c] : t.classes)
    std::printf("  %-12s %7.1f %%  %10.4g s  %8lld kernels\n", name.c_str(), 100 * c.seconds / t.kernel_s, c.seconds,
                static_cast<long long>(c.kernels));
  for (const auto& [op, c] : t.nccl)
    std::printf("  nccl %-14s %10.4g s  %8lld kernels\n", op.c_str(), c.seconds, static_cast<long long>(c.kernels));
  const auto it = t.classes.find("nccl");
  if (it != t.classes.end() && it->second.seconds > 0)
    std::printf("  NCCL beside compute: %.1f %% of NCCL kernel time ran while a compute kernel did\n",
                100 * t.nccl_overlap_s / it->second.seconds);
  auto shaped = [](const std::vector<Shaped>& v) {
    double d = 0, m = 0;
    for (const Shaped& s : v) d += s.datasheet_s, m += s.measured_s;
    return std::pair{d, m};
  };
  const auto [gd, gm] = shaped(t.gemm);
  const auto [md, mm] = shaped(t.memory);
  std::printf(
      "  shaped: %zu GEMM kernels (%.4g s; the datasheet's roofline %.4g s), %zu elementwise (%.4g s; %.4g s)\n",
      t.gemm.size(), gm, gd, t.memory.size(), mm, md);
}

}  // namespace

void calibrate_traces(const TraceArgs& a, const std::function<void(const std::string&, const json&)>& write) {
  if (a.cluster.empty()) throw UsageError("calibrate --trace: --cluster C, the cluster (its device) the trace ran on");
  const Cluster cluster = load_cluster(a.cluster);
  const GpuGeneration g = gpu_kind(cluster.device.name).generation;
  if (g == GpuGeneration::unknown)
    throw InputError(a.cluster, "/device/name", "a GPU of a known generation (A100, H100, H200, B200)");
  std::vector<TraceSummary> traces;
  for (const std::string& f : a.traces) {
    traces.push_back(read_trace(f, cluster));
    if (traces.back().generation != g)
      throw InputError(f, "/deviceProperties/0/name",
                       "a device of the cluster's generation (" + std::string(to_string(g)) + ": " +
                           cluster.device.name + "), got \"" + traces.back().device + "\"");
    print_trace(traces.back());
  }
  const TraceFit fit = fit_traces(traces);
  auto row = [](const char* what, const FittedCoefficient& v, bool fitted, const char* why) {
    if (fitted)
      std::printf("  %-24s x%.3f (95 %%: %.3f to %.3f)\n", what, v.value, v.low, v.high);
    else
      std::printf("  %-24s the datasheet's (%s)\n", what, why);
  };
  std::printf("\n%s against %s's datasheet (the cost model's roofline):\n", to_string(g), cluster.device.name.c_str());
  row("GEMM curve", fit.device.gemm_scale, fit.gemm_fitted, "no GEMM kernel with its shapes: record_shapes");
  row("HBM fraction", fit.device.memory_scale, fit.memory_fitted, "no elementwise kernel with its shapes");
  row("attention curve", fit.device.attention_scale, false, "no fused attention with its shapes");
  for (const TraceFit::HeldOut& h : fit.held_out)
    std::printf("  held out %s: its GEMMs %.4g s, the datasheet %+.1f %%, the others' factor %+.1f %%\n",
                h.file.c_str(), h.measured_s, 100 * (h.datasheet_s / h.measured_s - 1),
                100 * (h.calibrated_s / h.measured_s - 1));
  if (a.out.empty()) return;
  if (!fit.gemm_fitted && !fit.memory_fitted)
    throw InputError(a.traces.front(), "/traceEvents",
                     "GEMM or elementwise kernels whose operators recorded their shapes (record_shapes=True)");
  Calibration cal;
  cal.provenance.cluster = a.cluster;
  cal.provenance.backend = Backend::cuda;
  cal.provenance.tool = "sax calibrate --trace";
  cal.provenance.sax_version = kVersion;
  cal.provenance.date = utc_now();
  DeviceCompute d = fit.device;
  if (!fit.held_out.empty()) {
    std::vector<double> cv, ds;
    for (const auto& h : fit.held_out)
      cv.push_back(h.calibrated_s / h.measured_s - 1), ds.push_back(h.datasheet_s / h.measured_s - 1);
    set_held_out(d, cv, ds);
  }
  cal.devices[g] = d;
  for (const TraceSummary& t : traces)
    cal.points.push_back({{"kind", "trace"},
                          {"file", t.file},
                          {"device", t.device},
                          {"kernel_s", t.kernel_s},
                          {"gemm_kernels", t.gemm.size()},
                          {"elementwise_kernels", t.memory.size()}});
  write(a.out, to_json(cal));
  std::printf("\n# wrote %s\n", a.out.c_str());
}

}  // namespace sax::calibration
