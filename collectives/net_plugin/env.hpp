// The plugin's settings, read once at its first init through spec/env.hpp's declarations (the
// contract with `sax launch --emulate plugin`, which sets them for every rank).
#pragma once

#include <string>

#include "collectives/net_plugin/boundary.hpp"

namespace sax::coll::net {

struct PluginSettings {
  BoundaryConfig boundary;
  std::string socket_ifname;  // NCCL_SOCKET_IFNAME; empty: unset
  std::string inner;          // SAX_NET_INNER's value; empty: unset (the socket transport)
};

// Throws UsageError naming the variable whose value is wrong, or that is missing.
PluginSettings read_plugin_settings();

}  // namespace sax::coll::net
