// A layout as Megatron-LM arguments and as torchtitan's TOML: the exact flags of hand-built
// layouts, what the frameworks cannot express said in comments, and `explore`/`predict --emit`
// on the command line (the best layout's degrees, bad --emit and --emit-rank exit 2).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "explorer/emit.hpp"
#include "tests/support/presets.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using namespace sax::explorer;

namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The arguments after pretrain_gpt.py, one per line (shell continuations stripped); every
// command line but the last must continue the command, and no comment may follow it.
std::vector<std::string> megatron_flags(const std::string& text) {
  std::vector<std::string> flags;
  const auto all = lines(text);
  bool in_command = false, ended = false;
  for (std::size_t i = 0; i < all.size(); ++i) {
    std::string line = all[i];
    if (line.empty() || line[0] == '#' || line.rfind("export ", 0) == 0 || line.rfind("unset ", 0) == 0) {
      EXPECT_TRUE(!in_command || ended) << "a comment inside the command breaks it:\n" << text;
      continue;
    }
    if (ended) break;  // explore's commented alternative aside, nothing follows the command
    const bool continued = line.size() > 2 && line.compare(line.size() - 2, 2, " \\") == 0;
    if (continued) line.resize(line.size() - 2);
    if (!continued) ended = true;
    if (line.rfind("torchrun ", 0) == 0) {
      in_command = true;
      continue;
    }
    EXPECT_TRUE(in_command) << line;
    if (line == "  pretrain_gpt.py") continue;
    EXPECT_EQ(line.rfind("  --", 0), 0u) << line;
    flags.push_back(line.substr(2));
  }
  EXPECT_TRUE(ended) << "the command does not end:\n" << text;
  return flags;
}

// The arguments up to the model's (--num-layers): the layout's.
std::vector<std::string> layout_flags(const std::string& text) {
  std::vector<std::string> all = megatron_flags(text);
  const auto model =
      std::find_if(all.begin(), all.end(), [](const std::string& f) { return f.rfind("--num-layers ", 0) == 0; });
  EXPECT_NE(model, all.end()) << text;
  return {all.begin(), model};
}

// TOML as section → key → value text (comments and blank lines dropped).
std::map<std::string, std::map<std::string, std::string>> toml(const std::string& text) {
  std::map<std::string, std::map<std::string, std::string>> out;
  std::string section;
  for (const std::string& line : lines(text)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      out[section];
      continue;
    }
    const auto eq = line.find(" = ");
    EXPECT_NE(eq, std::string::npos) << line;
    EXPECT_FALSE(section.empty()) << "a key outside a section: " << line;
    EXPECT_EQ(out[section].count(line.substr(0, eq)), 0u) << "a key twice: " << line;
    out[section][line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

// gpt-tiny on local-2bld (4 ranks, 2 per building): TP2 PP2 interleaved ×2, everything on.
Layout tp2_pp2_vpp2() {
  Layout l;
  l.tensor_model_parallel_size = 2;
  l.pipeline_model_parallel_size = 2;
  l.virtual_pipeline_model_parallel_size = 2;
  l.micro_batch_size = 2;
  l.sequence_parallel = true;
  l.recompute_granularity = Recompute::full;
  l.data_parallel_sharding_strategy = DpSharding::optim;
  l.schedule.pipeline = PipelineSchedule::interleaved;
  l.schedule.dp_sync = DpSync::overlapped;
  return l;
}

}  // namespace

TEST(Emit, MegatronFlagsOfAHandBuiltLayout) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  const Layout l = tp2_pp2_vpp2();
  ASSERT_NO_THROW(validate_layout(l, m, c, "hand-built"));
  const std::string text = megatron_args(l, m, c);
  const std::vector<std::string> expected = {"--tensor-model-parallel-size 2",
                                             "--pipeline-model-parallel-size 2",
                                             "--context-parallel-size 1",
                                             "--expert-model-parallel-size 1",
                                             "--num-virtual-stages-per-pipeline-rank 2",
                                             "--micro-batch-size 2",
                                             "--global-batch-size 16",
                                             "--sequence-parallel",
                                             "--recompute-granularity full",
                                             "--recompute-method uniform",
                                             "--recompute-num-layers 1",
                                             "--use-distributed-optimizer",
                                             "--overlap-grad-reduce",
                                             "--overlap-param-gather",
                                             "--attention-backend local"};  // fp32: auto is local
  EXPECT_EQ(layout_flags(text), expected) << text;
  EXPECT_EQ(text.find("cannot express"), std::string::npos) << text;
  EXPECT_EQ(emit(EmitFormat::megatron, l, m, c), text);
  // The model as sax holds it, and the environment TP needs; fp32 is Megatron's default.
  const std::vector<std::string> all = megatron_flags(text);
  for (const char* f :
       {"--num-layers 4", "--hidden-size 256", "--ffn-hidden-size 1024", "--num-attention-heads 8", "--seq-length 256",
        "--max-position-embeddings 256", "--position-embedding-type learned_absolute", "--normalization LayerNorm",
        "--hidden-dropout 0.1"})
    EXPECT_EQ(std::count(all.begin(), all.end(), f), 1) << f << "\n" << text;
  for (const char* f : {"--bf16", "--fp16", "--swiglu", "--group-query-attention", "--num-experts"})
    EXPECT_EQ(std::count(all.begin(), all.end(), f), 0) << f << "\n" << text;
  EXPECT_NE(text.find("\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\ntorchrun --nnodes 2 --nproc-per-node 2 "),
            std::string::npos)
      << text;
}

