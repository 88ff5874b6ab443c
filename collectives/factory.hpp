// The one place communicators are made: for a backend and a group set, the communicator of this
// rank's group, with the world ranks of its members and the link class the groups cross. With
// software link emulation it wraps the communicator of a group whose members sit in different
// buildings in the emulator (collectives/link_emulator.hpp; docs/design.md "Building boundaries"). MPI
// bootstraps every backend, so MPI must be initialised first (harness::Job does it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.hpp"
#include "collectives/groups.hpp"
#include "spec/cluster.hpp"
#include "spec/stream.hpp"

namespace sax::coll {

struct GroupCommunicator {
  std::unique_ptr<Communicator> comm;
  GroupKind kind = GroupKind::world;
  std::vector<std::int64_t> members;    // world ranks of this rank's group; member i is rank i of `comm`
  std::optional<LinkClass> link_class;  // the slowest link the set's groups cross (unknown without a cluster)
};

class CommunicatorFactory {
 public:
  virtual ~CommunicatorFactory() = default;
  virtual Backend backend() const = 0;
  // Collective over every rank of the world: each gets the communicator of its own group in `set`.
  virtual GroupCommunicator make(const GroupSet& set) = 0;
};

// What the software link emulator needs: where ranks sit, and the links to emulate.
struct LinkEmulationSetup {
  Cluster cluster;
  std::string technology;  // a network technology of the cluster; "" = its own cross-building link
  bool boundary = true;    // groups crossing a building boundary get the cross-building link
  // Groups inside one node get the cluster's intra_node link: a paced device's node fabric, paced
  // as its compute is (docs/design.md "Devices: native and paced"), so that what ranks sharing the
  // host's cores do to shared memory does not decide a message's time.
  bool node = false;
  // The job's pacing key (boundary_pacing_key): the launcher's (SAX_NET_KEY), which it removes
  // after the job; "" = one made here from rank 0's random job id.
  std::string pacing_key;
  // The parallelisms whose messages go ahead on the boundary (Schedule::link_priority's bits).
  std::uint8_t link_priority = 0;
};

// Backend::cpu: MPI communicators split from the world. Backend::cuda: NCCL communicators on CUDA
// device `cuda_device`, enqueuing on `stream` (the device's communication stream; null: their own).
// With `emulation`, a group crossing a building boundary gets the emulated link, and with its
// `node` a group inside one node the intra-node link; an unknown technology is a UsageError.
std::unique_ptr<CommunicatorFactory> make_communicator_factory(Backend backend, int cuda_device = 0, Stream stream = {},
                                                               std::optional<LinkEmulationSetup> emulation = {});

}  // namespace sax::coll
