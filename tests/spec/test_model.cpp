#include <gtest/gtest.h>

#include "spec/model.hpp"
#include "tests/support/run.hpp"

using sax::load_model;
using sax::test::preset_path;

namespace {

struct Published {
  const char* file;
  double total;   // published parameter count
  double active;  // 0 = same as total
};

// Figures as the model cards and papers give them: Llama 3 (Meta, 2024), Mixtral of Experts
// (Mistral AI, 2024: 46.7B total, 12.9B active), GPT-3 (Brown et al., 2020: 175B).
const Published kPublished[] = {
    {"models/llama3-8b.json", 8.03e9, 0},    {"models/llama3-70b.json", 70.6e9, 0},
    {"models/llama3-405b.json", 405.8e9, 0}, {"models/mixtral-8x7b.json", 46.7e9, 12.9e9},
    {"models/gpt3-175b.json", 175.0e9, 0},
};

}  // namespace

class PresetParams : public ::testing::TestWithParam<Published> {};

TEST_P(PresetParams, MatchesPublishedFigureWithinOnePercent) {
  const Published p = GetParam();
  sax::Model m = load_model(preset_path(p.file));
  EXPECT_NEAR(m.params_total() / p.total, 1.0, 0.01) << m.name << " total " << m.params_total();
  const double active = p.active > 0 ? p.active : p.total;
  EXPECT_NEAR(m.params_active() / active, 1.0, 0.01) << m.name << " active " << m.params_active();
}

INSTANTIATE_TEST_SUITE_P(Presets, PresetParams, ::testing::ValuesIn(kPublished), [](const auto& info) {
  std::string s = info.param.file;
  s = s.substr(s.find('/') + 1);
  s = s.substr(0, s.find('.'));
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
});

TEST(Model, TinyPresetsAreSmallAndMoeTinyIsSparse) {
  sax::Model gpt = load_model(preset_path("models/gpt-tiny.json"));
  sax::Model moe = load_model(preset_path("models/moe-tiny.json"));
  EXPECT_LT(gpt.params_total(), 20e6);
  EXPECT_LT(moe.params_total(), 20e6);
  EXPECT_FALSE(gpt.is_moe());
  EXPECT_TRUE(moe.is_moe());
  EXPECT_LT(moe.params_active(), moe.params_total());
  EXPECT_EQ(moe.num_moe_layers(), moe.num_layers);
}

TEST(Model, TrainingFlopsFollowSixNPlusAttention) {
  // 6 × (non-embedding active weights + output layer) + 3 × 4·s·(heads·kv) per layer per token.
  sax::Model m = load_model(preset_path("models/llama3-8b.json"));
  const double h = m.hidden_size, q = m.num_attention_heads * m.kv_channels;
  const double kv = m.num_query_groups * m.kv_channels;
  const double layer_w = h * (q + 2 * kv) + q * h + 3 * h * m.ffn_hidden_size;
  const double expect = 6 * (m.num_layers * layer_w + h * m.vocab_size) + 3 * m.num_layers * 4.0 * m.seq_length * q;
  EXPECT_DOUBLE_EQ(m.training_flops_per_token(), expect);
  EXPECT_DOUBLE_EQ(m.training_flops_per_step(), expect * m.seq_length * m.global_batch_size);
  // At 8K context attention adds about a fifth to 6N for an 8B model...
  EXPECT_NEAR(m.training_flops_per_token() / (6 * m.params_total()), 1.2, 0.03);
  // ...while GPT-3 at 2K context stays within 3% of the 6N rule of thumb.
  sax::Model g = load_model(preset_path("models/gpt3-175b.json"));
  EXPECT_NEAR(g.training_flops_per_token() / (6 * g.params_total()), 1.0, 0.03);
}