// bf16 gradients are Megatron-LM's --grad-reduce-in-bf16; torchtitan, which reduces in float32,
// says so instead of emitting a key.
TEST(Emit, Bf16GradientsAsTheFrameworksSayThem) {
  const Cluster c = test::preset_cluster("h200-1node");
  const Model m = test::preset_model("llama3-8b");
  Layout l;
  l.tensor_model_parallel_size = 2;  // DP 4
  l.grad_reduce_in_bf16 = true;
  ASSERT_NO_THROW(validate_layout(l, m, c, "hand-built"));
  const auto flags = megatron_flags(megatron_args(l, m, c));
  EXPECT_EQ(std::count(flags.begin(), flags.end(), "--grad-reduce-in-bf16"), 1);
  EXPECT_NE(emit(EmitFormat::torchtitan, l, m, c).find("# bf16 gradients"), std::string::npos);
  l.grad_reduce_in_bf16 = false;
  const auto plain = megatron_flags(megatron_args(l, m, c));
  EXPECT_EQ(std::count(plain.begin(), plain.end(), "--grad-reduce-in-bf16"), 0);
}

// Optimizer state below fp32 is Megatron-LM's precision-aware optimizer; weights updated in
// place (no main copy) are not a Megatron-LM choice and torchtitan keeps fp32 states: both say so.
TEST(Emit, OptimizerStateDtypesAsTheFrameworksSayThem) {
  const Cluster c = test::preset_cluster("h200-1node");
  const Model m = test::preset_model("llama3-8b");
  Layout l;
  l.tensor_model_parallel_size = 2;
  l.data_parallel_sharding_strategy = DpSharding::optim;
  l.optimizer_precision = {DType::fp16, DType::bf16, DType::bf16};
  ASSERT_NO_THROW(validate_layout(l, m, c, "hand-built"));
  auto count = [](const std::string& text, const std::string& flag) {
    const auto flags = megatron_flags(text);
    return std::count_if(flags.begin(), flags.end(),
                         [&](const std::string& f) { return f == flag || f.rfind(flag + " ", 0) == 0; });
  };
  std::string text = megatron_args(l, m, c);
  for (const char* f : {"--use-precision-aware-optimizer", "--main-params-dtype fp16", "--exp-avg-dtype bf16",
                        "--exp-avg-sq-dtype bf16"})
    EXPECT_EQ(count(text, f), 1) << f << "\n" << text;
  EXPECT_EQ(text.find("# main_params_dtype"), std::string::npos) << text;
  EXPECT_NE(emit(EmitFormat::torchtitan, l, m, c).find("# optimizer state below fp32"), std::string::npos);
  l.optimizer_precision.main_params = DType::bf16;  // the weights' own: no main copy
  text = megatron_args(l, m, c);
  EXPECT_EQ(count(text, "--main-params-dtype"), 0) << text;
  EXPECT_NE(text.find("# main_params_dtype bf16"), std::string::npos) << text;
  l.data_parallel_sharding_strategy = DpSharding::no_shard;
  EXPECT_NE(megatron_args(l, m, c).find("# optimizer state below fp32 without the distributed optimizer"),
            std::string::npos);
  l.optimizer_precision = {};
  EXPECT_EQ(count(megatron_args(l, m, c), "--use-precision-aware-optimizer"), 0);
}

