#include <gtest/gtest.h>

#include "spec/layout.hpp"
#include "spec/pipeline_layout.hpp"
#include "tests/support/presets.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using sax::test::preset_path;

namespace {
Model llama70() { return load_model(preset_path("models/llama3-70b.json")); }
Cluster h100() { return load_cluster(preset_path("clusters/h100-3bld.json")); }

// Returns the JSON path of the InputError a layout raises against a model and cluster, or "".
std::string error_path(const json& j, const Model& m, const Cluster& c) {
  try {
    validate_layout(test::layout_of(j), m, c, "l.json");
  } catch (const InputError& e) {
    return e.path();
  }
  return "";
}
}  // namespace

TEST(Layout, DefaultsFollowMegatron) {
  Layout l = test::layout_of(json::object({{"micro_batch_size", 1}}));
  EXPECT_EQ(l.tensor_model_parallel_size, 1);
  EXPECT_EQ(l.order_string(), "tp-cp-ep-dp-pp");
  EXPECT_EQ(l.schedule.pipeline, PipelineSchedule::one_f_one_b);
  EXPECT_EQ(l.recompute_granularity, Recompute::none);
}

TEST(Layout, DataParallelSizeIsDerivedFromWorld) {
  Layout l = test::layout_of(
      {{"tensor_model_parallel_size", 8}, {"pipeline_model_parallel_size", 4}, {"context_parallel_size", 2}});
  EXPECT_EQ(l.data_parallel_size(98304), 98304 / 64);
  EXPECT_EQ(l.size(Dim::dp, 98304), 1536);
}

TEST(Layout, EvenAndUnevenStageSplits) {
  Model m = llama70();  // 80 layers
  m.global_batch_size = 1536;
  Layout even = test::layout_of({{"pipeline_model_parallel_size", 8}});
  EXPECT_EQ(even.stage_layers(m), std::vector<std::int64_t>(8, 10));
  Layout uneven = test::layout_of({{"pipeline_model_parallel_size", 8},
                                   {"decoder_first_pipeline_num_layers", 3},
                                   {"decoder_last_pipeline_num_layers", 5}});
  auto s = uneven.stage_layers(m);
  ASSERT_EQ(s.size(), 8u);
  EXPECT_EQ(s.front(), 3);
  EXPECT_EQ(s.back(), 5);
  for (std::size_t i = 1; i < 7; ++i) EXPECT_EQ(s[i], 12);  // (80 - 8) / 6
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 8},
                        {"pipeline_model_parallel_size", 8},
                        {"decoder_first_pipeline_num_layers", 3},
                        {"decoder_last_pipeline_num_layers", 5},
                        {"micro_batch_size", 1}},
                       m, h100()),
            "");
}

TEST(Layout, ValidLayoutsPass) {
  Model m = llama70();
  m.global_batch_size = 6144;  // DP 768 × 8 micro-batches (a multiple of PP for interleaving)
  Cluster c = h100();
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 8},
                        {"pipeline_model_parallel_size", 8},
                        {"virtual_pipeline_model_parallel_size", 5},
                        {"schedule", {{"pipeline", "interleaved"}}},
                        {"context_parallel_size", 2},
                        {"micro_batch_size", 1}},
                       m, c),
            "");
}

