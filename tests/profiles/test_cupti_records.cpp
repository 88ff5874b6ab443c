// The real CUPTI source's conversion, fed records laid out as CUPTI's own structs (cupti.h of this
// toolkit), then through the ActivityProcessor as the real source delivers them: no device
// needed. Built only where the CUDA toolkit was found.
#include <cupti.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "profiles/activity.hpp"
#include "profiles/cupti/cupti_source.hpp"

using namespace sax::profiles;

namespace {

CUpti_ActivityKernel10 kernel(const char* name, std::uint64_t start, std::uint64_t end, std::uint32_t stream,
                              std::uint32_t correlation) {
  CUpti_ActivityKernel10 k;
  std::memset(&k, 0, sizeof k);
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = start, k.end = end, k.deviceId = 0, k.streamId = stream, k.correlationId = correlation;
  k.name = name;
  return k;
}

CUpti_ActivityAPI launch(std::uint64_t start, std::uint64_t end, std::uint32_t thread, std::uint32_t correlation) {
  CUpti_ActivityAPI api;
  std::memset(&api, 0, sizeof api);
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  api.start = start, api.end = end, api.threadId = thread, api.correlationId = correlation;
  return api;
}

CUpti_ActivityExternalCorrelation external(std::uint64_t id, std::uint32_t correlation) {
  CUpti_ActivityExternalCorrelation x;
  std::memset(&x, 0, sizeof x);
  x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
  x.externalId = id, x.correlationId = correlation;
  return x;
}

}  // namespace

TEST(CuptiRecords, EveryKindSaxAsksForConvertsWithItsFields) {
  ActivityRecord r;
  const auto k = kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1000, 3000, 7, 42);
  ASSERT_TRUE(convert_cupti_record(&k, r));
  EXPECT_EQ(r.kind, ActivityKind::concurrent_kernel);
  EXPECT_EQ(r.start_ns, 1000);
  EXPECT_EQ(r.end_ns, 3000);
  EXPECT_EQ(r.stream_id, 7u);
  EXPECT_EQ(r.correlation_id, 42u);
  EXPECT_STREQ(r.name, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");

  CUpti_ActivityMemcpy6 m;
  std::memset(&m, 0, sizeof m);
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.bytes = 4096, m.start = 10, m.end = 20, m.streamId = 3, m.correlationId = 5;
  ASSERT_TRUE(convert_cupti_record(&m, r));
  EXPECT_EQ(r.kind, ActivityKind::memcpy);
  EXPECT_EQ(r.copy_kind, MemcpyKind::dtoh);
  EXPECT_EQ(r.bytes, 4096u);

  CUpti_ActivityMemset4 s;
  std::memset(&s, 0, sizeof s);
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 128, s.start = 30, s.end = 31;
  ASSERT_TRUE(convert_cupti_record(&s, r));
  EXPECT_EQ(r.kind, ActivityKind::memset);
  EXPECT_EQ(r.bytes, 128u);

  const auto api = launch(900, 950, 1234, 42);
  ASSERT_TRUE(convert_cupti_record(&api, r));
  EXPECT_EQ(r.kind, ActivityKind::runtime);
  EXPECT_EQ(r.thread_id, 1234u);
  ASSERT_NE(r.name, nullptr);  // CUPTI names the call without a device
  EXPECT_NE(std::string(r.name).find("cudaLaunchKernel"), std::string::npos) << r.name;

  const auto x = external(77, 42);
  ASSERT_TRUE(convert_cupti_record(&x, r));
  EXPECT_EQ(r.kind, ActivityKind::external_correlation);
  EXPECT_EQ(r.external_id, 77u);

  CUpti_ActivityMarker2 mk;
  std::memset(&mk, 0, sizeof mk);
  mk.kind = CUPTI_ACTIVITY_KIND_MARKER;
  mk.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
  mk.timestamp = 800, mk.id = 9, mk.name = "dp.reduce_scatter", mk.domain = "sax";
  mk.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  mk.objectId.pt.threadId = 1234;
  ASSERT_TRUE(convert_cupti_record(&mk, r));
  EXPECT_EQ(r.kind, ActivityKind::marker);
  EXPECT_EQ(r.marker_phase, MarkerPhase::start);
  EXPECT_EQ(r.thread_id, 1234u);
  EXPECT_EQ(r.start_ns, 800);

  CUpti_Activity other;
  other.kind = CUPTI_ACTIVITY_KIND_DEVICE;
  EXPECT_FALSE(convert_cupti_record(&other, r));
}

// A launch, its kernel and its external correlation, converted and processed as the real source
// delivers them: the kernel lands on its stream lane on the host clock, named, carrying the
// host range it was launched from.
TEST(CuptiRecords, ConvertedRecordsBecomeCorrelatedEventsOnTheHostClock) {
  ActivityProcessor p(3);
  p.set_clock_offset_ns(1'000'000);
  const auto api = launch(100, 110, 55, 8);
  const auto x = external((2ull << 32) | 5, 8);
  const auto k = kernel("gemm_bf16", 120, 220, 13, 8);
  ActivityRecord r;
  for (const void* rec : std::vector<const void*>{&x, &api, &k}) {
    ASSERT_TRUE(convert_cupti_record(rec, r));
    p.process(r);
  }
  ASSERT_EQ(p.events().size(), 2u);
  const Event& launch = p.events()[0];
  const Event& kern = p.events()[1];
  EXPECT_EQ(kern.lane.kind, LaneKind::device_stream);
  EXPECT_EQ(kern.lane.id, 13u);
  EXPECT_EQ(kern.start_ns, 1'000'120);
  EXPECT_STREQ(kern.name, "gemm_bf16");
  EXPECT_EQ(kern.correlation_id, launch.correlation_id);
  EXPECT_EQ(kern.external_id, (2ull << 32) | 5);
  EXPECT_EQ(launch.lane.kind, LaneKind::host_thread);
  EXPECT_EQ(launch.lane.id, 55u);
  EXPECT_EQ(p.malformed(), 0u);
}