TEST(Emit, MegatronRankOrders) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  Layout l;
  l.pipeline_model_parallel_size = 2;  // DP 2
  l.micro_batch_size = 2;
  auto flags_of = [&](std::array<Dim, 5> order) {
    l.order = order;
    EXPECT_NO_THROW(validate_layout(l, m, c, "hand-built")) << l.order_string();
    return megatron_args(l, m, c);
  };
  // Megatron's default; TP, CP and EP of size 1 may sit anywhere.
  std::string text = flags_of({Dim::cp, Dim::ep, Dim::dp, Dim::tp, Dim::pp});
  auto flags = megatron_flags(text);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), "--use-tp-pp-dp-mapping"), 0) << text;
  EXPECT_EQ(text.find("cannot express"), std::string::npos) << text;
  // PP inside DP: Megatron's tp-cp-ep-pp-dp.
  text = flags_of({Dim::tp, Dim::cp, Dim::ep, Dim::pp, Dim::dp});
  flags = megatron_flags(text);
  EXPECT_EQ(std::count(flags.begin(), flags.end(), "--use-tp-pp-dp-mapping"), 1) << text;
  EXPECT_EQ(text.find("cannot express"), std::string::npos) << text;
  // TP2 outside PP: no Megatron order; the arguments still come, after the comment.
  l.tensor_model_parallel_size = 2;  // DP 1
  text = flags_of({Dim::pp, Dim::tp, Dim::cp, Dim::ep, Dim::dp});
  flags = megatron_flags(text);
  EXPECT_NE(text.find("# rank order pp-tp-cp-ep-dp: Megatron-LM cannot express it"), std::string::npos) << text;
  EXPECT_EQ(std::count(flags.begin(), flags.end(), "--tensor-model-parallel-size 2"), 1) << text;
  EXPECT_EQ(std::count(flags.begin(), flags.end(), "--use-tp-pp-dp-mapping"), 0) << text;
  EXPECT_NE(torchtitan_toml(l, m, c).find("# rank order pp-tp-cp-ep-dp: torchtitan"), std::string::npos);
}

