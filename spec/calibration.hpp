// The calibration file: what `sax calibrate` fits from testbed sweeps and the explorer's cost
// model reads instead of datasheet values.
//
// - links: per link class (intra_node, intra_building, cross_building) and priced collective op
//   (kPricedCollOps: all_reduce, all_gather, reduce_scatter, all_to_all, send_recv), the α-β
//   coefficients of the op's algorithm: α = latency per algorithm step (µs), β = time per byte
//   of the algorithm's bus traffic (ns/byte = 1 / busbw in GB/s); the op's time follows from
//   ring_algorithm (spec/collective.hpp). An entry holds up to three regimes (size ranges, each its
//   own α and β, spec/alpha_beta.hpp); its own alpha_us and beta_ns_per_byte are the last's.
// - compute: per op class (gemm, attention) an efficiency curve: points (FLOPs of one op,
//   achieved / the dtype's datasheet peak), interpolated linearly in log10(FLOPs), clamped at
//   the ends; `hbm_efficiency` is achieved / the datasheet's HBM bandwidth for memory-bound ops.
//   Both are fractions on a device that matches its datasheet, above 1 (at most 100) where the
//   datasheet figure is below what the device does (the CPU testbed's nominal figures).
// - overlap_slowdown: how much slower compute runs while communication overlaps it (0.1 = 10 %).
// - call_skew_us: per link class, on a paced device, how much later than a rank the last member of
//   its group calls a blocking op after compute, on average (the ranks wake from their ops'
//   deadlines apart, and from the last call's end as its group's members saw it): what `sax run`
//   counts as idle per blocking call, and the cost model prices as such.
// - cross_oversubscription: the cross-building link's oversubscription as the cost model uses
//   it (explorer/cost_model.cpp: crossing groups that put more than 1/oversubscription of a
//   building's devices on the boundary share it), fitted from groups crossing alone and at once.
// - devices: per GPU generation (spec/cluster.hpp gpu_kind: "a100", "h100" ...), what `sax
//   calibrate --runs` fitted from measured step times: factors on the datasheet's GEMM curve,
//   attention curve and HBM fraction, and a fixed cost per op added to the device's, each with its
//   95 % interval, the runs and sources it came from, and its leave-one-source-out error. The cost
//   model applies them to any cluster whose device is of that generation.
// - points: the raw measurements the fits came from (kept as measured; not read by the model).
// - every fitted entry carries its fit quality (r2, max_rel_error, samples; a link entry also per
//   regime, the median and p90 relative error, and the outliers); `provenance` says where the
//   numbers came from.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spec/alpha_beta.hpp"
#include "spec/cluster.hpp"
#include "spec/collective.hpp"
#include "spec/fields.hpp"

