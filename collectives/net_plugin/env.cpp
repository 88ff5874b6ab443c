#include "collectives/net_plugin/env.hpp"

#include <string>

#include "spec/env.hpp"
#include "spec/error.hpp"

namespace sax::coll::net {

static_assert(kEnvNetBuilding.max == LinkPacer::kMaxBuildings - 1, "a building index is a pacer's slot");

namespace {

[[noreturn]] void missing(const EnvVar& v) {
  throw UsageError(std::string("environment variable ") + v.name + ": expected a value with " + kEnvNetBuilding.name +
                   " set");
}

}  // namespace

PluginSettings read_plugin_settings() {
  PluginSettings s;
  // Every variable is checked, whether or not a boundary is configured: garbage is an error.
  const auto building = env_integer(kEnvNetBuilding);
  const auto latency_us = env_quantity(kEnvNetLatencyUs);
  const auto bandwidth_gbps = env_quantity(kEnvNetBandwidthGbps);
  LinkEmulation& e = s.boundary.emulation;
  e.link.oversubscription = env_quantity(kEnvNetOversubscription).value_or(kEnvNetOversubscription.unset);
  e.devices_in_building =
      static_cast<int>(env_quantity(kEnvNetDevicesInBuilding).value_or(kEnvNetDevicesInBuilding.unset));
  e.nic_gbps = env_quantity(kEnvNetNicGbps).value_or(kEnvNetNicGbps.unset);
  e.pacing_key = env_text(kEnvNetKey);
  s.socket_ifname = env_text(kEnvNcclSocketIfname);
  s.inner = env_text(kEnvNetInner);
  if (building) {
    if (!latency_us) missing(kEnvNetLatencyUs);
    if (!bandwidth_gbps) missing(kEnvNetBandwidthGbps);
    s.boundary.building = static_cast<int>(*building);
    e.link.latency_us = *latency_us;
    e.link.bandwidth_gbps = *bandwidth_gbps;
  }
  return s;
}

}  // namespace sax::coll::net
