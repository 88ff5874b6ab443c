// A cluster of several buildings: buildings → nodes → devices, the three link classes, and the
// network technologies that may carry the cross-building link.
//
// Units: bandwidths are GB/s (10^9 bytes/s) per device and per direction, as nccl-tests
// reports them (`_gbps` in sax always means gigabytes per second); latencies are µs.
#pragma once

#include <cmath>
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
  double loss = 0;                // the probability a packet is lost (a lossy TCP path; 0: lossless)
  double jitter_us = 0;           // a packet's extra one-way delay, uniform in [0, jitter_us)
  int tcp_streams = 1;            // TCP connections one device's traffic is striped over (lossy paths)
};

// What a device gets of a link, per direction (GB/s): its bandwidth, and on a lossy path no more
// than TCP sustains there — Mathis, Semke, Mahdavi and Ott, "The Macroscopic Behavior of the TCP
// Congestion Avoidance Algorithm" (ACM CCR 27(3), 1997, eq. 3): a flow carries MSS / RTT · C / √p
// with C = √(3/2), RTT twice the one-way latency plus the jitter's mean both ways, MSS 1448 bytes
// (a 1500-byte MTU with TCP timestamps); tcp_streams such flows side by side. Linux's CUBIC keeps
// to this Reno rate where RTT × rate is small (its TCP-friendly region, RFC 8312 4.2). The
// cost model, the software link emulator and the NCCL net plugin take a link's rate from here.
// Header-only: the link pacer, which the NCCL net plugin links alone, takes it too.
inline constexpr double kTcpMssBytes = 1448;
inline double achievable_bandwidth_gbps(const Link& l) {
  const double rtt_s = (2 * l.latency_us + l.jitter_us) * 1e-6;
  if (!(l.loss > 0) || !(rtt_s > 0)) return l.bandwidth_gbps;
  const double flow_gbps = kTcpMssBytes / rtt_s * std::sqrt(1.5 / l.loss) * 1e-9;
  const double gbps = flow_gbps * (l.tcp_streams > 1 ? l.tcp_streams : 1);
  return gbps < l.bandwidth_gbps ? gbps : l.bandwidth_gbps;
}

// `a` made no better than `b`, field by field: the lesser bandwidth, the longer latency, the
// higher oversubscription, loss and jitter, the fewer TCP streams (a path through both is no faster than the worse of
// each).
inline Link worse_link(Link a, const Link& b) {
  a.bandwidth_gbps = b.bandwidth_gbps < a.bandwidth_gbps ? b.bandwidth_gbps : a.bandwidth_gbps;
  a.latency_us = b.latency_us > a.latency_us ? b.latency_us : a.latency_us;
  a.oversubscription = b.oversubscription > a.oversubscription ? b.oversubscription : a.oversubscription;
  a.loss = b.loss > a.loss ? b.loss : a.loss;
  a.jitter_us = b.jitter_us > a.jitter_us ? b.jitter_us : a.jitter_us;
  a.tcp_streams = b.tcp_streams < a.tcp_streams ? b.tcp_streams : a.tcp_streams;
  return a;
}

struct NetworkTechnology {
  std::string name;
  std::string description;
  Link link;  // replaces the cross-building link when chosen
  // The buildings whose pairs it carries (the file's `buildings`, names); empty: every pair. The
  // other pairs keep their own link when it is chosen.
  std::vector<int> buildings;
  bool carries(int a, int b) const;
};

// Whether both buildings a and b are among `buildings` (empty: every building): the pairs a
// technology's or a building_links entry's list names.
bool pair_within(const std::vector<int>& buildings, int a, int b);

// One building's side of the cross-building link as every emulation of it takes it (the software
// link emulator, the NCCL net plugin): the link under a technology, the devices that share the
// building's boundary, and a device's NIC (the intra-building link), which bounds a device too.
struct BuildingBoundary {
  Link link;
  int devices_in_building = 1;
  double nic_gbps = 0;
};

// How the testbed runs a device's compute ops (docs/design.md "Devices: native and paced"): native, the
// host's kernels at the host's speed (benchmarking the kernels; the only mode on CUDA); or paced,
// each op's real kernel on real buffers, then a wait until the declared device would have finished
// it (workload/device_time.hpp: the time the cost model prices the op at), so that a rank's speed
// is the declared device's and not what the ranks sharing the host's cores leave it.
enum class DeviceEmulation { native, paced };
const char* to_string(DeviceEmulation e);

// Efficiencies a device declares (achieved / its peak, one per kind of op, whatever its size), in
// place of the default curves: what a paced device is defined by.
struct DeclaredEfficiency {
  double gemm = 1, attention = 1, memory = 1;
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
  DeviceEmulation emulation = DeviceEmulation::native;
  // A fixed cost of every compute op (the launch and the host's path to it), µs; 0: none.
  double op_overhead_us = 0;
  std::optional<DeclaredEfficiency> efficiency;  // absent: the defaults by device and dtype
  // Paced: how long a rank waiting for a deadline or a message sleeps between tests of its
  // pending communication (MPI moves a nonblocking operation only inside its calls).
  double poll_us = 50;
  bool paced() const { return emulation == DeviceEmulation::paced; }
  // The peak a model in `dtype` is priced against: its dtype's figure; a device without one gets
  // the slowest figure it has (the fastest would be no better than a guess). 0 when none.
  double peak_tflops_for(DType dtype) const {
    if (auto it = peak_tflops.find(dtype); it != peak_tflops.end()) return it->second;
    double slowest = 0;
    for (const auto& [dt, v] : peak_tflops) slowest = slowest == 0 ? v : (v < slowest ? v : slowest);
    return slowest;
  }
};

