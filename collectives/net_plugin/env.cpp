#include "collectives/net_plugin/env.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "spec/bounds.hpp"
#include "spec/env.hpp"
#include "spec/error.hpp"

namespace sax::coll::net {

namespace {

[[noreturn]] void missing(const char* name) {
  throw UsageError(std::string("environment variable ") + name + ": expected a value with " + kEnvBuilding + " set");
}

[[noreturn]] void out_of_bounds(const char* name, const std::string& expected) {
  throw UsageError(std::string("environment variable ") + name + ": expected " + expected + ", got '" +
                   std::getenv(name) + "'");
}

// A figure of the link read as a cluster file's link field is (spec/bounds.hpp's row for `q`, its
// upper bound lowered to `cap` where the plugin keeps it in a smaller type; `zero_is_none`: 0 is
// accepted too, meaning "none"): 1e-300 GB/s would let every message through unheld. Unset or
// empty: nothing.
std::optional<double> env_bounded(const char* name, Quantity q, double cap, bool zero_is_none = false) {
  Bound b = bound(q);
  b.max = std::min(b.max, cap);
  const std::string expected = (zero_is_none ? "0 (none) or " : "") + describe(b);
  std::optional<double> x;
  try {
    if (b.integer) {
      if (const auto i = env_integer(name, INT64_MIN, INT64_MAX)) x = static_cast<double>(*i);
    } else {
      x = env_number(name, -std::numeric_limits<double>::max(), std::numeric_limits<double>::max());
    }
  } catch (const UsageError&) {
    out_of_bounds(name, expected);  // not a number at all: say what it takes
  }
  if (x && !within(b, *x) && !(zero_is_none && *x == 0)) out_of_bounds(name, expected);
  return x;
}

constexpr double kNoCap = std::numeric_limits<double>::max();

}  // namespace

PluginSettings read_plugin_settings() {
  PluginSettings s;
  // Every variable is checked, whether or not a boundary is configured: garbage is an error.
  const auto building = env_integer(kEnvBuilding, 0, LinkPacer::kMaxBuildings - 1);
  const auto latency_us = env_bounded(kEnvLatencyUs, Quantity::latency, kNoCap);
  const auto bandwidth_gbps = env_bounded(kEnvBandwidthGbps, Quantity::bandwidth, kNoCap);
  Link& link = s.boundary.emulation.link;
  link.oversubscription =
      env_bounded(kEnvOversubscription, Quantity::oversubscription, kNoCap).value_or(kDefaultOversubscription);
  // The devices behind one building's link: at most a world's, and an int here.
  s.boundary.emulation.devices_in_building = static_cast<int>(
      env_bounded(kEnvDevicesInBuilding, Quantity::world_size, INT_MAX).value_or(kDefaultDevicesInBuilding));
  s.boundary.emulation.nic_gbps = env_bounded(kEnvNicGbps, Quantity::bandwidth, kNoCap, true).value_or(kDefaultNicGbps);
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
