// What the NCCL net plugin reads from the environment, in one place: the contract with the
// launcher (`sax launch --emulate plugin` sets these for every rank), each with its default or
// "required". Read once, at the plugin's first init. Without SAX_NET_BUILDING there is no
// boundary: every message passes straight through. A value that is not what its variable takes
// fails the plugin's init with one line naming the variable (spec/env.hpp's strict readers); the
// link's figures take what a cluster file's link fields take (spec/bounds.hpp's rows), with the
// range in that line.
#pragma once

#include <string>

#include "collectives/net_plugin/boundary.hpp"

namespace sax::coll::net {

// This rank's building index (0 .. LinkPacer::kMaxBuildings - 1); unset: no boundary.
inline constexpr const char* kEnvBuilding = "SAX_NET_BUILDING";
// The cross-building link (spec/cluster.hpp's Link), required with a building: α one-way in µs,
// and the bandwidth per device and direction in GB/s (10^9 bytes/s).
inline constexpr const char* kEnvLatencyUs = "SAX_NET_LATENCY_US";
inline constexpr const char* kEnvBandwidthGbps = "SAX_NET_BANDWIDTH_GBPS";
// The link's oversubscription (>= 1): the building's egress carries devices × bandwidth / it.
inline constexpr const char* kEnvOversubscription = "SAX_NET_OVERSUBSCRIPTION";
inline constexpr double kDefaultOversubscription = 1.0;
// Devices (ranks) of this building sharing its egress.
inline constexpr const char* kEnvDevicesInBuilding = "SAX_NET_DEVICES_IN_BUILDING";
inline constexpr int kDefaultDevicesInBuilding = 1;
// A device's NIC in GB/s, which also bounds it (the cluster's intra_building link); 0: none.
inline constexpr const char* kEnvNicGbps = "SAX_NET_NIC_GBPS";
inline constexpr double kDefaultNicGbps = 0;
// Names the pacing state shared by the processes of a host (LinkPacer's shared-memory segment):
// one value per job, the same on every rank.
inline constexpr const char* kEnvKey = "SAX_NET_KEY";
inline constexpr const char* kDefaultKey = "nccl-net";
// NCCL's own: the interfaces the socket transport may listen on (socket_transport.hpp); unset:
// the first non-loopback interface that is up.
inline constexpr const char* kEnvSocketIfname = "NCCL_SOCKET_IFNAME";
// Another NCCL net plugin to carry the messages instead of our socket transport (an IB one, say):
// its path, or a name resolved as NCCL resolves NCCL_NET_PLUGIN (then libnccl-net-<name>.so);
// plugin_transport.hpp. Unset: the socket transport.
inline constexpr const char* kEnvInner = "SAX_NET_INNER";

struct PluginSettings {
  BoundaryConfig boundary;
  std::string socket_ifname;  // empty: unset
  std::string inner;          // SAX_NET_INNER's value; empty: unset (the socket transport)
};

// Throws UsageError naming the variable whose value is wrong, or that is missing.
PluginSettings read_plugin_settings();

}  // namespace sax::coll::net
