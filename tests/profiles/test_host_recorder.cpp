#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <latch>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "profiles/host_recorder.hpp"

using namespace sax::profiles;

TEST(HostRecorder, EventsComeBackInOrderWithTheirFields) {
  HostRecorder recorder(3, 16);
  const std::int64_t before = now_ns();
  std::uint64_t step_id = 0, rs_id = 0;
  {
    ScopedRange step(recorder, "step", Category::step);
    step_id = step.id();
    auto rs = recorder.begin("dp.reduce_scatter", Category::communication, 1024);
    rs_id = rs.id;
    recorder.end(rs);
  }
  Event given;
  given.rank = 5;
  given.lane = Lane{LaneKind::device_stream, 2, 9};
  given.name = "given";
  given.category = Category::other;
  given.start_ns = 10;
  given.end_ns = 20;
  given.bytes = 7;
  given.correlation_id = 11;
  given.external_id = 12;
  EXPECT_TRUE(recorder.record(given));
  const std::int64_t after = now_ns();

  auto events = recorder.events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(recorder.dropped(), 0u);

  const Event& step = events[0];
  EXPECT_STREQ(step.name, "step");
  EXPECT_EQ(step.category, Category::step);
  EXPECT_EQ(step.rank, 3);
  EXPECT_EQ(step.lane, current_thread_lane());
  EXPECT_EQ(step.lane.kind, LaneKind::host_thread);
  EXPECT_EQ(step.external_id, step_id);

  const Event& rs = events[1];
  EXPECT_STREQ(rs.name, "dp.reduce_scatter");
  EXPECT_EQ(rs.category, Category::communication);
  EXPECT_EQ(rs.bytes, 1024u);
  EXPECT_EQ(rs.external_id, rs_id);
  EXPECT_NE(step_id, 0u);
  EXPECT_NE(rs_id, 0u);
  EXPECT_NE(step_id, rs_id);

  // Nesting on one clock: before <= step.start <= rs.start <= rs.end <= step.end <= after.
  EXPECT_LE(before, step.start_ns);
  EXPECT_LE(step.start_ns, rs.start_ns);
  EXPECT_LE(rs.start_ns, rs.end_ns);
  EXPECT_LE(rs.end_ns, step.end_ns);
  EXPECT_LE(step.end_ns, after);

  const Event& e = events[2];
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.lane, (Lane{LaneKind::device_stream, 2, 9}));
  EXPECT_STREQ(e.name, "given");
  EXPECT_EQ(e.start_ns, 10);
  EXPECT_EQ(e.end_ns, 20);
  EXPECT_EQ(e.bytes, 7u);
  EXPECT_EQ(e.correlation_id, 11u);
  EXPECT_EQ(e.external_id, 12u);
}

TEST(HostRecorder, RangeNotYetEndedReadsAsOpen) {
  HostRecorder recorder(0, 4);
  auto r = recorder.begin("open");
  ASSERT_EQ(recorder.size(), 1u);
  EXPECT_EQ(recorder.events()[0].end_ns, Event::kOpen);
  recorder.end(r);
  EXPECT_GE(recorder.events()[0].end_ns, recorder.events()[0].start_ns);
}

TEST(HostRecorder, OverflowCountsDropsAndNeverWritesPastTheEnd) {
  constexpr std::size_t kCapacity = 8;
  Event sentinel;
  sentinel.name = "sentinel";
  sentinel.bytes = 0xdead;
  std::vector<Event> storage(kCapacity + 2, sentinel);
  HostRecorder recorder(0, std::span<Event>(storage).first(kCapacity));

  Event e;
  e.name = "e";
  for (std::size_t i = 0; i < kCapacity; ++i) EXPECT_TRUE(recorder.record(e));
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(recorder.record(e));
  auto dropped_range = recorder.begin("late");
  EXPECT_EQ(dropped_range.id, 0u);
  recorder.end(dropped_range);  // must not touch any slot
  { ScopedRange also_late(recorder, "also_late"); }

  EXPECT_EQ(recorder.size(), kCapacity);
  EXPECT_EQ(recorder.events().size(), kCapacity);
  EXPECT_EQ(recorder.dropped(), 7u);
  for (const Event& in : recorder.events()) EXPECT_STREQ(in.name, "e");
  for (std::size_t i = kCapacity; i < storage.size(); ++i) {
    EXPECT_STREQ(storage[i].name, "sentinel");
    EXPECT_EQ(storage[i].bytes, 0xdeadu);
  }
}

