// The explicit step of every rank, checked for what must hold whatever the layout: FLOPs add up
// to the model's, every micro-batch passes forward and backward through every chunk in a legal
// order, every send has its recv, and every member of a group issues the same collectives in
// the same order (or the harness would deadlock).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include "spec/calibration.hpp"
#include "spec/groups.hpp"
#include "tests/support/layout_grid.hpp"
#include "tests/support/presets.hpp"
#include "tests/support/run.hpp"
#include "workload/device_time.hpp"
#include "workload/layer_ops.hpp"
#include "workload/workload.hpp"

using namespace sax;
using namespace sax::workload;
using sax::test::Case;
using sax::test::grid;
using sax::test::preset_path;
using sax::test::small_cluster;
using sax::test::tiny;

namespace {

std::string key(const Op& o) {
  return std::string(to_string(o.op)) + ":" + std::to_string(static_cast<long long>(o.bytes));
}

}  // namespace

class WorkloadGrid : public ::testing::TestWithParam<Case> {};

TEST_P(WorkloadGrid, FlopsOfAllRanksAddUpToTheModels) {
  const Case& s = GetParam();
  double fwd = 0, bwd = 0;
  for (std::int64_t r = 0; r < s.cluster.world_size(); ++r) {
    Totals t = totals(build(s.cluster, s.model, s.layout, r));
    fwd += t.forward_flops;
    bwd += t.backward_flops;
  }
  EXPECT_NEAR(fwd / (s.model.training_flops_per_step() / 3), 1.0, 1e-9);
  EXPECT_NEAR(bwd / (2 * s.model.training_flops_per_step() / 3), 1.0, 1e-9);
}

TEST_P(WorkloadGrid, EveryMicroBatchPassesEveryChunkInALegalOrder) {
  const Case& s = GetParam();
  for (std::int64_t r = 0; r < s.cluster.world_size(); ++r) {
    Workload w = build(s.cluster, s.model, s.layout, r);
    // For each (micro-batch, chunk): forward ops before backward ops before weight-gradient ops.
    std::map<std::pair<std::int64_t, std::int64_t>, int> state;  // 0 none, 1 forward, 2 backward, 3 weight
    std::set<std::pair<std::int64_t, std::int64_t>> seen;
    for (const Op& o : w.ops) {
      if (o.microbatch < 0 || o.kind != OpKind::compute || o.phase == Phase::recompute) continue;
      auto k = std::make_pair(o.microbatch, o.chunk);
      int st = o.phase == Phase::forward ? 1 : o.phase == Phase::backward_weight ? 3 : 2;
      ASSERT_GE(st, state[k]) << s.name << " rank " << r << " mb " << o.microbatch << " chunk " << o.chunk << " "
                              << to_string(o.phase) << " " << o.name;
      state[k] = st;
      seen.insert(k);
    }
    EXPECT_EQ(static_cast<std::int64_t>(seen.size()),
              w.num_microbatches * s.layout.virtual_pipeline_model_parallel_size)
        << s.name;
    const int done = s.layout.schedule.pipeline == PipelineSchedule::zero_bubble ? 3 : 2;
    for (const auto& [k, st] : state) EXPECT_EQ(st, done) << s.name;
    // The optimizer step comes once, after every backward op.
    int opt = 0;
    bool after_opt_backward = false;
    for (const Op& o : w.ops) {
      if (o.phase == Phase::optimizer && o.kind == OpKind::compute)
        ++opt;
      else if (opt && o.kind == OpKind::compute)
        after_opt_backward = true;
    }
    EXPECT_EQ(opt, 1);
    EXPECT_FALSE(after_opt_backward) << s.name;
  }
}

TEST_P(WorkloadGrid, SendsMatchRecvsAndGroupsAgreeOnTheirCollectives) {
  const Case& s = GetParam();
  const std::int64_t world = s.cluster.world_size();
  std::vector<Workload> all;
  for (std::int64_t r = 0; r < world; ++r) all.push_back(build(s.cluster, s.model, s.layout, r));
  // Point to point: every (sender → receiver, bytes) send has exactly one matching recv, in order.
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<double>> sends, recvs;
  for (const auto& w : all)
    for (const Op& o : w.ops) {
      if (o.kind != OpKind::message) continue;
      if (o.op == CollOp::send) sends[{w.rank, o.peer}].push_back(o.bytes);
      if (o.op == CollOp::recv) recvs[{o.peer, w.rank}].push_back(o.bytes);
    }
  EXPECT_EQ(sends, recvs) << s.name;
  // Collectives: RankGrid resolves every group kind the workload names (the hierarchical halves
  // and the embedding group included), and the members of each group issue the same sequence of
  // (operation, bytes) on it.
  RankGrid grid(s.layout, s.cluster);
  std::set<GroupKind> named;
  for (const auto& w : all)
    for (const Op& o : w.ops)
      if (o.kind == OpKind::message && o.op != CollOp::send && o.op != CollOp::recv) named.insert(o.group);
  for (GroupKind g : named)
    for (const auto& members : grid.all_groups(g)) {
      std::vector<std::string> first;
      for (std::size_t i = 0; i < members.size(); ++i) {
        std::vector<std::string> seq;
        for (const Op& o : all[members[i]].ops)
          if (o.kind == OpKind::message && o.group == g && o.op != CollOp::send && o.op != CollOp::recv)
            seq.push_back(key(o));
        if (i == 0)
          first = seq;
        else
          EXPECT_EQ(seq, first) << s.name << " group " << to_string(g) << " member " << members[i];
      }
    }
}