// Uneven stages, zero bubble and a hierarchical sync: real flags where Megatron has them,
// comments where it has none (and no invented flag).
TEST(Emit, WhatTheFrameworksLackIsACommentNotAFlag) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  Layout l;
  l.pipeline_model_parallel_size = 2;
  l.decoder_first_pipeline_num_layers = 1;
  l.decoder_last_pipeline_num_layers = 3;
  l.order = {Dim::tp, Dim::cp, Dim::ep, Dim::pp, Dim::dp};  // DP spans the two buildings
  l.schedule.pipeline = PipelineSchedule::zero_bubble;
  l.schedule.dp_sync = DpSync::hierarchical;
  l.recompute_granularity = Recompute::selective;
  ASSERT_NO_THROW(validate_layout(l, m, c, "hand-built"));
  const std::string text = megatron_args(l, m, c);
  const auto flags = megatron_flags(text);
  for (const char* f : {"--decoder-first-pipeline-num-layers 1", "--decoder-last-pipeline-num-layers 3",
                        "--recompute-granularity selective", "--use-tp-pp-dp-mapping"})
    EXPECT_EQ(std::count(flags.begin(), flags.end(), f), 1) << f << "\n" << text;
  for (const std::string& f : flags) {
    EXPECT_EQ(f.find("overlap"), std::string::npos) << f;
    EXPECT_EQ(f.find("bubble"), std::string::npos) << f;
    EXPECT_EQ(f.find("recompute-method"), std::string::npos) << f;
  }
  EXPECT_NE(text.find("Megatron-LM core has no zero-bubble schedule flag"), std::string::npos) << text;
  EXPECT_NE(text.find("--num-distributed-optimizer-instances 2"), std::string::npos) << text;

  const auto t = toml(torchtitan_toml(l, m, c));
  // torchtitan counts the embedding and output as layers: stage 0 is 2 short of 3.
  EXPECT_EQ(t.at("parallelism").at("pipeline_parallel_layers_per_stage"), "3");
  EXPECT_EQ(t.at("parallelism").at("pipeline_parallel_first_stage_less_layers"), "2");
  EXPECT_EQ(t.at("parallelism").at("pipeline_parallel_last_stage_less_layers"), "0");
  EXPECT_EQ(t.at("parallelism").at("pipeline_parallel_schedule"), "\"1F1B\"");
  EXPECT_EQ(t.at("activation_checkpoint").at("mode"), "\"selective\"");
  const std::string tt = torchtitan_toml(l, m, c);
  EXPECT_NE(tt.find("# schedule zero_bubble"), std::string::npos) << tt;
  EXPECT_NE(tt.find("# DP sync hierarchical"), std::string::npos) << tt;
}

TEST(Emit, TorchtitanKeys) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  const std::string text = torchtitan_toml(tp2_pp2_vpp2(), m, c);
  const auto t = toml(text);
  // Every key is one of torchtitan's JobConfig (torchtitan/config/job_config.py, v0.2.2, as
  // scripts/framework_args.py read it; tests/frameworks checks every preset's the same way).
  const auto known = nlohmann::json::parse(
      test::slurp(std::string(SAX_SOURCE_DIR) + "/tests/data/frameworks/torchtitan_v0.2.2.json"))["sections"];
  for (const auto& [section, keys] : t)
    for (const auto& [k, v] : keys) EXPECT_TRUE(known.at(section).contains(k)) << section << "." << k;
  // gpt-tiny is no llama3 flavor: named for itself, with what to register said.
  EXPECT_EQ(t.at("model").at("name"), "\"llama3\"");
  EXPECT_EQ(t.at("model").at("flavor"), "\"gpt-tiny\"");
  EXPECT_NE(text.find("# model: torchtitan v0.2.2 has no llama3 flavor of gpt-tiny's dimensions"), std::string::npos)
      << text;
  EXPECT_EQ(t.at("training").at("mixed_precision_param"), "\"float32\"");  // an fp32 model
  const std::map<std::string, std::map<std::string, std::string>> expected = {
      {"parallelism",
       {{"data_parallel_replicate_degree", "1"},
        {"data_parallel_shard_degree", "1"},
        {"tensor_parallel_degree", "2"},
        {"context_parallel_degree", "1"},
        {"pipeline_parallel_degree", "2"},
        {"pipeline_parallel_schedule", "\"Interleaved1F1B\""},
        {"pipeline_parallel_microbatch_size", "2"},
        {"pipeline_parallel_layers_per_stage", "1"},
        {"pipeline_parallel_first_stage_less_layers", "0"},
        {"pipeline_parallel_last_stage_less_layers", "0"},
        {"enable_async_tensor_parallel", "false"}}},
      {"activation_checkpoint", {{"mode", "\"full\""}}}};
  for (const auto& [section, keys] : expected) EXPECT_EQ(t.at(section), keys) << section << "\n" << text;
  for (const auto& [k, v] :
       std::map<std::string, std::string>{{"local_batch_size", "16"}, {"global_batch_size", "16"}, {"seq_len", "256"}})
    EXPECT_EQ(t.at("training").at(k), v) << k;

  // Pure DP without the distributed optimizer is torchtitan's DDP, gradients accumulated over
  // micro-batches of local_batch_size.
  Layout dp4;
  dp4.micro_batch_size = 2;
  ASSERT_NO_THROW(validate_layout(dp4, m, c, "dp4"));
  const auto d = toml(torchtitan_toml(dp4, m, c));
  EXPECT_EQ(d.at("parallelism").at("data_parallel_replicate_degree"), "4");
  EXPECT_EQ(d.at("parallelism").at("data_parallel_shard_degree"), "1");
  EXPECT_EQ(d.at("parallelism").count("pipeline_parallel_schedule"), 0u);
  EXPECT_EQ(d.at("training").at("local_batch_size"), "2");
  EXPECT_EQ(d.at("activation_checkpoint").at("mode"), "\"none\"");
}

