// The table of accepted ranges (spec/bounds.hpp): every reader checks its numbers against it, the
// presets are within it, docs/hardening.md lists it; and the products of counts are checked for overflow.
#include <gtest/gtest.h>

#include <filesystem>

#include "spec/bounds.hpp"
#include "spec/calibration.hpp"
#include "spec/cluster.hpp"
#include "spec/document.hpp"
#include "spec/layout.hpp"
#include "spec/model.hpp"
#include "tests/support/input_error.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using sax::test::input_error;

namespace {

json local_cluster() { return test::preset("clusters/local-2bld.json"); }

json calibration() {
  return {{"version", 1},
          {"provenance", {{"cluster", "local-2bld"}, {"backend", "cpu"}}},
          {"links", {{"intra_node", {{"all_reduce", {{"alpha_us", 5.0}, {"beta_ns_per_byte", 0.1}}}}}}},
          {"compute", {{"gemm", {{"curve", {{{"flops", 1e6}, {"efficiency", 0.5}}}}}}, {"hbm_efficiency", 0.8}}},
          {"overlap_slowdown", 0.1}};
}

}  // namespace

TEST(HardeningImpossiblePredictions, TinyPeakIsRefusedWithItsPathRangeAndUnit) {
  for (double tiny : {1e-308, 4.9e-324, 1e-6}) {
    json j = local_cluster();
    j["device"]["peak_tflops"]["fp32"] = tiny;
    const InputError e = input_error([&] { read_cluster(j, "c.json"); });
    EXPECT_EQ(e.path(), "/device/peak_tflops/fp32") << tiny;
    EXPECT_NE(std::string(e.what()).find("between 1e-05 and 1000000 TFLOP/s"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c.json"), std::string::npos) << e.what();
  }
}

TEST(HardeningImpossiblePredictions, AbsurdAndTinyLinkAndMemoryFiguresAreRefused) {
  struct Case {
    std::vector<std::string> at;
    double value;
    std::string unit;
  };
  for (const Case& k : std::vector<Case>{{{"links", "cross_building", "bandwidth_gbps"}, 1e308, "GB/s"},
                                         {{"links", "intra_node", "bandwidth_gbps"}, 1e-308, "GB/s"},
                                         {{"links", "intra_building", "latency_us"}, 1e300, "us"},
                                         {{"links", "intra_building", "latency_us"}, -1e-300, "us"},
                                         {{"links", "cross_building", "oversubscription"}, 1e9, "x"},
                                         {{"device", "hbm_gib"}, 5e-324, "GiB"},
                                         {{"device", "hbm_bandwidth_gbps"}, 1e308, "GB/s"}}) {
    json j = local_cluster();
    json* at = &j;
    std::string path;
    for (const auto& key : k.at) at = &(*at)[key], path += "/" + key;
    *at = k.value;
    const InputError e = input_error([&] { read_cluster(j, "c.json"); });
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(e.expected().find(" " + k.unit + ", got"), std::string::npos) << e.what();
  }
  // The same in a network technology's link.
  json j = local_cluster();
  j["network_technologies"][0]["cross_building"]["bandwidth_gbps"] = 1e308;
  EXPECT_EQ(input_error([&] { read_cluster(j, "c.json"); }).path(),
            "/network_technologies/0/cross_building/bandwidth_gbps");
}

TEST(HardeningImpossiblePredictions, CalibrationFiguresAreBounded) {
  EXPECT_NO_THROW(read_calibration(calibration(), "k.json"));
  struct Case {
    std::string pointer;
    double value;
  };
  for (const Case& k : std::vector<Case>{{"/links/intra_node/all_reduce/beta_ns_per_byte", 1e-308},
                                         {"/links/intra_node/all_reduce/alpha_us", 1e308},
                                         {"/compute/gemm/curve/0/efficiency", 1e-300},
                                         {"/compute/gemm/curve/0/flops", 1e-308},
                                         {"/compute/hbm_efficiency", 4.9e-324},
                                         {"/overlap_slowdown", 1e300}}) {
    json j = calibration();
    j[json::json_pointer(k.pointer)] = k.value;
    EXPECT_EQ(input_error([&] { read_calibration(j, "k.json"); }).path(), k.pointer) << k.value;
  }
}

TEST(HardeningImpossiblePredictions, ModelProbabilitiesAreBounded) {
  json j = test::preset("models/gpt-tiny.json");
  j["hidden_dropout"] = 1.0;
  EXPECT_EQ(input_error([&] { read_model(j, "m.json"); }).path(), "/hidden_dropout");
}

// Every preset is within the table (so the bounds refuse no cluster or model anyone ships).
TEST(HardeningImpossiblePredictions, EveryPresetIsWithinTheBounds) {
  int read = 0;
  for (const char* dir : {"clusters", "models", "layouts"})
    for (const auto& e :
         std::filesystem::recursive_directory_iterator(std::string(SAX_SOURCE_DIR) + "/configs/" + dir)) {
      if (e.path().extension() != ".json") continue;
      EXPECT_NO_THROW(load_document(e.path().string())) << e.path();
      ++read;
    }
  EXPECT_GT(read, 40);
}

// docs/hardening.md "Accepted ranges" is the table, row for row.
TEST(HardeningImpossiblePredictions, TheDocsListEveryBound) {
  const std::string page = test::slurp(std::string(SAX_SOURCE_DIR) + "/docs/hardening.md");
  EXPECT_NE(page.find(bounds_markdown()), std::string::npos)
      << "docs/hardening.md's \"Accepted ranges\" should hold this table:\n"
      << bounds_markdown();
}

TEST(HardeningSignedOverflow, TokensPerStepThatOverflowsIsRefusedNamingTheFields) {
  json j = test::preset("models/gpt-tiny.json");
  const std::int64_t big = std::int64_t{1} << 40;
  j["seq_length"] = big, j["max_position_embeddings"] = big, j["global_batch_size"] = big;
  const InputError e = input_error([&] { read_model(j, "m.json"); });
  EXPECT_EQ(e.path(), "/global_batch_size");
  EXPECT_NE(e.expected().find("seq_length x global_batch_size"), std::string::npos) << e.what();
  // Within int64 but past the bound: still refused.
  j["seq_length"] = 1 << 20, j["max_position_embeddings"] = 1 << 20, j["global_batch_size"] = 1 << 21;
  EXPECT_EQ(input_error([&] { read_model(j, "m.json"); }).path(), "/global_batch_size");
  // A Model made in code, bypassing the reader: an InputError, not a wrapped product.
  Model m = read_model(test::preset("models/gpt-tiny.json"), "m.json");
  m.seq_length = big, m.global_batch_size = big;
  EXPECT_THROW(m.tokens_per_step(), InputError);
  EXPECT_THROW(m.training_flops_per_step(), InputError);
}

// `sax check` of the former overflowing model: exit 2 and one line, not 0 FLOPs per step.
TEST(HardeningSignedOverflow, CheckOfAnOverflowingBatchExitsTwo) {
  test::TempDir t;
  json j = test::preset("models/gpt-tiny.json");
  j["seq_length"] = std::int64_t{1} << 40, j["max_position_embeddings"] = std::int64_t{1} << 40;
  j["global_batch_size"] = std::int64_t{1} << 40;
  const auto r = test::run_sax("check " + t.write("m.json", j));
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("/global_batch_size"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(HardeningSignedOverflow, DevicesPerNodeAndWorldSizeAreBounded) {
  json j = local_cluster();
  j["devices_per_node"] = 2147483647;  // 2 × it overflowed an int in the search
  EXPECT_EQ(input_error([&] { read_cluster(j, "c.json"); }).path(), "/devices_per_node");
  j = local_cluster();
  j["devices_per_node"] = 1 << 20;
  j["buildings"][0]["nodes"] = std::int64_t{1} << 30;
  EXPECT_EQ(input_error([&] { read_cluster(j, "c.json"); }).path(), "/devices_per_node");
  EXPECT_EQ(checked_mul(std::int64_t{1} << 40, std::int64_t{1} << 40), std::nullopt);
  EXPECT_EQ(checked_mul(3, 4), 12);
}

TEST(HardeningUnboundedWork, ThousandsOfNetworkTechnologiesAreRefusedBeforeReading) {
  json j = local_cluster();
  json tech = j["network_technologies"][0];
  j["network_technologies"] = json::array();
  for (int i = 0; i < 2000; ++i) {
    tech["name"] = "t" + std::to_string(i);
    j["network_technologies"].push_back(tech);
  }
  const InputError e = input_error([&] { read_cluster(j, "c.json"); });
  EXPECT_EQ(e.path(), "/network_technologies");
  EXPECT_NE(e.expected().find("at most 64"), std::string::npos) << e.what();
}
