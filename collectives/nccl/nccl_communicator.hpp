// The NCCL backend (device buffers): one NCCL communicator per MPI group, bootstrapped over it
// (rank 0 makes the unique id, MPI broadcasts it). Operations are enqueued on the
// communicator's stream; a blocking call synchronises the stream, an async one records an event
// that Handle::wait() synchronises. This header names no CUDA type, so code outside nccl/ never
// includes CUDA headers; builds without CUDA link nccl_none.cpp instead.
#pragma once

#include <mpi.h>

#include <memory>

#include "collectives/communicator.hpp"

namespace sax::coll {

// True when this build has the NCCL backend.
bool nccl_compiled();

// Collective over `comm`; `device` is the CUDA device this rank uses.
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, int device);

}  // namespace sax::coll
