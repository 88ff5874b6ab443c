#include "spec/cluster.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <set>
#include <utility>

namespace sax {

const char* link_class_name(LinkClass c) {
  static constexpr const char* kNames[] = {"intra_node", "intra_building", "cross_building"};  // in LinkClass's order
  const auto i = static_cast<std::size_t>(c);
  return i < std::size(kNames) ? kNames[i] : "?";
}

std::optional<LinkClass> parse_link_class(const std::string& name) {
  for (LinkClass c : kLinkClasses)
    if (name == link_class_name(c)) return c;
  return std::nullopt;
}

const char* to_string(Backend b) { return b == Backend::cuda ? "cuda" : "cpu"; }

std::optional<Backend> parse_backend(const std::string& name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "cuda") return Backend::cuda;
  return std::nullopt;
}

std::int64_t Cluster::num_nodes() const {
  std::int64_t n = 0;
  for (const auto& b : buildings) n += b.nodes;
  return n;
}

std::int64_t Cluster::world_size() const {
  std::int64_t n = 0;
  for (std::size_t b = 0; b < buildings.size(); ++b) n += building_ranks(static_cast<int>(b));
  return n;
}

Device Cluster::device_of(int b) const {
  const Building& bl = buildings_at(b);
  Device d = bl.device ? *bl.device : device;
  if (bl.compute_slowdown != 1.0) {
    for (auto& [dt, tflops] : d.peak_tflops) tflops /= bl.compute_slowdown;
    d.hbm_bandwidth_gbps /= bl.compute_slowdown;
    char buf[64];
    std::snprintf(buf, sizeof buf, " at 1/%g speed", bl.compute_slowdown);
    d.name += buf;
  }
  return d;
}

int Cluster::devices_per_node_of(int b) const {
  const Building& bl = buildings_at(b);
  return bl.devices_per_node > 0 ? bl.devices_per_node : devices_per_node;
}

int Cluster::node_gcd() const {
  int g = 0;
  for (int b = 0; b < static_cast<int>(buildings.size()); ++b) g = std::gcd(g, devices_per_node_of(b));
  return g;
}

bool Cluster::uniform() const {
  for (const auto& b : buildings)
    if (b.device || (b.devices_per_node > 0 && b.devices_per_node != devices_per_node) || b.compute_slowdown != 1.0)
      return false;
  if (!building_links.empty()) return false;
  for (const auto& t : network_technologies)
    if (!t.buildings.empty()) return false;
  return true;
}

bool pair_within(const std::vector<int>& buildings, int a, int b) {
  if (buildings.empty()) return true;
  auto in = [&buildings](int x) { return std::find(buildings.begin(), buildings.end(), x) != buildings.end(); };
  return in(a) && in(b);
}

bool NetworkTechnology::carries(int a, int b) const { return pair_within(buildings, a, b); }

Link Cluster::cross_link(int a, int b, const std::string& tech) const {
  if (!tech.empty()) {
    const NetworkTechnology* t = technology(tech);
    if (!t) throw RunError("cluster " + name + " has no network technology \"" + tech + "\"");
    if (t->carries(a, b)) return t->link;
  }
  for (const BuildingLink& l : building_links)
    if (pair_within(l.buildings, a, b)) return l.link;
  return cross_building;
}

Link Cluster::worst_cross_link(const std::string& tech, const std::vector<int>& among) const {
  std::vector<int> bs = among;
  if (bs.size() < 2) {
    bs.resize(buildings.size());
    for (std::size_t b = 0; b < bs.size(); ++b) bs[b] = static_cast<int>(b);
  }
  if (bs.size() < 2) return cross_building_link(tech);
  Link w = cross_link(bs[0], bs[1], tech);
  for (std::size_t a = 0; a < bs.size(); ++a)
    for (std::size_t b = a + 1; b < bs.size(); ++b) w = worse_link(w, cross_link(bs[a], bs[b], tech));
  return w;
}

RankPlace Cluster::place(std::int64_t rank) const {
  RankPlace p;
  std::int64_t first = 0, first_node = 0;  // the building's first rank and node
  for (std::size_t b = 0; b < buildings.size(); ++b) {
    const std::int64_t ranks = building_ranks(static_cast<int>(b));
    if (rank >= 0 && rank < first + ranks) {
      const int per_node = devices_per_node_of(static_cast<int>(b));
      p.building = static_cast<int>(b);
      p.node = first_node + (rank - first) / per_node;
      p.local_device = static_cast<int>((rank - first) % per_node);
      return p;
    }
    first += ranks;
    first_node += buildings[b].nodes;
  }
  throw RunError("rank " + std::to_string(rank) + " is outside cluster " + name + " (world size " +
                 std::to_string(world_size()) + ")");
}

