#include "launcher/nccl_env.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "launcher/launch.hpp"
#include "launcher/netns.hpp"

namespace sax::launcher {

namespace {

bool in_environment(const std::string& name) { return std::getenv(name.c_str()) != nullptr; }

// The NIC a device's namespace has (launcher/netns.cpp names it): the only interface NCCL may use
// there (a prefix: each device's NIC carries its index after it).
std::string netns_interface(int slot) { return netns_nic_prefix(slot); }

}  // namespace

bool NcclEnv::per_rank() const {
  return !hostid_prefix.empty() ||
         std::any_of(per_building.begin(), per_building.end(), [](const EnvList& e) { return !e.empty(); });
}

NcclEnv nccl_env(const Cluster& c, Emulation emulation, const NcclEnvOptions& o) {
  NcclEnv e;
  // Each name once: what the environment already has is kept (and passed on), the rest is set.
  auto set = [&e](EnvList& to, const std::string& k, const std::string& v) {
    if (in_environment(k)) {
      if (std::find(e.kept.begin(), e.kept.end(), k) == e.kept.end()) e.kept.push_back(k);
      return;
    }
    to.emplace_back(k, v);
  };
  const auto buildings = static_cast<int>(c.buildings.size());
  e.per_building.resize(static_cast<std::size_t>(buildings));
  // Every launched job paces under the launcher's key (the plugin its boundary, the ranks their
  // software-emulated links), so that the launcher removes the pacing state after any job.
  set(e.common, kEnvNetKey.name, boundary_pacing_key(c, o.technology, o.job));
  if (emulation == Emulation::plugin) {
    set(e.common, "NCCL_NET_PLUGIN", o.plugin_path);
    set(e.common, "NCCL_NET", nccl_plugin::kNetName);
    const Link& link = c.cross_building_link(o.technology);
    set(e.common, kEnvNetLatencyUs.name, num(link.latency_us));
    set(e.common, kEnvNetBandwidthGbps.name, num(link.bandwidth_gbps));
    set(e.common, kEnvNetOversubscription.name, num(link.oversubscription));
    set(e.common, kEnvNetNicGbps.name, num(c.boundary(0, o.technology).nic_gbps));
    if (in_environment(kEnvNetInner.name)) e.kept.emplace_back(kEnvNetInner.name);
    for (int b = 0; b < buildings; ++b) {
      EnvList& to = e.per_building[static_cast<std::size_t>(b)];
      set(to, kEnvNetBuilding.name, std::to_string(b));
      set(to, kEnvNetDevicesInBuilding.name, std::to_string(c.boundary(b, o.technology).devices_in_building));
    }
  } else if (emulation == Emulation::netns) {
    set(e.common, "NCCL_NET", "Socket");
    set(e.common, "NCCL_IB_DISABLE", "1");
    set(e.common, "NCCL_SOCKET_NTHREADS", std::to_string(kNcclSocketThreads));
    set(e.common, "NCCL_NSOCKS_PERTHREAD", std::to_string(kNcclSocketsPerThread));
    set(e.common, kEnvNcclSocketIfname.name, netns_interface(o.netns_slot));
  }
  // NCCL_HOSTID's value is per node: the wrapper appends the node's index to the building's prefix.
  EnvList hostid;
  set(hostid, "NCCL_HOSTID", "");
  if (!hostid.empty())
    for (const auto& b : c.buildings) e.hostid_prefix.push_back("sax-" + c.name + "-" + b.name + "-node");
  return e;
}

std::vector<std::string> rank_wrapper(const NcclEnv& e, const Cluster& c) {
  auto exports = [&](std::size_t b) {
    std::string x;
    for (const auto& [k, v] : e.per_building[b]) x += " " + k + "=" + shell_quote(v);
    if (!e.hostid_prefix.empty()) x += " NCCL_HOSTID=" + shell_quote(e.hostid_prefix[b]) + "\"$n\"";
    return x.empty() ? std::string(" :") : " export" + x;
  };
  // The node from the rank, then the building from the node: one test per building.
  std::string p =
      "r=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:?sax: no rank (not started by mpirun or srun)}}; n=$((r / " +
      std::to_string(c.devices_per_node) + ")); ";
  const std::size_t buildings = c.buildings.size();
  std::int64_t end_node = 0;
  for (std::size_t b = 0; b < buildings; ++b) {
    end_node += c.buildings[b].nodes;
    if (buildings == 1)
      p += exports(b).substr(1) + "; ";
    else if (b + 1 < buildings)
      p += std::string(b == 0 ? "if" : "elif") + " [ \"$n\" -lt " + std::to_string(end_node) + " ]; then" + exports(b) +
           "; ";
    else
      p += "else" + exports(b) + "; fi; ";
  }
  return {"sh", "-c", p + "exec \"$@\"", "sax-rank"};
}

}  // namespace sax::launcher
