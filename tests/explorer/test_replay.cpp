// The replay (explorer/replay.hpp): its engine gives the closed forms' bubble where their
// assumptions hold (equal blocks, F : B = 1 : 2, or F = B = W with zero bubble), and on the
// layout grid it is never slower than the closed forms of GPipe and 1F1B (which take every
// block of a stage at that stage's pace: where the blocks differ more the replay is faster)
// and within 1 % of never slower than interleaving's.
#include <gtest/gtest.h>

#include "explorer/closed_forms.hpp"
#include "explorer/replay.hpp"
#include "tests/support/layout_grid.hpp"
#include "tests/support/presets.hpp"

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

// Uneven inputs: the same pipeline by hand with micro-batch 0 twice as long on both stages (and
// its transfers, of none here): stage 0 F0 [0,2], F1 [2,3]; stage 1 F0 [2,6], B0 [6,14]; stage 0
// B0 [14,18]; stage 1 F1 [14,16], B1 [16,20]; stage 0 B1 [20,22].
TEST(Replay, AMicroBatchTwiceAsLongByHand) {
  MicrobatchScales twice;
  twice.block = {2, 2, 1, 1};  // [micro-batch · 2 + stage]
  const PipelineRun run = run_pipeline(PipelineSchedule::one_f_one_b, 2, 1, 2, {{1, 2, 0}, {2, 4, 0}}, {}, twice);
  EXPECT_DOUBLE_EQ(run.makespan, 22);
  EXPECT_DOUBLE_EQ(run.stage_busy[0], 9);
  EXPECT_DOUBLE_EQ(run.stage_busy[1], 18);
  // Transfers scale with their micro-batch: 1 s each way, micro-batch 1's half.
  MicrobatchScales half;
  half.transfer = {1, 0.5};
  const PipelineRun t = run_pipeline(PipelineSchedule::one_f_one_b, 2, 1, 2, {{1, 2, 0}, {2, 4, 0}}, {1.0}, half);
  const PipelineRun full = run_pipeline(PipelineSchedule::one_f_one_b, 2, 1, 2, {{1, 2, 0}, {2, 4, 0}}, {1.0});
  EXPECT_LT(t.makespan, full.makespan);
  EXPECT_GT(t.makespan, 15);
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
  // The step ends with the last stage's tail; the critical stage (the pipeline's pace) ends by then.
  EXPECT_LE(r.pipeline_s + r.tail_s, r.step_time_s * (1 + 1e-12));
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

// The transfers between stages, on equal blocks: what they add to the makespan is the closed
// forms' (closed_forms.hpp pipeline_transfers) for GPipe, 1F1B and zero bubble whatever the
// transfer, and for interleaving while a transfer is shorter than a chunk's forward and backward
// over pp; and every stage's time is its blocks, its waits for a neighbour that had not sent yet
// and its waits for a transfer under way.
TEST(Replay, TransfersBetweenStagesAddWhatTheClosedFormsSay) {
  for (PipelineSchedule s : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::zero_bubble,
                             PipelineSchedule::interleaved})
    for (std::int64_t pp : {2, 3, 4, 8})
      for (std::int64_t m : {1, 2, 3, 4, 8, 16, 32})
        for (double x : {0.01, 0.1, 0.3, 1.0, 3.0}) {
          const std::int64_t vpp = s == PipelineSchedule::interleaved ? 2 : 1;
          if (vpp > 1 && m % pp != 0) continue;
          const double v = static_cast<double>(vpp), f = 1.0 / v, b = 2.0 / v;
          if (vpp > 1 && x > (f + b) / static_cast<double>(pp)) continue;
          const bool zb = s == PipelineSchedule::zero_bubble;
          const std::vector<BlockTimes> blocks(static_cast<std::size_t>(pp * vpp),
                                               zb ? BlockTimes{f, f, f} : BlockTimes{f, b, 0});
          const Transfers transfers(static_cast<std::size_t>(pp * vpp - 1), x);
          const PipelineRun plain = run_pipeline(s, pp, vpp, m, blocks),
                            moved = run_pipeline(s, pp, vpp, m, blocks, transfers);
          const PipelineTransfers closed =
              pipeline_transfers(s, pp, vpp, m, 2.0 * x * static_cast<double>(pp - 1), 2.0 * x);
          const std::string what = std::string(to_string(s)) + " pp " + std::to_string(pp) + " m " + std::to_string(m) +
                                   " x " + std::to_string(x);
          EXPECT_NEAR(moved.makespan - plain.makespan, closed.fill_s + closed.steady_s, 1e-9) << what;
          for (std::size_t i = 0; i < moved.stage_end.size(); ++i)
            EXPECT_NEAR(moved.stage_end[i], moved.stage_busy[i] + moved.stage_waiting[i] + moved.stage_transfer[i],
                        1e-9)
                << what << " stage " << i;
        }
}

// 1F1B on 2 stages, 2 micro-batches, 0.5 s each way, by hand: stage 0 F0 [0,1], F1 [1,2]; stage 1
// gets F0's output at 1.5: F0 [1.5,2.5], B0 [2.5,4.5]; stage 0 gets the gradient at 5 (idle from
// 2 until stage 1 sent it at 4.5, then 0.5 of transfer): B0 [5,7]; stage 1's F1 input came at
// 2.5: F1 [4.5,5.5], B1 [5.5,7.5]; stage 0 B1 after its gradient at 8: [8,10].
TEST(Replay, AStageWaitsForItsNeighbourThenForTheTransfer) {
  const PipelineRun run = run_pipeline(PipelineSchedule::one_f_one_b, 2, 1, 2, {{1, 2, 0}, {1, 2, 0}}, Transfers{0.5});
  EXPECT_DOUBLE_EQ(run.makespan, 10);
  EXPECT_DOUBLE_EQ(run.stage_end[1], 7.5);
  EXPECT_DOUBLE_EQ(run.stage_waiting[0], 2.5 + 0.5);  // 2 → 4.5, and 7 → 7.5 until B1 was sent
  EXPECT_DOUBLE_EQ(run.stage_transfer[0], 0.5 + 0.5);
  EXPECT_DOUBLE_EQ(run.stage_waiting[1], 1.0);  // until F0 was sent at 1
  EXPECT_DOUBLE_EQ(run.stage_transfer[1], 0.5);
}

// The pipeline's last gradients and an overlapped DP sync on one boundary (local4-pp2-dp8: both
// cross it). Where the link serves messages whole in order (the software emulator), stage 1's
// gradient to stage 0 waits behind its whole DP backlog, and stage 0 with it; where packets share
// it, only its bytes' time again. With PP ahead of DP it leaves at once and the backlog waits for
// its bytes instead. DP ahead of PP queues it as before; where DP stays inside a building
// (local4-pp4-dp4) nothing queues and the priority changes nothing.
TEST(Replay, APriorityGradientJumpsTheDpBacklog) {
  const Cluster c = test::preset_cluster("local-4bld");
  const Model m = test::preset_model("gpt-tiny");
  CostParams fifo_params = CostParams::datasheet(c, m);
  fifo_params.boundary_fifo = true;
  const CostModel shared(c, m, CostParams::datasheet(c, m)), cm(c, m, fifo_params);
  auto with = [&](const char* file, std::uint8_t first) {
    Layout l = read_layout(test::preset(std::string("layouts/") + file), file);
    l.schedule.link_priority = first;
    validate_layout(l, m, c, file);
    return Candidate::of(l, c);
  };
  const auto pp_bit = static_cast<std::uint8_t>(1u << static_cast<int>(Dim::pp));
  const auto dp_bit = static_cast<std::uint8_t>(1u << static_cast<int>(Dim::dp));
  const Candidate equal = with("local4-pp2-dp8.json", 0), first = with("local4-pp2-dp8.json", pp_bit);
  const Placement pl = place_groups(cm.shape(), equal.order, equal.tp, equal.cp, equal.ep, equal.dp, equal.pp, 1);
  const terms::Tail tail = cm.stage_terms(equal)[1].tail;
  const double backlog = tail.dp_layers_backlog;
  ASSERT_GT(backlog, 0);
  EXPECT_LT(backlog, tail.dp);  // the output layer's gradients leave after the gradient
  const CostModel::LinkQueue fifo = cm.link_queue(equal, pl, cm.channels(equal, pl), 1, backlog);
  EXPECT_DOUBLE_EQ(fifo.pp_wait_s, backlog);
  EXPECT_EQ(fifo.dp_wait_s, 0);
  const CostModel::LinkQueue ahead = cm.link_queue(first, pl, cm.channels(first, pl), 1, backlog);
  EXPECT_EQ(ahead.pp_wait_s, 0);
  EXPECT_GT(ahead.dp_wait_s, 0);
  EXPECT_LT(ahead.dp_wait_s, backlog);
  // Packets sharing the link: the gradient's bytes again, what priority moves to the backlog.
  const CostModel::LinkQueue packets = shared.link_queue(equal, pl, shared.channels(equal, pl), 1, backlog);
  EXPECT_DOUBLE_EQ(packets.pp_wait_s, ahead.dp_wait_s);
  EXPECT_EQ(shared.link_queue(first, pl, shared.channels(first, pl), 1, backlog).pp_wait_s, 0);
  // Stage 0 ends the step: it gains the wait, the replay and the closed forms alike.
  const double gain = replay(cm, equal).step_time_s - replay(cm, first).step_time_s;
  EXPECT_NEAR(gain, backlog, 1e-9);
  EXPECT_NEAR(replay(shared, equal).step_time_s - replay(shared, first).step_time_s, packets.pp_wait_s, 1e-9);
  const PipelineSplit split = PipelineSplit::of(cm.consts(), equal);
  EXPECT_GT(cm.evaluate(equal, split).step_time_s - cm.evaluate(first, split).step_time_s, 0.5 * backlog);
  EXPECT_DOUBLE_EQ(replay(cm, with("local4-pp2-dp8.json", dp_bit)).step_time_s, replay(cm, equal).step_time_s);
  const Candidate inside = with("local4-pp4-dp4.json", 0);
  EXPECT_DOUBLE_EQ(replay(cm, inside).step_time_s, replay(cm, with("local4-pp4-dp4.json", pp_bit)).step_time_s);
  EXPECT_DOUBLE_EQ(
      cm.evaluate(inside, PipelineSplit::of(cm.consts(), inside)).step_time_s,
      cm.evaluate(with("local4-pp4-dp4.json", pp_bit), PipelineSplit::of(cm.consts(), inside)).step_time_s);
}