LinkClass Cluster::link_between(std::int64_t a, std::int64_t b) const {
  RankPlace pa = place(a), pb = place(b);
  if (pa.node == pb.node) return LinkClass::intra_node;
  if (pa.building == pb.building) return LinkClass::intra_building;
  return LinkClass::cross_building;
}

const Link& Cluster::link(LinkClass c) const {
  switch (c) {
    case LinkClass::intra_node:
      return intra_node;
    case LinkClass::intra_building:
      return intra_building;
    case LinkClass::cross_building:
      return cross_building;
  }
  return cross_building;
}

const NetworkTechnology* Cluster::technology(const std::string& tech) const {
  for (const auto& t : network_technologies)
    if (t.name == tech) return &t;
  return nullptr;
}

const Link& Cluster::cross_building_link(const std::string& tech) const {
  if (tech.empty()) return cross_building;
  const NetworkTechnology* t = technology(tech);
  if (!t) throw RunError("cluster " + name + " has no network technology \"" + tech + "\"");
  return t->link;
}

BuildingBoundary Cluster::boundary(int building, const std::string& tech) const {
  Link worst = cross_building_link(tech);
  bool first = true;
  for (int other = 0; other < static_cast<int>(buildings.size()); ++other) {
    if (other == building) continue;
    const Link l = cross_link(building, other, tech);
    worst = first ? l : worse_link(worst, l);
    first = false;
  }
  return {worst, static_cast<int>(building_ranks(building)), intra_building.bandwidth_gbps};
}

std::int64_t random_job_id() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
    throw RunError(std::string("getrandom: ") + std::strerror(errno));
  return static_cast<std::int64_t>(v >> 1);  // positive: it is printed in names
}

std::string boundary_pacing_key(const Cluster& c, const std::string& tech, std::int64_t job) {
  return c.name + "-" + (tech.empty() ? "own" : tech) + "-" + std::to_string(job);
}

std::string node_pacing_key(const std::string& boundary_key) { return boundary_key + "-node"; }

// A link's fields in the object `f` reads (the caller finishes it).
static Link read_link_fields(Fields& f) {
  Link l;
  l.bandwidth_gbps = f.quantity("bandwidth_gbps", Quantity::bandwidth);
  l.latency_us = f.quantity("latency_us", Quantity::latency);
  l.oversubscription = f.quantity("oversubscription", Quantity::oversubscription, 1.0);
  l.loss = f.quantity("loss", Quantity::loss, 0.0);
  l.jitter_us = f.quantity("jitter_us", Quantity::latency, 0.0);
  l.tcp_streams = static_cast<int>(f.count("tcp_streams", Quantity::tcp_streams, 1));
  f.allow("comment");
  return l;
}

static Link read_link(Fields& parent, const std::string& key, const std::string& file) {
  Fields f(parent.object(key), file, parent.path_of(key));
  const Link l = read_link_fields(f);
  f.finish();
  return l;
}

static Device read_device(Fields& parent, const std::string& key, const std::string& file) {
  Fields d(parent.object(key), file, parent.path_of(key));
  Device dev;
  dev.name = d.name("name");
  Fields peak(d.object("peak_tflops"), file, d.path_of("peak_tflops"));
  for (DType dt : kDTypes)
    if (peak.has(to_string(dt))) dev.peak_tflops[dt] = peak.quantity(to_string(dt), Quantity::peak_compute);
  peak.finish();
  if (dev.peak_tflops.empty())
    d.fail("peak_tflops", "at least one dtype's dense TFLOP/s (fp32, tf32, bf16, fp16, fp8)");
  dev.hbm_gib = d.quantity("hbm_gib", Quantity::hbm_capacity);
  dev.hbm_bandwidth_gbps = d.quantity("hbm_bandwidth_gbps", Quantity::hbm_bandwidth);
  dev.nvlink_sharp = d.boolean("nvlink_sharp", nvlink_sharp_by_name(dev.name));
  dev.sm_count = static_cast<int>(d.count("sm_count", Quantity::sm_count, 0));
  dev.emulation = d.choice("emulation", {"native", "paced"}, "native") == "paced" ? DeviceEmulation::paced
                                                                                  : DeviceEmulation::native;
  dev.op_overhead_us = d.quantity("op_overhead_us", Quantity::op_overhead, 0.0);
  dev.poll_us = d.quantity("poll_us", Quantity::poll_interval, 50.0);
  if (d.has("efficiency")) {
    Fields e(d.object("efficiency"), file, d.path_of("efficiency"));
    DeclaredEfficiency x;
    x.gemm = e.quantity("gemm", Quantity::efficiency);
    x.attention = e.quantity("attention", Quantity::efficiency);
    x.memory = e.quantity("memory", Quantity::efficiency);
    e.finish();
    dev.efficiency = x;
  }
  d.allow("comment");
  d.finish();
  return dev;
}

