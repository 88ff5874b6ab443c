#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "profiles/activity.hpp"
#include "profiles/host_recorder.hpp"

using namespace sax::profiles;

namespace {

// Stands in for the CUPTI source, as kineto's MockCuptiActivities does: records are queued by
// the test and handed over on flush. Names live in the mock and are overwritten after each
// flush, as CUPTI's buffers are reused, so a processor that kept the pointer would be caught.
class MockActivitySource : public ActivitySource {
 public:
  void start() override { started = true; }
  void stop() override { started = false; }
  void flush(const ActivityCallback& deliver) override {
    for (const ActivityRecord& r : pending_) deliver(r);
    pending_.clear();
    for (std::string& s : names_) std::memset(s.data(), '#', s.size());
  }
  std::uint64_t take_dropped() override { return std::exchange(dropped, 0); }

  void add(ActivityRecord r) {
    if (r.name != nullptr) r.name = names_.emplace_back(r.name).c_str();
    pending_.push_back(r);
  }
  void kernel(const char* name, std::int64_t start, std::int64_t end, std::uint32_t stream,
              std::uint32_t correlation = 0, std::uint32_t device = 0) {
    ActivityRecord r;
    r.kind = ActivityKind::concurrent_kernel;
    r.name = name;
    r.start_ns = start;
    r.end_ns = end;
    r.stream_id = stream;
    r.device_id = device;
    r.correlation_id = correlation;
    add(r);
  }
  void runtime(const char* name, std::int64_t start, std::int64_t end, std::uint64_t thread,
               std::uint32_t correlation) {
    ActivityRecord r;
    r.kind = ActivityKind::runtime;
    r.name = name;
    r.start_ns = start;
    r.end_ns = end;
    r.thread_id = thread;
    r.correlation_id = correlation;
    add(r);
  }
  void external(std::uint32_t correlation, std::uint64_t external_id) {
    ActivityRecord r;
    r.kind = ActivityKind::external_correlation;
    r.correlation_id = correlation;
    r.external_id = external_id;
    add(r);
  }
  void marker(MarkerPhase phase, std::uint32_t id, const char* name, std::int64_t t, std::uint64_t thread) {
    ActivityRecord r;
    r.kind = ActivityKind::marker;
    r.marker_phase = phase;
    r.marker_id = id;
    r.name = name;
    r.start_ns = t;
    r.thread_id = thread;
    add(r);
  }

  bool started = false;
  std::uint64_t dropped = 0;

 private:
  std::vector<ActivityRecord> pending_;
  std::deque<std::string> names_;  // a deque: c_str() of earlier names survives emplace_back
};

const Event* find(const std::vector<Event>& events, const char* name) {
  for (const Event& e : events)
    if (std::strcmp(e.name, name) == 0) return &e;
  return nullptr;
}

}  // namespace