// Megatron's overlap_p2p_comm: in the interleaved schedule's steady state a block whose
// predecessor is of the other pass has its pipeline receive posted before that predecessor
// (after the predecessor's own receive) and needed at its own first op; no other receive is
// posted, at most two are outstanding, and they are needed in the order posted. Off, every
// receive is in place; the messages are the same either way.
TEST_P(WorkloadGrid, PipelineReceivesArePostedWhereMegatronPostsThem) {
  const Case& s = GetParam();
  Layout in_place = s.layout;
  in_place.overlap_p2p_comm = false;
  for (std::int64_t r = 0; r < s.cluster.world_size(); ++r) {
    const Workload w = build(s.cluster, s.model, s.layout, r), off = build(s.cluster, s.model, in_place, r);
    std::multiset<std::string> a, b;
    for (const Op& o : w.ops)
      if (o.kind == OpKind::message) a.insert(key(o) + o.name + std::to_string(o.peer));
    for (const Op& o : off.ops) {
      if (o.kind == OpKind::message) b.insert(key(o) + o.name + std::to_string(o.peer));
      if (o.op == CollOp::recv) EXPECT_EQ(o.needed_at, -1) << s.name;
    }
    EXPECT_EQ(a, b) << s.name << " rank " << r;
    // Where Megatron posts: the blocks that follow one of the other pass and have an input.
    const auto blocks = schedule_blocks(s.layout.schedule.pipeline, s.layout.pipeline_model_parallel_size,
                                        s.layout.virtual_pipeline_model_parallel_size, w.stage, w.num_microbatches);
    const std::int64_t pp = s.layout.pipeline_model_parallel_size, vpp = s.layout.virtual_pipeline_model_parallel_size;
    std::size_t want = 0;
    for (std::size_t i = 1; i < blocks.size() && s.layout.p2p_overlapped(); ++i) {
      const std::int64_t v = blocks[i].chunk * pp + w.stage;
      const bool input = blocks[i].pass == Pass::F ? v > 0 : v < pp * vpp - 1;
      want += blocks[i].pass != blocks[i - 1].pass && input;
    }
    std::size_t posted = 0;
    std::int64_t last_needed = -1;
    for (std::size_t i = 0; i < w.ops.size(); ++i) {
      const Op& o = w.ops[i];
      if (o.needed_at < 0 || o.kind != OpKind::message || o.op != CollOp::recv) continue;
      ++posted;
      ASSERT_GT(o.needed_at, static_cast<std::int64_t>(i)) << s.name;
      ASSERT_LT(o.needed_at, static_cast<std::int64_t>(w.ops.size())) << s.name;
      EXPECT_GT(o.needed_at, last_needed) << s.name << ": needed out of the order posted";
      last_needed = o.needed_at;
      // Needed at its block's first op; the ops between belong to the block before (the other pass).
      const Op& first = w.ops[static_cast<std::size_t>(o.needed_at)];
      EXPECT_EQ(first.microbatch, o.microbatch) << s.name;
      EXPECT_EQ(first.chunk, o.chunk) << s.name;
      const bool forward = o.phase == Phase::forward;
      EXPECT_EQ(first.phase == Phase::forward, forward) << s.name;
      std::size_t other = 0, outstanding = 0;
      for (std::size_t j = i + 1; j < static_cast<std::size_t>(o.needed_at); ++j) {
        const Op& between = w.ops[j];
        if (between.kind == OpKind::compute && between.microbatch >= 0)
          other += (between.phase == Phase::forward) != forward;
        EXPECT_FALSE(between.kind == OpKind::compute && between.microbatch == o.microbatch &&
                     between.chunk == o.chunk && (between.phase == Phase::forward) == forward)
            << s.name << ": the block began before its receive's wait";
        outstanding += between.op == CollOp::recv && between.needed_at >= 0;
      }
      EXPECT_GT(other, 0u) << s.name << ": nothing of the other pass to run behind";
      EXPECT_LE(outstanding, 1u) << s.name;
    }
    EXPECT_EQ(posted, want) << s.name << " rank " << r;
  }
}

// Ring attention under CP: in every layer pass that runs the core with its ring (forward, a full
// recompute's forward, backward), the core runs as cp steps of s/cp keys each, and before every
// step but the last one exchange of the next step's keys and values goes round the ring
// (send_recv on the CP group, the backward's twice the bytes), needed at the op right after that
// step: the attention FLOPs of a pass are the whole sequence's whatever CP.
TEST_P(WorkloadGrid, RingAttentionExchangesEachStepsKeysBehindTheStepBefore) {
  const Case& s = GetParam();
  const std::int64_t cp = s.layout.context_parallel_size;
  for (std::int64_t r = 0; r < s.cluster.world_size(); ++r) {
    const Workload w = build(s.cluster, s.model, s.layout, r);
    std::map<std::tuple<int, std::int64_t, std::int64_t, std::int64_t>, std::pair<int, int>> passes;  // rings, steps
    for (std::size_t i = 0; i < w.ops.size(); ++i) {
      const Op& o = w.ops[i];
      const auto pass = std::make_tuple(static_cast<int>(o.phase), o.microbatch, o.chunk, o.layer);
      if (o.kind == OpKind::compute && (o.name == "attention" || o.name == "attention_scores")) {
        ++passes[pass].second;
        EXPECT_DOUBLE_EQ(o.n, static_cast<double>(s.model.seq_length) / static_cast<double>(cp))
            << s.name << ": keys of a ring step";
      }
      if (o.kind != OpKind::message || o.dim != Dim::cp) continue;
      ASSERT_GT(cp, 1) << s.name;
      ASSERT_EQ(o.op, CollOp::send_recv) << s.name;
      ++passes[pass].first;
      // Needed right after the ring step it runs behind: the ops between are that step's core.
      ASSERT_GT(o.needed_at, static_cast<std::int64_t>(i)) << s.name;
      ASSERT_LT(o.needed_at, static_cast<std::int64_t>(w.ops.size())) << s.name;
      for (std::size_t j = i + 1; j < static_cast<std::size_t>(o.needed_at); ++j) {
        const Op& step = w.ops[j];
        EXPECT_EQ(step.kind, OpKind::compute) << s.name;
        EXPECT_EQ(step.layer, o.layer) << s.name;
        EXPECT_EQ(step.microbatch, o.microbatch) << s.name;
      }
      const double tokens =
          static_cast<double>(s.layout.micro_batch_size * s.model.seq_length) / static_cast<double>(cp);
      // K and V of the rank's KV heads: each head's query-key and value widths (MLA's differ).
      const double kv_width =
          static_cast<double>(s.model.attention_kv_heads() * (s.model.query_key_head_dim() + s.model.value_head_dim()));
      const double kvb =
          tokens * kv_width / static_cast<double>(s.layout.tensor_model_parallel_size) * dtype_bytes(s.model.dtype);
      const bool backward = o.phase == Phase::backward || o.phase == Phase::backward_input;
      EXPECT_DOUBLE_EQ(o.bytes, (backward ? 2 : 1) * kvb) << s.name;
    }
    for (const auto& [pass, n] : passes) {
      EXPECT_EQ(n.second, cp) << s.name << ": ring steps of a pass";
      // Selective recompute repeats the core alone, without its ring.
      if (n.first > 0 || std::get<0>(pass) != static_cast<int>(Phase::recompute) ||
          s.layout.recompute_granularity != Recompute::selective)
        EXPECT_EQ(n.first, cp - 1) << s.name << ": exchanges of a pass";
    }
  }
}

