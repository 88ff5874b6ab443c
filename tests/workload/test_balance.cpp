// --balance: every placement fills each DP rank's micro-batches with micro_batch_size sequences,
// the balanced one leaves the busiest rank near the mean where the loader's order does not, and a
// workload lists each micro-batch at its lengths: the score matrix's ops at the attention's, the
// other compute and the activation messages at the tokens', gradients and optimizer as they are.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "spec/lengths.hpp"
#include "tests/support/presets.hpp"
#include "workload/balance.hpp"

using namespace sax;
using namespace sax::workload;

namespace {

// The ops over the score matrix, by the names workload/layer_ops.cpp gives them.
const std::set<std::string> kScoreMatrix = {"attention", "attention_scores", "attention_values", "attention_softmax",
                                            "attention_dropout"};

double busiest_over_mean(const StepInputs& in, const WorkWeights& w) {
  double most = 0, sum = 0;
  for (std::int64_t d = 0; d < in.dp; ++d) most = std::max(most, in.rank_work(d, w)), sum += in.rank_work(d, w);
  return most / (sum / static_cast<double>(in.dp));
}

}  // namespace

TEST(Balance, EveryPlacementKeepsEverySequenceOnce) {
  const auto seqs = draw_sequences(parse_lengths("lognormal:median=64,sigma=1.2"), 8 * 4 * 2, 256);
  double tokens = 0;
  for (const auto& q : seqs) tokens += q.tokens;
  for (Balance b : {Balance::none, Balance::sorted, Balance::balanced}) {
    const StepInputs in = assign(seqs, 8, 4, 2, b, {1, 0.5});
    ASSERT_EQ(in.work.size(), 32u) << to_string(b);
    double placed = 0;
    for (const auto& w : in.work) placed += w.tokens * 2;  // a micro-batch's mean over its 2
    EXPECT_NEAR(placed, tokens, 1e-9) << to_string(b);
  }
  EXPECT_THROW(assign(seqs, 8, 4, 3, Balance::none, {}), std::logic_error);
  EXPECT_EQ(parse_balance("balanced"), Balance::balanced);
  EXPECT_FALSE(parse_balance("lpt"));
}

TEST(Balance, TheBalancedPlacementEvensOutTheRanks) {
  // 16 DP ranks x 4 micro-batches of 1, a long tail: the loader's order leaves one rank far above
  // the mean; balancing brings every rank near it.
  const auto seqs = draw_sequences(parse_lengths("lognormal:median=32,sigma=1.0,seed=3"), 64 * 4, 256);
  const WorkWeights w{1, 0.3};
  const double none = busiest_over_mean(assign(seqs, 64, 4, 1, Balance::none, w), w);
  const double sorted = busiest_over_mean(assign(seqs, 64, 4, 1, Balance::sorted, w), w);
  const double balanced = busiest_over_mean(assign(seqs, 64, 4, 1, Balance::balanced, w), w);
  EXPECT_GT(none, 1.5);
  EXPECT_LT(balanced, sorted);
  EXPECT_LT(balanced, none);
  // Graham's greedy: the busiest at most the mean plus the heaviest sequence.
  double heaviest = 0, total = 0;
  for (const auto& q : seqs) heaviest = std::max(heaviest, q.tokens * w.token + q.attention * w.attention);
  for (const auto& q : seqs) total += q.tokens * w.token + q.attention * w.attention;
  EXPECT_LE(balanced * total / 64, total / 64 + heaviest + 1e-12);
}

// A DP rank half as fast gets about half the work: the balancer weighs each rank's speed, so the
// ranks finish together (within the heaviest sequence); alike speeds place as no speeds do.
TEST(Balance, ASlowerRankGetsLessWork) {
  const auto seqs = draw_sequences(parse_lengths("lognormal:median=32,sigma=1.0,seed=5"), 8 * 8, 256);
  const WorkWeights w{1, 0.3};
  std::vector<double> speed(8, 1.0);
  const StepInputs alike = assign(seqs, 8, 8, 1, Balance::balanced, w, speed);
  const StepInputs plain = assign(seqs, 8, 8, 1, Balance::balanced, w);
  for (std::int64_t d = 0; d < 8; ++d) EXPECT_DOUBLE_EQ(alike.rank_work(d, w), plain.rank_work(d, w)) << d;
  speed[3] = 0.5;
  const StepInputs slow = assign(seqs, 8, 8, 1, Balance::balanced, w, speed);
  double heaviest = 0, others = 0;
  for (const auto& q : seqs) heaviest = std::max(heaviest, q.tokens * w.token + q.attention * w.attention);
  for (std::int64_t d = 0; d < 8; ++d)
    if (d != 3) others += slow.rank_work(d, w) / 7;
  EXPECT_LT(slow.rank_work(3, w), 0.75 * plain.rank_work(3, w));
  EXPECT_NEAR(slow.rank_work(3, w) / 0.5, others, 2 * heaviest);
  EXPECT_THROW(assign(seqs, 8, 8, 1, Balance::balanced, w, {1, 1}), std::logic_error);  // a speed per DP rank
}

