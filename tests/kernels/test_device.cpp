// The device interface on the CPU backend: zero-filled host buffers that round-trip bytes, no
// streams (work runs on the calling thread), events that are done at once; the CUDA device where
// this build and machine have one, and a clear refusal where they do not.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
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
  auto e = d->make_event(false);
  e->record(d->compute_stream());
  e->wait(d->comm_stream());
  e->synchronize();
  EXPECT_TRUE(e->done());
}

// `bench coll` times the CPU backend with these events: the host clock between two records.
TEST(CpuDevice, TimingEventsMeasureTheHostClockBetweenRecords) {
  auto d = make_device(Backend::cpu);
  auto start = d->make_event(true), end = d->make_event(true);
  start->record(d->comm_stream());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end->record(d->comm_stream());
  EXPECT_GE(end->elapsed_us(*start), 20e3);
  EXPECT_LT(end->elapsed_us(*start), 2e6);
  EXPECT_LE(start->elapsed_us(*end), -20e3);  // signed, as cudaEventElapsedTime
}

TEST(CpuDevice, GraphCaptureIsRefusedWithTheReason) {
  auto d = make_device(Backend::cpu);
  bool ran = false;
  EXPECT_THROW(d->capture(d->comm_stream(), [&] { ran = true; }), UsageError);
  EXPECT_FALSE(ran);
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
  auto e = d->make_event(false);
  e->record(d->compute_stream());
  e->wait(d->comm_stream());
  d->synchronize(d->comm_stream());
  EXPECT_TRUE(e->done());
}
