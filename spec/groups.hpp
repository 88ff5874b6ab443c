// Which ranks form each group, once for the whole program — Megatron's rank generator as plain
// arithmetic (no MPI): the collectives, the workload, the explorer and `bench coll` all resolve
// groups here.
//
// Ranks are laid out with the first dimension of a layout's `order` varying fastest. The dense
// dimensions are tp, cp, dp, pp (ep has size 1 there). Expert layers have a grid of their own
// over the same ranks, as Megatron-Core v0.15 builds it (parallel_state.py, the expert
// RankGenerator; its "MoE parallel folding"): expert TP, EP, expert-DP and PP in the same order
// with CP's size 1, so an EP group may span the attention's TP, CP and DP ranks. Without EP or an
// expert TP of its own (Layout::folds_experts) the experts use the dense grid. Groups that depend
// on where ranks sit (the building halves) need the cluster: ranks fill the devices of a node, the
// nodes of a building, the buildings in order.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "spec/cluster.hpp"
#include "spec/layout.hpp"

namespace sax {

enum class GroupKind {
  world,  // every rank
  // The parallel dimensions, and the expert data-parallel group (ranks that hold the same
  // experts: the expert grid's DP, into which CP is folded).
  tp,
  cp,
  ep,
  dp,
  pp,
  expert_dp,
  // Gradient sync: with CP the CP ranks hold the same weights, so gradients are reduced over
  // DP×CP (Megatron's data-parallel group "with context parallel"), expert gradients over
  // the expert-DP group (expert_dp_cp names the same members: CP is folded into expert-DP).
  dp_cp,
  expert_dp_cp,
  // The two levels of a hierarchical gradient sync over those groups: the members in this rank's
  // building, and the members at this rank's position inside their buildings, one per building.
  dp_cp_intra_building,
  dp_cp_cross_building,
  expert_dp_cp_intra_building,
  expert_dp_cp_cross_building,
  // Tied embeddings: the first and the last stage of this rank's pipeline (a middle stage's rank
  // is alone in its group).
  embedding,
  // The cluster's buildings: the ranks of one building; one rank per building (the ranks with
  // the same index inside their building).
  intra_building,
  cross_building,
  // The ranks of one node (a node's devices share its NVLink, or its memory on one host).
  intra_node,
  // The expert layers' tensor parallel group (Megatron's --expert-tensor-parallel-size): its
  // ranks all-gather the tokens the dispatch brought and reduce-scatter the experts' output.
  expert_tp,
};
constexpr int kNumGroupKinds = 18;

const char* to_string(GroupKind g);
std::optional<GroupKind> parse_group_kind(const std::string& name);
std::vector<std::string> group_kind_names();
// Whether resolving the kind needs a layout's degrees (all but world and the building groups),
// or where ranks sit (the building halves and the building groups).
bool needs_layout(GroupKind g);
bool needs_cluster(GroupKind g);
// The parallelism whose messages a group carries, as the workload's ops on it name it (the
// expert groups' are EP's or DP's, the tied embedding's PP's); none for the world, building and
// node groups, which only benchmarks use.
std::optional<Dim> carried_dim(GroupKind g);

class RankGrid {
 public:
  // The layout must divide the world size (degrees_rule). Without a cluster the kinds
  // that need one are refused (std::logic_error: a caller's bug, checked before with needs_cluster).
  RankGrid(const Layout& layout, std::int64_t world_size);
  RankGrid(const Layout& layout, const Cluster& cluster);

  std::int64_t world_size() const { return world_; }
  // Members of each group of kind g; of rank 0's group for the kinds whose groups may differ in
  // size (the building kinds with buildings of unequal size, embedding with middle stages).
  std::int64_t size(GroupKind g) const;
  // The rank's index inside its group of kind g (0 .. its group's size − 1).
  std::int64_t coordinate(std::int64_t rank, GroupKind g) const;
  // Members of the rank's group of kind g, in coordinate order (member i has coordinate i).
  std::vector<std::int64_t> group(std::int64_t rank, GroupKind g) const;
  // Every group of kind g, each in coordinate order; the groups partition the ranks.
  std::vector<std::vector<std::int64_t>> all_groups(GroupKind g) const;
  // The pipeline stage of a rank (its pp coordinate).
  std::int64_t stage(std::int64_t rank) const { return coordinate(rank, GroupKind::pp); }
  // The building a rank sits in (needs the cluster).
  int building(std::int64_t rank) const;

 private:
  // Coordinates in the dense space (tp, cp, dp, pp), strides from the order; in the expert space
  // (expert TP, EP, expert-DP, PP) when the layout folds its experts.
  std::array<std::int64_t, 4> sizes_{}, strides_{}, expert_sizes_{}, expert_strides_{};
  std::int64_t world_ = 0;
  bool folded_ = false;
  // First rank of each building (and node), then the world size; empty without a cluster.
  std::vector<std::int64_t> building_start_, node_start_;
  std::int64_t dense_coord(std::int64_t rank, int axis) const { return (rank / strides_[axis]) % sizes_[axis]; }
  std::int64_t expert_coord(std::int64_t rank, int axis) const {
    return (rank / expert_strides_[axis]) % expert_sizes_[axis];
  }
  // The dense kind the expert kind is when the layout does not fold its experts.
  static GroupKind dense_twin(GroupKind g);
  std::vector<std::int64_t> building_half(std::int64_t rank, GroupKind parent, bool intra) const;
};

// The slowest link class any pair of members crosses.
LinkClass group_link_class(const Cluster& cluster, const std::vector<std::int64_t>& members);

}  // namespace sax