TEST(Layout, EachRuleNamesItsField) {
  Model m = llama70();
  m.global_batch_size = 98304;  // one sequence per rank: only the rule under test breaks
  Cluster c = h100();
  // TP must divide heads (64) and query groups (8).
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 16}}, m, c), "/tensor_model_parallel_size");
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 3}}, m, c), "/tensor_model_parallel_size");
  // TP×CP×PP must divide the world (98304 = 2^15 × 3).
  EXPECT_EQ(error_path({{"pipeline_model_parallel_size", 5}}, m, c), "/pipeline_model_parallel_size");
  // Layers (80) must split over PP = 3: 80 % 3 != 0 (and 3 divides the world).
  EXPECT_EQ(error_path({{"pipeline_model_parallel_size", 3}}, m, c), "/pipeline_model_parallel_size");
  // VPP must divide each stage's layers (10 per stage).
  EXPECT_EQ(error_path({{"pipeline_model_parallel_size", 8},
                        {"virtual_pipeline_model_parallel_size", 3},
                        {"schedule", {{"pipeline", "interleaved"}}}},
                       m, c),
            "/virtual_pipeline_model_parallel_size");
  // Uneven stages that leave an uneven middle.
  EXPECT_EQ(error_path({{"pipeline_model_parallel_size", 8}, {"decoder_first_pipeline_num_layers", 4}}, m, c),
            "/decoder_first_pipeline_num_layers");
  // Dense model with EP.
  EXPECT_EQ(error_path({{"expert_model_parallel_size", 2}}, m, c), "/expert_model_parallel_size");
  // Global batch (98304) not divisible by micro-batch × DP (3 × 12288).
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 8}, {"micro_batch_size", 3}}, m, c), "/micro_batch_size");
  // Unknown network technology.
  EXPECT_EQ(error_path({{"schedule", {{"network_technology", "carrier-pigeon"}}}}, m, c),
            "/schedule/network_technology");
}

TEST(Layout, MoeRules) {
  Model m = load_model(preset_path("models/mixtral-8x7b.json"));  // 8 experts
  Cluster c = h100();
  m.global_batch_size = 98304;
  EXPECT_EQ(error_path({{"expert_model_parallel_size", 8},
                        {"tensor_model_parallel_size", 8},
                        {"pipeline_model_parallel_size", 4},
                        {"sequence_parallel", true}},
                       m, c),
            "");
  // Megatron: MoE with TP > 1 needs sequence parallelism, with or without EP.
  EXPECT_EQ(
      error_path(
          {{"expert_model_parallel_size", 8}, {"tensor_model_parallel_size", 8}, {"pipeline_model_parallel_size", 4}},
          m, c),
      "/sequence_parallel");
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 2}, {"pipeline_model_parallel_size", 4}}, m, c),
            "/sequence_parallel");
  EXPECT_EQ(error_path({{"expert_model_parallel_size", 8}, {"pipeline_model_parallel_size", 4}}, m, c), "");
  EXPECT_EQ(error_path({{"expert_model_parallel_size", 3}}, m, c), "/expert_model_parallel_size");
  // Parallel folding: EP over TP×CP×DP with an expert TP of its own.
  m.moe_ffn_hidden_size = 14336;
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 4},
                        {"sequence_parallel", true},
                        {"expert_model_parallel_size", 8},
                        {"expert_tensor_parallel_size", 1},
                        {"pipeline_model_parallel_size", 4}},
                       m, c),
            "");
  EXPECT_EQ(error_path({{"expert_tensor_parallel_size", 3}}, m, c), "/expert_tensor_parallel_size");  // 14336 % 3
  EXPECT_EQ(error_path({{"expert_tensor_parallel_size", 0}}, m, c), "/expert_tensor_parallel_size");
}

TEST(Layout, ExpertGridRules) {
  Model m = load_model(preset_path("models/mixtral-8x7b.json"));
  Cluster c = h100();
  m.global_batch_size = 98304;
  // Megatron asserts that both grids give the same pipeline groups: with pp not outermost,
  // as many ranks before pp in each (TP·CP = 4 dense, ETP = 1 expert).
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 4},
                        {"sequence_parallel", true},
                        {"expert_model_parallel_size", 8},
                        {"expert_tensor_parallel_size", 1},
                        {"pipeline_model_parallel_size", 4},
                        {"order", "tp-cp-pp-ep-dp"}},
                       m, c),
            "/order");
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 4},
                        {"sequence_parallel", true},
                        {"expert_model_parallel_size", 8},
                        {"pipeline_model_parallel_size", 4},
                        {"order", "tp-cp-pp-ep-dp"}},
                       m, c),
            "");
  // EP × ETP must divide a stage's ranks: 8 experts, 8 ranks a stage.
  Cluster small = c;
  small.buildings.resize(1);
  small.buildings[0].nodes = 1;
  EXPECT_EQ(error_path({{"tensor_model_parallel_size", 2},
                        {"sequence_parallel", true},
                        {"expert_model_parallel_size", 8},
                        {"micro_batch_size", 1}},
                       m, small),
            "/expert_model_parallel_size");
}

