#include "spec/cluster.hpp"

#include <cstdint>
#include <iterator>
#include <set>

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

RankPlace Cluster::place(std::int64_t rank) const {
  RankPlace p;
  p.node = rank / devices_per_node;
  p.local_device = static_cast<int>(rank % devices_per_node);
  std::int64_t first = 0;
  for (std::size_t b = 0; b < buildings.size(); ++b) {
    if (p.node < first + buildings[b].nodes) {
      p.building = static_cast<int>(b);
      return p;
    }
    first += buildings[b].nodes;
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
  return {cross_building_link(tech),
          static_cast<int>(buildings.at(static_cast<std::size_t>(building)).nodes * devices_per_node),
          intra_building.bandwidth_gbps};
}

std::string boundary_pacing_key(const Cluster& c, const std::string& tech, std::int64_t job) {
  return c.name + "-" + (tech.empty() ? "own" : tech) + "-" + std::to_string(job);
}

static Link read_link(Fields& parent, const std::string& key, const std::string& file) {
  Fields f(parent.object(key), file, parent.path_of(key));
  Link l;
  l.bandwidth_gbps = f.quantity("bandwidth_gbps", Quantity::bandwidth);
  l.latency_us = f.quantity("latency_us", Quantity::latency);
  l.oversubscription = f.quantity("oversubscription", Quantity::oversubscription, 1.0);
  f.allow("comment");
  f.finish();
  return l;
}

bool nvlink_sharp_by_name(const std::string& name) {
  auto has = [&name](const char* word) { return name.find(word) != std::string::npos; };
  return (has("H100") || has("H200") || has("B200")) && (has("SXM") || has("HGX") || has("DGX"));
}

Cluster read_cluster(const json& value, const std::string& file) {
  Fields f(value, file, "");
  f.choice("kind", {"cluster"}, "cluster");  // a file of another kind is refused wherever it is read
  f.allow("comment");
  Cluster c;
  c.name = f.string("name");
  c.backend = *parse_backend(f.choice("backend", {"cpu", "cuda"}, "cpu"));

  const json& buildings = f.array("buildings");
  if (buildings.empty()) f.fail("buildings", "at least one building");
  std::set<std::string> names;
  std::int64_t total_nodes = 0;
  for (std::size_t i = 0; i < buildings.size(); ++i) {
    Fields b(buildings[i], file, json_path(f.path_of("buildings"), i));
    Building bl;
    bl.name = b.string("name");
    bl.nodes = b.count("nodes", Quantity::size);
    total_nodes += bl.nodes;  // both terms <= 2^40 here: the sum cannot overflow
    if (total_nodes > kMaxSize)
      b.fail("nodes", "a node count that keeps the cluster at most " + std::to_string(kMaxSize) + " nodes");
    b.allow("comment");
    b.finish();
    if (!names.insert(bl.name).second)
      throw InputError(file, b.path_of("name"), "a building name used once, got \"" + bl.name + "\" twice");
    c.buildings.push_back(bl);
  }
  // An int in Cluster (at most 2^20); the world size (nodes × devices_per_node) in its row.
  c.devices_per_node = static_cast<int>(f.count("devices_per_node", Quantity::devices_per_node));
  const auto world = checked_mul(total_nodes, c.devices_per_node);
  if (!world || !within(bound(Quantity::world_size), static_cast<double>(*world)))
    f.fail("devices_per_node", describe(bound(Quantity::world_size)) + ", got " + std::to_string(total_nodes) +
                                   " nodes x " + std::to_string(c.devices_per_node));

  {
    Fields d(f.object("device"), file, f.path_of("device"));
    c.device.name = d.string("name");
    Fields peak(d.object("peak_tflops"), file, d.path_of("peak_tflops"));
    for (DType dt : kDTypes)
      if (peak.has(to_string(dt))) c.device.peak_tflops[dt] = peak.quantity(to_string(dt), Quantity::peak_compute);
    peak.finish();
    if (c.device.peak_tflops.empty())
      d.fail("peak_tflops", "at least one dtype's dense TFLOP/s (fp32, tf32, bf16, fp16, fp8)");
    c.device.hbm_gib = d.quantity("hbm_gib", Quantity::hbm_capacity);
    c.device.hbm_bandwidth_gbps = d.quantity("hbm_bandwidth_gbps", Quantity::hbm_bandwidth);
    c.device.nvlink_sharp = d.boolean("nvlink_sharp", nvlink_sharp_by_name(c.device.name));
    c.device.sm_count = static_cast<int>(d.count("sm_count", Quantity::sm_count, 0));
    d.allow("comment");
    d.finish();
  }

  {
    Fields links(f.object("links"), file, f.path_of("links"));
    c.intra_node = read_link(links, "intra_node", file);
    c.intra_building = read_link(links, "intra_building", file);
    c.cross_building = read_link(links, "cross_building", file);
    links.finish();
  }

  if (const json* techs = f.optional("network_technologies")) {
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
      nt.name = t.string("name");
      nt.description = t.string("description", "");
      nt.link = read_link(t, "cross_building", file);
      t.finish();
      if (!tnames.insert(nt.name).second)
        throw InputError(file, t.path_of("name"), "a technology name used once, got \"" + nt.name + "\" twice");
      c.network_technologies.push_back(nt);
    }
  }
  f.finish();
  return c;
}

Cluster load_cluster(const std::string& file) { return read_cluster(load_json_file(file), file); }

static json to_json(const Link& l) {
  return {{"bandwidth_gbps", l.bandwidth_gbps}, {"latency_us", l.latency_us}, {"oversubscription", l.oversubscription}};
}

json to_json(const Cluster& c) {
  json j;
  j["name"] = c.name;
  j["backend"] = to_string(c.backend);
  j["buildings"] = json::array();
  for (const auto& b : c.buildings) j["buildings"].push_back({{"name", b.name}, {"nodes", b.nodes}});
  j["devices_per_node"] = c.devices_per_node;
  json peak = json::object();
  for (const auto& [dt, tflops] : c.device.peak_tflops) peak[to_string(dt)] = tflops;
  j["device"] = {{"name", c.device.name},
                 {"peak_tflops", peak},
                 {"hbm_gib", c.device.hbm_gib},
                 {"hbm_bandwidth_gbps", c.device.hbm_bandwidth_gbps},
                 {"nvlink_sharp", c.device.nvlink_sharp}};
  if (c.device.sm_count > 0) j["device"]["sm_count"] = c.device.sm_count;
  j["links"] = {{"intra_node", to_json(c.intra_node)},
                {"intra_building", to_json(c.intra_building)},
                {"cross_building", to_json(c.cross_building)}};
  j["network_technologies"] = json::array();
  for (const auto& t : c.network_technologies)
    j["network_technologies"].push_back(
        {{"name", t.name}, {"description", t.description}, {"cross_building", to_json(t.link)}});
  return j;
}

}  // namespace sax
