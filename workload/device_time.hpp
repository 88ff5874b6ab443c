// What a device takes for one compute op: the one definition the cost model prices a step with
// (explorer/cost_model.hpp's compute terms) and a paced device runs at (harness/internal/pacer.hpp). Each
// op at its roofline: its FLOPs at the peak times the efficiency its size reaches (the GEMM curve
// for GEMMs and unfused attention's products, times their tile and wave quantization; the
// attention curve for fused attention; each curve read at the op's forward FLOPs), or its bytes at
// the memory bandwidth reached, the longer; plus the device's fixed cost per op.
#pragma once

#include <vector>

#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "workload/layer_ops.hpp"
#include "workload/workload.hpp"

namespace sax::workload {

struct DeviceSpeed {
  double peak_flops = 0;  // dense FLOP/s of the model's dtype (bf16 for an fp8 model: fp8 below)
  // An fp8 model runs its Transformer Engine linears' GEMMs in fp8 (LayerOp::fp8) at this peak
  // and curve; everything else in bf16 at the ones above. 0 for other models.
  double fp8_peak_flops = 0;
  EfficiencyCurve fp8_gemm;
  double hbm_bytes_per_s = 0;
  EfficiencyCurve gemm, attention;
  // The device's SMs: a GEMM's or attention product's efficiency is the GEMM curve's at its
  // FLOPs × its tile and wave quantization on them (quantization()); 0 (not known, the CPU
  // testbed): factor 1.
  int sm_count = 0;
  double hbm_efficiency = 0.8;
  double op_overhead_s = 0;  // every op's fixed cost

  // log10 of the curves' points, worked out once (empty: EfficiencyCurve::at works them out per
  // call).
  std::vector<double> gemm_log10, attention_log10, fp8_gemm_log10;
  void prepare_curves();

  // The datasheet device: its peak for `dtype` and memory bandwidth, the declared efficiencies
  // where it declares them (flat), else the default curves (compute_defaults.hpp) and HBM fraction.
  static DeviceSpeed of(const Device& device, Backend backend, DType dtype);

 private:
  static DeviceSpeed of_dtype(const Device& device, Backend backend, DType dtype);
};

double gemm_time(const DeviceSpeed& speed, double flops, bool fp8 = false);
// An fp8 linear's casts of `bytes` (LayerOp::cast_forward / cast_backward): their own kernel.
double cast_time(const DeviceSpeed& speed, double bytes);
double attention_time(const DeviceSpeed& speed, double flops);
// The roofline of one op of `kind`: `flops` at the efficiency reached at `forward_flops` (the
// op's forward, which sets its size) times `quantization` (the part's tile and wave
// quantization; 1 for fused attention), or `bytes` at the HBM rate reached, the longer; plus the
// fixed cost per op.
double roofline_time(const DeviceSpeed& speed, ComputeKind kind, double flops, double forward_flops, double bytes,
                     double quantization, bool fp8 = false);
// One part of a layer op at its roofline, its quantization on speed.sm_count from its shape.
double op_time(const DeviceSpeed& speed, const LayerOp& op, Part part, double bytes_per_element);
// One compute op as the workload lists it (its FLOPs and bytes, its phase's part): the same
// figure as the layer op it was built from.
double op_time(const DeviceSpeed& speed, const Op& op);

}  // namespace sax::workload
