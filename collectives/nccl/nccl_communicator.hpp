// The NCCL backend (device buffers): one NCCL communicator per MPI group, bootstrapped over it
// (rank 0 makes the unique id, MPI broadcasts it). Operations are enqueued on the stream the
// device hands out for communication (kernels/device.hpp), or on one of the communicator's own
// when none is given; a blocking call synchronises the stream, an async one records an event
// that Handle::wait() synchronises. This header names no CUDA type, so code outside nccl/ never
// includes CUDA headers; builds without CUDA link nccl_none.cpp instead.
#pragma once

#include <mpi.h>

#include <memory>

#include "collectives/communicator.hpp"
#include "spec/stream.hpp"

namespace sax::coll {

// True when this build has the NCCL backend.
bool nccl_compiled();

// Collective over `comm` (freed with the communicator when `owned`); `device` is the CUDA device
// this rank uses, `stream` where operations are enqueued (null: a stream of its own).
std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, bool owned, int device, Stream stream = {});

}  // namespace sax::coll
