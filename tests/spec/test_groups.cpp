#include <gtest/gtest.h>

#include <set>

#include "spec/groups.hpp"
#include "tests/support/presets.hpp"
#include "tests/support/run.hpp"

using namespace sax;
using sax::test::preset_path;

namespace {
using Groups = std::vector<std::vector<std::int64_t>>;
}  // namespace

TEST(RankGrid, MegatronDefaultOrderOnSixteenRanks) {
  // TP 2, CP 1, PP 2, world 16 → DP 4; order tp-cp-ep-dp-pp (tp fastest, pp slowest).
  RankGrid g(test::layout_of({{"tensor_model_parallel_size", 2}, {"pipeline_model_parallel_size", 2}}), 16);
  EXPECT_EQ(g.all_groups(GroupKind::tp),
            (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  EXPECT_EQ(g.group(0, GroupKind::dp), (std::vector<std::int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(g.group(9, GroupKind::dp), (std::vector<std::int64_t>{9, 11, 13, 15}));
  EXPECT_EQ(g.group(3, GroupKind::pp), (std::vector<std::int64_t>{3, 11}));
  EXPECT_EQ(g.stage(11), 1);
  EXPECT_EQ(g.size(GroupKind::dp), 4);
}

TEST(RankGrid, OrderDecidesWhichDimensionIsContiguous) {
  RankGrid g(test::layout_of(
                 {{"tensor_model_parallel_size", 2}, {"pipeline_model_parallel_size", 2}, {"order", "tp-pp-cp-ep-dp"}}),
             8);
  EXPECT_EQ(g.group(0, GroupKind::pp), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(g.group(0, GroupKind::dp), (std::vector<std::int64_t>{0, 4}));
}

TEST(RankGrid, ExpertGroupsSplitDataParallel) {
  // world 16, TP 2 → DP 8; EP 4: ep-dp puts EP on consecutive DP coordinates.
  Layout inner = test::layout_of({{"tensor_model_parallel_size", 2}, {"expert_model_parallel_size", 4}});
  RankGrid a(inner, 16);
  EXPECT_EQ(a.group(0, GroupKind::ep), (std::vector<std::int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(a.group(0, GroupKind::expert_dp), (std::vector<std::int64_t>{0, 8}));
  Layout outer = test::layout_of(
      {{"tensor_model_parallel_size", 2}, {"expert_model_parallel_size", 4}, {"order", "tp-cp-dp-ep-pp"}});
  RankGrid b(outer, 16);
  EXPECT_EQ(b.group(0, GroupKind::ep), (std::vector<std::int64_t>{0, 4, 8, 12}));
  EXPECT_EQ(b.group(0, GroupKind::expert_dp), (std::vector<std::int64_t>{0, 2}));
}

TEST(RankGrid, EveryKindPartitionsTheRanksAndCoordinatesMatchPositions) {
  for (const char* order : {"tp-cp-ep-dp-pp", "tp-pp-dp-ep-cp", "pp-dp-ep-cp-tp", "cp-ep-dp-tp-pp"}) {
    Layout l = test::layout_of({{"tensor_model_parallel_size", 2},
                                {"context_parallel_size", 2},
                                {"pipeline_model_parallel_size", 2},
                                {"expert_model_parallel_size", 2},
                                {"order", order}});
    RankGrid g(l, 32);  // DP 4
    for (GroupKind k : {GroupKind::tp, GroupKind::cp, GroupKind::ep, GroupKind::dp, GroupKind::pp, GroupKind::expert_dp,
                        GroupKind::dp_cp, GroupKind::expert_dp_cp, GroupKind::expert_tp}) {
      std::set<std::int64_t> all;
      for (const auto& grp : g.all_groups(k)) {
        ASSERT_EQ(static_cast<std::int64_t>(grp.size()), g.size(k)) << order << " " << to_string(k);
        for (std::size_t i = 0; i < grp.size(); ++i) {
          EXPECT_EQ(g.coordinate(grp[i], k), static_cast<std::int64_t>(i)) << order << " " << to_string(k);
          EXPECT_EQ(g.group(grp[i], k), grp);
          all.insert(grp[i]);
        }
      }
      EXPECT_EQ(all.size(), 32u) << order << " " << to_string(k);
    }
  }
}

TEST(RankGrid, GradientGroupsJoinDataAndContextParallel) {
  // TP 2, CP 2, world 16 → DP 4; dp_cp groups hold the 8 ranks that share a TP coordinate.
  RankGrid g(test::layout_of(
                 {{"tensor_model_parallel_size", 2}, {"context_parallel_size", 2}, {"expert_model_parallel_size", 2}}),
             16);
  EXPECT_EQ(g.size(GroupKind::dp_cp), 8);
  EXPECT_EQ(g.group(0, GroupKind::dp_cp), (std::vector<std::int64_t>{0, 2, 4, 6, 8, 10, 12, 14}));
  // The expert grid folds CP: EP takes the CP ranks first, expert-DP the rest (Megatron-Core
  // v0.15's expert RankGenerator gives ep [0, 2], expert dp [0, 4, 8, 12] here).
  EXPECT_EQ(g.size(GroupKind::expert_dp_cp), 4);
  EXPECT_EQ(g.group(0, GroupKind::ep), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(g.group(0, GroupKind::expert_dp_cp), (std::vector<std::int64_t>{0, 4, 8, 12}));
  EXPECT_EQ(g.group(0, GroupKind::expert_tp), (std::vector<std::int64_t>{0, 1}));
}

// Megatron-Core's MoE parallel folding: with an expert TP of 1 the EP group spans the attention's
// TP ranks. Expected groups from Megatron-Core v0.15's RankGenerator (parallel_state.py) for the
// same sizes and order.
TEST(RankGrid, ExpertParallelFoldsOverTensorParallel) {
  Layout l = test::layout_of({{"tensor_model_parallel_size", 2},
                              {"pipeline_model_parallel_size", 2},
                              {"expert_model_parallel_size", 4},
                              {"expert_tensor_parallel_size", 1}});
  RankGrid g(l, 16);  // DP 4, expert-DP 2
  EXPECT_EQ(g.all_groups(GroupKind::ep), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(g.group(0, GroupKind::expert_dp_cp), (std::vector<std::int64_t>{0, 4}));
  EXPECT_EQ(g.group(5, GroupKind::expert_dp), (std::vector<std::int64_t>{1, 5}));
  EXPECT_EQ(g.group(3, GroupKind::expert_tp), (std::vector<std::int64_t>{3}));
  EXPECT_EQ(g.group(3, GroupKind::tp), (std::vector<std::int64_t>{2, 3}));  // the dense grid is unchanged
  EXPECT_EQ(g.group(3, GroupKind::pp), (std::vector<std::int64_t>{3, 11}));
  // Without EP or an expert TP of their own the experts use the dense groups.
  RankGrid d(test::layout_of({{"tensor_model_parallel_size", 2}, {"context_parallel_size", 2}}), 8);
  EXPECT_EQ(d.group(1, GroupKind::expert_dp_cp), d.group(1, GroupKind::dp_cp));
  EXPECT_EQ(d.group(1, GroupKind::expert_tp), d.group(1, GroupKind::tp));
  EXPECT_EQ(d.group(1, GroupKind::ep), (std::vector<std::int64_t>{1}));
}

TEST(RankGrid, LinkClassOfGroupsOnTheLocalTestbed) {
  Cluster c = load_cluster(preset_path("clusters/local-2bld.json"));  // 2 buildings × 1 node × 2
  RankGrid g(test::layout_of({{"tensor_model_parallel_size", 2}, {"pipeline_model_parallel_size", 2}}), 4);
  EXPECT_EQ(group_link_class(c, g.group(0, GroupKind::tp)), LinkClass::intra_node);
  EXPECT_EQ(group_link_class(c, g.group(0, GroupKind::pp)), LinkClass::cross_building);
  RankGrid h(test::layout_of(
                 {{"tensor_model_parallel_size", 2}, {"pipeline_model_parallel_size", 2}, {"order", "pp-tp-cp-ep-dp"}}),
             4);
  EXPECT_EQ(group_link_class(c, h.group(0, GroupKind::tp)), LinkClass::cross_building);
  EXPECT_EQ(group_link_class(c, h.group(0, GroupKind::pp)), LinkClass::intra_node);
}

// Every group kind the workload and bench coll name resolves here, and partitions the ranks.
TEST(RankGrid, EveryKindHasANameAndPartitionsTheRanksOnACluster) {
  json cj = sax::test::preset("clusters/local-2bld.json");
  cj["buildings"] = json::array({{{"name", "a"}, {"nodes", 2}}, {{"name", "b"}, {"nodes", 2}}});
  cj["devices_per_node"] = 4;  // 16 ranks: 2 buildings × 2 nodes × 4
  const Cluster c = read_cluster(cj, "c.json");
  const Layout l = test::layout_of({{"tensor_model_parallel_size", 2},
                                    {"context_parallel_size", 2},
                                    {"pipeline_model_parallel_size", 2},
                                    {"expert_model_parallel_size", 2},
                                    {"order", "tp-cp-ep-dp-pp"}});
  RankGrid g(l, c);
  for (int i = 0; i < kNumGroupKinds; ++i) {
    const GroupKind k = static_cast<GroupKind>(i);
    EXPECT_EQ(parse_group_kind(to_string(k)), k);
    std::set<std::int64_t> all;
    for (const auto& grp : g.all_groups(k)) {
      for (std::size_t j = 0; j < grp.size(); ++j) {
        EXPECT_EQ(g.coordinate(grp[j], k), static_cast<std::int64_t>(j)) << to_string(k);
        EXPECT_EQ(g.group(grp[j], k), grp) << to_string(k);
        EXPECT_TRUE(all.insert(grp[j]).second) << to_string(k) << " puts rank " << grp[j] << " in two groups";
      }
    }
    EXPECT_EQ(all.size(), 16u) << to_string(k);
  }
  EXPECT_FALSE(parse_group_kind("tensor"));
  EXPECT_TRUE(needs_cluster(GroupKind::dp_cp_cross_building));
  EXPECT_FALSE(needs_layout(GroupKind::intra_building));
}

TEST(RankGrid, BuildingHalvesOfTheGradientGroupAndTheEmbeddingGroup) {
  json cj = sax::test::preset("clusters/local-2bld.json");  // 2 buildings × 1 node × 2 ranks
  const Cluster c = read_cluster(cj, "c.json");
  // DP 4 = 2 per building: the halves of a hierarchical sync.
  RankGrid dp(Layout{}, c);
  EXPECT_EQ(dp.group(0, GroupKind::dp_cp), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(dp.group(0, GroupKind::dp_cp_intra_building), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(dp.group(3, GroupKind::dp_cp_intra_building), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(dp.group(1, GroupKind::dp_cp_cross_building), (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(dp.size(GroupKind::dp_cp_cross_building), 2);
  EXPECT_EQ(dp.group(2, GroupKind::intra_building), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(dp.group(2, GroupKind::cross_building), (std::vector<std::int64_t>{0, 2}));
  EXPECT_EQ(dp.group(2, GroupKind::world), (std::vector<std::int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(dp.building(3), 1);
  // PP 4 on 4 ranks: the first and last stage share the tied embedding; middle stages are alone.
  RankGrid pp(test::layout_of({{"pipeline_model_parallel_size", 4}}), c);
  EXPECT_EQ(pp.group(0, GroupKind::embedding), (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(pp.group(3, GroupKind::embedding), (std::vector<std::int64_t>{0, 3}));
  EXPECT_EQ(pp.group(1, GroupKind::embedding), (std::vector<std::int64_t>{1}));
  // Without a cluster the building kinds are a programming error, not a silent answer.
  EXPECT_THROW(RankGrid(Layout{}, 4).group(0, GroupKind::intra_building), std::logic_error);
  EXPECT_THROW(RankGrid(Layout{}, 4).group(0, GroupKind::intra_node), std::logic_error);
}

// A node's ranks: local-4bld has 2 nodes of 2 ranks in each of its 4 buildings, so a building's
// group holds two node groups; the calibrator measures the node's link on them.
TEST(RankGrid, NodeGroupsAreTheRanksOfOneNode) {
  const Cluster c = test::preset_cluster("local-4bld");
  RankGrid g(Layout{}, c);
  EXPECT_EQ(g.group(0, GroupKind::intra_node), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(g.group(6, GroupKind::intra_node), (std::vector<std::int64_t>{6, 7}));
  EXPECT_EQ(g.group(15, GroupKind::intra_node), (std::vector<std::int64_t>{14, 15}));
  EXPECT_EQ(g.group(6, GroupKind::intra_building), (std::vector<std::int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(parse_group_kind("intra_node"), GroupKind::intra_node);
  EXPECT_FALSE(needs_layout(GroupKind::intra_node));
  EXPECT_TRUE(needs_cluster(GroupKind::intra_node));
  for (std::int64_t r = 0; r < c.world_size(); ++r)
    for (std::int64_t peer : g.group(r, GroupKind::intra_node))
      if (peer != r) EXPECT_EQ(c.link_between(r, peer), LinkClass::intra_node) << r << " " << peer;
}