namespace {
// A layout's first fault as "path: expected", or "" when it reads.
std::string error_of(const json& j) {
  try {
    test::layout_of(j);
  } catch (const InputError& e) {
    return e.path() + ": " + e.expected();
  }
  return std::string();
}
}  // namespace

// Megatron's --data-parallel-sharding-strategy, with its --use-distributed-optimizer as optim; FSDP
// refused where sax would price another mechanism than the framework runs (PP, a non-overlapped
// sync), each fault one line naming the field.
TEST(Layout, DataParallelShardingStrategy) {
  EXPECT_EQ(test::layout_of(json::object()).data_parallel_sharding_strategy, DpSharding::no_shard);
  EXPECT_EQ(test::layout_of({{"use_distributed_optimizer", true}}).data_parallel_sharding_strategy, DpSharding::optim);
  const Layout f = test::layout_of({{"data_parallel_sharding_strategy", "optim_grads_params"}});
  EXPECT_TRUE(f.shards_parameters());
  EXPECT_TRUE(f.shards_optimizer());
  EXPECT_EQ(read_layout(to_json(f), "round trip").data_parallel_sharding_strategy, DpSharding::optim_grads_params);
  EXPECT_EQ(error_of({{"use_distributed_optimizer", true}, {"data_parallel_sharding_strategy", "optim_grads_params"}}),
            "");
  EXPECT_FALSE(test::layout_of(
                   {{"data_parallel_sharding_strategy", "optim_grads_params"}, {"fsdp_reshard_after_forward", false}})
                   .fsdp_reshard_after_forward);
  EXPECT_EQ(error_of({{"fsdp_reshard_after_forward", false}}).rfind("/fsdp_reshard_after_forward: true unless", 0), 0u);
  // HSDP: FSDP with the hierarchical sync.
  EXPECT_EQ(error_of({{"data_parallel_sharding_strategy", "optim_grads_params"},
                      {"schedule", {{"dp_sync", "hierarchical"}}}}),
            "");
  EXPECT_EQ(test::layout_of({{"data_parallel_sharding_strategy", "optim_grads"}}).data_parallel_sharding_strategy,
            DpSharding::optim_grads);
  for (const json& j :
       {json{{"data_parallel_sharding_strategy", "optim_grads_and_more"}}, json{{"data_parallel_sharding_strategy", 3}},
        json{{"data_parallel_sharding_strategy", "optim_grads"}, {"schedule", {{"dp_sync", "hierarchical"}}}},
        json{{"use_distributed_optimizer", true}, {"data_parallel_sharding_strategy", "no_shard"}},
        json{{"data_parallel_sharding_strategy", "optim_grads_params"}, {"pipeline_model_parallel_size", 2}},
        json{{"data_parallel_sharding_strategy", "optim_grads_params"}, {"schedule", {{"dp_sync", "blocking"}}}}}) {
    const std::string e = error_of(j);
    EXPECT_EQ(e.rfind("/data_parallel_sharding_strategy: ", 0), 0u) << j.dump() << " → " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_NE(error_of({{"data_parallel_sharding_strategy", "optim_grads_params"}, {"pipeline_model_parallel_size", 2}})
                .find("optim with pipeline_model_parallel_size 2"),
            std::string::npos);
}

// Megatron's --tp-comm-overlap: a boolean, and only with sequence parallelism (Megatron asserts
// it, after turning SP off at TP 1), refused when the file is read.
TEST(Layout, TpCommOverlapNeedsSequenceParallelism) {
  EXPECT_EQ(test::layout_of({{"tensor_model_parallel_size", 8}, {"sequence_parallel", true}}).tp_comm_overlap, false);
  EXPECT_EQ(error_of({{"tensor_model_parallel_size", 8}, {"sequence_parallel", true}, {"tp_comm_overlap", true}}), "");
  for (const json& j :
       {json{{"tp_comm_overlap", "yes"}}, json{{"tp_comm_overlap", 1}},
        json{{"tensor_model_parallel_size", 8}, {"tp_comm_overlap", true}},
        json{{"tensor_model_parallel_size", 8}, {"sequence_parallel", false}, {"tp_comm_overlap", true}},
        json{{"sequence_parallel", true}, {"tp_comm_overlap", true}}}) {
    const std::string e = error_of(j);
    EXPECT_EQ(e.rfind("/tp_comm_overlap: ", 0), 0u) << j.dump() << " → " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_NE(error_of({{"tensor_model_parallel_size", 8}, {"tp_comm_overlap", true}}).find("sequence_parallel"),
            std::string::npos);
  // A layout built in code reaches the same rule through validate_layout.
  Model m = llama70();
  m.global_batch_size = 98304;
  Layout l;
  l.tensor_model_parallel_size = 8;
  l.tp_comm_overlap = true;
  try {
    validate_layout(l, m, h100(), "l.json");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.path(), "/tp_comm_overlap");
  }
  l.sequence_parallel = true;
  EXPECT_NO_THROW(validate_layout(l, m, h100(), "l.json"));
}

// Megatron's overlap_p2p_comm: on by default, and only the interleaved schedule has it; a file
// asking for it with another schedule is refused at the field, and it round-trips.
TEST(Layout, OverlapP2pCommIsTheInterleavedSchedules) {
  const json interleaved = {{"pipeline_model_parallel_size", 2},
                            {"virtual_pipeline_model_parallel_size", 2},
                            {"schedule", {{"pipeline", "interleaved"}}}};
  EXPECT_TRUE(test::layout_of(interleaved).p2p_overlapped());
  json off = interleaved;
  off["overlap_p2p_comm"] = false;
  const Layout l = test::layout_of(off);
  EXPECT_FALSE(l.p2p_overlapped());
  EXPECT_EQ(to_json(l)["overlap_p2p_comm"], false);
  EXPECT_FALSE(test::layout_of(to_json(l)).p2p_overlapped());
  const json one_f_one_b = {{"pipeline_model_parallel_size", 2}};
  EXPECT_FALSE(test::layout_of(one_f_one_b).p2p_overlapped());
  EXPECT_FALSE(to_json(test::layout_of(one_f_one_b)).contains("overlap_p2p_comm"));
  json asked = one_f_one_b;
  asked["overlap_p2p_comm"] = false;
  EXPECT_NO_THROW(test::layout_of(asked));
  asked["overlap_p2p_comm"] = true;
  try {
    test::layout_of(asked);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.path(), "/overlap_p2p_comm");
    EXPECT_NE(e.expected().find("\"interleaved\""), std::string::npos) << e.expected();
  }
}

