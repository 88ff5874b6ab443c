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
