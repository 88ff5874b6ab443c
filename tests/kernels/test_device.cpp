// The device interface on the CPU backend: zero-filled host buffers that round-trip bytes, no
// streams (work runs on the calling thread), events that are done at once; the CUDA device where
// this build and machine have one, and a clear refusal where they do not.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/device.hpp"
#include "spec/error.hpp"

using namespace sax;
using namespace sax::kernels;

TEST(CpuDevice, BuffersAreZeroFilledAndRoundTrip) {
  auto d = make_device(Backend::cpu);
  EXPECT_EQ(d->backend(), Backend::cpu);
  auto b = d->allocate(1000);
  ASSERT_EQ(b->bytes(), 1000u);
  std::vector<unsigned char> back(1000, 7);
  b->download(back.data(), back.size());
  for (unsigned char c : back) ASSERT_EQ(c, 0);
  std::vector<unsigned char> in(1000);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 13);
  b->upload(in.data(), in.size());
  b->download(back.data(), back.size());
  EXPECT_EQ(back, in);
  EXPECT_EQ(std::memcmp(b->data(), in.data(), in.size()), 0);
  EXPECT_NE(d->allocate(0)->data(), nullptr);  // an empty buffer still has an address
}

TEST(CpuDevice, NoStreamsAndEventsAreDone) {
  auto d = make_device(Backend::cpu);
  EXPECT_FALSE(d->compute_stream());
  EXPECT_FALSE(d->comm_stream());
  auto e = d->make_event();
  e->record(d->compute_stream());
  e->wait(d->comm_stream());
  e->synchronize();
  EXPECT_TRUE(e->done());
}

TEST(CudaDevice, TwoStreamsWhereThereIsADeviceElseARefusal) {
  const CudaDevices devices = cuda_devices();
  if (devices.count == 0) {
    EXPECT_FALSE(devices.reason.empty());
    if (!devices.compiled) EXPECT_THROW(make_device(Backend::cuda), UsageError);
    GTEST_SKIP() << "no CUDA device: " << devices.reason;
  }
  auto d = make_device(Backend::cuda, 0);
  EXPECT_TRUE(d->compute_stream());
  EXPECT_TRUE(d->comm_stream());
  EXPECT_NE(d->compute_stream().native, d->comm_stream().native);
  auto b = d->allocate(4096);
  std::vector<float> in(1024, 2.5f), back(1024);
  b->upload(in.data(), 4096);
  b->download(back.data(), 4096);
  EXPECT_EQ(back, in);
  // An event recorded on the compute stream orders the communication stream after it.
  auto e = d->make_event();
  e->record(d->compute_stream());
  e->wait(d->comm_stream());
  d->synchronize(d->comm_stream());
  EXPECT_TRUE(e->done());
}