TEST(Layout, FieldErrorsNameTheField) {
  auto path_of = [](const json& j) {
    try {
      test::layout_of(j);
    } catch (const InputError& e) {
      return e.path();
    }
    return std::string();
  };
  EXPECT_EQ(path_of({{"tensor_model_parallel_size", -2}}), "/tensor_model_parallel_size");
  EXPECT_EQ(path_of({{"tensor_model_parallel_size", "8"}}), "/tensor_model_parallel_size");
  EXPECT_EQ(path_of({{"tensor_model_parallel_size", 2.5}}), "/tensor_model_parallel_size");
  EXPECT_EQ(path_of({{"sequence_parallel", 1}}), "/sequence_parallel");
  EXPECT_EQ(path_of({{"recompute_granularity", "some"}}), "/recompute_granularity");
  EXPECT_EQ(path_of({{"order", "tp-cp-dp-pp"}}), "/order");
  EXPECT_EQ(path_of({{"order", "tp-ep-cp-dp-pp"}}), "/order");   // ep must adjoin dp
  EXPECT_EQ(path_of({{"order", "tp-cp-ep-dp-pp-"}}), "/order");  // a trailing '-' is an empty sixth part
  EXPECT_EQ(path_of({{"order", "-tp-cp-ep-dp-pp"}}), "/order");
  EXPECT_EQ(path_of({{"order", "tp-cp-ep-dp-pp"}}), "");
  EXPECT_EQ(path_of({{"order", "tp-cp-dp-ep-pp"}}), "");
  EXPECT_EQ(path_of({{"schedule", {{"pipeline", "zigzag"}}}}), "/schedule/pipeline");
  EXPECT_EQ(path_of({{"schedule", {{"dp_sync", "lazy"}}}}), "/schedule/dp_sync");
  EXPECT_EQ(path_of({{"schedule", {{"pipline", "1f1b"}}}}), "/schedule/pipline");
  EXPECT_EQ(path_of({{"tensor_parallel", 2}}), "/tensor_parallel");
  EXPECT_EQ(path_of({{"virtual_pipeline_model_parallel_size", 2}}), "/virtual_pipeline_model_parallel_size");
  EXPECT_EQ(path_of({{"pipeline_model_parallel_size", 2}, {"virtual_pipeline_model_parallel_size", 2}}),
            "/schedule/pipeline");
}