// DeepSeek-V3 as its report gives it (arXiv 2412.19437: "671B total parameters with 37B activated
// for each token", the main model without its multi-token-prediction module) and Qwen3-235B-A22B
// (235B, 22B active): multi-head latent attention, dense first layers and a shared expert count.
TEST(Model, PublishedMoeModelsHaveTheirPublishedParameterCounts) {
  const sax::Model v3 = load_model(preset_path("models/published/deepseek-v3-gbs8192.json"));
  EXPECT_NEAR(v3.params_total() / 671e9, 1.0, 0.005);
  EXPECT_NEAR(v3.params_active() / 37e9, 1.0, 0.03);
  EXPECT_EQ(v3.query_key_head_dim(), 192);
  EXPECT_EQ(v3.value_head_dim(), 128);
  EXPECT_EQ(v3.attention_kv_heads(), 128);
  EXPECT_EQ(v3.attention_gather_width(), 1536 + 512 + 64);
  const sax::Model qwen = load_model(preset_path("models/published/qwen3-235b-a22b-gbs2048.json"));
  EXPECT_NEAR(qwen.params_total() / 235e9, 1.0, 0.005);
  EXPECT_NEAR(qwen.params_active() / 22e9, 1.0, 0.03);
  // The attention's FLOPs per token and layer: 2 per projection weight, and 2·s·heads·(192 + 128)
  // for the two products (unhalved, as every sax count).
  auto j = sax::test::preset("models/published/deepseek-v3-gbs8192.json");
  j.erase("moe_layer_freq"), j.erase("num_experts"), j.erase("moe_router_topk"), j.erase("moe_ffn_hidden_size");
  j.erase("moe_shared_expert_intermediate_size");
  const sax::Model dense = sax::read_model(j, "dense.json");
  const double h = 7168, H = 128, s = 4096;
  const double proj = h * 1536 + 1536 * H * 192 + h * (512 + 64) + 512 * H * (128 + 128) + H * 128 * h;
  const double per_layer = 2 * proj + 2 * s * H * (192 + 128) + 2 * 3 * h * 18432;
  EXPECT_NEAR(dense.forward_flops_per_token(), 61 * per_layer + 2 * h * 129280, 1.0);
}

namespace {
// The JSON path read_model names for `x`'s first fault ("" when it reads).
std::string fault(const nlohmann::json& x) {
  try {
    sax::read_model(x, "m.json");
  } catch (const sax::InputError& e) {
    return e.path();
  }
  return std::string();
}
}  // namespace

// MLA's fields are Megatron's and refused without it; its heads keep their own K and V.
TEST(Model, LatentAttentionFieldsAreChecked) {
  auto j = sax::test::preset("models/published/deepseek-v3-gbs8192.json");
  EXPECT_EQ(fault(j), "");
  nlohmann::json k = j;
  k["multi_latent_attention"] = false;
  EXPECT_EQ(fault(k), "/q_lora_rank");
  k = j;
  k["num_query_groups"] = 8;
  EXPECT_EQ(fault(k), "/num_query_groups");
  k = j;
  k["position_embedding_type"] = "learned_absolute";
  EXPECT_EQ(fault(k), "/position_embedding_type");
  k = j;
  k.erase("q_lora_rank");  // no query latent: Megatron's default
  EXPECT_EQ(sax::read_model(k, "m.json").q_lora_rank, 0);
  EXPECT_EQ(sax::read_model(k, "m.json").attention_gather_width(), 7168 + 512 + 64);
  EXPECT_EQ(sax::read_model(sax::to_json(sax::read_model(j, "m.json")), "m.json").params_total(),
            sax::read_model(j, "m.json").params_total());
}