// tp_comm_overlap marks TP messages without changing the step: the same ops as without it, and
// each marked message an all-gather just before (+1) or a reduce-scatter just after (−1) the
// GEMM of its layer, pass and micro-batch it runs behind (qkv_proj, out_proj, mlp_fc1, mlp_fc2;
// at most one of each per GEMM); every TP message of a dense layer is marked, none of the
// embedding's or output layer's.
TEST_P(WorkloadGrid, TpOverlapPairsEachMarkedMessageWithItsGemm) {
  const Case& s = GetParam();
  Layout off = s.layout;
  off.tp_comm_overlap = false;
  const std::set<std::string> gemms = {"qkv_proj", "out_proj", "mlp_fc1", "mlp_fc2"};
  for (std::int64_t r = 0; r < s.cluster.world_size(); ++r) {
    const Workload w = build(s.cluster, s.model, s.layout, r), plain = build(s.cluster, s.model, off, r);
    ASSERT_EQ(w.ops.size(), plain.ops.size()) << s.name;
    std::map<std::size_t, std::pair<int, int>> per_gemm;  // all-gathers, reduce-scatters behind it
    for (std::size_t i = 0; i < w.ops.size(); ++i) {
      const Op &o = w.ops[i], &p = plain.ops[i];
      ASSERT_EQ(o.name, p.name) << s.name << " op " << i;
      ASSERT_EQ(o.phase, p.phase);
      ASSERT_EQ(o.microbatch, p.microbatch);
      ASSERT_EQ(o.bytes, p.bytes);
      ASSERT_EQ(p.overlap_gemm, 0);
      if (o.kind != OpKind::message || o.dim != Dim::tp) continue;
      const bool dense_layer = o.layer >= 0 && !s.model.moe_layer_pattern[static_cast<std::size_t>(o.layer)];
      if (o.layer < 0 || !s.layout.tp_comm_overlap) EXPECT_EQ(o.overlap_gemm, 0) << s.name << " " << o.name;
      if (dense_layer && s.layout.tp_comm_overlap) EXPECT_NE(o.overlap_gemm, 0) << s.name << " " << o.name;
      if (o.overlap_gemm == 0) continue;
      EXPECT_TRUE(o.overlap_gemm == 1 || o.overlap_gemm == -1) << static_cast<int>(o.overlap_gemm);
      EXPECT_EQ(o.op, o.overlap_gemm > 0 ? CollOp::all_gather : CollOp::reduce_scatter) << s.name << " " << o.name;
      const auto j = static_cast<std::size_t>(static_cast<std::int64_t>(i) + o.overlap_gemm);
      ASSERT_LT(j, w.ops.size());
      const Op& g = w.ops[j];
      EXPECT_EQ(g.kind, OpKind::compute);
      EXPECT_EQ(g.compute, ComputeKind::gemm);
      EXPECT_EQ(gemms.count(g.name), 1u) << s.name << ": " << o.name << " behind " << g.name;
      EXPECT_EQ(g.phase, o.phase);
      EXPECT_EQ(g.microbatch, o.microbatch);
      EXPECT_EQ(g.layer, o.layer);
      EXPECT_EQ(g.chunk, o.chunk);
      auto& n = per_gemm[j];
      (o.overlap_gemm > 0 ? n.first : n.second) += 1;
    }
    for (const auto& [j, n] : per_gemm) {
      EXPECT_LE(n.first, 1) << s.name << " " << w.ops[j].name;
      EXPECT_LE(n.second, 1) << s.name << " " << w.ops[j].name;
    }
    EXPECT_EQ(per_gemm.empty(), !s.layout.tp_comm_overlap) << s.name;
  }
}

TEST_P(WorkloadGrid, DataParallelSyncCarriesEveryParameterOnce) {
  const Case& s = GetParam();
  const std::int64_t world = s.cluster.world_size();
  RankGrid grid(s.layout, s.cluster);
  // One model replica: the ranks with DP×CP coordinate 0, over every TP rank and stage (the
  // EP ranks inside DP hold the other experts: add expert parameters from expert-DP×CP
  // coordinate 0 instead). Its optimizer steps update every parameter once.
  double params = 0;
  for (std::int64_t r = 0; r < world; ++r) {
    Workload w = build(s.cluster, s.model, s.layout, r);
    for (const Op& o : w.ops)
      if (o.name == "optimizer_step") params += o.params;
  }
  // Every rank's optimizer shard (or full copy) summed over all ranks: with the distributed
  // optimizer each parameter is updated once; without it, once per replica — DP×CP replicas of
  // the dense parameters, expert-DP×CP replicas of the experts.
  const double expert =
      s.model.num_moe_layers() * s.model.num_experts * s.model.mlp_params(s.model.moe_ffn_hidden_size);
  double dense = s.model.params_total() - expert;
  // Tied embeddings with PP > 1: the last stage's copy of the word embedding is a second copy.
  if (!s.model.untie_embeddings_and_output_weights && s.layout.pipeline_model_parallel_size > 1)
    dense += static_cast<double>(s.model.vocab_size) * s.model.hidden_size;
  // HSDP (FSDP with the hierarchical sync) shards inside each building the group spans evenly:
  // one copy per building.
  auto replicas = [&](GroupKind g) {
    if (!(s.layout.shards_parameters() && s.layout.schedule.dp_sync == DpSync::hierarchical)) return 1.0;
    std::map<int, int> per_building;
    for (auto r : grid.group(0, g)) ++per_building[grid.building(r)];
    const bool even = std::all_of(per_building.begin(), per_building.end(),
                                  [&](const auto& b) { return b.second == per_building.begin()->second; });
    return even && per_building.size() > 1 ? static_cast<double>(per_building.size()) : 1.0;
  };
  const bool dist = s.layout.shards_optimizer();
  const double expected = dist ? dense * replicas(GroupKind::dp_cp) + expert * replicas(GroupKind::expert_dp_cp)
                               : dense * grid.size(GroupKind::dp_cp) + expert * grid.size(GroupKind::expert_dp_cp);
  EXPECT_NEAR(params / expected, 1.0, 1e-9) << s.name;
}