TEST(ActivityProcessor, KernelsLandOnTheirStreamLaneWithTheClockOffset) {
  MockActivitySource source;
  source.kernel("gemm_fwd", 1000, 1500, 7, 0, 1);
  source.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1200, 2200, 13, 0, 1);
  ActivityRecord copy;
  copy.kind = ActivityKind::memcpy;
  copy.copy_kind = MemcpyKind::htod;
  copy.start_ns = 3000;
  copy.end_ns = 3100;
  copy.stream_id = 7;
  copy.bytes = 4096;
  source.add(copy);
  ActivityRecord set;
  set.kind = ActivityKind::memset;
  set.start_ns = 3200;
  set.end_ns = 3210;
  set.stream_id = 13;
  set.bytes = 512;
  source.add(set);

  ActivityProcessor processor(2);
  processor.set_clock_offset_ns(-400);
  processor.drain(source);
  const auto& events = processor.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(processor.malformed(), 0u);

  const Event* gemm = find(events, "gemm_fwd");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->lane, (Lane{LaneKind::device_stream, 1, 7}));
  EXPECT_EQ(gemm->start_ns, 600);
  EXPECT_EQ(gemm->end_ns, 1100);
  EXPECT_EQ(gemm->category, Category::compute);
  EXPECT_EQ(gemm->rank, 2);

  const Event* nccl = find(events, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  ASSERT_NE(nccl, nullptr);
  EXPECT_EQ(nccl->lane, (Lane{LaneKind::device_stream, 1, 13}));
  EXPECT_EQ(nccl->category, Category::communication);
  EXPECT_EQ(nccl->start_ns, 800);

  const Event* memcpy_event = find(events, "Memcpy HtoD");
  ASSERT_NE(memcpy_event, nullptr);
  EXPECT_EQ(memcpy_event->category, Category::memcpy);
  EXPECT_EQ(memcpy_event->bytes, 4096u);
  EXPECT_EQ(memcpy_event->lane.id, 7u);
  EXPECT_EQ(memcpy_event->start_ns, 2600);

  const Event* memset_event = find(events, "Memset");
  ASSERT_NE(memset_event, nullptr);
  EXPECT_EQ(memset_event->category, Category::memset);
  EXPECT_EQ(memset_event->bytes, 512u);
  EXPECT_EQ(memset_event->lane, (Lane{LaneKind::device_stream, 0, 13}));
  EXPECT_EQ(memset_event->end_ns, 2810);
}

TEST(ActivityProcessor, RuntimeLaunchCorrelatesToItsKernel) {
  MockActivitySource source;
  source.external(42, 9);
  source.runtime("cudaLaunchKernel", 100, 120, 1234, 42);
  source.runtime("cudaLaunchKernel", 130, 150, 1234, 43);
  source.kernel("gemm_fwd", 200, 300, 7, 42);
  source.kernel("gemm_bwd", 310, 400, 7, 43);

  ActivityProcessor processor(0);
  processor.drain(source);
  const auto& events = processor.events();
  ASSERT_EQ(events.size(), 4u);

  const Event& launch = events[0];
  EXPECT_STREQ(launch.name, "cudaLaunchKernel");
  EXPECT_EQ(launch.category, Category::runtime);
  EXPECT_EQ(launch.lane, (Lane{LaneKind::host_thread, -1, 1234}));
  const Event* fwd = find(events, "gemm_fwd");
  ASSERT_NE(fwd, nullptr);
  EXPECT_EQ(fwd->correlation_id, launch.correlation_id);
  EXPECT_EQ(fwd->correlation_id, 42u);
  EXPECT_EQ(launch.external_id, 9u);
  EXPECT_EQ(fwd->external_id, 9u);

  // No external correlation for 43: linked to its launch, but to no host range.
  const Event* bwd = find(events, "gemm_bwd");
  ASSERT_NE(bwd, nullptr);
  EXPECT_EQ(bwd->correlation_id, 43u);
  EXPECT_EQ(events[1].correlation_id, 43u);
  EXPECT_EQ(bwd->external_id, 0u);
}

TEST(ActivityProcessor, ExternalCorrelationInALaterFlushStillReachesTheKernel) {
  MockActivitySource source;
  ActivityProcessor processor(0);
  source.runtime("cudaLaunchKernel", 100, 120, 1, 5);
  source.kernel("late_tied", 200, 300, 7, 5);
  processor.drain(source);
  ASSERT_EQ(processor.events().size(), 2u);
  EXPECT_EQ(processor.events()[1].external_id, 0u);

  source.external(5, 77);
  processor.drain(source);
  ASSERT_EQ(processor.events().size(), 2u);
  EXPECT_EQ(processor.events()[0].external_id, 77u);
  EXPECT_EQ(processor.events()[1].external_id, 77u);
}

