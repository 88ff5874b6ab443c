// The calibration file: what `sax calibrate` fits from testbed sweeps and the explorer's cost
// model reads instead of datasheet values.
//
// - links: per link class (intra_node, intra_building, cross_building) and collective op
//   (all_reduce, all_gather, reduce_scatter, all_to_all, send_recv), the α-β coefficients of the
//   op's algorithm: α = latency per algorithm step (µs), β = seconds per byte of the
//   algorithm's bus traffic (ns/byte = 1 / busbw in GB/s). A ring all-reduce of S bytes over n
//   ranks then takes 2(n−1)·α + 2(n−1)/n·S·β, as nccl-tests' busbw convention implies.
// - compute: per op class (gemm, attention) an efficiency curve: points (FLOPs of one op,
//   achieved fraction of the dtype's peak), interpolated linearly in log10(FLOPs), clamped at
//   the ends; `hbm_efficiency` is the fraction of HBM bandwidth memory-bound ops reach.
// - overlap_slowdown: how much slower compute runs while communication overlaps it (0.1 = 10 %).
// - every fitted entry carries its fit quality (r2, max_rel_error, samples); `provenance` says
//   where the numbers came from.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec/cluster.hpp"
#include "spec/fields.hpp"

namespace sax {

enum class CollectiveOp { all_reduce, all_gather, reduce_scatter, all_to_all, send_recv };
constexpr CollectiveOp kCollectiveOps[] = {CollectiveOp::all_reduce, CollectiveOp::all_gather,
                                           CollectiveOp::reduce_scatter, CollectiveOp::all_to_all,
                                           CollectiveOp::send_recv};
const char* to_string(CollectiveOp op);

struct FitQuality {
  double r2 = 0;             // coefficient of determination of the fit, 0..1
  double max_rel_error = 0;  // worst |predicted − measured| / measured over the samples
  std::int64_t samples = 0;  // measurements the fit used
};

struct AlphaBeta {
  double alpha_us = 0;          // per algorithm step
  double beta_ns_per_byte = 0;  // per byte of bus traffic (= 1 / busbw GB/s)
  FitQuality fit;
};

struct EfficiencyPoint {
  double flops = 0;       // FLOPs of one op
  double efficiency = 0;  // achieved / peak, in (0, 1]
};

struct EfficiencyCurve {
  std::vector<EfficiencyPoint> points;  // ascending in flops
  FitQuality fit;
  // Efficiency of one op of `flops` FLOPs: linear in log10(flops) between points, clamped.
  double at(double flops) const;
};

struct CalibrationProvenance {
  std::string cluster;    // the cluster file's name it was measured on
  std::string backend;    // cpu | cuda
  std::string emulation;  // how building boundaries were emulated (software, kernel shaping, none)
  std::string date;
  std::string tool;
};

struct Calibration {
  int version = 1;
  CalibrationProvenance provenance;
  // [link class][op]; absent entries fall back to the cluster's datasheet values.
  std::array<std::array<std::optional<AlphaBeta>, 5>, 3> links;
  std::optional<EfficiencyCurve> gemm, attention;
  std::optional<double> hbm_efficiency;
  std::optional<double> overlap_slowdown;
};

Calibration read_calibration(const json& value, const std::string& file);
Calibration load_calibration(const std::string& file);
json to_json(const Calibration& calibration);

}  // namespace sax
