// The one place communicators are made: for a backend and a group set, the communicator of this
// rank's group, with the world ranks of its members and the link class the groups cross. It is
// where the software link emulator will wrap a communicator, as a decorator, for the groups whose
// link it emulates (DESIGN.md "Building boundaries"). MPI bootstraps every backend, so MPI must be
// initialised first (harness::Job does it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

// Backend::cpu: MPI communicators split from the world. Backend::cuda: NCCL communicators on CUDA
// device `cuda_device`, enqueuing on `stream` (the device's communication stream; null: their own).
std::unique_ptr<CommunicatorFactory> make_communicator_factory(Backend backend, int cuda_device = 0,
                                                               Stream stream = {});

}  // namespace sax::coll