// Sliding-window attention as Megatron names it: N in window_attn_skip_freq makes every N-th
// (1-based) layer a full one; a list says 1 = window; only causal windows; the learnable sinks
// are a parameter per head and layer.
TEST(Model, SlidingWindowFieldsAreMegatronsAndChecked) {
  auto j = sax::test::preset("models/swa-tiny.json");
  sax::Model m = sax::read_model(j, "m.json");
  EXPECT_EQ(m.attention_window(), 64);
  EXPECT_EQ(m.window_layer_pattern, (std::vector<bool>{true, false, true, false}));
  EXPECT_TRUE(m.attention_sink());
  j["window_attn_skip_freq"] = 3;
  m = sax::read_model(j, "m.json");
  EXPECT_EQ(m.window_layer_pattern, (std::vector<bool>{true, true, false, true}));  // layer 3 (1-based) full
  j["window_attn_skip_freq"] = {0, 0, 1, 1};
  EXPECT_EQ(sax::read_model(j, "m.json").num_window_layers(), 2);
  j.erase("window_attn_skip_freq");  // every layer windowed
  EXPECT_EQ(sax::read_model(j, "m.json").num_window_layers(), 4);
  // The sinks: one logit per head and layer, learnable only.
  nlohmann::json vanilla = j;
  vanilla["softmax_type"] = "off-by-one";
  EXPECT_DOUBLE_EQ(sax::read_model(j, "m.json").params_total() - sax::read_model(vanilla, "m.json").params_total(),
                   4.0 * 8);
  // Round trip.
  const sax::Model back = sax::read_model(sax::to_json(sax::read_model(j, "m.json")), "m.json");
  EXPECT_EQ(back.window_size, (std::vector<std::int64_t>{64, 0}));
  EXPECT_EQ(back.window_layer_pattern, std::vector<bool>(4, true));
  EXPECT_EQ(back.softmax_type, "learnable");
  for (const nlohmann::json& bad :
       {nlohmann::json{64, 8}, nlohmann::json{0, 0}, nlohmann::json{64}, nlohmann::json(64)}) {
    nlohmann::json k = j;
    k["window_size"] = bad;
    EXPECT_EQ(fault(k), "/window_size") << bad.dump();
  }
  nlohmann::json k = j;
  k["window_attn_skip_freq"] = {1, 2, 1, 1};
  EXPECT_EQ(fault(k), "/window_attn_skip_freq/1");
  k.erase("window_size");
  k["window_attn_skip_freq"] = 2;
  EXPECT_EQ(fault(k), "/window_attn_skip_freq");
  k = j;
  k["softmax_type"] = "sink";
  EXPECT_EQ(fault(k), "/softmax_type");
}

TEST(Model, MoeLayerFrequencyIntegerAndList) {
  auto j = sax::test::preset("models/moe-tiny.json");
  j["moe_layer_freq"] = 2;
  sax::Model m = sax::read_model(j, "t.json");
  EXPECT_EQ(m.num_moe_layers(), 2);
  EXPECT_TRUE(m.moe_layer_pattern[0]);
  EXPECT_FALSE(m.moe_layer_pattern[1]);
  j["moe_layer_freq"] = {0, 0, 0, 1};
  m = sax::read_model(j, "t.json");
  EXPECT_EQ(m.num_moe_layers(), 1);
  EXPECT_TRUE(m.moe_layer_pattern[3]);
  // A dense model with the same shape has fewer parameters than with one MoE layer.
  EXPECT_GT(m.params_total(), m.num_layers * m.dense_layer_params());
}

TEST(Model, RoundTripsThroughJson) {
  for (const char* f : {"models/mixtral-8x7b.json", "models/gpt3-175b.json", "models/moe-tiny.json"}) {
    sax::Model a = load_model(preset_path(f));
    sax::Model b = sax::read_model(sax::to_json(a), "roundtrip.json");
    EXPECT_EQ(a.params_total(), b.params_total()) << f;
    EXPECT_EQ(a.training_flops_per_step(), b.training_flops_per_step()) << f;
  }
}

TEST(Model, DefaultFfnWidthFollowsMegatron) {
  auto j = sax::test::preset("models/gpt-tiny.json");  // hidden 256
  j.erase("ffn_hidden_size");
  EXPECT_EQ(sax::read_model(j, "t.json").ffn_hidden_size, 1024);
  j["swiglu"] = true;
  EXPECT_EQ(sax::read_model(j, "t.json").ffn_hidden_size, 640);  // int(8·256/3 / 64)·64
}
