#include "calibration/export.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>

#include "spec/error.hpp"
#include "spec/number_text.hpp"

namespace sax::calibration {

namespace {

// Notes and the exported figures are for a reader: 6 significant digits.
constexpr int kDigits = 6;

// A link class's figures for a ring all-reduce: latency per step (µs) and bus bandwidth (GB/s of
// 1e9 bytes) per device with every group crossing at once; from the calibration when it has
// them, else the datasheet. The cross-building calibration holds the unshared bandwidth and the
// oversubscription (the cost model's split): here they are put back together.
struct LinkFigures {
  double alpha_us = 0, busbw_gbps = 0;
  std::string source;
};

LinkFigures figures(const Calibration& k, const Cluster& c, LinkClass lc) {
  const auto& ab = k.links[static_cast<int>(lc)][static_cast<int>(CollOp::all_reduce)];
  const Link& l = c.link(lc);
  const bool cross = lc == LinkClass::cross_building;
  // A fitted cross-building β is the link's own where the oversubscription was measured (then
  // shared again here), else it holds the sharing already (as the cost model reads it).
  // The simulators take one α-β per link: the large-message regime's (the entry's own α and β),
  // which prices the bandwidth-bound traffic a step is made of; said where the fit has more.
  if (ab && ab->beta_ns_per_byte > 0) {
    const double over = cross && k.cross_oversubscription ? k.cross_oversubscription->value : 1.0;
    std::string source = "calibration (all_reduce fit";
    if (ab->regimes.size() > 1)
      source += ", its large-message regime from " + std::to_string(ab->regimes.back().from_bytes) + " bytes of " +
                std::to_string(ab->regimes.size());
    return {ab->alpha_us, 1.0 / ab->beta_ns_per_byte / over, source + ")"};
  }
  const double over = cross ? std::max(1.0, l.oversubscription) : 1.0;
  return {l.latency_us, l.bandwidth_gbps / (cross ? over : std::max(1.0, l.oversubscription)), "datasheet"};
}

// Buildings of one size: the simulators' dimensions are uniform.
std::int64_t nodes_per_building(const Cluster& c, const char* who) {
  for (const auto& b : c.buildings)
    if (b.nodes != c.buildings.front().nodes)
      throw UsageError(std::string("calibrate export ") + who + ": cluster " + c.name +
                       " has buildings of different sizes; the simulator's dimensions need equal ones");
  return c.buildings.front().nodes;
}

}  // namespace

Export astra_sim_network(const Calibration& k, const Cluster& c) {
  const std::int64_t nodes = nodes_per_building(c, "--astra-sim");
  struct Dim {
    const char* topology;
    std::int64_t npus;
    LinkClass link;
    double hops;  // a Switch is two hops (in, out): the latency per hop is half
  };
  const Dim dims[] = {{"Switch", c.devices_per_node, LinkClass::intra_node, 2},
                      {"Switch", nodes, LinkClass::intra_building, 2},
                      {"FullyConnected", static_cast<std::int64_t>(c.buildings.size()), LinkClass::cross_building, 1}};
  std::string topology, npus, bandwidth, latency;
  Export e;
  for (const Dim& d : dims) {
    if (d.npus < 2) continue;  // ASTRA-sim needs more than one NPU per dimension
    const LinkFigures f = figures(k, c, d.link);
    auto add = [](std::string& list, const std::string& v) { list += (list.empty() ? "" : ", ") + v; };
    add(topology, d.topology);
    add(npus, std::to_string(d.npus));
    add(bandwidth, num(f.busbw_gbps * 1e9 / (1u << 30), kDigits));  // ASTRA-sim's GB is 2^30 bytes
    add(latency, num(f.alpha_us * 1e3 / d.hops, kDigits));
    e.notes.push_back(std::string(link_class_name(d.link)) + ": " + d.topology + " of " + std::to_string(d.npus) +
                      ", " + num(f.busbw_gbps, kDigits) + " GB/s bus bandwidth, " + num(f.alpha_us, kDigits) +
                      " us per step, from the " + f.source);
  }
  if (topology.empty()) throw UsageError("calibrate export --astra-sim: cluster " + c.name + " has a single device");
  // The copied names are escaped as error lines are (a newline would end the comment and start a key).
  e.text = "# ASTRA-sim analytical network of " + safe_text(c.name) + " from sax calibrate (" +
           safe_text(k.provenance.date) + ", " + safe_text(k.provenance.emulation) +
           "): per dimension, GB/s of 2^30 bytes per link and direction, ns per hop; a fit in size regimes gives "
           "its large-message regime's\n" +
           "topology: [ " + topology + " ]\nnpus_count: [ " + npus + " ]\nbandwidth: [ " + bandwidth +
           " ]  # GB/s\nlatency: [ " + latency + " ]  # ns\n";
  return e;
}

Export calculon_system(const Calibration& k, const Cluster& c, DType dtype) {
  static const std::map<DType, const char*> names = {
      {DType::fp32, "float32"}, {DType::bf16, "bfloat16"}, {DType::fp16, "float16"}, {DType::fp8, "float8"}};
  const auto name = names.find(dtype);
  if (name == names.end())
    throw UsageError(std::string("calibrate export --calculon: Calculon has no type for ") + to_string(dtype));
  Export e;
  // The GEMM curve's efficiencies are against the peak its model was priced at when measured
  // (each compute point keeps it); the datasheet's figure for `dtype` otherwise.
  double peak = c.device.peak_tflops_for(dtype);
  for (const json& p : k.points)
    if (p.is_object() && p.value("kind", "") == "compute" && p.value("compute", "") == "gemm" &&
        p.contains("peak_flops") && p["peak_flops"].is_number() && p["peak_flops"].get<double>() > 0) {
      peak = p["peak_flops"].get<double>() / 1e12;
      break;
    }
  // Efficiency tables: [GFLOP threshold, efficiency], thresholds strictly decreasing to 0, each
  // efficiency in (0, 1]; the first threshold an op reaches gives its efficiency. From the GEMM
  // curve's points (above 1 on a device faster than its datasheet: the peak is raised instead).
  json matrix_eff = json::array();
  double tflops = peak;
  if (k.gemm && !k.gemm->points.empty()) {
    double top = 1;
    for (const auto& p : k.gemm->points) top = std::max(top, p.efficiency);
    tflops = peak * top;
    for (auto it = k.gemm->points.rbegin(); it != k.gemm->points.rend(); ++it)
      matrix_eff.push_back({std::next(it) == k.gemm->points.rend() ? 0.0 : it->flops / 1e9, it->efficiency / top});
    e.notes.push_back("matrix: " + num(tflops, kDigits) + " TFLOP/s and " + std::to_string(k.gemm->points.size()) +
                      " efficiency steps from the calibration's GEMM curve");
  } else {
    matrix_eff.push_back({0.0, 1.0});
    e.notes.push_back("matrix: the datasheet's " + num(peak, kDigits) +
                      " TFLOP/s at efficiency 1 (no GEMM curve calibrated)");
  }
  e.notes.push_back("vector: the datasheet's " + num(peak, kDigits) + " TFLOP/s (sax calibrates no vector figure)");
  const double hbm_eff = k.hbm_efficiency.value_or(1.0);
  const double gbps = c.device.hbm_bandwidth_gbps * hbm_eff;
  e.notes.push_back(
      "mem1: " + num(c.device.hbm_gib, kDigits) + " GiB, " + num(gbps, kDigits) + " GB/s (" +
      (k.hbm_efficiency ? "the datasheet's x the calibrated fraction " + num(hbm_eff, kDigits) : "the datasheet's") +
      "); mem2 (the offload tier): none, sax has no figure for it");
  json networks = json::array();
  const std::int64_t per_building = nodes_per_building(c, "--calculon") * c.devices_per_node;
  const struct {
    LinkClass link;
    std::int64_t size;
  } tiers[] = {{LinkClass::intra_node, c.devices_per_node},
               {LinkClass::intra_building, per_building},
               {LinkClass::cross_building, c.world_size()}};
  std::int64_t below = 1;
  for (const auto& t : tiers) {
    if (t.size <= below) continue;  // no tier of its own (e.g. one node per building)
    below = t.size;
    const LinkFigures f = figures(k, c, t.link);
    // Calculon's time of an op: latency + S · scalar · (1 + offset / N) / (bandwidth · efficiency);
    // the ring's bus factors are its scalars and offsets, and its latency is per op: the ring
    // all-reduce's 2 (N − 1) steps over the tier's N.
    const double steps = 2.0 * static_cast<double>(t.size - 1);
    networks.push_back(
        {{"bandwidth", f.busbw_gbps},
         {"efficiency", 1.0},
         {"size", t.size},
         {"latency", f.alpha_us * 1e-6 * steps},
         {"ops",
          {{"p2p", {1.0, nullptr}},
           {"reduce_scatter", {1.0, -1}},
           {"all_gather", {1.0, -1}},
           {"all_reduce", {2.0, -1}}}},
         {"must_be_filled", false},
         {"processor_usage", k.overlap_slowdown ? *k.overlap_slowdown / (1 + *k.overlap_slowdown) : 0.0}});
    e.notes.push_back("network " + std::to_string(networks.size() - 1) + " (" + link_class_name(t.link) + ", " +
                      std::to_string(t.size) + " processors): " + num(f.busbw_gbps, kDigits) + " GB/s, latency " +
                      num(f.alpha_us, kDigits) + " us x " + num(steps, kDigits) + " ring steps, from the " + f.source);
  }
  if (k.overlap_slowdown)
    e.notes.push_back("processor_usage: the calibrated overlap slowdown " + num(*k.overlap_slowdown, kDigits) +
                      " as Calculon's share of compute communication takes, s / (1 + s)");
  json sys = {{"matrix", {{name->second, {{"tflops", tflops}, {"gflops_efficiency", matrix_eff}}}}},
              {"vector", {{name->second, {{"tflops", peak}, {"gflops_efficiency", json::array({{0.0, 1.0}})}}}}},
              {"mem1", {{"GiB", c.device.hbm_gib}, {"GBps", gbps}, {"MB_efficiency", json::array({{0.0, 1.0}})}}},
              {"mem2", {{"GiB", 0}, {"GBps", 0}, {"MB_efficiency", json::array({{0.0, 1.0}})}}},
              {"processing_mode", "no_overlap"},
              {"networks", networks}};
  e.text = sys.dump(2) + "\n";
  return e;
}

}  // namespace sax::calibration
