// A cluster of several buildings: buildings → nodes → devices, the three link classes, and the
// network technologies that may carry the cross-building link.
//
// Units: bandwidths are GB/s (10^9 bytes/s) per device and per direction, as nccl-tests
// reports them (`_gbps` in sax always means gigabytes per second); latencies are µs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "spec/dtype.hpp"
#include "spec/fields.hpp"

namespace sax {

// Where the testbed runs: the CPU backend (OpenBLAS, MPI) or the CUDA backend (cuBLAS, NCCL).
enum class Backend { cpu, cuda };
const char* to_string(Backend b);
std::optional<Backend> parse_backend(const std::string& name);

enum class LinkClass { intra_node, intra_building, cross_building };
const char* link_class_name(LinkClass c);
constexpr LinkClass kLinkClasses[] = {LinkClass::intra_node, LinkClass::intra_building, LinkClass::cross_building};
std::optional<LinkClass> parse_link_class(const std::string& name);  // a link_class_name

struct Link {
  double bandwidth_gbps = 0;      // per device, per direction, GB/s
  double latency_us = 0;          // one-way, small message
  double oversubscription = 1.0;  // >= 1: bandwidth shared when every device sends at once
  double effective_bandwidth_gbps() const { return bandwidth_gbps / oversubscription; }
};

struct NetworkTechnology {
  std::string name;
  std::string description;
  Link link;  // replaces the cross-building link when chosen
};

struct Building {
  std::string name;
  std::int64_t nodes = 0;
};

// One building's side of the cross-building link as every emulation of it takes it (the software
// link emulator, the NCCL net plugin): the link under a technology, the devices that share the
// building's boundary, and a device's NIC (the intra-building link), which bounds a device too.
struct BuildingBoundary {
  Link link;
  int devices_in_building = 1;
  double nic_gbps = 0;
};

struct Device {
  std::string name;
  std::map<DType, double> peak_tflops;  // dense, per dtype
  double hbm_gib = 0;
  double hbm_bandwidth_gbps = 0;  // GB/s
  // NVLink SHARP: the node's NVSwitches reduce and multicast (NCCL's NVLS algorithm). The
  // cluster file's `nvlink_sharp`; absent, nvlink_sharp_by_name.
  bool nvlink_sharp = false;
  // Streaming multiprocessors: the slots a GEMM's output tiles run in, one wave at a time (the
  // cost model's tile and wave quantization, spec/calibration.hpp gemm_quantization). The
  // cluster file's optional `sm_count`; 0 when not known (no quantization: factor 1).
  int sm_count = 0;
  // The peak a model in `dtype` is priced against: its dtype's figure; a device without one gets
  // the slowest figure it has (the fastest would be no better than a guess). 0 when none.
  double peak_tflops_for(DType dtype) const {
    if (auto it = peak_tflops.find(dtype); it != peak_tflops.end()) return it->second;
    double slowest = 0;
    for (const auto& [dt, v] : peak_tflops) slowest = slowest == 0 ? v : (v < slowest ? v : slowest);
    return slowest;
  }
};

// Where a rank sits. Ranks fill devices of a node, nodes of a building, buildings in order.
struct RankPlace {
  int building = 0;
  std::int64_t node = 0;  // global node index
  int local_device = 0;
};

struct Cluster {
  std::string name;
  Backend backend = Backend::cpu;  // the testbed's backend
  std::vector<Building> buildings;
  int devices_per_node = 0;
  Device device;
  Link intra_node, intra_building, cross_building;
  std::vector<NetworkTechnology> network_technologies;

  std::int64_t num_nodes() const;
  std::int64_t world_size() const { return num_nodes() * devices_per_node; }
  RankPlace place(std::int64_t rank) const;
  // The link class traffic between two ranks crosses.
  LinkClass link_between(std::int64_t a, std::int64_t b) const;
  const Link& link(LinkClass c) const;
  // The cross-building link under a named technology ("" = the cluster's own).
  const Link& cross_building_link(const std::string& technology) const;
  const NetworkTechnology* technology(const std::string& name) const;
  // Building `building`'s boundary under a technology ("" = the cluster's own link).
  BuildingBoundary boundary(int building, const std::string& technology) const;
};

// The name of the pacing state every device on an emulated boundary shares: the cluster, the
// technology ("own" for the cluster's link) and the job, so that jobs sharing a host do not
// share a link.
std::string boundary_pacing_key(const Cluster& cluster, const std::string& technology, std::int64_t job);

// Third-generation NVSwitch (HGX/DGX H100, H200) and later have NVLink SHARP; A100's and PCIe
// parts have not: true for an H100, H200 or B200 name that says SXM, HGX or DGX.
bool nvlink_sharp_by_name(const std::string& device_name);

Cluster read_cluster(const json& value, const std::string& file);
Cluster load_cluster(const std::string& file);
json to_json(const Cluster& cluster);

}  // namespace sax
