// The NCCL backend on one GPU (a one-rank NCCL communicator over MPI_COMM_SELF): runs only
// where a CUDA device is present and skips with the reason otherwise, never faked.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>

#include "collectives/nccl/nccl_communicator.hpp"
#include "kernels/device.hpp"

using namespace sax::coll;

TEST(Nccl, AllReduceAndAsyncHandleOnOneDevice) {
  const auto devices = sax::kernels::cuda_devices();
  if (devices.count == 0) GTEST_SKIP() << "no CUDA device: " << devices.reason;
  ASSERT_TRUE(nccl_compiled());
  int init = 0;
  MPI_Initialized(&init);
  if (!init) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);  // a singleton MPI process, as CI runs as root
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    MPI_Init(nullptr, nullptr);
  }
  // Kernels and the communicator share the device's communication stream (the stream seam).
  auto device = sax::kernels::make_device(sax::Backend::cuda, 0);
  auto comm = make_nccl_communicator(MPI_COMM_SELF, false, 0, device->comm_stream());
  EXPECT_STREQ(comm->backend(), "cuda");
  std::vector<float> host(1024, 3.0f), back(1024);
  auto send = device->allocate(host.size() * 4), recv = device->allocate(host.size() * 4);
  send->upload(host.data(), host.size() * 4);
  Handle h = comm->all_reduce(send->data(), recv->data(), host.size(), sax::DType::fp32, Mode::async);
  h.wait();
  recv->download(back.data(), back.size() * 4);
  EXPECT_EQ(back[1000], 3.0f);
  comm->all_gather(send->data(), recv->data(), host.size(), sax::DType::fp32, Mode::blocking);
  comm->barrier(Mode::blocking);
  comm.reset();
  MPI_Finalize();
}

TEST(Nccl, StubOrBackendSaysWhatItIs) {
#ifdef SAX_HAVE_NCCL
  EXPECT_TRUE(nccl_compiled());
#else
  EXPECT_FALSE(nccl_compiled());
#endif
}