// tp_comm_overlap: Megatron's --tp-comm-overlap after --sequence-parallel (which it needs), and
// torchtitan's async TP with the [compile] section torchtitan refuses it without (v0.2.2:
// torchtitan/distributed/tensor_parallel.py, maybe_enable_async_tp).
TEST(Emit, TpCommOverlapIsMegatronsFlagAndTorchtitansAsyncTp) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  Layout l = tp2_pp2_vpp2();
  const auto off = megatron_flags(megatron_args(l, m, c));
  EXPECT_EQ(std::count(off.begin(), off.end(), "--tp-comm-overlap"), 0) << megatron_args(l, m, c);
  EXPECT_EQ(toml(torchtitan_toml(l, m, c)).count("compile"), 0u);
  l.tp_comm_overlap = true;
  ASSERT_NO_THROW(validate_layout(l, m, c, "hand-built"));
  const std::string text = megatron_args(l, m, c);
  const auto on = megatron_flags(text);
  const auto sp = std::find(on.begin(), on.end(), "--sequence-parallel");
  ASSERT_NE(sp, on.end()) << text;
  ASSERT_NE(sp + 1, on.end()) << text;
  EXPECT_EQ(*(sp + 1), "--tp-comm-overlap") << text;
  EXPECT_EQ(on.size(), off.size() + 1) << text;
  EXPECT_NE(lines(text).front().find("TP overlap"), std::string::npos) << text;
  const auto t = toml(torchtitan_toml(l, m, c));
  EXPECT_EQ(t.at("parallelism").at("enable_async_tensor_parallel"), "true");
  const std::map<std::string, std::string> compile = {{"enable", "true"}, {"components", "[\"model\", \"loss\"]"}};
  EXPECT_EQ(t.at("compile"), compile);
}

// Megatron-LM overlaps the interleaved schedule's pipeline receives by default: a layout that
// receives in place says --no-overlap-p2p-communication; one that overlaps says nothing.
TEST(Emit, PipelineReceivesInPlaceAreMegatronsNoOverlapFlag) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  Layout l = tp2_pp2_vpp2();
  const auto on = megatron_flags(megatron_args(l, m, c));
  EXPECT_EQ(std::count(on.begin(), on.end(), "--no-overlap-p2p-communication"), 0) << megatron_args(l, m, c);
  l.overlap_p2p_comm = false;
  const auto off = megatron_flags(megatron_args(l, m, c));
  EXPECT_EQ(std::count(off.begin(), off.end(), "--no-overlap-p2p-communication"), 1) << megatron_args(l, m, c);
  EXPECT_EQ(off.size(), on.size() + 1);
}