INSTANTIATE_TEST_SUITE_P(Layouts, WorkloadGrid, ::testing::ValuesIn(grid()), [](const auto& info) {
  std::string n = info.param.name;
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
});

namespace {
std::vector<std::pair<char, std::int64_t>> blocks_of(const Workload& w) {
  // (F|B|W, micro-batch) in order, from the first compute op of each block.
  std::vector<std::pair<char, std::int64_t>> out;
  std::int64_t last_mb = -2;
  char last = 0;
  for (const Op& o : w.ops) {
    if (o.kind != OpKind::compute || o.microbatch < 0 || o.phase == Phase::recompute) continue;
    char c = o.phase == Phase::forward ? 'F' : o.phase == Phase::backward_weight ? 'W' : 'B';
    if (c != last || o.microbatch != last_mb) out.push_back({c, o.microbatch});
    last = c;
    last_mb = o.microbatch;
  }
  return out;
}
std::string pattern(const Workload& w) {
  std::string s;
  for (auto [c, mb] : blocks_of(w)) s += c + std::to_string(mb) + " ";
  return s;
}
}  // namespace

TEST(Schedules, OrdersOnTheFirstAndLastStage) {
  Cluster c = small_cluster(1, 1, 4);
  Model m = tiny(false, 4, 4);  // 4 micro-batches of 1 on PP 4
  auto on = [&](const char* sched, std::int64_t rank) {
    Layout l = read_layout({{"pipeline_model_parallel_size", 4}, {"schedule", {{"pipeline", sched}}}}, "l.json");
    validate_layout(l, m, c, "l.json");
    return pattern(build(c, m, l, rank));
  };
  EXPECT_EQ(on("gpipe", 0), "F0 F1 F2 F3 B3 B2 B1 B0 ");
  EXPECT_EQ(on("1f1b", 0), "F0 F1 F2 F3 B0 B1 B2 B3 ");  // warm-up pp−1 = 3, then 1F1B
  EXPECT_EQ(on("1f1b", 3), "F0 B0 F1 B1 F2 B2 F3 B3 ");
  EXPECT_EQ(on("1f1b", 2), "F0 F1 B0 F2 B1 F3 B2 B3 ");
  // ZB-H1: B's as soon as their gradient arrives, F's within 1F1B's in-flight limit, W's in
  // what would otherwise be bubble.
  EXPECT_EQ(on("zero_bubble", 0), "F0 F1 F2 F3 B0 W0 B1 W1 B2 W2 B3 W3 ");
  EXPECT_EQ(on("zero_bubble", 2), "F0 F1 B0 F2 B1 F3 B2 W0 B3 W1 W2 W3 ");
  EXPECT_EQ(on("zero_bubble", 3), "F0 B0 F1 B1 F2 B2 F3 B3 W0 W1 W2 W3 ");
}

TEST(Schedules, AllStagesAtOnceAreEachStagesOwnOrder) {
  // The replay asks for every stage's order in one call; `sax run` asks for its own stage's.
  auto same = [](const Block& a, const Block& b) {
    return a.pass == b.pass && a.microbatch == b.microbatch && a.chunk == b.chunk;
  };
  for (PipelineSchedule s : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::interleaved,
                             PipelineSchedule::zero_bubble}) {
    const std::int64_t pp = 4, vpp = s == PipelineSchedule::interleaved ? 2 : 1, m = 8;
    const auto all = schedule_blocks(s, pp, vpp, m);
    ASSERT_EQ(all.size(), 4u);
    for (std::int64_t i = 0; i < pp; ++i) {
      const auto own = schedule_blocks(s, pp, vpp, i, m);
      const auto& got = all[static_cast<std::size_t>(i)];
      ASSERT_EQ(got.size(), own.size()) << to_string(s) << " stage " << i;
      EXPECT_TRUE(std::equal(got.begin(), got.end(), own.begin(), same)) << to_string(s) << " stage " << i;
    }
  }
}

TEST(Workload, MessageSizesFollowTheContract) {
  Cluster c = small_cluster(2, 1, 4);  // 8 ranks
  Model m = tiny(false, 4, 8);
  Layout l = read_layout({{"tensor_model_parallel_size", 2},
                          {"pipeline_model_parallel_size", 2},
                          {"micro_batch_size", 2},
                          {"sequence_parallel", true}},
                         "l.json");
  validate_layout(l, m, c, "l.json");
  Workload w = build(c, m, l, 0);
  const double T = 2.0 * m.seq_length, A = T * m.hidden_size * 4;  // fp32
  int ag = 0, rs = 0, sends = 0;
  for (const Op& o : w.ops) {
    if (o.kind != OpKind::message) continue;
    if (o.group == GroupKind::tp && o.op == CollOp::all_gather) {
      ++ag;
      EXPECT_DOUBLE_EQ(o.bytes, A);
    }
    if (o.group == GroupKind::tp && o.op == CollOp::reduce_scatter) ++rs;
    if (o.op == CollOp::send) {
      ++sends;
      EXPECT_DOUBLE_EQ(o.bytes, A / 2);  // SP: the scattered activation
      EXPECT_EQ(o.peer, 4);              // stage 1 of rank 0's pipeline
    }
  }
  // 2 micro-batches (8 / (2 × DP 2)) × 2 layers × (2 forward + 2 backward + the backward's
  // re-gathers of qkv_proj's and mlp_fc1's inputs, Megatron's SP weight gradient).
  EXPECT_EQ(ag, 2 * 2 * 6);
  // Each re-gather comes just before the backward of the column-parallel linear it feeds.
  int regathers = 0;
  for (std::size_t i = 0; i + 1 < w.ops.size(); ++i)
    if (w.ops[i].name == "sp_input_all_gather") {
      ++regathers;
      EXPECT_EQ(w.ops[i].phase, Phase::backward);
      EXPECT_TRUE(w.ops[i + 1].name == "qkv_proj" || w.ops[i + 1].name == "mlp_fc1") << w.ops[i + 1].name;
    }
  EXPECT_EQ(regathers, 2 * 2 * 2);
  EXPECT_EQ(rs, 2 * 2 * 4 + 2);
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(w.num_microbatches, 2);
}