TEST(Balance, AWorkloadListsEachMicroBatchAtItsLengths) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  const Layout l = load_layout(test::preset_path("layouts/local-tp2-pp2.json"));
  const Workload even = build(c, m, l, 0);
  // Every micro-batch's sequences half as long: the tokens' ops and messages half, the score
  // matrix's a quarter; micro-batch 1 at full length, as the even step.
  StepInputs in;
  in.dp = 1, in.microbatches = even.num_microbatches, in.micro_batch_size = l.micro_batch_size;
  for (std::int64_t j = 0; j < in.microbatches; ++j)
    in.work.push_back(j == 1 ? MicrobatchWork{} : MicrobatchWork{0.5, 0.25});
  const Workload w = build(c, m, l, 0, in);
  ASSERT_EQ(w.ops.size(), even.ops.size());
  int quadratic = 0, linear = 0, scaled = 0, kept = 0;
  for (std::size_t i = 0; i < w.ops.size(); ++i) {
    const Op &a = w.ops[i], &e = even.ops[i];
    ASSERT_EQ(a.name, e.name);
    const bool whole = a.microbatch < 0 || a.microbatch == 1;
    if (a.kind == OpKind::compute) {
      if (whole) {
        EXPECT_EQ(a.flops, e.flops) << a.name;
        ++kept;
      } else if (kScoreMatrix.count(a.name)) {
        if (e.flops > 0)
          EXPECT_DOUBLE_EQ(a.flops, 0.25 * e.flops) << a.name;
        else  // softmax and dropout over the score matrix
          EXPECT_DOUBLE_EQ(a.bytes_read, 0.25 * e.bytes_read) << a.name;
        ++quadratic;
      } else if (e.flops > 0) {
        EXPECT_DOUBLE_EQ(a.flops, 0.5 * e.flops) << a.name;
        EXPECT_DOUBLE_EQ(a.m, 0.5 * e.m) << a.name;
        ++linear;
      }
    } else if (!whole && (a.dim == Dim::tp || a.dim == Dim::pp)) {
      EXPECT_DOUBLE_EQ(a.bytes, 0.5 * e.bytes) << a.name;
      ++scaled;
    } else {
      EXPECT_EQ(a.bytes, e.bytes) << a.name;
    }
  }
  EXPECT_GT(quadratic, 0);
  EXPECT_GT(linear, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(kept, 0);
  const WorkWeights ww = weights_of(even);
  EXPECT_GT(ww.token, 0);
  EXPECT_GT(ww.attention, 0);
}

// A micro-batch's tokens padded up to what TP with sequence parallelism splits evenly (as Megatron
// pads a sequence): every op's shape whole where the length is not.
TEST(Balance, AShortMicroBatchIsPaddedToWhatTheLayoutSplits) {
  const Cluster c = test::preset_cluster("local-2bld");
  const Model m = test::preset_model("gpt-tiny");
  Layout l = load_layout(test::preset_path("layouts/local-tp2-dp2.json"));
  l.sequence_parallel = true;
  l.micro_batch_size = 1;  // a micro-batch of one sequence of 77 tokens: 38.5 per TP rank unpadded
  StepInputs in;
  in.dp = 2, in.microbatches = build(c, m, l, 0).num_microbatches, in.micro_batch_size = l.micro_batch_size;
  in.work.assign(static_cast<std::size_t>(in.dp * in.microbatches), MicrobatchWork{77.0 / 256, 0.09});
  const Workload w = build(c, m, l, 0, in);
  int shaped = 0;
  for (const Op& op : w.ops) {
    if (op.kind != OpKind::compute || op.microbatch < 0) continue;
    for (double x : {op.m, op.n, op.k, op.count}) EXPECT_EQ(x, std::round(x)) << op.name;
    ++shaped;
  }
  EXPECT_GT(shaped, 0);
}