TEST(HostRecorder, ClearForgetsEventsAndAbandonsOpenRanges) {
  HostRecorder recorder(0, 2);
  auto old = recorder.begin("old");
  Event e;
  recorder.record(e);
  recorder.record(e);  // dropped
  ASSERT_EQ(recorder.dropped(), 1u);
  recorder.clear();
  EXPECT_EQ(recorder.size(), 0u);
  EXPECT_EQ(recorder.dropped(), 0u);

  auto fresh = recorder.begin("fresh");
  EXPECT_GT(fresh.id, old.id);  // ids stay unique across clear()
  recorder.end(old);            // slot 0 belongs to "fresh" now: must stay open
  ASSERT_EQ(recorder.size(), 1u);
  EXPECT_STREQ(recorder.events()[0].name, "fresh");
  EXPECT_EQ(recorder.events()[0].end_ns, Event::kOpen);
  recorder.end(fresh);
  EXPECT_NE(recorder.events()[0].end_ns, Event::kOpen);
}

TEST(HostRecorder, FourThreadsRecordingAtOnceLoseNothing) {
  constexpr int kThreads = 4;
  constexpr std::uint64_t kPerThread = 20000;
  HostRecorder recorder(1, kThreads * kPerThread);
  const char* names[kThreads] = {"thread.0", "thread.1", "thread.2", "thread.3"};
  std::latch go(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      go.arrive_and_wait();
      for (std::uint64_t seq = 0; seq < kPerThread; ++seq) {
        auto r = recorder.begin(names[t], Category::other, seq);
        recorder.end(r);
      }
    });
  }
  for (auto& th : threads) th.join();

  ASSERT_EQ(recorder.size(), kThreads * kPerThread);
  EXPECT_EQ(recorder.dropped(), 0u);
  std::map<std::string, std::vector<std::uint64_t>> sequences;
  std::map<std::string, std::set<std::uint64_t>> lanes;
  std::set<std::uint64_t> ids;
  for (const Event& e : recorder.events()) {
    sequences[e.name].push_back(e.bytes);
    lanes[e.name].insert(e.lane.id);
    ids.insert(e.external_id);
    EXPECT_GE(e.end_ns, e.start_ns);
  }
  EXPECT_EQ(ids.size(), kThreads * kPerThread);
  ASSERT_EQ(sequences.size(), std::size_t{kThreads});
  std::set<std::uint64_t> all_lanes;
  for (const auto& [name, seq] : sequences) {
    ASSERT_EQ(seq.size(), kPerThread) << name;
    for (std::uint64_t i = 0; i < kPerThread; ++i) ASSERT_EQ(seq[i], i) << name;
    EXPECT_EQ(lanes[name].size(), 1u) << name;  // one thread, one lane
    all_lanes.insert(*lanes[name].begin());
  }
  EXPECT_EQ(all_lanes.size(), std::size_t{kThreads});
}

TEST(HostRecorder, FourThreadsOverflowingKeepCapacityAndCountTheRest) {
  constexpr int kThreads = 4;
  constexpr std::size_t kCapacity = 1000, kPerThread = 1000;
  HostRecorder recorder(0, kCapacity);
  std::latch go(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      go.arrive_and_wait();
      Event e;
      e.name = "x";
      for (std::size_t i = 0; i < kPerThread; ++i) recorder.record(e);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(recorder.size(), kCapacity);
  EXPECT_EQ(recorder.dropped(), kThreads * kPerThread - kCapacity);
  for (const Event& e : recorder.events()) ASSERT_STREQ(e.name, "x");
}

TEST(HostRecorder, NowIsSteadyNanoseconds) {
  const std::int64_t a = now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const std::int64_t b = now_ns();
  EXPECT_GE(b - a, 2'000'000);
  EXPECT_LT(b - a, 2'000'000'000);
  const std::int64_t steady =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  EXPECT_GE(steady, b);
  EXPECT_LT(steady - b, 1'000'000'000);
}

TEST(HostRecorder, ThreadsHaveTheirOwnLanes) {
  std::uint64_t other = 0;
  std::thread([&] { other = current_thread_id(); }).join();
  EXPECT_NE(other, 0u);
  EXPECT_NE(other, current_thread_id());
  EXPECT_EQ(current_thread_id(), current_thread_id());
}
