// CostParams: the datasheet figures with the published defaults of what NCCL reaches of a link,
// and what a calibration file overrides.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "explorer/cost_model.hpp"

namespace sax::explorer {

namespace {

// What NCCL reaches of a link's datasheet bandwidth, as nccl-tests' busbw (docs/explorer.md "Cost-model
// defaults"; none of these is fitted to a step time). Each is the ring's unless it says so.
// NVLink 4 (H100/H200, 450 GB/s per direction): ring 370 GB/s ("~20 % protocol overhead",
// https://github.com/NVIDIA/nccl-tests/issues/212; 365–370 on 2–8 GPUs,
// https://github.com/NVIDIA/nccl/issues/1455).
constexpr double kNvlink4RingBusbwGbps = 370, kNvlink4Gbps = 450;
// NVLS all-reduce on 8 H100s: busbw ~480 GB/s (same two threads; 476 in
// https://github.com/NVIDIA/nccl-tests/issues/290).
constexpr double kNvlink4NvlsAllReduceBusbwGbps = 480;
// NVLink 3 (A100, 300 GB/s per direction): NCCL's tuner caps sm80 busbw at 235 GB/s
// (https://github.com/NVIDIA/nccl/blob/master/src/graph/tuning.cc, `compCap80`); 8×A100
// all_reduce_perf 230–250 (https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests).
constexpr double kNvlink3RingBusbwGbps = 235, kNvlink3Gbps = 300;
// InfiniBand NDR 400 Gb/s (50 GB/s): 46–48 GB/s per NIC (NVIDIA, the nccl-tests thread cited above);
// taken as the fraction of every network link's rate (HDR and the cross-building links alike).
constexpr double kNetRingBusbwOfRate = 47.0 / 50.0;
// NCCL's tuner prices a tree at 0.9 of the ring's busbw (tuning.cc: `busBw*.9` for TREE).
constexpr double kTreeBusbwOfRing = 0.9;

// The ring's achievable fraction of a link and the other algorithms' β scales, by backend and
// device: the CPU testbed's Open MPI runs rings at the emulated rate, nothing else.
struct AlgorithmDefaults {
  double ring_busbw_of_rate = 1.0;  // the ring's achievable busbw over the link's datasheet rate
  std::array<double, kNumCollAlgorithms> beta_scale{1.0, 0.0, 0.0};
};
AlgorithmDefaults algorithm_defaults(const Cluster& cl, LinkClass lc) {
  AlgorithmDefaults d;
  if (cl.backend != Backend::cuda) return d;
  d.beta_scale[static_cast<std::size_t>(CollAlgorithm::tree)] = 1.0 / kTreeBusbwOfRing;
  if (lc != LinkClass::intra_node) {
    d.ring_busbw_of_rate = kNetRingBusbwOfRate;
    return d;
  }
  const GpuKind kind = gpu_kind(cl.device.name);
  if (cl.device.nvlink_sharp || kind.hopper())
    d.ring_busbw_of_rate = kNvlink4RingBusbwGbps / kNvlink4Gbps;
  else if (kind.generation == GpuGeneration::a100)
    d.ring_busbw_of_rate = kNvlink3RingBusbwGbps / kNvlink3Gbps;
  if (cl.device.nvlink_sharp)
    d.beta_scale[static_cast<std::size_t>(CollAlgorithm::nvls)] =
        kNvlink4RingBusbwGbps / kNvlink4NvlsAllReduceBusbwGbps;
  return d;
}

LinkCost datasheet_link(const Link& l, bool apply_oversubscription, const AlgorithmDefaults& d) {
  LinkCost c;
  // Datasheet: one latency per algorithm step and the achievable per-device bandwidth for every op
  // (on a lossy link what TCP sustains there).
  const double bw =
      achievable_bandwidth_gbps(l) * 1e9 * d.ring_busbw_of_rate / (apply_oversubscription ? l.oversubscription : 1.0);
  c.set_all(l.latency_us * 1e-6, 1.0 / bw);
  c.beta_scale = d.beta_scale;
  c.oversubscription = apply_oversubscription ? 1.0 : l.oversubscription;
  return c;
}

}  // namespace

CostParams CostParams::of(const Cluster& view, const Model& m, const CostSource& source) {
  CostParams p =
      source.calibration ? calibrated(view, m, *source.calibration, source.calibration_file) : datasheet(view, m);
  if (source.device && !view.paced()) p.apply(*source.device);
  p.boundary_fifo = source.boundary_fifo;
  return p;
}

CostParams CostParams::datasheet(const Cluster& cl, const Model& m) {
  CostParams p;
  static_cast<workload::DeviceSpeed&>(p) = workload::DeviceSpeed::of(cl.device, cl.backend, m.dtype);
  p.hbm_gib = cl.device.hbm_gib;
  // A paced op ends at its deadline whatever communicates beside it (the testbed's cost of
  // progressing that communication is an overrun, counted, not a slower device).
  if (cl.paced()) p.overlap_slowdown = 0;
  const AlgorithmDefaults node = algorithm_defaults(cl, LinkClass::intra_node),
                          net = algorithm_defaults(cl, LinkClass::intra_building);
  p.links[0] = datasheet_link(cl.intra_node, true, node);
  p.links[1] = datasheet_link(cl.intra_building, true, net);
  p.links[2] = datasheet_link(cl.cross_building, false, net);
  for (const auto& t : cl.network_technologies) p.technologies.push_back(datasheet_link(t.link, false, net));
  return p;
}

void CostParams::apply(const DeviceCompute& measured) {
  for (EfficiencyPoint& e : gemm.points) e.efficiency *= measured.gemm_scale.value;
  for (EfficiencyPoint& e : fp8_gemm.points) e.efficiency *= measured.gemm_scale.value;
  for (EfficiencyPoint& e : attention.points) e.efficiency *= measured.attention_scale.value;
  hbm_efficiency *= measured.memory_scale.value;
  op_overhead_s += measured.op_overhead_us.value * 1e-6;
  prepare_curves();
}

CostParams CostParams::calibrated(const Cluster& cl, const Model& m, const Calibration& calibration,
                                  const std::string& file) {
  CostParams p = datasheet(cl, m);
  p.source = "calibration " + file;
  auto term = [&p](bool set, const std::string& name) {
    (set ? p.calibrated_terms : p.datasheet_terms).push_back(name);
  };
  for (LinkClass lc : kLinkClasses) {
    std::string ops;
    for (CollOp op : kPricedCollOps)
      if (const auto& ab = calibration.links[static_cast<int>(lc)][static_cast<int>(op)]) {
        // Each regime as fitted (spec/alpha_beta.hpp's units); a message is priced in its own.
        LinkRegimes& r = p.links[static_cast<int>(lc)].regimes[static_cast<std::size_t>(op)];
        const std::vector<AlphaBetaRegime> fitted = ab->regimes_s();
        r.count = std::min(fitted.size(), kMaxLinkRegimes);
        std::copy_n(fitted.begin(), r.count, r.at.begin());
        ops.append(ops.empty() ? "" : ",").append(to_string(op));
      }
    term(!ops.empty(), std::string(link_class_name(lc)) + " alpha-beta" + (ops.empty() ? "" : " (" + ops + ")"));
  }
  // A paced device computes what the cluster declares: a calibration's compute terms (measured on
  // the host's own kernels) do not describe it, and pacing never changes what the explorer assumes.
  auto compute_term = [&](const auto& measured, auto& into, const char* name) {
    const bool taken = !cl.paced() && measured.has_value();
    if (taken) into = *measured;
    term(taken, name);
  };
  compute_term(calibration.gemm, p.gemm, "gemm efficiency");
  compute_term(calibration.attention, p.attention, "attention efficiency");
  compute_term(calibration.hbm_efficiency, p.hbm_efficiency, "hbm efficiency");
  compute_term(calibration.overlap_slowdown, p.overlap_slowdown, "overlap slowdown");
  // Measured runs of the cluster's GPU generation (calibrate --runs): what they say of its compute.
  if (!calibration.devices.empty()) {
    const GpuGeneration g = gpu_kind(cl.device.name).generation;
    const auto it = calibration.devices.find(g);
    const bool taken = !cl.paced() && it != calibration.devices.end();
    if (taken) p.apply(it->second);
    std::string covered;
    for (const auto& [k, d] : calibration.devices) covered += (covered.empty() ? "" : ", ") + std::string(to_string(k));
    std::string what;
    if (taken) {
      const DeviceCompute& d = it->second;
      char line[200];
      std::snprintf(line, sizeof line,
                    " compute measured (the datasheet's GEMM curve x%.3g, attention x%.3g, HBM fraction x%.3g, "
                    "%+.3g us per op)",
                    d.gemm_scale.value, d.attention_scale.value, d.memory_scale.value, d.op_overhead_us.value);
      what = to_string(g) + std::string(line);
    } else {
      what = "compute (the calibration's runs are of " + covered + ", not " + cl.device.name + ")";
    }
    term(taken, what);
  }
  // Measured on the device as the cluster declares it (a paced one's waking): taken either way.
  bool skew = false;
  for (std::size_t lc = 0; lc < p.call_skew_s.size(); ++lc)
    if (const auto& s = calibration.call_skew_us[lc]) p.call_skew_s[lc] = *s * 1e-6, skew = true;
  term(skew, "call skew");
  // The cross-building β of a calibration is the link's own where the oversubscription was
  // measured beside it; without it, it was fitted with every group crossing at once (calibrate
  // --cluster, or bench coll files): the sharing is in it already, not to be applied again.
  bool cross_fitted = false;
  for (const auto& ab : calibration.links[static_cast<int>(LinkClass::cross_building)]) cross_fitted |= ab.has_value();
  if (calibration.cross_oversubscription)
    p.links[2].oversubscription = calibration.cross_oversubscription->value;
  else if (cross_fitted)
    p.links[2].oversubscription = 1;
  term(calibration.cross_oversubscription.has_value(), "cross_building oversubscription");
  return p;
}

}  // namespace sax::explorer
