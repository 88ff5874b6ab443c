// The loop a person would write to time an NCCL collective, as nccl-tests does by default: warm
// up, synchronise, meet, read the host clock, enqueue every iteration, synchronise the stream
// once, read the clock. On its own NCCL communicator and stream (same device and ranks as sax's),
// so that nothing of sax's is in it. Built only with CUDA (bench/nccl_bare.cpp).
#pragma once

#include <cstddef>
#include <memory>

#include "spec/collective.hpp"

namespace sax::bench {

class BareNccl {
 public:
  virtual ~BareNccl() = default;
  // Each rank's mean µs per iteration of `op` at `count` float32 elements (nccl-tests' size).
  virtual double time_us(CollOp op, const void* send, void* recv, std::size_t count, int iters, int warmup) = 0;
};

// Collective over MPI_COMM_WORLD; null where this build has no CUDA.
std::unique_ptr<BareNccl> make_bare_nccl(int device);

}  // namespace sax::bench
