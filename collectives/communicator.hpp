// One communicator interface for every backend: the collectives a training step uses, each
// blocking or asynchronous. Buffers belong to the backend (host memory for MPI, device memory
// for NCCL) and are obtained from it, so callers never see a transport's headers.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sax::coll {

enum class DType { float32, bfloat16 };
const char* dtype_name(DType d);
std::optional<DType> parse_dtype(const std::string& name);
std::size_t dtype_bytes(DType d);

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
  bool test() {
    if (impl_ && impl_->test()) impl_.reset();
    return !impl_;
  }

 private:
  std::unique_ptr<Impl> impl_;
};

// blocking: the call returns when the operation is complete. async: it returns at once and the
// Handle says when; compute may run in between (overlap).
enum class Mode { blocking, async };

// Memory the backend's collectives read and write. upload/download move host bytes in and out.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual std::size_t bytes() const = 0;
  virtual void upload(const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, std::size_t bytes) const = 0;
};

// Reductions are sums. Counts are elements of `dtype`; ranks are ranks inside this communicator.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* backend() const = 0;  // "cpu" (MPI) | "cuda" (NCCL)
  virtual std::unique_ptr<Buffer> allocate(std::size_t bytes) = 0;

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