// Building names at `key` of `f` (an array of at least two, each a building of the cluster, once):
// their indices.
static std::vector<int> read_building_names(Fields& f, const std::string& key, const std::vector<Building>& buildings) {
  const json& names = f.array(key);
  if (names.size() < 2) f.fail(key, "at least two building names");
  std::vector<int> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string path = json_path(f.path_of(key), i);
    if (!names[i].is_string()) throw InputError(f.file(), path, "a building name, got " + json_type_name(names[i]));
    const std::string n = names[i].get<std::string>();
    auto it = std::find_if(buildings.begin(), buildings.end(), [&n](const Building& b) { return b.name == n; });
    if (it == buildings.end())
      throw InputError(f.file(), path, "one of the cluster's building names, got \"" + n + "\"");
    const int b = static_cast<int>(it - buildings.begin());
    if (std::find(out.begin(), out.end(), b) != out.end())
      throw InputError(f.file(), path, "each building once, got \"" + n + "\" twice");
    out.push_back(b);
  }
  return out;
}

GpuKind gpu_kind(const std::string& name) {
  auto has = [&name](const char* word) { return name.find(word) != std::string::npos; };
  constexpr std::pair<const char*, GpuGeneration> kNames[] = {{"A100", GpuGeneration::a100},
                                                              {"H100", GpuGeneration::h100},
                                                              {"H200", GpuGeneration::h200},
                                                              {"B200", GpuGeneration::b200}};
  GpuKind k;
  for (const auto& [word, generation] : kNames)
    if (has(word)) {
      k.generation = generation;
      break;
    }
  k.sxm = has("SXM") || has("HGX") || has("DGX");
  k.pcie = has("PCIe");
  return k;
}

const char* to_string(GpuGeneration g) {
  switch (g) {
    case GpuGeneration::a100:
      return "a100";
    case GpuGeneration::h100:
      return "h100";
    case GpuGeneration::h200:
      return "h200";
    case GpuGeneration::b200:
      return "b200";
    case GpuGeneration::unknown:
      break;
  }
  return "unknown";
}

std::optional<GpuGeneration> parse_gpu_generation(const std::string& name) {
  for (GpuGeneration g : {GpuGeneration::a100, GpuGeneration::h100, GpuGeneration::h200, GpuGeneration::b200})
    if (name == to_string(g)) return g;
  return std::nullopt;
}

const char* to_string(DeviceEmulation e) { return e == DeviceEmulation::paced ? "paced" : "native"; }

bool nvlink_sharp_by_name(const std::string& name) {
  const GpuKind k = gpu_kind(name);
  return (k.hopper() || k.generation == GpuGeneration::b200) && k.sxm;
}

// read_cluster's phases, in the order its fields are read (the first fault found is the one said).
// The buildings, each named once; returns their nodes (at most kMaxSize).
static std::int64_t read_buildings(Fields& f, const std::string& file, Cluster& c) {
  const json& buildings = f.array("buildings");
  if (buildings.empty()) f.fail("buildings", "at least one building");
  std::set<std::string> names;
  std::int64_t total_nodes = 0;
  for (std::size_t i = 0; i < buildings.size(); ++i) {
    Fields b(buildings[i], file, json_path(f.path_of("buildings"), i));
    Building bl;
    bl.name = b.name("name");
    bl.nodes = b.count("nodes", Quantity::size);
    total_nodes += bl.nodes;  // both terms <= 2^40 here: the sum cannot overflow
    if (total_nodes > kMaxSize)
      b.fail("nodes", "a node count that keeps the cluster at most " + std::to_string(kMaxSize) + " nodes");
    if (b.has("device")) bl.device = read_device(b, "device", file);
    bl.devices_per_node = static_cast<int>(b.count("devices_per_node", Quantity::devices_per_node, 0));
    bl.compute_slowdown = b.quantity("compute_slowdown", Quantity::compute_slowdown, 1.0);
    b.allow("comment");
    b.finish();
    if (!names.insert(bl.name).second)
      throw InputError(file, b.path_of("name"), "a building name used once, got \"" + bl.name + "\" twice");
    c.buildings.push_back(bl);
  }
  return total_nodes;
}