// The gradient reduction moves the gradients in the bytes Megatron-LM keeps them in: fp32 for a
// bf16 model unless grad_reduce_in_bf16, fp16 for an fp16 model, fp32 for fp32; the parameter
// all-gather moves the weights in the model's dtype whatever the gradients.
TEST(Workload, GradientSyncMovesTheGradientsBytes) {
  Cluster c = small_cluster(2, 1, 2);  // 4 ranks, DP 4
  auto sync_bytes = [&](DType d, bool bf16_grads) {
    Model m = tiny(false, 4, 8);
    m.dtype = d;
    Layout l = read_layout({{"use_distributed_optimizer", true}, {"grad_reduce_in_bf16", bf16_grads}}, "l.json");
    validate_layout(l, m, c, "l.json");
    double grad = 0, gather = 0, params = 0;
    for (const Op& o : build(c, m, l, 0).ops) {
      if (o.name == "optimizer_step") params += o.params;
      if (o.kind != OpKind::message || o.group != GroupKind::dp_cp) continue;
      (o.op == CollOp::reduce_scatter ? grad : gather) += o.bytes;
    }
    params *= 4;  // the optimizer's shard of DP 4: the rank's parameters
    return std::pair{grad / params, gather / params};
  };
  EXPECT_EQ(sync_bytes(DType::bf16, false), (std::pair{4.0, 2.0}));
  EXPECT_EQ(sync_bytes(DType::bf16, true), (std::pair{2.0, 2.0}));
  EXPECT_EQ(sync_bytes(DType::fp16, false), (std::pair{2.0, 2.0}));
  EXPECT_EQ(sync_bytes(DType::fp32, false), (std::pair{4.0, 4.0}));
  Model m = tiny(false, 4, 8);  // fp32
  Layout l = read_layout({{"grad_reduce_in_bf16", true}}, "l.json");
  try {
    validate_layout(l, m, c, "l.json");
    ADD_FAILURE() << "bf16 gradients accepted for an fp32 model";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("l.json: /grad_reduce_in_bf16: expected false"), std::string::npos)
        << e.what();
  }
}

// Every compute op says what it reads and writes; memory-bound ops carry no model FLOPs, and
// the zero-bubble W blocks hold weight-gradient GEMMs only.
TEST_P(WorkloadGrid, EveryComputeOpHasItsBytesAndMemoryBoundOpsNoModelFlops) {
  const Case& s = GetParam();
  for (std::int64_t r = 0; r < s.cluster.world_size(); ++r)
    for (const Op& o : build(s.cluster, s.model, s.layout, r).ops) {
      if (o.kind != OpKind::compute) continue;
      EXPECT_GT(o.bytes_read, 0) << s.name << " " << o.name;
      EXPECT_GT(o.bytes_written, 0) << s.name << " " << o.name;
      if (o.memory_bound()) EXPECT_EQ(o.flops, 0) << s.name << " " << o.name;
      if (!o.memory_bound()) EXPECT_GT(o.flops, 0) << s.name << " " << o.name;
      if (o.phase == Phase::backward_weight) EXPECT_FALSE(o.memory_bound()) << s.name << " " << o.name;
    }
}

namespace {

Workload one_rank(const Model& m, json layout) {
  Cluster c = small_cluster(1, 1, 1);
  Layout l = read_layout(layout, "l.json");
  validate_layout(l, m, c, "l.json");
  return build(c, m, l, 0);
}
std::vector<std::string> forward_names(const Workload& w, std::int64_t layer) {
  std::vector<std::string> out;
  for (const Op& o : w.ops)
    if (o.kind == OpKind::compute && o.phase == Phase::forward && o.layer == layer && o.microbatch == 0)
      out.push_back(o.name);
  return out;
}
const Op& find(const Workload& w, const std::string& name, Phase ph) {
  for (const Op& o : w.ops)
    if (o.name == name && o.phase == ph) return o;
  throw std::runtime_error("no op " + name);
}

}  // namespace

