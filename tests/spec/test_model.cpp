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
