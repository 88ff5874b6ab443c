// A device's ordered queue of work, shared by the kernels and the collectives that run on one
// device (kernels/device.hpp hands them out; the NCCL communicator enqueues on them), so that a
// step can overlap compute and communication. Opaque outside the backend folders: the CUDA
// backend's cudaStream_t. Null on the CPU backend, where work runs on the calling thread and
// communication overlaps compute through MPI's nonblocking operations, progressed by testing
// their handles between compute ops (collectives/communicator.hpp).
#pragma once

namespace sax {

struct Stream {
  void* native = nullptr;
  explicit operator bool() const { return native != nullptr; }
};

}  // namespace sax