TEST(EmitCli, ExploreEmitsTheBestLayoutOfTheTable) {
  test::TempDir t;
  const std::string inputs = "explore --cluster " + test::preset_path("clusters/local-2bld.json") + " --model " +
                             test::preset_path("models/gpt-tiny.json");
  const auto table = test::run_sax(inputs + " --top 3 --json " + t.file("r.json"));
  ASSERT_EQ(table.code, 0) << table.err;
  const auto j = nlohmann::json::parse(test::slurp(t.file("r.json")));
  ASSERT_GE(j["candidates"].size(), 2u);
  for (std::size_t rank : {1u, 2u}) {
    const auto& best = j["candidates"][rank - 1]["layout"];
    const std::string tp = std::to_string(best["tensor_model_parallel_size"].get<int>()),
                      pp = std::to_string(best["pipeline_model_parallel_size"].get<int>());
    // The table's row shows the same degrees.
    const std::string row = "\n  " + std::to_string(rank) + " ";
    const auto at = table.out.find(row);
    ASSERT_NE(at, std::string::npos) << table.out;
    const std::string line = table.out.substr(at + 1, table.out.find('\n', at + 1) - at - 1);
    EXPECT_NE(line.find("TP" + tp + " "), std::string::npos) << line;
    EXPECT_NE(line.find("PP" + pp), std::string::npos) << line;

    const auto r =
        test::run_sax(inputs + " --top 3 --emit megatron" + (rank > 1 ? " --emit-rank " + std::to_string(rank) : ""));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.find("candidates:"), std::string::npos) << "the table is not printed with --emit:\n" << r.out;
    const auto flags = megatron_flags(r.out);
    EXPECT_EQ(std::count(flags.begin(), flags.end(), "--tensor-model-parallel-size " + tp), 1) << r.out;
    EXPECT_EQ(std::count(flags.begin(), flags.end(), "--pipeline-model-parallel-size " + pp), 1) << r.out;
  }
  const auto r = test::run_sax(inputs + " --emit torchtitan");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto tt = toml(r.out);
  EXPECT_EQ(tt.at("parallelism").at("tensor_parallel_degree"),
            std::to_string(j["candidates"][0]["layout"]["tensor_model_parallel_size"].get<int>()));

  const auto p = test::run_sax("predict --cluster " + test::preset_path("clusters/local-2bld.json") + " --model " +
                               test::preset_path("models/gpt-tiny.json") + " --layout " +
                               test::preset_path("layouts/local-tp2-pp2.json") + " --emit megatron");
  ASSERT_EQ(p.code, 0) << p.err;
  const auto pf = megatron_flags(p.out);
  EXPECT_EQ(std::count(pf.begin(), pf.end(), "--tensor-model-parallel-size 2"), 1) << p.out;
  EXPECT_EQ(std::count(pf.begin(), pf.end(), "--sequence-parallel"), 1) << p.out;
}

TEST(EmitCli, BadEmitAndEmitRankExitTwoNamingTheFlag) {
  test::TempDir t;
  const std::string inputs = " --cluster " + test::preset_path("clusters/local-2bld.json") + " --model " +
                             test::preset_path("models/gpt-tiny.json");
  const std::string explore = "explore" + inputs;
  // More ranks than the layouts that fit: the whole feasible list, one past its end.
  const auto all = test::run_sax(explore + " --top 100000 --json " + t.file("all.json"));
  ASSERT_EQ(all.code, 0) << all.err;
  const auto feasible = nlohmann::json::parse(test::slurp(t.file("all.json")))["candidates"].size();
  ASSERT_LT(feasible, 100000u);
  struct Case {
    std::string args, needle;
  };
  for (const Case& k : std::vector<Case>{
           {explore + " --emit deepspeed", "--emit: expected megatron or torchtitan, got \"deepspeed\""},
           {explore + " --emit megatron --emit-rank 0", "--emit-rank"},
           {explore + " --emit megatron --emit-rank -1", "--emit-rank"},
           {explore + " --emit megatron --emit-rank 11", "--emit-rank"},  // beyond --top 10
           {explore + " --emit torchtitan --top 3 --emit-rank 4", "--emit-rank"},
           {explore + " --emit megatron --top 100000 --emit-rank " + std::to_string(feasible + 1), "--emit-rank"},
           {explore + " --emit-rank 2", "--emit-rank"},  // without --emit
           {"predict" + inputs + " --layout " + test::preset_path("layouts/local-tp2-pp2.json") + " --emit titan",
            "--emit: expected megatron or torchtitan"},
           {explore + " --framework megatron",
            "--framework: expected megatron-core, torchtitan or any, got \"megatron\""},
           {"predict" + inputs + " --layout " + test::preset_path("layouts/local-tp2-pp2.json") + " --framework x",
            "--framework: expected"},
           {"codesign" + inputs + " --framework deepspeed", "--framework: expected"}}) {
    const auto r = test::run_sax(k.args);
    EXPECT_EQ(r.code, 2) << k.args << "\n" << r.err;
    EXPECT_NE(r.err.find(k.needle), std::string::npos) << k.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(r.out.empty()) << k.args << " printed before failing:\n" << r.out;
  }
}

