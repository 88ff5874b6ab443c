// The workload's bytes for a memory-bound op are the kernels' own count at the op's shape, run
// through the op runner (the mapping `bench kernels` and `sax run` use): one rank of gpt-tiny
// (fp32, LayerNorm, GeLU with biases, unfused attention with dropout, learned positions) and of
// moe-tiny (RMSNorm, SwiGLU, RoPE, router, permutation) and of mla-tiny (the latents' norms, RoPE
// on the heads' RoPE parts and the shared key, a shared expert), forward and backward, and the optimizer;
// and the router skew reaching the experts' grouped GEMMs as rows per local expert; the load the
// explorer prices routed.
#include <gtest/gtest.h>

#include <numeric>

#include "harness/internal/executor.hpp"
#include "harness/internal/op_runner.hpp"
#include "tests/support/layout_grid.hpp"
#include "workload/workload.hpp"

using sax::workload::Op;
using sax::workload::Phase;

TEST(OpRunner, WorkloadBytesAreTheKernelsOwnCounts) {
  auto device = sax::kernels::make_device(sax::Backend::cpu);
  auto ops = sax::kernels::make_ops(*device);
  for (int kind = 0; kind < 3; ++kind) {
    const bool moe = kind > 0;
    const sax::Model m = kind < 2 ? sax::test::tiny(moe, 2, 1) : [] {
      auto j = sax::test::preset("models/mla-tiny.json");
      j["num_layers"] = 2, j["moe_layer_freq"] = {0, 1}, j["global_batch_size"] = 1;
      return sax::read_model(j, "mla.json");
    }();
    const sax::Cluster c = sax::test::small_cluster(1, 1, 1);
    sax::Layout l;
    sax::validate_layout(l, m, c, "l.json");
    const auto w = sax::workload::build(c, m, l, 0);
    int checked = 0;
    for (const Op& o : w.ops) {
      if (!o.memory_bound() || o.microbatch > 0) continue;
      const bool fwd = o.phase == Phase::forward;
      if (!fwd && o.phase != Phase::backward && o.phase != Phase::optimizer) continue;
      const sax::kernels::Traffic t = sax::harness::OpRunner(m, o, *device, *ops).run();
      EXPECT_DOUBLE_EQ(t.read, o.bytes_read) << o.name << (fwd ? " forward" : " backward") << (moe ? " moe" : "");
      EXPECT_DOUBLE_EQ(t.written, o.bytes_written) << o.name << (fwd ? " forward" : " backward") << (moe ? " moe" : "");
      ++checked;
    }
    EXPECT_GT(checked, 20);
  }
}

TEST(OpRunner, RouterSkewConcentratesExpertRows) {
  // moe-tiny-like: 4 experts, top-2, 2 of them on this rank (EP 2). Skew 0 gives each local
  // expert about tokens·k/E·EP rows; a strong skew sends most copies to experts 0 and 1.
  auto device = sax::kernels::make_device(sax::Backend::cpu);
  auto ops = sax::kernels::make_ops(*device);
  sax::Model model;
  model.num_experts = 4;
  model.moe_router_topk = 2;
  sax::workload::Op op;
  op.kind = sax::workload::OpKind::compute;
  op.name = "experts_fc1";
  op.m = 2048, op.n = 8, op.k = 8, op.count = 1;
  std::int64_t total[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    sax::harness::OpRunnerOptions o;
    o.router_skew = i == 0 ? 0.0f : 8.0f;
    o.local_experts = 2;
    sax::harness::OpRunner r(model, op, *device, *ops, o);
    ASSERT_EQ(r.expert_rows().size(), 2u);
    for (std::int64_t rows : r.expert_rows()) total[i] += rows;
    if (i == 0)
      for (std::int64_t rows : r.expert_rows()) EXPECT_NEAR(rows, 1024, 150);
  }
  EXPECT_NEAR(total[0], 2048, 200);  // uniform: this rank gets its share
  EXPECT_GT(total[1], 1.6 * 2048);   // skewed: nearly every token's two picks land here (×EP)
}

// The load the explorer prices, routed: 512 tokens × top-2 of a rank over 8 experts on 4 EP ranks
// (2 each), the mean 128 copies an expert. At 1.25 the first rank's experts take 160 each and the
// others share the rest evenly (rounding to the last ones); every copy is routed.
TEST(RouteByLoad, TheFirstEpRanksExpertsTakeTheImbalanceTheOthersTheRestEvenly) {
  const std::vector<std::int64_t> to = sax::harness::route_by_load(1024, 8, 4, 1.25);
  ASSERT_EQ(to.size(), 8u);
  EXPECT_EQ(std::accumulate(to.begin(), to.end(), std::int64_t{0}), 1024);
  EXPECT_EQ(to[0], 160);
  EXPECT_EQ(to[1], 160);
  for (std::size_t x = 2; x < 8; ++x) EXPECT_TRUE(to[x] == 117 || to[x] == 118) << x << ": " << to[x];
  // At 1 every expert the mean; at more than the ranks, the first rank's experts take every copy.
  for (std::int64_t n : sax::harness::route_by_load(1024, 8, 4, 1.0)) EXPECT_EQ(n, 128);
  const std::vector<std::int64_t> all = sax::harness::route_by_load(1024, 8, 4, 9.0);
  EXPECT_EQ(all[0] + all[1], 1024);
}