// Tied embeddings: the first and the last stage all-reduce the embedding's gradient once both are
// done, so the stage that ends first waits for the other (idle) while its layers' DP backlog
// drains; on local4-pp2-dp8 the last stage ends its pipeline long before stage 0 and its exposed
// DP keeps only the output layer's sync, as `sax run` measures it. Untied, nothing syncs them.
TEST(Replay, TiedEmbeddingsSyncTheFirstAndLastStage) {
  const Cluster c = test::preset_cluster("local-4bld");
  Model m = test::preset_model("gpt-tiny");
  ASSERT_FALSE(m.untie_embeddings_and_output_weights);
  const Layout l = read_layout(test::preset("layouts/local4-pp2-dp8.json"), "local4-pp2-dp8.json");
  auto check = [&](bool tied) {
    m.untie_embeddings_and_output_weights = !tied;
    validate_layout(l, m, c, "local4-pp2-dp8.json");
    const CostModel cm(c, m, CostParams::datasheet(c, m));
    const Candidate cand = Candidate::of(l, c);
    const terms::Tail last = cm.stage_terms(cand)[1].tail;
    const Replay r = replay(cm, cand);
    ASSERT_EQ(r.critical_stage, 1);
    ASSERT_GT(last.dp_layers_backlog, 0);
    const double wait = r.stages.stage_end[0] - r.stages.stage_end[1];
    ASSERT_GT(wait, last.dp_layers_backlog);  // the backlog drains in full
    const double dp = r.breakdown.exposed_comm_s[static_cast<int>(Dim::dp)];
    EXPECT_NEAR(dp, tied ? last.dp - last.dp_layers_backlog : last.dp, 1e-12) << (tied ? "tied" : "untied");
    // The step ends with the later tail: stage 0's, its own backlog not drained (it waited for
    // no one); the last stage's tail starts when stage 0's pipeline ends.
    const terms::Tail first = cm.stage_terms(cand)[0].tail;
    EXPECT_NEAR(r.step_time_s, r.stages.stage_end[0] + first.total(), 1e-12);
    EXPECT_NEAR(r.stage_tail_s[1], tied ? last.total() - last.dp_layers_backlog : last.total(), 1e-12);
  };
  check(true);
  check(false);
}
