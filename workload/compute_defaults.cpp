#include "workload/compute_defaults.hpp"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace sax::workload {

namespace {

// Compute efficiency defaults (docs/explorer.md "Cost-model defaults"; none is fitted to a step time).
//
// GEMMs: the shape by FLOPs of NVIDIA's published cuBLAS sweep, BF16 on A100 SXM4, m = n = k
// from 256 to 8192 in steps of 256 (Figure 6 of "CUDA 11 Features Revealed",
// https://developer.nvidia.com/blog/cuda-11-features-revealed/; TFLOP/s read off the figure,
// about ±5): each point's efficiency divided by its own tile and wave quantization on A100's 108
// SMs (the curve the cost model multiplies by the quantization, as the calibrator fits it) and
// binned as `sax calibrate` bins its measurements (EfficiencyCurve::from_samples).
constexpr double kA100Bf16PeakTflops = 312;
constexpr int kA100Sms = 108;
constexpr std::array<double, 32> kA100CublasBf16Tflops = {
    3,   28,  65,  88,  152, 149, 202, 195, 244, 230, 238, 235, 248, 242, 260, 260,   // 256 ... 4096
    246, 275, 265, 260, 258, 282, 278, 276, 276, 276, 280, 281, 283, 285, 287, 291};  // 4352 ... 8192
// Its top scaled to the device's Maximum Achievable Matmul FLOPS: the best matmul TFLOP/s a
// brute-force shape search measured (Stas Bekman, ml-engineering, "Maximum Achievable Matmul
// FLOPS comparison table", https://github.com/stas00/ml-engineering/blob/master/compute/
// accelerator/README.md#maximum-achievable-matmul-flops-comparison-table), over the datasheet's
// dense peak, BF16 (fp16 alike) and FP8; 0 where the table has no figure. Matched in order by
// the device's name (GH200 and GB200 before H200 and B200).
struct MatmulCeiling {
  const char* name;
  double bf16, fp8;
};
constexpr MatmulCeiling kMamf[] = {
    {"GH200", 828.6 / 989, 1535.0 / 1979},  {"GB200", 1822.0 / 2500, 3615.6 / 5000},
    {"H200", 794.5 / 989, 1453.4 / 1979},  // BF16: "H200 is the same" as H100 SXM
    {"H100", 794.5 / 989, 1402.6 / 1979},   {"B300", 1769.0 / 2250, 3353.3 / 4500},
    {"B200", 1745.0 / 2250, 3432.5 / 4500}, {"A100", 271.2 / 312, 0.0},
};
// The table's H100 and A100 rows are SXM parts (A100 PCIe: 252.9 of 312); other H100s have none.
double matmul_ceiling(const std::string& device, DType dtype) {
  const GpuKind kind = gpu_kind(device);
  if (kind.generation == GpuGeneration::a100 && kind.pcie) return dtype == DType::fp8 ? 0.0 : 252.9 / 312;
  if (kind.generation == GpuGeneration::h100 && !kind.sxm) return 0.0;
  for (const MatmulCeiling& c : kMamf)
    if (device.find(c.name) != std::string::npos) return dtype == DType::fp8 ? c.fp8 : c.bf16;
  return 0.0;
}

// Fused attention: FlashAttention-2's published forward + backward speed, causal mask, head
// dimension 128, 16 heads (hidden 2048), batch × sequence = 16K tokens, at sequence 512, 1K, 2K,
// 4K, 8K, 16K (https://github.com/Dao-AILab/flash-attention, README benchmark figures
// assets/flash2_a100_fwd_bwd_benchmark.png, A100 80GB SXM4, and flash2_h100_fwd_bwd_benchmark.png,
// H100 80GB SXM5; the FLOPs as benchmarks/benchmark_flash_attention.py counts them: forward
// 4·b·s²·h·d halved for the causal mask, backward 2.5 × forward). sax counts fused attention
// unhalved, forward 4·b·s²·h·d and backward twice (workload/README.md): a step at FA-2's X TFLOP/s
// is 12/7 · X TFLOP/s of sax's FLOPs, keyed by the forward's FLOPs of one op.
constexpr std::array<double, 6> kFa2A100CausalTflops = {99, 133, 155, 173, 182, 189};
constexpr std::array<double, 6> kFa2H100CausalTflops = {163, 221, 265, 294, 308, 328};

// The assumed curves of before (docs/explorer.md: "assumed"), kept where no source covers the case: the
// CPU testbed (OpenBLAS; calibration measures it), fp32/tf32 models, attention on other devices.
constexpr std::array<EfficiencyPoint, 5> kAssumedGemm = {
    {{1e8, 0.20}, {1e9, 0.40}, {1e10, 0.60}, {1e11, 0.72}, {1e12, 0.75}}};
constexpr std::array<EfficiencyPoint, 5> kAssumedAttention = {
    {{1e8, 0.15}, {1e9, 0.25}, {1e10, 0.35}, {1e11, 0.45}, {1e12, 0.50}}};
EfficiencyCurve curve_of(const std::array<EfficiencyPoint, 5>& points) { return {{points.begin(), points.end()}, {}}; }

bool tensor_core_dtype(DType d) { return d == DType::bf16 || d == DType::fp16 || d == DType::fp8; }

}  // namespace

EfficiencyCurve default_gemm_curve(const Device& device, Backend backend, DType dtype) {
  if (backend != Backend::cuda || !tensor_core_dtype(dtype)) return curve_of(kAssumedGemm);
  std::vector<EfficiencyPoint> samples;
  for (std::size_t i = 0; i < kA100CublasBf16Tflops.size(); ++i) {
    const double size = 256.0 * static_cast<double>(i + 1);
    samples.push_back({2 * size * size * size,
                       kA100CublasBf16Tflops[i] / kA100Bf16PeakTflops / gemm_quantization(size, size, 1, kA100Sms)});
  }
  EfficiencyCurve c = EfficiencyCurve::from_samples(samples);
  double top = 0;
  for (const EfficiencyPoint& p : c.points) top = std::max(top, p.efficiency);
  if (const double ceiling = matmul_ceiling(device.name, dtype); ceiling > 0)
    for (EfficiencyPoint& p : c.points) p.efficiency *= ceiling / top;
  return c;
}

EfficiencyCurve default_attention_curve(const Device& device, Backend backend, DType dtype, double peak_flops) {
  const GpuKind kind = gpu_kind(device.name);
  const std::array<double, 6>* fa2 = nullptr;
  if (kind.generation == GpuGeneration::a100)
    fa2 = &kFa2A100CausalTflops;
  else if (kind.hopper())
    fa2 = &kFa2H100CausalTflops;
  if (backend != Backend::cuda || !tensor_core_dtype(dtype) || !fa2 || !(peak_flops > 0))
    return curve_of(kAssumedAttention);
  EfficiencyCurve c;
  constexpr double kTokens = 16384, kHeads = 16, kHeadDim = 128;
  for (std::size_t i = 0; i < fa2->size(); ++i) {
    const double seq = 512.0 * static_cast<double>(1u << i);
    c.points.push_back({4 * kTokens * seq * kHeads * kHeadDim, 12.0 / 7.0 * (*fa2)[i] * 1e12 / peak_flops});
  }
  return c;
}

}  // namespace sax::workload