namespace sax {

struct FitQuality {
  double r2 = 0;             // coefficient of determination of the fit, 0..1
  double max_rel_error = 0;  // worst |predicted − measured| / measured over the samples
  std::int64_t samples = 0;  // measurements the fit used
};

// One size range of a link entry's α-β (spec/alpha_beta.hpp's regimes, in the file's units).
struct LinkRegime {
  std::int64_t from_bytes = 0;  // the op's size (nccl-tests') where it starts; the first prices every size below
  double alpha_us = 0;          // per algorithm step
  double beta_ns_per_byte = 0;  // per byte of bus traffic (= 1 / busbw GB/s)
  FitQuality fit;               // over the points of its range
};

// A measured point the robust fit discounted: its size and group, its residual and why.
struct FitOutlier {
  std::int64_t bytes = 0;
  std::int64_t ranks = 0;
  double time_us = 0;
  double rel_residual = 0;  // (predicted − measured) / measured
  std::string why;
};

struct AlphaBeta {
  // The large-message (last) regime's, which readers that know no regimes price every size at.
  double alpha_us = 0;          // per algorithm step
  double beta_ns_per_byte = 0;  // per byte of bus traffic (= 1 / busbw GB/s)
  FitQuality fit;               // over every point, each in its regime
  // Ascending in from_bytes, at most kMaxLinkRegimes; a file without them reads as one regime of
  // the entry's α and β, and an entry made in code without them is that one regime.
  std::vector<LinkRegime> regimes;
  double rel_residual_p50 = 0, rel_residual_p90 = 0;  // of |predicted − measured| / measured, every point
  std::vector<FitOutlier> outliers;
  // The regimes in the α-β function's units (s per step, s per byte), for alpha_beta_s.
  std::vector<AlphaBetaRegime> regimes_s() const;
  // β of every regime divided by `factor` (a shared link's fit turned into the link's own).
  void divide_beta(double factor);
};

struct EfficiencyPoint {
  double flops = 0;       // FLOPs of one op
  double efficiency = 0;  // achieved / the datasheet's peak, in (0, 100]
};

struct EfficiencyCurve {
  std::vector<EfficiencyPoint> points;  // ascending in flops
  FitQuality fit;
  // Efficiency of one op of `flops` FLOPs: linear in log10(flops) between points, clamped.
  double at(double flops) const { return at(flops, nullptr); }
  // The same, given the points' log10(flops) (log10_points[i] = log10(points[i].flops)), so that
  // a hot loop takes one logarithm per call instead of three; nullptr: worked out here.
  double at(double flops, const double* log10_points) const;
  // The curve through (FLOPs of one op, efficiency) samples as `sax calibrate` fits it and the
  // datasheet defaults are derived from published measurements: the median efficiency per half
  // decade of FLOPs (samples binned by ⌊2·log10 FLOPs⌋), at the geometric mean of the half
  // decade's FLOPs, each clamped to [1e-9, 100]; samples without positive FLOPs left out. No fit
  // quality (the caller's).
  static EfficiencyCurve from_samples(const std::vector<EfficiencyPoint>& samples);
};

// Tile and wave quantization of a tensor-core GEMM, as NVIDIA's "Matrix Multiplication Background
// User's Guide" describes it (https://docs.nvidia.com/deeplearning/performance/
// dl-performance-matrix-multiplication/index.html, §3 "Dimension Quantization Effects"): cuBLAS
// computes an M×N output in thread-block tiles, M and N rounded up to whole tiles (tile
// quantization), and runs the tiles in waves of one per SM, their number rounded up to whole
// waves (wave quantization). The fraction of the work scheduled that is useful, for `batch`
// products of m×n outputs in one launch on `sm_count` SMs:
//     batch·m·n / (⌈batch·⌈m/a⌉·⌈n/b⌉ / sm_count⌉ · sm_count · a·b)
// with the tile a×b the one of the guide's typical cuBLAS tiles (§2.3: 256×128 and 128×256 the
// most efficient, 128×128, 256×64 and 64×256, 128×64 and 64×128, 64×64 the least) that schedules
// the least work. An efficiency curve measured on shapes gives the efficiency of the work
// scheduled; the cost model multiplies it by this factor (explorer/cost_model.cpp), and the
// calibrator divides each measured point by it (calibration/sweep.cpp). 1 where sm_count is 0
// (not known: the CPU testbed) or the shape is empty. No allocation.
double gemm_quantization(double m, double n, double batch, int sm_count);

struct CalibrationProvenance {
  std::string cluster;  // the cluster file's name it was measured on
  Backend backend = Backend::cpu;
  std::string emulation;  // how building boundaries were emulated (software, kernel shaping, none)
  std::string date;
  std::string tool;
  // Where and with what (empty when not known, e.g. fitted from files): the cluster file's
  // FNV-1a hash, the hosts, sax's and the communication library's versions.
  std::string cluster_hash, sax_version, library;
  std::vector<std::string> hosts;
};

struct Oversubscription {
  double value = 1;          // >= 1
  double alone_us = 0;       // the median time of one group crossing alone at the largest sizes
  double together_us = 0;    // ... of every group crossing at once
  std::int64_t samples = 0;  // sizes compared
};

// On a paced cluster (spec/cluster.hpp DeviceEmulation): the fastest device of the kind the
// cluster declares (its efficiencies and fixed cost per op) that the host held with every rank
// computing at once, each op's p99 within its time: the declared peak and memory bandwidth each
// scaled by what its tightest op allowed, times a margin for waking late. Pacing never changes
// what the explorer prices; this says which paced device the host can carry.
struct HeldDevice {
  double peak_tflops = 0, hbm_bandwidth_gbps = 0;  // the fastest held, margin included
  double declared_peak_tflops = 0, declared_hbm_bandwidth_gbps = 0;
  double margin = 1;                               // what the figures keep of the p99 bound
  std::string peak_limited_by, memory_limited_by;  // the op that set each ("" none)
  std::int64_t ops = 0;                            // ops measured
  bool holds_declared() const {
    return peak_tflops >= declared_peak_tflops && hbm_bandwidth_gbps >= declared_hbm_bandwidth_gbps;
  }
};

// One coefficient of a device's compute fitted from runs: its value and 95 % interval.
struct FittedCoefficient {
  double value = 0, low = 0, high = 0;
};

// What measured runs say about one GPU generation's compute (Calibration::devices).
struct DeviceCompute {
  FittedCoefficient gemm_scale{1, 1, 1}, attention_scale{1, 1, 1}, memory_scale{1, 1, 1}, op_overhead_us{0, 0, 0};
  std::int64_t runs = 0;
  std::vector<std::string> sources;
  // Over the sources, each predicted by a fit without it (`held_out` of them; 0: no figure):
  // mean and max |error| and the signed mean of the step time (predicted / measured − 1), with
  // the datasheet's beside them.
  std::int64_t held_out = 0;
  double cv_mean_pct = 0, cv_max_pct = 0, cv_signed_pct = 0;
  double datasheet_mean_pct = 0, datasheet_max_pct = 0, datasheet_signed_pct = 0;
};

struct Calibration {
  int version = 1;
  CalibrationProvenance provenance;
  // [link class][op], set for priced ops only; absent entries fall back to the cluster's datasheet.
  std::array<std::array<std::optional<AlphaBeta>, kNumCollOps>, 3> links;
  std::optional<EfficiencyCurve> gemm, attention;
  std::optional<double> hbm_efficiency;
  std::optional<double> overlap_slowdown;
  std::array<std::optional<double>, 3> call_skew_us;  // by LinkClass
  std::optional<Oversubscription> cross_oversubscription;
  std::optional<HeldDevice> held_device;           // a paced cluster's, with --model
  std::map<GpuGeneration, DeviceCompute> devices;  // from runs (calibrate --runs)
  json points = json::array();
};

Calibration read_calibration(const json& value, const std::string& file);
Calibration load_calibration(const std::string& file);
json to_json(const Calibration& calibration);

}  // namespace sax