TEST(Layout, RoundTripsThroughJson) {
  json j = {{"tensor_model_parallel_size", 4},
            {"pipeline_model_parallel_size", 4},
            {"virtual_pipeline_model_parallel_size", 2},
            {"order", "tp-cp-dp-ep-pp"},
            {"decoder_first_pipeline_num_layers", 4},
            {"recompute_granularity", "selective"},
            {"sequence_parallel", true},
            {"tp_comm_overlap", true},
            {"schedule", {{"pipeline", "interleaved"}, {"dp_sync", "hierarchical"}, {"network_technology", "x"}}}};
  Layout a = test::layout_of(j);
  json back = to_json(a);
  Layout b = test::layout_of(back);
  EXPECT_EQ(to_json(b), back);
  EXPECT_EQ(b.order_string(), "tp-cp-dp-ep-pp");
  EXPECT_EQ(b.decoder_first_pipeline_num_layers, 4);
  EXPECT_TRUE(b.tp_comm_overlap);
  EXPECT_EQ(back.at("tp_comm_overlap"), true);
}

// Megatron's pipeline_model_parallel_layout and account_for_*_in_pipeline_split: the layers of
// every virtual stage (virtual stage c·pp + i is chunk c of stage i).
namespace {
Model llama405() { return load_model(preset_path("models/llama3-405b.json")); }  // 126 layers
std::vector<std::int64_t> chunks(const json& j, const Model& m) { return test::layout_of(j).virtual_stage_layers(m); }
}  // namespace

TEST(PipelineLayout, ParsesMegatronSyntaxIntoVirtualStages) {
  Model m = llama70();
  m.num_layers = 5;
  // Commas are cosmetic; x*N and (…)*N unroll ("Ett|t|t|t|L"); the last stage holds the loss only.
  EXPECT_EQ(chunks({{"pipeline_model_parallel_size", 5}, {"pipeline_model_parallel_layout", "E,t*2|(t|)*2,t|L"}}, m),
            (std::vector<std::int64_t>{2, 1, 1, 1, 0}));
  // 4 stages × VPP 2, derived from the string as Megatron does; uneven chunks.
  m.num_layers = 10;
  const Layout l = test::layout_of({{"pipeline_model_parallel_size", 4},
                                    {"pipeline_model_parallel_layout", "Et|tt|t|tt|t|tt|t|L"},
                                    {"schedule", {{"pipeline", "interleaved"}}}});
  EXPECT_EQ(l.virtual_pipeline_model_parallel_size, 2);
  EXPECT_EQ(l.virtual_stage_layers(m), (std::vector<std::int64_t>{1, 2, 1, 2, 1, 2, 1, 0}));
  EXPECT_EQ(l.stage_layers(m), (std::vector<std::int64_t>{2, 4, 2, 2}));
  EXPECT_EQ(parse_pipeline_layout("Et*3|(tt|)*29,m|L").stages.size(), 32u);  // Megatron's own example
}

