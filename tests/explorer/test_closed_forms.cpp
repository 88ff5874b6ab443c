// Closed forms: bubble fractions by schedule, FLOPs summing to the model's training FLOPs, and
// message counts and bytes worked out by hand for small layouts (workload/README.md).
#include <gtest/gtest.h>

#include "explorer/closed_forms.hpp"
#include "spec/groups.hpp"
#include "tests/support/presets.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using namespace sax::explorer;

namespace {
Cluster h100() { return read_cluster(test::preset("clusters/h100-3bld.json"), "h100-3bld.json"); }
}  // namespace

TEST(ClosedForms, BubbleFractionsAreTheScheduleFormulas) {
  Layout l;
  l.pipeline_model_parallel_size = 8;
  for (std::int64_t m : {8, 16, 64}) {
    l.schedule.pipeline = PipelineSchedule::gpipe;
    EXPECT_DOUBLE_EQ(bubble_fraction(l, m), 7.0 / m);
    l.schedule.pipeline = PipelineSchedule::one_f_one_b;
    EXPECT_DOUBLE_EQ(bubble_fraction(l, m), 7.0 / m);
    l.schedule.pipeline = PipelineSchedule::interleaved;
    l.virtual_pipeline_model_parallel_size = 4;
    EXPECT_DOUBLE_EQ(bubble_fraction(l, m), 7.0 / (4.0 * m));
    l.virtual_pipeline_model_parallel_size = 1;
    l.schedule.pipeline = PipelineSchedule::zero_bubble;
    EXPECT_DOUBLE_EQ(bubble_fraction(l, m), 7.0 / (3.0 * m));
  }
  l.pipeline_model_parallel_size = 1;
  l.schedule.pipeline = PipelineSchedule::one_f_one_b;
  EXPECT_DOUBLE_EQ(bubble_fraction(l, 4), 0.0);
}

// Over all ranks, forward + backward FLOPs equal Model::training_flops_per_step (the contract's
// sum check), for dense and MoE models, uneven stages and interleaving.
TEST(ClosedForms, FlopsSumToTheModelsTrainingFlops) {
  const Cluster c = h100();
  struct Case {
    std::string model;
    std::int64_t tp, cp, pp, vpp, ep, first, last;
  };
  for (const Case& k : std::vector<Case>{{"llama3-405b", 8, 1, 12, 1, 1, 8, 8},
                                         {"llama3-70b", 8, 2, 8, 2, 1, 0, 0},
                                         {"gpt3-175b", 4, 1, 16, 3, 1, 0, 0},
                                         {"mixtral-8x7b", 2, 2, 4, 1, 8, 0, 0}}) {
    const Model m = test::preset_model(k.model);
    Layout l;
    l.tensor_model_parallel_size = k.tp;
    l.context_parallel_size = k.cp;
    l.pipeline_model_parallel_size = k.pp;
    l.virtual_pipeline_model_parallel_size = k.vpp;
    l.expert_model_parallel_size = k.ep;
    l.sequence_parallel = k.tp > 1;  // Megatron requires SP for MoE with TP > 1
    l.decoder_first_pipeline_num_layers = k.first;
    l.decoder_last_pipeline_num_layers = k.last;
    l.schedule.pipeline = k.vpp > 1 ? PipelineSchedule::interleaved : PipelineSchedule::one_f_one_b;
    l.micro_batch_size = 1;
    // A world the layout divides with a DP that divides the batch: use a cluster slice.
    Cluster s = c;
    const std::int64_t dp = 16;
    const std::int64_t world = k.tp * k.cp * k.pp * dp;
    s.buildings = {{"a", world / 2 / 8}, {"b", world / 2 / 8}};
    ASSERT_EQ(s.world_size(), world);
    if (l.schedule.pipeline == PipelineSchedule::interleaved)
      l.micro_batch_size = 1;  // m = gbs/dp must divide by pp: checked by validate_layout
    validate_layout(l, m, s, k.model);
    double sum = 0;
    const std::int64_t ranks_per_stage = world / k.pp;
    for (std::int64_t st = 0; st < k.pp; ++st) {
      const StepTotals t = step_totals(s, m, l, st);
      EXPECT_DOUBLE_EQ(t.backward_flops, 2 * t.forward_flops);
      sum += (t.forward_flops + t.backward_flops) * static_cast<double>(ranks_per_stage);
    }
    EXPECT_NEAR(sum / m.training_flops_per_step(), 1.0, 1e-9) << k.model;
  }
}

// gpt-tiny on the CPU testbed with TP 2 × PP 2, by hand from workload/README.md.
TEST(ClosedForms, MessagesOfASmallLayoutByHand) {
  const Cluster c = read_cluster(test::preset("clusters/local-2bld.json"), "local-2bld.json");
  const Model m = read_model(test::preset("models/gpt-tiny.json"), "gpt-tiny.json");
  Layout l;
  l.tensor_model_parallel_size = 2;
  l.pipeline_model_parallel_size = 2;
  l.micro_batch_size = 2;
  l.schedule.dp_sync = DpSync::blocking;
  validate_layout(l, m, c, "by-hand");
  const double T = 2 * 256, h = 256, e = 4, A = T * h * e;
  const std::int64_t micro = 8;  // 16 / (2 × 1)
  for (std::int64_t st = 0; st < 2; ++st) {
    const StepTotals t = step_totals(c, m, l, st);
    const int tp = static_cast<int>(Dim::tp), pp = static_cast<int>(Dim::pp), dp = static_cast<int>(Dim::dp);
    // 2 layers × (2 forward + 2 backward all-reduces) + the embedding's (first) or the output's (last).
    EXPECT_EQ(t.messages[tp], micro * (2 * 4 + 1));
    EXPECT_DOUBLE_EQ(t.sent_bytes[tp], micro * (2 * 4 + 1) * A);
    // One send per micro-batch (activation forward on stage 0, gradient backward on stage 1),
    // plus the tied embedding's gradient all-reduce between the first and last stage.
    EXPECT_EQ(t.messages[pp], micro + 1);
    EXPECT_DOUBLE_EQ(t.sent_bytes[pp], micro * T * h * e + 4.0 * 4096 * 256 / 2);
    EXPECT_EQ(t.messages[dp], 0);  // DP = 1
    // Forward FLOPs: 2 layers of (qkv + attention + out + mlp), the logits on the last stage.
    const double q = 256,
                 fwd_layer = 2 * T * h * 3 * q / 2 + 4 * T * 256 * q / 2 + 2 * T * q * h / 2 + 2 * T * 2 * h * 1024 / 2;
    const double logits = st == 1 ? 2 * T * h * 4096 / 2 : 0.0;
    EXPECT_DOUBLE_EQ(t.forward_flops, micro * (2 * fwd_layer + logits));
    EXPECT_DOUBLE_EQ(t.recompute_flops, 0.0);
  }
}
