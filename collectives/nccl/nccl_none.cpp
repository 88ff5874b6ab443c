// The NCCL backend where this build has no CUDA toolkit: it says so.
#include "collectives/nccl/nccl_communicator.hpp"
#include "spec/error.hpp"

namespace sax::coll {

bool nccl_compiled() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, bool, int, Stream) {
  throw UsageError("backend cuda: this sax was built without CUDA and NCCL (SAX_CUDA=OFF or no toolkit found)");
}

}  // namespace sax::coll