static void read_devices_per_node(Fields& f, Cluster& c, std::int64_t total_nodes) {
  // An int in Cluster (at most 2^20); the world size (nodes × devices_per_node) in its row.
  c.devices_per_node = static_cast<int>(f.count("devices_per_node", Quantity::devices_per_node));
  // Each building's ranks (its nodes x its devices per node, each factor <= 2^40 and 2^20) summed
  // stay within the world-size row.
  std::int64_t world = 0;
  for (const Building& b : c.buildings) {
    world += b.nodes * (b.devices_per_node > 0 ? b.devices_per_node : c.devices_per_node);
    if (!within(bound(Quantity::world_size), static_cast<double>(world)))
      f.fail("devices_per_node", describe(bound(Quantity::world_size)) + ", got " + std::to_string(total_nodes) +
                                     " nodes x " + std::to_string(c.devices_per_node) + " (with the buildings' own)");
  }
}

// The cross-building link under each network technology the cluster offers.
static void read_technologies(Fields& f, const json* techs, const std::string& file, Cluster& c) {
  if (!techs->is_array()) f.fail("network_technologies", "an array, got " + json_type_name(*techs));
  // Each technology multiplies explore's candidates: bounded before any is read.
  if (const Bound& most = bound(Quantity::technologies); !within(most, static_cast<double>(techs->size())))
    f.fail("network_technologies", "at most " + std::to_string(static_cast<std::int64_t>(most.max)) +
                                       " technologies (each one multiplies explore's candidates), got " +
                                       std::to_string(techs->size()));
  std::set<std::string> tnames;
  for (std::size_t i = 0; i < techs->size(); ++i) {
    std::string path = json_path(f.path_of("network_technologies"), i);
    Fields t((*techs)[i], file, path);
    NetworkTechnology nt;
    nt.name = t.name("name");
    nt.description = t.string("description", "");
    nt.link = read_link(t, "cross_building", file);
    if (t.has("buildings")) nt.buildings = read_building_names(t, "buildings", c.buildings);
    t.finish();
    if (!tnames.insert(nt.name).second)
      throw InputError(file, t.path_of("name"), "a technology name used once, got \"" + nt.name + "\" twice");
    c.network_technologies.push_back(nt);
  }
}

// Paced compute is the CPU testbed's (a GPU runs at its own speed), and one mode for every rank: a
// building's own device follows the cluster's.
static void check_emulation(Fields& f, const std::string& file, Cluster& c) {
  if (c.device.paced() && c.backend == Backend::cuda)
    throw InputError(file, f.path_of("device") + "/emulation",
                     "\"native\" on a cuda cluster (a GPU runs at its own speed)");
  const json& buildings = f.array("buildings");
  for (std::size_t i = 0; i < c.buildings.size(); ++i) {
    Building& b = c.buildings[i];
    if (!b.device) continue;
    const bool stated = buildings[i].contains("device") && buildings[i]["device"].contains("emulation");
    if (stated && b.device->emulation != c.device.emulation)
      throw InputError(
          file, json_path(f.path_of("buildings"), i) + "/device/emulation",
          std::string("\"") + to_string(c.device.emulation) + "\", as the cluster's device (one mode for every rank)");
    b.device->emulation = c.device.emulation;
    if (!buildings[i]["device"].contains("poll_us")) b.device->poll_us = c.device.poll_us;
  }
}

// Links between given buildings that differ from the cluster's cross-building link.
static void read_building_links(Fields& f, const json* links, const std::string& file, Cluster& c) {
  if (!links->is_array()) f.fail("building_links", "an array, got " + json_type_name(*links));
  std::set<std::pair<int, int>> pairs;
  for (std::size_t i = 0; i < links->size(); ++i) {
    Fields l((*links)[i], file, json_path(f.path_of("building_links"), i));
    BuildingLink bl;
    bl.buildings = read_building_names(l, "buildings", c.buildings);
    bl.link = read_link_fields(l);
    l.finish();
    for (std::size_t a = 0; a < bl.buildings.size(); ++a)
      for (std::size_t b = a + 1; b < bl.buildings.size(); ++b) {
        const auto pair = std::minmax(bl.buildings[a], bl.buildings[b]);
        if (!pairs.insert({pair.first, pair.second}).second)
          l.fail("buildings", "each pair of buildings in one entry, got " +
                                  c.buildings[static_cast<std::size_t>(pair.first)].name + " and " +
                                  c.buildings[static_cast<std::size_t>(pair.second)].name + " again");
      }
    c.building_links.push_back(bl);
  }
}

