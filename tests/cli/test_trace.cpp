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
