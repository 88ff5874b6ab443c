// `sax trace merge DIR -o FILE`: per-rank traces in, one Chrome trace out with a process per rank;
// a rank in two files, an empty or missing directory exit 2 with one line; nothing is written then.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "profiles/chrome_trace.hpp"
#include "tests/support/run.hpp"

using sax::json;
using sax::test::Result;
using sax::test::run_sax;
using sax::test::TempDir;

namespace {
json rank_trace(int rank) {
  sax::profiles::Event e;
  e.rank = rank;
  e.lane = {sax::profiles::LaneKind::host_thread, -1, 1};
  e.name = "forward";
  e.category = sax::profiles::Category::compute;
  e.start_ns = 1000 * rank;
  e.end_ns = 1000 * rank + 500;
  return sax::profiles::chrome_trace(std::vector<sax::profiles::Event>{e},
                                     {rank, "rank " + std::to_string(rank), {{1, "compute"}}});
}
}  // namespace

TEST(TraceMerge, PerRankTracesBecomeOneFileWithAProcessPerRank) {
  TempDir t;
  std::filesystem::create_directory(t.file("tr"));
  for (int r = 0; r < 4; ++r) t.write("tr/rank-" + std::to_string(r) + ".json", rank_trace(r));
  Result res = run_sax("trace merge " + t.file("tr") + " -o " + t.file("all.json"));
  ASSERT_EQ(res.code, 0) << res.err;
  EXPECT_NE(res.out.find("4 rank trace(s)"), std::string::npos) << res.out;
  const json all = json::parse(sax::test::slurp(t.file("all.json")));
  std::set<int> pids;
  int complete = 0;
  for (const json& e : all["traceEvents"]) pids.insert(e["pid"].get<int>()), complete += e["ph"] == "X";
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(complete, 4);
  EXPECT_TRUE(sax::profiles::crossing_events(all).empty());
}

TEST(TraceMerge, BadInputExitsTwoWithOneLineAndWritesNothing) {
  TempDir t;
  std::filesystem::create_directory(t.file("tr"));
  t.write("tr/a.json", rank_trace(0));
  t.write("tr/b.json", rank_trace(0));
  Result res = run_sax("trace merge " + t.file("tr") + " -o " + t.file("all.json"));
  EXPECT_EQ(res.code, 2);
  EXPECT_NE(res.err.find("b.json: /traceEvents: expected ranks no other file holds; rank 0 is also in"),
            std::string::npos)
      << res.err;
  EXPECT_EQ(std::count(res.err.begin(), res.err.end(), '\n'), 1);
  EXPECT_FALSE(std::filesystem::exists(t.file("all.json")));
  std::filesystem::create_directory(t.file("empty"));
  res = run_sax("trace merge " + t.file("empty") + " -o " + t.file("all.json"));
  EXPECT_EQ(res.code, 2);
  EXPECT_NE(res.err.find("holds no .json trace"), std::string::npos) << res.err;
  res = run_sax("trace summary " + t.file("missing.json"));
  EXPECT_EQ(res.code, 2);
  EXPECT_NE(res.err.find("missing.json"), std::string::npos) << res.err;
  EXPECT_EQ(std::count(res.err.begin(), res.err.end(), '\n'), 1) << res.err;
}

