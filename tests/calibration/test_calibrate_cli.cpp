// `sax calibrate fit` end to end: bench coll results (as `sax bench coll --json` writes them)
// in, a calibration file out that `sax predict --calibration` reads; a file without the link
// class its groups crossed is refused with the field.
#include <gtest/gtest.h>

#include "calibration/fit.hpp"
#include "spec/calibration.hpp"
#include "tests/support/run.hpp"

using nlohmann::json;
using sax::test::TempDir;

namespace {

json bench_file(const char* link_class, double alpha_us, double beta) {
  json results = json::array();
  for (const char* op : {"all_reduce", "all_gather", "broadcast"})
    for (double bytes = 1024; bytes <= 16.0 * (1 << 20); bytes *= 4) {
      sax::calibration::CollPoint p{*sax::parse_coll_op(op), 4, bytes, 0};
      p.time_us = sax::calibration::predict_us({alpha_us, beta, {}}, p);
      results.push_back({{"op", op}, {"ranks", 4}, {"bytes", bytes}, {"time_us", p.time_us}});
    }
  return {{"version", 2},
          {"config", {{"cluster", "configs/clusters/local-2bld.json"}}},
          {"env", {{"link_class", link_class}, {"backend", "cpu"}, {"emulation", "netns"}}},
          {"results", results}};
}

}  // namespace

TEST(CalibrateFit, WritesACalibrationThePredictorReads) {
  TempDir t;
  const std::string f = t.write("cross.json", bench_file("cross_building", 1000.0, 8.0));  // 1 ms, 0.125 GB/s
  const auto r = sax::test::run_shell(std::string(SAX_BINARY) + " calibrate fit " + f + " --out " + t.file("k.json"));
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("cross_building"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("broadcast"), std::string::npos) << "the unpriced op is named as left out:\n" << r.out;
  const sax::Calibration k = sax::load_calibration(t.file("k.json"));
  const auto& ab = k.links[static_cast<int>(sax::LinkClass::cross_building)][static_cast<int>(sax::CollOp::all_reduce)];
  ASSERT_TRUE(ab.has_value());
  EXPECT_NEAR(ab->alpha_us, 1000.0, 1e-6);
  EXPECT_NEAR(ab->beta_ns_per_byte, 8.0, 1e-9);
  EXPECT_EQ(k.provenance.emulation, "netns");
  const auto p = sax::test::run_shell(
      std::string(SAX_BINARY) + " predict --cluster " + sax::test::preset_path("clusters/local-2bld.json") +
      " --model " + sax::test::preset_path("models/gpt-tiny.json") + " --layout " +
      sax::test::preset_path("layouts/local-tp2-pp2.json") + " --calibration " + t.file("k.json"));
  EXPECT_EQ(p.code, 0) << p.err;
}

TEST(CalibrateFit, AFileWithoutItsLinkClassIsRefusedWithTheField) {
  TempDir t;
  json doc = bench_file("cross_building", 10.0, 0.1);
  doc["env"].erase("link_class");
  const std::string f = t.write("b.json", doc);
  const auto r = sax::test::run_shell(std::string(SAX_BINARY) + " calibrate fit " + f + " --out " + t.file("k.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/env/link_class"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(t.file("k.json")));
}

// A hostile bench file (1e300 µs per step) made a calibration its own reader refuses, exit 0:
// a fit outside what a calibration holds is now said and left out, and what is written reads back.
TEST(CalibrateFit, AFitOutsideTheBoundsIsLeftOutAndWhatIsWrittenReadsBack) {
  TempDir t;
  const std::string f = t.write("cross.json", bench_file("cross_building", 1e300, 8.0));
  const auto r = sax::test::run_shell(std::string(SAX_BINARY) + " calibrate fit " + f + " --out " + t.file("k.json"));
  EXPECT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("#   (not written: expected a latency between 0 and"), std::string::npos) << r.out;
  const sax::Calibration k = sax::load_calibration(t.file("k.json"));
  for (const auto& fit : k.links[static_cast<int>(sax::LinkClass::cross_building)]) EXPECT_FALSE(fit.has_value());
}