// Llama 3 405B on PP16 × VPP4 with the first and last stage one layer short: the account_for
// flags and the equivalent layout string give the same virtual stages.
TEST(PipelineLayout, Llama405bProductionSplitBothWays) {
  const Model m = llama405();
  const json base = {{"tensor_model_parallel_size", 8},
                     {"pipeline_model_parallel_size", 16},
                     {"virtual_pipeline_model_parallel_size", 4},
                     {"schedule", {{"pipeline", "interleaved"}}}};
  json flags = base, str = base;
  flags["account_for_embedding_in_pipeline_split"] = true;
  flags["account_for_loss_in_pipeline_split"] = true;
  str["pipeline_model_parallel_layout"] = "Et|(tt|)*62tL";
  std::vector<std::int64_t> want(64, 2);
  want.front() = want.back() = 1;
  EXPECT_EQ(chunks(flags, m), want);
  EXPECT_EQ(chunks(str, m), want);
  std::vector<std::int64_t> stages(16, 8);
  stages.front() = stages.back() = 7;
  EXPECT_EQ(test::layout_of(flags).stage_layers(m), stages);
  EXPECT_EQ(test::layout_of(str).stage_layers(m), stages);
  // The shipped layout file (TP8 CP1 PP16 as Meta's Table 4) against a batch DP × 16 micro-batches divides.
  Model big = m;
  big.global_batch_size = 768 * 16;
  const Layout prod = load_layout(preset_path("layouts/llama3-405b-production.json"));
  EXPECT_NO_THROW(validate_layout(prod, big, h100(), "prod.json"));
  // Its VPP 8: one layer per chunk, the first chunk the embedding's alone, the last the loss's.
  std::vector<std::int64_t> one(128, 1);
  one.front() = one.back() = 0;
  EXPECT_EQ(prod.virtual_stage_layers(m), one);
  EXPECT_EQ(prod.stage_layers(m), stages);
  // One flag alone: only its own virtual stage is short ((126 + 2) / 16 / 4 = 2 per chunk).
  json emb = base;
  emb["account_for_embedding_in_pipeline_split"] = true;
  emb["pipeline_model_parallel_size"] = 127;  // (126 + 1) / 127: 1 layer per stage, the first holds none
  emb["virtual_pipeline_model_parallel_size"] = 1;
  emb["schedule"]["pipeline"] = "1f1b";
  const auto e = chunks(emb, m);
  EXPECT_EQ(e.front(), 0);
  EXPECT_EQ(e.back(), 1);
}

