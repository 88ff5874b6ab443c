// The calibration file: a full file reads and round-trips; every bad entry is an InputError
// naming the file and the JSON path of the field.
#include <gtest/gtest.h>

#include "spec/calibration.hpp"

using namespace sax;

namespace {

json good() {
  return json::parse(R"({
    "kind": "calibration", "version": 1,
    "provenance": {"cluster": "local-2bld", "backend": "cpu", "emulation": "kernel shaping",
                   "date": "2026-01-01", "tool": "sax calibrate"},
    "links": {
      "intra_node": {"all_reduce": {"alpha_us": 5, "beta_ns_per_byte": 0.25,
                                    "fit": {"r2": 0.998, "max_rel_error": 0.04, "samples": 24}}},
      "cross_building": {"send_recv": {"alpha_us": 1000, "beta_ns_per_byte": 8}}
    },
    "compute": {
      "gemm": {"curve": [{"flops": 1e6, "efficiency": 0.2}, {"flops": 1e9, "efficiency": 0.6}],
               "fit": {"r2": 0.95, "max_rel_error": 0.1, "samples": 30}},
      "hbm_efficiency": 0.7
    },
    "overlap_slowdown": 0.15
  })");
}

std::string error_of(const json& j) {
  try {
    read_calibration(j, "k.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Calibration, ReadsAndRoundTrips) {
  const Calibration c = read_calibration(good(), "k.json");
  EXPECT_EQ(c.provenance.backend, Backend::cpu);
  const auto& ar = c.links[static_cast<int>(LinkClass::intra_node)][static_cast<int>(CollOp::all_reduce)];
  ASSERT_TRUE(ar.has_value());
  EXPECT_DOUBLE_EQ(ar->alpha_us, 5);
  EXPECT_DOUBLE_EQ(ar->fit.r2, 0.998);
  EXPECT_EQ(ar->fit.samples, 24);
  EXPECT_FALSE(c.links[0][static_cast<int>(CollOp::all_gather)].has_value());
  ASSERT_TRUE(c.gemm.has_value());
  EXPECT_DOUBLE_EQ(c.gemm->at(1e3), 0.2);                     // clamped below
  EXPECT_DOUBLE_EQ(c.gemm->at(1e12), 0.6);                    // clamped above
  EXPECT_NEAR(c.gemm->at(std::sqrt(1e6 * 1e9)), 0.4, 1e-12);  // linear in log10(FLOPs)
  EXPECT_FALSE(c.attention.has_value());
  EXPECT_DOUBLE_EQ(*c.overlap_slowdown, 0.15);
  const Calibration again = read_calibration(to_json(c), "again.json");
  EXPECT_EQ(to_json(again), to_json(c));
}

TEST(Calibration, ErrorsNameTheField) {
  struct Case {
    std::string pointer;  // where to change good()
    json value;
    std::string path;  // the JSON path the error must name
  };
  const std::vector<Case> cases = {
      {"/version", 2, "/version"},
      {"/version", std::int64_t{4294967297}, "/version"},  // 2^32 + 1: not narrowed to 1
      {"/provenance/backend", "tpu", "/provenance/backend"},
      {"/links/intra_node/all_reduce/alpha_us", -1, "/links/intra_node/all_reduce/alpha_us"},
      {"/links/intra_node/all_reduce/beta_ns_per_byte", 0, "/links/intra_node/all_reduce/beta_ns_per_byte"},
      {"/links/intra_node/all_reduce/fit/r2", 1.5, "/links/intra_node/all_reduce/fit/r2"},
      {"/links/intra_node/broadcast", json::object(), "/links/intra_node/broadcast"},
      {"/links/over_the_sea", json::object(), "/links/over_the_sea"},
      {"/compute/gemm/curve/1/efficiency", 150, "/compute/gemm/curve/1/efficiency"},  // 100 x the datasheet
      {"/compute/gemm/curve/1/flops", 10, "/compute/gemm/curve/1/flops"},
      {"/compute/hbm_efficiency", "fast", "/compute/hbm_efficiency"},
      {"/overlap_slowdown", -0.1, "/overlap_slowdown"},
      {"/surprise", 1, "/surprise"},
  };
  for (const auto& k : cases) {
    json j = good();
    j[json::json_pointer(k.pointer)] = k.value;
    const std::string e = error_of(j);
    EXPECT_NE(e.find("k.json: " + k.path + ": expected"), std::string::npos) << k.pointer << " -> " << e;
  }
  json j = good();
  j.erase("provenance");
  EXPECT_NE(error_of(j).find("/provenance"), std::string::npos);
}

namespace {

// good() with a cross-building send_recv fitted in two regimes, its quality and an outlier.
json with_regimes() {
  json j = good();
  j["links"]["cross_building"]["send_recv"] = json::parse(R"({
    "alpha_us": 1000, "beta_ns_per_byte": 8,
    "fit": {"r2": 0.99, "max_rel_error": 0.66, "samples": 34, "p50_rel_error": 0.02, "p90_rel_error": 0.05},
    "regimes": [
      {"from_bytes": 1024, "alpha_us": 100, "beta_ns_per_byte": 30,
       "fit": {"r2": 0.9, "max_rel_error": 0.1, "samples": 12}},
      {"from_bytes": 65536, "alpha_us": 1000, "beta_ns_per_byte": 8,
       "fit": {"r2": 0.99, "max_rel_error": 0.66, "samples": 22}}],
    "outliers": [{"bytes": 1048576, "ranks": 2, "time_us": 30000, "rel_residual": -0.66,
                  "why": "residual -66.0% is 22.0 x regime 2's robust scale 3.00% (> 3): weight 0.06"}]
  })");
  return j;
}

}  // namespace

// An entry's regimes, quality and outliers read and round-trip; an entry without regimes (an
// older file) reads as one regime of its α-β and its fit, and writes its regimes since.
TEST(Calibration, LinkRegimesReadRoundTripAndAnOlderEntryIsOneRegime) {
  const Calibration c = read_calibration(with_regimes(), "k.json");
  const auto& sr = c.links[static_cast<int>(LinkClass::cross_building)][static_cast<int>(CollOp::send_recv)];
  ASSERT_TRUE(sr.has_value());
  ASSERT_EQ(sr->regimes.size(), 2u);
  EXPECT_EQ(sr->regimes[1].from_bytes, 65536);
  EXPECT_DOUBLE_EQ(sr->regimes[0].alpha_us, 100);
  EXPECT_DOUBLE_EQ(sr->regimes[0].fit.r2, 0.9);
  EXPECT_EQ(sr->regimes[1].fit.samples, 22);
  EXPECT_DOUBLE_EQ(sr->rel_residual_p90, 0.05);
  ASSERT_EQ(sr->outliers.size(), 1u);
  EXPECT_EQ(sr->outliers[0].bytes, 1 << 20);
  EXPECT_DOUBLE_EQ(sr->outliers[0].rel_residual, -0.66);
  // In the α-β function's units, and priced in its regime.
  const std::vector<AlphaBetaRegime> s = sr->regimes_s();
  EXPECT_DOUBLE_EQ(alpha_beta_s(s, 4096, 1, 4096), 100e-6 + 4096 * 30e-9);
  EXPECT_DOUBLE_EQ(alpha_beta_s(s, 1 << 20, 1, 1 << 20), 1000e-6 + (1 << 20) * 8e-9);
  EXPECT_EQ(to_json(read_calibration(to_json(c), "again.json")), to_json(c));

  const auto& ar = c.links[static_cast<int>(LinkClass::intra_node)][static_cast<int>(CollOp::all_reduce)];
  ASSERT_EQ(ar->regimes.size(), 1u);
  EXPECT_EQ(ar->regimes[0].from_bytes, 0);
  EXPECT_DOUBLE_EQ(ar->regimes[0].alpha_us, 5);
  EXPECT_DOUBLE_EQ(ar->regimes[0].beta_ns_per_byte, 0.25);
  EXPECT_DOUBLE_EQ(ar->regimes[0].fit.r2, 0.998);
  EXPECT_TRUE(to_json(c)["links"]["intra_node"]["all_reduce"].contains("regimes"));
}

TEST(Calibration, BadRegimesAndOutliersNameTheField) {
  const std::string sr = "/links/cross_building/send_recv";
  struct Case {
    std::string pointer;
    json value;
    std::string path;
  };
  const std::vector<Case> cases = {
      {sr + "/regimes", json::array(), sr + "/regimes"},
      {sr + "/regimes", "two", sr + "/regimes"},
      {sr + "/regimes", json::parse(R"([{"from_bytes": 1, "alpha_us": 1, "beta_ns_per_byte": 1},
                       {"from_bytes": 2, "alpha_us": 1, "beta_ns_per_byte": 1},
                       {"from_bytes": 3, "alpha_us": 1, "beta_ns_per_byte": 1},
                       {"from_bytes": 4, "alpha_us": 1000, "beta_ns_per_byte": 8}])"),
       sr + "/regimes"},                                                  // more than three
      {sr + "/regimes/1/from_bytes", 512, sr + "/regimes/1/from_bytes"},  // below the first's
      {sr + "/regimes/0/from_bytes", -1, sr + "/regimes/0/from_bytes"},
      {sr + "/regimes/0/from_bytes", 1.5, sr + "/regimes/0/from_bytes"},
      {sr + "/regimes/0/alpha_us", -1, sr + "/regimes/0/alpha_us"},
      {sr + "/regimes/0/beta_ns_per_byte", 0, sr + "/regimes/0/beta_ns_per_byte"},
      {sr + "/regimes/0/fit/r2", 2, sr + "/regimes/0/fit/r2"},
      {sr + "/regimes/0/surprise", 1, sr + "/regimes/0/surprise"},
      {sr + "/alpha_us", 999, sr + "/alpha_us"},  // not the last regime's
      {sr + "/beta_ns_per_byte", 9, sr + "/beta_ns_per_byte"},
      {sr + "/fit/p90_rel_error", -1, sr + "/fit/p90_rel_error"},
      {sr + "/outliers", json::object(), sr + "/outliers"},
      {sr + "/outliers/0/bytes", "1M", sr + "/outliers/0/bytes"},
      {sr + "/outliers/0/ranks", 0, sr + "/outliers/0/ranks"},
  };
  for (const auto& k : cases) {
    json j = with_regimes();
    j[json::json_pointer(k.pointer)] = k.value;
    const std::string e = error_of(j);
    EXPECT_NE(e.find("k.json: " + k.path + ": expected"), std::string::npos) << k.pointer << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}
