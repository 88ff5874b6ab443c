#include "bench/nccl_bare.hpp"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>

#include "spec/checks/cuda.hpp"
#include "spec/checks/mpi.hpp"
#include "spec/checks/nccl.hpp"

namespace sax::bench {

namespace {

class Bare final : public BareNccl {
 public:
  explicit Bare(int device) {
    SAX_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
    SAX_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
    SAX_CUDA_CHECK(cudaSetDevice(device));
    ncclUniqueId id;
    if (rank_ == 0) SAX_NCCL_CHECK(ncclGetUniqueId(&id));
    SAX_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    SAX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    const ncclResult_t rc = ncclCommInitRank(&comm_, size_, id, rank_);
    if (rc != ncclSuccess) {
      cudaStreamDestroy(stream_);  // the destructor does not run when the constructor throws
      SAX_NCCL_CHECK(rc);
    }
  }
  ~Bare() override {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  double time_us(CollOp op, const void* send, void* recv, std::size_t count, int iters, int warmup) override {
    for (int i = 0; i < warmup; ++i) once(op, send, recv, count);
    SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
    SAX_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) once(op, send, recv, count);
    SAX_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
  }

 private:
  void once(CollOp op, const void* send, void* recv, std::size_t count) {
    const std::size_t n = static_cast<std::size_t>(size_), block = count / n;
    switch (op) {
      case CollOp::all_reduce:
        SAX_NCCL_CHECK(ncclAllReduce(send, recv, count, ncclFloat32, ncclSum, comm_, stream_));
        return;
      case CollOp::all_gather:
        SAX_NCCL_CHECK(ncclAllGather(send, recv, block, ncclFloat32, comm_, stream_));
        return;
      case CollOp::reduce_scatter:
        SAX_NCCL_CHECK(ncclReduceScatter(send, recv, block, ncclFloat32, ncclSum, comm_, stream_));
        return;
      case CollOp::all_to_all:
        SAX_NCCL_CHECK(ncclGroupStart());
        for (int p = 0; p < size_; ++p) {
          SAX_NCCL_CHECK(ncclSend(static_cast<const float*>(send) + p * block, block, ncclFloat32, p, comm_, stream_));
          SAX_NCCL_CHECK(ncclRecv(static_cast<float*>(recv) + p * block, block, ncclFloat32, p, comm_, stream_));
        }
        SAX_NCCL_CHECK(ncclGroupEnd());
        return;
      case CollOp::broadcast:
        SAX_NCCL_CHECK(ncclBroadcast(recv, recv, count, ncclFloat32, 0, comm_, stream_));
        return;
      case CollOp::send_recv:
      case CollOp::send:
      case CollOp::recv:
        SAX_NCCL_CHECK(ncclGroupStart());
        SAX_NCCL_CHECK(ncclSend(send, count, ncclFloat32, (rank_ + 1) % size_, comm_, stream_));
        SAX_NCCL_CHECK(ncclRecv(recv, count, ncclFloat32, (rank_ + size_ - 1) % size_, comm_, stream_));
        SAX_NCCL_CHECK(ncclGroupEnd());
        return;
    }
  }
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<BareNccl> make_bare_nccl(int device) { return std::make_unique<Bare>(device); }

}  // namespace sax::bench
