// The environment that makes a building boundary real for NCCL in every emulation mode (docs/design.md
// "Building boundaries", ../shared/TESTBED.md "NCCL on emulated buildings"). `sax launch` sets it
// whatever the command's backend (MPI reads none of it), and a variable already in the launcher's
// environment is kept: the user's choice wins.
//
// - Every mode: each emulated node its own NCCL_HOSTID. NCCL takes P2P (NVLink, PCIe) and shared
//   memory between ranks whose host hash matches, and that hash (hostname + boot id) is the same
//   for every rank on one host, so without it NCCL would go around any boundary emulated there.
//   Per node rather than per building: ranks on two real nodes of one building must not look like
//   one host to NCCL, and a node never spans buildings, so the ids still differ across every
//   boundary.
// - plugin: the NCCL net plugin (libnccl-net-sax.so, built beside sax) by its full path, NCCL_NET
//   naming it so that NCCL fails rather than falling back to its own transports when it does not
//   load (NCCL 2.28 src/plugin/net.cc: only plugins whose name matches NCCL_NET are initialized),
//   and the plugin's settings: the cross-building link as the software emulator takes it
//   (Cluster::boundary), this rank's building, the pacing key.
// - netns: NCCL's socket transport over the building namespace's veth (tc shapes sockets, not
//   RDMA), with more sockets and helper threads than NCCL's auto-tuning gives a veth (one socket).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "spec/cluster.hpp"
#include "spec/env.hpp"

namespace sax::launcher {

// SAX_EMULATION's values (spec/env.hpp), which the launcher's modes are.
using sax::Emulation;
using sax::to_string;

// The NCCL net plugin's names, in one place to rename them; its settings are spec/env.hpp's
// SAX_NET_* declarations.
namespace nccl_plugin {
inline constexpr const char* kLibrary = "libnccl-net-sax.so";  // built beside the sax program
inline constexpr const char* kNetName = "sax";                 // its ncclNet name, which NCCL_NET selects
}  // namespace nccl_plugin

// NCCL's socket transport on a veth: auto-tuning gives no helper thread and one socket there
// (NCCL 2.28 src/transport/net_socket.cc ncclNetSocketGetNsockNthread: more only for AWS and GCP
// NIC vendors). 4 × 4 is what NCCL's env.rst suggests for generic 100G networks, within its limits:
// threads 1-16 (MAX_THREADS) and threads × sockets per thread ≤ 64 (MAX_SOCKETS), both in that
// file and in env.rst (NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD).
inline constexpr int kNcclSocketThreads = 4;
inline constexpr int kNcclSocketsPerThread = 4;

using EnvList = std::vector<std::pair<std::string, std::string>>;

// What the boundary needs set: `common` for every rank (and the launcher), `per_building` for the
// ranks of each building, and NCCL_HOSTID per node (`hostid_prefix[b]` + the node's global index;
// empty when the environment sets it). `kept` names what the environment already set: it is
// neither set nor changed, only passed on to the ranks.
struct NcclEnv {
  EnvList common;
  std::vector<EnvList> per_building;
  std::vector<std::string> hostid_prefix;
  std::vector<std::string> kept;
  bool per_rank() const;  // whether the ranks need the wrapper
};

struct NcclEnvOptions {
  std::string technology;   // "" = the cluster's own cross-building link
  std::string plugin_path;  // plugin mode: the library NCCL_NET_PLUGIN names
  int netns_slot = 0;       // netns mode: the testbed's slot (its veth names)
  std::int64_t job = 0;     // plugin mode: the job in the pacing key (the launcher's pid)
};

NcclEnv nccl_env(const Cluster& cluster, Emulation emulation, const NcclEnvOptions& options);

// The rank wrapper: `sh -c PROGRAM sax-rank COMMAND...` sets each rank's per-building variables and
// NCCL_HOSTID from its rank (OMPI_COMM_WORLD_RANK under mpirun, SLURM_PROCID under srun; ranks fill
// nodes, nodes fill buildings: Cluster::place) and then runs the command. Its size grows with the
// buildings, not the ranks.
std::vector<std::string> rank_wrapper(const NcclEnv& env, const Cluster& cluster);

}  // namespace sax::launcher
