// `sax bench coll --plots DIR` end to end under mpirun -np 2: rank 0 draws DIR/coll.png
// from the results once they are written (from --json, or DIR/coll.json written for it); no
// script or no matplotlib skips with one line and exit 0; a failing script fails every rank with
// exit 1; a DIR that cannot be made is refused before the sweep with exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

#include "tests/support/run.hpp"

using sax::test::Result;
using sax::test::TempDir;

namespace {

const std::string kSweep = "--op all_reduce,all_gather -b 1K -e 16K -f 4 -n 3 -w 1 --timeout 60";

Result bench(const std::string& args, const std::string& env = "") {
  return sax::test::run_shell(env + " " + sax::test::mpirun() + " -np 2 " + SAX_BINARY + " bench coll " + args);
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) lines.push_back(line);
  return lines;
}

// A PNG with something drawn: the signature and more than 10 KB.
bool is_figure(const std::string& file) {
  const std::string d = sax::test::slurp(file);
  return d.size() > 10000 && d.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0;
}

std::string skipped_line(const Result& r) {
  auto lines = lines_starting(r.err, "plots: skipped");
  return lines.empty() ? "" : lines.front();
}

}  // namespace

TEST(BenchPlots, RankZeroDrawsCollPngFromTheJsonWrittenBesideIt) {
  TempDir t;
  const std::string dir = t.file("plots/coll");  // made by sax, parents too
  Result r = bench(kSweep + " --plots " + dir);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  if (!skipped_line(r).empty()) GTEST_SKIP() << skipped_line(r);
  EXPECT_TRUE(lines_starting(r.err, "sax:").empty()) << r.err;
  auto j = nlohmann::json::parse(sax::test::slurp(dir + "/coll.json"));
  EXPECT_EQ(j["version"], 2);
  EXPECT_EQ(j["results"].size(), 6u);  // 2 ops x 3 sizes
  EXPECT_TRUE(is_figure(dir + "/coll.png"));
  EXPECT_NE(r.out.find("# wrote " + dir + "/coll.png"), std::string::npos) << r.out;
}

TEST(BenchPlots, WithJsonTheFigureIsDrawnFromThatFile) {
  TempDir t;
  Result r = bench(kSweep + " --json " + t.file("r.json") + " --plots " + t.file("p"));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  if (!skipped_line(r).empty()) GTEST_SKIP() << skipped_line(r);
  EXPECT_TRUE(std::filesystem::exists(t.file("r.json")));
  EXPECT_TRUE(is_figure(t.file("p") + "/coll.png"));
  EXPECT_FALSE(std::filesystem::exists(t.file("p") + "/coll.json"));
}

TEST(BenchPlots, NoScriptSkipsWithOneLineAndTheResultsStay) {
  TempDir t;
  Result r = bench(kSweep + " --plots " + t.file("p"), "SAX_PLOTS_SCRIPT=" + t.file("none.py"));
  EXPECT_EQ(r.code, 0) << r.err;
  auto lines = lines_starting(r.err, "plots: skipped");
  ASSERT_EQ(lines.size(), 1u) << r.err;  // rank 0 alone
  EXPECT_NE(lines[0].find("no plot script at " + t.file("none.py")), std::string::npos) << lines[0];
  EXPECT_TRUE(std::filesystem::exists(t.file("p") + "/coll.json"));
  EXPECT_FALSE(std::filesystem::exists(t.file("p") + "/coll.png"));
}

TEST(BenchPlots, ExitThreeFromTheScriptIsPlotsSkipped) {
  TempDir t;
  const std::string script = t.write_text("no_mpl.py", "import sys\nsys.exit(3)\n");
  Result r = bench(kSweep + " --plots " + t.file("p"), "SAX_PLOTS_SCRIPT=" + script);
  if (lines_starting(r.err, "plots: skipped (no python3").size() == 1) GTEST_SKIP() << "no python3 here";
  EXPECT_EQ(r.code, 0) << r.err;
  auto lines = lines_starting(r.err, "plots: skipped");
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("matplotlib is not importable"), std::string::npos) << lines[0];
}

TEST(BenchPlots, AFailingScriptFailsEveryRankWithExitOne) {
  TempDir t;
  const std::string script =
      t.write_text("broken.py", "import sys\nsys.stderr.write('broken: no figure\\n')\nsys.exit(5)\n");
  Result r = bench(kSweep + " --plots " + t.file("p"), "SAX_PLOTS_SCRIPT=" + script);
  if (lines_starting(r.err, "plots: skipped (no python3").size() == 1) GTEST_SKIP() << "no python3 here";
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("broken: no figure"), std::string::npos) << r.err;  // the script's own line
  auto lines = lines_starting(r.err, "sax:");
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("sax: failed: plots: "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("exited with code 5"), std::string::npos) << lines[0];
  EXPECT_TRUE(std::filesystem::exists(t.file("p") + "/coll.json"));  // the results were complete first
}

TEST(BenchPlots, ADirectoryThatCannotBeMadeIsRefusedBeforeTheSweep) {
  TempDir t;
  const std::string file = t.write_text("a-file", "x");
  Result r = bench(kSweep + " --plots " + file + "/plots");
  EXPECT_EQ(r.code, 2) << r.err;
  auto lines = lines_starting(r.err, "sax:");
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("sax: error: " + file + "/plots: expected a directory for --plots"), std::string::npos)
      << lines[0];
  EXPECT_EQ(r.out.find("# all_reduce"), std::string::npos) << r.out;  // no sweep ran
}
