// The default compute efficiencies of a device (docs/explorer.md "Cost-model defaults"): what the
// cost model prices a device at and a paced device runs at (device_time.hpp), each from a
// published measurement with its source beside it in compute_defaults.cpp, none fitted to a step
// time: the GEMM curve from NVIDIA's cuBLAS sweep on A100 scaled to the device's Maximum
// Achievable Matmul FLOPS, the fused-attention curve from FlashAttention-2's forward + backward
// speed; the assumed curves where no source covers the case (the CPU testbed, fp32 and tf32
// models, attention on devices without a published figure).
#pragma once

#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "spec/dtype.hpp"

namespace sax::workload {

// Efficiency (of the work scheduled: the cost model multiplies it by each GEMM's tile and wave
// quantization) by FLOPs of one GEMM or attention product, for a model in `dtype` on `device` of
// a cluster of `backend`.
EfficiencyCurve default_gemm_curve(const Device& device, Backend backend, DType dtype);
// Efficiency of fused attention by the forward's FLOPs of one op, against `peak_flops` (the
// model's dtype's dense peak).
EfficiencyCurve default_attention_curve(const Device& device, Backend backend, DType dtype, double peak_flops);

}  // namespace sax::workload