// A layer's forward, op by op: with an unfused backend the score matrix's passes are listed;
// with flash one fused op; the same model FLOPs either way.
TEST(Workload, AttentionBackendsListTheirOpsWithTheSameFlops) {
  Model m = tiny(false, 2, 1);  // gpt-tiny: fp32, LayerNorm, GeLU, learned positions, dropout 0.1
  const auto local = one_rank(m, {{"attention_backend", "auto"}});  // fp32: auto is local
  EXPECT_EQ(forward_names(local, 0),
            (std::vector<std::string>{"input_norm", "qkv_proj", "attention_scores", "attention_softmax",
                                      "attention_dropout", "attention_values", "out_proj", "attention_residual",
                                      "pre_mlp_norm", "mlp_fc1", "activation", "mlp_fc2", "mlp_residual"}));
  m.dtype = DType::bf16;
  m.attention_dropout = 0;
  const auto flash = one_rank(m, {{"attention_backend", "auto"}});  // bf16: auto is flash
  EXPECT_EQ(forward_names(flash, 0),
            (std::vector<std::string>{"input_norm", "qkv_proj", "attention", "out_proj", "attention_residual",
                                      "pre_mlp_norm", "mlp_fc1", "activation", "mlp_fc2", "mlp_residual"}));
  const auto unfused = one_rank(m, {{"attention_backend", "unfused"}});  // no attention dropout now
  const auto names = forward_names(unfused, 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "attention_dropout"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "attention_softmax"), 1);
  EXPECT_NEAR(totals(flash).forward_flops, totals(unfused).forward_flops, 1e-6 * totals(flash).forward_flops);
  EXPECT_NEAR(totals(flash).backward_flops, totals(unfused).backward_flops, 1e-6 * totals(flash).backward_flops);
  // The score matrix is b·a·s² elements of the dtype: written by the scores product, read and
  // written by the softmax.
  const double b = 1, a = 8, s = 256, d = 32, e = 2, h = 256;
  EXPECT_DOUBLE_EQ(find(unfused, "attention_scores", Phase::forward).bytes_written, b * a * s * s * e);
  EXPECT_DOUBLE_EQ(find(unfused, "attention_softmax", Phase::forward).bytes_read, b * a * s * s * e);
  EXPECT_DOUBLE_EQ(find(unfused, "attention_softmax", Phase::backward).bytes_read, 2 * b * a * s * s * e);
  // Flash reads Q, K, V and writes O and the fp32 log-sum-exp: nothing of size s².
  const Op& fa = find(flash, "attention", Phase::forward);
  EXPECT_DOUBLE_EQ(fa.bytes_read, 3 * b * s * a * d * e);
  EXPECT_DOUBLE_EQ(fa.bytes_written, b * s * a * d * e + b * s * a * 4);
  EXPECT_DOUBLE_EQ(fa.flops, 4 * b * a * s * s * d);
  // LayerNorm over s × h: reads x, γ, β; writes y, mean and rstd (fp32).
  const Op& ln = find(flash, "input_norm", Phase::forward);
  EXPECT_DOUBLE_EQ(ln.bytes_read, s * h * e + 2 * h * e);
  EXPECT_DOUBLE_EQ(ln.bytes_written, s * h * e + 2 * s * 4);
  // Bias-dropout-add: reads y, the residual and the bias; writes the sum and a 1-byte mask.
  const Op& res = find(flash, "attention_residual", Phase::forward);
  EXPECT_DOUBLE_EQ(res.bytes_read, 2 * s * h * e + h * e);
  EXPECT_DOUBLE_EQ(res.bytes_written, s * h * e + s * h);
}

// Selective recompute repeats the attention core only: every pass of the score matrix when it
// is materialised, the fused op with flash.
TEST(Workload, SelectiveRecomputeRepeatsTheAttentionCore) {
  Model m = tiny(false, 2, 1);
  for (const char* backend : {"local", "unfused"}) {
    std::set<std::string> recomputed;
    for (const Op& o : one_rank(m, {{"attention_backend", backend}, {"recompute_granularity", "selective"}}).ops)
      if (o.phase == Phase::recompute) recomputed.insert(o.name);
    EXPECT_EQ(recomputed,
              (std::set<std::string>{"attention_scores", "attention_softmax", "attention_dropout", "attention_values"}))
        << backend;
  }
  m.dtype = DType::bf16;
  std::set<std::string> recomputed;
  for (const Op& o : one_rank(m, {{"attention_backend", "flash"}, {"recompute_granularity", "selective"}}).ops)
    if (o.phase == Phase::recompute) recomputed.insert(o.name);
  EXPECT_EQ(recomputed, (std::set<std::string>{"attention"}));
}

// The pairs a sliding window keeps, against counting them: queries the last sq of sk positions,
// query at position p attending keys max(0, p − w) … p.
TEST(LayerOps, AttendedShareCountsTheWindowsPairs) {
  for (const auto& [sq, sk, w] : std::vector<std::tuple<int, int, int>>{
           {256, 256, 64}, {256, 256, 300}, {70, 150, 20}, {70, 150, 100}, {1, 9, 3}, {128, 128, 1}}) {
    double kept = 0, causal = 0;
    for (int i = 0; i < sq; ++i) {
      const int p = sk - sq + i;
      causal += p + 1, kept += std::min(p, w) + 1;
    }
    EXPECT_NEAR(attended_share(sq, sk, w), kept / causal, 1e-12) << sq << " " << sk << " " << w;
  }
  EXPECT_EQ(attended_share(256, 256, 0), 1.0);
}

// A sliding-window layer's attention core carries the window (fused or unfused), a full layer's
// none; a windowed fused core takes its share of the causal core's time, its model FLOPs Megatron's.
TEST(Workload, WindowLayersMarkTheirCore) {
  const Model m = read_model(sax::test::preset("models/swa-tiny.json"), "swa.json");
  for (const char* backend : {"flash", "unfused"}) {
    std::set<std::pair<std::int64_t, double>> windows;
    for (const Op& o : one_rank(m, {{"attention_backend", backend}, {"micro_batch_size", 1}}).ops)
      if (o.kind == OpKind::compute && o.phase == Phase::forward && o.layer >= 0 &&
          (o.name == "attention" || o.name == "attention_softmax"))
        windows.insert({o.layer, o.window});
    EXPECT_EQ(windows, (std::set<std::pair<std::int64_t, double>>{{0, 64}, {1, 0}, {2, 64}, {3, 0}})) << backend;
  }
  const DeviceSpeed speed =
      DeviceSpeed::of(sax::load_cluster(preset_path("clusters/h100-3bld.json")).device, Backend::cuda, DType::bf16);
  Op core;
  core.compute = ComputeKind::attention, core.m = 4096, core.n = 4096, core.k = 64, core.count = 1, core.heads = 8;
  core.flops = flops(core);
  Op windowed = core;
  windowed.window = 127;
  EXPECT_EQ(windowed.flops, core.flops);
  EXPECT_LT(op_time(speed, windowed), 0.1 * op_time(speed, core));  // 128 of ~2048 keys a query on average
}

