// A mistyped option or command is named, with the closest real one, as one line and exit 2.
#include <gtest/gtest.h>

#include "tests/support/run.hpp"

using sax::test::preset_path;
using sax::test::run_sax;

namespace {

std::string planning(const std::string& extra) {
  return "explore --cluster " + preset_path("clusters/h100-3bld.json") + " --model " +
         preset_path("models/llama3-70b.json") + " " + extra;
}

void expect_line(const std::string& args, const std::string& line) {
  const auto r = run_sax(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
  EXPECT_EQ(r.err, "sax: error: " + line + "\n") << args;
}

}  // namespace

TEST(Typos, AMistypedOptionIsNamedWithTheClosestRealOne) {
  // CLI11 alone said "--cluster is required" here: the required option the typo hid.
  expect_line("explore --clustr x.json --model y.json",
              "unknown option --clustr for sax explore (did you mean --cluster?)");
  expect_line(planning("--repaly-top 3"), "unknown option --repaly-top for sax explore (did you mean --replay-top?)");
  expect_line(planning("--calibraton=c.json"),
              "unknown option --calibraton for sax explore (did you mean --calibration?)");
  expect_line(planning("--xyzzy 3"), "unknown option --xyzzy for sax explore (see sax explore --help)");
}

TEST(Typos, AMistypedCommandIsNamedWithTheClosestRealOne) {
  expect_line("explor", "unknown command 'explor' for sax (did you mean explore?)");
  expect_line("trace mrge", "unknown command 'mrge' for sax trace (did you mean merge?)");
}

TEST(Typos, CommandsThatTakeExtrasNameTheirTyposToo) {
  // bench, run and calibrate leave unknown words to the ranks' own check; the CLI names them first.
#ifdef SAX_HAVE_TESTBED_TESTS
  expect_line("calibrate --pionts p.jsonl --cluster c.json --out o.json",
              "unknown option --pionts for sax calibrate (did you mean --points?)");
  expect_line("bench coll --min-byte 8", "unknown option --min-byte for sax bench coll (did you mean --min-bytes?)");
  expect_line("bench coll stray", "sax bench coll: unexpected argument 'stray' (see sax bench coll --help)");
#else
  GTEST_SKIP() << "built without the testbed (no MPI): bench, run and calibrate are not built";
#endif
}