TEST(ActivityProcessor, KernelCarriesTheHostRangeItWasLaunchedFrom) {
  HostRecorder recorder(0, 8);
  MockActivitySource source;
  {
    ScopedRange range(recorder, "tp.forward");
    // What the CUPTI source will see: the range's id pushed as the external correlation id.
    source.external(11, range.id());
    source.runtime("cudaLaunchKernel", 10, 20, current_thread_id(), 11);
    source.kernel("gemm_fwd", 30, 40, 7, 11);
  }
  ActivityProcessor processor(0);
  processor.drain(source);
  const Event* kernel = find(processor.events(), "gemm_fwd");
  ASSERT_NE(kernel, nullptr);
  ASSERT_EQ(recorder.size(), 1u);
  EXPECT_NE(kernel->external_id, 0u);
  EXPECT_EQ(kernel->external_id, recorder.events()[0].external_id);
  EXPECT_EQ(processor.events()[0].lane, recorder.events()[0].lane);  // the launch is on the range's thread
}

TEST(ActivityProcessor, MarkerStartEndPairsBecomeOneRange) {
  MockActivitySource source;
  source.marker(MarkerPhase::start, 5, "forward", 100, 77);
  source.marker(MarkerPhase::start, 6, "attention", 150, 77);
  source.marker(MarkerPhase::end, 6, nullptr, 250, 77);
  source.marker(MarkerPhase::instant, 8, "checkpoint", 260, 77);
  source.marker(MarkerPhase::start, 9, "backward", 400, 78);  // ends in the next flush

  ActivityProcessor processor(1);
  processor.set_clock_offset_ns(1000);
  processor.drain(source);
  EXPECT_EQ(processor.open_markers(), 2u);
  source.marker(MarkerPhase::end, 5, nullptr, 300, 77);
  source.marker(MarkerPhase::end, 9, nullptr, 900, 78);
  processor.drain(source);

  const auto& events = processor.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(processor.open_markers(), 0u);
  EXPECT_EQ(processor.malformed(), 0u);

  const Event* forward = find(events, "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->category, Category::range);
  EXPECT_EQ(forward->lane, (Lane{LaneKind::host_thread, -1, 77}));
  EXPECT_EQ(forward->start_ns, 1100);
  EXPECT_EQ(forward->end_ns, 1300);

  const Event* attention = find(events, "attention");
  ASSERT_NE(attention, nullptr);
  EXPECT_EQ(attention->start_ns, 1150);
  EXPECT_EQ(attention->end_ns, 1250);

  const Event* checkpoint = find(events, "checkpoint");
  ASSERT_NE(checkpoint, nullptr);
  EXPECT_EQ(checkpoint->start_ns, 1260);
  EXPECT_EQ(checkpoint->end_ns, 1260);

  const Event* backward = find(events, "backward");
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ(backward->lane.id, 78u);
  EXPECT_EQ(backward->start_ns, 1400);
  EXPECT_EQ(backward->end_ns, 1900);
}

TEST(ActivityProcessor, MalformedRecordsAreCountedAndSkipped) {
  MockActivitySource source;
  source.kernel("backwards_kernel", 500, 400, 7);       // end < start
  source.runtime("cudaMemcpyAsync", 90, 80, 1, 3);      // end < start
  source.marker(MarkerPhase::end, 99, nullptr, 10, 1);  // end without a start
  source.marker(MarkerPhase::start, 4, "r", 50, 1);     //
  source.marker(MarkerPhase::end, 4, nullptr, 40, 1);   // ends before it starts
  source.external(0, 5);                                // no correlation id
  ActivityRecord unknown;
  unknown.kind = static_cast<ActivityKind>(200);
  unknown.start_ns = 1;
  unknown.end_ns = 2;
  source.add(unknown);
  source.kernel("good_kernel", 10, 20, 7);

  ActivityProcessor processor(0);
  processor.drain(source);
  EXPECT_EQ(processor.malformed(), 6u);
  ASSERT_EQ(processor.events().size(), 1u);
  EXPECT_STREQ(processor.events()[0].name, "good_kernel");
  EXPECT_EQ(processor.open_markers(), 0u);
  EXPECT_EQ(find(processor.events(), "backwards_kernel"), nullptr);
}

TEST(ActivityProcessor, DroppedCountsPropagateFromEverySource) {
  MockActivitySource a, b;
  ActivityProcessor processor(0);
  a.dropped = 3;
  processor.drain(a);
  EXPECT_EQ(processor.dropped(), 3u);
  a.dropped = 2;
  processor.drain(a);
  processor.drain(a);  // nothing new: the source reports drops once
  EXPECT_EQ(processor.dropped(), 5u);
  b.dropped = 4;
  processor.drain(b);
  EXPECT_EQ(processor.dropped(), 9u);
  processor.clear();
  EXPECT_EQ(processor.dropped(), 0u);
}

TEST(ActivityProcessor, NamesAreCopiedOutOfTheRecords) {
  MockActivitySource source;
  NameTable names;
  ActivityProcessor processor(0, names);
  source.kernel("flash_attn_fwd", 1, 2, 7);
  source.runtime("cudaLaunchKernel", 0, 1, 1, 0);
  processor.drain(source);  // the mock scribbles over its name storage after delivering
  ASSERT_EQ(processor.events().size(), 2u);
  EXPECT_STREQ(processor.events()[0].name, "flash_attn_fwd");
  EXPECT_STREQ(processor.events()[1].name, "cudaLaunchKernel");
  EXPECT_EQ(names.size(), 2u);
}

TEST(ActivityProcessor, ClearKeepsTheClockOffset) {
  MockActivitySource source;
  ActivityProcessor processor(0);
  processor.set_clock_offset_ns(50);
  source.kernel("k", 1, 2, 7);
  processor.drain(source);
  processor.clear();
  EXPECT_TRUE(processor.events().empty());
  source.kernel("k", 1, 2, 7);
  processor.drain(source);
  ASSERT_EQ(processor.events().size(), 1u);
  EXPECT_EQ(processor.events()[0].start_ns, 51);
}

TEST(ActivityKind, ToStringNamesEveryKind) {
  EXPECT_STREQ(to_string(ActivityKind::concurrent_kernel), "concurrent_kernel");
  EXPECT_STREQ(to_string(ActivityKind::external_correlation), "external_correlation");
  EXPECT_STREQ(to_string(ActivityKind::marker), "marker");
  EXPECT_STREQ(to_string(static_cast<ActivityKind>(200)), "unknown");
  EXPECT_STREQ(to_string(MemcpyKind::dtoh), "DtoH");
}

// CUPTI names C++ kernels mangled, NCCL's included (seen on an H200 with NCCL 2.28): shown
// demangled, and NCCL's still counted as communication.
TEST(ActivityProcessor, MangledKernelNamesAreDemangledAndNcclsStayCommunication) {
  MockActivitySource source;
  source.kernel("_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE", 100, 200, 14, 0, 1);
  source.kernel("_Z9gemm_tileILi64EEvPKfPf", 300, 400, 13, 0, 2);
  source.kernel("nvjet_sm90_tst_64x8", 500, 600, 13, 0, 3);
  ActivityProcessor processor(0);
  processor.drain(source);
  ASSERT_EQ(processor.events().size(), 3u);
  const Event& nccl = processor.events()[0];
  EXPECT_EQ(std::string(nccl.name).rfind("ncclDevKernel_AllReduce_Sum_f32_RING_LL(", 0), 0u) << nccl.name;
  EXPECT_EQ(nccl.category, Category::communication);
  EXPECT_STREQ(processor.events()[1].name, "void gemm_tile<64>(float const*, float*)");
  EXPECT_EQ(processor.events()[1].category, Category::compute);
  EXPECT_STREQ(processor.events()[2].name, "nvjet_sm90_tst_64x8");
}
