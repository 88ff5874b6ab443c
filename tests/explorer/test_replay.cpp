// The replay (explorer/replay.hpp): its engine gives the closed forms' bubble where their
// assumptions hold (equal blocks, F : B = 1 : 2, or F = B = W with zero bubble), and on the
// layout grid it is never slower than the closed forms of GPipe and 1F1B (which take every
// block of a stage at that stage's pace: where the blocks differ more the replay is faster)
// and within 1 % of never slower than interleaving's.
#include <gtest/gtest.h>

#include "explorer/closed_forms.hpp"
#include "explorer/replay.hpp"
#include "tests/support/layout_grid.hpp"

using namespace sax;
using namespace sax::explorer;
using sax::test::Case;

TEST(Replay, EqualBlocksGiveTheClosedFormsBubble) {
  for (std::int64_t pp : {1, 2, 3, 4, 8})
    for (std::int64_t m : {1, 2, 4, 8, 16, 24})
      for (PipelineSchedule s : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::zero_bubble,
                                 PipelineSchedule::interleaved})
        for (std::int64_t vpp : {1, 2, 3}) {
          if ((s == PipelineSchedule::interleaved) != (vpp > 1) || (vpp > 1 && (pp == 1 || m % pp))) continue;
          const bool zb = s == PipelineSchedule::zero_bubble;
          const double v = static_cast<double>(vpp);
          const std::vector<BlockTimes> blocks(static_cast<std::size_t>(pp * vpp),
                                               zb ? BlockTimes{1 / v, 1 / v, 1 / v} : BlockTimes{1 / v, 2 / v, 0});
          const PipelineRun run = run_pipeline(s, pp, vpp, m, blocks);
          const double work = 3.0 * static_cast<double>(m);
          EXPECT_NEAR((run.makespan - work) / work, bubble_fraction(s, pp, vpp, m), 1e-9)
              << to_string(s) << " pp " << pp << " vpp " << vpp << " m " << m;
          for (double busy : run.stage_busy) EXPECT_NEAR(busy, work, 1e-9);
        }
}

// 1F1B on 2 stages, 2 micro-batches, the second stage twice as slow (F 2, B 4), by hand:
// stage 0 runs F0 [0,1], F1 [1,2]; stage 1 F0 [1,3], B0 [3,7]; stage 0 B0 [7,9]; stage 1 F1 [7,9],
// B1 [9,13]; stage 0 B1 [13,15]. The closed forms charge (m + p − 1) × 6 = 18.
TEST(Replay, AnUnevenPipelineByHand) {
  const PipelineRun run = run_pipeline(PipelineSchedule::one_f_one_b, 2, 1, 2, {{1, 2, 0}, {2, 4, 0}});
  EXPECT_DOUBLE_EQ(run.makespan, 15);
  EXPECT_DOUBLE_EQ(run.stage_end[0], 15);
  EXPECT_DOUBLE_EQ(run.stage_end[1], 13);
  EXPECT_DOUBLE_EQ(run.stage_busy[0], 6);
  EXPECT_DOUBLE_EQ(run.stage_busy[1], 12);
}

class ReplayGrid : public ::testing::TestWithParam<Case> {};

TEST_P(ReplayGrid, NeverSlowerThanTheClosedFormsAndEqualInTheirBlocks) {
  const Case& s = GetParam();
  CostParams params = CostParams::datasheet(s.cluster, s.model);
  params.memory_usable_fraction = 1e9;
  const CostModel cm(s.cluster, s.model, params);
  const Replay r = replay(cm, s.cluster, s.layout);
  ASSERT_GT(r.step_time_s, 0) << s.name;
  EXPECT_NEAR(r.closed_form_step_s, cm.predict(s.layout).step_time_s, 1e-12 * r.closed_form_step_s);
  EXPECT_NEAR(r.step_time_s, r.pipeline_s + r.tail_s, 1e-12 * r.step_time_s);
  EXPECT_GE(r.bubble_s, -1e-12);
  EXPECT_NEAR(r.breakdown.total(), r.step_time_s, 1e-9 * r.step_time_s) << s.name;
  // Zero bubble's closed form assumes F = B = W; its replay runs the real ones, either way.
  // Interleaving's fill and drain at (Σt − t_max)/v is the closed forms' approximation: it may
  // come out a little short of the replay (0.7 % at most on this grid).
  const PipelineSchedule sched = s.layout.schedule.pipeline;
  if (sched == PipelineSchedule::interleaved)
    EXPECT_LE(r.step_time_s, r.closed_form_step_s * 1.01) << s.name;
  else if (sched != PipelineSchedule::zero_bubble)
    EXPECT_LE(r.step_time_s, r.closed_form_step_s * (1 + 1e-9)) << s.name;
}

INSTANTIATE_TEST_SUITE_P(Layouts, ReplayGrid, ::testing::ValuesIn(sax::test::grid()), [](const auto& info) {
  std::string n = info.param.name;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

// Where one stage is slower (the last, with the logits and the loss), the closed forms' bubble
// passes the fill and drain through each stage at its own pace: (m − 1)·t_max + Σt for GPipe and
// 1F1B, the makespan of the block order itself; interleaving's (Σt − t_max)/v comes within a few
// percent of it. Charging every stage the slowest one's pace would overstate each by far more.
TEST(Replay, TheClosedFormsBubbleOfUnevenStagesIsTheSchedulesOwn) {
  for (PipelineSchedule s : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved})
    for (std::int64_t pp : {2, 4, 8})
      for (std::int64_t m : {8, 16, 32})
        for (double slow : {1.0, 1.43, 2.0}) {
          const std::int64_t vpp = s == PipelineSchedule::interleaved ? 2 : 1;
          const double v = static_cast<double>(vpp);
          std::vector<BlockTimes> blocks;
          double sum = 0, max = 0;
          for (std::int64_t c = 0; c < vpp; ++c)
            for (std::int64_t i = 0; i < pp; ++i) {
              const double f = (i == pp - 1 ? slow : 1.0) / v;
              blocks.push_back({f, 2 * f, 0});
            }
          for (std::int64_t i = 0; i < pp; ++i) {
            const double t = 3.0 * (i == pp - 1 ? slow : 1.0);
            sum += t, max = std::max(max, t);
          }
          const PipelineRun run = run_pipeline(s, pp, vpp, m, blocks);
          const double closed = static_cast<double>(m) * max + bubble_s(s, pp, vpp, m, sum, max);
          const double uniform = static_cast<double>(m) * max * (1 + bubble_fraction(s, pp, vpp, m));
          const std::string what = std::string(to_string(s)) + " pp " + std::to_string(pp) + " m " + std::to_string(m) +
                                   " slow " + std::to_string(slow);
          if (s == PipelineSchedule::interleaved)
            EXPECT_NEAR(closed / run.makespan, 1.0, 0.03) << what;
          else
            EXPECT_NEAR(closed, run.makespan, 1e-9 * run.makespan) << what;
          if (slow > 1) EXPECT_GT(uniform - run.makespan, 3 * std::abs(closed - run.makespan)) << what;
        }
}