namespace {
// The field an InputError names, from reading the layout or validating it against 405B on h100-3bld.
std::string field_of(const json& j) {
  Model m = llama405();
  m.global_batch_size = 768 * 16;
  try {
    validate_layout(test::layout_of(j), m, h100(), "l.json");
  } catch (const InputError& e) {
    return e.path();
  }
  return "";
}
json pp16(json extra) {
  json j = {{"tensor_model_parallel_size", 8},
            {"pipeline_model_parallel_size", 16},
            {"virtual_pipeline_model_parallel_size", 4},
            {"schedule", {{"pipeline", "interleaved"}}}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}
}  // namespace

TEST(PipelineLayout, BadStringsAndFlagsNameTheirField) {
  const std::string f = "/pipeline_model_parallel_layout";
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", "Et|(tt|)*62tL"}})), "");
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", "Et|(tt|)*61,m|tL"}})), f);  // MTP: not modelled
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", "Et|(tx|)*62tL"}})), f);     // unknown character
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", "t|(tt|)*62EtL"}})), f);     // E not first
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", "Et|(tt|)*62Lt"}})), f);     // L not last
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", "EEt|(tt|)*62tL"}})), f);    // two embeddings
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", "Et|(tt|)*61tL"}})), f);     // 63 stages over PP 16
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", "Et|(tt|)*62ttL"}})), f);    // 127 layers, not 126
  EXPECT_EQ(field_of(pp16(
                {{"pipeline_model_parallel_layout", "Et|(tt|)*62tL"}, {"virtual_pipeline_model_parallel_size", 2}})),
            "/virtual_pipeline_model_parallel_size");  // 64 stages are VPP 4
  EXPECT_EQ(field_of(pp16(
                {{"pipeline_model_parallel_layout", "Et|(tt|)*62tL"}, {"account_for_loss_in_pipeline_split", true}})),
            f);  // Megatron takes one of them
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", ""}})), f);
  EXPECT_EQ(field_of(pp16({{"pipeline_model_parallel_layout", "t*99999999999"}})), f);
  EXPECT_EQ(field_of(pp16({{"account_for_embedding_in_pipeline_split", true},
                           {"account_for_loss_in_pipeline_split", true},
                           {"decoder_first_pipeline_num_layers", 4}})),
            "/account_for_embedding_in_pipeline_split");
  // 126 + 1 = 127 does not split over 16 stages.
  EXPECT_EQ(field_of(pp16({{"account_for_loss_in_pipeline_split", true}})), "/account_for_loss_in_pipeline_split");
  // 128 / 16 = 8 per stage: VPP 3 does not divide it.
  EXPECT_EQ(field_of(pp16({{"account_for_embedding_in_pipeline_split", true},
                           {"account_for_loss_in_pipeline_split", true},
                           {"virtual_pipeline_model_parallel_size", 3}})),
            "/virtual_pipeline_model_parallel_size");
  // Without the flags 126 layers do not split over 16 stages.
  EXPECT_EQ(field_of(pp16({})), "/pipeline_model_parallel_size");
}

TEST(PipelineLayout, RoundTripsThroughJson) {
  const Layout a = test::layout_of(pp16({{"pipeline_model_parallel_layout", "Et|(tt|)*62tL"}}));
  const Layout b = read_layout(to_json(a), "b.json");
  EXPECT_EQ(b.pipeline_model_parallel_layout, a.pipeline_model_parallel_layout);
  const Layout c = test::layout_of(
      pp16({{"account_for_embedding_in_pipeline_split", true}, {"account_for_loss_in_pipeline_split", true}}));
  const Layout d = read_layout(to_json(c), "d.json");
  EXPECT_TRUE(d.account_for_embedding_in_pipeline_split && d.account_for_loss_in_pipeline_split);
}

// The link priority: parallelisms by name, each once; round-trips in kDims' order; anything else
// is refused at the field.
TEST(Layout, LinkPriorityNamesParallelisms) {
  const Layout l = test::layout_of({{"schedule", {{"link_priority", {"cp", "pp"}}}}});
  EXPECT_TRUE(l.schedule.ahead_on_link(Dim::pp));
  EXPECT_TRUE(l.schedule.ahead_on_link(Dim::cp));
  EXPECT_FALSE(l.schedule.ahead_on_link(Dim::dp));
  EXPECT_EQ(link_priority_name(l.schedule.link_priority), "cp,pp");
  EXPECT_EQ(to_json(l)["schedule"]["link_priority"], json({"cp", "pp"}));
  EXPECT_EQ(test::layout_of(to_json(l)).schedule.link_priority, l.schedule.link_priority);
  EXPECT_FALSE(to_json(test::layout_of(json::object())).at("schedule").contains("link_priority"));
  for (const json& bad : {json("pp"), json({"pp", "pp"}), json({"dp_grad"}), json({1})}) {
    try {
      test::layout_of({{"schedule", {{"link_priority", bad}}}});
      ADD_FAILURE() << "no error for " << bad;
    } catch (const InputError& e) {
      EXPECT_EQ(e.path(), "/schedule/link_priority") << bad;
    }
  }
}
