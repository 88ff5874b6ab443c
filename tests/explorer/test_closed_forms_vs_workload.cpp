// The explorer's closed forms against sums over the explicit workload (workload/build) for a
// grid of layouts — every schedule, SP, recompute mode, distributed optimizer, DP-sync mode,
// CP, EP, VPP, uneven stages and orders: per-dimension bytes and message counts and FLOPs must
// be equal, stage by stage.
#include <gtest/gtest.h>

#include "explorer/closed_forms.hpp"
#include "spec/groups.hpp"
#include "tests/support/layout_grid.hpp"
#include "workload/workload.hpp"

using namespace sax;
using sax::test::Case;

class ClosedFormsVsWorkload : public ::testing::TestWithParam<Case> {};

TEST_P(ClosedFormsVsWorkload, EveryStageMatchesTheExplicitStep) {
  const Case& s = GetParam();
  RankGrid grid(s.layout, s.cluster.world_size());
  std::vector<bool> stage_done(static_cast<std::size_t>(s.layout.pipeline_model_parallel_size), false);
  for (std::int64_t r = 0; r < s.cluster.world_size(); ++r) {
    const std::int64_t stage = grid.stage(r);
    workload::Totals w = workload::totals(workload::build(s.cluster, s.model, s.layout, r));
    explorer::StepTotals c = explorer::step_totals(s.cluster, s.model, s.layout, stage);
    auto rel = [](double a, double b) { return b == 0 ? std::abs(a) : std::abs(a / b - 1); };
    EXPECT_LT(rel(c.forward_flops, w.forward_flops), 1e-9) << s.name << " rank " << r;
    EXPECT_LT(rel(c.backward_flops, w.backward_flops), 1e-9) << s.name << " rank " << r;
    EXPECT_LT(rel(c.recompute_flops, w.recompute_flops), 1e-9) << s.name << " rank " << r;
    for (Dim d : kDims) {
      const int i = static_cast<int>(d);
      EXPECT_LT(rel(c.sent_bytes[i], w.sent_bytes[i]), 1e-9)
          << s.name << " rank " << r << " stage " << stage << " dim " << dim_name(d) << ": closed form "
          << c.sent_bytes[i] << " workload " << w.sent_bytes[i];
      EXPECT_EQ(c.messages[i], w.messages[i])
          << s.name << " rank " << r << " stage " << stage << " dim " << dim_name(d);
    }
    stage_done[stage] = true;
  }
  for (bool done : stage_done) EXPECT_TRUE(done);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClosedFormsVsWorkload, ::testing::ValuesIn(sax::test::grid()),
                         [](const auto& info) {
                           std::string n = info.param.name;
                           for (char& c : n)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });
