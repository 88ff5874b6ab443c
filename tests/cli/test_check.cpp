// `sax check` end to end: every validation rule a user can break gives exit code 2 and one
// line on stderr naming the file and the JSON path of the field at fault.
#include <gtest/gtest.h>

#include <functional>

#include "tests/support/run.hpp"

using nlohmann::json;
using sax::test::preset;
using sax::test::run_sax;
using sax::test::TempDir;

namespace {

struct Case {
  const char* name;
  const char* target;  // which file is broken: cluster | model | layout
  std::function<void(json&)> mutate;
  const char* path;  // JSON path the message must name
};

json base_cluster() { return preset("clusters/h100-3bld.json"); }
// MoE, so that EP rules are exercised; a global batch of one micro-batch per DP rank.
json base_model() {
  json m = preset("models/mixtral-8x7b.json");
  m["global_batch_size"] = 6144;
  return m;
}
json base_layout() {
  return {{"tensor_model_parallel_size", 4}, {"pipeline_model_parallel_size", 4},
          {"expert_model_parallel_size", 8}, {"micro_batch_size", 1},
          {"sequence_parallel", true},       {"attention_backend", "flash"},
          {"order", "tp-cp-ep-dp-pp"},       {"schedule", {{"pipeline", "1f1b"}, {"dp_sync", "overlapped"}}}};
}

const Case kCases[] = {
    // Degrees that do not divide.
    {"TpCpPpNotDividingWorld", "layout", [](json& l) { l["pipeline_model_parallel_size"] = 5; },
     "/pipeline_model_parallel_size"},
    {"HeadsNotDivisibleByTp", "layout", [](json& l) { l["tensor_model_parallel_size"] = 3; },
     "/tensor_model_parallel_size"},
    {"QueryGroupsNotDivisibleByTp", "layout", [](json& l) { l["tensor_model_parallel_size"] = 16; },
     "/tensor_model_parallel_size"},
    {"LayersNotSplittingOverPp", "layout", [](json& l) { l["pipeline_model_parallel_size"] = 3; },
     "/pipeline_model_parallel_size"},
    {"LayersNotSplittingOverVpp", "layout",
     [](json& l) {
       l["virtual_pipeline_model_parallel_size"] = 3;
       l["schedule"]["pipeline"] = "interleaved";
     },
     "/virtual_pipeline_model_parallel_size"},
    {"UnevenFirstStageLeavesUnevenMiddle", "layout", [](json& l) { l["decoder_first_pipeline_num_layers"] = 3; },
     "/decoder_first_pipeline_num_layers"},
    {"UnevenLastStageLeavesUnevenMiddle", "layout", [](json& l) { l["decoder_last_pipeline_num_layers"] = 4; },
     "/decoder_last_pipeline_num_layers"},
    {"FirstPlusLastExceedLayers", "layout",
     [](json& l) {
       l["decoder_first_pipeline_num_layers"] = 20;
       l["decoder_last_pipeline_num_layers"] = 20;
     },
     "/decoder_first_pipeline_num_layers"},
    {"ExpertsNotDivisibleByEp", "layout", [](json& l) { l["expert_model_parallel_size"] = 3; },
     "/expert_model_parallel_size"},
    {"EpOnDenseModel", "model",
     [](json& m) {
       m.erase("num_experts");
       m.erase("moe_router_topk");
       m.erase("moe_ffn_hidden_size");
     },
     "/expert_model_parallel_size"},
    {"BatchNotDivisibleByMicroBatchTimesDp", "layout", [](json& l) { l["micro_batch_size"] = 7; }, "/micro_batch_size"},
    {"MoeWithTpWithoutSequenceParallel", "layout", [](json& l) { l["sequence_parallel"] = false; },
     "/sequence_parallel"},
    {"CpNotDividingSequence", "layout", [](json& l) { l["context_parallel_size"] = 3; }, "/context_parallel_size"},
    {"InterleavedWithoutVirtualStages", "layout", [](json& l) { l["schedule"]["pipeline"] = "interleaved"; },
     "/schedule/pipeline"},
    {"UnknownNetworkTechnology", "layout", [](json& l) { l["schedule"]["network_technology"] = "warp"; },
     "/schedule/network_technology"},
    {"BadOrder", "layout", [](json& l) { l["order"] = "tp-dp-pp"; }, "/order"},
    {"OrderWithTrailingDash", "layout", [](json& l) { l["order"] = "tp-cp-ep-dp-pp-"; }, "/order"},
    // Unknown keys.
    {"UnknownLayoutKey", "layout", [](json& l) { l["tensor_paralel_size"] = 2; }, "/tensor_paralel_size"},
    {"UnknownModelKey", "model", [](json& m) { m["hiden_size"] = 2; }, "/hiden_size"},
    {"UnknownClusterKey", "cluster", [](json& c) { c["links"]["intra_node"]["bw"] = 2; }, "/links/intra_node/bw"},
    {"UnknownScheduleKey", "layout", [](json& l) { l["schedule"]["dp"] = "x"; }, "/schedule/dp"},
    // Wrong types.
    {"StringWhereIntegerExpected", "layout", [](json& l) { l["micro_batch_size"] = "1"; }, "/micro_batch_size"},
    {"FloatWhereIntegerExpected", "model", [](json& m) { m["num_layers"] = 32.5; }, "/num_layers"},
    {"NumberWhereBoolExpected", "layout", [](json& l) { l["sequence_parallel"] = 1; }, "/sequence_parallel"},
    {"StringWhereTpCommOverlapBoolExpected", "layout", [](json& l) { l["tp_comm_overlap"] = "yes"; },
     "/tp_comm_overlap"},
    // Megatron's --tp-comm-overlap needs --sequence-parallel (and so TP > 1).
    {"TpCommOverlapWithoutSequenceParallel", "layout",
     [](json& l) {
       l["tp_comm_overlap"] = true;
       l["sequence_parallel"] = false;
     },
     "/tp_comm_overlap"},
    {"TpCommOverlapAtTp1", "layout",
     [](json& l) {
       l["tp_comm_overlap"] = true;
       l["tensor_model_parallel_size"] = 1;
     },
     "/tp_comm_overlap"},
    {"ObjectWhereArrayExpected", "cluster", [](json& c) { c["buildings"] = json::object(); }, "/buildings"},
    {"BadRecomputeChoice", "layout", [](json& l) { l["recompute_granularity"] = "half"; }, "/recompute_granularity"},
    {"BadDtype", "model", [](json& m) { m["dtype"] = "int4"; }, "/dtype"},
    {"MissingRequiredField", "model", [](json& m) { m.erase("hidden_size"); }, "/hidden_size"},
    // Negative or zero sizes.
    {"NegativeTp", "layout", [](json& l) { l["tensor_model_parallel_size"] = -2; }, "/tensor_model_parallel_size"},
    {"ZeroMicroBatch", "layout", [](json& l) { l["micro_batch_size"] = 0; }, "/micro_batch_size"},
    {"NegativeHidden", "model", [](json& m) { m["hidden_size"] = -4096; }, "/hidden_size"},
    {"NegativeNodes", "cluster", [](json& c) { c["buildings"][1]["nodes"] = -1; }, "/buildings/1/nodes"},
    {"NegativeBandwidth", "cluster", [](json& c) { c["links"]["cross_building"]["bandwidth_gbps"] = -5; },
     "/links/cross_building/bandwidth_gbps"},
    {"NegativeLatency", "cluster", [](json& c) { c["network_technologies"][0]["cross_building"]["latency_us"] = -1; },
     "/network_technologies/0/cross_building/latency_us"},
    {"OversubscriptionBelowOne", "cluster", [](json& c) { c["links"]["cross_building"]["oversubscription"] = 0.5; },
     "/links/cross_building/oversubscription"},
    {"TopkAboveExperts", "model", [](json& m) { m["moe_router_topk"] = 9; }, "/moe_router_topk"},
    {"QueryGroupsNotDividingHeads", "model", [](json& m) { m["num_query_groups"] = 5; }, "/num_query_groups"},
    // Sizes so large that the products of the checks would overflow int64 (SIGFPE before).
    {"TpTimesCpOverflows", "layout",
     [](json& l) {
       l["tensor_model_parallel_size"] = std::int64_t{1} << 62;
       l["context_parallel_size"] = 4;
     },
     "/tensor_model_parallel_size"},
    {"TpCpPpProductOverflows", "layout",
     [](json& l) {
       l["tensor_model_parallel_size"] = std::int64_t{1} << 31;
       l["context_parallel_size"] = std::int64_t{1} << 31;
       l["pipeline_model_parallel_size"] = 4;
     },
     "/pipeline_model_parallel_size"},
    {"HugeMicroBatch", "layout", [](json& l) { l["micro_batch_size"] = std::int64_t{1} << 62; }, "/micro_batch_size"},
    {"MicroBatchTimesDpOverflows", "layout", [](json& l) { l["micro_batch_size"] = std::int64_t{1} << 31; },
     "/micro_batch_size"},
    {"HugeFirstStage", "layout", [](json& l) { l["decoder_first_pipeline_num_layers"] = std::int64_t{1} << 62; },
     "/decoder_first_pipeline_num_layers"},
    {"DevicesPerNodeBeyondInt", "cluster", [](json& c) { c["devices_per_node"] = std::int64_t{4294967298}; },
     "/devices_per_node"},
    {"WorldSizeBeyondBound", "cluster", [](json& c) { c["devices_per_node"] = std::int64_t{1} << 30; },
     "/devices_per_node"},
    {"HugeNodeCount", "cluster", [](json& c) { c["buildings"][1]["nodes"] = std::int64_t{1} << 62; },
     "/buildings/1/nodes"},
    {"HugeHidden", "model", [](json& m) { m["hidden_size"] = std::int64_t{1} << 50; }, "/hidden_size"},
    {"HugeGlobalBatch", "model", [](json& m) { m["global_batch_size"] = std::int64_t{1} << 62; }, "/global_batch_size"},
    {"HugeLayerCount", "model", [](json& m) { m["num_layers"] = std::int64_t{1} << 40; }, "/num_layers"},
    {"MoeLayerFreqEntryTruncated", "model",
     [](json& m) {
       m["moe_layer_freq"] = json::array();
       for (int i = 0; i < m["num_layers"].get<int>(); ++i) m["moe_layer_freq"].push_back(1);
       m["moe_layer_freq"][3] = std::int64_t{4294967297};
     },
     "/moe_layer_freq/3"},
    {"DuplicateBuildingName", "cluster", [](json& c) { c["buildings"][1]["name"] = "bld-a"; }, "/buildings/1/name"},
    {"SmCountZero", "cluster", [](json& c) { c["device"]["sm_count"] = 0; }, "/device/sm_count"},
    {"SmCountFractional", "cluster", [](json& c) { c["device"]["sm_count"] = 131.5; }, "/device/sm_count"},
    {"SmCountString", "cluster", [](json& c) { c["device"]["sm_count"] = "132"; }, "/device/sm_count"},
    {"HiddenDropoutNotAProbability", "model", [](json& m) { m["hidden_dropout"] = 1.0; }, "/hidden_dropout"},
    {"AttentionDropoutNegative", "model", [](json& m) { m["attention_dropout"] = -0.1; }, "/attention_dropout"},
    {"UnknownAttentionBackend", "layout", [](json& l) { l["attention_backend"] = "flashy"; }, "/attention_backend"},
    {"FlashAttentionOnFp32Model", "model",
     [](json& m) { m["dtype"] = "fp32"; },  // the base layout asks for flash attention
     "/attention_backend"},
    // Buildings that differ.
    {"BuildingDeviceWithoutPeak", "cluster",
     [](json& c) {
       c["buildings"][1]["device"] = c["device"];
       c["buildings"][1]["device"]["peak_tflops"] = json::object();
     },
     "/buildings/1/device/peak_tflops"},
    {"BuildingDevicesPerNodeZero", "cluster", [](json& c) { c["buildings"][0]["devices_per_node"] = 0; },
     "/buildings/0/devices_per_node"},
    {"ComputeSlowdownBelowOne", "cluster", [](json& c) { c["buildings"][2]["compute_slowdown"] = 0.5; },
     "/buildings/2/compute_slowdown"},
    {"BuildingLinkToAnUnknownBuilding", "cluster",
     [](json& c) {
       c["building_links"] =
           json::array({{{"buildings", {"bld-a", "bld-x"}}, {"bandwidth_gbps", 25}, {"latency_us", 250}}});
     },
     "/building_links/0/buildings/1"},
    {"BuildingLinkWithoutLatency", "cluster",
     [](json& c) {
       c["building_links"] = json::array({{{"buildings", {"bld-a", "bld-c"}}, {"bandwidth_gbps", 25}}});
     },
     "/building_links/0/latency_us"},
    {"TechnologyOnAnUnknownBuilding", "cluster",
     [](json& c) {
       c["network_technologies"][0]["buildings"] = {"bld-a", "bld-x"};
     },
     "/network_technologies/0/buildings/1"},
};

// gtest prints a parameter's bytes unless told otherwise.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

}  // namespace

