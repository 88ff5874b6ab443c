// Chrome-trace export and merge: a recorder's events become one process with named threads and
// complete events at the right microseconds (open ranges left out); two ranks merge into one
// document with two processes; a rank in two files, a file of two ranks or of no events is bad
// input naming the file; ranges that cross on one thread are found, nested ones are not.
#include <gtest/gtest.h>

#include <set>

#include "profiles/chrome_trace.hpp"
#include "profiles/host_recorder.hpp"
#include "spec/error.hpp"
#include "tests/support/run.hpp"

using namespace sax::profiles;
using sax::json;

namespace {

Event ev(std::int32_t rank, std::uint64_t tid, const char* name, std::int64_t start, std::int64_t end,
         Category c = Category::compute) {
  Event e;
  e.rank = rank;
  e.lane = Lane{LaneKind::host_thread, -1, tid};
  e.name = name;
  e.category = c;
  e.start_ns = start;
  e.end_ns = end;
  return e;
}

int count(const json& doc, const std::string& ph) {
  int n = 0;
  for (const json& e : doc["traceEvents"]) n += e["ph"] == ph;
  return n;
}

}  // namespace

TEST(ChromeTrace, OneRankIsOneProcessWithNamedThreadsAndCompleteEvents) {
  HostRecorder rec(3, 16);
  const HostRecorder::Range outer = rec.begin("step", Category::step);
  rec.record(ev(3, current_thread_id(), "forward", 1'000, 3'500));
  Event send = ev(3, 0, "pp.send", 2'000, 2'250, Category::communication);
  send.lane = Lane{LaneKind::device_stream, 1, 7};
  send.bytes = 4096;
  rec.record(send);
  (void)rec.begin("never ended");  // still open: not exported
  rec.end(outer);
  TraceProcess p{
      3, "rank 3 (bld-b, stage 1)", {{current_thread_id(), "compute"}, {trace_thread_id(send.lane), "comm pp"}}};
  const json doc = json::parse(chrome_trace(rec.events(), p).dump());  // survives a round trip
  EXPECT_EQ(count(doc, "X"), 3);
  EXPECT_EQ(count(doc, "M"), 4);  // process name, sort index, two thread names
  for (const json& e : doc["traceEvents"]) {
    EXPECT_EQ(e["pid"], 3);
    if (e["name"] == "process_name") EXPECT_EQ(e["args"]["name"], "rank 3 (bld-b, stage 1)");
    if (e["name"] == "forward") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2.5);
      EXPECT_EQ(e["cat"], "compute");
    }
    if (e["name"] == "pp.send") {
      EXPECT_EQ(e["args"]["bytes"], 4096);
      EXPECT_EQ(e["tid"], trace_thread_id(send.lane));
      EXPECT_GE(e["tid"].get<std::uint64_t>(), kDeviceStreamTidBase) << "streams come after host threads";
    }
    EXPECT_NE(e["name"], "never ended");
  }
}

TEST(ChromeTrace, RanksMergeIntoOneDocumentOneProcessEach) {
  const std::vector<Event> a = {ev(0, 1, "forward", 0, 10)}, b = {ev(1, 1, "forward", 5, 15)};
  sax::test::TempDir t;
  const MergedTrace m = merge_chrome_traces({t.write("rank-0.json", chrome_trace(a, {0, "rank 0", {}})),
                                             t.write("rank-1.json", chrome_trace(b, {1, "rank 1", {}}))});
  const json merged = json::parse(m.text);
  EXPECT_EQ(m.events, merged["traceEvents"].size());
  EXPECT_TRUE(m.crossing.empty());
  std::set<int> pids;
  for (const json& e : merged["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(count(merged, "X"), 2);
  EXPECT_TRUE(crossing_events(merged).empty());
}

TEST(ChromeTrace, BadDocumentsAreNamed) {
  const json r0 = chrome_trace(std::vector<Event>{ev(0, 1, "f", 0, 1)}, {0, "rank 0", {}});
  sax::test::TempDir t;
  const std::string a = t.write("a.json", r0), b = t.write("b.json", r0);
  try {
    merge_chrome_traces({a, b});
    FAIL() << "a rank in two files was accepted";
  } catch (const sax::InputError& e) {
    EXPECT_EQ(std::string(e.what()), b + ": /traceEvents: expected ranks no other file holds; rank 0 is also in " + a);
  }
  EXPECT_THROW(merge_chrome_traces({t.write("c.json", json{{"events", json::array()}})}), sax::InputError);
  json two = r0;
  two["traceEvents"].push_back({{"ph", "X"}, {"pid", 5}, {"tid", 1}, {"ts", 0}, {"dur", 1}, {"name", "x"}});
  EXPECT_THROW(merge_chrome_traces({t.write("d.json", two)}), sax::InputError);
  EXPECT_THROW(merge_chrome_traces({t.write("e.json", json{{"traceEvents", json::array()}})}), sax::InputError);
}

TEST(ChromeTrace, CrossingRangesOnOneThreadAreFoundNestedOnesAreNot) {
  const std::vector<Event> nested = {ev(0, 1, "step", 0, 100), ev(0, 1, "forward", 10, 50), ev(0, 1, "gemm", 10, 20),
                                     ev(0, 1, "backward", 50, 100), ev(0, 2, "other thread", 40, 60)};
  EXPECT_TRUE(crossing_events(chrome_trace(nested, {0, "rank 0", {}})).empty());
  const std::vector<Event> crossing = {ev(0, 1, "forward", 0, 50), ev(0, 1, "send", 40, 60)};
  const auto found = crossing_events(chrome_trace(crossing, {0, "rank 0", {}}));
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("'send' [0.04, 0.06) crosses 'forward' [0, 0.05)"), std::string::npos) << found[0];
}

// Perfetto's JSON importer reads thread ids as 32-bit integers: every lane's id stays below 2^31,
// and streams, OS threads and CUPTI's pthread-derived thread ids keep apart.
TEST(ChromeTrace, EveryLaneGetsAThreadIdPerfettoReads) {
  const std::uint64_t os = current_thread_id();
  const std::uint64_t stream = trace_thread_id(Lane{LaneKind::device_stream, 3, 13});
  const std::uint64_t other_stream = trace_thread_id(Lane{LaneKind::device_stream, 0, 13});
  const std::uint64_t pthread_low = trace_thread_id(Lane{LaneKind::host_thread, -1, 0x8B6C9000u});
  for (std::uint64_t t : {os, stream, other_stream, pthread_low}) EXPECT_LT(t, 1ull << 31);
  EXPECT_EQ(trace_thread_id(Lane{LaneKind::host_thread, -1, os}), os);
  EXPECT_NE(stream, other_stream);
  EXPECT_GE(stream, kDeviceStreamTidBase);
  EXPECT_LT(stream, kForeignThreadTidBase);
  EXPECT_GE(pthread_low, kForeignThreadTidBase);
  EXPECT_GT(stream, 1ull << 22);  // above every OS thread id
}