namespace {

struct BadTrace {
  std::string what, text, pointer;  // the reproducer and the JSON pointer its error names
};

// One complete event changed by `patch` (RFC 7386: a null removes the field), as a trace.
std::string event_with(const json& patch) {
  json e = {{"ph", "X"}, {"pid", 0}, {"tid", 1}, {"ts", 10}, {"dur", 5}, {"name", "forward"}, {"cat", "compute"}};
  e.merge_patch(patch);
  return R"({"traceEvents": [)" + e.dump() + "]}";
}

// Traces that used to stop merge or summary with nlohmann's own exception (exit 1), or pass.
std::vector<BadTrace> malformed_traces() {
  return {{"traceEvents not an array", R"({"traceEvents": {"ph": "X"}})", "/traceEvents"},
          {"an event that is not an object", R"({"traceEvents": [7]})", "/traceEvents/0"},
          {"missing ts", event_with({{"ts", nullptr}}), "/traceEvents/0/ts"},
          {"ts a string", event_with({{"ts", "10"}}), "/traceEvents/0/ts"},
          {"missing dur", event_with({{"dur", nullptr}}), "/traceEvents/0/dur"},
          {"dur negative", event_with({{"dur", -5}}), "/traceEvents/0/dur"},
          {"ts + dur past the clock (2^63 ns)", event_with({{"ts", 9e15}, {"dur", 9e15}}), "/traceEvents/0/dur"},
          {"pid a string", event_with({{"pid", "0"}}), "/traceEvents/0/pid"},
          {"pid past 32 bits", event_with({{"pid", 4294967296}}), "/traceEvents/0/pid"},
          {"tid a string", event_with({{"tid", "main"}}), "/traceEvents/0/tid"},
          {"tid negative", event_with({{"tid", -1}}), "/traceEvents/0/tid"},
          {"ph a number", event_with({{"ph", 88}}), "/traceEvents/0/ph"},
          {"name a number", event_with({{"name", 1}}), "/traceEvents/0/name"},
          {"cat an object", event_with({{"cat", json::object()}}), "/traceEvents/0/cat"},
          {"args nested 200,000 deep",
           R"({"traceEvents": [{"ph": "X", "pid": 0, "tid": 1, "ts": 1, "dur": 1, "args": {"a": )" +
               std::string(200000, '[') + std::string(200000, ']') + "}}]}",
           "/traceEvents/0/args/a/0/0"},
          // A step of no time: every share of it nan or inf, in the summary or a merged trace's
          // next reader alike.
          {"a step of no time",
           R"({"traceEvents": [{"ph": "X", "pid": 2, "tid": 1, "ts": 0, "dur": 0, "cat": "step", "name": "step 0"}]})",
           "/traceEvents/0/dur"}};
}

void expect_one_line_naming(const Result& r, const std::string& file, const BadTrace& b) {
  EXPECT_EQ(r.code, 2) << b.what << "\n" << r.err;
  EXPECT_NE(r.err.find(file + ": " + b.pointer), std::string::npos) << b.what << "\n" << r.err;
  EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << b.what << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << b.what << "\n" << r.err;
}

}  // namespace

TEST(TraceMerge, MalformedTracesExitTwoNamingTheFileAndField) {
  for (const BadTrace& b : malformed_traces()) {
    TempDir t;
    std::filesystem::create_directory(t.file("tr"));
    t.write("tr/a.json", rank_trace(1));
    t.write_text("tr/bad.json", b.text);
    const Result r = run_sax("trace merge " + t.file("tr") + " -o " + t.file("all.json"));
    expect_one_line_naming(r, "bad.json", b);
    EXPECT_FALSE(std::filesystem::exists(t.file("all.json"))) << b.what;
  }
}

TEST(TraceSummary, MalformedTracesExitTwoNamingTheFileAndField) {
  std::vector<BadTrace> cases = malformed_traces();
  const std::string step = R"({"ph": "X", "pid": 0, "tid": 1, "ts": 0, "dur": 100, "cat": "step", "name": "step 0"})";
  cases.push_back({"otherData's rank a string",
                   R"({"traceEvents": [)" + step + R"(], "otherData": {"sax": {"rank": "0"}}})",
                   "/otherData/sax/rank"});
  cases.push_back(
      {"an executor thread that is a string",
       R"({"traceEvents": [)" + step + R"(], "otherData": {"sax_ranks": [{"rank": 0, "executor_tid": "main"}]}})",
       "/otherData/sax_ranks/0/executor_tid"});
  for (const BadTrace& b : cases) {
    TempDir t;
    const Result r = run_sax("trace summary " + t.write_text("bad.json", b.text));
    expect_one_line_naming(r, "bad.json", b);
  }
}

// A step of no time made every share of it nan or inf, printed with exit 0.
TEST(TraceSummary, RefusesZeroOrNegativeStepSpansInsteadOfPrintingNan) {
  for (const std::string dur : {"0", "-100"}) {
    TempDir t;
    const std::string text = R"({"traceEvents": [{"ph": "X", "pid": 0, "tid": 1, "ts": 0, "dur": )" + dur +
                             R"(, "cat": "step", "name": "step 0"}]})";
    const Result r = run_sax("trace summary " + t.write_text("zero.json", text));
    EXPECT_EQ(r.code, 2) << dur << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find("zero.json: /traceEvents/0/dur"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("inf"), std::string::npos) << r.out;
  }
}
