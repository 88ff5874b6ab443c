#include "workload/device_time.hpp"

#include <algorithm>
#include <cmath>

#include "workload/compute_defaults.hpp"

namespace sax::workload {

namespace {

const double* logs_of(const EfficiencyCurve& curve, const std::vector<double>& log10) {
  return log10.size() == curve.points.size() ? log10.data() : nullptr;
}

EfficiencyCurve flat(double efficiency) { return {{{1.0, efficiency}}, {}}; }

}  // namespace

void DeviceSpeed::prepare_curves() {
  auto logs = [](const EfficiencyCurve& c) {
    std::vector<double> v;
    for (const EfficiencyPoint& pt : c.points) v.push_back(std::log10(pt.flops));
    return v;
  };
  gemm_log10 = logs(gemm);
  attention_log10 = logs(attention);
  fp8_gemm_log10 = logs(fp8_gemm);
}

DeviceSpeed DeviceSpeed::of(const Device& device, Backend backend, DType dtype) {
  if (dtype == DType::fp8) {  // bf16 for all but the fp8 GEMMs
    DeviceSpeed s = of_dtype(device, backend, DType::bf16);
    const DeviceSpeed f = of_dtype(device, backend, DType::fp8);
    s.fp8_peak_flops = f.peak_flops;
    s.fp8_gemm = f.gemm;
    return s;
  }
  return of_dtype(device, backend, dtype);
}

DeviceSpeed DeviceSpeed::of_dtype(const Device& device, Backend backend, DType dtype) {
  DeviceSpeed s;
  s.peak_flops = device.peak_tflops_for(dtype) * 1e12;
  s.hbm_bytes_per_s = device.hbm_bandwidth_gbps * 1e9;
  s.sm_count = device.sm_count;
  s.op_overhead_s = device.op_overhead_us * 1e-6;
  if (device.efficiency) {
    s.gemm = flat(device.efficiency->gemm);
    s.attention = flat(device.efficiency->attention);
    s.hbm_efficiency = device.efficiency->memory;
  } else {
    s.gemm = default_gemm_curve(device, backend, dtype);
    s.attention = default_attention_curve(device, backend, dtype, s.peak_flops);
  }
  return s;
}

double gemm_time(const DeviceSpeed& p, double flops, bool fp8) {
  if (!(flops > 0)) return 0.0;
  if (fp8 && p.fp8_peak_flops > 0)
    return flops / (p.fp8_peak_flops * p.fp8_gemm.at(flops, logs_of(p.fp8_gemm, p.fp8_gemm_log10)));
  return flops / (p.peak_flops * p.gemm.at(flops, logs_of(p.gemm, p.gemm_log10)));
}

double attention_time(const DeviceSpeed& p, double flops) {
  return flops > 0 ? flops / (p.peak_flops * p.attention.at(flops, logs_of(p.attention, p.attention_log10))) : 0.0;
}

double roofline_time(const DeviceSpeed& p, ComputeKind kind, double flops, double forward_flops, double bytes,
                     double quantization, bool fp8) {
  const double memory = bytes / (p.hbm_bytes_per_s * p.hbm_efficiency);
  if (kind == ComputeKind::memory || !(forward_flops > 0)) return memory + p.op_overhead_s;
  const double once =
      kind == ComputeKind::attention ? attention_time(p, forward_flops) : gemm_time(p, forward_flops, fp8);
  return std::max(flops / forward_flops * once / quantization, memory) + p.op_overhead_s;
}

// An fp8 linear's casts: their own kernel, memory-bound.
double cast_time(const DeviceSpeed& p, double bytes) {
  return bytes > 0 ? bytes / (p.hbm_bytes_per_s * p.hbm_efficiency) + p.op_overhead_s : 0.0;
}

// Fused attention runs the pairs its window keeps (attended_share): its FLOPs, and the curve read
// at them, are the causal core's times that share. Other ops (an unfused core's products too:
// they compute every score, the mask only zeroes some) run their FLOPs.
static double executed_share(ComputeKind kind, double sq, double sk, double window) {
  return kind == ComputeKind::attention ? attended_share(sq, sk, window) : 1.0;
}

double op_time(const DeviceSpeed& p, const LayerOp& o, Part part, double e) {
  const OpCost cost = op_cost(o, part, e);
  const double share = executed_share(o.kind, o.m, o.n, o.window);
  return roofline_time(p, o.kind, share * cost.flops, share * op_cost(o, Part::forward, e).flops,
                       cost.bytes_read + cost.bytes_written, quantization(o, part, p.sm_count), o.fp8) +
         cast_time(p, cast_bytes(o, part));
}

double op_time(const DeviceSpeed& p, const Op& o) {
  Op forward = o;
  forward.phase = Phase::forward;
  const double batch = o.compute == ComputeKind::product ? o.count * o.heads : o.count;
  const double share = executed_share(o.compute, o.m, o.n, o.window);
  return roofline_time(p, o.compute, share * o.flops, share * flops(forward), o.bytes_read + o.bytes_written,
                       quantization(o.compute, o.m, o.n, o.k, batch, part_of(o.phase), p.sm_count), o.fp8) +
         cast_time(p, o.cast_bytes);
}

}  // namespace sax::workload
