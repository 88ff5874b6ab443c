#include "collectives/factory.hpp"

#include <mpi.h>

#include "collectives/mpi/mpi_communicator.hpp"
#include "collectives/nccl/nccl_communicator.hpp"
#include "spec/checks/mpi.hpp"

namespace sax::coll {

namespace {

class Factory final : public CommunicatorFactory {
 public:
  Factory(Backend backend, int device, Stream stream) : backend_(backend), device_(device), stream_(stream) {}
  Backend backend() const override { return backend_; }

  GroupCommunicator make(const GroupSet& set) override {
    int rank = 0;
    SAX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    GroupCommunicator g;
    g.kind = set.kind;
    g.members = set.groups[static_cast<std::size_t>(set.group_of(rank))];
    g.link_class = set.link_class;
    MPI_Comm split = split_group(MPI_COMM_WORLD, set);
    g.comm = backend_ == Backend::cuda ? make_nccl_communicator(split, /*owned=*/true, device_, stream_)
                                       : make_mpi_communicator(split, /*owned=*/true);
    return g;
  }

 private:
  Backend backend_;
  int device_;
  Stream stream_;
};

}  // namespace

std::unique_ptr<CommunicatorFactory> make_communicator_factory(Backend backend, int cuda_device, Stream stream) {
  return std::make_unique<Factory>(backend, cuda_device, stream);
}

}  // namespace sax::coll
