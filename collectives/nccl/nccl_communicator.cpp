#include "collectives/nccl/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "spec/checks/cuda.hpp"
#include "spec/checks/mpi.hpp"
#include "spec/checks/nccl.hpp"
#include "spec/error.hpp"

namespace sax::coll {

namespace {

ncclDataType_t nccl_type(DType d) {
  if (d == DType::fp32) return ncclFloat32;
  if (d == DType::bf16) return ncclBfloat16;
  throw UsageError(std::string("collectives: float32 or bfloat16, not ") + to_string(d));
}

class EventHandle final : public Handle::Impl {
 public:
  explicit EventHandle(cudaStream_t stream) {
    SAX_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
    SAX_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~EventHandle() override { cudaEventDestroy(event_); }
  void wait() override { SAX_CUDA_CHECK(cudaEventSynchronize(event_)); }
  bool test() override {
    cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    SAX_CUDA_CHECK(rc);
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm comm, bool owned, int device, Stream stream) : mpi_comm_(comm), owned_mpi_(owned) {
    SAX_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    SAX_MPI_CHECK(MPI_Comm_size(comm, &size_));
    SAX_CUDA_CHECK(cudaSetDevice(device));
    ncclUniqueId id;
    if (rank_ == 0) SAX_NCCL_CHECK(ncclGetUniqueId(&id));
    SAX_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
    SAX_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    // The device's communication stream when given (shared with the kernels, so a step can order
    // and overlap compute and communication), else one of its own.
    if (stream) {
      stream_ = static_cast<cudaStream_t>(stream.native);
    } else {
      SAX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      owned_stream_ = true;
    }
  }
  ~NcclCommunicator() override {
    if (stream_) cudaStreamSynchronize(stream_);
    if (owned_stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
    if (owned_mpi_) MPI_Comm_free(&mpi_comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "cuda"; }
  // NCCL picks its algorithm (ring, tree, NVLS, ...) and protocol per size itself.
  std::string path(CollOp op, std::uint64_t, Mode) const override {
    switch (op) {
      case CollOp::all_reduce:
        return "ncclAllReduce";
      case CollOp::all_gather:
        return "ncclAllGather";
      case CollOp::reduce_scatter:
        return "ncclReduceScatter";
      case CollOp::all_to_all:
        return "ncclSend/ncclRecv";
      case CollOp::broadcast:
        return "ncclBroadcast";
      case CollOp::send_recv:
        return "ncclSend+ncclRecv";
      case CollOp::send:
        return "ncclSend";
      case CollOp::recv:
        return "ncclRecv";
    }
    return "?";
  }

  Handle all_reduce(const void* send, void* recv, std::size_t count, DType d, Mode mode) override {
    SAX_NCCL_CHECK(ncclAllReduce(send, recv, count, nccl_type(d), ncclSum, comm_, stream_));
    return finish(mode);
  }
  Handle reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType d, Mode mode) override {
    SAX_NCCL_CHECK(ncclReduceScatter(send, recv, recv_count, nccl_type(d), ncclSum, comm_, stream_));
    return finish(mode);
  }
  Handle all_gather(const void* send, void* recv, std::size_t send_count, DType d, Mode mode) override {
    SAX_NCCL_CHECK(ncclAllGather(send, recv, send_count, nccl_type(d), comm_, stream_));
    return finish(mode);
  }
  Handle all_to_all(const void* send, void* recv, std::size_t count_per_peer, DType d, Mode mode) override {
    const std::size_t block = count_per_peer * static_cast<std::size_t>(dtype_bytes(d));
    SAX_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      SAX_NCCL_CHECK(
          ncclSend(static_cast<const char*>(send) + peer * block, count_per_peer, nccl_type(d), peer, comm_, stream_));
      SAX_NCCL_CHECK(
          ncclRecv(static_cast<char*>(recv) + peer * block, count_per_peer, nccl_type(d), peer, comm_, stream_));
    }
    SAX_NCCL_CHECK(ncclGroupEnd());
    return finish(mode);
  }
  Handle all_to_all_v(const void* send, const std::vector<std::size_t>& send_counts,
                      const std::vector<std::size_t>& send_displs, void* recv,
                      const std::vector<std::size_t>& recv_counts, const std::vector<std::size_t>& recv_displs, DType d,
                      Mode mode) override {
    const std::size_t e = static_cast<std::size_t>(dtype_bytes(d));
    SAX_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      if (send_counts[peer])
        SAX_NCCL_CHECK(ncclSend(static_cast<const char*>(send) + send_displs[peer] * e, send_counts[peer], nccl_type(d),
                                peer, comm_, stream_));
      if (recv_counts[peer])
        SAX_NCCL_CHECK(ncclRecv(static_cast<char*>(recv) + recv_displs[peer] * e, recv_counts[peer], nccl_type(d), peer,
                                comm_, stream_));
    }
    SAX_NCCL_CHECK(ncclGroupEnd());
    return finish(mode);
  }
  Handle broadcast(void* buf, std::size_t count, DType d, int root, Mode mode) override {
    SAX_NCCL_CHECK(ncclBroadcast(buf, buf, count, nccl_type(d), root, comm_, stream_));
    return finish(mode);
  }
  Handle send(const void* buf, std::size_t count, DType d, int peer, Mode mode) override {
    SAX_NCCL_CHECK(ncclSend(buf, count, nccl_type(d), peer, comm_, stream_));
    return finish(mode);
  }
  Handle recv(void* buf, std::size_t count, DType d, int peer, Mode mode) override {
    SAX_NCCL_CHECK(ncclRecv(buf, count, nccl_type(d), peer, comm_, stream_));
    return finish(mode);
  }
  Handle send_recv(const void* send, int to, void* recv, int from, std::size_t count, DType d, Mode mode) override {
    SAX_NCCL_CHECK(ncclGroupStart());
    SAX_NCCL_CHECK(ncclSend(send, count, nccl_type(d), to, comm_, stream_));
    SAX_NCCL_CHECK(ncclRecv(recv, count, nccl_type(d), from, comm_, stream_));
    SAX_NCCL_CHECK(ncclGroupEnd());
    return finish(mode);
  }
  // NCCL has no barrier: drain this rank's stream, then meet on the bootstrap communicator.
  Handle barrier(Mode) override {
    SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
    SAX_MPI_CHECK(MPI_Barrier(mpi_comm_));
    return {};
  }

 private:
  Handle finish(Mode mode) {
    if (mode == Mode::async) return Handle(std::make_unique<EventHandle>(stream_));
    if (mode == Mode::blocking) SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return {};  // enqueue: ordered on the stream; whoever synchronises it sees it done
  }
  MPI_Comm mpi_comm_;
  bool owned_mpi_ = false, owned_stream_ = false;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

bool nccl_compiled() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm comm, bool owned, int device, Stream stream) {
  return std::make_unique<NcclCommunicator>(comm, owned, device, stream);
}

}  // namespace sax::coll