Cluster read_cluster(const json& value, const std::string& file) {
  Fields f(value, file, "");
  f.choice("kind", {"cluster"}, "cluster");  // a file of another kind is refused wherever it is read
  f.allow("comment");
  Cluster c;
  c.name = f.name("name");
  c.backend = *parse_backend(f.choice("backend", {"cpu", "cuda"}, "cpu"));
  const std::int64_t total_nodes = read_buildings(f, file, c);
  read_devices_per_node(f, c, total_nodes);
  c.device = read_device(f, "device", file);
  check_emulation(f, file, c);
  {
    Fields links(f.object("links"), file, f.path_of("links"));
    c.intra_node = read_link(links, "intra_node", file);
    c.intra_building = read_link(links, "intra_building", file);
    c.cross_building = read_link(links, "cross_building", file);
    links.finish();
  }
  if (const json* techs = f.optional("network_technologies")) read_technologies(f, techs, file, c);
  if (const json* links = f.optional("building_links")) read_building_links(f, links, file, c);
  f.finish();
  return c;
}

Cluster load_cluster(const std::string& file) { return read_cluster(load_json_file(file), file); }

static json to_json(const Link& l) {
  json j = {
      {"bandwidth_gbps", l.bandwidth_gbps}, {"latency_us", l.latency_us}, {"oversubscription", l.oversubscription}};
  if (l.loss > 0) j["loss"] = l.loss;
  if (l.jitter_us > 0) j["jitter_us"] = l.jitter_us;
  if (l.tcp_streams != 1) j["tcp_streams"] = l.tcp_streams;
  return j;
}

static json to_json(const Device& d) {
  json peak = json::object();
  for (const auto& [dt, tflops] : d.peak_tflops) peak[to_string(dt)] = tflops;
  json j = {{"name", d.name},
            {"peak_tflops", peak},
            {"hbm_gib", d.hbm_gib},
            {"hbm_bandwidth_gbps", d.hbm_bandwidth_gbps},
            {"nvlink_sharp", d.nvlink_sharp}};
  if (d.sm_count > 0) j["sm_count"] = d.sm_count;
  if (d.paced()) j["emulation"] = to_string(d.emulation), j["poll_us"] = d.poll_us;
  if (d.op_overhead_us > 0) j["op_overhead_us"] = d.op_overhead_us;
  if (d.efficiency)
    j["efficiency"] = {
        {"gemm", d.efficiency->gemm}, {"attention", d.efficiency->attention}, {"memory", d.efficiency->memory}};
  return j;
}

static json names_json(const Cluster& c, const std::vector<int>& buildings) {
  json out = json::array();
  for (int b : buildings) out.push_back(c.buildings[static_cast<std::size_t>(b)].name);
  return out;
}

json to_json(const Cluster& c) {
  json j;
  j["name"] = c.name;
  j["backend"] = to_string(c.backend);
  j["buildings"] = json::array();
  for (const auto& b : c.buildings) {
    json jb = {{"name", b.name}, {"nodes", b.nodes}};
    if (b.device) jb["device"] = to_json(*b.device);
    if (b.devices_per_node > 0) jb["devices_per_node"] = b.devices_per_node;
    if (b.compute_slowdown != 1.0) jb["compute_slowdown"] = b.compute_slowdown;
    j["buildings"].push_back(jb);
  }
  j["devices_per_node"] = c.devices_per_node;
  j["device"] = to_json(c.device);
  j["links"] = {{"intra_node", to_json(c.intra_node)},
                {"intra_building", to_json(c.intra_building)},
                {"cross_building", to_json(c.cross_building)}};
  j["network_technologies"] = json::array();
  for (const auto& t : c.network_technologies) {
    json jt = {{"name", t.name}, {"description", t.description}, {"cross_building", to_json(t.link)}};
    if (!t.buildings.empty()) jt["buildings"] = names_json(c, t.buildings);
    j["network_technologies"].push_back(jt);
  }
  if (!c.building_links.empty()) {
    j["building_links"] = json::array();
    for (const auto& l : c.building_links) {
      json jl = to_json(l.link);
      jl["buildings"] = names_json(c, l.buildings);
      j["building_links"].push_back(jl);
    }
  }
  return j;
}

}  // namespace sax
