#include "collectives/net_plugin/env.hpp"

#include <cstdlib>

#include "spec/env.hpp"
#include "spec/error.hpp"

namespace sax::coll::net {

namespace {

[[noreturn]] void missing(const char* name) {
  throw UsageError(std::string("environment variable ") + name + ": expected a value with " + kEnvBuilding + " set");
}

}  // namespace

PluginSettings read_plugin_settings() {
  PluginSettings s;
  // Every variable is checked, whether or not a boundary is configured: garbage is an error.
  const auto building = env_integer(kEnvBuilding, 0, LinkPacer::kMaxBuildings - 1);
  const auto latency_us = env_number(kEnvLatencyUs, 0, 1e9);
  const auto bandwidth_gbps = env_number(kEnvBandwidthGbps, 0, 1e9);
  if (bandwidth_gbps && !(*bandwidth_gbps > 0))
    throw UsageError(std::string("environment variable ") + kEnvBandwidthGbps + ": expected a number above 0, got '" +
                     std::getenv(kEnvBandwidthGbps) + "'");
  Link& link = s.boundary.emulation.link;
  link.oversubscription = env_number(kEnvOversubscription, 1, 1e9).value_or(kDefaultOversubscription);
  s.boundary.emulation.devices_in_building =
      static_cast<int>(env_integer(kEnvDevicesInBuilding, 1, 1 << 30).value_or(kDefaultDevicesInBuilding));
  s.boundary.emulation.nic_gbps = env_number(kEnvNicGbps, 0, 1e9).value_or(kDefaultNicGbps);
  const char* key = std::getenv(kEnvKey);
  s.boundary.emulation.pacing_key = key && *key ? key : kDefaultKey;
  const char* ifname = std::getenv(kEnvSocketIfname);
  s.socket_ifname = ifname ? ifname : "";
  const char* inner = std::getenv(kEnvInner);
  s.inner = inner ? inner : "";
  if (building) {
    if (!latency_us) missing(kEnvLatencyUs);
    if (!bandwidth_gbps) missing(kEnvBandwidthGbps);
    s.boundary.building = static_cast<int>(*building);
    link.latency_us = *latency_us;
    link.bandwidth_gbps = *bandwidth_gbps;
  }
  return s;
}

}  // namespace sax::coll::net