// --emit prints the table's #1 whatever the framework; where Megatron-LM would run it otherwise
// (zero bubble, which it lacks), the best it runs as priced follows commented out, and stderr
// says so. --technology pins the network: every row on it.
TEST(EmitCli, EmitIsTheTablesPickAndTheFrameworksBestFollows) {
  test::TempDir t;
  const std::string inputs = "explore --cluster " + test::preset_path("clusters/h100-3bld.json") + " --model " +
                             test::preset_path("models/llama3-70b.json");
  const auto table = test::run_sax(inputs + " --top 1 --json " + t.file("r.json"));
  ASSERT_EQ(table.code, 0) << table.err;
  const auto best = nlohmann::json::parse(test::slurp(t.file("r.json")))["candidates"][0]["layout"];
  ASSERT_EQ(best["schedule"]["pipeline"], "zero_bubble") << "the case needs a #1 Megatron-LM cannot run: " << best;
  const auto r = test::run_sax(inputs + " --emit megatron");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto first = lines(r.out).front();
  EXPECT_NE(first.find(", zero_bubble, "), std::string::npos) << first;
  EXPECT_NE(first.find("TP" + std::to_string(best["tensor_model_parallel_size"].get<int>()) + " "), std::string::npos);
  const auto alt = r.out.find("\n# ---- the table's #1 (");
  ASSERT_NE(alt, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("## Megatron-LM pretrain_gpt.py command", alt), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", 1f1b, ", alt), std::string::npos) << r.out.substr(alt);
  EXPECT_NE(r.out.find("\n#   --tensor-model-parallel-size ", alt), std::string::npos) << r.out.substr(alt);
  EXPECT_NE(r.err.find("the table's #1 runs otherwise than priced in megatron-core"), std::string::npos) << r.err;
  // Within the framework, the pick is its own best: nothing follows.
  const auto within = test::run_sax(inputs + " --emit megatron --framework megatron-core");
  ASSERT_EQ(within.code, 0) << within.err;
  EXPECT_EQ(within.out.find("# ---- "), std::string::npos) << within.out;
  EXPECT_NE(lines(within.out).front().find(", 1f1b, "), std::string::npos) << within.out;

  const auto own = test::run_sax(inputs + " --top 5 --technology cluster --json " + t.file("own.json"));
  ASSERT_EQ(own.code, 0) << own.err;
  // Parsed into a name first: a range-for over a member of a temporary reads it after it is freed.
  const nlohmann::json ranked = nlohmann::json::parse(test::slurp(t.file("own.json")));
  for (const auto& x : ranked["candidates"])
    EXPECT_EQ(x["layout"]["schedule"].value("network_technology", ""), "") << x["layout"];
  const auto dwdm = test::run_sax(inputs + " --top 5 --technology metro-dwdm-40km --json " + t.file("d.json"));
  ASSERT_EQ(dwdm.code, 0) << dwdm.err;
  const auto rows = nlohmann::json::parse(test::slurp(t.file("d.json")))["candidates"];
  ASSERT_FALSE(rows.empty());
  for (const auto& x : rows) EXPECT_EQ(x["layout"]["schedule"]["network_technology"], "metro-dwdm-40km") << x["layout"];
  const auto bad = test::run_sax(inputs + " --technology nope");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--technology: expected one of cluster, "), std::string::npos) << bad.err;
}