// An MoE layer: router, its softmax/top-k, permute, the experts' GEMMs around their activation,
// unpermute; RoPE and RMSNorm from the model; the optimizer's bytes per parameter.
TEST(Workload, MoeLayerAndEdgesListEveryOp) {
  const Model m = tiny(true, 2, 1);  // moe-tiny: fp32, RMSNorm, SwiGLU, RoPE, no biases, 4 experts top-2
  const auto w = one_rank(m, json::object());
  EXPECT_EQ(forward_names(w, 0),
            (std::vector<std::string>{"input_norm", "qkv_proj", "rope", "attention_scores", "attention_softmax",
                                      "attention_dropout", "attention_values", "out_proj", "attention_residual",
                                      "pre_mlp_norm", "router", "router_topk", "permute", "experts_fc1",
                                      "expert_activation", "experts_fc2", "unpermute", "mlp_residual"}));
  std::vector<std::string> edge;
  for (const Op& o : w.ops)
    if (o.kind == OpKind::compute && o.layer < 0 && o.phase == Phase::forward) edge.push_back(o.name);
  EXPECT_EQ(edge,
            (std::vector<std::string>{"embedding", "embedding_dropout", "final_norm", "logits", "cross_entropy"}));
  const double s = 256, h = 256, e = 4, k = 2;
  // SwiGLU reads its two halves, writes one; permute writes each token k times.
  const Op& act = find(w, "expert_activation", Phase::forward);
  EXPECT_DOUBLE_EQ(act.bytes_read, 2 * s * k * 512 * e);
  EXPECT_DOUBLE_EQ(act.bytes_written, s * k * 512 * e);
  EXPECT_DOUBLE_EQ(find(w, "permute", Phase::forward).bytes_written, s * k * h * e + s * k * 4);  // + row map
  const Op& opt = find(w, "optimizer_step", Phase::optimizer);
  EXPECT_TRUE(opt.memory_bound());
  // fp32, every parameter updated here (no distributed optimizer): the norm reads the gradient,
  // Adam reads parameter, gradient, m, v and writes parameter, m, v in place; the fp32 gradient
  // buffer is zeroed for the next step.
  EXPECT_DOUBLE_EQ(opt.bytes_read, (4 + 16) * opt.params);
  EXPECT_DOUBLE_EQ(opt.bytes_written, (12 + 4) * opt.params);
}

// The quantization of each part of a GEMM is that of the product the part computes, as op_cost's
// formulas have them: forward Y = X·W (m×n), input gradient dX = dY·Wᵀ (m×k), weight gradient
// dW = Xᵀ·dY (k×n); a whole backward holds both at equal FLOPs, so its factor is their harmonic
// mean. A product's batch is count × heads; fused attention and memory-bound ops are not tiled.
TEST(LayerOps, EachPartIsQuantizedAtItsOwnProductsOutput) {
  const LayerOp g{"g", ComputeKind::gemm, 64, 320, 128, 1};
  const int sms = 4;
  EXPECT_DOUBLE_EQ(quantization(g, Part::forward, sms), 5.0 / 8.0);      // five 64×64 tiles on 4 SMs
  EXPECT_DOUBLE_EQ(quantization(g, Part::input_grad, sms), 1.0 / 2.0);   // 64×128: two 64×64 tiles
  EXPECT_DOUBLE_EQ(quantization(g, Part::weight_grad, sms), 5.0 / 6.0);  // 128×320: ten 64×64, 3 waves
  EXPECT_DOUBLE_EQ(quantization(g, Part::backward, sms), 2.0 / (2.0 + 6.0 / 5.0));
  EXPECT_DOUBLE_EQ(quantization(g, Part::forward, 0), 1.0);
  EXPECT_DOUBLE_EQ(quantization(g, Part::backward, 0), 1.0);
  // SwiGLU's fc1: two matrices, one launch.
  const LayerOp fc1{"fc1", ComputeKind::gemm, 64, 160, 128, 2};
  EXPECT_DOUBLE_EQ(quantization(fc1, Part::forward, sms), gemm_quantization(64, 160, 2, sms));
  // Attention's score product: batch 2 × 3 heads of 64×96 outputs, its gradients 64×32 and 32×96.
  LayerOp qk{"attention_scores", ComputeKind::product, 64, 96, 32, 2, 3, 1};
  EXPECT_DOUBLE_EQ(quantization(qk, Part::forward, sms), gemm_quantization(64, 96, 6, sms));
  EXPECT_DOUBLE_EQ(quantization(qk, Part::weight_grad, sms), gemm_quantization(32, 96, 6, sms));
  EXPECT_DOUBLE_EQ(quantization(qk, Part::backward, sms),
                   2.0 / (1.0 / gemm_quantization(64, 32, 6, sms) + 1.0 / gemm_quantization(32, 96, 6, sms)));
  // Zero bubble runs a product's whole backward in B: its input_grad is that backward.
  EXPECT_DOUBLE_EQ(quantization(qk, Part::input_grad, sms), quantization(qk, Part::backward, sms));
  EXPECT_LT(quantization(qk, Part::forward, sms), 1.0);
  const LayerOp flash{"attention", ComputeKind::attention, 64, 96, 32, 2, 3, 1};
  EXPECT_DOUBLE_EQ(quantization(flash, Part::forward, sms), 1.0);
  const LayerOp norm{"norm", ComputeKind::memory, 63, 65, 0, 1};
  EXPECT_DOUBLE_EQ(quantization(norm, Part::backward, sms), 1.0);
  // The phases of the workload's blocks run these parts.
  EXPECT_EQ(part_of(Phase::forward), Part::forward);
  EXPECT_EQ(part_of(Phase::recompute), Part::forward);
  EXPECT_EQ(part_of(Phase::backward), Part::backward);
  EXPECT_EQ(part_of(Phase::backward_input), Part::input_grad);
  EXPECT_EQ(part_of(Phase::backward_weight), Part::weight_grad);
}