// A building: its nodes, and where it differs from the rest (another GPU generation) its own
// device and devices per node; absent, the cluster's.
struct Building {
  std::string name;
  std::int64_t nodes = 0;
  std::optional<Device> device;  // the file's `device` in the building; absent: the cluster's
  int devices_per_node = 0;      // the file's `devices_per_node` in the building; 0: the cluster's
  // An emulated slower generation (`compute_slowdown`, >= 1): on the testbed every compute op of
  // this building's ranks takes this many times its own time (`sax run`, harness/); to the
  // planner the building's device has its peaks and HBM bandwidth divided by it (device_of), so
  // the one figure is both what the testbed does and what the explorer prices.
  double compute_slowdown = 1.0;
};

// A link between buildings given per pair, or per group of buildings (every pair among
// `buildings`): in place of the cluster's cross_building link for those pairs. A pair is in at
// most one entry.
struct BuildingLink {
  std::vector<int> buildings;  // indices into Cluster::buildings, >= 2, distinct
  Link link;
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
  std::vector<BuildingLink> building_links;  // per pair; a pair not listed has cross_building

  // Every rank's compute paced (the cluster's device says so; a building's own device follows it).
  bool paced() const { return device.paced(); }
  std::int64_t num_nodes() const;
  std::int64_t world_size() const;
  // A building's device (its own, else the cluster's; slowed by its compute_slowdown) and devices
  // per node (its own, else the cluster's).
  Device device_of(int building) const;
  int devices_per_node_of(int building) const;
  // The gcd of the buildings' devices per node: every node boundary falls on a multiple of it.
  int node_gcd() const;
  std::int64_t building_ranks(int building) const {
    return buildings_at(building).nodes * devices_per_node_of(building);
  }
  // True when every building has the cluster's device (and no slowdown) and devices per node, no
  // pair has its own link and every technology carries every pair: one device and one boundary.
  bool uniform() const;
  // The link between two buildings (a != b) under a technology ("" = their own): the
  // technology's where it carries the pair, else the pair's building_links entry, else
  // cross_building.
  Link cross_link(int a, int b, const std::string& technology) const;
  // The worst link between two buildings of `among` (every building when it names fewer than
  // two) under a technology, by worse_link (cross_building_link itself where every pair has it).
  Link worst_cross_link(const std::string& technology, const std::vector<int>& among = {}) const;
  RankPlace place(std::int64_t rank) const;
  // The link class traffic between two ranks crosses.
  LinkClass link_between(std::int64_t a, std::int64_t b) const;
  const Link& link(LinkClass c) const;
  // The cross-building link under a named technology ("" = the cluster's own).
  const Link& cross_building_link(const std::string& technology) const;
  const NetworkTechnology* technology(const std::string& name) const;
  // Building `building`'s boundary under a technology ("" = the cluster's own link).
  // Its link is the worst (as worst_cross_link) of the building's pairs under the technology.
  BuildingBoundary boundary(int building, const std::string& technology) const;

 private:
  const Building& buildings_at(int b) const { return buildings.at(static_cast<std::size_t>(b)); }
};

// The name of the pacing state every device on an emulated boundary shares: the cluster, the
// technology ("own" for the cluster's link) and the job, so that jobs sharing a host do not
// share a link.
std::string boundary_pacing_key(const Cluster& cluster, const std::string& technology, std::int64_t job);
// The pacing state of the job's node fabrics (a paced device's intra-node link), beside its
// boundary's: the launcher removes both after the job, whatever ended it.
std::string node_pacing_key(const std::string& boundary_key);
// A job identifier for that key which no other user of the host can predict (so cannot plant the
// pacing state before the job makes it): 63 random bits from the kernel.
std::int64_t random_job_id();

// The GPU generation a device name says, and its board: the one reading of a name that the
// datasheet defaults (NVLink generation and SHARP, published matmul and attention figures) key
// on. `unknown` for the CPU testbed's devices and parts no default covers.
enum class GpuGeneration { unknown, a100, h100, h200, b200 };
struct GpuKind {
  GpuGeneration generation = GpuGeneration::unknown;  // "GH200" reads as h200, "GB200" as b200
  bool sxm = false;                                   // "SXM", "HGX" or "DGX" in the name
  bool pcie = false;                                  // "PCIe" in the name
  bool hopper() const { return generation == GpuGeneration::h100 || generation == GpuGeneration::h200; }
};
GpuKind gpu_kind(const std::string& device_name);
// A generation's name as files write it ("a100" ... "b200", "unknown"), and back (nullopt for
// a name that is none of the known generations).
const char* to_string(GpuGeneration g);
std::optional<GpuGeneration> parse_gpu_generation(const std::string& name);

// Third-generation NVSwitch (HGX/DGX H100, H200) and later have NVLink SHARP; A100's and PCIe
// parts have not: true for an H100, H200 or B200 name that says SXM, HGX or DGX.
bool nvlink_sharp_by_name(const std::string& device_name);

Cluster read_cluster(const json& value, const std::string& file);
Cluster load_cluster(const std::string& file);
json to_json(const Cluster& cluster);

}  // namespace sax