class CheckRejects : public ::testing::TestWithParam<Case> {};

TEST_P(CheckRejects, ExitsTwoWithOneLineNamingFileAndField) {
  const Case& c = GetParam();
  TempDir t;
  json cluster = base_cluster(), model = base_model(), layout = base_layout();
  json& target = std::string(c.target) == "cluster" ? cluster : std::string(c.target) == "model" ? model : layout;
  c.mutate(target);
  std::string cf = t.write("cluster.json", cluster), mf = t.write("model.json", model),
              lf = t.write("layout.json", layout);
  auto r = run_sax("check " + cf + " " + mf + " " + lf);
  EXPECT_EQ(r.code, 2) << r.err;
  // The file named is the one at fault, except where a model change breaks a layout rule (EP on
  // a dense model, flash attention on fp32): the layout field is.
  const std::string name = c.name;
  std::string file =
      name == "EpOnDenseModel" || name == "FlashAttentionOnFp32Model" ? lf : t.file(std::string(c.target) + ".json");
  EXPECT_NE(r.err.find(file + ": " + c.path + ": expected"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << "nothing is printed for a failed check: " << r.out;
}

INSTANTIATE_TEST_SUITE_P(Rules, CheckRejects, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

// A sliding window with CP: the layout's field is at fault, and the model is named.
TEST(Check, SlidingWindowRefusesContextParallel) {
  TempDir t;
  const std::string lf = t.write("l.json", json{{"context_parallel_size", 2}});
  auto r = run_sax("check " + sax::test::preset_path("clusters/local-2bld.json") + " " +
                   sax::test::preset_path("models/swa-tiny.json") + " " + lf);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find(lf + ": /context_parallel_size: expected 1 for sliding-window model swa-tiny"),
            std::string::npos)
      << r.err;
  r = run_sax("check " + sax::test::preset_path("clusters/local-2bld.json") + " " +
              sax::test::preset_path("models/swa-tiny.json") + " " +
              t.write("l1.json", json{{"tensor_model_parallel_size", 2}}));
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(Check, BaseFilesOfTheRuleTableAreValid) {
  TempDir t;
  auto r = run_sax("check " + t.write("c.json", base_cluster()) + " " + t.write("m.json", base_model()) + " " +
                   t.write("l.json", base_layout()));
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("DP 6144"), std::string::npos) << r.out;  // 98304 / (TP 4 × PP 4)
}

TEST(Check, AllPresetsAreValid) {
  std::string dir = std::string(SAX_SOURCE_DIR) + "/configs/";
  auto r = run_sax("check " + dir + "clusters/*.json " + dir + "models/*.json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("world size      98304"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8.03 B total"), std::string::npos) << r.out;
}

TEST(Check, PresetLayoutsFitTheLocalTestbed) {
  std::string dir = std::string(SAX_SOURCE_DIR) + "/configs/";
  auto r = run_sax("check " + dir + "clusters/local-2bld.json " + dir + "models/gpt-tiny.json " + dir +
                   "layouts/local-tp2-pp2.json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("DP 1 (derived from world size 4)"), std::string::npos) << r.out;
  r = run_sax("check " + dir + "clusters/local-2bld.json " + dir + "models/moe-tiny.json " + dir +
              "layouts/local-ep2-dp4.json");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("DP 4"), std::string::npos) << r.out;
}

TEST(Check, FileErrors) {
  TempDir t;
  auto r = run_sax("check " + t.file("missing.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("missing.json: expected a readable file"), std::string::npos) << r.err;
  r = run_sax("check " + t.write_text("bad.json", "{\"num_layers\": 3,,}"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("bad.json: expected valid JSON"), std::string::npos) << r.err;
  // A directory: exit 1 with "basic_filebuf::underflow" before.
  r = run_sax("check " + t.path.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("expected a readable JSON file"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  r = run_sax("check " + t.write("what.json", json{{"hello", 1}}));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("what.json: expected a cluster"), std::string::npos) << r.err;
}

TEST(Cli, HelpListsTheDesignsSubcommands) {
  auto r = run_sax("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* sub :
       {"bench", "run", "launch", "calibrate", "explore", "predict", "validate", "regress", "trace", "check"})
    EXPECT_NE(r.out.find(std::string("  ") + sub + " "), std::string::npos) << sub << "\n" << r.out;
}

TEST(Cli, UnknownFlagsAndMissingSubcommandExitTwo) {
  EXPECT_EQ(run_sax("").code, 2);
  EXPECT_EQ(run_sax("check --frobnicate x.json").code, 2);
  EXPECT_EQ(run_sax("nonsense").code, 2);
}