// One definition of an op's device time: the compute op the workload lists (what a paced device
// holds a rank for) takes what its layer op takes at its part (what the cost model prices), on a
// device with SMs (quantization) and a fixed cost per op, for every op of a dense and a MoE layer.
TEST(DeviceTime, AWorkloadOpTakesWhatItsLayerOpTakes) {
  for (const bool moe : {false, true}) {
    Model m = tiny(moe, 2, 1);
    m.dtype = DType::bf16;
    const json layout = {{"attention_backend", "unfused"}};
    const Workload w = one_rank(m, layout);
    Device h100 = sax::test::preset_cluster("h100-3bld").device;
    h100.op_overhead_us = 4;
    const DeviceSpeed speed = DeviceSpeed::of(h100, Backend::cuda, m.dtype);
    ASSERT_GT(speed.sm_count, 0);
    const LayerOps ops(m, 1, 1, 1, false, true);
    std::map<std::string, LayerOp> by_name;
    for (const LayerOp& o : ops.attention_ops()) by_name.emplace(o.name, o);
    for (const LayerOp& o : ops.mlp_ops(moe, 1)) by_name.emplace(o.name, o);
    for (const char* n : {"input_norm", "pre_mlp_norm"}) by_name.emplace(n, ops.norm(n, ops.sp_tokens()));
    for (const char* n : {"attention_residual", "mlp_residual"}) by_name.emplace(n, ops.residual(n));
    const double e = dtype_bytes(m.dtype);
    int compared = 0;
    for (const Op& o : w.ops) {
      if (o.kind != OpKind::compute || o.layer != 0 || o.microbatch != 0) continue;
      const auto it = by_name.find(o.name);
      ASSERT_NE(it, by_name.end()) << o.name;
      const double layer_op = op_time(speed, it->second, part_of(o.phase), e);
      EXPECT_NEAR(op_time(speed, o), layer_op, 1e-9 * layer_op) << o.name << " " << to_string(o.phase);
      EXPECT_GE(op_time(speed, o), h100.op_overhead_us * 1e-6);
      ++compared;
    }
    EXPECT_GE(compared, moe ? 30 : 24);
  }
}

// The optimizer step's traffic, pass by pass as Megatron-LM runs them (workload.hpp
// optimizer_bytes), for 10 parameters updated of 40 held (a distributed optimizer of DP 4).
TEST(Workload, TheOptimizerStepMovesMegatronsPasses) {
  // bf16 with an fp32 gradient buffer: the norm (4), Adam (16 read, 12 written), the main
  // parameters copied into the bf16 model's (4 read, 2 written); the buffer zeroed (4 per held).
  const OptimizerPrecision fp32;
  OptimizerBytes b = optimizer_bytes(DType::bf16, 4, 10, 40, fp32);
  EXPECT_DOUBLE_EQ(b.read, 24 * 10);
  EXPECT_DOUBLE_EQ(b.written, 14 * 10 + 4 * 40);
  // bf16 gradients are cast into fp32 main gradients first (2 read, 4 written); a 2-byte buffer.
  b = optimizer_bytes(DType::bf16, 2, 10, 40, fp32);
  EXPECT_DOUBLE_EQ(b.read, 26 * 10);
  EXPECT_DOUBLE_EQ(b.written, 18 * 10 + 2 * 40);
  // fp16 adds the loss scaler's unscale and inf check (4 read, 4 written).
  b = optimizer_bytes(DType::fp16, 2, 10, 40, fp32);
  EXPECT_DOUBLE_EQ(b.read, 30 * 10);
  EXPECT_DOUBLE_EQ(b.written, 22 * 10 + 2 * 40);
  // fp32 updates its weights in place: the norm (4), Adam (16 read, 12 written).
  b = optimizer_bytes(DType::fp32, 4, 10, 40, fp32);
  EXPECT_DOUBLE_EQ(b.read, 20 * 10);
  EXPECT_DOUBLE_EQ(b.written, 12 * 10 + 4 * 40);
  // State in bf16 with no main copy (Apex's, NeMo 1): the norm over the bf16 gradients (2), Adam
  // reading gradient, weight, m, v (2 each) and writing weight, m, v in place.
  const OptimizerPrecision in_place{DType::bf16, DType::bf16, DType::bf16};
  b = optimizer_bytes(DType::bf16, 2, 10, 40, in_place);
  EXPECT_DOUBLE_EQ(b.read, 10 * 10);
  EXPECT_DOUBLE_EQ(b.written, 6 * 10 + 2 * 40);
  // Megatron's precision-aware optimizer with bf16 moments keeps the fp32 main copy as a 2-byte
  // remainder: the cast (2 read, 4 written), the norm (4), Adam (4 + 2 + 2 + 2 read, 2 + 2 + 2
  // written), the copy out (2 read, 2 written).
  b = optimizer_bytes(DType::bf16, 2, 10, 40, OptimizerPrecision{DType::fp32, DType::bf16, DType::bf16});
  EXPECT_DOUBLE_EQ(b.read, 18 * 10);
  EXPECT_DOUBLE_EQ(b.written, 12 * 10 + 2 * 40);
}

// The optimizer state's bytes per parameter from the layout's dtypes: a main copy only where its
// dtype differs from the weights', and only half-precision models may keep state below fp32.
TEST(Workload, OptimizerStateBytesFollowTheLayoutsDtypes) {
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(DType::bf16, {}).total(), 12);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(DType::fp32, {}).total(), 8);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(DType::fp8, {DType::bf16, DType::bf16, DType::bf16}).total(), 4);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(DType::bf16, {DType::fp16, DType::fp32, DType::bf16}).total(), 2 + 4 + 2);
  EXPECT_DOUBLE_EQ(optimizer_state_bytes(DType::fp16, {DType::fp32, DType::bf16, DType::bf16}).main_copy, 4);
  Cluster c = small_cluster(2, 1, 2);
  Model m = tiny(false, 4, 8);  // fp32
  Layout l = read_layout({{"use_distributed_optimizer", true}, {"exp_avg_sq_dtype", "bf16"}}, "l.json");
  EXPECT_EQ(l.optimizer_precision, (OptimizerPrecision{DType::fp32, DType::fp32, DType::bf16}));
  EXPECT_EQ(read_layout(to_json(l), "again.json").optimizer_precision, l.optimizer_precision);
  try {
    validate_layout(l, m, c, "l.json");
    ADD_FAILURE() << "bf16 optimizer state accepted for an fp32 model";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("l.json: /exp_avg_sq_dtype: expected fp32"), std::string::npos) << e.what();
  }
  try {
    read_layout({{"main_params_dtype", "fp8"}}, "l.json");
    ADD_FAILURE() << "an fp8 main copy accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("l.json: /main_params_dtype"), std::string::npos) << e.what();
  }
  m.dtype = DType::bf16;
  EXPECT_NO_THROW(validate_layout(l, m, c, "l.json"));
}
