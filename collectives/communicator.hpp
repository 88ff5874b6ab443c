// One communicator interface for every backend: the collectives a training step uses, each
// blocking or asynchronous. Buffers come from the device the rank runs on (kernels/device.hpp:
// host memory on the CPU backend, device memory on CUDA), so callers never see a transport's
// headers; element types are sax::DType (float32 and bfloat16 on every backend).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spec/collective.hpp"
#include "spec/dtype.hpp"

namespace sax::coll {

// The element types every backend moves and sums (MPI has no bfloat16: sax sums it itself).
inline bool supported(DType d) { return d == DType::fp32 || d == DType::bf16; }

// Completion of an operation. An empty handle is complete (what blocking calls return).
class Handle {
 public:
  struct Impl {
    virtual ~Impl() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;  // true once complete; never blocks
  };
  Handle() = default;
  explicit Handle(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
  // Blocks until the operation is complete (for NCCL: until the device has finished it).
  void wait() {
    if (impl_) impl_->wait();
    impl_.reset();
  }
  // Never blocks. On the CPU backend each test also progresses the operation (MPI moves
  // nonblocking collectives forward inside its calls): a step that overlaps communication with
  // compute tests its handles between compute ops.
  bool test() {
    if (impl_ && impl_->test()) impl_.reset();
    return !impl_;
  }

 private:
  std::unique_ptr<Impl> impl_;
};

// blocking: the call returns when the operation is complete. async: it returns at once and the
// Handle says when; compute may run in between (overlap). enqueue: the call returns once the
// operation is ordered on the communicator's stream, and later work on that stream (an event, a
// synchronisation) sees it complete — how nccl-tests times a batch of iterations; on the MPI
// backend, which has no stream, it is complete on return, as blocking.
enum class Mode { blocking, async, enqueue };

// Reductions are sums. Counts are elements of `dtype`; ranks are ranks inside this communicator.
// In place, as NCCL defines it: all_reduce with send == recv; all_gather with send == recv +
// rank() × send_count; reduce_scatter with recv == send + rank() × recv_count (every backend
// accepts these; MPI's are translated to MPI_IN_PLACE). broadcast works on one buffer. As MPI
// requires, every rank of a call is in place or none is. On MPI an in-place reduce_scatter
// leaves the rest of the buffer undefined (NCCL leaves it as it was) and pays one copy of the
// block into place (MPI puts the result at the buffer's start).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "cpu" (MPI) | "cuda" (NCCL)
  // The library call that carries `op` at `bytes` (nccl-tests' size: the all-reduce buffer,
  // all-gather's output, reduce-scatter's input, ...) posted in `mode`, e.g. "MPI_Reduce_scatter",
  // "ncclAllReduce"; Mode::async names the nonblocking call ("MPI_Iallreduce").
  virtual std::string path(CollOp op, std::uint64_t bytes, Mode mode) const = 0;

  virtual Handle all_reduce(const void* send, void* recv, std::size_t count, DType dtype, Mode mode) = 0;
  // send holds size() blocks of recv_count; this rank receives the sum of block rank().
  virtual Handle reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType dtype, Mode mode) = 0;
  // recv holds size() blocks of send_count, block r from rank r.
  virtual Handle all_gather(const void* send, void* recv, std::size_t send_count, DType dtype, Mode mode) = 0;
  // Block d of send goes to rank d; block s of recv came from rank s.
  virtual Handle all_to_all(const void* send, void* recv, std::size_t count_per_peer, DType dtype, Mode mode) = 0;
  // MoE dispatch: counts and displacements (elements) per peer.
  virtual Handle all_to_all_v(const void* send, const std::vector<std::size_t>& send_counts,
                              const std::vector<std::size_t>& send_displs, void* recv,
                              const std::vector<std::size_t>& recv_counts, const std::vector<std::size_t>& recv_displs,
                              DType dtype, Mode mode) = 0;
  virtual Handle broadcast(void* buf, std::size_t count, DType dtype, int root, Mode mode) = 0;
  virtual Handle send(const void* buf, std::size_t count, DType dtype, int peer, Mode mode) = 0;
  virtual Handle recv(void* buf, std::size_t count, DType dtype, int peer, Mode mode) = 0;
  // Send to `to` and receive from `from` at once (a pipeline stage's exchange; no deadlock).
  virtual Handle send_recv(const void* send, int to, void* recv, int from, std::size_t count, DType dtype,
                           Mode mode) = 0;
  virtual Handle barrier(Mode mode) = 0;
};

}  // namespace sax::coll
